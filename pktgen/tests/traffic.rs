//! Traffic profiles through the real generator and sink: address and port ranges, random
//! address mode, Zipf and uniform flow popularity, size mixes, timestamps and latency, and
//! sequence numbers past 2^32 with the 32-bit v2 signature.

use dataplane::link::{FrameSink, FrameSource, MAX_WIRE_FRAME};
use pktgen::dist::FlowDist;
use pktgen::generator::AddrMode;
use pktgen::{CheckingSink, Generator, GeneratorConfig, L4Proto, report};
use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

fn frames(cfg: &GeneratorConfig, n: usize) -> Vec<Vec<u8>> {
    let mut g = Generator::new(cfg.clone()).unwrap();
    let mut buf = vec![0u8; MAX_WIRE_FRAME];
    (0..n)
        .map(|i| {
            let len = g.produce_at(&mut buf, i as u64 * 100).unwrap();
            buf[..len].to_vec()
        })
        .collect()
}

fn tuple(f: &[u8]) -> (Ipv4Addr, Ipv4Addr, u16, u16) {
    (
        Ipv4Addr::new(f[26], f[27], f[28], f[29]),
        Ipv4Addr::new(f[30], f[31], f[32], f[33]),
        u16::from_be_bytes([f[34], f[35]]),
        u16::from_be_bytes([f[36], f[37]]),
    )
}

fn valid_checksums(f: &[u8]) -> bool {
    let sum = |d: &[u8]| wire::checksum::ones_sum(d, 0);
    let ip_ok = wire::checksum::finish(sum(&f[14..34])) == 0;
    let l4 = &f[34..];
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&f[26..34]);
    pseudo.extend_from_slice(&[0, f[23]]);
    pseudo.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    let l4_ok = wire::checksum::finish(sum(&pseudo) + sum(l4)) == 0;
    ip_ok && l4_ok
}

#[test]
fn ranges_of_addresses_and_ports_per_flow() {
    let cfg = GeneratorConfig {
        flows: 60,
        src_ip_count: Some(5),
        dst_ip_count: 3,
        src_port: 1000,
        src_port_count: 4,
        dst_port: 80,
        dst_port_count: 2,
        udp_checksum: true,
        ..Default::default()
    };
    let fs = frames(&cfg, 120);
    let mut seen = HashSet::new();
    for (i, f) in fs.iter().enumerate() {
        let (s, d, sp, dp) = tuple(f);
        let flow = (i % 60) as u32;
        assert_eq!(s, Ipv4Addr::new(16, 1, 1, 1 + (flow % 5) as u8));
        assert_eq!(d, Ipv4Addr::new(48, 1, 1, 1 + (flow % 3) as u8));
        assert_eq!((sp, dp), (1000 + (flow % 4) as u16, 80 + (flow % 2) as u16));
        let t = cfg.flow_tuple(flow);
        assert_eq!((t.src_ip, t.dst_ip, t.src_port, t.dst_port), (s, d, sp, dp));
        assert!(valid_checksums(f), "frame {i}");
        seen.insert(tuple(f));
    }
    // lcm(5, 3, 4, 2) = 60 distinct 5-tuples.
    assert_eq!(seen.len(), 60);
}

#[test]
fn random_address_mode_is_fixed_per_flow_and_spread() {
    let cfg = GeneratorConfig {
        flows: 1000,
        src_ip_count: Some(1 << 16),
        src_port: 1024,
        src_port_count: 64_512,
        addr_mode: AddrMode::Random,
        proto: L4Proto::Tcp,
        frame_size: 128,
        ..Default::default()
    };
    let a = frames(&cfg, 2000);
    for (i, f) in a.iter().enumerate() {
        assert_eq!(
            tuple(f),
            tuple(&a[i % 1000]),
            "flow {} keeps its tuple",
            i % 1000
        );
        let t = cfg.flow_tuple((i % 1000) as u32);
        assert_eq!(tuple(f), (t.src_ip, t.dst_ip, t.src_port, t.dst_port));
        assert!(valid_checksums(f));
    }
    let ports: HashSet<u16> = a.iter().map(|f| tuple(f).2).collect();
    assert!(ports.len() > 950, "{}", ports.len());
    assert!(ports.iter().all(|&p| p >= 1024));
    // Not simply consecutive.
    assert_ne!(tuple(&a[1]).2, tuple(&a[0]).2.wrapping_add(1));
}

#[test]
fn zipf_and_uniform_popularity() {
    let count = |dist: FlowDist| {
        let cfg = GeneratorConfig {
            flows: 100,
            flow_dist: dist,
            seed: 3,
            ..Default::default()
        };
        let mut hits: HashMap<u32, u32> = HashMap::new();
        for f in frames(&cfg, 50_000) {
            let sig = Signature::decode(&f[42..]).unwrap();
            *hits.entry(sig.flow).or_default() += 1;
            // The flow id matches the addresses.
            assert_eq!(tuple(&f).0, cfg.flow_tuple(sig.flow).src_ip);
        }
        hits
    };
    use pktgen::Signature;
    let z = count(FlowDist::Zipf { s: 1.0 });
    let h = |m: &HashMap<u32, u32>, k| f64::from(*m.get(&k).unwrap_or(&0));
    // Harmonic number H(100) = 5.187: flow 0 gets 19.3 %, flow 9 1.9 %.
    assert!((h(&z, 0) / 50_000.0 - 0.193).abs() < 0.01, "{}", h(&z, 0));
    assert!((h(&z, 0) / h(&z, 9) - 10.0).abs() < 1.5);
    let u = count(FlowDist::Uniform);
    assert_eq!(u.len(), 100);
    assert!(u.values().all(|&c| (350..650).contains(&c)), "{u:?}");
    // Same seed, same sequence.
    assert_eq!(z, count(FlowDist::Zipf { s: 1.0 }));
}

