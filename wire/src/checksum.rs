//! The Internet checksum (RFC 1071): the one's-complement sum, the IPv4 header, TCP/UDP over the
//! IPv4 pseudo-header and ICMP checksums, and RFC 1624 incremental updates.
//!
//! # Why incremental checksums
//!
//! In the split datapath modes the header segment holds only the first `split_offset` bytes
//! (64 B by default) and the payload may sit in on-NIC memory, which the CPU can read only
//! through a counted, very slow path. A TCP/UDP checksum covers the whole payload, so a full
//! recompute would pull every payload across PCIe and defeat the design. The data path
//! therefore only ever updates checksums incrementally: HC' = ~(~HC + ~m + m') (RFC 1624 eqn. 3)
//! for every changed 16-bit word, summed into one [`CsumDelta`] that can be precomputed per flow
//! (as VPP does) and negated for the reverse direction. Eqn. 3 never turns a valid checksum into
//! the "negative zero" 0xFFFF that RFC 1141's form produces. UDP's "no checksum" value 0 is kept
//! (see [`CsumDelta::apply_udp`]) and a computed 0 is sent as 0xFFFF (RFC 768,
//! [`crate::udp::udp_checksum_ipv4`]).
//!
//! [`fold`] is four unconditional folds rather than a loop: the loop's trip count depends on the
//! carries of each sum, a branch the CPU mispredicts on the per-frame path of a generator.

use crate::field::read_u16;

/// Adds `data` as big-endian 16-bit words (an odd last byte padded with zero) to `acc` without
/// folding. Fold the result with [`fold`]. The accumulator is 64 bits wide so inputs of any
/// realistic size cannot overflow it.
pub fn ones_sum(data: &[u8], mut acc: u64) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        // Four big-endian words at once; the u64 accumulator absorbs the carries.
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        acc += (w >> 48) + ((w >> 32) & 0xFFFF) + ((w >> 16) & 0xFFFF) + (w & 0xFFFF);
    }
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a one's-complement accumulator to 16 bits with end-around carry. The result is 0 only if
/// the accumulator was 0.
#[inline(always)]
pub fn fold(mut acc: u64) -> u16 {
    acc = (acc & 0xFFFF_FFFF) + (acc >> 32);
    acc = (acc & 0xFFFF) + (acc >> 16);
    acc = (acc & 0xFFFF) + (acc >> 16);
    acc = (acc & 0xFFFF) + (acc >> 16);
    acc as u16
}

/// The checksum field value for a one's-complement sum whose checksum field was taken as zero:
/// the folded sum, complemented.
#[inline(always)]
pub fn finish(acc: u64) -> u16 {
    !fold(acc)
}

/// The IPv4 header checksum of `hdr` (the whole header including options), computed with the
/// checksum field taken as zero. Store it as is.
pub fn ipv4_header_checksum(hdr: &[u8]) -> u16 {
    let acc = ones_sum(hdr, 0) - u64::from(read_u16(hdr, 10));
    !fold(acc)
}

/// The TCP/UDP checksum over the IPv4 pseudo-header and the whole L4 segment `l4` (header and
/// payload), with the checksum field (at `csum_off` within `l4`) taken as zero. For UDP, a result
/// of 0 must be transmitted as 0xFFFF (see [`crate::udp::udp_checksum_ipv4`]).
pub fn ipv4_l4_checksum(src: u32, dst: u32, proto: u8, l4: &[u8], csum_off: usize) -> u16 {
    let mut acc = pseudo_header_sum(src, dst, proto, l4.len());
    acc += ones_sum(l4, 0);
    if csum_off + 2 <= l4.len() {
        acc -= u64::from(read_u16(l4, csum_off));
    }
    !fold(acc)
}

/// The ICMP checksum over the whole ICMP message (no pseudo-header in ICMPv4).
pub fn icmp_checksum(icmp: &[u8]) -> u16 {
    let mut acc = ones_sum(icmp, 0);
    if icmp.len() >= 4 {
        acc -= u64::from(read_u16(icmp, 2));
    }
    !fold(acc)
}

