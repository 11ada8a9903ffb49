//! iperf3 as pure code. Here, its wire protocol, server side: the cookie, the
//! control connection's state bytes, its length-prefixed JSON messages (test
//! parameters, results) and a machine that says what the client may send
//! next. `server::iperf3` feeds it bytes from sockets and acts on its events.
//!
//! The facts come from iperf3's sources (esnet/iperf, read at c9b7422):
//! the state numbers from `src/iperf_api.h` (TEST_START 1 … IPERF_DONE 16,
//! ACCESS_DENIED -1, SERVER_ERROR -2), the cookie from `iperf.h`
//! (COOKIE_SIZE 37: 36 characters and a NUL) and `iperf_util.c`
//! (`make_cookie`: characters of a-z and 2-7); the JSON framing from
//! `iperf_api.c` (`JSON_write`/`JSON_read`: a 4-byte big-endian length,
//! then the JSON text; parameters at most MAX_PARAMS_JSON_STRING, 8 KiB);
//! the parameter names from `send_parameters`/`get_parameters`, the results'
//! from `send_results`/`get_results`; the order of the conversation from
//! `iperf_server_api.c` (`iperf_accept`, `iperf_handle_message_server`,
//! `iperf_run_server`).
//!
//! `json` writes a netrig result as iperf3's `-J` document; `udp` holds
//! its datagram header and receiver counts.
//!
//! Protocol layer: no sockets, no clock.

use serde_json::{Value, json};
use thiserror::Error;

pub mod client;
pub mod json;
pub mod udp;

#[cfg(test)]
mod tests;

/// Bytes of a cookie on the wire: 36 characters and a NUL (`COOKIE_SIZE`).
pub const COOKIE_LEN: usize = 37;
/// Longest parameter message a server reads (`MAX_PARAMS_JSON_STRING`).
pub const MAX_PARAMS_JSON: u32 = 8 * 1024;
/// Longest results message this server reads. iperf3 sets no bound; a
/// client's results are a few hundred bytes a stream and at most 128
/// streams, so this is ample and keeps a hostile length from costing memory.
pub const MAX_RESULTS_JSON: u32 = 256 * 1024;
/// Most streams a test may ask for (`MAX_STREAMS`).
pub const MAX_STREAMS: u32 = 128;
/// Largest TCP block (`MAX_BLOCKSIZE`, 1 MiB).
pub const MAX_BLOCKSIZE: u32 = 1 << 20;
/// Smallest and largest UDP datagram payload (`MIN_UDP_BLOCKSIZE`,
/// `MAX_UDP_BLOCKSIZE`).
pub const MIN_UDP_BLOCKSIZE: u32 = 16;
pub const MAX_UDP_BLOCKSIZE: u32 = 65535 - 8 - 20;
/// Longest test and omitted lead-in, seconds (`MAX_TIME`, `MAX_OMIT_TIME`).
pub const MAX_TIME: u64 = 86_400;
pub const MAX_OMIT: u64 = 600;
/// iperf3's default TCP block (`DEFAULT_TCP_BLKSIZE`) and UDP datagram
/// (`DEFAULT_UDP_BLKSIZE`), for a client that sends no `len`.
pub const DEFAULT_TCP_BLKSIZE: u32 = 128 * 1024;
pub const DEFAULT_UDP_BLKSIZE: u32 = 1460;

/// The control connection's state bytes (`iperf_api.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum State {
    TestStart = 1,
    TestRunning = 2,
    TestEnd = 4,
    ParamExchange = 9,
    CreateStreams = 10,
    ServerTerminate = 11,
    ClientTerminate = 12,
    ExchangeResults = 13,
    DisplayResults = 14,
    IperfDone = 16,
    AccessDenied = -1,
    ServerError = -2,
}

impl State {
    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        self as i8 as u8
    }
}

