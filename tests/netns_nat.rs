//! The NAT between real Linux hosts: a client namespace downloads 10 MB from a server namespace
//! through the dataplane (configs/netns-nat.toml), over AF_PACKET links on veth pairs and over
//! TAP devices, in `host` and `nic-inline` modes. No static neighbour anywhere: the hosts learn
//! the dataplane's MACs by ARP and it learns theirs. Checked: the bytes arrive intact, the server
//! sees only the NAT address, UDP goes both ways, ping works, TTL 1 gets ICMP time exceeded back,
//! and the summary's ARP, route and neighbour keys say what happened.
//!
//! Needs root and the tools listed in `netns::skip_reason`; without them each test says why it
//! skips.

mod netns;

use netns::{SERIAL, Topo, blob, skip_reason, udp_ask, udp_echo_server};

/// Seconds the dataplane runs: enough for the checks below on a loaded 2-core machine.
const RUN_S: u32 = 20;

fn nat_between_namespaces(tag: &str, link: &str, mode: &str) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut t = Topo::new(tag, &["c", "s"]);
    let cfg = t.dir.join("nat.toml");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/netns-nat.toml"
    ))
    .unwrap()
    .replace("afpacket:", &format!("{link}:"));
    std::fs::write(&cfg, text).unwrap();
    if link == "afpacket" {
        t.veth("c", "c0", "10.0.1.2/24", Some("10.0.1.1"), "nmdp-in");
        t.veth("s", "s0", "10.0.2.2/24", None, "nmdp-out");
    }
    let dp = t.dataplane(
        cfg.to_str().unwrap(),
        &[
            format!("datapath.mode={mode}"),
            format!("run.duration_s={RUN_S}"),
        ],
    );
    if link == "tap" {
        t.adopt("c", "nmdp-in");
        t.host_if("c", "nmdp-in", "10.0.1.2/24", Some("10.0.1.1"));
        t.adopt("s", "nmdp-out");
        t.host_if("s", "nmdp-out", "10.0.2.2/24", None);
    }
    // The servers bind 10.0.2.2, so they start once the server's interface has it (a TAP device
    // exists only after the dataplane made it).
    blob(&t.dir.join("blob"), 10_000_000);
    let www = t.dir.display().to_string();
    t.spawn(
        "s",
        &format!("python3 -m http.server 8080 --bind 10.0.2.2 --directory {www}"),
        "http.log",
    );
    t.spawn("s", &udp_echo_server("10.0.2.2", 5353), "udp.log");
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
        "{link}/{mode}: {} of {} bytes, or different",
        b.len(),
        a.len()
    );
    let log = t.log("http.log");
    assert!(
        log.contains("10.0.2.1 - - ") && log.contains("GET /blob"),
        "{log}"
    );
    assert!(
        !log.contains("10.0.1.2"),
        "the server never sees the inside address: {log}"
    );
    let udp = t.run("c", &udp_ask("10.0.2.2", 5353, "ping-udp"));
    assert_eq!(String::from_utf8_lossy(&udp.stdout).trim(), "echo:ping-udp");
    t.run("c", "ping -c 3 -i 0.2 -W 2 10.0.2.2");
    let ttl = t.try_run("c", "ping -c 1 -t 1 -W 2 10.0.2.2");
    let ttl = String::from_utf8_lossy(&ttl.stdout);
    assert!(
        ttl.contains("From 10.0.1.1") && ttl.contains("Time to live exceeded"),
        "TTL 1 gets ICMP time exceeded from the router: {ttl}"
    );
    // The hosts resolved the dataplane by ARP (no static entry anywhere).
    let neigh = String::from_utf8_lossy(&t.run("c", "ip neigh show 10.0.1.1").stdout).to_string();
    assert!(
        neigh.contains("02:6e:6d:64:70:00") && !neigh.contains("PERMANENT"),
        "{neigh}"
    );
    let neigh = String::from_utf8_lossy(&t.run("s", "ip neigh show 10.0.2.1").stdout).to_string();
    assert!(neigh.contains("02:6e:6d:64:70:01"), "{neigh}");
    let s = t.summary(dp);
    // Each host either asked for the dataplane's address (a reply) or learned it from the
    // dataplane's own request; the dataplane resolved both hosts.
    let arp = &s["arp"];
    let n = |k: &str| arp[k].as_u64().unwrap();
    assert!(
        n("requests_sent") >= 1 && n("resolved") + n("learned") >= 2,
        "{arp}"
    );
    assert_eq!(n("unresolved_drops"), 0, "{arp}");
    let neighbors = s["neighbors"].as_array().unwrap();
    for ip in ["10.0.1.2", "10.0.2.2"] {
        assert!(
            neighbors
                .iter()
                .any(|n| n["ip"] == ip && n["state"] == "reachable"),
            "{ip} learned by ARP: {neighbors:?}"
        );
    }
    assert!(neighbors.iter().all(|n| n["state"] != "static"));
    let route = &s["route"];
    assert!(route["forwarded"].as_u64().unwrap() > 7000, "{route}");
    assert!(
        route["icmp_time_exceeded_sent"].as_u64().unwrap() >= 1,
        "{route}"
    );
    assert!(s["drops"]["ttl_expired"].as_u64().unwrap() >= 1);
    assert_eq!(s["drops"]["no_route"], 0);
    assert!(s["nfs"]["nat"]["outbound_translated"].as_u64().unwrap() > 1000);
    // Every forwarded packet's DMA was charged: at least a 64 B completion up per packet (in
    // nic-inline mode payloads that fit in nicmem never cross the link, so no byte total holds).
    assert!(
        s["pcie"]["upstream_bytes_per_packet"].as_f64().unwrap() >= 64.0
            && s["pcie"]["items"]["rx_cqe"]["up_bytes"].as_u64().unwrap() > 0,
        "the model charged DMA: {}",
        s["pcie"]
    );
    if mode == "nic-inline" {
        assert!(
            s["rx_primary"].as_u64().unwrap() > 1000,
            "payloads in nicmem"
        );
    }
    if link == "afpacket" {
        assert_eq!(s["ports"][0]["link_counters"]["rx_oversize"], 0);
    }
}

#[test]
fn nat_over_afpacket_in_host_mode() {
    nat_between_namespaces("nafh", "afpacket", "host");
}

#[test]
fn nat_over_afpacket_in_nic_inline_mode() {
    nat_between_namespaces("nafi", "afpacket", "nic-inline");
}

#[test]
fn nat_over_tap_in_host_mode() {
    nat_between_namespaces("ntph", "tap", "host");
}

#[test]
fn nat_over_tap_in_nic_inline_mode() {
    nat_between_namespaces("ntpi", "tap", "nic-inline");
}
