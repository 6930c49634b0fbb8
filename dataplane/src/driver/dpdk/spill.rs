//! The spill payload pool: primary (nicmem) and secondary (host) Rx payload buffers behind one
//! DPDK mempool.
//!
//! A hardware buffer split (mlx5 `RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT`) draws every payload segment
//! from one mempool, so stock DPDK 22.11 has no second ring to spill to when on-NIC memory runs
//! out. The paper's split rings are recovered with a mempool driver of our own (`nmdp_spill`, in
//! `dpdk-sys`'s C shim): the pool's mbufs are pinned external buffers over two regions, the
//! device-memory window first and a host region after it; allocation takes buffers from the
//! nicmem side and only when none is left from the host side (counted as spilled); a freed
//! buffer goes back to the side its address belongs to, so nicmem is preferred again as soon as
//! Tx completions return it. The Rx path labels each payload by its buffer address (primary if
//! inside the window, secondary otherwise).
//!
//! The pool is built with `rte_pktmbuf_pool_create_extbuf` (which lays the external buffers out
//! and attaches them); that function takes the process's "best" mempool ops, so the driver name
//! is set as the user's mempool ops around the call and the previous choice restored.
//!
//! The pool has no per-lcore cache: a cache would hand out whichever buffers were freed last,
//! host or nicmem, instead of nicmem first.

use std::ffi::{CStr, c_void};
use std::ptr::NonNull;

use dpdk_sys as sys;

use super::error::{DpdkError, rte_errno, strerror};
use super::mempool::{Mempool, pool_name};

/// Counters of a spill pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpillStats {
    /// nicmem buffers free in the pool.
    pub nic_free: u32,
    /// Host buffers free in the pool.
    pub host_free: u32,
    /// Buffers handed out from the host side since the pool was created (spills).
    pub spilled: u64,
}

/// A region of payload buffers: its address as the mbufs see it, its IOVA, and its length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExtRegion {
    pub(crate) base: *mut u8,
    pub(crate) iova: u64,
    pub(crate) len: usize,
}

/// Host memory for the secondary buffers, from DPDK's allocator (DMA-able, IOVA known); freed
/// after the pool that uses it.
pub(crate) struct HostMem(NonNull<c_void>);

// SAFETY: plain memory owned by this handle; DPDK's allocator may free it from any thread.
unsafe impl Send for HostMem {}
// SAFETY: the handle itself is never used to access the bytes.
unsafe impl Sync for HostMem {}

impl Drop for HostMem {
    fn drop(&mut self) {
        // SAFETY: allocated by `rte_malloc_socket`, freed once; the pool over it is gone (the
        // owning `Mempool` frees the pool before dropping this field).
        unsafe { sys::rte_free(self.0.as_ptr()) }
    }
}

const OPS_NAME: &CStr = c"nmdp_spill";

