//! The nmdp application layer shared by the CLIs and the end-to-end tests: the run configuration,
//! the assembly of a run (ports, wire, NF chains, workers), and its summary.

pub mod app;
pub mod bench;
pub mod config;
#[cfg(feature = "dpdk")]
pub mod dpdk_gen;
#[cfg(feature = "dpdk")]
pub mod dpdk_run;
pub mod footprint;
pub mod traffic;
