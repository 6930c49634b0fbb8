//! A per-core, bounded, cuckoo-hashed flow table keyed by the IPv4 5-tuple.
//!
//! # Layout (and why)
//!
//! - **Buckets of 8 slots, 2 candidate buckets per key** (bucketised cuckoo hashing, as DPDK's
//!   `rte_hash`). With 8-way buckets a 2-choice cuckoo table stays insertable far above 90 % load;
//!   this table never runs above ~90 % because the bucket count is rounded up to a power of two
//!   from `capacity / (8 × 0.9)`.
//! - **16-bit tags in their own array** (`sigs`, 16 B per bucket, four buckets per cache line):
//!   a 12-bit signature of the key's hash and a 4-bit generation. A probe compares 8 tags at
//!   once (the compare loop vectorises) and touches a full entry only on a tag match, so a
//!   lookup normally costs one tag line per candidate bucket plus one entry line. A slot is
//!   occupied when its tag carries the table's current generation; tag 0 (generation 0, never
//!   current) is an empty slot.
//! - **Cheap clear**: [`FlowTable::clear`] moves the table to the next generation, which empties
//!   every slot at once without touching memory (and changes the [`FlowTable::epoch`], so slot
//!   handles die with the entries). Only every 15th clear, when the generations wrap, zeroes the
//!   tag array (1/17 of the table). An RFC 2544 trial reuses a table this way instead of
//!   building, or zeroing, a gigabyte again. 12 signature bits make a false tag match cost one
//!   extra entry read per ~250 probes of a full bucket, which is noise next to the cache misses.
//! - **Partial-key cuckoo**: the second bucket is `b1 XOR f(sig)` (`f` odd, so it never equals
//!   `b1`). Because the alternate bucket follows from a bucket and a signature alone, a
//!   displacement never rehashes a key.
//! - **Entries** (`key`, last-seen `stamp`, value `V`) in one array indexed by `bucket × 8 +
//!   slot`; a slot index (`u32`) is the handle NFs keep between a lookup and their update.
//! - **Insertion** first reuses a free (or expired) slot in either bucket, then searches a
//!   breadth-first cuckoo path (bounded at [`BFS_NODES`] nodes) and moves entries along it, then
//!   applies the full policy ([`FullPolicy`]): `drop` refuses the insert (counted), `evict`
//!   replaces the expired or least-recently-seen entry of the two candidate buckets and hands it
//!   back to the caller (who may own resources tied to it, e.g. a NAT port).
//! - **Expiry** by idle timeout: every entry records when it was last seen (in ms ticks, see
//!   [`ms_ticks`]); lookups expire stale entries lazily, and [`FlowTable::expire_scan`] walks a
//!   few buckets per burst so idle entries are reclaimed even if never looked up again.
//! - **Bulk lookup** ([`FlowTable::lookup_bulk`]): hashes every key of a burst first, then
//!   prefetches both candidate tag lines of every key, then matches the tags and prefetches the
//!   first candidate entries, then verifies the keys. The misses of the whole burst are in flight
//!   together at each step, and the prefetches ([`nicmem::HugeArray::prefetch`]) retire at once,
//!   so they do not fill the reorder window the way loads waiting on memory would.
//! - **No allocation after construction**: all arrays, including the BFS queue, are allocated by
//!   [`FlowTable::try_new`].
//! - **Huge pages, lazily zeroed**: the tag and entry arrays are [`nicmem::HugeArray`]s, on 2 MiB
//!   pages where the machine has them (a random lookup into a gigabyte then misses the cache,
//!   but rarely the TLB). Their pages are zero-filled by the kernel on first touch, so creating
//!   a 10 M-flow table costs no pass over its memory. That is why values are stored through
//!   [`TableValue`]: the stored form must be valid as all-zero bytes.
//!
//! # The hash, chosen by benchmark
//!
//! [`hash_key`] is two rounds of 64 × 64 -> 128-bit folded multiplication. Measured against the
//! other candidates on a 2-core AMD EPYC VM (shared, other work running: medians of alternating
//! runs of the `flow_table` bench, each build with `-C target-feature=+sse4.2`):
//!
//! | candidate | hash only, 32-key bulk | bulk lookup, 64 Ki flows | NAT alone, 1 M flows |
//! |---|---|---|---|
//! | this one (folded multiply) | 699 M keys/s | 63 M lookups/s | 8.21 Mpps |
//! | `ahash` 0.8 (`hash_one` of the two words) | 694 M keys/s | 74 M lookups/s | 8.31 Mpps |
//! | CRC32C, 4 `crc32` instructions (DPDK's `rte_hash_crc`) | 1.40 G keys/s | 62 M lookups/s | 8.36 Mpps |
//!
//! The hash is at most 1.4 ns of a NAT packet's ~120 ns in those runs (made before the bulk
//! lookup prefetched; ~56 ns per packet since): a table lookup misses the cache, and that
//! dominates. `ahash` without the `aes` target feature (the default x86-64
//! build) runs the same folded multiply, so it ties this one and was dropped as a dependency.
//! CRC32C halves the hash's 1.4 ns, 1-2 % of the packet, which none of the table or NAT
//! figures could tell apart from noise (7 alternating rounds, spread ±30 %), and it would need
//! `unsafe` (`std::arch` intrinsics behind a runtime SSE 4.2 check) in another crate, a
//! fallback for CPUs without it, and gives a linear, unkeyed hash. The folded multiply stays.
//!
//! # Memory per flow
//!
//! Each slot costs `2 + size_of::<Entry<V>>()` bytes: a 16 B key, a 4 B last-seen stamp and `V`,
//! rounded up to 32 B (entries are 32-byte aligned so that one never straddles a cache line; a
//! value larger than 8 B makes the entry 64 B). For the NAT's and LB's small values that is
//! 34 B per slot; the table has between 1.11x and 2.22x as many slots as its capacity, so
//! 38-76 B per flow ([`FlowTable::bytes_per_flow`] gives the exact figure). The paper's setup,
//! 10 M flows over 7 cores, is `next_pow2` 2 097 152 flows per core: 4 194 304 slots, 136 MiB
//! per core; a 10 M-flow table on one core has 16 777 216 slots, 544 MiB.
//!
//! # Concurrency
//!
//! None: one table per core (shared-nothing); RSS keeps each flow on one core.
#![forbid(unsafe_code)]

