//! The virtual NIC's accounting and timing layer (the second of its two layers).
//!
//! **Accounting** (always on). Every DMA the NIC performs is charged, in integer bytes and TLPs,
//! through [`OpCosts`], the same per-operation arithmetic `dataplane model` composes into its
//! analytical breakdown, so the simulation's counters and the analysis agree by construction:
//! Rx WQE fetches (one read per `rx_wqe_fetch_batch` WQEs of the mode's WQE size), Rx data writes
//! (header to host; payload to host or, for a primary-ring payload, to nicmem, which costs no
//! PCIe), Rx CQE writes (optionally compressed), the Tx doorbell MMIO write, the Tx WQE fetch (the
//! WQEBBs posted since the previous doorbell, one read split at MRRS; or BlueFlame MMIO pushes),
//! Tx data reads (one read per host data segment; nothing for inline bytes or nicmem segments) and
//! Tx completions. Beside PCIe: host-memory bytes the NIC reads and writes (all DMA, and packet
//! data alone), nicmem bytes written and read and the peak of payload bytes held, and wire bytes
//! including preamble, SFD, IFG and FCS. Buffers are charged as if MPS-aligned, as the analytical
//! breakdown assumes (pool buffer sizes are multiples of 64 B, not of MPS; charging real addresses
//! would add a TLP to some payload writes and make the two disagree by ~1 %).
//!
//! The vNIC rounds `datapath.tx_inline` as the profile's `inline_rounding` says (stock mlx5:
//! 18 + 16k, 64 -> 66; `exact` for the nicmem fork) and inlines at most the header segment; the
//! analysis rounds the same way, so a run and `dataplane model` read the same header bytes from
//! host memory and fetch the same WQEs: their PCIe bytes agree for every split offset and inline
//! size. They differ only where the rounded size exceeds the header segment (64 -> 66 at H = 64):
//! the analysis then charges the CPU's 2 B copy out of nicmem (no PCIe), the vNIC inlines the
//! 64 B header and reads those 2 B with the payload from nicmem.
//!
//! Cost per packet is O(1) and allocation-free: fixed operations are precomputed, and
//! length-dependent charges come from small direct-mapped caches keyed by length (a run of one
//! frame size hits every time).
//!
//! **Timing** (optional, [`VnicTiming`]). Each queue has a clock and the busy-until timelines of
//! [`Timelines`] (PCIe up/down, wire Rx/Tx, DMA engine, nicmem, host memory). Frames end their
//! wire slot at times set by the offered rate (or, unpaced, when the NIC pulls them, limited by
//! the wire); each receive books its descriptor fetch, data and CQE writes; the CPU sees a
//! completion only once it is visible in host memory; a doorbell books the MMIO write, the WQE
//! read (request up, RTT, completions down, outstanding reads capped) and each WQE's data reads
//! and nicmem reads, then the frame's wire slot. Latency per packet, from the end of its arrival
//! on the wire to the end of its departure, goes into an HDR histogram. The CPU's time is either
//! the wall clock or, in virtual mode, a cycles-per-packet model from the profile's
//! `[host.cycles]` plus a DDIO miss cost, so the same config gives the same numbers. CPU
//! utilisation counts per-packet work plus the doorbell amortised over a full burst: a poll-mode
//! core at low load rings a doorbell per small burst, which takes its time but is not load (it
//! shrinks per packet as bursts grow), so 100 % means the core is saturated.
//!
//! Booking order: busy-until timelines are FIFO in booking order, so the NIC books the link,
//! engine and SRAM work of a doorbell (WQE fetch, data reads, completions) at the time it
//! processes the doorbell, and derives each step's completion from the waits it met plus the
//! latencies (see [`Timelines::dma_read_booked`]); a paced queue books the arrivals that came
//! while the CPU worked before a doorbell's work. Booking a read's completion at a future time
//! would make earlier-ready transfers booked later queue behind an idle gap.
//!
//! Drops with a reason: a paced frame that finds no Rx descriptor is `rx_missed`; one that
//! finds the NIC's receive buffer (`nic.rx_buffer`) full because the PCIe upstream backlog is
//! too long is `pcie_overrun`. An unpaced (pulled) NIC instead waits, like a link with PAUSE.
//!
//! DDIO and memory contention: the host bytes of Rx buffers in flight (the Rx ring's entries
//! and the packets in software, times the host bytes per packet, summed over the queues sharing
//! the LLC) give the hit fraction of [`DdioModel`] (the paper's leaky DMA: ring size × queues ×
//! buffer bytes against the DDIO ways). Each entry's completion is written through DDIO too and
//! counts in those bytes (a 64 B CQE, or its eighth of a compressed slot). A missed packet costs
//! DRAM traffic, booked on the host-memory timeline: the write-back of its host bytes and of its
//! completion line when DDIO evicts them, their re-read (the NIC's Tx read, the core's reads of
//! the header and of the CQE), and a 64 B read for each DMA write that ends inside a cache line
//! (1496 B of a 1500 B frame: 23 lines and 24 B) when that line is no longer in the LLC: a
//! partial-line write must merge with the line's old contents. DPDK's mlx5 guide says so of its
//! `rxq_pkt_pad_en` option (pad an Rx packet to the end of its cache line: "avoiding partial
//! cacheline write which may cause costly read-modify-copy in memory transaction", disabled by
//! default and not among the paper's artifact flags in `docs/reference/pcie-nic-model.md` §3),
//! as does the Linux mlx5 driver's end padding (commit f32f5bd2eb7e: "to avoid RMWs on the last
//! cache line"). The NFs' own state adds its reads and the write-backs of the lines they dirty
//! (`host.cycles.nf_dram_writes`), each a random line that holds DRAM as long as `64 /
//! host.dram_random_fraction` sequential bytes (random 64 B accesses sustain a quarter of DRAM's
//! sequential bandwidth). Written bytes hold DRAM longer than read bytes (read/write turnarounds:
//! a published Intel MLC read/write mix, `host.dram_read_write_bandwidth`), so the timeline books
//! them at their DRAM time. Tx reads that miss pay the miss latency adder, and in virtual time the
//! core a DRAM access instead of an LLC hit for the header lines DDIO lost, a burst's lost lines
//! overlapping up to the core's fill buffers (`host.cycles.fill_buffers`: the paper's FastClick
//! prefetches every header of a burst before it processes one); a lost CQE line costs
//! DRAM traffic but no stall, as the CQ ring is read in order and the L2 streamer prefetches such
//! a stream (Intel 64 and IA-32 Architectures Optimization Reference Manual, "L2 streamer").
//! Every DRAM access the core makes (those header misses and the NFs' own flow-table reads,
//! `host.cycles.nf_dram_reads`) costs the *loaded* DRAM latency: the queue measures its DRAM utilisation on the host-memory
//! timeline and reads the latency off the profile's published loaded-latency curve
//! (`MemoryContention` below, [`crate::pcie_model::dram`]). So host and split modes, whose payloads
//! leak to DRAM, slow their cores down twice: by the misses and by the latency every other DRAM
//! access then pays. The packet data DDIO keeps in the LLC also crowds out the cores' own
//! LLC-resident state (the buffers' metadata, `host.cycles.meta_lines` per ring entry): with DDIO
//! allowed every way, host-mode rings fill the LLC and those lines cost DRAM accesses too
//! ([`DdioModel::core_hit`]).
//!
//! Multi-queue ports: each queue gets a static share (1/queues) of the wire, the PCIe link, the
//! outstanding reads, the DMA engine, nicmem and DRAM bandwidth, and of the offered load. With
//! RSS spreading flows evenly this equals sharing; it keeps every queue's timeline on its own
//! core (no locks) and a virtual run deterministic. When only the first `vnic.nicmem_queues`
//! queues run the nicmem mode and the rest `split`, the byte rates (the PCIe link and DRAM) are
//! shared in proportion to each queue's PCIe bytes per packet instead (at the traffic's frame
//! size), which is what a shared link gives queues that receive packets at the same rate, but
//! never less than `1/queues` (the NIC serves its queues round robin, so a queue with work gets at
//! least its turn); the per-packet resources (wire, receive buffer, read tags, DMA operation
//! rates) stay `1/queues`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Deserialize;

use crate::burst::MAX_BURST;
use crate::mode::DatapathMode;
use crate::pcie_model::costs::OpCosts;
use crate::pcie_model::ddio::{DdioModel, host_bytes_per_packet};
use crate::pcie_model::dram::{LoadedLatency, write_cost};
use crate::pcie_model::pcie::{PcieLink, Traffic};
use crate::pcie_model::profile::{Efficiency, HardwareProfile};
use crate::pcie_model::timeline::{
    Cost, DmaLanes, Lane, OutstandingReads, PS_PER_NS, Ps, ResourceKind, Step, Timelines,
    pick_bottleneck,
};
use crate::pcie_model::{Breakdown, BreakdownInput};

/// How a queue's clock runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockMode {
    /// CPU time is measured with the wall clock (developers watching real CPU throughput).
    #[default]
    Wall,
    /// CPU time comes from the profile's cycle model: deterministic, same config same numbers
    /// (sweeps and CI).
    Virtual,
}

impl ClockMode {
    /// Config name (`wall`, `virtual`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClockMode::Wall => "wall",
            ClockMode::Virtual => "virtual",
        }
    }
}

/// Timing parameters of a port (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct VnicTiming {
    /// Wall or virtual CPU time.
    pub clock: ClockMode,
    /// Offered load at the wire in Gb/s (line bits: preamble, SFD, IFG and FCS included);
    /// `None` = frames arrive when the NIC pulls them (flow control), limited by the wire.
    pub offered_gbps: Option<f64>,
    /// NF cycles per packet charged in virtual mode on top of `host.cycles.driver_per_packet`.
    pub nf_cycles: u32,
    /// DRAM reads per packet of the NFs' own state (flow tables), charged in virtual mode at
    /// the loaded DRAM latency (`host.cycles.nf_dram_reads` of the pipeline's functions).
    pub nf_dram_reads: u32,
    /// Cache lines per packet of the NFs' own state they dirty and the LLC later writes back
    /// (`host.cycles.nf_dram_writes`: a flow entry updated per packet in a table far beyond the
    /// LLC), booked on the DRAM timeline in virtual mode; a store does not stall the core.
    pub nf_dram_writes: u32,
    /// The traffic's typical frame size in bytes with FCS, when known: weighs the shares of the
    /// link a port's queues get when they run different modes (`vnic.nicmem_queues`); `None`
    /// takes the largest frame.
    pub frame_hint: Option<u32>,
}

impl Default for VnicTiming {
    fn default() -> Self {
        Self {
            clock: ClockMode::Virtual,
            offered_gbps: None,
            nf_cycles: 0,
            nf_dram_reads: 0,
            nf_dram_writes: 0,
            frame_hint: None,
        }
    }
}

/// The operations of the per-packet breakdown, in its order (names as in
/// [`crate::pcie_model::Breakdown`]'s items).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// Rx data writes.
    RxData,
    /// Rx completion writes.
    RxCqe,
    /// Rx WQE fetches.
    RxWqe,
    /// Tx doorbell MMIO writes.
    TxDoorbell,
    /// Tx WQE fetches (or BlueFlame pushes).
    TxWqe,
    /// Tx data reads.
    TxData,
    /// Tx completion writes.
    TxCqe,
}

impl Item {
    /// Every item, in breakdown order.
    pub const ALL: [Item; 7] = [
        Item::RxData,
        Item::RxCqe,
        Item::RxWqe,
        Item::TxDoorbell,
        Item::TxWqe,
        Item::TxData,
        Item::TxCqe,
    ];

    /// The breakdown's name for the item ("Rx data", ...).
    pub fn name(self) -> &'static str {
        match self {
            Item::RxData => "Rx data",
            Item::RxCqe => "Rx CQE",
            Item::RxWqe => "Rx WQE",
            Item::TxDoorbell => "Tx doorbell",
            Item::TxWqe => "Tx WQE",
            Item::TxData => "Tx data",
            Item::TxCqe => "Tx CQE",
        }
    }

    /// Snake-case key for reports (`rx_data`, ...).
    pub fn key(self) -> &'static str {
        match self {
            Item::RxData => "rx_data",
            Item::RxCqe => "rx_cqe",
            Item::RxWqe => "rx_wqe",
            Item::TxDoorbell => "tx_doorbell",
            Item::TxWqe => "tx_wqe",
            Item::TxData => "tx_data",
            Item::TxCqe => "tx_cqe",
        }
    }
}

/// Integer counters of one queue (summed per port with [`NicCounters::add`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicCounters {
    /// PCIe traffic per breakdown item (index = `Item as usize`).
    pub items: [Traffic; 7],
    /// Bytes the NIC read from host memory by DMA (descriptors and packet data).
    pub host_bytes_read: u64,
    /// Bytes the NIC wrote to host memory by DMA (packet data and completions).
    pub host_bytes_written: u64,
    /// Packet-data bytes the NIC read from host memory.
    pub host_data_read: u64,
    /// Packet-data bytes the NIC wrote to host memory.
    pub host_data_written: u64,
    /// DRAM bytes caused by DDIO misses, timed runs only: the write-back and re-read of a missed
    /// packet's host bytes and of its completion, and the read-for-ownership of each partial last
    /// line its DMA writes merged into (see the module docs).
    pub dram_bytes: u64,
    /// Payload bytes the NIC read from nicmem.
    pub nicmem_bytes_read: u64,
    /// Payload bytes the NIC wrote to nicmem.
    pub nicmem_bytes_written: u64,
    /// Payload bytes currently held in nicmem.
    pub nicmem_live_bytes: u64,
    /// Peak of `nicmem_live_bytes` (summed over queues: an upper bound of the port's peak).
    pub nicmem_peak_bytes: u64,
    /// Frames that arrived on the wire.
    pub wire_rx_frames: u64,
    /// Line bytes of those frames (frame + FCS + preamble/SFD + IFG).
    pub wire_rx_bytes: u64,
    /// Frames sent on the wire.
    pub wire_tx_frames: u64,
    /// Line bytes of those frames.
    pub wire_tx_bytes: u64,
    /// Frames dropped because the receive buffer was full (PCIe upstream behind).
    pub rx_pcie_overrun: u64,
    /// Tx doorbells rung.
    pub doorbells: u64,
    /// Rx WQE fetch reads.
    pub rx_wqe_fetches: u64,
    /// Rx completions written (before compression).
    pub rx_cqes: u64,
    /// Tx completions written.
    pub tx_cqes: u64,
}

impl NicCounters {
    /// Total PCIe traffic (sum of the items).
    pub fn pcie(&self) -> Traffic {
        self.items.iter().copied().sum()
    }

    /// Traffic of one item.
    pub fn item(&self, i: Item) -> Traffic {
        self.items[i as usize]
    }

    /// Adds `o` into `self` (the peak is summed: an upper bound across queues).
    pub fn add(&mut self, o: &NicCounters) {
        for (a, b) in self.items.iter_mut().zip(&o.items) {
            *a += *b;
        }
        self.host_bytes_read += o.host_bytes_read;
        self.host_bytes_written += o.host_bytes_written;
        self.host_data_read += o.host_data_read;
        self.host_data_written += o.host_data_written;
        self.dram_bytes += o.dram_bytes;
        self.nicmem_bytes_read += o.nicmem_bytes_read;
        self.nicmem_bytes_written += o.nicmem_bytes_written;
        self.nicmem_live_bytes += o.nicmem_live_bytes;
        self.nicmem_peak_bytes += o.nicmem_peak_bytes;
        self.wire_rx_frames += o.wire_rx_frames;
        self.wire_rx_bytes += o.wire_rx_bytes;
        self.wire_tx_frames += o.wire_tx_frames;
        self.wire_tx_bytes += o.wire_tx_bytes;
        self.rx_pcie_overrun += o.rx_pcie_overrun;
        self.doorbells += o.doorbells;
        self.rx_wqe_fetches += o.rx_wqe_fetches;
        self.rx_cqes += o.rx_cqes;
        self.tx_cqes += o.tx_cqes;
    }
}

/// A direct-mapped cache of charges by length (no allocation, O(1)).
struct LenCache {
    slots: [(u32, Traffic); 64],
}

impl LenCache {
    fn new() -> Self {
        Self {
            slots: [(u32::MAX, Traffic::ZERO); 64],
        }
    }

    #[inline]
    fn get(&mut self, n: u32, f: impl FnOnce(u32) -> Traffic) -> Traffic {
        let s = &mut self.slots[(n ^ (n >> 6)) as usize & 63];
        if s.0 != n {
            *s = (n, f(n));
        }
        s.1
    }
}

