//! The network-function interface.
//!
//! A network function processes a burst of packets in place: it walks the burst's header segments
//! ([`crate::Burst::header_mut`]), rewrites them, and sets a verdict per packet. State is per core
//! (shared-nothing): the run loop builds one instance of each function per worker, and RSS keeps a
//! flow on one worker. The same chain runs unchanged on every driver and in every datapath mode.

use std::borrow::Cow;

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
    /// The name its counters are reported under (`nfs.<name>.*` in the run summary).
    fn name(&self) -> &str;

    /// Processes a burst in place. Packets whose verdict is already a drop must be left alone.
    fn process(&mut self, burst: &mut Burst, ctx: &NfContext);

    /// Counters for the run summary (merged across workers with [`Counters::merge`]).
    fn counters(&self) -> Counters {
        Counters::new()
    }

    /// Called once when the run ends (after the last burst), e.g. to write a flow dump. An error
    /// says what the function could not do (an output it could not write): the run's results
    /// are then incomplete, and the run fails with it.
    fn finish(&mut self, _ctx: &NfContext) -> Result<(), String> {
        Ok(())
    }

    /// Returns this instance to the state it was built in, cheaply: empty tables, zero counters,
    /// the random state it started with. A benchmark that runs many independent trials (an
    /// RFC 2544 search) then keeps its instances and resets them between trials instead of
    /// building new ones, so large tables are allocated and faulted in once per process, not
    /// once per trial.
    ///
    /// Returns `true` when the instance now behaves exactly as a freshly built one would (same
    /// output, same counters, for the same input). The default returns `false` and resets
    /// nothing: the caller then builds a fresh instance, which is always correct, only slower.
    fn reset(&mut self) -> bool {
        false
    }

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

    /// True while the function has work that must be done within a bounded time even when no
    /// packet arrives (a NAT's event records waiting to be sent to the collector): the run loop
    /// then calls [`NetworkFunction::release`] on idle iterations as it does for held packets.
    /// Asked once per loop iteration, never per packet.
    fn wants_release(&self) -> bool {
        false
    }

    /// False when [`NetworkFunction::wants_release`] says no for every state this instance
    /// can reach: asked once, when the function joins a chain, so a chain of such functions
    /// does not ask [`NetworkFunction::wants_release`] after every burst. The default, `true`,
    /// is always correct.
    fn may_want_release(&self) -> bool {
        true
    }

    /// Answers an operator's command between two bursts (the telemetry socket and `dataplane
    /// ctl` send it to every worker's instance through the worker's mailbox,
    /// [`crate::control`]): a query (`backends`, `sessions`) or a change (`drain`, `weight`),
    /// with its arguments as text. The reply is counters (often [`CounterValue::Rows`], one row
    /// per backend or session); an error says what is wrong and what is allowed. Runs on the
    /// worker's thread, so it may read and change the instance's state without locks; it may
    /// allocate (it is not the per-packet path). Functions without commands refuse every one.
    fn control(&mut self, cmd: &NfCommand, _ctx: &NfContext) -> Result<Counters, String> {
        Err(format!(
            "`{}` takes no commands (asked `{}`)",
            self.name(),
            cmd.verb
        ))
    }

    /// Flow steering this instance needs when it runs on Rx queue (worker) `queue`: frames it
    /// must see that RSS would send elsewhere (e.g. a NAT's return traffic to its own port
    /// slice). Ports that steer install them before traffic starts ([`crate::steer`]).
    fn steering_rules(&self, _queue: u16) -> Vec<crate::steer::SteerRule> {
        Vec::new()
    }

    /// Addresses this function answers for on the wire (a NAT's outside address, a load
    /// balancer's VIP): the ports answer ARP for them and announce them at start
    /// ([`crate::net`]). Each with the port it is owned on, or `None` for every port whose
    /// subnet holds it.
    fn owned_addresses(&self) -> Vec<(std::net::Ipv4Addr, Option<u16>)> {
        Vec::new()
    }
}

