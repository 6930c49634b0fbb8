//! [`DpdkQueue`]: one Rx/Tx queue pair of a DPDK port, owned by one worker.
//!
//! Rx fills a burst (the worker's vector, `dpdk.vector`) with one `rte_eth_rx_burst` asking for
//! the whole vector (inlined: `dpdk_sys::fastpath`), and polls again while a call hands out at
//! least `datapath.burst` packets and the vector has room, since some PMDs hand out at most 32 a
//! call ([`gather`]); then it writes each mbuf chain into the burst's arrays (the mbuf pointer is
//! the packet's handle; header place and lengths are read from its fields). In the split modes on
//! PMDs without hardware buffer split it splits in software: header mbufs (and, with emulated
//! nicmem, payload mbufs) for a poll come from one `rte_pktmbuf_alloc_bulk` per pool. Tx hands the
//! burst's handle array to one `rte_eth_tx_burst` as it is (writing header changes back into the
//! mbufs first when a network function moved a header), offers what a call left again while the PMD
//! takes some, and frees what the ring did not take with one `rte_pktmbuf_free_bulk`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dpdk_sys as sys;

use super::eal::register_worker_thread;
use super::mbuf::{
    Mbuf, MbufOwner, NICMEM_CPU_READ_BYTES, NICMEM_CPU_WRITE_BYTES, PayloadMem, mbuf_owner,
    payload_mem,
};
use super::shared::PortShared;
use super::spill::spill_stats;
use crate::burst::{Burst, Describe, DescribeOut, HandleLayout, OwnerArc, RxPacket};
use crate::mode::DatapathMode;
use crate::packet::{PacketOwner, PayloadRing};
use crate::port::{Queue, QueueStats};
use crate::verdict::{DropCounts, DropReason, Verdict};

/// Rx polls without a packet after which a finite source (e.g. a pcap file) counts as drained.
const IDLE_POLLS: u64 = 20_000;
/// Pending frees released together.
const FREE_BATCH: usize = 64;

/// Stops Rx on every queue of a port: they then return no packets and report idle, so a run
/// over an endless source (`net_null`, a `net_ring` loop) can end.
#[derive(Clone, Debug, Default)]
pub struct RxStop(Arc<AtomicBool>);

impl RxStop {
    /// Stops Rx.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    /// True once stopped.
    #[inline]
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What a queue is built from (see `DpdkPort::open`).
pub(crate) struct QueueSetup {
    pub(crate) shared: Arc<PortShared>,
    pub(crate) ops: sys::fastpath::PortOps,
    pub(crate) queue: u16,
    pub(crate) index: u16,
    pub(crate) verdict: Verdict,
    pub(crate) mode: DatapathMode,
    pub(crate) split_offset: usize,
    pub(crate) hw_split: bool,
    pub(crate) burst: usize,
    pub(crate) stop: RxStop,
    pub(crate) rx_limit: Option<u64>,
    pub(crate) finite: bool,
    pub(crate) core: Option<usize>,
    pub(crate) emulated_nicmem: bool,
    pub(crate) rss: bool,
}

/// Driver counters beyond [`QueueStats`] (reported as xstats).
#[derive(Clone, Copy, Debug, Default)]
struct DriverCounters {
    sw_split: u64,
    linearized: u64,
    nic_spill: u64,
    dropped_oversize: u64,
}

/// Per-burst Rx counters, kept in registers and added to [`QueueStats`] once per burst.
#[derive(Clone, Copy, Default)]
struct RxAcc {
    packets: u64,
    bytes: u64,
    primary: u64,
    secondary: u64,
}

/// One queue pair of a [`super::DpdkPort`].
pub struct DpdkQueue {
    shared: Arc<PortShared>,
    /// The port's entry in ethdev's fast-path table, found once.
    ops: sys::fastpath::PortOps,
    port_id: u16,
    queue: u16,
    index: u16,
    verdict: Verdict,
    mode: DatapathMode,
    split: usize,
    hw_split: bool,
    rx_mp: *mut sys::rte_mempool,
    hdr_mp: *mut sys::rte_mempool,
    nic_mp: *mut sys::rte_mempool,
    rx_room: usize,
    rss: bool,
    /// How the burst describes this queue's mbufs (with or without the RSS hash), chosen once.
    describe: Describe,
    /// Scratch for the split modes' polls and for a burst's chains (`MAX_BURST` entries).
    rx: Vec<*mut sys::rte_mbuf>,
    /// A poll handing out at least this many packets (`datapath.burst`) may have been capped by
    /// the PMD, so a receive polls again while the caller's burst has room ([`gather`]).
    again_at: usize,
    hdrs: Vec<*mut sys::rte_mbuf>,
    nics: Vec<*mut sys::rte_mbuf>,
    to_free: Vec<*mut sys::rte_mbuf>,
    /// The driver's packet owner, as its own type (the per-burst owner checks then need no
    /// vtable read), with its address kept.
    owner: QueueOwner,
    stats: QueueStats,
    drv: DriverCounters,
    stop: RxStop,
    rx_limit: u64,
    /// Packets `rx_burst` may receive before it looks at the thread's registration and the
    /// packet limit again (one test a burst for both): 0 until the thread is registered, then
    /// at most what the limit leaves (`rx_limit - rx_packets`), set again when it runs out.
    budget: u64,
    finite: bool,
    empty_polls: u64,
    core: Option<usize>,
    registered: bool,
    emulated_nicmem: bool,
}

// SAFETY: the raw pointers are DPDK mempools and mbufs owned by this queue (pending frees,
// scratch arrays) or by the port state it keeps alive through `shared`. Mempools are thread-safe;
// the queue is used by one thread at a time (`&mut self`), which is all `Send` requires.
unsafe impl Send for DpdkQueue {}

impl DpdkQueue {
    pub(crate) fn new(s: QueueSetup) -> Self {
        let pools = &s.shared.pools[s.queue as usize];
        let rx_mp = pools.rx.as_ptr();
        let hdr_mp = pools
            .hdr
            .as_ref()
            .map_or(std::ptr::null_mut(), |p| p.as_ptr());
        let nic_mp = pools
            .nic
            .as_ref()
            .map_or(std::ptr::null_mut(), |p| p.as_ptr());
        // SAFETY: `rx_mp` is a live pktmbuf pool.
        let rx_room = unsafe { sys::rte_pktmbuf_data_room_size(rx_mp) } as usize
            - sys::NMDP_PKTMBUF_HEADROOM as usize;
        let b = s.burst.max(1);
        Self {
            ops: s.ops,
            port_id: s.shared.port_id,
            shared: s.shared,
            queue: s.queue,
            index: s.index,
            verdict: s.verdict,
            mode: s.mode,
            split: s.split_offset,
            hw_split: s.hw_split,
            rx_mp,
            hdr_mp,
            nic_mp,
            rx_room,
            rss: s.rss,
            describe: if s.rss {
                describe_mbufs::<true>
            } else {
                describe_mbufs::<false>
            },
            rx: vec![std::ptr::null_mut(); crate::burst::MAX_BURST],
            again_at: b.min(crate::burst::MAX_BURST),
            // A poll may take a whole burst (`MAX_BURST` at most): room for a split of each.
            hdrs: Vec::with_capacity(crate::burst::MAX_BURST),
            nics: Vec::with_capacity(crate::burst::MAX_BURST),
            to_free: Vec::with_capacity(FREE_BATCH + 4 * crate::burst::MAX_BURST),
            owner: QueueOwner::new(mbuf_owner()),
            stats: QueueStats::default(),
            drv: DriverCounters::default(),
            stop: s.stop,
            rx_limit: s.rx_limit.unwrap_or(u64::MAX),
            budget: 0,
            finite: s.finite,
            empty_polls: 0,
            core: s.core,
            registered: false,
            emulated_nicmem: s.emulated_nicmem,
        }
    }

