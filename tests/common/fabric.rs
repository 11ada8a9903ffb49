//! Many "nodes" as network namespaces on one bridge (in a namespace of its
//! own): node i has 169.254.`net`.(i+1)/24. Removed on drop, with their
//! /etc/netns files, whatever the test did. Also: an HTTP GET from inside a
//! node's namespace, made by a thread that enters it, so a test reads a
//! node's endpoint on its loopback without a process per request.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn sh(args: &[&str]) {
    let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(st.success(), "{args:?} failed");
}

pub struct Fabric {
    hub: String,
    pub nodes: Vec<String>,
    tag: char,
    net: u8,
    id: u32,
}

impl Fabric {
    /// `n` nodes, named after this process and `tag` (one letter), on
    /// subnet 169.254.`net`.0/24.
    pub fn new(tag: char, net: u8, n: usize) -> Fabric {
        let id = std::process::id() % 100_000;
        let hub = format!("nr{tag}h{id}");
        let mut f = Fabric {
            hub: hub.clone(),
            nodes: Vec::new(),
            tag,
            net,
            id,
        };
        sh(&["ip", "netns", "add", &hub]);
        sh(&["ip", "-n", &hub, "link", "add", "br0", "type", "bridge"]);
        sh(&["ip", "-n", &hub, "link", "set", "br0", "up"]);
        for _ in 0..n {
            f.add();
        }
        f
    }

    /// Adds a node; its index.
    pub fn add(&mut self) -> usize {
        let (tag, id, i) = (self.tag, self.id, self.nodes.len());
        let ns = format!("nr{tag}{i}n{id}");
        let (a, b) = (self.dev(i), format!("nr{tag}{i}{id}b"));
        sh(&["ip", "netns", "add", &ns]);
        self.nodes.push(ns.clone());
        sh(&["ip", "link", "add", &a, "type", "veth", "peer", "name", &b]);
        sh(&["ip", "link", "set", &a, "netns", &ns]);
        sh(&["ip", "link", "set", &b, "netns", &self.hub]);
        sh(&[
            "ip", "-n", &self.hub, "link", "set", &b, "master", "br0", "up",
        ]);
        let addr = format!("{}/24", self.ip(i));
        sh(&["ip", "-n", &ns, "addr", "add", &addr, "dev", &a]);
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        sh(&["ip", "-n", &ns, "link", "set", &a, "up"]);
        i
    }

    /// Node i's device (in its namespace).
    fn dev(&self, i: usize) -> String {
        format!("nr{}{i}{}a", self.tag, self.id)
    }

    /// Node i's address.
    pub fn ip(&self, i: usize) -> String {
        format!("169.254.{}.{}", self.net, i + 1)
    }

    /// Takes node i's link down or up.
    pub fn link(&self, i: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        sh(&[
            "ip",
            "-n",
            &self.nodes[i],
            "link",
            "set",
            &self.dev(i),
            state,
        ]);
    }

    /// Makes `name` resolve to `ips` inside namespace `ns`, as cluster DNS
    /// resolves a Service's name inside a pod.
    pub fn host(&self, ns: &str, name: &str, ips: &[&str]) {
        let dir = Path::new("/etc/netns").join(ns);
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = "127.0.0.1 localhost\n".to_string();
        for ip in ips {
            text.push_str(&format!("{ip} {name}\n"));
        }
        std::fs::write(dir.join("hosts"), text).unwrap();
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain([&self.hub]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns));
        }
    }
}

/// The body of `GET path` from `addr` as seen inside namespace `ns`
/// (`openmetrics`: asking for OpenMetrics).
pub fn http_get_in(
    ns: &str,
    addr: SocketAddr,
    path: &str,
    openmetrics: bool,
) -> std::io::Result<String> {
    let ns = ns.to_string();
    let path = path.to_string();
    std::thread::spawn(move || {
        let f = std::fs::File::open(Path::new("/var/run/netns").join(&ns))?;
        // This thread only: the socket it opens lives in the namespace.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let accept = if openmetrics {
            "Accept: application/openmetrics-text; version=1.0.0\r\n"
        } else {
            ""
        };
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{accept}\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        match out.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
            _ => Err(std::io::Error::other(format!("bad answer: {out:.200}"))),
        }
    })
    .join()
    .unwrap()
}
