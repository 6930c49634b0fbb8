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

use nicmem::{MemKey, ProtectionDomain, RegionTable};

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
    /// WQEs completed in error.
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

pub(crate) struct TxRing {
    bbs: Box<[[u8; WQEBB]]>,
    /// Per slot: the packet (header buffer index) posted with the WQE starting there.
    elts: Box<[u32]>,
    /// Per slot: WQEBBs of the WQE starting there.
    nbb: Box<[u8]>,
    /// Per slot: nicmem payload bytes the packet holds (returned to the model when freed).
    nic_bytes: Box<[u32]>,
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
    /// A send queue of `size` WQEBBs; `inline` header bytes per WQE (0: no inlining); a completion
    /// every `comp_every` WQEs (and at least every half ring).
    pub(crate) fn new(size: usize, inline: usize, comp_every: usize) -> Self {
        let size = size.next_power_of_two().max(16);
        Self {
            bbs: vec![[0u8; WQEBB]; size].into_boxed_slice(),
            elts: vec![NO_PKT; size].into_boxed_slice(),
            nbb: vec![0u8; size].into_boxed_slice(),
            nic_bytes: vec![0u32; size].into_boxed_slice(),
            mask: size as u32 - 1,
            pi: 0,
            nic_ci: 0,
            sw_ci: 0,
            since_comp: 0,
            bbs_since_comp: 0,
            comp_every: comp_every.max(1) as u32,
            inline,
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
    /// cannot be posted is reported to `refused` (by index, with the reason) and left to the
    /// caller. Returns the packets posted and their bytes.
    #[inline]
    pub(crate) fn post_burst(
        &mut self,
        v: TxView<'_>,
        l: &ArenaLayout,
        limit: u32,
        refused: &mut impl FnMut(usize, PostError),
    ) -> (usize, u64) {
        let size = self.mask + 1;
        let mut room = (size - self.in_use()).min(limit);
        let (hdr_l, pay_l, nic_l) = (l.hdr, l.pay, l.nic);
        let inline = self.inline;
        let (mut sent, mut bytes) = (0usize, 0u64);
        for i in 0..v.handle.len() {
            let h = v.handle[i] as u32;
            let hlen = v.hdr_len[i] as usize;
            let flen = v.frame_len[i] as usize;
            let plen = flen - hlen;
            let inl = inline.min(hlen);
            let rest_hdr = hlen - inl;
            let ds = tx_wqe_ds(inl, (rest_hdr > 0) as usize + (plen > 0) as usize);
            if ds > MAX_DS {
                refused(i, PostError::TooBig);
                continue;
            }
            let nbb = ds.div_ceil(4) as u32;
            if nbb > room {
                refused(i, PostError::Full);
                continue;
            }
            room -= nbb;
            let at = self.pi;
            self.since_comp += 1;
            self.bbs_since_comp += nbb;
            let flags = if self.since_comp >= self.comp_every || self.bbs_since_comp > self.mask / 2
            {
                self.since_comp = 0;
                self.bbs_since_comp = 0;
                FLAG_CQE_REQUEST
            } else {
                0
            };
            let headroom = v.headroom[i] as usize;
            // The header's bus address: header buffers keep the metadata first, then the
            // headroom the header may have grown into.
            let hdr_off = META_BYTES + headroom;
            let hdr_iova = hdr_l.iova_of(h) + hdr_off as u64;
            let (pay_key, pay_iova, nic) = if plen == 0 {
                (MemKey(0), 0, 0)
            } else {
                // SAFETY: `h` is a packet of this queue's arena held by the burst, which owns
                // it; its metadata was written at Rx.
                let meta = unsafe { *l.meta(h) };
                match (meta.ring, pay_l, nic_l) {
                    (PayloadRing::Secondary, Some(p), _) => (p.key, p.iova_of(meta.payload), 0),
                    (PayloadRing::Primary, _, Some(p)) => {
                        (p.key, p.iova_of(meta.payload), plen as u32)
                    }
                    // A payload the arena cannot name: a descriptor the NIC will refuse.
                    _ => (MemKey(0), 0, 0),
                }
            };
            // The header and the rest of its buffer (inline copies may round up into it).
            // SAFETY: the burst owns the packet; its header starts `hdr_off` bytes into header
            // buffer `h`, whose bytes up to the end of the buffer belong to the packet.
            let hdr = unsafe {
                std::slice::from_raw_parts(v.hdr[i].cast_const(), hdr_l.buf_size - hdr_off)
            };
            let ctrl = CtrlSeg {
                opcode: OPCODE_SEND,
                wqe_index: at as u16,
                ds: ds as u8,
                flags,
            };
            let slot = (at & self.mask) as usize;
            let n = nbb as usize;
            let wraps = slot + n > size as usize;
            let w = if wraps {
                &mut self.wrap[..n * WQEBB]
            } else {
                self.bbs[slot..slot + n].as_flattened_mut()
            };
            write_wqe(
                w,
                &ctrl,
                hdr,
                inl,
                &DataSeg {
                    byte_count: rest_hdr as u32,
                    key: hdr_l.key.0,
                    addr: hdr_iova + inl as u64,
                },
                &DataSeg {
                    byte_count: plen as u32,
                    key: pay_key.0,
                    addr: pay_iova,
                },
            );
            if wraps {
                // The WQE wraps around the end of the ring: it was built flat; copy the two
                // parts.
                let first = size as usize - slot;
                self.bbs[slot..]
                    .as_flattened_mut()
                    .copy_from_slice(&self.wrap[..first * WQEBB]);
                self.bbs[..n - first]
                    .as_flattened_mut()
                    .copy_from_slice(&self.wrap[first * WQEBB..n * WQEBB]);
            }
            self.elts[slot] = h;
            self.nbb[slot] = nbb as u8;
            self.nic_bytes[slot] = nic;
            self.pi = self.pi.wrapping_add(nbb);
            sent += 1;
            bytes += flen as u64;
        }
        (sent, bytes)
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
        self.elts[slot] = NO_PKT;
        self.nbb[slot] = 1;
        self.nic_bytes[slot] = 0;
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
        let mut res = TxOutcome::default();
        let size = (self.mask + 1) as usize;
        let timed = m.t.is_some();
        let (mut off, mut k) = (0usize, 0usize);
        let (pi, mask) = (self.pi, self.mask);
        let mut ci = self.nic_ci;
        while ci != pi {
            if k == lens.len() || out.len() - off < MAX_WIRE_FRAME {
                wire(&out[..off], &lens[..k]);
                (off, k) = (0, 0);
            }
            let at = ci;
            let avail = pi.wrapping_sub(at);
            let slot = (at & mask) as usize;
            let ctrl = CtrlSeg::read(self.bbs[slot][..SEG].try_into().expect("16-byte segment"));
            let ds = ctrl.ds as usize;
            let nbb = (ds.div_ceil(4) as u32).max(1);
            let mut done = ready;
            let mut reads = Reads::default();
            let pkt = self.elts[slot];
            let (result, consumed) = if ctrl.opcode == OPCODE_NOP && ds == 1 {
                (Ok(None), 1)
            } else if ctrl.opcode != OPCODE_SEND || !(2..=MAX_DS).contains(&ds) || nbb > avail {
                // The NIC cannot tell where the next WQE starts: flush everything posted in error,
                // as a send queue in error state does.
                (Err(syndrome::LOCAL_QP_OPERATION), avail)
            } else {
                let n = nbb as usize;
                let w: &[u8] = if slot + n <= size {
                    self.bbs[slot..slot + n].as_flattened()
                } else {
                    let first = size - slot;
                    let tmp = &mut self.wrap[..];
                    tmp[..first * WQEBB].copy_from_slice(self.bbs[slot..].as_flattened());
                    tmp[first * WQEBB..n * WQEBB]
                        .copy_from_slice(self.bbs[..n - first].as_flattened());
                    &self.wrap[..n * WQEBB]
                };
                let stage = &mut out[off..];
                (
                    gather(
                        w, ds, pkt, l, table, pd, stage, m, ready, &mut done, &mut reads,
                    )
                    .map(Some),
                    nbb,
                )
            };
            let cqe_wanted = ctrl.flags & FLAG_CQE_REQUEST != 0;
            match result {
                Ok(Some(len)) => {
                    lens[k] = len as u32;
                    k += 1;
                    off += batch_step(len);
                    if timed {
                        let arrival = if pkt == NO_PKT {
                            0
                        } else {
                            // SAFETY: the slot's packet is owned by the send queue until its
                            // completion is reaped; nothing else uses its metadata meanwhile.
                            unsafe { l.meta(pkt) }.arrival / PS_PER_NS
                        };
                        done = m.tx_wire(done, len, arrival);
                    } else {
                        m.tx_untimed(reads.host, reads.nic, len);
                    }
                    res.frames += 1;
                }
                Ok(None) => {}
                Err(_) => {
                    if !timed {
                        m.tx_reads_untimed(reads.host, reads.nic);
                    }
                    res.errors += 1;
                }
            }
            if result.is_err() || cqe_wanted {
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
            if timed {
                m.tx_done(done, consumed);
            }
            ci = ci.wrapping_add(consumed);
        }
        self.nic_ci = ci;
        if k > 0 {
            wire(&out[..off], &lens[..k]);
        }
        m.tx_flush();
        res
    }

    /// Driver side: polls completions and hands every packet up to each completed WQE to `free`
    /// (in bulk: a slice of header buffer indices and the nicmem payload bytes they held).
    pub(crate) fn complete(&mut self, free: &mut dyn FnMut(&[usize], u64)) -> u64 {
        let mut errors = 0;
        let mut batch = [0usize; 64];
        let mut nic = 0u64;
        let mut k = 0;
        while let Some(cqe) = self.cq.poll() {
            if cqe.is_error() {
                errors += 1;
            }
            let done = cqe.wqe_counter;
            loop {
                if self.sw_ci == self.nic_ci {
                    break;
                }
                let ahead = done.wrapping_sub(self.sw_ci as u16) as i16;
                if ahead < 0 {
                    break;
                }
                let slot = (self.sw_ci & self.mask) as usize;
                let n = self.nbb[slot].max(1) as u32;
                let h = std::mem::replace(&mut self.elts[slot], NO_PKT);
                if h != NO_PKT {
                    batch[k] = h as usize;
                    nic += u64::from(self.nic_bytes[slot]);
                    k += 1;
                    if k == batch.len() {
                        free(&batch, nic);
                        (k, nic) = (0, 0);
                    }
                }
                self.sw_ci = self.sw_ci.wrapping_add(n);
            }
        }
        if k > 0 {
            free(&batch[..k], nic);
        }
        errors
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
            let n = self.nbb[(at & self.mask) as usize].max(1) as u32;
            if at.wrapping_add(n) == self.pi {
                break;
            }
            at = at.wrapping_add(n);
        }
        f(self.seg_mut(at, k));
        true
    }

    /// Takes every packet still held (queue teardown): their header buffer indices, and the
    /// nicmem payload bytes they held.
    pub(crate) fn drain(&mut self, out: &mut Vec<usize>) -> u64 {
        let mut nic = 0;
        for (e, b) in self.elts.iter_mut().zip(self.nic_bytes.iter()) {
            let h = std::mem::replace(e, NO_PKT);
            if h != NO_PKT {
                out.push(h as usize);
                nic += u64::from(*b);
            }
        }
        self.pi = 0;
        self.nic_ci = 0;
        self.sw_ci = 0;
        nic
    }

    /// Completions not yet polled.
    pub(crate) fn pending_completions(&self) -> u32 {
        self.cq.pending()
    }
}

/// Writes one WQE into the flat `w` (whole WQEBBs): control segment, Ethernet segment with the
/// inline size, the inline bytes (contiguous from the last 2 bytes of the Ethernet segment on),
/// then the data segments that have bytes (`rest` for the header bytes not inlined, `pay` for
/// the payload). `hdr` holds at least `inl` bytes.
#[inline(always)]
fn write_wqe(w: &mut [u8], ctrl: &CtrlSeg, hdr: &[u8], inl: usize, rest: &DataSeg, pay: &DataSeg) {
    w[..SEG].copy_from_slice(&ctrl.encode());
    // Ethernet segment: 12 zero bytes, the inline size, then the inline bytes.
    w[SEG..2 * SEG].copy_from_slice(&(u128::from(inl as u16) << 16).to_be_bytes());
    if inl > 0 {
        nicmem::copy_prefix(&mut w[INLINE_AT..], hdr, inl);
    }
    let mut k = (2 + inl.saturating_sub(2).div_ceil(SEG)) * SEG;
    if rest.byte_count > 0 {
        w[k..k + SEG].copy_from_slice(&rest.encode());
        k += SEG;
    }
    if pay.byte_count > 0 {
        w[k..k + SEG].copy_from_slice(&pay.encode());
    }
}

/// Which buffer of the posted packet a data segment names: where the segment starts and how
/// many bytes of that buffer follow it (at least the segment's length).
enum Src {
    Host(*const u8, usize),
    Nic(*const u8, usize, bool),
}

/// Finds the buffer of packet `h` that `[addr, addr + n)` under `key` lies in: its header buffer
/// (headroom and header segment), or the payload buffer its metadata names.
#[inline]
fn locate(l: &ArenaLayout, h: u32, key: MemKey, addr: u64, n: usize) -> Option<Src> {
    let inside = |lay: &nicmem::PoolLayout, idx: u32, from: usize| -> Option<(*const u8, usize)> {
        let base = lay.iova_of(idx);
        let end = addr.checked_add(n as u64)?;
        let limit = base + lay.buf_size as u64;
        (key == lay.key && addr >= base + from as u64 && end <= limit).then(|| {
            let off = (addr - base) as usize;
            (
                lay.ptr(idx).wrapping_add(off).cast_const(),
                lay.buf_size - off,
            )
        })
    };
    if let Some((p, avail)) = inside(&l.hdr, h, META_BYTES) {
        return Some(Src::Host(p, avail));
    }
    // SAFETY: `h` is the packet posted with this WQE, owned by the send queue until completed.
    let meta = unsafe { *l.meta(h) };
    match meta.ring {
        PayloadRing::Secondary => l
            .pay
            .as_ref()
            .and_then(|p| inside(p, meta.payload, 0))
            .map(|(ptr, avail)| Src::Host(ptr, avail)),
        PayloadRing::Primary => l.nic.as_ref().and_then(|p| {
            inside(p, meta.payload, 0).map(|(ptr, avail)| Src::Nic(ptr, avail, p.aliased))
        }),
        PayloadRing::None => None,
    }
}

/// The reads of one WQE an untimed queue charges after the WQE (identical WQEs are charged
/// together): the host data segments' lengths and the nicmem bytes read.
#[derive(Default)]
struct Reads {
    host: [u32; 2],
    nic: u32,
}

/// Parses one flat WQE `w` of `ds` segments and gathers its frame into `stage`. A timed queue
/// charges each read to `m` here (host data reads and nicmem reads start at `ready`; `done`
/// becomes the time the last byte is at the NIC); an untimed one leaves the charges to the
/// caller in `reads` (filled as far as the NIC got, also on an error). `pkt` is the packet
/// posted with the WQE ([`NO_PKT`] for none). Returns the frame length or an mlx5 syndrome.
#[allow(clippy::too_many_arguments)]
#[inline]
fn gather(
    w: &[u8],
    ds: usize,
    pkt: u32,
    l: &ArenaLayout,
    table: &RegionTable,
    pd: ProtectionDomain,
    stage: &mut [u8],
    m: &mut NicModel,
    ready: Ps,
    done: &mut Ps,
    reads: &mut Reads,
) -> Result<usize, u8> {
    let inl = u16::from_be_bytes([w[SEG + 12], w[SEG + 13]]) as usize;
    let inl_segs = inl.saturating_sub(2).div_ceil(SEG);
    if 2 + inl_segs > ds || inl > stage.len() {
        return Err(syndrome::LOCAL_LENGTH);
    }
    if inl > 0 {
        nicmem::copy_prefix(stage, &w[INLINE_AT..], inl);
    }
    let timed = m.t.is_some();
    let mut len = inl;
    let mut nh = 0;
    for k in 2 + inl_segs..ds {
        let d = DataSeg::read(
            w[k * SEG..(k + 1) * SEG]
                .try_into()
                .expect("16-byte segment"),
        );
        let n = d.byte_count as usize;
        if n == 0 || len + n > stage.len() {
            return Err(syndrome::LOCAL_LENGTH);
        }
        if pkt == NO_PKT {
            return Err(syndrome::LOCAL_PROTECTION);
        }
        let key = MemKey(d.key);
        let Some(src) = locate(l, pkt, key, d.addr, n) else {
            // Not a buffer of the posted packet: hardware would check the region table (and
            // read any registered range); the model refuses every address the packet does not
            // own, so a corrupt WQE never reads another packet's memory.
            let _ = table.resolve(pd, key, d.addr, d.byte_count);
            return Err(syndrome::LOCAL_PROTECTION);
        };
        // The stage is far longer than any frame: reads may round up to 16 bytes past `n` when
        // the source has room (`copy_short` checks the source side).
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
        if timed {
            let t = if is_host {
                m.tx_host_read(ready, d.byte_count)
            } else {
                m.tx_nic_read(ready, d.byte_count)
            };
            *done = (*done).max(t);
        } else if is_host && nh < 2 {
            reads.host[nh] = d.byte_count;
            nh += 1;
        } else if is_host {
            m.tx_host_read(ready, d.byte_count);
        } else {
            reads.nic += d.byte_count;
        }
        len += n;
    }
    Ok(len)
}
