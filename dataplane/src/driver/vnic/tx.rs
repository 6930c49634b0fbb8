//! The Tx side of a virtual NIC queue: the send queue of 64 B WQE basic blocks, the driver's WQE
//! builder, the NIC's send engine (parse the WQE, validate every data segment, gather the frame,
//! put it on the wire) and completion handling.
//!
//! WQE layout (mlx5-like): control segment, Ethernet segment whose last 2 bytes start the inline
//! header, inline bytes continuing in 16 B segments, then one data segment per gathered piece
//! (rest of the header segment if not all inlined, then the payload). The NIC writes one
//! completion per `comp_every` WQEs (those with the completion-request flag), and the driver frees
//! every packet up to the completed WQE.
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
use crate::model::timeline::Ps;
use crate::packet::{Packet, Payload};

/// Control-segment opcode of a NOP (used to request a completion on flush).
const OPCODE_NOP: u8 = 0x00;
/// Largest WQE: 15 WQEBBs (mlx5's 960 B limit).
const MAX_DS: usize = 60;
/// Offset of the inline data in a WQE: it starts in the last 2 bytes of the Ethernet segment
/// and continues in the following segments, so it is contiguous.
const INLINE_AT: usize = SEG + 14;

/// Copies `n` bytes from `src` to `dst` in whole 16 B chunks when both have room for the
/// rounded-up length (fixed-size moves instead of a libc `memcpy` call for short copies);
/// exactly otherwise. Bytes past `n` in `dst` may be overwritten with bytes past `n` in `src`.
#[inline]
pub(crate) fn copy_short(dst: &mut [u8], src: &[u8], n: usize) {
    let r = n.div_ceil(16) * 16;
    if r <= dst.len() && r <= src.len() && r <= 128 {
        for (d, s) in dst[..r].chunks_exact_mut(16).zip(src[..r].chunks_exact(16)) {
            let s: &[u8; 16] = s.try_into().expect("16-byte chunk");
            let d: &mut [u8; 16] = d.try_into().expect("16-byte chunk");
            *d = *s;
        }
    } else {
        dst[..n].copy_from_slice(&src[..n]);
    }
}

/// Result of the NIC processing one WQE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TxOutcome {
    /// Frames put on the wire.
    pub frames: u64,
    /// Bytes put on the wire (without FCS).
    pub bytes: u64,
    /// WQEs completed in error.
    pub errors: u64,
}

pub(crate) struct TxRing {
    bbs: Box<[[u8; WQEBB]]>,
    elts: Box<[Option<Packet>]>,
    nbb: Box<[u8]>,
    mask: u32,
    pi: u32,
    nic_ci: u32,
    sw_ci: u32,
    since_comp: u32,
    comp_every: u32,
    inline: usize,
    cq: CompletionQueue,
    /// Scratch for a WQE that wraps around the end of the ring (kept, so no per-doorbell
    /// zeroing).
    wrap: Box<[u8; MAX_DS * SEG]>,
}

