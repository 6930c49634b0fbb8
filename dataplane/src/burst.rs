//! A burst: up to [`MAX_BURST`] packets as parallel arrays (a driver handle, the header segment's
//! place and length, the frame length, the payload ring, the RSS hash, the receive port and the
//! verdict), the vector the run loop moves between Rx, the network functions and Tx.
//!
//! Why parallel arrays: a packet is written once, at Rx, into these arrays and never copied or
//! moved afterwards (the first build moved a 72 B packet struct about seven times per packet).
//! A driver receives straight into [`Burst::handles`] (DPDK's `rte_eth_rx_burst` writes its mbuf
//! pointers there) and transmits from it; network functions walk the headers in place and leave a
//! two-byte [`Verdict`] per packet. This is the shape of DPDK's `rte_mbuf*` arrays and VPP's
//! vectors of buffer indices with per-buffer metadata.
//!
//! The safe API is what network functions need: a header view per packet ([`Burst::header_mut`]),
//! the frame length, a payload view that has no bytes for nicmem ([`Burst::payload`]), verdicts,
//! and header growth into the buffer's headroom for encapsulation ([`Burst::prepend`]). Drivers
//! fill bursts through [`Burst::push`] (unsafe: the driver vouches for the header pointer) and
//! empty them through [`Burst::disown`] once they have taken the packets back.
//!
//! Every packet of a burst belongs to one [`PacketOwner`] (one driver's buffers). Dropping a burst
//! that still holds packets returns them to that owner, so buffers are never lost; the run loop
//! instead hands packets back to its queues in bulk (the fast, per-core path).
//!
//! **Described on demand.** A driver whose buffers carry their own metadata (a DPDK mbuf) may push
//! bare handles ([`Burst::push_handles`]) with a function that describes them; the header place
//! and lengths are then filled in, for the whole rest of the burst at once, the first time any
//! per-packet field is read. A chain that never looks at a packet (`io_fwd`) costs nothing per
//! packet beyond the handle, as in testpmd's io mode, on the same path as every other chain.

use std::cell::{Cell, UnsafeCell};
use std::sync::Arc;

use nicmem::AccessError;

use crate::packet::{NicPayload, PacketOwner, PayloadLoc, PayloadRef, PayloadRing};
use crate::verdict::{DropReason, Verdict};

/// The largest burst (`datapath.burst` may be 1..=MAX_BURST).
pub const MAX_BURST: usize = 256;
const _: () = assert!(
    MAX_BURST.is_multiple_of(8),
    "set_rx_defaults fills in groups of 8"
);

/// Default burst size (DPDK's customary 32).
pub const DEFAULT_BURST: usize = 32;

/// What a driver writes for one received packet (see [`Burst::push`]).
#[derive(Clone, Copy, Debug)]
pub struct RxPacket {
    /// The driver's handle (mbuf pointer, buffer index, ...).
    pub handle: usize,
    /// First byte of the header segment (host memory).
    pub hdr: *mut u8,
    /// Bytes in the header segment.
    pub hdr_len: u16,
    /// Writable bytes before `hdr` in the same buffer ([`Burst::prepend`] may use them).
    pub headroom: u16,
    /// Frame length (header + payload, without FCS).
    pub frame_len: u32,
    /// Which ring served the payload.
    pub ring: PayloadRing,
    /// RSS hash computed by the NIC (0 when the port does not hash).
    pub rss_hash: u32,
}

/// A driver's read-only view of a burst's arrays (see [`Burst::tx_view`]); every slice has the
/// burst's length.
#[derive(Clone, Copy, Debug)]
pub struct TxView<'a> {
    /// Driver handles.
    pub handle: &'a [usize],
    /// Header segment starts (valid for `hdr_len` bytes while the burst holds the packets).
    pub hdr: &'a [*mut u8],
    /// Header segment lengths.
    pub hdr_len: &'a [u16],
    /// Headroom before each header.
    pub headroom: &'a [u16],
    /// Frame lengths.
    pub frame_len: &'a [u32],
    /// Payload rings.
    pub ring: &'a [PayloadRing],
}

/// Where a [`Describe`] function writes the fields of the packets it describes; every slice has
/// the length of the handle slice it was given.
pub struct DescribeOut<'a> {
    /// Header segment starts.
    pub hdr: &'a mut [*mut u8],
    /// Header segment lengths.
    pub hdr_len: &'a mut [u16],
    /// Headroom before each header.
    pub headroom: &'a mut [u16],
    /// Frame lengths.
    pub frame_len: &'a mut [u32],
    /// Payload rings.
    pub ring: &'a mut [PayloadRing],
    /// RSS hashes.
    pub rss: &'a mut [u32],
}

/// A driver's function that fills in the fields of packets pushed as bare handles (see
/// [`Burst::push_handles`]). It must write, for every handle, what [`Burst::push`] would have
/// been given for it.
pub type Describe = fn(handles: &[usize], out: DescribeOut<'_>);

/// Where a driver's per-buffer metadata keeps a packet's header place, for handles that are
/// pointers to that metadata (DPDK's `rte_mbuf`: `buf_addr`, `data_off`, `data_len`,
/// `pkt_len`). With it, [`Burst::packets_mut`] reaches each header straight from its handle (the
/// way DPDK's own loops do), without describing the burst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleLayout {
    /// Offset of the buffer's start address (a pointer).
    pub buf_addr: usize,
    /// Offset of the header's offset in the buffer (`u16`).
    pub data_off: usize,
    /// Offset of the header segment's length (`u16`).
    pub data_len: usize,
    /// Offset of the frame's length (`u32`).
    pub pkt_len: usize,
}

impl HandleLayout {
    /// No layout (a burst whose packets are described in its arrays never reads it).
    const NONE: HandleLayout = HandleLayout {
        buf_addr: 0,
        data_off: 0,
        data_len: 0,
        pkt_len: 0,
    };

    /// The header start and length, and the frame length, of the packet behind `h`.
    ///
    /// # Safety
    /// `h` must point to live metadata laid out as `self` says.
    #[inline(always)]
    unsafe fn read(&self, h: usize) -> (*mut u8, usize, usize) {
        let p = h as *const u8;
        // SAFETY: per the caller's contract, the fields are at these offsets of live metadata.
        unsafe {
            let base = p.add(self.buf_addr).cast::<*mut u8>().read_unaligned();
            let off = p.add(self.data_off).cast::<u16>().read_unaligned();
            let len = p.add(self.data_len).cast::<u16>().read_unaligned();
            let frame = p.add(self.pkt_len).cast::<u32>().read_unaligned();
            (base.add(off as usize), len as usize, frame as usize)
        }
    }
}

/// The per-packet fields a burst may fill in lazily.
struct Desc {
    hdr: [*mut u8; MAX_BURST],
    hdr_len: [u16; MAX_BURST],
    headroom: [u16; MAX_BURST],
    frame_len: [u32; MAX_BURST],
    ring: [PayloadRing; MAX_BURST],
    rss: [u32; MAX_BURST],
}

/// Appends received packets to a burst (see [`Burst::rx_writer`]).
pub struct RxWriter<'a> {
    n: usize,
    cap: usize,
    handle: *mut usize,
    hdr: *mut *mut u8,
    hdr_len: *mut u16,
    headroom: *mut u16,
    frame_len: *mut u32,
    ring: *mut PayloadRing,
    rss: *mut u32,
    len: &'a mut usize,
    described: &'a Cell<usize>,
    bytes: &'a mut u64,
    added: u64,
}

