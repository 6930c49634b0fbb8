//! End-to-end tests of `dataplane run` on DPDK vdevs (feature `dpdk`, needs libdpdk-dev; no
//! hugepages): `cargo test --features dpdk --test dpdk_e2e`.
//!
//! EAL initialises once per process, so all tests here share one EAL (the first run's
//! `eal_args`; every config below uses `--no-huge --no-pci --no-shconf`) and run one at a time
//! (they reuse vdev names).

#![cfg(feature = "dpdk")]

use std::path::PathBuf;
use std::sync::Mutex;

use dataplane::DatapathMode;
use nmdp::run::RunOptions;
use nmdp::run::dpdk as dpdk_run;
use serde_json::Value;
use wire::frames::{FrameSpec, L4Spec};

static SERIAL: Mutex<()> = Mutex::new(());

const EAL: &str = r#"eal_args = ["-l", "0", "--no-huge", "-m", "256", "--no-pci", "--no-shconf",
            "--no-telemetry", "--file-prefix=nmdp-e2e-dpdk", "--log-level=*:warning"]"#;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nmdp-dpdk-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("key {k} missing in {v}"))
}

fn run_dpdk(opts: &RunOptions) -> Value {
    let (cfg, d) = dpdk_run::load(opts)
        .unwrap_or_else(|e| panic!("{}: {e}", opts.config.display()))
        .expect("config has a [dpdk] section");
    dpdk_run::run(&cfg, &d, opts).unwrap_or_else(|e| panic!("{}: {e}", opts.config.display()))
}

fn assert_pools_back(s: &Value) {
    for p in s["pools"].as_array().unwrap() {
        assert_eq!(p["in_use"], 0, "pool back to its starting count: {p}");
    }
}

/// Frames of many lengths (60..=1514) with recognisable bytes, as UDP/IPv4 so that header
/// rewriting NFs (NAT) have something to translate.
fn golden_frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for (k, len) in (60..=1514usize)
        .step_by(97)
        .chain([61, 64, 65, 66, 127, 128, 1513, 1514])
        .enumerate()
    {
        let mut f: Vec<u8> = (0..len)
            .map(|i| ((i as u32).wrapping_mul(2654435761) >> 24) as u8 ^ len as u8)
            .collect();
        f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip_len = (len - 14) as u16;
        let mut ip = [
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 192, 168, 1, 2, 10, 9, 0, 1,
        ];
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        let sum = ip_checksum(&ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        f[14..34].copy_from_slice(&ip);
        let udp_len = ip_len - 20;
        f[34..36].copy_from_slice(&(1000 + k as u16).to_be_bytes());
        f[36..38].copy_from_slice(&80u16.to_be_bytes());
        f[38..40].copy_from_slice(&udp_len.to_be_bytes());
        f[40..42].copy_from_slice(&[0, 0]);
        frames.push(f);
    }
    frames
}

fn ip_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Runs `frames` through the `[[pipeline]]` TOML `pipeline` on the virtual NIC and on DPDK's
/// `net_pcap` in every datapath mode and asserts the outputs are bit-for-bit equal and that DPDK
/// pools end where they started. `vdev` keeps vdev names unique within the process. Returns the
/// output of each mode.
fn golden_on_both_drivers(
    tag: &str,
    vdev: usize,
    pipeline: &str,
    frames: &[Vec<u8>],
) -> Vec<Vec<Vec<u8>>> {
    let input = tmp(&format!("{tag}-in.pcap"));
    dataplane::pcap::write_all(&input, frames).unwrap();
    let vcfg = tmp(&format!("vnic-{tag}.toml"));
    std::fs::write(&vcfg, pipeline).unwrap();
    let mut outputs = Vec::new();
    for (i, mode) in DatapathMode::ALL.into_iter().enumerate() {
        let vout = tmp(&format!("vnic-{tag}-{mode}.pcap"));
        let o = RunOptions {
            config: vcfg.clone(),
            mode: Some(mode),
            rx_pcap: Some(input.clone()),
            tx_pcap: Some(vout.clone()),
            sets: vec!["run.stats_interval_s=0".into()],
            ..RunOptions::default()
        };
        nmdp::run::run(&o).unwrap();

        let dout = tmp(&format!("dpdk-{tag}-{mode}.pcap"));
        let dcfg = tmp(&format!("dpdk-{tag}-{mode}.toml"));
        std::fs::write(
            &dcfg,
            format!(
                "[run]\nstats_interval_s = 0\n[dpdk]\n{EAL}\nrx_desc = 256\ntx_desc = 256\n\
                 [[dpdk.ports]]\ndevargs = \"net_pcap_g{vdev}_{i},rx_pcap={},tx_pcap={}\"\n\
                 tx_port = 0\n{pipeline}",
                input.display(),
                dout.display()
            ),
        )
        .unwrap();
        let s = run_dpdk(&RunOptions {
            config: dcfg,
            mode: Some(mode),
            ..RunOptions::default()
        });
        let want = dataplane::pcap::read_all(&vout).unwrap();
        let got = dataplane::pcap::read_all(&dout).unwrap();
        assert_eq!(u(&s, "packets_rx"), frames.len() as u64, "{tag} {mode}");
        assert_eq!(u(&s, "packets_tx"), want.len() as u64, "{tag} {mode}");
        assert_pools_back(&s);
        assert_eq!(got.len(), want.len(), "{tag} {mode}: frame count");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{tag} {mode}: frame {k} ({} B) differs", w.len());
        }
        outputs.push(got);
    }
    outputs
}

