//! The Tx side of a virtual NIC queue: the send queue of 64 B WQE basic blocks, the driver's WQE
//! builder, the NIC's send engine (parse the WQE, validate every data segment, gather the frame,
//! put it on the wire) and completion handling.
//!
//! WQE layout (mlx5-like): control segment, Ethernet segment whose last 2 bytes start the inline
//! header, inline bytes continuing in 16 B segments, then one data segment per gathered piece
//! (rest of the header segment if not all inlined, then the payload). The NIC writes a completion
//! for the WQEs that ask for one, and the driver frees every packet up to the completed WQE, in
//! bulk. The driver asks for a completion every `comp_every` WQEs **and** at least once per half
//! ring of WQE basic blocks, so the ring can never fill up with no completion on its way (a
//! `comp_every` larger than the ring would otherwise stall the queue for ever).
//!
//! As on Rx, data segments are validated against the queue's region table and, stricter than
//! hardware, against the buffers of the packet posted with that WQE; failures produce an error
//! completion with an mlx5 syndrome, the frame is not sent, and the packet is still freed.

use nicmem::{MemKey, PoolLayout, ProtectionDomain, RegionTable};

use super::desc::{
    Cqe, CtrlSeg, DataSeg, FLAG_CQE_REQUEST, OPCODE_SEND, SEG, WQEBB, cqe_op, syndrome, tx_wqe_ds,
};
use super::model::NicModel;
use super::rx::CompletionQueue;
use crate::arena::{ArenaLayout, META_BYTES};
use crate::burst::TxView;
use crate::link::{MAX_WIRE_FRAME, batch_step};
use crate::packet::PayloadRing;
use crate::pcie_model::timeline::{PS_PER_NS, Ps};

/// Control-segment opcode of a NOP (used to request a completion on flush).
const OPCODE_NOP: u8 = 0x00;
/// Largest WQE: 15 WQEBBs of 4 segments (mlx5's 60 DS, 960 B limit).
pub(crate) const MAX_DS: usize = 60;
/// The largest Tx inline size the virtual NIC takes: a WQE holds at most 60 16-byte
/// segments (mlx5's limit), of which the control and Ethernet segments and up to two data
/// pointers are not inline data.
pub const MAX_TX_INLINE: usize = 2 + (MAX_DS - 4) * SEG;
/// Offset of the inline data in a WQE: it starts in the last 2 bytes of the Ethernet segment
/// and continues in the following segments, so it is contiguous.
const INLINE_AT: usize = SEG + 14;
/// Marks a send-queue slot that holds no packet (a NOP, or the inside of a multi-block WQE).
const NO_PKT: u32 = u32::MAX;

/// Result of the NIC processing the WQEs of one doorbell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TxOutcome {
    /// Frames put on the wire.
    pub frames: u64,
    /// Descriptor errors: one per WQE completed in error, or per packet a failed WQE lost when
    /// that is more (see [`TxRing::nic_wqe`]).
    pub errors: u64,
}

/// Why the driver could not post a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PostError {
    /// No room in the ring (or in model time).
    Full,
    /// The packet cannot be described by one WQE (over [`MAX_DS`] segments).
    TooBig,
}

/// What the driver keeps per send-queue slot for the WQE starting there: the packet's buffers,
/// so the NIC knows which buffers that WQE may read.
#[derive(Clone, Copy)]
struct TxSlot {
    /// The producer count the WQE was posted at: a slot that does not hold the start of the
    /// WQE the NIC is at (the inside of a longer WQE, or a stale one a corrupt segment count
    /// made the NIC land on) names no packet.
    at: u32,
    /// Header buffer index of the packet posted with the WQE ([`NO_PKT`]: none).
    hdr: u32,
    /// Its payload buffer index (when `ring` is not `None`).
    pay: u32,
    /// WQEBBs of the WQE.
    nbb: u8,
    /// The pool of the payload buffer.
    ring: PayloadRing,
    /// The WQE asked for a completion, and `TxRing::ends` holds where the packet rings stood
    /// after it.
    ends: bool,
}

const EMPTY_SLOT: TxSlot = TxSlot {
    at: 0,
    hdr: NO_PKT,
    pay: 0,
    nbb: 0,
    ring: PayloadRing::None,
    ends: false,
};

/// Buffer indices of the packets in the send queue, in posting order (the mlx5 PMD's `elts`):
/// packets complete in order, so completed ones leave as contiguous slices.
struct IdxRing {
    idx: Box<[u32]>,
    /// Entries ever pushed.
    pi: u32,
    /// Entries ever released.
    ci: u32,
}

impl IdxRing {
    fn new(size: usize) -> Self {
        Self {
            idx: vec![0; size].into_boxed_slice(),
            pi: 0,
            ci: 0,
        }
    }

    /// Appends an entry (the caller keeps at most one per ring slot in flight).
    #[inline(always)]
    fn push(&mut self, idx: u32) {
        let m = self.idx.len() - 1;
        self.idx[self.pi as usize & m] = idx;
        self.pi = self.pi.wrapping_add(1);
    }

    /// The entries `ci..end` as at most two slices (the ring wraps), and releases them.
    #[inline]
    fn release_to(&mut self, end: u32) -> (&[u32], &[u32]) {
        let n = end.wrapping_sub(self.ci) as usize;
        let size = self.idx.len();
        let start = self.ci as usize & (size - 1);
        self.ci = end;
        let first = n.min(size - start);
        (&self.idx[start..start + first], &self.idx[..n - first])
    }
}

/// Buffers of completed sends, by pool (see [`TxRing::complete`]); a pool's buffers may come
/// in two slices.
pub(crate) struct Completed<'a> {
    /// Header buffers.
    pub hdr: &'a [u32],
    /// Host payload buffers.
    pub pay: &'a [u32],
    /// nicmem payload buffers.
    pub nic: &'a [u32],
    /// nicmem payload bytes they held.
    pub nic_bytes: u64,
}

pub(crate) struct TxRing {
    bbs: Box<[[u8; WQEBB]]>,
    /// Per slot: the packet posted with the WQE starting there.
    slots: Box<[TxSlot]>,
    /// Per slot whose WQE asked for a completion: the header, host payload and nicmem payload
    /// rings' producer counts after it (what that completion releases).
    ends: Box<[[u32; 3]]>,
    /// The buffers of posted packets: headers, host payloads, nicmem payloads.
    hdrs: IdxRing,
    pays: IdxRing,
    nics: IdxRing,
    /// Per `nics` entry: nicmem payload bytes posted up to and including it; and the total
    /// already released.
    nic_cum: Box<[u64]>,
    nic_released: u64,
    mask: u32,
    pi: u32,
    nic_ci: u32,
    sw_ci: u32,
    since_comp: u32,
    bbs_since_comp: u32,
    comp_every: u32,
    inline: usize,
    cq: CompletionQueue,
    /// Scratch for a WQE that wraps around the end of the ring (kept, so no per-doorbell
    /// zeroing).
    wrap: Box<[u8; MAX_DS * SEG]>,
}

impl TxRing {
    /// A send queue of `size` WQEBBs; `inline` header bytes per WQE (0: no inlining; at most
    /// [`MAX_TX_INLINE`], which the port's configuration checks, so an
    /// inlined frame's WQE always stays within [`MAX_DS`]); a completion every `comp_every`
    /// WQEs (and at least every half ring).
    pub(crate) fn new(size: usize, inline: usize, comp_every: usize) -> Self {
        let size = size.next_power_of_two().max(16);
        Self {
            bbs: vec![[0u8; WQEBB]; size].into_boxed_slice(),
            slots: vec![EMPTY_SLOT; size].into_boxed_slice(),
            ends: vec![[0; 3]; size].into_boxed_slice(),
            hdrs: IdxRing::new(size),
            pays: IdxRing::new(size),
            nics: IdxRing::new(size),
            nic_cum: vec![0; size].into_boxed_slice(),
            nic_released: 0,
            mask: size as u32 - 1,
            pi: 0,
            nic_ci: 0,
            sw_ci: 0,
            since_comp: 0,
            bbs_since_comp: 0,
            comp_every: comp_every.max(1) as u32,
            inline: inline.min(MAX_TX_INLINE),
            cq: CompletionQueue::new(size),
            wrap: Box::new([0u8; MAX_DS * SEG]),
        }
    }

    #[inline]
    fn seg_mut(&mut self, bb: u32, k: usize) -> &mut [u8; SEG] {
        let b = (bb.wrapping_add((k / 4) as u32) & self.mask) as usize;
        let o = (k % 4) * SEG;
        (&mut self.bbs[b][o..o + SEG])
            .try_into()
            .expect("16-byte segment")
    }

    /// WQEBBs in use (posted and not yet freed).
    #[inline]
    pub(crate) fn in_use(&self) -> u32 {
        self.pi.wrapping_sub(self.sw_ci)
    }

    /// True when no WQE awaits the NIC and every packet has been freed.
    pub(crate) fn is_empty(&self) -> bool {
        self.in_use() == 0
    }

    /// Driver side: builds one WQE per packet of `v` (packets of the arena `l`), in order, while
    /// they fit both the ring and `limit` WQEBBs (the room left in model time). Each packet that
    /// cannot be posted is left to the caller and listed in `refused` (its index in the burst
    /// and why; `refused` has room for every packet). Returns the packets posted, their bytes
    /// and the number of refusals listed.
    #[inline]
    pub(crate) fn post_burst(
        &mut self,
        v: TxView<'_>,
        l: &ArenaLayout,
        limit: u32,
        refused: &mut [(u16, PostError)],
    ) -> (usize, u64, usize) {
        let payloads = l.pay.is_some() || l.nic.is_some();
        match (self.inline > 0, payloads) {
            (false, false) => self.post::<false, false>(v, l, limit, refused),
            (false, true) => self.post::<false, true>(v, l, limit, refused),
            (true, false) => self.post::<true, false>(v, l, limit, refused),
            (true, true) => self.post::<true, true>(v, l, limit, refused),
        }
    }

