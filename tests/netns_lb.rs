//! The load balancer between real Linux hosts (configs/netns-lb.toml): a client namespace opens
//! 60 TCP connections to the VIP through the dataplane, with three backend namespaces behind a
//! bridge, in `return = "nat"` (replies come back through the dataplane, which gives them the
//! VIP as source) and `return = "ipip"` (the dataplane tunnels the client's packets to the
//! backend, which answers the client directly from the VIP). Every connection must be answered,
//! the connections spread over the three backends, and each connection stay on one backend
//! (two requests on one keep-alive connection answered by the same backend). The VIP is on the
//! client's subnet, so the client resolves it by ARP: the dataplane answers for an address an NF
//! owns.
//!
//! Backends decapsulate IP-in-IP with a Linux `ipip` tunnel where the kernel has the driver, and
//! otherwise with tests/netns/ipip_decap.py (a raw socket and a TUN device doing the same in
//! user space); the test prints which. Needs root and the tools listed in `netns::skip_reason`.

mod netns;

use netns::{SERIAL, Topo, sh, skip_reason};

const RUN_S: u32 = 25;
const VIP: &str = "10.0.1.100";

fn script(name: &str) -> String {
    format!("{}/tests/netns/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A veth pair between two namespaces' interfaces, both up.
fn link(t: &Topo, a: &str, a_if: &str, b: &str, b_if: &str) {
    sh(&[
        "ip",
        "-n",
        &t.ns(a),
        "link",
        "add",
        a_if,
        "type",
        "veth",
        "peer",
        "name",
        b_if,
        "netns",
        &t.ns(b),
    ]);
    t.run(a, &format!("ip link set {a_if} up"));
    t.run(b, &format!("ip link set {b_if} up"));
}

/// Sets up IP-in-IP decapsulation on backend `h` with address `addr`: the kernel's `ipip`
/// driver if it has one, else the user-space decapsulator. Returns which.
fn decapsulate(t: &mut Topo, h: &str, addr: &str) -> &'static str {
    t.run(h, &format!("ip addr add {VIP}/32 dev lo"));
    let kernel = t
        .try_run(h, &format!("ip link add nmdp-ipip type ipip local {addr}"))
        .status
        .success();
    let dev = if kernel {
        "nmdp-ipip"
    } else {
        t.spawn(
            h,
            &format!("python3 {} nmdp-decap", script("ipip_decap.py")),
            &format!("decap-{h}.log"),
        );
        let start = std::time::Instant::now();
        while !t.try_run(h, "ip link show nmdp-decap").status.success() {
            assert!(start.elapsed().as_secs() < 10, "decapsulator did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        "nmdp-decap"
    };
    t.run(h, &format!("ip link set {dev} up"));
    // The inner packet arrives on the tunnel from a client routed elsewhere: no reverse-path
    // filter.
    for k in ["all", "default", dev, "b0"] {
        t.run(h, &format!("sysctl -qw net.ipv4.conf.{k}.rp_filter=0"));
    }
    if kernel {
        "kernel ipip"
    } else {
        "user-space decapsulator"
    }
}

fn lb_between_namespaces(tag: &str, ret: &str) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut t = Topo::new(tag, &["c", "sw", "b1", "b2", "b3"]);
    let cfg = t.dir.join("lb.toml");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/netns-lb.toml"
    ))
    .unwrap()
    .replace("return = \"nat\"", &format!("return = \"{ret}\""));
    std::fs::write(&cfg, text).unwrap();
    t.veth("c", "c0", "10.0.1.2/24", Some("10.0.1.1"), "nmdp-in");
    if ret == "ipip" {
        // Room for the 20 B outer header on the 1500 B links behind the dataplane.
        t.run("c", "ip link set c0 mtu 1480");
    }
    t.run("sw", "ip link add br0 type bridge && ip link set br0 up");
    link(&t, "dp", "nmdp-bk", "sw", "sw-dp");
    t.run("sw", "ip link set sw-dp master br0");
    let mut how = "";
    for (i, b) in ["b1", "b2", "b3"].iter().enumerate() {
        let addr = format!("10.0.2.1{}", i + 1);
        link(&t, b, "b0", "sw", &format!("sw-{b}"));
        t.run("sw", &format!("ip link set sw-{b} master br0"));
        t.host_if(b, "b0", &format!("{addr}/24"), Some("10.0.2.1"));
        t.run(b, "ethtool -K b0 tx off >/dev/null");
        if ret == "ipip" {
            how = decapsulate(&mut t, b, &addr);
        }
        t.spawn(
            b,
            &format!("python3 {} {b} 8080", script("lb_backend.py")),
            &format!("{b}.log"),
        );
    }
    if !how.is_empty() {
        eprintln!("backends decapsulate with the {how}");
    }
    let dp = t.dataplane(cfg.to_str().unwrap(), &[format!("run.duration_s={RUN_S}")]);
    t.wait_http("c", &format!("http://{VIP}:8080/"));
    let out = t.run(
        "c",
        &format!("python3 {} {VIP} 8080 60", script("lb_client.py")),
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["failed"], 0, "{ret}: every connection answered: {r}");
    assert_eq!(r["mixed"], 0, "{ret}: each connection on one backend: {r}");
    let per = r["backends"].as_object().unwrap();
    assert_eq!(per.len(), 3, "{ret}: spread over the three backends: {r}");
    assert_eq!(
        per.values().filter_map(|v| v.as_u64()).sum::<u64>(),
        60,
        "{r}"
    );
    // The client learned the VIP's MAC by ARP: the dataplane's port 0 (answering the client's
    // request, or announcing the VIP at start to a client that was already asking).
    let neigh =
        String::from_utf8_lossy(&t.run("c", &format!("ip neigh show {VIP}")).stdout).to_string();
    assert!(neigh.contains("02:6e:6d:64:70:00"), "{neigh}");
    let s = t.summary(dp);
    let lb = &s["nfs"]["lb"];
    // 60 connections, plus the probe that waited for the service.
    assert!(lb["new_flows"].as_u64().unwrap() >= 61, "{lb}");
    match ret {
        "nat" => assert!(lb["replies_translated"].as_u64().unwrap() > 60 * 4, "{lb}"),
        _ => assert!(lb["encapsulated"].as_u64().unwrap() > 60 * 4, "{lb}"),
    }
    assert_eq!(s["arp"]["unresolved_drops"], 0);
    let neighbors = s["neighbors"].as_array().unwrap();
    for b in ["10.0.2.11", "10.0.2.12", "10.0.2.13"] {
        assert!(
            neighbors.iter().any(|n| n["ip"] == b),
            "{b} resolved: {neighbors:?}"
        );
    }
}

#[test]
fn lb_with_nat_return_spreads_60_connections_over_3_backends() {
    lb_between_namespaces("lbn", "nat");
}

#[test]
fn lb_with_ipip_return_spreads_60_connections_over_3_backends() {
    lb_between_namespaces("lbi", "ipip");
}
