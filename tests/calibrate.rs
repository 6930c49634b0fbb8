//! `dataplane calibrate` and `run.nf_cycles = "measured"`: a cost for every NF of a config, in
//! the profile's TOML form; costlier functions measure above cheaper ones (ratios within one
//! measurement, never wall-clock bounds); a virtual-time run charges the measurement and says
//! so, also for an NF the profile has no figure for.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use nmdp::calibrate::{CalibrateOptions, calibrate};
use nmdp::config::RunConfig;
use nmdp::run::{RunOptions, run};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!("nmdp-calibrate-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// io_fwd, macswap, NAT and a flow counter at 1 M flows, over 1 M flows that all fit the NAT:
/// endpoint-independent mapping gives each inside source its own outside port, so the pool is
/// 64 addresses (each paired with about 15 600 sources, 64 512 ports each).
const CHAIN_1M: &str = "[vnic]\nnicmem = \"256KiB\"\n\
    [traffic]\nframe_size = 64\nflows = 1000000\ndst_ip_count = 16\ndst_port_count = 4\n\
    [[pipeline]]\nname = \"io-fwd\"\n\
    [[pipeline]]\nname = \"macswap\"\n\
    [[pipeline]]\nname = \"nat\"\nnat_ips = \"10.0.0.0/26\"\nflows = 1000000\n\
    [[pipeline]]\nname = \"flow-counter\"\nflows = 1000000\n";

#[test]
fn every_nf_gets_a_cost_and_costlier_ones_measure_higher() {
    let dir = TempDir::new("ratios");
    let path = dir.file("chain.toml", CHAIN_1M);
    let cfg = RunConfig::load(&path, &[]).unwrap();
    let opts = CalibrateOptions {
        runs: 3,
        packets: 32768,
    };
    let c = calibrate(&cfg, &path, &opts).unwrap();
    let names: Vec<&str> = c.nfs.iter().map(|n| n.name).collect();
    assert_eq!(
        names,
        ["io_fwd", "macswap", "nat", "flow_counter"],
        "canonical names"
    );
    assert_eq!(c.warm_packets, 1_000_000, "one pass over every flow first");
    let cost = |name: &str| c.nfs.iter().find(|n| n.name == name).unwrap();
    let (io, nat, fc) = (cost("io_fwd"), cost("nat"), cost("flow_counter"));
    for n in &c.nfs {
        assert!(
            n.ns.min.is_finite() && n.ns.max.is_finite() && n.ns.min >= 0.0,
            "{}: {:?}",
            n.name,
            n.ns
        );
        assert!(
            n.ns.min <= n.ns.median && n.ns.median <= n.ns.max,
            "{}: {:?}",
            n.name,
            n.ns
        );
        // Cycles are the profile CPU's: ns x host.cpu_ghz.
        assert!(
            (n.cycles.median - n.ns.median * c.cpu_ghz).abs() < 1e-6,
            "{}",
            n.name
        );
        assert_eq!(
            n.drops.total(),
            0,
            "{}: every flow fits, nothing drops",
            n.name
        );
    }
    // Ratios within this one measurement: a NAT lookup in a 1 M-flow table and a flow record
    // update cost many times a counter increment.
    assert!(
        nat.ns.median > 10.0 * io.ns.median && nat.ns.median > 0.0,
        "nat {:?} vs io_fwd {:?}",
        nat.ns,
        io.ns
    );
    assert!(
        fc.ns.median > 5.0 * io.ns.median && fc.ns.median > 0.0,
        "flow_counter {:?} vs io_fwd {:?}",
        fc.ns,
        io.ns
    );
    assert!(nat.cycles_per_packet() > io.cycles_per_packet());
    // The TOML form: a [host.cycles.nf] table a profile takes as it is.
    let t: toml::Table = c.to_toml().parse().expect("valid TOML");
    let table = t["host"]["cycles"]["nf"].as_table().unwrap();
    for n in &c.nfs {
        assert_eq!(
            table[n.name].as_integer(),
            Some(i64::from(n.cycles_per_packet())),
            "{}",
            n.name
        );
    }
    let sets: Vec<String> = table
        .iter()
        .map(|(k, v)| format!("host.cycles.nf.{k}={v}"))
        .collect();
    let with = RunConfig::load(&path, &sets).unwrap();
    let profile = with.profile(&path).unwrap();
    assert_eq!(
        with.nf_cycles(&path, &profile).unwrap(),
        c.total_cycles(),
        "the profile charges what was measured"
    );
}

/// A profile without a cost for `lb`, and a config running it.
fn lb_without_a_cost(dir: &TempDir) -> PathBuf {
    dir.file("p.toml", "[host.cycles.nf]\nio_fwd = 0\n");
    dir.file(
        "lb.toml",
        "[run]\npackets = 2000\nclock = \"virtual\"\n\
         [nic]\nprofile = \"p.toml\"\n\
         [traffic]\nflows = 64\n\
         [[pipeline]]\nname = \"lb\"\nflows = 1024\n",
    )
}

#[test]
fn a_virtual_run_charges_the_measurement_and_says_so() {
    let dir = TempDir::new("measured");
    let path = lb_without_a_cost(&dir);
    let opts = |sets: &[&str]| RunOptions {
        config: path.clone(),
        sets: sets.iter().map(|s| s.to_string()).collect(),
        ..RunOptions::default()
    };
    // From the profile: the missing cost is an error naming the key.
    let e = run(&opts(&[])).unwrap_err().to_string();
    assert!(e.contains("host.cycles.nf.lb"), "{e}");
    // Measured: the run goes ahead, charges the measurement and reports it.
    let s = run(&opts(&["run.nf_cycles=measured"])).unwrap();
    let n = &s["nf_cycles"];
    assert_eq!(n["source"], "measured", "{n}");
    assert_eq!(n["each"][0]["nf"], "lb");
    let measured = &n["measurement"]["nfs"][0];
    assert_eq!(measured["nf"], "lb");
    assert_eq!(n["each"][0]["cycles"], measured["cycles"]);
    assert_eq!(n["total"], measured["cycles"]);
    assert_eq!(s["traffic"]["sent"], 2000);
    // The profile's figure, when it has one, is reported as the source.
    let s = run(&opts(&["host.cycles.nf.lb=700"])).unwrap();
    assert_eq!(s["nf_cycles"]["source"], "profile");
    assert_eq!(s["nf_cycles"]["total"], 700);
    // In wall time no figure is charged, whatever run.nf_cycles says.
    let s = run(&opts(&["run.clock=wall", "run.nf_cycles=measured"])).unwrap();
    assert_eq!(s["nf_cycles"]["source"], "wall clock");
    // A value that is neither: an error naming the key and what is allowed.
    let e = run(&opts(&["run.nf_cycles=guess"]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("run.nf_cycles") && e.contains("profile") && e.contains("measured"),
        "{e}"
    );
}

#[test]
fn the_cli_prints_the_profile_table_and_names_a_bad_config() {
    let dir = TempDir::new("cli");
    let path = dir.file(
        "c.toml",
        "[traffic]\nflows = 100\n[[pipeline]]\nname = \"macswap\"\n[[pipeline]]\nname = \"port_filter\"\ndeny_ports = [9]\n",
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_dataplane"));
    let out = common::succeeded(Command::new(bin).args([
        "calibrate",
        path.to_str().unwrap(),
        "--runs",
        "2",
        "--packets",
        "4096",
    ]));
    let text = String::from_utf8(out.stdout).unwrap();
    let t: toml::Table = text.parse().expect("the output is TOML");
    let nf = t["host"]["cycles"]["nf"].as_table().unwrap();
    let keys: Vec<&str> = nf.keys().map(String::as_str).collect();
    assert_eq!(keys, ["macswap", "port_filter"], "{text}");
    for (k, v) in nf {
        assert!(
            v.as_integer().is_some_and(|c| c >= 0),
            "{k}: whole cycles, not negative: {text}"
        );
    }
    assert!(text.contains("2 runs of 4096 packets"), "{text}");
    let out = Command::new(bin)
        .args(["calibrate", path.to_str().unwrap(), "--json", "--runs", "1"])
        .args(["--packets", "64"])
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["nfs"][1]["cost_key"], "host.cycles.nf.port_filter");
    for n in j["nfs"].as_array().unwrap() {
        let ns = n["ns_per_packet"]["median"].as_f64();
        assert!(ns.is_some_and(|v| v.is_finite() && v >= 0.0), "{n}");
    }
    let out = Command::new(bin)
        .args(["calibrate", "/nonexistent/x.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("/nonexistent/x.toml"), "{e}");
    let out = Command::new(bin)
        .args(["calibrate", path.to_str().unwrap(), "--runs", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}
