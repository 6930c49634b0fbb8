//! The network layer of a run's ports: addresses, neighbours, routes, and the slow path that runs
//! beside the NF chain.
//!
//! An NF box between real hosts must look like a router to them: answer ARP for its addresses,
//! find its next hops' MAC addresses, decrement TTL and say so when it expires, and put the right
//! Ethernet addresses on what it sends. This module holds what that takes, split by how often it
//! runs:
//!
//! - per packet, nothing here but lookups: the `route` stage (an NF in `nfs`) reads the
//!   [`fib::Fib`] (longest-prefix match, built once, shared read-only) and its worker's
//!   [`neighbor::NeighborCache`] (refreshed by one atomic load per burst);
//! - per event, the [`slow_path::SlowPath`] of each worker: the run loop hands it the packets the
//!   chain dropped for a slow-path reason ([`crate::DropReason::for_slow_path`]: ARP and other
//!   non-IPv4 frames, next hops without a MAC, expired TTLs, packets for the ports' own
//!   addresses), and polls its timers when it has any. It answers ARP, parks packets until their
//!   next hop resolves, retries and times out requests, and sends ICMP time exceeded and echo
//!   replies, building every frame with `etherparse`;
//! - once, at start: the [`network::Network`] (ports' addresses, routes, static neighbours, the
//!   addresses the NFs own), and a gratuitous ARP for each owned address.
//!
//! A run without addresses, routes or neighbours has no network layer, and its packets take
//! exactly the path they took before it existed.

pub mod addr;
pub mod fib;
mod frames;
pub mod neighbor;
pub mod network;
pub mod slow_path;

pub use addr::{Ipv4Prefix, MacAddr, PortAddr};
pub use fib::{Fib, Hop, Route};
pub use neighbor::{NeighborCache, NeighborEntry, NeighborState, Neighbors};
pub use network::{ArpConfig, NetCounters, NetStats, Network, StaticNeighbor};
pub use slow_path::SlowPath;
