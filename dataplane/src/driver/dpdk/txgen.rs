//! [`TxGen`]: a DPDK queue used as a traffic generator's transmit side, and [`RxTap`], the
//! receive side of the same queue for loopback checks.
//!
//! A generator does not need the packet model: it writes each frame straight into the data of a
//! freshly allocated mbuf and hands the mbufs to the PMD. Per burst that is one
//! `rte_mempool_get_bulk`, then one pass per mbuf: its reset (what `rte_pktmbuf_reset` does),
//! the caller's frame writer on its data room (monomorphised and inlined: no indirect call, no
//! copy, no allocation) and its lengths; then one `rte_eth_tx_burst`.
//!
//! **Why not `rte_pktmbuf_alloc_bulk`**, which resets the whole burst first: measured on
//! `net_null` without hugepages, on an earlier VM and before host pools were packed (every mbuf
//! then sat alone on its 4 KiB page, so a burst's headers competed for the same few L1 sets and
//! were evicted between two passes), that reset pass followed by a write pass ran at 53 Mpps, the
//! single pass at 80+ Mpps. The single pass also only writes the header (no reads: the data
//! address is known from the pool's layout, checked once when the queue is set up). A prefetch
//! of the data line two mbufs ahead helped with one mbuf per page; with packed pools it cost
//! 4-8 % and was removed.
//!
//! Frames the Tx ring does not take are either kept and offered again first on the next call
//! ([`UnsentPolicy::Retry`], the order of frames on the wire is the order they were written), or
//! freed and counted as `unsent` ([`UnsentPolicy::Drop`], what `dpdk-testpmd --forward-mode=txonly`
//! does). Either way `unsent` counts exactly the frames that were written but never accepted by
//! the PMD, separately from allocation failures.
//!
//! The mbufs come from the queue's own host pool (the one its Rx ring uses; sized for a full Tx
//! ring plus bursts in flight and the per-lcore caches), so the port's teardown order (port
//! closed before its pools are freed) covers mbufs still in the Tx ring.
//!
//! **Device resets** are survived with the dataplane's own machinery (`events.rs`): the port's
//! reset callback only counts, and one thread per port resets it when it finds the port idle,
//! after every other thread polling the port has stood aside between two of its bursts. Here
//! that thread is queue 0's generator, which finds the port idle when the ring took less than it
//! offered (a device that reset or whose link is down takes nothing) or when its caller has
//! nothing to send ([`TxGen::idle`]); once queue 0's [`RxTap`] is taken onto a thread of its own,
//! the tap does it instead, on its empty polls, and queue 0's generator stands aside like the
//! other queues' generators (each stand-aside check is one atomic load per burst). A generator
//! standing aside hands nothing to the PMD: its frames are held for a retry or, with
//! [`UnsentPolicy::Drop`], freed and counted as `unsent` and `reset_unsent`. The port is reset,
//! configured and started again with the same queues and pools; the frames the PMD had already
//! taken into its Tx ring (counted as `sent`) are lost with the ring on most PMDs, and no PMD
//! says how many they were. A link that goes down is a ring that takes nothing: held frames
//! wait (retry) or are counted unsent (drop) until the link is back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use dpdk_sys as sys;

use super::eal::register_worker_thread;
use super::error::DpdkError;
use super::mbuf::Mbuf;
use super::port::DpdkPort;
use super::shared::{PortShared, eth_stats};
use crate::link::MAX_WIRE_FRAME;
use crate::port::Port;

/// Largest burst a [`TxGen`] or [`RxTap`] moves per call.
pub const MAX_GEN_BURST: usize = 1024;

/// What a [`TxGen`] does with frames the Tx ring did not take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnsentPolicy {
    /// Keep them and offer them again before writing new frames: nothing is lost, frames stay
    /// in sequence order, and the generator slows down to what the ring takes.
    #[default]
    Retry,
    /// Free them at once and count them as unsent (the generator never waits for the ring).
    Drop,
}

impl std::str::FromStr for UnsentPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "retry" => Ok(Self::Retry),
            "drop" => Ok(Self::Drop),
            o => Err(format!(
                "`{o}` is not an unsent policy; allowed: retry, drop"
            )),
        }
    }
}

impl std::fmt::Display for UnsentPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Retry => "retry",
            Self::Drop => "drop",
        })
    }
}

/// Counters of a [`TxGen`], published once per burst with relaxed stores so that a stats thread
/// can read them while the generator runs.
#[derive(Debug, Default)]
pub struct TxGenCounters {
    sent: AtomicU64,
    sent_bytes: AtomicU64,
    unsent: AtomicU64,
    reset_unsent: AtomicU64,
    held: AtomicU64,
    alloc_failed: AtomicU64,
}

impl TxGenCounters {
    /// Frames the PMD accepted (`rte_eth_tx_burst` returned them as taken).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Bytes of the frames the PMD accepted (mbuf data, without FCS).
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes.load(Ordering::Relaxed)
    }

    /// Frames written into mbufs but freed without the PMD taking them.
    pub fn unsent(&self) -> u64 {
        self.unsent.load(Ordering::Relaxed)
    }

    /// The part of [`TxGenCounters::unsent`] freed because the port was being reset (drop
    /// policy; with the retry policy such frames wait and are sent after the reset).
    pub fn reset_unsent(&self) -> u64 {
        self.reset_unsent.load(Ordering::Relaxed)
    }

    /// Frames held for a retry now (written, not yet taken by the ring).
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Bursts skipped because the pool had no mbufs (nothing was written for them).
    pub fn alloc_failed(&self) -> u64 {
        self.alloc_failed.load(Ordering::Relaxed)
    }
}

