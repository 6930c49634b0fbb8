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
//! and nothing is in flight) or when the run is stopped and its queues have drained (or the
//! drain timed out). Counters are published to [`LiveStats`] every [`PUBLISH_EVERY`] iterations,
//! read as consistent snapshots by the live line, telemetry and metrics; between bursts the
//! worker answers its mailbox ([`crate::control`]): counters, extended counters, and commands
//! to its functions. The only per-iteration cost of either is a relaxed load and a counter
//! test; nothing per packet.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

use crate::burst::Burst;
use crate::control::{Mailbox, Reply, Request};
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

    /// A loop iteration that found work; true when it read the clock (always the first busy
    /// iteration after an idle one, [`LoopClock::idle`]).
    #[inline]
    fn busy(&mut self) -> bool {
        let read = self.age >= CLOCK_EVERY;
        if read {
            self.now = Instant::now();
            self.ns = (self.now - self.start).as_nanos() as u64;
            self.age = 0;
        }
        self.age += 1;
        read
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

/// Where a worker is in its life, as it publishes it ([`LiveStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerState {
    /// Started, nothing published yet.
    Starting,
    /// Receiving and processing.
    Running,
    /// Told to stop: no more Rx, draining what is in flight.
    Draining,
    /// Done; the counters are final.
    Finished,
}

impl WorkerState {
    fn from_u64(v: u64) -> Self {
        match v {
            1 => WorkerState::Running,
            2 => WorkerState::Draining,
            3 => WorkerState::Finished,
            _ => WorkerState::Starting,
        }
    }

    /// Its name in telemetry (`starting`, `running`, `draining`, `finished`).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Running => "running",
            WorkerState::Draining => "draining",
            WorkerState::Finished => "finished",
        }
    }
}

/// Fields of a [`LiveStats`] besides the per-port and per-reason counters.
const BUSY_NS: usize = 0;
const UPTIME_NS: usize = 1;
const BURSTS: usize = 2;
const IDLE_POLLS: usize = 3;
const STATE: usize = 4;
const SCALARS: usize = 5;

/// The counters a worker publishes while it runs, for the live line, telemetry and metrics.
///
/// The worker writes them every [`PUBLISH_EVERY`] loop iterations and when it finishes; readers
/// take a [`LiveSnapshot`] at any time. The write is a sequence lock made of plain atomic
/// stores (one writer, so no read-modify-write): a reader retries when the sequence changed
/// under it, so a snapshot is always one consistent publication (a port's received packets
/// never ahead of its drops), read without a lock.
#[derive(Debug)]
pub struct LiveStats {
    seq: AtomicU64,
    ports: Box<[[AtomicU64; 14]]>,
    drops: Box<[AtomicU64]>,
    scalars: [AtomicU64; SCALARS],
}

/// One consistent publication of a worker's [`LiveStats`].
#[derive(Clone, Debug)]
pub struct LiveSnapshot {
    /// The worker's queue counters, per port (index = port id).
    pub ports: Vec<QueueStats>,
    /// Drops per reason.
    pub drops: DropCounts,
    /// Nanoseconds spent in loop iterations that found packets.
    pub busy_ns: u64,
    /// Nanoseconds from the worker's start to this publication.
    pub uptime_ns: u64,
    /// Bursts processed.
    pub bursts: u64,
    /// Loop iterations that received nothing.
    pub idle_polls: u64,
    /// Where the worker is.
    pub state: WorkerState,
}

impl LiveSnapshot {
    /// The queue counters summed over the ports.
    pub fn total(&self) -> QueueStats {
        let mut t = QueueStats::default();
        for p in &self.ports {
            t.add(p);
        }
        t
    }
}

impl Default for LiveStats {
    /// For a worker with one queue.
    fn default() -> Self {
        Self::new(1)
    }
}

