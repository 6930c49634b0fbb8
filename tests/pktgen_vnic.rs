//! pktgen against the virtual NIC: the `VnicDut` glue (trial counts, loss attribution), the
//! RFC 2544 NDR/PDR search in deterministic virtual time (same answer twice; host mode bounded
//! below line rate by PCIe at 1518 B, nic-inline at line rate), a sweep through the factory,
//! and the `pktgen` CLI.

use std::path::{Path, PathBuf};
use std::process::Command;

use nmdp::dut::{Clock, DutOptions, Timing, VnicDut, VnicFactory, dut_from_spec};
use pktgen::search::{SearchConfig, SearchGoal, TrialSettings, mlr_search};
use pktgen::sweep::{NoProgress, SweepSpec, run_sweep};
use pktgen::trial::{Dut, TrialSpec};

fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name)
}

fn dut(sets: &[&str]) -> VnicDut {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    VnicDut::new(&config("default.toml"), &sets, DutOptions::default()).unwrap()
}

fn search(d: &mut VnicDut, frame_size: u32) -> pktgen::search::SearchResult {
    let settings = TrialSettings {
        drain_s: 0.0,
        traffic: pktgen::GeneratorConfig {
            frame_size,
            ..d.traffic().clone()
        },
        ..Default::default()
    };
    let timing = SearchGoal {
        exceed_ratio: 0.0,
        width: 0.005,
        initial_trial_duration_s: 0.001,
        final_trial_duration_s: 0.005,
        duration_sum_s: 0.005,
        ..Default::default()
    };
    let cfg = SearchConfig {
        goals: SearchGoal::ndr_pdr(0.005, &timing),
        ..Default::default()
    };
    mlr_search(d, &settings, &cfg, &mut |_| {}).unwrap()
}

#[test]
fn a_trial_sends_the_frames_and_reads_the_summary_after_the_drain() {
    let mut d = dut(&[]);
    let spec = TrialSpec {
        rate_pps: 1e6,
        frames: Some(2000),
        traffic: pktgen::GeneratorConfig {
            frame_size: 512,
            ..d.traffic().clone()
        },
        ..Default::default()
    };
    let r = d.trial(&spec).unwrap();
    assert_eq!(
        (r.intended, r.sent, r.received, r.lost),
        (2000, 2000, 2000, 0)
    );
    assert_eq!((r.duplicates, r.reordered, r.payload_mismatches), (0, 0, 0));
    assert_eq!(r.gen_unsent, 0);
    assert_eq!(r.frame_size, 512.0);
    assert_eq!(r.attribution.unattributed, 0);
    // The wall-clock fields are not in the record.
    assert!(r.dut.get("elapsed_s").is_none());
    assert_eq!(r.dut["traffic"]["sent"], 2000);
    if d.timing() == Timing::Timed(Clock::Virtual) {
        assert!(r.deterministic);
        assert!(r.latency.is_some());
        assert_eq!(r.dut["clock"], "virtual");
    }
}

#[test]
fn ndr_search_on_the_vnic_is_deterministic_and_names_the_bound() {
    let mut host = dut(&["datapath.mode=host"]);
    if host.timing() != Timing::Timed(Clock::Virtual) {
        eprintln!("no timing model: functional trials only, skipping the rate checks");
        return;
    }
    let a = search(&mut host, 1518);
    let b = search(&mut dut(&["datapath.mode=host"]), 1518);
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap(),
        "two runs, same answer"
    );
    assert!(a.deterministic);
    assert!(a.goals[0].regular, "{:?}", a.goals[0]);
    // PDR 0.5 %: host mode loses less than that at line rate, so the maximum load meets it and
    // the result is irregular (RFC 9971 §4.8.4), saying so.
    let pdr = &a.goals[1];
    assert!(
        pdr.regular || pdr.irregular.as_deref().unwrap().contains("maximum load"),
        "{pdr:?}"
    );
    assert!(a.reused_trials == 0 || a.measured_trial_s < a.total_trial_s);
    let line = a.line_rate_pps;
    let ndr = &a.goals[0];
    let n = ndr.relevant_lower_bound_pps.unwrap();
    // host mode at 1518 B: below line rate, bounded by PCIe, drops attributed to the overrun.
    assert!(n < line, "host NDR {n} vs line {line}");
    assert!(ndr.relevant_upper_bound_pps.is_some());
    assert_eq!(ndr.bottleneck.as_deref(), Some("pcie_up"), "{ndr:?}");
    let lost_at = ndr.loss_at_upper.as_ref().unwrap();
    assert_eq!(lost_at.unattributed, 0, "{lost_at:?}");

    let inline = search(&mut dut(&["datapath.mode=nic-inline"]), 1518);
    let n = inline.goals[0].relevant_lower_bound_pps.unwrap();
    assert!(n >= line * 0.99, "nic-inline NDR {n} vs line {line}");
}