/// Why a client's bytes were not iperf3 as this server speaks it.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Iperf3Error {
    #[error("not an iperf3 cookie (36 characters of a-z and 2-7, then a NUL)")]
    BadCookie,
    #[error("iperf3 {what} message of {len} bytes is over the {max}-byte limit")]
    TooLong {
        what: &'static str,
        len: u32,
        max: u32,
    },
    #[error("empty iperf3 {0} message")]
    Empty(&'static str),
    #[error("iperf3 {what} message is not a JSON object: {why}")]
    Json { what: &'static str, why: String },
    #[error("iperf3 parameter {name}: {why}")]
    Param {
        name: &'static str,
        why: &'static str,
    },
    #[error("iperf3 results: {0}")]
    Results(&'static str),
    #[error("unexpected iperf3 state byte {byte} {context}")]
    UnexpectedState { byte: i8, context: &'static str },
    #[error("bytes from an iperf3 client {0}")]
    Unexpected(&'static str),
    #[error("iperf3 {0} is not supported by this server")]
    Unsupported(&'static str),
}

/// A test's cookie, as the client sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cookie(pub [u8; COOKIE_LEN]);

impl Cookie {
    /// Checks the shape `make_cookie` gives every cookie, so that anything
    /// else (a netrig frame, an HTTP request, noise) is told apart at once.
    pub fn parse(b: &[u8]) -> Result<Cookie, Iperf3Error> {
        let arr: [u8; COOKIE_LEN] = b.try_into().map_err(|_| Iperf3Error::BadCookie)?;
        let (chars, nul) = arr.split_at(COOKIE_LEN - 1);
        let ok = nul == [0] && chars.iter().all(|c| matches!(c, b'a'..=b'z' | b'2'..=b'7'));
        ok.then_some(Cookie(arr)).ok_or(Iperf3Error::BadCookie)
    }

    /// Whether `prefix` (at least a byte) may be the start of a cookie: a
    /// connection's first bytes tell iperf3 from netrig, whose frames
    /// start with `NR` (`proto::MAGIC`), never a cookie's character.
    pub fn may_start(prefix: &[u8]) -> bool {
        let chars = &prefix[..prefix.len().min(COOKIE_LEN - 1)];
        !prefix.is_empty()
            && chars.iter().all(|c| matches!(c, b'a'..=b'z' | b'2'..=b'7'))
            && prefix.get(COOKIE_LEN - 1).is_none_or(|&b| b == 0)
    }

    /// The 36 characters, for logs.
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.0[..COOKIE_LEN - 1]).unwrap_or("?")
    }
}

/// Transport of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// Who sends: the client (iperf3's default), the server (`-R`) or both
/// (`--bidir`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    ClientSends,
    Reverse,
    Bidir,
}

/// A test's parameters, as `get_parameters` reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub proto: Proto,
    pub mode: Mode,
    /// Streams per direction (`-P`).
    pub parallel: u32,
    /// Seconds (`-t`); 0 with `num` or `blockcount` set.
    pub time: u64,
    /// Seconds left out at the start (`-O`).
    pub omit: u64,
    /// Bytes to send (`-n`), 0: none set.
    pub num: u64,
    /// Blocks to send (`-k`), 0: none set.
    pub blockcount: u64,
    /// Bytes per write (`-l`).
    pub len: u32,
    /// Socket buffer (`-w`), 0: the kernel's.
    pub window: u32,
    /// Bit/s per stream (`-b`), 0: unlimited.
    pub bandwidth: u64,
    /// `--get-server-output`.
    pub get_server_output: bool,
    /// `--udp-counters-64bit`.
    pub udp_counters_64bit: bool,
    /// `-N`.
    pub nodelay: bool,
    /// `-C`.
    pub congestion: Option<String>,
    /// `-M`.
    pub mss: u32,
    /// The client asked to authenticate (`--username`).
    pub authtoken: bool,
    pub client_version: Option<String>,
}

impl Params {
    /// Streams the server accepts: `parallel`, twice that for `--bidir`.
    pub fn streams(&self) -> u32 {
        match self.mode {
            Mode::Bidir => self.parallel * 2,
            _ => self.parallel,
        }
    }

    /// Whether the `index`th accepted stream (from 0) is one the server
    /// sends on: the first `parallel` receive in bidir mode
    /// (`iperf_run_server` counts receiving streams first).
    pub fn server_sends(&self, index: u32) -> bool {
        match self.mode {
            Mode::ClientSends => false,
            Mode::Reverse => true,
            Mode::Bidir => index >= self.parallel,
        }
    }

    /// Seconds the test runs including the omitted lead-in: what the
    /// server's `--max-duration` is checked against. `None` when only a byte
    /// or block count bounds it.
    pub fn seconds(&self) -> Option<u64> {
        (self.time > 0).then_some(self.time + self.omit)
    }

    /// Parses and checks a parameter message's JSON text.
    pub fn parse(text: &[u8]) -> Result<Params, Iperf3Error> {
        let v = object(text, "parameters")?;
        let flag = |k: &str| v.get(k).is_some_and(|x| x == &Value::Bool(true));
        let present = |k: &str| v.get(k).is_some_and(Value::is_number);
        let proto = match (flag("tcp"), flag("udp"), flag("sctp")) {
            (_, _, true) => return Err(Iperf3Error::Unsupported("SCTP")),
            (_, true, _) => Proto::Udp,
            _ => Proto::Tcp,
        };
        let mode = match (flag("reverse"), flag("bidirectional")) {
            (_, true) => Mode::Bidir,
            (true, false) => Mode::Reverse,
            _ => Mode::ClientSends,
        };
        let parallel = num(&v, "parallel", 1, u64::from(MAX_STREAMS), "1 to 128")?.unwrap_or(1);
        let time = num(&v, "time", 0, MAX_TIME, "0 to 86400 s")?.unwrap_or(10);
        let omit = num(&v, "omit", 0, MAX_OMIT, "0 to 600 s")?.unwrap_or(0);
        let num_bytes = num(&v, "num", 0, u64::MAX >> 11, "not negative")?.unwrap_or(0);
        let blockcount = num(&v, "blockcount", 0, u64::MAX >> 21, "not negative")?.unwrap_or(0);
        let window = num(&v, "window", 0, 512 << 20, "0 to 512 MiB")?.unwrap_or(0);
        let mss = num(&v, "MSS", 0, 32 * 1024 - 1, "0 to 32767")?.unwrap_or(0);
        let bandwidth = num(&v, "bandwidth", 0, u64::MAX >> 1, "not negative")?.unwrap_or(0);
        let len = match (
            proto,
            num(&v, "len", 0, u64::from(u32::MAX), "not negative")?,
        ) {
            (Proto::Tcp, None | Some(0)) => DEFAULT_TCP_BLKSIZE,
            (Proto::Udp, None | Some(0)) => DEFAULT_UDP_BLKSIZE,
            (Proto::Tcp, Some(l)) if l > u64::from(MAX_BLOCKSIZE) => {
                return Err(Iperf3Error::Param {
                    name: "len",
                    why: "over 1 MiB",
                });
            }
            (Proto::Udp, Some(l))
                if l < u64::from(MIN_UDP_BLOCKSIZE) || l > u64::from(MAX_UDP_BLOCKSIZE) =>
            {
                return Err(Iperf3Error::Param {
                    name: "len",
                    why: "a UDP datagram is 16 to 65507 bytes",
                });
            }
            (_, Some(l)) => l as u32,
        };
        let text_of = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        if time == 0 && num_bytes == 0 && blockcount == 0 {
            return Err(Iperf3Error::Param {
                name: "time",
                why: "a test with neither a time nor a byte or block count never ends",
            });
        }
        Ok(Params {
            proto,
            mode,
            parallel: parallel as u32,
            time,
            omit,
            num: num_bytes,
            blockcount,
            len,
            window: window as u32,
            bandwidth,
            get_server_output: present("get_server_output"),
            udp_counters_64bit: present("udp_counters_64bit"),
            nodelay: flag("nodelay"),
            congestion: text_of("congestion"),
            mss: mss as u32,
            authtoken: v.get("authtoken").is_some(),
            client_version: text_of("client_version"),
        })
    }

    /// Bytes the server's sending side stops at (`-n`, or `-k` blocks of
    /// `len`), if the client set either.
    pub fn send_limit(&self) -> Option<u64> {
        match (self.num, self.blockcount) {
            (0, 0) => None,
            (0, k) => Some(k.saturating_mul(u64::from(self.len))),
            (n, _) => Some(n),
        }
    }
}

/// Parses `text` as a JSON object, naming `what` in the error.
fn object(text: &[u8], what: &'static str) -> Result<serde_json::Map<String, Value>, Iperf3Error> {
    match serde_json::from_slice::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Iperf3Error::Json {
            what,
            why: "not an object".into(),
        }),
        Err(e) => Err(Iperf3Error::Json {
            what,
            why: e.to_string(),
        }),
    }
}

