//! The device under test of `pktgen`'s RFC 2544 / MLRsearch trials and sweeps: a
//! [`pktgen::trial::Dut`] that runs a `dataplane` config in-process on the virtual NIC
//! ([`VnicDut`]), the factory that builds one per sweep point ([`VnicFactory`]), and the
//! `sim:` test DUT spelled on the command line ([`dut_from_spec`]).
//!
//! Each trial is one `nmdp::run::run` of the config with overrides: `run.packets` = the trial's
//! frames, `traffic.*` = the trial's traffic, `run.clock` = the trial clock and
//! `traffic.rate_gbps` = the trial's offered load in L1 Gb/s (line bits with preamble, SFD, IFG
//! and FCS: the model's unit). Two clocks ([`Clock`]):
//!
//! * **virtual** (the default): model time. The CPU cost per packet comes from the hardware
//!   profile's cycle table (`host.cycles`), not from the NF code, so a trial says what the
//!   modelled machine would do, deterministically: a search gives the same answer every run, and
//!   repeated trials are answered from the first ([`Dut::repeatable`]).
//! * **wall**: this machine's time. The real NF code and the virtual NIC run on this machine's
//!   cores and the offered load is paced in wall time, as a hardware tester measures a DUT; the
//!   achieved load is the rate frames reached the wire (`wire.rx_gbps`), so a generator that
//!   falls behind flags the trial instead of crediting the DUT. With one worker the generator
//!   and the checking sink run on a tester thread of their own (`run.wire_thread`, see
//!   [`dataplane::link::wire`]), so the worker's core does the dataplane's work only, as with a
//!   hardware tester; each trial's `dut.mpps_per_worker_core` and `dut.wire_thread` say what
//!   each thread did.
//!
//! A clock the user set, with `--set run.clock=...` or [`DutOptions::clock`], is never changed;
//! both set differently is an error. A config file's own `run.clock` is for `dataplane run` and
//! does not choose the trial clock. [`Dut::info`] states the clock, profile, mode, workers and
//! where the CPU cost came from, for every report.
//!
//! Every trial starts from the state of a fresh dataplane: a new port (rings, pools, the timing
//! model) and NF chains as built, with empty flow tables. The chains are built once per DUT and
//! reset between trials ([`crate::kept_chains`]), so a 10 M-flow table is allocated and
//! faulted in once, not once per trial; the results are the same as with chains built per
//! trial. A warm-up before a trial or a discarded warm-up trial would therefore prepare
//! nothing: a per-trial warm-up is refused with an error, and searches skip their warm-up trial
//! ([`Dut::keeps_state_between_trials`]). Without
//! the timing model a trial is *functional*: frames arrive as fast as the NIC takes them (flow
//! control), nothing is offered at a rate, and the search can only confirm that nothing is lost.
//!
//! The summary is read after `run` returns, i.e. after the ports drained: frames still in flight
//! at the stop are never counted as lost. Loss is attributed from the summary's counters: every
//! key of `drops` (NF drop reasons, `rx_missed`, `pcie_overrun`) plus `rx_nombuf`, `tx_full` and
//! `desc_errors`.
//!
//! With `traffic.nat_return = true` in the config (NAT-aware return traffic, see
//! [`pktgen::nat_traffic::nat_bidir`]) the trial's frames are both directions together on the one port:
//! `run.packets` and the offered load count forward and return frames, `sent`, `received` and
//! `lost` cover both directions (the summary's `traffic` totals), and frames delivered with a
//! wrong translation count as lost (stage `translated_wrong`). The per-direction counts are in
//! the trial's `dut.traffic.forward` / `dut.traffic.return`.
//!
//! Wall-clock fields of the summary (`elapsed_s`, `mpps`, `gbps`) are left out of the trial's
//! `dut` record of virtual-time trials so reports of deterministic runs are byte-identical.

#[cfg(feature = "dpdk")]
mod dpdk;
#[cfg(feature = "dpdk")]
pub use dpdk::{DpdkDut, SharedTester};

use std::path::{Path, PathBuf};

use pktgen::GeneratorConfig;
use pktgen::latency::LatencyStats;
use pktgen::sweep::{DutFactory, Point, value_text};
use pktgen::testdut::{SimDut, SimDutConfig};
use pktgen::trial::{Dut, DutError, DutInfo, LossAttribution, TrialResult, TrialSpec, gbps};
use serde_json::Value;