/// What one [`TxGen::burst`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxBurst {
    /// Frames written by the frame writer in this call.
    pub written: usize,
    /// Frames the PMD accepted in this call (new ones and retried ones).
    pub sent: usize,
    /// True when the frame writer declined a frame (returned `None`): it has nothing more to
    /// send right now.
    pub writer_done: bool,
}

/// The Tx port counters as the PMD reports them (`rte_eth_stats_get`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortTxStats {
    /// Packets the port transmitted (`opackets`).
    pub opackets: u64,
    /// Bytes the port transmitted (`obytes`; some PMDs such as `net_null` leave it at 0).
    pub obytes: u64,
    /// Transmit errors (`oerrors`).
    pub oerrors: u64,
}

/// The Rx port counters as the PMD reports them (`rte_eth_stats_get`): what a tester's receive
/// port lost itself, which must not be blamed on the device under test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortRxStats {
    /// Packets the port received (`ipackets`).
    pub ipackets: u64,
    /// Packets dropped because the Rx ring was full (`imissed`).
    pub imissed: u64,
    /// Erroneous packets (`ierrors`).
    pub ierrors: u64,
    /// Receives that failed for lack of mbufs (`rx_nombuf`).
    pub rx_nombuf: u64,
}

/// A port's link and reset events as the PMD reported them and the generator's side dealt with
/// them (the port's extended statistics of the same names; counted since the port opened).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortEventStats {
    /// The link as last reported.
    pub link_up: bool,
    /// Times the link went down.
    pub link_down_events: u64,
    /// Reset events the PMD raised.
    pub reset_events: u64,
    /// Resets recovered: the port reset, configured and started again over its pools.
    pub device_resets: u64,
    /// Resets after which the port could not be set up again (it then takes and delivers
    /// nothing).
    pub reset_failures: u64,
}

impl PortEventStats {
    fn of(shared: &PortShared) -> Self {
        let mut s = Self::default();
        for (name, v) in shared.events.xstats() {
            match name {
                "link_up" => s.link_up = v != 0,
                "link_down_events" => s.link_down_events = v,
                "reset_events" => s.reset_events = v,
                "device_resets" => s.device_resets = v,
                "reset_failures" => s.reset_failures = v,
                _ => {}
            }
        }
        s
    }
}

/// Who resets a generator port: queue 0's [`TxGen`], or its [`RxTap`] once that is taken (see
/// the module docs). Shared by the two.
type TapLeads = Arc<AtomicBool>;

/// The transmit side of one queue of a [`DpdkPort`], driven by a frame writer.
pub struct TxGen {
    shared: Arc<PortShared>,
    port_id: u16,
    queue: u16,
    mp: *mut sys::rte_mempool,
    /// The mbuf words at `data_off` after a reset (see [`rearm_word`]), where the data starts
    /// (bytes from the mbuf) and the data room after the headroom.
    rearm: u64,
    data_at: usize,
    room: usize,
    burst: usize,
    policy: UnsentPolicy,
    mbufs: Box<[*mut sys::rte_mbuf]>,
    /// Retry policy: `mbufs[head..head + pending]` were written but not yet taken.
    head: usize,
    pending: usize,
    registered: bool,
    /// The stand-aside slot of this generator in the port's reset hand-off: its queue, or for
    /// queue 0 (which stands aside only while its tap leads) the port's queue count.
    slot: u16,
    /// Queue 0: its tap resets the port (it was taken); this generator stands aside.
    tap_leads: TapLeads,
    /// Queue 0: this generator stood aside last time it looked (its tap led).
    aside: bool,
    sent: u64,
    sent_bytes: u64,
    unsent: u64,
    reset_unsent: u64,
    alloc_failed: u64,
    live: Arc<TxGenCounters>,
    rx_tap: Option<RxTap>,
}

// SAFETY: the raw pointers are the queue's mempool (kept alive by `shared`, thread-safe) and
// mbufs this generator exclusively owns; a `TxGen` is used by one thread at a time (`&mut self`),
// and DPDK allows a Tx queue to move between threads as long as one thread polls it at a time.
unsafe impl Send for TxGen {}

impl DpdkPort {
    /// Hands out every queue of the port as a transmit-only generator queue instead of a
    /// [`crate::Queue`] (the port's queue handles are consumed; call this before, never together
    /// with, [`Port::take_queues`]). `burst` is the most frames per Tx call (1..=1024).
    pub fn tx_generators(
        &mut self,
        burst: usize,
        policy: UnsentPolicy,
    ) -> Result<Vec<TxGen>, DpdkError> {
        if !(1..=MAX_GEN_BURST).contains(&burst) {
            return Err(DpdkError::Port(format!(
                "generator burst {burst} out of range; allowed 1..={MAX_GEN_BURST}"
            )));
        }
        let queues = self.take_queues();
        if queues.is_empty() {
            return Err(DpdkError::Port(format!(
                "{}: its queues were already handed out",
                self.name()
            )));
        }
        let shared = self.shared().clone();
        let nq = queues.len() as u16;
        let gens = (0..queues.len())
            .map(|q| {
                let mp = shared.pools[q].rx.as_ptr();
                let (data_room, data_at) = pool_layout(mp)?;
                let data_off = (sys::NMDP_PKTMBUF_HEADROOM as u16).min(data_room);
                let tap_leads = TapLeads::default();
                Ok(TxGen {
                    port_id: shared.port_id,
                    queue: q as u16,
                    mp,
                    rearm: rearm_word(data_off),
                    data_at: data_at + usize::from(data_off),
                    room: usize::from(data_room - data_off),
                    burst,
                    policy,
                    mbufs: vec![std::ptr::null_mut(); burst].into_boxed_slice(),
                    head: 0,
                    pending: 0,
                    registered: false,
                    slot: if q == 0 { nq } else { q as u16 },
                    tap_leads: tap_leads.clone(),
                    aside: false,
                    sent: 0,
                    sent_bytes: 0,
                    unsent: 0,
                    reset_unsent: 0,
                    alloc_failed: 0,
                    live: Arc::new(TxGenCounters::default()),
                    rx_tap: Some(RxTap {
                        shared: shared.clone(),
                        port_id: shared.port_id,
                        queue: q as u16,
                        slot: nq + q as u16,
                        role: TapRole::Inside,
                        tap_leads,
                        mbufs: vec![std::ptr::null_mut(); burst].into_boxed_slice(),
                        scratch: Vec::with_capacity(MAX_WIRE_FRAME),
                    }),
                    shared: shared.clone(),
                })
            })
            .collect::<Result<Vec<_>, DpdkError>>()?;
        // The packet-model queue handles only hold empty free lists; dropping them is harmless,
        // but each leaves the port's reset hand-off: the generators of queues 1.. take their
        // places (nothing polls the port yet, so no hand-off is under way).
        drop(queues);
        for q in 1..nq {
            shared.events.join(q);
        }
        Ok(gens)
    }
}