/// An integer parameter within `lo..=hi`, `None` when absent. iperf3 reads
/// numbers as C ints (`valueint`): a fraction is truncated, as there.
fn num(
    v: &serde_json::Map<String, Value>,
    name: &'static str,
    lo: u64,
    hi: u64,
    why: &'static str,
) -> Result<Option<u64>, Iperf3Error> {
    let Some(x) = v.get(name) else {
        return Ok(None);
    };
    let bad = Iperf3Error::Param { name, why };
    let n = match x {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| *f >= 0.0 && f.is_finite())
                .map(|f| f as u64)
        }),
        _ => None,
    };
    match n {
        Some(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
        _ => Err(bad),
    }
}

/// One stream's figures in a results message (`send_results`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StreamResult {
    /// iperf3's stream number: 1, then 3, 4, … (`iperf_add_stream`).
    pub id: u32,
    pub bytes: u64,
    pub retransmits: i64,
    /// Seconds.
    pub jitter: f64,
    pub errors: u64,
    pub omitted_errors: u64,
    pub packets: u64,
    pub omitted_packets: u64,
    /// Seconds from the stream's start.
    pub start_time: f64,
    pub end_time: f64,
}

/// iperf3's number for the `index`th stream (from 0): 1 for the first, then
/// `index + 2`, a quirk both ends keep (`iperf_add_stream`).
pub fn stream_id(index: u32) -> u32 {
    if index == 0 { 1 } else { index + 2 }
}

