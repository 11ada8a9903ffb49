//! iperf3's control protocol, client side: what `netrig tcp --iperf3` and
//! `netrig udp --iperf3` say to an unmodified `iperf3 -s`, as a machine fed
//! the server's bytes. It shares the wire facts with the server's machine
//! (`super`): state bytes, length-prefixed JSON, the results message.
//!
//! The order is iperf3's client (esnet/iperf at c9b7422,
//! `src/iperf_client_api.c`: `iperf_connect` writes the cookie;
//! `iperf_handle_message_client` answers PARAM_EXCHANGE with the
//! parameters, CREATE_STREAMS by opening the streams — for `--bidir` the
//! sending ones first —, waits for TEST_START and TEST_RUNNING; the client
//! alone decides the test is over and sends TEST_END (`iperf_run_client`),
//! then on EXCHANGE_RESULTS sends its results and reads the server's
//! (`iperf_exchange_results`), and on DISPLAY_RESULTS ends with
//! IPERF_DONE). ACCESS_DENIED is a busy server (IEACCESSDENIED); SERVER_ERROR
//! is followed by two 32-bit big-endian numbers, iperf3's error number and
//! an errno. Parameter names are `send_parameters`' (`iperf_api.c`).
//!
//! Protocol layer: no sockets, no clock.

use serde_json::{Value, json};
use thiserror::Error;

use super::{
    COOKIE_LEN, Cookie, Iperf3Error, MAX_RESULTS_JSON, Mode, Params, Proto, Results, State,
    frame_json,
};

/// iperf3's default pacing timer (`-pacing-timer`, µs), sent as its
/// client does.
const PACING_TIMER_US: u64 = 1000;

/// Why an iperf3 server's conversation ended before its results.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ClientError {
    #[error("the iperf3 server is busy running a test (it answered ACCESS_DENIED)")]
    Busy,
    #[error("the iperf3 server refused the test: {}", server_error_text(*.code, *.errno))]
    ServerError { code: i32, errno: i32 },
    #[error("the iperf3 server ended the test (SERVER_TERMINATE)")]
    Terminated,
    #[error("not an iperf3 server: it sent byte {byte} {context}")]
    NotIperf3 { byte: u8, context: &'static str },
    #[error("the iperf3 server sent bytes {0}")]
    Unexpected(&'static str),
    #[error(transparent)]
    Wire(#[from] Iperf3Error),
}

/// iperf3's text for the error numbers a server refuses a test with
/// (`iperf_error.c`, `iperf_strerror`), the rest by number.
fn server_error_text(code: i32, errno: i32) -> String {
    let what = match code {
        27 => "total required bandwidth is larger than server limit".to_string(),
        37 => "test duration is longer than the server's maximum".to_string(),
        n => format!("iperf3 error number {n} (iperf_api.h)"),
    };
    if errno > 0 {
        format!("{what}, errno {errno}")
    } else {
        what
    }
}

/// A cookie from 36 random bytes, in `make_cookie`'s alphabet (a-z, 2-7:
/// 32 characters, so each byte's low 5 bits pick one).
pub fn cookie_from(random: [u8; COOKIE_LEN - 1]) -> Cookie {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut c = [0u8; COOKIE_LEN];
    for (out, r) in c.iter_mut().zip(random) {
        *out = ALPHABET[usize::from(r & 31)];
    }
    Cookie(c)
}

/// The parameters message a client sends (`send_parameters`).
pub fn params_json(p: &Params) -> Vec<u8> {
    let mut o = serde_json::Map::new();
    let proto = match p.proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
    };
    o.insert(proto.into(), json!(true));
    o.insert("omit".into(), json!(p.omit));
    o.insert("time".into(), json!(p.time));
    o.insert("num".into(), json!(p.num));
    o.insert("blockcount".into(), json!(p.blockcount));
    if p.mss > 0 {
        o.insert("MSS".into(), json!(p.mss));
    }
    if p.nodelay {
        o.insert("nodelay".into(), json!(true));
    }
    o.insert("parallel".into(), json!(p.parallel));
    match p.mode {
        Mode::ClientSends => {}
        Mode::Reverse => {
            o.insert("reverse".into(), json!(true));
        }
        Mode::Bidir => {
            o.insert("bidirectional".into(), json!(true));
        }
    }
    if p.window > 0 {
        o.insert("window".into(), json!(p.window));
    }
    o.insert("len".into(), json!(p.len));
    if p.bandwidth > 0 {
        o.insert("bandwidth".into(), json!(p.bandwidth));
    }
    o.insert("pacing_timer".into(), json!(PACING_TIMER_US));
    if let Some(c) = &p.congestion {
        o.insert("congestion".into(), json!(c));
    }
    if p.get_server_output {
        o.insert("get_server_output".into(), json!(1));
    }
    if p.udp_counters_64bit {
        o.insert("udp_counters_64bit".into(), json!(1));
    }
    if let Some(v) = &p.client_version {
        o.insert("client_version".into(), json!(v));
    }
    Value::Object(o).to_string().into_bytes()
}

/// What the server's bytes asked of the client.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    /// PARAM_EXCHANGE: write these bytes (the parameters message).
    Send(Vec<u8>),
    /// CREATE_STREAMS: open the test's streams now, each TCP one starting
    /// with the cookie.
    CreateStreams,
    /// TEST_START.
    TestStart,
    /// TEST_RUNNING: move the data, then call [`Client::test_end`].
    TestRunning,
    /// EXCHANGE_RESULTS: write [`Client::results`]' bytes.
    ExchangeResults,
    /// The server's results.
    ServerResults(Box<Results>),
    /// DISPLAY_RESULTS: write these bytes (IPERF_DONE); the conversation
    /// is over.
    Done(Vec<u8>),
}

