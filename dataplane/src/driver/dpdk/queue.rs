//! [`DpdkQueue`]: one Rx/Tx queue pair of a DPDK port, owned by one worker.
//!
//! Rx reads a burst with one (wrapped) `rte_eth_rx_burst`, then turns each mbuf chain into a
//! [`Packet`] by reading its fields directly. In the split modes on PMDs without hardware buffer
//! split it splits in software: header mbufs (and, with emulated nicmem, payload mbufs) for the
//! whole burst come from one `rte_pktmbuf_alloc_bulk` per pool. Tx hands the packets' chains to
//! one `rte_eth_tx_burst` and keeps what the ring did not take in the caller's list. Frees are
//! collected and released with `rte_pktmbuf_free_bulk`.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dpdk_sys as sys;

use super::eal::register_worker_thread;
use super::mbuf::{Mbuf, NICMEM_CPU_READ_BYTES, PayloadMem, data_ptr};
use super::port::{PortShared, nic_pool_kind};
use super::spill::spill_stats;
use crate::burst::Burst;
use crate::mode::DatapathMode;
use crate::packet::{Packet, PacketMeta, RxRing};
use crate::port::{Queue, QueueStats};
use crate::verdict::Verdict;

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
    pub(crate) queue: u16,
    pub(crate) index: u16,
    pub(crate) verdict: Verdict,
    pub(crate) mode: DatapathMode,
    pub(crate) split_offset: usize,
    pub(crate) hw_split: bool,
    pub(crate) burst: usize,
    pub(crate) max_frame: usize,
    pub(crate) stop: RxStop,
    pub(crate) rx_limit: Option<u64>,
    pub(crate) finite: bool,
    pub(crate) core: Option<usize>,
    pub(crate) emulated_nicmem: bool,
    pub(crate) device_nicmem: bool,
    pub(crate) rss: bool,
}

/// Driver counters beyond [`QueueStats`] (reported as xstats).
#[derive(Clone, Copy, Debug, Default)]
struct DriverCounters {
    sw_split: u64,
    linearized: u64,
    tx_copied: u64,
    nic_spill: u64,
    dropped_oversize: u64,
    /// Packets received and forwarded raw (no `Packet` built; see `Queue::forward_raw`).
    raw_forwarded: u64,
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
    /// nicmem window of `nic_mp` when it is a spill pool (payloads outside it are host buffers).
    nic_window: Option<(u64, u64)>,
    nic_mem: PayloadMem,
    rx_room: usize,
    rss: bool,
    rx: Vec<*mut sys::rte_mbuf>,
    hdrs: Vec<*mut sys::rte_mbuf>,
    nics: Vec<*mut sys::rte_mbuf>,
    tx: Vec<*mut sys::rte_mbuf>,
    to_free: Vec<*mut sys::rte_mbuf>,
    scratch: Vec<u8>,
    stats: QueueStats,
    drv: DriverCounters,
    stop: RxStop,
    rx_limit: u64,
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
        let nic_window = pools.nic_window;
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
            nic_window,
            nic_mem: if s.device_nicmem {
                PayloadMem::DeviceNic
            } else {
                PayloadMem::EmulatedNic
            },
            rx_room,
            rss: s.rss,
            rx: vec![std::ptr::null_mut(); b],
            hdrs: Vec::with_capacity(b),
            nics: Vec::with_capacity(b),
            tx: vec![std::ptr::null_mut(); b],
            to_free: Vec::with_capacity(FREE_BATCH + 4 * b),
            scratch: Vec::with_capacity(s.max_frame.max(2048)),
            stats: QueueStats::default(),
            drv: DriverCounters::default(),
            stop: s.stop,
            rx_limit: s.rx_limit.unwrap_or(u64::MAX),
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

    #[inline(always)]
    fn meta(&self, m: *mut sys::rte_mbuf, ring: RxRing) -> PacketMeta {
        // SAFETY: `m` is a valid mbuf just received; reading plain fields and the RSS hash union
        // member (valid whenever the RSS flag is set, else ignored). Ports without RSS skip the
        // read (one mbuf field less per packet).
        let rss_hash = unsafe {
            if self.rss && (*m).ol_flags & sys::NMDP_MBUF_F_RX_RSS_HASH != 0 {
                (*m).__bindgen_anon_2.hash.rss
            } else {
                0
            }
        };
        PacketMeta {
            rss_hash,
            port: self.index,
            queue: self.queue,
            ring,
            rx_time_ns: 0,
        }
    }

