//! A worker's slow path: what happens to the packets the NF chain could not finish (see the
//! [module docs](super) for which), and the ARP timers.
//!
//! The run loop hands over a burst of such packets ([`SlowPath::take`]) and calls
//! [`SlowPath::poll`] when [`SlowPath::wants_poll`] says a timer or a resolution may be due. Each
//! packet ends one of four ways: *sent* (a parked packet whose next hop resolved, with its
//! destination MAC written), *parked* (waiting for its next hop, at most
//! [`super::network::ArpConfig::queue`] per next hop), *consumed* (an ARP packet that was answered or
//! taught us something, an ICMP echo request that was answered: no drop), or *dropped* with a
//! reason the run counts (`not_ipv4`, `ttl_expired` after the time exceeded was sent,
//! `arp_unresolved`, `arp_queue_full`, `arp_ignored`, `local_delivery`, `no_route`).
//!
//! Frames the slow path makes are built with `etherparse` into a reused buffer and sent through
//! [`crate::Queue::push_frame`] on the worker's own queue of the port they leave by, in the same
//! Tx burst as the forwarded packets.

use std::sync::Arc;

use etherparse::{ArpOperation, ArpPacketSlice, Ipv4HeaderSlice};

use super::addr::MacAddr;
use super::fib::Hop;
use super::frames;
use super::network::{NetCounters, Network};
use crate::burst::{Burst, MAX_BURST};
use crate::port::Queue;
use crate::verdict::{DropCounts, DropReason, Verdict};

/// The worker's queues and Tx bursts, lent to the slow path for one call.
pub struct PortIo<'a> {
    /// The worker's queue on each port (index = run port).
    pub queues: &'a mut [Box<dyn Queue>],
    /// The worker's Tx burst of each port (flushed by the run loop afterwards).
    pub tx: &'a mut [Burst],
    /// The worker's drop counts.
    pub drops: &'a mut DropCounts,
}

impl PortIo<'_> {
    /// Appends `frame` to port `port`'s Tx burst (sending the burst first when it is full).
    fn send_frame(&mut self, port: u16, frame: &[u8], c: &NetCounters) -> bool {
        let p = usize::from(port);
        let (Some(q), Some(t)) = (self.queues.get_mut(p), self.tx.get_mut(p)) else {
            return false;
        };
        if t.room() == 0 {
            q.tx_burst(t, self.drops);
        }
        let ok = q.push_frame(t, frame);
        if !ok {
            NetCounters::inc(&c.tx_no_buffer);
        }
        ok
    }

    /// Moves packet `i` of `from` to port `port`'s Tx burst.
    fn forward(&mut self, from: &mut Burst, i: usize, port: u16) {
        let p = usize::from(port);
        from.set_verdict(i, Verdict::tx(port));
        if self.tx[p].room() == 0 {
            self.queues[p].tx_burst(&mut self.tx[p], self.drops);
        }
        from.move_to(i, &mut self.tx[p]);
    }
}

/// The drop reasons the slow path registers.
#[derive(Clone, Copy, Debug)]
struct Reasons {
    unresolved: DropReason,
    queue_full: DropReason,
    ignored: DropReason,
    no_route: DropReason,
}

/// What became of one packet.
enum Outcome {
    /// Appended to a Tx burst (or parked): nothing left to do.
    Gone,
    /// Done with, not a drop (an answered ARP or echo request).
    Consumed,
    /// Dropped for this reason.
    Drop(DropReason),
}

/// The `no_route` drop reason (registered by the slow path and the `route` stage alike).
pub const NO_ROUTE: (&str, &str) = (
    "no_route",
    "no route covers the destination (add a [[route]], e.g. a default route)",
);

/// One worker's slow path (see the module docs).
pub struct SlowPath {
    net: Arc<Network>,
    worker: u16,
    /// Packets waiting for their next hop, and each one's (egress port, next hop).
    pending: Burst,
    hops: Vec<(u16, u32)>,
    /// Scratch for rebuilding `pending`.
    keep: Burst,
    keep_hops: Vec<(u16, u32)>,
    /// Packets to free (consumed or dropped) after a call.
    trash: Burst,
    /// The neighbour table generation `pending` was last checked against.
    seen: u64,
    /// The network's owned-address generation last announced (worker 0).
    announced: u64,
    /// ICMP error tokens (thousandths) and when they were last refilled.
    tokens: u64,
    refilled_ms: u64,
    started: bool,
    frame: Vec<u8>,
    scratch: Vec<u8>,
    resend: Vec<(u16, u32)>,
    reasons: Reasons,
}

