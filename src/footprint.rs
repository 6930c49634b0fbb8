//! The host memory a run will allocate, estimated from its config before anything is allocated,
//! and checked against what the machine can hold.
//!
//! Sizes such as `vnic.cache_size`, `vnic.host_buffers`, `vnic.nicmem` or an NF's `flows` are
//! range-checked one by one, but any of them can still ask for more memory than the machine has:
//! the buffers, pool free lists and NF tables are allocated (and, being zeroed, written) when the
//! run starts, so such a run used to grow to tens of gigabytes and then abort in the allocator.
//! [`check`] refuses it up front with the key that asks for the most and what it would need:
//! `vnic.cache_size = 100000000 needs 292.8 GiB of host memory per worker; the whole run needs
//! 292.8 GiB and this machine has 23.5 GiB; lower it`.
//!
//! The estimate counts the bytes that are written (zeroed buffers, free lists, tables), which is
//! what a machine must hold; address space that is reserved but never touched is not counted.
//! It follows the sizing rules of the code that allocates (the virtual NIC's pools in
//! `dataplane/src/driver/vnic/mod.rs`; each network function's own estimate, given with its
//! registration in `nfs/src/registry.rs`) for the allocations that grow with a config value;
//! fixed costs of a few megabytes are left out.

use std::path::Path;

use dataplane::driver::vnic::{SEG, WQEBB};
use dataplane::pcie_model::HardwareProfile;

use crate::config::{ConfigError, RunConfig};

/// One allocation that grows with a config value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    /// The dotted key whose value drives it (`vnic.cache_size`, `pipeline[0].flows`).
    pub key: String,
    /// That key's value, as the user would write it.
    pub value: String,
    /// Bytes of host memory.
    pub bytes: u64,
    /// True when every worker allocates it (per-queue pools, per-core NF tables); false when the
    /// run allocates it once (a port's nicmem).
    pub per_worker: bool,
}

/// Bytes per slot of a crossbeam `ArrayQueue<u32>` (a stamp word and the value, padded): the
/// free list of every buffer pool.
const FREE_LIST_SLOT: u64 = 16;
/// Bytes per Rx descriptor of a virtual NIC queue: a 16 B WQE and a buffer handle on each of up
/// to three rings, a 64 B completion and the model's per-slot timestamps.
const RX_DESC_BYTES: u64 = 3 * (SEG as u64 + 16) + 64 + 24;
/// Bytes per Tx WQEBB: the 64 B block, the in-flight packet handle, a 64 B completion slot and
/// the model's in-flight record.
const TX_SLOT_BYTES: u64 = WQEBB as u64 + 96 + 64 + 32;

fn round64(n: u64) -> u64 {
    n.div_ceil(64) * 64
}

