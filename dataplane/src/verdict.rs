//! Per-packet verdicts and the closed set of drop reasons.
//!
//! Drop reasons are a fixed enum so the run loop can count them in a flat array (no hashing or
//! allocation per packet) and reports can name every one of them.

macro_rules! drop_reasons {
    ($($(#[$doc:meta])* $v:ident => $name:literal,)*) => {
        /// Why a packet was dropped.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason { $($(#[$doc])* $v,)* }

        impl DropReason {
            /// Every reason, in counter order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$v,)*];
            /// Number of reasons (size of a counter array).
            pub const COUNT: usize = Self::ALL.len();
            /// Stable snake_case name used in stats and JSON.
            pub fn as_str(self) -> &'static str {
                match self { $(DropReason::$v => $name,)* }
            }
            /// Index into a counter array.
            #[inline]
            pub fn index(self) -> usize { self as usize }
        }
    };
}

drop_reasons! {
    /// The frame is shorter than the headers it claims (Ethernet/IPv4/L4).
    Truncated => "truncated",
    /// A header field is invalid (e.g. IPv4 IHL < 5, total length < IHL).
    Malformed => "malformed",
    /// Not IPv4 (or not Ethernet II) and the NF only handles IPv4.
    NotIpv4 => "not_ipv4",
    /// IPv4 options present and the NF's policy drops them.
    IpOptions => "ip_options",
    /// A non-first IPv4 fragment the NF cannot translate.
    Fragment => "fragment",
    /// TTL reached zero.
    TtlExpired => "ttl_expired",
    /// L4 protocol not handled by the NF.
    UnsupportedProtocol => "unsupported_protocol",
    /// NAT: inbound packet with no mapping.
    NoMapping => "no_mapping",
    /// NAT: no free port in the core's range.
    PortExhausted => "port_exhausted",
    /// Flow table full and the policy is to drop.
    FlowTableFull => "flow_table_full",
    /// Load balancer: destination is not the VIP and the policy is to drop.
    NotForVip => "not_for_vip",
    /// Load balancer: no enabled backend.
    NoBackend => "no_backend",
    /// Dropped on purpose by configuration (e.g. a filter or a lossy test NF).
    Policy => "policy",
    /// The Tx ring had no room.
    TxFull => "tx_full",
    /// The verdict named a port that does not exist.
    NoSuchPort => "no_such_port",
}

/// What happens to a packet after the NF chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit on this port (index in the run's port list), on the worker's own queue.
    Tx(u16),
    /// Drop, counting the reason.
    Drop(DropReason),
}

impl Verdict {
    /// True for a drop verdict.
    #[inline]
    pub fn is_drop(self) -> bool {
        matches!(self, Verdict::Drop(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_indices_dense() {
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DropReason::COUNT);
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }
}