impl TxGen {
    /// Registers the calling thread with EAL (so the mempool's per-lcore cache serves it),
    /// pinned to `core` when given. Done automatically (unpinned) on the first burst otherwise.
    pub fn register(&mut self, core: Option<usize>) -> Result<u32, String> {
        self.registered = true;
        register_worker_thread(core)
    }

    #[cold]
    fn register_lazily(&mut self) {
        if let Err(e) = self.register(None) {
            eprintln!(
                "warning: generator on {} queue {}: {e}; mempool caches are off for this thread",
                self.shared.name, self.queue
            );
        }
    }

    /// The port's name.
    pub fn port_name(&self) -> &str {
        &self.shared.name
    }

    /// The PMD's name (`net_null`, `net_pcap`, `mlx5_pci`, ...).
    pub fn driver(&self) -> &str {
        &self.shared.driver
    }

    /// The queue index.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Frames per Tx call.
    pub fn burst_size(&self) -> usize {
        self.burst
    }

    /// The policy for frames the ring did not take.
    pub fn policy(&self) -> UnsentPolicy {
        self.policy
    }

    /// Bytes an mbuf of this queue's pool holds after the headroom: the longest frame a frame
    /// writer may produce.
    pub fn frame_room(&self) -> usize {
        self.room
    }

    /// The shared counters (for a stats thread).
    pub fn counters(&self) -> Arc<TxGenCounters> {
        self.live.clone()
    }

    /// Frames written but not yet accepted, held for a retry.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// The receive side of the same queue, once (for loopback vdevs such as `net_ring`). It may
    /// run on another thread than the generator; both take part in the port's reset hand-off
    /// (queue 0's tap resets the port from then on; see the module docs), so both must be polled
    /// for a reset to complete while both exist.
    pub fn take_rx_tap(&mut self) -> Option<RxTap> {
        let mut tap = self.rx_tap.take()?;
        if self.queue == 0 {
            tap.role = TapRole::Leads;
            self.aside = true;
            self.shared.events.join(self.slot);
            self.tap_leads.store(true, Ordering::Release);
        } else {
            tap.role = TapRole::Aside;
            self.shared.events.join(tap.slot);
        }
        Some(tap)
    }

    /// The port's link and reset events so far.
    pub fn port_events(&self) -> PortEventStats {
        PortEventStats::of(&self.shared)
    }

    /// Tells the generator that its caller has nothing to send now (a paced generator between
    /// two frames): the analogue of an empty Rx poll, on which queue 0's generator deals with a
    /// reset the PMD raised and reads the link status the PMD keeps, and any other stands aside
    /// at once if a reset is under way.
    #[inline]
    pub fn idle(&mut self) {
        if self.leads() {
            self.shared.events.on_idle(&self.shared.pools);
        } else {
            self.shared.events.paused(self.slot);
        }
    }

    /// Whether this generator resets its port (queue 0 while its tap is not taken, or gone).
    /// Queue 0's generator leaves the hand-off when its tap, which led, is dropped.
    #[inline(always)]
    fn leads(&mut self) -> bool {
        if self.queue != 0 {
            return false;
        }
        let tap = self.tap_leads.load(Ordering::Acquire);
        if tap != self.aside {
            self.aside = tap;
            if !tap {
                self.shared.events.leave(self.slot);
            }
        }
        !tap
    }

    /// Whether the port is being reset and this generator must hand it nothing now (one atomic
    /// load unless a reset is under way; see the module docs).
    #[inline(always)]
    fn stands_aside(&mut self) -> bool {
        !self.leads() && self.shared.events.paused(self.slot)
    }

    /// Hands `mbufs[from..from + n]` (written mbufs this generator owns) to the PMD, or none of
    /// them while the port is being reset; returns how many it took and whether the port was
    /// being reset. Queue 0's generator looks for a reset when the ring took less than offered.
    #[inline(always)]
    fn transmit(&mut self, from: usize, n: usize) -> (usize, bool) {
        if self.stands_aside() {
            return (0, true);
        }
        // SAFETY: `mbufs[from..from + n]` are `n` written single-segment mbufs this generator
        // owns; the port is started (or stopped by a failed reset, where the burst takes
        // nothing) and its Tx queue `queue` is used by this thread only, outside any reset of
        // the port (`stands_aside` above). The PMD takes ownership of the first `sent`.
        let sent = unsafe {
            sys::rte_eth_tx_burst(
                self.port_id,
                self.queue,
                self.mbufs.as_mut_ptr().add(from),
                n as u16,
            )
        } as usize;
        if sent < n {
            self.idle();
        }
        (sent, false)
    }