    #[cold]
    fn register(&mut self) {
        self.registered = true;
        if let Err(e) = register_worker_thread(self.core) {
            eprintln!(
                "warning: port {} queue {}: {e}; mempool caches are off for this thread",
                self.shared.name, self.queue
            );
        }
    }

    /// `rx_burst` with its budget spent: registers the thread on the first call and sets the
    /// budget to what the packet limit leaves; false when that is nothing.
    #[cold]
    #[inline(never)]
    fn renew_budget(&mut self) -> bool {
        if !self.registered {
            self.register();
        }
        self.budget = self.rx_limit - self.stats.rx_packets;
        self.budget > 0
    }

    #[inline]
    fn flush_free(&mut self) {
        if self.to_free.is_empty() {
            return;
        }
        // SAFETY: every pointer in `to_free` is an mbuf chain this queue owns and nobody else
        // references; `rte_pktmbuf_free_bulk` frees whole chains to their own pools.
        unsafe { sys::rte_pktmbuf_free_bulk(self.to_free.as_mut_ptr(), self.to_free.len() as u32) };
        self.to_free.clear();
    }

    /// Appends the checked chain `m` to the burst (whose owner is this driver's, adopted by
    /// `rx_burst`); counts it in `acc` (added to the queue's counters once per burst).
    #[inline(always)]
    fn push(&self, acc: &mut RxAcc, burst: &mut Burst, m: Mbuf, ring: PayloadRing) {
        let p = RxPacket {
            handle: m.handle(),
            hdr: m.data_ptr(),
            hdr_len: m.data_len(),
            headroom: m.data_off(),
            frame_len: m.pkt_len(),
            ring,
            // Ports without RSS skip the read.
            rss_hash: if self.rss {
                m.rss_hash().unwrap_or(0)
            } else {
                0
            },
        };
        acc.packets += 1;
        acc.bytes += u64::from(p.frame_len);
        match ring {
            PayloadRing::Primary => acc.primary += 1,
            PayloadRing::Secondary => acc.secondary += 1,
            PayloadRing::None => {}
        }
        // SAFETY: the burst adopted this driver's owner; the first segment is host memory
        // holding `data_len` bytes after `data_off` bytes of headroom, owned by this chain,
        // which moves into the burst.
        let pushed = unsafe { burst.push(&p) };
        debug_assert!(pushed, "the burst had room for every received mbuf");
    }