/// What the virtual NIC allocates for this config: per queue the header (or whole-frame) pool,
/// the host payload pool in the split modes, the nicmem pool's free list, the pool caches, the
/// rings and, on a multi-queue port, the front end's frame rings; per port the modeled nicmem.
pub fn vnic_needs(cfg: &RunConfig, profile: &HardwareProfile) -> Vec<Need> {
    let v = &cfg.vnic;
    let d = &cfg.datapath;
    let u = |n: usize| n as u64;
    let rx_ring = u(v.rx_ring.next_power_of_two());
    let tx_ring = u(v.tx_ring.next_power_of_two());
    let cache = u(v.cache_size.max(2));
    let burst = u(d.burst);
    let default_count = (rx_ring + tx_ring + 4 * burst).saturating_add(cache.saturating_mul(2));
    let count = v.host_buffers.map_or(default_count, u).max(1);
    let max_frame = u(v.max_frame);
    let splits = d.mode.splits();
    let hdr_size = if splits {
        round64(u(d.split_offset))
    } else {
        round64(max_frame)
    };
    let pay_size = round64(max_frame.saturating_sub(u(d.split_offset)).max(1));
    let cache_for = |n: u64| 4 * (cache.min(n.div_ceil(2)).max(2) + 1);
    let mut pool_bytes = count.saturating_mul(hdr_size + FREE_LIST_SLOT) + cache_for(count);
    if splits {
        pool_bytes = pool_bytes
            .saturating_add(count.saturating_mul(pay_size + FREE_LIST_SLOT) + cache_for(count));
    }
    let (key, value) = match v.host_buffers {
        Some(n) => ("vnic.host_buffers", n.to_string()),
        None if cache >= rx_ring.max(tx_ring) => ("vnic.cache_size", v.cache_size.to_string()),
        None if rx_ring >= tx_ring => ("vnic.rx_ring", v.rx_ring.to_string()),
        None => ("vnic.tx_ring", v.tx_ring.to_string()),
    };
    let nicmem_bytes = match &v.nicmem {
        Some(s) => nicmem::parse_size(s).map_or(u64::MAX, u),
        None => profile.nic.nicmem.capacity.bytes(),
    };
    let mut needs = vec![Need {
        key: key.into(),
        value,
        bytes: pool_bytes,
        per_worker: true,
    }];
    if d.mode.uses_nicmem() {
        let want = v.nicmem_buffers.map_or(default_count, u).max(1);
        let fit = nicmem_bytes / u64::from(cfg.run.workers) / pay_size;
        let n = if v.nicmem_alias { want } else { want.min(fit) };
        needs.push(Need {
            key: "vnic.nicmem_buffers".into(),
            value: v
                .nicmem_buffers
                .map_or_else(|| "unset".into(), |n| n.to_string()),
            bytes: n.saturating_mul(FREE_LIST_SLOT) + cache_for(n),
            per_worker: true,
        });
    }
    let mut ring_bytes = rx_ring * RX_DESC_BYTES + tx_ring * TX_SLOT_BYTES;
    if cfg.run.workers > 1 {
        // The front end's rings to and from each queue: their frame buffers are reserved at
        // `max_frame` (in) and `MAX_WIRE_FRAME` (out) bytes, but only the bytes of the frames
        // that pass through are ever written, at most `max_frame` each.
        let depth = u(v.rx_ring.max(64));
        ring_bytes += depth * 2 * max_frame.max(64);
    }
    needs.push(Need {
        key: "vnic.rx_ring".into(),
        value: v.rx_ring.to_string(),
        bytes: ring_bytes,
        per_worker: true,
    });
    needs.push(match &v.nicmem {
        Some(s) => Need {
            key: "vnic.nicmem".into(),
            value: format!("\"{s}\""),
            bytes: nicmem_bytes,
            per_worker: false,
        },
        None => Need {
            key: "nic.nicmem.capacity".into(),
            value: nicmem_bytes.to_string(),
            bytes: nicmem_bytes,
            per_worker: false,
        },
    });
    needs
}

/// What the NF pipeline allocates per worker, as each function's registration estimates it
/// ([`nfs::NfSpec::memory`]: flow tables, session records, buffers). Entries whose name or
/// parameters do not parse are skipped here; building the chain reports them.
pub fn nf_needs(cfg: &RunConfig) -> Vec<Need> {
    let ctx = nfs::BuildContext::new(0, cfg.run.workers.max(1));
    let mut needs = Vec::new();
    for (i, entry) in cfg.pipeline.iter().enumerate() {
        let mut params = entry.clone();
        let Some(toml::Value::String(name)) = params.remove("name") else {
            continue;
        };
        let Some(m) = nfs::lookup(&name).and_then(|s| (s.memory)(&params, &ctx)) else {
            continue;
        };
        needs.push(Need {
            key: format!("pipeline[{i}].{}", m.key),
            value: m.value,
            bytes: m.bytes,
            per_worker: true,
        });
    }
    needs
}

