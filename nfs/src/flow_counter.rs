//! Flow counter: exact per-flow packets, bytes, first and last seen; top-k by bytes; dumps to JSON
//! or CSV.
//!
//! # Model
//!
//! - Every IPv4 packet is attributed to its 5-tuple (ICMP queries by identifier; later fragments
//!   and other protocols with ports 0). Bytes are the whole frame length ([`Burst::frame_len`],
//!   without FCS): the header segment alone would undercount split packets.
//! - **Per burst**: headers are parsed with a prefetch a few packets ahead, the keys of the
//!   burst are hashed and looked up in bulk, then every record is updated in packet order.
//! - Records live in this core's [`FlowTable`] (value: 32 B record; 2 + 64 B per slot, 73-147 B per
//!   flow at full capacity), on 2 MiB pages where the machine has them. No allocation per packet.
//! - The flow counter is a monitor: it never drops traffic by default. Frames it cannot
//!   attribute (non-IPv4, truncated, malformed, or headers beyond the header segment, the latter
//!   also counted as `header_segment_short`) are forwarded and counted as `unparsed`. When a
//!   new flow finds no room, `full_policy = "skip"` (default) forwards the packet uncounted
//!   (`table_full`), `"evict"` replaces the least recently seen record of the candidate buckets
//!   (its counts move to `evicted_packets`/`evicted_bytes`), `"drop"` drops the packet as
//!   `flow_table_full`.
//! - Optional idle timeout (`idle_timeout_s`, default 0 = keep every record until the dump):
//!   a record idle for longer is closed, its counts move to `expired_packets`/`expired_bytes`,
//!   and a later packet starts a new record. Closing happens lazily on lookup and by an
//!   incremental scan of `scan_buckets_per_burst` buckets per burst.
//! - So totals always add up: `packets = unparsed + table_full + sum(records) + expired_packets
//!   + evicted_packets` (plus `dropped` for the drop policy).
//! - **Dumps**: [`FlowCounter::dump_json`], [`FlowCounter::write_csv`] and
//!   [`FlowCounter::dump_to`] on demand; with `dump_path` set, [`NetworkFunction::finish`] writes
//!   the file (`.csv` -> CSV, anything else -> JSON). Each worker writes its own file:
//!   `{worker}` in the path is replaced by the worker index, and without it a multi-worker run
//!   appends `-w<index>` before the extension. A write error is reported in the stats as
//!   `dump_error`. Top-k is computed at dump time with a bounded heap (O(flows · log k)).
#![forbid(unsafe_code)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use dataplane::{Burst, DropCounts, DropReason, NetworkFunction, NfContext, PREFETCH_AHEAD};
use serde::{Deserialize, Serialize};
use wire::classify::{ParseError, parse};

use crate::flow_table::{BULK, FlowKey, FlowTable, FullPolicy, NO_SLOT, TableValue};
use crate::params::{bad_param, mix_seed, parse_params, timeout_ms};
use crate::registry::{BuildContext, Memory, NfSpec, Param, defaults_of, drop_counters};

/// The registration of `flow_counter`.
pub const SPEC: NfSpec = NfSpec {
    name: "flow_counter",
    aliases: &["flow-counter"],
    summary: "Exact per-flow packets, bytes, first and last seen; top-k by bytes; dumps to JSON \
              or CSV. A monitor: it forwards everything unless told to drop on a full table.",
    params: &[
        Param {
            name: "flows",
            doc: "records across all workers (each worker holds `flows / workers`), at least 1",
        },
        Param {
            name: "idle_timeout_s",
            doc: "seconds a record may be idle before it is closed (0: never), at most 2000000",
        },
        Param {
            name: "full_policy",
            doc: "a new flow with no room: `skip` (forward uncounted), `evict` (the least \
                  recently seen record of its buckets) or `drop` (as `flow_table_full`)",
        },
        Param {
            name: "dump_path",
            doc: "file the records are written to at the end (`.csv`, else JSON); `{worker}` is \
                  replaced by the worker index",
        },
        Param {
            name: "top_k",
            doc: "flows the dump lists in `top_k`, by bytes",
        },
        Param {
            name: "scan_buckets_per_burst",
            doc: "buckets scanned for idle records per burst",
        },
        Param {
            name: "seed",
            doc: "hash seed (mixed with the worker index)",
        },
    ],
    defaults: defaults_of::<FlowCounterConfig>,
    drop_reasons: &[],
    build,
    memory,
};

