//! Unit tests of `merge::summary`: summaries of nothing merge to none, and
//! UDP totals without a mean or variance take them from their histograms.

use super::*;
use serde_json::json;

#[test]
fn summaries_of_nothing_merge_to_none_even_without_a_histogram() {
    // A summary of no samples, and UDP totals of no datagram: nothing to
    // merge, not an input without a histogram.
    let none = json!({"count": 0});
    let no_datagram = json!({"unique": 0, "delay_min_us": 0.0});
    assert!(matches!(
        merge_summaries(&[("a", &none), ("b", &no_datagram), ("c", &Value::Null)]),
        Ok(None)
    ));
    assert!(matches!(
        merge_summaries(&[("d", &json!({"count": 3}))]),
        Err(SummaryError::NoHistogram(who)) if who == "d"
    ));
}

/// UDP totals as a result holds them: the delays' histogram and extremes
/// (ns recorded, µs written), no mean and no variance.
fn udp_totals(ns: &[u64]) -> Value {
    let mut h = crate::protocol::hdr::empty();
    for &v in ns {
        h.record(v).unwrap();
    }
    json!({"unique": ns.len(), "hdr": crate::protocol::hdr::encode(&h),
           "delay_min_us": ns[0] as f64 / 1e3, "delay_max_us": ns[ns.len() - 1] as f64 / 1e3})
}

#[test]
fn udp_totals_without_mean_or_variance_take_them_from_the_histogram() {
    // UDP totals of older results carry neither delay_avg_us nor a
    // variance: both come from the histogram, to its precision (0.1 %;
    // the histogram's spread is the population's, within 0.1 % of the
    // samples' for 1000 of them).
    let a: Vec<u64> = (0..1000).map(|i| 10_000 + 37 * i).collect();
    let b: Vec<u64> = (0..1000).map(|i| 50_000 + 11 * i).collect();
    let (ta, tb) = (udp_totals(&a), udp_totals(&b));
    let m = merge_summaries(&[("a", &ta), ("b", &tb)]).unwrap().unwrap();
    let all: Vec<f64> = a.iter().chain(&b).map(|&v| v as f64 / 1e3).collect();
    let n = all.len() as f64;
    let mean = all.iter().sum::<f64>() / n;
    let var = all.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    assert_eq!(m.count, 2000);
    assert!(
        (m.mean_us - mean).abs() < 1e-3 * mean,
        "{} {mean}",
        m.mean_us
    );
    assert!(
        (m.variance_us2 - var).abs() < 1e-2 * var,
        "{} {var}",
        m.variance_us2
    );
}

#[test]
fn udp_totals_of_few_datagrams_merge_to_the_samples_variance() {
    // Values a histogram holds exactly (below 2048 ns), three a side: a
    // histogram's spread is the population's, so taking it as the samples'
    // would leave each part's squared deviations short by a third.
    let (a, b) = ([100u64, 200, 300], [1000u64, 1100, 1200]);
    let m = merge_summaries(&[("a", &udp_totals(&a)), ("b", &udp_totals(&b))])
        .unwrap()
        .unwrap();
    let all: Vec<f64> = a.iter().chain(&b).map(|&v| v as f64 / 1e3).collect();
    let mean = all.iter().sum::<f64>() / 6.0;
    let var = all.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 5.0;
    assert_eq!(m.count, 6);
    assert!((m.mean_us - mean).abs() < 1e-9, "{} {mean}", m.mean_us);
    assert!(
        (m.variance_us2 - var).abs() < 1e-9,
        "{} {var}",
        m.variance_us2
    );
    assert!((m.stddev_us - var.sqrt()).abs() < 1e-9);
}
