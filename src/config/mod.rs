//! The run configuration: one TOML file describing the datapath, the virtual NIC, the traffic and
//! the NF pipeline, with `--set key=value` overrides applied before it is checked.
//!
//! Every error names the file, the key and what is allowed, and nothing runs on a bad config.
//!
//! [`overrides`] is the `--set` parser (generic over any TOML table); `dpdk` the `[dpdk]`
//! section that selects DPDK ports (feature `dpdk`); [`net`] the ports' links and addresses,
//! routes, neighbours and ARP.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use dataplane::DatapathMode;
use dataplane::driver::vnic::{ClockMode, VnicTiming};
use dataplane::pcie_model::HardwareProfile;
use serde::Deserialize;

#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod net;
pub mod overrides;

/// A configuration error: the file, the dotted key (when known) and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The config file.
    pub file: PathBuf,
    /// Dotted key path, e.g. `datapath.mode` (empty when the error is about the whole file).
    pub key: String,
    /// What is wrong and what is allowed.
    pub msg: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "config {}: {}", self.file.display(), self.msg)
        } else {
            write!(
                f,
                "config {}: key `{}`: {}",
                self.file.display(),
                self.key,
                self.msg
            )
        }
    }
}

impl std::error::Error for ConfigError {}

/// `[run]`: how long and on how many cores.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RunSection {
    /// Worker threads (one per core, one queue pair per worker).
    pub workers: u16,
    /// Packets the embedded generator sends (0: unlimited, stop with `duration_s`).
    pub packets: u64,
    /// Stop generating after this many seconds (0: no limit).
    pub duration_s: f64,
    /// Seconds between live stats lines (0: none).
    pub stats_interval_s: f64,
    /// Seconds to wait for queues to drain after a stop.
    pub drain_timeout_s: f64,
    /// Seconds `dataplane ctl drain` keeps serving after health turns `draining` (so the
    /// instance's route announcement is withdrawn and established flows finish or move) before
    /// the run stops (docs/scale-out.md).
    pub instance_drain_s: f64,
    /// Seconds a worker's heartbeat may stand still, or a queue drop packets without receiving
    /// any, before `/nmdp/health` calls the run unhealthy.
    pub health_stall_s: f64,
    /// `wall` (CPU time measured) or `virtual` (CPU time from the profile's cycle model;
    /// deterministic: same config, same JSON).
    pub clock: ClockMode,
    /// Where a virtual-time run takes its NFs' CPU cost per packet from: `profile` (the
    /// hardware profile's `[host.cycles.nf]`) or `measured` (measured on this machine when the
    /// run starts, as `dataplane calibrate` measures it).
    pub nf_cycles: NfCyclesSource,
    /// Where the embedded generator and checking sink run: on a tester thread of their own
    /// (`on`), in the worker polling the port (`off`), or `auto`: their own thread on the wall
    /// clock when one worker polls the generator's port, in the worker otherwise (see
    /// [`WireThreadMode`]).
    pub wire_thread: WireThreadMode,
    /// End the run when the traffic has ended (the wire has nothing more to deliver); false
    /// keeps the workers polling, as on a real port, until `duration_s` or a stop signal.
    pub stop_when_idle: bool,
    /// Serve the telemetry socket (DPDK's telemetry v2 protocol; on DPDK ports the commands
    /// are registered with EAL's own telemetry instead).
    pub telemetry: bool,
    /// The file prefix of the telemetry socket: it is made in DPDK's runtime directory of this
    /// prefix, where `dpdk-telemetry.py -f <prefix>` and `dataplane ctl --prefix` look.
    pub telemetry_prefix: String,
    /// A group whose members may read the telemetry socket too (name or number; the socket
    /// becomes 0660). Unset: the run's user only (0600).
    #[serde(deserialize_with = "text_or_number")]
    pub telemetry_group: Option<String>,
    /// Serve Prometheus metrics at this address (`127.0.0.1:9100`; a bare port, `9100`,
    /// binds 127.0.0.1). Unset: no endpoint.
    #[serde(deserialize_with = "text_or_number")]
    pub metrics: Option<String>,
}

/// Where a virtual-time run takes its NFs' CPU cost per packet from (`run.nf_cycles`).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NfCyclesSource {
    /// The hardware profile's `[host.cycles.nf]`, one key per function (the default).
    #[default]
    Profile,
    /// The NF code measured on this machine over the run's traffic, converted to the profile's
    /// CPU clock (the `calibrate` module of this crate; once per process and traffic).
    Measured,
}

/// Where the embedded traffic of a port runs (`run.wire_thread`): `dataplane::link::wire`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WireThreadMode {
    /// On the wall clock with one worker: a tester thread; otherwise in the worker (a
    /// multi-queue port already reads its link on the NIC front end's own thread).
    #[default]
    Auto,
    /// Always on a tester thread. On the virtual clock the port waits for the tester's frames,
    /// so the run is the same as without it, only faster on a machine with a core to spare.
    On,
    /// In the thread that reads the port's link (the worker's for one worker).
    Off,
}

impl WireThreadMode {
    /// The config name (`auto`, `on`, `off`).
    pub fn as_str(self) -> &'static str {
        match self {
            WireThreadMode::Auto => "auto",
            WireThreadMode::On => "on",
            WireThreadMode::Off => "off",
        }
    }

    /// True when the generator's port gets a tester thread on `clock` with `workers` workers.
    pub fn enabled(self, clock: ClockMode, workers: u16) -> bool {
        match self {
            WireThreadMode::Auto => clock == ClockMode::Wall && workers == 1,
            WireThreadMode::On => true,
            WireThreadMode::Off => false,
        }
    }
}

impl NfCyclesSource {
    /// The config name (`profile`, `measured`).
    pub fn as_str(self) -> &'static str {
        match self {
            NfCyclesSource::Profile => "profile",
            NfCyclesSource::Measured => "measured",
        }
    }
}

impl Default for RunSection {
    fn default() -> Self {
        Self {
            workers: 1,
            packets: 0,
            duration_s: 0.0,
            stats_interval_s: 1.0,
            drain_timeout_s: 2.0,
            instance_drain_s: 30.0,
            health_stall_s: 2.0,
            clock: ClockMode::Wall,
            nf_cycles: NfCyclesSource::Profile,
            wire_thread: WireThreadMode::Auto,
            stop_when_idle: true,
            telemetry: true,
            telemetry_prefix: DEFAULT_TELEMETRY_PREFIX.into(),
            telemetry_group: None,
            metrics: None,
        }
    }
}

/// `[datapath]`: the mode and the packet layout.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DatapathSection {
    /// `host`, `split`, `nic-payload` or `nic-inline`.
    pub mode: DatapathMode,
    /// Header segment size in the split modes (bytes).
    pub split_offset: usize,
    /// Header bytes inlined into Tx descriptors in `nic-inline`; unset = the whole header
    /// segment (`split_offset`), as nmNFV inlines it (see [`DatapathSection::tx_inline`]).
    pub tx_inline: Option<usize>,
    /// Packets per burst.
    pub burst: usize,
}

impl Default for DatapathSection {
    fn default() -> Self {
        Self {
            mode: DatapathMode::NicInline,
            split_offset: 64,
            tx_inline: None,
            burst: 32,
        }
    }
}

impl DatapathSection {
    /// The Tx inline size: `tx_inline` when set, else the header segment (`split_offset`), so
    /// that moving the split point moves the inlined header with it.
    pub fn tx_inline(&self) -> usize {
        self.tx_inline.unwrap_or(self.split_offset)
    }
}

