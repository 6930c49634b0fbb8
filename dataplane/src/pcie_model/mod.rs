//! The PCIe/NIC performance model: pure, deterministic arithmetic, no packets. The virtual NIC's
//! meter (`driver::vnic::model`) charges every DMA with it while a run goes on; `dataplane model`
//! composes the same charges into an analytical per-packet breakdown.
//!
//! By concern:
//! - [`profile`]: the hardware profile, every constant a named field, loaded from
//!   `configs/profiles/*.toml`.
//! - [`pcie`]: link bandwidth and TLP arithmetic (integer bytes and TLP counts).
//! - [`costs`]: the cost of every operation the NIC performs (the per-DMA cost table).
//! - [`breakdown`]: the analytical per-packet breakdown composed from those costs;
//!   [`render`]: its text and JSON forms.
//! - [`timeline`]: busy-until resource timelines in picoseconds, the read model, utilisation
//!   and bottleneck picking (what the meter books time on).
//! - [`ddio`]: the DDIO / LLC hit model; [`dram`]: DRAM latency under load (the memory
//!   contention a DDIO miss or an NF's table lookup meets).
//! - [`ratio`]: exact fractions for amortised per-packet costs.
//!
//! Every constant, formula and validation target comes from the reference
//! `docs/reference/pcie-nic-model.md`, whose sources are pcie-bench's `pcie-model` and measured
//! data (Neugebauer et al., SIGCOMM'18), the PCIe Base Spec 5.0, KV-Direct (SOSP'17), the nicmem
//! paper (Pismenny et al., ASPLOS'22) and its artifact, and the DPDK 20.08 mlx5 PMD. Module docs
//! say which section each part implements; tests pin the reference's numbers.

pub mod breakdown;
pub mod costs;
pub mod ddio;
pub mod dram;
pub mod pcie;
pub mod profile;
pub mod ratio;
pub mod render;
pub mod timeline;

pub use breakdown::{Bound, Breakdown, BreakdownInput};
pub use costs::{OpCosts, TxShape, TxWqe};
pub use ddio::DdioModel;
pub use dram::LoadedLatency;
pub use pcie::{PcieLink, PerPacket, Traffic};
pub use profile::HardwareProfile;
pub use ratio::Ratio;
pub use render::{render_text, to_json};
pub use timeline::{Ps, Reservation, Resource, ResourceKind, Timelines, pick_bottleneck};
