//! `link = "tap:NAME"`: the port's wire is a Linux TAP device. Every frame the kernel sends out
//! of the TAP interface arrives at the port, and every frame the port transmits arrives at the
//! kernel as if received on that interface.
//!
//! The device is opened (or created) through `/dev/net/tun` in the network namespace the
//! dataplane runs in, without the packet-information header and without the virtio header, so
//! the kernel segments and checksums every frame before the dataplane sees it (no offload ever
//! reaches the wire). Opening also brings the interface up, so a user only adds an address.
//! The descriptor is non-blocking: an empty device is "no frame right now", as a wire is.
//!
//! The `unsafe` here is FFI (`libc` system calls), each call with its `// SAFETY:` comment.

use std::sync::Arc;

use super::fd::{Fd, KernelLinkCounters, os_error};
use super::{FrameSink, FrameSource, Link};

/// Longest interface name (IFNAMSIZ - 1).
const MAX_NAME: usize = 15;

/// Opens (creating it if needed) the TAP device `name`, brings it up, and returns it as a link
/// with its counters. Errors say what failed and what the machine needs.
pub fn open(name: &str) -> Result<(Link, Arc<KernelLinkCounters>), String> {
    if name.is_empty() || name.len() > MAX_NAME || name.bytes().any(|b| b == 0 || b == b'/') {
        return Err(format!(
            "tap:{name}: an interface name is 1..={MAX_NAME} bytes without `/`"
        ));
    }
    // SAFETY: a valid NUL-terminated path and flags; the result is checked.
    let fd = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(os_error(&format!(
            "tap:{name}: cannot open /dev/net/tun (needs the tun module and CAP_NET_ADMIN)"
        )));
    }
    let fd = Fd::new(fd);
    let mut ifr = ifreq(name);
    ifr.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: `ifr` is a valid ifreq the ioctl reads and writes; the descriptor is open.
    if unsafe { libc::ioctl(fd.raw(), libc::TUNSETIFF, &mut ifr) } < 0 {
        return Err(os_error(&format!(
            "tap:{name}: TUNSETIFF (is `{name}` another kind of interface, or busy?)"
        )));
    }
    bring_up(name)?;
    let counters = Arc::new(KernelLinkCounters::default());
    Ok((
        Link {
            rx: Box::new(TapRx {
                fd: fd.clone(),
                counters: counters.clone(),
                closed: false,
            }),
            tx: Box::new(TapTx {
                fd,
                counters: counters.clone(),
            }),
        },
        counters,
    ))
}

/// An `ifreq` naming `name` (checked to fit by the caller).
pub(crate) fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: `ifreq` is plain old data; all zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    ifr
}

/// Sets IFF_UP on interface `name` (in this network namespace).
pub(crate) fn bring_up(name: &str) -> Result<(), String> {
    // SAFETY: plain socket creation; the result is checked.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(os_error(&format!("{name}: socket for SIOCSIFFLAGS")));
    }
    let s = Fd::new(s);
    let mut ifr = ifreq(name);
    // SAFETY: valid ifreq and descriptor; the kernel fills the flags.
    if unsafe { libc::ioctl(s.raw(), libc::SIOCGIFFLAGS, &mut ifr) } < 0 {
        return Err(os_error(&format!("{name}: SIOCGIFFLAGS")));
    }
    // SAFETY: the flags member was just written by the kernel.
    let flags = unsafe { ifr.ifr_ifru.ifru_flags };
    ifr.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    // SAFETY: valid ifreq and descriptor.
    if unsafe { libc::ioctl(s.raw(), libc::SIOCSIFFLAGS, &mut ifr) } < 0 {
        return Err(os_error(&format!(
            "{name}: SIOCSIFFLAGS (bring the interface up)"
        )));
    }
    Ok(())
}

struct TapRx {
    fd: Arc<Fd>,
    counters: Arc<KernelLinkCounters>,
    /// The device went away (deleted, or its namespace): no frame will ever come.
    closed: bool,
}

impl FrameSource for TapRx {
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.closed {
            return None;
        }
        // SAFETY: `buf` is valid for writes of its length; the descriptor is open.
        let n = unsafe { libc::read(self.fd.raw(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            KernelLinkCounters::inc(&self.counters.rx_frames);
            return Some(n as usize);
        }
        let e = std::io::Error::last_os_error().raw_os_error();
        if n == 0 || matches!(e, Some(libc::EBADFD) | Some(libc::EIO) | Some(libc::ENXIO)) {
            self.closed = true;
        } else if !matches!(e, Some(libc::EAGAIN) | Some(libc::EINTR)) {
            KernelLinkCounters::inc(&self.counters.rx_errors);
        }
        None
    }

    fn exhausted(&self) -> bool {
        self.closed
    }
}

struct TapTx {
    fd: Arc<Fd>,
    counters: Arc<KernelLinkCounters>,
}

impl FrameSink for TapTx {
    fn deliver(&mut self, frame: &[u8]) {
        // SAFETY: `frame` is valid for reads of its length; the descriptor is open.
        let n = unsafe { libc::write(self.fd.raw(), frame.as_ptr().cast(), frame.len()) };
        if n == frame.len() as isize {
            KernelLinkCounters::inc(&self.counters.tx_frames);
        } else {
            KernelLinkCounters::inc(&self.counters.tx_errors);
        }
    }
}
