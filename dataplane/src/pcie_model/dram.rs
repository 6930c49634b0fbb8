//! DRAM read latency under load: the memory-contention half of the host model.
//!
//! A core's DRAM access takes longer the busier the memory controllers are (queueing in the
//! controllers and read/write turnarounds). The model reads that growth off a published
//! loaded-latency curve instead of inventing a queueing formula: Intel MLC's `--loaded_latency`
//! test measures the latency of a dependent read chain while the other cores inject traffic at
//! decreasing delays, one `(bandwidth, latency)` row per injection delay. The profile carries the
//! rows (`host.dram_loaded_latency`); this module turns them into a function of utilisation.
//!
//! The rows are of one machine; the modelled host has its own peak bandwidth
//! (`host.dram_bandwidth_gbyte_s`). The curve is read at the same *fraction of saturation*: the
//! last row is the measured machine's saturation, and a host whose DRAM traffic is a fraction
//! `u` of its peak gets the latency the measured machine showed at `u` of its saturation. Between
//! rows the latency is linear in bandwidth; below the first row it is the first row's (an idle
//! system), above saturation the last row's (the DRAM timeline then also reports `hostmem` as the
//! bottleneck).
//!
//! Source of the shipped curve ([`SILVER_MLC_LOADED_LATENCY`]): Intel MLC v3.5 `--loaded_latency`
//! (all threads, read-only traffic) on 2 × Xeon Silver 4110 (Skylake-SP, the Silver class of the
//! paper's Cascade Lake Silver 4216, the same DDR4-2400 memory controllers), 12 × DDR4-2666
//! RDIMMs, published in the Intel community thread "Intel Memory Latency Checker v3.5 test"
//! (Software Tuning, Performance Optimization & Platform Monitoring forum). Its idle point,
//! 82 ns, is also KV-Direct's local DRAM latency (`docs/reference/pcie-nic-model.md` §7).

/// Intel MLC v3.5 `--loaded_latency` on 2 × Xeon Silver 4110 (see the module docs): `[bandwidth
/// GB/s, latency ns]` per injection delay, in increasing bandwidth (delays 20000 ns ... 0 ns).
pub const SILVER_MLC_LOADED_LATENCY: [[f64; 2]; 19] = [
    [1.2376, 81.96],
    [1.7852, 83.00],
    [2.5835, 84.20],
    [3.3544, 84.99],
    [4.3833, 85.56],
    [6.0683, 86.54],
    [7.6803, 87.24],
    [9.7238, 87.81],
    [13.4635, 88.79],
    [18.3550, 90.16],
    [22.5809, 90.85],
    [29.4733, 92.29],
    [42.6954, 94.56],
    [68.3578, 98.94],
    [131.2820, 123.71],
    [135.2673, 129.67],
    [135.5995, 130.37],
    [135.6538, 130.34],
    [135.6559, 130.31],
];

/// A loaded-latency curve: latency as a function of DRAM utilisation (fraction of saturation).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedLatency {
    /// `(fraction of the measured saturation bandwidth, ns)`, fractions increasing, the last 1.
    knots: Vec<(f64, f64)>,
}

impl LoadedLatency {
    /// The curve of `[bandwidth GB/s, latency ns]` rows; errors say what is wrong with them.
    pub fn new(rows: &[[f64; 2]]) -> Result<Self, String> {
        let Some(last) = rows.last() else {
            return Err("needs at least one [GB/s, ns] point".into());
        };
        for (i, [bw, ns]) in rows.iter().enumerate() {
            if !(bw.is_finite() && *bw > 0.0 && ns.is_finite() && *ns > 0.0) {
                return Err(format!(
                    "point {i} [{bw}, {ns}]: bandwidth and latency must be finite and > 0"
                ));
            }
            if i > 0 && *bw <= rows[i - 1][0] {
                return Err(format!(
                    "point {i} [{bw}, {ns}]: bandwidths must increase from point to point"
                ));
            }
        }
        let peak = last[0];
        Ok(Self {
            knots: rows.iter().map(|[bw, ns]| (bw / peak, *ns)).collect(),
        })
    }

    /// Latency of an idle memory system (the first point), ns.
    pub fn idle_ns(&self) -> f64 {
        self.knots[0].1
    }

    /// Latency at `utilisation` (DRAM traffic / peak bandwidth), ns: linear between points,
    /// the first point's below it, the last point's at and above saturation.
    pub fn latency_ns(&self, utilisation: f64) -> f64 {
        let u = if utilisation.is_finite() {
            utilisation
        } else {
            0.0
        };
        let k = &self.knots;
        if u <= k[0].0 {
            return k[0].1;
        }
        for w in k.windows(2) {
            let ((u0, l0), (u1, l1)) = (w[0], w[1]);
            if u <= u1 {
                return l0 + (l1 - l0) * (u - u0) / (u1 - u0);
            }
        }
        k[k.len() - 1].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcie_model::profile::HardwareProfile;

    fn silver() -> LoadedLatency {
        LoadedLatency::new(&SILVER_MLC_LOADED_LATENCY).unwrap()
    }

    #[test]
    fn the_published_rows_are_read_back_at_their_utilisation() {
        let c = silver();
        let peak = 135.6559;
        assert_eq!(c.idle_ns(), 81.96);
        for [bw, ns] in SILVER_MLC_LOADED_LATENCY {
            assert!((c.latency_ns(bw / peak) - ns).abs() < 1e-9, "{bw}");
        }
        // Idle and beyond saturation are clamped to the end points.
        assert_eq!(c.latency_ns(0.0), 81.96);
        assert_eq!(c.latency_ns(f64::NAN), 81.96);
        assert_eq!(c.latency_ns(3.0), 130.31);
    }

    #[test]
    fn latency_rises_with_load_between_the_rows() {
        let c = silver();
        // Half of saturation: between the 42.7 and 68.4 GB/s rows (94.56 .. 98.94 ns).
        let half = c.latency_ns(0.5);
        assert!(half > 94.56 && half < 98.94, "{half}");
        // The knee: between 68.4 GB/s (50 %) and 131.3 GB/s (97 %).
        let l75 = c.latency_ns(0.75);
        assert!(l75 > 98.94 && l75 < 123.71, "{l75}");
        let mut last = 0.0;
        for i in 0..=100 {
            let l = c.latency_ns(f64::from(i) / 100.0 * 0.99);
            assert!(l >= last, "{i}: {l} < {last}");
            last = l;
        }
    }

    #[test]
    fn bad_curves_are_refused_with_the_reason() {
        assert!(
            LoadedLatency::new(&[])
                .unwrap_err()
                .contains("at least one")
        );
        let e = LoadedLatency::new(&[[2.0, 80.0], [1.0, 90.0]]).unwrap_err();
        assert!(e.contains("increase"), "{e}");
        let e = LoadedLatency::new(&[[1.0, -1.0]]).unwrap_err();
        assert!(e.contains("> 0"), "{e}");
        let e = HardwareProfile::from_toml_str(
            "[host]\ndram_loaded_latency = [[5.0, 80.0], [4.0, 90.0]]",
        )
        .unwrap_err();
        assert!(e.contains("host.dram_loaded_latency"), "{e}");
    }

    #[test]
    fn the_default_profile_carries_the_silver_curve() {
        let p = HardwareProfile::default();
        assert_eq!(
            LoadedLatency::new(&p.host.dram_loaded_latency).unwrap(),
            silver()
        );
    }
}
