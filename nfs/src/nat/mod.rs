//! Source NAT (NAPT44) as a carrier would deploy it: RFC 4787, 5382, 5508 and 6888 behaviour,
//! per-core state, incremental checksums. `docs/nat-conformance.md` is the requirement-by-
//! requirement table (behaviour, the key that changes it, and why where nmdp differs on purpose).
//!
//! # Model
//!
//! - **Outside addresses**: `nat_ip` (one, default 10.0.0.1, the paper's
//!   `FlowIPNAT(SIP 10.0.0.1)`) or a pool `nat_ips` (addresses and prefixes). Each inside
//!   address is paired with one outside address by a consistent-hash ring of the addresses in
//!   service (`nfs/src/nat/pool.rs`), so all its sessions share it (RFC 4787 REQ-2), and an
//!   operator may put `spare_ips` into service, drain or remove addresses while it runs
//!   (`pool add|drain|remove`, `nfs/src/nat/sessions.rs`) moving only the subscribers that must
//!   move. With `instances = N` the instance uses only its `instance`-th share of the pool.
//! - **Deterministic NAT** (`deterministic`, RFC 7422, `nfs/src/nat/deterministic.rs`): each
//!   address of `subscriber_prefixes` has a computed outside address and port range per
//!   worker; nothing is logged per session and [`DeterministicPlan`] maps back from the config.
//! - **Ports**: each worker owns a slice of `port_min..=port_max` (1024-65535 split evenly; worker
//!   `w` takes the `w`-th slice, the last one also the remainder) on every outside address, and
//!   return traffic is steered to the owner by destination port ([`Nat::steering_rules`]).
//!   A new mapping keeps its inside port when that is free, else takes a random port of the
//!   slice, with the inside port's parity on request; released ports are kept from other
//!   subscribers for `port_reuse_hold_s` (`nfs/src/nat/alloc.rs`).
//! - **Mapping** (`mapping`): `endpoint-independent` (default, RFC 4787 REQ-1 / RFC 5382 REQ-1):
//!   one outside endpoint per inside address and port, exclusive to it, shared by all its
//!   sessions; `endpoint-dependent` (VPP NAT44-ED): one outside port per session, reused
//!   towards other remote endpoints, so one address serves far more sessions.
//! - **Filtering** (`filtering`, endpoint-independent mapping only): `endpoint-independent`
//!   (default, RFC 6888 REQ-7): any remote may reach a mapped outside endpoint (a TCP SYN or any
//!   UDP creates a session for it); `address-dependent`: only remotes whose address the inside
//!   endpoint has sent to; `address-and-port-dependent`: only remote endpoints it has a session
//!   with. Refused packets count as `filtered`.
//! - **Sessions**: one per flow, keyed in the flow table twice (outbound key = inside 5-tuple,
//!   inbound key = the reply's 5-tuple): the paper's "two cache entries per flow". The per-packet
//!   path is one bulk lookup of the packet's 5-tuple for the whole burst and a rewrite from the
//!   32 B session (`nfs/src/nat/state.rs`); mappings, filters and subscriber counts are only
//!   touched when a session is created or ends.
//! - **Direction**: a packet that matches a session takes that session's direction. Otherwise
//!   `direction = "by-address"` (default) treats packets to an outside address as inbound and
//!   everything else as outbound; `direction = "by-port"` treats packets received on one of
//!   `inside_ports` as outbound. With `outside_ports` as well, only those ports are outside: a
//!   packet received on a port that is neither inside nor outside is left untouched for the
//!   next stage (`route` forwards it or drops it with a reason) and counted as `passed`. The
//!   NAT owns its outside addresses on the outside ports (or, without `outside_ports`, on every
//!   port whose subnet holds them): the ports answer ARP for them.
//! - **In a routed run** (the run has a network layer, [`dataplane::net`]) the NAT leaves two
//!   kinds of packets to the `route` stage untranslated, as Linux routes before it source-NATs:
//!   packets from the inside to one of the ports' own addresses (a ping to the router), and
//!   packets whose TTL is about to expire (the ICMP time exceeded then quotes the packet the
//!   sender sent). Both count as `passed`.
//! - **Hairpinning** (`hairpinning = true`, default; RFC 4787 REQ-9, RFC 5382 REQ-8, RFC 5508
//!   REQ-7): an outbound packet to an outside address is translated twice, its source to its own
//!   mapping and its destination to the mapped inside endpoint, so the receiver sees the
//!   sender's outside address and port. With `by-address`, a packet to an outside address that
//!   matches no session is hairpinned when its source is an inside endpoint with a mapping or is
//!   in `inside_prefixes` (default: RFC 1918 and RFC 6598 space). When the destination port
//!   belongs to another worker's slice, only the source is translated and the packet leaves
//!   towards the outside, whose router returns it to that worker (`hairpin_via_outside`).
//! - **TCP** (`nfs/src/nat/tcp.rs`): sessions open on a SYN only; opening, established and
//!   closing timeouts; a RST holds the session for the closing timeout.
//! - **ICMP** (`nfs/src/nat/icmp.rs`): query identifiers are mapped like ports; errors are
//!   matched by the packet they quote and translated (outer and quoted headers, every
//!   checksum), in every datapath mode: quoted headers past the header segment are read and
//!   written back through the counted slow path ([`crate::slow_path`]). Errors whose ICMP or
//!   quoted IPv4 checksum fails are dropped (`icmp_bad_checksum`); errors never refresh or end a
//!   session.
//! - **Fragments** (`nfs/src/nat/frag.rs`): virtual reassembly. The translation of a datagram's
//!   first fragment is remembered per (source, destination, protocol, IP ID) for
//!   `fragment_timeout_ms`, and later fragments get the same address rewrite. A later fragment
//!   that comes first is translated at once when outbound (its new source is the paired
//!   address), or held (at most `fragments_held` per worker) until its first fragment passes,
//!   then released ([`NetworkFunction::release`]), or dropped with a reason.
//! - **Limits and exhaustion**: `subscriber_port_limit` and `subscriber_session_limit` per inside
//!   address (`subscriber_limit`); `port_exhausted` when no port is found within the bounded
//!   probes; `table_full` when no session record or table slot is left, or with `full_policy =
//!   "evict"` an expired, held or transitory session is taken first (never an established or a
//!   live UDP/ICMP one, RFC 6888 REQ-11).
//! - **Port blocks** (`port_block`, `nfs/src/nat/blocks.rs`): a subscriber's endpoint-independent
//!   mappings take ports from blocks of consecutive ports it owns (at most `port_block_limit`
//!   per worker, beyond that `subscriber_limit`); a block returns when its last mapping ends.
//! - **Logging** (`log_ipfix`, `nfs/src/nat/ipfix.rs`): session create and delete (or, with port
//!   blocks, block allocation and release; nothing per session with deterministic NAT), ports
//!   and addresses exhausted and quotas exceeded (rate limited), as IPFIX records written into a
//!   preallocated per-worker buffer where sessions, mappings and blocks start and end, and sent
//!   after the burst, or by an idle worker within `log_flush_ms`;
//!   `docs/operating-nat-logging.md`.
//! - **Timeouts** (VPP's defaults, RFC 4787/5382/5508): UDP 300 s, TCP established 7440 s, TCP
//!   opening and closing 240 s, ICMP 60 s. Expiry is lazy (a lookup that finds an expired session
//!   ends it) plus an incremental scan of `scan_per_burst` sessions per burst (and as many
//!   mappings while some are on hold).
//! - **Drop reasons** of its own, registered when a NAT is built: `no_mapping`,
//!   `port_exhausted`, `subscriber_limit`, `filtered`, `tcp_not_syn`, `icmp_bad_checksum`,
//!   `payload_unwritable`, `fragment_timeout`, `fragment_hold_full`, `fragment_first_dropped`,
//!   `not_subscriber`.
//!
//! Memory: a session is 32 B and two session-table keys (34 B per slot, 1.11-2.22 slots per
//! key); endpoint-independent mapping adds a 32 B mapping and two mapping-table keys per inside
//! endpoint (and a key per remote address with address-dependent filtering). [`memory_for`]
//! gives the total. Every table and pool is a [`nicmem::HugeArray`] built without touching its
//! memory; nothing allocates per packet.
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
//! - **TTL**: the paper's pipeline decrements TTL (IPOutputCombo) before the NF, so by default
//!   the NAT leaves TTL alone. With `decrement_ttl = true` a packet with TTL <= 1 is dropped as
//!   `ttl_expired` (no ICMP time-exceeded is generated) and others leave with TTL - 1.
//!
//! `verify_checksums = true` (debug) re-verifies every translated frame by full recomputation
//! through the counted slow path ([`crate::verify::ChecksumVerifier`]).
#![forbid(unsafe_code)]

mod alloc;
mod blocks;
mod config;
mod deterministic;
mod frag;
mod icmp;
mod ipfix;
mod pool;
mod sessions;
mod state;
mod tcp;

pub use config::{
    AddressList, DirectionPolicy, Filtering, Mapping, NatConfig, OptionsPolicy, TCP_TRANSITORY_S,
};
pub use deterministic::{DeterministicPlan, Holder, Placement};

use dataplane::{
    Burst, Counters, DropCounts, DropReason, NetworkFunction, NfCommand, NfContext, PREFETCH_AHEAD,
    Verdict,
};
use wire::checksum::CsumDelta;
use wire::classify::{Frag, L4, ParseError, Parsed, parse};
use wire::field::{read_u16, write_u16, write_u32};
use wire::icmpv4::{icmp_is_error, icmp_is_query};
use wire::ipv4::{IPV4_HLEN, Ipv4View, PROTO_ICMP, PROTO_TCP, PROTO_UDP};

use crate::flow_table::{BULK, FlowKey, FlowTable, FullPolicy, NO_SLOT, ms_ticks};
use crate::params::{bad_param, mix_seed, parse_params};
use crate::registry::{
    BuildContext, Memory, NfSpec, Reason, defaults_of, drop_counters, register_reason,
};
use crate::verify::ChecksumVerifier;

use alloc::{PortAllocator, worker_slice};
use blocks::{NoBlock, PortBlocks};
use config::{Prefix, Timeouts};
use deterministic::Deterministic;
use frag::{Fragments, Outcome};
use ipfix::NatLog;
use pool::AddressPool;
use state::{
    MAP_HOLD, MAP_LIVE, Mappings, ST_FREE, ST_HOLD, ST_ICMP, ST_TCP_CLOSING, ST_TCP_ESTABLISHED,
    ST_TCP_OPENING, ST_UDP, Session, Sessions,
};