    /// [`TxRing::post_burst`] for one shape of WQE: with inline headers (`INLINE`) or without,
    /// for an arena with payload pools (`PAYLOADS`) or without, each compiled on its own (a WQE
    /// without inline bytes is one WQEBB and never wraps). Runs of packets without payload
    /// bytes that fit in the ring's end go through [`post_inline`] or [`post_plain`]; every
    /// other packet (with a payload, wrapping around the ring, or refused) is posted here.
    #[inline(always)]
    fn post<const INLINE: bool, const PAYLOADS: bool>(
        &mut self,
        v: TxView<'_>,
        l: &ArenaLayout,
        limit: u32,
        refused: &mut [(u16, PostError)],
    ) -> (usize, u64, usize) {
        let n = v.handle.len();
        let refused = &mut refused[..n];
        let mask = self.mask;
        let size = mask as usize + 1;
        let mut st = PostState {
            bbs: self.bbs.as_mut_ptr().cast::<u8>(),
            slots: self.slots.as_mut_ptr(),
            hdrs: self.hdrs.idx.as_mut_ptr(),
            ends: self.ends.as_mut_ptr(),
            mask,
            pi: self.pi,
            hpi: self.hdrs.pi,
            comp_left: self.comp_every - self.since_comp,
            bbs_left: (mask / 2 - self.bbs_since_comp) as i32,
            room: (mask + 1 - self.in_use()).min(limit),
            comp_every: self.comp_every,
            half: mask / 2,
            inline: if INLINE { self.inline } else { 0 },
            bytes: 0,
            pay_pis: [self.pays.pi, self.nics.pi],
        };
        let hdr_l = l.hdr;
        let wrap = self.wrap.as_mut_ptr();
        let mut nref = 0usize;
        let mut i = 0;
        loop {
            // SAFETY: the state names this ring's arrays and positions.
            i = if INLINE {
                unsafe { post_inline(&mut st, &v, l, i) }
            } else {
                // SAFETY: as above.
                unsafe { post_plain(&mut st, &v, l, i) }
            };
            if i == n {
                break;
            }
            let h = v.handle[i] as u32;
            let hlen = v.hdr_len[i] as usize;
            let flen = v.frame_len[i] as usize;
            let plen = flen - hlen;
            let inl = if INLINE { st.inline.min(hlen) } else { 0 };
            let rest_hdr = hlen - inl;
            let ds = tx_wqe_ds(inl, (rest_hdr > 0) as usize + (plen > 0) as usize);
            if INLINE && ds > MAX_DS {
                refused[nref] = (i as u16, PostError::TooBig);
                nref += 1;
                i += 1;
                continue;
            }
            let nbb = if INLINE { ds.div_ceil(4) as u32 } else { 1 };
            if nbb > st.room {
                refused[nref] = (i as u16, PostError::Full);
                nref += 1;
                i += 1;
                continue;
            }
            let flags = st.admit(nbb);
            // The header's bus address: header buffers keep the metadata first, then the
            // headroom the header may have grown into.
            let hdr_off = META_BYTES + v.headroom[i] as usize;
            let hdr_iova = hdr_l.iova_of(h) + hdr_off as u64;
            // Which payload buffer the packet holds (its metadata, written at Rx), kept in the
            // slot so the NIC and the completion handling need not read the packet again. A
            // packet holds a payload buffer exactly when it has payload bytes (the header and
            // frame lengths change together after Rx); a payload the arena cannot name gets a
            // descriptor the NIC refuses.
            let (ring, pay, pay_key, pay_iova) = if PAYLOADS && plen > 0 {
                // SAFETY: `h` is a packet of this queue's arena held by the burst, which owns
                // it; its metadata was written at Rx.
                let meta = unsafe { *l.meta(h) };
                let pool = match meta.ring {
                    PayloadRing::Secondary => l.pay,
                    PayloadRing::Primary => l.nic,
                    PayloadRing::None => None,
                };
                match pool {
                    Some(p) => (meta.ring, meta.payload, p.key.0, p.iova_of(meta.payload)),
                    None => (PayloadRing::None, meta.payload, 0, 0),
                }
            } else {
                (PayloadRing::None, 0, 0, 0)
            };
            let pi = st.pi;
            let slot = (pi & mask) as usize;
            let nb = nbb as usize;
            let wraps = INLINE && slot + nb > size;
            // SAFETY: slots `slot..slot + nb` of the ring are free (`nbb <= room`); a WQE that
            // would run past the end of the ring (`wraps`) is built in the scratch instead,
            // which holds the largest WQE. Nothing else refers to either during the pass.
            let w = if wraps {
                wrap
            } else {
                unsafe { st.bbs.add(slot * WQEBB) }
            };
            let ctrl = CtrlSeg {
                opcode: OPCODE_SEND,
                wqe_index: pi as u16,
                ds: ds as u8,
                flags,
            };
            // SAFETY: `w` has `nb * WQEBB >= ds * SEG` writable bytes (above); segment writes
            // stay below `ds * SEG`, the inline copy below `nb * WQEBB`.
            unsafe {
                put_seg(w, ctrl.encode());
                // Ethernet segment: 12 zero bytes, the inline size, then the inline bytes.
                put_seg(w.add(SEG), (u128::from(inl as u16) << 16).to_be_bytes());
                let mut k = 2 * SEG;
                if INLINE && inl > 0 {
                    // The header and the rest of its buffer (the copy may round up into it).
                    // SAFETY: the burst owns the packet; its header starts `hdr_off` bytes into
                    // header buffer `h`, whose bytes up to its end belong to the packet.
                    let src =
                        std::slice::from_raw_parts(v.hdr[i].cast_const(), hdr_l.buf_size - hdr_off);
                    let dst =
                        std::slice::from_raw_parts_mut(w.add(INLINE_AT), nb * WQEBB - INLINE_AT);
                    nicmem::copy_prefix(dst, src, inl);
                    k = data_segment_at(inl) * SEG;
                }
                if rest_hdr > 0 {
                    let seg = DataSeg {
                        byte_count: rest_hdr as u32,
                        key: hdr_l.key.0,
                        addr: hdr_iova + inl as u64,
                    };
                    put_seg(w.add(k), seg.encode());
                    k += SEG;
                }
                if plen > 0 {
                    let seg = DataSeg {
                        byte_count: plen as u32,
                        key: pay_key,
                        addr: pay_iova,
                    };
                    put_seg(w.add(k), seg.encode());
                }
            }
            if wraps {
                // The WQE wraps around the end of the ring: it was built flat; copy the two
                // parts.
                let first = size - slot;
                // SAFETY: the first part fills slots `slot..size`, the second slots
                // `0..nb - first`, all free and inside the ring; the scratch is another
                // allocation.
                unsafe {
                    std::ptr::copy_nonoverlapping(wrap, st.bbs.add(slot * WQEBB), first * WQEBB);
                    std::ptr::copy_nonoverlapping(
                        wrap.add(first * WQEBB),
                        st.bbs,
                        (nb - first) * WQEBB,
                    );
                }
            }
            // The packet's buffers join the rings completions release, in posting order.
            let m = mask as usize;
            self.hdrs.idx[st.hpi as usize & m] = h;
            st.hpi = st.hpi.wrapping_add(1);
            match ring {
                PayloadRing::None => {}
                PayloadRing::Secondary => self.pays.push(pay),
                PayloadRing::Primary => {
                    let cum = self.nic_cum[(self.nics.pi.wrapping_sub(1) as usize) & m];
                    self.nic_cum[self.nics.pi as usize & m] = cum + plen as u64;
                    self.nics.push(pay);
                }
            }
            st.pay_pis = [self.pays.pi, self.nics.pi];
            if flags != 0 {
                self.ends[slot] = [st.hpi, st.pay_pis[0], st.pay_pis[1]];
            }
            // SAFETY: `slot <= mask` indexes the ring's `mask + 1` slots.
            unsafe {
                *st.slots.add(slot) = TxSlot {
                    at: pi,
                    hdr: h,
                    pay,
                    nbb: nbb as u8,
                    ring,
                    ends: flags != 0,
                };
            }
            st.pi = pi.wrapping_add(nbb);
            st.bytes += flen as u64;
            i += 1;
        }
        self.pi = st.pi;
        self.since_comp = st.comp_every - st.comp_left;
        self.bbs_since_comp = (st.half as i32 - st.bbs_left) as u32;
        self.hdrs.pi = st.hpi;
        (n - nref, st.bytes, nref)
    }

    /// WQEBBs posted and not yet processed by the NIC (what the next doorbell makes it fetch).
    #[inline]
    pub(crate) fn unprocessed(&self) -> u32 {
        self.pi.wrapping_sub(self.nic_ci)
    }

    /// WQEBBs in the ring.
    #[inline]
    pub(crate) fn size(&self) -> u32 {
        self.mask + 1
    }

    /// Driver side: posts a NOP WQE that requests a completion, so every earlier WQE gets
    /// reclaimed (used when a run drains).
    pub(crate) fn post_completion_request(&mut self) -> bool {
        if self.in_use() > self.mask {
            return false;
        }
        let at = self.pi;
        CtrlSeg {
            opcode: OPCODE_NOP,
            wqe_index: at as u16,
            ds: 1,
            flags: FLAG_CQE_REQUEST,
        }
        .write(self.seg_mut(at, 0));
        let slot = (at & self.mask) as usize;
        self.slots[slot] = TxSlot {
            at,
            nbb: 1,
            ends: true,
            ..EMPTY_SLOT
        };
        self.ends[slot] = [self.hdrs.pi, self.pays.pi, self.nics.pi];
        self.pi = self.pi.wrapping_add(1);
        self.since_comp = 0;
        self.bbs_since_comp = 0;
        true
    }

    /// True if WQEs were posted since the last completion request.
    pub(crate) fn completion_owed(&self) -> bool {
        self.since_comp > 0
    }

