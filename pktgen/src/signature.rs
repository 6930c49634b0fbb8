//! The test payload every generated frame carries, and the parser that finds it again.
//!
//! Right after the L4 header (UDP 8 B, TCP 20 B or more) sits a 16-byte [`Signature`], in one
//! of two versions told apart by the magic:
//!
//! ```text
//! offset  size  v1 "NM" (untimed)                 v2 "NT" (timestamped)
//!      0     2  magic 0x4E4D                      magic 0x4E54
//!      2     2  stream id                         stream id
//!      4     4  flow id (5-tuple index)           flow id
//!      8     4  sequence number, high 32 bits     departure time, ns mod 2^32
//!     12     4  sequence number, low 32 bits      sequence number mod 2^32
//! ```
//!
//! all big-endian. **Why v2 truncates instead of growing**: a 64 B UDP frame has exactly 18 bytes
//! after its headers, so a timestamp cannot be added without dropping something; a 20- or 24-byte
//! signature would push the RFC 2544 minimum frame out. Both truncated fields are recovered
//! exactly by the receiver: the sequence number is unwrapped against the stream's highest
//! number seen (exact while reordering stays below 2^31 frames, far beyond the 16 Ki reorder
//! window), and the departure time against the receive time (exact while the one-way latency is
//! below 2^32 ns = 4.29 s). This is the wrap-around trick of TCP timestamps and PTP. It fits the minimum frame: 60 B without FCS = 14 Ethernet + 20 IPv4 + 8 UDP +
//! 16 signature + 2 pattern bytes. The bytes after the signature, up to the end of the IPv4
//! packet, are `PATTERN[seq % 251 ..][..len]`: a slice of a fixed pseudo-random table that starts
//! at an offset depending on the sequence number. A payload that is corrupted, shifted, cut
//! short, or paired with another frame's signature is therefore detected by one `memcmp` against
//! the table (payloads of frames whose sequence numbers differ by a multiple of 251 are equal, so
//! swapping the *tails* of exactly such frames is the one case not caught). Because 251 is prime,
//! a single flipped bit in the sequence number always moves the pattern offset, so it shows up as
//! a payload mismatch as well.
//!
//! The table is computed at compile time (a `const fn` xorshift from a fixed seed) rather than at
//! start-up: same bytes in every build, no initialisation order, no lazy-static check on the hot
//! path.
//!
//! [`locate`] finds the signature by walking the headers (Ethernet, at most one 802.1Q/802.1ad tag,
//! IPv4 with its IHL, UDP or TCP with its data offset) instead of assuming fixed offsets, so NFs that
//! rewrite addresses and ports (NAT, LB) or MACs (macswap) do not disturb the check.

use serde::{Deserialize, Serialize};
use wire::ethernet::{ETH_HLEN, ETHERTYPE_IPV4, ETHERTYPE_QINQ, ETHERTYPE_VLAN, VLAN_HLEN};
use wire::ipv4::{IPV4_HLEN, PROTO_TCP, PROTO_UDP};
use wire::tcp::TCP_HLEN;
use wire::udp::UDP_HLEN;

/// First two bytes of every untimed (v1) signature: "NM".
pub const SIGNATURE_MAGIC: u16 = 0x4E4D;
/// First two bytes of every timestamped (v2) signature: "NT".
pub const SIGNATURE_MAGIC_TS: u16 = 0x4E54;
/// Size of the signature.
pub const SIGNATURE_LEN: usize = 16;
/// The pattern offset is `seq % PATTERN_PERIOD`; prime so that no power-of-two change of the
/// sequence number leaves the offset unchanged.
pub const PATTERN_PERIOD: u64 = 251;
/// Size of the pattern table: the largest payload plus the largest offset, rounded up.
pub const PATTERN_LEN: usize = 16 * 1024 + 256;
/// The longest pattern region a frame can carry.
pub const MAX_PATTERN_REGION: usize = PATTERN_LEN - (PATTERN_PERIOD as usize - 1);

const PATTERN_SEED: u64 = 0x6e6d_6470_2d70_6174; // "nmdp-pat"

