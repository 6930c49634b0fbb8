//! Flow-table and NF benchmarks.
//!
//! - `flow_table/{single,bulk}/{64k,1M,10M}`: lookups of random present keys in a table holding
//!   64 Ki (cache-resident), 1 M or 10 M flows (capacity = flows, so the load is what a full
//!   table has). Throughput is in lookups; divide the reported time per element by the CPU
//!   period for cycles (the bench prints the `cpu MHz` of /proc/cpuinfo at start).
//! - `nf/{nat,lb}/{host,nic-inline}/{1M,10k}`: per-packet cost of the NAT and LB `process` over
//!   bursts of 32 × 64 B UDP packets built by `PacketFactory`, each packet one of 1 M active flows
//!   (tables far larger than the caches: memory-bound) or 10 k (few lines, but spread over a
//!   table sized for 1 M flows, so TLB misses remain on 4 KiB pages).
//!   Headers are restored (untimed) before every round of 8 bursts, and only `process` is timed
//!   (`iter_custom`; the clock is read once per 256 packets).
//!
//! Run: `cargo bench -p nfs --bench flow_table -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dataplane::testkit::PacketFactory;
use dataplane::{Burst, DatapathMode, NetworkFunction, NfContext, Packet, Verdict};
use nfs::flow_table::{FlowKey, FlowTable, FullPolicy, NO_SLOT};
use nfs::frames::udp64;
use nfs::lb::LoadBalancer;
use nfs::nat::Nat;
use nfs::work_package::XorShift64;

fn cpu_mhz() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    s.lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse().ok())
}

fn random_keys(n: usize, seed: u64) -> Vec<FlowKey> {
    let mut r = XorShift64::new(seed);
    (0..n)
        .map(|_| {
            let a = r.next_u64();
            let b = r.next_u64();
            FlowKey::new(a as u32, (a >> 32) as u32, b as u16, (b >> 16) as u16, 17)
        })
        .collect()
}

fn shuffled_sample(keys: &[FlowKey], n: usize, seed: u64) -> Vec<FlowKey> {
    let mut r = XorShift64::new(seed);
    (0..n)
        .map(|_| keys[(((r.next_u64() >> 32) * keys.len() as u64) >> 32) as usize])
        .collect()
}

/// A filled table and the keys to probe it with.
struct TableSetup {
    t: FlowTable<u32>,
    probe: Vec<FlowKey>,
}

fn table_setup(label: &str, n: usize) -> TableSetup {
    let keys = random_keys(n, 0xbe9c + n as u64);
    let mut t: FlowTable<u32> = FlowTable::new(n, 0, FullPolicy::Drop, 0x5eed);
    for (i, k) in keys.iter().enumerate() {
        t.insert(*k, i as u32, 0).expect("fill");
    }
    eprintln!(
        "table {label}: {} flows, {} slots, load {:.2}, {:.1} B/flow, {} MiB",
        t.len(),
        t.slots(),
        t.len() as f64 / t.slots() as f64,
        t.bytes_per_flow(),
        t.memory_bytes() >> 20
    );
    let probe = shuffled_sample(&keys, 1 << 20, 7);
    TableSetup { t, probe }
}

fn bench_table(c: &mut Criterion) {
    if let Some(mhz) = cpu_mhz() {
        eprintln!(
            "cpu MHz (from /proc/cpuinfo): {mhz}; cycles = ns * {:.3}",
            mhz / 1000.0
        );
    }
    let mut g = c.benchmark_group("flow_table");
    g.throughput(Throughput::Elements(32));
    for (label, n) in [("64k", 65_536usize), ("1M", 1_000_000), ("10M", 10_000_000)] {
        // Built on first use, so a filtered run skips tables it does not need.
        let mut setup: Option<TableSetup> = None;
        g.bench_function(BenchmarkId::new("single", label), |b| {
            let s = setup.get_or_insert_with(|| table_setup(label, n));
            let mut off = 0usize;
            b.iter(|| {
                let mut acc = 0u32;
                for k in &s.probe[off..off + 32] {
                    acc = acc.wrapping_add(s.t.lookup(k, 0).unwrap_or(NO_SLOT));
                }
                off = (off + 32) & ((1 << 20) - 1);
                black_box(acc)
            })
        });
        g.bench_function(BenchmarkId::new("bulk", label), |b| {
            let s = setup.get_or_insert_with(|| table_setup(label, n));
            let mut hashes = [0u64; 32];
            let mut out = [0u32; 32];
            let mut off = 0usize;
            b.iter(|| {
                let ks = &s.probe[off..off + 32];
                s.t.hash_bulk(ks, &mut hashes);
                s.t.lookup_bulk(ks, &hashes, 0, &mut out);
                off = (off + 32) & ((1 << 20) - 1);
                black_box(out[0])
            })
        });
    }
    g.finish();
}