/// An operator's command to a network function (see [`NetworkFunction::control`]): a verb and
/// its arguments, as the telemetry command gave them (`/nmdp/lb/drain,10.180.250.6` is verb
/// `drain`, argument `10.180.250.6`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NfCommand {
    /// What to do (`backends`, `drain`, `sessions`, ...).
    pub verb: String,
    /// Its arguments, in order.
    pub args: Vec<String>,
}

impl NfCommand {
    /// A command `verb` with `args`.
    pub fn new(verb: impl Into<String>, args: &[&str]) -> Self {
        Self {
            verb: verb.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }
}

/// A chain of network functions applied in order.
#[derive(Default)]
pub struct NfChain {
    nfs: Vec<Box<dyn NetworkFunction>>,
    /// Some function may hold packets (see [`NfChain::may_hold`]).
    holding: bool,
    /// Some function may want a release ([`NetworkFunction::may_want_release`]); when none
    /// does, [`NfChain::process`] does not ask them.
    asks_release: bool,
}

/// The functions' names in order.
impl std::fmt::Debug for NfChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.nfs.iter().map(|nf| nf.name()))
            .finish()
    }
}

impl NfChain {
    /// An empty chain (forwards everything unchanged).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a function.
    pub fn push(&mut self, nf: Box<dyn NetworkFunction>) {
        self.asks_release |= nf.may_want_release();
        self.nfs.push(nf);
    }

    /// The functions in order.
    pub fn functions(&self) -> &[Box<dyn NetworkFunction>] {
        &self.nfs
    }

    /// Mutable access to the functions in order. (A caller may make one hold packets through
    /// it, so [`NfChain::may_hold`] says yes until the next [`NfChain::release`].)
    pub fn functions_mut(&mut self) -> &mut [Box<dyn NetworkFunction>] {
        // The caller may also put another function in a slot: from now on every one is asked.
        self.holding = true;
        self.asks_release = true;
        &mut self.nfs
    }

    /// Runs every function over the burst.
    #[inline]
    pub fn process(&mut self, burst: &mut Burst, ctx: &NfContext) {
        let n = burst.len();
        // A function holds packets only by taking them out of a burst (`Burst::remove_to`); one
        // with work pending after the burst (a log to flush) says so through `wants_release`,
        // asked once per burst and function (and not at all when none may want one,
        // `may_want_release`), never per packet or per idle iteration. A chain of one function
        // (the common case) is run without a loop.
        if let [nf] = &mut self.nfs[..] {
            nf.process(burst, ctx);
            // Written only when it turns true (no store per burst while nothing is held).
            if !self.holding && (burst.len() < n || (self.asks_release && nf.wants_release())) {
                self.holding = true;
            }
            return;
        }
        for nf in &mut self.nfs {
            nf.process(burst, ctx);
        }
        if !self.holding {
            self.holding = burst.len() < n
                || (self.asks_release && self.nfs.iter().any(|nf| nf.wants_release()));
        }
    }

    /// False when no function holds a packet or wants a release, known without asking each
    /// one: the run loop's per-iteration test. Set when a burst came out of
    /// [`NfChain::process`] shorter than it went in (a function took packets out) or a function
    /// wants [`NetworkFunction::release`] called after it ([`NetworkFunction::wants_release`]),
    /// cleared by the [`NfChain::release`] that leaves nothing held or wanted. True does not
    /// mean a packet is held ([`NfChain::held`] counts them).
    #[inline]
    pub fn may_hold(&self) -> bool {
        self.holding
    }

    /// Resets every function ([`NetworkFunction::reset`]); `true` when all of them are now as
    /// built, `false` when one cannot reset itself or still holds packets (the chain must then
    /// be built again: a held packet belongs to the run that received it).
    pub fn reset(&mut self) -> bool {
        // Every function is reset, also after one that cannot be.
        let mut all = self.nfs.iter().map(|nf| nf.held()).sum::<usize>() == 0;
        for nf in &mut self.nfs {
            all &= nf.reset();
        }
        all
    }

