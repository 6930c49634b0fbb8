//! The NAT's run-time commands ([`dataplane::NetworkFunction::control`]): `sessions [max]`
//! lists live sessions as an operator lists them with `conntrack -L` or VPP's `show nat44
//! sessions`; `pool` lists the outside addresses and `pool add|drain|remove <ip>` changes them
//! (VPP's `nat44 add address [del]`); `lookup <ip> <port>` says who holds an outside endpoint.
//!
//! Pool changes (every worker applies them to its own instance between bursts):
//!
//! - `add`: a spare address (`spare_ips`) goes into service: the ring pairs about `1 / (n + 1)`
//!   of the subscribers with it (`nfs/src/nat/pool.rs`), their next new mappings use it, and the
//!   ports answer ARP for it. Existing sessions keep their address until they end.
//! - `drain`: new subscribers are no longer paired with it (its share moves to the others);
//!   its sessions go on and it is still answered, until they end or it is removed.
//! - `remove`: out of service at once: every session on it ends (logged as a session delete,
//!   or its port block released, like any other end), its mappings and port holds go (the
//!   address leaves the NAT, so there is nothing left to protect), and the ports stop answering
//!   ARP for it. Drain first to let sessions finish.
//!
//! Why from the session pool: every live session is a record below the pool's high-water mark,
//! so the listing walks records instead of the flow table's keys (two per session) and needs no
//! state of its own. It runs between bursts on the worker's thread, never on the packet path.
//! A session record is 32 B and holds no creation time or packet count (the packet path stays
//! one cache line per packet), so a row says when the session expires, not how old it is.

use std::net::Ipv4Addr;

use dataplane::{Counters, NfCommand, NfContext};

