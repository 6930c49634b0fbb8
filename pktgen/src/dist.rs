//! Per-frame choices made in O(1) without allocation: a small fast PRNG, range reduction without
//! division, Zipf-skewed flow popularity through an alias table, frame size mixes (IMIX and
//! custom) as a precomputed smooth schedule, and the flow-popularity setting.
//!
//! Everything here is built once per generator (tables sized by the flow count or the mix
//! weights) and then only indexed on the hot path.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The RFC 2544 §9 frame sizes for Ethernet (FCS included).
pub const RFC2544_SIZES: [u32; 7] = [64, 128, 256, 512, 1024, 1280, 1518];

/// wyrand: one multiply per 64 random bits, passes BigCrush, and is trivially seedable. Used for
/// flow selection and noise, never for anything security-related.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x2d35_8dcc_aa6c_78a5)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// A uniform `f64` in `[0, 1)`.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform value in `0..n` (`n > 0`), by multiply-shift (Lemire) instead of a division.
    #[inline]
    pub fn below(&mut self, n: u32) -> u32 {
        fastrange(self.next_u64() >> 32, n)
    }
}

/// Maps 32 random bits (in the low half of `x`) to `0..n` without a division.
#[inline]
pub fn fastrange(x: u64, n: u32) -> u32 {
    (((x & 0xffff_ffff) * u64::from(n)) >> 32) as u32
}

/// A 64-bit mixer (the splitmix64 finaliser): a bijection that spreads consecutive inputs over
/// the whole range; used for per-flow pseudorandom addresses and ports (RFC 4814 style).
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `x % d` for a fixed `d` without a division instruction (Lemire, Kaser & Kurz, "Faster
/// remainder by direct computation", 2019): two multiplications, exact for all 32-bit `x`.
#[derive(Clone, Copy, Debug)]
pub struct FastMod {
    m: u64,
    d: u32,
}

impl FastMod {
    /// The reducer for divisor `d` (`d > 0`).
    pub fn new(d: u32) -> Self {
        let d = d.max(1);
        Self {
            m: (u64::MAX / u64::from(d)).wrapping_add(1),
            d,
        }
    }

    /// `x % d`.
    #[inline]
    pub fn rem(&self, x: u32) -> u32 {
        if self.d == 1 {
            return 0;
        }
        let low = self.m.wrapping_mul(u64::from(x));
        ((u128::from(low) * u128::from(self.d)) >> 64) as u32
    }

    /// The divisor.
    pub fn divisor(&self) -> u32 {
        self.d
    }
}

/// Walker/Vose alias table: samples index `i` with probability `w[i] / sum(w)` in O(1) (one
/// random number, one table entry). Each entry packs the acceptance threshold (scaled to 2^32)
/// and the alias, so a sample touches one 8-byte slot.
#[derive(Clone, Debug)]
pub struct AliasTable {
    slots: Box<[(u32, u32)]>,
}

impl AliasTable {
    /// Builds the table from non-negative weights (at least one positive).
    pub fn new(weights: &[f64]) -> Self {
        let n = weights.len().max(1);
        let total: f64 = weights.iter().sum();
        let scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut prob = vec![1.0f64; n];
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) =
            (0..n).partition(|&i| scaled[i] < 1.0);
        let mut p = scaled;
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            prob[s] = p[s];
            alias[s] = l as u32;
            p[l] -= 1.0 - p[s];
            if p[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Leftovers (rounding) keep probability 1.
        let slots = prob
            .iter()
            .zip(&alias)
            .map(|(&pr, &a)| {
                let t = (pr.clamp(0.0, 1.0) * 4_294_967_296.0).min(u32::MAX as f64) as u32;
                // A full slot must always accept.
                (if pr >= 1.0 { u32::MAX } else { t }, a)
            })
            .collect();
        Self { slots }
    }

    /// Number of outcomes.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True if there are no outcomes (never: at least one is always built).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Draws an index.
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        let r = rng.next_u64();
        let i = fastrange(r >> 32, self.slots.len() as u32) as usize;
        let (threshold, alias) = self.slots[i];
        if (r as u32) < threshold || threshold == u32::MAX {
            i as u32
        } else {
            alias
        }
    }
}

/// Zipf weights `1 / (rank + 1)^s` for `n` ranks.
pub fn zipf_weights(n: u32, s: f64) -> Vec<f64> {
    (0..n).map(|r| (f64::from(r) + 1.0).powf(-s)).collect()
}

/// How the generator picks the flow of each frame.
#[derive(Clone, Copy, Debug, Default)]
pub enum FlowDist {
    /// Flows in turn, one frame each (every flow equally often; the paper's "a different flow per
    /// packet").
    #[default]
    RoundRobin,
    /// Uniformly at random (seeded).
    Uniform,
    /// Zipf-skewed: flow `i` (rank `i`, flow 0 the most popular) with probability proportional
    /// to `1 / (i + 1)^s`; realistic "elephants and mice" popularity for flow-table studies.
    Zipf {
        /// The exponent `s` (> 0; 1.0 is classic Zipf).
        s: f64,
    },
}

