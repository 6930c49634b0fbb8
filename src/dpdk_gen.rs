//! `pktgen dpdk-gen` (feature `dpdk`): pktgen's generator transmitting on DPDK ports.
//!
//! Takes a run config with a `[dpdk]` section (EAL arguments, ports, `worker_cores`, descriptors,
//! pool cache), its `[traffic]` table (the generator's profile), `[run]` (`workers`, `packets`,
//! `duration_s`, `stats_interval_s`, `drain_timeout_s`) and `[datapath] burst`; see
//! `configs/dpdk-txgen.toml`. Every worker owns queue `w` of every port and, on each of them, one
//! [`Generator`] (stream id `traffic.stream + port * workers + worker`, so a checking sink tells
//! them apart) writing straight into mbufs through [`TxGen`]. Ports run in host mode (one mbuf per
//! frame) whatever `datapath.mode` says.
//!
//! The per-frame path is [`TxGen::burst`] calling [`Generator::produce_at`]: no allocation, lock,
//! copy or clock read per frame (timestamps, when on, are read once per burst at full speed, or
//! are the intended departure times when paced). Counts: `sent` = frames the PMD accepted (the
//! same thing `dpdk-testpmd` counts as Tx packets), `gen_unsent` = frames written but never
//! accepted (dropped at once with `--unsent drop`, or still held for a retry when the run ended),
//! `generated = sent + gen_unsent`.
//!
//! A port whose device resets is reset and set up again while the run goes on (see
//! [`dataplane::driver::dpdk::TxGen`]): the summary counts the resets per port
//! (`device_resets`, `reset_failures`) and the frames freed because a port was being reset
//! (`reset_unsent`, part of `gen_unsent`; with `--unsent retry` they wait instead). A link that
//! goes down is counted per port (`link_down_events`) and named on the live line while it is
//! down; meanwhile the ring takes nothing, so frames wait (retry) or are `gen_unsent` (drop).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dataplane::DatapathMode;
use dataplane::driver::dpdk::{PortEventStats, TxGen, TxGenCounters, UnsentPolicy};
use dataplane::port::LinkState;
use pktgen::profile::TrafficOverrides;
use pktgen::rate::{Pacer, Rate, WIRE_OVERHEAD, wall_ns};
use pktgen::{FCS_LEN, Generator, GeneratorConfig};
use serde::Serialize;
use serde_json::{Value, json};

use crate::config::ConfigError;
use crate::run::dpdk as dpdk_run;
use crate::run::{RunError, RunOptions};

/// How fast to send.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GenRate {
    /// As fast as the PMD takes frames.
    Max,
    /// Paced at this rate per port (split evenly across the workers).
    Paced(Rate),
}

impl std::str::FromStr for GenRate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim() == "max" {
            return Ok(GenRate::Max);
        }
        s.parse::<Rate>().map(GenRate::Paced)
    }
}

impl std::fmt::Display for GenRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GenRate::Max => f.write_str("max"),
            GenRate::Paced(r) => r.fmt(f),
        }
    }
}

/// What `pktgen dpdk-gen` was asked to do (the config file plus command-line overrides).
#[derive(Clone, Debug)]
pub struct GenOptions {
    /// The run config with a `[dpdk]` section.
    pub config: PathBuf,
    /// `key=value` overrides of config keys, applied in order.
    pub sets: Vec<String>,
    /// Changes to the `[traffic]` profile, applied after `sets`.
    pub traffic: TrafficOverrides,
    /// Frames per port, split across the workers (`None`: `run.packets`, 0 = unlimited).
    pub count: Option<u64>,
    /// Stop after this many seconds (`None`: `run.duration_s`, 0 = no limit).
    pub duration_s: Option<f64>,
    /// Rate per port (`None`: `traffic.rate_gbps` as L1 Gb/s when set and non-zero, else max).
    pub rate: Option<GenRate>,
    /// Line rate in Gb/s for `%` rates (`None`: the link speed the PMD reports).
    pub line_gbps: Option<f64>,
    /// Frames per Tx call (`None`: `datapath.burst`).
    pub burst: Option<usize>,
    /// What to do with frames the Tx ring does not take.
    pub unsent: UnsentPolicy,
    /// Print a line per `run.stats_interval_s` to stderr.
    pub live_stats: bool,
}

