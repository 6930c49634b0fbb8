//! Flow-table and NF benchmarks.
//!
//! - `flow_table/{single,bulk}/{64k,1M,10M}`: lookups of random present keys in a table holding
//!   64 Ki (cache-resident), 1 M or 10 M flows (capacity = flows, so the load is what a full
//!   table has). Throughput is in lookups; divide the reported time per element by the CPU
//!   period for cycles (the bench prints the `cpu MHz` of /proc/cpuinfo at start).
//! - `nf/{nat,lb}/{host,nic-inline}/{1M,10k}` and `nf/nat/host/10M`: per-packet cost of the NAT
//!   and LB `process` over bursts of 32 × 64 B UDP packets built by `PacketFactory`, each packet
//!   one of 1 M (or 10 M) active flows (tables far larger than the caches: memory-bound) or 10 k
//!   (few lines, but spread over a table sized for 1 M flows, so TLB misses remain on 4 KiB
//!   pages). The throughput criterion reports is packets per second on one core: the NAT's
//!   Mpps figures. `nat` is the default NAT (endpoint-independent mapping and filtering);
//!   `nat-adf/host/1M` has address-dependent filtering and `nat-edm/host/1M` endpoint-dependent
//!   mapping (address-and-port-dependent filtering), the cost of each mode. Every NAT variant
//!   translates to the pool 10.0.0.0/24, or 10.0.0.0/20 for 10 M flows (an endpoint-independent
//!   mapping takes an outside port of its own, one address has 64 512, and each flow is a
//!   subscriber of its own: see `nat_pool`), and each setup line says how fast its sessions
//!   were created (the cost of a new session in that mode). The flows are populated in one order and measured in a random permutation of
//!   it, so neither the flow table nor the NAT's session pool is walked in allocation order.
//!   Headers are restored (untimed) before every round of 8 bursts, and only `process` is timed
//!   (`iter_custom`; the clock is read once per 256 packets). The setup line says what backs the
//!   tables (2 MiB pages need `echo 1024 > /proc/sys/vm/nr_hugepages` as root).
//!
//! On a shared machine the wall clock also counts the time other processes hold the core. After
//! each `nf` bench the share of its measurement the thread spent on a CPU is printed (from
//! `/proc/thread-self/schedstat`, summed over the whole measurement because the kernel updates
//! it only at scheduler ticks): a share well below 1 means the figure is low by about that
//! factor against a core of its own, as a poll-mode worker has.
//!
//! Run: `cargo bench -p nfs --bench flow_table -- --warm-up-time 1 --measurement-time 3`
//! (`-- nf/nat` for the NAT figures alone).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dataplane::testkit::PacketFactory;
use dataplane::{Burst, DatapathMode, NetworkFunction, NfContext, Verdict};
use nfs::flow_table::{FlowKey, FlowTable, FullPolicy, NO_SLOT};
use nfs::lb::LoadBalancer;
use nfs::nat::Nat;
use nfs::work_package::XorShift64;
use wire::frames::udp64;

fn cpu_mhz() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    s.lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse().ok())
}

/// Nanoseconds this thread has spent on a CPU, if the kernel reports it.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
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
        "table {label}: {} flows, {} slots, load {:.2}, {:.1} B/flow, {} MiB on {}",
        t.len(),
        t.slots(),
        t.len() as f64 / t.slots() as f64,
        t.bytes_per_flow(),
        t.memory_bytes() >> 20,
        t.page_kind()
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
const FLOWS: usize = 1_000_000;
/// Bytes of a 64 B frame without its FCS.
const FRAME: usize = 60;

/// `n` 64 B UDP frames, one per flow (src/dst/ports varying), and the random order the
/// measurement sends them in.
struct Flows {
    frames: Vec<[u8; FRAME]>,
    order: Vec<u32>,
}

fn flows(n: usize, dst: Option<u32>, seed: u64) -> Flows {
    let mut r = XorShift64::new(seed);
    let frames = (0..n)
        .map(|i| {
            let x = r.next_u64();
            let remote = dst.unwrap_or(0x3000_0000 | (x as u32 & 0xFFFF));
            let f = udp64(
                0xc0a8_0000u32.wrapping_add(i as u32),
                remote,
                (x >> 16) as u16 | 1,
                53,
            );
            f.try_into().expect("udp64 is 60 bytes")
        })
        .collect();
    Flows {
        frames,
        order: permutation(n, seed ^ 0x5eed),
    }
}

