//! The NAT's parameters (the `[[pipeline]]` table of a config) and their checks.
//!
//! Why a module of its own: the defaults are decisions an operator must be able to find in one
//! place (RFC 4787/5382/5508/6888 behaviour, VPP's timeouts), and every bad value must fail with
//! the key named before a packet moves. `docs/nat-conformance.md` lists which key changes which
//! behaviour.

use serde::{Deserialize, Serialize};

use crate::flow_table::FullPolicy;
use crate::params::{bad_param, parse_ipv4, timeout_ms};
use crate::registry::Param;

use super::NAME;

/// How the NAT decides whether a packet is outbound or inbound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirectionPolicy {
    /// Destination in the outside pool -> inbound, else outbound.
    ByAddress,
    /// Received on one of `inside_ports` -> outbound, else inbound.
    ByPort,
}

/// What to do with packets carrying IPv4 options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptionsPolicy {
    /// Translate when the headers fit the header segment.
    Translate,
    /// Drop as `ip_options`.
    Drop,
}

/// Mapping behaviour (RFC 4787 section 4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mapping {
    /// One outside address and port per inside address and port, whatever the remote (RFC 4787
    /// REQ-1, RFC 5382 REQ-1: MUST).
    EndpointIndependent,
    /// One outside port per inside 5-tuple (VPP NAT44-ED); an outside port is reused towards
    /// other remote endpoints.
    EndpointDependent,
}

/// Filtering behaviour for inbound packets without a session (RFC 4787 section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Filtering {
    /// Any remote may reach a mapped outside endpoint (RFC 6888 REQ-7's recommendation).
    EndpointIndependent,
    /// Only remote addresses the inside endpoint has sent to.
    AddressDependent,
    /// Only remote address-and-port pairs the inside endpoint has sent to (a session).
    AddressAndPortDependent,
}

impl Filtering {
    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Filtering::EndpointIndependent => "endpoint-independent",
            Filtering::AddressDependent => "address-dependent",
            Filtering::AddressAndPortDependent => "address-and-port-dependent",
        }
    }
}

/// `nat_ips`: one address or prefix, or a list of them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum AddressList {
    /// `"192.0.2.0/28"` or `"192.0.2.1"`.
    One(String),
    /// `["192.0.2.1", "198.51.100.0/30"]`.
    Many(Vec<String>),
}

