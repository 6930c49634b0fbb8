//! NAT event logging over IPFIX (RFC 7011 messages, RFC 8158 information elements), so that an
//! operator can say who held an outside address and port at a given time (RFC 6888 REQ-12 asks a
//! carrier-grade NAT to log its mappings; VPP exports the same events over IPFIX).
//!
//! Why it is built this way:
//!
//! - **Nothing per packet but a copy.** A session is created or ended on the per-packet path, so
//!   an event is a fixed-size record copied into a buffer preallocated when the NAT is built:
//!   no allocation, no syscall, no lock. Whole messages leave through the worker's own UDP
//!   socket between bursts ([`NatLog::flush`], after each burst): the complete ones at once, the
//!   one being filled once its oldest record is `log_flush_ms` old, and everything at the end of
//!   the run. A worker that receives nothing still sends within `log_flush_ms`: while records
//!   wait, the NAT asks the run loop to call it on idle iterations too
//!   ([`dataplane::NetworkFunction::wants_release`]), one check per loop iteration, nothing per
//!   packet.
//! - **Losses are counted, never hidden.** With every message slot full (the collector cannot
//!   keep up, or a burst created more events than the buffer holds) an event is dropped and
//!   counted as `lost`; a message the socket cannot send is counted as `send_failed`, and an
//!   ICMP port unreachable from the collector's host (nothing listens) as `refused`.
//! - **Refusals are rate limited.** A full outside address refuses every new flow of its
//!   subscribers; one record per refused packet would flood the collector exactly when the NAT
//!   is busiest. At most `log_exhaustion_per_s` refusal records (ports or addresses exhausted,
//!   quota exceeded) per second per worker leave; the rest are counted as
//!   `exhaustion_suppressed`.
//! - **Templates at start and every [`TEMPLATE_REFRESH_MS`]** (RFC 7011 section 8.4: over UDP a
//!   collector that starts late or restarts learns the templates again).
//!
//! One worker is one IPFIX observation domain (`worker + 1`), with its own socket, message
//! sequence numbers and templates.
//!
//! Events and their templates (natEvent values from IANA's "NAT Event Type" registry, RFC 8158
//! section 4.1):
//!
//! | natEvent | template | fields |
//! |---|---|---|
//! | 4 NAT44 session create, 5 NAT44 session delete | 256 | time, event, inside address and port, outside address and port, remote address and port, protocol |
//! | 12 NAT ports exhausted | 257 | time, event, outside address, protocol |
//! | 16 port block allocation, 17 port block de-allocation | 258 | time, event, inside address, outside address, first and last port of the block, step, ports |
//! | 3 NAT addresses exhausted | 259 | time, event, natPoolId (the NAT's `instance`) |
//! | 13 quota exceeded, natQuotaExceededEvent 3 (maximum entries per user) | 260 | time, event, quota event, maxEntriesPerUser, inside address |
//! | 13 quota exceeded, natQuotaExceededEvent 1 (maximum session entries) | 261 | time, event, quota event, maxSessionEntries |

use std::net::{SocketAddr, UdpSocket};
use std::time::{SystemTime, UNIX_EPOCH};

use dataplane::Counters;

use crate::flow_table::FlowKey;

/// natEvent: NAT44 session create.
pub const EV_SESSION_CREATE: u8 = 4;
/// natEvent: NAT44 session delete.
pub const EV_SESSION_DELETE: u8 = 5;
/// natEvent: NAT ports exhausted.
pub const EV_PORTS_EXHAUSTED: u8 = 12;
/// natEvent: port block allocation.
pub const EV_BLOCK_ALLOC: u8 = 16;
/// natEvent: port block de-allocation.
pub const EV_BLOCK_FREE: u8 = 17;
/// natEvent: NAT addresses exhausted.
pub const EV_ADDRESSES_EXHAUSTED: u8 = 3;
/// natEvent: quota exceeded.
pub const EV_QUOTA_EXCEEDED: u8 = 13;
/// natQuotaExceededEvent: maximum session entries.
pub const QUOTA_SESSIONS: u32 = 1;
/// natQuotaExceededEvent: maximum entries per user.
pub const QUOTA_PER_USER: u32 = 3;

