#!/usr/bin/env bash
# The HTML report of a large UDP run: a long run at a high datagram rate on
# loopback, then how big its JSON and report are, how long `netrig report`
# takes, and how long headless Chromium takes to open and screenshot the
# report beyond what it takes for a blank page. Issue 17's budget: a
# 10-minute run at 100,000 datagrams a second gives a report under ~5 MB that
# opens in under 2 s; the last lines print each figure as a share of it.
# Not a test: the figures depend on the machine.
#
# Usage: bench/report.sh [SECONDS] [DATAGRAMS_PER_SECOND] [INTERVAL]
#        (default 600 100000 10ms)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-600}
PPS=${2:-100000}
IV=${3:-10ms}

. bench/lib.sh
ensure_peers chromium:chromium
PN=15321
$NETRIG serve --listen 127.0.0.1:$PN -v 0 --max-rate 1000G & PIDS+=($!)
sleep 1

# 1000-byte datagrams: the rate in bit/s is PPS * 8000.
RATE=$((PPS * 8000))
echo "udp: ${T} s at ${PPS} datagrams/s (1000 B), ${IV} intervals"
$NETRIG udp 127.0.0.1 -p $PN -b "$RATE" -l 1000 -t "${T}s" -i "$IV" -q --json "$WORK/big.json"

ms() { python3 -c 'import time; print(int(time.monotonic() * 1000))'; }
t0=$(ms)
$NETRIG report "$WORK/big.json" -o "$WORK/big.html"
t1=$(ms)
render_ms=$((t1 - t0))

shot() { # $1 url, $2 png; prints the milliseconds it took
    local a b
    a=$(ms)
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --window-size=900,1600 --screenshot="$2" "$1" >/dev/null 2>&1
    b=$(ms)
    echo $((b - a))
}
shot about:blank "$WORK/warm.png" >/dev/null   # first start fills caches
blank_ms=$(shot about:blank "$WORK/blank.png")
open_ms=$(shot "file://$WORK/big.html" "$WORK/big.png")

read -r datagrams rows lost < <(python3 - "$WORK/big.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
t = r["totals"]
print(t["unique"], len(r["intervals"]), t["lost"])
PY
)
json_bytes=$(stat -c %s "$WORK/big.json")
html_bytes=$(stat -c %s "$WORK/big.html")
numbers figures "$datagrams" "$rows" "$json_bytes" "$html_bytes" "$render_ms" "$blank_ms" "$open_ms"
page_ms=$((open_ms - blank_ms))
cat <<EOF
datagrams received    $datagrams ($lost lost)
intervals             $rows
JSON                  $json_bytes bytes
report                $html_bytes bytes
netrig report         $render_ms ms
chromium, blank page  $blank_ms ms
chromium, report      $open_ms ms ($page_ms ms beyond a blank page)
report size / 5 MB    $(ratio "$html_bytes" 5000000)
open time / 2 s       $(ratio "$open_ms" 2000)
EOF
bench_done
