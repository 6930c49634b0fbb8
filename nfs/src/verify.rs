//! The debug `verify_checksums` option of the NFs that rewrite headers: every rewritten frame is
//! copied whole (a nicmem payload read through the counted slow path) and every checksum
//! recomputed, to catch a wrong incremental update in testing. Never on the data path of a
//! production run.
#![forbid(unsafe_code)]

use dataplane::Burst;

use wire::classify::verify_frame_checksums;

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

    /// Zeroes the counters (the scratch buffer is kept).
    pub fn reset(&mut self) {
        self.verified = 0;
        self.mismatches = 0;
    }

    /// Verifies the checksums of packet `i` of `burst` by full recomputation; returns true if
    /// all are valid.
    pub fn verify(&mut self, burst: &Burst, i: usize) -> bool {
        burst.copy_frame(i, &mut self.scratch);
        self.verified += 1;
        let ok = verify_frame_checksums(&self.scratch).is_ok();
        if !ok {
            self.mismatches += 1;
        }
        ok
    }
}
