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
        let s: &[u8; 64] = src[..64].try_into().expect("64 bytes");
        let d: &mut [u8; 64] = (&mut dst[..64]).try_into().expect("64 bytes");
        *d = *s;
    } else if n <= 128 && room >= 128 {
        let s: &[u8; 128] = src[..128].try_into().expect("128 bytes");
        let d: &mut [u8; 128] = (&mut dst[..128]).try_into().expect("128 bytes");
        *d = *s;
    } else {
        dst[..n].copy_from_slice(&src[..n]);
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