impl GenOptions {
    /// Options for `config` with everything else from the config file.
    pub fn new(config: impl Into<PathBuf>) -> Self {
        Self {
            config: config.into(),
            sets: Vec::new(),
            traffic: TrafficOverrides::default(),
            count: None,
            duration_s: None,
            rate: None,
            line_gbps: None,
            burst: None,
            unsent: UnsentPolicy::Retry,
            live_stats: false,
        }
    }
}

/// One port's part of the summary.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PortSummary {
    /// Port (device) name.
    pub name: String,
    /// PMD name.
    pub driver: String,
    /// Frames the PMD accepted from our generators.
    pub sent: u64,
    /// Frames written but never accepted.
    pub gen_unsent: u64,
    /// The port's own `opackets` counter after the run (includes anything sent before).
    pub port_opackets: u64,
    /// Frames freed because the port was being reset (part of `gen_unsent`).
    pub reset_unsent: u64,
    /// Device resets recovered during the run (the port reset and set up again).
    pub device_resets: u64,
    /// Device resets during the run after which the port could not be set up again.
    pub reset_failures: u64,
    /// Times the port's link went down during the run.
    pub link_down_events: u64,
}

/// The result of a generator run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct GenSummary {
    /// Always `"dpdk"`.
    pub driver: &'static str,
    /// Per-port figures.
    pub ports: Vec<PortSummary>,
    /// Worker threads (one core each when `worker_cores` is set).
    pub workers: u16,
    /// Frames per Tx call.
    pub burst: usize,
    /// `retry` or `drop`.
    pub unsent_policy: String,
    /// `max` or the configured rate per port.
    pub rate: String,
    /// Configured frame size, FCS included (mean for a size mix).
    pub frame_size: u32,
    /// Flows per generator.
    pub flows: u32,
    /// Frames written by the generators (`sent + gen_unsent`).
    pub generated: u64,
    /// Frames the PMDs accepted.
    pub sent: u64,
    /// Bytes the PMDs accepted (mbuf data, FCS excluded).
    pub sent_bytes: u64,
    /// Frames written but never accepted by a PMD.
    pub gen_unsent: u64,
    /// Frames freed because their port was being reset (part of `gen_unsent`).
    pub reset_unsent: u64,
    /// Device resets of the ports during the run, recovered or not.
    pub device_resets: u64,
    /// Bursts skipped because a pool was empty.
    pub alloc_failed: u64,
    /// The run (without a time limit) stopped before its count because the ports took no frame
    /// for `run.drain_timeout_s` while frames waited for them (a link down, a dead device).
    pub stalled: bool,
    /// Seconds the workers generated (the longest worker).
    pub elapsed_s: f64,
    /// Frames accepted per second, in millions.
    pub mpps: f64,
    /// `mpps / workers`.
    pub mpps_per_core: f64,
    /// Wire rate in Gb/s including FCS, preamble and inter-frame gap.
    pub gbps_l1: f64,
    /// Rate in Gb/s of the frames including FCS.
    pub gbps_l2: f64,
    /// Mpps of each stats interval (empty without live stats).
    pub interval_mpps: Vec<f64>,
}

impl GenSummary {
    /// The summary as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({"error": e.to_string()}))
    }

    /// A two-line human-readable summary.
    pub fn text(&self) -> String {
        let ports: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("{} ({})", p.name, p.driver))
            .collect();
        let opk: u64 = self.ports.iter().map(|p| p.port_opackets).sum();
        let mut events = String::new();
        if self.stalled {
            events.push_str(
                "\nstopped early: the ports took no frame for run.drain_timeout_s while frames \
                 waited (generated < the count)",
            );
        }
        for p in &self.ports {
            if p.device_resets + p.reset_failures + p.link_down_events > 0 {
                events.push_str(&format!(
                    "\nport {}: {} device reset(s) recovered, {} not, link down {} time(s); \
                     {} frame(s) freed during resets (in gen_unsent)",
                    p.name, p.device_resets, p.reset_failures, p.link_down_events, p.reset_unsent
                ));
            }
        }
        format!(
            "dpdk-gen on {}: {} worker(s), burst {}, {} B frames, {} flow(s), rate {}, unsent {}\n\
             sent {} frames in {:.2} s: {:.2} Mpps ({:.2} Mpps per core), {:.2} Gb/s L1 \
             ({:.2} Gb/s L2); gen_unsent {}; alloc_failed {}; port opackets {}{}",
            ports.join(", "),
            self.workers,
            self.burst,
            self.frame_size,
            self.flows,
            self.rate,
            self.unsent_policy,
            self.sent,
            self.elapsed_s,
            self.mpps,
            self.mpps_per_core,
            self.gbps_l1,
            self.gbps_l2,
            self.gen_unsent,
            self.alloc_failed,
            opk,
            events
        )
    }
}

