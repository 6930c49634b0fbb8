//! Frame bytes wherever they are: in the header segment, in a host payload, or in nicmem behind
//! the counted slow path.
//!
//! Why: network functions work on the header segment, but a few packets carry headers past it.
//! An ICMP error quotes the IPv4 and L4 headers of the packet it is about after its own (an
//! error quoting IPv4 + UDP ends at byte 70, past a 64 B header segment), and its checksum
//! covers the whole message. Split datapath modes must still handle such packets exactly as
//! host mode does (the issue "Nothing hangs, nothing aborts, nothing vanishes" asks that split
//! modes never drop what host mode forwards), so the NAT and the LB read those bytes here,
//! and the NAT writes its changes back here: a host payload is read and written in place, a
//! nicmem payload through [`dataplane::NicPayload::read_slow`] and
//! [`Burst::write_payload_slow`], which the driver counts (`nicmem.cpu_bytes_read`/`written`).
//! Callers count the packets that took this path. Nothing here runs for ordinary packets.

use dataplane::{Burst, PayloadRef};
use nicmem::AccessError;
use wire::checksum::ones_sum;

/// Copies frame bytes `[off, off + dst.len())` of packet `i` into `dst`. Returns how many of
/// them came from the payload segment (0: all were in the header segment).
pub fn read_frame(
    burst: &Burst,
    i: usize,
    off: usize,
    dst: &mut [u8],
) -> Result<usize, AccessError> {
    if off
        .checked_add(dst.len())
        .is_none_or(|e| e > burst.frame_len(i))
    {
        return Err(AccessError::Oversized {
            len: dst.len().min(u32::MAX as usize) as u32,
            max: burst.frame_len(i).saturating_sub(off) as u32,
        });
    }
    let h = burst.header(i);
    let in_hdr = h.len().saturating_sub(off).min(dst.len());
    if in_hdr > 0 {
        dst[..in_hdr].copy_from_slice(&h[off..off + in_hdr]);
    }
    let rest = &mut dst[in_hdr..];
    if rest.is_empty() {
        return Ok(0);
    }
    let po = (off + in_hdr) - h.len();
    match burst.payload(i) {
        PayloadRef::Host(b) => {
            let src = b.get(po..po + rest.len()).ok_or(AccessError::Oversized {
                len: rest.len() as u32,
                max: b.len().saturating_sub(po) as u32,
            })?;
            rest.copy_from_slice(src);
        }
        PayloadRef::Nic(n) => n.read_slow(po, rest)?,
        PayloadRef::None => {
            return Err(AccessError::Oversized {
                len: rest.len() as u32,
                max: 0,
            });
        }
    }
    Ok(rest.len())
}

/// Writes `src` at frame offset `off` of packet `i`: the header part in place, the payload
/// part through [`Burst::write_payload_slow`]. Returns how many bytes went to the payload.
pub fn write_frame(
    burst: &mut Burst,
    i: usize,
    off: usize,
    src: &[u8],
) -> Result<usize, AccessError> {
    if off
        .checked_add(src.len())
        .is_none_or(|e| e > burst.frame_len(i))
    {
        return Err(AccessError::Oversized {
            len: src.len().min(u32::MAX as usize) as u32,
            max: burst.frame_len(i).saturating_sub(off) as u32,
        });
    }
    let hl = burst.header_len(i);
    let in_hdr = hl.saturating_sub(off).min(src.len());
    let rest = &src[in_hdr..];
    if !rest.is_empty() {
        // The payload first: if it cannot be written, the header is left untouched too.
        burst.write_payload_slow(i, off + in_hdr - hl, rest)?;
    }
    if in_hdr > 0 {
        burst.header_mut(i)[off..off + in_hdr].copy_from_slice(&src[..in_hdr]);
    }
    Ok(rest.len())
}

/// The one's-complement sum ([`ones_sum`]) of frame bytes `[from, to)` of packet `i`, read in
/// chunks of an even length so the 16-bit words line up across the segments.
pub fn sum_frame(burst: &Burst, i: usize, from: usize, to: usize) -> Result<u64, AccessError> {
    let mut buf = [0u8; 256];
    let mut acc = 0u64;
    let mut pos = from;
    while pos < to {
        let n = (to - pos).min(buf.len());
        read_frame(burst, i, pos, &mut buf[..n])?;
        acc = ones_sum(&buf[..n], acc);
        pos += n;
    }
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::DatapathMode;
    use dataplane::testkit::PacketFactory;

    #[test]
    fn reads_writes_and_sums_across_segments_in_every_mode() {
        for mode in DatapathMode::ALL {
            let f = PacketFactory::new(mode, 64, 2048, 4);
            let frame: Vec<u8> = (0..700u32).map(|x| (x * 7 + 3) as u8).collect();
            let mut b = f.burst(std::slice::from_ref(&frame));
            let mut got = [0u8; 30];
            let from_payload = read_frame(&b, 0, 50, &mut got).unwrap();
            assert_eq!(&got[..], &frame[50..80], "{mode}");
            assert_eq!(from_payload, if mode.splits() { 16 } else { 0 }, "{mode}");
            for (from, to) in [(0, 700), (14, 333), (63, 64), (65, 699)] {
                assert_eq!(
                    sum_frame(&b, 0, from, to).unwrap(),
                    ones_sum(&frame[from..to], 0),
                    "{mode} {from}..{to}"
                );
            }
            assert!(
                read_frame(&b, 0, 690, &mut got).is_err(),
                "{mode}: past the frame"
            );
            write_frame(&mut b, 0, 60, b"0123456789").unwrap();
            let mut want = frame.clone();
            want[60..70].copy_from_slice(b"0123456789");
            assert_eq!(b.frame(0), want, "{mode}");
            assert!(write_frame(&mut b, 0, 695, b"0123456789").is_err());
            assert_eq!(b.frame(0), want, "{mode}: a refused write changes nothing");
        }
    }
}
