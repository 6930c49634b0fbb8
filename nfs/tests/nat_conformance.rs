//! NAT conformance: one test per requirement of RFC 4787 (UDP), RFC 5382 (TCP), RFC 5508 (ICMP),
//! RFC 6888 (carrier-grade NAT) and RFC 7857 that applies to nmdp, named after it (as VPP's
//! `test_nat44_ed.py` names its tests), each run in all four datapath modes with the shipped
//! 64 B header segment (split modes carry payloads in host memory or nicmem, so the quoted
//! headers of ICMP errors are read and written through the slow path). `docs/nat-conformance.md`
//! is the table these tests back.

mod common;

use common::{SEC, factory, ip, params, reassemble, release, run_held, run1};
use dataplane::testkit::PacketFactory;
use dataplane::{DatapathMode, DropReason, NetworkFunction, Verdict};
use nfs::nat::Nat;
use wire::checksum::ipv4_header_checksum;
use wire::classify::{parse, verify_frame_checksums};
use wire::field::{read_u16, read_u32};
use wire::frames::{FrameSpec, L4Spec};
use wire::tcp::{TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};

const X: &str = "10.0.0.1";

/// A NAT and a packet factory for one datapath mode.
struct Lab {
    mode: DatapathMode,
    f: PacketFactory,
    n: Nat,
}

impl Lab {
    fn new(mode: DatapathMode, cfg: &str) -> Self {
        Self {
            mode,
            f: factory(mode),
            n: Nat::from_params(&params(cfg), 0, 1).expect("nat config"),
        }
    }

    /// Sends one frame at `t` seconds (received on port 0).
    fn send(&mut self, frame: &[u8], t: u64) -> (Vec<u8>, Verdict) {
        run1(&mut self.n, &self.f, frame, t * SEC)
    }

    /// Sends one frame and expects it forwarded; returns the output frame.
    fn pass(&mut self, frame: &[u8], t: u64) -> Vec<u8> {
        let (o, v) = self.send(frame, t);
        assert_eq!(
            v,
            Verdict::tx(1),
            "{}: {:?}",
            self.mode,
            parse(frame, frame.len())
        );
        assert_eq!(verify_frame_checksums(&o), Ok(()), "{}", self.mode);
        o
    }

    /// Sends one frame and expects it dropped for `reason`.
    fn refused(&mut self, frame: &[u8], t: u64, reason: &str) {
        let (_, v) = self.send(frame, t);
        assert_eq!(v, Verdict::drop(drop_reason(reason)), "{}", self.mode);
    }

    fn stat(&self, k: &str) -> u64 {
        self.n
            .counters()
            .count_at(k)
            .unwrap_or_else(|| panic!("counter {k}"))
    }
}

fn drop_reason(name: &str) -> DropReason {
    DropReason::by_name(name).unwrap_or_else(|| panic!("drop reason {name}"))
}

fn labs(cfg: &str) -> impl Iterator<Item = Lab> + '_ {
    DatapathMode::ALL.into_iter().map(move |m| Lab::new(m, cfg))
}

fn udp(src: &str, sport: u16, dst: &str, dport: u16) -> Vec<u8> {
    FrameSpec::udp(ip(src), ip(dst), sport, dport, 200).build()
}

fn tcp(src: &str, sport: u16, dst: &str, dport: u16, flags: u8) -> Vec<u8> {
    FrameSpec::tcp(ip(src), ip(dst), sport, dport, flags, 100).build()
}

/// (source, source port, destination, destination port) of an untagged frame.
fn t4(f: &[u8]) -> (u32, u16, u32, u16) {
    let p = parse(f, f.len()).unwrap();
    let (s, d) = p.ports();
    (p.src, s, p.dst, d)
}

/// An ICMP error of type `ty`/`code` from `from` to `to` quoting the first `len` bytes of IPv4
/// packet `quoted`.
fn icmp_error(from: u32, to: u32, ty: u8, code: u8, quoted: &[u8], len: usize) -> Vec<u8> {
    FrameSpec {
        l4: L4Spec::IcmpError {
            ty,
            code,
            inner: quoted.to_vec(),
            inner_len: len,
        },
        ..FrameSpec::udp(from, to, 0, 0, 0)
    }
    .build()
}

/// Checks the quoted IPv4 header checksum of an ICMP error (the outer checksums are checked by
/// `verify_frame_checksums`).
fn quoted_ip_ok(e: &[u8]) -> bool {
    ipv4_header_checksum(&e[42..62]) == read_u16(e, 52)
}

// ---- RFC 4787 (UDP) -------------------------------------------------------------------------

#[test]
fn rfc4787_req1_endpoint_independent_mapping() {
    for mut l in labs("flows = 64") {
        let ends: Vec<(u32, u16)> = ["8.8.8.8", "1.1.1.1", "9.9.9.9"]
            .iter()
            .map(|d| {
                let o = l.pass(&udp("192.168.1.10", 5000, d, 53), 1);
                let (s, sp, _, _) = t4(&o);
                (s, sp)
            })
            .collect();
        assert!(ends.iter().all(|e| *e == ends[0]), "{}: {ends:?}", l.mode);
        assert_eq!(l.stat("new_eim_mappings"), 1);
        assert_eq!(l.stat("active_eim_mappings"), 1);
        assert_eq!(l.stat("new_mappings"), 3, "one session per destination");
    }
}

#[test]
fn rfc4787_req1_endpoint_dependent_mapping_on_request() {
    for mut l in
        labs("flows = 64\nmapping = \"endpoint-dependent\"\nport_min = 3000\nport_max = 3001")
    {
        // Two inside hosts share an outside port towards different remotes.
        let a = l.pass(&udp("192.168.1.1", 9, "8.8.8.8", 53), 1);
        let b = l.pass(&udp("192.168.1.2", 9, "1.1.1.1", 53), 1);
        let c = l.pass(&udp("192.168.1.3", 9, "9.9.9.9", 53), 1);
        let ports = [t4(&a).1, t4(&b).1, t4(&c).1];
        assert!(ports.iter().all(|p| (3000..=3001).contains(p)));
        assert_eq!(l.stat("new_eim_mappings"), 0);
        // Filtering is address-and-port-dependent: another remote cannot use the mapping.
        let (_, ap, _, _) = t4(&a);
        l.refused(&udp("1.2.3.4", 53, X, ap), 2, "no_mapping");
    }
}

