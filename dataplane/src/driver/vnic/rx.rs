//! The Rx side of a virtual NIC queue: descriptor rings, the NIC's receive engine (validate the
//! descriptor, DMA the frame, write a completion) and the driver's completion polling.
//!
//! Rings (each a ring of 16 B data-segment WQEs plus the driver's shadow array of posted buffer
//! indices, like the mlx5 PMD's `elts`):
//! - the **header ring** (host): whole frames in `host` mode, the first `split_offset` bytes in the
//!   split modes, written after the header buffer's metadata and headroom;
//! - the **primary payload ring** (nicmem, `nic-payload`/`nic-inline`);
//! - the **secondary payload ring** (host; the only payload ring in `split`).
//!
//! The NIC takes a payload buffer from the primary ring while it has one posted and spills to the
//! secondary ring when it is empty; the completion says which ring served the payload, and the
//! driver returns each buffer to its own pool (and so, on refill, to its own ring).
//!
//! Every descriptor is validated: the key must be registered to the queue's protection domain, the
//! range must lie inside the region, and (stricter than hardware, so that a corrupt descriptor can
//! never make the model touch memory it does not own) inside the buffer posted in that slot. A
//! failure produces an error completion with an mlx5 syndrome and a counter; the frame is dropped.
//!
//! The driver posts whole bursts: one bulk allocation of buffer indices from the queue's cache,
//! then one 16 B WQE per slot, and one producer-index update.

use nicmem::PoolLayout;

use super::desc::{Cqe, DataSeg, SEG, cqe_op, cqe_ring, syndrome};

/// A place [`NicCursor::take_batch`] refused.
pub(crate) const REFUSED: u64 = u64::MAX;

/// A ring of Rx WQEs with the driver's shadow array of posted buffer indices.
pub(crate) struct RxRing {
    wqes: Box<[[u8; SEG]]>,
    bufs: Box<[u32]>,
    mask: u32,
    /// Driver producer count (WQEs posted).
    pi: u32,
    /// NIC consumer count.
    nic_ci: u32,
    /// Driver consumer count (buffers harvested from completions).
    sw_ci: u32,
    /// The pool the ring's buffers come from.
    layout: PoolLayout,
    /// Where the NIC writes in each buffer (after the metadata and headroom of header buffers).
    data_off: u32,
    /// Bytes each posted WQE offers (the buffer's room after `data_off`).
    room: u32,
}

impl RxRing {
    /// A ring of `size` (rounded up to a power of two) WQEs over buffers of `layout`, written
    /// from `data_off` on.
    pub(crate) fn new(size: usize, layout: PoolLayout, data_off: usize) -> Self {
        let size = size.next_power_of_two();
        Self {
            wqes: vec![[0u8; SEG]; size].into_boxed_slice(),
            bufs: vec![0u32; size].into_boxed_slice(),
            mask: size as u32 - 1,
            pi: 0,
            nic_ci: 0,
            sw_ci: 0,
            layout,
            data_off: data_off as u32,
            room: (layout.buf_size - data_off) as u32,
        }
    }

    /// WQEs posted and not yet consumed by the NIC.
    #[inline]
    pub(crate) fn posted(&self) -> u32 {
        self.pi.wrapping_sub(self.nic_ci)
    }

    /// Slots the driver may post now (consumed by the NIC and harvested).
    #[inline]
    pub(crate) fn free_slots(&self) -> u32 {
        (self.mask + 1) - self.pi.wrapping_sub(self.sw_ci)
    }

    /// The driver's producer count (WQEs ever posted).
    #[inline]
    pub(crate) fn producer(&self) -> u32 {
        self.pi
    }

    /// The NIC's consumer count (WQEs ever consumed).
    #[inline]
    pub(crate) fn consumer(&self) -> u32 {
        self.nic_ci
    }

    /// Bytes the NIC may write per buffer.
    #[inline]
    pub(crate) fn room(&self) -> usize {
        self.room as usize
    }