    /// NIC side (after a doorbell): processes every posted WQE, gathering each frame into
    /// `out` (frames back to back at [`batch_step`] offsets, lengths in `lens`) and handing the
    /// gathered frames to `wire` whenever `out` or `lens` fills up and at the end (one call per
    /// batch of frames, not per frame). `ready` is when the WQEs are at the NIC (model time);
    /// `m` charges every DMA.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn nic_process(
        &mut self,
        table: &RegionTable,
        pd: ProtectionDomain,
        l: &ArenaLayout,
        out: &mut [u8],
        lens: &mut [u32],
        wire: &mut dyn FnMut(&[u8], &[u32]),
        m: &mut NicModel,
        ready: Ps,
    ) -> TxOutcome {
        if m.t.is_some() {
            self.nic_pass::<true>(table, pd, l, out, lens, wire, m, ready)
        } else {
            self.nic_pass::<false>(table, pd, l, out, lens, wire, m, ready)
        }
    }

    /// [`TxRing::nic_process`] for a timed (`TIMED`) or an untimed queue, each compiled on its
    /// own. Runs of the queue's commonest WQE (one data segment in the packet's header buffer,
    /// or the frame inline) are gathered by [`gather_plain`] or [`gather_inline`], runs of
    /// other common WQEs (a send posted with its packet, not wrapping around the ring, with at
    /// most two data segments that lie in the packet's buffers) by [`gather_run`]; every other
    /// WQE, and every WQE the common paths do not fully accept, goes through
    /// [`TxRing::nic_wqe`], the general parse with every error case.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn nic_pass<const TIMED: bool>(
        &mut self,
        table: &RegionTable,
        pd: ProtectionDomain,
        l: &ArenaLayout,
        out: &mut [u8],
        lens: &mut [u32],
        wire: &mut dyn FnMut(&[u8], &[u32]),
        m: &mut NicModel,
        ready: Ps,
    ) -> TxOutcome {
        let mut res = TxOutcome::default();
        // Frames are gathered while a frame of any size still fits behind the last one.
        let last_off = out.len().saturating_sub(MAX_WIRE_FRAME);
        let (mut off, mut k) = (0usize, 0usize);
        let (pi, mask) = (self.pi, self.mask);
        let mut ci = self.nic_ci;
        let bbs = self.bbs.as_ptr().cast::<u8>();
        let slots = self.slots.as_ptr();
        let pools = *l;
        // The queue's WQEs carry their frames inline or in a data segment: the run of the
        // commonest WQE of that kind first.
        let inline = self.inline > 0;
        while ci != pi {
            if k == lens.len() || off > last_off {
                wire(&out[..off], &lens[..k]);
                res.frames += k as u64;
                (off, k) = (0, 0);
            }
            // SAFETY: `bbs` and `slots` are the ring's `mask + 1` WQEBBs and slots, which the
            // driver does not write while the NIC processes them.
            let mut r = unsafe {
                if inline {
                    gather_inline::<TIMED>(
                        bbs, slots, mask, ci, pi, &pools, out, off, lens, k, m, ready,
                    )
                } else {
                    gather_plain::<TIMED>(
                        bbs, slots, mask, ci, pi, &pools, out, off, lens, k, m, ready,
                    )
                }
            };
            if r.completion.is_none() && r.ci != pi && r.k < lens.len() && r.off <= last_off {
                // SAFETY: as above.
                r = unsafe {
                    gather_run::<TIMED>(
                        bbs, slots, mask, r.ci, pi, &pools, out, r.off, lens, r.k, m, ready,
                    )
                };
            }
            (ci, off, k) = (r.ci, r.off, r.k);
            if let Some((at, done, nbb)) = r.completion {
                self.tx_completion(at, Ok(()), m, done);
                if TIMED {
                    m.tx_done(done, nbb);
                }
                continue;
            }
            if ci == pi || k == lens.len() || off > last_off {
                continue;
            }
            // The WQE at `ci` is not common (or the common path did not accept it): the general
            // parse.
            let (consumed, len, errors) =
                self.nic_wqe::<TIMED>(ci, table, pd, l, &mut out[off..], m, ready);
            if let Some(len) = len {
                lens[k] = len as u32;
                k += 1;
                off += batch_step(len);
            }
            res.errors += errors;
            ci = ci.wrapping_add(consumed);
        }
        self.nic_ci = ci;
        if k > 0 {
            wire(&out[..off], &lens[..k]);
            res.frames += k as u64;
        }
        res
    }

    /// The NIC processes the WQE at `at` (the general parse: any opcode and segment count,
    /// every error case), gathering a frame into `stage` (at least [`MAX_WIRE_FRAME`] bytes).
    /// Returns the WQEBBs consumed, the frame's length if one was gathered, and the descriptor
    /// errors: none when the WQE completed well, else one per packet whose frame it lost (a
    /// flush of the WQEs behind it loses theirs too), at least one.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn nic_wqe<const TIMED: bool>(
        &mut self,
        at: u32,
        table: &RegionTable,
        pd: ProtectionDomain,
        l: &ArenaLayout,
        stage: &mut [u8],
        m: &mut NicModel,
        ready: Ps,
    ) -> (u32, Option<usize>, u64) {
        let size = (self.mask + 1) as usize;
        let avail = self.pi.wrapping_sub(at);
        let slot = (at & self.mask) as usize;
        let ctrl = CtrlSeg::read(self.bbs[slot][..SEG].try_into().expect("16-byte segment"));
        let ds = ctrl.ds as usize;
        let nbb = (ds.div_ceil(4) as u32).max(1);
        let mut done = ready;
        let mut frame = None;
        let (result, consumed) =
            if ctrl.opcode == OPCODE_SEND && (2..=MAX_DS).contains(&ds) && nbb <= avail {
                // A slot holds the packet of the WQE the NIC is at only if it was posted there.
                let s = match self.slots[slot] {
                    s if s.at == at => s,
                    _ => EMPTY_SLOT,
                };
                let n = nbb as usize;
                let w: &[u8] = if slot + n <= size {
                    self.bbs[slot..slot + n].as_flattened()
                } else {
                    wrapped(&self.bbs, &mut self.wrap, slot, n)
                };
                // SAFETY: `w` holds the WQE's `n * WQEBB >= ds * SEG` bytes, flat; the stage holds
                // at least `MAX_WIRE_FRAME` bytes (the caller's contract).
                let r = unsafe {
                    gather::<TIMED>(w.as_ptr(), ds, &s, l, table, pd, stage, m, ready, &mut done)
                };
                if let Ok(len) = r {
                    frame = Some(len);
                    if TIMED {
                        let arrival = if s.hdr == NO_PKT {
                            0
                        } else {
                            // SAFETY: the slot's packet is owned by the send queue until its
                            // completion is reaped; nothing else uses its metadata meanwhile.
                            unsafe { l.meta(s.hdr) }.arrival / PS_PER_NS
                        };
                        done = m.tx_wire(done, len, arrival);
                    }
                }
                (r.map(|_| ()), nbb)
            } else if ctrl.opcode == OPCODE_NOP && ds == 1 && !self.holds_packet(at) {
                (Ok(()), 1)
            } else if ctrl.opcode == OPCODE_NOP && ds == 1 {
                // A NOP where the driver posted a send (its bytes corrupted): hardware would
                // complete it and send nothing; the model, which knows the slot holds a packet,
                // refuses it so the frame is counted, as it refuses data segments outside the
                // packet's buffers.
                (Err(syndrome::LOCAL_QP_OPERATION), 1)
            } else {
                // The NIC cannot tell where the next WQE starts: flush everything posted in
                // error, as a send queue in error state does.
                (Err(syndrome::LOCAL_QP_OPERATION), avail)
            };
        if result.is_err() || ctrl.flags & FLAG_CQE_REQUEST != 0 {
            self.tx_completion(at, result, m, done);
        }
        if TIMED {
            m.tx_done(done, consumed);
        }
        // One error per packet whose frame the failed WQE or the flush took (mlx5 writes a flush
        // error completion for each WQE behind a failed one), at least one for the WQE itself.
        let errors = if result.is_err() {
            self.packets_posted(at, consumed).max(1)
        } else {
            0
        };
        (consumed, frame, errors)
    }

    /// Whether the driver posted a packet with the WQE starting at `at`.
    fn holds_packet(&self, at: u32) -> bool {
        let s = self.slots[(at & self.mask) as usize];
        s.at == at && s.hdr != NO_PKT
    }

    /// Packets posted with the WQEs that start in the `n` WQEBBs from `at`.
    #[cold]
    fn packets_posted(&self, at: u32, n: u32) -> u64 {
        let (mut pos, mut packets) = (at, 0);
        while pos.wrapping_sub(at) < n {
            let s = self.slots[(pos & self.mask) as usize];
            let start = s.at == pos;
            packets += u64::from(start && s.hdr != NO_PKT);
            pos = pos.wrapping_add(if start { u32::from(s.nbb.max(1)) } else { 1 });
        }
        packets
    }

    /// NIC side: the DMA read of the WQE at the NIC's position, or of the frame it points at,
    /// fails (an injected fault): the WQE completes in error with syndrome `syn` at `ready` and
    /// its frame is not sent; the driver frees the packet when it polls the completion. False
    /// (nothing done) when no WQE is waiting or the one there carries no packet.
    #[cold]
    pub(crate) fn nic_fail_next(&mut self, syn: u8, m: &mut NicModel, ready: Ps) -> bool {
        let at = self.nic_ci;
        if at == self.pi {
            return false;
        }
        let s = self.slots[(at & self.mask) as usize];
        if s.at != at || s.hdr == NO_PKT {
            return false;
        }
        let nbb = u32::from(s.nbb.max(1));
        self.tx_completion(at, Err(syn), m, ready);
        m.tx_done(ready, nbb);
        self.nic_ci = at.wrapping_add(nbb);
        true
    }

    /// The NIC writes the completion of the WQE at `at` (done at `done`).
    #[inline(never)]
    fn tx_completion(&mut self, at: u32, result: Result<(), u8>, m: &mut NicModel, done: Ps) {
        let (opcode, syn) = match result {
            Err(s) => (cqe_op::REQ_ERR, s),
            Ok(_) => (cqe_op::REQ, 0),
        };
        self.cq.push(&Cqe {
            wqe_counter: at as u16,
            syndrome: syn,
            opcode,
            ..Cqe::default()
        });
        m.tx_cqe(done);
    }

    /// Driver side: polls completions and hands the buffers of every packet up to the last
    /// completed WQE to `free` (by pool; each pool's buffers in up to two slices, so `free` may
    /// be called twice). Returns the error completions seen.
    ///
    /// A completion releases every WQE up to the one it names. When that WQE asked for the
    /// completion, its slot recorded where the packet rings stood after it; otherwise (an error
    /// completion of any WQE) the WQEs are walked from the driver's consumer count.
    #[inline]
    pub(crate) fn complete(&mut self, free: &mut impl FnMut(Completed<'_>)) -> u64 {
        let mut errors = 0;
        let (mask, nic_ci) = (self.mask, self.nic_ci);
        let mut sw = self.sw_ci;
        let mut ends = [self.hdrs.ci, self.pays.ci, self.nics.ci];
        while let Some(cqe) = self.cq.poll() {
            errors += u64::from(cqe.is_error());
            let ahead = cqe.wqe_counter.wrapping_sub(sw as u16) as i16;
            if ahead < 0 || sw == nic_ci {
                continue;
            }
            let at = sw.wrapping_add(ahead as u32);
            let s = self.slots[(at & mask) as usize];
            if s.at == at && s.ends && at.wrapping_sub(sw) < nic_ci.wrapping_sub(sw) {
                ends = self.ends[(at & mask) as usize];
                sw = at.wrapping_add(u32::from(s.nbb.max(1)));
                continue;
            }
            // Walk the WQEs up to the one completed.
            while sw != nic_ci && cqe.wqe_counter.wrapping_sub(sw as u16) as i16 >= 0 {
                let s = self.slots[(sw & mask) as usize];
                if s.hdr != NO_PKT {
                    ends[0] = ends[0].wrapping_add(1);
                    match s.ring {
                        PayloadRing::Secondary => ends[1] = ends[1].wrapping_add(1),
                        PayloadRing::Primary => ends[2] = ends[2].wrapping_add(1),
                        PayloadRing::None => {}
                    }
                }
                sw = sw.wrapping_add(u32::from(s.nbb.max(1)));
            }
        }
        self.sw_ci = sw;
        self.release(ends, free);
        errors
    }

    /// Hands the packet rings' entries up to `ends` (header, host payload, nicmem payload
    /// producer counts) to `free`.
    #[inline]
    fn release(&mut self, ends: [u32; 3], free: &mut impl FnMut(Completed<'_>)) {
        if ends[0] == self.hdrs.ci {
            return;
        }
        let mask = self.mask as usize;
        let nic_bytes = if ends[2] == self.nics.ci {
            0
        } else {
            let cum = self.nic_cum[ends[2].wrapping_sub(1) as usize & mask];
            cum - std::mem::replace(&mut self.nic_released, cum)
        };
        let (h0, h1) = self.hdrs.release_to(ends[0]);
        let (p0, p1) = self.pays.release_to(ends[1]);
        let (n0, n1) = self.nics.release_to(ends[2]);
        free(Completed {
            hdr: h0,
            pay: p0,
            nic: n0,
            nic_bytes,
        });
        if !h1.is_empty() || !p1.is_empty() || !n1.is_empty() {
            free(Completed {
                hdr: h1,
                pay: p1,
                nic: n1,
                nic_bytes: 0,
            });
        }
    }

    /// Overwrites a 16 B segment of the most recently posted WQE (tests and fuzzing of descriptor
    /// handling). `k` is the segment index within the WQE.
    pub(crate) fn corrupt_last(&mut self, k: usize, f: impl FnOnce(&mut [u8; SEG])) -> bool {
        if self.pi == self.nic_ci {
            return false;
        }
        // Find the start of the last WQE by walking from the NIC's consumer index.
        let mut at = self.nic_ci;
        loop {
            let n = u32::from(self.slots[(at & self.mask) as usize].nbb.max(1));
            if at.wrapping_add(n) == self.pi {
                break;
            }
            at = at.wrapping_add(n);
        }
        f(self.seg_mut(at, k));
        true
    }

    /// Hands every packet still held (queue teardown, or the driver's recovery after an error
    /// completion or a device reset) to `free`, like [`TxRing::complete`], and empties the ring
    /// and its completion queue. Returns how many of those packets the NIC never read (lost).
    pub(crate) fn drain(&mut self, free: &mut impl FnMut(Completed<'_>)) -> u64 {
        let (mut at, mut unsent) = (self.nic_ci, 0);
        while at.wrapping_sub(self.nic_ci) < self.pi.wrapping_sub(self.nic_ci) {
            let s = self.slots[(at & self.mask) as usize];
            let start = s.at == at;
            unsent += u64::from(start && s.hdr != NO_PKT);
            at = at.wrapping_add(if start { u32::from(s.nbb.max(1)) } else { 1 });
        }
        while self.cq.poll().is_some() {}
        self.release([self.hdrs.pi, self.pays.pi, self.nics.pi], free);
        self.slots.fill(EMPTY_SLOT);
        self.sw_ci = self.pi;
        self.nic_ci = self.pi;
        unsent
    }

    /// Completions not yet polled.
    pub(crate) fn pending_completions(&self) -> u32 {
        self.cq.pending()
    }
}

/// The first data segment of a WQE with `inl` inline bytes: after the control and Ethernet
/// segments and the inline bytes' continuation (`2 + ceil((inl - 2) / 16)`, 2 for `inl <= 2`).
#[inline(always)]
fn data_segment_at(inl: usize) -> usize {
    2 + (inl + 13) / SEG
}

/// How many bytes an inlined frame of at most that many bytes copies as one fixed-size copy
/// (the fast case of [`nicmem::copy_prefix`]): the bytes past the frame land in the WQE's own
/// slack or the staging area's scratch.
const FIXED_INLINE: usize = 64;

/// What a WQE's layout takes from its inline size alone, worked out once per run of frames of
/// one size rather than per frame.
#[derive(Clone, Copy)]
struct InlineSize {
    /// Data segments of the WQE ([`data_segment_at`]).
    ds: usize,
    /// WQEBBs of the WQE.
    nbb: usize,
    /// The Ethernet segment carrying the inline size.
    eth: [u8; SEG],
    /// The first 8 bytes of a send's control segment without the WQE index (bits 40..56), in
    /// host order: the opcode and the segment count.
    ctrl: u64,
    /// The frame's room in a staging area ([`batch_step`]).
    step: usize,
    /// Whether posting inlines the frame as one [`FIXED_INLINE`]-byte copy: it has at most
    /// that many bytes and the WQE's WQEBBs from [`INLINE_AT`] on hold that many.
    post_fixed: bool,
    /// Whether the NIC reads the inlined frame back as one [`FIXED_INLINE`]-byte copy: it has
    /// at most that many bytes and the WQE's data segments from [`INLINE_AT`] on hold that many.
    gather_fixed: bool,
}

impl InlineSize {
    /// The layout of a WQE inlining `len` bytes.
    #[inline(always)]
    fn of(len: usize) -> Self {
        let ds = data_segment_at(len);
        let nbb = ds.div_ceil(4);
        Self {
            ds,
            nbb,
            eth: ((len as u128) << 16).to_be_bytes(),
            ctrl: (u64::from(OPCODE_SEND) << 32) | ds as u64,
            step: batch_step(len),
            post_fixed: len > 0 && len <= FIXED_INLINE && nbb * WQEBB - INLINE_AT >= FIXED_INLINE,
            gather_fixed: len > 0 && len <= FIXED_INLINE && ds * SEG - INLINE_AT >= FIXED_INLINE,
        }
    }
}

/// The `n` WQEBBs of a WQE that wraps around the end of the ring from `slot`, made flat in
/// `scratch`.
#[cold]
fn wrapped<'a>(
    bbs: &[[u8; WQEBB]],
    scratch: &'a mut [u8; MAX_DS * SEG],
    slot: usize,
    n: usize,
) -> &'a [u8] {
    let first = bbs.len() - slot;
    scratch[..first * WQEBB].copy_from_slice(bbs[slot..].as_flattened());
    scratch[first * WQEBB..n * WQEBB].copy_from_slice(bbs[..n - first].as_flattened());
    &scratch[..n * WQEBB]
}