impl RxWriter<'_> {
    /// Room left in the burst.
    #[inline(always)]
    pub fn room(&self) -> usize {
        self.cap - self.n
    }

    /// Appends a packet; `false` when the burst is full.
    ///
    /// # Safety
    /// As [`Burst::push`]: the packet belongs to the burst's owner, and `p.hdr` names `p.hdr_len`
    /// bytes of host memory with `p.headroom` writable bytes before them, exclusively owned by
    /// the packet while the burst holds it.
    #[inline(always)]
    pub unsafe fn push(&mut self, p: &RxPacket) -> bool {
        let i = self.n;
        if i >= self.cap {
            return false;
        }
        // SAFETY: `i < cap <= MAX_BURST`, the length of every array; the writer borrows the
        // burst mutably, so nothing else touches the arrays meanwhile.
        unsafe {
            *self.handle.add(i) = p.handle;
            *self.hdr.add(i) = p.hdr;
            *self.hdr_len.add(i) = p.hdr_len;
            *self.headroom.add(i) = p.headroom;
            *self.frame_len.add(i) = p.frame_len;
            *self.ring.add(i) = p.ring;
            *self.rss.add(i) = p.rss_hash;
        }
        self.added += u64::from(p.frame_len);
        self.n = i + 1;
        true
    }

    /// Sets the burst's length to include every packet pushed.
    #[inline(always)]
    pub fn finish(self) {
        if self.described.get() == *self.len {
            self.described.set(self.n);
        }
        *self.len = self.n;
        *self.bytes += self.added;
    }
}

/// How many packets ahead [`PacketsMut`] (and the network functions that walk a burst by
/// index) prefetch headers: far enough that a header's cache miss overlaps a few packets of
/// work, near enough that the prefetched lines are still in L1 when used (DPDK's l3fwd uses 3;
/// 4 covers the somewhat shorter per-packet work of macswap).
pub const PREFETCH_AHEAD: usize = 4;

/// One live packet of a burst, from [`Burst::packets_mut`].
pub struct PacketMut<'a> {
    index: usize,
    header: &'a mut [u8],
    frame_len: usize,
    rx_port: u16,
    verdict: &'a mut Verdict,
    /// The burst's uniform-verdict prefix, which a verdict write clears (see
    /// [`Burst::packets_mut`]).
    uniform_len: &'a Cell<usize>,
}

impl PacketMut<'_> {
    /// The packet's index in the burst.
    #[inline(always)]
    pub fn index(&self) -> usize {
        self.index
    }

    /// The header segment, writable.
    #[inline(always)]
    pub fn header(&mut self) -> &mut [u8] {
        self.header
    }

    /// The frame length (header + payload, without FCS).
    #[inline(always)]
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// The port the packet arrived on.
    #[inline(always)]
    pub fn rx_port(&self) -> u16 {
        self.rx_port
    }

    /// The packet's verdict.
    #[inline(always)]
    pub fn verdict(&self) -> Verdict {
        *self.verdict
    }

    /// Sets the packet's verdict.
    #[inline(always)]
    pub fn set_verdict(&mut self, v: Verdict) {
        *self.verdict = v;
        self.uniform_len.set(0);
    }

    /// Drops the packet for `reason`.
    #[inline(always)]
    pub fn drop_packet(&mut self, reason: DropReason) {
        self.set_verdict(Verdict::drop(reason));
    }
}

/// The live packets of a burst (see [`Burst::packets_mut`]).
pub struct PacketsMut<'a> {
    i: usize,
    len: usize,
    /// Bare handles: read each header from its metadata (laid out as `layout` says) instead of
    /// the arrays.
    locate: bool,
    layout: HandleLayout,
    /// Every packet was live when the walk began (one non-drop verdict for the whole burst):
    /// the walk then reads no verdict per packet.
    all_live: bool,
    handle: *const usize,
    hdr: *const *mut u8,
    hdr_len: *const u16,
    frame_len: *const u32,
    port: *const u16,
    verdict: *mut Verdict,
    uniform_len: &'a Cell<usize>,
    _burst: std::marker::PhantomData<&'a mut Burst>,
}

impl<'a> PacketsMut<'a> {
    /// Prefetches the header of packet `j` (which must be below `len`), read from the handle's
    /// metadata when `LOCATE` (which must equal `self.locate`).
    #[inline(always)]
    fn prefetch<const LOCATE: bool>(&self, j: usize) {
        // SAFETY: `j < len <= MAX_BURST` indexes every array; with `locate`, every handle points
        // to metadata laid out as `layout` says (`push_handles_in_place`'s contract). A prefetch
        // of any address is harmless.
        unsafe {
            if LOCATE {
                prefetch_read(self.layout.read(*self.handle.add(j)).0)
            } else {
                prefetch_read(*self.hdr.add(j))
            }
        }
    }

    /// Packet `i` (below `len`, and visited once), or `None` when it is dropped.
    #[inline(always)]
    fn item<const LOCATE: bool>(&mut self, i: usize) -> Option<PacketMut<'a>> {
        // SAFETY: `i < len <= MAX_BURST` indexes the verdict array.
        if unsafe { (*self.verdict.add(i)).is_drop() } {
            return None;
        }
        Some(self.live_item::<LOCATE>(i))
    }

    /// Packet `i` (below `len`, visited once, and known to be live); `LOCATE` must equal
    /// `self.locate`.
    #[inline(always)]
    fn live_item<const LOCATE: bool>(&mut self, i: usize) -> PacketMut<'a> {
        // SAFETY: `i < len <= MAX_BURST` indexes every array; the iterator holds the burst
        // mutably for `'a` and described every packet when it was made (unless `locate`). Each
        // packet's verdict slot and header buffer are distinct, and every index is visited once,
        // so the `&mut` items never overlap; the header pointers satisfy `Burst::push`'s
        // contract (host memory, hence not null). With `locate`, every handle points to
        // metadata laid out as `layout` says (`push_handles_in_place`'s contract), whose header
        // fields satisfy `push`'s.
        unsafe {
            let verdict = &mut *self.verdict.add(i);
            let (hdr, hdr_len, frame_len) = if LOCATE {
                self.layout.read(*self.handle.add(i))
            } else {
                (
                    *self.hdr.add(i),
                    *self.hdr_len.add(i) as usize,
                    *self.frame_len.add(i) as usize,
                )
            };
            std::hint::assert_unchecked(!hdr.is_null());
            PacketMut {
                index: i,
                header: std::slice::from_raw_parts_mut(hdr, hdr_len),
                frame_len,
                rx_port: *self.port.add(i),
                verdict,
                uniform_len: self.uniform_len,
            }
        }
    }

    /// The rest of the walk in two loops, the first prefetching without a bounds check per
    /// packet; with `LIVE` (every packet live, `self.all_live`) no verdict is read. One copy per
    /// combination, so neither choice is made per packet.
    #[inline(always)]
    fn walk<B, F, const LOCATE: bool, const LIVE: bool>(mut self, init: B, mut f: F) -> B
    where
        F: FnMut(B, PacketMut<'a>) -> B,
    {
        let mut acc = init;
        let split = self.len.saturating_sub(PREFETCH_AHEAD).max(self.i);
        // Two packets a turn (one loop test per two), then the odd one.
        let mut i = self.i;
        let pairs_end = i + ((split - i) & !1);
        while i < pairs_end {
            for j in [i, i + 1] {
                self.prefetch::<LOCATE>(j + PREFETCH_AHEAD);
                if LIVE {
                    acc = f(acc, self.live_item::<LOCATE>(j));
                } else if let Some(p) = self.item::<LOCATE>(j) {
                    acc = f(acc, p);
                }
            }
            i += 2;
        }
        for i in i..split {
            self.prefetch::<LOCATE>(i + PREFETCH_AHEAD);
            if LIVE {
                acc = f(acc, self.live_item::<LOCATE>(i));
            } else if let Some(p) = self.item::<LOCATE>(i) {
                acc = f(acc, p);
            }
        }
        for i in split..self.len {
            if LIVE {
                acc = f(acc, self.live_item::<LOCATE>(i));
            } else if let Some(p) = self.item::<LOCATE>(i) {
                acc = f(acc, p);
            }
        }
        acc
    }
}

