//! Issue 19's acceptance, as an operator's lab runs it: frames written to a pcap, pushed through
//! `dataplane run` with `configs/nat.toml` as shipped (only the run's own settings and the mode
//! change), in every datapath mode on the virtual NIC, every output frame checked field by field:
//! ICMP "fragmentation needed" about translated UDP and TCP packets reaches the inside host with
//! correct outer and quoted headers and checksums; three fragments of a datagram, in order and
//! reversed (and held across bursts for their first), all come out translated; one inside host
//! reaches another through the NAT's outside address and port. Then the LB: ICMP errors about
//! each of 8 Maglev flows reach that flow's backend. The NAT's unit-level conformance tests are
//! in `nfs/tests/nat_conformance.rs`.

use std::path::{Path, PathBuf};

use dataplane::DatapathMode;
use nmdp::run::{RunOptions, run};
use serde_json::Value;
use wire::checksum::ipv4_header_checksum;
use wire::classify::{parse, verify_frame_checksums};
use wire::field::{read_u16, read_u32};
use wire::frames::{FrameSpec, L4Spec};

fn ip(s: &str) -> u32 {
    u32::from(s.parse::<std::net::Ipv4Addr>().unwrap())
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("nmdp-nat-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `config` over `frames` in `mode`; returns the transmitted frames and the summary.
fn run_pcap(
    tag: &str,
    config: &Path,
    frames: &[Vec<u8>],
    mode: DatapathMode,
) -> (Vec<Vec<u8>>, Value) {
    let d = dir();
    let input = d.join(format!("{tag}-in.pcap"));
    dataplane::pcap::write_all(&input, frames).unwrap();
    let output = d.join(format!("{tag}-{mode}-out.pcap"));
    let s = run(&RunOptions {
        config: config.to_path_buf(),
        mode: Some(mode),
        rx_pcap: Some(input),
        tx_pcap: Some(output.clone()),
        sets: vec!["run.stats_interval_s=0".into()],
        ..RunOptions::default()
    })
    .unwrap();
    (dataplane::pcap::read_all(&output).unwrap(), s)
}

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name)
}

/// The outside address `configs/nat.toml`'s NAT pairs inside address `inside` with (its pool
/// as shipped; pairing is a fixed hash, the same in every NAT built from the same pool).
fn paired(inside: &str) -> u32 {
    let cfg: toml::Table =
        toml::from_str(&std::fs::read_to_string(shipped("nat.toml")).unwrap()).unwrap();
    let mut nat = cfg["pipeline"].as_array().unwrap()[0]
        .as_table()
        .unwrap()
        .clone();
    assert_eq!(nat.remove("name").unwrap().as_str(), Some("nat"));
    nat.insert("flows".into(), toml::Value::Integer(16));
    nfs::nat::Nat::from_params(&nat, 0, 1)
        .unwrap()
        .paired_address(ip(inside))
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Drops by reason in a summary (non-zero ones).
fn drops(s: &Value) -> Vec<(String, u64)> {
    s["drops"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), n(v)))
        .filter(|(_, c)| *c > 0)
        .collect()
}

fn udp(src: &str, sport: u16, dst: &str, dport: u16, len: usize) -> FrameSpec {
    FrameSpec::udp(ip(src), ip(dst), sport, dport, len)
}

fn icmp_error(from: &str, to: u32, code: u8, quoted: Vec<u8>, len: usize) -> Vec<u8> {
    FrameSpec {
        l4: L4Spec::IcmpError {
            ty: 3,
            code,
            inner: quoted,
            inner_len: len,
        },
        ..FrameSpec::udp(ip(from), to, 0, 0, 0)
    }
    .build()
}

/// The IPv4 fragment word (flags and offset) and identification of a frame.
fn frag_id(f: &[u8]) -> (u16, u16) {
    (read_u16(f, 18), read_u16(f, 20))
}

