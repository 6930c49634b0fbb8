//! The modeled on-NIC SRAM behind [`crate::NicMem`]: its memory, its free list, the CPU access
//! counters, and the windows that nicmem regions own (a window returns itself to the free list
//! when its region is dropped). Below both the allocator, which hands windows out, and the
//! regions, which hold them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::memory::RawMem;

/// The free extents of an SRAM and its allocation counters.
pub(crate) struct FreeList {
    /// offset -> length of each free extent, non-adjacent (coalesced).
    pub(crate) free: BTreeMap<usize, usize>,
    /// Bytes allocated now.
    pub(crate) allocated: usize,
    /// Most bytes ever allocated at once.
    pub(crate) peak: usize,
}

/// One modeled SRAM, shared by the [`crate::NicMem`] handles and the regions it handed out.
pub(crate) struct NicMemShared {
    /// The host memory that models the SRAM.
    pub(crate) sram: RawMem,
    /// Its size.
    pub(crate) capacity: usize,
    /// Its free extents.
    pub(crate) list: Mutex<FreeList>,
    /// Bytes the CPU wrote (MMIO writes).
    pub(crate) cpu_written: AtomicU64,
    /// Bytes the CPU read (MMIO reads).
    pub(crate) cpu_read: AtomicU64,
    /// CPU read operations.
    pub(crate) cpu_reads: AtomicU64,
}

impl NicMemShared {
    /// Counts a CPU read of `n` bytes.
    pub(crate) fn count_read(&self, n: usize) {
        self.cpu_read.fetch_add(n as u64, Ordering::Relaxed);
        self.cpu_reads.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a CPU write of `n` bytes.
    pub(crate) fn count_write(&self, n: usize) {
        self.cpu_written.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// A window of the SRAM owned by one nicmem region; returns itself to the free list on drop.
pub(crate) struct NicMemWindow {
    /// The SRAM.
    pub(crate) dev: Arc<NicMemShared>,
    /// Where the window starts in it.
    pub(crate) offset: usize,
    /// Its length.
    pub(crate) len: usize,
}

impl NicMemWindow {
    pub(crate) fn sram(&self) -> &RawMem {
        &self.dev.sram
    }
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }
    pub(crate) fn device(&self) -> &NicMemShared {
        &self.dev
    }
}

impl Drop for NicMemWindow {
    fn drop(&mut self) {
        let mut l = self.dev.list.lock().unwrap_or_else(|e| e.into_inner());
        l.allocated -= self.len;
        let mut off = self.offset;
        let mut len = self.len;
        // Coalesce with the previous and the next free extent.
        if let Some((&po, &pl)) = l.free.range(..off).next_back()
            && po + pl == off
        {
            l.free.remove(&po);
            off = po;
            len += pl;
        }
        if let Some(&nl) = l.free.get(&(off + len)) {
            l.free.remove(&(off + len));
            len += nl;
        }
        l.free.insert(off, len);
    }
}
