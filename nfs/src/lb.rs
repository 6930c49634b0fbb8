//! Layer-4 load balancer: VIP -> backends with per-flow affinity, round robin (the paper's
//! `LB_MODE rr`) or Maglev consistent hashing, destination rewrite with incremental checksums.
//!
//! # Model
//!
//! - Packets to the VIP (default 10.2.0.1) are assigned a backend (default 32 backends
//!   10.180.250.5 .. 10.180.250.36, the paper's FastClick setup) and their destination address
//!   is rewritten to it. The IPv4 checksum and the TCP/UDP checksum (pseudo-header) are updated
//!   incrementally from a per-backend precomputed delta (the paper's LB skipped the IP checksum
//!   fix; this one does not). UDP checksum 0 stays 0. ICMP has no pseudo-header, so only the IP
//!   checksum changes.
//! - **Affinity**: the first packet of a flow (5-tuple; ICMP queries keyed by identifier) picks
//!   a backend, stored in this core's [`FlowTable`] (value: backend index); later packets follow
//!   the entry. Entries expire after `idle_timeout_s` (default 60 s, FastClick's LB timeout).
//!   When the table is full, `full_policy = "evict"` (default, Katran-style LRU) replaces the
//!   least recently seen entry of the two candidate buckets; `"drop"` drops the packet as
//!   `flow_table_full`.
//! - **New flows**: `mode = "round-robin"` (default) takes the next enabled backend (each
//!   worker starts at a different backend); `mode = "maglev"` looks the flow's hash up in a
//!   Maglev table of prime size `maglev_table_size` (default 65 537, Katran's and the paper's),
//!   populated as in the Maglev paper (section 3.4): each backend walks its own permutation
//!   `offset + j·skip mod M` and the backends take turns claiming their next free slot, in the
//!   canonical order of their addresses (ascending), whatever order `backends` lists them in.
//!   The Maglev hash uses a fixed seed (`maglev_seed`), identical on every worker and node, so
//!   any worker, and any LB instance with the same backends, the same table size and seed,
//!   maps a new flow to the same backend, whatever its worker count, start order or restarts
//!   (see [`Maglev`]; docs/scale-out.md runs two instances behind ECMP on it).
//! - **Mid-flow packets** (TCP without SYN) that miss the flow table belong to a connection
//!   this instance never saw open: an ECMP rehash moved it here from another instance, or this
//!   instance restarted. They take the backend a new flow would (Katran's behaviour), which
//!   with Maglev is the backend every instance picks, so an established connection keeps its
//!   backend; they get a flow-table entry like a new flow and are counted as
//!   `midflow_fallback` (a subset of `new_flows`). Round robin has no such agreement: use
//!   Maglev where instances share a VIP.
//! - **Weights**: `weights` (default 1 each) set each backend's share of new flows: in
//!   round robin a backend takes `weight` new flows in a row before the next one's turn; in
//!   Maglev it claims `weight` slots per turn when the table is populated. A backend of weight 0
//!   takes no new flow.
//! - **Backends at run time** ([`NetworkFunction::control`], through the telemetry socket or
//!   `dataplane ctl`, applied by each worker to its own instance between bursts): `drain` sets
//!   the weight to 0 (no new flows; existing flows stay until they end), `enable` restores it
//!   (or re-enables a disabled backend), `weight` sets it, `disable` and `remove` take the
//!   backend away (its flows are re-assigned on their next packet, `remapped`), `add` appends a
//!   backend (or brings a removed one back). Each change rebuilds the Maglev table; flows of other
//!   backends keep their flow-table entry, so they never move, and the reply says how many
//!   table slots changed owner (Maglev moves about 1/N of them for 1 of N backends, nearly all
//!   of them the changed backend's). [`maglev_disruption`] measures the same without the flow
//!   table. `backends` lists every backend: address, state, weight, packets, new flows and
//!   active flows (kept exact by the flow table's per-value counts).
//! - **ICMP errors to the VIP** (a router's "fragmentation needed" about a backend's reply,
//!   which left with the VIP as its source): steered by the flow they quote, reversed, to the
//!   backend that serves that flow (Katran and IPVS do the same), so path MTU discovery works
//!   for every backend. The quoted headers end past a 64 B header segment; they are read
//!   through [`crate::slow_path`] (counted as `icmp_errors_slow_path`). An error that quotes no
//!   known flow is counted (`icmp_no_flow`) and, with Maglev, sent to the backend the quoted
//!   flow hashes to (where it would be now); round robin has no such backend and drops it as
//!   `icmp_no_flow`. Only the outer destination (and IPv4 checksum) is rewritten.
//! - **Not for the VIP**: forwarded unchanged (`non_vip = "forward"`, default) or dropped as
//!   `not_for_vip` (`"drop"`). Non-IPv4 frames count as not for the VIP (dropped as `not_ipv4`
//!   under `"drop"`, so a port's slow path still answers ARP). Frames that claim IPv4
//!   but are truncated or malformed are dropped with their reason; later fragments to the VIP
//!   carry no ports and are dropped as `fragment` (as Katran does).
//! - **The return path** (`return`): `"none"` (default, the paper's LB) rewrites only the
//!   client's packets, so replies leave the backend from its own address. `"nat"` (IPVS's NAT
//!   mode) also keeps, per flow, the key of the backend's reply (backend, client, ports) in the
//!   flow table; a reply that matches has its source rewritten back to the VIP (checksums
//!   updated incrementally), so the client sees the VIP; replies must therefore come back
//!   through the LB (the backends' route to the clients points at it) and to the worker that
//!   holds the flow, so `"nat"` needs one worker (RSS hashes the reply, whose addresses differ,
//!   elsewhere). `"ipip"` (Katran's direct server return) leaves the client's packet as it is
//!   and puts it in an outer IPv4 header (protocol 4) from `tunnel_src` to the backend (default
//!   in a routed run: the address of the port on the backend's subnet; never the VIP, which the
//!   backends hold themselves and would drop as a martian source), in the buffer's headroom; the backend decapsulates it (a Linux `ipip`
//!   tunnel with the VIP on a local interface) and answers the client directly. An outer
//!   packet longer than `tunnel_mtu` (default 1500) is dropped as `tunnel_too_big` (clamp the
//!   clients' MSS, or give the backend side a larger MTU); a buffer without 20 B of headroom
//!   is dropped as `no_headroom`.
//! - **The VIP is owned** on every port whose subnet holds it: the ports answer ARP for it. In a
//!   routed run (a network layer, [`dataplane::net`]) a packet to the VIP whose TTL is about to
//!   expire is left as it is, so the `route` stage's ICMP time exceeded quotes what the client
//!   sent.
//!
//! - **Drop reasons** of its own, registered when an LB is built: `not_for_vip`, `no_backend`
//!   (every backend disabled) and `icmp_no_flow`.
//! - **Per burst**: headers are parsed with a prefetch a few packets ahead, the VIP packets' keys
//!   are hashed and looked up in the flow table in bulk, then every packet is rewritten in order.
//!
//! Memory per flow: one flow-table slot of 2 + 32 B (`u16` value), 38-76 B per flow depending on
//! how the capacity rounds (see [`crate::flow_table`]), on 2 MiB pages where the machine has
//! them. No allocation per packet.
#![forbid(unsafe_code)]

use dataplane::{
    Burst, DropCounts, DropReason, NetworkFunction, NfCommand, NfContext, PREFETCH_AHEAD,
};
use serde::{Deserialize, Serialize};
use wire::checksum::CsumDelta;
use wire::classify::{Frag, L4, ParseError, Parsed, parse};
use wire::field::{read_u16, write_u16, write_u32};
use wire::icmpv4::{ICMP_HLEN, icmp_is_error};
use wire::ipv4::{IPV4_HLEN, Ipv4View, PROTO_TCP, PROTO_UDP};
use wire::tcp::TCP_SYN;

