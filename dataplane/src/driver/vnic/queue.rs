//! One queue pair of the virtual NIC: the Rx rings and completion queue, the send queue, the
//! queue's wire endpoints, and the [`Queue`] implementation the run loop calls.
//!
//! The NIC's engines run inside the driver calls (functional layer): `rx_burst` first lets the NIC
//! receive frames from the wire into posted buffers (writing completions), then polls completions
//! into packets, then refills the rings; `tx_burst` reclaims completed sends, posts WQEs, rings the
//! doorbell, and the NIC processes the WQEs onto the wire.
//!
//! Flow control: by default the NIC only takes a frame from the wire when it has descriptors to
//! place it in (as with Ethernet PAUSE), so a functional run loses nothing; with flow control off a
//! frame that finds no descriptor is dropped and counted in `rx_missed` (DPDK's `imissed`).

use std::sync::Arc;
use std::time::Instant;

use nicmem::{Buf, Host, Nic, PoolCache, ProtectionDomain, RegionTable};

use super::desc::{SEG, cqe_ring};
use super::rx::{CompletionQueue, RxRing, ring_of, rx_cqe};
use super::tx::TxRing;
use crate::burst::Burst;
use crate::mode::DatapathMode;
use crate::packet::{Packet, PacketMeta, Payload, RxRing as RingKind};
use crate::port::{Queue, QueueStats};
use crate::rss::Rss;
use crate::verdict::Verdict;
use crate::wire::{FrameRing, FrameSink, FrameSource, MAX_WIRE_FRAME};

/// Where a queue's received frames come from.
pub(crate) enum Ingress {
    /// The link's source directly (single-queue ports).
    Source(Box<dyn FrameSource>),
    /// A ring fed by the port's RSS front end (multi-queue ports).
    Ring(Arc<FrameRing>),
}

impl Ingress {
    #[inline]
    fn next(&mut self, buf: &mut [u8]) -> Option<usize> {
        match self {
            Ingress::Source(s) => s.next_frame(buf),
            Ingress::Ring(r) => r.pop(buf),
        }
    }

    fn exhausted(&self) -> bool {
        match self {
            Ingress::Source(s) => s.exhausted(),
            Ingress::Ring(r) => r.finished(),
        }
    }
}

/// Where a queue's transmitted frames go.
pub(crate) enum Egress {
    /// The link's sink directly (single-queue ports).
    Sink(Box<dyn FrameSink>),
    /// A ring drained by the port's front end (multi-queue ports); full ring = retry later.
    Ring(Arc<FrameRing>),
}

/// Which Rx ring a test wants to corrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxRingId {
    /// The header ring (whole frames in `host` mode).
    Header,
    /// The primary (nicmem) payload ring.
    Primary,
    /// The secondary (host) payload ring.
    Secondary,
}

/// Static parameters of a queue.
#[derive(Clone, Debug)]
pub(crate) struct QueueParams {
    pub mode: DatapathMode,
    pub split_offset: usize,
    pub max_frame: usize,
    pub flow_control: bool,
    pub rx_ring: usize,
    pub port_id: u16,
    pub queue_id: u16,
}

/// A virtual NIC queue pair (see the module docs).
pub struct VnicQueue {
    p: QueueParams,
    pd: ProtectionDomain,
    table: RegionTable,
    hdr: RxRing<Host>,
    primary: Option<RxRing<Nic>>,
    secondary: Option<RxRing<Host>>,
    rx_cq: CompletionQueue,
    tx: TxRing,
    unsent: Vec<Packet>,
    ingress: Ingress,
    egress: Egress,
    stage: Box<[u8]>,
    rss: Rss,
    stats: QueueStats,
    epoch: Instant,
    _alive: Arc<()>,
}

/// Returns a packet's buffers to the caches they came from (foreign buffers go back to their own
/// pools on drop).
fn free_into(
    p: Packet,
    hdr: &mut PoolCache<Host>,
    primary: Option<&mut PoolCache<Nic>>,
    secondary: Option<&mut PoolCache<Host>>,
) {
    let (h, _, payload, _) = p.into_parts();
    hdr.free(h);
    match payload {
        Payload::None => {}
        Payload::Host(b) => match secondary {
            Some(c) => c.free(b),
            None => drop(b),
        },
        Payload::Nic(b) => match primary {
            Some(c) => c.free(b),
            None => drop(b),
        },
    }
}

