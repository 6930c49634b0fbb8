//! `--set key=value` overrides on any TOML table.
//!
//! Hardware profiles and run configs are TOML; sweeps and one-off experiments change a single
//! constant (`--set nic.pcie.mps=128`) without editing the file. The override is applied to the
//! parsed [`toml::Table`] *before* it is deserialised into a typed config, so the typed layer's
//! validation (unknown keys, allowed values) still runs on the result. This module is generic
//! over any table and knows nothing about profiles. Arrays of tables are reached by index or by
//! an element's `name` (`--set pipeline[0].nat_ip=...`, `--set pipeline.nat.nat_ip=...`), so one
//! parameter of one network function is one override, not a retyped pipeline.

use toml::{Table, Value};

/// Parses an override value: a TOML integer, else a finite float, else a boolean, else a
/// string.
///
/// A value in double quotes is always a string (quotes removed), so `"128"` stays text.
/// A value starting with `[` or `{` is parsed as a TOML array or inline table when it is one
/// (e.g. `[64, 1500]`); otherwise it is a string.
pub fn parse_value(raw: &str) -> Value {
    let s = raw.trim();
    if s.len() >= 2 && s.starts_with('"') && s.ends_with('"') {
        return Value::String(s[1..s.len() - 1].to_string());
    }
    if let Ok(i) = s.parse::<i64>() {
        return Value::Integer(i);
    }
    // Reject "inf", "NaN" and friends: only digit-bearing finite numbers are floats.
    if s.bytes().any(|b| b.is_ascii_digit())
        && let Ok(f) = s.parse::<f64>()
        && f.is_finite()
    {
        return Value::Float(f);
    }
    match s {
        "true" => return Value::Boolean(true),
        "false" => return Value::Boolean(false),
        _ => {}
    }
    if (s.starts_with('[') || s.starts_with('{'))
        && let Ok(mut t) = format!("v = {s}").parse::<Table>()
        && let Some(v) = t.remove("v")
    {
        return v;
    }
    Value::String(s.to_string())
}

/// One step of an override's path: a key of a table, or an element of an array.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    /// `name`: the key of a table; in an array of tables, the first table whose `name` is it.
    Key(String),
    /// `[i]`, or a number after a dot: element `i` of an array.
    Index(usize),
}

/// Splits a dotted key into its steps: `pipeline[1].flows` and `pipeline.1.flows` both give
/// `pipeline`, element 1, `flows`; `pipeline.nat.flows` gives `pipeline`, `nat`, `flows`.
fn steps(key: &str) -> Result<Vec<Step>, String> {
    let mut out = Vec::new();
    for part in key.split('.').map(str::trim) {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if name.is_empty() && (rest.is_empty() || out.is_empty()) {
            return Err(format!("invalid key `{key}`: empty path segment"));
        }
        if !name.is_empty() {
            out.push(match name.parse::<usize>() {
                Ok(i) => Step::Index(i),
                Err(_) => Step::Key(name.to_string()),
            });
        }
        while !rest.is_empty() {
            let close = rest.find(']').ok_or_else(|| {
                format!("invalid key `{key}`: `[` without `]` (write e.g. `pipeline[0].flows`)")
            })?;
            let i = rest[1..close].trim().parse::<usize>().map_err(|_| {
                format!(
                    "invalid key `{key}`: `{}` is not an index (write e.g. `pipeline[0].flows`)",
                    &rest[..=close]
                )
            })?;
            out.push(Step::Index(i));
            rest = &rest[close + 1..];
            if !rest.is_empty() && !rest.starts_with('[') {
                return Err(format!(
                    "invalid key `{key}`: `{rest}` after an index (separate keys with `.`)"
                ));
            }
        }
    }
    Ok(out)
}

/// The element of array `a` (reached by `path`) that `step` selects: an index, or the first
/// table whose `name` is the step's key. Errors say what the array holds.
fn element<'a>(
    a: &'a mut [Value],
    step: &Step,
    path: &str,
    key: &str,
) -> Result<&'a mut Value, String> {
    let n = a.len();
    let i = match step {
        Step::Index(i) if *i < n => *i,
        Step::Index(i) => {
            return Err(if n == 0 {
                format!("cannot set `{key}`: `{path}` is empty, so it has no element {i}")
            } else {
                format!(
                    "cannot set `{key}`: `{path}` has {n} entries; allowed indices 0..={}",
                    n - 1
                )
            });
        }
        Step::Key(name) => {
            let name_of = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_string);
            match a.iter().position(|v| name_of(v).as_deref() == Some(name)) {
                Some(i) => i,
                None => {
                    let names: Vec<String> = a
                        .iter()
                        .enumerate()
                        .map(|(i, v)| match name_of(v) {
                            Some(nm) => format!("{nm} ([{i}])"),
                            None => format!("[{i}]"),
                        })
                        .collect();
                    return Err(format!(
                        "cannot set `{key}`: no entry of `{path}` is named `{name}`; it holds {}",
                        if names.is_empty() {
                            "nothing".to_string()
                        } else {
                            names.join(", ")
                        }
                    ));
                }
            }
        }
    };
    Ok(&mut a[i])
}

