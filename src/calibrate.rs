//! `dataplane calibrate`: the CPU cost per packet of each network function of a config,
//! measured on this machine and converted to the hardware profile's CPU, so that a new NF can be
//! put into the virtual-time model (`host.cycles.nf.<name>`), and what a virtual-time run
//! charges its NFs and why (the run summary's `nf_cycles`).
//!
//! # Which cycle figures come from where
//!
//! The virtual-time model charges a packet `host.cycles.driver_per_packet` plus the sum of its
//! NFs' `host.cycles.nf.<name>` at `host.cpu_ghz` (the profile's CPU). In the built-in profiles
//! (configs/profiles/cx5-gen3x16-100g.toml, each figure tagged there):
//!
//! - **from the paper**: the CPU itself, a Xeon Silver 4216 at 2.1 GHz with Turbo off
//!   (docs/reference/pcie-nic-model.md §7 and §8), and the per-core budget of 1808 cycles per
//!   packet at 14 cores and 16.26 Mpps (§8); `nat` (1330) and `lb` (1070) are derived from
//!   Fig. 8 (§8: NAT reaches line rate at 14 cores, LB at 12), with 172 cycles per DRAM access
//!   from the 82 ns local DRAM latency of §7 at 2.1 GHz;
//! - **by definition**: `io_fwd` = 0 (forwarding costs only the driver's share);
//! - **assumptions** (no published figure): `driver_per_packet`, `doorbell`, `flow_counter`,
//!   `macswap`, `work_package`;
//! - **measured** (this module): any NF's cost on this machine, for an NF the paper never ran,
//!   or to check an assumption. A run uses it with `run.nf_cycles = "measured"`.
//!
//! # How the measurement is made
//!
//! The config's pipeline is built as one worker holding every flow (the per-core cost with the
//! whole table; with `W` workers each holds `1/W` of the flows, which costs the same or less)
//! and fed the config's `[traffic]` (forward frames; `traffic.nat_return` is not replayed) in
//! bursts of `datapath.burst`, laid out as the datapath mode lays packets out
//! ([`dataplane::testkit::PacketFactory`]). First one pass over every flow (or over one run's
//! packets, if more) warms the tables: every flow has its entry, as in a long run. Then
//! [`CalibrateOptions::runs`] runs of [`CalibrateOptions::packets`] packets each: around every
//! NF's `process` call on every burst the monotonic clock is read (the read's own cost, measured
//! first, is subtracted), and an NF's time over a run divided by the packets that entered the
//! chain is its cost per packet in that run. The report is the median over the runs, with the
//! lowest and highest run as the spread. Packets an NF holds back (NAT's inbound fragments
//! waiting for their first fragment) are released after each burst as the run loop releases
//! them, through the functions after the holder, and that work is timed to each function too;
//! what is still held at the end is flushed (dropped by its reason and counted).
//!
//! Nanoseconds become cycles of the profile's CPU as `ns x host.cpu_ghz`: the figure says what
//! the same work would cost at the modelled clock if this machine's core did as much per cycle,
//! which is the assumption the model makes of any cost it is given. Headers are written into
//! their buffers just before each burst, so they are in this core's caches, as DDIO leaves a
//! received header in the LLC; the NFs' tables are where their size puts them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dataplane::driver::vnic::ClockMode;
use dataplane::pcie_model::HardwareProfile;
use dataplane::testkit::PacketFactory;
use dataplane::{Burst, DropCounts, MAX_BURST, NfChain, NfContext, Verdict};
use pktgen::{Generator, GeneratorConfig};
use serde_json::{Value, json};

use crate::config::{ConfigError, NfCyclesSource, RunConfig};

/// How much to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CalibrateOptions {
    /// Measured runs (the report is their median), at least 1.
    pub runs: u32,
    /// Packets per measured run, at least one burst.
    pub packets: u64,
}

impl Default for CalibrateOptions {
    /// 7 runs of 262 144 packets.
    fn default() -> Self {
        Self {
            runs: 7,
            packets: 1 << 18,
        }
    }
}

