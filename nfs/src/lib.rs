//! Network functions for the nicmem dataplane. They read and rewrite headers only, so they run
//! unchanged in every datapath mode and on every driver. This crate contains no `unsafe`.
//!
//! - [`io_fwd`]: forward unchanged; [`macswap`]: swap MAC addresses.
//! - [`registry`]: build a function by its config name.

#![forbid(unsafe_code)]

pub mod io_fwd;
pub mod macswap;
pub mod registry;

pub use registry::{BuildContext, NF_NAMES, build};
