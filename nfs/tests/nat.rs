//! NAT behaviour tests, every one in all four datapath modes.

mod common;

use common::{SEC, factory, ip, params, reason, run, run1};
use dataplane::testkit::PacketFactory;
use dataplane::{DatapathMode, DropReason, NetworkFunction, Verdict};
use nfs::nat::Nat;
use wire::classify::{parse, verify_frame_checksums};
use wire::field::{read_u16, read_u32};
use wire::frames::{FrameSpec, L4Spec};
use wire::ipv4::{PROTO_TCP, PROTO_UDP};
use wire::tcp::{TCP_ACK, TCP_FIN, TCP_SYN};

const NAT_IP: &str = "10.0.0.1";

fn nat(p: &str) -> Nat {
    Nat::from_params(&params(p), 0, 1).expect("nat config")
}

fn small() -> Nat {
    nat("flows = 4096")
}

fn tx(v: Verdict) -> bool {
    v == Verdict::tx(1)
}

/// (src, sport, dst, dport) of a frame.
fn tuple(f: &[u8]) -> (u32, u16, u32, u16) {
    let p = parse(f, f.len()).unwrap();
    let (s, d) = p.ports();
    (p.src, s, p.dst, d)
}

#[test]
fn udp_out_and_back_in_every_mode() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut n = small();
        let out = FrameSpec::udp(ip("192.168.1.10"), ip("8.8.8.8"), 5555, 53, 300).build();
        let (o, v) = run1(&mut n, &f, &out, SEC);
        assert!(tx(v), "{mode}: {v:?}");
        let (s, sp, d, dp) = tuple(&o);
        assert_eq!((s, d, dp), (ip(NAT_IP), ip("8.8.8.8"), 53), "{mode}");
        assert!(sp >= 1024, "{mode}");
        assert_eq!(verify_frame_checksums(&o), Ok(()), "{mode}");
        assert_eq!(&o[42..], &out[42..], "{mode}: payload changed");
        assert_eq!(
            n.mapping(ip("192.168.1.10"), ip("8.8.8.8"), 5555, 53, PROTO_UDP),
            Some(sp)
        );

        let reply = FrameSpec::udp(ip("8.8.8.8"), ip(NAT_IP), 53, sp, 120).build();
        let (r, v) = run1(&mut n, &f, &reply, 2 * SEC);
        assert!(tx(v), "{mode}");
        assert_eq!(
            tuple(&r),
            (ip("8.8.8.8"), 53, ip("192.168.1.10"), 5555),
            "{mode}"
        );
        assert_eq!(verify_frame_checksums(&r), Ok(()), "{mode}");
        assert_eq!(&r[42..], &reply[42..], "{mode}");

        let s = n.counters();
        assert_eq!(s["outbound_translated"], 1);
        assert_eq!(s["inbound_translated"], 1);
        assert_eq!(s["translations"], 2);
        assert_eq!(s["new_mappings"], 1);
        assert_eq!(s["active_mappings"], 1);
    }
}

#[test]
fn same_flow_in_one_burst_gets_one_mapping() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut n = small();
        let fr = FrameSpec::udp(ip("192.168.1.10"), ip("1.1.1.1"), 1000, 2000, 10).build();
        let frames: Vec<_> = (0..40).map(|_| fr.clone()).collect();
        let out = run(&mut n, &f, &frames, SEC, 0);
        let first = tuple(&out[0].0);
        for (o, v) in &out {
            assert!(tx(*v));
            assert_eq!(tuple(o), first, "{mode}");
        }
        assert_eq!(n.counters()["new_mappings"], 1, "{mode}");
    }
}

#[test]
fn unsolicited_inbound_is_no_mapping() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut n = small();
        let fr = FrameSpec::udp(ip("8.8.8.8"), ip(NAT_IP), 53, 4000, 10).build();
        let (_, v) = run1(&mut n, &f, &fr, SEC);
        assert_eq!(v, Verdict::drop(reason("no_mapping")), "{mode}");
        assert_eq!(n.counters()["no_mapping"], 1);
        assert_eq!(n.counters()["drops"]["no_mapping"], 1);
    }
}

