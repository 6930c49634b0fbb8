//! Several load-balancer instances serving one VIP (docs/scale-out.md): every instance with the
//! same backends builds the same Maglev table, whatever the order of its `backends` list, its
//! worker count or its run-time changes, and a mid-flow packet that an ECMP rehash sends to an
//! instance that never saw its connection open reaches the backend the first instance chose.

mod common;

use common::{SEC, factory, ip, params, run};
use dataplane::{DatapathMode, NetworkFunction, NfCommand, Verdict};
use nfs::lb::{LbConfig, LoadBalancer, Maglev};
use wire::field::read_u32;
use wire::frames::FrameSpec;
use wire::tcp::{TCP_ACK, TCP_SYN};

const VIP: &str = "10.2.0.1";

/// Five backends, in the order one config lists them.
const BACKENDS: [&str; 5] = [
    "10.0.2.13",
    "10.0.2.11",
    "10.0.2.15",
    "10.0.2.12",
    "10.0.2.14",
];

/// An instance with `backends` (in that order) as worker `worker` of `workers`.
fn instance(backends: &[&str], worker: u16, workers: u16) -> LoadBalancer {
    let list: Vec<String> = backends.iter().map(|b| format!("\"{b}\"")).collect();
    let p = params(&format!(
        "vip = \"{VIP}\"\nbackends = [{}]\nmode = \"maglev\"\nflows = 80000",
        list.join(", ")
    ));
    LoadBalancer::from_params(&p, worker, workers).expect("lb config")
}

/// The backend address each frame was sent to.
fn backends_of(l: &mut LoadBalancer, frames: &[Vec<u8>]) -> Vec<u32> {
    run(l, &factory(DatapathMode::Host), frames, SEC, 0)
        .iter()
        .map(|(o, v)| {
            assert_eq!(*v, Verdict::tx(1));
            read_u32(o, 30)
        })
        .collect()
}

fn tcp(i: u32, flags: u8) -> Vec<u8> {
    let client = ip("16.0.0.1") + i * 13;
    FrameSpec::tcp(client, ip(VIP), 1024 + (i % 50_000) as u16, 443, flags, 0).build()
}

fn midflow_fallback(l: &LoadBalancer) -> u64 {
    l.counters().count_at("midflow_fallback").unwrap()
}

/// Every permutation of `items`, by Heap's algorithm.
fn permutations<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
    fn go<T: Clone>(k: usize, a: &mut Vec<T>, out: &mut Vec<Vec<T>>) {
        if k <= 1 {
            out.push(a.clone());
            return;
        }
        for i in 0..k {
            go(k - 1, a, out);
            let j = if k.is_multiple_of(2) { i } else { 0 };
            a.swap(j, k - 1);
        }
    }
    let mut a = items.to_vec();
    let mut out = Vec::new();
    go(a.len(), &mut a, &mut out);
    out
}

/// The table as backend addresses per slot (what a flow hashing to the slot is sent to).
fn table_by_address(backends: &[(u32, u32)], m: usize) -> Vec<u32> {
    let addrs: Vec<u32> = backends.iter().map(|b| b.0).collect();
    let weights: Vec<u32> = backends.iter().map(|b| b.1).collect();
    let mut t = Maglev::new(m, &addrs, LbConfig::default().maglev_seed);
    t.populate_weighted(&weights);
    t.slots().iter().map(|&s| addrs[usize::from(s)]).collect()
}

