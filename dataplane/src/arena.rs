//! The packet arena of drivers whose buffers are plain memory (the virtual NIC and the test kit):
//! header buffers that carry a packet's metadata, host payload buffers and nicmem payload buffers,
//! addressed by index.
//!
//! A packet is the index of its header buffer (VPP's `vlib_buffer` index, ixy's pool stack
//! entry). Each header buffer is laid out as
//!
//! ```text
//! | PacketMeta (64 B) | headroom (64 B) | header segment (split offset, or the whole frame) |
//! ```
//!
//! so the metadata a driver needs beyond the burst's arrays (which payload buffer the packet
//! holds, from which ring, when it arrived) sits in the same buffer as the header, written once
//! at Rx, and the headroom lets network functions prepend an outer header in place. Payload
//! buffers are plain pool slots. The pools are per worker (shared by that worker's queues on every
//! port, as DPDK applications share a per-core mempool between ports), so a packet received on
//! one port can be sent, or freed, by the same worker's queue on any other port.
//!
//! Fast path: a queue allocates and frees indices through its own [`ArenaCache`] (per-core
//! stacks, refilled from and flushed to the pools' shared rings in bulk). The arena itself is the
//! [`PacketOwner`] of its packets: a burst dropped outside the run loop returns them through the
//! shared rings, from any thread.

use std::sync::Arc;

use nicmem::{AccessError, BufPool, Host, Nic, PoolCache, PoolError, PoolLayout};

use crate::packet::{PacketOwner, PayloadLoc, PayloadRing};

/// Bytes of metadata at the start of every header buffer.
pub const META_BYTES: usize = 64;
/// Headroom before the header segment (room for an outer IPv4 header plus tunnel headers).
pub const HEADROOM: usize = 64;
/// Offset of the header segment in a header buffer.
pub const DATA_OFF: usize = META_BYTES + HEADROOM;

/// The metadata at the start of a header buffer.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct PacketMeta {
    /// Index of the payload buffer in its pool (when `ring` is not `None`).
    pub payload: u32,
    /// Which ring (pool) the payload buffer came from.
    pub ring: PayloadRing,
    /// When the frame arrived (driver time base: the virtual NIC's picoseconds; 0 from a queue
    /// without the timing layer, which keeps no clock).
    pub arrival: u64,
}

const _: () = assert!(std::mem::size_of::<PacketMeta>() <= META_BYTES);

/// Header buffer size for a header segment of `hdr_bytes` (metadata, headroom and the segment,
/// rounded up to whole cache lines).
pub fn header_buffer_size(hdr_bytes: usize) -> usize {
    (DATA_OFF + hdr_bytes).div_ceil(64) * 64
}

/// The pools of one worker (see the module docs).
pub struct PacketArena {
    shared: Arc<ArenaShared>,
}

struct ArenaShared {
    hdr: BufPool<Host>,
    pay: Option<BufPool<Host>>,
    nic: Option<BufPool<Nic>>,
    hdr_l: PoolLayout,
    pay_l: Option<PoolLayout>,
    nic_l: Option<PoolLayout>,
}

/// Where the arena's buffers are (index-level access for drivers).
#[derive(Clone, Copy, Debug)]
pub struct ArenaLayout {
    /// Header buffers (metadata, headroom, header segment).
    pub hdr: PoolLayout,
    /// Host payload buffers (the secondary ring's pool).
    pub pay: Option<PoolLayout>,
    /// nicmem payload buffers (the primary ring's pool).
    pub nic: Option<PoolLayout>,
}

impl ArenaLayout {
    /// Bytes a header buffer holds for the header segment (after metadata and headroom).
    #[inline]
    pub fn header_capacity(&self) -> usize {
        self.hdr.buf_size - DATA_OFF
    }

    /// The metadata of packet `h`.
    ///
    /// # Safety
    /// `h` must be a header buffer index of this arena owned by the caller, and no other
    /// reference to its metadata may be alive while the returned one is used.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn meta(&self, h: u32) -> &mut PacketMeta {
        // SAFETY: buffer `h` starts a 64-byte aligned slot of at least `META_BYTES` bytes inside
        // the pool's memory (pool buffer sizes are whole cache lines and pools are page
        // aligned), and the caller owns it exclusively.
        unsafe { &mut *self.hdr.ptr(h).cast::<PacketMeta>() }
    }

    /// First byte of the header segment of packet `h` (no access is made).
    #[inline]
    pub fn header_ptr(&self, h: u32) -> *mut u8 {
        self.hdr.ptr(h).wrapping_add(DATA_OFF)
    }

    /// Bus address of the header segment of packet `h`.
    #[inline]
    pub fn header_iova(&self, h: u32) -> u64 {
        self.hdr.iova_of(h) + DATA_OFF as u64
    }
}