#[test]
fn shipped_nat_config_translates_icmp_errors_fragments_and_hairpins_in_every_mode() {
    let a = "192.168.1.10";
    let b = "192.168.1.20";
    let server = "8.8.8.8";
    let (xa, xb) = (paired(a), paired(b));
    let (x, x_b) = (
        std::net::Ipv4Addr::from(xa).to_string(),
        std::net::Ipv4Addr::from(xb).to_string(),
    );
    let mut frames = Vec::new();
    // 0, 1: a UDP and a TCP flow out (inside ports are free: kept on the outside).
    frames.push(udp(a, 5000, server, 53, 300).build());
    frames.push(FrameSpec::tcp(ip(a), ip(server), 40000, 443, 0x02, 0).build());
    // 2, 3: the server's router sends "fragmentation needed" about each, as they left the NAT.
    let udp_out = udp(&x, 5000, server, 53, 300).ip_packet();
    let tcp_out = FrameSpec::tcp(xa, ip(server), 40000, 443, 0x02, 0).ip_packet();
    frames.push(icmp_error(server, xa, 4, udp_out, 56));
    frames.push(icmp_error(server, xa, 4, tcp_out, 40));
    // 4..=9: a fragmented datagram out in order, another one reversed.
    let mut big = udp(a, 5001, server, 53, 1000);
    big.ident = 0x0a0a;
    frames.extend(big.fragments(400));
    big.ident = 0x0b0b;
    frames.extend(big.fragments(400).into_iter().rev());
    // 10, 11: the reply's later fragments, first in line; 40 frames of other traffic; then
    // its first fragment (so the later ones are held across bursts until it passes).
    let mut reply = udp(server, 53, &x, 5001, 1000);
    reply.ident = 0x0c0c;
    let rf = reply.fragments(400);
    frames.push(rf[2].clone());
    frames.push(rf[1].clone());
    for k in 0..40u16 {
        frames.push(udp("192.168.7.7", 10000 + k, "9.9.9.9", 53, 100).build());
    }
    frames.push(rf[0].clone());
    // Hairpinning: B talks to a server (mapping X_B:6000), then A sends to X_B:6000.
    frames.push(udp(b, 6000, "203.0.113.1", 3478, 100).build());
    frames.push(udp(a, 7000, &x_b, 6000, 100).build());
    let cfg = shipped("nat.toml");
    let mut reference: Option<Vec<Vec<u8>>> = None;
    for mode in DatapathMode::ALL {
        let (got, s) = run_pcap("nat", &cfg, &frames, mode);
        assert_eq!(drops(&s), vec![], "{mode}: nothing dropped");
        assert_eq!(got.len(), frames.len(), "{mode}");
        for (k, f) in got.iter().enumerate() {
            verify_frame_checksums(f).unwrap_or_else(|e| panic!("{mode} frame {k}: {e}"));
        }
        let find = |pred: &dyn Fn(&[u8]) -> bool| {
            got.iter()
                .find(|f| pred(f))
                .unwrap_or_else(|| panic!("{mode}: frame not found"))
                .clone()
        };
        // The two ICMP errors reach A, quoting A's packets as A sent them.
        let errs: Vec<&Vec<u8>> = got.iter().filter(|f| f[23] == 1).collect();
        assert_eq!(errs.len(), 2, "{mode}");
        for (e, sent) in errs.iter().zip([&frames[0], &frames[1]]) {
            assert_eq!(read_u32(e, 26), ip(server), "{mode}");
            assert_eq!(read_u32(e, 30), ip(a), "{mode}: to the inside host");
            assert_eq!(e[34..36], [3, 4], "{mode}: type and code");
            assert_eq!(ipv4_header_checksum(&e[42..62]), read_u16(e, 52));
            let quoted = usize::from(read_u16(e, 16)) - 28;
            assert_eq!(
                e[42..42 + quoted],
                sent[14..14 + quoted],
                "{mode}: quote as sent"
            );
        }
        // Fragments: every one translated, each datagram whole.
        for ident in [0x0a0a, 0x0b0b] {
            let frs: Vec<&Vec<u8>> = got.iter().filter(|f| frag_id(f).0 == ident).collect();
            assert_eq!(frs.len(), 3, "{mode}: datagram {ident:#x}");
            for f in &frs {
                assert_eq!(read_u32(f, 26), xa, "{mode}: source translated");
            }
            let first = frs.iter().find(|f| frag_id(f).1 & 0x1fff == 0).unwrap();
            assert_eq!(read_u16(first, 34), 5001, "{mode}: inside port kept");
        }
        let back: Vec<&Vec<u8>> = got.iter().filter(|f| frag_id(f).0 == 0x0c0c).collect();
        assert_eq!(back.len(), 3, "{mode}: reply fragments");
        for f in &back {
            assert_eq!(read_u32(f, 30), ip(a), "{mode}: reply to the inside host");
        }
        let first = back.iter().find(|f| frag_id(f).1 & 0x1fff == 0).unwrap();
        assert_eq!(read_u16(first, 36), 5001);
        let fs = &s["nfs"]["nat"]["fragments"];
        assert_eq!(n(&fs["held"]), 2, "{mode}: held across bursts");
        assert_eq!(n(&fs["released"]), 2, "{mode}");
        // Hairpinning: B receives A's packet from A's outside endpoint.
        let at_b = find(&|f: &[u8]| read_u32(f, 30) == ip(b) && f[23] == 17);
        let p = parse(&at_b, at_b.len()).unwrap();
        assert_eq!((p.src, p.ports()), (xa, (7000, 6000)), "{mode}");
        assert_eq!(
            at_b[42..],
            frames.last().unwrap()[42..],
            "{mode}: payload intact"
        );
        let nat = &s["nfs"]["nat"];
        assert_eq!(n(&nat["icmp_errors_translated"]), 2);
        assert_eq!(n(&nat["hairpinned"]), 1);
        let slow = if mode == DatapathMode::Host { 0 } else { 2 };
        assert_eq!(n(&nat["icmp_errors_slow_path"]), slow, "{mode}");
        match &reference {
            None => reference = Some(got),
            Some(r) => assert!(*r == got, "{mode}: output differs from host mode"),
        }
    }
}