#[test]
fn zero_udp_checksum_stays_zero() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut n = small();
        let mut spec = FrameSpec::udp(ip("192.168.1.2"), ip("9.9.9.9"), 7, 7, 30);
        spec.l4 = L4Spec::Udp {
            sport: 7,
            dport: 7,
            zero_checksum: true,
        };
        let (o, v) = run1(&mut n, &f, &spec.build(), SEC);
        assert!(tx(v));
        assert_eq!(read_u16(&o, 40), 0, "{mode}");
        assert_eq!(verify_frame_checksums(&o), Ok(()));
    }
}

#[test]
fn tcp_states_and_timeouts() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut n = small();
        let (a, r) = (ip("192.168.0.5"), ip("93.184.216.34"));
        let syn = FrameSpec::tcp(a, r, 40000, 443, TCP_SYN, 0).build();
        let (o, _) = run1(&mut n, &f, &syn, SEC);
        let np = tuple(&o).1;
        // Transitory only: gone after 240 s idle.
        let (o2, _) = run1(&mut n, &f, &syn, 242 * SEC);
        assert_eq!(n.counters()["expired"], 1, "{mode}");
        assert_eq!(n.counters()["new_mappings"], 2, "{mode}");
        let np2 = tuple(&o2).1;
        // SYN-ACK in: established; survives 300 s of idleness, not 7440 s.
        let synack = FrameSpec::tcp(r, ip(NAT_IP), 443, np2, TCP_SYN | TCP_ACK, 0).build();
        let (i, v) = run1(&mut n, &f, &synack, 243 * SEC);
        assert!(tx(v), "{mode}: {v:?}");
        assert_eq!(tuple(&i), (r, 443, a, 40000));
        assert_eq!(verify_frame_checksums(&i), Ok(()));
        let ack = FrameSpec::tcp(a, r, 40000, 443, TCP_ACK, 100).build();
        let (o3, v) = run1(&mut n, &f, &ack, 600 * SEC);
        assert!(tx(v));
        assert_eq!(tuple(&o3).1, np2, "{mode}: established session kept");
        assert_eq!(n.counters()["new_mappings"], 2);
        // FIN both ways -> transitory again: expires after 240 s.
        let fin = FrameSpec::tcp(a, r, 40000, 443, TCP_FIN | TCP_ACK, 0).build();
        run1(&mut n, &f, &fin, 601 * SEC);
        let fin_in = FrameSpec::tcp(r, ip(NAT_IP), 443, np2, TCP_FIN | TCP_ACK, 0).build();
        let (_, v) = run1(&mut n, &f, &fin_in, 602 * SEC);
        assert!(tx(v));
        let late_in = FrameSpec::tcp(r, ip(NAT_IP), 443, np2, TCP_ACK, 0).build();
        let (_, v) = run1(&mut n, &f, &late_in, 900 * SEC);
        assert_eq!(v, Verdict::drop(reason("no_mapping")), "{mode}");
        let _ = np;
    }
}

#[test]
fn established_tcp_expires_after_7440s() {
    let f = factory(DatapathMode::NicInline);
    let mut n = small();
    let (a, r) = (ip("192.168.0.5"), ip("1.2.3.4"));
    let (o, _) = run1(
        &mut n,
        &f,
        &FrameSpec::tcp(a, r, 1, 2, TCP_SYN, 0).build(),
        SEC,
    );
    let np = tuple(&o).1;
    let synack = FrameSpec::tcp(r, ip(NAT_IP), 2, np, TCP_SYN | TCP_ACK, 0).build();
    run1(&mut n, &f, &synack, 2 * SEC);
    let (_, v) = run1(&mut n, &f, &synack, 7441 * SEC);
    assert!(tx(v), "7439 s idle is within the timeout");
    let (_, v) = run1(&mut n, &f, &synack, (7441 + 7441) * SEC);
    assert_eq!(v, Verdict::drop(reason("no_mapping")));
}

