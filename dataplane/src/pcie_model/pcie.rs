//! The PCIe link: raw and usable bandwidth, and TLP arithmetic in integer bytes and TLP counts.
//!
//! Sources (`docs/reference/pcie-nic-model.md` §1): raw bandwidth = GT/s × encoding × lanes and the
//! per-TLP overheads (MWr 24 B, MRd 24 B, CplD 20 B with 64-bit addresses) follow pcie-bench's
//! `pcie-model`; usable capacity per direction is `C = raw × η`, with the spec efficiency
//! `η = 1 − 8/AckLimit − 8/FCGuide − 4/1538` from the PCIe Base Spec 5.0 recommended ACK and
//! UpdateFC rates (Tables 3-7..3-9 and 2-46..2-48; pcie-model reuses the Gen3 tables for Gen4
//! and Gen5, and so do we), or a calibrated η (0.945) derived from pcie-bench measurements.
//!
//! TLP splitting (§1.4): writes split at MPS, read requests at MRRS, completions in chunks of
//! `cpl_chunk` (MPS or RCB) and never across a request; nothing crosses a 4 KiB boundary. For a
//! power-of-two granule X ≤ 4096 starting at address `a`, a transfer of `n` bytes takes
//! `⌈((a mod X) + n)/X⌉` TLPs, which already counts every 4 KiB boundary. Completions split at
//! both request and chunk boundaries, i.e. at multiples of `min(MRRS, cpl_chunk)`.
//!
//! Direction convention: **up** = device → host (MWr, MRd requests, MSI), **down** = host →
//! device (CplD, MMIO writes).

use std::iter::Sum;
use std::ops::{Add, AddAssign};

use serde::Serialize;

use super::profile::{CALIBRATED_EFFICIENCY, CplChunk, Efficiency, PcieProfile};
use super::ratio::Ratio;

/// Bytes and TLPs an operation puts on the link, per direction (integers, so the simulation can
/// charge them exactly).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Traffic {
    /// Bytes device → host, including TLP overhead.
    pub up_bytes: u64,
    /// Bytes host → device, including TLP overhead.
    pub down_bytes: u64,
    /// TLPs device → host.
    pub up_tlps: u64,
    /// TLPs host → device.
    pub down_tlps: u64,
}

impl Traffic {
    /// No traffic.
    pub const ZERO: Traffic = Traffic {
        up_bytes: 0,
        down_bytes: 0,
        up_tlps: 0,
        down_tlps: 0,
    };

    /// Upstream-only traffic.
    pub fn up(bytes: u64, tlps: u64) -> Self {
        Traffic {
            up_bytes: bytes,
            up_tlps: tlps,
            ..Traffic::ZERO
        }
    }

    /// Downstream-only traffic.
    pub fn down(bytes: u64, tlps: u64) -> Self {
        Traffic {
            down_bytes: bytes,
            down_tlps: tlps,
            ..Traffic::ZERO
        }
    }

    /// `n` repetitions of this traffic.
    pub fn times(self, n: u64) -> Self {
        Traffic {
            up_bytes: self.up_bytes * n,
            down_bytes: self.down_bytes * n,
            up_tlps: self.up_tlps * n,
            down_tlps: self.down_tlps * n,
        }
    }

    /// This traffic amortised over `n` packets, as exact fractions.
    ///
    /// # Panics
    /// If `n` is zero.
    pub fn per(self, n: u64) -> PerPacket {
        PerPacket {
            up: Ratio::new(self.up_bytes, n),
            down: Ratio::new(self.down_bytes, n),
            up_tlps: Ratio::new(self.up_tlps, n),
            down_tlps: Ratio::new(self.down_tlps, n),
        }
    }

    /// The busier direction's bytes (what bounds the operation rate).
    pub fn max_bytes(self) -> u64 {
        self.up_bytes.max(self.down_bytes)
    }
}

impl Add for Traffic {
    type Output = Traffic;
    fn add(self, r: Traffic) -> Traffic {
        Traffic {
            up_bytes: self.up_bytes + r.up_bytes,
            down_bytes: self.down_bytes + r.down_bytes,
            up_tlps: self.up_tlps + r.up_tlps,
            down_tlps: self.down_tlps + r.down_tlps,
        }
    }
}

