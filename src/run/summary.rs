//! The run summary every driver prints: the counter keys under names that never change
//! ([`counter_keys`]), the network functions' counters merged over the workers, the check that
//! their outputs were written ([`nf_output_errors`]), and the text form ([`print_summary`]).

use dataplane::runloop::WorkerReport;
use dataplane::{Counters, DropCounts, DropReason, QueueStats};
use serde_json::{Value, json};

use super::options::RunError;
use crate::config::RunConfig;

/// Each worker's own counters (the summary's `per_worker`): packets and bytes, drops by reason,
/// bursts, idle polls, its functions' counters, and with `host_times` its busy and active
/// seconds. Those are the host's wall clock, so a virtual-clock run leaves them out: its summary
/// is the model's, the same on every run of the same config.
pub fn per_worker(reports: &[WorkerReport], host_times: bool) -> Value {
    Value::Array(
        reports
            .iter()
            .enumerate()
            .map(|(w, r)| {
                let mut q = QueueStats::default();
                for s in &r.queue_stats {
                    q.add(s);
                }
                let drops: serde_json::Map<String, Value> = DropReason::all()
                    .into_iter()
                    .map(|d| (d.name().to_string(), json!(r.drops.get(d))))
                    .collect();
                let nfs: serde_json::Map<String, Value> = r
                    .nf_counters
                    .iter()
                    .map(|(n, c)| (n.clone(), json!(c)))
                    .collect();
                let mut v = json!({
                    "worker": w,
                    "packets_rx": q.rx_packets,
                    "packets_tx": q.wire_tx_frames,
                    "bytes_rx": q.rx_bytes,
                    "bytes_tx": q.tx_bytes,
                    "drops": drops,
                    "rx_nombuf": q.rx_nombuf,
                    "rx_missed": q.rx_missed,
                    "bursts": r.bursts,
                    "idle_polls": r.idle_polls,
                    "nfs": nfs,
                });
                if host_times {
                    v["busy_s"] = json!(r.busy_s);
                    v["active_s"] = json!(r.active_s);
                }
                v
            })
            .collect(),
    )
}

/// The network functions' counters merged over the workers, one object per function name
/// (the summary's `nfs`).
pub fn nf_counters(reports: &[WorkerReport]) -> Value {
    let mut merged: Vec<(&str, Counters)> = Vec::new();
    for (name, c) in reports.iter().flat_map(|r| &r.nf_counters) {
        match merged.iter_mut().find(|(n, _)| n == name) {
            Some((_, m)) => m.merge(c),
            None => merged.push((name, c.clone())),
        }
    }
    Value::Object(
        merged
            .into_iter()
            .map(|(n, c)| (n.to_string(), json!(c)))
            .collect(),
    )
}

/// Fails the run when a network function could not do what it must at the end (a flow
/// counter's dump it could not write): its results are lost, so the run must not look
/// successful.
pub fn nf_output_errors(reports: &[WorkerReport]) -> Result<(), RunError> {
    let errors: Vec<&str> = reports
        .iter()
        .flat_map(|r| &r.nf_errors)
        .map(String::as_str)
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(RunError::Output(format!(
            "{}; the run's results are incomplete, so it failed",
            errors.join("; ")
        )))
    }
}