/// Golden traces: the same input pcap through macswap gives bit-for-bit the same output pcap on
/// DPDK's `net_pcap` as on the virtual NIC, in every datapath mode.
#[test]
fn golden_pcaps_match_the_virtual_nic_in_every_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let frames = golden_frames();
    let outs = golden_on_both_drivers("macswap", 0, "[[pipeline]]\nname = \"macswap\"\n", &frames);
    for out in outs {
        assert_eq!(out.len(), frames.len());
        assert_ne!(out[0], frames[0], "macswap rewrote the header");
        assert_eq!(out[0][..6], frames[0][6..12]);
    }
}

/// NAT golden traces: outbound UDP flows of every length and the servers' replies to the
/// translated flows give the same output on `net_pcap` as on the virtual NIC in every mode; the
/// outbound frames leave from the NAT address and the replies come back to the original inside
/// address and port.
#[test]
fn nat_golden_pcaps_match_the_virtual_nic_in_every_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const NAT: &str = "[[pipeline]]\nname = \"nat\"\nnat_ip = \"10.0.0.1\"\nflows = 4096\n";
    let outbound = golden_frames();
    // Learn the mappings (port allocation is deterministic) on the virtual NIC.
    let learned = golden_on_both_drivers("nat-learn", 1, NAT, &outbound).swap_remove(0);
    assert_eq!(learned.len(), outbound.len());
    let mut input = outbound.clone();
    for (o, t) in outbound.iter().zip(&learned) {
        assert_eq!(
            t[26..30],
            [10, 0, 0, 1],
            "outbound source is the NAT address"
        );
        // The server's reply: swap addresses and ports of the translated frame.
        let mut r = t.clone();
        r[26..30].copy_from_slice(&t[30..34]);
        r[30..34].copy_from_slice(&t[26..30]);
        r[34..36].copy_from_slice(&t[36..38]);
        r[36..38].copy_from_slice(&t[34..36]);
        r[24..26].copy_from_slice(&[0, 0]);
        let sum = ip_checksum(&r[14..34]);
        r[24..26].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(r[30..34], [10, 0, 0, 1]);
        assert_eq!(
            r[26..30],
            o[30..34],
            "the reply comes from the flow's server"
        );
        input.push(r);
    }
    // The server's "fragmentation needed" about the second flow (157 B frames) as it left the
    // NAT: its quoted
    // headers (bytes 42..90) reach past the 64 B header segment, so the NAT writes them back
    // through the driver's payload slow path (host and emulated nicmem segments on DPDK).
    input.push(
        FrameSpec {
            l4: L4Spec::IcmpError {
                ty: 3,
                code: 4,
                inner: learned[1][14..].to_vec(),
                inner_len: 48,
            },
            ..FrameSpec::udp(0x0a09_0001, 0x0a00_0001, 0, 0, 0)
        }
        .build(),
    );
    let outs = golden_on_both_drivers("nat", 2, NAT, &input);
    let n = outbound.len();
    for out in outs {
        assert_eq!(
            out.len(),
            input.len(),
            "every frame translated, none dropped"
        );
        for (k, o) in outbound.iter().enumerate() {
            let back = &out[n + k];
            assert_eq!(
                back[30..34],
                o[26..30],
                "reply {k} reaches the inside address"
            );
            assert_eq!(back[36..38], o[34..36], "reply {k} reaches the inside port");
            assert_eq!(back[26..30], o[30..34], "reply {k} comes from the server");
            assert_eq!(
                ip_checksum(&back[14..34]),
                0,
                "reply {k}: valid IPv4 checksum"
            );
        }
        let e = out.last().unwrap();
        assert_eq!(
            e[30..34],
            outbound[1][26..30],
            "the error reaches the inside host"
        );
        assert_eq!(
            e[42..90],
            outbound[1][14..62],
            "quoting the flow as it was sent"
        );
    }
}

