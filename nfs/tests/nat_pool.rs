//! The NAT's outside pool at run time, deterministic NAT (RFC 7422), NAT instances sharing a
//! pool, and the IPFIX events of refusals: each driven through the NAT as a run drives it
//! (bursts, commands between bursts, idle release calls).

mod common;

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use common::{SEC, ctx, factory, ip, params, reason, run};
use dataplane::net::{ArpConfig, Network};
use dataplane::{DatapathMode, NetworkFunction, NfCommand, Verdict};
use nfs::nat::{DeterministicPlan, Nat};
use nfs::registry::BuildContext;
use wire::classify::parse;
use wire::frames::FrameSpec;

fn udp(src: u32, sport: u16, dst: &str, dport: u16) -> Vec<u8> {
    FrameSpec::udp(src, ip(dst), sport, dport, 100).build()
}

/// (source, source port) of a frame.
fn source(f: &[u8]) -> (u32, u16) {
    let p = parse(f, f.len()).unwrap();
    (p.src, p.ports().0)
}

/// A collector on a free local port, and its address.
fn collector() -> (UdpSocket, String) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let a = s.local_addr().unwrap().to_string();
    (s, a)
}

/// Length of a data record of the NAT's templates (`nfs/src/nat/ipfix.rs`).
fn record_len(tpl: u16) -> usize {
    match tpl {
        256 => 28,
        257 => 14,
        258 => 25,
        259 => 13,
        260 => 21,
        261 => 17,
        _ => panic!("template {tpl}"),
    }
}

/// The data records in every message `rx` holds now, by template ID.
fn records(rx: &UdpSocket) -> HashMap<u16, Vec<Vec<u8>>> {
    rx.set_nonblocking(true).unwrap();
    let mut out: HashMap<u16, Vec<Vec<u8>>> = HashMap::new();
    let mut b = [0u8; 2048];
    while let Ok(n) = rx.recv(&mut b) {
        let m = &b[..n];
        let mut o = 16;
        while o + 4 <= m.len() {
            let id = u16::from_be_bytes([m[o], m[o + 1]]);
            let len = usize::from(u16::from_be_bytes([m[o + 2], m[o + 3]]));
            if id >= 256 {
                out.entry(id)
                    .or_default()
                    .extend(m[o + 4..o + len].chunks(record_len(id)).map(<[u8]>::to_vec));
            }
            o += len;
        }
    }
    rx.set_nonblocking(false).unwrap();
    out
}

fn cmd(
    n: &mut dyn NetworkFunction,
    verb: &str,
    args: &[&str],
    now: u64,
) -> Result<dataplane::Counters, String> {
    n.control(&NfCommand::new(verb, args), &ctx(now))
}

/// The ports' network: port 0 inside (10.0.1.1/24), port 1 outside (198.51.100.254/24).
fn network() -> Arc<Network> {
    let ports = dataplane::testkit::inside_outside_ports("10.0.1.1/24", "198.51.100.254/24");
    Arc::new(Network::new(ports, &[], &[], ArpConfig::default()).unwrap())
}

