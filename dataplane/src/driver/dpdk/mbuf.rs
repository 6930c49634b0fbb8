//! Mbufs as packets: a packet's handle in a [`crate::Burst`] is its `rte_mbuf*`, the first segment
//! is the header segment and the second, if any, the payload segment (host memory, or nicmem:
//! then no byte view exists). [`PacketOwner`] for mbufs lives here, with where a payload segment
//! lives and the counted nicmem read.
//!
//! Every field of an mbuf the driver reads or writes goes through [`Mbuf`], one small accessor
//! per field (capsule's rule): the `unsafe` of dereferencing an `rte_mbuf*` is in this file, and
//! nowhere else in the driver. Fields are read as Rust fields (no FFI call per packet);
//! `dpdk-sys` asserts the `rte_mbuf` offsets at compile time.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use dpdk_sys::{self as sys, rte_mbuf, rte_mempool};
use nicmem::AccessError;

use crate::packet::{PacketOwner, PayloadLoc};

/// Where the bytes of a packet's second (payload) segment live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadMem {
    /// Host memory: NFs may read it.
    Host,
    /// Emulated nicmem: host memory from a modeled [`nicmem::NicMem`], treated as nicmem (no
    /// byte view; reads are counted).
    EmulatedNic,
    /// Real on-NIC memory (mlx5 MEMIC): the mbuf's address is a device-memory offset, not a host
    /// pointer.
    DeviceNic,
}

/// One mbuf segment the driver holds (received, allocated, or handed over by a burst): the only
/// way the driver reads or writes mbuf fields. A plain pointer underneath (`Copy`, one word), so
/// the receive and transmit loops pay nothing for it.
///
/// The invariant, established by the `unsafe` constructors: the segment is a live mbuf that the
/// thread using the value holds exclusively (no other thread and no DPDK call touches its
/// fields meanwhile) for as long as the value is used. Every accessor relies on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct Mbuf(NonNull<rte_mbuf>);

impl Mbuf {
    /// The segment at `m`, or `None` for a null pointer.
    ///
    /// # Safety
    /// A non-null `m` must satisfy the type's invariant for as long as the value is used.
    #[inline(always)]
    pub(crate) unsafe fn from_ptr(m: *mut rte_mbuf) -> Option<Mbuf> {
        NonNull::new(m).map(Mbuf)
    }

    /// The packet behind a burst handle (an `rte_mbuf*` as `usize`).
    ///
    /// # Safety
    /// `h` must be a handle of a chain this driver issued and the caller's burst holds.
    #[inline(always)]
    pub(crate) unsafe fn from_handle(h: usize) -> Mbuf {
        debug_assert!(h != 0, "a null mbuf handle");
        // SAFETY: handles are never null (they are received or allocated mbufs).
        Mbuf(unsafe { NonNull::new_unchecked(h as *mut rte_mbuf) })
    }

    /// The segments at `ptrs` (what `rte_eth_rx_burst` or a bulk allocation wrote).
    ///
    /// # Safety
    /// Every pointer must be non-null and satisfy the type's invariant while the slice is used.
    #[inline(always)]
    pub(crate) unsafe fn slice(ptrs: &[*mut rte_mbuf]) -> &[Mbuf] {
        // SAFETY: `Mbuf` is a transparent `NonNull<rte_mbuf>`, which has the layout of a
        // `*mut rte_mbuf`; the caller vouches that none is null.
        unsafe { std::slice::from_raw_parts(ptrs.as_ptr().cast::<Mbuf>(), ptrs.len()) }
    }

    /// The raw pointer, for DPDK calls.
    #[inline(always)]
    pub(crate) fn as_ptr(self) -> *mut rte_mbuf {
        self.0.as_ptr()
    }

    /// The pointer as a burst handle.
    #[inline(always)]
    pub(crate) fn handle(self) -> usize {
        self.0.as_ptr() as usize
    }

    #[inline(always)]
    fn r(&self) -> &rte_mbuf {
        // SAFETY: the type's invariant: a live mbuf nobody else touches while this is used.
        unsafe { self.0.as_ref() }
    }

