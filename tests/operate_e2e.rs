//! Operating `dataplane run` as an operator does (issue 17): stopping it with SIGINT/SIGTERM,
//! reading it with DPDK's own `dpdk-telemetry.py` and Prometheus's `promtool`, changing it with
//! `dataplane ctl` while traffic flows.
//!
//! Each test starts the CLI in its own process group with its own telemetry prefix and its own
//! runtime directory (`RUNTIME_DIRECTORY`, which nmdp and `dpdk-telemetry.py` both honour;
//! tests/common/mod.rs), so tests run in parallel without meeting. Tests that need a system tool (`dpdk-telemetry.py`
//! from Debian's dpdk-dev, `promtool` from prometheus) skip when it is missing, unless
//! `NMDP_REQUIRE_TOOLS=1` (as `.ci/run` sets), which makes a missing tool a failure.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{PATIENCE, Run, config, n, pcap_frames, run_to_end, tmp_dir};
use serde_json::Value;

/// A system tool, or `None` (the test skips) when it is not installed and not required.
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("NMDP_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "{name} is not installed (NMDP_REQUIRE_TOOLS=1)"
        );
        eprintln!("skipped: {name} is not installed");
    }
    found
}

/// Every received packet was transmitted or dropped with a reason (the NIC's own drops,
/// `rx_missed` and `pcie_overrun`, happen before Rx and are not in `packets_rx`).
fn assert_counters_add_up(s: &Value) {
    let drops: u64 = s["drops"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "rx_missed" && *k != "pcie_overrun")
        .map(|(_, v)| n(v))
        .sum();
    assert_eq!(
        n(&s["packets_rx"]),
        n(&s["packets_tx"]) + drops,
        "rx = tx + drops: {s}"
    );
    let w = s["per_worker"].as_array().unwrap();
    assert_eq!(w.len() as u64, n(&s["workers"]));
    for k in ["packets_rx", "packets_tx", "bytes_rx", "bytes_tx"] {
        assert_eq!(w.iter().map(|x| n(&x[k])).sum::<u64>(), n(&s[k]), "{k}");
    }
}

/// SIGINT and SIGTERM in the middle of an unbounded run end it with status 0 and the complete
/// JSON summary on stdout, whose counters add up, on one worker and on two.
#[test]
fn stop_signals_end_the_run_with_a_complete_summary() {
    for (sig, workers) in [("INT", "1"), ("TERM", "2")] {
        let mut run = Run::start(
            &format!("sig{sig}"),
            &[
                config("lb.toml").to_str().unwrap(),
                "--duration",
                "0",
                "--packets",
                "0",
                "--workers",
                workers,
                "--json",
                "-q",
            ],
        );
        run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > 20_000);
        run.signal(sig);
        let (st, out, err) = run.finish();
        assert_eq!(st.code(), Some(0), "SIG{sig}:\n{err}");
        let s: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(s["stopped_by"], format!("SIG{sig}"));
        assert!(n(&s["packets_rx"]) > 20_000);
        assert_counters_add_up(&s);
        let lb = &s["nfs"]["lb"];
        let backend_packets: u64 = lb["backends"]
            .as_object()
            .unwrap()
            .values()
            .map(|b| n(&b["packets"]))
            .sum();
        assert_eq!(backend_packets, n(&lb["vip_packets"]));
        assert!(err.contains(&format!("SIG{sig}: stopping")), "{err}");
        assert!(err.contains("summary:"), "the text summary too: {err}");
    }
}

