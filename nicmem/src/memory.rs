//! Raw backing memory shared by the CPU side (through buffer handles) and the modeled NIC (through
//! validated device accesses).
//!
//! This is one of the two places in the workspace (with the pool module) where `unsafe` lives: a
//! page-aligned, zero-initialised allocation that hands out byte ranges to whoever proves unique
//! ownership of them (a [`crate::Buf`] handle).

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// Alignment of every backing allocation: a 4 KiB page, like hugepage-backed DPDK memory zones, so
/// that buffers of 64 B multiples are cache-line aligned.
pub const MEM_ALIGN: usize = 4096;

/// A fixed-size, zeroed, page-aligned byte allocation.
pub struct RawMem {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `RawMem` is a plain byte allocation with no thread affinity. Access to its bytes goes
// through `bytes`/`bytes_mut`, whose callers guarantee exclusive ownership of the ranges they touch
// (see the safety contracts below), so sharing the handle across threads adds no data race.
unsafe impl Send for RawMem {}
// SAFETY: as above; `&RawMem` only exposes raw access under the callers' ownership contract.
unsafe impl Sync for RawMem {}

impl RawMem {
    /// Allocates `len` zero bytes (at least one byte is allocated so the layout is never empty).
    pub fn zeroed(len: usize) -> Self {
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size (`max(1)`) and a valid power-of-two alignment.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len.max(1), MEM_ALIGN).expect("allocation size overflows isize")
    }

    /// Pointer to the first byte (for pools that hand out disjoint ranges under their own
    /// ownership rules).
    pub(crate) fn base_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the allocation holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A shared view of `len` bytes at `offset`.
    ///
    /// # Safety
    /// `offset + len <= self.len()`, and no `&mut` view of any of these bytes may be alive for the
    /// lifetime of the returned slice (the caller owns the range, e.g. through a buffer handle).
    pub(crate) unsafe fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        debug_assert!(offset + len <= self.len);
        // SAFETY: in bounds and not mutably aliased, per the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) }
    }

    /// An exclusive view of `len` bytes at `offset`.
    ///
    /// # Safety
    /// `offset + len <= self.len()`, and no other view of any of these bytes may be alive for the
    /// lifetime of the returned slice (the caller owns the range exclusively).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        debug_assert!(offset + len <= self.len);
        // SAFETY: in bounds and exclusively owned, per the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset), len) }
    }
}

impl Drop for RawMem {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with exactly this layout and is freed once.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl std::fmt::Debug for RawMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawMem").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_and_aligned() {
        let m = RawMem::zeroed(10_000);
        assert_eq!(m.len(), 10_000);
        assert_eq!(m.ptr.as_ptr() as usize % MEM_ALIGN, 0);
        // SAFETY: in bounds, no other view exists in this test.
        let b = unsafe { m.bytes(0, 10_000) };
        assert!(b.iter().all(|&x| x == 0));
    }
}
