//! Deterministic NAT end to end (RFC 7422): `configs/nat-deterministic.toml` run through
//! `dataplane run`, and every outside endpoint its frames left with mapped back to one
//! subscriber by `dataplane nat-lookup`'s arithmetic, from the config alone.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{pcap_frames, run_to_end, tmp_dir};
use nfs::nat::DeterministicPlan;

fn config() -> PathBuf {
    common::config("nat-deterministic.toml")
}

/// `(source address, source port)` of every frame of a pcap (Ethernet, IPv4 without options).
fn sources(pcap: &Path) -> Vec<(Ipv4Addr, u16)> {
    pcap_frames(pcap)
        .iter()
        .map(|f| {
            let src = Ipv4Addr::from(u32::from_be_bytes(f[26..30].try_into().unwrap()));
            (src, u16::from_be_bytes([f[34], f[35]]))
        })
        .collect()
}

#[test]
fn every_outside_endpoint_of_a_deterministic_run_maps_back_to_one_subscriber() {
    let dir = tmp_dir("det");
    let pcap = dir.join("out.pcap");
    let s = run_to_end(&[
        config().to_str().unwrap(),
        "--packets",
        "5000",
        "--tx-pcap",
        pcap.to_str().unwrap(),
    ]);
    let nat = &s["nfs"]["nat"];
    assert_eq!(nat["dropped"], 0, "{nat}");
    assert!(nat.get("log").is_none(), "nothing to log");
    let text = std::fs::read_to_string(config()).unwrap();
    let cfg: toml::Table = text.parse().unwrap();
    let mut params = cfg["pipeline"].as_array().unwrap()[0]
        .as_table()
        .unwrap()
        .clone();
    params.remove("name");
    let plan = DeterministicPlan::from_params(&params, 1).unwrap();
    let frames = sources(&pcap);
    assert_eq!(frames.len(), 5000);
    let mut owner: HashMap<(Ipv4Addr, u16), Ipv4Addr> = HashMap::new();
    let prefix = u32::from(Ipv4Addr::new(16, 1, 0, 0));
    for &(a, p) in &frames {
        let h = plan
            .reverse(a, p)
            .unwrap_or_else(|| panic!("{a}:{p} maps to no subscriber"));
        assert_eq!(u32::from(h.inside) & 0xffff_f000, prefix, "{}", h.inside);
        assert!((h.range.0..=h.range.1).contains(&p));
        // The forward mapping of that subscriber holds the endpoint.
        let f = plan.forward(h.inside).remove(0);
        assert_eq!(f.outside, a);
        owner.insert((a, p), h.inside);
    }
    // One flow per inside host: as many subscribers as outside endpoints, none sharing one.
    let subs: HashSet<Ipv4Addr> = owner.values().copied().collect();
    assert_eq!(subs.len(), owner.len());
    assert_eq!(
        owner.len() as u64,
        nat["new_eim_mappings"].as_u64().unwrap()
    );
    // The command line says the same, from the file alone.
    let (&(a, p), inside) = owner.iter().next().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args([
            "nat-lookup",
            config().to_str().unwrap(),
            &a.to_string(),
            &p.to_string(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with(&format!("{a}:{p} belongs to {inside} ")),
        "{out}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["nat-lookup", config().to_str().unwrap(), "192.0.2.1", "80"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no subscriber's range"));
    std::fs::remove_dir_all(&dir).unwrap();
}