/// Sets the dotted `key` (e.g. `nic.pcie.mps`) in `table` to the parsed `value`
/// (see [`parse_value`]), creating missing intermediate tables.
///
/// Inside an array of tables (the `[[pipeline]]` of a run config) a step selects an element:
/// by index (`pipeline[0].nat_ip` or `pipeline.0.nat_ip`) or by its `name` key, the first table
/// with that name (`pipeline.nat.nat_ip`).
///
/// Errors (naming the key) when a path segment is empty, when the path crosses a value that is
/// not a table, when an index is out of range or no element has the name (listing what the
/// array holds), or when the final key currently holds a table (replacing a whole section with
/// a scalar is almost always a typo).
pub fn apply_set(table: &mut Table, key: &str, value: &str) -> Result<(), String> {
    let steps = steps(key)?;
    let (last, parents) = steps.split_last().expect("steps yields at least one");
    let Step::Key(last) = last else {
        return Err(format!(
            "cannot set `{key}`: it names a whole entry; set one of its keys (e.g. `{key}.<name>=...`)"
        ));
    };
    let mut cur = table;
    let mut path = String::new();
    let mut i = 0;
    while i < parents.len() {
        let Step::Key(k) = &parents[i] else {
            return Err(format!(
                "cannot set `{key}`: `{path}` is a table, not an array; drop the index"
            ));
        };
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(k);
        i += 1;
        let mut v = cur
            .entry(k.clone())
            .or_insert_with(|| Value::Table(Table::new()));
        // Through arrays: each following step picks an element.
        while let Value::Array(a) = v {
            let Some(step) = parents.get(i) else {
                return Err(format!(
                    "cannot set `{key}`: `{path}` is an array; pick an entry, e.g. \
                     `{path}[0].{last}` or `{path}.<name>.{last}`"
                ));
            };
            v = element(a, step, &path, key)?;
            path.push_str(&match step {
                Step::Index(n) => format!("[{n}]"),
                Step::Key(n) => format!(".{n}"),
            });
            i += 1;
        }
        cur = match v {
            Value::Table(t) => t,
            other => {
                return Err(format!(
                    "cannot set `{key}`: `{path}` is a {}, not a table",
                    other.type_str()
                ));
            }
        };
    }
    let new = parse_value(value);
    match cur.get(last) {
        Some(Value::Table(_)) => {
            return Err(format!(
                "cannot set `{key}`: it is a table; set one of its keys (e.g. `{key}.<name>=...`)"
            ));
        }
        Some(Value::Array(a)) if a.iter().any(Value::is_table) && !new.is_array() => {
            return Err(format!(
                "cannot set `{key}`: it is an array of tables; set a key of one entry \
                 (`{key}[0].<name>=...` or `{key}.<entry name>.<name>=...`) or give a whole \
                 array (`{key}=[{{...}}, ...]`)"
            ));
        }
        _ => {}
    }
    cur.insert(last.to_string(), new);
    Ok(())
}

