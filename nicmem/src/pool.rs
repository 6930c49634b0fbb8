//! Fixed-size buffer pools over a registered region, with per-core caches.
//!
//! Layout follows DPDK's mempool: a shared ring of free buffer indices (lock-free, MPMC) plus a
//! per-core cache (a plain LIFO stack, no atomics) that refills from and flushes to the ring in
//! bulk. A [`Buf`] is an owned handle to one buffer; dropping it returns the buffer to the shared
//! ring (the slow path), while a core frees into its [`PoolCache`] (the fast path).
//!
//! The memory class is a type parameter: `Buf<Host>` gives `&mut [u8]` over its bytes, `Buf<Nic>`
//! does not (on-NIC memory is only reachable through the counted slow path, or by the modeled NIC's
//! device accesses), so "the CPU never touches a nicmem payload" is enforced by the type system.
//!
//! Lifetime: the pool's shared state is reference-counted by handle objects (pools, caches) *and*
//! by buffers outside the shared ring, counted in bulk when caches refill and flush, so a `Buf`
//! needs no per-buffer atomic to keep its pool alive.
//!
//! Exhaustion is a counted event ([`PoolStats::alloc_failures`]); allocation returns `None`.
//!
//! Payload aliasing (the paper artifact's trick of reusing one small nicmem area for many
//! buffers) is available only through [`BufPool::new_aliased`], logs a warning, and is honest about
//! what it does: aliased buffers do not preserve payload bytes (device writes are discarded, reads
//! return zeros). It exists to measure the performance of large logical nicmem pools, never for
//! correctness runs.

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;

use crate::region::{AccessError, Backing, MemKey, Region, RegionKind};

/// Marker for buffers in host memory.
#[derive(Debug)]
pub enum Host {}
/// Marker for buffers in on-NIC memory.
#[derive(Debug)]
pub enum Nic {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Host {}
    impl Sealed for super::Nic {}
}

/// The memory class of a pool: [`Host`] or [`Nic`].
pub trait MemClass: sealed::Sealed + 'static {
    /// The region kind buffers of this class live in.
    const KIND: RegionKind;
}
impl MemClass for Host {
    const KIND: RegionKind = RegionKind::Host;
}
impl MemClass for Nic {
    const KIND: RegionKind = RegionKind::NicMem;
}

/// How many per-core caches a pool can track.
pub const MAX_CACHES: usize = 128;

/// Errors building a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// The region's kind does not match the pool's memory class.
    WrongKind {
        expected: RegionKind,
        got: RegionKind,
    },
    /// `count * buf_size` does not fit the region.
    RegionTooSmall { need: usize, have: usize },
    /// Zero buffers or zero-byte buffers, or more than `u32::MAX` buffers.
    BadGeometry { buf_size: usize, count: usize },
    /// Too many caches on one pool.
    TooManyCaches,
    /// The host cannot allocate the free list of `count` buffers.
    NoMemory { count: usize },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::WrongKind { expected, got } => write!(
                f,
                "pool needs a {} region, got a {} region",
                expected.as_str(),
                got.as_str()
            ),
            PoolError::RegionTooSmall { need, have } => {
                write!(f, "pool needs {need} B but the region has {have} B")
            }
            PoolError::BadGeometry { buf_size, count } => {
                write!(f, "bad pool geometry: {count} buffers of {buf_size} B")
            }
            PoolError::TooManyCaches => write!(f, "more than {MAX_CACHES} caches on one pool"),
            PoolError::NoMemory { count } => write!(
                f,
                "cannot allocate the free list of {count} buffers: the host refused the memory"
            ),
        }
    }
}

impl std::error::Error for PoolError {}

/// Counters of a pool. `in_use` counts buffers held outside the shared ring and outside every
/// cache; `high_water` is the largest number of buffers ever out of the shared ring (including
/// those parked in caches), sampled at each bulk refill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolStats {
    /// Pool name.
    pub name: String,
    /// Host or nicmem.
    pub kind: RegionKind,
    /// Bytes per buffer.
    pub buf_size: usize,
    /// Buffers in the pool.
    pub count: u32,
    /// Buffers held by users (not in the ring or a cache).
    pub in_use: u32,
    /// Buffers in the shared ring.
    pub available: u32,
    /// Buffers parked in per-core caches.
    pub cached: u32,
    /// High-water mark of buffers out of the shared ring.
    pub high_water: u32,
    /// Allocations that found the pool empty.
    pub alloc_failures: u64,
    /// Whether buffers alias each other (payload bytes not preserved).
    pub aliased: bool,
}

