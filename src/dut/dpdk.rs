//! A DUT behind real DPDK ports (feature `dpdk`): pktgen as a tester, transmitting on the
//! config's first port and receiving on its last one (the same port when there is one, e.g. a
//! `net_ring` loopback), with the device under test on the wire between them.
//!
//! A trial sends exactly the spec's frames at its rate (the pacer of `pktgen dpdk-gen`, the
//! transmit loop on the first `dpdk.worker_cores` core), while the calling thread receives and
//! checks every frame with pktgen's checking sink (loss, duplicates, reordering, payload,
//! latency from the departure timestamps). Counters are read only after the transmitter stopped
//! and the drain window passed (or every frame arrived): frames in flight at the stop are not
//! lost. Each trial sends on a stream id of its own, so a straggler of an earlier trial is never
//! counted as a frame of this one, and the receive queue is emptied before each trial.
//!
//! Loss is attributed to the tester's own receive port where its counters show drops
//! (`tester_rx_missed`, `tester_rx_nombuf`, `tester_rx_errors`: a full Rx ring or an empty pool
//! on our side, not the DUT's); the rest stays unattributed (the DUT's). Frames the generator
//! could not hand to its Tx ring are `gen_unsent`, never loss. Trials run in wall-clock time, so
//! the DUT is not deterministic.
//!
//! A tester port whose device resets during a trial is reset and set up again without stopping
//! the trial (see [`TxGen`]): frames the generator held meanwhile go out afterwards, and a trial
//! that cannot send or receive ends at its time limits like any stalled one. What the reset cost
//! cannot be told apart from the DUT's loss (the frames the port's rings held are gone and no
//! PMD says how many), so the trial says it happened: `dut.tester.port_events` counts the resets
//! and link losses of each tester port during the trial, and a warning names them.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dataplane::DatapathMode;
use dataplane::driver::dpdk::{DpdkPort, PortEventStats, PortRxStats, RxTap, TxGen, UnsentPolicy};
use pktgen::rate::{Pacer, Rate, wall_ns};
use pktgen::trial::{
    Dut, DutError, DutInfo, LossAttribution, TrialResult, TrialSpec, WARMUP_STREAM, gbps,
};
use pktgen::{CheckingSink, Generator, GeneratorConfig};

use crate::dpdk_gen::send_due;
use crate::run::RunOptions;
use crate::run::dpdk as dpdk_run;

/// Stream ids the trials cycle through (1..=253; 0 is the generator default and 255 the warm-up
/// stream), so consecutive trials never share one.
const TRIAL_STREAMS: u64 = 253;

/// How long the receive queue must stay empty before a trial starts.
const QUIET: Duration = Duration::from_millis(2);

/// The tester on DPDK ports, as a DUT (see the module docs).
pub struct DpdkDut {
    name: String,
    line_bps: f64,
    traffic: GeneratorConfig,
    burst: usize,
    core: Option<usize>,
    tx: TxGen,
    rx: RxTap,
    trials: u64,
    /// The ports stay open while the DUT lives (the queues also hold them).
    _ports: Vec<DpdkPort>,
}

