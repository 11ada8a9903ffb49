#!/usr/bin/env bash
# Builds netrig as one static binary (musl libc, no shared libraries), for
# the .deb, the container image and copying onto any x86-64 Linux host:
#     packaging/build-static.sh     ->  target/x86_64-unknown-linux-musl/release/netrig
# Needs rustup's x86_64-unknown-linux-musl target (added here when missing).
# netrig has no C dependencies, so musl-gcc is not needed.
# NETRIG_STATIC_TARGET_DIR builds in a target directory of its own (CI builds
# it beside the test build, which would otherwise wait for cargo's lock on
# target/); the binary is then copied to the path above.
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-musl
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
fi
dir=${NETRIG_STATIC_TARGET_DIR:-target}
cargo build --release --locked --target "$target" --target-dir "$dir" --bin netrig
bin="target/$target/release/netrig"
if [ "$dir" != target ]; then
    mkdir -p "target/$target/release"
    cp "$dir/$target/release/netrig" "$bin"
fi
# `file` says "static-pie linked" (Rust's musl default) or "statically linked".
if ! file "$bin" | grep -Eq "static(-pie|ally) linked"; then
    file "$bin" >&2
    echo "build-static.sh: $bin is not statically linked" >&2
    exit 1
fi
echo "$bin: $(stat -c %s "$bin") bytes, $(file -b "$bin" | cut -d, -f1-2)"
