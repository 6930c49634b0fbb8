//! Every registered network function, reset after traffic, behaves exactly as one just built:
//! same frames out, same verdicts, same counters. This is what lets a benchmark keep its NF
//! chains across trials (tables built once per process) while every trial stays independent.

use dataplane::testkit::PacketFactory;
use dataplane::{Burst, DatapathMode, NetworkFunction, NfContext, Verdict};
use nfs::{BuildContext, REGISTRY};
use wire::frames::FrameSpec;
use wire::tcp::{TCP_ACK, TCP_FIN, TCP_SYN};

const BURST: usize = 32;

/// Small tables, so the traffic below overflows them (full policy, port exhaustion and expiry
/// all run), and parameters that give every function work to do.
fn params(name: &str) -> toml::Table {
    let mut t = toml::Table::new();
    let defaults = (nfs::lookup(name).expect("registered").defaults)();
    if defaults.contains_key("flows") {
        t.insert("flows".into(), toml::Value::Integer(512));
    }
    let extra = match name {
        "nat" => "port_max = 1400\nudp_timeout_s = 2\nverify_checksums = true",
        "lb" => "idle_timeout_s = 2\nverify_checksums = true",
        "flow_counter" => "idle_timeout_s = 2",
        "work_package" => "size_mib = 1\nreads = 3",
        "port_filter" => "deny_ports = [80, 443]",
        _ => "",
    };
    let extra: toml::Table = extra.parse().expect("test params");
    t.extend(extra);
    t
}

/// `n` datagrams from `seed`: UDP, TCP and ICMP from many inside hosts to a few outside ones,
/// to the load balancer's VIP and back to the NAT address; every seventh a UDP datagram in
/// fragments, last first (a NAT holds inbound ones until the first arrives), and at the end a
/// lone inbound later fragment whose first never comes (still held when the traffic stops).
fn traffic(seed: u32, n: u32) -> Vec<Vec<u8>> {
    let mut frames: Vec<Vec<u8>> = (0..n).flat_map(|i| datagram(seed, i)).collect();
    // Inbound (a NAT can place an inbound fragment only by its first), with its own IP ID.
    let mut orphan = FrameSpec::udp(0x3001_0101, 0x0a00_0001, 53, 2000, 600);
    orphan.ident = 0xfff0;
    let orphan = orphan.fragments(256);
    frames.push(orphan[1].clone());
    frames
}

/// Datagram `i` of traffic `seed` (see [`traffic`]), as the frames that carry it.
fn datagram(seed: u32, i: u32) -> Vec<Vec<u8>> {
    let outside = [0x3001_0101u32, 0x3001_0102, 0x3001_0103];
    let (nat_ip, vip) = (0x0a00_0001u32, 0x0a02_0001u32);
    let x = i.wrapping_mul(2_654_435_761).wrapping_add(seed);
    let src = 0x1001_0000 + (x % 900);
    let sport = 1000 + (x % 50) as u16;
    let dst = match x % 5 {
        0 => vip,
        1 => nat_ip,
        _ => outside[(x % 3) as usize],
    };
    let dport = [53u16, 80, 443, 8080][(x % 4) as usize];
    let len = (x % 200) as usize;
    if i % 7 == 3 {
        let mut spec = FrameSpec::udp(src, dst, sport, dport, 500 + len);
        spec.ident = i as u16;
        let mut f = spec.fragments(256);
        f.reverse();
        return f;
    }
    let spec = match i % 6 {
        0 => FrameSpec::tcp(src, dst, sport, dport, TCP_SYN, len),
        1 => FrameSpec::tcp(src, dst, sport, dport, TCP_ACK | TCP_FIN, len),
        2 => FrameSpec::echo(src, dst, sport, len),
        _ => FrameSpec::udp(src, dst, sport, dport, len),
    };
    vec![spec.build()]
}

/// What came out of `nf` for `frames`, burst by burst: each packet's verdict and bytes, then
/// those of the packets it released after that burst. The clock starts at 0 and moves 100 ms
/// per burst, so entries expire during the traffic.
fn run(
    nf: &mut dyn NetworkFunction,
    f: &PacketFactory,
    frames: &[Vec<u8>],
) -> Vec<(Verdict, Vec<u8>)> {
    let mut out = Vec::new();
    for (k, chunk) in frames.chunks(BURST).enumerate() {
        let mut b: Burst = f.burst(chunk);
        let ctx = NfContext {
            now_ns: k as u64 * 100_000_000,
            worker: 0,
            workers: 1,
        };
        nf.process(&mut b, &ctx);
        out.extend((0..b.len()).map(|i| (b.verdict(i), b.frame(i))));
        let mut released = Burst::with_capacity(BURST);
        while nf.held() > 0 {
            nf.release(&mut released, &ctx, false);
            if released.is_empty() {
                break;
            }
            out.extend((0..released.len()).map(|i| (released.verdict(i), released.frame(i))));
            released.clear();
        }
    }
    out
}

#[test]
fn reset_gives_the_function_as_built() {
    // Room for a burst, a released burst and every fragment the NAT may hold.
    let f = PacketFactory::new(DatapathMode::NicInline, 64, 1518, 4096);
    let ctx = BuildContext {
        worker: 0,
        workers: 1,
        net: None,
    };
    let (dirty, probe) = (traffic(7, 3000), traffic(99, 2000));
    for spec in REGISTRY {
        if spec.name == nfs::route::NAME {
            // The route stage is built over a run's network (ports, routes, neighbours) and
            // keeps the default `reset` (false): chains of a run with a network are always
            // built anew (src/kept_chains.rs).
            continue;
        }
        let p = params(spec.name);
        let build = || nfs::build(spec.name, &p, &ctx).expect(spec.name);
        let mut used = build();
        run(&mut *used, &f, &dirty);
        if spec.name == "nat" {
            assert!(used.held() > 0, "nat: the orphan fragment is held");
        }
        assert!(used.reset(), "{}: reset refused", spec.name);
        assert_eq!(used.held(), 0, "{}: reset keeps no packet", spec.name);
        let got = run(&mut *used, &f, &probe);
        let mut fresh = build();
        let idle = fresh.counters();
        let want = run(&mut *fresh, &f, &probe);
        assert_ne!(
            fresh.counters(),
            idle,
            "{}: the probe did nothing",
            spec.name
        );
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{}: packet {i} differs after reset", spec.name);
        }
        assert_eq!(
            used.counters(),
            fresh.counters(),
            "{}: counters differ after reset",
            spec.name
        );
        // Reset right after building changes nothing either.
        let mut once = build();
        assert!(once.reset());
        assert_eq!(run(&mut *once, &f, &probe), want, "{}", spec.name);
    }
}