    /// The link speed the PMD reports, in Mb/s (`None` when unknown or the link is down).
    pub fn link_speed_mbps(&self) -> Option<u32> {
        let mut link = sys::rte_eth_link::default();
        // SAFETY: valid port id and out-pointer.
        let rc = unsafe { sys::rte_eth_link_get_nowait(self.port_id, &mut link) };
        (rc == 0 && link.link_speed > 0 && link.link_speed != u32::MAX).then_some(link.link_speed)
    }

    /// The port's Tx counters as the PMD counts them.
    pub fn port_stats(&self) -> Result<PortTxStats, DpdkError> {
        let e = eth_stats(self.port_id, &self.shared.name)?;
        Ok(PortTxStats {
            opackets: e.opackets,
            obytes: e.obytes,
            oerrors: e.oerrors,
        })
    }

    #[inline]
    fn publish(&self) {
        self.live.sent.store(self.sent, Ordering::Relaxed);
        self.live
            .sent_bytes
            .store(self.sent_bytes, Ordering::Relaxed);
        self.live.unsent.store(self.unsent, Ordering::Relaxed);
        self.live
            .reset_unsent
            .store(self.reset_unsent, Ordering::Relaxed);
        self.live.held.store(self.pending as u64, Ordering::Relaxed);
        self.live
            .alloc_failed
            .store(self.alloc_failed, Ordering::Relaxed);
    }

    /// Bytes of `mbufs[from..from + n]` (mbufs this generator owns).
    #[inline]
    fn bytes_of(&self, from: usize, n: usize) -> u64 {
        self.mbufs[from..from + n]
            .iter()
            // SAFETY: every pointer here is a written mbuf this generator still owns.
            .map(|&m| u64::from(unsafe { Mbuf::from_handle(m as usize) }.data_len()))
            .sum()
    }

    /// Offers the held frames to the ring again; returns how many it took.
    #[inline]
    fn retry_pending(&mut self) -> usize {
        let (h, n) = (self.head, self.pending);
        let bytes = self.bytes_of(h, n);
        let (sent, _) = self.transmit(h, n);
        let left_bytes = self.bytes_of(h + sent, n - sent);
        self.sent += sent as u64;
        self.sent_bytes += bytes - left_bytes;
        self.head += sent;
        self.pending -= sent;
        if self.pending == 0 {
            self.head = 0;
        }
        self.publish();
        sent
    }

    /// One burst: first offers frames held from an earlier call (retry policy; no new frame is
    /// written while any are held), otherwise allocates up to `max` (at most the burst size)
    /// mbufs, lets `write` fill each one's data (it gets the whole data room and returns the
    /// frame length, or `None` to stop the burst early), and transmits them.
    ///
    /// The writer is called once per frame, in sequence order, with no allocation, lock or copy
    /// around it. A length of 0 or longer than the buffer also stops the burst (that mbuf is
    /// freed unwritten).
    #[inline]
    pub fn burst<F>(&mut self, max: usize, mut write: F) -> TxBurst
    where
        F: FnMut(&mut [u8]) -> Option<usize>,
    {
        if !self.registered {
            self.register_lazily();
        }
        if self.pending > 0 {
            let sent = self.retry_pending();
            return TxBurst {
                written: 0,
                sent,
                writer_done: false,
            };
        }
        let n = max.min(self.burst);
        if n == 0 {
            return TxBurst::default();
        }
        // SAFETY: `mbufs` holds `burst >= n` slots; `mp` is a live pktmbuf pool. On success the
        // first `n` slots are mbufs this generator owns, in the state DPDK keeps free mbufs in
        // (refcnt 1, one segment, no next); `reset_for_tx` completes the reset below.
        let rc =
            unsafe { sys::rte_mempool_get_bulk(self.mp, self.mbufs.as_mut_ptr().cast(), n as u32) };
        if rc != 0 {
            self.alloc_failed += 1;
            self.publish();
            return TxBurst::default();
        }
        let mut k = 0;
        let mut bytes = 0u64;
        let mut writer_done = false;
        while k < n {
            let m = self.mbufs[k];
            // SAFETY: `m` is a host-memory mbuf of `mp` just taken from the pool, that only this
            // generator references. Every free mbuf of the pool has its buffer right behind the
            // header (`buf_addr = m + data_at - data_off`) and `buf_len` = the pool's data room
            // (checked by `pool_layout`), so after the reset its data room runs from
            // `m + data_at` for `room` bytes; no other view of it exists while the slice lives.
            let buf = unsafe {
                reset_for_tx(m, self.rearm);
                let data = m.cast::<u8>().add(self.data_at);
                debug_assert_eq!(data, Mbuf::from_handle(m as usize).data_ptr());
                std::slice::from_raw_parts_mut(data, self.room)
            };
            let room = self.room;
            match write(buf) {
                Some(len) if len > 0 && len <= room => {
                    // SAFETY: `m` is owned here; a single segment holds the whole frame, and
                    // `len <= room <= u16::MAX`.
                    unsafe { set_len(m, len as u16) };
                    bytes += len as u64;
                    k += 1;
                }
                _ => {
                    writer_done = true;
                    break;
                }
            }
        }
        self.send_written(n, k, bytes, writer_done)
    }