/// A figure over the runs: the median, the lowest and the highest run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    /// The median run (the mean of the two middle runs for an even count).
    pub median: f64,
    /// The lowest run.
    pub min: f64,
    /// The highest run.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (not empty).
    fn of(values: &[f64]) -> Self {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Self {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    fn scaled(self, k: f64) -> Self {
        Self {
            median: self.median * k,
            min: self.min * k,
            max: self.max * k,
        }
    }

    fn json(self) -> Value {
        json!({"median": self.median, "min": self.min, "max": self.max})
    }
}

/// One NF's measured cost.
#[derive(Clone, Debug)]
pub struct NfCost {
    /// Its canonical name (the profile key's last part).
    pub name: &'static str,
    /// Nanoseconds per packet on this machine.
    pub ns: Spread,
    /// Cycles per packet of the profile's CPU (`ns x host.cpu_ghz`).
    pub cycles: Spread,
    /// What the profile charges for it now, if it has a figure.
    pub profile_cycles: Option<u32>,
    /// Packets it dropped in the measured runs, by reason (the cost is of the path the traffic
    /// took, drops included).
    pub drops: DropCounts,
}

impl NfCost {
    /// The figure for the profile: the median in whole cycles.
    pub fn cycles_per_packet(&self) -> u32 {
        self.cycles.median.round().clamp(0.0, f64::from(u32::MAX)) as u32
    }
}

/// What `dataplane calibrate` measured (see the module docs).
#[derive(Clone, Debug)]
pub struct Calibration {
    /// The config file.
    pub config: PathBuf,
    /// The profile's name.
    pub profile: String,
    /// The profile's CPU clock, GHz (the conversion factor).
    pub cpu_ghz: f64,
    /// This machine's CPU, as `/proc/cpuinfo` names it (`unknown` elsewhere).
    pub machine_cpu: String,
    /// The datapath mode the packets were laid out in.
    pub mode: &'static str,
    /// Packets per burst.
    pub burst: usize,
    /// The traffic, in words (frame size, protocol, flows).
    pub traffic: String,
    /// The traffic's flows.
    pub flows: u32,
    /// Packets of the warming pass.
    pub warm_packets: u64,
    /// Packets that entered the chain in each measured run (each run's `options.packets`
    /// unless the traffic ended early).
    pub measured_packets: Vec<u64>,
    /// The options measured with.
    pub options: CalibrateOptions,
    /// The cost of one clock read, subtracted from every interval, ns.
    pub clock_overhead_ns: f64,
    /// Each pipeline entry's cost, in pipeline order.
    pub nfs: Vec<NfCost>,
}

impl Calibration {
    /// The NFs' cycles per packet added up (what a virtual-time run charges with
    /// `run.nf_cycles = "measured"`).
    pub fn total_cycles(&self) -> u32 {
        self.nfs
            .iter()
            .fold(0u32, |t, n| t.saturating_add(n.cycles_per_packet()))
    }

    /// The measurement in the hardware profile's TOML form: a `[host.cycles.nf]` table, one key
    /// per NF, with comments saying what was measured, how, and the spread.
    pub fn to_toml(&self) -> String {
        let mut out = format!(
            "# dataplane calibrate {}\n\
             # Measured on this machine ({}): the NF chain of one worker holding every flow, over\n\
             # the config's traffic ({}), {} mode, bursts of {};\n\
             # tables warmed by {} packets first, then {} runs of {} packets; the clock read around\n\
             # every NF on every burst (its own {:.1} ns subtracted). Cycles = ns x host.cpu_ghz\n\
             # {} of the profile `{}`: the modelled CPU's cycles, not this machine's.\n\
             # Put these into the profile's [host.cycles.nf], or run with run.nf_cycles = \"measured\".\n\
             [host.cycles.nf]\n",
            self.config.display(),
            self.machine_cpu,
            self.traffic,
            self.mode,
            self.burst,
            self.warm_packets,
            self.options.runs,
            self.options.packets,
            self.clock_overhead_ns,
            self.cpu_ghz,
            self.profile,
        );
        let width = self.nfs.iter().map(|n| n.name.len()).max().unwrap_or(0);
        for n in &self.nfs {
            let now = n
                .profile_cycles
                .map_or("the profile has none".to_string(), |c| {
                    format!("the profile has {c}")
                });
            let line = format!("{:width$} = {}", n.name, n.cycles_per_packet());
            out.push_str(&format!(
                "{line:<w$}# median {:.1} ns/packet (runs {:.1} .. {:.1}), {:.0} .. {:.0} cycles; {now}\n",
                n.ns.median,
                n.ns.min,
                n.ns.max,
                n.cycles.min,
                n.cycles.max,
                w = width + 10,
            ));
        }
        let sent = u64::from(self.options.runs) * self.options.packets;
        if sent < u64::from(self.flows) {
            out.push_str(&format!(
                "# the measured runs sent {sent} packets of a traffic of {} flows: where flows \
                 differ in cost the runs differ too; --packets {} covers every flow in each run\n",
                self.flows, self.flows
            ));
        }
        for n in &self.nfs {
            let dropped = n.drops.total();
            if dropped > 0 {
                let reasons: Vec<String> = n
                    .drops
                    .nonzero()
                    .map(|(r, c)| format!("{} {c}", r.name()))
                    .collect();
                out.push_str(&format!(
                    "# {} dropped {:.1} % of the measured packets ({}): its cost is that of the \
                     path the traffic took\n",
                    n.name,
                    100.0 * dropped as f64 / sent as f64,
                    reasons.join(", ")
                ));
            }
        }
        out
    }

    /// The measurement as JSON (`dataplane calibrate --json`, and the run summary's
    /// `nf_cycles.measurement`).
    pub fn to_json(&self) -> Value {
        let nfs: Vec<Value> = self
            .nfs
            .iter()
            .map(|n| {
                let drops: serde_json::Map<String, Value> = n
                    .drops
                    .nonzero()
                    .map(|(r, c)| (r.name().to_string(), json!(c)))
                    .collect();
                json!({
                    "nf": n.name,
                    "cost_key": format!("host.cycles.nf.{}", n.name),
                    "cycles": n.cycles_per_packet(),
                    "cycles_spread": n.cycles.json(),
                    "ns_per_packet": n.ns.json(),
                    "profile_cycles": n.profile_cycles,
                    "drops": drops,
                })
            })
            .collect();
        json!({
            "config": self.config.display().to_string(),
            "profile": self.profile,
            "cpu_ghz": self.cpu_ghz,
            "machine_cpu": self.machine_cpu,
            "mode": self.mode,
            "burst": self.burst,
            "traffic": self.traffic,
            "flows": self.flows,
            "warm_packets": self.warm_packets,
            "measured_packets": self.measured_packets,
            "runs": self.options.runs,
            "packets_per_run": self.options.packets,
            "clock_overhead_ns": self.clock_overhead_ns,
            "nfs": nfs,
        })
    }
}

/// Measures the cost per packet of every NF of `cfg` (loaded from `path`) on this machine (see
/// the module docs). Errors name the file and the key (a pipeline entry that cannot be built, a
/// bad `[traffic]` or profile).
pub fn calibrate(
    cfg: &RunConfig,
    path: &Path,
    opts: &CalibrateOptions,
) -> Result<Calibration, ConfigError> {
    let profile = cfg.profile(path)?;
    let gen_cfg = crate::traffic::generator_config(&cfg.generator_table(), cfg.vnic.max_frame)
        .map_err(|(key, msg)| ConfigError {
            file: path.to_path_buf(),
            key,
            msg,
        })?;
    let mut chain = cfg.build_chain(path, 0, 1)?;
    let d = &cfg.datapath;
    // Room for a burst and for every packet an NF may hold back between bursts.
    let factory = PacketFactory::new(
        d.mode,
        d.split_offset,
        cfg.vnic.max_frame,
        d.burst + MAX_BURST,
    );
    let mut source = Frames::new(&gen_cfg, cfg.vnic.max_frame).map_err(|e| ConfigError {
        file: path.to_path_buf(),
        key: format!("traffic.{}", e.key),
        msg: e.to_string(),
    })?;
    let runs = opts.runs.max(1);
    let per_run = opts.packets.max(d.burst as u64);
    let warm = u64::from(gen_cfg.flows).max(per_run);
    let m = measure(
        &mut chain,
        &factory,
        |f: &PacketFactory, b: &mut Burst, n: usize| source.fill(f, b, n),
        d.burst,
        warm,
        runs,
        per_run,
    );
    let overhead = m.clock_overhead_ns;
    let profile_costs = &profile.host.cycles.nf;
    // The chain was built from the pipeline, so every entry names a registered function.
    let names = cfg.pipeline.iter().filter_map(|e| {
        let name = e.get("name")?.as_str()?;
        Some(nfs::lookup(name)?.name)
    });
    let costs = names
        .zip(m.ns_per_packet)
        .zip(m.drops)
        .map(|((name, ns), drops)| {
            let ns = Spread::of(&ns);
            NfCost {
                name,
                ns,
                cycles: ns.scaled(profile.host.cpu_ghz),
                profile_cycles: profile_costs.get(name).copied(),
                drops,
            }
        })
        .collect();
    Ok(Calibration {
        config: path.to_path_buf(),
        profile: profile.nic.name.clone(),
        cpu_ghz: profile.host.cpu_ghz,
        machine_cpu: machine_cpu(),
        mode: d.mode.as_str(),
        burst: d.burst,
        traffic: describe(&gen_cfg),
        flows: gen_cfg.flows,
        warm_packets: warm,
        measured_packets: m.entered,
        options: CalibrateOptions {
            runs,
            packets: per_run,
        },
        clock_overhead_ns: overhead,
        nfs: costs,
    })
}

/// What [`measure`] found: per NF its ns per packet in each run and the packets it dropped, and
/// the packets that entered the chain in each run.
struct Measurement {
    ns_per_packet: Vec<Vec<f64>>,
    drops: Vec<DropCounts>,
    entered: Vec<u64>,
    clock_overhead_ns: f64,
}

/// Feeds `chain` bursts of up to `burst_size` packets that `fill(factory, burst, n)` makes:
/// `warm` packets untimed, then `runs` runs of `per_run` packets with every NF's `process` timed
/// (see the module docs). Packets an NF holds back (NAT's fragments waiting for their first) are
/// released as the run loop releases them: after each burst the ready ones leave through the
/// functions after the holder (their time counted to each function, as their drops are), and at
/// the end every one still held is flushed (dropped by its reason, counted). Without that a
/// holding NF would keep the factory's buffers and starve the measurement, and its release work
/// would be missing from its cost.
fn measure(
    chain: &mut NfChain,
    factory: &PacketFactory,
    mut fill: impl FnMut(&PacketFactory, &mut Burst, usize),
    burst_size: usize,
    warm: u64,
    runs: u32,
    per_run: u64,
) -> Measurement {
    let start = Instant::now();
    let ctx = || NfContext {
        now_ns: start.elapsed().as_nanos() as u64,
        worker: 0,
        workers: 1,
    };
    let mut burst = Burst::with_capacity(burst_size);
    let mut released = Burst::with_capacity(burst_size);
    // Warm the tables: the same path, untimed.
    let mut left = warm;
    while left > 0 {
        fill(factory, &mut burst, left.min(burst_size as u64) as usize);
        if burst.is_empty() {
            break;
        }
        left = left.saturating_sub(burst.len() as u64);
        chain.process(&mut burst, &ctx());
        burst.clear();
        release_held(chain, &mut released, &ctx(), false, None);
    }
    let overhead = clock_read_ns();
    let nfs = chain.functions().len();
    let mut ns_runs: Vec<Vec<f64>> = vec![Vec::with_capacity(runs as usize); nfs];
    let mut drops = vec![DropCounts::default(); nfs];
    let mut entered_runs = Vec::with_capacity(runs as usize);
    let mut before = [Verdict::tx(0); MAX_BURST];
    for _ in 0..runs {
        let mut spent = vec![0f64; nfs];
        let (mut left, mut entered) = (per_run, 0u64);
        while left > 0 {
            fill(factory, &mut burst, left.min(burst_size as u64) as usize);
            let n = burst.len();
            if n == 0 {
                break;
            }
            entered += n as u64;
            let c = ctx();
            for (i, nf) in chain.functions_mut().iter_mut().enumerate() {
                // A function may take packets out of the burst (to hold them): compare the
                // verdicts of those that stay.
                let k = burst.len();
                before[..k].copy_from_slice(burst.verdicts());
                let t = Instant::now();
                nf.process(&mut burst, &c);
                let ns = t.elapsed().as_nanos() as f64;
                spent[i] += (ns - overhead).max(0.0);
                count_new_drops(&before[..k], burst.verdicts(), &mut drops[i]);
            }
            burst.clear();
            let timing = Timing {
                spent: &mut spent,
                drops: &mut drops,
                overhead,
            };
            release_held(chain, &mut released, &c, false, Some(timing));
            left = left.saturating_sub(n as u64);
        }
        for (i, s) in spent.iter().enumerate() {
            ns_runs[i].push(s / entered.max(1) as f64);
        }
        entered_runs.push(entered);
    }
    // Nothing stays held at the end: every held packet leaves, dropped by its reason.
    let mut spent = vec![0f64; nfs];
    let timing = Timing {
        spent: &mut spent,
        drops: &mut drops,
        overhead,
    };
    release_held(chain, &mut released, &ctx(), true, Some(timing));
    Measurement {
        ns_per_packet: ns_runs,
        drops,
        entered: entered_runs,
        clock_overhead_ns: overhead,
    }
}

/// Where [`release_held`] books the time and drops of each function (a timed run).
struct Timing<'a> {
    spent: &'a mut [f64],
    drops: &'a mut [DropCounts],
    overhead: f64,
}

