//! The traffic generator: Ethernet/IPv4/UDP-or-TCP frames carrying a [`Signature`] and the
//! sequence-dependent pattern, as a [`FrameSource`] a port's wire side can pull from.
//!
//! **Flows.** Flow `i` of `flows` takes each header field from its own range, by field index
//! `i % count` (`addr_mode = "increment"`, TRex's `inc` variables moving in lock step) or by a
//! keyed hash of `i` into the range (`"random"`, RFC 4814 pseudorandom ports and addresses, the
//! same value every time flow `i` is sent): source IP from `src_ip` over `src_ip_count`
//! addresses (default: one per flow, the paper's 4.13 M sources), destination IP from `dst_ip`
//! over `dst_ip_count` (default 4), source and destination ports over `src_port_count` /
//! `dst_port_count` (default 1: Scapy's 53 -> 53 as in the paper's profile).
//!
//! **Flow popularity** (`flow_dist`): round robin (default; consecutive frames belong to
//! different flows, one frame each), uniform random, or Zipf-skewed (`"zipf:1.0"`), drawn from a
//! precomputed alias table in O(1) per frame.
//!
//! **Sizes**: one `frame_size`, or a `size_mix` (`"imix"`, `"64:7,594:4,1518:1"`, ...) played as a
//! precomputed smooth schedule so every stretch of frames carries the mix's proportions.
//!
//! **Timestamps** (`timestamps = true`): frames carry the v2 signature with the departure time
//! (see [`crate::signature`]); from [`FrameSource::next_frame`] that is the process wall clock
//! ([`crate::rate::wall_ns`]), from [`Generator::produce_at`] whatever the caller passes (a
//! pacer's intended departure time, or a virtual clock).
//!
//! Cost per frame: copy the header template, write the two addresses (and ports when they vary),
//! the IPv4 checksum, the signature, and `memcpy` the pattern. **Deviation from the foundation
//! issue**, which asked for one precomputed header template per flow: the paper's default is
//! 10 M flows (4.13 M source addresses in its TRex profile), which would be 540 MB of templates
//! and a cache miss per frame. Instead there is one template per frame size plus the
//! ones'-complement sum of its constant IPv4 words; the per-frame IPv4 checksum adds the four
//! address words to that sum (a handful of adds, no loop). The optional UDP checksum, and the
//! TCP checksum (always written, TCP has no "no checksum" value), are equally O(1): the pattern
//! region's sum depends only on `seq % 251`, so its 251 possible values are precomputed per size.
//! Round-robin flows with incrementing fields use per-field counters (no division); other
//! choices use multiply-shift reductions ([`crate::dist::FastMod`]), never a division.
//!
//! Counters ([`GenCounters`]) are published with a relaxed store per frame (a plain `mov` to a
//! line only this core writes), so they are exact at every moment and no "final flush" is needed
//! when a run ends by time. The stop flag is read every [`STOP_CHECK_EVERY`] frames.
//!
//! **Batches** ([`Generator::batch`], a [`FrameBatch`]) write the same frames for loops that
//! write a burst back to back (a DPDK Tx burst, `pktgen dpdk-gen`): the count and the stop flag
//! are checked once per batch, the per-frame state stays in registers, and the counters are
//! published when the batch ends. Frames are byte-identical to `produce_at`'s (pinned by a test
//! against hashes taken before either was optimised).

use crate::dist::{AliasTable, FastMod, FlowDist, Rng, SizeMix, fastrange, mix64, zipf_weights};
use crate::signature::{L4Proto, PATTERN, PATTERN_PERIOD, SIGNATURE_LEN, Signature};
use dataplane::link::{FrameSource, MAX_WIRE_FRAME, batch_step};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use wire::checksum::{finish, ones_sum};
use wire::ethernet::{ETH_HLEN, ETHERTYPE_IPV4};
use wire::ipv4::IPV4_HLEN;
use wire::tcp::TCP_HLEN;
use wire::udp::UDP_HLEN;

/// Length of the Ethernet FCS, counted in `frame_size` but not generated (pcap convention).
pub const FCS_LEN: u32 = 4;
/// Smallest frame size (RFC 2544 / Ethernet minimum, FCS included).
pub const MIN_FRAME_SIZE: u32 = 64;
/// Largest frame size: the largest wire frame plus the FCS.
pub const MAX_FRAME_SIZE: u32 = MAX_WIRE_FRAME as u32 + FCS_LEN;
/// Largest number of streams the checking sink tracks; stream ids are `0..MAX_STREAMS`.
pub const MAX_STREAMS: u16 = 256;
/// The stop flag is read once per this many frames.
pub const STOP_CHECK_EVERY: u64 = 256;
/// Largest flow count with a non-round-robin `flow_dist` (the alias table takes 8 B per flow).
pub const MAX_RANDOM_FLOWS: u32 = 1 << 25;

/// An Ethernet MAC address, written `"02:00:00:00:00:01"` in configs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl FromStr for MacAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("`{s}` is not a MAC address (expected six hex bytes like 02:00:00:00:00:01)")
        };
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in &mut out {
            let p = parts.next().ok_or_else(bad)?;
            if p.len() != 2 {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Self(out))
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = MacAddr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a MAC address like \"02:00:00:00:00:01\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<MacAddr, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// How a flow's header fields are taken from their ranges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AddrMode {
    /// Field index `flow % count`: consecutive flows get consecutive values.
    #[default]
    Increment,
    /// Field index from a keyed hash of the flow: pseudorandom but fixed per flow (RFC 4814).
    Random,
}

/// What to generate. Deserialised from a config table (unknown keys rejected; every key has a
/// default, see [`GeneratorConfig::default`]); check with [`GeneratorConfig::validate`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GeneratorConfig {
    /// Frame size in bytes **including** the 4-byte FCS (RFC 2544 convention), 64..=16388; the
    /// generator emits `frame_size - 4` bytes. TCP needs at least 74. Ignored with `size_mix`.
    pub frame_size: u32,
    /// Number of distinct flows (5-tuples); at least 1.
    pub flows: u32,
    /// Frames to generate; `None` (key absent) = until stopped.
    pub count: Option<u64>,
    /// Transport protocol: `"udp"` or `"tcp"`.
    pub proto: L4Proto,
    /// Stream id written into every signature, `0..256`; the sink tracks sequence numbers per
    /// stream.
    pub stream: u16,
    /// Compute the UDP checksum (default off: 0 = "no checksum", RFC 768). TCP checksums are
    /// always computed.
    pub udp_checksum: bool,
    /// Source MAC of every frame.
    pub src_mac: MacAddr,
    /// Destination MAC of every frame.
    pub dst_mac: MacAddr,
    /// First source IP.
    pub src_ip: Ipv4Addr,
    /// Number of source IPs (`None`: one per flow, flow `i` from `src_ip + i`).
    pub src_ip_count: Option<u32>,
    /// First destination IP.
    pub dst_ip: Ipv4Addr,
    /// Number of destination IPs, at least 1.
    pub dst_ip_count: u32,
    /// First source port.
    pub src_port: u16,
    /// Number of source ports, at least 1.
    pub src_port_count: u32,
    /// First destination port.
    pub dst_port: u16,
    /// Number of destination ports, at least 1.
    pub dst_port_count: u32,
    /// `"increment"` or `"random"` field values per flow (see the module docs).
    pub addr_mode: AddrMode,
    /// Flow popularity: `"round-robin"`, `"uniform"` or `"zipf:<s>"`.
    pub flow_dist: FlowDist,
    /// A frame size mix instead of `frame_size`: `"imix"`, `"imix-csit"`, `"rfc2544"` or
    /// `"64:7,594:4,1518:1"`.
    pub size_mix: Option<SizeMix>,
    /// Seed of the random choices (random flows, random addresses).
    pub seed: u64,
    /// Carry the departure time in every frame (v2 signature) for latency measurement.
    pub timestamps: bool,
}