/// Precomputed and cached charges of one profile and mode.
struct Costs {
    op: OpCosts,
    writes: LenCache,
    reads: LenCache,
    wqe_reads: LenCache,
    cqe: Traffic,
    cqe_size: u64,
    mini_per_slot: Option<u32>,
    doorbell: Traffic,
    rx_fetch_full: Traffic,
    rx_batch: u32,
    rx_wqe_size: u32,
    wqebb: u32,
    blueflame: bool,
    wire_overhead: u64,
}

/// Live counters a queue publishes every few bursts (for the live stats line).
#[derive(Debug, Default)]
pub struct LiveModel {
    /// PCIe bytes up so far.
    pub up_bytes: AtomicU64,
    /// PCIe bytes down so far.
    pub down_bytes: AtomicU64,
    /// Busy time booked on PCIe up, ps (timed runs).
    pub up_busy_ps: AtomicU64,
    /// Busy time booked on PCIe down, ps (timed runs).
    pub down_busy_ps: AtomicU64,
    /// The queue's clock, ps (timed runs).
    pub now_ps: AtomicU64,
}

/// Exact latency extremes and sum beside a histogram, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyExact {
    /// Samples.
    pub count: u64,
    /// Smallest sample (0 without samples).
    pub min_ns: u64,
    /// Largest sample.
    pub max_ns: u64,
    /// Sum of all samples.
    pub sum_ns: u128,
}

impl LatencyExact {
    /// Adds one sample.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.min_ns = if self.count == 0 {
            ns
        } else {
            self.min_ns.min(ns)
        };
        self.max_ns = self.max_ns.max(ns);
        self.sum_ns += u128::from(ns);
        self.count += 1;
    }

    /// Adds another set of samples.
    pub fn merge(&mut self, o: &LatencyExact) {
        if o.count == 0 {
            return;
        }
        self.min_ns = if self.count == 0 {
            o.min_ns
        } else {
            self.min_ns.min(o.min_ns)
        };
        self.max_ns = self.max_ns.max(o.max_ns);
        self.sum_ns += o.sum_ns;
        self.count += o.count;
    }

    /// The exact mean, `None` without samples.
    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64)
    }
}

/// What a timed queue reports at the end.
#[derive(Clone, Debug)]
pub struct TimedReport {
    /// Virtual (true) or wall clock.
    pub virtual_clock: bool,
    /// Time of the first arrival, ps.
    pub start_ps: Ps,
    /// Time of the last event (CPU, completion or departure), ps.
    pub end_ps: Ps,
    /// Busy time per resource in [`ResourceKind::ALL`] order, ps.
    pub busy_ps: [f64; 7],
    /// CPU load (virtual clock only): per-packet work plus doorbells amortised over full bursts,
    /// ps (see the module docs).
    pub cpu_busy_ps: Ps,
    /// Wire-to-wire latency of every forwarded packet, ns.
    pub latency_ns: Histogram<u64>,
    /// Exact smallest, largest and summed latency, ns (the histogram rounds to 3 digits; reports
    /// need exact extremes and a mean that lies between them).
    pub latency_exact: LatencyExact,
    /// Reads that waited for a free tag.
    pub read_stalls: u64,
    /// The last DDIO hit fraction.
    pub ddio_hit: f64,
    /// The last loaded DRAM latency, ns (the memory-contention model of the module docs).
    pub dram_latency_ns: f64,
    /// This queue's share of the offered load, Gb/s (`None`: pulled).
    pub offered_gbps: Option<f64>,
    /// Usable capacity of the port's whole PCIe link per direction, bits/s (not this queue's
    /// share): the port's PCIe utilisation is its bytes against it ([`PortModel::summarize`]).
    pub link_bps: f64,
}

/// What a queue reports when it is dropped.
#[derive(Clone, Debug)]
pub struct QueueModelReport {
    /// Accounting counters.
    pub counters: NicCounters,
    /// Timing results, for timed queues.
    pub timed: Option<TimedReport>,
}

/// Where a port's queues deposit their final reports and live counters.
#[derive(Debug, Default)]
pub struct ModelSink {
    /// One slot per queue, filled when the queue is dropped.
    pub reports: Mutex<Vec<Option<QueueModelReport>>>,
    /// One live record per queue.
    pub live: Vec<LiveModel>,
}

impl ModelSink {
    /// A sink for `queues` queues.
    pub fn new(queues: usize) -> Self {
        Self {
            reports: Mutex::new(vec![None; queues]),
            live: (0..queues).map(|_| LiveModel::default()).collect(),
        }
    }
}

/// A port-level summary of the queues' reports.
#[derive(Clone, Debug)]
pub struct PortModel {
    /// Counters summed over the queues.
    pub counters: NicCounters,
    /// Whether the queues were timed.
    pub timed: bool,
    /// Whether the clock was virtual.
    pub virtual_clock: bool,
    /// Model time from the first arrival to the last event, ps (0 when untimed).
    pub interval_ps: Ps,
    /// Utilisation per resource (PCIe up/down, wire Rx/Tx, DMA engine, nicmem, host memory,
    /// and `cpu` in virtual mode), 0..1 (above 1 = a backlog was booked).
    pub utilization: Vec<(&'static str, f64)>,
    /// The saturated resource, or `"none"` (see [`PortModel::summarize`]).
    pub bottleneck: &'static str,
    /// Latency histogram of all queues, ns.
    pub latency_ns: Option<Histogram<u64>>,
    /// Exact latency extremes and sum of all queues.
    pub latency_exact: LatencyExact,
    /// Outstanding-read stalls.
    pub read_stalls: u64,
    /// Mean DDIO hit fraction over the queues.
    pub ddio_hit: f64,
    /// Mean loaded DRAM latency over the queues at the end of the run, ns (timed runs).
    pub dram_latency_ns: f64,
    /// Offered load in Gb/s (`None`: pulled).
    pub offered_gbps: Option<f64>,
}

/// Utilisation from which a resource counts as saturated.
pub const SATURATED: f64 = 0.95;

impl PortModel {
    /// Sums queue reports. Utilisation is busy time over the common interval, averaged over the
    /// queues (each queue owns a 1/queues share of every resource), except for the PCIe link:
    /// its utilisation per direction is the port's bytes against the whole link's capacity over
    /// the interval. The two agree while every queue's share is in proportion to its traffic;
    /// on a mixed port (`vnic.nicmem_queues`) a nicmem queue holds a round-robin turn it mostly
    /// leaves idle, and the mean of the queues' use of their own shares understated the link
    /// (67.9 % against 77.7 % in the paper's Fig. 13 setup at one nicmem queue of seven). The
    /// bottleneck is the most utilised saturated (>= [`SATURATED`]) internal resource (PCIe, DMA
    /// engine, nicmem, host memory, CPU); if none is saturated, `wire_tx` when the transmit wire
    /// is; else `none`. Wire Rx is the offered load, not a bottleneck, and an internal resource
    /// with no headroom is named even when the wire is also full (the paper's
    /// "PCIe out 99.8 %").
    pub fn summarize(reports: &[QueueModelReport]) -> Self {
        let mut counters = NicCounters::default();
        for r in reports {
            counters.add(&r.counters);
        }
        let timed: Vec<&TimedReport> = reports.iter().filter_map(|r| r.timed.as_ref()).collect();
        let mut out = PortModel {
            counters,
            timed: !timed.is_empty(),
            virtual_clock: timed.first().is_some_and(|t| t.virtual_clock),
            interval_ps: 0,
            utilization: Vec::new(),
            bottleneck: "none",
            latency_ns: None,
            latency_exact: LatencyExact::default(),
            read_stalls: timed.iter().map(|t| t.read_stalls).sum(),
            ddio_hit: 1.0,
            dram_latency_ns: 0.0,
            offered_gbps: None,
        };
        if timed.is_empty() {
            return out;
        }
        let start = timed.iter().map(|t| t.start_ps).min().unwrap_or(0);
        let end = timed.iter().map(|t| t.end_ps).max().unwrap_or(0);
        let dt = end.saturating_sub(start);
        out.interval_ps = dt;
        let n = timed.len() as f64;
        let denom = dt as f64 * n;
        let link_bps = timed[0].link_bps;
        let pcie = out.counters.pcie();
        for (i, k) in ResourceKind::ALL.iter().enumerate() {
            let link_bytes = match k {
                ResourceKind::PcieUp => Some(pcie.up_bytes),
                ResourceKind::PcieDown => Some(pcie.down_bytes),
                _ => None,
            };
            let u = match link_bytes {
                Some(b) => link_utilization(b, link_bps, dt),
                None => {
                    let busy: f64 = timed.iter().map(|t| t.busy_ps[i]).sum();
                    if denom > 0.0 { busy / denom } else { 0.0 }
                }
            };
            out.utilization.push((k.as_str(), u));
        }
        if out.virtual_clock {
            let busy: f64 = timed.iter().map(|t| t.cpu_busy_ps as f64).sum();
            out.utilization
                .push(("cpu", if denom > 0.0 { busy / denom } else { 0.0 }));
        }
        let internal: Vec<(&'static str, f64)> = out
            .utilization
            .iter()
            .copied()
            .filter(|(k, _)| !k.starts_with("wire"))
            .collect();
        out.bottleneck = pick_bottleneck(&internal, SATURATED)
            .or_else(|| {
                let wire: Vec<_> = out
                    .utilization
                    .iter()
                    .copied()
                    .filter(|(k, _)| *k == "wire_tx")
                    .collect();
                pick_bottleneck(&wire, SATURATED)
            })
            .unwrap_or("none");
        let mut hist: Option<Histogram<u64>> = None;
        for t in &timed {
            match &mut hist {
                None => hist = Some(t.latency_ns.clone()),
                Some(h) => {
                    let _ = h.add(&t.latency_ns);
                }
            }
        }
        out.latency_ns = hist;
        for t in &timed {
            out.latency_exact.merge(&t.latency_exact);
        }
        out.ddio_hit = timed.iter().map(|t| t.ddio_hit).sum::<f64>() / n;
        out.dram_latency_ns = timed.iter().map(|t| t.dram_latency_ns).sum::<f64>() / n;
        out.offered_gbps = timed.iter().map(|t| t.offered_gbps).sum::<Option<f64>>();
        out
    }

    /// Latency at quantile `q` (0..=1; 0 = the exact minimum, 1 = the exact maximum) in ns,
    /// `None` without samples. Quantiles in between come from the histogram, clamped to the
    /// exact extremes, so they never contradict them.
    pub fn latency_quantile(&self, q: f64) -> Option<u64> {
        let h = self.latency_ns.as_ref().filter(|h| !h.is_empty())?;
        let e = &self.latency_exact;
        Some(if q >= 1.0 {
            e.max_ns
        } else if q <= 0.0 {
            e.min_ns
        } else {
            h.value_at_quantile(q).clamp(e.min_ns, e.max_ns)
        })
    }

    /// Exact mean latency in ns, `None` without samples.
    pub fn latency_mean(&self) -> Option<f64> {
        self.latency_exact.mean_ns()
    }

    /// Latency samples recorded.
    pub fn latency_count(&self) -> u64 {
        self.latency_ns.as_ref().map_or(0, |h| h.len())
    }

    /// Utilisation of the resource called `name` (0 when absent).
    pub fn util(&self, name: &str) -> f64 {
        self.utilization
            .iter()
            .find(|(k, _)| *k == name)
            .map_or(0.0, |(_, u)| *u)
    }
}

/// 1 when a DMA write of `n` bytes from a line-aligned start ends inside a cache line (a
/// partial last line), else 0.
#[inline]
fn partial_line(n: u32) -> u64 {
    u64::from(!u64::from(n).is_multiple_of(CACHE_LINE))
}

/// Utilisation of a link of `link_bps` bits/s that moved `bytes` in `interval_ps`: 0 without
/// time or capacity.
fn link_utilization(bytes: u64, link_bps: f64, interval_ps: Ps) -> f64 {
    let secs = interval_ps as f64 * 1e-12;
    if secs > 0.0 && link_bps > 0.0 {
        bytes as f64 * 8.0 / (link_bps * secs)
    } else {
        0.0
    }
}

/// Model time over which a queue measures its DRAM utilisation (20 µs: a few dozen packets of a
/// queue at line rate, short against a trial).
const DRAM_WINDOW_PS: Ps = 20_000_000;

/// Nanoseconds of latency a queue counts per value before adding them to its histogram (see
/// `Timing::lat_counts`).
const LAT_WINDOW: usize = 4096;

/// Samples outside the latency window, beyond those inside it, after which the window moves.
const LAT_MOVE_AFTER: u64 = 64;

/// Bytes one DRAM access moves (a cache line).
const CACHE_LINE: u64 = 64;

/// The memory system as one queue's packets meet it (see the module docs): DRAM utilisation
/// measured on the queue's share of the DRAM timeline over windows of [`DRAM_WINDOW_PS`]
/// (smoothed), the loaded DRAM latency that utilisation implies (the profile's
/// `host.dram_loaded_latency`), and what a packet pays for it.
///
/// In virtual time each packet costs, beyond its fixed cycles, its NFs' DRAM reads at the loaded
/// latency (`nf_reads × L` cycles). The header lines DDIO lost and the lines of per-packet state
/// the packet data in the LLC evicted ([`DdioModel::core_hit`]) cost a DRAM access instead of the
/// LLC hit the fixed cycles assume, charged per burst ([`MemoryContention::burst_stall`]): each is
/// touched in one loop over the burst, so their misses overlap up to the core's fill buffers. A
/// Tx DMA read that misses pays the idle DMA-read adder plus the rise of the loaded latency over
/// idle.
///
/// DRAM time: a written byte holds DRAM as long as `write_cost` read bytes
/// ([`crate::pcie_model::dram::write_cost`]), so the bytes booked on the DRAM timeline are reads
/// plus weighted writes.
struct MemoryContention {
    curve: LoadedLatency,
    /// Core clock, cycles per ns.
    ghz: f64,
    llc_cycles: f64,
    header_lines: f64,
    /// The fraction of the DRAM timeline's peak bandwidth DRAM sustains: the curve is read at
    /// the utilisation over it (`host.dram_sustained_fraction`).
    sustained: f64,
    /// Misses a core keeps in flight (`host.cycles.fill_buffers`).
    fill_buffers: f64,
    /// Header lines per packet DDIO lost (at the current miss fraction).
    lost_headers: f64,
    /// Metadata lines per packet the packet data in the LLC evicted.
    lost_meta: f64,
    /// Cycles one round of overlapped header misses stalls the core: a DRAM access over the LLC
    /// hit the fixed cycles assume.
    round_cycles: f64,
    meta_lines: f64,
    nf_reads: f64,
    /// DRAM time of a written byte in thousandths of a read byte's.
    write_milli: u64,
    /// DRAM bytes the NFs move per packet, their reads and the write-backs of the lines they
    /// dirty, as the sequential read bytes that hold DRAM as long (random lines:
    /// `host.dram_random_fraction`; written bytes: `write_cost`).
    nf_dram_bytes: u64,
    /// DMA-read adder on an LLC miss at an idle memory system, ns.
    idle_adder_ns: f64,
    win_start: Ps,
    win_busy: f64,
    /// Smoothed DRAM utilisation (None before the first window ends).
    util: Option<f64>,
    /// Loaded DRAM latency now, ns.
    latency_ns: f64,
    /// The variable cycles per packet, in thousandths of a cycle.
    var_milli: u64,
    /// Thousandths of a cycle not charged yet.
    milli_acc: u64,
    /// DMA-read adder of a Tx read that misses the LLC, ps.
    miss_adder_ps: Ps,
    /// The miss fractions of the last [`MemoryContention::price`]: the prices depend only on
    /// them and on `latency_ns`, so an update that changes neither keeps them.
    priced: (u64, u64),
}

impl MemoryContention {
    fn new(
        prof: &HardwareProfile,
        nf_dram_reads: u32,
        nf_dram_writes: u32,
    ) -> Result<Self, String> {
        let h = &prof.host;
        let curve = LoadedLatency::new(&h.dram_loaded_latency)
            .map_err(|e| format!("host.dram_loaded_latency: {e}"))?;
        let write_cost = write_cost(&h.dram_read_write_bandwidth)
            .map_err(|e| format!("host.dram_read_write_bandwidth: {e}"))?;
        // The L2 spatial prefetcher completes each random line read to its 128 B pair: one more
        // line per read from the same DRAM row, moved at the sequential rate.
        let pair_lines = if h.adjacent_line_prefetch { 1.0 } else { 0.0 };
        let mut m = Self {
            latency_ns: curve.idle_ns(),
            curve,
            ghz: h.cpu_ghz,
            llc_cycles: f64::from(h.cycles.llc_access),
            header_lines: f64::from(h.cycles.header_lines),
            sustained: h.dram_sustained_fraction,
            fill_buffers: f64::from(h.cycles.fill_buffers.max(1)),
            lost_headers: 0.0,
            lost_meta: 0.0,
            round_cycles: 0.0,
            meta_lines: f64::from(h.cycles.meta_lines),
            nf_reads: f64::from(nf_dram_reads),
            write_milli: (write_cost * 1000.0).round() as u64,
            nf_dram_bytes: ((f64::from(nf_dram_reads) + f64::from(nf_dram_writes) * write_cost)
                * CACHE_LINE as f64
                / h.dram_random_fraction
                + pair_lines * f64::from(nf_dram_reads) * CACHE_LINE as f64)
                .round() as u64,
            idle_adder_ns: h.dram_latency_adder_ns as f64,
            win_start: 0,
            win_busy: 0.0,
            util: None,
            var_milli: 0,
            milli_acc: 0,
            miss_adder_ps: 0,
            priced: (0, 0),
        };
        m.price(0, 0);
        Ok(m)
    }

