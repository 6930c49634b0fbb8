//! Neighbours: which MAC address each next hop has, learned by ARP or configured
//! (`[[neighbor]]`), shared by every worker of a run.
//!
//! The table is one map behind a mutex, written only by the slow path (ARP in, resolution
//! started, retries and timeouts), never per packet. Every change that makes an address usable
//! or unusable bumps a generation counter; each worker's route stage keeps its own copy of the
//! resolved entries ([`NeighborCache`]) and re-copies it when it sees a new generation, one
//! atomic load per burst. So the per-packet lookup is a read of the worker's own small hash map,
//! with no lock and no shared cache line written.
//!
//! States, after Linux's neighbour table: *static* (configured, never changes), *reachable*
//! (answered ARP), *incomplete* (a request is out; retried every `retry_ms`, up to `retries`
//! requests), *failed* (no answer: packets waiting for it are dropped as `arp_unresolved`; the
//! next packet for it starts a new resolution).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::addr::MacAddr;

/// What the table knows of one neighbour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeighborState {
    /// Configured (`[[neighbor]]`); ARP never changes it.
    Static,
    /// Learned from ARP.
    Reachable,
    /// A request is out: `tries` sent so far, the last at `last_ms`.
    Incomplete {
        /// Requests sent.
        tries: u32,
        /// When the last one was sent (ms since the network's epoch).
        last_ms: u64,
    },
    /// Resolution gave up.
    Failed,
}

/// One neighbour as the summary lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborEntry {
    /// The port it is reached by.
    pub port: u16,
    /// Its IPv4 address.
    pub ip: u32,
    /// Its MAC (all zero while unresolved).
    pub mac: MacAddr,
    /// Its state.
    pub state: NeighborState,
}

/// What learning an ARP packet did to the table (see [`Neighbors::learn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    /// An incomplete (or failed) entry got its MAC: packets waiting for it can go.
    Resolved,
    /// A new entry was made, or a known one refreshed or changed.
    Updated,
    /// Nothing changed (a static entry, or no entry and none to be made).
    Ignored,
}

/// A hasher for the `(port, address)` keys: one multiplication (the keys are not chosen by an
/// attacker who could aim at one bucket: a peer can only announce addresses on its own subnet).
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Map<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

#[inline]
fn key(port: u16, ip: u32) -> u64 {
    u64::from(port) << 32 | u64::from(ip)
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    mac: MacAddr,
    state: NeighborState,
}

/// The run's neighbour table (see the module docs).
#[derive(Debug, Default)]
pub struct Neighbors {
    map: Mutex<Map<Entry>>,
    generation: AtomicU64,
    /// The earliest time (ms) a retry or a timeout is due; `u64::MAX` when nothing is pending.
    next_due_ms: AtomicU64,
}

impl Neighbors {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            map: Mutex::new(Map::default()),
            generation: AtomicU64::new(0),
            next_due_ms: AtomicU64::new(u64::MAX),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Map<Entry>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Changes that made an address usable or unusable so far.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Adds a static entry (`[[neighbor]]`).
    pub fn add_static(&self, port: u16, ip: u32, mac: MacAddr) {
        self.lock().insert(
            key(port, ip),
            Entry {
                mac,
                state: NeighborState::Static,
            },
        );
        self.bump();
    }

    /// The MAC of `ip` on `port`, if it is resolved.
    pub fn resolved(&self, port: u16, ip: u32) -> Option<MacAddr> {
        self.lock().get(&key(port, ip)).and_then(|e| match e.state {
            NeighborState::Static | NeighborState::Reachable => Some(e.mac),
            _ => None,
        })
    }

    /// True when resolution of `ip` on `port` has failed (packets waiting for it must go).
    pub fn failed(&self, port: u16, ip: u32) -> bool {
        self.lock()
            .get(&key(port, ip))
            .is_some_and(|e| e.state == NeighborState::Failed)
    }

    /// A packet needs `ip` on `port`, which the caller could not resolve: starts resolution if
    /// none is under way (a new or failed entry becomes incomplete with one request sent).
    /// Returns true when the caller must send that first request now; false when the neighbour
    /// is resolved already or a request is out (its retries are [`Neighbors::due`]'s).
    pub fn solicit(&self, port: u16, ip: u32, now_ms: u64, retry_ms: u64) -> bool {
        let mut m = self.lock();
        let e = m.entry(key(port, ip)).or_insert(Entry {
            mac: MacAddr::default(),
            state: NeighborState::Failed,
        });
        if e.state != NeighborState::Failed {
            return false;
        }
        e.state = NeighborState::Incomplete {
            tries: 1,
            last_ms: now_ms,
        };
        drop(m);
        self.next_due_ms
            .fetch_min(now_ms + retry_ms, Ordering::AcqRel);
        true
    }

    /// True when a retry or a timeout may be due at `now_ms` (one atomic load; the caller then
    /// runs [`Neighbors::due`]).
    #[inline]
    pub fn anything_due(&self, now_ms: u64) -> bool {
        now_ms >= self.next_due_ms.load(Ordering::Acquire)
    }

    /// True while some request is out (a timer is set); one atomic load, no clock.
    #[inline]
    pub fn pending_timers(&self) -> bool {
        self.next_due_ms.load(Ordering::Acquire) != u64::MAX
    }

