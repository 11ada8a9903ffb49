#!/usr/bin/env bash
# Parallel connection churn (issue 27's "crr -P 8 >= 0.9x eight parallel C
# loops"): P client processes of the minimal C connect/request/response/close
# loop (bench/churn.c, 64-byte request, 2-byte reply) against its server,
# then `netrig crr -P P` (same sizes, every byte verified, both ends' verdicts)
# against `netrig serve`, for SECONDS each; prints both rates and the ratio.
# Not a test: figures on a shared machine are noisy; compare ratios.
#
# Usage: [P=8] [NETRIG=binary] bench/crr.sh [SECONDS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5}
P=${P:-8}

. bench/lib.sh
cc -O2 -o "$WORK/churn" bench/churn.c
PC=15371 PN=15372

"$WORK/churn" server $PC & PIDS+=($!)
sleep 0.3
cpids=()
for i in $(seq "$P"); do
    "$WORK/churn" client 127.0.0.1 $PC "$T" 64 2 > "$WORK/c$i.txt" & cpids+=($!)
done
wait "${cpids[@]}"
c_rate=$(cat "$WORK"/c*.txt | awk '{s += $1} END {printf "%.0f", s}')
numbers "C loops" "$c_rate"

"$NETRIG" serve --listen 127.0.0.1:$PN -q --max-conns-per-client 100000 --max-conns 100000 & PIDS+=($!)
sleep 0.5
"$NETRIG" crr 127.0.0.1:$PN -P "$P" -n 100000000 -t "${T}s" -q --json "$WORK/crr.json" >/dev/null 2>&1 || true
crr=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["result"]; print("%.0f" % r["per_sec"] if r["failed"] == 0 else "nan")' "$WORK/crr.json")
numbers "crr -P $P" "$crr"

printf '%-28s %10s %8s\n' what conn/s "vs C"
printf '%-28s %10s %8s\n' "C loop x $P" "$c_rate" 1.00
printf '%-28s %10s %8s\n' "crr -P $P" "$crr" "$(ratio "$crr" "$c_rate")"
bench_done
