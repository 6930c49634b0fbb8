//! The per-core run loop: one worker thread per core, one queue pair per port per worker.
//!
//! Each iteration reads top to bottom, like DPDK's l3fwd: `rx_burst` on each port's queue, run the
//! NF chain over the burst, and hand it to the Tx queue. When every verdict names one port (the
//! common case: a forwarding chain, or a NAT between two ports) the burst goes to that port's
//! `tx_burst` as it is, with no per-packet work in the loop. Otherwise packets are sorted by
//! verdict into per-port Tx bursts and a drop burst (drops are counted by reason and returned to
//! the Rx queue's pools); what a Tx ring cannot take is freed by the queue and counted as
//! `tx_full`. Nothing on this path allocates or locks: bursts are preallocated, and buffers return
//! to the queues' per-core pool caches.
//!
//! A network function may hold packets back across bursts ([`crate::NetworkFunction::held`]:
//! IP fragments that arrived before their first fragment). While any are held, each iteration
//! asks the chain to release the ready ones ([`NfChain::release`]) and sends them like a
//! received burst; when the worker finishes, every packet still held is released with a drop
//! verdict, so what was received is always sent or counted as a drop.
//!
//! **The slow path.** A worker of a run with a network layer ([`crate::net`]) also owns a
//! [`SlowPath`]. In the sorting pass (never on the one-port fast path: a burst with a slow-path
//! packet has more than one verdict), packets the chain dropped for a slow-path reason
//! ([`DropReason::for_slow_path`]: ARP, a next hop without a MAC, an expired TTL, a packet for a
//! port's own address) are handed to it instead of being freed, and it answers, parks or drops
//! them, adding what it sends to the same Tx bursts. Its timers (ARP retries, parked packets
//! whose next hop resolved) run between bursts, only while it has something pending.
//!
//! A worker finishes when every one of its queues is idle (the wire has nothing more to deliver
//! and nothing is in flight) or when the run is stopped and its queues have drained.
//! Counters are published to [`LiveStats`] every few milliseconds for the live stats line.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::burst::Burst;
use crate::net::SlowPath;
use crate::net::slow_path::PortIo;
use crate::nf::{Counters, NfChain, NfContext};
use crate::port::{Queue, QueueStats};
use crate::verdict::{Action, DropCounts, DropReason, Verdict};

/// Busy loop iterations between clock reads (see [`LoopClock`]).
const CLOCK_EVERY: u32 = 8;

/// The run loop's clock: read at most once per busy loop iteration, and then only every
/// [`CLOCK_EVERY`] iterations (a few microseconds at full load; NF timers work in milliseconds
/// and more). After an idle poll it is re-read on the next busy iteration.
struct LoopClock {
    start: Instant,
    now: Instant,
    /// `now - start` in nanoseconds, computed when the clock is read (not on every iteration).
    ns: u64,
    age: u32,
}

impl LoopClock {
    fn new(start: Instant) -> Self {
        Self {
            start,
            now: start,
            ns: 0,
            age: CLOCK_EVERY,
        }
    }

    /// A loop iteration that found work.
    #[inline]
    fn busy(&mut self) {
        if self.age >= CLOCK_EVERY {
            self.now = Instant::now();
            self.ns = (self.now - self.start).as_nanos() as u64;
            self.age = 0;
        }
        self.age += 1;
    }

    /// A loop iteration that found nothing.
    #[inline]
    fn idle(&mut self) {
        self.age = CLOCK_EVERY;
    }

    /// Nanoseconds since the worker started, as of the last read.
    #[inline]
    fn ns(&self) -> u64 {
        self.ns
    }
}

/// What one worker runs.
pub struct WorkerSetup {
    /// The worker's queue on each port (index = port id).
    pub queues: Vec<Box<dyn Queue>>,
    /// The worker's own NF chain instance.
    pub chain: NfChain,
    /// Port every received packet is sent to unless an NF decides otherwise (`None`: back out of
    /// the port it arrived on).
    pub egress: Option<u16>,
    /// Burst size.
    pub burst: usize,
    /// The worker's slow path, when the run has a network layer (see the module docs).
    pub slow: Option<SlowPath>,
}

/// Counters a worker publishes while it runs (read by the live stats printer).
#[derive(Debug)]
pub struct LiveStats {
    /// Packets received.
    pub rx_packets: AtomicU64,
    /// Bytes received.
    pub rx_bytes: AtomicU64,
    /// Frames put on the wire.
    pub tx_packets: AtomicU64,
    /// Bytes sent.
    pub tx_bytes: AtomicU64,
    /// Payloads served from the primary ring.
    pub rx_primary: AtomicU64,
    /// Payloads served from the secondary ring.
    pub rx_secondary: AtomicU64,
    /// Rx refill allocation failures.
    pub rx_nombuf: AtomicU64,
    /// Drops per reason (index = [`DropReason::index`]).
    pub drops: [AtomicU64; DropReason::MAX],
}

