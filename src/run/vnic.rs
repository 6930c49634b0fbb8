//! `dataplane run` on the virtual NIC: builds the ports, pools, mode and NF chains from a config,
//! attaches each port's wire (embedded generator and checking sink, pcap files, or the Linux
//! kernel through TAP or AF_PACKET), runs one worker per core with the ports' slow path when
//! the run has addresses, and adds the virtual NIC's keys to the run summary (pools, nicmem, the
//! PCIe and timing model's counters, the traffic report, and the ports, ARP and route counters).
//!
//! Without `[[vnic.ports]]` the NIC has one port, `vnic0`, fed by the generator or
//! `--rx-pcap`, as it always had.

use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::Arc;

use dataplane::driver::vnic::{
    ClockMode, Item, LiveModel, ModelSink, PortModel, QueueModelReport, VnicPort,
};
use dataplane::link::fd::KernelLinkCounters;
use dataplane::link::{FrameSink, FrameSource, Link};
use dataplane::net::{MacAddr, PortAddr, SlowPath};
use dataplane::pcie_model::HardwareProfile;
use dataplane::runloop::{WorkerReport, WorkerSetup};
use dataplane::{DropCounts, Port, QueueStats};
use pktgen::nat_traffic::{NatBidirReport, NatReturnConfig};
use serde_json::{Value, json};

use super::options::{RunError, RunOptions, load_config};
use super::summary::{counter_keys, nf_counters, nf_output_errors, per_worker, print_warnings};
use super::workers::{Finished, Supervision, Workers, live_interval, run_info, serve};
use crate::config::net::VnicLink;
use crate::config::{ConfigError, RunConfig, same_file};
use crate::kept_chains::KeptChains;
use crate::traffic::{Traffic, TrafficReport};

/// Sends every frame to two sinks (pcap capture plus payload checking).
struct Tee(Box<dyn FrameSink>, Box<dyn FrameSink>);

impl FrameSink for Tee {
    fn deliver(&mut self, frame: &[u8]) {
        self.0.deliver(frame);
        self.1.deliver(frame);
    }
    fn finish(&mut self) {
        self.0.finish();
        self.1.finish();
    }
}

/// Runs the config; returns the JSON summary.
pub fn run(opts: &RunOptions) -> Result<Value, RunError> {
    run_keeping(opts, &mut KeptChains::new())
}

