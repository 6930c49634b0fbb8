//! `dataplane run` on DPDK ports (feature `dpdk`): the `[dpdk]` config section, building the
//! ports from it, and running the same per-core loop and NF chains as the virtual NIC.
//!
//! A run config selects DPDK by having a `[dpdk]` section:
//!
//! ```toml
//! [dpdk]
//! eal_args = ["-l", "0", "--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--file-prefix=nmdp"]
//! worker_cores = [1]            # pin worker i to this core (optional)
//! [[dpdk.ports]]
//! devargs = "net_null0,size=64,copy=0"
//! [[dpdk.ports]]
//! devargs = "net_null1,size=64,copy=0"
//! ```
//!
//! Every worker owns queue `i` of every port; a packet received on port `p` goes to the port's
//! `tx_port` (default: ports paired 0<->1, 2<->3, like testpmd; a lone last port sends back out of
//! itself) unless an NF decides otherwise. `run.packets` caps the packets each port *receives*
//! (split across its queues) and `run.duration_s` stops Rx after that many seconds; finite
//! sources (a pcap file) end the run when drained.
//!
//! The section is parsed here rather than in `config.rs` so the DPDK build can evolve alone:
//! [`load`] splits `[dpdk]` off the table before the rest goes through
//! [`RunConfig::from_table`], and a `RunConfig` field of type [`DpdkSection`] works as well.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dataplane::driver::dpdk::{
    DpdkPort, DpdkPortConfig, Eal, NicmemSource, PortStatsHandle, RxStop,
};
use dataplane::runloop::{LiveStats, RunControl, WorkerReport, WorkerSetup, run_worker};
use dataplane::{Burst, DropCounts, Port, Queue, QueueStats, merge_stats};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::{RunError, RunOptions};
use crate::config::{ConfigError, RunConfig};

/// `[dpdk]`: EAL arguments, the ports and their rings and pools.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DpdkSection {
    /// EAL arguments, e.g. `["-l", "0", "--no-huge", "-m", "512", "--no-pci", "--no-shconf",
    /// "--file-prefix=x", "--vdev=net_null0"]` (vdevs may also be given only as ports).
    pub eal_args: Vec<String>,
    /// The ports, in run order (verdicts name ports by this index).
    pub ports: Vec<DpdkPortSection>,
    /// Rx descriptors per queue.
    pub rx_desc: u16,
    /// Tx descriptors per queue.
    pub tx_desc: u16,
    /// Mbufs per host pool per queue (0: automatic).
    pub mbufs: u32,
    /// Per-lcore mempool cache size.
    pub cache_size: u32,
    /// Emulated nicmem per port for the nicmem modes on PMDs without device memory, e.g.
    /// `"256KiB"` (labelled emulated everywhere; refused on mlx5).
    pub emulated_nicmem: String,
    /// Cap on nicmem payload buffers per queue (0: as many as fit).
    pub nicmem_buffers: u32,
    /// Pin worker `i` to core `worker_cores[i]` (empty: no pinning).
    pub worker_cores: Vec<usize>,
    /// Use mlx5 device memory (MEMIC) for the nicmem modes on the mlx5 ports (feature `mlx5`).
    pub mlx5_nicmem: bool,
}

impl Default for DpdkSection {
    fn default() -> Self {
        Self {
            eal_args: vec![
                "-l".into(),
                "0".into(),
                "--no-huge".into(),
                "-m".into(),
                "512".into(),
                "--no-pci".into(),
                "--no-shconf".into(),
                "--no-telemetry".into(),
            ],
            ports: Vec::new(),
            rx_desc: 1024,
            tx_desc: 1024,
            mbufs: 0,
            cache_size: 256,
            emulated_nicmem: "256KiB".into(),
            nicmem_buffers: 0,
            worker_cores: Vec::new(),
            mlx5_nicmem: false,
        }
    }
}

/// `[[dpdk.ports]]`: one ethdev.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct DpdkPortSection {
    /// Device and devargs: a vdev (`net_null0,size=64,copy=0`, `net_ring0`,
    /// `net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap`) or a PCI address (`0000:08:00.0,mprq_en=0`).
    pub devargs: String,
    /// Run port received packets go to (default: paired 0<->1, 2<->3, ...).
    pub tx_port: Option<u16>,
    /// End the run when Rx has been empty for a while (default: true for `rx_pcap=` without
    /// `infinite_rx=1`).
    pub stop_when_idle: Option<bool>,
    /// Frames of the `[traffic]` profile to transmit on this port before forwarding starts
    /// (seeds a `net_ring` loop).
    pub inject: u32,
}

