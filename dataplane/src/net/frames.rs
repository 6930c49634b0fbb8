//! The frames the slow path sends (ARP requests, replies and announcements, ICMP time exceeded
//! and echo replies), built with `etherparse` into a reused buffer. Speed does not matter here
//! (a few frames per event), correctness does: `etherparse` fills every length and checksum.

use etherparse::{
    ArpEthIpv4Packet, ArpOperation, Icmpv4Type, PacketBuilder, icmpv4::TimeExceededCode,
};

use super::addr::MacAddr;

/// Shortest Ethernet frame without FCS: shorter frames are padded with zeros, as a NIC does.
const MIN_FRAME: usize = 60;

fn pad(buf: &mut Vec<u8>) {
    if buf.len() < MIN_FRAME {
        buf.resize(MIN_FRAME, 0);
    }
}

/// An Ethernet/IPv4 ARP packet from `sender` to `target` (MAC, address), in a frame to
/// `eth_dst`, into `buf` (cleared first).
pub(crate) fn arp(
    buf: &mut Vec<u8>,
    operation: ArpOperation,
    eth_dst: MacAddr,
    sender: (MacAddr, u32),
    target: (MacAddr, u32),
) {
    buf.clear();
    let packet = ArpEthIpv4Packet {
        operation,
        sender_mac: sender.0.0,
        sender_ipv4: sender.1.to_be_bytes(),
        target_mac: target.0.0,
        target_ipv4: target.1.to_be_bytes(),
    };
    // Cannot fail: a Vec grows as needed.
    let _ = PacketBuilder::ethernet2(sender.0.0, eth_dst.0)
        .arp(packet.into())
        .write(buf);
    pad(buf);
}

/// An ICMP time exceeded (TTL exceeded in transit) from `src` to `dst` quoting `quoted` (the
/// expired packet's IPv4 header and the first 8 bytes after it, RFC 792).
pub(crate) fn time_exceeded(
    buf: &mut Vec<u8>,
    eth: (MacAddr, MacAddr),
    src: u32,
    dst: u32,
    quoted: &[u8],
) {
    buf.clear();
    let _ = PacketBuilder::ethernet2(eth.0.0, eth.1.0)
        .ipv4(src.to_be_bytes(), dst.to_be_bytes(), 64)
        .icmpv4(Icmpv4Type::TimeExceeded(
            TimeExceededCode::TtlExceededInTransit,
        ))
        .write(buf, quoted);
    pad(buf);
}

/// An ICMP echo reply from `src` to `dst` with identifier `id`, sequence `seq` and `data`.
pub(crate) fn echo_reply(
    buf: &mut Vec<u8>,
    eth: (MacAddr, MacAddr),
    src: u32,
    dst: u32,
    id_seq: (u16, u16),
    data: &[u8],
) {
    buf.clear();
    let _ = PacketBuilder::ethernet2(eth.0.0, eth.1.0)
        .ipv4(src.to_be_bytes(), dst.to_be_bytes(), 64)
        .icmpv4_echo_reply(id_seq.0, id_seq.1)
        .write(buf, data);
    pad(buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    #[test]
    fn arp_frames_are_padded_and_parse_back() {
        let mut buf = Vec::new();
        arp(
            &mut buf,
            ArpOperation::REPLY,
            B,
            (A, 0x0a00_0001),
            (B, 0x0a00_0002),
        );
        assert_eq!(buf.len(), MIN_FRAME);
        let v = wire::arp::ArpView::new_checked(&buf[14..42]).unwrap();
        assert!(v.is_ethernet_ipv4());
        assert_eq!(
            (v.op(), v.sender_mac(), v.sender_ip(), v.target_ip()),
            (2, A.0, 0x0a00_0001, 0x0a00_0002)
        );
        assert_eq!(&buf[0..6], &B.0);
    }

    #[test]
    fn icmp_frames_carry_valid_checksums() {
        let mut buf = Vec::new();
        let quoted = [
            0x45u8, 0, 0, 28, 0, 0, 0, 0, 1, 17, 0, 0, 10, 0, 0, 2, 10, 0, 9, 9,
        ];
        let mut q = quoted.to_vec();
        q.extend_from_slice(&[0, 53, 0, 53, 0, 8, 0, 0]);
        time_exceeded(&mut buf, (A, B), 0x0a00_0001, 0x0a00_0002, &q);
        let p = SlicedPacket::from_ethernet(&buf).unwrap();
        let Some(NetSlice::Ipv4(ip)) = &p.net else {
            panic!("not IPv4")
        };
        assert_eq!(ip.header().destination(), [10, 0, 0, 2]);
        let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
            panic!("not ICMP")
        };
        assert_eq!(
            icmp.icmp_type(),
            Icmpv4Type::TimeExceeded(TimeExceededCode::TtlExceededInTransit)
        );
        assert_eq!(icmp.payload(), &q[..]);
        let icmp_end = 34 + 8 + q.len();
        assert!(
            wire::checksum::sum_is_valid(wire::checksum::ones_sum(&buf[34..icmp_end], 0)),
            "ICMP checksum verifies"
        );
        drop(p);
        echo_reply(&mut buf, (A, B), 1, 2, (7, 9), b"hello");
        let p = SlicedPacket::from_ethernet(&buf).unwrap();
        let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
            panic!("not ICMP")
        };
        assert_eq!(icmp.payload(), b"hello");
    }
}
