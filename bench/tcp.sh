#!/usr/bin/env bash
# TCP goodput and CPU cost on loopback: netrig vs iperf3 and iperf2, measured
# in the same run at 1, 4 and 8 connections, netrig with byte verification
# on (--verify data, the default) and off (--verify connection). Runs
# alternate tool by tool, REPS times; each figure is the median.
# Prints per tool: Gbit/s of goodput at the receiver, CPU seconds of each end
# (client: the process's rusage; server: its /proc utime+stime over the run,
# bench/cpu.py) and CPU-s per GiB moved (both ends together); then the
# ratios the issue asks for: netrig verified goodput / best peer (> 1 is
# better) and CPU-s per GiB / best peer (< 1 is better). Not a test: numbers
# on a shared machine are noisy, so compare ratios from one run.
#
# NETRIG_B=<binary>: that netrig is measured in the same run too (verifying),
# and its ratio to this one printed (A/B of a build profile or a lever);
# NETRIG_ARGS / NETRIG_B_ARGS add arguments to each one's client (e.g.
# NETRIG_B=target/release/netrig NETRIG_B_ARGS="-l 128K" measures a lever).
# BASE=<git revision>: the same for that revision, built in a worktree.
#
# Usage: [REPS=3] [CONNS="1 4 8"] [NETRIG_B=bin|BASE=rev] bench/tcp.sh [SECONDS_PER_RUN]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-3}
REPS=${REPS:-3}
CONNS=${CONNS:-1 4 8}

. bench/lib.sh
ensure_peers iperf3:iperf3 iperf:iperf
P3=${PORT0:-15291} P2=$((P3 + 1)) PN=$((P3 + 2)) PB=$((P3 + 3))

iperf3 -s -p $P3 >/dev/null 2>&1 & S3=$!; PIDS+=($S3)
iperf -s -p $P2 >/dev/null 2>&1 & S2=$!; PIDS+=($S2)
$NETRIG serve --listen 127.0.0.1:$PN -q & SN=$!; PIDS+=($SN)
B=${NETRIG_B:-}
if [ -n "${BASE:-}" ]; then
    git worktree add -q --detach "$WORK/base" "$BASE"
    (cd "$WORK/base" && cargo build --release -q)
    trap 'cleanup; git worktree remove --force "$WORK/base" 2>/dev/null || true' EXIT
    B="$WORK/base/target/release/netrig"
fi
if [ -n "$B" ]; then
    "$B" serve --listen 127.0.0.1:$PB -q & SB=$!; PIDS+=($SB)
fi
sleep 1
ROWS=$WORK/rows

# Each appends "conns tool bytes secs client_cpu server_cpu" to $ROWS.
iperf3_run() {
    read -r c s _ < <(bench/cpu.py $S3 "$WORK/i3.json" iperf3 -c 127.0.0.1 -p $P3 -t "$T" -P "$1" -J)
    python3 - "$WORK/i3.json" "$1" "$c" "$s" >> "$ROWS" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["end"]["sum_received"]
print(sys.argv[2], "iperf3", e["bytes"], e["seconds"], sys.argv[3], sys.argv[4])
PY
}
iperf2_run() { # CSV, one line per stream (id in column 6); sum them unless a sum line (id -1) is there
    read -r c s _ < <(bench/cpu.py $S2 "$WORK/i2.csv" iperf -c 127.0.0.1 -p $P2 -t "$T" -P "$1" -y C)
    python3 - "$WORK/i2.csv" "$1" "$c" "$s" >> "$ROWS" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) >= 9]