/// A random permutation of `0..n` (Fisher-Yates).
fn permutation(n: usize, seed: u64) -> Vec<u32> {
    let mut r = XorShift64::new(seed);
    let mut v: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = (((r.next_u64() >> 32) * (i as u64 + 1)) >> 32) as usize;
        v.swap(i, j);
    }
    v
}

/// Copies header images into the bursts' packets (from position `start` of the first `n`
/// flows, in random order or, to populate, in flow order) and resets the verdicts.
fn restore(bursts: &mut [Burst], fl: &Flows, n: usize, order: Option<&[u32]>, start: usize) {
    let mut k = start;
    for b in bursts.iter_mut() {
        for i in 0..b.len() {
            let idx = order.map_or(k % n, |o| o[k % n] as usize);
            let h = b.header_mut(i);
            let len = h.len();
            h.copy_from_slice(&fl.frames[idx][..len]);
            b.set_verdict(i, Verdict::tx(1));
            k += 1;
        }
    }
}

/// An NF with `n` active flows and `ROUND` bursts of packets to feed it.
struct NfSetup {
    nf: Box<dyn NetworkFunction>,
    bursts: Vec<Burst>,
    /// A random order of the first `n` flows.
    order: Vec<u32>,
    _factory: PacketFactory,
}

/// The outside pool for `n` subscribers (each flow here is a subscriber of its own): a /24 up
/// to 1 M flows and a /20 above, so an address serves about 4 000 and 2 400 of them, 4-6 % of
/// its 64 512 ports, as a carrier-grade NAT is provisioned. Paired pooling keeps a subscriber
/// on one address, and a new mapping probes at most `port_attempts` (16) ports: 10 M
/// subscribers on a /24 fill each address's ports to 60-70 %, where a few thousand new
/// mappings find no free port within 16 probes and are refused as `port_exhausted`, which is
/// the NAT's bounded work doing its job, not the cost of a hit this bench measures.
fn nat_pool(n: usize) -> &'static str {
    if n > 1_000_000 {
        "10.0.0.0/20"
    } else {
        "10.0.0.0/24"
    }
}

/// The NAT parameters of a bench variant (`nat`, `nat-adf`, `nat-edm`) for `n` flows.
fn nat_params(which: &str, n: usize, params: &mut toml::Table) {
    let s = |v: &str| toml::Value::String(v.into());
    params.insert("nat_ips".into(), s(nat_pool(n)));
    match which {
        "nat-adf" => {
            params.insert("filtering".into(), s("address-dependent"));
        }
        "nat-edm" => {
            params.insert("mapping".into(), s("endpoint-dependent"));
        }
        _ => {}
    }
}

fn nf_setup(which: &str, mode: DatapathMode, fl: &Flows, n: usize, ctx: &NfContext) -> NfSetup {
    let f = PacketFactory::new(mode, 64, 128, ROUND * 32);
    let mut params = toml::Table::new();
    params.insert("flows".into(), toml::Value::Integer(n.max(FLOWS) as i64));
    let t0 = Instant::now();
    let nf: Box<dyn NetworkFunction> = if which.starts_with("nat") {
        nat_params(which, n, &mut params);
        let nat = Nat::from_params(&params, 0, 1).unwrap();
        eprintln!(
            "nat: {} flows built in {:.1} ms, table on {}",
            n.max(FLOWS),
            t0.elapsed().as_secs_f64() * 1e3,
            nat.page_kind()
        );
        Box::new(nat)
    } else {
        Box::new(LoadBalancer::from_params(&params, 0, 1).unwrap())
    };
    let bursts: Vec<Burst> = (0..ROUND)
        .map(|i| {
            let mut b = Burst::with_capacity(32);
            for j in 0..32 {
                assert!(f.push(&mut b, &fl.frames[(i * 32 + j) % n]));
            }
            b
        })
        .collect();
    let mut s = NfSetup {
        nf,
        bursts,
        order: if n == fl.frames.len() {
            fl.order.clone()
        } else {
            permutation(n, 0x0dd)
        },
        _factory: f,
    };
    // Populate: every flow once, in flow order.
    let t0 = Instant::now();
    let mut k = 0;
    while k < n {
        restore(&mut s.bursts[..1], fl, n, None, k);
        s.nf.process(&mut s.bursts[0], ctx);
        k += 32;
    }
    let st = s.nf.counters();
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "{which} {mode}: populated in {secs:.2} s ({:.2} M new sessions/s), new={} active={}",
        n as f64 / secs / 1e6,
        st.count_at("new_mappings")
            .or(st.count_at("new_flows"))
            .unwrap(),
        st.count_at("active_mappings")
            .or(st.count_at("active_flows"))
            .unwrap()
    );
    s
}

