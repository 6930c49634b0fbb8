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

/// A backing allocation the host could not provide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostAllocError {
    /// Bytes asked for.
    pub bytes: usize,
    /// True when the size cannot be allocated by any machine (it overflows the address space
    /// once rounded to [`MEM_ALIGN`]); false when the allocator refused it.
    pub impossible: bool,
}

impl std::fmt::Display for HostAllocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gib = self.bytes as f64 / f64::from(1u32 << 30);
        if self.impossible {
            write!(
                f,
                "cannot allocate {} B ({gib:.1} GiB) of host memory: larger than the address \
                 space allows",
                self.bytes
            )
        } else {
            write!(
                f,
                "cannot allocate {} B ({gib:.1} GiB) of host memory: the system refused it",
                self.bytes
            )
        }
    }
}

impl std::error::Error for HostAllocError {}

impl RawMem {
    /// Allocates `len` zero bytes (at least one byte is allocated so the layout is never empty).
    ///
    /// # Panics
    /// If the host cannot provide the memory (with the message of [`HostAllocError`]); callers
    /// whose size comes from user input use [`RawMem::try_zeroed`].
    pub fn zeroed(len: usize) -> Self {
        Self::try_zeroed(len).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Allocates `len` zero bytes, or says why the host cannot: a size beyond the address space,
    /// or an allocation the system refused. Never aborts the process.
    pub fn try_zeroed(len: usize) -> Result<Self, HostAllocError> {
        let layout = Self::layout(len).ok_or(HostAllocError {
            bytes: len,
            impossible: true,
        })?;
        // SAFETY: the layout has a non-zero size (`max(1)`) and a valid power-of-two alignment.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(HostAllocError {
            bytes: len,
            impossible: false,
        })?;
        Ok(Self { ptr, len })
    }

    /// The layout of a `len`-byte allocation; `None` when it overflows `isize` once aligned.
    fn layout(len: usize) -> Option<Layout> {
        Layout::from_size_align(len.max(1), MEM_ALIGN).ok()
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
        if let Some(layout) = Self::layout(self.len) {
            // SAFETY: `ptr` came from `alloc_zeroed` with exactly this layout (it was valid when
            // allocated, so it is again) and is freed once.
            unsafe { dealloc(self.ptr.as_ptr(), layout) }
        }
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

    /// Sizes no machine can hold are errors, not a `LayoutError` panic or an allocator abort.
    #[test]
    fn impossible_sizes_are_errors() {
        for len in [usize::MAX, usize::MAX - MEM_ALIGN, isize::MAX as usize] {
            let e = RawMem::try_zeroed(len).unwrap_err();
            assert_eq!(e.bytes, len);
            assert!(e.impossible, "{len}");
            assert!(
                e.to_string().contains("larger than the address space"),
                "{e}"
            );
        }
        // Fits the address space but no machine has it: the allocator refuses, no abort.
        let e = RawMem::try_zeroed(isize::MAX as usize - 2 * MEM_ALIGN).unwrap_err();
        assert!(!e.impossible);
        assert!(e.to_string().contains("the system refused it"), "{e}");
    }
}
