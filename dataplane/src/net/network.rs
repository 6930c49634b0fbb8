//! The network of a run: the ports' addresses, the forwarding table, the neighbour table, the
//! addresses the NFs own, ARP's settings and the slow path's counters, built once before traffic
//! starts and shared by every worker's route stage and slow path (see the [module docs](super)).

use std::net::Ipv4Addr;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::addr::{MacAddr, PortAddr};
use super::fib::{Fib, Route};
use super::neighbor::Neighbors;

/// ARP and ICMP behaviour (`[arp]` of a run config).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpConfig {
    /// Milliseconds between requests for an unresolved next hop (Linux: `retrans_time_ms`
    /// 1000).
    pub retry_ms: u64,
    /// Requests sent before a next hop fails (Linux: `mcast_solicit` 3).
    pub retries: u32,
    /// Packets a worker parks per unresolved next hop (Linux queues about 100 kB per
    /// neighbour: `unres_qlen_bytes`); more are dropped as `arp_queue_full`.
    pub queue: usize,
    /// Send a gratuitous ARP for each owned address when the run starts.
    pub gratuitous: bool,
    /// ICMP errors a worker sends per second at most (Linux: `icmp_msgs_per_sec` 1000), with a
    /// burst of a twentieth of that.
    pub icmp_per_s: u32,
}

impl Default for ArpConfig {
    fn default() -> Self {
        Self {
            retry_ms: 1000,
            retries: 3,
            queue: 16,
            gratuitous: true,
            icmp_per_s: 1000,
        }
    }
}

/// A static neighbour (`[[neighbor]]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticNeighbor {
    /// Its address.
    pub ip: u32,
    /// Its MAC.
    pub mac: MacAddr,
    /// The port it is on; `None` for the port whose subnet holds `ip`.
    pub port: Option<u16>,
}

/// Counters of the slow path, shared by the workers (written per event, never per packet).
#[derive(Debug, Default)]
pub struct NetCounters {
    /// ARP requests sent to resolve next hops (first tries and retries).
    pub arp_requests_sent: AtomicU64,
    /// ARP replies sent for owned addresses.
    pub arp_replies_sent: AtomicU64,
    /// Gratuitous ARPs sent at start.
    pub arp_gratuitous_sent: AtomicU64,
    /// Next hops resolved by an ARP reply (incomplete or failed entries that got a MAC).
    pub arp_resolved: AtomicU64,
    /// Neighbours learned or refreshed from ARP without having been asked for.
    pub arp_learned: AtomicU64,
    /// ARP packets received.
    pub arp_received: AtomicU64,
    /// Packets dropped because their next hop did not resolve (`arp_unresolved`) or its
    /// queue was full (`arp_queue_full`).
    pub arp_unresolved_drops: AtomicU64,
    /// Packets parked until their next hop resolves.
    pub arp_queued: AtomicU64,
    /// ICMP time exceeded messages sent.
    pub icmp_time_exceeded_sent: AtomicU64,
    /// ICMP echo replies sent for the ports' own addresses.
    pub icmp_echo_replies_sent: AtomicU64,
    /// ICMP errors not sent because of the rate limit.
    pub icmp_rate_limited: AtomicU64,
    /// Frames the slow path could not send (no buffer left).
    pub tx_no_buffer: AtomicU64,
}

/// A copy of [`NetCounters`] (for the summary).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// See [`NetCounters::arp_requests_sent`].
    pub arp_requests_sent: u64,
    /// See [`NetCounters::arp_replies_sent`].
    pub arp_replies_sent: u64,
    /// See [`NetCounters::arp_gratuitous_sent`].
    pub arp_gratuitous_sent: u64,
    /// See [`NetCounters::arp_resolved`].
    pub arp_resolved: u64,
    /// See [`NetCounters::arp_learned`].
    pub arp_learned: u64,
    /// See [`NetCounters::arp_received`].
    pub arp_received: u64,
    /// See [`NetCounters::arp_unresolved_drops`].
    pub arp_unresolved_drops: u64,
    /// See [`NetCounters::arp_queued`].
    pub arp_queued: u64,
    /// See [`NetCounters::icmp_time_exceeded_sent`].
    pub icmp_time_exceeded_sent: u64,
    /// See [`NetCounters::icmp_echo_replies_sent`].
    pub icmp_echo_replies_sent: u64,
    /// See [`NetCounters::icmp_rate_limited`].
    pub icmp_rate_limited: u64,
    /// See [`NetCounters::tx_no_buffer`].
    pub tx_no_buffer: u64,
}

