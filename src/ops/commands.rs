//! The telemetry commands of a run, in DPDK's data model ([`dataplane::telemetry`]), the same on
//! the virtual NIC's socket and under EAL's telemetry on DPDK ports.
//!
//! DPDK's own (on the virtual NIC; EAL answers them for DPDK ports): `/ethdev/list`,
//! `/ethdev/stats,<port>` and `/ethdev/xstats,<port>`, in DPDK's shapes (`ipackets`,
//! `opackets`, ..., `q_ipackets` per queue; `rx_good_packets`, ... plus the driver's own
//! counters). nmdp's: `/nmdp/summary`, `/nmdp/workers` (per worker, as arrays indexed by
//! worker), `/nmdp/pipeline`, `/nmdp/nf,<name|index>[,<worker>]` (a function's counters,
//! merged over the workers or of one worker, groups flattened as `group/name`, tables as one
//! array per column), `/nmdp/lb/backends`, `/nmdp/nat/sessions[,<max>]` (what the NAT's
//! `sessions` command answers), `/nmdp/nat/pool` and `/nmdp/nat/lookup,<ip>,<port>` (who holds
//! an outside endpoint), `/nmdp/health` (healthy, draining, unhealthy or stopping, and
//! why: [`super::health`]), and the commands that change the run: `/nmdp/drain[,<seconds>]`
//! (instance drain), `/nmdp/lb/<verb>,...`
//! (`add`, `remove`, `drain`, `enable`, `disable`, `weight`), `/nmdp/nat/pool/<verb>,<ip>`
//! (`add`, `drain`, `remove`: NAT outside addresses in and out of service) and the generic
//! `/nmdp/nf/command,<name|index>,<verb>[,<arg>...]`, through which any function's run-time
//! commands are reached.
//!
//! Errors answer `"error: ..."` (a string reply, which DPDK's protocol allows), saying what is
//! wrong and what is allowed; an unknown command answers `null`, as DPDK does.

use std::sync::Arc;

use dataplane::telemetry::server::{Command, Handler};
use dataplane::telemetry::{TelArray, TelData, TelDict, TelValue};
use dataplane::{CounterValue, Counters, DropReason, NfCommand, QueueStats};

use super::RunView;

/// Queue counters per port in `/ethdev/stats` (DPDK's `RTE_ETHDEV_QUEUE_STAT_CNTRS`).
pub const QUEUE_STAT_COUNTERS: usize = 16;
/// Sessions `/nmdp/nat/sessions` lists when no maximum is given.
pub const DEFAULT_SESSIONS: usize = 100;

/// The LB commands that change a backend, with their parameters (for the help).
const LB_CHANGES: [(&str, &str); 6] = [
    ("add", "Adds a backend. Parameters: address[,weight]"),
    (
        "remove",
        "Removes a backend; its flows move. Parameters: address",
    ),
    (
        "drain",
        "Weight 0: no new flows, flows stay. Parameters: address",
    ),
    ("enable", "Enables a backend again. Parameters: address"),
    (
        "disable",
        "Disables a backend; its flows move. Parameters: address",
    ),
    (
        "weight",
        "Sets a backend's weight. Parameters: address,weight",
    ),
];

/// The NAT commands that change its outside pool, with their help.
const NAT_POOL_CHANGES: [(&str, &str); 3] = [
    (
        "add",
        "Puts a spare NAT address in service. Parameters: address",
    ),
    (
        "drain",
        "No new subscribers on a NAT address. Parameters: address",
    ),
    (
        "remove",
        "Takes a NAT address out; its sessions end. Parameters: address",
    ),
];

/// Every command of a run (DPDK's built-ins `/`, `/info` and `/help` aside).
pub fn commands() -> Vec<Command> {
    let mut c = vec![
        Command::query("/ethdev/list", "The port ids. Takes no parameters"),
        Command::query(
            "/ethdev/stats",
            "A port's basic counters. Parameters: int port_id",
        ),
        Command::query(
            "/ethdev/xstats",
            "A port's extended counters. Parameters: int port_id",
        ),
    ];
    c.extend(nmdp_commands());
    c
}

