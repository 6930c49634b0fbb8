//! Generator speed per core: 64 B frames (60 B without FCS) written by [`Generator::produce_at`]
//! into a buffer (the generator alone), the same in batches of 32 (a Tx burst's worth, as
//! `pktgen dpdk-gen` writes them), and pulled by the virtual NIC's wire side into its Rx ring (the
//! generator as a vNIC's frame source: Rx burst + free, no forwarding).
//!
//! `cargo bench -p pktgen --bench generator`
//!
//! The first group is the per-frame cost a DPDK Tx loop pays on top of the mbuf handling (see
//! `pktgen dpdk-gen` and `scripts/bench-dpdk-txonly.sh`); the second is the generator's Mpps
//! into the virtual NIC, where the vNIC's own Rx path dominates.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dataplane::driver::vnic::{VnicConfig, VnicPort};
use dataplane::link::{CountingSink, Link};
use dataplane::{Burst, DatapathMode, Queue};
use pktgen::{Generator, GeneratorConfig};
use std::hint::black_box;

/// Frames per measured iteration.
const PER_ITER: u64 = 100_000;

/// The benchmarked traffic variants: (name, config).
fn variants() -> Vec<(&'static str, GeneratorConfig)> {
    let base = GeneratorConfig {
        frame_size: 64,
        ..Default::default()
    };
    vec![
        (
            "1flow",
            GeneratorConfig {
                flows: 1,
                ..base.clone()
            },
        ),
        (
            "1024flows",
            GeneratorConfig {
                flows: 1024,
                ..base.clone()
            },
        ),
        (
            "1024flows+ts",
            GeneratorConfig {
                flows: 1024,
                timestamps: true,
                ..base.clone()
            },
        ),
        (
            "1024flows+udp_csum",
            GeneratorConfig {
                flows: 1024,
                udp_checksum: true,
                ..base
            },
        ),
    ]
}

fn produce(c: &mut Criterion) {
    let mut g = c.benchmark_group("produce_at_64B");
    g.throughput(Throughput::Elements(PER_ITER));
    for (name, cfg) in variants() {
        let mut generator = Generator::new(cfg).expect("valid config");
        // A buffer the size of an mbuf's data room: what a DPDK Tx loop hands the generator.
        let mut buf = vec![0u8; 2048];
        let mut ts = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                for _ in 0..PER_ITER {
                    ts += 3;
                    black_box(generator.produce_at(&mut buf, ts));
                }
            })
        });
    }
    g.finish();
}

/// The same frames through [`pktgen::generator::FrameBatch`] in batches of 32 (what
/// `pktgen dpdk-gen` does per Tx burst), into 32 buffers in turn.
fn batch(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch32_64B");
    g.throughput(Throughput::Elements(PER_ITER));
    for (name, cfg) in variants() {
        let mut generator = Generator::new(cfg).expect("valid config");
        let mut bufs = vec![vec![0u8; 2048]; 32];
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut n = 0;
                while n < PER_ITER {
                    let mut batch = generator.batch(32, n);
                    for buf in bufs.iter_mut() {
                        black_box(batch.next(buf));
                    }
                    n += 32;
                }
            })
        });
    }
    g.finish();
}

fn into_vnic(c: &mut Criterion) {
    let mut g = c.benchmark_group("gen_into_vnic_64B");
    g.throughput(Throughput::Elements(PER_ITER));
    g.sample_size(10);
    for (name, cfg) in variants().into_iter().take(2) {
        let generator = Generator::new(cfg).expect("valid config");
        let link = Link {
            rx: Box::new(generator),
            tx: Box::new(CountingSink::default()),
        };
        let vcfg = VnicConfig {
            mode: DatapathMode::Host,
            ..VnicConfig::default()
        };
        let mut port = VnicPort::new("bench", 0, vcfg, link).expect("port");
        let mut q = port.take_vnic_queues().pop().expect("queue");
        let mut burst = Burst::with_capacity(32);
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut n = 0u64;
                while n < PER_ITER {
                    q.rx_burst(&mut burst);
                    n += burst.len() as u64;
                    q.free_burst(&mut burst);
                }
            })
        });
        drop(port);
    }
    g.finish();
}

criterion_group!(benches, produce, batch, into_vnic);
criterion_main!(benches);
