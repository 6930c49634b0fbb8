//! `route`: IPv4 forwarding, the last stage of a pipeline between networks. For each packet:
//! longest-prefix match of the destination in the run's forwarding table
//! ([`dataplane::net::Fib`]: the ports' subnets, their own addresses, `[[route]]` entries), TTL
//! decrement with the header checksum updated incrementally (RFC 1624, eqn. 3), and the Ethernet
//! addresses rewritten: the egress port's MAC as source, the next hop's as destination. The
//! verdict is the egress port.
//!
//! What it cannot finish it drops with a reason the run's slow path takes over
//! ([`dataplane::DropReason::for_slow_path`]): `no_neighbor` (the next hop's MAC is not known:
//! the packet waits for ARP and leaves when it resolves, TTL and source MAC already written),
//! `ttl_expired` (TTL 0 or 1: ICMP time exceeded goes back), `local_delivery` (for a port's own
//! address: ICMP echo is answered), `not_ipv4` (ARP is answered). Its own drops: `no_route`, and
//! `not_our_mac` for an IPv4 frame addressed to another host's MAC (a port in promiscuous mode
//! sees those; a router does not forward them).
//!
//! Per packet it reads the shared table without a lock and its own copy of the resolved
//! neighbours (one atomic load per burst sees whether the shared table changed). It forwards
//! untagged Ethernet II frames only: no VLANs, no IPv4 options beyond passing them through, no
//! fragmentation (every port has the same MTU).
#![forbid(unsafe_code)]

use std::sync::Arc;

use dataplane::net::{Hop, NeighborCache, Network};
use dataplane::{Burst, DropCounts, DropReason, NetworkFunction, NfContext, Verdict};
use wire::checksum::update16;
use wire::field::{read_u16, read_u32, write_u16};

use crate::registry::{
    BuildContext, NfSpec, Reason, drop_counters, no_defaults, no_memory, no_params, register_reason,
};

/// Name of this NF in configs.
pub const NAME: &str = "route";

/// Drop reason: an IPv4 frame to a MAC address that is not the receiving port's.
const NOT_OUR_MAC: Reason = (
    "not_our_mac",
    "an IPv4 frame addressed to another host's MAC address (seen in promiscuous mode)",
);

/// The registration of `route`.
pub const SPEC: NfSpec = NfSpec {
    name: NAME,
    aliases: &["router"],
    summary: "IPv4 forwarding by the run's routes ([[route]], the ports' subnets): longest-prefix \
              match, TTL decrement (RFC 1624 checksum update), egress port and Ethernet \
              addresses rewritten; next hops resolved by ARP on the port's slow path.",
    params: &[],
    defaults: no_defaults,
    drop_reasons: &[dataplane::net::slow_path::NO_ROUTE, NOT_OUR_MAC],
    build,
    memory: no_memory,
};

fn build(params: &toml::Table, ctx: &BuildContext) -> Result<Box<dyn NetworkFunction>, String> {
    no_params(NAME, params)?;
    let net = ctx.net.clone().ok_or_else(|| {
        format!(
            "{NAME}: the run has no addresses to route between; give the ports addresses \
             ([[vnic.ports]] or [[dpdk.ports]] with `ip`) and, beyond their subnets, [[route]] \
             entries"
        )
    })?;
    Ok(Box::new(Route::new(net)?))
}

#[derive(Clone, Debug, Default)]
struct Counters {
    packets: u64,
    forwarded: u64,
    neighbor_misses: u64,
    ttl_expired: u64,
    local: u64,
    drops: DropCounts,
}

/// The route stage (one instance per worker).
pub struct Route {
    net: Arc<Network>,
    cache: NeighborCache,
    /// Each port's MAC, by run port index.
    macs: Vec<[u8; 6]>,
    no_route: DropReason,
    not_our_mac: DropReason,
    c: Counters,
}

impl Route {
    /// A route stage over the run's network.
    pub fn new(net: Arc<Network>) -> Result<Self, String> {
        Ok(Self {
            macs: net.ports().iter().map(|p| p.mac.0).collect(),
            cache: NeighborCache::default(),
            no_route: register_reason(NAME, dataplane::net::slow_path::NO_ROUTE)?,
            not_our_mac: register_reason(NAME, NOT_OUR_MAC)?,
            c: Counters::default(),
            net,
        })
    }

