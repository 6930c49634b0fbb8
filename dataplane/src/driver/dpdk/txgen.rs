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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use dpdk_sys as sys;

use super::eal::register_worker_thread;
use super::error::{DpdkError, strerror};
use super::mbuf::Mbuf;
use super::port::DpdkPort;
use super::shared::PortShared;
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
    sent: u64,
    sent_bytes: u64,
    unsent: u64,
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
        let gens = (0..queues.len())
            .map(|q| {
                let mp = shared.pools[q].rx.as_ptr();
                let (data_room, data_at) = pool_layout(mp)?;
                let data_off = (sys::NMDP_PKTMBUF_HEADROOM as u16).min(data_room);
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
                    sent: 0,
                    sent_bytes: 0,
                    unsent: 0,
                    alloc_failed: 0,
                    live: Arc::new(TxGenCounters::default()),
                    rx_tap: Some(RxTap {
                        shared: shared.clone(),
                        port_id: shared.port_id,
                        queue: q as u16,
                        mbufs: vec![std::ptr::null_mut(); burst].into_boxed_slice(),
                        scratch: Vec::with_capacity(MAX_WIRE_FRAME),
                    }),
                    shared: shared.clone(),
                })
            })
            .collect::<Result<Vec<_>, DpdkError>>()?;
        // The packet-model queue handles only hold empty free lists; dropping them is harmless.
        drop(queues);
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

    /// The receive side of the same queue, once (for loopback vdevs such as `net_ring`).
    pub fn take_rx_tap(&mut self) -> Option<RxTap> {
        self.rx_tap.take()
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
        // SAFETY: `mbufs[h..h + n]` are `n` written single-segment mbufs this generator owns;
        // the port is started and its Tx queue `queue` is polled by this thread only. The PMD
        // takes ownership of the first `sent` of them.
        let sent = unsafe {
            sys::rte_eth_tx_burst(
                self.port_id,
                self.queue,
                self.mbufs.as_mut_ptr().add(h),
                n as u16,
            )
        } as usize;
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
        // SAFETY: `mbufs[..k]` are `k` written single-segment mbufs this generator owns; the port
        // is started and its Tx queue `queue` is polled by this thread only. The PMD takes
        // ownership of the first `sent`.
        let sent = unsafe {
            sys::rte_eth_tx_burst(self.port_id, self.queue, self.mbufs.as_mut_ptr(), k as u16)
        } as usize;
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
    mbufs: Box<[*mut sys::rte_mbuf]>,
    /// Reassembly buffer for multi-segment frames (reserved up front for the largest frame).
    scratch: Vec<u8>,
}

// SAFETY: as for `TxGen`: the mbufs are owned here between Rx and free, the port state is kept
// alive by `shared`, and one thread at a time polls the queue's Rx side.
unsafe impl Send for RxTap {}

impl RxTap {
    /// Receives up to one burst and calls `f` with each frame's bytes; returns the frames seen.
    pub fn poll<F: FnMut(&[u8])>(&mut self, mut f: F) -> usize {
        let cap = self.mbufs.len();
        // SAFETY: `mbufs` has `cap` slots; the port is started and this queue's Rx side is
        // polled by this thread only. The returned mbufs are owned here until freed below.
        let n = unsafe {
            sys::rte_eth_rx_burst(
                self.port_id,
                self.queue,
                self.mbufs.as_mut_ptr(),
                cap as u16,
            )
        } as usize;
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
        if n > 0 {
            // SAFETY: the `n` chains are owned here and no longer referenced.
            unsafe { sys::rte_pktmbuf_free_bulk(self.mbufs.as_mut_ptr(), n as u32) };
        }
        n
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

/// The port's basic counters (`rte_eth_stats_get`); `name` is for the error.
fn eth_stats(port_id: u16, name: &str) -> Result<sys::rte_eth_stats, DpdkError> {
    let mut e = sys::rte_eth_stats::default();
    // SAFETY: valid port id and out-pointer; reading counters is safe from any thread.
    let rc = unsafe { sys::rte_eth_stats_get(port_id, &mut e) };
    if rc != 0 {
        return Err(DpdkError::Port(format!(
            "rte_eth_stats_get({name}): {}",
            strerror(-rc)
        )));
    }
    Ok(e)
}

impl std::fmt::Debug for RxTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxTap")
            .field("port", &self.shared.name)
            .field("queue", &self.queue)
            .finish()
    }
}