impl AddressList {
    /// The entries as strings.
    pub fn entries(&self) -> Vec<&str> {
        match self {
            AddressList::One(s) => vec![s.as_str()],
            AddressList::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// NAT parameters (the `[[pipeline]]` table of a pipeline config). Defaults are what a
/// carrier-grade NAT is expected to do (RFC 6888: RFC 4787/5382/5508 behaviour) with VPP's
/// timeouts; `docs/nat-conformance.md` explains each choice.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatConfig {
    /// The outside address when the pool is one address (the paper's 10.0.0.1).
    pub nat_ip: String,
    /// The outside address pool: addresses and prefixes (`"192.0.2.0/28"` or a list), in place
    /// of `nat_ip`. Subscribers are paired with one address each (RFC 4787 REQ-2).
    pub nat_ips: Option<AddressList>,
    /// Lowest outside port (and ICMP identifier).
    pub port_min: u16,
    /// Highest outside port.
    pub port_max: u16,
    /// Sessions across all workers (each worker gets `flows / workers`); the paper's 10 M.
    pub flows: u64,
    /// Direction rule.
    pub direction: DirectionPolicy,
    /// Rx port indices that face the inside network (`direction = "by-port"`), each < 64.
    pub inside_ports: Vec<u16>,
    /// Rx port indices that face the outside network (`direction = "by-port"`), each < 64;
    /// empty: every port that is not inside.
    pub outside_ports: Vec<u16>,
    /// With `direction = "by-address"`: inside addresses (prefixes), used to tell a hairpinned
    /// packet (inside host to a pool address) from an inbound one.
    pub inside_prefixes: Vec<String>,
    /// Mapping behaviour.
    pub mapping: Mapping,
    /// Filtering behaviour (default: endpoint-independent with endpoint-independent mapping;
    /// endpoint-dependent mapping filters address-and-port-dependent only).
    pub filtering: Option<Filtering>,
    /// Translate packets between two inside hosts through their outside endpoints.
    pub hairpinning: bool,
    /// Outside ports (ICMP identifiers) one inside address may hold at once; 0 = no limit.
    /// Each worker enforces `ceil(limit / workers)` (workers share no state). Refused flows
    /// count as `subscriber_limit`.
    pub subscriber_port_limit: u32,
    /// Sessions one inside address may hold at once (enforced per worker as above); 0 = no
    /// limit.
    pub subscriber_session_limit: u32,
    /// Keep the inside port when it is free in this worker's range.
    pub port_preservation: bool,
    /// Give an outside port of the inside port's parity (RFC 4787 REQ-4).
    pub port_parity: bool,
    /// Seconds a released outside port is kept from other subscribers (RFC 6888 REQ-8).
    pub port_reuse_hold_s: u32,
    /// When no session fits: `drop` (count `table_full`) or `evict` an expired, held or
    /// transitory (TCP opening or closing) session found within `evict_scan` sessions; never an
    /// established or live UDP/ICMP one (RFC 6888 REQ-11).
    pub full_policy: FullPolicy,
    /// Sessions examined per eviction.
    pub evict_scan: u32,
    /// UDP idle timeout, seconds.
    pub udp_timeout_s: u32,
    /// TCP established idle timeout, seconds.
    pub tcp_established_timeout_s: u32,
    /// Sets both TCP transitory timeouts (opening and closing), seconds: RFC 5382's single
    /// "transitory" timeout. The two keys below override it.
    pub tcp_transitory_timeout_s: Option<u32>,
    /// TCP opening idle timeout (SYN seen, handshake incomplete), seconds.
    pub tcp_opening_timeout_s: Option<u32>,
    /// TCP closing idle timeout (FIN both ways, or RST), seconds.
    pub tcp_closing_timeout_s: Option<u32>,
    /// ICMP query idle timeout, seconds.
    pub icmp_timeout_s: u32,
    /// IPv4 options policy.
    pub ip_options: OptionsPolicy,
    /// Decrement TTL (and drop TTL <= 1).
    pub decrement_ttl: bool,
    /// Debug: verify every translated frame by full checksum recomputation (slow path).
    pub verify_checksums: bool,
    /// Sessions (and EIM mappings) examined for expiry per burst.
    pub scan_per_burst: u32,
    /// Random ports tried per new mapping (after the preserved one) before `port_exhausted`.
    pub port_attempts: u32,
    /// Fragmented datagrams tracked at once per worker (virtual reassembly contexts).
    pub fragment_contexts: u32,
    /// How long a datagram's fragments are matched to its first fragment, ms.
    pub fragment_timeout_ms: u32,
    /// Fragments held per worker while they wait for their first fragment (at most 256).
    pub fragments_held: u32,
    /// Hash seed (mixed with the worker index).
    pub seed: u64,
    /// IPFIX collector (`"127.0.0.1:4739"`) for NAT event logging (session create and delete,
    /// port exhaustion); unset: no logging.
    pub log_ipfix: Option<String>,
    /// The most a logged event waits in the worker's buffer before it is sent, ms (sent after
    /// the next burst; everything is sent at the end of the run).
    pub log_flush_ms: u32,
    /// Port-exhaustion records logged per second per worker; the rest are counted as
    /// `log.exhaustion_suppressed`.
    pub log_exhaustion_per_s: u32,
    /// Port blocks: a subscriber gets outside ports in blocks of this many (logged once per
    /// block, not per session); 0: per-mapping allocation.
    pub port_block: u32,
    /// Blocks one inside address may hold (per worker); more mappings are refused as
    /// `subscriber_limit`.
    pub port_block_limit: u32,
    /// Outside addresses an operator may add at run time (`dataplane ctl nat pool add`): known
    /// from the start (indexed, steered, given port tables) but out of service until added.
    pub spare_ips: Option<AddressList>,
    /// Deterministic NAT (RFC 7422): each address of `subscriber_prefixes` gets a computed
    /// outside address and port range; no per-session logging is needed.
    pub deterministic: bool,
    /// The inside prefixes deterministic NAT maps, in order (subscriber index order).
    pub subscriber_prefixes: Vec<String>,
    /// This instance's index among `instances` NAT instances sharing the pool (ECMP).
    pub instance: u32,
    /// NAT instances sharing `nat_ips`: each takes its own contiguous share of the addresses
    /// (and of `spare_ips`), so no two ever hand out the same outside address and port.
    pub instances: u32,
}

/// Every key of [`NatConfig`] with what it sets, for the NAT's registration (`dataplane nfs`
/// prints them with their defaults; the registry's tests check that these are exactly the keys
/// the parser accepts).
pub(super) const PARAMS: &[Param] = &[
    Param {
        name: "nat_ip",
        doc: "the outside address when the pool is one address (dotted quad)",
    },
    Param {
        name: "nat_ips",
        doc: "the outside address pool in place of `nat_ip`: an address or prefix \
              (`\"192.0.2.0/28\"`) or a list of them, at most 65536 addresses; each inside \
              address is paired with one (RFC 4787 REQ-2)",
    },
    Param {
        name: "port_min",
        doc: "lowest outside port (and ICMP identifier)",
    },
    Param {
        name: "port_max",
        doc: "highest outside port; the range is split evenly over the workers",
    },
    Param {
        name: "flows",
        doc: "sessions across all workers (each worker holds `flows / workers`), at least 1",
    },
    Param {
        name: "direction",
        doc: "which packets without a session are outbound: `by-address` (destination not an \
              outside address) or `by-port` (received on one of `inside_ports`)",
    },
    Param {
        name: "inside_ports",
        doc: "Rx port indices facing the inside (`direction = \"by-port\"`), each < 64",
    },
    Param {
        name: "outside_ports",
        doc: "Rx port indices facing the outside (`direction = \"by-port\"`), each < 64; \
              unset: every port that is not inside",
    },
    Param {
        name: "inside_prefixes",
        doc: "inside address prefixes (`by-address`): tell a hairpinned packet (inside host to \
              an outside address) from an inbound one",
    },
    Param {
        name: "mapping",
        doc: "`endpoint-independent` (one outside endpoint per inside endpoint, RFC 4787 \
              REQ-1) or `endpoint-dependent` (one outside port per session)",
    },
    Param {
        name: "filtering",
        doc: "inbound packets without a session: `endpoint-independent`, `address-dependent` \
              or `address-and-port-dependent`; unset: endpoint-independent with \
              endpoint-independent mapping, address-and-port-dependent otherwise (the only one \
              endpoint-dependent mapping allows)",
    },
    Param {
        name: "hairpinning",
        doc: "translate packets between two inside hosts through their outside endpoints \
              (RFC 4787 REQ-9)",
    },
    Param {
        name: "subscriber_port_limit",
        doc: "outside ports one inside address may hold (each worker enforces \
              `ceil(limit / workers)`), 0: no limit; refused flows drop as `subscriber_limit`",
    },
    Param {
        name: "subscriber_session_limit",
        doc: "sessions one inside address may hold (per worker as above), 0: no limit",
    },
    Param {
        name: "port_preservation",
        doc: "keep the inside port when it is free in the worker's range",
    },
    Param {
        name: "port_parity",
        doc: "give an outside port of the inside port's parity (RFC 4787 REQ-4)",
    },
    Param {
        name: "port_reuse_hold_s",
        doc: "seconds a released outside port is kept from other subscribers (RFC 6888 \
              REQ-8), 0..=2000000",
    },
    Param {
        name: "full_policy",
        doc: "a new session with no room: `drop` (as `table_full`) or `evict` an expired, held \
              or transitory session (never an established or live UDP/ICMP one)",
    },
    Param {
        name: "evict_scan",
        doc: "sessions examined per eviction, 1..=1024",
    },
    Param {
        name: "udp_timeout_s",
        doc: "UDP idle timeout in seconds, 1..=2000000",
    },
    Param {
        name: "tcp_established_timeout_s",
        doc: "established TCP idle timeout in seconds, 1..=2000000",
    },
    Param {
        name: "tcp_transitory_timeout_s",
        doc: "sets both TCP transitory timeouts (opening and closing) in seconds, \
              1..=2000000; unset: 240",
    },
    Param {
        name: "tcp_opening_timeout_s",
        doc: "TCP opening idle timeout (SYN seen, handshake incomplete) in seconds; unset: \
              `tcp_transitory_timeout_s`",
    },
    Param {
        name: "tcp_closing_timeout_s",
        doc: "TCP closing idle timeout (FIN both ways, or RST) in seconds; unset: \
              `tcp_transitory_timeout_s`",
    },
    Param {
        name: "icmp_timeout_s",
        doc: "ICMP query idle timeout in seconds, 1..=2000000",
    },
    Param {
        name: "ip_options",
        doc: "packets with IPv4 options: `translate` or `drop` (as `ip_options`)",
    },
    Param {
        name: "decrement_ttl",
        doc: "decrement TTL, dropping TTL <= 1 as `ttl_expired`",
    },
    Param {
        name: "verify_checksums",
        doc: "debug: verify every translated frame by full checksum recomputation (slow)",
    },
    Param {
        name: "scan_per_burst",
        doc: "sessions (and mappings on hold) examined for expiry per burst",
    },
    Param {
        name: "port_attempts",
        doc: "random ports tried per new mapping (after the preserved one) before \
              `port_exhausted`, 1..=1024",
    },
    Param {
        name: "fragment_contexts",
        doc: "fragmented datagrams tracked at once per worker (virtual reassembly), \
              1..=1048576",
    },
    Param {
        name: "fragment_timeout_ms",
        doc: "how long a datagram's later fragments are matched to its first fragment, ms, \
              1..=60000",
    },
    Param {
        name: "fragments_held",
        doc: "fragments held per worker while they wait for their first fragment, 0..=256",
    },
    Param {
        name: "seed",
        doc: "hash seed (mixed with the worker index)",
    },
    Param {
        name: "log_ipfix",
        doc: "IPFIX collector `address:port` for NAT event logging (RFC 7011 messages, RFC 8158 \
              elements: session create and delete, ports exhausted); unset: no logging; \
              docs/operating-nat-logging.md",
    },
    Param {
        name: "log_flush_ms",
        doc: "the most a logged event waits before it is sent (after the next burst), ms, \
              1..=60000",
    },
    Param {
        name: "log_exhaustion_per_s",
        doc: "port-exhaustion records logged per second per worker (the rest are counted as \
              `log.exhaustion_suppressed`)",
    },
    Param {
        name: "port_block",
        doc: "port blocks: a subscriber gets outside ports in blocks of this many consecutive \
              ports of its paired address, logged once per block allocated and released \
              (natEvent 16/17) instead of per session; 0: per-mapping allocation; needs \
              endpoint-independent mapping",
    },
    Param {
        name: "port_block_limit",
        doc: "blocks one inside address may hold on a worker (`port_block`), at least 1; \
              more mappings drop as `subscriber_limit`",
    },
    Param {
        name: "spare_ips",
        doc: "outside addresses or prefixes that are out of service at start and may be added \
              at run time (`dataplane ctl nat pool add <ip>`); steered and sized from the \
              start; disjoint from `nat_ips`",
    },
    Param {
        name: "deterministic",
        doc: "deterministic NAT (RFC 7422): every address of `subscriber_prefixes` gets a \
              computed outside address and port range per worker, so nothing per session is \
              logged; `dataplane nat-lookup` maps back offline; needs endpoint-independent \
              mapping, no `port_block`, no `spare_ips`",
    },
    Param {
        name: "subscriber_prefixes",
        doc: "with `deterministic`: the inside prefixes mapped, in order (subscriber `i` of \
              them shares outside address `i / ratio` with `ratio - 1` others)",
    },
    Param {
        name: "instance",
        doc: "this instance's index, 0..`instances`",
    },
    Param {
        name: "instances",
        doc: "NAT instances sharing the pool (behind ECMP), at least 1: instance `k` takes the \
              `k`-th of `instances` contiguous shares of `nat_ips` (and of `spare_ips`), so \
              their outside addresses and ports never meet",
    },
];

/// The default TCP transitory timeout (RFC 5382 REQ-5's minimum, VPP's default), seconds.
pub const TCP_TRANSITORY_S: u32 = 240;

impl Default for NatConfig {
    fn default() -> Self {
        Self {
            nat_ip: "10.0.0.1".into(),
            nat_ips: None,
            port_min: 1024,
            port_max: 65535,
            flows: 10_000_000,
            direction: DirectionPolicy::ByAddress,
            inside_ports: vec![0],
            outside_ports: vec![],
            inside_prefixes: vec![
                "10.0.0.0/8".into(),
                "172.16.0.0/12".into(),
                "192.168.0.0/16".into(),
                "100.64.0.0/10".into(),
            ],
            mapping: Mapping::EndpointIndependent,
            filtering: None,
            hairpinning: true,
            subscriber_port_limit: 0,
            subscriber_session_limit: 0,
            port_preservation: true,
            port_parity: false,
            port_reuse_hold_s: 120,
            full_policy: FullPolicy::Drop,
            evict_scan: 16,
            udp_timeout_s: 300,
            tcp_established_timeout_s: 7440,
            tcp_transitory_timeout_s: None,
            tcp_opening_timeout_s: None,
            tcp_closing_timeout_s: None,
            icmp_timeout_s: 60,
            ip_options: OptionsPolicy::Translate,
            decrement_ttl: false,
            verify_checksums: false,
            scan_per_burst: 32,
            port_attempts: 16,
            fragment_contexts: 1024,
            fragment_timeout_ms: 1000,
            fragments_held: 64,
            seed: 0x6e6d_6470_6e61_7400,
            log_ipfix: None,
            log_flush_ms: 100,
            log_exhaustion_per_s: 10,
            port_block: 0,
            port_block_limit: 8,
            spare_ips: None,
            deterministic: false,
            subscriber_prefixes: vec![],
            instance: 0,
            instances: 1,
        }
    }
}

/// An IPv4 prefix: `(base, mask)` with `base & !mask == 0`.
pub type Prefix = (u32, u32);

/// Parses `"a.b.c.d"` or `"a.b.c.d/len"` from key `key`.
pub fn parse_prefix(key: &str, s: &str) -> Result<Prefix, String> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => {
            let len: u32 = l.parse().ok().filter(|&n| n <= 32).ok_or_else(|| {
                bad_param(
                    NAME,
                    key,
                    format!("`{s}`: the prefix length must be 0..=32"),
                )
            })?;
            (a, len)
        }
        None => (s, 32),
    };
    let base = parse_ipv4(NAME, key, addr)?;
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    if base & !mask != 0 {
        return Err(bad_param(
            NAME,
            key,
            format!("`{s}` has host bits set (did you mean {}?)", {
                let b = std::net::Ipv4Addr::from(base & mask);
                format!("{b}/{len}")
            }),
        ));
    }
    Ok((base, mask))
}