struct PoolShared {
    id: u32,
    name: String,
    region: Region,
    /// Copies of the region's hot fields, so buffer handles reach them in one hop.
    iova: u64,
    key: MemKey,
    /// First byte of the pool's memory (inside the region's backing, kept alive by `region`).
    data: NonNull<u8>,
    buf_size: usize,
    count: u32,
    /// Distinct backing slots; equals `count` unless the pool is aliased.
    slots: u32,
    aliased: bool,
    free: ArrayQueue<u32>,
    refs: AtomicUsize,
    alloc_failures: AtomicU64,
    high_water: AtomicU32,
    cache_used: [AtomicBool; MAX_CACHES],
    cache_len: [AtomicU32; MAX_CACHES],
}

impl PoolShared {
    fn take_refs(&self, n: usize) {
        self.refs.fetch_add(n, Ordering::Relaxed);
    }

    fn note_high_water(&self) {
        let out = self.count - self.free.len() as u32;
        self.high_water.fetch_max(out, Ordering::Relaxed);
    }

    #[inline]
    fn slot_offset(&self, idx: u32) -> usize {
        let slot = if self.aliased { idx % self.slots } else { idx };
        slot as usize * self.buf_size
    }
}

/// Drops `n` references to the shared state; frees it when none remain.
///
/// # Safety
/// `ptr` must point to a live `PoolShared` created by `BufPool::build`, and the caller must own
/// `n` of its references (and not use them afterwards).
unsafe fn release(ptr: NonNull<PoolShared>, n: usize) {
    // SAFETY: the caller owns `n` references, so the state is alive here.
    let prev = unsafe { ptr.as_ref() }.refs.fetch_sub(n, Ordering::AcqRel);
    if prev == n {
        // SAFETY: that was the last reference: nothing else can reach the allocation, which came
        // from `Box::into_raw` in `BufPool::build`.
        drop(unsafe { Box::from_raw(ptr.as_ptr()) });
    }
}

/// A pool of `count` buffers of `buf_size` bytes over a region. Cloning shares the pool.
pub struct BufPool<K: MemClass> {
    shared: NonNull<PoolShared>,
    _k: PhantomData<K>,
}

// SAFETY: the shared state is `Sync` (an MPMC queue and atomics) and immutable otherwise; the
// handle only adjusts the atomic reference count.
unsafe impl<K: MemClass> Send for BufPool<K> {}
// SAFETY: as above.
unsafe impl<K: MemClass> Sync for BufPool<K> {}

static NEXT_POOL_ID: AtomicU32 = AtomicU32::new(1);

impl<K: MemClass> BufPool<K> {
    /// A pool of `count` buffers of `buf_size` bytes laid out back to back from the start of
    /// `region`.
    pub fn new(
        name: &str,
        region: Region,
        buf_size: usize,
        count: usize,
    ) -> Result<Self, PoolError> {
        let need = buf_size.saturating_mul(count);
        if need > region.len() {
            return Err(PoolError::RegionTooSmall {
                need,
                have: region.len(),
            });
        }
        Self::build(name, region, buf_size, count, count, false)
    }

    fn build(
        name: &str,
        region: Region,
        buf_size: usize,
        count: usize,
        slots: usize,
        aliased: bool,
    ) -> Result<Self, PoolError> {
        if region.kind() != K::KIND {
            return Err(PoolError::WrongKind {
                expected: K::KIND,
                got: region.kind(),
            });
        }
        if buf_size == 0 || count == 0 || slots == 0 || count > u32::MAX as usize - 1 {
            return Err(PoolError::BadGeometry { buf_size, count });
        }
        // `ArrayQueue::new` allocates its slots (a stamp word and a `u32`, 16 B) infallibly and
        // aborts when the host refuses; ask for the same size first so that a count the host
        // cannot hold is an error instead.
        let mut probe: Vec<[u64; 2]> = Vec::new();
        probe
            .try_reserve_exact(count)
            .map_err(|_| PoolError::NoMemory { count })?;
        drop(probe);
        let free = ArrayQueue::new(count);
        for i in 0..count as u32 {
            // Cannot fail: the queue holds exactly `count` entries.
            let _ = free.push(i);
        }
        let (raw, base) = region.inner.raw();
        // SAFETY: `base` is inside the region's allocation (a region's window starts within its
        // backing), so the offset pointer stays in bounds of one allocated object.
        let data = unsafe { NonNull::new_unchecked(raw.base_ptr().add(base)) };
        let shared = Box::new(PoolShared {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            name: name.to_string(),
            iova: region.iova(),
            key: region.key(),
            data,
            region,
            buf_size,
            count: count as u32,
            slots: slots as u32,
            aliased,
            free,
            refs: AtomicUsize::new(1),
            alloc_failures: AtomicU64::new(0),
            high_water: AtomicU32::new(0),
            cache_used: std::array::from_fn(|_| AtomicBool::new(false)),
            cache_len: std::array::from_fn(|_| AtomicU32::new(0)),
        });
        Ok(Self {
            shared: NonNull::from(Box::leak(shared)),
            _k: PhantomData,
        })
    }

    fn sh(&self) -> &PoolShared {
        // SAFETY: this handle owns one reference, so the shared state is alive.
        unsafe { self.shared.as_ref() }
    }

