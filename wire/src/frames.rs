//! Frame builders for tests, benchmarks and fuzzing: Ethernet II (optionally 802.1Q-tagged) /
//! IPv4 (optionally with options) / TCP, UDP or ICMP frames with correct checksums.
//!
//! Not used on the data path. Kept in the library (rather than in `tests/`) so unit tests,
//! integration tests, the criterion benches and the fuzz crate build the same frames. The tests
//! below check what it builds against `etherparse`, an implementation written apart from ours.

use crate::checksum::{icmp_checksum, ipv4_header_checksum, ipv4_l4_checksum};
use crate::ethernet::{ETH_HLEN, ETHERTYPE_IPV4, ETHERTYPE_VLAN, VLAN_HLEN};
use crate::field::{read_u16, write_u16};
use crate::ipv4::{PROTO_ICMP, PROTO_TCP, PROTO_UDP, offset};
use crate::udp::udp_checksum_ipv4;

/// The L4 part of a [`FrameSpec`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L4Spec {
    /// TCP with ports and flags (20-byte header).
    Tcp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Flags byte.
        flags: u8,
    },
    /// UDP with ports; `zero_checksum` sends checksum 0 ("none").
    Udp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Send checksum 0.
        zero_checksum: bool,
    },
    /// An ICMP query (type 8 echo request, 0 echo reply, ...) with identifier and sequence.
    IcmpQuery {
        /// Message type.
        ty: u8,
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq: u16,
    },
    /// An ICMP error (type 3, 11, ...) embedding `inner` (a whole IPv4 packet, as built by
    /// [`FrameSpec::ip_packet`]); the payload of the error is the inner packet's first
    /// `inner_len` bytes.
    IcmpError {
        /// Message type.
        ty: u8,
        /// Code.
        code: u8,
        /// The embedded IPv4 packet.
        inner: Vec<u8>,
        /// How much of it to embed (RFC 792: header + 8 bytes; routers often send more).
        inner_len: usize,
    },
    /// Another protocol number with raw bytes after the IP header.
    Raw {
        /// Protocol number.
        proto: u8,
    },
}

/// A frame description; [`FrameSpec::build`] makes the bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameSpec {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// TTL.
    pub ttl: u8,
    /// IPv4 identification.
    pub ident: u16,
    /// 802.1Q VLAN id, if tagged.
    pub vlan: Option<u16>,
    /// IPv4 options bytes (padded to a multiple of 4 with zeros = end of option list).
    pub ip_options: Vec<u8>,
    /// Flags + fragment offset word (0 = not fragmented; 0x2000 = MF).
    pub frag: u16,
    /// L4 header.
    pub l4: L4Spec,
    /// L4 payload.
    pub payload: Vec<u8>,
    /// Zero bytes appended after the IP datagram (Ethernet padding).
    pub eth_pad: usize,
}

impl FrameSpec {
    /// A UDP frame with `payload_len` bytes of a counting pattern.
    pub fn udp(src: u32, dst: u32, sport: u16, dport: u16, payload_len: usize) -> Self {
        Self {
            src,
            dst,
            ttl: 64,
            ident: 0x1234,
            vlan: None,
            ip_options: vec![],
            frag: 0,
            l4: L4Spec::Udp {
                sport,
                dport,
                zero_checksum: false,
            },
            payload: (0..payload_len).map(|i| i as u8).collect(),
            eth_pad: 0,
        }
    }

    /// A TCP frame with the given flags and `payload_len` bytes of a counting pattern.
    pub fn tcp(src: u32, dst: u32, sport: u16, dport: u16, flags: u8, payload_len: usize) -> Self {
        Self {
            l4: L4Spec::Tcp {
                sport,
                dport,
                flags,
            },
            ..Self::udp(src, dst, 0, 0, payload_len)
        }
    }

    /// An ICMP echo request.
    pub fn echo(src: u32, dst: u32, ident: u16, payload_len: usize) -> Self {
        Self {
            l4: L4Spec::IcmpQuery {
                ty: 8,
                ident,
                seq: 1,
            },
            ..Self::udp(src, dst, 0, 0, payload_len)
        }
    }

    /// The IPv4 protocol number.
    pub fn proto(&self) -> u8 {
        match &self.l4 {
            L4Spec::Tcp { .. } => PROTO_TCP,
            L4Spec::Udp { .. } => PROTO_UDP,
            L4Spec::IcmpQuery { .. } | L4Spec::IcmpError { .. } => PROTO_ICMP,
            L4Spec::Raw { proto } => *proto,
        }
    }

