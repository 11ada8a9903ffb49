//! The spike behind the choice of netrig's event core (docs/design.md): the
//! same connection work written on mio (one epoll loop per thread) and on
//! tokio (one current-thread runtime per thread), so bench/spike.sh can
//! measure both against bench/churn.c in one run: connections per second
//! served and made, and the memory an idle connection costs.
//!
//!   spike server mio|tokio PORT THREADS      churn.c's server: read once, reply 2 bytes, close
//!   spike client mio|tokio IP PORT SECONDS   connect, 64-byte request, 2-byte reply, close,
//!                                            one at a time; prints "PER_SEC FAILED"
//!   spike hold IP PORT N SECONDS             opens N idle connections, prints "held N", keeps
//!                                            them SECONDS
//!
//! Both servers read into one buffer per thread, so what differs is the
//! framework's own cost per connection: a slot and a registration for mio,
//! a task for tokio.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const REQ: usize = 64;
const REP: usize = 2;
const BUF: usize = 65536;

/// A non-blocking listener on 127.0.0.1:`port`, shared with the other
/// threads' listeners through SO_REUSEPORT (the kernel spreads accepts).
fn listener(port: u16) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    s.listen(4096)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::NotConnected
    )
}

fn mio_server(port: u16) -> io::Result<()> {
    use mio::net::{TcpListener, TcpStream};
    use mio::{Events, Interest, Poll, Token};
    const LISTENER: Token = Token(usize::MAX);
    let mut poll = Poll::new()?;
    let mut l = TcpListener::from_std(listener(port)?);
    poll.registry()
        .register(&mut l, LISTENER, Interest::READABLE)?;
    let mut conns: Vec<Option<TcpStream>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; BUF];
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for ev in &events {
            if ev.token() == LISTENER {
                while let Ok((mut s, _)) = l.accept() {
                    let _ = s.set_nodelay(true);
                    let k = free.pop().unwrap_or_else(|| {
                        conns.push(None);
                        conns.len() - 1
                    });
                    poll.registry()
                        .register(&mut s, Token(k), Interest::READABLE)?;
                    conns[k] = Some(s);
                }
                continue;
            }
            let k = ev.token().0;
            let Some(s) = conns.get_mut(k).and_then(Option::as_mut) else {
                continue;
            };
            let done = match s.read(&mut buf) {
                Ok(0) => true,
                Ok(_) => {
                    let _ = s.write(&[0u8; REP]);
                    true
                }
                Err(e) => !would_block(&e),
            };
            if done && let Some(mut s) = conns[k].take() {
                let _ = poll.registry().deregister(&mut s);
                free.push(k);
            }
        }
    }
}

thread_local! {
    static SHARED: RefCell<Vec<u8>> = RefCell::new(vec![0u8; BUF]);
}

fn tokio_server(port: u16) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(async {
        let l = tokio::net::TcpListener::from_std(listener(port)?)?;
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                loop {
                    if s.readable().await.is_err() {
                        return;
                    }
                    match SHARED.with(|b| s.try_read(&mut b.borrow_mut())) {
                        Ok(0) => return,
                        Ok(_) => {
                            let _ = s.try_write(&[0u8; REP]);
                            return;
                        }
                        Err(e) if would_block(&e) => continue,
                        Err(_) => return,
                    }
                }
            });
        }
    })
}

/// One mio connection's request and reply; Err if it failed.
fn mio_once(
    poll: &mut mio::Poll,
    events: &mut mio::Events,
    addr: SocketAddr,
) -> io::Result<()> {
    use mio::{Interest, Token};
    let mut s = mio::net::TcpStream::connect(addr)?;
    poll.registry()
        .register(&mut s, Token(0), Interest::READABLE | Interest::WRITABLE)?;
    let (mut sent, mut got) = (0, 0);
    let mut rep = [0u8; REP];
    let r = loop {
        poll.poll(events, None)?;
        if let Some(e) = s.take_error()? {
            break Err(e);
        }
        if sent == 0 {
            let _ = s.set_nodelay(true);
        }
        while sent < REQ {
            match s.write(&[7u8; REQ][sent..]) {
                Ok(n) => sent += n,
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(e),
            }
        }
        while sent == REQ && got < REP {
            match s.read(&mut rep[got..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(e),
            }
        }
        if got == REP {
            break Ok(());
        }
    };
    poll.registry().deregister(&mut s)?;
    r
}

fn mio_client(addr: SocketAddr, secs: f64) -> io::Result<(u64, u64)> {
    let mut poll = mio::Poll::new()?;
    let mut events = mio::Events::with_capacity(8);
    let (mut done, mut failed) = (0, 0);
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < secs {
        match mio_once(&mut poll, &mut events, addr) {
            Ok(()) => done += 1,
            Err(_) => failed += 1,
        }
    }
    Ok((done, failed))
}

fn tokio_client(addr: SocketAddr, secs: f64) -> io::Result<(u64, u64)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(async {
        let (mut done, mut failed) = (0, 0);
        let t0 = Instant::now();
        while t0.elapsed().as_secs_f64() < secs {
            let once = async {
                let mut s = tokio::net::TcpStream::connect(addr).await?;
                s.set_nodelay(true)?;
                s.write_all(&[7u8; REQ]).await?;
                let mut rep = [0u8; REP];
                s.read_exact(&mut rep).await?;
                Ok::<_, io::Error>(())
            };
            match once.await {
                Ok(()) => done += 1,
                Err(_) => failed += 1,
            }
        }
        Ok((done, failed))
    })
}

fn hold(addr: SocketAddr, n: usize, secs: u64) -> io::Result<()> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(std::net::TcpStream::connect(addr)?);
    }
    println!("held {}", held.len());
    io::stdout().flush()?;
    std::thread::sleep(Duration::from_secs(secs));
    Ok(())
}

fn usage() -> ! {
    eprintln!(
        "usage: spike server mio|tokio PORT THREADS | spike client mio|tokio IP PORT SECONDS | spike hold IP PORT N SECONDS"
    );
    std::process::exit(2)
}

fn main() -> io::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let num = |s: &str| s.parse::<u64>().unwrap_or_else(|_| usage());
    let addr = |ip: &str, port: &str| -> SocketAddr {
        format!("{ip}:{port}").parse().unwrap_or_else(|_| usage())
    };
    match a.as_slice() {
        ["server", kind, port, threads] => {
            let port = num(port) as u16;
            let serve = match *kind {
                "mio" => mio_server,
                "tokio" => tokio_server,
                _ => usage(),
            };
            let handles: Vec<_> = (0..num(threads))
                .map(|_| std::thread::spawn(move || serve(port)))
                .collect();
            for h in handles {
                if let Ok(Err(e)) = h.join() {
                    return Err(e);
                }
            }
            Ok(())
        }
        ["client", kind, ip, port, secs] => {
            let secs = secs.parse::<f64>().unwrap_or_else(|_| usage());
            let t0 = Instant::now();
            let (done, failed) = match *kind {
                "mio" => mio_client(addr(ip, port), secs)?,
                "tokio" => tokio_client(addr(ip, port), secs)?,
                _ => usage(),
            };
            println!("{:.0} {failed}", done as f64 / t0.elapsed().as_secs_f64());
            Ok(())
        }
        ["hold", ip, port, n, secs] => hold(addr(ip, port), num(n) as usize, num(secs)),
        _ => usage(),
    }
}