    /// Driver side: posts one WQE per buffer index and publishes them with one producer-index
    /// update. The caller must not post more than [`RxRing::free_slots`].
    #[inline]
    pub(crate) fn post(&mut self, idx: &[u32]) {
        debug_assert!(idx.len() as u32 <= self.free_slots());
        let (key, room, mask) = (self.layout.key.0, self.room, self.mask);
        let layout = self.layout;
        let iova = u64::from(self.data_off);
        let (wqes, bufs) = (self.wqes.as_mut_ptr(), self.bufs.as_mut_ptr());
        let mut pi = self.pi;
        for &b in idx {
            let slot = (pi & mask) as usize;
            let wqe = DataSeg {
                byte_count: room,
                key,
                addr: layout.iova_of(b) + iova,
            }
            .encode();
            // SAFETY: `slot <= mask` indexes both arrays' `mask + 1` entries.
            unsafe {
                *wqes.add(slot) = wqe;
                *bufs.add(slot) = b;
            }
            pi = pi.wrapping_add(1);
        }
        self.pi = pi;
    }

    /// NIC side: consumes the next posted WQE and validates it for a write of `len` bytes.
    /// Returns the WQE counter and either where to write (a pointer to `len` bytes of the posted
    /// buffer) or an mlx5 syndrome. On a validation failure the WQE is still consumed (its buffer
    /// goes back to the driver through the error completion).
    #[inline(always)]
    pub(crate) fn nic_take(&mut self, len: usize) -> (u16, Result<*mut u8, u8>) {
        let slot = (self.nic_ci & self.mask) as usize;
        let counter = self.nic_ci as u16;
        self.nic_ci = self.nic_ci.wrapping_add(1);
        let b = self.bufs[slot];
        let start = self.layout.iova_of(b) + u64::from(self.data_off);
        // The driver reads received bytes from the posted place, so the NIC must be told to
        // write there: the descriptor must be exactly what the driver posts for this buffer
        // (compared as encoded bytes, one decode avoided on the fast path).
        let want = DataSeg {
            byte_count: self.room,
            key: self.layout.key.0,
            addr: start,
        }
        .encode();
        if self.wqes[slot] == want && len <= self.room as usize {
            return (
                counter,
                Ok(self.layout.ptr(b).wrapping_add(self.data_off as usize)),
            );
        }
        (counter, Err(self.refusal(slot, len)))
    }

    /// Why the descriptor in `slot` cannot take `len` bytes: a length error when it offers too
    /// few bytes, else a protection error. A descriptor naming its own buffer's key and start
    /// lies inside a region registered to this queue's domain by construction; hardware would
    /// also write to any other registered range, the model refuses every other address (a
    /// foreign key, a range outside the region, another buffer), so a corrupt descriptor can
    /// never make it write memory the slot does not own.
    fn refusal(&self, slot: usize, len: usize) -> u8 {
        refusal(&self.wqes[slot], len, self.room)
    }

    /// Whether writes into this ring's buffers keep their bytes (false for aliased nicmem).
    #[inline]
    pub(crate) fn keeps_bytes(&self) -> bool {
        !self.layout.aliased
    }

    /// Driver side: takes the buffer index of the slot a completion names (they complete in
    /// order).
    #[inline]
    pub(crate) fn harvest(&mut self, counter: u16) -> u32 {
        let slot = (counter as u32 & self.mask) as usize;
        self.sw_ci = self.sw_ci.wrapping_add(1);
        self.bufs[slot]
    }

    /// Overwrites the next WQE the NIC will consume (tests and fuzzing of descriptor handling).
    pub(crate) fn corrupt_next(&mut self, f: impl FnOnce(&mut [u8; SEG])) -> bool {
        if self.posted() == 0 {
            return false;
        }
        let slot = (self.nic_ci & self.mask) as usize;
        f(&mut self.wqes[slot]);
        true
    }

