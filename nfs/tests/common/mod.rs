//! Helpers shared by the integration tests: run frames through a network function in a given
//! datapath mode and collect the resulting frames and verdicts.
#![allow(dead_code)]

use dataplane::testkit::PacketFactory;
use dataplane::{Burst, DatapathMode, DropReason, NetworkFunction, NfContext, Verdict};

/// 1 s in ns.
pub const SEC: u64 = 1_000_000_000;

/// A context for worker 0 of 1 at time `now_ns`.
pub fn ctx(now_ns: u64) -> NfContext {
    NfContext {
        now_ns,
        worker: 0,
        workers: 1,
    }
}

/// A factory for `mode` with the default 64 B split offset.
pub fn factory(mode: DatapathMode) -> PacketFactory {
    PacketFactory::new(mode, 64, 2048, 256)
}

/// Runs `frames` as one burst (chunks of 32) through `nf` and returns `(frame after, verdict)`
/// per input frame. Packets arrive on rx port `rx_port` with initial verdict `Tx(1)`.
pub fn run(
    nf: &mut dyn NetworkFunction,
    f: &PacketFactory,
    frames: &[Vec<u8>],
    now_ns: u64,
    rx_port: u16,
) -> Vec<(Vec<u8>, Verdict)> {
    let mut out = Vec::new();
    for chunk in frames.chunks(32) {
        let mut b = Burst::with_capacity(32);
        for (i, fr) in chunk.iter().enumerate() {
            assert!(f.push(&mut b, fr), "factory packet");
            b.set_rx_port(i, rx_port);
            b.set_verdict(i, Verdict::tx(1));
        }
        nf.process(&mut b, &ctx(now_ns));
        for i in 0..b.len() {
            out.push((b.frame(i), b.verdict(i)));
        }
    }
    out
}

/// Runs one frame.
pub fn run1(
    nf: &mut dyn NetworkFunction,
    f: &PacketFactory,
    frame: &[u8],
    now_ns: u64,
) -> (Vec<u8>, Verdict) {
    run(nf, f, &[frame.to_vec()], now_ns, 0).remove(0)
}

/// Parses a TOML snippet into a parameter table.
pub fn params(s: &str) -> toml::Table {
    toml::from_str(s).expect("test params")
}

/// Dotted-quad to u32.
pub fn ip(s: &str) -> u32 {
    u32::from(s.parse::<std::net::Ipv4Addr>().unwrap())
}

/// The drop reason registered as `name` (by a network function built earlier in the test).
pub fn reason(name: &str) -> DropReason {
    DropReason::by_name(name).unwrap_or_else(|| panic!("drop reason `{name}` not registered"))
}

/// Runs `frames` (one burst of at most 32) through `nf` and follows each packet by its handle:
/// `Some((frame, verdict))`, or `None` for a packet the function took out of the burst to hold.
pub fn run_held(
    nf: &mut dyn NetworkFunction,
    f: &PacketFactory,
    frames: &[Vec<u8>],
    now_ns: u64,
    rx_port: u16,
) -> Vec<Option<(Vec<u8>, Verdict)>> {
    assert!(frames.len() <= 32);
    let mut b = Burst::with_capacity(32);
    for (i, fr) in frames.iter().enumerate() {
        assert!(f.push(&mut b, fr), "factory packet");
        b.set_rx_port(i, rx_port);
        b.set_verdict(i, Verdict::tx(1));
    }
    let handles = b.handles().to_vec();
    nf.process(&mut b, &ctx(now_ns));
    handles
        .iter()
        .map(|h| {
            let i = b.handles().iter().position(|x| x == h)?;
            Some((b.frame(i), b.verdict(i)))
        })
        .collect()
}

/// Lets `nf` release what it holds (everything with `flush`): `(frame, verdict)` per packet.
pub fn release(nf: &mut dyn NetworkFunction, now_ns: u64, flush: bool) -> Vec<(Vec<u8>, Verdict)> {
    let mut out = Vec::new();
    while nf.held() > 0 {
        let mut b = Burst::with_capacity(32);
        nf.release(&mut b, &ctx(now_ns), flush);
        if b.is_empty() {
            break;
        }
        out.extend((0..b.len()).map(|i| (b.frame(i), b.verdict(i))));
    }
    out
}

/// Reassembles IPv4 fragments (untagged Ethernet, any order) into one frame: the first
/// fragment's headers with the datagram's total length and no fragment bits.
pub fn reassemble(frags: &[Vec<u8>]) -> Vec<u8> {
    let ihl = |f: &[u8]| usize::from(f[14] & 0x0F) * 4;
    let off = |f: &[u8]| usize::from(u16::from_be_bytes([f[20], f[21]]) & 0x1FFF) * 8;
    let mut v: Vec<&Vec<u8>> = frags.iter().collect();
    v.sort_by_key(|f| off(f));
    let first = v[0];
    let mut out = first[..14 + ihl(first)].to_vec();
    for f in &v {
        assert_eq!(
            off(f),
            out.len() - 14 - ihl(first),
            "fragments leave no gap"
        );
        let end = 14 + usize::from(u16::from_be_bytes([f[16], f[17]]));
        out.extend_from_slice(&f[14 + ihl(f)..end]);
    }
    let total = (out.len() - 14) as u16;
    out[16..18].copy_from_slice(&total.to_be_bytes());
    out[20..22].copy_from_slice(&[0, 0]);
    out[24..26].copy_from_slice(&[0, 0]);
    let c = wire::checksum::ipv4_header_checksum(&out[14..14 + ihl(first)]);
    out[24..26].copy_from_slice(&c.to_be_bytes());
    out
}
