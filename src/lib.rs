//! The nmdp application layer shared by the CLIs and the end-to-end tests, in layers:
//!
//! - [`config`]: the run configuration (TOML, `--set` overrides, the `[dpdk]` section), checked
//!   before anything runs; [`footprint`]: the memory a config will need, checked against the
//!   machine.
//! - [`traffic`]: the embedded generator and checking sink of a virtual NIC run.
//! - [`run`]: `dataplane run`, one run path with one file per driver; [`kept_chains`]: the NF
//!   chains a process keeps from one run to the next (tables built once, reset between trials).
//! - [`calibrate`]: `dataplane calibrate`, the NFs' CPU cost measured on this machine in the
//!   hardware profile's terms, and what a virtual-time run charges its NFs.
//! - [`dut`]: the device under test that `pktgen`'s RFC 2544 / MLRsearch trials and sweeps drive
//!   (a run per trial); `dpdk_gen` (feature `dpdk`): `pktgen dpdk-gen`, the generator on DPDK
//!   ports.

pub mod calibrate;
pub mod config;
#[cfg(feature = "dpdk")]
pub mod dpdk_gen;
pub mod dut;
pub mod footprint;
pub mod kept_chains;
pub mod run;
pub mod traffic;