    /// Pool id (process-unique).
    pub fn id(&self) -> u32 {
        self.sh().id
    }

    /// The region the buffers live in.
    pub fn region(&self) -> &Region {
        &self.sh().region
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.sh().buf_size
    }

    /// Number of buffers.
    pub fn count(&self) -> usize {
        self.sh().count as usize
    }

    /// Takes one buffer from the shared ring (slow path; cores use a [`PoolCache`]). `None` (and a
    /// counted failure) when the pool is empty.
    pub fn alloc(&self) -> Option<Buf<K>> {
        let sh = self.sh();
        match sh.free.pop() {
            Some(idx) => {
                sh.take_refs(1);
                sh.note_high_water();
                Some(Buf {
                    shared: self.shared,
                    idx,
                    _k: PhantomData,
                })
            }
            None => {
                sh.alloc_failures.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// A per-core cache holding up to `size` buffers (refilled/flushed `size / 2` at a time).
    pub fn cache(&self, size: usize) -> Result<PoolCache<K>, PoolError> {
        let sh = self.sh();
        let slot = sh
            .cache_used
            .iter()
            .position(|u| {
                u.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or(PoolError::TooManyCaches)?;
        sh.cache_len[slot].store(0, Ordering::Relaxed);
        sh.take_refs(1);
        // A cache never holds more than the pool's buffers (and `size + 1` cannot overflow).
        let size = size.clamp(2, (sh.count as usize).max(2));
        Ok(PoolCache {
            shared: self.shared,
            stack: Vec::with_capacity(size + 1),
            size,
            slot,
            _k: PhantomData,
        })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PoolStats {
        let sh = self.sh();
        let available = sh.free.len() as u32;
        let cached: u32 = (0..MAX_CACHES)
            .filter(|&i| sh.cache_used[i].load(Ordering::Acquire))
            .map(|i| sh.cache_len[i].load(Ordering::Relaxed))
            .sum();
        PoolStats {
            name: sh.name.clone(),
            kind: K::KIND,
            buf_size: sh.buf_size,
            count: sh.count,
            in_use: sh.count.saturating_sub(available + cached),
            available,
            cached,
            high_water: sh.high_water.load(Ordering::Relaxed),
            alloc_failures: sh.alloc_failures.load(Ordering::Relaxed),
            aliased: sh.aliased,
        }
    }
}

/// Where a pool's buffers are, for index-level access: buffer `i` lives at slot
/// `i` (or `i % slots` for an aliased pool), `buf_size` bytes from `base` / `iova` per slot.
#[derive(Clone, Copy, Debug)]
pub struct PoolLayout {
    /// First byte of slot 0 in this process (modeled nicmem is host memory too).
    pub base: *mut u8,
    /// Bus address of slot 0.
    pub iova: u64,
    /// Key of the region.
    pub key: MemKey,
    /// Bytes per buffer.
    pub buf_size: usize,
    /// Buffers (indices `0..count`).
    pub count: u32,
    /// Distinct slots (equals `count` unless aliased).
    pub slots: u32,
    /// Whether buffers alias each other (payload bytes are not kept).
    pub aliased: bool,
}

// SAFETY: the layout is plain addresses and sizes; touching the bytes behind `base` is governed
// by the ownership of buffer indices (see `BufPool::free_index_shared` and `PoolCache`).
unsafe impl Send for PoolLayout {}
// SAFETY: as above.
unsafe impl Sync for PoolLayout {}

impl PoolLayout {
    /// Byte offset of buffer `idx` from `base` (aliased pools wrap onto their slots).
    #[inline]
    pub fn offset(&self, idx: u32) -> usize {
        let slot = if self.aliased { idx % self.slots } else { idx };
        slot as usize * self.buf_size
    }

    /// Pointer to the first byte of buffer `idx` (no access is made; dereferencing it is the
    /// caller's business, under the ownership of `idx`).
    #[inline]
    pub fn ptr(&self, idx: u32) -> *mut u8 {
        self.base.wrapping_add(self.offset(idx))
    }

    /// Bus address of buffer `idx`.
    #[inline]
    pub fn iova_of(&self, idx: u32) -> u64 {
        self.iova + self.offset(idx) as u64
    }
}

impl PoolShared {
    fn layout(&self) -> PoolLayout {
        PoolLayout {
            base: self.data.as_ptr(),
            iova: self.iova,
            key: self.key,
            buf_size: self.buf_size,
            count: self.count,
            slots: self.slots,
            aliased: self.aliased,
        }
    }
}

impl<K: MemClass> BufPool<K> {
    /// The pool's layout (for index-level access; see [`PoolCache::alloc_index`]).
    pub fn layout(&self) -> PoolLayout {
        self.sh().layout()
    }

    /// Takes one buffer index from the shared ring (the slow path, for tools and tests; cores
    /// use [`PoolCache::alloc_index`]). `None` (counted) when the pool is empty.
    pub fn alloc_index_shared(&self) -> Option<u32> {
        let buf = self.alloc()?;
        let idx = buf.idx;
        // The buffer's reference now travels with the index (released by `free_index_shared`
        // or by a cache flush after `PoolCache::free_indices`).
        std::mem::forget(buf);
        Some(idx)
    }

    /// Returns buffer `idx` straight to the shared ring (the slow path, from any thread).
    ///
    /// # Safety
    /// `idx` must have been allocated from this pool and not freed since; the caller gives up
    /// every access to it.
    pub unsafe fn free_index_shared(&self, idx: u32) {
        // Cannot fail: the ring holds every buffer of the pool.
        let _ = self.sh().free.push(idx);
        // SAFETY: the buffer's reference (taken when a cache refilled with it) is released once;
        // this handle's own reference keeps the state alive.
        unsafe { release(self.shared, 1) }
    }
}

impl BufPool<Nic> {
    /// Counted CPU read of `dst.len()` bytes at `offset` of buffer `idx` (the index-level
    /// [`Buf::read_slow`]).
    ///
    /// # Safety
    /// The caller must own `idx` (allocated from this pool, not freed), so that no device write
    /// to it runs concurrently.
    pub unsafe fn read_slow_index(
        &self,
        idx: u32,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), AccessError> {
        let sh = self.sh();
        if idx >= sh.count
            || offset
                .checked_add(dst.len())
                .is_none_or(|e| e > sh.buf_size)
        {
            return Err(AccessError::Oversized {
                len: dst.len().min(u32::MAX as usize) as u32,
                max: sh.buf_size.saturating_sub(offset) as u32,
            });
        }
        if let Backing::NicMem(w) = &sh.region.inner.backing {
            w.device().count_read(dst.len());
        }
        if sh.aliased {
            dst.fill(0);
            return Ok(());
        }
        let src = sh.layout().ptr(idx).wrapping_add(offset);
        // SAFETY: `idx < count` and `offset + len <= buf_size`, so the range lies inside the
        // pool's memory; the caller owns the buffer, so nothing writes it meanwhile, and `dst` is
        // a distinct `&mut` borrow.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Counted CPU write of `src` at `offset` of buffer `idx` (the index-level
    /// [`Buf::write_slow`]; an aliased pool discards it, as it does device writes).
    ///
    /// # Safety
    /// The caller must own `idx` (allocated from this pool, not freed), so that no device access
    /// to it and no other write runs concurrently.
    pub unsafe fn write_slow_index(
        &self,
        idx: u32,
        offset: usize,
        src: &[u8],
    ) -> Result<(), AccessError> {
        let sh = self.sh();
        if idx >= sh.count
            || offset
                .checked_add(src.len())
                .is_none_or(|e| e > sh.buf_size)
        {
            return Err(AccessError::Oversized {
                len: src.len().min(u32::MAX as usize) as u32,
                max: sh.buf_size.saturating_sub(offset) as u32,
            });
        }
        if let Backing::NicMem(w) = &sh.region.inner.backing {
            w.device().count_write(src.len());
        }
        if sh.aliased {
            return Ok(());
        }
        let dst = sh.layout().ptr(idx).wrapping_add(offset);
        // SAFETY: `idx < count` and `offset + len <= buf_size`, so the range lies inside the
        // pool's memory; the caller owns the buffer, so nothing else reads or writes it
        // meanwhile, and `src` is a distinct borrow.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// A nicmem pool of `count` logical buffers that share the region's `region.len() / buf_size`
    /// slots: the paper artifact's payload aliasing. **Payload bytes are not preserved**: device
    /// writes are discarded and reads return zeros. Performance-only; logged when created.
    pub fn new_aliased(
        name: &str,
        region: Region,
        buf_size: usize,
        count: usize,
    ) -> Result<Self, PoolError> {
        let slots = region.len() / buf_size.max(1);
        if slots == 0 {
            return Err(PoolError::RegionTooSmall {
                need: buf_size,
                have: region.len(),
            });
        }
        eprintln!(
            "warning: nicmem pool '{name}' aliases {count} buffers onto {slots} slots: payload \
             bytes are NOT preserved (performance-only option)"
        );
        Self::build(name, region, buf_size, count, slots, true)
    }
}

impl<K: MemClass> Clone for BufPool<K> {
    fn clone(&self) -> Self {
        self.sh().take_refs(1);
        Self {
            shared: self.shared,
            _k: PhantomData,
        }
    }
}

impl<K: MemClass> Drop for BufPool<K> {
    fn drop(&mut self) {
        // SAFETY: this handle owns exactly one reference and is being destroyed.
        unsafe { release(self.shared, 1) }
    }
}

impl<K: MemClass> fmt::Debug for BufPool<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufPool")
            .field("stats", &self.stats())
            .finish()
    }
}

/// A per-core cache of free buffers: allocation and free are a push/pop on a local stack.
pub struct PoolCache<K: MemClass> {
    shared: NonNull<PoolShared>,
    stack: Vec<u32>,
    size: usize,
    slot: usize,
    _k: PhantomData<K>,
}

// SAFETY: the cache's local stack is owned; the shared state it points to is `Sync`. A cache may
// move to the thread that will use it.
unsafe impl<K: MemClass> Send for PoolCache<K> {}

impl<K: MemClass> PoolCache<K> {
    fn sh(&self) -> &PoolShared {
        // SAFETY: the cache owns one reference, so the shared state is alive.
        unsafe { self.shared.as_ref() }
    }

    #[inline]
    fn publish_len(&self) {
        self.sh().cache_len[self.slot].store(self.stack.len() as u32, Ordering::Relaxed);
    }

    #[cold]
    fn refill(&mut self) -> bool {
        // SAFETY: the cache owns one reference, so the shared state is alive.
        let sh = unsafe { self.shared.as_ref() };
        let want = self.size / 2;
        let mut got = 0;
        while got < want {
            match sh.free.pop() {
                Some(i) => {
                    self.stack.push(i);
                    got += 1;
                }
                None => break,
            }
        }
        if got == 0 {
            sh.alloc_failures.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        sh.take_refs(got);
        sh.note_high_water();
        true
    }

    #[cold]
    fn flush(&mut self, keep: usize) {
        let n = self.stack.len().saturating_sub(keep);
        if n == 0 {
            return;
        }
        {
            // SAFETY: the cache owns one reference, so the shared state is alive.
            let sh = unsafe { self.shared.as_ref() };
            for i in self.stack.drain(keep..) {
                // Cannot fail: the ring holds every buffer of the pool.
                let _ = sh.free.push(i);
            }
        }
        self.publish_len();
        // SAFETY: `n` buffers went back to the ring, releasing the `n` references they held; the
        // cache's own reference keeps the state alive.
        unsafe { release(self.shared, n) }
    }

    /// One buffer, or `None` (counted) when the pool is exhausted.
    #[inline]
    pub fn alloc(&mut self) -> Option<Buf<K>> {
        if self.stack.is_empty() && !self.refill() {
            return None;
        }
        let idx = self.stack.pop()?;
        self.publish_len();
        Some(Buf {
            shared: self.shared,
            idx,
            _k: PhantomData,
        })
    }

    /// Returns a buffer. A buffer of another pool is returned to its own pool (slow path).
    #[inline]
    pub fn free(&mut self, buf: Buf<K>) {
        if buf.shared != self.shared {
            drop(buf);
            return;
        }
        self.stack.push(buf.idx);
        std::mem::forget(buf);
        if self.stack.len() > self.size {
            self.flush(self.size / 2);
        } else {
            self.publish_len();
        }
    }

    /// The index-level fast path (VPP and ixy style: a packet is a buffer index, its bytes are
    /// reached through the pool's [`PoolLayout`]): one buffer index, or `None` (counted) when the
    /// pool is exhausted. The caller owns the index until it frees it.
    #[inline]
    pub fn alloc_index(&mut self) -> Option<u32> {
        if self.stack.is_empty() && !self.refill() {
            return None;
        }
        let idx = self.stack.pop()?;
        self.publish_len();
        Some(idx)
    }

    /// Fills `out` with buffer indices, refilling from the shared ring as needed; returns how
    /// many it wrote (fewer than `out.len()` only when the pool ran dry, which is counted once).
    #[inline]
    pub fn alloc_indices(&mut self, out: &mut [u32]) -> usize {
        let mut got = 0;
        while got < out.len() {
            if self.stack.is_empty() && !self.refill() {
                break;
            }
            let take = (out.len() - got).min(self.stack.len());
            let from = self.stack.len() - take;
            out[got..got + take].copy_from_slice(&self.stack[from..]);
            self.stack.truncate(from);
            got += take;
        }
        self.publish_len();
        got
    }

    /// Returns buffer indices to the cache (flushing half of it to the shared ring when it
    /// overflows).
    ///
    /// # Safety
    /// Every index must have been allocated from this cache's pool (by any of its caches or
    /// [`BufPool::alloc`] turned into an index) and not freed since; the caller gives up every
    /// access to those buffers.
    #[inline]
    pub unsafe fn free_indices(&mut self, idx: &[u32]) {
        self.stack.extend_from_slice(idx);
        if self.stack.len() > self.size {
            self.flush(self.size / 2);
        } else {
            self.publish_len();
        }
    }

    /// The layout of the cache's pool (for index-level access).
    pub fn layout(&self) -> PoolLayout {
        self.sh().layout()
    }

    /// True when `buf` belongs to this cache's pool.
    pub fn owns(&self, buf: &Buf<K>) -> bool {
        buf.shared == self.shared
    }

    /// Buffers parked in this cache.
    pub fn len(&self) -> usize {
        self.stack.len()
    }

    /// True when the cache holds no buffer.
    pub fn is_empty(&self) -> bool {
        self.stack.is_empty()
    }

    /// Bytes per buffer of the pool.
    pub fn buf_size(&self) -> usize {
        self.sh().buf_size
    }

    /// Id of the cache's pool.
    pub fn pool_id(&self) -> u32 {
        self.sh().id
    }
}

impl<K: MemClass> Drop for PoolCache<K> {
    fn drop(&mut self) {
        self.flush(0);
        self.sh().cache_used[self.slot].store(false, Ordering::Release);
        // SAFETY: the cache's own reference, released once.
        unsafe { release(self.shared, 1) }
    }
}

/// An owned buffer. Dropping it returns it to its pool's shared ring.
pub struct Buf<K: MemClass> {
    shared: NonNull<PoolShared>,
    idx: u32,
    _k: PhantomData<K>,
}

// SAFETY: a `Buf` exclusively owns its slot's bytes (no other handle to the same index exists while
// it lives), and the shared pool state is `Sync`; moving it to another thread is sound.
unsafe impl<K: MemClass> Send for Buf<K> {}
// SAFETY: `&Buf` only gives shared access to its own bytes.
unsafe impl<K: MemClass> Sync for Buf<K> {}

impl<K: MemClass> Buf<K> {
    #[inline]
    fn sh(&self) -> &PoolShared {
        // SAFETY: a live buffer holds one reference to its pool's shared state.
        unsafe { self.shared.as_ref() }
    }

    /// Index of the buffer in its pool.
    #[inline]
    pub fn index(&self) -> u32 {
        self.idx
    }

    /// Id of the owning pool.
    #[inline]
    pub fn pool_id(&self) -> u32 {
        self.sh().id
    }

    /// Bytes the buffer holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.sh().buf_size
    }

    /// Bus address of the first byte.
    #[inline]
    pub fn iova(&self) -> u64 {
        let sh = self.sh();
        sh.iova + sh.slot_offset(self.idx) as u64
    }

    /// Key of the region the buffer lives in.
    #[inline]
    pub fn key(&self) -> MemKey {
        self.sh().key
    }

    /// Host or nicmem.
    #[inline]
    pub fn kind(&self) -> RegionKind {
        K::KIND
    }

    /// If `[addr, addr + len)` under `key` lies inside this buffer, the offset of `addr` in it.
    /// The modeled NIC uses this to confirm a descriptor targets the buffer posted in its slot.
    #[inline]
    pub fn locate(&self, key: MemKey, addr: u64, len: u32) -> Result<usize, AccessError> {
        let base = self.iova();
        let end = addr.checked_add(len as u64);
        match end {
            Some(end)
                if key == self.key() && addr >= base && end <= base + self.capacity() as u64 =>
            {
                Ok((addr - base) as usize)
            }
            _ => Err(AccessError::NotPosted { key, addr, len }),
        }
    }

    /// Whether payload bytes in this buffer are preserved (false for aliased pools).
    #[inline]
    pub fn preserves_bytes(&self) -> bool {
        !self.sh().aliased
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), AccessError> {
        if offset
            .checked_add(len)
            .is_some_and(|e| e <= self.capacity())
        {
            Ok(())
        } else {
            Err(AccessError::Oversized {
                len: len.min(u32::MAX as usize) as u32,
                max: self.capacity().saturating_sub(offset) as u32,
            })
        }
    }

    /// Pointer to byte `offset` of this buffer.
    #[inline]
    fn ptr(&self, offset: usize) -> *mut u8 {
        let sh = self.sh();
        debug_assert!(offset <= sh.buf_size);
        // SAFETY: slot offset + `offset` <= pool bytes, which lie inside the region's memory
        // (checked at pool construction), so the pointer stays inside one allocation.
        unsafe { sh.data.as_ptr().add(sh.slot_offset(self.idx) + offset) }
    }

    /// The NIC's DMA write into this buffer (not a CPU access, so not counted as one).
    #[inline]
    pub fn device_write(&mut self, offset: usize, src: &[u8]) -> Result<(), AccessError> {
        self.check(offset, src.len())?;
        if self.sh().aliased {
            return Ok(());
        }
        // SAFETY: in bounds (checked), and `&mut self` proves exclusive ownership of the slot
        // (non-aliased pools give every buffer its own slot), so nothing else views these bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr(offset), src.len()) };
        Ok(())
    }

    /// The NIC's DMA read from this buffer.
    #[inline]
    pub fn device_read(&self, offset: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        self.check(offset, dst.len())?;
        if self.sh().aliased {
            dst.fill(0);
            return Ok(());
        }
        // SAFETY: in bounds (checked), and this handle owns the slot, so no `&mut` view of it
        // exists while `&self` is borrowed; `dst` is a distinct `&mut` so the ranges don't overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

impl<K: MemClass> Buf<K> {
    /// The NIC's DMA write of `src[..len]` at `offset`, like [`Buf::device_write`]; bytes of
    /// `src` past `len` (up to the next 16-byte boundary) may land past `offset + len` when the
    /// buffer has room, so short writes need no `memcpy` call. `src` must hold `len` bytes.
    #[inline]
    pub fn device_write_prefix(
        &mut self,
        offset: usize,
        src: &[u8],
        len: usize,
    ) -> Result<(), AccessError> {
        if len > src.len() {
            return Err(AccessError::Oversized {
                len: len.min(u32::MAX as usize) as u32,
                max: src.len().min(u32::MAX as usize) as u32,
            });
        }
        self.check(offset, len)?;
        if self.sh().aliased {
            return Ok(());
        }
        let room = self.capacity() - offset;
        // SAFETY: `offset + room` is the buffer's capacity (checked above), inside the pool's
        // region; `&mut self` proves exclusive ownership of the slot (non-aliased pools give
        // every buffer its own slot), so no other view of these bytes exists while `dst` lives.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.ptr(offset), room) };
        crate::copy::copy_prefix(dst, src, len);
        Ok(())
    }

    /// The NIC's DMA read of `len` bytes at `offset` into `dst`, like [`Buf::device_read`];
    /// bytes of the buffer past `offset + len` (up to the next 16-byte boundary) may land in
    /// `dst` past `len` when both have room. `dst` must hold `len` bytes.
    #[inline]
    pub fn device_read_prefix(
        &self,
        offset: usize,
        dst: &mut [u8],
        len: usize,
    ) -> Result<(), AccessError> {
        if len > dst.len() {
            return Err(AccessError::Oversized {
                len: len.min(u32::MAX as usize) as u32,
                max: dst.len().min(u32::MAX as usize) as u32,
            });
        }
        self.check(offset, len)?;
        if self.sh().aliased {
            dst[..len].fill(0);
            return Ok(());
        }
        let room = self.capacity() - offset;
        // SAFETY: in bounds as in `device_write_prefix`; this handle owns the slot and `&self`
        // rules out a live `&mut` view of it, and `dst` is a distinct `&mut` borrow.
        let src = unsafe { std::slice::from_raw_parts(self.ptr(offset), room) };
        crate::copy::copy_prefix(dst, src, len);
        Ok(())
    }
}

impl Buf<Host> {
    /// The buffer's bytes (its whole capacity).
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the handle owns the slot's `capacity()` bytes; `&self` rules out a live `&mut`
        // view for the slice's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr(0), self.capacity()) }
    }

    /// The buffer's bytes, writable.
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the handle owns the slot's `capacity()` bytes exclusively and `&mut self` rules
        // out any other view for the slice's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(0), self.capacity()) }
    }
}

impl Buf<Nic> {
    fn device(&self) -> Option<&crate::sram::NicMemShared> {
        match &self.sh().region.inner.backing {
            Backing::NicMem(w) => Some(w.device()),
            Backing::Host(_) => None,
        }
    }

    /// Counted CPU read of nicmem bytes (MMIO; ~0.05 B/cycle on real hardware). Never on the data
    /// path.
    pub fn read_slow(&self, offset: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        if let Some(d) = self.device() {
            d.count_read(dst.len());
        }
        self.device_read(offset, dst)
    }

    /// Counted CPU write into nicmem (MMIO, write-combined).
    pub fn write_slow(&mut self, offset: usize, src: &[u8]) -> Result<(), AccessError> {
        if let Some(d) = self.device() {
            d.count_write(src.len());
        }
        self.device_write(offset, src)
    }
}

impl<K: MemClass> Drop for Buf<K> {
    fn drop(&mut self) {
        // Cannot fail: the ring holds every buffer of the pool.
        let _ = self.sh().free.push(self.idx);
        // SAFETY: the buffer's reference is released once, after its last use of the state.
        unsafe { release(self.shared, 1) }
    }
}

impl<K: MemClass> fmt::Debug for Buf<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buf")
            .field("pool", &self.pool_id())
            .field("idx", &self.idx)
            .field("kind", &K::KIND)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::NicMem;
    use crate::region::ProtectionDomain;

    fn host_pool(n: usize) -> BufPool<Host> {
        let pd = ProtectionDomain::new();
        BufPool::new("t", Region::host(n * 256, pd), 256, n).unwrap()
    }

    #[test]
    fn exhaustion_is_counted_and_recovers() {
        let pool = host_pool(4);
        let bufs: Vec<_> = (0..4).map(|_| pool.alloc().unwrap()).collect();
        assert!(pool.alloc().is_none());
        assert_eq!(pool.stats().alloc_failures, 1);
        assert_eq!(pool.stats().in_use, 4);
        drop(bufs);
        assert_eq!(pool.stats().in_use, 0);
        assert!(pool.alloc().is_some());
        assert_eq!(pool.stats().high_water, 4);
    }

    #[test]
    fn cache_refills_and_flushes_in_bulk() {
        let pool = host_pool(64);
        let mut c = pool.cache(16).unwrap();
        let mut held = Vec::new();
        for _ in 0..64 {
            held.push(c.alloc().unwrap());
        }
        assert!(c.alloc().is_none());
        assert_eq!(pool.stats().in_use, 64);
        for b in held.drain(..) {
            c.free(b);
        }
        let s = pool.stats();
        assert_eq!(s.in_use, 0);
        assert!(s.cached <= 17, "cache bounded: {s:?}");
        drop(c);
        assert_eq!(pool.stats().available, 64);
    }

    #[test]
    fn buffers_are_disjoint_and_keep_bytes() {
        let pool = host_pool(8);
        let mut a = pool.alloc().unwrap();
        let mut b = pool.alloc().unwrap();
        a.bytes_mut().fill(0xaa);
        b.bytes_mut().fill(0xbb);
        assert!(a.bytes().iter().all(|&x| x == 0xaa));
        assert_ne!(a.iova(), b.iova());
        assert_eq!(a.locate(a.key(), a.iova() + 10, 20), Ok(10));
        assert!(a.locate(a.key(), b.iova(), 20).is_err());
        assert!(a.device_write(250, &[0; 10]).is_err());
    }

    #[test]
    fn pool_outlives_its_handle_while_buffers_live() {
        let pool = host_pool(2);
        let mut b = pool.alloc().unwrap();
        let c = pool.cache(4).unwrap();
        drop(pool);
        b.bytes_mut()[0] = 7;
        assert_eq!(b.bytes()[0], 7);
        drop(c);
        drop(b);
    }

    #[test]
    fn nic_pool_counts_cpu_access_and_rejects_host_region() {
        let dev = NicMem::new(64 << 10);
        let pd = ProtectionDomain::new();
        let region = dev.alloc(16 << 10, pd).unwrap();
        let pool: BufPool<Nic> = BufPool::new("nic", region, 2048, 8).unwrap();
        let mut b = pool.alloc().unwrap();
        b.device_write(0, b"payload").unwrap();
        let mut out = [0u8; 7];
        b.read_slow(0, &mut out).unwrap();
        assert_eq!(&out, b"payload");
        assert_eq!(dev.stats().cpu_bytes_read, 7);
        assert!(matches!(
            BufPool::<Nic>::new("bad", Region::host(4096, pd), 64, 4),
            Err(PoolError::WrongKind { .. })
        ));
        drop(b);
        drop(pool);
        assert_eq!(dev.stats().allocated, 0);
    }

    #[test]
    fn index_level_slow_writes_are_counted_and_bounded() {
        let dev = NicMem::new(64 << 10);
        let pd = ProtectionDomain::new();
        let pool: BufPool<Nic> =
            BufPool::new("nic", dev.alloc(16 << 10, pd).unwrap(), 2048, 8).unwrap();
        let idx = pool.alloc_index_shared().unwrap();
        // SAFETY: `idx` was just allocated here and is not shared.
        unsafe {
            pool.write_slow_index(idx, 100, b"quoted").unwrap();
            let mut out = [0u8; 6];
            pool.read_slow_index(idx, 100, &mut out).unwrap();
            assert_eq!(&out, b"quoted");
            assert!(pool.write_slow_index(idx, 2045, b"four").is_err());
            assert!(pool.write_slow_index(99, 0, b"x").is_err());
            pool.free_index_shared(idx);
        }
        assert_eq!(dev.stats().cpu_bytes_written, 6);
        assert_eq!(dev.stats().cpu_bytes_read, 6);
    }

    #[test]
    fn aliased_pool_is_bigger_than_its_memory_and_does_not_keep_bytes() {
        let dev = NicMem::new(8 << 10);
        let pd = ProtectionDomain::new();
        let pool =
            BufPool::<Nic>::new_aliased("alias", dev.alloc(4096, pd).unwrap(), 2048, 64).unwrap();
        let mut b: Vec<_> = (0..64).map(|_| pool.alloc().unwrap()).collect();
        b[0].device_write(0, b"x").unwrap();
        let mut out = [1u8; 1];
        b[0].device_read(0, &mut out).unwrap();
        assert_eq!(out, [0]);
        assert!(pool.stats().aliased);
    }

    /// A cache size beyond the pool (up to `usize::MAX`) is capped at the pool's buffers
    /// instead of overflowing: every buffer is still handed out once, then none.
    #[test]
    fn oversized_caches_are_capped_at_the_pool() {
        let pool = host_pool(4);
        let mut c = pool.cache(usize::MAX).unwrap();
        let bufs: Vec<_> = (0..4).map(|_| c.alloc().expect("a buffer")).collect();
        assert!(c.alloc().is_none());
        for b in bufs {
            c.free(b);
        }
        drop(c);
        assert_eq!(pool.stats().in_use, 0);
    }
}
