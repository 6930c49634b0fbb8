//! The embedded traffic of `dataplane run`: the `pktgen` generator as the wire's source and its
//! checking sink as the wire's destination, configured from the run config's `[traffic]` table.
//! With `traffic.nat_return = true` the source also sends NAT return traffic for the flows whose
//! mapping the sink learned, and the sink checks both directions ([`pktgen::nat_traffic`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dataplane::link::{FrameSink, FrameSource};
use pktgen::nat_traffic::{NatBidirHandles, NatBidirReport, NatReturnConfig, nat_bidir};
use pktgen::{CheckingSink, GenCounters, Generator, GeneratorConfig, SinkCounters};
use serde_json::{Value, json};

pub use pktgen::TrafficReport;

/// The generator and sink of a run, and the handles to read them afterwards.
pub struct Traffic {
    source: Option<Box<dyn FrameSource>>,
    sink: Option<Box<dyn FrameSink>>,
    gen_counters: Arc<GenCounters>,
    sink_counters: Arc<SinkCounters>,
    nat: Option<NatBidirHandles>,
    stop: Arc<AtomicBool>,
}

impl Traffic {
    /// Builds the traffic from `[traffic]`. `packets` (from `run.packets`, when non-zero) sets
    /// the frame count; with neither a count nor a duration the traffic has no end, which is an
    /// error unless `endless` (the run is stopped from outside). Errors are `(dotted key,
    /// message)`.
    pub fn from_config(
        table: &toml::Table,
        packets: u64,
        duration_s: f64,
        max_frame: usize,
    ) -> Result<Self, (String, String)> {
        Self::with_nat_return(table, packets, duration_s, max_frame, None, false)
    }

