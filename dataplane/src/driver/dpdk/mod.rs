//! DPDK ports (feature `dpdk`): any ethdev (vdevs such as `net_null`, `net_ring`, `net_pcap`,
//! `net_tap`; PCI NICs such as mlx5) behind the same [`Port`](crate::Port) / [`Queue`](crate::Queue)
//! traits as the virtual NIC, so the same NF chain runs unchanged on both.
//!
//! # How mbufs map onto the packet model (the load-bearing decision)
//!
//! A received mbuf **is** the packet: its pointer is the handle a [`crate::Burst`] holds, and the
//! burst reads the header's place and the lengths from the mbuf's own fields (its
//! [`crate::HandleLayout`]), so `rte_eth_rx_burst` writes straight into the burst and nothing is
//! copied. The first mbuf segment is the header segment (what network functions rewrite), the
//! second, if any, the payload segment (host memory, or nicmem: then no byte view exists). The
//! driver is the [`crate::PacketOwner`] of its packets; the packet core knows nothing of mbufs.
//!
//! Alternatives considered:
//! - *Register our `nicmem` pools with DPDK as external buffers* (`rte_pktmbuf_pool_create_extbuf`
//!   over a [`nicmem::Region`]): the mbufs would point into our buffers, but two allocators would
//!   own the same memory, and every packet would need a lookup from mbuf to buffer and back. We
//!   still use extbuf pools, but only where the memory has no other owner: the nicmem payload
//!   pools (emulated or MEMIC).
//! - *Copy at the boundary*: simplest, but a copy per packet and direction; used only for
//!   packets software builds ([`crate::Queue::push_frame`]).
//!
//! # Hot path
//!
//! One call into the PMD per burst for Rx and one for Tx (DPDK's static-inline
//! `rte_eth_rx_burst`/`rte_eth_tx_burst`, written out in Rust in `dpdk_sys::fastpath` so that the
//! queue lookup is inlined instead of going through an out-of-line C wrapper), mbuf fields read and written as Rust
//! fields (their offsets are asserted at compile time in `dpdk-sys`), header mbufs for the
//! software split allocated with one `rte_pktmbuf_alloc_bulk` per burst, and frees batched into
//! `rte_pktmbuf_free_bulk`. Worker threads register with EAL (`rte_thread_register`) so that
//! mempools use their per-lcore caches, and can be pinned to a core.
//!
//! # Datapath modes on every PMD
//!
//! - `host`: one mbuf per frame, as the PMD delivers it.
//! - split modes where the PMD offers `RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT` with two pools (mlx5):
//!   hardware split at `split_offset` into a header pool and a payload pool.
//! - split modes elsewhere (all vdevs): **software split**: the first `split_offset` bytes are
//!   copied into a header mbuf from a small header pool and the received mbuf is chained behind it
//!   as the payload segment (its `data_off` advanced).
//! - `nic-payload` / `nic-inline` on a PMD without device memory: **emulated nicmem**. The payload
//!   pool is a pinned-external-buffer mempool over a region from a modeled [`nicmem::NicMem`]
//!   (host memory marked as nicmem), the payload is copied there (playing the NIC's DMA), and
//!   packets are labelled as served from the primary ring. [`Capabilities::nicmem`] stays `false`
//!   and the port's xstats report `nicmem_emulated=1`; this measures nothing about real nicmem.
//!   When the primary pool is empty, payloads spill to the secondary (host) ring.
//! - On mlx5, nicmem modes need device memory (feature `mlx5`, see [`mlx5`]); without it the port
//!   fails to open with an error saying what is missing and that `host` and `split` still work.
//!   It never falls back to host memory silently.
//!
//! [`Capabilities::nicmem`]: crate::Capabilities::nicmem

mod eal;
mod error;
mod events;
mod mbuf;
mod mempool;
pub mod mlx5;
mod port;
mod queue;
mod shared;
mod spill;
pub mod telemetry;
mod txgen;

#[cfg(test)]
pub(crate) use eal::test_eal;
pub use eal::{Eal, register_worker_thread};
pub use error::{DpdkError, EalError};
pub use mbuf::PayloadMem;
pub use mempool::MempoolStats;
pub use port::{DpdkPort, DpdkPortConfig, NicmemSource, PortStatsHandle};
pub use queue::{DpdkQueue, RxStop};
pub use spill::SpillStats;
pub use txgen::{
    MAX_GEN_BURST, PortEventStats, PortRxStats, PortTxStats, RxTap, TxBurst, TxGen, TxGenCounters,
    UnsentPolicy,
};
