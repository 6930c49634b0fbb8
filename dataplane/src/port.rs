//! The port abstraction every driver implements.
//!
//! A [`Port`] is a NIC port with one or more queue pairs. For the per-core run loop the port hands
//! out its queue pairs ([`Port::take_queues`]); each worker thread owns one [`Queue`] per port and
//! calls `rx_burst` / `tx_burst` on it without locks. Counters are kept per queue and summed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::burst::Burst;
use crate::verdict::DropCounts;

/// What a port can do; probed at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Hardware Rx buffer split (header/payload into separate buffers).
    pub rx_buffer_split: bool,
    /// Payload buffers can live in on-NIC memory.
    pub nicmem: bool,
    /// Tx descriptors can carry inline header bytes.
    pub tx_inline: bool,
    /// RSS across queues.
    pub rss: bool,
    /// Maximum frame length (without FCS) the port accepts.
    pub max_frame: usize,
    /// Number of queue pairs.
    pub queues: u16,
}

/// A port's link as its driver last learned it, and the changes it saw. Shared between the
/// driver, which reports what it learns (DPDK: the PMD's link-state events and the worker's
/// reads of the link status), and the operator's surfaces, which read it from their own
/// threads without asking the workers: the health check counts a port whose link is down as
/// unhealthy, the metrics endpoint exports it.
#[derive(Debug, Default)]
pub struct LinkState {
    up: AtomicBool,
    down_events: AtomicU64,
    up_events: AtomicU64,
}

impl LinkState {
    /// A link that is `up` now, with no change seen yet.
    pub fn new(up: bool) -> Self {
        Self {
            up: AtomicBool::new(up),
            ..Self::default()
        }
    }

    /// Notes a status report: counts a change from the last one.
    pub fn report(&self, up: bool) {
        let was = self.up.swap(up, Ordering::Relaxed);
        if was && !up {
            self.down_events.fetch_add(1, Ordering::Relaxed);
        } else if !was && up {
            self.up_events.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether the link is up (as last reported).
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Times the link went down.
    pub fn down_events(&self) -> u64 {
        self.down_events.load(Ordering::Relaxed)
    }

    /// Times the link came up.
    pub fn up_events(&self) -> u64 {
        self.up_events.load(Ordering::Relaxed)
    }
}

/// Per-queue counters (all monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Packets handed to software by `rx_burst`.
    pub rx_packets: u64,
    /// Bytes of those packets (without FCS).
    pub rx_bytes: u64,
    /// Packets whose payload came from the primary (nicmem) ring.
    pub rx_primary: u64,
    /// Packets whose payload came from the secondary (host) ring.
    pub rx_secondary: u64,
    /// Rx buffer allocations that failed (pool empty) while refilling rings.
    pub rx_nombuf: u64,
    /// Frames the NIC dropped because no Rx descriptor was posted (DPDK `imissed`).
    pub rx_missed: u64,
    /// Frames dropped because they exceed the port's maximum frame length.
    pub rx_oversize: u64,
    /// Frames the NIC dropped because its receive buffer was full: the PCIe upstream could not
    /// keep up (timed virtual NIC runs).
    pub rx_pcie_overrun: u64,
    /// Descriptors rejected by the NIC (bad key, range or length) with an error completion.
    pub desc_errors: u64,
    /// Packets accepted by `tx_burst`.
    pub tx_packets: u64,
    /// Bytes of those packets.
    pub tx_bytes: u64,
    /// Packets `tx_burst` could not take (ring full).
    pub tx_full: u64,
    /// Frames put on the wire.
    pub wire_tx_frames: u64,
    /// Packets handed to this queue that belong to another driver's buffers (a wiring bug):
    /// returned to their own owner, not sent.
    pub tx_foreign: u64,
    /// Injected faults and recoveries (virtual NIC `[vnic.faults]`; zero elsewhere).
    pub faults: FaultCounts,
}

/// Injected faults of one queue and what the driver did about them (all monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Times the link went down.
    pub link_down: u64,
    /// Frames that arrived while the link was down (lost).
    pub link_down_drops: u64,
    /// Rx descriptors corrupted (each refused by the NIC with an error completion when a frame
    /// reaches it; the buffer is recycled).
    pub rx_desc_corrupted: u64,
    /// Tx WQEs whose DMA read failed (an error completion; the frame is lost, its buffers freed).
    pub tx_dma_errors: u64,
    /// Doorbells the NIC never saw.
    pub doorbells_lost: u64,
    /// Doorbells the driver rang again because the WQEs of a lost one were still waiting.
    pub doorbells_rerung: u64,
    /// Device resets this queue recovered from (its rings re-initialised and refilled).
    pub device_resets: u64,
    /// Frames the NIC had received but not yet handed over when the device reset (lost).
    pub reset_rx_drops: u64,
    /// Frames accepted for sending that the NIC had not yet read when the device reset (lost).
    pub reset_tx_drops: u64,
    /// Times the driver recovered the send queue from the error state an error completion put
    /// it in.
    pub sq_recoveries: u64,
    /// Frames posted behind a failed WQE, dropped when the driver recovered the send queue.
    pub sq_error_drops: u64,
}