use std::fmt;

use nicmem::{Align32, HugeArray, HugeMemError, PageKind, Zeroable};

/// Slots per bucket.
pub const SLOTS: usize = 8;
/// Highest load factor the sizing allows at full capacity.
pub const MAX_LOAD: f64 = 0.9;
/// Nodes a cuckoo-path search may visit before giving up.
pub const BFS_NODES: usize = 512;
/// Keys processed per phase of [`FlowTable::lookup_bulk`] (longer inputs are chunked).
pub const BULK: usize = 64;
/// The "no slot" value in bulk lookup output.
pub const NO_SLOT: u32 = u32::MAX;

/// Converts a time in ns to the table's ms ticks (wraps after 49.7 days; ages are computed with
/// wrapping arithmetic, so only idle periods longer than 24.8 days are misjudged, and the
/// incremental scan visits every entry long before that).
#[inline]
pub fn ms_ticks(now_ns: u64) -> u32 {
    (now_ns / 1_000_000) as u32
}

/// An IPv4 5-tuple packed into two words: `a = src << 32 | dst`, `b = sport << 48 | dport << 32
/// | proto`. 13 bytes of information in 16, compared with two integer compares.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    a: u64,
    b: u64,
}

impl FlowKey {
    /// Packs a 5-tuple.
    #[inline(always)]
    pub fn new(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Self {
        Self {
            a: u64::from(src) << 32 | u64::from(dst),
            b: u64::from(sport) << 48 | u64::from(dport) << 32 | u64::from(proto),
        }
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> u32 {
        (self.a >> 32) as u32
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> u32 {
        self.a as u32
    }
    /// Source port (or ICMP identifier).
    #[inline]
    pub fn sport(&self) -> u16 {
        (self.b >> 48) as u16
    }
    /// Destination port.
    #[inline]
    pub fn dport(&self) -> u16 {
        (self.b >> 32) as u16
    }
    /// IP protocol.
    #[inline]
    pub fn proto(&self) -> u8 {
        self.b as u8
    }
    /// The key of the reverse direction (addresses and ports swapped).
    #[inline]
    pub fn reversed(&self) -> Self {
        Self::new(
            self.dst(),
            self.src(),
            self.dport(),
            self.sport(),
            self.proto(),
        )
    }
    /// The two packed words (for hashing outside the table).
    #[inline]
    pub fn words(&self) -> (u64, u64) {
        (self.a, self.b)
    }
    /// The key with these two packed words (the inverse of [`FlowKey::words`]).
    #[inline(always)]
    pub fn from_words(a: u64, b: u64) -> Self {
        Self { a, b }
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} -> {}:{} proto {}",
            std::net::Ipv4Addr::from(self.src()),
            self.sport(),
            std::net::Ipv4Addr::from(self.dst()),
            self.dport(),
            self.proto()
        )
    }
}

/// What to do when a new flow finds no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FullPolicy {
    /// Refuse the insert (the NF counts it and drops the packet or skips the flow).
    Drop,
    /// Replace an expired or the least-recently-seen entry of the two candidate buckets.
    Evict,
}

impl FullPolicy {
    /// Config name.
    pub fn as_str(self) -> &'static str {
        match self {
            FullPolicy::Drop => "drop",
            FullPolicy::Evict => "evict",
        }
    }
}

/// 64 × 64 -> 128-bit multiply folded to 64 bits (the "mum" mixer).
#[inline(always)]
fn mum(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

const P0: u64 = 0xa076_1d64_78bd_642f;
const P1: u64 = 0xe703_7ed1_a0b4_28db;
const P2: u64 = 0x8ebc_6af0_9c88_c6e3;
const P3: u64 = 0x5899_65cc_7537_4cc3;

/// Hashes a flow key with a seed: two rounds of folded multiplication, so every input bit
/// reaches every output bit and a degenerate first round (one input word equal to its mask)
/// still leaves the key fully hashed by the second.
#[inline(always)]
pub fn hash_key(key: &FlowKey, seed: u64) -> u64 {
    let x = mum(key.a ^ seed ^ P0, key.b ^ P1);
    mum(
        x ^ P2,
        key.a.rotate_left(29) ^ key.b ^ seed.rotate_left(17) ^ P3,
    )
}

/// How a table stores its values: a [`Zeroable`] form (the table's arrays come zeroed from the
/// kernel, see the module docs) and the conversions to and from it, which compile to nothing
/// for plain integers.
pub trait TableValue: Copy + Default {
    /// The stored form.
    type Raw: Zeroable;
    /// Converts to the stored form.
    fn to_raw(self) -> Self::Raw;
    /// Converts from the stored form.
    fn from_raw(raw: Self::Raw) -> Self;
}

macro_rules! plain_values {
    ($($t:ty),*) => {
        $(impl TableValue for $t {
            type Raw = $t;
            #[inline(always)]
            fn to_raw(self) -> $t {
                self
            }
            #[inline(always)]
            fn from_raw(raw: $t) -> $t {
                raw
            }
        })*
    };
}
plain_values!(u8, u16, u32, u64);

/// One slot's contents: the key's two words, the last-seen stamp and the stored value. Aligned
/// to 32 B so that an entry with a value of up to 8 B never straddles a cache line (a lookup
/// then costs exactly one line per entry).
type Entry<R> = Align32<((u64, u64), u32, R)>;

/// Counters of a table (all monotonic except `len`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FlowTableStats {
    /// Keys looked up.
    pub lookups: u64,
    /// Lookups that found a live entry.
    pub hits: u64,
    /// New entries inserted.
    pub inserts: u64,
    /// Inserts refused because the table (or both candidate buckets and every cuckoo path) was
    /// full and the policy is `drop`.
    pub full_drops: u64,
    /// Entries replaced by the `evict` policy.
    pub evictions: u64,
    /// Entries removed because their idle timeout passed (lazily or by the scan).
    pub expired: u64,
    /// Entries moved to their alternate bucket by cuckoo displacement.
    pub cuckoo_moves: u64,
}