const fn make_pattern() -> [u8; PATTERN_LEN] {
    let mut out = [0u8; PATTERN_LEN];
    let mut x = PATTERN_SEED;
    let mut i = 0;
    while i < PATTERN_LEN {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out[i] = (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8;
        i += 1;
    }
    out
}

/// The pattern table the payload after the signature is cut from.
pub static PATTERN: [u8; PATTERN_LEN] = make_pattern();

/// The pattern bytes a frame with sequence number `seq` carries after its signature, or `None`
/// if `len` exceeds [`MAX_PATTERN_REGION`].
#[inline]
pub fn pattern(seq: u64, len: usize) -> Option<&'static [u8]> {
    PATTERN.get((seq % PATTERN_PERIOD) as usize..)?.get(..len)
}

/// True if `region` is exactly what a frame with sequence number `seq` carries after its
/// signature.
#[inline]
pub fn pattern_matches(seq: u64, region: &[u8]) -> bool {
    let Some(want) = pattern(seq, region.len()) else {
        return false;
    };
    if region.len() <= 16 {
        // Short regions (minimum-size frames carry 2 bytes): an inline loop beats a memcmp call.
        region.iter().zip(want).all(|(a, b)| a == b)
    } else {
        region == want
    }
}

/// The transport protocol of generated frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum L4Proto {
    /// UDP (8-byte header).
    #[default]
    Udp,
    /// TCP (20-byte header, no options).
    Tcp,
}

impl L4Proto {
    /// The IP protocol number.
    pub fn ip_proto(self) -> u8 {
        match self {
            Self::Udp => PROTO_UDP,
            Self::Tcp => PROTO_TCP,
        }
    }

    /// The header length the generator writes.
    pub fn header_len(self) -> usize {
        match self {
            Self::Udp => UDP_HLEN,
            Self::Tcp => TCP_HLEN,
        }
    }
}

/// The identifying part of the test payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Signature {
    /// Which generator stream sent the frame.
    pub stream: u16,
    /// Which flow (5-tuple index) of that stream.
    pub flow: u32,
    /// Sequence number within the stream, from 0. A decoded v2 signature carries only the low
    /// 32 bits here (see [`unwrap_seq`]).
    pub seq: u64,
    /// Departure time in ns modulo 2^32 (v2 only; `None` encodes a v1 signature). See
    /// [`unwrap_time`].
    pub ts: Option<u32>,
}

impl Signature {
    /// The 16 wire bytes.
    #[inline]
    pub fn encode(&self) -> [u8; SIGNATURE_LEN] {
        let mut b = [0u8; SIGNATURE_LEN];
        b[2..4].copy_from_slice(&self.stream.to_be_bytes());
        b[4..8].copy_from_slice(&self.flow.to_be_bytes());
        match self.ts {
            None => {
                b[0..2].copy_from_slice(&SIGNATURE_MAGIC.to_be_bytes());
                b[8..16].copy_from_slice(&self.seq.to_be_bytes());
            }
            Some(ts) => {
                b[0..2].copy_from_slice(&SIGNATURE_MAGIC_TS.to_be_bytes());
                b[8..12].copy_from_slice(&ts.to_be_bytes());
                b[12..16].copy_from_slice(&(self.seq as u32).to_be_bytes());
            }
        }
        b
    }

    /// Reads a signature from the first 16 bytes of `b`; `None` if too short or the magic is
    /// wrong.
    #[inline]
    pub fn decode(b: &[u8]) -> Option<Self> {
        let b: &[u8; SIGNATURE_LEN] = b.get(..SIGNATURE_LEN)?.try_into().ok()?;
        let stream = u16::from_be_bytes([b[2], b[3]]);
        let flow = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        match u16::from_be_bytes([b[0], b[1]]) {
            SIGNATURE_MAGIC => Some(Self {
                stream,
                flow,
                seq: u64::from_be_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
                ts: None,
            }),
            SIGNATURE_MAGIC_TS => Some(Self {
                stream,
                flow,
                seq: u64::from(u32::from_be_bytes([b[12], b[13], b[14], b[15]])),
                ts: Some(u32::from_be_bytes([b[8], b[9], b[10], b[11]])),
            }),
            _ => None,
        }
    }
}

/// The full sequence number whose low 32 bits are `low`, nearest to `expected` (the stream's
/// next expected number): exact while the true number is within 2^31 of `expected`.
#[inline]
pub fn unwrap_seq(low: u32, expected: u64) -> u64 {
    let delta = low.wrapping_sub(expected as u32) as i32;
    match expected.checked_add_signed(i64::from(delta)) {
        Some(v) => v,
        // Near the start of a stream there is nothing below 0 to wrap back to.
        None => expected
            .wrapping_add_signed(i64::from(delta))
            .wrapping_add(1 << 32),
    }
}