use crate::config::{NfCyclesSource, PORT_TRAFFIC_KEYS};
use crate::kept_chains::KeptChains;
use crate::run::{RunOptions, load_config};

/// Summary keys that depend on the wall clock (dropped from virtual-time trial records).
const WALL_CLOCK_KEYS: [&str; 3] = ["elapsed_s", "mpps", "gbps"];

/// How trials run on the virtual NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// Timed trials at the offered rate, on the clock given.
    Timed(Clock),
    /// No timing model: frames pulled as fast as the NIC takes them.
    Functional,
}

/// The clock of a timed trial (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// Model time: deterministic, CPU cost from the profile.
    Virtual,
    /// This machine's time: the real code measured.
    Wall,
}

impl Clock {
    /// The name (`virtual`, `wall`), as `run.clock` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Clock::Virtual => "virtual",
            Clock::Wall => "wall",
        }
    }
}

impl std::str::FromStr for Clock {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().trim_matches('"') {
            "virtual" => Ok(Clock::Virtual),
            "wall" => Ok(Clock::Wall),
            other => Err(format!("`{other}` is not a clock; allowed: virtual, wall")),
        }
    }
}

/// How the command line asked for DUTs to be built.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DutOptions {
    /// Line rate override, Gb/s (needed only where the DUT cannot tell).
    pub line_gbps: Option<f64>,
    /// The trial clock (`None`: a `--set run.clock=` among the overrides, else virtual).
    pub clock: Option<Clock>,
}

/// The clock the overrides `sets` ask for with `run.clock=...` (the last one wins, as in
/// `dataplane run`).
fn clock_in_sets(sets: &[String]) -> Result<Option<Clock>, DutError> {
    let mut clock = None;
    for s in sets {
        if let Some((k, v)) = s.split_once('=')
            && k.trim() == "run.clock"
        {
            clock = Some(
                v.parse::<Clock>()
                    .map_err(|e| DutError(format!("--set {s}: {e}")))?,
            );
        }
    }
    Ok(clock)
}

/// The virtual NIC running a dataplane config, as a DUT.
#[derive(Debug)]
pub struct VnicDut {
    config: PathBuf,
    sets: Vec<String>,
    timing: Timing,
    line_bps: f64,
    traffic: GeneratorConfig,
    name: String,
    info: DutInfo,
    chains: KeptChains,
}

