//! The registry of network functions: everything the rest of the house needs to know about an
//! NF, given in one place, the NF's [`NfSpec`].
//!
//! A spec names the function (its canonical name and the aliases a config may use), documents
//! its parameters with their defaults, lists the drop reasons it registers, builds an instance
//! per worker, and estimates the memory an instance allocates. From the specs follow:
//!
//! - building a pipeline from a config ([`crate::build`], names resolved through aliases first);
//! - the CPU model's cost key `host.cycles.nf.<canonical name>` ([`NfSpec::cost_key`]), which the
//!   run configuration looks up in the hardware profile for virtual-time runs (a missing key is
//!   an error naming it, never a free NF);
//! - the config checker's memory estimate ([`NfSpec::memory`]);
//! - the reference of every NF (`dataplane nfs`, [`crate::reference_markdown`]).
//!
//! The list of specs is [`crate::REGISTRY`], one line per NF in `nfs/src/lib.rs`: adding an NF is
//! one new file (its code, its spec, its tests) and one line there.
//!
//! The run config lists the pipeline as an array of tables, each with a `name` and the
//! function's parameters:
//!
//! ```toml
//! [[pipeline]]
//! name = "macswap"
//! ```
//!
//! One instance per worker is built (state is per core).

use dataplane::{Counters, DropCounts, DropReason, NetworkFunction};
use serde::Serialize;

/// What a constructor knows about where its instance will run.
#[derive(Clone, Debug, Default)]
pub struct BuildContext {
    /// Index of the worker that will run this instance.
    pub worker: u16,
    /// Number of workers in the run.
    pub workers: u16,
    /// The run's network layer (ports' addresses, routes, neighbours), when it has one: what
    /// the `route` stage forwards by.
    pub net: Option<std::sync::Arc<dataplane::net::Network>>,
}

impl BuildContext {
    /// Worker `worker` of `workers`, in a run without a network layer.
    pub fn new(worker: u16, workers: u16) -> Self {
        Self {
            worker,
            workers,
            net: None,
        }
    }
}

/// One parameter of an NF: its name in the pipeline entry and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    /// The key in the `[[pipeline]]` entry.
    pub name: &'static str,
    /// What it sets, with its unit and allowed values.
    pub doc: &'static str,
}

/// Builds one worker's instance of a function from its pipeline entry (see [`NfSpec::build`]).
pub type BuildFn = fn(&toml::Table, &BuildContext) -> Result<Box<dyn NetworkFunction>, String>;

/// A drop reason an NF registers: its snake_case name and what it means.
pub type Reason = (&'static str, &'static str);

/// Host memory one instance allocates for its parameters, for the config checker: the
/// parameter that drives it (`flows`), its value as written, and the bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Memory {
    /// The parameter whose value drives the allocation.
    pub key: &'static str,
    /// That parameter's value, as the user would write it.
    pub value: String,
    /// Bytes of host memory one worker's instance writes.
    pub bytes: u64,
}

/// Everything about one network function (see the module docs).
#[derive(Clone, Copy)]
pub struct NfSpec {
    /// The canonical name: what `pipeline[].name` is, what the docs and the CPU-cost key use.
    pub name: &'static str,
    /// Other names a config may use; they resolve to [`NfSpec::name`] before anything is
    /// looked up.
    pub aliases: &'static [&'static str],
    /// What the function does, in one sentence.
    pub summary: &'static str,
    /// Its parameters (every key its pipeline entry accepts).
    pub params: &'static [Param],
    /// The default of every parameter that has one (a parameter missing here is unset by
    /// default).
    pub defaults: fn() -> toml::Table,
    /// The drop reasons it registers besides the core ones.
    pub drop_reasons: &'static [Reason],
    /// Builds one worker's instance from the pipeline entry (without `name`). Errors name the
    /// function and the key, and say what is allowed.
    pub build: BuildFn,
    /// The host memory one worker's instance will allocate for these parameters, if any grows
    /// with them (`None` also when the parameters do not parse: building reports that).
    pub memory: fn(&toml::Table, &BuildContext) -> Option<Memory>,
}

impl std::fmt::Debug for NfSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NfSpec").field("name", &self.name).finish()
    }
}

impl NfSpec {
    /// The hardware profile key of its CPU cost per packet in virtual time:
    /// `host.cycles.nf.<name>`.
    pub fn cost_key(&self) -> String {
        format!("host.cycles.nf.{}", self.name)
    }

