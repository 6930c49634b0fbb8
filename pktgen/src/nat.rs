//! NAT-aware traffic: learn how a NAT translated each flow from the frames it forwards, and
//! build valid return traffic (outside -> inside) from what was learned, so bidirectional
//! stateful NAT throughput can be measured (CSIT cannot: endpoint-dependent mappings are
//! unpredictable, so it measures unidirectionally).
//!
//! How it works:
//!
//! 1. **Forward phase**: the generator sends inside -> outside traffic; the NAT rewrites each
//!    flow's source to an outside address and port. A [`LearningSink`] at the outside port
//!    checks the frames as usual and, for each one, records the translated source of its flow
//!    (the flow id travels in the signature, so no 5-tuple lookup is needed): one 8-byte slot
//!    per flow, preallocated; a frame costs a store.
//! 2. **Return phase**: a [`ReverseGenerator`] sends, for every learned flow, a frame from the
//!    flow's original destination (the server) to its learned outside address and port, with a
//!    signature of its own stream; the NAT must translate it back to the flow's inside source.
//! 3. At the inside port, [`check_reverse`] verifies that the translated-back destination is the
//!    flow's original inside address and port ([`ReverseChecker`] counts the mismatches), on top
//!    of the usual loss/duplicate/reorder accounting of the checking sink.
//!
//! A mapping that changes while traffic runs (port reuse, expiry) is counted in
//! [`NatLearner::remapped`]; the latest mapping wins.

use crate::generator::{FCS_LEN, GeneratorConfig};
use crate::signature::{
    ETH_HLEN, ETHERTYPE_IPV4, IPV4_HLEN, PATTERN, PATTERN_PERIOD, SIGNATURE_LEN, Signature,
    fold_checksum, parse, sum_words,
};
use crate::sink::CheckingSink;
use dataplane::wire::{FrameSink, FrameSource};
use std::net::Ipv4Addr;

const VALID: u64 = 1 << 63;

/// The translated source address and port of every flow, learned from forwarded frames.
#[derive(Debug, Clone)]
pub struct NatLearner {
    slots: Box<[u64]>,
    learned: u64,
    remapped: u64,
    foreign: u64,
}

impl NatLearner {
    /// A learner for flows `0..flows`.
    pub fn new(flows: u32) -> Self {
        Self {
            slots: vec![0u64; flows.max(1) as usize].into_boxed_slice(),
            learned: 0,
            remapped: 0,
            foreign: 0,
        }
    }

    /// Records the source of a forwarded frame as its flow's mapping; returns the flow.
    #[inline]
    pub fn observe(&mut self, frame: &[u8]) -> Option<u32> {
        let Some((sig, loc)) = parse(frame) else {
            self.foreign += 1;
            return None;
        };
        let Some(slot) = self.slots.get_mut(sig.flow as usize) else {
            self.foreign += 1;
            return None;
        };
        let ip = u32::from_be_bytes(
            frame[loc.l3_offset + 12..loc.l3_offset + 16]
                .try_into()
                .ok()?,
        );
        let port = u16::from_be_bytes([frame[loc.l4_offset], frame[loc.l4_offset + 1]]);
        let v = VALID | u64::from(ip) << 16 | u64::from(port);
        if *slot & VALID == 0 {
            self.learned += 1;
        } else if *slot != v {
            self.remapped += 1;
        }
        *slot = v;
        Some(sig.flow)
    }

    /// The learned outside address and port of `flow`.
    pub fn mapping(&self, flow: u32) -> Option<(Ipv4Addr, u16)> {
        let v = *self.slots.get(flow as usize)?;
        (v & VALID != 0).then(|| (Ipv4Addr::from((v >> 16) as u32), v as u16))
    }

    /// Flows with a mapping.
    pub fn learned(&self) -> u64 {
        self.learned
    }

    /// Times a flow's mapping changed.
    pub fn remapped(&self) -> u64 {
        self.remapped
    }

