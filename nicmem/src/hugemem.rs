//! Large zero-initialised arrays on 2 MiB pages, for the per-core flow tables of the network
//! functions.
//!
//! Why: a flow table of millions of entries is a gigabyte of memory touched at random, one cache
//! line per lookup. On 4 KiB pages nearly every such access also misses the TLB (a 1 GiB table
//! spans 262 144 pages; an L2 TLB holds about two thousand), so each lookup pays a page walk on
//! top of its cache miss. On 2 MiB pages the same table is 512 pages and the walks mostly hit
//! cached paging structures. DPDK puts its hash tables in hugepage memory for the same reason.
//!
//! [`HugeArray::zeroed`] maps anonymous memory and takes, in this order:
//!
//! 1. **2 MiB hugetlbfs pages** (`MAP_HUGETLB`) when the array is at least [`HUGE_PAGE`] bytes
//!    and the machine has enough free ones reserved (`/proc/sys/vm/nr_hugepages`). The mapping
//!    reserves its pages when it is made, so a later page fault cannot fail.
//! 2. **Transparent huge pages**: an ordinary mapping aligned to 2 MiB with
//!    `madvise(MADV_HUGEPAGE)`, which the kernel backs with huge pages as it faults them in, when
//!    THP is not disabled (`/sys/kernel/mm/transparent_hugepage/enabled`) and a fault in an
//!    advised range never waits for memory to be compacted (`.../defrag` is `defer`,
//!    `defer+madvise` or `never`: the kernel gives a huge page when one is free and a small one
//!    otherwise). With `defrag` at `madvise` (Debian's default) or `always`, each first touch of
//!    a 2 MiB range compacts memory synchronously, which takes milliseconds on a machine whose
//!    memory is fragmented: the first seconds of a 10 M-flow NAT's traffic crawled at a hundred
//!    new sessions per second (measured: 7 s before the first million packets, against 1 s on
//!    4 KiB pages), so the advice is not given then.
//! 3. **4 KiB pages**: the same ordinary mapping without the advice.
//!
//! Arrays smaller than [`HUGE_PAGE`] come from the global allocator (zeroed): a 2 MiB page for a
//! small table would waste the page and the reserved pool. The page kind of the first large
//! array of each kind is logged once per process (on stderr), so a run says whether its tables
//! got huge pages.
//!
//! **Creation costs no pass over the memory.** Anonymous mappings are zero-filled by the kernel
//! on first touch, so a 1.5 GB table is created in microseconds and its pages are faulted in by
//! the traffic that uses them. That is why the element type must be [`Zeroable`]: all-zero bytes
//! must be a valid value, and the array hands out the kernel's zeros as elements.
//!
//! This module is one of the buffer modules where `unsafe` lives (the mapping and the typed view
//! of it); its API is safe.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};

/// Size of a huge page (x86_64 and aarch64 with 4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Types for which every byte being zero is a valid value (integers, arrays and tuples of them,
/// [`Align32`] of them), so an array of them can be handed out straight from zeroed pages.
///
/// # Safety
/// An implementation promises that the all-zero bit pattern (padding aside) is a valid value of
/// the type, and that the type has no drop glue and no interior references.
pub unsafe trait Zeroable: Copy + 'static {}

macro_rules! zeroable_primitives {
    ($($t:ty),*) => {
        // SAFETY: zero is a valid value of every integer type.
        $(unsafe impl Zeroable for $t {})*
    };
}
zeroable_primitives!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize
);

// SAFETY: an array of zeroable elements is zeroable element by element.
unsafe impl<T: Zeroable, const N: usize> Zeroable for [T; N] {}

