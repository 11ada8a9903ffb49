//! UDP segmentation offload: datagrams that travel as GSO super-buffers and
//! arrive as GRO-coalesced buffers are still counted one by one, exactly
//! (sequence, loss, duplicates, reordering, corruption), and keep honest
//! per-datagram stamps.

use crate::common;
use crate::netns;
use crate::udp_relay;

use common::TestServer;
use netrig::protocol::proto::{BurstSpec, UdpSpec};
use netrig::protocol::udp::header::{HEADER_LEN, Header, fill_payload};
use netrig::protocol::udp::pace::Pacing;
use netrig::protocol::udp::track::{ReceiverStats, UdpInterval};
use netrig::udp::client::{UdpClientConfig, UdpObserver, UdpReport, run};
use netrig::udp::receive::{PacketRow, Receiver, ReceiverConfig, ReceiverSink, enable_gro};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};
use udp_relay::{Impair, UdpRelay};

/// Sends `data` from the connected `sock` as one super-buffer the kernel
/// cuts every `seg` bytes (`UDP_SEGMENT`).
fn send_segmented(sock: &UdpSocket, data: &[u8], seg: u16) -> std::io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut _,
        iov_len: data.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: the msghdr points at `iov` and `control`, which outlive the
    // call; `control` is aligned for cmsghdr and holds CMSG_SPACE(2) bytes.
    unsafe {
        let mut h: libc::msghdr = std::mem::zeroed();
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = control.as_mut_ptr().cast();
        h.msg_controllen = libc::CMSG_SPACE(2) as _;
        let c = libc::CMSG_FIRSTHDR(&h);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(2) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
        let n = libc::sendmsg(sock.as_raw_fd(), &h, 0);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// A connected pair on loopback with GRO on the receiving end.
fn pair() -> (UdpSocket, UdpSocket) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    assert!(enable_gro(&rx), "UDP_GRO refused");
    (tx, rx)
}

/// Whether this kernel hands a GSO super-buffer sent over loopback to a
/// GRO socket in one piece; without that, nothing here is coalesced.
fn kernel_coalesces() -> bool {
    let (tx, rx) = pair();
    if send_segmented(&tx, &[7u8; 400], 200).is_err() {
        return false;
    }
    let mut buf = [0u8; 1000];
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    matches!(rx.recv(&mut buf), Ok(400))
}

const SIZE: usize = 200;

fn datagram(seq: u64) -> Vec<u8> {
    let mut d = vec![0u8; SIZE];
    Header {
        flags: 0,
        stream: 1,
        seq,
        send_ns: 1,
        payload_len: (SIZE - HEADER_LEN) as u32,
    }
    .write(&mut d);
    fill_payload(1, seq, &mut d[HEADER_LEN..]);
    d
}

/// Counts rows and says stop once `want` have come.
struct Rows<'a> {
    rows: Vec<PacketRow>,
    want: usize,
    stop: &'a AtomicBool,
}

impl ReceiverSink for Rows<'_> {
    fn interval(&mut self, _iv: UdpInterval) {}
    fn packet(&mut self, row: &PacketRow) {
        self.rows.push(row.clone());
        if self.rows.len() >= self.want {
            self.stop.store(true, SeqCst);
        }
    }
}

/// Impairments placed inside coalesced buffers (a dropped, a duplicated,
/// a swapped pair and a corrupted datagram in every ten) are counted
/// exactly as planned: the receiver splits each buffer at its segment size
/// before the tracker sees anything. Without the split, each buffer would
/// be one oversized, invalid datagram.
#[test]
fn impairments_inside_coalesced_buffers_are_counted_per_datagram() {
    if !kernel_coalesces() {
        eprintln!("skipped: this kernel does not coalesce GSO datagrams on loopback");
        return;
    }
    const N: u64 = 400;
    let mut wire: Vec<Vec<u8>> = Vec::new();
    let mut i = 0;
    while i < N {
        match i % 10 {
            3 => {}
            5 => {
                wire.push(datagram(i));
                wire.push(datagram(i));
            }
            7 => {
                wire.push(datagram(i + 1));
                wire.push(datagram(i));
                i += 1;
            }
            1 => {
                let mut d = datagram(i);
                d[HEADER_LEN + 10] ^= 0xff;
                wire.push(d);
            }
            _ => wire.push(datagram(i)),
        }
        i += 1;
    }
    let (tx, rx) = pair();
    // 20 datagrams (4000 bytes) per super-buffer; 20 buffers stay well
    // inside the default receive buffer, so the receiver may start after.
    for chunk in wire.chunks(20) {
        let data: Vec<u8> = chunk.concat();
        assert_eq!(send_segmented(&tx, &data, SIZE as u16).unwrap(), data.len());
    }
    let cfg = ReceiverConfig {
        stream: 1,
        max_size: SIZE,
        offset_ns: 0,
        comp_ns: 0,
        interval: Duration::from_secs(100),
        media: None,
        verify: true,
        burst: None,
        tag_key: None,
        offload: true,
    };
    let stats = ReceiverStats::new(50_000, 100);
    let stop = AtomicBool::new(false);
    let mut sink = Rows {
        rows: Vec::new(),
        want: wire.len(),
        stop: &stop,
    };
    let start = Instant::now();
    let mut receiver = Receiver::new(&rx, &cfg, stats, start).unwrap();
    // A safety net only: the sink says when every row came.
    while !stop.load(SeqCst) && start.elapsed() < Duration::from_secs(20) {
        if !receiver.read(&rx, &mut sink).unwrap() {
            netrig::net::wait_readable(&rx, Duration::from_millis(100));
        }
    }
    let stats = receiver.finish(start.elapsed(), &mut sink);
    let t = stats.totals(Some(N));
    assert_eq!(
        sink.rows.len(),
        wire.len(),
        "one row per datagram on the wire"
    );
    assert_eq!(
        (t.unique, t.lost, t.duplicates, t.reordered, t.corrupt),
        (N - 40, 40, 40, 40, 40),
        "{t:?}"
    );
    assert_eq!(t.bytes, (wire.len() * SIZE) as u64);
    let seqs: Vec<u64> = sink.rows.iter().map(|r| r.seq).collect();
    let want: Vec<u64> = wire.iter().map(|d| Header::read(d).unwrap().seq).collect();
    assert_eq!(seqs, want, "datagrams come out in the order they went in");
}

