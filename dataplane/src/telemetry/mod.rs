//! DPDK's telemetry protocol (v2), so the tools operators already point at DPDK applications
//! (`dpdk-telemetry.py`, Telegraf's `dpdk` input, DPDK's Prometheus exporter) read a run on the
//! virtual NIC as they read one on DPDK ports.
//!
//! The protocol (DPDK's "Telemetry" guide, `lib/telemetry` in DPDK 22.11): a `SOCK_SEQPACKET`
//! Unix socket `dpdk_telemetry.v2` in the runtime directory of the application's file prefix
//! ([`runtime_dir`]); on connect the server sends a greeting `{"version", "pid",
//! "max_output_len"}`; each request is one message, a command starting with `/` and optional
//! parameters after the first `,` (`/ethdev/stats,0`); each reply is one message, a JSON object
//! with the command as its only key (`{"/ethdev/stats": {...}}`), `null` for an unknown command
//! or bad parameters.
//!
//! What a reply can hold is DPDK's data model, [`TelData`]: a string, a dictionary of numbers,
//! strings and flat arrays, or a flat array — no nesting beyond that, names of letters, digits,
//! `_` and `/` only, at most [`MAX_DICT_ENTRIES`] entries and [`MAX_ARRAY_ENTRIES`] elements,
//! strings shorter than [`MAX_STRING_LEN`], replies within [`MAX_OUTPUT_LEN`] bytes. nmdp's
//! commands are built in this model on every driver, so a command answers in the same shape on
//! the virtual NIC's socket ([`server`]) and when registered with EAL's own telemetry on DPDK
//! ports (`driver::dpdk::telemetry`, feature `dpdk`).

pub mod client;
pub mod server;

use std::path::PathBuf;

/// Largest reply, in bytes (DPDK's `MAX_OUTPUT_LEN`); entries that do not fit are left out.
pub const MAX_OUTPUT_LEN: usize = 16 * 1024;
/// Strings hold fewer bytes than this (DPDK's `RTE_TEL_MAX_STRING_LEN`, with its NUL).
pub const MAX_STRING_LEN: usize = 128;
/// Entries of a dictionary (DPDK's `RTE_TEL_MAX_DICT_ENTRIES`).
pub const MAX_DICT_ENTRIES: usize = 256;
/// Elements of an array (DPDK's `RTE_TEL_MAX_ARRAY_ENTRIES`).
pub const MAX_ARRAY_ENTRIES: usize = 512;
/// Longest command name, in bytes (DPDK's `MAX_CMD_LEN` less its NUL).
pub const MAX_CMD_LEN: usize = 55;
/// Longest help text of a command, in bytes (DPDK's `MAX_HELP_LEN` less its NUL).
pub const MAX_HELP_LEN: usize = 63;
/// The socket's file name in the runtime directory.
pub const SOCKET_NAME: &str = "dpdk_telemetry.v2";

/// A flat array: every element of one type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TelArray {
    /// Unsigned 64-bit numbers.
    U64(Vec<u64>),
    /// Signed 32-bit numbers.
    Int(Vec<i32>),
    /// Strings.
    Str(Vec<String>),
}

impl TelArray {
    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            TelArray::U64(v) => v.len(),
            TelArray::Int(v) => v.len(),
            TelArray::Str(v) => v.len(),
        }
    }

    /// True when it has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn clamp(mut self) -> Self {
        match &mut self {
            TelArray::U64(v) => v.truncate(MAX_ARRAY_ENTRIES),
            TelArray::Int(v) => v.truncate(MAX_ARRAY_ENTRIES),
            TelArray::Str(v) => {
                v.truncate(MAX_ARRAY_ENTRIES);
                for s in v.iter_mut() {
                    clamp_str(s);
                }
            }
        }
        self
    }
}

/// One value of a dictionary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TelValue {
    /// An unsigned 64-bit number.
    U64(u64),
    /// A signed 32-bit number.
    Int(i32),
    /// A string.
    Str(String),
    /// A flat array.
    Array(TelArray),
}

/// A dictionary: names (letters, digits, `_`, `/`) to values, in insertion order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TelDict(Vec<(String, TelValue)>);

impl TelDict {
    /// An empty dictionary.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `name` -> `value`: other characters of the name become `_`, a string is cut to
    /// fit, an entry past [`MAX_DICT_ENTRIES`] is left out (as DPDK refuses it).
    pub fn put(&mut self, name: &str, value: TelValue) -> &mut Self {
        if self.0.len() < MAX_DICT_ENTRIES {
            let value = match value {
                TelValue::Str(mut s) => {
                    clamp_str(&mut s);
                    TelValue::Str(s)
                }
                TelValue::Array(a) => TelValue::Array(a.clamp()),
                v => v,
            };
            self.0.push((tel_name(name), value));
        }
        self
    }

    /// Adds an unsigned number.
    pub fn u64(&mut self, name: &str, v: u64) -> &mut Self {
        self.put(name, TelValue::U64(v))
    }

    /// Adds a signed number.
    pub fn int(&mut self, name: &str, v: i32) -> &mut Self {
        self.put(name, TelValue::Int(v))
    }

