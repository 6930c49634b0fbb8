//! Measures how fast the generator and the checking sink run together on one core, so we know
//! they are not the bottleneck of a 30 Mpps dataplane.
//!
//! Each frame is generated into one 16 KiB staging buffer (as a port's wire side would) and
//! handed straight to the sink, which verifies signature, pattern, length and sequence.
//! Also times the generator alone and the sink alone (over a pre-generated ring of frames, so
//! its figure includes cache misses on 4 MiB of frames that the combined run does not have).
//!
//! ```text
//! cargo run --release -p pktgen --example gen_sink_speed -- [frames] [frame_size] [flows]
//! ```
//! Defaults: 20 000 000 frames of 64 B over 1024 flows.

use dataplane::link::{FrameSink, FrameSource, MAX_WIRE_FRAME};
use pktgen::{CheckingSink, Generator, GeneratorConfig, report};
use std::hint::black_box;
use std::time::Instant;

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .map(|a| a.parse().expect("numeric argument"))
        .unwrap_or(default)
}

fn mpps(frames: u64, secs: f64) -> f64 {
    frames as f64 / secs / 1e6
}

fn main() {
    let frames = arg(1, 20_000_000);
    let frame_size = arg(2, 64) as u32;
    let flows = arg(3, 1024) as u32;
    let cfg = GeneratorConfig {
        frame_size,
        flows,
        count: Some(frames),
        ..Default::default()
    };
    let mut buf = vec![0u8; MAX_WIRE_FRAME];

    // Generator + sink.
    let mut generator = Generator::new(cfg.clone()).expect("valid config");
    let mut sink = CheckingSink::for_generator(&cfg);
    let (gc, sc) = (generator.counters(), sink.counters());
    let t = Instant::now();
    while let Some(n) = generator.next_frame(&mut buf) {
        sink.deliver(&buf[..n]);
    }
    sink.finish();
    let both = t.elapsed().as_secs_f64();
    let r = report(&gc, &sc);
    assert!(r.clean(), "{r:?}");

    // Generator alone.
    let mut generator = Generator::new(cfg.clone()).expect("valid config");
    let t = Instant::now();
    while let Some(n) = generator.next_frame(&mut buf) {
        black_box(&buf[..n]);
    }
    let gen_only = t.elapsed().as_secs_f64();

    // Sink alone, over a ring of 65 536 pre-generated frames (4 MiB at 64 B); a fresh sink per
    // lap keeps every frame in sequence (the in-order fast path, as in the combined run).
    const RING: u64 = 65_536;
    let mut generator = Generator::new(GeneratorConfig {
        count: Some(RING.min(frames)),
        ..cfg.clone()
    })
    .expect("valid config");
    let mut ring = Vec::new();
    while let Some(n) = generator.next_frame(&mut buf) {
        ring.push(buf[..n].to_vec());
    }
    let mut sink_only = 0.0;
    let mut left = frames;
    while left > 0 {
        let lap = left.min(ring.len() as u64) as usize;
        let mut sink = CheckingSink::for_generator(&cfg);
        let sc = sink.counters();
        let t = Instant::now();
        for f in &ring[..lap] {
            sink.deliver(black_box(f));
        }
        sink.finish();
        sink_only += t.elapsed().as_secs_f64();
        assert_eq!(sc.snapshot().streams_total.unique, lap as u64);
        left -= lap as u64;
    }

    println!(
        "{frames} frames of {frame_size} B over {flows} flows: generator+sink {:.1} Mpps \
         ({:.2} ns/frame), generator {:.1} Mpps, sink {:.1} Mpps",
        mpps(frames, both),
        both * 1e9 / frames as f64,
        mpps(frames, gen_only),
        mpps(frames, sink_only),
    );
}