/// The counter keys of the foundation that every driver's summary carries, under names that never
/// change: `mode`, `workers`, packet/byte counts, `drops` (every reason, plus the NIC's `rx_missed`
/// and `pcie_overrun`), ring and descriptor counters, `elapsed_s`, and `mpps`/`gbps` computed over
/// `rate_secs`.
pub fn counter_keys(
    cfg: &RunConfig,
    q: &QueueStats,
    drops: &DropCounts,
    elapsed: f64,
    rate_secs: f64,
) -> serde_json::Map<String, Value> {
    let mut drops_obj: serde_json::Map<String, Value> = DropReason::all()
        .into_iter()
        .map(|r| (r.name().to_string(), json!(drops.get(r))))
        .collect();
    drops_obj.insert("rx_missed".into(), json!(q.rx_missed));
    drops_obj.insert("pcie_overrun".into(), json!(q.rx_pcie_overrun));
    let secs = rate_secs.max(1e-9);
    let v = json!({
        "mode": cfg.datapath.mode.as_str(),
        "workers": cfg.run.workers,
        "packets_rx": q.rx_packets,
        "packets_tx": q.wire_tx_frames,
        "bytes_rx": q.rx_bytes,
        "bytes_tx": q.tx_bytes,
        "drops": drops_obj,
        "rx_primary": q.rx_primary,
        "rx_secondary": q.rx_secondary,
        "rx_nombuf": q.rx_nombuf,
        "rx_missed": q.rx_missed,
        "rx_oversize": q.rx_oversize,
        "desc_errors": q.desc_errors,
        "tx_full": q.tx_full,
        "elapsed_s": elapsed,
        "mpps": q.wire_tx_frames as f64 / secs / 1e6,
        "gbps": q.tx_bytes as f64 * 8.0 / secs / 1e9,
    });
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// Prints a human-readable summary (stderr when JSON goes to stdout).
pub fn print_summary(s: &Value, to: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        to,
        "summary: mode {} workers {}{}",
        s["mode"],
        s["workers"],
        match s["stopped_by"].as_str() {
            Some(r) => format!(", stopped by {r}"),
            None => String::new(),
        }
    )?;
    let secs = s["elapsed_s"].as_f64().unwrap_or(0.0).max(1e-9);
    let per_s = |k: &str| s[k].as_u64().unwrap_or(0) as f64 / secs;
    let clock = s["clock"].as_str().unwrap_or("wall");
    writeln!(
        to,
        "  packets rx {} tx {}  bytes rx {} tx {}  in {:.3} s ({} time)",
        s["packets_rx"],
        s["packets_tx"],
        s["bytes_rx"],
        s["bytes_tx"],
        secs,
        if clock == "virtual" {
            "model"
        } else {
            "wall-clock"
        },
    )?;
    writeln!(
        to,
        "  rx {:.3} Mpps {:.2} Gb/s | tx {:.3} Mpps {:.2} Gb/s (frame bytes without FCS, over \
         that {} time)",
        per_s("packets_rx") / 1e6,
        per_s("bytes_rx") * 8.0 / 1e9,
        per_s("packets_tx") / 1e6,
        per_s("bytes_tx") * 8.0 / 1e9,
        if clock == "virtual" {
            "model"
        } else {
            "wall-clock"
        },
    )?;
    if let Some(core) = s["mpps_per_worker_core"].as_f64() {
        let w = &s["wire_thread"];
        writeln!(
            to,
            "  per worker core: tx {core:.3} Mpps over {:.3} s of worker CPU time (thread CPU \
             clock){}",
            s["worker_cpu_s"].as_f64().unwrap_or(0.0),
            match (w["cpu_s"].as_f64(), w["on"].as_bool()) {
                (Some(c), _) => format!(
                    "; the tester thread (generator and checking sink) used {c:.3} s CPU, \
                     the port found its queue empty {} times{}",
                    w["rx_empty"],
                    match w["look_gap_limit_ms"].as_f64() {
                        Some(ring) if ring > 0.0 => format!(
                            "; the worker was away from the wire longer than the Rx ring lasts \
                             ({ring:.2} ms) {} times, longest {:.1} ms",
                            w["look_gaps"],
                            w["look_gap_max_ms"].as_f64().unwrap_or(0.0)
                        ),
                        _ => String::new(),
                    }
                ),
                (None, Some(false)) if s["workers"] == 1 && s["traffic"].is_object() => {
                    "; the generator and checking sink ran in the worker's thread".to_string()
                }
                _ => String::new(),
            }
        )?;
    }
    writeln!(
        to,
        "  payload from primary (nicmem) {} secondary (host, spilled) {}{}  rx_nombuf {}  rx_missed {}  desc_errors {}",
        s["rx_primary"],
        s["rx_secondary"],
        match s["nicmem"]["aliased"].as_bool() {
            Some(true) => "  nicmem aliased (payload bytes not kept)",
            Some(false) => "  nicmem not aliased",
            None => "",
        },
        s["rx_nombuf"],
        s["rx_missed"],
        s["desc_errors"]
    )?;
    if let Some(fs) = s.get("frame_size") {
        writeln!(
            to,
            "  traffic: frame size {} B  payload_mismatches {}  seq_lost {}",
            fs, s["payload_mismatches"], s["seq_lost"]
        )?;
    }
    let t = &s["traffic"];
    if t["nat_return"] == true {
        writeln!(
            to,
            "  NAT return traffic (NAT {}, return ratio {}): {} mappings learned ({} remapped)",
            t["nat_ip"].as_str().unwrap_or("?"),
            t["return_ratio"],
            t["forward"]["learned_mappings"],
            t["forward"]["remapped_mappings"],
        )?;
        for dir in ["forward", "return"] {
            let d = &t[dir];
            writeln!(
                to,
                "    {dir:<7} sent {} received {} lost {} duplicates {} reordered {} payload_mismatches {} translated_wrong {}",
                d["sent"],
                d["received"],
                d["seq_lost"],
                d["duplicates"],
                d["reordered"],
                d["payload_mismatches"],
                d["translated_wrong"],
            )?;
        }
        writeln!(
            to,
            "    return frames not sent (flow's mapping not learned yet): {}",
            t["return"]["not_sent_unlearned"]
        )?;
    }
    if s.get("pcie").is_some() {
        let pct = |v: &Value| 100.0 * v.as_f64().unwrap_or(0.0);
        writeln!(
            to,
            "  model ({} clock, {}): PCIe up {:.1} % ({:.1} B/packet) down {:.1} % ({:.1} B/packet) | \
             latency p50 {} p99 {} ns | bottleneck {}",
            s["clock"].as_str().unwrap_or("?"),
            s["profile"].as_str().unwrap_or("?"),
            pct(&s["pcie"]["upstream_util"]),
            s["pcie"]["upstream_bytes_per_packet"]
                .as_f64()
                .unwrap_or(0.0),
            pct(&s["pcie"]["downstream_util"]),
            s["pcie"]["downstream_bytes_per_packet"]
                .as_f64()
                .unwrap_or(0.0),
            s["latency_ns"]["p50"],
            s["latency_ns"]["p99"],
            s["bottleneck"].as_str().unwrap_or("?"),
        )?;
        writeln!(
            to,
            "  model: wire rx {:.2} tx {:.2} Gb/s L1 (offered {:.2}) | transmitted {:.3} Mpps {:.2} Gb/s with FCS over {} ns of the model's clock",
            s["wire"]["rx_gbps"].as_f64().unwrap_or(0.0),
            s["wire"]["tx_gbps"].as_f64().unwrap_or(0.0),
            s["offered_gbps"].as_f64().unwrap_or(0.0),
            s["throughput_mpps"].as_f64().unwrap_or(0.0),
            s["throughput_gbps"].as_f64().unwrap_or(0.0),
            s["virtual_time_ns"],
        )?;
    }
    let n = &s["nf_cycles"];
    if let Some(each) = n["each"].as_array() {
        let parts: Vec<String> = each
            .iter()
            .map(|e| format!("{} {}", e["nf"].as_str().unwrap_or("?"), e["cycles"]))
            .collect();
        let from = match n["source"].as_str() {
            Some("measured") => "measured on this machine (run.nf_cycles = \"measured\")",
            _ => "from the profile's host.cycles.nf",
        };
        writeln!(
            to,
            "  model CPU: NF cycles per packet {from}: {} = {}",
            parts.join(" + "),
            n["total"]
        )?;
    }
    let p = &s["pcap"];
    if p.is_object() {
        let reasons =
            dataplane::pcap::PcapDrop::ALL.map(|r| format!("{} {}", r.as_str(), p[r.as_str()]));
        writeln!(
            to,
            "  rx pcap: {} records, {} frames delivered, not delivered: {}",
            p["records"],
            p["frames"],
            reasons.join(", ")
        )?;
        if let Some(e) = p["first_error"].as_str() {
            writeln!(to, "    first record not delivered: {e}")?;
        }
    }
    if let Some(nfs) = s["nfs"].as_object() {
        for (name, c) in nfs {
            for line in nf_essentials(name, c) {
                writeln!(to, "  {line}")?;
            }
        }
    }
    writeln!(to, "  drops: {}", nf_drops(s))?;
    Ok(())
}