/// Name of this NF in configs.
pub const NAME: &str = "nat";

/// Bytes of one session or mapping record and its free-list entry ([`state`]).
const RECORD_BYTES: u64 = 32 + 4;

/// Bytes of host memory one worker's NAT with `cfg` allocates (of `workers` workers): tables
/// and pools, for checking a config against the machine before building it.
pub fn memory_for(cfg: &NatConfig, workers: u16) -> u64 {
    let per = cfg.flows.div_ceil(u64::from(workers.max(1)));
    let n = usize::try_from(per).unwrap_or(usize::MAX);
    let records = per.saturating_mul(RECORD_BYTES);
    let mut bytes = FlowTable::<u32>::memory_for(n.saturating_mul(2)).saturating_add(records);
    if cfg.mapping == Mapping::EndpointIndependent {
        let keys = if cfg.filtering == Some(Filtering::AddressDependent) {
            3
        } else {
            2
        };
        bytes = bytes
            .saturating_add(FlowTable::<u32>::memory_for(n.saturating_mul(keys)))
            .saturating_add(records);
    }
    if cfg.subscriber_port_limit > 0 || cfg.subscriber_session_limit > 0 {
        bytes = bytes.saturating_add(FlowTable::<u64>::memory_for(n));
    }
    let addresses = cfg.check(cfg.nat_ips.is_none()).map_or(1, |st| {
        config::prefix_addresses(&st.pool) + config::prefix_addresses(&st.spare)
    });
    if addresses > 1 {
        bytes = bytes.saturating_add(pool::ring_bytes(addresses));
    }
    if cfg.port_block > 0 {
        let ports = (u64::from(cfg.port_max) + 1).saturating_sub(u64::from(cfg.port_min));
        let per_worker = ports / u64::from(workers.max(1)) / u64::from(cfg.port_block);
        bytes = bytes.saturating_add(PortBlocks::memory_for(addresses * per_worker));
    }
    bytes
}

/// Drop reason: an inbound packet without a session.
const NO_MAPPING: Reason = (
    "no_mapping",
    "an inbound packet that matches no NAT session",
);
/// Drop reason: no free outside port within the bounded probes.
const PORT_EXHAUSTED: Reason = (
    "port_exhausted",
    "no free outside port for a new NAT mapping within the bounded probes",
);
/// Drop reason: the subscriber is at its limit.
const SUBSCRIBER_LIMIT: Reason = (
    "subscriber_limit",
    "the inside address already holds its limit of NAT ports or sessions",
);
/// Drop reason: refused by the filtering behaviour.
const FILTERED: Reason = (
    "filtered",
    "an inbound packet to a mapped outside endpoint that the NAT's filtering refuses",
);
/// Drop reason: a TCP segment that cannot open a session.
const TCP_NOT_SYN: Reason = (
    "tcp_not_syn",
    "a TCP segment other than a SYN with no NAT session (sessions open on SYN only)",
);
/// Drop reason: an ICMP error that fails its checksums.
const ICMP_BAD_CHECKSUM: Reason = (
    "icmp_bad_checksum",
    "an ICMP error whose ICMP or quoted IPv4 checksum fails (not translated)",
);
/// Drop reason: a payload write that failed.
const PAYLOAD_UNWRITABLE: Reason = (
    "payload_unwritable",
    "a translation had to change bytes past the header segment and the payload could not be \
     written",
);
/// Drop reason: deterministic NAT and an inside address it does not map.
const NOT_SUBSCRIBER: Reason = (
    "not_subscriber",
    "deterministic NAT: an outbound packet from an inside address in none of \
     `subscriber_prefixes`",
);
/// Drop reason: a held fragment whose first fragment never came.
const FRAGMENT_TIMEOUT: Reason = (
    "fragment_timeout",
    "a held IP fragment whose first fragment did not arrive in time",
);
/// Drop reason: no room to hold a fragment.
const FRAGMENT_HOLD_FULL: Reason = (
    "fragment_hold_full",
    "an IP fragment that came before its first fragment, with no room to hold it",
);
/// Drop reason: the datagram's first fragment was dropped.
const FRAGMENT_FIRST_DROPPED: Reason = (
    "fragment_first_dropped",
    "an IP fragment of a datagram whose first fragment was dropped",
);

/// The registration of `nat`.
pub const SPEC: NfSpec = NfSpec {
    name: NAME,
    aliases: &[],
    summary: "Source NAT (NAPT44) with RFC 4787/5382/5508/6888 behaviour: endpoint-independent \
              or -dependent mapping and filtering, hairpinning, paired address pools, subscriber \
              limits, port reuse hold, ICMP errors translated in every datapath mode, fragments \
              by virtual reassembly, incremental checksums (RFC 1624); docs/nat-conformance.md \
              is the requirement-by-requirement table.",
    params: config::PARAMS,
    defaults: defaults_of::<NatConfig>,
    drop_reasons: &[
        NO_MAPPING,
        PORT_EXHAUSTED,
        SUBSCRIBER_LIMIT,
        FILTERED,
        TCP_NOT_SYN,
        ICMP_BAD_CHECKSUM,
        PAYLOAD_UNWRITABLE,
        FRAGMENT_TIMEOUT,
        FRAGMENT_HOLD_FULL,
        FRAGMENT_FIRST_DROPPED,
        NOT_SUBSCRIBER,
    ],
    build: build_nf,
    memory,
};

fn build_nf(params: &toml::Table, ctx: &BuildContext) -> Result<Box<dyn NetworkFunction>, String> {
    let mut nat = Nat::from_params(params, ctx.worker, ctx.workers)?;
    if let Some(net) = &ctx.net {
        nat.local = Some(
            net.ports()
                .iter()
                .filter_map(|p| Some(p.ip?.addr))
                .collect(),
        );
        nat.net = Some(net.clone());
    }
    Ok(Box::new(nat))
}

fn memory(params: &toml::Table, ctx: &BuildContext) -> Option<Memory> {
    let c: NatConfig = parse_params(NAME, params).ok()?;
    Some(Memory {
        key: "flows",
        value: c.flows.to_string(),
        bytes: memory_for(&c, ctx.workers),
    })
}

/// The drop reasons the NAT registers (see the module docs).
#[derive(Clone, Copy, Debug)]
struct Reasons {
    no_mapping: DropReason,
    port_exhausted: DropReason,
    subscriber_limit: DropReason,
    filtered: DropReason,
    tcp_not_syn: DropReason,
    icmp_bad_checksum: DropReason,
    payload_unwritable: DropReason,
    fragment_timeout: DropReason,
    fragment_hold_full: DropReason,
    fragment_first_dropped: DropReason,
    not_subscriber: DropReason,
}

impl Reasons {
    fn register() -> Result<Self, String> {
        let r = |reason| register_reason(NAME, reason);
        Ok(Self {
            no_mapping: r(NO_MAPPING)?,
            port_exhausted: r(PORT_EXHAUSTED)?,
            subscriber_limit: r(SUBSCRIBER_LIMIT)?,
            filtered: r(FILTERED)?,
            tcp_not_syn: r(TCP_NOT_SYN)?,
            icmp_bad_checksum: r(ICMP_BAD_CHECKSUM)?,
            payload_unwritable: r(PAYLOAD_UNWRITABLE)?,
            fragment_timeout: r(FRAGMENT_TIMEOUT)?,
            fragment_hold_full: r(FRAGMENT_HOLD_FULL)?,
            fragment_first_dropped: r(FRAGMENT_FIRST_DROPPED)?,
            not_subscriber: r(NOT_SUBSCRIBER)?,
        })
    }

    fn all(&self) -> [DropReason; 11] {
        [
            self.no_mapping,
            self.port_exhausted,
            self.subscriber_limit,
            self.filtered,
            self.tcp_not_syn,
            self.icmp_bad_checksum,
            self.payload_unwritable,
            self.fragment_timeout,
            self.fragment_hold_full,
            self.fragment_first_dropped,
            self.not_subscriber,
        ]
    }
}

impl Timeouts {
    #[inline(always)]
    fn of(&self, state: u8) -> u32 {
        match state {
            ST_UDP => self.udp,
            ST_ICMP => self.icmp,
            ST_TCP_ESTABLISHED => self.tcp_est,
            ST_TCP_CLOSING => self.tcp_closing,
            _ => self.tcp_opening,
        }
    }
}

/// What the NAT counts (reported by [`Nat::counters`]).
#[derive(Clone, Debug, Default)]
struct NatCounters {
    packets: u64,
    skipped: u64,
    inbound_translated: u64,
    outbound_translated: u64,
    new_mappings: u64,
    new_eim_mappings: u64,
    inbound_sessions: u64,
    port_exhausted: u64,
    port_probes: u64,
    ports_preserved: u64,
    port_holds: u64,
    hold_blocked: u64,
    holds_ended_early: u64,
    subscriber_limit: u64,
    filtered: u64,
    tcp_not_syn: u64,
    table_full: u64,
    no_mapping: u64,
    expired: u64,
    evicted: u64,
    icmp_errors_translated: u64,
    icmp_errors_slow_path: u64,
    icmp_bad_checksum: u64,
    icmp_errors_unverified: u64,
    payload_unwritable: u64,
    fragments_dropped: u64,
    header_segment_short: u64,
    hairpinned: u64,
    hairpin_via_outside: u64,
    not_subscriber: u64,
    no_active_address: u64,
    ttl_expired: u64,
    passed: u64,
    drops: DropCounts,
}

#[derive(Clone, Copy)]
enum Pending {
    /// Nothing to do (already dropped, or dropped in the first pass).
    Done,
    /// A TCP/UDP/ICMP-query packet whose key is `keys[j]`; `guess`: inbound by the direction
    /// rule (a session match overrides it); `to_pool`: its destination is an outside address.
    Flow {
        p: Parsed,
        guess: bool,
        to_pool: bool,
    },
    /// An ICMP error, translated in the third pass.
    IcmpError { p: Parsed },
    /// A fragment without the L4 header.
    Later { p: Parsed, guess: bool },
}

/// Why a new session could not be had.
enum NoRoom {
    /// No free session record.
    Pool,
    /// The flow table refused a key.
    Table,
}

