//! A NAT or load balancer sized for 10 M flows starts without writing its tables: the flow
//! tables and session pools are mapped, not filled, so building one costs no pass over its
//! gigabyte (the kernel zero-fills pages as traffic first touches them). Measured as the
//! process's resident memory and hugetlb pages, which a filled table would raise by its size;
//! this file holds one test so nothing else runs in the process meanwhile.

use nfs::BuildContext;

/// Bytes of memory this process has touched: resident (`VmRSS`) plus hugetlb pages in use
/// (`HugetlbPages`, which RSS leaves out), from `/proc/self/status`.
fn resident_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib = |key: &str| -> u64 {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (kib("VmRSS:") + kib("HugetlbPages:")) * 1024
}

#[test]
fn ten_million_flow_tables_are_built_without_touching_them() {
    let ctx = BuildContext::new(0, 1);
    for (nf, params) in [("nat", "flows = 10000000"), ("lb", "flows = 10000000")] {
        let params: toml::Table = params.parse().unwrap();
        let spec = nfs::lookup(nf).unwrap();
        let size = (spec.memory)(&params, &ctx).expect("sized by flows").bytes;
        assert!(
            size > 500 << 20,
            "{nf}: a 10 M-flow table is large ({size} B)"
        );
        let before = resident_bytes();
        let built = nfs::build(nf, &params, &ctx).expect("built");
        let grown = resident_bytes().saturating_sub(before);
        assert!(
            grown < 64 << 20,
            "{nf}: building wrote {} MiB of its {} MiB",
            grown >> 20,
            size >> 20
        );
        drop(built);
    }
}