macro_rules! zeroable_tuples {
    ($(($($t:ident),+)),*) => {
        // SAFETY: a tuple is valid when each field is; padding may hold any bytes.
        $(unsafe impl<$($t: Zeroable),+> Zeroable for ($($t,)+) {})*
    };
}
zeroable_tuples!(
    (A),
    (A, B),
    (A, B, C),
    (A, B, C, D),
    (A, B, C, D, E),
    (A, B, C, D, E, F),
    (A, B, C, D, E, F, G),
    (A, B, C, D, E, F, G, H)
);

/// `T` aligned to 32 bytes (its size rounds up to a multiple of 32): in an array from a page
/// boundary, an element of up to 32 bytes never straddles a cache line, and one of up to 64
/// bytes fills exactly one line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(32))]
pub struct Align32<T>(pub T);

// SAFETY: the wrapper adds only padding around a zeroable value.
unsafe impl<T: Zeroable> Zeroable for Align32<T> {}

/// What backs a [`HugeArray`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Reserved 2 MiB hugetlbfs pages (`MAP_HUGETLB`).
    Huge2M,
    /// An ordinary mapping advised for transparent huge pages.
    Transparent,
    /// 4 KiB pages (THP disabled, or the advice refused).
    Small,
    /// The global allocator (arrays below [`HUGE_PAGE`] bytes).
    Heap,
}

impl PageKind {
    /// Short name for logs and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            PageKind::Huge2M => "2 MiB hugetlb pages",
            PageKind::Transparent => "transparent huge pages",
            PageKind::Small => "4 KiB pages",
            PageKind::Heap => "heap",
        }
    }
}

impl std::fmt::Display for PageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The array could not be allocated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugeMemError {
    /// Bytes asked for.
    pub bytes: usize,
    /// What the system said.
    pub reason: String,
}

impl std::fmt::Display for HugeMemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot allocate {} MiB: {}",
            self.bytes.div_ceil(1 << 20),
            self.reason
        )
    }
}

impl std::error::Error for HugeMemError {}

/// Page kinds already logged (one bit per [`PageKind`]).
static LOGGED: AtomicU8 = AtomicU8::new(0);

fn log_once(kind: PageKind, bytes: usize) {
    let bit = 1u8 << (kind as u8);
    if LOGGED.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
        let hint = match kind {
            PageKind::Huge2M => "",
            PageKind::Small => {
                " (reserve 2 MiB pages with /proc/sys/vm/nr_hugepages for fewer TLB misses; \
                 transparent huge pages are used only when \
                 /sys/kernel/mm/transparent_hugepage/defrag is defer, defer+madvise or never, \
                 where their page faults never wait for compaction)"
            }
            _ => " (reserve 2 MiB pages with /proc/sys/vm/nr_hugepages for fewer TLB misses)",
        };
        eprintln!(
            "nicmem: large tables on {kind} (first: {} MiB){hint}",
            bytes.div_ceil(1 << 20)
        );
    }
}

/// Whether to advise THP: it is not disabled, and advised faults do not compact synchronously
/// (see the module docs).
fn thp_advisable() -> bool {
    let read =
        |f: &str| std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{f}"));
    let enabled = read("enabled").map(|s| !s.contains("[never]"));
    let defrag = read("defrag").map(|s| thp_defrag_never_stalls(&s));
    matches!((enabled, defrag), (Ok(true), Ok(true)))
}

/// True when THP's `defrag` setting (the file's text, current value in brackets) never makes a
/// fault in a `MADV_HUGEPAGE` range wait for compaction.
fn thp_defrag_never_stalls(defrag: &str) -> bool {
    ["[defer]", "[defer+madvise]", "[never]"]
        .iter()
        .any(|v| defrag.contains(v))
}

/// A fixed-length array of `T` in zero-initialised memory, on 2 MiB pages when it is large and
/// the machine has them (see the module docs). Dereferences to a slice.
pub struct HugeArray<T: Zeroable> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes mapped (0 for a heap allocation or an empty array).
    mapped: usize,
    /// Start of the mapping (may precede `ptr` for a 2 MiB-aligned ordinary mapping).
    map_base: *mut libc::c_void,
    kind: PageKind,
}

