//! RFC 2544 procedures and the NDR/PDR search, against any [`Dut`].
//!
//! * [`mlr_search`]: several loss goals (NDR = 0 loss, PDR = e.g. 0.5 %) found **in one search**,
//!   in the style of MLRsearch (draft-ietf-bmwg-mlrsearch; FD.io CSIT). What it takes from there:
//!   - **phases**: short trials while the bounds are wide, full-length trials only at the end;
//!     phase `p` of `P` has trial duration `initial * (final / initial)^(p / (P-1))` and width
//!     goal `goal_width * 2^(P-1-p)`, so each phase halves the width and the last one meets
//!     the goal with full-length trials. A phase starts from the previous phase's bounds
//!     (re-measured at the longer duration), so short-trial answers are never reported.
//!   - **exceed ratio and duration sum**: a load is an *upper bound* for a goal when more than
//!     `exceed_ratio` of the goal's `duration_sum` (counting trials not yet run as low-loss) had
//!     loss above the goal's ratio, and a *lower bound* when at most `exceed_ratio` does (counting
//!     trials not yet run as high-loss); otherwise the load is measured again. With
//!     `exceed_ratio = 0.5` one unlucky trial out of three does not move the answer; with 0 (RFC
//!     2544) any loss does. Only the final phase uses the full duration sum; earlier phases take
//!     one trial per load.
//!   - **relative width goal** as the stopping rule: `(upper - lower) / upper <= width`.
//!   - **loss inversion**: a lower bound above the lowest upper bound is ignored (the reported
//!     throughput is conditional on the bounds below it: the relevant lower bound).
//!   - **first guess from the forwarding rate**: after a high-loss trial the next load is the
//!     forwarding rate observed there, then expanding steps, then bisection (aiming at exactly
//!     the width goal when close, as CSIT does).
//!   - generator-limited trials (achieved rate short of the intended one) count as high-loss:
//!     a load that was not offered cannot be claimed.
//! * [`rfc2544_throughput`]: the classic RFC 2544 §26.1 binary search for the highest zero-loss
//!   rate, every trial full length.
//! * [`frame_loss_rate`]: RFC 2544 §26.3, loss ratio from 100 % down in steps until two
//!   successive loss-free trials.
//! * [`back_to_back`]: RFC 2544 §26.4, the longest burst at line rate without loss, by binary
//!   search on the burst length, repeated and averaged.
//! * [`latency_at`]: RFC 2544 §26.2 latency at a given load, repeated and averaged, with the
//!   calibration subtracted.

use crate::generator::GeneratorConfig;
use crate::latency::{Calibration, LatencyStats};
use crate::trial::{
    DEFAULT_RATE_TOLERANCE, Dut, DutError, LossAttribution, TrialResult, TrialSpec, gbps,
};
use serde::{Deserialize, Serialize};

/// One loss goal of a search (e.g. NDR or PDR).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchGoal {
    /// Name in reports, e.g. `"NDR"`.
    pub name: String,
    /// Highest loss ratio a trial may have to count as low-loss (0 = no loss).
    pub loss_ratio: f64,
    /// Fraction of the duration sum allowed to be high-loss at a lower bound.
    pub exceed_ratio: f64,
    /// Stop when `(upper - lower) / upper` is at most this.
    pub relative_width: f64,
    /// Trial duration of the first phase, seconds.
    pub initial_trial_s: f64,
    /// Trial duration of the final phase, seconds.
    pub final_trial_s: f64,
    /// Trial time needed at a load in the final phase to decide it, seconds.
    pub duration_sum_s: f64,
}

impl Default for SearchGoal {
    /// NDR with CSIT's settings: 0 loss, exceed ratio 0.5, width 0.5 %, 1 s trials, 21 s sum.
    fn default() -> Self {
        Self {
            name: "NDR".into(),
            loss_ratio: 0.0,
            exceed_ratio: 0.5,
            relative_width: 0.005,
            initial_trial_s: 1.0,
            final_trial_s: 1.0,
            duration_sum_s: 21.0,
        }
    }
}

