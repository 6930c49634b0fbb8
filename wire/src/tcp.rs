//! TCP: the fixed 20-byte header and its flags. Setters leave the checksum alone: a NAT or load
//! balancer updates it once for all its changes ([`crate::checksum::CsumDelta`]).

use crate::field::{read_u16, read_u32, view_common, write_u16};

/// TCP header length without options.
pub const TCP_HLEN: usize = 20;
/// TCP FIN flag.
pub const TCP_FIN: u8 = 0x01;
/// TCP SYN flag.
pub const TCP_SYN: u8 = 0x02;
/// TCP RST flag.
pub const TCP_RST: u8 = 0x04;
/// TCP ACK flag.
pub const TCP_ACK: u8 = 0x10;

/// A view over the fixed 20 bytes of a TCP header.
#[derive(Debug)]
pub struct TcpView<T> {
    buf: T,
}
view_common!(TcpView, TCP_HLEN);

impl<T: AsRef<[u8]>> TcpView<T> {
    /// Source port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buf.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buf.as_ref(), 2)
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        read_u32(self.buf.as_ref(), 4)
    }
    /// Acknowledgement number.
    pub fn ack(&self) -> u32 {
        read_u32(self.buf.as_ref(), 8)
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
        read_u16(self.buf.as_ref(), 16)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpView<T> {
    /// Sets the source port (checksum not touched; see [`crate::checksum::CsumDelta`]).
    pub fn set_src_port(&mut self, p: u16) {
        write_u16(self.buf.as_mut(), 0, p);
    }
    /// Sets the destination port (checksum not touched; see [`crate::checksum::CsumDelta`]).
    pub fn set_dst_port(&mut self, p: u16) {
        write_u16(self.buf.as_mut(), 2, p);
    }
    /// Writes the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        write_u16(self.buf.as_mut(), 16, c);
    }
}
