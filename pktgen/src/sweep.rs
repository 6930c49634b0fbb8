//! Sweeps: a test (NDR/PDR search, RFC 2544 throughput, or one trial at a fixed load) run at
//! every point of the product of parameter axes, with a progress bar, results as JSON and CSV,
//! and SVG/PNG plots of throughput, latency and loss against the swept parameter, one series per
//! value of another axis (typically the datapath mode).
//!
//! A sweep is described by a TOML file (see `configs/sweeps/`):
//!
//! ```toml
//! dut = "configs/default.toml"   # what the DUT factory builds (for the vNIC: a dataplane config)
//! test = "ndr-pdr"               # ndr-pdr | throughput | trial
//! sets = ["run.workers=1"]       # fixed overrides for every point
//!
//! [[axis]]
//! key = "frame_size"             # traffic keys go to the generator, the rest to the DUT
//! values = [64, 512, 1518]
//! [[axis]]
//! key = "mode"
//! values = ["host", "nic-inline"]
//!
//! [plot]
//! x = "frame_size"
//! series = "mode"
//! ```
//!
//! Axis keys `frame_size`, `size_mix`, `flows`, `proto`, `flow_dist` and any `traffic.<key>` set
//! the traffic ([`crate::GeneratorConfig`] fields); every other key is handed to the
//! [`DutFactory`], which maps it (for the vNIC: `mode` -> `datapath.mode`, `cores` ->
//! `run.workers`, `rx_ring` -> `vnic.rx_ring`, `nicmem` -> `vnic.nicmem`, dotted keys -> `--set`).
//!
//! **Why `indicatif`** for the progress bar: sweeps of the paper's matrices take minutes to hours;
//! it gives a bar with rate and ETA on stderr, redraws at a bounded rate, and hides itself when
//! stderr is not a terminal (CI logs stay clean).

use crate::generator::GeneratorConfig;
use crate::plot::{LinePlot, Marker, Series, XScale};
use crate::search::{
    GoalOverrides, Preset, SearchConfig, SearchEvent, SearchGoal, SearchResult, TrialSettings,
    latency_at_fractions, mlr_search, rfc2544_throughput,
};
use crate::trial::{Dut, DutError, DutInfo, TrialResult};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What to run at each point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestKind {
    /// NDR and PDR in one MLRsearch-style search.
    #[default]
    NdrPdr,
    /// The classic RFC 2544 zero-loss binary search.
    Throughput,
    /// One trial at `rate` (percent of line rate by default 100 %).
    Trial,
}

/// One axis of the product.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Axis {
    /// The parameter.
    pub key: String,
    /// Its values, in order.
    pub values: Vec<toml::Value>,
}

/// Which axes the plots use.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlotSpec {
    /// Axis on the x axis (default: the first axis).
    pub x: Option<String>,
    /// Axis whose values are the series (default: the second axis, if any).
    pub series: Option<String>,
    /// Do not render plots.
    pub disabled: bool,
}

/// The searches of a sweep: a preset of Search Goals, changes to it, and the load range.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchSpec {
    /// The preset the goals start from (`csit`, `quick`, `rfc2544`).
    pub preset: Preset,
    /// Goal Loss Ratio of the PDR goal.
    pub pdr: Option<f64>,
    /// Goal Exceed Ratio.
    pub exceed_ratio: Option<f64>,
    /// Goal Width (relative).
    pub width: Option<f64>,
    /// Goal Initial Trial Duration, seconds.
    pub initial_trial_duration_s: Option<f64>,
    /// Goal Final Trial Duration, seconds.
    pub final_trial_duration_s: Option<f64>,
    /// Goal Duration Sum, seconds.
    pub duration_sum_s: Option<f64>,
    /// Maximum trials per search.
    pub max_trials: u32,
    /// Lowest load, percent of line rate.
    pub min_load_percent: f64,
    /// Run a discarded warm-up trial at the maximum load first.
    pub warmup_trial: bool,
}

impl Default for SearchSpec {
    /// The `csit` preset unchanged.
    fn default() -> Self {
        Self {
            preset: Preset::Csit,
            pdr: None,
            exceed_ratio: None,
            width: None,
            initial_trial_duration_s: None,
            final_trial_duration_s: None,
            duration_sum_s: None,
            max_trials: SearchConfig::default().max_trials,
            min_load_percent: 0.1,
            warmup_trial: true,
        }
    }
}

impl SearchSpec {
    /// The changes to the preset's goals.
    pub fn overrides(&self) -> GoalOverrides {
        GoalOverrides {
            pdr: self.pdr,
            exceed_ratio: self.exceed_ratio,
            width: self.width,
            initial_trial_duration_s: self.initial_trial_duration_s,
            final_trial_duration_s: self.final_trial_duration_s,
            duration_sum_s: self.duration_sum_s,
        }
    }

    /// The goals: the preset with the changes.
    pub fn goals(&self) -> Vec<SearchGoal> {
        self.overrides().apply(self.preset)
    }

