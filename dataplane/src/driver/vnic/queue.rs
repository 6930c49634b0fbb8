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
//!
//! Every DMA is charged to the queue's [`NicModel`] (see `model.rs`). A timed queue also runs a
//! clock: with an offered rate, frames arrive at paced wire times whatever the CPU does (no
//! pulling; a frame that finds no descriptor is `rx_missed`, one that finds the receive buffer
//! full is `pcie_overrun`), and the driver sees a completion only once it is visible; unpaced,
//! the NIC pulls frames as above and each burst is handed over whole when its last completion is
//! visible (a virtual CPU waits for it).

use std::sync::Arc;
use std::time::Instant;

use nicmem::{Buf, Host, Nic, PoolCache, ProtectionDomain, RegionTable};

use super::desc::{SEG, cqe_ring};
use super::model::{LiveModel, ModelSinkRef, NicModel};
use super::rx::{CompletionQueue, RxRing, ring_of, rx_cqe};
use super::tx::TxRing;
use crate::burst::Burst;
use crate::mode::DatapathMode;
use crate::model::timeline::{PS_PER_NS, Ps};
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
    /// The next frame; with `wait`, a ring fed by the front end is waited on until it has a
    /// frame or is finished (a virtual-time queue must not mistake a slow front-end thread for
    /// an idle wire, or its numbers would depend on thread scheduling).
    #[inline]
    fn next_wait(&mut self, buf: &mut [u8], wait: bool) -> Option<usize> {
        match self {
            Ingress::Source(s) => s.next_frame(buf),
            Ingress::Ring(r) => loop {
                if let Some(n) = r.pop(buf) {
                    return Some(n);
                }
                if !wait || r.finished() {
                    return None;
                }
                std::thread::yield_now();
            },
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

/// The queue's accounting/timing handles: its model and where to publish it.
pub(crate) struct QueueModel {
    pub model: NicModel,
    pub sink: Option<ModelSinkRef>,
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
    rx_stage: Box<[u8]>,
    /// A frame taken from the wire whose paced arrival time has not come yet (its bytes are in
    /// `rx_stage`).
    rx_pending: Option<usize>,
    /// Per header-ring slot: when the driver posted it (model time, timed queues).
    hdr_posted_at: Box<[Ps]>,
    rss: Rss,
    stats: QueueStats,
    epoch: Instant,
    model: NicModel,
    sink: Option<ModelSinkRef>,
    _alive: Arc<()>,
}

/// Returns a packet's buffers to the caches they came from (foreign buffers go back to their own
/// pools on drop).
#[inline]
fn free_into(
    p: Packet,
    hdr: &mut PoolCache<Host>,
    primary: Option<&mut PoolCache<Nic>>,
    secondary: Option<&mut PoolCache<Host>>,
    model: &mut NicModel,
) {
    let plen = p.payload_len() as u64;
    let (h, _, payload, _) = p.into_parts();
    hdr.free(h);
    match payload {
        Payload::None => {}
        Payload::Host(b) => match secondary {
            Some(c) => c.free(b),
            None => drop(b),
        },
        Payload::Nic(b) => {
            model.nicmem_freed(plen);
            match primary {
                Some(c) => c.free(b),
                None => drop(b),
            }
        }
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
        qm: QueueModel,
    ) -> Self {
        let timed = qm.model.t.is_some();
        let posted_slots = if timed {
            p.rx_ring.next_power_of_two()
        } else {
            0
        };
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
            rx_stage: vec![0u8; MAX_WIRE_FRAME].into_boxed_slice(),
            rx_pending: None,
            hdr_posted_at: vec![0; posted_slots].into_boxed_slice(),
            rss,
            stats: QueueStats::default(),
            epoch: Instant::now(),
            model: qm.model,
            sink: qm.sink,
            _alive: alive,
        };
        q.refill();
        q
    }

    fn refill(&mut self) {
        let limit = self.p.rx_ring as u32;
        let before = self.hdr.producer();
        self.stats.rx_nombuf += self.hdr.refill(limit);
        if let Some(t) = self.model.t.as_deref() {
            let now = t.now();
            let mask = self.hdr_posted_at.len() as u32 - 1;
            let mut i = before;
            while i != self.hdr.producer() {
                self.hdr_posted_at[(i & mask) as usize] = now;
                i = i.wrapping_add(1);
            }
        }
        if let Some(r) = &mut self.primary {
            // The primary ring is filled only while nicmem has buffers; an empty nicmem pool is the
            // normal spill condition, not a `rx_nombuf` event.
            r.refill(limit);
        }
        if let Some(r) = &mut self.secondary {
            self.stats.rx_nombuf += r.refill(limit);
        }
    }

    /// The NIC's receive engine, unpaced: moves up to `budget` frames from the wire into posted
    /// buffers. A timed queue books each frame on the wire no earlier than its descriptor was
    /// posted (flow control: the sender waits).
    fn nic_rx(&mut self, budget: usize) {
        let splits = self.p.mode.splits();
        let h = self.p.split_offset;
        let ovh = self.model.wire_overhead();
        let wait = self.model.t.as_deref().is_some_and(|t| t.is_virtual());
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
            let Some(len) = self.ingress.next_wait(&mut self.rx_stage, wait) else {
                break;
            };
            self.model.wire_rx(len);
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
            let at = match self.model.t.as_deref_mut() {
                Some(t) => {
                    let mask = self.hdr_posted_at.len() as u32 - 1;
                    let posted = self.hdr_posted_at[(self.hdr.consumer() & mask) as usize];
                    t.arrive(posted, len, ovh)
                }
                None => 0,
            };
            self.receive(len, at);
        }
    }

    /// The NIC's receive engine, paced: processes every frame whose arrival on the wire ends by
    /// `until`, dropping those that find no descriptor (`rx_missed`) or a full receive buffer
    /// (`pcie_overrun`).
    fn nic_rx_paced(&mut self, until: Ps) {
        let splits = self.p.mode.splits();
        let h = self.p.split_offset;
        let ovh = self.model.wire_overhead();
        loop {
            // No completion-queue check: every completion consumes a posted WQE and the CQ has
            // room for every posted WQE, so a full CQ means no descriptor, i.e. `rx_missed`
            // (a paced wire does not wait for the CPU).
            debug_assert!(self.rx_cq.room() >= self.hdr.posted());
            let Some(len) = self.peek_frame() else {
                if let Some(t) = self.model.t.as_deref_mut() {
                    t.starved(until);
                }
                break;
            };
            let Some(t) = self.model.t.as_deref_mut() else {
                break;
            };
            t.frame_available();
            let Some((end, _)) = t.paced_arrival(len, ovh) else {
                break;
            };
            if end > until {
                break;
            }
            self.rx_pending = None;
            let at = t.arrive(0, len, ovh);
            self.model.wire_rx(len);
            if len == 0 {
                continue;
            }
            if len > self.p.max_frame {
                self.stats.rx_oversize += 1;
                continue;
            }
            let have_hdr = self.hdr.posted() > 0;
            let prim = self.primary.as_ref().is_some_and(|r| r.posted() > 0);
            let sec = self.secondary.as_ref().is_some_and(|r| r.posted() > 0);
            if !have_hdr || (splits && len > h && !prim && !sec) {
                self.stats.rx_missed += 1;
                continue;
            }
            let hl = if splits { len.min(h) } else { len };
            let host_pay = if splits && len > h && !prim {
                len - h
            } else {
                0
            };
            let up = self.model.rx_up_bytes(hl as u32, host_pay as u32);
            if self.model.t.as_deref().is_some_and(|t| t.overrun(at, up)) {
                self.model.c.rx_pcie_overrun += 1;
                self.stats.rx_pcie_overrun += 1;
                continue;
            }
            self.receive(len, at);
        }
    }

    /// The frame waiting in `rx_stage`, taking the next one from the wire if none is.
    #[inline]
    fn peek_frame(&mut self) -> Option<usize> {
        if self.rx_pending.is_none() {
            let wait = self.model.t.as_deref().is_some_and(|t| t.is_virtual());
            self.rx_pending = self.ingress.next_wait(&mut self.rx_stage, wait);
        }
        self.rx_pending
    }

    /// Places the frame in `rx_stage[..len]`, arrived at `at`, into the posted buffers (one
    /// decode and validation per descriptor) and writes its completion.
    #[inline]
    fn receive(&mut self, len: usize, at: Ps) {
        let splits = self.p.mode.splits();
        let h = self.p.split_offset;
        let stage = &self.rx_stage[..];
        let frame = &stage[..len];
        let hash = self.rss.hash_frame(frame);
        let posted = self.hdr.posted();
        self.model.rx_wqe_consumed(posted, at);
        let slot = self.rx_cq.producer();
        let (cqe, ready) = if !splits {
            let (c, r) = self.hdr.nic_place(&self.table, self.pd, stage, len, true);
            if r.is_ok() {
                self.model.rx_placed(at, len as u32, 0, 0);
            }
            let ready = self.model.rx_cqe(at);
            (rx_cqe(hash, len, len, c, cqe_ring::NONE, 0, r.err()), ready)
        } else {
            let hl = len.min(h);
            let (c, r1) = self.hdr.nic_place(&self.table, self.pd, stage, hl, true);
            let (ring, pc, r2, host_pay, nic_pay) = if len > h {
                let (pay, plen) = (&stage[h..], len - h);
                match self.primary.as_mut().filter(|r| r.posted() > 0) {
                    Some(r) => {
                        let (pc, res) = r.nic_place(&self.table, self.pd, pay, plen, r1.is_ok());
                        (cqe_ring::PRIMARY, pc, res, 0, plen)
                    }
                    None => match self.secondary.as_mut() {
                        Some(r) => {
                            let (pc, res) =
                                r.nic_place(&self.table, self.pd, pay, plen, r1.is_ok());
                            (cqe_ring::SECONDARY, pc, res, plen, 0)
                        }
                        None => (
                            cqe_ring::NONE,
                            0,
                            Err(super::desc::syndrome::LOCAL_LENGTH),
                            0,
                            0,
                        ),
                    },
                }
            } else {
                (cqe_ring::NONE, 0, Ok(()), 0, 0)
            };
            let err = r1.err().or(r2.err());
            if err.is_none() {
                self.model
                    .rx_placed(at, hl as u32, host_pay as u32, nic_pay as u32);
            }
            let ready = self.model.rx_cqe(at);
            (rx_cqe(hash, len, hl, c, ring, pc, err), ready)
        };
        self.rx_cq.push(&cqe);
        if let Some(t) = self.model.t.as_deref_mut() {
            t.cq_set(slot, ready, at);
        }
    }

    /// Driver side: posts packets to the send queue without ringing the doorbell. Packets that do
    /// not fit stay in `pkts`. Returns the number posted.
    pub fn tx_post(&mut self, pkts: &mut Vec<Packet>) -> usize {
        self.reclaim();
        // A paced queue also needs room in model time: WQEs whose frames have not left yet
        // still occupy the ring (unpaced, flow control holds the sender instead).
        let mut limit = match self.model.t.as_deref_mut() {
            Some(t) if t.paced() => t.tx_room(self.tx.size()),
            _ => u32::MAX,
        };
        let mut sent = 0;
        let mut full = false;
        for p in pkts.drain(..) {
            if full {
                self.unsent.push(p);
                continue;
            }
            let len = p.frame_len() as u64;
            let before = self.tx.unprocessed();
            match self.tx.post(p, limit) {
                Ok(()) => {
                    sent += 1;
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += len;
                    limit = limit.saturating_sub(self.tx.unprocessed().wrapping_sub(before));
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

    /// Rings the doorbell: the NIC fetches every posted WQE and processes it onto the wire.
    pub fn tx_doorbell(&mut self) {
        let nbb = self.tx.unprocessed();
        if nbb == 0 {
            return;
        }
        let ready = self.model.tx_doorbell(nbb);
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
        let out = self.tx.nic_process(
            &self.table,
            self.pd,
            &mut self.stage,
            &mut wire,
            &mut self.model,
            ready,
        );
        self.stats.wire_tx_frames += out.frames;
        self.stats.desc_errors += out.errors;
    }

    fn reclaim(&mut self) {
        let hdr = &mut self.hdr.cache;
        let mut primary = self.primary.as_mut().map(|r| &mut r.cache);
        let mut secondary = self.secondary.as_mut().map(|r| &mut r.cache);
        let model = &mut self.model;
        self.tx.complete(&mut |p| {
            free_into(
                p,
                hdr,
                primary.as_deref_mut(),
                secondary.as_deref_mut(),
                model,
            )
        });
    }

    /// Accounting counters so far (tests and benchmarks).
    pub fn model_counters(&self) -> super::model::NicCounters {
        self.model.c
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

    #[inline]
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

impl VnicQueue {
    /// Harvests up to `room` completions into `burst`; a gated (timed) harvest takes only
    /// completions visible by `until`. Returns (packets, latest visibility time harvested).
    #[inline]
    fn harvest(&mut self, burst: &mut Burst, until: Option<Ps>, wall_ns: u64) -> (usize, Ps) {
        let mut got = 0;
        let mut latest = 0;
        let port = self.p.port_id;
        while burst.room() > 0 && self.rx_cq.pending() > 0 {
            let slot = self.rx_cq.consumer();
            let rx_ns = match self.model.t.as_deref() {
                Some(t) => {
                    let ready = t.cq_ready(slot);
                    if until.is_some_and(|u| ready > u) {
                        break;
                    }
                    latest = latest.max(ready);
                    t.cq_arrival(slot) / PS_PER_NS
                }
                None => wall_ns,
            };
            let Some(cqe) = self.rx_cq.poll() else {
                break;
            };
            let Some(pkt) = self.make_packet(&cqe, rx_ns) else {
                continue;
            };
            match pkt.meta.ring {
                RingKind::Primary => self.stats.rx_primary += 1,
                RingKind::Secondary => self.stats.rx_secondary += 1,
                RingKind::None => {}
            }
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += pkt.frame_len() as u64;
            if let Err(p) = burst.push(pkt, Verdict::Tx(port)) {
                drop(p);
            }
            got += 1;
        }
        (got, latest)
    }

    /// `rx_burst` of a timed queue (see the module docs).
    fn rx_burst_timed(&mut self, burst: &mut Burst) -> usize {
        let want = burst.room();
        let Some(t) = self.model.t.as_deref_mut() else {
            return 0;
        };
        let now = t.sync();
        let (virt, paced) = (t.is_virtual(), t.paced());
        if !paced {
            self.nic_rx(want);
            let (got, latest) = self.harvest(burst, None, 0);
            if let Some(t) = self.model.t.as_deref_mut() {
                // The burst is handed over when its last completion is visible.
                t.idle_until(latest);
                t.cpu_packets(got as u64);
            }
            return got;
        }
        self.nic_rx_paced(now);
        let mut until = now;
        if virt {
            // A virtual CPU that would only poll an empty queue skips to the next event.
            for _ in 0..4096 {
                let Some(t) = self.model.t.as_deref_mut() else {
                    break;
                };
                if self.rx_cq.pending() > 0 {
                    let r = t.cq_ready(self.rx_cq.consumer());
                    t.idle_until(r);
                    break;
                }
                let Some(len) = self.peek_frame() else {
                    break;
                };
                let ovh = self.model.wire_overhead();
                let Some(t) = self.model.t.as_deref_mut() else {
                    break;
                };
                let Some((end, _)) = t.paced_arrival(len, ovh) else {
                    break;
                };
                t.idle_until(end);
                self.nic_rx_paced(end);
            }
            until = self.model.t.as_deref().map_or(now, |t| t.now());
        }
        let (got, _) = self.harvest(burst, Some(until), 0);
        if let Some(t) = self.model.t.as_deref_mut() {
            t.cpu_packets(got as u64);
        }
        got
    }

    /// Updates the DDIO hit fraction from the Rx entries and packets in flight.
    fn ddio_update(&mut self) {
        if let Some(t) = self.model.t.as_deref_mut() {
            let entries = u64::from(self.hdr.posted())
                + u64::from(self.rx_cq.pending())
                + u64::from(self.tx.in_use());
            let len = self
                .stats
                .rx_bytes
                .checked_div(self.stats.rx_packets)
                .unwrap_or(0);
            let mut host = NicModel::host_bytes(self.p.mode, len, self.p.split_offset as u64);
            if self.p.mode.uses_nicmem() && self.stats.rx_secondary > 0 && len > host {
                // Spilled payloads live in host memory too.
                let spilled = self.stats.rx_secondary as f64
                    / (self.stats.rx_primary + self.stats.rx_secondary) as f64;
                host += ((len - host) as f64 * spilled) as u64;
            }
            t.ddio_update(entries, host);
        }
    }

    fn live(&self) -> Option<&LiveModel> {
        self.sink
            .as_deref()
            .and_then(|s| s.live.get(self.p.queue_id as usize))
    }

    /// True when no more frames will come from the wire.
    fn ingress_done(&self) -> bool {
        self.rx_pending.is_none() && self.ingress.exhausted()
    }
}

impl Queue for VnicQueue {
    fn rx_burst(&mut self, burst: &mut Burst) -> usize {
        let want = burst.room();
        if want == 0 {
            return 0;
        }
        let got = if self.model.t.is_some() {
            let got = self.rx_burst_timed(burst);
            if got > 0 {
                self.ddio_update();
            }
            got
        } else {
            self.nic_rx(want);
            // One clock read per burst: every packet of a burst shares its arrival time.
            let now_ns = self.epoch.elapsed().as_nanos() as u64;
            self.harvest(burst, None, now_ns).0
        };
        self.refill();
        if self.model.tick()
            && let Some(l) = self.live()
        {
            self.model.publish(l);
        }
        got
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>) -> usize {
        if let Some(t) = self.model.t.as_deref_mut() {
            let now = t.sync();
            if t.paced() {
                // The NIC kept receiving while the CPU worked: book those arrivals first, so
                // every timeline is booked in time order.
                self.nic_rx_paced(now);
            }
        }
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
        free_into(pkt, hdr, primary, secondary, &mut self.model);
    }

    fn flush(&mut self) {
        // A paced queue is idle between arrivals; like a DPDK application it leaves sent
        // buffers to the completion threshold then, and forces a completion only once the wire
        // has nothing more to deliver.
        let paced = self.model.t.as_deref().is_some_and(|t| t.paced());
        if (!paced || self.ingress_done()) && (self.tx.completion_owed() || !self.tx.is_empty()) {
            self.tx.post_completion_request();
            self.tx_doorbell();
        }
        self.reclaim();
    }

    fn idle(&self) -> bool {
        self.ingress_done() && self.rx_cq.pending() == 0 && self.tx.is_empty()
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
        if let Some(sink) = self.sink.clone() {
            let report = self.model.report();
            if let Some(l) = self.live() {
                self.model.publish(l);
            }
            let mut slots = sink.reports.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = slots.get_mut(self.p.queue_id as usize) {
                *slot = Some(report);
            }
        }
        let hdr = &mut self.hdr.cache;
        let mut primary = self.primary.as_mut().map(|r| &mut r.cache);
        let mut secondary = self.secondary.as_mut().map(|r| &mut r.cache);
        let model = &mut self.model;
        self.tx.drain(&mut |p| {
            free_into(
                p,
                hdr,
                primary.as_deref_mut(),
                secondary.as_deref_mut(),
                model,
            )
        });
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