impl<'a> Iterator for PacketsMut<'a> {
    type Item = PacketMut<'a>;

    #[inline(always)]
    fn next(&mut self) -> Option<PacketMut<'a>> {
        while self.i < self.len {
            let i = self.i;
            self.i += 1;
            let p = if self.locate {
                if i + PREFETCH_AHEAD < self.len {
                    self.prefetch::<true>(i + PREFETCH_AHEAD);
                }
                self.item::<true>(i)
            } else {
                if i + PREFETCH_AHEAD < self.len {
                    self.prefetch::<false>(i + PREFETCH_AHEAD);
                }
                self.item::<false>(i)
            };
            if p.is_some() {
                return p;
            }
        }
        None
    }

    /// The whole walk in two loops, the first prefetching without a bounds check per packet
    /// (`for_each` on a burst's packets runs this instead of `next` per packet); a burst whose
    /// packets were all live when the walk began is walked without reading any verdict.
    #[inline(always)]
    fn fold<B, F>(self, init: B, f: F) -> B
    where
        F: FnMut(B, PacketMut<'a>) -> B,
    {
        match (self.locate, self.all_live) {
            (true, true) => self.walk::<B, F, true, true>(init, f),
            (true, false) => self.walk::<B, F, true, false>(init, f),
            (false, true) => self.walk::<B, F, false, true>(init, f),
            (false, false) => self.walk::<B, F, false, false>(init, f),
        }
    }
}

/// [`Burst::swap_ethernet_addresses`] with the portable swap.
#[inline(never)]
fn swap_macs_portable_walk(burst: &mut Burst, short: DropReason) -> usize {
    burst.packets_mut().fold(0, |dropped, mut p| {
        match p.header().first_chunk_mut::<12>() {
            Some(macs) => {
                swap_macs_portable(macs);
                dropped
            }
            None => {
                p.drop_packet(short);
                dropped + 1
            }
        }
    })
}

/// [`Burst::swap_ethernet_addresses`] with one 16-byte shuffle per header (SSSE3 `pshufb`:
/// bytes 0..6 and 6..12 trade places, 12..16 stay), the whole walk compiled for SSSE3. A
/// header segment shorter than 16 bytes takes [`swap_macs_short`] (a call out of the loop).
///
/// # Safety
/// The CPU must support SSSE3.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
fn swap_macs_ssse3(burst: &mut Burst, short: DropReason) -> usize {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_setr_epi8, _mm_shuffle_epi8, _mm_storeu_si128,
    };
    let order = _mm_setr_epi8(6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 12, 13, 14, 15);
    burst.packets_mut().fold(0, |dropped, mut p| {
        let h = p.header();
        if let Some(x) = h.first_chunk_mut::<16>() {
            let x = std::ptr::from_mut(x).cast::<__m128i>();
            // SAFETY: `x` is 16 bytes of this packet's header, exclusively borrowed; unaligned
            // loads and stores accept any address.
            unsafe { _mm_storeu_si128(x, _mm_shuffle_epi8(_mm_loadu_si128(x), order)) };
            return dropped;
        }
        if swap_macs_short(h) {
            return dropped;
        }
        p.drop_packet(short);
        dropped + 1
    })
}

/// The rare header segment of fewer than 16 bytes in [`swap_macs_ssse3`]: swapped when it
/// holds both addresses (`true`), else left alone (`false`: the caller drops the packet).
#[cfg(target_arch = "x86_64")]
#[cold]
#[inline(never)]
fn swap_macs_short(h: &mut [u8]) -> bool {
    h.first_chunk_mut::<12>().map(swap_macs_portable).is_some()
}

/// Swaps bytes 0..6 and 6..12 of `macs` (the destination and source Ethernet addresses).
#[inline(always)]
fn swap_macs_portable(macs: &mut [u8; 12]) {
    let (dst, src) = macs.split_at_mut(6);
    dst.swap_with_slice(src);
}

/// A batch of packets with one verdict each (see the module docs).
pub struct Burst {
    len: usize,
    cap: usize,
    /// Some header was moved or resized since Rx ([`Burst::prepend`], [`Burst::trim_front`]):
    /// a driver that keeps the header's place in its own metadata (mbuf fields) must write the
    /// burst's values back at Tx.
    reshaped: bool,
    owner: Option<Arc<dyn PacketOwner>>,
    /// The address of `owner`'s data (0 without an owner), taken once when the owner is set:
    /// the per-burst owner checks ([`Burst::adopt`], [`Burst::owned_by`]) compare it with one
    /// load instead of reading the burst's `Arc` and its vtable.
    owner_addr: usize,
    /// Packets `0..described` have their fields in `desc`; the rest are bare handles that
    /// `describe` fills in when a field is first read.
    described: Cell<usize>,
    describe: Option<Describe>,
    /// Where the metadata behind bare handles keeps the header place (see [`HandleLayout`]).
    locate: Option<&'static HandleLayout>,
    /// Frame bytes of every packet in the burst (kept up to date by every change of a frame's
    /// length, so a driver counts transmitted bytes without reading each packet).
    bytes: u64,
    /// Entries `0..uniform_len` of the verdict array all hold `uniform` (set by whole-burst
    /// verdict writes; a per-packet write sets `uniform_len` to 0, nothing known). It describes
    /// the array, not the packets, so it outlives a burst: a burst that receives from one queue
    /// again and again finds its verdicts already written ([`Burst::set_rx_defaults`] skips
    /// the fill), and [`Burst::single_tx_port`] needs no pass over the verdicts while
    /// `uniform_len >= len`. A cell, so that the packets of a walk ([`Burst::packets_mut`]),
    /// each handed its verdict to write, can clear it.
    uniform: Verdict,
    uniform_len: Cell<usize>,
    /// Entries `0..port_fill_len` of the port array all hold `port_fill` (as `uniform` for the
    /// verdicts): a burst received from the same queue as the last one writes no port.
    port_fill: u16,
    port_fill_len: usize,
    handle: [usize; MAX_BURST],
    port: [u16; MAX_BURST],
    verdict: [Verdict; MAX_BURST],
    desc: UnsafeCell<Desc>,
}

// SAFETY: a burst exclusively owns the header bytes its pointers name (no other burst or handle
// refers to a packet while this burst holds it), and its owner is `Send + Sync`; moving the
// whole burst to another thread moves that exclusive ownership with it. (The interior
// mutability of the lazily described fields keeps `Burst` out of `Sync`, so no two threads ever
// reach it at once.)
unsafe impl Send for Burst {}

impl std::fmt::Debug for Burst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Burst")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .field("verdicts", &self.verdicts())
            .finish()
    }
}

