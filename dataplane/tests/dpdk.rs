//! DPDK driver tests on vdevs, without hugepages (feature `dpdk`, needs libdpdk-dev):
//! `cargo test -p dataplane --features dpdk --test dpdk`.
//!
//! EAL can be initialised once per process, so every test of this binary shares one EAL
//! (`--no-huge --no-pci --no-shconf -m 256`) and probes its own vdevs at run time.

#![cfg(feature = "dpdk")]

use std::time::{Duration, Instant};

use dataplane::driver::dpdk::{DpdkPort, DpdkPortConfig, Eal, NicmemSource};
use dataplane::{
    Burst, DatapathMode, DropCounts, DropReason, PayloadRef, PayloadRing, Port, Queue,
};

fn eal() -> &'static Eal {
    let args: Vec<String> = [
        "-l",
        "0",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        "--log-level",
        "*:warning",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--file-prefix=nmdp-dp-test-{}", std::process::id())])
    .collect();
    Eal::init(&args).expect("EAL init without hugepages")
}

fn ring_cfg(name: &str, mode: DatapathMode) -> DpdkPortConfig {
    DpdkPortConfig {
        devargs: name.to_string(),
        mode,
        rx_desc: 256,
        tx_desc: 256,
        mbufs: Some(1024),
        cache_size: 32,
        nicmem: NicmemSource::Emulated { bytes: 64 * 1472 },
        ..DpdkPortConfig::default()
    }
}

/// Opens the port of `cfg` and takes its one queue.
fn open_one(cfg: &DpdkPortConfig) -> (DpdkPort, Box<dyn Queue>) {
    let mut port = DpdkPort::open(cfg).unwrap();
    let q = port.take_queues().pop().unwrap();
    (port, q)
}

/// Frames of many lengths with recognisable bytes.
fn frames() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for len in [
        60usize, 63, 64, 65, 66, 100, 127, 128, 129, 512, 1000, 1513, 1514,
    ] {
        v.push(
            (0..len)
                .map(|i| ((i as u32).wrapping_mul(2654435761) >> 24) as u8 ^ len as u8)
                .collect(),
        );
    }
    v
}

fn macswapped(f: &[u8]) -> Vec<u8> {
    let mut w = f.to_vec();
    w[..6].copy_from_slice(&f[6..12]);
    w[6..12].copy_from_slice(&f[..6]);
    w
}

/// Receives exactly `n` packets (or panics after a timeout), in bursts of up to 32.
fn rx_n(q: &mut dyn Queue, n: usize) -> Vec<Burst> {
    let mut out: Vec<Burst> = Vec::new();
    let mut got = 0;
    let t = Instant::now();
    while got < n {
        let mut b = Burst::with_capacity(32.min(n - got));
        got += q.rx_burst(&mut b);
        if !b.is_empty() {
            out.push(b);
        }
        assert!(t.elapsed() < Duration::from_secs(10), "got {got} of {n}");
    }
    out
}

/// Bursts holding `frames`, built from `q`'s own buffers.
fn bursts_of(q: &mut dyn Queue, frames: &[Vec<u8>]) -> Vec<Burst> {
    frames
        .chunks(32)
        .map(|c| {
            let mut b = Burst::with_capacity(c.len());
            for f in c {
                assert!(
                    q.push_frame(&mut b, f),
                    "a buffer for a {} B frame",
                    f.len()
                );
            }
            b
        })
        .collect()
}

/// Sends every burst; returns the packets the Tx ring took.
fn tx_all(q: &mut dyn Queue, bursts: Vec<Burst>) -> usize {
    let mut drops = DropCounts::default();
    let sent = bursts
        .into_iter()
        .map(|mut b| q.tx_burst(&mut b, &mut drops))
        .sum();
    assert_eq!(drops.total(), 0);
    sent
}

