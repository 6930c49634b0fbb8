//! The wire side of a port: where frames come from and where transmitted frames go.
//!
//! A port's link is a [`FrameSource`] (frames arriving from the wire) and a [`FrameSink`] (frames
//! the port transmits). Implementations: the in-process traffic generator and checking sink
//! (`pktgen`), pcap files ([`crate::pcap`]), and a cable to another port ([`cable`]).
//!
//! Frames are Ethernet frames without the FCS, exactly as a pcap file stores them.

/// Largest frame any link carries (jumbo 9216 B plus slack); staging buffers are this big.
pub const MAX_WIRE_FRAME: usize = 16 * 1024;

/// Frames arriving at a port.
pub trait FrameSource: Send {
    /// Writes the next frame into `buf` (at least [`MAX_WIRE_FRAME`] bytes) and returns its
    /// length, or `None` if no frame is available right now.
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize>;

    /// True when the source will never produce another frame.
    fn exhausted(&self) -> bool;
}

/// Frames leaving a port.
pub trait FrameSink: Send {
    /// Takes one transmitted frame.
    fn deliver(&mut self, frame: &[u8]);

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

/// A cable between two ports: what one transmits, the other receives. Each direction is a bounded
/// lock-free queue of frames; a full queue drops the frame and counts it (like a wire with no
/// flow control).
pub mod cable {
    use super::{FrameSink, FrameSource};
    use crossbeam_queue::ArrayQueue;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    struct Dir {
        q: ArrayQueue<Vec<u8>>,
        closed: AtomicBool,
        dropped: AtomicU64,
    }

    /// The receiving end of one direction.
    pub struct CableRx {
        dir: Arc<Dir>,
    }

    /// The transmitting end of one direction.
    pub struct CableTx {
        dir: Arc<Dir>,
    }

    /// A one-way cable with room for `depth` frames in flight.
    pub fn one_way(depth: usize) -> (CableTx, CableRx) {
        let dir = Arc::new(Dir {
            q: ArrayQueue::new(depth.max(1)),
            closed: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
        });
        (CableTx { dir: dir.clone() }, CableRx { dir })
    }

    impl CableTx {
        /// Frames dropped because the cable was full.
        pub fn dropped(&self) -> u64 {
            self.dir.dropped.load(Ordering::Relaxed)
        }
        /// Marks the direction closed: the receiver becomes exhausted once drained.
        pub fn close(&self) {
            self.dir.closed.store(true, Ordering::Release);
        }
    }

    impl FrameSink for CableTx {
        fn deliver(&mut self, frame: &[u8]) {
            if self.dir.q.push(frame.to_vec()).is_err() {
                self.dir.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        fn finish(&mut self) {
            self.close();
        }
    }

    impl FrameSource for CableRx {
        fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
            let f = self.dir.q.pop()?;
            let n = f.len().min(buf.len());
            buf[..n].copy_from_slice(&f[..n]);
            Some(n)
        }
        fn exhausted(&self) -> bool {
            self.dir.closed.load(Ordering::Acquire) && self.dir.q.is_empty()
        }
    }
}
