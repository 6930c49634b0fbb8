//! The one-pass classifier every network function runs first: it walks Ethernet II (with at most
//! one 802.1Q tag), IPv4 and the first bytes of TCP/UDP/ICMP and returns the offsets and fields
//! the functions need ([`Parsed`]), or why it could not ([`ParseError`]).
//!
//! # Lengths
//!
//! [`parse`] checks IPv4 total length and UDP length against the *frame* length, never against
//! the header segment (the mistake FastClick had to undo). Bytes that exist in the frame but not
//! in the header segment are reported as [`ParseError::SegmentShort`], distinct from a frame that
//! is really too short ([`ParseError::Truncated`]).

use crate::checksum::{ones_sum, pseudo_header_sum, sum_is_valid};
use crate::ethernet::{ETH_HLEN, ETHERTYPE_IPV4, ETHERTYPE_VLAN, VLAN_HLEN};
use crate::field::{read_u16, read_u32};
use crate::icmpv4::{ICMP_HLEN, icmp_is_query};
use crate::ipv4::{IPV4_HLEN, PROTO_ICMP, PROTO_TCP, PROTO_UDP};
use crate::tcp::TCP_HLEN;
use crate::udp::UDP_HLEN;

/// Why [`parse`] could not classify a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The frame is shorter than the headers it claims.
    Truncated,
    /// The frame holds the header bytes but the header segment does not (split offset too small
    /// for these headers, e.g. IPv4 options with a short split): dropped as truncated and counted
    /// as `header_segment_short`.
    SegmentShort,
    /// A header field is invalid (IPv4 version/IHL/total length, TCP data offset, UDP length).
    Malformed,
    /// Not IPv4 over Ethernet II (or more than one VLAN tag).
    NotIpv4,
}

/// Fragment status of an IPv4 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frag {
    /// Not fragmented.
    None,
    /// First fragment (offset 0, more-fragments set): carries the L4 header.
    First,
    /// A later fragment (offset > 0): no L4 header.
    Later,
}

/// The L4 part of a classified packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// TCP: ports and flags.
    Tcp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Flags byte.
        flags: u8,
    },
    /// UDP: ports and whether the checksum field is 0 ("none").
    Udp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
    },
    /// ICMP: type, code and the identifier bytes (meaningful for queries only).
    Icmp {
        /// Message type.
        ty: u8,
        /// Code.
        code: u8,
        /// Identifier (bytes 4-5).
        ident: u16,
    },
    /// Another protocol, or a later fragment: only the IP header is known.
    Other,
}

/// What [`parse`] found: offsets within the header segment and the fields NFs key on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Offset of the IPv4 header (14, or 18 with a VLAN tag).
    pub l3: usize,
    /// IPv4 header length in bytes (20 without options).
    pub ihl: usize,
    /// Offset of the L4 header (`l3 + ihl`).
    pub l4: usize,
    /// IPv4 total length.
    pub total_len: u16,
    /// L4 protocol number.
    pub proto: u8,
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// TTL.
    pub ttl: u8,
    /// Fragment status.
    pub frag: Frag,
    /// L4 fields.
    pub l4info: L4,
}

impl Parsed {
    /// Source and destination ports for flow keys: TCP/UDP ports, the ICMP query identifier as
    /// the source "port", and zeros otherwise.
    #[inline]
    pub fn ports(&self) -> (u16, u16) {
        match self.l4info {
            L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport } => (sport, dport),
            L4::Icmp { ty, ident, .. } if icmp_is_query(ty) => (ident, 0),
            _ => (0, 0),
        }
    }
}

#[inline(always)]
fn need(hdr_len: usize, frame_len: usize, end: usize) -> Result<(), ParseError> {
    if end > frame_len {
        Err(ParseError::Truncated)
    } else if end > hdr_len {
        Err(ParseError::SegmentShort)
    } else {
        Ok(())
    }
}

