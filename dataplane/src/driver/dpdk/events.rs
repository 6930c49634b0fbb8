//! Link-state and reset events of DPDK ports: the callbacks EAL's interrupt thread runs for
//! `RTE_ETH_EVENT_INTR_LSC` and `RTE_ETH_EVENT_INTR_RESET`, and the recovery the port's worker
//! does afterwards.
//!
//! Why the work is split: an event callback runs on EAL's interrupt thread while the workers poll
//! the port, and DPDK forbids resetting a port from its own callback (the reset waits for the
//! interrupt thread). So the callbacks only record what happened in atomics ([`EventCounts`]);
//! the worker that polls queue 0 looks at them when a poll comes back empty (a port whose device
//! reset or whose link is down delivers nothing, and a busy port pays nothing), and recovers:
//! it stops the port, calls `rte_eth_dev_reset`, and sets the port up again over the pools it
//! already has (configure, queue setup, start), as `rte_eth_dev_reset`'s documentation asks of
//! an application. A PMD without a reset operation (`-ENOTSUP`) is set up again all the same.
//!
//! A link that goes down is only reported: the PMD delivers nothing meanwhile, and the port
//! carries on when the link comes back. Some PMDs keep the link status by interrupt without
//! raising the event (`net_tap` in DPDK 22.11 updates it from its netlink interrupt and calls
//! no callback), so the worker also reads that status, a copy without a PMD call, every few
//! hundred empty polls. Both show in the port's extended statistics
//! (`link_up`, `link_down_events`, `link_up_events`, `reset_events`, `device_resets`,
//! `reset_failures`, `reset_tx_drops`), hence in the run summary's `xstats` and EAL's telemetry
//! of the port; [`PortEvents::link_state`] shares the link with the operator's health check and
//! metrics.
//!
//! A port with several queue pairs is polled by several workers, each owning its queues, and
//! none of them may be inside an Rx or Tx burst while the port is stopped and set up again. So
//! the reset is a hand-off that never blocks a thread (a worker that waited for another could
//! wait for ever: two ports resetting at once, each coordinator waiting for a worker that is the
//! other's coordinator): queue 0's worker asks the other queues to stand aside
//! ([`PortEvents::paused`], one atomic load per burst while nothing is asked); each other queue,
//! at the start of its next burst, acknowledges and then neither receives (its polls return
//! nothing) nor sends (its frames are freed and counted, `tx_full` and `reset_tx_drops`) until
//! the port is back. Queue 0's worker resets the port on the first empty poll after every other
//! queue has acknowledged (a queue that is gone counts as acknowledged), then lets them go on.
//! The acknowledgement is a store with release ordering made after the queue's last burst, and
//! the port coming back a store with release ordering made after the last set-up call, each read
//! with acquire ordering: every burst on the port either happens before the reset or after it.

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dpdk_sys as sys;

use super::eal::control_lock;
use super::error::{DpdkError, strerror};
use super::mempool::QueuePools;
use crate::port::LinkState;

/// Sets a port up again after a reset over the pools it already has (configure, queue setup,
/// start).
pub(crate) type Reconfigure = Box<dyn Fn(&[QueuePools]) -> Result<(), DpdkError> + Send + Sync>;

/// What a port's event callbacks saw and what its worker did about it (all monotonic but the
/// link's status).
#[derive(Debug, Default)]
pub(crate) struct EventCounts {
    /// The link as last reported, and its changes (shared with the operator's surfaces).
    link: Arc<LinkState>,
    /// Reset events the PMD raised.
    reset_events: AtomicU64,
    /// Reset events the worker has dealt with.
    resets_handled: AtomicU64,
    /// Resets recovered (port reset and set up again).
    resets: AtomicU64,
    /// Resets that could not be recovered.
    reset_failures: AtomicU64,
    /// Frames the other queues dropped while they stood aside for a reset.
    reset_tx_drops: AtomicU64,
}

impl EventCounts {
    /// Notes a link status report.
    fn link(&self, up: bool) {
        self.link.report(up);
    }
}