/// Template ID of session records.
pub const TPL_SESSION: u16 = 256;
/// Template ID of exhaustion records.
pub const TPL_EXHAUSTED: u16 = 257;
/// Template ID of port block records.
pub const TPL_BLOCK: u16 = 258;
/// Template ID of addresses-exhausted records.
pub const TPL_ADDRESSES: u16 = 259;
/// Template ID of per-user quota records.
pub const TPL_QUOTA_USER: u16 = 260;
/// Template ID of session-table quota records.
pub const TPL_QUOTA_SESSIONS: u16 = 261;

/// Information elements (IANA IPFIX registry numbers, RFC 7012 / RFC 8158).
mod ie {
    pub const PROTOCOL_IDENTIFIER: u16 = 4;
    pub const SOURCE_TRANSPORT_PORT: u16 = 7;
    pub const SOURCE_IPV4_ADDRESS: u16 = 8;
    pub const DESTINATION_TRANSPORT_PORT: u16 = 11;
    pub const DESTINATION_IPV4_ADDRESS: u16 = 12;
    pub const POST_NAT_SOURCE_IPV4_ADDRESS: u16 = 225;
    pub const POST_NAPT_SOURCE_TRANSPORT_PORT: u16 = 227;
    pub const NAT_EVENT: u16 = 230;
    pub const OBSERVATION_TIME_MILLISECONDS: u16 = 323;
    pub const PORT_RANGE_START: u16 = 361;
    pub const PORT_RANGE_END: u16 = 362;
    pub const PORT_RANGE_STEP_SIZE: u16 = 363;
    pub const PORT_RANGE_NUM_PORTS: u16 = 364;
    pub const NAT_POOL_ID: u16 = 283;
    pub const NAT_QUOTA_EXCEEDED_EVENT: u16 = 466;
    pub const MAX_SESSION_ENTRIES: u16 = 471;
    pub const MAX_ENTRIES_PER_USER: u16 = 473;
}

/// The fields of each template, in record order: (information element, length in bytes).
pub const TEMPLATES: [(u16, &[(u16, u16)]); 6] = [
    (
        TPL_SESSION,
        &[
            (ie::OBSERVATION_TIME_MILLISECONDS, 8),
            (ie::NAT_EVENT, 1),
            (ie::SOURCE_IPV4_ADDRESS, 4),
            (ie::POST_NAT_SOURCE_IPV4_ADDRESS, 4),
            (ie::PROTOCOL_IDENTIFIER, 1),
            (ie::SOURCE_TRANSPORT_PORT, 2),
            (ie::POST_NAPT_SOURCE_TRANSPORT_PORT, 2),
            (ie::DESTINATION_IPV4_ADDRESS, 4),
            (ie::DESTINATION_TRANSPORT_PORT, 2),
        ],
    ),
    (
        TPL_EXHAUSTED,
        &[
            (ie::OBSERVATION_TIME_MILLISECONDS, 8),
            (ie::NAT_EVENT, 1),
            (ie::POST_NAT_SOURCE_IPV4_ADDRESS, 4),
            (ie::PROTOCOL_IDENTIFIER, 1),
        ],
    ),
    (
        TPL_BLOCK,
        &[
            (ie::OBSERVATION_TIME_MILLISECONDS, 8),
            (ie::NAT_EVENT, 1),
            (ie::SOURCE_IPV4_ADDRESS, 4),
            (ie::POST_NAT_SOURCE_IPV4_ADDRESS, 4),
            (ie::PORT_RANGE_START, 2),
            (ie::PORT_RANGE_END, 2),
            (ie::PORT_RANGE_STEP_SIZE, 2),
            (ie::PORT_RANGE_NUM_PORTS, 2),
        ],
    ),
    (
        TPL_ADDRESSES,
        &[
            (ie::OBSERVATION_TIME_MILLISECONDS, 8),
            (ie::NAT_EVENT, 1),
            (ie::NAT_POOL_ID, 4),
        ],
    ),
    (
        TPL_QUOTA_USER,
        &[
            (ie::OBSERVATION_TIME_MILLISECONDS, 8),
            (ie::NAT_EVENT, 1),
            (ie::NAT_QUOTA_EXCEEDED_EVENT, 4),
            (ie::MAX_ENTRIES_PER_USER, 4),
            (ie::SOURCE_IPV4_ADDRESS, 4),
        ],
    ),
    (
        TPL_QUOTA_SESSIONS,
        &[
            (ie::OBSERVATION_TIME_MILLISECONDS, 8),
            (ie::NAT_EVENT, 1),
            (ie::NAT_QUOTA_EXCEEDED_EVENT, 4),
            (ie::MAX_SESSION_ENTRIES, 4),
        ],
    ),
];