impl FaultCounts {
    /// Adds `o` into `self`.
    pub fn add(&mut self, o: &FaultCounts) {
        self.link_down += o.link_down;
        self.link_down_drops += o.link_down_drops;
        self.rx_desc_corrupted += o.rx_desc_corrupted;
        self.tx_dma_errors += o.tx_dma_errors;
        self.doorbells_lost += o.doorbells_lost;
        self.doorbells_rerung += o.doorbells_rerung;
        self.device_resets += o.device_resets;
        self.reset_rx_drops += o.reset_rx_drops;
        self.reset_tx_drops += o.reset_tx_drops;
        self.sq_recoveries += o.sq_recoveries;
        self.sq_error_drops += o.sq_error_drops;
    }

    /// Frames lost to injected faults, all reasons: what `rx = tx + drops` leaves out.
    pub fn frames_lost(&self) -> u64 {
        self.link_down_drops
            + self.tx_dma_errors
            + self.reset_rx_drops
            + self.reset_tx_drops
            + self.sq_error_drops
    }

    /// The counters as `(name, value)`, in the order of the fields.
    pub fn named(&self) -> [(&'static str, u64); 11] {
        [
            ("link_down", self.link_down),
            ("link_down_drops", self.link_down_drops),
            ("rx_desc_corrupted", self.rx_desc_corrupted),
            ("tx_dma_errors", self.tx_dma_errors),
            ("doorbells_lost", self.doorbells_lost),
            ("doorbells_rerung", self.doorbells_rerung),
            ("device_resets", self.device_resets),
            ("reset_rx_drops", self.reset_rx_drops),
            ("reset_tx_drops", self.reset_tx_drops),
            ("sq_recoveries", self.sq_recoveries),
            ("sq_error_drops", self.sq_error_drops),
        ]
    }
}

impl QueueStats {
    /// The counters' names, in the order of [`QueueStats::to_array`] (the field names: what
    /// telemetry and extended statistics call them).
    pub const NAMES: [&'static str; 14] = [
        "rx_packets",
        "rx_bytes",
        "rx_primary",
        "rx_secondary",
        "rx_nombuf",
        "rx_missed",
        "rx_oversize",
        "rx_pcie_overrun",
        "desc_errors",
        "tx_packets",
        "tx_bytes",
        "tx_full",
        "wire_tx_frames",
        "tx_foreign",
    ];

    /// The counters as an array, in the order of [`QueueStats::NAMES`] (for publishing them
    /// through a fixed set of atomics).
    pub fn to_array(&self) -> [u64; 14] {
        [
            self.rx_packets,
            self.rx_bytes,
            self.rx_primary,
            self.rx_secondary,
            self.rx_nombuf,
            self.rx_missed,
            self.rx_oversize,
            self.rx_pcie_overrun,
            self.desc_errors,
            self.tx_packets,
            self.tx_bytes,
            self.tx_full,
            self.wire_tx_frames,
            self.tx_foreign,
        ]
    }

