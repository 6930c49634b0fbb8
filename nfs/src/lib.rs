//! Network functions for the nicmem dataplane. They read and rewrite headers (bytes past the
//! header segment only through the counted [`slow_path`]), so they run unchanged in every
//! datapath mode and on every driver. This crate contains no `unsafe`.
//!
//! The functions, each one file with its registration ([`registry::NfSpec`]) (the NAT a folder
//! of modules, one per concern):
//!
//! - [`io_fwd`]: forward unchanged; [`macswap`]: swap MAC addresses.
//! - [`nat`]: source NAT (UDP, TCP, ICMP queries and errors, fragments) with RFC 4787, 5382,
//!   5508 and 6888 behaviour and RFC 1624 checksum updates.
//! - [`lb`]: L4 load balancer (round robin or Maglev) with per-flow affinity.
//! - [`flow_counter`]: per-flow packets/bytes, top-k, JSON/CSV dumps.
//! - [`work_package`]: N random reads per packet over an S-MiB buffer (memory-contention sweeps).
//! - [`route`]: IPv4 forwarding by the run's routes, TTL decrement, Ethernet rewrite.
//!
//! What they share: [`flow_table`], the per-core cuckoo flow table; [`params`], parameter
//! parsing; [`verify`], the debug checksum verifier; [`slow_path`], frame bytes past the header
//! segment (the headers an ICMP error quotes); [`on_vnic`], running a chain on the virtual NIC in
//! tests; [`registry`], building a function by its config name and everything else that follows
//! from its spec. Header views, checksums, the classifier and frame builders are the `wire`
//! crate's.

#![forbid(unsafe_code)]

pub mod flow_table;
pub mod on_vnic;
pub mod params;
pub mod registry;
pub mod slow_path;
pub mod verify;

pub use registry::{BuildContext, NfSpec};

/// The spec of the function a config calls `name` (canonical name or alias).
pub fn lookup(name: &str) -> Option<&'static NfSpec> {
    registry::lookup_in(REGISTRY, name)
}

/// The canonical names of every registered function, in registry order.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|s| s.name).collect()
}

/// Builds the function `name` (canonical name or alias) with `params` (the pipeline entry minus
/// `name`). Errors name the function and the offending key, and list what is allowed.
pub fn build(
    name: &str,
    params: &toml::Table,
    ctx: &BuildContext,
) -> Result<Box<dyn dataplane::NetworkFunction>, String> {
    registry::build_in(REGISTRY, name, params, ctx)
}

/// The reference of every registered function in Markdown (what `dataplane nfs` prints).
pub fn reference_markdown() -> String {
    registry::reference_markdown_of(REGISTRY)
}

/// Declares the NF modules and [`REGISTRY`], the list of their specs, from one list: adding an
/// NF is one line here (`name,` for `nfs/src/<name>.rs`, or `nfs/src/<name>/mod.rs` for an NF
/// split into modules, as the NAT is). `cargo fmt` does not enter modules declared in a macro:
/// format them with `rustfmt --edition 2024 nfs/src/*.rs nfs/src/nat/*.rs` (CI checks that).
macro_rules! network_functions {
    ($($name:ident,)*) => {
        $(
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
    port_filter,
    route,
}
