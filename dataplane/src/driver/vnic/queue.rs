//! One queue pair of the virtual NIC: the Rx rings and completion queue, the send queue, the
//! queue's wire endpoints, and the [`Queue`] implementation the run loop calls.
//!
//! The NIC's engines run inside the driver calls (functional layer): `rx_burst` first lets the NIC
//! receive frames from the wire into posted buffers (writing completions), then polls completions
//! into the burst, then refills the rings; `tx_burst` reclaims completed sends, posts WQEs, rings
//! the doorbell once, and the NIC processes the WQEs onto the wire.
//!
//! Everything per burst is done in bulk: buffer indices come from the queue's per-core caches
//! in one allocation per ring, WQEs are written in one pass with one producer-index update, the
//! send queue rings one doorbell, completed sends are freed in bulk, and an untimed queue charges
//! runs of identical DMAs with one multiplication (the totals are the per-packet integers). A
//! packet is its header buffer's index; what the driver needs beyond the burst's arrays (which
//! payload buffer, from which ring, when it arrived) is written once into the header buffer's
//! metadata area at Rx ([`crate::arena`]).
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
//!
//! RSS: a single-queue port computes no hash (like an mlx5 port configured without RSS, its
//! completions carry 0); a multi-queue port hashes every frame (Toeplitz) and reports it.

use std::sync::Arc;

use nicmem::{ProtectionDomain, RegionTable};

use super::desc::{Cqe, SEG, cqe_op, cqe_ring, syndrome};
use super::faults::FaultState;
use super::model::{LiveModel, ModelSinkRef, NicModel};
use super::rx::{CompletionQueue, CqCursor, CqPoll, NicCursor, REFUSED, RxRing, SwCursor};
use super::tx::{PostError, TxRing};
use crate::arena::{ArenaCache, ArenaLayout, HEADROOM, PacketArena, PacketMeta};
use crate::burst::{Burst, MAX_BURST, RxPacket, RxWriter};
use crate::link::{FrameRing, FrameSink, FrameSource, MAX_WIRE_FRAME, batch_step};
use crate::mode::DatapathMode;
use crate::packet::{PacketOwner, PayloadRing};
use crate::pcie_model::timeline::Ps;
use crate::port::{Queue, QueueStats};
use crate::rss::Rss;
use crate::verdict::{DropCounts, DropReason, Verdict};

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

    /// Up to `lens.len()` frames at once (see [`FrameSource::next_batch`]), without waiting.
    #[inline]
    fn next_batch(&mut self, buf: &mut [u8], lens: &mut [u32]) -> usize {
        match self {
            Ingress::Source(s) => s.next_batch(buf, lens),
            Ingress::Ring(r) => {
                let (mut off, mut n) = (0, 0);
                while n < lens.len() && buf.len().saturating_sub(off) >= MAX_WIRE_FRAME {
                    let Some(len) = r.pop(&mut buf[off..]) else {
                        break;
                    };
                    lens[n] = len as u32;
                    n += 1;
                    off += batch_step(len);
                }
                n
            }
        }
    }
}

/// Bytes of the staging area a queue takes a burst of frames into (and gathers a doorbell's
/// frames in): 32 full-size frames, plus room for one frame of the largest size any link carries.
const BATCH_BYTES: usize = 48 * 1024 + MAX_WIRE_FRAME;

/// Where a queue's transmitted frames go.
pub(crate) enum Egress {
    /// The link's sink directly (single-queue ports).
    Sink(Box<dyn FrameSink>),
    /// A ring drained by the port's front end (multi-queue ports); full ring = retry later.
    Ring(Arc<FrameRing>),
}

/// Where the NIC places a frame's payload (see `nic_rx_untimed`): the ring (`cqe_ring`), the
/// payload WQE's counter, and the place in that ring's buffers (for [`NicCursor::at`]) or why
/// the descriptor was refused.
#[derive(Clone, Copy)]
struct PayPlace {
    ring: u8,
    count: u16,
    place: Result<u64, u8>,
}

impl Default for PayPlace {
    fn default() -> Self {
        Self {
            ring: cqe_ring::NONE,
            count: 0,
            place: Err(0),
        }
    }
}

