#!/usr/bin/env bash
# UDP on loopback: netrig vs iperf3 and iperf2, measured in the same run.
#  1. Maximum rate at 64 B and 1400 B datagrams: received pps, Gbit/s and
#     loss, netrig with segmentation offload (its default: UDP_SEGMENT and
#     UDP_GRO) and without (--no-offload), each tool's CPU seconds per GB
#     received at the sending and the receiving end (bench/cpu.py: the client
#     sends, the server receives), and received-pps ratios vs iperf2.
#  2. Pacing at 100 kpps and 1 Gbit/s (1000 B), netrig's default pacing vs
#     iperf2: the sender's CPU seconds (bench/cpu.py), sent pps and receiver
#     jitter (on loopback, mostly the sender's pacing error), netrig's p99
#     departure lateness and slips, and netrig/iperf2 ratios.
# Not a test: compare ratios from one run, never absolute numbers.
#
# Usage: bench/udp.sh [SECONDS_PER_RUN]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-3}

. bench/lib.sh
ensure_peers iperf3:iperf3 iperf:iperf
P3=15311 P2=15312 PN=15313
iperf3 -s -p $P3 >/dev/null 2>&1 & S3=$!; PIDS+=($S3)
iperf -s -u -e -p $P2 >/dev/null 2>&1 & S2=$!; PIDS+=($S2)
# The server's default --max-rate (40 Gbit/s) would refuse the maximum-rate runs.
$NETRIG serve --listen 127.0.0.1:$PN -v 0 --max-rate 1000G & SN=$!; PIDS+=($SN)
sleep 1

# Prints: pps Gbit/s loss% jitter_us
iperf2_run() { # $1 size, $2 rate (e.g. 10G or 10000pps)
    iperf -c 127.0.0.1 -p $P2 -u -e -b "$2" -l "$1" -t "$T" > "$WORK/i2.txt" 2>&1 || true
    iperf2_parse "$1"
}
iperf2_parse() { # reads $WORK/i2.txt
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

# Maximum rate, each run under bench/cpu.py. Each prints:
# pps Gbit/s loss% sender_cpu_s_per_GB receiver_cpu_s_per_GB (GB received).
per_gb() { # $1 cpu_s, $2 bytes received
    python3 -c "import sys; c,b=float(sys.argv[1]),float(sys.argv[2]); print('%.2f' % (c/(b/1e9)) if b > 0 else 'nan')" "$1" "$2"
}
max_iperf3() { # $1 size
    read -r c s _ < <(bench/cpu.py $S3 "$WORK/i3.json" iperf3 -c 127.0.0.1 -p $P3 -u -b 0 -l "$1" -t "$T" -J)
    read -r pps g l b < <(python3 - "$WORK/i3.json" "$1" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))["end"]["sum"]
    got = s["packets"] - s["lost_packets"]
    print("%.0f %.3f %.2f %d" % (got / s["seconds"], got * int(sys.argv[2]) * 8 / s["seconds"] / 1e9, s["lost_percent"], got * int(sys.argv[2])))
except Exception:
    print("nan nan nan 0")
PY
)
    echo "$pps $g $l $(per_gb "$c" "$b") $(per_gb "$s" "$b")"
}
max_iperf2() { # $1 size
    read -r c s _ < <(bench/cpu.py $S2 "$WORK/i2.txt" iperf -c 127.0.0.1 -p $P2 -u -e -b 100G -l "$1" -t "$T")
    read -r pps g l _ < <(iperf2_parse "$1")
    local b
    b=$(python3 -c "import sys; print(int(float(sys.argv[1]) * float(sys.argv[2]) * int(sys.argv[3])))" "$pps" "$T" "$1" 2>/dev/null || echo 0)
    echo "$pps $g $l $(per_gb "$c" "$b") $(per_gb "$s" "$b")"
}
max_netrig() { # $1 size, then extra flags
    local size=$1; shift
    read -r c s _ < <(bench/cpu.py $SN "$WORK/n.out" $NETRIG udp 127.0.0.1 -p $PN -l "$size" -b 100G --pacing spin "$@" -t "${T}s" -q --json "$WORK/n.json")
    read -r pps g l b < <(python3 - "$WORK/n.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["result"]
    t, s = r["totals"], r["sender"]
    secs = s["duration_secs"]
    print("%.0f %.3f %.2f %d" % (t["unique"] / secs, t["bytes"] * 8 / secs / 1e9, 100 * t["lost"] / max(s["packets"], 1), t["bytes"]))
except Exception:
    print("nan nan nan 0")
PY
)
    echo "$pps $g $l $(per_gb "$c" "$b") $(per_gb "$s" "$b")"
}