    /// Takes every posted, unconsumed buffer index out of the ring (queue teardown); the caller
    /// frees them.
    pub(crate) fn drain(&mut self, out: &mut Vec<u32>) {
        let mut i = self.nic_ci;
        while i != self.pi {
            out.push(self.bufs[(i & self.mask) as usize]);
            i = i.wrapping_add(1);
        }
        self.pi = 0;
        self.nic_ci = 0;
        self.sw_ci = 0;
    }
}

/// Why the descriptor `wqe` cannot take `len` bytes into a buffer offering `room` (see
/// [`RxRing::refusal`]).
#[cold]
fn refusal(wqe: &[u8; SEG], len: usize, room: u32) -> u8 {
    let seg = DataSeg::read(wqe);
    if seg.byte_count == 0 || len > seg.byte_count as usize || len > room as usize {
        syndrome::LOCAL_LENGTH
    } else {
        syndrome::LOCAL_PROTECTION
    }
}

impl RxRing {
    /// The NIC's side of the ring as a cursor held in registers for one receive pass (writes
    /// into posted buffers go through raw pointers, which would otherwise make the compiler
    /// reload every ring field after each copy). Hand it back with [`RxRing::nic_commit`].
    #[inline(always)]
    pub(crate) fn nic_cursor(&self) -> NicCursor {
        NicCursor {
            wqes: self.wqes.as_ptr(),
            bufs: self.bufs.as_ptr(),
            mask: self.mask,
            ci: self.nic_ci,
            end: self.pi,
            room: self.room,
            base: self.layout.base.wrapping_add(self.data_off as usize),
            iova: self.layout.iova + u64::from(self.data_off),
            stride: self.layout.buf_size as u64,
            alias_slots: if self.layout.aliased {
                self.layout.slots
            } else {
                0
            },
            want_lo: u64::from_ne_bytes(
                DataSeg {
                    byte_count: self.room,
                    key: self.layout.key.0,
                    addr: 0,
                }
                .encode()[..8]
                    .try_into()
                    .expect("8 bytes"),
            ),
        }
    }

    /// Takes back a cursor from [`RxRing::nic_cursor`], with the WQEs it consumed.
    #[inline(always)]
    pub(crate) fn nic_commit(&mut self, c: NicCursor) {
        self.nic_ci = c.ci;
    }
}

impl RxRing {
    /// The driver's view of the ring's posted buffers for one harvest pass; the pass hands back
    /// how many it harvested with [`RxRing::sw_release`].
    #[inline(always)]
    pub(crate) fn sw_cursor(&self) -> SwCursor {
        SwCursor {
            bufs: self.bufs.as_ptr(),
            mask: self.mask,
            room: self.room,
        }
    }

    /// The driver harvested `n` more buffers (through a [`SwCursor`]).
    #[inline(always)]
    pub(crate) fn sw_release(&mut self, n: u32) {
        self.sw_ci = self.sw_ci.wrapping_add(n);
    }
}

/// The driver's view of an Rx ring's posted buffers during a harvest (see
/// [`RxRing::sw_cursor`]).
#[derive(Clone, Copy)]
pub(crate) struct SwCursor {
    bufs: *const u32,
    mask: u32,
    room: u32,
}

impl SwCursor {
    /// The buffer index of the slot a completion names ([`RxRing::harvest`] without the
    /// consumer count, which the pass advances once with [`RxRing::sw_release`]).
    #[inline(always)]
    pub(crate) fn buf(&self, counter: u16) -> u32 {
        let slot = (u32::from(counter) & self.mask) as usize;
        // SAFETY: `slot <= mask` indexes the ring's `mask + 1` entries; the ring outlives the
        // cursor and nobody writes it during the pass.
        unsafe { *self.bufs.add(slot) }
    }

    /// Bytes the NIC may write per buffer.
    #[inline(always)]
    pub(crate) fn room(&self) -> usize {
        self.room as usize
    }
}

