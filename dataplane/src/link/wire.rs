//! The wire on its own thread: a port's traffic source and sink run on a tester thread of
//! their own (the "wire" core of a hardware tester such as TRex), not inside the worker that
//! polls the port.
//!
//! Without it a single-queue port reads its link in the worker's thread: generating and checking
//! every frame costs the worker as much as forwarding it, so a run measures the generator as
//! much as the dataplane, and a wall-clock trial is generator-limited long before the dataplane
//! is. With it the tester thread fills batches of frames from the source ahead of the port and
//! hands the port's transmitted frames to the sink, and the port sees a [`WireRx`] and a
//! [`WireTx`]: one more [`FrameSource`] and [`FrameSink`], so the driver is the same.
//!
//! The two directions are single-producer single-consumer queues of preallocated batches of up to
//! [`WIRE_BATCH`] frames, laid out as [`FrameSource::next_batch`] lays them out (frame `i + 1`
//! at [`batch_step`] of frame `i`). Each direction keeps two bounded queues, full batches and free
//! ones (`crossbeam_queue::ArrayQueue` of boxed batches made once): a batch changes hands with one
//! push and one pop, never a lock, an allocation or an atomic per frame. The port copies frames
//! out of a batch into its receive staging (the NIC's DMA) and into a batch when it transmits.
//!
//! Nothing is lost silently in either direction. Frames the tester generated wait in the queue
//! until the port takes them; a full queue makes the tester wait, not drop. What the port cannot
//! place is counted by the port itself, as a NIC counts it: with an offered rate, frames whose
//! paced arrival finds no descriptor are `rx_missed`. Frames the port transmitted wait for
//! room when the tester is behind.
//!
//! On the wall clock the tester offers its first frame only once the port has looked for one:
//! the worker polls the port some time after the port was made, and frames due before that
//! would meet a port nobody serves yet (a start-up artefact, not the dataplane's loss). A hardware
//! tester likewise starts a trial once the device is up. The port's first look finds the wire
//! idle, which is where a paced port starts its offered load.
//!
//! On the virtual clock a [`WireRx`] made with `wait` never answers "no frame right now": it
//! waits for the tester's next batch or its end, so the port sees exactly the frames, in exactly
//! the order, it would see reading the source itself, and every arrival time is the same.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use super::{FrameSink, FrameSource, Link, MAX_WIRE_FRAME, batch_step};

/// Frames per batch handed between the tester thread and the port.
pub const WIRE_BATCH: usize = 64;

/// Bytes of batch buffers per direction the queues aim at (fewer batches for large frames).
const WIRE_BYTES: usize = 32 << 20;

/// Batches per direction: at least this many whatever the frame size.
const MIN_BATCHES: usize = 16;

/// Batches per direction: at most this many (16384 frames ahead of the port).
const MAX_BATCHES: usize = 256;

/// One batch of frames: the bytes back to back and their lengths.
struct Batch {
    buf: Box<[u8]>,
    lens: [u32; WIRE_BATCH],
    /// Frames in the batch.
    n: usize,
    /// Consumer side: frames taken so far, and the byte offset of the next one.
    read: usize,
    off: usize,
}

impl Batch {
    fn new(bytes: usize) -> Box<Self> {
        Box::new(Self {
            buf: vec![0u8; bytes].into_boxed_slice(),
            lens: [0; WIRE_BATCH],
            n: 0,
            read: 0,
            off: 0,
        })
    }

    fn clear(&mut self) {
        self.n = 0;
        self.read = 0;
        self.off = 0;
    }
}

/// One direction: full batches from the producer, free ones back from the consumer.
struct Direction {
    full: ArrayQueue<Box<Batch>>,
    free: ArrayQueue<Box<Batch>>,
    /// The producer is finished: no batch will follow those in `full`.
    closed: AtomicBool,
    /// The consumer has looked for a batch (the receive direction's start, see the module
    /// docs).
    started: AtomicBool,
}

impl Direction {
    fn new(batches: usize, bytes: usize) -> Self {
        let free = ArrayQueue::new(batches);
        for _ in 0..batches {
            let _ = free.push(Batch::new(bytes));
        }
        Self {
            full: ArrayQueue::new(batches),
            free,
            closed: AtomicBool::new(false),
            started: AtomicBool::new(false),
        }
    }

    /// True once the producer closed and every batch it sent was taken.
    fn finished(&self) -> bool {
        // `closed` first: once it reads true every push happened before, so an empty queue is
        // empty for good.
        self.closed.load(Ordering::Acquire) && self.full.is_empty()
    }