/// Backends listed one per line in the text summary; more are summed up in one line.
const SUMMARY_BACKEND_LINES: usize = 64;

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// The nonzero drops of a `drops` object (a function's or the run's), `reason=n ...` (or
/// `none`).
fn nf_drops(c: &Value) -> String {
    let d: Vec<String> = c["drops"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        })
        .unwrap_or_default();
    if d.is_empty() {
        "none".into()
    } else {
        d.join(" ")
    }
}

/// What an operator reads first about a function, from its counters in the summary's JSON
/// (`name` as the summary keys it): a line or a few (a load balancer's per-backend table).
pub fn nf_essentials(name: &str, c: &Value) -> Vec<String> {
    let canonical = nfs::lookup(name).map_or(name, |s| s.name);
    match canonical {
        "lb" => {
            let mut out = vec![format!(
                "{name}: {} VIP packets, {} new flows, {} active flows, {} remapped, drops {}",
                n(c, "vip_packets"),
                n(c, "new_flows"),
                n(c, "active_flows"),
                n(c, "remapped"),
                nf_drops(c)
            )];
            if let Some(b) = c["backends"].as_object() {
                let b = by_address(b);
                out.push(format!(
                    "  {:<16} {:<9} {:>6} {:>12} {:>12} {:>12}",
                    "backend", "state", "weight", "packets", "new_flows", "active_flows"
                ));
                for (addr, r) in b.iter().take(SUMMARY_BACKEND_LINES) {
                    let r = *r;
                    out.push(format!(
                        "  {addr:<16} {:<9} {:>6} {:>12} {:>12} {:>12}",
                        r["state"].as_str().unwrap_or("?"),
                        n(r, "weight"),
                        n(r, "packets"),
                        n(r, "new_flows"),
                        n(r, "active_flows"),
                    ));
                }
                if b.len() > SUMMARY_BACKEND_LINES {
                    let rest: u64 = b
                        .iter()
                        .skip(SUMMARY_BACKEND_LINES)
                        .map(|(_, r)| n(r, "packets"))
                        .sum();
                    out.push(format!(
                        "  ... {} more backends with {rest} packets (--json has them all)",
                        b.len() - SUMMARY_BACKEND_LINES
                    ));
                }
            }
            out
        }
        "nat" => vec![format!(
            "{name}: {} active sessions ({} created), {} translated, port_exhausted {}, \
             no_mapping {}, drops {}",
            n(c, "active_mappings"),
            n(c, "new_mappings"),
            n(c, "translations"),
            n(c, "port_exhausted"),
            n(c, "no_mapping"),
            nf_drops(c)
        )],
        "flow_counter" => vec![format!(
            "{name}: {} flows ({} new, {} expired, {} evicted), table_full {}",
            n(c, "flows"),
            n(c, "new_flows"),
            n(c, "expired"),
            n(c, "evicted"),
            n(c, "table_full")
        )],
        _ => {
            let counts: Vec<String> = c
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter(|(_, v)| v.as_u64().is_some_and(|x| x > 0))
                        .take(6)
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect()
                })
                .unwrap_or_default();
            vec![format!(
                "{name}: {}",
                if counts.is_empty() {
                    "no counts".to_string()
                } else {
                    counts.join(", ")
                }
            )]
        }
    }
}

