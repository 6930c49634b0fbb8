//! `dataplane ctl health` follows the kernel interfaces behind a run's AF_PACKET ports
//! (docs/scale-out.md): healthy while both are up, unhealthy with the port named when a
//! client's side of the veth goes down (no carrier) or nmdp's own interface is set down, healthy
//! again when they come back; `drain 0` then stops the run cleanly. Needs root and the tools
//! listed in `netns::skip_reason`.

mod netns;

use std::process::Output;

use netns::{SERIAL, Topo, skip_reason};

fn ctl(prefix: &str, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["ctl", "--prefix", prefix])
        .args(args)
        .output()
        .unwrap()
}

/// Asks `health` until its exit code is `code`; returns the last answer.
fn health_until(prefix: &str, code: i32) -> Output {
    let t = std::time::Instant::now();
    loop {
        let o = ctl(prefix, &["health"]);
        if o.status.code() == Some(code) {
            return o;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "health never exited {code}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn health_follows_the_ports_kernel_interfaces() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let t = Topo::new("hlth", &["c", "s"]);
    t.veth("c", "c0", "10.0.1.2/24", None, "nmdp-in");
    t.veth("s", "s0", "10.0.2.2/24", None, "nmdp-bk");
    let prefix = format!("hlth{}", std::process::id());
    let dp = t.dataplane(
        "configs/netns-lb.toml",
        &[
            "run.duration_s=120".into(),
            format!("run.telemetry_prefix=\"{prefix}\""),
        ],
    );
    let ok = health_until(&prefix, 0);
    let out = String::from_utf8_lossy(&ok.stdout).to_string();
    assert!(out.contains("status: healthy"), "{out}");
    assert_eq!(out.matches(" up").count(), 2, "both ports up: {out}");

    // The client's end goes down: nmdp's veth has no carrier.
    t.run("c", "ip link set c0 down");
    let o = health_until(&prefix, 1);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        err.contains("unhealthy: port 0 (") && err.contains("no carrier"),
        "{err}"
    );
    t.run("c", "ip link set c0 up");
    health_until(&prefix, 0);

    // nmdp's own interface set down.
    t.run("dp", "ip link set nmdp-bk down");
    let o = health_until(&prefix, 1);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("port 1 (") && err.contains("): down"), "{err}");
    t.run("dp", "ip link set nmdp-bk up");
    health_until(&prefix, 0);

    assert_eq!(ctl(&prefix, &["drain", "0"]).status.code(), Some(0));
    let s = t.summary(dp);
    assert_eq!(s["stopped_by"], "drain");
}
