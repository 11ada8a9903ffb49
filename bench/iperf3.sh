#!/usr/bin/env bash
# iperf3 interop goodput on loopback (issue 31), from one run, alternating
# the three set-ups REPS times (median of each):
#   (a) iperf3 client -> netrig serve --iperf3-port   vs   iperf3 client -> iperf3 -s
#   (b) netrig tcp --iperf3 -> iperf3 -s               vs   iperf3 client -> iperf3 -s
# Goodput is what the receiving server counted (iperf3's sum_received; for
# (b) the iperf3 server's count from its results). Prints Gbit/s and the
# ratios (target for (a): within 5%, i.e. >= 0.95). Not a test: compare
# ratios from one run on a quiet machine.
#
# Usage: [REPS=3] [STREAMS=1] bench/iperf3.sh [SECONDS_PER_RUN]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-3}
REPS=${REPS:-3}
STREAMS=${STREAMS:-1}

. bench/lib.sh
ensure_peers iperf3:iperf3
P3=${PORT0:-15391} PN=$((P3 + 1)) PI=$((P3 + 2))

# listening PORT: whether something listens on 127.0.0.1:PORT (a probe
# connection would count as a test).
listening() { python3 - "$1" <<'PY'
import sys
port = ":%04X" % int(sys.argv[1])
rows = open("/proc/net/tcp").read().splitlines()[1:] + open("/proc/net/tcp6").read().splitlines()[1:]
sys.exit(0 if any(r.split()[1].endswith(port) and r.split()[3] == "0A" for r in rows) else 1)
PY
}
wait_port() { for _ in $(seq 500); do listening "$1" && return 0; sleep 0.02; done; echo "bench: port $1 never listened" >&2; exit 1; }

iperf3 -s -B 127.0.0.1 -p $P3 >/dev/null 2>&1 & PIDS+=($!)
"$NETRIG" serve -q --listen 127.0.0.1:$PN --iperf3-port $PI >/dev/null 2>&1 & PIDS+=($!)
wait_port $P3; wait_port $PI

# iperf3 client -> PORT: the receiver's Gbit/s.
i3() { iperf3 -c 127.0.0.1 -p "$1" -t "$T" -P "$STREAMS" -J >"$WORK/i3-$1.json" 2>&1 &&
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['end']['sum_received']['bits_per_second']/1e9)" "$WORK/i3-$1.json"; }
# netrig tcp --iperf3 -> iperf3 -s: the iperf3 server's count, Gbit/s.
nr() { "$NETRIG" tcp --iperf3 127.0.0.1:$P3 -t "$T" -P "$STREAMS" -q --json "$WORK/nr.json" &&
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['result']; print(r['servers'][0][1]['bytes_received']*8/r['duration_secs']/1e9)" "$WORK/nr.json"; }

A=() B=() C=()
for _ in $(seq "$REPS"); do
    A+=("$(i3 $PI || echo nan)")
    B+=("$(i3 $P3 || echo nan)")
    C+=("$(nr || echo nan)")
done
median() { python3 -c "import sys,statistics; print('%.2f' % statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
ma=$(median "${A[@]}") mb=$(median "${B[@]}") mc=$(median "${C[@]}")
numbers goodput "$ma" "$mb" "$mc"
echo "TCP, $STREAMS stream(s), ${T}s x $REPS, Gbit/s at the receiving server (median):"
echo "  iperf3 -> netrig serve --iperf3-port : $ma   (runs: ${A[*]})"
echo "  iperf3 -> iperf3 -s                  : $mb   (runs: ${B[*]})"
echo "  netrig tcp --iperf3 -> iperf3 -s     : $mc   (runs: ${C[*]})"
echo "ratio (a) netrig serve / iperf3 -s     : $(ratio "$ma" "$mb")   (target >= 0.95)"
echo "ratio (b) netrig client / iperf3 client: $(ratio "$mc" "$mb")"
bench_done
