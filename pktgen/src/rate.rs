//! Rate control: offered load in frames/s, bits/s or percent of line rate, the intended
//! departure time of every frame, and the wall clock the generator and sink share.
//!
//! **Wire overhead.** Frame sizes count the 4-byte FCS (RFC 2544). On the wire every frame also
//! occupies 8 bytes of preamble + SFD and a 12-byte inter-frame gap, so a frame of `s` bytes
//! takes `(s + 20) * 8` bit times: 100 Gb/s carries 148.81 Mpps of 64 B frames and 8.127 Mpps of
//! 1518 B frames. Bit rates here are **L1** (wire) rates unless named L2 (frame bits with FCS).
//!
//! **Intended departure times.** A [`Pacer`] gives frame `k` the time at which it should start on
//! the wire: for a packet rate `t_k = k / pps`, for a bit rate `t_k = (wire bits of frames
//! 0..k) / bps`, computed from the cumulative count (never by adding up increments), so there is
//! no drift and mixed sizes get exact rates (the pktgen-dpdk #372 bug was a mixed-size rate
//! computed from one size). Times are integer picoseconds, which resolves the 6.72 ns gap of
//! 64 B frames at 100 Gb/s without rounding bias.
//!
//! Timestamps in frames are the intended departure times. This is deliberate: stamping the
//! intended time (not when the generator happened to get to it) puts any lateness of the
//! generator into the measured latency instead of silently hiding it ("coordinated omission"),
//! and [`crate::latency::Calibration`] subtracts the generator's own share measured in loopback.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Instant;

/// Preamble (7) + start-of-frame delimiter (1), bytes.
pub const PREAMBLE_SFD: u32 = 8;
/// Minimum inter-frame gap, bytes.
pub const IFG: u32 = 12;
/// Bytes a frame occupies on the wire beyond its size (FCS included in the size).
pub const WIRE_OVERHEAD: u32 = PREAMBLE_SFD + IFG;
/// Picoseconds per second.
pub const PS_PER_S: f64 = 1e12;

/// Bits a frame of `frame_size` bytes (FCS included) occupies on the wire.
#[inline]
pub fn wire_bits(frame_size: u32) -> u64 {
    u64::from(frame_size + WIRE_OVERHEAD) * 8
}

/// Line rate in frames/s for frames of `frame_size` (mean size for mixes) at `line_bps`.
pub fn line_rate_pps(line_bps: f64, frame_size: f64) -> f64 {
    line_bps / ((frame_size + f64::from(WIRE_OVERHEAD)) * 8.0)
}

/// L1 bits/s carried by `pps` frames/s of `frame_size` bytes.
pub fn pps_to_l1_bps(pps: f64, frame_size: f64) -> f64 {
    pps * (frame_size + f64::from(WIRE_OVERHEAD)) * 8.0
}

/// An offered load. Parsed from `"10Mpps"`, `"2.5kpps"`, `"40Gbps"` (L1), `"40Gbps-l2"`,
/// `"95%"` (of line rate) or `"max"` (line rate, back to back).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// Frames per second.
    Pps(f64),
    /// L1 (wire) bits per second: frame + preamble + IFG.
    L1Bps(f64),
    /// L2 bits per second: frame bytes including FCS.
    L2Bps(f64),
    /// Percent of the line rate (100 = line rate).
    LinePercent(f64),
}

impl Rate {
    /// The line rate.
    pub const LINE: Rate = Rate::LinePercent(100.0);

    /// Frames per second this rate means for frames of mean size `frame_size` on a `line_bps`
    /// link.
    pub fn pps(&self, frame_size: f64, line_bps: f64) -> f64 {
        match *self {
            Rate::Pps(p) => p,
            Rate::L1Bps(b) => b / ((frame_size + f64::from(WIRE_OVERHEAD)) * 8.0),
            Rate::L2Bps(b) => b / (frame_size * 8.0),
            Rate::LinePercent(p) => line_rate_pps(line_bps, frame_size) * p / 100.0,
        }
    }

