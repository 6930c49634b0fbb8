//! ICMP errors about translated flows: matched by the packet they quote, translated outer and
//! quoted headers, every checksum (RFC 5508 REQ-3 to REQ-7, RFC 5382 REQ-9, RFC 4787 REQ-12).
//!
//! Why this is its own path: an error is about a packet that went the other way, so its
//! session is found from the quoted header reversed, and the quoted header must be rewritten
//! back to what the receiving host sent or received (path MTU discovery and connection errors
//! depend on the host recognising it). The quoted headers start at byte 42 of an untagged
//! frame and end at byte 70 (UDP, ICMP) or 82 (TCP's checksum at 78): past a 64 B header
//! segment. They are read into a small buffer through [`crate::slow_path`] (host payloads in
//! place, nicmem payloads through the counted slow path) and written back the same way, so
//! every datapath mode translates exactly what host mode does; `icmp_errors_slow_path` counts
//! the errors that needed it.
//!
//! Steps: verify the ICMP checksum over the whole message (REQ-3; an error split into IP
//! fragments cannot be verified without reassembly and is counted `icmp_errors_unverified`)
//! and the quoted IPv4 header checksum (REQ-3a); find the session of the reversed quoted tuple
//! (its direction decides the error's); rewrite the quoted address, port or identifier, the
//! quoted IPv4 and L4 checksums (the L4 one when it was quoted; a quoted UDP checksum of 0
//! stays 0) and the outer address, then the outer ICMP and IPv4 checksums, all incrementally.
//! An outbound error to an outside address is hairpinned: translated a second time, inbound
//! (REQ-7). The session is neither refreshed nor ended (REQ-6).

use dataplane::{Burst, DropReason};
use wire::checksum::{CsumDelta, sum_is_valid};
use wire::classify::{Frag, Parsed};
use wire::field::{read_u16, read_u32, write_u16, write_u32};
use wire::icmpv4::{ICMP_HLEN, IcmpView, icmp_is_query};
use wire::ipv4::{IPV4_HLEN, Ipv4View, PROTO_ICMP, PROTO_TCP, PROTO_UDP, offset};

use crate::flow_table::FlowKey;
use crate::slow_path::{read_frame, sum_frame, write_frame};

use super::{DirectionPolicy, Nat};

/// Quoted bytes read: an IPv4 header with the most options (60 B) and a TCP header up to its
/// checksum and urgent pointer (20 B).
const QUOTE_MAX: usize = 80;

/// What one translation stage changed outside the quoted bytes.
struct Stage {
    /// The session's direction: inbound errors go to the inside host.
    inbound: bool,
    /// The new outer source (outbound) or destination (inbound) address.
    outer: u32,
}

impl Nat {
    /// Translates ICMP error `p`, packet `i` of `burst` (see the module docs).
    pub(super) fn icmp_error(
        &mut self,
        burst: &mut Burst,
        i: usize,
        p: &Parsed,
        now: u32,
    ) -> Result<(), DropReason> {
        let msg_end = p.l3 + usize::from(p.total_len);
        if p.frag == Frag::None {
            let acc = sum_frame(burst, i, p.l4, msg_end).map_err(|_| DropReason::TRUNCATED)?;
            if !sum_is_valid(acc) {
                self.c.icmp_bad_checksum += 1;
                return Err(self.reasons.icmp_bad_checksum);
            }
        } else {
            self.c.icmp_errors_unverified += 1;
        }
        let e3 = p.l4 + ICMP_HLEN;
        let qlen = msg_end.saturating_sub(e3).min(QUOTE_MAX);
        if qlen < IPV4_HLEN + 8 {
            return Err(DropReason::TRUNCATED);
        }
        let mut q = [0u8; QUOTE_MAX];
        let slow = read_frame(burst, i, e3, &mut q[..qlen]).map_err(|_| DropReason::TRUNCATED)? > 0;
        let quoted = Ipv4View::new_checked(&q[..qlen]).ok_or(DropReason::TRUNCATED)?;
        let eihl = quoted.header_len();
        if quoted.version() != 4 || eihl < IPV4_HLEN {
            return Err(DropReason::MALFORMED);
        }
        if eihl + 8 > qlen {
            return Err(DropReason::TRUNCATED);
        }
        if !quoted.checksum_valid() {
            self.c.icmp_bad_checksum += 1;
            return Err(self.reasons.icmp_bad_checksum);
        }
        if quoted.frag_offset() != 0 {
            // About a later fragment: no ports to match.
            self.c.fragments_dropped += 1;
            return Err(DropReason::FRAGMENT);
        }
        let eproto = quoted.protocol();
        match eproto {
            PROTO_TCP | PROTO_UDP => {}
            PROTO_ICMP if icmp_is_query(q[eihl]) => {}
            _ => return Err(DropReason::UNSUPPORTED_PROTOCOL),
        }
        let expect = match self.direction {
            DirectionPolicy::ByPort => Some(self.is_inbound(p, burst.rx_port(i))),
            DirectionPolicy::ByAddress => None,
        };
        let mut d = CsumDelta::default();
        let first = self.icmp_stage(&mut q, eihl, qlen, &mut d, expect, now)?;
        let (mut src, mut dst) = (p.src, p.dst);
        if first.inbound {
            dst = first.outer;
        } else {
            src = first.outer;
            if self.hairpinning && self.pool.contains(dst) {
                // The quoted packet came from another inside host's outside endpoint.
                let qsport = read_u16(&q, eihl);
                if !self.alloc.owns(qsport) && eproto != PROTO_ICMP {
                    self.c.hairpin_via_outside += 1;
                } else {
                    let second = self.icmp_stage(&mut q, eihl, qlen, &mut d, Some(true), now)?;
                    dst = second.outer;
                    self.c.hairpinned += 1;
                }
            }
        }
        // The payload part first: if it cannot be written, nothing has changed.
        if write_frame(burst, i, e3, &q[..qlen]).is_err() {
            self.c.payload_unwritable += 1;
            return Err(self.reasons.payload_unwritable);
        }
        let h = burst.header_mut(i);
        if let Some(mut icmp) = IcmpView::new_checked(&mut h[p.l4..]) {
            icmp.set_checksum(d.apply(icmp.checksum()));
        }
        if let Some(mut ip) = Ipv4View::new_checked(&mut h[p.l3..]) {
            if src != p.src {
                ip.set_src(src);
            }
            if dst != p.dst {
                ip.set_dst(dst);
            }
        }
        if slow {
            self.c.icmp_errors_slow_path += 1;
        }
        self.c.icmp_errors_translated += 1;
        if first.inbound {
            self.c.inbound_translated += 1;
        } else {
            self.c.outbound_translated += 1;
        }
        Ok(())
    }