/// Classifies a packet from its header segment `h` and its whole frame length.
///
/// Checks, in order: Ethernet II (one optional 802.1Q tag) carrying IPv4; version 4; IHL >= 5;
/// total length >= IHL and within the frame; the IPv4 header (with options) and the first bytes of
/// TCP (20 B, data offset >= 5), UDP (8 B, length >= 8 and within the datagram unless it is a
/// first fragment) or ICMP (8 B) inside both the datagram and the header segment. Later
/// fragments stop after the IP header ([`Frag::Later`], [`L4::Other`]). Ethernet padding after
/// the datagram is allowed. Never panics.
///
/// Always inlined: on a per-packet path the result's fields then stay in registers instead of
/// going through a 40 B `Result` in memory, and the checks the caller repeats fold away (the
/// NAT's warm path, which calls it from several places, pays about 50 instructions per packet
/// more when it is a call).
#[inline(always)]
pub fn parse(h: &[u8], frame_len: usize) -> Result<Parsed, ParseError> {
    let hl = h.len();
    need(hl, frame_len, ETH_HLEN)?;
    let mut et = read_u16(h, 12);
    let mut l3 = ETH_HLEN;
    if et == ETHERTYPE_VLAN {
        need(hl, frame_len, ETH_HLEN + VLAN_HLEN)?;
        et = read_u16(h, 16);
        l3 = ETH_HLEN + VLAN_HLEN;
    }
    if et != ETHERTYPE_IPV4 {
        return Err(ParseError::NotIpv4);
    }
    need(hl, frame_len, l3 + IPV4_HLEN)?;
    let ip = &h[l3..];
    let vihl = ip[0];
    if vihl >> 4 != 4 {
        return Err(ParseError::Malformed);
    }
    let ihl = usize::from(vihl & 0x0F) * 4;
    if ihl < IPV4_HLEN {
        return Err(ParseError::Malformed);
    }
    let total_len = read_u16(ip, 2);
    let tl = usize::from(total_len);
    if tl < ihl {
        return Err(ParseError::Malformed);
    }
    let dgram_end = l3 + tl;
    if dgram_end > frame_len {
        return Err(ParseError::Truncated);
    }
    let l4 = l3 + ihl;
    need(hl, frame_len, l4)?;
    let fragw = read_u16(ip, 6);
    let frag = if fragw & 0x1FFF != 0 {
        Frag::Later
    } else if fragw & 0x2000 != 0 {
        Frag::First
    } else {
        Frag::None
    };
    let proto = ip[9];
    let src = read_u32(ip, 12);
    let dst = read_u32(ip, 16);
    let ttl = ip[8];
    let l4info = if frag == Frag::Later {
        L4::Other
    } else {
        match proto {
            PROTO_TCP => {
                if l4 + TCP_HLEN > dgram_end {
                    return Err(ParseError::Truncated);
                }
                need(hl, frame_len, l4 + TCP_HLEN)?;
                let t = &h[l4..l4 + TCP_HLEN];
                if t[12] >> 4 < 5 {
                    return Err(ParseError::Malformed);
                }
                L4::Tcp {
                    sport: read_u16(t, 0),
                    dport: read_u16(t, 2),
                    flags: t[13],
                }
            }
            PROTO_UDP => {
                if l4 + UDP_HLEN > dgram_end {
                    return Err(ParseError::Truncated);
                }
                need(hl, frame_len, l4 + UDP_HLEN)?;
                let u = &h[l4..l4 + UDP_HLEN];
                let ulen = usize::from(read_u16(u, 4));
                if ulen < UDP_HLEN || (frag == Frag::None && ulen > tl - ihl) {
                    return Err(ParseError::Malformed);
                }
                L4::Udp {
                    sport: read_u16(u, 0),
                    dport: read_u16(u, 2),
                }
            }
            PROTO_ICMP => {
                if l4 + ICMP_HLEN > dgram_end {
                    return Err(ParseError::Truncated);
                }
                need(hl, frame_len, l4 + ICMP_HLEN)?;
                let c = &h[l4..l4 + ICMP_HLEN];
                L4::Icmp {
                    ty: c[0],
                    code: c[1],
                    ident: read_u16(c, 4),
                }
            }
            _ => L4::Other,
        }
    };
    Ok(Parsed {
        l3,
        ihl,
        l4,
        total_len,
        proto,
        src,
        dst,
        ttl,
        frag,
        l4info,
    })
}