#[test]
fn sweep_through_the_vnic_factory() {
    let spec: SweepSpec = toml::from_str(&format!(
        r#"
        dut = "{}"
        test = "trial"
        trial_s = 0.0002
        rate_percent = 10
        [[axis]]
        key = "frame_size"
        values = [128, 1024]
        [[axis]]
        key = "mode"
        values = ["split", "nic-inline"]
        [plot]
        disabled = true
        "#,
        config("default.toml").display()
    ))
    .unwrap();
    let r = run_sweep(&spec, &mut VnicFactory::default(), &mut NoProgress).unwrap();
    assert_eq!(r.rows.len(), 4);
    for row in &r.rows {
        assert!(
            row.dut.contains(row.point["mode"].as_str().unwrap()),
            "{}",
            row.dut
        );
        assert_eq!(row.loss_at_max, Some(0.0));
        assert!(row.ndr_pps.unwrap() > 0.0);
    }
    assert_eq!(r.rows[3].frame_size, 1024.0);
    assert_eq!(r.to_csv().lines().count(), 5);

    // An axis the DUT does not know is rejected with the allowed keys.
    let bad: SweepSpec = toml::from_str(&format!(
        "dut = \"{}\"\n[[axis]]\nkey = \"colour\"\nvalues = [1]\n",
        config("default.toml").display()
    ))
    .unwrap();
    let e = run_sweep(&bad, &mut VnicFactory::default(), &mut NoProgress).unwrap_err();
    assert!(e.0.contains("colour") && e.0.contains("rx_ring"), "{e}");
}

#[test]
fn sim_duts_from_the_command_line_spelling() {
    let mut d = dut_from_spec(
        "sim:capacity_pps=1000000,drop_every=4,line_bps=1e9",
        &[],
        DutOptions::default(),
    )
    .unwrap();
    let r = d
        .trial(&TrialSpec {
            rate_pps: 5e5,
            frames: Some(1000),
            drain_s: 0.01,
            ..Default::default()
        })
        .unwrap();
    assert_eq!((r.sent, r.lost), (1000, 250));
    assert!(dut_from_spec("sim:colour=1", &[], DutOptions::default()).is_err());
    assert!(dut_from_spec("/no/such/config.toml", &[], DutOptions::default()).is_err());
}

