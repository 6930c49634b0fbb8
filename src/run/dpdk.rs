//! `dataplane run` on DPDK ports (feature `dpdk`): opens the ports the config's `[dpdk]` section
//! names ([`crate::config::dpdk`]) and runs the same per-core loop and NF chains as the virtual
//! NIC, with the shared worker supervision and summary keys.
//!
//! Every worker owns queue `i` of every port; a packet received on port `p` goes to the port's
//! `tx_port` (default: ports paired 0<->1, 2<->3, like testpmd; a lone last port sends back out of
//! itself) unless an NF decides otherwise. `run.packets` caps the packets each port *receives*
//! (split across its queues) and `run.duration_s` stops Rx after that many seconds; finite
//! sources (a pcap file) end the run when drained.

use dataplane::driver::dpdk::telemetry::{EalTelemetry, file_prefix};
use dataplane::driver::dpdk::{
    DpdkPort, DpdkPortConfig, Eal, NicmemSource, PortStatsHandle, RxStop,
};
use dataplane::net::{MacAddr, PortAddr, SlowPath};
use dataplane::runloop::{WorkerReport, WorkerSetup};
use dataplane::{Burst, DropCounts, Port, Queue, QueueStats};
use serde_json::{Value, json};

use super::options::{RunError, RunOptions};
use super::summary::{counter_keys, nf_counters, nf_output_errors, per_worker, print_warnings};
use super::workers::{Finished, Supervision, Workers, live_interval, run_info, serve};
use crate::config::dpdk::DpdkSection;
use crate::config::{ConfigError, RunConfig};

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
            vector: d.vector,
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

