//! The NAT's run-time commands ([`dataplane::NetworkFunction::control`]): `sessions [max]`
//! lists live sessions as an operator lists them with `conntrack -L` or VPP's `show nat44
//! sessions`.
//!
//! Why from the session pool: every live session is a record below the pool's high-water mark,
//! so the listing walks records instead of the flow table's keys (two per session) and needs no
//! state of its own. It runs between bursts on the worker's thread, never on the packet path.
//! A session record is 32 B and holds no creation time or packet count (the packet path stays
//! one cache line per packet), so a row says when the session expires, not how old it is.

use std::net::Ipv4Addr;

use dataplane::{Counters, NfCommand, NfContext};
use wire::ipv4::{PROTO_ICMP, PROTO_TCP, PROTO_UDP};

use super::Nat;
use super::state::{
    ST_FREE, ST_HOLD, ST_ICMP, ST_TCP_CLOSING, ST_TCP_ESTABLISHED, ST_TCP_OPENING, ST_UDP,
};
use crate::flow_table::ms_ticks;

/// Sessions `sessions` lists when no maximum is given.
pub const DEFAULT_SESSIONS: usize = 100;

/// The name of a session state in a listing.
fn state_name(state: u8) -> &'static str {
    match state {
        ST_UDP => "udp",
        ST_ICMP => "icmp",
        ST_TCP_OPENING => "tcp-opening",
        ST_TCP_ESTABLISHED => "tcp-established",
        ST_TCP_CLOSING => "tcp-closing",
        _ => "other",
    }
}

fn protocol_name(proto: u8) -> String {
    match proto {
        PROTO_ICMP => "icmp".into(),
        PROTO_TCP => "tcp".into(),
        PROTO_UDP => "udp".into(),
        p => p.to_string(),
    }
}

impl Nat {
    /// Answers an operator's command (see the module docs).
    pub(super) fn command(&self, cmd: &NfCommand, ctx: &NfContext) -> Result<Counters, String> {
        let args: Vec<&str> = cmd.args.iter().map(String::as_str).collect();
        match (cmd.verb.as_str(), args.as_slice()) {
            ("sessions", []) => Ok(self.sessions_listing(DEFAULT_SESSIONS, ctx)),
            ("sessions", [max]) => match max.parse::<usize>() {
                Ok(m) => Ok(self.sessions_listing(m, ctx)),
                Err(_) => Err(format!(
                    "{}: `{max}` is not a number of sessions; give e.g. `sessions 50`",
                    self.name
                )),
            },
            (verb, _) => Err(format!(
                "{}: no command `{verb}` with {} argument(s); allowed: sessions [MAX]",
                self.name,
                args.len()
            )),
        }
    }

    /// The live sessions (at most `max`, in record order) and how many there are
    /// (`live_sessions`): per session
    /// its inside, outside and remote endpoints, protocol, state and the seconds until it
    /// expires unless a packet refreshes it. Sessions that have expired but are not yet swept,
    /// and ended sessions kept only to hold their port, are not listed.
    fn sessions_listing(&self, max: usize, ctx: &NfContext) -> Counters {
        let now = ms_ticks(ctx.now_ns);
        let mut rows = Vec::new();
        let mut live = 0u64;
        for i in 0..self.sessions.high_water() {
            let s = self.sessions.get(i as u32);
            if s.state == ST_FREE || s.state == ST_HOLD || Self::expired_at(s.deadline, now) {
                continue;
            }
            live += 1;
            if rows.len() >= max {
                continue;
            }
            let k = s.out_key;
            let endpoint = |a: u32, p: u16| format!("{}:{p}", Ipv4Addr::from(a));
            let (inside, remote) = (endpoint(k.src(), k.sport()), endpoint(k.dst(), k.dport()));
            let proto = protocol_name(k.proto());
            let mut r = Counters::new();
            r.text("inside", inside.clone())
                .text("outside", endpoint(s.nat_ip, s.nat_port))
                .text("remote", remote.clone())
                .text("protocol", proto.clone())
                .text("state", state_name(s.state))
                .gauge(
                    "expires_in_s",
                    u64::from(s.deadline.wrapping_sub(now)) / 1000,
                )
                .setting("worker", u64::from(ctx.worker));
            rows.push((format!("{proto} {inside} {remote}"), r));
        }
        let mut v = Counters::new();
        v.gauge("live_sessions", live)
            .rows("sessions", "session", rows);
        v
    }
}
