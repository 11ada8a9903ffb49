#!/usr/bin/env bash
# Mutation testing of the code that computes verdicts and counts: runs
# cargo-mutants on the protocol-layer files with their unit tests only, and
# prints caught / missed per file. Slow (several seconds per mutant, about an
# hour for everything), so not part of CI; run it after changing these files,
# or pass the files to test, e.g. tests/mutants.sh src/units.rs.
# Exclusions (only mutants shown equivalent) live in .cargo/mutants.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files=(src/udp/analyze.rs src/udp/track.rs src/outcome.rs src/proto.rs src/units.rs
           src/pattern.rs src/budget.rs src/auth.rs src/relay/limits.rs
           src/conversation.rs src/refusal.rs src/sockopts.rs src/net/tcpinfo.rs src/cpu.rs
           src/udp/marks.rs src/spec.rs src/udp/frames.rs src/udp/sum.rs src/udp/iso.rs src/load/model.rs src/html/svg.rs
           src/html/tcp.rs src/html/plot.rs src/html/layout.rs src/rr/echo.rs src/rr/interval.rs
           src/stats.rs src/report/udp_cells.rs src/udp/hist.rs src/udp/clock.rs src/server/lines.rs
           src/server/sources.rs src/merge.rs src/merge/read.rs src/merge/summary.rs src/merge/grid.rs src/hdr.rs src/iperf3/mod.rs src/iperf3/json.rs src/iperf3/udp.rs
           src/html/merge.rs src/rr/answer.rs src/udp/gro.rs src/udp/reception.rs src/udp/intake.rs
           src/iperf3/client.rs src/iperf2/mod.rs src/mesh/peer.rs src/mesh/pick.rs src/mesh/answer.rs
           src/mesh/node.rs src/iperf3_client/report.rs src/rr/hist.rs src/mesh/metrics.rs
           src/server/metrics.rs src/report/tcp.rs src/report/udp.rs src/report/udp_multi.rs
           src/report/rr.rs src/report/load.rs src/report/merge.rs src/report/analysis.rs
           src/report/connection_row.rs src/greeting.rs src/names.rs
           src/udp/setup.rs src/udp/outflow.rs src/rr/stream_answer.rs
           src/rr/probe.rs src/tcp/drive.rs src/tcp/machine.rs src/tcp/schedule.rs
           src/tcp/session.rs src/rr/run.rs src/load/run.rs src/report/mod.rs
           src/report/stream.rs src/report/tcp_info_file.rs src/html/kinds.rs
           src/udp/profile.rs src/udp/scenario.rs src/relay/impair.rs
           src/udp/client_machine.rs)
fi
args=()
for f in "${files[@]}"; do args+=(-f "$f"); done
status=0
# Unit tests take about a second; a mutant that makes them loop is stopped
# at 60 s: under load a failing property test shrinking its input can take
# tens of seconds, which a shorter limit would report as a timeout.
# `-C --lib` builds only the library's test binary for each mutant, not the
# binary and every integration test: 5-15 s a mutant instead of ~35 here.
cargo mutants --no-shuffle -j "${MUTANTS_JOBS:-2}" --timeout 60 --profile mutants "${args[@]}" -C --lib || status=$?
# Caught and missed per file, from cargo-mutants' outcome lists.
for f in "${files[@]}"; do
    caught=$(grep -c "^$f:" mutants.out/caught.txt 2>/dev/null || true)
    timeout=$(grep -c "^$f:" mutants.out/timeout.txt 2>/dev/null || true)
    missed=$(grep -c "^$f:" mutants.out/missed.txt 2>/dev/null || true)
    total=$((caught + timeout + missed))
    pct=$(( total > 0 ? 100 * (caught + timeout) / total : 100 ))
    printf '%-24s %4d viable  %4d caught  %4d missed  %3d%%\n' "$f" "$total" "$((caught + timeout))" "$missed" "$pct"
done
exit $status
