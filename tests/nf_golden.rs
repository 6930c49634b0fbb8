//! Golden tests of the network functions through the whole dataplane. Each case is files in
//! `tests/golden/`: a run config (`<case>.toml`), the frames sent (`<case>-in.pcap`) and the
//! frames expected (`<case>-out.pcap`). In every datapath mode the case runs as
//! `dataplane run <case>.toml --rx-pcap <case>-in.pcap --tx-pcap out.pcap` and the frames out
//! must equal the expected ones bit for bit. The expected frames are themselves checked field by
//! field (addresses, ports, valid checksums, payload bytes unchanged), so a golden file cannot
//! hold a wrong answer unnoticed.
//!
//! `NMDP_BLESS=1 cargo test --test nf_golden` regenerates the files: the inputs from the frame
//! builders below, the expected outputs from a `host`-mode run that passes the field checks.
//! `tests/golden/README.md` says when that is allowed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use dataplane::DatapathMode;
use nmdp::run::{RunOptions, run};
use serde_json::Value;
use wire::classify::verify_frame_checksums;
use wire::frames::{FrameSpec, L4Spec};

const NAT_IP: u32 = 0x0a00_0001; // 10.0.0.1
const VIP: u32 = 0x0a02_0001; // 10.2.0.1

fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("nmdp-golden-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The folder of the golden files.
fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// True when the golden files are to be regenerated (`NMDP_BLESS=1`).
fn bless() -> bool {
    std::env::var_os("NMDP_BLESS").is_some_and(|v| v == "1")
}

/// Runs `tests/golden/<case>.toml` over `input` in `mode`; returns the frames out and the
/// summary.
/// A case with `[[vnic.ports]]` names its pcap port `link = "generator"`; it runs from a copy of
/// its config whose link reads `input` and writes the output (`--rx-pcap`/`--tx-pcap` feed only
/// a NIC without ports).
fn run_case(case: &str, input: &Path, mode: DatapathMode) -> (Vec<Vec<u8>>, Value) {
    let output = dir().join(format!("{case}-{mode}-out.pcap"));
    let config = golden_dir().join(format!("{case}.toml"));
    let text = std::fs::read_to_string(&config).unwrap();
    let with_ports = text.contains("[[vnic.ports]]");
    let config = if with_ports {
        let link = format!("link = \"pcap:{},{}\"", input.display(), output.display());
        let copy = dir().join(format!("{case}-{mode}.toml"));
        std::fs::write(&copy, text.replacen("link = \"generator\"", &link, 1)).unwrap();
        copy
    } else {
        config
    };
    let s = run(&RunOptions {
        config,
        mode: Some(mode),
        rx_pcap: (!with_ports).then(|| input.to_path_buf()),
        tx_pcap: (!with_ports).then(|| output.clone()),
        sets: vec!["run.stats_interval_s=0".into()],
        ..RunOptions::default()
    })
    .unwrap_or_else(|e| panic!("{case} {mode}: {e}"));
    (dataplane::pcap::read_all(&output).unwrap(), s)
}

/// The golden test of `case`: with `NMDP_BLESS=1`, writes `make_input()` as the input and a
/// host-mode run's frames as the expected output; then, in every mode, the frames out must equal
/// the expected ones bit for bit, and `check(input, frames out, summary, mode)` must hold (it
/// also vets the expected file itself, as host mode's output).
fn golden(
    case: &str,
    make_input: impl Fn() -> Vec<Vec<u8>>,
    check: impl Fn(&[Vec<u8>], &[Vec<u8>], &Value, DatapathMode),
) {
    let input = golden_dir().join(format!("{case}-in.pcap"));
    let expected = golden_dir().join(format!("{case}-out.pcap"));
    if bless() {
        dataplane::pcap::write_all(&input, make_input()).unwrap();
        let (out, s) = run_case(case, &input, DatapathMode::Host);
        check(
            &dataplane::pcap::read_all(&input).unwrap(),
            &out,
            &s,
            DatapathMode::Host,
        );
        dataplane::pcap::write_all(&expected, &out).unwrap();
    }
    let frames_in = dataplane::pcap::read_all(&input)
        .unwrap_or_else(|e| panic!("{}: {e} (NMDP_BLESS=1 makes it)", input.display()));
    let want = dataplane::pcap::read_all(&expected)
        .unwrap_or_else(|e| panic!("{}: {e} (NMDP_BLESS=1 makes it)", expected.display()));
    for mode in DatapathMode::ALL {
        let (got, s) = run_case(case, &input, mode);
        check(&frames_in, &got, &s, mode);
        assert_eq!(got.len(), want.len(), "{case} {mode}: frames out");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g == w,
                "{case} {mode}: frame {i} differs from {}",
                expected.display()
            );
        }
    }
}