/// The posting positions of a send queue while a burst is posted (see [`TxRing::post`]): its
/// arrays, producer counts, room and completion pacing, in locals for the pass.
#[derive(Clone, Copy)]
struct PostState {
    bbs: *mut u8,
    slots: *mut TxSlot,
    hdrs: *mut u32,
    ends: *mut [u32; 3],
    mask: u32,
    pi: u32,
    hpi: u32,
    /// WQEs until the next completion request is due (at least 1).
    comp_left: u32,
    /// WQEBBs that may still be posted before half a ring passes without a completion request
    /// (negative once it has).
    bbs_left: i32,
    room: u32,
    comp_every: u32,
    half: u32,
    inline: usize,
    bytes: u64,
    /// The host and nicmem payload rings' producer counts (what a completion request records).
    pay_pis: [u32; 2],
}

impl PostState {
    /// The completion pacing of `cnt` WQEs of `nbb` WQEBBs each posted in a row: what
    /// [`PostState::admit`] does for each of them (the room aside). Returns where the first
    /// completion request falls (a WQE's place in the run, counted from 1; past `cnt`: none)
    /// and the step to each next one: `admit` flags the WQE that uses up either counter, then
    /// both start afresh, so with equal WQEs the requests fall at fixed steps.
    #[inline(always)]
    fn pace_run(&mut self, cnt: u32, nbb: u32) -> (u32, u32) {
        // `bbs_left` is never negative between WQEs (admit resets it when it would be).
        let first = self.comp_left.min(self.bbs_left as u32 / nbb + 1);
        let step = self.comp_every.min(self.half / nbb + 1);
        if first > cnt {
            self.comp_left -= cnt;
            self.bbs_left -= (cnt * nbb) as i32;
        } else {
            // WQEs after the last request.
            let since = (cnt - first) % step;
            self.comp_left = self.comp_every - since;
            self.bbs_left = self.half as i32 - (since * nbb) as i32;
        }
        (first, step)
    }

    /// Takes `nbb` WQEBBs of room for the next WQE and returns its flags: a completion every
    /// `comp_every` WQEs and at least every half ring.
    #[inline(always)]
    fn admit(&mut self, nbb: u32) -> u8 {
        self.room -= nbb;
        self.comp_left -= 1;
        self.bbs_left -= nbb as i32;
        if (self.comp_left == 0) | (self.bbs_left < 0) {
            self.comp_left = self.comp_every;
            self.bbs_left = self.half as i32;
            FLAG_CQE_REQUEST
        } else {
            0
        }
    }
}

