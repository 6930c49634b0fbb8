//! `pktgen`: traffic generation and RFC 2544 / MLRsearch benchmarks.
//!
//! * `pktgen rfc2544 --dut configs/nat.toml --sizes 64,1518 --json`: NDR and PDR (one search per
//!   frame size and mode), optionally the classic throughput search, latency at the NDR, the
//!   frame loss rate curve and the back-to-back burst length, against the virtual NIC running a
//!   dataplane config (deterministic with the timing model) or a `sim:` test DUT.
//! * `pktgen sweep configs/sweeps/frame-size-mode.toml`: a parameter sweep with a progress bar,
//!   JSON, CSV and SVG/PNG plots.
//! * `pktgen gen --size-mix imix --count 1000 --rate 10Gbps -o out.pcap`: generate to a pcap file,
//!   each frame stamped with its intended departure time.
//! * `pktgen calibrate`: the generator's own latency, generator straight into the sink.
//! * `pktgen dpdk-gen configs/dpdk-txgen.toml --duration 5`: transmit on DPDK ports (build with
//!   `--features dpdk`), a Mpps line per second and a summary (`--json`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::{Parser, Subcommand};
use dataplane::link::{FrameSink, FrameSource, MAX_WIRE_FRAME};
use std::io::Write;

use nmdp::dut::{Clock, DutOptions, VnicFactory, dut_from_spec};
use pktgen::latency::LatencyStats;
use pktgen::profile::{PortTraffic, TrafficProfile};
use pktgen::progress::SearchProgress;
use pktgen::rate::Rate;
use pktgen::search::{
    GoalOverrides, LatencyPoint, Preset, SearchConfig, SearchGoal, TrialSettings, back_to_back,
    frame_loss_rate, latency_at, latency_at_fractions, mlr_search, rfc2544_throughput,
};
use pktgen::sweep::{Bar, NoProgress, Progress, load_spec, run_sweep, summary_lines};
use pktgen::trial::gbps;
use pktgen::{CheckingSink, Generator, GeneratorConfig};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "pktgen",
    version,
    about = "Traffic generation and RFC 2544 / MLRsearch benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// RFC 2544 tests (NDR/PDR by default) per frame size (and mode) against a DUT.
    Rfc2544(Rfc2544Args),
    /// Run a sweep described by a TOML spec (see configs/sweeps/).
    Sweep {
        /// The sweep spec.
        spec: PathBuf,
        /// Output directory (default: the spec's `output`, else target/sweeps/<name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the results (without per-trial detail) as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
        /// Line rate in Gb/s when the DUT cannot tell.
        #[arg(long, allow_negative_numbers = true)]
        line_gbps: Option<f64>,
        /// Trial clock on the virtual NIC: virtual (the default) or wall.
        #[arg(long)]
        clock: Option<String>,
    },
    /// Run the nicmem paper's figures (configs/paper/) in virtual time: per figure its table,
    /// JSON, CSV and plots with the paper's points, then one verdict per claim of the paper.
    Paper {
        /// Figures: all (the default) or names/prefixes (fig3, fig8, fig8-nat, fig9, fig10,
        /// fig11, fig13).
        figures: Vec<String>,
        /// Output directory; each figure writes into <out>/<figure>/.
        #[arg(long, default_value = "target/paper")]
        out: PathBuf,
        /// Also write each figure's throughput plot as <dir>/<figure>.svg (docs/paper for the
        /// committed plots).
        #[arg(long)]
        svg_dir: Option<PathBuf>,
        /// The specs' directory.
        #[arg(long, default_value = "configs/paper")]
        specs: PathBuf,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Generate traffic into a pcap file (timestamps = intended departure times).
    Gen(GenArgs),
    /// Transmit generated traffic on DPDK ports (needs a build with `--features dpdk`).
    DpdkGen(DpdkGenArgs),
    /// Measure the generator's own latency: generator straight into the sink, wall clock.
    Calibrate {
        /// Frames to send.
        #[arg(long, default_value_t = 100_000)]
        frames: u64,
        /// Frame size, FCS included.
        #[arg(long, default_value_t = 64)]
        frame_size: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct Rfc2544Args {
    /// The DUT: a dataplane config run on the virtual NIC (e.g. configs/default.toml), a DPDK
    /// tester config (a `[dpdk]` section: Tx on its first port, Rx on its last; feature `dpdk`;
    /// e.g. configs/dpdk-tester-ring.toml), or `sim[:key=value,...]`.
    #[arg(long)]
    dut: String,
    /// Trial clock on the virtual NIC: virtual (model time, CPU cost from the profile,
    /// deterministic; the default) or wall (the real NF code on this machine's cores).
    #[arg(long)]
    clock: Option<String>,
    /// Frame sizes, FCS included (default: the config's traffic.frame_size).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u32>,
    /// A size mix instead (imix, imix-csit, 64:7,594:4,1518:1).
    #[arg(long)]
    size_mix: Option<String>,
    /// Datapath modes to test, each in turn (default: the config's).
    #[arg(long, value_delimiter = ',')]
    mode: Vec<String>,
    /// Override any DUT config key (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Tests: ndr-pdr, throughput, latency, loss, back-to-back (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "ndr-pdr")]
    tests: Vec<String>,
    /// Search Goals (RFC 9971): csit (NDR + PDR 0.5 %, 1 s trials, 21 s duration sum, exceed
    /// ratio 50 %, width 0.5 %), quick (1..10 ms trials, exceed ratio 0), rfc2544 (60 s trials).
    #[arg(long, default_value = "csit")]
    preset: String,
    /// Goal Loss Ratio of the PDR goal (default: the preset's).
    #[arg(long, allow_negative_numbers = true)]
    pdr: Option<f64>,
    /// Goal Exceed Ratio (0: any high-loss trial fails a load; 0.5: CSIT).
    #[arg(long, allow_negative_numbers = true)]
    exceed: Option<f64>,
    /// Goal Width, relative ((upper - lower) / upper).
    #[arg(long, allow_negative_numbers = true)]
    width: Option<f64>,
    /// Goal Initial Trial Duration, s.
    #[arg(long, allow_negative_numbers = true)]
    initial_trial: Option<f64>,
    /// Goal Final Trial Duration, s (also the throughput, latency and loss trials).
    #[arg(long, allow_negative_numbers = true)]
    final_trial: Option<f64>,
    /// Goal Duration Sum, s.
    #[arg(long, allow_negative_numbers = true)]
    duration_sum: Option<f64>,
    /// Warm-up traffic before every trial, s (DUTs that keep state between trials).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    warmup: f64,
    /// Repetitions of the latency and back-to-back tests.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Longest burst tried by the back-to-back test, frames.
    #[arg(long, default_value_t = 100_000)]
    b2b_max: u64,
    /// Line rate in Gb/s when the DUT cannot tell.
    #[arg(long, allow_negative_numbers = true)]
    line_gbps: Option<f64>,
    /// Include every trial in the JSON.
    #[arg(long)]
    trials: bool,
    /// No progress display.
    #[arg(long, short)]
    quiet: bool,
    /// Print the results as JSON on stdout (the text report then goes to stderr).
    #[arg(long)]
    json: bool,
    /// Wall clock only: run the whole test (DUT workers, tester thread) under SCHED_FIFO at this
    /// priority (1-99; needs root or CAP_SYS_NICE), so ordinary threads of a shared machine no
    /// longer take the worker's core. Spinning real-time threads hold their cores until the
    /// kernel's real-time throttling leaves other threads 5 % of the time: keep such runs short.
    #[arg(long)]
    rt_priority: Option<i32>,
}

#[derive(clap::Args)]
struct GenArgs {
    /// A traffic profile (TOML, see configs/traffic/); the flags below then apply to all streams.
    #[arg(long)]
    profile: Option<PathBuf>,
    #[command(flatten)]
    traffic: ProfileFlags,
    /// Frames in total.
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Rate (10Mpps, 40Gbps, 95%, max) for streams without their own.
    #[arg(long)]
    rate: Option<String>,
    /// The pcap file to write.
    #[arg(long, short)]
    out: PathBuf,
}

/// The traffic-profile flags `gen` and `dpdk-gen` share; each one given replaces that key of
/// every stream's generator configuration.
#[derive(clap::Args)]
struct ProfileFlags {
    /// Frame size, FCS included (replaces a size mix).
    #[arg(long)]
    frame_size: Option<u32>,
    /// Size mix (imix, imix-csit, rfc2544, 64:7,594:4,1518:1).
    #[arg(long)]
    size_mix: Option<String>,
    /// Flows.
    #[arg(long)]
    flows: Option<u32>,
    /// udp or tcp.
    #[arg(long)]
    proto: Option<String>,
    /// round-robin, uniform or zipf:<s>.
    #[arg(long)]
    flow_dist: Option<String>,
    /// Carry departure timestamps (v2 signatures).
    #[arg(long)]
    timestamps: bool,
}

impl From<ProfileFlags> for pktgen::profile::TrafficOverrides {
    fn from(f: ProfileFlags) -> Self {
        Self {
            frame_size: f.frame_size,
            size_mix: f.size_mix,
            flows: f.flows,
            proto: f.proto,
            flow_dist: f.flow_dist,
            timestamps: f.timestamps,
        }
    }
}

#[derive(clap::Args)]
struct DpdkGenArgs {
    /// A run config with a `[dpdk]` section (EAL args, ports, worker_cores), e.g.
    /// configs/dpdk-txgen.toml; its `[traffic]` is the profile.
    config: PathBuf,
    #[command(flatten)]
    traffic: ProfileFlags,
    /// Frames per port, split across workers (default: run.packets; 0 there = unlimited).
    #[arg(long)]
    count: Option<u64>,
    /// Seconds to run (default: run.duration_s).
    #[arg(long)]
    duration: Option<f64>,
    /// Rate per port: max, 10Mpps, 40Gbps (L1), 40Gbps-l2, 95% (of --line-gbps or the link).
    #[arg(long)]
    rate: Option<String>,
    /// Line rate in Gb/s for % rates (default: the link speed the port reports).
    #[arg(long)]
    line_gbps: Option<f64>,
    /// Frames per Tx call (default: datapath.burst).
    #[arg(long)]
    burst: Option<usize>,
    /// Frames the Tx ring does not take: retry (keep and offer again) or drop (free, count).
    #[arg(long, default_value = "retry")]
    unsent: String,
    /// Override any config key (repeatable), e.g. `--set dpdk.worker_cores=[1]`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// No per-second line on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Rfc2544(a) => rfc2544(a),
        Cmd::Sweep {
            spec,
            out,
            json,
            quiet,
            line_gbps,
            clock,
        } => sweep(spec, out, json, quiet, line_gbps, clock),
        Cmd::Paper {
            figures,
            out,
            svg_dir,
            specs,
            quiet,
        } => paper(&figures, &out, svg_dir.as_deref(), &specs, quiet),
        Cmd::Gen(a) => gen_pcap(a),
        Cmd::DpdkGen(a) => dpdk_gen(a),
        Cmd::Calibrate {
            frames,
            frame_size,
            json,
        } => calibrate(frames, frame_size, json),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Checks a number given on the command line: `ok` says whether it is allowed, `allowed` what
/// is.
fn check_flag(flag: &str, v: f64, ok: bool, allowed: &str) -> Result<(), String> {
    if ok && v.is_finite() {
        Ok(())
    } else {
        Err(format!("{flag} {v}: allowed {allowed}"))
    }
}

/// The goal changes the flags ask for, each checked against what RFC 9971 and a run allow, with
/// the flag named.
fn goal_overrides(a: &Rfc2544Args) -> Result<GoalOverrides, String> {
    let day = pktgen::search::MAX_TRIAL_S;
    if let Some(v) = a.pdr {
        check_flag("--pdr", v, (0.0..1.0).contains(&v), "0 <= ratio < 1")?;
    }
    if let Some(v) = a.exceed {
        check_flag("--exceed", v, (0.0..1.0).contains(&v), "0 <= ratio < 1")?;
    }
    if let Some(v) = a.width {
        check_flag("--width", v, v > 0.0 && v < 1.0, "0 < relative width < 1")?;
    }
    for (flag, v) in [
        ("--initial-trial", a.initial_trial),
        ("--final-trial", a.final_trial),
    ] {
        if let Some(v) = v {
            check_flag(flag, v, v > 0.0 && v <= day, "0 < seconds <= 86400")?;
        }
    }
    if let Some(v) = a.duration_sum {
        check_flag(
            "--duration-sum",
            v,
            v > 0.0 && v <= day * 1000.0,
            "0 < seconds <= 86400000, at least the final trial duration",
        )?;
    }
    if let (Some(i), Some(f)) = (a.initial_trial, a.final_trial)
        && i > f
    {
        return Err(format!(
            "--initial-trial {i} is longer than --final-trial {f}; allowed initial <= final"
        ));
    }
    if let (Some(d), Some(f)) = (a.duration_sum, a.final_trial)
        && d < f
    {
        return Err(format!(
            "--duration-sum {d} is shorter than --final-trial {f}; allowed sum >= final"
        ));
    }
    Ok(GoalOverrides {
        pdr: a.pdr,
        exceed_ratio: a.exceed,
        width: a.width,
        initial_trial_duration_s: a.initial_trial,
        final_trial_duration_s: a.final_trial,
        duration_sum_s: a.duration_sum,
    })
}

/// One line describing a goal: its RFC 9971 attributes.
fn goal_line(g: &SearchGoal) -> String {
    format!(
        "{}: loss ratio {} %, exceed ratio {} %, width {} % (relative), trials {} s .. {} s \
         (final), duration sum {} s",
        g.name,
        g.loss_ratio * 100.0,
        g.exceed_ratio * 100.0,
        g.width * 100.0,
        g.initial_trial_duration_s,
        g.final_trial_duration_s,
        g.duration_sum_s
    )
}

fn mpps(pps: f64) -> String {
    format!("{:.4} Mpps", pps / 1e6)
}

fn rfc2544(a: Rfc2544Args) -> Result<(), String> {
    let modes: Vec<Option<String>> = if a.mode.is_empty() {
        vec![None]
    } else {
        a.mode.iter().cloned().map(Some).collect()
    };
    if !a.mode.is_empty() && nmdp::dut::has_dpdk_section(std::path::Path::new(&a.dut)) {
        return Err(format!(
            "--mode: {} is a DPDK tester config (the DUT is outside, behind its ports), which has \
             no datapath mode to vary",
            a.dut
        ));
    }
    let known = ["ndr-pdr", "throughput", "latency", "loss", "back-to-back"];
    if let Some(t) = a.tests.iter().find(|t| !known.contains(&t.as_str())) {
        return Err(format!(
            "--tests: `{t}` is not a test; allowed: {}",
            known.join(", ")
        ));
    }
    let preset: Preset = a.preset.parse().map_err(|e| format!("--preset: {e}"))?;
    let goals = goal_overrides(&a)?.apply(preset);
    for g in &goals {
        g.validate()
            .map_err(|e| format!("--preset {}: {e}", preset.as_str()))?;
    }
    check_flag(
        "--warmup",
        a.warmup,
        a.warmup >= 0.0 && a.warmup <= 86_400.0,
        "0 <= seconds <= 86400",
    )?;
    if a.reps == 0 {
        return Err("--reps 0: allowed at least 1 repetition".into());
    }
    if a.b2b_max == 0 {
        return Err("--b2b-max 0: allowed at least 1 frame".into());
    }
    if let Some(g) = a.line_gbps {
        check_flag("--line-gbps", g, g > 0.0, "a positive number of Gb/s")?;
    }
    let clock = a
        .clock
        .as_deref()
        .map(str::parse::<Clock>)
        .transpose()
        .map_err(|e| format!("--clock: {e}"))?;
    let dut_opts = DutOptions {
        line_gbps: a.line_gbps,
        clock,
    };
    if let Some(p) = a.rt_priority {
        if clock != Some(Clock::Wall) {
            return Err(format!(
                "--rt-priority {p}: allowed with --clock wall only (virtual time does not depend \
                 on how the threads are scheduled)"
            ));
        }
        dataplane::unix::set_realtime_fifo(p).map_err(|e| format!("--rt-priority {p}: {e}"))?;
    }
    // The final trial duration of the first goal is the trial of the other tests.
    let trial_s = goals[0].final_trial_duration_s;
    let mut out_text: Box<dyn std::io::Write> = if a.json {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let mut say = |line: String| {
        let _ = writeln!(out_text, "{line}");
    };
    let mut results = Vec::new();
    let mut dut_name = String::new();
    let mut infos = Vec::new();
    let mut deterministic = true;
    say(format!(
        "pktgen rfc2544: preset {} (RFC 9971 Search Goals; in virtual time durations are model seconds)",
        preset.as_str()
    ));
    for g in &goals {
        say(format!("  goal {}", goal_line(g)));
    }
    if let Some(p) = a.rt_priority {
        say(format!(
            "  scheduling: SCHED_FIFO priority {p} for every thread of the test (kernel real-time \
             throttling: {})",
            rt_throttling()
        ));
    }
    for mode in &modes {
        let mut sets = a.sets.clone();
        if let Some(m) = mode {
            sets.push(format!("datapath.mode={m}"));
        }
        let mut dut = dut_from_spec(&a.dut, &sets, dut_opts).map_err(|e| e.to_string())?;
        dut_name = dut.name();
        let info = dut.info();
        deterministic &= dut.deterministic();
        if a.warmup > 0.0 && !dut.keeps_state_between_trials() {
            return Err(format!(
                "--warmup {}: {} starts every trial from a fresh state, so a warm-up would \
                 prepare nothing; allowed 0 for this DUT",
                a.warmup, a.dut
            ));
        }
        say(format!("DUT {dut_name}"));
        say(format!("  {}", info.line()));
        infos.push(info.clone());
        // The base traffic: the DUT config's own, when it is a dataplane config.
        let base = dut.base_traffic().unwrap_or(GeneratorConfig {
            flows: 1024,
            ..Default::default()
        });
        let mut variants: Vec<GeneratorConfig> = Vec::new();
        if let Some(mix) = &a.size_mix {
            variants.push(GeneratorConfig {
                size_mix: Some(mix.parse().map_err(|e| format!("--size-mix: {e}"))?),
                ..base.clone()
            });
        } else if a.sizes.is_empty() {
            variants.push(base.clone());
        } else {
            for &s in &a.sizes {
                variants.push(GeneratorConfig {
                    frame_size: s,
                    size_mix: None,
                    ..base.clone()
                });
            }
        }
        for traffic in variants {
            traffic.validate().map_err(|e| e.to_string())?;
            let settings = TrialSettings {
                warmup_s: a.warmup,
                drain_s: 0.01,
                latency: true,
                traffic: traffic.clone(),
                ..Default::default()
            };
            let fs = traffic.mean_frame_size();
            let line = dut.line_rate_pps(fs);
            let size = traffic
                .size_mix
                .as_ref()
                .map_or(format!("{} B", traffic.frame_size), |m| m.to_string());
            let label = format!(
                "{size}{}",
                mode.as_ref().map_or(String::new(), |m| format!(" {m}"))
            );
            say(format!(
                "{label}: frame size {size} (mean {fs:.1} B with FCS), {} flows, line rate {} \
                 ({} Gb/s L1), clock {}, mode {}, workers {}",
                traffic.flows,
                mpps(line),
                dut.line_rate_bps() / 1e9,
                info.clock,
                info.mode.as_deref().unwrap_or("-"),
                info.workers.map_or("-".to_string(), |w| w.to_string()),
            ));
            let mut entry = json!({
                "frame_size": fs,
                "size_mix": traffic.size_mix.as_ref().map(|m| m.to_string()),
                "flows": traffic.flows,
                "mode": info.mode,
                "workers": info.workers,
                "clock": info.clock,
                "profile": info.profile,
                "cpu_cost": info.cpu_cost,
                "line_rate_pps": line,
            });
            let mut ndr: Option<f64> = None;
            if a.tests.iter().any(|t| t == "ndr-pdr") {
                let cfg = SearchConfig {
                    goals: goals.clone(),
                    min_load_pps: Some(line * 0.001),
                    ..Default::default()
                };
                let mut progress = SearchProgress::new(&label, goals.len(), a.quiet);
                let r = mlr_search(dut.as_mut(), &settings, &cfg, &mut |e| progress.event(e));
                progress.finish();
                let r = r.map_err(|e| format!("{label}: {e}"))?;
                deterministic &= r.deterministic;
                for g in &r.goals {
                    say(goal_result_line(&label, g, line));
                }
                if let Some(m) = &r.loss_at_max_load {
                    say(format!(
                        "{label}: loss at the maximum load ({}, {:.1} % of line, {} s trial): {:.4} %{}{}",
                        mpps(m.load_pps),
                        m.load_pps / line * 100.0,
                        m.duration_s,
                        m.loss_ratio * 100.0,
                        if m.generator_limited {
                            format!(
                                " of the frames sent (the generator offered only {}: \
                                 generator-limited, so this is the loss at that load)",
                                mpps(m.achieved_pps)
                            )
                        } else {
                            String::new()
                        },
                        m.attribution
                            .dominant()
                            .map_or(String::new(), |d| format!(", mostly at {d}")),
                    ));
                }
                say(format!(
                    "{label}: {} trials ({} answered from identical earlier ones), {:.3} s of \
                     trial traffic, {:.3} s measured{}",
                    r.trials.len(),
                    r.reused_trials,
                    r.total_trial_s,
                    r.measured_trial_s,
                    r.warmup_skipped
                        .as_ref()
                        .map_or(String::new(), |w| format!("; no warm-up trial: {w}")),
                ));
                if r.generator_limited_trials > 0 {
                    // With a tester thread a wall-clock trial is generator-limited when the
                    // tester left the port short of a due frame (src/dut/mod.rs); otherwise by
                    // the rate that reached the wire.
                    let tester = r
                        .trials
                        .iter()
                        .any(|t| t.result.dut["wire_thread"]["on"] == true);
                    let wall = dut.info().clock == "wall";
                    say(format!(
                        "{label}: {} of these trials {} (generator-limited: the load was not \
                         offered, so each counts as failed, whatever the DUT lost){}",
                        r.generator_limited_trials,
                        if wall && tester {
                            "had the tester thread leave the port without a frame that was due \
                             (wire_thread.rx_starved > 0)"
                                .to_string()
                        } else {
                            format!(
                                "reached the wire more than {} % below their offered load",
                                settings.rate_tolerance * 100.0
                            )
                        },
                        if wall {
                            "; in wall time the generator runs on this machine's cores beside the \
                             DUT and falls short when they are busy"
                        } else {
                            ""
                        },
                    ));
                }
                if let Some(line) = worker_absence_line(&r.trials) {
                    say(format!("{label}: {line}"));
                }
                ndr = r.goals[0].relevant_lower_bound_pps;
                let n_trials = r.trials.len();
                let mut v = serde_json::to_value(&r).map_err(|e| e.to_string())?;
                if !a.trials
                    && let Some(o) = v.as_object_mut()
                {
                    o.remove("trials");
                    o.insert("trial_count".into(), json!(n_trials));
                }
                entry["ndr_pdr"] = v;
                // Latency at stated loads: the NDR and 90 % of it (CSIT reports latency at
                // fractions of the found rate).
                if let Some(n) = ndr {
                    let pts = latency_at_fractions(
                        dut.as_mut(),
                        &settings,
                        &r.goals[0].goal.name,
                        n,
                        &[1.0, 0.9],
                        trial_s,
                    )
                    .map_err(|e| format!("{label}: {e}"))?;
                    for p in &pts {
                        say(latency_line(&label, p));
                    }
                    entry["latency_at_load"] =
                        serde_json::to_value(&pts).map_err(|e| e.to_string())?;
                }
            }
            if a.tests.iter().any(|t| t == "throughput") {
                let t = rfc2544_throughput(
                    dut.as_mut(),
                    &settings,
                    trial_s,
                    goals[0].width,
                    line * 0.001,
                )
                .map_err(|e| format!("{label}: {e}"))?;
                say(format!(
                    "{label}: RFC 2544 throughput {} ({} trials of {trial_s} s)",
                    t.throughput_pps
                        .map_or("below the minimum load".into(), |p| format!(
                            "{} = {:.3} Gb/s L1",
                            mpps(p),
                            gbps(p, fs)
                        )),
                    t.trials.len(),
                ));
                let mut v = serde_json::to_value(&t).map_err(|e| e.to_string())?;
                if !a.trials
                    && let Some(o) = v.as_object_mut()
                {
                    o.remove("trials");
                }
                entry["throughput"] = v;
            }
            let load = ndr
                .or_else(|| entry["throughput"]["throughput_pps"].as_f64())
                .unwrap_or(line);
            if a.tests.iter().any(|t| t == "latency") {
                let l = latency_at(
                    dut.as_mut(),
                    &settings,
                    load,
                    trial_s,
                    a.reps,
                    Default::default(),
                )
                .map_err(|e| format!("{label}: {e}"))?;
                if let Some(m) = &l.mean {
                    say(format!(
                        "{label}: RFC 2544 latency at {} ({} x {trial_s} s, {} frames lost): {}",
                        mpps(load),
                        a.reps,
                        l.lost,
                        latency_figures(m)
                    ));
                }
                entry["latency"] = serde_json::to_value(&l).map_err(|e| e.to_string())?;
            }
            if a.tests.iter().any(|t| t == "loss") {
                let pts = frame_loss_rate(dut.as_mut(), &settings, trial_s, 10.0)
                    .map_err(|e| format!("{label}: {e}"))?;
                say(format!(
                    "{label}: RFC 2544 frame loss rate ({trial_s} s trials)"
                ));
                say(format!(
                    "  {:>8}  {:>12}  {:>12}  {:>12}  {:>10}",
                    "load %", "load Mpps", "sent", "lost", "loss %"
                ));
                for p in &pts {
                    say(format!(
                        "  {:>8.1}  {:>12.4}  {:>12}  {:>12}  {:>10.4}",
                        p.load_percent,
                        p.load_pps / 1e6,
                        p.result.sent,
                        p.result.lost,
                        p.loss_ratio * 100.0
                    ));
                }
                let brief: Vec<Value> = pts
                    .iter()
                    .map(|p| json!({"load_percent": p.load_percent, "load_pps": p.load_pps, "sent": p.result.sent, "lost": p.result.lost, "loss_ratio": p.loss_ratio}))
                    .collect();
                entry["frame_loss_rate"] = Value::Array(brief);
            }
            if a.tests.iter().any(|t| t == "back-to-back") {
                let b = back_to_back(dut.as_mut(), &settings, a.b2b_max, a.reps)
                    .map_err(|e| format!("{label}: {e}"))?;
                say(format!(
                    "{label}: back-to-back {} frames at line rate (mean of {} bursts: {}){}",
                    b.mean_frames,
                    b.bursts.len(),
                    b.bursts
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    if b.reached_max {
                        format!("; reached --b2b-max {}", a.b2b_max)
                    } else {
                        String::new()
                    }
                ));
                entry["back_to_back"] = serde_json::to_value(&b).map_err(|e| e.to_string())?;
            }
            results.push(entry);
        }
    }
    let out = json!({
        "dut": dut_name,
        "dut_info": infos,
        "deterministic": deterministic,
        "preset": preset.as_str(),
        "goals": goals,
        "tests": a.tests,
        "results": results,
    });
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
    }
    Ok(())
}

/// A goal's result in one line: the Relevant Lower Bound (the NDR or PDR) in Mpps and Gb/s with
/// its share of the line rate, the Conditional Throughput, the Relevant Upper Bound, and what an
/// irregular result lacks.
fn goal_result_line(label: &str, g: &pktgen::search::GoalResult, line: f64) -> String {
    let lower = match (g.relevant_lower_bound_pps, g.relevant_lower_bound_gbps) {
        (Some(p), Some(gb)) => format!(
            "{} = {gb:.3} Gb/s L1 ({:.2} % of line)",
            mpps(p),
            p / line * 100.0
        ),
        _ => "none".to_string(),
    };
    format!(
        "{label}: {} {lower}; conditional throughput {}; upper bound {}{}{}{}",
        g.goal.name,
        g.conditional_throughput_pps.map_or("-".to_string(), mpps),
        g.relevant_upper_bound_pps.map_or("none".to_string(), mpps),
        match &g.irregular {
            Some(why) => format!(" [irregular: {why}]"),
            None => String::new(),
        },
        g.bottleneck
            .as_ref()
            .map_or(String::new(), |b| format!("; bottleneck {b}")),
        g.loss_at_upper
            .as_ref()
            .and_then(|l| l.dominant())
            .map_or(String::new(), |d| format!("; lost at {d}")),
    )
}

fn latency_figures(l: &LatencyStats) -> String {
    format!(
        "min {} p50 {} p90 {} p99 {} max {} mean {:.0} ns",
        l.min_ns, l.p50_ns, l.p90_ns, l.p99_ns, l.max_ns, l.mean_ns
    )
}

fn latency_line(label: &str, p: &LatencyPoint) -> String {
    format!(
        "{label}: latency at {} ({}, {:.3} Gb/s L1, {} s, loss {:.4} %): {}",
        p.label,
        mpps(p.load_pps),
        p.load_gbps,
        p.duration_s,
        p.loss_ratio * 100.0,
        p.latency
            .as_ref()
            .map_or("not measured by this DUT".to_string(), latency_figures)
    )
}

fn sweep(
    spec_path: PathBuf,
    out: Option<PathBuf>,
    json: bool,
    quiet: bool,
    line_gbps: Option<f64>,
    clock: Option<String>,
) -> Result<(), String> {
    if let Some(g) = line_gbps {
        check_flag("--line-gbps", g, g > 0.0, "a positive number of Gb/s")?;
    }
    let clock = clock
        .as_deref()
        .map(str::parse::<Clock>)
        .transpose()
        .map_err(|e| format!("--clock: {e}"))?;
    let spec = load_spec(&spec_path)?;
    let name = spec.name.clone().unwrap_or_else(|| {
        spec_path
            .file_stem()
            .map_or("sweep".into(), |s| s.to_string_lossy().into_owned())
    });
    let dir = out
        .or_else(|| spec.output.clone())
        .unwrap_or_else(|| PathBuf::from("target/sweeps").join(&name));
    let n = pktgen::sweep::points(&spec.axis).len();
    let mut bar: Box<dyn Progress> = if quiet {
        Box::new(NoProgress)
    } else {
        Box::new(Bar::new(n))
    };
    let mut factory = VnicFactory::new(DutOptions { line_gbps, clock });
    let r = run_sweep(&spec, &mut factory, bar.as_mut())
        .map_err(|e| format!("sweep {}: {e}", spec_path.display()))?;
    for l in summary_lines(&r) {
        eprintln!("{l}");
    }
    let files = r.write(&dir, &name)?;
    for f in &files {
        eprintln!("wrote {}", f.display());
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r.to_json(true)).map_err(|e| e.to_string())?
        );
    }
    Ok(())
}

/// `pktgen paper`: runs the selected figures' sweeps, writes their files, prints each figure's
/// table and then the claims table (claim, paper, nmdp, whether it holds); also writes the
/// claims as `<out>/claims.md`.
fn paper(
    names: &[String],
    out: &Path,
    svg_dir: Option<&Path>,
    specs: &Path,
    quiet: bool,
) -> Result<(), String> {
    let figures = pktgen::paper::select(names)?;
    let started = std::time::Instant::now();
    let mut claims = Vec::new();
    for f in figures {
        let path = specs.join(format!("{}.toml", f.name));
        let spec = load_spec(&path)?;
        let n = pktgen::sweep::points(&spec.axis).len();
        let mut bar: Box<dyn Progress> = if quiet {
            Box::new(NoProgress)
        } else {
            Box::new(Bar::new(n))
        };
        let t0 = std::time::Instant::now();
        let mut factory = VnicFactory::new(DutOptions::default());
        let r = run_sweep(&spec, &mut factory, bar.as_mut())
            .map_err(|e| format!("sweep {}: {e}", path.display()))?;
        let dir = out.join(f.name);
        r.write(&dir, f.name)?;
        if let Some(plot) = f.throughput_plot(&r) {
            plot.save_svg(&dir.join(format!("{}-throughput.svg", f.name)))?;
            plot.save_png(&dir.join(format!("{}-throughput.png", f.name)))?;
            if let Some(d) = svg_dir {
                std::fs::create_dir_all(d)
                    .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
                plot.save_svg(&d.join(format!("{}.svg", f.name)))?;
            }
        }
        println!();
        for l in f.table(&r) {
            println!("{l}");
        }
        println!(
            "  {n} points in {:.0} s; files in {}",
            t0.elapsed().as_secs_f64(),
            dir.display()
        );
        claims.extend(f.claims(&r)?);
    }
    println!();
    let md = pktgen::paper::claims_markdown(&claims);
    print!("{md}");
    let held = claims.iter().filter(|c| c.holds).count();
    println!(
        "{held} of {} claims hold ({:.0} s)",
        claims.len(),
        started.elapsed().as_secs_f64()
    );
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let file = out.join("claims.md");
    std::fs::write(&file, md).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(())
}

fn gen_pcap(a: GenArgs) -> Result<(), String> {
    let mut profile = match &a.profile {
        Some(p) => TrafficProfile::load(p)?,
        None => TrafficProfile::single(GeneratorConfig {
            flows: 1024,
            ..Default::default()
        }),
    };
    let rate = a
        .rate
        .as_deref()
        .map(str::parse::<Rate>)
        .transpose()
        .map_err(|e| format!("--rate: {e}"))?;
    let overrides = pktgen::profile::TrafficOverrides::from(a.traffic);
    for s in &mut profile.stream {
        overrides.apply(&mut s.traffic)?;
        if s.rate.is_none() {
            s.rate = rate;
        }
    }
    let mut port = PortTraffic::new(&profile)?;
    let now = Arc::new(AtomicU64::new(0));
    let clock = now.clone();
    let mut sink = dataplane::pcap::PcapSink::with_timestamps(
        &a.out,
        dataplane::pcap::Timestamps::Clock(Box::new(move || clock.load(Ordering::Relaxed))),
    )
    .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; MAX_WIRE_FRAME];
    let mut n = 0;
    while n < a.count {
        let Some((len, t_ps)) = port.next_timed(&mut buf) else {
            break;
        };
        now.store(t_ps / 1000, Ordering::Relaxed);
        sink.deliver(&buf[..len]);
        n += 1;
    }
    let stats = sink.close().map_err(|e| e.to_string())?;
    eprintln!(
        "wrote {} frames ({} bytes) to {}",
        stats.frames,
        stats.bytes,
        a.out.display()
    );
    Ok(())
}

