#!/usr/bin/env bash
# UDP on loopback: netrig vs iperf3 and iperf2, measured in the same run.
#  1. Maximum rate at 64 B and 1400 B datagrams: received pps, Gbit/s and loss.
#  2. Pacing at 10k and 100k pps (1000 B): achieved pps and receiver jitter
#     (on loopback, receiver jitter is mostly the sender's pacing error), plus
#     netrig's own departure-error figures.
# Not a test: compare ratios from one run, never absolute numbers.
#
# Usage: bench/udp.sh [SECONDS_PER_RUN]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-3}

. bench/lib.sh
ensure_peers iperf3:iperf3 iperf:iperf
P3=15311 P2=15312 PN=15313
iperf3 -s -p $P3 >/dev/null 2>&1 & PIDS+=($!)
iperf -s -u -e -p $P2 >/dev/null 2>&1 & PIDS+=($!)
# The server's default --max-rate (40 Gbit/s) would refuse the maximum-rate runs.
$NETRIG serve --listen 127.0.0.1:$PN -v 0 --max-rate 1000G & PIDS+=($!)
sleep 1

# Each prints: pps Gbit/s loss% jitter_us
iperf3_run() { # $1 size, $2 rate (0 = unlimited)
    iperf3 -c 127.0.0.1 -p $P3 -u -b "$2" -l "$1" -t "$T" -J > "$WORK/i3.json" 2>/dev/null || true
    python3 - "$WORK/i3.json" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))["end"]["sum"]
    got = s["packets"] - s["lost_packets"]
    print("%.0f %.3f %.2f %.1f" % (got / s["seconds"], s["bits_per_second"] / 1e9 * got / max(s["packets"], 1), s["lost_percent"], s["jitter_ms"] * 1e3))
except Exception as e:
    print("nan nan nan nan")
PY
}
iperf2_run() { # $1 size, $2 rate (e.g. 10G or 10000pps)
    iperf -c 127.0.0.1 -p $P2 -u -e -b "$2" -l "$1" -t "$T" > "$WORK/i2.txt" 2>&1 || true
    python3 - "$WORK/i2.txt" "$T" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
line = next((l for l in text.splitlines()[::-1] if "/sec" in l and "ms" in l and "/" in l.split("ms")[1]), "")
m = re.search(r"([\d.]+) ([KMG]?)bits/sec\s+([\d.]+) ms\s+(\d+)/(\d+)", line)
if not m:
    print("nan nan nan nan"); sys.exit()
mult = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
lost, total = int(m.group(4)), int(m.group(5))
secs = float(sys.argv[2])
print("%.0f %.3f %.2f %.1f" % ((total - lost) / secs, float(m.group(1)) * mult / 1e9, 100 * lost / max(total, 1), float(m.group(3)) * 1e3))
PY
}
netrig_run() { # $1 size, $2 netrig rate/gap flags...
    local size=$1; shift
    $NETRIG udp 127.0.0.1 -p $PN -l "$size" "$@" -t "${T}s" -q --json "$WORK/n.json" >/dev/null 2>&1 || true
    python3 - "$WORK/n.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["result"]
    t, s = r["totals"], r["sender"]
    secs = s["duration_secs"]
    print("%.0f %.3f %.2f %.1f %.2f %.1f" % (t["unique"] / secs, t["bytes"] * 8 / secs / 1e9, 100 * t["lost"] / max(s["packets"], 1), t["jitter_us"], s["gap_error_mean_us"], s["late_p99_us"]))
except Exception:
    print("nan nan nan nan nan nan")
PY
}

echo "== Maximum rate (received)"
printf '%-6s %-8s %12s %10s %8s %10s\n' size tool pps Gbit/s loss% ratio-pps
for S in 64 1400; do
    read -r n_pps n_g n_l _ _ _ < <(netrig_run "$S" -b 100G --pacing spin); sleep 0.5
    read -r a_pps a_g a_l _ < <(iperf3_run "$S" 0); sleep 0.5
    read -r b_pps b_g b_l _ < <(iperf2_run "$S" 100G); sleep 0.5
    numbers "max rate $S B" "$n_pps" "$n_g" "$n_l" "$a_pps" "$a_g" "$a_l" "$b_pps" "$b_g" "$b_l"
    printf '%-6s %-8s %12s %10s %8s %10s\n' "$S" netrig "$n_pps" "$n_g" "$n_l" ""
    printf '%-6s %-8s %12s %10s %8s %10s\n' "$S" iperf3 "$a_pps" "$a_g" "$a_l" "n/i3 $(ratio "$n_pps" "$a_pps")"
    printf '%-6s %-8s %12s %10s %8s %10s\n' "$S" iperf2 "$b_pps" "$b_g" "$b_l" "n/i2 $(ratio "$n_pps" "$b_pps")"
done

echo
echo "== Pacing at a fixed packet rate (1000 B)"
printf '%-8s %-8s %10s %12s %14s %16s\n' target tool pps jitter_us gap_err_us late_p99_us
for PPS in 10000 100000; do
    GAP_NS=$((1000000000 / PPS))
    read -r n_pps _ _ n_j n_ge n_lp < <(netrig_run 1000 --gap "${GAP_NS}ns" --pacing hybrid); sleep 0.5
    read -r b_pps _ _ b_j < <(iperf2_run 1000 "${PPS}pps"); sleep 0.5
    numbers "pacing $PPS pps" "$n_pps" "$n_j" "$n_ge" "$n_lp" "$b_pps" "$b_j"
    printf '%-8s %-8s %10s %12s %14s %16s\n' "$PPS" netrig "$n_pps" "$n_j" "$n_ge" "$n_lp"
    printf '%-8s %-8s %10s %12s %14s %16s\n' "$PPS" iperf2 "$b_pps" "$b_j" "-" "-"
    echo "         jitter ratio netrig/iperf2: $(ratio "$n_j" "$b_j")   pps ratio: $(ratio "$n_pps" "$b_pps")"
done
bench_done
