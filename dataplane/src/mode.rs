//! Datapath modes: where a received frame's header and payload go, and how transmit finds them.
//!
//! | mode          | paper  | Rx                                         | Tx                                  |
//! |---------------|--------|--------------------------------------------|-------------------------------------|
//! | `host`        | host   | whole frame -> one host buffer             | NIC reads the frame from host       |
//! | `split`       | split  | header -> host buffer, payload -> host     | NIC reads both (two gather entries) |
//! | `nic-payload` | nmNFV- | header -> host buffer, payload -> nicmem   | header from host, payload from SRAM |
//! | `nic-inline`  | nmNFV  | as `nic-payload`                           | header inlined in the WQE, payload from SRAM |
//!
//! In the nicmem modes each Rx queue has a primary (nicmem) and a secondary (host) payload ring;
//! the NIC spills to the secondary ring when the primary is empty, so with no nicmem left the
//! datapath degrades to `split` instead of stopping.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A datapath mode (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DatapathMode {
    /// Whole frame in one host buffer (the paper's baseline "host").
    Host,
    /// Header and payload in separate host buffers ("split").
    Split,
    /// Header in host memory, payload in nicmem ("nmNFV-").
    NicPayload,
    /// Payload in nicmem and the header inlined into the Tx descriptor ("nmNFV").
    NicInline,
}

impl DatapathMode {
    /// Every mode, in the paper's order.
    pub const ALL: [DatapathMode; 4] = [
        DatapathMode::Host,
        DatapathMode::Split,
        DatapathMode::NicPayload,
        DatapathMode::NicInline,
    ];

    /// The config/CLI name.
    pub fn as_str(self) -> &'static str {
        match self {
            DatapathMode::Host => "host",
            DatapathMode::Split => "split",
            DatapathMode::NicPayload => "nic-payload",
            DatapathMode::NicInline => "nic-inline",
        }
    }

    /// The paper's name for the configuration.
    pub fn paper_name(self) -> &'static str {
        match self {
            DatapathMode::Host => "host",
            DatapathMode::Split => "split",
            DatapathMode::NicPayload => "nmNFV-",
            DatapathMode::NicInline => "nmNFV",
        }
    }

    /// True when received frames are split into a header and a payload segment.
    pub fn splits(self) -> bool {
        !matches!(self, DatapathMode::Host)
    }

    /// True when payloads go to nicmem (primary ring) first.
    pub fn uses_nicmem(self) -> bool {
        matches!(self, DatapathMode::NicPayload | DatapathMode::NicInline)
    }

    /// True when the Tx path inlines the header into the descriptor.
    pub fn inlines_tx_header(self) -> bool {
        matches!(self, DatapathMode::NicInline)
    }
}

impl fmt::Display for DatapathMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DatapathMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .copied()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown datapath mode `{s}`; allowed: host, split, nic-payload, nic-inline"
                )
            })
    }
}
