//! Load-balancer behaviour tests, in all four datapath modes.

mod common;

use common::{SEC, factory, ip, params, reason, run, run1};
use dataplane::{DatapathMode, DropReason, NetworkFunction, NfCommand, Verdict};
use nfs::flow_table::FlowKey;
use nfs::lb::{LoadBalancer, maglev_disruption};
use wire::classify::verify_frame_checksums;
use wire::field::{read_u16, read_u32};
use wire::frames::{FrameSpec, L4Spec};
use wire::ipv4::{PROTO_TCP, PROTO_UDP};
use wire::tcp::TCP_SYN;

const VIP: &str = "10.2.0.1";

fn lb(p: &str) -> LoadBalancer {
    LoadBalancer::from_params(&params(p), 0, 1).expect("lb config")
}

fn backend_of(frame: &[u8]) -> u32 {
    read_u32(frame, 30)
}

fn backend_index(addr: u32) -> usize {
    (addr - ip("10.180.250.5")) as usize
}

fn client(i: u32) -> u32 {
    ip("16.1.1.1") + i
}

#[test]
fn round_robin_spreads_flows_and_rewrites_correctly() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut l = lb("flows = 4096");
        let frames: Vec<Vec<u8>> = (0..64)
            .map(|i| match i % 4 {
                0 => FrameSpec::udp(client(i), ip(VIP), 1000, 80, 500).build(),
                1 => FrameSpec::tcp(client(i), ip(VIP), 1000, 80, TCP_SYN, 33).build(),
                2 => FrameSpec::echo(client(i), ip(VIP), 9, 40).build(),
                _ => {
                    let mut s = FrameSpec::udp(client(i), ip(VIP), 1000, 80, 7);
                    s.l4 = L4Spec::Udp {
                        sport: 1000,
                        dport: 80,
                        zero_checksum: true,
                    };
                    s.build()
                }
            })
            .collect();
        let out = run(&mut l, &f, &frames, SEC, 0);
        let mut per = [0usize; 32];
        for ((o, v), inp) in out.iter().zip(&frames) {
            assert_eq!(*v, Verdict::tx(1), "{mode}");
            let b = backend_of(o);
            per[backend_index(b)] += 1;
            assert_eq!(verify_frame_checksums(o), Ok(()), "{mode}");
            // Only the destination address and the checksums changed; payload intact.
            let csum_at = match inp[23] {
                PROTO_TCP => 34 + 16,
                PROTO_UDP => 34 + 6,
                _ => 34 + 2,
            };
            assert_eq!(o.len(), inp.len());
            for k in 0..o.len() {
                let changed = (24..26).contains(&k)
                    || (30..34).contains(&k)
                    || (inp[23] != 1 && (csum_at..csum_at + 2).contains(&k));
                if !changed {
                    assert_eq!(o[k], inp[k], "{mode}: byte {k}");
                }
            }
        }
        assert!(per.iter().all(|&n| n == 2), "{mode}: {per:?}");
        let s = l.counters();
        assert_eq!(s["new_flows"], 64);
        assert_eq!(s["packets"], 64);
        let bp: u64 = s["backend_packets"].as_counts().unwrap().iter().sum();
        assert_eq!(bp, 64);
        // UDP zero checksum stayed zero.
        assert_eq!(read_u16(&out[3].0, 40), 0);
    }
}