#[test]
fn udp_expires_by_scan_and_port_is_reused() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        // Endpoint-dependent mapping, no reuse hold: ports are reused towards other remotes and
        // as soon as their session is gone.
        let mut n = nat(
            "flows = 64\nport_min = 3000\nport_max = 3001\nscan_per_burst = 64\n\
             mapping = \"endpoint-dependent\"\nport_reuse_hold_s = 0",
        );
        let r = ip("5.5.5.5");
        let mk = |i: u32| FrameSpec::udp(ip("192.168.0.1") + i, r, 1000, 53, 8).build();
        let o0 = run1(&mut n, &f, &mk(0), SEC);
        let o1 = run1(&mut n, &f, &mk(1), SEC);
        assert!(tx(o0.1) && tx(o1.1));
        let mut ports = [tuple(&o0.0).1, tuple(&o1.0).1];
        ports.sort_unstable();
        assert_eq!(ports, [3000, 3001], "{mode}");
        // Third flow to the same remote endpoint: no port left.
        let (_, v) = run1(&mut n, &f, &mk(2), SEC);
        assert_eq!(v, Verdict::drop(reason("port_exhausted")), "{mode}");
        assert_eq!(n.counters()["port_exhausted"], 1);
        // A different remote endpoint can reuse the ports (endpoint-dependent mapping).
        let other = FrameSpec::udp(ip("192.168.0.3"), ip("6.6.6.6"), 1000, 53, 8).build();
        let (o, v) = run1(&mut n, &f, &other, SEC);
        assert!(tx(v));
        assert!(ports.contains(&tuple(&o).1));
        // After 300 s the scan frees everything; the port is handed out again.
        let (o, v) = run1(&mut n, &f, &mk(2), 302 * SEC);
        assert!(tx(v), "{mode}");
        assert!(ports.contains(&tuple(&o).1));
        assert_eq!(n.counters()["expired"], 3, "{mode}");
        assert_eq!(n.counters()["active_mappings"], 1);
    }
}

#[test]
fn table_full_drop_and_evict() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mk = |i: u32| FrameSpec::udp(ip("192.168.0.1") + i, ip("7.7.7.7"), 1000, 53, 8).build();
        let mut n = nat("flows = 2");
        assert!(tx(run1(&mut n, &f, &mk(0), SEC).1));
        assert!(tx(run1(&mut n, &f, &mk(1), SEC).1));
        let (_, v) = run1(&mut n, &f, &mk(2), SEC);
        assert_eq!(v, Verdict::drop(DropReason::FLOW_TABLE_FULL), "{mode}");
        assert_eq!(n.counters()["table_full"], 1);

        // `evict` never takes a live UDP session (RFC 6888 REQ-11): still full.
        let mut n = nat("flows = 2\nfull_policy = \"evict\"");
        assert!(tx(run1(&mut n, &f, &mk(0), SEC).1));
        assert!(tx(run1(&mut n, &f, &mk(1), 2 * SEC).1));
        let (_, v) = run1(&mut n, &f, &mk(2), 3 * SEC);
        assert_eq!(v, Verdict::drop(DropReason::FLOW_TABLE_FULL), "{mode}");
        assert_eq!(n.counters()["evicted"], 0, "{mode}");
        // A transitory TCP session (a SYN not answered) is taken instead.
        let mut n = nat("flows = 2\nfull_policy = \"evict\"");
        let syn = FrameSpec::tcp(ip("192.168.0.9"), ip("7.7.7.7"), 1000, 80, TCP_SYN, 0).build();
        assert!(tx(run1(&mut n, &f, &syn, SEC).1));
        assert!(tx(run1(&mut n, &f, &mk(1), 2 * SEC).1));
        assert!(tx(run1(&mut n, &f, &mk(2), 3 * SEC).1), "{mode}");
        let s = n.counters();
        assert_eq!(s["evicted"], 1, "{mode}");
        assert_eq!(s["active_mappings"], 2);
        assert!(
            n.mapping(ip("192.168.0.9"), ip("7.7.7.7"), 1000, 80, PROTO_TCP)
                .is_none()
        );
        assert!(
            n.mapping(ip("192.168.0.2"), ip("7.7.7.7"), 1000, 53, PROTO_UDP)
                .is_some()
        );
        assert!(
            n.mapping(ip("192.168.0.3"), ip("7.7.7.7"), 1000, 53, PROTO_UDP)
                .is_some()
        );
    }
}