/// Runs `pipeline` (TOML `[[pipeline]]` entries) over `frames` in `mode`; returns the output
/// frames and the summary.
fn run_frames(
    tag: &str,
    pipeline: &str,
    frames: &[Vec<u8>],
    mode: DatapathMode,
    split_offset: usize,
) -> (Vec<Vec<u8>>, Value) {
    let d = dir();
    let cfg = d.join(format!("{tag}.toml"));
    std::fs::write(&cfg, pipeline).unwrap();
    let input = d.join(format!("{tag}-in.pcap"));
    dataplane::pcap::write_all(&input, frames).unwrap();
    let output = d.join(format!("{tag}-{mode}-out.pcap"));
    let s = run(&RunOptions {
        config: cfg,
        mode: Some(mode),
        rx_pcap: Some(input),
        tx_pcap: Some(output.clone()),
        sets: vec![
            "run.stats_interval_s=0".into(),
            format!("datapath.split_offset={split_offset}"),
        ],
        ..RunOptions::default()
    })
    .unwrap();
    (dataplane::pcap::read_all(&output).unwrap(), s)
}

/// Fields of an untagged Ethernet/IPv4 frame without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fields {
    src: u32,
    dst: u32,
    proto: u8,
    sport: u16,
    dport: u16,
}

fn fields(f: &[u8]) -> Fields {
    let u16at = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
    let u32at = |o: usize| u32::from_be_bytes([f[o], f[o + 1], f[o + 2], f[o + 3]]);
    let proto = f[23];
    let (sport, dport) = match proto {
        6 | 17 => (u16at(34), u16at(36)),
        1 => (u16at(38), u16at(38)), // ICMP query: identifier in both
        _ => (0, 0),
    };
    Fields {
        src: u32at(26),
        dst: u32at(30),
        proto,
        sport,
        dport,
    }
}

/// Bytes after the L4 header (UDP 8, TCP 20, ICMP 8).
fn payload(f: &[u8]) -> &[u8] {
    let l4 = match f[23] {
        6 => 20,
        _ => 8,
    };
    &f[34 + l4..]
}

/// The shipped 64 B header segment: the ICMP error's quoted headers (bytes 42..70) reach past
/// it and are translated through the counted slow path (`nfs::slow_path`), identically in every
/// mode.
const NAT_SPLIT: usize = 64;

const NAT_CFG: &str = "[[pipeline]]\nname = \"nat\"\nflows = 65536\n";

fn outbound() -> Vec<FrameSpec> {
    let mut v = Vec::new();
    for i in 0..40u8 {
        // A mix of small and large frames so split modes carry payloads in nicmem.
        let len = if i % 2 == 0 { 200 } else { 1400 };
        v.push(FrameSpec::udp(
            ip(192, 168, 1, i),
            ip(8, 8, 8, 8),
            1000 + i as u16,
            53,
            len,
        ));
    }
    v.push(FrameSpec::tcp(
        ip(192, 168, 1, 50),
        ip(1, 1, 1, 1),
        40000,
        80,
        0x02,
        0,
    ));
    v.push(FrameSpec::tcp(
        ip(192, 168, 1, 50),
        ip(1, 1, 1, 1),
        40000,
        80,
        0x18,
        1000,
    ));
    v.push(FrameSpec::echo(
        ip(192, 168, 1, 60),
        ip(9, 9, 9, 9),
        777,
        56,
    ));
    // The same UDP flow again: must reuse its mapping.
    v.push(FrameSpec::udp(
        ip(192, 168, 1, 3),
        ip(8, 8, 8, 8),
        1003,
        53,
        300,
    ));
    v
}

