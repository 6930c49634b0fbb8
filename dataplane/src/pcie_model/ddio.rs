//! The DDIO / LLC hit model: how much received packet data stays in the LLC, and what the
//! misses cost in DRAM traffic and Tx read latency.
//!
//! Sources: `docs/reference/pcie-nic-model.md` §7 (nicmem §3.4, §6.1, §6.3; pcie-bench data for the
//! miss latency). DMA writes allocate into `ways_ddio` of the LLC's ways, so the DDIO capacity
//! is `C_ddio = LLC × ways_ddio / ways_total` (22 MiB × 2 / 11 = 4 MiB on the paper's host).
//! Packet data in flight is `W_inflight = Σ (occupied Rx entries + packets queued in software) ×
//! host bytes per packet`, where host bytes per packet are L for host/split and H for the
//! nicmem modes (their payloads never touch host memory). The hit probability is
//! `p_hit = min(1, C_ddio / W_inflight)`; each missed packet costs a write-back and a re-read
//! in DRAM, and a Tx read that misses adds 40–54 ns. This is the simple model of the reference;
//! Wang et al. (POMACS'22) refine it.
//!
//! The LLC is shared: the packet data DDIO keeps in its ways, `min(W_inflight, C_ddio)`, is
//! capacity the cores' own LLC-resident state (the buffers' metadata, `host.cycles.meta_lines`
//! per packet over every ring entry) cannot use. With few DDIO ways that state fits beside the
//! data; with DDIO allowed every way (11 of 11) a host-mode ring set fills the LLC and evicts it,
//! which is why the paper's host NAT is slower at 11 ways than at 9 [nicmem Fig. 11]. The core's
//! hit fraction is `min(1, (LLC − min(W_inflight, C_ddio)) / W_core)` ([`DdioModel::core_hit`]).

use crate::mode::DatapathMode;

use super::profile::HostProfile;
use super::timeline::{PS_PER_NS, Ps};

/// The LLC/DDIO geometry and miss cost of a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdioModel {
    llc_bytes: u64,
    llc_ways: u32,
    ddio_ways: u32,
    miss_adder_ps: Ps,
}

impl DdioModel {
    /// A model for an LLC of `llc_bytes` with `llc_ways` ways, `ddio_ways` of them open to
    /// DMA writes, and a DMA-read miss adder of `miss_adder_ns`.
    pub fn new(llc_bytes: u64, llc_ways: u32, ddio_ways: u32, miss_adder_ns: u64) -> Self {
        DdioModel {
            llc_bytes,
            llc_ways: llc_ways.max(1),
            ddio_ways: ddio_ways.min(llc_ways),
            miss_adder_ps: miss_adder_ns * PS_PER_NS,
        }
    }

    /// The model of a profile's `[host]` section.
    pub fn from_profile(host: &HostProfile) -> Self {
        Self::new(
            host.llc_size.bytes(),
            host.llc_ways,
            host.ddio_ways,
            host.dram_latency_adder_ns,
        )
    }

    /// Bytes per LLC way (2 MiB on the paper's host).
    pub fn way_bytes(&self) -> u64 {
        self.llc_bytes / u64::from(self.llc_ways)
    }

    /// `C_ddio = LLC × ways_ddio / ways_total` in bytes (4 MiB on the paper's host).
    pub fn capacity_bytes(&self) -> u64 {
        self.llc_bytes * u64::from(self.ddio_ways) / u64::from(self.llc_ways)
    }

    /// How many LLC ways `bytes` of packet data fill.
    pub fn ways_occupied(&self, bytes: u64) -> f64 {
        bytes as f64 / self.way_bytes() as f64
    }

    /// `p_hit = min(1, C_ddio / W_inflight)`; 1 when nothing is in flight, 0 with DDIO off.
    pub fn p_hit(&self, inflight_bytes: u64) -> f64 {
        if inflight_bytes == 0 {
            1.0
        } else {
            (self.capacity_bytes() as f64 / inflight_bytes as f64).min(1.0)
        }
    }

    /// The fraction of the cores' LLC-resident state of `core_bytes` that stays in the LLC beside
    /// `inflight_bytes` of packet data: `min(1, (LLC − min(W_inflight, C_ddio)) / W_core)`
    /// (see the module docs); 1 when the cores keep nothing there.
    pub fn core_hit(&self, inflight_bytes: u64, core_bytes: u64) -> f64 {
        if core_bytes == 0 {
            return 1.0;
        }
        let io = inflight_bytes.min(self.capacity_bytes());
        (self.llc_bytes.saturating_sub(io) as f64 / core_bytes as f64).min(1.0)
    }

    /// DRAM bytes per packet: `(1 − p_hit) × (write-back + re-read)` of the packet's host
    /// bytes.
    pub fn dram_bytes_per_packet(&self, inflight_bytes: u64, host_bytes_per_packet: u64) -> f64 {
        (1.0 - self.p_hit(inflight_bytes)) * 2.0 * host_bytes_per_packet as f64
    }

    /// Latency a Tx DMA read pays when it misses the LLC (40 ns by default).
    pub fn miss_adder_ps(&self) -> Ps {
        self.miss_adder_ps
    }

    /// Expected Tx read latency adder at hit probability `p_hit`: `(1 − p_hit) × adder`.
    pub fn expected_read_adder_ps(&self, p_hit: f64) -> f64 {
        (1.0 - p_hit.clamp(0.0, 1.0)) * self.miss_adder_ps as f64
    }
}