impl Default for LiveStats {
    fn default() -> Self {
        Self {
            rx_packets: AtomicU64::new(0),
            rx_bytes: AtomicU64::new(0),
            tx_packets: AtomicU64::new(0),
            tx_bytes: AtomicU64::new(0),
            rx_primary: AtomicU64::new(0),
            rx_secondary: AtomicU64::new(0),
            rx_nombuf: AtomicU64::new(0),
            drops: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl LiveStats {
    fn publish(&self, q: &QueueStats, drops: &DropCounts) {
        self.rx_packets.store(q.rx_packets, Ordering::Relaxed);
        self.rx_bytes.store(q.rx_bytes, Ordering::Relaxed);
        self.tx_packets.store(q.tx_packets, Ordering::Relaxed);
        self.tx_bytes.store(q.tx_bytes, Ordering::Relaxed);
        self.rx_primary.store(q.rx_primary, Ordering::Relaxed);
        self.rx_secondary.store(q.rx_secondary, Ordering::Relaxed);
        self.rx_nombuf.store(q.rx_nombuf, Ordering::Relaxed);
        for (a, &d) in self.drops.iter().zip(drops.as_array()) {
            a.store(d, Ordering::Relaxed);
        }
    }

    /// The drop counts published so far.
    pub fn drops(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::all()
            .into_iter()
            .map(|r| (r, self.drops[r.index()].load(Ordering::Relaxed)))
    }
}

/// What a worker reports when it finishes.
#[derive(Debug)]
pub struct WorkerReport {
    /// Final counters of each of the worker's queues (index = port id).
    pub queue_stats: Vec<QueueStats>,
    /// Extended counters of each queue.
    pub xstats: Vec<Vec<(String, u64)>>,
    /// Drops per reason.
    pub drops: DropCounts,
    /// NF counters, one `(name, counters)` per function in chain order.
    pub nf_counters: Vec<(String, Counters)>,
    /// What functions could not do when the run ended (`name: error`, see
    /// [`crate::NetworkFunction::finish`]).
    pub nf_errors: Vec<String>,
    /// Loop iterations that received nothing.
    pub idle_polls: u64,
    /// Bursts processed.
    pub bursts: u64,
    /// Seconds from the worker's start to its last forwarded packet.
    pub active_s: f64,
    /// The worker's NF chain, handed back after [`crate::NetworkFunction::finish`], so a caller
    /// running many trials can reset it ([`NfChain::reset`]) instead of building another.
    pub chain: NfChain,
}

/// Run-wide controls shared with the workers.
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    /// Set to stop workers after draining (e.g. at the end of `--duration`).
    pub stop: Arc<AtomicBool>,
    /// Give up waiting for queues to drain after this long once stopped.
    pub drain_timeout: Duration,
}

/// Runs one worker to completion on the calling thread.
pub fn run_worker(
    worker: u16,
    workers: u16,
    mut setup: WorkerSetup,
    control: &RunControl,
    live: &LiveStats,
) -> WorkerReport {
    let nports = setup.queues.len();
    let mut burst = Burst::with_capacity(setup.burst);
    let mut tx: Vec<Burst> = (0..nports)
        .map(|_| Burst::with_capacity(setup.burst))
        .collect();
    let mut dropped = Burst::with_capacity(setup.burst);
    let mut released = Burst::with_capacity(setup.burst);
    let mut punted = Burst::with_capacity(setup.burst);
    let mut drops = DropCounts::default();
    let start = Instant::now();
    let mut last_active = start;
    let mut ctx = NfContext {
        now_ns: 0,
        worker,
        workers,
    };
    let (mut idle_polls, mut bursts, mut iter) = (0u64, 0u64, 0u64);
    let mut stopped_at: Option<Instant> = None;
    let mut clock = LoopClock::new(start);
    loop {
        iter += 1;
        let mut got_any = false;
        for qi in 0..nports {
            let n = setup.queues[qi].rx_burst(&mut burst);
            if n == 0 {
                continue;
            }
            if !got_any {
                clock.busy();
                ctx.now_ns = clock.ns();
            }
            got_any = true;
            bursts += 1;
            if let Some(e) = setup.egress {
                burst.set_all_verdicts(Verdict::tx(e));
            }
            setup.chain.process(&mut burst, &ctx);
            dispatch(
                &mut burst,
                &mut setup.queues,
                &mut tx,
                &mut dropped,
                &mut punted,
                setup.slow.as_mut(),
                &mut drops,
                qi,
            );
        }
        // Packets an NF held back (fragments waiting for their first) go out once ready, and
        // time out even while no traffic arrives.
        if setup.chain.held() > 0 {
            if !got_any {
                clock.busy();
                ctx.now_ns = clock.ns();
            }
            setup.chain.release(&mut released, &ctx, false);
            if !released.is_empty() {
                got_any = true;
                dispatch(
                    &mut released,
                    &mut setup.queues,
                    &mut tx,
                    &mut dropped,
                    &mut punted,
                    setup.slow.as_mut(),
                    &mut drops,
                    0,
                );
            }
        }
        if let Some(slow) = setup.slow.as_mut()
            && slow.wants_poll()
        {
            let mut io = PortIo {
                queues: &mut setup.queues,
                tx: &mut tx,
                drops: &mut drops,
            };
            slow.poll(&mut io);
            send_all(&mut tx, &mut setup.queues, &mut drops);
        }
        if got_any {
            last_active = clock.now;
        } else {
            clock.idle();
            idle_polls += 1;
            for q in &mut setup.queues {
                q.flush();
            }
            if setup.queues.iter().all(|q| q.idle()) {
                break;
            }
            if control.stop.load(Ordering::Relaxed) {
                let t = *stopped_at.get_or_insert_with(Instant::now);
                if t.elapsed() > control.drain_timeout {
                    break;
                }
            }
        }
        if iter % 1024 == 0 {
            publish(live, &setup.queues, &drops);
        }
    }
    // Nothing may stay held when the run ends: every held packet leaves, sent or dropped with
    // its reason (each call releases at least one packet while any is held).
    ctx.now_ns = start.elapsed().as_nanos() as u64;
    while setup.chain.held() > 0 {
        setup.chain.release(&mut released, &ctx, true);
        if released.is_empty() {
            break;
        }
        dispatch(
            &mut released,
            &mut setup.queues,
            &mut tx,
            &mut dropped,
            &mut punted,
            setup.slow.as_mut(),
            &mut drops,
            0,
        );
    }
    if let Some(slow) = setup.slow.as_mut() {
        slow.finish(&mut setup.queues, &mut drops);
    }
    for q in &mut setup.queues {
        q.flush();
    }
    publish(live, &setup.queues, &drops);
    let nf_ctx = NfContext {
        now_ns: start.elapsed().as_nanos() as u64,
        ..ctx
    };
    let nf_errors = setup
        .chain
        .functions_mut()
        .iter_mut()
        .filter_map(|nf| {
            let e = nf.finish(&nf_ctx).err()?;
            Some(format!("{}: {e}", nf.name()))
        })
        .collect();
    WorkerReport {
        queue_stats: setup.queues.iter().map(|q| q.stats()).collect(),
        xstats: setup.queues.iter().map(|q| q.xstats()).collect(),
        drops,
        nf_counters: setup
            .chain
            .functions()
            .iter()
            .map(|nf| (nf.name().to_string(), nf.counters()))
            .collect(),
        nf_errors,
        idle_polls,
        bursts,
        active_s: (last_active - start).as_secs_f64(),
        chain: setup.chain,
    }
}

/// Hands a processed burst to the Tx queues by verdict: as it is when every verdict names one
/// port (the fast path), otherwise sorted into per-port Tx bursts and a drop burst (counted by
/// reason, freed through queue `free_on`; slow-path drops go to `slow` when the run has one).
/// The fast path is inlined into the loop; the sorting pass is a call of its own.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn dispatch(
    burst: &mut Burst,
    queues: &mut [Box<dyn Queue>],
    tx: &mut [Burst],
    dropped: &mut Burst,
    punted: &mut Burst,
    slow: Option<&mut SlowPath>,
    drops: &mut DropCounts,
    free_on: usize,
) {
    if let Some(p) = burst.single_tx_port()
        && let Some(q) = queues.get_mut(p as usize)
    {
        q.tx_burst(burst, drops);
        return;
    }
    sort_and_send(burst, queues, tx, dropped, punted, slow, drops, free_on);
}

/// [`dispatch`] of a burst whose verdicts name more than one port or a drop.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn sort_and_send(
    burst: &mut Burst,
    queues: &mut [Box<dyn Queue>],
    tx: &mut [Burst],
    dropped: &mut Burst,
    punted: &mut Burst,
    slow: Option<&mut SlowPath>,
    drops: &mut DropCounts,
    free_on: usize,
) {
    let nports = queues.len();
    let to_slow_path = slow.is_some();
    for i in 0..burst.len() {
        match burst.verdict(i).action() {
            Action::Tx(p) if (p as usize) < nports => {
                burst.move_to(i, &mut tx[p as usize]);
            }
            Action::Tx(_) => {
                drops.add(DropReason::NO_SUCH_PORT, 1);
                burst.move_to(i, dropped);
            }
            Action::Drop(r) if to_slow_path && r.for_slow_path() => {
                burst.move_to(i, punted);
            }
            Action::Drop(r) => {
                drops.add(r, 1);
                burst.move_to(i, dropped);
            }
        }
    }
    burst.disown();
    if let Some(slow) = slow
        && !punted.is_empty()
    {
        let mut io = PortIo { queues, tx, drops };
        slow.take(punted, &mut io);
    }
    send_all(tx, queues, drops);
    if !dropped.is_empty() {
        queues[free_on].free_burst(dropped);
    }
}

/// Hands every non-empty per-port list to its port's queue.
fn send_all(tx: &mut [Burst], queues: &mut [Box<dyn Queue>], drops: &mut DropCounts) {
    for (p, list) in tx.iter_mut().enumerate() {
        if !list.is_empty() {
            queues[p].tx_burst(list, drops);
        }
    }
}

fn publish(live: &LiveStats, queues: &[Box<dyn Queue>], drops: &DropCounts) {
    let mut total = QueueStats::default();
    for q in queues {
        total.add(&q.stats());
    }
    live.publish(&total, drops);
}