/// nmdp's own commands (what DPDK runs register with EAL's telemetry).
pub fn nmdp_commands() -> Vec<Command> {
    let mut c = vec![
        Command::query("/nmdp/summary", "The run's totals. Takes no parameters"),
        Command::query(
            "/nmdp/workers",
            "Per worker: rates, busy %, drops. Takes no parameters",
        ),
        Command::query(
            "/nmdp/pipeline",
            "The pipeline's functions. Takes no parameters",
        ),
        Command::query(
            "/nmdp/nf",
            "A function's counters. Parameters: name|index[,worker]",
        ),
        Command::query(
            "/nmdp/lb/backends",
            "The LB's backends. Takes no parameters",
        ),
        Command::query("/nmdp/nat/sessions", "NAT sessions. Parameters: [max]"),
        Command::query(
            "/nmdp/health",
            "Fit to announce? Status and reasons. Takes no parameters",
        ),
        Command::change(
            "/nmdp/drain",
            "Drain, then stop the run. Parameters: [seconds]",
        ),
        Command::change(
            "/nmdp/nf/command",
            "A function's command. Parameters: name|index,verb[,arg...]",
        ),
    ];
    for (verb, help) in LB_CHANGES {
        c.push(Command::change(&format!("/nmdp/lb/{verb}"), help));
    }
    c.extend(nat_commands());
    c
}

/// The NAT's pool and lookup commands.
fn nat_commands() -> Vec<Command> {
    let mut c = vec![
        Command::query(
            "/nmdp/nat/pool",
            "NAT outside addresses and their state. Takes no parameters",
        ),
        Command::query(
            "/nmdp/nat/lookup",
            "Who holds a NAT outside endpoint. Parameters: address,port",
        ),
    ];
    for (verb, help) in NAT_POOL_CHANGES {
        c.push(Command::change(&format!("/nmdp/nat/pool/{verb}"), help));
    }
    c
}

/// The reply to a NAT pool or lookup command, `None` for other commands.
fn nat_answer(view: &RunView, cmd: &str, params: Option<&str>) -> Option<Result<TelData, String>> {
    let args: Vec<&str> = params.map(|p| p.split(',').collect()).unwrap_or_default();
    Some(match cmd {
        "/nmdp/nat/pool" => nf_rows(
            view,
            cmd,
            "nat",
            &NfCommand::new("pool", &[]),
            "address",
            usize::MAX,
        ),
        "/nmdp/nat/lookup" => match args.as_slice() {
            [ip, port] => nf_rows(
                view,
                cmd,
                "nat",
                &NfCommand::new("lookup", &[ip, port]),
                "holder",
                usize::MAX,
            ),
            _ => Err(
                "give the outside address and port, e.g. /nmdp/nat/lookup,192.0.2.1,40000".into(),
            ),
        },
        _ => {
            let verb = cmd.strip_prefix("/nmdp/nat/pool/")?;
            if !NAT_POOL_CHANGES.iter().any(|(v, _)| *v == verb) {
                return None;
            }
            let mut a = vec![verb];
            a.extend(args);
            view.nf_index("nat").and_then(|i| {
                let c = view.nf_command(i, &NfCommand::new("pool", &a))?;
                Ok(TelData::Dict(flatten(&c)))
            })
        }
    })
}

/// The handler answering [`commands`] from `view`.
pub fn handler(view: Arc<RunView>) -> Arc<Handler> {
    Arc::new(move |cmd: &str, params: Option<&str>| answer(&view, cmd, params))
}

