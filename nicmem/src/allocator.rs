//! The on-NIC memory allocator: the paper's `alloc_nicmem` / `dealloc_nicmem`.
//!
//! [`NicMem`] models a device's SRAM of fixed capacity (256 KiB on the paper's ConnectX-5, 4 MiB on
//! ConnectX-6 Dx, 80 MiB for the paper's proposed future NIC). Allocations are first-fit over a free
//! list with coalescing, aligned to 64 B (a cache line and a PCIe read-completion boundary).
//! Allocation happens at setup time, so the free list sits behind a mutex; nothing here is on the
//! per-packet path except the counted CPU accesses, which are a deliberate slow path.
//!
//! The CPU reaches nicmem only over MMIO (write-combined): writes cost about what a host copy costs,
//! reads are 50-528x slower. Both are counted in [`NicMemStats`] so a run can show that the data
//! path never read nicmem.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::memory::{HostAllocError, RawMem};
use crate::region::{Backing, ProtectionDomain, Region, RegionKind};
use crate::sram::{FreeList, NicMemShared, NicMemWindow};

/// Allocation granularity and alignment inside the SRAM.
pub const NICMEM_ALIGN: usize = 64;

/// Errors from the nicmem allocator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NicMemError {
    /// Not enough contiguous free nicmem.
    OutOfMemory {
        /// Bytes asked for (after rounding to the allocation granularity).
        requested: usize,
        /// Bytes free in total (possibly fragmented).
        free: usize,
        /// Device capacity.
        capacity: usize,
    },
    /// Zero-byte allocation.
    ZeroSize,
    /// The host memory that models the device's SRAM could not be allocated.
    Host(HostAllocError),
}

impl fmt::Display for NicMemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NicMemError::OutOfMemory {
                requested,
                free,
                capacity,
            } => write!(
                f,
                "nicmem exhausted: asked for {requested} B, {free} B free of {capacity} B"
            ),
            NicMemError::ZeroSize => write!(f, "zero-byte nicmem allocation"),
            NicMemError::Host(e) => write!(f, "nicmem of {} B: {e}", e.bytes),
        }
    }
}

impl std::error::Error for NicMemError {}

/// Counters of a nicmem device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicMemStats {
    /// Device capacity in bytes.
    pub capacity: u64,
    /// Bytes currently allocated.
    pub allocated: u64,
    /// Largest number of bytes ever allocated at once.
    pub peak_allocated: u64,
    /// Bytes the CPU wrote into nicmem (MMIO writes).
    pub cpu_bytes_written: u64,
    /// Bytes the CPU read from nicmem (MMIO reads: the slow path the data path must avoid).
    pub cpu_bytes_read: u64,
    /// Number of CPU read operations.
    pub cpu_reads: u64,
}

/// A modeled on-NIC memory device. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct NicMem {
    shared: Arc<NicMemShared>,
}

/// Parses sizes such as `256KiB`, `4MiB`, `80MiB`, `1GiB` or a plain byte count.
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mul) = [
        ("GiB", 1usize << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("B", 1),
    ]
    .iter()
    .find_map(|(suf, m)| s.strip_suffix(suf).map(|n| (n.trim(), *m)))
    .unwrap_or((s, 1));
    num.parse::<usize>().ok()?.checked_mul(mul)
}

