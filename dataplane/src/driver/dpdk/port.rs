//! [`DpdkPort`]: one ethdev, probed and configured for a datapath mode, handing out one
//! [`DpdkQueue`] per worker.

use std::ffi::{CStr, CString};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use dpdk_sys as sys;
use nicmem::{NicMem, ProtectionDomain, Region};

use super::eal::{Eal, control_lock};
use super::mlx5;
use super::queue::{DpdkQueue, QueueSetup, RxStop};
use super::spill::{ExtRegion, HostMem, create_spill_pool};
use super::{DpdkError, rte_errno, strerror};
use crate::mode::DatapathMode;
use crate::port::{Capabilities, Port, Queue};
use crate::verdict::Verdict;

/// Where payload buffers of the nicmem modes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NicmemSource {
    /// Host memory from a modeled [`NicMem`] of this many bytes, labelled nicmem: the emulation
    /// used on PMDs without device memory (every vdev). Refused on mlx5, which must use device
    /// memory.
    Emulated {
        /// Bytes of emulated nicmem for the port (shared by its queues).
        bytes: usize,
    },
    /// mlx5 device memory (MEMIC) prepared before EAL init (feature `mlx5`): the payload pool
    /// covers the device-memory window that the interposer maps to the DM key.
    Device(mlx5::DeviceWindow),
}

/// Parameters of one DPDK port.
#[derive(Clone, Debug, PartialEq)]
pub struct DpdkPortConfig {
    /// The device: a vdev (`net_null0,size=64,copy=0`) probed at run time if it does not exist
    /// yet, or the name/PCI address of a device EAL already probed (`0000:08:00.0`), optionally
    /// with devargs after a comma.
    pub devargs: String,
    /// Index of this port in the run (the `port` of received packets' metadata, and what
    /// verdicts name).
    pub index: u16,
    /// Run port index received packets are sent to unless an NF decides otherwise.
    pub tx_port: u16,
    /// Datapath mode.
    pub mode: DatapathMode,
    /// Header segment size in the split modes (>= 66 on mlx5 in nicmem modes).
    pub split_offset: usize,
    /// Queue pairs (one per worker).
    pub queues: u16,
    /// Rx descriptors per queue (doubled when the hardware splits: descriptors count segments).
    pub rx_desc: u16,
    /// Tx descriptors per queue.
    pub tx_desc: u16,
    /// Burst size.
    pub burst: usize,
    /// Largest frame without FCS.
    pub max_frame: usize,
    /// Mbufs per host pool per queue (None: enough for both rings, bursts in flight and caches).
    pub mbufs: Option<u32>,
    /// Per-lcore mempool cache size of host pools.
    pub cache_size: u32,
    /// Where nicmem payloads go in the nicmem modes.
    pub nicmem: NicmemSource,
    /// Cap on nicmem payload buffers per queue.
    pub nicmem_buffers: Option<u32>,
    /// Stop receiving after this many packets per queue (None: no limit).
    pub rx_limit: Option<u64>,
    /// Report the queue idle after Rx has been empty for a while (finite sources such as a pcap
    /// file). None: automatic (true for `rx_pcap=` without `infinite_rx=1`).
    pub stop_when_idle: Option<bool>,
    /// Pin the worker using queue `i` to core `worker_cores[i]` (empty: no pinning).
    pub worker_cores: Vec<usize>,
}