    #[inline(always)]
    fn w(&mut self) -> &mut rte_mbuf {
        // SAFETY: the type's invariant: a live mbuf this thread holds exclusively.
        unsafe { self.0.as_mut() }
    }

    /// Bytes of the whole chain (`pkt_len`; meaningful on a chain's first segment).
    #[inline(always)]
    pub(crate) fn pkt_len(self) -> u32 {
        self.r().pkt_len
    }

    /// The eight bytes from `pkt_len` on: `pkt_len` in bits 0..32, `data_len` in bits 32..48
    /// (and `vlan_tci` above), as one load (the fields are adjacent: asserted in `dpdk-sys`).
    /// The Rx pass sums these words to get a burst's bytes and whether every frame lies whole
    /// in its first segment at one load per packet.
    #[inline(always)]
    pub(crate) fn len_word(self) -> u64 {
        let at = std::mem::offset_of!(rte_mbuf, pkt_len);
        // SAFETY: the type's invariant (a live mbuf); `pkt_len` (offset 36) is followed by
        // `data_len` and `vlan_tci` within the same 128-byte mbuf (offsets 40 and 42, asserted in
        // `dpdk-sys`): eight readable bytes, read unaligned through the mbuf's own pointer.
        unsafe {
            self.0
                .as_ptr()
                .cast::<u8>()
                .add(at)
                .cast::<u64>()
                .read_unaligned()
        }
    }

    /// Bytes in this segment (`data_len`).
    #[inline(always)]
    pub(crate) fn data_len(self) -> u16 {
        self.r().data_len
    }

    /// Offset of the data in this segment's buffer (`data_off`: the headroom before it).
    #[inline(always)]
    pub(crate) fn data_off(self) -> u16 {
        self.r().data_off
    }

    /// Segments in the chain (`nb_segs`).
    #[inline(always)]
    pub(crate) fn nb_segs(self) -> u16 {
        self.r().nb_segs
    }

    /// The pool the segment came from.
    #[inline(always)]
    pub(crate) fn pool(self) -> *mut rte_mempool {
        self.r().pool
    }

    /// Start of the segment's buffer (a host address, or a device-memory offset for a segment of
    /// an mlx5 MEMIC pool).
    #[inline(always)]
    pub(crate) fn buf_addr(self) -> *mut u8 {
        self.r().buf_addr.cast()
    }

    /// First data byte of the segment (see [`Mbuf::buf_addr`] for what kind of address).
    #[inline(always)]
    pub(crate) fn data_ptr(self) -> *mut u8 {
        self.buf_addr().wrapping_add(usize::from(self.data_off()))
    }

    /// The next segment of the chain.
    #[inline(always)]
    pub(crate) fn next(self) -> Option<Mbuf> {
        // SAFETY: the next segment of a live chain this thread holds is held with it.
        unsafe { Mbuf::from_ptr(self.r().next) }
    }

    /// The NIC's RSS hash, when the NIC set one.
    #[inline(always)]
    pub(crate) fn rss_hash(self) -> Option<u32> {
        let m = self.r();
        if m.ol_flags & sys::NMDP_MBUF_F_RX_RSS_HASH == 0 {
            return None;
        }
        // SAFETY: the `hash.rss` member of the union is the one the PMD writes when it sets
        // `RTE_MBUF_F_RX_RSS_HASH`, checked above.
        Some(unsafe { m.__bindgen_anon_2.hash.rss })
    }

    /// True when a segment of the chain from here on is device memory (no host view: its bytes
    /// cannot be copied or read by the CPU).
    pub(crate) fn has_device_segment(self) -> bool {
        let mut seg = Some(self);
        while let Some(s) = seg {
            if super::mempool::nic_pool_kind(s.pool()) == Some(true) {
                return true;
            }
            seg = s.next();
        }
        false
    }