    /// One poll of the PMD for up to `want` packets: in `host` mode straight into the burst's
    /// handle slots from `at` on (the caller's byte pass takes them in), in the split modes into
    /// scratch, rebuilt into the burst at once. Returns the packets the PMD handed out.
    #[inline(always)]
    fn poll_once(&mut self, burst: &mut Burst, at: usize, want: usize, host: bool) -> usize {
        let dst = if host {
            // SAFETY: a pointer to the burst's handle slots from `at` on, which the caller keeps
            // within the burst's room (`at + want` at most its capacity).
            unsafe { burst.handles_mut_ptr().add(at).cast::<*mut sys::rte_mbuf>() }
        } else {
            self.rx.as_mut_ptr()
        };
        // SAFETY: `dst` has room for `want` pointers (`want <= MAX_BURST == rx.len()` in the
        // split modes); the port and queue are started and this queue is polled by one thread
        // only. `want <= MAX_BURST` fits the call's u16.
        let n = unsafe {
            sys::fastpath::eth_rx_burst(self.ops, self.port_id, self.queue, dst, want as u16)
        } as usize;
        if !host && n > 0 {
            if self.hw_split {
                self.rx_hw_split(n, burst);
            } else {
                self.rx_sw_split(n, burst);
            }
        }
        n
    }

    /// What `tx_burst`'s first call left of a burst of `k = pkts.len()` chains, from `sent`
    /// on: offered again while each call takes some (some PMDs take at most a fixed number of
    /// packets a call with ring room left; a full ring takes none), and what stays is freed and
    /// counted as `tx_full`. Returns the chains sent in all and the bytes of those that were not.
    #[cold]
    #[inline(never)]
    fn tx_rest(
        &mut self,
        pkts: &mut Burst,
        mut sent: usize,
        drops: &mut DropCounts,
    ) -> (usize, u64) {
        let k = pkts.len();
        while sent < k {
            // SAFETY: as in `tx_burst`, for the chains from `sent` on, which the burst still
            // owns; `k - sent <= MAX_BURST` fits the call's u16.
            let more = unsafe {
                sys::fastpath::eth_tx_burst(
                    self.ops,
                    self.port_id,
                    self.queue,
                    pkts.handles_mut_ptr()
                        .add(sent)
                        .cast::<*mut sys::rte_mbuf>(),
                    (k - sent) as u16,
                )
            } as usize;
            if more == 0 {
                break;
            }
            sent += more;
        }
        let rest = &pkts.handles()[sent..];
        if rest.is_empty() {
            return (sent, 0);
        }
        // SAFETY: chains the burst still owns.
        let unsent_bytes = rest
            .iter()
            .map(|&m| u64::from(unsafe { Mbuf::from_handle(m) }.pkt_len()))
            .sum();
        // SAFETY: the unsent chains still belong to the burst, given up here (the caller
        // disowns the burst); `usize` and `*mut rte_mbuf` have the same layout.
        unsafe {
            sys::rte_pktmbuf_free_bulk(
                rest.as_ptr().cast::<*mut sys::rte_mbuf>().cast_mut(),
                rest.len() as u32,
            )
        };
        self.stats.tx_full += (k - sent) as u64;
        drops.add(DropReason::TX_FULL, (k - sent) as u64);
        (sent, unsent_bytes)
    }

    #[inline(always)]
    fn count(&mut self, acc: RxAcc) {
        self.stats.rx_packets += acc.packets;
        self.stats.rx_bytes += acc.bytes;
        self.stats.rx_primary += acc.primary;
        self.stats.rx_secondary += acc.secondary;
    }

    /// `host` mode: the `n` mbufs `rte_eth_rx_burst` wrote straight into the burst's handle
    /// array stay there as bare handles, described only when a network function first reads a
    /// packet ([`describe_mbufs`]); a chain that never looks at a packet costs one length read
    /// per packet here.
    #[inline(always)]
    fn rx_host_in_place(&mut self, n: usize, burst: &mut Burst) {
        let at = burst.len();
        // SAFETY: `rte_eth_rx_burst` just wrote `n` received mbufs after the burst's last packet
        // (within its capacity); they are owned by this queue until pushed.
        let got = unsafe {
            Mbuf::slice(std::slice::from_raw_parts(
                burst.handles_mut_ptr().add(at).cast::<*mut sys::rte_mbuf>(),
                n,
            ))
        };
        // One load and one add per packet: the sum `s` of the packets' length words (`pkt_len`
        // in bits 0..32, `data_len` in bits 32..48, `vlan_tci` above; `Mbuf::len_word`). A
        // frame's `pkt_len` is below 2^24 (the largest frames a PMD delivers, LRO aggregates,
        // are 64 KiB) and a burst holds at most `MAX_BURST` (256) frames, so
        // the low 32 bits of `s` are the burst's bytes P exactly, and bits 32..48 are the sum D
        // of the first segments' lengths modulo 2^16. When P < 2^16, D <= P (a first segment
        // is part of its frame) makes `D mod 2^16 == P` mean D == P: every frame lies whole in
        // its first segment, which is all a header view needs (a chain's empty tail segments
        // go out with it). Any other burst (a chain, or 64 KiB or more) takes the exact pass.
        // Sixteen packets a turn (independent adds, one loop test per sixteen: a vector is 64
        // packets at full load); the rest one by one.
        let mut s = 0u64;
        let (groups, rest) = got.as_chunks::<16>();
        for q in groups {
            // Four independent sums of four.
            let mut t = [0u64; 4];
            for (k, &m) in q.iter().enumerate() {
                t[k % 4] = t[k % 4].wrapping_add(m.len_word());
            }
            s = s.wrapping_add((t[0].wrapping_add(t[1])).wrapping_add(t[2].wrapping_add(t[3])));
        }
        for &m in rest {
            s = s.wrapping_add(m.len_word());
        }
        // P < 2^16 and D mod 2^16 == P in one test: P xor (D mod 2^16) is 0 exactly then.
        let bytes = s as u32;
        if bytes ^ u32::from((s >> 32) as u16) != 0 {
            return self.rx_host_exact(n, burst);
        }
        let bytes = u64::from(bytes);
        // SAFETY: the burst adopted this driver's owner (`rx_burst`); the handles are mbufs
        // this queue received and hands over, each frame whole in its first segment (above);
        // `describe_mbufs` describes any of them truthfully; `bytes` is their frame bytes.
        unsafe { burst.push_handles_in_place(n, self.describe, Some(&MBUF_LAYOUT), bytes) };
        self.count(RxAcc {
            packets: n as u64,
            bytes,
            ..RxAcc::default()
        });
    }

