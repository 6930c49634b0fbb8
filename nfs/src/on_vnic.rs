//! Running a chain of network functions end to end on the virtual NIC (wire, descriptors,
//! rings, the run loop) over a list of frames, in any datapath mode: what an NF's tests use to
//! see it work as a run would run it.
//!
//! It lives here rather than in `dataplane`: code that drives the virtual NIC inside the
//! `dataplane` crate changes how the compiler inlines the driver's own hot path (measured: 7
//! more instructions per packet on `iofwd_count`), for a helper only tests use.

use dataplane::driver::vnic::{VnicConfig, VnicPort};
use dataplane::link::{CollectSink, Link, VecSource};
use dataplane::runloop::{RunControl, WorkerSetup, WorkerShared, run_worker};
use dataplane::{Counters, DatapathMode, DropCounts, NfChain, Port};

/// What [`run`] saw: the frames the port transmitted, in order, and the run's counts.
#[derive(Debug)]
pub struct VnicRun {
    /// Frames put on the wire, in transmit order.
    pub frames: Vec<Vec<u8>>,
    /// Drops by reason.
    pub drops: DropCounts,
    /// Each function's counters, in chain order.
    pub counters: Vec<(String, Counters)>,
}

/// Runs `frames` through `chain` on one queue of a virtual NIC port in `mode` (default rings,
/// no timing model), back out of the port they arrived on unless a function decides otherwise,
/// until the wire has nothing more to deliver.
pub fn run(mode: DatapathMode, chain: NfChain, frames: Vec<Vec<u8>>) -> Result<VnicRun, String> {
    let sink = CollectSink::default();
    let link = Link {
        rx: Box::new(VecSource::new(frames)),
        tx: Box::new(sink.clone()),
    };
    let cfg = VnicConfig {
        mode,
        ..VnicConfig::default()
    };
    let mut port = VnicPort::new("test", 0, cfg, link).map_err(|e| e.to_string())?;
    let setup = WorkerSetup {
        queues: port.take_queues(),
        chain,
        egress: None,
        burst: dataplane::DEFAULT_BURST,
        slow: None,
    };
    let report = run_worker(0, 1, setup, &RunControl::default(), &WorkerShared::new(1));
    port.join();
    let frames = std::mem::take(&mut *sink.frames.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(VnicRun {
        frames,
        drops: report.drops,
        counters: report.nf_counters,
    })
}