impl VnicDut {
    /// Loads `config` with `sets`, checks it, and finds out whether the timing model is there.
    /// `opts.line_gbps` overrides the profile's line rate (needed only without the timing
    /// model); `opts.clock` chooses the trial clock (see the module docs).
    pub fn new(config: &Path, sets: &[String], opts: DutOptions) -> Result<Self, DutError> {
        let user_clock = clock_in_sets(sets)?;
        let clock = match (opts.clock, user_clock) {
            (Some(a), Some(b)) if a != b => {
                return Err(DutError(format!(
                    "--clock {} and --set run.clock={} disagree; give one of them",
                    a.as_str(),
                    b.as_str()
                )));
            }
            (Some(c), _) | (None, Some(c)) => c,
            (None, None) => Clock::Virtual,
        };
        let run_opts = RunOptions {
            config: config.to_path_buf(),
            sets: sets.to_vec(),
            ..RunOptions::default()
        };
        let cfg = load_config(&run_opts).map_err(|e| DutError(e.to_string()))?;
        // Probe: does the config know `run.clock` (the timing model)?
        let mut probe = run_opts.clone();
        probe.sets.push(format!("run.clock={}", clock.as_str()));
        let timing = match load_config(&probe) {
            Ok(_) => Timing::Timed(clock),
            Err(_) if opts.clock.is_some() || user_clock.is_some() => {
                return Err(DutError(format!(
                    "config {}: this build has no timing model, so there is no {} clock",
                    config.display(),
                    clock.as_str()
                )));
            }
            Err(_) => Timing::Functional,
        };
        let profile = cfg.profile(config).ok();
        let line_gbps = opts
            .line_gbps
            .or(profile.as_ref().map(|p| p.nic.line_rate_gbps))
            .unwrap_or(100.0);
        let mut table = cfg.traffic.clone();
        for k in PORT_TRAFFIC_KEYS {
            table.remove(k);
        }
        let traffic: GeneratorConfig =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    DutError(format!(
                        "config {}: [traffic]: {}",
                        config.display(),
                        e.message()
                    ))
                })?;
        let nat = cfg
            .nat_return(config)
            .map_err(|e| DutError(e.to_string()))?;
        let nfs: Vec<String> = cfg
            .pipeline
            .iter()
            .filter_map(|p| p.get("name").and_then(|v| v.as_str()).map(str::to_string))
            .collect();
        let name = format!(
            "vnic {} mode={} workers={} [{}]{}{}",
            config.display(),
            cfg.datapath.mode.as_str(),
            cfg.run.workers,
            nfs.join(","),
            nat.map_or(String::new(), |n| format!(
                " nat-return (ratio {}, both directions counted)",
                n.ratio
            )),
            if timing == Timing::Functional {
                " (functional)"
            } else {
                ""
            }
        );
        let cpu_cost = match (timing, &profile) {
            (Timing::Timed(Clock::Virtual), Some(p))
                if cfg.run.nf_cycles == NfCyclesSource::Measured =>
            {
                format!(
                    "model with measured NFs: profile {} host.cycles.driver_per_packet {} \
                     plus the NF code [{}] measured on this machine over each trial's traffic \
                     (run.nf_cycles = \"measured\", as dataplane calibrate measures, once per \
                     traffic), converted at {} GHz; each trial's dut.nf_cycles has the figures",
                    p.nic.name,
                    p.host.cycles.driver_per_packet,
                    nfs.join(","),
                    p.host.cpu_ghz
                )
            }
            (Timing::Timed(Clock::Virtual), Some(p)) => {
                let nf = cfg
                    .nf_cycles(config, p)
                    .map_err(|e| DutError(e.to_string()))?;
                format!(
                    "model: profile {} host.cycles, {} cycles/packet (driver {} + NFs {nf}) at \
                     {} GHz; not the NF code",
                    p.nic.name,
                    p.host.cycles.driver_per_packet + nf,
                    p.host.cycles.driver_per_packet,
                    p.host.cpu_ghz
                )
            }
            (Timing::Timed(Clock::Wall), _) => format!(
                "measured: the NF code [{}] and the virtual NIC on this machine's cores, {} \
                 worker(s), the generator and checking sink {}",
                nfs.join(","),
                cfg.run.workers,
                if cfg
                    .run
                    .wire_thread
                    .enabled(dataplane::driver::vnic::ClockMode::Wall, cfg.run.workers)
                {
                    "on a tester thread of their own (run.wire_thread)"
                } else if cfg.run.workers == 1 {
                    "in the worker's thread (run.wire_thread = \"off\")"
                } else {
                    "on the NIC front end's thread"
                }
            ),
            _ => "none: functional trials (no timing model)".to_string(),
        };
        let info = DutInfo {
            clock: match timing {
                Timing::Timed(c) => c.as_str().to_string(),
                Timing::Functional => "none (functional)".to_string(),
            },
            profile: profile.as_ref().map(|p| p.nic.name.clone()),
            mode: Some(cfg.datapath.mode.as_str().to_string()),
            workers: Some(cfg.run.workers),
            cpu_cost,
        };
        Ok(Self {
            config: config.to_path_buf(),
            sets: sets.to_vec(),
            timing,
            line_bps: line_gbps * 1e9,
            traffic,
            name,
            info,
            chains: KeptChains::new(),
        })
    }

    /// The NF chains its trials built and reused so far ([`KeptChains::built`],
    /// [`KeptChains::reused`]).
    pub fn chains(&self) -> &KeptChains {
        &self.chains
    }

    /// How trials run.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The config's own traffic (the base every trial modifies).
    pub fn traffic(&self) -> &GeneratorConfig {
        &self.traffic
    }

    /// The overrides a trial adds to the config.
    pub fn trial_sets(&self, spec: &TrialSpec) -> Vec<String> {
        let mut sets = self.sets.clone();
        let t = &spec.traffic;
        let mut traffic = toml::Table::new();
        if let Ok(toml::Value::Table(tt)) = toml::Value::try_from(t) {
            traffic = tt;
        }
        // Keys the run owns.
        for k in ["count", "stream"] {
            traffic.remove(k);
        }
        for (k, v) in traffic {
            let v = match v {
                toml::Value::String(s) => format!("\"{s}\""),
                other => other.to_string(),
            };
            sets.push(format!("traffic.{k}={v}"));
        }
        sets.push(format!("run.packets={}", spec.intended_frames()));
        sets.push("run.duration_s=0".into());
        sets.push("run.stats_interval_s=0".into());
        if let Timing::Timed(clock) = self.timing {
            sets.push(format!("run.clock={}", clock.as_str()));
            let gbps_l1 = spec.offered_l1_bps() / 1e9;
            // Never above the line rate (rounding of the search's maximum load).
            let gbps_l1 = gbps_l1.min(self.line_bps / 1e9);
            sets.push(format!("traffic.rate_gbps={gbps_l1}"));
        }
        sets
    }
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// Builds a trial result from a `dataplane run` summary of a trial run with `timing`.
pub fn result_from_summary(spec: &TrialSpec, s: &Value, timing: Timing) -> TrialResult {
    let t = &s["traffic"];
    // With NAT return traffic the counts cover both directions, and a frame delivered with a
    // wrong translation (forward: not from the NAT address; return: not to the flow's inside
    // address and port) counts as lost: it would not reach its destination.
    let wrong = u(t, "translated_wrong");
    let sent = u(t, "sent");
    let received = u(t, "received_unique").saturating_sub(wrong);
    let lost = u(t, "seq_lost") + wrong;
    let mut stages: Vec<(String, u64)> = vec![("translated_wrong".to_string(), wrong)];
    if let Some(d) = s["drops"].as_object() {
        for (k, v) in d {
            let n = v.as_u64().unwrap_or(0);
            let stage = match k.as_str() {
                "rx_missed" | "pcie_overrun" => k.clone(),
                nf => format!("nf:{nf}"),
            };
            stages.push((stage, n));
        }
    }
    for k in ["rx_nombuf", "tx_full", "desc_errors"] {
        if !stages.iter().any(|(s, _)| s == k) {
            stages.push((k.to_string(), u(s, k)));
        }
    }
    let fs = spec.mean_frame_size();
    // The model reports exact min, max and mean and histogram percentiles; a summary without
    // the exact extremes gives no latency rather than one made up from percentiles.
    let latency = s["latency_ns"].as_object().and_then(|l| {
        let g = |k: &str| l.get(k).and_then(Value::as_u64);
        let count = l.get("count").and_then(Value::as_u64).unwrap_or(0);
        let mean = l.get("mean").and_then(Value::as_f64)?;
        let (min, max) = (g("min")?, g("max")?);
        let p = |k: &str| g(k).unwrap_or(max);
        LatencyStats::from_reported(
            count,
            min,
            max,
            mean,
            [p("p50"), p("p90"), p("p99"), p("p999")],
        )
    });
    // Achieved: in virtual time the offered rate the port paced (pulled runs report the
    // arrival rate); in wall time the rate frames reached the wire, which falls short when the
    // generator does, unless a tester thread says it never fell behind.
    let l1_pps = |g: f64| g * 1e9 / ((fs + 20.0) * 8.0);
    let achieved_pps = match timing {
        Timing::Timed(Clock::Virtual) => s
            .get("offered_gbps")
            .and_then(Value::as_f64)
            .map_or(spec.rate_pps, l1_pps),
        // A tester thread that never left the port short of a frame offered every frame at
        // its paced time: the load was offered exactly (the wire rate over the model's interval
        // would count the DUT's last departure against the tester).
        Timing::Timed(Clock::Wall)
            if s["wire_thread"]["on"] == true && s["wire_thread"]["rx_starved"] == 0 =>
        {
            spec.rate_pps
        }
        Timing::Timed(Clock::Wall) => s["wire"]["rx_gbps"].as_f64().map_or(spec.rate_pps, l1_pps),
        Timing::Functional => spec.rate_pps,
    };
    let virtual_time = timing == Timing::Timed(Clock::Virtual);
    let mut dut = s.clone();
    if let Some(o) = dut.as_object_mut()
        && virtual_time
    {
        for k in WALL_CLOCK_KEYS {
            o.remove(k);
        }
    }
    TrialResult {
        rate_pps: spec.rate_pps,
        rate_gbps: gbps(spec.rate_pps, fs),
        frame_size: fs,
        duration_s: spec.intended_duration_s(),
        intended: spec.intended_frames(),
        sent,
        gen_unsent: spec.intended_frames().saturating_sub(sent),
        achieved_pps: achieved_pps.min(spec.rate_pps),
        received,
        duplicates: u(t, "duplicates"),
        reordered: u(t, "reordered"),
        payload_mismatches: u(t, "payload_mismatches"),
        lost,
        in_flight_at_stop: 0,
        late: 0,
        latency: if spec.latency { latency } else { None },
        attribution: LossAttribution::new(lost, stages),
        bottleneck: s
            .get("bottleneck")
            .and_then(Value::as_str)
            .filter(|b| *b != "none")
            .map(str::to_string),
        deterministic: virtual_time,
        dut,
    }
}