    /// `host` mode, a burst the length-word pass of `rx_host_in_place` could not clear (64 KiB
    /// or more, or a chain): the bytes summed exactly and the segments counted; single-segment
    /// packets stay in the burst as bare handles, a burst with a chain is linearized.
    #[inline(never)]
    fn rx_host_exact(&mut self, n: usize, burst: &mut Burst) {
        let at = burst.len();
        // SAFETY: as in `rx_host_in_place`: the `n` mbufs just received after the burst's last
        // packet.
        let got = unsafe {
            Mbuf::slice(std::slice::from_raw_parts(
                burst.handles_mut_ptr().add(at).cast::<*mut sys::rte_mbuf>(),
                n,
            ))
        };
        // OR-ing `nb_segs` (never 0) gives 1 only when every packet is a single segment.
        let (mut bytes, mut segs) = (0u64, 0u16);
        for &m in got {
            bytes += u64::from(m.pkt_len());
            segs |= m.nb_segs();
        }
        if segs != 1 {
            for (r, m) in self.rx[..n].iter_mut().zip(got) {
                *r = m.as_ptr();
            }
            return self.rx_host_chains(n, burst);
        }
        // SAFETY: as in `rx_host_in_place`, for single-segment mbufs.
        unsafe { burst.push_handles_in_place(n, self.describe, Some(&MBUF_LAYOUT), bytes) };
        self.count(RxAcc {
            packets: n as u64,
            bytes,
            ..RxAcc::default()
        });
    }

    /// `host` mode with multi-segment chains in the burst: each chain is linearized first.
    #[cold]
    fn rx_host_chains(&mut self, n: usize, burst: &mut Burst) {
        let mut acc = RxAcc::default();
        for i in 0..n {
            let m = self.received(i);
            let m = if m.nb_segs() == 1 {
                m
            } else {
                match self.linearize(m) {
                    Some(m) => m,
                    None => continue,
                }
            };
            self.push(&mut acc, burst, m, PayloadRing::None);
        }
        self.count(acc);
    }

    /// Copies a multi-segment chain into one Rx mbuf (slow path: jumbo scatter, or a chain
    /// looped back in `host` mode). Frees the original chain. `None` (counted) if it does not fit
    /// or no mbuf is left.
    #[cold]
    fn linearize(&mut self, m: Mbuf) -> Option<Mbuf> {
        let len = m.pkt_len() as usize;
        if len > self.rx_room || m.has_device_segment() {
            self.drv.dropped_oversize += 1;
            self.stats.rx_oversize += 1;
            self.to_free.push(m.as_ptr());
            return None;
        }
        let Some(d) = self.alloc(self.rx_mp) else {
            self.stats.rx_nombuf += 1;
            self.to_free.push(m.as_ptr());
            return None;
        };
        let mut off = 0usize;
        let mut seg = Some(m);
        while let Some(s) = seg {
            let l = usize::from(s.data_len());
            // SAFETY: a host-memory segment (device segments were excluded above) of a chain
            // this queue holds, copied into a distinct buffer with room for `len` bytes
            // (checked against `rx_room`).
            unsafe { std::ptr::copy_nonoverlapping(s.data_ptr(), d.data_ptr().add(off), l) };
            off += l;
            seg = s.next();
        }
        d.set_lengths(d.data_off(), off as u16, off as u32);
        d.copy_rx_meta(m);
        self.drv.linearized += 1;
        self.to_free.push(m.as_ptr());
        Some(d)
    }

    /// The `i`-th mbuf of the last receive into the scratch array.
    #[inline(always)]
    fn received(&self, i: usize) -> Mbuf {
        // SAFETY: `rte_eth_rx_burst` wrote a received mbuf, owned by this queue, at every index
        // below the count it returned, which bounds every caller's `i`.
        unsafe { Mbuf::from_handle(self.rx[i] as usize) }
    }

    /// One mbuf from `mp`, reset, or `None` when the pool is empty.
    #[inline]
    fn alloc(&self, mp: *mut sys::rte_mempool) -> Option<Mbuf> {
        // SAFETY: `mp` is one of this queue's live pools; a fresh mbuf is owned by the caller.
        unsafe { Mbuf::from_ptr(sys::rte_pktmbuf_alloc(mp)) }
    }

    /// Hardware split (mlx5): chains arrive as header + payload already.
    #[inline(never)]
    fn rx_hw_split(&mut self, n: usize, burst: &mut Burst) {
        let mut acc = RxAcc::default();
        for i in 0..n {
            let m = self.received(i);
            match m.nb_segs() {
                1 if m.pkt_len() as usize <= self.split => {
                    self.push(&mut acc, burst, m, PayloadRing::None)
                }
                2 => self.push(&mut acc, burst, m, payload_ring(m)),
                _ => self.split_slow(&mut acc, burst, m),
            }
        }
        self.count(acc);
    }