    /// Returns `mbufs[k..n]` (taken but not written) to the pool and transmits `mbufs[..k]`
    /// (`bytes` long in all), applying the unsent policy.
    #[inline]
    fn send_written(&mut self, n: usize, k: usize, mut bytes: u64, writer_done: bool) -> TxBurst {
        if k < n {
            // SAFETY: `mbufs[k..n]` were taken from the pool and never handed out.
            unsafe {
                sys::rte_mempool_put_bulk(
                    self.mp,
                    self.mbufs.as_mut_ptr().add(k).cast(),
                    (n - k) as u32,
                );
            }
        }
        if k == 0 {
            self.publish();
            return TxBurst {
                written: 0,
                sent: 0,
                writer_done,
            };
        }
        let (sent, resetting) = self.transmit(0, k);
        if sent < k {
            bytes -= self.bytes_of(sent, k - sent);
            match self.policy {
                UnsentPolicy::Retry => {
                    self.head = sent;
                    self.pending = k - sent;
                }
                UnsentPolicy::Drop => {
                    // SAFETY: `mbufs[sent..k]` are still ours (the PMD did not take them).
                    unsafe {
                        sys::rte_pktmbuf_free_bulk(
                            self.mbufs.as_mut_ptr().add(sent),
                            (k - sent) as u32,
                        );
                    }
                    self.unsent += (k - sent) as u64;
                    if resetting {
                        self.reset_unsent += (k - sent) as u64;
                    }
                }
            }
        }
        self.sent += sent as u64;
        self.sent_bytes += bytes;
        self.publish();
        TxBurst {
            written: k,
            sent,
            writer_done,
        }
    }

    /// Ends generation: offers held frames to the ring until it takes them or `deadline` passes,
    /// then frees whatever is left and counts it as unsent. Returns the frames still unsent at
    /// the deadline.
    pub fn finish(&mut self, deadline: Instant) -> usize {
        while self.pending > 0 && Instant::now() < deadline {
            if self.retry_pending() == 0 {
                std::hint::spin_loop();
            }
        }
        let left = self.pending;
        self.drop_pending();
        left
    }

    fn drop_pending(&mut self) {
        if self.pending == 0 {
            return;
        }
        // SAFETY: `mbufs[head..head + pending]` are written mbufs still owned here.
        unsafe {
            sys::rte_pktmbuf_free_bulk(self.mbufs.as_mut_ptr().add(self.head), self.pending as u32);
        }
        self.unsent += self.pending as u64;
        self.pending = 0;
        self.head = 0;
        self.publish();
    }
}

impl Drop for TxGen {
    fn drop(&mut self) {
        self.drop_pending();
        // A reset no longer waits for this generator to stand aside.
        if self.queue != 0 || self.aside {
            self.shared.events.leave(self.slot);
        }
    }
}

impl std::fmt::Debug for TxGen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxGen")
            .field("port", &self.shared.name)
            .field("queue", &self.queue)
            .field("burst", &self.burst)
            .field("policy", &self.policy)
            .field("sent", &self.sent)
            .field("unsent", &self.unsent)
            .field("pending", &self.pending)
            .finish()
    }
}

// The mbuf fields `reset_for_tx` and `set_len` write as whole 64-bit words.
const _: () = {
    use std::mem::offset_of;
    type M = sys::rte_mbuf;
    assert!(offset_of!(M, data_off) == 16 && offset_of!(M, refcnt) == 18);
    assert!(offset_of!(M, nb_segs) == 20 && offset_of!(M, port) == 22);
    assert!(offset_of!(M, __bindgen_anon_1) == 32 && offset_of!(M, pkt_len) == 36);
    assert!(offset_of!(M, data_len) == 40 && offset_of!(M, vlan_tci) == 42);
    assert!(offset_of!(M, __bindgen_anon_2) == 44 && offset_of!(M, vlan_tci_outer) == 52);
};

/// The data room of pktmbuf pool `mp` and the offset of an mbuf's buffer from the mbuf, checked
/// on one of its mbufs: a plain pool (`rte_pktmbuf_pool_create`) puts every buffer right behind
/// its mbuf header and private area, and its free mbufs carry no external buffer. The generator
/// relies on both to reach the data without reading the mbuf.
fn pool_layout(mp: *mut sys::rte_mempool) -> Result<(u16, usize), DpdkError> {
    // SAFETY: `mp` is a live pktmbuf pool (owned by the port state).
    let (room, priv_size) = unsafe {
        (
            sys::rte_pktmbuf_data_room_size(mp),
            sys::rte_pktmbuf_priv_size(mp),
        )
    };
    let at = std::mem::size_of::<sys::rte_mbuf>() + usize::from(priv_size);
    let mut m: *mut sys::rte_mbuf = std::ptr::null_mut();
    // SAFETY: one slot for one object of a live pool; on success the mbuf is ours until it is
    // put back below, untouched.
    let ok = unsafe {
        if sys::rte_mempool_get_bulk(mp, (&mut m as *mut *mut sys::rte_mbuf).cast(), 1) != 0 {
            return Err(DpdkError::Mempool(
                "generator queue: the pool has no free mbuf to check its layout".into(),
            ));
        }
        let ok = (*m).buf_addr == m.cast::<u8>().add(at).cast()
            && (*m).buf_len == room
            && (*m).ol_flags & sys::NMDP_MBUF_F_EXTERNAL == 0;
        sys::rte_mempool_put_bulk(mp, (&mut m as *mut *mut sys::rte_mbuf).cast(), 1);
        ok
    };
    if !ok {
        return Err(DpdkError::Unsupported(
            "generator queue: the pool's mbufs do not hold their buffers right behind the header \
             (external or attached buffers); the generator needs a plain pktmbuf pool"
                .into(),
        ));
    }
    Ok((room, at))
}