/// The reply to `cmd` with `params`.
pub fn answer(view: &RunView, cmd: &str, params: Option<&str>) -> TelData {
    let reply = match cmd {
        "/ethdev/list" => Ok(TelData::Array(TelArray::Int(
            (0..view.info.ports.len() as i32).collect(),
        ))),
        "/ethdev/stats" => port(view, params).map(|p| ethdev_stats(view, p)),
        "/ethdev/xstats" => port(view, params).and_then(|p| ethdev_xstats(view, p)),
        "/nmdp/summary" => Ok(summary(view)),
        "/nmdp/workers" => Ok(workers(view)),
        "/nmdp/pipeline" => {
            let mut d = TelDict::new();
            d.array("name", TelArray::Str(view.info.pipeline.clone()));
            Ok(TelData::Dict(d))
        }
        "/nmdp/nf" => nf(view, params),
        "/nmdp/lb/backends" => nf_rows(
            view,
            cmd,
            "lb",
            &NfCommand::new("backends", &[]),
            "address",
            usize::MAX,
        ),
        "/nmdp/nat/sessions" => {
            let max = match params {
                None => Ok(DEFAULT_SESSIONS),
                Some(p) => p.parse::<usize>().map_err(|_| {
                    format!("`{p}` is not a number of sessions; give e.g. /nmdp/nat/sessions,50")
                }),
            };
            max.and_then(|m| {
                let m = m.min(dataplane::telemetry::MAX_ARRAY_ENTRIES);
                nf_rows(
                    view,
                    cmd,
                    "nat",
                    &NfCommand::new("sessions", &[&m.to_string()]),
                    "session",
                    m,
                )
            })
        }
        "/nmdp/nf/command" => nf_command(view, params),
        "/nmdp/health" => Ok(health(view)),
        "/nmdp/drain" => drain(view, params),
        _ if cmd.starts_with("/nmdp/nat/") => match nat_answer(view, cmd, params) {
            Some(r) => r,
            None => return TelData::Null,
        },
        _ => match cmd.strip_prefix("/nmdp/lb/") {
            Some(verb) if LB_CHANGES.iter().any(|(v, _)| *v == verb) => {
                let args: Vec<&str> = params.map(|p| p.split(',').collect()).unwrap_or_default();
                view.nf_index("lb")
                    .and_then(|i| view.nf_command(i, &NfCommand::new(verb, &args)))
                    .map(|c| TelData::Dict(flatten(&c)))
            }
            _ => return TelData::Null,
        },
    };
    reply.unwrap_or_else(TelData::error)
}

fn port(view: &RunView, params: Option<&str>) -> Result<usize, String> {
    let n = view.info.ports.len();
    match params.map(|p| p.trim().parse::<usize>()) {
        Some(Ok(p)) if p < n => Ok(p),
        _ => Err(format!(
            "give a port id, 0..{n} (e.g. /ethdev/stats,0); /ethdev/list lists them"
        )),
    }
}

/// Port `p`'s queue counters, one per worker (queue `i` is worker `i`'s).
fn port_queues(view: &RunView, p: usize) -> Vec<QueueStats> {
    view.snapshots()
        .iter()
        .map(|s| s.ports.get(p).copied().unwrap_or_default())
        .collect()
}

fn queue_array(qs: &[QueueStats], f: impl Fn(&QueueStats) -> u64) -> TelArray {
    let mut v: Vec<u64> = qs.iter().map(f).collect();
    v.resize(v.len().max(QUEUE_STAT_COUNTERS), 0);
    v.truncate(QUEUE_STAT_COUNTERS);
    TelArray::U64(v)
}

/// `/ethdev/stats,<port>` in DPDK's shape.
pub fn ethdev_stats(view: &RunView, p: usize) -> TelData {
    let qs = port_queues(view, p);
    let mut t = QueueStats::default();
    for q in &qs {
        t.add(q);
    }
    let mut d = TelDict::new();
    d.u64("ipackets", t.rx_packets)
        .u64("opackets", t.wire_tx_frames)
        .u64("ibytes", t.rx_bytes)
        .u64("obytes", t.tx_bytes)
        .u64("imissed", t.rx_missed + t.rx_pcie_overrun)
        .u64("ierrors", t.rx_oversize + t.desc_errors)
        .u64("oerrors", t.tx_foreign)
        .u64("rx_nombuf", t.rx_nombuf)
        .array("q_ipackets", queue_array(&qs, |q| q.rx_packets))
        .array("q_opackets", queue_array(&qs, |q| q.wire_tx_frames))
        .array("q_ibytes", queue_array(&qs, |q| q.rx_bytes))
        .array("q_obytes", queue_array(&qs, |q| q.tx_bytes))
        .array("q_errors", queue_array(&qs, |q| q.rx_missed));
    TelData::Dict(d)
}