/// The NAT network function (one instance per worker).
pub struct Nat {
    name: String,
    pool: AddressPool,
    inside_prefixes: Vec<Prefix>,
    alloc: PortAllocator,
    eim: bool,
    filtering: Filtering,
    hairpinning: bool,
    direction: DirectionPolicy,
    inside_mask: u64,
    /// Ports that face the outside; 0: every port that is not inside.
    outside_mask: u64,
    /// In a routed run, the ports' own addresses (see the module docs).
    local: Option<Vec<u32>>,
    ip_options: OptionsPolicy,
    decrement_ttl: bool,
    timeouts: Timeouts,
    hold_ms: u32,
    sub_port_limit: u32,
    sub_session_limit: u32,
    evict: bool,
    evict_scan: usize,
    evict_cursor: usize,
    scan_per_burst: usize,
    scan_cursor: usize,
    map_scan_cursor: usize,
    /// Session keys -> session index << 1 | (1 for the inbound key).
    table: FlowTable<u32>,
    sessions: Sessions,
    /// Endpoint-independent mapping: inside and outside endpoint keys -> mapping index, and
    /// address-dependent filter keys -> sessions using them.
    map_table: FlowTable<u32>,
    mappings: Mappings,
    /// With subscriber limits: inside address -> ports << 32 | sessions.
    subscribers: Option<FlowTable<u64>>,
    frags: Fragments,
    active: usize,
    active_maps: usize,
    /// Mappings on hold (the expiry scan walks the mappings only while there are some).
    held_maps: usize,
    reasons: Reasons,
    verifier: Option<ChecksumVerifier>,
    c: NatCounters,
    pending: Vec<Pending>,
    keys: Vec<FlowKey>,
    hashes: Vec<u64>,
    slots: Vec<u32>,
    /// Packets of the current burst to hold (later fragments waiting for their first).
    to_hold: Vec<usize>,
    /// NAT event logging over IPFIX (`log_ipfix`), written where sessions start and end.
    log: Option<Box<NatLog>>,
    /// Port blocks (`port_block`): where new mappings take their ports, logged per block.
    blocks: Option<Box<PortBlocks>>,
    /// Ports of a block tried per new mapping before another block is taken.
    block_tries: u32,
    /// Deterministic NAT (`deterministic`): where each subscriber's ports are.
    det: Option<Box<Deterministic>>,
    /// Whether sessions are logged one by one (not with port blocks or deterministic NAT).
    log_sessions: bool,
    /// The run's network layer, when it has one: the ports stop or start answering ARP for an
    /// outside address taken out of or put into service at run time.
    net: Option<std::sync::Arc<dataplane::net::Network>>,
}

impl Nat {
    /// The ports the outside addresses are answered on: the outside ports when the direction
    /// is by port, otherwise `None` (every port whose subnet holds the address).
    fn outside_port_list(&self) -> Vec<Option<u16>> {
        if self.direction == DirectionPolicy::ByPort && self.outside_mask != 0 {
            (0..64u16)
                .filter(|p| self.outside_mask & (1 << p) != 0)
                .map(Some)
                .collect()
        } else {
            vec![None]
        }
    }

    /// Builds worker `worker`'s instance (of `workers`) from a parameter table.
    pub fn from_params(params: &toml::Table, worker: u16, workers: u16) -> Result<Self, String> {
        let cfg: NatConfig = parse_params(NAME, params)?;
        Self::build(&cfg, params.contains_key("nat_ip"), worker, workers)
    }

    /// Builds worker `worker`'s instance (of `workers`) from a config.
    pub fn new(cfg: &NatConfig, worker: u16, workers: u16) -> Result<Self, String> {
        Self::build(cfg, false, worker, workers)
    }