    /// Frames that were not ours or had a flow id out of range.
    pub fn foreign(&self) -> u64 {
        self.foreign
    }
}

/// A checking sink that also learns NAT mappings (the outside port's sink in the forward phase).
#[derive(Debug)]
pub struct LearningSink {
    /// The checks.
    pub sink: CheckingSink,
    /// What was learned.
    pub learner: NatLearner,
}

impl LearningSink {
    /// A sink for traffic from a generator with `cfg`.
    pub fn for_generator(cfg: &GeneratorConfig) -> Self {
        Self {
            sink: CheckingSink::for_generator(cfg),
            learner: NatLearner::new(cfg.flows),
        }
    }
}

impl FrameSink for LearningSink {
    #[inline]
    fn deliver(&mut self, frame: &[u8]) {
        self.sink.check(frame);
        self.learner.observe(frame);
    }

    fn finish(&mut self) {
        self.sink.finish();
    }
}

/// Return traffic for the learned flows: from each flow's server (its forward destination) to
/// its outside mapping, UDP, with signatures of stream `stream` and sequence numbers from 0.
#[derive(Debug)]
pub struct ReverseGenerator {
    fwd: GeneratorConfig,
    learner: NatLearner,
    stream: u16,
    frame_size: u32,
    next_flow: u32,
    seq: u64,
    limit: u64,
}

impl ReverseGenerator {
    /// Return traffic of `count` frames of `frame_size` (FCS included) for the flows of a
    /// forward generator `fwd`, using `learner`'s mappings; flows without one are skipped.
    pub fn new(
        fwd: &GeneratorConfig,
        learner: NatLearner,
        stream: u16,
        frame_size: u32,
        count: u64,
    ) -> Self {
        Self {
            fwd: fwd.clone(),
            learner,
            stream,
            frame_size: frame_size.max(64),
            next_flow: 0,
            seq: 0,
            limit: count,
        }
    }

    /// Frames generated so far.
    pub fn sent(&self) -> u64 {
        self.seq
    }

    /// The learner (e.g. to read its counters).
    pub fn learner(&self) -> &NatLearner {
        &self.learner
    }
}

impl FrameSource for ReverseGenerator {
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.seq >= self.limit || self.learner.learned == 0 {
            return None;
        }
        let n = self.learner.slots.len() as u32;
        // Next flow with a mapping (at least one exists).
        let (flow, (out_ip, out_port)) = loop {
            let f = self.next_flow;
            self.next_flow = if f + 1 == n { 0 } else { f + 1 };
            if let Some(m) = self.learner.mapping(f) {
                break (f, m);
            }
        };
        let t = self.fwd.flow_tuple(flow);
        let len = (self.frame_size - FCS_LEN) as usize;
        let f = buf.get_mut(..len)?;
        let l3 = ETH_HLEN;
        let l4 = l3 + IPV4_HLEN;
        f[..l4 + 8].fill(0);
        f[0..6].copy_from_slice(&self.fwd.src_mac.0);
        f[6..12].copy_from_slice(&self.fwd.dst_mac.0);
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[l3] = 0x45;
        f[l3 + 2..l3 + 4].copy_from_slice(&((len - l3) as u16).to_be_bytes());
        f[l3 + 6] = 0x40;
        f[l3 + 8] = 64;
        f[l3 + 9] = crate::signature::IPPROTO_UDP;
        f[l3 + 12..l3 + 16].copy_from_slice(&t.dst_ip.octets());
        f[l3 + 16..l3 + 20].copy_from_slice(&out_ip.octets());
        let c = fold_checksum(sum_words(&f[l3..l4]));
        f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        f[l4..l4 + 2].copy_from_slice(&t.dst_port.to_be_bytes());
        f[l4 + 2..l4 + 4].copy_from_slice(&out_port.to_be_bytes());
        f[l4 + 4..l4 + 6].copy_from_slice(&((len - l4) as u16).to_be_bytes());
        let sig = Signature {
            stream: self.stream,
            flow,
            seq: self.seq,
            ts: None,
        };
        let body = l4 + 8 + SIGNATURE_LEN;
        f[l4 + 8..body].copy_from_slice(&sig.encode());
        let off = (self.seq % PATTERN_PERIOD) as usize;
        f[body..].copy_from_slice(&PATTERN[off..off + (len - body)]);
        self.seq += 1;
        Some(len)
    }

    fn exhausted(&self) -> bool {
        self.seq >= self.limit || self.learner.learned == 0
    }
}

