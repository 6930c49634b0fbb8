//! The run summary every driver prints: the counter keys under names that never change
//! ([`counter_keys`]), the network functions' counters merged over the workers, the check that
//! their outputs were written ([`nf_output_errors`]), and the text form ([`print_summary`]).

use dataplane::runloop::WorkerReport;
use dataplane::{Counters, DropCounts, DropReason, QueueStats};
use serde_json::{Value, json};

use super::options::RunError;
use crate::config::RunConfig;

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
    writeln!(to, "summary: mode {} workers {}", s["mode"], s["workers"])?;
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
    let drops: Vec<String> = s["drops"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        })
        .unwrap_or_default();
    writeln!(
        to,
        "  drops: {}",
        if drops.is_empty() {
            "none".to_string()
        } else {
            drops.join(" ")
        }
    )?;
    Ok(())
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
