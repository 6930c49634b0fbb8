//! Links to the Linux kernel by name, as a config writes them: `tap:NAME` ([`super::tap`]) and
//! `afpacket:IFNAME` ([`super::afpacket`]), and the state of the interface behind one (what a
//! health check asks: is the port up).
//!
//! The `unsafe` here is FFI (`libc` system calls), each call with its `// SAFETY:` comment.

use std::sync::Arc;

use super::fd::{Fd, KernelLinkCounters, os_error};
use super::{Link, afpacket, tap};

/// A link to the kernel a config names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelLinkSpec {
    /// `tap:NAME`: a TAP device, opened or created.
    Tap(String),
    /// `afpacket:IFNAME`: an existing interface through an AF_PACKET socket.
    AfPacket(String),
}

impl KernelLinkSpec {
    /// Parses `tap:NAME` or `afpacket:IFNAME`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        if let Some(n) = s.strip_prefix("tap:") {
            Some(Self::Tap(n.to_string()))
        } else {
            s.strip_prefix("afpacket:")
                .map(|n| Self::AfPacket(n.to_string()))
        }
    }

    /// The kernel interface's name.
    pub fn interface(&self) -> &str {
        match self {
            Self::Tap(n) | Self::AfPacket(n) => n,
        }
    }

    /// Opens the link (in the calling thread's network namespace).
    pub fn open(&self) -> Result<(Link, Arc<KernelLinkCounters>), String> {
        match self {
            Self::Tap(n) => tap::open(n),
            Self::AfPacket(n) => afpacket::open(n),
        }
    }
}

impl std::fmt::Display for KernelLinkSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tap(n) => write!(f, "tap:{n}"),
            Self::AfPacket(n) => write!(f, "afpacket:{n}"),
        }
    }
}

/// The state of a kernel interface, as `ip link` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterfaceState {
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Carrier on and operational (`IFF_RUNNING`; a veth is running only while its peer is up).
    pub running: bool,
}

/// The state of interface `name` in the calling thread's network namespace (`SIOCGIFFLAGS`);
/// an error when there is no such interface there (deleted, or moved to another namespace).
pub fn interface_state(name: &str) -> Result<InterfaceState, String> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(format!("`{name}` is not an interface name"));
    }
    // SAFETY: plain socket creation; the result is checked.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(os_error(&format!("{name}: socket for SIOCGIFFLAGS")));
    }
    let s = Fd::new(s);
    let mut ifr = super::tap::ifreq(name);
    // SAFETY: valid ifreq (the name fits, checked above) and descriptor; the kernel fills the
    // flags.
    if unsafe { libc::ioctl(s.raw(), libc::SIOCGIFFLAGS, &mut ifr) } < 0 {
        return Err(os_error(name));
    }
    // SAFETY: the flags member was just written by the kernel.
    let flags = i32::from(unsafe { ifr.ifr_ifru.ifru_flags });
    Ok(InterfaceState {
        up: flags & libc::IFF_UP != 0,
        running: flags & libc::IFF_RUNNING != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_and_a_missing_interface_is_an_error() {
        // Every network namespace has `lo` (up or not).
        let lo = interface_state("lo").unwrap();
        assert_eq!(lo.running, lo.up, "{lo:?}");
        let e = interface_state("nmdp-none0").unwrap_err();
        assert!(e.starts_with("nmdp-none0: "), "{e}");
        assert!(interface_state("").is_err());
        assert!(interface_state("a-name-far-too-long-for-linux").is_err());
    }
}