impl DpdkDut {
    /// Opens the ports of `config` (a run config with a `[dpdk]` section) with `sets` applied.
    /// `line_gbps` overrides the link speed the transmit port reports (needed when it reports
    /// none). Returns `Ok(None)` when the config has no `[dpdk]` section.
    pub fn open(
        config: &Path,
        sets: &[String],
        line_gbps: Option<f64>,
    ) -> Result<Option<Self>, DutError> {
        let opts = RunOptions {
            config: config.to_path_buf(),
            sets: sets.to_vec(),
            packets: None,
            duration_s: None,
            mode: None,
            workers: None,
            rx_pcap: None,
            tx_pcap: None,
            live_stats: false,
            ..RunOptions::default()
        };
        let Some((mut cfg, d)) = dpdk_run::load(&opts).map_err(|e| DutError(e.to_string()))? else {
            return Ok(None);
        };
        let traffic: GeneratorConfig = toml::Value::Table(cfg.generator_table())
            .try_into()
            .map_err(|e: toml::de::Error| {
                DutError(format!(
                    "config {}: [traffic]: {}",
                    config.display(),
                    e.message()
                ))
            })?;
        if cfg.run.workers != 1 {
            return Err(DutError(format!(
                "config {}: key `run.workers`: the DPDK tester uses one queue per port; allowed 1",
                config.display()
            )));
        }
        // The tester writes and reads whole frames in host mbufs.
        cfg.datapath.mode = DatapathMode::Host;
        cfg.vnic.max_frame = cfg.vnic.max_frame.max(9018);
        let burst = cfg.datapath.burst;
        let core = d.worker_cores.first().copied();
        let mut ports = dpdk_run::open_ports(&cfg, &d).map_err(|e| DutError(e.to_string()))?;
        let last = ports.len() - 1;
        let mut tx_gens = ports[0]
            .tx_generators(burst, UnsentPolicy::Retry)
            .map_err(|e| DutError(format!("port `{}`: {e}", d.ports[0].devargs)))?;
        let mut tx = tx_gens.remove(0);
        let rx = if last == 0 {
            tx.take_rx_tap()
        } else {
            ports[last]
                .tx_generators(burst, UnsentPolicy::Retry)
                .map_err(|e| DutError(format!("port `{}`: {e}", d.ports[last].devargs)))?
                .remove(0)
                .take_rx_tap()
        }
        .ok_or_else(|| DutError("the receive port has no Rx queue".into()))?;
        let line_bps = match line_gbps {
            Some(g) if g > 0.0 && g.is_finite() => g * 1e9,
            Some(g) => {
                return Err(DutError(format!(
                    "--line-gbps {g}: allowed a positive rate"
                )));
            }
            None => {
                f64::from(tx.link_speed_mbps().ok_or_else(|| {
                    DutError(format!(
                        "port `{}` reports no link speed; give the line rate with --line-gbps",
                        d.ports[0].devargs
                    ))
                })?) * 1e6
            }
        };
        let name = format!(
            "dpdk tester: Tx {} -> DUT -> Rx {}",
            tx.port_name(),
            rx.port_name()
        );
        Ok(Some(Self {
            name,
            line_bps,
            traffic,
            burst,
            core,
            tx,
            rx,
            trials: 0,
            _ports: ports,
        }))
    }

    /// Receives and drops whatever is queued until the port has been quiet for [`QUIET`] (at
    /// most a second).
    fn flush_rx(&mut self) {
        let give_up = Instant::now() + Duration::from_secs(1);
        let mut quiet_since = Instant::now();
        while Instant::now() < give_up {
            if self.rx.poll(|_| {}) > 0 {
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() >= QUIET {
                break;
            }
        }
    }
}

/// A tester port's resets and link losses during a trial.
#[derive(serde::Serialize)]
struct TrialPortEvents {
    port: String,
    device_resets: u64,
    reset_failures: u64,
    link_down_events: u64,
}

impl DpdkDut {
    /// What happened to the tester's ports since `before` (Tx port, Rx port; one entry when
    /// they are the same port), warning about each port that reset or lost its link.
    fn port_events_since(&self, before: (PortEventStats, PortEventStats)) -> Vec<TrialPortEvents> {
        let mut ports = vec![(self.tx.port_name(), before.0, self.tx.port_events())];
        if self.rx.port_name() != self.tx.port_name() {
            ports.push((self.rx.port_name(), before.1, self.rx.port_events()));
        }
        ports
            .into_iter()
            .map(|(name, b, a)| {
                let e = TrialPortEvents {
                    port: name.to_string(),
                    device_resets: a.device_resets - b.device_resets,
                    reset_failures: a.reset_failures - b.reset_failures,
                    link_down_events: a.link_down_events - b.link_down_events,
                };
                if e.device_resets + e.reset_failures + e.link_down_events > 0 {
                    eprintln!(
                        "warning: tester port {name} during this trial: {} device reset(s) \
                         recovered, {} not, link down {} time(s); frames its rings held then are \
                         lost on most PMDs and counted in this trial's loss",
                        e.device_resets, e.reset_failures, e.link_down_events
                    );
                }
                e
            })
            .collect()
    }
}

/// What the transmit thread reports.
struct TxOut {
    sent: u64,
    unsent: u64,
    /// Nanoseconds from the first to the last frame handed to the port.
    sending_ns: u64,
    register_error: Option<String>,
}

impl Dut for DpdkDut {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn line_rate_bps(&self) -> f64 {
        self.line_bps
    }

    fn deterministic(&self) -> bool {
        false
    }