use crate::flow_table::{BULK, FlowKey, FlowTable, FullPolicy, NO_SLOT, hash_key, ms_ticks};
use crate::params::{bad_param, mix_seed, parse_ipv4, parse_params, timeout_ms};
use crate::registry::{
    BuildContext, Memory, NfSpec, Param, Reason, defaults_of, drop_counters, register_reason,
};
use crate::slow_path::read_frame;
use crate::verify::ChecksumVerifier;

/// Name of this NF in configs.
pub const NAME: &str = "lb";

/// Drop reason: a packet not for the VIP, with `non_vip = "drop"`.
const NOT_FOR_VIP: Reason = (
    "not_for_vip",
    "not addressed to the load balancer's VIP (and its policy drops those)",
);
/// Drop reason: a new flow with no enabled backend.
const NO_BACKEND_REASON: Reason = ("no_backend", "no enabled backend to send a new flow to");
/// Drop reason: an ICMP error about no known flow, with round robin (no backend to hash to).
const ICMP_NO_FLOW: Reason = (
    "icmp_no_flow",
    "an ICMP error to the VIP about no flow the load balancer knows (round robin)",
);
/// Drop reason: an encapsulated packet longer than the tunnel MTU.
const TUNNEL_TOO_BIG: Reason = (
    "tunnel_too_big",
    "with its outer IPv4 header the packet exceeds the load balancer's tunnel_mtu",
);
/// Drop reason: no room before the header for an outer header.
const NO_HEADROOM: Reason = (
    "no_headroom",
    "the packet's buffer has no headroom left for an outer header",
);

/// The registration of `lb`.
pub const SPEC: NfSpec = NfSpec {
    name: NAME,
    aliases: &[],
    summary: "L4 load balancer: packets to the VIP go to a backend chosen per flow (round robin \
              or Maglev) and kept for the flow's life; destination address and checksums \
              rewritten.",
    params: &[
        Param {
            name: "vip",
            doc: "the virtual IP (dotted quad)",
        },
        Param {
            name: "backends",
            doc: "backend addresses (list of dotted quads); unset: `backend_count` addresses \
                  from `backend_base`",
        },
        Param {
            name: "backend_base",
            doc: "first backend address when `backends` is unset",
        },
        Param {
            name: "backend_count",
            doc: "number of backends when `backends` is unset, 1..=65534",
        },
        Param {
            name: "mode",
            doc: "how a new flow picks its backend: `round-robin` or `maglev`",
        },
        Param {
            name: "maglev_table_size",
            doc: "Maglev lookup table size (a prime above the backend count)",
        },
        Param {
            name: "maglev_seed",
            doc: "Maglev hash seed (equal on every worker and node)",
        },
        Param {
            name: "flows",
            doc: "flows across all workers (each worker holds `flows / workers`), at least 1",
        },
        Param {
            name: "idle_timeout_s",
            doc: "seconds a flow's backend is kept without packets (0: forever)",
        },
        Param {
            name: "full_policy",
            doc: "a new flow with no room in the table: `evict` or `drop`",
        },
        Param {
            name: "non_vip",
            doc: "packets not for the VIP: `forward` or `drop` (as `not_for_vip`)",
        },
        Param {
            name: "disabled",
            doc: "backend indices disabled at start",
        },
        Param {
            name: "weights",
            doc: "each backend's share of new flows, in backend order (default 1 each; 0: \
                  draining, no new flows), each 0..=10000",
        },
        Param {
            name: "scan_buckets_per_burst",
            doc: "flow-table buckets scanned for expiry per burst",
        },
        Param {
            name: "return",
            doc: "the return path: `none` (clients' packets only), `nat` (replies from a backend \
                  get the VIP as source; one worker) or `ipip` (IP-in-IP to the backend, \
                  which answers directly)",
        },
        Param {
            name: "tunnel_src",
            doc: "outer source address with `return = \"ipip\"` (default: the address of the \
                  port on the first backend's subnet)",
        },
        Param {
            name: "tunnel_mtu",
            doc: "largest outer IPv4 packet with `return = \"ipip\"`, 68..=9000",
        },
        Param {
            name: "verify_checksums",
            doc: "debug: verify every rewritten frame by full checksum recomputation (slow)",
        },
        Param {
            name: "seed",
            doc: "flow-table hash seed (mixed with the worker index)",
        },
    ],
    defaults: defaults_of::<LbConfig>,
    drop_reasons: &[
        NOT_FOR_VIP,
        NO_BACKEND_REASON,
        ICMP_NO_FLOW,
        TUNNEL_TOO_BIG,
        NO_HEADROOM,
    ],
    build,
    memory,
};

fn build(params: &toml::Table, ctx: &BuildContext) -> Result<Box<dyn NetworkFunction>, String> {
    let cfg: LbConfig = parse_params(NAME, params)?;
    let mut params = params.clone();
    if cfg.return_mode == ReturnMode::Ipip
        && cfg.tunnel_src.is_none()
        && let Some(net) = &ctx.net
    {
        // The address of the port on the first backend's subnet (or any port's).
        let first = match &cfg.backends {
            Some(b) => b
                .first()
                .map(|s| parse_ipv4(NAME, "backends", s))
                .transpose()?,
            None => Some(parse_ipv4(NAME, "backend_base", &cfg.backend_base)?),
        };
        let ips: Vec<_> = net.ports().iter().filter_map(|p| p.ip).collect();
        let port_ip = ips
            .iter()
            .find(|ip| first.is_some_and(|f| ip.contains(f)))
            .or(ips.first());
        if let Some(ip) = port_ip {
            params.insert("tunnel_src".into(), ip.ip().to_string().into());
        }
    }
    let mut lb = LoadBalancer::from_params(&params, ctx.worker, ctx.workers)?;
    lb.routed = ctx.net.is_some();
    Ok(Box::new(lb))
}

fn memory(params: &toml::Table, ctx: &BuildContext) -> Option<Memory> {
    let c: LbConfig = parse_params(NAME, params).ok()?;
    let per_worker = c.flows.div_ceil(u64::from(ctx.workers.max(1)));
    Some(Memory {
        key: "flows",
        value: c.flows.to_string(),
        bytes: FlowTable::<u16>::memory_for(per_worker as usize),
    })
}

/// How new flows pick a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LbMode {
    /// Next enabled backend (the paper's FastClick `rr`).
    RoundRobin,
    /// Maglev consistent hashing.
    Maglev,
}

impl LbMode {
    /// Its name in configs (`round-robin`, `maglev`).
    pub fn as_str(self) -> &'static str {
        match self {
            LbMode::RoundRobin => "round-robin",
            LbMode::Maglev => "maglev",
        }
    }
}

/// What to do with packets not addressed to the VIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NonVipPolicy {
    /// Forward unchanged.
    Forward,
    /// Drop as `not_for_vip`.
    Drop,
}

/// The load balancer's return path (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReturnMode {
    /// Only the clients' packets are rewritten (the paper's LB).
    None,
    /// Replies from a backend get their source rewritten back to the VIP (IPVS NAT mode).
    Nat,
    /// Clients' packets go to the backend in IP-in-IP; it answers directly (Katran).
    Ipip,
}