impl Dut for VnicDut {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn info(&self) -> DutInfo {
        self.info.clone()
    }

    fn line_rate_bps(&self) -> f64 {
        self.line_bps
    }

    fn deterministic(&self) -> bool {
        self.timing == Timing::Timed(Clock::Virtual)
    }

    fn repeatable(&self) -> bool {
        // A virtual-time trial is a function of its spec (the index seeds nothing).
        self.deterministic()
    }

    fn keeps_state_between_trials(&self) -> bool {
        false
    }

    fn base_traffic(&self) -> Option<GeneratorConfig> {
        Some(self.traffic.clone())
    }

    fn trial(&mut self, spec: &TrialSpec) -> Result<TrialResult, DutError> {
        if spec.warmup_s != 0.0 {
            return Err(DutError(format!(
                "warm-up {} s: the virtual NIC DUT starts every trial with a fresh dataplane \
                 (empty tables and rings), so a warm-up before it would prepare nothing; \
                 allowed 0",
                spec.warmup_s
            )));
        }
        let opts = RunOptions {
            config: self.config.clone(),
            sets: self.trial_sets(spec),
            live_stats: false,
            ..RunOptions::default()
        };
        let summary = crate::run::vnic::run_keeping(&opts, &mut self.chains)
            .map_err(|e| DutError(e.to_string()))?;
        Ok(result_from_summary(spec, &summary, self.timing))
    }
}