    /// Packets held back by the chain's functions (see [`NetworkFunction::held`]), plus one per
    /// function that wants [`NetworkFunction::release`] called without traffic
    /// ([`NetworkFunction::wants_release`]): the run loop calls [`NfChain::release`] while this
    /// is not zero.
    pub fn held(&self) -> usize {
        self.nfs
            .iter()
            .map(|nf| nf.held() + usize::from(nf.wants_release()))
            .sum()
    }

    /// Lets the first function that has held packets ready release them into `out` (see
    /// [`NetworkFunction::release`]) and runs the functions after it over them; `out` is empty
    /// afterwards when no function released anything.
    pub fn release(&mut self, out: &mut Burst, ctx: &NfContext, flush: bool) {
        for k in 0..self.nfs.len() {
            if self.nfs[k].held() == 0 && !self.nfs[k].wants_release() {
                continue;
            }
            self.nfs[k].release(out, ctx, flush);
            if !out.is_empty() {
                for nf in &mut self.nfs[k + 1..] {
                    nf.process(out, ctx);
                }
                break;
            }
        }
        self.holding = self.held() > 0;
    }

    /// The addresses every function owns (see [`NetworkFunction::owned_addresses`]).
    pub fn owned_addresses(&self) -> Vec<(std::net::Ipv4Addr, Option<u16>)> {
        self.nfs
            .iter()
            .flat_map(|nf| nf.owned_addresses())
            .collect()
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

/// One counter of a network function (see [`Counters`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CounterValue {
    /// A count or a sum that only grows: workers' values add up (a Prometheus counter).
    Count(u64),
    /// A level that rises and falls (active flows, ports in use): workers' values add up (a
    /// Prometheus gauge).
    Gauge(u64),
    /// A setting every worker holds the same copy of (a backend's weight): the first worker's
    /// is kept (a Prometheus gauge).
    Setting(u64),
    /// Counts per item (e.g. per backend): workers' values add up element-wise.
    Counts(Vec<u64>),
    /// Named counters under one name (e.g. drops by reason).
    Group(Counters),
    /// A table: one row of counters per item (backend, session), the item's key in the
    /// column named `label` (`backend`, the Prometheus label of the rows). Workers' rows with
    /// the same key merge; the others are appended in order.
    Rows {
        /// What the key of a row is (`backend`, `address`, `session`).
        label: Cow<'static, str>,
        /// `(key, counters)` per item, in order.
        rows: Vec<(String, Counters)>,
    },
    /// A text, such as the error of an output the function failed to write: the first worker's
    /// is kept.
    Text(String),
}

impl CounterValue {
    /// The number, if this is one (a count, a gauge or a setting).
    pub fn as_count(&self) -> Option<u64> {
        match self {
            CounterValue::Count(n) | CounterValue::Gauge(n) | CounterValue::Setting(n) => Some(*n),
            _ => None,
        }
    }

    /// The rows, if this is a table.
    pub fn as_rows(&self) -> Option<&[(String, Counters)]> {
        match self {
            CounterValue::Rows { rows, .. } => Some(rows),
            _ => None,
        }
    }

    /// The counts per item, if these are.
    pub fn as_counts(&self) -> Option<&[u64]> {
        match self {
            CounterValue::Counts(v) => Some(v),
            _ => None,
        }
    }

    /// The text, if this is one.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            CounterValue::Text(s) => Some(s),
            _ => None,
        }
    }

    fn merge(&mut self, other: &CounterValue) {
        match (self, other) {
            (CounterValue::Count(a), CounterValue::Count(b))
            | (CounterValue::Gauge(a), CounterValue::Gauge(b)) => *a += b,
            (CounterValue::Rows { rows: a, .. }, CounterValue::Rows { rows: b, .. }) => {
                for (key, c) in b {
                    match a.iter_mut().find(|(k, _)| k == key) {
                        Some((_, mine)) => mine.merge(c),
                        None => a.push((key.clone(), c.clone())),
                    }
                }
            }
            (CounterValue::Counts(a), CounterValue::Counts(b)) => {
                if a.len() < b.len() {
                    a.resize(b.len(), 0);
                }
                for (x, y) in a.iter_mut().zip(b) {
                    *x += y;
                }
            }
            (CounterValue::Group(a), CounterValue::Group(b)) => a.merge(b),
            _ => {}
        }
    }
}

