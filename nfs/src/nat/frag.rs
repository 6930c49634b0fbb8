//! Fragments by virtual reassembly: later fragments get the address rewrite of their datagram's
//! first fragment, without reassembling anything.
//!
//! Why: only a datagram's first fragment carries the L4 header (ports) the NAT keys on, but
//! every fragment needs its addresses translated (RFC 4787 REQ-14: fragments in and out of
//! order, MUST). VPP's NAT runs behind the same shallow virtual reassembly: remember what the
//! first fragment was translated to, per (source, destination, protocol, IP ID), for a short
//! time; apply it to the others. The L4 checksum lives in the first fragment and covers the
//! whole datagram; the incremental update made there is valid for it, so later fragments only
//! need their IPv4 header rewritten.
//!
//! Out of order:
//! - an **outbound** later fragment that comes first is translated at once: its new source is
//!   the subscriber's paired outside address, whatever its ports ([`super::pool`]);
//! - an **inbound** (or hairpinned) one cannot be: the inside host is known only from the ports.
//!   It is held, in a bounded per-worker buffer ([`dataplane::Burst::remove_to`]), until its
//!   first fragment passes (then released through [`dataplane::NetworkFunction::release`]) or
//!   `fragment_timeout_ms` passes (dropped as `fragment_timeout`). A full buffer drops as
//!   `fragment_hold_full`; fragments of a datagram whose first fragment was dropped go as
//!   `fragment_first_dropped`. Contexts live in a small table with least-recently-seen
//!   eviction, so a flood of fragments (RFC 4787 REQ-14a) costs bounded memory and cannot stop
//!   new datagrams from being tracked.

use dataplane::{Burst, DropCounts, Verdict};
use wire::classify::{Parsed, parse};
use wire::ipv4::Ipv4View;

use crate::flow_table::{FlowKey, FlowTable, FullPolicy};
use crate::params::bad_param;

use super::{NAME, Reasons};

/// What became of a datagram's first fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Translated: the new source and destination (0: unchanged).
    Translated { src: u32, dst: u32 },
    /// Dropped.
    Failed,
    /// Not seen (yet).
    Unknown,
}

/// A context value meaning "not seen yet" (a held fragment is waiting).
const PENDING: u64 = 0;
/// A context value meaning "the first fragment was dropped".
const FAILED: u64 = u64::MAX;

/// Fragment counters.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FragCounters {
    /// First fragments whose translation was recorded.
    pub first: u64,
    /// Later fragments translated on arrival (their first fragment had passed).
    pub translated: u64,
    /// Outbound later fragments translated before their first fragment (by the paired address).
    pub translated_early: u64,
    /// Later fragments held for their first fragment.
    pub held: u64,
    /// Held fragments released translated.
    pub released: u64,
    /// Held fragments dropped: the first fragment did not come in time.
    pub timed_out: u64,
    /// Fragments dropped: no room to hold them.
    pub hold_full: u64,
    /// Later fragments dropped because their first fragment was.
    pub first_dropped: u64,
}

/// The contexts, the hold buffer and their counters (see the module docs).
pub(super) struct Fragments {
    ctx: FlowTable<u64>,
    hold: Burst,
    /// When each held packet (same order as `hold`) times out, ms ticks.
    deadline: Vec<u32>,
    max_held: usize,
    timeout: u32,
    pub c: FragCounters,
}

#[inline(always)]
fn key(src: u32, dst: u32, ident: u16, proto: u8) -> FlowKey {
    FlowKey::new(src, dst, ident, 0, proto)
}

/// Rewrites the source and destination (0: leave it) of the IPv4 header at `l3`, with its
/// checksum.
pub(super) fn rewrite(h: &mut [u8], l3: usize, src: u32, dst: u32) {
    let Some(mut ip) = Ipv4View::new_checked(&mut h[l3..]) else {
        return;
    };
    if src != 0 {
        ip.set_src(src);
    }
    if dst != 0 {
        ip.set_dst(dst);
    }
}

impl Fragments {
    pub fn new(
        contexts: usize,
        timeout_ms: u32,
        max_held: usize,
        seed: u64,
    ) -> Result<Self, String> {
        Ok(Self {
            ctx: FlowTable::try_new(contexts, timeout_ms, FullPolicy::Evict, seed)
                .map_err(|e| bad_param(NAME, "fragment_contexts", e))?,
            hold: Burst::with_capacity(max_held),
            deadline: Vec::with_capacity(max_held),
            max_held,
            timeout: timeout_ms,
            c: FragCounters::default(),
        })
    }

    /// Packets held.
    pub fn held(&self) -> usize {
        self.hold.len()
    }

