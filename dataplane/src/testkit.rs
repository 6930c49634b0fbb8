//! Building bursts from byte frames without a NIC, in any datapath mode.
//!
//! Network-function tests, property tests and fuzz targets use [`PacketFactory`] to get packets
//! laid out exactly as the virtual NIC lays them out (a header segment of `split_offset` bytes
//! with headroom before it, the payload in a host or nicmem buffer), so network functions are
//! exercised against split packets from day one. Tests of DPDK ports' recovery outside this
//! crate raise a device reset with `raise_dpdk_reset` (feature `dpdk`), as no vdev raises one.

use nicmem::{BufPool, Host, Nic, NicMem, ProtectionDomain, Region};

use crate::arena::{PacketArena, header_buffer_size};
use crate::burst::{Burst, MAX_BURST, RxPacket};
use crate::mode::DatapathMode;
use crate::packet::PayloadRing;
use crate::verdict::Verdict;

/// Makes packets from frames with the layout of a given datapath mode.
pub struct PacketFactory {
    mode: DatapathMode,
    split_offset: usize,
    max_frame: usize,
    arena: PacketArena,
    owner: std::sync::Arc<dyn crate::packet::PacketOwner>,
    _nicmem: NicMem,
}

impl PacketFactory {
    /// A factory for `mode` with the given split offset, able to hold `count` packets of up to
    /// `max_frame` bytes at once.
    pub fn new(mode: DatapathMode, split_offset: usize, max_frame: usize, count: usize) -> Self {
        let pd = ProtectionDomain::new();
        let count = count.max(1);
        let hdr_bytes = if mode.splits() {
            split_offset
        } else {
            max_frame
        };
        let hdr_size = header_buffer_size(hdr_bytes);
        let pay_size = max_frame.saturating_sub(split_offset).max(64).div_ceil(64) * 64;
        let dev = NicMem::new(pay_size * count);
        let hdr = BufPool::<Host>::new(
            "tk-hdr",
            Region::host(hdr_size * count, pd),
            hdr_size,
            count,
        )
        .expect("testkit header pool");
        let pay = mode.splits().then(|| {
            BufPool::<Host>::new(
                "tk-pay",
                Region::host(pay_size * count, pd),
                pay_size,
                count,
            )
            .expect("testkit payload pool")
        });
        let nic = mode.uses_nicmem().then(|| {
            BufPool::<Nic>::new(
                "tk-nic",
                dev.alloc(pay_size * count, pd).expect("testkit nicmem"),
                pay_size,
                count,
            )
            .expect("testkit nicmem pool")
        });
        let arena = PacketArena::new(hdr, pay, nic).expect("testkit arena");
        Self {
            mode,
            split_offset,
            max_frame,
            owner: arena.owner(),
            arena,
            _nicmem: dev,
        }
    }

    /// The factory's mode.
    pub fn mode(&self) -> DatapathMode {
        self.mode
    }

    /// Appends a packet holding `frame` to `burst` (receive port 0, verdict `Tx(0)`). `false`
    /// when the frame is longer than `max_frame`, a pool is exhausted, the burst is full or it
    /// holds packets of another owner.
    pub fn push(&self, burst: &mut Burst, frame: &[u8]) -> bool {
        if frame.len() > self.max_frame || burst.room() == 0 || !burst.adopt(&self.owner) {
            return false;
        }
        let l = self.arena.layout();
        let Some(h) = self.arena.header_pool().alloc_index_shared() else {
            return false;
        };
        let hlen = if self.mode.splits() {
            frame.len().min(self.split_offset)
        } else {
            frame.len()
        };
        let rest = &frame[hlen..];
        let (ring, payload) = if rest.is_empty() {
            (PayloadRing::None, 0)
        } else if self.mode.uses_nicmem() {
            let pool = self.arena.nic_payload_pool().expect("nicmem pool");
            let Some(p) = pool.alloc_index_shared() else {
                // SAFETY: `h` was just allocated and is given back unused.
                unsafe { self.arena.header_pool().free_index_shared(h) };
                return false;
            };
            let dst = l.nic.expect("nicmem layout").ptr(p);
            // SAFETY: buffer `p` was just allocated (owned here) and holds `pay_size >=
            // max_frame - split_offset >= rest.len()` bytes; modeled nicmem is host memory.
            unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), dst, rest.len()) };
            (PayloadRing::Primary, p)
        } else {
            let pool = self.arena.host_payload_pool().expect("payload pool");
            let Some(p) = pool.alloc_index_shared() else {
                // SAFETY: `h` was just allocated and is given back unused.
                unsafe { self.arena.header_pool().free_index_shared(h) };
                return false;
            };
            let dst = l.pay.expect("payload layout").ptr(p);
            // SAFETY: as above, in a host payload buffer.
            unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), dst, rest.len()) };
            (PayloadRing::Secondary, p)
        };
        // SAFETY: `h` was just allocated and is owned here; its header segment holds `hlen <=
        // header capacity` bytes (sized from the split offset or max_frame).
        unsafe {
            *l.meta(h) = crate::arena::PacketMeta {
                payload,
                ring,
                arrival: 0,
            };
            std::ptr::copy_nonoverlapping(frame.as_ptr(), l.header_ptr(h), hlen);
        }
        let p = RxPacket {
            handle: h as usize,
            hdr: l.header_ptr(h),
            hdr_len: hlen as u16,
            headroom: crate::arena::HEADROOM as u16,
            frame_len: frame.len() as u32,
            ring,
            rss_hash: 0,
        };
        let from = burst.len();
        // SAFETY: the burst adopted this factory's arena as owner; the header pointer names
        // `hlen` bytes of buffer `h` with `HEADROOM` bytes before them, owned by this packet.
        let pushed = unsafe { burst.push(&p) };
        debug_assert!(pushed, "room was checked");
        burst.set_rx_defaults(from, 0, Verdict::tx(0));
        true
    }

    /// A burst holding `frames` (at most [`MAX_BURST`]; panics if a pool runs dry: size the
    /// factory for the test).
    pub fn burst(&self, frames: &[Vec<u8>]) -> Burst {
        let mut b = Burst::with_capacity(frames.len().clamp(1, MAX_BURST));
        for f in frames {
            assert!(self.push(&mut b, f), "testkit: cannot hold another packet");
        }
        b
    }

    /// Packets of this factory currently held (in bursts or leaked).
    pub fn in_use(&self) -> usize {
        self.arena.header_pool().stats().in_use as usize
    }

    /// Returns packets by handle (for tests that took handles out of a burst).
    pub fn free_handles(&self, handles: &[usize]) {
        self.owner.free(handles);
    }
}

