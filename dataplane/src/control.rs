//! A worker's mailbox: how an operator's question or command (the telemetry socket, `dataplane
//! ctl`, the Prometheus scrape) reaches a running worker and its network functions without a
//! lock or an atomic read-modify-write per packet.
//!
//! Why a mailbox and not shared state: the functions' state is per core and is changed only by
//! its worker (shared-nothing), so a change such as draining a load balancer's backend must be
//! made by each worker to its own instance, between two bursts. The asker posts a request in
//! the worker's bounded queue and waits for the reply on a channel of its own; the worker looks
//! at one counter per loop iteration (a relaxed load, [`Mailbox::has_mail`]) and answers every
//! waiting request before its next `rx_burst` ([`Mailbox::serve`]). Asking all workers the same
//! thing ([`ask_all`]) is how a change is applied everywhere; a future request kind (a NAT's
//! outside address added at run time) is one more [`Request`] or one more verb of
//! [`crate::NfCommand`].
//!
//! A worker that has finished closes its mailbox ([`Mailbox::close`]): later requests fail at
//! once with [`AskError::Finished`], and the ones still queued are dropped, which wakes their
//! askers.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;

use crate::nf::{Counters, NfCommand};

/// Requests a mailbox holds at most; an asker finding it full gets [`AskError::Busy`].
pub const MAILBOX_SLOTS: usize = 64;

/// What an asker wants from a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Every function's counters, in chain order.
    Counters,
    /// Each of the worker's queues' extended counters (index = port).
    XStats,
    /// A command to the function at index `nf` of the chain.
    Nf {
        /// The function's index in the chain (the pipeline index).
        nf: usize,
        /// What to do.
        cmd: NfCommand,
    },
}

/// A worker's answer, of the kind the request asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `(name, counters)` per function, in chain order.
    Counters(Vec<(String, Counters)>),
    /// `(name, value)` per extended counter, per queue (index = port).
    XStats(Vec<Vec<(String, u64)>>),
    /// The function's answer ([`crate::NetworkFunction::control`]) or why there is none.
    Nf(Result<Counters, String>),
}

/// Why a request got no reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AskError {
    /// The worker has finished (the run is ending); it answers nothing more.
    Finished,
    /// The mailbox is full ([`MAILBOX_SLOTS`] requests waiting).
    Busy,
    /// No reply within the time allowed (the worker is stuck in a long burst or gone).
    Timeout,
}

impl std::fmt::Display for AskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AskError::Finished => "the worker has finished",
            AskError::Busy => "the worker's mailbox is full; try again",
            AskError::Timeout => "the worker did not answer in time",
        })
    }
}

impl std::error::Error for AskError {}

struct Letter {
    request: Request,
    reply: mpsc::SyncSender<Reply>,
}

/// One worker's mailbox (see the module docs).
pub struct Mailbox {
    queue: ArrayQueue<Letter>,
    pending: AtomicU32,
    closed: AtomicBool,
}

impl Default for Mailbox {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

/// A request posted to one mailbox, whose reply has not been read yet.
pub struct Posted(mpsc::Receiver<Reply>);

impl Posted {
    /// Waits up to `timeout` for the reply.
    pub fn wait(self, timeout: Duration) -> Result<Reply, AskError> {
        match self.0.recv_timeout(timeout) {
            Ok(r) => Ok(r),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(AskError::Timeout),
            // The worker dropped the request unanswered: it has finished.
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(AskError::Finished),
        }
    }
}

impl Mailbox {
    /// An empty, open mailbox.
    pub fn new() -> Self {
        Self {
            queue: ArrayQueue::new(MAILBOX_SLOTS),
            pending: AtomicU32::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// Posts `request`; the reply comes through the returned [`Posted`].
    pub fn post(&self, request: Request) -> Result<Posted, AskError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(AskError::Finished);
        }
        let (tx, rx) = mpsc::sync_channel(1);
        // Counted before it is queued, so the worker never sees a letter it was not told of.
        self.pending.fetch_add(1, Ordering::AcqRel);
        if self.queue.push(Letter { request, reply: tx }).is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            return Err(AskError::Busy);
        }
        Ok(Posted(rx))
    }

