//! Is this instance fit to be announced? Health and instance drain, for the routing daemons
//! that announce an instance's VIPs or NAT pool while it is healthy (docs/scale-out.md).
//!
//! A run is **healthy** when every port is up (a kernel interface behind an AF_PACKET or TAP
//! link administratively up and running, a DPDK port whose link its PMD reports up; other
//! links have no state of their own), every
//! worker is polling (its heartbeat, the uptime it publishes every
//! [`dataplane::runloop::PUBLISH_EVERY`] loop iterations, advanced within
//! `run.health_stall_s`), and no queue is stalled (over a window of `run.health_stall_s`, a
//! queue that dropped received frames for want of room, `rx_missed`/`rx_nombuf`/PCIe
//! overrun, without receiving any, or found its Tx ring full without putting any frame on the
//! wire). It is **draining** from `dataplane ctl drain` until it stops `run.instance_drain_s`
//! later: the announcement goes first, while the existing flows are still served. It is
//! **stopping** once its workers were told to stop. Anything but healthy withdraws the
//! announcement: an agent polling `dataplane ctl health` needs only its exit status.
//!
//! The tracking is fed by the supervision loop's samples of the workers' published counters
//! ([`Health::sample`]), so asking costs the workers nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dataplane::link::kernel::{KernelLinkSpec, interface_state};
use dataplane::port::LinkState;
use dataplane::runloop::{LiveSnapshot, WorkerState};

/// What the run says it is ([`Report::status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Announce it.
    Healthy,
    /// `dataplane ctl drain`: serving until it stops, not to be announced.
    Draining,
    /// A port down, a worker not polling or a queue stalled ([`Report::reasons`]).
    Unhealthy,
    /// The workers were told to stop.
    Stopping,
}

impl Status {
    /// Its name (`healthy`, `draining`, `unhealthy`, `stopping`).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Healthy => "healthy",
            Status::Draining => "draining",
            Status::Unhealthy => "unhealthy",
            Status::Stopping => "stopping",
        }
    }
}

/// A drain in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drain {
    /// When `drain` was asked.
    pub started: Instant,
    /// When the run stops.
    pub deadline: Instant,
}

/// A port's link as the health check sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortHealth {
    /// `up`, `down`, `no carrier`, `not checked` (a link without a state), or why it could
    /// not be read.
    pub link: String,
    /// False when the port makes the run unhealthy.
    pub ok: bool,
}

/// The answer to `/nmdp/health`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The verdict.
    pub status: Status,
    /// Why the run is not healthy (empty when it is).
    pub reasons: Vec<String>,
    /// Per port.
    pub ports: Vec<PortHealth>,
    /// Per worker: milliseconds since its heartbeat last advanced.
    pub heartbeat_age_ms: Vec<u64>,
    /// Milliseconds until a drain stops the run.
    pub drain_remaining_ms: Option<u64>,
}

/// A queue's counters at the start of its current window, and the verdict of the last one.
#[derive(Clone, Debug)]
struct QueueWindow {
    start: Instant,
    rx: u64,
    rx_dropped: u64,
    tx: u64,
    tx_full: u64,
    rx_stalled: bool,
    tx_stalled: bool,
}

#[derive(Debug)]
struct Tracker {
    /// Per worker: the last uptime it published and when that changed.
    beats: Vec<(u64, Instant)>,
    /// Per worker, per port.
    queues: Vec<Vec<QueueWindow>>,
}

/// Health and drain of one run (see the module docs).
#[derive(Debug)]
pub struct Health {
    stall: Duration,
    drain_for: Duration,
    tracker: Mutex<Tracker>,
    drain: Mutex<Option<Drain>>,
}

impl Health {
    /// For `workers` workers with a queue on each of `ports` ports, started at `now`: unhealthy
    /// after `stall` without progress, draining for `drain_for` by default.
    pub fn new(
        workers: usize,
        ports: usize,
        stall: Duration,
        drain_for: Duration,
        now: Instant,
    ) -> Self {
        let window = QueueWindow {
            start: now,
            rx: 0,
            rx_dropped: 0,
            tx: 0,
            tx_full: 0,
            rx_stalled: false,
            tx_stalled: false,
        };
        Self {
            stall,
            drain_for,
            tracker: Mutex::new(Tracker {
                beats: vec![(0, now); workers],
                queues: vec![vec![window; ports]; workers],
            }),
            drain: Mutex::new(None),
        }
    }