/// Applies one `key=value` assignment (split at the first `=`), as given to `--set`.
pub fn apply_assignment(table: &mut Table, assignment: &str) -> Result<(), String> {
    let (key, value) = assignment
        .split_once('=')
        .ok_or_else(|| format!("invalid override `{assignment}`: expected key=value"))?;
    apply_set(table, key.trim(), value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(s: &str) -> Table {
        s.parse().unwrap()
    }

    #[test]
    fn parses_value_kinds() {
        assert_eq!(parse_value("128"), Value::Integer(128));
        assert_eq!(parse_value("-3"), Value::Integer(-3));
        assert_eq!(parse_value("0.945"), Value::Float(0.945));
        assert_eq!(parse_value("1e3"), Value::Float(1000.0));
        assert_eq!(parse_value("true"), Value::Boolean(true));
        assert_eq!(parse_value("false"), Value::Boolean(false));
        assert_eq!(parse_value("spec"), Value::String("spec".into()));
        assert_eq!(parse_value("256KiB"), Value::String("256KiB".into()));
        assert_eq!(parse_value("\"128\""), Value::String("128".into()));
        assert_eq!(parse_value("inf"), Value::String("inf".into()));
        assert_eq!(parse_value("NaN"), Value::String("NaN".into()));
        assert_eq!(
            parse_value("[64, 1500]"),
            Value::Array(vec![Value::Integer(64), Value::Integer(1500)])
        );
        assert_eq!(parse_value("[oops"), Value::String("[oops".into()));
    }

    #[test]
    fn sets_existing_and_new_keys() {
        let mut t = table("[nic.pcie]\nmps = 256\n");
        apply_set(&mut t, "nic.pcie.mps", "128").unwrap();
        assert_eq!(t["nic"]["pcie"]["mps"], Value::Integer(128));
        apply_set(&mut t, "nic.nicmem.capacity", "4MiB").unwrap();
        assert_eq!(t["nic"]["nicmem"]["capacity"], Value::String("4MiB".into()));
        apply_set(&mut t, "top", "1.5").unwrap();
        assert_eq!(t["top"], Value::Float(1.5));
    }

    #[test]
    fn errors_name_the_key() {
        let mut t = table("[nic]\nname = \"x\"\n[nic.pcie]\nmps = 256\n");
        let e = apply_set(&mut t, "nic.name.first", "1").unwrap_err();
        assert!(
            e.contains("nic.name.first") && e.contains("`nic.name` is a string"),
            "{e}"
        );
        let e = apply_set(&mut t, "nic.pcie", "3").unwrap_err();
        assert!(e.contains("`nic.pcie`") && e.contains("table"), "{e}");
        let e = apply_set(&mut t, "nic..mps", "3").unwrap_err();
        assert!(e.contains("nic..mps"), "{e}");
        // The table is unchanged by failed sets.
        assert_eq!(t["nic"]["pcie"]["mps"], Value::Integer(256));
    }

    /// A pipeline entry is reached by index or by name, and the errors list what the array
    /// holds.
    #[test]
    fn pipeline_entries_by_index_and_by_name() {
        let mut t = table(
            "[[pipeline]]\nname = \"nat\"\n[[pipeline]]\nname = \"flow_counter\"\n\
             [[pipeline]]\nname = \"nat\"\n",
        );
        apply_set(&mut t, "pipeline[0].nat_ip", "10.9.9.9").unwrap();
        apply_set(&mut t, "pipeline.1.flows", "64").unwrap();
        apply_set(&mut t, "pipeline.flow_counter.top_k", "3").unwrap();
        apply_set(&mut t, "pipeline.nat.flows", "7").unwrap();
        let p = t["pipeline"].as_array().unwrap();
        assert_eq!(p[0]["nat_ip"], Value::String("10.9.9.9".into()));
        assert_eq!(
            p[0]["flows"],
            Value::Integer(7),
            "the first entry of that name"
        );
        assert!(p[2].get("flows").is_none());
        assert_eq!(p[1]["flows"], Value::Integer(64));
        assert_eq!(p[1]["top_k"], Value::Integer(3));
        apply_set(&mut t, "pipeline[2].flows", "9").unwrap();
        assert_eq!(t["pipeline"][2]["flows"], Value::Integer(9));

        let e = apply_set(&mut t, "pipeline[3].flows", "1").unwrap_err();
        assert!(
            e.contains("pipeline[3].flows") && e.contains("0..=2"),
            "{e}"
        );
        let e = apply_set(&mut t, "pipeline.lb.vip", "1").unwrap_err();
        assert!(
            e.contains("named `lb`") && e.contains("nat ([0]), flow_counter ([1]), nat ([2])"),
            "{e}"
        );
        let e = apply_set(&mut t, "pipeline.nat_ip", "1").unwrap_err();
        assert!(e.contains("pick an entry"), "{e}");
        let e = apply_set(&mut t, "pipeline", "1").unwrap_err();
        assert!(
            e.contains("array of tables") && e.contains("pipeline[0]"),
            "{e}"
        );
        let mut whole = t.clone();
        apply_set(&mut whole, "pipeline", "[{name = \"macswap\"}]").unwrap();
        assert_eq!(whole["pipeline"].as_array().unwrap().len(), 1);
        let e = apply_set(&mut t, "pipeline[0]", "1").unwrap_err();
        assert!(e.contains("whole entry"), "{e}");
        let e = apply_set(&mut t, "pipeline[x].flows", "1").unwrap_err();
        assert!(e.contains("`[x]` is not an index"), "{e}");
        let e = apply_set(&mut t, "pipeline[0.flows", "1").unwrap_err();
        assert!(e.contains("without `]`"), "{e}");
        let e = apply_set(&mut t, "nic[0].mps", "1").unwrap_err();
        assert!(e.contains("`nic` is a table, not an array"), "{e}");
        let mut empty = table("pipeline = []\n");
        let e = apply_set(&mut empty, "pipeline[0].flows", "1").unwrap_err();
        assert!(e.contains("is empty"), "{e}");
    }

    #[test]
    fn assignment_splits_at_first_equals() {
        let mut t = Table::new();
        apply_assignment(&mut t, "a.b=x=y").unwrap();
        assert_eq!(t["a"]["b"], Value::String("x=y".into()));
        assert!(
            apply_assignment(&mut t, "novalue")
                .unwrap_err()
                .contains("key=value")
        );
    }
}
