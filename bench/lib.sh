# Shared by the bench scripts: installs peers, builds netrig, tracks background
# servers and a work directory, and prints ratios. Source it; do not run it.

# ensure_peers CMD:PACKAGE ... installs the Debian packages whose command is missing.
ensure_peers() {
    local missing=()
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# NETRIG=<binary> measures that build instead of this tree's (a profile A/B).
if [ -z "${NETRIG:-}" ]; then
    cargo build --release -q
    NETRIG=target/release/netrig
fi
WORK=$(mktemp -d)
PIDS=()
# Servers are waited for, so that a bench run right after this one finds
# their ports free.
cleanup() {
    kill "${PIDS[@]}" 2>/dev/null || true
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    [ "$BENCH_FAILED" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

# numbers NAME V... fails the bench, naming the figure, unless every V is a
# number: a bench must never print nan or an empty cell as a result.
numbers() {
    local name=$1 v; shift
    for v in "$@"; do
        if ! python3 -c "import sys,math; x=float(sys.argv[1]); sys.exit(math.isnan(x) or math.isinf(x))" "$v" 2>/dev/null; then
            echo "bench: $name: '$v' is not a number (a run failed; see its output in $WORK)" >&2
            BENCH_FAILED=1
        fi
    done
}
BENCH_FAILED=0
# Call at the end: a bench with a missing figure exits non-zero.
bench_done() { exit "$BENCH_FAILED"; }

# ratio A B prints A/B to two decimals, or n/a.
ratio() { python3 -c "import sys,math; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.2f' % (a/b) if b and not math.isnan(a/b) else 'n/a')" "$1" "$2"; }

# sockperf_figures FILE prints "p50_us p99_us round_trips_per_s" from a
# sockperf ping-pong --full-rtt output, nan where a figure is missing.
sockperf_figures() {
    python3 - "$1" <<'PY'
import re, sys
t = open(sys.argv[1], errors="replace").read()
def f(p):
    m = re.search(p, t)
    return float(m.group(1)) if m else float("nan")
avg = f(r"Round trip is ([\d.]+) usec")
print("%.2f %.2f %.0f" % (f(r"percentile 50\.000 =\s+([\d.]+)"), f(r"percentile 99\.000 =\s+([\d.]+)"), 1e6 / avg if avg == avg and avg else float("nan")))
PY
}

# rr_figures FILE prints "p50_us p99_us transactions_per_s" of the first run
# in a netrig rr --json file, nan when the run failed.
rr_figures() {
    python3 - "$1" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["result"]["runs"][0]
    p = dict(r["latency"]["percentiles_us"])
    print("%.2f %.2f %.0f" % (p["p50"], p["p99"], r["transactions_per_sec"]))
except Exception:
    print("nan nan nan")
PY
}