impl Default for GeneratorConfig {
    /// 64 B UDP frames, one flow 16.1.1.1:53 -> 48.1.1.1:53 (the paper's TRex profile widens
    /// this with `flows`), unlimited count, stream 0, no UDP checksum, locally administered MACs
    /// 02:00:00:00:00:01 -> 02:00:00:00:00:02, round robin, no timestamps.
    fn default() -> Self {
        Self {
            frame_size: MIN_FRAME_SIZE,
            flows: 1,
            count: None,
            proto: L4Proto::Udp,
            stream: 0,
            udp_checksum: false,
            src_mac: MacAddr([0x02, 0, 0, 0, 0, 0x01]),
            dst_mac: MacAddr([0x02, 0, 0, 0, 0, 0x02]),
            src_ip: Ipv4Addr::new(16, 1, 1, 1),
            src_ip_count: None,
            dst_ip: Ipv4Addr::new(48, 1, 1, 1),
            dst_ip_count: 4,
            src_port: 53,
            src_port_count: 1,
            dst_port: 53,
            dst_port_count: 1,
            addr_mode: AddrMode::Increment,
            flow_dist: FlowDist::RoundRobin,
            size_mix: None,
            seed: 1,
            timestamps: false,
        }
    }
}

/// A rejected generator setting: the key, the value and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The config key.
    pub key: &'static str,
    /// The value given.
    pub value: String,
    /// The allowed values.
    pub allowed: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "traffic `{}` = {} is not allowed (allowed: {})",
            self.key, self.value, self.allowed
        )
    }
}

impl std::error::Error for ConfigError {}

/// The addresses and ports of one flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowTuple {
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Transport protocol.
    pub proto: L4Proto,
}

/// Per-field keys of the `random` address mode (any distinct odd constants).
const FIELD_KEYS: [u64; 4] = [
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0x27d4_eb2f_1656_67c5,
];

impl GeneratorConfig {
    /// Bytes per generated frame (without FCS): `frame_size - 4` (the largest size of a mix).
    pub fn generated_len(&self) -> usize {
        self.max_frame_size().saturating_sub(FCS_LEN) as usize
    }

    /// The largest frame size generated (FCS included).
    pub fn max_frame_size(&self) -> u32 {
        self.size_mix
            .as_ref()
            .map_or(self.frame_size, SizeMix::max_size)
    }

    /// The mean frame size (FCS included): `frame_size`, or the mix's weighted mean.
    pub fn mean_frame_size(&self) -> f64 {
        self.size_mix
            .as_ref()
            .map_or(f64::from(self.frame_size), SizeMix::mean_size)
    }

    /// True if every frame has the same length.
    pub fn fixed_size(&self) -> bool {
        self.size_mix
            .as_ref()
            .is_none_or(|m| m.entries.iter().all(|e| e.0 == m.entries[0].0))
    }

    /// Bytes of Ethernet + IPv4 + L4 header before the signature.
    pub fn header_len(&self) -> usize {
        ETH_HLEN + IPV4_HLEN + self.proto.header_len()
    }

    /// The smallest `frame_size` this protocol allows (headers + signature + FCS, at least 64).
    pub fn min_frame_size(&self) -> u32 {
        ((self.header_len() + SIGNATURE_LEN) as u32 + FCS_LEN).max(MIN_FRAME_SIZE)
    }

    /// Number of source addresses.
    pub fn src_ip_count(&self) -> u32 {
        self.src_ip_count.unwrap_or(self.flows)
    }

    /// Checks every setting; the error names the key and the allowed values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let min = self.min_frame_size();
        let size_ok = |s: u32| (min..=MAX_FRAME_SIZE).contains(&s);
        match &self.size_mix {
            None if !size_ok(self.frame_size) => {
                return Err(ConfigError {
                    key: "frame_size",
                    value: self.frame_size.to_string(),
                    allowed: format!(
                        "{min}..={MAX_FRAME_SIZE} bytes including the 4-byte FCS for {:?}",
                        self.proto
                    ),
                });
            }
            Some(m) if !m.entries.iter().all(|e| size_ok(e.0)) => {
                return Err(ConfigError {
                    key: "size_mix",
                    value: m.to_string(),
                    allowed: format!(
                        "sizes {min}..={MAX_FRAME_SIZE} bytes including the 4-byte FCS for {:?}",
                        self.proto
                    ),
                });
            }
            _ => {}
        }
        if self.flows == 0 {
            return Err(ConfigError {
                key: "flows",
                value: "0".into(),
                allowed: "1..=4294967295".into(),
            });
        }
        let src_room = u64::from(u32::MAX - u32::from(self.src_ip)) + 1;
        let src_count = self.src_ip_count();
        if src_count == 0 || u64::from(src_count) > src_room {
            return Err(ConfigError {
                key: if self.src_ip_count.is_some() {
                    "src_ip_count"
                } else {
                    "flows"
                },
                value: src_count.to_string(),
                allowed: format!("1..={src_room} (source addresses from {})", self.src_ip),
            });
        }
        let dst_room = u64::from(u32::MAX - u32::from(self.dst_ip)) + 1;
        if self.dst_ip_count == 0 || u64::from(self.dst_ip_count) > dst_room {
            return Err(ConfigError {
                key: "dst_ip_count",
                value: self.dst_ip_count.to_string(),
                allowed: format!(
                    "1..={dst_room} (destination addresses from {})",
                    self.dst_ip
                ),
            });
        }
        for (key, first, count) in [
            ("src_port_count", self.src_port, self.src_port_count),
            ("dst_port_count", self.dst_port, self.dst_port_count),
        ] {
            let room = 65_536 - u32::from(first);
            if count == 0 || count > room {
                return Err(ConfigError {
                    key,
                    value: count.to_string(),
                    allowed: format!("1..={room} (ports from {first})"),
                });
            }
        }
        if self.flow_dist != FlowDist::RoundRobin && self.flows > MAX_RANDOM_FLOWS {
            return Err(ConfigError {
                key: "flows",
                value: self.flows.to_string(),
                allowed: format!("1..={MAX_RANDOM_FLOWS} with flow_dist {}", self.flow_dist),
            });
        }
        if self.stream >= MAX_STREAMS {
            return Err(ConfigError {
                key: "stream",
                value: self.stream.to_string(),
                allowed: format!("0..{MAX_STREAMS}"),
            });
        }
        Ok(())
    }

    /// Index into a field's range of `count` values for flow `flow`.
    fn field_index(&self, field: usize, flow: u32, count: u32) -> u32 {
        match self.addr_mode {
            AddrMode::Increment => flow % count.max(1),
            AddrMode::Random => fastrange(
                mix64(u64::from(flow) ^ FIELD_KEYS[field] ^ self.seed),
                count.max(1),
            ),
        }
    }

    /// The 5-tuple of flow `flow` (taken modulo `flows`).
    pub fn flow_tuple(&self, flow: u32) -> FlowTuple {
        let flow = flow % self.flows.max(1);
        FlowTuple {
            src_ip: Ipv4Addr::from(u32::from(self.src_ip).wrapping_add(self.field_index(
                0,
                flow,
                self.src_ip_count(),
            ))),
            dst_ip: Ipv4Addr::from(u32::from(self.dst_ip).wrapping_add(self.field_index(
                1,
                flow,
                self.dst_ip_count,
            ))),
            src_port: self
                .src_port
                .wrapping_add(self.field_index(2, flow, self.src_port_count) as u16),
            dst_port: self
                .dst_port
                .wrapping_add(self.field_index(3, flow, self.dst_port_count) as u16),
            proto: self.proto,
        }
    }
}

/// The generator's counters, shared with stats threads and the final report.
#[derive(Debug, Default)]
pub struct GenCounters {
    frames: AtomicU64,
    bytes: AtomicU64,
    /// The configured frame size (FCS included); for a size mix, its mean rounded.
    pub frame_size: u32,
    /// Bytes per generated frame (FCS excluded); for a size mix, the largest.
    pub generated_len: usize,
    /// The stream id the frames carry.
    pub stream: u16,
}

impl GenCounters {
    /// Counters for a source other than [`Generator`] (e.g. NAT return traffic), so its frames
    /// can be reported with [`crate::report`] like a generator's.
    pub fn new(stream: u16, frame_size: u32, generated_len: usize) -> Self {
        Self {
            frames: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            frame_size,
            generated_len,
            stream,
        }
    }