#[test]
fn worker_port_slices_are_disjoint_and_cover_the_range() {
    let mut next = 1024u32;
    for w in 0..7 {
        let n = Nat::from_params(&params("flows = 70"), w, 7).unwrap();
        let (lo, hi) = n.port_range();
        assert_eq!(u32::from(lo), next);
        assert!(hi >= lo);
        next = u32::from(hi) + 1;
    }
    assert_eq!(next, 65536);
    // Translated ports of worker 3 stay in its slice.
    let mut n = Nat::from_params(&params("flows = 1000"), 3, 7).unwrap();
    let (lo, hi) = n.port_range();
    let f = factory(DatapathMode::Split);
    let frames: Vec<_> = (0..100)
        .map(|i| FrameSpec::udp(ip("192.168.0.1") + i, ip("8.8.4.4"), 999, 53, 8).build())
        .collect();
    for (o, v) in run(&mut n, &f, &frames, SEC, 0) {
        assert!(tx(v));
        let p = tuple(&o).1;
        assert!((lo..=hi).contains(&p));
    }
}

#[test]
fn icmp_echo_round_trip() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut n = small();
        let req = FrameSpec::echo(ip("192.168.7.7"), ip("1.0.0.1"), 4242, 56).build();
        let (o, v) = run1(&mut n, &f, &req, SEC);
        assert!(tx(v));
        assert_eq!(verify_frame_checksums(&o), Ok(()), "{mode}");
        let id = read_u16(&o, 38);
        assert_eq!(read_u32(&o, 26), ip(NAT_IP));
        let mut reply = FrameSpec::echo(ip("1.0.0.1"), ip(NAT_IP), id, 56);
        reply.l4 = L4Spec::IcmpQuery {
            ty: 0,
            ident: id,
            seq: 1,
        };
        let (r, v) = run1(&mut n, &f, &reply.build(), SEC);
        assert!(tx(v), "{mode}: {v:?}");
        assert_eq!(read_u16(&r, 38), 4242);
        assert_eq!(read_u32(&r, 30), ip("192.168.7.7"));
        assert_eq!(verify_frame_checksums(&r), Ok(()), "{mode}");
    }
}

/// An ICMP port-unreachable from `from` about `inner` (an IPv4 packet), embedding `inner_len`
/// bytes.
fn icmp_error(from: u32, to: u32, inner: Vec<u8>, inner_len: usize) -> Vec<u8> {
    FrameSpec {
        l4: L4Spec::IcmpError {
            ty: 3,
            code: 3,
            inner,
            inner_len,
        },
        ..FrameSpec::udp(from, to, 0, 0, 0)
    }
    .build()
}

