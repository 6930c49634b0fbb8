//! The outside address pool, which of its addresses are in service, and paired pooling.
//!
//! Why paired by a hash ring: RFC 4787 REQ-2 and RFC 6888 REQ-2 ask that every session of one
//! inside address uses one outside address. Choosing it as a pure function of the inside address
//! and the set of addresses in service means every worker (and every NAT instance with the same
//! pool) picks the same address for a subscriber without sharing state, a fragment that arrives
//! before its first fragment can be translated outbound without any session, and nothing needs
//! to be remembered per subscriber. The function is a consistent-hash ring: every address in
//! service puts [`AddressPool::points_per_address`] points on a 32-bit ring, each at a hash of
//! the address itself (not of its position in the config), and a subscriber takes the address of
//! the first point at or after the hash of its inside address. So the pairing depends only on
//! which addresses serve, not on their order or on the history of changes, and a change moves
//! only what it must (the property `dataplane ctl nat pool add|remove` relies on): an address
//! added takes about `1 / (n + 1)` of the subscribers (the arcs its points cut), an address taken
//! out gives back only its own subscribers. A plain `hash mod n` would re-pair almost everyone.
//!
//! The price of pairing: a subscriber whose address has no free port is refused rather than
//! moved to another address (moving it would break the pairing). Port blocks pair like this;
//! deterministic NAT (RFC 7422, `nfs/src/nat/deterministic.rs`) computes its own mapping.
//!
//! Addresses and their states: the pool is `nat_ips` (in service at start) then `spare_ips`
//! (known from the start: indexed, steered and given port tables, but out of service until an
//! operator adds them). An address is *active* (new subscribers are paired with it), *draining*
//! (no new subscriber, its sessions go on and it still answers: `pool drain`) or *off* (neither
//! paired nor answered). Indices never change, so per-address tables stay valid across changes.

use super::config::Prefix;
use crate::flow_table::{FlowKey, hash_key};

/// The hash seed of the subscriber side of the ring: fixed, so every worker and every NAT
/// instance pairs alike.
const PAIR_SEED: u64 = 0x7061_6972_6564_2121;

/// The most points one address puts on the ring (small pools: the ring's balance is within a
/// few percent).
const MAX_POINTS: u32 = 512;
/// The fewest (a /16 pool: 1 M points in all, 8 MiB per worker).
const MIN_POINTS: u32 = 16;
/// Points on the ring in all that [`AddressPool::points_per_address`] aims for.
const RING_BUDGET: u32 = 1 << 20;

/// An address's state (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AddrState {
    /// Paired with new subscribers, answered.
    Active,
    /// No new subscriber; its sessions go on and it is answered.
    Draining,
    /// Out of service.
    Off,
}

impl AddrState {
    /// The state's name in listings.
    pub fn as_str(self) -> &'static str {
        match self {
            AddrState::Active => "active",
            AddrState::Draining => "draining",
            AddrState::Off => "off",
        }
    }
}

/// The outside addresses (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct AddressPool {
    /// The first range of addresses in service, `(first, last - first)`, kept inline: the
    /// per-packet membership test of a pool of one range (the common case) is a subtraction
    /// and a compare, without following a pointer.
    first: (u32, u32),
    /// The other ranges in service.
    rest: Box<[(u32, u32)]>,
    /// Every known address as prefixes: `nat_ips` then `spare_ips`.
    prefixes: Vec<Prefix>,
    /// Addresses before each prefix (for indexing).
    before: Vec<u32>,
    len: u32,
    /// Per address index.
    state: Vec<AddrState>,
    /// The ring: `(point, address index)` sorted by point, of the active addresses.
    ring: Vec<(u32, u32)>,
    points: u32,
}

/// 32 well-mixed bits of `x` (SplitMix64's finalizer).
fn mix(x: u64) -> u32 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

/// Bytes of the ring of a pool of `known` addresses, all active (what [`AddressPool::new`]
/// allocates at most for it).
pub(super) fn ring_bytes(known: u64) -> u64 {
    let points =
        (u64::from(RING_BUDGET) / known.max(1)).clamp(u64::from(MIN_POINTS), u64::from(MAX_POINTS));
    known.saturating_mul(points).saturating_mul(8)
}

