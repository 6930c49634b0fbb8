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
//!
//! ## Both directions on one wire ([`nat_bidir`])
//!
//! When inside and outside share one port (the virtual NIC of `dataplane run`, where the NAT
//! tells the directions apart by the destination address), the phases run at once:
//!
//! * [`NatReturnSource`] is the wire's source. It sends the forward generator's frames and,
//!   after each one, `ratio` return frames' worth of credit; a return frame due answers the flow
//!   of the latest forward frame: from that flow's server to the flow's learned outside address
//!   and port, with a signature of the return stream. If that flow's mapping has not been
//!   learned yet, no return frame is sent (counted in [`NatCounters::return_unlearned`]) and the
//!   slot carries the next forward frame instead, so the wire carries exactly `count` frames of
//!   both directions and the offered load is what was asked for.
//! * [`NatSplitSink`] is the wire's sink. It tells the directions apart by the signature's
//!   stream id (robust against any rewrite): forward frames go to the forward checking sink and,
//!   if they left with the NAT's address as source, teach the mapping; forward frames with any
//!   other source count as [`NatCounters::forward_translated_wrong`] and teach nothing. Return
//!   frames go to a [`ReverseChecker`] (own stream: exact loss, duplicates and reordering) that
//!   verifies they reached the flow's original inside address and port.
//! * The two share the [`MappingTable`]: one relaxed atomic 8-byte slot per flow, written by the
//!   sink and read by the source, so no lock is taken per frame. On the virtual NIC both ends
//!   are called by the same thread (the queue's worker on a one-queue port, the port's front
//!   end on a multi-queue port), so the atomics cost what plain loads and stores cost; on a
//!   one-queue port in virtual time the order of those calls is fixed by the simulation, so the
//!   return frame sequence is deterministic.

use crate::generator::{ConfigError, FCS_LEN, GenCounters, Generator, GeneratorConfig};
use crate::signature::{
    L4Proto, Located, PATTERN, PATTERN_PERIOD, SIGNATURE_LEN, Signature, parse,
};
use crate::sink::{CheckingSink, SinkCounters, TrafficReport, report};
use dataplane::link::{FrameSink, FrameSource};
use serde::Serialize;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use wire::checksum::{finish, ones_sum};
use wire::ethernet::{ETH_HLEN, ETHERTYPE_IPV4};
use wire::ipv4::{IPV4_HLEN, PROTO_UDP};

const VALID: u64 = 1 << 63;

/// Largest flow count mappings are learned for (8 bytes per flow, preallocated: 256 MiB).
pub const MAX_LEARNED_FLOWS: u32 = 1 << 25;

/// The learned outside address and port of every flow: one slot per flow, shared between the
/// sink that learns (writes) and the source that builds return traffic (reads). Slots are
/// relaxed atomics, so sharing needs no lock and costs a plain load or store per frame.
#[derive(Debug)]
pub struct MappingTable {
    slots: Box<[AtomicU64]>,
}