    /// At `now`, with `busy` ps booked on the DRAM timeline so far, a DDIO miss fraction of
    /// `miss_ppm` per million and `meta_miss_ppm` per million of the cores' LLC-resident state
    /// evicted: closes the utilisation window if it is over, then prices a packet.
    fn update(&mut self, now: Ps, busy: f64, miss_ppm: u64, meta_miss_ppm: u64) {
        let span = now.saturating_sub(self.win_start);
        if span >= DRAM_WINDOW_PS {
            let u = (busy - self.win_busy).max(0.0) / span as f64;
            let u = self.util.map_or(u, |old| 0.5 * old + 0.5 * u);
            self.util = Some(u);
            self.latency_ns = self.curve.latency_ns(u / self.sustained);
            self.win_start = now;
            self.win_busy = busy;
        } else if self.priced == (miss_ppm, meta_miss_ppm) {
            return;
        }
        self.price(miss_ppm, meta_miss_ppm);
    }

    fn price(&mut self, miss_ppm: u64, meta_miss_ppm: u64) {
        self.priced = (miss_ppm, meta_miss_ppm);
        let l = self.latency_ns * self.ghz;
        self.round_cycles = (l - self.llc_cycles).max(0.0);
        self.lost_headers = self.header_lines * miss_ppm as f64 / 1e6;
        self.lost_meta = self.meta_lines * meta_miss_ppm as f64 / 1e6;
        self.var_milli = (self.nf_reads * l * 1000.0).round() as u64;
        let adder_ns = self.idle_adder_ns + (self.latency_ns - self.curve.idle_ns()).max(0.0);
        self.miss_adder_ps = (adder_ns * PS_PER_NS as f64).round() as Ps;
    }

    /// Thousandths of a cycle a burst of `n` packets stalls on the header lines DDIO lost and on
    /// the metadata lines the packet data evicted. Each set is touched in one loop over the
    /// burst (the headers prefetched together as the burst becomes a batch; the `rte_mbuf`
    /// fields written in the driver's Rx loop and read in its Tx free loop, independent accesses
    /// the out-of-order core issues together), so up to `fill_buffers` misses are in flight at
    /// once and the core waits one DRAM access per round of them ([`Self::rounds`]).
    #[inline]
    fn burst_stall(&self, n: u64) -> u64 {
        if self.lost_headers == 0.0 && self.lost_meta == 0.0 {
            // Nothing lost (DDIO keeps every line): no round to wait for.
            return 0;
        }
        let n = n as f64;
        let rounds = self.rounds(self.lost_headers * n) + self.rounds(self.lost_meta * n);
        (rounds * self.round_cycles * 1000.0).round() as u64
    }

    /// Rounds of DRAM accesses `lost` expected misses of one loop cost: `lost / fill_buffers`,
    /// but at least one once a line is lost, and below one expected line the chance that one is
    /// (a lone miss overlaps with nothing).
    #[inline]
    fn rounds(&self, lost: f64) -> f64 {
        if lost <= 1.0 {
            lost
        } else {
            (lost / self.fill_buffers).max(1.0)
        }
    }
}

/// The port's queues as the LLC sees them: `same` queues run this queue's mode, `other` queues
/// run `other_mode` (a nicmem port's queues past `vnic.nicmem_queues` run `split`).
#[derive(Clone, Copy, Debug)]
struct DdioPeers {
    same: u64,
    other: u64,
    other_mode: DatapathMode,
    split_offset: u64,
    /// Host bytes one Rx completion occupies (a CQE, or its share of a compressed slot).
    cqe_bytes: u64,
}

impl DdioPeers {
    /// Bytes DMA writes leave in the LLC per entry, summed over the port's queues: this queue's
    /// packets holding `host` bytes each, all packets being `len` bytes long, and each entry's
    /// completion (written through DDIO like the data).
    fn port_bytes(&self, host: u64, len: u64) -> u64 {
        host * self.same
            + self.other * host_bytes_per_packet(self.other_mode, len, self.split_offset)
            + (self.same + self.other) * self.cqe_bytes
    }
}

/// The timing state of one queue (see the module docs).
pub(crate) struct Timing {
    virtual_clock: bool,
    epoch: Instant,
    tl: Timelines,
    line: Cost,
    pace: Option<Cost>,
    offered_gbps: Option<f64>,
    up: Cost,
    /// Usable capacity of the port's whole PCIe link per direction, bits/s.
    link_bps: f64,
    cycle: Cost,
    pkt_cycles: u64,
    doorbell_cycles: u64,
    /// The memory system: loaded DRAM latency and what each packet pays for it.
    mem: MemoryContention,
    /// Packets a full burst amortises a doorbell over (the profile's `tx_burst`).
    burst_cycles_div: u64,
    /// The CPU's clock, ps.
    now: Ps,
    cpu_busy: Ps,
    next_slot: Ps,
    /// Wall clock only: the latest time the queue looked for a frame and found none. A frame
    /// seen later cannot have arrived before it, so its paced slot starts no earlier.
    starved_at: Option<Ps>,
    rx_buffer: u64,
    /// Time PCIe upstream needs to drain a full receive buffer.
    rx_buffer_drain: Ps,
    posted_latency: Ps,
    first: Option<Ps>,
    last: Ps,
    hist: Histogram<u64>,
    lat_exact: LatencyExact,
    /// Latency samples not yet in `hist`, counted per nanosecond in a window of
    /// [`LAT_WINDOW`] ns from `lat_base`: one increment per packet instead of a histogram
    /// record; the counts join `hist` when the window moves or the queue reports (a histogram
    /// is the same whatever order its samples came in). Samples outside the window go to `hist`
    /// directly; when they outnumber the window's (`lat_hits`, `lat_misses`), the window moves
    /// to centre on the latest sample (latency settles after the first packets).
    lat_counts: Box<[u64]>,
    lat_base: u64,
    lat_hits: u64,
    lat_misses: u64,
    /// Rx completions written into the partly filled compressed slot, as the timelines book
    /// them (the accounting's own count is `NicModel::rx_mini`; both count every completion).
    cqe_mini: u32,
    ddio: DdioModel,
    /// The port's queues sharing the LLC: how many run this queue's mode, how many the other
    /// (with `vnic.nicmem_queues` a nicmem port's last queues run `split`), and the other mode.
    ddio_peers: DdioPeers,
    /// Host bytes one Rx completion occupies ([`DdioPeers`]).
    cqe_bytes: u64,
    /// The port's cores' LLC-resident state: `host.cycles.meta_lines` per Rx and Tx ring entry
    /// of every queue, bytes ([`DdioModel::core_hit`]).
    core_bytes: u64,
    miss_ppm: u64,
    /// Per million of the cores' LLC-resident lines the packet data in the LLC evicted.
    meta_miss_ppm: u64,
    /// The packet bytes in flight `miss_ppm` and `meta_miss_ppm` were last worked out for
    /// ([`Timing::ddio_update`]).
    ddio_inflight: Option<u64>,
    /// The up and down link steps of a full batch's header-ring WQE fetch, once worked out
    /// ([`NicModel::rx_book_whole`]).
    rx_fetch_full: Option<(Step, Step)>,
    /// The receive pass's transfers of the last frame length it booked.
    rx_steps: RxSteps,
    dram_acc: u64,
    /// Bytes of a packet's header the NFs rewrite (`host.cycles.header_writes` lines): after the
    /// core read a lost header back from DRAM and rewrote it, the line is written back again.
    rewrite_bytes: u64,
    /// Millionths of a thousandth of a read byte's DRAM time not booked yet (`dram_acc` weighted
    /// by the write cost).
    dram_book_acc: u64,
    /// Per Rx CQ slot: when the CQE is visible to the CPU, and when its frame arrived.
    cq_slots: Box<[(Ps, Ps)]>,
    cq_mask: u32,
    /// Tx WQEs in flight in model time: (departure, WQEBBs), FIFO (a power-of-two ring).
    inflight: Box<[(Ps, u32)]>,
    if_head: usize,
    if_len: usize,
    inflight_bbs: u32,
    /// Common sends queued by [`NicModel::tx_send`], booked together.
    sends: SendRun,
    /// The frames of a whole-frame receive pass whose descriptors were refused, in order
    /// ([`NicModel::rx_refused_in_pass`]).
    rx_refused: Box<[u16]>,
    rx_nrefused: usize,
}

/// Sends a timed queue has queued but not booked yet ([`NicModel::tx_send`]): a run of WQEs at
/// the NIC at the same time whose frames have the same length, host data segments, nicmem
/// bytes and WQEBBs, so the same transfers and wire time; only their arrivals differ.
struct SendRun {
    ready: Ps,
    len: u32,
    host: [u32; 2],
    nic: u32,
    nbb: u32,
    n: usize,
    /// Arrival of each queued send's frame, ns.
    arrival_ns: [u64; SEND_RUN],
    /// The transfers of the last run's shape of send, kept for the next run of that shape.
    steps: SendSteps,
}

/// The work a send of one shape (frame length, host data segments, nicmem bytes) puts on each
/// resource, as [`Step`]s: worked out once per shape rather than per run of sends (the costs
/// of the resources and of the transfers never change).
#[derive(Clone, Copy, Default)]
struct SendSteps {
    /// The shape: frame length, host data segments (0: none), nicmem bytes; `None` before the
    /// first run.
    shape: Option<(u32, [u32; 2], u32)>,
    /// Each host data read's request (up) and completion (down) bytes, the first `nseg`.
    segs: [(Step, Step); 2],
    nseg: usize,
    /// A read's DMA-engine op.
    eng: Step,
    /// The nicmem read.
    nic: Step,
    /// The frame on the wire.
    wire: Step,
}

impl SendSteps {
    fn new(tl: &Timelines, k: &mut Costs, len: u32, host: [u32; 2], nic: u32) -> Self {
        let op = &k.op;
        let (up, down) = (tl.get(ResourceKind::PcieUp), tl.get(ResourceKind::PcieDown));
        let mut segs = [(Step::default(), Step::default()); 2];
        let mut nseg = 0;
        for h in host.into_iter().filter(|&h| h > 0) {
            let tr = k.reads.get(h, |n| op.tx_data_read(n));
            segs[nseg] = (up.step(tr.up_bytes), down.step(tr.down_bytes));
            nseg += 1;
        }
        SendSteps {
            shape: Some((len, host, nic)),
            segs,
            nseg,
            eng: tl.get(ResourceKind::DmaEngine).step(tl.dma_read_ps()),
            nic: tl.get(ResourceKind::Nicmem).step(u64::from(nic)),
            wire: tl
                .get(ResourceKind::WireTx)
                .step(u64::from(len) + k.wire_overhead),
        }
    }
}

/// The most sends [`SendRun`] queues before it books them.
const SEND_RUN: usize = 64;

/// The transfers [`NicModel::rx_book_whole`] books for a frame of `len` bytes received whole,
/// split into steps of their resources: the frame on the wire, its data write and its
/// completion write on the up link (and both together), and the DMA engine's write and read
/// ops. A queue's costs do not change, so the steps of the last length serve the next pass.
#[derive(Clone, Copy, Debug)]
struct RxSteps {
    /// The frame length ([`RxSteps::NONE`]'s `u32::MAX`: none yet).
    len: u32,
    wire: Step,
    data: Step,
    cqe: Step,
    both: Step,
    eng_w: Step,
    eng_r: Step,
}

impl RxSteps {
    /// No steps yet (no frame is `u32::MAX` bytes long).
    const NONE: RxSteps = RxSteps {
        len: u32::MAX,
        wire: Step::ZERO,
        data: Step::ZERO,
        cqe: Step::ZERO,
        both: Step::ZERO,
        eng_w: Step::ZERO,
        eng_r: Step::ZERO,
    };

    fn new(tl: &Timelines, k: &mut Costs, len: u32) -> Self {
        let (op, writes) = (&k.op, &mut k.writes);
        let data = writes.get(len, |n| op.rx_data_write(n)).up_bytes;
        let (up, eng) = (
            tl.get(ResourceKind::PcieUp),
            tl.get(ResourceKind::DmaEngine),
        );
        RxSteps {
            len,
            wire: tl
                .get(ResourceKind::WireRx)
                .step(u64::from(len) + k.wire_overhead),
            data: up.step(data),
            cqe: up.step(k.cqe.up_bytes),
            both: up.step(data + k.cqe.up_bytes),
            eng_w: eng.step(tl.dma_write_ps()),
            eng_r: eng.step(tl.dma_read_ps()),
        }
    }
}

impl Timing {
    /// The DRAM traffic of a received packet (`hl` header and `host_payload` payload bytes in
    /// host memory) in the share DDIO lost (`miss_ppm`), booked at `at` and counted in
    /// `dram_bytes`: the write-back and re-read of the packet's host bytes and of its
    /// completion, the DRAM read of each partial last line the DMA write merges into (its
    /// buffer's line is no longer in the LLC), and the second write-back of the header line the
    /// NF rewrote after reading it back. The DRAM timeline books the written bytes at their DRAM
    /// time in read bytes (`write_milli`). One copy for the frame-by-frame receive and the
    /// whole-frame pass, so both book the same bytes.
    #[inline(always)]
    fn book_lost_packet(&mut self, dram_bytes: &mut u64, at: Ps, hl: u32, host_payload: u32) {
        if self.miss_ppm == 0 {
            return;
        }
        let host = u64::from(hl) + u64::from(host_payload);
        let rmw = CACHE_LINE * (partial_line(hl) + partial_line(host_payload));
        let read = host + self.cqe_bytes + rmw;
        let written = host + self.cqe_bytes + self.rewrite_bytes.min(u64::from(hl));
        self.dram_acc += (read + written) * self.miss_ppm;
        *dram_bytes += self.dram_acc / 1_000_000;
        self.dram_acc %= 1_000_000;
        self.dram_book_acc += (read * 1000 + written * self.mem.write_milli) * self.miss_ppm;
        let booked = self.dram_book_acc / 1_000_000_000;
        self.dram_book_acc %= 1_000_000_000;
        if booked > 0 {
            self.tl.get_mut(ResourceKind::Hostmem).reserve(at, booked);
        }
    }

    /// True for the virtual clock.
    #[inline]
    pub(crate) fn is_virtual(&self) -> bool {
        self.virtual_clock
    }

    /// True when arrivals are paced by an offered rate.
    #[inline]
    pub(crate) fn paced(&self) -> bool {
        self.pace.is_some()
    }

    /// The CPU's clock (wall mode: sampled now).
    #[inline]
    pub(crate) fn sync(&mut self) -> Ps {
        if !self.virtual_clock {
            let t = self.epoch.elapsed().as_nanos() as u64 * PS_PER_NS;
            self.now = self.now.max(t);
        }
        self.now
    }

    /// The CPU's clock without sampling.
    #[inline]
    pub(crate) fn now(&self) -> Ps {
        self.now
    }

    /// Virtual mode: the CPU idles until `t`.
    #[inline]
    pub(crate) fn idle_until(&mut self, t: Ps) {
        if self.virtual_clock && t > self.now {
            self.now = t;
        }
    }