    /// Like [`Traffic::from_config`] (traffic without end allowed when `endless`), with NAT-aware
    /// return traffic when `nat` is given
    /// ([`pktgen::nat_traffic::nat_bidir`]): the source interleaves return frames for learned flows
    /// with the forward frames, `packets` counts the frames of both directions, and the sink
    /// splits the directions.
    pub fn with_nat_return(
        table: &toml::Table,
        packets: u64,
        duration_s: f64,
        max_frame: usize,
        nat: Option<&NatReturnConfig>,
        endless: bool,
    ) -> Result<Self, (String, String)> {
        let mut cfg = generator_config(table, max_frame)?;
        if packets > 0 {
            cfg.count = Some(packets);
        }
        if cfg.count.is_none() && duration_s <= 0.0 && !endless {
            return Err((
                "run.packets".into(),
                "0 (unlimited) with run.duration_s = 0 would run forever; set one of them".into(),
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let gen_err = |e: pktgen::ConfigError| (format!("traffic.{}", e.key), e.to_string());
        if let Some(n) = nat {
            let (source, sink, handles) = nat_bidir(&cfg, n).map_err(gen_err)?;
            let source = source.with_stop_flag(stop.clone());
            return Ok(Self {
                gen_counters: handles.forward_gen.clone(),
                sink_counters: handles.forward_sink.clone(),
                source: Some(Box::new(source)),
                sink: Some(Box::new(sink)),
                nat: Some(handles),
                stop,
            });
        }
        let sink = CheckingSink::for_generator(&cfg);
        let source = Generator::new(cfg)
            .map_err(gen_err)?
            .with_stop_flag(stop.clone());
        Ok(Self {
            gen_counters: source.counters(),
            sink_counters: sink.counters(),
            source: Some(Box::new(source)),
            sink: Some(Box::new(sink)),
            nat: None,
            stop,
        })
    }

    /// The generator, as the wire's source (once).
    pub fn take_source(&mut self) -> Option<Box<dyn FrameSource>> {
        self.source.take()
    }

    /// The checking sink, as the wire's destination (once).
    pub fn take_sink(&mut self) -> Option<Box<dyn FrameSink>> {
        self.sink.take()
    }

    /// Stops the generator (end of `--duration`).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Sent vs received, payload checks, loss; with NAT return traffic, both directions summed.
    /// Exact once the run has drained.
    pub fn report(&self) -> TrafficReport {
        match &self.nat {
            Some(h) => h.report().total(),
            None => pktgen::report(&self.gen_counters, &self.sink_counters),
        }
    }

    /// The per-direction report of NAT return traffic, if the run has it.
    pub fn nat_report(&self) -> Option<NatBidirReport> {
        self.nat.as_ref().map(NatBidirHandles::report)
    }

    /// The NAT return settings, if the run has them.
    pub fn nat_config(&self) -> Option<NatReturnConfig> {
        self.nat.as_ref().map(|h| h.config)
    }
}

/// Parses and checks the generator's `[traffic]` table (without the run's keys, see
/// [`crate::config::RunConfig::generator_table`]) for a port whose frames carry at most
/// `max_frame` bytes. Frame sizes are checked against the range the port takes, the protocol's
/// smallest frame up to `max_frame` plus the 4 B FCS, before the generator's own wider range.
/// Errors are `(dotted key, message)`.
pub fn generator_config(
    table: &toml::Table,
    max_frame: usize,
) -> Result<GeneratorConfig, (String, String)> {
    let cfg: GeneratorConfig = serde_path_to_error::deserialize(toml::Value::Table(table.clone()))
        .map_err(|e| {
            (
                format!("traffic.{}", e.path())
                    .trim_end_matches('.')
                    .to_string(),
                e.inner().message().trim().to_string(),
            )
        })?;
    let (min, max) = (cfg.min_frame_size(), max_frame as u32 + 4);
    let range = format!(
        "allowed {min}..={max} B including the 4 B FCS ({} frames need {min} B; \
         vnic.max_frame = {max_frame} B without FCS)",
        format!("{:?}", cfg.proto).to_uppercase()
    );
    match &cfg.size_mix {
        None if !(min..=max).contains(&cfg.frame_size) => {
            return Err((
                "traffic.frame_size".into(),
                format!("{} B out of range; {range}", cfg.frame_size),
            ));
        }
        Some(m) if m.entries.iter().any(|e| !(min..=max).contains(&e.0)) => {
            return Err((
                "traffic.size_mix".into(),
                format!("`{m}` has sizes out of range; {range}"),
            ));
        }
        _ => {}
    }
    cfg.validate()
        .map_err(|e| (format!("traffic.{}", e.key), e.to_string()))?;
    Ok(cfg)
}

/// The report as JSON (the run summary's `traffic` object).
pub fn report_json(r: &TrafficReport) -> Value {
    let mut m = counts_json(r);
    m.insert("frame_size".into(), json!(r.frame_size));
    m.insert("not_ours".into(), json!(r.not_ours));
    Value::Object(m)
}

/// One direction of NAT return traffic as JSON.
fn direction_json(r: &TrafficReport) -> serde_json::Map<String, Value> {
    let mut m = counts_json(r);
    m.insert("stream".into(), json!(r.stream));
    m
}

/// The frame counts every traffic report carries.
fn counts_json(r: &TrafficReport) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    for (k, v) in [
        ("sent", r.sent),
        ("sent_bytes", r.sent_bytes),
        ("received", r.received),
        ("received_unique", r.received_unique),
        ("seq_lost", r.seq_lost),
        ("payload_mismatches", r.payload_mismatches),
        ("duplicates", r.duplicates),
        ("reordered", r.reordered),
    ] {
        m.insert(k.into(), json!(v));
    }
    m
}

/// Adds the NAT return traffic keys to the summary's `traffic` object (whose counts are then
/// both directions summed): `nat_return`, `return_ratio`, `nat_ip`, `translated_wrong` (both
/// directions), and `forward` / `return` with each direction's `sent`, `received`,
/// `received_unique`, `seq_lost`, `duplicates`, `reordered`, `payload_mismatches` and
/// `translated_wrong`; `forward` adds `learned_mappings` and `remapped_mappings`, `return` adds
/// `translated_ok` and `not_sent_unlearned` (return frames due for a flow whose mapping was not
/// learned yet; a forward frame took their place).
pub fn add_nat_json(traffic: &mut Value, cfg: &NatReturnConfig, r: &NatBidirReport) {
    let mut fwd = direction_json(&r.forward);
    fwd.insert("translated_wrong".into(), json!(r.forward_translated_wrong));
    fwd.insert("learned_mappings".into(), json!(r.learned));
    fwd.insert("remapped_mappings".into(), json!(r.remapped));
    let mut ret = direction_json(&r.ret);
    ret.insert("translated_ok".into(), json!(r.return_translated_ok));
    ret.insert("translated_wrong".into(), json!(r.return_translated_wrong));
    ret.insert("not_sent_unlearned".into(), json!(r.return_unlearned));
    traffic["nat_return"] = json!(true);
    traffic["return_ratio"] = json!(cfg.ratio);
    traffic["nat_ip"] = json!(cfg.nat_ip.to_string());
    traffic["translated_wrong"] = json!(r.translated_wrong());
    traffic["forward"] = Value::Object(fwd);
    traffic["return"] = Value::Object(ret);
}
