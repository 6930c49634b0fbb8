//! The link of a port: where the frames arriving on its wire come from and where the frames it
//! transmits go.
//!
//! A port's link is a [`FrameSource`] (frames arriving from the wire) and a [`FrameSink`] (frames
//! the port transmits). Implementations: the in-process traffic generator and checking sink
//! (`pktgen`), pcap files ([`crate::pcap`]), a cable to another port ([`cable`]), and the Linux
//! kernel: a TAP device ([`tap`]) or an interface through AF_PACKET ([`afpacket`]), by name
//! ([`kernel`]). Any link can run on a tester thread of its own ([`wire`]), apart from the
//! worker polling the port.
//!
//! Frames are Ethernet frames without the FCS, exactly as a pcap file stores them.

pub mod afpacket;
pub mod fd;
pub mod kernel;
pub mod tap;
pub mod wire;

/// Largest frame any link carries (jumbo 9216 B plus slack); staging buffers are this big.
pub const MAX_WIRE_FRAME: usize = 16 * 1024;

/// Where frame `i + 1` of a batch starts, relative to frame `i` of `len` bytes: frames of a batch
/// sit back to back at 64-byte aligned offsets (whole cache lines, so short frames copy in a few
/// vector moves).
#[inline(always)]
pub fn batch_step(len: usize) -> usize {
    len.div_ceil(64) * 64
}

/// Frames arriving at a port.
pub trait FrameSource: Send {
    /// Writes the next frame into `buf` (at least [`MAX_WIRE_FRAME`] bytes) and returns its
    /// length, or `None` if no frame is available right now.
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize>;

    /// True when the source will never produce another frame.
    fn exhausted(&self) -> bool;

    /// Writes up to `lens.len()` frames into `buf` back to back (frame `i + 1` at
    /// [`batch_step`] of frame `i`'s length after it), while `buf` has room for a frame of
    /// [`MAX_WIRE_FRAME`] bytes; returns how many, with their lengths in `lens`. A NIC takes a
    /// burst of frames with one call (one dynamic dispatch per burst, not per frame); the
    /// default asks [`FrameSource::next_frame`] in a loop.
    fn next_batch(&mut self, buf: &mut [u8], lens: &mut [u32]) -> usize {
        let (mut off, mut n) = (0, 0);
        while n < lens.len() && buf.len().saturating_sub(off) >= MAX_WIRE_FRAME {
            let Some(len) = self.next_frame(&mut buf[off..]) else {
                break;
            };
            lens[n] = len as u32;
            n += 1;
            off += batch_step(len);
        }
        n
    }
}

/// Frames leaving a port.
pub trait FrameSink: Send {
    /// Takes one transmitted frame.
    fn deliver(&mut self, frame: &[u8]);

    /// Takes the frames of a batch laid out as [`FrameSource::next_batch`] lays them out (one
    /// dynamic dispatch per batch); the default hands each to [`FrameSink::deliver`].
    fn deliver_batch(&mut self, buf: &[u8], lens: &[u32]) {
        let mut off = 0;
        for &len in lens {
            let len = len as usize;
            self.deliver(&buf[off..off + len]);
            off += batch_step(len);
        }
    }

    /// Called when the run ends (e.g. to flush a file).
    fn finish(&mut self) {}
}

/// A link: the two directions of a port's wire.
pub struct Link {
    /// Frames arriving at the port.
    pub rx: Box<dyn FrameSource>,
    /// Frames the port transmits.
    pub tx: Box<dyn FrameSink>,
}

/// A source that never produces a frame.
#[derive(Debug, Default)]
pub struct NullSource;

impl FrameSource for NullSource {
    fn next_frame(&mut self, _buf: &mut [u8]) -> Option<usize> {
        None
    }
    fn exhausted(&self) -> bool {
        true
    }
}

/// A sink that discards frames and counts them.
#[derive(Debug, Default)]
pub struct CountingSink {
    /// Frames delivered.
    pub frames: u64,
    /// Bytes delivered.
    pub bytes: u64,
}

impl FrameSink for CountingSink {
    fn deliver(&mut self, frame: &[u8]) {
        self.frames += 1;
        self.bytes += frame.len() as u64;
    }

    fn deliver_batch(&mut self, _buf: &[u8], lens: &[u32]) {
        self.frames += lens.len() as u64;
        self.bytes += lens.iter().map(|&l| u64::from(l)).sum::<u64>();
    }
}

/// A source replaying a fixed list of frames once (tests, golden traces).
#[derive(Debug, Default)]
pub struct VecSource {
    frames: std::collections::VecDeque<Vec<u8>>,
}

impl VecSource {
    /// Replays `frames` in order.
    pub fn new(frames: Vec<Vec<u8>>) -> Self {
        Self {
            frames: frames.into(),
        }
    }
}

impl FrameSource for VecSource {
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        let f = self.frames.pop_front()?;
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        Some(n)
    }
    fn exhausted(&self) -> bool {
        self.frames.is_empty()
    }
}

