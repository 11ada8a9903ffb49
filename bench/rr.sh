#!/usr/bin/env bash
# Round-trip latency on loopback: netrig rr vs sockperf ping-pong (--full-rtt)
# and qperf tcp_lat/udp_lat, measured in the same run, 64 B and 16 KiB
# messages (echoed at the same size). Prints p50/p99 round trip (us) and
# transactions per second, and netrig/peer ratios (for latency, < 1 is better).
# qperf reports only a mean one-way latency: its round trip is shown as 2x that
# and it has no percentiles. For UDP, a netrig-ts row adds --rx-timestamps
# (round trips end at the kernel's receive time). A second table compares
# busy polling: netrig --busy-poll vs sockperf --nonblocked, with sockperf's
# kernel SO_BUSY_POLL (--lls) beside them. Not a test: compare ratios within
# one run.
#
# Every tool runs in the same CPU layout, as taskset places it, one table per
# layout. Left to the scheduler, a blocking round trip on a small VM is either
# two same-CPU switches (~12 us here) or two cross-CPU wake-ups of halted
# vCPUs (~50 us), by luck of placement, and a tool's ratio says which it drew:
#   same   every server and client on CPU 0: a round trip is the CPU work of
#          both ends, back to back, so the ratio is the cost of each tool;
#   split  servers on CPU 0, clients on CPU 1: the cross-CPU wake-up path;
#   none   no pinning (the scheduler's draw).
#
# Usage: bench/rr.sh [SECONDS_PER_RUN]   (default 3)
#        SIZES="16384" bench/rr.sh   measures only those message sizes
#        LAYOUTS="same" bench/rr.sh  only those layouts (default: same split)
#        (a shorter run when comparing builds: alternate NETRIG=... runs).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-3}
SIZES=${SIZES:-64 16384}
LAYOUTS=${LAYOUTS:-same split}

. bench/lib.sh
ensure_peers sockperf:sockperf qperf:qperf
PS_UDP=15331 PS_TCP=15332 PQ=15333 PN=15334
NCPU=$(nproc)
# The CPU-list prefixes for servers ($SRV) and clients ($CLI) of a layout.
layout() {
    case "$1" in
        same) SRV="taskset -c 0"; CLI="taskset -c 0" ;;
        split) SRV="taskset -c 0"; CLI="taskset -c $(( NCPU > 1 ? 1 : 0 ))" ;;
        none) SRV=""; CLI="" ;;
        *) echo "bench/rr.sh: unknown layout '$1' (same, split, none)" >&2; exit 2 ;;
    esac
}
SERVERS=()
start_servers() {
    $SRV sockperf server -p $PS_UDP >/dev/null 2>&1 & SERVERS+=($!)
    $SRV sockperf server -p $PS_TCP --tcp >/dev/null 2>&1 & SERVERS+=($!)
    $SRV qperf -lp $PQ >/dev/null 2>&1 & SERVERS+=($!)
    $SRV $NETRIG serve --listen 127.0.0.1:$PN -q & SERVERS+=($!)
    PIDS+=("${SERVERS[@]}")
    sleep 1
}
stop_servers() {
    kill "${SERVERS[@]}" 2>/dev/null || true
    for p in "${SERVERS[@]}"; do wait "$p" 2>/dev/null || true; done
    SERVERS=()
}

# Each prints: p50_us p99_us tps
sockperf_run() { # $1 proto, $2 size, [$3... extra sockperf flags]
    local extra=""; local port=$PS_UDP
    if [ "$1" = tcp ]; then extra="--tcp"; port=$PS_TCP; fi
    $CLI sockperf ping-pong -i 127.0.0.1 -p $port $extra -m "$2" -t "$T" --full-rtt "${@:3}" > "$WORK/sp.txt" 2>&1 || true
    sockperf_figures "$WORK/sp.txt"
}
qperf_run() { # $1 proto, $2 size: mean only
    $CLI qperf 127.0.0.1 -lp $PQ -t "$T" -m "$2" "${1}_lat" > "$WORK/q.txt" 2>&1 || true
    python3 - "$WORK/q.txt" <<'PY'
import re, sys
m = re.search(r"latency\s+=\s+([\d.]+) (us|ms|ns)", open(sys.argv[1]).read())
if not m:
    print("nan nan nan"); sys.exit()
us = float(m.group(1)) * {"us": 1, "ms": 1000, "ns": 0.001}[m.group(2)]
print("%.2f - %.0f" % (2 * us, 1e6 / (2 * us)))
PY
}
netrig_run() { # $1 proto, $2 size, $3 iterations, [$4 extra flag]
    $CLI $NETRIG rr 127.0.0.1 -p $PN --proto "$1" -l "$2" --reply "$2" -n "$3" ${4:-} -q --json "$WORK/n.json" >/dev/null 2>&1 || true
    rr_figures "$WORK/n.json"
}