#[test]
fn icmp_errors_translated_when_they_fit_the_header_segment() {
    for mode in DatapathMode::ALL {
        // 128 B split offset: the embedded headers fit.
        let f = PacketFactory::new(mode, 128, 2048, 64);
        let mut n = small();
        let (a, r) = (ip("192.168.3.3"), ip("203.0.113.9"));
        for (proto_tcp, inner_len) in [(false, 28), (true, 28), (true, 40)] {
            let out = if proto_tcp {
                FrameSpec::tcp(a, r, 3333, 80, TCP_SYN, 0)
            } else {
                FrameSpec::udp(a, r, 3333, 53, 20)
            }
            .build();
            let (o, v) = run1(&mut n, &f, &out, SEC);
            assert!(tx(v));
            // The remote answers the translated packet with an error.
            let err = icmp_error(r, ip(NAT_IP), o[14..].to_vec(), inner_len);
            let (e, v) = run1(&mut n, &f, &err, SEC);
            assert!(tx(v), "{mode}: {v:?}");
            assert_eq!(verify_frame_checksums(&e), Ok(()), "{mode} tcp={proto_tcp}");
            assert_eq!(read_u32(&e, 30), a, "outer destination");
            // Embedded packet now shows the original inside source.
            assert_eq!(read_u32(&e, 42 + 12), a, "{mode}");
            assert_eq!(read_u16(&e, 62), 3333);
            // The embedded IP header checksum is valid again.
            assert_eq!(
                wire::checksum::ipv4_header_checksum(&e[42..62]),
                read_u16(&e, 52)
            );
            if !proto_tcp {
                // Embedded UDP checksum: equal to the original packet's.
                assert_eq!(read_u16(&e, 68), read_u16(&out, 40), "{mode}");
            } else if inner_len >= 40 {
                assert_eq!(read_u16(&e, 78), read_u16(&out, 50), "{mode}");
            }
        }
        assert_eq!(n.counters()["icmp_errors_translated"], 3);

        // Outbound error: the inside host reports a problem with an inbound packet.
        let out = FrameSpec::udp(a, r, 4444, 53, 0).build();
        let (o, _) = run1(&mut n, &f, &out, SEC);
        let np = tuple(&o).1;
        let inbound = FrameSpec::udp(r, a, 53, 4444, 0).ip_packet(); // as delivered inside
        let err = icmp_error(a, r, inbound, 28);
        let (e, v) = run1(&mut n, &f, &err, SEC);
        assert!(tx(v), "{mode}: {v:?}");
        assert_eq!(verify_frame_checksums(&e), Ok(()));
        assert_eq!(read_u32(&e, 26), ip(NAT_IP));
        assert_eq!(read_u32(&e, 42 + 16), ip(NAT_IP));
        assert_eq!(read_u16(&e, 64), np);
    }
}

#[test]
fn icmp_errors_with_default_split_are_translated_through_the_slow_path() {
    // Before the slow path, split modes dropped these as `truncated` (header_segment_short):
    // the quoted UDP header ends at byte 70 of the frame, past the 64 B header segment.
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut n = small();
        let (a, r) = (ip("192.168.3.3"), ip("203.0.113.9"));
        let out = FrameSpec::udp(a, r, 1111, 2, 20).build();
        let (o, _) = run1(&mut n, &f, &out, SEC);
        let err = icmp_error(r, ip(NAT_IP), o[14..].to_vec(), 48);
        let (e, v) = run1(&mut n, &f, &err, SEC);
        assert!(tx(v), "{mode}: {v:?}");
        assert_eq!(verify_frame_checksums(&e), Ok(()), "{mode}");
        assert_eq!(read_u32(&e, 30), a, "{mode}");
        assert_eq!(read_u32(&e, 42 + 12), a, "{mode}");
        assert_eq!(read_u16(&e, 62), 1111, "{mode}");
        assert_eq!(
            read_u16(&e, 68),
            read_u16(&out, 40),
            "{mode}: quoted UDP checksum"
        );
        let s = n.counters();
        assert_eq!(s["header_segment_short"], 0);
        let slow = if mode == DatapathMode::Host { 0 } else { 1 };
        assert_eq!(s["icmp_errors_slow_path"], slow, "{mode}");
    }
}