// SAFETY: the array owns its memory exclusively (like a `Box<[T]>`); sending or sharing it is as
// safe as sending or sharing the elements.
unsafe impl<T: Zeroable + Send> Send for HugeArray<T> {}
// SAFETY: as above; `&HugeArray` only gives `&[T]`.
unsafe impl<T: Zeroable + Sync> Sync for HugeArray<T> {}

impl<T: Zeroable> HugeArray<T> {
    /// An array of `len` zero values. Costs no pass over the memory: the pages are zero-filled
    /// as they are first touched.
    pub fn zeroed(len: usize) -> Result<Self, HugeMemError> {
        assert!(
            std::mem::align_of::<T>() <= 4096,
            "HugeArray elements must not need more than page alignment"
        );
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .filter(|&b| b <= isize::MAX as usize / 2)
            .ok_or_else(|| HugeMemError {
                bytes: usize::MAX,
                reason: format!("{len} elements overflow the address space"),
            })?;
        if bytes == 0 {
            return Ok(Self {
                ptr: NonNull::dangling(),
                len,
                mapped: 0,
                map_base: std::ptr::null_mut(),
                kind: PageKind::Heap,
            });
        }
        if bytes < HUGE_PAGE {
            return Self::heap(len, bytes);
        }
        let huge_len = bytes.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        // SAFETY: an anonymous private mapping of a non-zero length at a kernel-chosen address
        // touches no existing memory; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                huge_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            log_once(PageKind::Huge2M, bytes);
            return Ok(Self {
                ptr: NonNull::new(p.cast()).expect("mmap returned a null mapping"),
                len,
                mapped: huge_len,
                map_base: p,
                kind: PageKind::Huge2M,
            });
        }
        // An ordinary mapping with a spare huge page, so a 2 MiB-aligned range of `huge_len`
        // bytes lies inside it and THP can back every part of the array.
        let map_len = huge_len + HUGE_PAGE;
        // SAFETY: as above.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(HugeMemError {
                bytes,
                reason: std::io::Error::last_os_error().to_string(),
            });
        }
        let skip = (p as usize).next_multiple_of(HUGE_PAGE) - p as usize;
        // SAFETY: `skip < HUGE_PAGE`, so `p + skip` and the `huge_len` bytes after it lie inside
        // the `huge_len + HUGE_PAGE` bytes just mapped.
        let start = unsafe { p.cast::<u8>().add(skip) };
        let kind = if !thp_advisable() {
            PageKind::Small
        } else {
            // SAFETY: the advised range lies inside the mapping just made; MADV_HUGEPAGE only
            // changes how the kernel backs it.
            let r = unsafe { libc::madvise(start.cast(), huge_len, libc::MADV_HUGEPAGE) };
            if r == 0 {
                PageKind::Transparent
            } else {
                PageKind::Small
            }
        };
        log_once(kind, bytes);
        Ok(Self {
            ptr: NonNull::new(start.cast()).expect("mmap returned a null mapping"),
            len,
            mapped: map_len,
            map_base: p,
            kind,
        })
    }

    fn heap(len: usize, bytes: usize) -> Result<Self, HugeMemError> {
        let layout = Self::heap_layout(bytes);
        // SAFETY: the layout has a non-zero size and a power-of-two alignment.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p.cast()).ok_or_else(|| HugeMemError {
            bytes,
            reason: "out of memory".into(),
        })?;
        Ok(Self {
            ptr,
            len,
            mapped: 0,
            map_base: std::ptr::null_mut(),
            kind: PageKind::Heap,
        })
    }

    fn heap_layout(bytes: usize) -> std::alloc::Layout {
        // Cache-line aligned at least, so 32- and 64-byte elements never straddle lines.
        std::alloc::Layout::from_size_align(bytes, std::mem::align_of::<T>().max(64))
            .expect("size checked against isize::MAX")
    }

    /// What backs the array.
    pub fn page_kind(&self) -> PageKind {
        self.kind
    }

    /// Hints the CPU to fetch element `i` into the cache (no effect past the end). A table
    /// looked up in bulk prefetches the lines of a whole burst before it reads any of them, so
    /// their cache misses overlap; unlike a load, a prefetch retires at once and never stalls.
    #[inline(always)]
    pub fn prefetch(&self, i: usize) {
        if i < self.len {
            // SAFETY: `i < len`, so the offset stays inside the allocation.
            let p = unsafe { self.ptr.as_ptr().add(i) };
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint that never faults; SSE is part of the x86_64
            // baseline.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = p;
        }
    }
}

