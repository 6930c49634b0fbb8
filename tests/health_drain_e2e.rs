//! Health and instance drain of a live `dataplane run` (issue 20, docs/scale-out.md), through
//! `dataplane ctl` and the telemetry socket as a routing daemon's health agent uses them:
//! `health` exits 0 while the run is healthy, `drain` turns it to `draining` at once (so the
//! agent withdraws the announcement) while traffic is still served, and the run stops
//! `run.instance_drain_s` later the way any run stops: summary printed, exports written, exit
//! status 0.
//!
//! Each test starts the CLI with its own telemetry prefix and runtime directory
//! (`RUNTIME_DIRECTORY`, tests/common/mod.rs), so tests run in parallel without meeting.

mod common;

use std::time::{Duration, Instant};

use common::{Run, config, n, pcap_frames};
use serde_json::Value;

/// `dataplane run configs/lb.toml` until stopped, with `sets`, its transmitted frames captured
/// in `<dir>/tx.pcap`.
fn start(name: &str, sets: &[&str]) -> Run {
    let name = format!("hd-{name}");
    let cfg = config("lb.toml");
    let pcap = Run::dir_of(&name).join("tx.pcap");
    let mut args = vec![
        cfg.to_str().unwrap(),
        "--duration",
        "0",
        "--packets",
        "0",
        "--json",
        "--tx-pcap",
        pcap.to_str().unwrap(),
        "--set",
        "traffic.rate_gbps=0.05",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    Run::start(&name, &args)
}

#[test]
fn health_is_healthy_then_drain_withdraws_first_serves_on_and_stops_cleanly() {
    let mut run = start("drain", &["run.instance_drain_s=3"]);
    run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > 1000);
    let (code, out, err) = run.ctl(&["health"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("status: healthy"), "{out}");
    // The socket answers the same in JSON.
    let h = run.wait_for("/nmdp/health", |_| true);
    assert_eq!(h["status"], "healthy");
    assert_eq!(h["reasons"], serde_json::json!([]));
    assert_eq!(h["workers/worker"], serde_json::json!([0]));

    // A bad drain is refused and changes nothing.
    let (code, _, err) = run.ctl(&["drain", "soon"]);
    assert_eq!(code, 1);
    assert!(err.contains("not a number of seconds"));
    assert_eq!(run.ctl(&["health"]).0, 0);

    let asked = Instant::now();
    let (code, out, err) = run.ctl(&["drain"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("status: draining"));
    // Draining at once: the health agent withdraws on this exit status.
    let (code, out, err) = run.ctl(&["health"]);
    assert_eq!(code, 1);
    assert!(out.contains("status: draining"), "{out}");
    assert!(
        err.starts_with("error: draining: dataplane ctl drain: the run stops in"),
        "{err}"
    );
    // ... and still serving.
    let before = n(&run.wait_for("/nmdp/summary", |_| true)["packets_tx"]);
    run.wait_for("/nmdp/summary", |s| n(&s["packets_tx"]) > before + 500);
    let health = run.wait_for("/nmdp/health", |_| true);
    assert_eq!(health["status"], "draining");
    assert!(n(&health["drain_remaining_ms"]) <= 3000);

    let (st, out, err) = run.finish();
    let s: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let captured = pcap_frames(&run.dir.join("tx.pcap")).len() as u64;
    // It did not stop before its drain time.
    assert!(asked.elapsed() >= Duration::from_secs(3));
    assert_eq!(st.code(), Some(0), "{err}");
    assert_eq!(s["stopped_by"], "drain");
    assert!(err.contains("drained: stopping"), "{err}");
    assert!(err.contains("summary:"), "the text summary: {err}");
    // Every received packet was sent (the LB forwards all), and the capture holds them all.
    assert_eq!(s["packets_rx"], s["packets_tx"], "{s}");
    assert_eq!(captured, n(&s["packets_tx"]));
}

#[test]
fn a_second_drain_shortens_the_first() {
    let mut run = start("short", &["run.instance_drain_s=600"]);
    run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > 100);
    assert_eq!(run.ctl(&["drain"]).0, 0);
    let h = run.wait_for("/nmdp/health", |_| true);
    assert!(n(&h["drain_remaining_ms"]) > 500_000, "{h}");
    let (code, out, _) = run.ctl(&["--json", "drain", "0.5"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(n(&v["/nmdp/drain"]["stop_in_ms"]) <= 500, "{v}");
    let (st, out, err) = run.finish();
    assert_eq!(st.code(), Some(0), "{err}");
    let s: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(s["stopped_by"], "drain");
}
