//! Per-packet verdicts and drop reasons.
//!
//! A [`Verdict`] is two bytes, kept in an array beside a burst's packet handles: `Tx(port)` or
//! `Drop(reason)`. The run loop counts drops per reason in a flat array indexed by
//! [`DropReason::index`], so counting costs no hashing and no allocation per packet.
//!
//! Drop reasons are an open set. The packet core defines the reasons every layer can meet
//! (a short frame, a full Tx ring, ...); a network function registers its own reasons once, when
//! it is built ([`DropReason::register`], e.g. the NAT's `no_mapping`), and keeps the returned
//! codes in its state. Registration is idempotent by name, so every worker's instance of an NF
//! gets the same codes, and a report can name every reason it counted.
//!
//! **Reasons the port's slow path may take over.** A few reasons mean "the fast path cannot
//! finish this packet" rather than "this packet is bad": a frame that is not IPv4 (ARP is one),
//! a next hop whose MAC address is not known yet, an expired TTL, a packet for one of the
//! ports' own addresses ([`DropReason::for_slow_path`]). When a run has a network layer
//! ([`crate::net`]), the run loop hands packets dropped for these reasons to the port's slow
//! path instead of freeing them: it answers ARP, parks packets until their next hop resolves,
//! sends ICMP time exceeded, and counts the final outcome. Network functions keep dropping such
//! packets exactly as before; without a network layer they stay plain drops with these reasons.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Why a packet was dropped: a small code with a registered, stable snake_case name.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct DropReason(u8);

/// The reasons the packet core defines, in code order: `(name, what it means)`.
const CORE: &[(&str, &str)] = &[
    (
        "truncated",
        "the frame is shorter than the headers it claims (Ethernet, IPv4, L4)",
    ),
    (
        "malformed",
        "a header field is invalid (e.g. IPv4 IHL < 5, total length < IHL)",
    ),
    (
        "not_ipv4",
        "not IPv4 (or not Ethernet II) and the function only handles IPv4",
    ),
    (
        "ip_options",
        "IPv4 options present and the function's policy drops them",
    ),
    ("fragment", "an IPv4 fragment the function cannot handle"),
    ("ttl_expired", "the IPv4 TTL reached zero"),
    (
        "unsupported_protocol",
        "an L4 protocol the function does not handle",
    ),
    (
        "flow_table_full",
        "a flow table is full and its policy is to drop new flows",
    ),
    (
        "policy",
        "dropped on purpose by configuration (a filter, a lossy test function)",
    ),
    ("tx_full", "the Tx ring had no room"),
    (
        "no_such_port",
        "the verdict named a port the run does not have",
    ),
    (
        "tx_invalid",
        "the packet cannot be described to the Tx queue (over the NIC's descriptor size limit, or \
         buffers of another driver)",
    ),
    (
        "no_neighbor",
        "the next hop's MAC address is not known (the port's slow path resolves it by ARP and \
         sends the packet when it can)",
    ),
    (
        "local_delivery",
        "addressed to one of the ports' own addresses (the slow path answers ICMP echo; \
         anything else stops here)",
    ),
];

/// Registered reasons beyond the core ones: `(name, doc)` in code order.
static REGISTERED: Mutex<Vec<(&'static str, &'static str)>> = Mutex::new(Vec::new());
/// Number of reasons (core + registered); read without the lock.
static COUNT: AtomicUsize = AtomicUsize::new(CORE.len());

/// Errors registering a drop reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// The name is not snake_case (`[a-z0-9_]+`, starting with a letter).
    BadName(String),
    /// Every one of the [`DropReason::MAX`] codes is taken.
    Full,
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegisterError::BadName(n) => write!(
                f,
                "drop reason `{n}` is not a snake_case name ([a-z][a-z0-9_]*)"
            ),
            RegisterError::Full => write!(f, "more than {} drop reasons", DropReason::MAX),
        }
    }
}

impl std::error::Error for RegisterError {}

impl DropReason {
    /// Size of a per-reason counter array: the most reasons a process can have.
    pub const MAX: usize = 128;