#[test]
fn affinity_and_disable_enable() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut l = lb("flows = 4096");
        let flows: Vec<Vec<u8>> = (0..32)
            .map(|i| FrameSpec::udp(client(i), ip(VIP), 5000, 53, 20).build())
            .collect();
        let first: Vec<u32> = run(&mut l, &f, &flows, SEC, 0)
            .iter()
            .map(|(o, _)| backend_of(o))
            .collect();
        let again: Vec<u32> = run(&mut l, &f, &flows, 2 * SEC, 0)
            .iter()
            .map(|(o, _)| backend_of(o))
            .collect();
        assert_eq!(first, again, "{mode}: affinity");
        // Disable backend 5: only its flow moves.
        l.set_backend_enabled(5, false);
        let after: Vec<u32> = run(&mut l, &f, &flows, 3 * SEC, 0)
            .iter()
            .map(|(o, _)| backend_of(o))
            .collect();
        for (a, b) in first.iter().zip(&after) {
            if backend_index(*a) == 5 {
                assert_ne!(backend_index(*b), 5);
            } else {
                assert_eq!(a, b, "{mode}: unrelated flow moved");
            }
        }
        assert_eq!(l.counters()["remapped"], 1);
        // Re-enable: existing flows keep their (new) backends.
        l.set_backend_enabled(5, true);
        let back: Vec<u32> = run(&mut l, &f, &flows, 4 * SEC, 0)
            .iter()
            .map(|(o, _)| backend_of(o))
            .collect();
        assert_eq!(back, after);
    }
}

#[test]
fn maglev_is_consistent_across_workers_and_minimally_disruptive() {
    let f = factory(DatapathMode::NicInline);
    let mut a =
        LoadBalancer::from_params(&params("mode = \"maglev\"\nflows = 4096"), 0, 2).unwrap();
    let mut b =
        LoadBalancer::from_params(&params("mode = \"maglev\"\nflows = 4096"), 1, 2).unwrap();
    let flows: Vec<Vec<u8>> = (0..200)
        .map(|i| FrameSpec::tcp(client(i), ip(VIP), 1024 + i as u16, 443, TCP_SYN, 0).build())
        .collect();
    let oa = run(&mut a, &f, &flows, SEC, 0);
    let ob = run(&mut b, &f, &flows, SEC, 0);
    for ((x, _), (y, _)) in oa.iter().zip(&ob) {
        assert_eq!(backend_of(x), backend_of(y));
        assert_eq!(verify_frame_checksums(x), Ok(()));
    }
    let used: std::collections::HashSet<u32> = oa.iter().map(|(o, _)| backend_of(o)).collect();
    assert!(
        used.len() > 25,
        "200 flows should reach most of 32 backends: {}",
        used.len()
    );

    // Disruption of removing 1 of N is close to 1/N.
    let backends: Vec<u32> = (0..32).map(|i| ip("10.180.250.5") + i).collect();
    let keys: Vec<FlowKey> = (0..100_000u32)
        .map(|i| FlowKey::new(0x1000_0000 + i * 7, ip(VIP), (i % 60000) as u16, 80, 6))
        .collect();
    for removed in [0, 13, 31] {
        let d = maglev_disruption(&backends, 65537, removed, &keys);
        let ideal = 1.0 / 32.0;
        assert!(
            (d - ideal).abs() < 0.3 * ideal,
            "removing {removed}: {d} vs {ideal}"
        );
    }
}

#[test]
fn non_vip_policy_and_drops() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let other = FrameSpec::udp(client(1), ip("10.2.0.2"), 1, 2, 10).build();
        let mut arp = other.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let mut l = lb("flows = 64");
        let (o, v) = run1(&mut l, &f, &other, SEC);
        assert_eq!(
            (o.clone(), v),
            (other.clone(), Verdict::tx(1)),
            "forwarded unchanged"
        );
        let (_, v) = run1(&mut l, &f, &arp, SEC);
        assert_eq!(v, Verdict::tx(1));
        assert_eq!(l.counters()["not_for_vip"], 2);
        let mut l = lb("flows = 64\nnon_vip = \"drop\"");
        assert_eq!(
            run1(&mut l, &f, &other, SEC).1,
            Verdict::drop(reason("not_for_vip"))
        );
        // Later fragment to the VIP.
        let mut frag = FrameSpec::udp(client(1), ip(VIP), 1, 2, 10);
        frag.frag = 0x0020;
        assert_eq!(
            run1(&mut l, &f, &frag.build(), SEC).1,
            Verdict::drop(DropReason::FRAGMENT)
        );
        // Truncated VIP packet.
        let t = FrameSpec::udp(client(1), ip(VIP), 1, 2, 10).build();
        assert_eq!(
            run1(&mut l, &f, &t[..37], SEC).1,
            Verdict::drop(DropReason::TRUNCATED)
        );
        // All backends disabled.
        let mut l = lb("flows = 64\nbackend_count = 2\ndisabled = [0, 1]");
        assert_eq!(
            run1(&mut l, &f, &t, SEC).1,
            Verdict::drop(reason("no_backend")),
            "{mode}"
        );
        assert_eq!(l.counters()["drops"]["no_backend"], 1);
    }
}