/// A results message, either end's.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Results {
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    /// 1 when the sender reports retransmits, 0 when it cannot, -1 when
    /// this end only received.
    pub sender_has_retransmits: i64,
    pub streams: Vec<StreamResult>,
    /// `server_output_text`, for `--get-server-output`.
    pub server_output_text: Option<String>,
}

impl Results {
    /// Takes the CPU figures from netrig's count over the test: user,
    /// system and their sum over the wall time, in percent of one core, as
    /// iperf3's `cpu_util` (`iperf_util.c`) figures them from
    /// `getrusage(RUSAGE_SELF)`.
    pub fn set_cpu(&mut self, u: &crate::protocol::cpu::CpuUsage) {
        let r = u.report();
        self.cpu_util_total = r.total_percent;
        self.cpu_util_user = r.user_percent;
        self.cpu_util_system = r.system_percent;
    }

    /// The JSON text the server sends.
    pub fn to_json(&self) -> Vec<u8> {
        let streams: Vec<Value> = self
            .streams
            .iter()
            .map(|s| {
                json!({
                    "id": s.id, "bytes": s.bytes, "retransmits": s.retransmits,
                    "jitter": s.jitter, "errors": s.errors,
                    "omitted_errors": s.omitted_errors, "packets": s.packets,
                    "omitted_packets": s.omitted_packets,
                    "start_time": s.start_time, "end_time": s.end_time,
                })
            })
            .collect();
        let mut o = json!({
            "cpu_util_total": self.cpu_util_total,
            "cpu_util_user": self.cpu_util_user,
            "cpu_util_system": self.cpu_util_system,
            "sender_has_retransmits": self.sender_has_retransmits,
            "streams": streams,
        });
        if let (Some(t), Some(m)) = (&self.server_output_text, o.as_object_mut()) {
            m.insert("server_output_text".into(), Value::String(t.clone()));
        }
        o.to_string().into_bytes()
    }

