//! Deterministic NAT (RFC 7422): the outside address and ports of a subscriber are computed from
//! its inside address, so the mapping needs no log at all: who held `outside:port` at any time
//! is answered from the config alone (`dataplane nat-lookup`, no running instance needed, as an
//! operator answering an abuse request at any later date needs).
//!
//! The computation (VPP's det44 does the same arithmetic): the subscribers are the addresses of
//! `subscriber_prefixes` in order, `S` of them; the instance's `A` outside addresses each serve
//! `ratio = ceil(S / A)` subscribers; subscriber `i` gets address `i / ratio` and slot
//! `i mod ratio`. Each worker owns a slice `lo..=hi` of the ports (return traffic is steered to
//! it by port), cut into `ratio` ranges of `(hi - lo + 1) / ratio` ports: slot `j` takes the
//! `j`-th range of every worker's slice. A subscriber's sessions on one worker take ports of its
//! range there; a full range refuses the next mapping as `subscriber_limit` (logged as quota
//! exceeded, natEvent 13). With `instances`, each instance does this over its own share of the
//! pool, so a reverse lookup starts by finding the instance that owns the outside address.

use std::net::Ipv4Addr;

use super::NatConfig;
use super::alloc::worker_slice;
use super::config::{Prefix, prefix_addresses};
use crate::params::{bad_param, parse_params};

use super::NAME;

/// The subscriber arithmetic of one instance (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct Deterministic {
    subs: Vec<Prefix>,
    before: Vec<u32>,
    count: u32,
    ratio: u32,
}

impl Deterministic {
    /// Subscribers of `subs` over `addresses` outside addresses.
    pub fn new(subs: &[Prefix], addresses: u32) -> Self {
        let mut before = Vec::with_capacity(subs.len());
        let mut n = 0u64;
        for p in subs {
            before.push(n as u32);
            n += u64::from(!p.1) + 1;
        }
        let count = n.min(u64::from(u32::MAX)) as u32;
        Self {
            subs: subs.to_vec(),
            before,
            count,
            ratio: count.div_ceil(addresses.max(1)).max(1),
        }
    }

    /// Subscribers sharing one outside address.
    pub fn ratio(&self) -> u32 {
        self.ratio
    }

    /// Subscribers in all.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Ports each subscriber gets in worker slice `lo..=hi`.
    pub fn ports_per(&self, lo: u16, hi: u16) -> u32 {
        (u32::from(hi) - u32::from(lo) + 1) / self.ratio
    }

    /// `(address index, slot)` of inside address `inside`, if it is a subscriber.
    #[inline]
    pub fn place(&self, inside: u32) -> Option<(u32, u32)> {
        let i = self
            .subs
            .iter()
            .zip(&self.before)
            .find(|((b, m), _)| inside & m == *b)
            .map(|((b, _), before)| before + (inside - b))?;
        Some((i / self.ratio, i % self.ratio))
    }

    /// The ports of slot `slot` in worker slice `lo..=hi`, inclusive.
    pub fn range(&self, slot: u32, lo: u16, hi: u16) -> (u16, u16) {
        let per = self.ports_per(lo, hi);
        let first = u32::from(lo) + slot * per;
        (first as u16, (first + per - 1) as u16)
    }

    /// The subscriber that holds `port` of address index `aidx` in worker slice `lo..=hi`.
    pub fn reverse(&self, aidx: u32, port: u16, lo: u16, hi: u16) -> Option<u32> {
        let per = self.ports_per(lo, hi);
        if per == 0 || !(lo..=hi).contains(&port) {
            return None;
        }
        let slot = (u32::from(port) - u32::from(lo)) / per;
        if slot >= self.ratio {
            return None;
        }
        let i = u64::from(aidx) * u64::from(self.ratio) + u64::from(slot);
        if i >= u64::from(self.count) {
            return None;
        }
        let i = i as u32;
        let k = self.before.partition_point(|&b| b <= i) - 1;
        Some(self.subs[k].0 + (i - self.before[k]))
    }
}

