//! Hardware profiles: every constant of the virtual NIC's accounting and timing model as a named,
//! documented field.
//!
//! A profile is a TOML file (`configs/profiles/*.toml`) with the sections `[nic]`,
//! `[nic.pcie]`, `[nic.descriptors]`, `[nic.nicmem]`, `[host]`, `[host.cycles]` and
//! `[host.cycles.nf]`. Every key has a default (the ConnectX-5 / Gen3 x16 / 100 GbE profile the
//! paper measured), so a file only needs the keys it changes; unknown keys are errors, so a typo
//! never silently falls back to a default. The shipped files nevertheless spell out every key,
//! each with a comment giving its source tag from `docs/reference/pcie-nic-model.md`
//! (pcie-model, pcie-bench data, PCIe spec, KV-Direct, nicmem §x, mlx5 PMD, VMA, derived,
//! assumption).
//!
//! Units are in the key names: `_gbps` is Gb/s, `_ns` nanoseconds, `_gbyte_s` GB/s; sizes
//! accept integers (bytes) or strings with binary units (`"256KiB"`, `"4MiB"`).
//!
//! Overrides (`--set nic.pcie.mps=128`) are applied by the run configuration to the TOML table
//! before [`HardwareProfile::from_table`] deserialises it, so validation covers them too.

use std::fmt;
use std::path::Path;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The PCIe efficiency η of the calibrated preset: measured ≥512 B transfers reach 94–95 % of
/// raw [derived from pcie-bench data].
pub const CALIBRATED_EFFICIENCY: f64 = 0.945;

/// Profiles compiled into the binary, by name: `(name, TOML text)`.
///
/// Lets the CLI accept `--profile cx6dx-gen4x16-200g` from any working directory.
pub const BUILTIN_PROFILES: &[(&str, &str)] = &[
    (
        "cx5-gen3x16-100g",
        include_str!("../../../configs/profiles/cx5-gen3x16-100g.toml"),
    ),
    (
        "cx6dx-gen4x16-200g",
        include_str!("../../../configs/profiles/cx6dx-gen4x16-200g.toml"),
    ),
    (
        "future-80mib",
        include_str!("../../../configs/profiles/future-80mib.toml"),
    ),
];

/// A complete hardware description: the NIC (link, descriptors, on-NIC memory) and the host
/// (LLC/DDIO, DRAM, CPU cycle costs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HardwareProfile {
    /// `[nic]`: the NIC and its wire, PCIe link, descriptors and on-NIC memory.
    pub nic: NicProfile,
    /// `[host]`: the host's memory system and CPU cost model.
    pub host: HostProfile,
}

/// `[nic]`: the NIC model and its Ethernet side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NicProfile {
    /// Human-readable model name, shown in reports.
    pub name: String,
    /// Line rate per port in Gb/s (100 for ConnectX-5 100 GbE).
    pub line_rate_gbps: f64,
    /// Number of Ethernet ports sharing the PCIe link.
    pub ports: u32,
    /// Preamble + start-of-frame delimiter bytes per frame on the wire (8) [pcie-model eth.py].
    pub preamble_sfd_bytes: u32,
    /// Inter-frame gap bytes per frame (12) [pcie-model eth.py].
    pub ifg_bytes: u32,
    /// Frame check sequence bytes, counted inside the frame length F (4) [pcie-model eth.py].
    pub fcs_bytes: u32,
    /// Minimum frame length F including FCS (64).
    pub min_frame_bytes: u32,
    /// How long the NIC deschedules a Tx ring whose buffer filled (≈ one PCIe RTT)
    /// [nicmem Fig. 3].
    pub tx_deschedule_ns: u64,
    /// The NIC's receive packet buffer per port: frames wait here for their DMA writes; a frame
    /// arriving while the PCIe upstream backlog would overflow it is dropped (`pcie_overrun`)
    /// \[assumption: ConnectX port buffers are configurable, a few hundred KiB\].
    pub rx_buffer: ByteSize,
    /// `[nic.pcie]`: the PCIe link.
    pub pcie: PcieProfile,
    /// `[nic.descriptors]`: mlx5-style descriptor and completion layout.
    pub descriptors: DescriptorProfile,
    /// `[nic.nicmem]`: on-NIC memory.
    pub nicmem: NicmemProfile,
}

impl Default for NicProfile {
    fn default() -> Self {
        NicProfile {
            name: "ConnectX-5 100GbE, PCIe Gen3 x16".to_string(),
            line_rate_gbps: 100.0,
            ports: 1,
            preamble_sfd_bytes: 8,
            ifg_bytes: 12,
            fcs_bytes: 4,
            min_frame_bytes: 64,
            tx_deschedule_ns: 550,
            rx_buffer: ByteSize(256 * KIB),
            pcie: PcieProfile::default(),
            descriptors: DescriptorProfile::default(),
            nicmem: NicmemProfile::default(),
        }
    }
}

