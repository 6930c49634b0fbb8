//! `io_fwd`: forwards every packet unchanged (DPDK testpmd's `io` mode). The baseline that
//! measures the driver and run loop alone.

use dataplane::{Burst, Counters, NetworkFunction, NfContext};

use crate::registry::{BuildContext, NfSpec, no_defaults, no_memory, no_params};

/// The registration of `io_fwd`.
pub const SPEC: NfSpec = NfSpec {
    name: "io_fwd",
    aliases: &["io-fwd"],
    summary: "Forwards every packet unchanged (testpmd's io mode): the driver and run loop alone.",
    params: &[],
    defaults: no_defaults,
    drop_reasons: &[],
    build,
    memory: no_memory,
};

fn build(params: &toml::Table, _: &BuildContext) -> Result<Box<dyn NetworkFunction>, String> {
    no_params(SPEC.name, params)?;
    Ok(Box::<IoFwd>::default())
}

/// Forwards packets without touching them.
#[derive(Debug, Default)]
pub struct IoFwd {
    packets: u64,
}

impl NetworkFunction for IoFwd {
    fn name(&self) -> &str {
        SPEC.name
    }

    fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
        self.packets += burst.len() as u64;
    }

    /// Never holds work for later.
    fn may_want_release(&self) -> bool {
        false
    }

    /// Zeroes the count (the only state).
    fn reset(&mut self) -> bool {
        self.packets = 0;
        true
    }

    fn counters(&self) -> Counters {
        let mut c = Counters::new();
        c.count("packets", self.packets);
        c
    }
}
