//! Header parsing and rewriting for the network functions: zero-copy views over a packet's header
//! segment and Internet checksum arithmetic.
//!
//! # What is here
//!
//! - Byte views ([`EthernetView`], [`Ipv4View`], [`TcpView`], [`UdpView`], [`IcmpView`]) over
//!   `&[u8]` / `&mut [u8]`, in the style of smoltcp's wire layer: construction checks the length
//!   once, accessors read big-endian fields at fixed offsets.
//! - [`parse`]: the one-pass classifier every NF runs first. It walks Ethernet II (with at most one
//!   802.1Q tag), IPv4 and the first bytes of TCP/UDP/ICMP and returns the offsets and fields the
//!   NFs need ([`Parsed`]), or a [`ParseError`] that maps onto a [`DropReason`].
//! - Checksums: the full one's-complement sum ([`ones_sum`], [`ipv4_header_checksum`],
//!   [`ipv4_l4_checksum`]) and RFC 1624 incremental updates ([`CsumDelta`], [`update16`],
//!   [`update32`]).
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
//! (see [`CsumDelta::apply_udp`]) and a computed 0 is sent as 0xFFFF (RFC 768).
//!
//! # Lengths
//!
//! [`parse`] checks IPv4 total length and UDP length against the *frame* length, never against the
//! header segment (the mistake FastClick had to undo). Bytes that exist in the frame but not in the
//! header segment are reported as [`ParseError::SegmentShort`], distinct from a frame that is
//! really too short ([`ParseError::Truncated`]); both map to [`DropReason::TRUNCATED`], and NFs
//! count the first one as `header_segment_short`.
#![forbid(unsafe_code)]

use dataplane::DropReason;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// Ethernet II header length without a tag.
pub const ETH_HLEN: usize = 14;
/// Length of one 802.1Q tag.
pub const VLAN_HLEN: usize = 4;
/// IPv4 header length without options.
pub const IPV4_HLEN: usize = 20;
/// TCP header length without options.
pub const TCP_HLEN: usize = 20;
/// UDP header length.
pub const UDP_HLEN: usize = 8;
/// ICMP header length (type, code, checksum and the 4-byte rest-of-header).
pub const ICMP_HLEN: usize = 8;
/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

/// TCP FIN flag.
pub const TCP_FIN: u8 = 0x01;
/// TCP SYN flag.
pub const TCP_SYN: u8 = 0x02;
/// TCP RST flag.
pub const TCP_RST: u8 = 0x04;
/// TCP ACK flag.
pub const TCP_ACK: u8 = 0x10;

#[inline(always)]
fn rd16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

#[inline(always)]
fn rd32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[inline(always)]
fn wr16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
fn wr32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Reads a big-endian u16 at `off` (panics if out of range; callers check lengths first).
#[inline(always)]
pub fn read_u16(b: &[u8], off: usize) -> u16 {
    rd16(b, off)
}

/// Reads a big-endian u32 at `off` (panics if out of range; callers check lengths first).
#[inline(always)]
pub fn read_u32(b: &[u8], off: usize) -> u32 {
    rd32(b, off)
}

/// Writes a big-endian u16 at `off` (panics if out of range; callers check lengths first).
#[inline(always)]
pub fn write_u16(b: &mut [u8], off: usize, v: u16) {
    wr16(b, off, v)
}

/// Writes a big-endian u32 at `off` (panics if out of range; callers check lengths first).
#[inline(always)]
pub fn write_u32(b: &mut [u8], off: usize, v: u32) {
    wr32(b, off, v)
}

// ---------------------------------------------------------------------------------------------
// Checksums
// ---------------------------------------------------------------------------------------------

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

/// The IPv4 header checksum of `hdr` (the whole header including options), computed with the
/// checksum field taken as zero. Store it as is.
pub fn ipv4_header_checksum(hdr: &[u8]) -> u16 {
    let acc = ones_sum(hdr, 0) - u64::from(rd16(hdr, 10));
    !fold(acc)
}

/// The TCP/UDP checksum over the IPv4 pseudo-header and the whole L4 segment `l4` (header and
/// payload), with the checksum field (at `csum_off` within `l4`) taken as zero. For UDP, a result
/// of 0 must be transmitted as 0xFFFF (see [`udp_checksum_ipv4`]).
pub fn ipv4_l4_checksum(src: u32, dst: u32, proto: u8, l4: &[u8], csum_off: usize) -> u16 {
    let mut acc = pseudo_header_sum(src, dst, proto, l4.len());
    acc += ones_sum(l4, 0);
    if csum_off + 2 <= l4.len() {
        acc -= u64::from(rd16(l4, csum_off));
    }
    !fold(acc)
}

