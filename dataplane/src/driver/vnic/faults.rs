//! Faults the virtual NIC injects on purpose (`[vnic.faults]`), so the driver's handling of
//! them runs in tests and soaks: the link going down for a while, a corrupted Rx descriptor, a
//! DMA read of a Tx WQE or its payload that fails, a doorbell the NIC never sees, a device
//! reset.
//!
//! A failed Tx DMA read also puts the send queue in the error state, as an error completion does
//! on mlx5: the NIC processes no further WQE of that queue until the driver recovers it (on a
//! real NIC by moving the SQ from error through reset back to ready; the mlx5 PMD then drops the
//! WQEs posted behind the failed one). A device reset drops every queue's descriptors and work
//! in flight; each queue's driver notices it on its next poll, takes every buffer back, counts
//! the frames it lost, re-initialises its rings and refills them.
//!
//! Injection is seeded and counted in events (frames, WQEs, doorbells), not in time, so the same
//! config injects the same faults at the same packets on either clock. Each kind has a mean
//! interval; the gap to the next event is drawn uniformly from `1..=2 * every - 1` with a
//! generator seeded by `seed`, the port and the queue. With every interval 0 the queue holds no
//! fault state at all, and its packet path pays one predictable branch per burst.

use super::desc::SEG;
use crate::port::FaultCounts;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What to inject and how often (0 = never). Intervals are means, in the events they count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Seed of the gaps between events and of the kinds of corruption.
    pub seed: u64,
    /// Frames received between link-down events.
    pub link_down_every: u64,
    /// Frames that arrive (and are lost) while the link is down, per event.
    pub link_down_frames: u64,
    /// Frames received between corrupted Rx descriptors.
    pub rx_desc_every: u64,
    /// WQEs posted between failed Tx DMA reads.
    pub tx_dma_every: u64,
    /// Doorbells between lost doorbells.
    pub doorbell_lost_every: u64,
    /// Frames received by queue 0 between device resets (each resets every queue of the port).
    pub reset_every: u64,
}

impl FaultConfig {
    /// True when any fault is injected.
    pub fn enabled(&self) -> bool {
        self.link_down_every > 0
            || self.rx_desc_every > 0
            || self.tx_dma_every > 0
            || self.doorbell_lost_every > 0
            || self.reset_every > 0
    }
}

/// The resets a port's device went through, shared by its queues: queue 0 counts the frames
/// between resets and bumps the count; every queue recovers once per count it has not seen.
#[derive(Debug, Default)]
pub(crate) struct DeviceResets(AtomicU64);

impl DeviceResets {
    /// A new, shared count for one port.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}

/// How an injected Rx descriptor corruption damages the descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RxCorruption {
    /// A memory key no region of the queue has.
    BadKey,
    /// An address outside the registered region.
    OutsideRegion,
    /// A byte count beyond the posted buffer.
    BeyondBuffer,
}

impl RxCorruption {
    /// Damages the encoded data segment `seg` (byte count, key, address; big endian).
    pub(crate) fn apply(self, seg: &mut [u8; SEG]) {
        let mut w = u128::from_be_bytes(*seg);
        w ^= match self {
            RxCorruption::BadKey => 0x00a5_5a00_u128 << 64,
            RxCorruption::OutsideRegion => 1u128 << 47,
            RxCorruption::BeyondBuffer => 1u128 << (96 + 20),
        };
        *seg = w.to_be_bytes();
    }
}

/// One queue's injection state and counters.
#[derive(Clone, Debug)]
pub(crate) struct FaultState {
    cfg: FaultConfig,
    rng: u64,
    /// Frames seen (received, refused, or lost to the link) and WQEs and doorbells posted.
    frames: u64,
    wqes: u64,
    doorbells: u64,
    next_link_down: u64,
    next_rx_desc: u64,
    next_tx_dma: u64,
    next_doorbell_lost: u64,
    next_reset: u64,
    /// Queue 0 triggers the port's device resets.
    triggers_resets: bool,
    /// The port's device resets, and how many of them this queue has recovered from.
    device: Arc<DeviceResets>,
    resets_seen: u64,
    /// The send queue is in the error state after an error completion: the NIC takes no WQE
    /// until the driver recovers it.
    pub sq_error: bool,
    /// Frames still to be lost in the current link-down period.
    pub down_left: u64,
    /// A doorbell was lost and the WQEs it covered are still waiting.
    pub doorbell_owed: bool,
    /// A Tx DMA read error is due at the next doorbell the NIC sees.
    pub tx_fail_pending: bool,
    /// What was injected and recovered.
    pub counts: FaultCounts,
}

