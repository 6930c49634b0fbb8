//! `macswap`: swaps the Ethernet source and destination addresses (testpmd's `macswap` mode). It
//! touches the header segment only, so it costs the same in every datapath mode.
//!
//! The walk is the one every NF of this crate uses: the headers a few packets ahead are
//! prefetched ([`crate::common::PREFETCH_AHEAD`]) while the current one is rewritten, so their
//! cache misses overlap the work instead of stalling each packet in turn.

use dataplane::{Burst, DropReason, NetworkFunction, NfContext};

use crate::common::{PREFETCH_AHEAD, prefetch_start};

/// Swaps destination and source MAC addresses.
#[derive(Debug, Default)]
pub struct MacSwap {
    swapped: u64,
    truncated: u64,
}

impl NetworkFunction for MacSwap {
    fn name(&self) -> &str {
        "macswap"
    }

    fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
        prefetch_start(burst);
        for i in 0..burst.len() {
            burst.prefetch(i + PREFETCH_AHEAD);
            if !burst.is_live(i) {
                continue;
            }
            let h = burst.header_mut(i);
            let Some(macs) = h.get_mut(..12) else {
                burst.drop_packet(i, DropReason::TRUNCATED);
                self.truncated += 1;
                continue;
            };
            let (dst, src) = macs.split_at_mut(6);
            dst.swap_with_slice(src);
            self.swapped += 1;
        }
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({ "swapped": self.swapped, "truncated": self.truncated })
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
            assert_eq!(m.stats()["swapped"], 1);
            assert_eq!(m.stats()["truncated"], 1);
        }
    }
}
