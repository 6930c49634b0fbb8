//! [`DpdkQueue`]: one Rx/Tx queue pair of a DPDK port, owned by one worker.
//!
//! Rx reads a burst with one (wrapped) `rte_eth_rx_burst`, then writes each mbuf chain into the
//! burst's arrays (the mbuf pointer is the packet's handle; header place and lengths are read
//! from its fields). In the split modes on PMDs without hardware buffer split it splits in
//! software: header mbufs (and, with emulated nicmem, payload mbufs) for the whole burst come from
//! one `rte_pktmbuf_alloc_bulk` per pool. Tx hands the burst's handle array to one
//! `rte_eth_tx_burst` as it is (writing header changes back into the mbufs first when a network
//! function moved a header) and frees what the ring did not take with one
//! `rte_pktmbuf_free_bulk`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dpdk_sys as sys;

use super::eal::register_worker_thread;
use super::mbuf::{
    NICMEM_CPU_READ_BYTES, NICMEM_CPU_WRITE_BYTES, PayloadMem, data_ptr, mbuf_owner,
};
use super::port::{PortShared, nic_pool_kind};
use super::spill::spill_stats;
use crate::burst::{Burst, DescribeOut, HandleLayout, RxPacket};
use crate::mode::DatapathMode;
use crate::packet::{PacketOwner, PayloadRing as RxRing};
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
    rx: Vec<*mut sys::rte_mbuf>,
    hdrs: Vec<*mut sys::rte_mbuf>,
    nics: Vec<*mut sys::rte_mbuf>,
    to_free: Vec<*mut sys::rte_mbuf>,
    owner: std::sync::Arc<dyn PacketOwner>,
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
            rx_room,
            rss: s.rss,
            rx: vec![std::ptr::null_mut(); b],
            hdrs: Vec::with_capacity(b),
            nics: Vec::with_capacity(b),
            to_free: Vec::with_capacity(FREE_BATCH + 4 * b),
            owner: mbuf_owner(),
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

    /// Appends the checked chain `m` to the burst (whose owner is this driver's, adopted by
    /// `rx_burst`); counts it in `acc` (added to the queue's counters once per burst).
    #[inline(always)]
    fn push(&self, acc: &mut RxAcc, burst: &mut Burst, m: *mut sys::rte_mbuf, ring: RxRing) {
        // SAFETY: `m` is a valid chain of at most two segments that this queue owns; plain field
        // reads, and the RSS hash union member (valid whenever the RSS flag is set, else
        // ignored; ports without RSS skip the read).
        let p = unsafe {
            let rss_hash = if self.rss && (*m).ol_flags & sys::NMDP_MBUF_F_RX_RSS_HASH != 0 {
                (*m).__bindgen_anon_2.hash.rss
            } else {
                0
            };
            RxPacket {
                handle: m as usize,
                hdr: data_ptr(m),
                hdr_len: (*m).data_len,
                headroom: (*m).data_off,
                frame_len: (*m).pkt_len,
                ring,
                rss_hash,
            }
        };
        acc.packets += 1;
        acc.bytes += u64::from(p.frame_len);
        match ring {
            RxRing::Primary => acc.primary += 1,
            RxRing::Secondary => acc.secondary += 1,
            RxRing::None => {}
        }
        // SAFETY: the burst adopted this driver's owner; the first segment is host memory
        // holding `data_len` bytes after `data_off` bytes of headroom, owned by this chain,
        // which moves into the burst.
        let pushed = unsafe { burst.push(&p) };
        debug_assert!(pushed, "the burst had room for every received mbuf");
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
    fn rx_host_in_place(&mut self, n: usize, burst: &mut Burst) {
        let at = burst.len();
        // SAFETY: `rte_eth_rx_burst` just wrote `n` received mbufs after the burst's last packet
        // (within its capacity); they are owned by this queue until pushed.
        let got = unsafe {
            std::slice::from_raw_parts(
                burst.handles_mut_ptr().add(at).cast::<*mut sys::rte_mbuf>(),
                n,
            )
        };
        let (mut bytes, mut chained) = (0u64, false);
        for &m in got {
            // SAFETY: `m` was just received and is owned by this queue; plain field reads.
            unsafe {
                bytes += u64::from((*m).pkt_len);
                chained |= (*m).nb_segs != 1;
            }
        }
        if chained {
            self.rx[..n].copy_from_slice(got);
            return self.rx_host_chains(n, burst);
        }
        let describe = if self.rss {
            describe_mbufs::<true>
        } else {
            describe_mbufs::<false>
        };
        // SAFETY: the burst adopted this driver's owner (`rx_burst`); the handles are
        // single-segment mbufs this queue received and hands over; `describe_mbufs` describes
        // any of them truthfully; `bytes` is their frame bytes.
        unsafe { burst.push_handles_in_place(n, describe, Some(MBUF_LAYOUT), bytes) };
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
            self.push(&mut acc, burst, m, RxRing::None);
        }
        self.count(acc);
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

    /// Which ring served the second segment of a received two-segment chain: the primary
    /// (nicmem) ring when its buffer is nicmem, else the secondary (host) ring.
    #[inline]
    fn classify_payload(&self, m: *mut sys::rte_mbuf) -> RxRing {
        // SAFETY: `m` is a valid two-segment chain.
        match super::mbuf::payload_mem(unsafe { (*m).next }) {
            PayloadMem::Host => RxRing::Secondary,
            PayloadMem::EmulatedNic | PayloadMem::DeviceNic => RxRing::Primary,
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
                1 if len <= self.split => self.push(&mut acc, burst, m, RxRing::None),
                2 => {
                    let ring = self.classify_payload(m);
                    self.push(&mut acc, burst, m, ring);
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
                    self.push(&mut acc, burst, m, RxRing::None);
                    continue;
                }
                let Some(h) = self.hdrs.pop() else {
                    self.stats.rx_nombuf += 1;
                    self.to_free.push(m);
                    continue;
                };
                let ring = self.split_into(h, m, len);
                self.push(&mut acc, burst, h, ring);
            } else {
                // SAFETY: a valid chain.
                let first = unsafe { (*m).data_len as usize };
                if segs == 2 && first == s {
                    // Already split (e.g. our own split packet looped back by net_ring).
                    let ring = self.classify_payload(m);
                    self.push(&mut acc, burst, m, ring);
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
    fn split_into(&mut self, h: *mut sys::rte_mbuf, m: *mut sys::rte_mbuf, len: usize) -> RxRing {
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
                    RxRing::Primary
                }
                None => {
                    (*m).data_off += s as u16;
                    (*m).data_len -= s as u16;
                    (*m).pkt_len = (*m).data_len as u32;
                    (*h).next = m;
                    RxRing::Secondary
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
            self.push(acc, burst, m, RxRing::None);
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
        let ring = self.split_into(h, m, len);
        self.push(acc, burst, h, ring);
    }
}

/// Where an `rte_mbuf` keeps the header place (offsets asserted at compile time in `dpdk-sys`).
const MBUF_LAYOUT: HandleLayout = HandleLayout {
    buf_addr: std::mem::offset_of!(sys::rte_mbuf, buf_addr),
    data_off: std::mem::offset_of!(sys::rte_mbuf, data_off),
    data_len: std::mem::offset_of!(sys::rte_mbuf, data_len),
    pkt_len: std::mem::offset_of!(sys::rte_mbuf, pkt_len),
};

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
        let m = h as *mut sys::rte_mbuf;
        // SAFETY: every handle is a live mbuf chain held by the burst; plain field reads (the
        // RSS hash union member only when the flag says it is set).
        unsafe {
            hdr[i] = data_ptr(m);
            hdr_len[i] = (*m).data_len;
            headroom[i] = (*m).data_off;
            frame_len[i] = (*m).pkt_len;
            ring[i] = if (*m).nb_segs == 1 {
                RxRing::None
            } else {
                match super::mbuf::payload_mem((*m).next) {
                    PayloadMem::Host => RxRing::Secondary,
                    _ => RxRing::Primary,
                }
            };
            rss[i] = if RSS && (*m).ol_flags & sys::NMDP_MBUF_F_RX_RSS_HASH != 0 {
                (*m).__bindgen_anon_2.hash.rss
            } else {
                0
            };
        }
    }
}

/// Writes the header place and lengths of every packet of `pkts` back into its first mbuf segment
/// (a network function moved or resized a header: `prepend`, `trim_front`).
#[cold]
fn write_back_headers(pkts: &Burst) {
    let v = pkts.tx_view();
    for i in 0..v.handle.len() {
        let m = v.handle[i] as *mut sys::rte_mbuf;
        // SAFETY: `m` is a chain the burst owns; the header still lies in its first segment's
        // buffer (the burst moved it by at most the headroom the driver reported at Rx), so
        // `hdr - buf_addr` is the new `data_off`.
        unsafe {
            let off = v.hdr[i].offset_from((*m).buf_addr as *const u8);
            (*m).data_off = off as u16;
            (*m).data_len = v.hdr_len[i];
            (*m).pkt_len = v.frame_len[i];
        }
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
        if !burst.adopt(&self.owner) {
            return 0;
        }
        let room = burst
            .room()
            .min(self.rx.len())
            .min((self.rx_limit - self.stats.rx_packets).min(u16::MAX as u64) as usize);
        let before = burst.len();
        let host = self.mode == DatapathMode::Host;
        // `host` mode receives straight into the burst's handle array; the split modes into
        // scratch, as they rebuild chains.
        let dst = if host {
            // SAFETY: a pointer to the handle slots after the burst's last packet (`room` fit).
            unsafe {
                burst
                    .handles_mut_ptr()
                    .add(before)
                    .cast::<*mut sys::rte_mbuf>()
            }
        } else {
            self.rx.as_mut_ptr()
        };
        // SAFETY: `dst` has room for `room` pointers; the port and queue are started and this
        // queue is polled by one thread only.
        let n =
            unsafe { sys::rte_eth_rx_burst(self.port_id, self.queue, dst, room as u16) } as usize;
        if n == 0 {
            self.empty_polls += 1;
            return 0;
        }
        self.empty_polls = 0;
        match self.mode {
            DatapathMode::Host => self.rx_host_in_place(n, burst),
            _ if self.hw_split => self.rx_hw_split(n, burst),
            _ => self.rx_sw_split(n, burst),
        }
        let port = self.index;
        burst.set_rx_defaults(before, port, self.verdict);
        burst.len() - before
    }

    #[inline]
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
        if pkts.reshaped() {
            write_back_headers(pkts);
        }
        // The unsent chains' bytes are read back; the burst knows its total.
        let len_of = |m: usize| -> u64 {
            // SAFETY: a chain the burst still owns; a plain field read.
            u64::from(unsafe { (*(m as *mut sys::rte_mbuf)).pkt_len })
        };
        let mut bytes = pkts.bytes();
        // SAFETY: the burst's handles are `k` mbuf chains it owns (`owned_by` above), laid out
        // as `*mut rte_mbuf` (same size as `usize`); the port and queue are started and used by
        // this thread only. The PMD takes ownership of the first `sent` chains and does not
        // write the array.
        let sent = unsafe {
            sys::rte_eth_tx_burst(
                self.port_id,
                self.queue,
                pkts.handles_mut_ptr().cast::<*mut sys::rte_mbuf>(),
                k as u16,
            )
        } as usize;
        let h = pkts.handles();
        if sent < k {
            let rest = &h[sent..];
            bytes -= rest.iter().map(|&m| len_of(m)).sum::<u64>();
            // SAFETY: the unsent chains still belong to the burst, given up here (the burst is
            // disowned below); `usize` and `*mut rte_mbuf` have the same layout.
            unsafe {
                sys::rte_pktmbuf_free_bulk(
                    rest.as_ptr().cast::<*mut sys::rte_mbuf>().cast_mut(),
                    rest.len() as u32,
                )
            };
            self.stats.tx_full += (k - sent) as u64;
            drops.add(DropReason::TX_FULL, (k - sent) as u64);
        }
        pkts.disown();
        self.stats.tx_bytes += bytes;
        self.stats.tx_packets += sent as u64;
        self.stats.wire_tx_frames += sent as u64;
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
        // SAFETY: `rx_mp` is a live pktmbuf pool.
        let m = unsafe { sys::rte_pktmbuf_alloc(self.rx_mp) };
        if m.is_null() {
            return false;
        }
        // SAFETY: a fresh single-segment mbuf with room for `len <= rx_room` bytes, owned here.
        unsafe {
            std::ptr::copy_nonoverlapping(frame.as_ptr(), data_ptr(m), len);
            (*m).data_len = len as u16;
            (*m).pkt_len = len as u32;
            (*m).port = self.port_id;
        }
        let from = burst.len();
        self.push(&mut RxAcc::default(), burst, m, RxRing::None);
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
