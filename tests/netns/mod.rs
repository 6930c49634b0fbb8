//! Network namespaces for the end-to-end tests against real Linux hosts: a topology of hosts
//! (namespaces with a veth each) around a namespace that holds the dataplane's ends, the
//! dataplane run inside it, and the servers and clients the tests use (Python's HTTP server,
//! `curl`, `ping`, Python UDP sockets). Everything is deleted when the topology is dropped.
//!
//! The tests need root (CAP_NET_ADMIN), `ip`, `ethtool`, `ping`, `curl`, `python3` and
//! `/dev/net/tun`; [`skip_reason`] says which is missing, and each test prints it and returns.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One topology at a time per test binary: each runs a busy-polling dataplane, and the machine
/// has few cores.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// Why the namespace tests cannot run on this machine, if they cannot.
pub fn skip_reason() -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        return Some("not root (network namespaces need CAP_NET_ADMIN)".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    for (tool, pkg) in [
        ("ip", "iproute2"),
        ("ethtool", "ethtool"),
        ("ping", "iputils-ping"),
        ("curl", "curl"),
        ("python3", "python3"),
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("no `{tool}` (apt-get install {pkg})"));
        }
    }
    let stdlib = Command::new("python3")
        .args(["-c", "import http.server"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !stdlib {
        return Some("python3 without its standard library (apt-get install python3)".into());
    }
    None
}

/// Runs a command, failing the test with its output when it fails.
pub fn sh(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A set of namespaces named `nmdp-<tag>-<pid>-<host>`, with the processes started in them.
pub struct Topo {
    prefix: String,
    hosts: Vec<String>,
    children: Vec<Child>,
    pub dir: PathBuf,
}

impl Topo {
    /// Namespaces for `hosts` plus `dp` (the dataplane's), loopback up, IPv6 off (so the
    /// counters show only what the test sends).
    pub fn new(tag: &str, hosts: &[&str]) -> Topo {
        let prefix = format!("nmdp-{tag}-{}", std::process::id());
        let dir = std::env::temp_dir().join(&prefix);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut t = Topo {
            prefix,
            hosts: Vec::new(),
            children: Vec::new(),
            dir,
        };
        for h in hosts.iter().chain(&["dp"]) {
            let ns = t.ns(h);
            let _ = Command::new("ip")
                .args(["netns", "del", &ns])
                .stderr(Stdio::null())
                .status();
            sh(&["ip", "netns", "add", &ns]);
            t.hosts.push(ns.clone());
            t.run(
                h,
                "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
            );
            t.run(h, "ip link set lo up");
        }
        t
    }

    /// The namespace of host `h`.
    pub fn ns(&self, h: &str) -> String {
        format!("{}-{h}", self.prefix)
    }

    /// Runs a shell command line in host `h`'s namespace; it must succeed.
    pub fn run(&self, h: &str, cmd: &str) -> Output {
        sh(&["ip", "netns", "exec", &self.ns(h), "sh", "-c", cmd])
    }

    /// Runs a shell command line in host `h`'s namespace and returns its output, whatever its
    /// exit status.
    pub fn try_run(&self, h: &str, cmd: &str) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns(h), "sh", "-c", cmd])
            .output()
            .unwrap()
    }

    /// A veth pair: `host_if` in host `h` with `addr` (and default route `gw`, if any), and
    /// `dp_if` in the dataplane's namespace, both up; offloads off on the host's end (a veth
    /// hands AF_PACKET unsegmented TSO frames otherwise).
    pub fn veth(&self, h: &str, host_if: &str, addr: &str, gw: Option<&str>, dp_if: &str) {
        sh(&[
            "ip",
            "-n",
            &self.ns("dp"),
            "link",
            "add",
            dp_if,
            "type",
            "veth",
            "peer",
            "name",
            host_if,
            "netns",
            &self.ns(h),
        ]);
        self.run("dp", &format!("ip link set {dp_if} up"));
        self.host_if(h, host_if, addr, gw);
        self.run(h, &format!("ethtool -K {host_if} tx off >/dev/null"));
    }

    /// Addresses, brings up and routes interface `ifname` of host `h`.
    pub fn host_if(&self, h: &str, ifname: &str, addr: &str, gw: Option<&str>) {
        self.run(
            h,
            &format!("ip addr add {addr} dev {ifname} && ip link set {ifname} up"),
        );
        if let Some(g) = gw {
            self.run(h, &format!("ip route add default via {g}"));
        }
    }

    /// Moves interface `ifname` (a TAP device the dataplane created) from the dataplane's
    /// namespace to host `h`, waiting up to 10 s for it to appear.
    pub fn adopt(&self, h: &str, ifname: &str) {
        let t = Instant::now();
        while !self
            .try_run("dp", &format!("ip link show {ifname}"))
            .status
            .success()
        {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{ifname} did not appear in the dataplane's namespace"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.run("dp", &format!("ip link set {ifname} netns {}", self.ns(h)));
    }

    /// Starts `cmd` (a shell line) in host `h`'s namespace in the background, its output in
    /// `<dir>/<log>`; it is killed when the topology is dropped.
    pub fn spawn(&mut self, h: &str, cmd: &str, log: &str) {
        let f = std::fs::File::create(self.dir.join(log)).unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns(h),
                "sh",
                "-c",
                &format!("exec {cmd}"),
            ])
            .stdout(Stdio::from(f.try_clone().unwrap()))
            .stderr(Stdio::from(f))
            .spawn()
            .unwrap();
        self.children.push(child);
    }

    /// The text of log file `log`.
    pub fn log(&self, log: &str) -> String {
        std::fs::read_to_string(self.dir.join(log)).unwrap_or_default()
    }

    /// Starts the dataplane on `config` (a path relative to the repository) in the dataplane's
    /// namespace with `sets` overrides; returns the running process (its JSON summary goes to
    /// `<dir>/summary.json`, its log to `<dir>/dataplane.log`).
    pub fn dataplane(&self, config: &str, sets: &[String]) -> Child {
        let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join(config);
        let mut args: Vec<String> = vec![
            "netns".into(),
            "exec".into(),
            self.ns("dp"),
            env!("CARGO_BIN_EXE_dataplane").into(),
            "run".into(),
            cfg.to_string_lossy().into_owned(),
            "--json".into(),
        ];
        for s in sets {
            args.push("--set".into());
            args.push(s.clone());
        }
        Command::new("ip")
            .args(&args)
            .stdout(Stdio::from(
                std::fs::File::create(self.dir.join("summary.json")).unwrap(),
            ))
            .stderr(Stdio::from(
                std::fs::File::create(self.dir.join("dataplane.log")).unwrap(),
            ))
            .spawn()
            .unwrap()
    }

    /// Waits for the dataplane to end (it runs for its `run.duration_s`) and returns its JSON
    /// summary.
    pub fn summary(&self, mut dp: Child) -> serde_json::Value {
        let status = dp.wait().unwrap();
        assert!(
            status.success(),
            "dataplane failed: {}",
            self.log("dataplane.log")
        );
        let text = std::fs::read_to_string(self.dir.join("summary.json")).unwrap();
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("summary: {e}: {text}\n{}", self.log("dataplane.log")))
    }

    /// Waits until `url` answers in host `h` (a server that just started), up to 10 s.
    pub fn wait_http(&self, h: &str, url: &str) {
        let t = Instant::now();
        while !self
            .try_run(h, &format!("curl -s -m 1 -o /dev/null {url}"))
            .status
            .success()
        {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{url} never answered"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.hosts {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A file of `bytes` pseudo-random bytes (deterministic), for transfers.
pub fn blob(path: &Path, bytes: usize) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(path, data).unwrap();
}

/// A Python UDP echo server on `addr:port` answering each datagram with `echo:` + it.
pub fn udp_echo_server(addr: &str, port: u16) -> String {
    format!(
        "python3 -c \"import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.bind(('{addr}',{port}))\nwhile True:\n d,a=s.recvfrom(2048)\n s.sendto(b'echo:'+d,a)\""
    )
}

/// A Python UDP client that sends `msg` to `addr:port` and prints the answer.
/// Retries up to 10 times (2 s each): on a loaded machine the first datagram can be lost while
/// ARP resolves or the dataplane catches up.
pub fn udp_ask(addr: &str, port: u16, msg: &str) -> String {
    format!(
        "python3 -c \"import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.settimeout(2)\nfor i in range(10):\n  s.sendto(b'{msg}',('{addr}',{port}))\n  \
         try:\n    print(s.recv(2048).decode()); break\n  except OSError: pass\""
    )
}