    /// Virtual mode: the CPU spent `n` packets' worth of cycles. The load counted is the
    /// per-packet work plus the doorbell amortised over a full burst: what the core needs per
    /// packet once saturated (when bursts are full), so 100 % means saturated; at low load the
    /// core rings a doorbell per small burst, which takes time but is not load.
    ///
    /// Beside the fixed per-packet cycles each packet pays the memory system: its NFs' DRAM reads
    /// and the burst's stall on the header lines DDIO lost (overlapped up to the fill buffers,
    /// [`MemoryContention::burst_stall`]), both at the current loaded DRAM latency
    /// ([`MemoryContention`]); the NFs' reads are booked on the DRAM timeline. `n` is one burst.
    #[inline]
    pub(crate) fn cpu_packets(&mut self, n: u64) {
        if self.virtual_clock && n > 0 {
            let m = &mut self.mem;
            let var = n * m.var_milli + m.burst_stall(n) + m.milli_acc;
            m.milli_acc = var % 1000;
            let cycles = n * self.pkt_cycles + var / 1000;
            if m.nf_dram_bytes > 0 {
                self.tl
                    .get_mut(ResourceKind::Hostmem)
                    .reserve(self.now, n * m.nf_dram_bytes);
            }
            self.now += self.cycle.time_ps(cycles);
            self.cpu_busy += self
                .cycle
                .time_ps(cycles + n * self.doorbell_cycles / self.burst_cycles_div);
        }
    }

    /// The end of the next paced arrival slot for a frame of `len` bytes (without FCS), and the
    /// slot start that follows it; `None` when unpaced.
    #[inline]
    pub(crate) fn paced_arrival(&self, len: usize, wire_overhead: u64) -> Option<(Ps, Ps)> {
        let pace = self.pace?;
        let bytes = len as u64 + wire_overhead;
        let start = self
            .next_slot
            .max(self.tl.get(ResourceKind::WireRx).free_at());
        Some((
            start + self.line.time_ps(bytes),
            self.next_slot + pace.time_ps(bytes),
        ))
    }

    /// Wall clock: the queue had no frame at `now`. On a multi-queue port the front-end thread
    /// can fall behind (the simulation's own CPU contention); the frames it hands over late
    /// then start their paced slots when they became available, not in the past. Without this a
    /// front-end stall left the paced clock behind for the rest of the run, and every later frame
    /// met the PCIe backlog of Tx work booked at the current time (`pcie_overrun`). Virtual time
    /// ignores it: its arrivals must not depend on thread timing.
    #[inline]
    pub(crate) fn starved(&mut self, now: Ps) {
        if !self.virtual_clock {
            self.starved_at = Some(now);
        }
    }

    /// A frame is about to be taken: moves the paced clock past the last starvation (see
    /// [`Timing::starved`]).
    #[inline]
    pub(crate) fn frame_available(&mut self) {
        if let Some(s) = self.starved_at.take() {
            self.next_slot = self.next_slot.max(s);
        }
    }

    /// Books a frame's wire Rx slot starting no earlier than `ready` (unpaced) or at its paced
    /// slot; returns the arrival time (end of the frame on the wire).
    #[inline]
    pub(crate) fn arrive(&mut self, ready: Ps, len: usize, wire_overhead: u64) -> Ps {
        let bytes = len as u64 + wire_overhead;
        let at = match self.pace {
            Some(p) => {
                let s = self.next_slot;
                self.next_slot += p.time_ps(bytes);
                s
            }
            None => {
                // Flow control: the sender waits while the receive buffer is too full.
                let drain = self.rx_buffer_drain;
                ready.max(
                    self.tl
                        .get(ResourceKind::PcieUp)
                        .free_at()
                        .saturating_sub(drain),
                )
            }
        };
        let r = self.tl.get_mut(ResourceKind::WireRx).reserve(at, bytes);
        if self.first.is_none() {
            self.first = Some(r.end);
        }
        r.end
    }

    /// True when a frame needing `up_bytes` upstream would overflow the receive buffer at `at`.
    #[inline]
    pub(crate) fn overrun(&self, at: Ps, up_bytes: u64) -> bool {
        let free = self.tl.get(ResourceKind::PcieUp).free_at();
        if free <= at {
            return up_bytes > self.rx_buffer;
        }
        // Backlog bytes = backlog time / time per byte.
        let backlog = self.up_bytes_in(free - at);
        backlog + up_bytes > self.rx_buffer
    }

    fn up_bytes_in(&self, ps: Ps) -> u64 {
        // time_ps(b) = ceil(b * num / den) → b ≈ ps * den / num; one probe gives the scale.
        let per_mb = self.up.time_ps(1 << 20).max(1);
        ((u128::from(ps) << 20) / u128::from(per_mb)) as u64
    }

    /// Records when Rx CQ slot `slot` becomes visible and when its frame arrived.
    #[inline]
    pub(crate) fn cq_set(&mut self, slot: u32, ready: Ps, arrival: Ps) {
        let i = (slot & self.cq_mask) as usize;
        self.cq_slots[i] = (ready, arrival);
        self.last = self.last.max(ready);
    }

    /// When Rx CQ slot `slot` becomes visible.
    #[inline]
    pub(crate) fn cq_ready(&self, slot: u32) -> Ps {
        self.cq_slots[(slot & self.cq_mask) as usize].0
    }

    /// Per Rx CQ slot, when it becomes visible and when its frame arrived, and the mask that
    /// maps a slot count to its index (the queue's polling reads them in a loop).
    #[inline]
    pub(crate) fn cq_slots(&self) -> (&[(Ps, Ps)], u32) {
        (&self.cq_slots, self.cq_mask)
    }

    /// WQEBBs free in the send queue in model time (WQEs whose frames have not left count); a
    /// paced queue's (an unpaced one records no WQEs in flight, see [`Timing::tx_inflight_push`]).
    #[inline]
    pub(crate) fn tx_room(&mut self, ring_bbs: u32) -> u32 {
        debug_assert!(
            self.paced(),
            "only a paced queue records its WQEs in flight"
        );
        let now = self.now;
        let mask = self.inflight.len() - 1;
        while self.if_len > 0 {
            let (dep, nbb) = self.inflight[self.if_head];
            if dep > now {
                break;
            }
            self.inflight_bbs -= nbb;
            self.if_head = (self.if_head + 1) & mask;
            self.if_len -= 1;
        }
        ring_bbs.saturating_sub(self.inflight_bbs)
    }

    /// [`Timing::tx_inflight_push`] of WQEs of `nbb` WQEBBs leaving at `deps`, in order.
    #[inline]
    fn tx_inflight_push_all(&mut self, deps: &[Ps], nbb: u32) {
        if self.pace.is_none() {
            return;
        }
        let cap = self.inflight.len();
        let mask = cap - 1;
        let (mut head, mut len, mut bbs) = (self.if_head, self.if_len, self.inflight_bbs);
        for &dep in deps {
            if len == cap {
                bbs -= self.inflight[head].1;
                head = (head + 1) & mask;
                len -= 1;
            }
            self.inflight[(head + len) & mask] = (dep, nbb);
            len += 1;
            bbs += nbb;
        }
        (self.if_head, self.if_len, self.inflight_bbs) = (head, len, bbs);
    }

    /// Records a WQE of `nbb` WQEBBs in flight until `dep`, for [`Timing::tx_room`]. Only a
    /// paced queue asks for room in model time (unpaced, flow control holds the sender), and
    /// whether a queue is paced is fixed when it is built: an unpaced queue keeps no record.
    #[inline]
    fn tx_inflight_push(&mut self, dep: Ps, nbb: u32) {
        if self.pace.is_none() {
            return;
        }
        let cap = self.inflight.len();
        let mask = cap - 1;
        if self.if_len == cap {
            // Cannot happen while posting respects `tx_room`; keep the oldest accounting sane.
            let (_, old) = self.inflight[self.if_head];
            self.inflight_bbs -= old;
            self.if_head = (self.if_head + 1) & mask;
            self.if_len -= 1;
        }
        let at = (self.if_head + self.if_len) & mask;
        self.inflight[at] = (dep, nbb);
        self.if_len += 1;
        self.inflight_bbs += nbb;
    }

    /// Updates the DDIO hit fraction from the entries holding host packet data (`entries` of
    /// this queue, each `host_bytes` of its packets of mean length `len`; the port's other
    /// queues are taken to hold as many entries, of their own mode's host bytes), then the
    /// memory system's state ([`MemoryContention::update`]).
    pub(crate) fn ddio_update(&mut self, entries: u64, host_bytes: u64, len: u64) {
        let w = entries * self.ddio_peers.port_bytes(host_bytes, len);
        if self.ddio_inflight != Some(w) {
            // The fractions depend only on the bytes in flight (the cores' state is fixed).
            self.ddio_inflight = Some(w);
            let p = self.ddio.p_hit(w);
            self.miss_ppm = ((1.0 - p) * 1e6).round() as u64;
            self.meta_miss_ppm =
                ((1.0 - self.ddio.core_hit(w, self.core_bytes)) * 1e6).round() as u64;
        }
        let busy = self.tl.get(ResourceKind::Hostmem).busy_ps();
        self.mem
            .update(self.now, busy, self.miss_ppm, self.meta_miss_ppm);
    }

    /// The DMA-read latency adder of a Tx data read at the current DDIO miss fraction and DRAM
    /// load, ps.
    #[inline]
    fn tx_read_adder_ps(&self) -> Ps {
        self.mem.miss_adder_ps * self.miss_ppm / 1_000_000
    }

    /// Records a packet's wire-to-wire latency (see `lat_counts`).
    #[inline]
    fn record_latency(&mut self, ns: u64) {
        self.lat_exact.record(ns);
        self.count_latency(ns);
    }

    /// [`Timing::record_latency`] without the exact extremes and sum (the caller merges them).
    #[inline(always)]
    fn count_latency(&mut self, ns: u64) {
        if let Some(c) = self
            .lat_counts
            .get_mut(ns.wrapping_sub(self.lat_base) as usize)
        {
            *c += 1;
            self.lat_hits += 1;
            return;
        }
        self.hist.saturating_record(ns);
        self.lat_misses += 1;
        if self.lat_misses > self.lat_hits + LAT_MOVE_AFTER {
            self.move_latency_window(ns);
        }
    }

    /// Adds the window's counts to the histogram and centres the window on `ns`.
    #[cold]
    fn move_latency_window(&mut self, ns: u64) {
        for (i, n) in self.lat_counts.iter_mut().enumerate() {
            if *n > 0 {
                self.hist
                    .saturating_record_n(self.lat_base + i as u64, std::mem::take(n));
            }
        }
        self.lat_base = ns.saturating_sub(LAT_WINDOW as u64 / 2);
        self.lat_hits = 0;
        self.lat_misses = 0;
    }

    fn report(&self) -> TimedReport {
        let mut busy = [0.0; 7];
        for (b, k) in busy.iter_mut().zip(ResourceKind::ALL) {
            *b = self.tl.get(k).busy_ps();
        }
        let mut end = self.last.max(self.now);
        for k in [
            ResourceKind::WireTx,
            ResourceKind::PcieUp,
            ResourceKind::PcieDown,
        ] {
            end = end.max(self.tl.get(k).free_at());
        }
        let mut hist = self.hist.clone();
        for (i, &n) in self.lat_counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            hist.saturating_record_n(self.lat_base + i as u64, n);
        }
        TimedReport {
            virtual_clock: self.virtual_clock,
            start_ps: self.first.unwrap_or(0),
            end_ps: end,
            busy_ps: busy,
            cpu_busy_ps: self.cpu_busy,
            latency_ns: hist,
            latency_exact: self.lat_exact,
            read_stalls: self.tl.reads().stalls(),
            ddio_hit: 1.0 - self.miss_ppm as f64 / 1e6,
            dram_latency_ns: self.mem.latency_ns,
            offered_gbps: self.offered_gbps,
            link_bps: self.link_bps,
        }
    }
}

/// A profile with one queue's share of every shared rate (see the module docs). Per-packet
/// resources go by packets, `1/q` each (RSS spreads packets evenly): the wire, the receive
/// buffer, the outstanding reads and the DMA engine's operation rates, which every mode uses
/// about equally per packet. Byte rates go by bytes, `frac` each: the PCIe link and DRAM. The
/// nicmem port is shared by the `nic_queues` queues that use it.
fn share(
    p: &HardwareProfile,
    q: u32,
    frac: f64,
    nic_queues: u32,
) -> Result<HardwareProfile, String> {
    if q <= 1 {
        return Ok(p.clone());
    }
    let f = f64::from(q);
    let mut s = p.clone();
    let eta = PcieLink::from_profile(&p.nic.pcie)?.efficiency();
    s.nic.pcie.efficiency = Efficiency::Fixed(eta * frac);
    s.nic.line_rate_gbps /= f;
    s.nic.pcie.max_outstanding_reads = (p.nic.pcie.max_outstanding_reads / q).max(1);
    s.nic.pcie.max_read_mops /= f;
    s.nic.pcie.max_write_mops /= f;
    s.nic.nicmem.bandwidth_gbps /= f64::from(nic_queues.max(1));
    s.host.dram_bandwidth_gbyte_s *= frac;
    s.nic.rx_buffer.0 /= u64::from(q);
    Ok(s)
}

/// This queue's fraction of the shared rates of a port of `q` queues of which the first
/// `nic_queues` run `port_mode` and the rest `split` (`vnic.nicmem_queues`): `1/q` when all run
/// one mode; otherwise in proportion to each mode's PCIe bytes per packet at `frame` bytes, so a
/// queue that moves ten times the bytes gets ten times the share, but never less than `1/q`: the
/// NIC serves its queues round robin, so a queue with work gets at least its turn of the link
/// however little it moves on average. With RSS spreading packets evenly this books each queue's
/// transfers at the rate a shared link would give them; a proportional share alone left a nicmem
/// queue among split ones ~2 % of the link, on which a burst of WQE fetches took ~20 us and its
/// Tx ring filled (the paper's Fig. 13 setup).
fn queue_fraction(p: &ModelParams<'_>, frame: u32) -> f64 {
    let q = u32::from(p.queues.max(1));
    let k = u32::from(p.nicmem_queues).min(q);
    if !p.port_mode.uses_nicmem() || k == q {
        return 1.0 / f64::from(q);
    }
    let bytes = |mode: DatapathMode| {
        let mut input = BreakdownInput::new(p.profile, mode, frame);
        input.split_offset = p.split_offset as u32;
        input.inline_size = p.tx_inline as u32;
        Breakdown::compute(p.profile, &input)
            .map(|b| b.total.up.to_f64() + b.total.down.to_f64())
            .unwrap_or(1.0)
            .max(1.0)
    };
    let (nic, split) = (bytes(p.port_mode), bytes(DatapathMode::Split));
    let total = f64::from(k) * nic + f64::from(q - k) * split;
    (bytes(p.mode) / total).max(1.0 / f64::from(q))
}

/// The LLC's view of the port from queue `p` (see [`DdioPeers`]): of `q` queues the first `k`
/// run the port's mode, the rest `split`.
fn ddio_peers(p: &ModelParams<'_>, q: u32, k: u32, cqe_bytes: u64) -> DdioPeers {
    let (nic, split) = (u64::from(k), u64::from(q - k));
    let mixed = p.port_mode.uses_nicmem() && split > 0;
    let (same, other, other_mode) = match (mixed, p.mode == p.port_mode) {
        (false, _) => (u64::from(q), 0, p.mode),
        (true, true) => (nic, split, DatapathMode::Split),
        (true, false) => (split, nic, p.port_mode),
    };
    DdioPeers {
        same,
        other,
        other_mode,
        split_offset: p.split_offset as u64,
        cqe_bytes,
    }
}

/// A run of identical receives an untimed queue has not charged yet: header bytes, host
/// payload bytes and nicmem payload bytes of each, and how many.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct RxRun {
    hl: u32,
    hp: u32,
    np: u32,
    n: u64,
}

/// A run of identical transmits an untimed queue has not charged yet: the host data segments'
/// lengths, the nicmem bytes read and the frame length of each, and how many.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct TxRun {
    host: [u32; 2],
    nic: u32,
    len: u32,
    n: u64,
}

