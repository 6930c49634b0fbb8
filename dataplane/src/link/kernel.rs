//! Links to the Linux kernel by name, as a config writes them: `tap:NAME` ([`super::tap`]) and
//! `afpacket:IFNAME` ([`super::afpacket`]).

use std::sync::Arc;

use super::fd::KernelLinkCounters;
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
