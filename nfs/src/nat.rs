//! Source NAT (NAPT44) with per-core port ranges, endpoint-dependent mappings, TCP/UDP/ICMP and
//! incremental checksums.
//!
//! # Model
//!
//! - **Outbound** (inside -> outside): the source address becomes the NAT address (default
//!   10.0.0.1, the paper's `FlowIPNAT(SIP 10.0.0.1)`) and the source port (ICMP query
//!   identifier) a port from this core's slice of `port_min..=port_max` (1024-65535 split evenly
//!   over the workers; worker `w` takes the `w`-th slice, the last one also the remainder).
//! - **Inbound** (outside -> inside): replies to the NAT address whose 5-tuple matches a session
//!   are translated back; anything else is dropped as `no_mapping`.
//! - **Direction**: `direction = "by-address"` (default) treats packets whose destination is the
//!   NAT address as inbound and everything else as outbound. `direction = "by-port"` treats
//!   packets received on one of `inside_ports` (rx port index, [`Burst::rx_port`]) as outbound and
//!   the rest as inbound. Outbound packets addressed to the NAT address itself (hairpinning) are
//!   not supported and dropped as `policy` (`hairpin_dropped`). With `outside_ports` as well, only
//!   those ports are outside: a packet received on a port that is neither inside nor outside is
//!   left untouched for the next stage (`route` forwards it or drops it with a reason) and
//!   counted as `passed`. The NAT owns its address on the outside ports (or, without
//!   `outside_ports`, on every port whose subnet holds it): the ports answer ARP for it.
//! - **In a routed run** (the run has a network layer, [`dataplane::net`]) the NAT leaves two
//!   kinds of packets to the `route` stage untranslated, as Linux routes before it source-NATs:
//!   packets from the inside to one of the ports' own addresses (a ping to the router), and
//!   packets whose TTL is about to expire (the ICMP time exceeded then quotes the packet the
//!   sender sent). Both count as `passed`.
//! - **Drop reasons** of its own, registered when a NAT is built: `no_mapping` (an inbound packet
//!   without a session) and `port_exhausted` (no free outside port for a new session).
//! - **Mappings are endpoint-dependent** (like VPP NAT44-ED): one session per inside 5-tuple,
//!   keyed in the flow table twice (outbound key = inside 5-tuple, inbound key = the reply's
//!   5-tuple), which is the "two cache entries per flow" of the paper's NAT. An outside port is
//!   unique per (remote address, remote port, protocol), so one port serves many remote
//!   endpoints and a core can hold far more sessions than it has ports. Port allocation walks
//!   the core's slice round robin (as FastClick's FIFO) and takes the first port whose inbound
//!   key is free, trying at most `port_attempts` ports; failure is `port_exhausted`. Freed ports
//!   are reused as soon as their session is gone.
//! - **Sessions** live in a preallocated pool (32 B each: inside 5-tuple, NAT port, precomputed
//!   IP and L4 checksum deltas (VPP's `l3_csum_delta`/`l4_csum_delta`), state, deadline; 32-byte
//!   aligned, one cache line access). Memory per session: 32 B + two flow-table keys at 34 B per
//!   slot and 1.11-2.22 slots per key: 108-183 B. No allocation after construction. The pool and
//!   the table are [`nicmem::HugeArray`]s (2 MiB pages where the machine has them, zero-filled by
//!   the kernel as they are first touched), and sessions are handed out from a high-water mark
//!   before the free list has any, so building a 10 M-session NAT writes none of its 1.5 GB.
//! - **Per burst**: the headers are parsed with a prefetch a few packets ahead, the flow keys of
//!   the whole burst (up to [`BULK`]) are hashed and looked up in bulk, the sessions behind the
//!   hits are prefetched together, and then every packet is rewritten in order.
//! - **Timeouts** (VPP's defaults, RFC 4787/5382/5508): UDP 300 s, TCP established 7440 s, TCP
//!   transitory 240 s, ICMP 60 s. Expiry is lazy (a lookup that finds an expired session frees it
//!   and proceeds as a miss) plus an incremental scan of `scan_per_burst` sessions per burst.
//! - **TCP state**: RST -> transitory; FIN seen in both directions -> transitory; packets seen in
//!   both directions and no FIN pair/RST -> established (the SYN/SYN-ACK exchange gets there);
//!   otherwise transitory (a connection picked up mid-stream becomes established at its first
//!   reply). An outbound SYN on a closing/reset session reopens it.
//! - **ICMP**: query messages (echo, timestamp, ...) use the identifier as the port. Errors
//!   (destination unreachable, time exceeded, parameter problem, source quench, redirect) are
//!   matched by their embedded header and translated: outer address, embedded address and
//!   port/identifier, embedded IP checksum, embedded L4 checksum (UDP and ICMP always; TCP only
//!   if its checksum field is inside the header segment and the message), outer ICMP checksum
//!   and outer IP checksum, all incrementally. With the default 64 B split offset an error's
//!   embedded L4 bytes (at offset 62..70) do not fit the header segment, so errors are dropped
//!   as truncated and counted as `header_segment_short`; use a split offset of 72 B or more
//!   (mlx5 inline sizes round to 18 + 16k: 82 B) to translate them.
//!
//! # Malformed input (each a counted drop, never a panic)
//!
//! Parsing is [`wire::classify::parse`]: truncated frames and headers outside the header segment
//! -> `truncated` (+ `header_segment_short` for the latter); bad IHL/total length/TCP data
//! offset/UDP length -> `malformed`; non-IPv4 -> `not_ipv4`; other L4 protocols and ICMP types
//! that are neither queries nor errors -> `unsupported_protocol`.
//! - **IP options**: `ip_options = "translate"` (default) translates packets with options
//!   whenever the whole IPv4 header and the L4 header fit the header segment (the rewrite only
//!   touches fixed fields); `"drop"` drops them as `ip_options`.
//! - **Fragments**: first fragments (offset 0, MF set) carry the ports and are translated like
//!   any packet (the incremental L4 checksum update is valid for the whole datagram). Later
//!   fragments carry no ports and would need virtual reassembly; they are dropped as `fragment`
//!   (`fragments_dropped`), as Katran does.
//! - **TTL**: the paper's pipeline decrements TTL (IPOutputCombo) before the NF, so by default
//!   the NAT leaves TTL alone (TTL 0 and 1 pass through unchanged). With `decrement_ttl = true`
//!   a packet with TTL <= 1 is dropped as `ttl_expired` (no ICMP time-exceeded is generated) and
//!   others leave with TTL - 1 and an incrementally updated IP checksum.
//!
//! `verify_checksums = true` (debug) re-verifies every translated frame by full recomputation
//! through the counted slow path ([`crate::verify::ChecksumVerifier`]).
#![forbid(unsafe_code)]