/// The NIC's consumer position on an Rx ring during one receive pass (see
/// [`RxRing::nic_cursor`]).
#[derive(Clone, Copy)]
pub(crate) struct NicCursor {
    wqes: *const [u8; SEG],
    bufs: *const u32,
    mask: u32,
    ci: u32,
    /// The producer index when the cursor was made: WQEs past it are not posted.
    end: u32,
    room: u32,
    /// Where the NIC writes in buffer 0, and its bus address.
    base: *mut u8,
    iova: u64,
    stride: u64,
    /// Slots of an aliased pool (buffer `i` lives in slot `i % alias_slots`), 0 when not aliased.
    alias_slots: u32,
    /// The first 8 bytes every valid descriptor of the ring has (its length and key).
    want_lo: u64,
}

impl NicCursor {
    /// WQEs posted and not yet consumed.
    #[inline(always)]
    pub(crate) fn posted(&self) -> u32 {
        self.end.wrapping_sub(self.ci)
    }

    /// Bytes the NIC may write per buffer.
    #[inline(always)]
    pub(crate) fn room(&self) -> usize {
        self.room as usize
    }

    /// Whether writes into this ring's buffers keep their bytes (false for aliased nicmem).
    #[inline(always)]
    pub(crate) fn keeps_bytes(&self) -> bool {
        self.alias_slots == 0
    }

    /// [`NicCursor::take`] for a batch: consumes one posted WQE per entry of `lens` (the caller
    /// checked [`NicCursor::posted`]) and validates each for the length there (at most `cap`:
    /// the header ring takes a split frame's first `cap` bytes), writing to
    /// `place[i]` where frame `i` goes (a byte offset for [`NicCursor::at`]) or [`REFUSED`].
    /// Returns the consumer count of the first WQE (frame `i`'s WQE counter is that plus `i`)
    /// and how many places were refused.
    /// One short loop with few live values per stage of the receive, instead of one long one.
    #[inline(always)]
    pub(crate) fn take_batch(&mut self, lens: &[u32], cap: u32, place: &mut [u64]) -> (u32, u32) {
        debug_assert!(self.posted() as usize >= lens.len());
        let first = self.ci;
        let want_lo = self.want_lo;
        let (wqes, bufs, mask) = (self.wqes, self.bufs, self.mask);
        let (iova, stride, room, alias) = (self.iova, self.stride, self.room, self.alias_slots);
        let mut refused = 0;
        for (i, (&len, out)) in lens.iter().zip(place.iter_mut()).enumerate() {
            let slot = (first.wrapping_add(i as u32) & mask) as usize;
            // SAFETY: `slot <= mask`, and both arrays have `mask + 1` entries; the ring (borrowed
            // by the queue for the whole pass) outlives the cursor and nobody else writes it.
            let (wqe, b) = unsafe { (*wqes.add(slot), *bufs.add(slot)) };
            let b = if alias == 0 { b } else { b % alias };
            let off = u64::from(b) * stride;
            // The descriptor must be exactly what the driver posts for this buffer (compared
            // as encoded bytes, as in `take`).
            let lo = u64::from_ne_bytes(wqe[..8].try_into().expect("8 bytes"));
            let hi = u64::from_ne_bytes(wqe[8..].try_into().expect("8 bytes"));
            let ok = lo == want_lo && hi == (iova + off).to_be() && len.min(cap) <= room;
            *out = if ok { off } else { REFUSED };
            refused += u32::from(!ok);
        }
        self.ci = first.wrapping_add(lens.len() as u32);
        (first, refused)
    }

