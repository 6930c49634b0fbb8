//! Stable-Rust "fuzz smoke" test: random and mutated frames thrown at every NF in every datapath
//! mode; asserts no panic and that each NF's counters add up to the verdicts it produced.
//!
//! The libFuzzer targets in `/fuzz` need nightly to run; this test gives the same guarantee a
//! bounded, deterministic workout on stable. `NFS_FUZZ_ITERS` sets the frames per NF per mode
//! (default 200 000); `NFS_FUZZ_SEED` the seed.

mod common;

use dataplane::testkit::PacketFactory;
use dataplane::{Action, Burst, DatapathMode, DropReason, NetworkFunction, NfContext, Verdict};
use nfs::flow_counter::FlowCounter;
use nfs::lb::LoadBalancer;
use nfs::nat::Nat;
use nfs::work_package::{WorkPackage, XorShift64};
use wire::classify::parse;
use wire::frames::{FrameSpec, L4Spec};
use wire::tcp::{TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};

const NAT_IP: u32 = 0x0a00_0001;
const VIP: u32 = 0x0a02_0001;

fn iters() -> usize {
    std::env::var("NFS_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000)
}

fn seed() -> u64 {
    std::env::var("NFS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed)
}

/// Valid seed frames covering every parser path.
fn seeds() -> Vec<Vec<u8>> {
    let a = 0xc0a8_0001;
    let r = 0x0808_0808;
    let mut v = vec![
        FrameSpec::udp(a, r, 1000, 53, 18).build(),
        FrameSpec::udp(a, VIP, 1000, 53, 300).build(),
        FrameSpec::tcp(a, r, 40000, 443, TCP_SYN, 0).build(),
        FrameSpec::tcp(a, VIP, 40000, 80, TCP_ACK, 100).build(),
        FrameSpec::tcp(r, NAT_IP, 443, 1024, TCP_SYN | TCP_ACK, 0).build(),
        FrameSpec::tcp(a, r, 40000, 443, TCP_FIN | TCP_ACK, 0).build(),
        FrameSpec::tcp(a, r, 40000, 443, TCP_RST, 0).build(),
        FrameSpec::echo(a, r, 77, 56).build(),
        FrameSpec::echo(r, NAT_IP, 1025, 56).build(),
        FrameSpec::udp(r, NAT_IP, 53, 1024, 40).build(),
    ];
    let mut s = FrameSpec::udp(a, r, 1, 2, 30);
    s.vlan = Some(3);
    s.ip_options = vec![0x94, 4, 0, 0];
    v.push(s.build());
    let mut s = FrameSpec::udp(a, r, 1, 2, 30);
    s.frag = 0x2000;
    v.push(s.build());
    s.frag = 0x0004;
    v.push(s.build());
    let inner = FrameSpec::udp(NAT_IP, r, 1024, 53, 20).ip_packet();
    for (from, to, inner, len) in [
        (r, NAT_IP, inner.clone(), 28usize),
        (
            r,
            NAT_IP,
            FrameSpec::tcp(NAT_IP, r, 1024, 80, TCP_SYN, 0).ip_packet(),
            40,
        ),
        (
            r,
            NAT_IP,
            FrameSpec::echo(NAT_IP, r, 1024, 8).ip_packet(),
            28,
        ),
        (a, r, FrameSpec::udp(r, a, 53, 1000, 20).ip_packet(), 28),
    ] {
        v.push(
            FrameSpec {
                l4: L4Spec::IcmpError {
                    ty: 11,
                    code: 0,
                    inner,
                    inner_len: len,
                },
                ..FrameSpec::udp(from, to, 0, 0, 0)
            }
            .build(),
        );
    }
    v.push(
        FrameSpec {
            l4: L4Spec::Raw { proto: 47 },
            ..FrameSpec::udp(a, r, 0, 0, 20)
        }
        .build(),
    );
    v
}

/// Interesting offsets: EtherType, VLAN, IPv4 fields, L4 fields.
const HOT: &[usize] = &[
    12, 13, 14, 16, 17, 20, 21, 22, 23, 26, 29, 30, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 46,
    47, 50, 51, 54, 62, 63,
];

struct Gen {
    rng: XorShift64,
    seeds: Vec<Vec<u8>>,
    /// Recently emitted frames (e.g. NAT output), mirrored to make replies.
    echo: Vec<Vec<u8>>,
}

impl Gen {
    fn below(&mut self, n: usize) -> usize {
        (((self.rng.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    fn frame(&mut self) -> Vec<u8> {
        let choice = self.below(100);
        let mut f = if choice < 8 {
            // Pure noise, sometimes with an IPv4 EtherType.
            let len = self.below(200);
            let mut f: Vec<u8> = (0..len).map(|_| self.rng.next_u64() as u8).collect();
            if len > 14 && self.below(2) == 0 {
                f[12] = 0x08;
                f[13] = 0x00;
                f[14] = 0x45;
            }
            return f;
        } else if choice < 30 && !self.echo.is_empty() {
            let i = self.below(self.echo.len());
            mirror(&self.echo[i])
        } else {
            let i = self.below(self.seeds.len());
            self.seeds[i].clone()
        };
        // Randomise addresses/ports a little so flows vary.
        if f.len() >= 42 && self.below(2) == 0 {
            let o = 26 + self.below(4);
            f[o] = self.rng.next_u64() as u8;
            fix_ip_checksum(&mut f);
        }
        let muts = self.below(4);
        for _ in 0..muts {
            match self.below(5) {
                0 if !f.is_empty() => {
                    let o = self.below(f.len());
                    f[o] ^= 1 << self.below(8);
                }
                1 => {
                    let o = HOT[self.below(HOT.len())];
                    if o < f.len() {
                        f[o] = self.rng.next_u64() as u8;
                    }
                }
                2 => {
                    let n = self.below(f.len() + 1);
                    f.truncate(n);
                }
                3 => {
                    let n = self.below(64);
                    for _ in 0..n {
                        f.push(self.rng.next_u64() as u8);
                    }
                }
                _ => {
                    if f.len() > 30 {
                        // Plausible length fields.
                        let tl = (f.len() - 14) as u16;
                        let tl = tl.wrapping_add(self.below(5) as u16).wrapping_sub(2);
                        f[16..18].copy_from_slice(&tl.to_be_bytes());
                    }
                }
            }
        }
        f
    }
}

fn fix_ip_checksum(f: &mut [u8]) {
    if f.len() >= 34 && f[12] == 8 && f[13] == 0 && f[14] == 0x45 {
        f[24] = 0;
        f[25] = 0;
        let c = wire::checksum::ipv4_header_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
    }
}

/// Swaps addresses and ports of a parseable frame (a crude "reply").
fn mirror(f: &[u8]) -> Vec<u8> {
    let mut g = f.to_vec();
    if let Ok(p) = parse(f, f.len()) {
        let (l3, l4) = (p.l3, p.l4);
        let (s, d) = (g[l3 + 12..l3 + 16].to_vec(), g[l3 + 16..l3 + 20].to_vec());
        g[l3 + 12..l3 + 16].copy_from_slice(&d);
        g[l3 + 16..l3 + 20].copy_from_slice(&s);
        if matches!(p.proto, 6 | 17) && l4 + 4 <= g.len() {
            let (a, b) = (g[l4..l4 + 2].to_vec(), g[l4 + 2..l4 + 4].to_vec());
            g[l4..l4 + 2].copy_from_slice(&b);
            g[l4 + 2..l4 + 4].copy_from_slice(&a);
        }
        if p.proto == 1 && l4 < g.len() && g[l4] == 8 {
            g[l4] = 0;
        }
    }
    g
}

#[derive(Default, Debug)]
struct Tally {
    frames: u64,
    tx: u64,
    dropped_by_nf: u64,
    pre_dropped: u64,
}

/// Counts the verdict of a packet that was live when it reached `nf` (and keeps some forwarded
/// frames as echo material).
fn tally(t: &mut Tally, b: &Burst, i: usize, g: &mut Gen, keep_output: bool) {
    match b.verdict(i).action() {
        // Port 1 as set, or back to the inside port for a NAT's hairpinned packet.
        Action::Tx(_) => {
            t.tx += 1;
            if keep_output && g.below(4) == 0 {
                let fr = b.frame(i);
                if g.echo.len() < 256 {
                    g.echo.push(fr);
                } else {
                    let j = g.below(256);
                    g.echo[j] = fr;
                }
            }
        }
        Action::Drop(_) => t.dropped_by_nf += 1,
    }
}

/// Lets `nf` release the packets it holds (every one with `flush`) and counts them.
fn release(
    nf: &mut dyn NetworkFunction,
    ctx: &NfContext,
    flush: bool,
    t: &mut Tally,
    g: &mut Gen,
    keep_output: bool,
) {
    while nf.held() > 0 {
        let mut out = Burst::with_capacity(32);
        nf.release(&mut out, ctx, flush);
        if out.is_empty() {
            assert!(!flush, "a flush releases every held packet");
            break;
        }
        for i in 0..out.len() {
            t.frames += 1;
            tally(t, &out, i, g, keep_output);
        }
    }
}

/// Runs `n` frames through `nf` in `mode`; returns the verdict tally. Packets the NF holds back
/// (a NAT's fragments waiting for their first) are counted when it releases them; every packet
/// still held at the end is flushed.
fn drive(
    nf: &mut dyn NetworkFunction,
    mode: DatapathMode,
    split: usize,
    n: usize,
    g: &mut Gen,
    keep_output: bool,
) -> Tally {
    let f = PacketFactory::new(mode, split, 2048, 128);
    let mut t = Tally::default();
    let mut now = 0u64;
    let mut done = 0;
    let ctx = |now_ns| NfContext {
        now_ns,
        worker: 0,
        workers: 1,
    };
    while done < n {
        let mut b = Burst::with_capacity(32);
        let mut pre = Vec::with_capacity(32);
        let k = (1 + g.below(32)).min(n - done);
        for _ in 0..k {
            let fr = g.frame();
            if !f.push(&mut b, &fr) {
                continue;
            }
            let j = b.len() - 1;
            b.set_rx_port(j, g.below(2) as u16);
            let dropped = g.below(50) == 0;
            let v = if dropped {
                Verdict::drop(DropReason::POLICY)
            } else {
                Verdict::tx(1)
            };
            b.set_verdict(j, v);
            pre.push(dropped);
        }
        done += k;
        now += g.below(3_000_000_000) as u64;
        let handles = b.handles().to_vec();
        nf.process(&mut b, &ctx(now));
        // Follow each packet by its handle: a held packet has left the burst.
        let after: std::collections::HashMap<usize, usize> = b
            .handles()
            .iter()
            .enumerate()
            .map(|(i, &h)| (h, i))
            .collect();
        for (h, &was_dropped) in handles.iter().zip(&pre) {
            let Some(&i) = after.get(h) else {
                assert!(!was_dropped, "pre-dropped packet taken");
                continue;
            };
            t.frames += 1;
            if was_dropped {
                assert_eq!(
                    b.verdict(i),
                    Verdict::drop(DropReason::POLICY),
                    "pre-dropped packet touched"
                );
                t.pre_dropped += 1;
            } else {
                tally(&mut t, &b, i, g, keep_output);
            }
        }
        let flush = g.below(4) == 0;
        release(nf, &ctx(now), flush, &mut t, g, keep_output);
    }
    release(nf, &ctx(now), true, &mut t, g, keep_output);
    t
}

fn u(v: &dataplane::Counters, k: &str) -> u64 {
    v.count_at(k)
        .unwrap_or_else(|| panic!("missing counter {k}: {v}"))
}

fn gen_for(salt: u64) -> Gen {
    Gen {
        rng: XorShift64::new(seed() ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        seeds: seeds(),
        echo: vec![],
    }
}

#[test]
fn fuzz_smoke_nat() {
    let n = iters();
    for (mi, mode) in DatapathMode::ALL.into_iter().enumerate() {
        for (ci, cfg) in [
            "flows = 512\nport_min = 1024\nport_max = 1100\nfull_policy = \"evict\"",
            "flows = 32\nfull_policy = \"evict\"\ndecrement_ttl = true\nip_options = \"drop\"\nport_attempts = 4",
            "flows = 4096\ndirection = \"by-port\"\nverify_checksums = true",
        ]
        .iter()
        .enumerate()
        {
            let per = if ci == 0 { n } else { n / 8 };
            let mut g = gen_for(mi as u64 * 16 + ci as u64);
            let mut nat = Nat::from_params(&common::params(cfg), 0, 1).unwrap();
            // A longer split offset on one config so ICMP errors get translated.
            let split = if ci == 2 { 128 } else { 64 };
            let t = drive(&mut nat, mode, split, per, &mut g, true);
            let s = nat.counters();
            assert_eq!(u(&s, "packets") + u(&s, "skipped"), t.frames, "{mode} {s}");
            assert_eq!(u(&s, "skipped"), t.pre_dropped);
            assert_eq!(u(&s, "translations"), t.tx, "{mode}: every forwarded packet translated");
            assert_eq!(u(&s, "dropped"), t.dropped_by_nf, "{mode}");
            assert_eq!(u(&s, "packets"), u(&s, "translations") + u(&s, "dropped"));
            assert_eq!(
                u(&s, "translations"),
                u(&s, "inbound_translated") + u(&s, "outbound_translated")
            );
            assert_eq!(u(&s, "drops.no_mapping"), u(&s, "no_mapping"));
            assert_eq!(u(&s, "drops.port_exhausted"), u(&s, "port_exhausted"));
            assert!(u(&s, "active_mappings") <= 4096);
            if ci == 2 {
                // Every translated frame was re-verified; mutated inputs may carry bad
                // checksums, but frames built from valid seeds never mismatch more often
                // than they were mutated.
                assert_eq!(u(&s, "verify_slow_path"), t.tx);
            }
            assert!(t.tx > 0 && t.dropped_by_nf > 0, "{mode}: degenerate run {t:?}");
            eprintln!("nat[{ci}] {mode}: {t:?} new_mappings={} expired={} evicted={} icmp_err={}",
                u(&s, "new_mappings"), u(&s, "expired"), u(&s, "evicted"), u(&s, "icmp_errors_translated"));
        }
    }
}

#[test]
fn fuzz_smoke_lb() {
    let n = iters();
    for (mi, mode) in DatapathMode::ALL.into_iter().enumerate() {
        for (ci, cfg) in [
            "flows = 256\nidle_timeout_s = 5",
            "flows = 64\nmode = \"maglev\"\nmaglev_table_size = 251\nfull_policy = \"drop\"\nnon_vip = \"drop\"",
        ]
        .iter()
        .enumerate()
        {
            let per = if ci == 0 { n } else { n / 4 };
            let mut g = gen_for(100 + mi as u64 * 16 + ci as u64);
            // Aim most traffic at the VIP.
            for s in &mut g.seeds {
                if s.len() > 34 && s[12] == 8 && s[13] == 0 && s[14] == 0x45 {
                    s[30..34].copy_from_slice(&VIP.to_be_bytes());
                }
            }
            let mut lb = LoadBalancer::from_params(&common::params(cfg), 0, 1).unwrap();
            let t = drive(&mut lb, mode, 64, per, &mut g, false);
            let s = lb.counters();
            let backend: u64 = match &s["backend_packets"] {
                dataplane::CounterValue::Counts(v) => v.iter().sum(),
                other => panic!("backend_packets: {other:?}"),
            };
            assert_eq!(u(&s, "packets") + u(&s, "skipped"), t.frames);
            assert_eq!(u(&s, "dropped"), t.dropped_by_nf, "{mode}");
            let forwarded_non_vip = if ci == 0 { u(&s, "not_for_vip") } else { 0 };
            assert_eq!(backend + forwarded_non_vip, t.tx, "{mode} {s}");
            assert_eq!(u(&s, "packets"), backend + u(&s, "not_for_vip") + u(&s, "dropped") - if ci == 1 { u(&s, "not_for_vip") } else { 0 });
            assert!(backend > 0, "{mode}: no VIP traffic reached a backend");
            eprintln!("lb[{ci}] {mode}: {t:?} new_flows={} expired={}", u(&s, "new_flows"), u(&s, "expired"));
        }
    }
}

#[test]
fn fuzz_smoke_flow_counter() {
    let n = iters();
    for (mi, mode) in DatapathMode::ALL.into_iter().enumerate() {
        for (ci, cfg) in [
            "flows = 128\nfull_policy = \"evict\"\nidle_timeout_s = 4",
            "flows = 64",
            "flows = 64\nfull_policy = \"drop\"",
        ]
        .iter()
        .enumerate()
        {
            let per = if ci == 0 { n } else { n / 8 };
            let mut g = gen_for(200 + mi as u64 * 16 + ci as u64);
            let mut fc = FlowCounter::from_params(&common::params(cfg), 0, 1).unwrap();
            let t = drive(&mut fc, mode, 64, per, &mut g, false);
            let s = fc.counters();
            let live: u64 = fc.records().map(|(_, r)| r.packets).sum();
            assert_eq!(u(&s, "packets") + u(&s, "skipped"), t.frames);
            assert_eq!(
                u(&s, "packets"),
                live + u(&s, "expired_packets")
                    + u(&s, "evicted_packets")
                    + u(&s, "unparsed")
                    + u(&s, "table_full"),
                "{mode} {s}"
            );
            assert_eq!(u(&s, "dropped"), t.dropped_by_nf);
            assert_eq!(u(&s, "flows"), fc.records().count() as u64);
            eprintln!(
                "fc[{ci}] {mode}: {t:?} flows={} table_full={}",
                u(&s, "flows"),
                u(&s, "table_full")
            );
        }
    }
}

#[test]
fn fuzz_smoke_work_package() {
    let n = iters() / 4;
    for (mi, mode) in DatapathMode::ALL.into_iter().enumerate() {
        let mut g = gen_for(300 + mi as u64);
        let mut wp =
            WorkPackage::from_params(&common::params("reads = 3\nsize_mib = 1"), 0, 1).unwrap();
        let t = drive(&mut wp, mode, 64, n, &mut g, false);
        let s = wp.counters();
        assert_eq!(u(&s, "packets"), t.tx);
        assert_eq!(u(&s, "reads"), 3 * t.tx);
        assert_eq!(t.dropped_by_nf, 0);
    }
}