/// Maps sweep axis keys to config keys: `mode`, `cores`/`workers`, `rx_ring`, `tx_ring`,
/// `nicmem`, `split_offset`, `tx_inline`, `burst`, `profile`; dotted keys are used as they are.
pub fn axis_set(key: &str, value: &toml::Value) -> Result<String, DutError> {
    let k = match key {
        "mode" => "datapath.mode",
        "cores" | "workers" => "run.workers",
        "rx_ring" => "vnic.rx_ring",
        "tx_ring" => "vnic.tx_ring",
        "nicmem" => "vnic.nicmem",
        "split_offset" => "datapath.split_offset",
        "tx_inline" => "datapath.tx_inline",
        "burst" => "datapath.burst",
        "profile" => "nic.profile",
        k if k.contains('.') => k,
        other => {
            return Err(DutError(format!(
                "sweep axis `{other}` is not a DUT parameter; allowed: mode, cores, workers, rx_ring, \
                 tx_ring, nicmem, split_offset, tx_inline, burst, profile, traffic keys, or any dotted \
                 config key (e.g. vnic.rx_ring)"
            )));
        }
    };
    let v = match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Ok(format!("{k}={v}"))
}

/// Builds the sweep's DUTs: `sim[:k=v,...]` test DUTs, vNIC configs, or (feature `dpdk`) a
/// DPDK tester config, whose tester is opened once and shared by every point.
#[derive(Clone, Debug, Default)]
pub struct VnicFactory {
    /// How DUTs are built (line rate override, clock).
    pub opts: DutOptions,
    /// The DPDK tester, once opened.
    #[cfg(feature = "dpdk")]
    tester: Option<SharedTester>,
}

impl VnicFactory {
    /// A factory building DUTs with `opts`.
    pub fn new(opts: DutOptions) -> Self {
        Self {
            opts,
            #[cfg(feature = "dpdk")]
            tester: None,
        }
    }
}