impl LiveStats {
    /// Counters of a worker with a queue on each of `ports` ports.
    pub fn new(ports: usize) -> Self {
        let zero = || AtomicU64::new(0);
        Self {
            seq: zero(),
            ports: (0..ports)
                .map(|_| std::array::from_fn(|_| zero()))
                .collect(),
            drops: (0..DropReason::MAX).map(|_| zero()).collect(),
            scalars: std::array::from_fn(|_| zero()),
        }
    }

    /// Publishes one consistent set of counters (the worker, the only writer): each port's
    /// queue counters from `ports`, and the rest from `pub_`.
    fn publish(&self, ports: impl IntoIterator<Item = QueueStats>, pub_: &Publication<'_>) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (port, q) in self.ports.iter().zip(ports) {
            for (a, v) in port.iter().zip(q.to_array()) {
                a.store(v, Ordering::Relaxed);
            }
        }
        let d = pub_.drops.as_array();
        for (a, &v) in self.drops.iter().zip(&d[..pub_.reasons]) {
            a.store(v, Ordering::Relaxed);
        }
        let sc = [
            pub_.busy_ns,
            pub_.uptime_ns,
            pub_.bursts,
            pub_.idle_polls,
            pub_.state as u64,
        ];
        for (a, v) in self.scalars.iter().zip(sc) {
            a.store(v, Ordering::Relaxed);
        }
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// The latest publication, read without a lock (retried while the worker is writing).
    pub fn snapshot(&self) -> LiveSnapshot {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let ports: Vec<QueueStats> = self
                .ports
                .iter()
                .map(|p| {
                    QueueStats::from_array(std::array::from_fn(|i| p[i].load(Ordering::Relaxed)))
                })
                .collect();
            let mut drops = DropCounts::default();
            for r in DropReason::all() {
                drops.add(r, self.drops[r.index()].load(Ordering::Relaxed));
            }
            let sc: [u64; SCALARS] =
                std::array::from_fn(|i| self.scalars[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return LiveSnapshot {
                    ports,
                    drops,
                    busy_ns: sc[BUSY_NS],
                    uptime_ns: sc[UPTIME_NS],
                    bursts: sc[BURSTS],
                    idle_polls: sc[IDLE_POLLS],
                    state: WorkerState::from_u64(sc[STATE]),
                };
            }
        }
    }
}

/// What a worker shares with the rest of the process while it runs: the counters it publishes
/// and the mailbox it answers (see [`crate::control`]).
#[derive(Debug, Default)]
pub struct WorkerShared {
    /// Its published counters.
    pub live: LiveStats,
    /// Its mailbox.
    pub mailbox: Mailbox,
}

impl WorkerShared {
    /// For a worker with a queue on each of `ports` ports.
    pub fn new(ports: usize) -> Self {
        Self {
            live: LiveStats::new(ports),
            mailbox: Mailbox::new(),
        }
    }
}

/// Loop iterations between two publications of a worker's [`LiveStats`].
pub const PUBLISH_EVERY: u64 = 1024;

/// What one publication carries.
struct Publication<'a> {
    drops: &'a DropCounts,
    reasons: usize,
    busy_ns: u64,
    uptime_ns: u64,
    bursts: u64,
    idle_polls: u64,
    state: WorkerState,
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
    /// Seconds spent in loop iterations that found packets.
    pub busy_s: f64,
    /// Seconds from the worker's start to its last forwarded packet.
    pub active_s: f64,
    /// The worker's NF chain, handed back after [`crate::NetworkFunction::finish`], so a caller
    /// running many trials can reset it ([`NfChain::reset`]) instead of building another.
    pub chain: NfChain,
}

/// Run-wide controls shared with the workers.
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    /// Set to stop workers after draining (e.g. at the end of `--duration`, or on SIGINT).
    pub stop: Arc<AtomicBool>,
    /// Give up waiting for queues to drain after this many nanoseconds once stopped (read when
    /// a worker first finds its queues quiet after the stop, so the one who stops the run may
    /// shorten it at the same time, as a signal does).
    pub drain_timeout_ns: Arc<AtomicU64>,
    /// Keep polling when every queue is idle, until stopped (as on a real port, where more
    /// traffic may come); false ends the worker when its queues have nothing more to deliver.
    pub keep_polling: bool,
}