/// `--duration 3` on a config whose file sets `run.packets` runs 3 s instead of ending at the
/// file's packet count.
#[test]
fn duration_on_the_command_line_replaces_the_configs_packet_count() {
    let dir = tmp_dir("dur");
    let cfg = dir.join("c.toml");
    let text = std::fs::read_to_string(config("default.toml")).unwrap();
    assert!(text.contains("packets = 2000000"));
    std::fs::write(&cfg, text.replace("packets = 2000000", "packets = 20000")).unwrap();
    let s = run_to_end(&[
        cfg.to_str().unwrap(),
        "--duration",
        "3",
        "--set",
        "run.telemetry=false",
    ]);
    assert_eq!(s["stopped_by"], "duration");
    assert!(
        s["elapsed_s"].as_f64().unwrap() >= 3.0,
        "{}",
        s["elapsed_s"]
    );
    assert!(
        n(&s["packets_rx"]) > 20_000,
        "not cut at the file's run.packets"
    );
    assert_counters_add_up(&s);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `dpdk-telemetry.py -f <prefix>` with `commands` on stdin; one reply per command.
fn dpdk_telemetry_py(py: &Path, run: &Run, commands: &[&str]) -> Vec<Value> {
    let mut child = Command::new(py)
        .args(["-f", &run.prefix])
        .env("RUNTIME_DIRECTORY", &run.rt)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = commands.join("\n");
    input.push('\n');
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let replies: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(replies.len(), commands.len(), "{text}");
    replies
}

/// DPDK's own client reads the socket, and what it reads of a run whose traffic has ended is
/// what the run's final summary says: `/ethdev/stats,0` the port's counters, `/nmdp/nf,<name>`
/// the function's (the LB's per-backend table among them, the NAT's sessions and
/// translations).
#[test]
fn dpdk_telemetry_py_reads_what_the_summary_says() {
    let Some(py) = tool("dpdk-telemetry.py") else {
        return;
    };
    for (cfg, nf, packets) in [
        ("lb.toml", "lb", 20_000u64),
        ("nat-bidir.toml", "nat", 20_000),
    ] {
        let mut run = Run::start(
            nf,
            &[
                config(cfg).to_str().unwrap(),
                "--packets",
                &packets.to_string(),
                "--set",
                "run.stop_when_idle=false",
                "--json",
                "-q",
            ],
        );
        // The traffic has ended and every frame is out; the run keeps polling.
        run.wait_for("/nmdp/summary", |s| n(&s["packets_tx"]) == packets);
        let r = dpdk_telemetry_py(
            &py,
            &run,
            &[
                "/ethdev/list",
                "/ethdev/stats,0",
                &format!("/nmdp/nf,{nf}"),
                "/nmdp/nope",
            ],
        );
        run.signal("INT");
        let (st, out, err) = run.finish();
        assert_eq!(st.code(), Some(0), "{err}");
        let s: Value = serde_json::from_str(&out).unwrap();
        assert_counters_add_up(&s);
        assert_eq!(r[0]["/ethdev/list"], serde_json::json!([0]));
        let e = &r[1]["/ethdev/stats"];
        assert_eq!(n(&e["ipackets"]), n(&s["packets_rx"]), "{nf}");
        assert_eq!(n(&e["opackets"]), n(&s["packets_tx"]));
        assert_eq!(n(&e["ibytes"]), n(&s["bytes_rx"]));
        assert_eq!(n(&e["obytes"]), n(&s["bytes_tx"]));
        assert_eq!(n(&e["q_ipackets"][0]), n(&s["per_worker"][0]["packets_rx"]));
        assert_eq!(e["q_opackets"].as_array().unwrap().len(), 16);
        let t = &r[2]["/nmdp/nf"];
        let sum = &s["nfs"][nf];
        // Every count of the summary's function, flattened as telemetry flattens groups.
        let mut checked = 0;
        for (k, v) in sum.as_object().unwrap() {
            match v {
                Value::Number(_) => {
                    assert_eq!(t[k], *v, "{nf}.{k}");
                    checked += 1;
                }
                Value::Array(_) => assert_eq!(t[k], *v, "{nf}.{k}"),
                Value::Object(m) if k == "drops" => {
                    for (r, c) in m {
                        assert_eq!(t[format!("drops/{r}")], *c, "{nf}.drops.{r}");
                    }
                }
                _ => {}
            }
        }
        assert!(checked > 5, "{nf}: {t}");
        if nf == "lb" {
            let addrs = t["backends/backend"].as_array().unwrap();
            let pk = t["backends/packets"].as_array().unwrap();
            assert_eq!(addrs.len(), 32);
            for (a, p) in addrs.iter().zip(pk) {
                assert_eq!(*p, sum["backends"][a.as_str().unwrap()]["packets"], "{a}");
            }
        } else {
            assert!(
                n(&t["inbound_translated"]) > 0,
                "return traffic was translated"
            );
        }
        assert!(r[3]["/nmdp/nope"].is_null(), "unknown commands answer null");
    }
}

/// One HTTP GET of `path` at `addr`: the status line and the body.
fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The value of the sample `series` (name and labels as printed) in an exposition.
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{body}"))
        .parse()
        .unwrap()
}