impl Burst {
    /// An empty burst able to hold `cap` packets (clamped to 1..=[`MAX_BURST`]).
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            len: 0,
            cap: cap.clamp(1, MAX_BURST),
            reshaped: false,
            owner: None,
            owner_addr: 0,
            described: Cell::new(0),
            describe: None,
            locate: None,
            bytes: 0,
            uniform: Verdict::tx(0),
            uniform_len: Cell::new(0),
            port_fill: 0,
            port_fill_len: 0,
            handle: [0; MAX_BURST],
            port: [0; MAX_BURST],
            verdict: [Verdict::tx(0); MAX_BURST],
            desc: UnsafeCell::new(Desc {
                hdr: [std::ptr::null_mut(); MAX_BURST],
                hdr_len: [0; MAX_BURST],
                headroom: [0; MAX_BURST],
                frame_len: [0; MAX_BURST],
                ring: [PayloadRing::None; MAX_BURST],
                rss: [0; MAX_BURST],
            }),
        }
    }

    /// Maximum number of packets.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Packets in the burst.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Room left.
    #[inline]
    pub fn room(&self) -> usize {
        self.cap - self.len
    }

    /// The per-packet fields, every packet described first.
    #[inline(always)]
    fn d(&self) -> &Desc {
        if self.described.get() < self.len {
            self.describe_rest();
        }
        // SAFETY: every packet is described, so no `describe_rest` writes the fields while this
        // reference lives (it only writes packets past `described`, and only `&mut` methods add
        // packets); writes through `&mut self` cannot overlap a `&self` borrow.
        unsafe { &*self.desc.get() }
    }

    /// The per-packet fields for writing, every packet described first.
    #[inline(always)]
    fn d_mut(&mut self) -> &mut Desc {
        if self.described.get() < self.len {
            self.describe_rest();
        }
        self.desc.get_mut()
    }

    /// Fills in the fields of the packets pushed as bare handles.
    #[cold]
    #[inline(never)]
    fn describe_rest(&self) {
        let (from, to) = (self.described.get(), self.len);
        if let Some(f) = self.describe {
            // SAFETY: no reference to the fields of packets `from..to` exists: `d()` hands out
            // references only once every packet is described, and per-packet accessors return
            // copies. `Burst` is not `Sync`, so no other thread runs this concurrently.
            let d = unsafe { &mut *self.desc.get() };
            f(
                &self.handle[from..to],
                DescribeOut {
                    hdr: &mut d.hdr[from..to],
                    hdr_len: &mut d.hdr_len[from..to],
                    headroom: &mut d.headroom[from..to],
                    frame_len: &mut d.frame_len[from..to],
                    ring: &mut d.ring[from..to],
                    rss: &mut d.rss[from..to],
                },
            );
        }
        self.described.set(to);
    }

    /// True when every packet's fields are filled in (a driver may then read them without the
    /// cost of describing).
    #[inline]
    pub fn is_described(&self) -> bool {
        self.described.get() >= self.len
    }

    // ---- what network functions use --------------------------------------------------------

    /// The header segment of packet `i` (host memory).
    #[inline]
    pub fn header(&self, i: usize) -> &[u8] {
        assert!(i < self.len, "packet {i} of a burst of {}", self.len);
        let d = self.d();
        // SAFETY: `push` (or the driver's describe function) vouched that `hdr[i]` points to
        // `hdr_len[i]` bytes exclusively owned by this packet while the burst holds it (and
        // `prepend`/`trim_front` keep that true); `&self` rules out a `&mut` view for the
        // slice's lifetime.
        unsafe { std::slice::from_raw_parts(d.hdr[i], d.hdr_len[i] as usize) }
    }

    /// The header segment of packet `i`, writable: what network functions rewrite.
    #[inline]
    pub fn header_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.len, "packet {i} of a burst of {}", self.len);
        let d = self.d_mut();
        // SAFETY: as in `header`; `&mut self` proves no other view of any header exists, and
        // the headers of different packets are different buffers, so they never overlap.
        unsafe { std::slice::from_raw_parts_mut(d.hdr[i], d.hdr_len[i] as usize) }
    }

    /// Bytes in the header segment of packet `i`.
    #[inline]
    pub fn header_len(&self, i: usize) -> usize {
        self.d().hdr_len[..self.len][i] as usize
    }

    /// Frame length of packet `i` (header + payload, without FCS).
    #[inline]
    pub fn frame_len(&self, i: usize) -> usize {
        self.d().frame_len[..self.len][i] as usize
    }

    /// Bytes in the payload segment of packet `i`.
    #[inline]
    pub fn payload_len(&self, i: usize) -> usize {
        self.frame_len(i) - self.header_len(i)
    }

    /// Which ring served the payload of packet `i`.
    #[inline]
    pub fn ring(&self, i: usize) -> PayloadRing {
        self.d().ring[..self.len][i]
    }

    /// The NIC's RSS hash of packet `i` (0 when the port does not hash).
    #[inline]
    pub fn rss_hash(&self, i: usize) -> u32 {
        self.d().rss[..self.len][i]
    }

    /// The port packet `i` arrived on (an index in the run's port list).
    #[inline]
    pub fn rx_port(&self, i: usize) -> u16 {
        self.port[..self.len][i]
    }

    /// Sets the port packet `i` counts as arrived on (tests and fuzzing build bursts this way).
    #[inline]
    pub fn set_rx_port(&mut self, i: usize, port: u16) {
        self.port[..self.len][i] = port;
        self.port_fill_len = 0;
    }

    /// The payload segment of packet `i`: bytes in host memory, or a nicmem payload with only
    /// the counted slow path.
    pub fn payload(&self, i: usize) -> PayloadRef<'_> {
        assert!(i < self.len, "packet {i} of a burst of {}", self.len);
        let Some(owner) = self.owner.as_deref() else {
            return PayloadRef::None;
        };
        let len = self.payload_len(i);
        if len == 0 {
            return PayloadRef::None;
        }
        match owner.payload(self.handle[i]) {
            PayloadLoc::None => PayloadRef::None,
            // SAFETY: the owner promises the payload length this packet was pushed with is
            // readable at `ptr` and written by nobody while the packet is held (`PacketOwner`'s
            // contract; `prepend`/`trim_front` change header and frame length alike, never the
            // payload's); the slice borrows the burst.
            PayloadLoc::Host(ptr) => {
                PayloadRef::Host(unsafe { std::slice::from_raw_parts(ptr, len) })
            }
            PayloadLoc::Nic => PayloadRef::Nic(NicPayload::new(owner, self.handle[i], len)),
        }
    }

    /// Overwrites bytes `[offset, offset + src.len())` of the payload segment of packet `i`
    /// (offsets relative to the payload's start, i.e. frame offset minus
    /// [`Burst::header_len`]): a copy into a host payload, a counted CPU write into a nicmem
    /// payload ([`PacketOwner::write_payload`]). The slow path for the rare packet whose
    /// headers reach past the header segment (the quoted headers of an ICMP error); errors when
    /// the range leaves the payload or the payload's memory cannot be written.
    pub fn write_payload_slow(
        &mut self,
        i: usize,
        offset: usize,
        src: &[u8],
    ) -> Result<(), AccessError> {
        assert!(i < self.len, "packet {i} of a burst of {}", self.len);
        let len = self.payload_len(i);
        if offset.checked_add(src.len()).is_none_or(|e| e > len) {
            return Err(AccessError::Oversized {
                len: src.len().min(u32::MAX as usize) as u32,
                max: len.saturating_sub(offset) as u32,
            });
        }
        match self.owner.as_deref() {
            Some(owner) if !src.is_empty() => owner.write_payload(self.handle[i], offset, src),
            Some(_) => Ok(()),
            None => Err(AccessError::ZeroLength),
        }
    }

    /// Copies the whole frame of packet `i` into `out` (cleared first). A nicmem payload is read
    /// through the counted slow path: for tests, captures and debugging, never the data path.
    pub fn copy_frame(&self, i: usize, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(self.header(i));
        let start = out.len();
        out.resize(self.frame_len(i).max(start), 0);
        match self.payload(i) {
            PayloadRef::None => {}
            PayloadRef::Host(b) => {
                let n = b.len().min(out.len() - start);
                out[start..start + n].copy_from_slice(&b[..n]);
            }
            PayloadRef::Nic(n) => {
                let end = out.len();
                // Cannot fail: the range is within the payload's own length.
                let _ = n.read_slow(0, &mut out[start..end]);
            }
        }
    }

    /// The whole frame of packet `i` as a vector (see [`Burst::copy_frame`]).
    pub fn frame(&self, i: usize) -> Vec<u8> {
        let mut v = Vec::new();
        self.copy_frame(i, &mut v);
        v
    }

    /// Verdict of packet `i`.
    #[inline]
    pub fn verdict(&self, i: usize) -> Verdict {
        self.verdict[..self.len][i]
    }

    /// Sets the verdict of packet `i`.
    #[inline]
    pub fn set_verdict(&mut self, i: usize, v: Verdict) {
        self.verdict[..self.len][i] = v;
        self.uniform_len.set(0);
    }

    /// Marks packet `i` dropped for `reason`.
    #[inline]
    pub fn drop_packet(&mut self, i: usize, reason: DropReason) {
        self.set_verdict(i, Verdict::drop(reason));
    }

    /// True unless packet `i` is already dropped (network functions skip dropped packets).
    #[inline]
    pub fn is_live(&self, i: usize) -> bool {
        !self.verdict(i).is_drop()
    }

    /// Packets whose verdict is not a drop (no pass over the verdicts while the whole burst has
    /// one verdict, as it has from Rx until a network function sets one per packet).
    #[inline]
    pub fn live_count(&self) -> usize {
        if let Some(u) = self.whole_verdict() {
            return if u.is_drop() { 0 } else { self.len };
        }
        self.verdicts().iter().filter(|v| !v.is_drop()).count()
    }

    /// Every verdict, in packet order.
    #[inline]
    pub fn verdicts(&self) -> &[Verdict] {
        &self.verdict[..self.len]
    }

    /// Sets every verdict to `v`.
    #[inline]
    pub fn set_all_verdicts(&mut self, v: Verdict) {
        if self.whole_verdict() == Some(v) {
            return;
        }
        self.verdict[..self.len].fill(v);
        self.uniform = v;
        self.uniform_len.set(self.len);
    }

    /// The verdict of every packet, when one verdict is known to cover the whole burst (and
    /// the burst is not empty).
    #[inline(always)]
    fn whole_verdict(&self) -> Option<Verdict> {
        (self.len > 0 && self.uniform_len.get() >= self.len).then_some(self.uniform)
    }

    /// The port every packet goes to, if all verdicts are `Tx` of one port (the common case the
    /// run loop sends without sorting).
    #[inline]
    pub fn single_tx_port(&self) -> Option<u16> {
        if let Some(u) = self.whole_verdict() {
            return u.tx_port();
        }
        let v = self.verdicts();
        let first = *v.first()?;
        let p = first.tx_port()?;
        // No early exit: a whole-burst compare the compiler turns into a few vector compares.
        let same = v
            .iter()
            .fold(true, |all, &x| all & (x.raw() == first.raw()));
        same.then_some(p)
    }

    /// The live packets (verdict not a drop) one by one, each with its header, frame length and
    /// verdict, prefetching the headers a few packets ahead: the fast way for a network
    /// function to walk a burst once (one check per burst, none per packet). A walk that sets
    /// no verdict leaves the burst's single verdict known (no pass over the verdicts at Tx).
    #[inline]
    pub fn packets_mut(&mut self) -> PacketsMut<'_> {
        let len = self.len;
        let all_live = self.whole_verdict().is_some_and(|v| !v.is_drop());
        // Bare handles with a known metadata layout are read in the same pass; anything else is
        // described first.
        let locate = if self.is_described() {
            None
        } else {
            self.locate
        };
        let d = if locate.is_some() {
            self.desc.get_mut()
        } else {
            self.d_mut()
        };
        let (hdr, hdr_len, frame_len) = (d.hdr.as_ptr(), d.hdr_len.as_ptr(), d.frame_len.as_ptr());
        PacketsMut {
            i: 0,
            len,
            locate: locate.is_some(),
            layout: locate.copied().unwrap_or(HandleLayout::NONE),
            all_live,
            handle: self.handle.as_ptr(),
            hdr,
            hdr_len,
            frame_len,
            port: self.port.as_ptr(),
            verdict: self.verdict.as_mut_ptr(),
            uniform_len: &self.uniform_len,
            _burst: std::marker::PhantomData,
        }
    }

    /// Swaps the Ethernet destination and source addresses (header bytes 0..6 and 6..12) of
    /// every live packet in one walk with the headers prefetched ahead (testpmd's `macswap`);
    /// a live packet whose header segment is shorter than 12 bytes is dropped for `short`
    /// instead. Returns how many were dropped.
    ///
    /// Why a burst operation and not a per-packet helper: on x86-64 one 16-byte shuffle (SSSE3
    /// `pshufb`, which DPDK's own x86 builds require as part of SSE4.2) swaps both addresses
    /// with one load and one store where the portable swap takes four loads and four stores.
    /// The CPU is asked once per burst (a cached flag) and the whole walk is compiled for
    /// SSSE3; a CPU without it takes the portable swap. Network functions stay free of
    /// `unsafe`.
    pub fn swap_ethernet_addresses(&mut self, short: DropReason) -> usize {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("ssse3") {
            // SAFETY: the CPU has SSSE3 (checked just above).
            return unsafe { swap_macs_ssse3(self, short) };
        }
        swap_macs_portable_walk(self, short)
    }

    /// Hints the CPU to fetch the header of packet `i` into cache (no effect past the end).
    /// Network functions call it a few packets ahead of the one they work on.
    #[inline]
    pub fn prefetch(&self, i: usize) {
        if i < self.len {
            prefetch_read(self.d().hdr[i]);
        }
    }

    /// Prefetches the headers of the first [`PREFETCH_AHEAD`] packets: what a network function
    /// calls before a walk that prefetches packet `i + PREFETCH_AHEAD` while it works on `i`.
    #[inline]
    pub fn prefetch_first(&self) {
        for i in 0..PREFETCH_AHEAD {
            self.prefetch(i);
        }
    }

    /// Grows the header segment of packet `i` by `n` bytes at its front, into the buffer's
    /// headroom (encapsulation: an outer IPv4 header, a VLAN tag), and returns the new header.
    /// The frame grows by `n`; the bytes that were there stay at offset `n`. `None` when the
    /// headroom is smaller than `n`.
    pub fn prepend(&mut self, i: usize, n: usize) -> Option<&mut [u8]> {
        assert!(i < self.len, "packet {i} of a burst of {}", self.len);
        let d = self.d_mut();
        let room = d.headroom[i] as usize;
        let new_len = d.hdr_len[i] as usize + n;
        if n > room || new_len > u16::MAX as usize {
            return None;
        }
        // SAFETY: the driver vouched (in `push` or its describe function) that `headroom[i]`
        // writable bytes before `hdr[i]` belong to this packet's buffer, and `n <= headroom[i]`.
        d.hdr[i] = unsafe { d.hdr[i].sub(n) };
        d.headroom[i] = (room - n) as u16;
        d.hdr_len[i] = new_len as u16;
        d.frame_len[i] += n as u32;
        self.bytes += n as u64;
        self.reshaped = true;
        Some(self.header_mut(i))
    }

    /// Removes the first `n` bytes of packet `i`'s header segment (decapsulation); they become
    /// headroom. `false` (and no change) when the header segment is shorter than `n`.
    pub fn trim_front(&mut self, i: usize, n: usize) -> bool {
        assert!(i < self.len, "packet {i} of a burst of {}", self.len);
        let d = self.d_mut();
        let len = d.hdr_len[i] as usize;
        let room = d.headroom[i] as usize + n;
        if n > len || room > u16::MAX as usize {
            return false;
        }
        // SAFETY: `n <= hdr_len[i]`, so the pointer stays inside the header segment.
        d.hdr[i] = unsafe { d.hdr[i].add(n) };
        d.headroom[i] = room as u16;
        d.hdr_len[i] = (len - n) as u16;
        d.frame_len[i] -= n as u32;
        self.bytes -= n as u64;
        self.reshaped = true;
        true
    }

    // ---- what drivers use -------------------------------------------------------------------

    /// The owner of the burst's packets, if any packet was ever pushed.
    #[inline]
    pub fn owner(&self) -> Option<&Arc<dyn PacketOwner>> {
        self.owner.as_ref()
    }

    /// True when the burst's packets belong to `owner` (or the burst holds none).
    #[inline]
    pub fn owned_by(&self, owner: &impl OwnerArc) -> bool {
        self.len == 0 || self.owner_addr == owner.owner_addr()
    }

    /// Makes `owner` the owner of the packets about to be pushed. Cheap when it already is (no
    /// reference-count traffic in a steady state). Returns `false`, changing nothing, when the
    /// burst still holds packets of another owner.
    #[inline]
    pub fn adopt(&mut self, owner: &impl OwnerArc) -> bool {
        let addr = owner.owner_addr();
        if self.owner_addr == addr {
            return true;
        }
        if self.len > 0 {
            return false;
        }
        self.owner = Some(owner.to_dyn());
        self.owner_addr = addr;
        self.describe = None;
        self.locate = None;
        true
    }

    /// Appends a received packet with verdict `Tx(port)` and receive port `port` (drivers set
    /// both for a whole burst with [`Burst::set_rx_defaults`] afterwards). Returns `false` when
    /// the burst is full.
    ///
    /// # Safety
    /// The caller must have made the packet's owner the burst's owner ([`Burst::adopt`]), and
    /// `p.hdr` must point to `p.hdr_len` bytes of host memory, with `p.headroom` writable bytes
    /// before them in the same buffer, exclusively owned by this packet until the burst gives it
    /// back (to the owner or a queue); `p.handle` must be a live handle of that owner.
    #[inline]
    pub unsafe fn push(&mut self, p: &RxPacket) -> bool {
        let mut w = self.rx_writer();
        // SAFETY: the caller's contract is the writer's.
        let pushed = unsafe { w.push(p) };
        w.finish();
        pushed
    }

    /// Appends bare handles (as many as fit; returns how many), to be described by `describe`
    /// the first time a packet's fields are read (see the module docs). `bytes` is the frame
    /// bytes of the handles taken (the driver read their lengths when it counted them).
    ///
    /// # Safety
    /// The caller must have made the handles' owner the burst's owner ([`Burst::adopt`]); each
    /// handle must be a live handle of that owner, exclusively held by the burst from now on;
    /// `describe` must fill in, for any such handle, fields that satisfy [`Burst::push`]'s
    /// contract; and `bytes` must be the sum of their frame lengths. One burst takes one
    /// `describe` function: the caller must not mix two.
    #[inline]
    pub unsafe fn push_handles(
        &mut self,
        handles: &[usize],
        describe: Describe,
        bytes: u64,
    ) -> usize {
        let n = handles.len().min(self.room());
        let at = self.len;
        self.handle[at..at + n].copy_from_slice(&handles[..n]);
        self.describe = Some(describe);
        self.len = at + n;
        self.bytes += bytes;
        n
    }

    /// Appends the `n` handles a driver wrote itself at [`Burst::handles_mut_ptr`]`.add(len)`
    /// (DPDK's `rte_eth_rx_burst` receives straight into the burst), to be described by
    /// `describe` as in [`Burst::push_handles`]; takes all `n` (the caller kept within the room).
    ///
    /// # Safety
    /// As [`Burst::push_handles`], for the `n` handles written after the burst's last packet
    /// (`n` at most the room) with `bytes` frame bytes in all; with `locate`, every handle of
    /// the burst must point to metadata laid out as it says.
    #[inline]
    pub unsafe fn push_handles_in_place(
        &mut self,
        n: usize,
        describe: Describe,
        locate: Option<&'static HandleLayout>,
        bytes: u64,
    ) {
        debug_assert!(n <= self.room());
        self.describe = Some(describe);
        self.locate = locate;
        // The contract bounds `n` by the room.
        self.len += n;
        self.bytes += bytes;
    }

    /// Frame bytes of every packet of the burst (header and payload, without FCS).
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// A writer that appends received packets through raw array pointers (a driver's receive
    /// loop keeps the burst's state in registers instead of reloading it after every write
    /// into a packet buffer). [`RxWriter::finish`] sets the burst's length.
    #[inline(always)]
    pub fn rx_writer(&mut self) -> RxWriter<'_> {
        let d = self.desc.get_mut();
        RxWriter {
            n: self.len,
            cap: self.cap,
            handle: self.handle.as_mut_ptr(),
            hdr: d.hdr.as_mut_ptr(),
            hdr_len: d.hdr_len.as_mut_ptr(),
            headroom: d.headroom.as_mut_ptr(),
            frame_len: d.frame_len.as_mut_ptr(),
            ring: d.ring.as_mut_ptr(),
            rss: d.rss.as_mut_ptr(),
            len: &mut self.len,
            described: &self.described,
            bytes: &mut self.bytes,
            added: 0,
        }
    }

    /// Sets the receive port and the initial verdict of packets `from..len`: a few compares when
    /// the arrays already hold them (a burst that receives from one queue), else one pass over
    /// two small arrays.
    #[inline]
    pub fn set_rx_defaults(&mut self, from: usize, port: u16, verdict: Verdict) {
        // A burst received whole from the same queue as the last one: both arrays already hold
        // these values (a few compares, no write).
        let to = self.len;
        if from == 0
            && self.port_fill == port
            && self.uniform == verdict
            && self.port_fill_len.min(self.uniform_len.get()) >= to
        {
            return;
        }
        self.fill_rx_defaults(from, port, verdict);
    }

    /// [`Burst::set_rx_defaults`] when an array must be written.
    #[inline(never)]
    fn fill_rx_defaults(&mut self, from: usize, port: u16, verdict: Verdict) {
        let to = self.len;
        if from == 0 {
            // The common case, a burst received whole. An array that already holds the value
            // far enough (the last burst came from the same queue) is not written at all;
            // otherwise it is written in whole groups of 8 (one 16-byte store each, no
            // remainder loop). Entries past `to` hold nothing (nothing reads past the length),
            // and the rounded end stays within the arrays (`to <= MAX_BURST`, a multiple of 8).
            let end = (to + 7) & !7;
            if self.port_fill != port || self.port_fill_len < to {
                self.port[..end].fill(port);
                self.port_fill = port;
                self.port_fill_len = end;
            }
            if self.uniform != verdict || self.uniform_len.get() < to {
                self.verdict[..end].fill(verdict);
                self.uniform = verdict;
                self.uniform_len.set(end);
            }
        } else if from < to {
            self.port[from..to].fill(port);
            self.verdict[from..to].fill(verdict);
            // A prefix of one value that reached `from` now reaches `to`; any other is cut
            // where the new packets start.
            self.port_fill_len = if self.port_fill == port && self.port_fill_len >= from {
                self.port_fill_len.max(to)
            } else {
                self.port_fill_len.min(from)
            };
            let n = self.uniform_len.get();
            self.uniform_len
                .set(if self.uniform == verdict && n >= from {
                    n.max(to)
                } else {
                    n.min(from)
                });
        }
    }

    /// The packets' handles, in order (drivers transmit and free by handle).
    #[inline]
    pub fn handles(&self) -> &[usize] {
        &self.handle[..self.len]
    }

    /// The burst's arrays, read-only, for a driver's transmit loop (one bounds check per burst
    /// instead of one per field and packet). Describes every packet first.
    #[inline]
    pub fn tx_view(&self) -> TxView<'_> {
        let n = self.len;
        let d = self.d();
        TxView {
            handle: &self.handle[..n],
            hdr: &d.hdr[..n],
            hdr_len: &d.hdr_len[..n],
            headroom: &d.headroom[..n],
            frame_len: &d.frame_len[..n],
            ring: &d.ring[..n],
        }
    }

    /// The handle array, for a driver's transmit call that takes a mutable array (DPDK's
    /// `rte_eth_tx_burst`). Writing through the pointer is the caller's business.
    ///
    /// # Safety
    /// The caller must not write through the pointer anything but handles of this burst's own
    /// packets, and must not use it after the burst changes.
    #[inline]
    pub unsafe fn handles_mut_ptr(&mut self) -> *mut usize {
        self.handle.as_mut_ptr()
    }

    /// Where header `i` starts and how many bytes of headroom are before it (drivers rebuild
    /// their descriptors from these when [`Burst::reshaped`] says a header moved).
    #[inline]
    pub fn header_place(&self, i: usize) -> (*mut u8, usize) {
        let d = self.d();
        (d.hdr[..self.len][i], d.headroom[i] as usize)
    }

    /// Headroom before header `i`.
    #[inline]
    pub fn headroom(&self, i: usize) -> usize {
        self.d().headroom[..self.len][i] as usize
    }

    /// True when some header was moved or resized since Rx (see [`Burst::prepend`]).
    #[inline]
    pub fn reshaped(&self) -> bool {
        self.reshaped
    }

    /// Forgets every packet without returning it: the caller (a driver) has taken them back.
    #[inline]
    pub fn disown(&mut self) {
        self.len = 0;
        self.bytes = 0;
        self.described.set(0);
        self.reshaped = false;
    }

    /// Moves packet `i` to the end of `dst` (same owner; the run loop sorts packets by verdict
    /// this way). Packet `i` stays in `self` as a stale copy the caller must [`Burst::disown`]
    /// with the rest. Returns `false` when `dst` is full or has another owner.
    #[inline]
    pub fn move_to(&self, i: usize, dst: &mut Burst) -> bool {
        assert!(i < self.len, "packet {i} of a burst of {}", self.len);
        let Some(owner) = self.owner.as_ref() else {
            return false;
        };
        if dst.len >= dst.cap || !dst.adopt(owner) {
            return false;
        }
        let s = self.d();
        let p = RxPacket {
            handle: self.handle[i],
            hdr: s.hdr[i],
            hdr_len: s.hdr_len[i],
            headroom: s.headroom[i],
            frame_len: s.frame_len[i],
            ring: s.ring[i],
            rss_hash: s.rss[i],
        };
        let j = dst.len;
        // SAFETY: the packet moves from `self` (same owner) with the fields it was pushed or
        // described with; the caller disowns it in `self`.
        unsafe { dst.push(&p) };
        dst.port[j] = self.port[i];
        dst.verdict[j] = self.verdict[i];
        dst.uniform_len.set(dst.uniform_len.get().min(j));
        dst.port_fill_len = dst.port_fill_len.min(j);
        dst.reshaped |= self.reshaped;
        true
    }

    /// Takes packet `i` out of the burst: it moves to the end of `dst` (as [`Burst::move_to`])
    /// and the packets after it move up one place, so the burst keeps its order and no stale
    /// copy. For network functions that hold packets back (fragments waiting for their first);
    /// the packets of `dst` then belong to `dst`. Returns `false`, changing nothing, when `dst`
    /// is full or holds packets of another owner.
    pub fn remove_to(&mut self, i: usize, dst: &mut Burst) -> bool {
        if !self.move_to(i, dst) {
            return false;
        }
        let n = self.len;
        let d = self.d_mut();
        let frame = d.frame_len[i];
        d.hdr.copy_within(i + 1..n, i);
        d.hdr_len.copy_within(i + 1..n, i);
        d.headroom.copy_within(i + 1..n, i);
        d.frame_len.copy_within(i + 1..n, i);
        d.ring.copy_within(i + 1..n, i);
        d.rss.copy_within(i + 1..n, i);
        self.handle.copy_within(i + 1..n, i);
        self.port.copy_within(i + 1..n, i);
        self.verdict.copy_within(i + 1..n, i);
        self.uniform_len.set(self.uniform_len.get().min(i));
        self.port_fill_len = self.port_fill_len.min(i);
        self.len = n - 1;
        self.described.set(self.len);
        self.bytes -= u64::from(frame);
        true
    }

    /// Returns every packet to its owner (the slow path; the run loop frees through its queues).
    pub fn clear(&mut self) {
        if self.len > 0
            && let Some(o) = &self.owner
        {
            o.free(&self.handle[..self.len]);
        }
        self.disown();
    }
}

