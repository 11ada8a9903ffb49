//! Two network namespaces joined by a veth pair with link-local addresses
//! (169.254.N.1 in A, .2 in B), a `tbf` on A's egress if asked, and a
//! retry helper for the measurements that read a limiter through timing.
//! Removed on drop.
#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

pub struct Netns {
    pub a: String,
    pub b: String,
    /// The device `tbf` goes on: A's side of the link, or with a router
    /// the router's side towards B.
    va: String,
    /// The subnet's third byte: A is 169.254.`net`.1, B .2.
    pub net: u8,
    /// With [`Netns::routed`]: the router's namespace, tbf runs there.
    router: Option<String>,
    /// B's address.
    b_ip: String,
}

fn sh(args: &[&str]) {
    let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(st.success(), "{args:?} failed");
}

impl Netns {
    /// A pair named after this process and `tag` (one letter), on subnet
    /// 169.254.`net`.0/24.
    pub fn new(tag: char, net: u8) -> Netns {
        let id = std::process::id() % 100_000;
        let (a, b) = (format!("nrA{tag}{id}"), format!("nrB{tag}{id}"));
        let (va, vb) = (format!("nr{tag}{id}a"), format!("nr{tag}{id}b"));
        let n = Netns {
            a: a.clone(),
            b: b.clone(),
            va: va.clone(),
            net,
            router: None,
            b_ip: format!("169.254.{net}.2"),
        };
        sh(&["ip", "netns", "add", &a]);
        sh(&["ip", "netns", "add", &b]);
        sh(&[
            "ip", "link", "add", &va, "type", "veth", "peer", "name", &vb,
        ]);
        sh(&["ip", "link", "set", &va, "netns", &a]);
        sh(&["ip", "link", "set", &vb, "netns", &b]);
        for (ns, dev, host) in [(&a, &va, 1), (&b, &vb, 2)] {
            let addr = format!("169.254.{net}.{host}/24");
            sh(&["ip", "-n", ns, "addr", "add", &addr, "dev", dev]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        n
    }

    /// A, a router R and B in a line: A 10.`net`.1.1 — R — B 10.`net`.2.2,
    /// R forwarding. A `tbf` then sits in R, on its way to B, as on a real
    /// path: the sender's own qdisc would hold little, as TCP Small Queues
    /// keep each socket's share of it to about a millisecond of its rate.
    pub fn routed(tag: char, net: u8) -> Netns {
        let id = std::process::id() % 100_000;
        let (a, r, b) = (
            format!("nrA{tag}{id}"),
            format!("nrR{tag}{id}"),
            format!("nrB{tag}{id}"),
        );
        let (ar, ra) = (format!("nr{tag}{id}ar"), format!("nr{tag}{id}ra"));
        let (rb, br) = (format!("nr{tag}{id}rb"), format!("nr{tag}{id}br"));
        let n = Netns {
            a: a.clone(),
            b: b.clone(),
            va: rb.clone(),
            net,
            router: Some(r.clone()),
            b_ip: format!("10.{net}.2.2"),
        };
        for ns in [&a, &r, &b] {
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        for (x, y, nx, ny, sub) in [(&ar, &ra, &a, &r, 1), (&rb, &br, &r, &b, 2)] {
            sh(&["ip", "link", "add", x, "type", "veth", "peer", "name", y]);
            sh(&["ip", "link", "set", x, "netns", nx]);
            sh(&["ip", "link", "set", y, "netns", ny]);
            let (dx, dy) = (x.as_str(), y.as_str());
            sh(&[
                "ip",
                "-n",
                nx,
                "addr",
                "add",
                &format!("10.{net}.{sub}.1/24"),
                "dev",
                dx,
            ]);
            sh(&[
                "ip",
                "-n",
                ny,
                "addr",
                "add",
                &format!("10.{net}.{sub}.2/24"),
                "dev",
                dy,
            ]);
            sh(&["ip", "-n", nx, "link", "set", dx, "up"]);
            sh(&["ip", "-n", ny, "link", "set", dy, "up"]);
        }
        // A is 10.net.1.1, R 10.net.1.2 and 10.net.2.1, B 10.net.2.2.
        sh(&[
            "ip",
            "-n",
            &a,
            "route",
            "add",
            "default",
            "via",
            &format!("10.{net}.1.2"),
        ]);
        sh(&[
            "ip",
            "-n",
            &b,
            "route",
            "add",
            "default",
            "via",
            &format!("10.{net}.2.1"),
        ]);
        sh(&[
            "ip",
            "netns",
            "exec",
            &r,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ]);
        n
    }

    /// B's address.
    pub fn b_addr(&self) -> String {
        self.b_ip.clone()
    }

    /// Puts `tbf` with `args` (rate, burst, latency) on A's egress (or the
    /// router's towards B), replacing what was there.
    pub fn tbf(&self, args: &[&str]) {
        let ns = self.router.as_deref().unwrap_or(&self.a);
        let mut cmd = vec![
            "ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", &self.va, "root", "tbf",
        ];
        cmd.extend_from_slice(args);
        sh(&cmd);
    }

    /// A command run in namespace `ns`.
    pub fn exec(&self, ns: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]);
        c
    }

    /// Waits until something in namespace `ns` listens on TCP `port`.
    pub fn wait_listening(&self, ns: &str, port: u16) {
        let t0 = Instant::now();
        let filter = format!("sport = :{port}");
        loop {
            let out = Command::new("ip")
                .args(["netns", "exec", ns, "ss", "-Hltn", &filter])
                .output()
                .unwrap();
            if !out.stdout.is_empty() {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "nothing listens on {port} in {ns}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.a]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.b]).status();
        if let Some(r) = &self.router {
            let _ = Command::new("ip").args(["netns", "del", r]).status();
        }
    }
}

/// Runs a limiter measurement up to `tries` times until one passes. A stall
/// of this shared 2-core host (the sender or the relay descheduled for tens of
/// ms) can spoil one run; a broken analysis fails every run. Each failure is
/// printed, and the panic lists them all.
pub fn until_one_passes(tries: u32, mut run: impl FnMut() -> Result<String, String>) {
    let mut failures = Vec::new();
    for attempt in 1..=tries {
        match run() {
            Ok(what) => {
                eprintln!("attempt {attempt} passed: {what}");
                return;
            }
            Err(why) => {
                eprintln!("attempt {attempt}: {why}");
                failures.push(format!("attempt {attempt}: {why}"));
            }
        }
    }
    panic!("no run of {tries} passed:\n{}", failures.join("\n"));
}

/// The limiter tests of one binary run one at a time: each loads this
/// 2-core machine, and what one measures (a queue's delay, a relay's lag)
/// is what another's traffic would add.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}