impl PayPlace {
    /// Takes the next descriptor of `ring` (cursor `c`) for a payload of `len` bytes.
    #[inline(always)]
    fn take(ring: u8, c: &mut NicCursor, len: u32) -> Self {
        let (count, place) = c.take_place(len as usize);
        Self { ring, count, place }
    }
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

/// What a queue is built from (see `VnicPort::new`).
pub(crate) struct QueueParts {
    pub params: QueueParams,
    pub pd: ProtectionDomain,
    pub table: RegionTable,
    pub arena: PacketArena,
    pub cache: ArenaCache,
    pub tx: TxRing,
    pub ingress: Ingress,
    pub egress: Egress,
    pub rss: Option<Rss>,
    pub alive: Arc<()>,
    pub qm: QueueModel,
    pub faults: Option<Box<FaultState>>,
}

/// A virtual NIC queue pair (see the module docs).
pub struct VnicQueue {
    p: QueueParams,
    pd: ProtectionDomain,
    table: RegionTable,
    arena: PacketArena,
    layout: ArenaLayout,
    owner: Arc<dyn PacketOwner>,
    cache: ArenaCache,
    hdr: RxRing,
    primary: Option<RxRing>,
    secondary: Option<RxRing>,
    rx_cq: CompletionQueue,
    tx: TxRing,
    ingress: Ingress,
    egress: Egress,
    stage: Box<[u8]>,
    rx_stage: Box<[u8]>,
    /// A frame taken from the wire whose paced arrival time has not come yet (its bytes are in
    /// `rx_stage`).
    rx_pending: Option<usize>,
    /// Per header-ring slot: when the driver posted it (model time, timed queues).
    hdr_posted_at: Box<[Ps]>,
    rss: Option<Rss>,
    stats: QueueStats,
    model: NicModel,
    sink: Option<ModelSinkRef>,
    scratch: Box<[u32]>,
    /// A burst of frames taken from the wire at once (untimed queues), their lengths, and
    /// where the NIC places each (see `nic_rx_whole`).
    rx_batch: Box<[u8]>,
    rx_lens: Box<[u32]>,
    rx_place: Box<[u64]>,
    /// Where each frame's payload goes (split modes).
    rx_pay: Box<[PayPlace]>,
    /// Lengths of the frames a doorbell gathered into `stage`.
    tx_lens: Box<[u32]>,
    /// Handles of packets a `tx_post` could not post (freed together).
    unsent: Box<[usize]>,
    /// The packets of a burst the send queue refused (index in the burst, why).
    refused: Box<[(u16, PostError)]>,
    /// Injected faults (`None`: none configured; see `faults.rs`).
    faults: Option<Box<FaultState>>,
    _alive: Arc<()>,
}

/// The NIC's DMA write of `src[..len]` to `dst`, which has `room` bytes (see
/// [`nicmem::copy_prefix`]: the copy may round up into the room).
///
/// # Safety
/// `dst` must be valid for writes of `room >= len` bytes that nothing else reads or writes
/// meanwhile, and must not overlap `src`.
#[inline]
unsafe fn dma_write(dst: *mut u8, room: usize, src: &[u8], len: usize) {
    // SAFETY: the caller's contract: `room` writable bytes owned by this write.
    let d = unsafe { std::slice::from_raw_parts_mut(dst, room) };
    nicmem::copy_prefix(d, src, len);
}

/// Bytes a frame of at most that many bytes is received with as one fixed-size copy (the fast
/// case of [`nicmem::copy_prefix`]): the bytes past the frame land in the buffer's room.
const FIXED_COPY: usize = 64;

/// The charge and completion fields of a frame whose descriptor was refused with syndrome `e`.
#[cold]
fn refused_whole(model: &mut NicModel, e: u8) -> (u8, u8) {
    model.rx_cqes(1);
    (e, cqe_op::RESP_ERR)
}

/// Timed: header descriptors `from..from + n` were posted at `now` (`posted_at` is indexed by
/// descriptor modulo its power-of-two length), filled a piece of the ring at a time.
fn stamp_posted(posted_at: &mut [Ps], from: u32, n: u32, now: Ps) {
    let mask = posted_at.len() as u32 - 1;
    let (mut at, mut left) = (from, n as usize);
    while left > 0 {
        let i = (at & mask) as usize;
        let m = left.min(posted_at.len() - i);
        posted_at[i..i + m].fill(now);
        at = at.wrapping_add(m as u32);
        left -= m;
    }
}

/// The driver's harvest of the leading run of completions of frames received whole into their
/// header buffers ([`CqPoll::poll_whole`], at most `n`), into the burst `w` writes: what the
/// general harvest does for each of them, in a loop of its own. `hdr` is the header pool's base,
/// buffer size and room for data; an untimed queue stamps arrival 0.
#[inline(always)]
fn harvest_whole(
    cq: &mut CqPoll,
    n: u32,
    hc: &SwCursor,
    hdr: (*mut u8, usize, usize),
    w: &mut RxWriter<'_>,
) {
    let (hbase, hsize, hroom) = hdr;
    cq.poll_whole(n, hc, hroom, |p| {
        let buf = hbase.wrapping_add(p.buf as usize * hsize);
        // SAFETY: header buffer `p.buf` was just harvested: the driver owns it and nothing else
        // refers to its metadata, which starts the buffer (64-byte aligned, `META_BYTES`
        // long).
        unsafe {
            *buf.cast::<PacketMeta>() = PacketMeta {
                payload: 0,
                ring: PayloadRing::None,
                arrival: 0,
            };
        }
        // SAFETY: the burst adopted this queue's arena as owner (checked by `rx_burst`); the
        // header pointer names `len <= room` bytes of buffer `p.buf`, after `HEADROOM` bytes of
        // the same buffer, all owned by the packet from now on.
        let pushed = unsafe {
            w.push(&RxPacket {
                handle: p.buf as usize,
                hdr: buf.wrapping_add(crate::arena::DATA_OFF),
                hdr_len: p.len,
                headroom: HEADROOM as u16,
                frame_len: u32::from(p.len),
                ring: PayloadRing::None,
                rss_hash: p.rss_hash,
            })
        };
        debug_assert!(pushed, "room was checked");
    });
}

/// Returns the buffers a completion names to their caches: an error completion, or a completion
/// nobody will turn into a packet.
#[cold]
fn give_back(cache: &mut ArenaCache, hdr: u32, ring: u8, payload: u32) {
    // SAFETY: buffers just harvested from the queue's rings, owned by the driver and given up
    // here, each to its own pool's cache.
    unsafe {
        cache.hdr.free_indices(&[hdr]);
        match ring {
            cqe_ring::PRIMARY => {
                if let Some(c) = &mut cache.nic {
                    c.free_indices(&[payload]);
                }
            }
            cqe_ring::SECONDARY => {
                if let Some(c) = &mut cache.pay {
                    c.free_indices(&[payload]);
                }
            }
            _ => {}
        }
    }
}

impl VnicQueue {
    pub(crate) fn new(parts: QueueParts) -> Self {
        let QueueParts {
            params: p,
            pd,
            table,
            arena,
            cache,
            tx,
            ingress,
            egress,
            rss,
            alive,
            qm,
            faults,
        } = parts;
        let layout = arena.layout();
        let timed = qm.model.t.is_some();
        let posted_slots = if timed {
            p.rx_ring.next_power_of_two()
        } else {
            0
        };
        let hdr = RxRing::new(p.rx_ring, layout.hdr, crate::arena::DATA_OFF);
        let primary = layout.nic.map(|l| RxRing::new(p.rx_ring, l, 0));
        let secondary = layout.pay.map(|l| RxRing::new(p.rx_ring, l, 0));
        let mut q = Self {
            rx_cq: CompletionQueue::new(p.rx_ring),
            owner: arena.owner(),
            layout,
            arena,
            cache,
            hdr,
            primary,
            secondary,
            pd,
            table,
            tx,
            ingress,
            egress,
            stage: vec![0u8; BATCH_BYTES].into_boxed_slice(),
            rx_stage: vec![0u8; MAX_WIRE_FRAME].into_boxed_slice(),
            rx_pending: None,
            hdr_posted_at: vec![0; posted_slots].into_boxed_slice(),
            rss,
            stats: QueueStats::default(),
            model: qm.model,
            sink: qm.sink,
            scratch: vec![0u32; p.rx_ring.next_power_of_two()].into_boxed_slice(),
            unsent: vec![0usize; MAX_BURST].into_boxed_slice(),
            refused: vec![(0, PostError::Full); MAX_BURST].into_boxed_slice(),
            rx_batch: vec![0u8; BATCH_BYTES].into_boxed_slice(),
            rx_lens: vec![0u32; MAX_BURST].into_boxed_slice(),
            rx_place: vec![0u64; MAX_BURST].into_boxed_slice(),
            rx_pay: vec![PayPlace::default(); MAX_BURST].into_boxed_slice(),
            tx_lens: vec![0u32; MAX_BURST].into_boxed_slice(),
            faults,
            p,
            _alive: alive,
        };
        q.refill();
        q
    }

    /// Posts buffers until every ring is full or its pool is empty (one bulk allocation and one
    /// producer update per ring). A header or secondary pool that runs dry counts one
    /// `rx_nombuf`; an empty nicmem pool is the normal spill condition, not an error.
    fn refill(&mut self) {
        let k = self.hdr.free_slots() as usize;
        if k > 0 {
            let before = self.hdr.producer();
            let n = self.cache.hdr.alloc_indices(&mut self.scratch[..k]);
            self.hdr.post(&self.scratch[..n]);
            self.stats.rx_nombuf += (n < k) as u64;
            if let Some(t) = self.model.t.as_deref() {
                let posted = self.hdr.producer().wrapping_sub(before);
                stamp_posted(&mut self.hdr_posted_at, before, posted, t.now());
            }
        }
        if let (Some(r), Some(c)) = (&mut self.primary, &mut self.cache.nic) {
            let k = r.free_slots() as usize;
            if k > 0 {
                let n = c.alloc_indices(&mut self.scratch[..k]);
                r.post(&self.scratch[..n]);
            }
        }
        if let (Some(r), Some(c)) = (&mut self.secondary, &mut self.cache.pay) {
            let k = r.free_slots() as usize;
            if k > 0 {
                let n = c.alloc_indices(&mut self.scratch[..k]);
                r.post(&self.scratch[..n]);
                self.stats.rx_nombuf += (n < k) as u64;
            }
        }
    }

    /// True when a frame of `len` bytes finds every descriptor it needs posted.
    #[inline]
    fn has_descriptors(&self, len: usize) -> bool {
        if self.hdr.posted() == 0 {
            return false;
        }
        !(self.p.mode.splits() && len > self.p.split_offset)
            || self.primary.as_ref().is_some_and(|r| r.posted() > 0)
            || self.secondary.as_ref().is_some_and(|r| r.posted() > 0)
    }