fn config_err(path: &Path, key: &str, msg: String) -> ConfigError {
    ConfigError {
        file: path.to_path_buf(),
        key: key.to_string(),
        msg,
    }
}

/// Loads a run config with its `[dpdk]` section, applying the command-line overrides (`--set`,
/// `--mode`, ...). `Ok(None)` when the file has no `[dpdk]` section.
pub fn load(opts: &RunOptions) -> Result<Option<(RunConfig, DpdkSection)>, ConfigError> {
    let path = opts.config.as_path();
    let text = crate::config::read_config_text(path).map_err(|e| config_err(path, "", e))?;
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        config_err(path, "", format!("not valid TOML: {}", e.message()))
    })?;
    let sets = opts.override_sets();
    for o in &sets {
        dataplane::model::overrides::apply_assignment(&mut table, o)
            .map_err(|m| config_err(path, o.split('=').next().unwrap_or(""), m))?;
    }
    let Some(dpdk) = table.remove("dpdk") else {
        return Ok(None);
    };
    let section: DpdkSection = serde_path_to_error::deserialize(dpdk).map_err(|e| {
        config_err(
            path,
            format!("dpdk.{}", e.path()).trim_end_matches('.'),
            e.inner().message().trim().to_string(),
        )
    })?;
    let cfg = RunConfig::from_table(path, table)?;
    check(path, &cfg, &section)?;
    Ok(Some((cfg, section)))
}

/// Checks the `[dpdk]` section against the rest of the config.
pub fn check(path: &Path, cfg: &RunConfig, d: &DpdkSection) -> Result<(), ConfigError> {
    if d.ports.is_empty() {
        return Err(config_err(
            path,
            "dpdk.ports",
            "no ports; add [[dpdk.ports]] devargs = \"net_null0\" (or a PCI address)".into(),
        ));
    }
    for (i, p) in d.ports.iter().enumerate() {
        if p.devargs.trim().is_empty() {
            return Err(config_err(
                path,
                &format!("dpdk.ports[{i}].devargs"),
                "empty".into(),
            ));
        }
        if let Some(t) = p.tx_port
            && t as usize >= d.ports.len()
        {
            return Err(config_err(
                path,
                &format!("dpdk.ports[{i}].tx_port"),
                format!("{t} out of range; allowed 0..{}", d.ports.len()),
            ));
        }
    }
    // A net_pcap port writing the file another (or the same) port reads would destroy the input.
    let files = |key: &str| -> Vec<(usize, std::path::PathBuf)> {
        d.ports
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.devargs
                    .split(',')
                    .filter_map(|kv| kv.trim().strip_prefix(key)?.strip_prefix('='))
                    .map(move |f| (i, std::path::PathBuf::from(f)))
            })
            .collect()
    };
    for (ti, tx) in files("tx_pcap") {
        if let Some((ri, rx)) = files("rx_pcap")
            .into_iter()
            .find(|(_, rx)| crate::app::same_file(rx, &tx))
        {
            return Err(config_err(
                path,
                &format!("dpdk.ports[{ti}].devargs"),
                format!(
                    "tx_pcap={} is the file dpdk.ports[{ri}] reads (rx_pcap={}): writing the \
                     capture would destroy the input; give tx_pcap another path",
                    tx.display(),
                    rx.display()
                ),
            ));
        }
    }
    for (k, n) in [("dpdk.rx_desc", d.rx_desc), ("dpdk.tx_desc", d.tx_desc)] {
        if !(16..=16384).contains(&n) {
            return Err(config_err(
                path,
                k,
                format!("{n} out of range; allowed 16..=16384"),
            ));
        }
    }
    let Some(emulated) = nicmem::parse_size(&d.emulated_nicmem) else {
        return Err(config_err(
            path,
            "dpdk.emulated_nicmem",
            format!("`{}` is not a size; use e.g. \"256KiB\"", d.emulated_nicmem),
        ));
    };
    // Refuse sizes the machine cannot hold before EAL starts and the NF tables are allocated:
    // the NF tables per worker and, in the nicmem modes, the emulated nicmem of every port (host
    // memory; mempools come from EAL's own memory, whose failures are already errors).
    if let Some(machine) = crate::footprint::machine_memory() {
        let mut needs = crate::footprint::nf_needs(cfg);
        if cfg.datapath.mode.uses_nicmem() && !d.mlx5_nicmem {
            needs.push(crate::footprint::Need {
                key: "dpdk.emulated_nicmem".into(),
                value: format!(
                    "\"{}\" for each of {} ports",
                    d.emulated_nicmem,
                    d.ports.len()
                ),
                bytes: (emulated as u64).saturating_mul(d.ports.len() as u64),
                per_worker: false,
            });
        }
        crate::footprint::check(path, &needs, cfg.run.workers, machine)?;
    }
    if !d.worker_cores.is_empty() && d.worker_cores.len() < cfg.run.workers as usize {
        return Err(config_err(
            path,
            "dpdk.worker_cores",
            format!(
                "{} cores for {} workers; give one core per worker or none",
                d.worker_cores.len(),
                cfg.run.workers
            ),
        ));
    }
    if d.mlx5_nicmem && !cfg!(feature = "mlx5") {
        return Err(config_err(
            path,
            "dpdk.mlx5_nicmem",
            "needs a build with `--features mlx5` (apt-get install libibverbs-dev)".into(),
        ));
    }
    Ok(())
}

