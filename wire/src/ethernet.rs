//! Ethernet II: the 14-byte header (destination, source, EtherType) and 802.1Q / 802.1ad tags.

use crate::field::{read_u16, view_common};

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of an 802.1ad (QinQ outer) tag.
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// Ethernet II header length without a tag.
pub const ETH_HLEN: usize = 14;
/// Length of one 802.1Q / 802.1ad tag.
pub const VLAN_HLEN: usize = 4;
/// The FCS the NIC appends on the wire (frames here never carry it).
pub const FCS_LEN: usize = 4;

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
        read_u16(self.buf.as_ref(), 12)
    }
    /// The VLAN id when the frame carries one 802.1Q tag and the view holds it.
    pub fn vlan_id(&self) -> Option<u16> {
        let b = self.buf.as_ref();
        (self.ethertype() == ETHERTYPE_VLAN && b.len() >= ETH_HLEN + VLAN_HLEN)
            .then(|| read_u16(b, 14) & 0x0FFF)
    }
    /// The EtherType of the payload after skipping one 802.1Q tag, and the offset of the L3
    /// header; `None` if the tag does not fit the view.
    pub fn l3_offset(&self) -> Option<(u16, usize)> {
        let b = self.buf.as_ref();
        match self.ethertype() {
            ETHERTYPE_VLAN if b.len() >= ETH_HLEN + VLAN_HLEN => {
                Some((read_u16(b, 16), ETH_HLEN + VLAN_HLEN))
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
