//! `port_filter`: drops TCP and UDP packets to denied destination ports; everything else passes.
//!
//! The example a new network function starts from. Everything the house needs to know about an
//! NF is in this one file: the code, its registration ([`SPEC`]: name, parameters with defaults
//! and docs, its own drop reason, how to build it, what memory it needs), and its tests, which run
//! it on the virtual NIC in every datapath mode. Making it available to `dataplane run` took one
//! more line, in the registry list of `nfs/src/lib.rs`. Its CPU cost in virtual-time runs is the
//! profile key `host.cycles.nf.port_filter` (`--set host.cycles.nf.port_filter=40`).
//!
//! ```toml
//! [[pipeline]]
//! name = "port_filter"
//! deny_ports = [22, 23]
//! proto = "tcp"
//! ```
//!
//! It reads the header segment only ([`wire::classify::parse`] checks lengths against the frame,
//! never the segment), so it runs unchanged in every mode; frames it cannot parse pass and are
//! counted as `unparsed`.
#![forbid(unsafe_code)]

use dataplane::{Burst, Counters, DropReason, NetworkFunction, NfContext};
use serde::{Deserialize, Serialize};
use wire::classify::{L4, parse};

use crate::params::parse_params;
use crate::registry::{
    BuildContext, NfSpec, Param, Reason, defaults_of, no_memory, register_reason,
};

/// Drop reason: a TCP or UDP packet to a denied port.
const PORT_DENIED: Reason = (
    "port_denied",
    "a TCP or UDP packet to a destination port the port filter denies",
);

/// The registration of `port_filter`.
pub const SPEC: NfSpec = NfSpec {
    name: "port_filter",
    aliases: &[],
    summary: "Drops TCP and UDP packets to denied destination ports; everything else passes \
              (the example NF).",
    params: &[
        Param {
            name: "deny_ports",
            doc: "destination ports to drop (list)",
        },
        Param {
            name: "proto",
            doc: "which packets the list applies to: `any`, `tcp` or `udp`",
        },
    ],
    defaults: defaults_of::<PortFilterConfig>,
    drop_reasons: &[PORT_DENIED],
    build,
    memory: no_memory,
};

fn build(params: &toml::Table, _: &BuildContext) -> Result<Box<dyn NetworkFunction>, String> {
    let cfg: PortFilterConfig = parse_params(SPEC.name, params)?;
    let mut deny = vec![false; 1 << 16];
    for &p in &cfg.deny_ports {
        deny[usize::from(p)] = true;
    }
    Ok(Box::new(PortFilter {
        deny,
        proto: cfg.proto,
        denied_reason: register_reason(SPEC.name, PORT_DENIED)?,
        packets: 0,
        denied: 0,
        unparsed: 0,
    }))
}

/// Which packets the deny list applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// TCP and UDP.
    Any,
    /// TCP only.
    Tcp,
    /// UDP only.
    Udp,
}

/// `port_filter` parameters.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PortFilterConfig {
    /// Destination ports to drop.
    pub deny_ports: Vec<u16>,
    /// Which packets the list applies to.
    pub proto: Proto,
}

impl Default for PortFilterConfig {
    fn default() -> Self {
        Self {
            deny_ports: Vec::new(),
            proto: Proto::Any,
        }
    }
}

/// One worker's filter.
pub struct PortFilter {
    /// `deny[port]`: drop packets to this destination port.
    deny: Vec<bool>,
    proto: Proto,
    denied_reason: DropReason,
    packets: u64,
    denied: u64,
    unparsed: u64,
}

impl NetworkFunction for PortFilter {
    fn name(&self) -> &str {
        SPEC.name
    }

    fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
        for mut p in burst.packets_mut() {
            self.packets += 1;
            let frame_len = p.frame_len();
            let Ok(h) = parse(p.header(), frame_len) else {
                self.unparsed += 1;
                continue;
            };
            let dport = match (h.l4info, self.proto) {
                (L4::Tcp { dport, .. }, Proto::Any | Proto::Tcp)
                | (L4::Udp { dport, .. }, Proto::Any | Proto::Udp) => dport,
                _ => continue,
            };
            if self.deny[usize::from(dport)] {
                self.denied += 1;
                p.drop_packet(self.denied_reason);
            }
        }
    }

    /// Zeroes the counts (the deny list is configuration).
    fn reset(&mut self) -> bool {
        (self.packets, self.denied, self.unparsed) = (0, 0, 0);
        true
    }

    fn counters(&self) -> Counters {
        let mut c = Counters::new();
        c.count("packets", self.packets)
            .count("denied", self.denied)
            .count("unparsed", self.unparsed);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::on_vnic::run as run_on_vnic;
    use dataplane::{DatapathMode, NfChain};
    use wire::frames::FrameSpec;

    fn filter(params: &str) -> NfChain {
        let mut chain = NfChain::new();
        let ctx = BuildContext::new(0, 1);
        chain.push(crate::build(SPEC.name, &params.parse().unwrap(), &ctx).unwrap());
        chain
    }

    /// On the virtual NIC in every mode: denied TCP/UDP packets are dropped with the filter's
    /// reason, everything else comes out bit for bit, payloads in nicmem included.
    #[test]
    fn denied_ports_are_dropped_in_every_mode() {
        let (a, b) = (0x0a00_0001, 0x0a00_0002);
        let frames = vec![
            FrameSpec::udp(a, b, 1000, 53, 18).build(),
            FrameSpec::udp(a, b, 1000, 80, 1200).build(),
            FrameSpec::tcp(a, b, 1000, 22, 0x02, 600).build(),
            FrameSpec::tcp(a, b, 1000, 443, 0x10, 1400).build(),
            FrameSpec::echo(a, b, 7, 56).build(),
            vec![0xab; 60],
        ];
        let passed = [1, 3, 4, 5].map(|i| frames[i].clone()).to_vec();
        for mode in DatapathMode::ALL {
            let run = run_on_vnic(mode, filter("deny_ports = [22, 53]"), frames.clone()).unwrap();
            assert_eq!(run.frames, passed, "{mode}");
            let reason = DropReason::by_name("port_denied").unwrap();
            assert_eq!(run.drops.get(reason), 2, "{mode}");
            assert_eq!(run.drops.total(), 2, "{mode}");
            let c = &run.counters[0].1;
            assert_eq!(
                (
                    c.count_at("packets"),
                    c.count_at("denied"),
                    c.count_at("unparsed")
                ),
                (Some(6), Some(2), Some(1)),
                "{mode}"
            );
        }
    }

    #[test]
    fn the_list_applies_to_the_protocol_asked_for() {
        let (a, b) = (0x0a00_0001, 0x0a00_0002);
        let frames = vec![
            FrameSpec::udp(a, b, 1000, 53, 18).build(),
            FrameSpec::tcp(a, b, 1000, 53, 0x02, 18).build(),
        ];
        let run = run_on_vnic(
            DatapathMode::Split,
            filter("deny_ports = [53]\nproto = \"tcp\""),
            frames.clone(),
        )
        .unwrap();
        assert_eq!(run.frames, vec![frames[0].clone()]);
        let e = crate::build(
            SPEC.name,
            &"proto = \"icmp\"".parse().unwrap(),
            &BuildContext::default(),
        )
        .err()
        .unwrap();
        assert!(e.starts_with("port_filter:") && e.contains("proto"), "{e}");
    }
}
