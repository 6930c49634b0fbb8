//! The virtual NIC: a pure-Rust port that behaves like an mlx5 NIC.
//!
//! Functional layer (this module): real descriptors and completions in rings, real DMA copies
//! between the wire and registered buffers, split header/payload placement with primary (nicmem)
//! and secondary (host) payload rings, Tx WQEs with inline headers, completion moderation,
//! doorbells, and validation of every descriptor. Every payload byte that enters leaves unchanged
//! unless a network function rewrites the header.
//!
//! Each worker owns its pools and its protection domain (per-core memory, as DPDK applications
//! use per-lcore mempools and the paper used per-queue nicmem), so a queue never touches another
//! core's buffers. A NIC may have several ports ([`VnicPort::new_ports`]): they share the
//! device's nicmem, and worker `w`'s queue on every port shares worker `w`'s pools, so a packet
//! received on one port can be sent on another without a copy (a NAT or router between two
//! ports). On a multi-queue port a small front-end thread plays the NIC's
//! MAC/RSS stage: it takes frames from the link, hashes them (Toeplitz) and steers them through
//! the indirection table to per-queue rings, and merges the queues' transmitted frames onto the
//! link. A single-queue port needs no thread: its queue reads and writes the link directly.
//!
//! Accounting and timing (layer 2) live in [`model`]: every queue charges each DMA it performs
//! through the hardware profile's [`crate::pcie_model::OpCosts`] and, when [`VnicConfig::timing`] is
//! set, runs a clock over the profile's resource timelines. Queues deposit their final reports in
//! the port's [`ModelSink`] when they are dropped; [`VnicPort::model_report`] sums them.

mod desc;
mod faults;
pub mod model;
mod queue;
mod rx;
mod tx;

pub use desc::{
    CQE_SIZE, Cqe, CtrlSeg, DataSeg, SEG, WQEBB, cqe_op, cqe_ring, inline_rounded, syndrome,
    tx_wqe_ds,
};
pub use faults::FaultConfig;
pub use model::{
    ClockMode, Item, LiveModel, ModelSink, NicCounters, PortModel, QueueModelReport, TimedReport,
    VnicTiming,
};
pub use queue::{RxRingId, VnicQueue};

pub use tx::MAX_TX_INLINE;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use nicmem::{BufPool, Host, Nic, NicMem, ProtectionDomain, Region, RegionTable};

use crate::arena::{PacketArena, header_buffer_size};
use crate::link::{FrameRing, Link, MAX_WIRE_FRAME};
use crate::mode::DatapathMode;
use crate::pcie_model::HardwareProfile;
use crate::pcie_model::costs::effective_inline;
use crate::port::{Capabilities, Port, Queue};
use crate::rss::{DEFAULT_RSS_KEY, Rss};
use crate::steer::{SteerRule, steer};
use model::{ModelParams, NicModel};
use queue::{Egress, Ingress, QueueModel, QueueParams, QueueParts};
use tx::TxRing;

/// Parameters of a virtual NIC port.
#[derive(Clone, Debug, PartialEq)]
pub struct VnicConfig {
    /// Datapath mode.
    pub mode: DatapathMode,
    /// Header segment size in the split modes (bytes).
    pub split_offset: usize,
    /// Header bytes inlined into Tx WQEs in `nic-inline` (0 elsewhere).
    pub tx_inline: usize,
    /// Queue pairs (one per worker).
    pub queues: u16,
    /// Rx descriptors per ring.
    pub rx_ring: usize,
    /// Tx WQEBBs per send queue.
    pub tx_ring: usize,
    /// One Tx completion per this many WQEs.
    pub tx_comp_every: usize,
    /// Largest frame accepted, without FCS (1514 standard, up to 9018 jumbo).
    pub max_frame: usize,
    /// On-NIC memory of the port in bytes (shared by its queues).
    pub nicmem_bytes: usize,
    /// Cap on nicmem payload buffers per queue (None: as many as fit and are useful).
    pub nicmem_buffers: Option<usize>,
    /// Host buffers per pool per queue (None: enough for the rings plus bursts in flight).
    pub host_buffers: Option<usize>,
    /// Per-core pool cache size.
    pub cache_size: usize,
    /// Burst size.
    pub burst: usize,
    /// Take frames from the wire only when descriptors are posted (PAUSE semantics).
    pub flow_control: bool,
    /// Alias nicmem payload buffers (performance-only; payload bytes are not preserved).
    pub nicmem_alias: bool,
    /// In the nicmem modes, how many queues get nicmem payload pools: the first K share the
    /// port's nicmem and run the port's mode, the others run `split` (the paper's Fig. 13).
    /// `None`: every queue.
    pub nicmem_queues: Option<u16>,
    /// The hardware profile whose constants the accounting (and timing) use.
    pub profile: HardwareProfile,
    /// Timing: `None` = accounting only (no clock, no latency).
    pub timing: Option<VnicTiming>,
    /// Flow steering rules checked before RSS on multi-queue ports ([`crate::steer`]).
    pub steering: Vec<SteerRule>,
    /// Faults to inject (none by default; see [`FaultConfig`]).
    pub faults: FaultConfig,
}