/// The 8 bytes at `data_off` of a reset mbuf (DPDK's `rearm_data`): `data_off`, refcnt 1,
/// one segment, no port.
fn rearm_word(data_off: u16) -> u64 {
    let mut b = [0u8; 8];
    b[0..2].copy_from_slice(&data_off.to_ne_bytes());
    b[2..4].copy_from_slice(&1u16.to_ne_bytes());
    b[4..6].copy_from_slice(&1u16.to_ne_bytes());
    b[6..8].copy_from_slice(&u16::MAX.to_ne_bytes());
    u64::from_ne_bytes(b)
}

/// `rte_pktmbuf_reset` for an mbuf just taken from its pool, done in the same pass that writes
/// the frame (see the module docs). `rearm` is [`rearm_word`] of the pool's
/// `min(RTE_PKTMBUF_HEADROOM, data room)` (what the reset computes from `buf_len`; refcnt is 1
/// in every free mbuf); [`set_len`] writes the packet type and lengths once the frame is known.
/// Neighbouring fields go out as whole words. The second cache line is left alone: `next` is
/// NULL in every free mbuf (DPDK's raw-alloc guarantee, as `nb_segs` = 1), and `tx_offload` is
/// read by PMDs only for the offloads `ol_flags` requests, which is none (it is set to 0 here).
///
/// # Safety
/// `m` must be a valid mbuf of a pktmbuf pool this caller exclusively owns.
#[inline(always)]
unsafe fn reset_for_tx(m: *mut sys::rte_mbuf, rearm: u64) {
    // SAFETY: per the caller's contract; the mbuf is 64-byte aligned, so the word at offset 16
    // (data_off, refcnt, nb_segs, port; offsets asserted above) is aligned. Plain writes only:
    // `ol_flags` becomes 0 where the reset keeps the external-buffer flag, which no free mbuf of
    // a plain pool has (checked by `pool_layout`; a freed mbuf gets its own buffer back).
    unsafe {
        m.cast::<u8>().add(16).cast::<u64>().write(rearm);
        (*m).ol_flags = 0;
        (*m).vlan_tci_outer = 0;
    }
}

/// Sets a reset single-segment mbuf's packet type (0), `pkt_len` and `data_len` (`len`), VLAN
/// tag (0) and the first half of the Rx hash (0) as two aligned 64-bit words.
///
/// # Safety
/// `m` must be a valid mbuf this caller exclusively owns.
#[inline(always)]
unsafe fn set_len(m: *mut sys::rte_mbuf, len: u16) {
    let mut a = [0u8; 8];
    a[4..8].copy_from_slice(&u32::from(len).to_ne_bytes());
    let mut b = [0u8; 8];
    b[0..2].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: per the caller's contract; offsets 32 and 40 (asserted above) of a 64-byte
    // aligned mbuf are aligned words inside its first cache line.
    unsafe {
        let p = m.cast::<u8>();
        p.add(32).cast::<u64>().write(u64::from_ne_bytes(a));
        p.add(40).cast::<u64>().write(u64::from_ne_bytes(b));
    }
}

/// The receive side of a [`TxGen`]'s queue: hands each received frame's bytes to a closure and
/// frees the mbufs (for checking what a loopback vdev such as `net_ring` returns). May run on
/// another thread than the generator.
pub struct RxTap {
    shared: Arc<PortShared>,
    port_id: u16,
    queue: u16,
    /// Its stand-aside slot in the port's reset hand-off (the port's queue count plus `queue`).
    slot: u16,
    role: TapRole,
    /// Set while queue 0's tap resets the port (shared with queue 0's generator).
    tap_leads: TapLeads,
    mbufs: Box<[*mut sys::rte_mbuf]>,
    /// Reassembly buffer for multi-segment frames (reserved up front for the largest frame).
    scratch: Vec<u8>,
}

/// An [`RxTap`]'s part in its port's reset hand-off (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TapRole {
    /// Not taken: still inside its generator, never polled.
    Inside,
    /// Queue 0's tap: it resets the port on an empty poll after a reset event.
    Leads,
    /// Another queue's tap: it stands aside while the port is reset.
    Aside,
}

// SAFETY: as for `TxGen`: the mbufs are owned here between Rx and free, the port state is kept
// alive by `shared`, and one thread at a time polls the queue's Rx side.
unsafe impl Send for RxTap {}

impl RxTap {
    /// Receives up to one burst and calls `f` with each frame's bytes; returns the frames seen.
    /// Receives nothing while the port is being reset; queue 0's tap resets the port itself on
    /// an empty poll after the PMD raised a reset (see the module docs).
    pub fn poll<F: FnMut(&[u8])>(&mut self, mut f: F) -> usize {
        if self.role == TapRole::Aside && self.shared.events.paused(self.slot) {
            return 0;
        }
        let cap = self.mbufs.len();
        // SAFETY: `mbufs` has `cap` slots; the port is started (or stopped by a failed reset,
        // where the burst returns nothing) and this queue's Rx side is polled by this thread
        // only, outside any reset of the port (above, or this thread does the reset). The
        // returned mbufs are owned here until freed below.
        let n = unsafe {
            sys::rte_eth_rx_burst(
                self.port_id,
                self.queue,
                self.mbufs.as_mut_ptr(),
                cap as u16,
            )
        } as usize;
        if n == 0 {
            if self.role == TapRole::Leads {
                self.shared.events.on_idle(&self.shared.pools);
            }
            return 0;
        }
        // SAFETY: `rte_eth_rx_burst` wrote `n` received chains, owned here until freed below.
        let got = unsafe { Mbuf::slice(&self.mbufs[..n]) };
        for &m in got {
            if m.has_device_segment() {
                // Device memory has no host view; such frames are not handed to `f`.
                continue;
            }
            // SAFETY: every segment is host memory (checked above) holding `data_len` bytes at
            // its data pointer, not written while the chain is held here.
            let bytes = |s: Mbuf| unsafe {
                std::slice::from_raw_parts(s.data_ptr(), usize::from(s.data_len()))
            };
            match m.next() {
                None => f(bytes(m)),
                Some(_) => {
                    self.scratch.clear();
                    let mut seg = Some(m);
                    while let Some(s) = seg {
                        self.scratch.extend_from_slice(bytes(s));
                        seg = s.next();
                    }
                    f(&self.scratch);
                }
            }
        }
        // SAFETY: the `n` chains are owned here and no longer referenced.
        unsafe { sys::rte_pktmbuf_free_bulk(self.mbufs.as_mut_ptr(), n as u32) };
        n
    }

