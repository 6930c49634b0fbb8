//! The PCIe cost of every operation the NIC performs ([`OpCosts`]: descriptor fetches, data
//! reads and writes, completions, doorbells, interrupts), in integer bytes and TLPs, and the
//! shape of an mlx5 Tx descriptor ([`TxShape`], [`TxWqe`]). One table serves both the virtual
//! NIC's meter, which charges each DMA as it happens, and the analytical [`super::breakdown`].
//!
//! Sources: `docs/reference/pcie-nic-model.md` §3 (mlx5 descriptor sizes and inline rules, from
//! the DPDK 20.08 mlx5 PMD and the nicmem artifact) and §1 (TLP arithmetic).

use serde::Serialize;

use crate::mode::DatapathMode;

use super::pcie::{PcieLink, Traffic};
use super::profile::{DescriptorProfile, HardwareProfile, InlineRounding};

/// Bytes of inline data carried at the end of the mlx5 Ethernet segment [mlx5 PMD].
pub const ETH_SEG_INLINE_BYTES: u32 = 2;
/// Control + Ethernet segments that start every Tx WQE [mlx5 PMD].
pub const TX_FIXED_SEGS: u32 = 2;

/// The inline size the driver actually uses for `txq_inline_min = n`.
///
/// `mlx5`: 0 → 0 (no inlining), n ≤ 18 → 18, else 18 + 16·⌈(n − 18)/16⌉ (64 → 66).
/// `exact`: n (the nicmem fork).
pub fn effective_inline(n: u32, rounding: InlineRounding) -> u32 {
    match rounding {
        InlineRounding::Exact => n,
        InlineRounding::Mlx5 if n == 0 => 0,
        InlineRounding::Mlx5 if n <= 18 => 18,
        InlineRounding::Mlx5 => 18 + 16 * (n - 18).div_ceil(16),
    }
}

/// How a packet is laid out for transmit (the general form behind a [`DatapathMode`]; also
/// covers a nicmem-mode packet whose payload spilled to the host secondary ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxShape {
    /// Header and payload are separate segments split at H.
    pub split: bool,
    /// `txq_inline_min` requested (0 = no inlining); rounded per the profile.
    pub inline_min: u32,
    /// The payload segment is in nicmem (else host memory).
    pub payload_in_nicmem: bool,
}

impl TxShape {
    /// The shape of `mode` with inline size `inline_min` (used only by `nic-inline`).
    pub fn of(mode: DatapathMode, inline_min: u32) -> Self {
        TxShape {
            split: mode.splits(),
            inline_min: if mode.inlines_tx_header() {
                inline_min
            } else {
                0
            },
            payload_in_nicmem: mode.uses_nicmem(),
        }
    }
}

/// A Tx WQE and the data reads it implies for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TxWqe {
    /// 16 B data segments (DS count in the control segment).
    pub ds: u32,
    /// Bytes inlined into the WQE (after rounding).
    pub inline_bytes: u32,
    /// Data-pointer segments.
    pub pointers: u32,
    /// WQE building blocks occupied.
    pub wqebbs: u32,
    /// Bytes the NIC fetches (whole WQEBBs).
    pub fetched_bytes: u32,
    /// Bytes the NIC reads from the host header segment (0 = no read).
    pub host_header_read: u32,
    /// Bytes the NIC reads from a host payload segment (0 = no read).
    pub host_payload_read: u32,
    /// Bytes the NIC reads from nicmem.
    pub nicmem_read: u32,
    /// Bytes the CPU copies out of nicmem to build the inline part (slow path).
    pub cpu_nicmem_read: u32,
}

/// The PCIe cost of every operation the NIC performs, from one profile. The virtual NIC calls
/// these to charge its timelines; [`super::breakdown::Breakdown::compute`] composes them.
#[derive(Clone, Debug)]
pub struct OpCosts {
    link: PcieLink,
    desc: DescriptorProfile,
}

impl OpCosts {
    /// Costs for a validated profile.
    pub fn new(profile: &HardwareProfile) -> Result<Self, String> {
        Ok(OpCosts {
            link: PcieLink::from_profile(&profile.nic.pcie)?,
            desc: profile.nic.descriptors.clone(),
        })
    }

    /// The link used for the TLP arithmetic.
    pub fn link(&self) -> &PcieLink {
        &self.link
    }

    /// The descriptor parameters.
    pub fn descriptors(&self) -> &DescriptorProfile {
        &self.desc
    }

    /// NIC writes `len` received bytes to an aligned host buffer: `W(len)` up.
    pub fn rx_data_write(&self, len: u32) -> Traffic {
        self.link.write(0, u64::from(len))
    }

    /// NIC writes `len` received bytes to host address `addr`.
    pub fn rx_data_write_at(&self, addr: u64, len: u32) -> Traffic {
        self.link.write(addr, u64::from(len))
    }

    /// All Rx data writes of one packet of `len` bytes in `mode` with split offset `h`:
    /// host `W(L)`; split `W(H) + W(L−H)`; nicmem modes `W(H)` (payload to SRAM); a packet of
    /// `L ≤ H` goes whole into the header buffer.
    pub fn rx_data(&self, mode: DatapathMode, len: u32, h: u32) -> Traffic {
        if !mode.splits() || len <= h {
            self.rx_data_write(len)
        } else if mode.uses_nicmem() {
            self.rx_data_write(h)
        } else {
            self.rx_data_write(h) + self.rx_data_write(len - h)
        }
    }

    /// Rx WQE size for `mode`: one scatter entry (16 B) for host, two (32 B) otherwise.
    pub fn rx_wqe_size(&self, mode: DatapathMode) -> u32 {
        self.desc.seg_size * if mode.splits() { 2 } else { 1 }
    }

