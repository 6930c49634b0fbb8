//! Builds network functions by name from a pipeline config.
//!
//! The run config lists the pipeline as an array of tables, each with a `name` and the function's
//! parameters:
//!
//! ```toml
//! [[pipeline]]
//! name = "macswap"
//! ```
//!
//! One instance per worker is built (state is per core).

use dataplane::NetworkFunction;

/// What a constructor knows about where its instance will run.
#[derive(Clone, Copy, Debug, Default)]
pub struct BuildContext {
    /// Index of the worker that will run this instance.
    pub worker: u16,
    /// Number of workers in the run.
    pub workers: u16,
}

/// Names accepted in `pipeline[].name`.
pub const NF_NAMES: &[&str] = &[
    "io_fwd",
    "macswap",
    "nat",
    "lb",
    "flow_counter",
    "work_package",
];

/// Builds the function `name` with `params` (the pipeline entry minus `name`). Errors name the
/// function and the offending key, and list what is allowed.
pub fn build(
    name: &str,
    params: &toml::Table,
    ctx: &BuildContext,
) -> Result<Box<dyn NetworkFunction>, String> {
    let nf_ctx = dataplane::NfContext {
        now_ns: 0,
        worker: ctx.worker,
        workers: ctx.workers,
    };
    for hook in [
        crate::nat::build,
        crate::lb::build,
        crate::flow_counter::build,
        crate::work_package::build,
    ] {
        if let Some(r) = hook(name, params, &nf_ctx) {
            return r;
        }
    }
    let no_params = |nf: Box<dyn NetworkFunction>| {
        if let Some(k) = params.keys().next() {
            Err(format!("`{name}` takes no parameters, found `{k}`"))
        } else {
            Ok(nf)
        }
    };
    match name {
        "io_fwd" | "io-fwd" => no_params(Box::<crate::io_fwd::IoFwd>::default()),
        "macswap" => no_params(Box::<crate::macswap::MacSwap>::default()),
        other => Err(format!(
            "unknown network function `{other}`; allowed: {}",
            NF_NAMES.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
