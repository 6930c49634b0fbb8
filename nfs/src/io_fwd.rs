//! `io-fwd`: forwards every packet unchanged (DPDK testpmd's `io` mode). The baseline that measures
//! the driver and run loop alone.

use dataplane::{Burst, NetworkFunction, NfContext};

/// Forwards packets without touching them.
#[derive(Debug, Default)]
pub struct IoFwd {
    packets: u64,
}

impl NetworkFunction for IoFwd {
    fn name(&self) -> &str {
        "io_fwd"
    }

    fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
        self.packets += burst.len() as u64;
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({ "packets": self.packets })
    }
}