    /// The NIC's receive engine, unpaced: moves up to `budget` frames from the wire into posted
    /// buffers. A timed queue books each frame on the wire no earlier than its descriptor was
    /// posted (flow control: the sender waits).
    fn nic_rx(&mut self, budget: usize) {
        let ovh = self.model.wire_overhead();
        let wait = self.model.t.as_deref().is_some_and(|t| t.is_virtual());
        // Every frame takes one completion and one header descriptor, and at most one payload
        // descriptor. With flow control the NIC takes no more frames than it can place whatever
        // their length (it cannot know a length before it takes the frame); without, it takes
        // what the wire offers and drops what finds no descriptor.
        let mut limit = budget.min(self.rx_cq.room() as usize);
        if self.p.flow_control {
            limit = limit.min(self.hdr.posted() as usize);
            if self.p.mode.splits() {
                let pay = self.primary.as_ref().map_or(0, |r| r.posted())
                    + self.secondary.as_ref().map_or(0, |r| r.posted());
                limit = limit.min(pay as usize);
            }
        }
        let paced = self.model.t.as_deref().is_some_and(|t| t.paced());
        if !paced && matches!(self.ingress, Ingress::Source(_)) {
            // Frames straight from the link: a batch at a time (a ring fed by a front-end
            // thread is read a frame at a time below, waiting for it on a virtual clock).
            return match (self.p.mode.splits(), self.model.t.is_some()) {
                (true, false) => self.nic_rx_staged::<true, false>(limit),
                (false, false) => self.nic_rx_staged::<false, false>(limit),
                (true, true) => self.nic_rx_staged::<true, true>(limit),
                (false, true) => self.nic_rx_staged::<false, true>(limit),
            };
        }
        if self.model.t.is_none() {
            let lens = &mut self.rx_lens[..limit.min(MAX_BURST)];
            let got = self.ingress.next_batch(&mut self.rx_batch, lens);
            return if self.p.mode.splits() {
                self.nic_rx_frames::<true>(got)
            } else {
                self.nic_rx_frames::<false>(got)
            };
        }
        let (mut frames, mut bytes) = (0u64, 0u64);
        for _ in 0..limit {
            let Some(len) = self.ingress.next_wait(&mut self.rx_stage, wait) else {
                break;
            };
            frames += 1;
            bytes += len as u64 + ovh;
            self.admit(len, ovh);
        }
        self.model.wire_rx_frames(frames, bytes);
        self.model.rx_pass_done();
    }