/// Load-balancer parameters. Defaults are the paper's setup.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LbConfig {
    /// The virtual IP.
    pub vip: String,
    /// Explicit backend addresses; when absent, `backend_count` consecutive addresses from
    /// `backend_base`.
    pub backends: Option<Vec<String>>,
    /// First backend address when `backends` is absent.
    pub backend_base: String,
    /// Number of backends when `backends` is absent.
    pub backend_count: u32,
    /// New-flow policy.
    pub mode: LbMode,
    /// Maglev lookup table size (prime).
    pub maglev_table_size: u32,
    /// Maglev hash seed (must be equal on every worker and node).
    pub maglev_seed: u64,
    /// Flows across all workers (each worker gets `flows / workers`).
    pub flows: u64,
    /// Idle timeout of a flow's affinity entry, seconds (0 = never).
    pub idle_timeout_s: u32,
    /// Full-table policy.
    pub full_policy: FullPolicy,
    /// Policy for packets not for the VIP.
    pub non_vip: NonVipPolicy,
    /// Backend indices disabled at start.
    pub disabled: Vec<usize>,
    /// Each backend's share of new flows, in backend order (empty: 1 each).
    pub weights: Vec<u32>,
    /// The return path.
    #[serde(rename = "return")]
    pub return_mode: ReturnMode,
    /// Outer source address with `return = "ipip"` (unset: the address of the port on the first
    /// backend's subnet, in a routed run).
    pub tunnel_src: Option<String>,
    /// Largest outer IPv4 packet with `return = "ipip"`.
    pub tunnel_mtu: u16,
    /// Flow-table buckets scanned for expiry per burst.
    pub scan_buckets_per_burst: u32,
    /// Debug: verify every rewritten frame by full checksum recomputation (slow path).
    pub verify_checksums: bool,
    /// Flow-table hash seed (mixed with the worker index).
    pub seed: u64,
}

impl Default for LbConfig {
    fn default() -> Self {
        Self {
            vip: "10.2.0.1".into(),
            backends: None,
            backend_base: "10.180.250.5".into(),
            backend_count: 32,
            mode: LbMode::RoundRobin,
            maglev_table_size: 65537,
            maglev_seed: 0x6d61_676c_6576,
            flows: 10_000_000,
            idle_timeout_s: 60,
            full_policy: FullPolicy::Evict,
            non_vip: NonVipPolicy::Forward,
            disabled: vec![],
            weights: vec![],
            return_mode: ReturnMode::None,
            tunnel_src: None,
            tunnel_mtu: 1500,
            scan_buckets_per_burst: 8,
            verify_checksums: false,
            seed: 0x6e6d_6470_6c62,
        }
    }
}

/// Marker for "no backend" in a Maglev table.
pub const NO_BACKEND: u16 = u16::MAX;

/// Simple deterministic primality test (trial division; table sizes are small).
pub fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    if n.is_multiple_of(2) {
        return n == 2;
    }
    let mut d = 3u64;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 2;
    }
    true
}

fn backend_hash(addr: u32, seed: u64) -> u64 {
    hash_key(&FlowKey::new(addr, !addr, 0, 0, 0), seed)
}

/// A Maglev lookup table (Eisenbud et al., NSDI'16, section 3.4), rebuilt in place.
///
/// The table depends on the set of backends (addresses and weights), the table size and the
/// seed, and on nothing else: each backend's permutation derives from its address, and the
/// backends take their turns in the canonical order of their addresses (ascending), not in the
/// order they were listed or added. So every LB instance given the same backends, whatever the
/// order of its `backends` list, its worker count, its start order or restarts, builds the
/// same table and sends a flow to the same backend (what lets several instances behind ECMP
/// serve one VIP, docs/scale-out.md). The slots hold list indices; only the turn order is
/// canonical.
#[derive(Clone, Debug)]
pub struct Maglev {
    table: Vec<u16>,
    offset: Vec<u32>,
    skip: Vec<u32>,
    pos: Vec<u32>,
    /// Backend indices by ascending address: the order the backends take turns in.
    order: Vec<u16>,
    addrs: Vec<u32>,
    seed: u64,
}

impl Maglev {
    /// A table of prime size `m` for backends with addresses `backends` (each backend's
    /// permutation derives from its address and turns go by address, so the order of the list
    /// does not matter).
    pub fn new(m: usize, backends: &[u32], seed: u64) -> Self {
        let mm = m as u64;
        let offset = backends
            .iter()
            .map(|&a| (backend_hash(a, seed ^ 0x6f66_6673) % mm) as u32)
            .collect();
        let skip = backends
            .iter()
            .map(|&a| (backend_hash(a, seed ^ 0x736b_6970) % (mm - 1) + 1) as u32)
            .collect();
        let mut order: Vec<u16> = (0..backends.len() as u16).collect();
        order.sort_by_key(|&i| (backends[usize::from(i)], i));
        Self {
            table: vec![NO_BACKEND; m],
            offset,
            skip,
            pos: vec![0; backends.len()],
            order,
            addrs: backends.to_vec(),
            seed,
        }
    }

    /// Table size.
    pub fn size(&self) -> usize {
        self.table.len()
    }

    /// Fills the table with the enabled backends (`enabled[i]`): they take turns claiming the
    /// next free slot of their permutation until every slot is owned. With no enabled backend
    /// every slot is [`NO_BACKEND`]. No allocation.
    pub fn populate(&mut self, enabled: &[bool]) {
        let m = self.table.len() as u32;
        self.table.fill(NO_BACKEND);
        if !enabled.iter().any(|&e| e) {
            return;
        }
        self.fill(m, |i| u32::from(enabled.get(i).copied().unwrap_or(false)));
    }

    /// Fills the table with the backends of non-zero weight: each takes `weights[i]` slots per
    /// turn (Maglev's weighted variant), so a backend's share of the table is its share of the
    /// total weight; weight 0 owns nothing. With all weights 1 this is [`Maglev::populate`].
    pub fn populate_weighted(&mut self, weights: &[u32]) {
        let m = self.table.len() as u32;
        self.table.fill(NO_BACKEND);
        if !weights.iter().any(|&w| w > 0) {
            return;
        }
        self.fill(m, |i| weights.get(i).copied().unwrap_or(0));
    }

    fn fill(&mut self, m: u32, weight: impl Fn(usize) -> u32) {
        for (p, &o) in self.pos.iter_mut().zip(&self.offset) {
            *p = o;
        }
        let mut filled = 0u32;
        'outer: loop {
            for k in 0..self.order.len() {
                let i = usize::from(self.order[k]);
                for _ in 0..weight(i) {
                    let skip = self.skip[i];
                    let mut c = self.pos[i];
                    while self.table[c as usize] != NO_BACKEND {
                        c += skip;
                        if c >= m {
                            c -= m;
                        }
                    }
                    self.table[c as usize] = i as u16;
                    c += skip;
                    if c >= m {
                        c -= m;
                    }
                    self.pos[i] = c;
                    filled += 1;
                    if filled == m {
                        break 'outer;
                    }
                }
            }
        }
    }

    /// Adds a backend with address `addr` at the next index (its permutation, like every
    /// backend's, comes from its address, and it takes its turn in address order). The table
    /// is not repopulated.
    pub fn push_backend(&mut self, addr: u32) {
        let i = self.addrs.len() as u16;
        let at = self
            .order
            .partition_point(|&k| self.addrs[usize::from(k)] < addr);
        self.order.insert(at, i);
        self.addrs.push(addr);
        let mm = self.table.len() as u64;
        self.offset
            .push((backend_hash(addr, self.seed ^ 0x6f66_6673) % mm) as u32);
        self.skip
            .push((backend_hash(addr, self.seed ^ 0x736b_6970) % (mm - 1) + 1) as u32);
        self.pos.push(0);
    }

    /// The backend for a flow key.
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> u16 {
        let h = hash_key(key, self.seed);
        self.table[(h % self.table.len() as u64) as usize]
    }

    /// The raw table (slot -> backend index).
    pub fn slots(&self) -> &[u16] {
        &self.table
    }
}