    fn info(&self) -> DutInfo {
        DutInfo {
            clock: "wall".into(),
            profile: None,
            mode: None,
            workers: None,
            cpu_cost: "measured: the device under test behind the tester's DPDK ports".into(),
        }
    }

    fn base_traffic(&self) -> Option<GeneratorConfig> {
        Some(self.traffic.clone())
    }

    fn trial(&mut self, spec: &TrialSpec) -> Result<TrialResult, DutError> {
        if !(spec.rate_pps > 0.0 && spec.rate_pps.is_finite()) {
            return Err(DutError(format!(
                "rate {} pps is not a positive rate",
                spec.rate_pps
            )));
        }
        self.trials += 1;
        let stream = 1 + (self.trials % TRIAL_STREAMS) as u16;
        let intended = spec.intended_frames();
        let traffic = GeneratorConfig {
            count: Some(intended),
            timestamps: spec.latency,
            stream,
            ..spec.traffic.clone()
        };
        traffic.validate().map_err(|e| DutError(e.to_string()))?;
        if traffic.generated_len() > self.tx.frame_room() {
            return Err(DutError(format!(
                "frames of {} B do not fit the {} B mbufs of {}",
                traffic.generated_len(),
                self.tx.frame_room(),
                self.tx.port_name()
            )));
        }
        let mut generator = Generator::new(traffic.clone()).map_err(|e| DutError(e.to_string()))?;
        let mut warm = spec.warmup_generator(&traffic)?;
        let warm_frames = spec.warmup_frames();

        self.flush_rx();
        let rx_before = self.rx.port_stats().map_err(|e| DutError(e.to_string()))?;
        let events_before = (self.tx.port_events(), self.rx.port_events());
        let mut sink = CheckingSink::for_generator(&traffic);
        sink.set_latency(spec.latency);
        let counters = self.tx.counters();
        let sent0 = counters.sent();
        let stopped = AtomicBool::new(false);
        // Frames sent once the transmitter stopped (valid when `stopped` is set).
        let sent_at_stop = AtomicU64::new(0);
        let drain = Duration::from_secs_f64(spec.drain_s.max(0.0));
        let (line_bps, burst, core, rate) = (self.line_bps, self.burst, self.core, spec.rate_pps);
        let intended_s = spec.intended_duration_s() + spec.warmup_s;
        let tx = &mut self.tx;
        let rx = &mut self.rx;
        let mut in_flight_at_stop = 0;

        let tx_out = std::thread::scope(|s| {
            let handle = s.spawn(|| {
                let register_error = tx.register(core).err();
                let mut pacer = Pacer::new(Rate::Pps(rate), line_bps);
                // The wall clock first: a frame's timestamp (base + intended offset) must never
                // be later than its real departure (see `send_due`).
                let base_ns = wall_ns();
                let start = Instant::now();
                // A Tx ring that stops taking frames (a stalled link) must not hang the trial:
                // after twice the intended time plus a second, what was not sent is unsent.
                let give_up = start + Duration::from_secs_f64(2.0 * intended_s + 1.0);
                let mut polls = 0u32;
                if let Some(w) = &mut warm {
                    while !w.done() {
                        send_due(tx, w, Some(&mut pacer), start, base_ns, burst, false);
                        polls = polls.wrapping_add(1);
                        if polls.is_multiple_of(1024) && Instant::now() > give_up {
                            break;
                        }
                    }
                }
                // Warm-up frames still held for a retry go out (or are dropped) before the
                // measured traffic, so none of them is counted as a measured frame.
                tx.finish(give_up);
                let first = Instant::now();
                let (before, unsent_before) = (counters.sent(), counters.unsent());
                while !generator.done() {
                    send_due(
                        tx,
                        &mut generator,
                        Some(&mut pacer),
                        start,
                        base_ns,
                        burst,
                        spec.latency,
                    );
                    polls = polls.wrapping_add(1);
                    if polls.is_multiple_of(1024) && Instant::now() > give_up {
                        break;
                    }
                }
                let sending_ns = first.elapsed().as_nanos() as u64;
                let never_written = intended.saturating_sub(generator.counters().frames());
                // Held frames get until the drain window to be taken (then they are unsent).
                tx.finish(Instant::now() + drain);
                let out = TxOut {
                    sent: counters.sent() - before,
                    unsent: counters.unsent() - unsent_before + never_written,
                    sending_ns,
                    register_error,
                };
                sent_at_stop.store(counters.sent() - sent0, Ordering::Relaxed);
                stopped.store(true, Ordering::Release);
                out
            });
            // Receive on this thread until the transmitter stopped and then every frame arrived
            // or the drain window passed.
            let counts = sink.counters();
            // Frames of this trial received so far (measured and warm-up), as published.
            let arrived = |sink: &CheckingSink| {
                sink.publish_all();
                counts.stream(stream).unique + counts.stream(WARMUP_STREAM).unique.min(warm_frames)
            };
            let mut deadline = None;
            let mut polls = 0u64;
            loop {
                // The receive time is read once per burst, after the burst arrived (a time read
                // before the poll could precede a frame's departure).
                let mut now = None;
                rx.poll(|frame| {
                    let t = *now.get_or_insert_with(wall_ns);
                    sink.check_at(frame, t);
                });
                polls += 1;
                match deadline {
                    None if stopped.load(Ordering::Acquire) => {
                        in_flight_at_stop = sent_at_stop
                            .load(Ordering::Relaxed)
                            .saturating_sub(arrived(&sink));
                        deadline = Some(Instant::now() + drain);
                    }
                    Some(d)
                        if polls.is_multiple_of(64)
                            && (arrived(&sink) >= sent_at_stop.load(Ordering::Relaxed)
                                || Instant::now() >= d) =>
                    {
                        break;
                    }
                    _ => {}
                }
            }
            handle.join()
        })
        .map_err(|_| DutError("the transmit thread panicked".into()))?;
        if let Some(e) = &tx_out.register_error {
            eprintln!("warning: tester transmit thread: {e}; mempool caches are off");
        }
        sink.publish_all();
        let st = sink.counters().stream(stream);
        let rx_after = self.rx.port_stats().map_err(|e| DutError(e.to_string()))?;
        let lost = tx_out.sent.saturating_sub(st.unique);
        let frame_size = traffic.mean_frame_size();
        let latency = if spec.latency {
            sink.latency_histogram(stream).and_then(|h| h.stats())
        } else {
            None
        };
        let d = |f: fn(&PortRxStats) -> u64| f(&rx_after).saturating_sub(f(&rx_before));
        let events = self.port_events_since(events_before);
        Ok(TrialResult {
            rate_pps: spec.rate_pps,
            rate_gbps: gbps(spec.rate_pps, frame_size),
            frame_size,
            duration_s: spec.intended_duration_s(),
            intended,
            sent: tx_out.sent,
            gen_unsent: tx_out.unsent,
            achieved_pps: if tx_out.sending_ns == 0 {
                0.0
            } else {
                tx_out.sent as f64 * 1e9 / tx_out.sending_ns as f64
            },
            received: st.unique,
            duplicates: st.duplicates,
            reordered: st.reordered,
            payload_mismatches: st.payload_mismatches,
            lost,
            in_flight_at_stop,
            late: 0,
            latency,
            attribution: LossAttribution::new(
                lost,
                [
                    ("tester_rx_missed".to_string(), d(|s| s.imissed)),
                    ("tester_rx_nombuf".to_string(), d(|s| s.rx_nombuf)),
                    ("tester_rx_errors".to_string(), d(|s| s.ierrors)),
                ],
            ),
            bottleneck: None,
            deterministic: false,
            dut: serde_json::json!({
                "tester": {
                    "tx_port": self.tx.port_name(),
                    "rx_port": self.rx.port_name(),
                    "stream": stream,
                    "rx_ipackets": d(|s| s.ipackets),
                    "port_events": events,
                }
            }),
        })
    }
}

/// The DPDK tester of a sweep: opened at the first point and shared by every later one, since
/// DPDK ports open once per process. Only traffic axes (frame size, flows, ...) can vary.
#[derive(Clone)]
pub struct SharedTester {
    config: String,
    sets: Vec<String>,
    dut: Rc<RefCell<DpdkDut>>,
}

impl std::fmt::Debug for SharedTester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTester")
            .field("config", &self.config)
            .field("dut", &self.dut.borrow().name)
            .finish()
    }
}

