//! `dataplane nat-lookup`: who held a deterministic NAT's outside address and port, or where a
//! subscriber's sessions leave, computed from the run's config alone (RFC 7422). An operator
//! answering an abuse report months later needs the config that was in force, not a running
//! instance or a log (`nfs/src/nat/deterministic.rs` has the arithmetic).

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::Path;

use nfs::nat::DeterministicPlan;

/// The answer for `words` (`<outside ip> <port>` or `<inside ip>`) under the config at `path`
/// with `sets` applied, as text (or JSON with `json`). Errors name the file and key, or say what
/// the words should be.
pub fn run(path: &Path, sets: &[String], words: &[String], json: bool) -> Result<String, String> {
    let cfg = crate::config::RunConfig::load(path, sets).map_err(|e| e.to_string())?;
    let (i, entry) = cfg
        .pipeline
        .iter()
        .enumerate()
        .find(|(_, e)| {
            e.get("name")
                .and_then(|v| v.as_str())
                .and_then(nfs::lookup)
                .is_some_and(|s| s.name == nfs::nat::NAME)
        })
        .ok_or_else(|| format!("{}: the pipeline has no `nat`", path.display()))?;
    let mut params = entry.clone();
    params.remove("name");
    let plan = DeterministicPlan::from_params(&params, cfg.run.workers.max(1))
        .map_err(|e| format!("{}: pipeline[{i}]: {e}", path.display()))?;
    let ip = |s: &str| -> Result<Ipv4Addr, String> {
        s.parse()
            .map_err(|_| format!("`{s}` is not an IPv4 address"))
    };
    let mut out = String::new();
    match words {
        [outside, port] => {
            let (o, p) = (
                ip(outside)?,
                port.parse::<u16>()
                    .map_err(|_| format!("`{port}` is not a port (0..=65535)"))?,
            );
            match plan.reverse(o, p) {
                Some(h) if json => {
                    let v = serde_json::json!({
                        "outside": o.to_string(), "port": p, "inside": h.inside.to_string(),
                        "instance": h.instance, "worker": h.worker,
                        "range": [h.range.0, h.range.1],
                    });
                    let _ = writeln!(out, "{v}");
                }
                Some(h) => {
                    let _ = writeln!(
                        out,
                        "{o}:{p} belongs to {} (instance {}, worker {}, ports {}-{})",
                        h.inside, h.instance, h.worker, h.range.0, h.range.1
                    );
                }
                None => {
                    return Err(format!(
                        "{o}:{p} is in no subscriber's range (not an outside address of this \
                         NAT, or a port outside every worker's ranges)"
                    ));
                }
            }
        }
        [inside] => {
            let s = ip(inside)?;
            let f = plan.forward(s);
            if f.is_empty() {
                return Err(format!("{s} is in none of `subscriber_prefixes`"));
            }
            if json {
                let v: Vec<serde_json::Value> = f
                    .iter()
                    .map(|pl| {
                        serde_json::json!({
                            "instance": pl.instance, "outside": pl.outside.to_string(),
                            "ranges": pl.ranges.iter()
                                .map(|&(w, a, b)| serde_json::json!({"worker": w, "first": a, "last": b}))
                                .collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                let _ = writeln!(out, "{}", serde_json::Value::Array(v));
            } else {
                for pl in f {
                    let ranges: Vec<String> = pl
                        .ranges
                        .iter()
                        .map(|&(w, a, b)| format!("{a}-{b} (worker {w})"))
                        .collect();
                    let _ = writeln!(
                        out,
                        "{s} -> {} ports {} (instance {})",
                        pl.outside,
                        ranges.join(", "),
                        pl.instance
                    );
                }
            }
        }
        _ => {
            return Err(
                "give `<outside address> <port>` (who held it) or `<inside address>` (where \
                 its sessions leave)"
                    .into(),
            );
        }
    }
    Ok(out)
}
