//! `macswap`: swaps the Ethernet source and destination addresses (testpmd's `macswap` mode). It
//! touches the header segment only, so it costs the same in every datapath mode.

use dataplane::{Burst, DropReason, NetworkFunction, NfContext};

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
        for (pkt, verdict) in burst.iter_mut() {
            if verdict.is_drop() {
                continue;
            }
            let h = pkt.header_mut();
            if h.len() < 12 {
                *verdict = dataplane::Verdict::Drop(DropReason::Truncated);
                self.truncated += 1;
                continue;
            }
            let (dst, src) = h[..12].split_at_mut(6);
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
        let mut frame: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        for mode in DatapathMode::ALL {
            let f = PacketFactory::new(mode, 64, 1518, 4);
            let mut b = Burst::with_capacity(4);
            b.push(f.packet(&frame).unwrap(), Verdict::Tx(0)).unwrap();
            b.push(f.packet(&frame[..8]).unwrap(), Verdict::Tx(0))
                .unwrap();
            MacSwap::default().process(&mut b, &NfContext::default());
            let out = PacketFactory::frame(b.packet(0));
            let mut want = frame.clone();
            want[..6].copy_from_slice(&frame[6..12]);
            want[6..12].copy_from_slice(&frame[..6]);
            assert_eq!(out, want, "{mode}");
            assert_eq!(b.verdict(1), Verdict::Drop(DropReason::Truncated));
        }
        frame.clear();
    }
}