/// Runs the config with the NF chains `kept` holds from an earlier run of the same pipeline
/// (reset, not built again) and keeps this run's chains there for the next one.
pub fn run_keeping(opts: &RunOptions, kept: &mut KeptChains) -> Result<Value, RunError> {
    if let (Some(rx), Some(tx)) = (&opts.rx_pcap, &opts.tx_pcap)
        && same_file(rx, tx)
    {
        return Err(RunError::Setup(format!(
            "--rx-pcap {} and --tx-pcap {} are the same file: writing the capture would destroy \
             the input; give --tx-pcap another path",
            rx.display(),
            tx.display()
        )));
    }
    let cfg = load_config(opts)?;
    let path = opts.config.as_path();
    let warnings = print_warnings(&cfg, path);
    let workers = cfg.run.workers;
    let profile = cfg.profile(path)?;
    let offered = cfg.offered_gbps(path, &profile)?;
    // Refuse sizes the machine cannot hold before the NF tables and pools are allocated.
    if let Some(machine) = crate::footprint::machine_memory() {
        let mut needs = crate::footprint::vnic_needs(&cfg, &profile);
        needs.extend(crate::footprint::nf_needs(&cfg));
        crate::footprint::check(path, &needs, workers, machine)?;
    }
    cfg.check_outputs(path)?;
    // What the virtual clock charges the NFs (with run.nf_cycles = "measured" a measurement,
    // whose chain is gone before the run's are built).
    let nf_cycles = crate::calibrate::run_nf_cycles(&cfg, path, &profile)?;
    let specs = port_specs(&cfg, opts)?;
    let net = cfg.network(path, specs.iter().map(|(_, a)| a.clone()).collect())?;
    // Build (or reset) every NF chain first: a bad pipeline fails before any packet moves.
    let chains = kept.take(&cfg, path, net.as_ref())?;
    let mut warnings = warnings;
    if let (Some(n), Some(c)) = (&net, chains.first()) {
        for ip in n.set_owned(&c.owned_addresses()) {
            let w = format!(
                "{ip} (owned by the pipeline) is on no port's subnet: no port answers ARP for \
                 it, so hosts must route to it through a port's address"
            );
            eprintln!("warning: {w}");
            warnings.push(w);
        }
    }
    let uses_generator = specs.iter().any(|(l, _)| *l == VnicLink::Generator);
    let mut traffic = if uses_generator && opts.rx_pcap.is_none() {
        let nat = cfg.nat_return(path)?;
        Some(
            Traffic::with_nat_return(
                &cfg.generator_table(),
                cfg.run.packets,
                cfg.run.duration_s,
                cfg.vnic.max_frame,
                nat.as_ref(),
                opts.until_stopped,
            )
            .map_err(|(key, msg)| ConfigError {
                file: path.to_path_buf(),
                key,
                msg,
            })?,
        )
    } else if uses_generator || cfg.vnic.ports.is_empty() {
        // The generator does not run, but a bad [traffic] section is still a bad config.
        crate::traffic::generator_config(&cfg.generator_table(), cfg.vnic.max_frame).map_err(
            |(key, msg)| ConfigError {
                file: path.to_path_buf(),
                key,
                msg: format!("{msg} ([traffic] is checked with --rx-pcap too)"),
            },
        )?;
        None
    } else {
        None
    };
    let mut rx_pcap = None;
    let mut tx_pcap = None;
    let mut links = Vec::with_capacity(specs.len());
    let mut link_counters = Vec::with_capacity(specs.len());
    // The generator's port on a tester thread of its own (run.wire_thread).
    // `auto` leaves a replayed --rx-pcap in the worker: its oversized records are skipped
    // against the port's own frame buffer there.
    let on_wire_thread = match cfg.run.wire_thread {
        crate::config::WireThreadMode::Auto if opts.rx_pcap.is_some() => false,
        m => m.enabled(cfg.run.clock, workers),
    };
    let mut testers = Vec::new();
    for (i, (link, addr)) in specs.iter().enumerate() {
        let (l, c) = match link {
            VnicLink::Generator => {
                let mut l = generator_link(opts, &mut traffic, &mut rx_pcap, &mut tx_pcap)?;
                if on_wire_thread {
                    let (port_side, t) = dataplane::link::wire::spawn(
                        &addr.name,
                        l,
                        cfg.vnic.max_frame,
                        cfg.run.clock == ClockMode::Virtual,
                    )
                    .map_err(|e| RunError::Setup(format!("cannot start the tester thread: {e}")))?;
                    // Wall clock: count the worker's absences longer than the Rx ring lasts at
                    // the offered load (L1 Gb/s; frame size with FCS, plus 20 B of preamble
                    // and gap).
                    if let (ClockMode::Wall, Some(g), Some(f)) =
                        (cfg.run.clock, offered, cfg.frame_hint())
                        && g > 0.0
                    {
                        let ring_ns = cfg.vnic.rx_ring as f64 * (f64::from(f) + 20.0) * 8.0 / g;
                        t.counters()
                            .look_gap_limit_ns
                            .store(ring_ns as u64, Ordering::Relaxed);
                    }
                    testers.push(t);
                    l = port_side;
                }
                (l, None)
            }
            other => open_link(other).map_err(|e| {
                RunError::Setup(format!(
                    "config {}: vnic.ports[{i}].link: {e}",
                    path.display()
                ))
            })?,
        };
        links.push((addr.name.clone(), l));
        link_counters.push(c);
    }
    // Flow steering the NFs ask for (e.g. NAT return traffic to the worker owning its port
    // slice); with one queue there is nothing to steer.
    let mut vnic = cfg.vnic_config(path, &profile, offered, nf_cycles.charged)?;
    if workers > 1 {
        vnic.steering = chains
            .iter()
            .enumerate()
            .flat_map(|(w, c)| c.steering_rules(w as u16))
            .collect();
    }
    let mut ports = VnicPort::new_ports(links, 0, vnic)
        .map_err(|e| RunError::Setup(format!("config {}: vnic: {e}", path.display())))?;
    let model_sink = ports[0].model_sink();
    let mut per_port: Vec<std::vec::IntoIter<Box<dyn dataplane::Queue>>> = ports
        .iter_mut()
        .map(|p| p.take_queues().into_iter())
        .collect();
    let setups: Vec<WorkerSetup> = chains
        .into_iter()
        .enumerate()
        .map(|(w, chain)| {
            let queues = per_port.iter_mut().filter_map(|q| q.next()).collect();
            let slow = match &net {
                Some(n) => Some(SlowPath::new(n.clone(), w as u16).map_err(RunError::Setup)?),
                None => None,
            };
            Ok(WorkerSetup {
                queues,
                chain,
                egress: None,
                burst: cfg.datapath.burst,
                slow,
            })
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    let mut info = run_info(
        &cfg,
        "vnic",
        ports.iter().map(|p| p.name().to_string()).collect(),
    );
    info.links = specs
        .iter()
        .map(|(link, _)| match link {
            VnicLink::Kernel(k) => Some(k.clone()),
            _ => None,
        })
        .collect();
    let prepared = Workers::prepare(&setups, info);
    let serving = serve(&cfg, opts, &prepared.0, false)?;
    let running = Workers::spawn(
        setups,
        prepared,
        cfg.run.drain_timeout_s,
        !cfg.run.stop_when_idle,
    )?;
    let mut sup = VnicSupervision {
        traffic: traffic.as_ref(),
        tx_pcap: tx_pcap.as_deref(),
        model: &model_sink,
        last_pcie: (0, 0, 0),
    };
    let stopped_by = running.supervise(cfg.run.duration_s, live_interval(&cfg, opts), &mut sup);
    let Finished {
        mut reports,
        elapsed_s: elapsed,
        cpu_s,
    } = running.join()?;
    for p in &mut ports {
        p.join();
    }
    // The queues are gone: each tester hands the sink the last frames and finishes it.
    let tester_counters: Vec<_> = testers.iter().map(|t| t.counters()).collect();
    for t in testers {
        t.join();
    }
    kept.keep(
        &cfg,
        reports
            .iter_mut()
            .map(|r| std::mem::take(&mut r.chain))
            .collect(),
    );
    nf_output_errors(&reports)?;
    // The capture is flushed once the port is joined: a failed write (now or while running,
    // which stopped the run) fails the run with the file and the OS error.
    if let Some(c) = &tx_pcap
        && c.write_errors.load(Ordering::Relaxed) > 0
    {
        return Err(RunError::Output(format!(
            "--tx-pcap: {}; the capture is incomplete, so the run failed",
            c.first_error().unwrap_or("write failed")
        )));
    }
    let traffic_report = traffic.as_ref().map(|t| t.report());
    let nat_report = traffic
        .as_ref()
        .and_then(|t| Some((t.nat_config()?, t.nat_report()?)));
    let mut out = summary(
        &cfg,
        &profile,
        offered,
        &ports,
        &reports,
        traffic_report.as_ref(),
        nat_report.as_ref(),
        elapsed,
    );
    if let Some(c) = &rx_pcap {
        out["pcap"] = pcap_json(c);
    }
    if !cfg.vnic.ports.is_empty() {
        out["ports"] = ports_json(&cfg, &specs, &link_counters);
    }
    if let Some(n) = &net {
        let keys = crate::config::net::summary_keys(n, out["nfs"].get(nfs::route::NAME));
        if let (Value::Object(o), Value::Object(k)) = (&mut out, keys) {
            o.extend(k);
        }
    }
    out["warnings"] = json!(warnings);
    out["nf_cycles"] = nf_cycles.report;
    out["stopped_by"] = json!(stopped_by.as_str());
    out["per_worker"] = per_worker(&reports, cfg.run.clock != ClockMode::Virtual);
    if cfg.run.clock != ClockMode::Virtual {
        super::workers::add_cpu_keys(&mut out, &cpu_s);
    }
    out["wire_thread"] = wire_thread_json(&tester_counters, cfg.run.clock != ClockMode::Virtual);
    // The surfaces stop (and the socket goes) once the summary is complete.
    drop(serving);
    Ok(out)
}

/// Each port's link and addresses: `[[vnic.ports]]`, or the one generator-fed port `vnic0`
/// (`--rx-pcap` replaces the generator; with `[[vnic.ports]]` use `link = "pcap:..."`).
fn port_specs(cfg: &RunConfig, opts: &RunOptions) -> Result<Vec<(VnicLink, PortAddr)>, RunError> {
    if cfg.vnic.ports.is_empty() {
        return Ok(vec![(
            VnicLink::Generator,
            PortAddr {
                name: "vnic0".into(),
                mac: MacAddr::local_for_port(0),
                ip: None,
            },
        )]);
    }
    if opts.rx_pcap.is_some() || opts.tx_pcap.is_some() {
        return Err(RunError::Setup(format!(
            "config {}: --rx-pcap/--tx-pcap feed the generator's port of a NIC without \
             [[vnic.ports]]; with ports, give a port link = \"pcap:IN.pcap,OUT.pcap\"",
            opts.config.display()
        )));
    }
    cfg.vnic
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let key = format!("vnic.ports[{i}]");
            let link = VnicLink::parse(&p.link)
                .map_err(|m| RunError::Setup(format!("{key}.link: {m}")))?;
            let addr = crate::config::net::port_addr(
                &key,
                format!("vnic{i}"),
                p.mac.as_deref(),
                MacAddr::local_for_port(i as u16),
                p.ip.as_deref(),
            )
            .map_err(|(k, m)| RunError::Setup(format!("{k}: {m}")))?;
            Ok((link, addr))
        })
        .collect()
}

