//! `--set key=value` overrides on any TOML table.
//!
//! Hardware profiles and run configs are TOML; sweeps and one-off experiments change a single
//! constant (`--set nic.pcie.mps=128`) without editing the file. The override is applied to the
//! parsed [`toml::Table`] *before* it is deserialised into a typed config, so the typed layer's
//! validation (unknown keys, allowed values) still runs on the result. This module is generic
//! over any table and knows nothing about profiles.

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

/// Sets the dotted `key` (e.g. `nic.pcie.mps`) in `table` to the parsed `value`
/// (see [`parse_value`]), creating missing intermediate tables.
///
/// Errors (naming the key) when a path segment is empty, when the path crosses a value that is
/// not a table, or when the final key currently holds a table (replacing a whole section with a
/// scalar is almost always a typo).
pub fn apply_set(table: &mut Table, key: &str, value: &str) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').map(str::trim).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("invalid key `{key}`: empty path segment"));
    }
    let (last, parents) = parts.split_last().expect("split always yields one part");
    let mut cur = table;
    for (i, part) in parents.iter().enumerate() {
        let entry = cur
            .entry(part.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        cur = match entry {
            Value::Table(t) => t,
            other => {
                return Err(format!(
                    "cannot set `{key}`: `{}` is a {}, not a table",
                    parts[..=i].join("."),
                    other.type_str()
                ));
            }
        };
    }
    if let Some(Value::Table(_)) = cur.get(*last) {
        return Err(format!(
            "cannot set `{key}`: it is a table; set one of its keys (e.g. `{key}.<name>=...`)"
        ));
    }
    cur.insert(last.to_string(), parse_value(value));
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