/// The NAT case's input: outbound flows (UDP, TCP, an echo, a flow seen twice), a reply to each
/// mapping (learned from a first run: port allocation is deterministic), and an ICMP error
/// quoting a translated packet.
fn nat_input() -> Vec<Vec<u8>> {
    let out_specs = outbound();
    let out_frames: Vec<Vec<u8>> = out_specs.iter().map(|s| s.build()).collect();
    let (learned, _) = run_frames(
        "nat-learn",
        &format!("[datapath]\nsplit_offset = {NAT_SPLIT}\n{NAT_CFG}"),
        &out_frames,
        DatapathMode::Host,
        NAT_SPLIT,
    );
    assert_eq!(learned.len(), out_frames.len());
    let mut replies = Vec::new();
    for (spec, t) in out_specs.iter().zip(&learned) {
        let o = fields(&spec.build());
        let port = fields(t).sport;
        let r = match &spec.l4 {
            L4Spec::Udp { .. } => FrameSpec::udp(o.dst, NAT_IP, o.dport, port, 120),
            L4Spec::Tcp { .. } => FrameSpec::tcp(o.dst, NAT_IP, o.dport, port, 0x12, 0),
            L4Spec::IcmpQuery { .. } => {
                let mut e = FrameSpec::echo(o.dst, NAT_IP, port, 56);
                e.l4 = L4Spec::IcmpQuery {
                    ty: 0,
                    ident: port,
                    seq: 1,
                };
                e
            }
            _ => unreachable!(),
        };
        replies.push(r.build());
    }
    let err = FrameSpec {
        l4: L4Spec::IcmpError {
            ty: 3,
            code: 3,
            inner_len: 28,
            inner: learned[0][14..].to_vec(),
        },
        ..FrameSpec::udp(ip(8, 8, 8, 8), NAT_IP, 0, 0, 0)
    };
    out_frames
        .into_iter()
        .chain(replies)
        .chain([err.build()])
        .collect()
}

/// What the NAT must have done to `all` for the frames `got`: outbound frames leave from the
/// NAT address with a port of its range and one port per flow, replies go back to the inside
/// host and port, the ICMP error's outer and quoted headers are translated back, every checksum
/// is valid and no payload byte changed.
fn check_nat(all: &[Vec<u8>], got: &[Vec<u8>], s: &Value, mode: DatapathMode) {
    let out_specs = outbound();
    let n_out = out_specs.len();
    assert_eq!(
        got.len(),
        all.len(),
        "{mode}: nothing dropped: {}",
        s["drops"]
    );
    for (i, f) in got.iter().enumerate() {
        verify_frame_checksums(f).unwrap_or_else(|e| panic!("{mode} frame {i}: {e}"));
        assert_eq!(f.len(), all[i].len(), "{mode}: length kept");
    }
    let mut mapping: HashMap<(u32, u16, u8), u16> = HashMap::new();
    for i in 0..n_out {
        let (o, t) = (fields(&all[i]), fields(&got[i]));
        assert_eq!(t.src, NAT_IP, "{mode}: source rewritten");
        assert_eq!(t.dst, o.dst);
        assert!(t.sport >= 1024);
        let prev = mapping.insert((o.src, o.sport, o.proto), t.sport);
        assert!(
            prev.is_none_or(|p| p == t.sport),
            "{mode}: a flow keeps its mapping"
        );
        assert_eq!(
            payload(&got[i]),
            payload(&all[i]),
            "{mode}: payload unchanged"
        );
    }
    for (k, spec) in out_specs.iter().enumerate() {
        let o = fields(&spec.build());
        let i = n_out + k;
        let t = fields(&got[i]);
        assert_eq!(t.dst, o.src, "{mode}: reply {k} back to the inside host");
        if o.proto == 1 {
            assert_eq!(t.sport, o.sport, "{mode}: echo identifier restored");
        } else {
            assert_eq!(t.dport, o.sport, "{mode}: reply {k} port restored");
        }
        assert_eq!(
            payload(&got[i]),
            payload(&all[i]),
            "{mode}: payload unchanged"
        );
    }
    // ICMP error: outer destination and the quoted header translated back.
    let e = got.last().unwrap();
    let inside = fields(&all[0]);
    assert_eq!(
        fields(e).dst,
        inside.src,
        "{mode}: ICMP error to the inside host"
    );
    let q = &e[42..];
    assert_eq!(u32::from_be_bytes([q[12], q[13], q[14], q[15]]), inside.src);
    assert_eq!(u16::from_be_bytes([q[20], q[21]]), inside.sport);
    assert_eq!(
        s["nfs"]["nat"]["inbound_translated"].as_u64(),
        Some(n_out as u64 + 1)
    );
}

#[test]
fn nat_golden_in_every_mode() {
    golden("nat", nat_input, check_nat);
}

/// The LB case's input: 300 TCP flows to the VIP, three rounds, small and large frames, and one
/// packet for another address.
fn lb_input() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for round in 0..3 {
        for c in 0..300u32 {
            let len = if (c + round) % 3 == 0 { 1200 } else { 100 };
            frames.push(
                FrameSpec::tcp(
                    ip(172, 16, (c >> 8) as u8, c as u8),
                    VIP,
                    20000 + c as u16,
                    80,
                    0x18,
                    len,
                )
                .build(),
            );
        }
    }
    frames.push(FrameSpec::udp(ip(172, 16, 9, 9), ip(5, 5, 5, 5), 1, 2, 64).build());
    frames
}

