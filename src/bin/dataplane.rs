//! `dataplane`: run the nicmem dataplane from a config file.
//!
//! `dataplane run <config.toml>` builds the virtual NIC, pools, datapath mode and NF chain from the
//! file and runs it (SIGINT/SIGTERM stop it cleanly, with the summary); `dataplane ctl` talks to
//! a running one through its telemetry socket; `dataplane nat-lookup` maps a deterministic NAT's
//! outside endpoint back to its subscriber from the config; `dataplane model` prints the analytical
//! per-packet PCIe breakdown of a hardware profile; `dataplane nfs` prints the reference of
//! every network function; `dataplane calibrate <config.toml>` measures the config's NFs on this
//! machine and prints their cost in the profile's terms; see `--help` for the flags.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dataplane::DatapathMode;
use dataplane::pcie_model::{Breakdown, BreakdownInput, render_text, to_json};
use nmdp::calibrate::{CalibrateOptions, calibrate};
use nmdp::ops::ctl::{CtlOptions, run as ctl};
use nmdp::run::lifecycle::install_signal_handlers;
use nmdp::run::{RunOptions, print_summary, run};

#[derive(Parser)]
#[command(name = "dataplane", version, about = "The nicmem dataplane")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a pipeline from a config file (virtual NIC, or DPDK ports with a [dpdk] section).
    /// SIGINT or SIGTERM stops it cleanly: Rx stops, in-flight packets drain (at most 100 ms),
    /// the summary is printed and exports written, exit status 0; a second signal exits at once
    /// (status 130). While it runs, its telemetry socket answers dpdk-telemetry.py and
    /// `dataplane ctl` (run.telemetry_prefix, default nmdp).
    Run {
        /// The run config (TOML), e.g. configs/default.toml.
        config: PathBuf,
        /// Packets the embedded generator sends (0: no limit; with no duration either, until
        /// SIGINT/SIGTERM). Replaces the config's stop condition: without --duration, the
        /// config's run.duration_s is ignored too.
        #[arg(long)]
        packets: Option<u64>,
        /// Stop after this many seconds (0: no limit). Replaces the config's stop condition:
        /// without --packets, the config's run.packets is ignored too (with both, the first
        /// reached ends the run).
        #[arg(long)]
        duration: Option<f64>,
        /// Datapath mode: host, split, nic-payload, nic-inline (overrides datapath.mode).
        #[arg(long, value_parser = parse_mode)]
        mode: Option<DatapathMode>,
        /// Worker threads, one per core (overrides run.workers).
        #[arg(long)]
        workers: Option<u16>,
        /// Override any config key, e.g. --set vnic.rx_ring=256; a pipeline entry by name or
        /// index: --set pipeline.nat.nat_ip=10.0.0.2, --set pipeline[1].flows=65536 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Read the wire's frames from this pcap file instead of the generator.
        #[arg(long)]
        rx_pcap: Option<PathBuf>,
        /// Write transmitted frames to this pcap file.
        #[arg(long)]
        tx_pcap: Option<PathBuf>,
        /// Print the summary as one JSON object on stdout (logs go to stderr).
        #[arg(long)]
        json: bool,
        /// No live stats line.
        #[arg(long, short)]
        quiet: bool,
        /// Serve Prometheus metrics at this address, e.g. 127.0.0.1:9100 or 9100 (127.0.0.1)
        /// (overrides run.metrics).
        #[arg(long, value_name = "ADDR")]
        metrics: Option<String>,
    },
    /// Ask a running `dataplane run` something, or change it, through its telemetry socket:
    /// `summary`, `workers`, `pipeline`, `nf lb`, `lb backends`, `lb drain 10.180.250.6`,
    /// `lb weight 10.180.250.6 2`, `nat sessions 20`, `ethdev stats 0`, or any command as the
    /// socket names it (`/ethdev/xstats 0`); `help` lists them, `help lb drain` explains one.
    Ctl {
        /// The run's file prefix (run.telemetry_prefix; on DPDK ports, EAL's --file-prefix).
        #[arg(long, short = 'f', default_value = nmdp::config::DEFAULT_TELEMETRY_PREFIX)]
        prefix: String,
        /// The instance of that prefix (a second process with the same prefix is 1, ...).
        #[arg(long, short, default_value_t = 0)]
        instance: u32,
        /// Print the reply as the socket sent it (JSON).
        #[arg(long)]
        json: bool,
        /// The command and its parameters.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Measure the CPU cost per packet of each network function of a config on this machine
    /// (the config's traffic, warm tables, the clock read around every NF on every burst, the
    /// median of repeated runs) and print it converted to the hardware profile's CPU
    /// (host.cpu_ghz) as the profile's [host.cycles.nf] table.
    Calibrate {
        /// The run config (TOML), e.g. configs/nat.toml.
        config: PathBuf,
        /// Override any config key, e.g. --set traffic.flows=1000000 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Measured runs; the report is their median, with the lowest and highest as spread.
        #[arg(long, default_value_t = CalibrateOptions::default().runs,
              value_parser = clap::value_parser!(u32).range(1..=1000))]
        runs: u32,
        /// Packets per measured run.
        #[arg(long, default_value_t = CalibrateOptions::default().packets,
              value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
        packets: u64,
        /// Print the measurement as JSON instead of TOML.
        #[arg(long)]
        json: bool,
    },
    /// Who held a deterministic NAT's outside address and port (`<outside ip> <port>`), or
    /// where a subscriber's sessions leave (`<inside ip>`), computed from the config alone
    /// (RFC 7422): no running instance or log needed.
    NatLookup {
        /// The run config whose pipeline has the deterministic `nat`.
        config: PathBuf,
        /// Override any config key, as for `run` (e.g. --set run.workers=4) (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
        /// `<outside ip> <port>` or `<inside ip>`.
        #[arg(required = true, num_args = 1..=2)]
        query: Vec<String>,
    },
    /// Print the reference of every registered network function (Markdown): its names, what
    /// it does, its parameters with defaults, its drop reasons and its CPU-cost profile key.
    Nfs,
    /// Print the analytical per-packet PCIe breakdown of forwarding one packet (each item's
    /// upstream/downstream bytes, the totals, the PCIe-bound rate and the utilisation at the
    /// offered load) for a hardware profile, mode and frame size.
    Model {
        /// Hardware profile: a built-in name (cx5-gen3x16-100g, cx6dx-gen4x16-200g,
        /// future-80mib) or a path to a profile TOML.
        #[arg(long, default_value = "cx5-gen3x16-100g")]
        profile: String,
        /// Datapath mode: host, split, nic-payload, nic-inline.
        #[arg(long, value_parser = parse_mode)]
        mode: DatapathMode,
        /// Frame size in bytes including the 4 B FCS (64..=9022).
        #[arg(long)]
        frame_size: u32,
        /// Split offset H (default: the profile's nic.descriptors.split_offset).
        #[arg(long)]
        split_offset: Option<u32>,
        /// Tx inline size I (default: the split offset H, the whole header segment, as a run's
        /// `datapath.tx_inline` defaults to).
        #[arg(long)]
        inline: Option<u32>,
        /// Offered load in Gb/s, 0 < R <= the line rate (default: the line rate).
        #[arg(long, allow_negative_numbers = true)]
        offered_gbps: Option<f64>,
        /// Override a profile key, e.g. --set nic.pcie.mps=128 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Print the breakdown as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_mode(s: &str) -> Result<DatapathMode, String> {
    s.parse()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Calibrate {
            config,
            sets,
            runs,
            packets,
            json,
        } => {
            let opts = CalibrateOptions { runs, packets };
            let measured = nmdp::config::RunConfig::load(&config, &sets)
                .and_then(|cfg| calibrate(&cfg, &config, &opts));
            match measured {
                Ok(c) if json => {
                    println!("{}", c.to_json());
                    ExitCode::SUCCESS
                }
                Ok(c) => {
                    print!("{}", c.to_toml());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Ctl {
            prefix,
            instance,
            json,
            command,
        } => match ctl(&CtlOptions {
            prefix,
            instance,
            json,
            words: command,
        }) {
            Ok(out) => {
                print!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                print!("{}", e.output);
                eprintln!("error: {}", e.msg);
                ExitCode::from(e.code)
            }
        },
        Cmd::NatLookup {
            config,
            sets,
            json,
            query,
        } => match nmdp::ops::nat_lookup::run(&config, &sets, &query, json) {
            Ok(out) => {
                print!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        },
        Cmd::Nfs => {
            print!("{}", nfs::reference_markdown());
            ExitCode::SUCCESS
        }
        Cmd::Model {
            profile,
            mode,
            frame_size,
            split_offset,
            inline,
            offered_gbps,
            sets,
            json,
        } => {
            let out = nmdp::config::resolve_profile(&profile, &sets).and_then(|p| {
                let mut input = BreakdownInput::new(&p, mode, frame_size);
                if let Some(h) = split_offset {
                    input.split_offset = h;
                }
                input.inline_size = inline.unwrap_or(input.split_offset);
                input.offered_gbps = offered_gbps;
                Breakdown::compute(&p, &input)
            });
            match out {
                Ok(b) if json => {
                    println!("{}", to_json(&b));
                    ExitCode::SUCCESS
                }
                Ok(b) => {
                    print!("{}", render_text(&b));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Run {
            config,
            packets,
            duration,
            mode,
            workers,
            sets,
            rx_pcap,
            tx_pcap,
            json,
            quiet,
            metrics,
        } => {
            if let Err(e) = install_signal_handlers() {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            let opts = RunOptions {
                config,
                sets,
                packets,
                duration_s: duration,
                mode,
                workers,
                rx_pcap,
                tx_pcap,
                live_stats: !quiet,
                serve: true,
                metrics,
                until_stopped: true,
            };
            match run(&opts) {
                Ok(summary) => {
                    if json {
                        println!("{summary}");
                        let _ = print_summary(&summary, &mut std::io::stderr());
                    } else {
                        let _ = print_summary(&summary, &mut std::io::stdout());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(e.exit_code())
                }
            }
        }
    }
}
