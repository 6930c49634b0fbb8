//! TCP session tracking: which segments may open a session and which timeout a session is under.
//!
//! Why a state machine at all: a NAT that opens a session on any segment lets a stray ACK or RST
//! take an outside port (and, at a carrier, log a session that never existed), and one that
//! deletes a session on RST lets a forged RST cut a live connection. This follows the session
//! handling RFC 7857 section 3.1 asks for (RFC 6146's state machine, as VPP's NAT44-ED does):
//!
//! - A session opens on a SYN only (no ACK, no RST), outbound, or inbound where the filtering
//!   allows it; every other segment without a session is dropped and counted.
//! - **Opening** (a SYN seen from one side): the opening timeout (default 240 s, RFC 5382's
//!   transitory minimum).
//! - **Established**: SYNs seen from both sides (the handshake or a simultaneous open, RFC 5382
//!   REQ-2): the established timeout (7440 s). One FIN keeps it established (half-close).
//! - **Closing**: FINs seen from both sides, or a RST: the closing timeout (default 240 s). A RST
//!   does not delete the session (RFC 7857 section 3.2): if the connection carries on (the RST
//!   was forged, or lost at the other end), a later segment without RST takes it back to where
//!   it was. A new SYN (no ACK) on a closing session reopens it.

use wire::tcp::{TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};

use super::state::{ST_TCP_CLOSING, ST_TCP_ESTABLISHED, ST_TCP_OPENING};

const SYN_OUT: u8 = 0x01;
const SYN_IN: u8 = 0x02;
const FIN_OUT: u8 = 0x04;
const FIN_IN: u8 = 0x08;
const RST: u8 = 0x10;

/// True for a segment that may open a session: SYN without ACK and RST.
#[inline(always)]
pub(super) fn opens(flags: u8) -> bool {
    flags & (TCP_SYN | TCP_ACK | TCP_RST) == TCP_SYN
}

/// The flag bits of a session opened by `flags` (a SYN) in direction `inbound`.
#[inline(always)]
pub(super) fn opened(inbound: bool) -> u8 {
    if inbound { SYN_IN } else { SYN_OUT }
}

/// Updates a session's seen-flags `bits` for a segment with `flags` in direction `inbound` and
/// returns its state (`ST_TCP_*`).
#[inline(always)]
pub(super) fn track(bits: &mut u8, flags: u8, inbound: bool) -> u8 {
    let closing = *bits & RST != 0 || *bits & (FIN_OUT | FIN_IN) == FIN_OUT | FIN_IN;
    if closing && opens(flags) {
        *bits = 0;
    } else if flags & TCP_RST == 0 {
        // The connection carries on after a RST: the RST did not close it.
        *bits &= !RST;
    }
    if flags & TCP_SYN != 0 {
        *bits |= if inbound { SYN_IN } else { SYN_OUT };
    }
    if flags & TCP_FIN != 0 {
        *bits |= if inbound { FIN_IN } else { FIN_OUT };
    }
    if flags & TCP_RST != 0 {
        *bits |= RST;
    }
    state_of(*bits)
}

/// The state of a session with seen-flags `bits`.
#[inline(always)]
pub(super) fn state_of(bits: u8) -> u8 {
    if bits & RST != 0 || bits & (FIN_OUT | FIN_IN) == FIN_OUT | FIN_IN {
        ST_TCP_CLOSING
    } else if bits & (SYN_OUT | SYN_IN) == SYN_OUT | SYN_IN {
        ST_TCP_ESTABLISHED
    } else {
        ST_TCP_OPENING
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_close_and_reopen() {
        let mut b = opened(false);
        assert_eq!(state_of(b), ST_TCP_OPENING);
        assert_eq!(track(&mut b, TCP_SYN | TCP_ACK, true), ST_TCP_ESTABLISHED);
        assert_eq!(track(&mut b, TCP_ACK, false), ST_TCP_ESTABLISHED);
        assert_eq!(track(&mut b, TCP_FIN | TCP_ACK, false), ST_TCP_ESTABLISHED);
        assert_eq!(track(&mut b, TCP_FIN | TCP_ACK, true), ST_TCP_CLOSING);
        assert_eq!(track(&mut b, TCP_ACK, false), ST_TCP_CLOSING);
        assert_eq!(track(&mut b, TCP_SYN, false), ST_TCP_OPENING, "reopened");
    }

    #[test]
    fn rst_holds_and_recovers() {
        let mut b = opened(false);
        track(&mut b, TCP_SYN | TCP_ACK, true);
        assert_eq!(track(&mut b, TCP_RST, true), ST_TCP_CLOSING);
        assert_eq!(track(&mut b, TCP_RST | TCP_ACK, false), ST_TCP_CLOSING);
        assert_eq!(
            track(&mut b, TCP_ACK, false),
            ST_TCP_ESTABLISHED,
            "data after RST"
        );
    }

    #[test]
    fn simultaneous_open() {
        let mut b = opened(false);
        assert_eq!(track(&mut b, TCP_SYN, true), ST_TCP_ESTABLISHED);
        assert!(opens(TCP_SYN));
        assert!(!opens(TCP_SYN | TCP_ACK) && !opens(TCP_ACK) && !opens(TCP_SYN | TCP_RST));
    }
}