#[test]
fn rfc4787_req2_paired_address_pooling() {
    for mut l in labs("flows = 1024\nnat_ips = \"198.51.100.0/29\"") {
        let mut used = std::collections::HashSet::new();
        for s in 0..40u32 {
            let sub = format!("192.168.2.{}", s + 1);
            let mut addrs = std::collections::HashSet::new();
            for k in 0..3u16 {
                let dst = format!("203.0.113.{}", k + 1);
                let o = l.pass(&udp(&sub, 1000 + k, &dst, 53), 1);
                addrs.insert(t4(&o).0);
            }
            assert_eq!(addrs.len(), 1, "{}: {sub} on one address", l.mode);
            let a = *addrs.iter().next().unwrap();
            assert_eq!(a, l.n.paired_address(ip(&sub)));
            used.insert(a);
        }
        assert!(used.len() >= 4, "{}: {used:?}", l.mode);
        assert!(
            used.iter()
                .all(|a| (ip("198.51.100.0")..=ip("198.51.100.7")).contains(a))
        );
    }
}

#[test]
fn rfc4787_req3_no_port_overloading() {
    for mut l in labs("flows = 64") {
        let a = l.pass(&udp("192.168.1.1", 7000, "8.8.8.8", 53), 1);
        let b = l.pass(&udp("192.168.1.2", 7000, "8.8.8.8", 53), 1);
        assert_ne!(t4(&a).1, t4(&b).1, "{}", l.mode);
        for (o, inside) in [(&a, "192.168.1.1"), (&b, "192.168.1.2")] {
            let back = l.pass(&udp("8.8.8.8", 53, X, t4(o).1), 2);
            assert_eq!(t4(&back).2, ip(inside));
        }
    }
}

#[test]
fn rfc4787_req3_port_ranges_kept_apart() {
    for mut l in labs("flows = 256\nport_min = 100\nport_max = 65535\nport_preservation = false") {
        for k in 0..30u16 {
            let low = l.pass(&udp("192.168.1.1", 50 + k, "8.8.8.8", 53), 1);
            assert!(t4(&low).1 < 1024, "{}: {}", l.mode, t4(&low).1);
            let high = l.pass(&udp("192.168.1.2", 40000 + k, "8.8.8.8", 53), 1);
            assert!(t4(&high).1 >= 1024, "{}", l.mode);
        }
    }
}

#[test]
fn rfc4787_req4_port_parity() {
    for mut l in labs("flows = 256\nport_parity = true\nport_preservation = false") {
        for k in 0..40u16 {
            let inside = 20000 + k * 7;
            let o = l.pass(&udp("192.168.1.1", inside, "8.8.8.8", 53), 1);
            assert_eq!(t4(&o).1 % 2, inside % 2, "{}", l.mode);
        }
    }
}

#[test]
fn rfc4787_req5_udp_mapping_timeout() {
    for (cfg, timeout) in [
        ("flows = 16", 300),
        ("flows = 16\nudp_timeout_s = 120", 120),
    ] {
        for mut l in labs(cfg) {
            let o = l.pass(&udp("192.168.1.1", 5000, "8.8.8.8", 53), 1);
            let reply = udp("8.8.8.8", 53, X, t4(&o).1);
            // Idle one second less than the timeout: alive (and refreshed by the reply).
            l.pass(&reply, timeout);
            l.refused(&reply, 2 * timeout + 1, "no_mapping");
        }
    }
}

#[test]
fn rfc4787_req6_outbound_and_inbound_refresh() {
    for mut l in labs("flows = 16") {
        let out = udp("192.168.1.1", 5000, "8.8.8.8", 53);
        let o = l.pass(&out, 1);
        let reply = udp("8.8.8.8", 53, X, t4(&o).1);
        // Outbound packets every 250 s keep the mapping (REQ-6, MUST) ...
        l.pass(&out, 251);
        l.pass(&out, 501);
        l.pass(&reply, 751);
        // ... and so do inbound ones (REQ-6a, MAY).
        l.pass(&reply, 1001);
        l.pass(&reply, 1251);
        assert_eq!(
            t4(&l.pass(&out, 1501)).1,
            t4(&o).1,
            "one mapping throughout"
        );
        assert_eq!(l.stat("new_mappings"), 1);
    }
}

#[test]
fn rfc4787_req8_endpoint_independent_filtering() {
    for mut l in labs("flows = 64") {
        let o = l.pass(&udp("192.168.1.1", 5000, "8.8.8.8", 53), 1);
        let x = t4(&o).1;
        let i = l.pass(&udp("203.0.113.7", 4444, X, x), 2);
        assert_eq!(t4(&i), (ip("203.0.113.7"), 4444, ip("192.168.1.1"), 5000));
        assert_eq!(l.stat("inbound_sessions"), 1);
        // The new remote's session answers outbound too, from the same mapping.
        let back = l.pass(&udp("192.168.1.1", 5000, "203.0.113.7", 4444), 3);
        assert_eq!(t4(&back).1, x);
    }
}

#[test]
fn rfc4787_req8_address_dependent_filtering() {
    for mut l in labs("flows = 64\nfiltering = \"address-dependent\"") {
        let o = l.pass(&udp("192.168.1.1", 5000, "8.8.8.8", 53), 1);
        let x = t4(&o).1;
        // Same remote address, another port: allowed.
        let i = l.pass(&udp("8.8.8.8", 9999, X, x), 2);
        assert_eq!(t4(&i).2, ip("192.168.1.1"));
        // Another address: filtered.
        l.refused(&udp("8.8.4.4", 53, X, x), 2, "filtered");
        assert_eq!(l.stat("filtered"), 1);
    }
}

#[test]
fn rfc4787_req8_address_and_port_dependent_filtering() {
    for mut l in labs("flows = 64\nfiltering = \"address-and-port-dependent\"") {
        let o = l.pass(&udp("192.168.1.1", 5000, "8.8.8.8", 53), 1);
        let x = t4(&o).1;
        l.refused(&udp("8.8.8.8", 9999, X, x), 2, "no_mapping");
        l.pass(&udp("8.8.8.8", 53, X, x), 2);
    }
}