    /// Takes in the workers' latest publications, seen at `now`.
    pub fn sample(&self, snaps: &[LiveSnapshot], now: Instant) {
        let mut t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let Tracker { beats, queues } = &mut *t;
        for ((s, beat), qs) in snaps.iter().zip(beats.iter_mut()).zip(queues.iter_mut()) {
            if s.uptime_ns != beat.0 {
                *beat = (s.uptime_ns, now);
            }
            for (q, w) in s.ports.iter().zip(qs.iter_mut()) {
                if now.saturating_duration_since(w.start) < self.stall {
                    continue;
                }
                let rx_dropped = q.rx_missed + q.rx_nombuf + q.rx_pcie_overrun;
                w.rx_stalled = rx_dropped > w.rx_dropped && q.rx_packets == w.rx;
                w.tx_stalled = q.tx_full > w.tx_full && q.wire_tx_frames == w.tx;
                w.start = now;
                w.rx = q.rx_packets;
                w.rx_dropped = rx_dropped;
                w.tx = q.wire_tx_frames;
                w.tx_full = q.tx_full;
            }
        }
    }

    /// Starts a drain at `now` that stops the run after `after` (default `run.instance_drain_s`);
    /// a drain already under way keeps its start and ends at the earlier of the two deadlines.
    pub fn start_drain(&self, now: Instant, after: Option<Duration>) -> Drain {
        let deadline = now + after.unwrap_or(self.drain_for);
        let mut d = self.drain.lock().unwrap_or_else(|e| e.into_inner());
        let drain = match *d {
            Some(old) => Drain {
                started: old.started,
                deadline: old.deadline.min(deadline),
            },
            None => Drain {
                started: now,
                deadline,
            },
        };
        *d = Some(drain);
        drain
    }

