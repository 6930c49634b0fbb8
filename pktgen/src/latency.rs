//! Latency recording and summaries: an HDR histogram per stream at the sink with the exact
//! minimum, maximum and sum beside it ([`LatencyHistogram`]), its summary ([`LatencyStats`]:
//! min/mean/p50/p90/p99/p99.9/max), and the calibration that removes the generator's own latency.
//!
//! **Why HDR histograms** (the `hdrhistogram` crate): one recording is an index computation and
//! an increment (no allocation, no sorting), the relative error is bounded (3 significant digits:
//! 0.1 %) from nanoseconds to a minute, histograms of several trials or queues add exactly, and
//! CSIT/TRex report latency from the same structure, so percentiles are comparable.
//!
//! **Why exact extremes beside it.** The histogram only knows buckets: its minimum is the
//! bucket's lowest value, its maximum the bucket's highest, its mean the sum of bucket
//! midpoints, so a summary built from the histogram alone can show a mean below the minimum or a
//! median above the maximum. [`LatencyHistogram`] tracks the exact minimum, maximum and sum, and
//! [`LatencyStats::from_histogram`] clamps every percentile into `[min, max]`, so every summary
//! satisfies `min <= p50 <= p90 <= p99 <= p99.9 <= max` and `min <= mean <= max`
//! ([`LatencyStats::is_consistent`]).
//!
//! **Calibration.** A loopback trial (generator straight into the sink, no DUT) measures what the
//! measurement itself adds: stamping, handing the frame over, parsing it. Its minimum (the
//! floor, the usual choice for a bias, as CSIT does for TRex) is then subtracted from every DUT
//! latency figure by [`LatencyStats::minus`]; figures never go below zero.

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

/// An HDR histogram of latencies plus their exact minimum, maximum and sum (see the module
/// docs). Recording is allocation-free.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram (1 ns .. 60 s, 3 significant digits).
    pub fn new() -> Self {
        Self {
            hist: new_histogram(),
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }

    /// Records one latency (clamped to 1 ns .. [`MAX_LATENCY_NS`]).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let ns = ns.clamp(1, MAX_LATENCY_NS);
        self.hist.saturating_record(ns);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        self.sum += u128::from(ns);
    }

    /// Adds every sample of `other`.
    pub fn add(&mut self, other: &LatencyHistogram) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    /// Forgets every sample.
    pub fn reset(&mut self) {
        *self = Self::new();
    }

    /// Samples recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// True without samples.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The underlying HDR histogram (bucketed values).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The summary (`None` without samples).
    pub fn stats(&self) -> Option<LatencyStats> {
        LatencyStats::from_histogram(self)
    }
}

/// Summary of a latency distribution, in nanoseconds: exact `min`, `max` and `mean`,
/// percentiles from the histogram within `[min, max]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Frames measured.
    pub count: u64,
    /// Smallest latency (exact).
    pub min_ns: u64,
    /// Mean latency (exact).
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest latency (exact).
    pub max_ns: u64,
}

