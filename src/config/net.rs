//! The network sections of a run config: the virtual NIC's ports with their links and addresses
//! (`[[vnic.ports]]`), static routes (`[[route]]`), static neighbours (`[[neighbor]]`) and ARP's
//! timers (`[arp]`), and the run's [`Network`] built from them.
//!
//! ```toml
//! [[vnic.ports]]
//! link = "afpacket:nmdp-in"      # or "tap:NAME", "generator", "null", "pcap:IN[,OUT]"
//! mac = "02:00:00:00:01:01"      # default 02:6e:6d:64:70:NN (NN = port index)
//! ip = "10.0.1.1/24"             # the port's address and its connected subnet
//! [[route]]
//! prefix = "0.0.0.0/0"
//! via = "10.0.2.254"             # port: derived from the subnet that holds the gateway
//! [[neighbor]]
//! ip = "10.0.2.254"
//! mac = "02:00:00:00:02:fe"
//! [arp]
//! retry_ms = 1000
//! ```
//!
//! Errors are `(key, message)` pairs; the caller names the file.

use std::path::PathBuf;
use std::sync::Arc;

use dataplane::link::kernel::KernelLinkSpec;
use dataplane::net::{ArpConfig, Ipv4Prefix, MacAddr, Network, PortAddr, Route, StaticNeighbor};
use serde::Deserialize;

/// A config error: the dotted key and what is wrong.
pub type KeyError = (String, String);

/// `[[vnic.ports]]`: one port of the virtual NIC.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct VnicPortSection {
    /// Its wire (see [`VnicLink::parse`]).
    pub link: String,
    /// Its MAC address (default: `02:6e:6d:64:70:NN`).
    pub mac: Option<String>,
    /// Its IPv4 address with prefix length.
    pub ip: Option<String>,
}

/// `[[route]]`: a static route.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// Destination prefix, e.g. `"0.0.0.0/0"`.
    pub prefix: String,
    /// Gateway address.
    pub via: Option<String>,
    /// Egress port (run index); default: the port whose subnet holds `via`.
    pub port: Option<u16>,
}

/// `[[neighbor]]`: a static neighbour.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct NeighborSection {
    /// Its IPv4 address.
    pub ip: String,
    /// Its MAC address.
    pub mac: String,
    /// The port it is on; default: the port whose subnet holds `ip`.
    pub port: Option<u16>,
}

/// `[arp]`: ARP and ICMP behaviour of the ports' slow path.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ArpSection {
    /// Milliseconds between requests for an unresolved next hop.
    pub retry_ms: u64,
    /// Requests before a next hop fails (its waiting packets are dropped as `arp_unresolved`).
    pub retries: u32,
    /// Packets a worker parks per unresolved next hop.
    pub queue: usize,
    /// Gratuitous ARP for every owned address at start.
    pub gratuitous: bool,
    /// ICMP errors per second per worker at most.
    pub icmp_per_s: u32,
}

impl Default for ArpSection {
    fn default() -> Self {
        let d = ArpConfig::default();
        Self {
            retry_ms: d.retry_ms,
            retries: d.retries,
            queue: d.queue,
            gratuitous: d.gratuitous,
            icmp_per_s: d.icmp_per_s,
        }
    }
}

impl ArpSection {
    /// Checks the ranges; the error names the key.
    pub fn check(&self) -> Result<ArpConfig, KeyError> {
        let bad = |k: &str, m: String| Err((format!("arp.{k}"), m));
        if !(10..=60_000).contains(&self.retry_ms) {
            return bad(
                "retry_ms",
                format!("{} out of range; allowed 10..=60000", self.retry_ms),
            );
        }
        if !(1..=20).contains(&self.retries) {
            return bad(
                "retries",
                format!("{} out of range; allowed 1..=20", self.retries),
            );
        }
        if !(1..=256).contains(&self.queue) {
            return bad(
                "queue",
                format!("{} out of range; allowed 1..=256", self.queue),
            );
        }
        if !(20..=1_000_000).contains(&self.icmp_per_s) {
            return bad(
                "icmp_per_s",
                format!("{} out of range; allowed 20..=1000000", self.icmp_per_s),
            );
        }
        Ok(ArpConfig {
            retry_ms: self.retry_ms,
            retries: self.retries,
            queue: self.queue,
            gratuitous: self.gratuitous,
            icmp_per_s: self.icmp_per_s,
        })
    }
}