/// The UDP checksum to transmit for `udp` (header + payload): a computed 0 becomes 0xFFFF.
pub fn udp_checksum_ipv4(src: u32, dst: u32, udp: &[u8]) -> u16 {
    match ipv4_l4_checksum(src, dst, PROTO_UDP, udp, 6) {
        0 => 0xFFFF,
        c => c,
    }
}

/// The ICMP checksum over the whole ICMP message (no pseudo-header in ICMPv4).
pub fn icmp_checksum(icmp: &[u8]) -> u16 {
    let mut acc = ones_sum(icmp, 0);
    if icmp.len() >= 4 {
        acc -= u64::from(rd16(icmp, 2));
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

// ---------------------------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------------------------

macro_rules! view_common {
    ($name:ident, $min:expr) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// Minimum length of this header.
            pub const MIN_LEN: usize = $min;

            /// Wraps `buf` if it is long enough for the fixed part of the header.
            pub fn new_checked(buf: T) -> Option<Self> {
                if buf.as_ref().len() >= $min {
                    Some(Self { buf })
                } else {
                    None
                }
            }

            /// The underlying bytes.
            pub fn as_bytes(&self) -> &[u8] {
                self.buf.as_ref()
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buf
            }
        }
    };
}

/// A view over an Ethernet II header (destination, source, EtherType; at most one 802.1Q tag is
/// understood by [`EthernetView::l3_offset`]).
#[derive(Debug)]
pub struct EthernetView<T> {
    buf: T,
}
view_common!(EthernetView, ETH_HLEN);

