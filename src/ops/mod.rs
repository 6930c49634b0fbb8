//! Operating a run while it runs: what the telemetry socket ([`commands`]), the Prometheus
//! endpoint ([`metrics`]) and `dataplane ctl` ([`ctl`]) read and change, the way an operator runs
//! VPP or testpmd (DESIGN "Operating it").
//!
//! Everything goes through one [`RunView`] of the running workers: their published counters
//! (lock-free snapshots, [`dataplane::runloop::LiveSnapshot`]), their mailboxes (the functions'
//! counters and commands, answered between bursts, [`dataplane::control`]), the rates of the
//! last second, and once the workers have finished, their final counters. Nothing here runs on
//! a worker's thread or takes a lock a worker takes. [`serve`] starts the surfaces a run's
//! config asks for and stops them when the returned [`Serving`] is dropped.

pub mod commands;
pub mod ctl;
pub mod health;
pub mod metrics;
pub mod nat_lookup;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use dataplane::control::{Reply, Request, ask_all};
use dataplane::runloop::{LiveSnapshot, WorkerReport, WorkerShared};
use dataplane::{Counters, NfCommand};

/// How long a question to the workers may take (they answer between bursts, so far less in
/// practice; a worker that does not answer in this time is stuck).
pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// What a run is, for the surfaces that describe it.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// `vnic` or `dpdk`.
    pub driver: &'static str,
    /// The datapath mode.
    pub mode: &'static str,
    /// The ports' names, by port id.
    pub ports: Vec<String>,
    /// The pipeline's functions, as the config names them (canonical names), in order.
    pub pipeline: Vec<String>,
    /// The kernel interface behind each port, by port id (`None`: a link without a state of
    /// its own), for the health check.
    pub links: Vec<Option<dataplane::link::kernel::KernelLinkSpec>>,
    /// The link each port's driver reports, by port id (`None`: its driver reports none), for
    /// the health check and the metrics.
    pub reported_links: Vec<Option<Arc<dataplane::port::LinkState>>>,
    /// `run.health_stall_s`.
    pub health_stall: Duration,
    /// `run.instance_drain_s`.
    pub instance_drain: Duration,
}

/// Per-worker rates over the last sampling window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerRates {
    /// Packets received per second.
    pub rx_pps: f64,
    /// Packets put on the wire per second.
    pub tx_pps: f64,
    /// Share of the window spent in iterations that found packets, 0..=1.
    pub busy: f64,
}

struct RateWindow {
    at: Instant,
    /// (rx packets, wire tx frames, busy ns) per worker at `at`.
    last: Vec<(u64, u64, u64)>,
    rates: Vec<WorkerRates>,
}

/// The running workers as the operation surfaces see them (see the module docs).
pub struct RunView {
    /// What the run is.
    pub info: RunInfo,
    /// When the workers started.
    pub start: Instant,
    workers: Arc<[WorkerShared]>,
    rates: Mutex<RateWindow>,
    /// Health and drain ([`health`]).
    pub health: health::Health,
    final_nf: OnceLock<Vec<Vec<(String, Counters)>>>,
    final_xstats: OnceLock<Vec<WorkerXStats>>,
}

/// One worker's extended counters: `(name, value)` per counter, per port.
pub type WorkerXStats = Vec<Vec<(String, u64)>>;

/// Rates are recomputed at most this often.
const RATE_WINDOW: Duration = Duration::from_secs(1);

impl RunView {
    /// A view of `workers`, started at `start`.
    pub fn new(info: RunInfo, workers: Arc<[WorkerShared]>, start: Instant) -> Self {
        let n = workers.len();
        let health = health::Health::new(
            n,
            info.ports.len(),
            info.health_stall,
            info.instance_drain,
            start,
        );
        Self {
            info,
            start,
            health,
            workers,
            rates: Mutex::new(RateWindow {
                at: start,
                last: vec![(0, 0, 0); n],
                rates: vec![WorkerRates::default(); n],
            }),
            final_nf: OnceLock::new(),
            final_xstats: OnceLock::new(),
        }
    }

    /// Workers.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// Every worker's latest published counters.
    pub fn snapshots(&self) -> Vec<LiveSnapshot> {
        self.workers.iter().map(|w| w.live.snapshot()).collect()
    }

    /// Recomputes the rates when the window has passed (the supervision loop calls it often).
    pub fn sample_rates(&self) {
        let mut w = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        let dt = w.at.elapsed();
        if dt < RATE_WINDOW {
            return;
        }
        let secs = dt.as_secs_f64();
        let snaps = self.snapshots();
        let now: Vec<(u64, u64, u64)> = snaps
            .iter()
            .map(|s| {
                let t = s.total();
                (t.rx_packets, t.wire_tx_frames, s.busy_ns)
            })
            .collect();
        w.rates = now
            .iter()
            .zip(&w.last)
            .map(|(n, l)| WorkerRates {
                rx_pps: n.0.saturating_sub(l.0) as f64 / secs,
                tx_pps: n.1.saturating_sub(l.1) as f64 / secs,
                busy: (n.2.saturating_sub(l.2) as f64 / (secs * 1e9)).min(1.0),
            })
            .collect();
        w.last = now;
        w.at = Instant::now();
    }

    /// Each worker's rates over the last window.
    pub fn rates(&self) -> Vec<WorkerRates> {
        self.rates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rates
            .clone()
    }

    /// The health verdict now ([`health`]).
    pub fn health_report(&self) -> health::Report {
        self.health.report(
            &self.snapshots(),
            &self.info.links,
            &self.info.reported_links,
            &self.info.ports,
            Instant::now(),
        )
    }