    /// Forwards one packet (header `h`, frame length `frame_len`, received on `rx_port`);
    /// returns its verdict.
    #[inline]
    fn forward(&mut self, h: &mut [u8], frame_len: usize, rx_port: u16) -> Verdict {
        if h.len() < 34 || read_u16(h, 12) != wire::ethernet::ETHERTYPE_IPV4 {
            return Verdict::drop(if h.len() < 14 {
                DropReason::TRUNCATED
            } else {
                DropReason::NOT_IPV4
            });
        }
        let vihl = h[14];
        let total = usize::from(read_u16(h, 16));
        if vihl >> 4 != 4 || vihl & 0x0f < 5 || total < usize::from(vihl & 0x0f) * 4 {
            return Verdict::drop(DropReason::MALFORMED);
        }
        if 14 + total > frame_len {
            return Verdict::drop(DropReason::TRUNCATED);
        }
        let mine = self.macs.get(usize::from(rx_port));
        if h[0] & 1 != 0 || mine.is_none_or(|m| h[0..6] != *m) {
            return Verdict::drop(self.not_our_mac);
        }
        let dst = read_u32(h, 30);
        let (port, nh) = match self.net.fib().lookup(dst) {
            Some(hop @ Hop::Forward { port, .. }) => (port, hop.next_hop(dst)),
            Some(Hop::Local) => {
                self.c.local += 1;
                return Verdict::drop(DropReason::LOCAL_DELIVERY);
            }
            None => return Verdict::drop(self.no_route),
        };
        let ttl = h[22];
        if ttl <= 1 {
            self.c.ttl_expired += 1;
            return Verdict::drop(DropReason::TTL_EXPIRED);
        }
        let old = read_u16(h, 22);
        h[22] = ttl - 1;
        let sum = update16(read_u16(h, 24), old, read_u16(h, 22));
        write_u16(h, 24, sum);
        h[6..12].copy_from_slice(&self.macs[usize::from(port)]);
        match self.cache.get(port, nh) {
            Some(mac) => {
                h[0..6].copy_from_slice(&mac.0);
                self.c.forwarded += 1;
                Verdict::tx(port)
            }
            None => {
                self.c.neighbor_misses += 1;
                Verdict::drop(DropReason::NO_NEIGHBOR)
            }
        }
    }
}

impl NetworkFunction for Route {
    fn name(&self) -> &str {
        NAME
    }

    fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
        self.net.neighbors().refresh(&mut self.cache);
        for i in 0..burst.len() {
            if !burst.is_live(i) {
                continue;
            }
            self.c.packets += 1;
            let (len, port) = (burst.frame_len(i), burst.rx_port(i));
            let v = self.forward(burst.header_mut(i), len, port);
            if let Some(r) = v.drop_reason()
                && !r.for_slow_path()
            {
                self.c.drops.add(r, 1);
            }
            burst.set_verdict(i, v);
        }
    }

    fn counters(&self) -> dataplane::Counters {
        let c = &self.c;
        let mut v = dataplane::Counters::new();
        v.count("packets", c.packets)
            .count("forwarded", c.forwarded)
            .count("neighbor_misses", c.neighbor_misses)
            .count("ttl_expired", c.ttl_expired)
            .count("local", c.local)
            .count("dropped", c.drops.total())
            .group(
                "drops",
                drop_counters(&c.drops, &[self.no_route, self.not_our_mac]),
            );
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::net::{ArpConfig, MacAddr, PortAddr, Route as StaticRoute};
    use dataplane::testkit::PacketFactory;
    use dataplane::{DatapathMode, NfContext};
    use wire::frames::FrameSpec;

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<std::net::Ipv4Addr>().unwrap())
    }

    fn net() -> Arc<Network> {
        let ports = ["10.0.1.1/24", "10.0.2.1/24"]
            .iter()
            .enumerate()
            .map(|(i, a)| PortAddr {
                name: format!("p{i}"),
                mac: MacAddr::local_for_port(i as u16),
                ip: Some(a.parse().unwrap()),
            })
            .collect();
        let routes = [StaticRoute {
            prefix: "172.16.0.0/12".parse().unwrap(),
            via: Some(ip("10.0.2.254")),
            port: None,
        }];
        Arc::new(Network::new(ports, &routes, &[], ArpConfig::default()).unwrap())
    }

    /// One frame from a host on port 0 to `dst` with `ttl`, addressed to port 0's MAC.
    fn frame(dst: &str, ttl: u8) -> Vec<u8> {
        let mut s = FrameSpec::udp(ip("10.0.1.2"), ip(dst), 1000, 53, 30);
        s.ttl = ttl;
        let mut f = s.build();
        f[0..6].copy_from_slice(&MacAddr::local_for_port(0).0);
        f
    }

    fn run(r: &mut Route, frames: &[Vec<u8>]) -> Vec<(Vec<u8>, Verdict)> {
        let f = PacketFactory::new(DatapathMode::Split, 64, 2048, 64);
        let mut b = Burst::with_capacity(32);
        for fr in frames {
            assert!(f.push(&mut b, fr));
        }
        b.set_rx_defaults(0, 0, Verdict::tx(0));
        r.process(&mut b, &NfContext::default());
        (0..b.len()).map(|i| (b.frame(i), b.verdict(i))).collect()
    }

    #[test]
    fn forwards_by_longest_prefix_with_ttl_and_macs_rewritten() {
        let n = net();
        let gw = MacAddr([2, 0, 0, 0, 0, 0x54]);
        n.neighbors().add_static(1, ip("10.0.2.254"), gw);
        n.neighbors()
            .add_static(1, ip("10.0.2.9"), MacAddr([2, 0, 0, 0, 0, 9]));
        let mut r = Route::new(n.clone()).unwrap();
        let frames = [
            frame("10.0.2.9", 64),
            frame("172.20.1.1", 5),
            frame("10.0.2.77", 64),
            frame("10.0.2.9", 1),
            frame("10.0.1.1", 64),
            frame("8.8.8.8", 64),
        ];
        let out = run(&mut r, &frames);
        assert_eq!(out[0].1, Verdict::tx(1));
        assert_eq!(&out[0].0[0..6], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&out[0].0[6..12], &MacAddr::local_for_port(1).0);
        assert_eq!(out[0].0[22], 63, "TTL decremented");
        assert_eq!(
            wire::classify::verify_frame_checksums(&out[0].0),
            Ok(()),
            "RFC 1624 update keeps the header checksum valid"
        );
        let h = etherparse::Ipv4HeaderSlice::from_slice(&out[1].0[14..]).unwrap();
        assert_eq!(h.ttl(), 4);
        assert_eq!(h.to_header().calc_header_checksum(), h.header_checksum());
        assert_eq!((out[1].1, &out[1].0[0..6]), (Verdict::tx(1), &gw.0[..]));
        assert_eq!(out[2].1, Verdict::drop(DropReason::NO_NEIGHBOR));
        assert_eq!(out[2].0[22], 63, "decremented before it waits for ARP");
        assert_eq!(out[3].1, Verdict::drop(DropReason::TTL_EXPIRED));
        assert_eq!(out[4].1, Verdict::drop(DropReason::LOCAL_DELIVERY));
        assert_eq!(out[5].1.drop_reason().unwrap().name(), "no_route");
        let mut other = frame("10.0.2.9", 64);
        other[0..6].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
        let out = run(&mut r, &[other]);
        assert_eq!(out[0].1.drop_reason().unwrap().name(), "not_our_mac");
        let c = r.counters();
        assert_eq!(c["forwarded"], 2);
        assert_eq!(c["neighbor_misses"], 1);
    }

    #[test]
    fn without_a_network_the_stage_says_what_it_needs() {
        let e = crate::build("route", &toml::Table::new(), &BuildContext::new(0, 1))
            .err()
            .unwrap();
        assert!(
            e.contains("[[vnic.ports]]") && e.contains("[[route]]"),
            "{e}"
        );
    }
}