/// Posts packets `from..` of `v` while each is simple: no payload bytes, the whole frame inlined,
/// its WQE within the room and the ring's end. Returns the first packet it did not post (the
/// caller posts or refuses that one, then calls again). Run by run of frames of one size (a
/// burst of one flow is one run), whose WQEs all have the same layout ([`InlineSize`]), so the
/// run's extent within the room and the ring's end, and where its completion requests fall, are
/// known before anything is written; then in short passes, each with few live values: the
/// driver's records, the WQEs, the completion requests.
///
/// # Safety
/// `st` must name the arrays and positions of the send queue posting packets of the arena `l`
/// held by the burst `v`.
#[inline(never)]
unsafe fn post_inline(
    state: &mut PostState,
    v: &TxView<'_>,
    l: &ArenaLayout,
    from: usize,
) -> usize {
    let mut st = *state;
    let n = v.handle.len();
    let (handle, hdr, hdr_len, headroom, frame_len) =
        (v.handle, v.hdr, v.hdr_len, v.headroom, v.frame_len);
    let mask = st.mask;
    let size = mask as usize + 1;
    let buf_size = l.hdr.buf_size;
    let mut i = from;
    while i < n {
        // The run: frames of one size, each whole in its header segment, which the queue
        // inlines whole.
        let hlen = hdr_len[i] as usize;
        if hlen > st.inline {
            break;
        }
        let end = i + hdr_len[i..]
            .iter()
            .zip(&frame_len[i..])
            .position(|(&h, &f)| usize::from(h) != hlen || f as usize != hlen)
            .unwrap_or(n - i);
        let run = InlineSize::of(hlen);
        let nbb = run.nbb as u32;
        // As many as fit the room and the ring's end, in posting order.
        let (pi0, hpi0) = (st.pi, st.hpi);
        let slot0 = (pi0 & mask) as usize;
        let cnt = (end - i)
            .min((st.room / nbb) as usize)
            .min((size - slot0) / run.nbb);
        if cnt == 0 {
            break;
        }
        let span = i..i + cnt;
        // The driver's records: which packet each WQE carries, the header buffers in posting
        // order.
        for (j, &h) in handle[span.clone()].iter().enumerate() {
            let pi = pi0.wrapping_add(j as u32 * nbb);
            // SAFETY: `& mask` indexes the ring's slots and header entries.
            unsafe {
                *st.slots.add((pi & mask) as usize) = TxSlot {
                    at: pi,
                    hdr: h as u32,
                    pay: 0,
                    nbb: nbb as u8,
                    ring: PayloadRing::None,
                    ends: false,
                };
                *st.hdrs.add((hpi0.wrapping_add(j as u32) & mask) as usize) = h as u32;
            }
        }
        // The WQEs, none asking for a completion yet: control segment, Ethernet segment with
        // the inline size, the frame inlined from its last 2 bytes on.
        let ctrl_lo = run.ctrl;
        for (j, (&p, &hr)) in hdr[span.clone()]
            .iter()
            .zip(&headroom[span.clone()])
            .enumerate()
        {
            let pi = pi0.wrapping_add(j as u32 * nbb);
            // SAFETY: the run's WQEBBs are free, inside the room and before the ring's end (its
            // extent above); `w` has `nbb * WQEBB >= ds * SEG` writable bytes; segment writes
            // stay below `ds * SEG`, the inline copy below `nbb * WQEBB`. Nothing else refers
            // to them during the pass.
            unsafe {
                let w = st.bbs.add((slot0 + j * run.nbb) * WQEBB);
                let q = w.cast::<u64>();
                q.write_unaligned(((u64::from(pi as u16) << 40) | ctrl_lo).to_be());
                q.add(1).write_unaligned(0);
                put_seg(w.add(SEG), run.eth);
                let hdr_off = META_BYTES + hr as usize;
                let src_room = buf_size - hdr_off;
                if run.post_fixed && src_room >= FIXED_INLINE {
                    // SAFETY: as below, with `FIXED_INLINE` bytes on both sides (checked).
                    let src = std::slice::from_raw_parts(p.cast_const(), FIXED_INLINE);
                    let dst = std::slice::from_raw_parts_mut(w.add(INLINE_AT), FIXED_INLINE);
                    nicmem::copy_prefix(dst, src, FIXED_INLINE);
                } else if hlen > 0 {
                    // SAFETY: the burst owns the packet; its header starts `hdr_off` bytes into
                    // its header buffer, whose bytes up to its end belong to the packet.
                    let src = std::slice::from_raw_parts(p.cast_const(), src_room);
                    let dst = std::slice::from_raw_parts_mut(
                        w.add(INLINE_AT),
                        run.nbb * WQEBB - INLINE_AT,
                    );
                    nicmem::copy_prefix(dst, src, hlen);
                }
            }
        }
        // The completion requests.
        let (mut at, step) = st.pace_run(cnt as u32, nbb);
        while at <= cnt as u32 {
            let pi = pi0.wrapping_add((at - 1) * nbb);
            let slot = (pi & mask) as usize;
            // SAFETY: a WQE and slot just written (`slot <= mask`); byte 11 of its control
            // segment holds its flags.
            unsafe {
                *st.bbs.add(slot * WQEBB + 11) = FLAG_CQE_REQUEST;
                (*st.slots.add(slot)).ends = true;
                *st.ends.add(slot) = [hpi0.wrapping_add(at), st.pay_pis[0], st.pay_pis[1]];
            }
            at += step;
        }
        st.room -= cnt as u32 * nbb;
        st.pi = pi0.wrapping_add(cnt as u32 * nbb);
        st.hpi = hpi0.wrapping_add(cnt as u32);
        st.bytes += (cnt * hlen) as u64;
        i += cnt;
        if i < end {
            // The room or the ring's end stopped the run.
            break;
        }
    }
    *state = st;
    i
}

/// [`post_inline`] without inline bytes: posts packets `from..` of `v` while each has no payload
/// bytes (its frame in one data segment) and the ring has room, and returns the first it did not
/// post. Every such WQE is one WQEBB, so the run is known before anything is written, and it is
/// posted in short passes (find the run; write the WQEs; the driver's records; then the
/// completion requests, which fall every few WQEs at positions known from the pacing counters),
/// each with few enough live values to stay in registers.
///
/// # Safety
/// As [`post_inline`].
#[inline(never)]
unsafe fn post_plain(state: &mut PostState, v: &TxView<'_>, l: &ArenaLayout, from: usize) -> usize {
    let mut st = *state;
    let n = v.handle.len();
    let end = from + (n - from).min(st.room as usize);
    let (handle, hdr_len, headroom, frame_len) = (
        &v.handle[from..end],
        &v.hdr_len[from..end],
        &v.headroom[from..end],
        &v.frame_len[from..end],
    );
    // The run: packets whose whole frame is their header segment.
    let k = hdr_len
        .iter()
        .zip(frame_len)
        .position(|(&h, &f)| h == 0 || u32::from(h) != f)
        .unwrap_or(handle.len());
    let (handle, hdr_len, headroom) = (&handle[..k], &hdr_len[..k], &headroom[..k]);
    let hdr_l = l.hdr;
    // Header pools never alias (only nicmem pools may), so buffer `h` is `h * buf_size` bytes
    // in; the header starts after the metadata and the headroom left in front of it.
    debug_assert!(!hdr_l.aliased, "header pools never alias");
    let (key, iova, stride) = (
        u64::from(hdr_l.key.0),
        hdr_l.iova + META_BYTES as u64,
        hdr_l.buf_size as u64,
    );
    let (mask, pi0, hpi0) = (st.mask, st.pi, st.hpi);
    // The WQEs, none asking for a completion yet: control segment (opcode, WQE index, 3
    // segments), an Ethernet segment without inline bytes, and the frame's data segment.
    let ctrl_lo = (u64::from(OPCODE_SEND) << 32) | 3;
    for (j, ((&h, &hl), &hr)) in handle.iter().zip(hdr_len).zip(headroom).enumerate() {
        let pi = pi0.wrapping_add(j as u32);
        let slot = (pi & mask) as usize;
        let addr = iova + (h as u32 as u64) * stride + u64::from(hr);
        // SAFETY: the run fits the room, so slot `slot` of the ring is free; `slot <= mask`
        // indexes the ring's WQEBBs; nothing else refers to them during the pass.
        unsafe {
            let w = st.bbs.add(slot * WQEBB).cast::<u64>();
            w.write_unaligned(((u64::from(pi as u16) << 40) | ctrl_lo).to_be());
            w.add(1).write_unaligned(0);
            w.add(2).write_unaligned(0);
            w.add(3).write_unaligned(0);
            w.add(4)
                .write_unaligned(((u64::from(hl) << 32) | key).to_be());
            w.add(5).write_unaligned(addr.to_be());
        }
    }
    // The driver's records: which packet each WQE carries, and the header buffers in posting
    // order.
    for (j, &h) in handle.iter().enumerate() {
        let pi = pi0.wrapping_add(j as u32);
        // SAFETY: `& mask` indexes the ring's slots and header entries.
        unsafe {
            *st.slots.add((pi & mask) as usize) = TxSlot {
                at: pi,
                hdr: h as u32,
                pay: 0,
                nbb: 1,
                ring: PayloadRing::None,
                ends: false,
            };
            *st.hdrs.add((hpi0.wrapping_add(j as u32) & mask) as usize) = h as u32;
        }
    }
    // The completion requests.
    let cnt = k as u32;
    let (mut at, step) = st.pace_run(cnt, 1);
    while at <= cnt {
        let j = at - 1;
        let pi = pi0.wrapping_add(j);
        let slot = (pi & mask) as usize;
        let hpi = hpi0.wrapping_add(j);
        // SAFETY: as above; byte 11 of the control segment holds its flags.
        unsafe {
            *st.bbs.add(slot * WQEBB + 11) = FLAG_CQE_REQUEST;
            (*st.slots.add(slot)).ends = true;
            *st.ends.add(slot) = [hpi.wrapping_add(1), st.pay_pis[0], st.pay_pis[1]];
        }
        at += step;
    }
    st.room -= cnt;
    st.pi = pi0.wrapping_add(cnt);
    st.hpi = hpi0.wrapping_add(cnt);
    st.bytes += frame_len[..k].iter().map(|&f| u64::from(f)).sum::<u64>();
    *state = st;
    from + k
}

/// Writes one 16 B segment at `p`.
///
/// # Safety
/// `p` must be valid for writes of [`SEG`] bytes.
#[inline(always)]
unsafe fn put_seg(p: *mut u8, seg: [u8; SEG]) {
    // SAFETY: the caller's contract; the write is unaligned.
    unsafe { p.cast::<[u8; SEG]>().write_unaligned(seg) }
}

/// Which buffer of the posted packet a data segment names: where the segment starts and how
/// many bytes of that buffer follow it (at least the segment's length).
enum Src {
    Host(*const u8, usize),
    Nic(*const u8, usize, bool),
}

/// Where `[addr, addr + n)` under `key` starts in buffer `idx` of `lay`, and how many bytes of
/// the buffer follow, if the range lies inside the buffer from byte `from` on.
#[inline(always)]
fn inside(
    lay: &PoolLayout,
    idx: u32,
    from: usize,
    key: MemKey,
    addr: u64,
    n: usize,
) -> Option<(*const u8, usize)> {
    let start = lay.offset(idx);
    let off = addr.wrapping_sub(lay.iova + start as u64);
    let size = lay.buf_size as u64;
    // `from <= off && off + n <= size` in two unsigned comparisons (`off - from` wraps to a
    // huge value when `off < from`).
    let lim = size.saturating_sub(from as u64);
    let n = n as u64;
    (key == lay.key && n <= lim && off.wrapping_sub(from as u64) <= lim - n).then(|| {
        (
            lay.base.wrapping_add(start + off as usize).cast_const(),
            (size - off) as usize,
        )
    })
}

