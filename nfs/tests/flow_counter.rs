//! Flow-counter behaviour tests, in all four datapath modes.

mod common;

use common::{SEC, ctx, factory, ip, params, run, run1};
use dataplane::{DatapathMode, DropReason, NetworkFunction, Verdict};
use nfs::flow_counter::FlowCounter;
use nfs::flow_table::FlowKey;
use wire::frames::FrameSpec;
use wire::ipv4::PROTO_UDP;

fn fc(p: &str) -> FlowCounter {
    FlowCounter::from_params(&params(p), 0, 1).expect("config")
}

fn key(i: u32) -> FlowKey {
    FlowKey::new(ip("16.1.1.1") + i, ip("48.1.1.1"), 1000, 2000, PROTO_UDP)
}

fn frame(i: u32, payload: usize) -> Vec<u8> {
    FrameSpec::udp(ip("16.1.1.1") + i, ip("48.1.1.1"), 1000, 2000, payload).build()
}

#[test]
fn counts_whole_frame_bytes_per_flow() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut c = fc("flows = 1024");
        // Flow 0: 3 × 1000 B frames; flow 1: one 60 B frame.
        let frames = [frame(0, 958), frame(1, 18), frame(0, 958), frame(0, 958)];
        let out = run(&mut c, &f, &frames[..2], SEC, 0);
        assert!(out.iter().all(|(_, v)| *v == Verdict::tx(1)));
        run(&mut c, &f, &frames[2..], 5 * SEC, 0);
        let r0 = c.record(&key(0)).unwrap();
        assert_eq!(
            (r0.packets, r0.bytes),
            (3, 3000),
            "{mode}: frame_len, not header_len"
        );
        assert_eq!((r0.first_ns, r0.last_ns), (SEC, 5 * SEC));
        let r1 = c.record(&key(1)).unwrap();
        assert_eq!((r1.packets, r1.bytes), (1, 60));
        let s = c.counters();
        assert_eq!(s["flows"], 2);
        assert_eq!(s["packets"], 4);
        assert_eq!(s["bytes"], 3060);
        let top = c.top_k(1);
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].0, key(0));
    }
}

#[test]
fn top_k_orders_by_bytes() {
    let f = factory(DatapathMode::NicInline);
    let mut c = fc("flows = 1024");
    let mut frames = vec![];
    for i in 0..20u32 {
        for _ in 0..=i {
            frames.push(frame(i, 100));
        }
    }
    run(&mut c, &f, &frames, SEC, 0);
    let top = c.top_k(5);
    let got: Vec<FlowKey> = top.iter().map(|(k, _)| *k).collect();
    assert_eq!(got, (15..20).rev().map(key).collect::<Vec<_>>());
    assert!(top.windows(2).all(|w| w[0].1.bytes >= w[1].1.bytes));
    assert_eq!(c.top_k(100).len(), 20);
    assert!(c.top_k(0).is_empty());
}

#[test]
fn unparsed_frames_are_forwarded_and_counted() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut c = fc("flows = 16");
        let mut arp = frame(0, 30);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let (_, v) = run1(&mut c, &f, &arp, SEC);
        assert_eq!(v, Verdict::tx(1));
        let (_, v) = run1(&mut c, &f, &arp[..20], SEC);
        assert_eq!(v, Verdict::tx(1));
        assert_eq!(c.counters()["unparsed"], 2);
        assert_eq!(c.counters()["flows"], 0);
    }
}

#[test]
fn full_table_policies() {
    let f = factory(DatapathMode::Split);
    let frames: Vec<Vec<u8>> = (0..3).map(|i| frame(i, 10)).collect();
    let mut c = fc("flows = 2");
    let out = run(&mut c, &f, &frames, SEC, 0);
    assert_eq!(out[2].1, Verdict::tx(1), "skip policy forwards");
    assert_eq!(c.counters()["table_full"], 1);
    let mut c = fc("flows = 2\nfull_policy = \"drop\"");
    let out = run(&mut c, &f, &frames, SEC, 0);
    assert_eq!(out[2].1, Verdict::drop(DropReason::FLOW_TABLE_FULL));
    let mut c = fc("flows = 2\nfull_policy = \"evict\"");
    run(&mut c, &f, &frames, SEC, 0);
    let s = c.counters();
    assert_eq!(
        (s["evicted"].as_count(), s["evicted_packets"].as_count()),
        (Some(1), Some(1))
    );
    assert_eq!(s["flows"], 2);
}