    /// Software split for PMDs without buffer split.
    #[inline(never)]
    fn rx_sw_split(&mut self, n: usize, burst: &mut Burst) {
        let s = self.split;
        // Header (and nicmem payload) mbufs for every frame of the burst that needs a split, with
        // one bulk allocation per pool.
        let need = (0..n)
            .map(|i| self.received(i))
            .filter(|m| m.nb_segs() == 1 && m.pkt_len() as usize > s)
            .count();
        self.hdrs.clear();
        self.nics.clear();
        if need > 0 {
            // SAFETY: the vector has capacity `MAX_BURST` >= n >= need; on success DPDK fills
            // `need` pointers with freshly reset mbufs we own.
            unsafe {
                if sys::rte_pktmbuf_alloc_bulk(self.hdr_mp, self.hdrs.as_mut_ptr(), need as u32)
                    == 0
                {
                    self.hdrs.set_len(need);
                }
            }
            if !self.nic_mp.is_null() {
                // SAFETY: as above, for the nicmem pool; on a bulk failure fall back to single
                // allocations until the (small) pool is empty.
                unsafe {
                    if sys::rte_pktmbuf_alloc_bulk(self.nic_mp, self.nics.as_mut_ptr(), need as u32)
                        == 0
                    {
                        self.nics.set_len(need);
                    } else {
                        while self.nics.len() < need {
                            let x = sys::rte_mbuf_raw_alloc(self.nic_mp);
                            if x.is_null() {
                                break;
                            }
                            sys::rte_pktmbuf_reset(x);
                            self.nics.push(x);
                        }
                    }
                }
            }
        }
        let mut acc = RxAcc::default();
        for i in 0..n {
            let m = self.received(i);
            let (segs, len) = (m.nb_segs(), m.pkt_len() as usize);
            if segs == 1 {
                if len <= s {
                    self.push(&mut acc, burst, m, PayloadRing::None);
                    continue;
                }
                // SAFETY: the bulk allocation above filled `hdrs` with fresh mbufs this queue
                // owns.
                let Some(h) = self.hdrs.pop().and_then(|h| unsafe { Mbuf::from_ptr(h) }) else {
                    self.stats.rx_nombuf += 1;
                    self.to_free.push(m.as_ptr());
                    continue;
                };
                let ring = self.split_into(h, m, len);
                self.push(&mut acc, burst, h, ring);
            } else {
                if segs == 2 && usize::from(m.data_len()) == s {
                    // Already split (e.g. our own split packet looped back by net_ring).
                    self.push(&mut acc, burst, m, payload_ring(m));
                } else {
                    self.split_slow(&mut acc, burst, m);
                }
            }
        }
        self.count(acc);
        // Unused header/payload mbufs (frames dropped above) go back in the next bulk free.
        self.to_free.append(&mut self.hdrs);
        self.to_free.append(&mut self.nics);
    }

    /// Splits the single-segment frame `m` (`len > split` bytes) behind header mbuf `h`: copies
    /// the header; then either copies the payload into a nicmem mbuf (primary ring; `m` is freed)
    /// or chains `m` itself, advanced past the header, as the host payload (secondary ring).
    #[inline]
    fn split_into(&mut self, h: Mbuf, m: Mbuf, len: usize) -> PayloadRing {
        let s = self.split;
        let nic = if self.mode.uses_nicmem() {
            // SAFETY: `nics` holds fresh mbufs of the nicmem pool this queue owns.
            let x = self.nics.pop().and_then(|p| unsafe { Mbuf::from_ptr(p) });
            if x.is_none() {
                self.drv.nic_spill += 1;
            }
            x
        } else {
            None
        };
        self.drv.sw_split += 1;
        // SAFETY: `h` and `m` are distinct mbufs this queue owns; `h` has room for `s` header
        // bytes (header pool data room >= split offset) and `m` holds `len > s` bytes.
        unsafe { std::ptr::copy_nonoverlapping(m.data_ptr(), h.data_ptr(), s) };
        h.set_lengths(h.data_off(), s as u16, len as u32);
        h.copy_rx_meta(m);
        match nic {
            Some(p) => {
                let plen = len - s;
                p.set_lengths(0, plen as u16, plen as u32);
                // SAFETY: `p` is a distinct nicmem payload buffer (emulated nicmem is host
                // memory) whose elements hold max_frame - split bytes, and `len <= max_frame`.
                unsafe { std::ptr::copy_nonoverlapping(m.data_ptr().add(s), p.data_ptr(), plen) };
                h.set_next(2, Some(p));
                self.to_free.push(m.as_ptr());
                PayloadRing::Primary
            }
            None => {
                let rest = m.data_len() - s as u16;
                m.set_lengths(m.data_off() + s as u16, rest, u32::from(rest));
                h.set_next(2, Some(m));
                PayloadRing::Secondary
            }
        }
    }

