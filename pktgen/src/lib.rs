//! Traffic generation and checking for nmdp: the generator a port's wire side pulls frames from,
//! and the checking sink it delivers transmitted frames to.
//!
//! This is the foundation the full pktgen (profiles, IMIX, rate control, RFC 2544 and MLRsearch,
//! latency) builds on:
//!
//! * [`signature`]: the 16-byte test payload (magic, stream, flow, sequence number) after the L4
//!   header, the sequence-dependent pattern after it, and the header walk that finds both again
//!   in frames that NFs have rewritten.
//! * [`generator`]: [`Generator`], a [`dataplane::wire::FrameSource`] for fixed-size UDP/TCP
//!   frames over N flows, with shared counters and a stop flag.
//! * [`sink`]: [`CheckingSink`], a [`dataplane::wire::FrameSink`] counting received frames,
//!   payload mismatches, duplicates, reordering and holes per stream, and [`report`], which
//!   joins generator and sink counters into a [`TrafficReport`] (`seq_lost = sent - unique`).
//!
//! Both ends are built for the hot path of a 30 Mpps-per-core dataplane: no allocation, lock or
//! syscall per frame; counters are shared through `Arc`s of relaxed atomics that a stats thread
//! can read while traffic runs. `examples/gen_sink_speed.rs` measures their combined rate.
//!
//! ```
//! use dataplane::wire::{FrameSink, FrameSource, MAX_WIRE_FRAME};
//! use pktgen::{CheckingSink, Generator, GeneratorConfig, report};
//!
//! let cfg = GeneratorConfig { frame_size: 128, flows: 4, count: Some(1000), ..Default::default() };
//! let mut generator = Generator::new(cfg.clone()).unwrap();
//! let mut sink = CheckingSink::for_generator(&cfg);
//! let (gc, sc) = (generator.counters(), sink.counters());
//! let mut buf = vec![0u8; MAX_WIRE_FRAME];
//! while let Some(n) = generator.next_frame(&mut buf) {
//!     sink.deliver(&buf[..n]);
//! }
//! sink.finish();
//! let r = report(&gc, &sc);
//! assert_eq!((r.sent, r.received, r.seq_lost, r.payload_mismatches), (1000, 1000, 0, 0));
//! ```

pub mod generator;
pub mod signature;
pub mod sink;

pub use generator::{
    ConfigError, FCS_LEN, FlowTuple, GenCounters, Generator, GeneratorConfig, MAX_FRAME_SIZE,
    MAX_STREAMS, MIN_FRAME_SIZE, MacAddr,
};
pub use signature::{L4Proto, Signature};
pub use sink::{
    CheckingSink, FrameCheck, SeqOrder, SinkCounters, SinkStats, StreamStats, TrafficReport, report,
};