/// `[vnic]`: the virtual NIC's rings, memory and behaviour.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VnicSection {
    /// Rx descriptors per ring.
    pub rx_ring: usize,
    /// Tx WQEBBs per send queue.
    pub tx_ring: usize,
    /// One Tx completion per this many WQEs.
    pub tx_comp_every: usize,
    /// Largest frame without FCS (1514 standard; up to 9018 for jumbo).
    pub max_frame: usize,
    /// On-NIC memory size, e.g. `"256KiB"`, `"4MiB"`, `"80MiB"`; unset = the profile's
    /// `nic.nicmem.capacity`.
    pub nicmem: Option<String>,
    /// Cap on nicmem payload buffers per queue.
    pub nicmem_buffers: Option<usize>,
    /// Host buffers per pool per queue.
    pub host_buffers: Option<usize>,
    /// Per-core pool cache size.
    pub cache_size: usize,
    /// Take frames from the wire only when descriptors are posted (PAUSE semantics).
    pub flow_control: bool,
    /// Alias nicmem payload buffers (performance-only; payload bytes are not preserved).
    pub nicmem_alias: bool,
    /// In the nicmem modes, only the first K queues get nicmem payload pools; the others run
    /// `split` (0..=`run.workers`; unset = all).
    pub nicmem_queues: Option<u16>,
    /// `[[vnic.ports]]`: the ports of the NIC with their links and addresses; none: one port
    /// fed by the embedded generator (or `--rx-pcap`).
    pub ports: Vec<net::VnicPortSection>,
    /// `[vnic.faults]`: faults the virtual NIC injects (none by default).
    pub faults: FaultsSection,
}

/// `[vnic.faults]`: seeded, deterministic fault injection (see
/// [`dataplane::driver::vnic::FaultConfig`]): each `*_every` is a mean interval in the events
/// it counts, 0 = never.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FaultsSection {
    /// Seed of the injection.
    pub seed: u64,
    /// Frames received between link-down events.
    pub link_down_every: u64,
    /// Frames lost while the link is down, per event.
    pub link_down_frames: u64,
    /// Frames received between corrupted Rx descriptors.
    pub rx_desc_every: u64,
    /// WQEs posted between failed Tx DMA reads.
    pub tx_dma_every: u64,
    /// Doorbells between lost doorbells.
    pub doorbell_lost_every: u64,
    /// Frames received by queue 0 between device resets.
    pub reset_every: u64,
}

impl Default for FaultsSection {
    fn default() -> Self {
        Self {
            seed: 1,
            link_down_every: 0,
            link_down_frames: 64,
            rx_desc_every: 0,
            tx_dma_every: 0,
            doorbell_lost_every: 0,
            reset_every: 0,
        }
    }
}

/// The largest fault interval and link-down length `[vnic.faults]` takes (10^12 events).
const MAX_FAULT_EVENTS: u64 = 1_000_000_000_000;

impl Default for VnicSection {
    fn default() -> Self {
        let d = dataplane::driver::vnic::VnicConfig::default();
        Self {
            rx_ring: d.rx_ring,
            tx_ring: d.tx_ring,
            tx_comp_every: d.tx_comp_every,
            max_frame: d.max_frame,
            nicmem: None,
            nicmem_buffers: None,
            host_buffers: None,
            cache_size: d.cache_size,
            flow_control: d.flow_control,
            nicmem_alias: d.nicmem_alias,
            nicmem_queues: d.nicmem_queues,
            ports: Vec::new(),
            faults: FaultsSection::default(),
        }
    }
}

/// The whole run configuration.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// `[run]`.
    #[serde(default)]
    pub run: RunSection,
    /// `[datapath]`.
    #[serde(default)]
    pub datapath: DatapathSection,
    /// `[vnic]`.
    #[serde(default)]
    pub vnic: VnicSection,
    /// `[traffic]`: the embedded generator's profile (checked by `pktgen`), plus `rate_gbps`,
    /// the offered load (see [`RunConfig::offered_gbps`]).
    #[serde(default)]
    pub traffic: toml::Table,
    /// `[nic]`: `profile` (a built-in hardware profile name or a path to a profile TOML,
    /// default `cx5-gen3x16-100g`) and any profile key under `nic` as an override
    /// (`--set nic.pcie.mps=128`).
    #[serde(default)]
    pub nic: toml::Table,
    /// `[host]`: overrides of the profile's `[host]` keys (`--set host.ddio_ways=4`).
    #[serde(default)]
    pub host: toml::Table,
    /// `[[pipeline]]`: the NF chain, each entry a `name` plus that function's parameters.
    #[serde(default)]
    pub pipeline: Vec<toml::Table>,
    /// `[[route]]`: static routes (the ports' subnets are routes already).
    #[serde(default)]
    pub route: Vec<net::RouteSection>,
    /// `[[neighbor]]`: static neighbours.
    #[serde(default)]
    pub neighbor: Vec<net::NeighborSection>,
    /// `[arp]`: ARP and ICMP behaviour of the ports' slow path.
    #[serde(default)]
    pub arp: net::ArpSection,
    /// The config file set no key at all (see [`RunConfig::warnings`]).
    #[serde(skip)]
    file_sets_nothing: bool,
}