use dataplane::{Burst, DropCounts, DropReason, NetworkFunction, NfContext, PREFETCH_AHEAD};
use nicmem::{Align32, HugeArray};
use serde::{Deserialize, Serialize};
use wire::checksum::{CsumDelta, update16};
use wire::classify::{Frag, L4, ParseError, Parsed, parse};
use wire::field::{read_u16, read_u32, write_u16, write_u32};
use wire::icmpv4::{ICMP_HLEN, icmp_is_error, icmp_is_query};
use wire::ipv4::{IPV4_HLEN, PROTO_ICMP, PROTO_TCP, PROTO_UDP};
use wire::tcp::{TCP_FIN, TCP_RST, TCP_SYN};

use crate::flow_table::{BULK, FlowKey, FlowTable, FullPolicy, NO_SLOT, ms_ticks};
use crate::params::{bad_param, mix_seed, parse_ipv4, parse_params, timeout_ms};
use crate::registry::{
    BuildContext, Memory, NfSpec, Param, Reason, defaults_of, drop_counters, register_reason,
};
use crate::verify::ChecksumVerifier;

/// Name of this NF in configs.
pub const NAME: &str = "nat";

/// Drop reason: an inbound packet without a session.
const NO_MAPPING: Reason = (
    "no_mapping",
    "an inbound packet that matches no NAT session",
);
/// Drop reason: no free outside port for a new session.
const PORT_EXHAUSTED: Reason = (
    "port_exhausted",
    "no free outside port for a new NAT session",
);

/// The registration of `nat`.
pub const SPEC: NfSpec = NfSpec {
    name: NAME,
    aliases: &[],
    summary: "Source NAT (NAPT44): inside flows leave from the NAT address and a port of the \
              worker's slice, replies are translated back; UDP, TCP, ICMP queries and errors, \
              incremental checksums (RFC 1624).",
    params: &[
        Param {
            name: "nat_ip",
            doc: "outside (NAT) address (dotted quad)",
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
            doc: "which packets are outbound: `by-address` (destination is not the NAT address) \
                  or `by-port` (received on one of `inside_ports`)",
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
            name: "full_policy",
            doc: "a new session with no room in the table: `drop` or `evict`",
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
            doc: "transitory TCP (opening, closing, reset) idle timeout in seconds, 1..=2000000",
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
            doc: "sessions examined for expiry per burst",
        },
        Param {
            name: "port_attempts",
            doc: "ports tried per new session before `port_exhausted`, at least 1",
        },
        Param {
            name: "seed",
            doc: "hash seed (mixed with the worker index)",
        },
    ],
    defaults: defaults_of::<NatConfig>,
    drop_reasons: &[NO_MAPPING, PORT_EXHAUSTED],
    build,
    memory,
};

fn build(params: &toml::Table, ctx: &BuildContext) -> Result<Box<dyn NetworkFunction>, String> {
    let mut nat = Nat::from_params(params, ctx.worker, ctx.workers)?;
    if let Some(net) = &ctx.net {
        nat.local = Some(
            net.ports()
                .iter()
                .filter_map(|p| Some(p.ip?.addr))
                .collect(),
        );
    }
    Ok(Box::new(nat))
}

/// Bytes of one session record plus its free-list entry (32 B sessions, `u32` indices).
const SESSION_BYTES: u64 = 32 + 4;

fn memory(params: &toml::Table, ctx: &BuildContext) -> Option<Memory> {
    let c: NatConfig = parse_params(NAME, params).ok()?;
    let sessions = c.flows.div_ceil(u64::from(ctx.workers.max(1)));
    let table = FlowTable::<u32>::memory_for(sessions.saturating_mul(2) as usize);
    Some(Memory {
        key: "flows",
        value: c.flows.to_string(),
        bytes: table.saturating_add(sessions.saturating_mul(SESSION_BYTES)),
    })
}

/// How the NAT decides whether a packet is outbound or inbound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirectionPolicy {
    /// Destination == NAT address -> inbound, else outbound.
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

/// NAT parameters (the `[[nf]]` table of a pipeline config). Defaults are the paper's setup and
/// VPP's timeouts.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatConfig {
    /// Outside (NAT) address.
    pub nat_ip: String,
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
    /// When no session fits: `drop` (count `table_full`) or `evict` the least recently used
    /// session among the candidate buckets.
    pub full_policy: FullPolicy,
    /// UDP idle timeout, seconds.
    pub udp_timeout_s: u32,
    /// TCP established idle timeout, seconds.
    pub tcp_established_timeout_s: u32,
    /// TCP transitory (opening, closing, reset) idle timeout, seconds.
    pub tcp_transitory_timeout_s: u32,
    /// ICMP query idle timeout, seconds.
    pub icmp_timeout_s: u32,
    /// IPv4 options policy.
    pub ip_options: OptionsPolicy,
    /// Decrement TTL (and drop TTL <= 1).
    pub decrement_ttl: bool,
    /// Debug: verify every translated frame by full checksum recomputation (slow path).
    pub verify_checksums: bool,
    /// Sessions examined for expiry per burst.
    pub scan_per_burst: u32,
    /// Ports tried per new session before `port_exhausted`.
    pub port_attempts: u32,
    /// Hash seed (mixed with the worker index).
    pub seed: u64,
}

impl Default for NatConfig {
    fn default() -> Self {
        Self {
            nat_ip: "10.0.0.1".into(),
            port_min: 1024,
            port_max: 65535,
            flows: 10_000_000,
            direction: DirectionPolicy::ByAddress,
            inside_ports: vec![0],
            outside_ports: vec![],
            full_policy: FullPolicy::Drop,
            udp_timeout_s: 300,
            tcp_established_timeout_s: 7440,
            tcp_transitory_timeout_s: 240,
            icmp_timeout_s: 60,
            ip_options: OptionsPolicy::Translate,
            decrement_ttl: false,
            verify_checksums: false,
            scan_per_burst: 32,
            port_attempts: 64,
            seed: 0x6e6d_6470_6e61_7400,
        }
    }
}