#[test]
fn malformed_and_policy_drops() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut n = small();
        let good = FrameSpec::udp(ip("192.168.0.1"), ip("8.8.8.8"), 1, 2, 30);
        let mut cases: Vec<(Vec<u8>, DropReason)> = vec![];
        let mut arp = good.build();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        cases.push((arp, DropReason::NOT_IPV4));
        cases.push((good.build()[..30].to_vec(), DropReason::TRUNCATED));
        let mut ihl = good.build();
        ihl[14] = 0x43;
        cases.push((ihl, DropReason::MALFORMED));
        cases.push((
            FrameSpec {
                l4: L4Spec::Raw { proto: 47 },
                ..good.clone()
            }
            .build(),
            DropReason::UNSUPPORTED_PROTOCOL,
        ));
        let mut bad_tl = good.build();
        bad_tl[16..18].copy_from_slice(&2000u16.to_be_bytes());
        cases.push((bad_tl, DropReason::TRUNCATED));
        for (fr, want) in &cases {
            let (_, v) = run1(&mut n, &f, fr, SEC);
            assert_eq!(v, Verdict::drop(*want), "{mode}");
        }
        let s = n.counters();
        assert_eq!(s["dropped"], cases.len() as u64);
        assert_eq!(s["packets"], cases.len() as u64);

        // A later fragment of an outbound datagram, before its first: translated by the
        // subscriber's paired address (it was dropped as `fragment` before virtual reassembly).
        let mut later = good.clone();
        later.frag = 0x0010;
        let (o, v) = run1(&mut n, &f, &later.build(), SEC);
        assert!(tx(v), "{mode}: {v:?}");
        assert_eq!(read_u32(&o, 26), ip(NAT_IP));
        assert_eq!(verify_frame_checksums(&o), Ok(()));
        assert_eq!(n.counters()["fragments"]["translated_early"], 1);
        // First fragment: translated.
        let mut first = good.clone();
        first.frag = 0x2000;
        let (o, v) = run1(&mut n, &f, &first.build(), SEC);
        assert!(tx(v), "{mode}");
        assert_eq!(read_u32(&o, 26), ip(NAT_IP));
    }
}

#[test]
fn ip_options_policy_and_vlan() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut spec = FrameSpec::udp(ip("192.168.0.1"), ip("8.8.8.8"), 1, 2, 30);
        spec.ip_options = vec![0x94, 0x04, 0, 0]; // router alert
        spec.vlan = Some(5);
        let mut n = small();
        let (o, v) = run1(&mut n, &f, &spec.build(), SEC);
        assert!(tx(v), "{mode}");
        assert_eq!(verify_frame_checksums(&o), Ok(()));
        assert_eq!(read_u32(&o, 18 + 12), ip(NAT_IP));
        let mut n = nat("flows = 16\nip_options = \"drop\"");
        let (_, v) = run1(&mut n, &f, &spec.build(), SEC);
        assert_eq!(v, Verdict::drop(DropReason::IP_OPTIONS));
        // Options so long the L4 header leaves the 64 B segment: segment-short, not a panic.
        spec.ip_options = vec![1; 36];
        let mut n = small();
        let (_, v) = run1(&mut n, &f, &spec.build(), SEC);
        if mode == DatapathMode::Host {
            assert!(tx(v));
        } else {
            assert_eq!(v, Verdict::drop(DropReason::TRUNCATED), "{mode}");
            assert_eq!(n.counters()["header_segment_short"], 1);
        }
    }
}

#[test]
fn ttl_decrement_option() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut spec = FrameSpec::udp(ip("192.168.0.1"), ip("8.8.8.8"), 1, 2, 30);
        let mut n = small();
        spec.ttl = 1;
        let (o, v) = run1(&mut n, &f, &spec.build(), SEC);
        assert!(tx(v), "default leaves TTL alone");
        assert_eq!(o[22], 1);
        let mut n = nat("flows = 16\ndecrement_ttl = true");
        let (_, v) = run1(&mut n, &f, &spec.build(), SEC);
        assert_eq!(v, Verdict::drop(DropReason::TTL_EXPIRED));
        spec.ttl = 64;
        let (o, v) = run1(&mut n, &f, &spec.build(), SEC);
        assert!(tx(v));
        assert_eq!(o[22], 63);
        assert_eq!(verify_frame_checksums(&o), Ok(()), "{mode}");
    }
}