impl RunConfig {
    /// Loads `path`, applies `overrides` (`key=value`), and checks the result.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self, ConfigError> {
        let err = |key: &str, msg: String| ConfigError {
            file: path.to_path_buf(),
            key: key.to_string(),
            msg,
        };
        let text = read_config_text(path).map_err(|e| err("", e))?;
        let mut table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| err("", format!("not valid TOML: {}", e.message())))?;
        let file_sets_nothing = table.is_empty();
        for o in overrides {
            overrides::apply_assignment(&mut table, o)
                .map_err(|m| err(o.split('=').next().unwrap_or(""), m))?;
        }
        let mut cfg = Self::from_table(path, table)?;
        cfg.file_sets_nothing = file_sets_nothing;
        Ok(cfg)
    }

    /// Checks a parsed table (after overrides).
    pub fn from_table(path: &Path, table: toml::Table) -> Result<Self, ConfigError> {
        let cfg: RunConfig =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                ConfigError {
                    file: path.to_path_buf(),
                    key: e.path().to_string().trim_start_matches('.').to_string(),
                    msg: e.inner().message().trim().to_string(),
                }
            })?;
        cfg.check(path)?;
        Ok(cfg)
    }

    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let bad = |key: &str, msg: String| {
            Err(ConfigError {
                file: path.to_path_buf(),
                key: key.to_string(),
                msg,
            })
        };
        let r = &self.run;
        if !(1..=64).contains(&r.workers) {
            return bad(
                "run.workers",
                format!("{} out of range; allowed 1..=64", r.workers),
            );
        }
        for (key, secs, max) in [
            ("run.duration_s", r.duration_s, MAX_DURATION_S),
            (
                "run.stats_interval_s",
                r.stats_interval_s,
                MAX_STATS_INTERVAL_S,
            ),
            (
                "run.drain_timeout_s",
                r.drain_timeout_s,
                MAX_DRAIN_TIMEOUT_S,
            ),
            (
                "run.instance_drain_s",
                r.instance_drain_s,
                MAX_DRAIN_TIMEOUT_S,
            ),
        ] {
            // NaN fails both comparisons.
            if !(0.0..=max).contains(&secs) {
                return bad(
                    key,
                    format!("{secs} s out of range; allowed 0..={max} seconds"),
                );
            }
        }
        if !(MIN_HEALTH_STALL_S..=MAX_HEALTH_STALL_S).contains(&r.health_stall_s) {
            return bad(
                "run.health_stall_s",
                format!(
                    "{} s out of range; allowed {MIN_HEALTH_STALL_S}..={MAX_HEALTH_STALL_S} \
                     seconds",
                    r.health_stall_s
                ),
            );
        }
        if let Err(m) = dataplane::telemetry::check_prefix(&r.telemetry_prefix) {
            return bad("run.telemetry_prefix", m);
        }
        if let Some(g) = &r.telemetry_group
            && let Err(m) = group_id(g)
        {
            return bad("run.telemetry_group", m);
        }
        if let Some(m) = &r.metrics
            && let Err(e) = metrics_addr(m)
        {
            return bad("run.metrics", e);
        }
        let v = &self.vnic;
        if !(60..=9018).contains(&v.max_frame) {
            return bad(
                "vnic.max_frame",
                format!(
                    "{} out of range; allowed 60..=9018 (bytes without FCS)",
                    v.max_frame
                ),
            );
        }
        let d = &self.datapath;
        if d.mode.splits() && !(14..=v.max_frame).contains(&d.split_offset) {
            return bad(
                "datapath.split_offset",
                format!(
                    "{} out of range; allowed 14..={}",
                    d.split_offset, v.max_frame
                ),
            );
        }
        if d.tx_inline() > dataplane::driver::vnic::MAX_TX_INLINE {
            return bad(
                "datapath.tx_inline",
                format!(
                    "{} out of range; allowed 0..={} (a Tx descriptor holds at most 60 16-byte \
                     segments: control, Ethernet, the inline continuation and up to two data \
                     pointers)",
                    d.tx_inline(),
                    dataplane::driver::vnic::MAX_TX_INLINE
                ),
            );
        }
        if !(1..=dataplane::MAX_BURST).contains(&d.burst) {
            return bad(
                "datapath.burst",
                format!(
                    "{} out of range; allowed 1..={}",
                    d.burst,
                    dataplane::MAX_BURST
                ),
            );
        }
        for (k, n) in [("vnic.rx_ring", v.rx_ring), ("vnic.tx_ring", v.tx_ring)] {
            if !(16..=32768).contains(&n) {
                return bad(k, format!("{n} out of range; allowed 16..=32768"));
            }
        }
        let f = &v.faults;
        for (k, n) in [
            ("vnic.faults.link_down_every", f.link_down_every),
            ("vnic.faults.rx_desc_every", f.rx_desc_every),
            ("vnic.faults.tx_dma_every", f.tx_dma_every),
            ("vnic.faults.doorbell_lost_every", f.doorbell_lost_every),
            ("vnic.faults.reset_every", f.reset_every),
        ] {
            if n > MAX_FAULT_EVENTS {
                return bad(
                    k,
                    format!("{n} out of range; allowed 0 (never) ..={MAX_FAULT_EVENTS}"),
                );
            }
        }
        if !(1..=MAX_FAULT_EVENTS).contains(&f.link_down_frames) {
            return bad(
                "vnic.faults.link_down_frames",
                format!(
                    "{} out of range; allowed 1..={MAX_FAULT_EVENTS}",
                    f.link_down_frames
                ),
            );
        }
        if v.tx_comp_every == 0 || v.tx_comp_every > v.tx_ring {
            return bad(
                "vnic.tx_comp_every",
                format!(
                    "{} out of range; allowed 1..={}",
                    v.tx_comp_every, v.tx_ring
                ),
            );
        }
        if let Some(n) = &v.nicmem
            && nicmem::parse_size(n).is_none()
        {
            return bad(
                "vnic.nicmem",
                format!("`{n}` is not a size; use e.g. \"256KiB\", \"4MiB\", \"80MiB\" or bytes"),
            );
        }
        match self.nic.get("profile") {
            None | Some(toml::Value::String(_)) => {}
            Some(other) => {
                return bad(
                    "nic.profile",
                    format!(
                        "a {} is not allowed; give a built-in profile name ({}) or a path",
                        other.type_str(),
                        builtin_names()
                    ),
                );
            }
        }
        match self.traffic.get("rate_gbps") {
            None => {}
            Some(toml::Value::Integer(i)) if *i >= 0 => {}
            Some(toml::Value::Float(f)) if f.is_finite() && *f >= 0.0 => {}
            Some(other) => {
                return bad(
                    "traffic.rate_gbps",
                    format!(
                        "`{other}` is not allowed; give Gb/s at the wire, 0 < rate <= the profile's \
                         line rate, or 0 for frames pulled as fast as the NIC takes them"
                    ),
                );
            }
        }
        let nat_return = match self.traffic.get("nat_return") {
            None => false,
            Some(toml::Value::Boolean(b)) => *b,
            Some(other) => {
                return bad(
                    "traffic.nat_return",
                    format!(
                        "`{other}` is not allowed; give true (send NAT return traffic for the \
                         flows whose mapping was learned) or false"
                    ),
                );
            }
        };
        if let Some(v) = self.traffic.get("return_ratio") {
            let ratio = match v {
                toml::Value::Integer(i) => *i as f64,
                toml::Value::Float(f) => *f,
                _ => f64::NAN,
            };
            if !(ratio > 0.0 && ratio <= pktgen::nat_traffic::MAX_RETURN_RATIO) {
                return bad(
                    "traffic.return_ratio",
                    format!(
                        "`{v}` is not allowed; give return frames per forward frame, \
                         0 < ratio <= {}",
                        pktgen::nat_traffic::MAX_RETURN_RATIO
                    ),
                );
            }
            if !nat_return {
                return bad(
                    "traffic.return_ratio",
                    "is only allowed with traffic.nat_return = true".into(),
                );
            }
        }
        if nat_return && r.clock == ClockMode::Virtual && r.workers > 1 {
            return bad(
                "traffic.nat_return",
                format!(
                    "needs run.workers = 1 with run.clock = \"virtual\" (got {}): on a \
                     multi-queue port the NIC's front-end thread interleaves the generator and \
                     the sink by thread timing, so the return traffic would not be \
                     deterministic; use one worker, or run.clock = \"wall\"",
                    r.workers
                ),
            );
        }
        if let Some(k) = v.nicmem_queues
            && k > r.workers
        {
            return bad(
                "vnic.nicmem_queues",
                format!(
                    "{k} out of range; allowed 0..={} (run.workers: one queue per worker)",
                    r.workers
                ),
            );
        }
        if v.cache_size == 0 {
            return bad("vnic.cache_size", "must be at least 1".into());
        }
        let mut generators = 0;
        for (i, p) in v.ports.iter().enumerate() {
            let link = match net::VnicLink::parse(&p.link) {
                Ok(l) => l,
                Err(m) => return bad(&format!("vnic.ports[{i}].link"), m),
            };
            generators += usize::from(link == net::VnicLink::Generator);
            if matches!(link, net::VnicLink::Kernel(_)) && r.clock == ClockMode::Virtual {
                return bad(
                    &format!("vnic.ports[{i}].link"),
                    format!(
                        "`{}` is a link to the Linux kernel, which runs in real time; set \
                         run.clock = \"wall\"",
                        p.link
                    ),
                );
            }
            if let Err((key, msg)) = net::port_addr(
                &format!("vnic.ports[{i}]"),
                String::new(),
                p.mac.as_deref(),
                dataplane::net::MacAddr::local_for_port(i as u16),
                p.ip.as_deref(),
            ) {
                return bad(&key, msg);
            }
        }
        if generators > 1 {
            return bad(
                "vnic.ports",
                format!("{generators} ports have link = \"generator\"; at most one may"),
            );
        }
        if let Err((key, msg)) = self.arp.check() {
            return bad(&key, msg);
        }
        for (i, nf) in self.pipeline.iter().enumerate() {
            match nf.get("name") {
                Some(toml::Value::String(_)) => {}
                _ => {
                    return bad(
                        &format!("pipeline[{i}].name"),
                        format!("missing; allowed: {}", nfs::names().join(", ")),
                    );
                }
            }
        }
        Ok(())
    }

    /// Checks that the files the pipeline writes at the end of the run can be written, so that a
    /// run does not go through all its packets to fail at its last step: a flow counter's
    /// `dump_path` (for each worker's file, `{worker}` substituted) must not be a directory, and
    /// its folder must exist and accept a new file (probed with a file created and removed).
    pub fn check_outputs(&self, path: &Path) -> Result<(), ConfigError> {
        let workers = self.run.workers.max(1);
        for (i, nf) in self.pipeline.iter().enumerate() {
            let name = nf.get("name").and_then(|v| v.as_str()).unwrap_or("");
            if nfs::lookup(name).is_none_or(|s| s.name != nfs::flow_counter::SPEC.name) {
                continue;
            }
            let Some(toml::Value::String(dump)) = nf.get("dump_path") else {
                continue;
            };
            for w in 0..workers {
                let file = PathBuf::from(dump.replace("{worker}", &w.to_string()));
                check_writable(&file).map_err(|msg| ConfigError {
                    file: path.to_path_buf(),
                    key: format!("pipeline[{i}].dump_path"),
                    msg: format!("`{}`: {msg}", file.display()),
                })?;
            }
        }
        Ok(())
    }

    /// The `nic.profile` the config names (default [`DEFAULT_PROFILE`]), its TOML table before
    /// the config's `[nic]` and `[host]` overrides, and whether it is a built-in profile.
    fn profile_table(&self, path: &Path) -> Result<(String, toml::Table, bool), ConfigError> {
        let err = |msg: String| ConfigError {
            file: path.to_path_buf(),
            key: "nic.profile".into(),
            msg,
        };
        let spec = match self.nic.get("profile") {
            Some(toml::Value::String(s)) => s.clone(),
            _ => DEFAULT_PROFILE.to_string(),
        };
        let builtin = dataplane::pcie_model::profile::BUILTIN_PROFILES
            .iter()
            .find(|(n, _)| *n == spec);
        let text = match builtin {
            Some((_, text)) => text.to_string(),
            None => {
                let rel = path.parent().map(|d| d.join(&spec));
                let file = match rel {
                    Some(r) if r.exists() => r,
                    _ => PathBuf::from(&spec),
                };
                read_config_text(&file).map_err(|e| {
                    err(format!(
                        "`{spec}` is neither a built-in profile ({}) nor a readable profile \
                         file: {e}",
                        builtin_names()
                    ))
                })?
            }
        };
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            err(format!("profile `{spec}`: not valid TOML: {}", e.message()))
        })?;
        Ok((spec, table, builtin.is_some()))
    }

    /// What the config does that its author may not expect, one sentence each (the run prints
    /// them as warnings; nothing here is an error):
    /// - `datapath.tx_inline` above `datapath.split_offset` in `nic-inline`: only the header
    ///   segment can be inlined, so the effective inline size is `split_offset` (decided as a
    ///   warning rather than an error: the config still runs exactly as the warning says);
    /// - a config file that sets no key, and an empty `[[pipeline]]`: frames are forwarded
    ///   unchanged;
    /// - a `nic.profile` file that sets no key: every profile key takes its default.
    pub fn warnings(&self, path: &Path) -> Vec<String> {
        let mut w = Vec::new();
        let d = &self.datapath;
        if d.mode == DatapathMode::NicInline && d.tx_inline() > d.split_offset {
            w.push(format!(
                "datapath.tx_inline = {} exceeds the header segment (datapath.split_offset = {}): \
                 nic-inline inlines {} B per packet",
                d.tx_inline(),
                d.split_offset,
                d.split_offset
            ));
        }
        if self.file_sets_nothing {
            w.push("the file sets no key: every key takes its default".into());
        }
        if self.pipeline.is_empty() {
            w.push(format!(
                "no [[pipeline]]: frames are forwarded unchanged, as with a single io_fwd; add \
                 [[pipeline]] entries ({}) to process them",
                nfs::names().join(", ")
            ));
        }
        if let Ok((spec, table, false)) = self.profile_table(path)
            && table.is_empty()
        {
            w.push(format!(
                "nic.profile `{spec}` sets no key: every profile key takes its default (the \
                 values of {DEFAULT_PROFILE})"
            ));
        }
        w
    }

    /// The hardware profile: `nic.profile` (built-in name, or a path relative to the config
    /// file's folder or the working directory) with the config's other `[nic]` and `[host]` keys
    /// applied as overrides, then validated. Errors name the file and the key.
    pub fn profile(&self, path: &Path) -> Result<HardwareProfile, ConfigError> {
        let err = |key: &str, msg: String| ConfigError {
            file: path.to_path_buf(),
            key: key.to_string(),
            msg,
        };
        let (spec, mut table, _) = self.profile_table(path)?;
        let mut nic = self.nic.clone();
        nic.remove("profile");
        merge(&mut table, "nic", nic);
        merge(&mut table, "host", self.host.clone());
        let p: HardwareProfile = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                err(
                    e.path().to_string().trim_start_matches('.'),
                    format!("profile `{spec}`: {}", e.inner().message().trim()),
                )
            })?;
        p.validate().map_err(|m| {
            let key = m.split('`').nth(1).unwrap_or("nic").to_string();
            err(&key, format!("profile `{spec}`: {m}"))
        })?;
        for name in p.host.cycles.nf.keys() {
            if nfs::lookup(name).is_none_or(|s| s.name != name) {
                let hint = match nfs::lookup(name) {
                    Some(s) => format!("write it under its canonical name `{}`", s.name),
                    None => format!("registered network functions: {}", nfs::names().join(", ")),
                };
                return Err(err(
                    &format!("host.cycles.nf.{name}"),
                    format!("profile `{spec}`: `{name}` is not a network function's name; {hint}"),
                ));
            }
        }
        Ok(p)
    }

    /// The offered load in Gb/s at the wire: `traffic.rate_gbps` when set and non-zero; unset,
    /// the profile's line rate in virtual-clock runs; `None` (frames pulled as fast as the NIC
    /// takes them, flow control) for 0, or unset in wall-clock runs. Errors for a rate above the
    /// line rate.
    pub fn offered_gbps(
        &self,
        path: &Path,
        profile: &HardwareProfile,
    ) -> Result<Option<f64>, ConfigError> {
        let line = profile.nic.line_rate_gbps;
        let rate = match self.traffic.get("rate_gbps") {
            Some(toml::Value::Integer(i)) => Some(*i as f64),
            Some(toml::Value::Float(f)) => Some(*f),
            _ => None,
        };
        match rate {
            None if self.run.clock == ClockMode::Virtual => Ok(Some(line)),
            None => Ok(None),
            Some(0.0) => Ok(None),
            Some(r) if r <= line * (1.0 + 1e-9) => Ok(Some(r)),
            Some(r) => Err(ConfigError {
                file: path.to_path_buf(),
                key: "traffic.rate_gbps".into(),
                msg: format!(
                    "{r} Gb/s exceeds the line rate of {line} Gb/s (nic.line_rate_gbps); allowed \
                     0 (pulled) or 0 < rate <= {line}"
                ),
            }),
        }
    }

    /// True when the pipeline has a `route` stage.
    pub fn has_route_stage(&self) -> bool {
        self.pipeline.iter().any(|e| {
            e.get("name")
                .and_then(|v| v.as_str())
                .and_then(nfs::lookup)
                .is_some_and(|s| s.name == nfs::route::NAME)
        })
    }

    /// The run's network over ports with addresses `ports` (see [`net::build_network`]).
    pub fn network(
        &self,
        path: &Path,
        ports: Vec<dataplane::net::PortAddr>,
    ) -> Result<Option<std::sync::Arc<dataplane::net::Network>>, ConfigError> {
        net::build_network(
            ports,
            &self.route,
            &self.neighbor,
            &self.arp,
            self.has_route_stage(),
        )
        .map_err(|(key, msg)| ConfigError {
            file: path.to_path_buf(),
            key,
            msg,
        })
    }

    /// The `[traffic]` table for the generator (without the keys the run uses,
    /// [`PORT_TRAFFIC_KEYS`]).
    pub fn generator_table(&self) -> toml::Table {
        let mut t = self.traffic.clone();
        for k in PORT_TRAFFIC_KEYS {
            t.remove(k);
        }
        t
    }

    /// The NAT-aware return traffic `[traffic]` asks for (`nat_return = true`, `return_ratio`
    /// default 1), with the NAT address taken from the pipeline's first `nat` entry (its
    /// `nat_ip`, default 10.0.0.1; the same default without a `nat` entry, so a pipeline that
    /// does not translate shows up as wrongly translated traffic). `None` without `nat_return`.
    pub fn nat_return(
        &self,
        path: &Path,
    ) -> Result<Option<pktgen::nat_traffic::NatReturnConfig>, ConfigError> {
        if self.traffic.get("nat_return") != Some(&toml::Value::Boolean(true)) {
            return Ok(None);
        }
        let ratio = match self.traffic.get("return_ratio") {
            Some(toml::Value::Integer(i)) => *i as f64,
            Some(toml::Value::Float(f)) => *f,
            _ => 1.0,
        };
        let nat = self
            .pipeline
            .iter()
            .enumerate()
            .find(|(_, e)| e.get("name").and_then(|v| v.as_str()) == Some(nfs::nat::NAME));
        let (key, text) = match nat.and_then(|(i, e)| Some((i, e.get("nat_ip")?))) {
            Some((i, toml::Value::String(s))) => (format!("pipeline[{i}].nat_ip"), s.clone()),
            Some((i, other)) => (format!("pipeline[{i}].nat_ip"), other.to_string()),
            None => (
                "traffic.nat_return".to_string(),
                nfs::nat::NatConfig::default().nat_ip,
            ),
        };
        let nat_ip = text.parse().map_err(|_| ConfigError {
            file: path.to_path_buf(),
            key,
            msg: format!("`{text}` is not an IPv4 address"),
        })?;
        Ok(Some(pktgen::nat_traffic::NatReturnConfig { ratio, nat_ip }))
    }

    /// NF cycles per packet of the pipeline under the profile's `[host.cycles.nf]`: each
    /// function's cost under its canonical name (`host.cycles.nf.<name>`, aliases resolved
    /// first; see [`nfs::NfSpec::cost_key`]). A function the registry does not know, or one the
    /// profile gives no cost, is an error naming the key: nothing is charged 0 by omission.
    pub fn nf_cycles(&self, path: &Path, profile: &HardwareProfile) -> Result<u32, ConfigError> {
        Ok(self
            .nf_cycles_each(path, profile)?
            .iter()
            .fold(0u32, |t, (_, c)| t.saturating_add(*c)))
    }

    /// The profile's cycles per packet of each pipeline entry, in pipeline order, under its
    /// canonical name (what [`RunConfig::nf_cycles`] adds up; the same errors).
    pub fn nf_cycles_each(
        &self,
        path: &Path,
        profile: &HardwareProfile,
    ) -> Result<Vec<(&'static str, u32)>, ConfigError> {
        let costs = &profile.host.cycles.nf;
        let mut each = Vec::with_capacity(self.pipeline.len());
        for (i, e) in self.pipeline.iter().enumerate() {
            let name = e.get("name").and_then(|v| v.as_str()).unwrap_or("");
            let spec = nfs::lookup(name).ok_or_else(|| ConfigError {
                file: path.to_path_buf(),
                key: format!("pipeline[{i}].name"),
                msg: format!(
                    "unknown network function `{name}`; allowed: {}",
                    nfs::names().join(", ")
                ),
            })?;
            let cost = costs.get(spec.name).ok_or_else(|| ConfigError {
                file: path.to_path_buf(),
                key: spec.cost_key(),
                msg: format!(
                    "the hardware profile has no CPU cost for `{}` (pipeline[{i}]), which a \
                     virtual-time run charges per packet; set it in the profile's \
                     [host.cycles.nf] or with --set {}=CYCLES",
                    spec.name,
                    spec.cost_key()
                ),
            })?;
            each.push((spec.name, *cost));
        }
        Ok(each)
    }

    /// DRAM reads per packet of the pipeline's own state under the profile's
    /// `[host.cycles.nf_dram_reads]` (canonical names; a function not listed reads none), which
    /// a virtual-time run charges at the loaded DRAM latency.
    pub fn nf_dram_reads(&self, profile: &HardwareProfile) -> u32 {
        self.pipeline_sum(&profile.host.cycles.nf_dram_reads)
    }

    /// Cache lines per packet of the pipeline's own state its functions dirty under the
    /// profile's `[host.cycles.nf_dram_writes]` (canonical names; a function not listed writes
    /// none), which a virtual-time run books as DRAM write-backs.
    pub fn nf_dram_writes(&self, profile: &HardwareProfile) -> u32 {
        self.pipeline_sum(&profile.host.cycles.nf_dram_writes)
    }

    /// The sum of a per-function profile table over the pipeline's functions.
    fn pipeline_sum(&self, table: &dataplane::pcie_model::profile::NfCycles) -> u32 {
        self.pipeline
            .iter()
            .filter_map(|e| nfs::lookup(e.get("name")?.as_str()?))
            .filter_map(|spec| table.get(spec.name))
            .fold(0u32, |a, n| a.saturating_add(*n))
    }

    /// The traffic's frame size in bytes with FCS when `[traffic]` gives one
    /// (`traffic.frame_size`).
    pub fn frame_hint(&self) -> Option<u32> {
        match self.traffic.get("frame_size") {
            Some(toml::Value::Integer(i)) => u32::try_from(*i).ok(),
            _ => None,
        }
    }

    /// The virtual NIC parameters this config describes on `profile`, paced at `offered_gbps`.
    /// The CPU cost per packet of the NFs is charged only in virtual time: `measured` cycles
    /// when given (`run.nf_cycles = "measured"`, which the run measures), else the profile's,
    /// so only there does a missing cost fail ([`RunConfig::nf_cycles`]).
    pub fn vnic_config(
        &self,
        path: &Path,
        profile: &HardwareProfile,
        offered_gbps: Option<f64>,
        measured: Option<u32>,
    ) -> Result<dataplane::driver::vnic::VnicConfig, ConfigError> {
        let v = &self.vnic;
        let d = &self.datapath;
        // A measured NF cost already includes the memory accesses the NFs made on this machine,
        // so only the profile's cost adds the NFs' DRAM reads at the loaded latency (a run passes
        // the profile's total as `measured` too; the source decides, not its presence).
        let (nf_cycles, nf_dram_reads, nf_dram_writes) = match (self.run.clock, measured) {
            (ClockMode::Virtual, Some(m)) if self.run.nf_cycles == NfCyclesSource::Measured => {
                (m, 0, 0)
            }
            (ClockMode::Virtual, _) => (
                self.nf_cycles(path, profile)?,
                self.nf_dram_reads(profile),
                self.nf_dram_writes(profile),
            ),
            (ClockMode::Wall, _) => (0, 0, 0),
        };
        let f = &v.faults;
        if f.link_down_every > 0 && offered_gbps.is_some() {
            return Err(ConfigError {
                file: path.to_path_buf(),
                key: "vnic.faults.link_down_every".into(),
                msg: "needs frames pulled by the NIC, not paced arrivals: set traffic.rate_gbps \
                      = 0 (a paced run's arrivals follow the offered load)"
                    .into(),
            });
        }
        Ok(dataplane::driver::vnic::VnicConfig {
            mode: d.mode,
            split_offset: d.split_offset,
            tx_inline: d.tx_inline(),
            queues: self.run.workers,
            rx_ring: v.rx_ring,
            tx_ring: v.tx_ring,
            tx_comp_every: v.tx_comp_every,
            max_frame: v.max_frame,
            nicmem_bytes: match &v.nicmem {
                Some(n) => nicmem::parse_size(n).unwrap_or(0),
                None => profile.nic.nicmem.capacity.bytes() as usize,
            },
            nicmem_buffers: v.nicmem_buffers,
            host_buffers: v.host_buffers,
            cache_size: v.cache_size,
            burst: d.burst,
            flow_control: v.flow_control,
            nicmem_alias: v.nicmem_alias,
            nicmem_queues: v.nicmem_queues,
            profile: profile.clone(),
            timing: Some(VnicTiming {
                clock: self.run.clock,
                offered_gbps,
                nf_cycles,
                nf_dram_reads,
                nf_dram_writes,
                frame_hint: self.frame_hint(),
            }),
            steering: Vec::new(),
            faults: dataplane::driver::vnic::FaultConfig {
                seed: f.seed,
                link_down_every: f.link_down_every,
                link_down_frames: f.link_down_frames,
                rx_desc_every: f.rx_desc_every,
                tx_dma_every: f.tx_dma_every,
                doorbell_lost_every: f.doorbell_lost_every,
                reset_every: f.reset_every,
            },
        })
    }

    /// Builds one NF chain for worker `worker` of `workers`. Errors name the pipeline entry.
    pub fn build_chain(
        &self,
        path: &Path,
        worker: u16,
        workers: u16,
    ) -> Result<dataplane::NfChain, ConfigError> {
        self.build_chain_on(path, worker, workers, None)
    }

    /// [`RunConfig::build_chain`] for a run with a network layer (what the `route` stage
    /// forwards by).
    pub fn build_chain_on(
        &self,
        path: &Path,
        worker: u16,
        workers: u16,
        net: Option<std::sync::Arc<dataplane::net::Network>>,
    ) -> Result<dataplane::NfChain, ConfigError> {
        let mut chain = dataplane::NfChain::new();
        let ctx = nfs::BuildContext {
            worker,
            workers,
            net,
        };
        for (i, entry) in self.pipeline.iter().enumerate() {
            let mut params = entry.clone();
            let name = match params.remove("name") {
                Some(toml::Value::String(s)) => s,
                _ => String::new(),
            };
            let nf = nfs::build(&name, &params, &ctx).map_err(|msg| ConfigError {
                file: path.to_path_buf(),
                key: format!("pipeline[{i}]"),
                msg,
            })?;
            chain.push(nf);
        }
        Ok(chain)
    }
}