/// The full departure time (ns) whose low 32 bits are `low`, given the receive time `rx_ns`:
/// the latest time not after `rx_ns` with those low bits (exact for latencies below 2^32 ns).
#[inline]
pub fn unwrap_time(low: u32, rx_ns: u64) -> u64 {
    let back = (rx_ns as u32).wrapping_sub(low);
    rx_ns.wrapping_sub(u64::from(back))
}

/// Where the headers and the signature of a frame are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located {
    /// Offset of the IPv4 header.
    pub l3_offset: usize,
    /// Offset of the UDP/TCP header.
    pub l4_offset: usize,
    /// The transport protocol.
    pub proto: L4Proto,
    /// Offset of the signature (end of the L4 header).
    pub sig_offset: usize,
    /// Where the IPv4 packet ends according to its total-length field; may exceed the frame
    /// length if the frame was truncated, and be shorter if it was padded.
    pub ip_end: usize,
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Walks Ethernet (optionally one VLAN tag), IPv4 and UDP/TCP and returns where the signature
/// would start; `None` if the frame is not an unfragmented (or first-fragment) IPv4 UDP/TCP
/// frame with room for a signature. Does not check the magic.
#[inline]
pub fn locate(frame: &[u8]) -> Option<Located> {
    if frame.len() < ETH_HLEN {
        return None;
    }
    let mut l3 = ETH_HLEN;
    let mut ethertype = be16(frame, 12);
    if ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        if frame.len() < ETH_HLEN + VLAN_HLEN {
            return None;
        }
        ethertype = be16(frame, 16);
        l3 += VLAN_HLEN;
    }
    if ethertype != ETHERTYPE_IPV4 || frame.len() < l3 + IPV4_HLEN {
        return None;
    }
    let ver_ihl = frame[l3];
    let ihl = usize::from(ver_ihl & 0x0f) * 4;
    if ver_ihl >> 4 != 4 || ihl < IPV4_HLEN {
        return None;
    }
    // A non-first fragment has no L4 header.
    if be16(frame, l3 + 6) & 0x1fff != 0 {
        return None;
    }
    let l4 = l3 + ihl;
    let (proto, l4_len) = match frame[l3 + 9] {
        PROTO_UDP => (L4Proto::Udp, UDP_HLEN),
        PROTO_TCP => {
            let off = usize::from(*frame.get(l4 + 12)? >> 4) * 4;
            if off < TCP_HLEN {
                return None;
            }
            (L4Proto::Tcp, off)
        }
        _ => return None,
    };
    let sig = l4 + l4_len;
    if frame.len() < sig + SIGNATURE_LEN {
        return None;
    }
    Some(Located {
        l3_offset: l3,
        l4_offset: l4,
        proto,
        sig_offset: sig,
        ip_end: l3 + usize::from(be16(frame, l3 + 2)),
    })
}