impl AddAssign for Traffic {
    fn add_assign(&mut self, r: Traffic) {
        *self = *self + r;
    }
}

impl Sum for Traffic {
    fn sum<I: Iterator<Item = Traffic>>(iter: I) -> Traffic {
        iter.fold(Traffic::ZERO, |a, b| a + b)
    }
}

/// Traffic per packet when operations are amortised over batches (exact fractions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PerPacket {
    /// Bytes up per packet.
    pub up: Ratio,
    /// Bytes down per packet.
    pub down: Ratio,
    /// TLPs up per packet.
    pub up_tlps: Ratio,
    /// TLPs down per packet.
    pub down_tlps: Ratio,
}

impl PerPacket {
    /// Nothing per packet.
    pub const ZERO: PerPacket = PerPacket {
        up: Ratio::ZERO,
        down: Ratio::ZERO,
        up_tlps: Ratio::ZERO,
        down_tlps: Ratio::ZERO,
    };
}

impl From<Traffic> for PerPacket {
    fn from(t: Traffic) -> Self {
        t.per(1)
    }
}

impl Add for PerPacket {
    type Output = PerPacket;
    fn add(self, r: PerPacket) -> PerPacket {
        PerPacket {
            up: self.up + r.up,
            down: self.down + r.down,
            up_tlps: self.up_tlps + r.up_tlps,
            down_tlps: self.down_tlps + r.down_tlps,
        }
    }
}

impl Sum for PerPacket {
    fn sum<I: Iterator<Item = PerPacket>>(iter: I) -> PerPacket {
        iter.fold(PerPacket::ZERO, |a, b| a + b)
    }
}

/// TLPs needed to move `len` bytes starting at `addr` in chunks aligned to `granule`
/// (a power of two ≤ 4096): `⌈((addr mod granule) + len) / granule⌉`, 0 for `len == 0`.
pub fn tlp_count(addr: u64, len: u64, granule: u64) -> u64 {
    debug_assert!(granule.is_power_of_two() && granule <= 4096);
    if len == 0 {
        0
    } else {
        ((addr % granule) + len).div_ceil(granule)
    }
}

/// Raw bandwidth per direction in Gb/s: GT/s × encoding × lanes [pcie-model].
/// `None` for generations outside 1–5 (Gen6 uses FLIT mode, not modelled).
pub fn raw_gbps(generation: u8, lanes: u8) -> Option<f64> {
    let per_lane = match generation {
        1 => 2.5 * 8.0 / 10.0,
        2 => 5.0 * 8.0 / 10.0,
        3 => 8.0 * 128.0 / 130.0,
        4 => 16.0 * 128.0 / 130.0,
        5 => 32.0 * 128.0 / 130.0,
        _ => return None,
    };
    Some(per_lane * f64::from(lanes))
}

/// The spec's recommended ACK / UpdateFC interval (symbol times, identical for both DLLP kinds
/// at widths ≤ x16) for a generation, width and MPS [PCIe spec 5.0 Tables 3-7..3-9,
/// 2-46..2-48, as tabulated by pcie-model]. Gen4 and Gen5 reuse the Gen3 table.
pub fn dll_interval(generation: u8, lanes: u8, mps: u32) -> Option<u32> {
    // Columns: MPS 128, 256, 512, 1024, 2048, 4096.
    let row: [u32; 6] = match (generation, lanes) {
        (1, 1) => [237, 416, 559, 1071, 2095, 4143],
        (1, 2) => [128, 217, 289, 545, 1057, 2081],
        (1, 4) => [73, 118, 154, 282, 538, 1050],
        (1, 8) => [67, 107, 86, 150, 278, 534],
        (1, 16) => [48, 72, 86, 150, 278, 534],
        (2, 1) => [288, 467, 610, 1122, 2146, 4194],
        (2, 2) => [179, 268, 340, 596, 1108, 2132],
        (2, 4) => [124, 169, 205, 333, 589, 1101],
        (2, 8) => [118, 158, 137, 201, 329, 585],
        (2, 16) => [99, 123, 137, 201, 329, 585],
        (3..=5, 1) => [333, 512, 655, 1167, 2191, 4239],
        (3..=5, 2) => [224, 313, 385, 641, 1153, 2177],
        (3..=5, 4) => [169, 214, 250, 378, 634, 1146],
        (3..=5, 8) => [163, 203, 182, 246, 374, 630],
        (3..=5, 16) => [144, 168, 182, 246, 374, 630],
        _ => return None,
    };
    let col = match mps {
        128 => 0,
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        4096 => 5,
        _ => return None,
    };
    Some(row[col])
}