/// A virtual NIC port's wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VnicLink {
    /// The config's embedded traffic generator and checking sink (at most one port).
    Generator,
    /// Nothing arrives; what is sent is counted.
    Null,
    /// Frames from a pcap file; what is sent goes to another pcap file, or is counted.
    Pcap {
        /// The file read.
        rx: PathBuf,
        /// The file written.
        tx: Option<PathBuf>,
    },
    /// The Linux kernel: a TAP device or an interface through AF_PACKET.
    Kernel(KernelLinkSpec),
}

impl VnicLink {
    /// `generator`, `null`, `pcap:IN[,OUT]`, `tap:NAME` or `afpacket:IFNAME`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let allowed = "allowed: \"generator\", \"null\", \"pcap:IN.pcap[,OUT.pcap]\", \
                       \"tap:NAME\", \"afpacket:IFNAME\"";
        match s {
            "generator" => return Ok(Self::Generator),
            "null" => return Ok(Self::Null),
            _ => {}
        }
        if let Some(files) = s.strip_prefix("pcap:") {
            let mut it = files.split(',');
            let rx = it.next().unwrap_or("").trim();
            if rx.is_empty() {
                return Err(format!("`{s}`: name the pcap file to read; {allowed}"));
            }
            return Ok(Self::Pcap {
                rx: rx.into(),
                tx: it.next().map(|t| PathBuf::from(t.trim())),
            });
        }
        match KernelLinkSpec::parse(s) {
            Some(k) => {
                let (KernelLinkSpec::Tap(n) | KernelLinkSpec::AfPacket(n)) = &k;
                if n.is_empty() || n.len() > 15 {
                    return Err(format!("`{s}`: an interface name is 1..=15 bytes"));
                }
                Ok(Self::Kernel(k))
            }
            None => Err(format!("`{s}` is not a link; {allowed}")),
        }
    }
}

/// A port's addresses from its config keys (`key` is the port's key, e.g. `vnic.ports[1]`).
pub fn port_addr(
    key: &str,
    name: String,
    mac: Option<&str>,
    default_mac: MacAddr,
    ip: Option<&str>,
) -> Result<PortAddr, KeyError> {
    let mac = match mac {
        Some(m) => {
            let m: MacAddr = m.parse().map_err(|e| (format!("{key}.mac"), e))?;
            if m.is_multicast() || m == MacAddr::default() {
                return Err((
                    format!("{key}.mac"),
                    format!("{m} is not a unicast address (the first byte must be even)"),
                ));
            }
            m
        }
        None => default_mac,
    };
    let ip = match ip {
        Some(a) => {
            let p: Ipv4Prefix = a.parse().map_err(|e| (format!("{key}.ip"), e))?;
            if p.len == 32 || p.len == 0 {
                return Err((
                    format!("{key}.ip"),
                    format!("`{a}`: give the port's subnet too, e.g. \"10.0.1.1/24\""),
                ));
            }
            Some(p)
        }
        None => None,
    };
    Ok(PortAddr { name, mac, ip })
}

fn parse_ip(key: &str, s: &str) -> Result<u32, KeyError> {
    s.parse::<std::net::Ipv4Addr>()
        .map(u32::from)
        .map_err(|_| (key.to_string(), format!("`{s}` is not an IPv4 address")))
}

/// Builds the run's network over `ports` (index = run port) when the config has one: a port
/// with an address, a route, a neighbour, or a `route` stage in the pipeline. `None` otherwise
/// (the run has no slow path and takes the path it always took).
pub fn build_network(
    ports: Vec<PortAddr>,
    routes: &[RouteSection],
    neighbors: &[NeighborSection],
    arp: &ArpSection,
    has_route_stage: bool,
) -> Result<Option<Arc<Network>>, KeyError> {
    let addressed = ports.iter().any(|p| p.ip.is_some());
    if !addressed && routes.is_empty() && neighbors.is_empty() && !has_route_stage {
        return Ok(None);
    }
    let arp = arp.check()?;
    let routes = routes
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let key = |k: &str| format!("route[{i}].{k}");
            Ok(Route {
                prefix: r.prefix.parse().map_err(|e| (key("prefix"), e))?,
                via: r
                    .via
                    .as_deref()
                    .map(|v| parse_ip(&key("via"), v))
                    .transpose()?,
                port: r.port,
            })
        })
        .collect::<Result<Vec<_>, KeyError>>()?;
    let neighbors = neighbors
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let key = |k: &str| format!("neighbor[{i}].{k}");
            Ok(StaticNeighbor {
                ip: parse_ip(&key("ip"), &n.ip)?,
                mac: n.mac.parse().map_err(|e| (key("mac"), e))?,
                port: n.port,
            })
        })
        .collect::<Result<Vec<_>, KeyError>>()?;
    Network::new(ports, &routes, &neighbors, arp)
        .map(|n| Some(Arc::new(n)))
        .map_err(|m| {
            let key = m.split(':').next().unwrap_or("").to_string();
            (key, m)
        })
}

