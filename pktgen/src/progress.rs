//! Progress of an NDR/PDR search for people waiting on it: on a terminal an `indicatif` bar on
//! stderr with the goal, the trial count, the phase, the current bounds, the elapsed time and an
//! ETA; when stderr is not a terminal (piped into a log) one line per finished goal, so a log
//! shows that the search moves without filling up with a line per trial.
//!
//! The ETA comes from how far the search is: per goal, the finished phases plus the share of the
//! current phase's width already narrowed (on a log scale, as bisection halves the width), over
//! the number of phases; goals done count whole. `indicatif` turns that fraction and the elapsed
//! time into the estimate, so it is rough early on and firm near the end.

use std::io::IsTerminal;
use std::time::Instant;

use crate::search::SearchEvent;

/// Ticks of the bar for a whole search.
const TICKS: u64 = 1000;

/// Shows the progress of one search (see the module docs).
pub struct SearchProgress {
    label: String,
    goals: usize,
    bar: Option<indicatif::ProgressBar>,
    quiet: bool,
    start: Instant,
    /// Fraction done per goal.
    done: Vec<f64>,
}

impl SearchProgress {
    /// Progress of a search over `goals` goals; `label` names what is searched (e.g. `"64 B"`);
    /// `quiet` shows nothing.
    pub fn new(label: &str, goals: usize, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(TICKS);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:20}] ETA {eta} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            b
        });
        Self {
            label: label.to_string(),
            goals: goals.max(1),
            bar,
            quiet,
            start: Instant::now(),
            done: vec![0.0; goals.max(1)],
        }
    }

    /// Takes one event of the search.
    pub fn event(&mut self, e: &SearchEvent) {
        match *e {
            SearchEvent::Trial {
                record,
                count,
                goal,
                phase,
                bounds,
                target_width,
            } => {
                let g = record.goal.min(self.goals - 1);
                let width = match bounds {
                    (Some(l), Some(u)) if u > 0.0 => (u - l) / u,
                    _ => 1.0,
                };
                // Log-scale share of the phase's narrowing: from width 1 down to the target.
                let within = if width <= target_width {
                    1.0
                } else {
                    (1.0 - width.ln() / target_width.ln()).clamp(0.0, 1.0)
                };
                let frac = (f64::from(phase.0) + within) / f64::from(phase.1.max(1));
                self.done[g] = self.done[g].max(frac.min(0.99));
                if let Some(b) = &self.bar {
                    let f =
                        |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{:.4}", x / 1e6));
                    b.set_position((self.fraction() * TICKS as f64) as u64);
                    b.set_message(format!(
                        "{}: {goal} trial {count} (phase {}/{}, {} s at {:.4} Mpps{}), bounds [{}, {}] Mpps",
                        self.label,
                        phase.0 + 1,
                        phase.1,
                        record.duration_s,
                        record.load_pps / 1e6,
                        if record.reused { ", reused" } else { "" },
                        f(bounds.0),
                        f(bounds.1),
                    ));
                }
            }
            SearchEvent::GoalDone {
                index,
                goal,
                bounds,
                count,
            } => {
                if let Some(d) = self.done.get_mut(index) {
                    *d = 1.0;
                }
                let f = |v: Option<f64>| {
                    v.map_or("none".to_string(), |x| format!("{:.4} Mpps", x / 1e6))
                };
                let line = format!(
                    "{}: {} done after {count} trials in {:.1} s: lower bound {}, upper bound {}",
                    self.label,
                    goal.name,
                    self.start.elapsed().as_secs_f64(),
                    f(bounds.0),
                    f(bounds.1),
                );
                match &self.bar {
                    Some(b) => {
                        b.set_position((self.fraction() * TICKS as f64) as u64);
                        b.println(line);
                    }
                    None if !self.quiet => eprintln!("{line}"),
                    None => {}
                }
            }
        }
    }

    /// Share of the search done, 0..=1.
    pub fn fraction(&self) -> f64 {
        self.done.iter().sum::<f64>() / self.done.len() as f64
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