/// The Prometheus endpoint (bound to 127.0.0.1) passes `promtool check metrics`, and two scrapes
/// during a run show its counters rising.
#[test]
fn prometheus_metrics_pass_promtool_and_rise_during_a_run() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let mut run = Run::start(
        "prom",
        &[
            config("lb.toml").to_str().unwrap(),
            "--duration",
            "0",
            "--packets",
            "0",
            "--metrics",
            "0",
            "-q",
        ],
    );
    run.client();
    // The run prints the address once both surfaces are up: the socket may answer first.
    let t0 = Instant::now();
    let addr = loop {
        let err = run.stderr();
        if let Some(a) = err
            .lines()
            .find_map(|l| l.strip_prefix("metrics: http://")?.strip_suffix("/metrics"))
        {
            break a.to_string();
        }
        assert!(t0.elapsed() < PATIENCE, "no metrics address in:\n{err}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > 1000);
    let (status, first) = http_get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let rising = [
        "nmdp_port_rx_packets_total{port=\"0\",queue=\"0\"}",
        "nmdp_port_wire_tx_frames_total{port=\"0\",queue=\"0\"}",
        "nmdp_lb_vip_packets_total{nf=\"lb\",worker=\"0\"}",
        "nmdp_lb_backends_packets_total{nf=\"lb\",worker=\"0\",backend=\"10.180.250.5\"}",
        "nmdp_worker_bursts_total{worker=\"0\"}",
    ];
    // Scrapes again until every series has risen (a loaded machine may not run the worker for
    // a while; the test waits for progress, it does not time it).
    let t0 = Instant::now();
    let second = loop {
        std::thread::sleep(Duration::from_millis(200));
        let (_, body) = http_get(&addr, "/metrics");
        if rising.iter().all(|s| sample(&body, s) > sample(&first, s)) {
            break body;
        }
        if t0.elapsed() > PATIENCE {
            break body;
        }
    };
    let (status, _) = http_get(&addr, "/nothing");
    assert!(status.contains("404"), "{status}");
    run.signal("INT");
    let (st, _, err) = run.finish();
    assert_eq!(st.code(), Some(0), "{err}");
    for body in [&first, &second] {
        let mut p = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        p.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
        let o = p.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for series in rising {
        assert!(
            sample(&second, series) > sample(&first, series),
            "{series} did not rise"
        );
    }
    assert!(first.contains("# TYPE nmdp_lb_active_flows gauge"));
    assert!(first.contains("nmdp_drops_total{worker=\"0\",reason=\"not_for_vip\"} 0"));
}

/// Flows (source address and port, destination port) to the backend each of their frames went
/// to, from a pcap of the LB's output (Ethernet, IPv4 without options).
fn flow_backends(pcap: &Path) -> Vec<((u32, u16, u16), u32)> {
    pcap_frames(pcap)
        .iter()
        .map(|f| {
            let src = u32::from_be_bytes(f[26..30].try_into().unwrap());
            let dst = u32::from_be_bytes(f[30..34].try_into().unwrap());
            let sport = u16::from_be_bytes(f[34..36].try_into().unwrap());
            let dport = u16::from_be_bytes(f[36..38].try_into().unwrap());
            ((src, sport, dport), dst)
        })
        .collect()
}

/// Draining one of three Maglev backends while traffic flows: no new flow reaches it, its
/// flows keep going to it, and no flow of any backend changes backend; `dataplane ctl` says how
/// much of the table moved.
#[test]
fn draining_one_of_three_backends_during_a_run() {
    let pcap = Run::dir_of("drain").join("out.pcap");
    // 30 000 flows, revisited round after round, at about 60 000 frames/s of 64 B.
    let mut run = Run::start(
        "drain",
        &[
            config("lb.toml").to_str().unwrap(),
            "--duration",
            "0",
            "--packets",
            "0",
            "--tx-pcap",
            pcap.to_str().unwrap(),
            "--set",
            "pipeline.lb.backend_count=3",
            "--set",
            "pipeline.lb.mode=maglev",
            "--set",
            "traffic.flows=30000",
            "--set",
            "traffic.frame_size=64",
            "--set",
            "traffic.rate_gbps=0.04",
            "--json",
            "-q",
        ],
    );
    run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > 10_000);
    let (code, out, err) = run.ctl(&["lb", "drain", "10.180.250.6"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("state: draining") && out.contains("weight: 0"),
        "{out}"
    );
    let field = |k: &str| -> f64 {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}: ")))
            .unwrap_or_else(|| panic!("no {k} in {out}"))
            .parse()
            .unwrap()
    };
    let moved = field("slots_changed") / field("table_slots");
    assert!(
        (moved - 1.0 / 3.0).abs() < 0.02,
        "{moved} of the table moved"
    );
    // Right after the drain: what the drained backend had.
    let (code, table, _) = run.ctl(&["--json", "lb", "backends"]);
    assert_eq!(code, 0);
    let b: Value = serde_json::from_str(&table).unwrap();
    let b = &b["/nmdp/lb/backends"];
    let i = b["address"]
        .as_array()
        .unwrap()
        .iter()
        .position(|a| a == "10.180.250.6")
        .unwrap();
    assert_eq!(b["state"][i], "draining");
    let (new_at_drain, packets_at_drain) = (n(&b["new_flows"][i]), n(&b["packets"][i]));
    assert!(new_at_drain > 0);
    // Two more rounds over every flow.
    run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > 100_000);
    run.signal("INT");
    let (st, out, err) = run.finish();
    assert_eq!(st.code(), Some(0), "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_counters_add_up(&s);
    let lb = &s["nfs"]["lb"];
    let drained = &lb["backends"]["10.180.250.6"];
    assert_eq!(
        n(&drained["new_flows"]),
        new_at_drain,
        "no new flow reached it"
    );
    assert!(
        n(&drained["packets"]) > packets_at_drain,
        "its flows kept going"
    );
    assert_eq!(n(&lb["remapped"]), 0);
    // Every flow went to one backend all along, and each backend's flows in the capture are the
    // flows the LB says it assigned there (the NIC may miss a flow's frames on a busy machine,
    // `rx_missed`, so the capture need not hold all 30 000).
    assert_eq!((n(&lb["expired"]), n(&lb["evicted"])), (0, 0));
    let mut seen = std::collections::HashMap::new();
    for (flow, backend) in flow_backends(&pcap) {
        let b = *seen.entry(flow).or_insert(backend);
        assert_eq!(b, backend, "flow {flow:?} moved");
    }
    assert!(seen.len() <= 30_000 && seen.len() as u64 == n(&lb["new_flows"]));
    for (addr, b) in lb["backends"].as_object().unwrap() {
        let ip = u32::from(addr.parse::<std::net::Ipv4Addr>().unwrap());
        let flows = seen.values().filter(|&&x| x == ip).count() as u64;
        assert_eq!(flows, n(&b["new_flows"]), "{addr}");
    }
}

/// With a group that may read the socket, its members read but may not change the run: a
/// drain from another user is refused. Needs root (to be another user) and `setpriv`.
#[test]
fn other_users_may_read_but_not_change_a_run() {
    let Some(setpriv) = tool("setpriv") else {
        return;
    };
    if dataplane::unix::effective_uid() != 0 {
        eprintln!("skipped: needs root to act as another user");
        return;
    }
    let mut run = Run::start(
        "access",
        &[
            config("lb.toml").to_str().unwrap(),
            "--packets",
            "1000",
            "--set",
            "run.stop_when_idle=false",
            "--set",
            "run.telemetry_group=65534",
            "-q",
        ],
    );
    run.wait_for("/nmdp/summary", |s| n(&s["packets_tx"]) == 1000);
    let meta = std::fs::metadata(run.socket()).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(
        (meta.permissions().mode() & 0o777, meta.gid()),
        (0o660, 65534)
    );
    // The runtime directory itself must let that group through.
    std::fs::set_permissions(&run.rt, std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new(&setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_dataplane"))
            .args(["ctl", "--prefix", &run.prefix])
            .args(args)
            .env("RUNTIME_DIRECTORY", &run.rt)
            .output()
            .unwrap()
    };
    let o = as_nobody(&["summary"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("packets_tx: 1000"));
    let o = as_nobody(&["lb", "drain", "10.180.250.6"]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("refused"), "{e}");
    // The run's own user may.
    let (code, out, err) = run.ctl(&["lb", "drain", "10.180.250.6"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("draining"));
    run.signal("TERM");
    let (st, _, err) = run.finish();
    assert_eq!(st.code(), Some(0), "{err}");
}

/// `dataplane ctl nat sessions` lists the NAT's live sessions while it runs, on two workers:
/// every session once, with the outside endpoint its frames left with (checked against a
/// `--tx-pcap` capture) and the count the final summary gives; a maximum cuts the list, not the
/// count.
#[test]
fn nat_sessions_are_listed_while_it_runs() {
    let pcap = Run::dir_of("sessions").join("out.pcap");
    let mut run = Run::start(
        "sessions",
        &[
            config("nat-bidir.toml").to_str().unwrap(),
            "--packets",
            "20000",
            "--workers",
            "2",
            "--tx-pcap",
            pcap.to_str().unwrap(),
            "--set",
            "run.stop_when_idle=false",
            "--set",
            "run.clock=\"wall\"",
            "--set",
            "traffic.flows=100",
            "--set",
            "traffic.rate_gbps=0",
            "--json",
            "-q",
        ],
    );
    run.wait_for("/nmdp/summary", |s| n(&s["packets_tx"]) == 20_000);
    let (code, out, err) = run.ctl(&["--json", "nat", "sessions", "1000"]);
    assert_eq!(code, 0, "{err}");
    let all: Value = serde_json::from_str(&out).unwrap();
    let all = &all["/nmdp/nat/sessions"];
    let (code, out, err) = run.ctl(&["--json", "nat", "sessions", "7"]);
    assert_eq!(code, 0, "{err}");
    let some: Value = serde_json::from_str(&out).unwrap();
    let some = &some["/nmdp/nat/sessions"];
    let (code, _, err) = run.ctl(&["nat", "sessions", "many"]);
    assert_eq!(code, 1);
    assert!(err.contains("not a number of sessions"), "{err}");
    run.signal("INT");
    let (st, out, err) = run.finish();
    assert_eq!(st.code(), Some(0), "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_counters_add_up(&s);
    let nat = &s["nfs"]["nat"];
    assert_eq!(n(&nat["active_mappings"]), 100, "{nat}");
    assert_eq!(n(&all["live_sessions"]), 100);
    assert_eq!(n(&some["live_sessions"]), 100);
    assert_eq!(some["session"].as_array().unwrap().len(), 7);
    let col = |k: &str| -> Vec<String> {
        all[k]
            .as_array()
            .unwrap_or_else(|| panic!("no column {k}: {all}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let (inside, outside, remote) = (col("inside"), col("outside"), col("remote"));
    assert_eq!(inside.len(), 100);
    let distinct: std::collections::HashSet<_> = inside.iter().collect();
    assert_eq!(distinct.len(), 100, "every session once");
    assert!(col("protocol").iter().all(|p| p == "udp"));
    assert!(col("state").iter().all(|p| p == "udp"));
    assert!(
        remote.iter().all(|r| r.starts_with("48.1.1.")),
        "{remote:?}"
    );
    let workers: std::collections::HashSet<u64> =
        all["worker"].as_array().unwrap().iter().map(n).collect();
    assert_eq!(workers.len(), 2, "both workers' sessions");
    // The outside endpoints listed are those the forward frames left with.
    let d = std::fs::read(&pcap).unwrap();
    let mut sent = std::collections::HashSet::new();
    let mut at = 24;
    while at + 16 <= d.len() {
        let caplen = u32::from_le_bytes(d[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &d[at + 16..at + 16 + caplen];
        let src = std::net::Ipv4Addr::from(u32::from_be_bytes(f[26..30].try_into().unwrap()));
        if src == std::net::Ipv4Addr::new(10, 0, 0, 1) {
            sent.insert(format!("{src}:{}", u16::from_be_bytes([f[34], f[35]])));
        }
        at += 16 + caplen;
    }
    let listed: std::collections::HashSet<String> = outside.into_iter().collect();
    assert_eq!(listed, sent);
}

/// The NAT's pool as `dataplane ctl --json nat pool` shows it: address -> (state, sessions).
fn nat_pool(run: &Run) -> std::collections::HashMap<String, (String, u64)> {
    let (code, out, err) = run.ctl(&["--json", "nat", "pool"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let p = &v["/nmdp/nat/pool"];
    let addrs = p["address"].as_array().unwrap_or_else(|| panic!("{p}"));
    addrs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            (
                a.as_str().unwrap().to_string(),
                (
                    p["state"][i].as_str().unwrap().to_string(),
                    n(&p["sessions"][i]),
                ),
            )
        })
        .collect()
}

/// Issue 17's "a NAT address added at run time gets new sessions": a spare address put in
/// service while new subscribers keep arriving takes about its share (1 of 5) of the new
/// sessions, the old addresses keep theirs, and removing an old address ends its sessions at
/// once and gives it no new ones.
#[test]
fn nat_address_added_at_run_time_gets_new_sessions() {
    // 2 M inside hosts, each sending once at about 60 000 frames/s: every frame is a new
    // subscriber (a new session) for the whole test. The addresses' port slices fill to about
    // half, so a new mapping may probe up to 64 ports (none is refused).
    let mut run = Run::start(
        "natpool",
        &[
            config("nat.toml").to_str().unwrap(),
            "--duration",
            "0",
            "--packets",
            "0",
            "--workers",
            "2",
            "--set",
            "pipeline.nat.nat_ips=\"10.0.0.0/30\"",
            "--set",
            "pipeline.nat.spare_ips=\"10.0.0.9\"",
            "--set",
            "pipeline.nat.flows=600000",
            "--set",
            "pipeline.nat.port_attempts=64",
            "--set",
            "pipeline.flow_counter.flows=600000",
            "--set",
            "traffic.flows=2000000",
            "--set",
            "traffic.frame_size=64",
            "--set",
            "traffic.rate_gbps=0.04",
            "--json",
            "-q",
        ],
    );
    run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > 5_000);
    let before = nat_pool(&run);
    assert_eq!(before.len(), 5, "{before:?}");
    assert_eq!(before["10.0.0.9"], ("off".to_string(), 0));
    let (code, _, err) = run.ctl(&["nat", "pool", "add", "10.0.0.8"]);
    assert_eq!(code, 1);
    assert!(err.contains("spare_ips"), "{err}");
    let at_add: u64 = before.values().map(|v| v.1).sum();
    let (code, out, err) = run.ctl(&["nat", "pool", "add", "10.0.0.9"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("state: active") && out.contains("was: off"),
        "{out}"
    );
    let rx = n(&run.wait_for("/nmdp/summary", |_| true)["packets_rx"]);
    run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > rx + 40_000);
    let after = nat_pool(&run);
    assert_eq!(after["10.0.0.9"].0, "active");
    let new: u64 = after.values().map(|v| v.1).sum::<u64>() - at_add;
    let share = after["10.0.0.9"].1 as f64 / new as f64;
    assert!(
        (0.12..0.28).contains(&share),
        "the added address took {share} of {new} new sessions: {after:?}"
    );
    for a in ["10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3"] {
        assert!(after[a].1 > before[a].1, "{a} kept getting sessions");
    }
    // Removing an old address ends its sessions (at least those listed a moment ago).
    let listed = after["10.0.0.1"].1;
    let (code, out, err) = run.ctl(&["--json", "nat", "pool", "remove", "10.0.0.1"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    let r = &r["/nmdp/nat/pool/remove"];
    assert_eq!(r["state"], "off");
    assert!(n(&r["sessions_ended"]) >= listed, "{r} vs {listed}");
    let rx = n(&run.wait_for("/nmdp/summary", |_| true)["packets_rx"]);
    run.wait_for("/nmdp/summary", |s| n(&s["packets_rx"]) > rx + 20_000);
    let later = nat_pool(&run);
    assert_eq!(later["10.0.0.1"], ("off".to_string(), 0), "{later:?}");
    assert!(later["10.0.0.9"].1 > after["10.0.0.9"].1);
    run.signal("INT");
    let (st, out, err) = run.finish();
    assert_eq!(st.code(), Some(0), "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_counters_add_up(&s);
    let nat = &s["nfs"]["nat"];
    assert_eq!(n(&nat["dropped"]), 0, "{nat}");
}