/// `configs/dpdk-null.toml` as documented, in every mode, io-fwd and macswap.
#[test]
fn dpdk_null_config_forwards_in_every_mode() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for mode in DatapathMode::ALL {
        for nf in ["io_fwd", "macswap"] {
            let s = run_dpdk(&RunOptions {
                config: root().join("configs/dpdk-null.toml"),
                mode: Some(mode),
                packets: Some(20_000),
                sets: vec![
                    "run.stats_interval_s=0".into(),
                    "dpdk.worker_cores=[]".into(),
                    format!("pipeline=[{{name=\"{nf}\"}}]"),
                ],
                ..RunOptions::default()
            });
            assert_eq!(s["driver"], "dpdk");
            assert_eq!(s["mode"], mode.as_str());
            // run.packets caps what each of the two ports receives.
            assert_eq!(u(&s, "packets_rx"), 40_000, "{mode} {nf}");
            assert_eq!(u(&s, "packets_tx"), 40_000, "{mode} {nf}");
            assert_eq!(u(&s, "bytes_tx"), 40_000 * 64);
            assert_eq!(s["drops"]["tx_full"], 0);
            assert_pools_back(&s);
            assert_eq!(s["ports"].as_array().unwrap().len(), 2);
            // net_null's 64 B frames fit the 64 B header segment: never split.
            assert_eq!(u(&s, "rx_primary") + u(&s, "rx_secondary"), 0);
            if nf == "io_fwd" {
                assert_eq!(u(&s["nfs"]["io_fwd"], "packets"), 40_000, "{mode}");
            }
        }
    }
}

/// `configs/dpdk-ring.toml`: frames injected into a net_ring loop bounce between two ports as
/// two-segment chains; payloads come from the (emulated) primary ring in nicmem modes.
#[test]
fn dpdk_ring_config_bounces_split_packets() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (i, mode) in DatapathMode::ALL.into_iter().enumerate() {
        // net_ring keeps its rings after the port is removed, so each run needs fresh names.
        let ports = format!(
            "dpdk.ports=[{{devargs=\"net_ring_e{i}a\", inject=256}}, {{devargs=\"net_ring_e{i}b\"}}]"
        );
        let s = run_dpdk(&RunOptions {
            config: root().join("configs/dpdk-ring.toml"),
            mode: Some(mode),
            packets: Some(5_000),
            sets: vec!["run.stats_interval_s=0".into(), ports],
            ..RunOptions::default()
        });
        let rx = u(&s, "packets_rx");
        assert_eq!(rx, 10_000, "{mode}: each port received its 5000");
        match mode {
            DatapathMode::Host => assert_eq!(u(&s, "rx_primary") + u(&s, "rx_secondary"), 0),
            DatapathMode::Split => assert_eq!(u(&s, "rx_secondary"), rx),
            _ => assert_eq!(
                u(&s, "rx_primary"),
                rx,
                "{mode}: 1 MiB emulated nicmem suffices"
            ),
        }
        assert_eq!(s["nicmem"]["emulated"], mode.uses_nicmem());
    }
}

/// The error of loading `text` written to `cfg` as a run config.
fn load_error(cfg: &std::path::Path, text: &str) -> nmdp::config::ConfigError {
    std::fs::write(cfg, text).unwrap();
    dpdk_run::load(&RunOptions {
        config: cfg.to_path_buf(),
        ..RunOptions::default()
    })
    .unwrap_err()
}

