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
//!
//! With the `dpdk` feature a packet may instead own a DPDK mbuf chain
//! ([`crate::driver::dpdk::Mbuf`]): the DPDK driver hands received mbufs to network functions
//! without copying and transmits them without copying, so the header segment is the first mbuf
//! segment and the payload segment the second. The public API is the same for both
//! representations, except the driver-facing [`Packet::header_buf`], [`Packet::payload_buf`] and
//! [`Packet::into_parts`], which only exist for packets built from `nicmem` buffers (they panic on
//! an mbuf packet; a run never mixes drivers, see `driver::dpdk`).

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
    src: NicSrc<'a>,
    len: usize,
}

/// Where a nicmem payload lives: a `nicmem` pool buffer or (feature `dpdk`) an mbuf segment.
#[derive(Debug)]
enum NicSrc<'a> {
    Buf(&'a Buf<Nic>),
    #[cfg(feature = "dpdk")]
    Mbuf(&'a crate::driver::dpdk::Mbuf),
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
        match self.src {
            NicSrc::Buf(b) => b.read_slow(offset, dst),
            #[cfg(feature = "dpdk")]
            NicSrc::Mbuf(m) => m.read_payload_slow(offset, dst),
        }
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

/// The segments of a packet: `nicmem` pool buffers, or (feature `dpdk`) an owned mbuf chain.
#[derive(Debug)]
enum Segs {
    Bufs {
        hdr: Buf<Host>,
        payload: Payload,
    },
    #[cfg(feature = "dpdk")]
    Mbuf(crate::driver::dpdk::Mbuf),
}

/// An owned packet (see the module docs).
#[derive(Debug)]
pub struct Packet {
    segs: Segs,
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
            segs: Segs::Bufs { hdr, payload },
            hdr_len: hdr_len as u32,
            frame_len: frame_len as u32,
            meta,
        })
    }

    /// Wraps an mbuf chain received by the DPDK driver. The driver guarantees that the first
    /// segment holds `hdr_len` bytes and the chain `frame_len` bytes in at most two segments.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub(crate) fn from_mbuf(
        m: crate::driver::dpdk::Mbuf,
        hdr_len: u32,
        frame_len: u32,
        meta: PacketMeta,
    ) -> Self {
        Self {
            segs: Segs::Mbuf(m),
            hdr_len,
            frame_len,
            meta,
        }
    }

    /// The mbuf chain of a packet built by the DPDK driver (`None` for `nicmem` buffers).
    #[cfg(feature = "dpdk")]
    #[inline]
    pub fn mbuf(&self) -> Option<&crate::driver::dpdk::Mbuf> {
        match &self.segs {
            Segs::Mbuf(m) => Some(m),
            Segs::Bufs { .. } => None,
        }
    }

    /// Takes the mbuf chain out of a packet built by the DPDK driver; gives the packet back if
    /// it is made of `nicmem` buffers.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub(crate) fn into_mbuf(self) -> Result<crate::driver::dpdk::Mbuf, Packet> {
        match self.segs {
            Segs::Mbuf(m) => Ok(m),
            segs @ Segs::Bufs { .. } => Err(Packet { segs, ..self }),
        }
    }

    /// The header segment (host memory).
    #[inline]
    pub fn header(&self) -> &[u8] {
        let n = self.hdr_len as usize;
        match &self.segs {
            Segs::Bufs { hdr, .. } => &hdr.bytes()[..n],
            #[cfg(feature = "dpdk")]
            Segs::Mbuf(m) => m.first_segment(n),
        }
    }

    /// The header segment, writable: what network functions rewrite.
    #[inline]
    pub fn header_mut(&mut self) -> &mut [u8] {
        let n = self.hdr_len as usize;
        match &mut self.segs {
            Segs::Bufs { hdr, .. } => &mut hdr.bytes_mut()[..n],
            #[cfg(feature = "dpdk")]
            Segs::Mbuf(m) => m.first_segment_mut(n),
        }
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
        match &self.segs {
            Segs::Bufs {
                payload: Payload::None,
                ..
            } => 1,
            Segs::Bufs { .. } => 2,
            #[cfg(feature = "dpdk")]
            Segs::Mbuf(m) => m.segments(),
        }
    }

    /// The payload segment.
    pub fn payload(&self) -> PayloadRef<'_> {
        let n = self.payload_len();
        match &self.segs {
            Segs::Bufs { payload, .. } => match payload {
                Payload::None => PayloadRef::None,
                Payload::Host(b) => PayloadRef::Host(&b.bytes()[..n]),
                Payload::Nic(buf) => PayloadRef::Nic(NicPayload {
                    src: NicSrc::Buf(buf),
                    len: n,
                }),
            },
            #[cfg(feature = "dpdk")]
            Segs::Mbuf(m) => {
                if n == 0 {
                    PayloadRef::None
                } else if m.payload_in_nicmem() {
                    PayloadRef::Nic(NicPayload {
                        src: NicSrc::Mbuf(m),
                        len: n,
                    })
                } else {
                    PayloadRef::Host(m.second_segment(n))
                }
            }
        }
    }

    /// The header buffer (drivers build descriptors from it).
    ///
    /// # Panics
    /// On a packet that owns a DPDK mbuf chain (feature `dpdk`; only DPDK ports create them).
    #[inline]
    pub fn header_buf(&self) -> &Buf<Host> {
        match &self.segs {
            Segs::Bufs { hdr, .. } => hdr,
            #[cfg(feature = "dpdk")]
            Segs::Mbuf(_) => mbuf_packet_on_buf_path(),
        }
    }

    /// The payload segment's buffer (drivers build descriptors from it).
    ///
    /// # Panics
    /// On a packet that owns a DPDK mbuf chain (feature `dpdk`; only DPDK ports create them).
    #[inline]
    pub fn payload_buf(&self) -> &Payload {
        match &self.segs {
            Segs::Bufs { payload, .. } => payload,
            #[cfg(feature = "dpdk")]
            Segs::Mbuf(_) => mbuf_packet_on_buf_path(),
        }
    }

    /// Takes the packet apart: `(header buffer, header length, payload, frame length)`.
    ///
    /// # Panics
    /// On a packet that owns a DPDK mbuf chain (feature `dpdk`; only DPDK ports create them).
    #[inline]
    pub fn into_parts(self) -> (Buf<Host>, usize, Payload, usize) {
        match self.segs {
            Segs::Bufs { hdr, payload } => {
                (hdr, self.hdr_len as usize, payload, self.frame_len as usize)
            }
            #[cfg(feature = "dpdk")]
            Segs::Mbuf(_) => mbuf_packet_on_buf_path(),
        }
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

/// A DPDK mbuf packet reached code that expects `nicmem` buffers (a vNIC port): runs never mix
/// drivers, so this is a bug in the caller.
#[cfg(feature = "dpdk")]
#[cold]
#[track_caller]
fn mbuf_packet_on_buf_path() -> ! {
    panic!(
        "a DPDK mbuf packet was handed to a nicmem-buffer driver path (runs must not mix vnic and \
         dpdk ports)"
    )
}
