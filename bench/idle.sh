#!/usr/bin/env bash
# Idle cost (issue 27): CLIENTS client processes hold PER_CLIENT connections
# each over SERVERS server processes (100,000 by default), every connection
# sending one 32 KiB burst and then waiting HOLD for the next; once all are
# open, the CPU the processes use over WINDOW seconds of holding, per side,
# in % of one core (utime + stime from /proc/PID/stat).
# Not a test: figures on a shared machine are noisy.
#
# Usage: [CLIENTS=6 PER_CLIENT=16667 SERVERS=6 HOLD=120s WINDOW=20] bench/idle.sh
# (20,000 descriptors per process here: 100,000 need six processes a side.)
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${CLIENTS:-6}
PER_CLIENT=${PER_CLIENT:-16667}
SERVERS=${SERVERS:-6}
HOLD=${HOLD:-120s}
WINDOW=${WINDOW:-20}

. bench/lib.sh
port=15700
ticks() { # total utime + stime of the pids, in clock ticks
    local t=0 q v
    for q in "$@"; do
        v=$(awk '{print $14 + $15}' "/proc/$q/stat" 2>/dev/null || echo 0)
        t=$((t + v))
    done
    echo "$t"
}
want=$((CLIENTS * PER_CLIENT))
spids=() cpids=() targets=()
for _ in $(seq "$SERVERS"); do
    port=$((port + 1))
    "$NETRIG" serve --listen 127.0.0.1:$port -q --max-conns-per-client 1000000 --max-conns 1000000 \
        --max-duration 600s & PIDS+=($!); spids+=($!)
    targets+=("127.0.0.1:$port")
done
sleep 0.5
for c in $(seq "$CLIENTS"); do
    "$NETRIG" tcp "${targets[@]}" -B "127.0.$c.1" -P "$PER_CLIENT" --iterations 1 -n 64K \
        --burst-size 32K --burst-period "$HOLD" --interval 500ms > "$WORK/idle$c.out" 2>&1 &
    PIDS+=($!); cpids+=($!)
done
t0=$(date +%s)
now=0 last=0 still=0
while [ "$now" -lt "$want" ] && [ "$still" -lt 20 ]; do
    sleep 1
    now=0
    for c in $(seq "$CLIENTS"); do
        now=$((now + $(awk '$1 ~ /^[0-9.]+$/ && NF >= 8 {v=$6} END {print v+0}' "$WORK/idle$c.out")))
    done
    if [ "$now" -gt "$last" ]; then last=$now still=0; else still=$((still + 1)); fi
done
echo "== idle: $now of $want connections open after $(( $(date +%s) - t0 ))s ($CLIENTS clients, $SERVERS servers)"
sleep 2
hz=$(getconf CLK_TCK)
c0=$(ticks "${cpids[@]}") s0=$(ticks "${spids[@]}")
sleep "$WINDOW"
c1=$(ticks "${cpids[@]}") s1=$(ticks "${spids[@]}")
held=0
for c in $(seq "$CLIENTS"); do
    held=$((held + $(awk '$1 ~ /^[0-9.]+$/ && NF >= 8 {v=$6} END {print v+0}' "$WORK/idle$c.out")))
done
cpu() { python3 -c "import sys; print('%.2f' % (100.0 * int(sys.argv[1]) / int(sys.argv[2]) / int(sys.argv[3])))" "$1" "$hz" "$WINDOW"; }
cc=$(cpu $((c1 - c0))) sc=$(cpu $((s1 - s0)))
numbers idle "$cc" "$sc"
echo "   holding $held connections for ${WINDOW}s: clients ${cc}% of one core, servers ${sc}% of one core"
for q in "${cpids[@]}" "${spids[@]}"; do kill "$q" 2>/dev/null || true; done
bench_done