impl SlowPath {
    /// Worker `worker`'s slow path over `net`. Registers its drop reasons.
    pub fn new(net: Arc<Network>, worker: u16) -> Result<Self, String> {
        let reg = |(n, d): (&'static str, &'static str)| {
            DropReason::register(n, d).map_err(|e| e.to_string())
        };
        let reasons = Reasons {
            unresolved: reg((
                "arp_unresolved",
                "the next hop did not answer ARP (after the configured retries)",
            ))?,
            queue_full: reg((
                "arp_queue_full",
                "too many packets already wait for this next hop's ARP answer",
            ))?,
            ignored: reg((
                "arp_ignored",
                "an ARP packet for an address no port owns, or not Ethernet/IPv4",
            ))?,
            no_route: reg(NO_ROUTE)?,
        };
        let burst = || Burst::with_capacity(MAX_BURST);
        let burst_tokens = Self::burst_tokens(net.arp().icmp_per_s);
        Ok(Self {
            worker,
            pending: burst(),
            hops: Vec::with_capacity(MAX_BURST),
            keep: burst(),
            keep_hops: Vec::with_capacity(MAX_BURST),
            trash: burst(),
            seen: net.neighbors().generation(),
            announced: net.owned_generation(),
            tokens: burst_tokens,
            refilled_ms: 0,
            started: false,
            frame: Vec::with_capacity(2048),
            scratch: Vec::with_capacity(16 * 1024),
            resend: Vec::new(),
            reasons,
            net,
        })
    }

    fn burst_tokens(per_s: u32) -> u64 {
        u64::from(per_s / 20).max(1) * 1000
    }

    /// The network this slow path serves.
    pub fn network(&self) -> &Arc<Network> {
        &self.net
    }

    /// Packets parked waiting for their next hop.
    pub fn parked(&self) -> usize {
        self.pending.len()
    }

    /// True when [`SlowPath::poll`] may have something to do: packets are parked, a request is
    /// out, the start announcements are not sent yet, or (worker 0) an address was put into
    /// service at run time. Reads up to three atomics, no clock.
    #[inline]
    pub fn wants_poll(&self) -> bool {
        !self.started
            || !self.pending.is_empty()
            || self.net.neighbors().pending_timers()
            || (self.worker == 0 && self.net.owned_generation() != self.announced)
    }

    /// Runs the timers and sends what they call for: gratuitous ARP at the first call (worker 0),
    /// ARP retries, parked packets whose next hop resolved, and drops for those whose next hop
    /// failed.
    pub fn poll(&mut self, io: &mut PortIo<'_>) {
        if !self.started {
            self.started = true;
            self.announce(io);
        }
        if self.worker == 0 && self.net.owned_generation() != self.announced {
            self.announced = self.net.owned_generation();
            let fresh = self.net.take_announcements();
            self.announce_list(io, &fresh);
        }
        let now = self.net.now_ms();
        let nb = self.net.neighbors();
        if nb.anything_due(now) {
            self.resend.clear();
            let arp = *self.net.arp();
            nb.due(now, arp.retry_ms, arp.retries, &mut self.resend);
            for k in 0..self.resend.len() {
                let (port, ip) = self.resend[k];
                self.request(io, port, ip);
            }
        }
        if self.net.neighbors().generation() != self.seen {
            self.release(io);
        }
        self.empty_trash(io);
    }

    /// Handles every packet of `punted` (dropped by the chain for a slow-path reason); `punted`
    /// is empty afterwards.
    pub fn take(&mut self, punted: &mut Burst, io: &mut PortIo<'_>) {
        for i in 0..punted.len() {
            let reason = punted.verdict(i).drop_reason();
            let out = match reason {
                Some(DropReason::NOT_IPV4) => self.non_ipv4(punted, i, io),
                Some(DropReason::NO_NEIGHBOR) => self.resolve(punted, i, io),
                Some(DropReason::TTL_EXPIRED) => self.ttl_expired(punted, i, io),
                Some(DropReason::LOCAL_DELIVERY) => self.local(punted, i, io),
                Some(r) => Outcome::Drop(r),
                None => {
                    let port = punted.verdict(i).tx_port().unwrap_or(0);
                    io.forward(punted, i, port);
                    Outcome::Gone
                }
            };
            match out {
                Outcome::Gone => {}
                Outcome::Consumed => self.discard(punted, i, io),
                Outcome::Drop(r) => {
                    io.drops.add(r, 1);
                    self.discard(punted, i, io);
                }
            }
        }
        punted.disown();
        if self.net.neighbors().generation() != self.seen {
            self.release(io);
        }
        self.empty_trash(io);
    }

