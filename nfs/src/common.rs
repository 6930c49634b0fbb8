//! Pieces shared by the network functions of this crate: parameter parsing with clear errors,
//! per-reason drop counters, and the debug checksum verifier.
//!
//! Every NF takes its parameters as a `toml::Table` (the NF's section of a pipeline config) and
//! deserialises it into a config struct with `#[serde(deny_unknown_fields)]` and defaults equal
//! to the paper's setup. [`parse_params`] turns serde's messages into one line that names the
//! NF and the key (`nat: unknown field `flowz`, expected one of ...`), so a bad config fails
//! before any packet moves.
#![forbid(unsafe_code)]

use dataplane::{DropReason, Packet};
use serde::de::DeserializeOwned;
use std::net::Ipv4Addr;

use crate::headers::verify_frame_checksums;

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

/// Per-reason drop counters in a flat array (no hashing per packet).
#[derive(Clone, Debug, Default)]
pub struct DropCounters {
    counts: [u64; DropReason::COUNT],
}

impl DropCounters {
    /// Counts one drop.
    #[inline(always)]
    pub fn count(&mut self, r: DropReason) {
        self.counts[r.index()] += 1;
    }
    /// Drops counted for `r`.
    pub fn get(&self, r: DropReason) -> u64 {
        self.counts[r.index()]
    }
    /// All drops.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
    /// A JSON object `{reason: count}` with every reason (zeros included, so merged reports
    /// always have the same keys).
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for r in DropReason::ALL {
            m.insert(r.as_str().to_string(), self.counts[r.index()].into());
        }
        serde_json::Value::Object(m)
    }
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

    /// Verifies `pkt`'s checksums by full recomputation; returns true if all are valid.
    pub fn verify(&mut self, pkt: &Packet) -> bool {
        pkt.copy_frame(&mut self.scratch);
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
    fn drop_counters_json_has_every_reason() {
        let mut d = DropCounters::default();
        d.count(DropReason::Fragment);
        d.count(DropReason::Fragment);
        let j = d.to_json();
        assert_eq!(j["fragment"], 2);
        assert_eq!(j.as_object().unwrap().len(), DropReason::COUNT);
        assert_eq!(d.total(), 2);
    }
}