impl VnicQueue {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        p: QueueParams,
        pd: ProtectionDomain,
        table: RegionTable,
        hdr: RxRing<Host>,
        primary: Option<RxRing<Nic>>,
        secondary: Option<RxRing<Host>>,
        tx: TxRing,
        ingress: Ingress,
        egress: Egress,
        burst: usize,
        rss: Rss,
        alive: Arc<()>,
    ) -> Self {
        let mut q = Self {
            rx_cq: CompletionQueue::new(p.rx_ring),
            p,
            pd,
            table,
            hdr,
            primary,
            secondary,
            tx,
            unsent: Vec::with_capacity(burst.max(1) * 2),
            ingress,
            egress,
            stage: vec![0u8; MAX_WIRE_FRAME].into_boxed_slice(),
            rss,
            stats: QueueStats::default(),
            epoch: Instant::now(),
            _alive: alive,
        };
        q.refill();
        q
    }

    fn refill(&mut self) {
        let limit = self.p.rx_ring as u32;
        self.stats.rx_nombuf += self.hdr.refill(limit);
        if let Some(r) = &mut self.primary {
            // The primary ring is filled only while nicmem has buffers; an empty nicmem pool is the
            // normal spill condition, not a `rx_nombuf` event.
            r.refill(limit);
        }
        if let Some(r) = &mut self.secondary {
            self.stats.rx_nombuf += r.refill(limit);
        }
    }

    /// The NIC's receive engine: moves up to `budget` frames from the wire into posted buffers.
    fn nic_rx(&mut self, budget: usize) {
        let splits = self.p.mode.splits();
        let h = self.p.split_offset;
        for _ in 0..budget {
            if self.rx_cq.room() == 0 {
                break;
            }
            let have_hdr = self.hdr.posted() > 0;
            let prim = self.primary.as_ref().is_some_and(|r| r.posted() > 0);
            let sec = self.secondary.as_ref().is_some_and(|r| r.posted() > 0);
            let have_pay = !splits || prim || sec;
            if self.p.flow_control && !(have_hdr && have_pay) {
                break;
            }
            let Some(len) = self.ingress.next(&mut self.stage) else {
                break;
            };
            if len == 0 {
                continue;
            }
            if len > self.p.max_frame {
                self.stats.rx_oversize += 1;
                continue;
            }
            if !have_hdr || (splits && len > h && !have_pay) {
                self.stats.rx_missed += 1;
                continue;
            }
            let frame = &self.stage[..len];
            let hash = self.rss.hash_frame(frame);
            if !splits {
                let (c, r) = self.hdr.nic_take(&self.table, self.pd, len);
                if r.is_ok() {
                    self.hdr.nic_write(c, frame);
                }
                self.rx_cq
                    .push(&rx_cqe(hash, len, len, c, cqe_ring::NONE, 0, r.err()));
                continue;
            }
            let hl = len.min(h);
            let (c, r1) = self.hdr.nic_take(&self.table, self.pd, hl);
            let (ring, pc, r2) = if len > h {
                if prim {
                    let r = self.primary.as_mut().expect("primary ring present");
                    let (pc, res) = r.nic_take(&self.table, self.pd, len - h);
                    if res.is_ok() && r1.is_ok() {
                        r.nic_write(pc, &frame[h..]);
                    }
                    (cqe_ring::PRIMARY, pc, res)
                } else {
                    let r = self.secondary.as_mut().expect("secondary ring present");
                    let (pc, res) = r.nic_take(&self.table, self.pd, len - h);
                    if res.is_ok() && r1.is_ok() {
                        r.nic_write(pc, &frame[h..]);
                    }
                    (cqe_ring::SECONDARY, pc, res)
                }
            } else {
                (cqe_ring::NONE, 0, Ok(()))
            };
            let err = r1.err().or(r2.err());
            if err.is_none() {
                self.hdr.nic_write(c, &frame[..hl]);
            }
            self.rx_cq.push(&rx_cqe(hash, len, hl, c, ring, pc, err));
        }
    }

    /// Driver side: posts packets to the send queue without ringing the doorbell. Packets that do
    /// not fit stay in `pkts`. Returns the number posted.
    pub fn tx_post(&mut self, pkts: &mut Vec<Packet>) -> usize {
        self.reclaim();
        let mut sent = 0;
        let mut full = false;
        for p in pkts.drain(..) {
            if full {
                self.unsent.push(p);
                continue;
            }
            let len = p.frame_len() as u64;
            match self.tx.post(p) {
                Ok(()) => {
                    sent += 1;
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += len;
                }
                Err(p) => {
                    full = true;
                    self.unsent.push(p);
                }
            }
        }
        self.stats.tx_full += self.unsent.len() as u64;
        pkts.append(&mut self.unsent);
        sent
    }

    /// Rings the doorbell: the NIC processes every posted WQE onto the wire.
    pub fn tx_doorbell(&mut self) {
        let egress = &mut self.egress;
        let mut wire = |f: &[u8]| match egress {
            Egress::Sink(s) => s.deliver(f),
            Egress::Ring(r) => {
                // The front end drains the ring concurrently; wait for room rather than lose a
                // frame the NIC has already taken.
                while !r.push(f) {
                    std::thread::yield_now();
                }
            }
        };
        let out = self
            .tx
            .nic_process(&self.table, self.pd, &mut self.stage, &mut wire);
        self.stats.wire_tx_frames += out.frames;
        self.stats.desc_errors += out.errors;
    }

    fn reclaim(&mut self) {
        let hdr = &mut self.hdr.cache;
        let mut primary = self.primary.as_mut().map(|r| &mut r.cache);
        let mut secondary = self.secondary.as_mut().map(|r| &mut r.cache);
        self.tx
            .complete(&mut |p| free_into(p, hdr, primary.as_deref_mut(), secondary.as_deref_mut()));
    }

    /// Overwrites the next Rx WQE the NIC will consume on `ring` (descriptor-validation tests).
    pub fn corrupt_next_rx_wqe(&mut self, ring: RxRingId, f: impl FnOnce(&mut [u8; SEG])) -> bool {
        match ring {
            RxRingId::Header => self.hdr.corrupt_next(f),
            RxRingId::Primary => self.primary.as_mut().is_some_and(|r| r.corrupt_next(f)),
            RxRingId::Secondary => self.secondary.as_mut().is_some_and(|r| r.corrupt_next(f)),
        }
    }

    /// Overwrites segment `k` of the most recently posted Tx WQE (before the doorbell).
    pub fn corrupt_last_tx_seg(&mut self, k: usize, f: impl FnOnce(&mut [u8; SEG])) -> bool {
        self.tx.corrupt_last(k, f)
    }

    /// The queue's protection domain.
    pub fn protection_domain(&self) -> ProtectionDomain {
        self.pd
    }

    fn make_packet(&mut self, cqe: &super::desc::Cqe, now_ns: u64) -> Option<Packet> {
        let hdr = self.hdr.harvest(cqe.wqe_counter);
        let ring = ring_of(cqe);
        let payload = match ring {
            cqe_ring::PRIMARY => self
                .primary
                .as_mut()
                .and_then(|r| r.harvest(cqe.payload_counter))
                .map(Payload::Nic),
            cqe_ring::SECONDARY => self
                .secondary
                .as_mut()
                .and_then(|r| r.harvest(cqe.payload_counter))
                .map(Payload::Host),
            _ => Some(Payload::None),
        };
        let bad = cqe.is_error() || hdr.is_none() || payload.is_none();
        if bad {
            self.stats.desc_errors += 1;
            self.give_back(hdr, payload);
            return None;
        }
        let hdr = hdr?;
        let payload = payload?;
        let meta = PacketMeta {
            rss_hash: cqe.rss_hash,
            port: self.p.port_id,
            queue: self.p.queue_id,
            ring: match ring {
                cqe_ring::PRIMARY => RingKind::Primary,
                cqe_ring::SECONDARY => RingKind::Secondary,
                _ => RingKind::None,
            },
            rx_time_ns: now_ns,
        };
        match Packet::new(
            hdr,
            cqe.hdr_len as usize,
            payload,
            cqe.byte_cnt as usize,
            meta,
        ) {
            Ok(p) => Some(p),
            Err(_) => {
                // A completion whose lengths do not fit its buffers: the buffers were moved into
                // the failed constructor and returned to their pools when it dropped them.
                self.stats.desc_errors += 1;
                None
            }
        }
    }

    fn give_back(&mut self, hdr: Option<Buf<Host>>, payload: Option<Payload>) {
        if let Some(h) = hdr {
            self.hdr.cache.free(h);
        }
        match payload {
            Some(Payload::Host(b)) => match &mut self.secondary {
                Some(r) => r.cache.free(b),
                None => drop(b),
            },
            Some(Payload::Nic(b)) => match &mut self.primary {
                Some(r) => r.cache.free(b),
                None => drop(b),
            },
            _ => {}
        }
    }
}

