//! The packet: a header segment in host memory plus an optional payload segment in host memory or
//! in on-NIC memory.
//!
//! This is the load-bearing decision of the design. A [`Packet`] always has its first
//! `header_len()` bytes (the split offset, default 64 B, or the whole frame in `host` mode) in a
//! host buffer that network functions can read and rewrite through [`Packet::header_mut`]. The rest
//! of the frame, if any, is a [`Payload`]: a host buffer (readable) or a nicmem buffer, which has
//! no byte view at all; its bytes can only be fetched through the counted slow path
//! [`NicPayload::read_slow`].
//!
//! Network functions must never compare IPv4/L4 length fields with `header_len()`: in split modes
//! the header segment is shorter than the packet. Use [`Packet::frame_len`].
//!
//! Dropping a packet returns its buffers to their pools.

use nicmem::{AccessError, Buf, Host, Nic};

/// Which Rx ring served a packet's payload (reported in the completion, like the paper's split
/// rings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxRing {
    /// No payload segment: the frame fit the header buffer (or `host` mode).
    #[default]
    None,
    /// The primary ring: payload in nicmem.
    Primary,
    /// The secondary ring: payload in a host buffer (spill when nicmem is exhausted, or `split`).
    Secondary,
}

/// Per-packet metadata filled by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketMeta {
    /// RSS (Toeplitz) hash computed by the NIC.
    pub rss_hash: u32,
    /// Port the packet arrived on.
    pub port: u16,
    /// Queue the packet arrived on.
    pub queue: u16,
    /// Which Rx ring served the payload.
    pub ring: RxRing,
    /// Arrival time on the wire, ns (virtual or wall clock, per run).
    pub rx_time_ns: u64,
}

/// The payload segment of a packet.
#[derive(Debug, Default)]
pub enum Payload {
    /// No payload segment.
    #[default]
    None,
    /// Payload in a host buffer.
    Host(Buf<Host>),
    /// Payload in on-NIC memory.
    Nic(Buf<Nic>),
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
#[derive(Debug)]
pub struct NicPayload<'a> {
    buf: &'a Buf<Nic>,
    len: usize,
}

impl NicPayload<'_> {
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
        if offset + dst.len() > self.len {
            return Err(AccessError::Oversized {
                len: dst.len() as u32,
                max: self.len.saturating_sub(offset) as u32,
            });
        }
        self.buf.read_slow(offset, dst)
    }
}

/// Errors assembling a packet from segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketError {
    /// The header length exceeds the header buffer.
    HeaderTooLong { len: usize, cap: usize },
    /// The payload length exceeds the payload buffer, or there is payload length but no segment.
    PayloadTooLong { len: usize, cap: usize },
}

/// An owned packet (see the module docs).
#[derive(Debug)]
pub struct Packet {
    hdr: Buf<Host>,
    payload: Payload,
    hdr_len: u32,
    frame_len: u32,
    /// Driver-filled metadata.
    pub meta: PacketMeta,
}

impl Packet {
    /// Assembles a packet from a header buffer holding `hdr_len` bytes and a payload segment
    /// holding `frame_len - hdr_len` bytes.
    #[inline]
    pub fn new(
        hdr: Buf<Host>,
        hdr_len: usize,
        payload: Payload,
        frame_len: usize,
        meta: PacketMeta,
    ) -> Result<Self, PacketError> {
        if hdr_len > hdr.capacity() || hdr_len > frame_len {
            return Err(PacketError::HeaderTooLong {
                len: hdr_len,
                cap: hdr.capacity().min(frame_len),
            });
        }
        let plen = frame_len - hdr_len;
        let pcap = match &payload {
            Payload::None => 0,
            Payload::Host(b) => b.capacity(),
            Payload::Nic(b) => b.capacity(),
        };
        if plen > pcap {
            return Err(PacketError::PayloadTooLong {
                len: plen,
                cap: pcap,
            });
        }
        Ok(Self {
            hdr,
            payload,
            hdr_len: hdr_len as u32,
            frame_len: frame_len as u32,
            meta,
        })
    }

    /// The header segment (host memory).
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.hdr.bytes()[..self.hdr_len as usize]
    }

    /// The header segment, writable: what network functions rewrite.
    #[inline]
    pub fn header_mut(&mut self) -> &mut [u8] {
        let n = self.hdr_len as usize;
        &mut self.hdr.bytes_mut()[..n]
    }

    /// Bytes in the header segment.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.hdr_len as usize
    }

    /// Total frame length (header + payload, without FCS).
    #[inline]
    pub fn frame_len(&self) -> usize {
        self.frame_len as usize
    }

    /// Bytes in the payload segment.
    #[inline]
    pub fn payload_len(&self) -> usize {
        (self.frame_len - self.hdr_len) as usize
    }

    /// Number of segments (1 or 2).
    #[inline]
    pub fn segments(&self) -> usize {
        if matches!(self.payload, Payload::None) {
            1
        } else {
            2
        }
    }

    /// The payload segment.
    pub fn payload(&self) -> PayloadRef<'_> {
        let n = self.payload_len();
        match &self.payload {
            Payload::None => PayloadRef::None,
            Payload::Host(b) => PayloadRef::Host(&b.bytes()[..n]),
            Payload::Nic(buf) => PayloadRef::Nic(NicPayload { buf, len: n }),
        }
    }

    /// The header buffer (drivers build descriptors from it).
    #[inline]
    pub fn header_buf(&self) -> &Buf<Host> {
        &self.hdr
    }

    /// The payload segment's buffer (drivers build descriptors from it).
    #[inline]
    pub fn payload_buf(&self) -> &Payload {
        &self.payload
    }

    /// Takes the packet apart: `(header buffer, header length, payload, frame length)`.
    #[inline]
    pub fn into_parts(self) -> (Buf<Host>, usize, Payload, usize) {
        (
            self.hdr,
            self.hdr_len as usize,
            self.payload,
            self.frame_len as usize,
        )
    }

    /// Copies the whole frame into `out` (cleared first). A nicmem payload is read through the
    /// counted slow path: for tests, pcap capture and debugging, never for the data path.
    pub fn copy_frame(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(self.header());
        let start = out.len();
        out.resize(self.frame_len(), 0);
        match self.payload() {
            PayloadRef::None => {}
            PayloadRef::Host(b) => out[start..].copy_from_slice(b),
            PayloadRef::Nic(n) => {
                // Cannot fail: the range is the payload's own length.
                let _ = n.read_slow(0, &mut out[start..]);
            }
        }
    }
}
