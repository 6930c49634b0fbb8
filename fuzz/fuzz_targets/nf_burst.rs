//! Fuzzes burst processing of every NF in every datapath mode.
//!
//! Input layout: byte 0 selects the NF (NAT, LB, flow counter, WorkPackage) and a config
//! variant, byte 1 the split offset; the rest is a sequence of frames, each prefixed by a
//! 2-byte length, plus a 1-byte rx-port/pre-drop flag. Every frame goes through all four
//! datapath modes; the NF must never panic and its packet counters must match the verdicts.
#![no_main]

use dataplane::testkit::PacketFactory;
use dataplane::{Burst, DatapathMode, DropReason, NetworkFunction, NfContext, Verdict};
use libfuzzer_sys::fuzz_target;
use nfs::flow_counter::FlowCounter;
use nfs::lb::LoadBalancer;
use nfs::nat::Nat;
use nfs::work_package::WorkPackage;

fn make(sel: u8) -> Box<dyn NetworkFunction> {
    let cfg = |s: &str| -> toml::Table { toml::from_str(s).expect("fuzz config") };
    match sel % 8 {
        0 => Box::new(Nat::from_params(&cfg("flows = 64\nport_min = 1024\nport_max = 1040"), 0, 1).unwrap()),
        1 => Box::new(
            Nat::from_params(
                &cfg("flows = 8\nfull_policy = \"evict\"\ndecrement_ttl = true\nverify_checksums = true"),
                0,
                1,
            )
            .unwrap(),
        ),
        2 => Box::new(LoadBalancer::from_params(&cfg("flows = 64\nbackend_count = 4"), 0, 1).unwrap()),
        3 => Box::new(
            LoadBalancer::from_params(
                &cfg("flows = 4\nbackend_count = 4\nmode = \"maglev\"\nmaglev_table_size = 13\nfull_policy = \"drop\""),
                0,
                1,
            )
            .unwrap(),
        ),
        4 => Box::new(FlowCounter::from_params(&cfg("flows = 8\nfull_policy = \"evict\""), 0, 1).unwrap()),
        5 => Box::new(FlowCounter::from_params(&cfg("flows = 8\nidle_timeout_s = 1"), 0, 1).unwrap()),
        6 => Box::new(FlowCounter::from_params(&cfg("flows = 8\nfull_policy = \"drop\""), 0, 1).unwrap()),
        _ => Box::new(WorkPackage::from_params(&cfg("reads = 2\nsize_mib = 1"), 0, 1).unwrap()),
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let sel = data[0];
    let split = 14 + usize::from(data[1] % 128);
    let mut frames: Vec<(&[u8], u8)> = Vec::new();
    let mut rest = &data[2..];
    while rest.len() >= 3 && frames.len() < 64 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]]) % 1600);
        let flag = rest[2];
        rest = &rest[3..];
        let n = len.min(rest.len());
        frames.push((&rest[..n], flag));
        rest = &rest[n..];
    }
    for mode in DatapathMode::ALL {
        let f = PacketFactory::new(mode, split, 2048, 32);
        let mut nf = make(sel);
        let mut now = 0u64;
        for chunk in frames.chunks(32) {
            let mut b = Burst::with_capacity(32);
            for (fr, flag) in chunk {
                if !f.push(&mut b, fr) {
                    continue;
                }
                let j = b.len() - 1;
                b.set_rx_port(j, u16::from(flag & 1));
                let v = if flag & 0x80 != 0 {
                    Verdict::drop(DropReason::POLICY)
                } else {
                    Verdict::tx(0)
                };
                b.set_verdict(j, v);
            }
            now += u64::from(chunk[0].1) * 1_000_000_000;
            nf.process(
                &mut b,
                &NfContext {
                    now_ns: now,
                    worker: 0,
                    workers: 1,
                },
            );
            for i in 0..b.len() {
                assert!(b.frame_len(i) <= 2048);
                assert!(b.header_len(i) <= b.frame_len(i));
            }
        }
        let s = nf.counters();
        if let (Some(p), Some(d)) = (s.count_at("packets"), s.count_at("dropped")) {
            assert!(d <= p, "{s}");
        }
        let _ = nf.finish(&NfContext::default());
    }
});
