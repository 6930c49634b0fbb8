//! Outside port allocation: which ports a new mapping may take, in which order, within what bound.
//!
//! Why it works this way:
//!
//! - **Each worker owns a slice** of `port_min..=port_max` (return traffic is steered to the
//!   owner by destination port, [`crate::nat::Nat`]'s steering rules), so allocation needs no
//!   lock and no other worker's state.
//! - **The inside port first** (port preservation, as VPP and Cilium try it): an application
//!   that binds a port keeps it on the outside when it is free, which is what most NAT-traversal
//!   techniques hope for.
//! - **Then random ports, not a cursor** (RFC 6056, RFC 7857 section 3.7; RFC 6888 REQ-15): a
//!   random start and the next ports after it (RFC 6056's algorithm 1), so an attacker cannot
//!   predict the next mapping, and a nearly full range still yields a free port within a few
//!   probes.
//! - **Ranges kept apart** (RFC 4787 REQ-3): an inside port below 1024 is mapped below 1024 and
//!   one above 1023 above it, whenever the worker's slice has ports of that class (with the
//!   default range, 1024-65535, every port is above 1023: a subscriber's outside address should
//!   not look like it runs well-known services).
//! - **Parity on request** (RFC 4787 REQ-4, `port_parity`): only ports of the inside port's
//!   parity are candidates.
//! - **Bounded work** (RFC 6888 REQ-11, the "no 64-probe walks"): at most
//!   `port_attempts` random candidates per new mapping, and with endpoint-independent mapping a
//!   count of the ports in use per outside address and protocol refuses a full address at once,
//!   without a probe.
//!
//! What a candidate is checked against (a free port, a port held for another subscriber, an
//! expired session's port) is the NAT's business ([`Candidates`] only proposes). With
//! `port_block`, a subscriber's ports come from its blocks instead (`nfs/src/nat/blocks.rs`);
//! the per-address counts here still refuse a full address at once.

use wire::ipv4::{PROTO_TCP, PROTO_UDP};

use crate::work_package::XorShift64;

/// Worker `worker`'s slice of `port_min..=port_max` (of `workers`), inclusive: the range split
/// evenly, the last worker also taking the remainder. Errors name the key.
pub(super) fn worker_slice(
    port_min: u16,
    port_max: u16,
    worker: u16,
    workers: u16,
) -> Result<(u16, u16), String> {
    if port_min == 0 || port_min > port_max {
        return Err(crate::params::bad_param(
            super::NAME,
            "port_min",
            format!("need 1 <= port_min <= port_max (got {port_min}..{port_max})"),
        ));
    }
    let total = u32::from(port_max) - u32::from(port_min) + 1;
    let per = total / u32::from(workers.max(1));
    if per == 0 {
        return Err(crate::params::bad_param(
            super::NAME,
            "port_max",
            format!("{total} ports cannot be split over {workers} workers"),
        ));
    }
    let lo = u32::from(port_min) + per * u32::from(worker);
    let hi = if worker + 1 >= workers {
        u32::from(port_max)
    } else {
        lo + per - 1
    };
    Ok((lo as u16, hi as u16))
}

/// Protocol slots of the per-address counters: TCP, UDP, ICMP.
pub(super) const PROTO_SLOTS: usize = 3;

/// The counter slot of a protocol.
#[inline(always)]
pub(super) fn proto_slot(proto: u8) -> usize {
    match proto {
        PROTO_TCP => 0,
        PROTO_UDP => 1,
        _ => 2,
    }
}

/// One worker's port allocator (see the module docs).
#[derive(Debug)]
pub(super) struct PortAllocator {
    lo: u16,
    hi: u16,
    preserve: bool,
    parity: bool,
    attempts: u32,
    rng: XorShift64,
    /// The random state it was built with (a reset starts from it again).
    seed: u64,
    /// Ports of this worker's slice in use (or held) per (outside address index, protocol):
    /// kept by endpoint-independent mapping, whose ports are exclusive per address.
    used: Vec<u32>,
}

/// The ports a new mapping may try, in order: the preserved inside port (if allowed and in
/// range), then up to `port_attempts` ports from a random start (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(super) struct Candidates {
    preserved: Option<u16>,
    lo: u16,
    hi: u16,
    step: u16,
    next: u16,
    left: u32,
}

impl Iterator for Candidates {
    type Item = u16;

    #[inline]
    fn next(&mut self) -> Option<u16> {
        if let Some(p) = self.preserved.take() {
            return Some(p);
        }
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let p = self.next;
        let n = u32::from(p) + u32::from(self.step);
        self.next = if n > u32::from(self.hi) {
            // Wrap to the range start (already of the right parity with step 2).
            self.lo
        } else {
            n as u16
        };
        Some(p)
    }
}

impl PortAllocator {
    /// An allocator for slice `lo..=hi` over `addresses` outside addresses.
    pub fn new(
        lo: u16,
        hi: u16,
        addresses: u32,
        preserve: bool,
        parity: bool,
        attempts: u32,
        seed: u64,
    ) -> Self {
        Self {
            lo,
            hi,
            preserve,
            parity,
            attempts,
            rng: XorShift64::new(seed),
            seed,
            used: vec![0; addresses as usize * PROTO_SLOTS],
        }
    }

    /// This worker's slice, inclusive.
    pub fn range(&self) -> (u16, u16) {
        (self.lo, self.hi)
    }

    /// True when `port` is in this worker's slice.
    #[inline(always)]
    pub fn owns(&self, port: u16) -> bool {
        (self.lo..=self.hi).contains(&port)
    }

