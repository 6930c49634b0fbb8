//! Every shipped config runs clean as shipped (issue 17: configs that are not traps): each
//! `configs/*.toml` of the virtual NIC runs here with a small `--packets`, loses no frame, and no
//! network function drops more than 1 % of what it sees unless the config's comment says that it
//! demonstrates drops. Configs of DPDK ports run in the `dpdk` feature's tests, and configs whose
//! ports are links to the kernel (TAP, AF_PACKET) in the network-namespace tests; each is named
//! below with the test file (or, for demo-only variants, the script) that runs it, so a new
//! config cannot go unrun.

use std::path::PathBuf;

use nmdp::run::{RunOptions, run};
use serde_json::Value;

/// The DPDK configs and the test file that runs each as shipped (feature `dpdk`); `None`: it
/// needs hardware this project's machines lack.
const DPDK_CONFIGS: [(&str, Option<&str>); 10] = [
    ("dpdk-null.toml", Some("tests/dpdk_e2e.rs")),
    ("netns-nat-dpdk.toml", Some("tests/netns_dpdk.rs")),
    ("netns-nat-dpdk-tap.toml", Some("scripts/netns-demo.sh")),
    ("netns-lb-dpdk.toml", Some("scripts/netns-demo.sh")),
    ("dpdk-pcap.toml", Some("tests/dpdk_e2e.rs")),
    ("dpdk-ring.toml", Some("tests/dpdk_e2e.rs")),
    ("dpdk-tester-ring.toml", Some("tests/dpdk_pktgen.rs")),
    ("dpdk-txgen.toml", Some("tests/dpdk_pktgen.rs")),
    ("mlx5-lb.toml", None),
    ("mlx5-nat.toml", None),
];

/// Virtual NIC configs whose ports are links to the kernel, and the test that runs each between
/// network namespaces.
const KERNEL_CONFIGS: [(&str, &str); 2] = [
    ("netns-nat.toml", "tests/netns_nat.rs"),
    ("netns-lb.toml", "tests/netns_lb.rs"),
];

/// Frames each virtual NIC config sends here.
const PACKETS: u64 = 20_000;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

#[test]
fn every_shipped_config_runs_clean() {
    let tmp = std::env::temp_dir().join(format!("nmdp-configs-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut ran = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(root().join("configs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let table: toml::Table = text.parse().unwrap();
        if text.contains("link = \"afpacket:") || text.contains("link = \"tap:") {
            let (_, file) = KERNEL_CONFIGS
                .iter()
                .find(|(c, _)| *c == name)
                .unwrap_or_else(|| panic!("{name}: a config with kernel links no test runs"));
            let tests = std::fs::read_to_string(root().join(file)).unwrap();
            assert!(
                tests.contains(&format!("configs/{name}")),
                "{file} runs {name}"
            );
            continue;
        }
        if table.contains_key("dpdk") {
            let (_, file) = DPDK_CONFIGS
                .iter()
                .find(|(c, _)| *c == name)
                .unwrap_or_else(|| panic!("{name}: a DPDK config no test runs; add it"));
            if let Some(file) = file {
                let tests = std::fs::read_to_string(root().join(file)).unwrap();
                assert!(
                    tests.contains(&format!("configs/{name}")),
                    "{file} runs {name}"
                );
            }
            continue;
        }
        // Outputs a config writes go to a scratch folder, not the working directory.
        let mut sets = vec!["run.stats_interval_s=0".to_string()];
        for (i, nf) in table
            .get("pipeline")
            .and_then(|p| p.as_array())
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(dump) = nf.get("dump_path").and_then(|d| d.as_str()) {
                let file = tmp.join(dump.replace('/', "_"));
                sets.push(format!("pipeline[{i}].dump_path=\"{}\"", file.display()));
            }
        }
        let s = run(&RunOptions {
            config: path.clone(),
            packets: Some(PACKETS),
            sets,
            ..RunOptions::default()
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(n(&s["packets_rx"]), PACKETS, "{name}");
        let demonstrates_drops = text.contains("demonstrates drops");
        if !demonstrates_drops {
            assert_eq!(n(&s["packets_tx"]), PACKETS, "{name}: {}", s["drops"]);
        }
        for (nf, c) in s["nfs"].as_object().unwrap() {
            let seen = n(&c["packets"]).max(1);
            let dropped = n(&c["dropped"]);
            assert!(
                demonstrates_drops || dropped * 100 <= seen,
                "{name}: {nf} dropped {dropped} of {seen}: {}",
                c["drops"]
            );
        }
        ran.push(name);
    }
    assert!(ran.len() >= 5, "{ran:?}");
    std::fs::remove_dir_all(&tmp).unwrap();
}
