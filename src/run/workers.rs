//! The workers of a run, whatever the driver: one thread per worker running
//! [`dataplane::runloop::run_worker`] over its queues and NF chain, the supervision loop that
//! ends the run (`run.duration_s`, a stop signal, the driver; see [`super::lifecycle`]), keeps
//! the rates the operation surfaces report and prints the live stats line, and the join that
//! collects their reports. [`Workers::view`] is what the telemetry socket, the metrics
//! endpoint and `dataplane ctl` see of them ([`crate::ops`]).
//!
//! A driver's run builds the [`WorkerSetup`]s (its queues, one NF chain each), hands them to
//! [`Workers::spawn`], and supervises them with a [`Supervision`] of its own: what stops its
//! wire at the end of the run, what ends the run early (a capture that failed to write), and
//! what it adds to the live line (the virtual NIC's PCIe utilisation).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dataplane::runloop::{
    LiveSnapshot, RunControl, WorkerReport, WorkerSetup, WorkerShared, run_worker,
};
use dataplane::{DropCounts, QueueStats};

use super::lifecycle::{SIGNAL_DRAIN, StopReason, stop_signal};
use super::options::RunError;
use crate::ops::{RunInfo, RunView};

/// What a driver's run adds to the supervision loop.
pub trait Supervision {
    /// True when the run must stop now for a reason of the driver's (e.g. a failed capture).
    fn must_stop(&mut self) -> bool {
        false
    }

    /// Stops the driver's sources (generator, Rx); called once per check after the run's end.
    fn stop(&mut self);

    /// Text the live line shows after the rates (e.g. ` | PCIe up 12.0% down 3.1%`).
    fn live_extra(&mut self) -> String {
        String::new()
    }
}

/// Running workers (see the module docs).
pub struct Workers {
    handles: Vec<JoinHandle<(WorkerReport, Duration)>>,
    view: Arc<RunView>,
    control: RunControl,
    start: Instant,
}

/// What the workers reported, and how long they ran.
pub struct Finished {
    /// One report per worker, in worker order.
    pub reports: Vec<WorkerReport>,
    /// Wall-clock seconds from the spawn to the last worker's end.
    pub elapsed_s: f64,
    /// CPU seconds each worker thread used (`CLOCK_THREAD_CPUTIME_ID`), in worker order: on
    /// cores shared with other threads a rate per core is packets over these, not over
    /// `elapsed_s`.
    pub cpu_s: Vec<f64>,
}

impl Workers {
    /// The view the operation surfaces will have of the workers of `setups` (so they can be
    /// started before the workers are), and the workers' shared state to spawn them with.
    pub fn prepare(setups: &[WorkerSetup], info: RunInfo) -> (Arc<RunView>, Arc<[WorkerShared]>) {
        let shared: Arc<[WorkerShared]> = setups
            .iter()
            .map(|s| WorkerShared::new(s.queues.len()))
            .collect();
        let view = Arc::new(RunView::new(info, shared.clone(), Instant::now()));
        (view, shared)
    }