    /// The L4 segment (header + payload) with its checksum filled in.
    fn l4_bytes(&self) -> Vec<u8> {
        let mut l4 = Vec::new();
        match &self.l4 {
            L4Spec::Tcp {
                sport,
                dport,
                flags,
            } => {
                l4.extend_from_slice(&sport.to_be_bytes());
                l4.extend_from_slice(&dport.to_be_bytes());
                l4.extend_from_slice(&0x0102_0304u32.to_be_bytes());
                l4.extend_from_slice(&0x0506_0708u32.to_be_bytes());
                l4.extend_from_slice(&[0x50, *flags, 0xff, 0xff, 0, 0, 0, 0]);
                l4.extend_from_slice(&self.payload);
                let c = ipv4_l4_checksum(self.src, self.dst, PROTO_TCP, &l4, 16);
                l4[16..18].copy_from_slice(&c.to_be_bytes());
            }
            L4Spec::Udp {
                sport,
                dport,
                zero_checksum,
            } => {
                l4.extend_from_slice(&sport.to_be_bytes());
                l4.extend_from_slice(&dport.to_be_bytes());
                let len = (8 + self.payload.len()) as u16;
                l4.extend_from_slice(&len.to_be_bytes());
                l4.extend_from_slice(&[0, 0]);
                l4.extend_from_slice(&self.payload);
                if !zero_checksum {
                    let c = udp_checksum_ipv4(self.src, self.dst, &l4);
                    l4[6..8].copy_from_slice(&c.to_be_bytes());
                }
            }
            L4Spec::IcmpQuery { ty, ident, seq } => {
                l4.extend_from_slice(&[*ty, 0, 0, 0]);
                l4.extend_from_slice(&ident.to_be_bytes());
                l4.extend_from_slice(&seq.to_be_bytes());
                l4.extend_from_slice(&self.payload);
                let c = icmp_checksum(&l4);
                l4[2..4].copy_from_slice(&c.to_be_bytes());
            }
            L4Spec::IcmpError {
                ty,
                code,
                inner,
                inner_len,
            } => {
                l4.extend_from_slice(&[*ty, *code, 0, 0, 0, 0, 0, 0]);
                l4.extend_from_slice(&inner[..(*inner_len).min(inner.len())]);
                l4.extend_from_slice(&self.payload);
                let c = icmp_checksum(&l4);
                l4[2..4].copy_from_slice(&c.to_be_bytes());
            }
            L4Spec::Raw { .. } => l4.extend_from_slice(&self.payload),
        }
        l4
    }

    /// The IPv4 packet (header + L4), without Ethernet.
    pub fn ip_packet(&self) -> Vec<u8> {
        let mut opts = self.ip_options.clone();
        opts.resize(opts.len().div_ceil(4) * 4, 0);
        let opts = &opts[..opts.len().min(40)];
        let ihl = 20 + opts.len();
        let l4 = self.l4_bytes();
        let total = (ihl + l4.len()) as u16;
        let mut ip = vec![0x40 | (ihl / 4) as u8, 0];
        ip.extend_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&self.ident.to_be_bytes());
        ip.extend_from_slice(&self.frag.to_be_bytes());
        ip.extend_from_slice(&[self.ttl, self.proto(), 0, 0]);
        ip.extend_from_slice(&self.src.to_be_bytes());
        ip.extend_from_slice(&self.dst.to_be_bytes());
        ip.extend_from_slice(opts);
        let c = ipv4_header_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip.extend_from_slice(&l4);
        ip
    }

    /// The frame split into IPv4 fragments carrying at most `chunk` bytes of the datagram's
    /// payload each (rounded down to a multiple of 8, at least 8), in order: the first carries
    /// the L4 header; each has its own IPv4 header (more-fragments set on all but the last,
    /// the offset in 8-byte units, the same identification) with its checksum. Options are
    /// copied into every fragment. For tests of virtual reassembly.
    pub fn fragments(&self, chunk: usize) -> Vec<Vec<u8>> {
        let whole = self.build();
        let l3 = ETH_HLEN + if self.vlan.is_some() { VLAN_HLEN } else { 0 };
        let ihl = usize::from(whole[l3 + offset::VER_IHL] & 0x0F) * 4;
        let total = usize::from(read_u16(&whole[l3..], offset::TOTAL_LEN));
        let data = &whole[l3 + ihl..l3 + total];
        let chunk = (chunk / 8).max(1) * 8;
        let mut out = Vec::new();
        let mut off = 0;
        while off < data.len() {
            let end = (off + chunk).min(data.len());
            let mut f = whole[..l3 + ihl].to_vec();
            f.extend_from_slice(&data[off..end]);
            let ip = &mut f[l3..];
            write_u16(ip, offset::TOTAL_LEN, (ihl + end - off) as u16);
            let mf = if end < data.len() { 0x2000 } else { 0 }; // more fragments
            write_u16(ip, offset::FLAGS_FRAG, mf | (off / 8) as u16);
            write_u16(ip, offset::CHECKSUM, 0);
            let c = ipv4_header_checksum(&ip[..ihl]);
            write_u16(ip, offset::CHECKSUM, c);
            out.push(f);
            off = end;
        }
        out
    }

    /// The Ethernet frame (no FCS).
    pub fn build(&self) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
        if let Some(v) = self.vlan {
            f.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
            f.extend_from_slice(&(v & 0x0FFF).to_be_bytes());
        }
        f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f.extend_from_slice(&self.ip_packet());
        f.resize(f.len() + self.eth_pad, 0);
        f
    }
}