/// Fraction of `flows` whose Maglev backend changes when backend `removed` is disabled, for a
/// table of size `m` over `backends` (all enabled before). The flows of the removed backend
/// always move (1/N of them); Maglev keeps most others in place, so the result is close to 1/N.
pub fn maglev_disruption(backends: &[u32], m: usize, removed: usize, flows: &[FlowKey]) -> f64 {
    let seed = LbConfig::default().maglev_seed;
    let mut mg = Maglev::new(m, backends, seed);
    let mut enabled = vec![true; backends.len()];
    mg.populate(&enabled);
    let before: Vec<u16> = flows.iter().map(|k| mg.lookup(k)).collect();
    enabled[removed] = false;
    mg.populate(&enabled);
    let moved = flows
        .iter()
        .zip(&before)
        .filter(|(k, b)| mg.lookup(k) != **b)
        .count();
    moved as f64 / flows.len().max(1) as f64
}

#[derive(Clone, Debug, Default)]
struct Counters {
    packets: u64,
    skipped: u64,
    vip_packets: u64,
    new_flows: u64,
    midflow_fallback: u64,
    remapped: u64,
    not_for_vip: u64,
    flow_table_full: u64,
    header_segment_short: u64,
    fragments_dropped: u64,
    icmp_errors_steered: u64,
    icmp_errors_slow_path: u64,
    icmp_no_flow: u64,
    replies_translated: u64,
    encapsulated: u64,
    drops: DropCounts,
}

#[derive(Clone, Copy)]
enum Pending {
    Done,
    Vip(Parsed),
    IcmpError(Parsed),
}

/// Where a backend is in its life (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendState {
    /// Takes new flows (in proportion to its weight) and keeps its flows.
    Active,
    /// Weight 0: no new flows; its flows stay until they end.
    Draining,
    /// Takes nothing; its flows are re-assigned on their next packet.
    Disabled,
    /// Gone from the backends; its flows are re-assigned on their next packet (`add` brings it
    /// back).
    Removed,
}

impl BackendState {
    /// Its name (`active`, `draining`, `disabled`, `removed`).
    pub fn as_str(self) -> &'static str {
        match self {
            BackendState::Active => "active",
            BackendState::Draining => "draining",
            BackendState::Disabled => "disabled",
            BackendState::Removed => "removed",
        }
    }
}

/// The largest weight of a backend.
pub const MAX_WEIGHT: u32 = 10_000;

/// The load balancer (one instance per worker).
pub struct LoadBalancer {
    name: String,
    vip: u32,
    backends: Vec<u32>,
    deltas: Vec<CsumDelta>,
    /// Existing flows may use the backend (active or draining).
    enabled: Vec<bool>,
    /// `enabled`, `weights` and `states` as built (what [`NetworkFunction::reset`] restores).
    enabled_at_build: Vec<bool>,
    weights_at_build: Vec<u32>,
    states_at_build: Vec<BackendState>,
    /// Share of new flows (0: none).
    weights: Vec<u32>,
    /// The weight `enable` restores after a drain.
    saved_weights: Vec<u32>,
    states: Vec<BackendState>,
    /// Backends that take new flows (enabled, weight > 0).
    n_pickable: usize,
    mode: LbMode,
    maglev: Maglev,
    rr: usize,
    /// New flows the round-robin backend has taken in its current turn.
    rr_used: u32,
    /// `rr` as built.
    rr_at_build: usize,
    non_vip: NonVipPolicy,
    table: FlowTable<u16>,
    scan: usize,
    verifier: Option<ChecksumVerifier>,
    backend_packets: Vec<u64>,
    backend_new_flows: Vec<u64>,
    c: Counters,
    pending: Vec<Pending>,
    keys: Vec<FlowKey>,
    hashes: Vec<u64>,
    slots: Vec<u32>,
    not_for_vip_reason: DropReason,
    no_backend_reason: DropReason,
    icmp_no_flow_reason: DropReason,
    return_mode: ReturnMode,
    tunnel_src: u32,
    tunnel_mtu: usize,
    tunnel_too_big: DropReason,
    no_headroom: DropReason,
    /// The run has a network layer (see the module docs).
    routed: bool,
}

/// The flow-table value bit that marks a reply's key (`return = "nat"`): the rest is the
/// backend index.
const REPLY: u16 = 0x8000;

impl LoadBalancer {
    /// Builds worker `worker`'s instance (of `workers`) from a parameter table.
    pub fn from_params(params: &toml::Table, worker: u16, workers: u16) -> Result<Self, String> {
        let cfg: LbConfig = parse_params(NAME, params)?;
        Self::new(&cfg, worker, workers)
    }