/// Opens a port's link other than the generator.
fn open_link(link: &VnicLink) -> Result<(Link, Option<Arc<KernelLinkCounters>>), String> {
    Ok(match link {
        VnicLink::Null => (
            Link {
                rx: Box::new(dataplane::link::NullSource),
                tx: Box::new(dataplane::link::CountingSink::default()),
            },
            None,
        ),
        VnicLink::Pcap { rx, tx } => {
            let src = dataplane::pcap::PcapSource::open(rx).map_err(|e| e.to_string())?;
            let sink: Box<dyn FrameSink> = match tx {
                Some(t) => {
                    if same_file(rx, t) {
                        return Err(format!(
                            "{} is both read and written; give another output file",
                            t.display()
                        ));
                    }
                    Box::new(dataplane::pcap::PcapSink::create(t).map_err(|e| e.to_string())?)
                }
                None => Box::new(dataplane::link::CountingSink::default()),
            };
            (
                Link {
                    rx: Box::new(src),
                    tx: sink,
                },
                None,
            )
        }
        VnicLink::Kernel(k) => {
            let (l, c) = k.open()?;
            (l, Some(c))
        }
        VnicLink::Generator => return Err("the generator is not opened here".into()),
    })
}

/// The `ports` object of a run with `[[vnic.ports]]`: each port's name, link, MAC, address and,
/// for a link to the kernel, its counters.
fn ports_json(
    cfg: &RunConfig,
    specs: &[(VnicLink, PortAddr)],
    counters: &[Option<Arc<KernelLinkCounters>>],
) -> Value {
    specs
        .iter()
        .zip(counters)
        .zip(&cfg.vnic.ports)
        .map(|(((_, a), c), p)| {
            let mut v = json!({
                "name": a.name, "link": p.link, "mac": a.mac.to_string(),
                "ip": a.ip.map(|ip| ip.to_string()),
            });
            if let Some(c) = c {
                v["link_counters"] = Value::Object(
                    c.snapshot()
                        .into_iter()
                        .map(|(k, n)| (k.to_string(), json!(n)))
                        .collect(),
                );
            }
            v
        })
        .collect()
}