impl PartialEq<u64> for CounterValue {
    fn eq(&self, other: &u64) -> bool {
        self.as_count() == Some(*other)
    }
}

/// `value["name"]`: the counter `name` of a group (panics when this is not a group holding it,
/// like a missing map key; use [`Counters::get`] to ask).
impl std::ops::Index<&str> for CounterValue {
    type Output = CounterValue;
    fn index(&self, name: &str) -> &CounterValue {
        match self {
            CounterValue::Group(g) => &g[name],
            other => panic!("counter `{name}` asked of {other:?}, which is not a group"),
        }
    }
}

/// A network function's counters: names and typed values, in the order the function reports
/// them. Workers' counters of the same function merge with [`Counters::merge`]; the run's
/// summary prints them under `nfs.<name>` (a count as a number, counts as an array, a group as
/// an object, a text as a string).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters(Vec<(Cow<'static, str>, CounterValue)>);

impl Counters {
    /// No counters.
    pub fn new() -> Self {
        Self::default()
    }

    fn put(&mut self, name: Cow<'static, str>, v: CounterValue) -> &mut Self {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, old)) => *old = v,
            None => self.0.push((name, v)),
        }
        self
    }

    /// Sets the count `name`.
    pub fn count(&mut self, name: impl Into<Cow<'static, str>>, v: u64) -> &mut Self {
        self.put(name.into(), CounterValue::Count(v))
    }

    /// Sets the gauge `name` (a level that rises and falls).
    pub fn gauge(&mut self, name: impl Into<Cow<'static, str>>, v: u64) -> &mut Self {
        self.put(name.into(), CounterValue::Gauge(v))
    }

    /// Sets the setting `name` (the same on every worker).
    pub fn setting(&mut self, name: impl Into<Cow<'static, str>>, v: u64) -> &mut Self {
        self.put(name.into(), CounterValue::Setting(v))
    }

    /// Sets the table `name`: one row per item, keyed in column `label`.
    pub fn rows(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        label: impl Into<Cow<'static, str>>,
        rows: Vec<(String, Counters)>,
    ) -> &mut Self {
        self.put(
            name.into(),
            CounterValue::Rows {
                label: label.into(),
                rows,
            },
        )
    }

    /// Sets the counts per item `name`.
    pub fn counts(&mut self, name: impl Into<Cow<'static, str>>, v: Vec<u64>) -> &mut Self {
        self.put(name.into(), CounterValue::Counts(v))
    }

    /// Sets the group `name`.
    pub fn group(&mut self, name: impl Into<Cow<'static, str>>, g: Counters) -> &mut Self {
        self.put(name.into(), CounterValue::Group(g))
    }

    /// Sets the text `name`.
    pub fn text(&mut self, name: impl Into<Cow<'static, str>>, s: impl Into<String>) -> &mut Self {
        self.put(name.into(), CounterValue::Text(s.into()))
    }

    /// The counter at a dotted path (`"drops.no_mapping"`), if there is one. In a table the
    /// step after its name is a row's key, which may itself hold dots (an address): the longest
    /// key that fits is taken.
    pub fn get(&self, path: &str) -> Option<&CounterValue> {
        let (head, rest) = match path.split_once('.') {
            Some((h, r)) => (h, Some(r)),
            None => (path, None),
        };
        let v = self.0.iter().find(|(n, _)| n == head).map(|(_, v)| v)?;
        match (rest, v) {
            (None, v) => Some(v),
            (Some(r), CounterValue::Group(g)) => g.get(r),
            (Some(r), CounterValue::Rows { rows, .. }) => rows
                .iter()
                .filter_map(|(k, c)| {
                    let tail = r.strip_prefix(k.as_str())?.strip_prefix('.')?;
                    Some((k.len(), c.get(tail)?))
                })
                .max_by_key(|(n, _)| *n)
                .map(|(_, v)| v),
            (Some(_), _) => None,
        }
    }

    /// The count at a dotted path, if there is one.
    pub fn count_at(&self, path: &str) -> Option<u64> {
        self.get(path)?.as_count()
    }

    /// The counters in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &CounterValue)> {
        self.0.iter().map(|(n, v)| (n.as_ref(), v))
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds another worker's counters of the same function: counts add, counts per item add
    /// element-wise, groups merge, texts keep the first; names only `other` has are appended.
    pub fn merge(&mut self, other: &Counters) {
        for (name, v) in &other.0 {
            match self.0.iter_mut().find(|(n, _)| n == name) {
                Some((_, mine)) => mine.merge(v),
                None => self.0.push((name.clone(), v.clone())),
            }
        }
    }
}