    /// Sets the segment's data offset and length and the chain's length.
    #[inline(always)]
    pub(crate) fn set_lengths(mut self, data_off: u16, data_len: u16, pkt_len: u32) {
        let m = self.w();
        m.data_off = data_off;
        m.data_len = data_len;
        m.pkt_len = pkt_len;
    }

    /// Makes this segment the head of a chain of `segs` segments followed by `next`.
    #[inline(always)]
    pub(crate) fn set_next(mut self, segs: u16, next: Option<Mbuf>) {
        let m = self.w();
        m.nb_segs = segs;
        m.next = next.map_or(std::ptr::null_mut(), Mbuf::as_ptr);
    }

    /// Sets the receive port.
    #[inline(always)]
    pub(crate) fn set_port(mut self, port: u16) {
        self.w().port = port;
    }

    /// Copies the receive metadata of `from` (port, and the RSS hash with its flag) into this
    /// segment, which takes `from`'s place as a chain's head.
    #[inline(always)]
    pub(crate) fn copy_rx_meta(mut self, from: Mbuf) {
        let f = from.r();
        let (port, flags, hash) = (f.port, f.ol_flags, f.__bindgen_anon_2);
        let m = self.w();
        m.port = port;
        m.ol_flags = flags & sys::NMDP_MBUF_F_RX_RSS_HASH;
        m.__bindgen_anon_2 = hash;
    }
}

/// Bytes the CPU read from (emulated or device) nicmem payloads through the counted slow path.
pub(crate) static NICMEM_CPU_READ_BYTES: AtomicU64 = AtomicU64::new(0);

/// Bytes the CPU wrote into (emulated or device) nicmem payloads through the counted slow path.
pub(crate) static NICMEM_CPU_WRITE_BYTES: AtomicU64 = AtomicU64::new(0);

/// Reads `dst.len()` bytes at a device-memory offset (set by the mlx5 backend).
pub(crate) type DeviceReader = fn(u64, &mut [u8]) -> Result<(), String>;
pub(crate) static DEVICE_READER: OnceLock<DeviceReader> = OnceLock::new();

/// Writes bytes at a device-memory offset (set by the mlx5 backend).
pub(crate) type DeviceWriter = fn(u64, &[u8]) -> Result<(), String>;
pub(crate) static DEVICE_WRITER: OnceLock<DeviceWriter> = OnceLock::new();

/// Where segment `s` (a payload segment, or none) lives: host memory, emulated nicmem or device
/// memory, from the pool it came from (and, for a spill pool, its buffer's address).
#[inline]
pub(crate) fn payload_mem(s: Option<Mbuf>) -> PayloadMem {
    let Some(s) = s else {
        return PayloadMem::Host;
    };
    match super::mempool::nic_pool_kind_at(s.pool(), s.buf_addr() as u64) {
        Some(true) => PayloadMem::DeviceNic,
        Some(false) => PayloadMem::EmulatedNic,
        None => PayloadMem::Host,
    }
}

/// The owner of every packet the DPDK driver hands to the packet core: a packet's handle is its
/// `rte_mbuf*`. Mbufs are process-wide (any queue of any DPDK port may send or free any of them),
/// so one owner serves every DPDK queue.
pub(crate) struct MbufOwner;

/// The DPDK driver's packet owner (one per process).
pub(crate) fn mbuf_owner() -> Arc<MbufOwner> {
    static OWNER: OnceLock<Arc<MbufOwner>> = OnceLock::new();
    OWNER.get_or_init(|| Arc::new(MbufOwner)).clone()
}

// SAFETY: handles are mbuf chains the DPDK queues received (or built) and handed to a burst,
// which owns them until it gives them back. `payload` names host bytes only for a second segment
// in host memory, readable for its `data_len` bytes (the payload length the burst was told) while
// the chain is held; `free` releases each chain once, from any thread (mempools allow it).
unsafe impl PacketOwner for MbufOwner {
    fn free(&self, handles: &[usize]) {
        if handles.is_empty() {
            return;
        }
        // SAFETY: every handle is an mbuf chain owned by the caller, given up here; `usize` and
        // `*mut rte_mbuf` have the same layout, and DPDK only reads the array.
        unsafe {
            dpdk_sys::rte_pktmbuf_free_bulk(
                handles.as_ptr().cast::<*mut rte_mbuf>().cast_mut(),
                handles.len() as u32,
            )
        }
    }