/// The events DPDK calls back for, with the callback registered for each.
const EVENTS: [sys::rte_eth_event_type; 2] = [
    sys::rte_eth_event_type_RTE_ETH_EVENT_INTR_LSC,
    sys::rte_eth_event_type_RTE_ETH_EVENT_INTR_RESET,
];

/// A port's event callbacks and the way to set it up again: registered at open, unregistered
/// (before the port is stopped and closed) by [`PortEvents::unregister`].
pub(crate) struct PortEvents {
    port_id: u16,
    name: String,
    /// Boxed: its address is the callbacks' argument and must not move.
    counts: Box<EventCounts>,
    reconfigure: Reconfigure,
    /// The PMD keeps the link status by interrupt (reading it is a copy, no PMD call).
    lsc: bool,
    /// Empty polls of queue 0 seen (only its worker counts them).
    idle_polls: AtomicU64,
    /// The events whose callbacks are registered.
    registered: [bool; 2],
    /// The reset hand-off of a port with several queues (see the module docs).
    pause: Pause,
}

/// The reset hand-off between queue 0's worker and the other queues' workers.
#[derive(Debug)]
struct Pause {
    /// The hand-off's round (the first is 1) times two, plus one while queue 0's worker asks
    /// the other queues to stand aside; written only by that worker. One atomic, so a queue
    /// that saw a round asked can never later see an older state.
    state: AtomicU64,
    /// Per stand-aside slot: the last round it stood aside in, or [`GONE`]. Slot `q` is queue
    /// `q`'s worker (queue 0's entry is unused); slot `queues + q` a second thread on queue `q`
    /// that only receives or only sends (the traffic generator's, `txgen.rs`), gone unless it
    /// [joins](PortEvents::join).
    acks: Box<[AtomicU64]>,
}

/// A queue that no longer exists: it stands aside in every round.
const GONE: u64 = u64::MAX;

impl Pause {
    fn new(queues: u16) -> Self {
        let q = u32::from(queues.max(1));
        Self {
            state: AtomicU64::new(0),
            acks: (0..2 * q)
                .map(|i| AtomicU64::new(if i < q { 0 } else { GONE }))
                .collect(),
        }
    }

    /// Whether another thread than queue 0's worker may poll the port (a slot is not gone).
    fn others(&self) -> bool {
        self.acks[1..]
            .iter()
            .any(|a| a.load(Ordering::Acquire) != GONE)
    }

    /// Whether every queue but 0 has stood aside in `round` (or is gone).
    fn all_aside(&self, round: u64) -> bool {
        self.acks[1..].iter().all(|a| {
            let v = a.load(Ordering::Acquire);
            v == round || v == GONE
        })
    }
}

impl std::fmt::Debug for PortEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortEvents")
            .field("port_id", &self.port_id)
            .field("counts", &self.counts)
            .field("registered", &self.registered)
            .finish()
    }
}

/// Whether the link of `port_id` is up now.
fn link_is_up(port_id: u16) -> bool {
    let mut link = sys::rte_eth_link::default();
    // SAFETY: a valid port id and an out-pointer to a local.
    let rc = unsafe { sys::rte_eth_link_get_nowait(port_id, &mut link) };
    rc == 0 && link.link_status() != 0
}

/// True when the port's PMD keeps its link status by interrupt (`RTE_ETH_DEV_INTR_LSC` in its
/// device flags).
pub(crate) fn lsc_capable(info: &sys::rte_eth_dev_info) -> bool {
    // SAFETY: `dev_flags` points at the device's flags, alive as long as the device.
    !info.dev_flags.is_null() && unsafe { *info.dev_flags } & sys::NMDP_ETH_DEV_INTR_LSC != 0
}

/// Asks a port's configuration for link-state interrupts when its PMD can raise them; without
/// the device flag asking makes configure fail.
pub(crate) fn enable_lsc(conf: &mut sys::rte_eth_conf, info: &sys::rte_eth_dev_info) {
    if lsc_capable(info) {
        conf.intr_conf.set_lsc(1);
    }
}

