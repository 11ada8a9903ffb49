//! A server's conversation spoken by hand, and its log read line by line:
//! for tests of what a hostile or broken client gets, and what the server
//! writes about it.
#![allow(dead_code)]

use crate::bin::{Proc, netrig};
use netrig::protocol::proto::{self, Message};
use serde_json::Value;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A control connection spoken by hand.
pub struct Raw(pub TcpStream);

impl Raw {
    /// Connects and says hello (no key).
    pub fn hello(addr: SocketAddr) -> Raw {
        let (r, ack) = Raw::try_hello(addr);
        assert!(matches!(ack, Ok(Message::HelloAck(_))), "{ack:?}");
        r
    }

    /// Connects, says hello (no key) and reads the answer, whatever it is.
    pub fn try_hello(addr: SocketAddr) -> (Raw, Result<Message, proto::ReadError>) {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut r = Raw(s);
        r.send(&Message::Hello(Message::hello()));
        let ack = r.recv();
        (r, ack)
    }

    pub fn send(&mut self, m: &Message) {
        proto::write_message(&mut self.0, m).unwrap();
    }

    /// Sends a JSON payload as one frame, whatever it says.
    pub fn send_json(&mut self, v: &Value) {
        let payload = serde_json::to_vec(v).unwrap();
        let mut b = vec![b'N', b'R', proto::FRAME_VERSION, 0];
        b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        b.extend_from_slice(&payload);
        self.0.write_all(&b).unwrap();
    }

    pub fn recv(&mut self) -> Result<Message, proto::ReadError> {
        proto::read_message(&mut self.0)
    }

    /// The refusal the server answers a request with.
    pub fn refusal(&mut self, request: &Value) -> String {
        self.send_json(request);
        match self.recv() {
            Ok(Message::Error { message, .. }) => message,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

/// A `netrig serve` at the default verbosity whose log lines are kept, with
/// the address it listens on.
pub struct Logged {
    _proc: Proc,
    pub addr: SocketAddr,
    pub lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Logged {
    pub fn start(extra: &[&str]) -> Logged {
        use std::io::BufRead;
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut proc = Proc(
            netrig(&args)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut out = std::io::BufReader::new(proc.0.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        let addr = first
            .split(" listening on ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {first:?}"));
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = std::sync::Arc::clone(&lines);
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                keep.lock().unwrap().push(l);
            }
        });
        Logged {
            _proc: proc,
            addr,
            lines,
        }
    }

    /// Waits (up to 10 s) for `n` log lines containing every one of
    /// `needles`, and returns them.
    pub fn wait_for(&self, needles: &[&str], n: usize) -> Vec<String> {
        let t0 = Instant::now();
        loop {
            let found: Vec<String> = (self.lines.lock().unwrap().iter())
                .filter(|l| needles.iter().all(|s| l.contains(s)))
                .cloned()
                .collect();
            if found.len() >= n {
                return found;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no log line with {needles:?}; the log: {:?}",
                self.lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
