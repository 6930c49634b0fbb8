//! pktgen's generator on DPDK vdevs (feature `dpdk`, needs libdpdk-dev; no hugepages):
//! `cargo test --features dpdk --test dpdk_pktgen`.
//!
//! Every frame the generator hands to a port is checked by pktgen's checking sink on the other
//! side: `net_pcap` (`tx_pcap=` file, read back) for `pktgen dpdk-gen`'s whole path, and
//! `net_ring` (Tx looped back to Rx) for the driver's retry and drop policies. EAL initialises
//! once per process, so all tests here share one EAL (same arguments everywhere) and run one at
//! a time; every test uses its own vdev names (a `net_ring` name cannot be reused, and must stay
//! short: its rings are named `ETH_RXTX<queue>_<name>` within 29 characters).

#![cfg(feature = "dpdk")]

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dataplane::driver::dpdk::{DpdkPort, DpdkPortConfig, Eal, UnsentPolicy};
use dataplane::link::{FrameSink, FrameSource, MAX_WIRE_FRAME};
use dataplane::pcap::PcapSource;
use nmdp::dpdk_gen::{self, GenOptions, GenSummary};
use nmdp::dut::DpdkDut;
use pktgen::trial::{Dut, TrialSpec};
use pktgen::{CheckingSink, Generator, GeneratorConfig, Signature, report};

static SERIAL: Mutex<()> = Mutex::new(());

const EAL_ARGS: [&str; 10] = [
    "-l",
    "0",
    "--no-huge",
    "-m",
    "256",
    "--no-pci",
    "--no-shconf",
    "--no-telemetry",
    "--file-prefix=nmdp-pktgen-dpdk",
    "--log-level=*:warning",
];

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nmdp-dpdk-pktgen-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn eal() {
    let args: Vec<String> = EAL_ARGS.iter().map(|s| s.to_string()).collect();
    Eal::init(&args).expect("EAL init");
}