    /// Starts one thread per setup (worker `i` runs `setups[i]` with `shared[i]`, from
    /// [`Workers::prepare`]), each named `worker<i>`; they drain for at most `drain_timeout_s`
    /// once stopped, and keep polling when their queues are idle if `keep_polling` (until
    /// stopped).
    pub fn spawn(
        setups: Vec<WorkerSetup>,
        (view, shared): (Arc<RunView>, Arc<[WorkerShared]>),
        drain_timeout_s: f64,
        keep_polling: bool,
    ) -> Result<Self, RunError> {
        let workers = setups.len() as u16;
        let mut control = RunControl::new(Duration::from_secs_f64(drain_timeout_s));
        control.keep_polling = keep_polling;
        let start = Instant::now();
        let handles = setups
            .into_iter()
            .enumerate()
            .map(|(w, setup)| {
                let control = control.clone();
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("worker{w}"))
                    .spawn(move || {
                        let cpu0 = dataplane::unix::thread_cpu_time();
                        let r = run_worker(w as u16, workers, setup, &control, &shared[w]);
                        (r, dataplane::unix::thread_cpu_time().saturating_sub(cpu0))
                    })
                    .map_err(|e| RunError::Setup(format!("cannot start worker {w}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            handles,
            view,
            control,
            start,
        })
    }

    /// What the operation surfaces see of the workers.
    pub fn view(&self) -> Arc<RunView> {
        self.view.clone()
    }

    /// Waits for the workers to finish, stopping them once `duration_s` (0: no limit) has passed,
    /// a stop signal came (draining for at most [`SIGNAL_DRAIN`]) or `sup` asks to, and printing
    /// the live line to stderr every `interval` (none: no line). Returns why the run ended.
    pub fn supervise(
        &self,
        duration_s: f64,
        interval: Option<Duration>,
        sup: &mut dyn Supervision,
    ) -> StopReason {
        let mut next_print = interval.unwrap_or(Duration::ZERO);
        let mut rates = LiveRates::new(self.start);
        let mut reason: Option<StopReason> = None;
        while !self.handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            let el = self.start.elapsed();
            self.view.sample_rates();
            self.view
                .health
                .sample(&self.view.snapshots(), Instant::now());
            let now = if let Some(sig) = stop_signal() {
                Some(StopReason::Signal(sig))
            } else if sup.must_stop() {
                Some(StopReason::Driver)
            } else if self
                .view
                .health
                .drain()
                .is_some_and(|d| Instant::now() >= d.deadline)
            {
                Some(StopReason::Drained)
            } else if duration_s > 0.0 && el.as_secs_f64() >= duration_s {
                Some(StopReason::Duration)
            } else {
                None
            };
            if let Some(r) = now {
                if reason.is_none() {
                    reason = Some(r);
                    if r == StopReason::Drained {
                        eprintln!("drained: stopping (dataplane ctl drain)");
                    }
                    if let StopReason::Signal(sig) = r {
                        eprintln!(
                            "{sig}: stopping (draining at most {} ms; send it again to exit at \
                             once)",
                            SIGNAL_DRAIN.as_millis()
                        );
                    }
                }
                sup.stop();
                match r {
                    StopReason::Signal(_) => self.control.stop_within(SIGNAL_DRAIN),
                    _ => self
                        .control
                        .stop
                        .store(true, std::sync::atomic::Ordering::Release),
                }
            }
            if let Some(iv) = interval
                && el >= next_print
            {
                next_print += iv;
                let snaps = self.view.snapshots();
                let line = rates.line(&snaps);
                eprintln!(
                    "[{:6.1}s] {line}{} | {}{}",
                    el.as_secs_f64(),
                    sup.live_extra(),
                    counts_line(&snaps),
                    self.nf_line()
                );
            }
        }
        reason.unwrap_or(StopReason::TrafficEnd)
    }

    /// The functions' essentials for the live line (` | lb flows 12 ...`), asked of the
    /// workers between bursts; empty once they have finished.
    fn nf_line(&self) -> String {
        if self.view.finished() {
            return String::new();
        }
        let Ok(per_worker) = self.view.nf_counters() else {
            return String::new();
        };
        let mut out = String::new();
        for (i, name) in self.view.info.pipeline.iter().enumerate() {
            let c = crate::ops::commands::merged(&per_worker, i);
            let s = super::summary::nf_live(name, &serde_json::json!(c));
            if !s.is_empty() {
                out.push_str(" | ");
                out.push_str(&s);
            }
        }
        out
    }

    /// Collects every worker's report; a worker that panicked fails the run.
    pub fn join(self) -> Result<Finished, RunError> {
        let (reports, cpu): (Vec<WorkerReport>, Vec<Duration>) = self
            .handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| RunError::Setup("a worker panicked".into()))
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        self.view.set_final(&reports);
        Ok(Finished {
            reports,
            elapsed_s: self.start.elapsed().as_secs_f64(),
            cpu_s: cpu.iter().map(Duration::as_secs_f64).collect(),
        })
    }
}

/// Adds the workers' CPU time to a wall-clock summary whose `per_worker` is set: `cpu_s` in
/// each `per_worker` entry (its thread's CPU seconds, [`Finished::cpu_s`]), `worker_cpu_s`
/// (their sum) and `mpps_per_worker_core` (frames transmitted over those CPU seconds: the rate of
/// one core that ran nothing but the worker, which `mpps`, over wall-clock seconds, is not
/// when the worker shares its core).
pub fn add_cpu_keys(out: &mut serde_json::Value, cpu_s: &[f64]) {
    let mut frames = 0;
    if let Some(ws) = out["per_worker"].as_array_mut() {
        for (w, c) in ws.iter_mut().zip(cpu_s) {
            w["cpu_s"] = serde_json::json!(c);
            frames += w["packets_tx"].as_u64().unwrap_or(0);
        }
    }
    let cpu: f64 = cpu_s.iter().sum();
    out["worker_cpu_s"] = serde_json::json!(cpu);
    out["mpps_per_worker_core"] = serde_json::json!(if cpu > 0.0 {
        frames as f64 / cpu / 1e6
    } else {
        0.0
    });
}