tot = [r for r in rows if r[5].strip() == "-1"]
use = tot if tot else rows
secs = max(float(r[6].split("-")[1]) for r in use) if use else float("nan")
print(sys.argv[2], "iperf2", sum(int(r[7]) for r in use) if use else "nan", secs, sys.argv[3], sys.argv[4])
PY
}
netrig_run() { # $1 conns, $2 verify level, $3 label, [$4 binary, $5 port, $6 server pid, $7 extra args]
    # shellcheck disable=SC2086 # the extra arguments are words
    read -r c s _ < <(bench/cpu.py "${6:-$SN}" "$WORK/n.out" "${4:-$NETRIG}" tcp 127.0.0.1 -p "${5:-$PN}" -P "$1" -n 1T -t "${T}s" \
        --verify "$2" -q --json "$WORK/n.json" ${7-${NETRIG_ARGS:-}}) || { echo "netrig tcp failed:" >&2; cat "$WORK/n.out" >&2; }
    python3 - "$WORK/n.json" "$1" "$3" "$c" "$s" >> "$ROWS" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))["result"]
    b = sum(x[1]["bytes_received"] for x in d["servers"] if x[1])
    print(sys.argv[2], sys.argv[3], b, d["duration_secs"], sys.argv[4], sys.argv[5])
except Exception:
    print(sys.argv[2], sys.argv[3], "nan nan", sys.argv[4], sys.argv[5])
PY
}

: > "$ROWS"
for P in $CONNS; do
    for _ in $(seq "$REPS"); do
        iperf3_run "$P"; sleep 0.3
        iperf2_run "$P"; sleep 0.3
        netrig_run "$P" data netrig-verify; sleep 0.3
        netrig_run "$P" connection netrig-count; sleep 0.3
        if [ -n "$B" ]; then netrig_run "$P" data netrig-B "$B" $PB "$SB" "${NETRIG_B_ARGS:-}"; sleep 0.3; fi
    done
done

python3 - "$ROWS" <<'PY' || BENCH_FAILED=1
import math, statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    p, tool, b, secs, c, s = line.split()
    rows.setdefault((int(p), tool), []).append((float(b), float(secs), float(c), float(s)))
bad = False
def med(xs):
    return st.median(xs) if xs else float("nan")
print("%-5s %-13s %8s %8s %8s %10s" % ("conns", "tool", "Gbit/s", "cli-CPU", "srv-CPU", "CPU-s/GiB"))
summary = []
for p in sorted({k[0] for k in rows}):
    fig = {}
    for tool in ["iperf3", "iperf2", "netrig-verify", "netrig-count", "netrig-B"]:
        r = rows.get((p, tool))
        if not r:
            continue
        g = med([b * 8 / t / 1e9 for b, t, _, _ in r])
        cpg = med([(c + s) / (b / 2**30) for b, _, c, s in r])
        fig[tool] = (g, cpg)
        if any(math.isnan(x) for x in (g, cpg)):
            bad = True
        print("%-5d %-13s %8.2f %8.2f %8.2f %10.3f" % (p, tool, g, med([x[2] for x in r]), med([x[3] for x in r]), cpg))
    best_g = max(fig["iperf3"][0], fig["iperf2"][0])
    best_c = min(fig["iperf3"][1], fig["iperf2"][1])
    v, n = fig["netrig-verify"], fig["netrig-count"]
    line = "%-5d goodput verify/best-peer %.2f  count/best-peer %.2f   CPU-s/GiB verify/best-peer %.2f  count/best-peer %.2f" % (
        p, v[0] / best_g, n[0] / best_g, v[1] / best_c, n[1] / best_c)
    if "netrig-B" in fig:
        bb = fig["netrig-B"]
        line += "   this/B goodput %.2f CPU-s/GiB %.2f" % (v[0] / bb[0], v[1] / bb[1])
    summary.append(line)
print()
print("Ratios (medians of %s runs; goodput > 1 and CPU < 1 are netrig ahead):" % len(next(iter(rows.values()))))
for l in summary:
    print(l)
print("(Gbit/s of goodput at the receiver; CPU in seconds per run; CPU-s/GiB = both ends' CPU seconds per GiB received)")
sys.exit(1 if bad else 0)
PY
bench_done