#[test]
fn idle_timeout_and_full_table() {
    let f = factory(DatapathMode::Split);
    let mut l = lb("flows = 64\nidle_timeout_s = 60");
    let fr = FrameSpec::udp(client(1), ip(VIP), 1, 2, 10).build();
    run1(&mut l, &f, &fr, SEC);
    run1(&mut l, &f, &fr, 60 * SEC);
    assert_eq!(l.counters()["new_flows"], 1);
    run1(&mut l, &f, &fr, 122 * SEC);
    assert_eq!(l.counters()["new_flows"], 2);
    assert_eq!(l.counters()["expired"], 1);

    let mut l = lb("flows = 2\nfull_policy = \"drop\"\nidle_timeout_s = 0");
    let frames: Vec<Vec<u8>> = (0..3)
        .map(|i| FrameSpec::udp(client(i), ip(VIP), 1, 2, 10).build())
        .collect();
    let out = run(&mut l, &f, &frames, SEC, 0);
    assert_eq!(out[2].1, Verdict::drop(DropReason::FLOW_TABLE_FULL));
    assert_eq!(l.counters()["flow_table_full"], 1);

    let mut l = lb("flows = 2\nidle_timeout_s = 0");
    let out = run(&mut l, &f, &frames, SEC, 0);
    assert!(
        out.iter().all(|(_, v)| *v == Verdict::tx(1)),
        "evict policy keeps forwarding"
    );
    assert_eq!(l.counters()["evicted"], 1);
}

#[test]
fn explicit_backends_and_config_errors() {
    let f = factory(DatapathMode::Host);
    let mut l = lb("backends = [\"192.0.2.1\", \"192.0.2.2\"]\nflows = 8");
    let (o, _) = run1(&mut l, &f, &FrameSpec::udp(1, ip(VIP), 1, 2, 0).build(), 0);
    assert_eq!(backend_of(&o), ip("192.0.2.1"));
    for (p, key) in [
        ("maglev_table_size = 65536", "maglev_table_size"),
        ("backends = [\"1.2.3\"]", "backends"),
        ("disabled = [32]", "disabled"),
        ("vip = \"x\"", "vip"),
        ("mode = \"random\"", "mode"),
        ("backendz = []", "backendz"),
        ("backends = []", "backends"),
        ("backends = [\"1.1.1.1\", \"1.1.1.1\"]", "backends"),
    ] {
        let e = LoadBalancer::from_params(&params(p), 0, 1).err().expect(p);
        assert!(e.contains(key) && e.starts_with("lb"), "{p}: {e}");
    }
}

fn ctl(l: &mut LoadBalancer, verb: &str, args: &[&str]) -> Result<dataplane::Counters, String> {
    l.control(&NfCommand::new(verb, args), &common::ctx(0))
}

fn backends_of(l: &mut LoadBalancer, frames: &[Vec<u8>], now: u64) -> Vec<u32> {
    let f = factory(DatapathMode::Host);
    run(l, &f, frames, now, 0)
        .iter()
        .map(|(o, v)| {
            assert_eq!(*v, Verdict::tx(1));
            backend_of(o)
        })
        .collect()
}

fn udp_flows(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    range
        .map(|i| FrameSpec::udp(client(i), ip(VIP), 4000 + (i % 7) as u16, 80, 20).build())
        .collect()
}