const ST_FREE: u8 = 0;
const ST_UDP: u8 = 1;
const ST_ICMP: u8 = 2;
const ST_TCP_TRANSITORY: u8 = 3;
const ST_TCP_ESTABLISHED: u8 = 4;

const F_SEEN_OUT: u8 = 0x01;
const F_SEEN_IN: u8 = 0x02;
const F_FIN_OUT: u8 = 0x04;
const F_FIN_IN: u8 = 0x08;
const F_RST: u8 = 0x10;

/// One translation session, as the NAT works with it (stored as a [`RawSession`]).
#[derive(Clone, Copy, Debug, Default)]
struct Session {
    /// Inside 5-tuple: inside address/port -> remote address/port (ICMP: identifier, 0).
    out_key: FlowKey,
    /// Expiry time, ms ticks.
    deadline: u32,
    /// Outside port (ICMP identifier).
    nat_port: u16,
    /// Outbound IPv4 header checksum delta (source address rewrite).
    ip_delta: u16,
    /// Outbound L4 checksum delta (pseudo-header + port; ICMP: identifier only).
    l4_delta: u16,
    state: u8,
    tcp: u8,
}

/// A session as stored: the fields of [`Session`] in a zeroable form, 32 B aligned so it never
/// straddles a cache line. All-zero is a free session (`ST_FREE`).
type RawSession = Align32<((u64, u64), u32, u16, u16, u16, u8, u8)>;

impl Session {
    #[inline(always)]
    fn to_raw(self) -> RawSession {
        let (a, b) = self.out_key.words();
        Align32((
            (a, b),
            self.deadline,
            self.nat_port,
            self.ip_delta,
            self.l4_delta,
            self.state,
            self.tcp,
        ))
    }

    #[inline(always)]
    fn from_raw(r: &RawSession) -> Self {
        let ((a, b), deadline, nat_port, ip_delta, l4_delta, state, tcp) = r.0;
        Session {
            out_key: FlowKey::from_words(a, b),
            deadline,
            nat_port,
            ip_delta,
            l4_delta,
            state,
            tcp,
        }
    }
}

/// The session pool: a zeroed array (free sessions) handed out from a high-water mark, then
/// from a free list of released indices (most recently released first).
struct Sessions {
    slots: HugeArray<RawSession>,
    /// Released indices; its capacity is the pool size, so pushing never allocates.
    free: Vec<u32>,
    /// Indices below this have been handed out at least once.
    high_water: u32,
}

impl Sessions {
    fn new(n: usize) -> Result<Self, String> {
        Ok(Self {
            slots: HugeArray::zeroed(n)
                .map_err(|e| bad_param(NAME, "flows", format!("session pool: {e}")))?,
            free: Vec::with_capacity(n),
            high_water: 0,
        })
    }

    #[inline(always)]
    fn get(&self, idx: u32) -> Session {
        Session::from_raw(&self.slots[idx as usize])
    }

    #[inline(always)]
    fn set(&mut self, idx: u32, s: &Session) {
        self.slots[idx as usize] = s.to_raw();
    }

    fn set_state(&mut self, idx: u32, state: u8) {
        self.slots[idx as usize].0.5 = state;
    }

    /// A free index, lowest never-used ones first, or `None` when every session is in use.
    fn alloc(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        let i = self.high_water;
        if (i as usize) < self.slots.len() {
            self.high_water += 1;
            Some(i)
        } else {
            None
        }
    }

    fn release(&mut self, idx: u32) {
        self.set_state(idx, ST_FREE);
        self.free.push(idx);
    }
}

/// The drop reasons the NAT registers (see the module docs).
#[derive(Clone, Copy, Debug)]
struct Reasons {
    no_mapping: DropReason,
    port_exhausted: DropReason,
}

/// Timeouts in ms by session state.
#[derive(Clone, Copy, Debug)]
struct Timeouts {
    udp: u32,
    icmp: u32,
    tcp_est: u32,
    tcp_trans: u32,
}

impl Timeouts {
    #[inline(always)]
    fn of(&self, state: u8) -> u32 {
        match state {
            ST_UDP => self.udp,
            ST_ICMP => self.icmp,
            ST_TCP_ESTABLISHED => self.tcp_est,
            _ => self.tcp_trans,
        }
    }
}

/// NAT counters.
#[derive(Clone, Debug, Default)]
struct Counters {
    packets: u64,
    skipped: u64,
    inbound_translated: u64,
    outbound_translated: u64,
    new_mappings: u64,
    port_exhausted: u64,
    table_full: u64,
    no_mapping: u64,
    expired: u64,
    evicted: u64,
    icmp_errors_translated: u64,
    fragments_dropped: u64,
    header_segment_short: u64,
    hairpin_dropped: u64,
    ttl_expired: u64,
    passed: u64,
    drops: DropCounts,
}

#[derive(Clone, Copy)]
enum Pending {
    /// Nothing to do (already dropped, or dropped in the first pass).
    Done,
    /// A TCP/UDP/ICMP-query packet whose key is `keys[j]`.
    Flow { p: Parsed, inbound: bool },
    /// An ICMP error, translated in the second pass.
    IcmpError { p: Parsed, inbound: bool },
}

/// The NAT network function (one instance per worker).
pub struct Nat {
    name: String,
    nat_ip: u32,
    port_lo: u16,
    port_hi: u16,
    port_cursor: u16,
    port_attempts: u32,
    direction: DirectionPolicy,
    inside_mask: u64,
    /// Ports that face the outside; 0: every port that is not inside.
    outside_mask: u64,
    /// In a routed run, the ports' own addresses (see the module docs).
    local: Option<Vec<u32>>,
    ip_options: OptionsPolicy,
    decrement_ttl: bool,
    timeouts: Timeouts,
    scan_per_burst: usize,
    scan_cursor: usize,
    table: FlowTable<u32>,
    sessions: Sessions,
    active: usize,
    reasons: Reasons,
    verifier: Option<ChecksumVerifier>,
    c: Counters,
    pending: Vec<Pending>,
    keys: Vec<FlowKey>,
    hashes: Vec<u64>,
    slots: Vec<u32>,
}