/// What the operation surfaces say the run is: `driver`, the config's mode and pipeline
/// (canonical names), and the ports' names.
pub fn run_info(
    cfg: &crate::config::RunConfig,
    driver: &'static str,
    ports: Vec<String>,
) -> RunInfo {
    RunInfo {
        driver,
        mode: cfg.datapath.mode.as_str(),
        ports,
        links: Vec::new(),
        reported_links: Vec::new(),
        health_stall: Duration::from_secs_f64(cfg.run.health_stall_s),
        instance_drain: Duration::from_secs_f64(cfg.run.instance_drain_s),
        pipeline: cfg
            .pipeline
            .iter()
            .map(|e| {
                let n = e.get("name").and_then(|v| v.as_str()).unwrap_or("");
                nfs::lookup(n).map_or(n, |s| s.name).to_string()
            })
            .collect(),
    }
}

/// Starts what the config asks the run to serve (`opts.serve`: the telemetry socket unless
/// `eal_serves_telemetry`, the metrics endpoint), saying where on stderr.
pub fn serve(
    cfg: &crate::config::RunConfig,
    opts: &super::options::RunOptions,
    view: &Arc<RunView>,
    eal_serves_telemetry: bool,
) -> Result<Option<crate::ops::Serving>, RunError> {
    if !opts.serve {
        return Ok(None);
    }
    let s = crate::ops::serve(cfg, view, eal_serves_telemetry)
        .map_err(|e| RunError::Setup(format!("config {}: {e}", opts.config.display())))?;
    if let Some(t) = &s.telemetry {
        eprintln!(
            "telemetry: {} (dpdk-telemetry.py -f {p}, dataplane ctl --prefix {p})",
            t.path().display(),
            p = cfg.run.telemetry_prefix
        );
    }
    if let Some(m) = &s.metrics {
        eprintln!("metrics: http://{}/metrics", m.addr());
    }
    Ok(Some(s))
}

/// The queue counters and drops of every worker, summed.
fn totals(snaps: &[LiveSnapshot]) -> (QueueStats, DropCounts) {
    let mut q = QueueStats::default();
    let mut d = DropCounts::default();
    for s in snaps {
        q.add(&s.total());
        d.merge(&s.drops);
    }
    (q, d)
}

/// `rx N | primary P secondary S | nombuf M | drops r=n ...` over every worker.
fn counts_line(snaps: &[LiveSnapshot]) -> String {
    let (q, d) = totals(snaps);
    let mut drops = String::new();
    for (r, n) in d.nonzero() {
        drops.push_str(&format!(" {}={n}", r.name()));
    }
    format!(
        "rx {} | primary {} secondary {} | nombuf {} | drops{}",
        q.rx_packets,
        q.rx_primary,
        q.rx_secondary,
        q.rx_nombuf,
        if drops.is_empty() { " 0" } else { &drops },
    )
}

/// Receive and transmit rates since the previous live line, each in Mpps and Gb/s with its
/// direction named (Gb/s over the frames' bytes without FCS, as the counters count them).
pub struct LiveRates {
    last: [u64; 4],
    at: Instant,
}

impl LiveRates {
    /// Rates measured from `start`.
    pub fn new(start: Instant) -> Self {
        Self {
            last: [0; 4],
            at: start,
        }
    }

    /// `rx X Mpps Y Gb/s | tx X Mpps Y Gb/s` since the previous call.
    pub fn line(&mut self, snaps: &[LiveSnapshot]) -> String {
        let (q, _) = totals(snaps);
        let now_counts = [q.rx_packets, q.rx_bytes, q.tx_packets, q.tx_bytes];
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

/// How often the live line is printed: every `run.stats_interval_s` when the options ask for it
/// (`None`: no line; `check` guarantees a finite, non-negative interval, and 0 turns it off).
pub fn live_interval(
    cfg: &crate::config::RunConfig,
    opts: &super::options::RunOptions,
) -> Option<Duration> {
    (opts.live_stats && cfg.run.stats_interval_s > 0.0)
        .then(|| Duration::from_secs_f64(cfg.run.stats_interval_s))
}