    /// Gives a batch back to the producer.
    fn recycle(&self, mut b: Box<Batch>) {
        b.clear();
        // Cannot fail: every batch came from `free`, which has room for all of them.
        let _ = self.free.push(b);
    }
}

/// How long a side that found nothing to do spins before it yields its core.
const SPINS_BEFORE_YIELD: u32 = 64;

/// Waits a little: a few spins, then a yield (two cores shared by several threads must not be
/// held by a thread that has nothing to do).
fn backoff(idle: &mut u32) {
    *idle += 1;
    if *idle < SPINS_BEFORE_YIELD {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// The counters of a tester thread, readable while it runs. The tester's counters and the
/// port's lie in cache lines of their own: each side writes its own once per batch, and a line
/// both wrote would move between their cores every time (false sharing costs the worker time
/// that no instruction count shows).
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct WireCounters {
    /// Frames the tester put into the port's receive queue.
    pub rx_frames: AtomicU64,
    /// Frames the tester took from the port's transmit queue to the sink.
    pub tx_frames: AtomicU64,
    /// Times the tester found the port's receive queue full (it waits; nothing is dropped).
    pub rx_full: AtomicU64,
    /// CPU time of the tester thread in ns (`CLOCK_THREAD_CPUTIME_ID`), set when it ends.
    pub cpu_ns: AtomicU64,
    /// Keeps the port's counters below off the tester's cache line.
    _tester_line: [u64; 4],
    /// Times the port found the transmit queue full (it waits; nothing is dropped).
    pub tx_full: AtomicU64,
    /// Times the port found no frame waiting (a tester behind the port; wall clock only).
    pub rx_empty: AtomicU64,
    /// Times the port, once frames were flowing, found no frame waiting and a frame came later:
    /// each time the tester left the port short of a frame it was due to offer (looks before the
    /// first frame only move where a paced load starts). Zero means a paced port got every
    /// frame at its paced time: the offered load was offered exactly.
    pub rx_starved: AtomicU64,
    /// Wall clock: looks of the port at the wire (timed when it takes a batch or finds none)
    /// more than `look_gap_limit_ns` apart while frames flowed. The port looks whenever its
    /// worker polls it, so a long gap is a worker off its core (descheduled on a shared
    /// machine); set the limit to the time the Rx ring lasts at the offered load and each such
    /// gap is a time the ring could overflow (`rx_missed`) through no fault of the dataplane.
    pub look_gaps: AtomicU64,
    /// The longest of those gaps, ns (timed per batch of [`WIRE_BATCH`] frames, so it includes
    /// up to one batch's worth of frame times).
    pub look_gap_max_ns: AtomicU64,
    /// The gap counted in `look_gaps`, ns (0: none counted; set before the port is polled).
    pub look_gap_limit_ns: AtomicU64,
}

const _: () = assert!(std::mem::offset_of!(WireCounters, tx_full) == 64);

impl WireCounters {
    /// The counters by name, for a run summary.
    pub fn snapshot(&self) -> [(&'static str, u64); 10] {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("rx_frames", g(&self.rx_frames)),
            ("tx_frames", g(&self.tx_frames)),
            ("rx_full", g(&self.rx_full)),
            ("tx_full", g(&self.tx_full)),
            ("rx_empty", g(&self.rx_empty)),
            ("rx_starved", g(&self.rx_starved)),
            ("cpu_ns", g(&self.cpu_ns)),
            ("look_gaps", g(&self.look_gaps)),
            ("look_gap_max_ns", g(&self.look_gap_max_ns)),
            ("look_gap_limit_ns", g(&self.look_gap_limit_ns)),
        ]
    }
}

/// The port's receive side of a tester thread: a [`FrameSource`] taking the tester's batches.
pub struct WireRx {
    dir: Arc<Direction>,
    cur: Option<Box<Batch>>,
    wait: bool,
    /// This side has looked for a frame (and said so to the tester).
    started: bool,
    /// Frames have begun to flow: the tester's first batch arrived.
    flowing: bool,
    /// A look since then found no frame (see [`WireCounters::rx_starved`]).
    short: bool,
    /// When the port last looked for a batch (wall clock; see [`WireCounters::look_gaps`]).
    last_look: Option<Instant>,
    counters: Arc<WireCounters>,
}

impl WireRx {
    /// The batch frames come from now, taking the next one from the tester if needed; `None`
    /// when there is none (now, or with `wait` for good).
    #[inline]
    fn current(&mut self) -> Option<&mut Batch> {
        if !self.started {
            self.started = true;
            self.dir.started.store(true, Ordering::Release);
        }
        if self.cur.is_none() {
            if !self.wait {
                self.time_look();
            }
            let mut idle = 0;
            self.cur = loop {
                if let Some(b) = self.dir.full.pop() {
                    if std::mem::take(&mut self.short) {
                        self.counters.rx_starved.fetch_add(1, Ordering::Relaxed);
                    }
                    self.flowing = true;
                    break Some(b);
                }
                if self.dir.finished() {
                    break None;
                }
                if !self.wait {
                    self.counters.rx_empty.fetch_add(1, Ordering::Relaxed);
                    self.short |= self.flowing;
                    break None;
                }
                backoff(&mut idle);
            };
        }
        self.cur.as_deref_mut()
    }

    /// Times this look against the last one while frames flow (see
    /// [`WireCounters::look_gaps`]): one clock read per batch or empty look.
    #[inline]
    fn time_look(&mut self) {
        let now = Instant::now();
        if self.flowing
            && let Some(prev) = self.last_look
        {
            let gap = now.duration_since(prev).as_nanos() as u64;
            let c = &self.counters;
            // Only this side writes the gap counters. Whether the wire has finished (its queue
            // indices, which the tester writes) is read only for a gap that counts.
            let limit = c.look_gap_limit_ns.load(Ordering::Relaxed);
            let longest = gap > c.look_gap_max_ns.load(Ordering::Relaxed);
            let counts = limit > 0 && gap > limit;
            if (longest || counts) && !self.dir.finished() {
                if longest {
                    c.look_gap_max_ns.store(gap, Ordering::Relaxed);
                }
                if counts {
                    c.look_gaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.last_look = Some(now);
    }

    /// Gives the current batch back once every frame of it was taken.
    #[inline]
    fn release_if_done(&mut self) {
        if self.cur.as_ref().is_some_and(|b| b.read == b.n)
            && let Some(b) = self.cur.take()
        {
            self.dir.recycle(b);
        }
    }
}

impl FrameSource for WireRx {
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        let b = self.current()?;
        let len = b.lens[b.read] as usize;
        let n = len.min(buf.len());
        buf[..n].copy_from_slice(&b.buf[b.off..b.off + n]);
        b.off += batch_step(len);
        b.read += 1;
        self.release_if_done();
        Some(n)
    }

    fn next_batch(&mut self, buf: &mut [u8], lens: &mut [u32]) -> usize {
        let (mut off, mut got) = (0, 0);
        while got < lens.len() && buf.len().saturating_sub(off) >= MAX_WIRE_FRAME {
            // Waiting (virtual clock), the burst fills as reading the source would fill it;
            // otherwise it takes what is there.
            let Some(b) = self.current() else {
                break;
            };
            // The frames of the batch that fit, copied in one piece: both sides lay frames out
            // at the same steps.
            let (first, start) = (b.read, b.off);
            let mut span = 0;
            while b.read < b.n && got < lens.len() {
                let room = buf.len().saturating_sub(off + span);
                let len = b.lens[b.read];
                if room < MAX_WIRE_FRAME || len as usize > room {
                    break;
                }
                lens[got] = len;
                got += 1;
                span += batch_step(len as usize);
                b.read += 1;
            }
            if span == 0 {
                // The next frame is longer than the room left (a source writes frames up to
                // the room it is given, e.g. an oversized pcap record): a burst with frames ends
                // here; an empty one takes it cut to the room, as a source would cut it.
                if got > 0 {
                    break;
                }
                let len = b.lens[b.read] as usize;
                let n = len.min(buf.len() - off);
                buf[off..off + n].copy_from_slice(&b.buf[b.off..b.off + n]);
                lens[got] = n as u32;
                got += 1;
                b.off += batch_step(len);
                b.read += 1;
                off += batch_step(n);
                self.release_if_done();
                continue;
            }
            let last = b.lens[b.read - 1] as usize;
            // The last frame's padding need not be copied (nor exist in `buf`).
            let bytes = span - batch_step(last) + last;
            buf[off..off + bytes].copy_from_slice(&b.buf[start..start + bytes]);
            b.off += span;
            debug_assert!(b.read > first);
            off += span;
            self.release_if_done();
            if self.cur.is_none() && !self.wait && self.dir.full.is_empty() {
                break;
            }
        }
        got
    }

    fn exhausted(&self) -> bool {
        self.cur.is_none() && self.dir.finished()
    }
}

/// The port's transmit side of a tester thread: a [`FrameSink`] filling batches for it.
pub struct WireTx {
    dir: Arc<Direction>,
    cur: Option<Box<Batch>>,
    counters: Arc<WireCounters>,
}

impl WireTx {
    /// A batch with room for a frame, waiting for the tester to free one if none is.
    fn batch_with_room(&mut self) -> &mut Batch {
        let mut idle = 0;
        loop {
            if let Some(b) = self.dir.free.pop() {
                break self.cur.insert(b);
            }
            if idle == 0 {
                self.counters.tx_full.fetch_add(1, Ordering::Relaxed);
            }
            backoff(&mut idle);
        }
    }

    /// Hands the batch being filled to the tester.
    fn flush(&mut self) {
        if let Some(b) = self.cur.take() {
            if b.n == 0 {
                self.dir.recycle(b);
            } else {
                // Cannot fail: the full queue has room for every batch there is.
                let _ = self.dir.full.push(b);
            }
        }
    }
}

impl FrameSink for WireTx {
    fn deliver(&mut self, frame: &[u8]) {
        self.deliver_batch(frame, &[frame.len() as u32]);
    }

    fn deliver_batch(&mut self, buf: &[u8], lens: &[u32]) {
        let (mut i, mut off) = (0, 0);
        while i < lens.len() {
            let b = match self.cur.take() {
                Some(b) => self.cur.insert(b),
                None => self.batch_with_room(),
            };
            // The frames that fit this batch, copied in one piece.
            let (first, start) = (i, b.off);
            let mut span = 0;
            // A batch holds a frame of MAX_WIRE_FRAME bytes, so an empty one takes any frame.
            while i < lens.len()
                && b.n < WIRE_BATCH
                && (b.n == 0 || b.off + span + lens[i] as usize <= b.buf.len())
            {
                b.lens[b.n] = lens[i];
                b.n += 1;
                span += batch_step(lens[i] as usize);
                i += 1;
            }
            if i == first {
                // Full: hand it over and take a new one.
                self.flush();
                continue;
            }
            let last = lens[i - 1] as usize;
            let bytes = (span - batch_step(last) + last)
                .min(buf.len() - off)
                .min(b.buf.len() - start);
            b.buf[start..start + bytes].copy_from_slice(&buf[off..off + bytes]);
            b.off += span;
            off += span;
        }
        // One hand-over per call (a doorbell's frames): the tester sees them at once.
        self.flush();
    }

    fn finish(&mut self) {
        self.flush();
        self.dir.closed.store(true, Ordering::Release);
    }
}

impl Drop for WireTx {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A running tester thread (see the module docs); [`WireThread::join`] waits for its end.
pub struct WireThread {
    handle: Option<JoinHandle<()>>,
    counters: Arc<WireCounters>,
    stop: Arc<AtomicBool>,
}

impl WireThread {
    /// Its counters.
    pub fn counters(&self) -> Arc<WireCounters> {
        self.counters.clone()
    }

    /// Waits until the tester thread has given the port every frame of its source and the sink
    /// every frame the port transmitted (the port's queues must be gone or finished by then, or
    /// this waits for them), and the sink finished.
    pub fn join(mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for WireThread {
    fn drop(&mut self) {
        // Not joined (a run that failed): the thread stops without waiting for the port.
        if let Some(h) = self.handle.take() {
            self.stop.store(true, Ordering::Release);
            let _ = h.join();
        }
    }
}

/// Batches per direction for frames of up to `max_frame` bytes (see [`WIRE_BYTES`]), and the
/// bytes of each: [`WIRE_BATCH`] frames plus room for one of [`MAX_WIRE_FRAME`] bytes, which
/// [`FrameSource::next_batch`] asks before each frame.
fn sizes(max_frame: usize) -> (usize, usize) {
    let bytes = WIRE_BATCH * batch_step(max_frame.clamp(64, MAX_WIRE_FRAME)) + MAX_WIRE_FRAME;
    ((WIRE_BYTES / bytes).clamp(MIN_BATCHES, MAX_BATCHES), bytes)
}

/// Puts `link` on a tester thread named `<name>-tester` and returns the link the port uses in
/// its place, and the thread. `max_frame` (the port's largest frame) sizes the batches; with
/// `wait` the port's receive side waits for frames instead of seeing an idle wire (the virtual
/// clock, see the module docs).
pub fn spawn(
    name: &str,
    link: Link,
    max_frame: usize,
    wait: bool,
) -> std::io::Result<(Link, WireThread)> {
    let (batches, bytes) = sizes(max_frame);
    let rx = Arc::new(Direction::new(batches, bytes));
    let tx = Arc::new(Direction::new(batches, bytes));
    let counters = Arc::new(WireCounters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let (rx, tx, counters, stop) = (rx.clone(), tx.clone(), counters.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("{name}-tester"))
            .spawn(move || tester(link, &rx, &tx, &counters, &stop, !wait))?
    };
    let port_link = Link {
        rx: Box::new(WireRx {
            dir: rx,
            cur: None,
            wait,
            started: false,
            flowing: false,
            short: false,
            last_look: None,
            counters: counters.clone(),
        }),
        tx: Box::new(WireTx {
            dir: tx,
            cur: None,
            counters: counters.clone(),
        }),
    };
    Ok((
        port_link,
        WireThread {
            handle: Some(handle),
            counters,
            stop,
        },
    ))
}

/// How long the tester sleeps after a long idle (the port has not polled yet, or it is done).
const IDLE_SLEEP: Duration = Duration::from_micros(20);

/// Batches the tester fills in a row before it looks at the transmit side.
const FILL_PER_ROUND: usize = 8;

/// The tester thread: fills free receive batches from the source (with `wait_for_port`, once the
/// port has looked for a frame) and hands transmitted batches to the sink, until the source is
/// exhausted and the port's transmit side finished (or `stop`).
fn tester(
    mut link: Link,
    rx: &Direction,
    tx: &Direction,
    counters: &WireCounters,
    stop: &AtomicBool,
    wait_for_port: bool,
) {
    let start_cpu = crate::unix::thread_cpu_time();
    let mut idle = 0;
    loop {
        let mut worked = false;
        let offering = !wait_for_port || rx.started.load(Ordering::Acquire);
        if offering && !rx.closed.load(Ordering::Relaxed) {
            for _ in 0..FILL_PER_ROUND {
                let Some(mut b) = rx.free.pop() else {
                    counters.rx_full.fetch_add(1, Ordering::Relaxed);
                    break;
                };
                b.n = link.rx.next_batch(&mut b.buf, &mut b.lens);
                if b.n == 0 {
                    rx.recycle(b);
                    if link.rx.exhausted() {
                        rx.closed.store(true, Ordering::Release);
                    }
                    break;
                }
                counters.rx_frames.fetch_add(b.n as u64, Ordering::Relaxed);
                // Cannot fail: the full queue has room for every batch there is.
                let _ = rx.full.push(b);
                worked = true;
            }
        }
        while let Some(b) = tx.full.pop() {
            link.tx.deliver_batch(&b.buf, &b.lens[..b.n]);
            counters.tx_frames.fetch_add(b.n as u64, Ordering::Relaxed);
            tx.recycle(b);
            worked = true;
        }
        if (rx.closed.load(Ordering::Relaxed) && tx.finished()) || stop.load(Ordering::Acquire) {
            break;
        }
        if worked {
            idle = 0;
        } else {
            backoff(&mut idle);
            if idle > 4 * SPINS_BEFORE_YIELD {
                // Long idle (the port has not polled yet): sleep briefly rather than yield in a
                // loop.
                std::thread::sleep(IDLE_SLEEP);
            }
        }
    }
    link.tx.finish();
    let cpu = crate::unix::thread_cpu_time().saturating_sub(start_cpu);
    counters
        .cpu_ns
        .store(cpu.as_nanos() as u64, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{CollectSink, RepeatSource, VecSource};

    fn frames(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let len = 60 + (i * 37) % 1400;
                (0..len).map(|j| (i * 7 + j) as u8).collect()
            })
            .collect()
    }

    /// Every frame the source sends reaches the port intact and in order, through both
    /// `next_frame` and `next_batch`, in both waiting modes.
    #[test]
    fn frames_cross_intact_and_in_order() {
        for wait in [false, true] {
            let sent = frames(5000);
            let sink = CollectSink::default();
            let link = Link {
                rx: Box::new(VecSource::new(sent.clone())),
                tx: Box::new(sink.clone()),
            };
            let (mut port, wire) = spawn("t", link, 1514, wait).unwrap();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            let mut lens = [0u32; 32];
            while !port.rx.exhausted() {
                if got.len() % 3 == 0 {
                    if let Some(n) = port.rx.next_frame(&mut buf) {
                        got.push(buf[..n].to_vec());
                    }
                } else {
                    let k = port.rx.next_batch(&mut buf, &mut lens[..7]);
                    let mut off = 0;
                    for &l in &lens[..k] {
                        got.push(buf[off..off + l as usize].to_vec());
                        off += batch_step(l as usize);
                    }
                }
            }
            // Transmit them back in batches of up to 32 laid out as a NIC lays them out.
            for chunk in got.chunks(32) {
                let mut out = Vec::new();
                let mut lens = Vec::new();
                for f in chunk {
                    out.resize(out.len().div_ceil(64) * 64, 0);
                    out.extend_from_slice(f);
                    lens.push(f.len() as u32);
                }
                port.tx.deliver_batch(&out, &lens);
            }
            port.tx.finish();
            wire.join();
            assert_eq!(got, sent, "wait {wait}: received");
            assert_eq!(*sink.frames.lock().unwrap(), sent, "wait {wait}: delivered");
        }
    }

    /// A waiting receive side never reports an idle wire before the end: every `next_batch` of
    /// a full burst's room returns at least one frame until the source is exhausted.
    #[test]
    fn waiting_receive_side_never_sees_an_idle_wire() {
        let link = Link {
            rx: Box::new(RepeatSource::new(vec![1u8; 60], 100_000)),
            tx: Box::new(crate::link::CountingSink::default()),
        };
        let (mut port, wire) = spawn("t", link, 1514, true).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut lens = [0u32; 32];
        let mut total = 0;
        loop {
            let k = port.rx.next_batch(&mut buf, &mut lens);
            if k == 0 {
                assert!(port.rx.exhausted(), "empty burst before the end");
                break;
            }
            total += k;
        }
        drop(port);
        wire.join();
        assert_eq!(total, 100_000);
    }

    /// A port slower than the tester loses nothing: the tester waits for room (`rx_full`).
    #[test]
    fn a_full_queue_makes_the_tester_wait() {
        let n = 40 * WIRE_BATCH * MAX_BATCHES / 10;
        let link = Link {
            rx: Box::new(RepeatSource::new(vec![2u8; 60], n as u64)),
            tx: Box::new(crate::link::CountingSink::default()),
        };
        let (mut port, wire) = spawn("t", link, 1514, false).unwrap();
        let c = wire.counters();
        let mut buf = vec![0u8; 2048];
        // On the wall clock nothing is offered before the port first looks for a frame.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(c.rx_frames.load(Ordering::Relaxed), 0, "offered early");
        assert_eq!(
            port.rx.next_frame(&mut buf),
            None,
            "the first look finds an idle wire"
        );
        // Let the tester fill every batch before the port takes anything more.
        while c.rx_full.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        let mut taken = 0;
        while !port.rx.exhausted() {
            if port.rx.next_frame(&mut buf).is_some() {
                taken += 1;
            }
        }
        drop(port);
        wire.join();
        assert_eq!(taken, n);
        assert_eq!(c.rx_frames.load(Ordering::Relaxed), n as u64);
    }

    /// A frame longer than the room a burst has left ends that burst; alone it is cut to the
    /// room, as a source reading into that room would cut it. Nothing else is lost.
    #[test]
    fn an_oversized_frame_ends_a_burst_and_is_cut_to_the_room() {
        let sent = vec![vec![1u8; 60], vec![2u8; 40_000], vec![3u8; 60]];
        let link = Link {
            rx: Box::new(VecSource::new(sent)),
            tx: Box::new(crate::link::CountingSink::default()),
        };
        let (mut port, wire) = spawn("t", link, 1514, true).unwrap();
        let mut buf = vec![0u8; 32 * 1024];
        let mut lens = [0u32; 8];
        let mut bursts = Vec::new();
        loop {
            let k = port.rx.next_batch(&mut buf, &mut lens);
            if k == 0 {
                break;
            }
            bursts.push(lens[..k].to_vec());
            assert!(buf[..lens[0] as usize].iter().all(|&b| b == buf[0]));
        }
        assert_eq!(bursts, vec![vec![60], vec![32 * 1024], vec![60]]);
        drop(port);
        wire.join();
    }

    #[test]
    fn batch_sizes_follow_the_frame_size() {
        let (small, sb) = sizes(1514);
        let (jumbo, jb) = sizes(9018);
        assert!(small > jumbo && sb < jb);
        assert!((MIN_BATCHES..=MAX_BATCHES).contains(&jumbo));
        assert!(sb >= WIRE_BATCH * 1536 + MAX_WIRE_FRAME);
    }
}