    /// Publishes a source's running totals (relaxed stores, as the generator does per frame).
    #[inline]
    pub fn set(&self, frames: u64, bytes: u64) {
        self.frames.store(frames, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    /// Frames generated so far (= the next sequence number).
    pub fn frames(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }

    /// Bytes generated so far, FCS excluded.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

// Offsets inside the generated frame.
const IP: usize = ETH_HLEN;
const IP_CSUM: usize = IP + 10;
const IP_SRC: usize = IP + 12;
const IP_DST: usize = IP + 16;
const L4: usize = IP + IPV4_HLEN;
/// The template covers the longest headers (TCP) plus the signature's constant first 4 bytes
/// (magic and stream). Every frame is at least this long (UDP 60 B, TCP 70 B without FCS).
const TEMPLATE_LEN: usize = L4 + TCP_HLEN + SIG_CONST_LEN;
/// Bytes of the signature that are the same in every frame of a generator: magic and stream.
const SIG_CONST_LEN: usize = 4;

/// One frame size: its header template and checksum partial sums.
struct Variant {
    /// Template, length and checksum sums.
    head: Head,
    /// `pattern_sums[k]` = sum of the pattern region when `seq % 251 == k` (empty unless an L4
    /// checksum is written).
    pattern_sums: Box<[u64]>,
}

/// The copyable part of a [`Variant`].
#[derive(Clone, Copy)]
struct Head {
    /// Headers and the signature's magic and stream; addresses, ports, checksums, flow and
    /// sequence are filled per frame (for UDP, whatever lies after the signature's constant part
    /// is overwritten by the frame's signature).
    template: [u8; TEMPLATE_LEN],
    gen_len: usize,
    /// Frame size with FCS.
    frame_size: u32,
    /// Sum of the IPv4 header words without addresses and checksum.
    ip_sum: u64,
    /// For L4 checksums: sum of pseudo-header (without addresses), L4 header without ports and
    /// the constant signature words (magic + stream); `None` if no L4 checksum is written.
    l4_sum: Option<u64>,
}

/// The constants of a generator that the frame writer needs.
#[derive(Clone, Copy)]
struct Shape {
    /// Bytes of Ethernet + IPv4 + L4 header.
    hdr_len: usize,
    /// Offset of the L4 checksum field.
    l4_csum_at: usize,
    udp: bool,
    timestamps: bool,
    /// Addresses vary per flow (written per frame, with the IPv4 checksum); otherwise they and
    /// the checksum are in the templates.
    addrs_vary: bool,
    /// Ports vary per flow (written per frame); otherwise they are in the templates.
    ports_vary: bool,
    src_base: u32,
    dst_base: u32,
    src_port: u16,
    dst_port: u16,
}

impl Variant {
    fn new(cfg: &GeneratorConfig, frame_size: u32) -> Self {
        let gen_len = (frame_size - FCS_LEN) as usize;
        let hdr_len = cfg.header_len();
        let l4_len = gen_len - L4;
        // The headers, built once per frame size with etherparse (the slow path): addresses,
        // ports and checksums zero, filled in per frame.
        let mut t = [0u8; TEMPLATE_LEN];
        let eth = etherparse::Ethernet2Header {
            source: cfg.src_mac.0,
            destination: cfg.dst_mac.0,
            ether_type: etherparse::EtherType(ETHERTYPE_IPV4),
        };
        t[..ETH_HLEN].copy_from_slice(&eth.to_bytes());
        // Identification 0, Don't Fragment, TTL 64, no options.
        let ip = etherparse::Ipv4Header::new(
            l4_len as u16,
            64,
            etherparse::IpNumber(cfg.proto.ip_proto()),
            [0; 4],
            [0; 4],
        )
        .expect("a frame of at most MAX_FRAME_SIZE bytes");
        t[IP..L4].copy_from_slice(&ip.to_bytes());
        match cfg.proto {
            L4Proto::Udp => {
                let udp = etherparse::UdpHeader {
                    source_port: 0,
                    destination_port: 0,
                    length: l4_len as u16,
                    checksum: 0,
                };
                t[L4..L4 + UDP_HLEN].copy_from_slice(&udp.to_bytes());
            }
            L4Proto::Tcp => {
                // Sequence/ack numbers 0, no options, ACK|PSH, window 65535.
                let mut tcp = etherparse::TcpHeader::new(0, 0, 0, 0xffff);
                tcp.ack = true;
                tcp.psh = true;
                t[L4..L4 + TCP_HLEN].copy_from_slice(&tcp.to_bytes());
            }
        }
        let sig_const = Signature {
            stream: cfg.stream,
            flow: 0,
            seq: 0,
            ts: cfg.timestamps.then_some(0),
        }
        .encode();
        t[hdr_len..hdr_len + SIG_CONST_LEN].copy_from_slice(&sig_const[..SIG_CONST_LEN]);
        let ip_sum = ones_sum(&t[IP..L4], 0);
        let want_l4 = cfg.proto == L4Proto::Tcp || cfg.udp_checksum;
        let region = gen_len - hdr_len - SIGNATURE_LEN;
        let (l4_sum, pattern_sums) = if want_l4 {
            // Ports are added per frame; the template's port bytes are zero here.
            let sum = u64::from(cfg.proto.ip_proto())
                + l4_len as u64
                + ones_sum(&t[L4..hdr_len], 0)
                + ones_sum(&sig_const, 0);
            let sums = (0..PATTERN_PERIOD as usize)
                .map(|k| ones_sum(&PATTERN[k..k + region], 0))
                .collect();
            (Some(sum), sums)
        } else {
            (None, Box::default())
        };
        Self {
            head: Head {
                template: t,
                gen_len,
                frame_size,
                ip_sum,
                l4_sum,
            },
            pattern_sums,
        }
    }
}

/// The ones'-complement sum of the four 16-bit words of two IPv4 addresses.
#[inline(always)]
fn addr_words(src: u32, dst: u32) -> u64 {
    u64::from(src >> 16) + u64::from(src & 0xffff) + u64::from(dst >> 16) + u64::from(dst & 0xffff)
}

/// Copies a header template as three 16-byte moves and one overlapping 16-byte move.
#[inline(always)]
fn copy_template(dst: &mut [u8; TEMPLATE_LEN], src: &[u8; TEMPLATE_LEN]) {
    const _: () = assert!(TEMPLATE_LEN > 48 && TEMPLATE_LEN <= 64);
    dst[..16].copy_from_slice(&src[..16]);
    dst[16..32].copy_from_slice(&src[16..32]);
    dst[32..48].copy_from_slice(&src[32..48]);
    dst[TEMPLATE_LEN - 16..].copy_from_slice(&src[TEMPLATE_LEN - 16..]);
}

/// Copies the pattern region: `dst` and `src` have the same length. Minimum-size frames carry
/// 2 pattern bytes, for which a `memcpy` call would cost more than the rest of the frame; up to 16
/// bytes are moved as two (possibly overlapping) integers of one width per size class. (Written
/// as slice copies, LLVM merges the tail copies of the size classes into one variable-length
/// `memcpy` call again.)
#[inline(always)]
fn copy_pattern(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    match n {
        0 => {}
        1 => dst[0] = src[0],
        2..=3 => {
            let (a, b) = (load::<2>(src, 0), load::<2>(src, n - 2));
            store(dst, 0, u16::from_ne_bytes(a).to_ne_bytes());
            store(dst, n - 2, u16::from_ne_bytes(b).to_ne_bytes());
        }
        4..=7 => {
            let (a, b) = (load::<4>(src, 0), load::<4>(src, n - 4));
            store(dst, 0, u32::from_ne_bytes(a).to_ne_bytes());
            store(dst, n - 4, u32::from_ne_bytes(b).to_ne_bytes());
        }
        8..=16 => {
            let (a, b) = (load::<8>(src, 0), load::<8>(src, n - 8));
            store(dst, 0, u64::from_ne_bytes(a).to_ne_bytes());
            store(dst, n - 8, u64::from_ne_bytes(b).to_ne_bytes());
        }
        _ => dst[..n].copy_from_slice(&src[..n]),
    }
}

/// `N` bytes of `s` at `at` (zeros if out of range, which the callers never ask for).
#[inline(always)]
fn load<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
    s.get(at..)
        .and_then(|t| t.first_chunk::<N>())
        .copied()
        .unwrap_or([0; N])
}

/// Writes `v` into `d` at `at` (nothing if out of range, which the callers never ask for).
#[inline(always)]
fn store<const N: usize>(d: &mut [u8], at: usize, v: [u8; N]) {
    if let Some(t) = d.get_mut(at..).and_then(|t| t.first_chunk_mut::<N>()) {
        *t = v;
    }
}

/// How the next flow is chosen.
enum Chooser {
    RoundRobin,
    Uniform,
    Zipf(AliasTable),
}

/// The generator: a [`FrameSource`] producing the configured frames.
pub struct Generator {
    cfg: GeneratorConfig,
    variants: Box<[Variant]>,
    /// Variant index per position of the size schedule (a single 0 for one size).
    schedule: Box<[u16]>,
    shape: Shape,
    chooser: Chooser,
    /// Field reducers for non-sequential flow choices: src ip, dst ip, src port, dst port.
    field_mod: [FastMod; 4],
    /// A single flow: nothing about the flow changes per frame (its addresses and ports are in
    /// the templates).
    single_flow: bool,
    counts: [u32; 4],
    /// Everything that changes per frame.
    cur: Cursor,
    limit: u64,
    stopped: bool,
    stop: Arc<AtomicBool>,
    counters: Arc<GenCounters>,
}

/// The state a generator changes per frame. Kept in one small struct so that a [`FrameBatch`]
/// can work on a copy in registers and write it back once per batch.
#[derive(Clone, Debug)]
struct Cursor {
    /// Sequence number of the next frame (= frames generated so far).
    seq: u64,
    /// Bytes generated so far.
    bytes: u64,
    /// `seq % 251`, kept incrementally.
    pat_off: usize,
    /// Position in the size schedule.
    sched_pos: usize,
    /// Round-robin state: the flow and each field's index.
    flow: u32,
    idx: [u32; 4],
    /// Random flow choices.
    rng: Rng,
}

impl fmt::Debug for Generator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generator")
            .field("cfg", &self.cfg)
            .field("seq", &self.cur.seq)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl Generator {
    /// Validates `cfg` and precomputes the header templates, checksum partial sums, size
    /// schedule and (for Zipf) the alias table.
    pub fn new(cfg: GeneratorConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let (variants, schedule): (Vec<Variant>, Vec<u16>) = match &cfg.size_mix {
            None => (vec![Variant::new(&cfg, cfg.frame_size)], vec![0]),
            Some(m) => (
                m.entries.iter().map(|e| Variant::new(&cfg, e.0)).collect(),
                m.schedule(),
            ),
        };
        let chooser = match cfg.flow_dist {
            FlowDist::RoundRobin => Chooser::RoundRobin,
            FlowDist::Uniform => Chooser::Uniform,
            FlowDist::Zipf { s } => Chooser::Zipf(AliasTable::new(&zipf_weights(cfg.flows, s))),
        };
        let counts = [
            cfg.src_ip_count(),
            cfg.dst_ip_count,
            cfg.src_port_count,
            cfg.dst_port_count,
        ];
        let mean = cfg.mean_frame_size().round() as u32;
        let counters = Arc::new(GenCounters {
            frames: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            frame_size: mean,
            generated_len: cfg.generated_len(),
            stream: cfg.stream,
        });
        let mut g = Self {
            variants: variants.into(),
            schedule: schedule.into(),
            shape: Shape {
                hdr_len: cfg.header_len(),
                l4_csum_at: match cfg.proto {
                    L4Proto::Udp => L4 + 6,
                    L4Proto::Tcp => L4 + 16,
                },
                udp: cfg.proto == L4Proto::Udp,
                timestamps: cfg.timestamps,
                addrs_vary: cfg.flows > 1 && (counts[0] > 1 || counts[1] > 1),
                ports_vary: cfg.flows > 1 && (cfg.src_port_count > 1 || cfg.dst_port_count > 1),
                src_base: u32::from(cfg.src_ip),
                dst_base: u32::from(cfg.dst_ip),
                src_port: cfg.src_port,
                dst_port: cfg.dst_port,
            },
            chooser,
            field_mod: counts.map(FastMod::new),
            single_flow: cfg.flows == 1,
            counts,
            cur: Cursor {
                seq: 0,
                bytes: 0,
                pat_off: 0,
                sched_pos: 0,
                flow: 0,
                idx: [0; 4],
                rng: Rng::new(cfg.seed ^ u64::from(cfg.stream) << 48),
            },
            limit: cfg.count.unwrap_or(u64::MAX),
            stopped: false,
            stop: Arc::new(AtomicBool::new(false)),
            counters,
            cfg,
        };
        // Field indices that never change: those of the only flow, or 0 for a field with a
        // single value (`flow % 1` and a reduction into 1 value are both 0).
        let idx0 = g.field_indices(0);
        let fixed = |k: usize| if g.cfg.flows == 1 { idx0[k] } else { 0 };
        // Ports and addresses are part of the per-frame sums; bake constant ones into the
        // templates (with the IPv4 checksum when the addresses are constant).
        if !g.shape.ports_vary {
            let sp = g.cfg.src_port.wrapping_add(fixed(2) as u16);
            let dp = g.cfg.dst_port.wrapping_add(fixed(3) as u16);
            for v in g.variants.iter_mut() {
                let h = &mut v.head;
                h.template[L4..L4 + 2].copy_from_slice(&sp.to_be_bytes());
                h.template[L4 + 2..L4 + 4].copy_from_slice(&dp.to_be_bytes());
                if let Some(s) = &mut h.l4_sum {
                    *s += u64::from(sp) + u64::from(dp);
                }
            }
        }
        if !g.shape.addrs_vary {
            let src = g.shape.src_base.wrapping_add(fixed(0));
            let dst = g.shape.dst_base.wrapping_add(fixed(1));
            let addr_sum = addr_words(src, dst);
            for v in g.variants.iter_mut() {
                let h = &mut v.head;
                h.template[IP_SRC..IP_SRC + 4].copy_from_slice(&src.to_be_bytes());
                h.template[IP_DST..IP_DST + 4].copy_from_slice(&dst.to_be_bytes());
                h.template[IP_CSUM..IP_CSUM + 2]
                    .copy_from_slice(&finish(h.ip_sum + addr_sum).to_be_bytes());
                if let Some(s) = &mut h.l4_sum {
                    *s += addr_sum;
                }
            }
        }
        Ok(g)
    }

    /// Uses `flag` as the stop flag (e.g. one flag shared by all generators of a run).
    pub fn with_stop_flag(mut self, flag: Arc<AtomicBool>) -> Self {
        self.stop = flag;
        self
    }

    /// The stop flag: store `true` to end generation (seen within [`STOP_CHECK_EVERY`] frames;
    /// [`FrameSource::exhausted`] reports it at once).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// The shared counters.
    pub fn counters(&self) -> Arc<GenCounters> {
        self.counters.clone()
    }

    /// The configuration in use.
    pub fn config(&self) -> &GeneratorConfig {
        &self.cfg
    }

    /// Bytes per generated frame (FCS excluded); the largest for a size mix.
    pub fn generated_len(&self) -> usize {
        self.cfg.generated_len()
    }

    /// Sequence number the next frame gets (= frames generated so far).
    pub fn next_seq(&self) -> u64 {
        self.cur.seq
    }

    /// Size (FCS included) of the frame the next call produces.
    #[inline]
    pub fn next_frame_size(&self) -> u32 {
        self.frame_size_at(&self.cur)
    }

    #[inline]
    fn frame_size_at(&self, cur: &Cursor) -> u32 {
        self.variants[usize::from(self.schedule[cur.sched_pos])]
            .head
            .frame_size
    }

    /// True if the count is used up or a stop was requested.
    pub fn done(&self) -> bool {
        self.cur.seq >= self.limit || self.stopped || self.stop.load(Ordering::Relaxed)
    }

    /// Changes the frame limit (e.g. to extend a trial); `None` = unlimited.
    pub fn set_count(&mut self, count: Option<u64>) {
        self.limit = count.unwrap_or(u64::MAX);
    }

    /// Field indices of flow `flow` (`flow < flows`) without the round-robin counters.
    #[inline]
    fn field_indices(&self, flow: u32) -> [u32; 4] {
        match self.cfg.addr_mode {
            AddrMode::Increment => [0, 1, 2, 3].map(|k| self.field_mod[k].rem(flow)),
            AddrMode::Random => [0, 1, 2, 3].map(|k| {
                fastrange(
                    mix64(u64::from(flow) ^ FIELD_KEYS[k] ^ self.cfg.seed),
                    self.counts[k],
                )
            }),
        }
    }

    /// Picks the next flow and its field indices, advancing `cur`.
    #[inline(always)]
    fn next_flow(&self, cur: &mut Cursor) -> (u32, [u32; 4]) {
        // One flow: every choice (round robin, uniform, Zipf) is flow 0, and the random draws
        // only ever pick flows, so skipping them changes no frame. Its field indices are not
        // needed: with one flow neither addresses nor ports vary (they are in the templates).
        if self.single_flow {
            return (0, [0; 4]);
        }
        match &self.chooser {
            Chooser::RoundRobin if self.cfg.addr_mode == AddrMode::Increment => {
                round_robin_step(cur, self.cfg.flows, self.counts)
            }
            chooser => {
                let flow = match chooser {
                    Chooser::RoundRobin => {
                        let f = cur.flow;
                        cur.flow += 1;
                        if cur.flow == self.cfg.flows {
                            cur.flow = 0;
                        }
                        f
                    }
                    Chooser::Uniform => cur.rng.below(self.cfg.flows),
                    Chooser::Zipf(t) => t.sample(&mut cur.rng),
                };
                (flow, self.field_indices(flow))
            }
        }
    }

    /// Writes the next frame into `buf` with departure timestamp `ts_ns` (written only when
    /// `timestamps` is on), if the count allows and no stop was requested. Returns its length
    /// (FCS excluded).
    #[inline]
    pub fn produce_at(&mut self, buf: &mut [u8], ts_ns: u64) -> Option<usize> {
        if self.cur.seq >= self.limit || self.stopped {
            return None;
        }
        if self.cur.seq.is_multiple_of(STOP_CHECK_EVERY) && self.stop.load(Ordering::Relaxed) {
            self.stopped = true;
            return None;
        }
        let mut cur = self.cur.clone();
        let len = self.write_frame(&mut cur, buf, ts_ns)?;
        self.cur = cur;
        self.counters.frames.store(self.cur.seq, Ordering::Relaxed);
        self.counters.bytes.store(self.cur.bytes, Ordering::Relaxed);
        Some(len)
    }

    /// Starts a batch of at most `max` frames (one Tx burst) with departure timestamp `ts_ns`:
    /// [`FrameBatch::next`] writes the same frames as `produce_at` would, but checks the count
    /// and the stop flag once for the whole batch, keeps the per-frame state in registers and
    /// publishes the counters once, when the batch is dropped. For loops that write frames back
    /// to back (a DPDK Tx burst); the counters then move once per batch.
    #[inline]
    pub fn batch(&mut self, max: usize, ts_ns: u64) -> FrameBatch<'_> {
        let left = if self.cur.seq >= self.limit || self.stopped {
            0
        } else if self.stop.load(Ordering::Relaxed) {
            self.stopped = true;
            0
        } else {
            (self.limit - self.cur.seq).min(max as u64) as usize
        };
        FrameBatch {
            cur: self.cur.clone(),
            g: self,
            left,
            ts_ns,
        }
    }

    /// Writes the frame `cur` points at into `buf` and advances `cur`; `None` (and `cur`
    /// unchanged) if `buf` is too short. Shared by [`Generator::produce_at`] and [`FrameBatch`].
    #[inline(always)]
    fn write_frame(&self, cur: &mut Cursor, buf: &mut [u8], ts_ns: u64) -> Option<usize> {
        let vi = if self.schedule.len() == 1 {
            0
        } else {
            usize::from(self.schedule[cur.sched_pos])
        };
        let v = &self.variants[vi];
        // Everything that can fail is checked before the flow state moves on. None of it fails
        // for a validated config and a large enough buffer.
        let (f, pat) = frame_slices(&self.shape, &v.head, cur, buf)?;
        let (flow, idx) = self.next_flow(cur);
        fill(
            &self.shape,
            &v.head,
            &v.pattern_sums,
            cur,
            flow,
            idx,
            ts_ns,
            f,
            pat,
        );
        advance(cur, f.len(), self.schedule.len());
        Some(f.len())
    }
}

/// One round-robin step over flows with incrementing field indices: the current flow and its
/// indices, then `cur` moves to the next flow (per-field counters, no division).
#[inline(always)]
fn round_robin_step(cur: &mut Cursor, flows: u32, counts: [u32; 4]) -> (u32, [u32; 4]) {
    let out = (cur.flow, cur.idx);
    cur.flow += 1;
    if cur.flow == flows {
        cur.flow = 0;
        cur.idx = [0; 4];
    } else {
        for (i, c) in cur.idx.iter_mut().zip(counts) {
            *i += 1;
            if *i == c {
                *i = 0;
            }
        }
    }
    out
}

/// The frame's bytes in `buf` and its pattern bytes, if `buf` is long enough (and the variant
/// sane: always, for a validated config).
#[inline(always)]
fn frame_slices<'b>(
    shape: &Shape,
    h: &Head,
    cur: &Cursor,
    buf: &'b mut [u8],
) -> Option<(&'b mut [u8], &'static [u8])> {
    let len = h.gen_len;
    let body = shape.hdr_len + SIGNATURE_LEN;
    if len < TEMPLATE_LEN {
        return None;
    }
    let f = buf.get_mut(..len)?;
    let pat = PATTERN.get(cur.pat_off..cur.pat_off + len.checked_sub(body)?)?;
    Some((f, pat))
}