/// Finds and decodes the signature of `frame`; `None` if the frame is not one of ours.
#[inline]
pub fn parse(frame: &[u8]) -> Option<(Signature, Located)> {
    let loc = locate(frame)?;
    let sig = Signature::decode(&frame[loc.sig_offset..])?;
    Some((sig, loc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_round_trips_and_rejects_bad_magic() {
        let s = Signature {
            stream: 0xabcd,
            flow: 0x0102_0304,
            seq: 0x1122_3344_5566_7788,
            ts: None,
        };
        let b = s.encode();
        assert_eq!(
            b,
            [
                0x4e, 0x4d, 0xab, 0xcd, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88
            ]
        );
        assert_eq!(Signature::decode(&b), Some(s));
        assert_eq!(Signature::decode(&b[..15]), None);
        let mut bad = b;
        bad[1] ^= 1;
        assert_eq!(Signature::decode(&bad), None);
    }

    #[test]
    fn v2_signature_round_trips_truncated_fields_and_unwraps() {
        let s = Signature {
            stream: 7,
            flow: 99,
            seq: 0x1_0000_0005,
            ts: Some(0xdead_beef),
        };
        let b = s.encode();
        assert_eq!(b[0..2], [0x4e, 0x54]);
        assert_eq!(b[8..12], [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(b[12..16], [0, 0, 0, 5]);
        let d = Signature::decode(&b).unwrap();
        assert_eq!(
            (d.stream, d.flow, d.seq, d.ts),
            (7, 99, 5, Some(0xdead_beef))
        );
        // Sequence unwrapping around the expected number, across the 2^32 boundary.
        assert_eq!(unwrap_seq(5, 0x1_0000_0000), 0x1_0000_0005);
        assert_eq!(unwrap_seq(0xffff_fff0, 0x1_0000_0003), 0xffff_fff0);
        assert_eq!(unwrap_seq(3, 3), 3);
        assert_eq!(unwrap_seq(10, 0), 10);
        assert_eq!(unwrap_seq(0xffff_fffd, 0), 0xffff_fffd);
        assert_eq!(unwrap_seq(0xffff_fffd, 2), 0xffff_fffd);
        // Time unwrapping: departure 5 s before a receive time past several wraps.
        let tx = 3 * (1u64 << 32) + 123_456_789;
        for lat in [0u64, 1, 1_000_000, 4_000_000_000] {
            assert_eq!(unwrap_time(tx as u32, tx + lat), tx, "latency {lat}");
        }
    }

    #[test]
    fn pattern_depends_on_seq_and_is_not_trivial() {
        assert_eq!(pattern(0, 100), pattern(251, 100));
        assert_ne!(pattern(0, 100), pattern(1, 100));
        // A shift by one byte is detected.
        let p = pattern(7, 64).unwrap();
        assert!(!pattern_matches(8, p));
        assert!(pattern_matches(7, p));
        assert!(pattern_matches(7 + 251 * 1000, p));
        // Every seq offset within the period gives a distinct 2-byte prefix for most offsets:
        // enough entropy for the 64 B frame's 2-byte region to catch a wrong seq.
        let distinct: std::collections::HashSet<&[u8]> =
            (0..251).map(|s| pattern(s, 2).unwrap()).collect();
        assert!(distinct.len() > 245, "{}", distinct.len());
        // Byte values are spread.
        let zeros = PATTERN.iter().filter(|&&b| b == 0).count();
        assert!(zeros < PATTERN_LEN / 100, "{zeros}");
        assert!(pattern(250, MAX_PATTERN_REGION).is_some());
        assert!(pattern(250, MAX_PATTERN_REGION + 1).is_none());
    }

    #[test]
    fn single_bit_flips_of_seq_move_the_pattern() {
        for bit in 0..64 {
            let seq = 12_345u64;
            assert_ne!(seq % PATTERN_PERIOD, (seq ^ (1 << bit)) % PATTERN_PERIOD);
        }
    }

    fn udp_frame(vlan: bool, ihl_words: u8) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let l3 = f.len();
        let ihl = usize::from(ihl_words) * 4;
        let total = ihl + 8 + 16 + 4;
        f.push(0x40 | ihl_words);
        f.push(0);
        f.extend_from_slice(&(total as u16).to_be_bytes());
        f.extend_from_slice(&[0; 5]);
        f.push(PROTO_UDP);
        f.resize(l3 + ihl, 0);
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(
            &Signature {
                stream: 3,
                flow: 9,
                seq: 77,
                ts: None,
            }
            .encode(),
        );
        f.extend_from_slice(pattern(77, 4).unwrap());
        f
    }

    #[test]
    fn locate_walks_vlan_and_ip_options() {
        let (s, loc) = parse(&udp_frame(false, 5)).unwrap();
        assert_eq!((s.stream, s.flow, s.seq), (3, 9, 77));
        assert_eq!((loc.l3_offset, loc.l4_offset, loc.sig_offset), (14, 34, 42));
        assert_eq!(loc.ip_end, 14 + 20 + 8 + 16 + 4);

        let (_, loc) = parse(&udp_frame(true, 7)).unwrap();
        assert_eq!((loc.l3_offset, loc.l4_offset, loc.sig_offset), (18, 46, 54));

        // Not IPv4, not UDP/TCP, a later fragment, a bad IHL, too short: not ours.
        let mut f = udp_frame(false, 5);
        f[12] = 0x86;
        assert!(locate(&f).is_none());
        let mut f = udp_frame(false, 5);
        f[14 + 9] = 1;
        assert!(locate(&f).is_none());
        let mut f = udp_frame(false, 5);
        f[14 + 7] = 1;
        assert!(locate(&f).is_none());
        let mut f = udp_frame(false, 5);
        f[14] = 0x44;
        assert!(locate(&f).is_none());
        let f = udp_frame(false, 5);
        assert!(locate(&f[..14 + 20 + 8 + 15]).is_none());
        assert!(locate(&f[..14 + 20 + 8 + 16]).is_some());
        for n in 0..f.len() {
            let _ = parse(&f[..n]);
        }
    }
}