impl<T: Zeroable> Deref for HugeArray<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` is aligned for `T` (page- or layout-aligned, or dangling for an empty
        // array) and points to `len` elements of zero-initialised memory this array owns;
        // all-zero bytes are a valid `T` (`Zeroable`), and later writes only store valid `T`s.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> DerefMut for HugeArray<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes the view exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> Drop for HugeArray<T> {
    fn drop(&mut self) {
        let bytes = self.len * std::mem::size_of::<T>();
        if self.mapped > 0 {
            // SAFETY: `map_base`/`mapped` are exactly the mapping made in `zeroed`, unmapped
            // once; no reference into it outlives `self`.
            unsafe { libc::munmap(self.map_base, self.mapped) };
        } else if bytes > 0 {
            // SAFETY: allocated in `heap` with this very layout, freed once.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::heap_layout(bytes)) };
        }
    }
}

impl<T: Zeroable + std::fmt::Debug> std::fmt::Debug for HugeArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HugeArray")
            .field("len", &self.len)
            .field("kind", &self.kind)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// THP is advised only where its faults never wait for compaction.
    #[test]
    fn thp_advice_follows_the_defrag_setting() {
        for (text, ok) in [
            ("always defer defer+madvise [madvise] never", false),
            ("[always] defer defer+madvise madvise never", false),
            ("always [defer] defer+madvise madvise never", true),
            ("always defer [defer+madvise] madvise never", true),
            ("always defer defer+madvise madvise [never]", true),
        ] {
            assert_eq!(thp_defrag_never_stalls(text), ok, "{text}");
        }
    }

    #[test]
    fn small_arrays_come_zeroed_from_the_heap() {
        let mut a: HugeArray<Align32<(u64, u32)>> = HugeArray::zeroed(1000).unwrap();
        assert_eq!(a.page_kind(), PageKind::Heap);
        assert_eq!(std::mem::size_of::<Align32<(u64, u32)>>(), 32);
        assert!(a.iter().all(|e| *e == Align32((0, 0))));
        assert_eq!(a.as_ptr() as usize % 64, 0);
        a[999] = Align32((7, 8));
        a.prefetch(999);
        a.prefetch(1000);
        assert_eq!(a[999].0, (7, 8));
        let e: HugeArray<u8> = HugeArray::zeroed(0).unwrap();
        assert!(e.is_empty());
    }

    #[test]
    fn large_arrays_are_mapped_2mib_aligned_and_lazily_zero() {
        // 64 MiB: mapped, aligned to a huge page whatever kind backs it.
        let n = 8 << 20;
        let mut a: HugeArray<u64> = HugeArray::zeroed(n).unwrap();
        assert_ne!(a.page_kind(), PageKind::Heap);
        assert_eq!(a.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(a[n - 1], 0);
        a[n - 1] = 5;
        a[12345] = 6;
        assert_eq!(a.iter().step_by(4096).copied().max(), Some(0));
        assert_eq!(a[n - 1] + a[12345], 11);
    }

    #[test]
    fn impossible_sizes_are_errors() {
        let e = HugeArray::<[u64; 8]>::zeroed(usize::MAX / 8).unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
    }
}