    /// Builds worker `worker`'s instance (of `workers`) from a config.
    pub fn new(cfg: &LbConfig, worker: u16, workers: u16) -> Result<Self, String> {
        let workers = workers.max(1);
        let vip = parse_ipv4(NAME, "vip", &cfg.vip)?;
        let backends: Vec<u32> = match &cfg.backends {
            Some(list) => list
                .iter()
                .map(|s| parse_ipv4(NAME, "backends", s))
                .collect::<Result<_, _>>()?,
            None => {
                let base = parse_ipv4(NAME, "backend_base", &cfg.backend_base)?;
                if u64::from(base) + u64::from(cfg.backend_count) > u64::from(u32::MAX) + 1 {
                    return Err(bad_param(
                        NAME,
                        "backend_count",
                        "runs past 255.255.255.255",
                    ));
                }
                (0..cfg.backend_count).map(|i| base + i).collect()
            }
        };
        if backends.is_empty() {
            return Err(bad_param(NAME, "backends", "need at least one backend"));
        }
        if backends.len() >= usize::from(NO_BACKEND) {
            return Err(bad_param(NAME, "backends", "at most 65534 backends"));
        }
        if cfg.return_mode == ReturnMode::Nat && backends.len() >= usize::from(REPLY) {
            return Err(bad_param(
                NAME,
                "backends",
                "at most 32767 backends with `return = \"nat\"`",
            ));
        }
        if cfg.return_mode == ReturnMode::Nat && workers > 1 {
            return Err(bad_param(
                NAME,
                "return",
                format!(
                    "`nat` needs run.workers = 1 (got {workers}): a backend's reply carries its \
                     own address, so RSS sends it to any worker, and only the worker that \
                     balanced the flow knows it; use `ipip` (the backend answers directly) with \
                     several workers"
                ),
            ));
        }
        let tunnel_src = match (&cfg.tunnel_src, cfg.return_mode) {
            (Some(s), _) => parse_ipv4(NAME, "tunnel_src", s)?,
            (None, ReturnMode::Ipip) => {
                return Err(bad_param(
                    NAME,
                    "tunnel_src",
                    "give the outer source address for `return = \"ipip\"` (in a run whose \
                     ports have addresses it defaults to the port on the backends' subnet)",
                ));
            }
            (None, _) => 0,
        };
        if !(68..=9000).contains(&cfg.tunnel_mtu) {
            return Err(bad_param(
                NAME,
                "tunnel_mtu",
                format!("{} out of range; allowed 68..=9000", cfg.tunnel_mtu),
            ));
        }
        let mut sorted = backends.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad_param(NAME, "backends", "duplicate backend address"));
        }
        let m = cfg.maglev_table_size as usize;
        if !is_prime(u64::from(cfg.maglev_table_size)) {
            return Err(bad_param(
                NAME,
                "maglev_table_size",
                format!("{m} is not prime (e.g. 65537 or 655373)"),
            ));
        }
        if m < backends.len() {
            return Err(bad_param(
                NAME,
                "maglev_table_size",
                "must be at least the number of backends (ideally > 100x)",
            ));
        }
        let mut enabled = vec![true; backends.len()];
        for &d in &cfg.disabled {
            if d >= backends.len() {
                return Err(bad_param(
                    NAME,
                    "disabled",
                    format!("backend index {d} out of range (0..{})", backends.len()),
                ));
            }
            enabled[d] = false;
        }
        let weights: Vec<u32> = match cfg.weights.len() {
            0 => vec![1; backends.len()],
            n if n == backends.len() => cfg.weights.clone(),
            n => {
                return Err(bad_param(
                    NAME,
                    "weights",
                    format!(
                        "{n} weights for {} backends; give one per backend",
                        backends.len()
                    ),
                ));
            }
        };
        if let Some(w) = weights.iter().find(|&&w| w > MAX_WEIGHT) {
            return Err(bad_param(
                NAME,
                "weights",
                format!("{w} out of range; allowed 0..={MAX_WEIGHT}"),
            ));
        }
        if cfg.flows == 0 {
            return Err(bad_param(NAME, "flows", "must be at least 1"));
        }
        let per_core = cfg.flows.div_ceil(u64::from(workers));
        if per_core > u64::from(u32::MAX / 2) {
            return Err(bad_param(NAME, "flows", "too many flows per worker"));
        }
        let timeout = timeout_ms(NAME, "idle_timeout_s", cfg.idle_timeout_s, true)?;
        let deltas = backends
            .iter()
            .map(|&b| {
                let mut d = CsumDelta::default();
                d.add32(vip, b);
                d
            })
            .collect();
        let n = backends.len();
        // With `return = "nat"` every flow also keeps its reply's key.
        let keys = if cfg.return_mode == ReturnMode::Nat {
            per_core.saturating_mul(2)
        } else {
            per_core
        };
        let mut table = FlowTable::try_new(
            keys as usize,
            timeout,
            cfg.full_policy,
            mix_seed(cfg.seed, worker, 2),
        )
        .map_err(|e| bad_param(NAME, "flows", format!("flow table: {e}")))?;
        table.count_values(n);
        let states: Vec<BackendState> = (0..n)
            .map(|i| match (enabled[i], weights[i]) {
                (false, _) => BackendState::Disabled,
                (true, 0) => BackendState::Draining,
                (true, _) => BackendState::Active,
            })
            .collect();
        let mut lb = Self {
            name: NAME.to_string(),
            vip,
            n_pickable: 0,
            weights_at_build: weights.clone(),
            states_at_build: states.clone(),
            saved_weights: weights.iter().map(|&w| w.max(1)).collect(),
            weights,
            states,
            backends: backends.clone(),
            deltas,
            enabled_at_build: enabled.clone(),
            enabled,
            mode: cfg.mode,
            maglev: Maglev::new(m, &backends, cfg.maglev_seed),
            rr: usize::from(worker) % n,
            rr_at_build: usize::from(worker) % n,
            rr_used: 0,
            non_vip: cfg.non_vip,
            table,
            scan: cfg.scan_buckets_per_burst as usize,
            verifier: cfg.verify_checksums.then(ChecksumVerifier::new),
            backend_packets: vec![0; n],
            backend_new_flows: vec![0; n],
            c: Counters::default(),
            pending: Vec::with_capacity(BULK),
            keys: vec![FlowKey::default(); BULK],
            hashes: vec![0; BULK],
            slots: vec![0; BULK],
            not_for_vip_reason: register_reason(NAME, NOT_FOR_VIP)?,
            no_backend_reason: register_reason(NAME, NO_BACKEND_REASON)?,
            icmp_no_flow_reason: register_reason(NAME, ICMP_NO_FLOW)?,
            return_mode: cfg.return_mode,
            tunnel_src,
            tunnel_mtu: usize::from(cfg.tunnel_mtu),
            tunnel_too_big: register_reason(NAME, TUNNEL_TOO_BIG)?,
            no_headroom: register_reason(NAME, NO_HEADROOM)?,
            routed: false,
        };
        lb.rebuild();
        Ok(lb)
    }

    /// Backend addresses, by index.
    pub fn backends(&self) -> &[u32] {
        &self.backends
    }

    /// Enables or disables backend `i` (no-op for an out-of-range or removed index). Rebuilds
    /// the Maglev table; flows pinned to a disabled backend move on their next packet, other
    /// flows keep their backend.
    pub fn set_backend_enabled(&mut self, i: usize, on: bool) {
        if i >= self.states.len() || self.states[i] == BackendState::Removed {
            return;
        }
        let state = if on {
            BackendState::Active
        } else {
            BackendState::Disabled
        };
        self.set_state(i, state, self.saved_weights[i]);
    }

    /// Puts backend `i` in `state` with weight `weight` (kept for `enable` when non-zero) and
    /// rebuilds what new flows pick from. Returns how many Maglev slots changed owner and how
    /// many of those belonged to another backend than `i` before (zeros in round robin).
    fn set_state(&mut self, i: usize, state: BackendState, weight: u32) -> (u64, u64) {
        let before = (self.mode == LbMode::Maglev).then(|| self.maglev.slots().to_vec());
        self.states[i] = state;
        self.enabled[i] = matches!(state, BackendState::Active | BackendState::Draining);
        if weight > 0 {
            self.saved_weights[i] = weight;
        }
        self.weights[i] = if state == BackendState::Active {
            weight
        } else {
            0
        };
        self.rebuild();
        match before {
            Some(b) => {
                let (mut changed, mut others) = (0, 0);
                for (old, new) in b.iter().zip(self.maglev.slots()) {
                    if old != new {
                        changed += 1;
                        if usize::from(*old) != i {
                            others += 1;
                        }
                    }
                }
                (changed, others)
            }
            None => (0, 0),
        }
    }

    /// Recomputes what new flows pick from after a change of weights or states.
    fn rebuild(&mut self) {
        self.n_pickable = (0..self.backends.len())
            .filter(|&i| self.enabled[i] && self.weights[i] > 0)
            .count();
        self.rr_used = 0;
        if self.mode == LbMode::Maglev {
            self.maglev.populate_weighted(&self.weights);
        }
    }

    /// The state of backend `i`.
    pub fn backend_state(&self, i: usize) -> Option<BackendState> {
        self.states.get(i).copied()
    }

    /// The weight of backend `i` (0 while draining, disabled or removed).
    pub fn backend_weight(&self, i: usize) -> Option<u32> {
        self.weights.get(i).copied()
    }

    /// Flows pinned to backend `i` in this instance's table.
    pub fn backend_flows(&self, i: usize) -> u32 {
        self.table.value_count(i as u16)
    }

    /// True if backend `i` is enabled.
    pub fn backend_enabled(&self, i: usize) -> bool {
        self.enabled.get(i).copied().unwrap_or(false)
    }

    /// The backend index a flow is pinned to, if it has an entry.
    pub fn flow_backend(&self, key: &FlowKey) -> Option<u16> {
        self.table.peek(key)
    }

    /// Live affinity entries.
    pub fn active_flows(&self) -> usize {
        self.table.len()
    }

    /// Picks a backend for a new flow.
    #[inline]
    fn pick(&mut self, key: &FlowKey) -> Option<u16> {
        if self.n_pickable == 0 {
            return None;
        }
        match self.mode {
            LbMode::RoundRobin => {
                let n = self.backends.len();
                loop {
                    let b = self.rr;
                    if self.enabled[b] && self.rr_used < self.weights[b] {
                        self.rr_used += 1;
                        if self.rr_used >= self.weights[b] {
                            self.rr = if b + 1 == n { 0 } else { b + 1 };
                            self.rr_used = 0;
                        }
                        return Some(b as u16);
                    }
                    self.rr = if b + 1 == n { 0 } else { b + 1 };
                    self.rr_used = 0;
                }
            }
            LbMode::Maglev => {
                let b = self.maglev.lookup(key);
                (b != NO_BACKEND).then_some(b)
            }
        }
    }

    #[inline(always)]
    fn key_of(p: &Parsed) -> FlowKey {
        let (s, d) = p.ports();
        FlowKey::new(p.src, p.dst, s, d, p.proto)
    }

    #[inline(always)]
    fn rewrite(&mut self, h: &mut [u8], p: &Parsed, b: u16) {
        let d = self.deltas[usize::from(b)];
        let ip = &mut h[p.l3..p.l3 + IPV4_HLEN];
        write_u32(ip, 16, self.backends[usize::from(b)]);
        let hc = d.apply(read_u16(ip, 10));
        write_u16(ip, 10, hc);
        match p.l4info {
            L4::Tcp { .. } => {
                let o = p.l4 + 16;
                let c = d.apply(read_u16(h, o));
                write_u16(h, o, c);
            }
            L4::Udp { .. } => {
                let o = p.l4 + 6;
                let c = d.apply_udp(read_u16(h, o));
                write_u16(h, o, c);
            }
            _ => {}
        }
        self.backend_packets[usize::from(b)] += 1;
    }

    fn drop_pkt(&mut self, burst: &mut Burst, i: usize, r: DropReason) {
        self.c.drops.add(r, 1);
        burst.drop_packet(i, r);
    }

    fn not_for_vip(&mut self, burst: &mut Burst, i: usize) {
        self.c.not_for_vip += 1;
        if self.non_vip == NonVipPolicy::Drop {
            self.drop_pkt(burst, i, self.not_for_vip_reason);
        }
    }

    /// `return = "nat"`: if packet `i` is a backend's reply to a known flow, rewrites its source
    /// to the VIP and returns true.
    fn reply(&mut self, burst: &mut Burst, i: usize, p: &Parsed, now: u32) -> bool {
        let (sp, dp) = p.ports();
        let key = FlowKey::new(p.src, p.dst, sp, dp, p.proto);
        let Some(slot) = self.table.lookup(&key, now) else {
            return false;
        };
        let v = self.table.value(slot);
        let b = usize::from(v & !REPLY);
        if v & REPLY == 0 || b >= self.backends.len() || self.backends[b] != p.src {
            return false;
        }
        let d = self.deltas[b].negate();
        let h = burst.header_mut(i);
        write_u32(h, p.l3 + 12, self.vip);
        let hc = d.apply(read_u16(h, p.l3 + 10));
        write_u16(h, p.l3 + 10, hc);
        match p.l4info {
            L4::Tcp { .. } => {
                let o = p.l4 + 16;
                let c = d.apply(read_u16(h, o));
                write_u16(h, o, c);
            }
            L4::Udp { .. } => {
                let o = p.l4 + 6;
                let c = d.apply_udp(read_u16(h, o));
                write_u16(h, o, c);
            }
            _ => {}
        }
        self.c.replies_translated += 1;
        if let Some(v) = self.verifier.as_mut() {
            v.verify(burst, i);
        }
        true
    }

    /// `return = "ipip"`: puts packet `i` in an outer IPv4 header to backend `b` (the L2
    /// header moves 20 B into the headroom, the outer header goes between it and the packet).
    fn encapsulate(&mut self, burst: &mut Burst, i: usize, p: &Parsed, b: u16) {
        let inner = usize::from(p.total_len);
        if inner + IPV4_HLEN > self.tunnel_mtu {
            let r = self.tunnel_too_big;
            self.drop_pkt(burst, i, r);
            return;
        }
        let l2 = p.l3;
        let (tos, df) = {
            let h = burst.header(i);
            (h[l2 + 1], h[l2 + 6] & 0x40)
        };
        let Some(h) = burst.prepend(i, IPV4_HLEN) else {
            let r = self.no_headroom;
            self.drop_pkt(burst, i, r);
            return;
        };
        h.copy_within(IPV4_HLEN..IPV4_HLEN + l2, 0);
        let outer = &mut h[l2..l2 + IPV4_HLEN];
        outer.copy_from_slice(&[
            0x45, tos, 0, 0, 0, 0, df, 0, 64, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]);
        write_u16(outer, 2, (inner + IPV4_HLEN) as u16);
        write_u32(outer, 12, self.tunnel_src);
        write_u32(outer, 16, self.backends[usize::from(b)]);
        let c = wire::checksum::ipv4_header_checksum(outer);
        write_u16(outer, 10, c);
        self.backend_packets[usize::from(b)] += 1;
        self.c.encapsulated += 1;
    }

    fn process_chunk(&mut self, burst: &mut Burst, start: usize, end: usize, now: u32) {
        self.pending.clear();
        let mut nkeys = 0;
        for i in start..end {
            burst.prefetch(i + PREFETCH_AHEAD);
            if !burst.is_live(i) {
                self.c.skipped += 1;
                self.pending.push(Pending::Done);
                continue;
            }
            self.c.packets += 1;
            match parse(burst.header(i), burst.frame_len(i)) {
                Err(ParseError::NotIpv4) => {
                    self.c.not_for_vip += 1;
                    if self.non_vip == NonVipPolicy::Drop {
                        self.drop_pkt(burst, i, DropReason::NOT_IPV4);
                    }
                    self.pending.push(Pending::Done);
                }
                Err(e) => {
                    if e == ParseError::SegmentShort {
                        self.c.header_segment_short += 1;
                    }
                    self.drop_pkt(burst, i, DropReason::from(e));
                    self.pending.push(Pending::Done);
                }
                Ok(p) if p.dst != self.vip => {
                    if !(self.return_mode == ReturnMode::Nat && self.reply(burst, i, &p, now)) {
                        self.not_for_vip(burst, i);
                    }
                    self.pending.push(Pending::Done);
                }
                Ok(p) if self.routed && p.ttl <= 1 => {
                    self.pending.push(Pending::Done);
                }
                Ok(p) if p.frag == Frag::Later => {
                    self.c.fragments_dropped += 1;
                    self.drop_pkt(burst, i, DropReason::FRAGMENT);
                    self.pending.push(Pending::Done);
                }
                Ok(p) if matches!(p.l4info, L4::Icmp { ty, .. } if icmp_is_error(ty)) => {
                    self.c.vip_packets += 1;
                    self.pending.push(Pending::IcmpError(p));
                }
                Ok(p) => {
                    self.c.vip_packets += 1;
                    self.keys[nkeys] = Self::key_of(&p);
                    nkeys += 1;
                    self.pending.push(Pending::Vip(p));
                }
            }
        }
        self.table
            .hash_bulk(&self.keys[..nkeys], &mut self.hashes[..nkeys]);
        self.table.lookup_bulk(
            &self.keys[..nkeys],
            &self.hashes[..nkeys],
            now,
            &mut self.slots[..nkeys],
        );
        let bulk_epoch = self.table.epoch();
        let mut j = 0;
        for (k, i) in (start..end).enumerate() {
            let p = match self.pending[k] {
                Pending::Done => continue,
                Pending::IcmpError(p) => {
                    self.icmp_error(burst, i, &p);
                    continue;
                }
                Pending::Vip(p) => p,
            };
            let key = self.keys[j];
            let h = self.hashes[j];
            let mut slot = self.slots[j];
            j += 1;
            if self.table.epoch() != bulk_epoch || slot == NO_SLOT {
                slot = self.table.lookup_hashed(&key, h, now).unwrap_or(NO_SLOT);
            }
            let backend = if slot != NO_SLOT {
                let b = self.table.value(slot);
                if self.enabled.get(usize::from(b)).copied().unwrap_or(false) {
                    Some(b)
                } else {
                    match self.pick(&key) {
                        Some(nb) => {
                            self.table.set_value(slot, nb);
                            self.c.remapped += 1;
                            self.backend_new_flows[usize::from(nb)] += 1;
                            Some(nb)
                        }
                        None => None,
                    }
                }
            } else {
                if let L4::Tcp { flags, .. } = p.l4info
                    && flags & TCP_SYN == 0
                {
                    // A connection this instance never saw open (an ECMP rehash, a restart):
                    // the backend Maglev picks is the one every instance picks.
                    self.c.midflow_fallback += 1;
                }
                match self.pick(&key) {
                    Some(b) => match self.table.insert_hashed(key, h, b, now) {
                        Ok(_) => {
                            self.c.new_flows += 1;
                            self.backend_new_flows[usize::from(b)] += 1;
                            if self.return_mode == ReturnMode::Nat {
                                let (sp, dp) = p.ports();
                                let rk = FlowKey::new(
                                    self.backends[usize::from(b)],
                                    p.src,
                                    dp,
                                    sp,
                                    p.proto,
                                );
                                // A full table loses only the reply's rewrite, counted there.
                                let _ = self.table.insert(rk, b | REPLY, now);
                            }
                            Some(b)
                        }
                        Err(_) => {
                            self.c.flow_table_full += 1;
                            self.drop_pkt(burst, i, DropReason::FLOW_TABLE_FULL);
                            continue;
                        }
                    },
                    None => None,
                }
            };
            match backend {
                Some(b) if self.return_mode == ReturnMode::Ipip => {
                    self.encapsulate(burst, i, &p, b);
                }
                Some(b) => {
                    self.rewrite(burst.header_mut(i), &p, b);
                    if let Some(v) = self.verifier.as_mut() {
                        v.verify(burst, i);
                    }
                }
                None => self.drop_pkt(burst, i, self.no_backend_reason),
            }
        }
    }
}

