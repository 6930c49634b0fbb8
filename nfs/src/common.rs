//! Pieces shared by the network functions of this crate: parameter parsing with clear errors,
//! registering an NF's own drop reasons, the drop-count report, and the debug checksum verifier.
//!
//! Every NF takes its parameters as a `toml::Table` (the NF's section of a pipeline config) and
//! deserialises it into a config struct with `#[serde(deny_unknown_fields)]` and defaults equal
//! to the paper's setup. [`parse_params`] turns serde's messages into one line that names the
//! NF and the key (`nat: unknown field `flowz`, expected one of ...`), so a bad config fails
//! before any packet moves.
#![forbid(unsafe_code)]

use dataplane::{Burst, DropCounts, DropReason};
use serde::de::DeserializeOwned;
use std::net::Ipv4Addr;

use crate::headers::verify_frame_checksums;

/// How many packets ahead of the one being worked on a network function prefetches headers
/// ([`Burst::prefetch`]): far enough that a header's cache miss overlaps a few packets of work,
/// near enough that the prefetched lines are still in L1 when used (DPDK's l3fwd uses 3; 4
/// covers the somewhat shorter per-packet work of macswap).
pub const PREFETCH_AHEAD: usize = 4;

/// Prefetches the first [`PREFETCH_AHEAD`] headers of `burst`, before the walk that keeps
/// prefetching `i + PREFETCH_AHEAD` while it works on packet `i`.
#[inline(always)]
pub fn prefetch_start(burst: &Burst) {
    for i in 0..PREFETCH_AHEAD {
        burst.prefetch(i);
    }
}

/// Deserialises an NF's parameter table into `T`, prefixing errors with the NF name.
pub fn parse_params<T: DeserializeOwned>(nf: &str, params: &toml::Table) -> Result<T, String> {
    T::deserialize(toml::Value::Table(params.clone())).map_err(|e| {
        let msg = e.to_string();
        let mut parts = msg.lines().map(str::trim).filter(|l| !l.is_empty());
        let first = parts.next().unwrap_or("invalid parameters").to_string();
        match parts.next() {
            Some(ctx) => format!("{nf}: {first} ({ctx})"),
            None => format!("{nf}: {first}"),
        }
    })
}

/// An error naming the NF, the key and what is allowed.
pub fn bad_param(nf: &str, key: &str, msg: impl std::fmt::Display) -> String {
    format!("{nf}: invalid `{key}`: {msg}")
}

/// Parses a dotted-quad IPv4 address from key `key`.
pub fn parse_ipv4(nf: &str, key: &str, s: &str) -> Result<u32, String> {
    s.parse::<Ipv4Addr>().map(u32::from).map_err(|_| {
        bad_param(
            nf,
            key,
            format!("`{s}` is not an IPv4 address (expected e.g. \"10.0.0.1\")"),
        )
    })
}

/// Converts a timeout in seconds from key `key` to ms ticks, bounded so wrapping tick arithmetic
/// stays correct (at most 2 000 000 s ≈ 23 days).
pub fn timeout_ms(nf: &str, key: &str, secs: u32, allow_zero: bool) -> Result<u32, String> {
    if secs == 0 && !allow_zero {
        return Err(bad_param(nf, key, "must be at least 1 second"));
    }
    if secs > 2_000_000 {
        return Err(bad_param(nf, key, "must be at most 2000000 seconds"));
    }
    Ok(secs * 1000)
}

/// Registers a drop reason of this crate's network functions (see [`DropReason::register`]).
/// Called when a function is built, never per packet. Every name passed here is a snake_case
/// literal and the registry holds far more codes than the crate's few reasons, so the only
/// failure left is a process that registered [`DropReason::MAX`] reasons of its own: that is a
/// build-time error naming the function and the reason.
pub fn register_reason(
    nf: &str,
    name: &'static str,
    doc: &'static str,
) -> Result<DropReason, String> {
    DropReason::register(name, doc).map_err(|e| format!("{nf}: cannot register drop reason: {e}"))
}

/// The drop counts as a JSON object `{reason: count}` with every core reason and every reason in
/// `own` (the function's registered ones), zeros included, so merged reports always have the
/// same keys whatever the traffic was.
pub fn drops_json(d: &DropCounts, own: &[DropReason]) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for r in DropReason::core().chain(own.iter().copied()) {
        m.insert(r.name().to_string(), d.get(r).into());
    }
    serde_json::Value::Object(m)
}

/// The debug `verify_checksums` slow path: copies the whole frame (reading a nicmem payload
/// through the counted CPU path) and recomputes every checksum.
#[derive(Debug, Default)]
pub struct ChecksumVerifier {
    scratch: Vec<u8>,
    /// Frames verified.
    pub verified: u64,
    /// Frames with at least one bad checksum.
    pub mismatches: u64,
}

impl ChecksumVerifier {
    /// A verifier with a scratch buffer for frames up to 16 KiB (bigger ones reallocate).
    pub fn new() -> Self {
        Self {
            scratch: Vec::with_capacity(16 * 1024),
            verified: 0,
            mismatches: 0,
        }
    }

    /// Verifies the checksums of packet `i` of `burst` by full recomputation; returns true if
    /// all are valid.
    pub fn verify(&mut self, burst: &Burst, i: usize) -> bool {
        burst.copy_frame(i, &mut self.scratch);
        self.verified += 1;
        let ok = verify_frame_checksums(&self.scratch).is_ok();
        if !ok {
            self.mismatches += 1;
        }
        ok
    }
}

/// Deterministic per-worker seed derivation (SplitMix64), so tables of different workers and
/// different NFs use unrelated hash seeds.
pub fn mix_seed(seed: u64, worker: u16, salt: u64) -> u64 {
    let mut z = seed
        .wrapping_add(u64::from(worker).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(salt.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Demo {
        #[serde(default)]
        flows: u64,
    }

    #[test]
    fn errors_name_nf_and_key() {
        let t: toml::Table = toml::from_str("flowz = 1").unwrap();
        let e = parse_params::<Demo>("nat", &t).unwrap_err();
        assert!(e.starts_with("nat: unknown field `flowz`"), "{e}");
        assert!(e.contains("flows"), "{e}");
        let t: toml::Table = toml::from_str("flows = \"x\"").unwrap();
        let e = parse_params::<Demo>("nat", &t).unwrap_err();
        assert!(e.contains("`flows`"), "{e}");
        let e = parse_ipv4("nat", "nat_ip", "10.0.0").unwrap_err();
        assert!(e.contains("nat_ip") && e.contains("10.0.0"), "{e}");
        assert_eq!(parse_ipv4("nat", "nat_ip", "10.0.0.1"), Ok(0x0a00_0001));
        assert!(timeout_ms("nat", "udp_timeout_s", 0, false).is_err());
        assert_eq!(timeout_ms("nat", "udp_timeout_s", 300, false), Ok(300_000));
    }

    #[test]
    fn drops_json_has_every_core_and_own_reason() {
        let own = register_reason("test", "common_test_reason", "a test reason").unwrap();
        let mut d = DropCounts::default();
        d.add(DropReason::FRAGMENT, 2);
        d.add(own, 1);
        let j = drops_json(&d, &[own]);
        assert_eq!(j["fragment"], 2);
        assert_eq!(j["common_test_reason"], 1);
        assert_eq!(j["truncated"], 0);
        assert_eq!(j.as_object().unwrap().len(), DropReason::core().count() + 1);
        assert_eq!(d.total(), 3);
    }
}
