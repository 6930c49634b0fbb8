//! The analytical breakdown for people and programs: a table ([`render_text`], `dataplane
//! model`) and JSON ([`to_json`], `dataplane model --json`).

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::breakdown::{Breakdown, UpDown};
use super::pcie::PerPacket;

fn mpps(pps: f64) -> String {
    if pps.is_finite() {
        format!("{:.3} Mpps", pps / 1e6)
    } else {
        "unlimited".to_string()
    }
}

/// The breakdown as a human-readable table (for `dataplane model`).
pub fn render_text(b: &Breakdown) -> String {
    let mut s = String::new();
    let w = &b.tx_wqe;
    let _ = writeln!(s, "{}", b.profile_name);
    let _ = writeln!(
        s,
        "mode {} ({}), F = {} B (L = {} B), H = {} B, I = {} B (inlined {} B)",
        b.mode,
        b.mode.paper_name(),
        b.frame_len,
        b.dma_len,
        b.split_offset,
        b.inline_size,
        w.inline_bytes
    );
    let _ = writeln!(
        s,
        "Rx WQE {} B; Tx WQE {} DS, {} WQEBB, {} B fetched",
        b.rx_wqe_size, w.ds, w.wqebbs, w.fetched_bytes
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<12} {:>10} {:>10}   (bytes per packet)",
        "item", "up", "down"
    );
    for it in &b.items {
        let _ = writeln!(
            s,
            "{:<12} {:>10} {:>10}",
            it.name,
            format!("{:.2}", it.cost.up.to_f64()),
            format!("{:.2}", it.cost.down.to_f64())
        );
    }
    let _ = writeln!(
        s,
        "{:<12} {:>10} {:>10}",
        "total",
        format!("{:.2}", b.total.up.to_f64()),
        format!("{:.2}", b.total.down.to_f64())
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "PCIe capacity per direction: raw {:.3}, spec {:.2}, calibrated {:.2}, profile {:.2} Gb/s",
        b.raw_gbps, b.capacity_spec_gbps, b.capacity_calibrated_gbps, b.capacity_gbps
    );
    let _ = writeln!(
        s,
        "line rate {} Gb/s = {}; offered {} Gb/s = {}",
        b.line_rate_gbps,
        mpps(b.line_rate_pps),
        b.offered_gbps,
        mpps(b.offered_pps)
    );
    let _ = writeln!(
        s,
        "PCIe-bound rate: spec {}, calibrated {}, profile {}; DMA-op bound {}",
        mpps(b.pcie_bound_pps_spec),
        mpps(b.pcie_bound_pps_calibrated),
        mpps(b.pcie_bound_pps),
        mpps(b.dma_bound_pps)
    );
    let _ = writeln!(
        s,
        "PCIe demand at offered load: up {:.2} Gb/s, down {:.2} Gb/s",
        b.demand_gbps.up, b.demand_gbps.down
    );
    for (name, u) in [
        ("spec", b.utilization_spec),
        ("calibrated", b.utilization_calibrated),
        ("profile", b.utilization),
        ("raw", b.utilization_raw),
    ] {
        let _ = writeln!(
            s,
            "utilization ({name:<10}): up {:6.1} %, down {:6.1} %",
            100.0 * u.up,
            100.0 * u.down
        );
    }
    let _ = writeln!(
        s,
        "DMA ops per packet: {} reads, {} writes; nicmem {} B, host data {} B per packet",
        b.dma_reads, b.dma_writes, b.nicmem_bytes, b.host_data_bytes
    );
    if w.cpu_nicmem_read > 0 {
        let _ = writeln!(
            s,
            "warning: the CPU copies {} B per packet out of nicmem to fill the inline header \
             (split at >= {} B to avoid it)",
            w.cpu_nicmem_read, w.inline_bytes
        );
    }
    let _ = writeln!(
        s,
        "bound by: {} at {}",
        b.bound.as_str(),
        mpps(b.achievable_pps)
    );
    s
}

fn finite_or_null(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

/// The breakdown as JSON (for `dataplane model --json`); unlimited bounds are `null`.
pub fn to_json(b: &Breakdown) -> Value {
    let ud = |u: UpDown| json!({ "up": u.up, "down": u.down });
    let pp = |p: &PerPacket| {
        json!({
            "up_bytes": p.up.to_f64(),
            "down_bytes": p.down.to_f64(),
            "up_tlps": p.up_tlps.to_f64(),
            "down_tlps": p.down_tlps.to_f64(),
        })
    };
    let items: Vec<Value> = b
        .items
        .iter()
        .map(|i| {
            let mut v = pp(&i.cost);
            v["name"] = json!(i.name);
            v
        })
        .collect();
    json!({
        "profile": b.profile_name,
        "mode": b.mode.as_str(),
        "paper_name": b.mode.paper_name(),
        "frame_len": b.frame_len,
        "dma_len": b.dma_len,
        "split_offset": b.split_offset,
        "inline_size": b.inline_size,
        "rx_wqe_size": b.rx_wqe_size,
        "tx_wqe": serde_json::to_value(b.tx_wqe).expect("plain struct"),
        "items": items,
        "total": pp(&b.total),
        "dma_reads_per_packet": b.dma_reads.to_f64(),
        "dma_writes_per_packet": b.dma_writes.to_f64(),
        "nicmem_bytes_per_packet": b.nicmem_bytes,
        "host_data_bytes_per_packet": b.host_data_bytes,
        "capacity_gbps": {
            "raw": b.raw_gbps,
            "spec": b.capacity_spec_gbps,
            "calibrated": b.capacity_calibrated_gbps,
            "profile": b.capacity_gbps,
        },
        "line_rate_gbps": b.line_rate_gbps,
        "offered_gbps": b.offered_gbps,
        "line_rate_pps": b.line_rate_pps,
        "offered_pps": b.offered_pps,
        "pcie_bound_pps": {
            "spec": b.pcie_bound_pps_spec,
            "calibrated": b.pcie_bound_pps_calibrated,
            "profile": b.pcie_bound_pps,
        },
        "dma_bound_pps": finite_or_null(b.dma_bound_pps),
        "demand_gbps": ud(b.demand_gbps),
        "utilization": {
            "spec": ud(b.utilization_spec),
            "calibrated": ud(b.utilization_calibrated),
            "profile": ud(b.utilization),
            "raw": ud(b.utilization_raw),
        },
        "bound": b.bound.as_str(),
        "achievable_pps": finite_or_null(b.achievable_pps),
    })
}