    /// Frees every parked packet (the run ends), counting each as `arp_unresolved`.
    pub fn finish(&mut self, queues: &mut [Box<dyn Queue>], drops: &mut DropCounts) {
        if self.pending.is_empty() {
            return;
        }
        let n = self.pending.len() as u64;
        drops.add(self.reasons.unresolved, n);
        self.net
            .counters()
            .arp_unresolved_drops
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        self.hops.clear();
        match queues.first_mut() {
            Some(q) => q.free_burst(&mut self.pending),
            None => self.pending.clear(),
        }
    }

    fn discard(&mut self, from: &mut Burst, i: usize, io: &mut PortIo<'_>) {
        if self.trash.room() == 0 {
            self.empty_trash(io);
        }
        from.move_to(i, &mut self.trash);
    }

    fn empty_trash(&mut self, io: &mut PortIo<'_>) {
        if !self.trash.is_empty()
            && let Some(q) = io.queues.first_mut()
        {
            q.free_burst(&mut self.trash);
        }
    }

    /// Gratuitous ARP for every owned address (worker 0 only: one announcement per address).
    fn announce(&mut self, io: &mut PortIo<'_>) {
        if self.worker != 0 {
            return;
        }
        // Whatever was put into service before the start is in the owned list already.
        let _ = self.net.take_announcements();
        self.announced = self.net.owned_generation();
        let all = self.net.owned();
        self.announce_list(io, &all);
    }

    /// Gratuitous ARP for `list`, when the run sends them.
    fn announce_list(&mut self, io: &mut PortIo<'_>, list: &[(u16, u32)]) {
        if !self.net.arp().gratuitous {
            return;
        }
        let net = self.net.clone();
        for &(port, ip) in list {
            let mac = net.ports()[usize::from(port)].mac;
            frames::arp(
                &mut self.frame,
                ArpOperation::REQUEST,
                MacAddr::BROADCAST,
                (mac, ip),
                (MacAddr::default(), ip),
            );
            if io.send_frame(port, &self.frame, net.counters()) {
                NetCounters::inc(&net.counters().arp_gratuitous_sent);
            }
        }
    }

    /// Sends an ARP request for `ip` out of `port`.
    fn request(&mut self, io: &mut PortIo<'_>, port: u16, ip: u32) {
        let net = self.net.clone();
        let Some(p) = net.ports().get(usize::from(port)) else {
            return;
        };
        let src = p.ip.map_or(0, |a| a.addr);
        frames::arp(
            &mut self.frame,
            ArpOperation::REQUEST,
            MacAddr::BROADCAST,
            (p.mac, src),
            (MacAddr::default(), ip),
        );
        if io.send_frame(port, &self.frame, net.counters()) {
            NetCounters::inc(&net.counters().arp_requests_sent);
        }
    }