/// Inside host B has a mapping (it talked to a server); inside host A sends to B's outside
/// endpoint. Returns (A's packet as B receives it, B's reply as A receives it).
fn hairpin(l: &mut Lab, tcp_flags: Option<u8>) -> (Vec<u8>, Vec<u8>) {
    let mk = |src: &str, sp: u16, dst: &str, dp: u16, fl: u8| match tcp_flags {
        Some(_) => tcp(src, sp, dst, dp, fl),
        None => udp(src, sp, dst, dp),
    };
    let syn = tcp_flags.unwrap_or(0);
    let b_out = l.pass(&mk("192.168.0.2", 6000, "8.8.8.8", 3478, syn), 1);
    let (x, xb) = (t4(&b_out).0, t4(&b_out).1);
    let at_b = l.pass(&mk("192.168.0.1", 5000, X, xb, syn), 2);
    let (_, xa, _, _) = t4(&at_b);
    let at_a = l.pass(&mk("192.168.0.2", 6000, X, xa, syn | TCP_ACK), 3);
    assert_eq!(x, ip(X));
    (at_b, at_a)
}

#[test]
fn rfc4787_req9_hairpinning() {
    for mut l in labs("flows = 64") {
        let (at_b, at_a) = hairpin(&mut l, None);
        // REQ-9a: B sees A's external source address and port.
        let (s, sp, d, dp) = t4(&at_b);
        assert_eq!((s, d, dp), (ip(X), ip("192.168.0.2"), 6000), "{}", l.mode);
        assert_eq!(sp, 5000, "A's inside port was free: preserved outside");
        assert_eq!(
            &at_b[42..],
            &udp("192.168.0.1", 5000, X, 6000)[42..],
            "payload"
        );
        assert_eq!(
            t4(&at_a),
            (ip(X), 6000, ip("192.168.0.1"), 5000),
            "{}",
            l.mode
        );
        assert_eq!(l.stat("hairpinned"), 2);
    }
}

#[test]
fn rfc4787_req11_deterministic_behaviour_under_scarcity() {
    for mut l in labs("flows = 64\nport_min = 3000\nport_max = 3001") {
        let a1 = t4(&l.pass(&udp("192.168.1.1", 1, "8.8.8.8", 53), 1)).1;
        let b = t4(&l.pass(&udp("192.168.1.2", 1, "8.8.8.8", 53), 1)).1;
        assert_ne!(a1, b);
        // No port left: a new inside endpoint is refused, not given an endpoint-dependent
        // port; the mapped one keeps its endpoint for every destination.
        l.refused(&udp("192.168.1.3", 1, "1.1.1.1", 53), 1, "port_exhausted");
        for d in ["1.1.1.1", "9.9.9.9"] {
            assert_eq!(t4(&l.pass(&udp("192.168.1.1", 1, d, 53), 2)).1, a1);
        }
    }
}

#[test]
fn rfc4787_req12_icmp_does_not_terminate_mapping() {
    for mut l in labs("flows = 64") {
        let out = udp("192.168.1.1", 5000, "8.8.8.8", 53);
        let o = l.pass(&out, 1);
        for (ty, code) in [(3, 3), (11, 0), (3, 1)] {
            let e = l.pass(&icmp_error(ip("8.8.8.8"), ip(X), ty, code, &o[14..], 48), 2);
            assert_eq!(t4(&e).2, ip("192.168.1.1"));
        }
        assert_eq!(t4(&l.pass(&out, 3)).1, t4(&o).1, "{}: same mapping", l.mode);
        l.pass(&udp("8.8.8.8", 53, X, t4(&o).1), 3);
        assert_eq!(l.stat("new_mappings"), 1);
    }
}

/// Sends `frames` as one burst; returns each frame's output (`None`: held).
fn burst(l: &mut Lab, frames: &[Vec<u8>], t_ms: u64) -> Vec<Option<(Vec<u8>, Verdict)>> {
    run_held(&mut l.n, &l.f, frames, t_ms * 1_000_000, 0)
}

#[test]
fn rfc4787_req14_fragments_in_and_out_of_order() {
    for mut l in labs("flows = 64") {
        let mode = l.mode;
        // Outbound: three fragments of one datagram, in order, then another datagram reversed.
        let mut spec = FrameSpec::udp(ip("192.168.1.1"), ip("8.8.8.8"), 5000, 53, 1000);
        for (ident, reversed) in [(0x1111, false), (0x2222, true)] {
            spec.ident = ident;
            let mut frags = spec.fragments(400);
            assert_eq!(frags.len(), 3);
            if reversed {
                frags.reverse();
            }
            let out: Vec<Vec<u8>> = burst(&mut l, &frags, 1000)
                .into_iter()
                .map(|o| {
                    let (f, v) = o.expect("outbound fragments are never held");
                    assert_eq!(v, Verdict::tx(1), "{mode}");
                    assert_eq!(read_u32(&f, 26), ip(X), "{mode}: source translated");
                    f
                })
                .collect();
            let whole = reassemble(&out);
            assert_eq!(
                verify_frame_checksums(&whole),
                Ok(()),
                "{mode}: reassembled"
            );
            assert_eq!(whole[42..], spec.build()[42..], "{mode}: payload intact");
        }
        let x =
            l.n.mapping(ip("192.168.1.1"), ip("8.8.8.8"), 5000, 53, 17)
                .unwrap();
        // Inbound: the reply's later fragments first, in one burst with the first one ...
        let mut reply = FrameSpec::udp(ip("8.8.8.8"), ip(X), 53, x, 1000);
        reply.ident = 0x3333;
        let mut frags = reply.fragments(400);
        frags.reverse();
        let got: Vec<Vec<u8>> = burst(&mut l, &frags, 1100)
            .into_iter()
            .map(|o| o.expect("first fragment in the same burst").0)
            .collect();
        let whole = reassemble(&got);
        assert_eq!(verify_frame_checksums(&whole), Ok(()), "{mode}");
        assert_eq!(t4(&whole), (ip("8.8.8.8"), 53, ip("192.168.1.1"), 5000));
        // ... and in bursts of their own: held until the first fragment passes.
        reply.ident = 0x4444;
        let frags = reply.fragments(400);
        let held = burst(&mut l, &frags[1..], 1200);
        assert!(held.iter().all(Option::is_none), "{mode}: held");
        assert_eq!(l.n.held_fragments(), 2);
        let first = burst(&mut l, &frags[..1], 1300).remove(0).unwrap();
        assert_eq!(first.1, Verdict::tx(1));
        let rest = release(&mut l.n, 1_300_000_000, false);
        assert_eq!(rest.len(), 2, "{mode}: released once the first passed");
        let mut all = vec![first.0];
        all.extend(rest.iter().map(|(f, v)| {
            assert_eq!(*v, Verdict::tx(1));
            f.clone()
        }));
        let whole = reassemble(&all);
        assert_eq!(verify_frame_checksums(&whole), Ok(()), "{mode}");
        assert_eq!(t4(&whole).2, ip("192.168.1.1"));
        let s = l.n.counters();
        assert_eq!(s["fragments"]["held"], 2);
        assert_eq!(s["fragments"]["released"], 2);
        assert_eq!(
            s["fragments"]["translated_early"], 2,
            "the reversed outbound datagram"
        );
    }
}