    /// The port's link and reset events so far.
    pub fn port_events(&self) -> PortEventStats {
        PortEventStats::of(&self.shared)
    }

    /// The port's name.
    pub fn port_name(&self) -> &str {
        &self.shared.name
    }

    /// The port's Rx counters as the PMD counts them.
    pub fn port_stats(&self) -> Result<PortRxStats, DpdkError> {
        let e = eth_stats(self.port_id, &self.shared.name)?;
        Ok(PortRxStats {
            ipackets: e.ipackets,
            imissed: e.imissed,
            ierrors: e.ierrors,
            rx_nombuf: e.rx_nombuf,
        })
    }
}

impl Drop for RxTap {
    fn drop(&mut self) {
        match self.role {
            TapRole::Inside => {}
            // Queue 0's generator resets the port again from its next burst.
            TapRole::Leads => self.tap_leads.store(false, Ordering::Release),
            TapRole::Aside => self.shared.events.leave(self.slot),
        }
    }
}

impl std::fmt::Debug for RxTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxTap")
            .field("port", &self.shared.name)
            .field("queue", &self.queue)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::dpdk::{DpdkPortConfig, test_eal};

    /// A `net_ring` port (Tx looped back to Rx; its ring holds 1023 frames) with `queues` queue
    /// pairs.
    fn ring_port(tag: &str, queues: u16) -> DpdkPort {
        test_eal();
        DpdkPort::open(&DpdkPortConfig {
            devargs: format!("net_ring_g{tag}{}", std::process::id() % 10_000),
            rx_desc: 64,
            tx_desc: 64,
            queues,
            ..DpdkPortConfig::default()
        })
        .expect("net_ring port")
    }

    fn xstat(port: &DpdkPort, name: &str) -> u64 {
        let x = port.shared().events.xstats();
        x.iter().find(|(k, _)| *k == name).expect("named").1
    }

    fn raise_reset(port: &DpdkPort) {
        crate::testkit::raise_dpdk_reset(port);
    }

    /// Offers `n` 60-byte frames, each carrying `tag` and its index; returns what the PMD took.
    fn send(g: &mut TxGen, n: usize, tag: u8) -> usize {
        let mut i = 0u8;
        g.burst(n, |buf| {
            buf[..60].fill(tag);
            buf[0] = i;
            i += 1;
            Some(60)
        })
        .sent
    }

    /// Polls `tap` until `want` frames arrived or it stays empty; returns the frames' tags.
    fn receive(tap: &mut RxTap, want: usize) -> Vec<u8> {
        let mut tags = Vec::new();
        for _ in 0..100 {
            tap.poll(|f| tags.push(f[1]));
            if tags.len() >= want {
                break;
            }
        }
        tags
    }

    /// A reset the PMD raises on a generator's port: queue 0's generator finds the port idle
    /// when the ring stops taking frames, resets and sets it up again with the same queue and
    /// pool, and the port carries frames again. Before the generator took part in recovery
    /// the reset was never handled (`device_resets` stayed 0).
    #[test]
    fn a_generator_port_recovers_from_a_reset() {
        let mut port = ring_port("r", 1);
        let mut g = port
            .tx_generators(32, UnsentPolicy::Drop)
            .expect("generator")
            .remove(0);
        assert_eq!(send(&mut g, 8, 1), 8);
        raise_reset(&port);
        assert_eq!(xstat(&port, "reset_events"), 1);
        // Nobody drains the ring: it fills, and the burst it refuses shows the port idle.
        let mut offered = 8;
        while xstat(&port, "device_resets") == 0 && offered < 4096 {
            send(&mut g, 32, 2);
            offered += 32;
        }
        assert_eq!(
            xstat(&port, "device_resets"),
            1,
            "reset once the ring was full"
        );
        assert_eq!(xstat(&port, "reset_failures"), 0);
        assert_eq!(g.port_events().device_resets, 1);
        let c = g.counters();
        assert_eq!(c.sent() + c.unsent(), offered as u64, "every frame counted");
        assert_eq!(
            c.reset_unsent(),
            0,
            "queue 0 never stands aside for its own reset"
        );
        let mut tap = g.take_rx_tap().expect("tap");
        let before = receive(&mut tap, usize::MAX).len() as u64;
        assert!(before <= c.sent(), "{before} of {} sent", c.sent());
        assert_eq!(
            send(&mut g, 8, 3),
            8,
            "the port takes frames after the reset"
        );
        assert_eq!(receive(&mut tap, 8), vec![3; 8], "and they loop back");
        assert_eq!(xstat(&port, "device_resets"), 1, "one reset, one recovery");
    }

    /// On a port with two queues, queue 0's generator asks queue 1's to stand aside and resets
    /// the port once it has: meanwhile queue 1 hands the PMD nothing (with the drop policy its
    /// frames are counted as `unsent` and `reset_unsent`), and afterwards both send again.
    #[test]
    fn other_generators_stand_aside_during_a_reset() {
        let mut port = ring_port("m", 2);
        let mut gens = port
            .tx_generators(32, UnsentPolicy::Drop)
            .expect("generators");
        let mut g1 = gens.pop().expect("queue 1");
        let mut g0 = gens.pop().expect("queue 0");
        let mut tap1 = g1.take_rx_tap().expect("tap 1");
        assert_eq!(send(&mut g1, 4, 1), 4);
        assert_eq!(receive(&mut tap1, 4).len(), 4);
        raise_reset(&port);
        g0.idle();
        assert_eq!(
            xstat(&port, "device_resets"),
            0,
            "not while queue 1 may be in a burst"
        );
        assert_eq!(send(&mut g1, 8, 2), 0, "queue 1 stands aside");
        let c1 = g1.counters();
        assert_eq!((c1.unsent(), c1.reset_unsent()), (8, 8));
        assert_eq!(tap1.poll(|_| {}), 0, "its tap too");
        g0.idle();
        assert_eq!(
            xstat(&port, "device_resets"),
            1,
            "reset once both stood aside"
        );
        assert_eq!(send(&mut g1, 8, 3), 8, "queue 1 sends after the reset");
        assert_eq!(receive(&mut tap1, 8), vec![3; 8]);
        assert_eq!(send(&mut g0, 8, 4), 8, "queue 0 too");
        assert_eq!(c1.sent() + c1.unsent(), 20, "every frame counted");
    }

    /// Once queue 0's tap is taken it resets the port on an empty poll, and the generator,
    /// polled on its own, stands aside meanwhile (with the retry policy its frames wait and go
    /// out after the reset, none lost); when the tap is dropped the generator resets the port
    /// again.
    #[test]
    fn queue_0s_tap_resets_the_port_while_its_generator_waits() {
        let mut port = ring_port("t", 1);
        let mut g = port
            .tx_generators(32, UnsentPolicy::Retry)
            .expect("generator")
            .remove(0);
        let mut tap = g.take_rx_tap().expect("tap");
        raise_reset(&port);
        assert_eq!(tap.poll(|_| {}), 0, "asks the generator to stand aside");
        assert_eq!(send(&mut g, 8, 1), 0, "the generator stands aside");
        assert_eq!(g.pending(), 8, "and holds its frames");
        assert_eq!(xstat(&port, "device_resets"), 0);
        assert_eq!(tap.poll(|_| {}), 0);
        assert_eq!(xstat(&port, "device_resets"), 1, "the tap reset the port");
        assert_eq!(send(&mut g, 8, 2), 8, "the held frames go out");
        assert_eq!(receive(&mut tap, 8), vec![1; 8], "all of them, in order");
        assert_eq!(g.counters().unsent(), 0);
        drop(tap);
        raise_reset(&port);
        g.idle();
        assert_eq!(
            xstat(&port, "device_resets"),
            2,
            "the generator leads again"
        );
        assert_eq!(send(&mut g, 8, 3), 8);
    }

    /// The tester's case: the generator sends on its own thread while queue 0's tap receives on
    /// this one, and the device resets. The tap resets the port between two of the generator's
    /// bursts, traffic resumes, and (`net_ring` keeps its ring through a reset, and the retry
    /// policy holds what the ring did not take) every frame arrives once, in order.
    #[test]
    fn a_reset_hands_off_between_the_generator_and_its_tap() {
        use std::sync::atomic::AtomicBool;
        let mut port = ring_port("h", 1);
        let mut g = port
            .tx_generators(32, UnsentPolicy::Retry)
            .expect("generator")
            .remove(0);
        let mut tap = g.take_rx_tap().expect("tap");
        let counters = g.counters();
        let done = Arc::new(AtomicBool::new(false));
        let sender = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut seq = 0u32;
                while !done.load(Ordering::Relaxed) {
                    let r = g.burst(32, |buf| {
                        buf[..60].fill(0);
                        buf[..4].copy_from_slice(&seq.to_le_bytes());
                        seq += 1;
                        Some(60)
                    });
                    if r.sent == 0 {
                        std::thread::yield_now();
                    }
                }
                g.finish(Instant::now() + std::time::Duration::from_secs(5))
            })
        };
        let mut next = 0u32;
        let mut out_of_order = 0u64;
        let mut poll = |tap: &mut RxTap| {
            tap.poll(|f| {
                let seq = u32::from_le_bytes(f[..4].try_into().expect("4 bytes"));
                if seq != next {
                    out_of_order += 1;
                }
                next = seq.wrapping_add(1);
            })
        };
        let mut wait = |tap: &mut RxTap, what: &dyn Fn() -> bool| {
            for _ in 0..1_000_000 {
                if what() {
                    return true;
                }
                if poll(tap) == 0 {
                    std::thread::yield_now();
                }
            }
            false
        };
        assert!(wait(&mut tap, &|| counters.sent() > 1000), "traffic flows");
        raise_reset(&port);
        assert!(
            wait(&mut tap, &|| xstat(&port, "device_resets") == 1),
            "the tap resets the port once the generator stood aside"
        );
        let after = counters.sent();
        assert!(
            wait(&mut tap, &|| counters.sent() > after + 1000),
            "traffic resumes"
        );
        done.store(true, Ordering::Relaxed);
        // The generator's last frames need room in the ring.
        while !sender.is_finished() {
            poll(&mut tap);
        }
        let left = sender.join().expect("generator thread");
        assert_eq!(left, 0, "every held frame was taken");
        while poll(&mut tap) > 0 {}
        assert_eq!(u64::from(next), counters.sent(), "every frame arrived");
        assert_eq!(out_of_order, 0, "once, in order");
        assert_eq!(counters.unsent(), 0);
        assert_eq!(xstat(&port, "reset_failures"), 0);
    }
}
