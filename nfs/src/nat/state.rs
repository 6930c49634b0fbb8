//! The NAT's per-worker state records: sessions (one per translated flow) and, with
//! endpoint-independent mapping, mappings (one per inside endpoint, shared by its sessions).
//!
//! Why these layouts: a session is read on every packet, so it is 32 B and 32-byte aligned (one
//! cache line access), and holds everything the rewrite needs (outside address and port, the
//! precomputed checksum deltas, VPP's `l3_csum_delta`/`l4_csum_delta`). Mappings are read only
//! when a session is created or freed. Both pools are [`HugeArray`]s handed out from a
//! high-water mark before their free lists, so building a 10 M-session NAT writes none of its
//! memory (the kernel zero-fills pages as they are first touched) and the expiry scan never
//! walks the never-used tail.

use nicmem::{Align32, HugeArray};

use crate::flow_table::FlowKey;
use crate::params::bad_param;

use super::NAME;

/// A free record.
pub(super) const ST_FREE: u8 = 0;
/// A UDP session.
pub(super) const ST_UDP: u8 = 1;
/// An ICMP query session.
pub(super) const ST_ICMP: u8 = 2;
/// TCP: a SYN seen, the handshake not complete (the opening timeout applies).
pub(super) const ST_TCP_OPENING: u8 = 3;
/// TCP: SYNs seen both ways (the established timeout applies).
pub(super) const ST_TCP_ESTABLISHED: u8 = 4;
/// TCP: FINs seen both ways, or a RST (the closing timeout applies).
pub(super) const ST_TCP_CLOSING: u8 = 5;
/// Endpoint-dependent mapping: a session that ended, kept (its inbound key only) so its outside
/// port is not given to another subscriber towards the same remote before `port_reuse_hold_s`.
pub(super) const ST_HOLD: u8 = 6;

/// A mapping (endpoint-independent) in use by at least one session.
pub(super) const MAP_LIVE: u8 = 1;
/// A mapping whose last session ended: its outside port is held for its subscriber.
pub(super) const MAP_HOLD: u8 = 2;

/// One translation session (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Session {
    /// Inside 5-tuple: inside address/port -> remote address/port (ICMP: identifier, 0).
    pub out_key: FlowKey,
    /// Expiry time, ms ticks.
    pub deadline: u32,
    /// Outside address.
    pub nat_ip: u32,
    /// Outside port (ICMP identifier).
    pub nat_port: u16,
    /// Outbound IPv4 header checksum delta (source address rewrite).
    pub ip_delta: u16,
    /// Outbound L4 checksum delta (pseudo-header + port; ICMP: identifier only).
    pub l4_delta: u16,
    /// `ST_*`.
    pub state: u8,
    /// TCP flags seen ([`super::tcp`]).
    pub tcp: u8,
}

/// A session as stored: the fields of [`Session`] in a zeroable form, 32 B aligned. All-zero
/// is a free session.
type RawSession = Align32<((u64, u64), u32, u32, u16, u16, u16, (u8, u8))>;

const _: () = assert!(std::mem::size_of::<RawSession>() == 32);

impl Session {
    /// The key replies arrive with: remote -> outside address and port.
    #[inline(always)]
    pub fn in_key(&self) -> FlowKey {
        FlowKey::new(
            self.out_key.dst(),
            self.nat_ip,
            self.out_key.dport(),
            self.nat_port,
            self.out_key.proto(),
        )
    }

    #[inline(always)]
    fn to_raw(self) -> RawSession {
        let (a, b) = self.out_key.words();
        Align32((
            (a, b),
            self.deadline,
            self.nat_ip,
            self.nat_port,
            self.ip_delta,
            self.l4_delta,
            (self.state, self.tcp),
        ))
    }

    #[inline(always)]
    fn from_raw(r: &RawSession) -> Self {
        let ((a, b), deadline, nat_ip, nat_port, ip_delta, l4_delta, (state, tcp)) = r.0;
        Session {
            out_key: FlowKey::from_words(a, b),
            deadline,
            nat_ip,
            nat_port,
            ip_delta,
            l4_delta,
            state,
            tcp,
        }
    }
}

/// An endpoint-independent mapping: inside address and port <-> outside address and port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Mapping {
    pub inside: u32,
    pub outside: u32,
    /// Sessions using it.
    pub refs: u32,
    /// `MAP_HOLD`: when the hold ends, ms ticks.
    pub deadline: u32,
    pub inside_port: u16,
    pub outside_port: u16,
    pub proto: u8,
    /// `MAP_*` (0: free).
    pub state: u8,
}

type RawMapping = Align32<((u32, u32, u32, u32), (u16, u16, u8, u8))>;

