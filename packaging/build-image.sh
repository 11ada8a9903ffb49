#!/usr/bin/env bash
# Builds the container image netrig:VERSION (and netrig:latest) from the
# static binary (run packaging/build-static.sh first) with podman or docker:
#     packaging/build-static.sh && packaging/build-image.sh
# The build context holds the binary alone, so nothing else can slip in.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/x86_64-unknown-linux-musl/release/netrig
if [ ! -x "$bin" ]; then
    echo "build-image.sh: $bin is missing: run packaging/build-static.sh first" >&2
    exit 1
fi
engine=${CONTAINER_ENGINE:-$(command -v podman || command -v docker || true)}
if [ -z "$engine" ]; then
    echo "build-image.sh: neither podman nor docker is installed" >&2
    exit 1
fi
version=$("$bin" --version | head -1 | cut -d' ' -f2)
ctx=target/packaging/image
rm -rf "$ctx" && mkdir -p "$ctx"
install -m 0755 "$bin" "$ctx/netrig"
"$engine" build --quiet -f packaging/Containerfile -t "netrig:$version" -t netrig:latest "$ctx" >/dev/null
echo "netrig:$version"