/// Charges a run of `r.n` untimed receives whose data writes cost `data` each to `c` (with
/// `mini`, the partly filled compressed completion slot).
fn charge_rx_run(c: &mut NicCounters, mini: &mut u32, k: &Costs, r: &RxRun, data: Traffic) {
    c.items[Item::RxData as usize] += data.times(r.n);
    let host = (u64::from(r.hl) + u64::from(r.hp)) * r.n;
    c.host_bytes_written += host;
    c.host_data_written += host;
    if r.np > 0 {
        let b = u64::from(r.np) * r.n;
        c.nicmem_bytes_written += b;
        c.nicmem_live_bytes += b;
        c.nicmem_peak_bytes = c.nicmem_peak_bytes.max(c.nicmem_live_bytes);
    }
    charge_rx_cqes(c, mini, k, r.n);
}

/// Charges `n` untimed Rx completions to `c`, with CQE compression (`mini`: the partly filled
/// compressed slot) as in [`NicModel::rx_cqe`].
fn charge_rx_cqes(c: &mut NicCounters, mini: &mut u32, k: &Costs, n: u64) {
    c.rx_cqes += n;
    let slots = match k.mini_per_slot {
        None => n,
        Some(per) => {
            let total = u64::from(*mini) + n;
            *mini = (total % u64::from(per)) as u32;
            total / u64::from(per)
        }
    };
    if slots > 0 {
        c.items[Item::RxCqe as usize] += k.cqe.times(slots);
        c.host_bytes_written += k.cqe_size * slots;
    }
}

/// Charges a run of `r.n` untimed transmits whose host data reads cost `reads` each to `c`.
fn charge_tx_run(c: &mut NicCounters, k: &Costs, r: &TxRun, reads: Traffic) {
    let host: u64 = r.host.iter().map(|&h| u64::from(h)).sum();
    c.items[Item::TxData as usize] += reads.times(r.n);
    c.host_bytes_read += host * r.n;
    c.host_data_read += host * r.n;
    c.nicmem_bytes_read += u64::from(r.nic) * r.n;
    c.wire_tx_frames += r.n;
    c.wire_tx_bytes += (u64::from(r.len) + k.wire_overhead) * r.n;
}

/// Accounting (and optional timing) of one queue.
///
/// Queues charge runs of identical receives and sends together (a burst of equal frames costs
/// one multiplication per charge instead of one table look-up per packet); the totals are the
/// same integers as charging each packet. A timed queue still books every DMA on its
/// timelines one by one, in order (each packet's times depend on them), but a pass of received
/// whole frames ([`NicModel::rx_book_whole`]) and a run of sends ([`NicModel::tx_send`]) are
/// booked together on copies of the resources' state with each transfer's cost computed once.
/// A run is charged when the next operation differs,
/// when a receive run placed nicmem payloads (at the end of its pass, so nicmem's live bytes
/// are current before packets are freed) and when the queue reports; [`NicModel::counters`]
/// includes the pending runs.
pub(crate) struct NicModel {
    pub(crate) c: NicCounters,
    k: Costs,
    rx_wqe_left: u32,
    rx_mini: u32,
    rx_run: RxRun,
    tx_run: TxRun,
    pub(crate) t: Option<Box<Timing>>,
    live_every: u32,
    bursts: u32,
}

/// Per-queue construction parameters of the model.
pub(crate) struct ModelParams<'a> {
    pub profile: &'a HardwareProfile,
    /// This queue's mode.
    pub mode: DatapathMode,
    /// The port's mode (its first `nicmem_queues` queues run it, the rest `split`).
    pub port_mode: DatapathMode,
    pub queues: u16,
    /// Queues of the port that run `port_mode` (`vnic.nicmem_queues`; all of them by default).
    pub nicmem_queues: u16,
    pub split_offset: usize,
    pub tx_inline: usize,
    pub max_frame: usize,
    pub rx_ring: usize,
    pub tx_ring: usize,
    pub timing: Option<&'a VnicTiming>,
}

impl NicModel {
    pub(crate) fn new(p: &ModelParams<'_>) -> Result<Self, String> {
        let prof = p.profile;
        let op = OpCosts::new(prof)?;
        let d = prof.nic.descriptors.clone();
        let rx_wqe_size = op.rx_wqe_size(p.mode);
        let k = Costs {
            cqe: op.cqe_write(1),
            cqe_size: u64::from(d.cqe_size),
            mini_per_slot: d.cqe_compression.then_some(d.mini_cqes_per_slot.max(1)),
            doorbell: op.tx_doorbell(),
            rx_fetch_full: op.rx_wqe_fetch(d.rx_wqe_fetch_batch, rx_wqe_size),
            rx_batch: d.rx_wqe_fetch_batch.max(1),
            rx_wqe_size,
            wqebb: d.wqebb,
            blueflame: d.blueflame,
            wire_overhead: u64::from(
                prof.nic.fcs_bytes + prof.nic.preamble_sfd_bytes + prof.nic.ifg_bytes,
            ),
            op,
            writes: LenCache::new(),
            reads: LenCache::new(),
            wqe_reads: LenCache::new(),
        };
        let t = match p.timing {
            None => None,
            Some(vt) => {
                let q = u32::from(p.queues.max(1));
                let k = u32::from(p.nicmem_queues).clamp(1, q);
                let frame = vt
                    .frame_hint
                    .unwrap_or(p.max_frame as u32 + prof.nic.fcs_bytes);
                let sp = share(prof, q, queue_fraction(p, frame), k)?;
                let tl = Timelines::from_profile(&sp)?;
                let link = PcieLink::from_profile(&sp.nic.pcie)?;
                let cyc = &prof.host.cycles;
                // A completion's host bytes: a CQE, or an eighth of a compressed slot.
                let cqe_bytes = u64::from(d.cqe_size)
                    / u64::from(if d.cqe_compression {
                        d.mini_cqes_per_slot.max(1)
                    } else {
                        1
                    });
                let cq = p.rx_ring.next_power_of_two();
                let txn = p.tx_ring.next_power_of_two().max(16);
                let hist = Histogram::new_with_bounds(1, 60_000_000_000, 3)
                    .map_err(|e| format!("latency histogram: {e}"))?;
                Some(Box::new(Timing {
                    virtual_clock: vt.clock == ClockMode::Virtual,
                    epoch: Instant::now(),
                    tl,
                    line: Cost::per_byte_at_gbps(sp.nic.line_rate_gbps),
                    pace: vt
                        .offered_gbps
                        .map(|g| Cost::per_byte_at_gbps(g / f64::from(q))),
                    offered_gbps: vt.offered_gbps.map(|g| g / f64::from(q)),
                    up: Cost::per_byte_at_bps(link.capacity_bps()),
                    link_bps: PcieLink::from_profile(&prof.nic.pcie)?.capacity_bps() as f64,
                    cycle: Cost::per_op_at_rate(prof.host.cpu_ghz * 1e9),
                    pkt_cycles: u64::from(cyc.driver_per_packet) + u64::from(vt.nf_cycles),
                    mem: MemoryContention::new(prof, vt.nf_dram_reads, vt.nf_dram_writes)?,
                    doorbell_cycles: u64::from(cyc.doorbell),
                    burst_cycles_div: u64::from(prof.nic.descriptors.tx_burst.max(1)),
                    now: 0,
                    cpu_busy: 0,
                    next_slot: 0,
                    starved_at: None,
                    rx_buffer: sp.nic.rx_buffer.bytes(),
                    rx_buffer_drain: Cost::per_byte_at_bps(link.capacity_bps())
                        .time_ps(sp.nic.rx_buffer.bytes()),
                    posted_latency: prof.nic.pcie.posted_latency_ns * PS_PER_NS,
                    first: None,
                    last: 0,
                    hist,
                    lat_exact: LatencyExact::default(),
                    lat_counts: vec![0; LAT_WINDOW].into_boxed_slice(),
                    lat_base: 0,
                    lat_hits: 0,
                    lat_misses: 0,
                    cqe_mini: 0,
                    ddio: DdioModel::from_profile(&prof.host),
                    ddio_peers: ddio_peers(p, q, k, cqe_bytes),
                    cqe_bytes,
                    core_bytes: (p.rx_ring + p.tx_ring) as u64
                        * u64::from(q)
                        * u64::from(cyc.meta_lines)
                        * CACHE_LINE,
                    miss_ppm: 0,
                    meta_miss_ppm: 0,
                    ddio_inflight: None,
                    rx_fetch_full: None,
                    rx_steps: RxSteps::NONE,
                    dram_acc: 0,
                    rewrite_bytes: u64::from(cyc.header_writes) * CACHE_LINE,
                    dram_book_acc: 0,
                    cq_slots: vec![(0, 0); cq].into_boxed_slice(),
                    cq_mask: cq as u32 - 1,
                    // A power of two (`txn` is), so positions wrap with a mask.
                    inflight: vec![(0, 0); txn].into_boxed_slice(),
                    if_head: 0,
                    if_len: 0,
                    inflight_bbs: 0,
                    rx_refused: vec![0; MAX_BURST].into_boxed_slice(),
                    rx_nrefused: 0,
                    sends: SendRun {
                        ready: 0,
                        len: 0,
                        host: [0; 2],
                        nic: 0,
                        nbb: 0,
                        n: 0,
                        arrival_ns: [0; SEND_RUN],
                        steps: SendSteps::default(),
                    },
                }))
            }
        };
        Ok(Self {
            c: NicCounters::default(),
            k,
            rx_wqe_left: 0,
            rx_mini: 0,
            rx_run: RxRun::default(),
            tx_run: TxRun::default(),
            t,
            live_every: 64,
            bursts: 0,
        })
    }

    /// Line bytes a frame of `len` bytes (without FCS) adds beyond `len`.
    #[inline]
    pub(crate) fn wire_overhead(&self) -> u64 {
        self.k.wire_overhead
    }

    #[inline]
    fn charge(&mut self, i: Item, t: Traffic) {
        self.c.items[i as usize] += t;
    }

    /// `frames` frames of `line_bytes` line bytes in all arrived on the wire.
    #[inline]
    pub(crate) fn wire_rx_frames(&mut self, frames: u64, line_bytes: u64) {
        self.c.wire_rx_frames += frames;
        self.c.wire_rx_bytes += line_bytes;
    }

    /// A frame of `len` bytes arrived on the wire.
    #[inline]
    pub(crate) fn wire_rx(&mut self, len: usize) {
        self.c.wire_rx_frames += 1;
        self.c.wire_rx_bytes += len as u64 + self.k.wire_overhead;
    }

    /// Upstream bytes a received frame will need (for the overrun check).
    #[inline]
    pub(crate) fn rx_up_bytes(&mut self, hl: u32, host_payload: u32) -> u64 {
        let op = &self.k.op;
        let mut b = self.k.writes.get(hl, |n| op.rx_data_write(n)).up_bytes;
        if host_payload > 0 {
            b += self
                .k
                .writes
                .get(host_payload, |n| op.rx_data_write(n))
                .up_bytes;
        }
        b + self.k.cqe.up_bytes
    }

    /// The NIC consumed a header-ring WQE (`posted` were posted, this one included): fetch a
    /// batch when the prefetched ones are used up.
    #[inline]
    pub(crate) fn rx_wqe_consumed(&mut self, posted: u32, at: Ps) {
        if self.rx_wqe_left == 0 {
            let (n, tr) = Self::rx_wqe_fetch_charged(&self.k, &mut self.c, posted);
            if let Some(t) = &mut self.t {
                t.tl.dma_read_booked(at, at, tr, 0);
            }
            self.rx_wqe_left = n;
        }
        self.rx_wqe_left -= 1;
    }

    /// The NIC fetches the next header-ring WQEs when `posted` are posted (up to its batch, at
    /// least one): counts the fetch and returns how many it fetched and its traffic, for the
    /// caller to book. One copy for the frame-by-frame receive and the whole-frame pass.
    #[inline(always)]
    fn rx_wqe_fetch_charged(k: &Costs, c: &mut NicCounters, posted: u32) -> (u32, Traffic) {
        let n = posted.clamp(1, k.rx_batch);
        let tr = if n == k.rx_batch {
            k.rx_fetch_full
        } else {
            k.op.rx_wqe_fetch(n, k.rx_wqe_size)
        };
        c.items[Item::RxWqe as usize] += tr;
        c.rx_wqe_fetches += 1;
        c.host_bytes_read += u64::from(n * k.rx_wqe_size);
        (n, tr)
    }

    /// Untimed: the NIC consumed `k` header-ring WQEs, the first when `posted` were posted (the
    /// same charges as `k` calls of [`NicModel::rx_wqe_consumed`] with `posted` counting down).
    #[inline]
    pub(crate) fn rx_wqes_untimed(&mut self, mut k: u32, mut posted: u32) {
        while k > 0 {
            if self.rx_wqe_left == 0 {
                self.rx_wqe_consumed(posted, 0);
                self.rx_wqe_left += 1;
            }
            let take = self.rx_wqe_left.min(k);
            self.rx_wqe_left -= take;
            k -= take;
            posted = posted.saturating_sub(take);
        }
    }

    /// Timed: a received frame was placed at `at` (`hl` header bytes and `host_payload`
    /// payload bytes written to host memory, `nic_payload` payload bytes written to nicmem) and
    /// its completion written; returns when the CPU can see the completion. The charges are
    /// [`NicModel::rx_untimed`]'s (a run of identical receives is charged together); the
    /// timelines book each write.
    #[inline]
    pub(crate) fn rx_timed(&mut self, at: Ps, hl: u32, host_payload: u32, nic_payload: u32) -> Ps {
        self.rx_untimed(hl, host_payload, nic_payload);
        self.rx_book(at, hl, host_payload, nic_payload)
    }

    /// [`NicModel::rx_timed`]'s bookings without its charges.
    #[inline(always)]
    fn rx_book(&mut self, at: Ps, hl: u32, host_payload: u32, nic_payload: u32) -> Ps {
        let Some(t) = &mut self.t else {
            return at;
        };
        let op = &self.k.op;
        let w1 = self.k.writes.get(hl, |n| op.rx_data_write(n));
        t.tl.posted_write(at, w1);
        if host_payload > 0 {
            let w2 = self.k.writes.get(host_payload, |n| op.rx_data_write(n));
            t.tl.posted_write(at, w2);
        }
        if nic_payload > 0 {
            t.tl.get_mut(ResourceKind::Nicmem)
                .reserve(at, u64::from(nic_payload));
        }
        t.book_lost_packet(&mut self.c.dram_bytes, at, hl, host_payload);
        Self::rx_cqe_book(t, &self.k, at)
    }

    /// Timed: frame `i` of a whole-frame receive pass had its descriptor refused (for
    /// [`NicModel::rx_book_whole`]; the pass charges its error completion).
    #[cold]
    pub(crate) fn rx_refused_in_pass(&mut self, i: usize) {
        if let Some(t) = self.t.as_deref_mut() {
            t.rx_refused[t.rx_nrefused] = i as u16;
            t.rx_nrefused += 1;
        }
    }