/// Which chunk size a root complex uses for read completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CplChunk {
    /// MPS-sized completions: what Xeon E5 root complexes do [pcie-bench data].
    Mps,
    /// RCB-sized completions (older chipsets).
    Rcb,
}

/// The DLL efficiency η of the link: usable capacity per direction is `raw × η`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Efficiency {
    /// `η = 1 − 8/AckLimit − 8/FCGuide − 4/1538` with the PCIe spec's recommended ACK and
    /// UpdateFC rates for the link's gen, width and MPS [PCIe spec; pcie-model].
    Spec,
    /// η = [`CALIBRATED_EFFICIENCY`] (0.945) [derived from pcie-bench data].
    Calibrated,
    /// An explicit η in (0, 1].
    Fixed(f64),
}

impl Serialize for Efficiency {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Efficiency::Spec => s.serialize_str("spec"),
            Efficiency::Calibrated => s.serialize_str("calibrated"),
            Efficiency::Fixed(x) => s.serialize_f64(*x),
        }
    }
}

impl<'de> Deserialize<'de> for Efficiency {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Efficiency;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"spec\", \"calibrated\" or a number in (0, 1]")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Efficiency, E> {
                match v {
                    "spec" => Ok(Efficiency::Spec),
                    "calibrated" => Ok(Efficiency::Calibrated),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Efficiency, E> {
                Ok(Efficiency::Fixed(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Efficiency, E> {
                Ok(Efficiency::Fixed(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Efficiency, E> {
                Ok(Efficiency::Fixed(v as f64))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[nic.pcie]`: the PCIe link between NIC and host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PcieProfile {
    /// PCIe generation, 1–5 (TOML key `gen`).
    #[serde(rename = "gen")]
    pub generation: u8,
    /// Link width: 1, 2, 4, 8 or 16 lanes.
    pub lanes: u8,
    /// Maximum payload size in bytes (128–4096, power of two) [pcie-model default 256].
    pub mps: u32,
    /// Maximum read request size in bytes (128–4096, power of two) [pcie-model default 512].
    pub mrrs: u32,
    /// Read completion boundary in bytes (64 or 128) [PCIe spec].
    pub rcb: u32,
    /// Completion chunking: `"mps"` or `"rcb"` [pcie-bench data: Xeon E5 uses MPS].
    pub cpl_chunk: CplChunk,
    /// Bytes of overhead per memory-write TLP (24 with 64-bit addresses) [pcie-model].
    pub mwr_overhead: u32,
    /// Bytes of overhead per memory-read request TLP (24 with 64-bit addresses) [pcie-model].
    pub mrd_overhead: u32,
    /// Bytes of overhead per completion-with-data TLP (20) [pcie-model].
    pub cpld_overhead: u32,
    /// DLL efficiency: `"spec"`, `"calibrated"` or a number [PCIe spec; pcie-bench data].
    pub efficiency: Efficiency,
    /// Unloaded DMA-read round trip excluding serialisation, ns (550) [pcie-bench data: 546].
    pub rtt0_ns: u64,
    /// Time until a posted write is visible at the other end, ns (RTT0/2 = 275) \[derived\].
    pub posted_latency_ns: u64,
    /// Whether the NIC sits on the remote NUMA node (adds `remote_numa_adder_ns` to reads).
    pub numa_remote: bool,
    /// Read latency adder for a remote NUMA node, ns (107) [pcie-bench data].
    pub remote_numa_adder_ns: u64,
    /// Read latency adder for an IOTLB miss, ns (215–230; 220) [pcie-bench data].
    pub iotlb_miss_adder_ns: u64,
    /// Outstanding non-posted reads (tags): 32, 256 (8-bit) or 768 (10-bit) [PCIe spec].
    pub max_outstanding_reads: u32,
    /// DMA read-operation rate limit of the device in M ops/s; 0 = unlimited
    /// [pcie-bench data: NFP 62.3].
    pub max_read_mops: f64,
    /// DMA write-operation rate limit of the device in M ops/s; 0 = unlimited
    /// [pcie-bench data: NFP 47.4].
    pub max_write_mops: f64,
}

impl Default for PcieProfile {
    fn default() -> Self {
        PcieProfile {
            generation: 3,
            lanes: 16,
            mps: 256,
            mrrs: 512,
            rcb: 64,
            cpl_chunk: CplChunk::Mps,
            mwr_overhead: 24,
            mrd_overhead: 24,
            cpld_overhead: 20,
            efficiency: Efficiency::Calibrated,
            rtt0_ns: 550,
            posted_latency_ns: 275,
            numa_remote: false,
            remote_numa_adder_ns: 107,
            iotlb_miss_adder_ns: 220,
            max_outstanding_reads: 256,
            max_read_mops: 0.0,
            max_write_mops: 0.0,
        }
    }
}

/// How `txq_inline_min` is rounded by the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InlineRounding {
    /// Stock mlx5 PMD: N ≤ 18 → 18, else 18 + 16·⌈(N − 18)/16⌉ (64 → 66) [mlx5 PMD].
    Mlx5,
    /// Use N as given (the nicmem fork, commit 19f2486d3) [mlx5 PMD].
    Exact,
}

/// `[nic.descriptors]`: mlx5-style work queue entries, completions and batching.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DescriptorProfile {
    /// Rx WQEs fetched per descriptor read (16) [assumption in the reference, §3].
    pub rx_wqe_fetch_batch: u32,
    /// Size of one WQE segment (Rx scatter entry, Tx DS) in bytes (16) [mlx5 PMD].
    pub seg_size: u32,
    /// Tx WQE building block in bytes (64) [mlx5 PMD].
    pub wqebb: u32,
    /// Largest Tx WQE in bytes (960) [mlx5 PMD].
    pub max_wqe_bytes: u32,
    /// One Tx completion per this many WQEs (32, `MLX5_TX_COMP_THRESH`) [mlx5 PMD].
    pub tx_completion_every: u32,
    /// Tx burst: WQEs per doorbell and per WQE fetch (32) [nicmem artifact].
    pub tx_burst: u32,
    /// CQE size in bytes (64; 128 with `rxq_cqe_pad_en`) [mlx5 PMD].
    pub cqe_size: u32,
    /// Rx CQE compression (off in the nicmem runs) [nicmem artifact].
    pub cqe_compression: bool,
    /// Mini-CQEs packed per CQE slot when compressing (8) [mlx5 PMD].
    pub mini_cqes_per_slot: u32,
    /// Rounding of `txq_inline_min`: `"mlx5"` or `"exact"` [mlx5 PMD].
    pub inline_rounding: InlineRounding,
    /// Default Tx inline size I in bytes for the inlining mode (64) [nicmem artifact].
    pub txq_inline_min: u32,
    /// Largest inline size accepted (930) [mlx5 PMD].
    pub inline_max: u32,
    /// Default header split offset H in bytes (64) [nicmem §5].
    pub split_offset: u32,
    /// Bytes of the Tx doorbell MMIO write (8, write-combined) [mlx5 PMD].
    pub doorbell_bytes: u32,
    /// BlueFlame: push WQEs over MMIO (64 + 24 B per WQEBB) instead of the NIC fetching them
    /// [mlx5 PMD].
    pub blueflame: bool,
}

impl Default for DescriptorProfile {
    fn default() -> Self {
        DescriptorProfile {
            rx_wqe_fetch_batch: 16,
            seg_size: 16,
            wqebb: 64,
            max_wqe_bytes: 960,
            tx_completion_every: 32,
            tx_burst: 32,
            cqe_size: 64,
            cqe_compression: false,
            mini_cqes_per_slot: 8,
            inline_rounding: InlineRounding::Mlx5,
            txq_inline_min: 64,
            inline_max: 930,
            split_offset: 64,
            doorbell_bytes: 8,
            blueflame: false,
        }
    }
}

/// `[nic.nicmem]`: the on-NIC SRAM exposed as nicmem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NicmemProfile {
    /// Capacity exposed to software (256 KiB on the paper's CX-5) [nicmem §5].
    pub capacity: ByteSize,
    /// Payload buffer size carved from nicmem (2 KiB → 128 buffers at 256 KiB) [reference §6].
    pub buffer_size: ByteSize,
    /// SRAM bandwidth in Gb/s [unpublished; assumption].
    pub bandwidth_gbps: f64,
    /// SRAM access latency from the NIC's DMA engine, ns [unpublished; assumption].
    pub latency_ns: u64,
    /// CPU write throughput into nicmem, bytes per cycle (≈ 5.3) [nicmem §6.5, artifact fig14].
    pub cpu_write_bytes_per_cycle: f64,
    /// CPU read throughput from nicmem, bytes per cycle (≈ 0.05) [nicmem §6.5, artifact fig14].
    pub cpu_read_bytes_per_cycle: f64,
}

impl Default for NicmemProfile {
    fn default() -> Self {
        NicmemProfile {
            capacity: ByteSize(256 * KIB),
            buffer_size: ByteSize(2 * KIB),
            bandwidth_gbps: 400.0,
            latency_ns: 50,
            cpu_write_bytes_per_cycle: 5.3,
            cpu_read_bytes_per_cycle: 0.05,
        }
    }
}

impl NicmemProfile {
    /// Payload buffers that fit in nicmem: `capacity / buffer_size` (128 at 256 KiB / 2 KiB).
    pub fn max_inflight_payloads(&self) -> u64 {
        self.capacity.0 / self.buffer_size.0.max(1)
    }
}

/// `[host]`: the host's memory system and CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostProfile {
    /// Last-level cache size (22 MiB on the Xeon Silver 4216) [nicmem §6.1].
    pub llc_size: ByteSize,
    /// LLC associativity (11 ways) [nicmem §6.1].
    pub llc_ways: u32,
    /// LLC ways DMA writes may allocate into (2 by default) [nicmem §3.4].
    pub ddio_ways: u32,
    /// Peak DRAM bandwidth in GB/s: 4 channels × DDR4-2400 × 8 B = 76.8 (the paper's DDR4-2933
    /// DIMMs run at the Xeon Silver 4216's 2400 MT/s) \[derived; Intel ARK\]. The memory
    /// contention model reads DRAM utilisation against it.
    pub dram_bandwidth_gbyte_s: f64,
    /// The fraction of [`HostProfile::dram_bandwidth_gbyte_s`] DRAM sustains at saturation
    /// (refresh, bank conflicts, turnarounds): 0.80, the Intel MLC all-reads saturation of the
    /// Cascade Lake machine whose loaded-latency curve the profile carries against its DIMMs' pin
    /// rate \[derived; Intel MLC\]. The curve is read at the host's traffic over this sustained
    /// bandwidth (see [`super::dram`]).
    pub dram_sustained_fraction: f64,
    /// The share of that bandwidth DRAM sustains for random 64 B accesses: 14.4 GB/s of random
    /// 64 B reads against 60 GB/s sequential on one socket, 0.24 [KV-Direct]; the nicmem paper's
    /// "fewer than 10 random reads per packet saturate DRAM" [nicmem §3.3] is the same effect. A
    /// random line (an NF's flow-table access) holds the DRAM timeline as long as `64 /
    /// dram_random_fraction` sequential bytes; packet buffers and completion rings move in runs.
    pub dram_random_fraction: f64,
    /// Extra DMA-read latency on an LLC miss at an idle memory system, ns (40) [pcie-bench
    /// data]; under load it grows with [`HostProfile::dram_loaded_latency`].
    pub dram_latency_adder_ns: u64,
    /// DRAM read latency under load: `[bandwidth GB/s, latency ns]` points of a published
    /// loaded-latency measurement (Intel MLC `--loaded_latency` on a Cascade Lake Xeon), in
    /// increasing bandwidth; the last point is that machine's saturation. The model reads the
    /// curve at the same fraction of saturation as this host's DRAM traffic is of what it
    /// sustains ([`HostProfile::dram_sustained_fraction`] of
    /// [`HostProfile::dram_bandwidth_gbyte_s`]; see [`super::dram`]).
    pub dram_loaded_latency: Vec<[f64; 2]>,
    /// DRAM saturation bandwidth by the traffic's write share: `[write fraction, GB/s]` points of
    /// a published Intel MLC `--max_bandwidth` run (ALL Reads, 3:1, 2:1, 1:1 Reads-Writes at
    /// the memory controller) of a Cascade Lake Xeon, the first all reads. A written byte holds
    /// DRAM as long as the fitted number of read bytes (read/write turnarounds), so write-backs
    /// move the loaded-latency curve's knee to a lower bandwidth (see [`super::dram`]).
    pub dram_read_write_bandwidth: Vec<[f64; 2]>,
    /// The L2 spatial (adjacent-line) prefetcher is on (the BIOS default): it completes every
    /// line fetched into L2 with its pair to a 128 B aligned chunk (Intel 64 and IA-32
    /// Architectures Optimization Reference Manual, "Spatial Prefetcher"), so each of an NF's
    /// random table reads moves a second line from the same DRAM row.
    pub adjacent_line_prefetch: bool,
    /// Core clock in GHz (2.1, Turbo off) [nicmem §6.1].
    pub cpu_ghz: f64,
    /// Cores per socket (16) [nicmem §6.1].
    pub cores: u32,
    /// `[host.cycles]`: the CPU cost model.
    pub cycles: CycleModel,
}

impl Default for HostProfile {
    fn default() -> Self {
        HostProfile {
            llc_size: ByteSize(22 * MIB),
            llc_ways: 11,
            ddio_ways: 2,
            dram_bandwidth_gbyte_s: 76.8,
            dram_sustained_fraction: 0.8,
            dram_random_fraction: 0.24,
            dram_latency_adder_ns: 40,
            dram_loaded_latency: super::dram::CASCADE_LAKE_MLC_LOADED_LATENCY.to_vec(),
            dram_read_write_bandwidth: super::dram::CASCADE_LAKE_MLC_READ_WRITE_BANDWIDTH.to_vec(),
            adjacent_line_prefetch: true,
            cpu_ghz: 2.1,
            cores: 16,
            cycles: CycleModel::default(),
        }
    }
}

/// `[host.cycles]`: CPU cycles charged per packet and per event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CycleModel {
    /// Driver Rx + Tx cost per packet, excluding the NF \[assumption\].
    pub driver_per_packet: u32,
    /// Cost of one Tx doorbell (record write, barrier, MMIO) [unpublished; assumption].
    pub doorbell: u32,
    /// Cost of one NF memory access that hits the LLC \[assumption\]; a DRAM access costs the
    /// loaded DRAM latency of [`HostProfile::dram_loaded_latency`] instead.
    pub llc_access: u32,
    /// Cache lines of a received packet's header an NF reads first (Ethernet + IPv4 + L4
    /// headers, 42–54 B, sit in the buffer's first 64 B line) \[derived\]. Each one that DDIO
    /// lost costs a DRAM access, and a burst's lost lines overlap ([`CycleModel::fill_buffers`]).
    pub header_lines: u32,
    /// L1D misses one core keeps in flight (its line fill buffers): 12 on Skylake, up from 10 on
    /// Broadwell (measured; Intel does not publish the Skylake figure) \[derived\]. The paper's
    /// FastClick prefetches every received packet's header while it turns a burst into a batch
    /// (DPDK's l3fwd does the same), so a burst's lost header lines are fetched together: the core
    /// waits one DRAM access per `fill_buffers` of them, not one per line.
    pub fill_buffers: u32,
    /// Lines of a received packet's header the pipeline rewrites before sending it (the MAC
    /// rewrite every forwarding pipeline of the paper does, FastClick's and l3fwd's; the NAT's
    /// and the LB's address rewrites share the line) \[derived\]. A header DDIO lost was written
    /// back once; after the core read it back from DRAM and rewrote it, it is written back again.
    pub header_writes: u32,
    /// Cache lines of per-packet state a core keeps in the LLC and touches once per packet: the
    /// buffer's `rte_mbuf` metadata, 128 B = two lines, written on Rx and read on the Tx free
    /// \[derived; DPDK rte_mbuf\]. Over every Rx and Tx ring entry of the port it is the cores'
    /// LLC working set; packet data DDIO keeps in the LLC leaves less room for it, and each line
    /// evicted costs a DRAM access instead of an LLC hit (see [`super::ddio`]).
    pub meta_lines: u32,
    /// `[host.cycles.nf]`: base cycles per packet of each NF, excluding its memory accesses.
    pub nf: NfCycles,
    /// `[host.cycles.nf_dram_reads]`: DRAM reads per packet of each NF's own state (flow-table
    /// lookups at the paper's 10 M flows, far beyond the LLC), each charged the loaded DRAM
    /// latency; a function not listed reads none.
    pub nf_dram_reads: NfCycles,
    /// `[host.cycles.nf_dram_writes]`: cache lines per packet of each NF's own state it dirties
    /// (a flow entry's last-seen time or counter, updated per packet) in a table far beyond the
    /// LLC, so each is written back to DRAM when evicted; booked as DRAM traffic, not as core
    /// cycles (a store retires through the store buffer); a function not listed writes none.
    pub nf_dram_writes: NfCycles,
}

impl Default for CycleModel {
    fn default() -> Self {
        CycleModel {
            driver_per_packet: 80,
            doorbell: 150,
            llc_access: 50,
            header_lines: 1,
            fill_buffers: 12,
            header_writes: 1,
            meta_lines: 2,
            nf: default_nf_cycles(),
            nf_dram_reads: default_nf_table("nf_dram_reads"),
            nf_dram_writes: default_nf_table("nf_dram_writes"),
        }
    }
}

/// `[host.cycles.nf]`: base cycles per packet of each network function, by the function's
/// canonical name (`nat = 1330`); its DRAM reads are charged separately
/// ([`CycleModel::nf_dram_reads`], at the loaded DRAM latency). The set of functions is open: each
/// one registers its key (`nfs`' registry), and the run configuration refuses keys of functions
/// it does not know and, in virtual time, a pipeline function without a cost here. A profile
/// that leaves out `[host.cycles.nf]` gets the default profile's table
/// ([`default_nf_cycles`]); one that has the table gets exactly what it lists.
pub type NfCycles = std::collections::BTreeMap<String, u32>;

/// The `[host.cycles.nf]` table of the default built-in profile (the first of
/// [`BUILTIN_PROFILES`]): the costs a profile without the table takes, read from the profile
/// file itself so that no function is named in code here.
pub fn default_nf_cycles() -> NfCycles {
    default_nf_table("nf")
}

/// The `[host.cycles.<table>]` per-function table of the default built-in profile.
fn default_nf_table(table: &str) -> NfCycles {
    let nf = || -> Option<NfCycles> {
        let t: toml::Table = BUILTIN_PROFILES.first()?.1.parse().ok()?;
        t.get("host")?
            .get("cycles")?
            .get(table)?
            .clone()
            .try_into()
            .ok()
    };
    nf().unwrap_or_default()
}

/// One kibibyte.
pub const KIB: u64 = 1024;
/// One mebibyte.
pub const MIB: u64 = 1024 * KIB;
/// One gibibyte.
pub const GIB: u64 = 1024 * MIB;

/// A size in bytes; in TOML an integer or a string with a binary unit (`"256KiB"`, `"4 MiB"`,
/// `"80MiB"`, `"1GiB"`, `"512B"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }

    /// Parses `"256KiB"`-style strings (units B, KiB, MiB, GiB; a bare number is bytes).
    pub fn parse(s: &str) -> Result<ByteSize, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("invalid size `{s}`: expected e.g. 2048, \"256KiB\", \"4MiB\""))?;
        let mul = match unit.trim() {
            "" | "B" => 1,
            "KiB" => KIB,
            "MiB" => MIB,
            "GiB" => GIB,
            u => {
                return Err(format!(
                    "invalid size unit `{u}` in `{s}`: allowed B, KiB, MiB, GiB"
                ));
            }
        };
        n.checked_mul(mul)
            .map(ByteSize)
            .ok_or_else(|| format!("size `{s}` overflows"))
    }
}

impl fmt::Display for ByteSize {
    /// The largest binary unit that divides the size exactly (`262144` → `256KiB`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b != 0 && b.is_multiple_of(GIB) {
            write!(f, "{}GiB", b / GIB)
        } else if b != 0 && b.is_multiple_of(MIB) {
            write!(f, "{}MiB", b / MIB)
        } else if b != 0 && b.is_multiple_of(KIB) {
            write!(f, "{}KiB", b / KIB)
        } else {
            write!(f, "{b}B")
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size: bytes as an integer or a string like \"256KiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

fn check(ok: bool, key: &str, allowed: &str, got: impl fmt::Display) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("invalid `{key}` = {got}: allowed {allowed}"))
    }
}

fn pow2_in(v: u32, lo: u32, hi: u32) -> bool {
    v.is_power_of_two() && (lo..=hi).contains(&v)
}

impl HardwareProfile {
    /// Parses and validates a profile from TOML text.
    pub fn from_toml_str(text: &str) -> Result<Self, String> {
        let table: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
        Self::from_table(table)
    }

    /// Builds and validates a profile from an already-parsed (and possibly overridden) table.
    pub fn from_table(table: toml::Table) -> Result<Self, String> {
        let p: HardwareProfile = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| e.message().to_string())?;
        p.validate()?;
        Ok(p)
    }

    /// Loads and validates a profile file; errors name the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, String> {
        let path = path.as_ref();
        let text = crate::textfile::read_bounded(path, crate::textfile::MAX_TEXT_FILE)
            .map_err(|e| format!("{}: hardware profile: {e}", path.display()))?;
        Self::from_toml_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A profile compiled into the binary by name (see [`BUILTIN_PROFILES`]).
    pub fn builtin(name: &str) -> Result<Self, String> {
        let (_, text) = BUILTIN_PROFILES
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| {
                let names: Vec<&str> = BUILTIN_PROFILES.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown built-in profile `{name}`; allowed: {}",
                    names.join(", ")
                )
            })?;
        Self::from_toml_str(text).map_err(|e| format!("built-in profile {name}: {e}"))
    }

    /// The profile as TOML text (round-trips through [`HardwareProfile::from_toml_str`]).
    pub fn to_toml_string(&self) -> String {
        toml::to_string(self).expect("a profile always serialises")
    }

    /// Checks every value against its allowed range; the error names the key and the allowed
    /// values.
    pub fn validate(&self) -> Result<(), String> {
        let n = &self.nic;
        check(
            n.line_rate_gbps.is_finite() && n.line_rate_gbps > 0.0,
            "nic.line_rate_gbps",
            "> 0",
            n.line_rate_gbps,
        )?;
        check(n.ports >= 1, "nic.ports", ">= 1", n.ports)?;
        check(
            n.rx_buffer.0 >= 2048,
            "nic.rx_buffer",
            ">= 2048 bytes (at least one frame)",
            n.rx_buffer,
        )?;
        check(
            n.min_frame_bytes > n.fcs_bytes,
            "nic.min_frame_bytes",
            "> nic.fcs_bytes",
            n.min_frame_bytes,
        )?;
        let p = &n.pcie;
        check(
            (1..=5).contains(&p.generation),
            "nic.pcie.gen",
            "1, 2, 3, 4, 5 (Gen6 FLIT mode is not modelled)",
            p.generation,
        )?;
        check(
            matches!(p.lanes, 1 | 2 | 4 | 8 | 16),
            "nic.pcie.lanes",
            "1, 2, 4, 8, 16",
            p.lanes,
        )?;
        let sizes = "128, 256, 512, 1024, 2048, 4096";
        check(pow2_in(p.mps, 128, 4096), "nic.pcie.mps", sizes, p.mps)?;
        check(pow2_in(p.mrrs, 128, 4096), "nic.pcie.mrrs", sizes, p.mrrs)?;
        check(matches!(p.rcb, 64 | 128), "nic.pcie.rcb", "64, 128", p.rcb)?;
        if let Efficiency::Fixed(x) = p.efficiency {
            check(
                x.is_finite() && x > 0.0 && x <= 1.0,
                "nic.pcie.efficiency",
                "\"spec\", \"calibrated\" or a number in (0, 1]",
                x,
            )?;
        }
        check(
            p.max_outstanding_reads >= 1,
            "nic.pcie.max_outstanding_reads",
            ">= 1 (32, 256, 768 are the PCIe tag limits)",
            p.max_outstanding_reads,
        )?;
        for (key, v) in [
            ("nic.pcie.max_read_mops", p.max_read_mops),
            ("nic.pcie.max_write_mops", p.max_write_mops),
        ] {
            check(v.is_finite() && v >= 0.0, key, ">= 0 (0 = unlimited)", v)?;
        }
        let d = &n.descriptors;
        for (key, v) in [
            ("nic.descriptors.rx_wqe_fetch_batch", d.rx_wqe_fetch_batch),
            ("nic.descriptors.tx_completion_every", d.tx_completion_every),
            ("nic.descriptors.tx_burst", d.tx_burst),
            ("nic.descriptors.mini_cqes_per_slot", d.mini_cqes_per_slot),
            ("nic.descriptors.seg_size", d.seg_size),
            ("nic.descriptors.cqe_size", d.cqe_size),
        ] {
            check(v >= 1, key, ">= 1", v)?;
        }
        check(
            d.wqebb >= d.seg_size && d.wqebb.is_multiple_of(d.seg_size),
            "nic.descriptors.wqebb",
            "a multiple of seg_size",
            d.wqebb,
        )?;
        check(
            d.max_wqe_bytes >= d.wqebb,
            "nic.descriptors.max_wqe_bytes",
            ">= wqebb",
            d.max_wqe_bytes,
        )?;
        check(
            d.txq_inline_min <= d.inline_max,
            "nic.descriptors.txq_inline_min",
            "<= nic.descriptors.inline_max",
            d.txq_inline_min,
        )?;
        check(
            d.split_offset >= 1,
            "nic.descriptors.split_offset",
            ">= 1",
            d.split_offset,
        )?;
        let m = &n.nicmem;
        check(
            m.buffer_size.0 >= 1,
            "nic.nicmem.buffer_size",
            ">= 1 byte",
            m.buffer_size,
        )?;
        for (key, v) in [
            ("nic.nicmem.bandwidth_gbps", m.bandwidth_gbps),
            (
                "nic.nicmem.cpu_write_bytes_per_cycle",
                m.cpu_write_bytes_per_cycle,
            ),
            (
                "nic.nicmem.cpu_read_bytes_per_cycle",
                m.cpu_read_bytes_per_cycle,
            ),
        ] {
            check(v.is_finite() && v > 0.0, key, "> 0", v)?;
        }
        let h = &self.host;
        check(h.llc_ways >= 1, "host.llc_ways", ">= 1", h.llc_ways)?;
        check(
            h.ddio_ways <= h.llc_ways,
            "host.ddio_ways",
            "0 ..= host.llc_ways",
            h.ddio_ways,
        )?;
        for (key, v) in [
            ("host.dram_bandwidth_gbyte_s", h.dram_bandwidth_gbyte_s),
            ("host.cpu_ghz", h.cpu_ghz),
        ] {
            check(v.is_finite() && v > 0.0, key, "> 0", v)?;
        }
        check(h.cores >= 1, "host.cores", ">= 1", h.cores)?;
        check(
            h.dram_sustained_fraction > 0.0 && h.dram_sustained_fraction <= 1.0,
            "host.dram_sustained_fraction",
            "0 < x <= 1",
            h.dram_sustained_fraction,
        )?;
        check(
            h.dram_random_fraction > 0.0 && h.dram_random_fraction <= 1.0,
            "host.dram_random_fraction",
            "0 < x <= 1",
            h.dram_random_fraction,
        )?;
        super::dram::LoadedLatency::new(&h.dram_loaded_latency)
            .map_err(|e| format!("invalid `host.dram_loaded_latency`: {e}"))?;
        super::dram::write_cost(&h.dram_read_write_bandwidth)
            .map_err(|e| format!("invalid `host.dram_read_write_bandwidth`: {e}"))?;
        check(
            h.cycles.fill_buffers >= 1,
            "host.cycles.fill_buffers",
            ">= 1",
            h.cycles.fill_buffers,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped(name: &str) -> HardwareProfile {
        let path = format!(
            "{}/../configs/profiles/{name}.toml",
            env!("CARGO_MANIFEST_DIR")
        );
        HardwareProfile::load(&path).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn default_file_equals_default_profile() {
        let p = shipped("cx5-gen3x16-100g");
        assert_eq!(p, HardwareProfile::default());
        assert_eq!(p.nic.pcie.generation, 3);
        assert_eq!(p.nic.pcie.lanes, 16);
        assert_eq!(p.nic.pcie.mps, 256);
        assert_eq!(p.nic.pcie.mrrs, 512);
        assert_eq!(p.nic.pcie.efficiency, Efficiency::Calibrated);
        assert_eq!(p.nic.line_rate_gbps, 100.0);
        assert_eq!(p.nic.nicmem.capacity, ByteSize(256 * KIB));
        assert_eq!(p.nic.nicmem.max_inflight_payloads(), 128);
        assert_eq!(p.nic.descriptors.rx_wqe_fetch_batch, 16);
        assert_eq!(p.nic.descriptors.tx_completion_every, 32);
        assert_eq!(p.host.llc_size, ByteSize(22 * MIB));
        assert_eq!((p.host.llc_ways, p.host.ddio_ways), (11, 2));
    }

    #[test]
    fn cx6dx_file() {
        let p = shipped("cx6dx-gen4x16-200g");
        assert_eq!(p.nic.pcie.generation, 4);
        assert_eq!(p.nic.pcie.lanes, 16);
        assert_eq!(p.nic.line_rate_gbps, 200.0);
        assert_eq!(p.nic.nicmem.capacity, ByteSize(4 * MIB));
        assert!(p.nic.name.contains("ConnectX-6 Dx"));
    }

    #[test]
    fn future_file() {
        let p = shipped("future-80mib");
        assert_eq!(p.nic.nicmem.capacity, ByteSize(80 * MIB));
        assert_eq!(p.nic.nicmem.max_inflight_payloads(), 40 * 1024);
        assert_eq!(p.nic.pcie.generation, 4);
        assert_eq!(p.nic.line_rate_gbps, 200.0);
    }

    #[test]
    fn builtins_match_files() {
        for (name, _) in BUILTIN_PROFILES {
            assert_eq!(HardwareProfile::builtin(name).unwrap(), shipped(name));
        }
        assert!(
            HardwareProfile::builtin("nope")
                .unwrap_err()
                .contains("cx5-gen3x16-100g")
        );
    }

    #[test]
    fn shipped_files_comment_every_key_with_a_source() {
        for (name, text) in BUILTIN_PROFILES {
            for line in text.lines() {
                let l = line.trim();
                if l.is_empty() || l.starts_with('#') || l.starts_with('[') {
                    continue;
                }
                assert!(
                    l.contains('#') && l.contains('['),
                    "{name}: key without a source tag comment: {l}"
                );
            }
        }
    }

    #[test]
    fn empty_text_is_the_default_and_round_trips() {
        let p = HardwareProfile::from_toml_str("").unwrap();
        assert_eq!(p, HardwareProfile::default());
        let text = p.to_toml_string();
        assert_eq!(HardwareProfile::from_toml_str(&text).unwrap(), p);
        let mut q = p.clone();
        q.nic.pcie.efficiency = Efficiency::Fixed(0.9);
        assert_eq!(
            HardwareProfile::from_toml_str(&q.to_toml_string()).unwrap(),
            q
        );
    }

    #[test]
    fn efficiency_forms() {
        let p = HardwareProfile::from_toml_str("[nic.pcie]\nefficiency = \"spec\"").unwrap();
        assert_eq!(p.nic.pcie.efficiency, Efficiency::Spec);
        let p = HardwareProfile::from_toml_str("[nic.pcie]\nefficiency = 0.9").unwrap();
        assert_eq!(p.nic.pcie.efficiency, Efficiency::Fixed(0.9));
        let p = HardwareProfile::from_toml_str("[nic.pcie]\nefficiency = 1").unwrap();
        assert_eq!(p.nic.pcie.efficiency, Efficiency::Fixed(1.0));
        let e = HardwareProfile::from_toml_str("[nic.pcie]\nefficiency = \"fast\"").unwrap_err();
        assert!(e.contains("spec"), "{e}");
        let e = HardwareProfile::from_toml_str("[nic.pcie]\nefficiency = 1.5").unwrap_err();
        assert!(e.contains("nic.pcie.efficiency"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let e = HardwareProfile::from_toml_str("[nic.pcie]\nmsp = 256").unwrap_err();
        assert!(e.contains("msp"), "{e}");
        let e = HardwareProfile::from_toml_str("[nic.pcie]\nmps = 300").unwrap_err();
        assert!(e.contains("nic.pcie.mps") && e.contains("4096"), "{e}");
        let e = HardwareProfile::from_toml_str("[nic.pcie]\ngen = 6").unwrap_err();
        assert!(e.contains("nic.pcie.gen"), "{e}");
        for bad in ["0.0", "1.5"] {
            let e =
                HardwareProfile::from_toml_str(&format!("[host]\ndram_random_fraction = {bad}"))
                    .unwrap_err();
            assert!(e.contains("host.dram_random_fraction"), "{e}");
        }
        let e = HardwareProfile::from_toml_str("[nic.nicmem]\ncapacity = \"4MB\"").unwrap_err();
        assert!(e.contains("MiB"), "{e}");
        let e = HardwareProfile::from_toml_str("[host]\nddio_ways = 12").unwrap_err();
        assert!(e.contains("host.ddio_ways"), "{e}");
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(ByteSize::parse("256KiB"), Ok(ByteSize(262_144)));
        assert_eq!(ByteSize::parse("4 MiB"), Ok(ByteSize(4 * MIB)));
        assert_eq!(ByteSize::parse("2048"), Ok(ByteSize(2048)));
        assert_eq!(ByteSize::parse("1GiB"), Ok(ByteSize(GIB)));
        assert!(ByteSize::parse("KiB").is_err());
        assert_eq!(ByteSize(80 * MIB).to_string(), "80MiB");
        assert_eq!(ByteSize(1500).to_string(), "1500B");
        let p = HardwareProfile::from_toml_str("[nic.nicmem]\ncapacity = 65536").unwrap();
        assert_eq!(p.nic.nicmem.capacity, ByteSize(64 * KIB));
    }
}
