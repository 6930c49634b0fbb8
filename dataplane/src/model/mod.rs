//! The virtual NIC's accounting and timing model: pure, deterministic arithmetic shared by the
//! simulation (the `vnic` driver charges every DMA with it) and the analysis (`dataplane model`).
//!
//! - [`profile`]: the hardware profile, every constant a named field, loaded from
//!   `configs/profiles/*.toml`.
//! - [`pcie`]: link bandwidth and TLP arithmetic (integer bytes and TLP counts).
//! - [`breakdown`]: per-operation charges and the analytical per-packet breakdown.
//! - [`timeline`]: busy-until resource timelines in picoseconds, the read model, utilisation
//!   and bottleneck picking.
//! - [`ddio`]: the DDIO / LLC hit model.
//! - [`ratio`]: exact fractions for amortised per-packet costs.
//!
//! Every constant, formula and validation target comes from the shared reference
//! `docs/reference/pcie-nic-model.md`, whose sources are pcie-bench's `pcie-model` and measured data
//! (Neugebauer et al., SIGCOMM'18), the PCIe Base Spec 5.0, KV-Direct (SOSP'17), the nicmem paper
//! (Pismenny et al., ASPLOS'22) and its artifact, and the DPDK 20.08 mlx5 PMD. Module docs say
//! which section each part implements; tests pin the reference's numbers.

pub mod breakdown;
pub mod ddio;
pub mod pcie;
pub mod profile;
pub mod ratio;
pub mod timeline;

pub use breakdown::{
    Bound, Breakdown, BreakdownInput, OpCosts, TxShape, TxWqe, render_text, to_json,
};
pub use ddio::DdioModel;
pub use pcie::{PcieLink, PerPacket, Traffic};
pub use profile::HardwareProfile;
pub use ratio::Ratio;
pub use timeline::{Ps, Reservation, Resource, ResourceKind, Timelines, pick_bottleneck};