    /// The counters from an array in the order of [`QueueStats::NAMES`]; injected-fault counts
    /// are not among them (they are reported in the run's final summary) and start at zero.
    pub fn from_array(a: [u64; 14]) -> Self {
        let [
            rx_packets,
            rx_bytes,
            rx_primary,
            rx_secondary,
            rx_nombuf,
            rx_missed,
            rx_oversize,
            rx_pcie_overrun,
            desc_errors,
            tx_packets,
            tx_bytes,
            tx_full,
            wire_tx_frames,
            tx_foreign,
        ] = a;
        Self {
            rx_packets,
            rx_bytes,
            rx_primary,
            rx_secondary,
            rx_nombuf,
            rx_missed,
            rx_oversize,
            rx_pcie_overrun,
            desc_errors,
            tx_packets,
            tx_bytes,
            tx_full,
            wire_tx_frames,
            tx_foreign,
            faults: FaultCounts::default(),
        }
    }

    /// Adds `o` into `self`.
    pub fn add(&mut self, o: &QueueStats) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.rx_primary += o.rx_primary;
        self.rx_secondary += o.rx_secondary;
        self.rx_nombuf += o.rx_nombuf;
        self.rx_missed += o.rx_missed;
        self.rx_oversize += o.rx_oversize;
        self.rx_pcie_overrun += o.rx_pcie_overrun;
        self.desc_errors += o.desc_errors;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.tx_full += o.tx_full;
        self.wire_tx_frames += o.wire_tx_frames;
        self.tx_foreign += o.tx_foreign;
        self.faults.add(&o.faults);
    }
}

/// One queue pair of a port, owned by one worker.
///
/// Every call works on whole bursts: `rx_burst` appends packets, `tx_burst` takes every packet of
/// a burst (transmitting what the ring has room for and freeing the rest), `free_burst` gives
/// packets back. A queue accepts any packet of its own driver instance received by the same
/// worker (on any port), and refuses packets of another owner (they are returned to their own
/// owner and counted as `tx_foreign`), so a wrong wiring can never make a driver misread a handle.
pub trait Queue: Send + std::any::Any {
    /// Appends up to `burst.room()` received packets to `burst`, each with verdict `Tx(port)` of
    /// the port it arrived on. Returns the number received. A burst holding packets of another
    /// owner receives nothing.
    fn rx_burst(&mut self, burst: &mut Burst) -> usize;

    /// Takes every packet of `pkts` for transmission: what the Tx ring has room for is queued,
    /// the rest is freed and counted in `drops` by reason (`tx_full` when the ring is full,
    /// `tx_invalid` when the packet cannot be described or belongs to another owner). `pkts` is
    /// empty afterwards. Returns the number queued.
    fn tx_burst(&mut self, pkts: &mut Burst, drops: &mut DropCounts) -> usize;

    /// Returns every packet of `pkts` (dropped by the caller) to its buffers' pools; `pkts` is
    /// empty afterwards.
    fn free_burst(&mut self, pkts: &mut Burst);

    /// Appends a packet holding `frame` to `burst`, built by software from this queue's buffers
    /// (a reply the slow path sends, a test's frame), with verdict `Tx` of this queue's port.
    /// The layout is this queue's (header segment, payload in a host buffer). `false` when the
    /// frame is longer than the port's largest frame, no buffer is left, the burst is full or it
    /// holds packets of another owner.
    fn push_frame(&mut self, burst: &mut Burst, frame: &[u8]) -> bool;

    /// Makes the NIC finish everything posted and reclaims completed Tx buffers.
    fn flush(&mut self);

    /// True when the wire has nothing more to deliver and nothing is in flight in the queue.
    fn idle(&self) -> bool;

    /// Counters.
    fn stats(&self) -> QueueStats;

    /// Driver-specific extended counters (name, value).
    fn xstats(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
}

/// A NIC port.
pub trait Port: Send {
    /// Port name (for logs and stats).
    fn name(&self) -> &str;

    /// Driver name (`vnic`, `dpdk`).
    fn driver(&self) -> &str;

    /// What the port can do.
    fn capabilities(&self) -> Capabilities;

    /// Hands out the queue pairs (once). The worker with index `i` gets queue `i`.
    fn take_queues(&mut self) -> Vec<Box<dyn Queue>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_stats_round_trip_through_their_array() {
        let a: [u64; 14] = std::array::from_fn(|i| 100 + i as u64);
        let q = QueueStats::from_array(a);
        assert_eq!(q.to_array(), a);
        assert_eq!((q.rx_packets, q.tx_foreign), (100, 113));
        assert_eq!(QueueStats::NAMES[12], "wire_tx_frames");
        assert_eq!(q.wire_tx_frames, 112);
    }
}
