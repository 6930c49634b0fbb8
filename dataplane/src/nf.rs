//! The network-function interface.
//!
//! A network function processes a burst of packets in place: it walks the burst's header segments
//! ([`crate::Burst::header_mut`]), rewrites them, and sets a verdict per packet. State is per core
//! (shared-nothing): the run loop builds one instance of each function per worker, and RSS keeps a
//! flow on one worker. The same chain runs unchanged on every driver and in every datapath mode.

use crate::burst::Burst;

/// Context handed to every `process` call.
#[derive(Clone, Copy, Debug, Default)]
pub struct NfContext {
    /// Current time in ns (virtual time in deterministic runs, monotonic wall clock otherwise);
    /// used for flow expiry.
    pub now_ns: u64,
    /// Index of the worker (core) running this instance.
    pub worker: u16,
    /// Number of workers in the run.
    pub workers: u16,
}

/// One network function.
pub trait NetworkFunction: Send {
    /// Short name used in configs and as the counter prefix (`nfs.<name>.*`).
    fn name(&self) -> &str;

    /// Processes a burst in place. Packets whose verdict is already a drop must be left alone.
    fn process(&mut self, burst: &mut Burst, ctx: &NfContext);

    /// Counters for the run summary, as a JSON object (merged across workers by summing numbers
    /// and arrays element-wise).
    fn stats(&self) -> serde_json::Value {
        serde_json::Value::Object(Default::default())
    }

    /// Called once when the run ends (after the last burst), e.g. to write a flow dump.
    fn finish(&mut self, _ctx: &NfContext) {}

    /// Packets this instance has taken out of bursts ([`Burst::remove_to`]) and holds back, to
    /// give them back through [`NetworkFunction::release`] (e.g. IP fragments that arrived
    /// before the fragment carrying their ports). 0 for functions that never hold packets.
    fn held(&self) -> usize {
        0
    }

    /// Moves held packets that are ready to go (or, with `flush`, every held packet) to the end
    /// of `out`, each with its verdict: `Tx` when it was processed, a drop with the reason when
    /// it was given up (a timeout, or `flush` at the end of the run). Never more than `out` has
    /// room for. The run loop calls it while [`NetworkFunction::held`] is not zero, runs the
    /// functions after this one over `out` and sends it like a received burst, so held packets
    /// are counted (sent or dropped by reason) like every other packet.
    fn release(&mut self, _out: &mut Burst, _ctx: &NfContext, _flush: bool) {}

    /// Flow steering this instance needs when it runs on Rx queue (worker) `queue`: frames it
    /// must see that RSS would send elsewhere (e.g. a NAT's return traffic to its own port
    /// slice). Ports that steer install them before traffic starts ([`crate::steer`]).
    fn steering_rules(&self, _queue: u16) -> Vec<crate::steer::SteerRule> {
        Vec::new()
    }
}

/// A chain of network functions applied in order.
#[derive(Default)]
pub struct NfChain {
    nfs: Vec<Box<dyn NetworkFunction>>,
}

impl NfChain {
    /// An empty chain (forwards everything unchanged).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a function.
    pub fn push(&mut self, nf: Box<dyn NetworkFunction>) {
        self.nfs.push(nf);
    }

    /// The functions in order.
    pub fn functions(&self) -> &[Box<dyn NetworkFunction>] {
        &self.nfs
    }

    /// Mutable access to the functions in order.
    pub fn functions_mut(&mut self) -> &mut [Box<dyn NetworkFunction>] {
        &mut self.nfs
    }

    /// Runs every function over the burst.
    #[inline]
    pub fn process(&mut self, burst: &mut Burst, ctx: &NfContext) {
        for nf in &mut self.nfs {
            nf.process(burst, ctx);
        }
    }

    /// Packets held back by the chain's functions (see [`NetworkFunction::held`]).
    pub fn held(&self) -> usize {
        self.nfs.iter().map(|nf| nf.held()).sum()
    }

    /// Lets the first function that has held packets ready release them into `out` (see
    /// [`NetworkFunction::release`]) and runs the functions after it over them; `out` is empty
    /// afterwards when no function released anything.
    pub fn release(&mut self, out: &mut Burst, ctx: &NfContext, flush: bool) {
        for k in 0..self.nfs.len() {
            if self.nfs[k].held() == 0 {
                continue;
            }
            self.nfs[k].release(out, ctx, flush);
            if !out.is_empty() {
                for nf in &mut self.nfs[k + 1..] {
                    nf.process(out, ctx);
                }
                return;
            }
        }
    }

