//! Building packets from byte frames without a NIC, in any datapath mode.
//!
//! Network-function tests, property tests and fuzz targets use [`PacketFactory`] to get packets
//! laid out exactly as a driver would lay them out (header segment of `split_offset` bytes, payload
//! in a host or nicmem buffer), so NFs are exercised against split packets from day one.

use nicmem::{BufPool, Host, Nic, NicMem, ProtectionDomain, Region};

use crate::mode::DatapathMode;
use crate::packet::{Packet, PacketMeta, Payload};

/// Makes packets from frames with the layout of a given datapath mode.
pub struct PacketFactory {
    mode: DatapathMode,
    split_offset: usize,
    hdr: BufPool<Host>,
    host_payload: BufPool<Host>,
    nic_payload: BufPool<Nic>,
    max_frame: usize,
}

impl PacketFactory {
    /// A factory for `mode` with the given split offset, able to hold `count` packets of up to
    /// `max_frame` bytes at once.
    pub fn new(mode: DatapathMode, split_offset: usize, max_frame: usize, count: usize) -> Self {
        let pd = ProtectionDomain::new();
        let hdr_size = if mode.splits() {
            split_offset
        } else {
            max_frame
        };
        let pay_size = max_frame.saturating_sub(split_offset).max(64).div_ceil(64) * 64;
        let dev = NicMem::new(pay_size * count);
        Self {
            mode,
            split_offset,
            hdr: BufPool::new(
                "tk-hdr",
                Region::host(hdr_size * count, pd),
                hdr_size,
                count,
            )
            .expect("testkit header pool"),
            host_payload: BufPool::new(
                "tk-pay",
                Region::host(pay_size * count, pd),
                pay_size,
                count,
            )
            .expect("testkit payload pool"),
            nic_payload: BufPool::new(
                "tk-nic",
                dev.alloc(pay_size * count, pd).expect("testkit nicmem"),
                pay_size,
                count,
            )
            .expect("testkit nicmem pool"),
            max_frame,
        }
    }

    /// The factory's mode.
    pub fn mode(&self) -> DatapathMode {
        self.mode
    }

    /// A packet holding `frame`, or `None` if the frame is longer than `max_frame` or a pool is
    /// exhausted.
    pub fn packet(&self, frame: &[u8]) -> Option<Packet> {
        if frame.len() > self.max_frame {
            return None;
        }
        let mut hdr = self.hdr.alloc()?;
        let hlen = if self.mode.splits() {
            frame.len().min(self.split_offset)
        } else {
            frame.len()
        };
        hdr.bytes_mut()[..hlen].copy_from_slice(&frame[..hlen]);
        let rest = &frame[hlen..];
        let payload = if rest.is_empty() {
            Payload::None
        } else if self.mode.uses_nicmem() {
            let mut b = self.nic_payload.alloc()?;
            b.device_write(0, rest).ok()?;
            Payload::Nic(b)
        } else {
            let mut b = self.host_payload.alloc()?;
            b.bytes_mut()[..rest.len()].copy_from_slice(rest);
            Payload::Host(b)
        };
        Packet::new(hdr, hlen, payload, frame.len(), PacketMeta::default()).ok()
    }

    /// The frame bytes of `pkt` (reads a nicmem payload through the counted slow path).
    pub fn frame(pkt: &Packet) -> Vec<u8> {
        let mut v = Vec::new();
        pkt.copy_frame(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::PayloadRef;

    #[test]
    fn layouts_per_mode_round_trip() {
        let frame: Vec<u8> = (0..200u8).collect();
        for mode in DatapathMode::ALL {
            let f = PacketFactory::new(mode, 64, 1518, 4);
            let p = f.packet(&frame).unwrap();
            assert_eq!(PacketFactory::frame(&p), frame, "{mode}");
            assert_eq!(p.frame_len(), 200);
            match mode {
                DatapathMode::Host => assert_eq!(p.segments(), 1),
                DatapathMode::Split => assert!(matches!(p.payload(), PayloadRef::Host(_))),
                _ => assert!(matches!(p.payload(), PayloadRef::Nic(_))),
            }
            let short = f.packet(&frame[..40]).unwrap();
            assert_eq!(short.segments(), 1);
            assert_eq!(short.header(), &frame[..40]);
        }
    }
}