/// A `pktgen dpdk-gen` config with one port and the given `[traffic]` / `[run]` lines.
fn config(name: &str, devargs: &str, run: &str, traffic: &str) -> PathBuf {
    let eal: Vec<String> = EAL_ARGS.iter().map(|s| format!("\"{s}\"")).collect();
    let text = format!(
        "[run]\nworkers = 1\nstats_interval_s = 0\n{run}\n\n[datapath]\nburst = 32\n\n\
         [dpdk]\neal_args = [{}]\nrx_desc = 512\ntx_desc = 512\n\n\
         [[dpdk.ports]]\ndevargs = \"{devargs}\"\n\n[traffic]\n{traffic}\n",
        eal.join(", ")
    );
    let path = tmp(&format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn run(opts: &GenOptions) -> GenSummary {
    dpdk_gen::run(opts).unwrap_or_else(|e| panic!("{}: {e}", opts.config.display()))
}

/// The generator's config for a sink: what `dpdk-gen` builds for port 0, worker 0.
fn traffic(frame_size: u32, flows: u32, count: u64) -> GeneratorConfig {
    GeneratorConfig {
        frame_size,
        flows,
        count: Some(count),
        ..Default::default()
    }
}

#[test]
fn pcap_gets_exactly_n_frames_in_sequence_with_valid_signatures() {
    let _g = serial();
    const N: u64 = 20_000;
    let out = tmp("gen-out.pcap");
    let cfg = config(
        "pcap",
        &format!("net_pcap0,tx_pcap={}", out.display()),
        "",
        "frame_size = 128\nflows = 7",
    );
    let s = run(&GenOptions {
        count: Some(N),
        ..GenOptions::new(&cfg)
    });
    assert_eq!(
        (s.generated, s.sent, s.gen_unsent, s.alloc_failed),
        (N, N, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.ports[0].driver, "net_pcap");
    assert_eq!(s.ports[0].port_opackets, N, "the PMD counts what we count");
    assert_eq!(s.sent_bytes, N * 124);
    assert!(s.mpps > 0.0 && s.gbps_l1 > s.gbps_l2, "{s:?}");
    let json = s.to_json();
    assert_eq!(json["gen_unsent"], 0);
    assert_eq!(json["sent"], N);

    // Read the file back: exactly N frames, sequence numbers 0..N-1 in order, every signature,
    // length and payload what the generator writes.
    let want = traffic(128, 7, N);
    let mut sink = CheckingSink::for_generator(&want);
    let sc = sink.counters();
    let mut src = PcapSource::open(&out).unwrap();
    let mut buf = vec![0u8; MAX_WIRE_FRAME];
    let mut next = 0u64;
    while let Some(n) = src.next_frame(&mut buf) {
        let (sig, _) = pktgen::signature::parse(&buf[..n]).expect("a signature");
        assert_eq!(
            sig,
            Signature {
                stream: 0,
                flow: (next % 7) as u32,
                seq: next,
                ts: None
            }
        );
        sink.deliver(&buf[..n]);
        next += 1;
    }
    sink.finish();
    assert_eq!(next, N);
    // The reference generator's counters say what was sent.
    let mut reference = Generator::new(want).unwrap();
    while reference.next_frame(&mut buf).is_some() {}
    let r = report(&reference.counters(), &sc);
    assert!(r.clean(), "{r:?}");
    assert_eq!((r.received, r.reordered, r.not_ours), (N, 0, 0));
    let _ = std::fs::remove_file(&out);
}

#[test]
fn net_ring_retry_delivers_every_frame_in_order_to_a_late_receiver() {
    let _g = serial();
    eal();
    const N: u64 = 100_000;
    let mut port = DpdkPort::open(&DpdkPortConfig {
        devargs: "net_ring_retry".into(),
        rx_desc: 512,
        tx_desc: 512,
        ..Default::default()
    })
    .expect("net_ring port");
    let mut tx = port
        .tx_generators(32, UnsentPolicy::Retry)
        .unwrap()
        .remove(0);
    let mut rx = tx.take_rx_tap().expect("rx side");
    let cfg = traffic(64, 1024, N);
    let mut sink = CheckingSink::for_generator(&cfg);
    let sc = sink.counters();
    // The receiver starts late, so the ring (1024 slots) fills and the generator must hold and
    // offer frames again.
    let receiver = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = 0u64;
        while got < N && Instant::now() < deadline {
            got += rx.poll(|f| sink.deliver(f)) as u64;
        }
        sink.finish();
        got
    });
    let mut g = Generator::new(cfg).unwrap();
    let gc = g.counters();
    let mut short_bursts = 0u64;
    while !g.done() || tx.pending() > 0 {
        let mut b = g.batch(32, 0);
        let r = tx.burst(32, |buf| b.next(buf));
        drop(b);
        if r.written > 0 && r.sent < r.written {
            short_bursts += 1;
        }
    }
    assert_eq!(tx.finish(Instant::now()), 0);
    let got = receiver.join().unwrap();
    let c = tx.counters();
    assert!(short_bursts > 0, "the ring never filled");
    assert_eq!((c.sent(), c.unsent(), c.alloc_failed()), (N, 0, 0));
    assert_eq!(got, N);
    let r = report(&gc, &sc);
    assert!(r.clean(), "{r:?}");
    assert_eq!(r.reordered, 0, "retried frames keep their order");
    assert_eq!(tx.port_stats().unwrap().opackets, N);
}

#[test]
fn net_ring_drop_policy_counts_frames_the_ring_refused_as_gen_unsent() {
    let _g = serial();
    eal();
    const N: u64 = 5_000;
    let mut port = DpdkPort::open(&DpdkPortConfig {
        devargs: "net_ring_drop".into(),
        rx_desc: 512,
        tx_desc: 512,
        ..Default::default()
    })
    .expect("net_ring port");
    let mut tx = port
        .tx_generators(32, UnsentPolicy::Drop)
        .unwrap()
        .remove(0);
    let cfg = traffic(64, 3, N);
    let mut g = Generator::new(cfg.clone()).unwrap();
    let gc = g.counters();
    while !g.done() {
        let mut b = g.batch(32, 0);
        tx.burst(32, |buf| b.next(buf));
    }
    tx.finish(Instant::now());
    let c = tx.counters();
    // Nobody receives: the ring takes what fits, the rest is dropped and counted.
    assert_eq!(gc.frames(), N);
    assert!(c.sent() > 0 && c.sent() < N, "sent {}", c.sent());
    assert_eq!(
        c.sent() + c.unsent(),
        N,
        "every written frame is sent or unsent"
    );
    // What the ring holds is a gap-free prefix: the first `sent` frames, in order.
    let mut rx = tx.take_rx_tap().unwrap();
    let mut sink = CheckingSink::for_generator(&cfg);
    let sc = sink.counters();
    while rx.poll(|f| sink.deliver(f)) > 0 {}
    sink.finish();
    let st = sc.stream(0);
    assert_eq!((st.received, st.unique), (c.sent(), c.sent()));
    assert_eq!(
        (st.payload_mismatches, st.duplicates, st.reordered),
        (0, 0, 0)
    );
    assert_eq!(st.next_seq, c.sent(), "the ring took the first frames");
}

#[test]
fn dpdk_gen_reports_gen_unsent_when_the_ring_stays_full() {
    let _g = serial();
    for (name, unsent) in [
        ("net_ring_fd", UnsentPolicy::Drop),
        ("net_ring_fr", UnsentPolicy::Retry),
    ] {
        let cfg = config(
            name,
            name,
            "duration_s = 0.3\ndrain_timeout_s = 0.05",
            "frame_size = 64",
        );
        let s = run(&GenOptions {
            unsent,
            ..GenOptions::new(&cfg)
        });
        // Nobody drains the ring (1024 slots): it fills, then every frame is refused.
        assert!(s.sent > 0 && s.sent <= 1024, "{unsent}: {s:?}");
        assert!(s.gen_unsent > 0, "{unsent}: {s:?}");
        assert_eq!(s.generated, s.sent + s.gen_unsent, "{unsent}: {s:?}");
        assert_eq!(s.ports[0].gen_unsent, s.gen_unsent);
        assert_eq!(s.ports[0].port_opackets, s.sent);
        if unsent == UnsentPolicy::Retry {
            // Held frames are offered until the end, then freed: at most one burst.
            assert!(s.gen_unsent <= 32, "{s:?}");
        }
    }
}

/// A run with only a count (no time limit) on a port that stops taking frames (here a ring
/// nobody drains; a link that stays down looks the same): with the retry policy the generator
/// would wait for ever. It stops once nothing was taken for `run.drain_timeout_s` while frames
/// waited, says so, and counts every frame it wrote.
#[test]
fn dpdk_gen_without_a_time_limit_stops_when_the_port_takes_nothing() {
    let _g = serial();
    let cfg = config(
        "stall",
        "net_ring_st",
        "packets = 1000000
duration_s = 0
drain_timeout_s = 0.05",
        "frame_size = 64",
    );
    let s = run(&GenOptions::new(&cfg));
    assert!(s.stalled, "{s:?}");
    assert!(s.sent > 0 && s.sent <= 1024, "{s:?}");
    assert!(s.generated < 1_000_000, "{s:?}");
    assert_eq!(s.generated, s.sent + s.gen_unsent, "{s:?}");
    assert!(s.text().contains("stopped early"), "{}", s.text());
}

#[test]
fn bad_configs_name_the_file_and_key() {
    let _g = serial();
    let cfg = config(
        "bad-size",
        "net_null_bad0",
        "packets = 10",
        "frame_size = 63",
    );
    let e = dpdk_gen::run(&GenOptions::new(&cfg))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bad-size.toml") && e.contains("traffic.frame_size"),
        "{e}"
    );
    let cfg = config("forever", "net_null_bad1", "", "frame_size = 64");
    let e = dpdk_gen::run(&GenOptions::new(&cfg))
        .unwrap_err()
        .to_string();
    assert!(e.contains("run.packets") && e.contains("forever"), "{e}");
    let cfg = config(
        "bad-key",
        "net_null_bad2",
        "packets = 10",
        "frame_sise = 64",
    );
    let e = dpdk_gen::run(&GenOptions::new(&cfg))
        .unwrap_err()
        .to_string();
    assert!(e.contains("frame_sise"), "{e}");
}