impl RunControl {
    /// Controls with a drain timeout of `drain`.
    pub fn new(drain: Duration) -> Self {
        Self {
            stop: Arc::new(AtomicBool::new(false)),
            drain_timeout_ns: Arc::new(AtomicU64::new(drain.as_nanos() as u64)),
            keep_polling: false,
        }
    }

    /// Stops the workers, draining for at most `drain` (or the timeout they have, if shorter).
    pub fn stop_within(&self, drain: Duration) {
        self.drain_timeout_ns
            .fetch_min(drain.as_nanos() as u64, Ordering::AcqRel);
        self.stop.store(true, Ordering::Release);
    }
}

/// Runs one worker to completion on the calling thread, publishing its counters to
/// `shared.live` and answering `shared.mailbox` between bursts.
///
/// A worker whose queues are all DPDK queues and that has no slow path runs a copy of the loop
/// made for the DPDK queue type (its Rx and Tx inlined into the loop); any other runs the loop
/// over `dyn Queue`.
pub fn run_worker(
    worker: u16,
    workers: u16,
    setup: WorkerSetup,
    control: &RunControl,
    shared: &WorkerShared,
) -> WorkerReport {
    let WorkerSetup {
        queues,
        chain,
        egress,
        burst,
        slow,
    } = setup;
    #[cfg(feature = "dpdk")]
    if slow.is_none()
        && queues
            .iter()
            .all(|q| (&**q as &dyn std::any::Any).is::<crate::driver::dpdk::DpdkQueue>())
    {
        let mut dpdk = Vec::with_capacity(queues.len());
        for q in queues {
            let q: Box<dyn std::any::Any> = q;
            match q.downcast::<crate::driver::dpdk::DpdkQueue>() {
                Ok(q) => dpdk.push(q),
                Err(_) => unreachable!("every queue was checked to be a DPDK queue"),
            }
        }
        let setup = LoopSetup {
            queues: dpdk,
            chain,
            egress,
            burst,
            slow,
        };
        return run_loop(worker, workers, setup, control, shared);
    }
    let setup = LoopSetup::<dyn Queue> {
        queues,
        chain,
        egress,
        burst,
        slow,
    };
    run_loop(worker, workers, setup, control, shared)
}

/// The queue type a worker's loop is compiled for: `dyn Queue` (queues of any driver, calls
/// through the trait object, the slow path allowed), or one driver's own queue type, whose
/// `rx_burst` and `tx_burst` the compiler then inlines into the loop: no call through a trait
/// object per burst, and the burst's state stays in registers from Rx to Tx.
trait LoopQueue: Queue {
    /// The queues as trait objects, for the slow path; `None` for a concrete queue type (such a
    /// loop runs only for workers without a slow path).
    fn as_dyn(queues: &mut [Box<Self>]) -> Option<&mut [Box<dyn Queue>]>;
}

impl LoopQueue for dyn Queue {
    fn as_dyn(queues: &mut [Box<Self>]) -> Option<&mut [Box<dyn Queue>]> {
        Some(queues)
    }
}

#[cfg(feature = "dpdk")]
impl LoopQueue for crate::driver::dpdk::DpdkQueue {
    fn as_dyn(_: &mut [Box<Self>]) -> Option<&mut [Box<dyn Queue>]> {
        None
    }
}

/// [`WorkerSetup`] with the queues as the loop's queue type.
struct LoopSetup<Q: LoopQueue + ?Sized> {
    queues: Vec<Box<Q>>,
    chain: NfChain,
    egress: Option<u16>,
    burst: usize,
    slow: Option<SlowPath>,
}