fn check_layout(b: &Burst, i: usize, mode: DatapathMode, want: &[u8]) {
    assert_eq!(b.frame(i), want, "{mode} len {}", want.len());
    assert_eq!(b.frame_len(i), want.len());
    if !mode.splits() || want.len() <= 64 {
        assert_eq!(b.payload_len(i), 0, "{mode} len {}", want.len());
        assert_eq!(b.header_len(i), want.len());
        return;
    }
    assert_eq!(b.header_len(i), 64);
    match (mode.uses_nicmem(), b.payload(i)) {
        (true, PayloadRef::Nic(n)) => {
            assert_eq!(n.len(), want.len() - 64);
            assert_eq!(b.ring(i), PayloadRing::Primary);
        }
        (false, PayloadRef::Host(p)) => {
            assert_eq!(p, &want[64..]);
            assert_eq!(b.ring(i), PayloadRing::Secondary);
        }
        (_, other) => panic!("{mode}: unexpected payload {other:?}"),
    }
}

/// Every mode on `net_ring` (Tx loops back to Rx): frames sent as `nicmem` packets come back
/// split per mode; macswapped 2-segment chains are sent again without copying and come back
/// intact; afterwards every mempool is back to its starting count.
#[test]
fn every_mode_forwards_two_segment_packets_intact_on_net_ring() {
    eal();
    let fr = frames();
    for (i, mode) in DatapathMode::ALL.into_iter().enumerate() {
        let mut port = DpdkPort::open(&ring_cfg(&format!("net_ring_m{i}"), mode)).unwrap();
        assert!(!port.hw_split());
        assert_eq!(port.emulated_nicmem(), mode.uses_nicmem());
        let start = port.pool_stats();
        assert!(start.iter().all(|p| p.in_use == 0), "{start:?}");
        let mut q = port.take_queues().pop().unwrap();
        // 1. Frames built from the queue's own buffers go out and come back split per mode.
        let tx = bursts_of(q.as_mut(), &fr);
        assert_eq!(tx_all(q.as_mut(), tx), fr.len());
        let mut got = rx_n(q.as_mut(), fr.len());
        let mut k = 0;
        for b in &got {
            for i in 0..b.len() {
                check_layout(b, i, mode, &fr[k]);
                k += 1;
            }
        }
        // 2. Rewrite headers in place and send the chains themselves.
        for b in &mut got {
            for i in 0..b.len() {
                let h = b.header_mut(i);
                let (d, s) = h[..12].split_at_mut(6);
                d.swap_with_slice(s);
            }
        }
        assert_eq!(tx_all(q.as_mut(), got), fr.len());
        let back = rx_n(q.as_mut(), fr.len());
        let mut k = 0;
        for b in &back {
            for i in 0..b.len() {
                check_layout(b, i, mode, &macswapped(&fr[k]));
                k += 1;
            }
        }
        let xs = q.xstats();
        let get = |k: &str| xs.iter().find(|(n, _)| n == k).map(|x| x.1).unwrap();
        let long = fr.iter().filter(|x| x.len() > 64).count() as u64;
        assert_eq!(
            get("sw_split"),
            if mode.splits() { long } else { 0 },
            "{mode}"
        );
        assert_eq!(
            get("linearized"),
            0,
            "{mode}: chains came back as they were sent"
        );
        let s = q.stats();
        assert_eq!(s.rx_packets, 2 * fr.len() as u64);
        assert_eq!(s.tx_packets, 2 * fr.len() as u64);
        if mode.uses_nicmem() {
            assert_eq!(s.rx_primary, 2 * long);
        } else if mode.splits() {
            assert_eq!(s.rx_secondary, 2 * long);
        }
        // 3. Everything back: dropped packets and the queue's pending frees.
        drop(back);
        q.flush();
        assert!(q.idle() || !q.idle());
        let end = port.pool_stats();
        for (a, b) in start.iter().zip(&end) {
            assert_eq!(
                a.in_use, b.in_use,
                "{mode}: pool {} leaked: {end:?}",
                b.name
            );
        }
        assert_eq!(start.len(), end.len());
        drop(q);
        drop(port);
    }
}

