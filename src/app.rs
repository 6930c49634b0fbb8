//! `dataplane run`: builds the virtual NIC, pools, mode and NF chains from a config, attaches the
//! wire (embedded generator and checking sink, or pcap files), runs one worker per core with live
//! stats, and produces the run summary.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dataplane::driver::vnic::{Item, ModelSink, PortModel, VnicPort};
use dataplane::model::HardwareProfile;
use dataplane::runloop::{LiveStats, RunControl, WorkerReport, WorkerSetup, run_worker};
use dataplane::wire::{FrameSink, FrameSource, Link};
use dataplane::{DatapathMode, DropCounts, DropReason, Port, QueueStats, merge_stats};
use serde_json::{Value, json};

use crate::config::{ConfigError, RunConfig};
use crate::traffic::{Traffic, TrafficReport};
use pktgen::nat::{NatBidirReport, NatReturnConfig};

/// Command-line options of `dataplane run`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The config file.
    pub config: PathBuf,
    /// `--set key=value` overrides, in order.
    pub sets: Vec<String>,
    /// `--packets N`.
    pub packets: Option<u64>,
    /// `--duration S`.
    pub duration_s: Option<f64>,
    /// `--mode M`.
    pub mode: Option<DatapathMode>,
    /// `--workers N`.
    pub workers: Option<u16>,
    /// `--rx-pcap FILE`: the wire delivers this capture instead of the generator.
    pub rx_pcap: Option<PathBuf>,
    /// `--tx-pcap FILE`: transmitted frames are written here.
    pub tx_pcap: Option<PathBuf>,
    /// Print the live stats line (to stderr).
    pub live_stats: bool,
}

/// Errors of a run: a bad config, or a failure setting up ports or files.
#[derive(Debug)]
pub enum RunError {
    /// The config (or an override) is invalid; nothing ran.
    Config(ConfigError),
    /// Setting up the run failed; nothing ran.
    Setup(String),
    /// The run started but an output it must write failed (a `--tx-pcap` capture, an NF's dump
    /// file): the results are incomplete, so the run failed.
    Output(String),
}