impl Mapping {
    /// Key of the inside endpoint in the mapping table (distinct from the other kinds: its
    /// destination is 0).
    #[inline(always)]
    pub fn inside_key(inside: u32, port: u16, proto: u8) -> FlowKey {
        FlowKey::new(inside, 0, port, 0, proto)
    }

    /// Key of the outside endpoint in the mapping table (its source is 0).
    #[inline(always)]
    pub fn outside_key(outside: u32, port: u16, proto: u8) -> FlowKey {
        FlowKey::new(0, outside, 0, port, proto)
    }

    /// Key of an address-dependent filter entry: remote address -> outside endpoint.
    #[inline(always)]
    pub fn filter_key(remote: u32, outside: u32, port: u16, proto: u8) -> FlowKey {
        FlowKey::new(remote, outside, 0, port, proto)
    }

    fn to_raw(self) -> RawMapping {
        Align32((
            (self.inside, self.outside, self.refs, self.deadline),
            (self.inside_port, self.outside_port, self.proto, self.state),
        ))
    }

    fn from_raw(r: &RawMapping) -> Self {
        let ((inside, outside, refs, deadline), (inside_port, outside_port, proto, state)) = r.0;
        Mapping {
            inside,
            outside,
            refs,
            deadline,
            inside_port,
            outside_port,
            proto,
            state,
        }
    }
}

/// A pool of records handed out from a high-water mark, then from a free list of released
/// indices (most recently released first). No allocation after construction.
pub(super) struct Pool<R: nicmem::Zeroable> {
    slots: HugeArray<R>,
    /// Released indices; its capacity is the pool size, so pushing never allocates.
    free: Vec<u32>,
    /// Indices below this have been handed out at least once.
    high_water: u32,
}

impl<R: nicmem::Zeroable> Pool<R> {
    pub fn new(n: usize, what: &str) -> Result<Self, String> {
        Ok(Self {
            slots: HugeArray::zeroed(n)
                .map_err(|e| bad_param(NAME, "flows", format!("{what} pool: {e}")))?,
            free: Vec::with_capacity(n),
            high_water: 0,
        })
    }

    /// A free index, lowest never-used ones first, or `None` when every record is in use.
    pub fn alloc(&mut self) -> Option<u32> {
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

    /// Returns index `idx` (whose record the caller marked free) to the free list.
    pub fn release(&mut self, idx: u32) {
        self.free.push(idx);
    }

    /// Records in all (in use or not).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Indices handed out so far: every record in use is below it.
    pub fn high_water(&self) -> usize {
        self.high_water as usize
    }

    /// Forgets every record (they are all free again; the memory is not touched).
    pub fn clear(&mut self) {
        self.free.clear();
        self.high_water = 0;
    }

    /// Hints the CPU to fetch record `i`.
    #[inline(always)]
    pub fn prefetch(&self, i: usize) {
        self.slots.prefetch(i);
    }
}

/// The session pool.
pub(super) type Sessions = Pool<RawSession>;

impl Sessions {
    #[inline(always)]
    pub fn get(&self, idx: u32) -> Session {
        Session::from_raw(&self.slots[idx as usize])
    }

    #[inline(always)]
    pub fn set(&mut self, idx: u32, s: &Session) {
        self.slots[idx as usize] = s.to_raw();
    }

    /// Sets session `idx`'s deadline (a packet refreshed it): one field written, not the
    /// record.
    #[inline(always)]
    pub fn refresh(&mut self, idx: u32, deadline: u32) {
        self.slots[idx as usize].0.1 = deadline;
    }

    /// [`Sessions::refresh`] for TCP, whose packets also move its state and seen-flags.
    #[inline(always)]
    pub fn refresh_tcp(&mut self, idx: u32, deadline: u32, state: u8, tcp: u8) {
        let r = &mut self.slots[idx as usize].0;
        r.1 = deadline;
        r.6 = (state, tcp);
    }

    /// Marks session `idx` free and returns it to the free list.
    pub fn free(&mut self, idx: u32) {
        self.slots[idx as usize] = Align32::default();
        self.release(idx);
    }
}

/// The mapping pool.
pub(super) type Mappings = Pool<RawMapping>;

impl Mappings {
    #[inline]
    pub fn get(&self, idx: u32) -> Mapping {
        Mapping::from_raw(&self.slots[idx as usize])
    }

    #[inline]
    pub fn set(&mut self, idx: u32, m: &Mapping) {
        self.slots[idx as usize] = m.to_raw();
    }

    /// Marks mapping `idx` free and returns it to the free list.
    pub fn free(&mut self, idx: u32) {
        self.slots[idx as usize] = Align32::default();
        self.release(idx);
    }
}