    /// The drain under way, if one is.
    pub fn drain(&self) -> Option<Drain> {
        *self.drain.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The verdict at `now` from the workers' latest publications `snaps` and the ports'
    /// links: the kernel interfaces behind them (`links`) and the links their drivers report
    /// (`reported`; `None` in either: nothing of that kind).
    pub fn report(
        &self,
        snaps: &[LiveSnapshot],
        links: &[Option<KernelLinkSpec>],
        reported: &[Option<Arc<LinkState>>],
        port_names: &[String],
        now: Instant,
    ) -> Report {
        self.sample(snaps, now);
        let mut reasons = Vec::new();
        let ports: Vec<PortHealth> = (0..port_names.len())
            .map(|p| {
                let h = match reported.get(p).and_then(Option::as_ref) {
                    Some(l) => reported_health(l),
                    None => port_health(links.get(p).and_then(Option::as_ref)),
                };
                if !h.ok {
                    reasons.push(format!("port {p} ({}): {}", port_names[p], h.link));
                }
                h
            })
            .collect();
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let heartbeat_age_ms: Vec<u64> = t
            .beats
            .iter()
            .map(|(_, at)| now.saturating_duration_since(*at).as_millis() as u64)
            .collect();
        let stopping = snaps
            .iter()
            .any(|s| matches!(s.state, WorkerState::Draining | WorkerState::Finished));
        for (w, (s, age)) in snaps.iter().zip(&heartbeat_age_ms).enumerate() {
            if !stopping && *age >= self.stall.as_millis() as u64 {
                reasons.push(format!(
                    "worker {w}: not polling (no heartbeat for {age} ms, state {})",
                    s.state.as_str()
                ));
            }
        }
        for (w, qs) in t.queues.iter().enumerate() {
            for (p, q) in qs.iter().enumerate() {
                let name = port_names.get(p).map_or("?", String::as_str);
                if q.rx_stalled {
                    reasons.push(format!(
                        "port {p} ({name}) queue {w}: Rx stalled (dropping frames, receiving \
                         none, for {} ms)",
                        self.stall.as_millis()
                    ));
                }
                if q.tx_stalled {
                    reasons.push(format!(
                        "port {p} ({name}) queue {w}: Tx stalled (ring full, nothing sent, for \
                         {} ms)",
                        self.stall.as_millis()
                    ));
                }
            }
        }
        let drain = self.drain();
        let status = if stopping {
            Status::Stopping
        } else if drain.is_some() {
            Status::Draining
        } else if !reasons.is_empty() {
            Status::Unhealthy
        } else {
            Status::Healthy
        };
        if stopping {
            reasons.push("the run is stopping".into());
        }
        if let Some(d) = drain {
            reasons.push(format!(
                "dataplane ctl drain: the run stops in {:.1} s",
                d.deadline.saturating_duration_since(now).as_secs_f64()
            ));
        }
        Report {
            status,
            reasons,
            ports,
            heartbeat_age_ms,
            drain_remaining_ms: drain
                .map(|d| d.deadline.saturating_duration_since(now).as_millis() as u64),
        }
    }
}

/// The health of a port whose driver reports its link (DPDK: as its PMD last reported it).
fn reported_health(link: &LinkState) -> PortHealth {
    PortHealth {
        link: if link.is_up() { "up" } else { "down" }.into(),
        ok: link.is_up(),
    }
}

/// The health of a port on `link` (`None`: no kernel interface behind it).
fn port_health(link: Option<&KernelLinkSpec>) -> PortHealth {
    let Some(spec) = link else {
        return PortHealth {
            link: "not checked".into(),
            ok: true,
        };
    };
    match (spec, interface_state(spec.interface())) {
        (_, Ok(s)) if s.up && s.running => PortHealth {
            link: "up".into(),
            ok: true,
        },
        (_, Ok(s)) if s.up => PortHealth {
            link: "no carrier".into(),
            ok: false,
        },
        (_, Ok(_)) => PortHealth {
            link: "down".into(),
            ok: false,
        },
        // A TAP device's other end may live in another namespace (the demo's and tests'
        // hosts take theirs): nmdp still holds the device, but cannot see its state here.
        (KernelLinkSpec::Tap(_), Err(_)) => PortHealth {
            link: "not checked (TAP device in another namespace)".into(),
            ok: true,
        },
        (KernelLinkSpec::AfPacket(_), Err(e)) => PortHealth {
            link: format!("gone ({e})"),
            ok: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::{DropCounts, QueueStats};

    fn snap(uptime_ns: u64, q: QueueStats, state: WorkerState) -> LiveSnapshot {
        LiveSnapshot {
            ports: vec![q],
            drops: DropCounts::default(),
            busy_ns: 0,
            uptime_ns,
            bursts: 0,
            idle_polls: 0,
            state,
        }
    }

    const STALL: Duration = Duration::from_secs(2);

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn a_worker_whose_heartbeat_stands_still_is_unhealthy() {
        let t0 = Instant::now();
        let h = Health::new(2, 1, STALL, Duration::from_secs(30), t0);
        let names = ["vnic0".to_string()];
        let q = QueueStats::default();
        let beat = |a, b| {
            [
                snap(a, q, WorkerState::Running),
                snap(b, q, WorkerState::Running),
            ]
        };
        h.sample(&beat(1, 1), ms(t0, 10));
        let r = h.report(&beat(2, 1), &[None], &[], &names, ms(t0, 1500));
        assert_eq!(r.status, Status::Healthy, "{r:?}");
        assert_eq!(r.heartbeat_age_ms, vec![0, 1490]);
        // Worker 0 goes on beating; worker 1 has not for 2 s.
        let r = h.report(&beat(3, 1), &[None], &[], &names, ms(t0, 2010));
        assert_eq!(r.status, Status::Unhealthy);
        assert_eq!(r.reasons.len(), 1, "{r:?}");
        assert!(r.reasons[0].starts_with("worker 1: not polling"), "{r:?}");
        // It beats again: healthy.
        let r = h.report(&beat(4, 2), &[None], &[], &names, ms(t0, 2020));
        assert_eq!(r.status, Status::Healthy, "{r:?}");
    }

    #[test]
    fn a_queue_that_drops_without_receiving_for_a_window_is_stalled() {
        let t0 = Instant::now();
        let h = Health::new(1, 1, STALL, Duration::from_secs(30), t0);
        let names = ["afpacket:x".to_string()];
        let q = |rx, missed, wire, full| QueueStats {
            rx_packets: rx,
            rx_missed: missed,
            wire_tx_frames: wire,
            tx_full: full,
            ..QueueStats::default()
        };
        let at = |up, s| [snap(up, s, WorkerState::Running)];
        // First window: receiving and dropping some (busy, not stalled).
        h.sample(&at(1, q(100, 5, 100, 0)), ms(t0, 2000));
        assert_eq!(
            h.report(
                &at(2, q(100, 5, 100, 0)),
                &[None],
                &[],
                &names,
                ms(t0, 2100)
            )
            .status,
            Status::Healthy
        );
        // Second window: drops rise, nothing received: stalled Rx.
        let r = h.report(
            &at(3, q(100, 900, 100, 0)),
            &[None],
            &[],
            &names,
            ms(t0, 4000),
        );
        assert_eq!(r.status, Status::Unhealthy);
        assert!(r.reasons[0].contains("queue 0: Rx stalled"), "{r:?}");
        // Third: receiving again, and the Tx ring full while nothing leaves: stalled Tx.
        let r = h.report(
            &at(4, q(500, 900, 100, 7)),
            &[None],
            &[],
            &names,
            ms(t0, 6000),
        );
        assert_eq!(r.status, Status::Unhealthy);
        assert_eq!(r.reasons.len(), 1, "{r:?}");
        assert!(r.reasons[0].contains("Tx stalled"), "{r:?}");
        // An idle queue (nothing dropped, nothing received) is not stalled.
        let r = h.report(
            &at(5, q(500, 900, 100, 7)),
            &[None],
            &[],
            &names,
            ms(t0, 8000),
        );
        assert_eq!(r.status, Status::Healthy, "{r:?}");
    }

    #[test]
    fn drain_comes_before_unhealthy_and_stopping_before_both() {
        let t0 = Instant::now();
        let h = Health::new(1, 1, STALL, Duration::from_secs(30), t0);
        let names = ["afpacket:nmdp-none0".to_string()];
        let gone = [Some(KernelLinkSpec::AfPacket("nmdp-none0".into()))];
        let run = [snap(1, QueueStats::default(), WorkerState::Running)];
        let r = h.report(&run, &gone, &[], &names, ms(t0, 10));
        assert_eq!(r.status, Status::Unhealthy);
        assert!(
            r.reasons[0].starts_with("port 0 (afpacket:nmdp-none0): gone"),
            "{r:?}"
        );
        let d = h.start_drain(ms(t0, 100), None);
        assert_eq!(d.deadline, ms(t0, 30_100));
        // A second drain keeps the start and takes the earlier deadline.
        let d2 = h.start_drain(ms(t0, 200), Some(Duration::from_secs(5)));
        assert_eq!((d2.started, d2.deadline), (ms(t0, 100), ms(t0, 5200)));
        let r = h.report(&run, &gone, &[], &names, ms(t0, 1200));
        assert_eq!(r.status, Status::Draining);
        assert_eq!(r.drain_remaining_ms, Some(4000));
        let stopping = [snap(2, QueueStats::default(), WorkerState::Draining)];
        let r = h.report(&stopping, &[None], &[], &names, ms(t0, 1300));
        assert_eq!(r.status, Status::Stopping);
    }

    #[test]
    fn a_port_whose_driver_reports_its_link_down_is_unhealthy() {
        let t0 = Instant::now();
        let h = Health::new(1, 1, STALL, Duration::from_secs(30), t0);
        let names = ["net_null0".to_string()];
        let link = Arc::new(LinkState::new(true));
        let run = [snap(1, QueueStats::default(), WorkerState::Running)];
        let r = h.report(&run, &[None], &[Some(link.clone())], &names, ms(t0, 10));
        assert_eq!(r.status, Status::Healthy, "{r:?}");
        assert_eq!(r.ports[0].link, "up");
        link.report(false);
        let r = h.report(&run, &[None], &[Some(link.clone())], &names, ms(t0, 20));
        assert_eq!(r.status, Status::Unhealthy);
        assert_eq!(r.reasons, vec!["port 0 (net_null0): down".to_string()]);
        link.report(true);
        let r = h.report(&run, &[None], &[Some(link)], &names, ms(t0, 30));
        assert_eq!(r.status, Status::Healthy, "{r:?}");
    }
}