    /// True when `name` is this function's name or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

/// The parameters of a config type with defaults, as the table a pipeline entry would hold
/// (for [`NfSpec::defaults`]).
pub fn defaults_of<T: Default + Serialize>() -> toml::Table {
    toml::Table::try_from(T::default()).unwrap_or_default()
}

/// For [`NfSpec::defaults`] of a function without parameters.
pub fn no_defaults() -> toml::Table {
    toml::Table::new()
}

/// For [`NfSpec::memory`] of a function whose memory does not grow with its parameters.
pub fn no_memory(_: &toml::Table, _: &BuildContext) -> Option<Memory> {
    None
}

/// Fails unless `params` is empty (for functions that take none).
pub fn no_params(nf: &str, params: &toml::Table) -> Result<(), String> {
    match params.keys().next() {
        Some(k) => Err(format!("`{nf}` takes no parameters, found `{k}`")),
        None => Ok(()),
    }
}

/// The spec in `specs` of the function a config calls `name` (canonical name or alias).
pub fn lookup_in(specs: &[&'static NfSpec], name: &str) -> Option<&'static NfSpec> {
    specs.iter().copied().find(|s| s.answers_to(name))
}

/// Builds the function `name` of `specs` (canonical name or alias) with `params` (the pipeline
/// entry minus `name`). Errors name the function and the offending key, and list what is
/// allowed.
pub fn build_in(
    specs: &[&'static NfSpec],
    name: &str,
    params: &toml::Table,
    ctx: &BuildContext,
) -> Result<Box<dyn NetworkFunction>, String> {
    let spec = lookup_in(specs, name).ok_or_else(|| {
        let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
        format!(
            "unknown network function `{name}`; allowed: {}",
            names.join(", ")
        )
    })?;
    (spec.build)(params, ctx)
}

/// Registers one of an NF's drop reasons (see [`DropReason::register`]) when the NF is built,
/// never per packet. Every name in a spec is a snake_case literal and the process holds far more
/// codes than the NFs have reasons, so the only failure left is a process that registered
/// [`DropReason::MAX`] reasons: an error naming the function.
pub fn register_reason(nf: &str, reason: Reason) -> Result<DropReason, String> {
    DropReason::register(reason.0, reason.1)
        .map_err(|e| format!("{nf}: cannot register drop reason: {e}"))
}

/// The drop counts as counters `{reason: count}` with every core reason and every reason in
/// `own` (the function's registered ones), zeros included, so merged reports always have the
/// same keys whatever the traffic was.
pub fn drop_counters(d: &DropCounts, own: &[DropReason]) -> Counters {
    let mut c = Counters::new();
    for r in DropReason::core().chain(own.iter().copied()) {
        c.count(r.name(), d.get(r));
    }
    c
}

/// The reference of the NFs of `specs` in Markdown: name and aliases, what it does, its
/// parameters with defaults, its drop reasons and its CPU-cost key.
pub fn reference_markdown_of(specs: &[&'static NfSpec]) -> String {
    let mut out = String::new();
    for s in specs {
        out.push_str(&format!("## `{}`\n\n{}\n\n", s.name, s.summary));
        if !s.aliases.is_empty() {
            let a: Vec<String> = s.aliases.iter().map(|a| format!("`{a}`")).collect();
            out.push_str(&format!("Also accepted as: {}.\n\n", a.join(", ")));
        }
        let defaults = (s.defaults)();
        if s.params.is_empty() {
            out.push_str("Parameters: none.\n\n");
        } else {
            out.push_str("| parameter | default | what it sets |\n|---|---|---|\n");
            for p in s.params {
                let d = defaults
                    .get(p.name)
                    .map_or_else(|| "unset".to_string(), |v| format!("`{v}`"));
                out.push_str(&format!("| `{}` | {d} | {} |\n", p.name, p.doc));
            }
            out.push('\n');
        }
        if !s.drop_reasons.is_empty() {
            out.push_str("Drop reasons of its own:\n\n");
            for (n, d) in s.drop_reasons {
                out.push_str(&format!("- `{n}`: {d}\n"));
            }
            out.push('\n');
        }
        out.push_str(&format!(
            "CPU cost per packet in virtual time: `{}` in the hardware profile.\n\n",
            s.cost_key()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{REGISTRY, build, lookup, reference_markdown};
    use std::collections::BTreeSet;

    #[test]
    fn unknown_names_and_params_are_errors() {
        let ctx = BuildContext::default();
        let e = build("natt", &toml::Table::new(), &ctx).err().unwrap();
        assert!(e.contains("natt") && e.contains("macswap"), "{e}");
        let mut p = toml::Table::new();
        p.insert("x".into(), toml::Value::Integer(1));
        assert!(build("macswap", &p, &ctx).err().unwrap().contains("`x`"));
        assert_eq!(
            build("io_fwd", &toml::Table::new(), &ctx).unwrap().name(),
            "io_fwd"
        );
    }

    #[test]
    fn names_and_aliases_are_unique_and_resolve() {
        let mut seen = BTreeSet::new();
        for s in REGISTRY {
            for n in std::iter::once(&s.name).chain(s.aliases) {
                assert!(seen.insert(*n), "`{n}` registered twice");
                assert_eq!(lookup(n).map(|x| x.name), Some(s.name));
            }
            assert_eq!(s.cost_key(), format!("host.cycles.nf.{}", s.name));
        }
    }

    /// The documented parameters are exactly the keys each function accepts (read from the
    /// parser's own list of expected keys), and every default is a documented parameter.
    #[test]
    fn every_parameter_is_documented_with_its_default() {
        let ctx = BuildContext::new(0, 1);
        for s in REGISTRY {
            let mut p = toml::Table::new();
            p.insert("no_such_key".into(), toml::Value::Integer(1));
            let e = (s.build)(&p, &ctx)
                .err()
                .expect("an unknown key is refused");
            assert!(e.contains("no_such_key"), "{}: {e}", s.name);
            // serde: "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, ...".
            let accepted: BTreeSet<&str> = match e.split_once("expected ") {
                Some((_, list)) => list.split('`').skip(1).step_by(2).collect(),
                None => BTreeSet::new(),
            };
            let documented: BTreeSet<&str> = s.params.iter().map(|p| p.name).collect();
            assert_eq!(
                documented, accepted,
                "{}: parameters and docs differ",
                s.name
            );
            for k in (s.defaults)().keys() {
                assert!(documented.contains(k.as_str()), "{}: default `{k}`", s.name);
            }
            assert!(s.params.iter().all(|p| !p.doc.is_empty()), "{}", s.name);
        }
    }

    #[test]
    fn the_reference_names_every_function_and_parameter() {
        let md = reference_markdown();
        for s in REGISTRY {
            assert!(md.contains(&format!("## `{}`", s.name)));
            assert!(md.contains(&s.cost_key()));
            for p in s.params {
                assert!(md.contains(&format!("| `{}` |", p.name)), "{}", p.name);
            }
            for (r, _) in s.drop_reasons {
                assert!(md.contains(&format!("- `{r}`:")), "{r}");
            }
        }
    }
}
