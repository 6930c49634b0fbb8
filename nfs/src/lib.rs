//! Network functions for the nicmem dataplane. They read and rewrite headers only, so they run
//! unchanged in every datapath mode and on every driver. This crate contains no `unsafe`.
//!
//! The functions, each one file with its registration ([`registry::NfSpec`]):
//!
//! - [`io_fwd`]: forward unchanged; [`macswap`]: swap MAC addresses.
//! - [`nat`]: source NAT (UDP, TCP, ICMP echo and errors) with RFC 1624 checksum updates.
//! - [`lb`]: L4 load balancer (round robin or Maglev) with per-flow affinity.
//! - [`flow_counter`]: per-flow packets/bytes, top-k, JSON/CSV dumps.
//! - [`work_package`]: N random reads per packet over an S-MiB buffer (memory-contention sweeps).
//!
//! What they share: [`flow_table`], the per-core cuckoo flow table; [`headers`], header views
//! and checksum arithmetic; [`frames`], frame builders for tests, benches and fuzzing;
//! [`params`], parameter parsing; [`verify`], the debug checksum verifier; [`registry`], building
//! a function by its config name and everything else that follows from its spec.

#![forbid(unsafe_code)]

pub mod flow_table;
pub mod frames;
pub mod headers;
pub mod params;
pub mod registry;
pub mod verify;

pub use registry::{BuildContext, NfSpec, build, lookup};

/// Declares the NF modules and [`REGISTRY`], the list of their specs, from one list: adding an
/// NF is one line here (`name,` for `nfs/src/<name>.rs`, or `name = "path",` for a file
/// elsewhere, relative to this folder). `cargo fmt` does not enter modules declared in a macro:
/// format them with `rustfmt --edition 2024 nfs/src/*.rs nfs/examples/*.rs` (CI checks that).
macro_rules! network_functions {
    ($($name:ident $(= $path:literal)?,)*) => {
        $(
            $(#[path = $path])?
            pub mod $name;
        )*
        /// Every registered network function, in the order the docs list them.
        pub static REGISTRY: &[&NfSpec] = &[$(&$name::SPEC),*];
    };
}

network_functions! {
    io_fwd,
    macswap,
    nat,
    lb,
    flow_counter,
    work_package,
    port_filter = "../examples/port_filter.rs",
}