    /// Checks the value is positive and finite.
    pub fn validate(&self) -> Result<(), String> {
        let v = match *self {
            Rate::Pps(v) | Rate::L1Bps(v) | Rate::L2Bps(v) | Rate::LinePercent(v) => v,
        };
        if !(v > 0.0 && v.is_finite()) {
            Err(format!("rate {self} must be positive and finite"))
        } else if matches!(self, Rate::LinePercent(p) if *p > 100.0) {
            Err(format!(
                "rate {self} is above the line rate; allowed 0 < percent <= 100"
            ))
        } else {
            Ok(())
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rate::Pps(p) => write!(f, "{p}pps"),
            Rate::L1Bps(b) => write!(f, "{b}bps"),
            Rate::L2Bps(b) => write!(f, "{b}bps-l2"),
            Rate::LinePercent(p) => write!(f, "{p}%"),
        }
    }
}

fn scale(prefix: &str) -> Option<f64> {
    Some(match prefix {
        "" => 1.0,
        "k" | "K" => 1e3,
        "m" | "M" => 1e6,
        "g" | "G" => 1e9,
        "t" | "T" => 1e12,
        _ => return None,
    })
}

impl FromStr for Rate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let bad = || {
            format!(
                "`{s}` is not a rate (examples: 10Mpps, 14880952pps, 40Gbps, 40Gbps-l2, 95%, max)"
            )
        };
        if t == "max" || t == "line" {
            return Ok(Rate::LINE);
        }
        let num_end = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == '-' || c == '+'))
            .unwrap_or(t.len());
        // "1e6pps": the 'e' is part of the number only when followed by a digit or sign.
        let (num, unit) = t.split_at(num_end);
        let v: f64 = num.parse().map_err(|_| bad())?;
        let unit = unit.trim();
        let rate = if unit == "%" {
            Rate::LinePercent(v)
        } else if let Some(p) = unit.strip_suffix("pps") {
            Rate::Pps(v * scale(p).ok_or_else(bad)?)
        } else if let Some(p) = unit.strip_suffix("bps-l2") {
            Rate::L2Bps(v * scale(p).ok_or_else(bad)?)
        } else if let Some(p) = unit.strip_suffix("bps") {
            Rate::L1Bps(v * scale(p).ok_or_else(bad)?)
        } else {
            return Err(bad());
        };
        rate.validate().map_err(|e| format!("`{s}`: {e}"))?;
        Ok(rate)
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What a [`Pacer`] counts to place frames in time.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Unit {
    Frames,
    L1Bits,
    L2Bits,
}

/// Intended departure times (picoseconds from the start of the stream) at a constant rate.
#[derive(Clone, Debug)]
pub struct Pacer {
    unit: Unit,
    /// Picoseconds per counted unit.
    ps_per_unit: f64,
    /// Units before the next frame.
    done: u64,
    frames: u64,
}

impl Pacer {
    /// A pacer for `rate` on a `line_bps` link. Packet rates are paced per frame; bit rates and
    /// percentages of line rate per wire bit, so a size mix gets its exact byte rate.
    pub fn new(rate: Rate, line_bps: f64) -> Self {
        let (unit, per_s) = match rate {
            Rate::Pps(p) => (Unit::Frames, p),
            Rate::L1Bps(b) => (Unit::L1Bits, b),
            Rate::L2Bps(b) => (Unit::L2Bits, b),
            Rate::LinePercent(p) => (Unit::L1Bits, line_bps * p / 100.0),
        };
        Self {
            unit,
            ps_per_unit: PS_PER_S / per_s,
            done: 0,
            frames: 0,
        }
    }

    /// A pacer at exactly `pps` frames/s.
    pub fn pps(pps: f64) -> Self {
        Self::new(Rate::Pps(pps), 0.0)
    }

