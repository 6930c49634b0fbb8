//! IPv4: the header (20 bytes and options), its protocol numbers, and a view whose setters keep
//! the header checksum right with RFC 1624 incremental updates.

use crate::checksum::{ipv4_header_checksum, ones_sum, sum_is_valid, update16, update32};
use crate::field::{read_u16, read_u32, view_common, write_u16, write_u32};

/// IPv4 header length without options.
pub const IPV4_HLEN: usize = 20;

/// Offsets of the header's fields, for code that reads a field or two straight from a frame
/// (RSS hashing, flow steering) without making a view.
pub mod offset {
    /// Version and IHL.
    pub const VER_IHL: usize = 0;
    /// Total length.
    pub const TOTAL_LEN: usize = 2;
    /// Flags and fragment offset.
    pub const FLAGS_FRAG: usize = 6;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: usize = 10;
    /// Source address (the destination follows it).
    pub const SRC: usize = 12;
    /// Destination address.
    pub const DST: usize = 16;
}
/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

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
        read_u16(self.buf.as_ref(), 2)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        read_u16(self.buf.as_ref(), 4)
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
        read_u16(self.buf.as_ref(), 6) & 0x1FFF
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
        read_u16(self.buf.as_ref(), 10)
    }
    /// Source address.
    pub fn src(&self) -> u32 {
        read_u32(self.buf.as_ref(), 12)
    }
    /// Destination address.
    pub fn dst(&self) -> u32 {
        read_u32(self.buf.as_ref(), 16)
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
        write_u32(b, 12, a);
        write_u16(b, 10, hc);
    }
    /// Sets the destination address and updates the header checksum incrementally.
    pub fn set_dst(&mut self, a: u32) {
        let old = self.dst();
        let hc = update32(self.checksum(), old, a);
        let b = self.buf.as_mut();
        write_u32(b, 16, a);
        write_u16(b, 10, hc);
    }
    /// Sets the TTL and updates the header checksum incrementally.
    pub fn set_ttl(&mut self, ttl: u8) {
        let b = self.buf.as_ref();
        let old = read_u16(b, 8);
        let new = u16::from(ttl) << 8 | u16::from(b[9]);
        let hc = update16(self.checksum(), old, new);
        let b = self.buf.as_mut();
        b[8] = ttl;
        write_u16(b, 10, hc);
    }
    /// Writes the checksum field as is.
    pub fn set_checksum(&mut self, c: u16) {
        write_u16(self.buf.as_mut(), 10, c);
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