impl FaultState {
    /// The state of queue `queue` of port `port`, whose device resets are counted in `device`,
    /// or `None` when nothing is injected.
    pub(crate) fn new(
        cfg: &FaultConfig,
        port: u16,
        queue: u16,
        device: &Arc<DeviceResets>,
    ) -> Option<Box<Self>> {
        if !cfg.enabled() {
            return None;
        }
        let mut s = Self {
            cfg: cfg.clone(),
            rng: cfg.seed ^ (u64::from(port) << 48) ^ (u64::from(queue) << 32) ^ 0x6a09_e667,
            frames: 0,
            wqes: 0,
            doorbells: 0,
            next_link_down: 0,
            next_rx_desc: 0,
            next_tx_dma: 0,
            next_doorbell_lost: 0,
            next_reset: 0,
            triggers_resets: queue == 0,
            device: device.clone(),
            resets_seen: 0,
            sq_error: false,
            down_left: 0,
            doorbell_owed: false,
            tx_fail_pending: false,
            counts: FaultCounts::default(),
        };
        s.next_link_down = s.gap(cfg.link_down_every);
        s.next_rx_desc = s.gap(cfg.rx_desc_every);
        s.next_tx_dma = s.gap(cfg.tx_dma_every);
        s.next_doorbell_lost = s.gap(cfg.doorbell_lost_every);
        s.next_reset = s.gap(cfg.reset_every);
        Some(Box::new(s))
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Events until the next fault of a kind with mean interval `every` (`u64::MAX`: never).
    fn gap(&mut self, every: u64) -> u64 {
        if every == 0 {
            return u64::MAX;
        }
        let span = every.saturating_mul(2).saturating_sub(1).max(1);
        1 + self.next() % span
    }

    /// Notes that the receive side has seen `total` frames so far (received or lost to the
    /// link). Returns true when the link goes down now (the next
    /// [`FaultConfig::link_down_frames`] frames are then lost).
    pub(crate) fn frames_seen(&mut self, total: u64) -> bool {
        self.frames = total;
        if self.frames < self.next_link_down {
            return false;
        }
        self.next_link_down = self
            .frames
            .saturating_add(self.gap(self.cfg.link_down_every));
        self.down_left = self.cfg.link_down_frames;
        self.counts.link_down += 1;
        true
    }

    /// The corruption to apply to the next Rx descriptor, if one is due.
    pub(crate) fn rx_corruption_due(&mut self) -> Option<RxCorruption> {
        if self.frames < self.next_rx_desc {
            return None;
        }
        self.next_rx_desc = self.frames.saturating_add(self.gap(self.cfg.rx_desc_every));
        Some(match self.next() % 3 {
            0 => RxCorruption::BadKey,
            1 => RxCorruption::OutsideRegion,
            _ => RxCorruption::BeyondBuffer,
        })
    }

    /// Counts `n` WQEs posted; true when a Tx DMA read fails now.
    pub(crate) fn tx_dma_due(&mut self, n: u64) -> bool {
        self.wqes += n;
        if self.wqes < self.next_tx_dma {
            return false;
        }
        self.next_tx_dma = self.wqes.saturating_add(self.gap(self.cfg.tx_dma_every));
        true
    }

    /// True when the device reset since this queue last looked (the driver must then recover
    /// the queue). Queue 0 resets the device when `frames`, the frames it has seen so far,
    /// reach the next reset.
    pub(crate) fn reset_due(&mut self, frames: u64) -> bool {
        if self.triggers_resets && frames >= self.next_reset {
            self.next_reset = frames.saturating_add(self.gap(self.cfg.reset_every));
            self.device.0.fetch_add(1, Ordering::Relaxed);
        }
        let now = self.device.0.load(Ordering::Relaxed);
        if now == self.resets_seen {
            return false;
        }
        self.resets_seen = now;
        self.counts.device_resets += 1;
        true
    }

    /// Counts a doorbell; true when the NIC loses it.
    pub(crate) fn doorbell_lost(&mut self) -> bool {
        self.doorbells += 1;
        if self.doorbells < self.next_doorbell_lost {
            return false;
        }
        self.next_doorbell_lost = self
            .doorbells
            .saturating_add(self.gap(self.cfg.doorbell_lost_every));
        self.counts.doorbells_lost += 1;
        self.doorbell_owed = true;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_average_the_interval_and_repeat_with_the_seed() {
        let cfg = FaultConfig {
            seed: 7,
            doorbell_lost_every: 10,
            ..FaultConfig::default()
        };
        let run = || {
            let mut s = FaultState::new(&cfg, 0, 0, &DeviceResets::new()).unwrap();
            (0..100_000).filter(|_| s.doorbell_lost()).count()
        };
        let n = run();
        assert_eq!(n, run(), "same seed, same faults");
        assert!(
            (9_000..=11_000).contains(&n),
            "{n} lost of 100000, mean 1 in 10"
        );
        assert!(FaultState::new(&FaultConfig::default(), 0, 0, &DeviceResets::new()).is_none());
    }

    #[test]
    fn corruptions_change_the_descriptor() {
        for c in [
            RxCorruption::BadKey,
            RxCorruption::OutsideRegion,
            RxCorruption::BeyondBuffer,
        ] {
            let mut seg = [0x11u8; SEG];
            c.apply(&mut seg);
            assert_ne!(seg, [0x11u8; SEG], "{c:?}");
        }
    }
}