/// Empty polls of queue 0 between two reads of the link status (see [`PortEvents::on_idle`]).
const LINK_READ_EVERY: u64 = 256;

/// The callback EAL's interrupt thread runs for a port's events.
///
/// # Safety
/// `cb_arg` must be the [`EventCounts`] registered with it, alive until the callback is
/// unregistered.
unsafe extern "C" fn on_event(
    port_id: u16,
    event: sys::rte_eth_event_type,
    cb_arg: *mut c_void,
    _ret_param: *mut c_void,
) -> c_int {
    // SAFETY: per the contract, the registered counts, alive while registered; only atomics are
    // touched through the shared reference.
    let c = unsafe { &*(cb_arg as *const EventCounts) };
    if event == sys::rte_eth_event_type_RTE_ETH_EVENT_INTR_LSC {
        c.link(link_is_up(port_id));
    } else if event == sys::rte_eth_event_type_RTE_ETH_EVENT_INTR_RESET {
        c.reset_events.fetch_add(1, Ordering::Release);
    }
    0
}

impl PortEvents {
    /// Registers the callbacks of started port `port_id` (named `name`, with `queues` queue
    /// pairs; `lsc`: its PMD keeps the link status by interrupt), which `reconfigure` sets up
    /// again after a reset, and notes whether its link is up now.
    pub(crate) fn register(
        port_id: u16,
        name: &str,
        queues: u16,
        lsc: bool,
        reconfigure: Reconfigure,
    ) -> Result<Self, DpdkError> {
        let mut ev = Self {
            port_id,
            name: name.to_string(),
            counts: Box::new(EventCounts {
                link: Arc::new(LinkState::new(link_is_up(port_id))),
                ..EventCounts::default()
            }),
            reconfigure,
            lsc,
            idle_polls: AtomicU64::new(0),
            registered: [false; 2],
            pause: Pause::new(queues),
        };
        let arg = ev.arg();
        for (i, &e) in EVENTS.iter().enumerate() {
            // SAFETY: a valid port; `on_event` matches `rte_eth_dev_cb_fn`; `arg` points at the
            // boxed counts, which stay put and alive until `unregister` (also run on drop).
            let rc = unsafe { sys::rte_eth_dev_callback_register(port_id, e, Some(on_event), arg) };
            if rc != 0 {
                return Err(DpdkError::Port(format!(
                    "rte_eth_dev_callback_register({name}, event {e}): {}",
                    strerror(-rc)
                )));
            }
            ev.registered[i] = true;
        }
        Ok(ev)
    }

    fn arg(&self) -> *mut c_void {
        (&*self.counts as *const EventCounts).cast_mut().cast()
    }

    /// Unregisters the callbacks (waiting for one that is running to finish). Must run before
    /// the port is closed.
    pub(crate) fn unregister(&mut self) {
        let arg = self.arg();
        for (i, &e) in EVENTS.iter().enumerate() {
            if !std::mem::take(&mut self.registered[i]) {
                continue;
            }
            loop {
                // SAFETY: the same port, event, callback and argument as registered. -EAGAIN
                // means the callback is running on the interrupt thread: wait and retry.
                let rc = unsafe {
                    sys::rte_eth_dev_callback_unregister(self.port_id, e, Some(on_event), arg)
                };
                if rc != -libc::EAGAIN {
                    break;
                }
                std::thread::yield_now();
            }
        }
    }

    /// Queue 0's worker found the port idle: recovers from a reset the PMD reported since the
    /// last look, if any, and every [`LINK_READ_EVERY`] empty polls reads the link status the
    /// PMD's interrupt keeps (some PMDs, `net_tap` among them, update it without raising the
    /// event). `pools` are the port's pools, one entry per queue.
    #[inline]
    pub(crate) fn on_idle(&self, pools: &[QueuePools]) {
        let raised = self.counts.reset_events.load(Ordering::Acquire);
        if raised != self.counts.resets_handled.load(Ordering::Relaxed) {
            self.recover(raised, pools);
        }
        if self.lsc
            && self
                .idle_polls
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(LINK_READ_EVERY)
        {
            self.counts.link(link_is_up(self.port_id));
        }
    }

