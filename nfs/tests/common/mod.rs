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
