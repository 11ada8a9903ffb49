#!/usr/bin/env bash
# Scale (issue 14): connection churn against a minimal C
# connect/request/response/close loop (bench/churn.c, built with cc), and
# concurrency: one client and one server process holding CONNS verified
# connections, then CLIENTS client processes holding PER_CLIENT each over
# SERVERS server processes (100,000 by default), with the threads,
# descriptors and memory of every process at the peak and the user-space
# bytes per connection.
# With BASE=<git revision>, the same runs of that revision are measured in
# the same run and the ratios printed (e.g. BASE=4f4668d, the last main with
# a thread per connection in the client).
# Runs with netrig's default timeouts and --throttle: on this 2-core machine
# 60 processes starve each other of CPU while the connections open, and the
# runs hold because opening keeps pace with what the servers admit (a
# connection holds a --throttle place until its data hello is answered) and
# a deadline that comes due looks at its socket once more before it fails
# (README, "Timeouts on a busy machine").
# Each concurrency run also prints the kernel's TCP memory at its highest
# against tcp_mem's pressure threshold, and the TCP counters (listen
# overflows, prunes, timeouts) that moved: what stops a run that loses
# connections. No sysctl is changed: the runs use the kernel's defaults.
# Measured (PARTS=many CLIENTS=60 PER_CLIENT=16667 SERVERS=60, own
# autogroup): 1,000,020 of 1,000,020 at once after 108 s, 0 errors, kernel
# TCP memory at most 1,332 of 1,499 MiB with whole bursts behind the hellos
# (843ff3e). With at most 8 KiB before the ack (708e5d0, reverted: it
# halved tcp -n 32K -P 1's connections per second) once after 116 s with 0
# errors and at most 390 MiB, once 1,000,015 with 5 'data hello: timed out'
# and at most 158 MiB; CLIENTS=30 SERVERS=30: 500,010 after 43 s, 0 errors.
# Not a test: figures on a shared machine are noisy; compare ratios.
#
# Usage: [BASE=rev] [CONNS=19500] [CLIENTS=6 PER_CLIENT=16667 SERVERS=6 HOLD=20s]
#        [BASE_CONNS=3000] [PARTS="churn one many"] [MIN_AVAIL_MB=3072] [CLIENT_FLAGS=...] [KEEP=dir]
#        bench/scale.sh [SECONDS]   (default 5)
# PARTS picks the runs: churn, one (one process a side), many (CLIENTS x
# PER_CLIENT over SERVERS); e.g. PARTS=many CLIENTS=30 PER_CLIENT=16667
# SERVERS=30 for 500,000. The machine is shared: a run stops (its clients
# killed) when the memory available falls under MIN_AVAIL_MB. CLIENT_FLAGS go
# to every client of the concurrency runs (e.g. --throttle 500).
# (100,000 connections need six processes a side here: 20,000 descriptors each.
# HOLD, the time between a connection's two bursts, may exceed the idle
# timeouts, which do not count a wait for the next burst; it must exceed the
# time to open them all for all to be open at once: by default 20 s, or one
# second per 5,000 connections when that is longer.)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5}
CONNS=${CONNS:-19500}
CLIENTS=${CLIENTS:-6}
PER_CLIENT=${PER_CLIENT:-16667}
SERVERS=${SERVERS:-6}
HOLD=${HOLD:-$(( CLIENTS * PER_CLIENT / 5000 > 20 ? CLIENTS * PER_CLIENT / 5000 : 20 ))s}
BASE_CONNS=${BASE_CONNS:-3000}
PARTS=" ${PARTS:-churn one many} "
MIN_AVAIL_MB=${MIN_AVAIL_MB:-3072}

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
cpu_of() { # $1 pid: user + system CPU ticks so far
    awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}
status_of() { # $1 pid, $2 field of /proc/PID/status (kB or count)
    awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status" 2>/dev/null || echo 0
}
# The kernel's TCP counters that say why connections were lost under load
# (this network namespace's): listen queues overflowing, receive queues
# pruned under TCP memory pressure, retransmission timeouts. "name value" a line.
KCOUNTERS="ListenOverflows ListenDrops TCPMemoryPressures PruneCalled RcvPruned TCPRcvQDrop TCPAbortOnMemory TCPTimeouts TCPBacklogDrop"
tcp_counters() {
    awk -v want=" $KCOUNTERS " '$1 == "TcpExt:" { if (!h) { for (i = 2; i <= NF; i++) n[i] = $i; h = 1 }
        else for (i = 2; i <= NF; i++) if (index(want, " " n[i] " ")) print n[i], $i }' /proc/net/netstat
}
# Pages of memory the kernel's TCP sockets hold (all namespaces).
tcp_pages() { awk '$1 == "TCP:" {for (i = 2; i < NF; i++) if ($i == "mem") print $(i + 1)}' /proc/net/sockstat; }

if [[ $PARTS == *" churn "* ]]; then
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
fi

