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

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::{Parser, Subcommand};
use dataplane::wire::{FrameSink, FrameSource, MAX_WIRE_FRAME};
use nmdp::bench::{VnicFactory, dut_from_spec};
use pktgen::profile::{PortTraffic, TrafficProfile};
use pktgen::rate::Rate;
use pktgen::search::{
    SearchConfig, SearchGoal, TrialSettings, back_to_back, frame_loss_rate, latency_at, mlr_search,
    rfc2544_throughput,
};
use pktgen::sweep::{Bar, NoProgress, Progress, load_spec, run_sweep, summary_lines};
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
        #[arg(long)]
        line_gbps: Option<f64>,
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
    /// PDR loss ratio.
    #[arg(long, default_value_t = 0.005)]
    pdr: f64,
    /// Exceed ratio (0: any high-loss trial fails a load; 0.5: CSIT).
    #[arg(long, default_value_t = 0.0)]
    exceed: f64,
    /// Relative width goal.
    #[arg(long, default_value_t = 0.005)]
    width: f64,
    /// First-phase trial duration, s.
    #[arg(long, default_value_t = 0.001)]
    initial_trial: f64,
    /// Final trial duration, s (also the throughput/latency/loss trials).
    #[arg(long, default_value_t = 0.01)]
    final_trial: f64,
    /// Trial time per load in the final phase, s (default: one final trial).
    #[arg(long)]
    duration_sum: Option<f64>,
    /// Warm-up per trial, s.
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// Repetitions of the latency and back-to-back tests.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Longest burst tried by the back-to-back test, frames.
    #[arg(long, default_value_t = 100_000)]
    b2b_max: u64,
    /// Line rate in Gb/s when the DUT cannot tell.
    #[arg(long)]
    line_gbps: Option<f64>,
    /// Include every trial in the JSON.
    #[arg(long)]
    trials: bool,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    json: bool,
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
        } => sweep(spec, out, json, quiet, line_gbps),
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

