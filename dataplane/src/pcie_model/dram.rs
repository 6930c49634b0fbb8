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
//! (`host.dram_bandwidth_gbyte_s`, the DIMMs' pin rate) and sustains a fraction of it
//! (`host.dram_sustained_fraction`: refresh, bank conflicts and turnarounds keep DRAM below its pin
//! rate, and the measured machine saturated at 0.80 of its own). The curve is read at the same
//! *fraction of saturation*: the last row is the measured machine's saturation, and a host whose
//! DRAM traffic is a fraction `u` of what it sustains gets the latency the measured machine showed
//! at `u` of its saturation. Between rows the latency is linear in bandwidth; below the first row
//! it is the first row's (an idle system), above saturation the last row's (the DRAM timeline
//! then also reports `hostmem` as the bottleneck).
//!
//! Source of the shipped curve ([`CASCADE_LAKE_MLC_LOADED_LATENCY`]): Intel MLC v3.10
//! `--loaded_latency` (all threads, read-only traffic, random access) on 2 × Xeon Gold 6240
//! (Cascade Lake, the generation and memory controller of the paper's Silver 4216), 192 GiB,
//! published in the gjbex/Code-optimization repository
//! (<https://github.com/gjbex/Code-optimization/blob/master/info/cascadelake_mlc.txt>), the rows of
//! injection delays 20000 ns down to 15 ns; the three shorter delays measured the same
//! saturation (226.1, 226.1 and 226.1 GB/s at 155-156 ns) and add no point. Its idle point,
//! 82 ns, is also KV-Direct's local DRAM latency (`docs/reference/pcie-nic-model.md` §7). Its
//! saturation, 226.6 GB/s, is 0.80 of the 281.6 GB/s pin rate of 12 channels of DDR4-2933 (the
//! 6240's memory speed; 192 GiB reaches 226 GB/s only on all 12), which is the sustained fraction
//! the profile carries. (The curve shipped before, MLC v3.5 on 2 × Xeon Silver 4110 from an Intel
//! community thread, saturated at 135.7 GB/s, 0.59 of its machine's pin rate, and its poster
//! asked why it fell short of the expected bandwidth.)
//!
//! That curve is of read-only traffic, and a host whose DDIO lost its packets writes as much to
//! DRAM as it reads (each lost line is written back, then read again). Writes cost DRAM more than
//! reads: the bus turns around between them and the controller drains its write queue in
//! batches, so a mix saturates at a lower bandwidth. MLC's `--max_bandwidth` measures it, one
//! saturation bandwidth per read:write ratio at the memory controller (a regular store's
//! read-for-ownership counts as a read, so a pure store stream is 1:1); the profile carries the
//! rows (`host.dram_read_write_bandwidth`) and [`write_cost`] turns them into the DRAM time a
//! written byte takes against a read byte. The model books each written byte as that many read
//! bytes on the DRAM timeline, so the utilisation the loaded-latency curve is read at (and where
//! its knee falls) depends on the write share of the traffic.
//!
//! Source of the shipped rows ([`CASCADE_LAKE_MLC_READ_WRITE_BANDWIDTH`]): Intel MLC v3.10 on a
//! 2-socket Cascade Lake Xeon (the generation of the paper's Silver 4216, the same memory
//! controller), published in the gjbex/Code-optimization repository
//! (<https://github.com/gjbex/Code-optimization/blob/master/info/cascadelake_mlc.txt>): ALL Reads
//! 225.6 GB/s, 3:1 208.3, 2:1 206.5, 1:1 200.0. A Xeon Platinum 8269 (Cascade Lake) published
//! with MLC v3.9 gives nearly the same ratios (225.1, 212.5, 210.6, 199.3 GB/s: 1:1 at 0.885 of
//! all-reads against 0.887).

/// Intel MLC v3.10 `--loaded_latency` on 2 × Xeon Gold 6240 (see the module docs): `[bandwidth
/// GB/s, latency ns]` per injection delay, in increasing bandwidth (delays 20000 ns ... 15 ns).
pub const CASCADE_LAKE_MLC_LOADED_LATENCY: [[f64; 2]; 16] = [
    [2.2407, 82.21],
    [3.9758, 86.54],
    [6.5829, 83.91],
    [9.0591, 84.00],
    [12.3234, 85.50],
    [17.6355, 88.36],
    [22.7091, 87.39],
    [29.0358, 88.52],
    [40.5416, 90.12],
    [55.2025, 94.95],
    [67.7379, 94.40],
    [87.2526, 97.46],
    [120.2424, 103.11],
    [181.4994, 119.65],
    [221.3183, 157.25],
    [226.6272, 155.90],
];

/// Intel MLC v3.10 `--max_bandwidth` on a 2-socket Cascade Lake Xeon (see the module docs):
/// `[write fraction of the DRAM traffic, saturation GB/s]` for ALL Reads, 3:1, 2:1 and 1:1
/// Reads-Writes.
pub const CASCADE_LAKE_MLC_READ_WRITE_BANDWIDTH: [[f64; 2]; 4] = [
    [0.0, 225.6308],
    [0.25, 208.3499],
    [0.3333, 206.5103],
    [0.5, 200.0318],
];

