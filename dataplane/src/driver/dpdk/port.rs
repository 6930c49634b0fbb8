//! [`DpdkPort`]: one ethdev, probed and configured for a datapath mode, handing out one
//! [`DpdkQueue`] per worker.

use std::ffi::{CStr, CString};
use std::sync::Arc;

use dpdk_sys as sys;
use nicmem::{NicMem, ProtectionDomain, Region};

use super::eal::{Eal, control_lock};
use super::error::{DpdkError, strerror};
use super::events::{self, PortEvents, Reconfigure};
use super::mempool::{
    MempoolStats, QueuePools, create_extbuf_pool, create_pool, nic_buffer_size,
    register_nic_pool_window,
};
use super::mlx5;
use super::queue::{DpdkQueue, QueueSetup, RxStop};
use super::shared::{PortShared, rte_dev_remove_by_name};
use super::spill::{ExtRegion, create_spill_pool};
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
    /// A poll handing out at least this many packets is followed by another while the vector
    /// has room (`datapath.burst`; PMDs may cap a call).
    pub burst: usize,
    /// Packets a worker holds from one pass of its loop (`dpdk.vector`; the receive asks the PMD
    /// for the room of the caller's burst, see `DpdkQueue`'s receive): sizes the pools.
    pub vector: usize,
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
            vector: 32,
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
        let info = dev_info(port_id, &name)?;
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

    /// Sets the port up in named steps: [`Plan::new`] decides what the port runs as (refusing a
    /// mode it cannot run), [`configure_device`] configures the device, [`NicmemLayout::new`]
    /// sizes the payload buffers, then per queue [`queue_pools`] creates the pools and
    /// [`setup_queue`] the Rx/Tx queue pair, and [`start`] starts it. On any error the port is
    /// stopped and closed before its pools are freed.
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
        let plan = Plan::new(cfg, port_id, name, driver, info)?;
        let (nb_rx, nb_tx) = configure_device(cfg, port_id, name, info, &plan)?;
        let nic = NicmemLayout::new(cfg, name, &plan)?;
        // Mbufs per host pool: both rings, a few bursts in flight, and the per-lcore caches.
        let n = cfg.mbufs.unwrap_or_else(|| {
            let held = cfg.burst.max(cfg.vector) as u32;
            nb_rx as u32 + nb_tx as u32 + 4 * held + 2 * cfg.cache_size + 512
        });
        let pd = ProtectionDomain::new();
        let mut regions = Vec::new();
        for qi in 0..q {
            let p = queue_pools(cfg, port_id, qi, &plan, &nic, n, pd, &mut regions)?;
            setup_queue(port_id, name, qi, (nb_rx, nb_tx), &plan, info, &p)?;
            pools.push(p);
        }
        start(port_id, name)?;
        let events = PortEvents::register(
            port_id,
            name,
            q,
            events::lsc_capable(info),
            reconfigure(cfg, port_id, name, &plan),
        )?;
        guard.armed = false;
        let mode = cfg.mode;
        if plan.emulated {
            eprintln!(
                "note: port {name} ({driver}): mode {mode} runs on EMULATED nicmem (host memory \
                 labelled nicmem, {} payload buffers of {} B per queue); it measures nothing \
                 about real on-NIC memory",
                nic.per_queue, nic.elt
            );
        }
        let shared = Arc::new(PortShared {
            port_id,
            name: name.to_string(),
            driver: driver.to_string(),
            probed,
            pools,
            nicmem: nic.emulated,
            _regions: regions,
            window: plan.window,
            events,
        });
        let ops = sys::fastpath::PortOps::of(port_id).ok_or_else(|| {
            DpdkError::Port(format!(
                "port {name}: port id {port_id} is past ethdev's fast-path table"
            ))
        })?;
        let stop = RxStop::default();
        let finite = cfg.stop_when_idle.unwrap_or_else(|| {
            cfg.devargs.contains("rx_pcap=") && !cfg.devargs.contains("infinite_rx=1")
        });
        let queues = (0..q)
            .map(|qi| {
                DpdkQueue::new(QueueSetup {
                    shared: shared.clone(),
                    ops,
                    queue: qi,
                    index: cfg.index,
                    verdict: Verdict::tx(cfg.tx_port),
                    mode,
                    split_offset: cfg.split_offset,
                    hw_split: plan.hw_split,
                    burst: cfg.burst,
                    stop: stop.clone(),
                    rx_limit: cfg.rx_limit,
                    finite,
                    core: cfg.worker_cores.get(qi as usize).copied(),
                    emulated_nicmem: plan.emulated,
                    rss: plan.rss,
                })
            })
            .collect();
        let caps = Capabilities {
            rx_buffer_split: plan.hw_split_capable,
            nicmem: shared.window.is_some(),
            tx_inline: plan.is_mlx5,
            rss: plan.rss,
            max_frame: (info.max_rx_pktlen as usize).saturating_sub(4).max(60),
            queues: q,
        };
        Ok(Self {
            shared,
            caps,
            queues,
            stop,
            hw_split: plan.hw_split,
            emulated_nicmem: plan.emulated,
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

    /// The port's MAC address (what the device reports).
    pub fn mac_address(&self) -> Result<[u8; 6], DpdkError> {
        let mut addr = sys::rte_ether_addr::default();
        // SAFETY: a valid port id and out-pointer.
        let rc = unsafe { sys::rte_eth_macaddr_get(self.shared.port_id, &mut addr) };
        if rc != 0 {
            return Err(DpdkError::Port(format!(
                "rte_eth_macaddr_get({}): {}",
                self.shared.name,
                strerror(-rc)
            )));
        }
        Ok(addr.addr_bytes)
    }

    /// Sets the port's MAC address (before traffic starts; a port with an address of its own
    /// sends and answers ARP with it). For `net_af_packet` and `net_tap` this also sets the
    /// kernel interface's address.
    pub fn set_mac_address(&self, mac: [u8; 6]) -> Result<(), DpdkError> {
        let _g = control_lock();
        let mut addr = sys::rte_ether_addr { addr_bytes: mac };
        // SAFETY: a valid port id and address; control calls are serialised.
        let rc = unsafe { sys::rte_eth_dev_default_mac_addr_set(self.shared.port_id, &mut addr) };
        if rc != 0 {
            return Err(DpdkError::Port(format!(
                "setting the MAC address of {}: {} (the PMD may not support it; leave `mac` \
                 unset to use the device's)",
                self.shared.name,
                strerror(-rc)
            )));
        }
        Ok(())
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

    /// The port's link as last reported, readable from any thread while the run goes on (the
    /// health check and the metrics endpoint).
    pub fn link_state(&self) -> Arc<crate::port::LinkState> {
        self.shared.events.link_state()
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

/// What a port runs as, decided from its capabilities and the config before anything is set up
/// (the first step of [`DpdkPort::configure`]).
#[derive(Clone)]
struct Plan {
    /// Queue pairs (one per worker).
    queues: u16,
    /// The port offers hardware Rx buffer split with two pools.
    hw_split_capable: bool,
    /// The mode splits and the port splits in hardware.
    hw_split: bool,
    is_mlx5: bool,
    /// mlx5 device memory for the nicmem modes.
    window: Option<mlx5::DeviceWindow>,
    /// nicmem emulated in host memory (PMDs without device memory).
    emulated: bool,
    /// RSS across the queues.
    rss: bool,
    /// The port's NUMA socket.
    socket: i32,
    /// Header segment size in the split modes.
    split: usize,
}

impl Plan {
    /// Refuses a queue count the port does not have, and a nicmem mode the port cannot run,
    /// with what is missing and which modes still work.
    fn new(
        cfg: &DpdkPortConfig,
        port_id: u16,
        name: &str,
        driver: &str,
        info: &sys::rte_eth_dev_info,
    ) -> Result<Self, DpdkError> {
        let q = cfg.queues.max(1);
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
        Ok(Plan {
            queues: q,
            hw_split_capable,
            hw_split,
            is_mlx5,
            window,
            emulated,
            rss: q > 1 && info.flow_type_rss_offloads != 0,
            socket,
            split,
        })
    }
}

/// Configures the device for the plan (queues, RSS, buffer split, MTU, multi-segment Tx) and
/// returns the Rx and Tx descriptor counts the PMD accepts.
fn configure_device(
    cfg: &DpdkPortConfig,
    port_id: u16,
    name: &str,
    info: &sys::rte_eth_dev_info,
    plan: &Plan,
) -> Result<(u16, u16), DpdkError> {
    let q = plan.queues;
    let mut conf = sys::rte_eth_conf::default();
    if plan.rss {
        conf.rxmode.mq_mode = sys::NMDP_ETH_MQ_RX_RSS;
        conf.rx_adv_conf.rss_conf.rss_hf =
            (sys::NMDP_RSS_IP | sys::NMDP_RSS_UDP | sys::NMDP_RSS_TCP)
                & info.flow_type_rss_offloads;
        if info.rx_offload_capa & sys::NMDP_RX_OFFLOAD_RSS_HASH != 0 {
            conf.rxmode.offloads |= sys::NMDP_RX_OFFLOAD_RSS_HASH;
        }
    }
    if plan.hw_split {
        conf.rxmode.offloads |= sys::NMDP_RX_OFFLOAD_BUFFER_SPLIT | sys::NMDP_RX_OFFLOAD_SCATTER;
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
    events::enable_lsc(&mut conf, info);
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
    let mut nb_rx = if plan.hw_split {
        mlx5::split_rx_descriptors(cfg.rx_desc)
    } else {
        cfg.rx_desc
    };
    let mut nb_tx = cfg.tx_desc;
    // SAFETY: valid port id and out-pointers.
    unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &mut nb_rx, &mut nb_tx) };
    Ok((nb_rx, nb_tx))
}

/// The nicmem payload buffers of a port: their size, how many each queue gets, and the emulated
/// nicmem they come from on a PMD without device memory.
struct NicmemLayout {
    /// Bytes per payload buffer.
    elt: usize,
    /// Payload buffers per queue (0 outside the nicmem modes).
    per_queue: u32,
    /// Emulated nicmem for the whole port, shared by its queues.
    emulated: Option<NicMem>,
}

impl NicmemLayout {
    fn new(cfg: &DpdkPortConfig, name: &str, plan: &Plan) -> Result<Self, DpdkError> {
        let mode = cfg.mode;
        let q = plan.queues;
        let elt = nic_buffer_size(cfg.max_frame, cfg.split_offset);
        let per_queue: u32 = match (&cfg.nicmem, mode.uses_nicmem()) {
            (_, false) => 0,
            (NicmemSource::Emulated { bytes }, true) => {
                let per_q = (*bytes / q as usize / elt) as u32;
                cfg.nicmem_buffers.map_or(per_q, |c| c.min(per_q))
            }
            (NicmemSource::Device(w), true) => {
                let per_q = mlx5::payload_buffers(w.len, elt) / q as u32;
                cfg.nicmem_buffers.map_or(per_q, |c| c.min(per_q))
            }
        };
        if mode.uses_nicmem() && per_queue == 0 {
            return Err(DpdkError::Unsupported(format!(
                "mode {mode} on {name}: the nicmem is too small for one {elt} B payload buffer \
                 per queue"
            )));
        }
        let emulated = match (&cfg.nicmem, plan.emulated) {
            (NicmemSource::Emulated { bytes }, true) => Some(
                NicMem::try_new(*bytes)
                    .map_err(|e| DpdkError::Mempool(format!("emulated nicmem for {name}: {e}")))?,
            ),
            _ => None,
        };
        Ok(Self {
            elt,
            per_queue,
            emulated,
        })
    }
}

/// Creates the pools of queue `qi`: whole-frame Rx buffers, header mbufs in the split modes,
/// host payload mbufs of a hardware split, and the nicmem payload pool in the nicmem modes (a
/// spill pool over device memory and host buffers on mlx5, or a pool over emulated nicmem,
/// whose regions are kept in `regions`).
#[allow(clippy::too_many_arguments)]
fn queue_pools(
    cfg: &DpdkPortConfig,
    port_id: u16,
    qi: u16,
    plan: &Plan,
    nic: &NicmemLayout,
    n: u32,
    pd: ProtectionDomain,
    regions: &mut Vec<Region>,
) -> Result<QueuePools, DpdkError> {
    let (q, socket, elt) = (plan.queues, plan.socket, nic.elt);
    let name = &cfg.devargs;
    let headroom = sys::NMDP_PKTMBUF_HEADROOM;
    let frame_room = (cfg.max_frame as u32).max(2048) + headroom;
    let hdr_room = headroom + (cfg.split_offset as u32).div_ceil(64) * 64;
    let nic_pool = if cfg.mode.uses_nicmem() {
        Some(match (&plan.window, &nic.emulated) {
            (Some(w), _) if plan.hw_split => {
                // The NIC draws payloads from one pool: nicmem first, host buffers when the
                // device memory runs out (the split primary/secondary rings).
                let slice = w.queue_slice(qi, q, elt);
                let region = ExtRegion {
                    base: slice.0 as *mut u8,
                    iova: slice.0,
                    len: slice.1,
                };
                let p = create_spill_pool(port_id, qi, elt as u16, region, n, socket, true)?;
                let win = (slice.0, slice.0 + (nic.per_queue as usize * elt) as u64);
                register_nic_pool_window(p.as_ptr(), true, win);
                p
            }
            (Some(w), _) => {
                let slice = w.queue_slice(qi, q, elt);
                create_extbuf_pool(
                    port_id,
                    qi,
                    nic.per_queue,
                    elt as u16,
                    slice.0 as *mut u8,
                    slice.0,
                    slice.1,
                    socket,
                    true,
                )?
            }
            (None, Some(dev)) => {
                let len = nic.per_queue as usize * elt;
                let region = dev.alloc(len, pd).map_err(|e| {
                    DpdkError::Mempool(format!("emulated nicmem for {name} queue {qi}: {e}"))
                })?;
                let (va, rlen) = region.host_window();
                let p = create_extbuf_pool(
                    port_id,
                    qi,
                    nic.per_queue,
                    elt as u16,
                    va.as_ptr(),
                    va.as_ptr() as u64,
                    rlen,
                    socket,
                    false,
                )?;
                regions.push(region);
                p
            }
            (None, None) => {
                return Err(DpdkError::Unsupported(format!(
                    "mode {} on {name}: no nicmem source",
                    cfg.mode
                )));
            }
        })
    } else {
        None
    };
    let room = |r: u32| r.min(u16::MAX as u32) as u16;
    let rx = create_pool(
        port_id,
        qi,
        'r',
        n,
        cfg.cache_size,
        room(frame_room),
        socket,
    )?;
    let hdr = if cfg.mode.splits() {
        Some(create_pool(
            port_id,
            qi,
            'h',
            n,
            cfg.cache_size,
            room(hdr_room),
            socket,
        )?)
    } else {
        None
    };
    let host_payload = if plan.hw_split {
        Some(create_pool(
            port_id,
            qi,
            'p',
            n,
            cfg.cache_size,
            room(elt as u32 + headroom),
            socket,
        )?)
    } else {
        None
    };
    Ok(QueuePools {
        rx,
        hdr,
        host_payload,
        nic: nic_pool,
    })
}

/// Sets up the Rx/Tx queue pair `qi` over its pools: a hardware split puts `split_offset`
/// header bytes into the header pool and the rest into the payload pool (nicmem when the mode
/// uses it, else host); otherwise whole frames go to the Rx pool.
fn setup_queue(
    port_id: u16,
    name: &str,
    qi: u16,
    (nb_rx, nb_tx): (u16, u16),
    plan: &Plan,
    info: &sys::rte_eth_dev_info,
    pools: &QueuePools,
) -> Result<(), DpdkError> {
    let socket = plan.socket as u32;
    let rc = match (
        &pools.hdr,
        pools.nic.as_ref().or(pools.host_payload.as_ref()),
    ) {
        (Some(hdr), Some(payload)) if plan.hw_split => {
            let mut segs = [sys::rte_eth_rxseg::default(), sys::rte_eth_rxseg::default()];
            segs[0].split = sys::rte_eth_rxseg_split {
                mp: hdr.as_ptr(),
                length: plan.split as u16,
                offset: 0,
                proto_hdr: 0,
            };
            segs[1].split = sys::rte_eth_rxseg_split {
                mp: payload.as_ptr(),
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
                    socket,
                    &rxconf,
                    std::ptr::null_mut(),
                )
            }
        }
        // SAFETY: valid port/queue; NULL rxconf means the PMD defaults; the pool outlives the
        // port.
        _ => unsafe {
            sys::rte_eth_rx_queue_setup(
                port_id,
                qi,
                nb_rx,
                socket,
                std::ptr::null(),
                pools.rx.as_ptr(),
            )
        },
    };
    if rc != 0 {
        return Err(DpdkError::Port(format!(
            "rte_eth_rx_queue_setup({name}, queue {qi}, {nb_rx} descriptors{}): {}",
            if plan.hw_split { ", buffer split" } else { "" },
            strerror(-rc)
        )));
    }
    // SAFETY: valid port/queue; NULL txconf means the PMD defaults.
    let rc = unsafe { sys::rte_eth_tx_queue_setup(port_id, qi, nb_tx, socket, std::ptr::null()) };
    if rc != 0 {
        return Err(DpdkError::Port(format!(
            "rte_eth_tx_queue_setup({name}, queue {qi}, {nb_tx} descriptors): {}",
            strerror(-rc)
        )));
    }
    Ok(())
}

/// The device's capabilities (`rte_eth_dev_info_get`), as opening and a reset both read them.
fn dev_info(port_id: u16, name: &str) -> Result<sys::rte_eth_dev_info, DpdkError> {
    let mut info = sys::rte_eth_dev_info::default();
    // SAFETY: valid port id and out-pointer.
    let rc = unsafe { sys::rte_eth_dev_info_get(port_id, &mut info) };
    if rc != 0 {
        return Err(DpdkError::Port(format!(
            "rte_eth_dev_info_get({name}): {}",
            strerror(-rc)
        )));
    }
    Ok(info)
}

/// How the port is set up again after a device reset ([`events`]): the steps of
/// [`DpdkPort::configure`] after the pools exist, over the same pools.
fn reconfigure(cfg: &DpdkPortConfig, port_id: u16, name: &str, plan: &Plan) -> Reconfigure {
    let (cfg, name, plan) = (cfg.clone(), name.to_string(), plan.clone());
    Box::new(move |pools| {
        let info = dev_info(port_id, &name)?;
        let nb = configure_device(&cfg, port_id, &name, &info, &plan)?;
        for (qi, p) in pools.iter().enumerate() {
            setup_queue(port_id, &name, qi as u16, nb, &plan, &info, p)?;
        }
        start(port_id, &name)
    })
}

/// Starts a configured port and turns promiscuous mode on (harmless where unsupported).
fn start(port_id: u16, name: &str) -> Result<(), DpdkError> {
    // SAFETY: valid, configured port.
    let rc = unsafe { sys::rte_eth_dev_start(port_id) };
    if rc != 0 {
        return Err(DpdkError::Port(format!(
            "rte_eth_dev_start({name}): {}",
            strerror(-rc)
        )));
    }
    // SAFETY: valid, started port. Failure (e.g. unsupported) is harmless.
    unsafe { sys::rte_eth_promiscuous_enable(port_id) };
    Ok(())
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