fn rfc2544(a: Rfc2544Args) -> Result<(), String> {
    let modes: Vec<Option<String>> = if a.mode.is_empty() {
        vec![None]
    } else {
        a.mode.iter().cloned().map(Some).collect()
    };
    if !a.mode.is_empty() && nmdp::bench::has_dpdk_section(std::path::Path::new(&a.dut)) {
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
    let mut results = Vec::new();
    let mut dut_name = String::new();
    let mut deterministic = true;
    for mode in &modes {
        let mut sets = a.sets.clone();
        if let Some(m) = mode {
            sets.push(format!("datapath.mode={m}"));
        }
        let mut dut = dut_from_spec(&a.dut, &sets, a.line_gbps).map_err(|e| e.to_string())?;
        dut_name = dut.name();
        deterministic &= dut.deterministic();
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
            let label = format!(
                "{}{}",
                traffic
                    .size_mix
                    .as_ref()
                    .map_or(format!("{} B", traffic.frame_size), |m| m.to_string()),
                mode.as_ref().map_or(String::new(), |m| format!(" {m}"))
            );
            let mut entry = json!({
                "frame_size": fs,
                "size_mix": traffic.size_mix.as_ref().map(|m| m.to_string()),
                "mode": mode,
                "line_rate_pps": line,
            });
            if a.tests.iter().any(|t| t == "ndr-pdr") {
                let timing = SearchGoal {
                    exceed_ratio: a.exceed,
                    relative_width: a.width,
                    initial_trial_s: a.initial_trial.min(a.final_trial),
                    final_trial_s: a.final_trial,
                    duration_sum_s: a.duration_sum.unwrap_or(a.final_trial),
                    ..Default::default()
                };
                let cfg = SearchConfig {
                    goals: SearchGoal::ndr_pdr(a.pdr, &timing),
                    min_load_pps: Some(line * 0.001),
                    ..Default::default()
                };
                let n = std::cell::Cell::new(0);
                let r = mlr_search(dut.as_mut(), &settings, &cfg, &mut |_| n.set(n.get() + 1))
                    .map_err(|e| format!("{label}: {e}"))?;
                deterministic &= r.deterministic;
                for g in &r.goals {
                    eprintln!(
                        "{label}: {} {} ({} Gb/s L1, {:.1} % of line){}{}",
                        g.goal.name,
                        g.lower_pps
                            .map_or("below the minimum load".into(), |p| format!("{:.0} pps", p)),
                        g.lower_gbps.map_or("-".into(), |x| format!("{x:.3}")),
                        g.lower_pps.map_or(0.0, |p| p / line * 100.0),
                        g.bottleneck
                            .as_ref()
                            .map_or(String::new(), |b| format!(", bottleneck {b}")),
                        g.loss_at_upper
                            .as_ref()
                            .and_then(|l| l.dominant())
                            .map_or(String::new(), |d| format!(", lost at {d}")),
                    );
                }
                let mut v = serde_json::to_value(&r).map_err(|e| e.to_string())?;
                if !a.trials
                    && let Some(o) = v.as_object_mut()
                {
                    o.remove("trials");
                    o.insert("trial_count".into(), json!(n.get()));
                }
                entry["ndr_pdr"] = v;
            }
            let x = entry["ndr_pdr"]["goals"][0]["lower_pps"].as_f64();
            if a.tests.iter().any(|t| t == "throughput") {
                let t = rfc2544_throughput(
                    dut.as_mut(),
                    &settings,
                    a.final_trial,
                    a.width,
                    line * 0.001,
                )
                .map_err(|e| format!("{label}: {e}"))?;
                eprintln!(
                    "{label}: RFC 2544 throughput {}",
                    t.throughput_gbps
                        .map_or("-".into(), |g| format!("{g:.3} Gb/s"))
                );
                let mut v = serde_json::to_value(&t).map_err(|e| e.to_string())?;
                if !a.trials
                    && let Some(o) = v.as_object_mut()
                {
                    o.remove("trials");
                }
                entry["throughput"] = v;
            }
            let load = x
                .or_else(|| entry["throughput"]["throughput_pps"].as_f64())
                .unwrap_or(line);
            if a.tests.iter().any(|t| t == "latency") {
                let l = latency_at(
                    dut.as_mut(),
                    &settings,
                    load,
                    a.final_trial,
                    a.reps,
                    Default::default(),
                )
                .map_err(|e| format!("{label}: {e}"))?;
                if let Some(m) = &l.mean {
                    eprintln!(
                        "{label}: latency at {:.0} pps: p50 {} ns p99 {} ns max {} ns",
                        load, m.p50_ns, m.p99_ns, m.max_ns
                    );
                }
                entry["latency"] = serde_json::to_value(&l).map_err(|e| e.to_string())?;
            }
            if a.tests.iter().any(|t| t == "loss") {
                let pts = frame_loss_rate(dut.as_mut(), &settings, a.final_trial, 10.0)
                    .map_err(|e| format!("{label}: {e}"))?;
                let brief: Vec<Value> = pts
                    .iter()
                    .map(|p| json!({"load_percent": p.load_percent, "load_pps": p.load_pps, "loss_ratio": p.loss_ratio}))
                    .collect();
                entry["frame_loss_rate"] = Value::Array(brief);
            }
            if a.tests.iter().any(|t| t == "back-to-back") {
                let b = back_to_back(dut.as_mut(), &settings, a.b2b_max, a.reps)
                    .map_err(|e| format!("{label}: {e}"))?;
                eprintln!("{label}: back-to-back {:.1} frames", b.mean_frames);
                entry["back_to_back"] = serde_json::to_value(&b).map_err(|e| e.to_string())?;
            }
            results.push(entry);
        }
    }
    let out = json!({
        "dut": dut_name,
        "deterministic": deterministic,
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

fn sweep(
    spec_path: PathBuf,
    out: Option<PathBuf>,
    json: bool,
    quiet: bool,
    line_gbps: Option<f64>,
) -> Result<(), String> {
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
    let mut factory = VnicFactory::new(line_gbps);
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
        ..GenOptions::new(a.config)
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
