//! Fuzzes pcap reading: arbitrary file bytes through the replaying source and the strict reader.
//! Either gives frames and counted bad records, or a typed error; never a panic or a hang. Each
//! frame fits the buffer and is at least an Ethernet header, and the shared counters agree with
//! what was delivered.
//!
//! Input layout: byte 0 sets the passes (1..=3) and the frame buffer size; the rest is the file.
#![no_main]

use dataplane::link::FrameSource;
use dataplane::pcap::{MIN_REPLAY_FRAME, PcapSource, RECORD_HEADER_LEN, read_all};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

/// One scratch file per fuzzing process (the readers take a path), in memory where possible.
fn scratch() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("nmdp-fuzz-pcap-{}", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, file)) = data.split_first() else {
        return;
    };
    let path = scratch();
    std::fs::write(path, file).expect("scratch file");
    let _ = read_all(path);
    let Ok(src) = PcapSource::open(path) else {
        return;
    };
    let loops = 1 + u32::from(sel % 3);
    let cap = [64usize, 1514, 9018, 65_535][usize::from(sel >> 2) % 4];
    let mut src = src.with_loops(loops);
    let mut buf = vec![0u8; cap];
    let mut frames = 0u64;
    // Every record or damaged stretch takes at least one byte, so this bounds a pass.
    let bound = u64::from(loops) * (file.len() as u64 + 1);
    while let Some(n) = src.next_frame(&mut buf) {
        assert!((MIN_REPLAY_FRAME..=cap).contains(&n), "{n} of {cap}");
        frames += 1;
        assert!(frames <= bound, "more frames than the file can hold");
    }
    assert!(src.exhausted());
    let s = src.counters().snapshot();
    assert_eq!(s.frames, frames);
    assert_eq!(s.bad_records, s.runt + s.oversize + s.truncated + s.damaged);
    assert!(s.passes <= u64::from(loops));
    assert!(
        frames * (RECORD_HEADER_LEN + MIN_REPLAY_FRAME) as u64
            <= u64::from(loops) * file.len() as u64
    );
});