/// True if a return frame, after the NAT translated it back, is addressed to its flow's original
/// inside source (address and port) under the forward configuration `fwd`.
pub fn check_reverse(frame: &[u8], fwd: &GeneratorConfig) -> Option<bool> {
    let (sig, loc) = parse(frame)?;
    let t = fwd.flow_tuple(sig.flow);
    let dst = Ipv4Addr::from(u32::from_be_bytes(
        frame[loc.l3_offset + 16..loc.l3_offset + 20]
            .try_into()
            .ok()?,
    ));
    let port = u16::from_be_bytes([frame[loc.l4_offset + 2], frame[loc.l4_offset + 3]]);
    Some(dst == t.src_ip && port == t.src_port)
}

/// The inside port's sink in the return phase: the usual checks plus the translation check.
#[derive(Debug)]
pub struct ReverseChecker {
    /// The checks.
    pub sink: CheckingSink,
    fwd: GeneratorConfig,
    /// Return frames addressed to the right inside host and port.
    pub translated_ok: u64,
    /// Return frames addressed elsewhere (a wrong reverse translation).
    pub translated_wrong: u64,
}

impl ReverseChecker {
    /// A checker for return traffic of a forward generator `fwd`.
    pub fn new(fwd: &GeneratorConfig) -> Self {
        Self {
            sink: CheckingSink::new(None),
            fwd: fwd.clone(),
            translated_ok: 0,
            translated_wrong: 0,
        }
    }
}

impl FrameSink for ReverseChecker {
    fn deliver(&mut self, frame: &[u8]) {
        self.sink.check(frame);
        match check_reverse(frame, &self.fwd) {
            Some(true) => self.translated_ok += 1,
            Some(false) => self.translated_wrong += 1,
            None => {}
        }
    }