impl Queue for VnicQueue {
    fn rx_burst(&mut self, burst: &mut Burst) -> usize {
        let want = burst.room();
        if want == 0 {
            return 0;
        }
        self.nic_rx(want);
        // One clock read per burst: every packet of a burst shares its arrival time.
        let now_ns = self.epoch.elapsed().as_nanos() as u64;
        let mut got = 0;
        while burst.room() > 0 {
            let Some(cqe) = self.rx_cq.poll() else {
                break;
            };
            let Some(pkt) = self.make_packet(&cqe, now_ns) else {
                continue;
            };
            match pkt.meta.ring {
                RingKind::Primary => self.stats.rx_primary += 1,
                RingKind::Secondary => self.stats.rx_secondary += 1,
                RingKind::None => {}
            }
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += pkt.frame_len() as u64;
            let port = self.p.port_id;
            if let Err(p) = burst.push(pkt, Verdict::Tx(port)) {
                drop(p);
            }
            got += 1;
        }
        self.refill();
        got
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>) -> usize {
        let n = self.tx_post(pkts);
        if n > 0 {
            self.tx_doorbell();
        }
        n
    }

    fn free(&mut self, pkt: Packet) {
        let hdr = &mut self.hdr.cache;
        let primary = self.primary.as_mut().map(|r| &mut r.cache);
        let secondary = self.secondary.as_mut().map(|r| &mut r.cache);
        free_into(pkt, hdr, primary, secondary);
    }

