//! Virtual NIC io-fwd on one queue for a fixed number of packets: a driver for instruction
//! counting on a shared, noisy machine, where wall-clock benchmarks cannot resolve small
//! changes. Run it under cachegrind twice with different counts and divide the difference of
//! the instruction totals by the difference of the counts (setup cancels out):
//!
//! ```text
//! cargo build --release -p dataplane --example iofwd_count
//! valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
//!     target/release/examples/iofwd_count host 60 200000 [timed]
//! ```

use dataplane::driver::vnic::{ClockMode, VnicConfig, VnicPort, VnicTiming};
use dataplane::link::{CountingSink, Link, RepeatSource};
use dataplane::{Burst, DatapathMode, DropCounts, Queue};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: iofwd_count <mode> <frame bytes without FCS> <packets> [timed]";
    let (Some(mode), Some(len), Some(n)) = (
        args.get(1).and_then(|m| m.parse::<DatapathMode>().ok()),
        args.get(2).and_then(|l| l.parse::<usize>().ok()),
        args.get(3).and_then(|n| n.parse::<u64>().ok()),
    ) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let timed = args.get(4).is_some_and(|t| t == "timed");
    let mut frame = vec![0u8; len.max(60)];
    frame[12] = 0x08;
    frame[14] = 0x45;
    frame[23] = 17;
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
        rx: Box::new(RepeatSource::new(frame, u64::MAX)),
        tx: Box::new(CountingSink::default()),
    };
    let mut port = VnicPort::new("count", 0, cfg, link).expect("port");
    let mut q = port.take_vnic_queues().pop().expect("queue");
    let mut burst = Burst::with_capacity(32);
    let mut drops = DropCounts::default();
    let start = std::time::Instant::now();
    let mut fwd = 0u64;
    while fwd < n {
        q.rx_burst(&mut burst);
        fwd += q.tx_burst(&mut burst, &mut drops) as u64;
    }
    let el = start.elapsed().as_secs_f64();
    println!(
        "{mode} {len} B {}: {fwd} packets in {el:.3} s = {:.2} Mpps",
        if timed { "timed" } else { "accounting" },
        fwd as f64 / el / 1e6
    );
}