#[test]
fn rfc4787_req14a_fragment_floods_cost_bounded_memory() {
    for mut l in labs("flows = 64\nfragments_held = 8\nfragment_timeout_ms = 500") {
        let mode = l.mode;
        // 20 inbound later fragments of datagrams whose first never comes.
        let frames: Vec<Vec<u8>> = (0..20u16)
            .map(|k| {
                let mut s = FrameSpec::udp(ip("8.8.8.8"), ip(X), 53, 4000, 600);
                s.ident = k;
                s.fragments(400).remove(1)
            })
            .collect();
        let out = burst(&mut l, &frames, 1000);
        assert_eq!(out.iter().filter(|o| o.is_none()).count(), 8, "{mode}");
        let full = Verdict::drop(drop_reason("fragment_hold_full"));
        assert_eq!(out.iter().flatten().filter(|(_, v)| *v == full).count(), 12);
        // Their time runs out: dropped with the reason.
        assert!(
            release(&mut l.n, 1_400_000_000, false).is_empty(),
            "not yet"
        );
        let gone = release(&mut l.n, 1_501_000_000, false);
        assert_eq!(gone.len(), 8);
        let timeout = Verdict::drop(drop_reason("fragment_timeout"));
        assert!(gone.iter().all(|(_, v)| *v == timeout));
        // A datagram whose first fragment was dropped loses its later fragments with a reason.
        let mut s = FrameSpec::udp(ip("8.8.8.8"), ip(X), 53, 4000, 600);
        s.ident = 999;
        let fr = s.fragments(400);
        let out = burst(&mut l, &fr, 2000);
        assert_eq!(
            out[0].as_ref().unwrap().1,
            Verdict::drop(drop_reason("no_mapping"))
        );
        assert_eq!(
            out[1].as_ref().unwrap().1,
            Verdict::drop(drop_reason("fragment_first_dropped"))
        );
        // Tracking still works after the flood.
        let o = l.pass(&udp("192.168.1.1", 5000, "8.8.8.8", 53), 3);
        let mut r = FrameSpec::udp(ip("8.8.8.8"), ip(X), 53, t4(&o).1, 600);
        r.ident = 7;
        let got = burst(&mut l, &r.fragments(400), 3000);
        assert!(
            got.iter().all(|o| o.as_ref().unwrap().1 == Verdict::tx(1)),
            "{mode}"
        );
        let s = l.n.counters();
        assert_eq!(
            (
                s.count_at("fragments.hold_full"),
                s.count_at("fragments.timed_out")
            ),
            (Some(12), Some(8))
        );
    }
}

// ---- RFC 5382 (TCP) -------------------------------------------------------------------------

#[test]
fn rfc5382_req1_endpoint_independent_mapping_tcp() {
    for mut l in labs("flows = 64") {
        let ports: Vec<u16> = ["8.8.8.8", "1.1.1.1", "9.9.9.9"]
            .iter()
            .map(|d| t4(&l.pass(&tcp("192.168.1.10", 40000, d, 443, TCP_SYN), 1)).1)
            .collect();
        assert!(
            ports.iter().all(|p| *p == ports[0]),
            "{}: {ports:?}",
            l.mode
        );
    }
}

#[test]
fn rfc5382_req2_simultaneous_open() {
    for mut l in labs("flows = 64") {
        let o = l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 5555, TCP_SYN), 1);
        let x = t4(&o).1;
        // The remote's SYN crosses ours: both forwarded, then both SYN-ACKs.
        let i = l.pass(&tcp("8.8.8.8", 5555, X, x, TCP_SYN), 1);
        assert_eq!(t4(&i).2, ip("192.168.1.1"));
        l.pass(
            &tcp("192.168.1.1", 40000, "8.8.8.8", 5555, TCP_SYN | TCP_ACK),
            2,
        );
        l.pass(&tcp("8.8.8.8", 5555, X, x, TCP_SYN | TCP_ACK), 2);
        // Established: idle far past the transitory timeout, still there.
        l.pass(&tcp("8.8.8.8", 5555, X, x, TCP_ACK), 2 + 3600);
    }
}

#[test]
fn rfc5382_req3_tcp_filtering() {
    for mut l in labs("flows = 64") {
        let x = t4(&l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_SYN), 1)).1;
        // Endpoint-independent filtering: another remote's SYN reaches the inside endpoint.
        let i = l.pass(&tcp("203.0.113.5", 7777, X, x, TCP_SYN), 2);
        assert_eq!(t4(&i), (ip("203.0.113.5"), 7777, ip("192.168.1.1"), 40000));
        l.pass(&tcp("203.0.113.5", 7777, X, x, TCP_ACK), 3);
        // Without a SYN, no session is opened from outside.
        l.refused(&tcp("203.0.113.6", 7777, X, x, TCP_ACK), 3, "no_mapping");
    }
    for mut l in labs("flows = 64\nfiltering = \"address-dependent\"") {
        let x = t4(&l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_SYN), 1)).1;
        l.pass(&tcp("8.8.8.8", 7777, X, x, TCP_SYN), 2);
        l.refused(&tcp("203.0.113.5", 7777, X, x, TCP_SYN), 2, "filtered");
    }
}