/// The DRAM time one written byte takes, in read bytes, from saturation bandwidths measured at
/// several write fractions (`[write fraction, GB/s]`, the first all reads): with reads costing 1
/// and writes `c`, traffic with write fraction `w` saturates at `B0 / (1 + w (c - 1))`; `c` is the
/// least-squares fit of that line through the measured `B0 / B(w)`. Errors say what is wrong with
/// the rows.
pub fn write_cost(rows: &[[f64; 2]]) -> Result<f64, String> {
    let Some(&[w0, b0]) = rows.first() else {
        return Err("needs the all-reads point [0, GB/s] and at least one with writes".into());
    };
    if w0 != 0.0 {
        return Err(format!(
            "the first point [{w0}, {b0}] must be all reads (write fraction 0)"
        ));
    }
    if rows.len() < 2 {
        return Err("needs at least one point with writes beside the all-reads one".into());
    }
    let (mut num, mut den) = (0.0, 0.0);
    for (i, &[w, b]) in rows.iter().enumerate() {
        if !(w.is_finite() && (0.0..=1.0).contains(&w) && b.is_finite() && b > 0.0) {
            return Err(format!(
                "point {i} [{w}, {b}]: the write fraction must be in 0..=1 and the bandwidth > 0"
            ));
        }
        if i > 0 && w <= rows[i - 1][0] {
            return Err(format!(
                "point {i} [{w}, {b}]: write fractions must increase from point to point"
            ));
        }
        num += w * (b0 / b - 1.0);
        den += w * w;
    }
    Ok(1.0 + num / den)
}

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

    fn cascade_lake() -> LoadedLatency {
        LoadedLatency::new(&CASCADE_LAKE_MLC_LOADED_LATENCY).unwrap()
    }

    #[test]
    fn the_published_rows_are_read_back_at_their_utilisation() {
        let c = cascade_lake();
        let peak = 226.6272;
        assert_eq!(c.idle_ns(), 82.21);
        for [bw, ns] in CASCADE_LAKE_MLC_LOADED_LATENCY {
            assert!((c.latency_ns(bw / peak) - ns).abs() < 1e-9, "{bw}");
        }
        // Idle and beyond saturation are clamped to the end points.
        assert_eq!(c.latency_ns(0.0), 82.21);
        assert_eq!(c.latency_ns(f64::NAN), 82.21);
        assert_eq!(c.latency_ns(3.0), 155.90);
    }

    #[test]
    fn latency_rises_with_load_between_the_rows() {
        let c = cascade_lake();
        // Half of saturation: between the 87.3 and 120.2 GB/s rows (97.46 .. 103.11 ns).
        let half = c.latency_ns(0.5);
        assert!(half > 97.46 && half < 103.11, "{half}");
        // The knee: between 120.2 GB/s (53 %) and 181.5 GB/s (80 %), then steeply to 157 ns
        // at 221.3 GB/s (98 %).
        let l75 = c.latency_ns(0.75);
        assert!(l75 > 103.11 && l75 < 119.65, "{l75}");
        assert!(c.latency_ns(0.9) > 135.0, "{}", c.latency_ns(0.9));
        // From 30 % of saturation (below it the published rows wander by up to 4 ns on their way
        // from 82 to 95 ns) the latency never falls as the load grows, up to the knee's top.
        let mut last = 0.0;
        for i in 30..=97 {
            let l = c.latency_ns(f64::from(i) / 100.0);
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
    fn a_written_byte_costs_what_the_mlc_mixes_lose() {
        let c = write_cost(&CASCADE_LAKE_MLC_READ_WRITE_BANDWIDTH).unwrap();
        // 1:1 saturates at 0.887 of all reads: a written byte takes ~1.27 read bytes' time.
        assert!(c > 1.25 && c < 1.30, "{c}");
        // The fitted line reproduces every measured mix within 1.5 %.
        let b0 = CASCADE_LAKE_MLC_READ_WRITE_BANDWIDTH[0][1];
        for [w, b] in CASCADE_LAKE_MLC_READ_WRITE_BANDWIDTH {
            let fit = b0 / (1.0 + w * (c - 1.0));
            assert!((fit / b - 1.0).abs() < 0.015, "{w}: {fit} vs {b}");
        }
        // Writes as cheap as reads: cost 1.
        assert_eq!(write_cost(&[[0.0, 100.0], [0.5, 100.0]]).unwrap(), 1.0);
        for (bad, why) in [
            (&[][..], "all-reads"),
            (&[[0.0, 100.0]][..], "at least one"),
            (&[[0.1, 100.0], [0.5, 90.0]][..], "all reads"),
            (&[[0.0, 100.0], [0.5, 90.0], [0.25, 95.0]][..], "increase"),
            (&[[0.0, 100.0], [1.5, 90.0]][..], "0..=1"),
        ] {
            let e = write_cost(bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn the_default_profile_carries_the_cascade_lake_curve() {
        let p = HardwareProfile::default();
        assert_eq!(
            LoadedLatency::new(&p.host.dram_loaded_latency).unwrap(),
            cascade_lake()
        );
    }
}
