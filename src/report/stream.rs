//! `--json-stream FILE`: the run as JSON lines while it happens (iperf3's
//! `--json-stream`, esnet/iperf PR #1098): a `start` line with the
//! configuration, a line per interval (per probe for `ping`, per run for
//! `rr`, per burst), and an `end` line with the result, each a complete
//! object in the shape of the final report's envelope plus `event` and
//! `data`. Every line is flushed as it is written, so a monitor tailing the
//! file sees each interval when the console does.

use serde::Serialize;
use std::io::{self, Write};
use std::path::Path;

use super::ENVELOPE_VERSION;

/// One line of the stream.
#[derive(Serialize)]
struct Line<'a, C: Serialize, D: Serialize, R: Serialize> {
    netrig: u32,
    version: &'static str,
    test: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<&'a str>,
    event: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<&'a C>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a D>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a R>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// An open JSON-lines stream.
pub struct JsonStream {
    w: Box<dyn Write + Send>,
    test: &'static str,
}

impl JsonStream {
    /// Opens `path` (`-` is standard output) for test `test`.
    pub fn create(path: &Path, test: &'static str) -> io::Result<JsonStream> {
        let w = crate::output::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(JsonStream { w, test })
    }

    fn line<C: Serialize, D: Serialize, R: Serialize>(
        &mut self,
        l: &Line<'_, C, D, R>,
    ) -> io::Result<()> {
        let mut bytes = serde_json::to_vec(l).map_err(io::Error::other)?;
        bytes.push(b'\n');
        self.w.write_all(&bytes)?;
        self.w.flush()
    }

    fn base<'a, C: Serialize, D: Serialize, R: Serialize>(
        test: &'static str,
        event: &'a str,
    ) -> Line<'a, C, D, R> {
        Line {
            netrig: ENVELOPE_VERSION,
            version: env!("CARGO_PKG_VERSION"),
            test,
            title: crate::console::title(),
            event,
            config: None,
            data: None,
            result: None,
            error: None,
        }
    }

    /// The `start` line: the configuration as run.
    pub fn start<C: Serialize>(&mut self, config: &C) -> io::Result<()> {
        let l = Line::<C, (), ()> {
            config: Some(config),
            ..Self::base(self.test, "start")
        };
        self.line(&l)
    }

    /// One `event` line (`interval`, `probe`, `run`, `burst`) with `data`.
    pub fn event<D: Serialize>(&mut self, event: &str, data: &D) -> io::Result<()> {
        let l = Line::<(), D, ()> {
            data: Some(data),
            ..Self::base(self.test, event)
        };
        self.line(&l)
    }

    /// The `end` line: what was measured, and why the run failed if it did.
    pub fn end<R: Serialize>(&mut self, result: Option<&R>, error: Option<&str>) -> io::Result<()> {
        let l = Line::<(), (), R> {
            result,
            error,
            ..Self::base(self.test, "end")
        };
        self.line(&l)
    }
}

/// A stream that may be absent. A write error is kept to report at the end
/// and stops the stream, never the measurement.
#[derive(Default)]
pub struct StreamSink {
    s: Option<JsonStream>,
    errors: Vec<io::Error>,
}

impl StreamSink {
    /// Opens `path` for `test` and writes the start line with `config`; no
    /// path, no stream.
    pub fn open<C: Serialize>(
        path: Option<&Path>,
        test: &'static str,
        config: &C,
    ) -> io::Result<StreamSink> {
        let Some(p) = path else {
            return Ok(StreamSink::default());
        };
        let mut s = JsonStream::create(p, test)?;
        s.start(config)?;
        Ok(StreamSink {
            s: Some(s),
            errors: Vec::new(),
        })
    }

    fn keep(&mut self, r: io::Result<()>) {
        if let Err(e) = r {
            self.s = None;
            self.errors
                .push(io::Error::new(e.kind(), format!("--json-stream: {e}")));
        }
    }