/// Every VIP flow stays on one backend, round robin uses all 32, only the destination changed
/// (with valid checksums), and the other packet passes unchanged.
fn check_lb(frames: &[Vec<u8>], got: &[Vec<u8>], s: &Value, mode: DatapathMode) {
    assert_eq!(got.len(), frames.len(), "{mode}");
    let mut backend_of: HashMap<(u32, u16), u32> = HashMap::new();
    let mut used = std::collections::HashSet::new();
    for (i, f) in got.iter().enumerate().take(900) {
        verify_frame_checksums(f).unwrap_or_else(|e| panic!("{mode} frame {i}: {e}"));
        let (o, t) = (fields(&frames[i]), fields(f));
        assert!(
            (ip(10, 180, 250, 5)..=ip(10, 180, 250, 36)).contains(&t.dst),
            "{mode}"
        );
        assert_eq!((t.src, t.sport, t.dport), (o.src, o.sport, o.dport));
        assert_eq!(payload(f), payload(&frames[i]));
        let b = *backend_of.entry((o.src, o.sport)).or_insert(t.dst);
        assert_eq!(b, t.dst, "{mode}: flow {o:?} stays on one backend");
        used.insert(t.dst);
    }
    assert_eq!(used.len(), 32, "{mode}: round robin uses every backend");
    assert_eq!(
        got.last(),
        frames.last(),
        "{mode}: non-VIP forwarded unchanged"
    );
    assert_eq!(s["nfs"]["lb"]["new_flows"].as_u64(), Some(300));
}

#[test]
fn lb_golden_in_every_mode() {
    golden("lb", lb_input, check_lb);
}

/// The flow counter's input: 50 UDP and TCP flows of several sizes, each seen a few times, and
/// two frames it cannot attribute (not IPv4, truncated IPv4).
fn flow_counter_input() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for round in 0..4u16 {
        for c in 0..50u16 {
            let (a, b) = (ip(192, 168, 7, c as u8), ip(10, 9, 8, 7));
            let len = 40 + usize::from((c * 37 + round * 11) % 1400);
            let f = if c % 2 == 0 {
                FrameSpec::udp(a, b, 3000 + c, 53, len)
            } else {
                FrameSpec::tcp(a, b, 3000 + c, 443, 0x18, len)
            };
            frames.push(f.build());
        }
    }
    let mut not_ip = FrameSpec::udp(1, 2, 3, 4, 40).build();
    not_ip[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    frames.push(not_ip);
    let mut short = FrameSpec::udp(1, 2, 3, 4, 40).build();
    short[16..18].copy_from_slice(&2000u16.to_be_bytes());
    frames.push(short);
    frames
}

/// A monitor: every frame passes unchanged, 50 flows of 4 packets are counted, the two others
/// are unparsed, and every frame's bytes are counted.
fn check_flow_counter(frames: &[Vec<u8>], got: &[Vec<u8>], s: &Value, mode: DatapathMode) {
    assert!(got == frames, "{mode}: the flow counter changes nothing");
    let c = &s["nfs"]["flow-counter"];
    assert_eq!(c["flows"].as_u64(), Some(50), "{mode}: {c}");
    assert_eq!(c["new_flows"].as_u64(), Some(50), "{mode}: {c}");
    assert_eq!(c["unparsed"].as_u64(), Some(2), "{mode}: {c}");
    let bytes: usize = frames.iter().map(Vec::len).sum();
    assert_eq!(c["bytes"].as_u64(), Some(bytes as u64), "{mode}: {c}");
}

#[test]
fn flow_counter_golden_in_every_mode() {
    golden("flow-counter", flow_counter_input, check_flow_counter);
}

/// The route case's on-link neighbour and the port's own address (tests/golden/route.toml).
const NEIGHBOR: u32 = 0x0a00_0107; // 10.0.1.7
const PORT_IP: u32 = 0x0a00_0101; // 10.0.1.1

/// An ARP request from `NEIGHBOR` for `target`, padded to 60 bytes.
fn arp_request(target: u32) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x07, 0x08, 0x06]);
    f.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x07]);
    f.extend_from_slice(&NEIGHBOR.to_be_bytes());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target.to_be_bytes());
    f.resize(60, 0);
    f
}

