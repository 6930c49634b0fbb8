//! The NAT between real Linux hosts on DPDK ports (configs/netns-nat-dpdk.toml): DPDK's
//! `net_af_packet` PMD on the dataplane's ends of two veth pairs, in `host` and `nic-inline`
//! (emulated nicmem) modes. A client namespace downloads 10 MB from a server namespace, byte
//! for byte; the server sees the NAT address; the hosts and the dataplane resolve each other by
//! ARP. Needs `--features dpdk`, root and the tools listed in `netns::skip_reason`.
#![cfg(feature = "dpdk")]

mod netns;

use netns::{SERIAL, Topo, blob, skip_reason, udp_ask, udp_echo_server};

fn nat_on_dpdk(tag: &str, mode: &str) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut t = Topo::new(tag, &["c", "s"]);
    t.veth("c", "c0", "10.0.1.2/24", Some("10.0.1.1"), "nmdp-in");
    t.veth("s", "s0", "10.0.2.2/24", None, "nmdp-out");
    blob(&t.dir.join("blob"), 10_000_000);
    let www = t.dir.display().to_string();
    t.spawn(
        "s",
        &format!("python3 -m http.server 8080 --bind 10.0.2.2 --directory {www}"),
        "http.log",
    );
    t.spawn("s", &udp_echo_server("10.0.2.2", 5353), "udp.log");
    let dp = t.dataplane(
        "configs/netns-nat-dpdk.toml",
        &[
            format!("datapath.mode={mode}"),
            "run.duration_s=20".into(),
            format!(
                "dpdk.eal_args=[\"-l\", \"0\", \"--no-huge\", \"-m\", \"512\", \"--no-pci\", \
                 \"--no-shconf\", \"--no-telemetry\", \"--file-prefix={tag}\"]"
            ),
        ],
    );
    t.wait_http("c", "http://10.0.2.2:8080/");
    let got = t.dir.join("got");
    t.run(
        "c",
        &format!(
            "curl -s -m 30 -o {} http://10.0.2.2:8080/blob",
            got.display()
        ),
    );
    let (a, b) = (
        std::fs::read(t.dir.join("blob")).unwrap(),
        std::fs::read(&got).unwrap(),
    );
    assert!(
        a == b,
        "{mode}: {} of {} bytes, or different",
        b.len(),
        a.len()
    );
    let log = t.log("http.log");
    assert!(
        log.contains("10.0.2.1 - - ") && !log.contains("10.0.1.2"),
        "{log}"
    );
    let udp = t.run("c", &udp_ask("10.0.2.2", 5353, "dpdk-udp"));
    assert_eq!(String::from_utf8_lossy(&udp.stdout).trim(), "echo:dpdk-udp");
    t.run("c", "ping -c 2 -i 0.2 -W 2 10.0.2.2");
    let s = t.summary(dp);
    assert_eq!(s["driver"], "dpdk");
    let n = |k: &str| s["arp"][k].as_u64().unwrap();
    assert!(
        n("requests_sent") >= 1 && n("resolved") + n("learned") >= 2,
        "{}",
        s["arp"]
    );
    assert!(
        s["route"]["forwarded"].as_u64().unwrap() > 7000,
        "{}",
        s["route"]
    );
    let neighbors = s["neighbors"].as_array().unwrap();
    assert!(
        neighbors.iter().all(|n| n["state"] == "reachable"),
        "{neighbors:?}"
    );
}

#[test]
fn nat_on_dpdk_af_packet_in_host_mode() {
    nat_on_dpdk("ndph", "host");
}

#[test]
fn nat_on_dpdk_af_packet_in_nic_inline_mode() {
    nat_on_dpdk("ndpi", "nic-inline");
}
