//! The forwarding table: longest-prefix match from a destination address to the port a packet
//! leaves by and its next hop.
//!
//! Entries come from three places, as on a Linux router: each port's own address is a /32
//! *local* entry (packets to it go to the slow path), each port's subnet is a *connected* route
//! (the next hop is the destination itself), and each `[[route]]` names a gateway (`via`) and,
//! optionally, the port (derived from the connected subnet that holds the gateway otherwise).
//!
//! **Why `prefix-trie`.** The lookup is the `prefix-trie` crate's `PrefixMap`, a Tree Bitmap
//! (Eatherton, Dittia and Varghese, SIGCOMM CCR 2004): multibit nodes of five trie levels with
//! two bitmaps each, so an IPv4 lookup touches at most seven small nodes, and a table of a few
//! routes takes a few hundred bytes. The alternative, DIR-24-8 (DPDK's `rte_lpm`), answers in
//! one or two memory reads but needs a 32 MiB first-level table whatever the number of routes,
//! and this dataplane's tables hold the handful of routes of an NF box, not an Internet table.
//! The crate is maintained (0.10 when this was written), is MIT/Apache-2.0 like this project, and keys IPv4 prefixes as plain `(u32, u8)` without pulling
//! in an address crate. The table is built once before traffic starts and read by every worker
//! without a lock.

use prefix_trie::PrefixMap;

use super::addr::{Ipv4Prefix, PortAddr};

/// Where a destination goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hop {
    /// One of the ports' own addresses: the slow path's.
    Local,
    /// Out of `port`, to `next_hop` (the gateway, or the destination itself on a connected
    /// subnet).
    Forward {
        /// The egress port.
        port: u16,
        /// The gateway of the route, `None` on a connected subnet.
        gateway: Option<u32>,
    },
}

impl Hop {
    /// The address whose MAC a packet to `dst` is sent to.
    #[inline]
    pub fn next_hop(&self, dst: u32) -> u32 {
        match self {
            Hop::Forward {
                gateway: Some(g), ..
            } => *g,
            _ => dst,
        }
    }
}

/// A static route (`[[route]]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix.
    pub prefix: Ipv4Prefix,
    /// Gateway; `None` for a route straight out of `port` (the destination is on the link).
    pub via: Option<u32>,
    /// Egress port; `None` to take the port whose subnet holds `via`.
    pub port: Option<u16>,
}

/// The forwarding table (see the module docs).
#[derive(Clone)]
pub struct Fib {
    map: PrefixMap<(u32, u8), Hop>,
    entries: Vec<(Ipv4Prefix, Hop)>,
}

impl std::fmt::Debug for Fib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.entries).finish()
    }
}

impl Fib {
    /// Builds the table from the ports' addresses and the static routes. Errors (for `routes[i]`
    /// named `route[i]`) say what is wrong: a port out of range, a gateway on no connected
    /// subnet, a route with neither gateway nor port.
    pub fn new(ports: &[PortAddr], routes: &[Route]) -> Result<Fib, String> {
        let mut fib = Fib {
            map: PrefixMap::new(),
            entries: Vec::new(),
        };
        for (i, p) in ports.iter().enumerate() {
            if let Some(ip) = p.ip {
                let port = i as u16;
                fib.insert(
                    Ipv4Prefix {
                        addr: ip.network(),
                        len: ip.len,
                    },
                    Hop::Forward {
                        port,
                        gateway: None,
                    },
                );
                fib.insert(
                    Ipv4Prefix {
                        addr: ip.addr,
                        len: 32,
                    },
                    Hop::Local,
                );
            }
        }
        for (i, r) in routes.iter().enumerate() {
            let port = match (r.port, r.via) {
                (Some(p), _) if usize::from(p) >= ports.len() => {
                    return Err(format!(
                        "route[{i}]: port {p} out of range; the run has ports 0..{}",
                        ports.len()
                    ));
                }
                (Some(p), _) => p,
                (None, Some(via)) => ports
                    .iter()
                    .position(|p| p.ip.is_some_and(|ip| ip.contains(via)))
                    .ok_or_else(|| {
                        format!(
                            "route[{i}]: gateway {} is on no port's subnet; give `port` or an \
                             address on the gateway's subnet to one of the ports",
                            std::net::Ipv4Addr::from(via)
                        )
                    })? as u16,
                (None, None) => {
                    return Err(format!(
                        "route[{i}]: give `via` (the gateway) or `port` (a destination on the link)"
                    ));
                }
            };
            fib.insert(
                Ipv4Prefix {
                    addr: r.prefix.network(),
                    len: r.prefix.len,
                },
                Hop::Forward {
                    port,
                    gateway: r.via,
                },
            );
        }
        Ok(fib)
    }