/// The checked, converted parameters the NAT runs with.
#[derive(Clone, Debug)]
pub(super) struct Settings {
    /// This instance's share of the outside pool as prefixes, in config order, no overlaps.
    pub pool: Vec<Prefix>,
    /// This instance's share of the spare addresses (out of service at start).
    pub spare: Vec<Prefix>,
    /// With `deterministic`: the subscriber prefixes, in order.
    pub deterministic: Option<Vec<Prefix>>,
    pub inside_prefixes: Vec<Prefix>,
    pub filtering: Filtering,
    pub timeouts: Timeouts,
    pub hold_ms: u32,
    pub fragment_timeout_ms: u32,
    /// Where NAT events are logged over IPFIX.
    pub log_ipfix: Option<std::net::SocketAddr>,
}

/// Timeouts in ms by session state.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeouts {
    pub udp: u32,
    pub icmp: u32,
    pub tcp_est: u32,
    pub tcp_opening: u32,
    pub tcp_closing: u32,
}

/// The most outside addresses a pool may have (a /16).
pub const MAX_POOL: u64 = 1 << 16;

impl NatConfig {
    /// Checks the parameters and converts them (every error names the key and what is
    /// allowed). `explicit_nat_ip`: whether the config set `nat_ip` itself (then `nat_ips` must
    /// be absent).
    pub(super) fn check(&self, explicit_nat_ip: bool) -> Result<Settings, String> {
        let pool_entries: Vec<(&str, &str)> = match &self.nat_ips {
            Some(list) => {
                if explicit_nat_ip {
                    return Err(bad_param(
                        NAME,
                        "nat_ips",
                        "set either `nat_ip` (one address) or `nat_ips` (a pool), not both",
                    ));
                }
                list.entries().into_iter().map(|e| ("nat_ips", e)).collect()
            }
            None => vec![("nat_ip", self.nat_ip.as_str())],
        };
        if pool_entries.is_empty() {
            return Err(bad_param(NAME, "nat_ips", "needs at least one address"));
        }
        let spare_entries: Vec<(&str, &str)> = self
            .spare_ips
            .as_ref()
            .map(|l| l.entries().into_iter().map(|e| ("spare_ips", e)).collect())
            .unwrap_or_default();
        let mut all = Vec::new();
        let mut total = 0u64;
        for (key, e) in pool_entries.iter().chain(&spare_entries) {
            let p = if *key == "nat_ip" {
                (parse_ipv4(NAME, key, e)?, u32::MAX)
            } else {
                parse_prefix(key, e)?
            };
            if let Some(q) = all.iter().find(|q: &&Prefix| overlap(**q, p)) {
                return Err(bad_param(
                    NAME,
                    key,
                    format!(
                        "`{e}` overlaps {}/{} (every outside address once, in `nat_ips` or \
                         `spare_ips`)",
                        std::net::Ipv4Addr::from(q.0),
                        q.1.count_ones()
                    ),
                ));
            }
            total += u64::from(!p.1) + 1;
            all.push(p);
        }
        if total > MAX_POOL {
            return Err(bad_param(
                NAME,
                if spare_entries.is_empty() {
                    "nat_ips"
                } else {
                    "spare_ips"
                },
                format!("{total} addresses with the spares; at most {MAX_POOL} (a /16)"),
            ));
        }
        let spare_all = all.split_off(pool_entries.len());
        if self.instances == 0 {
            return Err(bad_param(NAME, "instances", "must be at least 1"));
        }
        if self.instance >= self.instances {
            return Err(bad_param(
                NAME,
                "instance",
                format!(
                    "{} is out of range; allowed 0..{} (`instances`)",
                    self.instance, self.instances
                ),
            ));
        }
        let pool = share(&all, self.instance, self.instances);
        if pool.is_empty() {
            return Err(bad_param(
                NAME,
                "instances",
                format!(
                    "{} instances need at least one outside address each; `nat_ips` has {}: \
                     return traffic is routed by address, so instances cannot share one",
                    self.instances,
                    prefix_addresses(&all)
                ),
            ));
        }
        let spare = share(&spare_all, self.instance, self.instances);
        let deterministic = if self.deterministic {
            let why = if self.mapping != Mapping::EndpointIndependent {
                Some("needs `mapping = \"endpoint-independent\"`")
            } else if self.port_block > 0 {
                Some("and `port_block` exclude each other (both decide a subscriber's ports)")
            } else if self.spare_ips.is_some() {
                Some(
                    "cannot have `spare_ips`: a pool change would re-map every subscriber and \
                     make past mappings unanswerable",
                )
            } else if self.subscriber_prefixes.is_empty() {
                Some("needs `subscriber_prefixes` (the inside prefixes it maps)")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(bad_param(NAME, "deterministic", why));
            }
            let mut subs: Vec<Prefix> = Vec::new();
            for e in &self.subscriber_prefixes {
                let p = parse_prefix("subscriber_prefixes", e)?;
                if subs.iter().any(|q| overlap(*q, p)) {
                    return Err(bad_param(
                        NAME,
                        "subscriber_prefixes",
                        format!("`{e}` overlaps an earlier prefix (every subscriber once)"),
                    ));
                }
                subs.push(p);
            }
            Some(subs)
        } else {
            None
        };
        let inside_prefixes = self
            .inside_prefixes
            .iter()
            .map(|s| parse_prefix("inside_prefixes", s))
            .collect::<Result<Vec<_>, _>>()?;
        let filtering = match (self.mapping, self.filtering) {
            (Mapping::EndpointIndependent, f) => f.unwrap_or(Filtering::EndpointIndependent),
            (Mapping::EndpointDependent, None | Some(Filtering::AddressAndPortDependent)) => {
                Filtering::AddressAndPortDependent
            }
            (Mapping::EndpointDependent, Some(f)) => {
                return Err(bad_param(
                    NAME,
                    "filtering",
                    format!(
                        "`{}` needs `mapping = \"endpoint-independent\"`: an endpoint-dependent \
                         mapping belongs to one remote endpoint, so it filters \
                         address-and-port-dependent only",
                        f.as_str()
                    ),
                ));
            }
        };
        if self.port_attempts == 0 || self.port_attempts > 1024 {
            return Err(bad_param(
                NAME,
                "port_attempts",
                "must be 1..=1024 (ports probed per new mapping: bounded work per packet)",
            ));
        }
        if self.evict_scan == 0 || self.evict_scan > 1024 {
            return Err(bad_param(NAME, "evict_scan", "must be 1..=1024"));
        }
        if self.fragment_contexts == 0 || self.fragment_contexts > 1 << 20 {
            return Err(bad_param(NAME, "fragment_contexts", "must be 1..=1048576"));
        }
        if self.fragment_timeout_ms == 0 || self.fragment_timeout_ms > 60_000 {
            return Err(bad_param(NAME, "fragment_timeout_ms", "must be 1..=60000"));
        }
        if self.fragments_held as usize > dataplane::MAX_BURST {
            return Err(bad_param(
                NAME,
                "fragments_held",
                format!("must be 0..={}", dataplane::MAX_BURST),
            ));
        }
        let log_ipfix = match &self.log_ipfix {
            None => None,
            Some(a) => Some(a.parse::<std::net::SocketAddr>().map_err(|_| {
                bad_param(
                    NAME,
                    "log_ipfix",
                    format!("`{a}` is not an `address:port` (e.g. \"127.0.0.1:4739\")"),
                )
            })?),
        };
        if self.port_block > 0 && self.mapping != Mapping::EndpointIndependent {
            return Err(bad_param(
                NAME,
                "port_block",
                "needs `mapping = \"endpoint-independent\"` (a block holds a subscriber's \
                 mappings, each exclusive to it)",
            ));
        }
        if self.port_block > 65535 {
            return Err(bad_param(NAME, "port_block", "must be 0..=65535"));
        }
        if self.port_block_limit == 0 {
            return Err(bad_param(NAME, "port_block_limit", "must be at least 1"));
        }
        if self.log_flush_ms == 0 || self.log_flush_ms > 60_000 {
            return Err(bad_param(NAME, "log_flush_ms", "must be 1..=60000"));
        }
        let transitory = self.tcp_transitory_timeout_s.unwrap_or(TCP_TRANSITORY_S);
        let (open_key, open_s) = match self.tcp_opening_timeout_s {
            Some(s) => ("tcp_opening_timeout_s", s),
            None => ("tcp_transitory_timeout_s", transitory),
        };
        let (close_key, close_s) = match self.tcp_closing_timeout_s {
            Some(s) => ("tcp_closing_timeout_s", s),
            None => ("tcp_transitory_timeout_s", transitory),
        };
        let timeouts = Timeouts {
            udp: timeout_ms(NAME, "udp_timeout_s", self.udp_timeout_s, false)?,
            icmp: timeout_ms(NAME, "icmp_timeout_s", self.icmp_timeout_s, false)?,
            tcp_est: timeout_ms(
                NAME,
                "tcp_established_timeout_s",
                self.tcp_established_timeout_s,
                false,
            )?,
            tcp_opening: timeout_ms(NAME, open_key, open_s, false)?,
            tcp_closing: timeout_ms(NAME, close_key, close_s, false)?,
        };
        Ok(Settings {
            pool,
            spare,
            deterministic,
            inside_prefixes,
            filtering,
            timeouts,
            hold_ms: timeout_ms(NAME, "port_reuse_hold_s", self.port_reuse_hold_s, true)?,
            fragment_timeout_ms: self.fragment_timeout_ms,
            log_ipfix,
        })
    }
}