impl SearchGoal {
    /// NDR and PDR (loss ratio `pdr`) with the same timing.
    pub fn ndr_pdr(pdr: f64, timing: &SearchGoal) -> Vec<SearchGoal> {
        vec![
            SearchGoal {
                name: "NDR".into(),
                loss_ratio: 0.0,
                ..timing.clone()
            },
            SearchGoal {
                name: "PDR".into(),
                loss_ratio: pdr,
                ..timing.clone()
            },
        ]
    }

    /// RFC 2544 throughput: zero loss, no exceed allowance, `trial_s` trials only.
    pub fn rfc2544(trial_s: f64, width: f64) -> Self {
        Self {
            name: "RFC2544".into(),
            loss_ratio: 0.0,
            exceed_ratio: 0.0,
            relative_width: width,
            initial_trial_s: trial_s,
            final_trial_s: trial_s,
            duration_sum_s: trial_s,
        }
    }

    fn validate(&self) -> Result<(), String> {
        let bad = |k: &str, v: f64, allowed: &str| {
            Err(format!("goal {}: {k} = {v}; allowed {allowed}", self.name))
        };
        if !(0.0..1.0).contains(&self.loss_ratio) {
            return bad("loss_ratio", self.loss_ratio, "0 <= x < 1");
        }
        if !(0.0..1.0).contains(&self.exceed_ratio) {
            return bad("exceed_ratio", self.exceed_ratio, "0 <= x < 1");
        }
        if !(self.relative_width > 0.0 && self.relative_width < 1.0) {
            return bad("relative_width", self.relative_width, "0 < x < 1");
        }
        if !(self.initial_trial_s > 0.0 && self.initial_trial_s <= self.final_trial_s) {
            return bad(
                "initial_trial_s",
                self.initial_trial_s,
                "0 < x <= final_trial_s",
            );
        }
        if self.duration_sum_s.partial_cmp(&self.final_trial_s) == Some(std::cmp::Ordering::Less)
            || self.duration_sum_s.is_nan()
        {
            return bad("duration_sum_s", self.duration_sum_s, ">= final_trial_s");
        }
        Ok(())
    }

    /// Number of phases.
    fn phases(&self) -> u32 {
        if self.final_trial_s <= self.initial_trial_s {
            1
        } else {
            1 + (self.final_trial_s / self.initial_trial_s).log2().ceil() as u32
        }
    }

    /// Trial duration, width goal and duration sum of phase `p`.
    fn phase(&self, p: u32) -> (f64, f64, f64) {
        let n = self.phases();
        let last = p + 1 >= n;
        let dur = if n == 1 || last {
            self.final_trial_s
        } else {
            self.initial_trial_s
                * (self.final_trial_s / self.initial_trial_s).powf(f64::from(p) / f64::from(n - 1))
        };
        let width = self.relative_width * f64::from(1u32 << (n - 1 - p).min(20));
        let sum = if last { self.duration_sum_s } else { dur };
        (dur, width.min(0.5), sum)
    }
}

/// How every trial of a procedure is run (besides load and duration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrialSettings {
    /// Warm-up before every trial, seconds.
    pub warmup_s: f64,
    /// Drain after every trial, seconds.
    pub drain_s: f64,
    /// Measure latency.
    pub latency: bool,
    /// Relative shortfall of the achieved rate that makes a trial generator-limited.
    pub rate_tolerance: f64,
    /// The traffic.
    pub traffic: GeneratorConfig,
}

impl Default for TrialSettings {
    fn default() -> Self {
        Self {
            warmup_s: 0.0,
            drain_s: 2.0,
            latency: true,
            rate_tolerance: DEFAULT_RATE_TOLERANCE,
            traffic: GeneratorConfig::default(),
        }
    }
}