/// Two addressed ports for network tests: port 0 `in` with `inside`, port 1 `out` with
/// `outside` (prefixes such as `"10.0.1.1/24"`), each with its locally administered MAC.
/// Panics on a malformed prefix: the addresses are a test's constants.
pub fn inside_outside_ports(inside: &str, outside: &str) -> Vec<crate::net::PortAddr> {
    [("in", inside), ("out", outside)]
        .iter()
        .enumerate()
        .map(|(i, (name, prefix))| crate::net::PortAddr {
            name: (*name).into(),
            mac: crate::net::MacAddr::local_for_port(i as u16),
            ip: Some(prefix.parse().expect("a test's port prefix")),
        })
        .collect()
}

/// Lets a virtual NIC queue that a test or fuzz target drove by hand finish: receive what the
/// wire still holds, send it back, flush, until the queue is idle or `rounds` passes have run.
/// Returns the drops the passes counted.
pub fn forward_until_idle(
    q: &mut crate::driver::vnic::VnicQueue,
    burst: &mut Burst,
    rounds: usize,
) -> crate::verdict::DropCounts {
    use crate::port::Queue;
    let mut drops = crate::verdict::DropCounts::default();
    for _ in 0..rounds {
        q.rx_burst(burst);
        q.tx_burst(burst, &mut drops);
        q.flush();
        if q.idle() {
            break;
        }
    }
    drops
}

/// Runs a DPDK port's reset callback as its PMD would when the device resets (no vdev raises
/// one), so that tests outside this crate can check how a port recovers.
#[cfg(feature = "dpdk")]
pub fn raise_dpdk_reset(port: &crate::driver::dpdk::DpdkPort) {
    port.shared()
        .events
        .raise(dpdk_sys::rte_eth_event_type_RTE_ETH_EVENT_INTR_RESET);
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
            let b = f.burst(&[frame.clone(), frame[..40].to_vec()]);
            assert_eq!(b.frame(0), frame, "{mode}");
            assert_eq!(b.frame_len(0), 200);
            match mode {
                DatapathMode::Host => assert!(matches!(b.payload(0), PayloadRef::None)),
                DatapathMode::Split => assert!(matches!(b.payload(0), PayloadRef::Host(_))),
                _ => assert!(matches!(b.payload(0), PayloadRef::Nic(_))),
            }
            assert!(matches!(b.payload(1), PayloadRef::None));
            assert_eq!(b.header(1), &frame[..40]);
            drop(b);
            assert_eq!(f.in_use(), 0, "{mode}");
        }
    }

    #[test]
    fn exhaustion_refuses_and_recovers() {
        let f = PacketFactory::new(DatapathMode::NicInline, 64, 1518, 2);
        let mut b = Burst::with_capacity(8);
        assert!(f.push(&mut b, &[0u8; 300]));
        assert!(f.push(&mut b, &[0u8; 300]));
        assert!(!f.push(&mut b, &[0u8; 300]), "pools hold two packets");
        b.clear();
        assert!(f.push(&mut b, &[0u8; 300]));
    }
}