fn calibrate(frames: u64, frame_size: u32, json: bool) -> Result<(), String> {
    let cfg = GeneratorConfig {
        frame_size,
        flows: 1024,
        count: Some(frames),
        timestamps: true,
        ..Default::default()
    };
    let mut g = Generator::new(cfg.clone()).map_err(|e| e.to_string())?;
    let mut sink = CheckingSink::for_generator(&cfg);
    let mut buf = vec![0u8; MAX_WIRE_FRAME];
    while let Some(n) = g.next_frame(&mut buf) {
        sink.deliver(&buf[..n]);
    }
    sink.finish();
    let l = sink
        .latency_histogram(0)
        .and_then(|h| h.stats())
        .ok_or("no latency measured")?;
    if json {
        println!("{}", json!({"loopback": l, "bias_ns": l.min_ns}));
    } else {
        println!(
            "generator -> sink loopback ({frames} frames of {frame_size} B): min {} ns p50 {} ns p99 {} ns max {} ns; bias to subtract: {} ns",
            l.min_ns, l.p50_ns, l.p99_ns, l.max_ns, l.min_ns
        );
    }
    Ok(())
}

#[cfg(feature = "dpdk")]
fn dpdk_gen(a: DpdkGenArgs) -> Result<(), String> {
    use nmdp::dpdk_gen::{GenOptions, GenRate};
    let rate = a
        .rate
        .as_deref()
        .map(str::parse::<GenRate>)
        .transpose()
        .map_err(|e| format!("--rate: {e}"))?;
    if let Some(g) = a.line_gbps
        && !(g > 0.0 && g.is_finite())
    {
        return Err(format!(
            "--line-gbps: {g}; allowed a positive number of Gb/s"
        ));
    }
    if let Some(d) = a.duration
        && !(d >= 0.0 && d.is_finite())
    {
        return Err(format!(
            "--duration: {d}; allowed a finite number of seconds >= 0"
        ));
    }
    let opts = GenOptions {
        sets: a.sets,
        traffic: a.traffic.into(),
        count: a.count,
        duration_s: a.duration,
        rate,
        line_gbps: a.line_gbps,
        burst: a.burst,
        unsent: a.unsent.parse().map_err(|e| format!("--unsent: {e}"))?,
        live_stats: !a.quiet,
        ..GenOptions::new(a.config.clone())
    };
    let s = nmdp::dpdk_gen::run(&opts).map_err(|e| e.to_string())?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&s.to_json()).map_err(|e| e.to_string())?
        );
    } else {
        println!("{}", s.text());
    }
    if s.stalled {
        // The summary above is complete; the exit status tells a script the count was not sent.
        return Err(format!(
            "dpdk-gen {}: stopped before its count: the ports took no frame for \
             run.drain_timeout_s while frames waited (a link down or a dead device)",
            a.config.display()
        ));
    }
    Ok(())
}