    fn finish(&mut self) {
        self.sink.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::Generator;
    use dataplane::wire::MAX_WIRE_FRAME;
    use std::collections::HashMap;

    /// A toy source NAT: inside (ip, port) -> 10.0.0.1:(1024 + n), n in order of first sight;
    /// fixes the IPv4 checksum (UDP checksum 0 stays "none").
    #[derive(Default)]
    struct ToyNat {
        out: HashMap<(u32, u16), u16>,
        back: HashMap<u16, (u32, u16)>,
    }

    impl ToyNat {
        fn forward(&mut self, f: &mut [u8]) {
            let ip = u32::from_be_bytes(f[26..30].try_into().unwrap());
            let port = u16::from_be_bytes([f[34], f[35]]);
            let n = self.out.len() as u16;
            let p = *self.out.entry((ip, port)).or_insert(1024 + n);
            self.back.insert(p, (ip, port));
            f[26..30].copy_from_slice(&[10, 0, 0, 1]);
            f[34..36].copy_from_slice(&p.to_be_bytes());
            fix_ip(f);
        }
        fn reverse(&self, f: &mut [u8], corrupt: bool) {
            let p = u16::from_be_bytes([f[36], f[37]]);
            let (ip, port) = self.back[&p];
            f[30..34].copy_from_slice(&ip.to_be_bytes());
            let port = if corrupt { port.wrapping_add(1) } else { port };
            f[36..38].copy_from_slice(&port.to_be_bytes());
            fix_ip(f);
        }
    }

    fn fix_ip(f: &mut [u8]) {
        f[24..26].fill(0);
        let c = fold_checksum(sum_words(&f[14..34]));
        f[24..26].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn learns_mappings_and_builds_valid_return_traffic() {
        let fwd = GeneratorConfig {
            frame_size: 128,
            flows: 50,
            src_port: 5000,
            src_port_count: 7,
            count: Some(200),
            ..Default::default()
        };
        let mut nat = ToyNat::default();
        let mut g = Generator::new(fwd.clone()).unwrap();
        let mut outside = LearningSink::for_generator(&fwd);
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        while let Some(n) = g.next_frame(&mut buf) {
            nat.forward(&mut buf[..n]);
            outside.deliver(&buf[..n]);
        }
        outside.finish();
        let l = &outside.learner;
        assert_eq!((l.learned(), l.remapped(), l.foreign()), (50, 0, 0));
        // Every flow's mapping is what the NAT chose for its inside tuple.
        for flow in 0..50 {
            let t = fwd.flow_tuple(flow);
            let p = nat.out[&(u32::from(t.src_ip), t.src_port)];
            assert_eq!(l.mapping(flow), Some((Ipv4Addr::new(10, 0, 0, 1), p)));
        }
        assert!(outside.sink.counters().stream(0).unique == 200);

        // Return phase: 120 frames, translated back by the NAT.
        let learner = outside.learner.clone();
        let mut rev = ReverseGenerator::new(&fwd, learner.clone(), 9, 100, 120);
        let mut inside = ReverseChecker::new(&fwd);
        while let Some(n) = rev.next_frame(&mut buf) {
            assert_eq!(n, 96);
            assert_eq!(
                fold_checksum(sum_words(&buf[14..34])),
                0,
                "valid IPv4 checksum"
            );
            // Addressed to the NAT's outside address.
            assert_eq!(buf[30..34], [10, 0, 0, 1]);
            nat.reverse(&mut buf[..n], false);
            inside.deliver(&buf[..n]);
        }
        inside.finish();
        assert!(rev.exhausted());
        assert_eq!((inside.translated_ok, inside.translated_wrong), (120, 0));
        let s = inside.sink.counters().stream(9);
        assert_eq!((s.unique, s.payload_mismatches, s.duplicates), (120, 0, 0));

        // A NAT that translates back to the wrong port is caught.
        let mut rev = ReverseGenerator::new(&fwd, learner, 9, 64, 30);
        let mut inside = ReverseChecker::new(&fwd);
        while let Some(n) = rev.next_frame(&mut buf) {
            nat.reverse(&mut buf[..n], true);
            inside.deliver(&buf[..n]);
        }
        assert_eq!((inside.translated_ok, inside.translated_wrong), (0, 30));
    }

    #[test]
    fn remapping_and_foreign_frames_are_counted() {
        let fwd = GeneratorConfig {
            flows: 4,
            count: Some(8),
            ..Default::default()
        };
        let mut g = Generator::new(fwd.clone()).unwrap();
        let mut l = NatLearner::new(4);
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        let mut i = 0u16;
        while let Some(n) = g.next_frame(&mut buf) {
            buf[34..36].copy_from_slice(&(2000 + i).to_be_bytes());
            i += 1;
            l.observe(&buf[..n]);
        }
        assert_eq!((l.learned(), l.remapped()), (4, 4));
        assert_eq!(l.mapping(0).unwrap().1, 2004);
        assert_eq!(l.observe(&[0u8; 60]), None);
        assert_eq!(l.foreign(), 1);
        // No mapping yet: no return traffic.
        let mut rev = ReverseGenerator::new(&fwd, NatLearner::new(4), 1, 64, 10);
        assert!(rev.exhausted());
        assert_eq!(rev.next_frame(&mut buf), None);
    }
}