    /// Posts `request` and waits up to `timeout` for the reply.
    pub fn ask(&self, request: Request, timeout: Duration) -> Result<Reply, AskError> {
        self.post(request)?.wait(timeout)
    }

    /// True when a request may be waiting: the worker's one check per loop iteration (a
    /// relaxed load).
    #[inline(always)]
    pub fn has_mail(&self) -> bool {
        self.pending.load(Ordering::Relaxed) != 0
    }

    /// Answers every waiting request with `answer` (the worker, between bursts).
    pub fn serve(&self, mut answer: impl FnMut(Request) -> Reply) {
        while let Some(l) = self.queue.pop() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            // An asker that stopped waiting has dropped its receiver; nothing to do then.
            let _ = l.reply.send(answer(l.request));
        }
    }

    /// Closes the mailbox (the worker has finished): later posts fail with
    /// [`AskError::Finished`], and requests still queued are dropped, which tells their askers.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        while self.queue.pop().is_some() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// True once the worker has closed it.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// Asks every mailbox `request` at once and waits up to `timeout` in total for the replies,
/// one per mailbox in order (how a change reaches every worker's instance).
pub fn ask_all<'a>(
    mailboxes: impl IntoIterator<Item = &'a Mailbox>,
    request: &Request,
    timeout: Duration,
) -> Vec<Result<Reply, AskError>> {
    let posted: Vec<Result<Posted, AskError>> = mailboxes
        .into_iter()
        .map(|m| m.post(request.clone()))
        .collect();
    let deadline = std::time::Instant::now() + timeout;
    posted
        .into_iter()
        .map(|p| {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            p?.wait(left)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_answers_between_bursts_and_a_closed_mailbox_refuses() {
        let mb = std::sync::Arc::new(Mailbox::new());
        assert!(!mb.has_mail());
        let worker = {
            let mb = mb.clone();
            std::thread::spawn(move || {
                let mut served = 0;
                while served < 2 {
                    if mb.has_mail() {
                        mb.serve(|r| {
                            served += 1;
                            match r {
                                Request::Nf { nf, cmd } => {
                                    Reply::Nf(Err(format!("{nf} {}", cmd.verb)))
                                }
                                _ => Reply::XStats(vec![]),
                            }
                        });
                    }
                    std::thread::yield_now();
                }
                mb.close();
            })
        };
        let r = mb.ask(
            Request::Nf {
                nf: 3,
                cmd: NfCommand::new("drain", &["10.0.0.1"]),
            },
            Duration::from_secs(30),
        );
        assert_eq!(r, Ok(Reply::Nf(Err("3 drain".into()))));
        let all = ask_all([&*mb], &Request::XStats, Duration::from_secs(30));
        assert_eq!(all, vec![Ok(Reply::XStats(vec![]))]);
        worker.join().unwrap();
        assert!(mb.is_closed() && !mb.has_mail());
        assert_eq!(
            mb.ask(Request::Counters, Duration::from_secs(1)),
            Err(AskError::Finished)
        );
    }

    #[test]
    fn a_full_mailbox_says_busy_and_closing_wakes_the_askers() {
        let mb = Mailbox::new();
        let posted: Vec<Posted> = (0..MAILBOX_SLOTS)
            .map(|_| mb.post(Request::Counters).unwrap())
            .collect();
        assert_eq!(mb.post(Request::Counters).err(), Some(AskError::Busy));
        assert!(mb.has_mail());
        mb.close();
        assert!(!mb.has_mail());
        for p in posted {
            assert_eq!(p.wait(Duration::from_secs(30)), Err(AskError::Finished));
        }
    }
}
