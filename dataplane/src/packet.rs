//! What a packet is, seen from the packet core: a driver's handle, a header segment in host memory,
//! and an optional payload segment in host memory or in on-NIC memory.
//!
//! This is the load-bearing decision of the design. A packet always has its first `header_len`
//! bytes (the split offset, default 64 B, or the whole frame in `host` mode) in host memory, where
//! network functions read and rewrite them ([`crate::Burst::header_mut`]). The rest of the frame,
//! if any, is the payload: a host buffer (readable) or a nicmem buffer, which has no byte view at
//! all; its bytes can only be fetched through the counted slow path [`NicPayload::read_slow`].
//!
//! Network functions must never compare IPv4/L4 length fields with the header length: in split
//! modes the header segment is shorter than the packet. Use the frame length.
//!
//! **What moves is small.** A packet is a driver handle of one machine word (an `rte_mbuf*` on
//! DPDK, a buffer index on the virtual NIC), kept in a [`crate::Burst`] beside the few fields every
//! layer needs (header pointer and length, frame length, which ring served the payload, RSS
//! hash, receive port, verdict), written once by the driver at Rx and never copied afterwards.
//! Everything else a driver needs to transmit or free a packet lives with its buffer (mbuf fields,
//! or the metadata area of a virtual NIC header buffer), the way DPDK and VPP keep it.
//!
//! The core knows no driver: a driver that hands packets to the core implements
//! [`PacketOwner`], the small interface the core needs for what is not on the per-packet path
//! (returning buffers when a burst is dropped outside the run loop, and the payload views).

use nicmem::AccessError;

/// Which Rx ring served a packet's payload (reported in the completion, like the paper's split
/// rings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PayloadRing {
    /// No payload segment: the frame fit the header buffer (or `host` mode).
    #[default]
    None,
    /// The primary ring: payload in nicmem.
    Primary,
    /// The secondary ring: payload in a host buffer (spill when nicmem is exhausted, or `split`).
    Secondary,
}

/// Where a packet's payload segment lives, as its owner describes it (see [`PacketOwner`]).
#[derive(Clone, Copy, Debug)]
pub enum PayloadLoc {
    /// No payload segment.
    None,
    /// In host memory, starting at this byte.
    Host(*const u8),
    /// In on-NIC memory: no byte view, only [`PacketOwner::read_nic`].
    Nic,
}

/// The driver side of packets held in a [`crate::Burst`]: what the packet core asks of whoever
/// issued the handles, off the per-packet path.
///
/// # Safety
/// An implementation promises, for every handle it issued that is still held by a burst:
/// - [`PacketOwner::payload`] returns `Host(ptr)` only when the payload length the packet was
///   pushed with ([`crate::burst::RxPacket`]: frame length minus header length) is readable at
///   `ptr` and written by nobody while the packet is held, except through
///   [`PacketOwner::write_payload`] (which the burst calls only while it is borrowed mutably, so
///   no view of the payload lives then);
/// - [`PacketOwner::free`] may be called once per handle, from any thread, and takes the packet
///   back (its buffers return to their pools).
pub unsafe trait PacketOwner: Send + Sync {
    /// Takes packets back (slow path: a burst dropped with packets still in it).
    fn free(&self, handles: &[usize]);

    /// Where the payload of packet `handle` lives.
    fn payload(&self, handle: usize) -> PayloadLoc;

    /// Copies bytes `[offset, offset + dst.len())` of the nicmem payload of `handle` to `dst`
    /// through a counted CPU read of nicmem (~0.05 B/cycle on real hardware).
    fn read_nic(&self, handle: usize, offset: usize, dst: &mut [u8]) -> Result<(), AccessError>;

    /// Overwrites bytes `[offset, offset + src.len())` of the payload of `handle`: a plain copy
    /// into a host payload, a counted CPU write (MMIO, write-combined) into a nicmem payload.
    /// The slow path for the rare packet whose headers reach past the header segment (the
    /// quoted headers of an ICMP error a NAT translates); an error when the range is outside
    /// the payload or the payload's memory cannot be written by the CPU.
    fn write_payload(&self, handle: usize, offset: usize, src: &[u8]) -> Result<(), AccessError>;
}

/// A borrowed view of a packet's payload segment.
#[derive(Debug)]
pub enum PayloadRef<'a> {
    /// No payload segment.
    None,
    /// Payload bytes in host memory.
    Host(&'a [u8]),
    /// Payload in nicmem: no byte view, only the counted slow path.
    Nic(NicPayload<'a>),
}

/// A payload held in on-NIC memory. There is deliberately no `as_slice`.
pub struct NicPayload<'a> {
    owner: &'a dyn PacketOwner,
    handle: usize,
    len: usize,
}

impl std::fmt::Debug for NicPayload<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NicPayload")
            .field("len", &self.len)
            .finish()
    }
}

impl<'a> NicPayload<'a> {
    pub(crate) fn new(owner: &'a dyn PacketOwner, handle: usize, len: usize) -> Self {
        Self { owner, handle, len }
    }

    /// Payload length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies payload bytes `[offset, offset + dst.len())` to `dst` through a counted CPU read of
    /// nicmem (the slow path: ~0.05 B/cycle on real hardware).
    pub fn read_slow(&self, offset: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        if offset
            .checked_add(dst.len())
            .is_none_or(|end| end > self.len)
        {
            return Err(AccessError::Oversized {
                len: dst.len().min(u32::MAX as usize) as u32,
                max: self.len.saturating_sub(offset) as u32,
            });
        }
        self.owner.read_nic(self.handle, offset, dst)
    }
}