    fn insert(&mut self, p: Ipv4Prefix, hop: Hop) {
        self.map.insert((p.addr, p.len), hop);
        self.entries.retain(|(q, _)| *q != p);
        self.entries.push((p, hop));
    }

    /// The longest-prefix match for `dst`, if any entry covers it.
    #[inline]
    pub fn lookup(&self, dst: u32) -> Option<Hop> {
        self.map.get_lpm(&(dst, 32)).map(|(_, h)| *h)
    }

    /// Every entry, in the order it was added (later duplicates replace earlier ones).
    pub fn entries(&self) -> &[(Ipv4Prefix, Hop)] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::addr::MacAddr;

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<std::net::Ipv4Addr>().unwrap())
    }

    fn ports() -> Vec<PortAddr> {
        ["10.0.1.1/24", "10.0.2.1/24"]
            .iter()
            .enumerate()
            .map(|(i, a)| PortAddr {
                name: format!("p{i}"),
                mac: MacAddr::local_for_port(i as u16),
                ip: Some(a.parse().unwrap()),
            })
            .collect()
    }

    #[test]
    fn longest_prefix_wins_and_connected_routes_come_from_ports() {
        let routes = [
            Route {
                prefix: "0.0.0.0/0".parse().unwrap(),
                via: Some(ip("10.0.2.254")),
                port: None,
            },
            Route {
                prefix: "172.16.0.0/12".parse().unwrap(),
                via: Some(ip("10.0.1.254")),
                port: None,
            },
            Route {
                prefix: "172.16.5.0/24".parse().unwrap(),
                via: None,
                port: Some(1),
            },
        ];
        let f = Fib::new(&ports(), &routes).unwrap();
        assert_eq!(f.lookup(ip("10.0.1.1")), Some(Hop::Local));
        let fwd = |port, gw: Option<&str>| Hop::Forward {
            port,
            gateway: gw.map(ip),
        };
        assert_eq!(f.lookup(ip("10.0.1.9")), Some(fwd(0, None)));
        assert_eq!(f.lookup(ip("10.0.2.9")), Some(fwd(1, None)));
        assert_eq!(f.lookup(ip("8.8.8.8")), Some(fwd(1, Some("10.0.2.254"))));
        assert_eq!(f.lookup(ip("172.20.0.1")), Some(fwd(0, Some("10.0.1.254"))));
        assert_eq!(f.lookup(ip("172.16.5.77")), Some(fwd(1, None)));
        assert_eq!(
            f.lookup(ip("8.8.8.8")).unwrap().next_hop(ip("8.8.8.8")),
            ip("10.0.2.254")
        );
        assert_eq!(
            f.lookup(ip("10.0.2.9")).unwrap().next_hop(ip("10.0.2.9")),
            ip("10.0.2.9")
        );
        // Without a default route, an address outside every prefix has no route.
        let f = Fib::new(&ports(), &routes[1..]).unwrap();
        assert_eq!(f.lookup(ip("8.8.8.8")), None);
    }

    #[test]
    fn bad_routes_are_named() {
        let r = |via: Option<&str>, port| Route {
            prefix: "0.0.0.0/0".parse().unwrap(),
            via: via.map(ip),
            port,
        };
        let e = Fib::new(&ports(), &[r(Some("192.168.9.1"), None)]).unwrap_err();
        assert!(e.contains("route[0]") && e.contains("192.168.9.1"), "{e}");
        let e = Fib::new(&ports(), &[r(None, Some(5))]).unwrap_err();
        assert!(e.contains("port 5 out of range"), "{e}");
        let e = Fib::new(&ports(), &[r(None, None)]).unwrap_err();
        assert!(e.contains("`via`"), "{e}");
    }
}