/// Weights set the share of new flows: in round robin exactly, in Maglev by table slots.
#[test]
fn weights_share_new_flows() {
    let mut l = lb("backend_count = 3\nweights = [1, 2, 3]\nflows = 4096");
    let got = backends_of(&mut l, &udp_flows(0..600), SEC);
    let mut per = [0usize; 3];
    for b in got {
        per[backend_index(b)] += 1;
    }
    assert_eq!(per, [100, 200, 300]);
    let mut m = lb("backend_count = 3\nweights = [1, 2, 3]\nmode = \"maglev\"\nflows = 4096");
    let r = ctl(&mut m, "backends", &[]).unwrap();
    assert_eq!(r.count_at("backends.10.180.250.7.weight"), Some(3));
    let mut per = [0usize; 3];
    for b in backends_of(&mut m, &udp_flows(0..3000), SEC) {
        per[backend_index(b)] += 1;
    }
    let share = |i: usize| per[i] as f64 / 3000.0;
    assert!((share(0) - 1.0 / 6.0).abs() < 0.04, "{per:?}");
    assert!((share(2) - 0.5).abs() < 0.04, "{per:?}");
    let e = LoadBalancer::from_params(&params("backend_count = 3\nweights = [1, 2]"), 0, 1)
        .err()
        .unwrap();
    assert!(
        e.contains("weights") && e.contains("2 weights for 3 backends"),
        "{e}"
    );
    let e = LoadBalancer::from_params(&params("backend_count = 1\nweights = [10001]"), 0, 1)
        .err()
        .unwrap();
    assert!(e.contains("0..=10000"), "{e}");
}

/// Draining one of three Maglev backends: its existing flows stay on it, no new flow reaches
/// it, no flow of another backend moves, and about a third of the table changes owner, nearly
/// all of it the drained backend's.
#[test]
fn draining_a_maglev_backend_moves_only_its_new_flows() {
    let mut l = lb("backend_count = 3\nmode = \"maglev\"\nflows = 65536");
    let old = udp_flows(0..3000);
    let before = backends_of(&mut l, &old, SEC);
    let drained = ip("10.180.250.6");
    let on_drained = before.iter().filter(|&&b| b == drained).count();
    assert!(on_drained > 800, "{on_drained}");
    let r = ctl(&mut l, "drain", &["10.180.250.6"]).unwrap();
    assert_eq!(r["state"].as_text(), Some("draining"));
    assert_eq!(r["weight"], 0);
    assert_eq!(r["active_flows"], on_drained as u64);
    let slots = r["table_slots"].as_count().unwrap() as f64;
    let changed = r["slots_changed"].as_count().unwrap() as f64;
    let others = r["slots_changed_of_other_backends"].as_count().unwrap();
    assert!(
        (changed / slots - 1.0 / 3.0).abs() < 0.01,
        "{changed} of {slots}"
    );
    // Maglev's table moves almost nothing else (10 of 65 537 slots here); the flow table keeps
    // even those flows where they are.
    assert!((others as f64) < 0.001 * slots, "{others} of {slots}");
    // Existing flows, the drained backend's included, keep their backend.
    assert_eq!(backends_of(&mut l, &old, 2 * SEC), before);
    // New flows never reach it.
    let new = backends_of(&mut l, &udp_flows(10_000..13_000), 2 * SEC);
    assert!(new.iter().all(|&b| b != drained));
    let rows = ctl(&mut l, "backends", &[]).unwrap();
    let row = |a: &str, k: &str| rows.count_at(&format!("backends.{a}.{k}")).unwrap();
    assert_eq!(row("10.180.250.6", "new_flows"), on_drained as u64);
    assert_eq!(row("10.180.250.6", "packets"), 2 * on_drained as u64);
    assert_eq!(row("10.180.250.6", "active_flows"), on_drained as u64);
    assert_eq!(
        row("10.180.250.5", "new_flows") + row("10.180.250.7", "new_flows"),
        6000 - on_drained as u64
    );
    assert_eq!(l.counters()["remapped"], 0);
    // Enabled again, it takes new flows again; nothing moved.
    ctl(&mut l, "enable", &["10.180.250.6"]).unwrap();
    let again = backends_of(&mut l, &udp_flows(20_000..23_000), 3 * SEC);
    assert!(again.iter().filter(|&&b| b == drained).count() > 800);
    assert_eq!(backends_of(&mut l, &old, 3 * SEC), before);
}