impl Nat {
    /// Builds worker `worker`'s instance (of `workers`) from a parameter table.
    pub fn from_params(params: &toml::Table, worker: u16, workers: u16) -> Result<Self, String> {
        let cfg: NatConfig = parse_params(NAME, params)?;
        Self::new(&cfg, worker, workers)
    }

    /// Builds worker `worker`'s instance (of `workers`) from a config.
    pub fn new(cfg: &NatConfig, worker: u16, workers: u16) -> Result<Self, String> {
        let workers = workers.max(1);
        if worker >= workers {
            return Err(format!(
                "{NAME}: worker {worker} out of range (workers = {workers})"
            ));
        }
        let nat_ip = parse_ipv4(NAME, "nat_ip", &cfg.nat_ip)?;
        if cfg.port_min == 0 || cfg.port_min > cfg.port_max {
            return Err(bad_param(
                NAME,
                "port_min",
                format!(
                    "need 1 <= port_min <= port_max (got {}..{})",
                    cfg.port_min, cfg.port_max
                ),
            ));
        }
        let total = u32::from(cfg.port_max) - u32::from(cfg.port_min) + 1;
        let per = total / u32::from(workers);
        if per == 0 {
            return Err(bad_param(
                NAME,
                "port_max",
                format!("{total} ports cannot be split over {workers} workers"),
            ));
        }
        let lo = u32::from(cfg.port_min) + per * u32::from(worker);
        let hi = if worker + 1 == workers {
            u32::from(cfg.port_max)
        } else {
            lo + per - 1
        };
        if cfg.flows == 0 {
            return Err(bad_param(NAME, "flows", "must be at least 1"));
        }
        let sessions = cfg.flows.div_ceil(u64::from(workers));
        if sessions > u64::from(u32::MAX / 4) {
            return Err(bad_param(
                NAME,
                "flows",
                "at most 1073741823 sessions per worker",
            ));
        }
        let sessions = sessions as usize;
        let mut inside_mask = 0u64;
        for &p in &cfg.inside_ports {
            if p >= 64 {
                return Err(bad_param(NAME, "inside_ports", "port indices must be < 64"));
            }
            inside_mask |= 1 << p;
        }
        let mut outside_mask = 0u64;
        for &p in &cfg.outside_ports {
            if p >= 64 {
                return Err(bad_param(
                    NAME,
                    "outside_ports",
                    "port indices must be < 64",
                ));
            }
            outside_mask |= 1 << p;
        }
        if inside_mask & outside_mask != 0 {
            return Err(bad_param(
                NAME,
                "outside_ports",
                "a port cannot be both inside and outside",
            ));
        }
        if cfg.port_attempts == 0 {
            return Err(bad_param(NAME, "port_attempts", "must be at least 1"));
        }
        let timeouts = Timeouts {
            udp: timeout_ms(NAME, "udp_timeout_s", cfg.udp_timeout_s, false)?,
            icmp: timeout_ms(NAME, "icmp_timeout_s", cfg.icmp_timeout_s, false)?,
            tcp_est: timeout_ms(
                NAME,
                "tcp_established_timeout_s",
                cfg.tcp_established_timeout_s,
                false,
            )?,
            tcp_trans: timeout_ms(
                NAME,
                "tcp_transitory_timeout_s",
                cfg.tcp_transitory_timeout_s,
                false,
            )?,
        };
        let reasons = Reasons {
            no_mapping: register_reason(NAME, NO_MAPPING)?,
            port_exhausted: register_reason(NAME, PORT_EXHAUSTED)?,
        };
        let table = FlowTable::try_new(
            sessions * 2,
            0,
            cfg.full_policy,
            mix_seed(cfg.seed, worker, 1),
        )
        .map_err(|e| bad_param(NAME, "flows", format!("flow table: {e}")))?;
        Ok(Self {
            name: NAME.to_string(),
            nat_ip,
            port_lo: lo as u16,
            port_hi: hi as u16,
            port_cursor: lo as u16,
            port_attempts: cfg.port_attempts,
            direction: cfg.direction,
            inside_mask,
            outside_mask,
            local: None,
            ip_options: cfg.ip_options,
            decrement_ttl: cfg.decrement_ttl,
            timeouts,
            scan_per_burst: cfg.scan_per_burst as usize,
            scan_cursor: 0,
            table,
            sessions: Sessions::new(sessions)?,
            active: 0,
            reasons,
            verifier: cfg.verify_checksums.then(ChecksumVerifier::new),
            c: Counters::default(),
            pending: Vec::with_capacity(BULK),
            keys: vec![FlowKey::default(); BULK],
            hashes: vec![0; BULK],
            slots: vec![0; BULK],
        })
    }

    /// This worker's port slice `(lo, hi)`, inclusive.
    pub fn port_range(&self) -> (u16, u16) {
        (self.port_lo, self.port_hi)
    }

    /// Active sessions.
    pub fn active_mappings(&self) -> usize {
        self.active
    }

