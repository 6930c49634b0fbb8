//! End-to-end tests of `dataplane run`: generator -> virtual NIC -> NF chain -> virtual NIC ->
//! checking sink, and pcap in -> pcap out, in every datapath mode.

use std::path::PathBuf;
use std::process::Command;

use dataplane::DatapathMode;
use nmdp::run::{RunOptions, run};
use serde_json::Value;

fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name)
}

fn opts(sets: &[&str]) -> RunOptions {
    RunOptions {
        config: config("default.toml"),
        sets: sets.iter().map(|s| s.to_string()).collect(),
        ..RunOptions::default()
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nmdp-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("key {k} missing in {v}"))
}

#[test]
fn generated_traffic_arrives_intact_in_every_mode_and_size() {
    for mode in DatapathMode::ALL {
        for size in [64u32, 65, 127, 128, 512, 1024, 1518] {
            let mut o = opts(&[
                &format!("traffic.frame_size={size}"),
                "run.packets=3000",
                "run.stats_interval_s=0",
            ]);
            o.mode = Some(mode);
            let s = run(&o).unwrap();
            assert_eq!(s["mode"], mode.as_str());
            assert_eq!(u(&s, "frame_size"), size as u64);
            assert_eq!(u(&s, "packets_rx"), 3000, "{mode} {size}");
            assert_eq!(u(&s, "packets_tx"), 3000, "{mode} {size}");
            assert_eq!(u(&s, "bytes_tx"), 3000 * (size as u64 - 4));
            assert_eq!(u(&s, "payload_mismatches"), 0, "{mode} {size}");
            assert_eq!(u(&s, "seq_lost"), 0, "{mode} {size}");
            assert_eq!(u(&s, "desc_errors"), 0);
            let payload = size as usize - 4 > 64;
            match mode {
                DatapathMode::Host | DatapathMode::Split => {
                    assert_eq!(u(&s, "rx_primary"), 0)
                }
                _ if payload => assert_eq!(u(&s, "rx_primary"), 3000, "{mode} {size}"),
                _ => {}
            }
            if mode == DatapathMode::Split && payload {
                assert_eq!(u(&s, "rx_secondary"), 3000);
            }
            // The CPU never read nicmem on the data path.
            assert_eq!(s["nicmem"]["cpu_bytes_read"], 0);
            for p in s["pools"].as_array().unwrap() {
                assert_eq!(p["in_use"], 0, "pool back to its starting count: {p}");
            }
        }
    }
}

#[test]
fn jumbo_frames_when_the_config_allows_them() {
    for mode in DatapathMode::ALL {
        let mut o = opts(&[
            "vnic.max_frame=9018",
            "vnic.nicmem=\"4MiB\"",
            "traffic.frame_size=9022",
            "run.packets=500",
            "run.stats_interval_s=0",
        ]);
        o.mode = Some(mode);
        let s = run(&o).unwrap();
        assert_eq!(u(&s, "packets_tx"), 500, "{mode}");
        assert_eq!(u(&s, "payload_mismatches"), 0);
        assert_eq!(u(&s, "seq_lost"), 0);
    }
}

/// Frames of every length from 60 to 1514 B (and jumbo) through a pcap, io-fwd and macswap.
#[test]
fn pcap_frames_out_equal_frames_in_bit_for_bit() {
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for len in (60..=1514)
        .step_by(29)
        .chain([61, 63, 64, 65, 127, 128, 129, 1513, 1514])
    {
        let f: Vec<u8> = (0..len)
            .map(|i| (i as u32).wrapping_mul(2654435761).to_be_bytes()[0] ^ len as u8)
            .collect();
        frames.push(f);
    }
    let input = tmp("in.pcap");
    dataplane::pcap::write_all(&input, &frames).unwrap();
    for nf in ["io_fwd", "macswap"] {
        let cfg = tmp(&format!("{nf}.toml"));
        std::fs::write(&cfg, format!("[[pipeline]]\nname = \"{nf}\"\n")).unwrap();
        for mode in DatapathMode::ALL {
            let out = tmp(&format!("out-{nf}-{mode}.pcap"));
            let o = RunOptions {
                config: cfg.clone(),
                mode: Some(mode),
                rx_pcap: Some(input.clone()),
                tx_pcap: Some(out.clone()),
                sets: vec!["run.stats_interval_s=0".into()],
                ..RunOptions::default()
            };
            let s = run(&o).unwrap();
            assert_eq!(u(&s, "packets_tx"), frames.len() as u64);
            let got = dataplane::pcap::read_all(&out).unwrap();
            let want: Vec<Vec<u8>> = frames
                .iter()
                .map(|f| {
                    let mut w = f.clone();
                    if nf == "macswap" {
                        w[..6].copy_from_slice(&f[6..12]);
                        w[6..12].copy_from_slice(&f[..6]);
                    }
                    w
                })
                .collect();
            assert!(got == want, "{nf} {mode}: frames differ");
        }
    }
}

