//! [`SimDut`]: an in-process DUT in virtual time, so the trial contract, the searches and the
//! reports are tested (and demonstrated) without the virtual NIC, and every answer is known in
//! advance.
//!
//! Real frames flow: the generator builds each frame (timestamped with its intended departure
//! time) into a slot of a preallocated ring, the DUT model decides its fate, and frames leave in
//! time order into a real [`CheckingSink`], so loss, duplicates, reordering and latency are
//! counted by the same code that counts them for the virtual NIC.
//!
//! The model, per frame, in virtual picoseconds:
//!
//! 1. **Generator port**: the frame departs at its intended time, or later if the port is still
//!    busy (line rate, or `gen_max_pps` for a deliberately slow generator). A frame that would
//!    leave more than `gen_queue` frame times late is dropped *by the generator*
//!    ([`TrialResult::gen_unsent`]), never counted as DUT loss.
//! 2. **DUT capacity**: a single FIFO server with service time `max(1 / capacity_pps,
//!    wire_bits / capacity_bps)` and room for `queue_frames` waiting frames; arrivals beyond it
//!    are tail-dropped (stage `queue_full`).
//! 3. **Policies**: drop every `drop_every`-th arriving frame (stage `policy`), duplicate every
//!    `dup_every`-th, swap every `reorder_every`-th with its successor; `noise_prob`: with this
//!    probability per trial, a burst of `noise_frames` consecutive frames is lost (stage
//!    `noise`), seeded by the trial index, as an interrupt or a neighbour would.
//! 4. **Latency**: departure from the server plus `latency_ns`; the generator's own
//!    `gen_latency_ns` (stamp to wire) is added to every frame so calibration has something to
//!    remove.
//!
//! After the last frame leaves the generator, frames still in the DUT are counted as in flight
//! ([`TrialResult::in_flight_at_stop`]); those arriving within `drain_s` are delivered normally,
//! later ones are `late` (and lost).

use crate::dist::Rng;
use crate::generator::{Generator, GeneratorConfig};
use crate::latency::LatencyHistogram;
use crate::rate::{Pacer, Rate, wire_bits};
use crate::sink::CheckingSink;
use crate::trial::{
    Dut, DutError, DutInfo, LossAttribution, TrialResult, TrialSpec, WARMUP_STREAM, gbps,
};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Largest number of frames the model keeps in flight at once.
pub const MAX_IN_FLIGHT: usize = 1 << 20;

/// The behaviour of a [`SimDut`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimDutConfig {
    /// Line rate of the link, L1 bits/s.
    pub line_bps: f64,
    /// Frames/s the DUT forwards at most (`None`: unlimited).
    pub capacity_pps: Option<f64>,
    /// L1 bits/s the DUT forwards at most (`None`: unlimited), a bandwidth-bound DUT.
    pub capacity_bps: Option<f64>,
    /// Frames that can wait in the DUT's queue.
    pub queue_frames: u64,
    /// Fixed latency through the DUT, ns.
    pub latency_ns: u64,
    /// Drop every k-th arriving frame (0: never).
    pub drop_every: u64,
    /// Duplicate every k-th arriving frame (0: never).
    pub dup_every: u64,
    /// Swap every k-th arriving frame with the next one (0: never).
    pub reorder_every: u64,
    /// Probability per trial of a burst loss.
    pub noise_prob: f64,
    /// Frames lost in a noise burst.
    pub noise_frames: u64,
    /// Spoil every k-th trial (by trial index) with a noise burst, deterministically (0: never).
    pub noise_every: u64,
    /// Seed of the noise.
    pub seed: u64,
    /// The generator's own maximum rate, frames/s (`None`: line rate).
    pub gen_max_pps: Option<f64>,
    /// Frames the generator's port may fall behind before it drops.
    pub gen_queue: u64,
    /// The generator's own latency from stamp to wire, ns.
    pub gen_latency_ns: u64,
    /// Bypass the DUT entirely: a direct loopback for calibration.
    pub loopback: bool,
}

