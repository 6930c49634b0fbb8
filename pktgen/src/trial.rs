//! The trial: one measurement of a device under test (DUT) at one offered load, and the
//! [`Dut`] trait every DUT (the in-process test DUT, the virtual NIC running a `dataplane`
//! config, later real DPDK ports) implements. The RFC 2544 and MLRsearch procedures
//! ([`crate::search`]) and the sweeps ([`crate::sweep`]) see DUTs only through this trait.
//!
//! ## The trial contract (what makes the numbers trustworthy)
//!
//! 1. **Warm-up** (`warmup_s`): traffic at the trial's rate on a separate stream, then discarded;
//!    flow tables are populated and queues reach steady state before anything is counted (a
//!    step to the target rate without ramp-up lowers NDR, TRex PR #1212).
//! 2. **Traffic**: `frames` or `rate x duration` frames, each with an intended departure time.
//! 3. **Stop, drain, snapshot**: after the generator stops, the DUT gets `drain_s` (RFC 2544
//!    §23: 2 s) to deliver frames still in flight; only then are counters read, from both ends
//!    at once. Frames in flight at the stop are therefore never counted as lost
//!    ([`TrialResult::in_flight_at_stop`] says how many there were).
//! 4. **Loss attribution**: `lost = sent - received_unique` counts only frames the generator
//!    actually sent. Frames the generator failed to send (its own queue full, rate not
//!    reached) are [`TrialResult::gen_unsent`], never DUT loss, and a trial whose achieved rate
//!    fell short is flagged ([`TrialResult::generator_limited`]). The DUT's own drop counters
//!    split `lost` by stage ([`LossAttribution`]).

use crate::generator::GeneratorConfig;
use crate::latency::LatencyStats;
use crate::rate::{WIRE_OVERHEAD, line_rate_pps, pps_to_l1_bps};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Stream id of warm-up traffic (never counted in a trial's results).
pub const WARMUP_STREAM: u16 = crate::generator::MAX_STREAMS - 1;
/// Default relative shortfall of the achieved rate that flags a trial as generator-limited.
pub const DEFAULT_RATE_TOLERANCE: f64 = 0.001;

/// What to measure in one trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialSpec {
    /// Intended offered load, frames per second.
    pub rate_pps: f64,
    /// Traffic duration in seconds (ignored when `frames` is set).
    pub duration_s: f64,
    /// Send exactly this many frames at `rate_pps` (back-to-back bursts), instead of a duration.
    pub frames: Option<u64>,
    /// Warm-up traffic at the same rate before the measured traffic, seconds (0 = none).
    pub warmup_s: f64,
    /// Time allowed after the stop for frames in flight, seconds.
    pub drain_s: f64,
    /// The traffic: frame size or mix, flows, protocol, addresses (its `count` and `stream` are
    /// set by the DUT; `timestamps` by `latency`).
    pub traffic: GeneratorConfig,
    /// Measure latency (timestamped frames).
    pub latency: bool,
    /// Trial number within a search (seeds per-trial randomness of test DUTs).
    pub index: u64,
}

impl Default for TrialSpec {
    fn default() -> Self {
        Self {
            rate_pps: 1e6,
            duration_s: 1.0,
            frames: None,
            warmup_s: 0.0,
            drain_s: 2.0,
            traffic: GeneratorConfig::default(),
            latency: true,
            index: 0,
        }
    }
}

impl TrialSpec {
    /// Frames the trial intends to send.
    /// Frames of warm-up traffic: `rate_pps * warmup_s`.
    pub fn warmup_frames(&self) -> u64 {
        (self.rate_pps * self.warmup_s).round() as u64
    }

    /// The warm-up generator of a trial with `traffic` (the measured traffic's generator
    /// config): `rate_pps * warmup_s` frames of the same traffic on [`WARMUP_STREAM`], which
    /// sinks keep apart from the measured stream; `None` without a warm-up.
    pub fn warmup_generator(
        &self,
        traffic: &GeneratorConfig,
    ) -> Result<Option<crate::Generator>, DutError> {
        let frames = self.warmup_frames();
        (frames > 0)
            .then(|| {
                crate::Generator::new(GeneratorConfig {
                    count: Some(frames),
                    stream: WARMUP_STREAM,
                    ..traffic.clone()
                })
            })
            .transpose()
            .map_err(|e| DutError(e.to_string()))
    }

    pub fn intended_frames(&self) -> u64 {
        self.frames
            .unwrap_or_else(|| (self.rate_pps * self.duration_s).round().max(1.0) as u64)
    }

    /// The measured traffic's intended duration in seconds.
    pub fn intended_duration_s(&self) -> f64 {
        match self.frames {
            Some(n) => n as f64 / self.rate_pps,
            None => self.duration_s,
        }
    }

