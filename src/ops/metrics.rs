//! The Prometheus endpoint of a run: `GET /metrics` answers the text exposition format
//! (prometheus.io "Exposition formats", version 0.0.4) with the counters the telemetry socket
//! gives, as labelled series:
//!
//! - per port and queue (`port`, `queue`): `nmdp_port_<counter>_total` for every queue counter
//!   (`rx_packets`, `wire_tx_frames`, `rx_missed`, ...);
//! - per worker (`worker`): `nmdp_worker_busy_seconds_total`, `nmdp_worker_bursts_total`,
//!   `nmdp_worker_idle_polls_total`, and `nmdp_drops_total` by `reason`;
//! - per function and worker (`nf`, `worker`): `nmdp_<function>_<counter>_total` for counts,
//!   `nmdp_<function>_<counter>` for gauges and settings, the function's drops as
//!   `nmdp_<function>_drops_total` by `reason`, and its tables by their label
//!   (`nmdp_lb_backends_packets_total{backend="10.180.250.5"}`);
//! - `nmdp_uptime_seconds`, and `nmdp_info` (driver, mode, version) as a constant 1.
//!
//! The endpoint binds 127.0.0.1 unless the address says otherwise (DESIGN "Access"), reads
//! nothing from its clients but the request line, and serves one request per connection.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use dataplane::{CounterValue, Counters, DropReason, QueueStats};

use super::RunView;
use crate::config::metrics_addr;

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running endpoint, stopped when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `spec` (see [`metrics_addr`]) and serves `view`'s metrics.
    pub fn start(spec: &str, view: Arc<RunView>) -> Result<Self, String> {
        let addr = metrics_addr(spec)?;
        let listener =
            TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("{addr}: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                while !st.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            let _ = serve(s, &view);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            })
            .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one HTTP request: the metrics for `GET /metrics` (or `/`), 404 or 405 otherwise.
fn serve(mut s: TcpStream, view: &RunView) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut buf = [0u8; 4096];
    let mut got = 0;
    // The request line and headers, up to the blank line (or the buffer's end).
    while got < buf.len() {
        let n = s.read(&mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
        if buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..got]);
    let mut line = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (line.next().unwrap_or(""), line.next().unwrap_or(""));
    let (status, ctype, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics" | "/") => ("200 OK", CONTENT_TYPE, render(view)),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET\n".to_string(),
        ),
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    s.flush()
}

/// One metric family: its type, help and samples (`labels`, value).
struct Family {
    kind: &'static str,
    help: String,
    samples: Vec<(String, f64)>,
}

/// The families of one exposition, kept by name so each is written once.
#[derive(Default)]
struct Exposition(BTreeMap<String, Family>);

impl Exposition {
    fn add(&mut self, name: &str, kind: &'static str, help: &str, labels: &[(&str, &str)], v: f64) {
        let f = self.0.entry(name.to_string()).or_insert_with(|| Family {
            kind,
            help: help.to_string(),
            samples: Vec::new(),
        });
        if f.kind != kind {
            // Two counters of different kinds under one name: keep the first kind's samples.
            return;
        }
        let mut l = String::new();
        for (i, (k, val)) in labels.iter().enumerate() {
            if i > 0 {
                l.push(',');
            }
            let _ = write!(l, "{k}=\"{}\"", escape(val));
        }
        f.samples.push((l, v));
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for (name, f) in &self.0 {
            let _ = writeln!(
                out,
                "# HELP {name} {}",
                f.help.replace('\\', "\\\\").replace('\n', "\\n")
            );
            let _ = writeln!(out, "# TYPE {name} {}", f.kind);
            for (labels, v) in &f.samples {
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {}", num(*v));
                } else {
                    let _ = writeln!(out, "{name}{{{labels}}} {}", num(*v));
                }
            }
        }
        out
    }
}

fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A metric name part: letters, digits and `_` (anything else becomes `_`).
fn metric_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// What each queue counter counts (the `# HELP` of `nmdp_port_<counter>_total`).
fn queue_help(name: &str) -> &'static str {
    match name {
        "rx_packets" => "Packets received and handed to the workers",
        "rx_bytes" => "Bytes of the packets received (without FCS)",
        "rx_primary" => "Payloads received into the primary (on-NIC memory) ring",
        "rx_secondary" => "Payloads received into the secondary (host) ring",
        "rx_nombuf" => "Rx buffer allocations that failed (pool empty)",
        "rx_missed" => "Frames the NIC dropped for want of an Rx descriptor",
        "rx_oversize" => "Frames dropped as longer than the port's largest frame",
        "rx_pcie_overrun" => "Frames the NIC dropped because PCIe could not keep up",
        "desc_errors" => "Descriptors the NIC rejected with an error completion",
        "tx_packets" => "Packets accepted for transmission",
        "tx_bytes" => "Bytes of the packets accepted for transmission",
        "tx_full" => "Packets the Tx ring had no room for",
        "wire_tx_frames" => "Frames put on the wire",
        "tx_foreign" => "Packets of another driver's buffers handed to the queue",
        _ => "A queue counter",
    }
}

/// The exposition of `view` now.
pub fn render(view: &RunView) -> String {
    let mut e = Exposition::default();
    e.add(
        "nmdp_info",
        "gauge",
        "The run: driver, datapath mode and nmdp version (always 1)",
        &[
            ("driver", view.info.driver),
            ("mode", view.info.mode),
            ("version", env!("CARGO_PKG_VERSION")),
        ],
        1.0,
    );
    e.add(
        "nmdp_uptime_seconds",
        "gauge",
        "Seconds since the workers started",
        &[],
        view.start.elapsed().as_secs_f64(),
    );
    for (p, link) in view.info.reported_links.iter().enumerate() {
        let Some(link) = link else { continue };
        let ps = p.to_string();
        let labels = [("port", ps.as_str())];
        e.add(
            "nmdp_port_link_up",
            "gauge",
            "1 while the port's link is up, as its driver last reported it",
            &labels,
            f64::from(u8::from(link.is_up())),
        );
        e.add(
            "nmdp_port_link_down_events_total",
            "counter",
            "Times the port's link went down",
            &labels,
            link.down_events() as f64,
        );
        e.add(
            "nmdp_port_link_up_events_total",
            "counter",
            "Times the port's link came up",
            &labels,
            link.up_events() as f64,
        );
    }
    let snaps = view.snapshots();
    for (w, s) in snaps.iter().enumerate() {
        let ws = w.to_string();
        for (p, q) in s.ports.iter().enumerate() {
            let ps = p.to_string();
            for (name, v) in QueueStats::NAMES.iter().zip(q.to_array()) {
                e.add(
                    &format!("nmdp_port_{name}_total"),
                    "counter",
                    queue_help(name),
                    &[("port", &ps), ("queue", &ws)],
                    v as f64,
                );
            }
        }
        let labels = [("worker", ws.as_str())];
        e.add(
            "nmdp_worker_busy_seconds_total",
            "counter",
            "Seconds the worker spent in loop iterations that found packets",
            &labels,
            s.busy_ns as f64 * 1e-9,
        );
        e.add(
            "nmdp_worker_bursts_total",
            "counter",
            "Bursts the worker processed",
            &labels,
            s.bursts as f64,
        );
        e.add(
            "nmdp_worker_idle_polls_total",
            "counter",
            "Loop iterations of the worker that received nothing",
            &labels,
            s.idle_polls as f64,
        );
        for r in DropReason::all() {
            e.add(
                "nmdp_drops_total",
                "counter",
                "Packets dropped by the worker, by reason",
                &[("worker", &ws), ("reason", r.name())],
                s.drops.get(r) as f64,
            );
        }
    }
    if let Ok(per_worker) = view.nf_counters() {
        let ids = nf_ids(&view.info.pipeline);
        for (w, nfs) in per_worker.iter().enumerate() {
            let ws = w.to_string();
            for (i, (_, c)) in nfs.iter().enumerate() {
                let Some((canonical, id)) = ids.get(i) else {
                    continue;
                };
                let prefix = format!("nmdp_{}", metric_part(canonical));
                let labels = [("nf", id.as_str()), ("worker", ws.as_str())];
                nf_metrics(&mut e, &prefix, canonical, &labels, c);
            }
        }
    }
    e.text()
}

/// Each pipeline entry's canonical name and its `nf` label: the name, or `name#n` for the n-th
/// (from 1) repeat of a name.
fn nf_ids(pipeline: &[String]) -> Vec<(String, String)> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    pipeline
        .iter()
        .map(|n| {
            let k = seen.entry(n.as_str()).or_insert(0);
            let id = if *k == 0 {
                n.clone()
            } else {
                format!("{n}#{k}")
            };
            *k += 1;
            (n.clone(), id)
        })
        .collect()
}