/// Keys of `[traffic]` that belong to the run, not to the generator: `rate_gbps` (the offered
/// load at the port) and `nat_return` / `return_ratio` (NAT-aware return traffic, which the run
/// wires between the port's sink and source).
pub const PORT_TRAFFIC_KEYS: [&str; 3] = ["rate_gbps", "nat_return", "return_ratio"];

/// Reads a config or profile file: a regular file of at most
/// [`dataplane::textfile::MAX_TEXT_FILE`] bytes (never an unbounded read of `/dev/zero` or a huge
/// file).
pub fn read_config_text(path: &Path) -> Result<String, String> {
    dataplane::textfile::read_bounded(path, dataplane::textfile::MAX_TEXT_FILE)
}

/// Whether a file can be created or replaced at `file`: not a directory, in an existing folder
/// that accepts a new file. The error says what is wrong.
fn check_writable(file: &Path) -> Result<(), String> {
    if file.is_dir() {
        return Err("is a directory; give a file name".into());
    }
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "its folder {} does not exist or is not a folder",
            dir.display()
        ));
    }
    let probe = dir.join(format!(".nmdp-write-check-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| format!("cannot create a file in {}: {e}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    if file.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(file)
            .map_err(|e| format!("cannot be written: {e}"))?;
    }
    Ok(())
}

