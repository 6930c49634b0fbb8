//! Latency recording and summaries: an HDR histogram per stream at the sink, its summary
//! (min/mean/p50/p90/p99/p99.9/max), and the calibration that removes the generator's own
//! latency.
//!
//! **Why HDR histograms** (the `hdrhistogram` crate): one recording is an index computation and
//! an increment (no allocation, no sorting), the relative error is bounded (3 significant digits:
//! 0.1 %) from nanoseconds to a minute, histograms of several trials or queues add exactly, and
//! CSIT/TRex report latency from the same structure, so percentiles are comparable.
//!
//! **Calibration.** A loopback trial (generator straight into the sink, no DUT) measures what the
//! measurement itself adds: stamping, handing the frame over, parsing it. Its minimum (the
//! floor, the usual choice for a bias, as CSIT does for TRex) is then subtracted from every DUT
//! latency figure by [`LatencyStats::minus`]; percentiles never go below zero.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency recorded exactly: 60 s (larger values are clamped to it).
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;
/// Significant decimal digits of the histograms.
pub const SIGFIGS: u8 = 3;

/// A new empty latency histogram (1 ns .. 60 s, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, SIGFIGS).expect("valid histogram bounds")
}

/// Summary of a latency distribution, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Frames measured.
    pub count: u64,
    /// Smallest latency.
    pub min_ns: u64,
    /// Mean latency.
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest latency.
    pub max_ns: u64,
}

impl LatencyStats {
    /// The summary of `h` (`None` if it is empty).
    pub fn from_histogram(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        // hdrhistogram stores 0 in the lowest bucket; values are clamped to >= 1 when recorded
        // anyway (see `record`).
        Some(Self {
            count: h.len(),
            min_ns: h.min(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        })
    }

    /// The same figures with a constant `bias_ns` (the calibrated measurement latency) removed,
    /// clamped at zero.
    pub fn minus(&self, bias_ns: u64) -> Self {
        let s = |v: u64| v.saturating_sub(bias_ns);
        Self {
            count: self.count,
            min_ns: s(self.min_ns),
            mean_ns: (self.mean_ns - bias_ns as f64).max(0.0),
            p50_ns: s(self.p50_ns),
            p90_ns: s(self.p90_ns),
            p99_ns: s(self.p99_ns),
            p999_ns: s(self.p999_ns),
            max_ns: s(self.max_ns),
        }
    }

    /// The element-wise mean of several summaries (RFC 2544 §26.2 averages repeated latency
    /// trials); `None` for an empty slice.
    pub fn average(all: &[LatencyStats]) -> Option<Self> {
        if all.is_empty() {
            return None;
        }
        let n = all.len() as f64;
        let avg = |f: fn(&LatencyStats) -> f64| all.iter().map(f).sum::<f64>() / n;
        Some(Self {
            count: all.iter().map(|s| s.count).sum(),
            min_ns: avg(|s| s.min_ns as f64).round() as u64,
            mean_ns: avg(|s| s.mean_ns),
            p50_ns: avg(|s| s.p50_ns as f64).round() as u64,
            p90_ns: avg(|s| s.p90_ns as f64).round() as u64,
            p99_ns: avg(|s| s.p99_ns as f64).round() as u64,
            p999_ns: avg(|s| s.p999_ns as f64).round() as u64,
            max_ns: avg(|s| s.max_ns as f64).round() as u64,
        })
    }
}

/// Records one latency into `h` (clamped to 1 ns .. [`MAX_LATENCY_NS`]).
#[inline]
pub fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.clamp(1, MAX_LATENCY_NS));
}

/// The measurement's own latency, to be subtracted from DUT latencies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The bias subtracted: the loopback minimum.
    pub bias_ns: u64,
    /// The full loopback distribution, for the report.
    pub loopback: Option<LatencyStats>,
}

impl Calibration {
    /// A calibration from a loopback trial's latency summary.
    pub fn from_loopback(l: &LatencyStats) -> Self {
        Self {
            bias_ns: l.min_ns,
            loopback: Some(*l),
        }
    }

    /// Applies the calibration to a DUT latency summary.
    pub fn apply(&self, s: &LatencyStats) -> LatencyStats {
        s.minus(self.bias_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_percentiles_and_bias() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            record(&mut h, v * 1000);
        }
        record(&mut h, 0); // clamped to 1 ns
        let s = LatencyStats::from_histogram(&h).unwrap();
        assert_eq!(s.count, 1001);
        assert_eq!(s.min_ns, 1);
        let close = |a: u64, b: u64| (a as f64 - b as f64).abs() <= b as f64 * 0.001 + 1.0;
        assert!(close(s.p50_ns, 500_000), "{s:?}");
        assert!(close(s.p99_ns, 990_000), "{s:?}");
        assert!(close(s.max_ns, 1_000_000), "{s:?}");
        let c = Calibration::from_loopback(&LatencyStats { min_ns: 400, ..s });
        let m = c.apply(&s);
        assert_eq!(m.min_ns, 0);
        assert_eq!(m.p50_ns, s.p50_ns - 400);
        assert!(LatencyStats::from_histogram(&new_histogram()).is_none());
        let a = LatencyStats::average(&[s, m]).unwrap();
        assert_eq!(a.p50_ns, s.p50_ns - 200);
        assert_eq!(a.count, 2002);
    }
}