    /// The outside `(address, port)` of the session for an inside 5-tuple, if any (for tests and
    /// for traffic generators that need the mapping to build replies).
    pub fn mapping(&self, src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Option<u16> {
        let key = FlowKey::new(src, dst, sport, dport, proto);
        let v = self.table.peek(&key)?;
        (v & 1 == 0).then(|| self.sessions.get(v >> 1).nat_port)
    }

    /// Removes every session at once, keeping the counters: the next trial of a benchmark (an
    /// RFC 2544 search) starts from an empty NAT without building or zeroing its tables again
    /// (see [`FlowTable::clear`]).
    pub fn clear(&mut self) {
        self.table.clear();
        self.sessions.free.clear();
        self.sessions.high_water = 0;
        self.active = 0;
        self.scan_cursor = 0;
    }

    /// What backs the NAT's flow table (for reports: 2 MiB pages or not).
    pub fn page_kind(&self) -> nicmem::PageKind {
        self.table.page_kind()
    }

    /// Flow-table counters (lookups, inserts, cuckoo moves, ...).
    pub fn table_stats(&self) -> crate::flow_table::FlowTableStats {
        self.table.stats()
    }

    #[inline(always)]
    fn in_key(&self, s: &Session) -> FlowKey {
        FlowKey::new(
            s.out_key.dst(),
            self.nat_ip,
            s.out_key.dport(),
            s.nat_port,
            s.out_key.proto(),
        )
    }

    #[inline(always)]
    fn is_expired(&self, s: &Session, now: u32) -> bool {
        (now.wrapping_sub(s.deadline) as i32) > 0
    }

    /// Frees a session: both keys leave the table, the index returns to the pool.
    fn free_session(&mut self, idx: u32) {
        let s = self.sessions.get(idx);
        if s.state == ST_FREE {
            return;
        }
        self.table.remove(&s.out_key);
        let ik = self.in_key(&s);
        self.table.remove(&ik);
        self.release(idx);
    }

    /// Returns a session whose table keys are already gone to the pool.
    fn release(&mut self, idx: u32) {
        self.sessions.release(idx);
        self.active -= 1;
    }

    /// Frees the session an evicted table entry belonged to (its other key is still in the
    /// table).
    fn evicted_entry(&mut self, key: FlowKey, v: u32) {
        let idx = v >> 1;
        let s = self.sessions.get(idx);
        if s.state == ST_FREE {
            return;
        }
        let other = if v & 1 == 0 {
            self.in_key(&s)
        } else {
            s.out_key
        };
        debug_assert!(key == s.out_key || key == self.in_key(&s));
        self.table.remove(&other);
        self.release(idx);
        self.c.evicted += 1;
    }

    fn expire_scan(&mut self, now: u32) {
        // Sessions are handed out lowest index first, so every live session sits below the
        // high-water mark: the scan never walks the never-used tail of the pool.
        let n = self.sessions.high_water as usize;
        if self.active == 0 || n == 0 {
            return;
        }
        for _ in 0..self.scan_per_burst.min(n) {
            let i = if self.scan_cursor >= n {
                0
            } else {
                self.scan_cursor
            };
            self.scan_cursor = if i + 1 >= n { 0 } else { i + 1 };
            let s = self.sessions.get(i as u32);
            if s.state != ST_FREE && self.is_expired(&s, now) {
                self.free_session(i as u32);
                self.c.expired += 1;
            }
        }
    }

    /// Picks an outside port for a session towards `(remote, rport, proto)`: the first port of
    /// the core's slice (round robin from the cursor) whose inbound key is unused; a port held by
    /// an expired session is reclaimed.
    fn alloc_port(&mut self, remote: u32, rport: u16, proto: u8, now: u32) -> Option<u16> {
        for _ in 0..self.port_attempts {
            let p = self.port_cursor;
            self.port_cursor = if p >= self.port_hi {
                self.port_lo
            } else {
                p + 1
            };
            let k = FlowKey::new(remote, self.nat_ip, rport, p, proto);
            match self.table.peek(&k) {
                None => return Some(p),
                Some(v) => {
                    let idx = v >> 1;
                    let s = self.sessions.get(idx);
                    if self.is_expired(&s, now) {
                        self.free_session(idx);
                        self.c.expired += 1;
                        return Some(p);
                    }
                }
            }
            if self.port_lo == self.port_hi {
                break;
            }
        }
        None
    }

    /// Creates a session for outbound key `k` (hash `h`). Returns its index or the drop reason.
    fn new_session(&mut self, k: FlowKey, h: u64, now: u32) -> Result<u32, DropReason> {
        let proto = k.proto();
        let Some(nat_port) = self.alloc_port(k.dst(), k.dport(), proto, now) else {
            self.c.port_exhausted += 1;
            return Err(self.reasons.port_exhausted);
        };
        let ins = match self.table.insert_hashed(k, h, 0, now) {
            Ok(i) => i,
            Err(_) => {
                self.c.table_full += 1;
                return Err(DropReason::FLOW_TABLE_FULL);
            }
        };
        if let Some((ek, ev)) = ins.evicted {
            self.evicted_entry(ek, ev);
        }
        let Some(idx) = self.sessions.alloc() else {
            // Cannot happen while the table holds exactly two keys per session; stay safe.
            self.table.remove(&k);
            self.c.table_full += 1;
            return Err(DropReason::FLOW_TABLE_FULL);
        };
        // Evicting another session's entry never moves entries, so `ins.slot` is still ours.
        self.table.set_value(ins.slot, idx << 1);
        let mut ipd = CsumDelta::default();
        ipd.add32(k.src(), self.nat_ip);
        let mut l4d = CsumDelta::default();
        l4d.add16(k.sport(), nat_port);
        if proto != PROTO_ICMP {
            l4d = l4d.combine(ipd);
        }
        let state = match proto {
            PROTO_UDP => ST_UDP,
            PROTO_ICMP => ST_ICMP,
            _ => ST_TCP_TRANSITORY,
        };
        self.sessions.set(
            idx,
            &Session {
                out_key: k,
                deadline: now.wrapping_add(self.timeouts.of(state)),
                nat_port,
                ip_delta: ipd.raw(),
                l4_delta: l4d.raw(),
                state,
                tcp: 0,
            },
        );
        self.active += 1;
        let ik = FlowKey::new(k.dst(), self.nat_ip, k.dport(), nat_port, proto);
        match self.table.insert(ik, idx << 1 | 1, now) {
            Ok(ins2) => {
                if let Some((ek, ev)) = ins2.evicted {
                    if ev >> 1 == idx {
                        // The eviction picked our own outbound key: give up on this session.
                        self.table.remove(&ik);
                        self.release(idx);
                        self.c.table_full += 1;
                        return Err(DropReason::FLOW_TABLE_FULL);
                    }
                    self.evicted_entry(ek, ev);
                }
            }
            Err(_) => {
                self.table.remove(&k);
                self.release(idx);
                self.c.table_full += 1;
                return Err(DropReason::FLOW_TABLE_FULL);
            }
        }
        self.c.new_mappings += 1;
        Ok(idx)
    }

    #[inline(always)]
    fn is_inbound(&self, p: &Parsed, rx_port: u16) -> bool {
        match self.direction {
            DirectionPolicy::ByAddress => p.dst == self.nat_ip,
            DirectionPolicy::ByPort => rx_port >= 64 || self.inside_mask & (1 << rx_port) == 0,
        }
    }

    /// True for a packet received on a port that is neither inside nor outside (see the module
    /// docs): the NAT leaves it alone.
    #[inline(always)]
    fn passes(&self, rx_port: u16) -> bool {
        self.direction == DirectionPolicy::ByPort
            && self.outside_mask != 0
            && (rx_port >= 64 || (self.inside_mask | self.outside_mask) & (1 << rx_port) == 0)
    }

    /// The flow key of a TCP/UDP/ICMP-query packet as seen in its direction.
    #[inline(always)]
    fn key_of(p: &Parsed, inbound: bool) -> FlowKey {
        let (sport, dport) = match p.l4info {
            L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport } => (sport, dport),
            L4::Icmp { ident, .. } => {
                if inbound {
                    (0, ident)
                } else {
                    (ident, 0)
                }
            }
            L4::Other => (0, 0),
        };
        FlowKey::new(p.src, p.dst, sport, dport, p.proto)
    }

