#!/usr/bin/env bash
# Latency under load (issue 16) on a shaped path: namespaces A — R — B in a
# line, R forwarding through a tbf (RATE, LATENCY, BURST) towards B, the
# server in B. Compares `netrig load` (upload phase, cubic) with what users do
# by hand without it: iperf3 saturating the same link while irtt probes
# alongside (flent needs netperf, which Debian does not ship; crusader is not
# installable here). Prints the idle and loaded round trips side by side, the
# increase, and netrig's RPM. Needs root (ip netns, tc).
# Not a test: one run on a shared machine; compare the columns.
#
# Usage: [RATE=20mbit] [LATENCY=200ms] [BURST=32kb] bench/load.sh [SECONDS]  (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-10}
RATE=${RATE:-20mbit}
LATENCY=${LATENCY:-200ms}
BURST=${BURST:-32kb}

. bench/lib.sh
ensure_peers iperf3:iperf3 irtt:irtt

id=$$
A=nlA$id R=nlR$id B=nlB$id
teardown() { ip netns del $A 2>/dev/null || true; ip netns del $R 2>/dev/null || true; ip netns del $B 2>/dev/null || true; }
trap 'teardown; cleanup' EXIT
for ns in $A $R $B; do ip netns add $ns; ip -n $ns link set lo up; done
ip link add la$id type veth peer name lr$id
ip link set la$id netns $A; ip link set lr$id netns $R
ip link add rb$id type veth peer name lb$id
ip link set rb$id netns $R; ip link set lb$id netns $B
ip -n $A addr add 10.77.1.1/24 dev la$id; ip -n $R addr add 10.77.1.2/24 dev lr$id
ip -n $R addr add 10.77.2.1/24 dev rb$id; ip -n $B addr add 10.77.2.2/24 dev lb$id
for pair in "$A la$id" "$R lr$id" "$R rb$id" "$B lb$id"; do set -- $pair; ip -n "$1" link set "$2" up; done
ip -n $A route add default via 10.77.1.2
ip -n $B route add default via 10.77.2.1
ip netns exec $R sysctl -qw net.ipv4.ip_forward=1
ip netns exec $R tc qdisc add dev rb$id root tbf rate "$RATE" burst "$BURST" latency "$LATENCY"
echo "path: A -> R (tbf rate $RATE burst $BURST latency $LATENCY) -> B; upload for ${T}s"

ip netns exec $B "$NETRIG" serve --listen 10.77.2.2:4796 -q & PIDS+=($!)
ip netns exec $B iperf3 -s -p 5299 >/dev/null 2>&1 & PIDS+=($!)
ip netns exec $B irtt server -b 10.77.2.2:2112 >/dev/null 2>&1 & PIDS+=($!)
sleep 1

# netrig load: idle 3 s, then the upload phase.
ip netns exec $A "$NETRIG" load 10.77.2.2:4796 --idle 3s --phase-time "${T}s" --phases upload \
    -C cubic -q --json "$WORK/load.json"
read -r n_idle n_loaded n_inc n_rpm n_up <<<"$(python3 - "$WORK/load.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
ph = {p["phase"]: p for p in r["phases"]}
i, u = ph["idle"], ph["upload"]
print(i["udp"]["p50_ms"], u["udp"]["p50_ms"], u["increase_ms"],
      u["responsiveness"]["rpm"], u["up_bps"] / 1e6)
EOF
)"

# By hand: irtt idle, then irtt while iperf3 saturates the same link.
irtt_p50() { # $1 = seconds; median RTT in ms
    ip netns exec $A irtt client -i 100ms -d "$1s" -Q -o "$WORK/irtt.json" 10.77.2.2:2112 >/dev/null
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['stats']['rtt']['median']/1e6)" "$WORK/irtt.json"
}
h_idle=$(irtt_p50 3)
ip netns exec $A iperf3 -c 10.77.2.2 -p 5299 -t $((T + 2)) -C cubic -J > "$WORK/iperf3.json" &
IPERF=$!
sleep 2
h_loaded=$(irtt_p50 "$T")
wait $IPERF
h_up=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['end']['sum_received']['bits_per_second']/1e6)" "$WORK/iperf3.json")
h_inc=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$h_idle" "$h_loaded")
numbers "netrig load" "$n_idle" "$n_loaded" "$n_inc" "$n_rpm" "$n_up"
numbers "iperf3+irtt" "$h_idle" "$h_loaded" "$h_inc" "$h_up"

printf '%-14s %10s %12s %12s %10s %8s\n' tool "idle ms" "loaded ms" "+ms" "up Mbit/s" RPM
printf '%-14s %10.2f %12.2f %12.2f %10.1f %8.0f\n' "netrig load" "$n_idle" "$n_loaded" "$n_inc" "$n_up" "$n_rpm"
printf '%-14s %10.2f %12.2f %12.2f %10.1f %8s\n' "iperf3 + irtt" "$h_idle" "$h_loaded" "$h_inc" "$h_up" "-"
echo "loaded +ms, netrig / iperf3+irtt: $(ratio "$n_inc" "$h_inc")"
bench_done