fn pktgen(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_rfc2544_json_is_identical_across_runs() {
    let args = [
        "rfc2544",
        "--dut",
        "configs/default.toml",
        "--sizes",
        "1518",
        "--mode",
        "host",
        "--preset",
        "quick",
        "--initial-trial",
        "0.0002",
        "--final-trial",
        "0.0005",
        "--json",
    ];
    let (ok, a, err) = pktgen(&args);
    assert!(ok, "{err}");
    let (_, b, _) = pktgen(&args);
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    assert_eq!(v["results"][0]["frame_size"], 1518.0);
    assert!(
        v["results"][0]["ndr_pdr"]["goals"][0]["relevant_lower_bound_pps"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(err.contains("NDR") && err.contains("PDR"), "{err}");
    if v["deterministic"] == true {
        assert_eq!(a, b);
    }
    let (ok, _, err) = pktgen(&["rfc2544", "--dut", "configs/default.toml", "--tests", "ndr"]);
    assert!(!ok && err.contains("back-to-back"), "{err}");
    // Real-time priority is for wall-clock trials only, and within SCHED_FIFO's range; both are
    // refused before any trial runs.
    let (ok, _, err) = pktgen(&[
        "rfc2544",
        "--dut",
        "configs/io-fwd.toml",
        "--rt-priority",
        "50",
    ]);
    assert!(!ok && err.contains("--clock wall"), "{err}");
    let (ok, _, err) = pktgen(&[
        "rfc2544",
        "--dut",
        "configs/io-fwd.toml",
        "--clock",
        "wall",
        "--rt-priority",
        "100",
    ]);
    assert!(!ok && err.contains("allowed 1..=99"), "{err}");
}

#[test]
fn cli_gen_writes_a_pcap_the_sink_accepts() {
    let dir = std::env::temp_dir().join(format!("nmdp-pktgen-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("imix.pcap");
    let (ok, _, err) = pktgen(&[
        "gen",
        "--size-mix",
        "imix",
        "--flows",
        "100",
        "--count",
        "1200",
        "--rate",
        "10Gbps",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let frames = dataplane::pcap::read_all(&out).unwrap();
    assert_eq!(frames.len(), 1200);
    let by_len = |n: usize| frames.iter().filter(|f| f.len() == n).count();
    assert_eq!((by_len(60), by_len(590), by_len(1514)), (700, 400, 100));
    let mut sink = pktgen::CheckingSink::new(None);
    for f in &frames {
        sink.check(f);
    }
    let s = sink.counters();
    sink.publish();
    assert_eq!(s.stream(0).unique, 1200);
    assert_eq!(s.stream(0).payload_mismatches, 0);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(Path::new(env!("CARGO_BIN_EXE_pktgen")).exists());
}

#[test]
fn the_trial_clock_is_the_one_the_user_chose() {
    let cfg = config("default.toml");
    let spec = |d: &VnicDut| TrialSpec {
        rate_pps: 2e5,
        frames: Some(2000),
        traffic: d.traffic().clone(),
        ..Default::default()
    };
    // Neither --clock nor --set run.clock: virtual time, CPU cost from the profile (the
    // config file's own `run.clock = "wall"` is for `dataplane run`).
    let mut d = VnicDut::new(&cfg, &[], DutOptions::default()).unwrap();
    assert_eq!(d.timing(), Timing::Timed(Clock::Virtual));
    let info = d.info();
    assert_eq!(info.clock, "virtual");
    assert!(info.cpu_cost.contains("host.cycles"), "{info:?}");
    assert_eq!(
        info.profile.as_deref(),
        Some("ConnectX-5 100GbE, PCIe Gen3 x16")
    );
    assert_eq!(
        (info.mode.as_deref(), info.workers),
        (Some("nic-inline"), Some(1))
    );
    let r = d.trial(&spec(&d)).unwrap();
    assert_eq!(r.dut["clock"], "virtual");
    assert!(r.deterministic && d.repeatable());

    // --clock wall: the real code on this machine, measured in wall time.
    let wall = DutOptions {
        clock: Some(Clock::Wall),
        ..Default::default()
    };
    let mut d = VnicDut::new(&cfg, &[], wall).unwrap();
    assert_eq!(d.timing(), Timing::Timed(Clock::Wall));
    assert!(d.info().cpu_cost.starts_with("measured"), "{:?}", d.info());
    let r = d.trial(&spec(&d)).unwrap();
    assert_eq!(r.dut["clock"], "wall");
    assert!(!r.deterministic && !d.deterministic() && !d.repeatable());
    assert_eq!(r.sent, 2000);

    // A clock set with --set is honoured, never replaced.
    let sets = vec!["run.clock=wall".to_string()];
    let mut d = VnicDut::new(&cfg, &sets, DutOptions::default()).unwrap();
    assert_eq!(d.timing(), Timing::Timed(Clock::Wall));
    assert!(
        d.trial_sets(&spec(&d))
            .iter()
            .all(|s| s != "run.clock=virtual")
    );
    assert_eq!(d.trial(&spec(&d)).unwrap().dut["clock"], "wall");
    let sets = vec!["run.clock=virtual".to_string()];
    let d = VnicDut::new(&cfg, &sets, DutOptions::default()).unwrap();
    assert_eq!(d.timing(), Timing::Timed(Clock::Virtual));
    // Both, disagreeing: an error naming both.
    let sets = vec!["run.clock=virtual".to_string()];
    let e = VnicDut::new(&cfg, &sets, wall).unwrap_err();
    assert!(
        e.0.contains("--clock wall") && e.0.contains("run.clock=virtual"),
        "{e}"
    );
    // A warm-up before a trial of a fresh dataplane prepares nothing: refused, not ignored.
    let mut d = VnicDut::new(&cfg, &[], DutOptions::default()).unwrap();
    assert!(!d.keeps_state_between_trials());
    let e = d
        .trial(&TrialSpec {
            warmup_s: 0.001,
            ..spec(&d)
        })
        .unwrap_err();
    assert!(e.0.contains("warm-up"), "{e}");
}

#[test]
fn every_latency_record_of_a_vnic_search_is_consistent() {
    for mode in ["host", "nic-inline"] {
        let mut d = dut(&[&format!("datapath.mode={mode}")]);
        let r = search(&mut d, 1518);
        let mut n = 0;
        for l in r
            .trials
            .iter()
            .filter_map(|t| t.result.latency)
            .chain(r.goals.iter().filter_map(|g| g.latency))
        {
            n += 1;
            assert!(
                l.min_ns <= l.p50_ns
                    && l.p50_ns <= l.p90_ns
                    && l.p90_ns <= l.p99_ns
                    && l.p99_ns <= l.max_ns,
                "{mode}: {l:?}"
            );
            assert!(
                l.min_ns as f64 <= l.mean_ns && l.mean_ns <= l.max_ns as f64,
                "{mode}: {l:?}"
            );
        }
        assert!(
            n >= r.trials.len(),
            "{mode}: only {n} latency records for {} trials",
            r.trials.len()
        );
    }
}

#[test]
fn cli_rfc2544_with_the_wall_clock_reports_it() {
    let (ok, out, err) = pktgen(&[
        "rfc2544",
        "--dut",
        "configs/default.toml",
        "--clock",
        "wall",
        "--preset",
        "quick",
        "--sizes",
        "1518",
        "--initial-trial",
        "0.0002",
        "--final-trial",
        "0.0005",
        "--json",
        "--quiet",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["deterministic"], false);
    assert_eq!(v["dut_info"][0]["clock"], "wall");
    let r = &v["results"][0];
    assert_eq!(r["clock"], "wall");
    assert_eq!(r["frame_size"], 1518.0);
    assert!(
        r["cpu_cost"].as_str().unwrap().starts_with("measured"),
        "{r}"
    );
    assert!(err.contains("clock wall"), "{err}");
    // A user's --set run.clock=wall is honoured the same way.
    let (ok, out, err) = pktgen(&[
        "rfc2544",
        "--dut",
        "configs/default.toml",
        "--set",
        "run.clock=wall",
        "--preset",
        "quick",
        "--final-trial",
        "0.0005",
        "--tests",
        "loss",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["results"][0]["clock"], "wall");
    // The loss table is in the text report, frame counts as integers.
    assert!(
        err.contains("frame loss rate") && err.contains("load %"),
        "{err}"
    );
    assert!(v["results"][0]["frame_loss_rate"][0]["sent"].is_u64());
}

/// Runs pktgen and checks it failed with exit code 2 and an error naming `want`.
fn refused(args: &[&str], want: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_pktgen"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: `{want}` not in: {err}");
}

#[test]
fn hostile_pktgen_inputs_get_clear_errors() {
    let sim = "sim:capacity_pps=1e7,drop_every=1000";
    let base = [
        "rfc2544", "--dut", sim, "--sizes", "64", "--preset", "quick",
    ];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    // Trial durations that would never end, or are not numbers: the option is named.
    for v in ["1e300", "inf", "nan", "0", "-1"] {
        refused(&with(&["--final-trial", v]), "--final-trial");
    }
    refused(&with(&["--initial-trial", "nan"]), "--initial-trial");
    refused(&with(&["--duration-sum", "inf"]), "--duration-sum");
    refused(
        &with(&["--initial-trial", "0.5", "--final-trial", "0.1"]),
        "--initial-trial",
    );
    refused(&with(&["--exceed", "1"]), "--exceed");
    refused(&with(&["--width", "0"]), "--width");
    refused(&with(&["--pdr", "-0.1"]), "--pdr");
    refused(&with(&["--reps", "0"]), "--reps");
    refused(&with(&["--warmup", "-1"]), "--warmup");
    refused(&with(&["--warmup", "nan"]), "--warmup");
    refused(&["rfc2544", "--dut", sim, "--preset", "fast"], "quick");
    refused(&with(&["--clock", "sundial"]), "--clock");
    refused(&with(&["--clock", "wall"]), "virtual time");
    refused(&with(&["--line-gbps", "-5"]), "--line-gbps");
    // A sim DUT without capacity is not an unlimited one.
    for cap in ["0", "-1", "nan"] {
        let dut = format!("sim:capacity_pps={cap}");
        refused(
            &["rfc2544", "--dut", &dut, "--preset", "quick"],
            "capacity_pps",
        );
    }
    // A rate above the line rate.
    refused(
        &["gen", "--rate", "200%", "-o", "/tmp/nmdp-never.pcap"],
        "200%",
    );
    // Sweeps: an axis swept twice, a plot key that does not exist.
    let dir = std::env::temp_dir().join(format!("nmdp-hostile-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dup = dir.join("dup.toml");
    std::fs::write(
        &dup,
        "dut = \"sim\"\n[[axis]]\nkey = \"frame_size\"\nvalues = [64]\n\
         [[axis]]\nkey = \"frame_size\"\nvalues = [128]\n",
    )
    .unwrap();
    refused(&["sweep", dup.to_str().unwrap()], "swept twice");
    let plot = dir.join("plot.toml");
    std::fs::write(
        &plot,
        "dut = \"sim\"\n[[axis]]\nkey = \"frame_size\"\nvalues = [64]\n[plot]\ncolour = \"red\"\n",
    )
    .unwrap();
    refused(&["sweep", plot.to_str().unwrap()], "colour");
    std::fs::write(
        &plot,
        "dut = \"sim\"\n[[axis]]\nkey = \"frame_size\"\nvalues = [64]\n[plot]\nx = \"cores\"\n",
    )
    .unwrap();
    refused(&["sweep", plot.to_str().unwrap()], "plot.x");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sweeps_keep_the_duts_traffic_and_measure_loss_at_max_with_a_final_trial() {
    // configs/default.toml says frame_size = 1518: a sweep that does not name the frame size
    // runs at 1518 B, one that sweeps it runs at its values.
    let spec = |axes: &str| -> SweepSpec {
        toml::from_str(&format!(
            "dut = \"{}\"\n{axes}\n[search]\npreset = \"quick\"\n[plot]\ndisabled = true\n",
            config("default.toml").display()
        ))
        .unwrap()
    };
    let r = run_sweep(
        &spec("[[axis]]\nkey = \"mode\"\nvalues = [\"host\"]"),
        &mut VnicFactory::default(),
        &mut NoProgress,
    )
    .unwrap();
    let row = &r.rows[0];
    assert_eq!(row.frame_size, 1518.0);
    assert_eq!(row.flows, 1024);
    assert_eq!(row.dut_info.clock, "virtual");
    assert!(
        r.to_csv().lines().nth(1).unwrap().contains(",1518,"),
        "{}",
        r.to_csv()
    );
    // The loss at the maximum load is that of a 10 ms (final-duration) trial at line rate, not
    // of a short trial whose overload the rings absorb.
    let mut d = dut(&["datapath.mode=host"]);
    let line = d.line_rate_pps(1518.0);
    let direct = d
        .trial(&TrialSpec {
            rate_pps: line,
            duration_s: 0.01,
            drain_s: 0.01,
            traffic: pktgen::GeneratorConfig {
                frame_size: 1518,
                ..d.traffic().clone()
            },
            ..Default::default()
        })
        .unwrap();
    assert!(direct.loss_ratio() > 0.0, "host mode loses at line rate");
    assert_eq!(row.loss_at_max, Some(direct.loss_ratio()));
    // Latency at the NDR and at 90 % of it, with the loads.
    let ndr = row.ndr_pps.unwrap();
    assert_eq!(row.latency_load_pps, Some(ndr));
    assert!((row.latency90_load_pps.unwrap() - 0.9 * ndr).abs() < 1e-6);
    assert!(row.latency90_p50_ns.unwrap() <= row.latency90_p99_ns.unwrap());

    let r = run_sweep(
        &spec("[[axis]]\nkey = \"frame_size\"\nvalues = [256]"),
        &mut VnicFactory::default(),
        &mut NoProgress,
    )
    .unwrap();
    assert_eq!(r.rows[0].frame_size, 256.0);
}

/// A DUT builds its NF chains once and resets them between trials (tables built once per
/// process), and every trial still gives the JSON a DUT with chains built for that trial alone
/// gives: trials stay independent and deterministic, in any order, at any size.
#[test]
fn trials_reuse_the_nf_chains_and_give_the_same_json() {
    let dir = std::env::temp_dir().join(format!("nmdp-kept-chains-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("nat-lb.toml");
    std::fs::write(
        &cfg,
        "[vnic]\nnicmem = \"256KiB\"\n\
         [traffic]\nflows = 3000\ndst_ip_count = 4\n\
         [[pipeline]]\nname = \"nat\"\nflows = 2048\nport_max = 1600\n\
         [[pipeline]]\nname = \"flow_counter\"\nflows = 4096\n\
         [[pipeline]]\nname = \"lb\"\nflows = 4096\nnon_vip = \"forward\"\n",
    )
    .unwrap();
    let mut kept = VnicDut::new(&cfg, &[], DutOptions::default()).unwrap();
    let spec = |rate_pps: f64, frames: u64, frame_size: u32| TrialSpec {
        rate_pps,
        frames: Some(frames),
        traffic: pktgen::GeneratorConfig {
            frame_size,
            ..kept.traffic().clone()
        },
        ..Default::default()
    };
    let specs = [
        spec(2e5, 3000, 64),
        spec(4e6, 4000, 512),
        spec(1e5, 1500, 1518),
        spec(2e5, 3000, 64),
    ];
    let mut first = None;
    for (i, s) in specs.iter().enumerate() {
        let got = kept.trial(s).unwrap();
        let mut fresh = VnicDut::new(&cfg, &[], DutOptions::default()).unwrap();
        let want = fresh.trial(s).unwrap();
        assert_eq!(fresh.chains().built(), 1);
        assert!(
            want.dut["nfs"]["nat"]["new_mappings"].as_u64().unwrap() > 0,
            "trial {i} creates sessions: {}",
            want.dut["nfs"]["nat"]
        );
        assert_eq!(
            serde_json::to_value(&got).unwrap(),
            serde_json::to_value(&want).unwrap(),
            "trial {i}: kept chains give another result than fresh ones"
        );
        first.get_or_insert(got);
    }
    // The last trial repeats the first, three trials later: the same result.
    let last = kept.trial(&specs[3]).unwrap();
    assert_eq!(Some(last), first);
    assert_eq!(
        (kept.chains().built(), kept.chains().reused()),
        (1, specs.len() as u64),
        "one chain built, reset for every later trial"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cli_rfc2544_says_when_trials_were_generator_limited() {
    // The generator tops out at 5 Mpps, the line at 14.88 Mpps: the trials above 5 Mpps
    // cannot offer their load, and the text says so next to the trial count.
    let (ok, out, err) = pktgen(&[
        "rfc2544",
        "--dut",
        "sim:line_bps=1e10,capacity_pps=1e7,gen_max_pps=5e6",
        "--sizes",
        "64",
        "--preset",
        "quick",
        "--quiet",
    ]);
    assert!(ok, "{err}");
    // The text report (stdout without --json).
    let line = out
        .lines()
        .find(|l| l.contains("generator-limited") && l.contains("of these trials"))
        .unwrap_or_else(|| panic!("no generator-limited line in: {out}"));
    assert!(line.starts_with("64 B: "), "{line}");
    // The loss at the maximum load is that of the load the generator could offer, and says so.
    let at_max = out
        .lines()
        .find(|l| l.contains("loss at the maximum load"))
        .unwrap_or_else(|| panic!("no loss at the maximum load in: {out}"));
    assert!(
        at_max.contains("offered only 5.0000 Mpps: generator-limited"),
        "{at_max}"
    );
    let n: u32 = line["64 B: ".len()..]
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(n >= 1, "{line}");
    assert!(
        !line.contains("in wall time"),
        "the sim DUT runs in virtual time: {line}"
    );
    // Without a generator limit there is no such line.
    let (ok, out, err) = pktgen(&[
        "rfc2544",
        "--dut",
        "sim:line_bps=1e10,capacity_pps=1e7",
        "--sizes",
        "64",
        "--preset",
        "quick",
        "--quiet",
    ]);
    assert!(ok, "{err}");
    assert!(!out.contains("generator-limited"), "{out}");
}
