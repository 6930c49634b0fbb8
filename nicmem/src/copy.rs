//! Short copies that dominate small-packet forwarding.

/// Copies `src[..n]` to `dst[..n]`, fast for the short copies that dominate small-packet
/// forwarding: when both slices have room for `n` rounded up to 64 (or 128) bytes, one
/// fixed-size copy of that many bytes (a few vector moves, no `memcpy` call, no loop); an exact
/// copy otherwise. Bytes of `src` past `n` may land in `dst` past `n`, so `dst`'s tail must be
/// the caller's scratch (a buffer's unused room, a staging area).
///
/// # Panics
/// If `n` exceeds either slice.
#[inline(always)]
pub fn copy_prefix(dst: &mut [u8], src: &[u8], n: usize) {
    let room = dst.len().min(src.len());
    if n <= 64 && room >= 64 {
        copy_fixed::<64>(dst, src);
    } else if n <= 128 && room >= 128 {
        copy_fixed::<128>(dst, src);
    } else {
        dst[..n].copy_from_slice(&src[..n]);
    }
}

/// Copies the first `N` bytes (a multiple of 16) as 16-byte words. Written word by word rather
/// than as one array copy: the compiler merges array copies of the branches of
/// [`copy_prefix`] into a single `memcpy` call of variable length, which is what the fast path
/// exists to avoid.
#[inline(always)]
fn copy_fixed<const N: usize>(dst: &mut [u8], src: &[u8]) {
    let d: &mut [u8; N] = (&mut dst[..N]).try_into().expect("N bytes");
    let s: &[u8; N] = src[..N].try_into().expect("N bytes");
    let mut i = 0;
    while i < N {
        let w = u128::from_ne_bytes(s[i..i + 16].try_into().expect("16 bytes"));
        d[i..i + 16].copy_from_slice(&w.to_ne_bytes());
        i += 16;
    }
}

#[cfg(test)]
mod tests {
    use super::copy_prefix;

    #[test]
    fn copies_exactly_the_prefix_it_is_asked_for() {
        let src: Vec<u8> = (0..=255u8).collect();
        for n in [0usize, 1, 15, 16, 60, 64, 65, 100, 128, 129, 200] {
            // Room for the rounded copy, and no room at all past `n`.
            for room in [256usize, n] {
                let mut dst = vec![0xaau8; room];
                copy_prefix(&mut dst, &src[..room.max(n)], n);
                assert_eq!(&dst[..n], &src[..n], "n {n} room {room}");
            }
        }
    }
}