/// Finds the buffer of the packet posted in slot `s` that `[addr, addr + n)` under `key` lies
/// in: its header buffer (headroom and header segment), or its payload buffer.
#[inline(always)]
fn locate(l: &ArenaLayout, s: &TxSlot, key: MemKey, addr: u64, n: usize) -> Option<Src> {
    if let Some((p, avail)) = inside(&l.hdr, s.hdr, META_BYTES, key, addr, n) {
        return Some(Src::Host(p, avail));
    }
    match s.ring {
        PayloadRing::Secondary => l
            .pay
            .as_ref()
            .and_then(|p| inside(p, s.pay, 0, key, addr, n))
            .map(|(ptr, avail)| Src::Host(ptr, avail)),
        PayloadRing::Primary => l.nic.as_ref().and_then(|p| {
            inside(p, s.pay, 0, key, addr, n).map(|(ptr, avail)| Src::Nic(ptr, avail, p.aliased))
        }),
        PayloadRing::None => None,
    }
}

/// Where [`gather_run`] stopped: the NIC's consumer count, the staging area's fill and frame
/// count, and the WQE whose completion is due, if it stopped for one (its counter, when it
/// finished and its WQEBBs).
struct RunEnd {
    ci: u32,
    off: usize,
    k: usize,
    completion: Option<(u32, Ps, u32)>,
}

/// The NIC's pass over a run of common WQEs (see [`gather_common`]) from `ci`: gathers each
/// frame behind `off` in `out` with its length at `lens[k]`, charging its reads, until the
/// posted WQEs (`pi`) or the staging area run out, a WQE is not common (left for the general
/// parse) or one asks for a completion (gathered; the caller writes the completion and, timed,
/// books the WQE's end). Its own function, so the loop keeps its few values in registers. A
/// timed queue (`TIMED`) books each WQE's reads from `ready` on, its frame's wire slot and its
/// end, as the general pass does.
///
/// # Safety
/// `bbs` and `slots` must be the send queue's `mask + 1` WQEBBs and slots, not written while the
/// pass runs; `out` must hold at least [`MAX_WIRE_FRAME`] bytes behind `off` while
/// `off <= out.len() - MAX_WIRE_FRAME`.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe fn gather_run<const TIMED: bool>(
    bbs: *const u8,
    slots: *const TxSlot,
    mask: u32,
    mut ci: u32,
    pi: u32,
    l: &ArenaLayout,
    out: &mut [u8],
    mut off: usize,
    lens: &mut [u32],
    mut k: usize,
    m: &mut NicModel,
    ready: Ps,
) -> RunEnd {
    let size = mask as usize + 1;
    let last_off = out.len().saturating_sub(MAX_WIRE_FRAME);
    let out = out.as_mut_ptr();
    let hdr_l = l.hdr;
    while ci != pi && k < lens.len() && off <= last_off {
        let slot = (ci & mask) as usize;
        // SAFETY: `slot <= mask` indexes the ring's WQEBBs and slots (the caller's contract).
        let (w, s) = unsafe { (bbs.add(slot * WQEBB), &*slots.add(slot)) };
        // SAFETY: the control segment's bytes (`CtrlSeg::read`'s layout).
        let (opcode, ds, flags) = unsafe { (*w.add(3), *w.add(7) as usize, *w.add(11)) };
        {
            // The commonest WQE of all, straight-line: one WQEBB, no inline bytes, one data
            // segment in the packet's header buffer (what `gather_common` would find, checked
            // the same).
            // SAFETY: the Ethernet segment's inline size and the data segment, in the first
            // WQEBB.
            let (inl, d) = unsafe {
                (
                    w.add(SEG + 12).cast::<u16>().read_unaligned(),
                    DataSeg::read(&*w.add(2 * SEG).cast::<[u8; SEG]>()),
                )
            };
            if opcode == OPCODE_SEND
                && ds == 3
                && inl == 0
                && s.at == ci
                && s.hdr != NO_PKT
                && (1..=MAX_WIRE_FRAME).contains(&(d.byte_count as usize))
            {
                let n = d.byte_count as usize;
                if let Some((p, avail)) =
                    inside(&hdr_l, s.hdr, META_BYTES, MemKey(d.key), d.addr, n)
                {
                    // SAFETY: `inside` checked that `avail >= n` bytes from `p` lie inside the
                    // packet's header buffer, which the send queue owns until completion; the stage
                    // behind `off` holds `MAX_WIRE_FRAME` bytes.
                    unsafe {
                        let stage = std::slice::from_raw_parts_mut(out.add(off), MAX_WIRE_FRAME);
                        nicmem::copy_prefix(stage, std::slice::from_raw_parts(p, avail), n);
                    }
                    if TIMED {
                        // SAFETY: as for `timed_send` below.
                        unsafe { timed_send(m, l, s, ready, n, [d.byte_count, 0], 0, 1) }
                    }
                    m.tx_untimed([d.byte_count, 0], 0, n);
                    lens[k] = n as u32;
                    k += 1;
                    off += batch_step(n);
                    let at = ci;
                    ci = ci.wrapping_add(1);
                    if flags & FLAG_CQE_REQUEST != 0 {
                        return RunEnd {
                            ci,
                            off,
                            k,
                            completion: Some((at, sends_booked::<TIMED>(m, ready), 1)),
                        };
                    }
                    continue;
                }
            }
            let inl = u16::from_be(inl) as usize;
            if opcode == OPCODE_SEND
                && s.at == ci
                && inl > 0
                && ds == data_segment_at(inl)
                && (!TIMED || s.hdr != NO_PKT)
            {
                // An inline-only WQE (the whole frame in the WQE), straight-line too.
                let nbb = ds.div_ceil(4);
                if nbb as u32 <= pi.wrapping_sub(ci) && slot + nbb <= size {
                    // SAFETY: the WQE's `ds` segments lie flat in the ring from `w`, its inline
                    // bytes between `INLINE_AT` and their end; the stage behind `off` holds
                    // `MAX_WIRE_FRAME` bytes.
                    unsafe {
                        let stage = std::slice::from_raw_parts_mut(out.add(off), MAX_WIRE_FRAME);
                        let src =
                            std::slice::from_raw_parts(w.add(INLINE_AT), ds * SEG - INLINE_AT);
                        nicmem::copy_prefix(stage, src, inl);
                    }
                    if TIMED {
                        // SAFETY: as for `timed_send` below.
                        unsafe { timed_send(m, l, s, ready, inl, [0, 0], 0, nbb as u32) }
                    }
                    m.tx_untimed([0, 0], 0, inl);
                    lens[k] = inl as u32;
                    k += 1;
                    off += batch_step(inl);
                    let at = ci;
                    ci = ci.wrapping_add(nbb as u32);
                    if flags & FLAG_CQE_REQUEST != 0 {
                        return RunEnd {
                            ci,
                            off,
                            k,
                            completion: Some((at, sends_booked::<TIMED>(m, ready), nbb as u32)),
                        };
                    }
                    continue;
                }
            }
        }
        let nbb = ds.div_ceil(4);
        // Two segments carry at most 2 inline bytes, never a frame: the general parse decides
        // (it refuses a send with nothing to send, see `gather`).
        if opcode != OPCODE_SEND
            || !(3..=MAX_DS).contains(&ds)
            || nbb as u32 > pi.wrapping_sub(ci)
            || slot + nbb > size
            || s.at != ci
        {
            break;
        }
        // SAFETY: the WQE's `ds` segments lie flat in the ring from `w`; the stage behind `off`
        // holds at least `MAX_WIRE_FRAME` bytes (`off <= last_off`).
        let stage = unsafe { std::slice::from_raw_parts_mut(out.add(off), MAX_WIRE_FRAME) };
        // SAFETY: as above.
        let Some(g) = (unsafe { gather_common(w, ds, s, l, stage) }) else {
            break;
        };
        if TIMED {
            // SAFETY: `gather_common` accepted the WQE, so the slot holds a packet.
            unsafe { timed_send(m, l, s, ready, g.len, g.host, g.nic, nbb as u32) }
        }
        m.tx_untimed(g.host, g.nic, g.len);
        lens[k] = g.len as u32;
        k += 1;
        off += batch_step(g.len);
        let at = ci;
        ci = ci.wrapping_add(nbb as u32);
        if flags & FLAG_CQE_REQUEST != 0 {
            return RunEnd {
                ci,
                off,
                k,
                completion: Some((at, sends_booked::<TIMED>(m, ready), nbb as u32)),
            };
        }
    }
    if TIMED {
        m.tx_sends_book(true);
    }
    RunEnd {
        ci,
        off,
        k,
        completion: None,
    }
}

