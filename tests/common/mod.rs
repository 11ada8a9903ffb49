//! Shared test helpers: an in-process server, a recording observer, and a TCP
//! fault relay that records exactly what it did.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use netrig::server::{Server, ServerConfig};
use netrig::stats::IntervalRow;
use netrig::tcp::client::{self, ConnectionRecord, Observer, RunReport};
use netrig::tcp::config::TcpClientConfig;

/// A server on 127.0.0.1:<ephemeral>, stopped on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub fn start() -> TestServer {
        let server = Server::bind(ServerConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
            verbosity: 0,
            ..ServerConfig::default()
        })
        .expect("bind test server");
        let addr = server.local_addrs()[0];
        let stop = server.stop_handle();
        let handle = Some(std::thread::spawn(move || server.run()));
        TestServer { addr, stop, handle }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Collects everything the client reports.
#[derive(Default)]
pub struct Collect {
    pub rows: Vec<IntervalRow>,
    pub conns: Vec<ConnectionRecord>,
}

impl Observer for Collect {
    fn interval(&mut self, row: &IntervalRow) {
        self.rows.push(*row);
    }
    fn connection(&mut self, rec: &ConnectionRecord) {
        self.conns.push(rec.clone());
    }
}

/// Runs a client against `target` with `tweak` applied to the defaults.
pub fn run_client(
    target: SocketAddr,
    tweak: impl FnOnce(&mut TcpClientConfig),
) -> (RunReport, Collect) {
    let mut cfg = TcpClientConfig::new(vec![target.to_string()]);
    cfg.interval = Some(std::time::Duration::from_millis(200));
    cfg.idle_timeout = Some(std::time::Duration::from_secs(10));
    tweak(&mut cfg);
    let mut c = Collect::default();
    let r = client::run(cfg, Arc::new(AtomicBool::new(false)), &mut c).expect("client run");
    (r, c)
}

/// What the relay does to one direction of every connection.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Pass everything through.
    None,
    /// XOR one byte at this offset of the TCP byte stream with 0x01.
    Flip { at: u64 },
    /// Reset both sides once this many bytes have passed.
    Cut { after: u64 },
}

/// Something the relay did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Flipped the byte at `stream_offset`; `data_offset` is the same byte
    /// counted from the end of the connection's first frame (the data stream).
    Flipped {
        conn: usize,
        c2s: bool,
        stream_offset: u64,
        data_offset: u64,
    },
    /// Reset the connection after `after` bytes.
    Cut { conn: usize, c2s: bool, after: u64 },
}

pub struct Relay {
    pub addr: SocketAddr,
    pub events: Arc<Mutex<Vec<Event>>>,
}

impl Relay {
    /// Relays to `upstream`, applying `c2s` and `s2c` faults to every connection.
    pub fn start(upstream: SocketAddr, c2s: Fault, s2c: Fault) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let ev = Arc::clone(&events);
        std::thread::spawn(move || {
            for (conn, c) in l.incoming().enumerate() {
                let Ok(client) = c else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let pair = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let e1 = Arc::clone(&ev);
                let e2 = Arc::clone(&ev);
                let (c1, s1) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || pump(conn, true, c1, s1, c2s, &e1, &pair));
                let pair2 = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || pump(conn, false, server, client, s2c, &e2, &pair2));
            }
        });
        Relay { addr, events }
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }
}

fn reset(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(std::time::Duration::ZERO));
    let _ = s.shutdown(Shutdown::Both);
}

fn pump(
    conn: usize,
    c2s: bool,
    mut from: TcpStream,
    mut to: TcpStream,
    fault: Fault,
    events: &Mutex<Vec<Event>>,
    both: &(TcpStream, TcpStream),
) {
    let mut buf = vec![0u8; 65536];
    let mut off = 0u64;
    let mut head = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => n,
        };
        if head.len() < 8 {
            head.extend_from_slice(&buf[..n.min(8 - head.len())]);
        }
        let chunk = &mut buf[..n];
        match fault {
            Fault::Flip { at } if off <= at && at < off + n as u64 => {
                chunk[(at - off) as usize] ^= 0x01;
                let frame = 8 + u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as u64;
                events.lock().unwrap().push(Event::Flipped {
                    conn,
                    c2s,
                    stream_offset: at,
                    data_offset: at - frame,
                });
            }
            Fault::Cut { after } if off + n as u64 > after => {
                let keep = (after - off) as usize;
                let _ = to.write_all(&chunk[..keep]);
                events.lock().unwrap().push(Event::Cut { conn, c2s, after });
                reset(&both.0);
                reset(&both.1);
                return;
            }
            _ => {}
        }
        if to.write_all(chunk).is_err() {
            return;
        }
        off += n as u64;
    }
}