/// The generator's port link: the embedded traffic (or `--rx-pcap`), its checking sink and
/// `--tx-pcap`.
fn generator_link(
    opts: &RunOptions,
    traffic: &mut Option<Traffic>,
    rx_pcap: &mut Option<Arc<dataplane::pcap::PcapCounters>>,
    tx_pcap: &mut Option<Arc<dataplane::pcap::PcapCounters>>,
) -> Result<Link, RunError> {
    let (rx, checker): (Box<dyn FrameSource>, Option<Box<dyn FrameSink>>) = match &opts.rx_pcap {
        Some(p) => {
            let src =
                dataplane::pcap::PcapSource::open(p).map_err(|e| RunError::Setup(e.to_string()))?;
            *rx_pcap = Some(src.counters());
            (Box::new(src), None)
        }
        None => {
            let Some(t) = traffic.as_mut() else {
                return Err(RunError::Setup("no traffic generator was built".into()));
            };
            let (Some(src), Some(sink)) = (t.take_source(), t.take_sink()) else {
                return Err(RunError::Setup("traffic already taken".into()));
            };
            (src, Some(sink))
        }
    };
    let tx: Box<dyn FrameSink> = match (&opts.tx_pcap, checker) {
        (Some(p), chk) => {
            let sink =
                dataplane::pcap::PcapSink::create(p).map_err(|e| RunError::Setup(e.to_string()))?;
            *tx_pcap = Some(sink.counters());
            let pcap: Box<dyn FrameSink> = Box::new(sink);
            match chk {
                Some(c) => Box::new(Tee(pcap, c)),
                None => pcap,
            }
        }
        (None, Some(c)) => c,
        (None, None) => Box::new(dataplane::link::CountingSink::default()),
    };
    Ok(Link { rx, tx })
}