    /// The frame is shorter than the headers it claims.
    pub const TRUNCATED: DropReason = DropReason(0);
    /// A header field is invalid.
    pub const MALFORMED: DropReason = DropReason(1);
    /// Not IPv4 (or not Ethernet II).
    pub const NOT_IPV4: DropReason = DropReason(2);
    /// IPv4 options present and the policy drops them.
    pub const IP_OPTIONS: DropReason = DropReason(3);
    /// An IPv4 fragment the function cannot handle.
    pub const FRAGMENT: DropReason = DropReason(4);
    /// TTL reached zero.
    pub const TTL_EXPIRED: DropReason = DropReason(5);
    /// An L4 protocol the function does not handle.
    pub const UNSUPPORTED_PROTOCOL: DropReason = DropReason(6);
    /// A flow table is full and its policy is to drop.
    pub const FLOW_TABLE_FULL: DropReason = DropReason(7);
    /// Dropped on purpose by configuration.
    pub const POLICY: DropReason = DropReason(8);
    /// The Tx ring had no room.
    pub const TX_FULL: DropReason = DropReason(9);
    /// The verdict named a port that does not exist.
    pub const NO_SUCH_PORT: DropReason = DropReason(10);
    /// The packet cannot be described to the Tx queue.
    pub const TX_INVALID: DropReason = DropReason(11);
    /// The next hop's MAC address is not known.
    pub const NO_NEIGHBOR: DropReason = DropReason(12);
    /// Addressed to one of the ports' own addresses.
    pub const LOCAL_DELIVERY: DropReason = DropReason(13);

    /// True for the reasons a run's slow path takes packets over for (see the module docs):
    /// `not_ipv4`, `no_neighbor`, `ttl_expired` and `local_delivery`.
    #[inline]
    pub fn for_slow_path(self) -> bool {
        matches!(
            self,
            DropReason::NOT_IPV4
                | DropReason::NO_NEIGHBOR
                | DropReason::TTL_EXPIRED
                | DropReason::LOCAL_DELIVERY
        )
    }

    /// The reason called `name`, registering it with `doc` if it is new. Idempotent: every
    /// caller with the same name gets the same code (the first registration's doc is kept).
    /// Call it when a network function is built, never per packet (it takes a lock).
    pub fn register(name: &'static str, doc: &'static str) -> Result<DropReason, RegisterError> {
        let ok = name.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(RegisterError::BadName(name.to_string()));
        }
        if let Some(i) = CORE.iter().position(|(n, _)| *n == name) {
            return Ok(DropReason(i as u8));
        }
        let mut reg = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = reg.iter().position(|(n, _)| *n == name) {
            return Ok(DropReason((CORE.len() + i) as u8));
        }
        let code = CORE.len() + reg.len();
        if code >= Self::MAX {
            return Err(RegisterError::Full);
        }
        reg.push((name, doc));
        COUNT.store(code + 1, Ordering::Release);
        Ok(DropReason(code as u8))
    }

    /// The reason with `name`, if it is a core reason or has been registered.
    pub fn by_name(name: &str) -> Option<DropReason> {
        Self::all().into_iter().find(|r| r.name() == name)
    }

    /// Every reason known so far, in code order (core reasons first).
    pub fn all() -> Vec<DropReason> {
        (0..COUNT.load(Ordering::Acquire))
            .map(|i| DropReason(i as u8))
            .collect()
    }

    /// The core reasons (the ones that exist without any registration).
    pub fn core() -> impl Iterator<Item = DropReason> {
        (0..CORE.len()).map(|i| DropReason(i as u8))
    }

    /// Stable snake_case name used in stats and JSON.
    pub fn name(self) -> &'static str {
        self.entry().0
    }

    /// What the reason means (for docs and `--help`).
    pub fn doc(self) -> &'static str {
        self.entry().1
    }

    fn entry(self) -> (&'static str, &'static str) {
        let i = self.0 as usize;
        if i < CORE.len() {
            return CORE[i];
        }
        let reg = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
        reg.get(i - CORE.len())
            .copied()
            .unwrap_or(("unknown", "an unregistered drop reason code"))
    }

    /// Index into a per-reason counter array of [`DropReason::MAX`] entries.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Debug for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a frame the classifier cannot read is dropped: `truncated` (also when the bytes exist
/// but lie past the header segment), `malformed`, or `not_ipv4`.
impl From<wire::classify::ParseError> for DropReason {
    fn from(e: wire::classify::ParseError) -> Self {
        use wire::classify::ParseError;
        match e {
            ParseError::Truncated | ParseError::SegmentShort => DropReason::TRUNCATED,
            ParseError::Malformed => DropReason::MALFORMED,
            ParseError::NotIpv4 => DropReason::NOT_IPV4,
        }
    }
}

/// Drop counts per reason, in a flat array (no hashing per packet).
#[derive(Clone, Debug)]
pub struct DropCounts([u64; DropReason::MAX]);

impl Default for DropCounts {
    fn default() -> Self {
        Self([0; DropReason::MAX])
    }
}