    /// Resets the port and sets it up again (one recovery covers every reset raised so far);
    /// with other threads on the port (another queue, or a slot that joined), first asks them
    /// to stand aside and returns until they all have (see the module docs).
    #[cold]
    #[inline(never)]
    fn recover(&self, raised: u64, pools: &[QueuePools]) {
        let p = &self.pause;
        // Only this thread writes the state.
        let state = p.state.load(Ordering::Relaxed);
        if p.others() {
            if state & 1 == 0 {
                p.state.store(state + 3, Ordering::Release);
                return;
            }
            if !p.all_aside(state >> 1) {
                return;
            }
        }
        self.counts.resets_handled.store(raised, Ordering::Relaxed);
        let c = &self.counts;
        let result = {
            let _g = control_lock();
            // SAFETY: a valid port; no thread is inside a burst on it: queue 0 is polled by this
            // thread, every other queue has stood aside (or there is none). Stop and reset
            // release the mbufs in its rings to their pools, which stay alive (`pools`).
            let rc = unsafe {
                sys::rte_eth_dev_stop(self.port_id);
                sys::rte_eth_dev_reset(self.port_id)
            };
            if rc != 0 && rc != -libc::ENOTSUP {
                Err(DpdkError::Port(format!(
                    "rte_eth_dev_reset({}): {}",
                    self.name,
                    strerror(-rc)
                )))
            } else {
                (self.reconfigure)(pools)
            }
        };
        // The other queues go on: with the port set up again, or, if that failed, on a port
        // that delivers and takes nothing (their bursts then find it stopped, which is safe).
        p.state.store(state & !1, Ordering::Release);
        match result {
            Ok(()) => {
                c.resets.fetch_add(1, Ordering::Relaxed);
                c.link(link_is_up(self.port_id));
            }
            Err(e) => {
                c.reset_failures.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "error: port {}: the device reset and could not be set up again: {e}",
                    self.name
                );
            }
        }
    }

    /// Whether queue `queue` (or stand-aside slot `queue`, see [`Pause::acks`]) must stand
    /// aside for a reset of the port now (the check at the start of each of its bursts; see the
    /// module docs): false, after one atomic load, unless queue 0's worker asked. Queue 0 never
    /// stands aside (its worker does the reset), so it skips the load.
    #[inline(always)]
    pub(crate) fn paused(&self, queue: u16) -> bool {
        queue != 0 && self.pause.state.load(Ordering::Acquire) & 1 != 0 && self.stand_aside(queue)
    }

    /// [`PortEvents::paused`] when a hand-off is asked: `queue` stands aside in the round asked
    /// (it is outside any burst now, and its last burst happens before the reset), then says
    /// whether a round is still asked. Once it has stood aside it goes on only after seeing the
    /// round over, a state written after the port was set up again.
    #[cold]
    #[inline(never)]
    fn stand_aside(&self, queue: u16) -> bool {
        let p = &self.pause;
        let asked = p.state.load(Ordering::Acquire);
        if asked & 1 == 0 {
            return false;
        }
        if let Some(a) = p.acks.get(usize::from(queue)) {
            a.store(asked >> 1, Ordering::Release);
        }
        p.state.load(Ordering::Acquire) & 1 != 0
    }

    /// The port's link as last reported (for the operator's surfaces).
    pub(crate) fn link_state(&self) -> Arc<LinkState> {
        self.counts.link.clone()
    }

    /// Counts `n` frames a queue standing aside for a reset dropped.
    #[cold]
    pub(crate) fn reset_tx_dropped(&self, n: u64) {
        self.counts.reset_tx_drops.fetch_add(n, Ordering::Relaxed);
    }

    /// Queue `queue` is gone (its handle dropped): it stands aside in every later hand-off, so
    /// a reset does not wait for it.
    pub(crate) fn leave(&self, queue: u16) {
        if let Some(a) = self.pause.acks.get(usize::from(queue)) {
            a.store(GONE, Ordering::Release);
        }
    }

    /// Stand-aside slot `slot` (see [`Pause::acks`]) takes part in later hand-offs: a reset
    /// waits until it has stood aside. Called before the thread owning the slot polls the port.
    pub(crate) fn join(&self, slot: u16) {
        if let Some(a) = self.pause.acks.get(usize::from(slot)) {
            a.store(0, Ordering::Release);
        }
    }

    /// The counters, named as the port's extended statistics.
    pub(crate) fn xstats(&self) -> [(&'static str, u64); 7] {
        let c = &self.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("link_up", u64::from(c.link.is_up())),
            ("link_down_events", c.link.down_events()),
            ("link_up_events", c.link.up_events()),
            ("reset_events", get(&c.reset_events)),
            ("device_resets", get(&c.resets)),
            ("reset_failures", get(&c.reset_failures)),
            ("reset_tx_drops", get(&c.reset_tx_drops)),
        ]
    }

    /// Runs the callback as the PMD would for `event` (tests and [`crate::testkit`]: no vdev
    /// raises a reset).
    pub(crate) fn raise(&self, event: sys::rte_eth_event_type) {
        // SAFETY: the registered argument, alive while `self` is.
        unsafe { on_event(self.port_id, event, self.arg(), std::ptr::null_mut()) };
    }
}