/// A tester config with the given ports (first: Tx, last: Rx).
fn tester_config(name: &str, devargs: &[&str]) -> PathBuf {
    let eal: Vec<String> = EAL_ARGS.iter().map(|s| format!("\"{s}\"")).collect();
    let ports: String = devargs
        .iter()
        .map(|d| format!("[[dpdk.ports]]\ndevargs = \"{d}\"\n\n"))
        .collect();
    let text = format!(
        "[run]\nworkers = 1\n\n[datapath]\nburst = 32\n\n[dpdk]\neal_args = [{}]\nrx_desc = 1024\n\
         tx_desc = 1024\n\n{ports}[traffic]\nframe_size = 64\nflows = 16\n",
        eal.join(", ")
    );
    let path = tmp(&format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn tester_spec(rate_pps: f64, frames: u64, traffic: GeneratorConfig) -> TrialSpec {
    TrialSpec {
        rate_pps,
        duration_s: frames as f64 / rate_pps,
        drain_s: 0.5,
        latency: true,
        traffic,
        ..TrialSpec::default()
    }
}

/// The DPDK tester on a `net_ring` loopback (the "DUT" is a wire): every frame of a trial is
/// sent once and received once, exactly; latency is measured and plausible; a second trial on
/// the same ports is just as exact (its own stream id: nothing of the first one leaks in), and so
/// is one with a warm-up.
#[test]
fn dpdk_tester_counts_every_frame_of_a_loopback_trial() {
    let _g = serial();
    let cfg = tester_config("tester-loop", &["net_ring_tl"]);
    let mut dut = DpdkDut::open(&cfg, &[], Some(10.0))
        .expect("tester opens")
        .expect("a [dpdk] section");
    assert!(!dut.deterministic());
    assert_eq!(dut.line_rate_bps(), 10e9);
    let base = dut.base_traffic().expect("the config's traffic");
    assert_eq!((base.frame_size, base.flows), (64, 16));
    // Round 3 has a warm-up (its frames are neither sent nor received nor lost in the result).
    for (round, frames, warmup_s) in [(1, 20_000u64, 0.0), (2, 5_000, 0.0), (3, 5_000, 0.01)] {
        let r = dut
            .trial(&TrialSpec {
                warmup_s,
                ..tester_spec(200_000.0, frames, base.clone())
            })
            .expect("trial");
        assert_eq!(r.intended, frames, "round {round}");
        assert_eq!(r.sent + r.gen_unsent, frames, "round {round}: {r:?}");
        assert_eq!(r.received, r.sent, "round {round}: {r:?}");
        assert_eq!(
            (r.lost, r.duplicates, r.reordered, r.payload_mismatches),
            (0, 0, 0, 0),
            "round {round}: {r:?}"
        );
        assert!(r.achieved_pps > 0.0);
        let lat = r.latency.as_ref().expect("latency measured");
        assert!(lat.count > 0 && lat.count <= r.received, "{lat:?}");
        assert!(
            lat.max_ns < 1_000_000_000,
            "no wrapped (negative) latency: {lat:?}"
        );
        // The port also received the warm-up frames.
        let warm = (200_000.0 * warmup_s) as u64;
        assert_eq!(
            r.dut["tester"]["rx_ipackets"].as_u64(),
            Some(r.received + warm)
        );
    }
}

/// Frames that never come back are the DUT's loss, all of it, and the tester's own receive port
/// shows no drops (nothing is blamed on it): Tx on one `net_ring`, Rx on another that nothing
/// feeds. Nobody drains the Tx ring either, so it fills and stalls: the trial still ends, and
/// the frames it never took are the generator's (`gen_unsent`), not loss.
#[test]
fn dpdk_tester_counts_what_the_dut_swallows_as_dut_loss() {
    let _g = serial();
    let cfg = tester_config("tester-loss", &["net_ring_ta", "net_ring_tb"]);
    let mut dut = DpdkDut::open(&cfg, &[], Some(10.0)).unwrap().unwrap();
    let base = dut.base_traffic().unwrap();
    let mut spec = tester_spec(100_000.0, 3_000, base);
    spec.drain_s = 0.05;
    let r = dut.trial(&spec).expect("trial");
    assert_eq!(r.received, 0);
    assert_eq!(r.lost, r.sent, "{r:?}");
    assert_eq!(r.sent + r.gen_unsent, r.intended, "{r:?}");
    assert!(r.sent > 0);
    assert_eq!(r.attribution.unattributed, r.lost as i64, "{r:?}");
    assert!(r.attribution.stages.is_empty(), "{r:?}");
}

/// A config without a `[dpdk]` section is not a DPDK tester.
#[test]
fn dpdk_tester_needs_a_dpdk_section() {
    let _g = serial();
    let p = tmp("no-dpdk.toml");
    std::fs::write(&p, "[run]\nworkers = 1\n").unwrap();
    assert!(DpdkDut::open(&p, &[], Some(10.0)).unwrap().is_none());
    assert!(!nmdp::dut::has_dpdk_section(&p));
}

/// A sweep over frame sizes against the DPDK tester opens its ports once and reuses them at
/// every point; an axis that would change the DUT is refused with the key named.
#[test]
fn dpdk_tester_sweeps_frame_sizes_on_one_set_of_ports() {
    use nmdp::dut::{DutOptions, VnicFactory};
    use pktgen::sweep::{NoProgress, SweepSpec, run_sweep};
    let _g = serial();
    let cfg = tester_config("tester-sweep", &["net_ring_ts"]);
    let spec: SweepSpec = toml::from_str(&format!(
        "dut = \"{}\"\ntest = \"trial\"\ntrial_s = 0.01\nrate_percent = 1\n\
         [[axis]]\nkey = \"frame_size\"\nvalues = [64, 512, 1518]\n[plot]\ndisabled = true\n",
        cfg.display()
    ))
    .unwrap();
    let mut factory = VnicFactory::new(DutOptions {
        line_gbps: Some(10.0),
        clock: None,
    });
    let r = run_sweep(&spec, &mut factory, &mut NoProgress).expect("sweep");
    assert_eq!(r.rows.len(), 3);
    for (row, size) in r.rows.iter().zip([64.0, 512.0, 1518.0]) {
        assert_eq!(row.frame_size, size);
        assert_eq!(row.loss_at_max, Some(0.0), "{size} B: {row:?}");
        assert!(row.dut.contains("net_ring_ts"), "{}", row.dut);
    }
    // The same factory (ports already open) refuses a DUT axis, naming it.
    let bad: SweepSpec = toml::from_str(&format!(
        "dut = \"{}\"\ntest = \"trial\"\n[[axis]]\nkey = \"mode\"\nvalues = [\"host\"]\n\
         [plot]\ndisabled = true\n",
        cfg.display()
    ))
    .unwrap();
    let e = run_sweep(&bad, &mut factory, &mut NoProgress).unwrap_err();
    assert!(e.0.contains("`mode`"), "{e}");
}

/// `configs/dpdk-txgen.toml` as shipped (its worker unpinned, as the test machine may have one
/// core): every frame goes out.
#[test]
fn shipped_txgen_config_sends_every_frame() {
    let _g = serial();
    let cfg = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/dpdk-txgen.toml");
    let s = run(&GenOptions {
        count: Some(20_000),
        sets: vec![
            "dpdk.worker_cores=[]".into(),
            "run.stats_interval_s=0".into(),
        ],
        ..GenOptions::new(&cfg)
    });
    assert_eq!(
        (s.generated, s.sent, s.gen_unsent, s.alloc_failed),
        (20_000, 20_000, 0, 0),
        "{s:?}"
    );
}

/// `configs/dpdk-tester-ring.toml` as shipped (worker unpinned): a loopback trial loses
/// nothing.
#[test]
fn shipped_tester_config_runs_a_clean_trial() {
    let _g = serial();
    let cfg = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/dpdk-tester-ring.toml");
    let mut dut = DpdkDut::open(&cfg, &["dpdk.worker_cores=[]".into()], Some(10.0))
        .expect("tester opens")
        .expect("a [dpdk] section");
    let base = dut.base_traffic().expect("the config's traffic");
    let r = dut
        .trial(&tester_spec(200_000.0, 5_000, base))
        .expect("trial");
    assert_eq!(r.sent + r.gen_unsent, 5_000, "{r:?}");
    assert_eq!((r.received, r.lost), (r.sent, 0), "{r:?}");
}
