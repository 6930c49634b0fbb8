//! DPDK mempools: an owned pool that is freed once, after the port that used it ([`Mempool`]),
//! the pools of a queue, and the registry that tells a nicmem buffer from a host one by its pool
//! (and, for a spill pool, its address), which the Rx path and the packet owner ask per payload
//! segment.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use dpdk_sys as sys;

use super::eal::control_lock;
use super::error::{DpdkError, rte_errno, strerror};

/// What one mempool holds (for run summaries and leak checks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MempoolStats {
    /// Mempool name.
    pub name: String,
    /// `host`, `nicmem-emulated` or `nicmem` (device memory).
    pub kind: &'static str,
    /// Mbufs in the pool.
    pub count: u32,
    /// Mbufs out of the pool (held by software or posted to the NIC).
    pub in_use: u32,
}

/// An owned DPDK mempool; freed on drop (after the port using it is closed).
pub(crate) struct Mempool {
    mp: NonNull<sys::rte_mempool>,
    name: String,
    kind: &'static str,
    count: u32,
    /// Memory behind some of the pool's external buffers (a spill pool's host side); dropped
    /// after the pool is freed.
    keep: Option<Box<dyn Send + Sync>>,
}

// SAFETY: a mempool is a thread-safe DPDK object (MP/MC ring plus per-lcore caches); the handle
// only reads counters and frees the pool once, under the control lock.
unsafe impl Send for Mempool {}
// SAFETY: as above.
unsafe impl Sync for Mempool {}

impl Mempool {
    pub(crate) fn new(
        mp: NonNull<sys::rte_mempool>,
        name: String,
        kind: &'static str,
        count: u32,
    ) -> Self {
        Self {
            mp,
            name,
            kind,
            count,
            keep: None,
        }
    }

    /// Keeps `mem` (memory the pool's buffers live in) alive until the pool is freed.
    pub(crate) fn keeping(mut self, mem: Box<dyn Send + Sync>) -> Self {
        self.keep = Some(mem);
        self
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::rte_mempool {
        self.mp.as_ptr()
    }

    pub(crate) fn stats(&self) -> MempoolStats {
        // SAFETY: the pool is alive (owned by `self`); `rte_mempool_avail_count` sums the ring and
        // every lcore cache.
        let avail = unsafe { sys::rte_mempool_avail_count(self.mp.as_ptr()) };
        MempoolStats {
            name: self.name.clone(),
            kind: self.kind,
            count: self.count,
            in_use: self.count.saturating_sub(avail),
        }
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        unregister_nic_pool(self.mp.as_ptr());
        let _g = control_lock();
        // SAFETY: the pool was created by us and is freed once; the port that used it was closed
        // first (field order in `PortShared`), so no PMD still references it. Mbufs still held
        // by software at this point would dangle, which is why ports outlive their queues.
        unsafe { sys::rte_mempool_free(self.mp.as_ptr()) }
    }
}

/// Mempools whose buffers are nicmem (emulated or device), so that a received chain whose
/// second segment comes from one of them (e.g. looped back by `net_ring` from another queue) is
/// labelled nicmem. Append-only slots, cleared when the pool is freed.
static NIC_POOLS: [AtomicPtr<sys::rte_mempool>; 64] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; 64];
/// Whether the nicmem pools registered in [`NIC_POOLS`] are device memory.
static NIC_POOLS_DEVICE: [AtomicBool; 64] = [const { AtomicBool::new(false) }; 64];
/// For a spill pool registered in [`NIC_POOLS`], the buffer addresses of its nicmem side
/// `[lo, hi)` (its other buffers are host memory); `(0, 0)` when every buffer is nicmem.
static NIC_POOLS_WINDOW: [(AtomicU64, AtomicU64); 64] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; 64];

fn register_nic_pool(mp: *mut sys::rte_mempool, device: bool) {
    register_nic_pool_window(mp, device, (0, 0));
}

/// Registers a nicmem pool whose nicmem buffers are at addresses `window` (`(0, 0)`: all of
/// them; a spill pool has host buffers outside its window).
pub(crate) fn register_nic_pool_window(
    mp: *mut sys::rte_mempool,
    device: bool,
    window: (u64, u64),
) {
    for ((slot, dev), win) in NIC_POOLS
        .iter()
        .zip(&NIC_POOLS_DEVICE)
        .zip(&NIC_POOLS_WINDOW)
    {
        dev.store(device, Ordering::Relaxed);
        win.0.store(window.0, Ordering::Relaxed);
        win.1.store(window.1, Ordering::Relaxed);
        if slot
            .compare_exchange(
                std::ptr::null_mut(),
                mp,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            return;
        }
    }
    eprintln!("warning: more than 64 nicmem mempools; chains from extra pools are labelled host");
}

