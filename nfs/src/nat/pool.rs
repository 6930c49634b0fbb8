//! The outside address pool and paired pooling.
//!
//! Why paired by hash: RFC 4787 REQ-2 and RFC 6888 REQ-2 ask that every session of one inside
//! address uses one outside address. Choosing it as a hash of the inside address makes the pair
//! a pure function: every worker picks the same address for a subscriber without sharing state,
//! a fragment that arrives before its first fragment can be translated outbound without any
//! session, and nothing needs to be remembered per subscriber. The price: a subscriber whose
//! address has no free port is refused rather than moved to another address (moving it would
//! break the pairing). Port blocks and deterministic NAT (RFC 7422) replace
//! [`AddressPool::paired`] with their own mapping from subscriber to address.

use super::config::Prefix;
use crate::flow_table::{FlowKey, hash_key};

/// The hash seed of the pairing: fixed, so every worker and every NAT instance pairs alike.
const PAIR_SEED: u64 = 0x7061_6972_6564_2121;

/// The outside addresses (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct AddressPool {
    /// The first prefix, kept inline: the per-packet membership test of a pool of one prefix
    /// (the common case) is one compare, without following a pointer.
    first: Prefix,
    /// The other prefixes.
    rest: Box<[Prefix]>,
    /// Prefixes in config order.
    prefixes: Vec<Prefix>,
    /// Addresses before each prefix (for indexing).
    before: Vec<u32>,
    len: u32,
}

impl AddressPool {
    /// A pool of the (checked, non-overlapping, at least one) prefixes.
    pub fn new(prefixes: &[Prefix]) -> Self {
        let mut before = Vec::with_capacity(prefixes.len());
        let mut len = 0u32;
        for p in prefixes {
            before.push(len);
            len += !p.1 + 1;
        }
        Self {
            first: prefixes[0],
            rest: prefixes[1..].into(),
            prefixes: prefixes.to_vec(),
            before,
            len,
        }
    }

    /// Number of addresses.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True when `a` is an outside address.
    #[inline(always)]
    pub fn contains(&self, a: u32) -> bool {
        a & self.first.1 == self.first.0 || self.rest.iter().any(|&(b, m)| a & m == b)
    }

    /// The index of outside address `a` (0..len), if it is one.
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

    /// The outside address paired with inside address `inside`, and its index.
    #[inline]
    pub fn paired(&self, inside: u32) -> (u32, u32) {
        let i = if self.len == 1 {
            0
        } else {
            let h = hash_key(&FlowKey::new(inside, 0, 0, 0, 0), PAIR_SEED);
            ((u128::from(h) * u128::from(self.len)) >> 64) as u32
        };
        (self.address(i), i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_addresses_across_prefixes() {
        let p = AddressPool::new(&[(0xc000_0200, u32::MAX << 2), (0x0a00_0001, u32::MAX)]);
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
        assert_eq!(p.index_of(0x0a00_0002), None);
    }

    #[test]
    fn pairing_is_stable_and_spreads() {
        let p = AddressPool::new(&[(0xc000_0200, u32::MAX << 4)]);
        let mut counts = [0u32; 16];
        for s in 0..16_000u32 {
            let (a, i) = p.paired(0x6440_0000 + s);
            assert_eq!(p.paired(0x6440_0000 + s), (a, i), "a pure function");
            assert_eq!(p.address(i), a);
            counts[i as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