impl TrialSettings {
    /// The spec of a trial at `rate_pps` for `duration_s`.
    pub fn spec(&self, rate_pps: f64, duration_s: f64, index: u64) -> TrialSpec {
        TrialSpec {
            rate_pps,
            duration_s,
            frames: None,
            warmup_s: self.warmup_s,
            drain_s: self.drain_s,
            traffic: self.traffic.clone(),
            latency: self.latency,
            index,
        }
    }
}

/// The search's load range and limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchConfig {
    /// The goals, searched together over one set of trials.
    pub goals: Vec<SearchGoal>,
    /// Lowest load tried, frames/s (`None`: 0.1 % of line rate).
    pub min_load_pps: Option<f64>,
    /// Highest load tried, frames/s (`None`: line rate).
    pub max_load_pps: Option<f64>,
    /// Give up after this many trials (the result then says `converged: false`).
    pub max_trials: u32,
    /// Run one trial at the maximum load first and discard it (CSIT's warm-up trial).
    pub discard_first: bool,
}

impl Default for SearchConfig {
    /// NDR + PDR 0.5 % with CSIT's timing.
    fn default() -> Self {
        Self {
            goals: SearchGoal::ndr_pdr(0.005, &SearchGoal::default()),
            min_load_pps: None,
            max_load_pps: None,
            max_trials: 300,
            discard_first: false,
        }
    }
}

/// One trial as the search saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// Offered load, frames/s.
    pub load_pps: f64,
    /// Trial duration, seconds.
    pub duration_s: f64,
    /// Goal and phase that asked for it.
    pub goal: usize,
    /// Phase of that goal.
    pub phase: u32,
    /// Loss ratio used for classification (1.0 for generator-limited trials).
    pub loss_ratio: f64,
    /// The trial's result.
    pub result: TrialResult,
}

/// The answer for one goal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoalResult {
    /// The goal.
    pub goal: SearchGoal,
    /// Highest load found to meet the goal (the throughput for this goal), frames/s; `None`
    /// if even the minimum load failed.
    pub lower_pps: Option<f64>,
    /// Lowest load found to fail the goal, frames/s; `None` if the maximum load met it.
    pub upper_pps: Option<f64>,
    /// `lower_pps` in L1 Gb/s.
    pub lower_gbps: Option<f64>,
    /// `upper_pps` in L1 Gb/s.
    pub upper_gbps: Option<f64>,
    /// Final `(upper - lower) / upper` (0 when the maximum load met the goal).
    pub relative_width: f64,
    /// Mean forwarding rate of the full-length trials at the lower bound, frames/s.
    pub conditional_throughput_pps: Option<f64>,
    /// Latency of the last full-length trial at the lower bound.
    pub latency: Option<LatencyStats>,
    /// Where frames were lost at the upper bound (what stops the DUT from going faster).
    pub loss_at_upper: Option<LossAttribution>,
    /// The DUT's named bottleneck at the upper bound, when it models one.
    pub bottleneck: Option<String>,
}

/// The outcome of a search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// The DUT.
    pub dut: String,
    /// Mean frame size searched, FCS included.
    pub frame_size: f64,
    /// Line rate of the link, frames/s at this frame size.
    pub line_rate_pps: f64,
    /// Per goal, in the order given.
    pub goals: Vec<GoalResult>,
    /// Every trial, in order.
    pub trials: Vec<TrialRecord>,
    /// Sum of trial durations, seconds (traffic time, without warm-up and drain).
    pub total_trial_s: f64,
    /// Trials whose generator fell short of the intended load.
    pub generator_limited_trials: u32,
    /// All goals reached their width.
    pub converged: bool,
    /// Every trial was in virtual time: rerunning gives the same answer.
    pub deterministic: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Upper,
    Lower,
    Undecided,
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Per-goal state of the search.
#[derive(Clone, Debug)]
struct GoalState {
    phase: u32,
    expansions: u32,
    hint_upper: Option<f64>,
    hint_lower: Option<f64>,
    done: bool,
}