impl<T: AsRef<[u8]>> EthernetView<T> {
    /// Destination MAC.
    pub fn dst(&self) -> [u8; 6] {
        let b = self.buf.as_ref();
        [b[0], b[1], b[2], b[3], b[4], b[5]]
    }
    /// Source MAC.
    pub fn src(&self) -> [u8; 6] {
        let b = self.buf.as_ref();
        [b[6], b[7], b[8], b[9], b[10], b[11]]
    }
    /// The outer EtherType (0x8100 for a tagged frame).
    pub fn ethertype(&self) -> u16 {
        rd16(self.buf.as_ref(), 12)
    }
    /// The VLAN id when the frame carries one 802.1Q tag and the view holds it.
    pub fn vlan_id(&self) -> Option<u16> {
        let b = self.buf.as_ref();
        (self.ethertype() == ETHERTYPE_VLAN && b.len() >= ETH_HLEN + VLAN_HLEN)
            .then(|| rd16(b, 14) & 0x0FFF)
    }
    /// The EtherType of the payload after skipping one 802.1Q tag, and the offset of the L3
    /// header; `None` if the tag does not fit the view.
    pub fn l3_offset(&self) -> Option<(u16, usize)> {
        let b = self.buf.as_ref();
        match self.ethertype() {
            ETHERTYPE_VLAN if b.len() >= ETH_HLEN + VLAN_HLEN => {
                Some((rd16(b, 16), ETH_HLEN + VLAN_HLEN))
            }
            ETHERTYPE_VLAN => None,
            t => Some((t, ETH_HLEN)),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetView<T> {
    /// Sets the destination MAC.
    pub fn set_dst(&mut self, mac: [u8; 6]) {
        self.buf.as_mut()[..6].copy_from_slice(&mac);
    }
    /// Sets the source MAC.
    pub fn set_src(&mut self, mac: [u8; 6]) {
        self.buf.as_mut()[6..12].copy_from_slice(&mac);
    }
}

/// A view over an IPv4 header. The fixed 20 bytes are guaranteed; options
/// (`header_len() > 20`) are present only if the buffer is long enough
/// ([`Ipv4View::options_present`]).
#[derive(Debug)]
pub struct Ipv4View<T> {
    buf: T,
}
view_common!(Ipv4View, IPV4_HLEN);

impl<T: AsRef<[u8]>> Ipv4View<T> {
    /// Version field (4 for IPv4).
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[0] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buf.as_ref()[0] & 0x0F) * 4
    }
    /// True when the options the IHL announces are within the buffer.
    pub fn options_present(&self) -> bool {
        self.header_len() <= self.buf.as_ref().len()
    }
    /// DSCP/ECN byte.
    pub fn tos(&self) -> u8 {
        self.buf.as_ref()[1]
    }
    /// Total length (header + payload) as the header claims it.
    pub fn total_len(&self) -> u16 {
        rd16(self.buf.as_ref(), 2)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        rd16(self.buf.as_ref(), 4)
    }
    /// Don't-fragment flag.
    pub fn dont_fragment(&self) -> bool {
        self.buf.as_ref()[6] & 0x40 != 0
    }
    /// More-fragments flag.
    pub fn more_fragments(&self) -> bool {
        self.buf.as_ref()[6] & 0x20 != 0
    }
    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        rd16(self.buf.as_ref(), 6) & 0x1FFF
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buf.as_ref()[8]
    }
    /// L4 protocol number.
    pub fn protocol(&self) -> u8 {
        self.buf.as_ref()[9]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        rd16(self.buf.as_ref(), 10)
    }
    /// Source address.
    pub fn src(&self) -> u32 {
        rd32(self.buf.as_ref(), 12)
    }
    /// Destination address.
    pub fn dst(&self) -> u32 {
        rd32(self.buf.as_ref(), 16)
    }
    /// True if the header checksum verifies (needs the options in the buffer).
    pub fn checksum_valid(&self) -> bool {
        let hl = self.header_len();
        let b = self.buf.as_ref();
        hl >= IPV4_HLEN && hl <= b.len() && sum_is_valid(ones_sum(&b[..hl], 0))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4View<T> {
    /// Sets the source address and updates the header checksum incrementally.
    pub fn set_src(&mut self, a: u32) {
        let old = self.src();
        let hc = update32(self.checksum(), old, a);
        let b = self.buf.as_mut();
        wr32(b, 12, a);
        wr16(b, 10, hc);
    }
    /// Sets the destination address and updates the header checksum incrementally.
    pub fn set_dst(&mut self, a: u32) {
        let old = self.dst();
        let hc = update32(self.checksum(), old, a);
        let b = self.buf.as_mut();
        wr32(b, 16, a);
        wr16(b, 10, hc);
    }
    /// Sets the TTL and updates the header checksum incrementally.
    pub fn set_ttl(&mut self, ttl: u8) {
        let b = self.buf.as_ref();
        let old = rd16(b, 8);
        let new = u16::from(ttl) << 8 | u16::from(b[9]);
        let hc = update16(self.checksum(), old, new);
        let b = self.buf.as_mut();
        b[8] = ttl;
        wr16(b, 10, hc);
    }
    /// Writes the checksum field as is.
    pub fn set_checksum(&mut self, c: u16) {
        wr16(self.buf.as_mut(), 10, c);
    }
    /// Recomputes the header checksum from scratch (needs the options in the buffer; does
    /// nothing otherwise).
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        if hl >= IPV4_HLEN && hl <= self.buf.as_ref().len() {
            let c = ipv4_header_checksum(&self.buf.as_ref()[..hl]);
            self.set_checksum(c);
        }
    }
}

/// A view over the fixed 20 bytes of a TCP header.
#[derive(Debug)]
pub struct TcpView<T> {
    buf: T,
}
view_common!(TcpView, TCP_HLEN);

impl<T: AsRef<[u8]>> TcpView<T> {
    /// Source port.
    pub fn src_port(&self) -> u16 {
        rd16(self.buf.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        rd16(self.buf.as_ref(), 2)
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        rd32(self.buf.as_ref(), 4)
    }
    /// Acknowledgement number.
    pub fn ack(&self) -> u32 {
        rd32(self.buf.as_ref(), 8)
    }
    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buf.as_ref()[12] >> 4) * 4
    }
    /// Flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, URG 0x20, ...).
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[13]
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        rd16(self.buf.as_ref(), 16)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpView<T> {
    /// Sets the source port (checksum not touched; see [`CsumDelta`]).
    pub fn set_src_port(&mut self, p: u16) {
        wr16(self.buf.as_mut(), 0, p);
    }
    /// Sets the destination port (checksum not touched; see [`CsumDelta`]).
    pub fn set_dst_port(&mut self, p: u16) {
        wr16(self.buf.as_mut(), 2, p);
    }
    /// Writes the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        wr16(self.buf.as_mut(), 16, c);
    }
}

/// A view over a UDP header.
#[derive(Debug)]
pub struct UdpView<T> {
    buf: T,
}
view_common!(UdpView, UDP_HLEN);

