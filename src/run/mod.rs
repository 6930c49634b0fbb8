//! `dataplane run`: one run path for every driver.
//!
//! The shared part: what a run is asked to do and how it fails ([`options`]), how it ends
//! ([`lifecycle`]: traffic end, duration, stop signals), the workers and their supervision with
//! the live stats line ([`workers`]), and the summary keys every driver prints ([`summary`]). One file per driver builds its ports and adds its own keys: the virtual
//! NIC ([`vnic`]) and DPDK ports (`dpdk`, feature `dpdk`). [`run`] picks the driver from the
//! config: a `[dpdk]` section means DPDK ports, anything else the virtual NIC.

#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod lifecycle;
pub mod options;
pub mod summary;
pub mod vnic;
pub mod workers;

pub use options::{RunError, RunOptions, load_config};
pub use summary::print_summary;

/// Runs the config of `opts` on the driver it selects; returns the JSON summary.
pub fn run(opts: &RunOptions) -> Result<serde_json::Value, RunError> {
    #[cfg(feature = "dpdk")]
    if let Some((cfg, d)) = dpdk::load(opts)? {
        return dpdk::run(&cfg, &d, opts);
    }
    vnic::run(opts)
}