/// One generator on one queue of one port.
struct Lane {
    port: usize,
    tx: TxGen,
    generator: Generator,
    pacer: Option<Pacer>,
}

/// What a worker hands back: its lanes (read after every worker stopped) and how long it ran.
struct WorkerOut {
    lanes: Vec<Lane>,
    active_s: f64,
}

fn cfg_err(path: &Path, key: &str, msg: String) -> RunError {
    RunError::Config(ConfigError {
        file: path.to_path_buf(),
        key: key.to_string(),
        msg,
    })
}

/// Runs the generator on the config's DPDK ports and returns the summary.
pub fn run(opts: &GenOptions) -> Result<GenSummary, RunError> {
    let path = opts.config.as_path();
    let run_opts = RunOptions {
        config: opts.config.clone(),
        sets: opts.sets.clone(),
        packets: None,
        duration_s: opts.duration_s,
        mode: None,
        workers: None,
        rx_pcap: None,
        tx_pcap: None,
        live_stats: opts.live_stats,
        ..RunOptions::default()
    };
    let (mut cfg, d) = dpdk_run::load(&run_opts)?.ok_or_else(|| {
        cfg_err(
            path,
            "dpdk",
            "no [dpdk] section; dpdk-gen needs one (see configs/dpdk-txgen.toml)".into(),
        )
    })?;
    let mut traffic: GeneratorConfig = serde_path_to_error::deserialize(toml::Value::Table(
        cfg.generator_table(),
    ))
    .map_err(|e| {
        cfg_err(
            path,
            format!("traffic.{}", e.path()).trim_end_matches('.'),
            e.inner().message().trim().to_string(),
        )
    })?;
    opts.traffic.apply(&mut traffic).map_err(RunError::Setup)?;
    traffic
        .validate()
        .map_err(|e| cfg_err(path, &format!("traffic.{}", e.key), e.to_string()))?;
    let count = opts
        .count
        .or((cfg.run.packets > 0).then_some(cfg.run.packets));
    let duration = cfg.run.duration_s;
    if count.is_none() && duration <= 0.0 {
        return Err(cfg_err(
            path,
            "run.packets",
            "0 (unlimited) with run.duration_s = 0 would run forever; set --count or --duration \
             (or run.packets / run.duration_s)"
                .into(),
        ));
    }
    let burst = opts.burst.unwrap_or(cfg.datapath.burst);
    if !(1..=dataplane::driver::dpdk::MAX_GEN_BURST).contains(&burst) {
        return Err(cfg_err(
            path,
            "datapath.burst",
            format!(
                "{burst} out of range; allowed 1..={}",
                dataplane::driver::dpdk::MAX_GEN_BURST
            ),
        ));
    }
    let rate = match opts.rate {
        Some(r) => r,
        None => match cfg.traffic.get("rate_gbps") {
            Some(toml::Value::Integer(i)) if *i > 0 => GenRate::Paced(Rate::L1Bps(*i as f64 * 1e9)),
            Some(toml::Value::Float(f)) if *f > 0.0 => GenRate::Paced(Rate::L1Bps(*f * 1e9)),
            _ => GenRate::Max,
        },
    };
    let gen_len = traffic.generated_len();
    if gen_len > 9018 {
        return Err(cfg_err(
            path,
            "traffic.frame_size",
            format!(
                "frames of {gen_len} B without FCS are longer than DPDK ports take here; allowed \
                 up to 9022 B including the FCS"
            ),
        ));
    }
    // The generator writes whole frames into one host mbuf each.
    cfg.datapath.mode = DatapathMode::Host;
    cfg.vnic.max_frame = cfg.vnic.max_frame.max(gen_len);
    let workers = cfg.run.workers;
    let mut ports = dpdk_run::open_ports(&cfg, &d)?;
    // gens[port][worker]
    let mut gens: Vec<Vec<TxGen>> = Vec::with_capacity(ports.len());
    for (pi, p) in ports.iter_mut().enumerate() {
        let g = p
            .tx_generators(burst, opts.unsent)
            .map_err(|e| RunError::Setup(format!("port `{}`: {e}", d.ports[pi].devargs)))?;
        if let Some(t) = g.first()
            && t.frame_room() < gen_len
        {
            return Err(RunError::Setup(format!(
                "port `{}`: mbufs hold {} B, frames need {gen_len} B",
                d.ports[pi].devargs,
                t.frame_room()
            )));
        }
        gens.push(g);
    }
    let port_info: Vec<(String, String)> = gens
        .iter()
        .map(|g| (g[0].port_name().to_string(), g[0].driver().to_string()))
        .collect();
    // Counted since each port opened; the run reports what changed while it ran.
    let events_before: Vec<PortEventStats> = gens.iter().map(|g| g[0].port_events()).collect();
    let links: Vec<(String, Arc<LinkState>)> = ports
        .iter()
        .map(|p| {
            let h = p.stats_handle();
            (h.name().to_string(), h.link_state())
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    // Lanes per worker.
    let mut per_worker: Vec<Vec<Lane>> = (0..workers).map(|_| Vec::new()).collect();
    let nports = gens.len();
    for (pi, pg) in gens.into_iter().enumerate() {
        for (w, tx) in pg.into_iter().enumerate() {
            let lane_idx = pi * workers as usize + w;
            let share = count
                .map(|c| c / u64::from(workers) + u64::from((w as u64) < c % u64::from(workers)));
            let stream = u32::from(traffic.stream) + lane_idx as u32;
            let gcfg = GeneratorConfig {
                count: share,
                stream: u16::try_from(stream).unwrap_or(u16::MAX),
                seed: traffic.seed.wrapping_add(lane_idx as u64),
                ..traffic.clone()
            };
            let generator = Generator::new(gcfg)
                .map_err(|e| {
                    cfg_err(
                        path,
                        &format!("traffic.{}", e.key),
                        format!(
                            "{e} ({} ports x {workers} workers use streams {}..{})",
                            nports,
                            traffic.stream,
                            u32::from(traffic.stream) + (nports * workers as usize) as u32
                        ),
                    )
                })?
                .with_stop_flag(stop.clone());
            let pacer = match rate {
                GenRate::Max => None,
                GenRate::Paced(r) => {
                    let line_bps = match (opts.line_gbps, tx.link_speed_mbps()) {
                        (Some(g), _) => g * 1e9,
                        (None, Some(m)) => f64::from(m) * 1e6,
                        (None, None) => 0.0,
                    };
                    if matches!(r, Rate::LinePercent(_)) && line_bps <= 0.0 {
                        return Err(RunError::Setup(format!(
                            "rate {r} needs a line rate: port {} reports no link speed; give \
                             --line-gbps",
                            tx.port_name()
                        )));
                    }
                    let per_worker = match r {
                        Rate::Pps(v) => Rate::Pps(v / f64::from(workers)),
                        Rate::L1Bps(v) => Rate::L1Bps(v / f64::from(workers)),
                        Rate::L2Bps(v) => Rate::L2Bps(v / f64::from(workers)),
                        Rate::LinePercent(v) => Rate::LinePercent(v / f64::from(workers)),
                    };
                    Some(Pacer::new(per_worker, line_bps))
                }
            };
            per_worker[w].push(Lane {
                port: pi,
                tx,
                generator,
                pacer,
            });
        }
    }
    drop(ports);
    let live: Vec<Arc<TxGenCounters>> = per_worker
        .iter()
        .flatten()
        .map(|l| l.tx.counters())
        .collect();
    let drain = Duration::from_secs_f64(cfg.run.drain_timeout_s);
    let timestamps = traffic.timestamps;
    let running = Arc::new(AtomicUsize::new(per_worker.len()));
    let start = Instant::now();
    let threads: Vec<std::thread::JoinHandle<WorkerOut>> = per_worker
        .into_iter()
        .enumerate()
        .map(|(w, lanes)| {
            let core = d.worker_cores.get(w).copied();
            std::thread::Builder::new()
                .name(format!("gen{w}"))
                .spawn({
                    let running = running.clone();
                    move || worker(lanes, core, burst, timestamps, drain, running)
                })
                .map_err(|e| {
                    // The workers already started stop and wait for nobody.
                    stop.store(true, Ordering::Relaxed);
                    running.store(0, Ordering::Release);
                    RunError::Setup(format!("cannot start generator worker {w}: {e}"))
                })
        })
        .collect::<Result<_, _>>()?;
    let interval =
        (cfg.run.stats_interval_s > 0.0).then(|| Duration::from_secs_f64(cfg.run.stats_interval_s));
    let mut next = interval.unwrap_or(Duration::MAX);
    let mut last = (0u64, Instant::now());
    let mut interval_mpps = Vec::new();
    // A run without a time limit stops once the rings took nothing for the drain timeout while
    // frames waited for them (a link that stays down, a device that takes nothing).
    let mut stalled = false;
    let mut progress = (0u64, Instant::now());
    while !threads.iter().all(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_millis(5));
        let el = start.elapsed();
        if duration > 0.0 && el.as_secs_f64() >= duration {
            stop.store(true, Ordering::Relaxed);
        }
        if duration <= 0.0 && !stalled {
            let sent: u64 = live.iter().map(|c| c.sent()).sum();
            let held: u64 = live.iter().map(|c| c.held()).sum();
            if sent != progress.0 || held == 0 {
                progress = (sent, Instant::now());
            } else if progress.1.elapsed() >= drain {
                stalled = true;
                stop.store(true, Ordering::Relaxed);
                let down: Vec<&str> = links
                    .iter()
                    .filter(|(_, l)| !l.is_up())
                    .map(|(n, _)| n.as_str())
                    .collect();
                eprintln!(
                    "warning: the ports took no frame for {:.2} s (run.drain_timeout_s) while \
                     {held} waited{}; stopping before the count is reached",
                    drain.as_secs_f64(),
                    if down.is_empty() {
                        String::new()
                    } else {
                        format!(" (link down: {})", down.join(", "))
                    }
                );
            }
        }
        if let Some(iv) = interval
            && el >= next
        {
            next += iv;
            let sent: u64 = live.iter().map(|c| c.sent()).sum();
            let unsent: u64 = live.iter().map(|c| c.unsent()).sum();
            let af: u64 = live.iter().map(|c| c.alloc_failed()).sum();
            let down: Vec<&str> = links
                .iter()
                .filter(|(_, l)| !l.is_up())
                .map(|(n, _)| n.as_str())
                .collect();
            let now = Instant::now();
            let mpps = (sent - last.0) as f64 / (now - last.1).as_secs_f64().max(1e-9) / 1e6;
            last = (sent, now);
            interval_mpps.push(mpps);
            if opts.live_stats {
                let down = if down.is_empty() {
                    String::new()
                } else {
                    format!(" | link down: {}", down.join(", "))
                };
                eprintln!(
                    "[{:6.1}s] {mpps:7.2} Mpps | sent {sent} | gen_unsent {unsent} | alloc_failed {af}{down}",
                    el.as_secs_f64()
                );
            }
        }
    }
    let outs: Vec<WorkerOut> = threads
        .into_iter()
        .map(|t| {
            t.join()
                .map_err(|_| RunError::Setup("a generator worker panicked".into()))
        })
        .collect::<Result<_, _>>()?;
    let mut summary = GenSummary {
        driver: "dpdk",
        ports: port_info
            .into_iter()
            .map(|(name, driver)| PortSummary {
                name,
                driver,
                sent: 0,
                gen_unsent: 0,
                port_opackets: 0,
                reset_unsent: 0,
                device_resets: 0,
                reset_failures: 0,
                link_down_events: 0,
            })
            .collect(),
        workers,
        burst,
        unsent_policy: opts.unsent.to_string(),
        rate: rate.to_string(),
        frame_size: traffic.mean_frame_size().round() as u32,
        flows: traffic.flows,
        generated: 0,
        sent: 0,
        sent_bytes: 0,
        gen_unsent: 0,
        reset_unsent: 0,
        device_resets: 0,
        alloc_failed: 0,
        stalled,
        elapsed_s: 0.0,
        mpps: 0.0,
        mpps_per_core: 0.0,
        gbps_l1: 0.0,
        gbps_l2: 0.0,
        interval_mpps,
    };
    for o in &outs {
        summary.elapsed_s = summary.elapsed_s.max(o.active_s);
        for l in &o.lanes {
            let tc = l.tx.counters();
            summary.generated += l.generator.counters().frames();
            summary.sent += tc.sent();
            summary.sent_bytes += tc.sent_bytes();
            summary.gen_unsent += tc.unsent();
            summary.reset_unsent += tc.reset_unsent();
            summary.alloc_failed += tc.alloc_failed();
            let p = &mut summary.ports[l.port];
            p.sent += tc.sent();
            p.gen_unsent += tc.unsent();
            p.reset_unsent += tc.reset_unsent();
            // Read after every worker stopped, so the PMD's counter is final.
            if let Ok(s) = l.tx.port_stats() {
                p.port_opackets = s.opackets;
            }
            let (e, e0) = (l.tx.port_events(), &events_before[l.port]);
            p.device_resets = e.device_resets - e0.device_resets;
            p.reset_failures = e.reset_failures - e0.reset_failures;
            p.link_down_events = e.link_down_events - e0.link_down_events;
        }
    }
    summary.device_resets = summary
        .ports
        .iter()
        .map(|p| p.device_resets + p.reset_failures)
        .sum();
    let el = summary.elapsed_s.max(1e-9);
    summary.mpps = summary.sent as f64 / el / 1e6;
    summary.mpps_per_core = summary.mpps / f64::from(workers);
    let fcs = u64::from(FCS_LEN) * summary.sent;
    summary.gbps_l2 = (summary.sent_bytes + fcs) as f64 * 8.0 / el / 1e9;
    summary.gbps_l1 = (summary.sent_bytes + fcs + u64::from(WIRE_OVERHEAD) * summary.sent) as f64
        * 8.0
        / el
        / 1e9;
    Ok(summary)
}

/// One worker: registers with EAL (pinned to `core`), then round-robins bursts over its lanes
/// until every generator is done (count reached or stop flag), then offers held frames until
/// `drain` has passed. A lane whose generator is done still looks after its port (its queue 0
/// resets the port when the device resets) until every worker is done (`running` is 0).
fn worker(
    mut lanes: Vec<Lane>,
    core: Option<usize>,
    burst: usize,
    timestamps: bool,
    drain: Duration,
    running: Arc<AtomicUsize>,
) -> WorkerOut {
    for (i, l) in lanes.iter_mut().enumerate() {
        // One registration per thread; later calls return the same lcore id.
        if let Err(e) = l.tx.register(core)
            && i == 0
        {
            eprintln!(
                "warning: generator worker on {}: {e}; mempool caches are off",
                l.tx.port_name()
            );
        }
    }
    // The wall clock first: a frame's timestamp (base + intended offset) must never be later
    // than its real departure, or a fast return path would show a negative latency.
    let base_ns = wall_ns();
    let start = Instant::now();
    loop {
        let mut busy = false;
        for l in lanes.iter_mut() {
            if l.generator.done() {
                l.tx.idle();
                continue;
            }
            busy = true;
            let Lane {
                tx,
                generator,
                pacer,
                ..
            } = l;
            if !send_due(
                tx,
                generator,
                pacer.as_mut(),
                start,
                base_ns,
                burst,
                timestamps,
            ) {
                std::hint::spin_loop();
            }
        }
        if !busy {
            break;
        }
    }
    let active_s = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + drain;
    for l in lanes.iter_mut() {
        l.tx.finish(deadline);
    }
    // Never below 0: a failed start sets it to 0 at once.
    let _ = running.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    while running.load(Ordering::Acquire) > 0 {
        for l in lanes.iter_mut() {
            l.tx.idle();
        }
        std::thread::yield_now();
    }
    WorkerOut { lanes, active_s }
}

/// One burst of `generator`'s frames on `tx`. Unpaced (`pacer` is `None`): a full burst, stamped
/// (with `timestamps`) with the wall clock when the burst is written. Paced: the frames due by
/// now (`start` is the pacer's time 0, `base_ns` the wall clock then), each stamped with its
/// intended departure time. Returns false when nothing was due and nothing is held for a retry
/// (the caller may spin).
#[inline]
pub(crate) fn send_due(
    tx: &mut TxGen,
    generator: &mut Generator,
    pacer: Option<&mut Pacer>,
    start: Instant,
    base_ns: u64,
    burst: usize,
    timestamps: bool,
) -> bool {
    match pacer {
        None => {
            let ts = if timestamps { wall_ns() } else { 0 };
            let mut batch = generator.batch(burst, ts);
            tx.burst(burst, |buf| batch.next(buf));
            true
        }
        Some(p) => {
            let now_ps = (start.elapsed().as_nanos() as u64).saturating_mul(1000);
            // Frames due now (assuming the next frame's size for all of them; the writer below
            // checks each frame exactly).
            let mut ahead = p.clone();
            let size = generator.next_frame_size();
            let mut due = 0;
            while due < burst && ahead.next_ps() <= now_ps {
                ahead.advance(size);
                due += 1;
            }
            if due == 0 && tx.pending() == 0 {
                tx.idle();
                return false;
            }
            let mut batch = generator.batch(due, 0);
            tx.burst(due.max(1), |buf| {
                if p.next_ps() > now_ps {
                    return None;
                }
                let size = batch.next_frame_size();
                let n = batch.next_at(buf, base_ns + p.next_ps() / 1000)?;
                p.advance(size);
                Some(n)
            });
            true
        }
    }
}