/// The route case's input: 20 UDP frames to the on-link neighbour and 20 TCP frames to an
/// off-link address (both from the neighbour), then one frame with TTL 1, a ping to the port, an
/// ARP request for the port, and a frame to another host's MAC.
fn route_input() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for k in 0..20u16 {
        let len = 18 + usize::from(k * 73 % 1400);
        frames.push(FrameSpec::udp(ip(10, 0, 1, 50), NEIGHBOR, 4000 + k, 53, len).build());
        frames
            .push(FrameSpec::tcp(NEIGHBOR, ip(93, 184, 216, 34), 5000 + k, 443, 0x18, len).build());
    }
    frames.push(
        FrameSpec {
            ttl: 1,
            ..FrameSpec::udp(NEIGHBOR, ip(8, 8, 8, 8), 33434, 33434, 32)
        }
        .build(),
    );
    frames.push(FrameSpec::echo(NEIGHBOR, PORT_IP, 7, 56).build());
    frames.push(arp_request(PORT_IP));
    let mut other = FrameSpec::udp(NEIGHBOR, ip(93, 184, 216, 34), 1, 2, 40).build();
    other[5] = 0x99;
    frames.push(other);
    // Every frame comes from the neighbour's MAC.
    for f in &mut frames {
        f[11] = 0x07;
    }
    frames
}

/// A router: the 40 forwarded frames leave with TTL - 1, a valid checksum, the port's MAC as
/// source and the next hop's (the neighbour, or the gateway for off-link) as destination, the
/// rest unchanged; TTL 1 gets ICMP time exceeded quoting the frame, the ping an echo reply, the
/// ARP request a reply with the port's MAC; the frame to another MAC is a counted drop.
fn check_route(frames: &[Vec<u8>], got: &[Vec<u8>], s: &Value, mode: DatapathMode) {
    let port_mac = [0x02, 0, 0, 0, 0, 0x01];
    assert_eq!(got.len(), 43, "{mode}: 40 forwarded + 3 answers");
    let mut forwarded = 0;
    let (mut time_exceeded, mut echo_reply, mut arp_reply) = (0, 0, 0);
    for f in got {
        assert_eq!(f[6..12], port_mac, "{mode}: source MAC is the port's");
        if f[12..14] == [0x08, 0x06] {
            assert_eq!(f[20..22], [0, 2], "{mode}: an ARP reply");
            assert_eq!(f[22..28], port_mac);
            assert_eq!(f[28..32], PORT_IP.to_be_bytes());
            assert_eq!(f[38..42], NEIGHBOR.to_be_bytes());
            arp_reply += 1;
            continue;
        }
        verify_frame_checksums(f).unwrap_or_else(|e| panic!("{mode}: {e}"));
        let t = fields(f);
        if t.src == PORT_IP {
            assert_eq!(
                (t.dst, t.proto),
                (NEIGHBOR, 1),
                "{mode}: ICMP to the sender"
            );
            assert_eq!(f[0..6], [0x02, 0, 0, 0, 0, 0x07]);
            match f[34] {
                11 => {
                    // The quoted header is the sender's, with its TTL of 1.
                    assert_eq!(f[42 + 8], 1, "{mode}: quoted TTL");
                    assert_eq!(f[42 + 16..42 + 20], ip(8, 8, 8, 8).to_be_bytes());
                    time_exceeded += 1;
                }
                0 => echo_reply += 1,
                ty => panic!("{mode}: ICMP type {ty}"),
            }
            continue;
        }
        let i = frames
            .iter()
            .position(|x| x.len() == f.len() && x[14..22] == f[14..22] && x[26..] == f[26..])
            .unwrap_or_else(|| panic!("{mode}: a forwarded frame matches an input"));
        let o = &frames[i];
        assert_eq!(f[22], o[22] - 1, "{mode}: TTL - 1");
        let gw = if t.dst == NEIGHBOR { 0x07 } else { 0xfe };
        assert_eq!(f[0..6], [0x02, 0, 0, 0, 0, gw], "{mode}: next hop's MAC");
        forwarded += 1;
    }
    assert_eq!(
        (forwarded, time_exceeded, echo_reply, arp_reply),
        (40, 1, 1, 1),
        "{mode}"
    );
    assert_eq!(s["route"]["forwarded"].as_u64(), Some(40), "{mode}");
    assert_eq!(s["route"]["icmp_time_exceeded_sent"].as_u64(), Some(1));
    assert_eq!(s["arp"]["replies_sent"].as_u64(), Some(1));
    assert_eq!(s["drops"]["not_our_mac"].as_u64(), Some(1), "{mode}");
}

#[test]
fn route_golden_in_every_mode() {
    golden("route", route_input, check_route);
}