struct Db {
    records: Vec<TrialRecord>,
}

impl Db {
    fn classify(&self, load: f64, goal: &SearchGoal, dur: f64, sum: f64) -> Option<Class> {
        let (mut hi, mut lo) = (0.0, 0.0);
        for r in &self.records {
            if same(r.load_pps, load) && r.duration_s >= dur * (1.0 - 1e-9) {
                if r.loss_ratio > goal.loss_ratio {
                    hi += r.duration_s;
                } else {
                    lo += r.duration_s;
                }
            }
        }
        if hi + lo == 0.0 {
            return None;
        }
        let total = sum.max(hi + lo);
        let missing = (sum - hi - lo).max(0.0);
        let e = goal.exceed_ratio;
        Some(if hi / total > e {
            Class::Upper
        } else if (hi + missing) / total <= e {
            Class::Lower
        } else {
            Class::Undecided
        })
    }

    fn loads(&self) -> Vec<f64> {
        let mut v: Vec<f64> = Vec::new();
        for r in &self.records {
            if !v.iter().any(|&x| same(x, r.load_pps)) {
                v.push(r.load_pps);
            }
        }
        v
    }

    /// Relevant bounds: lowest upper bound, highest lower bound below it.
    fn bounds(&self, goal: &SearchGoal, dur: f64, sum: f64) -> (Option<f64>, Option<f64>) {
        let loads = self.loads();
        let upper = loads
            .iter()
            .copied()
            .filter(|&l| self.classify(l, goal, dur, sum) == Some(Class::Upper))
            .reduce(f64::min);
        let lower = loads
            .iter()
            .copied()
            .filter(|&l| {
                self.classify(l, goal, dur, sum) == Some(Class::Lower)
                    && upper.is_none_or(|u| l < u)
            })
            .reduce(f64::max);
        (upper, lower)
    }

    fn last_at(&self, load: f64, dur: f64) -> Option<&TrialRecord> {
        self.records
            .iter()
            .rev()
            .find(|r| same(r.load_pps, load) && r.duration_s >= dur * (1.0 - 1e-9))
    }
}