echo "== Maximum rate (received; CPU-s per GB received: sender end, receiver end)"
printf '%-6s %-18s %12s %8s %7s %9s %9s %12s\n' size tool pps Gbit/s loss% snd-s/GB rcv-s/GB pps/iperf2
for S in 64 1400; do
    read -r o_pps o_g o_l o_sc o_rc < <(max_netrig "$S"); sleep 0.5
    read -r p_pps p_g p_l p_sc p_rc < <(max_netrig "$S" --no-offload); sleep 0.5
    read -r a_pps a_g a_l a_sc a_rc < <(max_iperf3 "$S"); sleep 0.5
    read -r b_pps b_g b_l b_sc b_rc < <(max_iperf2 "$S"); sleep 0.5
    numbers "max rate $S B" "$o_pps" "$o_g" "$o_l" "$o_sc" "$o_rc" "$p_pps" "$p_g" "$p_l" "$p_sc" "$p_rc" \
        "$a_pps" "$a_g" "$a_l" "$a_sc" "$a_rc" "$b_pps" "$b_g" "$b_l" "$b_sc" "$b_rc"
    printf '%-6s %-18s %12s %8s %7s %9s %9s %12s\n' "$S" "netrig (offload)" "$o_pps" "$o_g" "$o_l" "$o_sc" "$o_rc" "$(ratio "$o_pps" "$b_pps")"
    printf '%-6s %-18s %12s %8s %7s %9s %9s %12s\n' "$S" "netrig --no-offload" "$p_pps" "$p_g" "$p_l" "$p_sc" "$p_rc" "$(ratio "$p_pps" "$b_pps")"
    printf '%-6s %-18s %12s %8s %7s %9s %9s %12s\n' "$S" iperf3 "$a_pps" "$a_g" "$a_l" "$a_sc" "$a_rc" "$(ratio "$a_pps" "$b_pps")"
    printf '%-6s %-18s %12s %8s %7s %9s %9s %12s\n' "$S" iperf2 "$b_pps" "$b_g" "$b_l" "$b_sc" "$b_rc" "1.00"
    echo "       CPU-s/GB both ends, netrig/iperf2: offload $(ratio "$(python3 -c "print($o_sc+$o_rc)")" "$(python3 -c "print($b_sc+$b_rc)")"), --no-offload $(ratio "$(python3 -c "print($p_sc+$p_rc)")" "$(python3 -c "print($b_sc+$b_rc)")")"
done

echo
echo "== Paced at 100 kpps and 1 Gbit/s (1000 B): sender CPU seconds and receiver jitter"
echo "   (netrig's default hybrid pacing; iperf2 reports jitter in ms to 3 decimals, so its"
echo "   0.0 us means under 0.5 us and leaves the jitter ratio undefined)"
printf '%-9s %-8s %10s %9s %10s %12s %9s\n' target tool pps snd-cpu-s jitter_us late_p99_us slips
for TGT in 100kpps 1G; do
    if [ "$TGT" = 100kpps ]; then NF=(--gap 10000ns); IF=100000pps; else NF=(-b 1G); IF=1G; fi
    read -r nc _ < <(bench/cpu.py $SN "$WORK/n.out" $NETRIG udp 127.0.0.1 -p $PN -l 1000 "${NF[@]}" -t "${T}s" -q --json "$WORK/n.json")
    read -r n_pps n_j n_lp n_sl < <(python3 - "$WORK/n.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["result"]
    t, s = r["totals"], r["sender"]
    print("%.0f %.2f %.1f %d" % (s["packets"] / s["duration_secs"], t["jitter_us"], s["late_p99_us"], s["slips"]))
except Exception:
    print("nan nan nan nan")
PY
)
    sleep 0.5
    read -r bc _ < <(bench/cpu.py $S2 "$WORK/i2.txt" iperf -c 127.0.0.1 -p $P2 -u -e -b "$IF" -l 1000 -t "$T")
    read -r b_pps _ _ b_j < <(iperf2_parse 1000)
    sleep 0.5
    numbers "paced $TGT" "$nc" "$n_pps" "$n_j" "$bc" "$b_pps" "$b_j"
    printf '%-9s %-8s %10s %9s %10s %12s %9s\n' "$TGT" netrig "$n_pps" "$nc" "$n_j" "$n_lp" "$n_sl"
    printf '%-9s %-8s %10s %9s %10s %12s %9s\n' "$TGT" iperf2 "$b_pps" "$bc" "$b_j" - -
    echo "          netrig/iperf2: sender CPU $(ratio "$nc" "$bc"), jitter $(ratio "$n_j" "$b_j")"
done
bench_done