/// A spare address added between bursts takes new subscribers (existing sessions keep their
/// address); draining stops that; removing ends its sessions with a logged delete for each,
/// and the outside port stops answering ARP for it.
#[test]
fn pool_add_drain_and_remove_between_bursts() {
    let f = factory(DatapathMode::NicInline);
    let (rx, coll) = collector();
    let net = network();
    let p = params(&format!(
        "nat_ips = \"198.51.100.0/30\"\nspare_ips = \"198.51.100.9\"\nflows = 65536\n\
         log_ipfix = \"{coll}\"\nlog_flush_ms = 1"
    ));
    let mut ctxb = BuildContext::new(0, 1);
    ctxb.net = Some(net.clone());
    let mut nf = nfs::build("nat", &p, &ctxb).unwrap();
    net.set_owned(&nf.owned_addresses());
    let spare = ip("198.51.100.9");
    assert!(!net.owns(1, spare));
    assert!(net.owns(1, ip("198.51.100.1")));
    let subs: Vec<u32> = (0..4000u32).map(|i| ip("100.64.0.0") + i).collect();
    let frames = |range: std::ops::Range<usize>, sport: u16| -> Vec<Vec<u8>> {
        subs[range]
            .iter()
            .map(|&s| udp(s, sport, "203.0.113.5", 53))
            .collect()
    };
    let first: Vec<(u32, u16)> = run(nf.as_mut(), &f, &frames(0..4000, 1000), SEC, 0)
        .iter()
        .map(|(fr, v)| {
            assert_eq!(*v, Verdict::tx(1));
            source(fr)
        })
        .collect();
    assert!(first.iter().all(|&(a, _)| a != spare));
    let n = nf.as_mut();
    let r = cmd(n, "pool", &["add", "198.51.100.9"], SEC).unwrap();
    assert_eq!(r.get("state").and_then(|v| v.as_text()), Some("active"));
    assert!(net.owns(1, spare), "answered once added");
    // Old sessions keep their address; new ones (another inside port) of about 1/5 of the
    // subscribers go to the new address, the others stay on their address.
    let again: Vec<(u32, u16)> = run(nf.as_mut(), &f, &frames(0..4000, 1000), 2 * SEC, 0)
        .iter()
        .map(|(fr, _)| source(fr))
        .collect();
    assert_eq!(again, first);
    let second: Vec<(u32, u16)> = run(nf.as_mut(), &f, &frames(0..4000, 2000), 2 * SEC, 0)
        .iter()
        .map(|(fr, _)| source(fr))
        .collect();
    let moved = (0..4000).filter(|&i| second[i].0 != first[i].0).count();
    assert!(
        (0..4000).all(|i| second[i].0 == first[i].0 || second[i].0 == spare),
        "a subscriber moved to an old address"
    );
    let share = moved as f64 / 4000.0;
    assert!((0.13..0.27).contains(&share), "{share}");
    // Drained: no new subscriber on it, its sessions go on.
    let n = nf.as_mut();
    cmd(n, "pool", &["drain", "198.51.100.9"], 3 * SEC).unwrap();
    let third: Vec<(u32, u16)> = run(nf.as_mut(), &f, &frames(0..4000, 3000), 3 * SEC, 0)
        .iter()
        .map(|(fr, _)| source(fr))
        .collect();
    assert!(third.iter().all(|&(a, _)| a != spare));
    assert!(net.owns(1, spare), "a draining address is still answered");
    let on_spare: HashSet<(u32, u16)> = second.iter().copied().filter(|s| s.0 == spare).collect();
    records(&rx);
    // Removed: every session on it ends, each logged as a delete of its outside endpoint.
    let n = nf.as_mut();
    let r = cmd(n, "pool", &["remove", "198.51.100.9"], 4 * SEC).unwrap();
    assert_eq!(r.count_at("sessions_ended"), Some(on_spare.len() as u64));
    assert!(!net.owns(1, spare), "no longer answered");
    let mut ctx_later = ctx(4 * SEC + 5_000_000);
    ctx_later.workers = 1;
    assert!(nf.wants_release(), "the deletes wait to be sent");
    let mut out = dataplane::Burst::with_capacity(32);
    nf.release(&mut out, &ctx_later, false);
    assert!(
        !nf.wants_release(),
        "sent by an idle release within log_flush_ms"
    );
    let deletes: HashSet<(u32, u16)> = records(&rx)
        .remove(&256)
        .unwrap_or_default()
        .iter()
        .filter(|r| r[8] == 5)
        .map(|r| {
            (
                u32::from_be_bytes(r[13..17].try_into().unwrap()),
                u16::from_be_bytes([r[20], r[21]]),
            )
        })
        .collect();
    assert_eq!(deletes, on_spare);
    // Its subscribers' packets now leave from their other addresses again; the last address
    // in service cannot be removed, an unknown one is refused naming spare_ips.
    let back: Vec<(u32, u16)> = run(nf.as_mut(), &f, &frames(0..4000, 2000), 5 * SEC, 0)
        .iter()
        .map(|(fr, _)| source(fr))
        .collect();
    assert!(back.iter().all(|&(a, _)| a != spare));
    let n = nf.as_mut();
    let e = cmd(n, "pool", &["add", "192.0.2.1"], 5 * SEC).unwrap_err();
    assert!(e.contains("spare_ips"), "{e}");
    for a in ["198.51.100.0", "198.51.100.1", "198.51.100.2"] {
        cmd(n, "pool", &["remove", a], 5 * SEC).unwrap();
    }
    let e = cmd(n, "pool", &["remove", "198.51.100.3"], 5 * SEC).unwrap_err();
    assert!(e.contains("last address"), "{e}");
    // Every address draining: a new subscriber has no address (natEvent 3), an old one's
    // session goes on.
    cmd(n, "pool", &["drain", "198.51.100.3"], 5 * SEC).unwrap();
    records(&rx);
    let out = run(
        nf.as_mut(),
        &f,
        &[
            udp(ip("100.65.0.1"), 7, "203.0.113.5", 53),
            udp(subs[0], 2000, "203.0.113.5", 53),
        ],
        6 * SEC,
        0,
    );
    assert_eq!(out[0].1, Verdict::drop(reason("port_exhausted")));
    assert_eq!(out[1].1, Verdict::tx(1));
    assert_eq!(nf.counters().count_at("no_active_address"), Some(1));
    nf.release(&mut out_burst(), &ctx(7 * SEC), false);
    let got = records(&rx);
    let exhausted = &got[&259];
    assert_eq!(
        (exhausted.len(), exhausted[0][8]),
        (1, 3),
        "one addresses-exhausted record"
    );
    assert_eq!(
        nf.counters().count_at("log.lost"),
        Some(0),
        "removing addresses with thousands of sessions loses no delete"
    );
}