/// Builds a spill pool for `port`/`q`: every `elt`-byte buffer of `nic` (primary), then
/// `host_buffers` host buffers (secondary). The caller holds the DPDK control lock (pool
/// creation and the process-wide mempool-ops choice are not thread-safe).
pub(crate) fn create_spill_pool(
    port: u16,
    q: u16,
    elt: u16,
    nic: ExtRegion,
    host_buffers: u32,
    socket: i32,
    device: bool,
) -> Result<Mempool, DpdkError> {
    let nic_buffers = (nic.len / elt as usize) as u32;
    if nic_buffers == 0 || host_buffers == 0 {
        return Err(DpdkError::Mempool(format!(
            "spill pool for port {port} queue {q}: needs at least one nicmem and one host buffer \
             of {elt} B (nicmem {} B, host buffers {host_buffers})",
            nic.len
        )));
    }
    // SAFETY: registers a static ops table once per process (idempotent in the shim).
    let rc = unsafe { sys::nmdp_spill_register() };
    if rc < 0 {
        return Err(DpdkError::Mempool(format!(
            "cannot register the nmdp_spill mempool driver: {}",
            strerror(-rc)
        )));
    }
    let host_len = host_buffers as usize * elt as usize;
    // SAFETY: plain allocation from DPDK's heap; NULL on failure.
    let host = unsafe { sys::rte_malloc_socket(c"nmdp_spill_host".as_ptr(), host_len, 64, socket) };
    let host = HostMem(NonNull::new(host).ok_or_else(|| {
        DpdkError::Mempool(format!(
            "cannot allocate {host_len} B of host payload buffers for port {port} queue {q} \
             (raise EAL -m)"
        ))
    })?);
    // SAFETY: `host` is a live DPDK heap allocation.
    let host_iova = unsafe { sys::rte_malloc_virt2iova(host.0.as_ptr()) };
    let ext = [
        sys::rte_pktmbuf_extmem {
            buf_ptr: nic.base.cast(),
            buf_iova: nic.iova,
            buf_len: nic_buffers as usize * elt as usize,
            elt_size: elt,
        },
        sys::rte_pktmbuf_extmem {
            buf_ptr: host.0.as_ptr(),
            buf_iova: host_iova,
            buf_len: host_len,
            elt_size: elt,
        },
    ];
    let n = nic_buffers + host_buffers;
    let name = pool_name(port, q, 's');
    // SAFETY: reads the process's current user mempool-ops name (NULL if none was chosen); the
    // string lives in a memzone for the process's lifetime.
    let previous = unsafe { sys::rte_mbuf_user_mempool_ops() };
    // SAFETY: `OPS_NAME` is a valid C string; DPDK copies it into its memzone.
    unsafe { sys::rte_mbuf_set_user_mempool_ops(OPS_NAME.as_ptr()) };
    // SAFETY: `ext` describes memory that outlives the pool: the device window (or emulated
    // region) is kept by the caller's `PortShared`, the host region by the returned `Mempool`,
    // which frees the pool first. Cache 0 (see the module docs).
    let mp = unsafe {
        sys::rte_pktmbuf_pool_create_extbuf(name.as_ptr(), n, 0, 0, elt, socket, ext.as_ptr(), 2)
    };
    let err = rte_errno();
    // Restore the previous choice (when there was none: the platform's, else DPDK's default,
    // which is what "best" picks without a user choice).
    // SAFETY: every candidate is a valid C string owned by DPDK or static.
    unsafe {
        let platform = sys::rte_mbuf_platform_mempool_ops();
        let back = match (previous.is_null(), platform.is_null()) {
            (false, _) => previous,
            (true, false) => platform,
            (true, true) => c"ring_mp_mc".as_ptr(),
        };
        sys::rte_mbuf_set_user_mempool_ops(back);
    }
    let mp = NonNull::new(mp).ok_or_else(|| {
        DpdkError::Mempool(format!(
            "cannot create the spill payload pool ({nic_buffers} nicmem + {host_buffers} host x \
             {elt} B) for port {port} queue {q}: {}",
            strerror(err)
        ))
    })?;
    let lo = nic.base as u64;
    let hi = lo + nic_buffers as u64 * elt as u64;
    // SAFETY: `mp` was just created with the nmdp_spill driver and nobody uses it yet.
    let rc = unsafe { sys::nmdp_spill_set_window(mp.as_ptr(), lo, hi) };
    if rc < 0 {
        // SAFETY: the pool was created above and nothing references it; freed once, here (not
        // through `Mempool`, whose drop takes the control lock our caller holds).
        unsafe { sys::rte_mempool_free(mp.as_ptr()) };
        return Err(DpdkError::Mempool(format!(
            "spill pool for port {port} queue {q}: {}",
            strerror(-rc)
        )));
    }
    Ok(Mempool::new(
        mp,
        name.to_string_lossy().into_owned(),
        if device {
            "nicmem+host"
        } else {
            "nicmem-emulated+host"
        },
        n,
    )
    .keeping(Box::new(host)))
}