    /// Whether the next `place.len()` posted WQEs (the caller checked [`NicCursor::posted`])
    /// each take a whole frame of `len` bytes, as [`NicCursor::take`] would validate them,
    /// noting where each frame goes (a byte offset for [`NicCursor::at`]) in `place`. Consumes
    /// nothing: on `true` the caller takes them with [`NicCursor::skip`]; on `false` it takes
    /// them one by one, which finds the refused ones and why. Every check is made for every
    /// WQE, with no branch per WQE.
    #[inline(always)]
    pub(crate) fn places_for(&self, len: u32, place: &mut [u64]) -> bool {
        if self.alias_slots != 0 || len > self.room {
            return false;
        }
        let (wqes, bufs, mask, ci) = (self.wqes, self.bufs, self.mask, self.ci);
        let (want_lo, iova, stride) = (self.want_lo, self.iova, self.stride);
        let mut ok = true;
        for (i, out) in place.iter_mut().enumerate() {
            let slot = (ci.wrapping_add(i as u32) & mask) as usize;
            // SAFETY: as in `take_batch`.
            let (wqe, b) = unsafe { (*wqes.add(slot), *bufs.add(slot)) };
            let off = u64::from(b) * stride;
            let lo = u64::from_ne_bytes(wqe[..8].try_into().expect("8 bytes"));
            let hi = u64::from_ne_bytes(wqe[8..].try_into().expect("8 bytes"));
            ok &= (lo == want_lo) & (hi == (iova + off).to_be());
            *out = off;
        }
        ok
    }

    /// Consumes the next `n` posted WQEs (accepted by [`NicCursor::places_for`]) and returns
    /// the consumer count of the first.
    #[inline(always)]
    pub(crate) fn skip(&mut self, n: u32) -> u32 {
        let first = self.ci;
        self.ci = first.wrapping_add(n);
        first
    }

    /// Where to write for a place [`NicCursor::take_batch`] accepted.
    #[inline(always)]
    pub(crate) fn at(&self, place: u64) -> *mut u8 {
        self.base.wrapping_add(place as usize)
    }

    /// Why the WQE with consumer count `ci` could not take `len` bytes (a place
    /// [`NicCursor::take_batch`] refused).
    #[cold]
    pub(crate) fn refusal_at(&self, ci: u32, len: usize) -> u8 {
        let slot = (ci & self.mask) as usize;
        // SAFETY: as in `take_batch`.
        refusal(unsafe { &*self.wqes.add(slot) }, len, self.room)
    }

    /// [`RxRing::nic_take`] on the cursor: consumes the next posted WQE (the caller checked
    /// [`NicCursor::posted`]) and validates it for `len` bytes.
    #[inline(always)]
    pub(crate) fn take(&mut self, len: usize) -> (u16, Result<*mut u8, u8>) {
        let (c, r) = self.take_place(len);
        (c, r.map(|p| self.at(p)))
    }

    /// [`NicCursor::take`] giving the place for [`NicCursor::at`] instead of a pointer.
    #[inline(always)]
    pub(crate) fn take_place(&mut self, len: usize) -> (u16, Result<u64, u8>) {
        debug_assert!(self.posted() > 0);
        let slot = (self.ci & self.mask) as usize;
        let counter = self.ci as u16;
        self.ci = self.ci.wrapping_add(1);
        // SAFETY: `slot <= mask`, and both arrays have `mask + 1` entries; the ring (borrowed by
        // the queue for the whole pass) outlives the cursor and nobody else writes it meanwhile.
        let (wqe, b) = unsafe { (*self.wqes.add(slot), *self.bufs.add(slot)) };
        let b = if self.alias_slots == 0 {
            b
        } else {
            b % self.alias_slots
        };
        let off = u64::from(b) * self.stride;
        // The descriptor must be exactly what the driver posts for this buffer (compared as
        // encoded bytes).
        let lo = u64::from_ne_bytes(wqe[..8].try_into().expect("8 bytes"));
        let hi = u64::from_ne_bytes(wqe[8..].try_into().expect("8 bytes"));
        if lo == self.want_lo && hi == (self.iova + off).to_be() && len <= self.room as usize {
            return (counter, Ok(off));
        }
        (counter, Err(refusal(&wqe, len, self.room)))
    }
}

/// A completion queue of 64 B CQEs with an ownership bit that flips on every pass.
pub(crate) struct CompletionQueue {
    slots: Box<[[u8; 64]]>,
    mask: u32,
    /// NIC producer count.
    pi: u32,
    /// Driver consumer count.
    ci: u32,
}