impl Default for DpdkPortConfig {
    fn default() -> Self {
        Self {
            devargs: "net_null0".into(),
            index: 0,
            tx_port: 0,
            mode: DatapathMode::Host,
            split_offset: 64,
            queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            burst: 32,
            max_frame: 1514,
            mbufs: None,
            cache_size: 256,
            nicmem: NicmemSource::Emulated { bytes: 256 << 10 },
            nicmem_buffers: None,
            rx_limit: None,
            stop_when_idle: None,
            worker_cores: Vec::new(),
        }
    }
}

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
    /// Host memory behind some of the pool's external buffers (spill pools); dropped after the
    /// pool is freed.
    host_mem: Option<HostMem>,
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
            host_mem: None,
        }
    }

    /// Keeps `mem` alive until the pool is freed.
    pub(crate) fn with_host_mem(mut self, mem: HostMem) -> Self {
        self.host_mem = Some(mem);
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

pub(crate) fn pool_name(port: u16, q: u16, what: char) -> CString {
    let n = NEXT_POOL.fetch_add(1, Ordering::Relaxed);
    // Mempool names are at most 25 characters.
    CString::new(format!("nm{n}p{port}q{q}{what}")).expect("no NUL in pool name")
}

fn create_pool(
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
fn create_extbuf_pool(
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

/// State shared by a port and its queues; the port is stopped and closed when the last of them
/// is gone, then its pools are freed, then its (emulated) nicmem.
pub(crate) struct PortShared {
    pub(crate) port_id: u16,
    pub(crate) name: String,
    pub(crate) driver: String,
    probed: Option<CString>,
    pub(crate) pools: Vec<QueuePools>,
    pub(crate) nicmem: Option<NicMem>,
    _regions: Vec<Region>,
    _window: Option<mlx5::DeviceWindow>,
}

impl Drop for PortShared {
    fn drop(&mut self) {
        let _g = control_lock();
        // SAFETY: the port was started by us; every queue handle is gone (this is the last
        // reference), so no thread polls it. Close returns mbufs held in its rings to the pools.
        unsafe {
            sys::rte_eth_dev_stop(self.port_id);
            sys::rte_eth_dev_close(self.port_id);
            if let Some(name) = &self.probed {
                rte_dev_remove_by_name(name);
            }
        }
    }
}

/// Detaches a device we probed (`rte_eal_hotplug_remove`), so that its name can be probed
/// again (tests open the same vdev names many times in one process).
///
/// # Safety
/// EAL must be initialised, the device closed, and no handle to it left.
unsafe fn rte_dev_remove_by_name(name: &CStr) {
    let bus = if name.to_bytes().starts_with(b"net_") || name.to_bytes().starts_with(b"eth_") {
        c"vdev"
    } else {
        c"pci"
    };
    // SAFETY: per the caller's contract; both strings are NUL-terminated.
    unsafe {
        sys::rte_eal_hotplug_remove(bus.as_ptr(), name.as_ptr());
    }
}

/// Undoes a failed port setup: stops and closes the port (and removes it if we probed it).
struct SetupGuard {
    port_id: u16,
    probed: Option<CString>,
    armed: bool,
}

impl Drop for SetupGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // SAFETY: setup failed part-way; the port has no queue handles yet. Stopping a port that
        // was not started is harmless; closing releases queue resources before the pools (still
        // alive: dropped after this guard) are freed.
        unsafe {
            sys::rte_eth_dev_stop(self.port_id);
            if let Some(p) = &self.probed {
                sys::rte_eth_dev_close(self.port_id);
                rte_dev_remove_by_name(p);
            }
        }
    }
}

/// A DPDK port in a datapath mode.
pub struct DpdkPort {
    shared: Arc<PortShared>,
    caps: Capabilities,
    queues: Vec<DpdkQueue>,
    stop: RxStop,
    hw_split: bool,
    emulated_nicmem: bool,
}

impl DpdkPort {
    /// Finds or probes the device, checks that `cfg.mode` can run on it, creates the pools,
    /// configures `cfg.queues` queue pairs and starts the port. EAL must be initialised.
    pub fn open(cfg: &DpdkPortConfig) -> Result<Self, DpdkError> {
        if Eal::get().is_none() {
            return Err(DpdkError::Eal(
                "not initialised: call Eal::init(eal_args) before opening ports".into(),
            ));
        }
        let _g = control_lock();
        let name = cfg
            .devargs
            .split(',')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        if name.is_empty() {
            return Err(DpdkError::Port("empty device name in devargs".into()));
        }
        let cname = CString::new(name.clone())
            .map_err(|_| DpdkError::Port(format!("bad device name `{name}`")))?;
        let mut port_id = 0u16;
        let mut probed = None;
        // SAFETY: valid C string and out-pointer.
        let found = unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut port_id) } == 0;
        if !found {
            let dargs = CString::new(cfg.devargs.clone())
                .map_err(|_| DpdkError::Port("devargs contain a NUL byte".into()))?;
            // SAFETY: valid C string; EAL is initialised; control calls are serialised.
            let rc = unsafe { sys::rte_dev_probe(dargs.as_ptr()) };
            if rc < 0 {
                return Err(DpdkError::Port(format!(
                    "cannot probe `{}`: {} (is it a vdev like net_null0 / net_ring0 / \
                     net_pcap0,rx_pcap=..., or a device EAL can see?)",
                    cfg.devargs,
                    strerror(-rc)
                )));
            }
            // SAFETY: as above.
            if unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut port_id) } != 0 {
                return Err(DpdkError::Port(format!(
                    "probed `{}` but it created no ethdev named `{name}`",
                    cfg.devargs
                )));
            }
            probed = Some(cname.clone());
        }
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: valid port id and out-pointer.
        let rc = unsafe { sys::rte_eth_dev_info_get(port_id, &mut info) };
        if rc != 0 {
            return Err(DpdkError::Port(format!(
                "rte_eth_dev_info_get({name}): {}",
                strerror(-rc)
            )));
        }
        let driver = if info.driver_name.is_null() {
            "unknown".to_string()
        } else {
            // SAFETY: a NUL-terminated static string owned by the PMD.
            unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        Self::configure(cfg, port_id, &name, &driver, &info, probed)
    }

    fn configure(
        cfg: &DpdkPortConfig,
        port_id: u16,
        name: &str,
        driver: &str,
        info: &sys::rte_eth_dev_info,
        probed: Option<CString>,
    ) -> Result<Self, DpdkError> {
        let q = cfg.queues.max(1);
        let mut pools: Vec<QueuePools> = Vec::with_capacity(q as usize);
        // Declared after `pools`, so dropped before them: on any error below the port is stopped
        // and closed (releasing the mbufs its queues hold) before the pools are freed.
        let mut guard = SetupGuard {
            port_id,
            probed: probed.clone(),
            armed: true,
        };
        if q > info.max_rx_queues || q > info.max_tx_queues {
            return Err(DpdkError::Port(format!(
                "{name} ({driver}) has at most {} Rx / {} Tx queues; asked for {q} (one per worker)",
                info.max_rx_queues, info.max_tx_queues
            )));
        }
        let is_mlx5 = driver.contains("mlx5");
        let mode = cfg.mode;
        let split = cfg.split_offset;
        let hw_split_capable = info.rx_offload_capa & sys::NMDP_RX_OFFLOAD_BUFFER_SPLIT != 0
            && info.rx_seg_capa.max_nseg >= 2
            && info.rx_seg_capa.multi_pools() != 0;
        let hw_split = mode.splits() && hw_split_capable;
        let mut window = None;
        let mut emulated = false;
        if mode.uses_nicmem() {
            match (&cfg.nicmem, is_mlx5) {
                (NicmemSource::Device(w), _) => {
                    if !hw_split {
                        return Err(DpdkError::Unsupported(format!(
                            "{name} ({driver}): device nicmem needs hardware Rx buffer split, \
                             which this port does not offer; modes host and split still work"
                        )));
                    }
                    if split < mlx5::MIN_HEADER_SEGMENT {
                        return Err(DpdkError::Unsupported(format!(
                            "{name}: split_offset {split} is below {} B: mlx5 rounds inline sizes \
                             to 18+16k, so a smaller header segment would make the NIC read \
                             payload bytes from nicmem into the descriptor",
                            mlx5::MIN_HEADER_SEGMENT
                        )));
                    }
                    window = Some(w.clone());
                }
                (NicmemSource::Emulated { .. }, true) => {
                    return Err(DpdkError::Unsupported(format!(
                        "{name} is an mlx5 port: mode {mode} needs on-NIC device memory (MEMIC), \
                         which {}. nmdp never emulates nicmem in host memory on a real NIC. Modes \
                         host and split work on this port",
                        if cfg!(feature = "mlx5") {
                            "was not set up for it (configure [dpdk] mlx5_nicmem for this device)"
                        } else {
                            "needs a build with `--features mlx5` (apt-get install libibverbs-dev)"
                        }
                    )));
                }
                (NicmemSource::Emulated { bytes }, false) => {
                    if *bytes == 0 {
                        return Err(DpdkError::Unsupported(format!(
                            "mode {mode} on {name}: emulated nicmem size is 0"
                        )));
                    }
                    emulated = true;
                }
            }
        }

        // SAFETY: valid port id.
        let socket = unsafe { sys::rte_eth_dev_socket_id(port_id) }.max(0);
        let rss = q > 1 && info.flow_type_rss_offloads != 0;
        let mut conf = sys::rte_eth_conf::default();
        if rss {
            conf.rxmode.mq_mode = sys::NMDP_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf =
                (sys::NMDP_RSS_IP | sys::NMDP_RSS_UDP | sys::NMDP_RSS_TCP)
                    & info.flow_type_rss_offloads;
            if info.rx_offload_capa & sys::NMDP_RX_OFFLOAD_RSS_HASH != 0 {
                conf.rxmode.offloads |= sys::NMDP_RX_OFFLOAD_RSS_HASH;
            }
        }
        if hw_split {
            conf.rxmode.offloads |=
                sys::NMDP_RX_OFFLOAD_BUFFER_SPLIT | sys::NMDP_RX_OFFLOAD_SCATTER;
        }
        if cfg.max_frame > 1514 {
            conf.rxmode.mtu = (cfg.max_frame - 14) as u32;
            if info.rx_offload_capa & sys::NMDP_RX_OFFLOAD_SCATTER != 0 {
                conf.rxmode.offloads |= sys::NMDP_RX_OFFLOAD_SCATTER;
            }
        }
        if info.tx_offload_capa & sys::NMDP_TX_OFFLOAD_MULTI_SEGS != 0 {
            conf.txmode.offloads |= sys::NMDP_TX_OFFLOAD_MULTI_SEGS;
        }
        // SAFETY: valid port id and config.
        let rc = unsafe { sys::rte_eth_dev_configure(port_id, q, q, &conf) };
        if rc != 0 {
            return Err(DpdkError::Port(format!(
                "rte_eth_dev_configure({name}, {q} queues, offloads rx {:#x} tx {:#x}): {}",
                conf.rxmode.offloads,
                conf.txmode.offloads,
                strerror(-rc)
            )));
        }
        let mut nb_rx = if hw_split {
            mlx5::split_rx_descriptors(cfg.rx_desc)
        } else {
            cfg.rx_desc
        };
        let mut nb_tx = cfg.tx_desc;
        // SAFETY: valid port id and out-pointers.
        unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &mut nb_rx, &mut nb_tx) };

        // Emulated nicmem for the whole port, shared by its queues.
        let nic_elt = nic_buffer_size(cfg.max_frame, split);
        let mut nicmem = None;
        let mut regions = Vec::new();
        let nic_per_queue: u32 = match (&cfg.nicmem, mode.uses_nicmem()) {
            (_, false) => 0,
            (NicmemSource::Emulated { bytes }, true) => {
                let per_q = (*bytes / q as usize / nic_elt) as u32;
                cfg.nicmem_buffers.map_or(per_q, |c| c.min(per_q))
            }
            (NicmemSource::Device(w), true) => {
                let per_q = mlx5::payload_buffers(w.len, nic_elt) / q as u32;
                cfg.nicmem_buffers.map_or(per_q, |c| c.min(per_q))
            }
        };
        if mode.uses_nicmem() && nic_per_queue == 0 {
            return Err(DpdkError::Unsupported(format!(
                "mode {mode} on {name}: the nicmem is too small for one {nic_elt} B payload buffer \
                 per queue"
            )));
        }
        if emulated {
            let bytes = match &cfg.nicmem {
                NicmemSource::Emulated { bytes } => *bytes,
                NicmemSource::Device(_) => 0,
            };
            nicmem = Some(
                NicMem::try_new(bytes)
                    .map_err(|e| DpdkError::Mempool(format!("emulated nicmem for {name}: {e}")))?,
            );
        }

        let headroom = sys::NMDP_PKTMBUF_HEADROOM;
        let frame_room = (cfg.max_frame as u32).max(2048) + headroom;
        let hdr_room = headroom + (split as u32).div_ceil(64) * 64;
        let n = cfg.mbufs.unwrap_or_else(|| {
            nb_rx as u32 + nb_tx as u32 + 4 * cfg.burst as u32 + 2 * cfg.cache_size + 512
        });
        let pd = ProtectionDomain::new();
        for qi in 0..q {
            let nic = if mode.uses_nicmem() {
                Some(match (&window, &nicmem) {
                    (Some(w), _) if hw_split => {
                        // The NIC draws payloads from one pool: nicmem first, host buffers when
                        // the device memory runs out (the split primary/secondary rings).
                        let slice = w.queue_slice(qi, q, nic_elt);
                        let region = ExtRegion {
                            base: slice.0 as *mut u8,
                            iova: slice.0,
                            len: slice.1,
                        };
                        let p = create_spill_pool(
                            port_id,
                            qi,
                            nic_elt as u16,
                            region,
                            n,
                            socket,
                            true,
                        )?;
                        let win = (slice.0, slice.0 + (nic_per_queue as usize * nic_elt) as u64);
                        register_nic_pool_window(p.as_ptr(), true, win);
                        p
                    }
                    (Some(w), _) => {
                        let slice = w.queue_slice(qi, q, nic_elt);
                        create_extbuf_pool(
                            port_id,
                            qi,
                            nic_per_queue,
                            nic_elt as u16,
                            slice.0 as *mut u8,
                            slice.0,
                            slice.1,
                            socket,
                            true,
                        )?
                    }
                    (None, Some(dev)) => {
                        let len = nic_per_queue as usize * nic_elt;
                        let region = dev.alloc(len, pd).map_err(|e| {
                            DpdkError::Mempool(format!(
                                "emulated nicmem for {name} queue {qi}: {e}"
                            ))
                        })?;
                        let (va, rlen) = region.host_window();
                        let p = create_extbuf_pool(
                            port_id,
                            qi,
                            nic_per_queue,
                            nic_elt as u16,
                            va.as_ptr(),
                            va.as_ptr() as u64,
                            rlen,
                            socket,
                            false,
                        )?;
                        regions.push(region);
                        p
                    }
                    (None, None) => unreachable!("nicmem mode without a nicmem source"),
                })
            } else {
                None
            };
            let rx = create_pool(
                port_id,
                qi,
                'r',
                n,
                cfg.cache_size,
                frame_room.min(u16::MAX as u32) as u16,
                socket,
            )?;
            let hdr = if mode.splits() {
                Some(create_pool(
                    port_id,
                    qi,
                    'h',
                    n,
                    cfg.cache_size,
                    hdr_room as u16,
                    socket,
                )?)
            } else {
                None
            };
            let host_payload = if hw_split {
                Some(create_pool(
                    port_id,
                    qi,
                    'p',
                    n,
                    cfg.cache_size,
                    (nic_elt as u32 + headroom) as u16,
                    socket,
                )?)
            } else {
                None
            };
            let rc = if hw_split {
                // Segment 0: `split` header bytes into the header pool; segment 1: the rest into
                // the payload pool (nicmem when the mode uses it, else host).
                let payload_mp = nic
                    .as_ref()
                    .or(host_payload.as_ref())
                    .expect("payload pool");
                let mut segs = [sys::rte_eth_rxseg::default(), sys::rte_eth_rxseg::default()];
                segs[0].split = sys::rte_eth_rxseg_split {
                    mp: hdr.as_ref().expect("header pool").as_ptr(),
                    length: split as u16,
                    offset: 0,
                    proto_hdr: 0,
                };
                segs[1].split = sys::rte_eth_rxseg_split {
                    mp: payload_mp.as_ptr(),
                    length: 0,
                    offset: 0,
                    proto_hdr: 0,
                };
                let mut rxconf = info.default_rxconf;
                rxconf.offloads = sys::NMDP_RX_OFFLOAD_BUFFER_SPLIT | sys::NMDP_RX_OFFLOAD_SCATTER;
                rxconf.rx_seg = segs.as_mut_ptr();
                rxconf.rx_nseg = 2;
                // SAFETY: valid port/queue; `rxconf` and `segs` live across the call (ethdev copies
                // the segment descriptions); pools are alive and outlive the port.
                unsafe {
                    sys::rte_eth_rx_queue_setup(
                        port_id,
                        qi,
                        nb_rx,
                        socket as u32,
                        &rxconf,
                        std::ptr::null_mut(),
                    )
                }
            } else {
                // SAFETY: valid port/queue; NULL rxconf means the PMD defaults; the pool outlives
                // the port.
                unsafe {
                    sys::rte_eth_rx_queue_setup(
                        port_id,
                        qi,
                        nb_rx,
                        socket as u32,
                        std::ptr::null(),
                        rx.as_ptr(),
                    )
                }
            };
            if rc != 0 {
                return Err(DpdkError::Port(format!(
                    "rte_eth_rx_queue_setup({name}, queue {qi}, {nb_rx} descriptors{}): {}",
                    if hw_split { ", buffer split" } else { "" },
                    strerror(-rc)
                )));
            }
            // SAFETY: valid port/queue; NULL txconf means the PMD defaults.
            let rc = unsafe {
                sys::rte_eth_tx_queue_setup(port_id, qi, nb_tx, socket as u32, std::ptr::null())
            };
            if rc != 0 {
                return Err(DpdkError::Port(format!(
                    "rte_eth_tx_queue_setup({name}, queue {qi}, {nb_tx} descriptors): {}",
                    strerror(-rc)
                )));
            }
            pools.push(QueuePools {
                rx,
                hdr,
                host_payload,
                nic,
            });
        }
        // SAFETY: valid, configured port.
        let rc = unsafe { sys::rte_eth_dev_start(port_id) };
        if rc != 0 {
            return Err(DpdkError::Port(format!(
                "rte_eth_dev_start({name}): {}",
                strerror(-rc)
            )));
        }
        guard.armed = false;
        // SAFETY: valid, started port. Failure (e.g. unsupported) is harmless.
        unsafe { sys::rte_eth_promiscuous_enable(port_id) };
        if emulated {
            eprintln!(
                "note: port {name} ({driver}): mode {mode} runs on EMULATED nicmem (host memory \
                 labelled nicmem, {nic_per_queue} payload buffers of {nic_elt} B per queue); it \
                 measures nothing about real on-NIC memory"
            );
        }
        let shared = Arc::new(PortShared {
            port_id,
            name: name.to_string(),
            driver: driver.to_string(),
            probed,
            pools,
            nicmem,
            _regions: regions,
            _window: window,
        });
        let stop = RxStop::default();
        let finite = cfg.stop_when_idle.unwrap_or_else(|| {
            cfg.devargs.contains("rx_pcap=") && !cfg.devargs.contains("infinite_rx=1")
        });
        let queues = (0..q)
            .map(|qi| {
                DpdkQueue::new(QueueSetup {
                    shared: shared.clone(),
                    queue: qi,
                    index: cfg.index,
                    verdict: Verdict::tx(cfg.tx_port),
                    mode,
                    split_offset: split,
                    hw_split,
                    burst: cfg.burst,
                    stop: stop.clone(),
                    rx_limit: cfg.rx_limit,
                    finite,
                    core: cfg.worker_cores.get(qi as usize).copied(),
                    emulated_nicmem: emulated,
                    rss,
                })
            })
            .collect();
        let caps = Capabilities {
            rx_buffer_split: hw_split_capable,
            nicmem: shared._window.is_some(),
            tx_inline: is_mlx5,
            rss,
            max_frame: (info.max_rx_pktlen as usize).saturating_sub(4).max(60),
            queues: q,
        };
        Ok(Self {
            shared,
            caps,
            queues,
            stop,
            hw_split,
            emulated_nicmem: emulated,
        })
    }

    /// The DPDK port id.
    pub fn port_id(&self) -> u16 {
        self.shared.port_id
    }

    /// The state shared with the port's queues (for the generator queues in `txgen`).
    pub(crate) fn shared(&self) -> &Arc<PortShared> {
        &self.shared
    }

    /// True when the port splits in hardware (Rx buffer split), false for the software split.
    pub fn hw_split(&self) -> bool {
        self.hw_split
    }

    /// True when nicmem is emulated in host memory.
    pub fn emulated_nicmem(&self) -> bool {
        self.emulated_nicmem
    }

    /// The emulated nicmem device, if any (its counters show allocation and CPU access).
    pub fn nicmem(&self) -> Option<&NicMem> {
        self.shared.nicmem.as_ref()
    }

    /// A handle that stops Rx on every queue of the port (they then report idle once drained).
    pub fn rx_stop(&self) -> RxStop {
        self.stop.clone()
    }

    /// Counters of every mempool of the port (in use = out of the pool, including mbufs posted
    /// to the NIC's Rx rings).
    pub fn pool_stats(&self) -> Vec<MempoolStats> {
        pool_stats(&self.shared)
    }

    /// A handle that reads pool counters after the queues were handed out.
    pub fn stats_handle(&self) -> PortStatsHandle {
        PortStatsHandle {
            shared: self.shared.clone(),
        }
    }
}