/// A 64-byte UDP frame (with 18 B of payload: 14 + 20 + 8 + 18 = 60, plus 4 B FCS on the wire),
/// the paper's smallest size.
pub fn udp64(src: u32, dst: u32, sport: u16, dport: u16) -> Vec<u8> {
    FrameSpec::udp(src, dst, sport, dport, 18).build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::verify_frame_checksums;

    #[test]
    fn built_frames_verify() {
        let mut specs = vec![
            FrameSpec::udp(1, 2, 3, 4, 100),
            FrameSpec::tcp(1, 2, 3, 4, 0x12, 7),
            FrameSpec::echo(1, 2, 77, 56),
        ];
        let mut s = FrameSpec::udp(1, 2, 3, 4, 5);
        s.vlan = Some(10);
        s.ip_options = vec![1, 1, 1, 0];
        s.eth_pad = 6;
        specs.push(s);
        let inner = FrameSpec::udp(2, 1, 4, 3, 10).ip_packet();
        specs.push(FrameSpec {
            l4: L4Spec::IcmpError {
                ty: 3,
                code: 3,
                inner,
                inner_len: 28,
            },
            ..FrameSpec::udp(9, 1, 0, 0, 0)
        });
        for s in specs {
            let f = s.build();
            assert_eq!(verify_frame_checksums(&f), Ok(()), "{s:?}");
        }
        assert_eq!(udp64(1, 2, 3, 4).len(), 60);
    }

    #[test]
    fn fragments_cover_the_datagram() {
        let s = FrameSpec::udp(1, 2, 3, 4, 100);
        let whole = s.build();
        let frags = s.fragments(40);
        assert_eq!(frags.len(), 3, "108 bytes of UDP in 40 + 40 + 28");
        let mut data = Vec::new();
        for (k, f) in frags.iter().enumerate() {
            assert_eq!(verify_frame_checksums(f), Ok(()));
            let word = u16::from_be_bytes([f[20], f[21]]);
            assert_eq!(usize::from(word & 0x1FFF) * 8, data.len());
            assert_eq!(word & 0x2000 != 0, k < 2);
            data.extend_from_slice(&f[34..]);
        }
        assert_eq!(data, whole[34..]);
    }

    /// etherparse, an implementation written apart from ours, reads the same headers from the
    /// frames we build and finds their checksums valid.
    #[test]
    fn etherparse_agrees_with_what_we_build() {
        use etherparse::{NetSlice, SlicedPacket, TransportSlice};
        let specs = [
            FrameSpec::udp(0x0a00_0001, 0xc0a8_0102, 1234, 53, 100),
            FrameSpec::tcp(0x0a00_0001, 0x0808_0808, 40000, 443, 0x12, 700),
            FrameSpec::echo(0x0101_0101, 0x0202_0202, 77, 56),
        ];
        for spec in &specs {
            let f = spec.build();
            let p = SlicedPacket::from_ethernet(&f).unwrap();
            let Some(NetSlice::Ipv4(ip)) = &p.net else {
                panic!("{spec:?}: not IPv4")
            };
            let ih = ip.header().to_header();
            assert_eq!(u32::from_be_bytes(ih.source), spec.src);
            assert_eq!(u32::from_be_bytes(ih.destination), spec.dst);
            assert_eq!(ih.header_checksum, ih.calc_header_checksum());
            match (&p.transport, &spec.l4) {
                (Some(TransportSlice::Udp(u)), L4Spec::Udp { sport, dport, .. }) => {
                    assert_eq!((u.source_port(), u.destination_port()), (*sport, *dport));
                    let want = u.to_header().calc_checksum_ipv4(&ih, u.payload()).unwrap();
                    assert_eq!(u.checksum(), want);
                }
                (Some(TransportSlice::Tcp(t)), L4Spec::Tcp { sport, dport, .. }) => {
                    assert_eq!((t.source_port(), t.destination_port()), (*sport, *dport));
                    let want = t.to_header().calc_checksum_ipv4(&ih, t.payload()).unwrap();
                    assert_eq!(t.checksum(), want);
                }
                (Some(TransportSlice::Icmpv4(i)), L4Spec::IcmpQuery { .. }) => {
                    let want = i.header().icmp_type.calc_checksum(i.payload());
                    assert_eq!(i.checksum(), want);
                }
                (t, l4) => panic!("{l4:?} read as {t:?}"),
            }
        }
    }
}
