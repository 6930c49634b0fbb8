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

/// Appends one pcap record (little-endian, microsecond timestamps) with explicit lengths.
fn pcap_record(out: &mut Vec<u8>, i: u32, incl: u32, data: &[u8]) {
    out.extend_from_slice(&(1_700_000_000 + i).to_le_bytes());
    out.extend_from_slice(&(1_000 * i).to_le_bytes());
    out.extend_from_slice(&incl.to_le_bytes());
    out.extend_from_slice(&incl.to_le_bytes());
    out.extend_from_slice(data);
}

/// A UDP/IPv4 frame of `len` bytes (at least 42) with recognisable payload bytes.
fn udp_frame(i: u32, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|j| (j as u32 * 7 + i * 31) as u8).collect();
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (len - 14) as u16;
    let mut ip = [
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 192, 168, 1, 2, 10, 9, 0, 1,
    ];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    let sum = !ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum::<u32>()
        .wrapping_rem(0xffff) as u16;
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f[14..34].copy_from_slice(&ip);
    f[34..36].copy_from_slice(&(1000 + i as u16).to_be_bytes());
    f[36..38].copy_from_slice(&80u16.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f[40..42].copy_from_slice(&[0, 0]);
    f
}

/// A hostile capture of 15 records: 7 good frames, runts of 0, 1 and 13 B, intact records of
/// 70 000 and 300 000 B, a header claiming 2 GB, random bytes where a record should be, and a
/// truncated last record.
fn hostile_pcap() -> (Vec<u8>, usize) {
    let mut b = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.truncate(24);
    let mut good = 0;
    for (i, len) in [
        (0u32, 60i64),
        (1, -0),
        (2, 1000),
        (3, -1),
        (4, -13),
        (5, 1514),
        (6, -70_000),
        (7, 61),
        (8, -300_000),
        (9, 128),
        (10, -2_000_000_000),
        (11, 64),
        (12, -1),
        (13, 200),
        (14, -100),
    ] {
        match (i, len) {
            (10, _) => pcap_record(&mut b, i, 2_000_000_000, &udp_frame(i, 60)),
            (12, _) => {
                let mut x = 0x9e37_79b9_7f4a_7c15u64;
                let mut g: Vec<u8> = (0..1000)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                g[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
                b.extend_from_slice(&g);
            }
            (14, _) => pcap_record(&mut b, i, 100, &udp_frame(i, 60)[..30]),
            (_, l) if l > 0 => {
                pcap_record(&mut b, i, l as u32, &udp_frame(i, l as usize));
                good += 1;
            }
            (_, l) => {
                let n = (-l) as usize;
                let data: Vec<u8> = (0..n).map(|j| j as u8).collect();
                pcap_record(&mut b, i, n as u32, &data);
            }
        }
    }
    (b, good)
}

/// Every record of a hostile capture is accounted for in every mode: `wire.rx_frames` plus the
/// `pcap.*` counters equal the 15 records in the file (damaged ones once vanished and a record
/// over 256 KiB ended the file), every frame received is transmitted or counted as a drop, and
/// the summary names the first record not delivered with its byte offset.
#[test]
fn every_record_of_a_hostile_rx_pcap_is_accounted_for() {
    let (bytes, good) = hostile_pcap();
    let input = tmp("hostile.pcap");
    std::fs::write(&input, &bytes).unwrap();
    for mode in ["host", "split", "nic-payload", "nic-inline"] {
        let out = run_default(&[
            "--rx-pcap",
            input.to_str().unwrap(),
            "--mode",
            mode,
            "--json",
            "-q",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{mode}: {err}");
        let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let p = &s["pcap"];
        let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{mode}: {s}"));
        let reasons: Vec<u64> = ["runt", "oversize", "truncated", "damaged"]
            .iter()
            .map(|k| n(&p[*k]))
            .collect();
        assert_eq!(
            reasons,
            [3, 2, 1, 2],
            "{mode}: runt, oversize, truncated, damaged"
        );
        assert_eq!(n(&p["records"]), 15, "{mode}");
        assert_eq!(n(&p["frames"]), good as u64, "{mode}");
        let rx_frames = n(&s["wire"]["rx_frames"]);
        assert_eq!(rx_frames + reasons.iter().sum::<u64>(), 15, "{mode}: {s}");
        let drops: u64 = s["drops"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(
            n(&s["packets_rx"]),
            n(&s["packets_tx"]) + drops,
            "{mode}: rx = tx + drops: {s}"
        );
        let first = p["first_error"].as_str().unwrap();
        assert!(
            first.contains("hostile.pcap") && first.contains("record 1 at byte 100"),
            "{first}"
        );
        assert!(err.contains("rx pcap: 15 records"), "{err}");
    }
}

/// A capture that cannot be written fails the run (rc 1) with the file and the OS error, early
/// when the writes fail while running and at the end when only the final flush does; it once
/// ended with rc 0 and no word.
#[test]
fn tx_pcap_write_errors_fail_the_run_with_path_and_errno() {
    if !std::path::Path::new("/dev/full").exists() {
        return;
    }
    for packets in ["100", "200000"] {
        let out = run_default(&[
            "--packets",
            packets,
            "-q",
            "--json",
            "--tx-pcap",
            "/dev/full",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{packets}: {err}");
        assert!(out.stdout.is_empty(), "no summary of a failed run: {err}");
        assert!(
            err.contains("/dev/full") && err.contains("os error 28"),
            "{packets}: {err}"
        );
    }
}

/// The same file as `--rx-pcap` and `--tx-pcap` (directly or through a link) is refused before
/// anything is written: it once overwrote the input.
#[test]
fn the_same_file_for_rx_and_tx_pcap_is_refused() {
    let input = tmp("same.pcap");
    let (bytes, _) = hostile_pcap();
    std::fs::write(&input, &bytes).unwrap();
    let link = tmp("same-link.pcap");
    let _ = std::fs::remove_file(&link);
    std::fs::hard_link(&input, &link).unwrap();
    for tx in [&input, &link] {
        let out = run_default(&[
            "-q",
            "--rx-pcap",
            input.to_str().unwrap(),
            "--tx-pcap",
            tx.to_str().unwrap(),
        ]);
        assert_refused(&out, &["same file", "same.pcap"]);
        assert_eq!(std::fs::read(&input).unwrap(), bytes, "input untouched");
    }
}

/// A flow counter dump that cannot be written fails the run: a missing folder or a directory is
/// refused before the run (rc 2, the pipeline key), a write that fails at the end fails the run
/// (rc 1, the file and the OS error). It once ended with rc 0, the error only inside the JSON.
#[test]
fn flow_counter_dumps_that_cannot_be_written_fail_the_run() {
    let cfg = config("flow-counter.toml");
    let run_fc = |dump: &str| {
        let set = format!("pipeline=[{{name=\"flow_counter\", flows=1000, dump_path=\"{dump}\"}}]");
        dataplane(&[
            "run",
            cfg.to_str().unwrap(),
            "--packets",
            "1000",
            "-q",
            "--json",
            "--set",
            &set,
        ])
    };
    let not_a_folder = tmp("plain-file");
    std::fs::write(&not_a_folder, "x").unwrap();
    for (dump, why) in [
        ("/nonexistent-nmdp-dir/flows.csv", "does not exist"),
        (
            &format!("{}/flows.csv", not_a_folder.display()),
            "not a folder",
        ),
        (std::env::temp_dir().to_str().unwrap(), "is a directory"),
    ] {
        let out = run_fc(dump);
        assert_refused(&out, &["flow-counter.toml", "pipeline[0].dump_path", why]);
    }
    if std::path::Path::new("/dev/full").exists() {
        let out = run_fc("/dev/full");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(out.stdout.is_empty(), "{err}");
        assert!(
            err.contains("flow-counter")
                && err.contains("/dev/full")
                && err.contains("os error 28"),
            "{err}"
        );
    }
    let ok = tmp("flows.csv");
    let out = run_fc(ok.to_str().unwrap());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&ok).unwrap().starts_with("src,dst"));
}

/// `dataplane model` refuses loads and frame sizes it cannot describe, naming the range (it
/// once printed NaN utilisations for `nan` and computed a 100 000 B frame).
#[test]
fn model_rejects_impossible_loads_and_frame_sizes() {
    let model = |extra: &[&str]| {
        let mut a = vec!["model", "--mode", "host"];
        a.extend_from_slice(extra);
        dataplane(&a)
    };
    for g in ["-5", "nan", "inf", "0", "1000"] {
        let out = model(&["--frame-size", "64", "--offered-gbps", g]);
        assert_refused(&out, &["offered load", "allowed 0 < load <= 100 Gb/s"]);
    }
    let out = model(&["--frame-size", "100000"]);
    assert_refused(&out, &["frame size 100000 B", "allowed 64..=9022 B"]);
    let out = model(&["--frame-size", "1518", "--offered-gbps", "50"]);
    assert_eq!(out.status.code(), Some(0));
}

/// A frame size the port cannot carry is refused with the range `vnic.max_frame` allows (the
/// message once said 64..=16388 where 1518 was the limit), and `[traffic]` is checked even when
/// `--rx-pcap` replaces the generator (it was once ignored).
#[test]
fn frame_size_errors_state_the_real_bound_and_traffic_is_checked_with_rx_pcap() {
    for (sets, allowed) in [
        (vec!["traffic.frame_size=20000"], "allowed 64..=1518 B"),
        (vec!["traffic.frame_size=20"], "allowed 64..=1518 B"),
        (
            vec!["traffic.frame_size=20000", "vnic.max_frame=9018"],
            "allowed 64..=9022 B",
        ),
        (
            vec!["traffic.size_mix=\"imix\"", "vnic.max_frame=1000"],
            "allowed 64..=1004 B",
        ),
    ] {
        let mut args = vec!["--packets", "10", "-q"];
        for s in &sets {
            args.extend(["--set", s]);
        }
        let out = run_default(&args);
        assert_refused(&out, &["default.toml", "traffic.", allowed]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("16388"), "{err}");
    }
    let input = tmp("one-frame.pcap");
    dataplane::pcap::write_all(&input, [udp_frame(0, 60)]).unwrap();
    let pcap = input.to_str().unwrap();
    let out = run_default(&["-q", "--rx-pcap", pcap, "--set", "traffic.frame_size=20000"]);
    assert_refused(&out, &["traffic.frame_size", "--rx-pcap"]);
    let out = run_default(&["-q", "--rx-pcap", pcap, "--set", "traffic.flows=0"]);
    assert_refused(&out, &["traffic.flows"]);
    let out = run_default(&["-q", "--rx-pcap", pcap]);
    assert_eq!(out.status.code(), Some(0));
}

/// An empty config runs as plain forwarding, and says so (on stderr and in the summary's
/// `warnings`); so does an inline size the header segment cannot hold. Both once ran without a
/// word.
#[test]
fn empty_configs_and_clamped_inline_sizes_are_warned_about() {
    let empty = tmp("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let out = dataplane(&[
        "run",
        empty.to_str().unwrap(),
        "--packets",
        "100",
        "-q",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: config")
            && err.contains("empty.toml")
            && err.contains("no [[pipeline]]"),
        "{err}"
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["warnings"].as_array().unwrap().len(), 2, "{s}");
    let out = run_default(&["--packets", "100", "-q", "--set", "datapath.tx_inline=200"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("datapath.tx_inline = 200") && err.contains("inlines 64 B"),
        "{err}"
    );
}

/// A Tx completion interval above what the send queue holds once hung the run for ever (issue 18
/// row 1): the queue never asked for a completion, so it never reclaimed its ring. Now a
/// completion is requested at least every half ring, in every mode and in virtual time too.
#[test]
fn tx_completion_intervals_beyond_the_ring_do_not_hang() {
    for (extra, label) in [
        (vec!["--set", "vnic.tx_comp_every=1024"], "comp_every 1024"),
        (
            vec!["--set", "vnic.tx_ring=16", "--set", "vnic.tx_comp_every=16"],
            "ring 16",
        ),
        (
            vec![
                "--set",
                "vnic.tx_comp_every=1024",
                "--set",
                "run.clock=virtual",
            ],
            "virtual",
        ),
    ] {
        for mode in ["host", "split", "nic-payload", "nic-inline"] {
            let mut args = vec!["--packets", "2000", "--mode", mode, "--json", "-q"];
            args.extend_from_slice(&extra);
            let out = run_default(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{label} {mode}: {err}");
            let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let (tx, full) = (
                s["packets_tx"].as_u64().unwrap(),
                s["drops"]["tx_full"].as_u64().unwrap(),
            );
            // A 16-slot ring cannot take a 32-packet burst: the rest is a counted `tx_full`,
            // never a lost frame. The default ring takes everything.
            assert_eq!(tx + full, 2000, "{label} {mode}: every frame accounted for");
            if label != "ring 16" {
                assert_eq!(full, 0, "{label} {mode}");
            }
        }
    }
}

/// An inline size whose Tx descriptor exceeds the NIC's 60 segments once lost every frame with
/// rc 0 (issue 18 row 2). The config check now refuses it, naming the bound.
#[test]
fn inline_sizes_beyond_the_descriptor_limit_are_refused() {
    let max = dataplane::driver::vnic::MAX_TX_INLINE;
    for v in [max + 1, 915, 930] {
        let set = format!("datapath.tx_inline={v}");
        let out = run_default(&[
            "--packets",
            "200",
            "--mode",
            "nic-inline",
            "--set",
            "datapath.split_offset=1514",
            "--set",
            &set,
            "--json",
            "-q",
        ]);
        assert_refused(&out, &["datapath.tx_inline", &format!("allowed 0..={max}")]);
    }
    // The largest allowed inline size sends every frame.
    let set = format!("datapath.tx_inline={max}");
    let out = run_default(&[
        "--packets",
        "2000",
        "--mode",
        "nic-inline",
        "--set",
        "datapath.split_offset=1514",
        "--set",
        &set,
        "--json",
        "-q",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["packets_tx"], 2000);
    assert_eq!(s["desc_errors"], 0);
    assert_eq!(s["payload_mismatches"], 0);
}
