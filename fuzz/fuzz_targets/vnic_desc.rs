//! Fuzzes what the virtual NIC does with descriptor and completion bytes: arbitrary 16 B Rx
//! data segments, Tx WQE segments and 64 B CQEs. The codecs round-trip whatever they accept;
//! a port whose posted Rx WQE and last Tx WQE carry arbitrary bytes never panics, returns every
//! buffer to its pool, and either delivers each frame or counts it (a descriptor error, or a
//! frame above the port's maximum).
//!
//! Input layout: byte 0 picks the datapath mode, the Rx ring to damage and the Tx segment; byte 1
//! the frame count and size; then 16 Rx bytes, 16 Tx bytes and up to 64 CQE bytes.
#![no_main]

use dataplane::burst::Burst;
use dataplane::driver::vnic::{
    CQE_SIZE, Cqe, CtrlSeg, DataSeg, RxRingId, SEG, VnicConfig, VnicPort,
};
use dataplane::link::{CollectSink, Link, VecSource};
use dataplane::port::Queue;
use dataplane::testkit::forward_until_idle;
use dataplane::{DatapathMode, DropCounts};
use libfuzzer_sys::fuzz_target;

fn seg(b: &[u8]) -> [u8; SEG] {
    let mut s = [0u8; SEG];
    s[..b.len().min(SEG)].copy_from_slice(&b[..b.len().min(SEG)]);
    s
}

/// The codecs: a decoded segment re-encodes to bytes that decode to the same value, and a CQE
/// the reader accepts survives a write and a second read.
fn codecs(rx: &[u8; SEG], tx: &[u8; SEG], cqe: &[u8]) {
    let d = DataSeg::read(rx);
    assert_eq!(DataSeg::read(&d.encode()), d);
    assert_eq!(d.encode(), *rx, "a data segment has no spare bits");
    let c = CtrlSeg::read(tx);
    assert_eq!(CtrlSeg::read(&c.encode()), c);
    let mut slot = [0u8; CQE_SIZE];
    slot[..cqe.len().min(CQE_SIZE)].copy_from_slice(&cqe[..cqe.len().min(CQE_SIZE)]);
    for owner in [false, true] {
        if let Some(q) = Cqe::read(&slot, owner) {
            let mut again = [0u8; CQE_SIZE];
            q.write(&mut again, owner);
            assert_eq!(Cqe::read(&again, owner), Some(q));
            assert_eq!(Cqe::read(&again, !owner), None);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 + 2 * SEG {
        return;
    }
    let (sel, shape) = (data[0], data[1]);
    let rx = seg(&data[2..]);
    let tx = seg(&data[2 + SEG..]);
    codecs(&rx, &tx, &data[2 + 2 * SEG..]);

    let mode = DatapathMode::ALL[usize::from(sel % 4)];
    let ring =
        [RxRingId::Header, RxRingId::Primary, RxRingId::Secondary][usize::from(sel >> 2) % 3];
    let k = usize::from(sel >> 4) % 8;
    let n = 1 + usize::from(shape % 4);
    let len = 14 + usize::from(shape >> 2) * 24;
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| (0..len).map(|j| (j as u8).wrapping_add(i as u8)).collect())
        .collect();
    let sink = CollectSink::default();
    let link = Link {
        rx: Box::new(VecSource::new(frames)),
        tx: Box::new(sink.clone()),
    };
    let cfg = VnicConfig {
        mode,
        rx_ring: 16,
        tx_ring: 64,
        cache_size: 8,
        ..VnicConfig::default()
    };
    let mut p = VnicPort::new("fuzz", 0, cfg, link).expect("a valid port");
    let mut q = p.take_vnic_queues().pop().expect("one queue");
    q.corrupt_next_rx_wqe(ring, |w| *w = rx);
    let mut burst = Burst::with_capacity(32);
    q.rx_burst(&mut burst);
    let received = burst.len();
    q.tx_post(&mut burst, &mut DropCounts::default());
    q.corrupt_last_tx_seg(k, |w| *w = tx);
    q.tx_doorbell();
    forward_until_idle(&mut q, &mut burst, 64);
    let s = q.stats();
    drop(q);
    let delivered = sink.frames.lock().expect("sink").len() as u64;
    assert!(received <= n);
    assert!(delivered <= n as u64);
    assert!(
        delivered + s.desc_errors + s.rx_oversize >= n as u64,
        "every frame delivered or counted: {s:?}"
    );
    for pools in p.pools() {
        assert_eq!(pools.header.stats().in_use, 0, "header buffers leaked");
        if let Some(pool) = &pools.host_payload {
            assert_eq!(pool.stats().in_use, 0, "host payload buffers leaked");
        }
        if let Some(pool) = &pools.nic_payload {
            assert_eq!(pool.stats().in_use, 0, "nicmem payload buffers leaked");
        }
    }
});