impl<T: AsRef<[u8]>> UdpView<T> {
    /// Source port.
    pub fn src_port(&self) -> u16 {
        rd16(self.buf.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        rd16(self.buf.as_ref(), 2)
    }
    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        rd16(self.buf.as_ref(), 4)
    }
    /// True when the length field is 0 (always malformed; here for completeness).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Checksum field (0 = none).
    pub fn checksum(&self) -> u16 {
        rd16(self.buf.as_ref(), 6)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpView<T> {
    /// Sets the source port (checksum not touched; see [`CsumDelta::apply_udp`]).
    pub fn set_src_port(&mut self, p: u16) {
        wr16(self.buf.as_mut(), 0, p);
    }
    /// Sets the destination port (checksum not touched).
    pub fn set_dst_port(&mut self, p: u16) {
        wr16(self.buf.as_mut(), 2, p);
    }
    /// Writes the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        wr16(self.buf.as_mut(), 6, c);
    }
}

/// A view over an ICMPv4 header (type, code, checksum, rest-of-header).
#[derive(Debug)]
pub struct IcmpView<T> {
    buf: T,
}
view_common!(IcmpView, ICMP_HLEN);

/// ICMP echo reply.
pub const ICMP_ECHO_REPLY: u8 = 0;
/// ICMP destination unreachable (an error carrying the offending header).
pub const ICMP_DEST_UNREACH: u8 = 3;
/// ICMP source quench (deprecated error).
pub const ICMP_SOURCE_QUENCH: u8 = 4;
/// ICMP redirect (error).
pub const ICMP_REDIRECT: u8 = 5;
/// ICMP echo request.
pub const ICMP_ECHO_REQUEST: u8 = 8;
/// ICMP time exceeded (error).
pub const ICMP_TIME_EXCEEDED: u8 = 11;
/// ICMP parameter problem (error).
pub const ICMP_PARAM_PROBLEM: u8 = 12;

/// True for the ICMP types that carry an embedded IP header + 8 bytes (RFC 792 errors).
#[inline]
pub fn icmp_is_error(ty: u8) -> bool {
    matches!(
        ty,
        ICMP_DEST_UNREACH
            | ICMP_SOURCE_QUENCH
            | ICMP_REDIRECT
            | ICMP_TIME_EXCEEDED
            | ICMP_PARAM_PROBLEM
    )
}

/// True for the ICMP query types whose identifier (bytes 4-5) plays the role of a port: echo,
/// timestamp, information and address-mask request/reply.
#[inline]
pub fn icmp_is_query(ty: u8) -> bool {
    matches!(ty, 0 | 8 | 13 | 14 | 15 | 16 | 17 | 18)
}

impl<T: AsRef<[u8]>> IcmpView<T> {
    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buf.as_ref()[0]
    }
    /// Code.
    pub fn code(&self) -> u8 {
        self.buf.as_ref()[1]
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        rd16(self.buf.as_ref(), 2)
    }
    /// Identifier of a query message (bytes 4-5).
    pub fn ident(&self) -> u16 {
        rd16(self.buf.as_ref(), 4)
    }
    /// Sequence number of a query message (bytes 6-7).
    pub fn seq(&self) -> u16 {
        rd16(self.buf.as_ref(), 6)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpView<T> {
    /// Sets the identifier and updates the ICMP checksum incrementally.
    pub fn set_ident(&mut self, id: u16) {
        let hc = update16(self.checksum(), self.ident(), id);
        let b = self.buf.as_mut();
        wr16(b, 4, id);
        wr16(b, 2, hc);
    }
    /// Writes the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        wr16(self.buf.as_mut(), 2, c);
    }
}

// ---------------------------------------------------------------------------------------------
// One-pass classification
// ---------------------------------------------------------------------------------------------

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

impl ParseError {
    /// The drop reason this error is reported as.
    pub fn drop_reason(self) -> DropReason {
        match self {
            ParseError::Truncated | ParseError::SegmentShort => DropReason::TRUNCATED,
            ParseError::Malformed => DropReason::MALFORMED,
            ParseError::NotIpv4 => DropReason::NOT_IPV4,
        }
    }
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
#[inline]
pub fn parse(h: &[u8], frame_len: usize) -> Result<Parsed, ParseError> {
    let hl = h.len();
    need(hl, frame_len, ETH_HLEN)?;
    let mut et = rd16(h, 12);
    let mut l3 = ETH_HLEN;
    if et == ETHERTYPE_VLAN {
        need(hl, frame_len, ETH_HLEN + VLAN_HLEN)?;
        et = rd16(h, 16);
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
    let total_len = rd16(ip, 2);
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
    let fragw = rd16(ip, 6);
    let frag = if fragw & 0x1FFF != 0 {
        Frag::Later
    } else if fragw & 0x2000 != 0 {
        Frag::First
    } else {
        Frag::None
    };
    let proto = ip[9];
    let src = rd32(ip, 12);
    let dst = rd32(ip, 16);
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
                    sport: rd16(t, 0),
                    dport: rd16(t, 2),
                    flags: t[13],
                }
            }
            PROTO_UDP => {
                if l4 + UDP_HLEN > dgram_end {
                    return Err(ParseError::Truncated);
                }
                need(hl, frame_len, l4 + UDP_HLEN)?;
                let u = &h[l4..l4 + UDP_HLEN];
                let ulen = usize::from(rd16(u, 4));
                if ulen < UDP_HLEN || (frag == Frag::None && ulen > tl - ihl) {
                    return Err(ParseError::Malformed);
                }
                L4::Udp {
                    sport: rd16(u, 0),
                    dport: rd16(u, 2),
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
                    ident: rd16(c, 4),
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
/// full frame (see [`dataplane::Burst::copy_frame`], the counted slow path for nicmem payloads).
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
            rd16(seg, 6) == 0
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
        assert_eq!(rd16(&h, 10), ipv4_header_checksum(&h));
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
