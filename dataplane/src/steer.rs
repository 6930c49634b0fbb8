//! Flow steering rules: frames matching a rule go to the rule's Rx queue instead of the queue
//! RSS picks, as NICs do with `rte_flow` queue actions (mlx5 flow steering).
//!
//! A stateful NF spread over workers needs them: a NAT gives each worker its own slice of outside
//! ports, but a return frame's RSS hash is computed over its own 5-tuple and lands on any worker,
//! usually one whose NAT does not hold the session. One rule per worker (destination = the NAT
//! address, destination port in the worker's slice) sends the return traffic to the worker that
//! owns the session. NFs declare their rules ([`crate::nf::NetworkFunction::steering_rules`]);
//! the run installs them on ports that support steering.

use std::net::Ipv4Addr;

use wire::ethernet::{ETH_HLEN as L3, ETHERTYPE_IPV4};
use wire::field::{read_u16, read_u32};
use wire::ipv4::{IPV4_HLEN, PROTO_TCP, PROTO_UDP, offset};

/// One rule: IPv4 TCP or UDP frames to `dst_ip` with a destination port in `dst_ports`
/// (inclusive) go to Rx queue `queue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SteerRule {
    /// Destination address to match.
    pub dst_ip: Ipv4Addr,
    /// Destination port range to match, inclusive.
    pub dst_ports: (u16, u16),
    /// The Rx queue (worker) matching frames go to.
    pub queue: u16,
}

/// The queue of the first rule `frame` (an Ethernet frame) matches, if any. Only unfragmented
/// (first-fragment) IPv4 TCP/UDP frames match; everything else is left to RSS.
#[inline]
pub fn steer(rules: &[SteerRule], frame: &[u8]) -> Option<u16> {
    if rules.is_empty() || frame.len() < L3 + IPV4_HLEN || read_u16(frame, 12) != ETHERTYPE_IPV4 {
        return None;
    }
    let ihl = usize::from(frame[L3 + offset::VER_IHL] & 0x0f) * 4;
    let proto = frame[L3 + offset::PROTOCOL];
    let frag_off = read_u16(frame, L3 + offset::FLAGS_FRAG) & 0x1fff;
    let l4 = L3 + ihl;
    if ihl < IPV4_HLEN
        || !(proto == PROTO_TCP || proto == PROTO_UDP)
        || frag_off != 0
        || frame.len() < l4 + 4
    {
        return None;
    }
    let dst = Ipv4Addr::from(read_u32(frame, L3 + offset::DST));
    let port = read_u16(frame, l4 + 2);
    rules
        .iter()
        .find(|r| r.dst_ip == dst && (r.dst_ports.0..=r.dst_ports.1).contains(&port))
        .map(|r| r.queue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(proto: u8, dst: [u8; 4], dport: u16, frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[12] = 0x08;
        f[14] = 0x45;
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = proto;
        f[30..34].copy_from_slice(&dst);
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn rules_match_address_protocol_and_port_range() {
        let nat = Ipv4Addr::new(10, 0, 0, 1);
        let rules = [
            SteerRule {
                dst_ip: nat,
                dst_ports: (1024, 32767),
                queue: 0,
            },
            SteerRule {
                dst_ip: nat,
                dst_ports: (32768, 65535),
                queue: 1,
            },
        ];
        assert_eq!(steer(&rules, &frame(17, [10, 0, 0, 1], 1024, 0)), Some(0));
        assert_eq!(steer(&rules, &frame(6, [10, 0, 0, 1], 40000, 0)), Some(1));
        assert_eq!(steer(&rules, &frame(17, [10, 0, 0, 1], 1023, 0)), None);
        assert_eq!(steer(&rules, &frame(17, [10, 0, 0, 2], 2000, 0)), None);
        // ICMP, later fragments, non-IPv4 and short frames are left to RSS.
        assert_eq!(steer(&rules, &frame(1, [10, 0, 0, 1], 2000, 0)), None);
        assert_eq!(steer(&rules, &frame(17, [10, 0, 0, 1], 2000, 5)), None);
        let mut v6 = frame(17, [10, 0, 0, 1], 2000, 0);
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(steer(&rules, &v6), None);
        assert_eq!(
            steer(&rules, &frame(17, [10, 0, 0, 1], 2000, 0)[..30]),
            None
        );
        assert_eq!(steer(&[], &frame(17, [10, 0, 0, 1], 2000, 0)), None);
    }
}