#[test]
fn tiny_nicmem_spills_to_the_secondary_ring_without_loss() {
    for mode in [DatapathMode::NicPayload, DatapathMode::NicInline] {
        let mut o = opts(&[
            "vnic.nicmem=\"16KiB\"",
            "run.packets=20000",
            "run.stats_interval_s=0",
        ]);
        o.mode = Some(mode);
        let s = run(&o).unwrap();
        let (p, sec) = (u(&s, "rx_primary"), u(&s, "rx_secondary"));
        assert!(p > 0 && sec > 0, "{mode}: primary {p} secondary {sec}");
        assert_eq!(p + sec, 20000);
        assert_eq!(u(&s, "seq_lost"), 0);
        assert_eq!(u(&s, "payload_mismatches"), 0);
    }
}

#[test]
fn two_workers_split_flows_and_lose_nothing() {
    let mut o = opts(&[
        "run.packets=20000",
        "run.stats_interval_s=0",
        "traffic.frame_size=256",
    ]);
    o.workers = Some(2);
    let s = run(&o).unwrap();
    assert_eq!(u(&s, "packets_tx"), 20000);
    assert_eq!(u(&s, "seq_lost"), 0);
    assert_eq!(u(&s, "payload_mismatches"), 0);
}

#[test]
fn cli_rejects_bad_configs_naming_file_key_and_allowed_values() {
    let bin = env!("CARGO_BIN_EXE_dataplane");
    let cases: [(&[&str], &str, &str); 4] = [
        (
            &["--set", "datapath.mode=hots"],
            "datapath.mode",
            "nic-inline",
        ),
        (&["--set", "vnic.rx_ring=3"], "vnic.rx_ring", "16..=32768"),
        (
            &["--set", "traffic.frame_size=20"],
            "traffic.frame_size",
            "64",
        ),
        (&["--set", "vnic.nicmem=\"lots\""], "vnic.nicmem", "MiB"),
    ];
    for (args, key, allowed) in cases {
        let out = Command::new(bin)
            .arg("run")
            .arg(config("default.toml"))
            .args(args)
            .arg("--json")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "nothing ran: {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("default.toml") && err.contains(key) && err.contains(allowed),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn cli_json_summary_has_the_foundation_keys() {
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["run"])
        .arg(config("default.toml"))
        .args(["--packets", "1000", "--json", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in [
        "mode",
        "frame_size",
        "packets_rx",
        "packets_tx",
        "bytes_rx",
        "bytes_tx",
        "drops",
        "rx_primary",
        "rx_secondary",
        "rx_nombuf",
        "desc_errors",
        "payload_mismatches",
        "seq_lost",
        "elapsed_s",
        "mpps",
    ] {
        assert!(s.get(k).is_some(), "missing {k}");
    }
    assert!(s["drops"].is_object());
    assert_eq!(u(&s, "packets_tx"), 1000);
}

/// `dataplane nfs` prints the reference the registry holds: every function with its cost key
/// and parameters.
#[test]
fn cli_nfs_prints_every_registered_function() {
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .arg("nfs")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for s in nfs::REGISTRY {
        assert!(text.contains(&format!("## `{}`", s.name)), "{}", s.name);
        assert!(text.contains(&s.cost_key()), "{}", s.name);
        for p in s.params {
            assert!(
                text.contains(&format!("`{}`", p.name)),
                "{}.{}",
                s.name,
                p.name
            );
        }
    }
}

#[test]
fn injected_faults_are_survived_counted_and_lose_only_their_frames() {
    for mode in DatapathMode::ALL {
        let mut o = opts(&[
            "run.packets=20000",
            "run.stats_interval_s=0",
            "run.clock=\"virtual\"",
            "traffic.rate_gbps=0",
            "traffic.frame_size=700",
            "vnic.faults.seed=4",
            "vnic.faults.link_down_every=5000",
            "vnic.faults.link_down_frames=40",
            "vnic.faults.rx_desc_every=500",
            "vnic.faults.tx_dma_every=500",
            "vnic.faults.doorbell_lost_every=20",
            "vnic.faults.reset_every=3000",
        ]);
        o.mode = Some(mode);
        let s = run(&o).unwrap();
        let f = &s["faults"];
        for k in [
            "link_down",
            "rx_desc_corrupted",
            "tx_dma_errors",
            "doorbells_lost",
            "doorbells_rerung",
            "device_resets",
            "sq_recoveries",
        ] {
            assert!(u(f, k) > 0, "{mode}: {k} injected: {f}");
        }
        let q = &f["queues"][0];
        assert_eq!(
            u(q, "tx_dma_errors"),
            u(f, "tx_dma_errors"),
            "{mode}: per queue"
        );
        let rx = u(&s, "packets_rx");
        let drops: u64 = s["drops"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(drops, 0, "{mode}: {s}");
        let desc = u(&s, "desc_errors");
        assert!(desc + 1 >= u(f, "rx_desc_corrupted") && desc <= u(f, "rx_desc_corrupted"));
        assert_eq!(
            rx + desc + u(f, "link_down_drops") + u(f, "reset_rx_drops"),
            20000,
            "{mode}: every frame"
        );
        assert_eq!(
            rx,
            u(&s, "packets_tx")
                + u(f, "tx_dma_errors")
                + u(f, "sq_error_drops")
                + u(f, "reset_tx_drops"),
            "{mode}: {f}"
        );
        assert_eq!(u(&s["traffic"], "received"), u(&s, "packets_tx"), "{mode}");
        assert_eq!(u(&s, "payload_mismatches"), 0, "{mode}");
        for p in s["pools"].as_array().unwrap() {
            assert_eq!(p["in_use"], 0, "{mode}: no buffer leaked: {p}");
        }
    }
}

#[test]
fn fault_keys_are_checked() {
    let bin = env!("CARGO_BIN_EXE_dataplane");
    let cases: [(&[&str], &str, &str); 4] = [
        (
            &["--set", "vnic.faults.link_down_frames=0"],
            "vnic.faults.link_down_frames",
            "1..=",
        ),
        (
            &["--set", "vnic.faults.tx_dma_every=10000000000000"],
            "vnic.faults.tx_dma_every",
            "0 (never)",
        ),
        (
            &["--set", "vnic.faults.flaky=1"],
            "vnic.faults.flaky",
            "doorbell_lost_every",
        ),
        (
            &[
                "--set",
                "run.clock=\"virtual\"",
                "--set",
                "vnic.faults.link_down_every=10",
            ],
            "vnic.faults.link_down_every",
            "traffic.rate_gbps = 0",
        ),
    ];
    for (args, key, allowed) in cases {
        let out = Command::new(bin)
            .arg("run")
            .arg(config("default.toml"))
            .args(args)
            .arg("--json")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("default.toml") && err.contains(key) && err.contains(allowed),
            "{args:?}: {err}"
        );
    }
}

/// The wire on its own thread: on the wall clock with one worker the generator and checking
/// sink run on a tester thread by default and every frame arrives intact; on the virtual clock
/// a tester thread changes nothing, the summary is the same key for key (paced at the line rate
/// and pulled), and only the `wire_thread` object says it was there.
#[test]
fn the_tester_thread_loses_nothing_and_changes_no_virtual_run() {
    let s = run(&opts(&[
        "traffic.frame_size=64",
        "run.packets=200000",
        "run.stats_interval_s=0",
    ]))
    .unwrap();
    assert_eq!(
        s["wire_thread"]["on"], true,
        "auto: on for one wall-clock worker"
    );
    assert_eq!(u(&s["wire_thread"], "rx_frames"), 200_000);
    assert_eq!(u(&s["wire_thread"], "tx_frames"), 200_000);
    assert_eq!(u(&s, "packets_tx"), 200_000);
    assert_eq!(u(&s["traffic"], "received_unique"), 200_000);
    assert_eq!(u(&s, "seq_lost") + u(&s, "payload_mismatches"), 0);
    assert!(s["worker_cpu_s"].as_f64().unwrap() > 0.0);
    assert!(s["mpps_per_worker_core"].as_f64().unwrap() > 0.0);
    assert!(s["per_worker"][0]["cpu_s"].as_f64().is_some());
    let off = run(&opts(&[
        "run.packets=2000",
        "run.stats_interval_s=0",
        "run.wire_thread=\"off\"",
    ]))
    .unwrap();
    assert_eq!(off["wire_thread"]["on"], false);
    assert_eq!(u(&off, "packets_tx"), 2000);
    for rate in ["traffic.rate_gbps=100", "traffic.rate_gbps=0"] {
        let virt = |wire: &str| {
            let mut s = run(&opts(&[
                "traffic.frame_size=128",
                "run.packets=20000",
                "run.stats_interval_s=0",
                "run.clock=\"virtual\"",
                rate,
                &format!("run.wire_thread=\"{wire}\""),
            ]))
            .unwrap();
            let w = s.as_object_mut().unwrap().remove("wire_thread").unwrap();
            (s, w)
        };
        let (on, won) = virt("on");
        let (off, woff) = virt("off");
        assert_eq!(won["on"], true);
        assert_eq!(won["rx_frames"], 20000);
        assert_eq!(woff["on"], false);
        assert_eq!(
            on, off,
            "{rate}: a virtual run is the same with a tester thread"
        );
    }
}