    /// Mean frame size of the traffic (FCS included).
    pub fn mean_frame_size(&self) -> f64 {
        self.traffic.mean_frame_size()
    }

    /// The offered load as L1 bits per second.
    pub fn offered_l1_bps(&self) -> f64 {
        pps_to_l1_bps(self.rate_pps, self.mean_frame_size())
    }
}

/// Frames lost per stage of the DUT, from its counters (e.g. `rx_missed`, `rx_nombuf`,
/// `nf:<reason>`, `tx_full`, `pcie_overrun`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LossAttribution {
    /// Stage -> frames dropped there during the measured traffic.
    pub stages: BTreeMap<String, u64>,
    /// `lost - sum(stages)`: loss no counter explains (positive), or drops counted that did not
    /// cost measured frames, e.g. of other traffic (negative). Non-zero deserves a look.
    pub unattributed: i64,
}

impl LossAttribution {
    /// Builds the attribution for `lost` frames from stage counters (zero stages omitted).
    pub fn new(lost: u64, stages: impl IntoIterator<Item = (String, u64)>) -> Self {
        let stages: BTreeMap<String, u64> = stages.into_iter().filter(|(_, n)| *n > 0).collect();
        let sum: u64 = stages.values().sum();
        Self {
            unattributed: lost as i64 - sum as i64,
            stages,
        }
    }

    /// The stage with the most drops, if any.
    pub fn dominant(&self) -> Option<&str> {
        self.stages
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(k, _)| k.as_str())
    }
}

/// The outcome of one trial. Counters are read after the drain (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    /// Intended offered load, frames/s.
    pub rate_pps: f64,
    /// Intended offered load, L1 Gb/s.
    pub rate_gbps: f64,
    /// Mean frame size, FCS included.
    pub frame_size: f64,
    /// Intended duration of the measured traffic, seconds.
    pub duration_s: f64,
    /// Frames the trial intended to send.
    pub intended: u64,
    /// Frames the generator sent.
    pub sent: u64,
    /// Frames intended but not sent by the generator (its own drops): never DUT loss.
    pub gen_unsent: u64,
    /// Achieved sending rate, frames/s (sent over the actual sending time).
    pub achieved_pps: f64,
    /// Distinct frames received.
    pub received: u64,
    /// Extra copies received.
    pub duplicates: u64,
    /// Frames received after a later-sent frame.
    pub reordered: u64,
    /// Frames whose payload or length was altered.
    pub payload_mismatches: u64,
    /// DUT loss: `sent - received`.
    pub lost: u64,
    /// Frames sent but not yet received when the generator stopped (delivered during the
    /// drain, so not lost).
    pub in_flight_at_stop: u64,
    /// Frames that arrived after the drain window (included in `lost`), when the DUT can tell.
    pub late: u64,
    /// Latency of the measured frames (calibration not applied), when measured.
    pub latency: Option<LatencyStats>,
    /// Where the lost frames were dropped.
    pub attribution: LossAttribution,
    /// The resource the DUT names as its bottleneck, when it models one.
    pub bottleneck: Option<String>,
    /// True when the result depends only on the inputs (virtual time).
    pub deterministic: bool,
    /// Raw DUT counters for the report (summary of the run).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub dut: serde_json::Value,
}

impl TrialResult {
    /// `lost / sent` (0 when nothing was sent).
    pub fn loss_ratio(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.lost as f64 / self.sent as f64
        }
    }

    /// Received frames per second of intended duration: the forwarding rate.
    pub fn forwarding_pps(&self) -> f64 {
        self.received as f64 / self.duration_s.max(1e-12)
    }

    /// True if the generator fell short of the intended load by more than `tolerance`
    /// (relative): the trial did not test the load it claims.
    pub fn generator_limited(&self, tolerance: f64) -> bool {
        self.achieved_pps < self.rate_pps * (1.0 - tolerance)
            || self.gen_unsent as f64 > self.intended as f64 * tolerance
    }
}

/// A DUT failed to run a trial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DutError(pub String);

impl fmt::Display for DutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DutError {}

/// What every report states about how a DUT's trials run, so a number is never read without
/// its conditions: the clock, the hardware profile, the datapath mode, the workers and where the
/// CPU cost came from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DutInfo {
    /// `virtual` (model time: deterministic, CPU cost from a model) or `wall` (this machine's
    /// time: the real code measured).
    pub clock: String,
    /// The hardware profile the trials model, when there is one.
    pub profile: Option<String>,
    /// The datapath mode, when the DUT has one.
    pub mode: Option<String>,
    /// Worker cores of the DUT, when known.
    pub workers: Option<u16>,
    /// Where the CPU cost per packet came from (a profile's cycle table, a measurement, a
    /// capacity the test DUT was given, an external device).
    pub cpu_cost: String,
}