#[test]
fn size_mix_frames_are_checked_by_the_sink() {
    let cfg = GeneratorConfig {
        size_mix: Some("64:2,100:1,1518:1".parse().unwrap()),
        flows: 10,
        count: Some(400),
        proto: L4Proto::Udp,
        udp_checksum: true,
        ..Default::default()
    };
    assert!(!cfg.fixed_size());
    assert!((cfg.mean_frame_size() - 436.5).abs() < 1e-9);
    let mut g = Generator::new(cfg.clone()).unwrap();
    let gc = g.counters();
    let mut sink = CheckingSink::for_generator(&cfg);
    assert_eq!(sink.expected_len(), None);
    let sc = sink.counters();
    let mut buf = vec![0u8; MAX_WIRE_FRAME];
    let mut lens = HashMap::new();
    while let Some(n) = g.next_frame(&mut buf) {
        assert!(valid_checksums(&buf[..n]));
        *lens.entry(n).or_insert(0) += 1;
        sink.deliver(&buf[..n]);
    }
    sink.finish();
    assert_eq!((lens[&60], lens[&96], lens[&1514]), (200, 100, 100));
    let r = report(&gc, &sc);
    assert!(r.clean(), "{r:?}");
    assert_eq!(r.sent_bytes, 200 * 60 + 100 * 96 + 100 * 1514);
    assert_eq!(r.frame_size, 437);
}

#[test]
fn timestamps_give_latency_and_survive_checksums_and_wrapping() {
    let cfg = GeneratorConfig {
        frame_size: 74,
        proto: L4Proto::Tcp,
        flows: 3,
        timestamps: true,
        count: Some(1000),
        ..Default::default()
    };
    let mut g = Generator::new(cfg.clone()).unwrap();
    let mut sink = CheckingSink::for_generator(&cfg);
    let mut buf = vec![0u8; MAX_WIRE_FRAME];
    // Departure times across a 2^32 ns boundary; latency 1..1000 ns.
    let t0 = (1u64 << 32) - 500_000;
    let mut i = 0u64;
    while let Some(n) = g.produce_at(&mut buf, t0 + i * 1000) {
        assert!(valid_checksums(&buf[..n]), "frame {i}");
        sink.check_at(&buf[..n], t0 + i * 1000 + 1 + i);
        i += 1;
    }
    sink.finish();
    let l = sink.counters().latency(0).unwrap();
    assert_eq!((l.count, l.min_ns), (1000, 1));
    assert!(l.max_ns.abs_diff(1000) <= 1, "{l:?}");
    let s = sink.counters().stream(0);
    assert_eq!((s.unique, s.payload_mismatches, s.reordered), (1000, 0, 0));
}

#[test]
fn v2_sequence_numbers_unwrap_past_2_pow_32() {
    // Simulate a long stream: frames whose true sequence numbers cross 2^32, delivered with
    // one reordering and one loss around the boundary.
    let cfg = GeneratorConfig {
        timestamps: true,
        ..Default::default()
    };
    let mut sink = CheckingSink::for_generator(&cfg);
    let base = (1u64 << 32) - 3;
    // Bring the stream's expectation to `base` with a single jump (counted as a gap).
    let mk = |seq: u64| {
        let mut g = Generator::new(cfg.clone()).unwrap();
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        let n = g.produce_at(&mut buf, 0).unwrap();
        let mut f = buf[..n].to_vec();
        let sig = pktgen::Signature {
            stream: 0,
            flow: 0,
            seq,
            ts: Some(0),
        };
        f[42..58].copy_from_slice(&sig.encode());
        let off = (seq % 251) as usize;
        f[58..60].copy_from_slice(&pktgen::signature::PATTERN[off..off + 2]);
        f
    };
    let mut order: Vec<u64> = (base..base + 8).collect();
    order.swap(2, 3); // 2^32 - 1 and 2^32 swapped
    order.remove(5); // 2^32 + 2 lost
    for s in &order {
        sink.check_at(&mk(*s), 10);
    }
    sink.finish();
    let st = sink.counters().stream(0);
    assert_eq!(st.next_seq, base + 8);
    assert_eq!(st.unique, 7);
    assert_eq!(st.reordered, 1);
    assert_eq!(st.payload_mismatches, 0);
    // The initial jump from 0 plus the lost frame.
    assert_eq!(st.seq_gaps, base + 1);
}

#[test]
fn generator_as_frame_source_stamps_the_wall_clock() {
    let cfg = GeneratorConfig {
        timestamps: true,
        count: Some(100),
        ..Default::default()
    };
    let mut g = Generator::new(cfg.clone()).unwrap();
    let mut sink = CheckingSink::for_generator(&cfg);
    let mut buf = vec![0u8; MAX_WIRE_FRAME];
    while let Some(n) = g.next_frame(&mut buf) {
        sink.deliver(&buf[..n]);
    }
    assert!(g.exhausted());
    sink.finish();
    let l = sink.counters().latency(0).unwrap();
    assert_eq!(l.count, 100);
}