/// The `wire_thread` object: `on` (whether the generator's port had a tester thread,
/// `run.wire_thread`) and, when on, its counters summed over the testers: frames handed to the
/// port (`rx_frames`) and taken from it (`tx_frames`), how often the tester found the port's
/// receive queue full (`rx_full`, it waited), the port found the transmit queue full
/// (`tx_full`, it waited) or no frame waiting (`rx_empty`: the tester was behind; `rx_starved`:
/// of these, the looks after the first that a frame followed, each a paced arrival late), and with
/// `host_times` the testers' CPU seconds (`cpu_s`) and the worker's absences from the wire:
/// `look_gaps` (looks more than `look_gap_limit_ms`, the time the Rx ring lasts at the offered
/// load, apart) and the longest (`look_gap_max_ms`). Virtual runs leave the counters that depend on
/// thread timing out, so their JSON stays the same on every run.
fn wire_thread_json(
    testers: &[Arc<dataplane::link::wire::WireCounters>],
    host_times: bool,
) -> Value {
    let mut v = json!({ "on": !testers.is_empty() });
    if testers.is_empty() {
        return v;
    }
    let sum = |k: &str| -> u64 {
        testers
            .iter()
            .map(|t| {
                t.snapshot()
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map_or(0, |(_, c)| *c)
            })
            .sum()
    };
    v["rx_frames"] = json!(sum("rx_frames"));
    v["tx_frames"] = json!(sum("tx_frames"));
    if host_times {
        for k in ["rx_full", "tx_full", "rx_empty", "rx_starved", "look_gaps"] {
            v[k] = json!(sum(k));
        }
        v["cpu_s"] = json!(sum("cpu_ns") as f64 * 1e-9);
        let max = |k: &str| {
            testers
                .iter()
                .filter_map(|t| t.snapshot().into_iter().find(|(n, _)| *n == k))
                .map(|(_, c)| c)
                .max()
                .unwrap_or(0)
        };
        v["look_gap_max_ms"] = json!(max("look_gap_max_ns") as f64 * 1e-6);
        v["look_gap_limit_ms"] = json!(max("look_gap_limit_ns") as f64 * 1e-6);
    }
    v
}

