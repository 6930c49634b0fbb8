//! Wire formats: one module per protocol with zero-copy views over byte slices (in the style of
//! smoltcp's `wire`), one checksum module, and the classifier the network functions run first.
//! Below `dataplane`, `nfs` and `pktgen`, and used by all of them and by the tests, so every
//! constant of a header is defined once.
//!
//! - [`ethernet`], [`arp`], [`ipv4`], [`icmpv4`], [`udp`], [`tcp`]: constants and views. A view
//!   checks the length once when it is made; its accessors read and write big-endian fields at
//!   fixed offsets ([`field`]).
//! - [`checksum`]: the one's-complement sum and RFC 1624 incremental updates.
//! - [`classify`]: Ethernet/VLAN/IPv4/L4 in one pass, lengths checked against the frame.
//! - [`frames`]: frame builders for tests, benchmarks and fuzzing (not the data path).
//!
//! # Why our own views on the fast path, and etherparse beside them
//!
//! `etherparse` is the project's general-purpose parser and builder: the tests check our views,
//! checksums and frame builders against it (an implementation written apart from ours), and
//! pktgen builds the header templates of its frames with it (once per frame size). The
//! per-packet path keeps these views because it needs less than etherparse does, and pays less
//! for it: [`classify::parse`] reads only the fields the network functions key on, checks every
//! length against the *frame* rather than the bytes at hand (a split packet's header segment is
//! shorter than its frame, which a general parser reports as truncated), and never builds the
//! header structs a general parser fills. `cargo bench -p wire --bench classify` compares the two
//! on a 64 B UDP frame, reading its ports: on this project's 2-core AMD EPYC machine (bench
//! profile, other builds running beside it) `classify::parse` took 3.5 ns and
//! `etherparse::SlicedPacket::from_ethernet` 29.7 ns per frame. At 30 Mpps per core a packet has
//! about 33 ns in all.

#![forbid(unsafe_code)]

pub mod arp;
pub mod checksum;
pub mod classify;
pub mod ethernet;
pub mod field;
pub mod frames;
pub mod icmpv4;
pub mod ipv4;
pub mod tcp;
pub mod udp;