/// [`run_worker`]'s loop over queues of type `Q`.
fn run_loop<Q: LoopQueue + ?Sized>(
    worker: u16,
    workers: u16,
    setup: LoopSetup<Q>,
    control: &RunControl,
    shared: &WorkerShared,
) -> WorkerReport {
    let LoopSetup {
        queues,
        mut chain,
        egress,
        burst: size,
        slow,
    } = setup;
    let nports = queues.len();
    // One receive burst per port: a burst that always receives from the same queue finds its
    // receive ports and verdicts already written by the last one (`Burst::set_rx_defaults`).
    let mut rx: Vec<Burst> = (0..nports).map(|_| Burst::with_capacity(size)).collect();
    let mut released = Burst::with_capacity(size);
    let mut out = Outputs {
        tx: (0..nports).map(|_| Burst::with_capacity(size)).collect(),
        queues,
        dropped: Burst::with_capacity(size),
        punted: Burst::with_capacity(size),
        slow,
        drops: DropCounts::default(),
    };
    // Every reason is registered when the functions are built, before their workers start.
    let reasons = DropReason::all().len();
    let start = Instant::now();
    let mut last_active = start;
    let mut ctx = NfContext {
        now_ns: 0,
        worker,
        workers,
    };
    let (mut idle_polls, mut bursts, mut iter) = (0u64, 0u64, 0u64);
    // Busy time: from the first iteration that finds packets to the next that finds none (one
    // clock read per busy stretch besides the loop clock's own).
    let (mut busy_ns, mut busy_since) = (0u64, None::<Instant>);
    let mut stopped_at: Option<Instant> = None;
    let mut clock = LoopClock::new(start);
    let live = &shared.live;
    let publish = |state: WorkerState,
                   queues: &[Box<Q>],
                   drops: &DropCounts,
                   busy_ns: u64,
                   now: Instant,
                   bursts: u64,
                   idle_polls: u64| {
        live.publish(
            queues.iter().map(|q| q.stats()),
            &Publication {
                drops,
                reasons,
                busy_ns,
                uptime_ns: (now - start).as_nanos() as u64,
                bursts,
                idle_polls,
                state,
            },
        )
    };
    publish(
        WorkerState::Running,
        &out.queues,
        &out.drops,
        0,
        start,
        0,
        0,
    );
    loop {
        iter += 1;
        let mut got_any = false;
        for (qi, burst) in rx.iter_mut().enumerate() {
            let n = out.queues[qi].rx_burst(burst);
            if n == 0 {
                continue;
            }
            // The functions' time and the start of a busy stretch change only when the clock
            // is read: a stretch starts after an idle iteration, and the clock is read then.
            if !got_any && clock.busy() {
                ctx.now_ns = clock.ns();
                busy_since.get_or_insert(clock.now);
            }
            got_any = true;
            bursts += 1;
            if let Some(e) = egress {
                burst.set_all_verdicts(Verdict::tx(e));
            }
            chain.process(burst, &ctx);
            dispatch(burst, &mut out, qi);
        }
        // Packets an NF held back (fragments waiting for their first) go out once ready, and
        // time out even while no traffic arrives. (`may_hold` is one flag: no function is asked
        // per iteration while none holds anything.)
        if chain.may_hold() {
            if !got_any && clock.busy() {
                ctx.now_ns = clock.ns();
            }
            chain.release(&mut released, &ctx, false);
            if !released.is_empty() {
                got_any = true;
                busy_since.get_or_insert(clock.now);
                dispatch(&mut released, &mut out, 0);
            }
        }
        // The queue type first: a loop made for one driver's queues has no slow path, and
        // then no test for it either.
        if let Some(queues) = Q::as_dyn(&mut out.queues)
            && let Some(slow) = out.slow.as_mut()
            && slow.wants_poll()
        {
            let mut io = PortIo {
                queues,
                tx: &mut out.tx,
                drops: &mut out.drops,
            };
            slow.poll(&mut io);
            send_all(&mut out.tx, &mut out.queues, &mut out.drops);
        }
        if got_any {
            last_active = clock.now;
        } else {
            if let Some(t) = busy_since.take() {
                busy_ns += t.elapsed().as_nanos() as u64;
            }
            clock.idle();
            idle_polls += 1;
            for q in &mut out.queues {
                q.flush();
            }
            let stop = control.stop.load(Ordering::Relaxed);
            if (stop || !control.keep_polling) && out.queues.iter().all(|q| q.idle()) {
                break;
            }
            if stop {
                let t = *stopped_at.get_or_insert_with(Instant::now);
                let limit = control.drain_timeout_ns.load(Ordering::Relaxed);
                if t.elapsed().as_nanos() as u64 > limit {
                    break;
                }
            }
        }
        if shared.mailbox.has_mail() {
            let (queues, chain) = (&out.queues, &mut chain);
            shared.mailbox.serve(|r| answer(r, queues, chain, &ctx));
        }
        if iter % PUBLISH_EVERY == 0 {
            let state = if stopped_at.is_some() {
                WorkerState::Draining
            } else {
                WorkerState::Running
            };
            let now = Instant::now();
            let busy = busy_ns + busy_since.map_or(0, |t| (now - t).as_nanos() as u64);
            publish(
                state,
                &out.queues,
                &out.drops,
                busy,
                now,
                bursts,
                idle_polls,
            );
        }
    }
    // Nothing may stay held when the run ends: every held packet leaves, sent or dropped with
    // its reason (each call releases at least one packet while any is held).
    ctx.now_ns = start.elapsed().as_nanos() as u64;
    while chain.held() > 0 {
        chain.release(&mut released, &ctx, true);
        if released.is_empty() {
            break;
        }
        dispatch(&mut released, &mut out, 0);
    }
    if let Some(slow) = out.slow.as_mut()
        && let Some(queues) = Q::as_dyn(&mut out.queues)
    {
        slow.finish(queues, &mut out.drops);
    }
    for q in &mut out.queues {
        q.flush();
    }
    shared.mailbox.close();
    if let Some(t) = busy_since.take() {
        busy_ns += t.elapsed().as_nanos() as u64;
    }
    publish(
        WorkerState::Finished,
        &out.queues,
        &out.drops,
        busy_ns,
        Instant::now(),
        bursts,
        idle_polls,
    );
    let nf_ctx = NfContext {
        now_ns: start.elapsed().as_nanos() as u64,
        ..ctx
    };
    let nf_errors = chain
        .functions_mut()
        .iter_mut()
        .filter_map(|nf| {
            let e = nf.finish(&nf_ctx).err()?;
            Some(format!("{}: {e}", nf.name()))
        })
        .collect();
    WorkerReport {
        queue_stats: out.queues.iter().map(|q| q.stats()).collect(),
        xstats: out.queues.iter().map(|q| q.xstats()).collect(),
        drops: out.drops,
        nf_counters: chain
            .functions()
            .iter()
            .map(|nf| (nf.name().to_string(), nf.counters()))
            .collect(),
        nf_errors,
        idle_polls,
        bursts,
        busy_s: busy_ns as f64 * 1e-9,
        active_s: (last_active - start).as_secs_f64(),
        chain,
    }
}