fn default_tx_port(i: usize, n: usize) -> u16 {
    let peer = i ^ 1;
    if peer < n { peer as u16 } else { i as u16 }
}

/// Per-port driver parameters from the config.
fn port_configs(cfg: &RunConfig, d: &DpdkSection) -> Vec<DpdkPortConfig> {
    let workers = cfg.run.workers;
    let rx_limit = (cfg.run.packets > 0).then(|| cfg.run.packets.div_ceil(workers as u64));
    d.ports
        .iter()
        .enumerate()
        .map(|(i, p)| DpdkPortConfig {
            devargs: p.devargs.clone(),
            index: i as u16,
            tx_port: p
                .tx_port
                .unwrap_or_else(|| default_tx_port(i, d.ports.len())),
            mode: cfg.datapath.mode,
            split_offset: cfg.datapath.split_offset,
            queues: workers,
            rx_desc: d.rx_desc,
            tx_desc: d.tx_desc,
            burst: cfg.datapath.burst,
            max_frame: cfg.vnic.max_frame,
            mbufs: (d.mbufs > 0).then_some(d.mbufs),
            cache_size: d.cache_size,
            nicmem: NicmemSource::Emulated {
                bytes: nicmem::parse_size(&d.emulated_nicmem).unwrap_or(0),
            },
            nicmem_buffers: (d.nicmem_buffers > 0).then_some(d.nicmem_buffers),
            rx_limit,
            stop_when_idle: p.stop_when_idle,
            worker_cores: d.worker_cores.clone(),
        })
        .collect()
}

/// Initialises EAL (once per process) with the section's arguments, after preparing mlx5 device
/// memory when asked (it must exist before `rte_eal_init`, whose devargs carry its keys).
fn init_eal(
    cfg: &RunConfig,
    d: &DpdkSection,
    ports: &mut [DpdkPortConfig],
) -> Result<(), RunError> {
    #[allow(unused_mut)]
    let mut args = d.eal_args.clone();
    if d.mlx5_nicmem && cfg.datapath.mode.uses_nicmem() {
        #[cfg(feature = "mlx5")]
        for p in ports.iter_mut() {
            let bdf = p.devargs.split(',').next().unwrap_or("").to_string();
            if bdf.starts_with("net_") {
                continue;
            }
            let nm = dataplane::driver::dpdk::mlx5::open_device_memory(
                &bdf,
                cfg.datapath.mode,
                cfg.datapath.split_offset,
                cfg.run.workers,
            )
            .map_err(|e| RunError::Setup(format!("mlx5 nicmem on {bdf}: {e}")))?;
            p.split_offset = dataplane::driver::dpdk::mlx5::header_segment(p.split_offset);
            args.push("-a".into());
            args.push(format!("{},{}", p.devargs, nm.devargs));
            p.nicmem = NicmemSource::Device(nm.window);
        }
    }
    let _ = &ports;
    Eal::init(&args).map_err(|e| RunError::Setup(e.to_string()))?;
    Ok(())
}

/// Builds the run's DPDK ports (EAL is initialised on first use).
pub fn build_ports(cfg: &RunConfig, d: &DpdkSection) -> Result<Vec<Box<dyn Port>>, RunError> {
    Ok(open_ports(cfg, d)?
        .into_iter()
        .map(|p| Box::new(p) as Box<dyn Port>)
        .collect())
}

/// Initialises EAL (once per process) and opens the config's ports, in config order (also used
/// by `pktgen dpdk-gen`, which turns their queues into generator queues).
pub fn open_ports(cfg: &RunConfig, d: &DpdkSection) -> Result<Vec<DpdkPort>, RunError> {
    let mut pcs = port_configs(cfg, d);
    init_eal(cfg, d, &mut pcs)?;
    pcs.iter()
        .map(|pc| {
            DpdkPort::open(pc).map_err(|e| RunError::Setup(format!("port `{}`: {e}", pc.devargs)))
        })
        .collect()
}