impl Default for Burst {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_BURST)
    }
}

impl Drop for Burst {
    fn drop(&mut self) {
        self.clear();
    }
}

/// A shared packet owner as the owner checks of a burst take it ([`Burst::adopt`],
/// [`Burst::owned_by`]): an `Arc<dyn PacketOwner>`, or an `Arc` of a driver's own owner type,
/// whose data address the compiler finds without reading the vtable (the DPDK driver's checks
/// run twice a burst).
pub trait OwnerArc {
    /// The address of the owner's data: what two owners compare by (never 0).
    fn owner_addr(&self) -> usize;
    /// The owner as a burst keeps it.
    fn to_dyn(&self) -> Arc<dyn PacketOwner>;
}

impl OwnerArc for Arc<dyn PacketOwner> {
    #[inline(always)]
    fn owner_addr(&self) -> usize {
        Arc::as_ptr(self).cast::<()>() as usize
    }

    fn to_dyn(&self) -> Arc<dyn PacketOwner> {
        self.clone()
    }
}

impl<O: PacketOwner + 'static> OwnerArc for Arc<O> {
    #[inline(always)]
    fn owner_addr(&self) -> usize {
        Arc::as_ptr(self).cast::<()>() as usize
    }

    fn to_dyn(&self) -> Arc<dyn PacketOwner> {
        self.clone()
    }
}