/// One instance's share of a deterministic NAT.
#[derive(Clone, Debug)]
struct InstancePlan {
    addresses: Vec<u32>,
    det: Deterministic,
}

/// Where a subscriber's sessions leave on one instance (see [`DeterministicPlan::forward`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The NAT instance (`instance`).
    pub instance: u32,
    /// The outside address.
    pub outside: Ipv4Addr,
    /// `(worker, first port, last port)` per worker: the subscriber's ports on that worker.
    pub ranges: Vec<(u16, u16, u16)>,
}

/// Who held an outside address and port (see [`DeterministicPlan::reverse`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The subscriber's inside address.
    pub inside: Ipv4Addr,
    /// The NAT instance whose share holds the outside address.
    pub instance: u32,
    /// The worker whose port slice holds the port.
    pub worker: u16,
    /// The subscriber's port range on that worker.
    pub range: (u16, u16),
}

/// A deterministic NAT's mapping computed from its config, for every instance at once: what
/// `dataplane nat-lookup` answers offline and the running NAT's `lookup` answers live.
#[derive(Clone, Debug)]
pub struct DeterministicPlan {
    instances: Vec<InstancePlan>,
    slices: Vec<(u16, u16)>,
}

impl DeterministicPlan {
    /// The plan of a `nat` parameter table run by `workers` workers (the config's `instance`
    /// does not matter: every instance's share is computed). Errors name the key.
    pub fn from_params(params: &toml::Table, workers: u16) -> Result<Self, String> {
        let cfg: NatConfig = parse_params(NAME, params)?;
        Self::new(&cfg, params.contains_key("nat_ip"), workers)
    }

    /// As [`DeterministicPlan::from_params`], from a parsed config.
    pub fn new(cfg: &NatConfig, explicit_nat_ip: bool, workers: u16) -> Result<Self, String> {
        if !cfg.deterministic {
            return Err(bad_param(
                NAME,
                "deterministic",
                "is not set: only a deterministic NAT's mappings can be computed from its \
                 config (a per-session NAT's are in its IPFIX log)",
            ));
        }
        let workers = workers.max(1);
        let slices = (0..workers)
            .map(|w| worker_slice(cfg.port_min, cfg.port_max, w, workers))
            .collect::<Result<Vec<_>, _>>()?;
        let mut instances = Vec::new();
        for k in 0..cfg.instances.max(1) {
            let mut c = cfg.clone();
            c.instance = k;
            let st = c.check(explicit_nat_ip)?;
            let subs = st.deterministic.unwrap_or_default();
            let n = prefix_addresses(&st.pool) as u32;
            let det = Deterministic::new(&subs, n);
            if let Some(&(lo, hi)) = slices.iter().find(|&&(lo, hi)| det.ports_per(lo, hi) == 0) {
                return Err(bad_param(
                    NAME,
                    "subscriber_prefixes",
                    format!(
                        "{} subscribers on {n} outside addresses (instance {k}) make {} per \
                         address, more than the {} ports of a worker's slice {lo}-{hi}; give \
                         more addresses, fewer subscribers, fewer workers or a wider port range",
                        det.count(),
                        det.ratio(),
                        u32::from(hi) - u32::from(lo) + 1
                    ),
                ));
            }
            let addresses = st
                .pool
                .iter()
                .flat_map(|&(b, m)| (0..=!m).map(move |o| b + o))
                .collect();
            instances.push(InstancePlan { addresses, det });
        }
        Ok(Self { instances, slices })
    }

    /// Subscribers sharing an outside address (on instance 0).
    pub fn ratio(&self) -> u32 {
        self.instances[0].det.ratio()
    }

    /// Where subscriber `inside`'s sessions leave, per instance; empty when it is in none of
    /// `subscriber_prefixes`.
    pub fn forward(&self, inside: Ipv4Addr) -> Vec<Placement> {
        let mut out = Vec::new();
        for (k, ip) in self.instances.iter().enumerate() {
            let Some((a, slot)) = ip.det.place(u32::from(inside)) else {
                continue;
            };
            let Some(&outside) = ip.addresses.get(a as usize) else {
                continue;
            };
            out.push(Placement {
                instance: k as u32,
                outside: Ipv4Addr::from(outside),
                ranges: self
                    .slices
                    .iter()
                    .enumerate()
                    .map(|(w, &(lo, hi))| {
                        let (f, l) = ip.det.range(slot, lo, hi);
                        (w as u16, f, l)
                    })
                    .collect(),
            });
        }
        out
    }