    /// Slow path: any other chain shape is linearized, then split with single allocations.
    #[cold]
    fn split_slow(&mut self, acc: &mut RxAcc, burst: &mut Burst, m: Mbuf) {
        let Some(m) = self.linearize(m) else {
            return;
        };
        let len = m.pkt_len() as usize;
        if len <= self.split {
            self.push(acc, burst, m, PayloadRing::None);
            return;
        }
        let Some(h) = self.alloc(self.hdr_mp) else {
            self.stats.rx_nombuf += 1;
            self.to_free.push(m.as_ptr());
            return;
        };
        if self.mode.uses_nicmem()
            && self.nics.is_empty()
            && !self.nic_mp.is_null()
            && let Some(p) = self.alloc(self.nic_mp)
        {
            self.nics.push(p.as_ptr());
        }
        let ring = self.split_into(h, m, len);
        self.push(acc, burst, h, ring);
    }
}

/// The driver's packet owner with the address bursts compare owners by, computed once: the
/// owner checks of every Rx and Tx burst then load it as it is.
struct QueueOwner {
    owner: Arc<MbufOwner>,
    addr: usize,
}

impl QueueOwner {
    fn new(owner: Arc<MbufOwner>) -> Self {
        Self {
            addr: owner.owner_addr(),
            owner,
        }
    }
}

impl OwnerArc for QueueOwner {
    #[inline(always)]
    fn owner_addr(&self) -> usize {
        self.addr
    }

    fn to_dyn(&self) -> Arc<dyn PacketOwner> {
        self.owner.clone()
    }
}

/// Where an `rte_mbuf` keeps the header place (offsets asserted at compile time in `dpdk-sys`).
static MBUF_LAYOUT: HandleLayout = HandleLayout {
    buf_addr: std::mem::offset_of!(sys::rte_mbuf, buf_addr),
    data_off: std::mem::offset_of!(sys::rte_mbuf, data_off),
    data_len: std::mem::offset_of!(sys::rte_mbuf, data_len),
    pkt_len: std::mem::offset_of!(sys::rte_mbuf, pkt_len),
};

/// Gathers up to `room` packets from polls of a PMD: `poll(at, want)` asks for `want` packets
/// into the burst's slots from `at` on and returns how many the PMD handed out. The first poll
/// asks for the whole room, so at full load one PMD call fills the vector (each call has its
/// fixed costs, in the PMD and here). A call may hand out less than asked with more waiting:
/// some PMDs cap a call (ixgbe's and i40e's vector Rx at 32), so a poll handing out
/// `again_at` (`datapath.burst`) or more is followed by another while room is left. A poll
/// handing out fewer ends the gathering, so at low load no packet waits for a later poll.
#[inline(always)]
fn gather(room: usize, again_at: usize, mut poll: impl FnMut(usize, usize) -> usize) -> usize {
    let mut n = poll(0, room);
    let mut got = n;
    while n >= again_at && got < room {
        n = poll(got, room - got);
        got += n;
    }
    got
}

/// Which ring served the second segment of a received two-segment chain: the primary (nicmem)
/// ring when its buffer is nicmem, else the secondary (host) ring.
#[inline]
fn payload_ring(m: Mbuf) -> PayloadRing {
    match payload_mem(m.next()) {
        PayloadMem::Host => PayloadRing::Secondary,
        PayloadMem::EmulatedNic | PayloadMem::DeviceNic => PayloadRing::Primary,
    }
}

/// Describes mbuf chains for a burst (see [`Burst::push_handles`]): the first segment is the
/// header segment, a second segment is the payload (nicmem or host, from its pool).
fn describe_mbufs<const RSS: bool>(handles: &[usize], out: DescribeOut<'_>) {
    let n = handles.len();
    let (hdr, hdr_len, headroom) = (
        &mut out.hdr[..n],
        &mut out.hdr_len[..n],
        &mut out.headroom[..n],
    );
    let (frame_len, ring, rss) = (
        &mut out.frame_len[..n],
        &mut out.ring[..n],
        &mut out.rss[..n],
    );
    for (i, &h) in handles.iter().enumerate() {
        // SAFETY: every handle is a live mbuf chain held by the burst.
        let m = unsafe { Mbuf::from_handle(h) };
        hdr[i] = m.data_ptr();
        hdr_len[i] = m.data_len();
        headroom[i] = m.data_off();
        frame_len[i] = m.pkt_len();
        ring[i] = if m.nb_segs() == 1 {
            PayloadRing::None
        } else {
            payload_ring(m)
        };
        rss[i] = if RSS { m.rss_hash().unwrap_or(0) } else { 0 };
    }
}

/// Writes the header place and lengths of every packet of `pkts` back into its first mbuf segment
/// (a network function moved or resized a header: `prepend`, `trim_front`).
#[cold]
fn write_back_headers(pkts: &Burst) {
    let v = pkts.tx_view();
    for i in 0..v.handle.len() {
        // SAFETY: a chain the burst owns.
        let m = unsafe { Mbuf::from_handle(v.handle[i]) };
        // The header still lies in the first segment's buffer (the burst moved it by at most
        // the headroom the driver reported at Rx), so its distance from the buffer's start is
        // the new `data_off`.
        let off = (v.hdr[i] as usize).wrapping_sub(m.buf_addr() as usize);
        m.set_lengths(off as u16, v.hdr_len[i], v.frame_len[i]);
    }
}

// Rx and Tx are inlined into the run loop's copy for DPDK queues (`runloop::LoopQueue`).
impl Queue for DpdkQueue {
    #[inline(always)]
    fn rx_burst(&mut self, burst: &mut Burst) -> usize {
        if self.budget == 0 && !self.renew_budget() {
            self.flush_free();
            return 0;
        }
        self.flush_free();
        if self.stop.is_stopped() {
            return 0;
        }
        // Another queue's worker is resetting the port (`events.rs`): stand aside.
        if self.shared.events.paused(self.queue) {
            return 0;
        }
        if !burst.adopt(&self.owner) {
            return 0;
        }
        // The burst's room (at most `MAX_BURST`), within the packet limit.
        let room = (burst.room() as u64).min(self.budget) as usize;
        let before = burst.len();
        let host = self.mode == DatapathMode::Host;
        // One poll for the whole room, more only where the PMD may have capped it ([`gather`]):
        // at full load the network functions and Tx run once for the vector; at low load a
        // pass takes what is there, and no packet waits for a later poll. `host` mode receives
        // straight into the burst's handle array, with one byte pass over all its polls after
        // (a pass whose frames reach 64 KiB, frames of 1 KiB and more at the default vector,
        // takes the exact pass: two loads a packet where the packet rate is a tenth of the 64 B
        // one); the split modes into scratch, as they rebuild chains poll by poll.
        let again_at = self.again_at;
        let got = gather(room, again_at, |at, want| {
            self.poll_once(burst, before + at, want, host)
        });
        if got == 0 {
            self.empty_polls += 1;
            if self.queue == 0 {
                self.shared.events.on_idle(&self.shared.pools);
            }
            return 0;
        }
        self.empty_polls = 0;
        // What the queue counts (`rx_packets`) is at most what the PMD handed out (the split
        // modes drop a frame they find no buffer for), so the budget stays within the limit.
        self.budget -= got as u64;
        if host {
            self.rx_host_in_place(got, burst);
        }
        let port = self.index;
        burst.set_rx_defaults(before, port, self.verdict);
        burst.len() - before
    }

