//! Big-endian field access at fixed offsets, and the constructor every header view shares.
//!
//! Callers check lengths once (a view's `new_checked`, or the classifier's bounds), then read and
//! write fields without further checks: the accessors index the slice and panic only on a length
//! that was not checked, which is a bug in the caller.

/// Reads a big-endian u16 at `off` (panics if out of range; callers check lengths first).
#[inline(always)]
pub fn read_u16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

/// Reads a big-endian u32 at `off` (panics if out of range; callers check lengths first).
#[inline(always)]
pub fn read_u32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Writes a big-endian u16 at `off` (panics if out of range; callers check lengths first).
#[inline(always)]
pub fn write_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian u32 at `off` (panics if out of range; callers check lengths first).
#[inline(always)]
pub fn write_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

macro_rules! view_common {
    ($name:ident, $min:expr) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// Minimum length of this header.
            pub const MIN_LEN: usize = $min;

            /// Wraps `buf` if it is long enough for the fixed part of the header.
            pub fn new_checked(buf: T) -> Option<Self> {
                if buf.as_ref().len() >= $min {
                    Some(Self { buf })
                } else {
                    None
                }
            }

            /// The underlying bytes.
            pub fn as_bytes(&self) -> &[u8] {
                self.buf.as_ref()
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buf
            }
        }
    };
}

pub(crate) use view_common;