    /// Runs the timers at `now_ms`: every incomplete entry whose last request is `retry_ms` old
    /// either gets another request (appended to `resend`, counted as sent) or, after `retries`
    /// requests, fails. Returns the number of entries that failed.
    pub fn due(
        &self,
        now_ms: u64,
        retry_ms: u64,
        retries: u32,
        resend: &mut Vec<(u16, u32)>,
    ) -> usize {
        let mut failed = 0;
        let mut next = u64::MAX;
        let mut m = self.lock();
        for (k, e) in m.iter_mut() {
            if let NeighborState::Incomplete { tries, last_ms } = e.state {
                if now_ms < last_ms + retry_ms {
                    next = next.min(last_ms + retry_ms);
                } else if tries >= retries {
                    e.state = NeighborState::Failed;
                    failed += 1;
                } else {
                    e.state = NeighborState::Incomplete {
                        tries: tries + 1,
                        last_ms: now_ms,
                    };
                    resend.push(((k >> 32) as u16, *k as u32));
                    next = next.min(now_ms + retry_ms);
                }
            }
        }
        drop(m);
        self.next_due_ms.store(next, Ordering::Release);
        if failed > 0 {
            self.bump();
        }
        failed
    }

    /// Takes what an ARP packet from `ip` at `mac` on `port` says. A known entry is updated
    /// (unless static); a new one is made only with `create` (the packet asked for one of our
    /// addresses, as Linux does).
    pub fn learn(&self, port: u16, ip: u32, mac: MacAddr, create: bool) -> Learned {
        let mut m = self.lock();
        let out = match m.get_mut(&key(port, ip)) {
            Some(e) => match e.state {
                NeighborState::Static => Learned::Ignored,
                NeighborState::Reachable if e.mac == mac => Learned::Ignored,
                NeighborState::Reachable => {
                    e.mac = mac;
                    Learned::Updated
                }
                NeighborState::Incomplete { .. } | NeighborState::Failed => {
                    *e = Entry {
                        mac,
                        state: NeighborState::Reachable,
                    };
                    Learned::Resolved
                }
            },
            None if create => {
                m.insert(
                    key(port, ip),
                    Entry {
                        mac,
                        state: NeighborState::Reachable,
                    },
                );
                Learned::Updated
            }
            None => Learned::Ignored,
        };
        drop(m);
        if out != Learned::Ignored {
            self.bump();
        }
        out
    }

    /// Every entry, sorted by port and address.
    pub fn entries(&self) -> Vec<NeighborEntry> {
        let mut v: Vec<NeighborEntry> = self
            .lock()
            .iter()
            .map(|(k, e)| NeighborEntry {
                port: (k >> 32) as u16,
                ip: *k as u32,
                mac: e.mac,
                state: e.state,
            })
            .collect();
        v.sort_by_key(|e| (e.port, e.ip));
        v
    }

    /// Copies the resolved entries into `cache` if the table changed since the cache's copy.
    pub fn refresh(&self, cache: &mut NeighborCache) {
        let g = self.generation();
        if g == cache.generation {
            return;
        }
        cache.map.clear();
        for (k, e) in self.lock().iter() {
            if matches!(e.state, NeighborState::Static | NeighborState::Reachable) {
                cache.map.insert(*k, e.mac);
            }
        }
        cache.generation = g;
    }
}

/// A worker's copy of the resolved neighbours (see the module docs).
#[derive(Debug)]
pub struct NeighborCache {
    map: Map<MacAddr>,
    generation: u64,
}

impl Default for NeighborCache {
    fn default() -> Self {
        Self {
            map: Map::default(),
            generation: u64::MAX,
        }
    }
}

impl NeighborCache {
    /// The MAC of `ip` on `port` as of the last refresh.
    #[inline]
    pub fn get(&self, port: u16, ip: u32) -> Option<MacAddr> {
        self.map.get(&key(port, ip)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u32 = 0x0a00_0102;
    const MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 9]);

    #[test]
    fn resolution_retries_then_fails_then_restarts() {
        let n = Neighbors::new();
        let mut resend = Vec::new();
        assert!(n.solicit(1, A, 0, 1000), "the first need sends a request");
        assert!(!n.solicit(1, A, 10, 1000), "one request at a time");
        assert!(!n.anything_due(999) && n.anything_due(1000));
        assert_eq!(n.due(1000, 1000, 3, &mut resend), 0);
        assert_eq!(resend, vec![(1, A)]);
        assert_eq!(n.due(2000, 1000, 3, &mut resend), 0);
        assert_eq!(resend.len(), 2);
        let g = n.generation();
        assert_eq!(
            n.due(3000, 1000, 3, &mut resend),
            1,
            "three requests: failed"
        );
        assert!(n.failed(1, A) && n.generation() > g);
        assert!(!n.anything_due(1_000_000), "nothing pending");
        assert!(n.solicit(1, A, 5000, 1000), "a new packet starts over");
        assert_eq!(n.learn(1, A, MAC, false), Learned::Resolved);
        assert_eq!(n.resolved(1, A), Some(MAC));
        assert_eq!(n.resolved(0, A), None, "per port");
    }

    #[test]
    fn learning_respects_static_entries_and_creation() {
        let n = Neighbors::new();
        assert_eq!(n.learn(0, A, MAC, false), Learned::Ignored);
        assert_eq!(n.resolved(0, A), None);
        assert_eq!(n.learn(0, A, MAC, true), Learned::Updated);
        assert_eq!(n.learn(0, A, MAC, true), Learned::Ignored, "no change");
        n.add_static(0, A + 1, MAC);
        assert_eq!(
            n.learn(0, A + 1, MacAddr([2, 0, 0, 0, 0, 1]), true),
            Learned::Ignored
        );
        assert_eq!(n.resolved(0, A + 1), Some(MAC));
        let mut c = NeighborCache::default();
        n.refresh(&mut c);
        assert_eq!((c.get(0, A), c.get(0, A + 1)), (Some(MAC), Some(MAC)));
        assert_eq!(n.entries().len(), 2);
    }
}
