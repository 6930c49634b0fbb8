//! Drivers: the pure-Rust virtual NIC (always built) and, behind the `dpdk` feature, DPDK ports.

#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod vnic;