/// A count, gauge or setting as a number, counts as a sequence, a group as a map, a table as a
/// map from each row's key to its counters, a text as a string (the run summary's JSON).
impl serde::Serialize for CounterValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CounterValue::Count(n) | CounterValue::Gauge(n) | CounterValue::Setting(n) => {
                s.serialize_u64(*n)
            }
            CounterValue::Counts(v) => v.serialize(s),
            CounterValue::Group(g) => g.serialize(s),
            CounterValue::Rows { rows, .. } => {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(rows.len()))?;
                for (k, c) in rows {
                    m.serialize_entry(k, c)?;
                }
                m.end()
            }
            CounterValue::Text(t) => s.serialize_str(t),
        }
    }
}

/// `name=value` pairs in order, groups in braces, counts per item and tables in brackets (for
/// messages).
impl std::fmt::Display for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (n, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            match v {
                CounterValue::Count(c) | CounterValue::Gauge(c) | CounterValue::Setting(c) => {
                    write!(f, "{n}={c}")?
                }
                CounterValue::Rows { rows, .. } => {
                    write!(f, "{n}=[")?;
                    for (i, (k, c)) in rows.iter().enumerate() {
                        if i > 0 {
                            f.write_str(" ")?;
                        }
                        write!(f, "{k}:{{{c}}}")?;
                    }
                    f.write_str("]")?;
                }
                CounterValue::Counts(c) => write!(f, "{n}={c:?}")?,
                CounterValue::Group(g) => write!(f, "{n}={{{g}}}")?,
                CounterValue::Text(t) => write!(f, "{n}={t:?}")?,
            }
        }
        Ok(())
    }
}

/// A map from names to values, in order.
impl serde::Serialize for Counters {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (n, v) in &self.0 {
            m.serialize_entry(n, v)?;
        }
        m.end()
    }
}