/// Result of a successful insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inserted<V> {
    /// Slot of the new (or updated) entry.
    pub slot: u32,
    /// The entry the `evict` policy replaced (or a present expired entry reclaimed), so the
    /// caller can release what it tied to it.
    pub evicted: Option<(FlowKey, V)>,
}

/// The insert was refused: no room and the policy is `drop`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableFull;

#[derive(Clone, Copy, Default)]
struct BfsNode {
    bucket: u32,
    parent: u32,
    slot: u8,
}

/// A bounded cuckoo hash table from [`FlowKey`] to `V` (see the module docs).
pub struct FlowTable<V: TableValue> {
    sigs: HugeArray<[u16; SLOTS]>,
    entries: HugeArray<Entry<V::Raw>>,
    mask: usize,
    /// The current generation (1..=[`GEN_MAX`]), in the top bits of every occupied slot's tag.
    gen_tag: u16,
    seed: u64,
    len: usize,
    capacity: usize,
    timeout: u32,
    policy: FullPolicy,
    epoch: u64,
    scan_cursor: usize,
    bfs: Vec<BfsNode>,
    stats: FlowTableStats,
}

/// Bits of a tag that hold the signature (the rest hold the generation).
const SIG_BITS: u32 = 12;
/// The highest generation; the one after it wraps to 1 and zeroes the tag array.
const GEN_MAX: u16 = (1 << (16 - SIG_BITS)) - 1;

/// The signature of a hash: its top 12 bits (the bucket index comes from the low bits).
#[inline(always)]
fn sig_of(h: u64) -> u16 {
    (h >> (64 - SIG_BITS)) as u16
}

/// The signature part of a tag.
#[inline(always)]
fn sig_part(tag: u16) -> u16 {
    tag & ((1 << SIG_BITS) - 1)
}

#[inline(always)]
fn alt_offset(sig: u16) -> usize {
    ((u64::from(sig).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) | 1) as usize
}

#[inline(always)]
fn match_mask(s: &[u16; SLOTS], tag: u16) -> u32 {
    let mut m = 0u32;
    for (i, &v) in s.iter().enumerate() {
        m |= u32::from(v == tag) << i;
    }
    m
}

/// Slots whose tag belongs to generation `gen_tag` (the occupied ones).
#[inline(always)]
fn live_mask(s: &[u16; SLOTS], gen_tag: u16) -> u32 {
    let mut m = 0u32;
    for (i, &v) in s.iter().enumerate() {
        m |= u32::from(v >> SIG_BITS == gen_tag >> SIG_BITS) << i;
    }
    m
}

/// Slots free in generation `gen_tag`.
#[inline(always)]
fn free_mask(s: &[u16; SLOTS], gen_tag: u16) -> u32 {
    !live_mask(s, gen_tag) & ((1 << SLOTS) - 1)
}

impl<V: TableValue> FlowTable<V> {
    /// A table holding at most `capacity` flows (at least 1), expiring entries idle for more than
    /// `idle_timeout_ms` (0 = never), applying `policy` when full. `seed` keys the hash (use a
    /// different one per table to avoid correlated collisions). Allocates everything now, on
    /// huge pages when the table is large (see the module docs); fails only when the memory
    /// cannot be had.
    pub fn try_new(
        capacity: usize,
        idle_timeout_ms: u32,
        policy: FullPolicy,
        seed: u64,
    ) -> Result<Self, HugeMemError> {
        let capacity = capacity.max(1);
        let nb = Self::buckets_for(capacity);
        Ok(Self {
            sigs: HugeArray::zeroed(nb)?,
            entries: HugeArray::zeroed(nb * SLOTS)?,
            mask: nb - 1,
            gen_tag: 1 << SIG_BITS,
            seed,
            len: 0,
            capacity,
            timeout: idle_timeout_ms,
            policy,
            epoch: 0,
            scan_cursor: 0,
            bfs: vec![BfsNode::default(); BFS_NODES],
            stats: FlowTableStats::default(),
        })
    }