fn pool_stats(shared: &PortShared) -> Vec<MempoolStats> {
    let mut v = Vec::new();
    for p in &shared.pools {
        v.push(p.rx.stats());
        for o in [&p.hdr, &p.host_payload, &p.nic].into_iter().flatten() {
            v.push(o.stats());
        }
    }
    v
}

/// Reads a port's pool counters; keeps the port (and its pools) alive while held.
#[derive(Clone)]
pub struct PortStatsHandle {
    shared: Arc<PortShared>,
}

impl PortStatsHandle {
    /// Counters of every mempool of the port.
    pub fn pool_stats(&self) -> Vec<MempoolStats> {
        pool_stats(&self.shared)
    }

    /// Port name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The emulated nicmem device, if any.
    pub fn nicmem(&self) -> Option<&NicMem> {
        self.shared.nicmem.as_ref()
    }
}

impl std::fmt::Debug for PortStatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortStatsHandle")
            .field("name", &self.shared.name)
            .finish()
    }
}

/// Payload buffer size: the largest payload behind a `split`-byte header, rounded to 64 B.
pub(crate) fn nic_buffer_size(max_frame: usize, split: usize) -> usize {
    (max_frame.saturating_sub(split)).max(64).div_ceil(64) * 64
}

impl Port for DpdkPort {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn driver(&self) -> &str {
        "dpdk"
    }

