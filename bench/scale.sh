#!/usr/bin/env bash
# Scale (issue 14): connection churn against a minimal C
# connect/request/response/close loop (bench/churn.c, built with cc), and
# concurrency: one client process holding CONNS verified connections spread
# over SERVERS server processes, with the threads, descriptors and memory of
# every process at the peak and the user-space bytes per connection.
# With BASE=<git revision>, the same runs of that revision are measured in
# the same run and the ratios printed (e.g. BASE=4f4668d, the last main with
# a thread per connection in the client).
# Not a test: figures on a shared machine are noisy; compare ratios.
#
# Usage: [BASE=rev] [CONNS=19500] [SERVERS=5] bench/scale.sh [SECONDS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5}
CONNS=${CONNS:-19500}
SERVERS=${SERVERS:-5}

. bench/lib.sh
cc -O2 -o "$WORK/churn" bench/churn.c
BINS=("$NETRIG")
NAMES=(this)
if [ -n "${BASE:-}" ]; then
    git worktree add -q --detach "$WORK/base" "$BASE"
    (cd "$WORK/base" && cargo build --release -q)
    BINS+=("$WORK/base/target/release/netrig")
    NAMES+=("$BASE")
    trap 'cleanup; git worktree remove --force "$WORK/base" 2>/dev/null || true' EXIT
fi

port=15300
next_port() { port=$((port + 1)); P=$port; }  # sets P (no subshell: the count must persist)
status_of() { # $1 pid, $2 field of /proc/PID/status (kB or count)
    awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status" 2>/dev/null || echo 0
}

echo "== churn: completed connections per second, one at a time, ${T}s each"
next_port
"$WORK/churn" server "$P" & PIDS+=($!)
sleep 0.3
c_rate=$("$WORK/churn" client 127.0.0.1 "$P" "$T" 64 2 | awk '{print $1}')
numbers "C loop" "$c_rate"
printf '%-28s %10s %8s\n' what conn/s "vs C"
printf '%-28s %10s %8s\n' "C connect/request/close" "$c_rate" 1.00
for i in "${!BINS[@]}"; do
    bin=${BINS[$i]} name=${NAMES[$i]}
    next_port
    "$bin" serve --listen 127.0.0.1:$P -q --max-conns-per-client 100000 --max-conns 100000 & PIDS+=($!)
    sleep 0.5
    "$bin" crr 127.0.0.1:$P -n 100000000 -t "${T}s" -q --json "$WORK/crr.json" >/dev/null 2>&1 || true
    crr=$(python3 -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["result"]["per_sec"])' "$WORK/crr.json")
    "$bin" tcp 127.0.0.1:$P -n 64 -P 1 -t "${T}s" -q --json "$WORK/t64.json" >/dev/null 2>&1 || true
    t64=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["result"]; print("%.0f" % (r["totals"]["completed"]/r["duration_secs"]))' "$WORK/t64.json")
    numbers "churn $name" "$crr" "$t64"
    printf '%-28s %10s %8s\n' "crr ($name)" "$crr" "$(ratio "$crr" "$c_rate")"
    printf '%-28s %10s %8s\n' "tcp -n 64 -P 1 ($name)" "$t64" "$(ratio "$t64" "$c_rate")"
done

echo
echo "== concurrency: one client, $CONNS verified connections over $SERVERS servers"
echo "   (each connection sends two 32 KiB bursts ${T}s apart, so all are open at once)"
for i in "${!BINS[@]}"; do
    bin=${BINS[$i]} name=${NAMES[$i]}
    targets=() spids=()
    for _ in $(seq "$SERVERS"); do
        next_port
        "$bin" serve --listen 127.0.0.1:$P -q --max-conns-per-client 100000 --max-conns 100000 \
            --max-duration 600s & PIDS+=($!); spids+=($!)
        targets+=("127.0.0.1:$P")
    done
    sleep 0.5
    "$bin" tcp "${targets[@]}" -P "$CONNS" --iterations 1 -n 64K --burst-size 32K \
        --burst-period "${T}s" --interval 200ms --json "$WORK/conc.json" > "$WORK/conc.out" 2>&1 &
    cpid=$!
    peak=0 cth=0 cfd=0 crss=0 t0=$(date +%s.%N) reached_at=
    while kill -0 $cpid 2>/dev/null; do
        fl=$(awk '$1 ~ /^[0-9.]+$/ && NF >= 8 {v=$6} END {print v+0}' "$WORK/conc.out")
        if [ "$fl" -gt "$peak" ]; then
            peak=$fl
            cth=$(status_of $cpid Threads) crss=$(status_of $cpid VmRSS)
            cfd=$(ls /proc/$cpid/fd 2>/dev/null | wc -l)
            sth=0 srss=0
            for s in "${spids[@]}"; do
                sth=$((sth + $(status_of "$s" Threads))); srss=$((srss + $(status_of "$s" VmRSS)))
            done
            [ "$fl" -ge "$CONNS" ] && [ -z "$reached_at" ] && reached_at=$(date +%s.%N)
        fi
        sleep 0.2
    done
    wait $cpid && code=0 || code=$?
    read -r ok errs <<<"$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["result"]["totals"]; print(t["completed"], t["net_errors"]+t["data_errors"]+t["cancelled"])' "$WORK/conc.json" 2>/dev/null || echo "0 nan")"
    secs=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])) if sys.argv[2] else 'n/a')" "$t0" "${reached_at:-}")
    per_conn=$(python3 -c "import sys; p=int(sys.argv[2]); print('%.1f' % (int(sys.argv[1])/p) if p else 'nan')" "$crss" "$peak")
    numbers "concurrency $name" "$peak" "$ok" "$errs" "$per_conn"
    echo "$name: exit $code; peak in flight $peak (all $CONNS after ${secs}s); completed $ok, errors $errs"
    echo "   client: $cth threads, $cfd descriptors, RSS $((crss / 1024)) MiB = $per_conn KiB per connection"
    echo "   servers ($SERVERS): $sth threads, RSS $((srss / 1024)) MiB"
    python3 -c "import sys; k=float(sys.argv[1]); print('   500,000 connections at this rate: %.1f GiB of client memory' % (k*500000/1048576))" "$per_conn"
    for s in "${spids[@]}"; do kill "$s" 2>/dev/null || true; wait "$s" 2>/dev/null || true; done
done
echo "(a client process is limited to 20,000 descriptors here; the servers still run a"
echo " thread per connection, so the 100,000-connection run waits for the server's event core)"
bench_done