/// A worker's queues and what the run loop sorts a processed burst into: per-port Tx bursts,
/// the drop and slow-path bursts, drops by reason, and the slow path. One place for what
/// [`dispatch`] and [`sort_and_send`] work on, borrowed once per burst.
struct Outputs<Q: LoopQueue + ?Sized> {
    /// The worker's queue on each port (index = port id).
    queues: Vec<Box<Q>>,
    /// Per-port Tx bursts of the sorting pass (index = port id).
    tx: Vec<Burst>,
    /// Packets the sorting pass drops, freed together.
    dropped: Burst,
    /// Packets for the slow path.
    punted: Burst,
    /// The worker's slow path, when the run has a network layer.
    slow: Option<SlowPath>,
    /// Drops by reason.
    drops: DropCounts,
}

/// Hands a processed burst to the Tx queues by verdict: as it is when every verdict names one
/// port (the fast path), otherwise sorted into per-port Tx bursts and a drop burst (counted by
/// reason, freed through queue `free_on`; slow-path drops go to the slow path when the run has
/// one). The fast path is inlined into the loop; the sorting pass is a call of its own.
#[inline(always)]
fn dispatch<Q: LoopQueue + ?Sized>(burst: &mut Burst, out: &mut Outputs<Q>, free_on: usize) {
    if let Some(p) = burst.single_tx_port()
        && let Some(q) = out.queues.get_mut(p as usize)
    {
        q.tx_burst(burst, &mut out.drops);
        return;
    }
    sort_and_send(burst, out, free_on);
}

