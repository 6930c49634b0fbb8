//! ICMPv4: the 8-byte header (type, code, checksum, rest of header), the message types, and
//! which of them are queries (the identifier plays a port's role) or errors (they quote the
//! offending IPv4 header and 8 bytes after it, RFC 792).

use crate::checksum::update16;
use crate::field::{read_u16, view_common, write_u16};

/// ICMP header length (type, code, checksum and the 4-byte rest-of-header).
pub const ICMP_HLEN: usize = 8;

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
        read_u16(self.buf.as_ref(), 2)
    }
    /// Identifier of a query message (bytes 4-5).
    pub fn ident(&self) -> u16 {
        read_u16(self.buf.as_ref(), 4)
    }
    /// Sequence number of a query message (bytes 6-7).
    pub fn seq(&self) -> u16 {
        read_u16(self.buf.as_ref(), 6)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpView<T> {
    /// Sets the identifier and updates the ICMP checksum incrementally.
    pub fn set_ident(&mut self, id: u16) {
        let hc = update16(self.checksum(), self.ident(), id);
        let b = self.buf.as_mut();
        write_u16(b, 4, id);
        write_u16(b, 2, hc);
    }
    /// Writes the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        write_u16(self.buf.as_mut(), 2, c);
    }
}