/// Adds to `drops` the packets dropped between verdicts `before` and `after`.
fn count_new_drops(before: &[Verdict], after: &[Verdict], drops: &mut DropCounts) {
    for (was, now) in before.iter().zip(after) {
        if let (false, Some(r)) = (was.is_drop(), now.drop_reason()) {
            drops.add(r, 1);
        }
    }
}

/// Releases what the chain's functions hold, as [`NfChain::release`] does (the holder's
/// `release`, then the functions after it over what it released), until no function releases
/// anything; with `flush` every held packet (each call releases at least one). The released
/// packets are then freed, as a sent burst is. With `timing`, each function's `release` and
/// `process` calls are timed and its new drops counted.
fn release_held(
    chain: &mut NfChain,
    out: &mut Burst,
    ctx: &NfContext,
    flush: bool,
    mut timing: Option<Timing<'_>>,
) {
    let mut before = [Verdict::tx(0); MAX_BURST];
    while chain.held() > 0 {
        let nfs = chain.functions_mut();
        let Some(k) = (0..nfs.len()).find(|&k| {
            nfs[k].held() > 0 && {
                let t = Instant::now();
                nfs[k].release(out, ctx, flush);
                if let Some(tm) = timing.as_mut() {
                    tm.spent[k] += (t.elapsed().as_nanos() as f64 - tm.overhead).max(0.0);
                }
                !out.is_empty()
            }
        }) else {
            break;
        };
        if let Some(tm) = timing.as_mut() {
            // Released with a drop (a timeout, or the flush): the holder's drop.
            let fresh = [Verdict::tx(0); MAX_BURST];
            count_new_drops(&fresh[..out.len()], out.verdicts(), &mut tm.drops[k]);
        }
        for (j, nf) in nfs.iter_mut().enumerate().skip(k + 1) {
            let n = out.len();
            before[..n].copy_from_slice(out.verdicts());
            let t = Instant::now();
            nf.process(out, ctx);
            if let Some(tm) = timing.as_mut() {
                tm.spent[j] += (t.elapsed().as_nanos() as f64 - tm.overhead).max(0.0);
                count_new_drops(&before[..n], out.verdicts(), &mut tm.drops[j]);
            }
        }
        out.clear();
    }
}