/// Remove re-assigns the backend's flows on their next packet; add brings a backend in (a new
/// address, or a removed one back); bad commands say what is allowed.
#[test]
fn backends_are_added_removed_and_weighted_at_run_time() {
    let mut l = lb("backend_count = 2\nflows = 4096");
    let flows = udp_flows(0..100);
    let before = backends_of(&mut l, &flows, SEC);
    let gone = ip("10.180.250.5");
    let r = ctl(&mut l, "remove", &["10.180.250.5"]).unwrap();
    assert_eq!(r["state"].as_text(), Some("removed"));
    let after = backends_of(&mut l, &flows, 2 * SEC);
    assert!(after.iter().all(|&b| b != gone));
    assert_eq!(l.counters()["remapped"], 50);
    assert_eq!(l.backend_flows(0), 0, "its flows have all moved");
    for (b, a) in before.iter().zip(&after) {
        if *b != gone {
            assert_eq!(a, b);
        }
    }
    let r = ctl(&mut l, "add", &["10.9.9.9", "2"]).unwrap();
    assert_eq!(r["state"].as_text(), Some("active"));
    assert_eq!(r["weight"], 2);
    let new = backends_of(&mut l, &udp_flows(1000..1030), 3 * SEC);
    let to_new = new.iter().filter(|&&b| b == ip("10.9.9.9")).count();
    assert_eq!(to_new, 20, "weight 2 of 3: two of every three new flows");
    for f in &new {
        assert!([ip("10.9.9.9"), ip("10.180.250.6")].contains(f));
    }
    let e = ctl(&mut l, "drain", &["10.180.250.5"]).unwrap_err();
    assert!(e.contains("removed") && e.contains("`add`"), "{e}");
    ctl(&mut l, "add", &["10.180.250.5"]).unwrap();
    assert_eq!(l.backend_weight(0), Some(1));
    let e = ctl(&mut l, "add", &["10.9.9.9"]).unwrap_err();
    assert!(e.contains("already a backend"), "{e}");
    let e = ctl(&mut l, "weight", &["10.9.9.9", "x"]).unwrap_err();
    assert!(e.contains("0..=10000"), "{e}");
    let e = ctl(&mut l, "drain", &["10.1.1.1"]).unwrap_err();
    assert!(e.contains("not a backend"), "{e}");
    let e = ctl(&mut l, "drain", &["nowhere"]).unwrap_err();
    assert!(e.contains("not an IPv4 address"), "{e}");
    let e = ctl(&mut l, "explode", &[]).unwrap_err();
    assert!(e.contains("allowed: backends, add ADDR"), "{e}");
    ctl(&mut l, "weight", &["10.9.9.9", "0"]).unwrap();
    assert_eq!(
        l.backend_state(2),
        Some(nfs::lb::BackendState::Draining),
        "weight 0 drains"
    );
    ctl(&mut l, "disable", &["10.9.9.9"]).unwrap();
    let e = ctl(&mut l, "weight", &["10.9.9.9", "3"]).unwrap_err();
    assert!(e.contains("disabled") && e.contains("`enable`"), "{e}");
}

/// A router's "fragmentation needed" about a backend's reply to `c:cport` (the reply left with
/// the VIP as its source, direct server return), sent to the VIP.
fn frag_needed_about(c: u32, cport: u16, quote_len: usize) -> Vec<u8> {
    let reply = FrameSpec::tcp(ip(VIP), c, 80, cport, 0x18, 1400).ip_packet();
    FrameSpec {
        l4: L4Spec::IcmpError {
            ty: 3,
            code: 4,
            inner: reply,
            inner_len: quote_len,
        },
        ..FrameSpec::udp(ip("192.0.2.254"), ip(VIP), 0, 0, 0)
    }
    .build()
}