/// `/ethdev/xstats,<port>`: DPDK's basic extended counters (`rx_good_packets`, ...,
/// `rx_q<N>_packets`, ...), then every queue counter of the driver summed over the queues,
/// then the driver's own per-queue counters (`q<N>_<name>`; while the workers run).
fn ethdev_xstats(view: &RunView, p: usize) -> Result<TelData, String> {
    let qs = port_queues(view, p);
    let mut t = QueueStats::default();
    for q in &qs {
        t.add(q);
    }
    let mut d = TelDict::new();
    d.u64("rx_good_packets", t.rx_packets)
        .u64("tx_good_packets", t.wire_tx_frames)
        .u64("rx_good_bytes", t.rx_bytes)
        .u64("tx_good_bytes", t.tx_bytes)
        .u64("rx_missed_errors", t.rx_missed + t.rx_pcie_overrun)
        .u64("rx_errors", t.rx_oversize + t.desc_errors)
        .u64("tx_errors", t.tx_foreign)
        .u64("rx_mbuf_allocation_errors", t.rx_nombuf);
    for (i, q) in qs.iter().enumerate() {
        d.u64(&format!("rx_q{i}_packets"), q.rx_packets)
            .u64(&format!("rx_q{i}_bytes"), q.rx_bytes)
            .u64(&format!("rx_q{i}_errors"), q.rx_missed)
            .u64(&format!("tx_q{i}_packets"), q.wire_tx_frames)
            .u64(&format!("tx_q{i}_bytes"), q.tx_bytes);
    }
    for (name, v) in QueueStats::NAMES.iter().zip(t.to_array()) {
        d.u64(name, v);
    }
    if let Ok(per_worker) = view.xstats() {
        for (w, ports) in per_worker.iter().enumerate() {
            for (name, v) in ports.get(p).into_iter().flatten() {
                d.u64(&format!("q{w}_{name}"), *v);
            }
        }
    }
    Ok(TelData::Dict(d))
}

/// `/nmdp/summary`: the run's totals now.
fn summary(view: &RunView) -> TelData {
    let snaps = view.snapshots();
    let mut t = QueueStats::default();
    let mut drops = dataplane::DropCounts::default();
    for s in &snaps {
        t.add(&s.total());
        drops.merge(&s.drops);
    }
    let rates = view.rates();
    let state = if snaps
        .iter()
        .all(|s| s.state == dataplane::runloop::WorkerState::Finished)
    {
        "finished"
    } else if snaps
        .iter()
        .any(|s| s.state == dataplane::runloop::WorkerState::Draining)
    {
        "draining"
    } else {
        "running"
    };
    let mut d = TelDict::new();
    d.str("state", state)
        .str("driver", view.info.driver)
        .str("mode", view.info.mode)
        .u64("workers", view.worker_count() as u64)
        .u64("uptime_ms", view.start.elapsed().as_millis() as u64)
        .u64("packets_rx", t.rx_packets)
        .u64("packets_tx", t.wire_tx_frames)
        .u64("bytes_rx", t.rx_bytes)
        .u64("bytes_tx", t.tx_bytes)
        .u64("rx_pps", rates.iter().map(|r| r.rx_pps).sum::<f64>() as u64)
        .u64("tx_pps", rates.iter().map(|r| r.tx_pps).sum::<f64>() as u64)
        .u64("rx_primary", t.rx_primary)
        .u64("rx_secondary", t.rx_secondary)
        .u64("rx_nombuf", t.rx_nombuf)
        .u64("rx_missed", t.rx_missed)
        .u64("drops", drops.total());
    for r in DropReason::all() {
        d.u64(&format!("drops/{}", r.name()), drops.get(r));
    }
    d.array("pipeline", TelArray::Str(view.info.pipeline.clone()));
    TelData::Dict(d)
}