    /// Keeps the workers' final counters for questions asked after they finished.
    pub fn set_final(&self, reports: &[WorkerReport]) {
        let _ = self
            .final_nf
            .set(reports.iter().map(|r| r.nf_counters.clone()).collect());
        let _ = self
            .final_xstats
            .set(reports.iter().map(|r| r.xstats.clone()).collect());
    }

    /// True once every worker has finished.
    pub fn finished(&self) -> bool {
        self.workers.iter().all(|w| w.mailbox.is_closed())
    }

    /// Every worker's function counters (`(name, counters)` in chain order), asked between
    /// bursts, or the final ones once the workers have finished.
    pub fn nf_counters(&self) -> Result<Vec<Vec<(String, Counters)>>, String> {
        if let Some(f) = self.final_nf.get() {
            return Ok(f.clone());
        }
        ask_all(
            self.workers.iter().map(|w| &w.mailbox),
            &Request::Counters,
            ASK_TIMEOUT,
        )
        .into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Ok(Reply::Counters(c)) => Ok(c),
            Ok(other) => Err(format!("worker {i}: unexpected reply {other:?}")),
            Err(e) => Err(format!("worker {i}: {e}")),
        })
        .collect()
    }

    /// Every worker's queues' extended counters (per worker, per port).
    pub fn xstats(&self) -> Result<Vec<WorkerXStats>, String> {
        if let Some(f) = self.final_xstats.get() {
            return Ok(f.clone());
        }
        ask_all(
            self.workers.iter().map(|w| &w.mailbox),
            &Request::XStats,
            ASK_TIMEOUT,
        )
        .into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Ok(Reply::XStats(x)) => Ok(x),
            Ok(other) => Err(format!("worker {i}: unexpected reply {other:?}")),
            Err(e) => Err(format!("worker {i}: {e}")),
        })
        .collect()
    }

    /// The pipeline index of the function `sel` names: an index, or a name (the first function
    /// of that name, as `--set pipeline.<name>.<key>`).
    pub fn nf_index(&self, sel: &str) -> Result<usize, String> {
        let n = self.info.pipeline.len();
        if let Ok(i) = sel.parse::<usize>() {
            return if i < n {
                Ok(i)
            } else {
                Err(format!("the pipeline has {n} functions (0..{n})"))
            };
        }
        let canonical = nfs::lookup(sel).map_or(sel, |s| s.name);
        self.info
            .pipeline
            .iter()
            .position(|p| p == canonical)
            .ok_or_else(|| {
                format!(
                    "no function `{sel}` in the pipeline; it has: {}",
                    self.info.pipeline.join(", ")
                )
            })
    }

    /// Sends `cmd` to the function at `index` on every worker (each applies it to its own
    /// instance between bursts) and merges the replies; the first error fails it.
    pub fn nf_command(&self, index: usize, cmd: &NfCommand) -> Result<Counters, String> {
        if self.finished() {
            return Err("the run has finished; its functions take no more commands".into());
        }
        let req = Request::Nf {
            nf: index,
            cmd: cmd.clone(),
        };
        let mut merged: Option<Counters> = None;
        for (i, r) in ask_all(self.workers.iter().map(|w| &w.mailbox), &req, ASK_TIMEOUT)
            .into_iter()
            .enumerate()
        {
            let c = match r {
                Ok(Reply::Nf(Ok(c))) => c,
                Ok(Reply::Nf(Err(e))) => return Err(e),
                Ok(other) => return Err(format!("worker {i}: unexpected reply {other:?}")),
                Err(e) => return Err(format!("worker {i}: {e}")),
            };
            match &mut merged {
                Some(m) => m.merge(&c),
                None => merged = Some(c),
            }
        }
        merged.ok_or_else(|| "the run has no worker".into())
    }
}

/// The operation surfaces of one run, stopped when dropped.
pub struct Serving {
    /// The telemetry socket on the virtual NIC (on DPDK, EAL's serves the commands).
    pub telemetry: Option<dataplane::telemetry::server::TelemetryServer>,
    /// The Prometheus endpoint.
    pub metrics: Option<metrics::MetricsServer>,
}

/// Starts what the config asks for: the telemetry socket (`run.telemetry`, prefix
/// `run.telemetry_prefix`, group `run.telemetry_group`) unless `eal_serves_telemetry` (DPDK
/// registers the commands with EAL instead), and the Prometheus endpoint (`run.metrics`).
/// Errors name the key and what is wrong.
pub fn serve(
    cfg: &crate::config::RunConfig,
    view: &Arc<RunView>,
    eal_serves_telemetry: bool,
) -> Result<Serving, String> {
    let r = &cfg.run;
    let telemetry = if r.telemetry && !eal_serves_telemetry {
        let group = match &r.telemetry_group {
            Some(g) => {
                Some(crate::config::group_id(g).map_err(|e| format!("run.telemetry_group: {e}"))?)
            }
            None => None,
        };
        let server = dataplane::telemetry::server::TelemetryServer::start(
            &dataplane::telemetry::server::ServerConfig {
                dir: dataplane::telemetry::runtime_dir(&r.telemetry_prefix),
                group,
                version: format!("nmdp {}", env!("CARGO_PKG_VERSION")),
            },
            commands::commands(),
            commands::handler(view.clone()),
        )
        .map_err(|e| format!("run.telemetry: {e}"))?;
        Some(server)
    } else {
        None
    };
    let metrics = match &r.metrics {
        Some(addr) => Some(
            metrics::MetricsServer::start(addr, view.clone())
                .map_err(|e| format!("run.metrics: {e}"))?,
        ),
        None => None,
    };
    Ok(Serving { telemetry, metrics })
}