/// Longest `run.duration_s`: one year. Longer runs are stopped by hand (0 = no limit).
pub const MAX_DURATION_S: f64 = 365.0 * 86_400.0;
/// Longest `run.stats_interval_s`: one day.
pub const MAX_STATS_INTERVAL_S: f64 = 86_400.0;
/// Shortest `run.health_stall_s`: a worker publishes its heartbeat every 1024 loop iterations,
/// which a busy debug build may take tens of milliseconds for.
const MIN_HEALTH_STALL_S: f64 = 0.2;
/// Longest `run.health_stall_s`.
const MAX_HEALTH_STALL_S: f64 = 600.0;

/// Longest `run.drain_timeout_s`: one hour; a queue that has not drained by then never will.
pub const MAX_DRAIN_TIMEOUT_S: f64 = 3_600.0;

/// A text, or a number taken as its text (`metrics = 9100`, `telemetry_group = 1000`).
fn text_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Text(String),
        Number(u64),
    }
    Ok(match Text::deserialize(d) {
        Ok(Text::Text(s)) => Some(s),
        Ok(Text::Number(n)) => Some(n.to_string()),
        Err(_) => return Err(serde::de::Error::custom("give a text or a number")),
    })
}

/// The address to bind for `run.metrics` = `spec`: `host:port` as given (`0.0.0.0:9100` to listen everywhere),
/// or a bare port (`9100`, `:9100`) on 127.0.0.1.
pub fn metrics_addr(spec: &str) -> Result<SocketAddr, String> {
    let s = spec.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    match s.trim_start_matches(':').parse::<u16>() {
        Ok(port) => Ok(SocketAddr::from(([127, 0, 0, 1], port))),
        Err(_) => Err(format!(
            "`{spec}` is not an address; give e.g. \"127.0.0.1:9100\", \"9100\" (on 127.0.0.1) \
             or \"0.0.0.0:9100\" (every interface)"
        )),
    }
}

