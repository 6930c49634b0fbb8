//! NF chains kept from one run to the next within a process.
//!
//! A benchmark runs one config many times: an RFC 2544 search on the virtual NIC
//! (`pktgen rfc2544 --dut <config>`, [`crate::dut::VnicDut`]) is dozens of trials, each a run.
//! Building every worker's chain for every trial allocates the NFs' tables again each time, and
//! a table of millions of flows is hundreds of MiB that the kernel maps and faults in again: with
//! `configs/nat.toml` (10 M flows) that was most of a search's time, spent in the kernel.
//! [`KeptChains`] builds the chains once and, before each later run of the same pipeline, resets
//! them ([`dataplane::NetworkFunction::reset`]: empty tables through a new generation, zero
//! counters), so every trial still starts from the state a fresh build gives: the same results,
//! byte for byte, as before (tests/pktgen_vnic.rs checks the JSON).
//!
//! A chain with a function that cannot reset itself is built again, so a new NF that does not
//! implement the hook is slow, never wrong. So is every chain of a run with a network layer
//! (ports with addresses, a `route` stage): its functions hold that run's network (routes,
//! neighbours, owned addresses), which the next run builds anew.

use std::path::Path;
use std::sync::Arc;

use dataplane::NfChain;
use dataplane::net::Network;

use crate::config::{ConfigError, RunConfig};

/// Each worker's NF chain of the last run, and what it was built from (see the module docs).
#[derive(Debug, Default)]
pub struct KeptChains {
    pipeline: Vec<toml::Table>,
    workers: u16,
    chains: Vec<NfChain>,
    /// The kept chains were built with a network (never reused).
    networked: bool,
    built: u64,
    reused: u64,
}

impl KeptChains {
    /// Nothing kept yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// One chain per worker for a run of `cfg` over network `net` (if the run has one): the
    /// kept ones, reset, when they were built from the same pipeline for the same number of
    /// workers without a network, else new ones. Errors name the pipeline entry that cannot be
    /// built.
    pub fn take(
        &mut self,
        cfg: &RunConfig,
        path: &Path,
        net: Option<&Arc<Network>>,
    ) -> Result<Vec<NfChain>, ConfigError> {
        let workers = cfg.run.workers;
        let mut kept = std::mem::take(&mut self.chains);
        if self.pipeline != cfg.pipeline
            || self.workers != workers
            || kept.len() != usize::from(workers)
            || self.networked
            || net.is_some()
        {
            kept.clear();
        }
        let mut chains = Vec::with_capacity(usize::from(workers));
        let mut kept = kept.into_iter();
        for w in 0..workers {
            let reset = kept.next().and_then(|mut c| c.reset().then_some(c));
            match reset {
                Some(c) => {
                    chains.push(c);
                    self.reused += 1;
                }
                None => {
                    chains.push(cfg.build_chain_on(path, w, workers, net.cloned())?);
                    self.built += 1;
                }
            }
        }
        self.pipeline = cfg.pipeline.clone();
        self.workers = workers;
        self.networked = net.is_some();
        Ok(chains)
    }

    /// Keeps the chains a run of `cfg` handed back (one per worker, in worker order) for the
    /// next [`KeptChains::take`].
    pub fn keep(&mut self, cfg: &RunConfig, chains: Vec<NfChain>) {
        self.pipeline = cfg.pipeline.clone();
        self.workers = cfg.run.workers;
        self.chains = chains;
    }

    /// Chains built so far (one per worker per build).
    pub fn built(&self) -> u64 {
        self.built
    }

    /// Chains reset and used again so far.
    pub fn reused(&self) -> u64 {
        self.reused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> RunConfig {
        RunConfig::from_table(Path::new("t.toml"), text.parse().unwrap()).unwrap()
    }

    #[test]
    fn chains_are_reused_only_for_the_pipeline_and_workers_they_were_built_for() {
        let p = Path::new("t.toml");
        let nat = "[[pipeline]]\nname = \"nat\"\nflows = 64\n";
        let a = cfg(nat);
        let mut k = KeptChains::new();
        let chains = k.take(&a, p, None).unwrap();
        assert_eq!((chains.len(), k.built(), k.reused()), (1, 1, 0));
        // Nothing kept: built again.
        let chains = k.take(&a, p, None).unwrap();
        assert_eq!((k.built(), k.reused()), (2, 0));
        k.keep(&a, chains);
        let chains = k.take(&a, p, None).unwrap();
        assert_eq!((k.built(), k.reused()), (2, 1));
        k.keep(&a, chains);
        // Another parameter, or another number of workers: built anew.
        let b = cfg(&nat.replace("64", "128"));
        let chains = k.take(&b, p, None).unwrap();
        assert_eq!((k.built(), k.reused()), (3, 1));
        k.keep(&b, chains);
        let two = cfg(&format!("[run]\nworkers = 2\n{}", nat.replace("64", "128")));
        let chains = k.take(&two, p, None).unwrap();
        assert_eq!((chains.len(), k.built(), k.reused()), (2, 5, 1));
        k.keep(&two, chains);
        // A run with a network: its chains hold that network, so they are built for it and
        // never reused, also by the next run without one.
        let port = dataplane::net::PortAddr {
            name: "p0".into(),
            mac: dataplane::net::MacAddr([2, 0, 0, 0, 0, 1]),
            ip: Some("192.0.2.1/24".parse().unwrap()),
        };
        let net = two
            .network(p, vec![port])
            .unwrap()
            .expect("an addressed port");
        let chains = k.take(&two, p, Some(&net)).unwrap();
        assert_eq!((chains.len(), k.built(), k.reused()), (2, 7, 1));
        k.keep(&two, chains);
        let chains = k.take(&two, p, Some(&net)).unwrap();
        assert_eq!((k.built(), k.reused()), (9, 1));
        k.keep(&two, chains);
        let chains = k.take(&two, p, None).unwrap();
        assert_eq!((k.built(), k.reused()), (11, 1));
        k.keep(&two, chains);
        let _ = k.take(&two, p, None).unwrap();
        assert_eq!(
            (k.built(), k.reused()),
            (11, 3),
            "without a network: reused again"
        );
        // A pipeline that cannot be built fails naming its entry.
        let bad = cfg("[[pipeline]]\nname = \"nat\"\nflows = 0\n");
        let e = k.take(&bad, p, None).unwrap_err();
        assert_eq!(e.key, "pipeline[0]", "{e}");
    }
}