#[test]
fn idle_records_close_and_totals_add_up() {
    let f = factory(DatapathMode::NicPayload);
    let mut c = fc("flows = 64\nidle_timeout_s = 10\nscan_buckets_per_burst = 1000");
    run(
        &mut c,
        &f,
        &[frame(0, 10), frame(1, 10), frame(0, 10)],
        SEC,
        0,
    );
    // Flow 0 returns after 20 s: lazily closed and restarted.
    run(&mut c, &f, &[frame(0, 10)], 21 * SEC, 0);
    let r0 = c.record(&key(0)).unwrap();
    assert_eq!((r0.packets, r0.first_ns), (1, 21 * SEC));
    // Flow 1 was closed by the scan during that burst.
    assert!(c.record(&key(1)).is_none());
    let s = c.counters();
    assert_eq!(s["expired"], 2);
    assert_eq!(s["expired_packets"], 3);
    let live: u64 = c.records().map(|(_, r)| r.packets).sum();
    assert_eq!(
        s["packets"].as_count().unwrap(),
        live + s["expired_packets"].as_count().unwrap() + s["unparsed"].as_count().unwrap()
    );
}

#[test]
fn dumps_json_and_csv_on_finish() {
    let dir = std::env::temp_dir().join(format!("nfs-fc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = factory(DatapathMode::Host);
    for (ext, workers) in [("json", 1u16), ("csv", 2)] {
        let path = dir.join(format!("flows.{ext}"));
        let p = format!("flows = 64\ntop_k = 2\ndump_path = \"{}\"", path.display());
        let mut c = FlowCounter::from_params(&params(&p), 1 % workers, workers).unwrap();
        run(
            &mut c,
            &f,
            &[frame(0, 100), frame(1, 10), frame(0, 100)],
            SEC,
            0,
        );
        c.finish(&ctx(2 * SEC)).unwrap();
        let written = c.dump_path().unwrap().to_path_buf();
        let text = std::fs::read_to_string(&written).unwrap();
        if ext == "json" {
            assert_eq!(written, path);
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["flows"].as_array().unwrap().len(), 2);
            assert_eq!(v["top_k"][0]["src"], "16.1.1.1");
            assert_eq!(v["top_k"][0]["packets"], 2);
            assert_eq!(v["top_k"][0]["bytes"], 2 * 142);
            assert_eq!(v["stats"]["packets"], 3);
        } else {
            assert_eq!(written, dir.join("flows-w1.csv"));
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(
                lines[0],
                "src,dst,sport,dport,proto,packets,bytes,first_seen_ns,last_seen_ns"
            );
            assert_eq!(
                lines[1],
                "16.1.1.1,48.1.1.1,1000,2000,17,2,284,1000000000,1000000000"
            );
            assert_eq!(lines.len(), 3);
        }
        assert!(c.counters().get("dump_error").is_none());
    }
    // An unwritable path is reported, not a panic.
    let p = "flows = 4\ndump_path = \"/nonexistent-dir/x/flows.json\"";
    let mut c = FlowCounter::from_params(&params(p), 0, 1).unwrap();
    let e = c.finish(&ctx(0)).unwrap_err();
    assert!(
        e.contains("cannot write its dump") && e.contains("nonexistent"),
        "{e}"
    );
    assert!(
        c.counters()["dump_error"]
            .as_text()
            .unwrap()
            .contains("nonexistent")
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn config_errors() {
    for (p, k) in [
        ("flowz = 1", "flowz"),
        ("full_policy = \"panic\"", "full_policy"),
        ("flows = 0", "flows"),
        ("dump_path = \"\"", "dump_path"),
    ] {
        let e = FlowCounter::from_params(&params(p), 0, 1).err().expect(p);
        assert!(e.contains(k) && e.starts_with("flow_counter"), "{e}");
    }
    let c = nfs::BuildContext::new(0, 1);
    // Both spellings build the same function, reported under its first release's name.
    for name in ["flow-counter", "flow_counter"] {
        let nf = nfs::build(name, &params("flows = 4"), &c).unwrap();
        assert_eq!(nf.name(), nfs::flow_counter::NAME);
    }
    assert!(nfs::build("work-package", &params("size_mib = 1"), &c).is_ok());
    let e = nfs::build("work_package", &params("size_mib = 0"), &c)
        .err()
        .unwrap();
    assert!(e.contains("size_mib"), "{e}");
}