impl AddressPool {
    /// A pool of `active` (checked, non-overlapping, at least one address) in service and
    /// `spare` known but off.
    pub fn new(active: &[Prefix], spare: &[Prefix]) -> Self {
        let prefixes: Vec<Prefix> = active.iter().chain(spare).copied().collect();
        let mut before = Vec::with_capacity(prefixes.len());
        let mut len = 0u32;
        for p in &prefixes {
            before.push(len);
            len += !p.1 + 1;
        }
        let on: u32 = active.iter().map(|p| !p.1 + 1).sum();
        let state = (0..len)
            .map(|i| {
                if i < on {
                    AddrState::Active
                } else {
                    AddrState::Off
                }
            })
            .collect();
        let mut pool = Self {
            first: (0, 0),
            rest: Box::new([]),
            prefixes,
            before,
            len,
            state,
            ring: Vec::new(),
            points: (RING_BUDGET / len.max(1)).clamp(MIN_POINTS, MAX_POINTS),
        };
        pool.rebuild();
        pool
    }

    /// Points each active address puts on the ring: fixed by the number of known addresses, so
    /// a change of state never moves the other addresses' points.
    pub fn points_per_address(&self) -> u32 {
        self.points
    }

    /// Number of known addresses (in service or not).
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True when `a` is an outside address in service (active or draining).
    #[inline(always)]
    pub fn contains(&self, a: u32) -> bool {
        a.wrapping_sub(self.first.0) <= self.first.1
            || self
                .rest
                .iter()
                .any(|&(lo, span)| a.wrapping_sub(lo) <= span)
    }

    /// The index of known address `a` (0..len), if it is one.
    #[inline]
    pub fn index_of(&self, a: u32) -> Option<u32> {
        self.prefixes
            .iter()
            .zip(&self.before)
            .find(|((b, m), _)| a & m == *b)
            .map(|((b, _), before)| before + (a - b))
    }

    /// The address with index `i` (< len).
    pub fn address(&self, i: u32) -> u32 {
        let k = self.before.partition_point(|&b| b <= i) - 1;
        self.prefixes[k].0 + (i - self.before[k])
    }

    /// The state of address index `i` (< len).
    pub fn state(&self, i: u32) -> AddrState {
        self.state[i as usize]
    }

