//! `dataplane ctl`: a person's client of a run's telemetry socket (the virtual NIC's, or EAL's
//! on DPDK ports, found by file prefix like `dpdk-telemetry.py -f`).
//!
//! A command is given as words, `lb drain 10.180.250.6` for `/nmdp/lb/drain,10.180.250.6`: the
//! longest run of leading words that names one of the run's commands (with or without its
//! `/nmdp/` part) is the command, the rest its parameters. A word starting with `/` is taken as
//! the command itself (`/ethdev/stats 0`). Replies print as tables (columns of equal length,
//! one row per backend, worker or session), `name: value` lines, or with `--json` the reply as
//! the socket sent it. An error reply exits 1; no run to talk to exits 2. `health` exits 0 only
//! when the run is healthy (1 when it is draining, unhealthy or stopping), for health agents.

use std::fmt::Write as _;

use dataplane::telemetry::client::TelemetryClient;
use serde_json::Value;

/// What `dataplane ctl` was asked.
#[derive(Clone, Debug)]
pub struct CtlOptions {
    /// The run's file prefix (`run.telemetry_prefix`, or EAL's `--file-prefix`).
    pub prefix: String,
    /// The instance of that prefix (0: the first process).
    pub instance: u32,
    /// Print the reply as JSON.
    pub json: bool,
    /// The command, as words.
    pub words: Vec<String>,
}

/// Why `dataplane ctl` failed, and its exit status.
#[derive(Debug)]
pub struct CtlError {
    /// 1: the run answered with an error; 2: no run to talk to, or a bad command line.
    pub code: u8,
    /// What went wrong.
    pub msg: String,
    /// What to print on stdout all the same (the reply of a `health` that is not healthy).
    pub output: String,
}

fn fail(code: u8, msg: impl Into<String>) -> CtlError {
    CtlError {
        code,
        msg: msg.into(),
        output: String::new(),
    }
}