impl PartialEq for FlowDist {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::RoundRobin, Self::RoundRobin) | (Self::Uniform, Self::Uniform) => true,
            (Self::Zipf { s: a }, Self::Zipf { s: b }) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

impl Eq for FlowDist {}

impl fmt::Display for FlowDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RoundRobin => f.write_str("round-robin"),
            Self::Uniform => f.write_str("uniform"),
            Self::Zipf { s } => write!(f, "zipf:{s}"),
        }
    }
}

impl FromStr for FlowDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "`{s}` is not a flow distribution (allowed: round-robin, uniform, zipf:<s> with s > 0)"
            )
        };
        match s.trim() {
            "round-robin" | "rr" => Ok(Self::RoundRobin),
            "uniform" | "random" => Ok(Self::Uniform),
            "zipf" => Ok(Self::Zipf { s: 1.0 }),
            z => {
                let e = z.strip_prefix("zipf:").ok_or_else(bad)?;
                let s: f64 = e.parse().map_err(|_| bad())?;
                if !(s > 0.0 && s.is_finite()) {
                    return Err(bad());
                }
                Ok(Self::Zipf { s })
            }
        }
    }
}

impl Serialize for FlowDist {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for FlowDist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A frame size mix: sizes (FCS included) with integer weights. Written `"imix"` (7:4:1 of
/// 64/594/1518, mean 361.8 B), `"imix-csit"` (28:16:4 of 64/570/1518), `"rfc2544"` (the seven
/// RFC 2544 sizes, equal weights) or `"64:7,594:4,1518:1"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeMix {
    /// `(frame size incl. FCS, weight)`, weights > 0.
    pub entries: Vec<(u32, u32)>,
    /// The name it was written as (for reports).
    pub name: String,
}

impl SizeMix {
    /// The simple IMIX: 7 x 64 B, 4 x 594 B, 1 x 1518 B.
    pub fn imix() -> Self {
        Self {
            entries: vec![(64, 7), (594, 4), (1518, 1)],
            name: "imix".into(),
        }
    }

    /// Sum of the weights: the length of one period of the schedule.
    pub fn period(&self) -> u32 {
        self.entries.iter().map(|e| e.1).sum()
    }

    /// Mean frame size (FCS included).
    pub fn mean_size(&self) -> f64 {
        let (n, w) = self.entries.iter().fold((0u64, 0u64), |a, &(s, w)| {
            (a.0 + u64::from(s) * u64::from(w), a.1 + u64::from(w))
        });
        n as f64 / w.max(1) as f64
    }

    /// The largest size in the mix.
    pub fn max_size(&self) -> u32 {
        self.entries.iter().map(|e| e.0).max().unwrap_or(0)
    }

    /// The smallest size in the mix.
    pub fn min_size(&self) -> u32 {
        self.entries.iter().map(|e| e.0).min().unwrap_or(0)
    }

    /// One period of entry indices, each entry `weight` times, interleaved as evenly as possible
    /// (smooth weighted round robin), so any window of the schedule carries close to the mix's
    /// proportions and the byte rate has no long-period ripple.
    pub fn schedule(&self) -> Vec<u16> {
        let total: i64 = self.entries.iter().map(|e| i64::from(e.1)).sum();
        let mut current = vec![0i64; self.entries.len()];
        let mut out = Vec::with_capacity(total as usize);
        for _ in 0..total {
            let mut best = 0;
            for (j, e) in self.entries.iter().enumerate() {
                current[j] += i64::from(e.1);
                if current[j] > current[best] {
                    best = j;
                }
            }
            current[best] -= total;
            out.push(best as u16);
        }
        out
    }
}

/// Largest number of entries and largest period of a mix.
pub const MAX_MIX_ENTRIES: usize = 64;
/// Largest sum of weights (the schedule is precomputed).
pub const MAX_MIX_PERIOD: u32 = 1 << 16;

impl fmt::Display for SizeMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name.as_str() {
            "" => {
                let parts: Vec<String> = self
                    .entries
                    .iter()
                    .map(|(s, w)| format!("{s}:{w}"))
                    .collect();
                f.write_str(&parts.join(","))
            }
            n => f.write_str(n),
        }
    }
}