fn nf_metrics(e: &mut Exposition, prefix: &str, nf: &str, labels: &[(&str, &str)], c: &Counters) {
    for (name, v) in c.iter() {
        let base = format!("{prefix}_{}", metric_part(name));
        let help = format!("{nf}: {name} (see `dataplane nfs`)");
        match v {
            CounterValue::Count(n) => e.add(
                &format!("{base}_total"),
                "counter",
                &help,
                labels,
                *n as f64,
            ),
            CounterValue::Gauge(n) | CounterValue::Setting(n) => {
                e.add(&base, "gauge", &help, labels, *n as f64)
            }
            CounterValue::Counts(v) => {
                for (i, n) in v.iter().enumerate() {
                    let is = i.to_string();
                    let mut l = labels.to_vec();
                    l.push(("index", &is));
                    e.add(&format!("{base}_total"), "counter", &help, &l, *n as f64);
                }
            }
            CounterValue::Group(g) if name == "drops" => {
                for (reason, v) in g.iter() {
                    if let Some(n) = v.as_count() {
                        let mut l = labels.to_vec();
                        l.push(("reason", reason));
                        e.add(
                            &format!("{base}_total"),
                            "counter",
                            &format!("{nf}: packets dropped, by reason"),
                            &l,
                            n as f64,
                        );
                    }
                }
            }
            CounterValue::Group(g) => nf_metrics(e, &base, nf, labels, g),
            CounterValue::Rows { label, rows } => {
                for (key, r) in rows {
                    let mut l = labels.to_vec();
                    l.push((label, key));
                    nf_metrics(e, &base, nf, &l, r);
                }
            }
            CounterValue::Text(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_loopback() {
        assert_eq!(metrics_addr("9100").unwrap().to_string(), "127.0.0.1:9100");
        assert_eq!(metrics_addr(":9101").unwrap().to_string(), "127.0.0.1:9101");
        assert_eq!(
            metrics_addr("0.0.0.0:9100").unwrap().to_string(),
            "0.0.0.0:9100"
        );
        assert_eq!(
            metrics_addr("[::1]:9100").unwrap().to_string(),
            "[::1]:9100"
        );
        let e = metrics_addr("localhost").unwrap_err();
        assert!(e.contains("127.0.0.1:9100"), "{e}");
    }

    #[test]
    fn families_are_written_once_with_help_and_type() {
        let mut drops = Counters::new();
        drops.count("not_for_vip", 2);
        let mut row = Counters::new();
        row.count("packets", 5)
            .setting("weight", 2)
            .text("state", "active");
        let mut c = Counters::new();
        c.count("packets", 9)
            .gauge("active_flows", 3)
            .group("drops", drops)
            .rows("backends", "backend", vec![("10.0.0.1".into(), row)]);
        let mut e = Exposition::default();
        for w in ["0", "1"] {
            nf_metrics(&mut e, "nmdp_lb", "lb", &[("nf", "lb"), ("worker", w)], &c);
        }
        let t = e.text();
        assert_eq!(t.matches("# TYPE nmdp_lb_packets_total counter").count(), 1);
        assert!(
            t.contains("nmdp_lb_packets_total{nf=\"lb\",worker=\"1\"} 9\n"),
            "{t}"
        );
        assert!(t.contains("# TYPE nmdp_lb_active_flows gauge"), "{t}");
        assert!(
            t.contains("nmdp_lb_drops_total{nf=\"lb\",worker=\"0\",reason=\"not_for_vip\"} 2"),
            "{t}"
        );
        assert!(
            t.contains(
                "nmdp_lb_backends_packets_total{nf=\"lb\",worker=\"0\",backend=\"10.0.0.1\"} 5"
            ),
            "{t}"
        );
        assert!(
            t.contains("nmdp_lb_backends_weight{nf=\"lb\",worker=\"0\",backend=\"10.0.0.1\"} 2")
        );
        assert!(!t.contains("state"));
        assert_eq!(
            nf_ids(&["lb".into(), "nat".into(), "lb".into()]),
            [
                ("lb".to_string(), "lb".to_string()),
                ("nat".into(), "nat".into()),
                ("lb".into(), "lb#1".into())
            ]
        );
    }
}