impl Default for SimDutConfig {
    /// A perfect 100 Gb/s DUT with 1 µs latency and a 64-frame queue.
    fn default() -> Self {
        Self {
            line_bps: 100e9,
            capacity_pps: None,
            capacity_bps: None,
            queue_frames: 64,
            latency_ns: 1_000,
            drop_every: 0,
            dup_every: 0,
            reorder_every: 0,
            noise_prob: 0.0,
            noise_frames: 0,
            noise_every: 0,
            seed: 1,
            gen_max_pps: None,
            gen_queue: 1024,
            gen_latency_ns: 0,
            loopback: false,
        }
    }
}

/// Drop counters of the model, by stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Drops {
    queue_full: u64,
    policy: u64,
    noise: u64,
    sim_ring_full: u64,
}

/// A frame inside the model.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    slot: usize,
    len: usize,
    rx_ps: u64,
    dup: bool,
    swap: bool,
}

/// The in-process test DUT (see the module docs).
#[derive(Debug)]
pub struct SimDut {
    cfg: SimDutConfig,
    trials: u64,
}

impl SimDutConfig {
    /// Checks every rate and ratio: errors name the key and the allowed range.
    pub fn validate(&self) -> Result<(), String> {
        let positive = |k: &str, v: f64| {
            if v > 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(format!(
                    "sim DUT: {k} = {v}; allowed a finite number > 0 (leave it out for no limit)"
                ))
            }
        };
        positive("line_bps", self.line_bps)?;
        for (k, v) in [
            ("capacity_pps", self.capacity_pps),
            ("capacity_bps", self.capacity_bps),
            ("gen_max_pps", self.gen_max_pps),
        ] {
            if let Some(v) = v {
                positive(k, v)?;
            }
        }
        if !(0.0..=1.0).contains(&self.noise_prob) {
            return Err(format!(
                "sim DUT: noise_prob = {}; allowed 0 <= x <= 1",
                self.noise_prob
            ));
        }
        Ok(())
    }
}

impl SimDut {
    /// A DUT with behaviour `cfg`.
    pub fn new(cfg: SimDutConfig) -> Self {
        Self { cfg, trials: 0 }
    }

    /// The behaviour.
    pub fn config(&self) -> &SimDutConfig {
        &self.cfg
    }

    /// Trials run so far.
    pub fn trials(&self) -> u64 {
        self.trials
    }
}

/// State of one trial's simulation.
struct Sim<'a> {
    cfg: &'a SimDutConfig,
    ring: Vec<u8>,
    slot_len: usize,
    slots: usize,
    write: usize,
    queue: VecDeque<InFlight>,
    sink: CheckingSink,
    /// Generator port: when it is free again (ps).
    gen_free: u64,
    /// DUT server: when it is free again (ps).
    server_free: u64,
    arrivals: u64,
    drops: Drops,
    noise_at: Option<(u64, u64)>,
    last_departure: u64,
    first_departure: Option<u64>,
    sent: u64,
    unsent: u64,
}