impl NetCounters {
    /// Adds one to `c`.
    #[inline]
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> NetStats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NetStats {
            arp_requests_sent: l(&self.arp_requests_sent),
            arp_replies_sent: l(&self.arp_replies_sent),
            arp_gratuitous_sent: l(&self.arp_gratuitous_sent),
            arp_resolved: l(&self.arp_resolved),
            arp_learned: l(&self.arp_learned),
            arp_received: l(&self.arp_received),
            arp_unresolved_drops: l(&self.arp_unresolved_drops),
            arp_queued: l(&self.arp_queued),
            icmp_time_exceeded_sent: l(&self.icmp_time_exceeded_sent),
            icmp_echo_replies_sent: l(&self.icmp_echo_replies_sent),
            icmp_rate_limited: l(&self.icmp_rate_limited),
            tx_no_buffer: l(&self.tx_no_buffer),
        }
    }
}

/// The network of a run (see the module docs): built once before traffic starts, shared by every
/// worker's route stage and slow path.
#[derive(Debug)]
pub struct Network {
    ports: Vec<PortAddr>,
    fib: Fib,
    neighbors: Neighbors,
    arp: ArpConfig,
    /// `(port, address)` the ports answer ARP for: their own addresses and the NFs' (set after
    /// the NF chains are built; an NF's address put into or taken out of service at run time
    /// changes it). Read by the slow path per ARP packet, never per forwarded packet.
    owned: RwLock<Vec<(u16, u32)>>,
    /// `(port, address)` put into service at run time and not announced yet (gratuitous ARP by
    /// worker 0's slow path), and how many times addresses were put into service: the slow
    /// path looks at the count (one atomic load per loop iteration) and takes the list only
    /// when it changed.
    to_announce: RwLock<Vec<(u16, u32)>>,
    owned_generation: AtomicU64,
    counters: NetCounters,
    epoch: Instant,
}

impl Network {
    /// The network of ports `ports` (index = run port), with static routes and neighbours.
    /// Errors name the entry (`route[i]`, `neighbor[i]`) and say what is wrong.
    pub fn new(
        ports: Vec<PortAddr>,
        routes: &[Route],
        neighbors: &[StaticNeighbor],
        arp: ArpConfig,
    ) -> Result<Self, String> {
        let fib = Fib::new(&ports, routes)?;
        let table = Neighbors::new();
        for (i, n) in neighbors.iter().enumerate() {
            let port = match n.port {
                Some(p) if usize::from(p) >= ports.len() => {
                    return Err(format!(
                        "neighbor[{i}]: port {p} out of range; the run has ports 0..{}",
                        ports.len()
                    ));
                }
                Some(p) => p,
                None => ports
                    .iter()
                    .position(|p| p.ip.is_some_and(|a| a.contains(n.ip)))
                    .ok_or_else(|| {
                        format!(
                            "neighbor[{i}]: {} is on no port's subnet; give `port`",
                            Ipv4Addr::from(n.ip)
                        )
                    })? as u16,
            };
            table.add_static(port, n.ip, n.mac);
        }
        Ok(Self {
            ports,
            fib,
            neighbors: table,
            arp,
            owned: RwLock::new(Vec::new()),
            to_announce: RwLock::new(Vec::new()),
            owned_generation: AtomicU64::new(0),
            counters: NetCounters::default(),
            epoch: Instant::now(),
        })
    }