impl LoadBalancer {
    /// The flow an ICMP error to the VIP is about: the 5-tuple of the client's packets, i.e.
    /// the quoted packet (sent from the VIP) reversed. `None` when the error quotes no TCP/UDP
    /// packet from the VIP.
    fn quoted_flow(&mut self, burst: &Burst, i: usize, p: &Parsed) -> Option<FlowKey> {
        let msg_end = p.l3 + usize::from(p.total_len);
        let e3 = p.l4 + ICMP_HLEN;
        let mut q = [0u8; 60 + 4];
        if e3 + IPV4_HLEN > msg_end {
            return None;
        }
        let mut slow = read_frame(burst, i, e3, &mut q[..IPV4_HLEN]).ok()? > 0;
        let quoted = Ipv4View::new_checked(&q[..])?;
        let eihl = quoted.header_len();
        let eproto = quoted.protocol();
        if quoted.version() != 4
            || eihl < IPV4_HLEN
            || e3 + eihl + 4 > msg_end
            || quoted.frag_offset() != 0
            || !matches!(eproto, PROTO_TCP | PROTO_UDP)
            || quoted.src() != self.vip
        {
            return None;
        }
        let (esrc, edst) = (quoted.src(), quoted.dst());
        slow |= read_frame(burst, i, e3 + IPV4_HLEN, &mut q[IPV4_HLEN..eihl + 4]).ok()? > 0;
        if slow {
            self.c.icmp_errors_slow_path += 1;
        }
        let (esport, edport) = (read_u16(&q, eihl), read_u16(&q, eihl + 2));
        Some(FlowKey::new(edst, esrc, edport, esport, eproto))
    }