/// Runs an MLRsearch-style search for all goals of `cfg` (see the module docs).
pub fn mlr_search(
    dut: &mut dyn Dut,
    settings: &TrialSettings,
    cfg: &SearchConfig,
    progress: &mut dyn FnMut(&TrialRecord),
) -> Result<SearchResult, DutError> {
    for g in &cfg.goals {
        g.validate().map_err(DutError)?;
    }
    if cfg.goals.is_empty() {
        return Err(DutError("a search needs at least one goal".into()));
    }
    let frame_size = settings.traffic.mean_frame_size();
    let line_pps = dut.line_rate_pps(frame_size);
    let max = cfg.max_load_pps.unwrap_or(line_pps).min(line_pps);
    let min = cfg.min_load_pps.unwrap_or(line_pps * 0.001).min(max);
    let mut db = Db {
        records: Vec::new(),
    };
    let mut states: Vec<GoalState> = cfg
        .goals
        .iter()
        .map(|_| GoalState {
            phase: 0,
            expansions: 0,
            hint_upper: None,
            hint_lower: None,
            done: false,
        })
        .collect();
    let mut index = 0u64;
    let mut deterministic = dut.deterministic();
    if cfg.discard_first {
        let g = &cfg.goals[0];
        let r = dut.trial(&settings.spec(max, g.initial_trial_s, index))?;
        deterministic &= r.deterministic;
        index += 1;
    }
    let mut converged = true;
    // The first goal with work left.
    'search: while let Some(gi) = states.iter().position(|s| !s.done) {
        let goal = &cfg.goals[gi];
        let st = &mut states[gi];
        let (dur, width, sum) = goal.phase(st.phase);
        let (upper, lower) = db.bounds(goal, dur, sum);
        let next = match (upper, lower) {
            (None, Some(l)) if same(l, max) || l >= max => {
                // Settled at the maximum load: confirm it with full-length trials, skipping the
                // intermediate phases.
                if st.phase + 1 >= goal.phases() {
                    st.done = true;
                } else {
                    st.phase = goal.phases() - 1;
                    st.hint_upper = None;
                    st.hint_lower = Some(l);
                }
                continue 'search;
            }
            (None, lower) => {
                let hint = st.hint_upper.filter(|&h| {
                    lower.is_none_or(|l| h > l)
                        && db.classify(h, goal, dur, sum) != Some(Class::Lower)
                });
                match (hint, lower) {
                    (Some(h), _) => h,
                    (None, None) => max,
                    (None, Some(l)) => {
                        st.expansions += 1;
                        (l * (1.0 + width * f64::from(1u32 << st.expansions.min(20)))).min(max)
                    }
                }
            }
            (Some(u), None) => {
                if same(u, min) || u <= min {
                    if st.phase + 1 >= goal.phases() {
                        st.done = true;
                    } else {
                        st.phase = goal.phases() - 1;
                        st.hint_upper = Some(u);
                        st.hint_lower = None;
                    }
                    continue 'search;
                }
                let hint = st
                    .hint_lower
                    .filter(|&h| h < u && db.classify(h, goal, dur, sum) != Some(Class::Upper));
                match hint {
                    Some(h) => h,
                    None => {
                        let fr = db.last_at(u, dur).map_or(u, |r| r.result.forwarding_pps());
                        let step = u
                            * (1.0 - (width * f64::from(1u32 << st.expansions.min(20))).min(0.99));
                        st.expansions += 1;
                        fr.min(step).max(min)
                    }
                }
            }
            (Some(u), Some(l)) => {
                st.expansions = 0;
                let w = (u - l) / u;
                if w <= width * (1.0 + 1e-9) {
                    if st.phase + 1 >= goal.phases() {
                        st.done = true;
                    } else {
                        st.phase += 1;
                        st.hint_upper = Some(u);
                        st.hint_lower = Some(l);
                    }
                    continue 'search;
                }
                ((l + u) / 2.0).max(u * (1.0 - width))
            }
        };
        if db.records.len() as u32 >= cfg.max_trials {
            converged = false;
            break;
        }
        let spec = settings.spec(next, dur, index);
        index += 1;
        let result = dut.trial(&spec)?;
        deterministic &= result.deterministic;
        let limited = result.generator_limited(settings.rate_tolerance);
        let rec = TrialRecord {
            load_pps: next,
            duration_s: dur,
            goal: gi,
            phase: st.phase,
            loss_ratio: if limited { 1.0 } else { result.loss_ratio() },
            result,
        };
        progress(&rec);
        db.records.push(rec);
    }

    let goals = cfg
        .goals
        .iter()
        .map(|g| {
            let (dur, _, sum) = g.phase(g.phases() - 1);
            let (upper, lower) = db.bounds(g, dur, sum);
            let full_at = |load: f64| -> Vec<&TrialRecord> {
                db.records
                    .iter()
                    .filter(|r| same(r.load_pps, load) && r.duration_s >= dur * (1.0 - 1e-9))
                    .collect()
            };
            let cond = lower.map(|l| {
                let t = full_at(l);
                t.iter().map(|r| r.result.forwarding_pps()).sum::<f64>() / t.len().max(1) as f64
            });
            let latency = lower.and_then(|l| full_at(l).last().and_then(|r| r.result.latency));
            let at_upper = upper.and_then(|u| full_at(u).last().map(|r| &r.result));
            GoalResult {
                goal: g.clone(),
                lower_pps: lower,
                upper_pps: upper,
                lower_gbps: lower.map(|l| gbps(l, frame_size)),
                upper_gbps: upper.map(|u| gbps(u, frame_size)),
                relative_width: match (upper, lower) {
                    (Some(u), Some(l)) => (u - l) / u,
                    _ => 0.0,
                },
                conditional_throughput_pps: cond,
                latency,
                loss_at_upper: at_upper.map(|r| r.attribution.clone()),
                bottleneck: at_upper.and_then(|r| r.bottleneck.clone()),
            }
        })
        .collect();
    Ok(SearchResult {
        dut: dut.name(),
        frame_size,
        line_rate_pps: line_pps,
        goals,
        total_trial_s: db.records.iter().map(|r| r.duration_s).sum(),
        generator_limited_trials: db
            .records
            .iter()
            .filter(|r| r.loss_ratio >= 1.0 && r.result.generator_limited(settings.rate_tolerance))
            .count() as u32,
        trials: db.records,
        converged,
        deterministic,
    })
}

