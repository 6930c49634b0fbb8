//! ARP for IPv4 over Ethernet (RFC 826): the 28-byte packet after the Ethernet header.

use crate::field::{read_u16, read_u32, view_common, write_u16, write_u32};

/// Length of an Ethernet/IPv4 ARP packet.
pub const ARP_LEN: usize = 28;
/// Hardware type Ethernet.
pub const ARP_HTYPE_ETHERNET: u16 = 1;
/// Operation: request.
pub const ARP_OP_REQUEST: u16 = 1;
/// Operation: reply.
pub const ARP_OP_REPLY: u16 = 2;

/// A view over an Ethernet/IPv4 ARP packet (hardware type 1, protocol type IPv4, address
/// lengths 6 and 4; [`ArpView::is_ethernet_ipv4`] says whether the packet is one).
#[derive(Debug)]
pub struct ArpView<T> {
    buf: T,
}
view_common!(ArpView, ARP_LEN);

impl<T: AsRef<[u8]>> ArpView<T> {
    /// True for hardware type Ethernet, protocol IPv4 and address lengths 6 and 4.
    pub fn is_ethernet_ipv4(&self) -> bool {
        let b = self.buf.as_ref();
        read_u16(b, 0) == ARP_HTYPE_ETHERNET
            && read_u16(b, 2) == crate::ethernet::ETHERTYPE_IPV4
            && b[4] == 6
            && b[5] == 4
    }
    /// Operation ([`ARP_OP_REQUEST`], [`ARP_OP_REPLY`]).
    pub fn op(&self) -> u16 {
        read_u16(self.buf.as_ref(), 6)
    }
    /// Sender hardware address.
    pub fn sender_mac(&self) -> [u8; 6] {
        let b = self.buf.as_ref();
        [b[8], b[9], b[10], b[11], b[12], b[13]]
    }
    /// Sender protocol (IPv4) address.
    pub fn sender_ip(&self) -> u32 {
        read_u32(self.buf.as_ref(), 14)
    }
    /// Target hardware address.
    pub fn target_mac(&self) -> [u8; 6] {
        let b = self.buf.as_ref();
        [b[18], b[19], b[20], b[21], b[22], b[23]]
    }
    /// Target protocol (IPv4) address.
    pub fn target_ip(&self) -> u32 {
        read_u32(self.buf.as_ref(), 24)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpView<T> {
    /// Writes a whole Ethernet/IPv4 ARP packet with operation `op`.
    pub fn fill(&mut self, op: u16, sender: ([u8; 6], u32), target: ([u8; 6], u32)) {
        let b = self.buf.as_mut();
        write_u16(b, 0, ARP_HTYPE_ETHERNET);
        write_u16(b, 2, crate::ethernet::ETHERTYPE_IPV4);
        b[4] = 6;
        b[5] = 4;
        write_u16(b, 6, op);
        b[8..14].copy_from_slice(&sender.0);
        write_u32(b, 14, sender.1);
        b[18..24].copy_from_slice(&target.0);
        write_u32(b, 24, target.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_read_back_agree_with_etherparse() {
        let mut b = [0u8; ARP_LEN];
        let (a, c) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        ArpView::new_checked(&mut b[..]).unwrap().fill(
            ARP_OP_REQUEST,
            (a, 0x0a00_0001),
            (c, 0x0a00_0002),
        );
        let v = ArpView::new_checked(&b[..]).unwrap();
        assert!(v.is_ethernet_ipv4());
        assert_eq!((v.op(), v.sender_mac(), v.target_ip()), (1, a, 0x0a00_0002));
        let p = etherparse::ArpPacketSlice::from_slice(&b).unwrap();
        assert_eq!(p.operation(), etherparse::ArpOperation::REQUEST);
        assert_eq!(p.sender_hw_addr(), &a);
        assert_eq!(p.target_protocol_addr(), &[10, 0, 0, 2]);
        assert!(ArpView::new_checked(&b[..27]).is_none());
    }
}