impl CompletionQueue {
    pub(crate) fn new(size: usize) -> Self {
        let size = size.next_power_of_two();
        Self {
            // Pre-set every slot's ownership bit to "previous pass" so nothing reads as valid.
            slots: vec![
                {
                    let mut s = [0u8; 64];
                    s[63] = 1;
                    s
                };
                size
            ]
            .into_boxed_slice(),
            mask: size as u32 - 1,
            pi: 0,
            ci: 0,
        }
    }

    /// The ownership bit of the pass `counter` is in: the ring's size is a power of two, so it is
    /// the counter's bit just above the slot index.
    #[inline(always)]
    fn owner(counter: u32, mask: u32) -> bool {
        counter & (mask + 1) != 0
    }

    /// The NIC's producer side as a cursor held in registers for one receive pass; hand it back
    /// with [`CompletionQueue::commit`].
    #[inline(always)]
    pub(crate) fn cursor(&mut self) -> CqCursor {
        CqCursor {
            slots: self.slots.as_mut_ptr(),
            mask: self.mask,
            pi: self.pi,
        }
    }

    /// Takes back a cursor from [`CompletionQueue::cursor`], with the completions it wrote.
    #[inline(always)]
    pub(crate) fn commit(&mut self, c: CqCursor) {
        self.pi = c.pi;
    }

    /// The driver's consumer side as a cursor for one harvest pass; hand it back with
    /// [`CompletionQueue::poll_commit`].
    #[inline(always)]
    pub(crate) fn poll_cursor(&self) -> CqPoll {
        CqPoll {
            slots: self.slots.as_ptr(),
            mask: self.mask,
            ci: self.ci,
        }
    }

    /// Takes back a cursor from [`CompletionQueue::poll_cursor`].
    #[inline(always)]
    pub(crate) fn poll_commit(&mut self, c: CqPoll) {
        self.ci = c.ci;
    }

    /// Room for the NIC to write more completions.
    #[inline]
    pub(crate) fn room(&self) -> u32 {
        (self.mask + 1) - self.pi.wrapping_sub(self.ci)
    }

    /// NIC side: writes a completion.
    #[inline]
    pub(crate) fn push(&mut self, cqe: &Cqe) {
        let slot = (self.pi & self.mask) as usize;
        cqe.write(&mut self.slots[slot], Self::owner(self.pi, self.mask));
        self.pi = self.pi.wrapping_add(1);
    }

    /// Driver side: the next completion, if the NIC has written it.
    #[inline]
    pub(crate) fn poll(&mut self) -> Option<Cqe> {
        let slot = (self.ci & self.mask) as usize;
        let cqe = Cqe::read(&self.slots[slot], Self::owner(self.ci, self.mask))?;
        self.ci = self.ci.wrapping_add(1);
        Some(cqe)
    }

    /// Completions written and not yet polled.
    #[inline]
    pub(crate) fn pending(&self) -> u32 {
        self.pi.wrapping_sub(self.ci)
    }

    /// The NIC's producer count (the slot the next completion goes to).
    #[inline]
    pub(crate) fn producer(&self) -> u32 {
        self.pi
    }

    /// The driver's consumer count (the slot the next poll reads).
    #[inline]
    pub(crate) fn consumer(&self) -> u32 {
        self.ci
    }
}

/// The NIC's producer position on a completion queue during one pass (see
/// [`CompletionQueue::cursor`]).
#[derive(Clone, Copy)]
pub(crate) struct CqCursor {
    slots: *mut [u8; 64],
    mask: u32,
    pi: u32,
}

impl CqCursor {
    /// The producer count (the slot the next completion goes to).
    #[inline(always)]
    pub(crate) fn producer(&self) -> u32 {
        self.pi
    }