    /// Wraps a checked chain into a packet and appends it to the burst; counts it in `acc`
    /// (added to the queue's counters once per burst).
    #[inline(always)]
    fn push(
        &self,
        acc: &mut RxAcc,
        burst: &mut Burst,
        m: *mut sys::rte_mbuf,
        ring: RxRing,
        mem: PayloadMem,
    ) {
        // SAFETY: `m` is a valid chain of at most two segments that this queue owns; the caller
        // determined where its payload segment lives.
        let (hdr_len, frame_len) = unsafe { ((*m).data_len as u32, (*m).pkt_len) };
        let meta = self.meta(m, ring);
        // SAFETY: as above; ownership moves into the packet.
        let mb = unsafe { Mbuf::from_raw(NonNull::new_unchecked(m), mem) };
        acc.packets += 1;
        acc.bytes += frame_len as u64;
        match ring {
            RxRing::Primary => acc.primary += 1,
            RxRing::Secondary => acc.secondary += 1,
            RxRing::None => {}
        }
        // Cannot fail: the burst had room for every received mbuf.
        let _ = burst.push(
            Packet::from_mbuf(mb, hdr_len, frame_len, meta),
            self.verdict,
        );
    }

    #[inline(always)]
    fn count(&mut self, acc: RxAcc) {
        self.stats.rx_packets += acc.packets;
        self.stats.rx_bytes += acc.bytes;
        self.stats.rx_primary += acc.primary;
        self.stats.rx_secondary += acc.secondary;
    }

    fn rx_host(&mut self, n: usize, burst: &mut Burst) {
        // SAFETY: the first `n` entries of `rx` were just received and are owned by this queue.
        if !self.rx[..n].iter().all(|&m| unsafe { (*m).nb_segs } == 1) {
            return self.rx_host_chains(n, burst);
        }
        // The common case: every frame in one segment. One pass writes the packets straight
        // into the burst (see `Burst::extend_from`).
        let mut bytes = 0u64;
        let added = burst.extend_from(
            self.verdict,
            self.rx[..n].iter().map(|&m| {
                // SAFETY: `m` is a valid single-segment mbuf owned by this queue; plain field reads.
                let len = unsafe { (*m).pkt_len };
                bytes += len as u64;
                let meta = self.meta(m, RxRing::None);
                // SAFETY: as above; ownership moves into the packet.
                let mb = unsafe { Mbuf::from_raw(NonNull::new_unchecked(m), PayloadMem::Host) };
                Packet::from_mbuf(mb, len, len, meta)
            }),
        );
        debug_assert_eq!(added, n, "rx_burst asked for at most the burst's room");
        self.count(RxAcc {
            packets: added as u64,
            bytes,
            ..RxAcc::default()
        });
    }

    /// `host` mode with multi-segment chains in the burst: each chain is linearized first.
    #[cold]
    fn rx_host_chains(&mut self, n: usize, burst: &mut Burst) {
        let mut acc = RxAcc::default();
        for i in 0..n {
            let m = self.rx[i];
            // SAFETY: `m` was just received and is owned by this queue.
            let segs = unsafe { (*m).nb_segs };
            let m = if segs == 1 {
                m
            } else {
                match self.linearize(m) {
                    Some(m) => m,
                    None => continue,
                }
            };
            self.push(&mut acc, burst, m, RxRing::None, PayloadMem::Host);
        }
        self.count(acc);
    }

    /// Transmits received chains (`bytes` in all) without building packets; frees and counts
    /// as `tx_full` what the ring does not take. Returns how many were not sent.
    #[inline]
    fn send_raw(&mut self, pkts: &mut [*mut sys::rte_mbuf], bytes: u64) -> usize {
        if !self.registered {
            self.register();
        }
        let k = pkts.len();
        // SAFETY: `pkts` holds `k` valid chains this worker owns; the port and queue are started
        // and used by this thread only. The PMD takes ownership of the first `sent` chains.
        let sent =
            unsafe { sys::rte_eth_tx_burst(self.port_id, self.queue, pkts.as_mut_ptr(), k as u16) }
                as usize;
        let mut sent_bytes = bytes;
        if sent < k {
            for &m in &pkts[sent..] {
                // SAFETY: an unsent chain, still owned here: a plain field read, then it joins
                // the bulk-free list.
                sent_bytes -= unsafe { (*m).pkt_len } as u64;
                self.to_free.push(m);
            }
            self.flush_free();
        }
        self.stats.tx_packets += sent as u64;
        self.stats.tx_bytes += sent_bytes;
        self.stats.wire_tx_frames += sent as u64;
        self.stats.tx_full += (k - sent) as u64;
        k - sent
    }