/// [`dispatch`] of a burst whose verdicts name more than one port or a drop.
#[inline(never)]
fn sort_and_send<Q: LoopQueue + ?Sized>(burst: &mut Burst, out: &mut Outputs<Q>, free_on: usize) {
    let Outputs {
        queues,
        tx,
        dropped,
        punted,
        slow,
        drops,
    } = out;
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
        && let Some(queues) = Q::as_dyn(queues)
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
fn send_all<Q: LoopQueue + ?Sized>(
    tx: &mut [Burst],
    queues: &mut [Box<Q>],
    drops: &mut DropCounts,
) {
    for (p, list) in tx.iter_mut().enumerate() {
        if !list.is_empty() {
            queues[p].tx_burst(list, drops);
        }
    }
}

/// A worker's answer to one request of its mailbox.
fn answer<Q: LoopQueue + ?Sized>(
    r: Request,
    queues: &[Box<Q>],
    chain: &mut NfChain,
    ctx: &NfContext,
) -> Reply {
    match r {
        Request::Counters => Reply::Counters(
            chain
                .functions()
                .iter()
                .map(|nf| (nf.name().to_string(), nf.counters()))
                .collect(),
        ),
        Request::XStats => Reply::XStats(queues.iter().map(|q| q.xstats()).collect()),
        Request::Nf { nf, cmd } => Reply::Nf(match chain.functions_mut().get_mut(nf) {
            Some(f) => f.control(&cmd, ctx),
            None => Err(format!("the pipeline has no function {nf}")),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader never sees half a publication: while one thread publishes counters that always
    /// satisfy rx = tx + drops on both ports, snapshots taken concurrently satisfy it too.
    #[test]
    fn snapshots_are_consistent_publications() {
        let live = Arc::new(LiveStats::new(2));
        let done = Arc::new(AtomicBool::new(false));
        let writer = {
            let (live, done) = (live.clone(), done.clone());
            std::thread::spawn(move || {
                let mut drops = DropCounts::default();
                for i in 1..=200_000u64 {
                    drops.add(DropReason::TX_FULL, 1);
                    let q = QueueStats {
                        rx_packets: 3 * i,
                        wire_tx_frames: 2 * i,
                        ..QueueStats::default()
                    };
                    live.publish(
                        [q, q],
                        &Publication {
                            drops: &drops,
                            reasons: DropReason::all().len(),
                            busy_ns: i,
                            uptime_ns: 2 * i,
                            bursts: i,
                            idle_polls: 0,
                            state: WorkerState::Running,
                        },
                    );
                }
                done.store(true, Ordering::Release);
            })
        };
        let mut seen = 0;
        while !done.load(Ordering::Acquire) {
            let s = live.snapshot();
            let t = s.total();
            let d = s.drops.get(DropReason::TX_FULL);
            assert_eq!(t.rx_packets, t.wire_tx_frames + 2 * d, "{s:?}");
            assert_eq!(s.ports[0], s.ports[1]);
            assert_eq!((s.uptime_ns, s.bursts), (2 * s.busy_ns, s.busy_ns));
            seen += 1;
        }
        writer.join().unwrap();
        let s = live.snapshot();
        assert_eq!(s.total().rx_packets, 2 * 3 * 200_000);
        assert_eq!(s.state, WorkerState::Running);
        assert!(seen > 0);
    }
}