    /// Parses a client's results, requiring what `get_results` requires.
    pub fn parse(text: &[u8]) -> Result<Results, Iperf3Error> {
        let v = object(text, "results")?;
        let f = |m: &serde_json::Map<String, Value>, k: &str| m.get(k).and_then(Value::as_f64);
        let (Some(total), Some(user), Some(system), Some(retr)) = (
            f(&v, "cpu_util_total"),
            f(&v, "cpu_util_user"),
            f(&v, "cpu_util_system"),
            f(&v, "sender_has_retransmits"),
        ) else {
            return Err(Iperf3Error::Results(
                "a CPU or retransmit figure is missing",
            ));
        };
        let Some(list) = v.get("streams").and_then(Value::as_array) else {
            return Err(Iperf3Error::Results("no streams array"));
        };
        if list.len() > 2 * MAX_STREAMS as usize {
            return Err(Iperf3Error::Results("more streams than a test has"));
        }
        let mut streams = Vec::with_capacity(list.len());
        for s in list {
            let Some(m) = s.as_object() else {
                return Err(Iperf3Error::Results("a stream is not an object"));
            };
            let u = |k: &str| {
                m.get(k)
                    .and_then(Value::as_f64)
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .map(|x| x as u64)
            };
            let (Some(id), Some(bytes), Some(packets), Some(errors), Some(jitter)) = (
                u("id"),
                u("bytes"),
                u("packets"),
                u("errors"),
                f(m, "jitter"),
            ) else {
                return Err(Iperf3Error::Results(
                    "a stream lacks id, bytes, packets, errors or jitter",
                ));
            };
            streams.push(StreamResult {
                id: u32::try_from(id)
                    .map_err(|_| Iperf3Error::Results("stream id out of range"))?,
                bytes,
                retransmits: f(m, "retransmits").map_or(-1, |r| r as i64),
                jitter,
                errors,
                omitted_errors: u("omitted_errors").unwrap_or(0),
                packets,
                omitted_packets: u("omitted_packets").unwrap_or(0),
                start_time: f(m, "start_time").unwrap_or(0.0),
                end_time: f(m, "end_time").unwrap_or(0.0),
            });
        }
        Ok(Results {
            cpu_util_total: total,
            cpu_util_user: user,
            cpu_util_system: system,
            sender_has_retransmits: retr as i64,
            streams,
            server_output_text: None,
        })
    }
}

/// A JSON message as `JSON_write` frames it: length, then text.
pub fn frame_json(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + text.len());
    out.extend_from_slice(&(text.len() as u32).to_be_bytes());
    out.extend_from_slice(text);
    out
}

/// What the client said.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Cookie(Cookie),
    Params(Box<Params>),
    /// The client stopped sending (`TEST_END`): the server answers with
    /// `EXCHANGE_RESULTS` and waits for the client's results.
    TestEnd,
    Results(Box<Results>),
    /// `IPERF_DONE`: the conversation is over.
    Done,
    /// `CLIENT_TERMINATE`: the client gave up (interrupted).
    Terminated,
}

/// Where the server's end of a control connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Cookie,
    Params,
    /// Parameters read; streams being set up, then the test running.
    Running,
    Results,
    /// Results exchanged; waiting for `IPERF_DONE`.
    Display,
    Closed,
}