    /// Steers ICMP error `p` (packet `i`) to the backend of the flow it quotes (see the module
    /// docs).
    fn icmp_error(&mut self, burst: &mut Burst, i: usize, p: &Parsed) {
        let flow = self.quoted_flow(burst, i, p);
        let pinned = flow
            .and_then(|k| self.table.peek(&k))
            .filter(|&b| self.enabled[usize::from(b)]);
        let backend = match (pinned, flow) {
            (Some(b), _) => {
                self.c.icmp_errors_steered += 1;
                Some(b)
            }
            (None, Some(k)) if self.mode == LbMode::Maglev => {
                self.c.icmp_no_flow += 1;
                self.pick(&k)
            }
            _ => {
                self.c.icmp_no_flow += 1;
                None
            }
        };
        match backend {
            Some(b) => {
                self.rewrite(burst.header_mut(i), p, b);
                if let Some(v) = self.verifier.as_mut() {
                    v.verify(burst, i);
                }
            }
            None if self.n_pickable == 0 => self.drop_pkt(burst, i, self.no_backend_reason),
            None => self.drop_pkt(burst, i, self.icmp_no_flow_reason),
        }
    }
}

impl NetworkFunction for LoadBalancer {
    fn name(&self) -> &str {
        &self.name
    }

    fn owned_addresses(&self) -> Vec<(std::net::Ipv4Addr, Option<u16>)> {
        vec![(std::net::Ipv4Addr::from(self.vip), None)]
    }

    fn process(&mut self, burst: &mut Burst, ctx: &NfContext) {
        let now = ms_ticks(ctx.now_ns);
        self.table.expire_scan(now, self.scan, |_, _| {});
        let n = burst.len();
        burst.prefetch_first();
        let mut start = 0;
        while start < n {
            let end = (start + BULK).min(n);
            self.process_chunk(burst, start, end, now);
            start = end;
        }
    }

    /// Back to the balancer as built: no affinity entry, zero counters, the backends enabled
    /// as configured (the Maglev table rebuilt only if one changed), round robin where it
    /// started.
    /// Back to the backends, weights and states as built; an LB whose backend set changed at
    /// run time (`add`) cannot be reset and is built afresh.
    fn reset(&mut self) -> bool {
        if self.backends.len() != self.weights_at_build.len() {
            return false;
        }
        self.table.reset();
        self.enabled.copy_from_slice(&self.enabled_at_build);
        self.weights.copy_from_slice(&self.weights_at_build);
        self.states.copy_from_slice(&self.states_at_build);
        for (saved, &w) in self.saved_weights.iter_mut().zip(&self.weights_at_build) {
            *saved = w.max(1);
        }
        self.rebuild();
        self.rr = self.rr_at_build;
        self.backend_packets.fill(0);
        self.backend_new_flows.fill(0);
        self.c = Counters::default();
        if let Some(v) = &mut self.verifier {
            v.reset();
        }
        true
    }

    fn counters(&self) -> dataplane::Counters {
        let c = &self.c;
        let ts = self.table.stats();
        let mut v = dataplane::Counters::new();
        v.count("packets", c.packets)
            .count("skipped", c.skipped)
            .count("vip_packets", c.vip_packets)
            .count("new_flows", c.new_flows)
            .count("midflow_fallback", c.midflow_fallback)
            .count("remapped", c.remapped)
            .counts("backend_packets", self.backend_packets.clone())
            .rows("backends", "backend", self.backend_rows())
            .count("not_for_vip", c.not_for_vip)
            .count("flow_table_full", c.flow_table_full)
            .gauge("active_flows", self.table.len() as u64)
            .count("expired", ts.expired)
            .count("evicted", ts.evictions)
            .count("header_segment_short", c.header_segment_short)
            .count("fragments_dropped", c.fragments_dropped)
            .count("icmp_errors_steered", c.icmp_errors_steered)
            .count("icmp_errors_slow_path", c.icmp_errors_slow_path)
            .count("icmp_no_flow", c.icmp_no_flow)
            .count("replies_translated", c.replies_translated)
            .count("encapsulated", c.encapsulated)
            .count("dropped", c.drops.total())
            .group(
                "drops",
                drop_counters(
                    &c.drops,
                    &[
                        self.not_for_vip_reason,
                        self.no_backend_reason,
                        self.icmp_no_flow_reason,
                        self.tunnel_too_big,
                        self.no_headroom,
                    ],
                ),
            );
        if let Some(ver) = &self.verifier {
            v.count("verify_slow_path", ver.verified)
                .count("checksum_mismatches", ver.mismatches);
        }
        v
    }