    /// Sets the addresses the NFs own (before traffic starts): each on the port given, or
    /// (`None`) on every port whose subnet holds it. The ports' own addresses are always owned.
    /// Returns the addresses no port answers ARP for (owned on no subnet: hosts must route to
    /// them through one of the ports' addresses).
    pub fn set_owned(&self, nf_addrs: &[(Ipv4Addr, Option<u16>)]) -> Vec<Ipv4Addr> {
        let mut owned: Vec<(u16, u32)> = self
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i as u16, p.ip?.addr)))
            .collect();
        let mut unanswered = Vec::new();
        for &(ip, port) in nf_addrs {
            let a = u32::from(ip);
            let before = owned.len();
            match port {
                Some(p) if usize::from(p) < self.ports.len() => owned.push((p, a)),
                Some(_) => {}
                None => {
                    for (i, p) in self.ports.iter().enumerate() {
                        if p.ip.is_some_and(|pi| pi.contains(a)) {
                            owned.push((i as u16, a));
                        }
                    }
                }
            }
            if owned.len() == before {
                unanswered.push(ip);
            }
        }
        owned.sort_unstable();
        owned.dedup();
        *self.owned.write().unwrap_or_else(|e| e.into_inner()) = owned;
        unanswered
    }

    /// An NF's address put into service at run time (a NAT outside address added): answered on
    /// `port`, or (`None`) on every port whose subnet holds it. False when no port answers it.
    pub fn own(&self, ip: Ipv4Addr, port: Option<u16>) -> bool {
        let a = u32::from(ip);
        let ports: Vec<u16> = match port {
            Some(p) if usize::from(p) < self.ports.len() => vec![p],
            Some(_) => vec![],
            None => (0..self.ports.len())
                .filter(|&i| self.ports[i].ip.is_some_and(|pi| pi.contains(a)))
                .map(|i| i as u16)
                .collect(),
        };
        let mut owned = self.owned.write().unwrap_or_else(|e| e.into_inner());
        let mut fresh = Vec::new();
        for &p in &ports {
            if !owned.contains(&(p, a)) {
                owned.push((p, a));
                fresh.push((p, a));
            }
        }
        owned.sort_unstable();
        drop(owned);
        if !fresh.is_empty() {
            self.to_announce
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .extend(fresh);
            self.owned_generation.fetch_add(1, Ordering::Release);
        }
        !ports.is_empty()
    }

    /// How many times addresses were put into service at run time ([`Network::own`]).
    #[inline]
    pub fn owned_generation(&self) -> u64 {
        self.owned_generation.load(Ordering::Acquire)
    }

    /// The addresses put into service since the last call, to announce (worker 0's slow path).
    pub fn take_announcements(&self) -> Vec<(u16, u32)> {
        std::mem::take(&mut *self.to_announce.write().unwrap_or_else(|e| e.into_inner()))
    }

    /// An NF's address taken out of service at run time: no port answers ARP for it any more
    /// (a port's own address stays).
    pub fn disown(&self, ip: Ipv4Addr) {
        let a = u32::from(ip);
        let own: Vec<(u16, u32)> = self
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i as u16, p.ip?.addr)))
            .collect();
        self.owned
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|e| e.1 != a || own.contains(e));
    }

    /// True when `port` answers ARP for `ip`.
    pub fn owns(&self, port: u16, ip: u32) -> bool {
        self.owned
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(port, ip))
    }

    /// Every `(port, address)` the ports answer ARP for, now.
    pub fn owned(&self) -> Vec<(u16, u32)> {
        self.owned.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The ports' addresses, by run port index.
    pub fn ports(&self) -> &[PortAddr] {
        &self.ports
    }

    /// The forwarding table.
    pub fn fib(&self) -> &Fib {
        &self.fib
    }

    /// The neighbour table.
    pub fn neighbors(&self) -> &Neighbors {
        &self.neighbors
    }

    /// ARP and ICMP behaviour.
    pub fn arp(&self) -> &ArpConfig {
        &self.arp
    }

    /// The slow path's counters.
    pub fn counters(&self) -> &NetCounters {
        &self.counters
    }

    /// Milliseconds since the network was built (the neighbour table's clock, the same for
    /// every worker).
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_put_in_and_out_of_service_at_run_time() {
        let ports = crate::testkit::inside_outside_ports("10.0.1.1/24", "198.51.100.254/24");
        let net = Network::new(ports, &[], &[], ArpConfig::default()).unwrap();
        net.set_owned(&[("198.51.100.1".parse().unwrap(), None)]);
        let a = u32::from(Ipv4Addr::new(198, 51, 100, 9));
        assert!(!net.owns(1, a));
        let g = net.owned_generation();
        assert!(
            net.own(Ipv4Addr::from(a), None),
            "on the outside port's subnet"
        );
        assert!(net.owns(1, a) && !net.owns(0, a));
        assert_eq!(net.owned_generation(), g + 1);
        assert_eq!(net.take_announcements(), vec![(1, a)]);
        assert!(net.take_announcements().is_empty(), "announced once");
        assert!(net.own(Ipv4Addr::from(a), None));
        assert_eq!(net.owned_generation(), g + 1, "already owned: nothing new");
        assert!(
            !net.own("192.0.2.1".parse().unwrap(), None),
            "on no port's subnet"
        );
        net.disown(Ipv4Addr::from(a));
        assert!(!net.owns(1, a));
        // A port's own address stays whatever an NF says.
        net.disown("198.51.100.254".parse().unwrap());
        assert!(net.owns(1, u32::from(Ipv4Addr::new(198, 51, 100, 254))));
        assert!(net.owns(1, u32::from(Ipv4Addr::new(198, 51, 100, 1))));
    }
}