/// Moves `cur` past a frame of `len` bytes.
#[inline(always)]
fn advance(cur: &mut Cursor, len: usize, schedule_len: usize) {
    cur.seq += 1;
    cur.bytes += len as u64;
    cur.pat_off += 1;
    if cur.pat_off == PATTERN_PERIOD as usize {
        cur.pat_off = 0;
    }
    if schedule_len > 1 {
        cur.sched_pos += 1;
        if cur.sched_pos == schedule_len {
            cur.sched_pos = 0;
        }
    }
}

/// Writes frame `cur.seq` of flow `flow` (field indices `idx`) into `f` (exactly the frame's
/// length, checked by [`frame_slices`], like `pat`). Does not advance `cur`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fill(
    shape: &Shape,
    h: &Head,
    pattern_sums: &[u64],
    cur: &Cursor,
    flow: u32,
    idx: [u32; 4],
    ts_ns: u64,
    f: &mut [u8],
    pat: &[u8],
) {
    let seq = cur.seq;
    let hdr = shape.hdr_len;
    let body = hdr + SIGNATURE_LEN;
    let Some((head, _)) = f.split_first_chunk_mut::<TEMPLATE_LEN>() else {
        return;
    };
    // The template is a fixed-size array copied in 16-byte pieces (a plain array assignment
    // of this odd size becomes a `memcpy` call); the header fields below are written at
    // constant offsets without bounds checks.
    copy_template(head, &h.template);
    let mut addr_sum = 0;
    if shape.addrs_vary {
        let src = shape.src_base.wrapping_add(idx[0]);
        let dst = shape.dst_base.wrapping_add(idx[1]);
        head[IP_SRC..IP_SRC + 4].copy_from_slice(&src.to_be_bytes());
        head[IP_DST..IP_DST + 4].copy_from_slice(&dst.to_be_bytes());
        addr_sum = addr_words(src, dst);
        head[IP_CSUM..IP_CSUM + 2].copy_from_slice(&finish(h.ip_sum + addr_sum).to_be_bytes());
    }
    let mut port_sum = 0;
    if shape.ports_vary {
        let sp = shape.src_port.wrapping_add(idx[2] as u16);
        let dp = shape.dst_port.wrapping_add(idx[3] as u16);
        head[L4..L4 + 2].copy_from_slice(&sp.to_be_bytes());
        head[L4 + 2..L4 + 4].copy_from_slice(&dp.to_be_bytes());
        port_sum = u64::from(sp) + u64::from(dp);
    }
    // The signature after its constant magic and stream (in the template): flow, then the
    // 64-bit sequence number (v1) or the timestamp and the sequence number's low half (v2).
    // Same bytes as `Signature::encode`.
    let ts = shape.timestamps.then_some(ts_ns as u32);
    let sig = &mut f[hdr + SIG_CONST_LEN..body];
    sig[..4].copy_from_slice(&flow.to_be_bytes());
    match ts {
        None => sig[4..12].copy_from_slice(&seq.to_be_bytes()),
        Some(t) => {
            sig[4..8].copy_from_slice(&t.to_be_bytes());
            sig[8..12].copy_from_slice(&(seq as u32).to_be_bytes());
        }
    }
    copy_pattern(&mut f[body..], pat);
    if let Some(base) = h.l4_sum {
        let var = match ts {
            None => (seq >> 48) + ((seq >> 32) & 0xffff) + ((seq >> 16) & 0xffff) + (seq & 0xffff),
            Some(t) => {
                u64::from(t >> 16) + u64::from(t & 0xffff) + ((seq >> 16) & 0xffff) + (seq & 0xffff)
            }
        };
        let sum = base
            + addr_sum
            + port_sum
            + u64::from(flow >> 16)
            + u64::from(flow & 0xffff)
            + var
            + pattern_sums.get(cur.pat_off).copied().unwrap_or(0);
        let mut c = finish(sum);
        if c == 0 && shape.udp {
            c = 0xffff;
        }
        if let Some(d) = f.get_mut(shape.l4_csum_at..shape.l4_csum_at + 2) {
            d.copy_from_slice(&c.to_be_bytes());
        }
    }
}