/// `/nmdp/workers`: one array element per worker.
fn workers(view: &RunView) -> TelData {
    let snaps = view.snapshots();
    let rates = view.rates();
    let col = |f: &dyn Fn(usize) -> u64| TelArray::U64((0..snaps.len()).map(f).collect());
    let mut d = TelDict::new();
    d.array("worker", TelArray::Int((0..snaps.len() as i32).collect()))
        .array(
            "state",
            TelArray::Str(snaps.iter().map(|s| s.state.as_str().to_string()).collect()),
        )
        .array("rx_packets", col(&|i| snaps[i].total().rx_packets))
        .array("tx_packets", col(&|i| snaps[i].total().wire_tx_frames))
        .array("drops", col(&|i| snaps[i].drops.total()))
        .array(
            "rx_pps",
            col(&|i| rates.get(i).map_or(0, |r| r.rx_pps as u64)),
        )
        .array(
            "tx_pps",
            col(&|i| rates.get(i).map_or(0, |r| r.tx_pps as u64)),
        )
        .array(
            "busy_percent",
            col(&|i| rates.get(i).map_or(0, |r| (r.busy * 100.0).round() as u64)),
        )
        .array("busy_ns", col(&|i| snaps[i].busy_ns))
        .array("bursts", col(&|i| snaps[i].bursts))
        .array("idle_polls", col(&|i| snaps[i].idle_polls));
    TelData::Dict(d)
}

/// `/nmdp/health`: the verdict (`status`), why (`reasons`), per port its link, per worker the
/// age of its heartbeat, and while draining the time left.
fn health(view: &RunView) -> TelData {
    let r = view.health_report();
    let mut d = TelDict::new();
    d.str("status", r.status.as_str())
        .array("reasons", TelArray::Str(r.reasons))
        .array(
            "ports/port",
            TelArray::Int((0..r.ports.len() as i32).collect()),
        )
        .array("ports/device", TelArray::Str(view.info.ports.clone()))
        .array(
            "ports/link",
            TelArray::Str(r.ports.into_iter().map(|p| p.link).collect()),
        )
        .array(
            "workers/worker",
            TelArray::Int((0..r.heartbeat_age_ms.len() as i32).collect()),
        )
        .array(
            "workers/heartbeat_age_ms",
            TelArray::U64(r.heartbeat_age_ms),
        );
    if let Some(ms) = r.drain_remaining_ms {
        d.u64("drain_remaining_ms", ms);
    }
    TelData::Dict(d)
}

/// `/nmdp/drain[,<seconds>]`: starts (or shortens) an instance drain.
fn drain(view: &RunView, params: Option<&str>) -> Result<TelData, String> {
    let after = match params.filter(|p| !p.is_empty()) {
        None => None,
        Some(p) => match p.parse::<f64>() {
            Ok(s) if (0.0..=3600.0).contains(&s) => Some(std::time::Duration::from_secs_f64(s)),
            _ => {
                return Err(format!(
                    "`{p}` is not a number of seconds in 0..=3600; give e.g. /nmdp/drain,30 \
                     (none: run.instance_drain_s)"
                ));
            }
        },
    };
    if view.finished() {
        return Err("the run has finished".into());
    }
    let now = std::time::Instant::now();
    let d = view.health.start_drain(now, after);
    let mut out = TelDict::new();
    out.str("status", "draining")
        .u64(
            "draining_for_ms",
            now.saturating_duration_since(d.started).as_millis() as u64,
        )
        .u64(
            "stop_in_ms",
            d.deadline.saturating_duration_since(now).as_millis() as u64,
        );
    Ok(TelData::Dict(out))
}