    fn build(
        cfg: &NatConfig,
        explicit_nat_ip: bool,
        worker: u16,
        workers: u16,
    ) -> Result<Self, String> {
        let workers = workers.max(1);
        if worker >= workers {
            return Err(format!(
                "{NAME}: worker {worker} out of range (workers = {workers})"
            ));
        }
        let st = cfg.check(explicit_nat_ip)?;
        let (lo, hi) = worker_slice(cfg.port_min, cfg.port_max, worker, workers)?;
        let det = match &st.deterministic {
            Some(_) => {
                // The plan checks every worker's slice and every instance's share.
                DeterministicPlan::new(cfg, explicit_nat_ip, workers)?;
                Some(Box::new(Deterministic::new(
                    st.deterministic.as_deref().unwrap_or_default(),
                    config::prefix_addresses(&st.pool) as u32,
                )))
            }
            None => None,
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
        let pool = AddressPool::new(&st.pool, &st.spare);
        let eim = cfg.mapping == Mapping::EndpointIndependent;
        let share = |limit: u32| limit.div_ceil(u32::from(workers));
        // The session table and pool first: they are what every packet reads, so they get the
        // huge pages when the reserved ones do not suffice for every table.
        let table = FlowTable::try_new(
            sessions * 2,
            0,
            FullPolicy::Drop,
            mix_seed(cfg.seed, worker, 1),
        )
        .map_err(|e| bad_param(NAME, "flows", format!("flow table: {e}")))?;
        let session_pool = Sessions::new(sessions, "session")?;
        let map_keys = match (eim, st.filtering) {
            (false, _) => 1,
            (true, Filtering::AddressDependent) => sessions * 3,
            (true, _) => sessions * 2,
        };
        let map_table =
            FlowTable::try_new(map_keys, 0, FullPolicy::Drop, mix_seed(cfg.seed, worker, 3))
                .map_err(|e| bad_param(NAME, "flows", format!("mapping table: {e}")))?;
        let subscribers = if cfg.subscriber_port_limit > 0 || cfg.subscriber_session_limit > 0 {
            Some(
                FlowTable::try_new(sessions, 0, FullPolicy::Drop, mix_seed(cfg.seed, worker, 4))
                    .map_err(|e| bad_param(NAME, "flows", format!("subscriber table: {e}")))?,
            )
        } else {
            None
        };
        let reasons = Reasons::register()?;
        let blocks = if cfg.port_block > 0 {
            Some(Box::new(
                PortBlocks::new(
                    pool.len(),
                    lo,
                    hi,
                    cfg.port_block as u16,
                    cfg.port_block_limit,
                    mix_seed(cfg.seed, worker, 7),
                )
                .map_err(|e| bad_param(NAME, "port_block", e))?,
            ))
        } else {
            None
        };
        let log = match st.log_ipfix {
            Some(a) => Some(Box::new(
                NatLog::new(
                    a,
                    worker,
                    cfg.log_flush_ms,
                    cfg.log_exhaustion_per_s,
                    cfg.instance,
                )
                .map_err(|e| bad_param(NAME, "log_ipfix", e))?,
            )),
            None => None,
        };
        Ok(Self {
            name: NAME.to_string(),
            alloc: PortAllocator::new(
                lo,
                hi,
                pool.len(),
                cfg.port_preservation,
                cfg.port_parity,
                cfg.port_attempts,
                mix_seed(cfg.seed, worker, 5),
            ),
            pool,
            inside_prefixes: st.inside_prefixes,
            eim,
            filtering: st.filtering,
            hairpinning: cfg.hairpinning,
            direction: cfg.direction,
            inside_mask,
            outside_mask,
            local: None,
            ip_options: cfg.ip_options,
            decrement_ttl: cfg.decrement_ttl,
            timeouts: st.timeouts,
            hold_ms: st.hold_ms,
            sub_port_limit: share(cfg.subscriber_port_limit),
            sub_session_limit: share(cfg.subscriber_session_limit),
            evict: cfg.full_policy == FullPolicy::Evict,
            evict_scan: cfg.evict_scan as usize,
            evict_cursor: 0,
            scan_per_burst: cfg.scan_per_burst as usize,
            scan_cursor: 0,
            map_scan_cursor: 0,
            table,
            sessions: session_pool,
            map_table,
            mappings: Mappings::new(if eim { sessions } else { 1 }, "mapping")?,
            subscribers,
            frags: Fragments::new(
                cfg.fragment_contexts as usize,
                st.fragment_timeout_ms,
                cfg.fragments_held as usize,
                mix_seed(cfg.seed, worker, 6),
            )?,
            active: 0,
            active_maps: 0,
            held_maps: 0,
            reasons,
            verifier: cfg.verify_checksums.then(ChecksumVerifier::new),
            c: NatCounters::default(),
            pending: Vec::with_capacity(BULK),
            keys: vec![FlowKey::default(); BULK],
            hashes: vec![0; BULK],
            slots: vec![0; BULK],
            to_hold: Vec::with_capacity(dataplane::MAX_BURST),
            log_sessions: log.is_some() && blocks.is_none() && det.is_none(),
            log,
            blocks,
            block_tries: cfg.port_attempts,
            det,
            net: None,
        })
    }

    /// This worker's port slice `(lo, hi)`, inclusive.
    pub fn port_range(&self) -> (u16, u16) {
        self.alloc.range()
    }

    /// Active sessions.
    pub fn active_mappings(&self) -> usize {
        self.active
    }

    /// The outside port of the session for an inside 5-tuple, if any (for tests and for
    /// traffic generators that need the mapping to build replies).
    pub fn mapping(&self, src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Option<u16> {
        self.mapping_endpoint(src, dst, sport, dport, proto)
            .map(|(_, p)| p)
    }

    /// The outside `(address, port)` of the session for an inside 5-tuple, if any.
    pub fn mapping_endpoint(
        &self,
        src: u32,
        dst: u32,
        sport: u16,
        dport: u16,
        proto: u8,
    ) -> Option<(u32, u16)> {
        let key = FlowKey::new(src, dst, sport, dport, proto);
        let v = self.table.peek(&key)?;
        let s = self.sessions.get(v >> 1);
        (v & 1 == 0 && s.state != ST_HOLD).then_some((s.nat_ip, s.nat_port))
    }

    /// The outside address paired with inside address `inside` (RFC 4787 REQ-2), or with
    /// deterministic NAT its computed one; 0 when there is none (no address active, or not a
    /// subscriber).
    pub fn paired_address(&self, inside: u32) -> u32 {
        self.outside_address(inside).map_or(0, |(a, _)| a)
    }

    /// The outside address (and its index) of inside address `inside`: computed with
    /// deterministic NAT, paired otherwise.
    #[inline]
    fn outside_address(&self, inside: u32) -> Option<(u32, u32)> {
        match &self.det {
            Some(d) => {
                let (a, _) = d.place(inside)?;
                Some((self.pool.address(a), a))
            }
            None => self.pool.paired(inside),
        }
    }

    /// Packets held back (fragments waiting for their first fragment).
    pub fn held_fragments(&self) -> usize {
        self.frags.held()
    }

    /// Removes every session, mapping, hold and fragment context at once, keeping the counters:
    /// the next trial of a benchmark (an RFC 2544 search) starts from an empty NAT without
    /// building or zeroing its tables again (see [`FlowTable::clear`]). Held fragments are
    /// returned to their owner.
    pub fn clear(&mut self) {
        self.table.clear();
        self.map_table.clear();
        if let Some(t) = self.subscribers.as_mut() {
            t.clear();
        }
        self.sessions.clear();
        self.mappings.clear();
        self.alloc.clear();
        self.frags.clear();
        if let Some(b) = self.blocks.as_mut() {
            b.clear();
        }
        self.active = 0;
        self.active_maps = 0;
        self.held_maps = 0;
        self.scan_cursor = 0;
        self.map_scan_cursor = 0;
        self.evict_cursor = 0;
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
    fn expired_at(deadline: u32, now: u32) -> bool {
        (now.wrapping_sub(deadline) as i32) > 0
    }

    #[inline(always)]
    fn drop_reason(&mut self, r: DropReason) -> DropReason {
        self.c.drops.add(r, 1);
        r
    }

    // ---- subscribers -----------------------------------------------------------------------

    /// `(ports, sessions)` an inside address holds on this worker.
    fn sub_counts(&self, sub: u32) -> (u32, u32) {
        self.subscribers
            .as_ref()
            .and_then(|t| t.peek(&FlowKey::new(sub, 0, 0, 0, 0)))
            .map_or((0, 0), |v| ((v >> 32) as u32, v as u32))
    }

    /// Refuses a new session (and a new port, with `port`) beyond the subscriber's limits.
    fn sub_admit(&mut self, sub: u32, port: bool) -> Result<(), DropReason> {
        if self.subscribers.is_none() {
            return Ok(());
        }
        let (ports, sessions) = self.sub_counts(sub);
        let over_ports = port && self.sub_port_limit > 0 && ports >= self.sub_port_limit;
        let over_sessions = self.sub_session_limit > 0 && sessions >= self.sub_session_limit;
        if over_ports || over_sessions {
            let limit = if over_ports {
                self.sub_port_limit
            } else {
                self.sub_session_limit
            };
            return Err(self.quota_exceeded(sub, limit));
        }
        Ok(())
    }

    /// Adds `ports` and `sessions` (either may be negative) to a subscriber's counts.
    fn sub_add(&mut self, sub: u32, ports: i32, sessions: i32) {
        let Some(t) = self.subscribers.as_mut() else {
            return;
        };
        let k = FlowKey::new(sub, 0, 0, 0, 0);
        let v = t.peek(&k).unwrap_or(0);
        let p = ((v >> 32) as u32).saturating_add_signed(ports);
        let s = (v as u32).saturating_add_signed(sessions);
        if p == 0 && s == 0 {
            t.remove(&k);
        } else if t.insert(k, u64::from(p) << 32 | u64::from(s), 0).is_err() {
            // One entry per subscriber with a session, and the table holds as many entries as
            // sessions: cannot fail, and a failure only loses a count, never a packet.
            debug_assert!(false, "subscriber table full");
        }
    }

    // ---- session lifecycle -----------------------------------------------------------------

    /// Ends session `idx`, which ended at `ended` (its deadline if it expired, now otherwise).
    /// Its keys leave the table and its mapping loses a user. With `hold` and a hold time its
    /// outside port is kept from other subscribers: an endpoint-dependent session stays as a
    /// hold record of its inbound key, an endpoint-independent mapping left without sessions
    /// goes on hold. (An eviction makes room now, so it holds nothing.)
    fn end_session(&mut self, idx: u32, ended: u32, hold: bool) {
        let mut s = self.sessions.get(idx);
        match s.state {
            ST_FREE => return,
            ST_HOLD => {
                self.table.remove(&s.in_key());
                self.sessions.free(idx);
                return;
            }
            _ => {}
        }
        self.table.remove(&s.out_key);
        self.active -= 1;
        if self.log_sessions
            && let Some(l) = self.log.as_deref_mut()
        {
            l.session(false, &s.out_key, s.nat_ip, s.nat_port, ended);
        }
        let sub = s.out_key.src();
        if self.eim {
            self.table.remove(&s.in_key());
            self.sessions.free(idx);
            self.sub_add(sub, 0, -1);
            if self.filtering == Filtering::AddressDependent {
                self.filter_unref(s.out_key.dst(), s.nat_ip, s.nat_port, s.out_key.proto());
            }
            let mk = state::Mapping::inside_key(sub, s.out_key.sport(), s.out_key.proto());
            if let Some(m) = self.map_table.peek(&mk) {
                self.mapping_unref(m, ended, hold);
            }
        } else {
            self.sub_add(sub, -1, -1);
            if hold && self.hold_ms > 0 {
                s.state = ST_HOLD;
                s.deadline = ended.wrapping_add(self.hold_ms);
                self.sessions.set(idx, &s);
                self.c.port_holds += 1;
            } else {
                self.table.remove(&s.in_key());
                self.sessions.free(idx);
            }
        }
    }

    /// A session of mapping `m` ended at `ended`: the last one puts the mapping on hold (or
    /// frees it, without `hold` or a hold time).
    fn mapping_unref(&mut self, m: u32, ended: u32, hold: bool) {
        let mut map = self.mappings.get(m);
        map.refs = map.refs.saturating_sub(1);
        if map.refs > 0 || map.state != MAP_LIVE {
            self.mappings.set(m, &map);
            return;
        }
        if !(hold && self.hold_ms > 0) {
            self.free_mapping(m);
            return;
        }
        self.active_maps -= 1;
        self.sub_add(map.inside, -1, 0);
        map.state = MAP_HOLD;
        map.deadline = ended.wrapping_add(self.hold_ms);
        self.mappings.set(m, &map);
        self.c.port_holds += 1;
        self.held_maps += 1;
    }

    /// Frees mapping `m` (no session uses it): its keys leave the table, its port returns.
    fn free_mapping(&mut self, m: u32) {
        let map = self.mappings.get(m);
        if map.state == MAP_LIVE {
            self.active_maps -= 1;
            self.sub_add(map.inside, -1, 0);
        } else {
            self.held_maps -= 1;
        }
        self.map_table.remove(&state::Mapping::inside_key(
            map.inside,
            map.inside_port,
            map.proto,
        ));
        self.map_table.remove(&state::Mapping::outside_key(
            map.outside,
            map.outside_port,
            map.proto,
        ));
        if let Some(a) = self.pool.index_of(map.outside) {
            self.alloc.give(a, map.proto);
            self.block_give(a, map.outside, map.outside_port);
        }
        self.mappings.free(m);
    }

    fn filter_ref(&mut self, remote: u32, nat_ip: u32, port: u16, proto: u8) -> bool {
        let k = state::Mapping::filter_key(remote, nat_ip, port, proto);
        let n = self.map_table.peek(&k).unwrap_or(0);
        self.map_table.insert(k, n + 1, 0).is_ok()
    }

    fn filter_unref(&mut self, remote: u32, nat_ip: u32, port: u16, proto: u8) {
        let k = state::Mapping::filter_key(remote, nat_ip, port, proto);
        match self.map_table.peek(&k) {
            Some(n) if n > 1 => {
                let _ = self.map_table.insert(k, n - 1, 0);
            }
            Some(_) => {
                self.map_table.remove(&k);
            }
            None => {}
        }
    }

    /// Ends expired sessions and hold records, and frees mappings whose hold is over, a few per
    /// burst. Records are handed out lowest index first, so every live one sits below the
    /// high-water mark: the scan never walks the never-used tail of a pool.
    fn expire_scan(&mut self, now: u32) {
        let n = self.sessions.high_water();
        if n > 0 {
            for _ in 0..self.scan_per_burst.min(n) {
                let i = if self.scan_cursor >= n {
                    0
                } else {
                    self.scan_cursor
                };
                self.scan_cursor = i + 1;
                let s = self.sessions.get(i as u32);
                if s.state != ST_FREE && Self::expired_at(s.deadline, now) {
                    if s.state != ST_HOLD {
                        self.c.expired += 1;
                    }
                    self.end_session(i as u32, s.deadline, true);
                    // A session that just became a hold record is not expired yet.
                }
            }
        }
        // Mappings only end by a hold running out: no hold, nothing to scan.
        let m = self.mappings.high_water();
        if self.held_maps > 0 {
            for _ in 0..self.scan_per_burst.min(m) {
                let i = if self.map_scan_cursor >= m {
                    0
                } else {
                    self.map_scan_cursor
                };
                self.map_scan_cursor = i + 1;
                let map = self.mappings.get(i as u32);
                if map.state == MAP_HOLD && Self::expired_at(map.deadline, now) {
                    self.free_mapping(i as u32);
                }
            }
        }
    }

    /// Makes room for a session: ends an expired session or a hold record (neither is a live
    /// session, so every policy may), or with `full_policy = "evict"` a transitory TCP session
    /// (opening or closing), among the next `evict_scan` sessions; never an established TCP or a
    /// live UDP/ICMP session (RFC 6888 REQ-11). True when room was made.
    fn make_room(&mut self, now: u32) -> bool {
        let n = self.sessions.high_water();
        for _ in 0..self.evict_scan.min(n) {
            let i = if self.evict_cursor >= n {
                0
            } else {
                self.evict_cursor
            };
            self.evict_cursor = i + 1;
            let s = self.sessions.get(i as u32);
            if s.state == ST_FREE {
                continue;
            }
            let expired = Self::expired_at(s.deadline, now);
            let transitory = matches!(s.state, ST_TCP_OPENING | ST_TCP_CLOSING);
            if s.state == ST_HOLD {
                if !expired {
                    self.c.holds_ended_early += 1;
                }
            } else if expired {
                // An endpoint-independent mapping's hold takes no session record: keep it.
                self.c.expired += 1;
                self.end_session(i as u32, s.deadline, self.eim);
                return true;
            } else if self.evict && transitory {
                self.c.evicted += 1;
            } else {
                continue;
            }
            self.end_session(i as u32, now, false);
            return true;
        }
        false
    }

    /// Makes room for a mapping: frees a held mapping among the next `evict_scan` (ending its
    /// hold early when it has not run out: counted), or with `full_policy = "evict"` evicts a
    /// session whose mapping then goes.
    fn make_room_mapping(&mut self, now: u32) -> bool {
        let n = if self.held_maps > 0 {
            self.mappings.high_water()
        } else {
            0
        };
        for _ in 0..self.evict_scan.min(n) {
            let i = if self.map_scan_cursor >= n {
                0
            } else {
                self.map_scan_cursor
            };
            self.map_scan_cursor = i + 1;
            let map = self.mappings.get(i as u32);
            if map.state == MAP_HOLD {
                if !Self::expired_at(map.deadline, now) {
                    self.c.holds_ended_early += 1;
                }
                self.free_mapping(i as u32);
                return true;
            }
        }
        self.evict && self.make_room(now)
    }

    /// The live session behind a table value, or `None` (a hold record, or an expired session,
    /// which is ended here).
    #[inline(always)]
    fn live_session(&mut self, v: u32, now: u32) -> Option<(u32, bool)> {
        let idx = v >> 1;
        let s = self.sessions.get(idx);
        if s.state == ST_HOLD || s.state == ST_FREE {
            return None;
        }
        if Self::expired_at(s.deadline, now) {
            self.end_session(idx, s.deadline, true);
            self.c.expired += 1;
            return None;
        }
        Some((idx, v & 1 == 1))
    }

    /// Creates a session for inside 5-tuple `out` with outside endpoint `nat_ip:nat_port`,
    /// TCP seen-flags `tcp` (0 otherwise). Evicts once and retries when the policy allows.
    fn create_session(
        &mut self,
        out: FlowKey,
        nat_ip: u32,
        nat_port: u16,
        tcp: u8,
        now: u32,
    ) -> Result<u32, DropReason> {
        match self.try_create_session(out, nat_ip, nat_port, tcp, now) {
            Ok(i) => Ok(i),
            Err(_) if self.make_room(now) => self
                .try_create_session(out, nat_ip, nat_port, tcp, now)
                .map_err(|_| self.table_full()),
            Err(_) => Err(self.table_full()),
        }
    }

    fn table_full(&mut self) -> DropReason {
        self.c.table_full += 1;
        if let Some(l) = self.log.as_deref_mut() {
            l.quota_sessions(self.sessions.capacity() as u32);
        }
        DropReason::FLOW_TABLE_FULL
    }

    fn try_create_session(
        &mut self,
        out: FlowKey,
        nat_ip: u32,
        nat_port: u16,
        tcp_bits: u8,
        now: u32,
    ) -> Result<u32, NoRoom> {
        let idx = self.sessions.alloc().ok_or(NoRoom::Pool)?;
        let proto = out.proto();
        let state = match proto {
            PROTO_UDP => ST_UDP,
            PROTO_ICMP => ST_ICMP,
            _ => tcp::state_of(tcp_bits),
        };
        let mut ipd = CsumDelta::default();
        ipd.add32(out.src(), nat_ip);
        let mut l4d = CsumDelta::default();
        l4d.add16(out.sport(), nat_port);
        if proto != PROTO_ICMP {
            l4d = l4d.combine(ipd);
        }
        let s = Session {
            out_key: out,
            deadline: now.wrapping_add(self.timeouts.of(state)),
            nat_ip,
            nat_port,
            ip_delta: ipd.raw(),
            l4_delta: l4d.raw(),
            state,
            tcp: tcp_bits,
        };
        if self.table.insert(out, idx << 1, now).is_err() {
            self.sessions.release(idx);
            return Err(NoRoom::Table);
        }
        if self.table.insert(s.in_key(), idx << 1 | 1, now).is_err() {
            self.table.remove(&out);
            self.sessions.release(idx);
            return Err(NoRoom::Table);
        }
        self.sessions.set(idx, &s);
        self.active += 1;
        self.c.new_mappings += 1;
        if self.log_sessions
            && let Some(l) = self.log.as_deref_mut()
        {
            l.session(true, &out, nat_ip, nat_port, now);
        }
        Ok(idx)
    }

    // ---- new sessions ----------------------------------------------------------------------

    /// An outbound packet with key `k` (its inside 5-tuple) and no session.
    fn outbound_miss(&mut self, k: FlowKey, p: &Parsed, now: u32) -> Result<u32, DropReason> {
        let mut bits = 0;
        if let L4::Tcp { flags, .. } = p.l4info {
            if !tcp::opens(flags) {
                self.c.tcp_not_syn += 1;
                return Err(self.reasons.tcp_not_syn);
            }
            bits = tcp::opened(false);
        }
        let sub = k.src();
        let proto = k.proto();
        if self.eim {
            let mk = state::Mapping::inside_key(sub, k.sport(), proto);
            let m = match self.map_table.peek(&mk) {
                Some(m) if self.mappings.get(m).state == MAP_LIVE => {
                    self.sub_admit(sub, false)?;
                    m
                }
                held => {
                    self.sub_admit(sub, true)?;
                    match held {
                        // The subscriber's own held mapping comes back with its port.
                        Some(m) => {
                            let mut map = self.mappings.get(m);
                            map.state = MAP_LIVE;
                            self.mappings.set(m, &map);
                            self.held_maps -= 1;
                            self.active_maps += 1;
                            self.sub_add(sub, 1, 0);
                            m
                        }
                        None => self.new_mapping(sub, k.sport(), proto, now)?,
                    }
                }
            };
            let map = self.mappings.get(m);
            if self.filtering == Filtering::AddressDependent
                && !self.filter_ref(k.dst(), map.outside, map.outside_port, proto)
            {
                self.mapping_unref_if_unused(m, now);
                return Err(self.table_full());
            }
            match self.create_session(k, map.outside, map.outside_port, bits, now) {
                Ok(idx) => {
                    let mut map = self.mappings.get(m);
                    map.refs += 1;
                    self.mappings.set(m, &map);
                    self.sub_add(sub, 0, 1);
                    Ok(idx)
                }
                Err(r) => {
                    if self.filtering == Filtering::AddressDependent {
                        self.filter_unref(k.dst(), map.outside, map.outside_port, proto);
                    }
                    self.mapping_unref_if_unused(m, now);
                    Err(r)
                }
            }
        } else {
            self.sub_admit(sub, true)?;
            let Some((nat_ip, _)) = self.pool.paired(sub) else {
                return Err(self.addresses_exhausted());
            };
            let port = self.edm_port(k, nat_ip, now)?;
            let idx = self.create_session(k, nat_ip, port, bits, now)?;
            self.sub_add(sub, 1, 1);
            Ok(idx)
        }
    }

    /// A mapping whose first session could not be created goes again (no hold: it was never
    /// used).
    fn mapping_unref_if_unused(&mut self, m: u32, _now: u32) {
        if self.mappings.get(m).refs == 0 {
            self.free_mapping(m);
        }
    }

    /// A new endpoint-independent mapping for `inside:port` (see [`alloc`]).
    fn new_mapping(
        &mut self,
        inside: u32,
        port: u16,
        proto: u8,
        now: u32,
    ) -> Result<u32, DropReason> {
        let Some((nat_ip, aidx)) = self.outside_address(inside) else {
            return Err(if self.det.is_some() {
                self.c.not_subscriber += 1;
                self.reasons.not_subscriber
            } else {
                self.addresses_exhausted()
            });
        };
        // A deterministic subscriber's limit is its own range (checked there), not the address.
        if self.det.is_none() && self.alloc.full(aidx, proto) {
            return Err(self.port_exhausted(nat_ip, proto));
        }
        let out_port = if self.det.is_some() {
            self.det_port(inside, port, nat_ip, proto, now)?
        } else if self.blocks.is_some() {
            self.block_port(inside, nat_ip, aidx, proto, now)?
        } else {
            let cands = self.alloc.candidates(port);
            let mut found = None;
            for c in cands {
                self.c.port_probes += 1;
                if self.eim_port_free(nat_ip, c, proto, inside, now) {
                    found = Some(c);
                    break;
                }
            }
            let Some(out_port) = found else {
                return Err(self.port_exhausted(nat_ip, proto));
            };
            out_port
        };
        if out_port == port {
            self.c.ports_preserved += 1;
        }
        let inserted = match self.insert_mapping(inside, port, nat_ip, out_port, proto, now) {
            Some(m) => Some(m),
            None if self.make_room_mapping(now) => {
                self.insert_mapping(inside, port, nat_ip, out_port, proto, now)
            }
            None => None,
        };
        let Some(m) = inserted else {
            self.block_give(aidx, nat_ip, out_port);
            return Err(self.table_full());
        };
        self.mappings.set(
            m,
            &state::Mapping {
                inside,
                outside: nat_ip,
                refs: 0,
                deadline: 0,
                inside_port: port,
                outside_port: out_port,
                proto,
                state: MAP_LIVE,
            },
        );
        self.alloc.take(aidx, proto);
        self.active_maps += 1;
        self.sub_add(inside, 1, 0);
        self.c.new_eim_mappings += 1;
        Ok(m)
    }

    /// A port for a new mapping of `inside:port` in its deterministic range on this worker: the
    /// inside port when it is in the range and free, else up to `port_attempts` ports from a
    /// random start in the range. A full range is the subscriber's quota reached.
    fn det_port(
        &mut self,
        inside: u32,
        port: u16,
        nat_ip: u32,
        proto: u8,
        now: u32,
    ) -> Result<u16, DropReason> {
        let Some((first, last)) = self.det.as_ref().and_then(|d| {
            let (_, slot) = d.place(inside)?;
            let (lo, hi) = self.alloc.range();
            Some(d.range(slot, lo, hi))
        }) else {
            self.c.not_subscriber += 1;
            return Err(self.reasons.not_subscriber);
        };
        let n = u32::from(last) - u32::from(first) + 1;
        if (first..=last).contains(&port) {
            self.c.port_probes += 1;
            if self.eim_port_free(nat_ip, port, proto, inside, now) {
                return Ok(port);
            }
        }
        let start = self.alloc.random_below(n);
        for t in 0..self.block_tries.min(n) {
            let p = first + ((start + t) % n) as u16;
            self.c.port_probes += 1;
            if self.eim_port_free(nat_ip, p, proto, inside, now) {
                return Ok(p);
            }
        }
        Err(self.quota_exceeded(inside, n))
    }

    /// A port for a new mapping of `inside` from its blocks on `nat_ip` (address index `aidx`),
    /// taking a new block when its blocks have none within the bounded tries. The port's block
    /// counts the mapping from here on ([`Nat::block_give`] undoes it).
    fn block_port(
        &mut self,
        inside: u32,
        nat_ip: u32,
        aidx: u32,
        proto: u8,
        now: u32,
    ) -> Result<u16, DropReason> {
        let Some(bl) = self.blocks.as_ref() else {
            return Err(self.port_exhausted(nat_ip, proto));
        };
        let (mut b, held) = bl.of(inside);
        let tries = self.block_tries.min(u32::from(bl.size()));
        for _ in 0..held {
            let Some(bl) = self.blocks.as_mut() else {
                break;
            };
            let next = bl.next_of(b);
            if !bl.full(b) {
                // Counted before the probes: freeing an expired hold on a probed port must not
                // release the block being searched.
                bl.take(b);
                for _ in 0..tries {
                    let Some(p) = self.blocks.as_mut().map(|bl| bl.candidate(b)) else {
                        break;
                    };
                    self.c.port_probes += 1;
                    if self.eim_port_free(nat_ip, p, proto, inside, now) {
                        return Ok(p);
                    }
                }
                if let Some(bl) = self.blocks.as_mut() {
                    bl.untake(b);
                }
            }
            b = next;
        }
        let Some(bl) = self.blocks.as_mut() else {
            return Err(self.port_exhausted(nat_ip, proto));
        };
        match bl.alloc(inside, aidx) {
            Ok(b) => {
                bl.take(b);
                let (first, last) = bl.ports(b);
                let p = bl.candidate(b);
                if let Some(l) = self.log.as_deref_mut() {
                    l.block(true, inside, nat_ip, first, last);
                }
                Ok(p)
            }
            Err(NoBlock::Limit) => {
                let limit = self.blocks.as_ref().map_or(0, |b| b.limit());
                let size = u32::from(self.blocks.as_ref().map_or(0, |b| b.size()));
                Err(self.quota_exceeded(inside, limit * size))
            }
            Err(NoBlock::Exhausted) => {
                // No block left on the address: no new subscriber can be given a port on it.
                self.c.port_exhausted += 1;
                if let Some(l) = self.log.as_deref_mut() {
                    l.exhausted(nat_ip, proto);
                    l.addresses_exhausted();
                }
                Err(self.reasons.port_exhausted)
            }
        }
    }

    /// A mapping no longer holds `port` of `nat_ip` (address index `aidx`): its block counts
    /// one less, and the last one releases the block (logged).
    fn block_give(&mut self, aidx: u32, nat_ip: u32, port: u16) {
        let Some(bl) = self.blocks.as_mut() else {
            return;
        };
        let Some(b) = bl.block_of(aidx, port) else {
            return;
        };
        let (first, last) = bl.ports(b);
        if let Some(owner) = bl.give(b)
            && let Some(l) = self.log.as_deref_mut()
        {
            l.block(false, owner, nat_ip, first, last);
        }
    }

    /// A mapping record and its two keys, or `None` when there is no room.
    fn insert_mapping(
        &mut self,
        inside: u32,
        port: u16,
        nat_ip: u32,
        out_port: u16,
        proto: u8,
        now: u32,
    ) -> Option<u32> {
        let m = self.mappings.alloc()?;
        let ik = state::Mapping::inside_key(inside, port, proto);
        let ok = state::Mapping::outside_key(nat_ip, out_port, proto);
        if self.map_table.insert(ik, m, now).is_err() {
            self.mappings.release(m);
            return None;
        }
        if self.map_table.insert(ok, m, now).is_err() {
            self.map_table.remove(&ik);
            self.mappings.release(m);
            return None;
        }
        Some(m)
    }

    /// True when outside endpoint `nat_ip:port` may be taken by subscriber `sub`: unused, or
    /// held for `sub` itself, or held past its time (the hold is then ended).
    fn eim_port_free(&mut self, nat_ip: u32, port: u16, proto: u8, sub: u32, now: u32) -> bool {
        let k = state::Mapping::outside_key(nat_ip, port, proto);
        let Some(m) = self.map_table.peek(&k) else {
            return true;
        };
        let map = self.mappings.get(m);
        if map.state == MAP_HOLD {
            if map.inside == sub || Self::expired_at(map.deadline, now) {
                self.free_mapping(m);
                return true;
            }
            self.c.hold_blocked += 1;
        }
        false
    }

    /// An outside port for endpoint-dependent session `k` on `nat_ip`: one whose inbound key
    /// (remote -> nat_ip:port) is unused, held for this subscriber, or held or used past its
    /// time.
    fn edm_port(&mut self, k: FlowKey, nat_ip: u32, now: u32) -> Result<u16, DropReason> {
        let sub = k.src();
        let cands = self.alloc.candidates(k.sport());
        for c in cands {
            self.c.port_probes += 1;
            let ik = FlowKey::new(k.dst(), nat_ip, k.dport(), c, k.proto());
            let free = match self.table.peek(&ik) {
                None => true,
                Some(v) => {
                    let idx = v >> 1;
                    let s = self.sessions.get(idx);
                    if s.state != ST_HOLD && Self::expired_at(s.deadline, now) {
                        self.c.expired += 1;
                        self.end_session(idx, s.deadline, true);
                    }
                    let s = self.sessions.get(idx);
                    if s.state == ST_FREE {
                        true
                    } else if s.state == ST_HOLD
                        && (s.out_key.src() == sub || Self::expired_at(s.deadline, now))
                    {
                        self.end_session(idx, now, false);
                        true
                    } else {
                        if s.state == ST_HOLD {
                            self.c.hold_blocked += 1;
                        }
                        false
                    }
                }
            };
            if free {
                if c == k.sport() {
                    self.c.ports_preserved += 1;
                }
                return Ok(c);
            }
        }
        Err(self.port_exhausted(nat_ip, k.proto()))
    }

    /// No active outside address to pair a subscriber with (every one draining): counted as
    /// `port_exhausted` and logged as addresses exhausted (natEvent 3, rate limited).
    fn addresses_exhausted(&mut self) -> DropReason {
        self.c.port_exhausted += 1;
        self.c.no_active_address += 1;
        if let Some(l) = self.log.as_deref_mut() {
            l.addresses_exhausted();
        }
        self.reasons.port_exhausted
    }

    /// Subscriber `inside` is at its quota of `limit` (ports or sessions): counted as
    /// `subscriber_limit` and logged as quota exceeded (natEvent 13, maximum entries per user,
    /// rate limited).
    fn quota_exceeded(&mut self, inside: u32, limit: u32) -> DropReason {
        self.c.subscriber_limit += 1;
        if let Some(l) = self.log.as_deref_mut() {
            l.quota_per_user(inside, limit);
        }
        self.reasons.subscriber_limit
    }

    /// No port left for a new mapping on `nat_ip`: counted and logged (rate limited).
    fn port_exhausted(&mut self, nat_ip: u32, proto: u8) -> DropReason {
        self.c.port_exhausted += 1;
        if let Some(l) = self.log.as_deref_mut() {
            l.exhausted(nat_ip, proto);
        }
        self.reasons.port_exhausted
    }

    /// An inbound packet with key `k` (remote -> outside endpoint) and no session: with
    /// endpoint-independent mapping and filtering that allows it, a session for the mapped
    /// inside endpoint.
    fn inbound_miss(&mut self, k: FlowKey, p: &Parsed, now: u32) -> Result<u32, DropReason> {
        let no_mapping = |s: &mut Self| {
            s.c.no_mapping += 1;
            s.reasons.no_mapping
        };
        if !self.eim || self.filtering == Filtering::AddressAndPortDependent {
            return Err(no_mapping(self));
        }
        let bits = match p.l4info {
            L4::Tcp { flags, .. } if tcp::opens(flags) => tcp::opened(true),
            L4::Udp { .. } => 0,
            _ => return Err(no_mapping(self)),
        };
        let proto = k.proto();
        let Some(m) = self
            .map_table
            .peek(&state::Mapping::outside_key(k.dst(), k.dport(), proto))
        else {
            return Err(no_mapping(self));
        };
        let map = self.mappings.get(m);
        if map.state != MAP_LIVE {
            return Err(no_mapping(self));
        }
        if self.filtering == Filtering::AddressDependent
            && self
                .map_table
                .peek(&state::Mapping::filter_key(
                    k.src(),
                    map.outside,
                    map.outside_port,
                    proto,
                ))
                .is_none()
        {
            self.c.filtered += 1;
            return Err(self.reasons.filtered);
        }
        self.sub_admit(map.inside, false)?;
        if self.filtering == Filtering::AddressDependent
            && !self.filter_ref(k.src(), map.outside, map.outside_port, proto)
        {
            return Err(self.table_full());
        }
        let out = FlowKey::new(map.inside, k.src(), map.inside_port, k.sport(), proto);
        match self.create_session(out, map.outside, map.outside_port, bits, now) {
            Ok(idx) => {
                let mut map = self.mappings.get(m);
                map.refs += 1;
                self.mappings.set(m, &map);
                self.sub_add(map.inside, 0, 1);
                self.c.inbound_sessions += 1;
                Ok(idx)
            }
            Err(r) => {
                if self.filtering == Filtering::AddressDependent {
                    self.filter_unref(k.src(), map.outside, map.outside_port, proto);
                }
                Err(r)
            }
        }
    }

    // ---- classification --------------------------------------------------------------------

    #[inline(always)]
    fn is_inbound(&self, p: &Parsed, rx_port: u16) -> bool {
        match self.direction {
            DirectionPolicy::ByAddress => self.pool.contains(p.dst),
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

    /// A packet to an outside address with no session: is it from the inside (hairpinning)?
    fn hairpin_source(&self, p: &Parsed, rx_port: u16) -> bool {
        if !self.hairpinning || matches!(p.l4info, L4::Icmp { .. }) || self.pool.contains(p.src) {
            return false;
        }
        match self.direction {
            DirectionPolicy::ByPort => !self.is_inbound(p, rx_port),
            DirectionPolicy::ByAddress => {
                let (sport, _) = p.ports();
                (self.eim
                    && self
                        .map_table
                        .peek(&state::Mapping::inside_key(p.src, sport, p.proto))
                        .is_some())
                    || self.inside_prefixes.iter().any(|&(b, m)| p.src & m == b)
            }
        }
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
        if p.ihl > IPV4_HLEN && self.ip_options == OptionsPolicy::Drop {
            return Err(DropReason::IP_OPTIONS);
        }
        if p.frag != Frag::Later {
            match p.l4info {
                L4::Other => return Err(DropReason::UNSUPPORTED_PROTOCOL),
                L4::Icmp { ty, .. } if !icmp_is_query(ty) && !icmp_is_error(ty) => {
                    return Err(DropReason::UNSUPPORTED_PROTOCOL);
                }
                _ => {}
            }
        } else if !matches!(p.proto, PROTO_TCP | PROTO_UDP | PROTO_ICMP) {
            return Err(DropReason::UNSUPPORTED_PROTOCOL);
        }
        if self.decrement_ttl {
            if p.ttl <= 1 {
                self.c.ttl_expired += 1;
                return Err(DropReason::TTL_EXPIRED);
            }
            if let Some(mut ip) = Ipv4View::new_checked(&mut h[p.l3..]) {
                ip.set_ttl(p.ttl - 1);
            }
        }
        Ok(p)
    }

    // ---- rewriting -------------------------------------------------------------------------

    /// Rewrites a TCP/UDP/ICMP-query packet for session `idx` in direction `inbound`, and
    /// refreshes the session (both directions refresh: RFC 4787 REQ-6 and its MAY). The caller
    /// counts the packet once it is through (a hairpinned packet is translated twice).
    #[inline(always)]
    fn translate(&mut self, h: &mut [u8], p: &Parsed, idx: u32, inbound: bool, now: u32) {
        let s = self.sessions.get(idx);
        self.translate_with(h, p, idx, s, inbound, now);
    }

    /// [`Nat::translate`] with session `idx` already read as `s`.
    #[inline(always)]
    fn translate_with(
        &mut self,
        h: &mut [u8],
        p: &Parsed,
        idx: u32,
        mut s: Session,
        inbound: bool,
        now: u32,
    ) {
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
            (s.nat_ip, s.nat_port)
        };
        let ip = &mut h[p.l3..p.l3 + IPV4_HLEN];
        write_u32(ip, if inbound { 16 } else { 12 }, addr);
        let hc = ipd.apply(read_u16(ip, 10));
        write_u16(ip, 10, hc);
        let l4 = &mut h[p.l4..];
        // The refresh writes only what changed: the deadline, and TCP's state. A session's
        // protocol is part of its key, so a UDP or ICMP packet's session is in that protocol's
        // one state.
        match p.l4info {
            L4::Tcp { flags, .. } => {
                write_u16(l4, if inbound { 2 } else { 0 }, port);
                let c = l4d.apply(read_u16(l4, 16));
                write_u16(l4, 16, c);
                s.state = tcp::track(&mut s.tcp, flags, inbound);
                let deadline = now.wrapping_add(self.timeouts.of(s.state));
                self.sessions.refresh_tcp(idx, deadline, s.state, s.tcp);
            }
            L4::Udp { .. } => {
                write_u16(l4, if inbound { 2 } else { 0 }, port);
                let c = l4d.apply_udp(read_u16(l4, 6));
                write_u16(l4, 6, c);
                debug_assert_eq!(s.state, ST_UDP);
                self.sessions
                    .refresh(idx, now.wrapping_add(self.timeouts.udp));
            }
            L4::Icmp { .. } => {
                write_u16(l4, 4, port);
                let c = l4d.apply(read_u16(l4, 2));
                write_u16(l4, 2, c);
                debug_assert_eq!(s.state, ST_ICMP);
                self.sessions
                    .refresh(idx, now.wrapping_add(self.timeouts.icmp));
            }
            L4::Other => {}
        }
    }

    /// The common case, inline: a packet of a live session, in the direction of the key it
    /// matched, that is not hairpinned. False (nothing done) for everything else, which
    /// [`Nat::flow`] handles.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn fast_path(
        &mut self,
        burst: &mut Burst,
        i: usize,
        p: &Parsed,
        guess: bool,
        to_pool: bool,
        slot: u32,
        now: u32,
    ) -> bool {
        let v = self.table.value(slot);
        let (idx, inbound) = (v >> 1, v & 1 == 1);
        let s = self.sessions.get(idx);
        if !(ST_UDP..=ST_TCP_CLOSING).contains(&s.state)
            || Self::expired_at(s.deadline, now)
            || (self.direction == DirectionPolicy::ByPort && inbound != guess)
            || (!inbound && self.hairpinning && to_pool)
        {
            return false;
        }
        self.translate_with(burst.header_mut(i), p, idx, s, inbound, now);
        if inbound {
            self.c.inbound_translated += 1;
        } else {
            self.c.outbound_translated += 1;
        }
        true
    }

    /// A TCP/UDP/ICMP-query packet: find or create its session, translate, hairpin.
    #[allow(clippy::too_many_arguments)]
    fn flow(
        &mut self,
        burst: &mut Burst,
        i: usize,
        p: &Parsed,
        guess: bool,
        key: FlowKey,
        slot: u32,
        now: u32,
    ) -> Result<(), DropReason> {
        let rx_port = burst.rx_port(i);
        let hit = if slot == NO_SLOT {
            None
        } else {
            let v = self.table.value(slot);
            self.live_session(v, now)
        };
        let (idx, inbound) = match hit {
            Some((_, inb)) if self.direction == DirectionPolicy::ByPort && inb != guess => {
                self.c.no_mapping += 1;
                return Err(self.reasons.no_mapping);
            }
            Some(x) => x,
            None if !guess => (self.outbound_miss(key, p, now)?, false),
            None if self.hairpin_source(p, rx_port) => {
                (self.outbound_miss(Self::key_of(p, false), p, now)?, false)
            }
            None => (self.inbound_miss(key, p, now)?, true),
        };
        self.translate(burst.header_mut(i), p, idx, inbound, now);
        if !inbound && self.hairpinning && self.pool.contains(p.dst) {
            self.hairpin(burst, i, p, idx, now)?;
        }
        if inbound {
            self.c.inbound_translated += 1;
        } else {
            self.c.outbound_translated += 1;
        }
        Ok(())
    }

    /// The second half of a hairpinned packet (its source already translated by session `a`):
    /// translate its destination, the outside endpoint of another inside host, inbound.
    fn hairpin(
        &mut self,
        burst: &mut Burst,
        i: usize,
        p: &Parsed,
        a: u32,
        now: u32,
    ) -> Result<(), DropReason> {
        if matches!(p.l4info, L4::Icmp { .. }) {
            self.c.no_mapping += 1;
            return Err(self.reasons.no_mapping);
        }
        let s = self.sessions.get(a);
        let (_, dport) = p.ports();
        if !self.alloc.owns(dport) {
            self.c.hairpin_via_outside += 1;
            return Ok(());
        }
        let k = FlowKey::new(s.nat_ip, p.dst, s.nat_port, dport, p.proto);
        let hit = match self.table.lookup(&k, now) {
            Some(slot) => {
                let v = self.table.value(slot);
                self.live_session(v, now).filter(|&(_, inb)| inb)
            }
            None => None,
        };
        let b = match hit {
            Some((b, _)) => b,
            None => self.inbound_miss(k, p, now)?,
        };
        self.translate(burst.header_mut(i), p, b, true, now);
        self.c.hairpinned += 1;
        if self.direction == DirectionPolicy::ByPort {
            let rx = burst.rx_port(i);
            burst.set_verdict(i, Verdict::tx(rx));
        }
        Ok(())
    }

    /// Records the translation of a first fragment (or its failure) for its later fragments.
    fn record_first(&mut self, burst: &Burst, i: usize, p: &Parsed, ok: bool, now: u32) {
        let Some(ip) = Ipv4View::new_checked(&burst.header(i)[p.l3..]) else {
            return;
        };
        let ident = ip.ident();
        let outcome = if ok {
            let (ns, nd) = (ip.src(), ip.dst());
            Outcome::Translated {
                src: if ns != p.src { ns } else { 0 },
                dst: if nd != p.dst { nd } else { 0 },
            }
        } else {
            Outcome::Failed
        };
        self.frags
            .record(p.src, p.dst, ident, p.proto, outcome, now);
    }

    /// A later fragment (no L4 header): translated like its first fragment, translated at once
    /// when outbound, or held.
    fn later_fragment(
        &mut self,
        burst: &mut Burst,
        i: usize,
        p: &Parsed,
        guess: bool,
        now: u32,
    ) -> Result<(), DropReason> {
        let ident = read_u16(burst.header(i), p.l3 + 4);
        match self.frags.lookup(p.src, p.dst, ident, p.proto, now) {
            Outcome::Translated { src, dst } => {
                self.fragment_translated(burst, i, p.l3, src, dst);
                Ok(())
            }
            Outcome::Failed => {
                self.frags.c.first_dropped += 1;
                Err(self.reasons.fragment_first_dropped)
            }
            Outcome::Unknown if !guess && !self.pool.contains(p.dst) => {
                // Outbound: its new source is the paired address, whatever its ports.
                let Some((nat_ip, _)) = self.outside_address(p.src) else {
                    self.to_hold.push(i);
                    return Ok(());
                };
                frag::rewrite(burst.header_mut(i), p.l3, nat_ip, 0);
                self.frags.c.translated_early += 1;
                self.c.outbound_translated += 1;
                Ok(())
            }
            Outcome::Unknown => {
                self.to_hold.push(i);
                Ok(())
            }
        }
    }

    /// Rewrites a later fragment as its first fragment was (`src`/`dst`: 0 = unchanged).
    fn fragment_translated(&mut self, burst: &mut Burst, i: usize, l3: usize, src: u32, dst: u32) {
        frag::rewrite(burst.header_mut(i), l3, src, dst);
        self.frags.c.translated += 1;
        if dst != 0 {
            self.c.inbound_translated += 1;
        } else {
            self.c.outbound_translated += 1;
        }
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
            match self.screen(burst.header_mut(i), frame_len) {
                Err(reason) => {
                    self.c.drops.add(reason, 1);
                    burst.drop_packet(i, reason);
                    self.pending.push(Pending::Done);
                }
                Ok(p) if p.frag == Frag::Later => {
                    let guess = self.is_inbound(&p, rx_port);
                    self.pending.push(Pending::Later { p, guess });
                }
                Ok(p) => {
                    if let Some(local) = &self.local
                        && (p.ttl <= 1 || (!self.is_inbound(&p, rx_port) && local.contains(&p.dst)))
                    {
                        self.c.passed += 1;
                        self.pending.push(Pending::Done);
                        continue;
                    }
                    if let L4::Icmp { ty, .. } = p.l4info
                        && icmp_is_error(ty)
                    {
                        self.pending.push(Pending::IcmpError { p });
                        continue;
                    }
                    let to_pool = self.pool.contains(p.dst);
                    let guess = match self.direction {
                        DirectionPolicy::ByAddress => to_pool,
                        DirectionPolicy::ByPort => self.is_inbound(&p, rx_port),
                    };
                    self.keys[nkeys] = Self::key_of(&p, guess);
                    nkeys += 1;
                    self.pending.push(Pending::Flow { p, guess, to_pool });
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
                    .prefetch((self.table.value(slot) >> 1) as usize);
            }
        }
        let bulk_epoch = self.table.epoch();
        // Pass 3: act, in packet order.
        let mut j = 0usize;
        for (k, i) in (start..end).enumerate() {
            let r = match self.pending[k] {
                Pending::Done => continue,
                Pending::Flow { p, guess, to_pool } => {
                    let key = self.keys[j];
                    let h = self.hashes[j];
                    let mut slot = self.slots[j];
                    j += 1;
                    // Slots from the bulk lookup stay valid while the epoch holds; earlier
                    // packets may have moved or removed entries, or inserted this very key.
                    if self.table.epoch() != bulk_epoch || slot == NO_SLOT {
                        slot = self.table.lookup_hashed(&key, h, now).unwrap_or(NO_SLOT);
                    }
                    let r = if slot != NO_SLOT
                        && self.fast_path(burst, i, &p, guess, to_pool, slot, now)
                    {
                        Ok(())
                    } else {
                        self.flow(burst, i, &p, guess, key, slot, now)
                    };
                    if p.frag == Frag::First {
                        self.record_first(burst, i, &p, r.is_ok(), now);
                    }
                    r
                }
                Pending::IcmpError { p } => {
                    let r = self.icmp_error(burst, i, &p, now);
                    if p.frag == Frag::First {
                        self.record_first(burst, i, &p, r.is_ok(), now);
                    }
                    r
                }
                Pending::Later { p, guess } => self.later_fragment(burst, i, &p, guess, now),
            };
            match r {
                Ok(()) => {
                    if let Some(v) = self.verifier.as_mut()
                        && self.to_hold.last() != Some(&i)
                    {
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

    /// Holds the later fragments collected in `to_hold` (highest index first, so the indices
    /// of the others stay valid), or translates those whose first fragment came later in the
    /// same burst.
    fn hold_fragments(&mut self, burst: &mut Burst, now: u32) {
        while let Some(i) = self.to_hold.pop() {
            let Ok(p) = parse(burst.header(i), burst.frame_len(i)) else {
                continue;
            };
            let ident = read_u16(burst.header(i), p.l3 + 4);
            let r = match self.frags.lookup(p.src, p.dst, ident, p.proto, now) {
                Outcome::Translated { src, dst } => {
                    self.fragment_translated(burst, i, p.l3, src, dst);
                    Ok(())
                }
                Outcome::Failed => {
                    self.frags.c.first_dropped += 1;
                    Err(self.reasons.fragment_first_dropped)
                }
                Outcome::Unknown => {
                    if self.frags.hold(burst, i, &p, ident, now) {
                        continue;
                    }
                    Err(self.reasons.fragment_hold_full)
                }
            };
            match r {
                Ok(()) => {
                    if let Some(v) = self.verifier.as_mut() {
                        v.verify(burst, i);
                    }
                }
                Err(reason) => {
                    let reason = self.drop_reason(reason);
                    burst.drop_packet(i, reason);
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
        if let Some(l) = self.log.as_deref_mut() {
            l.sync(ctx.now_ns);
        }
        self.expire_scan(now);
        let n = burst.len();
        burst.prefetch_first();
        let mut start = 0;
        while start < n {
            let end = (start + BULK).min(n);
            self.process_chunk(burst, start, end, now);
            start = end;
        }
        if !self.to_hold.is_empty() {
            self.hold_fragments(burst, now);
        }
        if let Some(l) = self.log.as_deref_mut() {
            l.flush(false);
        }
    }

    /// Sends every NAT event still buffered.
    fn finish(&mut self, ctx: &NfContext) -> Result<(), String> {
        if let Some(l) = self.log.as_deref_mut() {
            l.sync(ctx.now_ns);
            l.flush(true);
        }
        Ok(())
    }

    fn held(&self) -> usize {
        self.frags.held()
    }

    /// While logged events wait to be sent: an idle worker still sends them within
    /// `log_flush_ms` ([`Nat::release`] flushes the log).
    fn wants_release(&self) -> bool {
        self.log.as_ref().is_some_and(|l| l.pending())
    }

    fn control(&mut self, cmd: &NfCommand, ctx: &NfContext) -> Result<Counters, String> {
        self.command(cmd, ctx)
    }

    fn release(&mut self, out: &mut Burst, ctx: &NfContext, flush: bool) {
        if let Some(l) = self.log.as_deref_mut() {
            l.sync(ctx.now_ns);
            l.flush(flush);
        }
        let now = ms_ticks(ctx.now_ns);
        let r = self.reasons;
        let from = out.len();
        let (inb, outb) = self.frags.release(out, now, flush, &r, &mut self.c.drops);
        self.c.inbound_translated += inb;
        self.c.outbound_translated += outb;
        if let Some(v) = self.verifier.as_mut() {
            for i in from..out.len() {
                if out.is_live(i) {
                    v.verify(out, i);
                }
            }
        }
    }

    /// Back to a fresh NAT: no session, mapping or fragment ([`Nat::clear`]), zero counters
    /// (its own and its tables'), the port allocator's random state as built.
    fn reset(&mut self) -> bool {
        self.clear();
        self.table.reset();
        self.map_table.reset();
        if let Some(t) = self.subscribers.as_mut() {
            t.reset();
        }
        self.alloc.reset();
        self.frags.reset();
        self.c = NatCounters::default();
        if let Some(v) = &mut self.verifier {
            v.reset();
        }
        true
    }

    /// Return traffic (to an outside address, destination port in this instance's slice) must
    /// reach the worker that owns the sessions of that slice: one rule per outside address.
    /// ICMP queries are not steered (their identifier is not a port a NIC matches on) and
    /// follow RSS.
    fn steering_rules(&self, queue: u16) -> Vec<dataplane::steer::SteerRule> {
        (0..self.pool.len())
            .map(|i| dataplane::steer::SteerRule {
                dst_ip: std::net::Ipv4Addr::from(self.pool.address(i)),
                dst_ports: self.alloc.range(),
                queue,
            })
            .collect()
    }

    /// The outside addresses, on the outside ports (or every port whose subnet holds them).
    fn owned_addresses(&self) -> Vec<(std::net::Ipv4Addr, Option<u16>)> {
        let ports = self.outside_port_list();
        self.pool
            .in_service()
            .flat_map(|i| {
                let ip = std::net::Ipv4Addr::from(self.pool.address(i));
                ports.iter().map(move |&p| (ip, p))
            })
            .collect()
    }

    fn counters(&self) -> Counters {
        let c = &self.c;
        let ts = self.table.stats();
        let f = &self.frags.c;
        let mut v = Counters::new();
        v.count("packets", c.packets)
            .count("skipped", c.skipped)
            .count("translations", c.inbound_translated + c.outbound_translated)
            .count("inbound_translated", c.inbound_translated)
            .count("outbound_translated", c.outbound_translated)
            .count("new_mappings", c.new_mappings)
            .count("new_eim_mappings", c.new_eim_mappings)
            .count("inbound_sessions", c.inbound_sessions)
            .count("port_exhausted", c.port_exhausted)
            .count("port_probes", c.port_probes)
            .count("ports_preserved", c.ports_preserved)
            .count("port_holds", c.port_holds)
            .count("hold_blocked", c.hold_blocked)
            .count("holds_ended_early", c.holds_ended_early)
            .count("subscriber_limit", c.subscriber_limit)
            .count("filtered", c.filtered)
            .count("tcp_not_syn", c.tcp_not_syn)
            .count("table_full", c.table_full)
            .count("no_mapping", c.no_mapping)
            .count("expired", c.expired)
            .count("evicted", c.evicted)
            .count("active_mappings", self.active as u64)
            .count("active_eim_mappings", self.active_maps as u64)
            .count("held_eim_mappings", self.held_maps as u64)
            .count("icmp_errors_translated", c.icmp_errors_translated)
            .count("icmp_errors_slow_path", c.icmp_errors_slow_path)
            .count("icmp_bad_checksum", c.icmp_bad_checksum)
            .count("icmp_errors_unverified", c.icmp_errors_unverified)
            .count("payload_unwritable", c.payload_unwritable)
            .count("fragments_dropped", c.fragments_dropped)
            .count("header_segment_short", c.header_segment_short)
            .count("hairpinned", c.hairpinned)
            .count("hairpin_via_outside", c.hairpin_via_outside)
            .count("not_subscriber", c.not_subscriber)
            .count("no_active_address", c.no_active_address)
            .count("ttl_expired", c.ttl_expired)
            .count("passed", c.passed)
            .count(
                "port_blocks_allocated",
                self.blocks.as_ref().map_or(0, |b| b.allocated),
            )
            .count(
                "port_blocks_released",
                self.blocks.as_ref().map_or(0, |b| b.released),
            )
            .count("dropped", c.drops.total());
        let mut frags = Counters::new();
        frags
            .count("first", f.first)
            .count("translated", f.translated)
            .count("translated_early", f.translated_early)
            .count("held", f.held)
            .count("released", f.released)
            .count("timed_out", f.timed_out)
            .count("hold_full", f.hold_full)
            .count("first_dropped", f.first_dropped)
            .count("held_now", self.frags.held() as u64);
        let mut table = Counters::new();
        table
            .count("lookups", ts.lookups)
            .count("hits", ts.hits)
            .count("inserts", ts.inserts)
            .count("cuckoo_moves", ts.cuckoo_moves)
            .count("evictions", ts.evictions)
            .count("full_drops", ts.full_drops);
        v.group("fragments", frags)
            .group("drops", drop_counters(&c.drops, &self.reasons.all()))
            .group("table", table);
        if let Some(ver) = &self.verifier {
            v.count("verify_slow_path", ver.verified)
                .count("checksum_mismatches", ver.mismatches);
        }
        if let Some(l) = &self.log {
            v.group("log", l.counters());
        }
        v
    }
}