    fn flush(&mut self) {
        if self.tx.completion_owed() || !self.tx.is_empty() {
            self.tx.post_completion_request();
            self.tx_doorbell();
        }
        self.reclaim();
    }

    fn idle(&self) -> bool {
        self.ingress.exhausted() && self.rx_cq.pending() == 0 && self.tx.is_empty()
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }

    fn xstats(&self) -> Vec<(String, u64)> {
        let mut v = vec![
            ("rx_hdr_posted".to_string(), self.hdr.posted() as u64),
            (
                "tx_completions_pending".to_string(),
                self.tx.pending_completions() as u64,
            ),
        ];
        if let Some(r) = &self.primary {
            v.push(("rx_primary_posted".into(), r.posted() as u64));
        }
        if let Some(r) = &self.secondary {
            v.push(("rx_secondary_posted".into(), r.posted() as u64));
        }
        v
    }
}

impl Drop for VnicQueue {
    fn drop(&mut self) {
        self.flush();
        let hdr = &mut self.hdr.cache;
        let mut primary = self.primary.as_mut().map(|r| &mut r.cache);
        let mut secondary = self.secondary.as_mut().map(|r| &mut r.cache);
        self.tx
            .drain(&mut |p| free_into(p, hdr, primary.as_deref_mut(), secondary.as_deref_mut()));
        // Harvest completions the driver never polled so their buffers return too.
        while let Some(cqe) = self.rx_cq.poll() {
            let _ = self.make_packet(&cqe, 0);
        }
        self.hdr.drain();
        if let Some(r) = &mut self.primary {
            r.drain();
        }
        if let Some(r) = &mut self.secondary {
            r.drain();
        }
        match &mut self.egress {
            Egress::Sink(s) => s.finish(),
            Egress::Ring(_) => {}
        }
    }
}