    /// Timed, unpaced: books a pass of frames received whole into their header buffers and
    /// charged by the pass (data and completions; refused descriptors noted with
    /// [`NicModel::rx_refused_in_pass`]), as the frame-by-frame receive books each frame in
    /// turn: its arrival ([`Timing::arrive`]), the header-ring WQE fetch it may trigger
    /// ([`NicModel::rx_wqe_consumed`], charged here), its data write and completion
    /// ([`NicModel::rx_timed`]'s bookings, or [`NicModel::rx_refused_timed`]'s) and its
    /// completion slot ([`Timing::cq_set`]). Frame `i` is `lens[i]` bytes long and took header
    /// descriptor `first + i`, posted at `posted_at[(first + i) & mask]` when `posted0 - i`
    /// were posted, and completion slot `slot0 + i`.
    ///
    /// The pass goes a run of equal lengths at a time, with the lanes, the prefetched WQEs,
    /// the compressed-slot count and the completion slots in locals. A run of the commonest
    /// kind (no refused descriptor, every completion written, DMA-engine writes that take no
    /// time, no DDIO losses, wire and engine in whole picoseconds) takes a short loop with
    /// shortcuts that give the same times: the wire and the engine book with
    /// [`Lane::reserve_whole`](crate::pcie_model::timeline::Lane::reserve_whole), and a frame's
    /// completion, ready on the up link when its data is (its engine write ends with the
    /// data's), queues right behind the data, so one reservation of both transfers' bytes books
    /// the same busy-until time and completion end (a lane's time is exact, so `a` then `b`
    /// units end where `a + b` do). Other runs take the frame-by-frame booking.
    pub(crate) fn rx_book_whole(
        &mut self,
        lens: &[u32],
        posted_at: &[Ps],
        first: u32,
        posted0: u32,
        slot0: u32,
    ) {
        let Some(t) = self.t.as_deref_mut() else {
            return;
        };
        let nrefused = std::mem::take(&mut t.rx_nrefused);
        let mut next_refused = if nrefused > 0 {
            usize::from(t.rx_refused[0])
        } else {
            usize::MAX
        };
        debug_assert!(t.pace.is_none(), "staged receives are unpaced");
        let mut r = 0;
        let mask = (posted_at.len() as u32).wrapping_sub(1);
        let k = &mut self.k;
        // The DMA engine's, the link's and the wire's state on lanes for the pass; each
        // transfer's cost split once per frame length (kept for the next pass).
        let tl = &t.tl;
        if let Some(&len) = lens.first()
            && t.rx_steps.len != len
        {
            t.rx_steps = RxSteps::new(tl, k, len);
        }
        let st = &t.rx_steps;
        let (eng_w, eng_r, cqe_s) = (st.eng_w, st.eng_r, st.cqe);
        let (drain, posted_latency) = (t.rx_buffer_drain, t.posted_latency);
        let mut dma = tl.dma_lanes();
        let mut wire = tl.get(ResourceKind::WireRx).lane();
        // The short loop's conditions that hold for the whole pass.
        let quick = eng_w.takes_no_time()
            && dma.eng.whole_with(eng_w)
            && dma.eng.whole_with(eng_r)
            && t.miss_ppm == 0
            && k.mini_per_slot.is_none();
        let (mut cqe_mini, mut wqe_left, mut last) = (t.cqe_mini, self.rx_wqe_left, t.last);
        // The pass's DMA-engine writes and completion writes.
        let (mut writes_n, mut cqes) = (0, 0);
        // The completion slots' times, out of `t` for the pass (they go back after it).
        let cq_mask = t.cq_mask;
        let mut cq_slots = std::mem::take(&mut t.cq_slots);
        let mut i = 0;
        while i < lens.len() {
            let len = lens[i];
            // The run's end; a pass of one length (the commonest) is found without a search.
            let end = if i == 0 && lens.iter().fold(0, |d, &l| d | (l ^ len)) == 0 {
                lens.len()
            } else {
                lens[i..]
                    .iter()
                    .position(|&l| l != len)
                    .map_or(lens.len(), |n| i + n)
            };
            if t.rx_steps.len != len {
                t.rx_steps = RxSteps::new(&t.tl, k, len);
            }
            let (wire_s, data_s, both_s) = (t.rx_steps.wire, t.rx_steps.data, t.rx_steps.both);
            let frames = (end - i) as u64;
            let mut datas = 0;
            if quick && next_refused >= end && wire.whole_with(wire_s) {
                // Every frame's data and completion (see above), booked as one transfer.
                // Completions become visible in booking order on the up link, so the run's
                // last is its latest.
                let mut visible = last;
                // Whether frames held by flow control can take `rx_held_run`.
                let held = both_s.whole_ps() >= wire_s.whole_ps() && wire_s.whole_ps() < drain;
                let mut j = i;
                while j < end {
                    // A piece of the run in which neither the header ring nor the completion
                    // queue wraps, walked without indexing.
                    let c = first.wrapping_add(j as u32);
                    let (pi, si) = (
                        (c & mask) as usize,
                        (slot0.wrapping_add(j as u32) & cq_mask) as usize,
                    );
                    let m = (end - j).min(posted_at.len() - pi).min(cq_slots.len() - si);
                    let (posted, slots) = (&posted_at[pi..pi + m], &mut cq_slots[si..si + m]);
                    let mut x = 0;
                    while x < m {
                        if held && wqe_left > 0 {
                            // Frames held by flow control, booked as a chain on the up link.
                            let n = (m - x).min(wqe_left as usize);
                            let done = Self::rx_held_run(
                                &mut wire,
                                &mut dma,
                                (wire_s, both_s, eng_w, drain),
                                &posted[x..x + n],
                                &mut slots[x..x + n],
                            );
                            if done > 0 {
                                visible = slots[x + done - 1].0;
                                wqe_left -= done as u32;
                                (x, j) = (x + done, j + done);
                                if x == m {
                                    break;
                                }
                            }
                        }
                        let fc = dma.up.free_at().saturating_sub(drain);
                        let at = wire.reserve_whole(posted[x].max(fc), wire_s);
                        if wqe_left == 0 {
                            let posted = posted0.wrapping_sub(j as u32);
                            wqe_left =
                                Self::rx_wqe_fetch_booked(k, &mut self.c, t, &mut dma, at, posted);
                        }
                        wqe_left -= 1;
                        let e = dma.eng.reserve_whole(at, eng_w);
                        visible = dma.up.reserve(e, both_s).done;
                        slots[x] = (visible, at);
                        (x, j) = (x + 1, j + 1);
                    }
                }
                last = last.max(visible);
                datas = frames;
                cqes += frames;
            } else {
                for j in i..end {
                    // Its arrival (`Timing::arrive`): flow control holds the sender while the
                    // receive buffer is too full.
                    let c = first.wrapping_add(j as u32);
                    let fc = dma.up.free_at().saturating_sub(drain);
                    let at = wire
                        .reserve(posted_at[(c & mask) as usize].max(fc), wire_s)
                        .end;
                    // The header-ring WQE (`rx_wqe_consumed`): a fetch when the prefetched ones
                    // are used up.
                    if wqe_left == 0 {
                        let posted = posted0.wrapping_sub(j as u32);
                        wqe_left =
                            Self::rx_wqe_fetch_booked(k, &mut self.c, t, &mut dma, at, posted);
                    }
                    wqe_left -= 1;
                    if j == next_refused {
                        r += 1;
                        next_refused = if r < nrefused {
                            usize::from(t.rx_refused[r])
                        } else {
                            usize::MAX
                        };
                    } else {
                        // The data write (`rx_book`): the whole frame into its header buffer.
                        dma.posted_write(at, eng_w, data_s);
                        datas += 1;
                        t.book_lost_packet(&mut self.c.dram_bytes, at, len, 0);
                    }
                    // The completion (`rx_cqe_book`; `cqe_written` with the count in a local).
                    let written = match k.mini_per_slot {
                        None => true,
                        Some(per) => {
                            cqe_mini += 1;
                            let full = cqe_mini == per;
                            if full {
                                cqe_mini = 0;
                            }
                            full
                        }
                    };
                    let visible = if written {
                        cqes += 1;
                        dma.posted_write(at, eng_w, cqe_s).done
                    } else {
                        at + posted_latency
                    };
                    let slot = (slot0.wrapping_add(j as u32) & cq_mask) as usize;
                    cq_slots[slot] = (visible, at);
                    last = last.max(visible);
                }
            }
            wire.add(frames, wire_s);
            dma.up.add(datas, data_s);
            writes_n += datas;
            i = end;
        }
        dma.eng.add(writes_n + cqes, eng_w);
        dma.up.add(cqes, cqe_s);
        t.tl.settle_dma(dma);
        t.tl.get_mut(ResourceKind::WireRx).settle(wire);
        self.rx_wqe_left = wqe_left;
        (t.cqe_mini, t.last) = (cqe_mini, last);
        if t.first.is_none() && !lens.is_empty() {
            t.first = Some(cq_slots[(slot0 & cq_mask) as usize].1);
        }
        t.cq_slots = cq_slots;
    }

    /// [`NicModel::rx_book_whole`]'s short loop for frames held by flow control: books frames
    /// posted at `posted` (none fetching a WQE) into completion slots `slots` while each is,
    /// and returns how many it booked. `steps` are the frame's wire time, its data and
    /// completion on the up link, the engine's write (which takes no time) and the receive
    /// buffer's drain time, with wire and engine lanes in whole picoseconds.
    ///
    /// A frame is held when the up link's busy-until time less the drain time is past its
    /// descriptor's posting and the wire's busy-until time: it arrives `wire` after that time.
    /// When the drain time exceeds the frame's wire time and the engine is free before the
    /// link, its writes (ready when it arrived, or when the engine is free) queue behind the
    /// link's backlog; and when the link takes at least as long per frame as the wire
    /// (`both >= wire`), the next frame finds the wire free again by its own time. So each
    /// frame's times follow from the link's busy-until time alone
    /// ([`Lane::reserve_queued`]), exactly as the general booking gives them; the wire ends
    /// where the last frame left it and the engine at the later of its time and that frame's
    /// arrival.
    ///
    /// [`Lane::reserve_queued`]: crate::pcie_model::timeline::Lane::reserve_queued
    #[inline(always)]
    fn rx_held_run(
        wire: &mut Lane,
        dma: &mut DmaLanes,
        steps: (Step, Step, Step, Ps),
        posted: &[Ps],
        slots: &mut [(Ps, Ps)],
    ) -> usize {
        let (wire_s, both_s, eng_w, drain) = steps;
        let wq = wire_s.whole_ps();
        let mut end = dma.up.free_at();
        if end < drain || wire.free_at() > end - drain || dma.eng.free_at() >= end {
            return 0;
        }
        // The general booking on copies, to check the chain against (debug builds).
        let mut check = cfg!(debug_assertions).then_some((*wire, *dma));
        let (mut n, mut at) = (0, 0);
        for (&p, slot) in posted.iter().zip(slots) {
            let fc = end - drain;
            if p > fc {
                break;
            }
            at = fc + wq;
            let r = dma.up.reserve_queued(both_s);
            end = r.end;
            *slot = (r.done, at);
            n += 1;
            if let Some((w, d)) = &mut check {
                let a = w.reserve_whole(p.max(d.up.free_at().saturating_sub(drain)), wire_s);
                let e = d.eng.reserve_whole(a, eng_w);
                debug_assert_eq!((d.up.reserve(e, both_s).done, a), *slot);
            }
        }
        if n > 0 {
            wire.reserve_whole(at - wq, wire_s);
            dma.eng.reserve_whole(at, eng_w);
        }
        if let Some((w, d)) = check {
            debug_assert_eq!(
                (w.free_at(), d.eng.free_at(), d.up.free_at()),
                (wire.free_at(), dma.eng.free_at(), dma.up.free_at())
            );
        }
        n
    }

    /// [`NicModel::rx_book_whole`]'s header-ring WQE fetch at `at` when `posted` WQEs are
    /// posted, charged and booked on the pass's lanes `dma`; returns the WQEs fetched. Out of
    /// line: a fetch serves a batch of frames, and the pass's loops keep their state in
    /// registers without its. A full batch's transfers are split into steps once per queue.
    #[inline(never)]
    fn rx_wqe_fetch_booked(
        k: &Costs,
        c: &mut NicCounters,
        t: &mut Timing,
        dma: &mut DmaLanes,
        at: Ps,
        posted: u32,
    ) -> u32 {
        let (nw, tr) = Self::rx_wqe_fetch_charged(k, c, posted);
        let tl = &t.tl;
        let steps = |tr: Traffic| {
            (
                tl.get(ResourceKind::PcieUp).step(tr.up_bytes),
                tl.get(ResourceKind::PcieDown).step(tr.down_bytes),
            )
        };
        let (up, down) = if nw == k.rx_batch {
            *t.rx_fetch_full.get_or_insert_with(|| steps(tr))
        } else {
            steps(tr)
        };
        let tl = &mut t.tl;
        let (eng_r, latency) = (
            tl.get(ResourceKind::DmaEngine).step(tl.dma_read_ps()),
            tl.read_latency_ps(),
        );
        dma.read_booked(tl.reads_mut(), at, at, eng_r, up, down, latency);
        dma.eng.add(1, eng_r);
        dma.up.add(1, up);
        dma.down.add(1, down);
        nw
    }

