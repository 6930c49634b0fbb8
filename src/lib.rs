//! The nmdp application layer shared by the CLIs and the end-to-end tests: the run configuration,
//! the assembly of a run (ports, wire, NF chains, workers), and its summary.

pub mod app;
pub mod config;
pub mod traffic;