/// Checks that `needs` for `workers` workers fit in `machine` bytes. The error names the key
/// that asks for the most, what it needs, the run's total and what the machine has.
pub fn check(path: &Path, needs: &[Need], workers: u16, machine: u64) -> Result<(), ConfigError> {
    let w = u64::from(workers.max(1));
    let share = |n: &Need| {
        if n.per_worker {
            n.bytes.saturating_mul(w)
        } else {
            n.bytes
        }
    };
    let total = needs.iter().fold(0u64, |a, n| a.saturating_add(share(n)));
    if total <= machine {
        return Ok(());
    }
    let Some(top) = needs.iter().max_by_key(|n| share(n)) else {
        return Ok(());
    };
    let each = if top.per_worker && w > 1 {
        format!(
            "{} of host memory per worker ({} for {w} workers)",
            human(top.bytes),
            human(share(top))
        )
    } else if top.per_worker {
        format!("{} of host memory per worker", human(top.bytes))
    } else {
        format!("{} of host memory", human(top.bytes))
    };
    Err(ConfigError {
        file: path.to_path_buf(),
        key: top.key.clone(),
        msg: format!(
            "{} = {} needs {each}; the whole run needs {} and this machine has {}; lower it",
            top.key,
            top.value,
            human(total),
            human(machine)
        ),
    })
}

/// Bytes in binary units (KiB to EiB) with one decimal.
pub fn human(bytes: u64) -> String {
    let mut v = bytes as f64 / 1024.0;
    for unit in ["KiB", "MiB", "GiB", "TiB", "PiB"] {
        if v < 1024.0 {
            return format!("{v:.1} {unit}");
        }
        v /= 1024.0;
    }
    format!("{v:.1} EiB")
}

/// The memory this process may use: the machine's `MemTotal`, lowered by a cgroup limit when
/// one is set (v2 `memory.max`, v1 `memory.limit_in_bytes`). `None` where `/proc/meminfo` cannot
/// be read (the check is then skipped).
pub fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total = meminfo.lines().find_map(|l| {
        let kb = l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?;
        kb.trim().parse::<u64>().ok()?.checked_mul(1024)
    })?;
    Some(cgroup_limit().map_or(total, |c| c.min(total)))
}

