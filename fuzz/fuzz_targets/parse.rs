//! Fuzzes the header parser and the frame checksum verifier: any bytes, any header-segment cut,
//! never a panic, and a successful parse always stays inside the segment it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::classify::{parse, verify_frame_checksums};

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let cut = usize::from(data[0]);
    let frame = &data[1..];
    let seg = &frame[..cut.min(frame.len())];
    if let Ok(p) = parse(seg, frame.len()) {
        assert!(p.l4 <= seg.len());
        assert!(p.l3 + usize::from(p.total_len) <= frame.len());
    }
    let _ = verify_frame_checksums(frame);
});
