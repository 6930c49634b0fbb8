//! Network functions for a fixed number of packets: drivers for instruction counting (the
//! deterministic cost table of `scripts/count-instructions.sh`). Run each case under cachegrind
//! twice with different packet counts and divide the difference of the instruction totals by the
//! difference of the counts: setup (building and populating flow tables) cancels out.
//!
//! ```text
//! cargo build --release -p nfs --example nf_count
//! nf_count nat <flows> <packets>            # the NAT alone, 64 B UDP, random flows
//! nf_count lb <flows> <packets>             # the load balancer alone, same traffic to one VIP
//! nf_count vnic-macswap <mode> <packets>    # macswap on the virtual NIC, 64 B, accounting on
//! ```
//!
//! Every counted packet must be a hit of a live flow: the NAT gets an outside address pool large
//! enough for one exclusive port per inside endpoint (endpoint-independent mapping, its default,
//! holds at most one port slice of endpoints per outside address), and a run whose NF dropped
//! any packet fails instead of counting the cost of drops.

use dataplane::driver::vnic::{VnicConfig, VnicPort};
use dataplane::link::{CountingSink, Link, RepeatSource};
use dataplane::testkit::PacketFactory;
use dataplane::{Burst, DatapathMode, DropCounts, NetworkFunction, NfContext, Queue, Verdict};
use nfs::lb::LoadBalancer;
use nfs::macswap::MacSwap;
use nfs::nat::Nat;

/// A 64 B UDP/IPv4 frame without FCS (60 bytes) from `src`:`sport` to `dst`:53.
fn udp64(src: u32, dst: u32, sport: u16) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[12] = 0x08;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&46u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&src.to_be_bytes());
    f[30..34].copy_from_slice(&dst.to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    f
}

/// xorshift64: a deterministic stream, so every run counts the same instructions.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Runs `nf` over `packets` packets of `flows` flows (after one pass over every flow), in a
/// random order, 32 to a burst.
fn nf_alone(mut nf: Box<dyn NetworkFunction>, flows: usize, packets: u64, vip: Option<u32>) {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let frames: Vec<[u8; 60]> = (0..flows)
        .map(|i| {
            let x = next(&mut seed);
            let dst = vip.unwrap_or(0x3000_0000 | (x as u32 & 0xffff));
            udp64(
                0xc0a8_0000u32.wrapping_add(i as u32),
                dst,
                (x >> 16) as u16 | 1,
            )
        })
        .collect();
    let f = PacketFactory::new(DatapathMode::Host, 64, 128, 32);
    let mut b = Burst::with_capacity(32);
    for fr in &frames[..32.min(flows)] {
        assert!(f.push(&mut b, fr), "factory holds a burst");
    }
    let ctx = NfContext {
        now_ns: 1_000_000_000,
        worker: 0,
        workers: 1,
    };
    let feed = |b: &mut Burst, pick: &mut dyn FnMut() -> usize| {
        for i in 0..b.len() {
            let fr = &frames[pick()];
            let h = b.header_mut(i);
            let n = h.len();
            h.copy_from_slice(&fr[..n]);
            b.set_verdict(i, Verdict::tx(1));
        }
    };
    let mut k = 0;
    while k < flows {
        let mut pick = || {
            let i = k % flows;
            k += 1;
            i
        };
        feed(&mut b, &mut pick);
        nf.process(&mut b, &ctx);
    }
    let mut done = 0u64;
    while done < packets {
        let mut pick = || (next(&mut seed) % flows as u64) as usize;
        feed(&mut b, &mut pick);
        nf.process(&mut b, &ctx);
        done += b.len() as u64;
    }
    let counters = nf.counters();
    println!(
        "{}: {done} packets over {flows} flows; counters {counters:?}",
        nf.name()
    );
    let dropped = counters.count_at("dropped").unwrap_or(0);
    if dropped > 0 {
        eprintln!(
            "nf_count: {} dropped {dropped} packets: the count would not be of hits",
            nf.name()
        );
        std::process::exit(1);
    }
}

/// Parameters of a NAT for `flows` inside endpoints, every one of which gets a session. Its
/// default endpoint-independent mapping gives each endpoint an outside port of its own, and one
/// address has only one port slice (64 512 ports), so the pool has a power-of-two number of
/// addresses with at least 4 ports for each endpoint: a quarter full, the random probes find a
/// free port at once.
fn nat_params(flows: u64) -> toml::Table {
    let mut p = toml::Table::new();
    p.insert("flows".into(), toml::Value::Integer(flows as i64));
    let ports = u64::from(u16::MAX) - 1024 + 1;
    let addrs = (flows * 4).div_ceil(ports).next_power_of_two().min(1 << 16);
    let len = 32 - addrs.trailing_zeros();
    p.insert("nat_ips".into(), format!("10.0.0.0/{len}").into());
    p
}

/// macswap between the virtual NIC's Rx and Tx, as `dataplane run` would run it on one queue.
fn vnic_macswap(mode: DatapathMode, packets: u64) {
    let mut frame = vec![0u8; 60];
    frame[12] = 0x08;
    frame[14] = 0x45;
    frame[23] = 17;
    let cfg = VnicConfig {
        mode,
        ..VnicConfig::default()
    };
    let link = Link {
        rx: Box::new(RepeatSource::new(frame, u64::MAX)),
        tx: Box::new(CountingSink::default()),
    };
    let mut port = VnicPort::new("count", 0, cfg, link).expect("port");
    let mut q = port.take_vnic_queues().pop().expect("queue");
    let mut nf = MacSwap::default();
    let ctx = NfContext::default();
    let mut burst = Burst::with_capacity(32);
    let mut drops = DropCounts::default();
    let mut fwd = 0u64;
    while fwd < packets {
        q.rx_burst(&mut burst);
        nf.process(&mut burst, &ctx);
        fwd += q.tx_burst(&mut burst, &mut drops) as u64;
    }
    println!("macswap on the vNIC ({mode}): {fwd} packets");
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| a.get(i).and_then(|s| s.parse::<u64>().ok());
    let usage = "usage: nf_count nat|lb <flows> <packets> | vnic-macswap <mode> <packets>";
    let ok = match a.first().map(String::as_str) {
        Some(which @ ("nat" | "lb")) => match (num(1), num(2)) {
            (Some(flows), Some(packets)) if flows > 0 => {
                let (nf, vip): (Box<dyn NetworkFunction>, _) = if which == "lb" {
                    let mut p = toml::Table::new();
                    p.insert("flows".into(), toml::Value::Integer(flows as i64));
                    let lb = LoadBalancer::from_params(&p, 0, 1).expect("lb");
                    (Box::new(lb), Some(0x0a02_0001))
                } else {
                    let p = nat_params(flows);
                    (Box::new(Nat::from_params(&p, 0, 1).expect("nat")), None)
                };
                nf_alone(nf, flows as usize, packets, vip);
                true
            }
            _ => false,
        },
        Some("vnic-macswap") => match (a.get(1).and_then(|m| m.parse().ok()), num(2)) {
            (Some(mode), Some(packets)) => {
                vnic_macswap(mode, packets);
                true
            }
            _ => false,
        },
        _ => false,
    };
    if !ok {
        eprintln!("{usage}");
        std::process::exit(2);
    }
}