/// Addresses in `prefixes`.
pub(super) fn prefix_addresses(prefixes: &[Prefix]) -> u64 {
    prefixes.iter().map(|p| u64::from(!p.1) + 1).sum()
}

/// Instance `k`'s share of `prefixes` (of `n` instances): the `k`-th of `n` contiguous runs of
/// their addresses in order (`A * k / n .. A * (k + 1) / n`), as prefixes again.
pub(super) fn share(prefixes: &[Prefix], k: u32, n: u32) -> Vec<Prefix> {
    if n <= 1 {
        return prefixes.to_vec();
    }
    let total = prefix_addresses(prefixes);
    let (from, to) = (
        total * u64::from(k) / u64::from(n),
        total * u64::from(k + 1) / u64::from(n),
    );
    let mut out = Vec::new();
    let mut at = 0u64;
    for &(base, mask) in prefixes {
        let size = u64::from(!mask) + 1;
        let (lo, hi) = (from.max(at), to.min(at + size));
        if lo < hi {
            let first = u64::from(base) + (lo - at);
            out.extend(range_prefixes(first, first + (hi - lo)));
        }
        at += size;
    }
    out
}

/// The aligned prefixes covering addresses `lo..hi` exactly.
fn range_prefixes(mut lo: u64, hi: u64) -> Vec<Prefix> {
    let mut out = Vec::new();
    while lo < hi {
        let mut size = if lo == 0 {
            1u64 << 32
        } else {
            1u64 << lo.trailing_zeros()
        };
        while lo + size > hi {
            size >>= 1;
        }
        let bits = size.trailing_zeros();
        let mask = if bits >= 32 { 0 } else { u32::MAX << bits };
        out.push((lo as u32, mask));
        lo += size;
    }
    out
}

/// True when two prefixes share an address.
fn overlap(a: Prefix, b: Prefix) -> bool {
    let m = a.1 & b.1;
    a.0 & m == b.0 & m
}