    fn capabilities(&self) -> Capabilities {
        self.caps.clone()
    }

    fn take_queues(&mut self) -> Vec<Box<dyn Queue>> {
        self.queues
            .drain(..)
            .map(|q| Box::new(q) as Box<dyn Queue>)
            .collect()
    }
}

impl std::fmt::Debug for DpdkPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpdkPort")
            .field("name", &self.shared.name)
            .field("driver", &self.shared.driver)
            .field("port_id", &self.shared.port_id)
            .field("caps", &self.caps)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::dpdk::test_eal;

    /// Without hugepages (IOVA = VA here) host pools are packed: mbufs share 4 KiB pages and
    /// their headers spread over the L1 cache sets instead of all landing in one; every mbuf
    /// still carries the asked data room and an IOVA equal to its address.
    #[test]
    fn host_pools_pack_mbufs_across_pages() {
        test_eal();
        // SAFETY: plain query of the initialised EAL.
        let va = unsafe { sys::rte_eal_iova_mode() } == sys::rte_iova_mode_RTE_IOVA_VA;
        let pool = {
            let _g = control_lock();
            create_pool(7, 0, 't', 64, 0, 2176, 0).expect("pool")
        };
        let mp = pool.as_ptr();
        let mbufs: Vec<*mut sys::rte_mbuf> = (0..64)
            // SAFETY: `mp` is a live pktmbuf pool.
            .map(|_| unsafe { sys::rte_pktmbuf_alloc(mp) })
            .collect();
        assert!(mbufs.iter().all(|m| !m.is_null()), "all 64 mbufs allocate");
        let mut addrs: Vec<u64> = mbufs.iter().map(|&m| m as u64).collect();
        addrs.sort_unstable();
        for &m in &mbufs {
            // SAFETY: live mbufs from the pool; plain field reads.
            unsafe {
                assert_eq!((*m).buf_len, 2176);
                if va {
                    assert_eq!((*m).buf_iova, (*m).buf_addr as u64, "IOVA = VA");
                    assert_eq!(sys::rte_mempool_virt2iova(m.cast()), m as u64);
                }
            }
        }
        let min_gap = addrs.windows(2).map(|w| w[1] - w[0]).min().unwrap();
        let sets: std::collections::HashSet<u64> = addrs.iter().map(|a| (a % 4096) / 64).collect();
        if va {
            assert!(min_gap < 4096, "packed: smallest mbuf gap {min_gap} B");
            assert!(sets.len() > 16, "headers over {} L1 sets", sets.len());
        }
        for m in mbufs {
            // SAFETY: each mbuf is owned here and freed once.
            unsafe { sys::rte_pktmbuf_free(m) };
        }
        drop(pool);
    }
}