impl TxRing {
    /// A send queue of `size` WQEBBs; `inline` header bytes per WQE (0: no inlining); a completion
    /// every `comp_every` WQEs.
    pub(crate) fn new(size: usize, inline: usize, comp_every: usize) -> Self {
        let size = size.next_power_of_two().max(16);
        Self {
            bbs: vec![[0u8; WQEBB]; size].into_boxed_slice(),
            elts: (0..size).map(|_| None).collect(),
            nbb: vec![0u8; size].into_boxed_slice(),
            mask: size as u32 - 1,
            pi: 0,
            nic_ci: 0,
            sw_ci: 0,
            since_comp: 0,
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

    /// The WQE shape for `pkt`: (inline bytes, header bytes after them, has a payload, DS count,
    /// WQEBBs).
    #[inline]
    fn shape(&self, pkt: &Packet) -> (usize, usize, bool, usize, u32) {
        let hlen = pkt.header_len();
        let inl = self.inline.min(hlen);
        let rest_hdr = hlen - inl;
        let has_payload = pkt.payload_len() > 0;
        let data_segs = (rest_hdr > 0) as usize + has_payload as usize;
        let ds = tx_wqe_ds(inl, data_segs);
        (inl, rest_hdr, has_payload, ds, ds.div_ceil(4) as u32)
    }

    /// Driver side: builds the WQE for `pkt` if it fits both the ring and `limit` WQEBBs (the
    /// room left in model time). Returns the packet if not.
    #[inline]
    pub(crate) fn post(&mut self, pkt: Packet, limit: u32) -> Result<(), Packet> {
        let (inl, rest_hdr, has_payload, ds, nbb) = self.shape(&pkt);
        if nbb > ((self.mask + 1) - self.in_use()).min(limit) {
            return Err(pkt);
        }
        let at = self.pi;
        self.since_comp += 1;
        let flags = if self.since_comp >= self.comp_every {
            self.since_comp = 0;
            FLAG_CQE_REQUEST
        } else {
            0
        };
        let slot = (at & self.mask) as usize;
        let n = nbb as usize;
        let size = (self.mask + 1) as usize;
        let ctrl = CtrlSeg {
            opcode: OPCODE_SEND,
            wqe_index: at as u16,
            ds: ds as u8,
            flags,
        };
        if slot + n <= size {
            let w = self.bbs[slot..slot + n].as_flattened_mut();
            build_wqe(w, &ctrl, &pkt, inl, rest_hdr, has_payload);
        } else {
            // The WQE wraps around the end of the ring: build it flat, then copy the two parts.
            let w = &mut self.wrap[..n * WQEBB];
            build_wqe(w, &ctrl, &pkt, inl, rest_hdr, has_payload);
            let first = size - slot;
            self.bbs[slot..]
                .as_flattened_mut()
                .copy_from_slice(&self.wrap[..first * WQEBB]);
            self.bbs[..n - first]
                .as_flattened_mut()
                .copy_from_slice(&self.wrap[first * WQEBB..n * WQEBB]);
        }
        self.elts[slot] = Some(pkt);
        self.nbb[slot] = nbb as u8;
        self.pi = self.pi.wrapping_add(nbb);
        Ok(())
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
        self.elts[slot] = None;
        self.nbb[slot] = 1;
        self.pi = self.pi.wrapping_add(1);
        self.since_comp = 0;
        true
    }

    /// True if WQEs were posted since the last completion request.
    pub(crate) fn completion_owed(&self) -> bool {
        self.since_comp > 0
    }

    /// NIC side (after a doorbell): processes every posted WQE, putting frames on the wire via
    /// `wire`. `stage` is the NIC's frame buffer; `ready` is when the WQEs are at the NIC (model
    /// time); `m` charges every DMA.
    pub(crate) fn nic_process(
        &mut self,
        table: &RegionTable,
        pd: ProtectionDomain,
        stage: &mut [u8],
        wire: &mut dyn FnMut(&[u8]),
        m: &mut NicModel,
        ready: Ps,
    ) -> TxOutcome {
        let mut out = TxOutcome::default();
        let size = (self.mask + 1) as usize;
        while self.nic_ci != self.pi {
            let at = self.nic_ci;
            let avail = self.pi.wrapping_sub(at);
            let slot = (at & self.mask) as usize;
            let ctrl = CtrlSeg::read(self.bbs[slot][..SEG].try_into().expect("16-byte segment"));
            let ds = ctrl.ds as usize;
            let nbb = (ds.div_ceil(4) as u32).max(1);
            let mut done = ready;
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
                let pkt = self.elts[slot].as_ref();
                (
                    gather(w, ds, pkt, table, pd, stage, m, ready, &mut done).map(Some),
                    nbb,
                )
            };
            let cqe_wanted = ctrl.flags & FLAG_CQE_REQUEST != 0;
            match result {
                Ok(Some(len)) => {
                    wire(&stage[..len]);
                    let arrival = self.elts[slot].as_ref().map_or(0, |p| p.meta.rx_time_ns);
                    done = m.tx_wire(done, len, arrival);
                    out.frames += 1;
                    out.bytes += len as u64;
                }
                Ok(None) => {}
                Err(_) => out.errors += 1,
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
            m.tx_done(done, consumed);
            self.nic_ci = self.nic_ci.wrapping_add(consumed);
        }
        out
    }

    /// Driver side: polls completions and hands every packet up to each completed WQE to `free`.
    pub(crate) fn complete(&mut self, free: &mut dyn FnMut(Packet)) -> u64 {
        let mut errors = 0;
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
                if let Some(p) = self.elts[slot].take() {
                    free(p);
                }
                self.sw_ci = self.sw_ci.wrapping_add(n);
            }
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

    /// Frees every packet still held (queue teardown).
    pub(crate) fn drain(&mut self, free: &mut dyn FnMut(Packet)) {
        for e in self.elts.iter_mut() {
            if let Some(p) = e.take() {
                free(p);
            }
        }
        self.pi = 0;
        self.nic_ci = 0;
        self.sw_ci = 0;
    }

    /// Completions not yet polled.
    pub(crate) fn pending_completions(&self) -> u32 {
        self.cq.pending()
    }
}

/// Writes one WQE into the flat `w` (whole WQEBBs): control segment, Ethernet segment with the
/// inline size, the inline bytes (contiguous from the last 2 bytes of the Ethernet segment on),
/// then the data segments.
#[inline]
fn build_wqe(
    w: &mut [u8],
    ctrl: &CtrlSeg,
    pkt: &Packet,
    inl: usize,
    rest_hdr: usize,
    has_payload: bool,
) {
    let hdr = pkt.header_buf();
    if inl > 0 {
        copy_short(&mut w[INLINE_AT..], hdr.bytes(), inl);
    }
    ctrl.write((&mut w[..SEG]).try_into().expect("16-byte segment"));
    w[SEG..SEG + 12].fill(0);
    w[SEG + 12..SEG + 14].copy_from_slice(&(inl as u16).to_be_bytes());
    if inl < 2 {
        w[INLINE_AT + inl..INLINE_AT + 2].fill(0);
    }
    let mut k = (2 + inl.saturating_sub(2).div_ceil(SEG)) * SEG;
    if rest_hdr > 0 {
        DataSeg {
            byte_count: rest_hdr as u32,
            key: hdr.key().0,
            addr: hdr.iova() + inl as u64,
        }
        .write((&mut w[k..k + SEG]).try_into().expect("16-byte segment"));
        k += SEG;
    }
    if has_payload {
        let (key, addr) = match pkt.payload_buf() {
            Payload::Host(b) => (b.key(), b.iova()),
            Payload::Nic(b) => (b.key(), b.iova()),
            Payload::None => (MemKey(0), 0),
        };
        DataSeg {
            byte_count: pkt.payload_len() as u32,
            key: key.0,
            addr,
        }
        .write((&mut w[k..k + SEG]).try_into().expect("16-byte segment"));
    }
}

/// Parses one flat WQE `w` of `ds` segments and gathers its frame into `stage`, charging each
/// read to `m` (host data reads and nicmem reads start at `ready`; `done` becomes the time the
/// last byte is at the NIC). Returns the frame length or an mlx5 syndrome.
#[allow(clippy::too_many_arguments)]
#[inline]
fn gather(
    w: &[u8],
    ds: usize,
    pkt: Option<&Packet>,
    table: &RegionTable,
    pd: ProtectionDomain,
    stage: &mut [u8],
    m: &mut NicModel,
    ready: Ps,
    done: &mut Ps,
) -> Result<usize, u8> {
    let inl = u16::from_be_bytes([w[SEG + 12], w[SEG + 13]]) as usize;
    let inl_segs = inl.saturating_sub(2).div_ceil(SEG);
    if 2 + inl_segs > ds || inl > stage.len() {
        return Err(syndrome::LOCAL_LENGTH);
    }
    if inl > 0 {
        copy_short(stage, &w[INLINE_AT..], inl);
    }
    let mut len = inl;
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
        let pkt = pkt.ok_or(syndrome::LOCAL_PROTECTION)?;
        let key = MemKey(d.key);
        // The stage is far longer than any frame: reads may round up to 16 bytes past `n`.
        let dst = &mut stage[len..];
        let hdr = pkt.header_buf();
        // Fast path: the segment names exactly a buffer of the packet posted with this WQE
        // (registered to this queue's domain by construction); anything else takes the full
        // region check first, as hardware does.
        let (read, host) = if key == hdr.key() && d.addr >= hdr.iova() {
            (
                hdr.locate(key, d.addr, d.byte_count)
                    .and_then(|off| hdr.device_read_prefix(off, dst, n)),
                true,
            )
        } else {
            table
                .resolve(pd, key, d.addr, d.byte_count)
                .map_err(|_| syndrome::LOCAL_PROTECTION)?;
            match pkt.payload_buf() {
                Payload::Host(b) => (
                    b.locate(key, d.addr, d.byte_count)
                        .and_then(|off| b.device_read_prefix(off, dst, n)),
                    true,
                ),
                Payload::Nic(b) => (
                    b.locate(key, d.addr, d.byte_count)
                        .and_then(|off| b.device_read_prefix(off, dst, n)),
                    false,
                ),
                Payload::None => (
                    Err(nicmem::AccessError::NotPosted {
                        key,
                        addr: d.addr,
                        len: d.byte_count,
                    }),
                    true,
                ),
            }
        };
        read.map_err(|_| syndrome::LOCAL_PROTECTION)?;
        let t = if host {
            m.tx_host_read(ready, d.byte_count)
        } else {
            m.tx_nic_read(ready, d.byte_count)
        };
        *done = (*done).max(t);
        len += n;
    }
    Ok(len)
}