/// The rows of a table keyed by address, in address order (JSON objects come sorted as text).
fn by_address(m: &serde_json::Map<String, Value>) -> Vec<(&str, &Value)> {
    let mut v: Vec<(&str, &Value)> = m.iter().map(|(k, v)| (k.as_str(), v)).collect();
    v.sort_by_key(|(k, _)| (k.parse::<std::net::Ipv4Addr>().ok(), k.to_string()));
    v
}

/// A function's essentials in a few words, for the live line.
pub fn nf_live(name: &str, c: &Value) -> String {
    let canonical = nfs::lookup(name).map_or(name, |s| s.name);
    match canonical {
        "lb" => {
            let mut s = format!("{name} flows {}", n(c, "active_flows"));
            if let Some(b) = c["backends"].as_object() {
                let b = by_address(b);
                if b.len() <= 4 {
                    for (addr, r) in &b {
                        s.push_str(&format!(" {addr} {}", n(r, "packets")));
                    }
                } else {
                    let (mut lo, mut hi) = ((u64::MAX, ""), (0, ""));
                    for (addr, r) in &b {
                        let p = n(r, "packets");
                        if p < lo.0 {
                            lo = (p, addr);
                        }
                        if p >= hi.0 {
                            hi = (p, addr);
                        }
                    }
                    s.push_str(&format!(
                        ", {} backends: packets min {} ({}) max {} ({})",
                        b.len(),
                        lo.0,
                        lo.1,
                        hi.0,
                        hi.1
                    ));
                }
            }
            s
        }
        "nat" => format!(
            "{name} sessions {} exhausted {}",
            n(c, "active_mappings"),
            n(c, "port_exhausted")
        ),
        "flow_counter" => format!("{name} flows {}", n(c, "flows")),
        _ => String::new(),
    }
}

/// Prints the config's warnings ([`RunConfig::warnings`]) to stderr and returns them (for the
/// summary's `warnings`).
pub fn print_warnings(cfg: &RunConfig, path: &std::path::Path) -> Vec<String> {
    let warnings = cfg.warnings(path);
    for w in &warnings {
        eprintln!("warning: config {}: {w}", path.display());
    }
    warnings
}
