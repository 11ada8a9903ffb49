#!/usr/bin/env bash
# TCP goodput on loopback: netrig vs iperf3 and iperf2, measured in the same
# run, 1 and 4 connections, netrig with byte verification on and off.
# Prints Gbit/s for each tool and netrig/peer ratios. Not a test: numbers on a
# shared machine are noisy, so compare ratios from one run, never absolutes.
#
# With BASE=<git revision>, that revision's netrig (built in a worktree) is
# measured in the same run too, verifying, and the ratio this/base printed.
#
# Usage: [BASE=rev] bench/tcp.sh [SECONDS_PER_RUN]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5}

. bench/lib.sh
ensure_peers iperf3:iperf3 iperf:iperf
P3=15201 P2=15202 PN=15203

iperf3 -s -p $P3 >/dev/null 2>&1 & PIDS+=($!)
iperf -s -p $P2 >/dev/null 2>&1 & PIDS+=($!)
$NETRIG serve --listen 127.0.0.1:$PN -q & PIDS+=($!)
sleep 1

iperf3_gbps() { # $1 = parallel streams; receiver-side goodput
    iperf3 -c 127.0.0.1 -p $P3 -t "$T" -P "$1" -J > "$WORK/i3.json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f" % (d["end"]["sum_received"]["bits_per_second"]/1e9))' "$WORK/i3.json"
}
iperf2_gbps() { # CSV report, one line per stream (id in column 6). Some
    # versions add a sum line with id -1; iperf 2.1.8 does not with -P 4, so
    # sum the streams unless a sum line is there.
    iperf -c 127.0.0.1 -p $P2 -t "$T" -P "$1" -y C > "$WORK/i2.csv"
    python3 - "$WORK/i2.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) >= 9]
total = [float(r[8]) for r in rows if r[5].strip() == "-1"]
print("%.2f" % ((total[0] if total else sum(float(r[8]) for r in rows)) / 1e9) if rows else "nan")
PY
}
netrig_gbps() { # $1 = connections, $2 = verify level, [$3 = binary, $4 = port]; bytes the server received (and verified)
    ${3:-$NETRIG} tcp 127.0.0.1 -p "${4:-$PN}" -P "$1" -n 1T -t "${T}s" \
        --verify "$2" -q --json "$WORK/n.json" > "$WORK/n.out" 2>&1 || { echo "netrig tcp failed:" >&2; cat "$WORK/n.out" >&2; }
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["result"]; s=sum(x[1]["bytes_received"] for x in d["servers"] if x[1]); print("%.2f" % (s*8/d["duration_secs"]/1e9))' "$WORK/n.json"
}

printf '%-6s %10s %10s %14s %14s %12s %12s %12s\n' conns iperf3 iperf2 netrig-verify netrig-noverif n.v/iperf3 n.v/iperf2 verify-cost
for P in 1 4; do
    a=$(iperf3_gbps $P); sleep 0.5
    b=$(iperf2_gbps $P); sleep 0.5
    v=$(netrig_gbps $P data); sleep 0.5
    n=$(netrig_gbps $P connection); sleep 0.5
    numbers "tcp -P $P" "$a" "$b" "$v" "$n"
    cost=$(python3 -c "import sys; v,n=float(sys.argv[1]),float(sys.argv[2]); print('%.0f%%' % (100*(1-v/n)) if n else 'n/a')" "$v" "$n")
    printf '%-6s %10s %10s %14s %14s %12s %12s %12s\n' "$P" "$a" "$b" "$v" "$n" "$(ratio "$v" "$a")" "$(ratio "$v" "$b")" "$cost"
done
echo "(Gbit/s of goodput at the receiver; verify-cost = throughput lost to checking every byte)"
if [ -n "${BASE:-}" ]; then
    git worktree add -q --detach "$WORK/base" "$BASE"
    (cd "$WORK/base" && cargo build --release -q)
    trap 'cleanup; git worktree remove --force "$WORK/base" 2>/dev/null || true' EXIT
    PB=15204
    "$WORK/base/target/release/netrig" serve --listen 127.0.0.1:$PB -q & PIDS+=($!)
    sleep 1
    echo
    printf '%-6s %14s %14s %10s\n' conns "this-verify" "$BASE-verify" this/base
    for P in 1 4; do
        for _ in 1 2; do
            v=$(netrig_gbps $P data); sleep 0.5
            b=$(netrig_gbps $P data "$WORK/base/target/release/netrig" $PB); sleep 0.5
            numbers "tcp -P $P vs $BASE" "$v" "$b"
            printf '%-6s %14s %14s %10s\n' "$P" "$v" "$b" "$(ratio "$v" "$b")"
        done
    done
fi
bench_done