    /// The search configuration for a DUT of line rate `line_pps`.
    pub fn config(&self, line_pps: f64) -> SearchConfig {
        SearchConfig {
            goals: self.goals(),
            min_load_pps: Some(line_pps * self.min_load_percent / 100.0),
            max_load_pps: None,
            max_trials: self.max_trials,
            warmup_trial: self.warmup_trial,
            loss_at_max_load: true,
        }
    }
}

/// A sweep description (the TOML file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Name used for output files (default: the spec file's stem).
    #[serde(default)]
    pub name: Option<String>,
    /// The DUT description handed to the factory (for the vNIC: a dataplane config path,
    /// relative to the working directory).
    pub dut: String,
    /// The test.
    #[serde(default)]
    pub test: TestKind,
    /// Fixed DUT overrides for every point.
    #[serde(default)]
    pub sets: Vec<String>,
    /// The axes (their product is swept, first axis outermost).
    pub axis: Vec<Axis>,
    /// Plot layout.
    #[serde(default)]
    pub plot: PlotSpec,
    /// Search timing.
    #[serde(default)]
    pub search: SearchSpec,
    /// Warm-up, drain, latency.
    #[serde(default)]
    pub trial: TrialSettingsSpec,
    /// Base traffic (frame size etc. may be swept).
    #[serde(default)]
    pub traffic: Option<toml::Table>,
    /// Load for `test = "trial"`: percent of line rate.
    #[serde(default = "default_rate_percent")]
    pub rate_percent: f64,
    /// Duration for `test = "trial"` and `"throughput"` trials, seconds.
    #[serde(default = "default_trial_s")]
    pub trial_s: f64,
    /// Output directory (default `target/sweeps/<name>`).
    #[serde(default)]
    pub output: Option<PathBuf>,
}

fn default_rate_percent() -> f64 {
    100.0
}

fn default_trial_s() -> f64 {
    0.1
}

/// `[trial]` of a sweep spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrialSettingsSpec {
    /// Warm-up before each trial, seconds.
    pub warmup_s: f64,
    /// Drain after each trial, seconds.
    pub drain_s: f64,
    /// Measure latency.
    pub latency: bool,
}

impl Default for TrialSettingsSpec {
    fn default() -> Self {
        Self {
            warmup_s: 0.0,
            drain_s: 0.01,
            latency: true,
        }
    }
}

/// A point of the sweep: `(axis key, value)` in axis order.
pub type Point = Vec<(String, toml::Value)>;

/// Builds the DUT for a point (given the keys that are not traffic keys).
pub trait DutFactory {
    /// The DUT for `dut` (the spec's string), with `sets` and this point's DUT parameters.
    fn build(
        &mut self,
        dut: &str,
        sets: &[String],
        params: &Point,
    ) -> Result<Box<dyn Dut>, DutError>;
}

impl<F> DutFactory for F
where
    F: FnMut(&str, &[String], &Point) -> Result<Box<dyn Dut>, DutError>,
{
    fn build(
        &mut self,
        dut: &str,
        sets: &[String],
        params: &Point,
    ) -> Result<Box<dyn Dut>, DutError> {
        self(dut, sets, params)
    }
}

/// Keys that set the traffic rather than the DUT.
pub fn is_traffic_key(key: &str) -> bool {
    matches!(
        key,
        "frame_size"
            | "size_mix"
            | "flows"
            | "proto"
            | "flow_dist"
            | "src_port_count"
            | "dst_port_count"
    ) || key.starts_with("traffic.")
}

/// Applies the traffic keys of `point` to `base`. A frame size the point sets replaces a size
/// mix of the base (and the other way round).
pub fn traffic_for(base: &toml::Table, point: &Point) -> Result<GeneratorConfig, DutError> {
    let mut t = base.clone();
    for (k, v) in point {
        if is_traffic_key(k) {
            let k = k.trim_start_matches("traffic.");
            match k {
                "frame_size" => {
                    t.remove("size_mix");
                }
                "size_mix" => {
                    t.remove("frame_size");
                }
                _ => {}
            }
            t.insert(k.to_string(), v.clone());
        }
    }
    let cfg: GeneratorConfig = toml::Value::Table(t)
        .try_into()
        .map_err(|e: toml::de::Error| DutError(format!("traffic: {}", e.message())))?;
    cfg.validate().map_err(|e| DutError(e.to_string()))?;
    Ok(cfg)
}