impl RunError {
    /// The process exit code for this error: 2 when nothing ran (bad config or setup), 1 when
    /// the run started and failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Config(_) | RunError::Setup(_) => 2,
            RunError::Output(_) => 1,
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Config(e) => e.fmt(f),
            RunError::Setup(s) | RunError::Output(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for RunError {}

impl From<ConfigError> for RunError {
    fn from(e: ConfigError) -> Self {
        RunError::Config(e)
    }
}

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

impl RunOptions {
    /// The `--set` overrides with `--mode`, `--packets`, `--duration` and `--workers` folded in as
    /// the keys they stand for (applied last, so they win), for every driver's config loader.
    pub fn override_sets(&self) -> Vec<String> {
        let mut sets = self.sets.clone();
        if let Some(m) = self.mode {
            sets.push(format!("datapath.mode={}", m.as_str()));
        }
        if let Some(n) = self.packets {
            sets.push(format!("run.packets={n}"));
        }
        if let Some(d) = self.duration_s {
            sets.push(format!("run.duration_s={d}"));
        }
        if let Some(w) = self.workers {
            sets.push(format!("run.workers={w}"));
        }
        sets
    }
}

/// Loads the config with the command-line overrides folded in as `--set`s.
pub fn load_config(opts: &RunOptions) -> Result<RunConfig, ConfigError> {
    let sets = opts.override_sets();
    RunConfig::load(&opts.config, &sets)
}

/// Runs the config; returns the JSON summary.
pub fn run(opts: &RunOptions) -> Result<Value, RunError> {
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
    #[cfg(feature = "dpdk")]
    if let Some(summary) = crate::dpdk_run::run_if_dpdk(opts)? {
        return Ok(summary);
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
    // Build every NF chain first: a bad pipeline fails before any packet moves.
    let chains = (0..workers)
        .map(|w| cfg.build_chain(path, w, workers))
        .collect::<Result<Vec<_>, _>>()?;
    let mut traffic = if opts.rx_pcap.is_none() {
        let nat = cfg.nat_return(path)?;
        Some(
            Traffic::with_nat_return(
                &cfg.generator_table(),
                cfg.run.packets,
                cfg.run.duration_s,
                cfg.vnic.max_frame,
                nat.as_ref(),
            )
            .map_err(|(key, msg)| ConfigError {
                file: path.to_path_buf(),
                key,
                msg,
            })?,
        )
    } else {
        // The generator does not run, but a bad [traffic] section is still a bad config.
        crate::traffic::generator_config(&cfg.generator_table(), cfg.vnic.max_frame).map_err(
            |(key, msg)| ConfigError {
                file: path.to_path_buf(),
                key,
                msg: format!("{msg} ([traffic] is checked with --rx-pcap too)"),
            },
        )?;
        None
    };
    let mut rx_pcap = None;
    let (rx, checker): (Box<dyn FrameSource>, Option<Box<dyn FrameSink>>) = match &opts.rx_pcap {
        Some(p) => {
            let src =
                dataplane::pcap::PcapSource::open(p).map_err(|e| RunError::Setup(e.to_string()))?;
            rx_pcap = Some(src.counters());
            (Box::new(src), None)
        }
        None => {
            let t = traffic.as_mut().expect("traffic built when no rx pcap");
            let (Some(src), Some(sink)) = (t.take_source(), t.take_sink()) else {
                return Err(RunError::Setup("traffic already taken".into()));
            };
            (src, Some(sink))
        }
    };
    let mut tx_pcap = None;
    let tx: Box<dyn FrameSink> = match (&opts.tx_pcap, checker) {
        (Some(p), chk) => {
            let sink =
                dataplane::pcap::PcapSink::create(p).map_err(|e| RunError::Setup(e.to_string()))?;
            tx_pcap = Some(sink.counters());
            let pcap: Box<dyn FrameSink> = Box::new(sink);
            match chk {
                Some(c) => Box::new(Tee(pcap, c)),
                None => pcap,
            }
        }
        (None, Some(c)) => c,
        (None, None) => Box::new(dataplane::wire::CountingSink::default()),
    };
    // Flow steering the NFs ask for (e.g. NAT return traffic to the worker owning its port
    // slice); with one queue there is nothing to steer.
    let mut vnic = cfg.vnic_config(&profile, offered);
    if workers > 1 {
        vnic.steering = chains
            .iter()
            .enumerate()
            .flat_map(|(w, c)| c.steering_rules(w as u16))
            .collect();
    }
    let mut port = VnicPort::new("vnic0", 0, vnic, Link { rx, tx })
        .map_err(|e| RunError::Setup(format!("config {}: vnic: {e}", path.display())))?;
    let model_sink = port.model_sink();
    let queues = port.take_queues();
    let live: Arc<Vec<LiveStats>> = Arc::new((0..workers).map(|_| LiveStats::default()).collect());
    let control = RunControl {
        stop: Arc::new(Default::default()),
        drain_timeout: Duration::from_secs_f64(cfg.run.drain_timeout_s),
    };
    let start = Instant::now();
    let handles: Vec<_> = queues
        .into_iter()
        .zip(chains)
        .enumerate()
        .map(|(w, (q, chain))| {
            let setup = WorkerSetup {
                queues: vec![q],
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
    supervise(
        &cfg,
        opts,
        &handles,
        &live,
        &model_sink,
        &control,
        traffic.as_ref(),
        tx_pcap.as_deref(),
        start,
    );
    let reports: Vec<WorkerReport> = handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| RunError::Setup("a worker panicked".into()))
        })
        .collect::<Result<_, _>>()?;
    let elapsed = start.elapsed().as_secs_f64();
    port.join();
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
        &port,
        &reports,
        traffic_report.as_ref(),
        nat_report.as_ref(),
        elapsed,
    );
    if let Some(c) = &rx_pcap {
        out["pcap"] = pcap_json(c);
    }
    out["warnings"] = json!(warnings);
    Ok(out)
}

/// Prints the config's warnings ([`RunConfig::warnings`]) to stderr and returns them (for the
/// summary's `warnings`).
pub(crate) fn print_warnings(cfg: &RunConfig, path: &std::path::Path) -> Vec<String> {
    let warnings = cfg.warnings(path);
    for w in &warnings {
        eprintln!("warning: config {}: {w}", path.display());
    }
    warnings
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

/// Fails the run when a network function could not write its output at the end (a flow
/// counter's `dump_error`): its results are lost, so the run must not look successful.
pub(crate) fn nf_output_errors(reports: &[WorkerReport]) -> Result<(), RunError> {
    let errors: Vec<String> = reports
        .iter()
        .flat_map(|r| &r.nf_stats)
        .filter_map(|(name, stats)| {
            let e = stats.get("dump_error")?.as_str()?;
            Some(format!("{name}: cannot write its dump {e}"))
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(RunError::Output(format!(
            "{}; the run's results are incomplete, so it failed",
            errors.join("; ")
        )))
    }
}

/// True when `a` and `b` name the same existing file (through hard links or symbolic links too).
pub(crate) fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    }
}

/// Waits for the workers, printing the live stats line and enforcing `duration_s`; stops the run
/// when the `--tx-pcap` capture fails to write.
#[allow(clippy::too_many_arguments)]
fn supervise(
    cfg: &RunConfig,
    opts: &RunOptions,
    handles: &[std::thread::JoinHandle<WorkerReport>],
    live: &[LiveStats],
    model: &ModelSink,
    control: &RunControl,
    traffic: Option<&Traffic>,
    tx_pcap: Option<&dataplane::pcap::PcapCounters>,
    start: Instant,
) {
    // `check` guarantees a finite, non-negative interval; 0 turns the live line off.
    let interval =
        (cfg.run.stats_interval_s > 0.0).then(|| Duration::from_secs_f64(cfg.run.stats_interval_s));
    let mut next_print = interval.unwrap_or(Duration::ZERO);
    let mut rates = LiveRates::new(start);
    let mut last_pcie = (0u64, 0u64, 0u64);
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(20));
        let el = start.elapsed();
        let write_failed = tx_pcap.is_some_and(|c| c.write_errors.load(Ordering::Relaxed) > 0);
        if write_failed || (cfg.run.duration_s > 0.0 && el.as_secs_f64() >= cfg.run.duration_s) {
            if let Some(t) = traffic {
                t.stop();
            }
            control.stop.store(true, Ordering::Relaxed);
        }
        if let Some(iv) = interval
            && opts.live_stats
            && el >= next_print
        {
            next_print += iv;
            let rate = rates.line(live);
            let rx: u64 = live
                .iter()
                .map(|l| l.rx_packets.load(Ordering::Relaxed))
                .sum();
            let sum = |f: fn(&LiveStats) -> &std::sync::atomic::AtomicU64| -> u64 {
                live.iter().map(|l| f(l).load(Ordering::Relaxed)).sum()
            };
            // PCIe utilisation per direction since the last line: busy time booked on each link
            // over the queues' clock (model time; the virtual clock in virtual runs).
            let load =
                |f: fn(&dataplane::driver::vnic::LiveModel) -> &std::sync::atomic::AtomicU64| {
                    model
                        .live
                        .iter()
                        .map(|l| f(l).load(Ordering::Relaxed))
                        .sum::<u64>()
                };
            let (up, down) = (load(|l| &l.up_busy_ps), load(|l| &l.down_busy_ps));
            let clock = model
                .live
                .iter()
                .map(|l| l.now_ps.load(Ordering::Relaxed))
                .max()
                .unwrap_or(0);
            let span = clock.saturating_sub(last_pcie.2) as f64 * model.live.len().max(1) as f64;
            let (uu, ud) = if span > 0.0 {
                (
                    100.0 * up.saturating_sub(last_pcie.0) as f64 / span,
                    100.0 * down.saturating_sub(last_pcie.1) as f64 / span,
                )
            } else {
                (0.0, 0.0)
            };
            last_pcie = (up, down, clock);
            let mut drops = String::new();
            for r in DropReason::all() {
                let n: u64 = live
                    .iter()
                    .map(|l| l.drops[r.index()].load(Ordering::Relaxed))
                    .sum();
                if n > 0 {
                    drops.push_str(&format!(" {}={n}", r.name()));
                }
            }
            eprintln!(
                "[{:6.1}s] {rate} | PCIe up {:5.1}% down {:5.1}% | rx {} | primary {} secondary {} | nombuf {} | drops{}",
                el.as_secs_f64(),
                uu,
                ud,
                rx,
                sum(|l| &l.rx_primary),
                sum(|l| &l.rx_secondary),
                sum(|l| &l.rx_nombuf),
                if drops.is_empty() {
                    " 0".to_string()
                } else {
                    drops
                },
            );
        }
    }
}