    #[inline(always)]
    fn tx_burst(&mut self, pkts: &mut Burst, drops: &mut DropCounts) -> usize {
        if !self.registered {
            self.register();
        }
        let k = pkts.len();
        if k == 0 {
            return 0;
        }
        if !pkts.owned_by(&self.owner) {
            // Packets of another driver: nothing a DPDK queue can send.
            self.stats.tx_foreign += k as u64;
            drops.add(DropReason::TX_INVALID, k as u64);
            pkts.clear();
            return 0;
        }
        if self.shared.events.paused(self.queue) {
            // The port is being reset (`events.rs`): nothing can be sent until it is back.
            self.free_burst(pkts);
            self.stats.tx_full += k as u64;
            drops.add(DropReason::TX_FULL, k as u64);
            self.shared.events.reset_tx_dropped(k as u64);
            return 0;
        }
        if pkts.reshaped() {
            write_back_headers(pkts);
        }
        // The burst knows its bytes; those of chains the ring does not take are read back.
        let mut bytes = pkts.bytes();
        // SAFETY: the burst's handles are `k` mbuf chains it owns (`owned_by` above), laid out
        // as `*mut rte_mbuf` (same size as `usize`); the port and queue are started and used by
        // this thread only. The PMD takes ownership of the first `sent` chains and does not
        // write the array.
        let mut sent = unsafe {
            sys::fastpath::eth_tx_burst(
                self.ops,
                self.port_id,
                self.queue,
                pkts.handles_mut_ptr().cast::<*mut sys::rte_mbuf>(),
                k as u16,
            )
        } as usize;
        if sent < k {
            let unsent_bytes;
            (sent, unsent_bytes) = self.tx_rest(pkts, sent, drops);
            bytes -= unsent_bytes;
        }
        pkts.disown();
        self.stats.tx_bytes += bytes;
        self.stats.tx_packets += sent as u64;
        sent
    }

    fn free_burst(&mut self, pkts: &mut Burst) {
        if !pkts.owned_by(&self.owner) {
            pkts.clear();
            return;
        }
        let h = pkts.handles();
        // SAFETY: the burst's chains (owned by it, checked above) are given up here and the
        // burst disowned right after.
        unsafe {
            sys::rte_pktmbuf_free_bulk(
                h.as_ptr().cast::<*mut sys::rte_mbuf>().cast_mut(),
                h.len() as u32,
            )
        };
        pkts.disown();
    }

    fn push_frame(&mut self, burst: &mut Burst, frame: &[u8]) -> bool {
        let len = frame.len();
        if len == 0 || len > self.rx_room || burst.room() == 0 || !burst.adopt(&self.owner) {
            return false;
        }
        let Some(m) = self.alloc(self.rx_mp) else {
            return false;
        };
        // SAFETY: a fresh single-segment host mbuf with room for `len <= rx_room` bytes.
        unsafe { std::ptr::copy_nonoverlapping(frame.as_ptr(), m.data_ptr(), len) };
        m.set_lengths(m.data_off(), len as u16, len as u32);
        m.set_port(self.port_id);
        let from = burst.len();
        self.push(&mut RxAcc::default(), burst, m, PayloadRing::None);
        burst.set_rx_defaults(from, self.index, Verdict::tx(self.index));
        true
    }

    fn flush(&mut self) {
        self.flush_free();
    }

    fn idle(&self) -> bool {
        let drained = self.stop.is_stopped()
            || self.stats.rx_packets >= self.rx_limit
            || (self.finite && self.empty_polls >= IDLE_POLLS);
        drained && self.to_free.is_empty()
    }

    fn stats(&self) -> QueueStats {
        let mut s = self.stats;
        // Every packet the PMD took is a frame on the wire (counted once, at `stats`).
        s.wire_tx_frames = s.tx_packets;
        if self.queue == 0
            && let Ok(e) = super::shared::eth_stats(self.port_id, "queue stats")
        {
            s.rx_missed += e.imissed;
            s.rx_nombuf += e.rx_nombuf;
        }
        s
    }