/// Config errors name the file, the key and what is allowed; nothing runs.
#[test]
fn bad_dpdk_sections_fail_before_anything_runs() {
    let cfg = tmp("bad.toml");
    let e = load_error(
        &cfg,
        "[dpdk]\nrx_desc = 5\n[[dpdk.ports]]\ndevargs = \"net_null0\"\n",
    );
    assert_eq!(e.key, "dpdk.rx_desc");
    assert!(
        e.to_string().contains("bad.toml") && e.msg.contains("16..="),
        "{e}"
    );
    // A vector shorter than one poll, or longer than a burst can hold.
    for v in [16, 257] {
        let e = load_error(
            &cfg,
            &format!("[dpdk]\nvector = {v}\n[[dpdk.ports]]\ndevargs = \"net_null0\"\n"),
        );
        assert_eq!(e.key, "dpdk.vector");
        assert!(e.msg.contains("datapath.burst (32) ..= 256"), "{e}");
    }
    let e = load_error(&cfg, "[dpdk]\nports = []\n");
    assert_eq!(e.key, "dpdk.ports");
    let e = load_error(&cfg, "[dpdk]\nbogus = 1\n");
    assert!(e.to_string().contains("bogus"), "{e}");
    let none = tmp("plain.toml");
    std::fs::write(&none, "[[pipeline]]\nname = \"macswap\"\n").unwrap();
    assert!(
        dpdk_run::load(&RunOptions {
            config: none,
            ..RunOptions::default()
        })
        .unwrap()
        .is_none()
    );
}

/// The issue's reproduction through the binary: a port that fails to configure (`net_null` with
/// `size=0` cannot set up its Rx queue) ends the run with rc 2 and the failing call, instead of
/// deadlocking on the control-plane lock. A separate process, killed if it never exits, so that
/// a regression fails this test instead of hanging it.
#[test]
fn a_port_that_fails_to_configure_ends_the_run_with_its_error() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .arg("run")
        .arg(root().join("configs/dpdk-null.toml"))
        .args([
            "--duration",
            "1",
            "-q",
            "--set",
            "dpdk.worker_cores=[]",
            "--set",
        ])
        .arg(
            "dpdk.ports=[{devargs=\"net_null0,size=0,copy=1\"},\
             {devargs=\"net_null1,size=64,copy=1\"}]",
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("dataplane run never exited (deadlock)");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("net_null0") && err.contains("rte_eth_rx_queue_setup"),
        "{err}"
    );
}

/// Emulated nicmem the machine cannot hold is a config error naming the key, before EAL starts
/// (it once aborted the run allocating it); in host mode the size is not used.
#[test]
fn emulated_nicmem_the_machine_cannot_hold_is_refused() {
    let opts = |mode| RunOptions {
        config: root().join("configs/dpdk-null.toml"),
        mode: Some(mode),
        sets: vec!["dpdk.emulated_nicmem=\"1048576GiB\"".into()],
        ..RunOptions::default()
    };
    let e = dpdk_run::load(&opts(DatapathMode::NicPayload)).unwrap_err();
    assert_eq!(e.key, "dpdk.emulated_nicmem", "{e}");
    assert!(
        e.msg
            .contains("\"1048576GiB\" for each of 2 ports needs 2.0 PiB")
            && e.msg.contains("this machine has"),
        "{e}"
    );
    assert!(dpdk_run::load(&opts(DatapathMode::Host)).is_ok());
}

/// A `net_pcap` port whose `tx_pcap` is the file a port reads is refused before EAL starts (the
/// capture would overwrite the input).
#[test]
fn net_pcap_writing_its_own_input_is_refused() {
    let input = tmp("loop-in.pcap");
    dataplane::pcap::write_all(&input, golden_frames()).unwrap();
    let before = std::fs::read(&input).unwrap();
    let i = input.display();
    for ports in [
        format!("dpdk.ports=[{{devargs=\"net_pcap0,rx_pcap={i},tx_pcap={i}\"}}]"),
        format!(
            "dpdk.ports=[{{devargs=\"net_pcap0,rx_pcap={i}\"}},\
             {{devargs=\"net_pcap1,rx_pcap=/dev/null,tx_pcap={i}\"}}]"
        ),
    ] {
        let e = dpdk_run::load(&RunOptions {
            config: root().join("configs/dpdk-pcap.toml"),
            sets: vec![ports.clone()],
            ..RunOptions::default()
        })
        .unwrap_err();
        assert!(
            e.key.ends_with("].devargs") && e.msg.contains("destroy the input"),
            "{e}"
        );
    }
    assert_eq!(std::fs::read(&input).unwrap(), before);
}