impl DropCounts {
    /// Counts `n` drops for `r`.
    #[inline(always)]
    pub fn add(&mut self, r: DropReason, n: u64) {
        self.0[r.index()] += n;
    }

    /// Drops counted for `r`.
    pub fn get(&self, r: DropReason) -> u64 {
        self.0[r.index()]
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Adds every count of `o`.
    pub fn merge(&mut self, o: &DropCounts) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a += b;
        }
    }

    /// The non-zero counts with their reasons, in code order.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| (DropReason(i as u8), *n))
    }

    /// The raw counter array (index = [`DropReason::index`]), for lock-free publishing.
    pub fn as_array(&self) -> &[u64; DropReason::MAX] {
        &self.0
    }
}

/// What happens to a packet after the NF chain: transmit on a port, or drop with a reason.
///
/// Two bytes: bit 15 set means drop (the low byte is the reason code), clear means transmit on
/// the port in the low 15 bits (an index in the run's port list, on the worker's own queue).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Verdict(u16);

/// A [`Verdict`] taken apart, for `match`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Transmit on this port.
    Tx(u16),
    /// Drop, counting the reason.
    Drop(DropReason),
}

impl Verdict {
    const DROP: u16 = 0x8000;
    /// The highest port a verdict can name.
    pub const MAX_PORT: u16 = 0x7fff;

    /// Transmit on `port` (ports above [`Verdict::MAX_PORT`] become a verdict for a port that
    /// does not exist, which the run loop drops as `no_such_port`).
    #[inline]
    pub const fn tx(port: u16) -> Self {
        Verdict(if port > Self::MAX_PORT {
            Self::MAX_PORT
        } else {
            port
        })
    }

    /// Drop for `reason`.
    #[inline]
    pub const fn drop(reason: DropReason) -> Self {
        Verdict(Self::DROP | reason.0 as u16)
    }

    /// The verdict as an [`Action`].
    #[inline]
    pub fn action(self) -> Action {
        if self.0 & Self::DROP != 0 {
            Action::Drop(DropReason(self.0 as u8))
        } else {
            Action::Tx(self.0)
        }
    }

    /// True for a drop verdict.
    #[inline]
    pub fn is_drop(self) -> bool {
        self.0 & Self::DROP != 0
    }

    /// The Tx port, if the verdict transmits.
    #[inline]
    pub fn tx_port(self) -> Option<u16> {
        (!self.is_drop()).then_some(self.0)
    }

    /// The drop reason, if the verdict drops.
    #[inline]
    pub fn drop_reason(self) -> Option<DropReason> {
        self.is_drop().then_some(DropReason(self.0 as u8))
    }

    /// The raw two bytes (for comparisons in bulk).
    #[inline]
    pub fn raw(self) -> u16 {
        self.0
    }
}

impl std::fmt::Debug for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.action() {
            Action::Tx(p) => write!(f, "Tx({p})"),
            Action::Drop(r) => write!(f, "Drop({r})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_names_are_unique_and_codes_dense() {
        let mut names: Vec<_> = DropReason::core().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CORE.len());
        for (i, r) in DropReason::core().enumerate() {
            assert_eq!(r.index(), i);
        }
        assert_eq!(DropReason::TX_FULL.name(), "tx_full");
        assert_eq!(
            DropReason::by_name("truncated"),
            Some(DropReason::TRUNCATED)
        );
    }

    #[test]
    fn registration_is_idempotent_and_checked() {
        let a = DropReason::register("test_reason_a", "a test").unwrap();
        let b = DropReason::register("test_reason_a", "another doc").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.name(), "test_reason_a");
        assert_eq!(a.doc(), "a test");
        assert!(a.index() >= CORE.len());
        assert_eq!(
            DropReason::register("truncated", "x").unwrap(),
            DropReason::TRUNCATED
        );
        assert!(matches!(
            DropReason::register("Bad-Name", "x"),
            Err(RegisterError::BadName(_))
        ));
        assert!(DropReason::all().contains(&a));
    }

    #[test]
    fn verdicts_round_trip() {
        assert_eq!(Verdict::tx(3).action(), Action::Tx(3));
        assert_eq!(Verdict::tx(3).tx_port(), Some(3));
        let d = Verdict::drop(DropReason::POLICY);
        assert!(d.is_drop());
        assert_eq!(d.action(), Action::Drop(DropReason::POLICY));
        assert_eq!(d.drop_reason(), Some(DropReason::POLICY));
        assert_eq!(Verdict::tx(u16::MAX).tx_port(), Some(Verdict::MAX_PORT));
        assert_eq!(std::mem::size_of::<Verdict>(), 2);
    }
}