/// Verifies every checksum of a whole frame (IPv4 header; TCP/UDP/ICMP over the whole datagram)
/// by full recomputation. For the debug `verify_checksums` option and for tests: it needs the
/// full frame (see `copy_frame` of the dataplane's bursts, the counted slow path for nicmem payloads).
/// Fragments and unknown protocols only get the IP header checked. Returns `Ok(())` or the name
/// of the first bad checksum.
pub fn verify_frame_checksums(frame: &[u8]) -> Result<(), &'static str> {
    let p = parse(frame, frame.len()).map_err(|_| "unparseable")?;
    let ip = &frame[p.l3..p.l3 + p.ihl];
    if !sum_is_valid(ones_sum(ip, 0)) {
        return Err("ipv4");
    }
    if p.frag != Frag::None {
        return Ok(());
    }
    let seg = &frame[p.l4..p.l3 + usize::from(p.total_len)];
    let (ok, name) = match p.proto {
        PROTO_TCP => (
            sum_is_valid(pseudo_header_sum(p.src, p.dst, PROTO_TCP, seg.len()) + ones_sum(seg, 0)),
            "tcp",
        ),
        PROTO_UDP => (
            read_u16(seg, 6) == 0
                || sum_is_valid(
                    pseudo_header_sum(p.src, p.dst, PROTO_UDP, seg.len()) + ones_sum(seg, 0),
                ),
            "udp",
        ),
        PROTO_ICMP => (sum_is_valid(ones_sum(seg, 0)), "icmp"),
        _ => (true, ""),
    };
    if ok { Ok(()) } else { Err(name) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::ipv4_header_checksum;
    use crate::ethernet::EthernetView;
    use crate::udp::udp_checksum_ipv4;

    fn frame(ethertype: u16, ip: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(ip);
        f
    }

    fn ip_udp(total: u16, ulen: u16) -> Vec<u8> {
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, PROTO_UDP, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e]);
        ip.extend_from_slice(&ulen.to_be_bytes());
        ip.extend_from_slice(&[0, 0]);
        ip.resize(usize::from(total).max(28), 0);
        ip
    }

    #[test]
    fn parse_udp_and_errors() {
        let f = frame(ETHERTYPE_IPV4, &ip_udp(28, 8));
        let p = parse(&f, f.len()).unwrap();
        assert_eq!((p.l3, p.l4, p.proto), (14, 34, PROTO_UDP));
        assert_eq!(p.ports(), (1234, 5678));
        assert_eq!(p.src, 0x0102_0304);
        // Header segment shorter than the UDP header but the frame is long enough.
        assert_eq!(parse(&f[..40], f.len()), Err(ParseError::SegmentShort));
        // Frame really too short.
        assert_eq!(parse(&f[..40], 40), Err(ParseError::Truncated));
        // Total length beyond the frame.
        let f2 = frame(ETHERTYPE_IPV4, &ip_udp(28, 8)[..]);
        let mut g = f2.clone();
        g[16..18].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(parse(&g, g.len()), Err(ParseError::Truncated));
        // UDP length larger than the datagram.
        let f3 = frame(ETHERTYPE_IPV4, &ip_udp(28, 9));
        assert_eq!(parse(&f3, f3.len()), Err(ParseError::Malformed));
        // Non-IPv4.
        let f4 = frame(0x86dd, &ip_udp(28, 8));
        assert_eq!(parse(&f4, f4.len()), Err(ParseError::NotIpv4));
        // Bad IHL.
        let mut f5 = f.clone();
        f5[14] = 0x44;
        assert_eq!(parse(&f5, f5.len()), Err(ParseError::Malformed));
        // Version 6 in an IPv4 EtherType.
        f5[14] = 0x65;
        assert_eq!(parse(&f5, f5.len()), Err(ParseError::Malformed));
        // Length checks use the frame, never the header segment: a 64 B header segment of a
        // 1000 B datagram parses fine.
        let big = frame(ETHERTYPE_IPV4, &ip_udp(1000, 980));
        assert!(parse(&big[..64], big.len()).is_ok());
    }

    #[test]
    fn parse_vlan_and_fragments() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        f.extend_from_slice(&[0x00, 0x07]);
        f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f.extend_from_slice(&ip_udp(28, 8));
        let p = parse(&f, f.len()).unwrap();
        assert_eq!(p.l3, 18);
        let v = EthernetView::new_checked(&f[..]).unwrap();
        assert_eq!(v.vlan_id(), Some(7));
        assert_eq!(v.l3_offset(), Some((ETHERTYPE_IPV4, 18)));

        let mut g = frame(ETHERTYPE_IPV4, &ip_udp(28, 8));
        g[20] = 0x20; // MF, offset 0
        assert_eq!(parse(&g, g.len()).unwrap().frag, Frag::First);
        g[21] = 0x01; // offset 1
        let p = parse(&g, g.len()).unwrap();
        assert_eq!((p.frag, p.l4info), (Frag::Later, L4::Other));
    }

    #[test]
    fn verify_frame_detects_corruption() {
        let mut ip = ip_udp(36, 16);
        ip[28..36].copy_from_slice(b"payload!");
        let c = ipv4_header_checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let uc = udp_checksum_ipv4(0x0102_0304, 0x0506_0708, &ip[20..]);
        ip[26..28].copy_from_slice(&uc.to_be_bytes());
        let mut f = frame(ETHERTYPE_IPV4, &ip);
        assert_eq!(verify_frame_checksums(&f), Ok(()));
        f[44] ^= 1;
        assert_eq!(verify_frame_checksums(&f), Err("udp"));
        f[44] ^= 1;
        f[22] ^= 1;
        assert_eq!(verify_frame_checksums(&f), Err("ipv4"));
    }
}
