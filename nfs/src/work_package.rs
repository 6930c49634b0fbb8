//! WorkPackage: a synthetic NF that performs N random reads per packet from an S-MiB buffer, for
//! the paper's memory-contention sweeps (Fig. 7: S in {1, 2, 4, 8, 16, 32} MiB, N in {2, 4, 6,
//! 8, 10}).
//!
//! It models FastClick's `WorkPackage(S, N, R 0, PAYLOAD false, W 1, WRITE 0)`: no payload
//! access, no writes, no extra CPU work; only the cache/DRAM pressure of N dependent-free random
//! 8-byte reads. Addresses come from a xorshift64 generator (three shifts and XORs, no
//! multiplication) seeded per worker, and are mapped onto the buffer with a multiply-shift
//! (no division, no power-of-two restriction). Every value read is added into a sink that is
//! reported in the stats (`sink`), so the compiler cannot remove the reads. The buffer is filled
//! at construction, which also faults in every page so the first packets do not pay for it.
//! Packets are forwarded unchanged (the paper put `EtherMirror` in front; chain `macswap` for
//! that).
//!
//! Defaults: `reads = 4`, `size_mib = 8` (the middle of the paper's sweep).
#![forbid(unsafe_code)]

use dataplane::{Burst, Counters, NetworkFunction, NfContext};
use serde::{Deserialize, Serialize};

use crate::params::{bad_param, mix_seed, parse_params};
use crate::registry::{BuildContext, Memory, NfSpec, Param, defaults_of};

/// The registration of `work_package`.
pub const SPEC: NfSpec = NfSpec {
    name: "work_package",
    aliases: &["work-package"],
    summary: "N random 8-byte reads per packet over an S-MiB buffer (the paper's \
              memory-contention sweeps); packets are forwarded unchanged.",
    params: &[
        Param {
            name: "reads",
            doc: "random reads per packet (N), 0..=1000000",
        },
        Param {
            name: "size_mib",
            doc: "buffer size in MiB (S), 1..=65536; allocated and filled per worker",
        },
        Param {
            name: "seed",
            doc: "PRNG seed (mixed with the worker index)",
        },
    ],
    defaults: defaults_of::<WorkPackageConfig>,
    drop_reasons: &[],
    build,
    memory,
};

/// The name its counters are reported under (`nfs.work-package`), kept from the first release.
pub const NAME: &str = "work-package";

fn build(params: &toml::Table, ctx: &BuildContext) -> Result<Box<dyn NetworkFunction>, String> {
    Ok(Box::new(WorkPackage::from_params(
        params,
        ctx.worker,
        ctx.workers,
    )?))
}

fn memory(params: &toml::Table, _: &BuildContext) -> Option<Memory> {
    let c: WorkPackageConfig = parse_params(SPEC.name, params).ok()?;
    Some(Memory {
        key: "size_mib",
        value: c.size_mib.to_string(),
        bytes: u64::from(c.size_mib) << 20,
    })
}

/// WorkPackage parameters.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkPackageConfig {
    /// Random reads per packet (N).
    pub reads: u32,
    /// Buffer size in MiB (S).
    pub size_mib: u32,
    /// PRNG seed (mixed with the worker index).
    pub seed: u64,
}

impl Default for WorkPackageConfig {
    fn default() -> Self {
        Self {
            reads: 4,
            size_mib: 8,
            seed: 0x7770_6b67,
        }
    }
}

/// xorshift64 (Marsaglia 2003): period 2^64 - 1, never returns 0 for a non-zero state.
#[derive(Clone, Debug)]
pub struct XorShift64(u64);

impl XorShift64 {
    /// A generator; a zero seed is replaced by a fixed non-zero one.
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }
    /// The next value.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// The WorkPackage NF (one instance per worker).
pub struct WorkPackage {
    name: String,
    buf: Vec<u64>,
    reads: u32,
    rng: XorShift64,
    /// `rng` as built (what [`NetworkFunction::reset`] restores).
    rng_at_build: XorShift64,
    sink: u64,
    total_reads: u64,
    packets: u64,
}