fn bench_nf(c: &mut Criterion) {
    let mut g = c.benchmark_group("nf");
    g.throughput(Throughput::Elements((ROUND * 32) as u64));
    let ctx = NfContext {
        now_ns: 1_000_000_000,
        worker: 0,
        workers: 1,
    };
    for which in ["nat", "nat-adf", "nat-edm", "lb"] {
        // The NAT variants see the same flows (the seeds of the bench before the variants).
        let seed = if which == "lb" { 2 } else { 1 };
        // Frames for 1 M flows (shared by the 1 M and 10 k cases) and, for the NAT, 10 M.
        let mut flows_1m: Option<Flows> = None;
        let mut flows_10m: Option<Flows> = None;
        let dst = (which == "lb").then_some(0x0a02_0001);
        let mut cases = vec![(DatapathMode::Host, FLOWS)];
        if which == "nat" || which == "lb" {
            cases.push((DatapathMode::NicInline, FLOWS));
            cases.push((DatapathMode::NicInline, 10_000));
        }
        if which == "nat" {
            cases.push((DatapathMode::Host, 10 * FLOWS));
        }
        for (mode, n) in cases {
            let label = format!(
                "{}/{}",
                mode.as_str(),
                if n >= FLOWS {
                    format!("{}M", n / FLOWS)
                } else {
                    format!("{}k", n / 1000)
                }
            );
            let mut rng = XorShift64::new(99);
            // Built on first use (criterion calls this closure once per sample), so a filtered
            // run builds only what it measures.
            let mut setup: Option<NfSetup> = None;
            // (ns on a CPU, ns of wall time) over the measurement.
            let mut on_cpu = (0u64, 0u64);
            let fl_slot = if n > FLOWS {
                &mut flows_10m
            } else {
                &mut flows_1m
            };
            g.bench_function(BenchmarkId::new(which, label), |b| {
                let fl = fl_slot.get_or_insert_with(|| flows(n.max(FLOWS), dst, seed));
                let s = setup.get_or_insert_with(|| nf_setup(which, mode, fl, n, &ctx));
                b.iter_custom(|iters| {
                    let (cpu0, wall0) = (thread_cpu_ns(), Instant::now());
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = (((rng.next_u64() >> 32) * n as u64) >> 32) as usize;
                        restore(&mut s.bursts, fl, n, Some(&s.order), start);
                        let t0 = Instant::now();
                        for b in s.bursts.iter_mut() {
                            s.nf.process(b, &ctx);
                        }
                        total += t0.elapsed();
                    }
                    if let (Some(c0), Some(c1)) = (cpu0, thread_cpu_ns()) {
                        on_cpu.0 += c1.saturating_sub(c0);
                        on_cpu.1 += wall0.elapsed().as_nanos() as u64;
                    }
                    total
                });
                let st = s.nf.counters();
                assert_eq!(
                    st["dropped"], 0,
                    "{which}: the measured packets must all be hits; the NF's counters: {st:?}"
                );
            });
            if on_cpu.1 > 0 {
                eprintln!(
                    "{which}: on a CPU {:.0} % of the measurement",
                    100.0 * on_cpu.0 as f64 / on_cpu.1 as f64
                );
            }
            // The NF's tables go before the next case builds its own.
            drop(setup);
        }
    }
    g.finish();
}

criterion_group!(benches, bench_table, bench_nf);
criterion_main!(benches);