/// Sum of the IPv4 pseudo-header (source, destination, protocol, L4 length).
#[inline]
pub fn pseudo_header_sum(src: u32, dst: u32, proto: u8, l4_len: usize) -> u64 {
    u64::from(src >> 16)
        + u64::from(src & 0xFFFF)
        + u64::from(dst >> 16)
        + u64::from(dst & 0xFFFF)
        + u64::from(proto)
        + l4_len as u64
}

/// True if a region whose checksum field is included sums to 0xFFFF (the receiver's check).
#[inline]
pub fn sum_is_valid(acc: u64) -> bool {
    fold(acc) == 0xFFFF
}

/// RFC 1624 eqn. 3 for one changed 16-bit word: the new checksum after `old` became `new`.
/// Unchanged words are skipped (RFC 1624 erratum 4782: the equation would turn 0x0000 into
/// 0xFFFF).
#[inline(always)]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    if old == new {
        return hc;
    }
    !fold(u64::from(!hc) + u64::from(!old) + u64::from(new))
}

/// RFC 1624 eqn. 3 for one changed 32-bit field (two words), e.g. an IPv4 address.
#[inline(always)]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    if old == new {
        return hc;
    }
    let mut d = CsumDelta::default();
    d.add32(old, new);
    d.apply(hc)
}

/// An accumulated checksum change: the one's-complement sum of `~m + m'` over every changed
/// 16-bit word. Precompute it once per flow, apply it to each packet's checksum with
/// [`CsumDelta::apply`], and use [`CsumDelta::negate`] for the reverse translation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CsumDelta(u32);

impl CsumDelta {
    /// The delta for no change.
    pub const ZERO: CsumDelta = CsumDelta(0);

    /// Records that a 16-bit word changed from `old` to `new`.
    #[inline(always)]
    pub fn add16(&mut self, old: u16, new: u16) {
        if old != new {
            self.0 = u32::from(fold(u64::from(self.0) + u64::from(!old) + u64::from(new)));
        }
    }

    /// Records that a 32-bit field (two words) changed from `old` to `new`.
    #[inline(always)]
    pub fn add32(&mut self, old: u32, new: u32) {
        self.add16((old >> 16) as u16, (new >> 16) as u16);
        self.add16(old as u16, new as u16);
    }

    /// Adds another delta (both changes happen).
    #[inline(always)]
    pub fn combine(self, other: CsumDelta) -> CsumDelta {
        CsumDelta(u32::from(fold(u64::from(self.0) + u64::from(other.0))))
    }

    /// The delta of the reverse change (new back to old): the one's-complement negation.
    #[inline(always)]
    pub fn negate(self) -> CsumDelta {
        if self.0 == 0 {
            CsumDelta(0)
        } else {
            CsumDelta(u32::from(!(self.0 as u16)))
        }
    }

    /// The folded 16-bit value of the delta (for storage in compact per-flow state).
    #[inline(always)]
    pub fn raw(self) -> u16 {
        self.0 as u16
    }

    /// Rebuilds a delta from [`CsumDelta::raw`].
    #[inline(always)]
    pub fn from_raw(v: u16) -> CsumDelta {
        CsumDelta(u32::from(v))
    }

    /// Applies the delta to checksum `hc` (RFC 1624 eqn. 3). A zero delta leaves `hc` unchanged.
    #[inline(always)]
    pub fn apply(self, hc: u16) -> u16 {
        if self.0 == 0 {
            return hc;
        }
        !fold(u64::from(!hc) + u64::from(self.0))
    }

