//! [`Mbuf`]: an owned DPDK mbuf chain of one or two segments, the DPDK representation of a
//! [`crate::Packet`]'s segments.
//!
//! Fields are read as Rust fields (no FFI call per packet); `dpdk-sys` asserts the `rte_mbuf`
//! offsets at compile time. The only per-packet FFI call left is the `Drop` of a packet that the
//! run loop did not hand back to a queue (queues free in bulk).

use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use dpdk_sys::rte_mbuf;
use nicmem::AccessError;

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

/// Reads `dst.len()` bytes at a device-memory offset (set by the mlx5 backend).
pub(crate) type DeviceReader = fn(u64, &mut [u8]) -> Result<(), String>;
pub(crate) static DEVICE_READER: OnceLock<DeviceReader> = OnceLock::new();

/// An owned mbuf chain (one or two segments). Dropping it frees the chain to its mempools.
#[derive(Debug)]
pub struct Mbuf {
    head: NonNull<rte_mbuf>,
    payload: PayloadMem,
}

// SAFETY: an `Mbuf` exclusively owns its chain (no other handle refers to it while it lives), and
// DPDK mempools accept frees from any thread; moving it across threads is sound.
unsafe impl Send for Mbuf {}
// SAFETY: `&Mbuf` only reads the chain's own fields and bytes.
unsafe impl Sync for Mbuf {}

impl Mbuf {
    /// Takes ownership of `m`.
    ///
    /// # Safety
    /// `m` must be a valid mbuf chain of at most two segments that nobody else owns or frees,
    /// and `payload` must say truthfully where its second segment lives.
    #[inline]
    pub(crate) unsafe fn from_raw(m: NonNull<rte_mbuf>, payload: PayloadMem) -> Self {
        Self { head: m, payload }
    }

    /// Gives up ownership without freeing (the caller now owns the chain).
    #[inline]
    pub(crate) fn into_raw(self) -> *mut rte_mbuf {
        let p = self.head.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The head mbuf (for inspection; ownership stays with `self`).
    #[inline]
    pub fn as_ptr(&self) -> *mut rte_mbuf {
        self.head.as_ptr()
    }

    /// Where the payload segment lives.
    #[inline]
    pub fn payload_mem(&self) -> PayloadMem {
        self.payload
    }

    /// True when the payload segment is in (emulated or real) nicmem.
    #[inline]
    pub(crate) fn payload_in_nicmem(&self) -> bool {
        self.payload != PayloadMem::Host
    }

    /// Number of segments.
    #[inline]
    pub fn segments(&self) -> usize {
        // SAFETY: `head` is a valid mbuf owned by `self`.
        unsafe { (*self.head.as_ptr()).nb_segs as usize }
    }

    /// The first `n` bytes of the first segment (clamped to its length).
    #[inline]
    pub(crate) fn first_segment(&self, n: usize) -> &[u8] {
        let m = self.head.as_ptr();
        // SAFETY: the first segment is always host memory (header pools and Rx pools are host
        // mempools); `buf_addr + data_off .. + data_len` lies inside the mbuf's buffer, we read
        // at most `data_len` bytes, and `&self` rules out a concurrent `&mut` view.
        unsafe {
            let len = n.min((*m).data_len as usize);
            let p = ((*m).buf_addr as *const u8).add((*m).data_off as usize);
            std::slice::from_raw_parts(p, len)
        }
    }

    /// The first `n` bytes of the first segment, writable (clamped to its length).
    #[inline]
    pub(crate) fn first_segment_mut(&mut self, n: usize) -> &mut [u8] {
        let m = self.head.as_ptr();
        // SAFETY: as in `first_segment`; `&mut self` proves exclusive access to the chain, and
        // the buffer is not shared (driver-built chains never attach one buffer twice).
        unsafe {
            let len = n.min((*m).data_len as usize);
            let p = ((*m).buf_addr as *mut u8).add((*m).data_off as usize);
            std::slice::from_raw_parts_mut(p, len)
        }
    }

    /// The first `n` bytes of the second segment, which must be in host memory (empty if there
    /// is no second segment).
    #[inline]
    pub(crate) fn second_segment(&self, n: usize) -> &[u8] {
        debug_assert_eq!(self.payload, PayloadMem::Host);
        if self.payload != PayloadMem::Host {
            return &[];
        }
        // SAFETY: `next`, when non-null, is the chain's valid second segment, in host memory
        // (checked above); we read at most its `data_len` bytes.
        unsafe {
            let s = (*self.head.as_ptr()).next;
            if s.is_null() {
                return &[];
            }
            let len = n.min((*s).data_len as usize);
            let p = ((*s).buf_addr as *const u8).add((*s).data_off as usize);
            std::slice::from_raw_parts(p, len)
        }
    }

    /// Counted CPU read of payload bytes `[offset, offset + dst.len())` (the nicmem slow path).
    pub(crate) fn read_payload_slow(
        &self,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), AccessError> {
        // SAFETY: `next` is null or the chain's valid second segment.
        let s = unsafe { (*self.head.as_ptr()).next };
        if s.is_null() {
            return Err(AccessError::Oversized {
                len: dst.len() as u32,
                max: 0,
            });
        }
        // SAFETY: reading plain fields of a valid mbuf.
        let (addr, off, len) = unsafe {
            (
                (*s).buf_addr as usize,
                (*s).data_off as usize,
                (*s).data_len as usize,
            )
        };
        if offset.checked_add(dst.len()).is_none_or(|e| e > len) {
            return Err(AccessError::Oversized {
                len: dst.len() as u32,
                max: len.saturating_sub(offset) as u32,
            });
        }
        NICMEM_CPU_READ_BYTES.fetch_add(dst.len() as u64, Ordering::Relaxed);
        match self.payload {
            PayloadMem::Host | PayloadMem::EmulatedNic => {
                // SAFETY: host memory (possibly emulated nicmem), in bounds of the segment's
                // data (checked above), not mutably aliased while `&self` lives.
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
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: `self` owns the chain; it is freed exactly once, here.
        unsafe { dpdk_sys::rte_pktmbuf_free(self.head.as_ptr()) }
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