impl PacketArena {
    /// An arena over the given pools. Header buffers must hold at least [`DATA_OFF`] bytes plus
    /// a header segment.
    pub fn new(
        hdr: BufPool<Host>,
        pay: Option<BufPool<Host>>,
        nic: Option<BufPool<Nic>>,
    ) -> Result<Self, PoolError> {
        if hdr.buf_size() <= DATA_OFF || !hdr.buf_size().is_multiple_of(64) {
            return Err(PoolError::BadGeometry {
                buf_size: hdr.buf_size(),
                count: hdr.count(),
            });
        }
        let shared = ArenaShared {
            hdr_l: hdr.layout(),
            pay_l: pay.as_ref().map(|p| p.layout()),
            nic_l: nic.as_ref().map(|p| p.layout()),
            hdr,
            pay,
            nic,
        };
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// The arena's layout.
    pub fn layout(&self) -> ArenaLayout {
        ArenaLayout {
            hdr: self.shared.hdr_l,
            pay: self.shared.pay_l,
            nic: self.shared.nic_l,
        }
    }

    /// The arena as the owner of its packets (bursts hold it; cloning is one atomic increment,
    /// done once per queue).
    pub fn owner(&self) -> Arc<dyn PacketOwner> {
        self.shared.clone()
    }

    /// The header pool.
    pub fn header_pool(&self) -> &BufPool<Host> {
        &self.shared.hdr
    }

    /// The host payload pool, if the mode splits.
    pub fn host_payload_pool(&self) -> Option<&BufPool<Host>> {
        self.shared.pay.as_ref()
    }

    /// The nicmem payload pool, if the mode uses nicmem and any fit.
    pub fn nic_payload_pool(&self) -> Option<&BufPool<Nic>> {
        self.shared.nic.as_ref()
    }

    /// A per-core cache of each pool, of up to `size` buffers each (smaller pools get smaller
    /// caches, so one core cannot park a whole small pool).
    pub fn cache(&self, size: usize) -> Result<ArenaCache, PoolError> {
        let for_pool = |count: usize| size.min(count.div_ceil(2)).max(2);
        let sh = &self.shared;
        Ok(ArenaCache {
            hdr: sh.hdr.cache(for_pool(sh.hdr.count()))?,
            pay: match &sh.pay {
                Some(p) => Some(p.cache(for_pool(p.count()))?),
                None => None,
            },
            nic: match &sh.nic {
                Some(p) => Some(p.cache(for_pool(p.count()))?),
                None => None,
            },
        })
    }
}

impl Clone for PacketArena {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// A queue's per-core caches of the arena's pools.
pub struct ArenaCache {
    /// Header buffers.
    pub hdr: PoolCache<Host>,
    /// Host payload buffers.
    pub pay: Option<PoolCache<Host>>,
    /// nicmem payload buffers.
    pub nic: Option<PoolCache<Nic>>,
}

impl ArenaCache {
    /// Returns packets (header buffers and the payload buffers their metadata names) to the
    /// caches, in bulk.
    ///
    /// # Safety
    /// Every handle must be a live packet of the arena this cache belongs to, owned by the
    /// caller, whose metadata was written by the driver that received it; the caller gives the
    /// packets up.
    pub unsafe fn free_packets(&mut self, layout: &ArenaLayout, handles: &[usize]) {
        let mut hdrs = [std::mem::MaybeUninit::<u32>::uninit(); 64];
        let mut pays = [std::mem::MaybeUninit::<u32>::uninit(); 64];
        let mut nics = [std::mem::MaybeUninit::<u32>::uninit(); 64];
        for chunk in handles.chunks(64) {
            let (mut np, mut nn) = (0, 0);
            for (k, &h) in chunk.iter().enumerate() {
                let h = h as u32;
                hdrs[k].write(h);
                // SAFETY: a live packet of this arena owned by the caller (contract above).
                let m = unsafe { layout.meta(h) };
                match m.ring {
                    PayloadRing::None => {}
                    PayloadRing::Secondary => {
                        pays[np].write(m.payload);
                        np += 1;
                    }
                    PayloadRing::Primary => {
                        nics[nn].write(m.payload);
                        nn += 1;
                    }
                }
            }
            // SAFETY: the first `chunk.len()`, `np` and `nn` entries were written above. The
            // header buffers and the payload buffers their metadata names belong to the caller
            // and are given up here, each to the cache of its own pool.
            unsafe {
                self.hdr.free_indices(init(&hdrs[..chunk.len()]));
                if let Some(c) = &mut self.pay {
                    c.free_indices(init(&pays[..np]));
                }
                if let Some(c) = &mut self.nic {
                    c.free_indices(init(&nics[..nn]));
                }
            }
        }
    }
}

impl ArenaCache {
    /// Returns header, host payload and nicmem payload buffer indices, already sorted by pool,
    /// to their caches (a driver that kept which buffers each packet holds frees them this way
    /// without reading the packets' metadata).
    ///
    /// # Safety
    /// Every index must be a buffer of the named pool of the arena this cache belongs to, owned
    /// by the caller, who gives it up.
    pub unsafe fn free_sorted(&mut self, hdr: &[u32], pay: &[u32], nic: &[u32]) {
        // SAFETY: the caller's contract, each index to its own pool's cache.
        unsafe {
            self.hdr.free_indices(hdr);
            if let Some(c) = &mut self.pay
                && !pay.is_empty()
            {
                c.free_indices(pay);
            }
            if let Some(c) = &mut self.nic
                && !nic.is_empty()
            {
                c.free_indices(nic);
            }
        }
    }
}

/// The initialised prefix of a scratch array.
///
/// # Safety
/// Every element of `s` must have been written.
#[inline(always)]
unsafe fn init(s: &[std::mem::MaybeUninit<u32>]) -> &[u32] {
    // SAFETY: `MaybeUninit<u32>` has the layout of `u32`, and the caller vouches that every
    // element is initialised.
    unsafe { &*(s as *const [std::mem::MaybeUninit<u32>] as *const [u32]) }
}

impl ArenaShared {
    /// The metadata of packet `h`.
    ///
    /// # Safety
    /// `h` must be a live packet of this arena whose holder is not using its metadata.
    unsafe fn meta(&self, h: usize) -> PacketMeta {
        // SAFETY: per the caller's contract; a copy is read.
        unsafe { *ArenaLayout::meta(&self.layout(), h as u32) }
    }