use super::pool::AddrState;
use super::state::{MAP_HOLD, MAP_LIVE};
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
    pub(super) fn command(&mut self, cmd: &NfCommand, ctx: &NfContext) -> Result<Counters, String> {
        let args: Vec<&str> = cmd.args.iter().map(String::as_str).collect();
        match (cmd.verb.as_str(), args.as_slice()) {
            ("pool", []) => Ok(self.pool_listing()),
            ("pool", [change, ip]) => {
                let a = self.known_address(ip)?;
                self.pool_change(change, a, ctx)
            }
            ("lookup", [ip, port]) => {
                let a: Ipv4Addr = ip
                    .parse()
                    .map_err(|_| format!("{}: `{ip}` is not an IPv4 address", self.name))?;
                let p: u16 = port
                    .parse()
                    .map_err(|_| format!("{}: `{port}` is not a port (0..=65535)", self.name))?;
                Ok(self.lookup(u32::from(a), p, ctx))
            }
            ("sessions", []) => Ok(self.sessions_listing(DEFAULT_SESSIONS, ctx)),
            ("sessions", [max]) => match max.parse::<usize>() {
                Ok(m) => Ok(self.sessions_listing(m, ctx)),
                Err(_) => Err(format!(
                    "{}: `{max}` is not a number of sessions; give e.g. `sessions 50`",
                    self.name
                )),
            },
            (verb, _) => Err(format!(
                "{}: no command `{verb}` with {} argument(s); allowed: sessions [MAX], pool, \
                 pool add|drain|remove IP, lookup IP PORT",
                self.name,
                args.len()
            )),
        }
    }

    /// The index of outside address `ip`, or an error saying which addresses are known.
    fn known_address(&self, ip: &str) -> Result<u32, String> {
        let a: Ipv4Addr = ip
            .parse()
            .map_err(|_| format!("{}: `{ip}` is not an IPv4 address", self.name))?;
        self.pool.index_of(u32::from(a)).ok_or_else(|| {
            format!(
                "{}: {a} is not one of this NAT's addresses; an address added at run time must \
                 be listed in `spare_ips` (its steering rules and port tables exist from the \
                 start); `pool` lists them",
                self.name
            )
        })
    }

    /// Every known outside address: its state and this worker's sessions on it.
    fn pool_listing(&self) -> Counters {
        let mut per = vec![0u64; self.pool.len() as usize];
        for i in 0..self.sessions.high_water() {
            let s = self.sessions.get(i as u32);
            if s.state != ST_FREE
                && s.state != ST_HOLD
                && let Some(a) = self.pool.index_of(s.nat_ip)
            {
                per[a as usize] += 1;
            }
        }
        let rows = (0..self.pool.len())
            .map(|i| {
                let mut r = Counters::new();
                r.text("state", self.pool.state(i).as_str())
                    .gauge("sessions", per[i as usize]);
                (Ipv4Addr::from(self.pool.address(i)).to_string(), r)
            })
            .collect();
        let mut v = Counters::new();
        v.setting("in_service", self.pool.in_service().count() as u64)
            .setting(
                "ring_points_per_address",
                u64::from(self.pool.points_per_address()),
            )
            .rows("addresses", "address", rows);
        v
    }

    /// `pool add|drain|remove` of address index `a` (see the module docs).
    fn pool_change(&mut self, change: &str, a: u32, ctx: &NfContext) -> Result<Counters, String> {
        let ip = Ipv4Addr::from(self.pool.address(a));
        let st = match change {
            "add" => AddrState::Active,
            "drain" => AddrState::Draining,
            "remove" => AddrState::Off,
            other => {
                return Err(format!(
                    "{}: `pool {other}`: allowed pool add|drain|remove IP",
                    self.name
                ));
            }
        };
        if self.det.is_some() {
            return Err(format!(
                "{}: a deterministic NAT's pool cannot change at run time (every subscriber's \
                 computed mapping would move); change the config and restart",
                self.name
            ));
        }
        let was = self.pool.state(a);
        self.pool
            .set_state(a, st)
            .map_err(|e| format!("{}: {ip}: {e}", self.name))?;
        let mut ended = 0u64;
        if st == AddrState::Off && was != AddrState::Off {
            ended = self.take_out(u32::from(ip), ms_ticks(ctx.now_ns));
            if let Some(net) = &self.net {
                net.disown(ip);
            }
        } else if was == AddrState::Off
            && st != AddrState::Off
            && let Some(net) = &self.net
        {
            for p in self.outside_port_list() {
                net.own(ip, p);
            }
        }
        let mut v = Counters::new();
        v.text("address", ip.to_string())
            .text("state", st.as_str())
            .text("was", was.as_str())
            .count("sessions_ended", ended)
            .setting("in_service", self.pool.in_service().count() as u64);
        Ok(v)
    }

    /// Ends every session, mapping and port hold on outside address `addr` (it left service):
    /// sessions end as they do when they expire (logged), without a hold. Returns the live
    /// sessions ended. The log's complete messages are sent as they fill (an address may hold
    /// far more sessions than the log buffers between two bursts), so no delete is lost.
    fn take_out(&mut self, addr: u32, now: u32) -> u64 {
        let mut ended = 0;
        for i in 0..self.sessions.high_water() as u32 {
            let s = self.sessions.get(i);
            if s.state != ST_FREE && s.nat_ip == addr {
                if s.state != ST_HOLD {
                    ended += 1;
                }
                self.end_session(i, now, false);
                self.send_full_log();
            }
        }
        for m in 0..self.mappings.high_water() as u32 {
            let map = self.mappings.get(m);
            if (map.state == MAP_LIVE || map.state == MAP_HOLD) && map.outside == addr {
                self.free_mapping(m);
                self.send_full_log();
            }
        }
        ended
    }

    /// Sends the log's complete messages (the one being filled stays).
    fn send_full_log(&mut self) {
        if let Some(l) = self.log.as_deref_mut() {
            l.send_complete();
        }
    }

    /// Who holds outside endpoint `addr:port` on this worker: the live sessions and mappings
    /// using it, and with deterministic NAT the subscriber it is computed for.
    fn lookup(&self, addr: u32, port: u16, ctx: &NfContext) -> Counters {
        let now = ms_ticks(ctx.now_ns);
        let mut rows = Vec::new();
        for i in 0..self.sessions.high_water() {
            let s = self.sessions.get(i as u32);
            if s.state == ST_FREE
                || s.state == ST_HOLD
                || Self::expired_at(s.deadline, now)
                || s.nat_ip != addr
                || s.nat_port != port
            {
                continue;
            }
            let k = s.out_key;
            let mut r = Counters::new();
            r.text(
                "inside",
                format!("{}:{}", Ipv4Addr::from(k.src()), k.sport()),
            )
            .text(
                "remote",
                format!("{}:{}", Ipv4Addr::from(k.dst()), k.dport()),
            )
            .text("protocol", protocol_name(k.proto()))
            .setting("worker", u64::from(ctx.worker));
            rows.push((format!("{} session {i}", ctx.worker), r));
        }
        for m in 0..self.mappings.high_water() {
            let map = self.mappings.get(m as u32);
            if map.state == MAP_LIVE && map.outside == addr && map.outside_port == port {
                let mut r = Counters::new();
                r.text(
                    "inside",
                    format!("{}:{}", Ipv4Addr::from(map.inside), map.inside_port),
                )
                .text("remote", "*")
                .text("protocol", protocol_name(map.proto))
                .setting("worker", u64::from(ctx.worker));
                rows.push((format!("{} mapping {m}", ctx.worker), r));
            }
        }
        let mut v = Counters::new();
        if let Some(d) = &self.det
            && let Some(a) = self.pool.index_of(addr)
        {
            let (lo, hi) = self.alloc.range();
            if let Some(sub) = d.reverse(a, port, lo, hi) {
                v.text("deterministic_subscriber", Ipv4Addr::from(sub).to_string());
            }
        }
        v.rows("holders", "holder", rows);
        v
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