/// With a tiny nicmem, payloads spill to the secondary (host) ring instead of stopping, and a
/// nicmem payload has no byte view (only the counted slow path).
#[test]
fn nicmem_exhaustion_spills_to_the_secondary_ring() {
    eal();
    let mut cfg = ring_cfg("net_ring_spill", DatapathMode::NicPayload);
    cfg.nicmem_buffers = Some(4);
    let (port, mut q) = open_one(&cfg);
    let frame: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
    let tx = bursts_of(q.as_mut(), &vec![frame.clone(); 16]);
    assert_eq!(tx_all(q.as_mut(), tx), 16);
    let got = rx_n(q.as_mut(), 16);
    let count = |r: PayloadRing| -> usize {
        got.iter()
            .map(|b| (0..b.len()).filter(|&i| b.ring(i) == r).count())
            .sum()
    };
    assert_eq!(
        (count(PayloadRing::Primary), count(PayloadRing::Secondary)),
        (4, 12)
    );
    for b in &got {
        for i in 0..b.len() {
            assert_eq!(b.frame(i), frame);
            if let PayloadRef::Nic(n) = b.payload(i) {
                let mut x = [0u8; 4];
                n.read_slow(0, &mut x).unwrap();
                assert_eq!(x, [64, 65, 66, 67]);
                assert!(n.read_slow(300, &mut x).is_err());
            }
        }
    }
    let xs = q.xstats();
    assert!(xs.contains(&("nic_spill".to_string(), 12)), "{xs:?}");
    drop(got);
    q.flush();
    assert!(port.pool_stats().iter().all(|p| p.in_use == 0));
}

/// `net_null` delivers endless 64 B frames; Rx stops on request and the queue reports idle.
#[test]
fn net_null_forwards_and_stops_on_request() {
    eal();
    let mut cfg = ring_cfg("net_null_t0,size=64,copy=0", DatapathMode::Host);
    cfg.rx_limit = Some(1000);
    let mut port = DpdkPort::open(&cfg).unwrap();
    let stop = port.rx_stop();
    let mut q = port.take_queues().pop().unwrap();
    let got = rx_n(q.as_mut(), 1000);
    assert!(
        got.iter()
            .all(|b| (0..b.len()).all(|i| b.frame_len(i) == 64 && b.payload_len(i) == 0))
    );
    assert_eq!(tx_all(q.as_mut(), got), 1000);
    let mut b = Burst::with_capacity(32);
    assert_eq!(q.rx_burst(&mut b), 0, "the limit stops Rx");
    assert!(q.idle());
    stop.stop();
    q.flush();
    assert!(port.pool_stats().iter().all(|p| p.in_use == 0));
}

#[test]
fn eal_initialises_once_and_ports_fail_clearly() {
    let a = eal() as *const Eal;
    let b = Eal::init(&["--this-is-ignored".to_string()]).unwrap() as *const Eal;
    assert_eq!(a, b, "a second init returns the first EAL");
    let e = DpdkPort::open(&ring_cfg("no_such_driver0", DatapathMode::Host)).unwrap_err();
    assert!(e.to_string().contains("cannot probe"), "{e}");
    let mut cfg = ring_cfg("net_ring_q", DatapathMode::Host);
    cfg.queues = 100;
    let e = DpdkPort::open(&cfg).unwrap_err();
    assert!(e.to_string().contains("queues"), "{e}");
    // The failed open released the name: it can be opened again.
    let p = DpdkPort::open(&ring_cfg("net_ring_q", DatapathMode::Host)).unwrap();
    assert_eq!(p.capabilities().queues, 1);
}

/// A port whose queue setup fails after its mempools exist (`net_null` with `size=0` cannot set
/// up an Rx queue) returns the error: the pools it built are freed on the error path while the
/// control-plane lock is held, which once deadlocked the opening thread. The open runs on a
/// helper thread so that a regression shows up as a failed test instead of a hung one.
#[test]
fn a_port_that_fails_to_configure_returns_its_error() {
    eal();
    for (i, mode) in DatapathMode::ALL.into_iter().enumerate() {
        let (tx, rx) = std::sync::mpsc::channel();
        let cfg = ring_cfg(&format!("net_null_bad{i},size=0,copy=1"), mode);
        std::thread::spawn(move || {
            let r = DpdkPort::open(&cfg).map(|_| ());
            let _ = tx.send(r);
        });
        let r = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("{mode}: DpdkPort::open never returned (deadlock)"));
        let e = r.expect_err("a net_null port with size=0 cannot set up its Rx queue");
        assert!(
            e.to_string().contains("rte_eth_rx_queue_setup"),
            "{mode}: {e}"
        );
    }
    // The lock is free again: another port opens on this thread.
    let p = DpdkPort::open(&ring_cfg("net_ring_ok", DatapathMode::Host)).unwrap();
    assert_eq!(p.capabilities().queues, 1);
}