    /// Copies a multi-segment chain into one Rx mbuf (slow path: jumbo scatter, or a chain
    /// looped back in `host` mode). Frees the original chain. `None` (counted) if it does not fit
    /// or no mbuf is left.
    #[cold]
    fn linearize(&mut self, m: *mut sys::rte_mbuf) -> Option<*mut sys::rte_mbuf> {
        // SAFETY: `m` is a valid chain owned by this queue.
        let len = unsafe { (*m).pkt_len } as usize;
        if len > self.rx_room || self.chain_has_device_segment(m) {
            self.drv.dropped_oversize += 1;
            self.stats.rx_oversize += 1;
            self.to_free.push(m);
            return None;
        }
        // SAFETY: `rx_mp` is a live pool.
        let d = unsafe { sys::rte_pktmbuf_alloc(self.rx_mp) };
        if d.is_null() {
            self.stats.rx_nombuf += 1;
            self.to_free.push(m);
            return None;
        }
        let mut off = 0usize;
        let mut s = m;
        // SAFETY: walking a valid chain of host-memory segments (device segments were excluded
        // above); the destination has room for `len` bytes (checked against `rx_room`).
        unsafe {
            while !s.is_null() {
                let l = (*s).data_len as usize;
                std::ptr::copy_nonoverlapping(data_ptr(s), data_ptr(d).add(off), l);
                off += l;
                s = (*s).next;
            }
            (*d).data_len = off as u16;
            (*d).pkt_len = off as u32;
            (*d).port = (*m).port;
            (*d).ol_flags = (*m).ol_flags & sys::NMDP_MBUF_F_RX_RSS_HASH;
            (*d).__bindgen_anon_2 = (*m).__bindgen_anon_2;
        }
        self.drv.linearized += 1;
        self.to_free.push(m);
        Some(d)
    }

    fn chain_has_device_segment(&self, m: *mut sys::rte_mbuf) -> bool {
        let mut s = m;
        while !s.is_null() {
            // SAFETY: walking a valid chain.
            let (pool, next) = unsafe { ((*s).pool, (*s).next) };
            if nic_pool_kind(pool) == Some(true) {
                return true;
            }
            s = next;
        }
        false
    }

    /// Where the second segment of a received two-segment chain lives.
    #[inline]
    fn classify_payload(&self, m: *mut sys::rte_mbuf) -> (RxRing, PayloadMem) {
        // SAFETY: `m` is a valid two-segment chain.
        let pool = unsafe { (*(*m).next).pool };
        if pool == self.nic_mp {
            if let Some((lo, hi)) = self.nic_window {
                // SAFETY: as above; the payload segment's buffer address.
                let a = unsafe { (*(*m).next).buf_addr } as u64;
                if !(lo..hi).contains(&a) {
                    // A spill pool's host side: the secondary ring.
                    return (RxRing::Secondary, PayloadMem::Host);
                }
            }
            return (RxRing::Primary, self.nic_mem);
        }
        match nic_pool_kind(pool) {
            Some(true) => (RxRing::Primary, PayloadMem::DeviceNic),
            Some(false) => (RxRing::Primary, PayloadMem::EmulatedNic),
            None => (RxRing::Secondary, PayloadMem::Host),
        }
    }

    /// Hardware split (mlx5): chains arrive as header + payload already.
    fn rx_hw_split(&mut self, n: usize, burst: &mut Burst) {
        let mut acc = RxAcc::default();
        for i in 0..n {
            let m = self.rx[i];
            // SAFETY: `m` was just received and is owned by this queue.
            let (segs, len) = unsafe { ((*m).nb_segs, (*m).pkt_len as usize) };
            match segs {
                1 if len <= self.split => {
                    self.push(&mut acc, burst, m, RxRing::None, PayloadMem::Host)
                }
                2 => {
                    let (ring, mem) = self.classify_payload(m);
                    self.push(&mut acc, burst, m, ring, mem);
                }
                _ => self.split_slow(&mut acc, burst, m),
            }
        }
        self.count(acc);
    }

