//! Golden tests of the network functions through the whole dataplane: frames are written to a
//! pcap, pushed through `dataplane run <config> --rx-pcap in --tx-pcap out` in every datapath
//! mode, and the output is checked field by field (addresses, ports, valid checksums, payload
//! bytes unchanged). Outputs must also be identical across the four modes.

use std::collections::HashMap;
use std::path::PathBuf;

use dataplane::DatapathMode;
use nfs::frames::{FrameSpec, L4Spec};
use nfs::headers::verify_frame_checksums;
use nmdp::app::{RunOptions, run};
use serde_json::Value;

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

#[test]
fn nat_translates_both_directions_icmp_and_a_mix_of_flows_in_every_mode() {
    let out_specs = outbound();
    let out_frames: Vec<Vec<u8>> = out_specs.iter().map(|s| s.build()).collect();
    // Learn the mappings from a first run (port allocation is deterministic).
    let (learned, _) = run_frames(
        "nat-learn",
        NAT_CFG,
        &out_frames,
        DatapathMode::Host,
        NAT_SPLIT,
    );
    assert_eq!(learned.len(), out_frames.len());
    let mut mapping: HashMap<(u32, u16, u8), u16> = HashMap::new();
    for (spec, f) in out_specs.iter().zip(&learned) {
        let o = fields(&spec.build());
        let t = fields(f);
        let prev = mapping.insert((o.src, o.sport, o.proto), t.sport);
        if let Some(p) = prev {
            assert_eq!(p, t.sport, "a flow keeps its mapping");
        }
    }
    // Replies to every mapping, an echo reply, and an ICMP error quoting a translated packet.
    let mut replies = Vec::new();
    let mut expect_back = Vec::new();
    for spec in &out_specs {
        let o = fields(&spec.build());
        let port = mapping[&(o.src, o.sport, o.proto)];
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
        expect_back.push(o);
    }
    let quoted = learned[0][14..].to_vec();
    let err = FrameSpec {
        l4: L4Spec::IcmpError {
            ty: 3,
            code: 3,
            inner_len: 28,
            inner: quoted,
        },
        ..FrameSpec::udp(ip(8, 8, 8, 8), NAT_IP, 0, 0, 0)
    };
    let all: Vec<Vec<u8>> = out_frames
        .iter()
        .cloned()
        .chain(replies.iter().cloned())
        .chain([err.build()])
        .collect();
    let mut reference: Option<Vec<Vec<u8>>> = None;
    for mode in DatapathMode::ALL {
        let (got, s) = run_frames("nat", NAT_CFG, &all, mode, NAT_SPLIT);
        assert_eq!(
            got.len(),
            all.len(),
            "{mode}: nothing dropped: {}",
            s["drops"]
        );
        let n_out = out_frames.len();
        for (i, f) in got.iter().enumerate() {
            verify_frame_checksums(f).unwrap_or_else(|e| panic!("{mode} frame {i}: {e}"));
            assert_eq!(f.len(), all[i].len(), "{mode}: length kept");
        }
        for i in 0..n_out {
            let (o, t) = (fields(&all[i]), fields(&got[i]));
            assert_eq!(t.src, NAT_IP, "{mode}: source rewritten");
            assert_eq!(t.dst, o.dst);
            assert!(t.sport >= 1024);
            assert_eq!(
                payload(&got[i]),
                payload(&all[i]),
                "{mode}: payload unchanged"
            );
        }
        for (k, o) in expect_back.iter().enumerate() {
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
        let inside = fields(&out_frames[0]);
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
            Some(expect_back.len() as u64 + 1)
        );
        match &reference {
            None => reference = Some(got),
            Some(r) => assert!(*r == got, "{mode}: output differs from host mode"),
        }
    }
}

#[test]
fn lb_keeps_flow_affinity_across_many_flows_in_every_mode() {
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
    let other = FrameSpec::udp(ip(172, 16, 9, 9), ip(5, 5, 5, 5), 1, 2, 64).build();
    frames.push(other.clone());
    let cfg = "[[pipeline]]\nname = \"lb\"\nflows = 65536\n";
    let mut reference: Option<Vec<Vec<u8>>> = None;
    for mode in DatapathMode::ALL {
        let (got, s) = run_frames("lb", cfg, &frames, mode, 64);
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
            got.last().unwrap(),
            &other,
            "{mode}: non-VIP forwarded unchanged"
        );
        assert_eq!(s["nfs"]["lb"]["new_flows"].as_u64(), Some(300));
        match &reference {
            None => reference = Some(got),
            Some(r) => assert!(*r == got, "{mode}: output differs from host mode"),
        }
    }
}