impl Drop for PortEvents {
    fn drop(&mut self) {
        self.unregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::burst::Burst;
    use crate::driver::dpdk::{DpdkPort, DpdkPortConfig, test_eal};
    use crate::port::{Port, Queue};
    use crate::verdict::DropCounts;

    fn xstat(port: &DpdkPort, name: &str) -> u64 {
        let x = port.shared().events.xstats();
        x.iter().find(|(k, _)| *k == name).expect("named").1
    }

    /// A reset the PMD raises (none of the vdevs does, so the test raises it as the PMD would):
    /// the worker's next empty poll resets the port (`net_ring` has no reset operation, so it is
    /// set up again as it is), counts it, and the port carries frames again.
    #[test]
    fn a_reset_event_sets_the_port_up_again() {
        test_eal();
        let mut port = DpdkPort::open(&DpdkPortConfig {
            devargs: format!("net_ring_rst{}", std::process::id() % 10_000),
            rx_desc: 64,
            tx_desc: 64,
            ..DpdkPortConfig::default()
        })
        .expect("net_ring port");
        let mut q = port.take_queues().pop().expect("one queue");
        let mut burst = Burst::with_capacity(32);
        assert_eq!(q.rx_burst(&mut burst), 0, "nothing sent yet");
        assert_eq!(xstat(&port, "device_resets"), 0);
        port.shared()
            .events
            .raise(sys::rte_eth_event_type_RTE_ETH_EVENT_INTR_RESET);
        assert_eq!(xstat(&port, "reset_events"), 1);
        assert_eq!(q.rx_burst(&mut burst), 0);
        assert_eq!(
            xstat(&port, "device_resets"),
            1,
            "recovered on the empty poll"
        );
        assert_eq!(xstat(&port, "reset_failures"), 0);
        // The port set up again carries frames: net_ring loops Tx back to Rx.
        let frame = [0x5au8; 60];
        for _ in 0..4 {
            assert!(q.push_frame(&mut burst, &frame));
        }
        let mut drops = DropCounts::default();
        assert_eq!(q.tx_burst(&mut burst, &mut drops), 4);
        let mut got = 0;
        for _ in 0..100 {
            got += q.rx_burst(&mut burst);
            if got == 4 {
                break;
            }
        }
        assert_eq!(got, 4, "frames loop back after the reset");
        q.free_burst(&mut burst);
        assert_eq!(q.rx_burst(&mut burst), 0);
        assert_eq!(xstat(&port, "device_resets"), 1, "one reset, one recovery");
    }

    /// A `net_ring` port with `queues` queue pairs (each loops its Tx back to its own Rx).
    fn ring_port(tag: &str, queues: u16) -> DpdkPort {
        DpdkPort::open(&DpdkPortConfig {
            devargs: format!("net_ring_{tag}{}", std::process::id() % 10_000),
            rx_desc: 64,
            tx_desc: 64,
            queues,
            ..DpdkPortConfig::default()
        })
        .expect("net_ring port")
    }

    /// Sends `n` frames on `q` and polls until they come back (`net_ring` loops them);
    /// returns how many did.
    fn round_trip(q: &mut Box<dyn Queue>, n: usize) -> usize {
        let mut burst = Burst::with_capacity(32);
        let frame = [0x5au8; 60];
        for _ in 0..n {
            assert!(q.push_frame(&mut burst, &frame));
        }
        let mut drops = DropCounts::default();
        let sent = q.tx_burst(&mut burst, &mut drops);
        q.free_burst(&mut burst);
        let mut got = 0;
        for _ in 0..100 {
            got += q.rx_burst(&mut burst);
            q.free_burst(&mut burst);
            if got >= sent {
                break;
            }
        }
        got
    }

    /// A reset of a port with two queue pairs, its queues polled in turn on one thread: queue
    /// 0's worker asks queue 1 to stand aside and waits (polls, never blocks) until it has;
    /// queue 1 sends nothing meanwhile (its frames are counted drops); then the port is reset
    /// once and both queues carry frames again.
    #[test]
    fn a_reset_of_a_multi_queue_port_waits_for_every_queue() {
        test_eal();
        let mut port = ring_port("mq", 2);
        let mut qs = port.take_queues();
        let mut q1 = qs.pop().expect("queue 1");
        let mut q0 = qs.pop().expect("queue 0");
        assert_eq!(round_trip(&mut q1, 4), 4, "queue 1 carries frames");
        let mut burst = Burst::with_capacity(32);
        port.shared()
            .events
            .raise(sys::rte_eth_event_type_RTE_ETH_EVENT_INTR_RESET);
        assert_eq!(q0.rx_burst(&mut burst), 0);
        assert_eq!(q0.rx_burst(&mut burst), 0);
        assert_eq!(
            xstat(&port, "device_resets"),
            0,
            "not while queue 1 may be in a burst"
        );
        assert_eq!(round_trip(&mut q1, 4), 0, "queue 1 stands aside");
        assert_eq!(xstat(&port, "reset_tx_drops"), 4);
        assert_eq!(q1.stats().tx_full, 4);
        assert_eq!(q0.rx_burst(&mut burst), 0);
        assert_eq!(
            xstat(&port, "device_resets"),
            1,
            "reset once queue 1 stood aside"
        );
        assert_eq!(xstat(&port, "reset_failures"), 0);
        assert_eq!(
            round_trip(&mut q1, 4),
            4,
            "queue 1 carries frames after the reset"
        );
        assert_eq!(round_trip(&mut q0, 4), 4, "queue 0 too");
        assert_eq!(xstat(&port, "device_resets"), 1, "one reset, one recovery");
    }

    /// The same with queue 1 on its own thread, sending and receiving all the time: the reset
    /// happens between its bursts (a reset under a burst would tear the rings down under it),
    /// and its traffic resumes afterwards.
    #[test]
    fn a_reset_hands_off_between_workers() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        test_eal();
        let mut port = ring_port("mt", 2);
        let mut qs = port.take_queues();
        let mut q1 = qs.pop().expect("queue 1");
        let mut q0 = qs.pop().expect("queue 0");
        let done = Arc::new(AtomicBool::new(false));
        let back = Arc::new(AtomicU64::new(0));
        let worker = {
            let (done, back) = (done.clone(), back.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let n = round_trip(&mut q1, 8);
                    back.fetch_add(n as u64, Ordering::Relaxed);
                }
            })
        };
        let wait = |what: &mut dyn FnMut() -> bool| {
            for _ in 0..10_000 {
                if what() {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            false
        };
        assert!(
            wait(&mut || back.load(Ordering::Relaxed) > 0),
            "queue 1 runs"
        );
        port.shared()
            .events
            .raise(sys::rte_eth_event_type_RTE_ETH_EVENT_INTR_RESET);
        let mut burst = Burst::with_capacity(32);
        assert!(
            wait(&mut || {
                q0.rx_burst(&mut burst);
                q0.free_burst(&mut burst);
                xstat(&port, "device_resets") == 1
            }),
            "the reset is done once queue 1 stood aside"
        );
        let after = back.load(Ordering::Relaxed);
        assert!(
            wait(&mut || back.load(Ordering::Relaxed) > after + 64),
            "queue 1 carries frames after the reset"
        );
        done.store(true, Ordering::Relaxed);
        worker.join().expect("queue 1's worker");
        assert_eq!(xstat(&port, "reset_failures"), 0);
        assert_eq!(round_trip(&mut q0, 4), 4, "queue 0 carries frames");
    }

    /// A queue whose handle is gone does not hold a reset up.
    #[test]
    fn a_gone_queue_does_not_hold_a_reset() {
        test_eal();
        let mut port = ring_port("gone", 3);
        let mut qs = port.take_queues();
        qs.truncate(1);
        let mut q0 = qs.pop().expect("queue 0");
        port.shared()
            .events
            .raise(sys::rte_eth_event_type_RTE_ETH_EVENT_INTR_RESET);
        let mut burst = Burst::with_capacity(32);
        assert_eq!(q0.rx_burst(&mut burst), 0, "asks");
        assert_eq!(q0.rx_burst(&mut burst), 0, "finds every other queue gone");
        assert_eq!(xstat(&port, "device_resets"), 1);
        assert_eq!(round_trip(&mut q0, 4), 4);
    }

    /// Link down and up on a `net_tap` port, done from the kernel side with `ip link` (needs
    /// root): the PMD's link-state interrupt updates the status (`net_tap` raises no event; a
    /// PMD that does reaches the callback), the worker's idle polls read it, and both changes
    /// are counted and the link reported.
    #[test]
    fn link_state_changes_are_counted() {
        // SAFETY: a plain libc call without arguments.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: link_state_changes_are_counted needs root (ip link on a tap)");
            return;
        }
        test_eal();
        let iface = format!("nmdplsc{}", std::process::id() % 10_000);
        let port = DpdkPort::open(&DpdkPortConfig {
            devargs: format!("net_tap_lsc{},iface={iface}", std::process::id() % 10_000),
            rx_desc: 64,
            tx_desc: 64,
            ..DpdkPortConfig::default()
        })
        .expect("net_tap port");
        let mut port = port;
        let mut q = port.take_queues().pop().expect("one queue");
        let mut burst = Burst::with_capacity(32);
        let ip = |state: &str| {
            let ok = std::process::Command::new("ip")
                .args(["link", "set", &iface, state])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "ip link set {iface} {state}");
        };
        // The worker's idle polls, which also read the link status.
        let mut wait_for = |name: &str, want: u64| {
            for _ in 0..500 {
                for _ in 0..LINK_READ_EVERY {
                    q.rx_burst(&mut burst);
                    q.free_burst(&mut burst);
                }
                if xstat(&port, name) == want {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            false
        };
        assert!(wait_for("link_up", 1), "the tap's link is up after start");
        ip("down");
        assert!(wait_for("link_down_events", 1), "link down counted");
        assert_eq!(xstat(&port, "link_up"), 0, "reported down");
        ip("up");
        assert!(wait_for("link_up", 1), "reported up again");
        assert_eq!(xstat(&port, "link_down_events"), 1);
        assert!(xstat(&port, "link_up_events") >= 1);
    }
}