/// The name its counters are reported under (`nfs.flow-counter`), kept from the first release.
pub const NAME: &str = "flow-counter";

fn build(params: &toml::Table, ctx: &BuildContext) -> Result<Box<dyn NetworkFunction>, String> {
    Ok(Box::new(FlowCounter::from_params(
        params,
        ctx.worker,
        ctx.workers,
    )?))
}

fn memory(params: &toml::Table, ctx: &BuildContext) -> Option<Memory> {
    let c: FlowCounterConfig = parse_params(SPEC.name, params).ok()?;
    let per_worker = c.flows.div_ceil(u64::from(ctx.workers.max(1)));
    Some(Memory {
        key: "flows",
        value: c.flows.to_string(),
        bytes: FlowTable::<FlowRecord>::memory_for(per_worker as usize),
    })
}

/// What to do when a new flow finds no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FullAction {
    /// Forward the packet without a record (counted `table_full`).
    Skip,
    /// Replace the least recently seen record of the candidate buckets.
    Evict,
    /// Drop the packet as `flow_table_full`.
    Drop,
}

/// Flow-counter parameters.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlowCounterConfig {
    /// Records across all workers (each worker gets `flows / workers`).
    pub flows: u64,
    /// Idle timeout in seconds (0 = never close a record).
    pub idle_timeout_s: u32,
    /// Full-table action.
    pub full_policy: FullAction,
    /// Where `finish()` writes the dump (`.csv` or JSON); none by default.
    pub dump_path: Option<String>,
    /// How many flows the dump lists in `top_k` (by bytes).
    pub top_k: usize,
    /// Buckets scanned for idle records per burst.
    pub scan_buckets_per_burst: u32,
    /// Hash seed (mixed with the worker index).
    pub seed: u64,
}

impl Default for FlowCounterConfig {
    fn default() -> Self {
        Self {
            flows: 10_000_000,
            idle_timeout_s: 0,
            full_policy: FullAction::Skip,
            dump_path: None,
            top_k: 10,
            scan_buckets_per_burst: 8,
            seed: 0x6e6d_6470_6663,
        }
    }
}

/// One flow's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowRecord {
    /// Packets.
    pub packets: u64,
    /// Bytes (frame lengths, no FCS).
    pub bytes: u64,
    /// Time of the first packet, ns.
    pub first_ns: u64,
    /// Time of the last packet, ns.
    pub last_ns: u64,
}