    /// NIC fetches `batch` Rx WQEs of `wqe_size` bytes in one read: `Rq`, `Rc` of the total.
    pub fn rx_wqe_fetch(&self, batch: u32, wqe_size: u32) -> Traffic {
        self.link.read(0, u64::from(batch) * u64::from(wqe_size))
    }

    /// NIC writes `n` completions: `n` CQE writes of `W(cqe_size)`, or with CQE compression
    /// `⌈n / mini_cqes_per_slot⌉` slot writes.
    pub fn cqe_write(&self, n: u32) -> Traffic {
        let writes = if self.desc.cqe_compression {
            n.div_ceil(self.desc.mini_cqes_per_slot)
        } else {
            n
        };
        self.link
            .write(0, u64::from(self.desc.cqe_size))
            .times(u64::from(writes))
    }

    /// CPU rings the Tx doorbell: one 8 B write-combined MMIO write, `8 + 24` down.
    pub fn tx_doorbell(&self) -> Traffic {
        self.link.mmio_write(0, u64::from(self.desc.doorbell_bytes))
    }

    /// The Tx WQE for a packet of `len` bytes in `mode` with split offset `h` and
    /// `txq_inline_min = i` (only `nic-inline` inlines).
    pub fn tx_wqe(&self, mode: DatapathMode, len: u32, h: u32, i: u32) -> Result<TxWqe, String> {
        self.tx_wqe_for(TxShape::of(mode, i), len, h)
    }

    /// The Tx WQE for a packet of `len` bytes with an explicit [`TxShape`].
    ///
    /// Rules [mlx5 PMD]: ctrl + eth segments, the eth segment ending in the first 2 inline
    /// bytes and the rest of the inline data in 16 B units; a packet no longer than the
    /// (rounded) inline size is inlined whole; then one pointer per remaining segment piece.
    /// Errors if the WQE exceeds `max_wqe_bytes`.
    pub fn tx_wqe_for(&self, shape: TxShape, len: u32, h: u32) -> Result<TxWqe, String> {
        let d = &self.desc;
        let inl = effective_inline(shape.inline_min, d.inline_rounding);
        let hdr_end = if shape.split { len.min(h) } else { len };
        let has_payload = shape.split && len > h;
        let mut w = TxWqe {
            ds: 0,
            inline_bytes: 0,
            pointers: 0,
            wqebbs: 0,
            fetched_bytes: 0,
            host_header_read: 0,
            host_payload_read: 0,
            nicmem_read: 0,
            cpu_nicmem_read: 0,
        };
        let covered = if inl > 0 && len <= inl {
            w.inline_bytes = len;
            len
        } else {
            w.inline_bytes = inl;
            inl
        };
        // Inline bytes that lie beyond the header segment are copied from the payload by the CPU.
        if has_payload && shape.payload_in_nicmem && covered > h {
            w.cpu_nicmem_read = covered.min(len) - h;
        }
        if covered < hdr_end {
            w.host_header_read = hdr_end - covered;
            w.pointers += 1;
        }
        if has_payload && covered < len {
            let n = len - covered.max(h);
            if shape.payload_in_nicmem {
                w.nicmem_read = n;
            } else {
                w.host_payload_read = n;
            }
            w.pointers += 1;
        }
        let inline_ds = w
            .inline_bytes
            .saturating_sub(ETH_SEG_INLINE_BYTES)
            .div_ceil(d.seg_size);
        w.ds = TX_FIXED_SEGS + inline_ds + w.pointers;
        let bytes = w.ds * d.seg_size;
        if bytes > d.max_wqe_bytes {
            return Err(format!(
                "Tx WQE of {bytes} B ({} inline bytes) exceeds max_wqe_bytes = {}",
                w.inline_bytes, d.max_wqe_bytes
            ));
        }
        w.wqebbs = bytes.div_ceil(d.wqebb);
        w.fetched_bytes = w.wqebbs * d.wqebb;
        Ok(w)
    }

    /// NIC fetches `bytes` of Tx WQEs (whole WQEBBs, one read per burst, split at MRRS).
    pub fn tx_wqe_fetch(&self, bytes: u32) -> Traffic {
        self.link.read(0, u64::from(bytes))
    }

    /// BlueFlame: the CPU pushes `bytes` of WQE over MMIO, one write per WQEBB
    /// (`64 + 24` down each).
    pub fn tx_wqe_push(&self, bytes: u32) -> Traffic {
        let bb = self.desc.wqebb;
        self.link
            .mmio_write(0, u64::from(bb))
            .times(u64::from(bytes.div_ceil(bb)))
    }

    /// NIC reads `len` bytes of packet data from an aligned host buffer: `Rq(len)`, `Rc(len)`.
    pub fn tx_data_read(&self, len: u32) -> Traffic {
        self.link.read(0, u64::from(len))
    }

    /// NIC reads `len` bytes of packet data from host address `addr`.
    pub fn tx_data_read_at(&self, addr: u64, len: u32) -> Traffic {
        self.link.read(addr, u64::from(len))
    }

    /// All Tx data reads a WQE implies (header remainder and host payload, each its own read).
    pub fn tx_data(&self, wqe: &TxWqe) -> Traffic {
        self.tx_data_read(wqe.host_header_read) + self.tx_data_read(wqe.host_payload_read)
    }

    /// NIC writes one Tx completion: `W(cqe_size)` up.
    pub fn tx_cqe_write(&self) -> Traffic {
        self.link.write(0, u64::from(self.desc.cqe_size))
    }

    /// NIC raises an MSI (28 B up).
    pub fn msi(&self) -> Traffic {
        self.link.msi()
    }
}