/// Receive and transmit rates since the previous live line, each in Mpps and Gb/s with its
/// direction named (Gb/s over the frames' bytes without FCS, as the counters count them).
pub(crate) struct LiveRates {
    last: [u64; 4],
    at: Instant,
}

impl LiveRates {
    /// Rates measured from `start`.
    pub(crate) fn new(start: Instant) -> Self {
        Self {
            last: [0; 4],
            at: start,
        }
    }

    /// `rx X Mpps Y Gb/s | tx X Mpps Y Gb/s` since the previous call.
    pub(crate) fn line(&mut self, live: &[LiveStats]) -> String {
        let sum = |f: fn(&LiveStats) -> &std::sync::atomic::AtomicU64| -> u64 {
            live.iter().map(|l| f(l).load(Ordering::Relaxed)).sum()
        };
        let now_counts = [
            sum(|l| &l.rx_packets),
            sum(|l| &l.rx_bytes),
            sum(|l| &l.tx_packets),
            sum(|l| &l.tx_bytes),
        ];
        let now = Instant::now();
        let dt = (now - self.at).as_secs_f64().max(1e-9);
        let d = |i: usize| now_counts[i].saturating_sub(self.last[i]) as f64 / dt;
        let line = format!(
            "rx {:7.3} Mpps {:7.2} Gb/s | tx {:7.3} Mpps {:7.2} Gb/s",
            d(0) / 1e6,
            d(1) * 8.0 / 1e9,
            d(2) / 1e6,
            d(3) * 8.0 / 1e9
        );
        self.last = now_counts;
        self.at = now;
        line
    }
}