/// A batch of frames written back to back by one generator (see [`Generator::batch`]); the
/// generator's state and counters are updated when the batch is dropped.
pub struct FrameBatch<'g> {
    g: &'g mut Generator,
    cur: Cursor,
    left: usize,
    ts_ns: u64,
}

impl FrameBatch<'_> {
    /// Writes the next frame with the batch's timestamp; `None` when the batch is used up (its
    /// `max`, the count, or a stop seen when it started) or `buf` is too short.
    #[inline(always)]
    pub fn next(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.next_at(buf, self.ts_ns)
    }

    /// Writes the next frame with departure timestamp `ts_ns` (e.g. a pacer's intended time).
    #[inline(always)]
    pub fn next_at(&mut self, buf: &mut [u8], ts_ns: u64) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        let len = self.g.write_frame(&mut self.cur, buf, ts_ns)?;
        self.left -= 1;
        Some(len)
    }

    /// Size (FCS included) of the frame the next call writes.
    #[inline]
    pub fn next_frame_size(&self) -> u32 {
        self.g.frame_size_at(&self.cur)
    }

    /// Frames this batch may still write.
    pub fn remaining(&self) -> usize {
        self.left
    }
}

impl Drop for FrameBatch<'_> {
    fn drop(&mut self) {
        let g = &mut *self.g;
        g.cur = self.cur.clone();
        g.counters.frames.store(g.cur.seq, Ordering::Relaxed);
        g.counters.bytes.store(g.cur.bytes, Ordering::Relaxed);
    }
}