/// Bytes per DLLP (ACK or UpdateFC) including framing [pcie-model].
pub const DLLP_BYTES: f64 = 8.0;
/// SKP ordered set: 4 B every 1538 B [pcie-model].
pub const SKIP_BYTES: f64 = 4.0;
/// SKP ordered-set interval in bytes [pcie-model].
pub const SKIP_INTERVAL: f64 = 1538.0;

/// The spec DLL efficiency `η = 1 − 8/AckLimit − 8/FCGuide − 4/1538`
/// (0.9022 for Gen3 x16 MPS 256, 0.9186 for Gen3 x8).
pub fn spec_efficiency(generation: u8, lanes: u8, mps: u32) -> Option<f64> {
    let limit = f64::from(dll_interval(generation, lanes, mps)?);
    Some(1.0 - DLLP_BYTES / limit - DLLP_BYTES / limit - SKIP_BYTES / SKIP_INTERVAL)
}

/// A configured PCIe link: capacity and TLP arithmetic. Built from a validated
/// [`PcieProfile`].
#[derive(Clone, Debug, PartialEq)]
pub struct PcieLink {
    generation: u8,
    lanes: u8,
    mps: u64,
    mrrs: u64,
    cpl_chunk: u64,
    mwr_overhead: u64,
    mrd_overhead: u64,
    cpld_overhead: u64,
    efficiency: f64,
}

impl PcieLink {
    /// The link described by a profile section; errors name the offending key.
    pub fn from_profile(p: &PcieProfile) -> Result<Self, String> {
        raw_gbps(p.generation, p.lanes)
            .ok_or_else(|| format!("invalid `nic.pcie.gen` = {}: allowed 1..=5", p.generation))?;
        let spec = spec_efficiency(p.generation, p.lanes, p.mps).ok_or_else(|| {
            format!(
                "invalid `nic.pcie.lanes`/`nic.pcie.mps` = x{} / {}: allowed lanes 1, 2, 4, 8, 16 \
                 and MPS 128..4096 (power of two)",
                p.lanes, p.mps
            )
        })?;
        let pow2 = |v: u32| v.is_power_of_two() && (64..=4096).contains(&v);
        if !pow2(p.mrrs) || !pow2(p.rcb) {
            return Err(format!(
                "invalid `nic.pcie.mrrs`/`nic.pcie.rcb` = {} / {}: powers of two up to 4096",
                p.mrrs, p.rcb
            ));
        }
        let efficiency = match p.efficiency {
            Efficiency::Spec => spec,
            Efficiency::Calibrated => CALIBRATED_EFFICIENCY,
            Efficiency::Fixed(x) => x,
        };
        Ok(PcieLink {
            generation: p.generation,
            lanes: p.lanes,
            mps: u64::from(p.mps),
            mrrs: u64::from(p.mrrs),
            cpl_chunk: u64::from(match p.cpl_chunk {
                CplChunk::Mps => p.mps,
                CplChunk::Rcb => p.rcb,
            }),
            mwr_overhead: u64::from(p.mwr_overhead),
            mrd_overhead: u64::from(p.mrd_overhead),
            cpld_overhead: u64::from(p.cpld_overhead),
            efficiency,
        })
    }

    /// Raw bandwidth per direction in Gb/s (126.031 for Gen3 x16).
    pub fn raw_gbps(&self) -> f64 {
        raw_gbps(self.generation, self.lanes).expect("validated at construction")
    }