fn unregister_nic_pool(mp: *mut sys::rte_mempool) {
    for slot in &NIC_POOLS {
        let _ = slot.compare_exchange(
            mp,
            std::ptr::null_mut(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

/// `Some(is_device)` if `mp` is a registered nicmem pool.
#[inline]
pub(crate) fn nic_pool_kind(mp: *mut sys::rte_mempool) -> Option<bool> {
    NIC_POOLS
        .iter()
        .position(|s| s.load(Ordering::Relaxed) == mp)
        .map(|i| NIC_POOLS_DEVICE[i].load(Ordering::Relaxed))
}

/// `Some(is_device)` if the buffer at `addr` of pool `mp` is nicmem (the pool is a registered
/// nicmem pool and, for a spill pool, the address lies in its nicmem window).
#[inline]
pub(crate) fn nic_pool_kind_at(mp: *mut sys::rte_mempool, addr: u64) -> Option<bool> {
    let i = NIC_POOLS
        .iter()
        .position(|s| s.load(Ordering::Relaxed) == mp)?;
    let (lo, hi) = (
        NIC_POOLS_WINDOW[i].0.load(Ordering::Relaxed),
        NIC_POOLS_WINDOW[i].1.load(Ordering::Relaxed),
    );
    ((lo, hi) == (0, 0) || (lo..hi).contains(&addr))
        .then(|| NIC_POOLS_DEVICE[i].load(Ordering::Relaxed))
}

static NEXT_POOL: AtomicU32 = AtomicU32::new(0);

/// A process-unique mempool name for queue `q` of port `port` (`what` tells the pools of a
/// queue apart).
pub(crate) fn pool_name(port: u16, q: u16, what: char) -> CString {
    let n = NEXT_POOL.fetch_add(1, Ordering::Relaxed);
    // Mempool names are at most 25 characters.
    CString::new(format!("nm{n}p{port}q{q}{what}")).expect("no NUL in pool name")
}

/// A pool of `n` host mbufs with `data_room` bytes each.
pub(crate) fn create_pool(
    port: u16,
    q: u16,
    what: char,
    n: u32,
    cache: u32,
    data_room: u16,
    socket: i32,
) -> Result<Mempool, DpdkError> {
    let name = pool_name(port, q, what);
    let cache = cache.min(512).min(n / 2);
    // SAFETY: `name` is a valid C string; the other arguments are plain values. DPDK copies
    // the name.
    let mp = unsafe {
        sys::nmdp_pktmbuf_pool_create_packed(name.as_ptr(), n, cache, 0, data_room, socket)
    };
    let mp = NonNull::new(mp).ok_or_else(|| {
        let e = rte_errno();
        DpdkError::Mempool(format!(
            "cannot create {n} mbufs of {data_room} B for port {port} queue {q}: {} (raise EAL \
             -m, or lower dpdk.mbufs / rx_desc)",
            strerror(e)
        ))
    })?;
    Ok(Mempool::new(
        mp,
        name.to_string_lossy().into_owned(),
        "host",
        n,
    ))
}

/// A pinned-external-buffer pool of `n` mbufs whose data buffers are `elt` bytes each, laid out
/// back to back from `base` (host VA of emulated nicmem, or a device-memory window offset).
#[allow(clippy::too_many_arguments)]
pub(crate) fn create_extbuf_pool(
    port: u16,
    q: u16,
    n: u32,
    elt: u16,
    base: *mut u8,
    iova: u64,
    len: usize,
    socket: i32,
    device: bool,
) -> Result<Mempool, DpdkError> {
    let name = pool_name(port, q, 'n');
    let ext = sys::rte_pktmbuf_extmem {
        buf_ptr: base.cast(),
        buf_iova: iova,
        buf_len: len,
        elt_size: elt,
    };
    // SAFETY: `ext` describes memory that lives as long as the pool: the caller keeps the
    // emulated region (or the device window) alive in the same `PortShared`, dropped after the
    // pool. The pool never touches buffer bytes; only the PMD and our Rx copy do. Cache 0: a few
    // nicmem buffers must not be hoarded in per-lcore caches.
    let mp = unsafe {
        sys::rte_pktmbuf_pool_create_extbuf(name.as_ptr(), n, 0, 0, elt, socket, &ext, 1)
    };
    let mp = NonNull::new(mp).ok_or_else(|| {
        let e = rte_errno();
        DpdkError::Mempool(format!(
            "cannot create the nicmem payload pool ({n} x {elt} B over {len} B) for port {port} \
             queue {q}: {}",
            strerror(e)
        ))
    })?;
    register_nic_pool(mp.as_ptr(), device);
    Ok(Mempool::new(
        mp,
        name.to_string_lossy().into_owned(),
        if device { "nicmem" } else { "nicmem-emulated" },
        n,
    ))
}

/// The pools of one queue.
pub(crate) struct QueuePools {
    /// Rx buffers (whole frames; on a hardware split the header pool is `hdr`).
    pub(crate) rx: Mempool,
    /// Header mbufs (split modes).
    pub(crate) hdr: Option<Mempool>,
    /// Host payload mbufs of a hardware split (secondary ring).
    pub(crate) host_payload: Option<Mempool>,
    /// nicmem payload mbufs (primary ring).
    pub(crate) nic: Option<Mempool>,
}

/// Payload buffer size: the largest payload behind a `split`-byte header, rounded to 64 B.
pub(crate) fn nic_buffer_size(max_frame: usize, split: usize) -> usize {
    (max_frame.saturating_sub(split)).max(64).div_ceil(64) * 64
}
