//! How a run ends, and what it says about it.
//!
//! A run ends when its traffic does (the wire has nothing more to deliver), when
//! `run.duration_s` has passed, when its driver must stop it (a capture that failed to write),
//! when the operator sends SIGINT or SIGTERM ([`install_signal_handlers`], installed by
//! `dataplane run`), or when a drain (`dataplane ctl drain`, [`crate::ops::health`]) has run
//! its `run.instance_drain_s`. However it ends, the path is the same: Rx stops, the workers
//! drain what is in flight, the summary (text, and the whole `--json` object) is printed, every
//! export is written, and the process exits 0. A stop by signal drains for at most
//! [`SIGNAL_DRAIN`]; a second signal ends the process at once (status 130, no summary), for when
//! draining hangs.
//! Counters stay consistent at any stop: every received packet was transmitted or dropped with
//! a reason.

use std::time::Duration;

/// The longest a stop by signal waits for in-flight packets.
pub const SIGNAL_DRAIN: Duration = Duration::from_millis(100);

/// Why a run ended (the summary's `stopped_by`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The traffic ended and every worker finished on its own.
    TrafficEnd,
    /// `run.duration_s` passed.
    Duration,
    /// A stop signal (SIGINT or SIGTERM).
    Signal(&'static str),
    /// The driver stopped it (a `--tx-pcap` capture that failed to write).
    Driver,
    /// `dataplane ctl drain`: `run.instance_drain_s` after health turned `draining`.
    Drained,
}

impl StopReason {
    /// Its name in the summary: `traffic-end`, `duration`, `SIGINT`, `SIGTERM`, `driver`,
    /// `drain`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::TrafficEnd => "traffic-end",
            StopReason::Duration => "duration",
            StopReason::Signal(s) => s,
            StopReason::Driver => "driver",
            StopReason::Drained => "drain",
        }
    }
}

/// Makes SIGINT and SIGTERM stop the run cleanly (see the module docs). For the CLI: a library
/// caller that installs nothing keeps the default actions.
pub fn install_signal_handlers() -> Result<(), String> {
    dataplane::unix::install_stop_handlers()
        .map_err(|e| format!("cannot install the SIGINT/SIGTERM handlers: {e}"))
}

/// The stop signal received, if one was.
pub fn stop_signal() -> Option<&'static str> {
    (dataplane::unix::stop_signals() > 0)
        .then(|| dataplane::unix::last_stop_signal().unwrap_or("signal"))
}