    /// The spec DLL efficiency for this link (independent of the configured η).
    pub fn spec_efficiency(&self) -> f64 {
        spec_efficiency(self.generation, self.lanes, self.mps as u32).expect("validated")
    }

    /// The configured efficiency η.
    pub fn efficiency(&self) -> f64 {
        self.efficiency
    }

    /// Usable capacity per direction with the configured η, Gb/s.
    pub fn capacity_gbps(&self) -> f64 {
        self.raw_gbps() * self.efficiency
    }

    /// Usable capacity per direction with the spec η, Gb/s (113.70 for Gen3 x16 MPS 256).
    pub fn capacity_spec_gbps(&self) -> f64 {
        self.raw_gbps() * self.spec_efficiency()
    }

    /// Usable capacity per direction with the calibrated η (0.945), Gb/s (119.10 for Gen3 x16).
    pub fn capacity_calibrated_gbps(&self) -> f64 {
        self.raw_gbps() * CALIBRATED_EFFICIENCY
    }

    /// Usable capacity per direction in bits per second, rounded (for the timing layer).
    pub fn capacity_bps(&self) -> u64 {
        (self.capacity_gbps() * 1e9).round() as u64
    }

    /// Maximum payload size in bytes.
    pub fn mps(&self) -> u64 {
        self.mps
    }

    /// Maximum read request size in bytes.
    pub fn mrrs(&self) -> u64 {
        self.mrrs
    }

    /// Completion chunk size in bytes (MPS or RCB).
    pub fn cpl_chunk(&self) -> u64 {
        self.cpl_chunk
    }

    /// A device memory write (posted MWr) of `len` bytes at host address `addr`: up
    /// `len + mwr_overhead · TLPs`, split at MPS. Aligned: `W(n) = n + 24·⌈n/MPS⌉`.
    pub fn write(&self, addr: u64, len: u64) -> Traffic {
        let tlps = tlp_count(addr, len, self.mps);
        Traffic::up(len + self.mwr_overhead * tlps, tlps)
    }

    /// The request half of a device read: up `Rq(n) = mrd_overhead·⌈n/MRRS⌉` (unaligned-aware).
    pub fn read_request(&self, addr: u64, len: u64) -> Traffic {
        let tlps = tlp_count(addr, len, self.mrrs);
        Traffic::up(self.mrd_overhead * tlps, tlps)
    }

    /// The completion half of a device read: down `Rc(n) = n + cpld_overhead·⌈n/X⌉`,
    /// completions split at request and chunk boundaries (X = min(MRRS, cpl_chunk)).
    pub fn read_completion(&self, addr: u64, len: u64) -> Traffic {
        let tlps = tlp_count(addr, len, self.mrrs.min(self.cpl_chunk));
        Traffic::down(len + self.cpld_overhead * tlps, tlps)
    }

    /// A device read (DMA read of host memory) of `len` bytes: requests up, completions down.
    pub fn read(&self, addr: u64, len: u64) -> Traffic {
        self.read_request(addr, len) + self.read_completion(addr, len)
    }

    /// A CPU MMIO write of `len` bytes to the device (e.g. a doorbell): down `p + 24` per TLP
    /// (split at MPS).
    pub fn mmio_write(&self, addr: u64, len: u64) -> Traffic {
        let tlps = tlp_count(addr, len, self.mps);
        Traffic::down(len + self.mwr_overhead * tlps, tlps)
    }

    /// An MSI: a 4 B posted write up (28 B) [pcie-model].
    pub fn msi(&self) -> Traffic {
        self.write(0, 4)
    }

    /// Operations per second the link sustains for an operation costing `t` (the busier
    /// direction bounds): `C / (8 · max(up, down))` [pcie-model].
    pub fn ops_per_sec(&self, t: Traffic) -> f64 {
        ops_per_sec(self.capacity_gbps(), t)
    }

    /// Effective payload Gb/s when each operation moves `payload` bytes and costs `t`
    /// (pcie-model `mem_bw.py`'s effective bandwidth).
    pub fn effective_gbps(&self, t: Traffic, payload: u64) -> f64 {
        effective_gbps(self.capacity_gbps(), t, payload)
    }
}