/// Prefetches the cache line at `p` for reading (a hint: never faults, whatever `p` is).
#[inline(always)]
fn prefetch_read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults, even on an invalid address; SSE is part of
    // the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::DatapathMode;
    use crate::testkit::PacketFactory;

    #[test]
    fn push_stops_at_capacity_and_defaults_apply() {
        let f = PacketFactory::new(DatapathMode::Host, 64, 1514, 64);
        let mut b = Burst::with_capacity(4);
        for _ in 0..4 {
            assert!(f.push(&mut b, &[1u8; 60]));
        }
        assert!(!f.push(&mut b, &[1u8; 60]), "a full burst refuses");
        b.set_rx_defaults(0, 2, Verdict::tx(1));
        assert_eq!(b.len(), 4);
        assert!((0..4).all(|i| b.verdict(i) == Verdict::tx(1) && b.rx_port(i) == 2));
        assert_eq!(b.single_tx_port(), Some(1));
        drop(b);
        assert_eq!(f.in_use(), 0, "dropping a burst returns its packets");
    }

    #[test]
    fn single_tx_port_follows_verdicts() {
        let f = PacketFactory::new(DatapathMode::Split, 64, 1514, 64);
        let mut b = f.burst(&vec![vec![0u8; 200]; 4]);
        b.set_all_verdicts(Verdict::tx(0));
        assert_eq!(b.single_tx_port(), Some(0));
        b.set_verdict(3, Verdict::tx(1));
        assert_eq!(b.single_tx_port(), None);
        b.set_verdict(3, Verdict::tx(0));
        assert_eq!(b.single_tx_port(), Some(0));
        b.drop_packet(1, DropReason::MALFORMED);
        assert_eq!(b.single_tx_port(), None);
        assert!(!b.is_live(1));
        let mut other = Burst::with_capacity(8);
        assert!(b.move_to(0, &mut other));
        assert_eq!(other.len(), 1);
        assert_eq!(other.frame(0), vec![0u8; 200]);
        // The moved packet now belongs to `other`: forget it in `b` before `b` frees the rest.
        other.clear();
        let rest: Vec<usize> = b.handles()[1..].to_vec();
        b.disown();
        f.free_handles(&rest);
        assert_eq!(f.in_use(), 0);
    }

    #[test]
    fn single_tx_port_sees_every_way_a_verdict_changes() {
        let f = PacketFactory::new(DatapathMode::Host, 64, 1514, 16);
        let mut b = Burst::with_capacity(8);
        for _ in 0..3 {
            assert!(f.push(&mut b, &[1u8; 60]));
        }
        b.set_rx_defaults(0, 0, Verdict::tx(1));
        assert_eq!(b.single_tx_port(), Some(1));
        // A verdict written through the packet walk.
        if let Some(mut p) = b.packets_mut().nth(2) {
            p.set_verdict(Verdict::tx(0));
        }
        assert_eq!(b.single_tx_port(), None);
        b.set_all_verdicts(Verdict::tx(1));
        assert_eq!(b.single_tx_port(), Some(1));
        // Packets appended later count only once their defaults are set, and then only when
        // those agree.
        assert!(f.push(&mut b, &[1u8; 60]));
        b.set_rx_defaults(3, 1, Verdict::tx(0));
        assert_eq!(b.single_tx_port(), None);
        b.set_verdict(3, Verdict::tx(1));
        assert_eq!(b.single_tx_port(), Some(1));
        assert!(f.push(&mut b, &[1u8; 60]));
        b.set_rx_defaults(4, 1, Verdict::tx(1));
        assert_eq!(b.single_tx_port(), Some(1));
        b.drop_packet(0, DropReason::POLICY);
        assert_eq!(b.single_tx_port(), None);
        drop(b);
        assert_eq!(f.in_use(), 0);
    }

    #[test]
    fn walks_and_live_count_agree_with_the_verdicts() {
        let f = PacketFactory::new(DatapathMode::Host, 64, 1514, 16);
        let frames: Vec<Vec<u8>> = (0..7u8).map(|k| vec![k; 60]).collect();
        let mut b = f.burst(&frames);
        b.set_all_verdicts(Verdict::tx(1));
        assert_eq!(b.live_count(), 7);
        // One verdict for the whole burst: the walk reads none and visits every packet.
        let seen: Vec<usize> = b.packets_mut().map(|p| p.index()).collect();
        assert_eq!(seen, (0..7).collect::<Vec<_>>());
        let mut folded = Vec::new();
        b.packets_mut().for_each(|mut p| {
            folded.push(p.header()[0]);
            if p.index() % 3 == 0 {
                p.drop_packet(DropReason::POLICY);
            }
        });
        assert_eq!(folded, (0..7u8).collect::<Vec<_>>());
        assert_eq!(b.live_count(), 4, "packets 0, 3 and 6 dropped");
        // Per-packet verdicts now: dropped packets are skipped.
        let mut live = Vec::new();
        b.packets_mut().for_each(|p| live.push(p.index()));
        assert_eq!(live, vec![1, 2, 4, 5]);
        b.set_all_verdicts(Verdict::drop(DropReason::POLICY));
        assert_eq!(b.live_count(), 0);
        assert_eq!(b.packets_mut().count(), 0);
        drop(b);
        assert_eq!(f.in_use(), 0);
    }

    /// Both swaps (SSSE3 where the CPU has it, and the portable one) swap bytes 0..6 and 6..12
    /// of every live header of 12 bytes or more, leave the rest of the frame alone, drop the
    /// shorter ones for the reason given, and skip packets already dropped.
    #[test]
    fn ethernet_address_swaps_agree() {
        let lens = [60usize, 8, 12, 14, 16, 60, 11, 15, 64, 17];
        let frames: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|i| (i * 7 + k * 31) as u8).collect())
            .collect();
        type Swap = fn(&mut Burst, DropReason) -> usize;
        let mut swaps: Vec<(&str, Swap)> = vec![("portable", swap_macs_portable_walk)];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("ssse3") {
            // SAFETY: the CPU has SSSE3 (checked just above).
            swaps.push(("ssse3", |b, r| unsafe { swap_macs_ssse3(b, r) }));
        }
        swaps.push(("burst", Burst::swap_ethernet_addresses));
        for (name, swap) in swaps {
            for mode in DatapathMode::ALL {
                let f = PacketFactory::new(mode, 64, 1514, 16);
                let mut b = f.burst(&frames);
                b.drop_packet(5, DropReason::POLICY);
                assert_eq!(swap(&mut b, DropReason::TRUNCATED), 2, "{name} {mode}");
                for (i, frame) in frames.iter().enumerate() {
                    let (want, verdict) = match i {
                        5 => (frame.clone(), Verdict::drop(DropReason::POLICY)),
                        1 | 6 => (frame.clone(), Verdict::drop(DropReason::TRUNCATED)),
                        _ => {
                            let mut w = frame.clone();
                            w[..6].copy_from_slice(&frame[6..12]);
                            w[6..12].copy_from_slice(&frame[..6]);
                            (w, Verdict::tx(0))
                        }
                    };
                    assert_eq!(b.frame(i), want, "{name} {mode} packet {i}");
                    assert_eq!(b.verdict(i), verdict, "{name} {mode} packet {i}");
                }
            }
        }
    }

    #[test]
    fn remove_to_keeps_order_and_ownership() {
        let f = PacketFactory::new(DatapathMode::NicPayload, 64, 1514, 16);
        let frames: Vec<Vec<u8>> = (0..5u8).map(|k| vec![k; 100 + usize::from(k)]).collect();
        let mut b = f.burst(&frames);
        b.set_verdict(3, Verdict::tx(2));
        let bytes = b.bytes();
        let mut held = Burst::with_capacity(4);
        assert!(b.remove_to(1, &mut held));
        assert!(b.remove_to(2, &mut held), "the old packet 3 is now at 2");
        assert_eq!(b.len(), 3);
        assert_eq!(b.bytes(), bytes - 101 - 103);
        let left: Vec<Vec<u8>> = (0..3).map(|i| b.frame(i)).collect();
        assert_eq!(
            left,
            vec![frames[0].clone(), frames[2].clone(), frames[4].clone()]
        );
        assert_eq!(held.frame(0), frames[1]);
        assert_eq!(held.frame(1), frames[3]);
        assert_eq!(
            held.verdict(1),
            Verdict::tx(2),
            "the verdict travels with the packet"
        );
        // Back into the burst, at its end.
        assert!(held.remove_to(0, &mut b));
        assert_eq!(b.frame(3), frames[1]);
        drop(b);
        drop(held);
        assert_eq!(f.in_use(), 0, "no packet lost or freed twice");
    }

    #[test]
    fn payload_writes_reach_the_frame_in_every_mode() {
        for mode in DatapathMode::ALL {
            let f = PacketFactory::new(mode, 64, 1514, 4);
            let frame: Vec<u8> = (0..200u8).collect();
            let mut b = f.burst(std::slice::from_ref(&frame));
            let hl = b.header_len(0);
            let mut want = frame.clone();
            if mode.splits() {
                b.write_payload_slow(0, 6, b"abc").unwrap();
                want[hl + 6..hl + 9].copy_from_slice(b"abc");
            }
            assert_eq!(b.frame(0), want, "{mode}");
            let past = b.payload_len(0).saturating_sub(1);
            assert!(b.write_payload_slow(0, past, b"xy").is_err(), "{mode}");
            assert_eq!(b.frame(0), want, "{mode}: a refused write changes nothing");
        }
    }

    #[test]
    fn prepend_and_trim_use_the_headroom() {
        for mode in DatapathMode::ALL {
            let f = PacketFactory::new(mode, 64, 1514, 8);
            let frame: Vec<u8> = (0..150u8).collect();
            let mut b = f.burst(std::slice::from_ref(&frame));
            let room = b.headroom(0);
            assert!(room >= 20, "{mode}: headroom {room}");
            let h = b.prepend(0, 20).expect("room for an outer header");
            h[..20].fill(0xee);
            assert_eq!(b.frame_len(0), 170);
            let mut want = vec![0xee; 20];
            want.extend_from_slice(&frame);
            assert_eq!(b.frame(0), want, "{mode}");
            assert!(b.prepend(0, room).is_none(), "{mode}: past the headroom");
            assert!(b.trim_front(0, 20));
            assert_eq!(b.frame(0), frame, "{mode}");
            assert!(b.reshaped());
        }
    }
}