/// The telemetry socket's file prefix when `run.telemetry_prefix` is not set.
pub const DEFAULT_TELEMETRY_PREFIX: &str = "nmdp";

/// The id of group `g`: a number, or a name in `/etc/group`.
pub fn group_id(g: &str) -> Result<u32, String> {
    if let Ok(n) = g.parse::<u32>() {
        return Ok(n);
    }
    let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let gid = f.nth(1)?.parse::<u32>().ok()?;
            Some((name, gid))
        })
        .find(|(n, _)| *n == g)
        .map(|(_, gid)| gid)
        .ok_or_else(|| format!("no group `{g}` in /etc/group; give a group name or number"))
}

/// The hardware profile used when `nic.profile` is not set.
pub const DEFAULT_PROFILE: &str = "cx5-gen3x16-100g";

fn builtin_names() -> String {
    dataplane::pcie_model::profile::BUILTIN_PROFILES
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Deep-merges `over` into `table[section]` (leaves of `over` replace those of the table).
fn merge(table: &mut toml::Table, section: &str, over: toml::Table) {
    fn go(dst: &mut toml::Table, over: toml::Table) {
        for (k, v) in over {
            match (dst.get_mut(&k), v) {
                (Some(toml::Value::Table(d)), toml::Value::Table(o)) => go(d, o),
                (_, v) => {
                    dst.insert(k, v);
                }
            }
        }
    }
    if over.is_empty() {
        return;
    }
    let entry = table
        .entry(section.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    match entry {
        toml::Value::Table(t) => go(t, over),
        other => *other = toml::Value::Table(over),
    }
}

/// True when `a` and `b` name the same existing file (through hard links or symbolic links too).
pub fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    }
}

