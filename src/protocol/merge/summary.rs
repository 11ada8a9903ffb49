//! Latency summaries of many results as one: exact counts, extremes, mean
//! and variance, percentiles from the sum of their HDR histograms.

use serde_json::Value;
use thiserror::Error;

use crate::protocol::rr::hist::Summary;

/// Why latency summaries cannot be merged into one (the merge goes on
/// without their percentiles, and says why).
#[derive(Debug, Error)]
pub enum SummaryError {
    /// An input whose summary carries no histogram.
    #[error("{0} has no HDR histogram (a result of an older netrig)")]
    NoHistogram(String),
    /// An input whose histogram does not decode.
    #[error("{who}: {source}")]
    BadHistogram {
        who: String,
        #[source]
        source: crate::protocol::hdr::HdrError,
    },
    /// Histograms that do not add up (ranges no histogram can hold).
    #[error("{0}")]
    Sum(#[source] crate::protocol::hdr::HdrError),
}

/// Several latency summaries as one: counts, extremes, mean and variance
/// combined exactly, percentiles from the sum of their histograms named as
/// the first input names them. `None` (with the reason) when a summary has
/// no readable histogram.
pub fn merge_summaries(parts: &[(&str, &Value)]) -> Result<Option<Summary>, SummaryError> {
    let mut hs = Vec::new();
    let (mut n, mut min, mut max, mut mean, mut m2) =
        (0u64, f64::INFINITY, f64::NEG_INFINITY, 0.0, 0.0);
    let mut names: Vec<String> = Vec::new();
    for (who, s) in parts {
        // Nothing measured: a summary of no samples, UDP totals of no datagram.
        if s.is_null() || s["count"].as_u64() == Some(0) || s["unique"].as_u64() == Some(0) {
            continue;
        }
        let text = s["hdr"]
            .as_str()
            .ok_or_else(|| SummaryError::NoHistogram(who.to_string()))?;
        let h =
            crate::protocol::hdr::decode(text).map_err(|source| SummaryError::BadHistogram {
                who: who.to_string(),
                source,
            })?;
        // UDP totals name their figures delay_*_us and keep no count or
        // variance: the histogram's count, and its spread (to its 0.1 %).
        let c = s["count"].as_u64().unwrap_or_else(|| h.len());
        if c == 0 {
            continue;
        }
        let g = |a: &str, b: &str| s[a].as_f64().or_else(|| s[b].as_f64());
        let f = |a: &str, b: &str| g(a, b).unwrap_or(0.0);
        let m = g("mean_us", "delay_avg_us").unwrap_or(h.mean() / 1e3);
        // This part's sum of squared deviations: a summary's variance is
        // the samples' (divided by c − 1), a histogram's spread is the
        // population's (divided by c).
        let part_m2 = match s["variance_us2"].as_f64() {
            Some(var) => var * c.saturating_sub(1) as f64,
            None => (h.stdev() / 1e3).powi(2) * c as f64,
        };
        hs.push(h);
        // Chan et al.'s pairwise update of the sum of squared deviations.
        let total = n + c;
        let d = m - mean;
        m2 += part_m2 + d * d * (n as f64 * c as f64) / total as f64;
        mean += d * c as f64 / total as f64;
        n = total;
        min = min.min(f("min_us", "delay_min_us"));
        max = max.max(f("max_us", "delay_max_us"));
        if names.is_empty() {
            names = s["percentiles_us"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p[0].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
        }
    }
    if n == 0 {
        return Ok(None);
    }
    let all = crate::protocol::hdr::sum(&hs).map_err(SummaryError::Sum)?;
    let which: Vec<(&str, f64)> = names
        .iter()
        .filter_map(|n| crate::protocol::hdr::quantile_of(n).map(|q| (n.as_str(), q)))
        .collect();
    let variance = if n > 1 { m2 / (n - 1) as f64 } else { 0.0 };
    Ok(Some(Summary {
        count: n,
        min_us: min,
        max_us: max,
        mean_us: mean,
        variance_us2: variance,
        stddev_us: variance.sqrt(),
        percentiles_us: crate::protocol::hdr::percentiles_us(&all, &which),
        hdr: crate::protocol::hdr::encode(&all),
    }))
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