#[test]
fn rfc5382_req4_unsolicited_syn_dropped_silently() {
    for mut l in labs("flows = 64") {
        let mut b = dataplane::Burst::with_capacity(32);
        assert!(l.f.push(&mut b, &tcp("8.8.8.8", 443, X, 40000, TCP_SYN)));
        l.n.process(&mut b, &common::ctx(SEC));
        assert_eq!(b.len(), 1, "{}: nothing sent in response", l.mode);
        assert_eq!(b.verdict(0), Verdict::drop(drop_reason("no_mapping")));
        drop(b);
        // The inside host's own SYN for that connection then goes through.
        let x = t4(&l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_SYN), 2)).1;
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_SYN | TCP_ACK), 2);
    }
}

#[test]
fn rfc5382_req5_tcp_idle_timeouts() {
    for mut l in labs("flows = 64") {
        let x = t4(&l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_SYN), 1)).1;
        let ack_in = tcp("8.8.8.8", 443, X, x, TCP_ACK);
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_SYN | TCP_ACK), 1);
        l.pass(&ack_in, 1 + 7440);
        l.refused(&ack_in, 1 + 7440 + 7441, "no_mapping");
        // An unanswered SYN is gone after the 240 s opening timeout.
        let x = t4(&l.pass(&tcp("192.168.1.2", 40000, "8.8.8.8", 443, TCP_SYN), 20000)).1;
        l.refused(
            &tcp("8.8.8.8", 443, X, x, TCP_SYN | TCP_ACK),
            20000 + 241,
            "no_mapping",
        );
    }
    // Opening and closing timeouts set apart.
    for mut l in labs("flows = 64\ntcp_opening_timeout_s = 30\ntcp_closing_timeout_s = 60") {
        let x = t4(&l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_SYN), 1)).1;
        l.refused(
            &tcp("8.8.8.8", 443, X, x, TCP_SYN | TCP_ACK),
            32,
            "no_mapping",
        );
        let x = t4(&l.pass(&tcp("192.168.1.1", 40001, "8.8.8.8", 443, TCP_SYN), 100)).1;
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_SYN | TCP_ACK), 100);
        l.pass(
            &tcp("192.168.1.1", 40001, "8.8.8.8", 443, TCP_FIN | TCP_ACK),
            101,
        );
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_FIN | TCP_ACK), 101);
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_ACK), 160);
        l.refused(&tcp("8.8.8.8", 443, X, x, TCP_ACK), 221, "no_mapping");
    }
}

#[test]
fn rfc5382_req7_no_port_overloading_tcp() {
    for mut l in labs("flows = 64") {
        let a = t4(&l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_SYN), 1)).1;
        let b = t4(&l.pass(&tcp("192.168.1.2", 40000, "8.8.8.8", 443, TCP_SYN), 1)).1;
        assert_ne!(a, b, "{}", l.mode);
    }
}

#[test]
fn rfc5382_req8_hairpinning_tcp() {
    for mut l in labs("flows = 64") {
        let (at_b, at_a) = hairpin(&mut l, Some(TCP_SYN));
        assert_eq!(
            t4(&at_b),
            (ip(X), 5000, ip("192.168.0.2"), 6000),
            "{}",
            l.mode
        );
        assert_eq!(
            t4(&at_a),
            (ip(X), 6000, ip("192.168.0.1"), 5000),
            "{}",
            l.mode
        );
    }
}

#[test]
fn rfc5382_req9_icmp_destination_unreachable_translated() {
    for mut l in labs("flows = 64") {
        let syn = tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_SYN);
        let o = l.pass(&syn, 1);
        // Fragmentation needed, quoting the IPv4 header and the whole TCP header.
        let e = l.pass(&icmp_error(ip("8.8.8.8"), ip(X), 3, 4, &o[14..], 40), 2);
        assert_eq!(
            read_u32(&e, 30),
            ip("192.168.1.1"),
            "{}: to the inside host",
            l.mode
        );
        assert_eq!(read_u32(&e, 42 + 12), ip("192.168.1.1"));
        assert_eq!(read_u16(&e, 62), 40000);
        assert_eq!(
            read_u16(&e, 78),
            read_u16(&syn, 50),
            "{}: quoted TCP checksum",
            l.mode
        );
        assert!(quoted_ip_ok(&e));
        assert_eq!(
            e[42..62],
            syn[14..34],
            "{}: quoted IPv4 header as sent",
            l.mode
        );
    }
}

#[test]
fn rfc5382_req10_icmp_does_not_terminate_tcp() {
    for mut l in labs("flows = 64") {
        let o = l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_SYN), 1);
        let x = t4(&o).1;
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_SYN | TCP_ACK), 1);
        l.pass(&icmp_error(ip("8.8.8.8"), ip(X), 3, 1, &o[14..], 28), 2);
        // Still established: idle past the transitory timeout, data flows.
        l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_ACK), 2 + 600);
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_ACK), 2 + 601);
    }
}

// ---- RFC 5508 (ICMP) ------------------------------------------------------------------------

fn echo(src: &str, dst: &str, id: u16, reply: bool) -> Vec<u8> {
    let mut s = FrameSpec::echo(ip(src), ip(dst), id, 56);
    s.l4 = L4Spec::IcmpQuery {
        ty: if reply { 0 } else { 8 },
        ident: id,
        seq: 1,
    };
    s.build()
}

#[test]
fn rfc5508_req1_icmp_query_mapping() {
    for mut l in labs("flows = 64") {
        let ids: Vec<u16> = ["8.8.8.8", "1.1.1.1"]
            .iter()
            .map(|d| read_u16(&l.pass(&echo("192.168.1.1", d, 77, false), 1), 38))
            .collect();
        assert_eq!(
            ids[0], ids[1],
            "{}: identifier mapping is remote independent",
            l.mode
        );
        for d in ["8.8.8.8", "1.1.1.1"] {
            let r = l.pass(&echo(d, X, ids[0], true), 2);
            assert_eq!(
                (read_u32(&r, 30), read_u16(&r, 38)),
                (ip("192.168.1.1"), 77)
            );
        }
    }
}