    /// The candidate ports for a mapping of inside port (or ICMP identifier) `inside`.
    pub fn candidates(&mut self, inside: u16) -> Candidates {
        // The class of the inside port, when the slice has ports of it (RFC 4787 REQ-3).
        let (mut lo, mut hi) = if inside < 1024 {
            (self.lo, self.hi.min(1023))
        } else {
            (self.lo.max(1024), self.hi)
        };
        if lo > hi {
            (lo, hi) = (self.lo, self.hi);
        }
        let step = if self.parity { 2 } else { 1 };
        if self.parity {
            // Narrow to the first and last port of the inside port's parity.
            if lo % 2 != inside % 2 {
                lo = lo.saturating_add(1);
            }
            if hi % 2 != inside % 2 {
                hi = hi.saturating_sub(1);
            }
        }
        if lo > hi {
            return Candidates {
                preserved: None,
                lo: 0,
                hi: 0,
                step: 1,
                next: 0,
                left: 0,
            };
        }
        let count = (u32::from(hi) - u32::from(lo)) / u32::from(step) + 1;
        let start = lo + (((self.rng.next_u64() >> 32) * u64::from(count)) >> 32) as u16 * step;
        let preserved = (self.preserve && (lo..=hi).contains(&inside)).then_some(inside);
        Candidates {
            preserved,
            lo,
            hi,
            step,
            next: start,
            left: self.attempts.min(count),
        }
    }

    /// A random number below `n` (at least 1), from the allocator's random state.
    pub fn random_below(&mut self, n: u32) -> u32 {
        (((self.rng.next_u64() >> 32) * u64::from(n)) >> 32) as u32
    }

    /// True when every port of the slice is in use or held for outside address `addr` and
    /// protocol `proto` (endpoint-independent mapping only): refuse without probing.
    #[inline]
    pub fn full(&self, addr: u32, proto: u8) -> bool {
        self.used[addr as usize * PROTO_SLOTS + proto_slot(proto)]
            > u32::from(self.hi) - u32::from(self.lo)
    }

    /// Counts a port of `addr`/`proto` taken.
    #[inline]
    pub fn take(&mut self, addr: u32, proto: u8) {
        self.used[addr as usize * PROTO_SLOTS + proto_slot(proto)] += 1;
    }

    /// Counts a port of `addr`/`proto` given back.
    #[inline]
    pub fn give(&mut self, addr: u32, proto: u8) {
        let u = &mut self.used[addr as usize * PROTO_SLOTS + proto_slot(proto)];
        *u = u.saturating_sub(1);
    }

    /// Forgets every port in use (the NAT was cleared).
    pub fn clear(&mut self) {
        self.used.fill(0);
    }

    /// As built: no port in use, the random state it started with.
    pub fn reset(&mut self) {
        self.clear();
        self.rng = XorShift64::new(self.seed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(c: Candidates) -> Vec<u16> {
        c.collect()
    }

    #[test]
    fn preserved_port_first_then_random_distinct_ports() {
        let mut a = PortAllocator::new(1024, 65535, 1, true, false, 16, 7);
        let c = all(a.candidates(40000));
        assert_eq!(c[0], 40000);
        assert_eq!(c.len(), 17);
        let mut d = c[1..].to_vec();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), 16, "distinct candidates");
        // Random starts: two mappings do not start at the same place.
        let s1 = all(a.candidates(5000))[1];
        let s2 = all(a.candidates(5000))[1];
        assert_ne!(s1, s2);
        // Out of the slice: nothing to preserve.
        let mut w = PortAllocator::new(2000, 2999, 1, true, false, 4, 7);
        let c = all(w.candidates(40000));
        assert_eq!(c.len(), 4);
        assert!(c.iter().all(|p| (2000..=2999).contains(p)));
    }

    #[test]
    fn small_ranges_are_covered_whole_and_wrap() {
        let mut a = PortAllocator::new(3000, 3007, 1, false, false, 16, 1);
        let mut c = all(a.candidates(9));
        assert_eq!(c.len(), 8, "never more candidates than ports");
        c.sort_unstable();
        assert_eq!(c, (3000..=3007).collect::<Vec<_>>());
    }

    #[test]
    fn parity_and_classes() {
        let mut a = PortAllocator::new(1000, 1100, 1, true, true, 64, 3);
        for inside in [1001u16, 1050, 1051, 7] {
            let c = all(a.candidates(inside));
            assert!(!c.is_empty());
            assert!(c.iter().all(|p| p % 2 == inside % 2), "{inside}: {c:?}");
            if inside < 1024 {
                assert!(c.iter().all(|&p| p < 1024), "{inside}: {c:?}");
            } else {
                assert!(c.iter().all(|&p| p >= 1024), "{inside}: {c:?}");
            }
        }
        // A one-port range of the other parity has no candidate.
        let mut b = PortAllocator::new(2000, 2000, 1, true, true, 4, 3);
        assert!(all(b.candidates(2001)).is_empty());
    }

    #[test]
    fn counts_tell_a_full_address() {
        let mut a = PortAllocator::new(10, 12, 2, true, false, 4, 3);
        for _ in 0..3 {
            assert!(!a.full(1, PROTO_UDP));
            a.take(1, PROTO_UDP);
        }
        assert!(a.full(1, PROTO_UDP));
        assert!(!a.full(0, PROTO_UDP) && !a.full(1, PROTO_TCP));
        a.give(1, PROTO_UDP);
        assert!(!a.full(1, PROTO_UDP));
        a.clear();
        assert!(!a.full(1, PROTO_UDP));
    }
}