/// How often the templates are sent again, ms.
pub const TEMPLATE_REFRESH_MS: u64 = 10_000;

/// Bytes of one IPFIX message at most: fits a 1500 B MTU with IPv4 and UDP headers.
const MSG_BYTES: usize = 1400;
/// Messages buffered per worker between bursts.
const SLOTS: usize = 64;
/// IPFIX message header bytes.
const HDR: usize = 16;
/// Set header bytes.
const SET_HDR: usize = 4;

/// Bytes of a template's records.
const fn record_len(tpl: usize) -> usize {
    let f = TEMPLATES[tpl].1;
    let mut n = 0;
    let mut i = 0;
    while i < f.len() {
        n += f[i].1 as usize;
        i += 1;
    }
    n
}

/// Bytes of each template's records, in [`TEMPLATES`] order.
const RECORD_LENS: [usize; 6] = [
    record_len(0),
    record_len(1),
    record_len(2),
    record_len(3),
    record_len(4),
    record_len(5),
];

/// Bytes of the template set announcing every template.
const fn template_set_len() -> usize {
    let mut n = SET_HDR;
    let mut i = 0;
    while i < TEMPLATES.len() {
        n += 4 + 4 * TEMPLATES[i].1.len();
        i += 1;
    }
    n
}

/// What the log counts (`nfs.nat.log.*` in the run summary).
#[derive(Clone, Debug, Default)]
struct LogCounters {
    records: u64,
    messages: u64,
    bytes: u64,
    templates: u64,
    lost: u64,
    send_failed: u64,
    refused: u64,
    exhaustion_suppressed: u64,
}

/// One worker's IPFIX exporter (see the module docs).
pub(super) struct NatLog {
    sock: UdpSocket,
    domain: u32,
    /// `SLOTS` messages of `MSG_BYTES`.
    buf: Vec<u8>,
    /// Bytes used in each slot.
    lens: Vec<usize>,
    /// Whether slot `cur` holds a message being filled.
    open_msg: bool,
    /// The slot filled next: the one after the `waiting` complete messages, oldest at `first`.
    cur: usize,
    first: usize,
    waiting: usize,
    /// Offset of the open data set in the current slot and its template ID (0: none).
    set_at: usize,
    set_tpl: u16,
    /// Data records before the current message (the header's sequence number).
    seq: u32,
    /// Records in the current message.
    in_msg: u32,
    /// Tick of the current message's first record.
    opened: u32,
    /// Wall clock: epoch ms at tick 0 (set by the first [`NatLog::sync`]).
    epoch_base: Option<u64>,
    now_ms: u64,
    now_tick: u32,
    next_template_ms: u64,
    flush_ms: u32,
    exhaustion_per_s: u32,
    exhaustion_window: u64,
    exhaustion_in_window: u32,
    /// natPoolId of addresses-exhausted records (the NAT's `instance`).
    pool_id: u32,
    c: LogCounters,
}

