//! Exact non-negative rationals for per-packet amortised byte counts.
//!
//! The per-packet PCIe breakdown (reference §4) amortises batched operations: a 16-WQE Rx
//! descriptor fetch costs `Rc(512)/16 = 34.5` B per packet, a doorbell `32/32 = 1` B, a Tx CQE
//! `88/32 = 2.75` B. Keeping these as exact fractions lets tests pin the reference's numbers
//! exactly (no floating-point tolerance) and lets totals be compared for equality.

use std::cmp::Ordering;
use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Mul};

use serde::{Serialize, Serializer};

/// A non-negative fraction `num / den` in lowest terms (`den > 0`).
///
/// Used for bytes and TLPs per packet when an operation is amortised over a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ratio {
    num: u64,
    den: u64,
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Ratio {
    /// Zero.
    pub const ZERO: Ratio = Ratio { num: 0, den: 1 };

    /// `num / den`, reduced to lowest terms.
    ///
    /// # Panics
    /// If `den` is zero (a batch of zero operations is a caller bug, never a data condition).
    pub fn new(num: u64, den: u64) -> Self {
        assert!(den != 0, "Ratio with zero denominator");
        Self::reduce(u128::from(num), u128::from(den))
    }

    /// The integer `n` as a ratio.
    pub const fn from_int(n: u64) -> Self {
        Ratio { num: n, den: 1 }
    }

    fn reduce(num: u128, den: u128) -> Self {
        let g = gcd(num, den).max(1);
        let (num, den) = (num / g, den / g);
        Ratio {
            num: u64::try_from(num).expect("Ratio numerator overflows u64"),
            den: u64::try_from(den).expect("Ratio denominator overflows u64"),
        }
    }

    /// The numerator (lowest terms).
    pub fn numer(self) -> u64 {
        self.num
    }

    /// The denominator (lowest terms, never zero).
    pub fn denom(self) -> u64 {
        self.den
    }

    /// The value as `f64` (for rates and reports).
    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// The larger of two ratios.
    pub fn max(self, other: Ratio) -> Ratio {
        if other > self { other } else { self }
    }
}

impl Default for Ratio {
    fn default() -> Self {
        Ratio::ZERO
    }
}

impl From<u64> for Ratio {
    fn from(n: u64) -> Self {
        Ratio::from_int(n)
    }
}

impl Add for Ratio {
    type Output = Ratio;
    fn add(self, rhs: Ratio) -> Ratio {
        let num =
            u128::from(self.num) * u128::from(rhs.den) + u128::from(rhs.num) * u128::from(self.den);
        let den = u128::from(self.den) * u128::from(rhs.den);
        Ratio::reduce(num, den)
    }
}

impl AddAssign for Ratio {
    fn add_assign(&mut self, rhs: Ratio) {
        *self = *self + rhs;
    }
}

impl Mul<u64> for Ratio {
    type Output = Ratio;
    fn mul(self, rhs: u64) -> Ratio {
        Ratio::reduce(u128::from(self.num) * u128::from(rhs), u128::from(self.den))
    }
}

impl Sum for Ratio {
    fn sum<I: Iterator<Item = Ratio>>(iter: I) -> Ratio {
        iter.fold(Ratio::ZERO, |a, b| a + b)
    }
}

impl PartialOrd for Ratio {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ratio {
    fn cmp(&self, other: &Self) -> Ordering {
        (u128::from(self.num) * u128::from(other.den))
            .cmp(&(u128::from(other.num) * u128::from(self.den)))
    }
}

impl fmt::Display for Ratio {
    /// Exact decimal when the denominator divides a power of ten up to 10^6 (`17.25`, `2.75`),
    /// otherwise four decimals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut scale = 1u64;
        for digits in 0..=6 {
            if scale.is_multiple_of(self.den) {
                let scaled = u128::from(self.num) * u128::from(scale / self.den);
                let int = scaled / u128::from(scale);
                let frac = scaled % u128::from(scale);
                return if digits == 0 {
                    write!(f, "{int}")
                } else {
                    let frac = format!("{frac:0width$}", width = digits);
                    write!(f, "{int}.{}", frac.trim_end_matches('0'))
                };
            }
            scale *= 10;
        }
        write!(f, "{:.4}", self.to_f64())
    }
}

impl Serialize for Ratio {
    /// Serialised as a JSON/TOML number (`f64`); exact for every value the model produces.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.to_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduces_and_adds_exactly() {
        let a = Ratio::new(276, 16); // 17.25
        assert_eq!((a.numer(), a.denom()), (69, 4));
        let b = Ratio::new(88, 32); // 2.75
        assert_eq!(a + b, Ratio::from_int(20));
        assert_eq!(Ratio::new(0, 7), Ratio::ZERO);
        assert_eq!(Ratio::new(3, 2) * 4, Ratio::from_int(6));
    }

    #[test]
    fn orders_by_value() {
        assert!(Ratio::new(1, 3) < Ratio::new(1, 2));
        assert_eq!(Ratio::new(2, 4).cmp(&Ratio::new(1, 2)), Ordering::Equal);
        assert_eq!(Ratio::new(7, 2).max(Ratio::from_int(3)), Ratio::new(7, 2));
    }

    #[test]
    fn displays_exact_decimals() {
        assert_eq!(Ratio::new(69, 4).to_string(), "17.25");
        assert_eq!(Ratio::new(3, 2).to_string(), "1.5");
        assert_eq!(Ratio::from_int(1640).to_string(), "1640");
        assert_eq!(Ratio::new(1, 3).to_string(), "0.3333");
    }

    #[test]
    #[should_panic(expected = "zero denominator")]
    fn zero_denominator_panics() {
        let _ = Ratio::new(1, 0);
    }
}