/// `counters["name"]`: the counter `name` (panics when there is none, like a missing map key;
/// use [`Counters::get`] to ask).
impl std::ops::Index<&str> for Counters {
    type Output = CounterValue;
    fn index(&self, name: &str) -> &CounterValue {
        self.get(name)
            .unwrap_or_else(|| panic!("no counter `{name}` in {self:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::DatapathMode;
    use crate::testkit::PacketFactory;
    use crate::verdict::{DropReason, Verdict};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
        fn counters(&self) -> Counters {
            let mut c = Counters::new();
            c.count("seen", self.0 as u64);
            c
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
        assert!(!chain.may_hold());
        chain.process(&mut b, &ctx(0));
        assert_eq!((b.len(), chain.held()), (2, 1));
        assert!(
            chain.may_hold(),
            "a function took a packet out of the burst"
        );
        let mut out = Burst::with_capacity(4);
        chain.release(&mut out, &ctx(5), false);
        assert!(out.is_empty(), "not ready yet");
        assert!(chain.may_hold(), "still held");
        chain.release(&mut out, &ctx(10), false);
        assert_eq!((out.len(), chain.held()), (1, 0));
        assert!(!chain.may_hold(), "nothing held after the release");
        assert_eq!(out.verdict(0), Verdict::tx(0));
        assert_eq!(
            chain.functions()[1].counters()["seen"],
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

    /// Has work pending until its release is called at `now_ns >= 10` (a log waiting to be sent).
    struct Pending(bool);

    impl NetworkFunction for Pending {
        fn name(&self) -> &str {
            "pending"
        }
        fn process(&mut self, _: &mut Burst, _: &NfContext) {
            self.0 = true;
        }
        fn wants_release(&self) -> bool {
            self.0
        }
        fn release(&mut self, _out: &mut Burst, ctx: &NfContext, flush: bool) {
            if flush || ctx.now_ns >= 10 {
                self.0 = false;
            }
        }
        fn reset(&mut self) -> bool {
            true
        }
    }

    /// Counts how often it is asked whether it wants a release (never says yes); says it never
    /// may when `never`.
    struct Asked {
        asks: Arc<AtomicUsize>,
        never: bool,
    }

    impl NetworkFunction for Asked {
        fn name(&self) -> &str {
            "asked"
        }
        fn process(&mut self, _: &mut Burst, _: &NfContext) {}
        fn wants_release(&self) -> bool {
            self.asks.fetch_add(1, Ordering::Relaxed);
            false
        }
        fn may_want_release(&self) -> bool {
            !self.never
        }
    }

    #[test]
    fn functions_that_never_want_a_release_are_not_asked_after_a_burst() {
        let asks = Arc::new(AtomicUsize::new(0));
        let ctx = NfContext::default();
        let mut b = Burst::with_capacity(4);
        let chain_of = |never: bool| {
            let mut c = NfChain::new();
            c.push(Box::new(Asked {
                asks: asks.clone(),
                never,
            }));
            c
        };
        let mut never = chain_of(true);
        never.process(&mut b, &ctx);
        assert_eq!(asks.load(Ordering::Relaxed), 0, "not asked");
        assert!(!never.may_hold());
        let mut maybe = chain_of(false);
        maybe.process(&mut b, &ctx);
        assert_eq!(asks.load(Ordering::Relaxed), 1, "the default is asked");
        // A slot may be given another function through `functions_mut`: from then on every
        // function is asked.
        never.functions_mut();
        let mut out = Burst::with_capacity(4);
        never.release(&mut out, &ctx, false);
        assert!(!never.may_hold());
        let before = asks.load(Ordering::Relaxed);
        never.process(&mut b, &ctx);
        assert_eq!(asks.load(Ordering::Relaxed), before + 1, "asked again");
    }

    #[test]
    fn a_function_with_pending_work_is_released_without_traffic_and_still_resets() {
        let mut chain = NfChain::new();
        chain.push(Box::new(Count(0)));
        chain.push(Box::new(Pending(false)));
        assert_eq!(chain.held(), 0);
        let ctx = |now_ns| NfContext {
            now_ns,
            ..NfContext::default()
        };
        let mut b = Burst::with_capacity(4);
        chain.process(&mut b, &ctx(0));
        assert_eq!(chain.held(), 1, "the run loop keeps calling release");
        assert!(
            chain.may_hold(),
            "the run loop's one-flag test sees the pending work"
        );
        let mut out = Burst::with_capacity(4);
        chain.release(&mut out, &ctx(5), false);
        assert!(out.is_empty());
        assert_eq!(chain.held(), 1);
        assert!(chain.may_hold());
        chain.release(&mut out, &ctx(10), false);
        assert_eq!(chain.held(), 0);
        assert!(!chain.may_hold());
        let mut alone = NfChain::new();
        alone.push(Box::new(Pending(false)));
        alone.process(&mut b, &ctx(20));
        assert_eq!(alone.held(), 1);
        assert!(
            alone.reset(),
            "pending work holds no packet: the chain still resets"
        );
    }

    /// Counts its resets; resets itself only when told it can.
    struct Resettable {
        can: bool,
        resets: std::sync::Arc<std::sync::atomic::AtomicU32>,
    }

    impl NetworkFunction for Resettable {
        fn name(&self) -> &str {
            "resettable"
        }
        fn process(&mut self, _: &mut Burst, _: &NfContext) {}
        fn reset(&mut self) -> bool {
            self.resets
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.can
        }
    }

    /// Plain stateless function that keeps the default hook.
    struct NoReset;

    impl NetworkFunction for NoReset {
        fn name(&self) -> &str {
            "no_reset"
        }
        fn process(&mut self, _: &mut Burst, _: &NfContext) {}
    }

    #[test]
    fn a_chain_resets_when_every_function_does() {
        let resets = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let nf = |can| {
            Box::new(Resettable {
                can,
                resets: resets.clone(),
            })
        };
        let mut chain = NfChain::new();
        chain.push(nf(true));
        chain.push(nf(true));
        assert!(chain.reset());
        assert_eq!(format!("{chain:?}"), r#"["resettable", "resettable"]"#);
        // One that cannot (the default) makes the chain ask to be built again, and the others
        // are still reset.
        chain.push(Box::new(NoReset));
        chain.push(nf(true));
        assert!(!chain.reset());
        assert_eq!(resets.load(std::sync::atomic::Ordering::Relaxed), 5);
    }

    #[test]
    fn merge_adds_counts_and_lists_and_keeps_the_first_text() {
        let mut drops = Counters::new();
        drops.count("truncated", 1);
        let mut a = Counters::new();
        a.count("x", 1)
            .counts("v", vec![1, 2])
            .group("drops", drops)
            .text("err", "first");
        let mut drops = Counters::new();
        drops.count("truncated", 2).count("own", 1);
        let mut b = Counters::new();
        b.count("x", 2)
            .counts("v", vec![1, 2, 3])
            .group("drops", drops)
            .text("err", "second")
            .count("only_b", 7);
        a.merge(&b);
        assert_eq!(a["x"], 3);
        assert_eq!(a["v"], CounterValue::Counts(vec![2, 4, 3]));
        assert_eq!(a["drops"]["truncated"], 3);
        assert_eq!(a.count_at("drops.own"), Some(1));
        assert_eq!(a["err"].as_text(), Some("first"));
        assert_eq!(a["only_b"], 7);
        assert!(a.get("drops.nothing").is_none() && a.get("x.y").is_none());
        let names: Vec<&str> = a.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["x", "v", "drops", "err", "only_b"]);
    }

    /// Gauges add up over workers, settings keep the first worker's, and table rows merge by
    /// key; a row's key may hold dots.
    #[test]
    fn gauges_settings_and_rows_merge_as_documented() {
        let row = |p: u64, w: u64| {
            let mut c = Counters::new();
            c.count("packets", p).setting("weight", w).gauge("flows", 1);
            c
        };
        let mut a = Counters::new();
        a.gauge("active", 5).setting("size", 64).rows(
            "backends",
            "backend",
            vec![
                ("10.0.0.1".into(), row(1, 3)),
                ("10.0.0.2".into(), row(2, 1)),
            ],
        );
        let mut b = Counters::new();
        b.gauge("active", 2).setting("size", 64).rows(
            "backends",
            "backend",
            vec![
                ("10.0.0.2".into(), row(5, 1)),
                ("10.0.0.3".into(), row(7, 1)),
            ],
        );
        a.merge(&b);
        assert_eq!(a["active"], 7);
        assert_eq!(a["size"], 64);
        assert_eq!(a.count_at("backends.10.0.0.2.packets"), Some(7));
        assert_eq!(a.count_at("backends.10.0.0.2.weight"), Some(1));
        assert_eq!(a.count_at("backends.10.0.0.2.flows"), Some(2));
        assert_eq!(a.count_at("backends.10.0.0.1.weight"), Some(3));
        assert_eq!(a.count_at("backends.10.0.0.3.packets"), Some(7));
        let keys: Vec<&str> = a["backends"]
            .as_rows()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(keys, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["backends"]["10.0.0.3"]["packets"], 7);
        assert_eq!(json["active"], 7);
    }
}