/// The server's end of an iperf3 control connection, fed bytes as they
/// come; it checks their order and bounds and says what they were.
#[derive(Debug)]
pub struct Control {
    phase: Phase,
    buf: Vec<u8>,
}

impl Default for Control {
    fn default() -> Self {
        Control::new()
    }
}

impl Control {
    pub fn new() -> Control {
        Control {
            phase: Phase::Cookie,
            buf: Vec::new(),
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// How many bytes the machine needs before it can say more: what a
    /// reader should read at most, so nothing past the message is taken.
    pub fn wants(&self) -> usize {
        let have = self.buf.len();
        match self.phase {
            Phase::Cookie => COOKIE_LEN - have,
            Phase::Params | Phase::Results if have < 4 => 4 - have,
            Phase::Params | Phase::Results => {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                (4 + len as usize).saturating_sub(have).max(1)
            }
            Phase::Running | Phase::Display => 1,
            Phase::Closed => 0,
        }
    }

    /// Takes the client's next bytes; returns what they completed. An error
    /// closes the conversation.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<Event>, Iperf3Error> {
        let mut events = Vec::new();
        while !bytes.is_empty() {
            if self.phase == Phase::Closed {
                return Err(Iperf3Error::Unexpected("after the conversation ended"));
            }
            let n = self.wants().min(bytes.len());
            self.buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            match self.step() {
                Ok(Some(e)) => events.push(e),
                Ok(None) => {}
                Err(e) => {
                    self.phase = Phase::Closed;
                    return Err(e);
                }
            }
        }
        Ok(events)
    }

    fn step(&mut self) -> Result<Option<Event>, Iperf3Error> {
        match self.phase {
            Phase::Cookie if self.buf.len() == COOKIE_LEN => {
                let c = Cookie::parse(&self.buf)?;
                self.next(Phase::Params);
                Ok(Some(Event::Cookie(c)))
            }
            Phase::Params | Phase::Results if self.buf.len() == 4 => {
                let (what, max) = match self.phase {
                    Phase::Params => ("parameters", MAX_PARAMS_JSON),
                    _ => ("results", MAX_RESULTS_JSON),
                };
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                if len == 0 {
                    return Err(Iperf3Error::Empty(what));
                }
                if len > max {
                    return Err(Iperf3Error::TooLong { what, len, max });
                }
                Ok(None)
            }
            Phase::Params | Phase::Results if self.buf.len() > 4 && self.complete() => {
                let text = &self.buf[4..];
                let e = match self.phase {
                    Phase::Params => Event::Params(Box::new(Params::parse(text)?)),
                    _ => Event::Results(Box::new(Results::parse(text)?)),
                };
                let next = match self.phase {
                    Phase::Params => Phase::Running,
                    _ => Phase::Display,
                };
                self.next(next);
                Ok(Some(e))
            }
            Phase::Running | Phase::Display => {
                let byte = self.buf[0] as i8;
                self.buf.clear();
                match (self.phase, byte) {
                    // iperf_handle_message_server takes TEST_START and ignores it.
                    (Phase::Running, 1) => Ok(None),
                    (Phase::Running, 4) => {
                        self.next(Phase::Results);
                        Ok(Some(Event::TestEnd))
                    }
                    (_, 12) => {
                        self.next(Phase::Closed);
                        Ok(Some(Event::Terminated))
                    }
                    (_, 16) => {
                        self.next(Phase::Closed);
                        Ok(Some(Event::Done))
                    }
                    (Phase::Running, _) => Err(Iperf3Error::UnexpectedState {
                        byte,
                        context: "while the test runs",
                    }),
                    _ => Err(Iperf3Error::UnexpectedState {
                        byte,
                        context: "after the results",
                    }),
                }
            }
            _ => Ok(None),
        }
    }

    /// Whether the JSON message in the buffer is whole.
    fn complete(&self) -> bool {
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        self.buf.len() == 4 + len as usize
    }

    fn next(&mut self, p: Phase) {
        self.phase = p;
        self.buf.clear();
    }
}