fn out_burst() -> dataplane::Burst {
    dataplane::Burst::with_capacity(32)
}

/// Deterministic NAT: every translation of a subscriber lands in the range the plan computes
/// for it on that worker, maps back to it, logs nothing per session; a subscriber past its range
/// is refused with a quota-exceeded record; an address outside the subscriber prefixes is
/// dropped as `not_subscriber`.
#[test]
fn deterministic_translations_follow_the_plan_and_log_only_refusals() {
    let f = factory(DatapathMode::Host);
    let (rx, coll) = collector();
    let cfg = format!(
        "nat_ips = \"198.51.100.0/30\"\ndeterministic = true\n\
         subscriber_prefixes = [\"100.64.0.0/26\"]\nport_min = 1024\nport_max = 1535\n\
         flows = 8192\nlog_ipfix = \"{coll}\"\nlog_flush_ms = 1\nport_preservation = false"
    );
    let plan = DeterministicPlan::from_params(&params(&cfg), 2).unwrap();
    // 64 subscribers on 4 addresses: 16 per address; a worker's 256 ports give 16 each.
    assert_eq!(plan.ratio(), 16);
    for w in 0..2u16 {
        let mut n = Nat::from_params(&params(&cfg), w, 2).unwrap();
        let mut seen = HashSet::new();
        for s in 0..64u32 {
            let sub = ip("100.64.0.0") + s;
            let pl = plan.forward(Ipv4Addr::from(sub)).remove(0);
            let (_, first, last) = pl.ranges[usize::from(w)];
            assert_eq!(last - first + 1, 16);
            // 16 sessions fill the range; the 17th is refused.
            let frames: Vec<Vec<u8>> = (0..17)
                .map(|k| udp(sub, 5000 + k, "203.0.113.5", 53))
                .collect();
            let out = common::run(&mut n, &f, &frames, SEC, 0);
            for (fr, v) in &out[..16] {
                assert_eq!(*v, Verdict::tx(1));
                let (a, p) = source(fr);
                assert_eq!(Ipv4Addr::from(a), pl.outside);
                assert!((first..=last).contains(&p), "{p} not in {first}-{last}");
                assert!(seen.insert((a, p)));
                let h = plan.reverse(Ipv4Addr::from(a), p).unwrap();
                assert_eq!((h.inside, h.worker), (Ipv4Addr::from(sub), w));
            }
            assert_eq!(out[16].1, Verdict::drop(reason("subscriber_limit")));
        }
        let out = run(
            &mut n,
            &f,
            &[udp(ip("100.64.1.0"), 1, "203.0.113.5", 53)],
            SEC,
            0,
        );
        assert_eq!(out[0].1, Verdict::drop(reason("not_subscriber")));
        // No session records; one quota record per refused subscriber, up to the rate limit
        // (10 per second by default), the rest counted.
        let mut later = dataplane::Burst::with_capacity(32);
        n.release(&mut later, &ctx(SEC + 10_000_000), false);
        let mut got = records(&rx);
        assert!(!got.contains_key(&256), "no per-session log");
        let quota = got.remove(&260).unwrap_or_default();
        assert_eq!(quota.len(), 10);
        for r in &quota {
            assert_eq!(r[8], 13, "natEvent quota exceeded");
            assert_eq!(u32::from_be_bytes(r[9..13].try_into().unwrap()), 3);
            assert_eq!(u32::from_be_bytes(r[13..17].try_into().unwrap()), 16);
        }
        let c = n.counters();
        assert_eq!(c.count_at("log.exhaustion_suppressed"), Some(54));
        assert_eq!(c.count_at("new_eim_mappings"), Some(64 * 16));
    }
}