#[test]
fn rfc5508_req2_icmp_query_timeout() {
    for mut l in labs("flows = 64") {
        let id = read_u16(&l.pass(&echo("192.168.1.1", "8.8.8.8", 77, false), 1), 38);
        l.pass(&echo("8.8.8.8", X, id, true), 60);
        l.refused(&echo("8.8.8.8", X, id, true), 121, "no_mapping");
    }
}

#[test]
fn rfc5508_req3_errors_with_bad_checksums_dropped() {
    for mut l in labs("flows = 64") {
        let o = l.pass(&udp("192.168.1.1", 5000, "8.8.8.8", 53), 1);
        let good = icmp_error(ip("8.8.8.8"), ip(X), 3, 3, &o[14..], 120);
        // A flipped bit deep in the quote (in the payload segment in split modes).
        let mut bad = good.clone();
        bad[150] ^= 0x40;
        l.refused(&bad, 2, "icmp_bad_checksum");
        // A bad quoted IPv4 checksum, the ICMP checksum made right around it (REQ-3a).
        let mut q = o[14..].to_vec();
        q[10] ^= 0xff;
        l.refused(
            &icmp_error(ip("8.8.8.8"), ip(X), 3, 3, &q, 120),
            2,
            "icmp_bad_checksum",
        );
        assert_eq!(l.stat("icmp_bad_checksum"), 2);
        l.pass(&good, 2);
    }
}

#[test]
fn rfc5508_req4_inbound_errors_translated() {
    for mut l in labs("flows = 64") {
        let mode = l.mode;
        let sent = [
            udp("192.168.1.1", 5000, "8.8.8.8", 53),
            tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_SYN),
            echo("192.168.1.1", "8.8.8.8", 77, false),
        ];
        for (k, s) in sent.iter().enumerate() {
            let o = l.pass(s, 1);
            for len in [28, 48, 60] {
                let e = l.pass(&icmp_error(ip("8.8.8.8"), ip(X), 3, 4, &o[14..], len), 2);
                assert_eq!(read_u32(&e, 26), ip("8.8.8.8"), "{mode}: outer source kept");
                assert_eq!(
                    read_u32(&e, 30),
                    ip("192.168.1.1"),
                    "{mode} {k}: outer destination"
                );
                assert_eq!(e[34..36], [3, 4], "type and code kept");
                assert!(quoted_ip_ok(&e), "{mode} {k}");
                assert_eq!(
                    e[42..42 + len],
                    s[14..14 + len],
                    "{mode} {k} {len}: quote as sent"
                );
            }
        }
        assert_eq!(l.stat("icmp_errors_translated"), 9);
        let slow = if mode == DatapathMode::Host { 0 } else { 9 };
        assert_eq!(l.stat("icmp_errors_slow_path"), slow, "{mode}");
    }
}

#[test]
fn rfc5508_req5_outbound_errors_translated() {
    for mut l in labs("flows = 64") {
        let o = l.pass(&udp("192.168.1.1", 5000, "8.8.8.8", 53), 1);
        let x = t4(&o).1;
        let inbound = udp("8.8.8.8", 53, X, x);
        let delivered = l.pass(&inbound, 2);
        // The inside host reports the packet it received as unreachable.
        let e = l.pass(
            &icmp_error(ip("192.168.1.1"), ip("8.8.8.8"), 3, 3, &delivered[14..], 48),
            3,
        );
        assert_eq!(
            read_u32(&e, 26),
            ip(X),
            "{}: outer source translated",
            l.mode
        );
        assert_eq!(read_u32(&e, 30), ip("8.8.8.8"));
        assert_eq!(
            e[42..90],
            inbound[14..62],
            "{}: the quote as the remote sent it",
            l.mode
        );
    }
}

#[test]
fn rfc5508_req6_errors_neither_refresh_nor_delete_sessions() {
    for mut l in labs("flows = 64") {
        let o = l.pass(&udp("192.168.1.1", 5000, "8.8.8.8", 53), 1);
        let x = t4(&o).1;
        let err = icmp_error(ip("8.8.8.8"), ip(X), 3, 3, &o[14..], 48);
        l.pass(&err, 10);
        l.pass(&udp("8.8.8.8", 53, X, x), 11);
        // The reply at 11 s refreshed the session to 311 s; an error at 300 s does not.
        l.pass(&err, 300);
        l.refused(&udp("8.8.8.8", 53, X, x), 312, "no_mapping");
    }
}

#[test]
fn rfc5508_req7_hairpinned_icmp_errors() {
    for mut l in labs("flows = 64") {
        let (at_b, _) = hairpin(&mut l, None);
        // B reports A's packet (as B received it) unreachable, to its source: A's outside
        // address.
        let e = l.pass(
            &icmp_error(ip("192.168.0.2"), ip(X), 3, 3, &at_b[14..], 48),
            4,
        );
        assert_eq!(t4(&e).0, ip(X), "{}", l.mode);
        assert_eq!(read_u32(&e, 30), ip("192.168.0.1"), "{}: reaches A", l.mode);
        let a_sent = udp("192.168.0.1", 5000, X, 6000);
        assert_eq!(e[42..90], a_sent[14..62], "{}: quotes what A sent", l.mode);
    }
}

// ---- RFC 6888 (carrier-grade NAT) -----------------------------------------------------------

#[test]
fn rfc6888_req2_paired_pooling_by_default() {
    for mut l in labs("flows = 256\nnat_ips = [\"192.0.2.1\", \"192.0.2.2\", \"192.0.2.3\"]") {
        for s in 1..30u32 {
            let sub = format!("100.64.0.{s}");
            let addrs: std::collections::HashSet<u32> = (0..4u16)
                .map(|k| t4(&l.pass(&udp(&sub, 100 + k, "8.8.8.8", 53 + k), 1)).0)
                .collect();
            assert_eq!(addrs.len(), 1, "{}", l.mode);
        }
    }
}

#[test]
fn rfc6888_req3_noncontiguous_pool() {
    for mut l in labs("flows = 256\nnat_ips = [\"192.0.2.1\", \"198.51.100.0/31\"]") {
        let used: std::collections::HashSet<u32> = (1..60u32)
            .map(|s| t4(&l.pass(&udp(&format!("100.64.1.{s}"), 9, "8.8.8.8", 53), 1)).0)
            .collect();
        let want = [ip("192.0.2.1"), ip("198.51.100.0"), ip("198.51.100.1")];
        assert_eq!(used, want.into_iter().collect(), "{}", l.mode);
    }
}