/// Builds the JSON summary. Keys of the foundation are stable: later work adds keys, never
/// renames these.
#[allow(clippy::too_many_arguments)]
fn summary(
    cfg: &RunConfig,
    profile: &HardwareProfile,
    offered: Option<f64>,
    port: &VnicPort,
    reports: &[WorkerReport],
    traffic: Option<&TrafficReport>,
    nat: Option<&(NatReturnConfig, NatBidirReport)>,
    wall_elapsed: f64,
) -> Value {
    let m = port.model_report();
    // Virtual runs report model time only, so the same config gives the same JSON.
    let elapsed = if m.virtual_clock {
        m.interval_ps as f64 * 1e-12
    } else {
        wall_elapsed
    };
    let mut q = QueueStats::default();
    let mut drops = DropCounts::default();
    let mut nf = serde_json::Map::new();
    for r in reports {
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
            "cpu_bytes_read": nm.cpu_bytes_read, "cpu_bytes_written": nm.cpu_bytes_written,
            "bytes_read": m.counters.nicmem_bytes_read,
            "bytes_written": m.counters.nicmem_bytes_written,
            "peak_bytes": m.counters.nicmem_peak_bytes,
        },
        "nfs": Value::Object(nf),
        "rx_pcie_overrun": q.rx_pcie_overrun,
    });
    if let (Value::Object(o), Value::Object(e)) = (&mut out, extra) {
        o.extend(e);
    }
    model_keys(&mut out, &m, profile, offered, &q, cfg);
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