/// Runs the command; returns what to print.
pub fn run(opts: &CtlOptions) -> Result<String, CtlError> {
    dataplane::telemetry::check_prefix(&opts.prefix).map_err(|e| fail(2, e))?;
    let path = dataplane::telemetry::socket_path(&opts.prefix, opts.instance);
    let mut c = TelemetryClient::connect(&path).map_err(|e| {
        fail(
            2,
            format!(
                "no run answers on {e}; is one running with run.telemetry_prefix = \"{}\"? \
                 (give --prefix, and --instance for a second process of the same prefix)",
                opts.prefix
            ),
        )
    })?;
    let list: Vec<String> = c
        .request("/")
        .map_err(|e| fail(2, format!("{}: {e}", path.display())))?["/"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let cmd = resolve(&opts.words, &list).map_err(|e| fail(2, e))?;
    let reply = c
        .request(&cmd)
        .map_err(|e| fail(2, format!("{}: {e}", path.display())))?;
    let name = cmd.split(',').next().unwrap_or(&cmd);
    let v = &reply[name];
    if let Some(e) = v.as_str().and_then(|s| s.strip_prefix("error: ")) {
        return Err(fail(1, e.to_string()));
    }
    if v.is_null() {
        return Err(fail(
            1,
            format!(
                "`{cmd}`: not a command of this run, or wrong parameters (`dataplane ctl help \
                 {}` says which)",
                name.trim_start_matches('/')
            ),
        ));
    }
    let out = if opts.json {
        format!("{reply}\n")
    } else {
        render(v)
    };
    if name == "/nmdp/health" {
        return health_verdict(v, out);
    }
    Ok(out)
}

/// `health` succeeds only when the run is healthy, so a routing daemon's health agent needs
/// only the exit status (docs/scale-out.md): anything else exits 1 with the status and the
/// reasons.
fn health_verdict(v: &Value, out: String) -> Result<String, CtlError> {
    let status = v["status"].as_str().unwrap_or("unknown");
    if status == "healthy" {
        return Ok(out);
    }
    let reasons: Vec<&str> = v["reasons"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    Err(CtlError {
        code: 1,
        msg: format!("{status}: {}", reasons.join("; ")),
        output: out,
    })
}

/// The protocol command for `words` among the run's commands `list` (see the module docs).
pub fn resolve(words: &[String], list: &[String]) -> Result<String, String> {
    let Some(first) = words.first() else {
        return Ok("/".into());
    };
    if first.starts_with('/') {
        let mut cmd = first.clone();
        for w in &words[1..] {
            cmd.push(',');
            cmd.push_str(w);
        }
        return Ok(cmd);
    }
    if first == "help" || first == "list" {
        return match words.get(1) {
            None => Ok("/".into()),
            Some(_) => Ok(format!("/help,{}", resolve(&words[1..], list)?)),
        };
    }
    for k in (1..=words.len()).rev() {
        let path = words[..k].join("/");
        for cand in [format!("/{path}"), format!("/nmdp/{path}")] {
            if list.contains(&cand) {
                let mut cmd = cand;
                for w in &words[k..] {
                    cmd.push(',');
                    cmd.push_str(w);
                }
                return Ok(cmd);
            }
        }
    }
    Err(format!(
        "`{}` names no command of this run; its commands: {}",
        words.join(" "),
        list.join(" ")
    ))
}

/// One column of a table: its name and its cells.
type Column<'a> = (&'a str, &'a Vec<Value>);

/// Columns that hold a row's key, shown first.
const KEY_COLUMNS: [&str; 6] = ["address", "worker", "session", "backend", "port", "name"];

/// A reply for a person: columns of equal length as a table (the row's key first), other
/// values as `name: value`.
pub fn render(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) => {
            let mut tables: Vec<(String, Vec<Column>)> = Vec::new();
            for (k, val) in m {
                match val {
                    Value::Array(a) => {
                        let group = k.rsplit_once('/').map_or("", |(g, _)| g).to_string();
                        let col = k.rsplit_once('/').map_or(k.as_str(), |(_, c)| c);
                        match tables
                            .iter_mut()
                            .find(|(g, cols)| *g == group && cols[0].1.len() == a.len())
                        {
                            Some((_, cols)) => cols.push((col, a)),
                            None => tables.push((group, vec![(col, a)])),
                        }
                    }
                    other => {
                        let _ = writeln!(out, "{k}: {}", scalar(other));
                    }
                }
            }
            for (group, mut cols) in tables {
                // The row's key first (JSON objects come back sorted by name).
                if let Some(k) = cols.iter().position(|(c, _)| KEY_COLUMNS.contains(c)) {
                    let key = cols.remove(k);
                    cols.insert(0, key);
                }
                if cols.len() == 1 {
                    let (c, a) = cols[0];
                    let name = if group.is_empty() {
                        c.to_string()
                    } else {
                        format!("{group}/{c}")
                    };
                    let items: Vec<String> = a.iter().map(scalar).collect();
                    let _ = writeln!(out, "{name}: {}", items.join(" "));
                    continue;
                }
                if !group.is_empty() {
                    let _ = writeln!(out, "{group}:");
                }
                out.push_str(&table(&cols));
            }
        }
        Value::Array(a) => {
            for x in a {
                let _ = writeln!(out, "{}", scalar(x));
            }
        }
        other => {
            let _ = writeln!(out, "{}", scalar(other));
        }
    }
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn table(cols: &[Column]) -> String {
    let rows = cols[0].1.len();
    let cells: Vec<Vec<String>> = cols
        .iter()
        .map(|(h, a)| {
            std::iter::once(h.to_string())
                .chain(a.iter().map(scalar))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = cells
        .iter()
        .map(|c| c.iter().map(String::len).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in 0..=rows {
        let line: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                // Text left, numbers right.
                if i == 0 || c[r].parse::<f64>().is_err() {
                    format!("{:<w$}", c[r])
                } else {
                    format!("{:>w$}", c[r])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn words_resolve_to_protocol_commands() {
        let list: Vec<String> = [
            "/",
            "/ethdev/stats",
            "/nmdp/lb/backends",
            "/nmdp/lb/drain",
            "/nmdp/drain",
            "/nmdp/nf",
            "/nmdp/summary",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let r = |s: &str| resolve(&words(s), &list);
        assert_eq!(r("lb drain 10.0.0.1").unwrap(), "/nmdp/lb/drain,10.0.0.1");
        assert_eq!(r("lb backends").unwrap(), "/nmdp/lb/backends");
        assert_eq!(r("summary").unwrap(), "/nmdp/summary");
        assert_eq!(r("nf lb 0").unwrap(), "/nmdp/nf,lb,0");
        assert_eq!(r("ethdev stats 0").unwrap(), "/ethdev/stats,0");
        assert_eq!(r("/ethdev/stats 0").unwrap(), "/ethdev/stats,0");
        assert_eq!(r("/ethdev/stats,1").unwrap(), "/ethdev/stats,1");
        assert_eq!(r("").unwrap(), "/");
        assert_eq!(r("help lb drain").unwrap(), "/help,/nmdp/lb/drain");
        assert_eq!(r("drain 5").unwrap(), "/nmdp/drain,5");
        let e = r("lb explode").unwrap_err();
        assert!(e.contains("/nmdp/lb/drain"), "{e}");
    }

    #[test]
    fn health_succeeds_only_when_healthy() {
        let ok = serde_json::json!({"status": "healthy", "reasons": []});
        assert_eq!(health_verdict(&ok, "x".into()).unwrap(), "x");
        let bad = serde_json::json!({
            "status": "unhealthy",
            "reasons": ["port 1 (afpacket:b0): down", "worker 0: not polling"],
        });
        let e = health_verdict(&bad, "table".into()).unwrap_err();
        assert_eq!(e.code, 1);
        assert_eq!(
            e.msg,
            "unhealthy: port 1 (afpacket:b0): down; worker 0: not polling"
        );
        assert_eq!(e.output, "table");
        let draining = serde_json::json!({"status": "draining", "reasons": ["draining"]});
        assert_eq!(
            health_verdict(&draining, String::new()).unwrap_err().code,
            1
        );
    }

    #[test]
    fn replies_render_as_tables_and_lines() {
        let v: Value = serde_json::json!({
            "vip": "10.2.0.1",
            "address": ["10.0.0.1", "10.0.0.2"],
            "state": ["active", "draining"],
            "packets": [1200, 7],
            "per": [1, 2, 3],
        });
        let t = render(&v);
        assert!(t.starts_with("vip: 10.2.0.1\n"), "{t}");
        assert!(t.contains("address   packets  state\n"), "{t}");
        assert!(t.contains("10.0.0.2        7  draining\n"), "{t}");
        assert!(t.contains("per: 1 2 3\n"), "{t}");
    }
}