    /// An ARP packet (or any other frame that is not IPv4).
    fn non_ipv4(&mut self, b: &mut Burst, i: usize, io: &mut PortIo<'_>) -> Outcome {
        let h = b.header(i);
        if h.len() < 14 || u16::from_be_bytes([h[12], h[13]]) != wire::ethernet::ETHERTYPE_ARP {
            return Outcome::Drop(DropReason::NOT_IPV4);
        }
        b.copy_frame(i, &mut self.scratch);
        let net = self.net.clone();
        let c = net.counters();
        NetCounters::inc(&c.arp_received);
        let arp = match ArpPacketSlice::from_slice(&self.scratch[14..]) {
            Ok(s) => match s.to_packet().try_eth_ipv4() {
                Ok(a) => a,
                Err(_) => return Outcome::Drop(self.reasons.ignored),
            },
            Err(_) => return Outcome::Drop(self.reasons.ignored),
        };
        let port = b.rx_port(i);
        let Some(me) = net.ports().get(usize::from(port)) else {
            return Outcome::Drop(self.reasons.ignored);
        };
        let sender = (MacAddr(arp.sender_mac), u32::from_be_bytes(arp.sender_ipv4));
        let target = u32::from_be_bytes(arp.target_ipv4);
        let ours = net.owns(port, target);
        let mut consumed = false;
        if sender.1 != 0 && !sender.0.is_multicast() && !net.owns(port, sender.1) {
            match net.neighbors().learn(port, sender.1, sender.0, ours) {
                super::neighbor::Learned::Resolved => {
                    NetCounters::inc(&c.arp_resolved);
                    consumed = true;
                }
                super::neighbor::Learned::Updated => {
                    NetCounters::inc(&c.arp_learned);
                    consumed = true;
                }
                super::neighbor::Learned::Ignored => consumed |= ours,
            }
        }
        if arp.operation == ArpOperation::REQUEST && ours && sender.1 != target {
            frames::arp(
                &mut self.frame,
                ArpOperation::REPLY,
                sender.0,
                (me.mac, target),
                sender,
            );
            if io.send_frame(port, &self.frame, c) {
                NetCounters::inc(&c.arp_replies_sent);
            }
            consumed = true;
        }
        if consumed {
            Outcome::Consumed
        } else {
            Outcome::Drop(self.reasons.ignored)
        }
    }