impl Sim<'_> {
    /// Delivers every in-flight frame with `rx <= now` to the sink, in time order.
    fn deliver_until(&mut self, now: u64, force: bool) {
        while let Some(&f) = self.queue.front() {
            if f.rx_ps > now {
                break;
            }
            if f.swap {
                // Deliver the successor first, at its own time; wait for it if not there yet.
                match self.queue.get(1).copied() {
                    Some(next) if next.rx_ps <= now => {
                        self.queue.pop_front();
                        self.queue.pop_front();
                        self.emit(next, next.rx_ps);
                        self.emit(f, next.rx_ps);
                    }
                    Some(_) => break,
                    None if force => {
                        self.queue.pop_front();
                        self.emit(f, f.rx_ps);
                    }
                    None => break,
                }
            } else {
                self.queue.pop_front();
                self.emit(f, f.rx_ps);
            }
        }
    }

    fn emit(&mut self, f: InFlight, at_ps: u64) {
        let bytes = &self.ring[f.slot * self.slot_len..][..f.len];
        self.sink.check_at(bytes, at_ps / 1000);
        if f.dup {
            self.sink.check_at(bytes, at_ps / 1000);
        }
    }

    /// Runs `frames` frames of `generator` paced by `pacer` from `t0`; returns the end time.
    fn run(
        &mut self,
        generator: &mut Generator,
        pacer: &mut Pacer,
        t0: u64,
        rate_pps: f64,
        count: bool,
    ) {
        let gen_interval = self
            .cfg
            .gen_max_pps
            .map_or(0, |p| (1e12 / p).round() as u64);
        let gen_lat_ps = self.cfg.gen_latency_ns * 1000;
        let lat_ps = self.cfg.latency_ns * 1000;
        let nominal_ps = (1e12 / rate_pps).round() as u64;
        while !generator.done() {
            let size = generator.next_frame_size();
            let intended = t0 + pacer.next_ps();
            pacer.advance(size);
            let wire_ps = (wire_bits(size) as f64 * 1e12 / self.cfg.line_bps).round() as u64;
            let depart = intended.max(self.gen_free);
            let slot = self.write;
            let buf = &mut self.ring[slot * self.slot_len..][..self.slot_len];
            let Some(len) = generator.produce_at(buf, intended / 1000) else {
                break;
            };
            // Generator port: drop instead of sending too late.
            let step = wire_ps.max(gen_interval);
            if depart > intended + self.cfg.gen_queue * step {
                if count {
                    self.unsent += 1;
                }
                continue;
            }
            self.gen_free = depart + step;
            if count {
                self.sent += 1;
                self.first_departure.get_or_insert(depart);
                self.last_departure = depart + step.max(nominal_ps);
            }
            let arrive = depart + gen_lat_ps;
            self.deliver_until(arrive, false);
            let n = self.arrivals;
            self.arrivals += 1;
            let cfg = self.cfg;
            let (rx, dup, swap) = if cfg.loopback {
                (arrive, false, false)
            } else {
                let service = {
                    let a = cfg.capacity_pps.map_or(0.0, |c| 1e12 / c);
                    let b = cfg
                        .capacity_bps
                        .map_or(0.0, |c| wire_bits(size) as f64 * 1e12 / c);
                    a.max(b).round() as u64
                };
                let k = n + 1;
                if count
                    && let Some((from, to)) = self.noise_at
                    && (from..to).contains(&n)
                {
                    self.drops.noise += 1;
                    continue;
                }
                let start = arrive.max(self.server_free);
                if service > 0 && start - arrive > cfg.queue_frames * service {
                    if count {
                        self.drops.queue_full += 1;
                    }
                    continue;
                }
                self.server_free = start + service;
                if cfg.drop_every > 0 && k.is_multiple_of(cfg.drop_every) {
                    if count {
                        self.drops.policy += 1;
                    }
                    continue;
                }
                (
                    self.server_free + lat_ps,
                    cfg.dup_every > 0 && k.is_multiple_of(cfg.dup_every),
                    cfg.reorder_every > 0 && k.is_multiple_of(cfg.reorder_every),
                )
            };
            if self.queue.len() == self.slots {
                // The model's own ring is full: cannot happen with the sizing in `trial`.
                self.drops.sim_ring_full += 1;
                continue;
            }
            self.queue.push_back(InFlight {
                slot,
                len,
                rx_ps: rx,
                dup,
                swap,
            });
            self.write = (self.write + 1) % self.slots;
        }
    }
}

impl Dut for SimDut {
    fn name(&self) -> String {
        let c = &self.cfg;
        let mut parts = vec!["sim".to_string()];
        if let Some(p) = c.capacity_pps {
            parts.push(format!("{:.3}Mpps", p / 1e6));
        }
        if let Some(b) = c.capacity_bps {
            parts.push(format!("{:.3}Gbps", b / 1e9));
        }
        for (k, v) in [
            ("drop", c.drop_every),
            ("dup", c.dup_every),
            ("reorder", c.reorder_every),
        ] {
            if v > 0 {
                parts.push(format!("{k}/{v}"));
            }
        }
        if c.noise_prob > 0.0 {
            parts.push(format!("noise{}", c.noise_prob));
        }
        if c.noise_every > 0 {
            parts.push(format!("noise/{}", c.noise_every));
        }
        if c.loopback {
            parts.push("loopback".into());
        }
        parts.join("-")
    }