/// Host-memory bytes a received packet of `len` bytes occupies: L for host/split, min(L, H) for
/// the nicmem modes.
pub fn host_bytes_per_packet(mode: DatapathMode, len: u64, split_offset: u64) -> u64 {
    if mode.uses_nicmem() {
        len.min(split_offset)
    } else {
        len
    }
}

/// `W_inflight`: packets in flight (occupied Rx entries plus software-queued packets) times
/// host bytes per packet.
pub fn inflight_bytes(packets: u64, host_bytes_per_packet: u64) -> u64 {
    packets * host_bytes_per_packet
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcie_model::profile::{HardwareProfile, MIB};

    fn paper() -> DdioModel {
        DdioModel::from_profile(&HardwareProfile::default().host)
    }

    #[test]
    fn capacity_is_two_of_eleven_ways() {
        let m = paper();
        assert_eq!(m.way_bytes(), 2 * MIB);
        assert_eq!(m.capacity_bytes(), 4 * MIB);
        assert_eq!(DdioModel::new(22 * MIB, 11, 0, 40).capacity_bytes(), 0);
        assert_eq!(
            DdioModel::new(22 * MIB, 11, 11, 40).capacity_bytes(),
            22 * MIB
        );
    }

    #[test]
    fn one_ring_is_about_one_way() {
        // nicmem §3.4: "a 1024 × 1500 B ring ≈ 2 MiB = 1 way". 1024 × 1500 B is 1.46 MiB
        // (0.73 way); with 2 KiB buffer slots it is exactly 2 MiB = 1 way.
        let m = paper();
        let ring = inflight_bytes(1024, 1500);
        assert_eq!(format!("{:.2}", ring as f64 / MIB as f64), "1.46");
        assert!(m.ways_occupied(ring) <= 1.0 && m.ways_occupied(ring) > 0.7);
        assert_eq!(m.ways_occupied(inflight_bytes(1024, 2048)), 1.0);
        assert_eq!(m.p_hit(ring), 1.0);
    }

    #[test]
    fn paper_ddio_budget_is_exceeded() {
        // nicmem §6.3: 256 × 14 × 1500 ≈ 5 MiB > 4 MiB.
        let m = paper();
        let w = inflight_bytes(256 * 14, 1500);
        assert_eq!(w, 5_376_000);
        assert!(w > m.capacity_bytes());
        assert_eq!(format!("{:.2}", w as f64 / MIB as f64), "5.13");
        let p = m.p_hit(w);
        assert_eq!(format!("{p:.3}"), "0.780");
        // DRAM bytes per packet: (1 − 0.780) × 2 × 1500 ≈ 659.
        assert_eq!(format!("{:.0}", m.dram_bytes_per_packet(w, 1500)), "659");
        assert_eq!(
            format!("{:.1}", m.expected_read_adder_ps(p) / 1000.0),
            "8.8"
        );
    }

    #[test]
    fn ddio_data_in_every_way_evicts_the_cores_state() {
        // 14 queues of 1024-entry rings: the mbufs' two lines per Rx and Tx entry, 3.67 MB.
        let core = 2 * 1024 * 14 * 128;
        let host = inflight_bytes(1024 * 14, 1500);
        // 2 ways: 4 MiB of data beside 18 MiB for the cores: everything fits.
        assert_eq!(paper().core_hit(host, core), 1.0);
        // 9 ways: 18 MiB of data, 4 MiB left: still fits.
        assert_eq!(
            DdioModel::new(22 * MIB, 11, 9, 40).core_hit(host, core),
            1.0
        );
        // 11 ways: the 21.5 MB of data leave 1.6 MB: 43 % of the cores' lines stay.
        let all = DdioModel::new(22 * MIB, 11, 11, 40);
        assert_eq!(format!("{:.2}", all.core_hit(host, core)), "0.43");
        // nmNFV keeps only 64 B headers in host memory: 0.9 MB, no eviction even at 11 ways.
        assert_eq!(all.core_hit(inflight_bytes(1024 * 14, 64), core), 1.0);
        // DDIO off keeps no data in the LLC; no state of the cores: nothing to evict.
        assert_eq!(
            DdioModel::new(22 * MIB, 11, 0, 40).core_hit(host, core),
            1.0
        );
        assert_eq!(all.core_hit(host, 0), 1.0);
    }

    #[test]
    fn nicmem_modes_keep_only_headers_in_host_memory() {
        assert_eq!(host_bytes_per_packet(DatapathMode::Host, 1496, 64), 1496);
        assert_eq!(host_bytes_per_packet(DatapathMode::Split, 1496, 64), 1496);
        assert_eq!(
            host_bytes_per_packet(DatapathMode::NicPayload, 1496, 64),
            64
        );
        assert_eq!(host_bytes_per_packet(DatapathMode::NicInline, 60, 64), 60);
        // The same 14 × 256 in-flight packets fit easily: nmNFV hits 100 %.
        let m = paper();
        let w = inflight_bytes(
            256 * 14,
            host_bytes_per_packet(DatapathMode::NicInline, 1496, 64),
        );
        assert_eq!(m.p_hit(w), 1.0);
        assert_eq!(m.dram_bytes_per_packet(w, 64), 0.0);
        // DDIO off: everything misses.
        let off = DdioModel::new(22 * MIB, 11, 0, 40);
        assert_eq!(off.p_hit(w), 0.0);
        assert_eq!(off.expected_read_adder_ps(0.0), 40_000.0);
        assert_eq!(off.miss_adder_ps(), 40_000);
        assert_eq!(off.p_hit(0), 1.0);
    }
}
