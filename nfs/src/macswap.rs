//! `macswap`: swaps the Ethernet source and destination addresses (testpmd's `macswap` mode). It
//! touches the header segment only, so it costs the same in every datapath mode.
//!
//! The swap is the burst's own [`Burst::swap_ethernet_addresses`]: one pass over the live
//! packets with the headers prefetched a few packets ahead, one 16-byte shuffle per header on
//! x86-64 CPUs with SSSE3 (as testpmd's macswap does), no `unsafe` here.

use dataplane::{Burst, Counters, DropReason, NetworkFunction, NfContext};

use crate::registry::{BuildContext, NfSpec, no_defaults, no_memory, no_params};

/// The registration of `macswap`.
pub const SPEC: NfSpec = NfSpec {
    name: "macswap",
    aliases: &[],
    summary: "Swaps the Ethernet source and destination addresses (testpmd's macswap mode).",
    params: &[],
    defaults: no_defaults,
    drop_reasons: &[],
    build,
    memory: no_memory,
};

fn build(params: &toml::Table, _: &BuildContext) -> Result<Box<dyn NetworkFunction>, String> {
    no_params(SPEC.name, params)?;
    Ok(Box::<MacSwap>::default())
}

/// Swaps destination and source MAC addresses.
#[derive(Debug, Default)]
pub struct MacSwap {
    swapped: u64,
    truncated: u64,
}

impl NetworkFunction for MacSwap {
    fn name(&self) -> &str {
        SPEC.name
    }

    /// Never holds work for later.
    fn may_want_release(&self) -> bool {
        false
    }

    fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
        // Every live packet is swapped but the truncated ones: one count per burst instead of
        // one per packet.
        let live = burst.live_count() as u64;
        let truncated = burst.swap_ethernet_addresses(DropReason::TRUNCATED) as u64;
        self.swapped += live - truncated;
        self.truncated += truncated;
    }

    /// Zeroes the counts (the only state).
    fn reset(&mut self) -> bool {
        (self.swapped, self.truncated) = (0, 0);
        true
    }

    fn counters(&self) -> Counters {
        let mut c = Counters::new();
        c.count("swapped", self.swapped)
            .count("truncated", self.truncated);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::testkit::PacketFactory;
    use dataplane::{DatapathMode, Verdict};

    #[test]
    fn swaps_macs_only_in_every_mode() {
        let frame: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        for mode in DatapathMode::ALL {
            let f = PacketFactory::new(mode, 64, 1518, 4);
            let mut b = f.burst(&[frame.clone(), frame[..8].to_vec(), frame.clone()]);
            b.drop_packet(2, DropReason::POLICY);
            let mut m = MacSwap::default();
            m.process(&mut b, &NfContext::default());
            let mut want = frame.clone();
            want[..6].copy_from_slice(&frame[6..12]);
            want[6..12].copy_from_slice(&frame[..6]);
            assert_eq!(b.frame(0), want, "{mode}");
            assert_eq!(b.verdict(0), Verdict::tx(0));
            assert_eq!(b.verdict(1), Verdict::drop(DropReason::TRUNCATED));
            assert_eq!(b.frame(2), frame, "{mode}: a dropped packet is left alone");
            assert_eq!(m.counters()["swapped"], 1);
            assert_eq!(m.counters()["truncated"], 1);
        }
    }
}