    /// First-pass checks common to every packet. Returns the drop reason, if any.
    #[inline(always)]
    fn screen(&mut self, h: &mut [u8], frame_len: usize) -> Result<Parsed, DropReason> {
        let p = match parse(h, frame_len) {
            Ok(p) => p,
            Err(e) => {
                if e == ParseError::SegmentShort {
                    self.c.header_segment_short += 1;
                }
                return Err(DropReason::from(e));
            }
        };
        if p.frag == Frag::Later {
            self.c.fragments_dropped += 1;
            return Err(DropReason::FRAGMENT);
        }
        if p.ihl > IPV4_HLEN && self.ip_options == OptionsPolicy::Drop {
            return Err(DropReason::IP_OPTIONS);
        }
        match p.l4info {
            L4::Other => return Err(DropReason::UNSUPPORTED_PROTOCOL),
            L4::Icmp { ty, .. } if !icmp_is_query(ty) && !icmp_is_error(ty) => {
                return Err(DropReason::UNSUPPORTED_PROTOCOL);
            }
            _ => {}
        }
        if self.decrement_ttl {
            if p.ttl <= 1 {
                self.c.ttl_expired += 1;
                return Err(DropReason::TTL_EXPIRED);
            }
            let ip = &mut h[p.l3..p.l3 + IPV4_HLEN];
            let old = read_u16(ip, 8);
            let new = old - 0x0100;
            ip[8] = p.ttl - 1;
            let hc = update16(read_u16(ip, 10), old, new);
            write_u16(ip, 10, hc);
        }
        Ok(p)
    }

    /// Updates TCP state bits and the session state from a packet's flags.
    #[inline(always)]
    fn tcp_track(s: &mut Session, flags: u8, inbound: bool) {
        if !inbound && flags & TCP_SYN != 0 && s.tcp & (F_RST | F_FIN_OUT | F_FIN_IN) != 0 {
            s.tcp = 0; // reopen
        }
        s.tcp |= if inbound { F_SEEN_IN } else { F_SEEN_OUT };
        if flags & TCP_RST != 0 {
            s.tcp |= F_RST;
        }
        if flags & TCP_FIN != 0 {
            s.tcp |= if inbound { F_FIN_IN } else { F_FIN_OUT };
        }
        s.state = if s.tcp & F_RST != 0 || s.tcp & (F_FIN_IN | F_FIN_OUT) == F_FIN_IN | F_FIN_OUT {
            ST_TCP_TRANSITORY
        } else if s.tcp & (F_SEEN_IN | F_SEEN_OUT) == F_SEEN_IN | F_SEEN_OUT {
            ST_TCP_ESTABLISHED
        } else {
            ST_TCP_TRANSITORY
        };
    }

    /// Rewrites a TCP/UDP/ICMP-query packet for session `idx`.
    #[inline(always)]
    fn translate(&mut self, h: &mut [u8], p: &Parsed, idx: u32, inbound: bool, now: u32) {
        let timeouts = self.timeouts;
        let nat_ip = self.nat_ip;
        let mut sess = self.sessions.get(idx);
        let s = &mut sess;
        let (ipd, l4d) = if inbound {
            (
                CsumDelta::from_raw(s.ip_delta).negate(),
                CsumDelta::from_raw(s.l4_delta).negate(),
            )
        } else {
            (
                CsumDelta::from_raw(s.ip_delta),
                CsumDelta::from_raw(s.l4_delta),
            )
        };
        let (addr, port) = if inbound {
            (s.out_key.src(), s.out_key.sport())
        } else {
            (nat_ip, s.nat_port)
        };
        // IPv4: address and header checksum.
        let ip = &mut h[p.l3..p.l3 + IPV4_HLEN];
        write_u32(ip, if inbound { 16 } else { 12 }, addr);
        let hc = ipd.apply(read_u16(ip, 10));
        write_u16(ip, 10, hc);
        // L4: port/identifier and checksum.
        let l4 = &mut h[p.l4..];
        match p.l4info {
            L4::Tcp { flags, .. } => {
                write_u16(l4, if inbound { 2 } else { 0 }, port);
                let c = l4d.apply(read_u16(l4, 16));
                write_u16(l4, 16, c);
                Self::tcp_track(s, flags, inbound);
            }
            L4::Udp { .. } => {
                write_u16(l4, if inbound { 2 } else { 0 }, port);
                let c = l4d.apply_udp(read_u16(l4, 6));
                write_u16(l4, 6, c);
            }
            L4::Icmp { .. } => {
                write_u16(l4, 4, port);
                let c = l4d.apply(read_u16(l4, 2));
                write_u16(l4, 2, c);
            }
            L4::Other => {}
        }
        s.deadline = now.wrapping_add(timeouts.of(s.state));
        self.sessions.set(idx, &sess);
        if inbound {
            self.c.inbound_translated += 1;
        } else {
            self.c.outbound_translated += 1;
        }
    }

    /// Finds the live session for a packet key with a known lookup result.
    #[inline(always)]
    fn session_for(&mut self, slot: u32, inbound: bool, now: u32) -> Option<u32> {
        if slot == NO_SLOT {
            return None;
        }
        let v = self.table.value(slot);
        if (v & 1 == 1) != inbound {
            return None;
        }
        let idx = v >> 1;
        let s = self.sessions.get(idx);
        if self.is_expired(&s, now) {
            self.free_session(idx);
            self.c.expired += 1;
            return None;
        }
        Some(idx)
    }