impl TableValue for FlowRecord {
    type Raw = [u64; 4];
    #[inline(always)]
    fn to_raw(self) -> [u64; 4] {
        [self.packets, self.bytes, self.first_ns, self.last_ns]
    }
    #[inline(always)]
    fn from_raw(r: [u64; 4]) -> Self {
        Self {
            packets: r[0],
            bytes: r[1],
            first_ns: r[2],
            last_ns: r[3],
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Tally {
    packets: u64,
    bytes: u64,
    skipped: u64,
    unparsed: u64,
    header_segment_short: u64,
    new_flows: u64,
    table_full: u64,
    expired: u64,
    expired_packets: u64,
    expired_bytes: u64,
    evicted: u64,
    evicted_packets: u64,
    evicted_bytes: u64,
    drops: DropCounts,
}

/// The flow counter (one instance per worker).
pub struct FlowCounter {
    name: String,
    worker: u16,
    table: FlowTable<FlowRecord>,
    timeout_ns: u64,
    full: FullAction,
    dump_path: Option<PathBuf>,
    top_k: usize,
    scan: usize,
    dump_error: Option<String>,
    c: Tally,
    /// Per packet of a chunk: index into `keys`, or `usize::MAX` for none.
    pending: Vec<usize>,
    lens: Vec<u64>,
    keys: Vec<FlowKey>,
    hashes: Vec<u64>,
    slots: Vec<u32>,
}

fn worker_path(p: &str, worker: u16, workers: u16) -> PathBuf {
    if p.contains("{worker}") {
        return PathBuf::from(p.replace("{worker}", &worker.to_string()));
    }
    if workers <= 1 {
        return PathBuf::from(p);
    }
    let path = Path::new(p);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-w{worker}.{}", ext.to_string_lossy()),
        None => format!("{stem}-w{worker}"),
    };
    path.with_file_name(name)
}

impl FlowCounter {
    /// Builds worker `worker`'s instance (of `workers`) from a parameter table.
    pub fn from_params(params: &toml::Table, worker: u16, workers: u16) -> Result<Self, String> {
        let cfg: FlowCounterConfig = parse_params(SPEC.name, params)?;
        Self::new(&cfg, worker, workers)
    }

    /// Builds worker `worker`'s instance (of `workers`) from a config.
    pub fn new(cfg: &FlowCounterConfig, worker: u16, workers: u16) -> Result<Self, String> {
        let workers = workers.max(1);
        if cfg.flows == 0 {
            return Err(bad_param(SPEC.name, "flows", "must be at least 1"));
        }
        let per_core = cfg.flows.div_ceil(u64::from(workers));
        if per_core > u64::from(u32::MAX / 2) {
            return Err(bad_param(SPEC.name, "flows", "too many flows per worker"));
        }
        let timeout = timeout_ms(SPEC.name, "idle_timeout_s", cfg.idle_timeout_s, true)?;
        if let Some(p) = &cfg.dump_path
            && p.trim().is_empty()
        {
            return Err(bad_param(SPEC.name, "dump_path", "must not be empty"));
        }
        let policy = if cfg.full_policy == FullAction::Evict {
            FullPolicy::Evict
        } else {
            FullPolicy::Drop
        };
        // The table itself never expires records: the counter closes them itself so their
        // counts are kept (see the module docs).
        let table = FlowTable::try_new(per_core as usize, 0, policy, mix_seed(cfg.seed, worker, 3))
            .map_err(|e| bad_param(SPEC.name, "flows", format!("flow table: {e}")))?;
        Ok(Self {
            name: NAME.to_string(),
            worker,
            table,
            timeout_ns: u64::from(timeout) * 1_000_000,
            full: cfg.full_policy,
            dump_path: cfg
                .dump_path
                .as_deref()
                .map(|p| worker_path(p, worker, workers)),
            top_k: cfg.top_k,
            scan: cfg.scan_buckets_per_burst as usize,
            dump_error: None,
            c: Tally::default(),
            pending: Vec::with_capacity(BULK),
            lens: vec![0; BULK],
            keys: vec![FlowKey::default(); BULK],
            hashes: vec![0; BULK],
            slots: vec![0; BULK],
        })
    }

    /// The record of a flow, if any.
    pub fn record(&self, key: &FlowKey) -> Option<FlowRecord> {
        self.table.peek(key)
    }

    /// Live records.
    pub fn flows(&self) -> usize {
        self.table.len()
    }

    /// Every live record (walks the table).
    pub fn records(&self) -> impl Iterator<Item = (FlowKey, FlowRecord)> + '_ {
        self.table.iter().map(|(_, k, _, v)| (k, v))
    }

    /// The `k` flows with the most bytes, largest first (ties broken by key).
    pub fn top_k(&self, k: usize) -> Vec<(FlowKey, FlowRecord)> {
        if k == 0 {
            return vec![];
        }
        let mut heap: BinaryHeap<Reverse<(u64, FlowKey)>> = BinaryHeap::with_capacity(k + 1);
        for (_, key, _, r) in self.table.iter() {
            heap.push(Reverse((r.bytes, key)));
            if heap.len() > k {
                heap.pop();
            }
        }
        let mut v: Vec<(FlowKey, FlowRecord)> = heap
            .into_iter()
            .map(|Reverse((_, key))| (key, self.table.peek(&key).expect("live key")))
            .collect();
        v.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        v
    }

    fn record_json(k: &FlowKey, r: &FlowRecord) -> serde_json::Value {
        serde_json::json!({
            "src": Ipv4Addr::from(k.src()).to_string(),
            "dst": Ipv4Addr::from(k.dst()).to_string(),
            "sport": k.sport(),
            "dport": k.dport(),
            "proto": k.proto(),
            "packets": r.packets,
            "bytes": r.bytes,
            "first_seen_ns": r.first_ns,
            "last_seen_ns": r.last_ns,
        })
    }

    /// The dump as JSON: `{"worker", "flows": [...], "top_k": [...], "stats": {...}}`, flows
    /// sorted by bytes (descending).
    pub fn dump_json(&self) -> serde_json::Value {
        let mut all: Vec<(FlowKey, FlowRecord)> = self.records().collect();
        all.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        serde_json::json!({
            "worker": self.worker,
            "flows": all.iter().map(|(k, r)| Self::record_json(k, r)).collect::<Vec<_>>(),
            "top_k": self.top_k(self.top_k).iter().map(|(k, r)| Self::record_json(k, r))
                .collect::<Vec<_>>(),
            "stats": self.counters(),
        })
    }

    /// Writes the records as CSV (header line, then one flow per line, by bytes descending).
    pub fn write_csv(&self, mut w: impl Write) -> std::io::Result<()> {
        let mut all: Vec<(FlowKey, FlowRecord)> = self.records().collect();
        all.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        writeln!(
            w,
            "src,dst,sport,dport,proto,packets,bytes,first_seen_ns,last_seen_ns"
        )?;
        for (k, r) in all {
            writeln!(
                w,
                "{},{},{},{},{},{},{},{},{}",
                Ipv4Addr::from(k.src()),
                Ipv4Addr::from(k.dst()),
                k.sport(),
                k.dport(),
                k.proto(),
                r.packets,
                r.bytes,
                r.first_ns,
                r.last_ns
            )?;
        }
        Ok(())
    }

    /// Writes a dump to `path`: CSV if it ends in `.csv`, JSON otherwise.
    pub fn dump_to(&self, path: &Path) -> std::io::Result<()> {
        let f = std::io::BufWriter::new(std::fs::File::create(path)?);
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
        {
            self.write_csv(f)
        } else {
            serde_json::to_writer_pretty(f, &self.dump_json()).map_err(std::io::Error::other)
        }
    }

    /// The file `finish()` writes, if configured.
    pub fn dump_path(&self) -> Option<&Path> {
        self.dump_path.as_deref()
    }

    #[inline(always)]
    fn idle(&self, r: &FlowRecord, now_ns: u64) -> bool {
        self.timeout_ns != 0 && now_ns.saturating_sub(r.last_ns) > self.timeout_ns
    }

    fn process_chunk(&mut self, burst: &mut Burst, start: usize, end: usize, now_ns: u64) {
        self.pending.clear();
        let mut n = 0;
        for i in start..end {
            burst.prefetch(i + PREFETCH_AHEAD);
            if !burst.is_live(i) {
                self.c.skipped += 1;
                self.pending.push(usize::MAX);
                continue;
            }
            let frame_len = burst.frame_len(i);
            let len = frame_len as u64;
            self.c.packets += 1;
            self.c.bytes += len;
            match parse(burst.header(i), frame_len) {
                Ok(p) => {
                    let (s, d) = p.ports();
                    self.keys[n] = FlowKey::new(p.src, p.dst, s, d, p.proto);
                    self.lens[n] = len;
                    self.pending.push(n);
                    n += 1;
                }
                Err(e) => {
                    if e == ParseError::SegmentShort {
                        self.c.header_segment_short += 1;
                    }
                    self.c.unparsed += 1;
                    self.pending.push(usize::MAX);
                }
            }
        }
        let now = crate::flow_table::ms_ticks(now_ns);
        self.table.hash_bulk(&self.keys[..n], &mut self.hashes[..n]);
        self.table.lookup_bulk(
            &self.keys[..n],
            &self.hashes[..n],
            now,
            &mut self.slots[..n],
        );
        let bulk_epoch = self.table.epoch();
        for (k, i) in (start..end).enumerate() {
            let j = self.pending[k];
            if j == usize::MAX {
                continue;
            }
            let key = self.keys[j];
            let h = self.hashes[j];
            let len = self.lens[j];
            let mut slot = self.slots[j];
            if self.table.epoch() != bulk_epoch || slot == NO_SLOT {
                slot = self.table.lookup_hashed(&key, h, now).unwrap_or(NO_SLOT);
            }
            if slot != NO_SLOT {
                let mut r = self.table.value(slot);
                if self.idle(&r, now_ns) {
                    // Close the idle record, start a new one in place.
                    self.c.expired += 1;
                    self.c.expired_packets += r.packets;
                    self.c.expired_bytes += r.bytes;
                    self.c.new_flows += 1;
                    r = FlowRecord {
                        packets: 0,
                        bytes: 0,
                        first_ns: now_ns,
                        last_ns: now_ns,
                    };
                }
                r.packets += 1;
                r.bytes += len;
                r.last_ns = now_ns;
                self.table.set_value(slot, r);
                continue;
            }
            let rec = FlowRecord {
                packets: 1,
                bytes: len,
                first_ns: now_ns,
                last_ns: now_ns,
            };
            match self.table.insert_hashed(key, h, rec, now) {
                Ok(ins) => {
                    self.c.new_flows += 1;
                    if let Some((_, old)) = ins.evicted {
                        self.c.evicted += 1;
                        self.c.evicted_packets += old.packets;
                        self.c.evicted_bytes += old.bytes;
                    }
                }
                Err(_) => {
                    self.c.table_full += 1;
                    if self.full == FullAction::Drop {
                        self.c.drops.add(DropReason::FLOW_TABLE_FULL, 1);
                        burst.drop_packet(i, DropReason::FLOW_TABLE_FULL);
                    }
                }
            }
        }
    }
}

impl NetworkFunction for FlowCounter {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, burst: &mut Burst, ctx: &NfContext) {
        if self.timeout_ns != 0 {
            let now_ns = ctx.now_ns;
            let timeout = self.timeout_ns;
            let c = &mut self.c;
            self.table.scan_buckets(self.scan, |_, _, r| {
                if now_ns.saturating_sub(r.last_ns) > timeout {
                    c.expired += 1;
                    c.expired_packets += r.packets;
                    c.expired_bytes += r.bytes;
                    false
                } else {
                    true
                }
            });
        }
        let n = burst.len();
        burst.prefetch_first();
        let mut start = 0;
        while start < n {
            let end = (start + BULK).min(n);
            self.process_chunk(burst, start, end, ctx.now_ns);
            start = end;
        }
    }