/// `/nmdp/nf,<name|index>[,<worker>]`.
fn nf(view: &RunView, params: Option<&str>) -> Result<TelData, String> {
    let mut p = params.unwrap_or("").split(',');
    let sel = p.next().filter(|s| !s.is_empty()).ok_or_else(|| {
        format!(
            "give a function (name or index), e.g. /nmdp/nf,{}; the pipeline has: {}",
            view.info.pipeline.first().map_or("lb", String::as_str),
            view.info.pipeline.join(", ")
        )
    })?;
    let i = view.nf_index(sel)?;
    let per_worker = view.nf_counters()?;
    let c = match p.next() {
        Some(w) => {
            let w: usize = w
                .parse()
                .ok()
                .filter(|&w| w < per_worker.len())
                .ok_or_else(|| format!("`{w}` is not a worker; allowed 0..{}", per_worker.len()))?;
            per_worker[w]
                .get(i)
                .map(|(_, c)| c.clone())
                .unwrap_or_default()
        }
        None => merged(&per_worker, i),
    };
    Ok(TelData::Dict(flatten(&c)))
}

/// Function `i`'s counters merged over the workers.
pub fn merged(per_worker: &[Vec<(String, Counters)>], i: usize) -> Counters {
    let mut m = Counters::new();
    for w in per_worker {
        if let Some((_, c)) = w.get(i) {
            m.merge(c);
        }
    }
    m
}

/// `/nmdp/nf/command,<name|index>,<verb>[,<arg>...]`.
fn nf_command(view: &RunView, params: Option<&str>) -> Result<TelData, String> {
    let parts: Vec<&str> = params.unwrap_or("").split(',').collect();
    let [sel, verb, args @ ..] = parts.as_slice() else {
        return Err(
            "give the function and the verb, e.g. /nmdp/nf/command,lb,drain,10.0.0.1".into(),
        );
    };
    if verb.is_empty() {
        return Err("give a verb after the function, e.g. /nmdp/nf/command,lb,backends".into());
    }
    let i = view.nf_index(sel)?;
    let c = view.nf_command(i, &NfCommand::new(*verb, args))?;
    Ok(TelData::Dict(flatten(&c)))
}

/// A table a function answers (`backends`, `sessions`) as the reply to `reply`: its first
/// `max_rows` rows (the workers' tables merged), fewer when that many would not fit in one
/// reply, as one array per column, the rows' keys in column `key_name`; the other counters of
/// the function's answer as they are.
fn nf_rows(
    view: &RunView,
    reply: &str,
    nf: &str,
    cmd: &NfCommand,
    key_name: &str,
    max_rows: usize,
) -> Result<TelData, String> {
    let i = view.nf_index(nf)?;
    let c = view.nf_command(i, cmd)?;
    let with_rows = |k: usize| {
        let mut d = TelDict::new();
        for (name, v) in c.iter() {
            match v {
                CounterValue::Rows { rows, .. } => {
                    columns(&mut d, "", key_name, &rows[..rows.len().min(k)]);
                }
                _ => flatten_into(&mut d, name, v),
            }
        }
        TelData::Dict(d)
    };
    let mut k = max_rows;
    loop {
        let d = with_rows(k);
        if k == 0 || d.fits(reply) {
            return Ok(d);
        }
        let shown = c
            .iter()
            .find_map(|(_, v)| v.as_rows())
            .map_or(0, <[_]>::len)
            .min(k);
        k = shown * 9 / 10;
    }
}

/// Counters as a flat dictionary: numbers as numbers, counts per item as arrays, texts as
/// strings, a group's members as `group/name`, a table as one array per column
/// (`table/<label>` holding the rows' keys).
pub fn flatten(c: &Counters) -> TelDict {
    let mut d = TelDict::new();
    for (name, v) in c.iter() {
        flatten_into(&mut d, name, v);
    }
    d
}

