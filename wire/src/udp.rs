//! UDP: the 8-byte header. Setters leave the checksum alone (see
//! [`crate::checksum::CsumDelta::apply_udp`] for the "no checksum" value 0).

use crate::checksum::ipv4_l4_checksum;
use crate::field::{read_u16, view_common, write_u16};
use crate::ipv4::PROTO_UDP;

/// UDP header length.
pub const UDP_HLEN: usize = 8;

/// The UDP checksum to transmit for `udp` (header + payload): a computed 0 becomes 0xFFFF.
pub fn udp_checksum_ipv4(src: u32, dst: u32, udp: &[u8]) -> u16 {
    match ipv4_l4_checksum(src, dst, PROTO_UDP, udp, 6) {
        0 => 0xFFFF,
        c => c,
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
        read_u16(self.buf.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buf.as_ref(), 2)
    }
    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        read_u16(self.buf.as_ref(), 4)
    }
    /// True when the length field is 0 (always malformed; here for completeness).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Checksum field (0 = none).
    pub fn checksum(&self) -> u16 {
        read_u16(self.buf.as_ref(), 6)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpView<T> {
    /// Sets the source port (checksum not touched; see [`crate::checksum::CsumDelta::apply_udp`]).
    pub fn set_src_port(&mut self, p: u16) {
        write_u16(self.buf.as_mut(), 0, p);
    }
    /// Sets the destination port (checksum not touched).
    pub fn set_dst_port(&mut self, p: u16) {
        write_u16(self.buf.as_mut(), 2, p);
    }
    /// Writes the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        write_u16(self.buf.as_mut(), 6, c);
    }
}