for L in $LAYOUTS; do
    layout "$L"
    start_servers
    echo "== CPU layout: $L (${SRV:-unpinned} servers, ${CLI:-unpinned} clients)"
    printf '%-5s %-6s %-9s %10s %10s %10s   %s\n' proto size tool p50_us p99_us tps "netrig/peer (p50, p99, tps)"
    for P in tcp udp; do
        for S in $SIZES; do
            N=$(( S > 1000 ? 30000 : 100000 ))
            read -r n50 n99 ntps < <(netrig_run "$P" "$S" "$N"); sleep 0.3
            read -r s50 s99 stps < <(sockperf_run "$P" "$S"); sleep 0.3
            read -r q50 _ qtps < <(qperf_run "$P" "$S"); sleep 0.3
            numbers "rr $P $S B" "$n50" "$n99" "$ntps" "$s50" "$s99" "$stps" "$q50" "$qtps"
            printf '%-5s %-6s %-9s %10s %10s %10s\n' "$P" "$S" netrig "$n50" "$n99" "$ntps"
            printf '%-5s %-6s %-9s %10s %10s %10s   %s %s %s\n' "$P" "$S" sockperf "$s50" "$s99" "$stps" "$(ratio "$n50" "$s50")" "$(ratio "$n99" "$s99")" "$(ratio "$ntps" "$stps")"
            printf '%-5s %-6s %-9s %10s %10s %10s   %s %s %s\n' "$P" "$S" qperf "$q50(mean)" - "$qtps" "$(ratio "$n50" "$q50")" - "$(ratio "$ntps" "$qtps")"
            if [ "$P" = udp ]; then
                # Round trips ending at the kernel's receive time (SO_TIMESTAMPNS):
                # what the path took, without the client's wake-up.
                read -r t50 t99 ttps < <(netrig_run udp "$S" "$N" --rx-timestamps); sleep 0.3
                numbers "rr udp $S B --rx-timestamps" "$t50" "$t99" "$ttps"
                printf '%-5s %-6s %-9s %10s %10s %10s   %s %s %s (vs sockperf)\n' "$P" "$S" netrig-ts "$t50" "$t99" "$ttps" "$(ratio "$t50" "$s50")" "$(ratio "$t99" "$s99")" "$(ratio "$ttps" "$stps")"
            fi
        done
    done

    # A spinning end holds the CPU the other end needs: busy polling is
    # measured only with each end on its own CPU.
    if [ "$L" != same ]; then
        # Busy polling: netrig --busy-poll (non-blocking socket, user-space spinning)
        # against sockperf --nonblocked (the same, with its epoll at zero timeout),
        # and sockperf --lls 50 (kernel SO_BUSY_POLL, 50 us) beside them: on loopback
        # no NAPI context feeds the socket, so the kernel has nothing to busy-poll.
        echo "== Busy polling (netrig --busy-poll vs sockperf --nonblocked; sockperf --lls 50 is kernel SO_BUSY_POLL)"
        printf '%-5s %-6s %-13s %10s %10s %10s   %s\n' proto size tool p50_us p99_us tps "netrig/peer (p50, p99, tps)"
        for P in tcp udp; do
            for S in $SIZES; do
                N=$(( S > 1000 ? 30000 : 100000 ))
                read -r n50 n99 ntps < <(netrig_run "$P" "$S" "$N" --busy-poll); sleep 0.3
                read -r s50 s99 stps < <(sockperf_run "$P" "$S" --nonblocked); sleep 0.3
                read -r l50 l99 ltps < <(sockperf_run "$P" "$S" --lls 50); sleep 0.3
                numbers "rr busy $P $S B" "$n50" "$n99" "$ntps" "$s50" "$s99" "$stps" "$l50" "$l99" "$ltps"
                printf '%-5s %-6s %-13s %10s %10s %10s\n' "$P" "$S" netrig-busy "$n50" "$n99" "$ntps"
                printf '%-5s %-6s %-13s %10s %10s %10s   %s %s %s\n' "$P" "$S" sockperf-nonbl "$s50" "$s99" "$stps" "$(ratio "$n50" "$s50")" "$(ratio "$n99" "$s99")" "$(ratio "$ntps" "$stps")"
                printf '%-5s %-6s %-13s %10s %10s %10s   %s %s %s\n' "$P" "$S" sockperf-lls "$l50" "$l99" "$ltps" "$(ratio "$n50" "$l50")" "$(ratio "$n99" "$l99")" "$(ratio "$ntps" "$ltps")"
            done
        done
    fi
    stop_servers
    echo
done
bench_done
