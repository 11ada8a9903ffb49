#!/usr/bin/env bash
# What a round trip costs a server that serves many clients on a fixed set of
# threads, before any tool's own work: sockperf's ping-pong client against
#   sockperf   its own server (blocking recvfrom/sendto on its one socket),
#   block      bench/echo.c doing the same (checks the echo is as cheap),
#   epoll      bench/echo.c on an edge-triggered epoll set, read until it
#              would block: the least an event-loop server does;
# and netrig rr against netrig serve beside them. 64 B messages, every
# process in the CPU layout of bench/rr.sh (default: same, everything on CPU
# 0, where a round trip is the CPU work of both ends). Prints the median
# p50/p99 (us) of REPS alternating runs and each server's ratio to
# sockperf's: epoll/sockperf is the floor no event-loop server goes under;
# netrig/epoll is what netrig adds above it (its client included). Not a
# test.
#
# Usage: bench/rr_floor.sh [SECONDS_PER_RUN]   (default 2)
#        REPS=7 LAYOUTS="same split" PROTOS=udp bench/rr_floor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-2}
REPS=${REPS:-5}
LAYOUTS=${LAYOUTS:-same}
PROTOS=${PROTOS:-udp tcp}

. bench/lib.sh
ensure_peers sockperf:sockperf
cc -O2 -o "$WORK/echo" bench/echo.c
NCPU=$(nproc)
PORT=15400

one() { # $1 layout, $2 proto, $3 server, $4 port; prints "p50 p99"
    local srv="taskset -c 0" cli="taskset -c 0" ex="" pid PORT=$4
    [ "$1" = split ] && cli="taskset -c $(( NCPU > 1 ? 1 : 0 ))"
    [ "$2" = tcp ] && ex="--tcp"
    case "$3" in
        sockperf) $srv sockperf server -p $PORT $ex >/dev/null 2>&1 & pid=$! ;;
        block|epoll) $srv "$WORK/echo" "$2" "$3" $PORT & pid=$! ;;
        netrig) $srv $NETRIG serve --listen 127.0.0.1:$PORT -q & pid=$! ;;
    esac
    PIDS+=("$pid")
    sleep 0.5
    if [ "$3" = netrig ]; then
        $cli $NETRIG rr 127.0.0.1 -p $PORT --proto "$2" -l 64 --reply 64 \
            -n $(( T * 60000 )) -q --json "$WORK/n.json" >/dev/null 2>&1 || true
        rr_figures "$WORK/n.json" | cut -d" " -f1,2
    else
        $cli sockperf ping-pong -i 127.0.0.1 -p $PORT $ex -m 64 -t "$T" --full-rtt > "$WORK/sp.txt" 2>&1 || true
        sockperf_figures "$WORK/sp.txt" | cut -d" " -f1,2
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

for L in $LAYOUTS; do
    for P in $PROTOS; do
        for r in $(seq "$REPS"); do
            for S in sockperf block epoll netrig; do
                # A fresh port each run: a TCP one just closed may linger.
                PORT=$((PORT + 1))
                echo "$S $(one "$L" "$P" "$S" "$PORT")" >> "$WORK/$L-$P.txt"
            done
        done
        echo "== $P 64 B, CPU layout $L, median of $REPS runs each"
        python3 - "$WORK/$L-$P.txt" <<'PY'
import statistics as st, sys
runs = {}
for line in open(sys.argv[1]):
    s, a, b = line.split()
    runs.setdefault(s, []).append((float(a), float(b)))
med = {s: [st.median(x[i] for x in v) for i in (0, 1)] for s, v in runs.items()}
print("%-9s %8s %8s   %s" % ("server", "p50_us", "p99_us", "ratio to sockperf (p50, p99)"))
for s in ("sockperf", "block", "epoll", "netrig"):
    m = med[s]
    print("%-9s %8.2f %8.2f   %.2f %.2f" % (s, m[0], m[1], m[0] / med["sockperf"][0], m[1] / med["sockperf"][1]))
e = med["epoll"]
print("netrig/epoll (what netrig adds above the floor): p50 %.2f, p99 %.2f" % (med["netrig"][0] / e[0], med["netrig"][1] / e[1]))
PY
    done
done