#[test]
fn rfc6888_req4_subscriber_port_limit() {
    for mut l in labs("flows = 64\nsubscriber_port_limit = 4\nport_min = 2000\nport_max = 2007") {
        let got: Vec<Verdict> = (0..6u16)
            .map(|k| l.send(&udp("100.64.0.1", 5000 + k, "8.8.8.8", 53), 1).1)
            .collect();
        assert_eq!(
            got.iter().filter(|v| **v == Verdict::tx(1)).count(),
            4,
            "{}",
            l.mode
        );
        let limited = Verdict::drop(drop_reason("subscriber_limit"));
        assert_eq!(got.iter().filter(|v| **v == limited).count(), 2);
        assert_eq!(l.stat("subscriber_limit"), 2);
        // The next subscriber still gets a port.
        l.pass(&udp("100.64.0.2", 5000, "8.8.8.8", 53), 1);
    }
}

#[test]
fn rfc6888_req5_subscriber_session_limit() {
    for mut l in labs("flows = 64\nsubscriber_session_limit = 3") {
        let got: Vec<Verdict> = (1..=5u8)
            .map(|d| {
                l.send(&udp("100.64.0.1", 5000, &format!("8.8.8.{d}"), 53), 1)
                    .1
            })
            .collect();
        assert_eq!(
            got.iter().filter(|v| **v == Verdict::tx(1)).count(),
            3,
            "{}",
            l.mode
        );
        l.pass(&udp("100.64.0.2", 5000, "8.8.8.1", 53), 1);
    }
}

#[test]
fn rfc6888_req7_endpoint_independent_filtering_by_default() {
    for mut l in labs("flows = 64") {
        let x = t4(&l.pass(&udp("100.64.0.1", 5000, "8.8.8.8", 53), 1)).1;
        l.pass(&udp("203.0.113.1", 1234, X, x), 2);
    }
}

#[test]
fn rfc6888_req8_port_reuse_hold() {
    for mapping in ["endpoint-independent", "endpoint-dependent"] {
        let cfg = format!(
            "flows = 16\nport_min = 3000\nport_max = 3000\nudp_timeout_s = 10\nmapping = \"{mapping}\""
        );
        for mut l in labs(&cfg) {
            let a = udp("100.64.0.1", 5000, "8.8.8.8", 53);
            let b = udp("100.64.0.2", 5000, "8.8.8.8", 53);
            assert_eq!(t4(&l.pass(&a, 1)).1, 3000);
            // A's session expired at 11 s: its port is held for A until 131 s.
            l.refused(&b, 20, "port_exhausted");
            l.refused(&b, 130, "port_exhausted");
            assert_eq!(l.stat("port_exhausted"), 2, "{mapping} {}", l.mode);
            if mapping == "endpoint-independent" {
                assert_eq!(l.stat("held_eim_mappings"), 1);
                assert_eq!(l.stat("active_eim_mappings"), 0);
            }
            if mapping == "endpoint-dependent" {
                // Found by probing the held port (endpoint-independent mapping counts the
                // held port as in use and refuses without a probe).
                assert_eq!(l.stat("hold_blocked"), 2, "{}", l.mode);
            }
            // A may have it back meanwhile; its new session expires at 150 s.
            assert_eq!(t4(&l.pass(&a, 140)).1, 3000);
            l.refused(&b, 200, "port_exhausted");
            // Held until 270 s; then B gets it.
            l.refused(&b, 269, "port_exhausted");
            assert_eq!(t4(&l.pass(&b, 272)).1, 3000, "{mapping} {}", l.mode);
        }
    }
}

#[test]
fn rfc6888_req11_exhaustion_never_deletes_live_mappings() {
    for policy in ["drop", "evict"] {
        for mut l in labs(&format!("flows = 2\nfull_policy = \"{policy}\"")) {
            let mut ports = vec![];
            for h in ["100.64.0.1", "100.64.0.2"] {
                let x = t4(&l.pass(&tcp(h, 40000, "8.8.8.8", 443, TCP_SYN), 1)).1;
                l.pass(&tcp("8.8.8.8", 443, X, x, TCP_SYN | TCP_ACK), 1);
                ports.push((h, x));
            }
            l.refused(
                &tcp("100.64.0.3", 40000, "8.8.8.8", 443, TCP_SYN),
                2,
                "flow_table_full",
            );
            assert_eq!(l.stat("evicted"), 0);
            for (h, x) in &ports {
                assert_eq!(
                    t4(&l.pass(&tcp("8.8.8.8", 443, X, *x, TCP_ACK), 3)).2,
                    ip(h)
                );
            }
        }
    }
}

#[test]
fn rfc6888_req11_bounded_work_under_exhaustion() {
    // Endpoint-independent: a full address is refused without probing a single port.
    for mut l in labs("flows = 256\nport_min = 3000\nport_max = 3003") {
        for s in 1..=4u32 {
            l.pass(&udp(&format!("100.64.0.{s}"), 9, "8.8.8.8", 53), 1);
        }
        let probes = l.stat("port_probes");
        for s in 5..=100u32 {
            l.refused(
                &udp(&format!("100.64.0.{s}"), 9, "8.8.8.8", 53),
                1,
                "port_exhausted",
            );
        }
        assert_eq!(l.stat("port_probes"), probes, "{}", l.mode);
        assert_eq!(l.stat("port_exhausted"), 96);
    }
    // Endpoint-dependent: at most the preserved port and `port_attempts` random ones.
    let cfg = "flows = 512\nport_min = 3000\nport_max = 3099\nport_attempts = 8\n\
               mapping = \"endpoint-dependent\"";
    for mut l in labs(cfg) {
        let mut s = 0u32;
        while l.stat("port_exhausted") == 0 {
            s += 1;
            let _ = l.send(
                &udp(
                    &format!("100.64.{}.{}", s / 250, s % 250 + 1),
                    9,
                    "8.8.8.8",
                    53,
                ),
                1,
            );
        }
        let (probes, refused) = (l.stat("port_probes"), 50);
        for k in 0..refused {
            let _ = l.send(&udp(&format!("100.65.0.{}", k + 1), 9, "8.8.8.8", 53), 1);
        }
        let per = (l.stat("port_probes") - probes) as f64 / f64::from(refused);
        assert!(per <= 9.0, "{}: {per} probes per flow", l.mode);
    }
}