impl DutInfo {
    /// One line for text reports.
    pub fn line(&self) -> String {
        let mut parts = vec![format!("clock {}", self.clock)];
        if let Some(p) = &self.profile {
            parts.push(format!("profile {p}"));
        }
        if let Some(m) = &self.mode {
            parts.push(format!("mode {m}"));
        }
        if let Some(w) = self.workers {
            parts.push(format!("workers {w}"));
        }
        parts.push(format!("CPU cost: {}", self.cpu_cost));
        parts.join(", ")
    }
}

/// A device under test: anything that can run a trial.
pub trait Dut {
    /// A short description for reports.
    fn name(&self) -> String;

    /// How the trials run (clock, profile, mode, workers, CPU cost source), for every report.
    fn info(&self) -> DutInfo {
        DutInfo {
            clock: if self.deterministic() {
                "virtual"
            } else {
                "wall"
            }
            .into(),
            cpu_cost: "not stated by the DUT".into(),
            ..Default::default()
        }
    }

    /// True when two trials with the same spec (apart from its `index`) give the same result,
    /// so a search may answer a repeated trial with the result measured before instead of
    /// running it again (a deterministic simulation; never a real device).
    fn repeatable(&self) -> bool {
        false
    }

    /// True when a trial leaves state (flow tables, caches, queues) that the next trial finds,
    /// so a discarded warm-up trial prepares the DUT; false when every trial starts from a fresh
    /// DUT, where a warm-up trial would prepare nothing.
    fn keeps_state_between_trials(&self) -> bool {
        true
    }

    /// The line rate of the tested link, L1 bits/s (the search's maximum load).
    fn line_rate_bps(&self) -> f64;

    /// True when trials run in virtual time, so equal specs give equal results.
    fn deterministic(&self) -> bool;

    /// Runs one trial.
    fn trial(&mut self, spec: &TrialSpec) -> Result<TrialResult, DutError>;

    /// The traffic the DUT's own configuration names, if it has one (the base that frame sizes
    /// and mixes given on the command line modify).
    fn base_traffic(&self) -> Option<GeneratorConfig> {
        None
    }

    /// The line rate in frames/s for frames of mean size `frame_size`.
    fn line_rate_pps(&self, frame_size: f64) -> f64 {
        line_rate_pps(self.line_rate_bps(), frame_size)
    }
}

impl<D: Dut + ?Sized> Dut for Box<D> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn info(&self) -> DutInfo {
        (**self).info()
    }
    fn repeatable(&self) -> bool {
        (**self).repeatable()
    }
    fn keeps_state_between_trials(&self) -> bool {
        (**self).keeps_state_between_trials()
    }
    fn line_rate_bps(&self) -> f64 {
        (**self).line_rate_bps()
    }
    fn deterministic(&self) -> bool {
        (**self).deterministic()
    }
    fn trial(&mut self, spec: &TrialSpec) -> Result<TrialResult, DutError> {
        (**self).trial(spec)
    }
    fn base_traffic(&self) -> Option<GeneratorConfig> {
        (**self).base_traffic()
    }
}

/// Gb/s (L1) of `pps` frames of `frame_size` bytes.
pub fn gbps(pps: f64, frame_size: f64) -> f64 {
    pps * (frame_size + f64::from(WIRE_OVERHEAD)) * 8.0 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_and_result_arithmetic() {
        let s = TrialSpec {
            rate_pps: 1e6,
            duration_s: 0.5,
            ..Default::default()
        };
        assert_eq!(s.intended_frames(), 500_000);
        assert!((s.offered_l1_bps() - 672e6).abs() < 1.0);
        let b = TrialSpec {
            frames: Some(1000),
            ..s.clone()
        };
        assert_eq!(b.intended_frames(), 1000);
        assert!((b.intended_duration_s() - 0.001).abs() < 1e-12);

        let a = LossAttribution::new(10, [("rx_missed".into(), 7), ("tx_full".into(), 0)]);
        assert_eq!(a.unattributed, 3);
        assert_eq!(a.stages.len(), 1);
        assert_eq!(a.dominant(), Some("rx_missed"));

        let r = TrialResult {
            rate_pps: 1e6,
            intended: 1000,
            sent: 990,
            gen_unsent: 10,
            achieved_pps: 0.99e6,
            lost: 99,
            received: 891,
            duration_s: 0.001,
            ..Default::default()
        };
        assert!((r.loss_ratio() - 0.1).abs() < 1e-12);
        assert!(r.generator_limited(0.001));
        assert!(!r.generator_limited(0.02));
        assert!((r.forwarding_pps() - 891_000.0).abs() < 1e-6);
        assert!((gbps(148_809_523.8, 64.0) - 100.0).abs() < 1e-6);
    }
}