fn flatten_into(d: &mut TelDict, name: &str, v: &CounterValue) {
    match v {
        CounterValue::Count(n) | CounterValue::Gauge(n) | CounterValue::Setting(n) => {
            d.u64(name, *n);
        }
        CounterValue::Counts(v) => {
            d.array(name, TelArray::U64(v.clone()));
        }
        CounterValue::Text(t) => {
            d.str(name, t.as_str());
        }
        CounterValue::Group(g) => {
            for (n, v) in g.iter() {
                flatten_into(d, &format!("{name}/{n}"), v);
            }
        }
        CounterValue::Rows { label, rows } => {
            columns(d, &format!("{name}/"), label, rows);
        }
    }
}

/// A table's rows as columns: the keys under `<prefix><key_name>`, then each counter of the
/// rows (in the first row's order) under `<prefix><counter>` (0 or "" where a row lacks it).
fn columns(d: &mut TelDict, prefix: &str, key_name: &str, rows: &[(String, Counters)]) {
    d.array(
        &format!("{prefix}{key_name}"),
        TelArray::Str(rows.iter().map(|(k, _)| k.clone()).collect()),
    );
    let Some((_, first)) = rows.first() else {
        return;
    };
    for (col, v) in first.iter() {
        let arr = match v {
            CounterValue::Text(_) => TelArray::Str(
                rows.iter()
                    .map(|(_, r)| {
                        r.get(col)
                            .and_then(CounterValue::as_text)
                            .unwrap_or("")
                            .to_string()
                    })
                    .collect(),
            ),
            CounterValue::Count(_) | CounterValue::Gauge(_) | CounterValue::Setting(_) => {
                TelArray::U64(
                    rows.iter()
                        .map(|(_, r)| r.count_at(col).unwrap_or(0))
                        .collect(),
                )
            }
            _ => continue,
        };
        d.array(&format!("{prefix}{col}"), arr);
    }
}

/// A number of a flat dictionary (for tests and `dataplane ctl`).
pub fn number(d: &TelDict, name: &str) -> Option<u64> {
    match d.get(name)? {
        TelValue::U64(n) => Some(*n),
        TelValue::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_flatten_to_dpdk_dictionaries() {
        let mut drops = Counters::new();
        drops.count("no_mapping", 3);
        let row = |p: u64, s: &str| {
            let mut r = Counters::new();
            r.text("state", s).count("packets", p).setting("weight", 1);
            r
        };
        let mut c = Counters::new();
        c.count("packets", 10)
            .gauge("active", 4)
            .counts("per", vec![1, 2])
            .group("drops", drops)
            .text("note", "x")
            .rows(
                "backends",
                "backend",
                vec![
                    ("10.0.0.1".into(), row(5, "active")),
                    ("10.0.0.2".into(), row(7, "draining")),
                ],
            );
        let d = flatten(&c);
        assert_eq!(number(&d, "packets"), Some(10));
        assert_eq!(number(&d, "active"), Some(4));
        assert_eq!(number(&d, "drops/no_mapping"), Some(3));
        assert_eq!(
            d.get("per"),
            Some(&TelValue::Array(TelArray::U64(vec![1, 2])))
        );
        assert_eq!(
            d.get("backends/backend"),
            Some(&TelValue::Array(TelArray::Str(vec![
                "10.0.0.1".into(),
                "10.0.0.2".into()
            ])))
        );
        assert_eq!(
            d.get("backends/state"),
            Some(&TelValue::Array(TelArray::Str(vec![
                "active".into(),
                "draining".into()
            ])))
        );
        assert_eq!(
            d.get("backends/packets"),
            Some(&TelValue::Array(TelArray::U64(vec![5, 7])))
        );
        let json = TelData::Dict(d).to_reply("/nmdp/nf");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["/nmdp/nf"]["note"], "x");
    }

    #[test]
    fn every_command_fits_dpdks_limits() {
        for c in commands() {
            assert!(
                c.name.len() <= dataplane::telemetry::MAX_CMD_LEN,
                "{}",
                c.name
            );
            assert!(
                c.help.len() <= dataplane::telemetry::MAX_HELP_LEN,
                "{}: {}",
                c.name,
                c.help
            );
        }
    }
}