#[test]
fn icmp_errors_about_a_vip_flow_reach_that_flows_backend_with_maglev() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut l = lb("flows = 4096\nmode = \"maglev\"");
        let flows: Vec<(u32, u16)> = (0..8).map(|i| (client(i * 37), 20000 + i as u16)).collect();
        let syns: Vec<Vec<u8>> = flows
            .iter()
            .map(|&(c, p)| FrameSpec::tcp(c, ip(VIP), p, 80, TCP_SYN, 0).build())
            .collect();
        let backends: Vec<u32> = run(&mut l, &f, &syns, SEC, 0)
            .iter()
            .map(|(o, _)| backend_of(o))
            .collect();
        let distinct: std::collections::HashSet<_> = backends.iter().collect();
        assert!(distinct.len() > 1, "{mode}: the flows are spread");
        // Errors in reverse order, quoting 28 B (RFC 792) or 48 B (past the header segment).
        for (k, &(c, p)) in flows.iter().enumerate().rev() {
            let err = frag_needed_about(c, p, if k % 2 == 0 { 28 } else { 48 });
            let (o, v) = run1(&mut l, &f, &err, 2 * SEC);
            assert_eq!(v, Verdict::tx(1), "{mode}");
            assert_eq!(
                backend_of(&o),
                backends[k],
                "{mode}: error {k} to its flow's backend"
            );
            assert_eq!(verify_frame_checksums(&o), Ok(()));
            assert_eq!(o[34..], err[34..], "{mode}: the ICMP message is untouched");
        }
        let s = l.counters();
        assert_eq!(s["icmp_errors_steered"], 8, "{mode}");
        assert_eq!(s["icmp_no_flow"], 0);
        assert_eq!(s["new_flows"], 8, "errors create no flow");
        let slow = if mode == DatapathMode::Host { 0 } else { 8 };
        assert_eq!(s["icmp_errors_slow_path"], slow, "{mode}");
    }
}

#[test]
fn icmp_errors_about_no_known_flow_are_counted() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        // Round robin has no backend for an unknown flow: dropped with the reason.
        let mut l = lb("flows = 64");
        let (_, v) = run1(&mut l, &f, &frag_needed_about(client(1), 999, 28), SEC);
        assert_eq!(v, Verdict::drop(reason("icmp_no_flow")), "{mode}");
        assert_eq!(l.counters()["icmp_no_flow"], 1);
        // Maglev sends it where the quoted flow hashes to: where the flow would be now.
        let mut m = lb("flows = 64\nmode = \"maglev\"");
        let (o, v) = run1(&mut m, &f, &frag_needed_about(client(1), 999, 28), SEC);
        assert_eq!(v, Verdict::tx(1), "{mode}");
        assert_eq!(m.counters()["icmp_no_flow"], 1);
        let syn = FrameSpec::tcp(client(1), ip(VIP), 999, 80, TCP_SYN, 0).build();
        let (first, _) = run1(&mut m, &f, &syn, SEC);
        assert_eq!(backend_of(&o), backend_of(&first), "{mode}");
    }
}