/// A sink collecting frames into a shared vector (tests).
#[derive(Clone, Debug, Default)]
pub struct CollectSink {
    /// The frames, in transmit order.
    pub frames: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

impl FrameSink for CollectSink {
    fn deliver(&mut self, frame: &[u8]) {
        self.frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(frame.to_vec());
    }
}

/// A bounded multi-producer/multi-consumer queue of frames with preallocated, recycled frame
/// buffers: pushing and popping copy bytes but never allocate. Used between a port's wire front end
/// and its queues, and for cables between ports.
pub struct FrameRing {
    full: crossbeam_queue::ArrayQueue<Vec<u8>>,
    free: crossbeam_queue::ArrayQueue<Vec<u8>>,
    closed: std::sync::atomic::AtomicBool,
    dropped: std::sync::atomic::AtomicU64,
}

impl FrameRing {
    /// A ring holding up to `depth` frames of up to `max_frame` bytes.
    pub fn new(depth: usize, max_frame: usize) -> Self {
        let depth = depth.max(1);
        let free = crossbeam_queue::ArrayQueue::new(depth);
        for _ in 0..depth {
            let _ = free.push(Vec::with_capacity(max_frame));
        }
        Self {
            full: crossbeam_queue::ArrayQueue::new(depth),
            free,
            closed: std::sync::atomic::AtomicBool::new(false),
            dropped: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Copies `frame` in. Returns false (and counts a drop) when the ring is full.
    pub fn push(&self, frame: &[u8]) -> bool {
        let Some(mut v) = self.free.pop() else {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return false;
        };
        v.clear();
        v.extend_from_slice(frame);
        // Cannot fail: a buffer came from `free`, so `full` has room for it.
        let _ = self.full.push(v);
        true
    }

    /// Copies the oldest frame into `buf`; returns its length.
    pub fn pop(&self, buf: &mut [u8]) -> Option<usize> {
        let v = self.full.pop()?;
        let n = v.len().min(buf.len());
        buf[..n].copy_from_slice(&v[..n]);
        let _ = self.free.push(v);
        Some(n)
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.full.len()
    }

    /// True when no frame is waiting.
    pub fn is_empty(&self) -> bool {
        self.full.is_empty()
    }

    /// Frames dropped because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Marks the producer side finished.
    pub fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// True once closed and drained.
    pub fn finished(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire) && self.full.is_empty()
    }
}

/// A cable between two ports: what one transmits, the other receives. Each direction is a
/// [`FrameRing`]; a full ring drops the frame and counts it (a wire with no flow control).
pub mod cable {
    use super::{FrameRing, FrameSink, FrameSource, MAX_WIRE_FRAME};
    use std::sync::Arc;

    /// The receiving end of one direction.
    pub struct CableRx {
        ring: Arc<FrameRing>,
    }

    /// The transmitting end of one direction.
    pub struct CableTx {
        ring: Arc<FrameRing>,
    }

    /// A one-way cable with room for `depth` frames in flight.
    pub fn one_way(depth: usize) -> (CableTx, CableRx) {
        let ring = Arc::new(FrameRing::new(depth, MAX_WIRE_FRAME));
        (CableTx { ring: ring.clone() }, CableRx { ring })
    }

    impl CableTx {
        /// Frames dropped because the cable was full.
        pub fn dropped(&self) -> u64 {
            self.ring.dropped()
        }
        /// Marks the direction closed: the receiver becomes exhausted once drained.
        pub fn close(&self) {
            self.ring.close();
        }
    }

    impl FrameSink for CableTx {
        fn deliver(&mut self, frame: &[u8]) {
            self.ring.push(frame);
        }
        fn finish(&mut self) {
            self.close();
        }
    }

    impl FrameSource for CableRx {
        fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
            self.ring.pop(buf)
        }
        fn exhausted(&self) -> bool {
            self.ring.finished()
        }
    }
}

/// A source that sends one frame `count` times (benchmarks: the cheapest possible traffic, so
/// the measurement is the port's own cost).
#[derive(Debug, Clone)]
pub struct RepeatSource {
    frame: Vec<u8>,
    padded: Vec<u8>,
    left: u64,
}

impl RepeatSource {
    /// Sends `frame` `count` times.
    pub fn new(frame: Vec<u8>, count: u64) -> Self {
        let mut padded = frame.clone();
        padded.resize(frame.len().div_ceil(64) * 64, 0);
        Self {
            frame,
            padded,
            left: count,
        }
    }
}

impl FrameSource for RepeatSource {
    #[inline]
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let n = self.frame.len().min(buf.len());
        // Short frames: one fixed-size copy (the frame is stored padded) instead of a `memcpy`
        // call, so a benchmark measures the port, not the source.
        nicmem::copy_prefix(buf, &self.padded, n);
        Some(n)
    }

    fn next_batch(&mut self, buf: &mut [u8], lens: &mut [u32]) -> usize {
        let len = self.frame.len();
        let n = (lens.len() as u64).min(self.left) as usize;
        lens[..n].fill(len as u32);
        let step = batch_step(len);
        if step == 0 {
            self.left -= n as u64;
            return n;
        }
        // Every frame is the same: one fixed-size copy per slot of the batch.
        let mut sent = 0;
        for slot in buf.chunks_exact_mut(step).take(n) {
            nicmem::copy_prefix(slot, &self.padded, len);
            sent += 1;
        }
        self.left -= sent as u64;
        sent
    }
    fn exhausted(&self) -> bool {
        self.left == 0
    }
}