/// The counter keys of the foundation that every driver's summary carries, under names that never
/// change: `mode`, `workers`, packet/byte counts, `drops` (every reason, plus the NIC's `rx_missed`
/// and `pcie_overrun`), ring and descriptor counters, `elapsed_s`, and `mpps`/`gbps` computed over
/// `rate_secs`.
pub(crate) fn counter_keys(
    cfg: &RunConfig,
    q: &QueueStats,
    drops: &DropCounts,
    elapsed: f64,
    rate_secs: f64,
) -> serde_json::Map<String, Value> {
    let mut drops_obj: serde_json::Map<String, Value> = DropReason::all()
        .into_iter()
        .map(|r| (r.name().to_string(), json!(drops.get(r))))
        .collect();
    drops_obj.insert("rx_missed".into(), json!(q.rx_missed));
    drops_obj.insert("pcie_overrun".into(), json!(q.rx_pcie_overrun));
    let secs = rate_secs.max(1e-9);
    let v = json!({
        "mode": cfg.datapath.mode.as_str(),
        "workers": cfg.run.workers,
        "packets_rx": q.rx_packets,
        "packets_tx": q.wire_tx_frames,
        "bytes_rx": q.rx_bytes,
        "bytes_tx": q.tx_bytes,
        "drops": drops_obj,
        "rx_primary": q.rx_primary,
        "rx_secondary": q.rx_secondary,
        "rx_nombuf": q.rx_nombuf,
        "rx_missed": q.rx_missed,
        "rx_oversize": q.rx_oversize,
        "desc_errors": q.desc_errors,
        "tx_full": q.tx_full,
        "elapsed_s": elapsed,
        "mpps": q.wire_tx_frames as f64 / secs / 1e6,
        "gbps": q.tx_bytes as f64 * 8.0 / secs / 1e9,
    });
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
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
    let capacity = dataplane::model::PcieLink::from_profile(&profile.nic.pcie)
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

/// Prints a human-readable summary (stderr when JSON goes to stdout).
pub fn print_summary(s: &Value, to: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(to, "summary: mode {} workers {}", s["mode"], s["workers"])?;
    let secs = s["elapsed_s"].as_f64().unwrap_or(0.0).max(1e-9);
    let per_s = |k: &str| s[k].as_u64().unwrap_or(0) as f64 / secs;
    let clock = s["clock"].as_str().unwrap_or("wall");
    writeln!(
        to,
        "  packets rx {} tx {}  bytes rx {} tx {}  in {:.3} s ({} time)",
        s["packets_rx"],
        s["packets_tx"],
        s["bytes_rx"],
        s["bytes_tx"],
        secs,
        if clock == "virtual" {
            "model"
        } else {
            "wall-clock"
        },
    )?;
    writeln!(
        to,
        "  rx {:.3} Mpps {:.2} Gb/s | tx {:.3} Mpps {:.2} Gb/s (frame bytes without FCS, over \
         that {} time)",
        per_s("packets_rx") / 1e6,
        per_s("bytes_rx") * 8.0 / 1e9,
        per_s("packets_tx") / 1e6,
        per_s("bytes_tx") * 8.0 / 1e9,
        if clock == "virtual" {
            "model"
        } else {
            "wall-clock"
        },
    )?;
    writeln!(
        to,
        "  payload from primary (nicmem) {} secondary (host) {}  rx_nombuf {}  rx_missed {}  desc_errors {}",
        s["rx_primary"], s["rx_secondary"], s["rx_nombuf"], s["rx_missed"], s["desc_errors"]
    )?;
    if let Some(fs) = s.get("frame_size") {
        writeln!(
            to,
            "  traffic: frame size {} B  payload_mismatches {}  seq_lost {}",
            fs, s["payload_mismatches"], s["seq_lost"]
        )?;
    }
    let t = &s["traffic"];
    if t["nat_return"] == true {
        writeln!(
            to,
            "  NAT return traffic (NAT {}, return ratio {}): {} mappings learned ({} remapped)",
            t["nat_ip"].as_str().unwrap_or("?"),
            t["return_ratio"],
            t["forward"]["learned_mappings"],
            t["forward"]["remapped_mappings"],
        )?;
        for dir in ["forward", "return"] {
            let d = &t[dir];
            writeln!(
                to,
                "    {dir:<7} sent {} received {} lost {} duplicates {} reordered {} payload_mismatches {} translated_wrong {}",
                d["sent"],
                d["received"],
                d["seq_lost"],
                d["duplicates"],
                d["reordered"],
                d["payload_mismatches"],
                d["translated_wrong"],
            )?;
        }
        writeln!(
            to,
            "    return frames not sent (flow's mapping not learned yet): {}",
            t["return"]["not_sent_unlearned"]
        )?;
    }
    if s.get("pcie").is_some() {
        let pct = |v: &Value| 100.0 * v.as_f64().unwrap_or(0.0);
        writeln!(
            to,
            "  model ({} clock, {}): PCIe up {:.1} % ({:.1} B/packet) down {:.1} % ({:.1} B/packet) | \
             latency p50 {} p99 {} ns | bottleneck {}",
            s["clock"].as_str().unwrap_or("?"),
            s["profile"].as_str().unwrap_or("?"),
            pct(&s["pcie"]["upstream_util"]),
            s["pcie"]["upstream_bytes_per_packet"]
                .as_f64()
                .unwrap_or(0.0),
            pct(&s["pcie"]["downstream_util"]),
            s["pcie"]["downstream_bytes_per_packet"]
                .as_f64()
                .unwrap_or(0.0),
            s["latency_ns"]["p50"],
            s["latency_ns"]["p99"],
            s["bottleneck"].as_str().unwrap_or("?"),
        )?;
        writeln!(
            to,
            "  model: wire rx {:.2} tx {:.2} Gb/s L1 (offered {:.2}) | transmitted {:.3} Mpps {:.2} Gb/s with FCS over {} ns of the model's clock",
            s["wire"]["rx_gbps"].as_f64().unwrap_or(0.0),
            s["wire"]["tx_gbps"].as_f64().unwrap_or(0.0),
            s["offered_gbps"].as_f64().unwrap_or(0.0),
            s["throughput_mpps"].as_f64().unwrap_or(0.0),
            s["throughput_gbps"].as_f64().unwrap_or(0.0),
            s["virtual_time_ns"],
        )?;
    }
    let p = &s["pcap"];
    if p.is_object() {
        let reasons =
            dataplane::pcap::PcapDrop::ALL.map(|r| format!("{} {}", r.as_str(), p[r.as_str()]));
        writeln!(
            to,
            "  rx pcap: {} records, {} frames delivered, not delivered: {}",
            p["records"],
            p["frames"],
            reasons.join(", ")
        )?;
        if let Some(e) = p["first_error"].as_str() {
            writeln!(to, "    first record not delivered: {e}")?;
        }
    }
    let drops: Vec<String> = s["drops"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        })
        .unwrap_or_default();
    writeln!(
        to,
        "  drops: {}",
        if drops.is_empty() {
            "none".to_string()
        } else {
            drops.join(" ")
        }
    )?;
    Ok(())
}