/// The counters of `mp` if it is a spill pool.
pub(crate) fn spill_stats(mp: *mut sys::rte_mempool) -> Option<SpillStats> {
    if mp.is_null() {
        return None;
    }
    let mut s = sys::nmdp_spill_stats::default();
    // SAFETY: `mp` is a live mempool; the shim checks its driver before reading pool data.
    (unsafe { sys::nmdp_spill_stats(mp, &mut s) } == 0).then_some(SpillStats {
        nic_free: s.nic_free,
        host_free: s.host_free,
        spilled: s.spilled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::dpdk::eal::control_lock;
    use crate::driver::dpdk::test_eal as eal;

    fn alloc(mp: *mut sys::rte_mempool) -> Option<*mut sys::rte_mbuf> {
        // SAFETY: `mp` is a live pktmbuf pool.
        let m = unsafe { sys::rte_pktmbuf_alloc(mp) };
        (!m.is_null()).then_some(m)
    }

    fn addr(m: *mut sys::rte_mbuf) -> u64 {
        // SAFETY: a live mbuf from the pool.
        unsafe { (*m).buf_addr as u64 }
    }

    fn free(m: *mut sys::rte_mbuf) {
        // SAFETY: an mbuf this test owns, freed once.
        unsafe { sys::rte_pktmbuf_free(m) }
    }

    /// The pool hands out nicmem buffers first, spills to host buffers only when none is left,
    /// takes each buffer back to its own side, and fails cleanly when both are empty; the
    /// process's mempool-ops choice is restored.
    #[test]
    fn spill_pool_prefers_nicmem_and_spills_to_host() {
        eal();
        let _g = control_lock();
        // SAFETY: reading the process's user mempool-ops choice.
        let before = unsafe { sys::rte_mbuf_best_mempool_ops() };
        // SAFETY: as above; a C string owned by DPDK.
        let before = unsafe { CStr::from_ptr(before) }.to_owned();
        const ELT: u16 = 2048;
        let mut nic_mem = vec![0u8; 4 * ELT as usize];
        let lo = nic_mem.as_mut_ptr() as u64;
        let hi = lo + nic_mem.len() as u64;
        let region = ExtRegion {
            base: nic_mem.as_mut_ptr(),
            iova: lo,
            len: nic_mem.len(),
        };
        let pool = create_spill_pool(9, 0, ELT, region, 3, 0, false).expect("spill pool");
        // SAFETY: as above.
        let after = unsafe { CStr::from_ptr(sys::rte_mbuf_best_mempool_ops()) }.to_owned();
        assert_eq!(before, after, "mempool ops choice restored");
        let mp = pool.as_ptr();
        let s = spill_stats(mp).expect("a spill pool");
        assert_eq!((s.nic_free, s.host_free, s.spilled), (4, 3, 0));

        let nic: Vec<_> = (0..4).map(|_| alloc(mp).expect("nicmem buffer")).collect();
        assert!(
            nic.iter().all(|&m| (lo..hi).contains(&addr(m))),
            "nicmem first"
        );
        let h = alloc(mp).expect("host buffer after nicmem ran out");
        assert!(!(lo..hi).contains(&addr(h)), "spilled to host");
        assert_eq!(spill_stats(mp).unwrap().spilled, 1);

        // A nicmem buffer coming back is preferred again over the remaining host buffers.
        free(nic[0]);
        let again = alloc(mp).expect("buffer");
        assert!((lo..hi).contains(&addr(again)), "nicmem preferred again");
        let h2 = alloc(mp).expect("host");
        let h3 = alloc(mp).expect("host");
        assert!(
            alloc(mp).is_none(),
            "both sides empty: allocation fails, no panic"
        );
        let s = spill_stats(mp).unwrap();
        assert_eq!((s.nic_free, s.host_free, s.spilled), (0, 0, 3));

        for m in nic.into_iter().skip(1).chain([h, again, h2, h3]) {
            free(m);
        }
        let s = spill_stats(mp).unwrap();
        assert_eq!(
            (s.nic_free, s.host_free),
            (4, 3),
            "each buffer back on its own side"
        );
        assert_eq!(pool.stats().in_use, 0);
        // Freeing a pool takes the control lock.
        drop(_g);
        drop(pool);
        drop(nic_mem);
    }

    #[test]
    fn spill_pool_needs_both_sides() {
        eal();
        let _g = control_lock();
        let mut mem = vec![0u8; 1024];
        let region = ExtRegion {
            base: mem.as_mut_ptr(),
            iova: mem.as_ptr() as u64,
            len: mem.len(),
        };
        let e = create_spill_pool(9, 1, 2048, region, 4, 0, false)
            .err()
            .expect("too small");
        assert!(e.to_string().contains("at least one nicmem"), "{e}");
    }
}