#[test]
fn rfc6888_req15_ports_hard_to_guess() {
    for mut l in labs("flows = 512\nport_preservation = false") {
        let ports: Vec<u16> = (0..200u32)
            .map(|s| {
                t4(&l.pass(
                    &udp(
                        &format!("100.64.0.{}", s % 250 + 1),
                        9000 + s as u16,
                        "8.8.8.8",
                        53,
                    ),
                    1,
                ))
                .1
            })
            .collect();
        let steps = ports
            .windows(2)
            .filter(|w| w[1] == w[0].wrapping_add(1))
            .count();
        assert!(
            steps < 5,
            "{}: {steps} sequential steps: {:?}",
            l.mode,
            &ports[..20]
        );
        let (lo, hi) = (ports.iter().min().unwrap(), ports.iter().max().unwrap());
        assert!(hi - lo > 30000, "{}: spread over the range", l.mode);
    }
}

// ---- RFC 7857 and the table -----------------------------------------------------------

#[test]
fn rfc7857_s3_1_tcp_sessions_open_on_syn_only() {
    for mut l in labs("flows = 64") {
        for fl in [
            TCP_ACK,
            TCP_RST,
            TCP_FIN | TCP_ACK,
            TCP_SYN | TCP_ACK,
            TCP_SYN | TCP_RST,
        ] {
            l.refused(
                &tcp("192.168.1.1", 40000, "8.8.8.8", 443, fl),
                1,
                "tcp_not_syn",
            );
        }
        assert_eq!(l.stat("new_mappings"), 0, "{}", l.mode);
        assert_eq!(l.stat("tcp_not_syn"), 5);
    }
}

#[test]
fn rfc7857_s3_2_rst_holds_the_session() {
    for mut l in labs("flows = 64") {
        let x = t4(&l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_SYN), 1)).1;
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_SYN | TCP_ACK), 1);
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_RST), 2);
        // Not deleted: the connection carries on after a (forged) RST.
        l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_ACK), 10);
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_ACK), 1000);
        // A RST that ends it: the session is held for the closing timeout, then goes.
        l.pass(&tcp("192.168.1.1", 40000, "8.8.8.8", 443, TCP_RST), 2000);
        l.pass(&tcp("8.8.8.8", 443, X, x, TCP_RST | TCP_ACK), 2200);
        l.refused(
            &tcp("8.8.8.8", 443, X, x, TCP_ACK),
            2200 + 241,
            "no_mapping",
        );
    }
}

#[test]
fn inside_port_preserved_when_free_else_random() {
    for mut l in labs("flows = 64") {
        assert_eq!(
            t4(&l.pass(&udp("192.168.1.1", 40000, "8.8.8.8", 53), 1)).1,
            40000
        );
        let other = t4(&l.pass(&udp("192.168.1.2", 40000, "8.8.8.8", 53), 1)).1;
        assert_ne!(other, 40000);
        assert_eq!(l.stat("ports_preserved"), 1, "{}", l.mode);
    }
}

#[test]
fn config_errors_name_the_key() {
    let err = |cfg: &str| Nat::from_params(&params(cfg), 0, 1).err().unwrap();
    let e = err("mapping = \"endpoint-dependent\"\nfiltering = \"endpoint-independent\"");
    assert!(
        e.contains("filtering") && e.contains("endpoint-independent"),
        "{e}"
    );
    let e = err("nat_ip = \"10.0.0.1\"\nnat_ips = \"10.0.0.0/30\"");
    assert!(e.contains("nat_ips") && e.contains("nat_ip"), "{e}");
    let e = err("nat_ips = \"10.0.0.1/24\"");
    assert!(e.contains("nat_ips") && e.contains("10.0.0.0/24"), "{e}");
    let e = err("nat_ips = [\"10.0.0.0/30\", \"10.0.0.2\"]");
    assert!(e.contains("overlaps"), "{e}");
    let e = err("nat_ips = \"10.0.0.0/8\"");
    assert!(e.contains("65536"), "{e}");
    assert!(err("port_attempts = 0").contains("port_attempts"));
    assert!(err("fragments_held = 1000").contains("fragments_held"));
    assert!(err("filtering = \"open\"").contains("filtering"));
}

/// RFC 6888 REQ-14 (log volume) with `port_block`: a subscriber's ports come from blocks of
/// consecutive ports it owns alone, at most `port_block_limit` blocks; a block goes back when
/// its last mapping ends.
#[test]
fn rfc6888_req14_port_blocks() {
    let cfg = "flows = 256\nport_min = 2000\nport_max = 2063\nport_block = 16\n\
               port_block_limit = 2\nport_reuse_hold_s = 0\nudp_timeout_s = 1";
    for mut l in labs(cfg) {
        let mut ports = Vec::new();
        for k in 0..32u16 {
            let o = l.pass(&udp("100.64.0.1", 5000 + k, "8.8.8.8", 53), 1);
            ports.push(t4(&o).1);
        }
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 32, "{}: distinct ports", l.mode);
        let mut blocks: Vec<u16> = ports.iter().map(|p| (p - 2000) / 16).collect();
        blocks.dedup();
        assert_eq!(blocks.len(), 2, "{}: two whole blocks {ports:?}", l.mode);
        l.refused(
            &udp("100.64.0.1", 6000, "8.8.8.8", 53),
            1,
            "subscriber_limit",
        );
        assert_eq!(l.stat("port_blocks_allocated"), 2);
        // Another subscriber gets a block of its own.
        let o = l.pass(&udp("100.64.0.2", 5000, "8.8.8.8", 53), 1);
        assert!(!blocks.contains(&((t4(&o).1 - 2000) / 16)), "{}", l.mode);
        assert_eq!(l.stat("port_blocks_allocated"), 3);
        // Once every mapping of the first subscriber has expired, its blocks are released.
        for t in 3..8 {
            l.pass(&udp("100.64.0.2", 5000, "8.8.8.8", 53), t);
        }
        assert!(l.stat("port_blocks_released") >= 2, "{}", l.mode);
        l.pass(&udp("100.64.0.1", 6000, "8.8.8.8", 53), 8);
    }
}
