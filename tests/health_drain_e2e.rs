//! Health and instance drain of a live `dataplane run` (issue 20, docs/scale-out.md), through
//! `dataplane ctl` and the telemetry socket as a routing daemon's health agent uses them:
//! `health` exits 0 while the run is healthy, `drain` turns it to `draining` at once (so the
//! agent withdraws the announcement) while traffic is still served, and the run stops
//! `run.instance_drain_s` later the way any run stops: summary printed, exports written, exit
//! status 0.
//!
//! Each test starts the CLI with its own telemetry prefix and runtime directory
//! (`RUNTIME_DIRECTORY`), so tests run in parallel without meeting.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use dataplane::telemetry::client::TelemetryClient;
use serde_json::Value;

/// How long anything a test waits for may take before the test fails (generous: the machine is
/// shared and the binary is a debug build).
const PATIENCE: Duration = Duration::from_secs(120);

struct Run {
    child: Child,
    rt: PathBuf,
    prefix: String,
    dir: PathBuf,
}

impl Run {
    /// `dataplane run configs/lb.toml` until stopped, with `sets`; stdout and stderr to files.
    fn start(name: &str, sets: &[&str]) -> Run {
        let prefix = format!("hd-{name}-{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("nmdp-{prefix}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let rt = dir.join("rt");
        std::fs::create_dir_all(&rt).unwrap();
        let cfg = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/lb.toml");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dataplane"));
        cmd.arg("run")
            .arg(cfg)
            .args(["--duration", "0", "--packets", "0", "--json"])
            .arg("--tx-pcap")
            .arg(dir.join("tx.pcap"))
            .args(["--set", &format!("run.telemetry_prefix=\"{prefix}\"")])
            .args(["--set", "traffic.rate_gbps=0.05"]);
        for s in sets {
            cmd.args(["--set", s]);
        }
        let child = cmd
            .env("RUNTIME_DIRECTORY", &rt)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("out.json")).unwrap())
            .stderr(std::fs::File::create(dir.join("err.log")).unwrap())
            .spawn()
            .expect("dataplane starts");
        Run {
            child,
            rt,
            prefix,
            dir,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("err.log")).unwrap_or_default()
    }

    /// `dataplane ctl --prefix <prefix> <args>`.
    fn ctl(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_dataplane"))
            .args(["ctl", "--prefix", &self.prefix])
            .args(args)
            .env("RUNTIME_DIRECTORY", &self.rt)
            .output()
            .unwrap()
    }

    /// Asks `cmd` on the socket until `done` holds for the reply's value.
    fn wait_for(&mut self, cmd: &str, done: impl Fn(&Value) -> bool) -> Value {
        let path = self
            .rt
            .join("dpdk")
            .join(&self.prefix)
            .join("dpdk_telemetry.v2");
        let t0 = Instant::now();
        loop {
            if let Ok(mut c) = TelemetryClient::connect(&path)
                && let Ok(r) = c.request(cmd)
            {
                let v = r[cmd.split(',').next().unwrap()].clone();
                if done(&v) {
                    return v;
                }
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("the run ended ({st}):\n{}", self.stderr());
            }
            assert!(
                t0.elapsed() < PATIENCE,
                "{cmd} never got there:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the run to end: its exit code, JSON summary, stderr and the frames of its
    /// `--tx-pcap` capture.
    fn finish(mut self) -> (Option<i32>, Value, String, u64) {
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if t0.elapsed() > PATIENCE {
                let _ = self.child.kill();
                panic!("the run did not end:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = std::fs::read_to_string(self.dir.join("out.json")).unwrap();
        let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let pcap = std::fs::read(self.dir.join("tx.pcap")).unwrap_or_default();
        (st.code(), v, self.stderr(), pcap_frames(&pcap))
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Frames in a pcap file (16 B record headers after the 24 B file header).
fn pcap_frames(bytes: &[u8]) -> u64 {
    let mut off = 24;
    let mut frames = 0;
    while off + 16 <= bytes.len() {
        let caplen = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16 + caplen;
        frames += 1;
    }
    frames
}

#[test]
fn health_is_healthy_then_drain_withdraws_first_serves_on_and_stops_cleanly() {
    let mut run = Run::start("drain", &["run.instance_drain_s=3"]);
    run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > 1000);
    let ok = run.ctl(&["health"]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    let out = text(&ok.stdout);
    assert!(out.contains("status: healthy"), "{out}");
    // The socket answers the same in JSON.
    let h = run.wait_for("/nmdp/health", |_| true);
    assert_eq!(h["status"], "healthy");
    assert_eq!(h["reasons"], serde_json::json!([]));
    assert_eq!(h["workers/worker"], serde_json::json!([0]));

    // A bad drain is refused and changes nothing.
    let bad = run.ctl(&["drain", "soon"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(text(&bad.stderr).contains("not a number of seconds"));
    assert_eq!(run.ctl(&["health"]).status.code(), Some(0));

    let asked = Instant::now();
    let d = run.ctl(&["drain"]);
    assert_eq!(d.status.code(), Some(0), "{}", text(&d.stderr));
    assert!(text(&d.stdout).contains("status: draining"));
    // Draining at once: the health agent withdraws on this exit status.
    let h = run.ctl(&["health"]);
    assert_eq!(h.status.code(), Some(1));
    assert!(text(&h.stdout).contains("status: draining"), "{h:?}");
    assert!(
        text(&h.stderr).starts_with("error: draining: dataplane ctl drain: the run stops in"),
        "{}",
        text(&h.stderr)
    );
    // ... and still serving.
    let before = n(&run.wait_for("/nmdp/summary", |_| true)["packets_tx"]);
    run.wait_for("/nmdp/summary", |s| n(&s["packets_tx"]) > before + 500);
    let health = run.wait_for("/nmdp/health", |_| true);
    assert_eq!(health["status"], "draining");
    assert!(n(&health["drain_remaining_ms"]) <= 3000);

    let (code, s, err, captured) = run.finish();
    // It did not stop before its drain time.
    assert!(asked.elapsed() >= Duration::from_secs(3));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(s["stopped_by"], "drain");
    assert!(err.contains("drained: stopping"), "{err}");
    assert!(err.contains("summary:"), "the text summary: {err}");
    // Every received packet was sent (the LB forwards all), and the capture holds them all.
    assert_eq!(s["packets_rx"], s["packets_tx"], "{s}");
    assert_eq!(captured, n(&s["packets_tx"]));
}

#[test]
fn a_second_drain_shortens_the_first() {
    let mut run = Run::start("short", &["run.instance_drain_s=600"]);
    run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > 100);
    assert_eq!(run.ctl(&["drain"]).status.code(), Some(0));
    let h = run.wait_for("/nmdp/health", |_| true);
    assert!(n(&h["drain_remaining_ms"]) > 500_000, "{h}");
    let d = run.ctl(&["--json", "drain", "0.5"]);
    assert_eq!(d.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&d.stdout).unwrap();
    assert!(n(&v["/nmdp/drain"]["stop_in_ms"]) <= 500, "{v}");
    let (code, s, err, _) = run.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(s["stopped_by"], "drain");
}