    /// Adds a string.
    pub fn str(&mut self, name: &str, v: impl Into<String>) -> &mut Self {
        self.put(name, TelValue::Str(v.into()))
    }

    /// Adds an array.
    pub fn array(&mut self, name: &str, v: TelArray) -> &mut Self {
        self.put(name, TelValue::Array(v))
    }

    /// The value of `name`, if any.
    pub fn get(&self, name: &str) -> Option<&TelValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &TelValue)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when it has no entry.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A command's reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TelData {
    /// No data: the command is unknown or its parameters are wrong (`{"<cmd>": null}`).
    Null,
    /// A string (nmdp's commands answer errors this way: `error: ...`).
    Str(String),
    /// A dictionary.
    Dict(TelDict),
    /// A flat array.
    Array(TelArray),
}

impl TelData {
    /// An error reply: the string `error: <msg>`.
    pub fn error(msg: impl std::fmt::Display) -> Self {
        let mut s = format!("error: {msg}");
        clamp_str(&mut s);
        TelData::Str(s)
    }

    /// The reply as the protocol sends it: `{"<cmd>":<data>}`, compact, at most
    /// [`MAX_OUTPUT_LEN`] bytes (dictionary entries and array elements that do not fit are left
    /// out, as DPDK does).
    pub fn to_reply(&self, cmd: &str) -> String {
        let mut out = String::with_capacity(256);
        out.push('{');
        json_str(&mut out, cmd);
        out.push(':');
        // Room for the closing brace.
        self.json_into(&mut out, MAX_OUTPUT_LEN - 1);
        out.push('}');
        out
    }

    /// True when the reply to `cmd` fits in [`MAX_OUTPUT_LEN`] whole, nothing left out (a
    /// table cut by [`TelData::to_reply`] would lose whole columns, so tables are sized to fit).
    pub fn fits(&self, cmd: &str) -> bool {
        let mut out = String::new();
        json_str(&mut out, cmd);
        // `{`, `:` and `}` around the name and the data.
        let overhead = out.len() + 3;
        out.clear();
        self.json_into(&mut out, usize::MAX);
        overhead + out.len() <= MAX_OUTPUT_LEN
    }

    /// The data alone as JSON (the greeting is a bare dictionary).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.json_into(&mut out, MAX_OUTPUT_LEN);
        out
    }

    /// Appends the data as JSON, leaving out what would take `out` past `budget` bytes.
    fn json_into(&self, out: &mut String, budget: usize) {
        match self {
            TelData::Null => out.push_str("null"),
            TelData::Str(s) => json_str(out, s),
            TelData::Array(a) => {
                let left = budget.saturating_sub(out.len());
                array_json(out, a, left)
            }
            TelData::Dict(d) => {
                out.push('{');
                let mut first = true;
                for (name, v) in &d.0 {
                    let mut e = String::new();
                    if !first {
                        e.push(',');
                    }
                    json_str(&mut e, name);
                    e.push(':');
                    match v {
                        TelValue::U64(n) => e.push_str(&n.to_string()),
                        TelValue::Int(n) => e.push_str(&n.to_string()),
                        TelValue::Str(s) => json_str(&mut e, s),
                        TelValue::Array(a) => {
                            let left = budget.saturating_sub(out.len() + e.len() + 1);
                            array_json(&mut e, a, left);
                        }
                    }
                    if out.len() + e.len() < budget {
                        out.push_str(&e);
                        first = false;
                    }
                }
                out.push('}');
            }
        }
    }
}

/// Appends `a` as a JSON array, leaving out elements past `budget` bytes.
fn array_json(out: &mut String, a: &TelArray, budget: usize) {
    let start = out.len();
    out.push('[');
    let mut n = 0;
    let mut push = |out: &mut String, item: String| {
        let need = item.len() + usize::from(n > 0) + 1;
        if out.len() - start + need <= budget {
            if n > 0 {
                out.push(',');
            }
            out.push_str(&item);
            n += 1;
        }
    };
    match a {
        TelArray::U64(v) => v.iter().for_each(|x| push(out, x.to_string())),
        TelArray::Int(v) => v.iter().for_each(|x| push(out, x.to_string())),
        TelArray::Str(v) => v.iter().for_each(|x| {
            let mut s = String::new();
            json_str(&mut s, x);
            push(out, s)
        }),
    }
    out.push(']');
}

fn json_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::Value::from(s).to_string());
}

/// Cuts `s` to fewer than [`MAX_STRING_LEN`] bytes at a character boundary.
fn clamp_str(s: &mut String) {
    if s.len() >= MAX_STRING_LEN {
        let mut end = MAX_STRING_LEN - 1;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// A dictionary name as DPDK accepts it: letters, digits, `_` and `/` (anything else becomes
/// `_`), shorter than [`MAX_STRING_LEN`].
pub fn tel_name(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '/' {
                c
            } else {
                '_'
            }
        })
        .collect();
    clamp_str(&mut s);
    s
}