    fn line_rate_bps(&self) -> f64 {
        self.cfg.line_bps
    }

    fn deterministic(&self) -> bool {
        true
    }

    fn info(&self) -> DutInfo {
        let c = &self.cfg;
        let cap = match (c.capacity_pps, c.capacity_bps) {
            (None, None) => "unlimited".to_string(),
            (p, b) => [
                p.map(|p| format!("{:.3} Mpps", p / 1e6)),
                b.map(|b| format!("{:.3} Gb/s", b / 1e9)),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" and "),
        };
        DutInfo {
            clock: "virtual".into(),
            profile: None,
            mode: None,
            workers: None,
            cpu_cost: format!("test DUT model: capacity {cap} (no NF code runs)"),
        }
    }

    fn repeatable(&self) -> bool {
        // Noise is seeded by the trial index: only a noiseless model repeats itself.
        self.cfg.noise_prob == 0.0 && self.cfg.noise_every == 0
    }

    fn trial(&mut self, spec: &TrialSpec) -> Result<TrialResult, DutError> {
        self.trials += 1;
        let cfg = &self.cfg;
        if !(spec.rate_pps > 0.0 && spec.rate_pps.is_finite()) {
            return Err(DutError(format!(
                "rate {} pps is not a positive rate",
                spec.rate_pps
            )));
        }
        let intended = spec.intended_frames();
        let mut traffic = GeneratorConfig {
            count: Some(intended),
            timestamps: true,
            ..spec.traffic.clone()
        };
        if traffic.stream == WARMUP_STREAM {
            traffic.stream = 0;
        }
        let stream = traffic.stream;
        let mut generator = Generator::new(traffic.clone()).map_err(|e| DutError(e.to_string()))?;
        let mut warm = spec.warmup_generator(&traffic)?;

        // Ring sizing: everything that can be in flight at once.
        let min_gap_ps = (1e12 / spec.rate_pps).max(1.0);
        let lat = (cfg.latency_ns + cfg.gen_latency_ns) as f64 * 1000.0;
        let slots = ((cfg.queue_frames as f64 + 4.0 + lat / min_gap_ps) * 2.0 + 64.0)
            .min(MAX_IN_FLIGHT as f64) as usize;
        let slot_len = traffic.generated_len();
        let mut rng = Rng::new(cfg.seed ^ spec.index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let spoil = (cfg.noise_prob > 0.0 && rng.next_f64() < cfg.noise_prob)
            || (cfg.noise_every > 0 && (spec.index + 1).is_multiple_of(cfg.noise_every));
        let noise_at = spoil.then(|| {
            let from = rng.next_u64() % intended.max(1);
            (from, from + cfg.noise_frames)
        });
        let mut sim = Sim {
            cfg,
            ring: vec![0u8; slots * slot_len],
            slot_len,
            slots,
            write: 0,
            queue: VecDeque::with_capacity(slots),
            sink: CheckingSink::for_generator(&traffic),
            gen_free: 0,
            server_free: 0,
            arrivals: 0,
            drops: Drops::default(),
            noise_at: None,
            last_departure: 0,
            first_departure: None,
            sent: 0,
            unsent: 0,
        };
        sim.sink.set_latency(spec.latency);
        let mut pacer = Pacer::new(Rate::Pps(spec.rate_pps), cfg.line_bps);
        if let Some(w) = &mut warm {
            sim.run(w, &mut pacer, 0, spec.rate_pps, false);
        }
        let t0 = pacer.next_ps();
        // Noise positions count arrivals of the measured traffic.
        sim.noise_at = noise_at.map(|(a, b)| (a + sim.arrivals, b + sim.arrivals));
        sim.run(&mut generator, &mut pacer, t0, spec.rate_pps, true);
        let stop = sim.last_departure.max(t0);
        // Stop: what has not arrived yet is in flight, not lost.
        sim.deliver_until(stop, false);
        let in_flight = sim.queue.len() as u64;
        let deadline = stop + (spec.drain_s * 1e12) as u64;
        sim.deliver_until(deadline, true);
        let late = sim.queue.iter().filter(|f| f.rx_ps > deadline).count() as u64;
        sim.queue.clear();
        sim.sink.publish_all();
        let counters = sim.sink.counters();
        let st = counters.stream(stream);
        let latency = sim
            .sink
            .latency_histogram(stream)
            .and_then(LatencyHistogram::stats);
        let lost = sim.sent.saturating_sub(st.unique);
        let sending_ps = sim
            .first_departure
            .map_or(0, |f| sim.last_departure.saturating_sub(f));
        let achieved_pps = if sending_ps == 0 {
            0.0
        } else {
            sim.sent as f64 * 1e12 / sending_ps as f64
        };
        let d = sim.drops;
        let frame_size = traffic.mean_frame_size();
        Ok(TrialResult {
            rate_pps: spec.rate_pps,
            rate_gbps: gbps(spec.rate_pps, frame_size),
            frame_size,
            duration_s: spec.intended_duration_s(),
            intended,
            sent: sim.sent,
            gen_unsent: sim.unsent,
            achieved_pps,
            received: st.unique,
            duplicates: st.duplicates,
            reordered: st.reordered,
            payload_mismatches: st.payload_mismatches,
            lost,
            in_flight_at_stop: in_flight,
            late,
            latency: if spec.latency { latency } else { None },
            attribution: LossAttribution::new(
                lost,
                [
                    ("queue_full".to_string(), d.queue_full),
                    ("policy".to_string(), d.policy),
                    ("noise".to_string(), d.noise),
                    ("sim_ring_full".to_string(), d.sim_ring_full),
                    ("late".to_string(), late),
                ],
            ),
            bottleneck: (d.queue_full > 0).then(|| "capacity".to_string()),
            deterministic: true,
            dut: serde_json::json!({
                "name": self.name(),
                "drops": {"queue_full": d.queue_full, "policy": d.policy, "noise": d.noise},
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(rate: f64, frames: u64) -> TrialSpec {
        TrialSpec {
            rate_pps: rate,
            frames: Some(frames),
            drain_s: 0.01,
            traffic: GeneratorConfig {
                frame_size: 64,
                flows: 16,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn perfect_dut_delivers_everything_with_its_latency() {
        let mut d = SimDut::new(SimDutConfig::default());
        let r = d.trial(&spec(1e6, 10_000)).unwrap();
        assert_eq!(
            (r.sent, r.received, r.lost, r.duplicates, r.reordered),
            (10_000, 10_000, 0, 0, 0)
        );
        assert_eq!(r.gen_unsent, 0);
        let l = r.latency.unwrap();
        assert_eq!(l.count, 10_000);
        assert_eq!((l.min_ns, l.max_ns), (1_000, 1_000));
        assert!((r.achieved_pps - 1e6).abs() < 1.0, "{}", r.achieved_pps);
        assert!(r.deterministic);
    }

    #[test]
    fn policies_give_exact_counts() {
        let mut d = SimDut::new(SimDutConfig {
            drop_every: 10,
            dup_every: 7,
            reorder_every: 13,
            ..Default::default()
        });
        let r = d.trial(&spec(1e6, 1000)).unwrap();
        assert_eq!(r.lost, 100);
        assert_eq!(r.attribution.stages["policy"], 100);
        assert_eq!(r.attribution.unattributed, 0);
        // Duplicated: multiples of 7 not dropped (not multiples of 70): 142 - 14.
        assert_eq!(r.duplicates, 128);
        // Swapped with the next frame in flight: multiples of 13 not dropped (not multiples of
        // 130): 76 - 7.
        assert_eq!(r.reordered, 69);
        assert_eq!(r.received, 900);
    }
}