/// The `pcap` object of a run replaying `--rx-pcap`: the records read (`records`, per pass
/// summed), the frames delivered to the wire, the records not delivered by reason (`runt`,
/// `oversize`, `truncated`, `damaged`: `wire.rx_frames` plus these equal `records`), and the
/// first such record with its byte offset (`first_error`, null when none).
fn pcap_json(c: &dataplane::pcap::PcapCounters) -> Value {
    let s = c.snapshot();
    let mut v = json!({
        "records": s.frames + s.bad_records,
        "frames": s.frames,
        "snapped": s.snapped_records,
        "first_error": c.first_error(),
    });
    for r in dataplane::pcap::PcapDrop::ALL {
        v[r.as_str()] = json!(s.dropped(r));
    }
    v
}

/// The virtual NIC's part of the supervision: the generator stops at the end of the run, a
/// `--tx-pcap` capture that failed to write stops the run, and the live line shows the PCIe
/// utilisation per direction since the previous line (busy time booked on each link over the
/// queues' clock: model time, the virtual clock in virtual runs).
struct VnicSupervision<'a> {
    traffic: Option<&'a Traffic>,
    tx_pcap: Option<&'a dataplane::pcap::PcapCounters>,
    model: &'a ModelSink,
    last_pcie: (u64, u64, u64),
}

impl Supervision for VnicSupervision<'_> {
    fn must_stop(&mut self) -> bool {
        self.tx_pcap
            .is_some_and(|c| c.write_errors.load(Ordering::Relaxed) > 0)
    }

    fn stop(&mut self) {
        if let Some(t) = self.traffic {
            t.stop();
        }
    }

    fn live_extra(&mut self) -> String {
        let live = &self.model.live;
        let load = |f: fn(&LiveModel) -> &AtomicU64| {
            live.iter()
                .map(|l| f(l).load(Ordering::Relaxed))
                .sum::<u64>()
        };
        let (up, down) = (load(|l| &l.up_busy_ps), load(|l| &l.down_busy_ps));
        let clock = live
            .iter()
            .map(|l| l.now_ps.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let last = self.last_pcie;
        let span = clock.saturating_sub(last.2) as f64 * live.len().max(1) as f64;
        let (uu, ud) = if span > 0.0 {
            (
                100.0 * up.saturating_sub(last.0) as f64 / span,
                100.0 * down.saturating_sub(last.1) as f64 / span,
            )
        } else {
            (0.0, 0.0)
        };
        self.last_pcie = (up, down, clock);
        format!(" | PCIe up {uu:5.1}% down {ud:5.1}%")
    }
}