    /// When the next frame should start (ps from the stream start).
    #[inline]
    pub fn next_ps(&self) -> u64 {
        (self.done as f64 * self.ps_per_unit) as u64
    }

    /// Accounts a frame of `frame_size` bytes (FCS included) as sent.
    #[inline]
    pub fn advance(&mut self, frame_size: u32) {
        self.frames += 1;
        self.done += match self.unit {
            Unit::Frames => 1,
            Unit::L1Bits => wire_bits(frame_size),
            Unit::L2Bits => u64::from(frame_size) * 8,
        };
    }

    /// Frames accounted so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }
}

/// Nanoseconds since a process-wide epoch (the first call): the wall clock the generator stamps
/// and the sink reads when they run in real time, so both ends agree without coordination.
#[inline]
pub fn wall_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_rates_match_the_reference_figures() {
        assert!((line_rate_pps(100e9, 64.0) / 1e6 - 148.809).abs() < 0.001);
        assert!((line_rate_pps(100e9, 1518.0) / 1e6 - 8.1274).abs() < 0.0001);
        assert!((line_rate_pps(200e9, 1518.0) / 1e6 - 16.2549).abs() < 0.0001);
        assert_eq!(wire_bits(64), 672);
        assert!((pps_to_l1_bps(8_127_438.2, 1518.0) / 1e9 - 100.0).abs() < 1e-3);
    }

    #[test]
    fn rates_parse() {
        assert_eq!("10Mpps".parse::<Rate>().unwrap(), Rate::Pps(10e6));
        assert_eq!("1.5kpps".parse::<Rate>().unwrap(), Rate::Pps(1500.0));
        assert_eq!("40Gbps".parse::<Rate>().unwrap(), Rate::L1Bps(40e9));
        assert_eq!("40Gbps-l2".parse::<Rate>().unwrap(), Rate::L2Bps(40e9));
        assert_eq!("95%".parse::<Rate>().unwrap(), Rate::LinePercent(95.0));
        assert_eq!("max".parse::<Rate>().unwrap(), Rate::LINE);
        assert_eq!("1e6pps".parse::<Rate>().unwrap(), Rate::Pps(1e6));
        for bad in [
            "", "10", "10Xpps", "-5pps", "0%", "fast", "200%", "100.5%", "infpps",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
        let e = "200%".parse::<Rate>().unwrap_err();
        assert!(e.contains("200%") && e.contains("<= 100"), "{e}");
        assert_eq!("100%".parse::<Rate>().unwrap(), Rate::LinePercent(100.0));
        let r = Rate::L1Bps(100e9);
        assert!((r.pps(64.0, 0.0) - 148_809_523.8).abs() < 1.0);
        assert!((Rate::LinePercent(50.0).pps(1518.0, 100e9) - 4_063_719.1).abs() < 1.0);
        assert!((Rate::L2Bps(512e6).pps(64.0, 0.0) - 1e6).abs() < 1e-6);
    }

    #[test]
    fn pacer_is_exact_and_drift_free() {
        let mut p = Pacer::pps(3e6);
        for _ in 0..3_000_000u64 {
            p.advance(64);
        }
        assert_eq!(p.next_ps(), 1_000_000_000_000);

        // IMIX at 10 Gb/s L1: 12 frames = 7*84 + 4*614 + 1*1538 = 4582 wire bytes.
        let mut p = Pacer::new(Rate::L1Bps(10e9), 0.0);
        for s in [64u32, 64, 594, 64, 64, 594, 64, 1518, 64, 594, 64, 594] {
            p.advance(s);
        }
        assert_eq!(p.next_ps(), 4582 * 8 * 100);
        assert_eq!(p.frames(), 12);

        // 100 % of 100G with 64 B frames: 6720 ps apart.
        let mut p = Pacer::new(Rate::LINE, 100e9);
        p.advance(64);
        assert_eq!(p.next_ps(), 6720);
    }
}