/// Operations per second at capacity `c_gbps` per direction for an operation costing `t`.
pub fn ops_per_sec(c_gbps: f64, t: Traffic) -> f64 {
    match t.max_bytes() {
        0 => f64::INFINITY,
        b => c_gbps * 1e9 / (8.0 * b as f64),
    }
}

/// Effective payload Gb/s at capacity `c_gbps`: `payload · C / max(up, down)`.
pub fn effective_gbps(c_gbps: f64, t: Traffic, payload: u64) -> f64 {
    ops_per_sec(c_gbps, t) * 8.0 * payload as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn link(generation: u8, lanes: u8, mps: u32, eff: Efficiency) -> PcieLink {
        PcieLink::from_profile(&PcieProfile {
            generation,
            lanes,
            mps,
            efficiency: eff,
            ..PcieProfile::default()
        })
        .unwrap()
    }

    fn within(x: f64, want: f64, rel: f64) -> bool {
        ((x - want) / want).abs() <= rel
    }

    #[test]
    fn raw_bandwidth_table() {
        // §1.1
        assert_eq!(raw_gbps(1, 8), Some(16.0));
        assert_eq!(raw_gbps(2, 16), Some(64.0));
        assert_eq!(format!("{:.3}", raw_gbps(3, 8).unwrap()), "63.015");
        assert_eq!(format!("{:.3}", raw_gbps(3, 16).unwrap()), "126.031");
        assert_eq!(format!("{:.3}", raw_gbps(4, 8).unwrap()), "126.031");
        assert_eq!(format!("{:.3}", raw_gbps(4, 16).unwrap()), "252.062");
        assert_eq!(format!("{:.3}", raw_gbps(5, 16).unwrap()), "504.123");
        assert_eq!(raw_gbps(6, 16), None);
    }

    #[test]
    fn spec_efficiency_values() {
        // §1.3: both limits 168 for Gen3 x16 MPS 256, 203 for x8.
        assert_eq!(dll_interval(3, 16, 256), Some(168));
        assert_eq!(dll_interval(3, 8, 256), Some(203));
        assert_eq!(
            format!("{:.4}", spec_efficiency(3, 16, 256).unwrap()),
            "0.9022"
        );
        assert_eq!(
            format!("{:.4}", spec_efficiency(3, 8, 256).unwrap()),
            "0.9186"
        );
        assert_eq!(dll_interval(3, 32, 256), None);
        assert_eq!(dll_interval(3, 16, 100), None);
    }

    #[test]
    fn capacity_table_all_columns() {
        // §1.3 table: (gen, lanes, [MPS 128, MPS 256 spec, MPS 512], calibrated).
        let rows: [(u8, u8, [f64; 3], f64); 4] = [
            (3, 8, [56.666, 57.885, 57.312], 59.55),
            (3, 16, [111.700, 113.700, 114.623], 119.10),
            (4, 16, [223.399, 227.400, 229.247], 238.20),
            (5, 16, [446.798, 454.800, 458.493], 476.40),
        ];
        for (g, l, spec, cal) in rows {
            for (mps, want) in [128, 256, 512].into_iter().zip(spec) {
                let c = link(g, l, mps, Efficiency::Spec).capacity_gbps();
                assert_eq!(
                    format!("{c:.3}"),
                    format!("{want:.3}"),
                    "gen{g} x{l} mps {mps}"
                );
                assert!(within(c, want, 0.001));
            }
            let c = link(g, l, 256, Efficiency::Calibrated).capacity_gbps();
            assert_eq!(
                format!("{c:.2}"),
                format!("{cal:.2}"),
                "gen{g} x{l} calibrated"
            );
            // The calibrated column does not depend on MPS.
            let c512 = link(g, l, 512, Efficiency::Calibrated).capacity_calibrated_gbps();
            assert_eq!(c, c512);
        }
        let l = link(3, 16, 256, Efficiency::Fixed(0.9));
        assert!(within(l.capacity_gbps(), 126.0308 * 0.9, 1e-5));
        assert_eq!(l.capacity_bps(), (l.capacity_gbps() * 1e9).round() as u64);
    }

    #[test]
    fn closed_forms_aligned() {
        let l = link(3, 16, 256, Efficiency::Spec);
        // W(n) = n + 24⌈n/256⌉
        assert_eq!(l.write(0, 64), Traffic::up(88, 1));
        assert_eq!(l.write(0, 1496), Traffic::up(1640, 6));
        assert_eq!(l.write(0, 1432), Traffic::up(1576, 6));
        assert_eq!(l.write(0, 256), Traffic::up(280, 1));
        assert_eq!(l.write(0, 257), Traffic::up(305, 2));
        assert_eq!(l.write(0, 0), Traffic::ZERO);
        // Rq(n) = 24⌈n/512⌉, Rc(n) = n + 20⌈n/256⌉
        assert_eq!(l.read_request(0, 1496), Traffic::up(72, 3));
        assert_eq!(l.read_completion(0, 1496), Traffic::down(1616, 6));
        assert_eq!(
            l.read(0, 60),
            Traffic {
                up_bytes: 24,
                down_bytes: 80,
                up_tlps: 1,
                down_tlps: 1
            }
        );
        assert_eq!(
            l.read(0, 4096),
            Traffic {
                up_bytes: 192,
                down_bytes: 4416,
                up_tlps: 8,
                down_tlps: 16
            }
        );
        // MMIO write of p bytes: p + 24 down; MSI 28 up.
        assert_eq!(l.mmio_write(0, 8), Traffic::down(32, 1));
        assert_eq!(l.msi(), Traffic::up(28, 1));
    }

    #[test]
    fn unaligned_and_4k_boundaries() {
        let l = link(3, 16, 256, Efficiency::Spec);
        // 64 B starting 32 B before an MPS boundary: two TLPs.
        assert_eq!(l.write(224, 64), Traffic::up(64 + 48, 2));
        // ⌈((a mod X) + n)/X⌉ with a = 100, n = 300, X = 256 → 2
        assert_eq!(tlp_count(100, 300, 256), 2);
        // A read of 64 B straddling a 4 KiB page needs two requests even though MRRS = 512.
        assert_eq!(l.read_request(4096 - 32, 64), Traffic::up(48, 2));
        assert_eq!(l.read_completion(4096 - 32, 64), Traffic::down(104, 2));
        // Page spanning: 4 KiB from an unaligned start spans two pages, ≥ 2 TLPs for any granule.
        assert!(tlp_count(1, 4096, 4096) >= 2);
    }

    #[test]
    fn rcb_chunks_and_small_mrrs() {
        let rcb = PcieLink::from_profile(&PcieProfile {
            cpl_chunk: CplChunk::Rcb,
            ..PcieProfile::default()
        })
        .unwrap();
        assert_eq!(rcb.read_completion(0, 256), Traffic::down(256 + 4 * 20, 4));
        // MRRS smaller than MPS: each 128 B request gets its own completion.
        let small = PcieLink::from_profile(&PcieProfile {
            mrrs: 128,
            ..PcieProfile::default()
        })
        .unwrap();
        assert_eq!(
            small.read(0, 512),
            Traffic {
                up_bytes: 96,
                down_bytes: 592,
                up_tlps: 4,
                down_tlps: 4
            }
        );
    }

    #[test]
    fn golden_vectors_mem_bw() {
        // §1.4: effective payload Gb/s, MPS 256, MRRS 512, spec η.
        let cases: [(u8, [[f64; 3]; 2]); 2] = [
            (8, [[42.10, 44.10, 33.08], [52.81, 53.60, 50.60]]),
            (16, [[82.69, 86.63, 64.97], [103.74, 105.28, 99.39]]),
        ];
        for (lanes, rows) in cases {
            let l = link(3, lanes, 256, Efficiency::Spec);
            for (n, want) in [64u64, 1500].into_iter().zip(rows) {
                let got = [
                    l.effective_gbps(l.write(0, n), n),
                    l.effective_gbps(l.read(0, n), n),
                    l.effective_gbps(l.write(0, n) + l.read(0, n), n),
                ];
                for (g, w) in got.iter().zip(want) {
                    assert_eq!(format!("{g:.2}"), format!("{w:.2}"), "x{lanes} {n} B");
                }
            }
        }
    }

    #[test]
    fn pcie_bench_measurements_within_5_percent() {
        // §1.4: 1536 B reads on Gen3 x8 measured 55.6 Gb/s with MPS-sized completions; the
        // RCB-64 model predicts ≈ 43.85 (we get 44.10 with spec η).
        let x8 = PcieProfile {
            lanes: 8,
            ..PcieProfile::default()
        };
        let cal = PcieLink::from_profile(&x8).unwrap();
        let g = cal.effective_gbps(cal.read(0, 1536), 1536);
        assert!(within(g, 55.6, 0.05), "{g}");
        let rcb = PcieLink::from_profile(&PcieProfile {
            cpl_chunk: CplChunk::Rcb,
            efficiency: Efficiency::Spec,
            ..x8
        })
        .unwrap();
        let g = rcb.effective_gbps(rcb.read(0, 1536), 1536);
        assert!(within(g, 43.85, 0.05), "{g}");
        // 64 B link bounds on Gen3 x8: 86 M reads/s and 82 M writes/s (spec η).
        let spec = link(3, 8, 256, Efficiency::Spec);
        assert_eq!(
            format!("{:.0}", spec.ops_per_sec(spec.read(0, 64)) / 1e6),
            "86"
        );
        assert_eq!(
            format!("{:.0}", spec.ops_per_sec(spec.write(0, 64)) / 1e6),
            "82"
        );
    }

    #[test]
    fn traffic_arithmetic() {
        let a = Traffic {
            up_bytes: 88,
            down_bytes: 0,
            up_tlps: 1,
            down_tlps: 0,
        };
        let b = Traffic::down(32, 1);
        assert_eq!((a + b).max_bytes(), 88);
        assert_eq!([a, b].into_iter().sum::<Traffic>(), a + b);
        assert_eq!(a.times(32).per(32), PerPacket::from(a));
        assert_eq!(a.per(32).up, Ratio::new(11, 4));
        assert_eq!(ops_per_sec(100.0, Traffic::ZERO), f64::INFINITY);
    }

    proptest! {
        /// The closed form agrees with splitting byte by byte at every granule boundary.
        #[test]
        fn tlp_count_matches_brute_force(addr in 0u64..20_000, len in 0u64..9000, shift in 6u32..13) {
            let g = 1u64 << shift;
            let mut tlps = 0;
            let mut prev_chunk = None;
            for b in addr..addr + len {
                let chunk = b / g;
                if prev_chunk != Some(chunk) { tlps += 1; prev_chunk = Some(chunk); }
            }
            prop_assert_eq!(tlp_count(addr, len, g), tlps);
            // And never fewer than the 4 KiB pages spanned.
            if len > 0 {
                let pages = (addr + len - 1) / 4096 - addr / 4096 + 1;
                prop_assert!(tlp_count(addr, len, g) >= pages);
            }
        }

        /// Completions split at request boundaries and at chunk boundaries, never across either.
        #[test]
        fn completions_respect_requests(addr in 0u64..10_000, len in 1u64..9000,
                                        mrrs_s in 7u32..13, mps_s in 7u32..13) {
            let p = PcieProfile { mrrs: 1 << mrrs_s, mps: 1 << mps_s, ..PcieProfile::default() };
            let l = PcieLink::from_profile(&p).unwrap();
            // Enumerate requests, then completions inside each request.
            let mut cpl = 0;
            let mut a = addr;
            let end = addr + len;
            while a < end {
                let req_end = ((a / l.mrrs()) + 1) * l.mrrs();
                let req_end = req_end.min(end);
                cpl += tlp_count(a, req_end - a, l.cpl_chunk());
                a = req_end;
            }
            prop_assert_eq!(l.read_completion(addr, len).down_tlps, cpl);
            prop_assert_eq!(l.read_completion(addr, len).down_bytes, len + 20 * cpl);
        }
    }
}
