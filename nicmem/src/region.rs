//! Registered memory regions and the key table a NIC uses to validate descriptors.
//!
//! A [`Region`] is what mlx5 calls a memory region (MR): a range of bus addresses (IOVAs) with a
//! kind (host memory or on-NIC memory), an id, a key (like an lkey/mkey) and an owner (a protection
//! domain). Descriptors carry `(key, address, length)`; the NIC resolves them through a
//! [`RegionTable`] and rejects unknown keys, keys of another owner and ranges outside the region,
//! the way mlx5 raises a local protection error.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::memory::{HostAllocError, RawMem};
use crate::sram::NicMemWindow;

/// Where a region's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegionKind {
    /// Host DRAM (DMA crosses PCIe).
    Host,
    /// On-NIC memory (SRAM on the device; the CPU reaches it only through slow MMIO).
    NicMem,
}

impl RegionKind {
    /// Lower-case name used in logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RegionKind::Host => "host",
            RegionKind::NicMem => "nicmem",
        }
    }
}

/// A memory key as carried in descriptors (mlx5: lkey / mkey).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemKey(pub u32);

/// A protection domain: the owner a region is registered to. A queue may only use regions of its
/// own protection domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProtectionDomain(pub u32);

impl ProtectionDomain {
    /// Allocates a fresh, process-unique protection domain.
    pub fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl Default for ProtectionDomain {
    fn default() -> Self {
        Self::new()
    }
}

/// Keys and IOVAs are process-unique so that a key or address of one region can never be mistaken
/// for another's. IOVAs are spaced with an unmapped 1 MiB guard gap between regions.
static NEXT_KEY: AtomicU32 = AtomicU32::new(0x100);
static NEXT_IOVA: AtomicU64 = AtomicU64::new(0x10_0000_0000);
const IOVA_GUARD: u64 = 1 << 20;

/// The backing bytes of a region: a host allocation it owns, or a window of the NIC's SRAM.
pub(crate) enum Backing {
    Host(RawMem),
    NicMem(NicMemWindow),
}

pub(crate) struct RegionInner {
    pub(crate) id: u32,
    pub(crate) key: MemKey,
    pub(crate) kind: RegionKind,
    pub(crate) iova: u64,
    pub(crate) len: usize,
    pub(crate) owner: ProtectionDomain,
    pub(crate) backing: Backing,
}

impl RegionInner {
    pub(crate) fn raw(&self) -> (&RawMem, usize) {
        match &self.backing {
            Backing::Host(m) => (m, 0),
            Backing::NicMem(w) => (w.sram(), w.offset()),
        }
    }
}

/// A registered memory range. Cloning shares the registration; the memory is released (or the
/// nicmem window returned to its allocator) when the last clone and every pool over it are gone.
#[derive(Clone)]
pub struct Region {
    pub(crate) inner: Arc<RegionInner>,
}

impl Region {
    /// Registers `len` bytes of fresh, zeroed host memory to `owner`.
    ///
    /// # Panics
    /// If the host cannot provide the memory; sizes that come from user input go through
    /// [`Region::try_host`].
    pub fn host(len: usize, owner: ProtectionDomain) -> Self {
        Self::try_host(len, owner).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Registers `len` bytes of fresh, zeroed host memory to `owner`, or says why the host
    /// cannot provide them (any size: never a panic or an abort).
    pub fn try_host(len: usize, owner: ProtectionDomain) -> Result<Self, HostAllocError> {
        let mem = RawMem::try_zeroed(len)?;
        Ok(Self::register(
            RegionKind::Host,
            len,
            owner,
            Backing::Host(mem),
        ))
    }

    pub(crate) fn register(
        kind: RegionKind,
        len: usize,
        owner: ProtectionDomain,
        backing: Backing,
    ) -> Self {
        let key = MemKey(NEXT_KEY.fetch_add(1, Ordering::Relaxed));
        let span = (len as u64).div_ceil(4096) * 4096 + IOVA_GUARD;
        let iova = NEXT_IOVA.fetch_add(span, Ordering::Relaxed);
        Self {
            inner: Arc::new(RegionInner {
                id: key.0,
                key,
                kind,
                iova,
                len,
                owner,
                backing,
            }),
        }
    }

    /// Region id (unique in the process).
    pub fn id(&self) -> u32 {
        self.inner.id
    }
    /// The key descriptors must carry to address this region.
    pub fn key(&self) -> MemKey {
        self.inner.key
    }
    /// Host or nicmem.
    pub fn kind(&self) -> RegionKind {
        self.inner.kind
    }
    /// First bus address of the region.
    pub fn iova(&self) -> u64 {
        self.inner.iova
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }
    /// The protection domain the region is registered to.
    pub fn owner(&self) -> ProtectionDomain {
        self.inner.owner
    }

    /// The host virtual address and length of the bytes behind this region (feature `extmem`).
    ///
    /// Host regions and *modeled* nicmem (the [`crate::NicMem`] SRAM model, which lives in host
    /// memory) both have one. It exists so that a DMA engine outside this crate can own the range:
    /// the DPDK driver builds pinned external-buffer mbuf pools over it, which is how it emulates
    /// nicmem on PMDs without device memory. The range stays valid while any clone of the region
    /// lives. A region handed to such an engine must not also back a [`crate::BufPool`]: the two
    /// would both believe they own the bytes.
    #[cfg(feature = "extmem")]
    pub fn host_window(&self) -> (std::ptr::NonNull<u8>, usize) {
        let (raw, base) = self.inner.raw();
        // `base + len` lies inside the backing allocation (a region's window starts within it), so
        // the offset pointer is in bounds and therefore non-null.
        let p = raw.base_ptr().wrapping_add(base);
        (
            std::ptr::NonNull::new(p).expect("region memory is never at address 0"),
            self.inner.len,
        )
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("id", &self.inner.id)
            .field("key", &self.inner.key)
            .field("kind", &self.inner.kind)
            .field("iova", &format_args!("{:#x}", self.inner.iova))
            .field("len", &self.inner.len)
            .field("owner", &self.inner.owner)
            .finish()
    }
}

/// Why a descriptor's `(key, address, length)` was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// Length zero.
    ZeroLength,
    /// Length larger than the target allows (e.g. bigger than the buffer or the frame).
    Oversized { len: u32, max: u32 },
    /// No region with this key is registered here.
    UnknownKey(MemKey),
    /// The key belongs to another protection domain.
    ForeignKey {
        key: MemKey,
        owner: ProtectionDomain,
    },
    /// The address range is not inside the region (or wraps around).
    OutOfRange { key: MemKey, addr: u64, len: u32 },
    /// The range is inside the region but not inside the buffer that was posted in this slot.
    NotPosted { key: MemKey, addr: u64, len: u32 },
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessError::ZeroLength => write!(f, "zero-length access"),
            AccessError::Oversized { len, max } => write!(f, "length {len} exceeds {max}"),
            AccessError::UnknownKey(k) => write!(f, "unknown memory key {:#x}", k.0),
            AccessError::ForeignKey { key, owner } => {
                write!(
                    f,
                    "key {:#x} belongs to protection domain {}",
                    key.0, owner.0
                )
            }
            AccessError::OutOfRange { key, addr, len } => {
                write!(
                    f,
                    "[{addr:#x}, +{len}) is outside region of key {:#x}",
                    key.0
                )
            }
            AccessError::NotPosted { key, addr, len } => write!(
                f,
                "[{addr:#x}, +{len}) (key {:#x}) is not the buffer posted in this slot",
                key.0
            ),
        }
    }
}