#[derive(Default)]
struct Collect {
    packets: Vec<PacketRow>,
}

impl UdpObserver for Collect {
    fn interval(&mut self, _iv: &UdpInterval) {}
    fn packet(&mut self, row: &PacketRow) {
        self.packets.push(row.clone());
    }
}

/// Bursts of `per` datagrams of 1000 bytes back to back every 20 ms for
/// a second, so each burst is due at once and leaves as super-buffers.
fn bursts(reverse: bool, per: u64, no_offload: bool) -> UdpSpec {
    let mut sp = UdpSpec {
        reverse,
        pacing: Pacing::Hybrid,
        interval_ms: 200,
        catch_up: true,
        burst: Some(BurstSpec {
            size: per * 1000,
            period_ms: 20,
        }),
        ..UdpSpec::steady(1000, 1, 1000)
    };
    sp.sock.no_offload = no_offload;
    sp
}

fn run_udp(target: SocketAddr, spec: UdpSpec) -> (UdpReport, Collect) {
    let cfg = UdpClientConfig {
        key: None,
        target: target.to_string(),
        port: 0,
        spec,
        synced: false,
        bind: None,
        bind_dev: None,
        rcvbuf: None,
        sndbuf: None,
        per_packet: true,
        start_at: None,
        cport: None,
        connect_timeout: None,
    };
    let mut c = Collect::default();
    let rep = run(&cfg, Arc::new(AtomicBool::new(false)), &mut c).expect("udp run");
    (rep, c)
}

/// The server sends bursts as GSO super-buffers and the client receives
/// them coalesced: datagrams sharing one kernel receive stamp show the
/// coalescing (with --no-offload every datagram is its own). Every datagram
/// still counts once, and its send stamp is honest: taken before the kernel
/// had it, so never after its arrival, and never decreasing along the
/// sequence.
#[test]
fn gso_bursts_arrive_coalesced_exactly_with_honest_stamps() {
    if !kernel_coalesces() {
        eprintln!("skipped: this kernel does not coalesce GSO datagrams on loopback");
        return;
    }
    let srv = TestServer::start();
    let (rep, got) = run_udp(srv.addr, bursts(true, 32, false));
    let s = rep.sender.expect("sender report");
    let t = rep.totals.expect("totals");
    assert_eq!(s.packets, 50 * 32, "{s:?}");
    assert_eq!(
        (t.unique, t.lost, t.duplicates, t.reordered),
        (s.packets, 0, 0, 0)
    );
    assert_eq!(got.packets.len() as u64, s.packets);
    let mut rows = got.packets.clone();
    rows.sort_by_key(|r| r.seq);
    for w in rows.windows(2) {
        assert!(w[0].send_ns <= w[1].send_ns, "{:?} then {:?}", w[0], w[1]);
    }
    for r in &rows {
        assert!(r.send_ns <= r.recv_ns, "stamped after it arrived: {r:?}");
    }
    // Datagrams handed over in one receive share its kernel stamp.
    let shared = got
        .packets
        .windows(2)
        .filter(|w| w[0].recv_ns == w[1].recv_ns)
        .count();
    assert!(
        shared as u64 >= s.packets / 2,
        "only {shared} of {} datagrams arrived coalesced",
        s.packets
    );
    let (rep, got) = run_udp(srv.addr, bursts(true, 32, true));
    let t = rep.totals.expect("totals");
    assert_eq!(t.lost, 0);
    let shared = got
        .packets
        .windows(2)
        .filter(|w| w[0].recv_ns == w[1].recv_ns)
        .count();
    assert!(
        (shared as u64) < t.unique / 2,
        "--no-offload: {shared} datagrams shared a stamp"
    );
}

