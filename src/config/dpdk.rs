//! The `[dpdk]` section of a run config: EAL arguments, the ports, their rings and pools, and the
//! checks that tie it to the rest of the config. A run config selects the DPDK driver by having
//! this section:
//!
//! ```toml
//! [dpdk]
//! eal_args = ["-l", "0", "--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--file-prefix=nmdp"]
//! worker_cores = [1]            # pin worker i to this core (optional)
//! [[dpdk.ports]]
//! devargs = "net_null0,size=64,copy=0"
//! [[dpdk.ports]]
//! devargs = "net_null1,size=64,copy=0"
//! ```
//!
//! The section is parsed apart from [`RunConfig`] so the virtual NIC build needs nothing of it:
//! [`load`] splits `[dpdk]` off the table before the rest goes through
//! [`RunConfig::from_table`].

use std::path::Path;

use serde::Deserialize;

use super::{ConfigError, RunConfig, same_file};

/// `[dpdk]`: EAL arguments, the ports and their rings and pools.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DpdkSection {
    /// EAL arguments, e.g. `["-l", "0", "--no-huge", "-m", "512", "--no-pci", "--no-shconf",
    /// "--file-prefix=x", "--vdev=net_null0"]` (vdevs may also be given only as ports).
    pub eal_args: Vec<String>,
    /// The ports, in run order (verdicts name ports by this index).
    pub ports: Vec<DpdkPortSection>,
    /// Rx descriptors per queue.
    pub rx_desc: u16,
    /// Tx descriptors per queue.
    pub tx_desc: u16,
    /// Mbufs per host pool per queue (0: automatic).
    pub mbufs: u32,
    /// Per-lcore mempool cache size.
    pub cache_size: u32,
    /// Packets a worker gathers from a queue before its network functions and Tx run over
    /// them: one poll asks the PMD for the whole vector, and it polls again while a poll hands
    /// out at least `datapath.burst` packets and the vector has room (some PMDs hand out at
    /// most 32 a call); at low load a pass takes what one poll finds. Allowed
    /// `datapath.burst..=256`.
    pub vector: usize,
    /// Emulated nicmem per port for the nicmem modes on PMDs without device memory, e.g.
    /// `"256KiB"` (labelled emulated everywhere; refused on mlx5).
    pub emulated_nicmem: String,
    /// Cap on nicmem payload buffers per queue (0: as many as fit).
    pub nicmem_buffers: u32,
    /// Pin worker `i` to core `worker_cores[i]` (empty: no pinning).
    pub worker_cores: Vec<usize>,
    /// Use mlx5 device memory (MEMIC) for the nicmem modes on the mlx5 ports (feature `mlx5`).
    pub mlx5_nicmem: bool,
}

impl Default for DpdkSection {
    fn default() -> Self {
        Self {
            eal_args: vec![
                "-l".into(),
                "0".into(),
                "--no-huge".into(),
                "-m".into(),
                "512".into(),
                "--no-pci".into(),
                "--no-shconf".into(),
                "--no-telemetry".into(),
            ],
            ports: Vec::new(),
            rx_desc: 1024,
            tx_desc: 1024,
            mbufs: 0,
            cache_size: 256,
            vector: 64,
            emulated_nicmem: "256KiB".into(),
            nicmem_buffers: 0,
            worker_cores: Vec::new(),
            mlx5_nicmem: false,
        }
    }
}

/// `[[dpdk.ports]]`: one ethdev.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct DpdkPortSection {
    /// Device and devargs: a vdev (`net_null0,size=64,copy=0`, `net_ring0`,
    /// `net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap`) or a PCI address (`0000:08:00.0,mprq_en=0`).
    pub devargs: String,
    /// Run port received packets go to (default: paired 0<->1, 2<->3, ...).
    pub tx_port: Option<u16>,
    /// End the run when Rx has been empty for a while (default: true for `rx_pcap=` without
    /// `infinite_rx=1`).
    pub stop_when_idle: Option<bool>,
    /// Frames of the `[traffic]` profile to transmit on this port before forwarding starts
    /// (seeds a `net_ring` loop).
    pub inject: u32,
    /// The port's MAC address (default: the device's).
    pub mac: Option<String>,
    /// The port's IPv4 address with prefix length (makes the subnet a connected route and the
    /// address one the port answers ARP for).
    pub ip: Option<String>,
}

fn config_err(path: &Path, key: &str, msg: String) -> ConfigError {
    ConfigError {
        file: path.to_path_buf(),
        key: key.to_string(),
        msg,
    }
}

/// Loads the run config at `path` with its `[dpdk]` section, applying `sets` (`key=value`, the
/// command line's `--set`, `--mode`, ... folded in). `Ok(None)` when the file has no `[dpdk]`
/// section.
pub fn load(path: &Path, sets: &[String]) -> Result<Option<(RunConfig, DpdkSection)>, ConfigError> {
    let text = super::read_config_text(path).map_err(|e| config_err(path, "", e))?;
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        config_err(path, "", format!("not valid TOML: {}", e.message()))
    })?;
    for o in sets {
        super::overrides::apply_assignment(&mut table, o)
            .map_err(|m| config_err(path, o.split('=').next().unwrap_or(""), m))?;
    }
    let Some(dpdk) = table.remove("dpdk") else {
        return Ok(None);
    };
    let section: DpdkSection = serde_path_to_error::deserialize(dpdk).map_err(|e| {
        config_err(
            path,
            format!("dpdk.{}", e.path()).trim_end_matches('.'),
            e.inner().message().trim().to_string(),
        )
    })?;
    let cfg = RunConfig::from_table(path, table)?;
    check(path, &cfg, &section)?;
    Ok(Some((cfg, section)))
}