/// The result of the classic RFC 2544 throughput search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThroughputResult {
    /// Highest zero-loss load found, frames/s (`None`: loss even at the minimum).
    pub throughput_pps: Option<f64>,
    /// The same in L1 Gb/s.
    pub throughput_gbps: Option<f64>,
    /// Lowest load with loss, frames/s (`None`: line rate was loss-free).
    pub lossy_pps: Option<f64>,
    /// Every trial: (load, result).
    pub trials: Vec<(f64, TrialResult)>,
}

/// RFC 2544 §26.1: binary search for the highest zero-loss rate between `min_pps` and the line
/// rate, trials of `trial_s`, until `(hi - lo) / hi <= resolution`.
pub fn rfc2544_throughput(
    dut: &mut dyn Dut,
    settings: &TrialSettings,
    trial_s: f64,
    resolution: f64,
    min_pps: f64,
) -> Result<ThroughputResult, DutError> {
    let frame_size = settings.traffic.mean_frame_size();
    let max = dut.line_rate_pps(frame_size);
    let mut trials = Vec::new();
    let mut run = |load: f64, trials: &mut Vec<(f64, TrialResult)>| -> Result<bool, DutError> {
        let r = dut.trial(&settings.spec(load, trial_s, trials.len() as u64))?;
        let ok = r.lost == 0 && !r.generator_limited(settings.rate_tolerance);
        trials.push((load, r));
        Ok(ok)
    };
    let (lo, hi) = if run(max, &mut trials)? {
        (Some(max), None)
    } else {
        let mut l = min_pps.min(max);
        if !run(l, &mut trials)? {
            (None, Some(l))
        } else {
            let mut h = max;
            while (h - l) / h > resolution {
                let mid = (l + h) / 2.0;
                if run(mid, &mut trials)? {
                    l = mid;
                } else {
                    h = mid;
                }
            }
            (Some(l), Some(h))
        }
    };
    Ok(ThroughputResult {
        throughput_pps: lo,
        throughput_gbps: lo.map(|l| gbps(l, frame_size)),
        lossy_pps: hi,
        trials,
    })
}

/// One step of the frame loss rate test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossPoint {
    /// Offered load in percent of line rate.
    pub load_percent: f64,
    /// Offered load, frames/s.
    pub load_pps: f64,
    /// `(sent - received) / sent`.
    pub loss_ratio: f64,
    /// The trial.
    pub result: TrialResult,
}

/// RFC 2544 §26.3: loss ratio at 100 % of line rate, then `step_percent` lower each time, until
/// two successive trials without loss (or 0 %).
pub fn frame_loss_rate(
    dut: &mut dyn Dut,
    settings: &TrialSettings,
    trial_s: f64,
    step_percent: f64,
) -> Result<Vec<LossPoint>, DutError> {
    let frame_size = settings.traffic.mean_frame_size();
    let line = dut.line_rate_pps(frame_size);
    let mut out: Vec<LossPoint> = Vec::new();
    let mut pct = 100.0;
    let mut clean_run = 0;
    while pct > 1e-9 && clean_run < 2 {
        let load = line * pct / 100.0;
        let r = dut.trial(&settings.spec(load, trial_s, out.len() as u64))?;
        if r.lost == 0 {
            clean_run += 1;
        } else {
            clean_run = 0;
        }
        out.push(LossPoint {
            load_percent: pct,
            load_pps: load,
            loss_ratio: r.loss_ratio(),
            result: r,
        });
        pct -= step_percent;
    }
    Ok(out)
}