    /// Back to an empty counter: no flow, zero tallies, no dump error (the next `finish`
    /// writes the dump again).
    fn reset(&mut self) -> bool {
        self.table.reset();
        self.c = Tally::default();
        self.dump_error = None;
        true
    }

    fn counters(&self) -> dataplane::Counters {
        let c = &self.c;
        let mut v = dataplane::Counters::new();
        v.count("flows", self.table.len() as u64)
            .count("packets", c.packets)
            .count("bytes", c.bytes)
            .count("skipped", c.skipped)
            .count("unparsed", c.unparsed)
            .count("header_segment_short", c.header_segment_short)
            .count("new_flows", c.new_flows)
            .count("table_full", c.table_full)
            .count("expired", c.expired)
            .count("expired_packets", c.expired_packets)
            .count("expired_bytes", c.expired_bytes)
            .count("evicted", c.evicted)
            .count("evicted_packets", c.evicted_packets)
            .count("evicted_bytes", c.evicted_bytes)
            .count("dropped", c.drops.total())
            .group("drops", drop_counters(&c.drops, &[]));
        if let Some(e) = &self.dump_error {
            v.text("dump_error", e.clone());
        }
        v
    }

    fn finish(&mut self, _ctx: &NfContext) -> Result<(), String> {
        if let Some(p) = self.dump_path.clone()
            && let Err(e) = self.dump_to(&p)
        {
            let e = format!("{}: {e}", p.display());
            self.dump_error = Some(e.clone());
            return Err(format!("cannot write its dump {e}"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_paths() {
        assert_eq!(worker_path("/t/f.json", 0, 1), PathBuf::from("/t/f.json"));
        assert_eq!(
            worker_path("/t/f.json", 2, 4),
            PathBuf::from("/t/f-w2.json")
        );
        assert_eq!(
            worker_path("/t/f-{worker}.csv", 3, 4),
            PathBuf::from("/t/f-3.csv")
        );
        assert_eq!(worker_path("dump", 1, 2), PathBuf::from("dump-w1"));
    }
}