#[test]
fn the_maglev_table_is_the_same_for_every_order_of_the_backends() {
    // Six backends, two of weight 2 and one draining (weight 0): 720 orders, one table.
    let backends: Vec<(u32, u32)> = [
        ("10.0.2.11", 1),
        ("10.0.2.12", 2),
        ("10.0.2.13", 1),
        ("10.0.2.14", 0),
        ("10.0.2.15", 2),
        ("192.168.7.1", 1),
    ]
    .iter()
    .map(|&(a, w)| (ip(a), w))
    .collect();
    let m = 4099;
    let reference = table_by_address(&backends, m);
    let orders = permutations(&backends);
    assert_eq!(orders.len(), 720);
    for order in &orders {
        let t = table_by_address(order, m);
        let differ = t.iter().zip(&reference).filter(|(a, b)| a != b).count();
        assert_eq!(
            differ, 0,
            "{differ} of {m} slots differ for order {order:?}"
        );
    }
    // The draining backend owns nothing; the others own slots in proportion to their weight.
    assert!(!reference.contains(&ip("10.0.2.14")));
    let of = |a: &str| reference.iter().filter(|&&s| s == ip(a)).count();
    assert!(of("10.0.2.12") > of("10.0.2.11") * 19 / 10, "weights");
}

/// The acceptance test: two instances with the same backends listed in different
/// orders and different worker counts send every one of 10 000 flows to the same backend; so
/// does a third that started with four backends and was given the fifth at run time.
#[test]
fn instances_agree_on_10000_flows_whatever_their_order_and_workers() {
    let flows: Vec<Vec<u8>> = (0..10_000).map(|i| tcp(i, TCP_SYN)).collect();
    let mut a = instance(&BACKENDS, 0, 1);
    let mut reversed = BACKENDS;
    reversed.reverse();
    let mut b = instance(&reversed, 3, 4);
    let mut c = instance(&[BACKENDS[4], BACKENDS[0], BACKENDS[2], BACKENDS[3]], 1, 2);
    c.control(&NfCommand::new("add", &[BACKENDS[1]]), &common::ctx(0))
        .unwrap();
    let (ba, bb, bc) = (
        backends_of(&mut a, &flows),
        backends_of(&mut b, &flows),
        backends_of(&mut c, &flows),
    );
    let disagree = |x: &[u32], y: &[u32]| x.iter().zip(y).filter(|(p, q)| p != q).count();
    assert_eq!(disagree(&ba, &bb), 0, "list order and workers");
    assert_eq!(disagree(&ba, &bc), 0, "a backend added at run time");
    // And the flows are spread over all five.
    for backend in BACKENDS {
        let n = ba.iter().filter(|&&x| x == ip(backend)).count();
        assert!((1500..2500).contains(&n), "{backend}: {n} of 10000");
    }
}

/// After an ECMP rehash, instance B receives the rest of connections instance A saw open: each
/// keeps its backend, and B counts them as `midflow_fallback`; packets with SYN and packets
/// that hit B's table are not counted.
#[test]
fn midflow_packets_that_miss_the_table_keep_their_backend_and_are_counted() {
    let n = 500;
    let mut a = instance(&BACKENDS, 0, 1);
    let mut b = instance(
        &[
            BACKENDS[2],
            BACKENDS[4],
            BACKENDS[0],
            BACKENDS[1],
            BACKENDS[3],
        ],
        1,
        3,
    );
    let syns: Vec<Vec<u8>> = (0..n).map(|i| tcp(i, TCP_SYN)).collect();
    let acks: Vec<Vec<u8>> = (0..n).map(|i| tcp(i, TCP_ACK)).collect();
    let opened = backends_of(&mut a, &syns);
    assert_eq!(backends_of(&mut a, &acks), opened);
    assert_eq!(midflow_fallback(&a), 0, "A saw every connection open");
    assert_eq!(backends_of(&mut b, &acks), opened, "B agrees with A");
    assert_eq!(midflow_fallback(&b), u64::from(n));
    let counters = b.counters();
    assert_eq!(counters.count_at("new_flows"), Some(u64::from(n)));
    // The next packets of those connections hit B's table now.
    assert_eq!(backends_of(&mut b, &acks), opened);
    assert_eq!(midflow_fallback(&b), u64::from(n));
    // New connections on B are new flows, not mid-flow ones.
    let fresh: Vec<Vec<u8>> = (n..n + 100).map(|i| tcp(i, TCP_SYN)).collect();
    backends_of(&mut b, &fresh);
    assert_eq!(midflow_fallback(&b), u64::from(n));
    assert_eq!(b.counters().count_at("new_flows"), Some(u64::from(n) + 100));
}