    fn xstats(&self) -> Vec<(String, u64)> {
        let mut v = vec![
            ("sw_split".to_string(), self.drv.sw_split),
            ("linearized".to_string(), self.drv.linearized),
            (
                "nic_spill".to_string(),
                self.drv.nic_spill + spill_stats(self.nic_mp).map_or(0, |s| s.spilled),
            ),
            ("dropped_oversize".to_string(), self.drv.dropped_oversize),
            ("nicmem_emulated".to_string(), self.emulated_nicmem as u64),
            ("hw_split".to_string(), self.hw_split as u64),
        ];
        if self.queue == 0 {
            v.push((
                "nicmem_cpu_read_bytes".to_string(),
                NICMEM_CPU_READ_BYTES.load(Ordering::Relaxed),
            ));
            v.push((
                "nicmem_cpu_write_bytes".to_string(),
                NICMEM_CPU_WRITE_BYTES.load(Ordering::Relaxed),
            ));
            v.extend(port_xstats(self.port_id, &self.shared.name));
            v.extend((self.shared.events.xstats().iter()).map(|&(k, n)| (k.to_string(), n)));
        }
        v
    }
}

/// The PMD's extended counters, named `<port>.<counter>`.
fn port_xstats(port: u16, name: &str) -> Vec<(String, u64)> {
    // SAFETY: a NULL buffer asks for the count only.
    let n = unsafe { sys::rte_eth_xstats_get_names(port, std::ptr::null_mut(), 0) };
    if n <= 0 {
        return Vec::new();
    }
    let mut names = vec![sys::rte_eth_xstat_name { name: [0; 64] }; n as usize];
    let mut vals = vec![sys::rte_eth_xstat::default(); n as usize];
    // SAFETY: both buffers hold `n` entries.
    let (a, b) = unsafe {
        (
            sys::rte_eth_xstats_get_names(port, names.as_mut_ptr(), n as u32),
            sys::rte_eth_xstats_get(port, vals.as_mut_ptr(), n as u32),
        )
    };
    if a != n || b != n {
        return Vec::new();
    }
    vals.iter()
        .filter_map(|x| {
            let nm = names.get(x.id as usize)?;
            // SAFETY: xstat names are NUL-terminated within their 64-byte arrays.
            let s = unsafe { std::ffi::CStr::from_ptr(nm.name.as_ptr()) };
            Some((format!("{name}.{}", s.to_string_lossy()), x.value))
        })
        .collect()
}

impl Drop for DpdkQueue {
    fn drop(&mut self) {
        self.flush_free();
        // A port reset no longer waits for this queue to stand aside.
        self.shared.events.leave(self.queue);
    }
}

impl std::fmt::Debug for DpdkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpdkQueue")
            .field("port", &self.shared.name)
            .field("queue", &self.queue)
            .field("mode", &self.mode)
            .field("stats", &self.stats)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::gather;

    /// A PMD with `waiting` packets that hands out at most `cap` a call; records each call's
    /// (slot, asked) and checks that the calls fill the slots in order without a gap.
    fn pmd(waiting: usize, cap: usize) -> impl FnMut(usize, usize) -> usize {
        let (mut left, mut next) = (waiting, 0);
        move |at, want| {
            assert_eq!(at, next, "a poll writes after the last one");
            let n = want.min(cap).min(left);
            left -= n;
            next += n;
            n
        }
    }

    fn calls(room: usize, again_at: usize, waiting: usize, cap: usize) -> (usize, Vec<usize>) {
        let mut asked = Vec::new();
        let mut inner = pmd(waiting, cap);
        let got = gather(room, again_at, |at, want| {
            asked.push(want);
            inner(at, want)
        });
        (got, asked)
    }

    #[test]
    fn one_poll_asks_for_the_whole_vector() {
        // Full load, a PMD without a cap: one call fills the vector.
        assert_eq!(calls(64, 32, 1000, usize::MAX), (64, vec![64]));
        // Low load: what is there, in one call and one empty one after a large share.
        assert_eq!(calls(64, 32, 5, usize::MAX), (5, vec![64]));
        assert_eq!(calls(64, 32, 40, usize::MAX), (40, vec![64, 24]));
        // Nothing waiting: one empty poll.
        assert_eq!(calls(64, 32, 0, usize::MAX), (0, vec![64]));
        // Room limited by the packet budget.
        assert_eq!(calls(3, 32, 1000, usize::MAX), (3, vec![3]));
    }

    #[test]
    fn a_pmd_that_caps_a_call_is_polled_until_the_vector_is_full() {
        // 32 a call (ixgbe's and i40e's vector Rx): polls of 32 fill a vector of 64 or 256.
        assert_eq!(calls(64, 32, 1000, 32), (64, vec![64, 32]));
        assert_eq!(
            calls(256, 32, 1000, 32),
            (256, vec![256, 224, 192, 160, 128, 96, 64, 32])
        );
        // Fewer waiting than the vector: the short poll ends it.
        assert_eq!(calls(64, 32, 45, 32), (45, vec![64, 32]));
        assert_eq!(calls(64, 32, 32, 32), (32, vec![64, 32]));
        // A cap below `again_at` reads as a short poll: one call.
        assert_eq!(calls(64, 32, 1000, 16), (16, vec![64]));
    }
}