/// Checks the `[dpdk]` section against the rest of the config.
pub fn check(path: &Path, cfg: &RunConfig, d: &DpdkSection) -> Result<(), ConfigError> {
    if d.ports.is_empty() {
        return Err(config_err(
            path,
            "dpdk.ports",
            "no ports; add [[dpdk.ports]] devargs = \"net_null0\" (or a PCI address)".into(),
        ));
    }
    for (i, p) in d.ports.iter().enumerate() {
        if p.devargs.trim().is_empty() {
            return Err(config_err(
                path,
                &format!("dpdk.ports[{i}].devargs"),
                "empty".into(),
            ));
        }
        if let Err((key, msg)) = super::net::port_addr(
            &format!("dpdk.ports[{i}]"),
            String::new(),
            p.mac.as_deref(),
            dataplane::net::MacAddr::local_for_port(i as u16),
            p.ip.as_deref(),
        ) {
            return Err(config_err(path, &key, msg));
        }
        if let Some(t) = p.tx_port
            && t as usize >= d.ports.len()
        {
            return Err(config_err(
                path,
                &format!("dpdk.ports[{i}].tx_port"),
                format!("{t} out of range; allowed 0..{}", d.ports.len()),
            ));
        }
    }
    // A net_pcap port writing the file another (or the same) port reads would destroy the input.
    let files = |key: &str| -> Vec<(usize, std::path::PathBuf)> {
        d.ports
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.devargs
                    .split(',')
                    .filter_map(|kv| kv.trim().strip_prefix(key)?.strip_prefix('='))
                    .map(move |f| (i, std::path::PathBuf::from(f)))
            })
            .collect()
    };
    for (ti, tx) in files("tx_pcap") {
        if let Some((ri, rx)) = files("rx_pcap")
            .into_iter()
            .find(|(_, rx)| same_file(rx, &tx))
        {
            return Err(config_err(
                path,
                &format!("dpdk.ports[{ti}].devargs"),
                format!(
                    "tx_pcap={} is the file dpdk.ports[{ri}] reads (rx_pcap={}): writing the \
                     capture would destroy the input; give tx_pcap another path",
                    tx.display(),
                    rx.display()
                ),
            ));
        }
    }
    for (k, n) in [("dpdk.rx_desc", d.rx_desc), ("dpdk.tx_desc", d.tx_desc)] {
        if !(16..=16384).contains(&n) {
            return Err(config_err(
                path,
                k,
                format!("{n} out of range; allowed 16..=16384"),
            ));
        }
    }
    let burst = cfg.datapath.burst;
    if !(burst..=dataplane::MAX_BURST).contains(&d.vector) {
        return Err(config_err(
            path,
            "dpdk.vector",
            format!(
                "{} out of range; allowed datapath.burst ({burst}) ..= {}",
                d.vector,
                dataplane::MAX_BURST
            ),
        ));
    }
    let Some(emulated) = nicmem::parse_size(&d.emulated_nicmem) else {
        return Err(config_err(
            path,
            "dpdk.emulated_nicmem",
            format!("`{}` is not a size; use e.g. \"256KiB\"", d.emulated_nicmem),
        ));
    };
    // Refuse sizes the machine cannot hold before EAL starts and the NF tables are allocated:
    // the NF tables per worker and, in the nicmem modes, the emulated nicmem of every port (host
    // memory; mempools come from EAL's own memory, whose failures are already errors).
    if let Some(machine) = crate::footprint::machine_memory() {
        let mut needs = crate::footprint::nf_needs(cfg);
        if cfg.datapath.mode.uses_nicmem() && !d.mlx5_nicmem {
            needs.push(crate::footprint::Need {
                key: "dpdk.emulated_nicmem".into(),
                value: format!(
                    "\"{}\" for each of {} ports",
                    d.emulated_nicmem,
                    d.ports.len()
                ),
                bytes: (emulated as u64).saturating_mul(d.ports.len() as u64),
                per_worker: false,
            });
        }
        crate::footprint::check(path, &needs, cfg.run.workers, machine)?;
    }
    if !d.worker_cores.is_empty() && d.worker_cores.len() < cfg.run.workers as usize {
        return Err(config_err(
            path,
            "dpdk.worker_cores",
            format!(
                "{} cores for {} workers; give one core per worker or none",
                d.worker_cores.len(),
                cfg.run.workers
            ),
        ));
    }
    if d.mlx5_nicmem && !cfg!(feature = "mlx5") {
        return Err(config_err(
            path,
            "dpdk.mlx5_nicmem",
            "needs a build with `--features mlx5` (apt-get install libibverbs-dev)".into(),
        ));
    }
    Ok(())
}