/// `return = "nat"`: a backend's reply to a balanced flow leaves with the VIP as its source
/// (checksums valid, checked by etherparse too); a packet from a backend that matches no flow is
/// left alone; `nat` with several workers is refused with the reason.
#[test]
fn nat_return_rewrites_replies_back_to_the_vip() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut l = lb("flows = 64\nbackends = [\"10.0.2.11\", \"10.0.2.12\"]\nreturn = \"nat\"");
        let syn = FrameSpec::tcp(client(1), ip(VIP), 40000, 80, TCP_SYN, 0).build();
        let (o, _) = run1(&mut l, &f, &syn, SEC);
        let backend = backend_of(&o);
        let reply = FrameSpec::tcp(backend, client(1), 80, 40000, 0x12, 100).build();
        let (r, v) = run1(&mut l, &f, &reply, SEC);
        assert_eq!(v, Verdict::tx(1), "{mode}");
        assert_eq!(read_u32(&r, 26), ip(VIP), "{mode}: source is the VIP");
        assert_eq!(verify_frame_checksums(&r), Ok(()), "{mode}");
        let p = etherparse::SlicedPacket::from_ethernet(&r).unwrap();
        let Some(etherparse::TransportSlice::Tcp(t)) = p.transport else {
            panic!("tcp")
        };
        let Some(etherparse::NetSlice::Ipv4(ip4)) = p.net else {
            panic!("ipv4")
        };
        let sum = t
            .to_header()
            .calc_checksum_ipv4(&ip4.header().to_header(), t.payload())
            .unwrap();
        assert_eq!(sum, t.checksum(), "{mode}: etherparse agrees");
        // Another client's port: no flow, no rewrite.
        let stray = FrameSpec::tcp(backend, client(1), 80, 40001, 0x10, 10).build();
        let (s, _) = run1(&mut l, &f, &stray, SEC);
        assert_eq!(s, stray, "{mode}");
        assert_eq!(l.counters()["replies_translated"], 1);
    }
    let e = LoadBalancer::from_params(&params("return = \"nat\""), 0, 2)
        .err()
        .unwrap();
    assert!(e.contains("run.workers = 1") && e.contains("ipip"), "{e}");
}

/// `return = "ipip"`: the client's packet, unchanged, inside an outer IPv4 header from the
/// tunnel source to its backend (etherparse reads both headers); every packet of a flow goes to
/// one backend; too big for the tunnel MTU is a counted drop.
#[test]
fn ipip_return_encapsulates_to_the_backend() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut l = lb(
            "flows = 64\nbackends = [\"10.0.2.11\", \"10.0.2.12\", \"10.0.2.13\"]\n\
                        return = \"ipip\"\ntunnel_src = \"10.0.2.1\"\ntunnel_mtu = 1500",
        );
        let mut seen = std::collections::BTreeSet::new();
        for c in 0..6u32 {
            let inner = FrameSpec::udp(client(c), ip(VIP), 5000, 53, 300).build();
            let mut backend = None;
            for _ in 0..2 {
                let (o, v) = run1(&mut l, &f, &inner, SEC);
                assert_eq!(v, Verdict::tx(1), "{mode}");
                assert_eq!(o.len(), inner.len() + 20);
                assert_eq!(
                    &o[..14],
                    &inner[..14],
                    "{mode}: the Ethernet header moved along"
                );
                assert_eq!(
                    &o[34..],
                    &inner[14..],
                    "{mode}: the inner packet is untouched"
                );
                let outer = etherparse::Ipv4HeaderSlice::from_slice(&o[14..]).unwrap();
                assert_eq!(outer.protocol(), etherparse::IpNumber::IPV4);
                assert_eq!(outer.source(), [10, 0, 2, 1]);
                assert_eq!(usize::from(outer.total_len()), inner.len() - 14 + 20);
                let h = outer.to_header();
                assert_eq!(h.calc_header_checksum(), h.header_checksum, "{mode}");
                let b = u32::from_be_bytes(outer.destination());
                assert!(
                    backend.is_none_or(|x| x == b),
                    "{mode}: one flow, one backend"
                );
                backend = Some(b);
            }
            seen.insert(backend.unwrap());
        }
        assert_eq!(seen.len(), 3, "{mode}: round robin over the backends");
        let big = FrameSpec::udp(client(9), ip(VIP), 5000, 53, 1472).build();
        let (_, v) = run1(&mut l, &f, &big, SEC);
        assert_eq!(v, Verdict::drop(reason("tunnel_too_big")), "{mode}");
        assert_eq!(l.counters()["encapsulated"], 12);
    }
}
