//! Lossless latency histograms in results: an HDR histogram of nanoseconds
//! as the HdrHistogram project's standard compressed form (V2 encoding,
//! deflated, cookie `0x1c849314`), in base64 — what HdrHistogram's Java,
//! C, Go and Python ports read from `.hlog` lines. Percentiles printed beside
//! it cannot be combined; histograms can, so results of many clients merge
//! into exact percentiles (`netrig merge`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use thiserror::Error;

/// The largest value netrig's histograms track: one hour, in ns.
pub const HIGHEST_NS: u64 = 3_600_000_000_000;

/// Why a stored histogram cannot be read.
#[derive(Debug, Error)]
pub enum HdrError {
    /// Not base64.
    #[error("histogram is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// Base64, but not an HDR histogram.
    #[error("not an HDR histogram: {0:?}")]
    Format(hdrhistogram::serialization::DeserializeError),
    /// Two histograms that cannot be added.
    #[error("histograms cannot be added: {0:?}")]
    Add(hdrhistogram::AdditionError),
}

/// An empty histogram as netrig keeps them: 1 ns to an hour, 3 significant
/// digits (0.1 %), growing if a peer's histogram holds more.
pub fn empty() -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, HIGHEST_NS, 3)
        .unwrap_or_else(|_| Histogram::new(3).expect("3 significant digits are valid"));
    h.auto(true);
    h
}

/// `h` as base64 of its V2+deflate serialization.
pub fn encode(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    // Serializing to memory fails only for a histogram wider than the
    // format allows, which netrig's bounds are not.
    match V2DeflateSerializer::new().serialize(h, &mut buf) {
        Ok(_) => STANDARD.encode(&buf),
        Err(_) => String::new(),
    }
}

/// The histogram [`encode`] wrote (or any V2 / V2+deflate histogram).
pub fn decode(s: &str) -> Result<Histogram<u64>, HdrError> {
    let bytes = STANDARD.decode(s.trim())?;
    Deserializer::new()
        .deserialize(&mut std::io::Cursor::new(bytes))
        .map_err(HdrError::Format)
}

/// Adds every histogram into one (an empty one when there are none).
pub fn sum<'a>(
    hs: impl IntoIterator<Item = &'a Histogram<u64>>,
) -> Result<Histogram<u64>, HdrError> {
    let mut out = empty();
    for h in hs {
        out.add(h).map_err(HdrError::Add)?;
    }
    Ok(out)
}

/// The value at percentile `q` (0–100) in µs: 100 is the largest value
/// recorded, as everywhere in netrig's reports.
pub fn percentile_us(h: &Histogram<u64>, q: f64) -> f64 {
    let v = if q >= 100.0 {
        h.max()
    } else {
        h.value_at_percentile(q)
    };
    v as f64 / 1e3
}

/// The named percentiles of `h`, µs.
pub fn percentiles_us(h: &Histogram<u64>, which: &[(&str, f64)]) -> Vec<(String, f64)> {
    which
        .iter()
        .map(|&(name, q)| (name.to_string(), percentile_us(h, q)))
        .collect()
}

/// The percentile a name such as `p99.9` or `max` stands for.
pub fn quantile_of(name: &str) -> Option<f64> {
    if name == "max" {
        return Some(100.0);
    }
    name.strip_prefix('p')?
        .parse::<f64>()
        .ok()
        .filter(|q| (0.0..=100.0).contains(q))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(samples: &[u64]) -> Histogram<u64> {
        let mut h = empty();
        for &s in samples {
            h.record(s).unwrap();
        }
        h
    }

    #[test]
    fn round_trip_keeps_every_count_and_percentile() {
        let h = of(&[1, 999, 1_000, 45_000, 45_001, 60_182_000, HIGHEST_NS]);
        let text = encode(&h);
        assert!(!text.is_empty());
        let back = decode(&text).unwrap();
        assert_eq!(back.len(), h.len());
        assert_eq!(back.max(), h.max());
        assert_eq!(back.min(), h.min());
        let counts = |h: &Histogram<u64>| {
            h.iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect::<Vec<_>>()
        };
        assert_eq!(counts(&back), counts(&h));
        for q in [50.0, 90.0, 99.0, 99.9, 100.0] {
            assert_eq!(percentile_us(&back, q), percentile_us(&h, q));
        }
        // The standard compressed cookie (V2 + deflate), so other ports read it.
        let raw = STANDARD.decode(&text).unwrap();
        assert_eq!(&raw[..4], &[0x1c, 0x84, 0x93, 0x14]);
    }

    #[test]
    fn an_empty_histogram_round_trips() {
        let back = decode(&encode(&empty())).unwrap();
        assert_eq!(back.len(), 0);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(decode("not base64!"), Err(HdrError::Base64(_))));
        assert!(matches!(
            decode(&STANDARD.encode(b"0123456789abcdef")),
            Err(HdrError::Format(_))
        ));
    }

    #[test]
    fn the_sum_of_parts_is_the_histogram_of_all_samples() {
        let a = [3_000, 5_000, 7_000, 1_000_000];
        let b = [4_000, 4_000, 90_000_000];
        let all: Vec<u64> = a.iter().chain(&b).copied().collect();
        let merged = sum([&decode(&encode(&of(&a))).unwrap(), &of(&b)]).unwrap();
        let whole = of(&all);
        assert_eq!(merged.len(), 7);
        for q in [0.0, 25.0, 50.0, 90.0, 99.0, 100.0] {
            assert_eq!(percentile_us(&merged, q), percentile_us(&whole, q), "q {q}");
        }
        assert_eq!(percentile_us(&whole, 100.0), whole.max() as f64 / 1e3);
        assert_eq!(
            percentiles_us(&whole, &[("p50", 50.0), ("max", 100.0)]),
            vec![
                ("p50".to_string(), percentile_us(&whole, 50.0)),
                ("max".to_string(), percentile_us(&whole, 100.0))
            ]
        );
    }

    #[test]
    fn percentile_names() {
        assert_eq!(quantile_of("max"), Some(100.0));
        assert_eq!(quantile_of("p99.9"), Some(99.9));
        assert_eq!(quantile_of("p50"), Some(50.0));
        assert_eq!(quantile_of("p101"), None);
        assert_eq!(quantile_of("50"), None);
        assert_eq!(quantile_of("pxx"), None);
    }
}
