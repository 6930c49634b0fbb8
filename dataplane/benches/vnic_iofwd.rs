//! Virtual NIC io-fwd throughput per core: one queue, one thread, the full functional path (Rx
//! descriptors and completions, DMA copies, Tx WQEs, doorbells, completions, wire delivery) with
//! the full PCIe/memory/wire accounting (always on), for 64 B and 1518 B frames (60 and 1514
//! bytes without FCS) in each datapath mode; `<mode>+timed` adds the timing layer (virtual clock,
//! resource timelines, latency histogram, frames pulled).
//!
//! `cargo bench -p dataplane --bench vnic_iofwd`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dataplane::driver::vnic::{ClockMode, VnicConfig, VnicPort, VnicTiming};
use dataplane::link::{CountingSink, Link, RepeatSource};
use dataplane::{Burst, DatapathMode, DropCounts, Queue};

const PER_ITER: u64 = 100_000;

fn frame(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[12] = 0x08;
    f[14] = 0x45;
    f[23] = 17;
    f
}

/// A queue fed by an endless repeating source, as a benchmark fixture (the port keeps the queue's
/// front end and pools alive).
fn queue(
    mode: DatapathMode,
    len: usize,
    timed: bool,
) -> (VnicPort, dataplane::driver::vnic::VnicQueue) {
    let cfg = VnicConfig {
        mode,
        timing: timed.then_some(VnicTiming {
            clock: ClockMode::Virtual,
            offered_gbps: None,
            nf_cycles: 0,
            ..VnicTiming::default()
        }),
        ..VnicConfig::default()
    };
    let link = Link {
        rx: Box::new(RepeatSource::new(frame(len), u64::MAX)),
        tx: Box::new(CountingSink::default()),
    };
    let mut port = VnicPort::new("bench", 0, cfg, link).expect("port");
    let q = port.take_vnic_queues().pop().expect("queue");
    (port, q)
}

/// Forwards `PER_ITER` packets: rx_burst, then tx_burst (which frees what it cannot send).
fn iofwd(q: &mut dataplane::driver::vnic::VnicQueue, burst: &mut Burst, drops: &mut DropCounts) {
    let mut n = 0;
    while n < PER_ITER {
        q.rx_burst(burst);
        n += burst.len() as u64;
        q.tx_burst(burst, drops);
    }
}

fn bench(c: &mut Criterion) {
    for len in [60usize, 1514] {
        let mut g = c.benchmark_group(format!("vnic_iofwd_{}B", len + 4));
        g.throughput(Throughput::Elements(PER_ITER));
        g.sample_size(10);
        for mode in DatapathMode::ALL {
            for timed in [false, true] {
                let (_port, mut q) = queue(mode, len, timed);
                let mut burst = Burst::with_capacity(32);
                let mut drops = DropCounts::default();
                let name = if timed {
                    format!("{mode}+timed")
                } else {
                    mode.to_string()
                };
                g.bench_function(name, |b| b.iter(|| iofwd(&mut q, &mut burst, &mut drops)));
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