/// Where the client's end stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientPhase {
    /// Waiting for PARAM_EXCHANGE.
    Params,
    /// Waiting for CREATE_STREAMS.
    Create,
    /// Waiting for TEST_START, then TEST_RUNNING.
    Start,
    Running2,
    /// The test runs; the server says nothing until TEST_END.
    Running,
    /// TEST_END sent; waiting for EXCHANGE_RESULTS.
    Exchange,
    /// Our results are due.
    OwnResults,
    /// Reading the server's results message.
    ServerResults,
    /// Waiting for DISPLAY_RESULTS.
    Display,
    /// SERVER_ERROR read; its two numbers follow.
    ErrorBody,
    Closed,
}

/// The client's end of an iperf3 control connection.
#[derive(Debug)]
pub struct Client {
    phase: ClientPhase,
    buf: Vec<u8>,
    params: Vec<u8>,
}

impl Client {
    /// A conversation for `p`, and the bytes that open it: the cookie.
    pub fn new(cookie: &Cookie, p: &Params) -> (Client, [u8; COOKIE_LEN]) {
        let c = Client {
            phase: ClientPhase::Params,
            buf: Vec::new(),
            params: frame_json(&params_json(p)),
        };
        (c, cookie.0)
    }

    pub fn phase(&self) -> ClientPhase {
        self.phase
    }

    /// Bytes the machine needs before it can say more (read no more).
    pub fn wants(&self) -> usize {
        let have = self.buf.len();
        match self.phase {
            ClientPhase::ServerResults if have < 4 => 4 - have,
            ClientPhase::ServerResults => {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                (4 + len as usize).saturating_sub(have).max(1)
            }
            ClientPhase::ErrorBody => 8 - have,
            ClientPhase::OwnResults | ClientPhase::Closed => 0,
            _ => 1,
        }
    }

    /// The client ends the test: the TEST_END byte to write.
    pub fn test_end(&mut self) -> Result<[u8; 1], ClientError> {
        match self.phase {
            ClientPhase::Running => {
                self.next(ClientPhase::Exchange);
                Ok([State::TestEnd.byte()])
            }
            _ => Err(ClientError::Unexpected("before the test ran")),
        }
    }

    /// Our results message, due after [`ClientEvent::ExchangeResults`].
    pub fn results(&mut self, r: &Results) -> Result<Vec<u8>, ClientError> {
        if self.phase != ClientPhase::OwnResults {
            return Err(ClientError::Unexpected("results asked for out of turn"));
        }
        self.next(ClientPhase::ServerResults);
        Ok(frame_json(&r.to_json()))
    }