const ROUND: usize = 8; // bursts per timed round
const FLOWS: u32 = 1_000_000;

/// Header images of `FLOWS` 64 B UDP frames (src/dst/ports varying), in a random order.
fn flow_frames(dst: Option<u32>, seed: u64) -> Vec<Vec<u8>> {
    let mut r = XorShift64::new(seed);
    (0..FLOWS)
        .map(|i| {
            let x = r.next_u64();
            let remote = dst.unwrap_or(0x3000_0000 | (x as u32 & 0xFFFF));
            udp64(
                0xc0a8_0000u32.wrapping_add(i),
                remote,
                (x >> 16) as u16 | 1,
                53,
            )
        })
        .collect()
}

/// Copies header images into the bursts' packets (from flow `start` on) and resets verdicts.
fn restore(bursts: &mut [Burst], frames: &[Vec<u8>], start: usize) {
    let mut k = start;
    for b in bursts.iter_mut() {
        for i in 0..b.len() {
            let p: &mut Packet = b.packet_mut(i);
            let h = p.header_mut();
            let n = h.len();
            h.copy_from_slice(&frames[k % frames.len()][..n]);
            b.set_verdict(i, Verdict::Tx(1));
            k += 1;
        }
    }
}

/// An NF with `frames.len()` active flows and `ROUND` bursts of packets to feed it.
struct NfSetup {
    nf: Box<dyn NetworkFunction>,
    bursts: Vec<Burst>,
    _factory: PacketFactory,
}

fn nf_setup(which: &str, mode: DatapathMode, frames: &[Vec<u8>], ctx: &NfContext) -> NfSetup {
    let f = PacketFactory::new(mode, 64, 128, ROUND * 32);
    let mut nf: Box<dyn NetworkFunction> = if which == "nat" {
        Box::new(Nat::from_params(&toml::toml! { flows = 1000000 }, 0, 1).unwrap())
    } else {
        Box::new(LoadBalancer::from_params(&toml::toml! { flows = 1000000 }, 0, 1).unwrap())
    };
    let mut bursts: Vec<Burst> = (0..ROUND).map(|_| Burst::with_capacity(32)).collect();
    for (i, b) in bursts.iter_mut().enumerate() {
        for j in 0..32 {
            let p = f.packet(&frames[(i * 32 + j) % frames.len()]).unwrap();
            b.push(p, Verdict::Tx(1)).unwrap();
        }
    }
    // Populate: every flow once.
    let mut k = 0;
    while k < frames.len() {
        restore(&mut bursts[..1], frames, k);
        nf.process(&mut bursts[0], ctx);
        k += 32;
    }
    let st = nf.stats();
    eprintln!(
        "{which} {mode}: populated, new={} active={}",
        st.get("new_mappings").or(st.get("new_flows")).unwrap(),
        st.get("active_mappings")
            .or(st.get("active_flows"))
            .unwrap()
    );
    NfSetup {
        nf,
        bursts,
        _factory: f,
    }
}

fn bench_nf(c: &mut Criterion) {
    let mut g = c.benchmark_group("nf");
    g.throughput(Throughput::Elements((ROUND * 32) as u64));
    let ctx = NfContext {
        now_ns: 1_000_000_000,
        worker: 0,
        workers: 1,
    };
    let mut frames_of: [Option<Vec<Vec<u8>>>; 2] = [None, None];
    for (wi, which) in ["nat", "lb"].into_iter().enumerate() {
        for (mode, flows) in [
            (DatapathMode::Host, FLOWS as usize),
            (DatapathMode::NicInline, FLOWS as usize),
            (DatapathMode::NicInline, 10_000),
        ] {
            let label = format!(
                "{}/{}",
                mode.as_str(),
                if flows >= 1_000_000 {
                    "1M".to_string()
                } else {
                    format!("{}k", flows / 1000)
                }
            );
            let frames_slot = &mut frames_of[wi];
            let mut rng = XorShift64::new(99);
            // Built on first use (criterion calls this closure once per sample).
            let mut setup: Option<NfSetup> = None;
            g.bench_function(BenchmarkId::new(which, label), |b| {
                let all = frames_slot.get_or_insert_with(|| {
                    flow_frames((which == "lb").then_some(0x0a02_0001), 1 + wi as u64)
                });
                let frames = &all[..flows];
                let s = setup.get_or_insert_with(|| nf_setup(which, mode, frames, &ctx));
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = (((rng.next_u64() >> 32) * frames.len() as u64) >> 32) as usize;
                        restore(&mut s.bursts, frames, start);
                        let t0 = Instant::now();
                        for b in s.bursts.iter_mut() {
                            s.nf.process(b, &ctx);
                        }
                        total += t0.elapsed();
                    }
                    total
                });
                let st = s.nf.stats();
                assert_eq!(
                    st["dropped"], 0,
                    "{which}: the measured packets must all be hits"
                );
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_table, bench_nf);
criterion_main!(benches);