/// Through a relay that is not GSO-aware (it reads datagram by datagram,
/// so the kernel cuts the sender's super-buffers before it) and that drops,
/// duplicates and reorders, a GRO receiver counts exactly what the relay
/// says it did.
#[test]
fn a_relay_between_gso_and_gro_is_counted_exactly() {
    let srv = TestServer::start();
    for reverse in [false, true] {
        let im = Impair {
            drop_every: 10,
            dup_every: 7,
            swap_every: 13,
            corrupt_every: 0,
            police: None,
        };
        let relay = UdpRelay::start(srv.addr, im, !reverse);
        let (rep, _) = run_udp(relay.addr, bursts(reverse, 24, false));
        let t = rep.totals.expect("totals");
        let s = rep.sender.expect("sender");
        let (seen, dropped, duplicated, swapped, _) = relay.get();
        assert_eq!(seen, s.packets, "relay saw every datagram sent");
        assert!(
            dropped > 50 && duplicated > 50 && swapped > 30,
            "reverse={reverse}"
        );
        assert_eq!(t.lost, dropped, "lost, reverse={reverse}");
        assert_eq!(t.duplicates, duplicated, "duplicates, reverse={reverse}");
        assert_eq!(t.reordered, swapped, "reordered, reverse={reverse}");
        assert_eq!(t.unique, s.packets - dropped);
    }
}

struct Proc(std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A path whose MTU (1200) is below the datagram size (1400): the kernel
/// refuses every super-buffer (EINVAL, a segment must fit the MTU), so the
/// sender falls back to one message per datagram, which IP fragments, and
/// every datagram arrives; without the fallback none would be sent.
#[test]
#[cfg_attr(not(netns_root), ignore = "needs root and iproute2 (ip netns)")]
fn a_path_mtu_below_the_segment_size_falls_back_to_plain_sends() {
    use std::process::{Command, Stdio};
    let _one = netns::one_at_a_time();
    let ns = netns::Netns::new('g', 223);
    let dev = format!("nrg{}a", std::process::id() % 100_000);
    let st = Command::new("ip")
        .args(["-n", &ns.a, "link", "set", "dev", &dev, "mtu", "1200"])
        .status()
        .unwrap();
    assert!(st.success(), "mtu on {dev}");
    let bin = env!("CARGO_BIN_EXE_netrig");
    let listen = format!("{}:4796", ns.b_addr());
    let _srv = Proc(
        ns.exec(&ns.b, bin)
            .args(["serve", "--listen", &listen, "-q"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    ns.wait_listening(&ns.b, 4796);
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("udp.json");
    let out = ns
        .exec(&ns.a, bin)
        .args(["udp", &ns.b_addr(), "-p", "4796", "-l", "1400"])
        .args(["--burst-size", "28000"])
        .args(["--burst-period", "20ms", "-t", "1s", "-q", "--json"])
        .arg(&js)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).unwrap()).unwrap();
    let r = &v["result"];
    let sent = r["sender"]["packets"].as_u64().unwrap();
    assert_eq!(sent, 50 * 20, "{r}");
    assert_eq!(r["sender"]["send_errors"].as_u64(), Some(0), "{r}");
    assert_eq!(r["totals"]["unique"].as_u64(), Some(sent), "{r}");
    assert_eq!(r["totals"]["lost"].as_u64(), Some(0), "{r}");
}

/// Datagrams of the `netrig udp -R` run with `extra` flags that shared
/// their receive stamp with the datagram before them, of how many rows.
fn shared_stamps_cli(srv: &TestServer, extra: &[&str]) -> (usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let jf = dir.path().join("rows.csv");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_netrig"))
        .args(["udp", "127.0.0.1", "-p", &srv.addr.port().to_string(), "-R"])
        .args([
            "-l",
            "1000",
            "--burst-size",
            "32000",
            "--burst-period",
            "20ms",
        ])
        .args(["-t", "1s", "-q", "--jitter-file"])
        .arg(&jf)
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut r = csv::Reader::from_path(&jf).unwrap();
    let col = r
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "ReceiverNs")
        .expect("a ReceiverNs column");
    let stamps: Vec<u64> = r
        .records()
        .map(|row| row.unwrap()[col].parse().unwrap())
        .collect();
    let shared = stamps.windows(2).filter(|w| w[0] == w[1]).count();
    (shared, stamps.len())
}

/// `--no-offload` reaches the sending server through the test's socket
/// options: its bursts then arrive one datagram per receive, where by
/// default they arrive coalesced.
#[test]
fn no_offload_on_the_command_line_turns_offload_off_at_the_far_end() {
    if !kernel_coalesces() {
        eprintln!("skipped: this kernel does not coalesce GSO datagrams on loopback");
        return;
    }
    let srv = TestServer::start();
    let (shared, rows) = shared_stamps_cli(&srv, &[]);
    assert!(rows >= 1000 && shared >= rows / 2, "{shared} of {rows}");
    let (shared, rows) = shared_stamps_cli(&srv, &["--no-offload"]);
    assert!(rows >= 1000 && shared < rows / 2, "{shared} of {rows}");
}