    /// Address indices in service (active or draining), in index order.
    pub fn in_service(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.len).filter(|&i| self.state[i as usize] != AddrState::Off)
    }

    /// Sets address index `i`'s state and rebuilds the ring and the ranges in service (between
    /// bursts; allocates). Refuses to take the last address in service out (the NAT would have
    /// no address to answer for).
    pub fn set_state(&mut self, i: u32, st: AddrState) -> Result<(), String> {
        if st == AddrState::Off
            && self.state[i as usize] != AddrState::Off
            && self.in_service().count() == 1
        {
            return Err(
                "it is the last address in service; add another one first (`pool add`)".into(),
            );
        }
        self.state[i as usize] = st;
        self.rebuild();
        Ok(())
    }

    /// The ring and the ranges in service, from the states.
    fn rebuild(&mut self) {
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        let mut addrs: Vec<u32> = self.in_service().map(|i| self.address(i)).collect();
        addrs.sort_unstable();
        for a in addrs {
            match ranges.last_mut() {
                Some((lo, span)) if lo.wrapping_add(*span).wrapping_add(1) == a => *span += 1,
                _ => ranges.push((a, 0)),
            }
        }
        // Never empty: `set_state` keeps an address in service.
        self.first = ranges.first().copied().unwrap_or((0, 0));
        self.rest = ranges.into_iter().skip(1).collect();
        self.ring.clear();
        for i in 0..self.len {
            if self.state[i as usize] == AddrState::Active {
                let a = u64::from(self.address(i));
                for v in 0..self.points {
                    self.ring.push((mix(a << 32 | u64::from(v)), i));
                }
            }
        }
        self.ring.sort_unstable();
    }

    /// The outside address paired with inside address `inside`, and its index; `None` when no
    /// address is active (all draining).
    #[inline]
    pub fn paired(&self, inside: u32) -> Option<(u32, u32)> {
        if self.len == 1 {
            // One address, in service (the last one cannot be taken out); active unless drained.
            return (self.state[0] == AddrState::Active).then_some((self.first.0, 0));
        }
        let h = (hash_key(&FlowKey::new(inside, 0, 0, 0, 0), PAIR_SEED) >> 32) as u32;
        let k = self.ring.partition_point(|&(p, _)| p < h);
        let &(_, i) = self.ring.get(k).or_else(|| self.ring.first())?;
        Some((self.address(i), i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_addresses_across_prefixes() {
        let p = AddressPool::new(
            &[(0xc000_0200, u32::MAX << 2), (0x0a00_0001, u32::MAX)],
            &[],
        );
        assert_eq!(p.len(), 5);
        let all: Vec<u32> = (0..5).map(|i| p.address(i)).collect();
        assert_eq!(
            all,
            vec![
                0xc000_0200,
                0xc000_0201,
                0xc000_0202,
                0xc000_0203,
                0x0a00_0001
            ]
        );
        for (i, &a) in all.iter().enumerate() {
            assert!(p.contains(a));
            assert_eq!(p.index_of(a), Some(i as u32));
        }
        assert!(!p.contains(0xc000_0204));
        assert!(!p.contains(0x0a00_0000) && !p.contains(0x0a00_0002));
        assert_eq!(p.index_of(0x0a00_0002), None);
    }

    #[test]
    fn pairing_is_stable_and_spreads() {
        let p = AddressPool::new(&[(0xc000_0200, u32::MAX << 4)], &[]);
        let mut counts = [0u32; 16];
        for s in 0..16_000u32 {
            let (a, i) = p.paired(0x6440_0000 + s).unwrap();
            assert_eq!(p.paired(0x6440_0000 + s), Some((a, i)), "a pure function");
            assert_eq!(p.address(i), a);
            counts[i as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    /// Pairs of 100 000 subscribers with `p`.
    fn pairs(p: &AddressPool) -> Vec<u32> {
        (0..100_000u32)
            .map(|s| p.paired(0x6440_0000 + s).unwrap().0)
            .collect()
    }

    #[test]
    fn adding_an_address_moves_only_its_share_and_removing_only_its_subscribers() {
        // 8 active addresses, 1 spare.
        let mut p = AddressPool::new(&[(0xc000_0200, u32::MAX << 3)], &[(0xc633_6407, u32::MAX)]);
        assert!(!p.contains(0xc633_6407), "a spare is out of service");
        let before = pairs(&p);
        assert!(!before.contains(&0xc633_6407));
        p.set_state(8, AddrState::Active).unwrap();
        assert!(p.contains(0xc633_6407));
        let after = pairs(&p);
        let moved: Vec<usize> = (0..before.len())
            .filter(|&i| before[i] != after[i])
            .collect();
        // Every subscriber that moved went to the new address; about 1/9 of them did.
        assert!(moved.iter().all(|&i| after[i] == 0xc633_6407));
        let share = moved.len() as f64 / before.len() as f64;
        assert!((0.08..0.145).contains(&share), "moved {share}");
        // Taking an old address out moves only its subscribers, each to another address.
        let gone = p.address(3);
        p.set_state(3, AddrState::Off).unwrap();
        assert!(!p.contains(gone));
        let later = pairs(&p);
        for i in 0..after.len() {
            if after[i] == gone {
                assert_ne!(later[i], gone);
            } else {
                assert_eq!(later[i], after[i], "subscriber {i} moved needlessly");
            }
        }
        // The pairing depends on the set only: a pool built with that set from the start
        // (in another order) pairs alike.
        let mut set: Vec<Prefix> = (0..8u32)
            .filter(|&i| i != 3)
            .map(|i| (0xc000_0200 + i, u32::MAX))
            .collect();
        set.push((0xc633_6407, u32::MAX));
        set.reverse();
        // Same number of known addresses, so the same points per address.
        let fresh = AddressPool::new(&set, &[(0xc000_0203, u32::MAX)]);
        assert_eq!(fresh.points_per_address(), p.points_per_address());
        assert_eq!(pairs(&fresh), later);
    }

    #[test]
    fn draining_keeps_an_address_answered_but_unpaired_and_the_last_one_stays() {
        let mut p = AddressPool::new(&[(0xc000_0200, u32::MAX << 1)], &[]);
        p.set_state(0, AddrState::Draining).unwrap();
        assert!(p.contains(0xc000_0200));
        assert!(pairs(&p).iter().all(|&a| a == 0xc000_0201));
        p.set_state(1, AddrState::Draining).unwrap();
        assert_eq!(p.paired(1), None, "nothing active");
        p.set_state(0, AddrState::Off).unwrap();
        assert!(p.set_state(1, AddrState::Off).is_err(), "the last one");
        assert!(p.contains(0xc000_0201) && !p.contains(0xc000_0200));
        let mut one = AddressPool::new(&[(0x0a00_0001, u32::MAX)], &[]);
        assert_eq!(one.paired(7), Some((0x0a00_0001, 0)));
        one.set_state(0, AddrState::Draining).unwrap();
        assert_eq!(one.paired(7), None);
    }
}