    /// The steering rules of every function for Rx queue `queue` (see
    /// [`NetworkFunction::steering_rules`]).
    pub fn steering_rules(&self, queue: u16) -> Vec<crate::steer::SteerRule> {
        self.nfs
            .iter()
            .flat_map(|nf| nf.steering_rules(queue))
            .collect()
    }
}

/// Merges NF counter objects from several workers: numbers add, arrays add element-wise, objects
/// merge recursively, anything else keeps the first value.
pub fn merge_stats(into: &mut serde_json::Value, from: &serde_json::Value) {
    use serde_json::Value;
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) => merge_stats(existing, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, v) in b.iter().enumerate() {
                match a.get_mut(i) {
                    Some(existing) => merge_stats(existing, v),
                    None => a.push(v.clone()),
                }
            }
        }
        (Value::Number(a), Value::Number(b)) => {
            if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
                *a = (x + y).into();
            } else if let (Some(x), Some(y)) = (a.as_f64(), b.as_f64())
                && let Some(n) = serde_json::Number::from_f64(x + y)
            {
                *a = n;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::DatapathMode;
    use crate::testkit::PacketFactory;
    use crate::verdict::{DropReason, Verdict};
    use serde_json::json;

    /// Holds the first packet of every burst; releases at `now_ns >= 10`, drops on a flush.
    struct HoldFirst(Burst);

    impl NetworkFunction for HoldFirst {
        fn name(&self) -> &str {
            "hold_first"
        }
        fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
            if !burst.is_empty() {
                assert!(burst.remove_to(0, &mut self.0));
            }
        }
        fn held(&self) -> usize {
            self.0.len()
        }
        fn release(&mut self, out: &mut Burst, ctx: &NfContext, flush: bool) {
            while !self.0.is_empty() && out.room() > 0 && (flush || ctx.now_ns >= 10) {
                if flush {
                    self.0.set_verdict(0, Verdict::drop(DropReason::POLICY));
                }
                assert!(self.0.remove_to(0, out));
            }
        }
    }

    /// Counts the packets it sees.
    struct Count(usize);

    impl NetworkFunction for Count {
        fn name(&self) -> &str {
            "count"
        }
        fn process(&mut self, burst: &mut Burst, _ctx: &NfContext) {
            self.0 += burst.len();
        }
        fn stats(&self) -> serde_json::Value {
            json!({ "seen": self.0 })
        }
    }

    #[test]
    fn released_packets_run_through_the_rest_of_the_chain() {
        let f = PacketFactory::new(DatapathMode::Split, 64, 1514, 8);
        let mut chain = NfChain::new();
        chain.push(Box::new(HoldFirst(Burst::with_capacity(4))));
        chain.push(Box::new(Count(0)));
        let ctx = |now_ns| NfContext {
            now_ns,
            ..NfContext::default()
        };
        let mut b = f.burst(&vec![vec![1u8; 100]; 3]);
        chain.process(&mut b, &ctx(0));
        assert_eq!((b.len(), chain.held()), (2, 1));
        let mut out = Burst::with_capacity(4);
        chain.release(&mut out, &ctx(5), false);
        assert!(out.is_empty(), "not ready yet");
        chain.release(&mut out, &ctx(10), false);
        assert_eq!((out.len(), chain.held()), (1, 0));
        assert_eq!(out.verdict(0), Verdict::tx(0));
        assert_eq!(
            chain.functions()[1].stats()["seen"],
            3,
            "the released packet too"
        );
        // A flush gives up what is held, with a drop verdict.
        let mut b2 = f.burst(&[vec![2u8; 80]]);
        chain.process(&mut b2, &ctx(20));
        let mut gone = Burst::with_capacity(4);
        chain.release(&mut gone, &ctx(20), true);
        assert_eq!(gone.verdict(0), Verdict::drop(DropReason::POLICY));
        drop((b, b2, out, gone, chain));
        assert_eq!(f.in_use(), 0, "no packet lost");
    }

    #[test]
    fn merge_adds_numbers_and_arrays() {
        let mut a = json!({"x": 1, "v": [1, 2], "o": {"y": 2}});
        merge_stats(
            &mut a,
            &json!({"x": 2, "v": [1, 2, 3], "o": {"y": 3, "z": 1}}),
        );
        assert_eq!(a, json!({"x": 3, "v": [2, 4, 3], "o": {"y": 5, "z": 1}}));
    }
}