    /// Records the outcome of a datagram's first fragment.
    pub fn record(&mut self, src: u32, dst: u32, ident: u16, proto: u8, o: Outcome, now: u32) {
        let v = match o {
            Outcome::Translated { src, dst } => u64::from(src) << 32 | u64::from(dst),
            Outcome::Failed | Outcome::Unknown => FAILED,
        };
        self.c.first += 1;
        // Cannot fail: the table evicts its least recently seen context when full.
        let _ = self.ctx.insert(key(src, dst, ident, proto), v, now);
    }

    /// The outcome of the first fragment of a datagram.
    pub fn lookup(&mut self, src: u32, dst: u32, ident: u16, proto: u8, now: u32) -> Outcome {
        match self
            .ctx
            .lookup(&key(src, dst, ident, proto), now)
            .map(|slot| self.ctx.value(slot))
        {
            None | Some(PENDING) => Outcome::Unknown,
            Some(FAILED) => Outcome::Failed,
            Some(v) => Outcome::Translated {
                src: (v >> 32) as u32,
                dst: v as u32,
            },
        }
    }

    /// Holds packet `i` of `burst` (a later fragment with header `p` and IP ID `ident`) until
    /// its first fragment passes: takes it out of the burst. False (the packet stays) when
    /// there is no room.
    pub fn hold(&mut self, burst: &mut Burst, i: usize, p: &Parsed, ident: u16, now: u32) -> bool {
        if self.hold.len() >= self.max_held || !burst.remove_to(i, &mut self.hold) {
            self.c.hold_full += 1;
            return false;
        }
        self.deadline.push(now.wrapping_add(self.timeout));
        let k = key(p.src, p.dst, ident, p.proto);
        if self.ctx.peek(&k).is_none() {
            let _ = self.ctx.insert(k, PENDING, now);
        }
        self.c.held += 1;
        true
    }

    /// Moves held packets that can go into `out` (see
    /// [`dataplane::NetworkFunction::release`]): translated when their first fragment passed,
    /// dropped when it was dropped, when their time is up, or with `flush`. Returns how many
    /// were translated inbound (their destination rewritten) and outbound.
    pub fn release(
        &mut self,
        out: &mut Burst,
        now: u32,
        flush: bool,
        r: &Reasons,
        drops: &mut DropCounts,
    ) -> (u64, u64) {
        let (mut inbound, mut outbound) = (0, 0);
        let mut j = 0;
        while j < self.hold.len() && out.room() > 0 {
            let p = parse(self.hold.header(j), self.hold.frame_len(j));
            let outcome = match p {
                Ok(p) => {
                    let ident = Ipv4View::new_checked(&self.hold.header(j)[p.l3..])
                        .map_or(0, |ip| ip.ident());
                    (self.lookup(p.src, p.dst, ident, p.proto, now), p.l3)
                }
                Err(_) => (Outcome::Failed, 0),
            };
            let timed_out = flush || (now.wrapping_sub(self.deadline[j]) as i32) > 0;
            let verdict = match outcome {
                (Outcome::Translated { src, dst }, l3) => {
                    // Idempotent: a packet that cannot move now is rewritten again next time.
                    rewrite(self.hold.header_mut(j), l3, src, dst);
                    Ok(dst != 0)
                }
                (Outcome::Failed, _) => Err(r.fragment_first_dropped),
                (Outcome::Unknown, _) if timed_out => Err(r.fragment_timeout),
                (Outcome::Unknown, _) => {
                    j += 1;
                    continue;
                }
            };
            if !self.hold.remove_to(j, out) {
                // `out` has another owner: try again on the next call.
                break;
            }
            self.deadline.remove(j);
            match verdict {
                Ok(to_inside) => {
                    self.c.released += 1;
                    if to_inside {
                        inbound += 1;
                    } else {
                        outbound += 1;
                    }
                }
                Err(reason) => {
                    if reason == r.fragment_timeout {
                        self.c.timed_out += 1;
                    } else {
                        self.c.first_dropped += 1;
                    }
                    drops.add(reason, 1);
                    let last = out.len() - 1;
                    out.set_verdict(last, Verdict::drop(reason));
                }
            }
        }
        (inbound, outbound)
    }

    /// Forgets every context and returns held packets to their owner (uncounted: the NAT
    /// is being reset between benchmark trials).
    pub fn clear(&mut self) {
        self.ctx.clear();
        self.hold.clear();
        self.deadline.clear();
    }

    /// As built: no context, nothing held, zero counters (its own and its table's).
    pub fn reset(&mut self) {
        self.clear();
        self.ctx.reset();
        self.c = FragCounters::default();
    }
}