impl SharedTester {
    /// The tester for `config` with `sets` and this sweep point's DUT parameters `params`:
    /// the one in `slot` when it is for the same config and sets, else a newly opened one (only
    /// once per process). Points with DUT parameters are refused.
    pub fn dut(
        slot: &mut Option<SharedTester>,
        config: &str,
        sets: &[String],
        params: &[(String, toml::Value)],
        line_gbps: Option<f64>,
    ) -> Result<Box<dyn Dut>, DutError> {
        if let Some((k, _)) = params.first() {
            return Err(DutError(format!(
                "{config}: axis `{k}`: a DPDK tester sweep can vary only traffic keys (frame_size, \
                 size_mix, flows, ...); the device under test is outside, behind the ports"
            )));
        }
        match slot {
            Some(t) if t.config == config && t.sets == sets => {}
            Some(t) => {
                return Err(DutError(format!(
                    "{config}: this process already opened the DPDK ports of {} (DPDK ports open \
                     once per process)",
                    t.config
                )));
            }
            None => {
                let dut = DpdkDut::open(Path::new(config), sets, line_gbps)?
                    .ok_or_else(|| DutError(format!("config {config}: no [dpdk] section")))?;
                *slot = Some(SharedTester {
                    config: config.to_string(),
                    sets: sets.to_vec(),
                    dut: Rc::new(RefCell::new(dut)),
                });
            }
        }
        let t = slot.as_ref().expect("set above");
        Ok(Box::new(SharedDut(t.dut.clone())))
    }
}