    /// Writes the completions of `n` frames received whole, `len` bytes each, into the header
    /// ring's WQEs from consumer count `first` on (what [`CqCursor::push`] writes for each).
    /// The caller checked the queue has room.
    #[inline(always)]
    pub(crate) fn push_whole(&mut self, first: u32, n: u32, len: u32) {
        let mut cqe = Cqe {
            rss_hash: 0,
            byte_cnt: len,
            hdr_len: len as u16,
            ring: cqe_ring::NONE,
            syndrome: 0,
            wqe_counter: 0,
            payload_counter: 0,
            opcode: cqe_op::RESP_SEND,
        };
        for i in 0..n {
            cqe.wqe_counter = first.wrapping_add(i) as u16;
            self.push(&cqe);
        }
    }

    /// Writes a completion. The caller checked the queue has room.
    #[inline(always)]
    pub(crate) fn push(&mut self, cqe: &Cqe) {
        let slot = (self.pi & self.mask) as usize;
        let owner = CompletionQueue::owner(self.pi, self.mask);
        // SAFETY: `slot <= mask` indexes the queue's `mask + 1` slots; the queue (borrowed by the
        // receive pass) outlives the cursor and the driver does not read it meanwhile.
        cqe.write(unsafe { &mut *self.slots.add(slot) }, owner);
        self.pi = self.pi.wrapping_add(1);
    }
}

/// A completion of a frame received whole into its header buffer, as the driver harvests it
/// (see [`CqPoll::poll_whole`]).
#[derive(Clone, Copy)]
pub(crate) struct WholeCqe {
    /// The header buffer.
    pub buf: u32,
    /// The frame's length.
    pub len: u16,
    /// Its RSS hash.
    pub rss_hash: u32,
}

/// The driver's consumer position on a completion queue during one pass (see
/// [`CompletionQueue::poll_cursor`]).
pub(crate) struct CqPoll {
    slots: *const [u8; 64],
    mask: u32,
    ci: u32,
}

impl CqPoll {
    /// The consumer count (completions ever polled, this pass's included).
    #[inline(always)]
    pub(crate) fn consumer(&self) -> u32 {
        self.ci
    }

    /// Polls the leading run, of at most `n`, of completions of frames received whole into
    /// their header buffers: written in the pass the cursor is in, a receive without error
    /// (`RESP_SEND`), no payload ring, the frame's length that of its header segment and at most
    /// `hroom`. Hands `f` each one's header buffer (from `hdr`), length and RSS hash, and
    /// returns how many it polled; any other completion ends the run and is left to
    /// [`CqPoll::poll`].
    #[inline(always)]
    pub(crate) fn poll_whole(
        &mut self,
        n: u32,
        hdr: &SwCursor,
        hroom: usize,
        mut f: impl FnMut(WholeCqe),
    ) -> u32 {
        let (slots, mask, ci) = (self.slots, self.mask, self.ci);
        let mut k = 0;
        while k < n {
            let c = ci.wrapping_add(k);
            // SAFETY: as in `poll`.
            let b = unsafe { &*slots.add((c & mask) as usize) };
            let last = (cqe_op::RESP_SEND << 4) | u8::from(CompletionQueue::owner(c, mask));
            let len = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let hl = u16::from_be_bytes([b[8], b[9]]);
            if b[63] != last
                || b[10] != cqe_ring::NONE
                || len != u32::from(hl)
                || usize::from(hl) > hroom
            {
                break;
            }
            f(WholeCqe {
                buf: hdr.buf(u16::from_be_bytes([b[60], b[61]])),
                len: hl,
                rss_hash: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            });
            k += 1;
        }
        self.ci = ci.wrapping_add(k);
        k
    }

    /// [`CompletionQueue::poll`] on the cursor.
    #[inline(always)]
    pub(crate) fn poll(&mut self) -> Option<Cqe> {
        let slot = (self.ci & self.mask) as usize;
        // SAFETY: `slot <= mask` indexes the queue's `mask + 1` slots; the queue outlives the
        // cursor and the NIC does not write it during the pass.
        let cqe = Cqe::read(
            unsafe { &*self.slots.add(slot) },
            CompletionQueue::owner(self.ci, self.mask),
        )?;
        self.ci = self.ci.wrapping_add(1);
        Some(cqe)
    }
}