/// A hardware profile for `dataplane model`: a built-in name or a profile file, with `sets`
/// (`key=value`, as for `--set`) applied before it is checked. Errors name the file.
pub fn resolve_profile(spec: &str, sets: &[String]) -> Result<HardwareProfile, String> {
    let builtin = dataplane::pcie_model::profile::BUILTIN_PROFILES
        .iter()
        .find(|(n, _)| *n == spec);
    let (text, what) = match builtin {
        Some((name, text)) => (text.to_string(), format!("built-in profile {name}")),
        None => (
            read_config_text(Path::new(spec))
                .map_err(|e| format!("{spec}: hardware profile: {e}"))?,
            spec.to_string(),
        ),
    };
    let mut table: toml::Table = text.parse().map_err(|e| format!("{what}: {e}"))?;
    for s in sets {
        overrides::apply_assignment(&mut table, s).map_err(|e| format!("{what}: {e}"))?;
    }
    HardwareProfile::from_table(table).map_err(|e| format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_str(s: &str, sets: &[&str]) -> Result<RunConfig, ConfigError> {
        let mut t: toml::Table = s.parse().unwrap();
        for o in sets {
            overrides::apply_assignment(&mut t, o).unwrap();
        }
        RunConfig::from_table(Path::new("t.toml"), t)
    }

    #[test]
    fn defaults_and_overrides() {
        let c = load_str("", &["datapath.mode=split", "vnic.rx_ring=256"]).unwrap();
        assert_eq!(c.datapath.mode, DatapathMode::Split);
        assert_eq!(c.vnic.rx_ring, 256);
        assert_eq!(c.run.workers, 1);
    }

    #[test]
    fn errors_name_file_key_and_allowed_values() {
        let e = load_str("[datapath]\nmode = \"hots\"\n", &[]).unwrap_err();
        assert_eq!(e.key, "datapath.mode");
        let s = e.to_string();
        assert!(s.contains("t.toml") && s.contains("nic-inline"), "{s}");
        let e = load_str("[vnic]\nrx_rings = 5\n", &[]).unwrap_err();
        assert!(e.to_string().contains("rx_rings"), "{e}");
        let e = load_str("[vnic]\nmax_frame = 20000\n", &[]).unwrap_err();
        assert_eq!(e.key, "vnic.max_frame");
        let e = load_str("[vnic]\nnicmem = \"lots\"\n", &[]).unwrap_err();
        assert_eq!(e.key, "vnic.nicmem");
        let e = load_str("[[pipeline]]\nfoo = 1\n", &[]).unwrap_err();
        assert_eq!(e.key, "pipeline[0].name");
        let c = load_str("[[pipeline]]\nname = \"nope\"\n", &[]).unwrap();
        let e = c.build_chain(Path::new("t.toml"), 0, 1).err().unwrap();
        assert!(
            e.to_string().contains("pipeline[0]") && e.msg.contains("macswap"),
            "{e}"
        );
    }

    /// `--set` reaches one parameter of one pipeline entry, by name or index; a bad key or
    /// value is the same error as in the file (the entry, the key, what is allowed).
    #[test]
    fn overrides_reach_pipeline_entries() {
        let p = Path::new("t.toml");
        let two = "[[pipeline]]\nname = \"lb\"\n[[pipeline]]\nname = \"macswap\"\n";
        let c = load_str(
            two,
            &["pipeline.lb.backend_count=3", "pipeline[0].mode=maglev"],
        )
        .unwrap();
        assert_eq!(c.pipeline[0]["backend_count"], toml::Value::Integer(3));
        assert_eq!(c.pipeline[0]["mode"], toml::Value::String("maglev".into()));
        assert!(c.build_chain(p, 0, 1).is_ok());
        let c = load_str(two, &["pipeline.lb.vipp=10.0.0.1"]).unwrap();
        let e = c.build_chain(p, 0, 1).err().unwrap();
        assert_eq!(e.key, "pipeline[0]");
        assert!(
            e.msg.contains("vipp") && e.msg.contains("backend_count"),
            "{e}"
        );
        let c = load_str(two, &["pipeline.1.mode=maglevv"]).unwrap();
        let e = c.build_chain(p, 0, 1).err().unwrap();
        assert_eq!(e.key, "pipeline[1]", "{e}");
        let c = load_str(two, &["pipeline.lb.mode=maglevv"]).unwrap();
        let e = c.build_chain(p, 0, 1).err().unwrap();
        assert!(
            e.msg.contains("maglevv") && e.msg.contains("round-robin"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("nmdp-config-set-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.toml");
        std::fs::write(&f, two).unwrap();
        let e = RunConfig::load(&f, &["pipeline.nat.nat_ip=10.0.0.9".into()]).unwrap_err();
        assert_eq!(e.key, "pipeline.nat.nat_ip");
        assert!(
            e.to_string().contains("c.toml") && e.msg.contains("lb ([0]), macswap ([1])"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The operation keys: a prefix that names a directory, a known group, an address; errors
    /// name the key and what is allowed.
    #[test]
    fn operation_keys_are_checked() {
        let c = load_str("", &[]).unwrap();
        assert!(c.run.telemetry && c.run.stop_when_idle && c.run.metrics.is_none());
        assert_eq!(c.run.telemetry_prefix, "nmdp");
        let c = load_str("", &["run.metrics=9100", "run.telemetry_group=0"]).unwrap();
        assert_eq!(c.run.metrics.as_deref(), Some("9100"));
        for (set, key, allowed) in [
            (
                "run.telemetry_prefix=\"a/b\"",
                "run.telemetry_prefix",
                "letters, digits",
            ),
            (
                "run.telemetry_group=no-such-group-x",
                "run.telemetry_group",
                "/etc/group",
            ),
            ("run.metrics=localhost", "run.metrics", "127.0.0.1:9100"),
            ("run.health_stall_s=0", "run.health_stall_s", "0.2..=600"),
            (
                "run.instance_drain_s=-1",
                "run.instance_drain_s",
                "0..=3600",
            ),
        ] {
            let e = load_str("", &[set]).unwrap_err();
            assert_eq!(e.key, key, "{set}: {e}");
            assert!(e.msg.contains(allowed), "{set}: {e}");
        }
    }

    /// Durations far beyond any run (1e20 s does not fit a `Duration`, which panicked when the
    /// run converted it) and non-numbers are config errors naming the key and the range.
    #[test]
    fn durations_are_range_checked() {
        for (key, max) in [
            ("run.duration_s", "31536000"),
            ("run.stats_interval_s", "86400"),
            ("run.drain_timeout_s", "3600"),
        ] {
            let (section, name) = key.split_once('.').unwrap();
            for v in ["1e20", "1e300", "-1", "nan", "inf"] {
                let e = load_str(&format!("[{section}]\n{name} = {v}\n"), &[]).unwrap_err();
                assert_eq!(e.key, key, "{v}: {e}");
                assert!(e.msg.contains(&format!("0..={max}")), "{key}={v}: {e}");
            }
            let c = load_str("", &[&format!("{key}={max}")]).unwrap();
            let got = match key {
                "run.duration_s" => c.run.duration_s,
                "run.stats_interval_s" => c.run.stats_interval_s,
                _ => c.run.drain_timeout_s,
            };
            assert_eq!(got.to_string(), max, "{key} at its maximum is accepted");
        }
    }

    /// Configs that run, but not as their author may expect, say so: an inline size the header
    /// segment cannot hold, no pipeline, an empty config or profile file.
    #[test]
    fn surprising_configs_are_warned_about() {
        let p = Path::new("t.toml");
        let macswap = "[[pipeline]]\nname = \"macswap\"\n";
        assert!(load_str(macswap, &[]).unwrap().warnings(p).is_empty());
        let w = load_str(macswap, &["datapath.tx_inline=128"])
            .unwrap()
            .warnings(p);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("datapath.tx_inline = 128") && w[0].contains("inlines 64 B"),
            "{w:?}"
        );
        // Only nic-inline inlines.
        let host = load_str(macswap, &["datapath.tx_inline=128", "datapath.mode=host"]).unwrap();
        assert!(host.warnings(p).is_empty());
        let w = load_str("", &[]).unwrap().warnings(p);
        assert!(
            w.len() == 1 && w[0].contains("no [[pipeline]]") && w[0].contains("unchanged"),
            "{w:?}"
        );

        let dir = std::env::temp_dir().join(format!("nmdp-config-warn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.toml");
        std::fs::write(&empty, "# nothing here\n").unwrap();
        let c = RunConfig::load(&empty, &[]).unwrap();
        let w = c.warnings(&empty);
        assert!(w.iter().any(|m| m.contains("sets no key")), "{w:?}");
        assert!(w.iter().any(|m| m.contains("no [[pipeline]]")), "{w:?}");
        // An override alone does not make the file set something.
        let c = RunConfig::load(&empty, &["run.workers=2".into()]).unwrap();
        assert!(c.warnings(&empty).iter().any(|m| m.contains("sets no key")));

        let cfg = dir.join("with-profile.toml");
        std::fs::write(&cfg, format!("[nic]\nprofile = \"empty.toml\"\n{macswap}")).unwrap();
        let c = RunConfig::load(&cfg, &[]).unwrap();
        let w = c.warnings(&cfg);
        assert!(
            w.len() == 1 && w[0].contains("nic.profile `empty.toml` sets no key"),
            "{w:?}"
        );
        // ... and the defaults it gets are the default profile's, as the warning says.
        assert_eq!(
            c.profile(&cfg).unwrap(),
            load_str("", &[]).unwrap().profile(p).unwrap()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nat_return_takes_the_nat_address_from_the_pipeline() {
        let p = Path::new("t.toml");
        let c = load_str("", &[]).unwrap();
        assert_eq!(c.nat_return(p).unwrap(), None);
        let nat =
            "[traffic]\nnat_return = true\n[[pipeline]]\nname = \"nat\"\nnat_ip = \"10.9.9.9\"\n";
        let r = load_str(nat, &["traffic.return_ratio=2"])
            .unwrap()
            .nat_return(p)
            .unwrap()
            .unwrap();
        assert_eq!((r.ratio, r.nat_ip.to_string().as_str()), (2.0, "10.9.9.9"));
        // No NAT in the pipeline: the NAT's default address (so nothing counts as translated).
        let r = load_str("[traffic]\nnat_return = true\n", &[])
            .unwrap()
            .nat_return(p)
            .unwrap()
            .unwrap();
        assert_eq!((r.ratio, r.nat_ip.to_string().as_str()), (1.0, "10.0.0.1"));
        let e = load_str(&nat.replace("10.9.9.9", "nowhere"), &[])
            .unwrap()
            .nat_return(p)
            .unwrap_err();
        assert_eq!(e.key, "pipeline[0].nat_ip", "{e}");
        // The generator never sees the run's keys.
        let c = load_str(nat, &["traffic.rate_gbps=5"]).unwrap();
        assert!(
            PORT_TRAFFIC_KEYS
                .iter()
                .all(|k| !c.generator_table().contains_key(*k))
        );
    }

    #[test]
    fn profile_overrides_apply_before_validation() {
        let sets = vec![
            "nic.pcie.mps=128".to_string(),
            "nic.nicmem.capacity=4MiB".to_string(),
        ];
        let p = resolve_profile("cx5-gen3x16-100g", &sets).unwrap();
        assert_eq!(p.nic.pcie.mps, 128);
        assert_eq!(p.nic.nicmem.capacity.bytes(), 4 << 20);
        let e = resolve_profile("cx5-gen3x16-100g", &["nic.pcie.mps=100".into()]).unwrap_err();
        assert!(e.contains("nic.pcie.mps"), "{e}");
        let e = resolve_profile("/nonexistent/x.toml", &[]).unwrap_err();
        assert!(e.contains("/nonexistent/x.toml"), "{e}");
        let p = resolve_profile("cx6dx-gen4x16-200g", &["nic.ports=2".into()]).unwrap();
        assert_eq!(p.nic.ports, 2);
    }

    /// The CPU model charges each registered function its own profile key, under its canonical
    /// name whatever spelling the pipeline used; a missing or unknown key is an error naming it.
    #[test]
    fn profile_costs_charge_the_nfs_dram_reads_whoever_passes_the_total() {
        // A virtual run hands the profile's NF total to vnic_config as it would a measurement;
        // only run.nf_cycles = "measured" drops the profile's DRAM reads (the measurement
        // already made them on this machine).
        let p = Path::new("t.toml");
        let reads = |sets: &[&str]| {
            let c = load_str("[[pipeline]]\nname = \"nat\"\n", sets).unwrap();
            let prof = c.profile(p).unwrap();
            let total = c.nf_cycles(p, &prof).unwrap();
            let v = c.vnic_config(p, &prof, None, Some(total)).unwrap();
            v.timing.map(|t| (t.nf_cycles, t.nf_dram_reads))
        };
        let prof = HardwareProfile::default();
        let want = prof
            .host
            .cycles
            .nf_dram_reads
            .get("nat")
            .copied()
            .unwrap_or(0);
        assert!(want > 0);
        assert_eq!(
            reads(&["run.clock=virtual"]),
            Some((prof.host.cycles.nf["nat"], want))
        );
        assert_eq!(
            reads(&["run.clock=virtual", "run.nf_cycles=measured"]).map(|t| t.1),
            Some(0)
        );
    }

    #[test]
    fn nf_cycles_follow_the_registry() {
        let p = Path::new("t.toml");
        let fc = |name: &str, sets: &[&str]| {
            let c = load_str(&format!("[[pipeline]]\nname = \"{name}\"\n"), sets).unwrap();
            let prof = c.profile(p)?;
            c.nf_cycles(p, &prof)
        };
        assert_eq!(fc("flow_counter", &[]).unwrap(), 300);
        assert_eq!(
            fc("flow-counter", &[]).unwrap(),
            300,
            "an alias costs the same"
        );
        assert_eq!(fc("io_fwd", &[]).unwrap(), 0);
        for s in nfs::REGISTRY {
            let set = format!("{}=1234", s.cost_key());
            assert_eq!(fc(s.name, &[&set]).unwrap(), 1234, "--set {set}");
        }
        // A profile without the function's cost: the key to set is named.
        let dir = std::env::temp_dir().join(format!("nmdp-nf-cycles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prof = dir.join("p.toml");
        std::fs::write(&prof, "[host.cycles.nf]\nnat = 1000\n").unwrap();
        let cfg = dir.join("c.toml");
        std::fs::write(
            &cfg,
            "[nic]\nprofile = \"p.toml\"\n[[pipeline]]\nname = \"lb\"\n",
        )
        .unwrap();
        let c = RunConfig::load(&cfg, &[]).unwrap();
        let e = c.nf_cycles(&cfg, &c.profile(&cfg).unwrap()).unwrap_err();
        assert_eq!(e.key, "host.cycles.nf.lb", "{e}");
        assert!(e.msg.contains("--set host.cycles.nf.lb="), "{e}");
        // ... which a wall-clock run does not need.
        let c = RunConfig::load(&cfg, &["run.clock=wall".into()]).unwrap();
        assert!(
            c.vnic_config(&cfg, &c.profile(&cfg).unwrap(), None, None)
                .is_ok()
        );
        let c = RunConfig::load(&cfg, &["run.clock=virtual".into()]).unwrap();
        let e = c
            .vnic_config(&cfg, &c.profile(&cfg).unwrap(), None, None)
            .unwrap_err();
        assert_eq!(e.key, "host.cycles.nf.lb");
        std::fs::remove_dir_all(&dir).unwrap();
        // Keys that name no function, or an alias, are refused with the names allowed.
        let e = fc("nat", &["host.cycles.nf.natt=5"]).unwrap_err();
        assert_eq!(e.key, "host.cycles.nf.natt");
        assert!(e.msg.contains("flow_counter"), "{e}");
        let e = fc("nat", &["host.cycles.nf.flow-counter=5"]).unwrap_err();
        assert!(e.msg.contains("canonical name `flow_counter`"), "{e}");
    }
}