impl MappingTable {
    /// An empty table for flows `0..flows` (at least one slot).
    pub fn new(flows: u32) -> Self {
        Self {
            slots: (0..flows.max(1)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Number of flows the table holds.
    pub fn flows(&self) -> u32 {
        self.slots.len() as u32
    }

    /// The learned outside address and port of `flow`, if any.
    #[inline]
    pub fn get(&self, flow: u32) -> Option<(Ipv4Addr, u16)> {
        let v = self.raw(flow);
        (v & VALID != 0).then(|| (Ipv4Addr::from((v >> 16) as u32), v as u16))
    }

    #[inline]
    fn raw(&self, flow: u32) -> u64 {
        self.slots
            .get(flow as usize)
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }
}

/// The translated source address and port of every flow, learned from forwarded frames.
///
/// Cloning copies the mappings learned so far into a new table (the clone learns on its own);
/// [`NatLearner::table`] shares the table instead.
#[derive(Debug)]
pub struct NatLearner {
    table: Arc<MappingTable>,
    learned: u64,
    remapped: u64,
    foreign: u64,
}

impl Clone for NatLearner {
    fn clone(&self) -> Self {
        let table = MappingTable::new(self.table.flows());
        for (d, s) in table.slots.iter().zip(self.table.slots.iter()) {
            d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        Self {
            table: Arc::new(table),
            learned: self.learned,
            remapped: self.remapped,
            foreign: self.foreign,
        }
    }
}

impl NatLearner {
    /// A learner for flows `0..flows`.
    pub fn new(flows: u32) -> Self {
        Self::with_table(Arc::new(MappingTable::new(flows)))
    }

    /// A learner writing into `table` (shared with whoever reads the mappings).
    pub fn with_table(table: Arc<MappingTable>) -> Self {
        Self {
            table,
            learned: 0,
            remapped: 0,
            foreign: 0,
        }
    }

    /// The table the learner writes, shared.
    pub fn table(&self) -> Arc<MappingTable> {
        self.table.clone()
    }

    /// Records the source of a forwarded frame as its flow's mapping; returns the flow.
    #[inline]
    pub fn observe(&mut self, frame: &[u8]) -> Option<u32> {
        let Some((sig, loc)) = parse(frame) else {
            self.foreign += 1;
            return None;
        };
        let (ip, port) = source_of(frame, &loc);
        self.learn(sig.flow, ip, port).then_some(sig.flow)
    }

    /// Records `ip:port` as `flow`'s outside mapping; false (counted as foreign) if the flow is
    /// out of range.
    #[inline]
    pub fn learn(&mut self, flow: u32, ip: u32, port: u16) -> bool {
        let Some(slot) = self.table.slots.get(flow as usize) else {
            self.foreign += 1;
            return false;
        };
        let v = VALID | u64::from(ip) << 16 | u64::from(port);
        let old = slot.load(Ordering::Relaxed);
        if old == v {
            return true;
        }
        if old & VALID == 0 {
            self.learned += 1;
        } else {
            self.remapped += 1;
        }
        slot.store(v, Ordering::Relaxed);
        true
    }

    /// The learned outside address and port of `flow`.
    pub fn mapping(&self, flow: u32) -> Option<(Ipv4Addr, u16)> {
        self.table.get(flow)
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

/// Source address and port of a located frame.
#[inline]
fn source_of(frame: &[u8], loc: &Located) -> (u32, u16) {
    let a = loc.l3_offset + 12;
    let ip = u32::from_be_bytes([frame[a], frame[a + 1], frame[a + 2], frame[a + 3]]);
    let port = u16::from_be_bytes([frame[loc.l4_offset], frame[loc.l4_offset + 1]]);
    (ip, port)
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

/// Writes a return frame of `f.len()` bytes for `flow` of the forward traffic `fwd`: UDP from
/// the flow's server (its forward destination) to `out` (the flow's outside mapping), MACs
/// swapped, valid IPv4 checksum, UDP checksum 0 ("none"), signature `sig`, then the pattern.
/// `f` must hold at least the headers and the signature (58 bytes).
#[inline]
fn write_return_frame(
    f: &mut [u8],
    fwd: &GeneratorConfig,
    flow: u32,
    out: (Ipv4Addr, u16),
    sig: &Signature,
) {
    let len = f.len();
    let t = fwd.flow_tuple(flow);
    let l3 = ETH_HLEN;
    let l4 = l3 + IPV4_HLEN;
    f[..l4 + 8].fill(0);
    f[0..6].copy_from_slice(&fwd.src_mac.0);
    f[6..12].copy_from_slice(&fwd.dst_mac.0);
    f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    f[l3] = 0x45;
    f[l3 + 2..l3 + 4].copy_from_slice(&((len - l3) as u16).to_be_bytes());
    f[l3 + 6] = 0x40;
    f[l3 + 8] = 64;
    f[l3 + 9] = PROTO_UDP;
    f[l3 + 12..l3 + 16].copy_from_slice(&t.dst_ip.octets());
    f[l3 + 16..l3 + 20].copy_from_slice(&out.0.octets());
    let c = finish(ones_sum(&f[l3..l4], 0));
    f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    f[l4..l4 + 2].copy_from_slice(&t.dst_port.to_be_bytes());
    f[l4 + 2..l4 + 4].copy_from_slice(&out.1.to_be_bytes());
    f[l4 + 4..l4 + 6].copy_from_slice(&((len - l4) as u16).to_be_bytes());
    let body = l4 + 8 + SIGNATURE_LEN;
    f[l4 + 8..body].copy_from_slice(&sig.encode());
    let off = (sig.seq % PATTERN_PERIOD) as usize;
    f[body..].copy_from_slice(&PATTERN[off..off + (len - body)]);
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
        let n = self.learner.table.flows();
        // Next flow with a mapping (at least one exists).
        let (flow, out) = loop {
            let f = self.next_flow;
            self.next_flow = if f + 1 == n { 0 } else { f + 1 };
            if let Some(m) = self.learner.mapping(f) {
                break (f, m);
            }
        };
        let len = (self.frame_size - FCS_LEN) as usize;
        let sig = Signature {
            stream: self.stream,
            flow,
            seq: self.seq,
            ts: None,
        };
        write_return_frame(buf.get_mut(..len)?, &self.fwd, flow, out, &sig);
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
    Some(reverse_ok(frame, &sig, &loc, fwd))
}

/// [`check_reverse`] on a frame already parsed.
#[inline]
fn reverse_ok(frame: &[u8], sig: &Signature, loc: &Located, fwd: &GeneratorConfig) -> bool {
    let t = fwd.flow_tuple(sig.flow);
    let a = loc.l3_offset + 16;
    let dst = Ipv4Addr::from(u32::from_be_bytes([
        frame[a],
        frame[a + 1],
        frame[a + 2],
        frame[a + 3],
    ]));
    let port = u16::from_be_bytes([frame[loc.l4_offset + 2], frame[loc.l4_offset + 3]]);
    dst == t.src_ip && port == t.src_port
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

    /// Checks a return frame whose signature the caller already found.
    #[inline]
    fn check_parsed(&mut self, frame: &[u8], sig: &Signature, loc: &Located) {
        self.sink.check(frame);
        if reverse_ok(frame, sig, loc, &self.fwd) {
            self.translated_ok += 1;
        } else {
            self.translated_wrong += 1;
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

/// Settings of NAT-aware return traffic on one wire ([`nat_bidir`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NatReturnConfig {
    /// Return frames per forward frame (0 < ratio <= [`MAX_RETURN_RATIO`]); 1 = as many return
    /// frames as forward frames once every flow is learned.
    pub ratio: f64,
    /// The NAT's outside address: a forward frame that leaves with this source address was
    /// translated, and teaches its flow's mapping.
    pub nat_ip: Ipv4Addr,
}

/// Largest [`NatReturnConfig::ratio`].
pub const MAX_RETURN_RATIO: f64 = 64.0;

/// Return credit is kept in units of 1/65536 frame (integer arithmetic: the same schedule on
/// every machine).
const CREDIT_ONE: u64 = 1 << 16;

/// The return stream id for forward traffic on stream `fwd`: the next id, never the warm-up
/// stream of trials.
pub fn return_stream(fwd: u16) -> u16 {
    (fwd + 1) % crate::trial::WARMUP_STREAM
}

/// Counters of NAT-aware traffic beyond the two streams' own ([`NatBidirHandles`]). The source
/// stores `return_unlearned` as it goes; the sink publishes the rest in `finish()` (and on drop).
#[derive(Debug, Default)]
pub struct NatCounters {
    /// Forward frames that reached the sink with a source other than the NAT address.
    pub forward_translated_wrong: AtomicU64,
    /// Flows whose mapping was learned.
    pub learned: AtomicU64,
    /// Times a learned mapping changed.
    pub remapped: AtomicU64,
    /// Return frames that reached the flow's original inside address and port.
    pub return_translated_ok: AtomicU64,
    /// Return frames addressed anywhere else.
    pub return_translated_wrong: AtomicU64,
    /// Return frames due but not sent because their flow's mapping was not learned yet.
    pub return_unlearned: AtomicU64,
}

/// The wire's source for NAT-aware traffic on one port: forward frames interleaved with return
/// frames for learned flows (see the module docs).
pub struct NatReturnSource {
    fwd: Generator,
    fwd_cfg: GeneratorConfig,
    /// Offset of the signature in forward frames (the flow id is 4 bytes in).
    sig_at: usize,
    table: Arc<MappingTable>,
    stream: u16,
    /// Return frames per forward frame, in [`CREDIT_ONE`] units.
    ratio: u64,
    credit: u64,
    /// Flow and length of the latest forward frame.
    last: (u32, usize),
    seq: u64,
    bytes: u64,
    unlearned: u64,
    sent: u64,
    limit: u64,
    ret_counters: Arc<GenCounters>,
    nat: Arc<NatCounters>,
}

impl std::fmt::Debug for NatReturnSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatReturnSource")
            .field("sent", &self.sent)
            .field("return_sent", &self.seq)
            .field("unlearned", &self.unlearned)
            .finish_non_exhaustive()
    }
}

impl NatReturnSource {
    /// Uses `flag` as the forward generator's stop flag (ends both directions).
    pub fn with_stop_flag(mut self, flag: Arc<AtomicBool>) -> Self {
        self.fwd = self.fwd.with_stop_flag(flag);
        self
    }

    /// The forward generator's counters (forward frames only).
    pub fn forward_counters(&self) -> Arc<GenCounters> {
        self.fwd.counters()
    }

    /// Frames of both directions sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Return frames sent so far.
    pub fn return_sent(&self) -> u64 {
        self.seq
    }

    /// Return frames due but not sent because their flow had no mapping yet.
    pub fn unlearned(&self) -> u64 {
        self.unlearned
    }

    /// Writes the return frame answering the latest forward frame, if its flow is learned.
    #[inline]
    fn return_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        let (flow, len) = self.last;
        let Some(out) = self.table.get(flow) else {
            // Every return frame still due answers the same (unlearned) flow.
            self.unlearned += self.credit / CREDIT_ONE;
            self.credit %= CREDIT_ONE;
            self.nat
                .return_unlearned
                .store(self.unlearned, Ordering::Relaxed);
            return None;
        };
        let f = buf.get_mut(..len)?;
        let sig = Signature {
            stream: self.stream,
            flow,
            seq: self.seq,
            ts: None,
        };
        write_return_frame(f, &self.fwd_cfg, flow, out, &sig);
        self.credit -= CREDIT_ONE;
        self.seq += 1;
        self.bytes += len as u64;
        self.ret_counters.set(self.seq, self.bytes);
        Some(len)
    }
}

impl FrameSource for NatReturnSource {
    #[inline]
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.sent >= self.limit || self.fwd.done() {
            return None;
        }
        if self.credit >= CREDIT_ONE
            && let Some(n) = self.return_frame(buf)
        {
            self.sent += 1;
            return Some(n);
        }
        let n = self.fwd.next_frame(buf)?;
        let flow = buf
            .get(self.sig_at + 4..self.sig_at + 8)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        self.last = (flow, n);
        self.credit += self.ratio;
        self.sent += 1;
        Some(n)
    }

    fn exhausted(&self) -> bool {
        self.sent >= self.limit || self.fwd.done()
    }
}

/// The wire's sink for NAT-aware traffic on one port: splits forward from return frames, learns
/// mappings from translated forward frames, checks return frames' reverse translation (see the
/// module docs).
#[derive(Debug)]
pub struct NatSplitSink {
    fwd: CheckingSink,
    learner: NatLearner,
    ret: ReverseChecker,
    nat_ip: u32,
    fwd_stream: u16,
    ret_stream: u16,
    fwd_wrong: u64,
    nat: Arc<NatCounters>,
}

impl NatSplitSink {
    /// The forward checking sink.
    pub fn forward(&self) -> &CheckingSink {
        &self.fwd
    }

    /// The learner (its table is the one the source reads).
    pub fn learner(&self) -> &NatLearner {
        &self.learner
    }

    /// The return checker.
    pub fn reverse(&self) -> &ReverseChecker {
        &self.ret
    }

    /// Forward frames that left with a source other than the NAT address.
    pub fn forward_translated_wrong(&self) -> u64 {
        self.fwd_wrong
    }

    /// Publishes the NAT counters (done by `finish()` and on drop).
    pub fn publish(&self) {
        let st = |a: &AtomicU64, v| a.store(v, Ordering::Relaxed);
        let c = &self.nat;
        st(&c.forward_translated_wrong, self.fwd_wrong);
        st(&c.learned, self.learner.learned());
        st(&c.remapped, self.learner.remapped());
        st(&c.return_translated_ok, self.ret.translated_ok);
        st(&c.return_translated_wrong, self.ret.translated_wrong);
    }
}

impl FrameSink for NatSplitSink {
    #[inline]
    fn deliver(&mut self, frame: &[u8]) {
        if let Some((sig, loc)) = parse(frame) {
            if sig.stream == self.ret_stream {
                self.ret.check_parsed(frame, &sig, &loc);
                return;
            }
            if sig.stream == self.fwd_stream {
                self.fwd.check(frame);
                let (ip, port) = source_of(frame, &loc);
                if ip == self.nat_ip {
                    self.learner.learn(sig.flow, ip, port);
                } else {
                    self.fwd_wrong += 1;
                }
                return;
            }
        }
        // Not ours, or another stream: the forward sink counts it.
        self.fwd.check(frame);
    }

    fn finish(&mut self) {
        self.fwd.finish();
        self.ret.finish();
        self.publish();
    }
}

impl Drop for NatSplitSink {
    fn drop(&mut self) {
        self.publish();
    }
}

/// Handles to read NAT-aware traffic's counters while and after it runs.
#[derive(Clone, Debug)]
pub struct NatBidirHandles {
    /// Forward frames generated.
    pub forward_gen: Arc<GenCounters>,
    /// Forward frames received (and frames that were not ours).
    pub forward_sink: Arc<SinkCounters>,
    /// Return frames generated.
    pub return_gen: Arc<GenCounters>,
    /// Return frames received.
    pub return_sink: Arc<SinkCounters>,
    /// Learning and translation counters.
    pub nat: Arc<NatCounters>,
    /// The settings.
    pub config: NatReturnConfig,
}

/// The end-of-run report of NAT-aware traffic, per direction. Exact once the sink finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct NatBidirReport {
    /// Forward (inside -> outside) frames.
    pub forward: TrafficReport,
    /// Forward frames that left with a source other than the NAT address.
    pub forward_translated_wrong: u64,
    /// Flows whose outside mapping was learned.
    pub learned: u64,
    /// Times a learned mapping changed.
    pub remapped: u64,
    /// Return (outside -> inside) frames.
    #[serde(rename = "return")]
    pub ret: TrafficReport,
    /// Return frames that reached the flow's original inside address and port.
    pub return_translated_ok: u64,
    /// Return frames addressed anywhere else.
    pub return_translated_wrong: u64,
    /// Return frames due but not sent because the flow's mapping was not learned yet (their
    /// slots carried forward frames).
    pub return_unlearned: u64,
}

impl NatBidirReport {
    /// Both directions summed (frame size and stream of the forward traffic; `not_ours` once).
    pub fn total(&self) -> TrafficReport {
        let (f, r) = (&self.forward, &self.ret);
        TrafficReport {
            frame_size: f.frame_size,
            stream: f.stream,
            sent: f.sent + r.sent,
            sent_bytes: f.sent_bytes + r.sent_bytes,
            received: f.received + r.received,
            received_bytes: f.received_bytes + r.received_bytes,
            received_unique: f.received_unique + r.received_unique,
            seq_lost: f.seq_lost + r.seq_lost,
            payload_mismatches: f.payload_mismatches + r.payload_mismatches,
            duplicates: f.duplicates + r.duplicates,
            reordered: f.reordered + r.reordered,
            not_ours: f.not_ours + r.not_ours,
        }
    }

    /// Frames of either direction with a wrong translation.
    pub fn translated_wrong(&self) -> u64 {
        self.forward_translated_wrong + self.return_translated_wrong
    }

    /// True if every frame of both directions arrived once, intact and correctly translated.
    pub fn clean(&self) -> bool {
        self.forward.clean() && self.ret.clean() && self.translated_wrong() == 0
    }
}

impl NatBidirHandles {
    /// The report (read after the source stopped and the sink finished for exact figures).
    pub fn report(&self) -> NatBidirReport {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let n = &self.nat;
        NatBidirReport {
            forward: report(&self.forward_gen, &self.forward_sink),
            forward_translated_wrong: l(&n.forward_translated_wrong),
            learned: l(&n.learned),
            remapped: l(&n.remapped),
            ret: report(&self.return_gen, &self.return_sink),
            return_translated_ok: l(&n.return_translated_ok),
            return_translated_wrong: l(&n.return_translated_wrong),
            return_unlearned: l(&n.return_unlearned),
        }
    }
}

/// Builds NAT-aware traffic for one wire: forward traffic `fwd` (UDP; its `count`, if any, is
/// the number of frames of **both** directions) with return traffic as `cfg` says. Returns the
/// source, the sink (sharing one [`MappingTable`]) and the handles to read their counters.
/// Errors name the generator key at fault.
pub fn nat_bidir(
    fwd: &GeneratorConfig,
    cfg: &NatReturnConfig,
) -> Result<(NatReturnSource, NatSplitSink, NatBidirHandles), ConfigError> {
    fwd.validate()?;
    if fwd.proto != L4Proto::Udp {
        return Err(ConfigError {
            key: "proto",
            value: format!("{:?}", fwd.proto).to_lowercase(),
            allowed: "udp (NAT return traffic is UDP)".into(),
        });
    }
    if fwd.flows > MAX_LEARNED_FLOWS {
        return Err(ConfigError {
            key: "flows",
            value: fwd.flows.to_string(),
            allowed: format!("1..={MAX_LEARNED_FLOWS} with NAT return traffic (8 B per flow)"),
        });
    }
    if !(cfg.ratio > 0.0 && cfg.ratio <= MAX_RETURN_RATIO) {
        return Err(ConfigError {
            key: "return_ratio",
            value: cfg.ratio.to_string(),
            allowed: format!("0 < ratio <= {MAX_RETURN_RATIO} (return frames per forward frame)"),
        });
    }
    let table = Arc::new(MappingTable::new(fwd.flows));
    let stream = return_stream(fwd.stream);
    let gen_cfg = GeneratorConfig {
        count: None,
        ..fwd.clone()
    };
    let fwd_gen = Generator::new(gen_cfg)?;
    let nat = Arc::new(NatCounters::default());
    let ret_counters = Arc::new(GenCounters::new(
        stream,
        fwd_gen.counters().frame_size,
        fwd.generated_len(),
    ));
    let fwd_sink = CheckingSink::for_generator(fwd);
    let ret = ReverseChecker {
        sink: CheckingSink::for_generator(fwd),
        ..ReverseChecker::new(fwd)
    };
    let handles = NatBidirHandles {
        forward_gen: fwd_gen.counters(),
        forward_sink: fwd_sink.counters(),
        return_gen: ret_counters.clone(),
        return_sink: ret.sink.counters(),
        nat: nat.clone(),
        config: *cfg,
    };
    let source = NatReturnSource {
        fwd: fwd_gen,
        fwd_cfg: fwd.clone(),
        sig_at: fwd.header_len(),
        table: table.clone(),
        stream,
        ratio: ((cfg.ratio * CREDIT_ONE as f64).round() as u64).max(1),
        credit: 0,
        last: (0, 0),
        seq: 0,
        bytes: 0,
        unlearned: 0,
        sent: 0,
        limit: fwd.count.unwrap_or(u64::MAX),
        ret_counters,
        nat: nat.clone(),
    };
    let sink = NatSplitSink {
        fwd: fwd_sink,
        learner: NatLearner::with_table(table),
        ret,
        nat_ip: u32::from(cfg.nat_ip),
        fwd_stream: fwd.stream,
        ret_stream: stream,
        fwd_wrong: 0,
        nat,
    };
    Ok((source, sink, handles))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::link::MAX_WIRE_FRAME;
    use std::collections::{HashMap, VecDeque};

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
        let c = finish(ones_sum(&f[14..34], 0));
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
            assert_eq!(finish(ones_sum(&buf[14..34], 0)), 0, "valid IPv4 checksum");
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

    /// How a [`ToyNat`] treats the traffic of a one-port run.
    #[derive(Clone, Copy, PartialEq)]
    enum Dut {
        /// Translates both directions (by destination == the NAT address).
        Nat,
        /// Translates forward, and returns to the wrong inside port.
        BadReturn,
        /// Forwards everything unchanged (no NAT at all).
        Wire,
    }

    /// Runs NAT-aware traffic through a toy NAT on one wire, with `delay` frames in flight
    /// between the source and the sink. Returns the report and each frame's (stream, flow).
    fn one_wire(
        fwd: &GeneratorConfig,
        ratio: f64,
        dut: Dut,
        delay: usize,
    ) -> (NatBidirReport, Vec<(u16, u32)>) {
        let cfg = NatReturnConfig {
            ratio,
            nat_ip: Ipv4Addr::new(10, 0, 0, 1),
        };
        let (mut src, mut sink, h) = nat_bidir(fwd, &cfg).unwrap();
        let mut nat = ToyNat::default();
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        let mut wire: VecDeque<Vec<u8>> = VecDeque::new();
        let mut order = Vec::new();
        while let Some(n) = src.next_frame(&mut buf) {
            let f = &mut buf[..n];
            let (sig, _) = parse(f).unwrap();
            order.push((sig.stream, sig.flow));
            let inbound = f[30..34] == [10, 0, 0, 1];
            match (dut, inbound) {
                (Dut::Wire, _) => {}
                (Dut::Nat, true) => nat.reverse(f, false),
                (Dut::BadReturn, true) => nat.reverse(f, true),
                (_, false) => nat.forward(f),
            }
            wire.push_back(f.to_vec());
            if wire.len() > delay {
                sink.deliver(&wire.pop_front().unwrap());
            }
        }
        assert!(src.exhausted());
        for f in wire.drain(..) {
            sink.deliver(&f);
        }
        sink.finish();
        (h.report(), order)
    }

    #[test]
    fn one_wire_interleaves_return_frames_for_learned_flows_and_splits_them_at_the_sink() {
        let fwd = GeneratorConfig {
            frame_size: 128,
            flows: 8,
            src_port: 5000,
            src_port_count: 8,
            count: Some(400),
            ..Default::default()
        };
        let (r, order) = one_wire(&fwd, 1.0, Dut::Nat, 5);
        // Exactly `count` frames on the wire, both directions together.
        assert_eq!(r.forward.sent + r.ret.sent, 400);
        assert_eq!(order.len(), 400);
        // Everything arrived once, intact, correctly translated both ways.
        assert!(r.clean(), "{r:?}");
        assert_eq!(r.ret.received, r.ret.sent);
        assert_eq!(r.return_translated_ok, r.ret.sent);
        assert_eq!((r.learned, r.remapped), (8, 0));
        assert_eq!(r.ret.stream, 1);
        // Until a flow's first translated frame is back (5 frames in flight), its return frame
        // is not sent: one unlearned return per forward frame of the first pass at least.
        assert!(r.return_unlearned >= 8, "{r:?}");
        // Every forward frame earned one return frame: sent, or not sent for want of a mapping
        // (the last forward frame's may still be due).
        let owed = r.forward.sent - r.ret.sent - r.return_unlearned;
        assert!(owed <= 1, "{r:?}");
        // A return frame answers the flow of the forward frame just before it; once learned,
        // the directions alternate.
        for w in order.windows(2) {
            if w[1].0 == 1 {
                assert_eq!(w[0], (0, w[1].1));
            }
        }
        assert!(
            order[order.len() - 100..]
                .windows(2)
                .all(|w| w[0].0 != w[1].0)
        );
        // Virtual determinism: the same inputs give the same frame sequence.
        assert_eq!(one_wire(&fwd, 1.0, Dut::Nat, 5), (r, order));
    }

    #[test]
    fn return_ratio_sets_return_frames_per_forward_frame() {
        let fwd = GeneratorConfig {
            frame_size: 100,
            flows: 4,
            count: Some(1000),
            ..Default::default()
        };
        for (ratio, per_fwd) in [(3.0, 3u64), (0.25, 1)] {
            let (r, order) = one_wire(&fwd, ratio, Dut::Nat, 3);
            assert!(r.clean(), "{ratio}: {r:?}");
            assert_eq!(r.forward.sent + r.ret.sent, 1000);
            let due = (r.forward.sent as f64 * ratio).floor() as u64;
            let owed = due - r.ret.sent - r.return_unlearned;
            assert!(owed <= per_fwd, "{ratio}: {r:?}");
            // The steady state keeps the ratio: the tail has `ratio` returns per forward frame.
            let tail = &order[order.len() - 400..];
            let ret = tail.iter().filter(|(s, _)| *s == 1).count() as f64;
            let fwd_n = tail.len() as f64 - ret;
            assert!(
                (ret / fwd_n - ratio).abs() < 0.05,
                "{ratio}: {ret} / {fwd_n}"
            );
        }
    }

    #[test]
    fn wrong_or_missing_translation_is_reported_not_counted_as_fine() {
        let fwd = GeneratorConfig {
            frame_size: 96,
            flows: 16,
            src_port: 4000,
            src_port_count: 16,
            count: Some(600),
            ..Default::default()
        };
        // Return frames delivered to the wrong inside port.
        let (r, _) = one_wire(&fwd, 1.0, Dut::BadReturn, 4);
        assert!(r.ret.sent > 200, "{r:?}");
        assert_eq!(r.ret.received_unique, r.ret.sent, "delivered, but wrongly");
        assert_eq!(
            (r.return_translated_ok, r.return_translated_wrong),
            (0, r.ret.sent)
        );
        assert_eq!(r.forward_translated_wrong, 0);
        assert!(!r.clean());
        // No NAT at all: forward frames keep their inside source, nothing is learned, no return
        // frame can be sent, and the summary says so.
        let (r, order) = one_wire(&fwd, 1.0, Dut::Wire, 4);
        assert_eq!(r.forward_translated_wrong, 600);
        assert_eq!((r.learned, r.ret.sent), (0, 0));
        assert_eq!(
            r.return_unlearned, 599,
            "the last forward frame's return is still due"
        );
        assert!(order.iter().all(|(s, _)| *s == 0));
        assert!(!r.clean());
    }

    #[test]
    fn nat_bidir_rejects_what_it_cannot_do() {
        let cfg = NatReturnConfig {
            ratio: 1.0,
            nat_ip: Ipv4Addr::new(10, 0, 0, 1),
        };
        let tcp = GeneratorConfig {
            proto: L4Proto::Tcp,
            frame_size: 128,
            ..Default::default()
        };
        assert_eq!(nat_bidir(&tcp, &cfg).unwrap_err().key, "proto");
        let many = GeneratorConfig {
            flows: MAX_LEARNED_FLOWS + 1,
            ..Default::default()
        };
        assert_eq!(nat_bidir(&many, &cfg).unwrap_err().key, "flows");
        for ratio in [0.0, -1.0, f64::NAN, 65.0] {
            let e = nat_bidir(
                &GeneratorConfig::default(),
                &NatReturnConfig { ratio, ..cfg },
            )
            .unwrap_err();
            assert_eq!(e.key, "return_ratio");
        }
        assert_eq!(return_stream(0), 1);
        assert_eq!(return_stream(254), 0);
    }
}
