//! NAT-aware bidirectional traffic on the virtual NIC (`traffic.nat_return`): forward frames
//! and return frames for learned flows share the one port; the sink learns mappings from
//! translated forward frames and checks that return frames reach the flow's original inside
//! address and port. A run delivers both directions in full and says so per direction; a
//! pipeline that translates the return traffic wrongly, drops it, or does not translate at all is
//! reported, never counted as fine; RFC 2544 trials count loss over both directions and are
//! deterministic in virtual time.

mod common;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use nmdp::dut::{Clock, DutOptions, Timing, VnicDut};
use nmdp::run::{RunOptions, run};
use pktgen::GeneratorConfig;
use pktgen::nat_traffic::check_reverse;
use pktgen::signature::parse;
use pktgen::trial::{Dut, TrialSpec};
use serde_json::Value;

fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name)
}

fn tmp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nmdp-nat-bidir-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run_cfg(path: &Path, sets: &[&str], tx_pcap: Option<PathBuf>) -> Value {
    let opts = RunOptions {
        config: path.to_path_buf(),
        sets: sets.iter().map(|s| s.to_string()).collect(),
        tx_pcap,
        ..RunOptions::default()
    };
    run(&opts).unwrap_or_else(|e| panic!("{e}"))
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// configs/nat-bidir.toml with its pipeline replaced by `pipeline` (TOML) and extra `[traffic]`
/// lines.
fn variant(tag: &str, traffic: &str, pipeline: &str) -> PathBuf {
    let text = std::fs::read_to_string(config("nat-bidir.toml")).unwrap();
    let head = &text[..text.find("[[pipeline]]").unwrap()];
    let head = head.replace("[traffic]\n", &format!("[traffic]\n{traffic}\n"));
    let path = tmp_dir(tag).join("nat-bidir-variant.toml");
    std::fs::write(&path, format!("{head}{pipeline}\n")).unwrap();
    path
}

const SMALL: [&str; 2] = ["run.packets=20000", "traffic.rate_gbps=5"];

#[test]
fn both_directions_are_delivered_and_translated_back_to_the_inside_host() {
    let dir = tmp_dir("ok");
    let pcap = dir.join("tx.pcap");
    let s = run_cfg(&config("nat-bidir.toml"), &SMALL, Some(pcap.clone()));
    let t = &s["traffic"];
    let (f, r) = (&t["forward"], &t["return"]);
    assert_eq!(t["nat_return"], true);
    assert_eq!(t["nat_ip"], "10.0.0.1");
    // The wire carried exactly run.packets frames, both directions together.
    assert_eq!(n(&t["sent"]), 20_000);
    assert_eq!(n(&f["sent"]) + n(&r["sent"]), 20_000);
    // Every frame of each direction delivered once, intact.
    for d in [f, r] {
        assert_eq!(n(&d["received"]), n(&d["sent"]), "{d}");
        assert_eq!(n(&d["received_unique"]), n(&d["sent"]), "{d}");
        for k in [
            "seq_lost",
            "duplicates",
            "reordered",
            "payload_mismatches",
            "translated_wrong",
        ] {
            assert_eq!(n(&d[k]), 0, "{k}: {d}");
        }
    }
    assert_eq!(n(&t["translated_wrong"]), 0);
    assert_eq!((n(&s["seq_lost"]), n(&s["packets_tx"])), (0, 20_000));
    // Return traffic is real: most of the wire once the 1024 flows are learned, and every
    // return frame reached its flow's original inside address and port.
    assert!(n(&r["sent"]) > 8_000, "{r}");
    assert_eq!(n(&r["translated_ok"]), n(&r["sent"]));
    assert_eq!(n(&f["learned_mappings"]), 1024);
    assert_eq!(n(&f["remapped_mappings"]), 0);
    // The first pass over the flows goes out before any mapping is back.
    let unlearned = n(&r["not_sent_unlearned"]);
    assert!((1024..2048).contains(&unlearned), "{unlearned}");
    assert_eq!(
        n(&f["sent"]),
        n(&r["sent"]) + unlearned,
        "one return per forward frame"
    );
    // The NAT saw the same split.
    let nat = &s["nfs"]["nat"];
    assert_eq!(n(&nat["outbound_translated"]), n(&f["sent"]));
    assert_eq!(n(&nat["inbound_translated"]), n(&r["sent"]));

    // Independently, from the transmitted frames: forward frames leave from the NAT address,
    // return frames arrive at the inside host and port their flow started from.
    let fwd_cfg: GeneratorConfig = GeneratorConfig {
        frame_size: 1518,
        flows: 1024,
        dst_ip_count: 4,
        ..Default::default()
    };
    let frames = dataplane::pcap::read_all(&pcap).unwrap();
    assert_eq!(frames.len(), 20_000);
    let (mut fwd, mut ret) = (0u64, 0u64);
    for fr in &frames {
        let (sig, loc) = parse(fr).expect("every frame carries a signature");
        let src = Ipv4Addr::new(
            fr[loc.l3_offset + 12],
            fr[loc.l3_offset + 13],
            fr[loc.l3_offset + 14],
            fr[loc.l3_offset + 15],
        );
        match sig.stream {
            0 => {
                assert_eq!(src, Ipv4Addr::new(10, 0, 0, 1));
                fwd += 1;
            }
            1 => {
                assert_eq!(check_reverse(fr, &fwd_cfg), Some(true));
                let t = fwd_cfg.flow_tuple(sig.flow);
                assert_eq!(src, t.dst_ip, "from the flow's server");
                ret += 1;
            }
            other => panic!("stream {other}"),
        }
    }
    assert_eq!((fwd, ret), (n(&f["sent"]), n(&r["sent"])));

    // Virtual time: the same config gives the same JSON.
    let again = run_cfg(&config("nat-bidir.toml"), &SMALL, None);
    assert_eq!(
        serde_json::to_string(&s).unwrap(),
        serde_json::to_string(&again).unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_nat_nothing_is_learned_and_the_forward_frames_are_flagged() {
    let path = variant("iofwd", "", "[[pipeline]]\nname = \"io_fwd\"");
    let s = run_cfg(&path, &SMALL, None);
    let t = &s["traffic"];
    let (f, r) = (&t["forward"], &t["return"]);
    // Every frame went through untouched, but none was translated: the forward frames are
    // wrongly translated, no mapping is learned, and no return frame could be sent.
    assert_eq!(n(&f["sent"]), 20_000);
    assert_eq!(n(&f["received"]), 20_000);
    assert_eq!(n(&f["translated_wrong"]), 20_000);
    assert_eq!(n(&f["learned_mappings"]), 0);
    assert_eq!(n(&r["sent"]), 0);
    assert_eq!(n(&r["not_sent_unlearned"]), 19_999);
    assert_eq!(n(&t["translated_wrong"]), 20_000);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn a_nat_that_does_not_translate_return_traffic_loses_it() {
    // Every frame arrives on the inside port: a return frame (to the NAT address) matches its
    // session's inbound key from the wrong side, so it is dropped as `no_mapping` (before
    // hairpinning was supported it was dropped as a hairpin, `policy`).
    let path = variant(
        "byport",
        "",
        "[[pipeline]]\nname = \"nat\"\nflows = 65536\ndirection = \"by-port\"\ninside_ports = [0]",
    );
    let s = run_cfg(&path, &SMALL, None);
    let t = &s["traffic"];
    let (f, r) = (&t["forward"], &t["return"]);
    assert_eq!(n(&f["seq_lost"]), 0);
    assert_eq!(n(&f["translated_wrong"]), 0);
    assert!(n(&r["sent"]) > 8_000, "{r}");
    assert_eq!(n(&r["received"]), 0);
    assert_eq!(n(&r["seq_lost"]), n(&r["sent"]));
    assert_eq!(n(&t["seq_lost"]), n(&r["sent"]));
    assert_eq!(n(&s["drops"]["no_mapping"]), n(&r["sent"]));
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// One inside host (16.1.1.1, 64 source ports) behind the NAT, and a load balancer whose VIP is
/// that host: return frames come back from the NAT to 16.1.1.1 and the LB sends them to a
/// backend instead.
fn misdelivering_config() -> PathBuf {
    variant(
        "lb",
        "src_ip_count = 1\nsrc_port = 2000\nsrc_port_count = 1024",
        "[[pipeline]]\nname = \"nat\"\nflows = 65536\n\n[[pipeline]]\nname = \"lb\"\nvip = \"16.1.1.1\"\nflows = 65536",
    )
}

#[test]
fn return_frames_translated_to_the_wrong_inside_address_are_counted() {
    let path = misdelivering_config();
    let s = run_cfg(&path, &SMALL, None);
    let t = &s["traffic"];
    let (f, r) = (&t["forward"], &t["return"]);
    assert_eq!(n(&f["translated_wrong"]), 0);
    assert_eq!(n(&f["seq_lost"]), 0);
    let sent = n(&r["sent"]);
    assert!(sent > 8_000, "{r}");
    // Delivered, but to the wrong address: not one counts as correctly translated.
    assert_eq!(n(&r["received_unique"]), sent);
    assert_eq!(n(&r["translated_ok"]), 0);
    assert_eq!(n(&r["translated_wrong"]), sent);
    assert_eq!(n(&t["translated_wrong"]), sent);

    // An RFC 2544 trial counts them as lost, attributed to the wrong translation.
    let mut dut = VnicDut::new(&path, &[], DutOptions::default()).unwrap();
    assert!(dut.name().contains("nat-return"), "{}", dut.name());
    let spec = TrialSpec {
        rate_pps: 400_000.0,
        frames: Some(8_000),
        traffic: dut.traffic().clone(),
        ..Default::default()
    };
    let tr = dut.trial(&spec).unwrap();
    let wrong = n(&tr.dut["traffic"]["return"]["translated_wrong"]);
    assert!(wrong > 0);
    assert_eq!(tr.lost, wrong);
    assert_eq!(tr.received, 8_000 - wrong);
    assert_eq!(tr.attribution.stages.get("translated_wrong"), Some(&wrong));
    assert_eq!(tr.attribution.unattributed, 0);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn trials_count_both_directions() {
    let mut dut = VnicDut::new(&config("nat-bidir.toml"), &[], DutOptions::default()).unwrap();
    assert_eq!(dut.timing(), Timing::Timed(Clock::Virtual));
    let traffic = GeneratorConfig {
        frame_size: 64,
        ..dut.traffic().clone()
    };
    // Below the NDR: nothing lost in either direction.
    let low = TrialSpec {
        rate_pps: 500_000.0,
        frames: Some(10_000),
        traffic: traffic.clone(),
        ..Default::default()
    };
    let r = dut.trial(&low).unwrap();
    let t = &r.dut["traffic"];
    let ret = n(&t["return"]["sent"]);
    assert!(ret > 4_000, "{t}");
    assert_eq!(
        (r.intended, r.sent, r.received, r.lost, r.gen_unsent),
        (10_000, 10_000, 10_000, 0, 0)
    );
    assert_eq!(n(&t["forward"]["sent"]) + ret, 10_000);
    // Far above it: loss in both directions, all of it counted and attributed.
    let high = TrialSpec {
        rate_pps: 5_000_000.0,
        ..low
    };
    let r = dut.trial(&high).unwrap();
    let t = &r.dut["traffic"];
    let (lf, lr) = (n(&t["forward"]["seq_lost"]), n(&t["return"]["seq_lost"]));
    assert!(lf > 0 && lr > 0, "{t}");
    assert_eq!(r.lost, lf + lr);
    assert_eq!(r.sent, 10_000);
    assert_eq!(r.attribution.unattributed, 0, "{:?}", r.attribution);
    assert!(r.deterministic);
}

#[test]
fn bad_nat_return_keys_are_errors_naming_file_key_and_allowed_values() {
    let err = |sets: &[&str]| {
        let opts = RunOptions {
            config: config("nat-bidir.toml"),
            sets: sets.iter().map(|s| s.to_string()).collect(),
            ..RunOptions::default()
        };
        run(&opts).expect_err("an error").to_string()
    };
    let e = err(&["run.workers=2"]);
    assert!(
        e.contains("nat-bidir.toml") && e.contains("traffic.nat_return") && e.contains("workers"),
        "{e}"
    );
    let e = err(&["traffic.return_ratio=0"]);
    assert!(
        e.contains("traffic.return_ratio") && e.contains("0 < ratio"),
        "{e}"
    );
    let e = err(&["traffic.nat_return=false"]);
    assert!(
        e.contains("traffic.return_ratio") && e.contains("nat_return = true"),
        "{e}"
    );
    let e = err(&["traffic.nat_return=1"]);
    assert!(
        e.contains("traffic.nat_return") && e.contains("true"),
        "{e}"
    );
    let e = err(&["traffic.proto=tcp"]);
    assert!(e.contains("traffic.proto") && e.contains("udp"), "{e}");
}

/// Wall clock allows several workers. Each worker's NAT owns a slice of the outside ports and
/// the NIC steers return traffic to the slice's worker (flow steering rules the NAT declares),
/// so every return frame meets the NAT that holds its session: without the rules RSS sent about
/// half of them to the other worker (`no_mapping`). With flow control (no offered rate) nothing
/// may be lost.
#[test]
fn two_workers_get_their_own_return_traffic() {
    let opts = RunOptions {
        config: config("nat-bidir.toml"),
        sets: [
            "run.clock=wall",
            "run.workers=2",
            "run.packets=20000",
            "traffic.rate_gbps=0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..RunOptions::default()
    };
    let s = run(&opts).unwrap();
    let t = &s["traffic"];
    assert_eq!(n(&t["sent"]), 20_000);
    assert_eq!(n(&s["nfs"]["nat"]["drops"]["no_mapping"]), 0, "{t}");
    let ret = &t["return"];
    assert!(n(&ret["sent"]) > 10_000 - 2_000, "{ret}");
    assert_eq!(n(&ret["translated_ok"]), n(&ret["sent"]), "{ret}");
    assert_eq!(n(&t["seq_lost"]), 0, "{t}");
    assert_eq!(n(&t["translated_wrong"]), 0);
}

#[test]
fn cli_rfc2544_on_nat_bidir_is_identical_across_runs() {
    let args = [
        "rfc2544",
        "--dut",
        "configs/nat-bidir.toml",
        "--sizes",
        "64,1518",
        "--preset",
        "quick",
        "--initial-trial",
        "0.0005",
        "--final-trial",
        "0.002",
        "--json",
    ];
    let go = || {
        let out = common::succeeded(
            Command::new(env!("CARGO_BIN_EXE_pktgen"))
                .args(args)
                .current_dir(env!("CARGO_MANIFEST_DIR")),
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let a = go();
    let v: Value = serde_json::from_str(&a).unwrap();
    assert_eq!(v["deterministic"], true);
    assert!(
        v["dut"].as_str().unwrap().contains("nat-return"),
        "{}",
        v["dut"]
    );
    for r in v["results"].as_array().unwrap() {
        let ndr = r["ndr_pdr"]["goals"][0]["relevant_lower_bound_pps"]
            .as_f64()
            .unwrap();
        assert!(ndr > 0.0, "{r}");
    }
    assert_eq!(a, go(), "two runs, same JSON");
}