impl NicMem {
    /// A device with `capacity` bytes of SRAM.
    ///
    /// # Panics
    /// If the host cannot provide `capacity` bytes to model the SRAM; capacities that come from
    /// user input go through [`NicMem::try_new`].
    pub fn new(capacity: usize) -> Self {
        Self::try_new(capacity).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A device with `capacity` bytes of SRAM, or [`NicMemError::Host`] when the host memory that
    /// models it cannot be allocated (any size: never a panic or an abort).
    pub fn try_new(capacity: usize) -> Result<Self, NicMemError> {
        let sram = RawMem::try_zeroed(capacity).map_err(NicMemError::Host)?;
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        Ok(Self {
            shared: Arc::new(NicMemShared {
                sram,
                capacity,
                list: Mutex::new(FreeList {
                    free,
                    allocated: 0,
                    peak: 0,
                }),
                cpu_written: AtomicU64::new(0),
                cpu_read: AtomicU64::new(0),
                cpu_reads: AtomicU64::new(0),
            }),
        })
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// Bytes still free (possibly fragmented).
    pub fn free_bytes(&self) -> usize {
        let l = self.shared.list.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.capacity - l.allocated
    }

    /// `alloc_nicmem`: allocates `len` bytes (rounded up to 64 B) and registers them as a nicmem
    /// [`Region`] owned by `owner`. The bytes return to the device when the region is dropped
    /// (`dealloc_nicmem`).
    pub fn alloc(&self, len: usize, owner: ProtectionDomain) -> Result<Region, NicMemError> {
        if len == 0 {
            return Err(NicMemError::ZeroSize);
        }
        let need = len.div_ceil(NICMEM_ALIGN) * NICMEM_ALIGN;
        let mut l = self.shared.list.lock().unwrap_or_else(|e| e.into_inner());
        let found = l
            .free
            .iter()
            .find(|&(_, &flen)| flen >= need)
            .map(|(&o, &flen)| (o, flen));
        let Some((off, flen)) = found else {
            return Err(NicMemError::OutOfMemory {
                requested: need,
                free: self.shared.capacity - l.allocated,
                capacity: self.shared.capacity,
            });
        };
        l.free.remove(&off);
        if flen > need {
            l.free.insert(off + need, flen - need);
        }
        l.allocated += need;
        l.peak = l.peak.max(l.allocated);
        drop(l);
        let window = NicMemWindow {
            dev: self.shared.clone(),
            offset: off,
            len: need,
        };
        Ok(Region::register(
            RegionKind::NicMem,
            len,
            owner,
            Backing::NicMem(window),
        ))
    }

    /// `dealloc_nicmem`: gives a region back. Equivalent to dropping it; the bytes return to the
    /// device once no pool or clone still uses the region.
    pub fn dealloc(&self, region: Region) {
        drop(region);
    }

    /// Counted CPU write into nicmem (MMIO, write-combined). Fails if the range is outside the
    /// region or the region is not nicmem.
    pub fn cpu_write(&self, region: &Region, offset: usize, src: &[u8]) -> Result<(), NicMemError> {
        self.check(region, offset, src.len())?;
        self.shared
            .cpu_written
            .fetch_add(src.len() as u64, Ordering::Relaxed);
        let (raw, base) = region.inner.raw();
        // SAFETY: the range was checked to lie inside the region's window, which this device
        // allocated exclusively to that region. Region-level CPU writes are a setup-time API used on
        // regions not handed to a buffer pool, so no buffer handle views these bytes.
        unsafe { raw.bytes_mut(base + offset, src.len()) }.copy_from_slice(src);
        Ok(())
    }

    /// Counted CPU read from nicmem: the very slow path (~0.05 B/cycle on real hardware).
    pub fn cpu_read(
        &self,
        region: &Region,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), NicMemError> {
        self.check(region, offset, dst.len())?;
        self.count_read(dst.len());
        let (raw, base) = region.inner.raw();
        // SAFETY: in-bounds as checked; see `cpu_write` for exclusivity.
        dst.copy_from_slice(unsafe { raw.bytes(base + offset, dst.len()) });
        Ok(())
    }

    fn check(&self, region: &Region, offset: usize, len: usize) -> Result<(), NicMemError> {
        let ok = region.kind() == RegionKind::NicMem
            && offset.checked_add(len).is_some_and(|e| e <= region.len());
        if ok {
            Ok(())
        } else {
            Err(NicMemError::OutOfMemory {
                requested: len,
                free: 0,
                capacity: region.len(),
            })
        }
    }

    fn count_read(&self, n: usize) {
        self.shared.count_read(n);
    }

    /// A snapshot of the device counters.
    pub fn stats(&self) -> NicMemStats {
        let l = self.shared.list.lock().unwrap_or_else(|e| e.into_inner());
        NicMemStats {
            capacity: self.shared.capacity as u64,
            allocated: l.allocated as u64,
            peak_allocated: l.peak as u64,
            cpu_bytes_written: self.shared.cpu_written.load(Ordering::Relaxed),
            cpu_bytes_read: self.shared.cpu_read.load(Ordering::Relaxed),
            cpu_reads: self.shared.cpu_reads.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for NicMem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NicMem")
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_dealloc_coalesces_and_counts() {
        let dev = NicMem::new(256 << 10);
        let pd = ProtectionDomain::new();
        let a = dev.alloc(100, pd).unwrap();
        let b = dev.alloc(64 << 10, pd).unwrap();
        assert_eq!(a.kind(), RegionKind::NicMem);
        assert_eq!(dev.stats().allocated, 128 + (64 << 10));
        assert!(matches!(
            dev.alloc(256 << 10, pd),
            Err(NicMemError::OutOfMemory { .. })
        ));
        dev.dealloc(a);
        drop(b);
        assert_eq!(dev.stats().allocated, 0);
        assert_eq!(dev.stats().peak_allocated, 128 + (64 << 10));
        // Fully coalesced again: the whole capacity is one extent.
        let all = dev.alloc(256 << 10, pd).unwrap();
        assert_eq!(all.len(), 256 << 10);
    }

    #[test]
    fn cpu_access_is_counted_and_bounded() {
        let dev = NicMem::new(4096);
        let pd = ProtectionDomain::new();
        let r = dev.alloc(256, pd).unwrap();
        dev.cpu_write(&r, 10, b"hello").unwrap();
        let mut out = [0u8; 5];
        dev.cpu_read(&r, 10, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        assert!(dev.cpu_write(&r, 254, b"xyz").is_err());
        let s = dev.stats();
        assert_eq!(
            (s.cpu_bytes_written, s.cpu_bytes_read, s.cpu_reads),
            (5, 5, 1)
        );
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("256KiB"), Some(256 << 10));
        assert_eq!(parse_size("80MiB"), Some(80 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("4 MiB"), Some(4 << 20));
        assert_eq!(parse_size("lots"), None);
    }

    /// A capacity the host cannot hold is an error from `try_new`, never a panic or an abort
    /// (`usize::MAX` once panicked with a `LayoutError`).
    #[test]
    fn try_new_reports_capacities_the_host_cannot_hold() {
        for cap in [usize::MAX, isize::MAX as usize - 8192] {
            match NicMem::try_new(cap) {
                Err(NicMemError::Host(e)) => assert_eq!(e.bytes, cap),
                Err(other) => panic!("{cap}: unexpected {other}"),
                Ok(_) => panic!("{cap} B of nicmem allocated"),
            }
        }
        let e = NicMem::try_new(usize::MAX).err().unwrap().to_string();
        assert!(e.contains("nicmem of 18446744073709551615 B"), "{e}");
        assert_eq!(NicMem::try_new(4096).unwrap().capacity(), 4096);
        assert!(
            Region::try_host(usize::MAX, ProtectionDomain::new())
                .err()
                .unwrap()
                .impossible
        );
    }
}
