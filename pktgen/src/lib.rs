//! Traffic generation, measurement and benchmarking for nmdp: the generator a port's wire side
//! pulls frames from, the checking sink it delivers transmitted frames to, and the RFC 2544 /
//! MLRsearch harness built on them.
//!
//! * [`signature`]: the 16-byte test payload after the L4 header (v1: stream, flow, 64-bit
//!   sequence; v2: stream, flow, 32-bit sequence and departure timestamp), the pattern after it,
//!   and the header walk that finds both again in frames NFs have rewritten.
//! * [`generator`]: [`Generator`], a [`dataplane::link::FrameSource`] of UDP/TCP frames over
//!   flows with address/port ranges, round-robin/uniform/Zipf popularity, fixed sizes or mixes.
//! * [`dist`]: PRNG, division-free reductions, alias tables, size mixes (IMIX).
//! * [`rate`]: rates (pps, L1/L2 bps, % of line), wire overhead, intended departure times.
//! * [`profile`]: several streams (or pcap replays) per port, each with its own rate.
//! * [`sink`]: [`CheckingSink`], counting received frames, payload mismatches, duplicates,
//!   reordering and holes per stream and recording latency; [`report`] joins generator and sink
//!   counters into a [`TrafficReport`] (`seq_lost = sent - unique`).
//! * [`latency`]: HDR histogram summaries and the loopback calibration.
//! * [`trial`]: the trial contract and the [`trial::Dut`] trait; [`testdut`]: an in-process DUT
//!   in virtual time with capacity, queue, latency, loss/duplicate/reorder policies and noise.
//! * [`search`]: NDR/PDR by RFC 9971 (MLRsearch), RFC 2544 throughput, frame loss rate,
//!   back-to-back, latency.
//! * [`sweep`]: products of parameters, progress bar, JSON/CSV; [`plot`]: SVG/PNG plots;
//!   [`progress`]: the progress display of a search.
//! * [`nat_traffic`]: NAT-aware traffic (this crate has no NAT): learning how a NAT mapped each
//!   flow from the frames it forwards and sending valid return traffic, also both directions on
//!   one wire ([`nat_traffic::nat_bidir`]: forward and return frames from one source, split and
//!   checked by one sink).
//!
//! Both ends are built for the hot path of a 30 Mpps-per-core dataplane: no allocation, lock or
//! syscall per frame; counters are shared through `Arc`s of relaxed atomics that a stats thread
//! can read while traffic runs. `examples/gen_sink_speed.rs` measures their combined rate.
//!
//! ```
//! use dataplane::link::{FrameSink, FrameSource, MAX_WIRE_FRAME};
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

pub mod dist;
pub mod generator;
pub mod latency;
pub mod nat_traffic;
pub mod paper;
pub mod plot;
pub mod profile;
pub mod progress;
pub mod rate;
pub mod search;
pub mod signature;
pub mod sink;
pub mod sweep;
pub mod testdut;
pub mod trial;

pub use generator::{
    ConfigError, FCS_LEN, FlowTuple, GenCounters, Generator, GeneratorConfig, MAX_FRAME_SIZE,
    MAX_STREAMS, MIN_FRAME_SIZE, MacAddr,
};
pub use signature::{L4Proto, Signature};
pub use sink::{
    CheckingSink, FrameCheck, SeqOrder, SinkCounters, SinkStats, StreamStats, TrafficReport, report,
};