impl DutFactory for VnicFactory {
    fn build(
        &mut self,
        dut: &str,
        sets: &[String],
        params: &Point,
    ) -> Result<Box<dyn Dut>, DutError> {
        if dut.starts_with("sim") {
            let mut spec = dut.to_string();
            for (k, v) in params {
                spec.push(if spec.contains(':') { ',' } else { ':' });
                spec.push_str(&format!("{k}={}", value_text(v)));
            }
            return dut_from_spec(&spec, sets, self.opts);
        }
        if has_dpdk_section(Path::new(dut)) {
            wall_only(dut, self.opts.clock)?;
            #[cfg(feature = "dpdk")]
            return SharedTester::dut(&mut self.tester, dut, sets, params, self.opts.line_gbps);
            #[cfg(not(feature = "dpdk"))]
            return dpdk_dut(Path::new(dut), sets, self.opts.line_gbps);
        }
        let mut all = sets.to_vec();
        for (k, v) in params {
            all.push(axis_set(k, v)?);
        }
        Ok(Box::new(VnicDut::new(Path::new(dut), &all, self.opts)?))
    }
}

/// A DPDK tester measures a device outside in wall time: a virtual clock is an error.
fn wall_only(dut: &str, clock: Option<Clock>) -> Result<(), DutError> {
    match clock {
        Some(Clock::Virtual) => Err(DutError(format!(
            "--clock virtual: {dut} is a DPDK tester config, which measures a device outside \
             in wall time; allowed: --clock wall (or no --clock)"
        ))),
        _ => Ok(()),
    }
}

/// A DUT from its command-line spelling: `sim` or `sim:key=value,...` (a
/// [`pktgen::testdut::SimDut`], keys of [`SimDutConfig`], checked by
/// [`SimDutConfig::validate`]; virtual time only), else a dataplane config path.
pub fn dut_from_spec(
    spec: &str,
    sets: &[String],
    opts: DutOptions,
) -> Result<Box<dyn Dut>, DutError> {
    if let Some(rest) = spec.strip_prefix("sim") {
        if opts.clock == Some(Clock::Wall) {
            return Err(DutError(
                "--clock wall: the sim DUT is a model in virtual time; allowed: --clock virtual \
                 (or no --clock)"
                    .into(),
            ));
        }
        let mut table = toml::Table::new();
        let rest = rest.strip_prefix(':').unwrap_or(rest);
        for kv in rest
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .chain(sets.iter().cloned())
        {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| DutError(format!("sim DUT: `{kv}` is not key=value")))?;
            table.insert(
                k.trim().to_string(),
                crate::config::overrides::parse_value(v),
            );
        }
        if let Some(g) = opts.line_gbps {
            table.insert("line_bps".into(), toml::Value::Float(g * 1e9));
        }
        // Integers where the config wants floats.
        for k in [
            "line_bps",
            "capacity_pps",
            "capacity_bps",
            "gen_max_pps",
            "noise_prob",
        ] {
            if let Some(toml::Value::Integer(i)) = table.get(k).cloned() {
                table.insert(k.into(), toml::Value::Float(i as f64));
            }
        }
        let cfg: SimDutConfig = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                DutError(format!(
                    "sim DUT: key `{}`: {}",
                    e.path(),
                    e.inner().message().trim()
                ))
            })?;
        cfg.validate().map_err(DutError)?;
        return Ok(Box::new(SimDut::new(cfg)));
    }
    if has_dpdk_section(Path::new(spec)) {
        wall_only(spec, opts.clock)?;
        return dpdk_dut(Path::new(spec), sets, opts.line_gbps);
    }
    Ok(Box::new(VnicDut::new(Path::new(spec), sets, opts)?))
}

/// True when `config` is a TOML file with a `[dpdk]` section (a DUT behind DPDK ports).
pub fn has_dpdk_section(config: &Path) -> bool {
    std::fs::read_to_string(config)
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .is_some_and(|t| t.contains_key("dpdk"))
}

#[cfg(feature = "dpdk")]
fn dpdk_dut(
    config: &Path,
    sets: &[String],
    line_gbps: Option<f64>,
) -> Result<Box<dyn Dut>, DutError> {
    DpdkDut::open(config, sets, line_gbps)?
        .map(|d| Box::new(d) as Box<dyn Dut>)
        .ok_or_else(|| DutError(format!("config {}: no [dpdk] section", config.display())))
}

#[cfg(not(feature = "dpdk"))]
fn dpdk_dut(
    config: &Path,
    _sets: &[String],
    _line_gbps: Option<f64>,
) -> Result<Box<dyn Dut>, DutError> {
    Err(DutError(format!(
        "config {}: a [dpdk] section needs the DPDK tester: build with `--features dpdk` \
         (apt-get install libdpdk-dev clang libclang-dev pkg-config)",
        config.display()
    )))
}
