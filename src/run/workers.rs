//! The workers of a run, whatever the driver: one thread per worker running
//! [`dataplane::runloop::run_worker`] over its queues and NF chain, the supervision loop that
//! enforces `run.duration_s` and prints the live stats line, and the join that collects their
//! reports.
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

use super::options::RunError;

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
    handles: Vec<JoinHandle<WorkerReport>>,
    shared: Arc<[WorkerShared]>,
    control: RunControl,
    start: Instant,
}

/// What the workers reported, and how long they ran.
pub struct Finished {
    /// One report per worker, in worker order.
    pub reports: Vec<WorkerReport>,
    /// Wall-clock seconds from the spawn to the last worker's end.
    pub elapsed_s: f64,
}

impl Workers {
    /// Starts one thread per setup (worker `i` runs `setups[i]`), each named `worker<i>`.
    pub fn spawn(setups: Vec<WorkerSetup>, drain_timeout_s: f64) -> Result<Self, RunError> {
        let workers = setups.len() as u16;
        let shared: Arc<[WorkerShared]> = setups
            .iter()
            .map(|s| WorkerShared::new(s.queues.len()))
            .collect();
        let control = RunControl::new(Duration::from_secs_f64(drain_timeout_s));
        let start = Instant::now();
        let handles = setups
            .into_iter()
            .enumerate()
            .map(|(w, setup)| {
                let control = control.clone();
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("worker{w}"))
                    .spawn(move || run_worker(w as u16, workers, setup, &control, &shared[w]))
                    .map_err(|e| RunError::Setup(format!("cannot start worker {w}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            handles,
            shared,
            control,
            start,
        })
    }

    /// Waits for the workers to finish, stopping them once `duration_s` (0: no limit) has passed
    /// or `sup` asks to, and printing the live line to stderr every `interval` (none: no line).
    pub fn supervise(
        &self,
        duration_s: f64,
        interval: Option<Duration>,
        sup: &mut dyn Supervision,
    ) {
        let mut next_print = interval.unwrap_or(Duration::ZERO);
        let mut rates = LiveRates::new(self.start);
        while !self.handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            let el = self.start.elapsed();
            if sup.must_stop() || (duration_s > 0.0 && el.as_secs_f64() >= duration_s) {
                sup.stop();
                self.control
                    .stop
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if let Some(iv) = interval
                && el >= next_print
            {
                next_print += iv;
                let snaps = self.snapshots();
                let line = rates.line(&snaps);
                eprintln!(
                    "[{:6.1}s] {line}{} | {}",
                    el.as_secs_f64(),
                    sup.live_extra(),
                    counts_line(&snaps)
                );
            }
        }
    }

    /// Every worker's latest published counters.
    pub fn snapshots(&self) -> Vec<LiveSnapshot> {
        self.shared.iter().map(|w| w.live.snapshot()).collect()
    }

    /// Collects every worker's report; a worker that panicked fails the run.
    pub fn join(self) -> Result<Finished, RunError> {
        let reports = self
            .handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| RunError::Setup("a worker panicked".into()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Finished {
            reports,
            elapsed_s: self.start.elapsed().as_secs_f64(),
        })
    }
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