impl Default for VnicConfig {
    fn default() -> Self {
        Self {
            mode: DatapathMode::NicInline,
            split_offset: 64,
            tx_inline: 64,
            queues: 1,
            rx_ring: 1024,
            tx_ring: 1024,
            tx_comp_every: 32,
            max_frame: 1514,
            nicmem_bytes: 256 << 10,
            nicmem_buffers: None,
            host_buffers: None,
            cache_size: 256,
            burst: 32,
            flow_control: true,
            nicmem_alias: false,
            nicmem_queues: None,
            profile: HardwareProfile::default(),
            timing: None,
            steering: Vec::new(),
            faults: FaultConfig::default(),
        }
    }
}

/// Errors building a virtual NIC port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VnicError {
    /// A parameter is out of range; the message names it and what is allowed.
    BadParam(String),
    /// Memory setup failed.
    Memory(String),
}

impl std::fmt::Display for VnicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VnicError::BadParam(s) | VnicError::Memory(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for VnicError {}

impl VnicConfig {
    /// Queues that run the port's mode with nicmem payload pools (`nicmem_queues`, at most
    /// `queues`; all of them when unset).
    pub fn nicmem_queue_count(&self) -> u16 {
        self.nicmem_queues.unwrap_or(self.queues).min(self.queues)
    }

    /// The mode queue `qid` runs: the port's, except `split` for a nicmem mode's queues past
    /// [`VnicConfig::nicmem_queue_count`].
    pub fn queue_mode(&self, qid: u16) -> DatapathMode {
        if self.mode.uses_nicmem() && qid >= self.nicmem_queue_count() {
            DatapathMode::Split
        } else {
            self.mode
        }
    }

    /// The configuration queue (worker) `qid` is built with: this one in
    /// [`VnicConfig::queue_mode`]'s mode.
    pub fn for_queue(&self, qid: u16) -> VnicConfig {
        VnicConfig {
            mode: self.queue_mode(qid),
            ..self.clone()
        }
    }
}

fn round64(n: usize) -> usize {
    n.div_ceil(64) * 64
}

/// Per-queue pool sizes and statistics handles.
#[derive(Clone, Debug)]
pub struct QueuePools {
    /// Header (or whole-frame) buffers.
    pub header: BufPool<Host>,
    /// Host payload buffers (secondary ring).
    pub host_payload: Option<BufPool<Host>>,
    /// nicmem payload buffers (primary ring).
    pub nic_payload: Option<BufPool<Nic>>,
}

/// The buffers of one worker (see [`crate::arena`]): its protection domain, its pools and the
/// regions they live in, and the packet arena over them, shared by the worker's queue on every
/// port of the NIC. Sized for all of them: each pool holds what one queue needs (rings, bursts
/// in flight, caches) times the number of ports.
struct WorkerPools {
    pd: ProtectionDomain,
    table: RegionTable,
    arena: PacketArena,
    pools: QueuePools,
}

impl WorkerPools {
    fn new(
        cfg: &VnicConfig,
        nicmem: &NicMem,
        first_id: u16,
        w: u16,
        ports: usize,
    ) -> Result<Self, VnicError> {
        let mem = |e: &dyn std::fmt::Display| VnicError::Memory(format!("queue {w}: {e}"));
        let pd = ProtectionDomain::new();
        let mut table = RegionTable::new();
        let rx_ring = cfg.rx_ring.next_power_of_two();
        let tx_ring = cfg.tx_ring.next_power_of_two();
        let cache = cfg.cache_size.max(2);
        let default_count = rx_ring + tx_ring + 4 * cfg.burst + 2 * cache;
        let count = cfg
            .host_buffers
            .unwrap_or(default_count)
            .max(1)
            .saturating_mul(ports);
        let splits = cfg.mode.splits();
        let hdr_size = header_buffer_size(if splits {
            cfg.split_offset
        } else {
            cfg.max_frame
        });
        let pay_size = round64(cfg.max_frame.saturating_sub(cfg.split_offset).max(1));
        let bytes = |size: usize| {
            size.checked_mul(count).ok_or_else(|| {
                VnicError::Memory(format!("queue {w}: {count} buffers of {size} B overflow"))
            })
        };
        let name = |what: &str| format!("p{first_id}q{w}-{what}");
        let hregion = Region::try_host(bytes(hdr_size)?, pd).map_err(|e| mem(&e))?;
        table.register(&hregion);
        let header: BufPool<Host> =
            BufPool::new(&name("hdr"), hregion, hdr_size, count).map_err(|e| mem(&e))?;
        let host_payload = if splits {
            let r = Region::try_host(bytes(pay_size)?, pd).map_err(|e| mem(&e))?;
            table.register(&r);
            Some(BufPool::<Host>::new(&name("payload"), r, pay_size, count).map_err(|e| mem(&e))?)
        } else {
            None
        };
        let nic_payload = if cfg.mode.uses_nicmem() {
            let share = cfg.nicmem_bytes / usize::from(cfg.nicmem_queue_count().max(1));
            let fit = share / pay_size;
            let want = cfg
                .nicmem_buffers
                .unwrap_or(default_count)
                .saturating_mul(ports);
            if cfg.nicmem_alias {
                let slots = fit.max(1);
                let r = nicmem.alloc(slots * pay_size, pd).map_err(|e| mem(&e))?;
                table.register(&r);
                Some(
                    BufPool::<Nic>::new_aliased(&name("nicmem"), r, pay_size, want.max(1))
                        .map_err(|e| mem(&e))?,
                )
            } else {
                let n = want.min(fit);
                if n == 0 {
                    eprintln!(
                        "warning: port {first_id} queue {w}: nicmem share of {share} B holds no \
                         {pay_size} B payload buffer; every payload spills to host memory"
                    );
                    None
                } else {
                    let r = nicmem.alloc(n * pay_size, pd).map_err(|e| mem(&e))?;
                    table.register(&r);
                    Some(
                        BufPool::<Nic>::new(&name("nicmem"), r, pay_size, n)
                            .map_err(|e| mem(&e))?,
                    )
                }
            }
        } else {
            None
        };
        let pools = QueuePools {
            header: header.clone(),
            host_payload: host_payload.clone(),
            nic_payload: nic_payload.clone(),
        };
        let arena = PacketArena::new(header, host_payload, nic_payload).map_err(|e| mem(&e))?;
        Ok(Self {
            pd,
            table,
            arena,
            pools,
        })
    }
}

/// A virtual NIC port.
pub struct VnicPort {
    name: String,
    cfg: VnicConfig,
    nicmem: NicMem,
    pools: Vec<QueuePools>,
    queues: Vec<VnicQueue>,
    front: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    sink: Arc<ModelSink>,
}

impl VnicPort {
    /// Builds a port with index `port_id` attached to `link`.
    pub fn new(name: &str, port_id: u16, cfg: VnicConfig, link: Link) -> Result<Self, VnicError> {
        let mut ports = Self::new_ports(vec![(name.to_string(), link)], port_id, cfg)?;
        Ok(ports.remove(0))
    }

    /// Builds the ports of one multi-port NIC, numbered from `first_id`, each attached to its
    /// link (see the module docs): they share the device's nicmem and, per worker, one packet
    /// arena, so worker `w`'s queue on any port can send what its queue on another port
    /// received.
    pub fn new_ports(
        links: Vec<(String, Link)>,
        first_id: u16,
        cfg: VnicConfig,
    ) -> Result<Vec<Self>, VnicError> {
        Self::validate(&cfg)?;
        if links.is_empty() {
            return Err(VnicError::BadParam("a NIC needs at least one port".into()));
        }
        let nicmem = NicMem::try_new(cfg.nicmem_bytes)
            .map_err(|e| VnicError::Memory(format!("nicmem of {} B: {e}", cfg.nicmem_bytes)))?;
        let workers = (0..cfg.queues)
            .map(|w| WorkerPools::new(&cfg.for_queue(w), &nicmem, first_id, w, links.len()))
            .collect::<Result<Vec<_>, _>>()?;
        links
            .into_iter()
            .enumerate()
            .map(|(i, (name, link))| {
                Self::build_port(&name, first_id + i as u16, &cfg, link, &nicmem, &workers)
            })
            .collect()
    }

    fn build_port(
        name: &str,
        port_id: u16,
        cfg: &VnicConfig,
        link: Link,
        nicmem: &NicMem,
        workers: &[WorkerPools],
    ) -> Result<Self, VnicError> {
        let q = cfg.queues as usize;
        let rss = Rss::new(&DEFAULT_RSS_KEY, cfg.queues);
        let alive = Arc::new(());
        let device_resets = faults::DeviceResets::new();
        let stop = Arc::new(AtomicBool::new(false));
        let sink = Arc::new(ModelSink::new(q));
        let mut queues = Vec::with_capacity(q);
        let (ingress, egress, front) = if q == 1 {
            (
                vec![Ingress::Source(link.rx)],
                vec![Egress::Sink(link.tx)],
                None,
            )
        } else {
            let depth = cfg.rx_ring.max(64);
            let ins: Vec<Arc<FrameRing>> = (0..q)
                .map(|_| Arc::new(FrameRing::new(depth, cfg.max_frame.max(64))))
                .collect();
            let outs: Vec<Arc<FrameRing>> = (0..q)
                .map(|_| Arc::new(FrameRing::new(depth, MAX_WIRE_FRAME)))
                .collect();
            let h = spawn_front_end(
                name,
                link,
                ins.clone(),
                outs.clone(),
                rss.clone(),
                cfg.steering.clone(),
                alive.clone(),
                stop.clone(),
                cfg.flow_control,
            );
            (
                ins.into_iter().map(Ingress::Ring).collect(),
                outs.into_iter().map(Egress::Ring).collect(),
                Some(h),
            )
        };
        for (i, (ing, eg)) in ingress.into_iter().zip(egress).enumerate() {
            let qc = cfg.for_queue(i as u16);
            let model = NicModel::new(&ModelParams {
                profile: &cfg.profile,
                mode: qc.mode,
                port_mode: cfg.mode,
                queues: cfg.queues,
                nicmem_queues: cfg.nicmem_queue_count(),
                split_offset: cfg.split_offset,
                tx_inline: cfg.tx_inline,
                max_frame: cfg.max_frame,
                rx_ring: cfg.rx_ring,
                tx_ring: cfg.tx_ring,
                timing: cfg.timing.as_ref(),
            })
            .map_err(|e| VnicError::BadParam(format!("hardware profile: {e}")))?;
            let qm = QueueModel {
                model,
                sink: Some(sink.clone()),
            };
            let queue_rss = (q > 1).then(|| rss.clone());
            let qp = Self::build_queue(
                &qc,
                port_id,
                i as u16,
                &workers[i],
                ing,
                eg,
                queue_rss,
                &alive,
                qm,
                &device_resets,
            )?;
            queues.push(qp);
        }
        Ok(Self {
            name: name.to_string(),
            cfg: cfg.clone(),
            nicmem: nicmem.clone(),
            pools: workers.iter().map(|w| w.pools.clone()).collect(),
            queues,
            front,
            stop,
            sink,
        })
    }

    fn validate(cfg: &VnicConfig) -> Result<(), VnicError> {
        let bad = |m: String| Err(VnicError::BadParam(m));
        if !(60..=9018).contains(&cfg.max_frame) {
            return bad(format!(
                "max_frame {} out of range; allowed 60..=9018 (bytes without FCS)",
                cfg.max_frame
            ));
        }
        if cfg.mode.splits() && !(14..=cfg.max_frame).contains(&cfg.split_offset) {
            return bad(format!(
                "split_offset {} out of range; allowed 14..={}",
                cfg.split_offset, cfg.max_frame
            ));
        }
        if cfg.queues == 0 || cfg.queues > 64 {
            return bad(format!(
                "queues {} out of range; allowed 1..=64",
                cfg.queues
            ));
        }
        if let Some(k) = cfg.nicmem_queues
            && k > cfg.queues
        {
            return bad(format!(
                "nicmem_queues {k} out of range; allowed 0..={} (the port's queues)",
                cfg.queues
            ));
        }
        if let Some(r) = cfg.steering.iter().find(|r| r.queue >= cfg.queues) {
            return bad(format!(
                "steering rule {r:?}: queue {} out of range; allowed 0..{}",
                r.queue, cfg.queues
            ));
        }
        if !(16..=32768).contains(&cfg.rx_ring) || !(16..=32768).contains(&cfg.tx_ring) {
            return bad(format!(
                "ring sizes rx {} / tx {} out of range; allowed 16..=32768",
                cfg.rx_ring, cfg.tx_ring
            ));
        }
        if cfg.burst == 0 || cfg.burst > 1024 {
            return bad(format!(
                "burst {} out of range; allowed 1..=1024",
                cfg.burst
            ));
        }
        if cfg.faults.link_down_every > 0
            && cfg
                .timing
                .as_ref()
                .is_some_and(|t| t.offered_gbps.is_some())
        {
            return bad(
                "faults.link_down_every needs frames pulled by the NIC, not paced \
                        arrivals: set the offered load to 0 (traffic.rate_gbps = 0)"
                    .into(),
            );
        }
        if cfg.faults.link_down_every > 0 && cfg.faults.link_down_frames == 0 {
            return bad("faults.link_down_frames 0 out of range; allowed 1 and up".into());
        }
        let max_inline = MAX_TX_INLINE;
        if cfg.tx_inline > max_inline {
            return bad(format!(
                "tx_inline {} out of range; allowed 0..={max_inline} (a Tx WQE holds at most {} \
                 16 B segments: control, Ethernet, the inline continuation and up to two data \
                 pointers)",
                cfg.tx_inline,
                tx::MAX_DS
            ));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn build_queue(
        cfg: &VnicConfig,
        port_id: u16,
        qid: u16,
        worker: &WorkerPools,
        ingress: Ingress,
        egress: Egress,
        rss: Option<Rss>,
        alive: &Arc<()>,
        qm: QueueModel,
        device_resets: &Arc<faults::DeviceResets>,
    ) -> Result<VnicQueue, VnicError> {
        let mem = |e: &dyn std::fmt::Display| VnicError::Memory(format!("queue {qid}: {e}"));
        let rx_ring = cfg.rx_ring.next_power_of_two();
        let tx_ring = cfg.tx_ring.next_power_of_two();
        let splits = cfg.mode.splits();
        let caches = worker
            .arena
            .cache(cfg.cache_size.max(2))
            .map_err(|e| mem(&e))?;
        // The driver rounds the inline size as the profile says (stock mlx5: 18 + 16k), as
        // `dataplane model` does, so a run and the model inline the same bytes.
        let inline = if cfg.mode.inlines_tx_header() {
            effective_inline(
                cfg.tx_inline as u32,
                cfg.profile.nic.descriptors.inline_rounding,
            ) as usize
        } else {
            0
        };
        let tx = TxRing::new(tx_ring, inline, cfg.tx_comp_every);
        let params = QueueParams {
            mode: cfg.mode,
            split_offset: if splits {
                cfg.split_offset
            } else {
                cfg.max_frame
            },
            max_frame: cfg.max_frame,
            flow_control: cfg.flow_control,
            rx_ring,
            port_id,
            queue_id: qid,
        };
        Ok(VnicQueue::new(QueueParts {
            params,
            pd: worker.pd,
            table: worker.table.clone(),
            arena: worker.arena.clone(),
            cache: caches,
            tx,
            ingress,
            egress,
            rss,
            alive: alive.clone(),
            qm,
            faults: faults::FaultState::new(&cfg.faults, port_id, qid, device_resets),
        }))
    }

    /// The port's configuration.
    pub fn config(&self) -> &VnicConfig {
        &self.cfg
    }

    /// The port's on-NIC memory device.
    pub fn nicmem(&self) -> &NicMem {
        &self.nicmem
    }

    /// The accounting/timing reports of the queues dropped so far, summed (complete once every
    /// queue has been dropped, e.g. after the workers finished).
    pub fn model_report(&self) -> PortModel {
        let slots = self.sink.reports.lock().unwrap_or_else(|e| e.into_inner());
        let reports: Vec<QueueModelReport> = slots.iter().flatten().cloned().collect();
        PortModel::summarize(&reports)
    }

    /// The queues' reports as deposited (index = queue id; `None` for a queue still alive).
    pub fn queue_model_reports(&self) -> Vec<Option<QueueModelReport>> {
        self.sink
            .reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Live accounting counters of the queues (for a live stats line).
    pub fn model_sink(&self) -> Arc<ModelSink> {
        self.sink.clone()
    }

    /// The pools of each queue (for statistics).
    pub fn pools(&self) -> &[QueuePools] {
        &self.pools
    }

    /// Takes the queues as concrete types (tests that poke at descriptors).
    pub fn take_vnic_queues(&mut self) -> Vec<VnicQueue> {
        std::mem::take(&mut self.queues)
    }

    /// Waits for the front-end thread (multi-queue ports) after every queue has been dropped.
    pub fn join(&mut self) {
        if let Some(h) = self.front.take() {
            let _ = h.join();
        }
    }
}

impl Drop for VnicPort {
    fn drop(&mut self) {
        self.queues.clear();
        self.stop.store(true, Ordering::Release);
        self.join();
    }
}

impl Port for VnicPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn driver(&self) -> &str {
        "vnic"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            rx_buffer_split: true,
            nicmem: self.cfg.nicmem_bytes > 0,
            tx_inline: true,
            rss: true,
            max_frame: self.cfg.max_frame,
            queues: self.cfg.queues,
        }
    }

    fn take_queues(&mut self) -> Vec<Box<dyn Queue>> {
        std::mem::take(&mut self.queues)
            .into_iter()
            .map(|q| Box::new(q) as Box<dyn Queue>)
            .collect()
    }
}

/// The NIC's MAC/RSS front end for multi-queue ports (see the module docs). Runs until every queue
/// is gone (or `stop`), the link's source is exhausted and every ring is drained.
#[allow(clippy::too_many_arguments)]
fn spawn_front_end(
    name: &str,
    mut link: Link,
    ins: Vec<Arc<FrameRing>>,
    outs: Vec<Arc<FrameRing>>,
    rss: Rss,
    steering: Vec<SteerRule>,
    alive: Arc<()>,
    stop: Arc<AtomicBool>,
    flow_control: bool,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("{name}-wire"))
        .spawn(move || {
            // Separate buffers: a frame waiting for room in a full queue ring must survive the
            // egress work done meanwhile.
            let mut buf = vec![0u8; MAX_WIRE_FRAME];
            let mut out = vec![0u8; MAX_WIRE_FRAME];
            let mut pending: Option<(usize, usize)> = None;
            loop {
                let mut worked = false;
                // Ingress: steer frames to queues by the steering rules, else by RSS.
                for _ in 0..64 {
                    let (len, q) = match pending.take() {
                        Some(p) => p,
                        None => match link.rx.next_frame(&mut buf) {
                            Some(len) => {
                                let f = &buf[..len];
                                let q = steer(&steering, f)
                                    .unwrap_or_else(|| rss.queue(rss.hash_frame(f)));
                                (len, q as usize)
                            }
                            None => break,
                        },
                    };
                    if !ins[q].push(&buf[..len]) && flow_control {
                        pending = Some((len, q));
                        break;
                    }
                    worked = true;
                }
                if pending.is_none() && link.rx.exhausted() {
                    for r in &ins {
                        r.close();
                    }
                }
                // Egress: merge the queues' frames onto the link.
                for r in &outs {
                    while let Some(len) = r.pop(&mut out) {
                        link.tx.deliver(&out[..len]);
                        worked = true;
                    }
                }
                let queues_gone = Arc::strong_count(&alive) == 1;
                if (queues_gone || stop.load(Ordering::Acquire))
                    && outs.iter().all(|r| r.is_empty())
                {
                    break;
                }
                if !worked {
                    std::thread::yield_now();
                }
            }
            link.tx.finish();
        })
        .expect("spawn vnic front-end thread")
}

#[cfg(test)]
mod tests;