/// Builds the JSON summary. Keys of the foundation are stable: later work adds keys, never
/// renames these.
#[allow(clippy::too_many_arguments)]
fn summary(
    cfg: &RunConfig,
    profile: &HardwareProfile,
    offered: Option<f64>,
    ports: &[VnicPort],
    reports: &[WorkerReport],
    traffic: Option<&TrafficReport>,
    nat: Option<&(NatReturnConfig, NatBidirReport)>,
    wall_elapsed: f64,
) -> Value {
    // The ports of one NIC share its PCIe link and memory: their queues' reports add up.
    let queue_reports: Vec<QueueModelReport> = ports
        .iter()
        .flat_map(|p| p.queue_model_reports())
        .flatten()
        .collect();
    let m = PortModel::summarize(&queue_reports);
    // Every port's queues share each worker's pools and the NIC's nicmem: report them once.
    let port = &ports[0];
    // Virtual runs report model time only, so the same config gives the same JSON.
    let elapsed = if m.virtual_clock {
        m.interval_ps as f64 * 1e-12
    } else {
        wall_elapsed
    };
    let mut q = QueueStats::default();
    let mut drops = DropCounts::default();
    for r in reports {
        for s in &r.queue_stats {
            q.add(s);
        }
        drops.merge(&r.drops);
    }
    let mut pools = Vec::new();
    for qp in port.pools() {
        let mut push = |s: nicmem::PoolStats| {
            pools.push(json!({
                "name": s.name, "kind": s.kind.as_str(), "buf_size": s.buf_size, "count": s.count,
                "in_use": s.in_use, "high_water": s.high_water, "alloc_failures": s.alloc_failures,
            }))
        };
        push(qp.header.stats());
        if let Some(p) = &qp.host_payload {
            push(p.stats());
        }
        if let Some(p) = &qp.nic_payload {
            push(p.stats());
        }
    }
    let nm = port.nicmem().stats();
    let mut out = Value::Object(counter_keys(cfg, &q, &drops, elapsed, elapsed));
    let extra = json!({
        "pools": pools,
        "nicmem": {
            "capacity": nm.capacity, "allocated": nm.allocated, "peak_allocated": nm.peak_allocated,
            "aliased": cfg.vnic.nicmem_alias,
            "cpu_bytes_read": nm.cpu_bytes_read, "cpu_bytes_written": nm.cpu_bytes_written,
            "bytes_read": m.counters.nicmem_bytes_read,
            "bytes_written": m.counters.nicmem_bytes_written,
            "peak_bytes": m.counters.nicmem_peak_bytes,
        },
        "nfs": nf_counters(reports),
        "rx_pcie_overrun": q.rx_pcie_overrun,
    });
    if let (Value::Object(o), Value::Object(e)) = (&mut out, extra) {
        o.extend(e);
    }
    model_keys(&mut out, &m, profile, offered, &q, cfg);
    if cfg.vnic.faults != crate::config::FaultsSection::default()
        || q.faults != dataplane::FaultCounts::default()
    {
        out["faults"] = faults_json(&q, reports);
    }
    if let Some(t) = traffic {
        out["frame_size"] = json!(t.frame_size);
        out["payload_mismatches"] = json!(t.payload_mismatches);
        out["seq_lost"] = json!(t.seq_lost);
        out["traffic"] = crate::traffic::report_json(t);
        if let Some((c, r)) = nat {
            crate::traffic::add_nat_json(&mut out["traffic"], c, r);
        }
    } else {
        out["payload_mismatches"] = json!(0);
        out["seq_lost"] = json!(0);
    }
    out
}