/// Every point of the product, first axis outermost.
pub fn points(axes: &[Axis]) -> Vec<Point> {
    let mut out: Vec<Point> = vec![Vec::new()];
    for a in axes {
        out = out
            .into_iter()
            .flat_map(|p| {
                a.values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((a.key.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    out
}

/// A value as plain text (strings without quotes).
pub fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn value_json(v: &toml::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// One row of results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepRow {
    /// The point's parameters.
    pub point: BTreeMap<String, Value>,
    /// The DUT's name.
    pub dut: String,
    /// How the DUT's trials ran: clock, profile, mode, workers, CPU cost source.
    pub dut_info: DutInfo,
    /// Mean frame size, FCS included.
    pub frame_size: f64,
    /// Flows of the traffic.
    pub flows: u32,
    /// Line rate, frames/s at this frame size.
    pub line_rate_pps: f64,
    /// NDR: the first goal's Relevant Lower Bound (or RFC 2544 throughput, or forwarding rate of
    /// the single trial), frames/s.
    pub ndr_pps: Option<f64>,
    /// The same, L1 Gb/s.
    pub ndr_gbps: Option<f64>,
    /// PDR: the second goal's Relevant Lower Bound (`ndr-pdr` with two goals), frames/s.
    pub pdr_pps: Option<f64>,
    /// PDR, L1 Gb/s.
    pub pdr_gbps: Option<f64>,
    /// Every goal's result is regular (RFC 9971 §4.8.4); irregular ones say why in `detail`.
    pub regular: bool,
    /// Load of the latency figures at NDR (or of the single trial), frames/s.
    pub latency_load_pps: Option<f64>,
    /// Latency p50 at that load, ns.
    pub latency_p50_ns: Option<u64>,
    /// Latency p99 at that load, ns.
    pub latency_p99_ns: Option<u64>,
    /// Load of the latency figures at 90 % of NDR, frames/s.
    pub latency90_load_pps: Option<f64>,
    /// Latency p50 at 90 % of NDR, ns.
    pub latency90_p50_ns: Option<u64>,
    /// Latency p99 at 90 % of NDR, ns.
    pub latency90_p99_ns: Option<u64>,
    /// Loss ratio at the maximum load, from a trial of the final trial duration (for
    /// `test = "trial"`: the trial's loss at `rate_percent`).
    pub loss_at_max: Option<f64>,
    /// The drop stage dominating at the NDR's upper bound (or the trial's).
    pub bounded_by: Option<String>,
    /// The DUT's named bottleneck there, when it models one.
    pub bottleneck: Option<String>,
    /// Trials run for this point.
    pub trials: usize,
    /// Every trial in virtual time.
    pub deterministic: bool,
    /// The full search (or trial) result.
    pub detail: Value,
}

/// The sweep's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepResult {
    /// The spec.
    pub spec: SweepSpec,
    /// One row per point, in product order.
    pub rows: Vec<SweepRow>,
}

/// Reports progress: called before each point with its index, the total and a label.
pub trait Progress {
    /// Point `i` of `n` starts.
    fn start(&mut self, i: usize, n: usize, label: &str);
    /// A trial of the current point finished.
    fn trial(&mut self, _r: &TrialResult) {}
    /// All done.
    fn finish(&mut self) {}
}

/// No progress output.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&mut self, _: usize, _: usize, _: &str) {}
}

/// An `indicatif` progress bar on stderr with the ETA (hidden when stderr is not a terminal).
pub struct Bar(indicatif::ProgressBar);

impl Bar {
    /// A bar for `n` points.
    pub fn new(n: usize) -> Self {
        let b = indicatif::ProgressBar::new(n as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} points, ETA {eta_precise} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Self(b)
    }
}

impl Progress for Bar {
    fn start(&mut self, i: usize, _n: usize, label: &str) {
        self.0.set_position(i as u64);
        self.0.set_message(label.to_string());
    }
    fn trial(&mut self, r: &TrialResult) {
        self.0.tick();
        let _ = r;
    }
    fn finish(&mut self) {
        self.0.finish_and_clear();
    }
}

/// Runs the sweep.
pub fn run_sweep(
    spec: &SweepSpec,
    factory: &mut dyn DutFactory,
    progress: &mut dyn Progress,
) -> Result<SweepResult, DutError> {
    spec.validate()?;
    let pts = points(&spec.axis);
    let mut rows = Vec::with_capacity(pts.len());
    for (i, p) in pts.iter().enumerate() {
        let label: Vec<String> = p
            .iter()
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect();
        progress.start(i, pts.len(), &label.join(" "));
        let dut_params: Point = p
            .iter()
            .filter(|(k, _)| !is_traffic_key(k))
            .cloned()
            .collect();
        let mut dut = factory.build(&spec.dut, &spec.sets, &dut_params)?;
        // The traffic: the DUT config's own, then the spec's `[traffic]`, then the point's
        // traffic axes; a setting no axis names keeps the DUT's value.
        let mut base = match dut.base_traffic() {
            Some(t) => match toml::Value::try_from(&t) {
                Ok(toml::Value::Table(t)) => t,
                _ => toml::Table::new(),
            },
            None => toml::Table::new(),
        };
        if let Some(t) = &spec.traffic {
            let extra: Point = t
                .iter()
                .map(|(k, v)| (format!("traffic.{k}"), v.clone()))
                .collect();
            base = match toml::Value::try_from(traffic_for(&base, &extra)?) {
                Ok(toml::Value::Table(t)) => t,
                _ => base,
            };
        }
        let traffic = traffic_for(&base, p)
            .map_err(|e| DutError(format!("point {}: {e}", label.join(" "))))?;
        let settings = TrialSettings {
            warmup_s: spec.trial.warmup_s,
            drain_s: spec.trial.drain_s,
            latency: spec.trial.latency,
            traffic,
            ..Default::default()
        };
        let row = run_point(spec, dut.as_mut(), &settings, p, progress)
            .map_err(|e| DutError(format!("point {}: {e}", label.join(" "))))?;
        rows.push(row);
    }
    progress.finish();
    Ok(SweepResult {
        spec: spec.clone(),
        rows,
    })
}

fn run_point(
    spec: &SweepSpec,
    dut: &mut dyn Dut,
    settings: &TrialSettings,
    p: &Point,
    progress: &mut dyn Progress,
) -> Result<SweepRow, DutError> {
    let fs = settings.traffic.mean_frame_size();
    let line = dut.line_rate_pps(fs);
    let point = p.iter().map(|(k, v)| (k.clone(), value_json(v))).collect();
    let mut row = SweepRow {
        point,
        dut: dut.name(),
        dut_info: dut.info(),
        frame_size: fs,
        flows: settings.traffic.flows,
        line_rate_pps: line,
        ndr_pps: None,
        ndr_gbps: None,
        pdr_pps: None,
        pdr_gbps: None,
        regular: true,
        latency_load_pps: None,
        latency_p50_ns: None,
        latency_p99_ns: None,
        latency90_load_pps: None,
        latency90_p50_ns: None,
        latency90_p99_ns: None,
        loss_at_max: None,
        bounded_by: None,
        bottleneck: None,
        trials: 0,
        deterministic: dut.deterministic(),
        detail: Value::Null,
    };
    let g = |pps: f64| crate::trial::gbps(pps, fs);
    let goals = spec.search.goals();
    let final_s = goals
        .first()
        .map_or(spec.trial_s, |g| g.final_trial_duration_s);
    match spec.test {
        TestKind::NdrPdr => {
            let cfg = spec.search.config(line);
            let r: SearchResult = mlr_search(dut, settings, &cfg, &mut |e| {
                if let SearchEvent::Trial { record, .. } = e {
                    progress.trial(&record.result);
                }
            })?;
            let (ndr, pdr) = (&r.goals[0], r.goals.get(1));
            row.ndr_pps = ndr.relevant_lower_bound_pps;
            row.ndr_gbps = ndr.relevant_lower_bound_gbps;
            row.pdr_pps = pdr.and_then(|p| p.relevant_lower_bound_pps);
            row.pdr_gbps = pdr.and_then(|p| p.relevant_lower_bound_gbps);
            row.regular = r.goals.iter().all(|g| g.regular);
            row.loss_at_max = r.loss_at_max_load.as_ref().map(|m| m.loss_ratio);
            row.bounded_by = ndr
                .loss_at_upper
                .as_ref()
                .and_then(|a| a.dominant().map(str::to_string));
            row.bottleneck = ndr.bottleneck.clone();
            row.trials = r.trials.len();
            row.deterministic = r.deterministic;
            row.detail = serde_json::to_value(&r).unwrap_or(Value::Null);
        }
        TestKind::Throughput => {
            let t = rfc2544_throughput(
                dut,
                settings,
                spec.trial_s,
                goals.first().map_or(0.005, |g| g.width),
                line * spec.search.min_load_percent / 100.0,
            )?;
            row.ndr_pps = t.throughput_pps;
            row.ndr_gbps = t.throughput_gbps;
            if let Some((_, first)) = t.trials.first() {
                // The first trial is at the line rate, of the full trial duration.
                row.loss_at_max = Some(first.loss_ratio());
                row.bounded_by = first.attribution.dominant().map(str::to_string);
                row.bottleneck = first.bottleneck.clone();
            }
            row.trials = t.trials.len();
            row.deterministic &= t.trials.iter().all(|(_, r)| r.deterministic);
            row.detail = serde_json::to_value(&t).unwrap_or(Value::Null);
        }
        TestKind::Trial => {
            let load = line * spec.rate_percent / 100.0;
            let r = dut.trial(&settings.spec(load, spec.trial_s, 0))?;
            progress.trial(&r);
            row.ndr_pps = Some(r.forwarding_pps());
            row.ndr_gbps = Some(g(r.forwarding_pps()));
            row.latency_load_pps = Some(load);
            row.latency_p50_ns = r.latency.map(|l| l.p50_ns);
            row.latency_p99_ns = r.latency.map(|l| l.p99_ns);
            row.loss_at_max = Some(r.loss_ratio());
            row.bounded_by = r.attribution.dominant().map(str::to_string);
            row.bottleneck = r.bottleneck.clone();
            row.trials = 1;
            row.deterministic = r.deterministic;
            row.detail = serde_json::to_value(&r).unwrap_or(Value::Null);
        }
    }
    // Latency at stated loads: the NDR (or throughput) and 90 % of it, final-duration trials.
    if spec.test != TestKind::Trial
        && spec.trial.latency
        && let Some(ndr) = row.ndr_pps
    {
        let trial_s = if spec.test == TestKind::Throughput {
            spec.trial_s
        } else {
            final_s
        };
        let pts = latency_at_fractions(dut, settings, "NDR", ndr, &[1.0, 0.9], trial_s)?;
        row.trials += pts.len();
        if let [at, at90] = pts.as_slice() {
            row.latency_load_pps = Some(at.load_pps);
            row.latency_p50_ns = at.latency.map(|l| l.p50_ns);
            row.latency_p99_ns = at.latency.map(|l| l.p99_ns);
            row.latency90_load_pps = Some(at90.load_pps);
            row.latency90_p50_ns = at90.latency.map(|l| l.p50_ns);
            row.latency90_p99_ns = at90.latency.map(|l| l.p99_ns);
        }
        if let Some(o) = row.detail.as_object_mut() {
            o.insert(
                "latency_at_load".into(),
                serde_json::to_value(&pts).unwrap_or(Value::Null),
            );
        }
    }
    Ok(row)
}

/// CSV columns (after one column per axis).
pub const CSV_COLUMNS: [&str; 27] = [
    "dut",
    "dut_clock",
    "dut_profile",
    "dut_mode",
    "dut_workers",
    "dut_cpu_cost",
    "preset",
    "mean_frame_size",
    "flows",
    "line_rate_pps",
    "ndr_pps",
    "ndr_gbps",
    "pdr_pps",
    "pdr_gbps",
    "regular",
    "latency_load_pps",
    "latency_p50_ns",
    "latency_p99_ns",
    "latency90_load_pps",
    "latency90_p50_ns",
    "latency90_p99_ns",
    "loss_at_max",
    "bounded_by",
    "bottleneck",
    "trials",
    "deterministic",
    "final_trial_s",
];

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

impl SweepResult {
    /// The rows as CSV: one column per axis, then [`CSV_COLUMNS`].
    pub fn to_csv(&self) -> String {
        let axes: Vec<&str> = self.spec.axis.iter().map(|a| a.key.as_str()).collect();
        let mut out = String::new();
        let header: Vec<&str> = axes.iter().copied().chain(CSV_COLUMNS).collect();
        out.push_str(&header.join(","));
        out.push('\n');
        let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x}"));
        let preset = match self.spec.test {
            TestKind::NdrPdr => self.spec.search.preset.as_str(),
            _ => "",
        };
        let final_s = match self.spec.test {
            TestKind::NdrPdr => self
                .spec
                .search
                .goals()
                .first()
                .map_or(self.spec.trial_s, |g| g.final_trial_duration_s),
            _ => self.spec.trial_s,
        };
        let optu = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
        for r in &self.rows {
            let mut f: Vec<String> = axes
                .iter()
                .map(|a| match r.point.get(*a) {
                    Some(Value::String(s)) => csv_field(s),
                    Some(v) => csv_field(&v.to_string()),
                    None => String::new(),
                })
                .collect();
            let i = &r.dut_info;
            f.extend([
                csv_field(&r.dut),
                csv_field(&i.clock),
                csv_field(i.profile.as_deref().unwrap_or_default()),
                csv_field(i.mode.as_deref().unwrap_or_default()),
                i.workers.map_or(String::new(), |w| w.to_string()),
                csv_field(&i.cpu_cost),
                preset.to_string(),
                format!("{}", r.frame_size),
                r.flows.to_string(),
                format!("{}", r.line_rate_pps),
                opt(r.ndr_pps),
                opt(r.ndr_gbps),
                opt(r.pdr_pps),
                opt(r.pdr_gbps),
                r.regular.to_string(),
                opt(r.latency_load_pps),
                optu(r.latency_p50_ns),
                optu(r.latency_p99_ns),
                opt(r.latency90_load_pps),
                optu(r.latency90_p50_ns),
                optu(r.latency90_p99_ns),
                opt(r.loss_at_max),
                r.bounded_by.clone().unwrap_or_default(),
                r.bottleneck.clone().unwrap_or_default(),
                r.trials.to_string(),
                r.deterministic.to_string(),
                final_s.to_string(),
            ]);
            out.push_str(&f.join(","));
            out.push('\n');
        }
        out
    }

    /// The result as JSON (`rows` without the per-trial detail when `brief`).
    pub fn to_json(&self, brief: bool) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if brief && let Some(rows) = v.get_mut("rows").and_then(Value::as_array_mut) {
            for r in rows {
                if let Some(o) = r.as_object_mut() {
                    o.remove("detail");
                }
            }
        }
        v
    }

    /// The three plots (throughput, latency at 90 % of NDR, loss at the maximum load) against
    /// the x axis, one series per value of the series axis, with units, a subtitle stating the
    /// conditions no axis varies, and an x scale that fits the parameter ([`x_scale`]).
    pub fn plots(&self) -> Vec<(String, LinePlot)> {
        let axes = &self.spec.axis;
        let x = self
            .spec
            .plot
            .x
            .clone()
            .or_else(|| axes.first().map(|a| a.key.clone()))
            .unwrap_or_default();
        let series_key = self
            .spec
            .plot
            .series
            .clone()
            .or_else(|| axes.iter().find(|a| a.key != x).map(|a| a.key.clone()));
        let x_values: Vec<Value> = axes
            .iter()
            .find(|a| a.key == x)
            .map(|a| a.values.iter().map(value_json).collect())
            .unwrap_or_default();
        let scale = x_scale(&x, &x_values);
        let x_of = |v: &Value| -> f64 {
            match &scale {
                XScale::Categories(_) => x_values.iter().position(|w| w == v).unwrap_or(0) as f64,
                _ => v.as_f64().unwrap_or(0.0),
            }
        };
        let names: Vec<String> = match &series_key {
            Some(k) => axes
                .iter()
                .find(|a| &a.key == k)
                .map(|a| a.values.iter().map(value_text).collect())
                .unwrap_or_default(),
            None => vec![String::new()],
        };
        let rows_of = |name: &str| -> Vec<&SweepRow> {
            self.rows
                .iter()
                .filter(|r| match &series_key {
                    Some(k) => {
                        r.point.get(k).map(|v| match v {
                            Value::String(s) => s.clone(),
                            o => o.to_string(),
                        }) == Some(name.to_string())
                    }
                    None => true,
                })
                .collect()
        };
        // Series get markers in turn over the whole plot, colours by series value.
        let mk = |metric: &dyn Fn(&SweepRow) -> Option<f64>,
                  suffix: &str,
                  dashed: bool,
                  first_marker: usize|
         -> Vec<Series> {
            names
                .iter()
                .enumerate()
                .map(|(i, n)| Series {
                    name: format!(
                        "{}{suffix}",
                        if n.is_empty() {
                            "result".to_string()
                        } else {
                            format!("{}={n}", series_key.as_deref().unwrap_or(""))
                        }
                    ),
                    points: rows_of(n)
                        .iter()
                        .filter_map(|r| Some((x_of(r.point.get(&x)?), metric(r)?)))
                        .collect(),
                    dashed,
                    color: i,
                    marker: Marker::ALL[(first_marker + i) % Marker::ALL.len()],
                })
                .collect()
        };
        let title_of = |what: &str| {
            format!(
                "{what} vs {}{}",
                axis_name(&x),
                series_key
                    .as_ref()
                    .map_or(String::new(), |s| format!(" per {}", axis_name(s)))
            )
        };
        let subtitle = self.subtitle(&x, series_key.as_deref());
        let ndr_pdr = self.spec.test == TestKind::NdrPdr;
        let mut thr = mk(&|r| r.ndr_gbps, if ndr_pdr { " NDR" } else { "" }, false, 0);
        if ndr_pdr && self.rows.iter().any(|r| r.pdr_gbps.is_some()) {
            thr.extend(mk(&|r| r.pdr_gbps, " PDR", true, names.len()));
        }
        let (lat_what, lat_title) = match self.spec.test {
            TestKind::Trial => (
                "",
                format!("Latency at {} % of line rate", self.spec.rate_percent),
            ),
            _ => (" at 90% NDR", "Latency at 90 % of NDR".to_string()),
        };
        let lat90 = |r: &SweepRow| match self.spec.test {
            TestKind::Trial => (r.latency_p50_ns, r.latency_p99_ns),
            _ => (r.latency90_p50_ns, r.latency90_p99_ns),
        };
        let mut lat = mk(
            &|r| lat90(r).0.map(|v| v as f64 / 1000.0),
            &format!(" p50{lat_what}"),
            false,
            0,
        );
        lat.extend(mk(
            &|r| lat90(r).1.map(|v| v as f64 / 1000.0),
            &format!(" p99{lat_what}"),
            true,
            names.len(),
        ));
        let loss_title = match self.spec.test {
            TestKind::Trial => format!("Loss at {} % of line rate", self.spec.rate_percent),
            _ => "Loss at line rate".to_string(),
        };
        let loss_trial_s = match self.spec.test {
            TestKind::NdrPdr => self
                .spec
                .search
                .goals()
                .first()
                .map_or(self.spec.trial_s, |g| g.final_trial_duration_s),
            _ => self.spec.trial_s,
        };
        let loss = mk(&|r| r.loss_at_max.map(|l| l * 100.0), "", false, 0);
        let plot = |title: String, y_label: &str, series: Vec<Series>, log_y: bool| LinePlot {
            title,
            subtitle: subtitle.clone(),
            x_label: axis_label(&x),
            y_label: y_label.to_string(),
            series,
            log_y,
            x_scale: scale.clone(),
            notes: Vec::new(),
        };
        let mut loss_plot = plot(title_of(&loss_title), "frames lost (%)", loss, false);
        loss_plot
            .notes
            .push(format!("one trial of {loss_trial_s} s per point"));
        vec![
            (
                "throughput".into(),
                plot(
                    title_of("Throughput"),
                    "throughput (Gb/s, L1 incl. preamble and IFG)",
                    thr,
                    false,
                ),
            ),
            (
                "latency".into(),
                plot(title_of(&lat_title), "latency (µs)", lat, true),
            ),
            ("loss".into(), loss_plot),
        ]
    }

    /// The conditions of the sweep that no plotted axis varies: clock, profile, mode,
    /// workers, frame size, flows, search preset, CPU cost.
    fn subtitle(&self, x: &str, series: Option<&str>) -> String {
        let on_axis = |k: &str| {
            [Some(x), series].iter().flatten().any(|a| {
                *a == k || (k == "workers" && *a == "cores") || (k == "mode" && *a == "mode")
            })
        };
        let uniq = |f: &dyn Fn(&SweepRow) -> String| -> String {
            let mut v: Vec<String> = self.rows.iter().map(f).collect();
            v.dedup();
            if v.len() == 1 {
                v.remove(0)
            } else {
                "varies".to_string()
            }
        };
        let mut parts = vec![format!("clock {}", uniq(&|r| r.dut_info.clock.clone()))];
        let profile = uniq(&|r| r.dut_info.profile.clone().unwrap_or_default());
        if !profile.is_empty() {
            parts.push(profile);
        }
        if !on_axis("mode") {
            let m = uniq(&|r| r.dut_info.mode.clone().unwrap_or_default());
            if !m.is_empty() {
                parts.push(format!("mode {m}"));
            }
        }
        if !on_axis("workers") {
            let w = uniq(&|r| r.dut_info.workers.map_or(String::new(), |w| w.to_string()));
            if !w.is_empty() {
                parts.push(format!("{w} worker(s)"));
            }
        }
        if !on_axis("frame_size") && !on_axis("size_mix") {
            parts.push(format!(
                "frame size {} B",
                uniq(&|r| format!("{}", r.frame_size))
            ));
        }
        if !on_axis("flows") {
            parts.push(format!("{} flows", uniq(&|r| r.flows.to_string())));
        }
        if self.spec.test == TestKind::NdrPdr {
            parts.push(format!("preset {}", self.spec.search.preset.as_str()));
        }
        let cost = uniq(&|r| r.dut_info.cpu_cost.clone());
        let cost = cost.split(';').next().unwrap_or_default().to_string();
        format!("{}\nCPU cost: {cost}", parts.join(" | "))
    }

    /// Writes `<name>.json`, `<name>.csv` and (unless disabled) `<name>-<plot>.svg/.png` into
    /// `dir`; returns the files written.
    pub fn write(&self, dir: &Path, name: &str) -> Result<Vec<PathBuf>, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut files = Vec::new();
        let json = dir.join(format!("{name}.json"));
        let text = serde_json::to_string_pretty(&self.to_json(false)).map_err(|e| e.to_string())?;
        std::fs::write(&json, text + "\n").map_err(|e| format!("{}: {e}", json.display()))?;
        files.push(json);
        let csv = dir.join(format!("{name}.csv"));
        std::fs::write(&csv, self.to_csv()).map_err(|e| format!("{}: {e}", csv.display()))?;
        files.push(csv);
        if !self.spec.plot.disabled {
            for (what, plot) in self.plots() {
                let svg = dir.join(format!("{name}-{what}.svg"));
                plot.save_svg(&svg)?;
                files.push(svg);
                let png = dir.join(format!("{name}-{what}.png"));
                plot.save_png(&png)?;
                files.push(png);
            }
        }
        Ok(files)
    }
}

