//! Drivers: the pure-Rust virtual NIC (always built) and, behind the `dpdk` feature, DPDK ports.

pub mod vnic;