/// The summary's view of a network: the ARP and route counters (`arp`, `route`, the latter
/// with the route stages' counters merged in as `forwarded`, `neighbor_misses`, `no_route`) and
/// the neighbour table (`neighbors`).
pub fn summary_keys(net: &Network, route_stage: Option<&serde_json::Value>) -> serde_json::Value {
    use serde_json::json;
    let s = net.counters().snapshot();
    let stage = |k: &str| {
        route_stage
            .and_then(|r| r.get(k))
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
    };
    let no_route = route_stage
        .and_then(|r| r.get("drops"))
        .and_then(|d| d.get("no_route"))
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    let neighbors: Vec<serde_json::Value> = net
        .neighbors()
        .entries()
        .into_iter()
        .map(|e| {
            let state = match e.state {
                dataplane::net::NeighborState::Static => "static",
                dataplane::net::NeighborState::Reachable => "reachable",
                dataplane::net::NeighborState::Incomplete { .. } => "incomplete",
                dataplane::net::NeighborState::Failed => "failed",
            };
            json!({"port": e.port, "ip": std::net::Ipv4Addr::from(e.ip).to_string(),
                   "mac": e.mac.to_string(), "state": state})
        })
        .collect();
    json!({
        "arp": {
            "requests_sent": s.arp_requests_sent,
            "replies_sent": s.arp_replies_sent,
            "resolved": s.arp_resolved,
            "unresolved_drops": s.arp_unresolved_drops,
            "gratuitous_sent": s.arp_gratuitous_sent,
            "learned": s.arp_learned,
            "received": s.arp_received,
            "queued": s.arp_queued,
            "tx_no_buffer": s.tx_no_buffer,
        },
        "route": {
            "forwarded": stage("forwarded"),
            "neighbor_misses": stage("neighbor_misses"),
            "no_route": no_route,
            "ttl_expired": stage("ttl_expired"),
            "icmp_time_exceeded_sent": s.icmp_time_exceeded_sent,
            "icmp_echo_replies_sent": s.icmp_echo_replies_sent,
            "icmp_rate_limited": s.icmp_rate_limited,
        },
        "neighbors": neighbors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_parse_and_bad_ones_say_what_is_allowed() {
        assert_eq!(VnicLink::parse("generator"), Ok(VnicLink::Generator));
        assert_eq!(
            VnicLink::parse("tap:nmdp0"),
            Ok(VnicLink::Kernel(KernelLinkSpec::Tap("nmdp0".into())))
        );
        assert_eq!(
            VnicLink::parse("pcap:a.pcap,b.pcap"),
            Ok(VnicLink::Pcap {
                rx: "a.pcap".into(),
                tx: Some("b.pcap".into())
            })
        );
        let e = VnicLink::parse("veth:x").unwrap_err();
        assert!(e.contains("afpacket:IFNAME"), "{e}");
        assert!(VnicLink::parse("tap:").is_err());
        assert!(VnicLink::parse("afpacket:a-name-far-too-long").is_err());
    }

    #[test]
    fn addresses_and_routes_are_checked_with_their_keys() {
        let p = port_addr(
            "vnic.ports[0]",
            "p0".into(),
            None,
            MacAddr::local_for_port(0),
            Some("10.0.1.1/24"),
        )
        .unwrap();
        assert_eq!(p.ip.unwrap().len, 24);
        let e = port_addr(
            "vnic.ports[1]",
            "p".into(),
            Some("01:00:5e:00:00:01"),
            p.mac,
            None,
        )
        .unwrap_err();
        assert_eq!(e.0, "vnic.ports[1].mac");
        let e = port_addr("vnic.ports[1]", "p".into(), None, p.mac, Some("10.0.0.1")).unwrap_err();
        assert!(e.1.contains("subnet"), "{e:?}");
        let none = build_network(vec![], &[], &[], &ArpSection::default(), false).unwrap();
        assert!(none.is_none(), "no addresses, no network");
        let r = RouteSection {
            prefix: "0.0.0.0/0".into(),
            via: Some("192.168.7.1".into()),
            port: None,
        };
        let e =
            build_network(vec![p.clone()], &[r], &[], &ArpSection::default(), true).unwrap_err();
        assert_eq!(e.0, "route[0]", "{e:?}");
        let a = ArpSection {
            retries: 0,
            ..ArpSection::default()
        };
        assert_eq!(
            build_network(vec![p], &[], &[], &a, true).unwrap_err().0,
            "arp.retries"
        );
    }
}