impl NatLog {
    /// An exporter for `worker` sending to `collector`; `flush_ms`: the most a record waits for
    /// more between bursts; `exhaustion_per_s`: the refusal records allowed per second;
    /// `pool_id`: the natPoolId of addresses-exhausted records.
    pub fn new(
        collector: SocketAddr,
        worker: u16,
        flush_ms: u32,
        exhaustion_per_s: u32,
        pool_id: u32,
    ) -> Result<Self, String> {
        let local: SocketAddr = if collector.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        }
        .parse()
        .map_err(|e| format!("{e}"))?;
        let sock = UdpSocket::bind(local)
            .and_then(|s| s.connect(collector).map(|()| s))
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .map_err(|e| format!("UDP socket towards {collector}: {e}"))?;
        Ok(Self {
            sock,
            domain: u32::from(worker) + 1,
            buf: vec![0; SLOTS * MSG_BYTES],
            lens: vec![0; SLOTS],
            open_msg: false,
            cur: 0,
            first: 0,
            waiting: 0,
            set_at: 0,
            set_tpl: 0,
            seq: 0,
            in_msg: 0,
            opened: 0,
            epoch_base: None,
            now_ms: 0,
            now_tick: 0,
            next_template_ms: 0,
            flush_ms,
            exhaustion_per_s,
            exhaustion_window: 0,
            exhaustion_in_window: 0,
            pool_id,
            c: LogCounters::default(),
        })
    }

    /// Takes the time of the burst about to be processed (`now_ns`, the run's clock): records
    /// carry wall-clock milliseconds, the run's clock offset by the wall clock at the first
    /// burst.
    pub fn sync(&mut self, now_ns: u64) {
        let ms = now_ns / 1_000_000;
        let base = *self.epoch_base.get_or_insert_with(|| {
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            wall.saturating_sub(ms)
        });
        self.now_ms = base + ms;
        self.now_tick = ms as u32;
    }

    /// Wall-clock ms of tick `t` (at or before the current burst).
    fn time_of(&self, t: u32) -> u64 {
        let back = self.now_tick.wrapping_sub(t) as i32;
        self.now_ms.saturating_add_signed(-i64::from(back))
    }

    /// Session created (`create`) or ended at tick `at`: inside 5-tuple `k`, outside endpoint.
    pub fn session(&mut self, create: bool, k: &FlowKey, nat_ip: u32, nat_port: u16, at: u32) {
        let ev = if create {
            EV_SESSION_CREATE
        } else {
            EV_SESSION_DELETE
        };
        let t = self.time_of(at);
        if let Some(r) = self.record(TPL_SESSION, 0) {
            r[0..8].copy_from_slice(&t.to_be_bytes());
            r[8] = ev;
            r[9..13].copy_from_slice(&k.src().to_be_bytes());
            r[13..17].copy_from_slice(&nat_ip.to_be_bytes());
            r[17] = k.proto();
            r[18..20].copy_from_slice(&k.sport().to_be_bytes());
            r[20..22].copy_from_slice(&nat_port.to_be_bytes());
            r[22..26].copy_from_slice(&k.dst().to_be_bytes());
            r[26..28].copy_from_slice(&k.dport().to_be_bytes());
        }
    }

    /// True when a refusal record may leave this second (else it is counted as suppressed).
    fn refusal_allowed(&mut self) -> bool {
        let second = self.now_ms / 1000;
        if second != self.exhaustion_window {
            self.exhaustion_window = second;
            self.exhaustion_in_window = 0;
        }
        if self.exhaustion_in_window >= self.exhaustion_per_s {
            self.c.exhaustion_suppressed += 1;
            return false;
        }
        self.exhaustion_in_window += 1;
        true
    }

    /// No outside address can take a new subscriber (rate limited).
    pub fn addresses_exhausted(&mut self) {
        if !self.refusal_allowed() {
            return;
        }
        let (t, id) = (self.now_ms, self.pool_id);
        if let Some(r) = self.record(TPL_ADDRESSES, 3) {
            r[0..8].copy_from_slice(&t.to_be_bytes());
            r[8] = EV_ADDRESSES_EXHAUSTED;
            r[9..13].copy_from_slice(&id.to_be_bytes());
        }
    }

    /// Subscriber `inside` is at its quota of `limit` entries (rate limited).
    pub fn quota_per_user(&mut self, inside: u32, limit: u32) {
        if !self.refusal_allowed() {
            return;
        }
        let t = self.now_ms;
        if let Some(r) = self.record(TPL_QUOTA_USER, 4) {
            r[0..8].copy_from_slice(&t.to_be_bytes());
            r[8] = EV_QUOTA_EXCEEDED;
            r[9..13].copy_from_slice(&QUOTA_PER_USER.to_be_bytes());
            r[13..17].copy_from_slice(&limit.to_be_bytes());
            r[17..21].copy_from_slice(&inside.to_be_bytes());
        }
    }

    /// The worker's session table (`max` sessions) has no room (rate limited).
    pub fn quota_sessions(&mut self, max: u32) {
        if !self.refusal_allowed() {
            return;
        }
        let t = self.now_ms;
        if let Some(r) = self.record(TPL_QUOTA_SESSIONS, 5) {
            r[0..8].copy_from_slice(&t.to_be_bytes());
            r[8] = EV_QUOTA_EXCEEDED;
            r[9..13].copy_from_slice(&QUOTA_SESSIONS.to_be_bytes());
            r[13..17].copy_from_slice(&max.to_be_bytes());
        }
    }

    /// True while records wait to be sent (a message being filled or complete ones).
    pub fn pending(&self) -> bool {
        self.open_msg || self.waiting > 0
    }

    /// No port left on outside address `nat_ip` for `proto` (rate limited).
    pub fn exhausted(&mut self, nat_ip: u32, proto: u8) {
        if !self.refusal_allowed() {
            return;
        }
        let t = self.now_ms;
        if let Some(r) = self.record(TPL_EXHAUSTED, 1) {
            r[0..8].copy_from_slice(&t.to_be_bytes());
            r[8] = EV_PORTS_EXHAUSTED;
            r[9..13].copy_from_slice(&nat_ip.to_be_bytes());
            r[13] = proto;
        }
    }

    /// Port block `first..=last` of outside address `nat_ip` allocated to (`alloc`) or released
    /// by subscriber `inside`, now.
    pub fn block(&mut self, alloc: bool, inside: u32, nat_ip: u32, first: u16, last: u16) {
        let t = self.now_ms;
        if let Some(r) = self.record(TPL_BLOCK, 2) {
            r[0..8].copy_from_slice(&t.to_be_bytes());
            r[8] = if alloc { EV_BLOCK_ALLOC } else { EV_BLOCK_FREE };
            r[9..13].copy_from_slice(&inside.to_be_bytes());
            r[13..17].copy_from_slice(&nat_ip.to_be_bytes());
            r[17..19].copy_from_slice(&first.to_be_bytes());
            r[19..21].copy_from_slice(&last.to_be_bytes());
            r[21..23].copy_from_slice(&1u16.to_be_bytes());
            r[23..25].copy_from_slice(&(last - first + 1).to_be_bytes());
        }
    }

    /// Room for one record of template `tpl` (index `ti` in [`TEMPLATES`]), or `None` when every
    /// slot is full (counted as `lost`).
    fn record(&mut self, tpl: u16, ti: usize) -> Option<&mut [u8]> {
        let len = RECORD_LENS[ti];
        let need = len + if self.set_tpl == tpl { 0 } else { SET_HDR };
        if self.open_msg && MSG_BYTES - self.lens[self.cur] < need {
            self.close();
        }
        if !self.open_msg && !self.open() {
            self.c.lost += 1;
            return None;
        }
        if self.set_tpl != tpl {
            self.close_set();
            let at = self.cur * MSG_BYTES + self.lens[self.cur];
            self.buf[at..at + 2].copy_from_slice(&tpl.to_be_bytes());
            self.set_at = self.lens[self.cur];
            self.set_tpl = tpl;
            self.lens[self.cur] += SET_HDR;
        }
        let at = self.cur * MSG_BYTES + self.lens[self.cur];
        self.lens[self.cur] += len;
        self.in_msg += 1;
        self.c.records += 1;
        Some(&mut self.buf[at..at + len])
    }

    /// Starts a message in the current slot (false: every slot waits to be sent). The template
    /// set comes first when it is due.
    fn open(&mut self) -> bool {
        if self.waiting == SLOTS {
            return false;
        }
        let base = self.cur * MSG_BYTES;
        let mut len = HDR;
        if self.now_ms >= self.next_template_ms {
            self.next_template_ms = self.now_ms + TEMPLATE_REFRESH_MS;
            let tl = const { template_set_len() };
            let b = &mut self.buf[base + len..base + len + tl];
            b[0..2].copy_from_slice(&2u16.to_be_bytes());
            b[2..4].copy_from_slice(&(tl as u16).to_be_bytes());
            let mut o = SET_HDR;
            for (id, fields) in TEMPLATES {
                b[o..o + 2].copy_from_slice(&id.to_be_bytes());
                b[o + 2..o + 4].copy_from_slice(&(fields.len() as u16).to_be_bytes());
                o += 4;
                for &(f, l) in fields {
                    b[o..o + 2].copy_from_slice(&f.to_be_bytes());
                    b[o + 2..o + 4].copy_from_slice(&l.to_be_bytes());
                    o += 4;
                }
            }
            len += tl;
            self.c.templates += 1;
        }
        self.lens[self.cur] = len;
        self.open_msg = true;
        self.set_tpl = 0;
        self.in_msg = 0;
        self.opened = self.now_tick;
        true
    }

    /// Writes the open data set's length.
    fn close_set(&mut self) {
        if self.set_tpl != 0 {
            let at = self.cur * MSG_BYTES + self.set_at;
            let n = (self.lens[self.cur] - self.set_at) as u16;
            self.buf[at + 2..at + 4].copy_from_slice(&n.to_be_bytes());
            self.set_tpl = 0;
        }
    }

    /// Completes the current message (its header) and moves to the next slot.
    fn close(&mut self) {
        self.close_set();
        let base = self.cur * MSG_BYTES;
        let len = self.lens[self.cur];
        let h = &mut self.buf[base..base + HDR];
        h[0..2].copy_from_slice(&10u16.to_be_bytes());
        h[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        h[4..8].copy_from_slice(&((self.now_ms / 1000) as u32).to_be_bytes());
        h[8..12].copy_from_slice(&self.seq.to_be_bytes());
        h[12..16].copy_from_slice(&self.domain.to_be_bytes());
        self.seq = self.seq.wrapping_add(self.in_msg);
        self.open_msg = false;
        self.waiting += 1;
        self.cur = (self.cur + 1) % SLOTS;
    }

    /// Between bursts: sends every complete message, and the one being filled when `all` or
    /// when its first record is `log_flush_ms` old.
    pub fn flush(&mut self, all: bool) {
        let due = self.now_tick.wrapping_sub(self.opened) >= self.flush_ms;
        if self.open_msg && (all || due) {
            self.close();
        }
        self.send_complete();
    }

    /// Sends every complete message (a command that ends many sessions at once calls it as it
    /// goes, so the buffer never fills).
    pub fn send_complete(&mut self) {
        while self.waiting > 0 {
            let base = self.first * MSG_BYTES;
            let len = self.lens[self.first];
            let msg = &self.buf[base..base + len];
            // A refusal reports an earlier message (the collector's port was closed when it
            // arrived), not this one: counted, and this one is sent again.
            let sent = self.sock.send(msg).or_else(|e| {
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    self.c.refused += 1;
                    self.sock.send(msg)
                } else {
                    Err(e)
                }
            });
            match sent {
                Ok(_) => {
                    self.c.messages += 1;
                    self.c.bytes += len as u64;
                }
                Err(_) => self.c.send_failed += 1,
            }
            self.lens[self.first] = 0;
            self.first = (self.first + 1) % SLOTS;
            self.waiting -= 1;
        }
    }

    /// The counters (`nfs.nat.log.*`).
    pub fn counters(&self) -> Counters {
        let c = &self.c;
        let mut v = Counters::new();
        v.count("records", c.records)
            .count("messages", c.messages)
            .count("bytes", c.bytes)
            .count("template_sets", c.templates)
            .count("lost", c.lost)
            .count("send_failed", c.send_failed)
            .count("refused", c.refused)
            .count("exhaustion_suppressed", c.exhaustion_suppressed);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn collector() -> (UdpSocket, SocketAddr) {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let a = s.local_addr().unwrap();
        (s, a)
    }

    fn be16(b: &[u8], o: usize) -> u16 {
        u16::from_be_bytes([b[o], b[o + 1]])
    }

    fn be32(b: &[u8], o: usize) -> u32 {
        u32::from_be_bytes(b[o..o + 4].try_into().unwrap())
    }

    /// The sets of one message: (set ID, body).
    fn sets(m: &[u8]) -> Vec<(u16, Vec<u8>)> {
        assert_eq!(be16(m, 0), 10, "IPFIX version");
        assert_eq!(be16(m, 2) as usize, m.len(), "message length");
        let mut o = HDR;
        let mut v = Vec::new();
        while o < m.len() {
            let (id, n) = (be16(m, o), be16(m, o + 2) as usize);
            assert!(n >= SET_HDR && o + n <= m.len(), "set length {n} at {o}");
            v.push((id, m[o + SET_HDR..o + n].to_vec()));
            o += n;
        }
        v
    }

    #[test]
    fn sessions_leave_as_one_message_with_templates_and_records() {
        let (rx, a) = collector();
        let mut log = NatLog::new(a, 2, 100, 10, 0).unwrap();
        log.sync(5_000_000_000);
        let k = FlowKey::new(0x1001_0101, 0x3001_0101, 1234, 53, 17);
        log.session(true, &k, 0x0a00_0001, 40000, 5000);
        log.session(false, &k, 0x0a00_0001, 40000, 4990);
        log.flush(false);
        let mut b = [0u8; 2048];
        assert!(rx.set_nonblocking(true).is_ok());
        assert!(rx.recv(&mut b).is_err(), "sent before log_flush_ms");
        log.flush(true);
        rx.set_nonblocking(false).unwrap();
        let n = rx.recv(&mut b).unwrap();
        let m = &b[..n];
        assert_eq!(be32(m, 8), 0, "sequence: no record before");
        assert_eq!(be32(m, 12), 3, "observation domain = worker + 1");
        let s = sets(m);
        assert_eq!(s[0].0, 2, "template set first");
        assert_eq!(be16(&s[0].1, 0), TPL_SESSION);
        assert_eq!(be16(&s[0].1, 2), 9, "fields of the session template");
        assert_eq!(s[1].0, TPL_SESSION);
        let r = &s[1].1;
        assert_eq!(r.len(), 2 * RECORD_LENS[0]);
        let t0 = u64::from_be_bytes(r[0..8].try_into().unwrap());
        let t1 = u64::from_be_bytes(r[28..36].try_into().unwrap());
        assert_eq!(t0 - t1, 10, "the delete is dated 10 ms before the burst");
        assert_eq!((r[8], r[36]), (EV_SESSION_CREATE, EV_SESSION_DELETE));
        assert_eq!(be32(r, 9), 0x1001_0101);
        assert_eq!(be32(r, 13), 0x0a00_0001);
        assert_eq!(r[17], 17);
        assert_eq!((be16(r, 18), be16(r, 20)), (1234, 40000));
        assert_eq!((be32(r, 22), be16(r, 26)), (0x3001_0101, 53));
        let c = log.counters();
        assert_eq!(c.count_at("records"), Some(2));
        assert_eq!(c.count_at("messages"), Some(1));
        assert_eq!(c.count_at("template_sets"), Some(1));
        // The next message carries no template (not due) and counts the records before it.
        log.session(true, &k, 0x0a00_0001, 40000, 5000);
        log.flush(true);
        let n = rx.recv(&mut b).unwrap();
        assert_eq!(be32(&b, 8), 2);
        assert_eq!(sets(&b[..n])[0].0, TPL_SESSION);
    }

    #[test]
    fn a_full_buffer_counts_lost_events_and_full_messages_fit() {
        let (rx, a) = collector();
        let mut log = NatLog::new(a, 0, 100, 10, 0).unwrap();
        log.sync(0);
        let k = FlowKey::new(1, 2, 3, 4, 6);
        let per_msg = (MSG_BYTES - HDR - SET_HDR) / RECORD_LENS[0];
        let fit = SLOTS * per_msg;
        for _ in 0..fit + 100 {
            log.session(true, &k, 9, 9, 0);
        }
        let c = log.counters();
        assert!(c.count_at("lost").unwrap() >= 100, "{c}");
        let kept = c.count_at("records").unwrap();
        log.flush(true);
        let mut b = [0u8; 2048];
        let mut got = 0;
        let mut seq = 0;
        for _ in 0..SLOTS {
            let n = rx.recv(&mut b).unwrap();
            assert!(n <= MSG_BYTES);
            assert_eq!(be32(&b, 8), seq);
            for (id, body) in sets(&b[..n]) {
                if id == TPL_SESSION {
                    assert_eq!(body.len() % RECORD_LENS[0], 0);
                    got += (body.len() / RECORD_LENS[0]) as u64;
                    seq += (body.len() / RECORD_LENS[0]) as u32;
                }
            }
        }
        assert_eq!(got, kept, "every kept record arrives");
        assert_eq!(log.counters().count_at("messages"), Some(SLOTS as u64));
    }

    #[test]
    fn addresses_and_quota_records_carry_their_fields_and_share_the_rate_limit() {
        let (rx, a) = collector();
        let mut log = NatLog::new(a, 0, 100, 3, 7).unwrap();
        log.sync(1_000_000_000);
        assert!(!log.pending());
        log.addresses_exhausted();
        log.quota_per_user(0x6440_0005, 64);
        log.quota_sessions(1000);
        assert!(log.pending());
        log.exhausted(0x0a00_0001, 17);
        assert_eq!(log.counters().count_at("exhaustion_suppressed"), Some(1));
        log.flush(true);
        assert!(!log.pending());
        let mut b = [0u8; 2048];
        let n = rx.recv(&mut b).unwrap();
        let s = sets(&b[..n]);
        let body = |id: u16| s.iter().find(|(i, _)| *i == id).unwrap().1.clone();
        let r = body(TPL_ADDRESSES);
        assert_eq!(
            (r.len(), r[8], be32(&r, 9)),
            (13, EV_ADDRESSES_EXHAUSTED, 7)
        );
        let r = body(TPL_QUOTA_USER);
        assert_eq!(r[8], EV_QUOTA_EXCEEDED);
        assert_eq!(
            (be32(&r, 9), be32(&r, 13), be32(&r, 17)),
            (QUOTA_PER_USER, 64, 0x6440_0005)
        );
        let r = body(TPL_QUOTA_SESSIONS);
        assert_eq!(
            (r[8], be32(&r, 9), be32(&r, 13)),
            (EV_QUOTA_EXCEEDED, QUOTA_SESSIONS, 1000)
        );
        // Every template is announced with its field count.
        let t = &s[0].1;
        let mut o = 0;
        for (id, fields) in TEMPLATES {
            assert_eq!((be16(t, o), be16(t, o + 2) as usize), (id, fields.len()));
            o += 4 + 4 * fields.len();
        }
    }

    #[test]
    fn exhaustion_is_rate_limited_per_second() {
        let (_rx, a) = collector();
        let mut log = NatLog::new(a, 0, 100, 3, 0).unwrap();
        log.sync(1_000_000_000);
        for _ in 0..10 {
            log.exhausted(0x0a00_0001, 17);
        }
        let c = log.counters();
        assert_eq!(c.count_at("records"), Some(3));
        assert_eq!(c.count_at("exhaustion_suppressed"), Some(7));
        log.sync(2_000_000_000);
        log.exhausted(0x0a00_0001, 17);
        assert_eq!(log.counters().count_at("records"), Some(4));
    }
}