impl std::error::Error for AccessError {}

/// A resolved access: the region's position in the table and the byte offset inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Index of the region in the table it was resolved through.
    pub region: usize,
    /// Offset of the first byte inside the region.
    pub offset: usize,
    /// Kind of the region.
    pub kind: RegionKind,
}

/// The regions a queue (or a whole NIC) knows about, keyed by [`MemKey`]. Lookups are a linear
/// scan: a queue has a handful of regions, and a scan of a few cache-resident entries beats hashing.
#[derive(Default, Clone)]
pub struct RegionTable {
    entries: Vec<(MemKey, ProtectionDomain, RegionKind, u64, usize)>,
}

impl RegionTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `region` addressable through this table; returns its index. Registering the same
    /// region twice returns the first index.
    pub fn register(&mut self, region: &Region) -> usize {
        if let Some(i) = self.entries.iter().position(|e| e.0 == region.key()) {
            return i;
        }
        self.entries.push((
            region.key(),
            region.owner(),
            region.kind(),
            region.iova(),
            region.len(),
        ));
        self.entries.len() - 1
    }

    /// Number of registered regions.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Validates a descriptor's `(key, addr, len)` for an access by `owner`.
    #[inline]
    pub fn resolve(
        &self,
        owner: ProtectionDomain,
        key: MemKey,
        addr: u64,
        len: u32,
    ) -> Result<Resolved, AccessError> {
        if len == 0 {
            return Err(AccessError::ZeroLength);
        }
        let (i, e) = self
            .entries
            .iter()
            .enumerate()
            .find(|(_, e)| e.0 == key)
            .ok_or(AccessError::UnknownKey(key))?;
        if e.1 != owner {
            return Err(AccessError::ForeignKey { key, owner: e.1 });
        }
        let end = addr.checked_add(len as u64);
        match end {
            Some(end) if addr >= e.3 && end <= e.3 + e.4 as u64 => Ok(Resolved {
                region: i,
                offset: (addr - e.3) as usize,
                kind: e.2,
            }),
            _ => Err(AccessError::OutOfRange { key, addr, len }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_accepts_inside_and_rejects_outside() {
        let pd = ProtectionDomain::new();
        let r = Region::host(8192, pd);
        let mut t = RegionTable::new();
        let idx = t.register(&r);
        assert_eq!(t.register(&r), idx);
        let ok = t.resolve(pd, r.key(), r.iova() + 100, 64).unwrap();
        assert_eq!(ok.offset, 100);
        assert_eq!(ok.kind, RegionKind::Host);
        assert_eq!(
            t.resolve(pd, r.key(), r.iova() + 8190, 4),
            Err(AccessError::OutOfRange {
                key: r.key(),
                addr: r.iova() + 8190,
                len: 4
            })
        );
        assert!(matches!(
            t.resolve(pd, r.key(), r.iova() - 1, 4),
            Err(AccessError::OutOfRange { .. })
        ));
        assert!(matches!(
            t.resolve(pd, r.key(), u64::MAX - 1, 4),
            Err(AccessError::OutOfRange { .. })
        ));
        assert_eq!(
            t.resolve(pd, r.key(), r.iova(), 0),
            Err(AccessError::ZeroLength)
        );
        assert_eq!(
            t.resolve(pd, MemKey(7), r.iova(), 4),
            Err(AccessError::UnknownKey(MemKey(7)))
        );
        let other = ProtectionDomain::new();
        assert!(matches!(
            t.resolve(other, r.key(), r.iova(), 4),
            Err(AccessError::ForeignKey { .. })
        ));
    }

    #[test]
    fn regions_get_distinct_keys_and_disjoint_iovas() {
        let pd = ProtectionDomain::new();
        let a = Region::host(4096, pd);
        let b = Region::host(4096, pd);
        assert_ne!(a.key(), b.key());
        assert!(a.iova() + a.len() as u64 <= b.iova() || b.iova() + b.len() as u64 <= a.iova());
    }
}