impl fmt::Debug for FrameBatch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameBatch")
            .field("seq", &self.cur.seq)
            .field("left", &self.left)
            .finish_non_exhaustive()
    }
}

impl FrameSource for Generator {
    #[inline]
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        let ts = if self.cfg.timestamps {
            crate::rate::wall_ns()
        } else {
            0
        };
        self.produce_at(buf, ts)
    }

    /// A whole batch through [`Generator::batch`]: the count and the stop flag are checked and
    /// the counters published once per batch, not per frame (the per-frame path cost about 250
    /// instructions per 64 B frame in `dataplane run`, twice the frame writing itself). With
    /// timestamps, the frames of one batch share the departure time read when it starts.
    fn next_batch(&mut self, buf: &mut [u8], lens: &mut [u32]) -> usize {
        let ts = if self.cfg.timestamps {
            crate::rate::wall_ns()
        } else {
            0
        };
        let mut batch = self.batch(lens.len(), ts);
        let (mut off, mut n) = (0, 0);
        while n < lens.len() && buf.len().saturating_sub(off) >= MAX_WIRE_FRAME {
            let Some(len) = batch.next(&mut buf[off..]) else {
                break;
            };
            lens[n] = len as u32;
            n += 1;
            off += batch_step(len);
        }
        n
    }

    fn exhausted(&self) -> bool {
        self.done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::PATTERN;

    fn frames(cfg: &GeneratorConfig, n: usize) -> Vec<Vec<u8>> {
        let mut g = Generator::new(cfg.clone()).unwrap();
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        (0..n)
            .map(|_| {
                let len = g.next_frame(&mut buf).unwrap();
                buf[..len].to_vec()
            })
            .collect()
    }

    fn be16(f: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([f[at], f[at + 1]])
    }

    /// Independent full checksum: sum of all 16-bit words, folded; 0xffff means valid.
    fn ones_sum(parts: &[&[u8]]) -> u16 {
        let mut sum = 0u32;
        for part in parts {
            for (i, b) in part.iter().enumerate() {
                sum += if i % 2 == 0 {
                    u32::from(*b) << 8
                } else {
                    u32::from(*b)
                };
            }
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    fn l4_checksum_ok(f: &[u8]) -> bool {
        let ip = &f[14..34];
        let l4 = &f[34..];
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&ip[12..20]);
        pseudo.extend_from_slice(&[0, ip[9]]);
        pseudo.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        ones_sum(&[&pseudo, l4]) == 0xffff
    }

    /// The batched path writes exactly the frames, in the order, that frame-by-frame writing
    /// does (random flows, a size mix, TCP), and stops at the same count.
    #[test]
    fn batches_write_the_frames_one_at_a_time_would() {
        let cfg = GeneratorConfig {
            flows: 37,
            count: Some(1000),
            proto: L4Proto::Tcp,
            addr_mode: AddrMode::Random,
            flow_dist: "uniform".parse().unwrap(),
            size_mix: Some("128:7,594:4,1518:1".parse().unwrap()),
            ..Default::default()
        };
        let one_by_one = frames(&cfg, 1000);
        let mut g = Generator::new(cfg).unwrap();
        let mut buf = vec![0u8; 32 * MAX_WIRE_FRAME];
        let mut lens = [0u32; 32];
        let mut batched = Vec::new();
        loop {
            let n = g.next_batch(&mut buf, &mut lens);
            if n == 0 {
                break;
            }
            let mut off = 0;
            for &len in &lens[..n] {
                batched.push(buf[off..off + len as usize].to_vec());
                off += batch_step(len as usize);
            }
        }
        assert_eq!(batched.len(), 1000);
        assert!(batched == one_by_one, "batched frames differ");
        assert!(g.exhausted());
    }

    #[test]
    fn udp_frames_parse_by_hand() {
        let cfg = GeneratorConfig {
            frame_size: 64,
            flows: 6,
            stream: 7,
            ..Default::default()
        };
        let fs = frames(&cfg, 20);
        for (i, f) in fs.iter().enumerate() {
            assert_eq!(f.len(), 60);
            assert_eq!(f[0..6], [2, 0, 0, 0, 0, 2], "dst mac");
            assert_eq!(f[6..12], [2, 0, 0, 0, 0, 1], "src mac");
            assert_eq!(be16(f, 12), 0x0800);
            assert_eq!(f[14], 0x45);
            assert_eq!(be16(f, 16), 46, "IPv4 total length");
            assert_eq!(f[22], 64, "TTL");
            assert_eq!(f[23], 17, "UDP");
            let flow = (i % 6) as u8;
            assert_eq!(f[26..30], [16, 1, 1, 1 + flow], "src ip of frame {i}");
            assert_eq!(f[30..34], [48, 1, 1, 1 + flow % 4], "dst ip of frame {i}");
            assert_eq!(
                ones_sum(&[&f[14..34]]),
                0xffff,
                "IPv4 checksum of frame {i}"
            );
            assert_eq!((be16(f, 34), be16(f, 36)), (53, 53), "ports");
            assert_eq!(be16(f, 38), 26, "UDP length");
            assert_eq!(be16(f, 40), 0, "no UDP checksum");
            assert_eq!(be16(f, 42), 0x4E4D, "magic");
            assert_eq!(be16(f, 44), 7, "stream");
            assert_eq!(
                u32::from_be_bytes(f[46..50].try_into().unwrap()),
                flow as u32
            );
            assert_eq!(u64::from_be_bytes(f[50..58].try_into().unwrap()), i as u64);
            let k = i % 251;
            assert_eq!(f[58..60], PATTERN[k..k + 2]);
        }
    }

    #[test]
    fn every_size_produces_frame_size_minus_fcs_with_valid_headers() {
        let sizes = (64..=1518).chain([9018, 9022, MAX_FRAME_SIZE]);
        for size in sizes {
            for proto in [L4Proto::Udp, L4Proto::Tcp] {
                // Checksummed variants precompute 251 pattern sums: test a spread of sizes.
                let spread = size.is_multiple_of(13) || !(80..=1500).contains(&size);
                if proto == L4Proto::Tcp && (size < 74 || !spread) {
                    continue;
                }
                let cfg = GeneratorConfig {
                    frame_size: size,
                    proto,
                    flows: 3,
                    udp_checksum: spread && size % 2 == 0,
                    ..Default::default()
                };
                for f in frames(&cfg, 3) {
                    let n = size as usize - 4;
                    assert_eq!(f.len(), n, "size {size} {proto:?}");
                    assert_eq!(be16(&f, 16) as usize, n - 14, "total length, size {size}");
                    assert_eq!(
                        ones_sum(&[&f[14..34]]),
                        0xffff,
                        "IPv4 checksum, size {size}"
                    );
                    if proto == L4Proto::Udp {
                        assert_eq!(be16(&f, 38) as usize, n - 34, "UDP length");
                    }
                    if proto == L4Proto::Tcp || cfg.udp_checksum {
                        assert!(l4_checksum_ok(&f), "L4 checksum, size {size} {proto:?}");
                    } else {
                        assert_eq!(be16(&f, 40), 0);
                    }
                    let (sig, loc) = crate::signature::parse(&f).unwrap();
                    assert_eq!(loc.proto, proto);
                    assert_eq!(loc.ip_end, n);
                    let body = loc.sig_offset + SIGNATURE_LEN;
                    assert!(crate::signature::pattern_matches(sig.seq, &f[body..]));
                }
            }
        }
    }

    #[test]
    fn checksums_stay_valid_across_the_pattern_period_and_many_flows() {
        for proto in [L4Proto::Udp, L4Proto::Tcp] {
            let cfg = GeneratorConfig {
                frame_size: 131, // odd pattern region length
                proto,
                flows: 70_000,
                udp_checksum: true,
                src_ip: Ipv4Addr::new(16, 1, 255, 200),
                ..Default::default()
            };
            for (i, f) in frames(&cfg, 600).iter().enumerate() {
                assert_eq!(ones_sum(&[&f[14..34]]), 0xffff, "frame {i}");
                assert!(l4_checksum_ok(f), "frame {i} {proto:?}");
                assert_ne!(be16(f, if proto == L4Proto::Udp { 40 } else { 50 }), 0);
            }
        }
    }

    #[test]
    fn tcp_header_is_well_formed() {
        let cfg = GeneratorConfig {
            frame_size: 74,
            proto: L4Proto::Tcp,
            ..Default::default()
        };
        let f = &frames(&cfg, 1)[0];
        assert_eq!(f.len(), 70);
        assert_eq!(f[23], 6);
        assert_eq!(f[34 + 12], 0x50, "data offset 5");
        assert_eq!(f[34 + 13], 0x18, "ACK|PSH");
        assert_eq!(
            be16(f, 54),
            0x4E4D,
            "signature after the 20-byte TCP header"
        );
    }

    #[test]
    fn flows_round_robin_over_distinct_tuples() {
        let cfg = GeneratorConfig {
            flows: 10,
            ..Default::default()
        };
        let fs = frames(&cfg, 30);
        let tuples: std::collections::HashSet<&[u8]> = fs.iter().map(|f| &f[26..38]).collect();
        assert_eq!(tuples.len(), 10);
        assert_eq!(fs[3][26..34], fs[13][26..34]);
        for (i, f) in fs.iter().enumerate() {
            let t = cfg.flow_tuple(i as u32);
            assert_eq!(f[26..30], t.src_ip.octets());
            assert_eq!(f[30..34], t.dst_ip.octets());
        }
        assert_eq!(cfg.flow_tuple(9).dst_ip, Ipv4Addr::new(48, 1, 1, 2));
        assert_eq!(cfg.flow_tuple(10).src_ip, Ipv4Addr::new(16, 1, 1, 1));
    }

    #[test]
    fn count_exhausts_and_counters_follow() {
        let cfg = GeneratorConfig {
            frame_size: 100,
            count: Some(5),
            ..Default::default()
        };
        let mut g = Generator::new(cfg).unwrap();
        let c = g.counters();
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        for i in 0..5 {
            assert!(!g.exhausted());
            assert_eq!(g.next_frame(&mut buf), Some(96));
            assert_eq!(c.frames(), i + 1);
        }
        assert!(g.exhausted());
        assert_eq!(g.next_frame(&mut buf), None);
        assert_eq!(
            (c.frames(), c.bytes(), c.frame_size, c.generated_len),
            (5, 480, 100, 96)
        );
    }

    #[test]
    fn stop_flag_ends_an_unlimited_generator() {
        let mut g = Generator::new(GeneratorConfig::default()).unwrap();
        let stop = g.stop_flag();
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        for _ in 0..1000 {
            g.next_frame(&mut buf).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(g.exhausted());
        let mut extra = 0;
        while g.next_frame(&mut buf).is_some() {
            extra += 1;
        }
        assert!(extra < STOP_CHECK_EVERY, "{extra}");
        assert_eq!(g.counters().frames(), 1000 + extra);
        assert_eq!(g.counters().frames() % STOP_CHECK_EVERY, 0);

        let shared = Arc::new(AtomicBool::new(true));
        let mut g = Generator::new(GeneratorConfig::default())
            .unwrap()
            .with_stop_flag(shared);
        assert!(g.exhausted());
        assert_eq!(g.next_frame(&mut buf), None);
    }

    #[test]
    fn short_buffer_yields_nothing_instead_of_panicking() {
        let mut g = Generator::new(GeneratorConfig {
            frame_size: 1518,
            ..Default::default()
        })
        .unwrap();
        let mut buf = [0u8; 100];
        assert_eq!(g.next_frame(&mut buf), None);
        assert_eq!(g.next_seq(), 0);
    }

    #[test]
    fn validation_names_key_and_allowed_values() {
        let bad = |cfg: GeneratorConfig| Generator::new(cfg).err().unwrap();
        let e = bad(GeneratorConfig {
            frame_size: 63,
            ..Default::default()
        });
        assert_eq!(e.key, "frame_size");
        assert!(e.to_string().contains("64..=16388"), "{e}");
        let e = bad(GeneratorConfig {
            frame_size: 73,
            proto: L4Proto::Tcp,
            ..Default::default()
        });
        assert!(e.allowed.starts_with("74..="), "{e}");
        let e = bad(GeneratorConfig {
            frame_size: MAX_FRAME_SIZE + 1,
            ..Default::default()
        });
        assert_eq!(e.key, "frame_size");
        assert_eq!(
            bad(GeneratorConfig {
                flows: 0,
                ..Default::default()
            })
            .key,
            "flows"
        );
        assert_eq!(
            bad(GeneratorConfig {
                flows: 10,
                src_ip: Ipv4Addr::new(255, 255, 255, 250),
                ..Default::default()
            })
            .key,
            "flows"
        );
        assert_eq!(
            bad(GeneratorConfig {
                dst_ip_count: 0,
                ..Default::default()
            })
            .key,
            "dst_ip_count"
        );
        assert_eq!(
            bad(GeneratorConfig {
                stream: 256,
                ..Default::default()
            })
            .key,
            "stream"
        );
        assert!(
            GeneratorConfig {
                flows: 6,
                src_ip: Ipv4Addr::new(255, 255, 255, 250),
                ..Default::default()
            }
            .validate()
            .is_ok()
        );
        assert_eq!(UDP_HLEN, 8);
    }

    #[test]
    fn config_deserializes_with_defaults_and_rejects_unknown_keys() {
        let cfg: GeneratorConfig = toml::from_str(
            r#"
            frame_size = 1518
            flows = 1000
            count = 42
            proto = "tcp"
            src_mac = "aa:bb:cc:dd:ee:ff"
            dst_ip = "10.2.0.1"
            dst_ip_count = 1
            "#,
        )
        .unwrap();
        assert_eq!(cfg.frame_size, 1518);
        assert_eq!(cfg.count, Some(42));
        assert_eq!(cfg.proto, L4Proto::Tcp);
        assert_eq!(cfg.src_mac, MacAddr([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]));
        assert_eq!(cfg.dst_mac, GeneratorConfig::default().dst_mac);
        assert_eq!(cfg.dst_ip, Ipv4Addr::new(10, 2, 0, 1));
        assert_eq!(cfg.src_ip, Ipv4Addr::new(16, 1, 1, 1));
        assert!(!cfg.udp_checksum);

        let e = toml::from_str::<GeneratorConfig>("frame_sise = 64").unwrap_err();
        assert!(e.to_string().contains("frame_sise"), "{e}");
        let e = toml::from_str::<GeneratorConfig>("src_mac = \"02:00:00:00:00\"").unwrap_err();
        assert!(e.to_string().contains("not a MAC address"), "{e}");
        let e = toml::from_str::<GeneratorConfig>("proto = \"sctp\"").unwrap_err();
        assert!(e.to_string().contains("udp"), "{e}");

        // Serialises back to the same config.
        let text = toml::to_string(&cfg).unwrap();
        assert_eq!(toml::from_str::<GeneratorConfig>(&text).unwrap(), cfg);
    }

    /// FNV-1a over every generated frame (length and bytes) of each config: pins the exact
    /// output, so that speed work on `produce_at` cannot change a single byte. The hashes were
    /// taken from the generator before its fast path was restructured.
    #[test]
    fn output_is_byte_identical_to_the_pinned_hashes() {
        fn fnv(h: &mut u64, bytes: &[u8]) {
            for b in bytes {
                *h ^= u64::from(*b);
                *h = h.wrapping_mul(0x100_0000_01b3);
            }
        }
        let base = GeneratorConfig::default();
        let cases: Vec<(GeneratorConfig, u64)> = vec![
            (
                GeneratorConfig {
                    flows: 1,
                    ..base.clone()
                },
                0xa335_0bc7_55c9_701f,
            ),
            (
                GeneratorConfig {
                    flows: 1024,
                    ..base.clone()
                },
                0x5799_7bef_dbf8_7e92,
            ),
            (
                GeneratorConfig {
                    flows: 1000,
                    timestamps: true,
                    ..base.clone()
                },
                0xa4b3_aab3_ca49_cd70,
            ),
            (
                GeneratorConfig {
                    flows: 77,
                    udp_checksum: true,
                    frame_size: 131,
                    ..base.clone()
                },
                0x5e04_6cde_368f_401d,
            ),
            (
                GeneratorConfig {
                    flows: 300,
                    proto: L4Proto::Tcp,
                    frame_size: 74,
                    timestamps: true,
                    ..base.clone()
                },
                0x10ab_eda7_ad8a_7227,
            ),
            (
                GeneratorConfig {
                    flows: 5000,
                    src_port_count: 100,
                    dst_port_count: 7,
                    dst_ip_count: 13,
                    addr_mode: AddrMode::Random,
                    flow_dist: "zipf:1.1".parse().unwrap(),
                    size_mix: Some("imix".parse().unwrap()),
                    udp_checksum: true,
                    stream: 9,
                    ..base.clone()
                },
                0x1210_8b56_cf54_99de,
            ),
            (
                GeneratorConfig {
                    flows: 64,
                    flow_dist: "uniform".parse().unwrap(),
                    frame_size: 1518,
                    proto: L4Proto::Tcp,
                    ..base.clone()
                },
                0x587e_59eb_a888_a5ad,
            ),
            (
                GeneratorConfig {
                    frame_size: 65,
                    flows: 3,
                    ..base.clone()
                },
                0xe4a8_9e9c_d7e7_0f7e,
            ),
            (
                GeneratorConfig {
                    frame_size: 80,
                    flows: 3,
                    timestamps: true,
                    ..base
                },
                0x5496_2648_0b32_9507,
            ),
        ];
        let mut got = Vec::new();
        let mut got_batched = Vec::new();
        for (cfg, _) in &cases {
            let mut g = Generator::new(cfg.clone()).unwrap();
            let mut buf = vec![0u8; MAX_WIRE_FRAME];
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            for i in 0..2000u64 {
                let n = g.produce_at(&mut buf, i * 6_700_417).unwrap();
                fnv(&mut h, &(n as u32).to_le_bytes());
                fnv(&mut h, &buf[..n]);
            }
            got.push(h);
            // The same frames through batches of varying sizes.
            let mut g = Generator::new(cfg.clone()).unwrap();
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            let mut i = 0u64;
            let mut size = 1;
            while i < 2000 {
                let mut b = g.batch(size.min(2000 - i as usize), 0);
                while let Some(n) = b.next_at(&mut buf, i * 6_700_417) {
                    fnv(&mut h, &(n as u32).to_le_bytes());
                    fnv(&mut h, &buf[..n]);
                    i += 1;
                }
                drop(b);
                assert_eq!(g.counters().frames(), i);
                size = size % 37 + 1;
            }
            got_batched.push(h);
        }
        let want: Vec<u64> = cases.iter().map(|c| c.1).collect();
        assert_eq!(got, want, "frames changed: {got:#x?}");
        assert_eq!(
            got_batched, want,
            "batched frames differ: {got_batched:#x?}"
        );
    }

    #[test]
    fn batches_respect_count_stop_and_short_buffers() {
        let cfg = GeneratorConfig {
            count: Some(10),
            ..Default::default()
        };
        let mut g = Generator::new(cfg).unwrap();
        let mut buf = vec![0u8; 2048];
        let mut b = g.batch(32, 0);
        assert_eq!(b.remaining(), 10);
        assert_eq!(b.next_frame_size(), 64);
        let mut short = [0u8; 59];
        assert_eq!(b.next(&mut short), None, "too short: nothing written");
        let mut n = 0;
        while b.next(&mut buf).is_some() {
            n += 1;
        }
        drop(b);
        assert_eq!((n, g.next_seq(), g.counters().frames()), (10, 10, 10));
        assert!(g.done());
        assert_eq!(g.batch(32, 0).next(&mut buf), None);

        let mut g = Generator::new(GeneratorConfig::default()).unwrap();
        g.stop_flag().store(true, Ordering::Relaxed);
        assert_eq!(g.batch(32, 0).next(&mut buf), None);
        assert!(g.done());
    }

    #[test]
    fn mac_parsing() {
        assert_eq!(
            "02-00-00-00-00-0A".parse::<MacAddr>().unwrap(),
            MacAddr([2, 0, 0, 0, 0, 10])
        );
        assert_eq!(
            MacAddr([2, 0, 0, 0, 0, 10]).to_string(),
            "02:00:00:00:00:0a"
        );
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:00:00",
            "2:00:00:00:00:00",
            "zz:00:00:00:00:00",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }
}