    /// Takes the server's next bytes; returns what they asked for. An
    /// error ends the conversation.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<ClientEvent>, ClientError> {
        let mut events = Vec::new();
        while !bytes.is_empty() {
            let n = self.wants().min(bytes.len());
            if n == 0 {
                self.phase = ClientPhase::Closed;
                return Err(ClientError::Unexpected("out of turn"));
            }
            self.buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            match self.step() {
                Ok(Some(e)) => events.push(e),
                Ok(None) => {}
                Err(e) => {
                    self.phase = ClientPhase::Closed;
                    return Err(e);
                }
            }
        }
        Ok(events)
    }

    fn step(&mut self) -> Result<Option<ClientEvent>, ClientError> {
        use ClientPhase as P;
        match self.phase {
            P::ServerResults if self.buf.len() == 4 => {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                if len == 0 {
                    return Err(Iperf3Error::Empty("results").into());
                }
                if len > MAX_RESULTS_JSON {
                    return Err(Iperf3Error::TooLong {
                        what: "results",
                        len,
                        max: MAX_RESULTS_JSON,
                    }
                    .into());
                }
                Ok(None)
            }
            P::ServerResults if self.buf.len() > 4 => {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                if self.buf.len() < 4 + len as usize {
                    return Ok(None);
                }
                let text = &self.buf[4..];
                let mut r = Results::parse(text)?;
                r.server_output_text = serde_json::from_slice::<Value>(text)
                    .ok()
                    .and_then(|v| v["server_output_text"].as_str().map(str::to_owned));
                self.next(P::Display);
                Ok(Some(ClientEvent::ServerResults(Box::new(r))))
            }
            P::ServerResults => Ok(None),
            P::ErrorBody if self.buf.len() == 8 => {
                let be = |i: usize| {
                    i32::from_be_bytes([
                        self.buf[i],
                        self.buf[i + 1],
                        self.buf[i + 2],
                        self.buf[i + 3],
                    ])
                };
                Err(ClientError::ServerError {
                    code: be(0),
                    errno: be(4),
                })
            }
            P::ErrorBody => Ok(None),
            _ => {
                let byte = self.buf[0];
                self.buf.clear();
                self.state(byte)
            }
        }
    }

    /// A state byte in the current phase.
    fn state(&mut self, byte: u8) -> Result<Option<ClientEvent>, ClientError> {
        use ClientPhase as P;
        let s = |x: State| x.byte();
        match (self.phase, byte) {
            (_, b) if b == s(State::AccessDenied) => Err(ClientError::Busy),
            (_, b) if b == s(State::ServerError) => {
                self.next(P::ErrorBody);
                Ok(None)
            }
            (_, b) if b == s(State::ServerTerminate) => Err(ClientError::Terminated),
            (P::Params, b) if b == s(State::ParamExchange) => {
                self.next(P::Create);
                Ok(Some(ClientEvent::Send(self.params.clone())))
            }
            (P::Create, b) if b == s(State::CreateStreams) => {
                self.next(P::Start);
                Ok(Some(ClientEvent::CreateStreams))
            }
            (P::Start, b) if b == s(State::TestStart) => {
                self.next(P::Running2);
                Ok(Some(ClientEvent::TestStart))
            }
            (P::Running2, b) if b == s(State::TestRunning) => {
                self.next(P::Running);
                Ok(Some(ClientEvent::TestRunning))
            }
            (P::Exchange, b) if b == s(State::ExchangeResults) => {
                self.next(P::OwnResults);
                Ok(Some(ClientEvent::ExchangeResults))
            }
            (P::Display, b) if b == s(State::DisplayResults) => {
                self.next(P::Closed);
                Ok(Some(ClientEvent::Done(vec![State::IperfDone.byte()])))
            }
            (phase, byte) => Err(ClientError::NotIperf3 {
                byte,
                context: match phase {
                    P::Params => "where iperf3 sends PARAM_EXCHANGE (9)",
                    P::Create => "where iperf3 sends CREATE_STREAMS (10)",
                    P::Start => "where iperf3 sends TEST_START (1)",
                    P::Running2 => "where iperf3 sends TEST_RUNNING (2)",
                    P::Running => "while the test ran",
                    P::Exchange => "where iperf3 sends EXCHANGE_RESULTS (13)",
                    _ => "where iperf3 sends DISPLAY_RESULTS (14)",
                },
            }),
        }
    }

    fn next(&mut self, p: ClientPhase) {
        self.phase = p;
        self.buf.clear();
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