/// The `dataplane run` configs of DPDK ports as shipped (workers unpinned, as the test machine
/// may have one core; `configs/dpdk-pcap.toml` with the files its comment says to give): every
/// frame received is forwarded. `configs/dpdk-ring.toml` runs as shipped in
/// `dpdk_ring_config_bounces_split_packets` (with fresh ring names, as net_ring keeps its rings).
#[test]
fn shipped_dpdk_run_configs_run_clean() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let input = tmp("shipped-in.pcap");
    dataplane::pcap::write_all(&input, golden_frames()).unwrap();
    let pcap_ports = format!(
        "dpdk.ports=[{{devargs=\"net_pcap_shipped,rx_pcap={},tx_pcap={}\", tx_port=0}}]",
        input.display(),
        tmp("shipped-out.pcap").display()
    );
    for (name, packets, extra) in [
        ("configs/dpdk-null.toml", Some(20_000), None),
        ("configs/dpdk-pcap.toml", None, Some(pcap_ports)),
    ] {
        let mut sets = vec![
            "run.stats_interval_s=0".to_string(),
            "dpdk.worker_cores=[]".to_string(),
        ];
        sets.extend(extra);
        let s = run_dpdk(&RunOptions {
            config: root().join(name),
            packets,
            sets,
            ..RunOptions::default()
        });
        let rx = u(&s, "packets_rx");
        assert!(rx > 0, "{name}");
        assert_eq!(u(&s, "packets_tx"), rx, "{name}: {}", s["drops"]);
        assert_pools_back(&s);
    }
}

/// Operators see a DPDK port's link: `dataplane ctl health` of a run on a `net_tap` port is
/// healthy while the tap is up, unhealthy (exit 1, the port named) once `ip link set <tap>
/// down` takes it down, and healthy again when it comes back; the metrics endpoint reports the
/// link and counts the change. A separate process (its own EAL and telemetry socket); needs
/// root for the tap.
#[test]
fn operators_see_a_dpdk_ports_link_go_down_and_up() {
    if dataplane::unix::effective_uid() != 0 {
        eprintln!("skipped: operators_see_a_dpdk_ports_link_go_down_and_up needs root (net_tap)");
        return;
    }
    let id = std::process::id() % 10_000;
    let (prefix, iface) = (format!("e2e-link{id}"), format!("nmdplk{id}"));
    let rt = tmp("link-rt");
    std::fs::create_dir_all(&rt).unwrap();
    let metrics = format!("127.0.0.1:{}", 20_000 + id % 20_000);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .arg("run")
        .arg(root().join("configs/dpdk-null.toml"))
        .args([
            "--duration",
            "120",
            "-q",
            "--set",
            "dpdk.worker_cores=[]",
            "--set",
        ])
        .arg(format!(
            "dpdk.eal_args=[\"-l\",\"0\",\"--no-huge\",\"-m\",\"256\",\"--no-pci\",\
             \"--no-shconf\",\"--file-prefix={prefix}\",\"--log-level=*:error\"]"
        ))
        .arg("--set")
        .arg(format!(
            "dpdk.ports=[{{devargs=\"net_tap_lk{id},iface={iface}\"}},\
             {{devargs=\"net_null_lk{id},size=64,copy=0\"}}]"
        ))
        .args(["--set", &format!("run.telemetry_prefix=\"{prefix}\"")])
        .args(["--set", &format!("run.metrics=\"{metrics}\"")])
        .env("RUNTIME_DIRECTORY", &rt)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let health = || {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_dataplane"))
            .args(["ctl", "--prefix", &prefix, "health"])
            .env("RUNTIME_DIRECTORY", &rt)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let metric = |name: &str| -> Option<f64> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&metrics).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        let series = format!("{name}{{port=\"0\"}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .and_then(|v| v.trim().parse().ok())
    };
    let wait = |what: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if what() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        false
    };
    let ip = |state: &str| {
        let ok = std::process::Command::new("ip")
            .args(["link", "set", &iface, state])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "ip link set {iface} {state}");
    };
    let up = wait(&|| health().0 == Some(0));
    ip("down");
    let down = wait(&|| {
        let (rc, out) = health();
        rc == Some(1) && out.contains("port 0") && out.contains("down")
    });
    let counted = metric("nmdp_port_link_up") == Some(0.0)
        && metric("nmdp_port_link_down_events_total") == Some(1.0);
    ip("up");
    let again = wait(&|| health().0 == Some(0));
    let up_counted = metric("nmdp_port_link_up_events_total") == Some(1.0);
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(up, "healthy while the tap is up: {err}");
    assert!(down, "unhealthy with the tap down: {err}");
    assert!(counted, "the metrics report the link down and count it");
    assert!(again, "healthy again with the tap up: {err}");
    assert!(up_counted, "the metrics count the link coming up");
}