/// The config's traffic, frame by frame, written into a factory's packets.
struct Frames {
    generator: Generator,
    frame: Vec<u8>,
}

impl Frames {
    fn new(cfg: &GeneratorConfig, max_frame: usize) -> Result<Self, pktgen::ConfigError> {
        Ok(Self {
            generator: Generator::new(GeneratorConfig {
                count: None,
                ..cfg.clone()
            })?,
            frame: vec![0; max_frame + 4],
        })
    }

    /// Puts the next `n` frames into `burst` (empty, room for `n`). The factory holds one
    /// burst of frames up to `vnic.max_frame`, which the traffic's sizes were checked against,
    /// so every frame fits; the burst's length says how many did.
    fn fill(&mut self, factory: &PacketFactory, burst: &mut Burst, n: usize) {
        for _ in 0..n {
            match self.generator.produce_at(&mut self.frame, 0) {
                Some(len) if factory.push(burst, &self.frame[..len]) => {}
                _ => break,
            }
        }
    }
}

/// The cost of reading the clock, ns: the median of many back-to-back reads.
fn clock_read_ns() -> f64 {
    let mut v: Vec<f64> = (0..10_001)
        .map(|_| Instant::now().elapsed().as_nanos() as f64)
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The traffic in words: `1518 B UDP, 4130000 flows (round-robin)`.
fn describe(g: &GeneratorConfig) -> String {
    let size = match &g.size_mix {
        Some(m) => format!("size mix {m}"),
        None => format!("{} B", g.frame_size),
    };
    format!(
        "{size} {}, {} flows",
        format!("{:?}", g.proto).to_uppercase(),
        g.flows
    )
}

/// This machine's CPU model, from `/proc/cpuinfo` (`unknown` when it cannot be read).
fn machine_cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                Some(
                    l.strip_prefix("model name")?
                        .split_once(':')?
                        .1
                        .trim()
                        .to_string(),
                )
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Measurements made for `run.nf_cycles = "measured"`, one per config, traffic and profile
/// clock in this process: every trial of a search charges the same figures (its results stay a
/// function of its input), and a search measures once, not once per trial.
static MEASURED: Mutex<Vec<(String, Arc<Calibration>)>> = Mutex::new(Vec::new());

/// The measurement of `cfg` with the default options, made once per process for the same
/// pipeline, traffic, datapath and profile clock: every trial of a search charges the same
/// figures, measured once.
pub fn measured(cfg: &RunConfig, path: &Path) -> Result<Arc<Calibration>, ConfigError> {
    let profile = cfg.profile(path)?;
    let key = json!({
        "config": path.display().to_string(),
        "pipeline": cfg.pipeline,
        "traffic": cfg.generator_table(),
        "mode": cfg.datapath.mode.as_str(),
        "split_offset": cfg.datapath.split_offset,
        "burst": cfg.datapath.burst,
        "max_frame": cfg.vnic.max_frame,
        "cpu_ghz": profile.host.cpu_ghz,
    })
    .to_string();
    let mut memo = MEASURED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = memo.iter().find(|(k, _)| *k == key) {
        return Ok(c.clone());
    }
    let c = Arc::new(calibrate(cfg, path, &CalibrateOptions::default())?);
    memo.push((key, c.clone()));
    Ok(c)
}

/// What a run charges its NFs per packet, and the run summary's `nf_cycles` saying so.
#[derive(Clone, Debug)]
pub struct RunNfCycles {
    /// The cycles per packet the virtual clock charges (`None` in wall time: the NF code runs).
    pub charged: Option<u32>,
    /// The summary's `nf_cycles`: `source` (`profile`, `measured` or `wall clock`), each NF's
    /// cycles in pipeline order, the total, and with `measured` the measurement itself.
    pub report: Value,
}

/// The NF cycles a run of `cfg` charges on `profile` (see [`RunNfCycles`]): in virtual time the
/// profile's `host.cycles.nf` (a missing key is an error naming it), or with
/// `run.nf_cycles = "measured"` this machine's measurement ([`measured`]); in wall time none.
pub fn run_nf_cycles(
    cfg: &RunConfig,
    path: &Path,
    profile: &HardwareProfile,
) -> Result<RunNfCycles, ConfigError> {
    if cfg.run.clock == ClockMode::Wall {
        return Ok(RunNfCycles {
            charged: None,
            report: json!({
                "source": "wall clock",
                "note": "the NF code runs on this machine's cores; no cycle figure is charged",
            }),
        });
    }
    let each = |list: Vec<(&str, u32)>| -> Vec<Value> {
        list.into_iter()
            .map(|(nf, cycles)| json!({"nf": nf, "cycles": cycles}))
            .collect()
    };
    match cfg.run.nf_cycles {
        NfCyclesSource::Profile => {
            let list = cfg.nf_cycles_each(path, profile)?;
            let total = list.iter().fold(0u32, |t, (_, c)| t.saturating_add(*c));
            Ok(RunNfCycles {
                charged: Some(total),
                report: json!({
                    "source": "profile",
                    "profile": profile.nic.name,
                    "cpu_ghz": profile.host.cpu_ghz,
                    "each": each(list),
                    "total": total,
                }),
            })
        }
        NfCyclesSource::Measured => {
            let m = measured(cfg, path)?;
            let total = m.total_cycles();
            Ok(RunNfCycles {
                charged: Some(total),
                report: json!({
                    "source": "measured",
                    "profile": profile.nic.name,
                    "cpu_ghz": profile.host.cpu_ghz,
                    "each": each(m.nfs.iter().map(|n| (n.name, n.cycles_per_packet())).collect()),
                    "total": total,
                    "measurement": m.to_json(),
                }),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_lowest_and_highest() {
        let s = Spread::of(&[5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 5.0));
        let s = Spread::of(&[4.0, 1.0, 2.0, 10.0]);
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 10.0));
        let c = s.scaled(2.1);
        assert_eq!((c.median, c.max), (3.0 * 2.1, 10.0 * 2.1));
    }

    /// Holds every second packet of each burst and releases all it holds but the newest on the
    /// next `release` (a flush drops every one), counting both.
    struct HoldHalf {
        held: Burst,
        taken: u64,
        released: u64,
    }

    impl dataplane::NetworkFunction for HoldHalf {
        fn name(&self) -> &str {
            "hold_half"
        }
        fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
            let mut i = 1;
            while i < burst.len() && self.held.room() > 0 {
                assert!(burst.remove_to(i, &mut self.held));
                self.taken += 1;
                i += 1;
            }
        }
        fn held(&self) -> usize {
            self.held.len()
        }
        fn release(&mut self, out: &mut Burst, _ctx: &NfContext, flush: bool) {
            let keep = usize::from(!flush);
            while self.held.len() > keep && out.room() > 0 {
                if flush {
                    self.held
                        .set_verdict(0, Verdict::drop(dataplane::DropReason::POLICY));
                }
                assert!(self.held.remove_to(0, out));
                self.released += 1;
            }
        }
    }

    /// Counts the packets it sees.
    struct Seen(std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl dataplane::NetworkFunction for Seen {
        fn name(&self) -> &str {
            "seen"
        }
        fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
            self.0
                .fetch_add(burst.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Packets an NF holds are released as the run loop releases them: every run gets all its
    /// packets (a holder no longer starves the factory), the functions after the holder see the
    /// released ones, and nothing stays held or allocated at the end.
    #[test]
    fn held_packets_are_released_and_flushed() {
        let (burst, per_run, runs) = (32, 4000u64, 3);
        let factory =
            PacketFactory::new(dataplane::DatapathMode::Host, 64, 1514, burst + MAX_BURST);
        let mut chain = NfChain::new();
        chain.push(Box::new(HoldHalf {
            held: Burst::with_capacity(64),
            taken: 0,
            released: 0,
        }));
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        chain.push(Box::new(Seen(seen.clone())));
        let frame = vec![0x5au8; 60];
        let fill = |f: &PacketFactory, b: &mut Burst, n: usize| {
            for _ in 0..n {
                if !f.push(b, &frame) {
                    break;
                }
            }
        };
        let warm = 1000;
        let m = measure(&mut chain, &factory, fill, burst, warm, runs, per_run);
        assert_eq!(
            m.entered,
            vec![per_run; runs as usize],
            "every run fully fed"
        );
        assert_eq!(chain.held(), 0, "nothing held at the end");
        assert_eq!(factory.in_use(), 0, "every buffer back");
        let total = warm + per_run * u64::from(runs);
        assert_eq!(
            seen.load(std::sync::atomic::Ordering::Relaxed),
            total,
            "the function after the holder saw every packet, held ones after their release"
        );
        assert_eq!(m.drops[0].total(), 1, "the final flush: the holder's drop");
    }
}