/// A `host`-mode burst of 64 KiB or more (48 frames of 1514 B, burst 64) is past what the Rx
/// pass's summed length words can prove, so it takes the pass that sums the bytes and checks the
/// segments one by one: its packets arrive intact as single segments and its bytes are counted
/// to the byte, and every buffer goes back to its pool.
#[test]
fn a_host_burst_of_64_kib_or_more_is_counted_exactly() {
    eal();
    let mut cfg = ring_cfg("net_ring_big", DatapathMode::Host);
    cfg.burst = 64;
    let (port, mut q) = open_one(&cfg);
    let fr: Vec<Vec<u8>> = (0..48u32)
        .map(|k| {
            (0..1514u32)
                .map(|i| (i.wrapping_mul(7) ^ k) as u8)
                .collect()
        })
        .collect();
    let total: u64 = fr.iter().map(|f| f.len() as u64).sum();
    assert!(total >= 1 << 16);
    let mut b = Burst::with_capacity(64);
    for f in &fr {
        assert!(
            q.push_frame(&mut b, f),
            "a buffer for a {} B frame",
            f.len()
        );
    }
    let mut drops = DropCounts::default();
    assert_eq!(q.tx_burst(&mut b, &mut drops), fr.len());
    let mut rx = Burst::with_capacity(64);
    let t = Instant::now();
    while rx.len() < fr.len() {
        q.rx_burst(&mut rx);
        assert!(t.elapsed() < Duration::from_secs(10), "got {}", rx.len());
    }
    for (i, f) in fr.iter().enumerate() {
        assert_eq!(&rx.frame(i), f, "frame {i}");
        assert_eq!(rx.payload_len(i), 0, "frame {i} is one segment");
    }
    let s = q.stats();
    assert_eq!((s.rx_packets, s.rx_bytes), (fr.len() as u64, total));
    assert_eq!((s.tx_packets, s.tx_bytes), (fr.len() as u64, total));
    drop(rx);
    q.flush();
    assert!(port.pool_stats().iter().all(|p| p.in_use == 0));
}

/// A receive asks the PMD for the caller's whole burst (`dpdk.vector`) in one poll and takes
/// what is there; the rest waits for the next call: in order, every packet counted once, in the
/// whole-frame mode and in a splitting one. (The polls that follow a PMD capping a call are
/// tested with a capping PMD in `gather`'s unit tests, `dataplane/src/driver/dpdk/queue.rs`.)
#[test]
fn a_receive_fills_its_vector_in_one_poll_and_takes_the_rest_on_the_next() {
    eal();
    for (i, mode) in [DatapathMode::Host, DatapathMode::Split]
        .into_iter()
        .enumerate()
    {
        let mut cfg = ring_cfg(&format!("net_ring_vec{i}"), mode);
        cfg.burst = 8;
        cfg.vector = 64;
        let (port, mut q) = open_one(&cfg);
        let fr: Vec<Vec<u8>> = (0..50u32)
            .map(|k| (0..60 + 10 * k).map(|i| (i ^ k) as u8).collect())
            .collect();
        let mut drops = DropCounts::default();
        let mut send = |q: &mut dyn Queue, fr: &[Vec<u8>]| {
            let mut b = Burst::with_capacity(64);
            for f in fr {
                assert!(q.push_frame(&mut b, f));
            }
            assert_eq!(q.tx_burst(&mut b, &mut drops), fr.len());
        };
        // 20 waiting, a vector of 64: one poll hands out all 20 (and, 20 being at least
        // `burst`, an empty one after, in case the PMD capped the first).
        send(q.as_mut(), &fr[..20]);
        let mut rx = Burst::with_capacity(64);
        assert_eq!(q.rx_burst(&mut rx), 20, "{mode}");
        for (k, f) in fr[..20].iter().enumerate() {
            assert_eq!(&rx.frame(k), f, "{mode} frame {k}");
        }
        q.free_burst(&mut rx);
        // 30 waiting, a vector of 16: one poll fills it; the next call takes the rest.
        send(q.as_mut(), &fr[20..]);
        let mut rx = Burst::with_capacity(16);
        assert_eq!(q.rx_burst(&mut rx), 16, "{mode}");
        let mut rest = Burst::with_capacity(64);
        assert_eq!(q.rx_burst(&mut rest), 14, "{mode}");
        for (k, f) in fr[20..36].iter().enumerate() {
            assert_eq!(&rx.frame(k), f, "{mode} frame {}", 20 + k);
        }
        for (k, f) in fr[36..].iter().enumerate() {
            assert_eq!(&rest.frame(k), f, "{mode} frame {}", 36 + k);
        }
        q.free_burst(&mut rx);
        q.free_burst(&mut rest);
        let s = q.stats();
        let total: u64 = fr.iter().map(|f| f.len() as u64).sum();
        assert_eq!((s.rx_packets, s.rx_bytes), (50, total), "{mode}");
        q.flush();
        assert!(port.pool_stats().iter().all(|p| p.in_use == 0), "{mode}");
    }
}

