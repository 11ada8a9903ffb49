#!/usr/bin/env bash
# Mutation testing of the code that computes verdicts and counts: runs
# cargo-mutants on the protocol-layer files with their unit tests only, and
# prints caught / missed per file. Slow (several seconds per mutant, about an
# hour for everything), so not part of CI; run it after changing these files,
# or pass the files to test, e.g. tests/mutants.sh src/protocol/units.rs.
# Exclusions (only mutants shown equivalent) live in .cargo/mutants.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files=(src/protocol/udp/analyze.rs src/protocol/udp/track.rs src/protocol/outcome.rs src/protocol/proto.rs src/protocol/frame.rs src/protocol/units.rs
           src/protocol/pattern.rs src/protocol/budget.rs src/protocol/auth.rs src/relay/limits.rs
           src/protocol/conversation.rs src/protocol/refusal.rs src/protocol/sockopts.rs src/net/tcpinfo.rs src/protocol/cpu.rs
           src/protocol/udp/marks.rs src/protocol/spec.rs src/protocol/udp/frames.rs src/protocol/udp/sum.rs src/protocol/udp/iso.rs src/protocol/load/model.rs src/protocol/html/svg.rs
           src/protocol/html/tcp.rs src/protocol/html/plot.rs src/protocol/html/layout.rs src/protocol/rr/echo.rs src/protocol/rr/interval.rs
           src/protocol/stats.rs src/report/udp_cells.rs src/protocol/udp/hist.rs src/protocol/udp/clock.rs src/server/lines.rs
           src/server/sources.rs src/protocol/merge.rs src/protocol/merge/read.rs src/protocol/merge/summary.rs src/protocol/merge/grid.rs src/protocol/hdr.rs src/protocol/iperf3/mod.rs src/protocol/iperf3/json.rs src/protocol/iperf3/udp.rs
           src/protocol/html/merge.rs src/protocol/rr/answer.rs src/protocol/udp/gro.rs src/protocol/udp/reception.rs src/protocol/udp/intake.rs
           src/protocol/iperf3/client.rs src/protocol/iperf2/mod.rs src/protocol/mesh/peer.rs src/protocol/mesh/pick.rs src/protocol/mesh/answer.rs
           src/protocol/mesh/node.rs src/iperf3_client/report.rs src/protocol/rr/hist.rs src/mesh/metrics.rs
           src/server/metrics.rs src/report/tcp.rs src/report/udp.rs src/report/udp_multi.rs
           src/report/rr.rs src/report/load.rs src/report/merge.rs src/report/analysis.rs
           src/report/connection_row.rs src/protocol/greeting.rs src/protocol/names.rs
           src/protocol/udp/setup.rs src/protocol/udp/outflow.rs src/protocol/rr/stream_answer.rs
           src/protocol/rr/probe.rs src/tcp/drive.rs src/protocol/tcp/machine.rs src/protocol/tcp/machine/read_plan.rs
           src/protocol/tcp/machine/ending.rs src/protocol/tcp/machine/state.rs src/protocol/tcp/schedule.rs
           src/tcp/session.rs src/rr/run.rs src/load/run.rs src/report/mod.rs
           src/report/stream.rs src/report/tcp_info_file.rs src/protocol/html/kinds.rs
           src/protocol/udp/profile.rs src/protocol/udp/scenario.rs src/protocol/relay/impair.rs
           src/protocol/udp/client_machine.rs src/protocol/udp/client_setup.rs src/server/account.rs src/protocol/udp/pace.rs
           src/protocol/rr/seq_answer.rs src/protocol/compact.rs src/protocol/asking.rs)
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
