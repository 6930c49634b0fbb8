//! Network functions for the nicmem dataplane. They read and rewrite headers only, so they run
//! unchanged in every datapath mode and on every driver. This crate contains no `unsafe`.
//!
//! - [`io_fwd`]: forward unchanged; [`macswap`]: swap MAC addresses.
//! - [`nat`]: source NAT (UDP, TCP, ICMP echo and errors) with RFC 1624 checksum updates.
//! - [`lb`]: L4 load balancer (round robin or Maglev) with per-flow affinity.
//! - [`flow_counter`]: per-flow packets/bytes, top-k, JSON/CSV dumps.
//! - [`work_package`]: N random reads per packet over an S-MiB buffer (memory-contention sweeps).
//! - [`flow_table`]: the per-core cuckoo flow table they share; [`headers`]: header views and
//!   checksum arithmetic; [`frames`]: frame builders for tests, benches and fuzzing;
//!   [`slow_path`]: frame bytes past the header segment (ICMP errors' quoted headers).
//! - [`registry`]: build a function by its config name.

#![forbid(unsafe_code)]

pub mod common;
pub mod flow_counter;
pub mod flow_table;
pub mod frames;
pub mod headers;
pub mod io_fwd;
pub mod lb;
pub mod macswap;
pub mod nat;
pub mod registry;
pub mod slow_path;
pub mod work_package;

pub use registry::{BuildContext, NF_NAMES, build};