/// The result of the back-to-back test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackToBack {
    /// Longest loss-free burst of each repetition, frames.
    pub bursts: Vec<u64>,
    /// Their mean.
    pub mean_frames: f64,
    /// True if some repetition reached `max_frames` without loss (the DUT absorbs any burst
    /// tested).
    pub reached_max: bool,
}

/// RFC 2544 §26.4: the longest burst of frames at line rate (minimum gap) that the DUT forwards
/// without loss, by binary search on the length in `1..=max_frames`, `reps` times.
pub fn back_to_back(
    dut: &mut dyn Dut,
    settings: &TrialSettings,
    max_frames: u64,
    reps: u32,
) -> Result<BackToBack, DutError> {
    let frame_size = settings.traffic.mean_frame_size();
    let line = dut.line_rate_pps(frame_size);
    let mut bursts = Vec::new();
    let mut index = 0;
    let mut reached_max = false;
    for _ in 0..reps.max(1) {
        let mut burst = |n: u64| -> Result<bool, DutError> {
            let mut spec = settings.spec(line, 0.0, index);
            spec.frames = Some(n);
            index += 1;
            let r = dut.trial(&spec)?;
            Ok(r.lost == 0)
        };
        let best = if burst(max_frames)? {
            reached_max = true;
            max_frames
        } else {
            let (mut lo, mut hi) = (0u64, max_frames);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if burst(mid)? {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        bursts.push(best);
    }
    let mean = bursts.iter().sum::<u64>() as f64 / bursts.len() as f64;
    Ok(BackToBack {
        bursts,
        mean_frames: mean,
        reached_max,
    })
}

/// Latency at one load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyResult {
    /// Offered load, frames/s.
    pub load_pps: f64,
    /// The calibration applied.
    pub calibration: Calibration,
    /// Each repetition, calibrated.
    pub runs: Vec<LatencyStats>,
    /// Their element-wise mean.
    pub mean: Option<LatencyStats>,
    /// Frames lost over all repetitions (latency at a lossy load deserves a warning).
    pub lost: u64,
}

/// RFC 2544 §26.2: latency at `load_pps`, `reps` trials of `trial_s`, calibrated.
pub fn latency_at(
    dut: &mut dyn Dut,
    settings: &TrialSettings,
    load_pps: f64,
    trial_s: f64,
    reps: u32,
    calibration: Calibration,
) -> Result<LatencyResult, DutError> {
    let mut s = settings.clone();
    s.latency = true;
    let mut runs = Vec::new();
    let mut lost = 0;
    for i in 0..reps.max(1) {
        let r = dut.trial(&s.spec(load_pps, trial_s, u64::from(i)))?;
        lost += r.lost;
        if let Some(l) = r.latency {
            runs.push(calibration.apply(&l));
        }
    }
    Ok(LatencyResult {
        load_pps,
        calibration,
        mean: LatencyStats::average(&runs),
        runs,
        lost,
    })
}

/// Measures the generator's own latency with a loopback DUT (e.g.
/// [`crate::testdut::SimDutConfig::loopback`], or a real cable) at `load_pps`.
pub fn calibrate(
    dut: &mut dyn Dut,
    settings: &TrialSettings,
    load_pps: f64,
    trial_s: f64,
) -> Result<Calibration, DutError> {
    let mut s = settings.clone();
    s.latency = true;
    let r = dut.trial(&s.spec(load_pps, trial_s, 0))?;
    r.latency
        .map(|l| Calibration::from_loopback(&l))
        .ok_or_else(|| {
            DutError("loopback trial measured no latency (no timestamped frame came back)".into())
        })
}