    /// Buckets of a table of `capacity` flows: at most [`MAX_LOAD`] full at capacity, rounded up
    /// to a power of two.
    fn buckets_for(capacity: usize) -> usize {
        let want = ((capacity.max(1) as f64) / (SLOTS as f64 * MAX_LOAD)).ceil() as usize;
        want.max(1)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX / 2 + 1)
    }

    /// Bytes the entry arrays of a table of `capacity` flows take (what [`FlowTable::try_new`]
    /// allocates for them), for checking a config against the machine before building it.
    pub fn memory_for(capacity: usize) -> u64 {
        let slots = (Self::buckets_for(capacity) as u64).saturating_mul(SLOTS as u64);
        slots.saturating_mul(2 + std::mem::size_of::<Entry<V::Raw>>() as u64)
    }

    /// [`FlowTable::try_new`] for tables whose memory is sure to be there (tests, benches);
    /// panics when it is not, as a `Vec` would.
    pub fn new(capacity: usize, idle_timeout_ms: u32, policy: FullPolicy, seed: u64) -> Self {
        Self::try_new(capacity, idle_timeout_ms, policy, seed)
            .unwrap_or_else(|e| panic!("flow table of {capacity} flows: {e}"))
    }

    /// A table with exactly `buckets` buckets (a power of two) and `capacity` entries, for tests
    /// that need loads above the sizing rule's 90 %.
    #[cfg(test)]
    fn with_buckets(buckets: usize, capacity: usize, seed: u64) -> Self {
        let mut t = Self::new(1, 0, FullPolicy::Drop, seed);
        t.sigs = HugeArray::zeroed(buckets).unwrap();
        t.entries = HugeArray::zeroed(buckets * SLOTS).unwrap();
        t.mask = buckets - 1;
        t.capacity = capacity;
        t
    }

    /// What backs the table's entries (2 MiB pages, transparent huge pages, ...).
    pub fn page_kind(&self) -> PageKind {
        self.entries.page_kind()
    }

    /// The tag of a hash in the current generation.
    #[inline(always)]
    fn tag_of(&self, h: u64) -> u16 {
        self.gen_tag | sig_of(h)
    }

    /// True when slot `s` of bucket `b` holds an entry of the current generation.
    #[inline(always)]
    fn occupied(&self, b: usize, s: usize) -> bool {
        self.sigs[b][s] >> SIG_BITS == self.gen_tag >> SIG_BITS
    }

    #[inline(always)]
    fn entry_key(&self, idx: usize) -> FlowKey {
        let (a, b) = self.entries[idx].0.0;
        FlowKey { a, b }
    }

    #[inline(always)]
    fn entry_stamp(&self, idx: usize) -> u32 {
        self.entries[idx].0.1
    }

    #[inline(always)]
    fn entry_value(&self, idx: usize) -> V {
        V::from_raw(self.entries[idx].0.2)
    }

    /// Live entries (expired entries not yet reclaimed included).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Maximum number of entries.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of slots (buckets × 8).
    #[inline]
    pub fn slots(&self) -> usize {
        self.entries.len()
    }

    /// Bytes of table memory per flow at full capacity.
    pub fn bytes_per_flow(&self) -> f64 {
        (self.slots() * (2 + std::mem::size_of::<Entry<V::Raw>>())) as f64 / self.capacity as f64
    }

    /// Total table memory in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.slots() * (2 + std::mem::size_of::<Entry<V::Raw>>())
            + BFS_NODES * std::mem::size_of::<BfsNode>()
    }

    /// The idle timeout in ms (0 = never).
    pub fn idle_timeout_ms(&self) -> u32 {
        self.timeout
    }

    /// The full policy.
    pub fn policy(&self) -> FullPolicy {
        self.policy
    }

    /// Counters.
    pub fn stats(&self) -> FlowTableStats {
        self.stats
    }

    /// Changes whenever an existing entry moves or disappears (cuckoo displacement, removal,
    /// expiry, eviction, [`FlowTable::clear`]). Slot handles obtained while the epoch had a given value stay valid as
    /// long as it is unchanged; plain inserts into free slots do not change it.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The hash of `key` under this table's seed (pass it to the `_hashed` methods).
    #[inline(always)]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        hash_key(key, self.seed)
    }

    /// Hashes many keys (`hashes.len()` must be at least `keys.len()`).
    #[inline]
    pub fn hash_bulk(&self, keys: &[FlowKey], hashes: &mut [u64]) {
        for (h, k) in hashes.iter_mut().zip(keys) {
            *h = hash_key(k, self.seed);
        }
    }

    #[inline(always)]
    fn expired_at(&self, stamp: u32, now: u32) -> bool {
        self.timeout != 0 && now.wrapping_sub(stamp) > self.timeout
    }

    #[inline(always)]
    fn find_in(&self, b: usize, tag: u16, key: &FlowKey) -> Option<usize> {
        let mut m = match_mask(&self.sigs[b], tag);
        while m != 0 {
            let idx = b * SLOTS + m.trailing_zeros() as usize;
            if self.entry_key(idx) == *key {
                return Some(idx);
            }
            m &= m - 1;
        }
        None
    }

    #[inline(always)]
    fn find(&self, key: &FlowKey, h: u64) -> Option<usize> {
        let tag = self.tag_of(h);
        let b1 = h as usize & self.mask;
        if let Some(i) = self.find_in(b1, tag, key) {
            return Some(i);
        }
        self.find_in((b1 ^ alt_offset(sig_of(h))) & self.mask, tag, key)
    }

    /// Lazy expiry + touch for a found slot.
    #[inline(always)]
    fn live(&mut self, idx: usize, now: u32) -> Option<u32> {
        if self.expired_at(self.entry_stamp(idx), now) {
            self.clear_slot(idx);
            self.stats.expired += 1;
            return None;
        }
        self.entries[idx].0.1 = now;
        self.stats.hits += 1;
        Some(idx as u32)
    }

    #[inline(always)]
    fn clear_slot(&mut self, idx: usize) {
        self.sigs[idx / SLOTS][idx % SLOTS] = 0;
        self.len -= 1;
        self.epoch += 1;
    }

    /// Looks `key` up at time `now` (ms ticks). A live entry is touched (its last-seen time set to
    /// `now`) and its slot returned; an entry past its idle timeout is removed (counted as
    /// expired) and reported as absent.
    #[inline]
    pub fn lookup(&mut self, key: &FlowKey, now: u32) -> Option<u32> {
        let h = self.hash(key);
        self.lookup_hashed(key, h, now)
    }

    /// [`FlowTable::lookup`] with a precomputed hash.
    #[inline]
    pub fn lookup_hashed(&mut self, key: &FlowKey, h: u64, now: u32) -> Option<u32> {
        self.stats.lookups += 1;
        let idx = self.find(key, h)?;
        self.live(idx, now)
    }

    /// Looks up without touching or expiring anything (for inspection and tests).
    pub fn peek(&self, key: &FlowKey) -> Option<V> {
        self.find(key, self.hash(key)).map(|i| self.entry_value(i))
    }

    /// Looks up a burst of keys with their precomputed hashes (see [`FlowTable::hash_bulk`]),
    /// writing each key's slot or [`NO_SLOT`] to `out`. Same semantics as calling
    /// [`FlowTable::lookup_hashed`] per key, but the memory accesses of all keys of a phase are
    /// issued together (see the module docs).
    pub fn lookup_bulk(&mut self, keys: &[FlowKey], hashes: &[u64], now: u32, out: &mut [u32]) {
        let n = keys.len().min(hashes.len()).min(out.len());
        let mut start = 0;
        while start < n {
            let end = (start + BULK).min(n);
            self.lookup_chunk(
                &keys[start..end],
                &hashes[start..end],
                now,
                &mut out[start..end],
            );
            start = end;
        }
    }

    fn lookup_chunk(&mut self, keys: &[FlowKey], hashes: &[u64], now: u32, out: &mut [u32]) {
        let n = keys.len();
        let mut b1 = [0u32; BULK];
        let mut b2 = [0u32; BULK];
        let mut tag = [0u16; BULK];
        let mut m1 = [0u32; BULK];
        let mut m2 = [0u32; BULK];
        let mask = self.mask;
        // A: both candidate buckets of every key, their tag lines prefetched (as DPDK's
        // rte_hash does), so the second choice never costs a serial round of misses.
        for i in 0..n {
            let h = hashes[i];
            let b = h as usize & mask;
            let bb = (b ^ alt_offset(sig_of(h))) & mask;
            tag[i] = self.tag_of(h);
            b1[i] = b as u32;
            b2[i] = bb as u32;
            self.sigs.prefetch(b);
            self.sigs.prefetch(bb);
        }
        // B: match the tags (now arriving), prefetch the first candidate entry.
        for i in 0..n {
            let (b, bb) = (b1[i] as usize, b2[i] as usize);
            m1[i] = match_mask(&self.sigs[b], tag[i]);
            m2[i] = match_mask(&self.sigs[bb], tag[i]);
            if m1[i] != 0 {
                self.entries
                    .prefetch(b * SLOTS + m1[i].trailing_zeros() as usize);
            } else if m2[i] != 0 {
                self.entries
                    .prefetch(bb * SLOTS + m2[i].trailing_zeros() as usize);
            }
        }
        // C: verify the candidates, first choice first.
        for i in 0..n {
            out[i] = NO_SLOT;
            for (b, mut mm) in [(b1[i] as usize, m1[i]), (b2[i] as usize, m2[i])] {
                while mm != 0 {
                    let idx = b * SLOTS + mm.trailing_zeros() as usize;
                    if self.entry_key(idx) == keys[i] {
                        out[i] = idx as u32;
                        break;
                    }
                    mm &= mm - 1;
                }
                if out[i] != NO_SLOT {
                    break;
                }
            }
        }
        // F: expiry and touch (in order, so duplicates within a burst behave like sequential
        // lookups).
        self.stats.lookups += n as u64;
        for o in out.iter_mut().take(n) {
            if *o != NO_SLOT {
                let idx = *o as usize;
                // A duplicate key earlier in the chunk may have expired this slot already.
                if !self.occupied(idx / SLOTS, idx % SLOTS) {
                    *o = NO_SLOT;
                    continue;
                }
                *o = self.live(idx, now).unwrap_or(NO_SLOT);
            }
        }
    }

    /// The value in a slot returned by a lookup or insert.
    #[inline(always)]
    pub fn value(&self, slot: u32) -> V {
        self.entry_value(slot as usize)
    }

    /// Replaces the value in a slot.
    #[inline(always)]
    pub fn set_value(&mut self, slot: u32, val: V) {
        self.entries[slot as usize].0.2 = val.to_raw();
    }

    /// The key in a slot.
    #[inline(always)]
    pub fn key(&self, slot: u32) -> FlowKey {
        self.entry_key(slot as usize)
    }

    /// When the entry in a slot was last seen (ms ticks).
    #[inline(always)]
    pub fn last_seen(&self, slot: u32) -> u32 {
        self.entry_stamp(slot as usize)
    }

    /// Sets the last-seen time of a slot.
    #[inline(always)]
    pub fn touch(&mut self, slot: u32, now: u32) {
        self.entries[slot as usize].0.1 = now;
    }

    /// Inserts or updates `key` -> `val` at time `now`.
    #[inline]
    pub fn insert(&mut self, key: FlowKey, val: V, now: u32) -> Result<Inserted<V>, TableFull> {
        let h = self.hash(&key);
        self.insert_hashed(key, h, val, now)
    }

    #[inline(always)]
    fn place(&mut self, idx: usize, tag: u16, key: FlowKey, val: V, now: u32) {
        self.sigs[idx / SLOTS][idx % SLOTS] = tag;
        self.entries[idx] = Align32(((key.a, key.b), now, val.to_raw()));
        self.len += 1;
        self.stats.inserts += 1;
    }

    /// [`FlowTable::insert`] with a precomputed hash. An existing entry for `key` is updated in
    /// place (value and last-seen time). Otherwise the new entry goes to a free slot of either
    /// candidate bucket, else to a slot freed by a cuckoo path, else the full policy applies.
    pub fn insert_hashed(
        &mut self,
        key: FlowKey,
        h: u64,
        val: V,
        now: u32,
    ) -> Result<Inserted<V>, TableFull> {
        if let Some(idx) = self.find(&key, h) {
            let e = &mut self.entries[idx].0;
            e.2 = val.to_raw();
            e.1 = now;
            return Ok(Inserted {
                slot: idx as u32,
                evicted: None,
            });
        }
        let tag = self.tag_of(h);
        let b1 = h as usize & self.mask;
        let b2 = (b1 ^ alt_offset(sig_of(h))) & self.mask;
        if self.len < self.capacity {
            for b in [b1, b2] {
                let free = free_mask(&self.sigs[b], self.gen_tag);
                if free != 0 {
                    let idx = b * SLOTS + free.trailing_zeros() as usize;
                    self.place(idx, tag, key, val, now);
                    return Ok(Inserted {
                        slot: idx as u32,
                        evicted: None,
                    });
                }
            }
        }
        // Reclaim an expired entry of a candidate bucket before moving anything.
        if self.timeout != 0 {
            for b in [b1, b2] {
                for s in 0..SLOTS {
                    let idx = b * SLOTS + s;
                    if self.occupied(b, s) && self.expired_at(self.entry_stamp(idx), now) {
                        let old = (self.entry_key(idx), self.entry_value(idx));
                        self.clear_slot(idx);
                        self.stats.expired += 1;
                        self.place(idx, tag, key, val, now);
                        return Ok(Inserted {
                            slot: idx as u32,
                            evicted: Some(old),
                        });
                    }
                }
            }
        }
        if self.len < self.capacity {
            for _ in 0..2 {
                if let Some(idx) = self.cuckoo_make_room(b1, b2) {
                    self.place(idx, tag, key, val, now);
                    return Ok(Inserted {
                        slot: idx as u32,
                        evicted: None,
                    });
                }
            }
        }
        match self.policy {
            FullPolicy::Drop => {
                self.stats.full_drops += 1;
                Err(TableFull)
            }
            FullPolicy::Evict => {
                // Both candidate buckets are full (or the table is at capacity): replace the
                // least recently seen occupied candidate.
                let mut victim = None;
                let mut vage = 0u32;
                for b in [b1, b2] {
                    for s in 0..SLOTS {
                        let idx = b * SLOTS + s;
                        if self.occupied(b, s) {
                            let age = now.wrapping_sub(self.entry_stamp(idx));
                            if victim.is_none() || age > vage {
                                vage = age;
                                victim = Some(idx);
                            }
                        }
                    }
                }
                let Some(v) = victim else {
                    // At capacity but both candidate buckets are empty: nothing local to evict.
                    self.stats.full_drops += 1;
                    return Err(TableFull);
                };
                let old = (self.entry_key(v), self.entry_value(v));
                self.clear_slot(v);
                self.stats.evictions += 1;
                self.place(v, tag, key, val, now);
                Ok(Inserted {
                    slot: v as u32,
                    evicted: Some(old),
                })
            }
        }
    }

    /// Breadth-first search for a cuckoo path from `b1`/`b2` to a bucket with a free slot, then
    /// moves the entries along it. Returns the freed slot in `b1` or `b2`.
    fn cuckoo_make_room(&mut self, b1: usize, b2: usize) -> Option<usize> {
        let mask = self.mask;
        let mut head = 0usize;
        let mut tail = 0usize;
        for b in [b1, b2] {
            self.bfs[tail] = BfsNode {
                bucket: b as u32,
                parent: u32::MAX,
                slot: 0,
            };
            tail += 1;
        }
        // (node whose bucket holds the entry to move first, its slot, free destination slot)
        let mut found: Option<(usize, usize, usize)> = None;
        'search: while head < tail {
            let x = self.bfs[head].bucket as usize;
            for s in 0..SLOTS {
                if !self.occupied(x, s) {
                    continue;
                }
                let y = (x ^ alt_offset(sig_part(self.sigs[x][s]))) & mask;
                if y == x {
                    continue;
                }
                let free = free_mask(&self.sigs[y], self.gen_tag);
                if free != 0 {
                    found = Some((head, s, y * SLOTS + free.trailing_zeros() as usize));
                    break 'search;
                }
                if tail < BFS_NODES {
                    self.bfs[tail] = BfsNode {
                        bucket: y as u32,
                        parent: head as u32,
                        slot: s as u8,
                    };
                    tail += 1;
                }
            }
            head += 1;
        }
        let (mut cur, first_slot, mut dst) = found?;
        let mut src_b = self.bfs[cur].bucket as usize;
        let mut src_s = first_slot;
        // Walk from the deepest node back to a root, moving each entry into the hole after it.
        // Every move is re-validated (a bucket may occur twice on a path); a failed check
        // leaves a consistent table (each completed move put an entry in its other candidate
        // bucket) and reports no room.
        loop {
            let sg = self.sigs[src_b][src_s];
            let (db, ds) = (dst / SLOTS, dst % SLOTS);
            if !self.occupied(src_b, src_s)
                || (src_b ^ alt_offset(sig_part(sg))) & mask != db
                || self.occupied(db, ds)
            {
                return None;
            }
            let src = src_b * SLOTS + src_s;
            self.sigs[db][ds] = sg;
            self.entries[dst] = self.entries[src];
            self.sigs[src_b][src_s] = 0;
            self.stats.cuckoo_moves += 1;
            self.epoch += 1;
            dst = src;
            let node = self.bfs[cur];
            if node.parent == u32::MAX {
                // `dst` is now a free slot in a root bucket (b1 or b2).
                return Some(dst);
            }
            cur = node.parent as usize;
            src_b = self.bfs[cur].bucket as usize;
            src_s = usize::from(node.slot);
        }
    }

    /// Removes `key`; returns its value if it was present (expired or not).
    pub fn remove(&mut self, key: &FlowKey) -> Option<V> {
        let h = self.hash(key);
        let idx = self.find(key, h)?;
        let v = self.entry_value(idx);
        self.clear_slot(idx);
        Some(v)
    }

    /// Removes the entry in `slot` (which must be occupied) and returns it.
    pub fn remove_slot(&mut self, slot: u32) -> Option<(FlowKey, V)> {
        let idx = slot as usize;
        if idx >= self.entries.len() || !self.occupied(idx / SLOTS, idx % SLOTS) {
            return None;
        }
        let e = (self.entry_key(idx), self.entry_value(idx));
        self.clear_slot(idx);
        Some(e)
    }

    /// Walks the next `buckets` buckets (round robin over the table) and removes entries idle for
    /// longer than the timeout, calling `on_expired` for each. Returns how many expired. Does
    /// nothing when the timeout is 0.
    pub fn expire_scan(
        &mut self,
        now: u32,
        buckets: usize,
        mut on_expired: impl FnMut(FlowKey, V),
    ) -> usize {
        if self.timeout == 0 || self.len == 0 {
            return 0;
        }
        let nb = self.sigs.len();
        let mut n = 0;
        for _ in 0..buckets.min(nb) {
            let b = self.scan_cursor;
            self.scan_cursor = (b + 1) & self.mask;
            let mut live = live_mask(&self.sigs[b], self.gen_tag);
            while live != 0 {
                let s = live.trailing_zeros() as usize;
                live &= live - 1;
                let idx = b * SLOTS + s;
                if self.expired_at(self.entry_stamp(idx), now) {
                    let (k, v) = (self.entry_key(idx), self.entry_value(idx));
                    self.clear_slot(idx);
                    self.stats.expired += 1;
                    on_expired(k, v);
                    n += 1;
                }
            }
        }
        n
    }

    /// Walks the next `buckets` buckets (round robin, sharing the cursor of
    /// [`FlowTable::expire_scan`]) and removes every entry for which `keep(key, last_seen,
    /// value)` returns false; for NFs with their own expiry rule. Removals are not counted in
    /// [`FlowTableStats::expired`]. Returns how many were removed.
    pub fn scan_buckets(
        &mut self,
        buckets: usize,
        mut keep: impl FnMut(&FlowKey, u32, &V) -> bool,
    ) -> usize {
        if self.len == 0 {
            return 0;
        }
        let mut n = 0;
        for _ in 0..buckets.min(self.sigs.len()) {
            let b = self.scan_cursor;
            self.scan_cursor = (b + 1) & self.mask;
            let mut live = live_mask(&self.sigs[b], self.gen_tag);
            while live != 0 {
                let idx = b * SLOTS + live.trailing_zeros() as usize;
                live &= live - 1;
                if !keep(
                    &self.entry_key(idx),
                    self.entry_stamp(idx),
                    &self.entry_value(idx),
                ) {
                    self.clear_slot(idx);
                    n += 1;
                }
            }
        }
        n
    }

    /// Every live entry: `(slot, key, last seen, value)`. Walks the whole table (for dumps and
    /// reports, not the data path).
    pub fn iter(&self) -> impl Iterator<Item = (u32, FlowKey, u32, V)> + '_ {
        let g = self.gen_tag;
        self.sigs.iter().enumerate().flat_map(move |(b, sg)| {
            let live = live_mask(sg, g);
            (0..SLOTS)
                .filter(move |s| live & (1 << s) != 0)
                .map(move |s| {
                    let idx = b * SLOTS + s;
                    (
                        idx as u32,
                        self.entry_key(idx),
                        self.entry_stamp(idx),
                        self.entry_value(idx),
                    )
                })
        })
    }

    /// Removes every entry (keeps the counters) by moving to the next generation: no pass over
    /// the table, except when the generations wrap (every 15th clear), which zeroes the tag
    /// array. Slot handles die with the entries (the epoch changes).
    pub fn clear(&mut self) {
        let next = (self.gen_tag >> SIG_BITS) + 1;
        if next > GEN_MAX {
            self.sigs.fill([0; SLOTS]);
            self.gen_tag = 1 << SIG_BITS;
        } else {
            self.gen_tag = next << SIG_BITS;
        }
        self.len = 0;
        self.scan_cursor = 0;
        self.epoch += 1;
    }

    /// Empties the table ([`FlowTable::clear`]) and zeroes its counters: the table then behaves
    /// as one just built with the same parameters, without its memory being touched again.
    pub fn reset(&mut self) {
        self.clear();
        self.stats = FlowTableStats::default();
    }

    /// Checks internal invariants (every entry sits in one of its two candidate buckets, no
    /// duplicate keys, `len` matches). For tests; walks the whole table.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut count = 0;
        let mut keys = Vec::with_capacity(self.len);
        for (b, sg) in self.sigs.iter().enumerate() {
            for (s, &tag) in sg.iter().enumerate() {
                if !self.occupied(b, s) {
                    continue;
                }
                count += 1;
                let key = self.entry_key(b * SLOTS + s);
                let h = self.hash(&key);
                if self.tag_of(h) != tag {
                    return Err(format!("bucket {b} slot {s}: signature mismatch"));
                }
                let b1 = h as usize & self.mask;
                let b2 = (b1 ^ alt_offset(sig_of(h))) & self.mask;
                if b != b1 && b != b2 {
                    return Err(format!("bucket {b} slot {s}: not a candidate bucket"));
                }
                keys.push(key);
            }
        }
        if count != self.len {
            return Err(format!("len {} but {} occupied slots", self.len, count));
        }
        if count > self.capacity {
            return Err(format!("{count} entries exceed capacity {}", self.capacity));
        }
        keys.sort();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            return Err("duplicate key".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> FlowKey {
        FlowKey::new(
            0x1001_0000 + i,
            0x3001_0101 + (i % 4),
            (i % 50000) as u16 + 1024,
            53,
            17,
        )
    }

    #[test]
    fn key_packing_round_trips() {
        let k = FlowKey::new(0x0a000001, 0xc0a80001, 1234, 80, 6);
        assert_eq!(
            (k.src(), k.dst(), k.sport(), k.dport(), k.proto()),
            (0x0a000001, 0xc0a80001, 1234, 80, 6)
        );
        let r = k.reversed();
        assert_eq!(
            (r.src(), r.sport(), r.dst(), r.dport()),
            (0xc0a80001, 80, 0x0a000001, 1234)
        );
        assert_ne!(k, r);
    }

    #[test]
    fn insert_lookup_remove() {
        let mut t: FlowTable<u32> = FlowTable::new(1000, 0, FullPolicy::Drop, 7);
        for i in 0..1000 {
            t.insert(key(i), i * 3, 0).unwrap();
        }
        assert_eq!(t.len(), 1000);
        t.check_invariants().unwrap();
        for i in 0..1000 {
            let s = t.lookup(&key(i), 1).expect("present");
            assert_eq!(t.value(s), i * 3);
        }
        assert!(t.lookup(&key(5000), 1).is_none());
        // At capacity with drop policy: refused and counted.
        assert_eq!(t.insert(key(5000), 1, 1), Err(TableFull));
        assert_eq!(t.stats().full_drops, 1);
        // Update in place works even when full.
        let ins = t.insert(key(10), 99, 2).unwrap();
        assert_eq!(t.value(ins.slot), 99);
        assert_eq!(t.remove(&key(10)), Some(99));
        assert_eq!(t.remove(&key(10)), None);
        assert_eq!(t.len(), 999);
        assert!(t.insert(key(5000), 1, 3).is_ok());
        t.check_invariants().unwrap();
    }

    #[test]
    fn fills_to_capacity_at_high_load() {
        // Capacity chosen so the table runs at the 90 % design load.
        let cap = (8.0 * 4096.0 * 0.9) as usize;
        let mut t: FlowTable<u32> = FlowTable::new(cap, 0, FullPolicy::Drop, 1);
        assert_eq!(t.slots(), 8 * 4096);
        for i in 0..cap as u32 {
            t.insert(key(i), i, 0)
                .unwrap_or_else(|_| panic!("insert {i} failed"));
        }
        assert_eq!(t.len(), cap);
        assert!(t.stats().cuckoo_moves > 0, "90 % load needs displacement");
        t.check_invariants().unwrap();
        for i in 0..cap as u32 {
            assert_eq!(t.peek(&key(i)), Some(i));
        }
    }

    #[test]
    fn cuckoo_paths_reach_very_high_load() {
        let buckets = 1024;
        let mut t: FlowTable<u32> = FlowTable::with_buckets(buckets, buckets * SLOTS, 42);
        let mut i = 0u32;
        while t.insert(key(i), i, 0).is_ok() {
            i += 1;
        }
        let load = t.len() as f64 / t.slots() as f64;
        // Two choices of 8-way buckets with BFS displacement fill well past 95 %; without
        // working displacement the first failure comes near 80 %.
        assert!(load > 0.95, "first failure at load {load}");
        t.check_invariants().unwrap();
        for j in 0..i {
            assert_eq!(t.peek(&key(j)), Some(j), "key {j} lost by a move");
        }
    }

    #[test]
    fn lazy_expiry_and_scan() {
        let mut t: FlowTable<u8> = FlowTable::new(100, 1000, FullPolicy::Drop, 3);
        t.insert(key(1), 1, 0).unwrap();
        t.insert(key(2), 2, 0).unwrap();
        // Touched at 900: lives until 1900.
        assert!(t.lookup(&key(1), 900).is_some());
        assert!(t.lookup(&key(2), 1001).is_none(), "expired lazily");
        assert_eq!(t.stats().expired, 1);
        assert!(t.lookup(&key(1), 1900).is_some());
        let mut seen = vec![];
        let n = t.expire_scan(3000, usize::MAX, |k, v| seen.push((k, v)));
        assert_eq!((n, seen), (1, vec![(key(1), 1)]));
        assert!(t.is_empty());
        assert_eq!(t.stats().expired, 2);
    }

    #[test]
    fn evict_policy_replaces_oldest_and_reports_it() {
        let mut t: FlowTable<u32> = FlowTable::new(4, 0, FullPolicy::Evict, 9);
        for i in 0..4 {
            t.insert(key(i), i, i * 10).unwrap();
        }
        let ins = t.insert(key(100), 100, 50).unwrap();
        let (k, v) = ins.evicted.expect("something evicted");
        // With 4 entries in few buckets, the oldest candidate is evicted.
        assert!(v < 4 && k == key(v));
        assert_eq!(t.len(), 4);
        assert_eq!(t.stats().evictions, 1);
        assert!(t.peek(&key(100)).is_some());
        assert!(t.peek(&k).is_none());
        t.check_invariants().unwrap();
    }

    #[test]
    fn bulk_matches_single_lookups() {
        let mut t: FlowTable<u32> = FlowTable::new(10_000, 0, FullPolicy::Drop, 11);
        for i in 0..10_000 {
            if i % 3 != 0 {
                t.insert(key(i), i, 0).unwrap();
            }
        }
        let keys: Vec<FlowKey> = (0..200).map(|i| key(i * 37 % 12_000)).collect();
        let mut hashes = vec![0; keys.len()];
        t.hash_bulk(&keys, &mut hashes);
        let mut out = vec![0; keys.len()];
        t.lookup_bulk(&keys, &hashes, 1, &mut out);
        for (k, &o) in keys.iter().zip(&out) {
            let single = t.lookup(k, 1).unwrap_or(NO_SLOT);
            assert_eq!(o, single, "{k:?}");
            if o != NO_SLOT {
                assert_eq!(t.key(o), *k);
            }
        }
    }

    #[test]
    fn epoch_changes_only_when_entries_move_or_leave() {
        let mut t: FlowTable<u32> = FlowTable::new(1000, 0, FullPolicy::Drop, 5);
        let e0 = t.epoch();
        t.insert(key(1), 1, 0).unwrap();
        assert_eq!(t.epoch(), e0);
        t.remove(&key(1));
        assert_ne!(t.epoch(), e0);
    }

    #[test]
    fn clear_empties_without_zeroing_and_survives_generation_wrap() {
        let mut t: FlowTable<u32> = FlowTable::new(2000, 0, FullPolicy::Drop, 13);
        for round in 0..40u32 {
            let e0 = t.epoch();
            // Each round inserts a different key set, half of it overlapping the last round's.
            for i in 0..2000 {
                t.insert(key(round * 1000 + i), i, 0)
                    .unwrap_or_else(|_| panic!("round {round}: insert {i}"));
            }
            assert_eq!(t.len(), 2000);
            t.check_invariants().unwrap();
            let probe = key(round * 1000 + 7);
            let slot = t.lookup(&probe, 0).expect("present");
            assert_eq!(t.value(slot), 7);
            t.clear();
            assert!(t.is_empty());
            assert_ne!(t.epoch(), e0, "slot handles die with the entries");
            assert_eq!(t.peek(&probe), None, "round {round}");
            assert_eq!(t.iter().count(), 0);
            t.check_invariants().unwrap();
        }
        assert_eq!(t.stats().inserts, 40 * 2000);
    }

    #[test]
    fn memory_per_flow_is_reported() {
        let t: FlowTable<u32> = FlowTable::new(1 << 21, 0, FullPolicy::Drop, 0);
        assert_eq!(std::mem::size_of::<Entry<u32>>(), 32);
        assert_eq!(std::mem::size_of::<Entry<[u64; 4]>>(), 64);
        assert_eq!(t.slots(), 1 << 22);
        assert!((t.bytes_per_flow() - 68.0).abs() < 1e-9);
    }
}