/// The memory limit of this process's cgroup, if one is set and readable.
fn cgroup_limit() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |p: String| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let mut limits = Vec::new();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(rel)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrl.is_empty() {
            limits.extend(read(format!("/sys/fs/cgroup{rel}/memory.max")));
            limits.extend(read("/sys/fs/cgroup/memory.max".into()));
        } else if ctrl.split(',').any(|c| c == "memory") {
            limits.extend(read(format!(
                "/sys/fs/cgroup/memory{rel}/memory.limit_in_bytes"
            )));
            limits.extend(read("/sys/fs/cgroup/memory/memory.limit_in_bytes".into()));
        }
    }
    limits.into_iter().min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs::flow_table::FlowTable;

    const GIB: u64 = 1 << 30;
    /// The machine of the report.
    const MACHINE: u64 = 23 * GIB;

    fn cfg(sets: &[&str]) -> RunConfig {
        let mut t = toml::Table::new();
        for s in sets {
            crate::config::overrides::apply_assignment(&mut t, s).unwrap();
        }
        RunConfig::from_table(Path::new("t.toml"), t).unwrap()
    }

    fn run_check(c: &RunConfig) -> Result<(), ConfigError> {
        let profile = c.profile(Path::new("t.toml")).unwrap();
        let mut needs = vnic_needs(c, &profile);
        needs.extend(nf_needs(c));
        check(Path::new("t.toml"), &needs, c.run.workers, MACHINE)
    }

    /// The shipped defaults and the paper's 10 M-flow NAT fit easily.
    #[test]
    fn default_sizes_fit() {
        run_check(&cfg(&[])).unwrap();
        run_check(&cfg(&[
            "pipeline=[{name=\"nat\", flows=10000000}, {name=\"flow_counter\", flows=10000000}]",
        ]))
        .unwrap();
        let c = cfg(&[]);
        let p = c.profile(Path::new("t.toml")).unwrap();
        let total: u64 = vnic_needs(&c, &p).iter().map(|n| n.bytes).sum();
        assert!(total < 64 << 20, "default vNIC needs {}", human(total));
    }

    /// Each size of the report is refused, naming the key, what it needs and what the
    /// machine has.
    #[test]
    fn sizes_the_machine_cannot_hold_are_refused() {
        for (set, key) in [
            ("vnic.cache_size=100000000", "vnic.cache_size"),
            // With jumbo frames: 10 M payload buffers of 8960 B.
            (
                "vnic.host_buffers=10000000\nvnic.max_frame=9018",
                "vnic.host_buffers",
            ),
            ("vnic.nicmem=\"100GiB\"", "vnic.nicmem"),
            ("vnic.nicmem=\"18446744073709551615\"", "vnic.nicmem"),
            (
                "pipeline=[{name=\"nat\", flows=1000000000}]",
                "pipeline[0].flows",
            ),
            (
                "pipeline=[{name=\"lb\", flows=4000000000}]",
                "pipeline[0].flows",
            ),
            (
                "pipeline=[{name=\"macswap\"}, {name=\"flow_counter\", flows=1000000000}]",
                "pipeline[1].flows",
            ),
            (
                "pipeline=[{name=\"work_package\", size_mib=65536}]",
                "pipeline[0].size_mib",
            ),
        ] {
            let sets: Vec<&str> = set.split('\n').collect();
            let e = run_check(&cfg(&sets)).expect_err(set);
            assert_eq!(e.key, key, "{set}: {e}");
            let s = e.to_string();
            assert!(
                s.contains("t.toml")
                    && s.contains("needs")
                    && s.contains("this machine has 23.0 GiB"),
                "{set}: {s}"
            );
        }
        let e = run_check(&cfg(&["vnic.cache_size=100000000"])).unwrap_err();
        assert!(
            e.msg.starts_with("vnic.cache_size = 100000000 needs "),
            "{e}"
        );
        assert!(e.msg.contains("GiB of host memory per worker"), "{e}");
    }

    /// Per-worker allocations multiply by the workers: what fits one worker may not fit 64.
    #[test]
    fn per_worker_needs_scale_with_workers() {
        let one = cfg(&["vnic.host_buffers=1000000"]);
        run_check(&one).unwrap();
        let many = cfg(&["vnic.host_buffers=1000000", "run.workers=64"]);
        let e = run_check(&many).unwrap_err();
        assert_eq!(e.key, "vnic.host_buffers");
        assert!(e.msg.contains("for 64 workers"), "{e}");
    }

    /// The estimate is the flow table's own accounting of the table it builds.
    #[test]
    fn flow_table_estimate_matches_the_table() {
        for cap in [1usize, 7, 100, 4096, 1_000_000] {
            let t = FlowTable::<u32>::new(cap, 0, nfs::flow_table::FullPolicy::Drop, 1);
            let arrays = FlowTable::<u32>::memory_for(cap);
            // The rest is the fixed cuckoo search queue.
            assert!(t.memory_bytes() as u64 >= arrays, "{cap}");
            assert!(t.memory_bytes() as u64 - arrays < 8 << 10, "{cap}");
        }
    }

    #[test]
    fn machine_memory_is_read_where_available() {
        if Path::new("/proc/meminfo").exists() {
            let m = machine_memory().expect("MemTotal");
            assert!(m > 64 << 20, "{m}");
        }
        assert_eq!(human(23 * GIB), "23.0 GiB");
        assert_eq!(human(3 << 20), "3.0 MiB");
        assert_eq!(human(u64::MAX), "16.0 EiB");
        assert_eq!(human(512), "0.5 KiB");
    }
}