    /// Whether the next Rx completion's write goes out (with CQE compression, only each full
    /// slot's), as [`NicModel::rx_cqe_book`] counts them.
    #[inline(always)]
    fn cqe_written(t: &mut Timing, k: &Costs) -> bool {
        match k.mini_per_slot {
            None => true,
            Some(per) => {
                t.cqe_mini += 1;
                if t.cqe_mini == per {
                    t.cqe_mini = 0;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// Timed: the NIC refused a received frame's descriptor and wrote an error completion at
    /// `at`; returns when the CPU can see it.
    #[inline]
    pub(crate) fn rx_refused_timed(&mut self, at: Ps) -> Ps {
        self.rx_cqes(1);
        match &mut self.t {
            Some(t) => Self::rx_cqe_book(t, &self.k, at),
            None => at,
        }
    }

    /// Books an Rx completion written at `at` (with CQE compression, only the write of each
    /// full slot); returns when the CPU can see it.
    #[inline(always)]
    fn rx_cqe_book(t: &mut Timing, k: &Costs, at: Ps) -> Ps {
        if Self::cqe_written(t, k) {
            t.tl.posted_write(at, k.cqe).done
        } else {
            at + t.posted_latency
        }
    }

    /// Untimed: a received frame placed `hl` header bytes and `host_payload` payload bytes in
    /// host memory and `nic_payload` payload bytes in nicmem, and wrote its completion (the same
    /// charges as [`NicModel::rx_placed`] plus [`NicModel::rx_cqe`], deferred to
    /// [`NicModel::rx_flush`]).
    #[inline]
    pub(crate) fn rx_untimed(&mut self, hl: u32, host_payload: u32, nic_payload: u32) {
        let r = &mut self.rx_run;
        if r.hl == hl && r.hp == host_payload && r.np == nic_payload {
            r.n += 1;
            return;
        }
        self.rx_flush();
        self.rx_run = RxRun {
            hl,
            hp: host_payload,
            np: nic_payload,
            n: 1,
        };
    }

    /// Untimed: `n` receives like [`NicModel::rx_untimed`]'s (the same charges as `n` calls).
    #[inline]
    pub(crate) fn rx_untimed_many(&mut self, hl: u32, host_payload: u32, nic_payload: u32, n: u64) {
        if n == 0 {
            return;
        }
        let r = &mut self.rx_run;
        if r.hl == hl && r.hp == host_payload && r.np == nic_payload {
            r.n += n;
            return;
        }
        self.rx_flush();
        self.rx_run = RxRun {
            hl,
            hp: host_payload,
            np: nic_payload,
            n,
        };
    }

    /// Charges the pending run of untimed receives.
    #[inline]
    pub(crate) fn rx_flush(&mut self) {
        let r = std::mem::take(&mut self.rx_run);
        if r.n == 0 {
            return;
        }
        let op = &self.k.op;
        let writes = &mut self.k.writes;
        let mut tr = writes.get(r.hl, |n| op.rx_data_write(n));
        if r.hp > 0 {
            tr += writes.get(r.hp, |n| op.rx_data_write(n));
        }
        charge_rx_run(&mut self.c, &mut self.rx_mini, &self.k, &r, tr);
    }

    /// Ends a receive pass: charges the pending run of untimed receives if it placed nicmem
    /// payloads (nicmem's live bytes, and so its peak, must count them before packets are
    /// freed); other runs keep growing across passes (see [`NicModel::counters`]).
    #[inline]
    pub(crate) fn rx_pass_done(&mut self) {
        if self.rx_run.np > 0 {
            self.rx_flush();
        }
    }

    /// `n` Rx completions written (untimed), with CQE compression as in [`NicModel::rx_cqe`].
    pub(crate) fn rx_cqes(&mut self, n: u64) {
        charge_rx_cqes(&mut self.c, &mut self.rx_mini, &self.k, n);
    }

    /// The counters so far, the pending runs of untimed receives and transmits included (they
    /// are charged when their kind of frame changes, or when the queue reports).
    pub(crate) fn counters(&self) -> NicCounters {
        let mut c = self.c;
        let op = &self.k.op;
        let r = &self.rx_run;
        if r.n > 0 {
            let mut tr = op.rx_data_write(r.hl);
            if r.hp > 0 {
                tr += op.rx_data_write(r.hp);
            }
            let mut mini = self.rx_mini;
            charge_rx_run(&mut c, &mut mini, &self.k, r, tr);
        }
        let t = &self.tx_run;
        if t.n > 0 {
            let mut tr = Traffic::ZERO;
            for h in t.host.into_iter().filter(|&h| h > 0) {
                tr += op.tx_data_read(h);
            }
            charge_tx_run(&mut c, &self.k, t, tr);
        }
        c
    }

    /// The CPU rang the doorbell for `nbb` new WQEBBs; returns when the WQEs are at the NIC.
    #[inline]
    pub(crate) fn tx_doorbell(&mut self, nbb: u32) -> Ps {
        let db = self.k.doorbell;
        self.charge(Item::TxDoorbell, db);
        self.c.doorbells += 1;
        let bytes = nbb * self.k.wqebb;
        let op = &self.k.op;
        let fetch = if self.k.blueflame {
            op.tx_wqe_push(bytes)
        } else {
            self.c.host_bytes_read += u64::from(bytes);
            self.k.wqe_reads.get(bytes, |n| op.tx_wqe_fetch(n))
        };
        self.charge(Item::TxWqe, fetch);
        match &mut self.t {
            None => 0,
            Some(t) => {
                let now = t.now;
                if t.virtual_clock {
                    // Takes CPU time but is not counted as load: a per-burst cost shrinks per
                    // packet as bursts grow, so it never saturates a poll-mode core.
                    t.now += t.cycle.time_ps(t.doorbell_cycles);
                }
                let d = t.tl.mmio_write(now, db);
                if self.k.blueflame {
                    t.tl.mmio_write(now, fetch).done
                } else {
                    t.tl.dma_read_booked(now, d.done, fetch, 0).done
                }
            }
        }
    }

    /// The NIC read `n` bytes of packet data from host memory once the WQE was ready at `ready`;
    /// returns when the data is at the NIC.
    #[inline]
    pub(crate) fn tx_host_read(&mut self, ready: Ps, n: u32) -> Ps {
        let op = &self.k.op;
        let tr = self.k.reads.get(n, |n| op.tx_data_read(n));
        self.charge(Item::TxData, tr);
        self.c.host_bytes_read += u64::from(n);
        self.c.host_data_read += u64::from(n);
        self.tx_host_read_book(ready, n)
    }

    /// Books [`NicModel::tx_host_read`]'s read without charging it (the caller charges it with
    /// [`NicModel::tx_untimed`]); 0 when untimed.
    #[inline]
    pub(crate) fn tx_host_read_book(&mut self, ready: Ps, n: u32) -> Ps {
        let Some(t) = &mut self.t else {
            return 0;
        };
        let op = &self.k.op;
        let tr = self.k.reads.get(n, |n| op.tx_data_read(n));
        let adder = t.tx_read_adder_ps();
        let now = t.now;
        t.tl.dma_read_booked(now.min(ready), ready, tr, adder).done
    }

    /// The NIC read `n` payload bytes from nicmem at `ready`; returns when they are read.
    #[inline]
    pub(crate) fn tx_nic_read(&mut self, ready: Ps, n: u32) -> Ps {
        self.c.nicmem_bytes_read += u64::from(n);
        self.tx_nic_read_book(ready, n)
    }

    /// Books [`NicModel::tx_nic_read`]'s read without charging it; 0 when untimed.
    #[inline]
    pub(crate) fn tx_nic_read_book(&mut self, ready: Ps, n: u32) -> Ps {
        match &mut self.t {
            None => 0,
            Some(t) => {
                // Booked now (time order on the shared SRAM port), finishing relative to `ready`.
                let now = t.now.min(ready);
                let r =
                    t.tl.get_mut(ResourceKind::Nicmem)
                        .reserve(now, u64::from(n));
                ready + (r.done - now)
            }
        }
    }

    /// A frame of `len` bytes, gathered at `ready`, goes on the wire; `arrival_ns` is when it
    /// arrived. Returns its departure time.
    #[inline]
    pub(crate) fn tx_wire(&mut self, ready: Ps, len: usize, arrival_ns: u64) -> Ps {
        let bytes = len as u64 + self.k.wire_overhead;
        self.c.wire_tx_frames += 1;
        self.c.wire_tx_bytes += bytes;
        self.tx_wire_book(ready, len, arrival_ns)
    }

    /// Books [`NicModel::tx_wire`]'s wire slot and records the packet's latency without
    /// charging the frame; 0 when untimed.
    #[inline]
    pub(crate) fn tx_wire_book(&mut self, ready: Ps, len: usize, arrival_ns: u64) -> Ps {
        let bytes = len as u64 + self.k.wire_overhead;
        match &mut self.t {
            None => 0,
            Some(t) => {
                let r = t.tl.get_mut(ResourceKind::WireTx).reserve(ready, bytes);
                let lat = (r.end / PS_PER_NS).saturating_sub(arrival_ns).max(1);
                t.record_latency(lat);
                t.last = t.last.max(r.end);
                r.end
            }
        }
    }

    /// Timed: a common send, its WQE at the NIC at `ready`: the host data segments `host` (0:
    /// none) and `nic` nicmem bytes read, then the frame's `len` bytes on the wire, its latency
    /// counted from `arrival_ns`, and the WQE's `nbb` WQEBBs in flight until it left (what
    /// [`NicModel::tx_host_read_book`], [`NicModel::tx_nic_read_book`],
    /// [`NicModel::tx_wire_book`] and [`NicModel::tx_done`] book). Queued: identical sends in a
    /// row are booked together, on lanes, by [`NicModel::tx_sends_book`], which the caller
    /// calls before anything else is booked. The charges are the caller's
    /// ([`NicModel::tx_untimed`]).
    #[inline]
    pub(crate) fn tx_send(
        &mut self,
        ready: Ps,
        len: usize,
        host: [u32; 2],
        nic: u32,
        arrival_ns: u64,
        nbb: u32,
    ) {
        let Some(t) = self.t.as_deref_mut() else {
            return;
        };
        let key = (ready, len as u32, host, nic, nbb);
        let r = &t.sends;
        // The run's key is kept after it is booked, so one comparison decides: a send like the
        // queued ones joins them, any other starts a run (booking the queued ones, if any).
        if r.n == SEND_RUN || (r.ready, r.len, r.host, r.nic, r.nbb) != key {
            if r.n > 0 {
                Self::book_sends(t, &mut self.k, true);
            }
            let r = &mut t.sends;
            (r.ready, r.len, r.host, r.nic, r.nbb) = key;
        }
        let r = &mut t.sends;
        r.arrival_ns[r.n] = arrival_ns;
        r.n += 1;
    }

    /// Books the sends queued by [`NicModel::tx_send`] and returns the last one's departure (0:
    /// none queued). With `all_done` every queued WQE ends when its frame left; without, the
    /// last one's end is left to the caller (it writes that WQE's completion first, then
    /// [`NicModel::tx_done`]).
    #[inline]
    pub(crate) fn tx_sends_book(&mut self, all_done: bool) -> Ps {
        match self.t.as_deref_mut() {
            Some(t) => Self::book_sends(t, &mut self.k, all_done),
            None => 0,
        }
    }

    /// [`NicModel::tx_sends_book`]: each send's transfers in the order the per-send bookings
    /// make them, on lanes of the resources, with the transfers' costs computed once.
    fn book_sends(t: &mut Timing, k: &mut Costs, all_done: bool) -> Ps {
        let n = t.sends.n;
        if n == 0 {
            return 0;
        }
        t.sends.n = 0;
        let (ready, len, host, nic, nbb) = (
            t.sends.ready,
            t.sends.len,
            t.sends.host,
            t.sends.nic,
            t.sends.nbb,
        );
        if t.sends.steps.shape != Some((len, host, nic)) {
            t.sends.steps = SendSteps::new(&t.tl, k, len, host, nic);
        }
        let SendSteps {
            segs,
            nseg,
            eng,
            nic: nic_s,
            wire: wire_s,
            ..
        } = t.sends.steps;
        let book_at = t.now.min(ready);
        let tl = &t.tl;
        let latency = tl.read_latency_ps() + t.tx_read_adder_ps();
        // Each resource sees its transfers in the per-send order, one resource at a time (no
        // transfer of one waits for another's): the reads, the nicmem reads, then the wire.
        let mut done = [ready; SEND_RUN];
        let done = &mut done[..n];
        // The least time between two sends' reads completing, when the run knows it.
        let mut spaced = None;
        if nseg > 0 {
            let mut dma = tl.dma_lanes();
            let reads = t.tl.reads_mut();
            if eng.takes_no_time() {
                // Every read of the run waits for nothing but the lanes, each lane's reads all
                // ready at one time: booked as runs ([`Lane::start_run`]).
                match segs[..nseg] {
                    [a] => {
                        let at_ready = Self::tx_send_reads_book(
                            &mut dma,
                            reads,
                            eng,
                            [a],
                            book_at,
                            ready,
                            latency,
                            done,
                        );
                        // Each send's read ends on both lanes at least their steps' whole
                        // picoseconds after the one before, so it completes at least that
                        // much later (issued at the same time).
                        if at_ready {
                            spaced = Some(a.0.whole_ps() + a.1.whole_ps());
                        }
                    }
                    [a, b] => {
                        _ = Self::tx_send_reads_book(
                            &mut dma,
                            reads,
                            eng,
                            [a, b],
                            book_at,
                            ready,
                            latency,
                            done,
                        )
                    }
                    _ => unreachable!("a send has at most two host data segments"),
                }
            } else {
                let segs = &segs[..nseg];
                for d in done.iter_mut() {
                    for &(up, down) in segs {
                        *d = (*d)
                            .max(dma.read_booked(reads, book_at, ready, eng, up, down, latency));
                    }
                }
            }
            let reads_n = (n * nseg) as u64;
            dma.eng.add(reads_n, eng);
            for &(up, down) in &segs[..nseg] {
                dma.up.add(n as u64, up);
                dma.down.add(n as u64, down);
            }
            t.tl.settle_dma(dma);
        }
        if nic > 0 {
            // All ready at `book_at`: a run on the lane; each read is done `latency` after its
            // end, counted from `ready` (mod 2^64: the sum is a time).
            let nicmem = t.tl.get_mut(ResourceKind::Nicmem);
            let base = ready
                .wrapping_add(nicmem.latency_ps())
                .wrapping_sub(book_at);
            let mut lane = nicmem.lane();
            lane.start_run(book_at);
            for d in done.iter_mut() {
                *d = (*d).max(base.wrapping_add(lane.reserve_queued(nic_s).end));
            }
            lane.add(n as u64, nic_s);
            nicmem.settle(lane);
        }
        let mut wire = t.tl.get(ResourceKind::WireTx).lane();
        // Each frame's departure into `done`, then its latency over its arrival; the run's
        // latency extremes and sum merge into the queue's after the run.
        let (mut lo, mut hi, mut sum) = (u64::MAX, 0, 0u128);
        if nseg == 0 && nic == 0 {
            // Nothing to read (the frames inline): every frame is ready at `ready`, a run on
            // the wire.
            wire.start_run(ready);
            for d in done.iter_mut() {
                *d = wire.reserve_queued(wire_s).end;
            }
        } else if let (Some(gap), 0) = (spaced, nic) {
            // Frames ready when their one read completed, at least `gap` apart.
            wire.reserve_each_spaced(done, gap, wire_s);
        } else {
            wire.reserve_each(done, wire_s);
        }
        for (i, &end) in done.iter().enumerate() {
            let lat = (end / PS_PER_NS)
                .saturating_sub(t.sends.arrival_ns[i])
                .max(1);
            lo = lo.min(lat);
            hi = hi.max(lat);
            sum += u128::from(lat);
            t.count_latency(lat);
        }
        t.lat_exact.merge(&LatencyExact {
            count: n as u64,
            min_ns: lo,
            max_ns: hi,
            sum_ns: sum,
        });
        // A lane's reservations end in the order they were made: the run's last is its latest.
        let end = done[n - 1];
        t.last = t.last.max(end);
        // Each WQE is in flight until its frame left (the last one's end is the caller's).
        t.tx_inflight_push_all(&done[..if all_done { n } else { n - 1 }], nbb);
        wire.add(n as u64, wire_s);
        t.tl.get_mut(ResourceKind::WireTx).settle(wire);
        end
    }

    /// The host data reads of [`NicModel::book_sends`]' run when the DMA engine takes no time
    /// per read (`eng`): `SEGS` reads per send (`segs`: their request and completion bytes on the up
    /// and down lanes), all booked at `book_at` and starting at `ready`, each send's `done`
    /// raised to its reads' completion. Exactly what [`DmaLanes::read_booked`] gives each read
    /// in turn: the engine is free at one time for all of them, so every request is ready then
    /// and every completion at `book_at`, and each lane books them as a run
    /// ([`Lane::start_run`]); reads the tag tracker would issue at `ready` without retiring any
    /// ([`OutstandingReads::lazy_room`]) are recorded together, any other goes through it.
    /// Returns whether every read issued at `ready` (none waited for a tag).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn tx_send_reads_book<const SEGS: usize>(
        dma: &mut DmaLanes,
        reads: &mut OutstandingReads,
        eng: Step,
        segs: [(Step, Step); SEGS],
        book_at: Ps,
        ready: Ps,
        latency: Ps,
        done: &mut [Ps],
    ) -> bool {
        dma.eng.start_run(book_at);
        dma.up.start_run(dma.eng.free_at());
        dma.down.start_run(book_at);
        let (mut up, mut down) = (dma.up, dma.down);
        // A read completes at `ready + (request end - book_at) + latency + (completion end -
        // book_at)`; the constant part once (mod 2^64: the sum is a time).
        let base = ready
            .wrapping_add(latency)
            .wrapping_sub(book_at.wrapping_mul(2));
        let total = done.len() * SEGS;
        let mut at_ready = true;
        // Each read's completion in read order: one read per send straight into `done` (a
        // read completes after its send's WQE was ready), else raised into `done` below.
        let mut buf = [0; 2 * SEND_RUN];
        let rd = if SEGS == 1 {
            &mut *done
        } else {
            &mut buf[..total]
        };
        let mut j = 0;
        while j < total {
            let room = reads.lazy_room().min(total - j);
            if room == 0 {
                // The tracker must retire reads (or is short of tags): this read through it.
                (dma.up, dma.down) = (up, down);
                let (u, d) = segs[j % SEGS];
                rd[j] = dma.read_booked(reads, book_at, ready, eng, u, d, latency);
                (up, down) = (dma.up, dma.down);
                // Issued at `ready` unless it waited for a tag: then it completes later than
                // its lanes say.
                at_ready &= rd[j] == base.wrapping_add(up.free_at()).wrapping_add(down.free_at());
                j += 1;
                continue;
            }
            let run = &mut rd[j..j + room];
            for (k, c) in run.iter_mut().enumerate() {
                let (u, d) = segs[(j + k) % SEGS];
                *c = base
                    .wrapping_add(up.reserve_queued(u).end)
                    .wrapping_add(down.reserve_queued(d).end);
            }
            reads.issue_lazy_run(ready, run);
            j += room;
        }
        (dma.up, dma.down) = (up, down);
        if SEGS > 1 {
            for (d, r) in done.iter_mut().zip(buf.chunks_exact(SEGS)) {
                *d = r.iter().fold(*d, |a, &c| a.max(c));
            }
        }
        at_ready
    }

    /// Untimed: a frame of `len` bytes left after the NIC read the host data segments `host`
    /// (0 = none) and `nic` bytes of nicmem (the charges of [`NicModel::tx_host_read`],
    /// [`NicModel::tx_nic_read`] and [`NicModel::tx_wire`], deferred to [`NicModel::tx_flush`]).
    #[inline]
    pub(crate) fn tx_untimed(&mut self, host: [u32; 2], nic: u32, len: usize) {
        let r = &mut self.tx_run;
        if r.host == host && r.nic == nic && r.len == len as u32 {
            r.n += 1;
            return;
        }
        self.tx_flush();
        self.tx_run = TxRun {
            host,
            nic,
            len: len as u32,
            n: 1,
        };
    }

    /// Untimed: `n` sends like [`NicModel::tx_untimed`]'s (the same charges as `n` calls).
    #[inline]
    pub(crate) fn tx_untimed_many(&mut self, host: [u32; 2], nic: u32, len: usize, n: u64) {
        if n == 0 {
            return;
        }
        let r = &mut self.tx_run;
        if r.host == host && r.nic == nic && r.len == len as u32 {
            r.n += n;
            return;
        }
        self.tx_flush();
        self.tx_run = TxRun {
            host,
            nic,
            len: len as u32,
            n,
        };
    }

    /// Untimed: the reads of a WQE that failed after them (no frame left).
    pub(crate) fn tx_reads_untimed(&mut self, host: [u32; 2], nic: u32) {
        for h in host.into_iter().filter(|&h| h > 0) {
            self.tx_host_read(0, h);
        }
        if nic > 0 {
            self.tx_nic_read(0, nic);
        }
    }

    /// Charges the pending run of untimed transmits.
    #[inline]
    pub(crate) fn tx_flush(&mut self) {
        let r = std::mem::take(&mut self.tx_run);
        if r.n == 0 {
            return;
        }
        let op = &self.k.op;
        let reads = &mut self.k.reads;
        let mut tr = Traffic::ZERO;
        for h in r.host.into_iter().filter(|&h| h > 0) {
            tr += reads.get(h, |n| op.tx_data_read(n));
        }
        charge_tx_run(&mut self.c, &self.k, &r, tr);
    }

    /// A WQE of `nbb` WQEBBs finished at `done` (its frame left, or it failed).
    #[inline]
    pub(crate) fn tx_done(&mut self, done: Ps, nbb: u32) {
        if let Some(t) = &mut self.t {
            t.tx_inflight_push(done, nbb);
        }
    }

    /// The NIC wrote a Tx completion at `at`.
    #[inline]
    pub(crate) fn tx_cqe(&mut self, at: Ps) {
        let tr = self.k.cqe;
        self.charge(Item::TxCqe, tr);
        self.c.tx_cqes += 1;
        self.c.host_bytes_written += self.k.cqe_size;
        if let Some(t) = &mut self.t {
            // Booked now, like the reads of the same doorbell (nobody waits for its visibility:
            // reclaim is functional).
            let now = t.now.min(at);
            let d = t.tl.posted_write(now, tr).done;
            t.last = t.last.max(d.max(at));
        }
    }

    /// A nicmem payload of `n` bytes was freed.
    #[inline]
    pub(crate) fn nicmem_freed(&mut self, n: u64) {
        self.c.nicmem_live_bytes = self.c.nicmem_live_bytes.saturating_sub(n);
    }

    /// Host bytes per packet of `mode` for DDIO (`len` frame bytes, split offset `h`).
    pub(crate) fn host_bytes(mode: DatapathMode, len: u64, h: u64) -> u64 {
        host_bytes_per_packet(mode, len, h)
    }

    /// Counts a burst; true every few bursts, when live counters should be published.
    #[inline]
    pub(crate) fn tick(&mut self) -> bool {
        self.bursts += 1;
        if self.bursts < self.live_every {
            return false;
        }
        self.bursts = 0;
        true
    }

    pub(crate) fn publish(&self, l: &LiveModel) {
        let p = self.counters().pcie();
        l.up_bytes.store(p.up_bytes, Ordering::Relaxed);
        l.down_bytes.store(p.down_bytes, Ordering::Relaxed);
        if let Some(t) = &self.t {
            l.up_busy_ps.store(
                t.tl.get(ResourceKind::PcieUp).busy_ps() as u64,
                Ordering::Relaxed,
            );
            l.down_busy_ps.store(
                t.tl.get(ResourceKind::PcieDown).busy_ps() as u64,
                Ordering::Relaxed,
            );
            l.now_ps.store(t.now, Ordering::Relaxed);
        }
    }

    /// The final report (charges a partly filled compressed CQE slot).
    pub(crate) fn report(&mut self) -> QueueModelReport {
        self.rx_flush();
        self.tx_flush();
        if self.rx_mini > 0 {
            self.rx_mini = 0;
            let tr = self.k.cqe;
            self.charge(Item::RxCqe, tr);
            self.c.host_bytes_written += self.k.cqe_size;
        }
        QueueModelReport {
            counters: self.c,
            timed: self.t.as_ref().map(|t| t.report()),
        }
    }
}

/// Shared handle type of a port's model sink.
pub type ModelSinkRef = Arc<ModelSink>;

#[cfg(test)]
mod memory_tests {
    use super::*;

    fn contention(nf_reads: u32) -> MemoryContention {
        MemoryContention::new(&HardwareProfile::default(), nf_reads, 0).unwrap()
    }

    #[test]
    fn a_bursts_lost_headers_overlap_up_to_the_fill_buffers() {
        let p = HardwareProfile::default();
        let fb = f64::from(p.host.cycles.fill_buffers);
        assert_eq!(fb, 12.0);
        let mut m = contention(0);
        m.price(0, 0);
        assert_eq!(m.var_milli, 0, "all hits: no cycles beyond the fixed ones");
        assert_eq!(m.burst_stall(32), 0);
        let per_access = m.curve.idle_ns() * p.host.cpu_ghz - f64::from(p.host.cycles.llc_access);
        let cycles = |m: &MemoryContention, n| m.burst_stall(n) as f64 / 1000.0;
        // Every header lost: a burst of 32 waits 32 / 12 rounds of DRAM accesses, not 32.
        m.price(1_000_000, 0);
        assert_eq!(m.var_milli, 0, "header misses are charged per burst");
        assert!((cycles(&m, 32) - 32.0 / fb * per_access).abs() < 0.01);
        // A lone packet's miss overlaps with nothing: a full access.
        assert!((cycles(&m, 1) - per_access).abs() < 0.01);
        // Fewer lost lines than fill buffers still wait one whole round...
        assert!((cycles(&m, 8) - per_access).abs() < 0.01);
        // ...and below one expected lost line, the chance of one.
        m.price(100_000, 0);
        assert!((cycles(&m, 5) - 0.5 * per_access).abs() < 0.01);
        assert!((cycles(&m, 32) - per_access).abs() < 0.01);
        // Evicted metadata lines overlap the same way, in their own loop: a burst of 32 with
        // every metadata line lost waits 64 / 12 rounds, and with the headers lost too, both.
        m.price(0, 1_000_000);
        assert_eq!(m.var_milli, 0);
        let meta = f64::from(p.host.cycles.meta_lines) * 32.0 / fb * per_access;
        assert!((cycles(&m, 32) - meta).abs() < 0.01);
        m.price(1_000_000, 1_000_000);
        assert!((cycles(&m, 32) - meta - 32.0 / fb * per_access).abs() < 0.01);
        // The NFs' own reads are dependent lookups: a full loaded access each, per packet.
        let mut nat = contention(2);
        nat.price(0, 0);
        let l = nat.curve.idle_ns() * p.host.cpu_ghz;
        assert!((nat.var_milli as f64 / 1000.0 - 2.0 * l).abs() < 0.01);
    }

    #[test]
    fn a_queue_of_a_mixed_port_gets_at_least_its_round_robin_turn() {
        let prof = HardwareProfile::default();
        let frac = |mode: DatapathMode, k: u16| {
            queue_fraction(
                &ModelParams {
                    profile: &prof,
                    mode,
                    port_mode: DatapathMode::NicInline,
                    queues: 7,
                    nicmem_queues: k,
                    split_offset: 64,
                    tx_inline: 64,
                    max_frame: 1514,
                    rx_ring: 1024,
                    tx_ring: 1024,
                    timing: None,
                },
                1518,
            )
        };
        // One nicmem queue of seven: its bytes alone would give it ~2 % of the link; round
        // robin gives it its turn, 1/7. The split queues keep their proportional share.
        assert_eq!(frac(DatapathMode::NicInline, 1), 1.0 / 7.0);
        let split = frac(DatapathMode::Split, 1);
        assert!(split > 1.0 / 7.0 && split < 1.0 / 6.0, "{split}");
        // Seven split queues, or seven nicmem ones: 1/7 each.
        assert!((frac(DatapathMode::Split, 0) - 1.0 / 7.0).abs() < 1e-12);
        assert_eq!(frac(DatapathMode::NicInline, 7), 1.0 / 7.0);
    }

    /// A timed model of one queue in `mode` on the default profile.
    pub(super) fn timed_model(mode: DatapathMode) -> NicModel {
        let profile = HardwareProfile::default();
        let timing = VnicTiming::default();
        NicModel::new(&ModelParams {
            profile: &profile,
            mode,
            port_mode: mode,
            queues: 1,
            nicmem_queues: 1,
            split_offset: 64,
            tx_inline: 0,
            max_frame: 1514,
            rx_ring: 64,
            tx_ring: 64,
            timing: Some(&timing),
        })
        .unwrap()
    }

    /// A host-mode queue whose every packet DDIO lost, its DRAM bytes so far after `rx`.
    fn missed_dram_bytes(mode: DatapathMode, rx: &[(u32, u32, u32)]) -> u64 {
        let mut m = timed_model(mode);
        m.t.as_deref_mut().unwrap().miss_ppm = 1_000_000;
        for &(hl, hp, np) in rx {
            m.rx_timed(0, hl, hp, np);
        }
        m.c.dram_bytes
    }

    #[test]
    fn a_lost_packet_costs_its_bytes_its_completion_and_a_partial_lines_merge() {
        // 1500 B frame, 1496 B DMA'd: write-back and re-read of the data and of the 64 B CQE,
        // the read-for-ownership of the last line (1496 = 23 x 64 + 24), and the second
        // write-back of the header line the NF rewrote.
        let whole = 2 * (1496 + 64) + 64 + 64;
        assert_eq!(
            missed_dram_bytes(DatapathMode::Host, &[(1496, 0, 0)]),
            whole
        );
        // split: a full 64 B header line, then the payload ends inside a line: the same.
        assert_eq!(
            missed_dram_bytes(DatapathMode::Split, &[(64, 1432, 0)]),
            whole
        );
        // A DMA that ends on a line boundary merges nothing.
        assert_eq!(
            missed_dram_bytes(DatapathMode::Host, &[(1472, 0, 0)]),
            2 * (1472 + 64) + 64
        );
        // nmNFV: only the header line and the CQE live in host memory.
        assert_eq!(
            missed_dram_bytes(DatapathMode::NicInline, &[(64, 0, 1432)]),
            2 * (64 + 64) + 64
        );
        // A 60 B frame is one partial line, rewritten whole.
        assert_eq!(
            missed_dram_bytes(DatapathMode::NicInline, &[(60, 0, 0)]),
            2 * (60 + 64) + 64 + 60
        );
    }

    #[test]
    fn written_bytes_hold_dram_longer_than_read_bytes() {
        // A lost 1472 B packet: 1536 B read back and 1600 B written back (data, CQE and the
        // rewritten header); the DRAM timeline holds the writes at their MLC-measured cost in
        // read bytes.
        let mut lost = timed_model(DatapathMode::Host);
        lost.t.as_deref_mut().unwrap().miss_ppm = 1_000_000;
        lost.rx_timed(0, 1472, 0, 0);
        let t = lost.t.as_deref().unwrap();
        let wc = write_cost(&HardwareProfile::default().host.dram_read_write_bandwidth).unwrap();
        assert_eq!(t.mem.write_milli, (wc * 1000.0).round() as u64);
        let booked = 1536 + 1600 * t.mem.write_milli / 1000;
        let mut same = timed_model(DatapathMode::Host);
        let s = same.t.as_deref_mut().unwrap();
        s.tl.get_mut(ResourceKind::Hostmem).reserve(0, booked);
        let busy = |t: &Timing| t.tl.get(ResourceKind::Hostmem).busy_ps();
        assert_eq!(busy(t), busy(s));
        assert!(booked > 1536 + 1600 + 400, "{booked}");
        // The traffic counted is the bytes themselves.
        assert_eq!(lost.c.dram_bytes, 1536 + 1600);
    }

    #[test]
    fn the_nfs_dirty_lines_are_written_back() {
        let p = HardwareProfile::default();
        // Two reads and one written-back line per packet: three lines of DRAM traffic, but
        // only the reads stall the core.
        let rw = MemoryContention::new(&p, 2, 1).unwrap();
        let r = MemoryContention::new(&p, 2, 0).unwrap();
        // Random lines hold DRAM as long as 64 / 0.24 = 267 sequential bytes each.
        assert_eq!(p.host.dram_random_fraction, 0.24);
        // Two random reads and a random write-back, the write at its DRAM time in read bytes,
        // and each read's pair line (the L2 spatial prefetcher) at the sequential rate.
        let wc = write_cost(&p.host.dram_read_write_bandwidth).unwrap();
        assert!(p.host.adjacent_line_prefetch);
        assert_eq!(
            rw.nf_dram_bytes,
            ((2.0 + wc) * 64.0 / 0.24_f64 + 2.0 * 64.0).round() as u64
        );
        assert!(rw.nf_dram_bytes > 800 + 128, "{}", rw.nf_dram_bytes);
        assert_eq!(r.nf_dram_bytes, 533 + 128);
        let mut off = p.clone();
        off.host.adjacent_line_prefetch = false;
        assert_eq!(
            MemoryContention::new(&off, 2, 0).unwrap().nf_dram_bytes,
            533
        );
        assert_eq!(rw.var_milli, r.var_milli);
        // The profiles' NAT and LB update a flow entry per packet.
        assert_eq!(p.host.cycles.nf_dram_writes.get("nat"), Some(&1));
        assert_eq!(p.host.cycles.nf_dram_writes.get("lb"), Some(&1));
    }

    #[test]
    fn a_mixed_ports_pcie_figure_is_its_bytes_against_the_link() {
        // Two queues over 1 ms on a 100 Gb/s link: one moved 10 MB on a 90 % share (busy 889
        // us), the other 0.1 MB on a 50 % round-robin turn it mostly left idle (busy 16 us). The
        // link carried 10.1 MB in 1 ms: 80.8 %, not the mean of the shares' use (45.2 %).
        let report = |up: u64, share: f64| {
            let mut c = NicCounters::default();
            c.items[Item::RxData as usize].up_bytes = up;
            let busy = up as f64 * 8.0 / (100e9 * share) * 1e12;
            let mut busy_ps = [0.0; 7];
            let up_at = ResourceKind::ALL
                .iter()
                .position(|k| *k == ResourceKind::PcieUp);
            busy_ps[up_at.unwrap()] = busy;
            QueueModelReport {
                counters: c,
                timed: Some(TimedReport {
                    virtual_clock: true,
                    start_ps: 0,
                    end_ps: 1_000_000_000,
                    busy_ps,
                    cpu_busy_ps: 0,
                    latency_ns: Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap(),
                    latency_exact: LatencyExact::default(),
                    read_stalls: 0,
                    ddio_hit: 1.0,
                    dram_latency_ns: 0.0,
                    offered_gbps: None,
                    link_bps: 100e9,
                }),
            }
        };
        let m = PortModel::summarize(&[report(10_000_000, 0.9), report(100_000, 0.5)]);
        assert!(
            (m.util("pcie_up") - 0.808).abs() < 1e-9,
            "{}",
            m.util("pcie_up")
        );
        assert_eq!(m.util("pcie_down"), 0.0);
    }

    #[test]
    fn a_busy_memory_system_makes_every_dram_access_dearer() {
        let p = HardwareProfile::default();
        let mut m = contention(2);
        m.update(0, 0.0, 0, 0);
        let idle = m.var_milli;
        let idle_adder = m.miss_adder_ps;
        assert_eq!(idle_adder, p.host.dram_latency_adder_ns * PS_PER_NS);
        // DRAM busy 60 % of a window: the latency climbs the loaded-latency curve.
        m.update(DRAM_WINDOW_PS, 0.6 * DRAM_WINDOW_PS as f64, 0, 0);
        assert!(m.latency_ns > m.curve.idle_ns() + 5.0, "{}", m.latency_ns);
        assert!(m.var_milli > idle, "{} <= {idle}", m.var_milli);
        assert!(m.miss_adder_ps > idle_adder);
        // An idle window brings it back down (smoothed over windows).
        let loaded = m.latency_ns;
        m.update(2 * DRAM_WINDOW_PS, 0.6 * DRAM_WINDOW_PS as f64, 0, 0);
        assert!(m.latency_ns < loaded);
    }
}

#[cfg(test)]
mod latency_tests {
    use super::memory_tests::timed_model;
    use super::*;

    #[test]
    fn windowed_latency_counts_equal_recording_every_sample() {
        // A ramp that leaves the first window, a plateau the window moves to, outliers on both
        // sides, and repeats: the report must hold exactly the samples recorded one by one.
        let mut samples: Vec<u64> = (0..3000).map(|i| 1_000 + 7 * i).collect();
        samples.extend((0..5000).map(|i| 40_000 + (i * 37) % 900));
        samples.extend([1, 5, 59_999_999_999, 3, 40_100, 40_100]);
        let mut m = timed_model(DatapathMode::Host);
        let mut want = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        let mut exact = LatencyExact::default();
        let t = m.t.as_deref_mut().unwrap();
        for &s in &samples {
            t.record_latency(s);
            want.saturating_record(s);
            exact.record(s);
        }
        assert!(t.lat_base > 30_000, "the window moved to the plateau");
        let r = t.report();
        assert_eq!(r.latency_ns, want);
        assert_eq!(r.latency_exact, exact);
        assert_eq!(r.latency_ns.len(), samples.len() as u64);
    }
}