    /// One translation of the quoted header `q` (IPv4 header of `eihl` bytes, `qlen` bytes in
    /// all) by the session of its reversed tuple; `expect`: the direction that session must
    /// have. Accumulates the changes to the ICMP message in `d`.
    fn icmp_stage(
        &mut self,
        q: &mut [u8; QUOTE_MAX],
        eihl: usize,
        qlen: usize,
        d: &mut CsumDelta,
        expect: Option<bool>,
        now: u32,
    ) -> Result<Stage, DropReason> {
        let (eproto, esrc, edst) = {
            let quoted = Ipv4View::new_checked(&q[..]).ok_or(DropReason::TRUNCATED)?;
            (quoted.protocol(), quoted.src(), quoted.dst())
        };
        let e4 = eihl;
        let key = if eproto == PROTO_ICMP {
            // The quoted query went the other way: outbound queries are keyed (id, 0).
            let id = read_u16(q, e4 + 4);
            if self.pool.contains(esrc) {
                FlowKey::new(edst, esrc, 0, id, eproto)
            } else {
                FlowKey::new(edst, esrc, id, 0, eproto)
            }
        } else {
            FlowKey::new(edst, esrc, read_u16(q, e4 + 2), read_u16(q, e4), eproto)
        };
        let found = match self.table.peek(&key) {
            Some(v) => self.live_session(v, now),
            None => None,
        };
        let (idx, inbound) = match found {
            Some((idx, inb)) if expect.is_none_or(|e| e == inb) => (idx, inb),
            _ => {
                self.c.no_mapping += 1;
                return Err(self.reasons.no_mapping);
            }
        };
        let s = self.sessions.get(idx);
        let (ipd, l4d) = if inbound {
            (
                CsumDelta::from_raw(s.ip_delta).negate(),
                CsumDelta::from_raw(s.l4_delta).negate(),
            )
        } else {
            (
                CsumDelta::from_raw(s.ip_delta),
                CsumDelta::from_raw(s.l4_delta),
            )
        };
        // Inbound: the quoted packet left as the outside endpoint; its source goes back to the
        // inside endpoint. Outbound: it arrived for the inside endpoint; its destination
        // becomes the outside endpoint.
        let (addr, port, addr_off, port_off) = if inbound {
            (s.out_key.src(), s.out_key.sport(), offset::SRC, e4)
        } else {
            (s.nat_ip, s.nat_port, offset::DST, e4 + 2)
        };
        let old = read_u32(q, addr_off);
        write_u32(q, addr_off, addr);
        d.add32(old, addr);
        let old_c = read_u16(q, offset::CHECKSUM);
        let new_c = ipd.apply(old_c);
        write_u16(q, offset::CHECKSUM, new_c);
        d.add16(old_c, new_c);
        let (port_off, csum_off) = match eproto {
            PROTO_UDP => (port_off, Some(e4 + 6)),
            PROTO_TCP => (port_off, (e4 + 18 <= qlen).then_some(e4 + 16)),
            _ => (e4 + 4, Some(e4 + 2)),
        };
        let old_p = read_u16(q, port_off);
        write_u16(q, port_off, port);
        d.add16(old_p, port);
        if let Some(co) = csum_off {
            let old = read_u16(q, co);
            let new = if eproto == PROTO_UDP {
                l4d.apply_udp(old)
            } else {
                l4d.apply(old)
            };
            write_u16(q, co, new);
            d.add16(old, new);
        }
        Ok(Stage {
            inbound,
            outer: if inbound { s.out_key.src() } else { s.nat_ip },
        })
    }
}