#[test]
fn already_dropped_packets_are_left_alone() {
    let f = factory(DatapathMode::NicPayload);
    let mut n = small();
    let fr = FrameSpec::udp(ip("192.168.0.1"), ip("8.8.8.8"), 1, 2, 30).build();
    let mut b = f.burst(std::slice::from_ref(&fr));
    b.drop_packet(0, DropReason::POLICY);
    n.process(&mut b, &common::ctx(SEC));
    assert_eq!(b.verdict(0), Verdict::drop(DropReason::POLICY));
    assert_eq!(b.frame(0), fr);
    assert_eq!(n.counters()["skipped"], 1);
    assert_eq!(n.counters()["packets"], 0);
}

#[test]
fn by_port_direction_and_hairpin() {
    let f = factory(DatapathMode::Split);
    let mut n = nat("flows = 16\ndirection = \"by-port\"\ninside_ports = [0]");
    let out = FrameSpec::udp(ip("192.168.0.1"), ip("8.8.8.8"), 1, 2, 30).build();
    let o = run(&mut n, &f, &[out], SEC, 0).remove(0);
    assert!(tx(o.1));
    let np = tuple(&o.0).1;
    // A reply arriving on port 1 (outside) is inbound.
    let reply = FrameSpec::udp(ip("8.8.8.8"), ip(NAT_IP), 2, np, 30).build();
    let r = run(&mut n, &f, std::slice::from_ref(&reply), SEC, 1).remove(0);
    assert!(tx(r.1));
    assert_eq!(tuple(&r.0).2, ip("192.168.0.1"));
    // The same frame arriving on the inside port from an inside host is hairpinning: it comes
    // out of the NAT from the sender's outside endpoint to the mapped inside host, back on the
    // inside port (it was dropped as `policy` before hairpinning was supported).
    let from_inside = FrameSpec::udp(ip("192.168.0.2"), ip(NAT_IP), 7, np, 30).build();
    let h = run(&mut n, &f, &[from_inside], SEC, 0).remove(0);
    assert_eq!(h.1, Verdict::tx(0), "back to the inside port");
    let (s, sp, d, dp) = tuple(&h.0);
    assert_eq!((s, d, dp), (ip(NAT_IP), ip("192.168.0.1"), 1));
    assert!(sp >= 1024);
    assert_eq!(verify_frame_checksums(&h.0), Ok(()));
    assert_eq!(n.counters()["hairpinned"], 1);
}

#[test]
fn verify_checksums_option_counts_slow_path() {
    for mode in DatapathMode::ALL {
        let f = factory(mode);
        let mut n = nat("flows = 16\nverify_checksums = true");
        let fr = FrameSpec::tcp(ip("192.168.0.1"), ip("8.8.8.8"), 1, 2, TCP_SYN, 500).build();
        run1(&mut n, &f, &fr, SEC);
        let mut bad = fr.clone();
        bad[100] ^= 0xff; // corrupt the payload: the translated frame fails verification
        run1(&mut n, &f, &bad, SEC);
        assert_eq!(n.counters()["verify_slow_path"], 2);
        assert_eq!(n.counters()["checksum_mismatches"], 1, "{mode}");
        let _ = PROTO_TCP;
    }
}

#[test]
fn config_errors_name_the_key() {
    let e = Nat::from_params(&params("nat_addr = \"1.2.3.4\""), 0, 1)
        .err()
        .unwrap();
    assert!(e.contains("nat_addr") && e.contains("nat_ip"), "{e}");
    let e = Nat::from_params(&params("nat_ip = \"1.2.3\""), 0, 1)
        .err()
        .unwrap();
    assert!(e.contains("nat_ip"), "{e}");
    let e = Nat::from_params(&params("port_min = 5000\nport_max = 4000"), 0, 1)
        .err()
        .unwrap();
    assert!(e.contains("port_min"), "{e}");
    let e = Nat::from_params(&params("direction = \"sideways\""), 0, 1)
        .err()
        .unwrap();
    assert!(e.contains("by-address") && e.contains("direction"), "{e}");
    let e = Nat::from_params(&params("udp_timeout_s = 0"), 0, 1)
        .err()
        .unwrap();
    assert!(e.contains("udp_timeout_s"), "{e}");
    let e = Nat::from_params(&params("port_min = 65535"), 0, 2)
        .err()
        .unwrap();
    assert!(e.contains("port_max"), "{e}");
}