    /// Software split for PMDs without buffer split.
    fn rx_sw_split(&mut self, n: usize, burst: &mut Burst) {
        let s = self.split;
        // Header (and nicmem payload) mbufs for every frame of the burst that needs a split, with
        // one bulk allocation per pool.
        let mut need = 0usize;
        for &m in &self.rx[..n] {
            // SAFETY: received mbufs owned by this queue.
            if unsafe { (*m).nb_segs == 1 && (*m).pkt_len as usize > s } {
                need += 1;
            }
        }
        self.hdrs.clear();
        self.nics.clear();
        if need > 0 {
            // SAFETY: the vector has capacity >= burst >= need; on success DPDK fills `need`
            // pointers with freshly reset mbufs we own.
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
            let m = self.rx[i];
            // SAFETY: received mbuf owned by this queue.
            let (segs, len) = unsafe { ((*m).nb_segs, (*m).pkt_len as usize) };
            if segs == 1 {
                if len <= s {
                    self.push(&mut acc, burst, m, RxRing::None, PayloadMem::Host);
                    continue;
                }
                let Some(h) = self.hdrs.pop() else {
                    self.stats.rx_nombuf += 1;
                    self.to_free.push(m);
                    continue;
                };
                let (ring, mem) = self.split_into(h, m, len);
                self.push(&mut acc, burst, h, ring, mem);
            } else {
                // SAFETY: a valid chain.
                let first = unsafe { (*m).data_len as usize };
                if segs == 2 && first == s {
                    // Already split (e.g. our own split packet looped back by net_ring).
                    let (ring, mem) = self.classify_payload(m);
                    self.push(&mut acc, burst, m, ring, mem);
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
    fn split_into(
        &mut self,
        h: *mut sys::rte_mbuf,
        m: *mut sys::rte_mbuf,
        len: usize,
    ) -> (RxRing, PayloadMem) {
        let s = self.split;
        let nic = if self.mode.uses_nicmem() {
            let x = self.nics.pop();
            if x.is_none() {
                self.drv.nic_spill += 1;
            }
            x
        } else {
            None
        };
        self.drv.sw_split += 1;
        // SAFETY: `h`, `m` (and `p`) are valid mbufs owned by this queue. `h` has room for `s`
        // header bytes (header pool data room >= split offset), `p` for the payload (payload
        // pool elements hold max_frame - split bytes, and `len <= max_frame`); emulated nicmem
        // is host memory. All three are distinct buffers, so the copies do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data_ptr(m), data_ptr(h), s);
            (*h).data_len = s as u16;
            (*h).pkt_len = len as u32;
            (*h).nb_segs = 2;
            (*h).port = (*m).port;
            (*h).ol_flags = (*m).ol_flags & sys::NMDP_MBUF_F_RX_RSS_HASH;
            (*h).__bindgen_anon_2 = (*m).__bindgen_anon_2;
            match nic {
                Some(p) => {
                    let plen = len - s;
                    (*p).data_off = 0;
                    std::ptr::copy_nonoverlapping(data_ptr(m).add(s), data_ptr(p), plen);
                    (*p).data_len = plen as u16;
                    (*p).pkt_len = plen as u32;
                    (*h).next = p;
                    self.to_free.push(m);
                    (RxRing::Primary, self.nic_mem)
                }
                None => {
                    (*m).data_off += s as u16;
                    (*m).data_len -= s as u16;
                    (*m).pkt_len = (*m).data_len as u32;
                    (*h).next = m;
                    (RxRing::Secondary, PayloadMem::Host)
                }
            }
        }
    }

    /// Slow path: any other chain shape is linearized, then split with single allocations.
    #[cold]
    fn split_slow(&mut self, acc: &mut RxAcc, burst: &mut Burst, m: *mut sys::rte_mbuf) {
        let Some(m) = self.linearize(m) else {
            return;
        };
        // SAFETY: a valid single-segment mbuf we own.
        let len = unsafe { (*m).pkt_len as usize };
        if len <= self.split {
            self.push(acc, burst, m, RxRing::None, PayloadMem::Host);
            return;
        }
        // SAFETY: live pools.
        let h = unsafe { sys::rte_pktmbuf_alloc(self.hdr_mp) };
        if h.is_null() {
            self.stats.rx_nombuf += 1;
            self.to_free.push(m);
            return;
        }
        if self.mode.uses_nicmem() && self.nics.is_empty() && !self.nic_mp.is_null() {
            // SAFETY: live pool.
            let p = unsafe { sys::rte_pktmbuf_alloc(self.nic_mp) };
            if !p.is_null() {
                self.nics.push(p);
            }
        }
        let (ring, mem) = self.split_into(h, m, len);
        self.push(acc, burst, h, ring, mem);
    }

    /// Copies a packet made of `nicmem` buffers (not received from a DPDK port) into one mbuf.
    #[cold]
    fn copy_to_mbuf(&mut self, pkt: &Packet) -> Option<Packet> {
        pkt.copy_frame(&mut self.scratch);
        let len = self.scratch.len();
        if len > self.rx_room || len == 0 {
            return None;
        }
        // SAFETY: live pool.
        let d = unsafe { sys::rte_pktmbuf_alloc(self.rx_mp) };
        let d = NonNull::new(d)?;
        // SAFETY: a fresh mbuf with room for `len` bytes (checked against `rx_room`).
        unsafe {
            std::ptr::copy_nonoverlapping(self.scratch.as_ptr(), data_ptr(d.as_ptr()), len);
            (*d.as_ptr()).data_len = len as u16;
            (*d.as_ptr()).pkt_len = len as u32;
        }
        self.drv.tx_copied += 1;
        // SAFETY: the mbuf is ours and single-segment.
        let mb = unsafe { Mbuf::from_raw(d, PayloadMem::Host) };
        Some(Packet::from_mbuf(mb, len as u32, len as u32, pkt.meta))
    }
}

/// Removes the first `k` packets of `v` without dropping them: their mbuf chains now belong to
/// the PMD. Every one of them must be an mbuf packet (their only resource is the chain).
#[inline]
fn forget_prefix(v: &mut Vec<Packet>, k: usize) {
    let len = v.len();
    debug_assert!(k <= len);
    // SAFETY: elements `[0, k)` are mbuf packets whose chains were handed to the PMD, so they
    // must not be dropped; `Packet` owns nothing else. We shrink the length first (so a panic
    // cannot double-drop), move the tail `[k, len)` to the front (regions may overlap: `copy`),
    // and restore the length to the tail's size.
    unsafe {
        v.set_len(0);
        let p = v.as_mut_ptr();
        std::ptr::copy(p.add(k), p, len - k);
        v.set_len(len - k);
    }
}

impl Queue for DpdkQueue {
    #[inline]
    fn rx_burst(&mut self, burst: &mut Burst) -> usize {
        if !self.registered {
            self.register();
        }
        self.flush_free();
        if self.stop.is_stopped() || self.stats.rx_packets >= self.rx_limit {
            return 0;
        }
        let room = burst
            .room()
            .min(self.rx.len())
            .min((self.rx_limit - self.stats.rx_packets).min(u16::MAX as u64) as usize);
        // SAFETY: `rx` has room for `room` pointers; the port and queue are started and this
        // queue is polled by one thread only.
        let n = unsafe {
            sys::rte_eth_rx_burst(self.port_id, self.queue, self.rx.as_mut_ptr(), room as u16)
        } as usize;
        if n == 0 {
            self.empty_polls += 1;
            return 0;
        }
        self.empty_polls = 0;
        let before = burst.len();
        match self.mode {
            DatapathMode::Host => self.rx_host(n, burst),
            _ if self.hw_split => self.rx_hw_split(n, burst),
            _ => self.rx_sw_split(n, burst),
        }
        burst.len() - before
    }

    #[inline]
    fn tx_burst(&mut self, pkts: &mut Vec<Packet>) -> usize {
        if !self.registered {
            self.register();
        }
        let mut taken = 0;
        while !pkts.is_empty() {
            // One pass collects the chains and their bytes; a packet made of `nicmem` buffers
            // (not received from DPDK) is first copied into an mbuf (slow path).
            let mut tx = std::mem::take(&mut self.tx);
            let n = pkts.len().min(tx.len());
            let (mut k, mut bytes) = (0usize, 0u64);
            for (dst, slot) in tx[..n].iter_mut().zip(pkts.iter_mut()) {
                let p = match slot.mbuf() {
                    Some(m) => m.as_ptr(),
                    None => match self.copy_to_mbuf(slot) {
                        Some(c) => {
                            let p = c.mbuf().map(|m| m.as_ptr());
                            *slot = c;
                            match p {
                                Some(p) => p,
                                None => break,
                            }
                        }
                        None => break,
                    },
                };
                *dst = p;
                bytes += slot.frame_len() as u64;
                k += 1;
            }
            self.tx = tx;
            if k == 0 {
                break;
            }
            // SAFETY: `tx[..k]` holds `k` valid chains owned by `pkts[..k]`; the port and queue
            // are started and polled by this thread only. The PMD takes ownership of the first
            // `sent` chains.
            let sent = unsafe {
                sys::rte_eth_tx_burst(self.port_id, self.queue, self.tx.as_mut_ptr(), k as u16)
            } as usize;
            if sent < k {
                for p in &pkts[sent..k] {
                    bytes -= p.frame_len() as u64;
                }
            }
            self.stats.tx_bytes += bytes;
            self.stats.tx_packets += sent as u64;
            self.stats.wire_tx_frames += sent as u64;
            forget_prefix(pkts, sent);
            taken += sent;
            if sent < k {
                break;
            }
        }
        self.stats.tx_full += pkts.len() as u64;
        taken
    }

    fn raw_forwarding(&self) -> Option<u16> {
        // Only `host` mode: the split modes build packets from split chains (software split,
        // per-ring counters), which a raw burst would skip.
        match (self.mode, self.verdict) {
            (DatapathMode::Host, Verdict::Tx(p)) => Some(p),
            _ => None,
        }
    }

    #[inline]
    fn forward_raw(&mut self, tx: Option<&mut dyn Queue>, max: usize) -> Option<(usize, usize)> {
        let tx: Option<&mut DpdkQueue> = match tx {
            Some(t) => Some((t as &mut dyn std::any::Any).downcast_mut::<DpdkQueue>()?),
            None => None,
        };
        if !self.registered {
            self.register();
        }
        self.flush_free();
        if self.stop.is_stopped() || self.stats.rx_packets >= self.rx_limit {
            return Some((0, 0));
        }
        let room = max
            .min(self.rx.len())
            .min((self.rx_limit - self.stats.rx_packets).min(u16::MAX as u64) as usize);
        let mut rx = std::mem::take(&mut self.rx);
        // SAFETY: `rx` has room for `room` pointers; the port and queue are started and this
        // queue is polled by one thread only.
        let n = unsafe {
            sys::rte_eth_rx_burst(self.port_id, self.queue, rx.as_mut_ptr(), room as u16)
        } as usize;
        if n == 0 {
            self.rx = rx;
            self.empty_polls += 1;
            return Some((0, 0));
        }
        self.empty_polls = 0;
        let pkts = &mut rx[..n];
        // SAFETY: the first `n` entries were just received and are owned by this queue; reading
        // the chain length is a plain field read.
        let bytes: u64 = pkts.iter().map(|&m| unsafe { (*m).pkt_len } as u64).sum();
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        self.drv.raw_forwarded += n as u64;
        let unsent = match tx {
            Some(t) => t.send_raw(pkts, bytes),
            None => self.send_raw(pkts, bytes),
        };
        self.rx = rx;
        Some((n, unsent))
    }

    #[inline]
    fn free(&mut self, pkt: Packet) {
        match pkt.into_mbuf() {
            Ok(m) => {
                self.to_free.push(m.into_raw());
                if self.to_free.len() >= FREE_BATCH {
                    self.flush_free();
                }
            }
            Err(p) => drop(p),
        }
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
        if self.queue == 0 {
            let mut e = sys::rte_eth_stats::default();
            // SAFETY: valid port id and out-pointer; reading counters is safe from any thread.
            if unsafe { sys::rte_eth_stats_get(self.port_id, &mut e) } == 0 {
                s.rx_missed += e.imissed;
                s.rx_nombuf += e.rx_nombuf;
            }
        }
        s
    }

    fn xstats(&self) -> Vec<(String, u64)> {
        let mut v = vec![
            ("sw_split".to_string(), self.drv.sw_split),
            ("linearized".to_string(), self.drv.linearized),
            ("tx_copied".to_string(), self.drv.tx_copied),
            (
                "nic_spill".to_string(),
                self.drv.nic_spill + spill_stats(self.nic_mp).map_or(0, |s| s.spilled),
            ),
            ("dropped_oversize".to_string(), self.drv.dropped_oversize),
            ("raw_forwarded".to_string(), self.drv.raw_forwarded),
            ("nicmem_emulated".to_string(), self.emulated_nicmem as u64),
            ("hw_split".to_string(), self.hw_split as u64),
        ];
        if self.queue == 0 {
            v.push((
                "nicmem_cpu_read_bytes".to_string(),
                NICMEM_CPU_READ_BYTES.load(Ordering::Relaxed),
            ));
            v.extend(port_xstats(self.port_id, &self.shared.name));
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