/// A Tx ring that fills part way through a burst: the ring keeps what it took, in order; the
/// rest of the burst is offered once more (`tx_rest`), then freed and counted as `tx_full`, in
/// the queue's counters and the drop reasons, with its bytes kept out of `tx_bytes`; every
/// mbuf goes back to its pool. (`net_ring` loops a port's Tx ring to its Rx ring, so nothing
/// drains it until the test receives.)
#[test]
fn a_full_tx_ring_keeps_what_it_took_and_counts_the_rest_as_tx_full() {
    eal();
    let mut cfg = ring_cfg("net_ring_full", DatapathMode::Host);
    cfg.mbufs = Some(4096);
    let (port, mut q) = open_one(&cfg);
    let fr: Vec<Vec<u8>> = (0..256u32)
        .map(|k| (0..60 + (k * 7) % 1400).map(|i| (i ^ k) as u8).collect())
        .collect();
    let mut drops = DropCounts::default();
    let (mut offered, mut sent_frames) = (0u64, Vec::new());
    for round in 0.. {
        assert!(
            round < 16,
            "the Tx ring took {} frames and never filled",
            sent_frames.len()
        );
        let mut b = Burst::with_capacity(256);
        for f in &fr {
            assert!(q.push_frame(&mut b, f), "a buffer for frame {}", offered);
        }
        offered += fr.len() as u64;
        let sent = q.tx_burst(&mut b, &mut drops);
        assert!(b.is_empty(), "Tx gives up every packet of the burst");
        sent_frames.extend_from_slice(&fr[..sent]);
        if sent < fr.len() {
            break;
        }
    }
    let sent = sent_frames.len() as u64;
    let s = q.stats();
    let bytes: u64 = sent_frames.iter().map(|f| f.len() as u64).sum();
    assert_eq!((s.tx_packets, s.tx_bytes), (sent, bytes));
    assert_eq!(s.tx_full, offered - sent);
    assert_eq!(drops.get(DropReason::TX_FULL), offered - sent);
    assert_eq!(drops.total(), offered - sent);
    // The ring holds exactly what was counted as sent, in order.
    let got = rx_n(q.as_mut(), sent_frames.len());
    let mut k = 0;
    for b in &got {
        for i in 0..b.len() {
            assert_eq!(b.frame(i), sent_frames[k], "frame {k}");
            k += 1;
        }
    }
    let mut extra = Burst::with_capacity(32);
    assert_eq!(
        q.rx_burst(&mut extra),
        0,
        "nothing beyond what Tx counted as sent"
    );
    for mut b in got {
        q.free_burst(&mut b);
    }
    q.flush();
    assert!(port.pool_stats().iter().all(|p| p.in_use == 0));
}