#[test]
fn the_registry_builds_a_nat_by_name() {
    let c = nfs::BuildContext::new(0, 1);
    assert_eq!(nfs::lookup("nat").map(|s| s.name), Some("nat"));
    let nf = nfs::build("nat", &params("flows = 8"), &c).unwrap();
    assert_eq!(nf.name(), "nat");
}

#[test]
fn clear_forgets_every_session_and_starts_over() {
    let f = factory(DatapathMode::Host);
    let mut n = nat("flows = 64\nport_min = 2000\nport_max = 2063");
    let frames: Vec<_> = (0..40)
        .map(|i| FrameSpec::udp(ip("192.168.0.1") + i, ip("8.8.8.8"), 1000, 53, 8).build())
        .collect();
    let first: Vec<u16> = run(&mut n, &f, &frames, SEC, 0)
        .iter()
        .map(|(o, v)| {
            assert!(tx(*v));
            tuple(o).1
        })
        .collect();
    assert_eq!(n.counters()["active_mappings"], 40);
    n.clear();
    assert_eq!(n.counters()["active_mappings"], 0);
    assert_eq!(
        n.mapping(ip("192.168.0.1"), ip("8.8.8.8"), 1000, 53, PROTO_UDP),
        None
    );
    // A reply to a forgotten session has no mapping.
    let reply = FrameSpec::udp(ip("8.8.8.8"), ip(NAT_IP), 53, first[0], 8).build();
    assert_eq!(
        run1(&mut n, &f, &reply, SEC).1,
        Verdict::drop(reason("no_mapping"))
    );
    // The same flows map again, each to a port of the slice, all distinct.
    let again: Vec<u16> = run(&mut n, &f, &frames, 2 * SEC, 0)
        .iter()
        .map(|(o, v)| {
            assert!(tx(*v));
            tuple(o).1
        })
        .collect();
    let mut sorted = again.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 40);
    assert!(again.iter().all(|p| (2000..=2063).contains(p)));
    assert_eq!(n.counters()["active_mappings"], 40);
    assert_eq!(n.counters()["new_mappings"], 80, "counters are kept");
}

/// With inside and outside ports, a packet received on a third port is neither translated nor
/// dropped: the next stage decides. The NAT address is owned on the outside port only.
#[test]
fn ports_neither_inside_nor_outside_pass_untouched() {
    let f = factory(DatapathMode::Host);
    let mut n = nat("flows = 64\ndirection = \"by-port\"\ninside_ports = [0]\noutside_ports = [1]");
    let out = FrameSpec::udp(ip("192.168.0.2"), ip("8.8.8.8"), 1000, 53, 8).build();
    let v = run(&mut n, &f, std::slice::from_ref(&out), SEC, 0);
    assert_eq!(
        read_u32(&v[0].0, 26),
        ip("10.0.0.1"),
        "inside -> translated"
    );
    let third = run(&mut n, &f, std::slice::from_ref(&out), SEC, 2);
    assert_eq!(third[0], (out.clone(), Verdict::tx(1)), "untouched");
    let stray = FrameSpec::udp(ip("8.8.8.8"), ip("10.0.0.9"), 53, 1000, 8).build();
    let v = run(&mut n, &f, &[stray], SEC, 1);
    assert_eq!(
        v[0].1,
        Verdict::drop(reason("no_mapping")),
        "outside, no session"
    );
    assert_eq!(n.counters()["passed"], 1);
    assert_eq!(
        n.owned_addresses(),
        vec![("10.0.0.1".parse().unwrap(), Some(1))]
    );
    let e = Nat::from_params(&params("inside_ports = [1]\noutside_ports = [1]"), 0, 1)
        .err()
        .unwrap();
    assert!(e.contains("outside_ports"), "{e}");
}