    /// One staged frame of `len` bytes (wire overhead `ovh`) from the frame-by-frame receive
    /// paths: an empty frame is skipped, an oversized one counted as `rx_oversize`, one without
    /// descriptors (no flow control) as `rx_missed`; the rest is booked (timed queues) and
    /// received.
    #[inline(always)]
    fn admit(&mut self, len: usize, ovh: u64) {
        if len == 0 {
            return;
        }
        if len > self.p.max_frame {
            self.stats.rx_oversize += 1;
            return;
        }
        if !self.p.flow_control && !self.has_descriptors(len) {
            self.stats.rx_missed += 1;
            return;
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

    /// [`VnicQueue::nic_rx`] of an untimed queue: the same placement, validation and completions
    /// as [`VnicQueue::receive`], done in stages over the batch (validate every header
    /// descriptor, take every payload descriptor, then copy each frame and write its
    /// completion), each a short loop with its state in registers; a batch with a frame that does
    /// not simply place (empty, oversized, or too few descriptors) takes the frame-by-frame path.
    /// The accounting is charged per run of identical frames. `SPLIT` is the mode's
    /// [`DatapathMode::splits`] (a constant, so each shape is compiled on its own).
    ///
    /// A timed queue (`TIMED`) books each frame's arrival, descriptor fetch, data writes and
    /// completion in frame order, as the frame-by-frame receive does.
    #[inline(never)]
    fn nic_rx_staged<const SPLIT: bool, const TIMED: bool>(&mut self, limit: usize) {
        let lens = &mut self.rx_lens[..limit.min(MAX_BURST)];
        let got = self.ingress.next_batch(&mut self.rx_batch, lens);
        let lens = &self.rx_lens[..got];
        let (max, h) = (self.p.max_frame as u32, self.p.split_offset as u32);
        let posted0 = self.hdr.posted();
        // The batch's bytes too (in `u32`: they all fit the staging area).
        let (mut simple, mut npay, mut bytes) = (posted0 >= got as u32, 0u32, 0u32);
        for &l in lens {
            simple &= l != 0 && l <= max;
            npay += u32::from(SPLIT && l > h);
            bytes = bytes.wrapping_add(l);
        }
        let bytes = u64::from(bytes);
        let prim = self.primary.as_ref().map_or(0, |r| r.posted());
        let sec = self.secondary.as_ref().map_or(0, |r| r.posted());
        if !simple || npay > prim + sec {
            return if TIMED {
                self.nic_rx_frames_timed(got)
            } else {
                self.nic_rx_frames::<SPLIT>(got)
            };
        }
        let cap = if SPLIT { h } else { max };
        let mut hc = self.hdr.nic_cursor();
        if npay == 0 && self.rss.is_none() {
            // Every frame whole in its header buffer, no hash: one pass (a timed queue books
            // the pass's frames after it, in frame order).
            let mut cq = self.rx_cq.cursor();
            let (first, slot0) = (self.hdr.consumer(), cq.producer());
            Self::receive_whole::<TIMED>(
                lens,
                &self.rx_batch,
                &mut self.rx_place,
                &mut hc,
                &mut cq,
                &mut self.model,
            );
            self.hdr.nic_commit(hc);
            self.rx_cq.commit(cq);
            let model = &mut self.model;
            let frames = got as u64;
            if TIMED {
                model.rx_book_whole(lens, &self.hdr_posted_at, first, posted0, slot0);
            } else {
                model.rx_wqes_untimed(got as u32, posted0);
            }
            model.wire_rx_frames(frames, bytes + frames * model.wire_overhead());
            model.rx_pass_done();
            return;
        }
        let (first, _) = hc.take_batch(lens, cap, &mut self.rx_place[..got]);
        // Payloads go to the primary (nicmem) ring while it has descriptors, then spill to the
        // secondary (host) ring, in frame order.
        let mut pc = self.primary.as_ref().map(|r| r.nic_cursor());
        let mut sc = self.secondary.as_ref().map(|r| r.nic_cursor());
        if SPLIT && npay > 0 {
            for (i, &len) in lens.iter().enumerate() {
                if len <= h {
                    continue;
                }
                self.rx_pay[i] = match (&mut pc, &mut sc) {
                    (Some(c), _) if c.posted() > 0 => PayPlace::take(cqe_ring::PRIMARY, c, len - h),
                    (_, Some(c)) if c.posted() > 0 => {
                        PayPlace::take(cqe_ring::SECONDARY, c, len - h)
                    }
                    // No payload descriptor (the count above rules it out): the frame does not
                    // fit the header buffer.
                    _ => PayPlace {
                        ring: cqe_ring::NONE,
                        count: 0,
                        place: Err(syndrome::LOCAL_LENGTH),
                    },
                };
            }
        }
        let batch = &self.rx_batch[..];
        let place = &self.rx_place[..got];
        let model = &mut self.model;
        let rss = self.rss.as_ref();
        let hroom = hc.room();
        let mut cq = self.rx_cq.cursor();
        let mut run = (0u32, 0u32, 0u32, 0u64);
        let mut off = 0;
        let (ovh, pmask) = (
            model.wire_overhead(),
            (self.hdr_posted_at.len() as u32).wrapping_sub(1),
        );
        for (i, (&len, &at)) in lens.iter().zip(place).enumerate() {
            let stage = &batch[off..];
            off += batch_step(len as usize);
            let hl = if SPLIT { len.min(h) } else { len };
            let c = first.wrapping_add(i as u32);
            // When the frame is in (a timed queue): its wire slot starts no earlier than its
            // descriptor was posted (flow control); then the descriptor fetch it may trigger.
            let arrival = match model.t.as_deref_mut() {
                Some(t) if TIMED => {
                    let posted = self.hdr_posted_at[(c & pmask) as usize];
                    let at = t.arrive(posted, len as usize, ovh);
                    model.rx_wqe_consumed(posted0 - i as u32, at);
                    at
                }
                _ => 0,
            };
            let mut err = 0;
            if at != REFUSED {
                // SAFETY: `take_batch` accepted the posted buffer's data area for `hl <= room`
                // bytes; the driver does not touch a posted buffer until its completion is
                // polled, and the stage is a different allocation.
                unsafe { dma_write(hc.at(at), hroom, stage, hl as usize) };
            } else {
                err = hc.refusal_at(c, hl as usize);
            }
            let (mut ring, mut pcount, mut hp, mut np) = (cqe_ring::NONE, 0, 0, 0);
            if SPLIT && len > hl {
                let pp = self.rx_pay[i];
                (ring, pcount) = (pp.ring, pp.count);
                let plen = len - hl;
                let cur = match ring {
                    cqe_ring::PRIMARY => {
                        np = plen;
                        pc.as_ref()
                    }
                    cqe_ring::SECONDARY => {
                        hp = plen;
                        sc.as_ref()
                    }
                    _ => None,
                };
                match (pp.place, cur) {
                    (Ok(p), Some(cur)) if err == 0 && cur.keeps_bytes() => {
                        // SAFETY: the payload descriptor was accepted for `plen <= room` bytes
                        // of its posted buffer, untouched by the driver until the completion is
                        // polled; the stage is a different allocation.
                        unsafe {
                            dma_write(cur.at(p), cur.room(), &stage[hl as usize..], plen as usize)
                        };
                    }
                    (Err(e), _) if err == 0 => err = e,
                    _ => {}
                }
            }
            let ready = if TIMED {
                if err == 0 {
                    model.rx_timed(arrival, hl, hp, np)
                } else {
                    model.rx_refused_timed(arrival)
                }
            } else {
                if err == 0 {
                    if (hl, hp, np) == (run.0, run.1, run.2) {
                        run.3 += 1;
                    } else {
                        model.rx_untimed_many(run.0, run.1, run.2, run.3);
                        run = (hl, hp, np, 1);
                    }
                } else {
                    model.rx_cqes(1);
                }
                0
            };
            let hash = match rss {
                Some(r) => r.hash_frame(&stage[..len as usize]),
                None => 0,
            };
            if let (true, Some(t)) = (TIMED, model.t.as_deref_mut()) {
                t.cq_set(cq.producer(), ready, arrival);
            }
            cq.push(&Cqe {
                rss_hash: hash,
                byte_cnt: len,
                hdr_len: hl as u16,
                ring,
                syndrome: err,
                wqe_counter: c as u16,
                payload_counter: pcount,
                opcode: if err == 0 {
                    cqe_op::RESP_SEND
                } else {
                    cqe_op::RESP_ERR
                },
            });
        }
        self.hdr.nic_commit(hc);
        if let (Some(r), Some(c)) = (self.primary.as_mut(), pc) {
            r.nic_commit(c);
        }
        if let (Some(r), Some(c)) = (self.secondary.as_mut(), sc) {
            r.nic_commit(c);
        }
        self.rx_cq.commit(cq);
        let frames = got as u64;
        if !TIMED {
            model.rx_untimed_many(run.0, run.1, run.2, run.3);
            model.rx_wqes_untimed(got as u32, posted0);
        }
        model.wire_rx_frames(frames, bytes + frames * model.wire_overhead());
        model.rx_pass_done();
    }

    /// The frame-by-frame receive of a timed queue, of the `got` frames in `rx_batch` (lengths
    /// in `rx_lens`): each is staged and received as [`VnicQueue::nic_rx`] receives a frame it
    /// takes from a ring.
    #[inline(never)]
    fn nic_rx_frames_timed(&mut self, got: usize) {
        let ovh = self.model.wire_overhead();
        let (mut frames, mut bytes) = (0u64, 0u64);
        let mut off = 0;
        for i in 0..got {
            let len = self.rx_lens[i] as usize;
            self.rx_stage[..len].copy_from_slice(&self.rx_batch[off..off + len]);
            off += batch_step(len);
            frames += 1;
            bytes += len as u64 + ovh;
            self.admit(len, ovh);
        }
        self.model.wire_rx_frames(frames, bytes);
        self.model.rx_pass_done();
    }

    /// The receive of an untimed batch whose frames all go whole to the header ring (none
    /// longer than the split offset) without a hash. A batch of frames of one length whose
    /// descriptors are all valid (a burst of one flow) goes in short loops with few live values
    /// each: validate every descriptor ([`NicCursor::places_for`], noting in `place` where
    /// each frame goes), copy the frames, charge them as one run, write the completions. Any
    /// other batch goes in one pass: each frame's descriptor is validated as
    /// [`NicCursor::take`] validates it, the frame copied, and its completion written (an
    /// error completion for a refused descriptor), runs of equal lengths charged together. The
    /// cursors are local copies for the pass. A timed queue (`TIMED`) notes each refused frame
    /// for the booking after the pass ([`NicModel::rx_book_whole`]).
    #[inline(never)]
    fn receive_whole<const TIMED: bool>(
        lens: &[u32],
        batch: &[u8],
        place: &mut [u64],
        hc: &mut NicCursor,
        cq: &mut CqCursor,
        model: &mut NicModel,
    ) {
        let (mut c, mut q) = (*hc, *cq);
        let room = c.room();
        if let Some(&len) = lens.first()
            && lens.iter().fold(true, |same, &l| same & (l == len))
            && c.places_for(len, &mut place[..lens.len()])
        {
            // Frames of one length, every descriptor valid (a burst of one flow): copy them,
            // charge them as one run and write their completions, each a loop of its own.
            let n = lens.len();
            let first = c.skip(n as u32);
            let (step, l) = (batch_step(len as usize), len as usize);
            if l <= FIXED_COPY && room >= FIXED_COPY && (n - 1) * step + FIXED_COPY <= batch.len() {
                for (i, &at) in place[..n].iter().enumerate() {
                    // SAFETY: `places_for` accepted the posted buffer's data area, `room >=
                    // FIXED_COPY` bytes that the driver does not touch until the completion is
                    // polled; the stage holds `FIXED_COPY` bytes from frame `i`'s start
                    // (checked) and is a different allocation.
                    unsafe {
                        let dst = std::slice::from_raw_parts_mut(c.at(at), FIXED_COPY);
                        let src =
                            std::slice::from_raw_parts(batch.as_ptr().add(i * step), FIXED_COPY);
                        nicmem::copy_prefix(dst, src, FIXED_COPY);
                    }
                }
            } else {
                for (i, &at) in place[..n].iter().enumerate() {
                    // SAFETY: as in the frame-by-frame loop below.
                    unsafe { dma_write(c.at(at), room, &batch[i * step..], l) };
                }
            }
            model.rx_untimed_many(len, 0, 0, n as u64);
            q.push_whole(first, n as u32, len);
            (*hc, *cq) = (c, q);
            return;
        }
        let (mut run_len, mut run) = (0u32, 0u64);
        let mut off = 0;
        for (i, &len) in lens.iter().enumerate() {
            let (counter, r) = c.take(len as usize);
            let (syn, opcode) = match r {
                Ok(dst) => {
                    // SAFETY: `take` accepted the posted buffer's data area for `len <= room`
                    // bytes; the driver does not touch a posted buffer until its completion is
                    // polled, and the stage is a different allocation.
                    unsafe { dma_write(dst, room, &batch[off..], len as usize) };
                    if len != run_len {
                        model.rx_untimed_many(run_len, 0, 0, run);
                        (run_len, run) = (len, 0);
                    }
                    run += 1;
                    (0, cqe_op::RESP_SEND)
                }
                Err(e) => {
                    if TIMED {
                        model.rx_refused_in_pass(i);
                    }
                    refused_whole(model, e)
                }
            };
            off += batch_step(len as usize);
            q.push(&Cqe {
                rss_hash: 0,
                byte_cnt: len,
                hdr_len: len as u16,
                ring: cqe_ring::NONE,
                syndrome: syn,
                wqe_counter: counter,
                payload_counter: 0,
                opcode,
            });
        }
        model.rx_untimed_many(run_len, 0, 0, run);
        (*hc, *cq) = (c, q);
    }

    /// The frame-by-frame receive of [`VnicQueue::nic_rx_untimed`], of the `got` frames in
    /// `rx_batch` (lengths in `rx_lens`).
    #[inline(never)]
    fn nic_rx_frames<const SPLIT: bool>(&mut self, got: usize) {
        let Self {
            p,
            hdr,
            primary,
            secondary,
            rx_cq,
            rx_batch,
            rx_lens,
            rss,
            stats,
            model,
            ..
        } = self;
        let (h, max, fc) = (p.split_offset, p.max_frame, p.flow_control);
        let ovh = model.wire_overhead();
        let posted0 = hdr.posted();
        let mut hc = hdr.nic_cursor();
        let mut pc = primary.as_ref().map(|r| r.nic_cursor());
        let mut sc = secondary.as_ref().map(|r| r.nic_cursor());
        let mut cq = rx_cq.cursor();
        let lens = &rx_lens[..got];
        let (mut bytes, mut taken) = (0u64, 0u32);
        let (mut oversize, mut missed) = (0u64, 0u64);
        let frames = got as u64;
        let mut off = 0;
        for &len in lens {
            let len = len as usize;
            let stage = &rx_batch[off..];
            off += batch_step(len);
            bytes += len as u64;
            if len == 0 {
                continue;
            }
            if len > max {
                oversize += 1;
                continue;
            }
            let hl = if SPLIT { len.min(h) } else { len };
            let pay_ring = if SPLIT && len > hl {
                match (&mut pc, &mut sc) {
                    (Some(c), _) if c.posted() > 0 => Some((cqe_ring::PRIMARY, c)),
                    (_, Some(c)) if c.posted() > 0 => Some((cqe_ring::SECONDARY, c)),
                    _ => None,
                }
            } else {
                None
            };
            if !fc && (hc.posted() == 0 || (len > hl && pay_ring.is_none())) {
                missed += 1;
                continue;
            }
            taken += 1;
            let hash = match rss {
                Some(r) => r.hash_frame(&stage[..len]),
                None => 0,
            };
            let (c, r1) = hc.take(hl);
            if let Ok(dst) = r1 {
                // SAFETY: `take` returned the posted buffer's header area, which has room for
                // `room() >= hl` bytes; the driver does not touch a posted buffer until its
                // completion is polled, and the stage is a different allocation.
                unsafe { dma_write(dst, hc.room(), stage, hl) };
            }
            let (ring, pcount, err) = match pay_ring {
                None if SPLIT && len > hl => (cqe_ring::NONE, 0, Some(syndrome::LOCAL_LENGTH)),
                None => (cqe_ring::NONE, 0, r1.err()),
                Some((ring, cur)) => {
                    let plen = len - hl;
                    let (pcount, res) = cur.take(plen);
                    if let (Ok(_), Ok(dst)) = (r1, res)
                        && cur.keeps_bytes()
                    {
                        // SAFETY: as for the header: `room() >= plen` bytes of the posted
                        // payload buffer, untouched by the driver until the completion is polled.
                        unsafe { dma_write(dst, cur.room(), &stage[hl..], plen) };
                    }
                    (ring, pcount, r1.err().or(res.err()))
                }
            };
            match err {
                None if SPLIT => {
                    let plen = (len - hl) as u32;
                    let (hp, np) = match ring {
                        cqe_ring::PRIMARY => (0, plen),
                        cqe_ring::SECONDARY => (plen, 0),
                        _ => (0, 0),
                    };
                    model.rx_untimed(hl as u32, hp, np);
                }
                None => model.rx_untimed(hl as u32, 0, 0),
                Some(_) => model.rx_cqes(1),
            }
            cq.push(&Cqe {
                rss_hash: hash,
                byte_cnt: len as u32,
                hdr_len: hl as u16,
                ring,
                syndrome: err.unwrap_or(0),
                wqe_counter: c,
                payload_counter: pcount,
                opcode: if err.is_some() {
                    cqe_op::RESP_ERR
                } else {
                    cqe_op::RESP_SEND
                },
            });
        }
        hdr.nic_commit(hc);
        if let (Some(r), Some(c)) = (primary.as_mut(), pc) {
            r.nic_commit(c);
        }
        if let (Some(r), Some(c)) = (secondary.as_mut(), sc) {
            r.nic_commit(c);
        }
        rx_cq.commit(cq);
        stats.rx_oversize += oversize;
        stats.rx_missed += missed;
        model.rx_wqes_untimed(taken, posted0);
        model.wire_rx_frames(frames, bytes + frames * ovh);
        model.rx_pass_done();
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
            if !self.has_descriptors(len) {
                self.stats.rx_missed += 1;
                continue;
            }
            let prim = self.primary.as_ref().is_some_and(|r| r.posted() > 0);
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
        self.model.rx_pass_done();
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
    #[inline(always)]
    fn receive(&mut self, len: usize, at: Ps) {
        let splits = self.p.mode.splits();
        let h = self.p.split_offset;
        let stage = &self.rx_stage[..];
        let hash = match &self.rss {
            Some(r) => r.hash_frame(&stage[..len]),
            None => 0,
        };
        let timed = self.model.t.is_some();
        let posted = self.hdr.posted();
        self.model.rx_wqe_consumed(posted, at);
        let slot = self.rx_cq.producer();
        let hl = if splits { len.min(h) } else { len };
        let (c, r1) = self.hdr.nic_take(hl);
        if let Ok(dst) = r1 {
            // SAFETY: `nic_take` returned the posted buffer's header area, which has room for
            // `room() >= hl` bytes; the driver does not touch a posted buffer until its
            // completion is polled, and the stage is a different allocation.
            unsafe { dma_write(dst, self.hdr.room(), stage, hl) };
        }
        let payload_ring = match self.primary.as_mut().filter(|r| r.posted() > 0) {
            Some(r) => Some((cqe_ring::PRIMARY, r)),
            None => self.secondary.as_mut().map(|r| (cqe_ring::SECONDARY, r)),
        };
        let (ring, pc, r2, host_pay, nic_pay) = if len <= hl {
            (cqe_ring::NONE, 0, Ok(()), 0, 0)
        } else if let Some((ring, r)) = payload_ring {
            let (pay, plen) = (&stage[hl..], len - hl);
            let (pc, res) = r.nic_take(plen);
            if let (Ok(_), Ok(dst)) = (r1, res)
                && r.keeps_bytes()
            {
                // SAFETY: as for the header: `room() >= plen` bytes of the posted payload
                // buffer, untouched by the driver until the completion is polled.
                unsafe { dma_write(dst, r.room(), pay, plen) };
            }
            let (hp, np) = if ring == cqe_ring::PRIMARY {
                (0, plen)
            } else {
                (plen, 0)
            };
            (ring, pc, res.map(|_| ()), hp, np)
        } else {
            // A payload with no payload ring (cannot happen in a split mode, which always has a
            // secondary ring): the frame does not fit the header buffer.
            (cqe_ring::NONE, 0, Err(syndrome::LOCAL_LENGTH), 0, 0)
        };
        let err = r1.err().or(r2.err());
        let ready = if timed {
            if err.is_none() {
                self.model
                    .rx_timed(at, hl as u32, host_pay as u32, nic_pay as u32)
            } else {
                self.model.rx_refused_timed(at)
            }
        } else {
            if err.is_none() {
                self.model
                    .rx_untimed(hl as u32, host_pay as u32, nic_pay as u32);
            } else {
                self.model.rx_cqes(1);
            }
            0
        };
        self.rx_cq.push(&Cqe {
            rss_hash: hash,
            byte_cnt: len as u32,
            hdr_len: hl as u16,
            ring,
            syndrome: err.unwrap_or(0),
            wqe_counter: c,
            payload_counter: pc,
            opcode: if err.is_some() {
                cqe_op::RESP_ERR
            } else {
                cqe_op::RESP_SEND
            },
        });
        if let Some(t) = self.model.t.as_deref_mut() {
            t.cq_set(slot, ready, at);
        }
    }

    /// Rings the doorbell: the NIC fetches every posted WQE and processes it onto the wire.
    pub fn tx_doorbell(&mut self) {
        // The NIC serves no doorbell of a send queue in the error state (`faults.rs`).
        if !self.faults.as_ref().is_some_and(|f| f.sq_error) {
            self.doorbell(false);
        }
    }

    /// [`VnicQueue::tx_doorbell`]; with `fail_first`, the DMA read of the first WQE fails (an
    /// injected fault, see [`TxRing::nic_fail_next`]). Returns whether a WQE failed.
    #[inline(always)]
    fn doorbell(&mut self, fail_first: bool) -> bool {
        let nbb = self.tx.unprocessed();
        if nbb == 0 {
            return false;
        }
        let ready = self.model.tx_doorbell(nbb);
        let failed = fail_first
            && self
                .tx
                .nic_fail_next(syndrome::LOCAL_ACCESS, &mut self.model, ready);
        if failed {
            // The error completion put the send queue in the error state: the NIC reads no
            // further WQE until the driver recovers it (`faults.rs`).
            return true;
        }
        let egress = &mut self.egress;
        let mut wire = |buf: &[u8], lens: &[u32]| match egress {
            Egress::Sink(s) => s.deliver_batch(buf, lens),
            Egress::Ring(r) => {
                let mut off = 0;
                for &len in lens {
                    let f = &buf[off..off + len as usize];
                    off += batch_step(len as usize);
                    // The front end drains the ring concurrently; wait for room rather than
                    // lose a frame the NIC has already taken.
                    while !r.push(f) {
                        std::thread::yield_now();
                    }
                }
            }
        };
        let out = self.tx.nic_process(
            &self.table,
            self.pd,
            &self.layout,
            &mut self.stage,
            &mut self.tx_lens,
            &mut wire,
            &mut self.model,
            ready,
        );
        self.stats.wire_tx_frames += out.frames;
        self.stats.desc_errors += out.errors;
        failed
    }

    /// The injected faults' part of a receive burst (see `faults.rs`): rings again a doorbell
    /// the NIC lost (the driver's recovery on its next poll), loses the frames that arrive while
    /// the link is down, and corrupts the next Rx descriptor when that fault is due. Returns how
    /// many frames the NIC may receive in this burst (none while the link is down).
    #[cold]
    #[inline(never)]
    fn rx_faults(&mut self, want: usize) -> usize {
        let Some(mut f) = self.faults.take() else {
            return want;
        };
        if f.reset_due(self.stats.rx_packets + f.counts.link_down_drops) {
            self.device_reset(&mut f);
        }
        if f.sq_error {
            self.recover_sq(&mut f);
        }
        if f.doorbell_owed {
            self.ring_owed(&mut f);
        }
        let mut budget = want;
        if f.down_left == 0 {
            f.frames_seen(self.stats.rx_packets + f.counts.link_down_drops);
        }
        if f.down_left > 0 {
            let n = (f.down_left.min(want as u64) as usize).min(MAX_BURST);
            let got = self
                .ingress
                .next_batch(&mut self.rx_batch, &mut self.rx_lens[..n]);
            f.down_left -= got as u64;
            f.counts.link_down_drops += got as u64;
            if got == 0 && self.ingress.exhausted() {
                // Nothing more will arrive: the link comes back to an idle wire.
                f.down_left = 0;
            }
            budget = 0;
        } else if self.hdr.posted() > 0
            && let Some(c) = f.rx_corruption_due()
            && self.hdr.corrupt_next(|seg| c.apply(seg))
        {
            f.counts.rx_desc_corrupted += 1;
        }
        self.faults = Some(f);
        budget
    }

    /// The injected faults' part of a send burst (`n` WQEs just posted): a failed DMA read is
    /// due after some WQEs, and the doorbell may be lost (the WQEs then wait for the driver's
    /// next poll, [`VnicQueue::rx_faults`], or the next doorbell); a device reset due now loses
    /// the WQEs just posted.
    #[cold]
    #[inline(never)]
    fn tx_faults(&mut self, n: usize) {
        let Some(mut f) = self.faults.take() else {
            return;
        };
        if f.reset_due(self.stats.rx_packets + f.counts.link_down_drops) {
            self.device_reset(&mut f);
        } else if n > 0 {
            if f.tx_dma_due(n as u64) {
                f.tx_fail_pending = true;
            }
            if !f.doorbell_lost() {
                self.ring_owed(&mut f);
            }
        }
        self.faults = Some(f);
    }

    /// Rings the doorbell with the faults state `f` (taken out of the queue): fails the first
    /// WQE's DMA read when that is pending, and settles a lost doorbell this one covers.
    fn ring_owed(&mut self, f: &mut FaultState) {
        if f.sq_error {
            self.recover_sq(f);
        }
        if std::mem::take(&mut f.doorbell_owed) {
            f.counts.doorbells_rerung += 1;
        }
        if self.doorbell(f.tx_fail_pending) {
            f.tx_fail_pending = false;
            f.counts.tx_dma_errors += 1;
            f.sq_error = true;
        }
    }

    /// The driver's recovery of a send queue in the error state (mlx5: SQ error -> reset ->
    /// ready): polls the completions, the error one included, drops the WQEs posted behind the
    /// failed one (counted) and returns their buffers, and starts the ring afresh.
    #[cold]
    fn recover_sq(&mut self, f: &mut FaultState) {
        self.reclaim();
        f.counts.sq_error_drops += self.drain_tx();
        f.counts.sq_recoveries += 1;
        f.sq_error = false;
        f.doorbell_owed = false;
    }

    /// The driver's recovery after a device reset (`faults.rs`): every descriptor and all work
    /// in flight are gone, so it takes back every buffer from the rings, the completion queues
    /// and the send queue, counts the frames lost with them, and posts fresh descriptors.
    #[cold]
    fn device_reset(&mut self, f: &mut FaultState) {
        let (rx, tx) = self.release_all();
        f.counts.reset_rx_drops += rx;
        f.counts.reset_tx_drops += tx;
        f.sq_error = false;
        f.doorbell_owed = false;
        self.refill();
    }

    /// Empties the send queue, returning every buffer it holds; returns the packets the NIC
    /// never read.
    fn drain_tx(&mut self) -> u64 {
        let cache = &mut self.cache;
        let model = &mut self.model;
        self.tx.drain(&mut |c| {
            // SAFETY: the send queue's buffers, given up by the drained ring.
            unsafe { cache.free_sorted(c.hdr, c.pay, c.nic) };
            model.nicmem_freed(c.nic_bytes);
        })
    }

    /// Frees completed sends, in bulk.
    fn reclaim(&mut self) {
        let cache = &mut self.cache;
        let model = &mut self.model;
        self.tx.complete(&mut |c| {
            // SAFETY: the send queue held these buffers (of this queue's arena) until their
            // completion; it gives them up here.
            unsafe { cache.free_sorted(c.hdr, c.pay, c.nic) };
            model.nicmem_freed(c.nic_bytes);
        });
    }

    /// Driver side: posts the packets of `pkts` to the send queue without ringing the doorbell;
    /// what does not fit is freed and counted in `drops`. Returns the number posted.
    pub fn tx_post(&mut self, pkts: &mut Burst, drops: &mut DropCounts) -> usize {
        if !pkts.owned_by(&self.owner) {
            self.stats.tx_foreign += pkts.len() as u64;
            drops.add(DropReason::TX_INVALID, pkts.len() as u64);
            pkts.clear();
            return 0;
        }
        self.reclaim();
        // A paced queue also needs room in model time: WQEs whose frames have not left yet
        // still occupy the ring (unpaced, flow control holds the sender instead).
        let limit = match self.model.t.as_deref_mut() {
            Some(t) if t.paced() => t.tx_room(self.tx.size()),
            _ => u32::MAX,
        };
        let v = pkts.tx_view();
        let (sent, bytes, nref) = self
            .tx
            .post_burst(v, &self.layout, limit, &mut self.refused);
        if nref > 0 {
            let mut nic = 0u64;
            for (k, &(i, e)) in self.refused[..nref].iter().enumerate() {
                let i = i as usize;
                let r = match e {
                    PostError::Full => {
                        self.stats.tx_full += 1;
                        DropReason::TX_FULL
                    }
                    PostError::TooBig => DropReason::TX_INVALID,
                };
                drops.add(r, 1);
                self.unsent[k] = v.handle[i];
                if v.ring[i] == PayloadRing::Primary {
                    nic += u64::from(v.frame_len[i] - u32::from(v.hdr_len[i]));
                }
            }
            // SAFETY: these packets of this queue's arena were not posted; the burst gives them
            // up below.
            unsafe { self.cache.free_packets(&self.layout, &self.unsent[..nref]) };
            self.model.nicmem_freed(nic);
        }
        pkts.disown();
        self.stats.tx_packets += sent as u64;
        self.stats.tx_bytes += bytes;
        sent
    }

    /// Accounting counters so far (tests and benchmarks).
    pub fn model_counters(&self) -> super::model::NicCounters {
        self.model.counters()
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

    /// The queue's packet arena (its buffers' pools).
    pub fn arena(&self) -> &PacketArena {
        &self.arena
    }

    /// Returns the buffers a completion names to their caches (see [`give_back`]).
    fn give_back(&mut self, hdr: u32, ring: u8, payload: u32) {
        give_back(&mut self.cache, hdr, ring, payload);
    }

    /// Harvests pending completions, up to the burst's room, into the burst: the driver's
    /// completion polling. The pass carries only the completion queue's position and the
    /// burst's length (the header ring's consumer count advances once per completion, so once
    /// per pass; byte counts are summed from the burst afterwards); the layout and the rings'
    /// views are locals. `SPLIT` is the mode's [`DatapathMode::splits`].
    ///
    /// An untimed queue stamps every packet's arrival 0 (it keeps no clock); a timed one
    /// (`TIMED`) stamps each with its frame's arrival and, with `until`, takes only completions
    /// visible by then. Returns the packets added and the latest visibility time harvested
    /// (timed).
    #[inline(never)]
    fn harvest<const SPLIT: bool, const TIMED: bool>(
        &mut self,
        burst: &mut Burst,
        until: Option<Ps>,
    ) -> (usize, Ps) {
        let (from, bytes0) = (burst.len(), burst.bytes());
        let mut cq = self.rx_cq.poll_cursor();
        let hc = self.hdr.sw_cursor();
        // The payload rings' views as locals: the metadata writes below go through raw pointers,
        // which would otherwise make the compiler reload the rings' fields for every packet.
        let primary = self.primary.as_ref().map(|r| r.sw_cursor());
        let secondary = self.secondary.as_ref().map(|r| r.sw_cursor());
        let (mut np, mut ns) = (0u32, 0u32);
        let hroom = hc.room();
        let hdr_l = self.layout.hdr;
        // Header pools never alias (only nicmem pools may): buffer `h` starts `h * buf_size`
        // bytes in.
        debug_assert!(!hdr_l.aliased, "header pools never alias");
        let (hbase, hsize) = (hdr_l.base, hdr_l.buf_size);
        let cache = &mut self.cache;
        let mut w = burst.rx_writer();
        let n = (w.room() as u32).min(self.rx_cq.pending());
        let ci0 = cq.consumer();
        let end = ci0.wrapping_add(n);
        let (mut err_p, mut err_s) = (0u32, 0u32);
        // A timed queue's completion slot times as a local view (the metadata writes below
        // would otherwise make the compiler reload them per packet), and the visibility limit.
        let (cq_times, cq_mask) = match self.model.t.as_deref() {
            Some(t) if TIMED => t.cq_slots(),
            _ => (&[][..], 0),
        };
        let limit = until.unwrap_or(Ps::MAX);
        let mut latest = 0;
        if !TIMED {
            // The leading run of completions of frames received whole (every completion of a
            // burst of short frames), in a loop of its own.
            harvest_whole(&mut cq, n, &hc, (hbase, hsize, hroom), &mut w);
        }
        while cq.consumer() != end {
            let arrival = if TIMED && !cq_times.is_empty() {
                let (ready, arrival) = cq_times[(cq.consumer() & cq_mask) as usize];
                if ready > limit {
                    break;
                }
                latest = latest.max(ready);
                arrival
            } else {
                0
            };
            let Some(cqe) = cq.poll() else {
                break;
            };
            let h = hc.buf(cqe.wqe_counter);
            let hl = cqe.hdr_len as usize;
            if SPLIT
                && cqe.opcode == cqe_op::RESP_SEND
                && cqe.ring == cqe_ring::NONE
                && cqe.byte_cnt as usize == hl
                && hl <= hroom
            {
                // The commonest completion of a split mode, straight-line: the whole frame in its
                // header buffer (what the general checks below accept for it).
                let buf = hbase.wrapping_add(h as usize * hsize);
                // SAFETY: as below.
                unsafe {
                    *buf.cast::<PacketMeta>() = PacketMeta {
                        payload: 0,
                        ring: PayloadRing::None,
                        arrival,
                    };
                }
                // SAFETY: as below.
                let pushed = unsafe {
                    w.push(&RxPacket {
                        handle: h as usize,
                        hdr: buf.wrapping_add(crate::arena::DATA_OFF),
                        hdr_len: hl as u16,
                        headroom: HEADROOM as u16,
                        frame_len: hl as u32,
                        ring: PayloadRing::None,
                        rss_hash: cqe.rss_hash,
                    })
                };
                debug_assert!(pushed, "room was checked");
                continue;
            }
            let (pidx, kind, room) = if SPLIT && cqe.ring != cqe_ring::NONE {
                match (cqe.ring, primary, secondary) {
                    (cqe_ring::PRIMARY, Some(r), _) => {
                        np += 1;
                        (r.buf(cqe.payload_counter), PayloadRing::Primary, r.room())
                    }
                    (cqe_ring::SECONDARY, _, Some(r)) => {
                        ns += 1;
                        (r.buf(cqe.payload_counter), PayloadRing::Secondary, r.room())
                    }
                    _ => (0, PayloadRing::None, 0),
                }
            } else {
                (0, PayloadRing::None, 0)
            };
            let len = cqe.byte_cnt as usize;
            // The lengths fit the buffers, and a payload came exactly when the frame is longer
            // than its header segment.
            let fits = if kind == PayloadRing::None {
                len == hl && hl <= hroom
            } else {
                hl <= hroom && len > hl && len - hl <= room
            };
            if cqe.is_error() || !fits {
                let ring = if SPLIT { cqe.ring } else { cqe_ring::NONE };
                err_p += u32::from(kind == PayloadRing::Primary);
                err_s += u32::from(kind == PayloadRing::Secondary);
                give_back(cache, h, ring, pidx);
                continue;
            }
            let buf = hbase.wrapping_add(h as usize * hsize);
            // SAFETY: header buffer `h` was just harvested: the driver owns it and nothing else
            // refers to its metadata, which starts the buffer (64-byte aligned, `META_BYTES`
            // long).
            unsafe {
                *buf.cast::<PacketMeta>() = PacketMeta {
                    payload: pidx,
                    ring: kind,
                    arrival,
                };
            }
            // SAFETY: the burst adopted this queue's arena as owner (checked by `rx_burst`); the
            // header pointer names `hl <= room` bytes of buffer `h`, after `HEADROOM` bytes of
            // the same buffer, all owned by the packet from now on.
            let pushed = unsafe {
                w.push(&RxPacket {
                    handle: h as usize,
                    hdr: buf.wrapping_add(crate::arena::DATA_OFF),
                    hdr_len: hl as u16,
                    headroom: HEADROOM as u16,
                    frame_len: len as u32,
                    ring: kind,
                    rss_hash: cqe.rss_hash,
                })
            };
            debug_assert!(pushed, "room was checked");
        }
        w.finish();
        let polled = cq.consumer().wrapping_sub(ci0);
        self.rx_cq.poll_commit(cq);
        self.hdr.sw_release(polled);
        if let Some(r) = self.primary.as_mut() {
            r.sw_release(np);
        }
        if let Some(r) = self.secondary.as_mut() {
            r.sw_release(ns);
        }
        let got = burst.len() - from;
        let port = self.p.port_id;
        burst.set_rx_defaults(from, port, Verdict::tx(port));
        self.stats.rx_packets += got as u64;
        self.stats.rx_bytes += burst.bytes() - bytes0;
        self.stats.rx_primary += u64::from(np - err_p);
        self.stats.rx_secondary += u64::from(ns - err_s);
        self.stats.desc_errors += u64::from(polled) - got as u64;
        (got, latest)
    }

    /// `rx_burst` of a timed queue (see the module docs), the NIC receiving up to `want` frames.
    fn rx_burst_timed(&mut self, burst: &mut Burst, want: usize) -> usize {
        let Some(t) = self.model.t.as_deref_mut() else {
            return 0;
        };
        let now = t.sync();
        let (virt, paced) = (t.is_virtual(), t.paced());
        if !paced {
            self.nic_rx(want);
            let (got, latest) = if self.p.mode.splits() {
                self.harvest::<true, true>(burst, None)
            } else {
                self.harvest::<false, true>(burst, None)
            };
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
        let (got, _) = if self.p.mode.splits() {
            self.harvest::<true, true>(burst, Some(until))
        } else {
            self.harvest::<false, true>(burst, Some(until))
        };
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
            t.ddio_update(entries, host, len);
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

    /// Takes every buffer back from the rings, the completion queue and the send queue (queue
    /// teardown, device reset). Returns the frames received but never polled and the packets
    /// posted for sending but never read by the NIC.
    fn release_all(&mut self) -> (u64, u64) {
        let unsent = self.drain_tx();
        let mut unpolled = 0;
        // Completions the driver never polled: their buffers return too.
        while let Some(cqe) = self.rx_cq.poll() {
            unpolled += 1;
            let h = self.hdr.harvest(cqe.wqe_counter);
            let ring = cqe.ring.min(cqe_ring::SECONDARY + 1);
            let pidx = match ring {
                cqe_ring::PRIMARY => self
                    .primary
                    .as_mut()
                    .map_or(0, |r| r.harvest(cqe.payload_counter)),
                cqe_ring::SECONDARY => self
                    .secondary
                    .as_mut()
                    .map_or(0, |r| r.harvest(cqe.payload_counter)),
                _ => 0,
            };
            self.give_back(h, ring, pidx);
        }
        let mut idx = Vec::new();
        self.hdr.drain(&mut idx);
        // SAFETY: posted, unconsumed header buffers owned by the ring, given up here.
        unsafe { self.cache.hdr.free_indices(&idx) };
        if let (Some(r), Some(c)) = (&mut self.primary, &mut self.cache.nic) {
            idx.clear();
            r.drain(&mut idx);
            // SAFETY: as above, for the primary ring's nicmem buffers.
            unsafe { c.free_indices(&idx) };
        }
        if let (Some(r), Some(c)) = (&mut self.secondary, &mut self.cache.pay) {
            idx.clear();
            r.drain(&mut idx);
            // SAFETY: as above, for the secondary ring's host buffers.
            unsafe { c.free_indices(&idx) };
        }
        (unpolled, unsent)
    }
}

impl Queue for VnicQueue {
    fn rx_burst(&mut self, burst: &mut Burst) -> usize {
        let mut want = burst.room();
        if want == 0 || !burst.adopt(&self.owner) {
            return 0;
        }
        if self.faults.is_some() {
            want = self.rx_faults(want);
        }
        let got = if self.model.t.is_some() {
            let got = self.rx_burst_timed(burst, want);
            if got > 0 {
                self.ddio_update();
            }
            got
        } else {
            self.nic_rx(want);
            // An untimed queue keeps no clock (a clock read costs about as much as forwarding a
            // packet here): its packets' arrival is 0, which only the timing layer would read.
            if self.p.mode.splits() {
                self.harvest::<true, false>(burst, None).0
            } else {
                self.harvest::<false, false>(burst, None).0
            }
        };
        self.refill();
        if self.model.tick()
            && let Some(l) = self.live()
        {
            self.model.publish(l);
        }
        got
    }

    fn tx_burst(&mut self, pkts: &mut Burst, drops: &mut DropCounts) -> usize {
        if let Some(t) = self.model.t.as_deref_mut() {
            let now = t.sync();
            if t.paced() {
                // The NIC kept receiving while the CPU worked: book those arrivals first, so
                // every timeline is booked in time order.
                self.nic_rx_paced(now);
            }
        }
        let n = self.tx_post(pkts, drops);
        if self.faults.is_some() {
            self.tx_faults(n);
        } else if n > 0 {
            self.doorbell(false);
        }
        n
    }

    fn free_burst(&mut self, pkts: &mut Burst) {
        if !pkts.owned_by(&self.owner) {
            pkts.clear();
            return;
        }
        let mut nic = 0u64;
        for i in 0..pkts.len() {
            if pkts.ring(i) == PayloadRing::Primary {
                nic += pkts.payload_len(i) as u64;
            }
        }
        // SAFETY: the burst's packets belong to this queue's arena (checked above); the burst
        // gives them up right after.
        unsafe { self.cache.free_packets(&self.layout, pkts.handles()) };
        pkts.disown();
        self.model.nicmem_freed(nic);
    }

    fn push_frame(&mut self, burst: &mut Burst, frame: &[u8]) -> bool {
        let len = frame.len();
        if len > self.p.max_frame || burst.room() == 0 || !burst.adopt(&self.owner) {
            return false;
        }
        let hl = if self.p.mode.splits() {
            len.min(self.p.split_offset)
        } else {
            len
        };
        let Some(h) = self.cache.hdr.alloc_index() else {
            return false;
        };
        let (ring, pidx) = if len > hl {
            match (
                self.cache.pay.as_mut().and_then(|c| c.alloc_index()),
                self.layout.pay,
            ) {
                (Some(p), Some(l)) => {
                    // SAFETY: payload buffer `p` was just allocated and is owned here; it holds
                    // `max_frame - split_offset >= len - hl` bytes.
                    unsafe {
                        std::ptr::copy_nonoverlapping(frame[hl..].as_ptr(), l.ptr(p), len - hl)
                    };
                    (PayloadRing::Secondary, p)
                }
                _ => {
                    give_back(&mut self.cache, h, cqe_ring::NONE, 0);
                    return false;
                }
            }
        } else {
            (PayloadRing::None, 0)
        };
        let hdr = self.layout.header_ptr(h);
        // SAFETY: header buffer `h` was just allocated and is owned here; its header area holds
        // `hl <= split_offset` (or `max_frame`) bytes; its metadata is not referenced elsewhere.
        unsafe {
            std::ptr::copy_nonoverlapping(frame.as_ptr(), hdr, hl);
            *self.layout.meta(h) = PacketMeta {
                payload: pidx,
                ring,
                arrival: 0,
            };
        }
        let from = burst.len();
        // SAFETY: the burst adopted this queue's arena; the header names `hl` bytes of buffer
        // `h` after `HEADROOM` bytes of the same buffer, owned by the packet from now on.
        let pushed = unsafe {
            burst.push(&RxPacket {
                handle: h as usize,
                hdr,
                hdr_len: hl as u16,
                headroom: HEADROOM as u16,
                frame_len: len as u32,
                ring,
                rss_hash: 0,
            })
        };
        debug_assert!(pushed, "room was checked");
        let port = self.p.port_id;
        burst.set_rx_defaults(from, port, Verdict::tx(port));
        true
    }

    fn flush(&mut self) {
        // A paced queue is idle between arrivals; like a DPDK application it leaves sent
        // buffers to the completion threshold then, and forces a completion only once the wire
        // has nothing more to deliver.
        let paced = self.model.t.as_deref().is_some_and(|t| t.paced());
        if (!paced || self.ingress_done()) && (self.tx.completion_owed() || !self.tx.is_empty()) {
            self.tx.post_completion_request();
            match self.faults.take() {
                Some(mut f) => {
                    self.ring_owed(&mut f);
                    self.faults = Some(f);
                }
                None => {
                    self.doorbell(false);
                }
            }
        }
        self.reclaim();
    }

    fn idle(&self) -> bool {
        self.ingress_done() && self.rx_cq.pending() == 0 && self.tx.is_empty()
    }

    fn stats(&self) -> QueueStats {
        let mut s = self.stats;
        if let Some(f) = &self.faults {
            s.faults = f.counts;
        }
        s
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
        self.release_all();
        match &mut self.egress {
            Egress::Sink(s) => s.finish(),
            Egress::Ring(_) => {}
        }
    }
}
