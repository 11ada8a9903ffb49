#!/usr/bin/env bash
# The spike behind netrig's event core (issue 14, docs/design.md): the same
# connection work on mio and on tokio (bench/spike/, one loop or one
# current-thread runtime per thread), measured in one run against the C loop
# of bench/churn.c:
#  1. churn: connect / 64-byte request / 2-byte reply / close, one at a time,
#     every client (C, mio, tokio) against every server (C, mio, tokio on
#     2 threads): completed connections per second;
#  2. idle connections: N held open against the mio and the tokio server,
#     the server's RSS and threads before and after, per connection.
# Not a test: compare ratios from one run, never absolute numbers.
#
# Usage: bench/spike.sh [SECONDS_PER_RUN] [HELD]   (default 5 and 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5}
N=${2:-10000}

. bench/lib.sh
cc -O2 -o "$WORK/churn" bench/churn.c
(cd bench/spike && cargo build --release -q)
SPIKE=bench/spike/target/release/netrig-spike
# Each held connection is a descriptor at both ends (the hard limit here is 20,000).
ulimit -n "$(ulimit -Hn)"

listening() { # PORT: waits until something listens there
    for _ in $(seq 100); do
        ss -ltnH "sport = :$1" | grep -q . && return 0
        sleep 0.05
    done
    echo "bench: nothing listens on $1" >&2
    exit 1
}
server() { # KIND PORT: starts it, sets SRV to its pid
    case $1 in
        c) "$WORK/churn" server "$2" & ;;
        *) "$SPIKE" server "$1" "$2" 2 & ;;
    esac
    SRV=$!
    PIDS+=("$SRV")
    listening "$2"
}
client() { # KIND PORT: prints connections per second
    case $1 in
        c) "$WORK/churn" client 127.0.0.1 "$2" "$T" 64 2 ;;
        *) "$SPIKE" client "$1" 127.0.0.1 "$2" "$T" ;;
    esac | awk '{print $1}'
}

echo "== churn: connections per second, one at a time, ${T}s each"
printf '%-14s %10s %10s %10s\n' "client \\ server" c mio tokio
declare -A RATE
port=15400
for cl in c mio tokio; do
    row=()
    for sv in c mio tokio; do
        port=$((port + 1))
        server "$sv" "$port"
        r=$(client "$cl" "$port")
        kill "$SRV" 2>/dev/null || true
        numbers "churn $cl/$sv" "$r"
        RATE[$cl/$sv]=$r
        row+=("$r")
    done
    printf '%-14s %10s %10s %10s\n' "$cl" "${row[@]}"
done
echo "server mio / tokio (C client):  $(ratio "${RATE[c/mio]}" "${RATE[c/tokio]}")"
echo "server mio / C (C client):      $(ratio "${RATE[c/mio]}" "${RATE[c/c]}")"
echo "server tokio / C (C client):    $(ratio "${RATE[c/tokio]}" "${RATE[c/c]}")"
echo "client mio / tokio (C server):  $(ratio "${RATE[mio/c]}" "${RATE[tokio/c]}")"
echo "client mio / C (C server):      $(ratio "${RATE[mio/c]}" "${RATE[c/c]}")"
echo "client tokio / C (C server):    $(ratio "${RATE[tokio/c]}" "${RATE[c/c]}")"

echo "== idle connections: $N held against each server"
rss() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }
threads() { awk '/Threads/{print $2}' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }
declare -A PER
for sv in mio tokio; do
    port=$((port + 1))
    server "$sv" "$port"
    before=$(rss "$SRV")
    "$SPIKE" hold 127.0.0.1 "$port" "$N" 60 > "$WORK/hold.out" &
    HOLD=$!
    PIDS+=("$HOLD")
    # Held when the client says so and the server has accepted them all.
    for _ in $(seq 600); do
        grep -q held "$WORK/hold.out" && [ "$(fds "$SRV")" -ge "$N" ] && break
        sleep 0.1
    done
    after=$(rss "$SRV")
    open=$(fds "$SRV")
    per=$(python3 -c "print('%.2f' % (($after - $before) / $N))")
    numbers "held $sv" "$before" "$after" "$per"
    PER[$sv]=$per
    echo "$sv: $open descriptors, $(threads "$SRV") threads, RSS $before -> $after KiB: $per KiB per connection"
    kill "$HOLD" "$SRV" 2>/dev/null || true
    wait "$HOLD" 2>/dev/null || true
done
echo "KiB per idle connection, mio / tokio: $(ratio "${PER[mio]}" "${PER[tokio]}")"
bench_done