impl FromStr for SizeMix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let named = |entries: Vec<(u32, u32)>| Self {
            entries,
            name: t.to_string(),
        };
        match t {
            "imix" => return Ok(Self::imix()),
            "imix-csit" => return Ok(named(vec![(64, 28), (570, 16), (1518, 4)])),
            "rfc2544" => return Ok(named(RFC2544_SIZES.iter().map(|&s| (s, 1)).collect())),
            _ => {}
        }
        let bad = |why: &str| {
            format!(
                "`{s}` is not a size mix ({why}); allowed: imix, imix-csit, rfc2544, or size:weight pairs like 64:7,594:4,1518:1"
            )
        };
        let mut entries = Vec::new();
        for part in t.split(',') {
            let (size, weight) = match part.trim().split_once(':') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part.trim(), "1"),
            };
            let size: u32 = size.parse().map_err(|_| bad("bad size"))?;
            let weight: u32 = weight.parse().map_err(|_| bad("bad weight"))?;
            if weight == 0 {
                return Err(bad("weights must be > 0"));
            }
            entries.push((size, weight));
        }
        if entries.is_empty() || entries.len() > MAX_MIX_ENTRIES {
            return Err(bad("1..=64 entries"));
        }
        let mix = Self {
            entries,
            name: String::new(),
        };
        if mix.period() > MAX_MIX_PERIOD {
            return Err(bad("weights sum above 65536"));
        }
        Ok(mix)
    }
}

impl Serialize for SizeMix {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SizeMix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastmod_matches_remainder() {
        let mut rng = Rng::new(7);
        for d in [1u32, 2, 3, 4, 7, 1000, 4_130_000, 65_535, u32::MAX] {
            let m = FastMod::new(d);
            for x in [0u32, 1, d.wrapping_sub(1), d, u32::MAX] {
                assert_eq!(m.rem(x), x % d, "{x} % {d}");
            }
            for _ in 0..1000 {
                let x = rng.next_u64() as u32;
                assert_eq!(m.rem(x), x % d, "{x} % {d}");
            }
        }
    }

    #[test]
    fn rng_is_deterministic_and_spread() {
        let a: Vec<u64> = {
            let mut r = Rng::new(42);
            (0..5).map(|_| r.next_u64()).collect()
        };
        let mut r = Rng::new(42);
        assert_eq!(a, (0..5).map(|_| r.next_u64()).collect::<Vec<_>>());
        let mut hist = [0u32; 10];
        for _ in 0..100_000 {
            hist[r.below(10) as usize] += 1;
        }
        for h in hist {
            assert!((9_000..11_000).contains(&h), "{hist:?}");
        }
        let f = r.next_f64();
        assert!((0.0..1.0).contains(&f));
    }

    #[test]
    fn alias_table_follows_the_weights() {
        let w = [1.0, 2.0, 3.0, 0.0, 4.0];
        let t = AliasTable::new(&w);
        let mut rng = Rng::new(1);
        let mut hist = [0u32; 5];
        let n = 200_000;
        for _ in 0..n {
            hist[t.sample(&mut rng) as usize] += 1;
        }
        assert_eq!(hist[3], 0, "zero weight never drawn");
        for (i, &wi) in w.iter().enumerate() {
            let expect = wi / 10.0 * n as f64;
            assert!(
                (hist[i] as f64 - expect).abs() < 0.02 * n as f64,
                "{i}: {hist:?}"
            );
        }
    }

    #[test]
    fn zipf_alias_is_skewed_like_zipf() {
        let n = 1000;
        let t = AliasTable::new(&zipf_weights(n, 1.0));
        let mut rng = Rng::new(3);
        let mut hist = vec![0u32; n as usize];
        for _ in 0..500_000 {
            hist[t.sample(&mut rng) as usize] += 1;
        }
        // Rank 0 about twice rank 1 and ten times rank 9.
        let r01 = f64::from(hist[0]) / f64::from(hist[1]);
        let r09 = f64::from(hist[0]) / f64::from(hist[9]);
        assert!((1.8..2.2).contains(&r01), "{r01}");
        assert!((8.5..11.5).contains(&r09), "{r09}");
    }

    #[test]
    fn size_mixes_parse_and_schedule_evenly() {
        let m: SizeMix = "imix".parse().unwrap();
        assert_eq!(m.period(), 12);
        assert!((m.mean_size() - 361.833).abs() < 0.01);
        let sched = m.schedule();
        assert_eq!(sched.len(), 12);
        assert_eq!(sched.iter().filter(|&&i| i == 0).count(), 7);
        assert_eq!(sched.iter().filter(|&&i| i == 2).count(), 1);
        // Smooth: the 64 B entry never appears more than twice in a row.
        let runs = sched
            .windows(3)
            .filter(|w| w.iter().all(|&i| i == 0))
            .count();
        assert_eq!(runs, 0, "{sched:?}");
        let c: SizeMix = "64:3, 1518".parse().unwrap();
        assert_eq!(c.entries, vec![(64, 3), (1518, 1)]);
        assert_eq!(c.to_string(), "64:3,1518:1");
        assert_eq!("rfc2544".parse::<SizeMix>().unwrap().entries.len(), 7);
        for bad in ["", "64:0", "x:1", "64:1:2"] {
            assert!(bad.parse::<SizeMix>().is_err(), "{bad}");
        }
        assert_eq!(
            "zipf:1.2".parse::<FlowDist>().unwrap(),
            FlowDist::Zipf { s: 1.2 }
        );
        assert!("zipf:-1".parse::<FlowDist>().is_err());
        assert_eq!("uniform".parse::<FlowDist>().unwrap(), FlowDist::Uniform);
    }
}
