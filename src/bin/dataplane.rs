//! `dataplane`: run the nicmem dataplane from a config file.
//!
//! `dataplane run <config.toml>` builds the virtual NIC, pools, datapath mode and NF chain from the
//! file and runs it; see `--help` for the flags.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dataplane::DatapathMode;
use nmdp::app::{RunOptions, print_summary, run};

#[derive(Parser)]
#[command(name = "dataplane", version, about = "The nicmem dataplane")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a pipeline from a config file on the virtual NIC.
    Run {
        /// The run config (TOML), e.g. configs/default.toml.
        config: PathBuf,
        /// Packets the embedded generator sends (overrides run.packets).
        #[arg(long)]
        packets: Option<u64>,
        /// Stop after this many seconds (overrides run.duration_s).
        #[arg(long)]
        duration: Option<f64>,
        /// Datapath mode: host, split, nic-payload, nic-inline (overrides datapath.mode).
        #[arg(long, value_parser = parse_mode)]
        mode: Option<DatapathMode>,
        /// Worker threads, one per core (overrides run.workers).
        #[arg(long)]
        workers: Option<u16>,
        /// Override any config key, e.g. --set vnic.rx_ring=256 (repeatable).
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
    },
}

fn parse_mode(s: &str) -> Result<DatapathMode, String> {
    s.parse()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
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
        } => {
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
                    ExitCode::from(2)
                }
            }
        }
    }
}