    fn control(
        &mut self,
        cmd: &NfCommand,
        _ctx: &NfContext,
    ) -> Result<dataplane::Counters, String> {
        let args: Vec<&str> = cmd.args.iter().map(String::as_str).collect();
        match (cmd.verb.as_str(), args.as_slice()) {
            ("backends", []) => {
                let mut v = dataplane::Counters::new();
                v.text("vip", std::net::Ipv4Addr::from(self.vip).to_string())
                    .text("mode", self.mode.as_str())
                    .rows("backends", "backend", self.backend_rows());
                Ok(v)
            }
            ("add", [addr]) => self.add_backend(addr, 1),
            ("add", [addr, w]) => self.add_backend(addr, parse_weight(w)?),
            ("remove", [addr]) => self.change(addr, |_, _| Ok((BackendState::Removed, 0))),
            ("drain", [addr]) => self.change(addr, |state, saved| match state {
                BackendState::Disabled => Err(format!(
                    "lb: backend {addr} is disabled (its flows have moved); `enable` it first"
                )),
                _ => Ok((BackendState::Draining, saved)),
            }),
            ("disable", [addr]) => {
                self.change(addr, |_, saved| Ok((BackendState::Disabled, saved)))
            }
            ("enable", [addr]) => self.change(addr, |_, saved| Ok((BackendState::Active, saved))),
            ("weight", [addr, w]) => {
                let w = parse_weight(w)?;
                self.change(addr, move |state, _| match (state, w) {
                    (BackendState::Removed | BackendState::Disabled, _) => Err(format!(
                        "backend {addr} is {}; `enable` it (or `add` it) first",
                        state.as_str()
                    )),
                    (_, 0) => Ok((BackendState::Draining, 0)),
                    (_, w) => Ok((BackendState::Active, w)),
                })
            }
            (verb, _) => Err(format!(
                "lb: no command `{verb}` with {} argument(s); allowed: backends, add ADDR \
                 [WEIGHT], remove ADDR, drain ADDR, enable ADDR, disable ADDR, weight ADDR WEIGHT",
                args.len()
            )),
        }
    }
}

fn parse_weight(w: &str) -> Result<u32, String> {
    match w.parse::<u32>() {
        Ok(n) if n <= MAX_WEIGHT => Ok(n),
        _ => Err(format!(
            "lb: weight `{w}` out of range; allowed 0..={MAX_WEIGHT}"
        )),
    }
}

impl LoadBalancer {
    /// One row per backend (removed ones too, so the packets add up): state, weight, packets,
    /// new flows, active flows.
    fn backend_rows(&self) -> Vec<(String, dataplane::Counters)> {
        (0..self.backends.len())
            .map(|i| {
                let mut r = dataplane::Counters::new();
                r.text("state", self.states[i].as_str())
                    .setting("weight", u64::from(self.weights[i]))
                    .count("packets", self.backend_packets[i])
                    .count("new_flows", self.backend_new_flows[i])
                    .gauge("active_flows", u64::from(self.backend_flows(i)));
                (std::net::Ipv4Addr::from(self.backends[i]).to_string(), r)
            })
            .collect()
    }

    fn index_of(&self, addr: &str) -> Result<usize, String> {
        let a = parse_ipv4(NAME, "backend", addr)?;
        self.backends.iter().position(|&b| b == a).ok_or_else(|| {
            format!("lb: {addr} is not a backend (`backends` lists them; `add` adds one)")
        })
    }

    /// Applies a change to the backend `addr`: `to(state, saved weight)` gives its new state and
    /// weight, or why the change is refused.
    fn change(
        &mut self,
        addr: &str,
        to: impl FnOnce(BackendState, u32) -> Result<(BackendState, u32), String>,
    ) -> Result<dataplane::Counters, String> {
        let i = self.index_of(addr)?;
        let state = self.states[i];
        if state == BackendState::Removed {
            return Err(format!(
                "lb: backend {addr} was removed; `add` brings it back"
            ));
        }
        let (new, w) = to(state, self.saved_weights[i])?;
        let moved = self.set_state(i, new, w);
        Ok(self.change_reply(i, moved))
    }

    fn add_backend(&mut self, addr: &str, weight: u32) -> Result<dataplane::Counters, String> {
        let a = parse_ipv4(NAME, "backend", addr)?;
        let i = match self.backends.iter().position(|&b| b == a) {
            Some(i) if self.states[i] == BackendState::Removed => i,
            Some(i) => {
                return Err(format!(
                    "lb: {addr} is already a backend ({})",
                    self.states[i].as_str()
                ));
            }
            None => {
                if self.backends.len() + 1 >= usize::from(NO_BACKEND) {
                    return Err("lb: at most 65534 backends".into());
                }
                if self.return_mode == ReturnMode::Nat
                    && self.backends.len() + 1 >= usize::from(REPLY)
                {
                    return Err("lb: at most 32767 backends with `return = \"nat\"`".into());
                }
                if self.backends.len() >= self.maglev.size() {
                    return Err(format!(
                        "lb: the Maglev table ({} slots) holds no more backends",
                        self.maglev.size()
                    ));
                }
                self.backends.push(a);
                let mut d = CsumDelta::default();
                d.add32(self.vip, a);
                self.deltas.push(d);
                self.enabled.push(false);
                self.weights.push(0);
                self.saved_weights.push(weight.max(1));
                self.states.push(BackendState::Disabled);
                self.backend_packets.push(0);
                self.backend_new_flows.push(0);
                self.maglev.push_backend(a);
                self.table.count_values(self.backends.len());
                self.backends.len() - 1
            }
        };
        let state = if weight == 0 {
            BackendState::Draining
        } else {
            BackendState::Active
        };
        let moved = self.set_state(i, state, weight);
        Ok(self.change_reply(i, moved))
    }

    /// What a change reports: the backend, its new state and weight, its flows here, and (in
    /// Maglev) how many table slots changed owner and how many of those were another backend's.
    fn change_reply(&self, i: usize, (changed, others): (u64, u64)) -> dataplane::Counters {
        let mut r = dataplane::Counters::new();
        r.text(
            "backend",
            std::net::Ipv4Addr::from(self.backends[i]).to_string(),
        )
        .text("state", self.states[i].as_str())
        .setting("weight", u64::from(self.weights[i]))
        .gauge("active_flows", u64::from(self.backend_flows(i)))
        .text("mode", self.mode.as_str());
        if self.mode == LbMode::Maglev {
            r.setting("table_slots", self.maglev.size() as u64)
                .setting("slots_changed", changed)
                .setting("slots_changed_of_other_backends", others);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes() {
        assert!(is_prime(65537) && is_prime(655373) && is_prime(16381) && is_prime(2));
        assert!(!is_prime(65536) && !is_prime(1) && !is_prime(65535) && !is_prime(9));
    }

    #[test]
    fn maglev_fills_table_evenly() {
        let backends: Vec<u32> = (0..32).map(|i| 0x0ab4_fa05 + i).collect();
        let mut m = Maglev::new(65537, &backends, 1);
        m.populate(&[true; 32]);
        let mut counts = [0usize; 32];
        for &b in m.slots() {
            counts[usize::from(b)] += 1;
        }
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        // M / N = 2048; Maglev's round-robin claiming keeps shares within one slot.
        assert!(*hi - *lo <= 1, "{lo}..{hi}");
        // Disable one: it owns nothing, the others still near-equal.
        let mut en = [true; 32];
        en[7] = false;
        m.populate(&en);
        assert!(!m.slots().contains(&7));
        assert!(!m.slots().contains(&NO_BACKEND));
        m.populate(&[false; 32]);
        assert!(m.slots().iter().all(|&b| b == NO_BACKEND));
    }
}