    /// The subscriber that `outside:port` belongs to, if any.
    pub fn reverse(&self, outside: Ipv4Addr, port: u16) -> Option<Holder> {
        let o = u32::from(outside);
        for (k, ip) in self.instances.iter().enumerate() {
            let Some(a) = ip.addresses.iter().position(|&x| x == o) else {
                continue;
            };
            for (w, &(lo, hi)) in self.slices.iter().enumerate() {
                if !(lo..=hi).contains(&port) {
                    continue;
                }
                let inside = ip.det.reverse(a as u32, port, lo, hi)?;
                let (_, slot) = ip.det.place(inside)?;
                return Some(Holder {
                    inside: Ipv4Addr::from(inside),
                    instance: k as u32,
                    worker: w as u16,
                    range: ip.det.range(slot, lo, hi),
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(extra: &str, workers: u16) -> Result<DeterministicPlan, String> {
        let t: toml::Table = format!(
            "deterministic = true\nnat_ips = \"198.51.100.0/30\"\n\
             subscriber_prefixes = [\"100.64.0.0/24\", \"100.64.9.0/30\"]\n{extra}"
        )
        .parse()
        .unwrap();
        DeterministicPlan::from_params(&t, workers)
    }

    #[test]
    fn every_subscriber_gets_its_own_ports_and_maps_back() {
        let p = plan("", 2).unwrap();
        // 260 subscribers on 4 addresses: 65 per address.
        assert_eq!(p.ratio(), 65);
        let mut seen = std::collections::HashSet::new();
        for s in (0..256u32)
            .map(|i| 0x6440_0000 + i)
            .chain((0..4).map(|i| 0x6440_0900 + i))
        {
            let f = p.forward(Ipv4Addr::from(s));
            assert_eq!(f.len(), 1);
            let pl = &f[0];
            assert_eq!(pl.ranges.len(), 2);
            for &(w, first, last) in &pl.ranges {
                assert!(first <= last);
                for port in [first, last, first + (last - first) / 2] {
                    assert!(seen.insert((pl.outside, port)), "{s:x} shares {port}");
                    let h = p.reverse(pl.outside, port).unwrap();
                    assert_eq!(h.inside, Ipv4Addr::from(s));
                    assert_eq!((h.worker, h.range), (w, (first, last)));
                }
            }
        }
        assert!(p.forward(Ipv4Addr::new(100, 64, 1, 0)).is_empty());
        assert_eq!(p.reverse(Ipv4Addr::new(198, 51, 100, 9), 2000), None);
        assert_eq!(p.reverse(Ipv4Addr::new(198, 51, 100, 0), 80), None);
    }

    #[test]
    fn instances_have_their_own_addresses_and_too_many_subscribers_fail() {
        let p = plan("instances = 2", 1).unwrap();
        let f = p.forward(Ipv4Addr::new(100, 64, 0, 7));
        assert_eq!(f.len(), 2);
        assert_ne!(f[0].outside, f[1].outside);
        for pl in &f {
            let h = p.reverse(pl.outside, pl.ranges[0].1).unwrap();
            assert_eq!(
                (h.instance, h.inside),
                (pl.instance, Ipv4Addr::new(100, 64, 0, 7))
            );
        }
        let e = plan("port_min = 60000\nport_max = 60100", 4).unwrap_err();
        assert!(
            e.contains("subscriber_prefixes") && e.contains("per address"),
            "{e}"
        );
        let t: toml::Table = "nat_ip = \"10.0.0.1\"".parse().unwrap();
        let e = DeterministicPlan::from_params(&t, 1).unwrap_err();
        assert!(e.contains("deterministic"), "{e}");
    }
}
