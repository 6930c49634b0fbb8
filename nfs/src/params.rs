//! What the constructors of this crate's network functions share: parameter parsing with clear
//! errors, and per-worker seeds.
//!
//! Every NF takes its parameters as a `toml::Table` (the NF's section of a pipeline config) and
//! deserialises it into a config struct with `#[serde(deny_unknown_fields)]` and defaults equal
//! to the paper's setup. [`parse_params`] turns serde's messages into one line that names the
//! NF and the key (`nat: unknown field `flowz`, expected one of ...`), so a bad config fails
//! before any packet moves.
#![forbid(unsafe_code)]

use serde::de::DeserializeOwned;
use std::net::Ipv4Addr;

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
}