    /// An `event` line, if the stream is open.
    pub fn event<D: Serialize>(&mut self, event: &str, data: &D) {
        if let Some(s) = self.s.as_mut() {
            let r = s.event(event, data);
            self.keep(r);
        }
    }

    /// The `end` line; the stream is closed after it.
    pub fn end<R: Serialize>(&mut self, result: Option<&R>, error: Option<&str>) {
        if let Some(mut s) = self.s.take() {
            let r = s.end(result, error);
            self.keep(r);
        }
    }

    /// Write errors so far.
    pub fn take_errors(&mut self) -> Vec<io::Error> {
        std::mem::take(&mut self.errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_is_one_complete_object_in_the_envelope() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut s = JsonStream::create(&path, "udp").unwrap();
        s.start(&serde_json::json!({"rate": 5})).unwrap();
        s.event("interval", &serde_json::json!({"time_slice": 1.0}))
            .unwrap();
        s.end(Some(&serde_json::json!({"lost": 0})), Some("why"))
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        for l in &lines {
            assert_eq!(l["netrig"], ENVELOPE_VERSION);
            assert_eq!(l["test"], "udp");
        }
        assert_eq!(lines[0]["event"], "start");
        assert_eq!(lines[0]["config"]["rate"], 5);
        assert_eq!(lines[1]["event"], "interval");
        assert_eq!(lines[1]["data"]["time_slice"], 1.0);
        assert!(lines[1].get("config").is_none());
        assert_eq!(lines[2]["event"], "end");
        assert_eq!(lines[2]["result"]["lost"], 0);
        assert_eq!(lines[2]["error"], "why");
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_sink_streams_start_events_and_one_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut s = StreamSink::open(Some(&path), "rr", &serde_json::json!({"size": 64})).unwrap();
        s.event("run", &serde_json::json!({"n": 1}));
        s.end(Some(&serde_json::json!({"sent": 9})), None);
        // The stream is closed after its end line.
        s.event("run", &serde_json::json!({"n": 2}));
        s.end(Some(&serde_json::json!({"sent": 10})), None);
        let l = lines(&path);
        let events: Vec<_> = l.iter().map(|l| l["event"].as_str().unwrap()).collect();
        assert_eq!(events, ["start", "run", "end"]);
        assert_eq!(l[0]["config"]["size"], 64);
        assert_eq!(l[1]["data"]["n"], 1);
        assert_eq!(l[2]["result"]["sent"], 9);
        assert!(s.take_errors().is_empty());
        // No path, no stream, no errors.
        let mut s = StreamSink::open(None, "rr", &()).unwrap();
        s.event("run", &1);
        s.end(Some(&1), None);
        assert!(s.take_errors().is_empty());
    }

    /// A sink that fails every write.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_write_error_stops_the_stream_and_is_told_once() {
        let mut s = StreamSink {
            s: Some(JsonStream {
                w: Box::new(Full),
                test: "udp",
            }),
            errors: Vec::new(),
        };
        s.event("interval", &1);
        s.event("interval", &2);
        s.end(Some(&3), None);
        let e = s.take_errors();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].kind(), io::ErrorKind::StorageFull);
        assert_eq!(e[0].to_string(), "--json-stream: disk full");
        assert!(s.take_errors().is_empty());
        // The end line alone failing is told too.
        let mut s = StreamSink {
            s: Some(JsonStream {
                w: Box::new(Full),
                test: "udp",
            }),
            errors: Vec::new(),
        };
        s.end(Some(&3), Some("why"));
        assert_eq!(s.take_errors().len(), 1);
    }

    #[test]
    fn a_stream_that_cannot_open_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/s.jsonl");
        let e = StreamSink::open(Some(&path), "udp", &()).err().unwrap();
        assert!(
            e.to_string().starts_with(&path.display().to_string()),
            "{e}"
        );
    }
}
