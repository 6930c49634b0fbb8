//! What a run is asked to do ([`RunOptions`], the command line of `dataplane run`) and how it
//! fails ([`RunError`]), shared by every driver's run.

use std::path::PathBuf;

use dataplane::DatapathMode;

use crate::config::{ConfigError, RunConfig};

/// Command-line options of `dataplane run`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The config file.
    pub config: PathBuf,
    /// `--set key=value` overrides, in order.
    pub sets: Vec<String>,
    /// `--packets N`.
    pub packets: Option<u64>,
    /// `--duration S`.
    pub duration_s: Option<f64>,
    /// `--mode M`.
    pub mode: Option<DatapathMode>,
    /// `--workers N`.
    pub workers: Option<u16>,
    /// `--rx-pcap FILE`: the wire delivers this capture instead of the generator.
    pub rx_pcap: Option<PathBuf>,
    /// `--tx-pcap FILE`: transmitted frames are written here.
    pub tx_pcap: Option<PathBuf>,
    /// Print the live stats line (to stderr).
    pub live_stats: bool,
    /// Serve the operation surfaces the config asks for (telemetry socket, metrics endpoint):
    /// what `dataplane run` does; runs made by other code (tests, RFC 2544 trials) serve
    /// nothing unless they say so.
    pub serve: bool,
    /// `--metrics ADDR`: serve Prometheus metrics there (overrides `run.metrics`).
    pub metrics: Option<String>,
    /// The run may go on until it is stopped from outside (`dataplane run`, which stops on
    /// SIGINT/SIGTERM): traffic with neither `run.packets` nor `run.duration_s` is allowed.
    pub until_stopped: bool,
}

impl RunOptions {
    /// The `--set` overrides with `--mode`, `--packets`, `--duration` and `--workers` folded in as
    /// the keys they stand for (applied last, so they win), for every driver's config loader.
    ///
    /// `--packets` and `--duration` *replace* the config's stop condition rather than race it:
    /// one given alone clears the other's key (`--duration 5` on a config with `run.packets`
    /// runs 5 s, not until the config's packet count); given together, the run ends at
    /// whichever comes first.
    pub fn override_sets(&self) -> Vec<String> {
        // The config file's other stop condition is cleared first, so an explicit `--set
        // run.packets=...` next to `--duration` still counts.
        let mut sets = match (self.packets, self.duration_s) {
            (Some(_), None) => vec!["run.duration_s=0".to_string()],
            (None, Some(_)) => vec!["run.packets=0".to_string()],
            _ => Vec::new(),
        };
        sets.extend(self.sets.iter().cloned());
        if let Some(m) = self.mode {
            sets.push(format!("datapath.mode={}", m.as_str()));
        }
        if let Some(n) = self.packets {
            sets.push(format!("run.packets={n}"));
        }
        if let Some(d) = self.duration_s {
            sets.push(format!("run.duration_s={d}"));
        }
        if let Some(w) = self.workers {
            sets.push(format!("run.workers={w}"));
        }
        if let Some(m) = &self.metrics {
            sets.push(format!("run.metrics=\"{m}\""));
        }
        sets
    }
}

/// Loads the config with the command-line overrides folded in as `--set`s.
pub fn load_config(opts: &RunOptions) -> Result<RunConfig, ConfigError> {
    RunConfig::load(&opts.config, &opts.override_sets())
}

/// Errors of a run: a bad config, or a failure setting up ports or files.
#[derive(Debug)]
pub enum RunError {
    /// The config (or an override) is invalid; nothing ran.
    Config(ConfigError),
    /// Setting up the run failed; nothing ran.
    Setup(String),
    /// The run started but an output it must write failed (a `--tx-pcap` capture, an NF's dump
    /// file): the results are incomplete, so the run failed.
    Output(String),
}

impl RunError {
    /// The process exit code for this error: 2 when nothing ran (bad config or setup), 1 when
    /// the run started and failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Config(_) | RunError::Setup(_) => 2,
            RunError::Output(_) => 1,
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Config(e) => e.fmt(f),
            RunError::Setup(s) | RunError::Output(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for RunError {}

impl From<ConfigError> for RunError {
    fn from(e: ConfigError) -> Self {
        RunError::Config(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stop condition on the command line replaces the config's instead of racing it.
    #[test]
    fn command_line_stop_conditions_replace_the_configs() {
        let with = |packets, duration_s| RunOptions {
            packets,
            duration_s,
            ..RunOptions::default()
        };
        let sets = with(None, Some(3.0)).override_sets();
        assert_eq!(sets, ["run.packets=0", "run.duration_s=3"]);
        let sets = with(Some(10), None).override_sets();
        assert_eq!(sets, ["run.duration_s=0", "run.packets=10"]);
        let sets = with(Some(10), Some(2.5)).override_sets();
        assert_eq!(sets, ["run.packets=10", "run.duration_s=2.5"]);
        assert!(with(None, None).override_sets().is_empty());
        // An explicit --set of the other key still counts: both conditions, as asked.
        let mut o = with(None, Some(3.0));
        o.sets = vec!["run.packets=500".into()];
        assert_eq!(
            o.override_sets(),
            ["run.packets=0", "run.packets=500", "run.duration_s=3"]
        );
    }
}
