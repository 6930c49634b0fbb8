//! What the links to a Linux kernel share: the file descriptor both directions of a link use,
//! its counters, and the checksum completion a real wire would never need.
//!
//! The `unsafe` here is FFI (`libc` system calls), each call with its `// SAFETY:` comment.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// An open file descriptor, closed when the last holder drops it (a link's source and sink
/// share one).
#[derive(Debug)]
pub struct Fd(libc::c_int);

impl Fd {
    /// Takes ownership of `fd` (a descriptor the caller opened and nobody else closes).
    pub(crate) fn new(fd: libc::c_int) -> Arc<Self> {
        Arc::new(Self(fd))
    }

    /// The raw descriptor.
    pub fn raw(&self) -> libc::c_int {
        self.0
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned by this value and closed once, here.
        unsafe { libc::close(self.0) };
    }
}

/// The last OS error as text, prefixed with what failed.
pub(crate) fn os_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Counters of a link to the kernel (all monotonic; read while the run goes on).
#[derive(Debug, Default)]
pub struct KernelLinkCounters {
    /// Frames read from the kernel.
    pub rx_frames: AtomicU64,
    /// Frames written to the kernel.
    pub tx_frames: AtomicU64,
    /// Frames the kernel refused (its queue was full, or the frame was longer than the
    /// interface's MTU allows).
    pub tx_errors: AtomicU64,
    /// Frames longer than a link carries (a veth hands AF_PACKET whole TSO/GRO super-frames;
    /// turn segmentation offload off on the kernel side: `ethtool -K IF tx off`).
    pub rx_oversize: AtomicU64,
    /// Frames whose TCP/UDP checksum the kernel left unfinished (checksum offload on a veth),
    /// finished by the link.
    pub rx_checksums_completed: AtomicU64,
    /// Read errors other than "nothing to read".
    pub rx_errors: AtomicU64,
}

impl KernelLinkCounters {
    pub(crate) fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters as `(name, value)`, for the run summary.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("rx_frames", l(&self.rx_frames)),
            ("tx_frames", l(&self.tx_frames)),
            ("tx_errors", l(&self.tx_errors)),
            ("rx_oversize", l(&self.rx_oversize)),
            ("rx_checksums_completed", l(&self.rx_checksums_completed)),
            ("rx_errors", l(&self.rx_errors)),
        ]
    }
}

/// Finishes the TCP or UDP checksum of an untagged Ethernet/IPv4 frame whose sender left it to
/// the hardware (the kernel's "checksum not ready": the field holds only the pseudo-header sum).
/// A frame on a real wire always carries a finished checksum, so the link delivers it that way.
/// Returns true when it wrote a checksum.
pub(crate) fn complete_l4_checksum(frame: &mut [u8]) -> bool {
    use wire::field::{read_u16, read_u32, write_u16};
    if frame.len() < 34 || read_u16(frame, 12) != wire::ethernet::ETHERTYPE_IPV4 {
        return false;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(read_u16(ip, 2));
    if ip[0] >> 4 != 4 || ihl < 20 || total < ihl || total > ip.len() {
        return false;
    }
    let (proto, src, dst) = (ip[9], read_u32(ip, 12), read_u32(ip, 16));
    let csum_off = match proto {
        wire::ipv4::PROTO_TCP => 16,
        wire::ipv4::PROTO_UDP => 6,
        _ => return false,
    };
    let l4 = &mut frame[14 + ihl..14 + total];
    if l4.len() < csum_off + 2 {
        return false;
    }
    let mut c = wire::checksum::ipv4_l4_checksum(src, dst, proto, l4, csum_off);
    if proto == wire::ipv4::PROTO_UDP && c == 0 {
        c = 0xffff;
    }
    write_u16(l4, csum_off, c);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfinished_checksums_are_completed() {
        for frame in [
            wire::frames::FrameSpec::udp(0x0a00_0002, 0x0a00_0102, 1000, 53, 40).build(),
            wire::frames::FrameSpec::tcp(0x0a00_0002, 0x0a00_0102, 1000, 80, 0x10, 40).build(),
        ] {
            let mut f = frame.clone();
            let off = if f[23] == 6 { 34 + 16 } else { 34 + 6 };
            f[off] ^= 0x5a;
            f[off + 1] ^= 0xa5;
            assert!(complete_l4_checksum(&mut f));
            assert_eq!(f, frame, "the finished checksum is the sender's");
        }
        let mut arp = vec![0u8; 60];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(!complete_l4_checksum(&mut arp));
    }
}