echo
# concurrency NAME BIN CLIENTS PER_CLIENT SERVERS HOLD: CLIENTS client processes,
# each holding PER_CLIENT connections spread over SERVERS server processes,
# every connection sending two 32 KiB bursts HOLD apart so all are open at once.
concurrency() {
    local name=$1 bin=$2 clients=$3 per=$4 servers=$5 hold=$6
    local want=$((clients * per)) targets=() spids=() cpids=() binds
    echo "== concurrency ($name): $clients client(s) x $per connections over $servers server(s) = $want"
    for _ in $(seq "$servers"); do
        next_port
        "$bin" serve --listen 127.0.0.1:$P -q --max-conns-per-client 1000000 --max-conns 1000000 \
            --max-duration 600s & PIDS+=($!); spids+=($!)
        targets+=("127.0.0.1:$P")
    done
    sleep 0.5
    # The processes' own memory before connections: the servers now, and a
    # client holding a single connection.
    local sbase=0 cbase q
    for q in "${spids[@]}"; do sbase=$((sbase + $(status_of "$q" VmRSS))); done
    "$bin" tcp "${targets[0]}" -P 1 --iterations 1 -n 64K --burst-size 32K --burst-period 1s \
        -q > /dev/null 2>&1 & q=$!
    sleep 0.5
    cbase=$(( $(status_of $q VmRSS) * clients ))
    wait $q || true
    for c in $(seq "$clients"); do
        # Each client connects from its own loopback address: 28k ports per
        # server port. (A session is bound to one client address.)
        binds=127.0.$c.1
        "$bin" tcp "${targets[@]}" -B "$binds" -P "$per" --iterations 1 -n 64K --burst-size 32K \
            --burst-period "$hold" --interval 500ms ${CLIENT_FLAGS:-} --json "$WORK/conc$c.json" > "$WORK/conc$c.out" 2>&1 &
        cpids+=($!); PIDS+=($!)
    done
    local peak=0 t0 reached= cth=0 crss=0 cfd=0 sth=0 srss=0 sfd=0 mused=0 kpeak=0 kp kat=0 kopen=
    local -A cpu=()
    local kbefore
    kbefore=$(tcp_counters)
    t0=$(date +%s.%N)
    while kill -0 "${cpids[@]}" 2>/dev/null; do
        local now=0 t avail
        # The machine is shared: the run stops before it runs out of memory.
        avail=$(awk '$1 == "MemAvailable:" {print int($2 / 1024)}' /proc/meminfo)
        if [ "$avail" -lt "$MIN_AVAIL_MB" ]; then
            echo "   stopped: $avail MiB of memory left (MIN_AVAIL_MB=$MIN_AVAIL_MB), after a peak of $peak connections"
            kill "${cpids[@]}" 2>/dev/null || true
            break
        fi
        # CPU of every process, last seen (a client's is gone once it exits).
        for q in "${cpids[@]}" "${spids[@]}"; do
            t=$(cpu_of "$q")
            if [ "${t:-0}" -gt "${cpu[$q]:-0}" ]; then cpu[$q]=$t; fi
        done
        kp=$(tcp_pages)
        if [ "${kp:-0}" -gt "$kpeak" ]; then
            kpeak=$kp kat=$(python3 -c "import sys,time; print('%.0f' % (time.time() - float(sys.argv[1])))" "$t0")
        fi
        for c in $(seq "$clients"); do
            now=$((now + $(awk '$1 ~ /^[0-9.]+$/ && NF >= 8 {v=$6} END {print v+0}' "$WORK/conc$c.out")))
        done
        if [ "$now" -gt "$peak" ]; then
            peak=$now cth=0 crss=0 cfd=0 sth=0 srss=0 sfd=0
            # The whole machine's memory in use, the kernel's sockets included.
            mused=$(awk '$1 == "MemTotal:" {t=$2} $1 == "MemAvailable:" {a=$2} END {print int((t-a)/1024)}' /proc/meminfo)
            for q in "${cpids[@]}"; do
                cth=$((cth + $(status_of "$q" Threads))); crss=$((crss + $(status_of "$q" VmRSS)))
                cfd=$((cfd + $({ ls /proc/$q/fd 2>/dev/null || true; } | wc -l)))
            done
            for q in "${spids[@]}"; do
                sth=$((sth + $(status_of "$q" Threads))); srss=$((srss + $(status_of "$q" VmRSS)))
                sfd=$((sfd + $({ ls /proc/$q/fd 2>/dev/null || true; } | wc -l)))
            done
            [ "$now" -ge "$want" ] && [ -z "$reached" ] && reached=$(date +%s.%N) kopen=$kpeak
        fi
        sleep 0.5
    done
    local ok=0 errs=0 codes=""
    for c in $(seq "$clients"); do
        wait "${cpids[$((c - 1))]}" && codes+="0 " || codes+="$? "
        read -r o e <<<"$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["result"]["totals"]; print(t["completed"], t["net_errors"]+t["data_errors"]+t["cancelled"])' "$WORK/conc$c.json" 2>/dev/null || echo "0 nan")"
        ok=$((ok + o)); errs=$(python3 -c "print(int('$errs') + int(float('$e')))" 2>/dev/null || echo nan)
    done
    local secs cper sper
    secs=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])) if sys.argv[2] else 'n/a')" "$t0" "${reached:-}")
    cper=$(python3 -c "import sys; p=int(sys.argv[2]); print('%.1f' % ((int(sys.argv[1])-int(sys.argv[3]))/p) if p else 'nan')" "$crss" "$peak" "$cbase")
    sper=$(python3 -c "import sys; p=int(sys.argv[2]); print('%.1f' % ((int(sys.argv[1])-int(sys.argv[3]))/p) if p else 'nan')" "$srss" "$peak" "$sbase")
    numbers "concurrency $name" "$peak" "$ok" "$errs" "$cper" "$sper"
    echo "   highest concurrency $peak of $want (all after ${secs}s); completed $ok, errors $errs; exit codes $codes"
    echo "   clients: $cth threads, $cfd descriptors, RSS $((crss / 1024)) MiB: $cper KiB per connection beyond the process's own"
    echo "   servers: $sth threads, $sfd descriptors, RSS $((srss / 1024)) MiB: $sper KiB per connection beyond the process's own"
    echo "   machine: $mused MiB in use at the peak (processes and kernel)"
    local pg
    pg=$(getconf PAGESIZE)
    read -r _ kpress _ < /proc/sys/net/ipv4/tcp_mem
    echo "   kernel TCP memory: at most $((kpeak * pg / 1048576)) MiB, ${kat}s in${kopen:+; at most $((kopen * pg / 1048576)) MiB until all were open} (tcp_mem's pressure threshold: $((kpress * pg / 1048576)) MiB)"
    # What the kernel counted during the run, where not 0 (other processes'
    # loopback traffic in this namespace counts too).
    local kd
    kd=$(join -a 2 <(sort <<<"$kbefore") <(tcp_counters | sort) \
        | awk 'NF == 3 && $3 != $2 {printf "%s %d, ", $1, $3 - $2} NF == 2 && $2 != 0 {printf "%s %d, ", $1, $2}')
    kd=${kd%, }
    echo "   kernel counters: ${kd:-none of $KCOUNTERS}"
    python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('   500,000 connections at this rate: %.1f GiB in clients, %.1f GiB in servers (plus the kernel\'s socket memory)' % (a*500000/1048576, b*500000/1048576))" "$cper" "$sper"
    local hz ccpu=0 scpu=0 t
    hz=$(getconf CLK_TCK)
    for q in "${cpids[@]}"; do ccpu=$((ccpu + ${cpu[$q]:-0})); done
    for q in "${spids[@]}"; do
        t=$(cpu_of "$q")
        if [ "${t:-0}" -gt "${cpu[$q]:-0}" ]; then cpu[$q]=$t; fi
        scpu=$((scpu + ${cpu[$q]:-0}))
    done
    python3 -c "import sys,time; c,s,hz,t0=map(float,sys.argv[1:]); print('   CPU: clients %.1f s, servers %.1f s, over %.0f s' % (c/hz, s/hz, time.time()-t0))" "$ccpu" "$scpu" "$hz" "$t0"
    # The first failures' reasons, most common first.
    # Each client's first failure, as it said it.
    grep -hiE 'timed out|refused|reset|broken|failed' "$WORK"/conc*.out \
        | grep -vE ' burst |succeeded|SuccessfulConnections|TimeSlice' \
        | sed -E 's/[0-9]+(\.[0-9]+)*/N/g' | sort | uniq -c | sort -rn | head -5 || true
    for q in "${spids[@]}"; do kill "$q" 2>/dev/null || true; wait "$q" 2>/dev/null || true; done
    # KEEP=<dir>: every client's output and JSON kept there (their status
    # rows say when connections failed).
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$WORK"/conc*.out "$WORK"/conc*.json "$KEEP"/ 2>/dev/null || true; fi
}

# One process each side up to this machine's 20,000 descriptors, then
# 100,000 across processes (200,000 sockets in one kernel).
if [[ $PARTS == *" one "* ]]; then concurrency this "$NETRIG" 1 "$CONNS" 1 "${T}s"; fi
if [[ $PARTS == *" many "* ]]; then
    concurrency this "$NETRIG" "$CLIENTS" "$PER_CLIENT" "$SERVERS" "$HOLD"
fi
if [ -n "${BASE:-}" ] && [[ $PARTS == *" one "* ]]; then
    # A thread per connection: as many as its threads allow, for the ratios.
    concurrency "$BASE" "${BINS[1]}" 1 "$BASE_CONNS" 1 "${T}s"
fi
bench_done