    fn payload(&self, handle: usize) -> PayloadLoc {
        // SAFETY: `handle` is a live chain held by the caller's burst.
        let Some(s) = unsafe { Mbuf::from_handle(handle) }.next() else {
            return PayloadLoc::None;
        };
        match payload_mem(Some(s)) {
            PayloadMem::Host => PayloadLoc::Host(s.data_ptr().cast_const()),
            _ => PayloadLoc::Nic,
        }
    }

    fn read_nic(&self, handle: usize, offset: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        // SAFETY: `handle` is a live chain held by the caller's burst.
        let Some(s) = unsafe { Mbuf::from_handle(handle) }.next() else {
            return Err(AccessError::Oversized {
                len: dst.len() as u32,
                max: 0,
            });
        };
        let (addr, off, len) = (
            s.buf_addr() as usize,
            usize::from(s.data_off()),
            usize::from(s.data_len()),
        );
        if offset.checked_add(dst.len()).is_none_or(|e| e > len) {
            return Err(AccessError::Oversized {
                len: dst.len() as u32,
                max: len.saturating_sub(offset) as u32,
            });
        }
        NICMEM_CPU_READ_BYTES.fetch_add(dst.len() as u64, Ordering::Relaxed);
        match payload_mem(Some(s)) {
            PayloadMem::Host | PayloadMem::EmulatedNic => {
                // SAFETY: host memory (possibly emulated nicmem), in bounds of the segment's
                // data (checked above), not written while the chain is held.
                let src = unsafe {
                    std::slice::from_raw_parts((addr as *const u8).add(off + offset), dst.len())
                };
                dst.copy_from_slice(src);
                Ok(())
            }
            PayloadMem::DeviceNic => {
                let read = DEVICE_READER.get().ok_or(AccessError::ZeroLength)?;
                read((addr + off + offset) as u64, dst).map_err(|_| AccessError::OutOfRange {
                    key: nicmem::MemKey(0),
                    addr: (addr + off + offset) as u64,
                    len: dst.len() as u32,
                })
            }
        }
    }

    fn write_payload(&self, handle: usize, offset: usize, src: &[u8]) -> Result<(), AccessError> {
        // SAFETY: `handle` is a live chain held by the caller's burst.
        let Some(s) = unsafe { Mbuf::from_handle(handle) }.next() else {
            return Err(AccessError::Oversized {
                len: src.len() as u32,
                max: 0,
            });
        };
        let (addr, off, len) = (
            s.buf_addr() as usize,
            usize::from(s.data_off()),
            usize::from(s.data_len()),
        );
        if offset.checked_add(src.len()).is_none_or(|e| e > len) {
            return Err(AccessError::Oversized {
                len: src.len() as u32,
                max: len.saturating_sub(offset) as u32,
            });
        }
        let kind = payload_mem(Some(s));
        if kind != PayloadMem::Host {
            NICMEM_CPU_WRITE_BYTES.fetch_add(src.len() as u64, Ordering::Relaxed);
        }
        match kind {
            PayloadMem::Host | PayloadMem::EmulatedNic => {
                // SAFETY: host memory (possibly emulated nicmem), in bounds of the segment's
                // data (checked above); the chain is held by a burst borrowed mutably by the
                // caller, so no view of the segment lives and nothing else writes it.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr(),
                        (addr as *mut u8).add(off + offset),
                        src.len(),
                    )
                };
                Ok(())
            }
            PayloadMem::DeviceNic => {
                let write = DEVICE_WRITER.get().ok_or(AccessError::ZeroLength)?;
                write((addr + off + offset) as u64, src).map_err(|_| AccessError::OutOfRange {
                    key: nicmem::MemKey(0),
                    addr: (addr + off + offset) as u64,
                    len: src.len() as u32,
                })
            }
        }
    }
}
