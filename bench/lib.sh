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

cargo build --release -q
NETRIG=target/release/netrig
WORK=$(mktemp -d)
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# ratio A B prints A/B to two decimals, or n/a.
ratio() { python3 -c "import sys,math; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.2f' % (a/b) if b and not math.isnan(a/b) else 'n/a')" "$1" "$2"; }
