//! The classifier of the fast path against etherparse on a 64 B UDP frame (whole frame in the
//! header segment, as in `host` mode): the figures quoted in the crate docs.

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use wire::frames::udp64;

fn classify(c: &mut Criterion) {
    let f = udp64(0x0a00_0001, 0x0808_0808, 1234, 53);
    c.bench_function("wire::classify::parse", |b| {
        b.iter(|| wire::classify::parse(black_box(&f), black_box(f.len())).map(|p| p.ports()))
    });
    c.bench_function("etherparse::SlicedPacket::from_ethernet", |b| {
        b.iter(|| {
            etherparse::SlicedPacket::from_ethernet(black_box(&f)).map(|p| match p.transport {
                Some(etherparse::TransportSlice::Udp(u)) => (u.source_port(), u.destination_port()),
                _ => (0, 0),
            })
        })
    });
}

criterion_group!(benches, classify);
criterion_main!(benches);