    /// Translates an ICMP error by its embedded header (see the module docs).
    fn translate_icmp_error(
        &mut self,
        h: &mut [u8],
        frame_len: usize,
        p: &Parsed,
        inbound: bool,
        now: u32,
    ) -> Result<(), DropReason> {
        let msg_end = p.l3 + usize::from(p.total_len);
        let e3 = p.l4 + ICMP_HLEN;
        // Embedded IPv4 header.
        let need = |end: usize, c: &mut Counters| -> Result<(), DropReason> {
            if end > msg_end || end > frame_len {
                Err(DropReason::TRUNCATED)
            } else if end > h.len() {
                c.header_segment_short += 1;
                Err(DropReason::TRUNCATED)
            } else {
                Ok(())
            }
        };
        need(e3 + IPV4_HLEN, &mut self.c)?;
        let vihl = h[e3];
        if vihl >> 4 != 4 || vihl & 0x0F < 5 {
            return Err(DropReason::MALFORMED);
        }
        let eihl = usize::from(vihl & 0x0F) * 4;
        let e4 = e3 + eihl;
        need(e4 + 8, &mut self.c)?;
        if read_u16(h, e3 + 6) & 0x1FFF != 0 {
            // Error about a later fragment: no ports to match.
            self.c.fragments_dropped += 1;
            return Err(DropReason::FRAGMENT);
        }
        let eproto = h[e3 + 9];
        let esrc = read_u32(h, e3 + 12);
        let edst = read_u32(h, e3 + 16);
        let (esport, edport) = match eproto {
            PROTO_TCP | PROTO_UDP => (read_u16(h, e4), read_u16(h, e4 + 2)),
            PROTO_ICMP if icmp_is_query(h[e4]) => {
                // The embedded message went the other way: outbound queries carry (id, 0).
                let id = read_u16(h, e4 + 4);
                if inbound { (id, 0) } else { (0, id) }
            }
            _ => return Err(DropReason::UNSUPPORTED_PROTOCOL),
        };
        // The embedded packet travelled in the opposite direction of this error.
        let key = FlowKey::new(edst, esrc, edport, esport, eproto);
        if inbound && esrc != self.nat_ip {
            self.c.no_mapping += 1;
            return Err(self.reasons.no_mapping);
        }
        let slot = self.table.lookup(&key, now).unwrap_or(NO_SLOT);
        let Some(idx) = self.session_for(slot, inbound, now) else {
            self.c.no_mapping += 1;
            return Err(self.reasons.no_mapping);
        };
        let s = self.sessions.get(idx);
        let (ipd, l4d, new_addr, new_port) = if inbound {
            (
                CsumDelta::from_raw(s.ip_delta).negate(),
                CsumDelta::from_raw(s.l4_delta).negate(),
                s.out_key.src(),
                s.out_key.sport(),
            )
        } else {
            (
                CsumDelta::from_raw(s.ip_delta),
                CsumDelta::from_raw(s.l4_delta),
                self.nat_ip,
                s.nat_port,
            )
        };
        // Changes inside the ICMP message, accumulated for the outer ICMP checksum.
        let mut icmp_d = CsumDelta::default();
        // Embedded address: the source of an inbound error's embedded packet (it left as NAT
        // address), the destination of an outbound error's (it arrived for the inside host).
        let addr_off = if inbound { e3 + 12 } else { e3 + 16 };
        let old_addr = read_u32(h, addr_off);
        write_u32(h, addr_off, new_addr);
        icmp_d.add32(old_addr, new_addr);
        let old_ec = read_u16(h, e3 + 10);
        let new_ec = ipd.apply(old_ec);
        write_u16(h, e3 + 10, new_ec);
        icmp_d.add16(old_ec, new_ec);
        // Embedded port / identifier and L4 checksum.
        let (port_off, csum_off) = match eproto {
            PROTO_UDP => (if inbound { e4 } else { e4 + 2 }, Some(e4 + 6)),
            PROTO_TCP => (
                if inbound { e4 } else { e4 + 2 },
                (e4 + 18 <= msg_end && e4 + 18 <= h.len()).then_some(e4 + 16),
            ),
            _ => (e4 + 4, Some(e4 + 2)),
        };
        let old_port = read_u16(h, port_off);
        write_u16(h, port_off, new_port);
        icmp_d.add16(old_port, new_port);
        if let Some(co) = csum_off {
            let old_c = read_u16(h, co);
            let new_c = if eproto == PROTO_UDP {
                l4d.apply_udp(old_c)
            } else {
                l4d.apply(old_c)
            };
            write_u16(h, co, new_c);
            icmp_d.add16(old_c, new_c);
        }
        // Outer ICMP checksum.
        let oc = read_u16(h, p.l4 + 2);
        write_u16(h, p.l4 + 2, icmp_d.apply(oc));
        // Outer IPv4 address and checksum.
        let outer_off = if inbound { p.l3 + 16 } else { p.l3 + 12 };
        write_u32(h, outer_off, new_addr);
        let hc = ipd.apply(read_u16(h, p.l3 + 10));
        write_u16(h, p.l3 + 10, hc);
        self.c.icmp_errors_translated += 1;
        if inbound {
            self.c.inbound_translated += 1;
        } else {
            self.c.outbound_translated += 1;
        }
        Ok(())
    }