/// The NIC's pass over a run of plain WQEs from `ci`, as [`gather_run`] but for the commonest
/// WQE only: one WQEBB with the send's control segment (its own WQE index, 3 segments), no
/// inline bytes, and one data segment inside the header buffer of the packet posted with it.
/// Stops at the first other WQE (left to [`gather_run`]) and where [`gather_run`] stops. Goes
/// run by run of frames of one length (a burst of one flow is one run): the data segment's
/// length and key are checked once per run (each further WQE of the run has the same first
/// 8 bytes of its data segment), how many WQEs the stage and the posted WQEBBs can take is
/// worked out once, and each run is charged together.
///
/// # Safety
/// As [`gather_run`].
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe fn gather_plain<const TIMED: bool>(
    bbs: *const u8,
    slots: *const TxSlot,
    mask: u32,
    mut ci: u32,
    pi: u32,
    l: &ArenaLayout,
    out: &mut [u8],
    mut off: usize,
    lens: &mut [u32],
    mut k: usize,
    m: &mut NicModel,
    ready: Ps,
) -> RunEnd {
    let last_off = out.len().saturating_sub(MAX_WIRE_FRAME);
    let out = out.as_mut_ptr();
    let hdr_l = l.hdr;
    // Header pools never alias (only nicmem pools may): buffer `h` starts `h * buf_size` bytes
    // in. A segment must lie in the buffer after its metadata (what `inside` checks).
    debug_assert!(!hdr_l.aliased, "header pools never alias");
    let (key, iova, size) = (u64::from(hdr_l.key.0), hdr_l.iova, hdr_l.buf_size as u64);
    let room = size - META_BYTES as u64;
    let mut completion = None;
    'runs: while ci != pi && k < lens.len() && off <= last_off {
        // SAFETY: `ci & mask` indexes the ring's WQEBBs (the caller's contract); the first data
        // segment lies in the first WQEBB.
        let lo_be = unsafe {
            bbs.add((ci & mask) as usize * WQEBB + 4 * 8)
                .cast::<u64>()
                .read_unaligned()
        };
        // The data segment's length and key.
        let lo = u64::from_be(lo_be);
        let n = lo >> 32;
        if lo as u32 as u64 != key || n == 0 || n > room.min(MAX_WIRE_FRAME as u64) {
            break;
        }
        let (len, step) = (n as usize, batch_step(n as usize));
        // Where the segment may start in its buffer, less the metadata (see `inside`).
        let last_start = room - n;
        // How many WQEs of this length the posted WQEBBs, the lengths and the stage can take.
        let most = (pi.wrapping_sub(ci) as usize)
            .min(lens.len() - k)
            .min((last_off - off) / step + 1);
        // Whether a WQE that is not of this kind ended the run (one of another length starts
        // the next run instead).
        let (mut cnt, mut other) = (0, false);
        while cnt < most {
            let slot = (ci & mask) as usize;
            // SAFETY: `slot <= mask` indexes the ring's WQEBBs and slots (the caller's
            // contract); the control, Ethernet and first data segments lie in the first WQEBB.
            let (s, c0, flags, inl, lo_at, addr) = unsafe {
                let w = bbs.add(slot * WQEBB);
                let q = w.cast::<u64>();
                (
                    &*slots.add(slot),
                    q.read_unaligned(),
                    *w.add(11),
                    w.add(SEG + 12).cast::<u16>().read_unaligned(),
                    q.add(4).read_unaligned(),
                    u64::from_be(q.add(5).read_unaligned()),
                )
            };
            // A data segment of another length (or key) ends the run.
            if lo_at != lo_be {
                break;
            }
            // The control segment's first 8 bytes: WQE index, opcode, segment count.
            let want = ((u64::from(ci as u16) << 40) | (u64::from(OPCODE_SEND) << 32) | 3).to_be();
            let o = addr.wrapping_sub(iova + u64::from(s.hdr) * size);
            if c0 != want
                || inl != 0
                || s.at != ci
                || s.hdr == NO_PKT
                || o.wrapping_sub(META_BYTES as u64) > last_start
            {
                other = true;
                break;
            }
            // SAFETY: the segment's `len` bytes lie in the packet's header buffer from byte `o`
            // on, which the send queue owns until completion, with `size - o` bytes of the
            // buffer from there; the stage behind `off` holds `MAX_WIRE_FRAME` bytes.
            unsafe {
                let src = std::slice::from_raw_parts(
                    hdr_l.base.add(s.hdr as usize * size as usize + o as usize),
                    (size - o) as usize,
                );
                let stage = std::slice::from_raw_parts_mut(out.add(off), MAX_WIRE_FRAME);
                nicmem::copy_prefix(stage, src, len);
            }
            if TIMED {
                // SAFETY: the slot holds a packet of the arena (checked above).
                unsafe { timed_send(m, l, s, ready, len, [len as u32, 0], 0, 1) }
            }
            lens[k] = len as u32;
            k += 1;
            off += step;
            cnt += 1;
            let at = ci;
            ci = ci.wrapping_add(1);
            if flags & FLAG_CQE_REQUEST != 0 {
                completion = Some((at, sends_booked::<TIMED>(m, ready), 1));
                m.tx_untimed_many([len as u32, 0], 0, len, cnt as u64);
                break 'runs;
            }
        }
        m.tx_untimed_many([len as u32, 0], 0, len, cnt as u64);
        if other || cnt == 0 {
            break;
        }
    }
    if TIMED && completion.is_none() {
        m.tx_sends_book(true);
    }
    RunEnd {
        ci,
        off,
        k,
        completion,
    }
}

/// [`gather_plain`] for a queue that inlines: the run of inline-only WQEs (the whole frame in
/// the WQE, no data segment) from `ci`, each posted with its packet and not wrapping around the
/// ring's end. Stops at the first other WQE (left to [`gather_run`]) and where [`gather_run`]
/// stops. Goes run by run of WQEs of one inline size (a burst of one flow is one run), whose
/// layout ([`InlineSize`]) and how many of them the stage and the posted WQEBBs can take are
/// worked out once per run; each run is charged together.
///
/// # Safety
/// As [`gather_run`].
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe fn gather_inline<const TIMED: bool>(
    bbs: *const u8,
    slots: *const TxSlot,
    mask: u32,
    mut ci: u32,
    pi: u32,
    l: &ArenaLayout,
    out: &mut [u8],
    mut off: usize,
    lens: &mut [u32],
    mut k: usize,
    m: &mut NicModel,
    ready: Ps,
) -> RunEnd {
    let size = mask as usize + 1;
    let last_off = out.len().saturating_sub(MAX_WIRE_FRAME);
    let out = out.as_mut_ptr();
    let mut completion = None;
    'runs: while ci != pi && k < lens.len() && off <= last_off {
        // SAFETY: `ci & mask` indexes the ring's WQEBBs (the caller's contract); the Ethernet
        // segment lies in the first WQEBB.
        let inl_be = unsafe {
            bbs.add((ci & mask) as usize * WQEBB + SEG + 12)
                .cast::<u16>()
                .read_unaligned()
        };
        let inl = u16::from_be(inl_be) as usize;
        if inl == 0 {
            break;
        }
        let run = InlineSize::of(inl);
        let nbb = run.nbb as u32;
        // How many WQEs of this size the posted WQEBBs, the lengths and the stage can take.
        let most = (pi.wrapping_sub(ci) / nbb) as usize;
        let most = most
            .min(lens.len() - k)
            .min((last_off - off) / run.step + 1);
        // Whether a WQE that is not of this kind ended the run (one of another inline size
        // starts the next run instead).
        let (mut cnt, mut other) = (0, false);
        while cnt < most {
            let slot = (ci & mask) as usize;
            // SAFETY: `slot <= mask` indexes the ring's WQEBBs and slots (the caller's
            // contract); the control and Ethernet segments lie in the first WQEBB.
            let (w, s, c0, flags, inl_at) = unsafe {
                let w = bbs.add(slot * WQEBB);
                (
                    w,
                    &*slots.add(slot),
                    w.cast::<u64>().read_unaligned(),
                    *w.add(11),
                    w.add(SEG + 12).cast::<u16>().read_unaligned(),
                )
            };
            // A WQE of another inline size ends the run.
            if inl_at != inl_be {
                break;
            }
            // The control segment's first 8 bytes: WQE index, opcode, segment count.
            if u64::from_be(c0) != run.ctrl | (u64::from(ci as u16) << 40)
                || s.at != ci
                || s.hdr == NO_PKT
                || slot + run.nbb > size
            {
                other = true;
                break;
            }
            // SAFETY: the WQE's `ds` segments lie flat in the ring from `w`, its inline bytes
            // between `INLINE_AT` and their end; the stage behind `off` holds `MAX_WIRE_FRAME`
            // bytes.
            unsafe {
                if run.gather_fixed {
                    // SAFETY: as below, with `FIXED_INLINE` bytes on both sides: the WQE's data
                    // segments from `INLINE_AT` hold that many (`run.gather_fixed`), the stage
                    // more.
                    let stage = std::slice::from_raw_parts_mut(out.add(off), FIXED_INLINE);
                    let src = std::slice::from_raw_parts(w.add(INLINE_AT), FIXED_INLINE);
                    nicmem::copy_prefix(stage, src, FIXED_INLINE);
                } else {
                    let stage = std::slice::from_raw_parts_mut(out.add(off), MAX_WIRE_FRAME);
                    let src =
                        std::slice::from_raw_parts(w.add(INLINE_AT), run.ds * SEG - INLINE_AT);
                    nicmem::copy_prefix(stage, src, inl);
                }
            }
            if TIMED {
                // SAFETY: the slot holds a packet of the arena (checked above).
                unsafe { timed_send(m, l, s, ready, inl, [0, 0], 0, nbb) }
            }
            lens[k] = inl as u32;
            k += 1;
            off += run.step;
            cnt += 1;
            let at = ci;
            ci = ci.wrapping_add(nbb);
            if flags & FLAG_CQE_REQUEST != 0 {
                completion = Some((at, sends_booked::<TIMED>(m, ready), nbb));
                m.tx_untimed_many([0, 0], 0, inl, cnt as u64);
                break 'runs;
            }
        }
        m.tx_untimed_many([0, 0], 0, inl, cnt as u64);
        if other || cnt == 0 {
            break;
        }
    }
    if TIMED && completion.is_none() {
        m.tx_sends_book(true);
    }
    RunEnd {
        ci,
        off,
        k,
        completion,
    }
}

/// Queues the send of a common WQE of `nbb` WQEBBs of a timed queue whose WQE is at the NIC at
/// `ready` ([`NicModel::tx_send`]): its host data reads (`host`, 0: none) and nicmem read
/// (`nic` bytes, 0: none) from `ready` on, then the frame's `len` bytes on the wire. The run
/// books the queued sends before it returns ([`sends_booked`], [`NicModel::tx_sends_book`]).
/// The caller charges the send with [`NicModel::tx_untimed`] (a run of identical sends is
/// charged together).
///
/// # Safety
/// The slot `s` must hold a packet of the arena `l` that the send queue owns (until its
/// completion is reaped nothing else uses its metadata).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn timed_send(
    m: &mut NicModel,
    l: &ArenaLayout,
    s: &TxSlot,
    ready: Ps,
    len: usize,
    host: [u32; 2],
    nic: u32,
    nbb: u32,
) {
    // SAFETY: the caller's contract.
    let arrival = unsafe { l.meta(s.hdr) }.arrival / PS_PER_NS;
    m.tx_send(ready, len, host, nic, arrival, nbb);
}

/// When the last send of a run that asks for a completion left (timed: books the queued sends,
/// leaving that WQE's end to the caller's completion); `ready` untimed.
#[inline(always)]
fn sends_booked<const TIMED: bool>(m: &mut NicModel, ready: Ps) -> Ps {
    if TIMED { m.tx_sends_book(false) } else { ready }
}

/// A frame gathered by [`gather_common`]: its length, the lengths of its host data segments
/// (0: none) and the nicmem bytes read.
struct Gathered {
    len: usize,
    host: [u32; 2],
    nic: u32,
}