/// Two NAT instances of one config (`instances = 2`) given the same subscribers' traffic never
/// hand out the same outside address and port: each uses only its share of the pool.
#[test]
fn two_instances_allocate_disjoint_outside_endpoints() {
    let f = factory(DatapathMode::Host);
    let cfg = |k: u32| {
        format!("nat_ips = \"198.51.100.0/29\"\nflows = 65536\ninstances = 2\ninstance = {k}")
    };
    let mut used: Vec<HashMap<(u32, u16), u32>> = Vec::new();
    for k in 0..2 {
        let mut n = Nat::from_params(&params(&cfg(k)), 0, 1).unwrap();
        let frames: Vec<Vec<u8>> = (0..3000u32)
            .map(|s| {
                udp(
                    ip("100.64.0.0") + s % 1000,
                    4000 + (s / 1000) as u16,
                    "203.0.113.5",
                    53,
                )
            })
            .collect();
        let mut m = HashMap::new();
        for (i, (fr, v)) in run(&mut n, &f, &frames, SEC, 0).iter().enumerate() {
            assert_eq!(*v, Verdict::tx(1));
            assert!(
                m.insert(source(fr), i as u32).is_none(),
                "one endpoint per session"
            );
        }
        let addrs: HashSet<u32> = m.keys().map(|e| e.0).collect();
        let share: HashSet<u32> = (0..4).map(|i| ip("198.51.100.0") + 4 * k + i).collect();
        assert!(addrs.is_subset(&share), "instance {k}: {addrs:?}");
        assert_eq!(addrs.len(), 4, "instance {k} uses all of its share");
        used.push(m);
    }
    assert!(used[0].keys().all(|e| !used[1].contains_key(e)));
    let e = Nat::from_params(
        &params("nat_ip = \"10.0.0.1\"\ninstances = 2\ninstance = 0"),
        0,
        1,
    )
    .err()
    .unwrap();
    assert!(
        e.contains("instances") && e.contains("at least one outside address"),
        "{e}"
    );
    let e = Nat::from_params(&params("instances = 2\ninstance = 2"), 0, 1)
        .err()
        .unwrap();
    assert!(e.contains("`instance`") && e.contains("0..2"), "{e}");
}