    fn process_chunk(&mut self, burst: &mut Burst, start: usize, end: usize, now: u32) {
        // Pass 1: parse and screen, collect keys.
        self.pending.clear();
        let mut nkeys = 0usize;
        for i in start..end {
            burst.prefetch(i + PREFETCH_AHEAD);
            if !burst.is_live(i) {
                self.c.skipped += 1;
                self.pending.push(Pending::Done);
                continue;
            }
            self.c.packets += 1;
            let frame_len = burst.frame_len(i);
            let rx_port = burst.rx_port(i);
            if self.passes(rx_port) {
                self.c.passed += 1;
                self.pending.push(Pending::Done);
                continue;
            }
            let r = self.screen(burst.header_mut(i), frame_len);
            match r {
                Err(reason) => {
                    self.c.drops.add(reason, 1);
                    burst.drop_packet(i, reason);
                    self.pending.push(Pending::Done);
                }
                Ok(p) => {
                    let inbound = self.is_inbound(&p, rx_port);
                    if let Some(local) = &self.local
                        && (p.ttl <= 1 || (!inbound && local.contains(&p.dst)))
                    {
                        self.c.passed += 1;
                        self.pending.push(Pending::Done);
                        continue;
                    }
                    if let L4::Icmp { ty, .. } = p.l4info
                        && icmp_is_error(ty)
                    {
                        self.pending.push(Pending::IcmpError { p, inbound });
                        continue;
                    }
                    if !inbound && p.dst == self.nat_ip {
                        self.c.hairpin_dropped += 1;
                        self.c.drops.add(DropReason::POLICY, 1);
                        burst.drop_packet(i, DropReason::POLICY);
                        self.pending.push(Pending::Done);
                        continue;
                    }
                    self.keys[nkeys] = Self::key_of(&p, inbound);
                    nkeys += 1;
                    self.pending.push(Pending::Flow { p, inbound });
                }
            }
        }
        // Pass 2: bulk lookup.
        self.table
            .hash_bulk(&self.keys[..nkeys], &mut self.hashes[..nkeys]);
        self.table.lookup_bulk(
            &self.keys[..nkeys],
            &self.hashes[..nkeys],
            now,
            &mut self.slots[..nkeys],
        );
        // Prefetch the sessions behind the hits so their cache misses overlap.
        for &slot in &self.slots[..nkeys] {
            if slot != NO_SLOT {
                self.sessions
                    .slots
                    .prefetch((self.table.value(slot) >> 1) as usize);
            }
        }
        let bulk_epoch = self.table.epoch();
        // Pass 3: act, in packet order.
        let mut j = 0usize;
        for (k, i) in (start..end).enumerate() {
            match self.pending[k] {
                Pending::Done => {}
                Pending::Flow { p, inbound } => {
                    let key = self.keys[j];
                    let h = self.hashes[j];
                    let mut slot = self.slots[j];
                    j += 1;
                    // Slots from the bulk lookup stay valid while the epoch holds; earlier packets
                    // may have moved or removed entries, or inserted this very key.
                    if self.table.epoch() != bulk_epoch || slot == NO_SLOT {
                        slot = self.table.lookup_hashed(&key, h, now).unwrap_or(NO_SLOT);
                    }
                    let idx = match self.session_for(slot, inbound, now) {
                        Some(idx) => Ok(idx),
                        None if inbound => {
                            self.c.no_mapping += 1;
                            Err(self.reasons.no_mapping)
                        }
                        None => self.new_session(key, h, now),
                    };
                    match idx {
                        Ok(idx) => {
                            self.translate(burst.header_mut(i), &p, idx, inbound, now);
                            if let Some(v) = self.verifier.as_mut() {
                                v.verify(burst, i);
                            }
                        }
                        Err(reason) => {
                            self.c.drops.add(reason, 1);
                            burst.drop_packet(i, reason);
                        }
                    }
                }
                Pending::IcmpError { p, inbound } => {
                    let frame_len = burst.frame_len(i);
                    match self.translate_icmp_error(
                        burst.header_mut(i),
                        frame_len,
                        &p,
                        inbound,
                        now,
                    ) {
                        Ok(()) => {
                            if let Some(v) = self.verifier.as_mut() {
                                v.verify(burst, i);
                            }
                        }
                        Err(reason) => {
                            self.c.drops.add(reason, 1);
                            burst.drop_packet(i, reason);
                        }
                    }
                }
            }
        }
    }
}

impl NetworkFunction for Nat {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, burst: &mut Burst, ctx: &NfContext) {
        let now = ms_ticks(ctx.now_ns);
        self.expire_scan(now);
        let n = burst.len();
        burst.prefetch_first();
        let mut start = 0;
        while start < n {
            let end = (start + BULK).min(n);
            self.process_chunk(burst, start, end, now);
            start = end;
        }
    }

    /// Return traffic (to the NAT address, destination port in this instance's slice) must reach
    /// the worker that owns the sessions of that slice. ICMP queries are not steered (their
    /// identifier is not a port a NIC matches on) and follow RSS.
    fn steering_rules(&self, queue: u16) -> Vec<dataplane::steer::SteerRule> {
        vec![dataplane::steer::SteerRule {
            dst_ip: std::net::Ipv4Addr::from(self.nat_ip),
            dst_ports: (self.port_lo, self.port_hi),
            queue,
        }]
    }

    fn owned_addresses(&self) -> Vec<(std::net::Ipv4Addr, Option<u16>)> {
        let ip = std::net::Ipv4Addr::from(self.nat_ip);
        if self.direction == DirectionPolicy::ByPort && self.outside_mask != 0 {
            (0..64u16)
                .filter(|p| self.outside_mask & (1 << p) != 0)
                .map(|p| (ip, Some(p)))
                .collect()
        } else {
            vec![(ip, None)]
        }
    }

    fn counters(&self) -> dataplane::Counters {
        let c = &self.c;
        let ts = self.table.stats();
        let mut table = dataplane::Counters::new();
        table
            .count("lookups", ts.lookups)
            .count("hits", ts.hits)
            .count("inserts", ts.inserts)
            .count("cuckoo_moves", ts.cuckoo_moves)
            .count("evictions", ts.evictions)
            .count("full_drops", ts.full_drops);
        let mut v = dataplane::Counters::new();
        v.count("packets", c.packets)
            .count("skipped", c.skipped)
            .count("translations", c.inbound_translated + c.outbound_translated)
            .count("inbound_translated", c.inbound_translated)
            .count("outbound_translated", c.outbound_translated)
            .count("new_mappings", c.new_mappings)
            .count("port_exhausted", c.port_exhausted)
            .count("table_full", c.table_full)
            .count("no_mapping", c.no_mapping)
            .count("expired", c.expired)
            .count("evicted", c.evicted)
            .count("active_mappings", self.active as u64)
            .count("icmp_errors_translated", c.icmp_errors_translated)
            .count("fragments_dropped", c.fragments_dropped)
            .count("header_segment_short", c.header_segment_short)
            .count("hairpin_dropped", c.hairpin_dropped)
            .count("ttl_expired", c.ttl_expired)
            .count("passed", c.passed)
            .count("dropped", c.drops.total())
            .group(
                "drops",
                drop_counters(
                    &c.drops,
                    &[self.reasons.no_mapping, self.reasons.port_exhausted],
                ),
            )
            .group("table", table);
        if let Some(ver) = &self.verifier {
            v.count("verify_slow_path", ver.verified)
                .count("checksum_mismatches", ver.mismatches);
        }
        v
    }
}