#[cfg(not(feature = "dpdk"))]
fn dpdk_gen(a: DpdkGenArgs) -> Result<(), String> {
    Err(format!(
        "dpdk-gen {}: this pktgen was built without DPDK; rebuild with \
         `cargo build --release --features dpdk` (needs libdpdk-dev)",
        a.config.display()
    ))
}

/// What the kernel's real-time throttling leaves other threads, from
/// `/proc/sys/kernel/sched_rt_{runtime,period}_us`.
fn rt_throttling() -> String {
    let read = |k: &str| {
        std::fs::read_to_string(format!("/proc/sys/kernel/sched_rt_{k}_us"))
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
    };
    match (read("runtime"), read("period")) {
        (Some(r), Some(p)) if r >= 0 && p > 0 => format!(
            "real-time threads may run {r} us of every {p} us, {:.0} % left to other threads",
            100.0 * (1.0 - r as f64 / p as f64)
        ),
        (Some(-1), _) => "off: real-time threads may hold their cores indefinitely".into(),
        _ => "unknown (/proc/sys/kernel/sched_rt_runtime_us unreadable)".into(),
    }
}

/// Wall clock with a tester thread: how often the worker was away from the port longer than
/// its Rx ring lasts (`wire_thread.look_gaps`) in the search's trials at its lowest load (at
/// higher loads the ring lasts less and ordinary scheduling shows); `None` when no trial timed
/// it.
fn worker_absence_line(trials: &[pktgen::search::TrialRecord]) -> Option<String> {
    let lowest = trials
        .iter()
        .map(|t| t.load_pps)
        .fold(f64::INFINITY, f64::min);
    let timed: Vec<&Value> = trials
        .iter()
        .filter(|t| t.load_pps <= lowest)
        .map(|t| &t.result.dut["wire_thread"])
        .filter(|w| w["look_gap_limit_ms"].as_f64().is_some_and(|l| l > 0.0))
        .collect();
    if timed.is_empty() {
        return None;
    }
    let gaps: u64 = timed.iter().filter_map(|w| w["look_gaps"].as_u64()).sum();
    let with = timed
        .iter()
        .filter(|w| w["look_gaps"].as_u64().unwrap_or(0) > 0)
        .count();
    let longest = timed
        .iter()
        .filter_map(|w| w["look_gap_max_ms"].as_f64())
        .fold(0.0, f64::max);
    let ring = timed
        .iter()
        .filter_map(|w| w["look_gap_limit_ms"].as_f64())
        .fold(0.0, f64::max);
    Some(format!(
        "at the lowest load tried ({}) the worker was away from the port longer than its Rx \
         ring lasts ({ring:.2} ms) {gaps} times, in {with} of {} trials; longest absence \
         {longest:.1} ms (a descheduled worker: frames due meanwhile meet a full ring, \
         rx_missed)",
        mpps(lowest),
        timed.len()
    ))
}