/// [`gather`] for the common WQE: inline bytes, then at most two data segments that each lie
/// in a buffer of the packet posted in slot `s` (host segments first, at most one nicmem
/// segment, no aliased nicmem). Returns `None`, having charged nothing, for any other WQE (the
/// caller then runs the general parse, which gives the same result for the WQEs accepted
/// here); bytes it copied into `stage` are then scratch.
///
/// # Safety
/// As [`gather`].
#[inline(always)]
unsafe fn gather_common(
    w: *const u8,
    ds: usize,
    s: &TxSlot,
    l: &ArenaLayout,
    stage: &mut [u8],
) -> Option<Gathered> {
    // SAFETY: the WQE's bytes (the caller's contract), as in `gather`.
    let inl = u16::from_be(unsafe { w.add(SEG + 12).cast::<u16>().read_unaligned() }) as usize;
    let data_at = data_segment_at(inl);
    if data_at > ds {
        return None;
    }
    if inl > 0 {
        // SAFETY: as in `gather`.
        let src = unsafe { std::slice::from_raw_parts(w.add(INLINE_AT), ds * SEG - INLINE_AT) };
        nicmem::copy_prefix(stage, src, inl);
    }
    let mut g = Gathered {
        len: inl,
        host: [0; 2],
        nic: 0,
    };
    // SAFETY (both calls): segments `data_at` and `data_at + 1` are below `ds`.
    match ds - data_at {
        0 => {}
        1 => unsafe { common_seg(w.add(data_at * SEG), s, l, stage, &mut g)? },
        2 => unsafe {
            common_seg(w.add(data_at * SEG), s, l, stage, &mut g)?;
            common_seg(w.add((data_at + 1) * SEG), s, l, stage, &mut g)?;
        },
        _ => return None,
    }
    Some(g)
}

/// One data segment of [`gather_common`] at `seg`: validated against the slot's buffers,
/// copied behind the frame's bytes so far, and noted in `g`.
///
/// # Safety
/// `seg` must be valid for reads of [`SEG`] bytes.
#[inline(always)]
unsafe fn common_seg(
    seg: *const u8,
    s: &TxSlot,
    l: &ArenaLayout,
    stage: &mut [u8],
    g: &mut Gathered,
) -> Option<()> {
    // SAFETY: the caller's contract.
    let d = DataSeg::read(unsafe { &*seg.cast::<[u8; SEG]>() });
    let n = d.byte_count as usize;
    if n == 0 || n > MAX_WIRE_FRAME - g.len || s.hdr == NO_PKT || g.nic > 0 {
        return None;
    }
    let key = MemKey(d.key);
    let (src, is_host) = match inside(&l.hdr, s.hdr, META_BYTES, key, d.addr, n) {
        Some(src) => (src, true),
        None => match (s.ring, &l.pay, &l.nic) {
            (PayloadRing::Secondary, Some(p), _) => (inside(p, s.pay, 0, key, d.addr, n)?, true),
            (PayloadRing::Primary, _, Some(p)) if !p.aliased => {
                (inside(p, s.pay, 0, key, d.addr, n)?, false)
            }
            _ => return None,
        },
    };
    // SAFETY: `inside` checked that `src.1 >= n` bytes from `src.0` lie inside a buffer of the
    // posted packet, which the send queue owns until completion: nobody writes them now.
    let bytes = unsafe { std::slice::from_raw_parts(src.0, src.1) };
    nicmem::copy_prefix(&mut stage[g.len..], bytes, n);
    if !is_host {
        g.nic = d.byte_count;
    } else if g.host[0] == 0 {
        g.host[0] = d.byte_count;
    } else {
        g.host[1] = d.byte_count;
    }
    g.len += n;
    Some(())
}

/// Parses one flat WQE `w` of `ds` segments and gathers its frame (at most
/// [`MAX_WIRE_FRAME`] bytes) into `stage`, charging its reads to `m`: a timed queue (`TIMED`)
/// books each read (host data reads and nicmem reads start at `ready`; `done` becomes the time
/// the last byte is at the NIC), an untimed one charges them together after the WQE (also the
/// reads made before an error). `s` is the slot the WQE was posted in (its packet's buffers, or
/// [`NO_PKT`] for none). Returns the frame length or an mlx5 syndrome.
///
/// # Safety
/// `w` must be valid for reads of `ds * SEG` bytes (`2 <= ds <= MAX_DS`), and `stage` must
/// hold at least [`MAX_WIRE_FRAME`] bytes.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn gather<const TIMED: bool>(
    w: *const u8,
    ds: usize,
    s: &TxSlot,
    l: &ArenaLayout,
    table: &RegionTable,
    pd: ProtectionDomain,
    stage: &mut [u8],
    m: &mut NicModel,
    ready: Ps,
    done: &mut Ps,
) -> Result<usize, u8> {
    debug_assert!((2..=MAX_DS).contains(&ds) && stage.len() >= MAX_WIRE_FRAME);
    // SAFETY: the WQE's bytes (the caller's contract); the inline size is in the Ethernet
    // segment, the second of `ds >= 2`.
    let inl = u16::from_be(unsafe { w.add(SEG + 12).cast::<u16>().read_unaligned() }) as usize;
    let data_at = data_segment_at(inl);
    if data_at > ds {
        return Err(syndrome::LOCAL_LENGTH);
    }
    if inl > 0 {
        // SAFETY: the inline bytes run from `INLINE_AT` to the end of the inline segments,
        // inside the WQE's `ds` segments (`data_at <= ds`).
        let src = unsafe { std::slice::from_raw_parts(w.add(INLINE_AT), ds * SEG - INLINE_AT) };
        nicmem::copy_prefix(stage, src, inl);
    }
    let mut len = inl;
    // An untimed queue's reads, charged after the WQE (identical WQEs are charged together):
    // the first two host data segments' lengths and the nicmem bytes.
    let (mut host0, mut host1, mut nic) = (0u32, 0u32, 0u32);
    let mut err = 0;
    for k in data_at..ds {
        // SAFETY: segment `k < ds` of the WQE.
        let d = DataSeg::read(unsafe { &*w.add(k * SEG).cast::<[u8; SEG]>() });
        let n = d.byte_count as usize;
        if n == 0 || n > MAX_WIRE_FRAME - len {
            err = syndrome::LOCAL_LENGTH;
            break;
        }
        let key = MemKey(d.key);
        let src = if s.hdr == NO_PKT {
            None
        } else {
            locate(l, s, key, d.addr, n)
        };
        let Some(src) = src else {
            // Not a buffer of the posted packet: hardware would check the region table (and
            // read any registered range); the model refuses every address the packet does not
            // own, so a corrupt WQE never reads another packet's memory.
            refuse(table, pd, key, d.addr, d.byte_count);
            err = syndrome::LOCAL_PROTECTION;
            break;
        };
        // The stage is longer than any frame: reads may round up past `n` when the source has
        // room (`copy_prefix` checks the source side).
        let dst = &mut stage[len..];
        let is_host = match src {
            Src::Host(p, avail) => {
                // SAFETY: `locate` checked that `avail >= n` bytes from `p` lie inside a buffer
                // of the posted packet, which the send queue owns until completion: nobody
                // writes them now.
                let s = unsafe { std::slice::from_raw_parts(p, avail) };
                nicmem::copy_prefix(dst, s, n);
                true
            }
            Src::Nic(p, avail, aliased) => {
                if aliased {
                    dst[..n].fill(0);
                } else {
                    // SAFETY: as above, in the nicmem buffer of the posted packet (modeled
                    // nicmem is host memory).
                    let s = unsafe { std::slice::from_raw_parts(p, avail) };
                    nicmem::copy_prefix(dst, s, n);
                }
                false
            }
        };
        if TIMED {
            let t = if is_host {
                m.tx_host_read(ready, d.byte_count)
            } else {
                m.tx_nic_read(ready, d.byte_count)
            };
            *done = (*done).max(t);
        } else if !is_host {
            nic += d.byte_count;
        } else if host0 == 0 {
            host0 = d.byte_count;
        } else if host1 == 0 {
            host1 = d.byte_count;
        } else {
            m.tx_host_read(ready, d.byte_count);
        }
        len += n;
    }
    if len == 0 {
        // Neither inline bytes nor a data segment: nothing to send. The driver never posts
        // such a send, so its bytes were damaged; an error completion (hardware's local length
        // error), so the packet posted there is counted, never a 0-byte frame on the wire.
        err = syndrome::LOCAL_LENGTH;
    }
    if err != 0 {
        if !TIMED {
            m.tx_reads_untimed([host0, host1], nic);
        }
        return Err(err);
    }
    if !TIMED {
        m.tx_untimed([host0, host1], nic, len);
    }
    Ok(len)
}

/// What hardware does with a data segment that names no buffer of its packet: it checks the
/// region table (the model then refuses the read whatever the table says).
#[cold]
fn refuse(table: &RegionTable, pd: ProtectionDomain, key: MemKey, addr: u64, len: u32) {
    let _ = table.resolve(pd, key, addr, len);
}

#[cfg(test)]
mod tests {
    use super::{FLAG_CQE_REQUEST, PostState};

    /// A posting state with the given pacing counters (the arrays are never touched).
    fn state(comp_left: u32, bbs_left: i32, comp_every: u32, half: u32) -> PostState {
        PostState {
            bbs: std::ptr::null_mut(),
            slots: std::ptr::null_mut(),
            hdrs: std::ptr::null_mut(),
            ends: std::ptr::null_mut(),
            mask: 2 * half + 1,
            pi: 0,
            hpi: 0,
            comp_left,
            bbs_left,
            room: u32::MAX,
            comp_every,
            half,
            inline: 0,
            bytes: 0,
            pay_pis: [0; 2],
        }
    }

    #[test]
    fn pace_run_requests_completions_where_admit_does() {
        for (comp_every, half) in [(1, 7), (4, 7), (32, 511), (32, 7), (100, 31), (3, 3)] {
            for nbb in 1..=4u32 {
                for comp_left in 1..=comp_every {
                    for bbs_left in 0..=half as i32 {
                        let cnt = 3 * (comp_every + half) / nbb + 2;
                        let mut one = state(comp_left, bbs_left, comp_every, half);
                        let flagged: Vec<u32> = (1..=cnt)
                            .filter(|_| one.admit(nbb) == FLAG_CQE_REQUEST)
                            .collect();
                        let mut run = state(comp_left, bbs_left, comp_every, half);
                        let (first, step) = run.pace_run(cnt, nbb);
                        let stepped: Vec<u32> = (first..=cnt).step_by(step as usize).collect();
                        let case = (comp_every, half, nbb, comp_left, bbs_left);
                        assert_eq!(stepped, flagged, "{case:?}");
                        assert_eq!(
                            (run.comp_left, run.bbs_left),
                            (one.comp_left, one.bbs_left),
                            "{case:?}"
                        );
                    }
                }
            }
        }
    }
}
