//! End-to-end tests of `dataplane` against hostile input: values, files and paths a careless or
//! malicious user may give. Each gets a clear error (rc 2, naming the file or key and what is
//! allowed) or a counted, explained outcome; nothing panics, hangs or vanishes.

use std::path::PathBuf;
use std::process::{Command, Output};

fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name)
}

/// Runs the `dataplane` binary with `args`.
fn dataplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(args)
        .output()
        .unwrap()
}

/// `dataplane run configs/default.toml` with `args` after it.
fn run_default(args: &[&str]) -> Output {
    let cfg = config("default.toml");
    let mut all = vec!["run", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    dataplane(&all)
}

/// Asserts a clean refusal: rc 2, nothing on stdout, and stderr containing every `want`.
fn assert_refused(out: &Output, want: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(out.stdout.is_empty(), "nothing ran; stderr: {err}");
    for w in want {
        assert!(err.contains(w), "missing `{w}` in: {err}");
    }
}

/// Durations that do not fit a `Duration` once panicked the run after the config was accepted.
#[test]
fn huge_durations_are_config_errors() {
    for (set, key) in [
        ("run.drain_timeout_s=1e20", "run.drain_timeout_s"),
        ("run.stats_interval_s=1e300", "run.stats_interval_s"),
        ("run.duration_s=1e300", "run.duration_s"),
    ] {
        let out = run_default(&["--packets", "100", "-q", "--json", "--set", set]);
        assert_refused(&out, &["default.toml", key, "allowed 0..="]);
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nmdp-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// A config or profile path that is a device or a huge file is refused before it is read to the
/// end (`/dev/zero` once read until memory ran out; a 2 MiB file of comments ran as defaults).
#[test]
fn config_files_that_are_not_small_regular_files_are_refused() {
    let big = tmp("big.toml");
    std::fs::write(&big, "#".repeat(2 << 20)).unwrap();
    let out = dataplane(&["run", big.to_str().unwrap(), "--packets", "10", "-q"]);
    assert_refused(&out, &["big.toml", "2097152 bytes is larger than"]);
    if std::path::Path::new("/dev/zero").exists() {
        let out = dataplane(&["run", "/dev/zero", "--packets", "10", "-q"]);
        assert_refused(&out, &["/dev/zero", "not a regular file"]);
        let out = run_default(&[
            "--packets",
            "10",
            "-q",
            "--set",
            "nic.profile=\"/dev/zero\"",
        ]);
        assert_refused(&out, &["nic.profile", "/dev/zero", "not a regular file"]);
        let out = dataplane(&[
            "model",
            "--profile",
            "/dev/zero",
            "--mode",
            "host",
            "--frame-size",
            "64",
        ]);
        assert_refused(&out, &["/dev/zero", "not a regular file"]);
    }
    let out = dataplane(&["run", std::env::temp_dir().to_str().unwrap(), "-q"]);
    assert_refused(&out, &["a directory"]);
}

/// Sizes the per-key checks accept but no machine can hold are refused before anything is
/// allocated, naming the key, what it needs and what the machine has (they once aborted in the
/// allocator or panicked with a `LayoutError`).
#[test]
fn sizes_no_machine_can_hold_are_refused_up_front() {
    for (sets, key) in [
        (vec!["vnic.cache_size=1000000000000"], "vnic.cache_size"),
        (vec!["vnic.nicmem=\"1048576GiB\""], "vnic.nicmem"),
        (vec!["vnic.nicmem=\"18446744073709551615\""], "vnic.nicmem"),
        (
            vec![
                "run.workers=64",
                "pipeline=[{name=\"nat\", flows=68719476736}]",
            ],
            "pipeline[0].flows",
        ),
    ] {
        let mut args = vec!["--packets", "100", "-q", "--json"];
        for s in &sets {
            args.extend(["--set", s]);
        }
        let out = run_default(&args);
        assert_refused(
            &out,
            &["default.toml", key, "of host memory", "this machine has"],
        );
    }
}