/// DPDK's runtime directory of file prefix `prefix`, where its telemetry socket lives:
/// `$RUNTIME_DIRECTORY/dpdk/<prefix>` when that variable is set (systemd), else
/// `/var/run/dpdk/<prefix>` for root, else `$XDG_RUNTIME_DIR/dpdk/<prefix>` (or
/// `/tmp/dpdk/<prefix>`): where `dpdk-telemetry.py -f <prefix>` looks.
pub fn runtime_dir(prefix: &str) -> PathBuf {
    let base = match std::env::var_os("RUNTIME_DIRECTORY") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ if crate::unix::effective_uid() == 0 => PathBuf::from("/var/run"),
        _ => std::env::var_os("XDG_RUNTIME_DIR")
            .filter(|d| !d.is_empty())
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from),
    };
    base.join("dpdk").join(prefix)
}

/// The socket of instance `instance` of prefix `prefix`: `dpdk_telemetry.v2` for the first,
/// `dpdk_telemetry.v2:<n>` for later ones (`dpdk-telemetry.py -f <prefix> -i <n>`).
pub fn socket_path(prefix: &str, instance: u32) -> PathBuf {
    instance_path(&runtime_dir(prefix), instance)
}

/// The socket of instance `instance` in runtime directory `dir` (see [`socket_path`]).
pub fn instance_path(dir: &std::path::Path, instance: u32) -> PathBuf {
    if instance == 0 {
        dir.join(SOCKET_NAME)
    } else {
        dir.join(format!("{SOCKET_NAME}:{instance}"))
    }
}

/// Checks a file prefix: a non-empty name of letters, digits, `-`, `_` and `.`, not `.` or
/// `..` (it names a directory).
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    let ok = !prefix.is_empty()
        && prefix != "."
        && prefix != ".."
        && prefix.len() < 64
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{prefix}` is not a file prefix; allowed: 1 to 63 letters, digits, `-`, `_`, `.` \
             (it names the directory of the socket, as DPDK's --file-prefix)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_dpdk_shaped() {
        let mut d = TelDict::new();
        d.u64("ipackets", 7)
            .int("pid", -1)
            .str("mode", "nic-inline")
            .array("q_ipackets", TelArray::U64(vec![1, 2]))
            .str("drops.no mapping", "x");
        let r = TelData::Dict(d).to_reply("/ethdev/stats");
        assert_eq!(
            r,
            r#"{"/ethdev/stats":{"ipackets":7,"pid":-1,"mode":"nic-inline","q_ipackets":[1,2],"drops_no_mapping":"x"}}"#
        );
        assert_eq!(TelData::Null.to_reply("/x"), r#"{"/x":null}"#);
        assert_eq!(
            TelData::Array(TelArray::Int(vec![0])).to_reply("/ethdev/list"),
            r#"{"/ethdev/list":[0]}"#
        );
        assert_eq!(
            TelData::error("no \"such\" port").to_reply("/a"),
            r#"{"/a":"error: no \"such\" port"}"#
        );
    }

    #[test]
    fn limits_are_dpdks() {
        let mut d = TelDict::new();
        for i in 0..300 {
            d.u64(&format!("k{i}"), i);
        }
        assert_eq!(d.len(), MAX_DICT_ENTRIES);
        d = TelDict::new();
        d.str("long", "é".repeat(200));
        let Some(TelValue::Str(s)) = d.get("long") else {
            panic!()
        };
        assert!(s.len() < MAX_STRING_LEN && s.len() >= MAX_STRING_LEN - 2);
        let big = TelArray::Str((0..600).map(|i| format!("{i:0>100}")).collect());
        let mut d = TelDict::new();
        d.array("a", big).u64("after", 1);
        let r = TelData::Dict(d).to_reply("/big");
        assert!(r.len() <= MAX_OUTPUT_LEN, "{}", r.len());
        let v: serde_json::Value = serde_json::from_str(&r).expect("still valid JSON");
        let n = v["/big"]["a"].as_array().unwrap().len();
        assert!(n > 100 && n < 512, "{n}");
    }

    #[test]
    fn fits_says_whether_nothing_would_be_left_out() {
        let table = |rows: usize| {
            let mut d = TelDict::new();
            d.array(
                "a",
                TelArray::Str((0..rows).map(|i| format!("{i:0>100}")).collect()),
            );
            TelData::Dict(d)
        };
        // 103 bytes per element: 158 fit in 16 KiB with the name and the braces, 160 do not.
        assert!(table(150).fits("/big"));
        assert!(!table(160).fits("/big"));
        let r = table(150).to_reply("/big");
        let v: serde_json::Value = serde_json::from_str(&r).unwrap();
        assert_eq!(v["/big"]["a"].as_array().unwrap().len(), 150);
    }

    #[test]
    fn prefixes_name_a_directory() {
        assert!(check_prefix("nmdp").is_ok() && check_prefix("nmdp-test.2").is_ok());
        for bad in ["", "..", "a/b", "x y"] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
        assert!(socket_path("p", 0).ends_with("dpdk/p/dpdk_telemetry.v2"));
        assert!(socket_path("p", 2).ends_with("dpdk/p/dpdk_telemetry.v2:2"));
    }
}