/// Parses a sweep spec; errors name the file and the key.
pub fn load_spec(path: &Path) -> Result<SweepSpec, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("sweep {}: cannot read: {e}", path.display()))?;
    let spec: SweepSpec =
        toml::from_str(&text).map_err(|e| format!("sweep {}: {}", path.display(), e.message()))?;
    spec.validate()
        .map_err(|e| format!("sweep {}: {e}", path.display()))?;
    Ok(spec)
}

impl SweepSpec {
    /// Checks what parsing cannot: at least one axis, each with values and named once, plot
    /// axes that exist, valid goals, trial times and loads. Errors name the key.
    pub fn validate(&self) -> Result<(), DutError> {
        let err = |m: String| Err(DutError(m));
        if self.axis.is_empty() || self.axis.iter().any(|a| a.values.is_empty()) {
            return err("key `axis`: at least one axis with at least one value".into());
        }
        for (i, a) in self.axis.iter().enumerate() {
            let key = a.key.trim_start_matches("traffic.");
            if self.axis[..i]
                .iter()
                .any(|b| b.key.trim_start_matches("traffic.") == key)
            {
                return err(format!(
                    "key `axis`: `{}` is swept twice; allowed each parameter once (put all its \
                     values in one [[axis]])",
                    a.key
                ));
            }
        }
        for (k, v) in [("x", &self.plot.x), ("series", &self.plot.series)] {
            if let Some(v) = v
                && !self.axis.iter().any(|a| &a.key == v)
            {
                return err(format!(
                    "key `plot.{k}`: `{v}` is not an axis; allowed: {}",
                    self.axis
                        .iter()
                        .map(|a| a.key.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        for g in self.search.goals() {
            g.validate()
                .map_err(|e| DutError(format!("[search]: {e}")))?;
        }
        let day = crate::search::MAX_TRIAL_S;
        for (k, v, ok) in [
            (
                "trial_s",
                self.trial_s,
                self.trial_s > 0.0 && self.trial_s <= day,
            ),
            (
                "rate_percent",
                self.rate_percent,
                self.rate_percent > 0.0 && self.rate_percent <= 100.0,
            ),
            (
                "search.min_load_percent",
                self.search.min_load_percent,
                self.search.min_load_percent > 0.0 && self.search.min_load_percent <= 100.0,
            ),
            (
                "trial.warmup_s",
                self.trial.warmup_s,
                (0.0..=day).contains(&self.trial.warmup_s),
            ),
            (
                "trial.drain_s",
                self.trial.drain_s,
                (0.0..=day).contains(&self.trial.drain_s),
            ),
        ] {
            if !ok {
                return err(format!(
                    "key `{k}` = {v}: out of range (trial_s and times: 0..86400 s; percentages: \
                     0 < x <= 100)"
                ));
            }
        }
        Ok(())
    }
}

/// A readable name of an axis key.
pub fn axis_name(key: &str) -> String {
    match key {
        "frame_size" => "frame size",
        "cores" | "workers" => "worker cores",
        "rx_ring" => "Rx ring size",
        "tx_ring" => "Tx ring size",
        "mode" => "datapath mode",
        "nicmem" => "nicmem size",
        "burst" => "burst size",
        "split_offset" => "split offset",
        "tx_inline" => "Tx inline size",
        "flows" => "flows",
        "size_mix" => "size mix",
        other => other,
    }
    .to_string()
}

/// The x axis label of an axis key, with its unit.
pub fn axis_label(key: &str) -> String {
    let unit = match key {
        "frame_size" | "split_offset" | "tx_inline" => " (bytes, FCS included)",
        "cores" | "workers" => " (count)",
        "rx_ring" => " (descriptors)",
        "tx_ring" => " (WQEBBs)",
        "burst" => " (packets)",
        "flows" => " (count)",
        "mode" | "size_mix" | "nicmem" | "profile" => "",
        _ => " (value)",
    };
    let unit = if matches!(key, "split_offset" | "tx_inline") {
        " (bytes)"
    } else {
        unit
    };
    format!("{}{unit}", axis_name(key))
}

/// The x scale for an axis: categories for non-numeric values, log2 for counts and sizes that
/// grow by doubling (ring sizes, queue counts, bursts: when the values span at least a factor of
/// four and are all positive), linear otherwise.
pub fn x_scale(key: &str, values: &[Value]) -> XScale {
    let nums: Vec<f64> = values.iter().filter_map(Value::as_f64).collect();
    if nums.len() < values.len() || nums.is_empty() {
        return XScale::Categories(
            values
                .iter()
                .map(|v| v.as_str().map_or(v.to_string(), str::to_string))
                .collect(),
        );
    }
    let (lo, hi) = nums
        .iter()
        .fold((f64::INFINITY, 0.0f64), |a, &v| (a.0.min(v), a.1.max(v)));
    let pow2 = nums
        .iter()
        .all(|&v| v > 0.0 && v.fract() == 0.0 && (v as u64).is_power_of_two());
    let doubling_key = matches!(
        key,
        "rx_ring"
            | "tx_ring"
            | "cores"
            | "workers"
            | "burst"
            | "flows"
            | "vnic.rx_ring"
            | "vnic.tx_ring"
            | "run.workers"
    );
    if lo > 0.0 && hi / lo >= 4.0 && (pow2 || doubling_key) {
        XScale::Log2
    } else {
        XScale::Linear
    }
}

/// A summary line per row, for humans: NDR and PDR in Gb/s, latency at NDR with its load,
/// loss at the maximum load in percent, what bounds the DUT.
pub fn summary_lines(r: &SweepResult) -> Vec<String> {
    r.rows
        .iter()
        .map(|row| {
            let p: Vec<String> = row
                .point
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().map_or(v.to_string(), str::to_string)))
                .collect();
            let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.3}"));
            let us = |v: Option<u64>| v.map_or("-".into(), |v| format!("{:.2}", v as f64 / 1000.0));
            format!(
                "{}: NDR {} Gb/s, PDR {} Gb/s{}, latency p50/p99 {}/{} us at {} Mpps, loss at max \
                 {} %, bounded by {}",
                p.join(" "),
                f(row.ndr_gbps),
                f(row.pdr_gbps),
                if row.regular { "" } else { " (irregular)" },
                us(row.latency_p50_ns),
                us(row.latency_p99_ns),
                row.latency_load_pps
                    .map_or("-".into(), |l| format!("{:.4}", l / 1e6)),
                row.loss_at_max
                    .map_or("-".into(), |l| format!("{:.4}", l * 100.0)),
                row.bottleneck
                    .clone()
                    .or(row.bounded_by.clone())
                    .unwrap_or_else(|| "-".into()),
            )
        })
        .collect()
}
