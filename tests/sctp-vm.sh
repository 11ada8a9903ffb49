#!/usr/bin/env bash
# Runs netrig's SCTP tests in a small virtual machine whose kernel has SCTP.
#
# The build machines' kernel has no SCTP, so `cargo test` reports the SCTP
# round-trip tests as ignored. This script boots Debian's stock kernel (with
# the sctp module) in QEMU, from an initramfs holding busybox, netrig and the
# rr test binary, and runs there:
#   - the ignored SCTP tests (`sctp_round_trips`,
#     `sctp_seqpacket_multihomed_round_trips`,
#     `sctp_seqpacket_sessions_share_the_loops_and_large_messages_arrive_whole`,
#     and the SCTP unit tests);
#   - `netrig rr --proto sctp` and `--proto sctp-seqpacket --bind 127.0.0.1,127.0.0.2`
#     from the command line, printing their reports.
# It exits 0 only if all of that passed and /proc/net/sctp/assocs shows
# the association using both addresses. Not part of CI's default suite (it
# downloads ~70 MB and boots a VM); runs under TCG in about 2 minutes.
#
# Usage: tests/sctp-vm.sh            (cache in ${SCTP_VM_DIR:-/tmp/netrig-sctp-vm})
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${SCTP_VM_DIR:-/tmp/netrig-sctp-vm}
mkdir -p "$DIR"

need() { command -v "$1" >/dev/null 2>&1; }
if ! need qemu-system-x86_64; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends qemu-system-x86
fi

# Debian's kernel and a static busybox, unpacked (not installed).
if [ ! -d "$DIR/k/boot" ] || [ ! -x "$DIR/bb/bin/busybox" ]; then
    (
        cd "$DIR"
        apt-cache show linux-image-amd64 >/dev/null 2>&1 || apt-get update -qq
        kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
        apt-get download "$kpkg" busybox-static
        rm -rf k bb && mkdir k bb
        dpkg-deb -x linux-image-*.deb k
        dpkg-deb -x busybox-static*.deb bb
    )
fi
BB=$DIR/bb/bin/busybox
KVER=$(ls "$DIR/k/lib/modules")
KMOD=$DIR/k/lib/modules/$KVER/kernel

# The binaries under test, at the same absolute paths as here (the test
# binary finds netrig through the path compiled into it).
cargo build --release --quiet
RR_TEST=$(cargo test --release --test suite --no-run 2>&1 | grep -o 'target/release/deps/suite-[0-9a-f]*' | head -1)
LIB_TEST=$(cargo test --release --lib --no-run 2>&1 | grep -o 'target/release/deps/netrig-[0-9a-f]*' | head -1)
NETRIG=$ROOT/target/release/netrig

INITRD=$DIR/initramfs
rm -rf "$INITRD" && mkdir -p "$INITRD"/{bin,proc,sys,dev,scratch,modules}
cp "$BB" "$INITRD/bin/busybox"
for a in sh mount insmod ip poweroff cat echo sleep timeout grep; do ln -sf busybox "$INITRD/bin/$a"; done
for m in crypto/crc32c_generic lib/libcrc32c net/ipv4/udp_tunnel net/ipv6/ip6_udp_tunnel net/sctp/sctp; do
    cp "$KMOD/$m.ko" "$INITRD/modules/"
done
for f in "$NETRIG" "$ROOT/$RR_TEST" "$ROOT/$LIB_TEST"; do
    mkdir -p "$INITRD$(dirname "$f")"
    cp "$f" "$INITRD$f"
    # Their shared libraries, at the same paths.
    for lib in $(ldd "$f" | grep -o '/[^ ]*'); do
        mkdir -p "$INITRD$(dirname "$lib")"
        cp -L "$lib" "$INITRD$lib"
    done
done

cat > "$INITRD/init" <<EOF
#!/bin/sh
echo
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
# Scratch space off /tmp: a checkout under /tmp (as in CI) must stay visible.
mount -t tmpfs scratch /scratch
for m in crc32c_generic libcrc32c udp_tunnel ip6_udp_tunnel sctp; do insmod /modules/\$m.ko || echo "insmod \$m failed"; done
ip link set lo up
export HOME=/scratch TMPDIR=/scratch RUST_BACKTRACE=1
cd /scratch
rc=0
# Each stage says the guest's uptime, so a slow one shows in CI's log.
stage() { read up _ < /proc/uptime; echo "== [\${up}s] \$*"; }
stage "netrig rr --proto sctp"
$NETRIG rr --proto sctp -n 5000 -l 64 --reply 2 || rc=1
stage "netrig rr --proto sctp-seqpacket --bind 127.0.0.1,127.0.0.2"
$NETRIG rr --proto sctp-seqpacket --bind 127.0.0.1,127.0.0.2 -n 5000 -l 64 --reply 2 > /scratch/seq.out 2>&1 &
# Read once the association is up (a round trip takes most of a ms under
# TCG, so the run lasts seconds): at most 10 s.
i=0
while [ \$i -lt 10 ] && ! grep -q "127.0.0.2" /proc/net/sctp/assocs; do sleep 1; i=\$((i+1)); done
# The kernel's view of the associations: the client's must list both local
# addresses, the server's both remote ones.
stage "/proc/net/sctp/assocs during the multi-homed run"
cat /proc/net/sctp/assocs
wait \$! || rc=1
cat /scratch/seq.out
stage "netrig rr --proto sctp-seqpacket --spectrum 0..16"
$NETRIG rr --proto sctp-seqpacket --spectrum 0..16 -n 50 --warmup 5 || rc=1
stage "ignored SCTP tests"
$ROOT/$RR_TEST --ignored rr::sctp_ --test-threads 1 || rc=1
stage "SCTP unit tests"
$ROOT/$LIB_TEST sctp:: --test-threads 1 || rc=1
stage done
echo "NETRIG-VM-RESULT rc=\$rc"
poweroff -f
EOF
chmod +x "$INITRD/init"
(cd "$INITRD" && find . | "$BB" cpio -o -H newc 2>/dev/null | gzip -1) > "$DIR/initramfs.gz"

# TCG by default: on this project's machines (themselves VMs) /dev/kvm opens but
# a KVM guest hangs after decompressing the kernel. SCTP_VM_ACCEL=kvm to try it.
if [ "${SCTP_VM_ACCEL:-tcg}" = kvm ]; then
    ACCEL=(-accel kvm -cpu host)
else
    ACCEL=(-accel tcg)
fi
echo "booting $KVER with ${ACCEL[*]}"
LOG=$DIR/console.log
timeout 900 qemu-system-x86_64 "${ACCEL[@]}" -m 2048 -smp 2 -nographic -no-reboot \
    -kernel "$DIR/k/boot/vmlinuz-$KVER" -initrd "$DIR/initramfs.gz" \
    -append "console=ttyS0 panic=-1 quiet" | tee "$LOG" || true
grep -q "NETRIG-VM-RESULT rc=0" "$LOG"
# Multi-homing took effect: an association with 127.0.0.2 among its addresses.
grep -A4 "^ ASSOC" "$LOG" | grep -q "127.0.0.2" || {
    echo "no association lists 127.0.0.2: --bind a,b did not multi-home" >&2
    exit 1
}
echo "SCTP tests passed in the VM"