    /// The IPv4 header of packet `i` (the route stage checked it before handing it over).
    fn ipv4(b: &Burst, i: usize) -> Option<Ipv4HeaderSlice<'_>> {
        let h = b.header(i);
        Ipv4HeaderSlice::from_slice(h.get(14..)?).ok()
    }

    /// A packet whose next hop has no MAC yet.
    fn resolve(&mut self, b: &mut Burst, i: usize, io: &mut PortIo<'_>) -> Outcome {
        let Some(ip) = Self::ipv4(b, i) else {
            return Outcome::Drop(DropReason::MALFORMED);
        };
        let dst = u32::from_be_bytes(ip.destination());
        let net = self.net.clone();
        let (port, nh) = match net.fib().lookup(dst) {
            Some(h @ Hop::Forward { port, .. }) => (port, h.next_hop(dst)),
            _ => return Outcome::Drop(self.reasons.no_route),
        };
        if let Some(mac) = net.neighbors().resolved(port, nh) {
            b.header_mut(i)[0..6].copy_from_slice(&mac.0);
            io.forward(b, i, port);
            return Outcome::Gone;
        }
        let waiting = self.hops.iter().filter(|&&h| h == (port, nh)).count();
        if waiting >= net.arp().queue || self.pending.room() == 0 {
            NetCounters::inc(&net.counters().arp_unresolved_drops);
            return Outcome::Drop(self.reasons.queue_full);
        }
        b.move_to(i, &mut self.pending);
        self.hops.push((port, nh));
        NetCounters::inc(&net.counters().arp_queued);
        if net
            .neighbors()
            .solicit(port, nh, net.now_ms(), net.arp().retry_ms)
        {
            self.request(io, port, nh);
        }
        Outcome::Gone
    }

    /// Sends parked packets whose next hop resolved; drops those whose next hop failed.
    fn release(&mut self, io: &mut PortIo<'_>) {
        let net = self.net.clone();
        self.seen = net.neighbors().generation();
        if self.pending.is_empty() {
            return;
        }
        self.keep_hops.clear();
        for i in 0..self.pending.len() {
            let (port, nh) = self.hops[i];
            if let Some(mac) = net.neighbors().resolved(port, nh) {
                self.pending.header_mut(i)[0..6].copy_from_slice(&mac.0);
                io.forward(&mut self.pending, i, port);
            } else if net.neighbors().failed(port, nh) {
                NetCounters::inc(&net.counters().arp_unresolved_drops);
                io.drops.add(self.reasons.unresolved, 1);
                if self.trash.room() == 0 {
                    self.empty_trash(io);
                }
                self.pending.move_to(i, &mut self.trash);
            } else {
                self.pending.move_to(i, &mut self.keep);
                self.keep_hops.push((port, nh));
            }
        }
        self.pending.disown();
        std::mem::swap(&mut self.pending, &mut self.keep);
        std::mem::swap(&mut self.hops, &mut self.keep_hops);
    }

    /// Takes an ICMP error token; false (counted) when the rate limit is reached.
    fn icmp_token(&mut self) -> bool {
        let net = &self.net;
        let per_s = u64::from(net.arp().icmp_per_s);
        let now = net.now_ms();
        let cap = Self::burst_tokens(net.arp().icmp_per_s);
        self.tokens = (self.tokens + (now - self.refilled_ms) * per_s).min(cap);
        self.refilled_ms = now;
        if self.tokens >= 1000 {
            self.tokens -= 1000;
            true
        } else {
            NetCounters::inc(&net.counters().icmp_rate_limited);
            false
        }
    }

    /// A packet whose TTL ran out: ICMP time exceeded back to the previous hop (RFC 792; none
    /// about ICMP errors, fragments after the first, or multicast, RFC 1122 3.2.2), then the
    /// packet is dropped as `ttl_expired`.
    fn ttl_expired(&mut self, b: &mut Burst, i: usize, io: &mut PortIo<'_>) -> Outcome {
        let drop = Outcome::Drop(DropReason::TTL_EXPIRED);
        let port = b.rx_port(i);
        let net = self.net.clone();
        let Some(me) = net.ports().get(usize::from(port)) else {
            return drop;
        };
        let Some(my_ip) = me.ip else {
            return drop;
        };
        let Some(ip) = Self::ipv4(b, i) else {
            return drop;
        };
        let src = u32::from_be_bytes(ip.source());
        let dst = u32::from_be_bytes(ip.destination());
        let ihl = usize::from(ip.ihl()) * 4;
        let later_fragment = ip.fragments_offset().value() != 0;
        let h = b.header(i);
        let icmp_error = ip.protocol() == etherparse::IpNumber::ICMP
            && h.get(14 + ihl)
                .is_some_and(|&t| wire::icmpv4::icmp_is_error(t));
        if later_fragment || icmp_error || dst >> 28 >= 0xe || src == 0 || src >> 28 >= 0xe {
            return drop;
        }
        let end = (14 + ihl + 8).min(h.len()).min(b.frame_len(i));
        let mut quoted = [0u8; 68];
        let q = end - 14;
        quoted[..q].copy_from_slice(&h[14..end]);
        let prev_hop = MacAddr([h[6], h[7], h[8], h[9], h[10], h[11]]);
        if !self.icmp_token() {
            return drop;
        }
        frames::time_exceeded(
            &mut self.frame,
            (me.mac, prev_hop),
            my_ip.addr,
            src,
            &quoted[..q],
        );
        if io.send_frame(port, &self.frame, net.counters()) {
            NetCounters::inc(&net.counters().icmp_time_exceeded_sent);
        }
        drop
    }

    /// A packet for one of the ports' own addresses: an ICMP echo request is answered.
    fn local(&mut self, b: &mut Burst, i: usize, io: &mut PortIo<'_>) -> Outcome {
        let drop = Outcome::Drop(DropReason::LOCAL_DELIVERY);
        b.copy_frame(i, &mut self.scratch);
        let Ok(p) = etherparse::SlicedPacket::from_ethernet(&self.scratch) else {
            return drop;
        };
        let (Some(etherparse::NetSlice::Ipv4(ip)), Some(etherparse::TransportSlice::Icmpv4(icmp))) =
            (&p.net, &p.transport)
        else {
            return drop;
        };
        let etherparse::Icmpv4Type::EchoRequest(echo) = icmp.icmp_type() else {
            return drop;
        };
        let port = b.rx_port(i);
        let net = self.net.clone();
        let Some(me) = net.ports().get(usize::from(port)) else {
            return drop;
        };
        let h = ip.header();
        let (src, dst) = (
            u32::from_be_bytes(h.source()),
            u32::from_be_bytes(h.destination()),
        );
        let peer = MacAddr([
            self.scratch[6],
            self.scratch[7],
            self.scratch[8],
            self.scratch[9],
            self.scratch[10],
            self.scratch[11],
        ]);
        frames::echo_reply(
            &mut self.frame,
            (me.mac, peer),
            dst,
            src,
            (echo.id, echo.seq),
            icmp.payload(),
        );
        if io.send_frame(port, &self.frame, net.counters()) {
            NetCounters::inc(&net.counters().icmp_echo_replies_sent);
        }
        Outcome::Consumed
    }
}