    fn layout(&self) -> ArenaLayout {
        ArenaLayout {
            hdr: self.hdr_l,
            pay: self.pay_l,
            nic: self.nic_l,
        }
    }
}

// SAFETY: `payload` names a host payload buffer only for packets whose metadata says it holds
// one; that buffer belongs to the packet until it is freed, and payload buffers are sized for the
// largest payload the driver places in them (the burst's payload length never exceeds it).
// `free` returns each buffer to its own pool's shared ring, once per handle (the burst's
// contract).
unsafe impl PacketOwner for ArenaShared {
    fn free(&self, handles: &[usize]) {
        for &h in handles {
            // SAFETY: `h` is a live packet of this arena that the caller gives up.
            let m = unsafe { self.meta(h) };
            // SAFETY: each buffer is returned once, to its own pool.
            unsafe {
                match (m.ring, &self.pay, &self.nic) {
                    (PayloadRing::Secondary, Some(p), _) => p.free_index_shared(m.payload),
                    (PayloadRing::Primary, _, Some(p)) => p.free_index_shared(m.payload),
                    _ => {}
                }
                self.hdr.free_index_shared(h as u32);
            }
        }
    }

    fn payload(&self, handle: usize) -> PayloadLoc {
        // SAFETY: `handle` is a live packet of this arena (the burst's contract).
        let m = unsafe { self.meta(handle) };
        match (m.ring, self.pay_l) {
            (PayloadRing::Secondary, Some(l)) => PayloadLoc::Host(l.ptr(m.payload)),
            (PayloadRing::Primary, _) => PayloadLoc::Nic,
            _ => PayloadLoc::None,
        }
    }

    fn read_nic(&self, handle: usize, offset: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        // SAFETY: `handle` is a live packet of this arena (the burst's contract).
        let m = unsafe { self.meta(handle) };
        match (m.ring, &self.nic) {
            // SAFETY: the packet owns its payload buffer, so no device write runs concurrently.
            (PayloadRing::Primary, Some(p)) => unsafe { p.read_slow_index(m.payload, offset, dst) },
            _ => Err(AccessError::Oversized {
                len: dst.len().min(u32::MAX as usize) as u32,
                max: 0,
            }),
        }
    }

    fn write_payload(&self, handle: usize, offset: usize, src: &[u8]) -> Result<(), AccessError> {
        // SAFETY: `handle` is a live packet of this arena (the burst's contract).
        let m = unsafe { self.meta(handle) };
        match (m.ring, &self.pay, self.pay_l, &self.nic) {
            (PayloadRing::Secondary, Some(p), Some(l), _) => {
                if offset
                    .checked_add(src.len())
                    .is_none_or(|e| e > p.buf_size())
                {
                    return Err(AccessError::Oversized {
                        len: src.len().min(u32::MAX as usize) as u32,
                        max: p.buf_size().saturating_sub(offset) as u32,
                    });
                }
                // SAFETY: the packet owns host payload buffer `m.payload` (the burst holding it
                // is borrowed mutably by the caller, so no view of it lives), and the range was
                // checked against the buffer size above.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr(),
                        l.ptr(m.payload).add(offset),
                        src.len(),
                    )
                };
                Ok(())
            }
            // SAFETY: the packet owns its nicmem payload buffer, so no device access runs
            // concurrently.
            (PayloadRing::Primary, _, _, Some(p)) => unsafe {
                p.write_slow_index(m.payload, offset, src)
            },
            _ => Err(AccessError::Oversized {
                len: src.len().min(u32::MAX as usize) as u32,
                max: 0,
            }),
        }
    }
}