impl LatencyStats {
    /// The summary of `h` (`None` if it is empty).
    pub fn from_histogram(h: &LatencyHistogram) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        let count = h.len();
        let q = |x: f64| h.hist.value_at_quantile(x).clamp(h.min, h.max);
        Some(Self {
            count,
            min_ns: h.min,
            mean_ns: (h.sum as f64 / count as f64).clamp(h.min as f64, h.max as f64),
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: h.max,
        })
    }

    /// A summary from exact extremes and mean plus percentiles that a DUT reports (e.g. the
    /// virtual NIC's model), made consistent: each percentile is clamped into `[min, max]` and
    /// raised to at least the one below it, the mean clamped into `[min, max]`. `None` when the
    /// extremes are missing (a summary without them would have to invent them).
    pub fn from_reported(
        count: u64,
        min_ns: u64,
        max_ns: u64,
        mean_ns: f64,
        percentiles: [u64; 4],
    ) -> Option<Self> {
        if count == 0 || min_ns > max_ns || !mean_ns.is_finite() {
            return None;
        }
        let mut p = percentiles;
        let mut floor = min_ns;
        for v in &mut p {
            *v = (*v).clamp(floor, max_ns);
            floor = *v;
        }
        Some(Self {
            count,
            min_ns,
            mean_ns: mean_ns.clamp(min_ns as f64, max_ns as f64),
            p50_ns: p[0],
            p90_ns: p[1],
            p99_ns: p[2],
            p999_ns: p[3],
            max_ns,
        })
    }

    /// True when `min <= p50 <= p90 <= p99 <= p99.9 <= max` and `min <= mean <= max`.
    pub fn is_consistent(&self) -> bool {
        let order = [
            self.min_ns,
            self.p50_ns,
            self.p90_ns,
            self.p99_ns,
            self.p999_ns,
            self.max_ns,
        ];
        order.windows(2).all(|w| w[0] <= w[1])
            && self.mean_ns >= self.min_ns as f64
            && self.mean_ns <= self.max_ns as f64
    }

    /// The same figures with a constant `bias_ns` (the calibrated measurement latency) removed,
    /// clamped at zero (subtracting a constant keeps the order of the figures).
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

    /// The summary of several repetitions (RFC 2544 §26.2 averages repeated latency trials):
    /// `min` and `max` are the extremes over all of them, the mean is weighted by each
    /// repetition's count, the percentiles are averaged (each lies between the extremes, so the
    /// averages do too); `None` for an empty slice.
    pub fn average(all: &[LatencyStats]) -> Option<Self> {
        if all.is_empty() {
            return None;
        }
        let n = all.len() as f64;
        let avg = |f: fn(&LatencyStats) -> u64| {
            (all.iter().map(|s| f(s) as f64).sum::<f64>() / n).round() as u64
        };
        let count: u64 = all.iter().map(|s| s.count).sum();
        let min_ns = all.iter().map(|s| s.min_ns).min().unwrap_or(0);
        let max_ns = all.iter().map(|s| s.max_ns).max().unwrap_or(0);
        let mean_ns = if count > 0 {
            all.iter().map(|s| s.mean_ns * s.count as f64).sum::<f64>() / count as f64
        } else {
            all.iter().map(|s| s.mean_ns).sum::<f64>() / n
        };
        Some(Self {
            count,
            min_ns,
            mean_ns: mean_ns.clamp(min_ns as f64, max_ns as f64),
            p50_ns: avg(|s| s.p50_ns),
            p90_ns: avg(|s| s.p90_ns),
            p99_ns: avg(|s| s.p99_ns),
            p999_ns: avg(|s| s.p999_ns),
            max_ns,
        })
    }
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
    use proptest::prelude::*;

    #[test]
    fn summary_percentiles_and_bias() {
        let mut h = LatencyHistogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        h.record(0); // clamped to 1 ns
        let s = h.stats().unwrap();
        assert_eq!(s.count, 1001);
        assert_eq!(s.min_ns, 1);
        assert_eq!(s.max_ns, 1_000_000);
        let close = |a: u64, b: u64| (a as f64 - b as f64).abs() <= b as f64 * 0.001 + 1.0;
        assert!(close(s.p50_ns, 500_000), "{s:?}");
        assert!(close(s.p99_ns, 990_000), "{s:?}");
        // The exact mean: (1000 * 1001 / 2 * 1000 + 1) / 1001.
        assert!((s.mean_ns - 500_500_001.0 / 1001.0).abs() < 1e-6, "{s:?}");
        let c = Calibration::from_loopback(&LatencyStats { min_ns: 400, ..s });
        let m = c.apply(&s);
        assert_eq!(m.min_ns, 0);
        assert_eq!(m.p50_ns, s.p50_ns - 400);
        assert!(m.is_consistent(), "{m:?}");
        assert!(LatencyHistogram::new().stats().is_none());
        let a = LatencyStats::average(&[s, m]).unwrap();
        assert_eq!(a.p50_ns, s.p50_ns - 200);
        assert_eq!(a.count, 2002);
        assert_eq!((a.min_ns, a.max_ns), (0, 1_000_000));
        assert!(a.is_consistent(), "{a:?}");
    }

    #[test]
    fn samples_in_one_bucket_keep_exact_extremes_and_mean() {
        // 434 431 .. 434 439 ns share one 3-digit bucket: the histogram alone reports its
        // lowest value as the minimum, its highest as the maximum and its midpoint as every
        // percentile and the mean. The summary keeps the exact figures.
        let mut h = LatencyHistogram::new();
        for v in [434_431, 434_433, 434_439] {
            h.record(v);
        }
        let s = h.stats().unwrap();
        assert_eq!((s.min_ns, s.max_ns), (434_431, 434_439));
        assert!((s.mean_ns - 434_434.333).abs() < 0.001, "{s:?}");
        assert!(h.histogram().min() < 434_431 || h.histogram().max() > 434_439);
        assert!(s.is_consistent(), "{s:?}");
    }

    #[test]
    fn reported_percentiles_are_made_monotonic_within_the_extremes() {
        let s = LatencyStats::from_reported(10, 100, 200, 50.0, [90, 250, 150, 210]).unwrap();
        assert_eq!(
            (s.p50_ns, s.p90_ns, s.p99_ns, s.p999_ns),
            (100, 200, 200, 200)
        );
        assert_eq!(s.mean_ns, 100.0);
        assert!(s.is_consistent());
        assert!(LatencyStats::from_reported(0, 1, 2, 1.5, [1; 4]).is_none());
        assert!(LatencyStats::from_reported(3, 5, 2, 3.0, [3; 4]).is_none());
    }

    proptest! {
        #[test]
        fn every_summary_is_consistent(
            runs in proptest::collection::vec(
                proptest::collection::vec(0u64..5_000_000_000, 1..200), 1..5),
            bias in 0u64..3_000_000,
        ) {
            let mut all = Vec::new();
            let mut merged = LatencyHistogram::new();
            for r in &runs {
                let mut h = LatencyHistogram::new();
                for &v in r {
                    h.record(v);
                }
                merged.add(&h);
                let s = h.stats().unwrap();
                prop_assert!(s.is_consistent(), "{:?}", s);
                prop_assert!(s.minus(bias).is_consistent(), "{:?}", s.minus(bias));
                all.push(s.minus(bias));
            }
            let a = LatencyStats::average(&all).unwrap();
            prop_assert!(a.is_consistent(), "{:?}", a);
            let m = merged.stats().unwrap();
            prop_assert!(m.is_consistent(), "{:?}", m);
            prop_assert_eq!(m.count, runs.iter().map(|r| r.len() as u64).sum::<u64>());
        }
    }
}