/// Each port's addresses: `mac` (set on the device) or the device's, and `ip`.
fn port_addrs(d: &DpdkSection, ports: &[DpdkPort]) -> Result<Vec<PortAddr>, RunError> {
    d.ports
        .iter()
        .zip(ports)
        .enumerate()
        .map(|(i, (ps, p))| {
            let key = format!("dpdk.ports[{i}]");
            let err = |e: String| RunError::Setup(format!("{key}: {e}"));
            let device = MacAddr(p.mac_address().map_err(|e| err(e.to_string()))?);
            let a = crate::config::net::port_addr(
                &key,
                p.name().to_string(),
                ps.mac.as_deref(),
                device,
                ps.ip.as_deref(),
            )
            .map_err(|(k, m)| RunError::Setup(format!("{k}: {m}")))?;
            if a.mac != device {
                p.set_mac_address(a.mac.0).map_err(|e| err(e.to_string()))?;
            }
            Ok(a)
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
    let mut buf = vec![0u8; dataplane::link::MAX_WIRE_FRAME];
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
    let warnings = print_warnings(cfg, path);
    if opts.rx_pcap.is_some() || opts.tx_pcap.is_some() {
        return Err(RunError::Setup(
            "--rx-pcap/--tx-pcap are for the virtual NIC; on DPDK use a port \
             `net_pcap0,rx_pcap=IN,tx_pcap=OUT` in [[dpdk.ports]]"
                .into(),
        ));
    }
    let workers = cfg.run.workers;
    cfg.check_outputs(path)?;
    // A bad pipeline fails before any port opens; the chains that run are built once the
    // ports' MAC addresses are known (the route stage writes them).
    (0..workers)
        .map(|w| cfg.build_chain(path, w, workers))
        .collect::<Result<Vec<_>, _>>()
        .or_else(|e| {
            if cfg.has_route_stage() {
                Ok(Vec::new())
            } else {
                Err(e)
            }
        })?;
    let mut ports = open_ports(cfg, d)?;
    let net = cfg.network(path, port_addrs(d, &ports)?)?;
    let chains = (0..workers)
        .map(|w| cfg.build_chain_on(path, w, workers, net.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut warnings = warnings;
    if let (Some(n), Some(c)) = (&net, chains.first()) {
        for ip in n.set_owned(&c.owned_addresses()) {
            let w = format!(
                "{ip} (owned by the pipeline) is on no port's subnet: no port answers ARP for it"
            );
            eprintln!("warning: {w}");
            warnings.push(w);
        }
    }
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
    let setups: Vec<WorkerSetup> = worker_queues
        .into_iter()
        .zip(chains)
        .enumerate()
        .map(|(w, (queues, chain))| {
            let slow = match &net {
                Some(n) => Some(SlowPath::new(n.clone(), w as u16).map_err(RunError::Setup)?),
                None => None,
            };
            Ok(WorkerSetup {
                queues,
                chain,
                egress: None,
                // The vector (`dpdk.vector`): the queues ask the PMD for all of it in one poll,
                // polling again only after a poll of `datapath.burst` or more.
                burst: d.vector,
                slow,
            })
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    let names = handles.iter().map(|h| h.name().to_string()).collect();
    let mut info = run_info(cfg, "dpdk", names);
    info.reported_links = handles.iter().map(|h| Some(h.link_state())).collect();
    let prepared = Workers::prepare(&setups, info);
    let serving = serve(cfg, opts, &prepared.0, true)?;
    let eal_telemetry = eal_telemetry(cfg, d, opts, &prepared.0)?;
    let running = Workers::spawn(
        setups,
        prepared,
        cfg.run.drain_timeout_s,
        !cfg.run.stop_when_idle,
    )?;
    let stopped_by = running.supervise(
        cfg.run.duration_s,
        live_interval(cfg, opts),
        &mut DpdkSupervision { stops: &stops },
    );
    let Finished {
        reports,
        elapsed_s: elapsed,
        cpu_s,
    } = running.join()?;
    nf_output_errors(&reports)?;
    let mut out = summary(cfg, &handles, caps, &reports, elapsed);
    if let Some(n) = &net {
        let keys = crate::config::net::summary_keys(n, out["nfs"].get(nfs::route::NAME));
        if let (Value::Object(o), Value::Object(k)) = (&mut out, keys) {
            o.extend(k);
        }
    }
    out["warnings"] = json!(warnings);
    out["stopped_by"] = json!(stopped_by.as_str());
    out["per_worker"] = per_worker(&reports, true);
    super::workers::add_cpu_keys(&mut out, &cpu_s);
    drop((serving, eal_telemetry));
    Ok(out)
}

/// Registers the run's telemetry commands with EAL's telemetry when the run serves (`run.telemetry`),
/// saying where the socket is, or that EAL runs without one (`--no-telemetry`).
fn eal_telemetry(
    cfg: &RunConfig,
    d: &DpdkSection,
    opts: &RunOptions,
    view: &std::sync::Arc<crate::ops::RunView>,
) -> Result<Option<EalTelemetry>, RunError> {
    if !opts.serve || !cfg.run.telemetry {
        return Ok(None);
    }
    let t = EalTelemetry::install(
        &crate::ops::commands::nmdp_commands(),
        crate::ops::commands::handler(view.clone()),
    )
    .map_err(RunError::Setup)?;
    let args = Eal::get().map_or(&d.eal_args[..], |e| e.args());
    if args.iter().any(|a| a == "--no-telemetry") {
        eprintln!(
            "telemetry: EAL runs with --no-telemetry, so no socket serves the /nmdp commands; \
             remove it from dpdk.eal_args"
        );
    } else {
        eprintln!(
            "telemetry: EAL's socket (dpdk-telemetry.py -f {p}, dataplane ctl --prefix {p})",
            p = file_prefix(args)
        );
    }
    Ok(Some(t))
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
    let mut xstats = serde_json::Map::new();
    let mut active = 0f64;
    for r in reports {
        active = active.max(r.active_s);
        for s in &r.queue_stats {
            q.add(s);
        }
        drops.merge(&r.drops);
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
    let mut out = counter_keys(cfg, &q, &drops, elapsed, active);
    let extra = json!({
        "driver": "dpdk",
        "ports": caps,
        "active_s": active,
        "pools": pools,
        "nicmem": {"emulated": cap > 0, "capacity": cap, "allocated": alloc, "peak_allocated": peak,
                   "cpu_bytes_read": xstats.get("port0.nicmem_cpu_read_bytes").cloned().unwrap_or(json!(0))},
        "nfs": nf_counters(reports),
        "xstats": Value::Object(xstats),
        "payload_mismatches": 0,
        "seq_lost": 0,
    });
    if let Value::Object(e) = extra {
        out.extend(e);
    }
    Value::Object(out)
}

/// Loads `opts.config` with its `[dpdk]` section and the command line's overrides
/// (`Ok(None)`: the config has no `[dpdk]` section).
pub fn load(opts: &RunOptions) -> Result<Option<(RunConfig, DpdkSection)>, ConfigError> {
    crate::config::dpdk::load(&opts.config, &opts.override_sets())
}

/// The DPDK driver's part of the supervision: Rx stops at the end of the run.
struct DpdkSupervision<'a> {
    stops: &'a [RxStop],
}

impl Supervision for DpdkSupervision<'_> {
    fn stop(&mut self) {
        for s in self.stops {
            s.stop();
        }
    }
}