impl WorkPackage {
    /// Builds worker `worker`'s instance from a parameter table.
    pub fn from_params(params: &toml::Table, worker: u16, _workers: u16) -> Result<Self, String> {
        let cfg: WorkPackageConfig = parse_params(SPEC.name, params)?;
        Self::new(&cfg, worker)
    }

    /// Builds worker `worker`'s instance from a config (allocates and fills the buffer).
    pub fn new(cfg: &WorkPackageConfig, worker: u16) -> Result<Self, String> {
        if cfg.size_mib == 0 || cfg.size_mib > 65536 {
            return Err(bad_param(SPEC.name, "size_mib", "must be 1..=65536"));
        }
        if cfg.reads > 1_000_000 {
            return Err(bad_param(SPEC.name, "reads", "must be at most 1000000"));
        }
        let words = cfg.size_mib as usize * (1 << 20) / 8;
        let mut rng = XorShift64::new(mix_seed(cfg.seed, worker, 4));
        let buf = (0..words).map(|_| rng.next_u64()).collect();
        Ok(Self {
            name: NAME.to_string(),
            buf,
            reads: cfg.reads,
            rng_at_build: rng.clone(),
            rng,
            sink: 0,
            total_reads: 0,
            packets: 0,
        })
    }

    /// The running sum of every value read (what keeps the reads alive).
    pub fn sink(&self) -> u64 {
        self.sink
    }
}

impl NetworkFunction for WorkPackage {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
        let len = self.buf.len() as u64;
        let mut sink = self.sink;
        let mut n = 0u64;
        // The reads never touch a header, so there is nothing to prefetch: the buffer reads
        // are the work (and independent, so they overlap by themselves).
        for i in 0..burst.len() {
            if !burst.is_live(i) {
                continue;
            }
            n += 1;
            for _ in 0..self.reads {
                // Multiply-shift maps 32 random bits onto [0, len) without a division.
                let r = self.rng.next_u64() >> 32;
                let idx = ((r * len) >> 32) as usize;
                sink = sink.wrapping_add(self.buf[idx]);
            }
        }
        self.sink = std::hint::black_box(sink);
        self.packets += n;
        self.total_reads += n * u64::from(self.reads);
    }

    /// Back to the state as built: the random sequence restarts, the sink and counts are zero
    /// (the buffer's contents never change).
    fn reset(&mut self) -> bool {
        self.rng = self.rng_at_build.clone();
        self.sink = 0;
        self.total_reads = 0;
        self.packets = 0;
        true
    }

    fn counters(&self) -> Counters {
        let mut c = Counters::new();
        c.count("packets", self.packets)
            .count("reads", self.total_reads)
            .count("sink", self.sink & 0xFFFF_FFFF);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_is_deterministic_and_nonzero() {
        let mut a = XorShift64::new(1);
        let mut b = XorShift64::new(1);
        for _ in 0..1000 {
            let x = a.next_u64();
            assert_ne!(x, 0);
            assert_eq!(x, b.next_u64());
        }
        assert_ne!(XorShift64::new(0).next_u64(), 0);
    }

    #[test]
    fn reads_are_counted_and_change_the_sink() {
        let mut wp = WorkPackage::new(
            &WorkPackageConfig {
                reads: 3,
                size_mib: 1,
                seed: 5,
            },
            0,
        )
        .unwrap();
        assert_eq!(wp.buf.len(), 131072);
        let f = dataplane::testkit::PacketFactory::new(dataplane::DatapathMode::Host, 64, 256, 8);
        let mut b = f.burst(&vec![vec![0u8; 60]; 6]);
        b.drop_packet(5, dataplane::DropReason::POLICY);
        wp.process(&mut b, &NfContext::default());
        assert_eq!(wp.counters()["reads"], 15);
        assert_eq!(wp.counters()["packets"], 5);
        assert_ne!(wp.sink(), 0);
        assert_eq!(b.verdict(0), dataplane::Verdict::tx(0));
    }
}