/// The `faults` object of a run with `[vnic.faults]`: the injected faults and recoveries summed
/// (the names of [`dataplane::FaultCounts::named`]) and per queue (`queues`: `port`, `queue` and the same counters).
fn faults_json(total: &QueueStats, reports: &[WorkerReport]) -> Value {
    let named = |f: &dataplane::FaultCounts| {
        f.named()
            .iter()
            .map(|&(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<String, Value>>()
    };
    let mut out = named(&total.faults);
    let mut queues = Vec::new();
    for (w, r) in reports.iter().enumerate() {
        for (p, s) in r.queue_stats.iter().enumerate() {
            let mut q = named(&s.faults);
            q.insert("port".into(), json!(p));
            q.insert("queue".into(), json!(w));
            queues.push(Value::Object(q));
        }
    }
    out.insert("queues".into(), Value::Array(queues));
    Value::Object(out)
}

/// Adds the accounting and timing keys of the virtual NIC model to the summary (issue 3): `pcie`,
/// `hostmem`, `wire`, `virtual_time_ns`, `throughput_mpps`, `throughput_gbps`, `latency_ns`,
/// `bottleneck`, `offered_gbps`, plus `clock`, `profile` and `utilization`.
fn model_keys(
    out: &mut Value,
    m: &PortModel,
    profile: &HardwareProfile,
    offered: Option<f64>,
    q: &QueueStats,
    cfg: &RunConfig,
) {
    let c = &m.counters;
    let pcie = c.pcie();
    let secs = m.interval_ps as f64 * 1e-12;
    let rate = |bytes: u64| {
        if secs > 0.0 {
            bytes as f64 * 8.0 / secs / 1e9
        } else {
            0.0
        }
    };
    let fwd = q.wire_tx_frames;
    let per_pkt = |b: u64| {
        if fwd > 0 { b as f64 / fwd as f64 } else { 0.0 }
    };
    let items: serde_json::Map<String, Value> = Item::ALL
        .iter()
        .map(|&i| {
            let t = c.item(i);
            (
                i.key().to_string(),
                json!({
                    "up_bytes": t.up_bytes, "down_bytes": t.down_bytes,
                    "up_tlps": t.up_tlps, "down_tlps": t.down_tlps,
                }),
            )
        })
        .collect();
    let capacity = dataplane::pcie_model::PcieLink::from_profile(&profile.nic.pcie)
        .map(|l| l.capacity_gbps())
        .unwrap_or(0.0);
    out["pcie"] = json!({
        "upstream_bytes": pcie.up_bytes,
        "downstream_bytes": pcie.down_bytes,
        "upstream_tlps": pcie.up_tlps,
        "downstream_tlps": pcie.down_tlps,
        "upstream_util": m.util("pcie_up"),
        "downstream_util": m.util("pcie_down"),
        "upstream_bytes_per_packet": per_pkt(pcie.up_bytes),
        "downstream_bytes_per_packet": per_pkt(pcie.down_bytes),
        "capacity_gbps": capacity,
        "read_stalls": m.read_stalls,
        "items": items,
    });
    out["hostmem"] = json!({
        "bytes_read": c.host_bytes_read,
        "bytes_written": c.host_bytes_written,
        "data_bytes_read": c.host_data_read,
        "data_bytes_written": c.host_data_written,
        "dram_bytes": c.dram_bytes,
        "ddio_hit_rate": m.ddio_hit,
        "util": m.util("hostmem"),
    });
    out["wire"] = json!({
        "rx_gbps": rate(c.wire_rx_bytes),
        "tx_gbps": rate(c.wire_tx_bytes),
        "rx_frames": c.wire_rx_frames,
        "tx_frames": c.wire_tx_frames,
        "rx_bytes": c.wire_rx_bytes,
        "tx_bytes": c.wire_tx_bytes,
    });
    out["virtual_time_ns"] = json!(m.interval_ps / 1000);
    out["throughput_mpps"] = json!(if secs > 0.0 {
        fwd as f64 / secs / 1e6
    } else {
        0.0
    });
    // Frame bits including the FCS (the RFC 2544 rate); `wire.tx_gbps` adds preamble and IFG.
    out["throughput_gbps"] = json!(rate(q.tx_bytes + u64::from(profile.nic.fcs_bytes) * fwd));
    // Exact min, max and mean (tracked per packet); percentiles from the histogram, clamped to
    // the exact extremes.
    out["latency_ns"] = json!({
        "min": m.latency_quantile(0.0),
        "p50": m.latency_quantile(0.5),
        "p90": m.latency_quantile(0.9),
        "p99": m.latency_quantile(0.99),
        "p999": m.latency_quantile(0.999),
        "max": m.latency_quantile(1.0),
        "mean": m.latency_mean(),
        "count": m.latency_count(),
    });
    out["bottleneck"] = json!(m.bottleneck);
    // Pulled runs report the rate frames actually arrived at.
    out["offered_gbps"] = json!(offered.unwrap_or_else(|| rate(c.wire_rx_bytes)));
    out["offered_pulled"] = json!(offered.is_none());
    out["clock"] = json!(cfg.run.clock.as_str());
    out["profile"] = json!(profile.nic.name);
    out["utilization"] = Value::Object(
        m.utilization
            .iter()
            .map(|(k, u)| (k.to_string(), json!(u)))
            .collect(),
    );
}