/// A handle on a [`SharedTester`]'s DUT.
struct SharedDut(Rc<RefCell<DpdkDut>>);

impl Dut for SharedDut {
    fn name(&self) -> String {
        self.0.borrow().name()
    }
    fn line_rate_bps(&self) -> f64 {
        self.0.borrow().line_rate_bps()
    }
    fn deterministic(&self) -> bool {
        false
    }
    fn info(&self) -> DutInfo {
        self.0.borrow().info()
    }
    fn base_traffic(&self) -> Option<GeneratorConfig> {
        self.0.borrow().base_traffic()
    }
    fn trial(&mut self, spec: &TrialSpec) -> Result<TrialResult, DutError> {
        self.0.borrow_mut().trial(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trial during which the tester's port resets (raised as the PMD would, before the trial;
    /// on a `net_ring` loopback queue 0's tap resets the port once the trial's transmitter stood
    /// aside): the trial ends, says the port reset, and counts every frame: `net_ring` keeps
    /// its ring through a reset, so here nothing is lost. The next trial reports no reset.
    #[test]
    fn a_trial_across_a_tester_port_reset_reports_it_and_counts_every_frame() {
        let dir = std::env::temp_dir().join(format!("nmdp-dut-dpdk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let cfg = dir.join("tester.toml");
        std::fs::write(
            &cfg,
            "[run]\nworkers = 1\n\n[datapath]\nburst = 32\n\n[dpdk]\neal_args = [\"-l\", \"0\", \
             \"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--no-shconf\", \"--no-telemetry\", \
             \"--file-prefix=nmdp-dut-dpdk\", \"--log-level=*:warning\"]\nrx_desc = 1024\n\
             tx_desc = 1024\n\n[[dpdk.ports]]\ndevargs = \"net_ring_tr\"\n\n[traffic]\n\
             frame_size = 64\nflows = 16\n",
        )
        .expect("config");
        let mut dut = DpdkDut::open(&cfg, &[], Some(10.0))
            .expect("tester opens")
            .expect("a [dpdk] section");
        let spec = |frames: u64| TrialSpec {
            rate_pps: 200_000.0,
            duration_s: frames as f64 / 200_000.0,
            drain_s: 0.5,
            traffic: dut.base_traffic().expect("traffic"),
            ..TrialSpec::default()
        };
        let (first, second) = (spec(20_000), spec(5_000));
        dataplane::testkit::raise_dpdk_reset(&dut._ports[0]);
        for (round, s, resets) in [(1, first, 1), (2, second, 0)] {
            let r = dut.trial(&s).expect("trial");
            let ev = &r.dut["tester"]["port_events"];
            assert_eq!(ev.as_array().map(Vec::len), Some(1), "one port: {ev}");
            assert_eq!(
                ev[0]["device_resets"].as_u64(),
                Some(resets),
                "round {round}"
            );
            assert_eq!(ev[0]["reset_failures"].as_u64(), Some(0), "round {round}");
            assert_eq!(r.sent + r.gen_unsent, r.intended, "round {round}: {r:?}");
            assert_eq!(r.received + r.lost, r.sent, "round {round}: {r:?}");
            assert_eq!((r.lost, r.duplicates), (0, 0), "round {round}: {r:?}");
        }
    }
}
