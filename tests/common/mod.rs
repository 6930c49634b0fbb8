//! What the end-to-end tests of the `dataplane` CLI share (tests/operate_e2e.rs,
//! tests/health_drain_e2e.rs, tests/nat_logging.rs, tests/nat_lookup.rs), so they start, watch
//! and stop a run one way: a run in the background as an operator has it ([`Run`]: its own
//! telemetry prefix and runtime directory, `RUNTIME_DIRECTORY`, which nmdp and
//! `dpdk-telemetry.py` both honour, so tests run in parallel without meeting), a run to its end
//! in one go ([`run_to_end`]), and the frames of the pcaps runs write ([`pcap_frames`]); and a
//! command that must succeed ([`succeeded`]), which tests/calibrate.rs, tests/model_e2e.rs and
//! tests/nat_bidir.rs use too.
// Each test file uses a part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use dataplane::telemetry::client::TelemetryClient;
use serde_json::Value;

/// How long anything a test waits for may take before the test fails (generous: the machine is
/// shared and the binary is a debug build).
pub const PATIENCE: Duration = Duration::from_secs(120);

/// A shipped config, `configs/<name>`.
pub fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name)
}

/// An empty scratch directory of this test process, `nmdp-<tag>-<pid>` in the temp dir.
pub fn tmp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nmdp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A counter of a summary or a reply, failing the test when it is not one.
pub fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Runs `cmd` to its end, which must succeed (else the test fails with its stderr); its output.
pub fn succeeded(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `dataplane run <args> --json -q` to its end, which must succeed; its JSON summary.
pub fn run_to_end(args: &[impl AsRef<OsStr>]) -> Value {
    let out = succeeded(
        Command::new(env!("CARGO_BIN_EXE_dataplane"))
            .arg("run")
            .args(args)
            .args(["--json", "-q"]),
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    })
}

/// The frames of a pcap file (a 24 B file header, then a 16 B header before each frame).
pub fn pcap_frames(path: &Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= d.len() {
        let caplen = u32::from_le_bytes(d[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(d[at + 16..at + 16 + caplen].to_vec());
        at += 16 + caplen;
    }
    out
}

/// A `dataplane run` in the background, in its own process group, with its own telemetry
/// prefix and runtime directory; stdout and stderr go to files in `dir`, which is removed (and
/// the run killed, if it still runs) when it is dropped.
pub struct Run {
    child: Child,
    /// Its telemetry prefix (`dataplane ctl --prefix`, `dpdk-telemetry.py -f`).
    pub prefix: String,
    /// Its runtime directory (`RUNTIME_DIRECTORY`), which holds the socket.
    pub rt: PathBuf,
    /// Its scratch directory: stdout, stderr and whatever the test puts there.
    pub dir: PathBuf,
}

impl Run {
    /// The scratch directory of the run [`Run::start`] starts as `name` (so its arguments can
    /// name files there).
    pub fn dir_of(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("nmdp-run-{name}-{}", std::process::id()))
    }

    /// Starts `dataplane run <args>` with telemetry prefix `<name>-<pid>` in a new, empty
    /// [`Run::dir_of`] `name`.
    pub fn start(name: &str, args: &[impl AsRef<OsStr>]) -> Run {
        let prefix = format!("{name}-{}", std::process::id());
        let dir = Run::dir_of(name);
        let _ = std::fs::remove_dir_all(&dir);
        let rt = dir.join("rt");
        std::fs::create_dir_all(&rt).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_dataplane"))
            .arg("run")
            .args(args)
            .arg("--set")
            .arg(format!("run.telemetry_prefix=\"{prefix}\""))
            .env("RUNTIME_DIRECTORY", &rt)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
            .process_group(0)
            .spawn()
            .expect("dataplane starts");
        Run {
            child,
            prefix,
            rt,
            dir,
        }
    }

    /// What the run has written to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// Its telemetry socket.
    pub fn socket(&self) -> PathBuf {
        self.rt
            .join("dpdk")
            .join(&self.prefix)
            .join("dpdk_telemetry.v2")
    }

    /// A client of the run's telemetry socket, once it is up.
    pub fn client(&mut self) -> TelemetryClient {
        let t0 = Instant::now();
        loop {
            if let Ok(c) = TelemetryClient::connect(&self.socket()) {
                return c;
            }
            self.still_running();
            assert!(t0.elapsed() < PATIENCE, "no socket:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asks `cmd` on the socket until `done` holds for its reply's value; returns that value.
    pub fn wait_for(&mut self, cmd: &str, done: impl Fn(&Value) -> bool) -> Value {
        let name = cmd.split(',').next().unwrap();
        let t0 = Instant::now();
        loop {
            if let Ok(mut c) = TelemetryClient::connect(&self.socket())
                && let Ok(r) = c.request(cmd)
            {
                let v = r[name].clone();
                if done(&v) {
                    return v;
                }
            }
            self.still_running();
            assert!(
                t0.elapsed() < PATIENCE,
                "{cmd} never got there:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Fails the test when the run has ended.
    fn still_running(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("the run ended ({st}):\n{}", self.stderr());
        }
    }

    /// `dataplane ctl --prefix <prefix> <args>`: exit code, stdout, stderr.
    pub fn ctl(&self, args: &[&str]) -> (i32, String, String) {
        let o = Command::new(env!("CARGO_BIN_EXE_dataplane"))
            .args(["ctl", "--prefix", &self.prefix])
            .args(args)
            .env("RUNTIME_DIRECTORY", &self.rt)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    /// Sends signal `sig` (`INT`, `TERM`) to the run.
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args(["-s", sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Waits for the run to end: its status, stdout and stderr (`dir` stays until the drop).
    pub fn finish(&mut self) -> (ExitStatus, String, String) {
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
        let out = std::fs::read_to_string(self.dir.join("stdout")).unwrap_or_default();
        (st, out, self.stderr())
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
