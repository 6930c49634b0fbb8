//! The embedded traffic of `dataplane run`: the `pktgen` generator as the wire's source and its
//! checking sink as the wire's destination, configured from the run config's `[traffic]` table.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dataplane::wire::{FrameSink, FrameSource};
use pktgen::{CheckingSink, GenCounters, Generator, GeneratorConfig, SinkCounters};
use serde_json::{Value, json};

pub use pktgen::TrafficReport;

/// The generator and sink of a run, and the handles to read them afterwards.
pub struct Traffic {
    source: Option<Generator>,
    sink: Option<CheckingSink>,
    gen_counters: Arc<GenCounters>,
    sink_counters: Arc<SinkCounters>,
    stop: Arc<AtomicBool>,
}

impl Traffic {
    /// Builds the traffic from `[traffic]`. `packets` (from `run.packets`, when non-zero) sets
    /// the frame count. Errors are `(dotted key, message)`.
    pub fn from_config(
        table: &toml::Table,
        packets: u64,
        duration_s: f64,
        max_frame: usize,
    ) -> Result<Self, (String, String)> {
        let mut cfg: GeneratorConfig =
            serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
                (
                    format!("traffic.{}", e.path())
                        .trim_end_matches('.')
                        .to_string(),
                    e.inner().message().trim().to_string(),
                )
            })?;
        if packets > 0 {
            cfg.count = Some(packets);
        }
        if cfg.count.is_none() && duration_s <= 0.0 {
            return Err((
                "run.packets".into(),
                "0 (unlimited) with run.duration_s = 0 would run forever; set one of them".into(),
            ));
        }
        cfg.validate()
            .map_err(|e| (format!("traffic.{}", e.key), e.to_string()))?;
        let len = cfg.frame_size as usize - 4;
        if len > max_frame {
            return Err((
                "traffic.frame_size".into(),
                format!(
                    "{} B frames carry {len} B, more than vnic.max_frame = {max_frame}; allowed up to {}",
                    cfg.frame_size,
                    max_frame + 4
                ),
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let sink = CheckingSink::for_generator(&cfg);
        let source = Generator::new(cfg)
            .map_err(|e| (format!("traffic.{}", e.key), e.to_string()))?
            .with_stop_flag(stop.clone());
        Ok(Self {
            gen_counters: source.counters(),
            sink_counters: sink.counters(),
            source: Some(source),
            sink: Some(sink),
            stop,
        })
    }

    /// The generator, as the wire's source (once).
    pub fn take_source(&mut self) -> Option<Box<dyn FrameSource>> {
        self.source
            .take()
            .map(|g| Box::new(g) as Box<dyn FrameSource>)
    }

    /// The checking sink, as the wire's destination (once).
    pub fn take_sink(&mut self) -> Option<Box<dyn FrameSink>> {
        self.sink.take().map(|s| Box::new(s) as Box<dyn FrameSink>)
    }

    /// Stops the generator (end of `--duration`).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Sent vs received, payload checks, loss. Exact once the run has drained.
    pub fn report(&self) -> TrafficReport {
        pktgen::report(&self.gen_counters, &self.sink_counters)
    }
}

/// The report as JSON (the run summary's `traffic` object).
pub fn report_json(r: &TrafficReport) -> Value {
    json!({
        "frame_size": r.frame_size,
        "sent": r.sent,
        "sent_bytes": r.sent_bytes,
        "received": r.received,
        "received_unique": r.received_unique,
        "seq_lost": r.seq_lost,
        "payload_mismatches": r.payload_mismatches,
        "duplicates": r.duplicates,
        "reordered": r.reordered,
        "not_ours": r.not_ours,
    })
}