#[test]
fn shipped_nat_config_accounts_for_fragments_whose_first_never_comes() {
    let x = std::net::Ipv4Addr::from(paired("192.168.1.10")).to_string();
    let mut frames = vec![udp("192.168.1.10", 5000, "8.8.8.8", 53, 100).build()];
    let mut reply = udp("8.8.8.8", 53, &x, 5000, 1000);
    reply.ident = 0x0d0d;
    frames.extend(reply.fragments(400).into_iter().skip(1));
    for mode in DatapathMode::ALL {
        let (got, s) = run_pcap("orphans", &shipped("nat.toml"), &frames, mode);
        assert_eq!(got.len(), 1, "{mode}");
        assert_eq!(
            drops(&s),
            vec![("fragment_timeout".to_string(), 2)],
            "{mode}"
        );
        assert_eq!(
            n(&s["packets_rx"]),
            n(&s["packets_tx"]) + 2,
            "{mode}: all accounted"
        );
    }
}

#[test]
fn lb_with_maglev_steers_icmp_errors_to_each_flows_backend_in_every_mode() {
    let vip = "10.2.0.1";
    let d = dir();
    let cfg = d.join("lb-maglev.toml");
    std::fs::write(
        &cfg,
        "[[pipeline]]\nname = \"lb\"\nvip = \"10.2.0.1\"\nmode = \"maglev\"\nflows = 65536\n",
    )
    .unwrap();
    let clients: Vec<(String, u16)> = (0..8u16)
        .map(|k| (format!("172.16.{}.{}", k, 10 + k), 30000 + k * 11))
        .collect();
    let mut frames: Vec<Vec<u8>> = clients
        .iter()
        .map(|(c, p)| FrameSpec::tcp(ip(c), ip(vip), *p, 80, 0x02, 0).build())
        .collect();
    // A router's "fragmentation needed" about each backend's reply (sent from the VIP).
    for (c, p) in clients.iter().rev() {
        let reply = FrameSpec::tcp(ip(vip), ip(c), 80, *p, 0x18, 1400).ip_packet();
        frames.push(icmp_error("192.0.2.254", ip(vip), 4, reply, 48));
    }
    for mode in DatapathMode::ALL {
        let (got, s) = run_pcap("lb", &cfg, &frames, mode);
        assert_eq!(got.len(), 16, "{mode}: {:?}", drops(&s));
        let backend: Vec<u32> = got[..8].iter().map(|f| read_u32(f, 30)).collect();
        let spread: std::collections::HashSet<_> = backend.iter().collect();
        assert!(spread.len() > 1, "{mode}: flows spread over backends");
        for (k, e) in got[8..].iter().enumerate() {
            let flow = 7 - k;
            assert_eq!(
                read_u32(e, 30),
                backend[flow],
                "{mode}: error about flow {flow}"
            );
            assert_eq!(e[34..], frames[8 + k][34..], "{mode}: message untouched");
            verify_frame_checksums(e).unwrap();
        }
        assert_eq!(n(&s["nfs"]["lb"]["icmp_errors_steered"]), 8, "{mode}");
    }
}
