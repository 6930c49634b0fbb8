//! Mbufs as packets: a packet's handle in a [`crate::Burst`] is its `rte_mbuf*`, the first segment
//! is the header segment and the second, if any, the payload segment (host memory, or nicmem:
//! then no byte view exists). [`PacketOwner`] for mbufs lives here, with where a payload segment
//! lives and the counted nicmem read.
//!
//! Fields are read as Rust fields (no FFI call per packet); `dpdk-sys` asserts the `rte_mbuf`
//! offsets at compile time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use dpdk_sys::rte_mbuf;
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

/// The payload segment of chain `handle` as `(segment, buffer address, data offset, data
/// length)`, or `None` for a single-segment chain.
fn payload_segment(handle: usize) -> Option<(*mut rte_mbuf, usize, usize, usize)> {
    let m = handle as *mut rte_mbuf;
    // SAFETY: `m` is a live chain held by the caller's burst; `next` is null or its valid
    // second segment, whose plain fields are read here.
    unsafe {
        let s = (*m).next;
        (!s.is_null()).then(|| {
            (
                s,
                (*s).buf_addr as usize,
                (*s).data_off as usize,
                (*s).data_len as usize,
            )
        })
    }
}

/// Where segment `s` (a payload segment, or null) lives: host memory, emulated nicmem or device
/// memory, from the pool it came from (and, for a spill pool, its buffer's address).
#[inline]
pub(crate) fn payload_mem(s: *mut rte_mbuf) -> PayloadMem {
    if s.is_null() {
        return PayloadMem::Host;
    }
    // SAFETY: `s` is a valid mbuf segment; plain field reads.
    let (pool, addr) = unsafe { ((*s).pool, (*s).buf_addr as u64) };
    match super::port::nic_pool_kind_at(pool, addr) {
        Some(true) => PayloadMem::DeviceNic,
        Some(false) => PayloadMem::EmulatedNic,
        None => PayloadMem::Host,
    }
}

/// The owner of every packet the DPDK driver hands to the packet core: a packet's handle is its
/// `rte_mbuf*`. Mbufs are process-wide (any queue of any DPDK port may send or free any of them),
/// so one owner serves every DPDK queue.
struct MbufOwner;

/// The DPDK driver's packet owner (one per process).
pub(crate) fn mbuf_owner() -> Arc<dyn PacketOwner> {
    static OWNER: OnceLock<Arc<dyn PacketOwner>> = OnceLock::new();
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
        let m = handle as *mut rte_mbuf;
        // SAFETY: `m` is a live chain held by the caller's burst.
        let s = unsafe { (*m).next };
        if s.is_null() {
            return PayloadLoc::None;
        }
        match payload_mem(s) {
            // SAFETY: a host segment: its data is host memory.
            PayloadMem::Host => PayloadLoc::Host(unsafe { data_ptr(s) }.cast_const()),
            _ => PayloadLoc::Nic,
        }
    }

    fn read_nic(&self, handle: usize, offset: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        let Some((s, addr, off, len)) = payload_segment(handle) else {
            return Err(AccessError::Oversized {
                len: dst.len() as u32,
                max: 0,
            });
        };
        if offset.checked_add(dst.len()).is_none_or(|e| e > len) {
            return Err(AccessError::Oversized {
                len: dst.len() as u32,
                max: len.saturating_sub(offset) as u32,
            });
        }
        NICMEM_CPU_READ_BYTES.fetch_add(dst.len() as u64, Ordering::Relaxed);
        match payload_mem(s) {
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
        let Some((s, addr, off, len)) = payload_segment(handle) else {
            return Err(AccessError::Oversized {
                len: src.len() as u32,
                max: 0,
            });
        };
        if offset.checked_add(src.len()).is_none_or(|e| e > len) {
            return Err(AccessError::Oversized {
                len: src.len() as u32,
                max: len.saturating_sub(offset) as u32,
            });
        }
        let kind = payload_mem(s);
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

/// Pointer to the first data byte of segment `m`.
///
/// # Safety
/// `m` must be a valid mbuf whose buffer is host memory.
#[inline(always)]
pub(crate) unsafe fn data_ptr(m: *mut rte_mbuf) -> *mut u8 {
    // SAFETY: per the caller's contract.
    unsafe { ((*m).buf_addr as *mut u8).add((*m).data_off as usize) }
}