    /// Applies the delta to a UDP checksum: 0 ("no checksum") stays 0, and a result of 0 is
    /// written as 0xFFFF (RFC 768).
    #[inline(always)]
    pub fn apply_udp(self, hc: u16) -> u16 {
        if hc == 0 {
            return 0;
        }
        match self.apply(hc) {
            0 => 0xFFFF,
            c => c,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::{Ipv4View, PROTO_UDP};

    /// A textbook IPv4 header (from the Wikipedia/RFC 1071 style example) with its checksum.
    const IP_EXAMPLE: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    #[test]
    fn ipv4_checksum_known_value() {
        assert_eq!(ipv4_header_checksum(&IP_EXAMPLE), 0xb861);
        let v = Ipv4View::new_checked(&IP_EXAMPLE[..]).unwrap();
        assert!(v.checksum_valid());
        assert_eq!(v.src(), 0xc0a8_0001);
        assert_eq!(v.dst(), 0xc0a8_00c7);
        assert_eq!(v.protocol(), PROTO_UDP);
        assert_eq!(v.header_len(), 20);
    }

    #[test]
    fn incremental_matches_full_recompute() {
        let mut h = IP_EXAMPLE;
        {
            let mut v = Ipv4View::new_checked(&mut h[..]).unwrap();
            v.set_src(0x0a00_0001);
            v.set_dst(0xffff_0000);
            v.set_ttl(1);
        }
        assert_eq!(read_u16(&h, 10), ipv4_header_checksum(&h));
    }

    #[test]
    fn rfc1624_example_no_negative_zero() {
        // RFC 1624 section 4: HC = 0xDD2F, m = 0x5555 -> m' = 0x3285 gives HC' = 0x0000 with
        // eqn. 3 (RFC 1141's form gives 0xFFFF).
        assert_eq!(update16(0xDD2F, 0x5555, 0x3285), 0x0000);
        // Unchanged word: checksum untouched, even 0x0000 (erratum 4782).
        assert_eq!(update16(0x0000, 0x1234, 0x1234), 0x0000);
    }

    #[test]
    fn delta_negate_round_trips() {
        let mut d = CsumDelta::default();
        d.add32(0xc0a8_0001, 0x0a00_0001);
        d.add16(1234, 40000);
        let hc = 0x1234;
        let there = d.apply(hc);
        assert_ne!(there, hc);
        assert_eq!(d.negate().apply(there), hc);
        assert_eq!(CsumDelta::ZERO.apply(0xabcd), 0xabcd);
    }

    #[test]
    fn udp_zero_checksum_stays_zero_and_zero_result_is_ffff() {
        let mut d = CsumDelta::default();
        d.add16(1, 2);
        assert_eq!(d.apply_udp(0), 0);
        // Find an hc that maps to 0 under d: apply() == 0 iff ~hc + d == 0xFFFF.
        let hc = !(0xFFFFu16 - d.raw());
        assert_eq!(d.apply(hc), 0);
        assert_eq!(d.apply_udp(hc), 0xFFFF);
    }

    #[test]
    fn ones_sum_odd_lengths() {
        assert_eq!(fold(ones_sum(&[0x12], 0)), 0x1200);
        assert_eq!(fold(ones_sum(&[0x12, 0x34, 0x56], 0)), 0x1234 + 0x5600);
        let data: Vec<u8> = (0..=255u8).cycle().take(1001).collect();
        // Word-at-a-time reference.
        let mut acc = 0u64;
        for w in data.chunks(2) {
            acc += u64::from(w[0]) << 8 | u64::from(*w.get(1).unwrap_or(&0));
        }
        assert_eq!(fold(ones_sum(&data, 0)), fold(acc));
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2 (folded).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(ones_sum(&data, 0)), 0xddf2);
        assert_eq!(ones_sum(&[0x12], 0), 0x1200);
    }

    #[test]
    fn branchless_fold_equals_the_folding_loop() {
        fn looped(mut sum: u64) -> u16 {
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            sum as u16
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let edges = [
            0,
            1,
            0xfffe,
            0xffff,
            0x1_0000,
            0x1_fffe,
            0xffff_ffff,
            u64::MAX,
            1 << 48,
        ];
        for v in edges.into_iter().chain((0..100_000).map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 2 == 0 {
                x >> (i % 64)
            } else {
                x & 0x3f_ffff
            }
        })) {
            assert_eq!(fold(v), looped(v), "{v:#x}");
        }
    }
}