/// Transmits `n` frames of the `[traffic]` profile on `q` (seeds a loop such as `net_ring`).
fn inject(cfg: &RunConfig, q: &mut dyn Queue, n: u32) -> Result<(), RunError> {
    let mut t =
        crate::traffic::Traffic::from_config(&cfg.traffic, n as u64, 0.0, cfg.vnic.max_frame)
            .map_err(|(k, m)| RunError::Setup(format!("{k}: {m}")))?;
    let mut src = t
        .take_source()
        .ok_or_else(|| RunError::Setup("no traffic source".into()))?;
    let mut buf = vec![0u8; dataplane::wire::MAX_WIRE_FRAME];
    let mut list = Burst::with_capacity(32);
    let mut drops = DropCounts::default();
    let mut left = n;
    while left > 0 && !src.exhausted() {
        while list.len() < 32 && left > 0 {
            let Some(len) = src.next_frame(&mut buf) else {
                break;
            };
            if !q.push_frame(&mut list, &buf[..len]) {
                return Err(RunError::Setup(format!(
                    "cannot seed the loop: no mbuf for a {len} B frame"
                )));
            }
            left -= 1;
        }
        q.tx_burst(&mut list, &mut drops);
    }
    Ok(())
}

/// Runs the config on DPDK ports; returns the JSON summary (the virtual NIC run's keys where
/// they apply, plus `driver`, `ports`, `xstats`).
pub fn run(cfg: &RunConfig, d: &DpdkSection, opts: &RunOptions) -> Result<Value, RunError> {
    let path = opts.config.as_path();
    let warnings = crate::app::print_warnings(cfg, path);
    if opts.rx_pcap.is_some() || opts.tx_pcap.is_some() {
        return Err(RunError::Setup(
            "--rx-pcap/--tx-pcap are for the virtual NIC; on DPDK use a port \
             `net_pcap0,rx_pcap=IN,tx_pcap=OUT` in [[dpdk.ports]]"
                .into(),
        ));
    }
    let workers = cfg.run.workers;
    cfg.check_outputs(path)?;
    let chains = (0..workers)
        .map(|w| cfg.build_chain(path, w, workers))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ports = open_ports(cfg, d)?;
    let stops: Vec<RxStop> = ports.iter().map(|p| p.rx_stop()).collect();
    let handles: Vec<PortStatsHandle> = ports.iter().map(|p| p.stats_handle()).collect();
    let caps: Vec<Value> = ports
        .iter()
        .map(|p| {
            let c = p.capabilities();
            json!({"name": p.name(), "hw_split": p.hw_split(), "nicmem_emulated": p.emulated_nicmem(),
                   "rss": c.rss, "queues": c.queues, "rx_buffer_split_capable": c.rx_buffer_split})
        })
        .collect();
    // queues[port][worker]
    let mut per_port: Vec<Vec<Box<dyn Queue>>> =
        ports.iter_mut().map(|p| p.take_queues()).collect();
    for (i, ps) in d.ports.iter().enumerate() {
        if ps.inject > 0 {
            inject(cfg, per_port[i][0].as_mut(), ps.inject)?;
        }
    }
    drop(ports);
    let mut worker_queues: Vec<Vec<Box<dyn Queue>>> = (0..workers).map(|_| Vec::new()).collect();
    for qs in per_port {
        for (w, q) in qs.into_iter().enumerate() {
            worker_queues[w].push(q);
        }
    }
    let live: Arc<Vec<LiveStats>> = Arc::new((0..workers).map(|_| LiveStats::default()).collect());
    let control = RunControl {
        stop: Arc::new(Default::default()),
        drain_timeout: Duration::from_secs_f64(cfg.run.drain_timeout_s),
    };
    let start = Instant::now();
    let threads: Vec<_> = worker_queues
        .into_iter()
        .zip(chains)
        .enumerate()
        .map(|(w, (queues, chain))| {
            let setup = WorkerSetup {
                queues,
                chain,
                egress: None,
                burst: cfg.datapath.burst,
            };
            let control = control.clone();
            let live = live.clone();
            std::thread::Builder::new()
                .name(format!("worker{w}"))
                .spawn(move || run_worker(w as u16, workers, setup, &control, &live[w]))
                .map_err(|e| RunError::Setup(format!("cannot start worker {w}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    let interval = (cfg.run.stats_interval_s > 0.0 && opts.live_stats)
        .then(|| Duration::from_secs_f64(cfg.run.stats_interval_s));
    let mut next = interval.unwrap_or(Duration::ZERO);
    let mut rates = crate::app::LiveRates::new(Instant::now());
    while !threads
        .iter()
        .all(|h: &std::thread::JoinHandle<WorkerReport>| h.is_finished())
    {
        std::thread::sleep(Duration::from_millis(10));
        let el = start.elapsed();
        if cfg.run.duration_s > 0.0 && el.as_secs_f64() >= cfg.run.duration_s {
            for s in &stops {
                s.stop();
            }
            control.stop.store(true, Ordering::Relaxed);
        }
        if let Some(iv) = interval
            && el >= next
        {
            next += iv;
            let rx: u64 = live
                .iter()
                .map(|l| l.rx_packets.load(Ordering::Relaxed))
                .sum();
            let rate = rates.line(&live);
            let nombuf: u64 = live
                .iter()
                .map(|l| l.rx_nombuf.load(Ordering::Relaxed))
                .sum();
            let prim: u64 = live
                .iter()
                .map(|l| l.rx_primary.load(Ordering::Relaxed))
                .sum();
            let sec: u64 = live
                .iter()
                .map(|l| l.rx_secondary.load(Ordering::Relaxed))
                .sum();
            eprintln!(
                "[{:6.1}s] {rate} | rx {rx} | primary {prim} secondary {sec} | nombuf {nombuf}",
                el.as_secs_f64()
            );
        }
    }
    let reports: Vec<WorkerReport> = threads
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| RunError::Setup("a worker panicked".into()))
        })
        .collect::<Result<_, _>>()?;
    let elapsed = start.elapsed().as_secs_f64();
    crate::app::nf_output_errors(&reports)?;
    let mut out = summary(cfg, &handles, caps, &reports, elapsed);
    out["warnings"] = json!(warnings);
    Ok(out)
}

fn summary(
    cfg: &RunConfig,
    ports: &[PortStatsHandle],
    caps: Vec<Value>,
    reports: &[WorkerReport],
    elapsed: f64,
) -> Value {
    let mut q = QueueStats::default();
    let mut drops = DropCounts::default();
    let mut nf = serde_json::Map::new();
    let mut xstats = serde_json::Map::new();
    let mut active = 0f64;
    for r in reports {
        active = active.max(r.active_s);
        for s in &r.queue_stats {
            q.add(s);
        }
        drops.merge(&r.drops);
        for (name, stats) in &r.nf_stats {
            match nf.get_mut(name) {
                Some(v) => merge_stats(v, stats),
                None => {
                    nf.insert(name.clone(), stats.clone());
                }
            }
        }
        for (pi, xs) in r.xstats.iter().enumerate() {
            for (k, v) in xs {
                let key = if k.contains('.') {
                    k.clone()
                } else {
                    format!("port{pi}.{k}")
                };
                let e = xstats.entry(key).or_insert(json!(0));
                *e = json!(e.as_u64().unwrap_or(0) + v);
            }
        }
    }
    let mut pools = Vec::new();
    let (mut cap, mut alloc, mut peak) = (0u64, 0u64, 0u64);
    for p in ports {
        for s in p.pool_stats() {
            pools.push(json!({"name": s.name, "port": p.name(), "kind": s.kind, "count": s.count, "in_use": s.in_use}));
        }
        if let Some(nm) = p.nicmem() {
            let s = nm.stats();
            cap += s.capacity;
            alloc += s.allocated;
            peak += s.peak_allocated;
        }
    }
    let mut out = crate::app::counter_keys(cfg, &q, &drops, elapsed, active);
    let extra = json!({
        "driver": "dpdk",
        "ports": caps,
        "active_s": active,
        "pools": pools,
        "nicmem": {"emulated": cap > 0, "capacity": cap, "allocated": alloc, "peak_allocated": peak,
                   "cpu_bytes_read": xstats.get("port0.nicmem_cpu_read_bytes").cloned().unwrap_or(json!(0))},
        "nfs": Value::Object(nf),
        "xstats": Value::Object(xstats),
        "payload_mismatches": 0,
        "seq_lost": 0,
    });
    if let Value::Object(e) = extra {
        out.extend(e);
    }
    Value::Object(out)
}

/// Loads `opts.config` and, if it has a `[dpdk]` section, runs it on DPDK (`Ok(None)` otherwise).
/// Works without any change to `RunConfig`.
pub fn run_if_dpdk(opts: &RunOptions) -> Result<Option<Value>, RunError> {
    match load(opts)? {
        Some((cfg, d)) => run(&cfg, &d, opts).map(Some),
        None => Ok(None),
    }
}
