//! Timing primitives: busy-until resource timelines in integer picoseconds, the DMA-read model
//! with an outstanding-read cap, utilisation over an interval and a bottleneck picker.
//!
//! Sources: `docs/reference/pcie-nic-model.md` §9.2–9.3 (one busy-until time per resource:
//! `start = max(ready, free); free = start + bytes·ps_per_byte; done = free + latency`; reads
//! are an MRd on the up timeline, RTT0 plus adders, then CplD on the down timeline, with
//! outstanding reads capped by a ring of completion times, i.e. Little's law), §2.1 (RTT model
//! `RTT(n) = RTT0 + ser_up(Rq(n)) + ser_down(Rc(n)) + queueing`, posted writes visible after
//! ≈ RTT0/2) and §2.2 (tags).
//!
//! Exactness: a resource's cost per unit is a rational number of picoseconds (e.g. 8·10¹² /
//! 113 700 060 494 ps per byte). Busy-until times are kept as whole picoseconds plus a
//! remainder in units of the denominator,
//! so back-to-back reservations never accumulate rounding drift; times handed out are integer
//! picoseconds (end times rounded up). Everything is deterministic: same calls, same numbers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::Serialize;

use super::pcie::{PcieLink, Traffic};
use super::profile::HardwareProfile;

/// Time in picoseconds.
pub type Ps = u64;

/// Picoseconds per nanosecond.
pub const PS_PER_NS: Ps = 1_000;

/// Picoseconds per second.
pub const PS_PER_SEC: u128 = 1_000_000_000_000;

/// The cost of one unit (a byte or an operation) on a resource, as an exact fraction of a
/// picosecond: `num / den` ps per unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cost {
    num: u128,
    den: u128,
}

impl Cost {
    /// Takes no time (an unlimited resource).
    pub const FREE: Cost = Cost { num: 0, den: 1 };

    /// Bytes at `bits_per_sec`: `8·10¹² / bps` ps per byte; 0 bps = [`Cost::FREE`].
    pub fn per_byte_at_bps(bits_per_sec: u64) -> Self {
        if bits_per_sec == 0 {
            Cost::FREE
        } else {
            Cost {
                num: 8 * PS_PER_SEC,
                den: u128::from(bits_per_sec),
            }
        }
    }

    /// Bytes at `gbps` Gb/s (rounded to whole bits per second); ≤ 0 = [`Cost::FREE`].
    pub fn per_byte_at_gbps(gbps: f64) -> Self {
        Self::per_byte_at_bps(to_rate(gbps * 1e9))
    }

    /// Operations at `ops_per_sec` (rounded); ≤ 0 = [`Cost::FREE`].
    pub fn per_op_at_rate(ops_per_sec: f64) -> Self {
        match to_rate(ops_per_sec) {
            0 => Cost::FREE,
            r => Cost {
                num: PS_PER_SEC,
                den: u128::from(r),
            },
        }
    }

    /// A fixed `ps` per unit.
    pub fn ps_per_unit(ps: u64) -> Self {
        Cost {
            num: u128::from(ps),
            den: 1,
        }
    }

    /// Time for `units` units, rounded up to whole picoseconds.
    #[inline]
    pub fn time_ps(self, units: u64) -> Ps {
        // Fast path in u64 (a u128 division is a slow library call): units·num/den =
        // units·q + units·r/den with q, r the quotient and remainder of num/den.
        if let (Ok(num), Ok(den)) = (u64::try_from(self.num), u64::try_from(self.den)) {
            let (q, r) = (num / den, num % den);
            if let (Some(a), Some(b)) = (units.checked_mul(q), units.checked_mul(r)) {
                return a + b.div_ceil(den);
            }
        }
        ceil_div(u128::from(units) * self.num, self.den)
    }
}

fn to_rate(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        x.round() as u64
    } else {
        0
    }
}

fn ceil_div(a: u128, b: u128) -> Ps {
    Ps::try_from(a.div_ceil(b)).expect("time overflows u64 picoseconds")
}

/// One reservation on a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Reservation {
    /// When the resource started on this work (ps, rounded up, so a queued reservation never
    /// starts before its predecessor's `end`).
    pub start: Ps,
    /// When the resource became free again (ps, rounded up).
    pub end: Ps,
    /// When the work is complete at the far side: `end + latency`.
    pub done: Ps,
}

/// A single-server FIFO resource with a busy-until time (a PCIe direction, a wire direction,
/// the DMA engine, the nicmem port, host memory).
///
/// The busy-until time is kept exactly as whole picoseconds plus a remainder in units of
/// `1/den` ps, so back-to-back reservations never drift and a reservation costs one 64-bit
/// division (the per-unit cost is split into its whole and fractional picoseconds once).
#[derive(Clone, Debug)]
pub struct Resource {
    name: &'static str,
    cost: Cost,
    /// Whole picoseconds per unit.
    q: u64,
    /// Fractional picoseconds per unit × `den`.
    r: u64,
    /// Denominator of the per-unit cost (`cost.den`, which fits in 64 bits).
    den: u64,
    latency_ps: Ps,
    /// Busy-until time: `free_ps + free_rem / den` ps, `free_rem < den`.
    free_ps: Ps,
    free_rem: u64,
    /// Units booked so far (the busy time is `units × cost`, computed when asked).
    units: u64,
    reservations: u64,
}

impl Resource {
    /// A resource called `name` costing `cost` per unit, with `latency_ps` from the end of
    /// service to completion at the far side.
    pub fn new(name: &'static str, cost: Cost, latency_ps: Ps) -> Self {
        let den = u64::try_from(cost.den).expect("cost denominators are bit or op rates");
        let num = u64::try_from(cost.num).expect("cost numerators fit in 64 bits");
        Resource {
            name,
            cost,
            q: num / den,
            r: num % den,
            den,
            latency_ps,
            free_ps: 0,
            free_rem: 0,
            units: 0,
            reservations: 0,
        }
    }

    /// The resource's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Books `units` units of work that is ready at `ready`:
    /// `start = max(ready, free); free = start + units·cost; done = free + latency`.
    #[inline]
    pub fn reserve(&mut self, ready: Ps, units: u64) -> Reservation {
        let (start, end) = if self.r == 0 {
            // A whole number of picoseconds per unit: the remainder stays 0, so the busy-until
            // time is `free_ps` exactly.
            let start = ready.max(self.free_ps);
            let end = start + units * self.q;
            self.free_ps = end;
            (start, end)
        } else {
            self.reserve_fractional(ready, units)
        };
        self.units += units;
        self.reservations += 1;
        Reservation {
            start,
            end,
            done: end + self.latency_ps,
        }
    }

    /// [`Resource::reserve`]'s start and end for a cost with a fractional part.
    #[inline(always)]
    fn reserve_fractional(&mut self, ready: Ps, units: u64) -> (Ps, Ps) {
        let (mut ps, mut rem) = if ready >= self.free_at() {
            (ready, 0)
        } else {
            (self.free_ps, self.free_rem)
        };
        let start = ps + u64::from(rem > 0);
        match units.checked_mul(self.r) {
            Some(frac) => {
                let total = frac + rem;
                ps += units * self.q + total / self.den;
                rem = total % self.den;
            }
            None => {
                let total = u128::from(units) * u128::from(self.r) + u128::from(rem);
                let den = u128::from(self.den);
                ps += units * self.q + (total / den) as u64;
                rem = (total % den) as u64;
            }
        }
        self.free_ps = ps;
        self.free_rem = rem;
        (start, ps + u64::from(rem > 0))
    }

    /// Work of `units` units on this resource, for [`Lane::reserve`].
    pub fn step(&self, units: u64) -> Step {
        // units·r = (units·r / den)·den + units·r % den, in 128 bits when it overflows 64 (a
        // 128-bit division is a slow library call).
        if let Some(frac) = units.checked_mul(self.r) {
            return Step {
                units,
                q: units * self.q + frac / self.den,
                r: frac % self.den,
            };
        }
        let frac = u128::from(units) * u128::from(self.r);
        let den = u128::from(self.den);
        Step {
            units,
            q: units * self.q + (frac / den) as u64,
            r: (frac % den) as u64,
        }
    }

    /// The resource's busy-until state, for a run of [`Lane::reserve`]s; write it back with
    /// [`Resource::settle`] before the resource is used otherwise.
    #[inline]
    pub fn lane(&self) -> Lane {
        Lane {
            free_ps: self.free_ps,
            free_rem: self.free_rem,
            den: self.den,
            latency_ps: self.latency_ps,
            units: 0,
            reservations: 0,
        }
    }

    /// Takes back a lane from [`Resource::lane`] after its reservations.
    #[inline]
    pub fn settle(&mut self, lane: Lane) {
        self.free_ps = lane.free_ps;
        self.free_rem = lane.free_rem;
        self.units += lane.units;
        self.reservations += lane.reservations;
    }

    /// When the resource is next free (ps, rounded up).
    #[inline]
    pub fn free_at(&self) -> Ps {
        self.free_ps + u64::from(self.free_rem > 0)
    }

    /// Total busy time booked so far, ps (fractional).
    pub fn busy_ps(&self) -> f64 {
        (u128::from(self.units) * self.cost.num) as f64 / self.cost.den as f64
    }

    /// Units (bytes or ops) booked so far.
    pub fn units(&self) -> u64 {
        self.units
    }

    /// Reservations made so far.
    pub fn reservations(&self) -> u64 {
        self.reservations
    }

    /// The latency added after service.
    pub fn latency_ps(&self) -> Ps {
        self.latency_ps
    }

    /// The per-unit cost.
    pub fn cost(&self) -> Cost {
        self.cost
    }
}

/// A fixed amount of work on one resource (see [`Resource::step`]): its units and their cost
/// split once into whole picoseconds and a remainder in units of the resource's denominator,
/// so a run of identical reservations costs neither a multiplication nor a division each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Step {
    units: u64,
    /// Whole picoseconds of the work.
    q: u64,
    /// The fractional picoseconds × `den`, below `den`.
    r: u64,
}

impl Step {
    /// No work.
    pub const ZERO: Step = Step {
        units: 0,
        q: 0,
        r: 0,
    };

    /// True when the work takes no time (a resource without a limit, such as the DMA engine of
    /// a profile without an op rate).
    #[inline(always)]
    pub fn takes_no_time(&self) -> bool {
        self.q == 0 && self.r == 0
    }

    /// The work's time in whole picoseconds, rounded down.
    #[inline(always)]
    pub fn whole_ps(&self) -> Ps {
        self.q
    }
}

/// A resource's busy-until state copied out for a run of reservations ([`Resource::lane`]),
/// booked with [`Lane::reserve`] and written back with [`Resource::settle`]: a loop that books
/// many transfers keeps the state in registers instead of going through the resource each time.
/// Reserving on a lane gives exactly [`Resource::reserve`]'s times.
#[derive(Clone, Copy, Debug)]
pub struct Lane {
    free_ps: Ps,
    free_rem: u64,
    den: u64,
    latency_ps: Ps,
    /// Units and reservations counted on the lane ([`Lane::add`]), added to the resource's when
    /// it settles.
    units: u64,
    reservations: u64,
}

impl Lane {
    /// Books work `s` ready at `ready`, as [`Resource::reserve`] books `s`'s units, except that
    /// the lane does not count it: the caller counts its reservations with [`Lane::add`] (a
    /// run of identical ones in one go).
    #[inline(always)]
    pub fn reserve(&mut self, ready: Ps, s: Step) -> Reservation {
        // An idle lane starts at `ready`; a busy one queues the work behind its last.
        let (ps, rem) = if ready >= self.free_at() {
            (ready, 0)
        } else {
            (self.free_ps, self.free_rem)
        };
        self.book_from(ps, rem, s)
    }

    /// Books work `s` from busy-until time `ps` and remainder `rem` (the reservation's start,
    /// rounded up): the lane's state and the reservation after it.
    #[inline(always)]
    fn book_from(&mut self, mut ps: Ps, mut rem: u64, s: Step) -> Reservation {
        let start = ps + u64::from(rem > 0);
        // rem < den and s.r < den: at most one carry.
        rem += s.r;
        ps += s.q;
        if rem >= self.den {
            rem -= self.den;
            ps += 1;
        }
        self.free_ps = ps;
        self.free_rem = rem;
        let end = ps + u64::from(rem > 0);
        Reservation {
            start,
            end,
            done: end + self.latency_ps,
        }
    }

    /// When the lane's resource is next free (ps, rounded up).
    #[inline(always)]
    pub fn free_at(&self) -> Ps {
        self.free_ps + u64::from(self.free_rem > 0)
    }

    /// Starts a run of reservations that are all ready at `ready`, booked with
    /// [`Lane::reserve_queued`]: an idle lane starts the run at `ready`, as [`Lane::reserve`]
    /// would start its first one (a busy lane is left as it is).
    ///
    /// Why a run needs no check per reservation: after this the lane is either free at
    /// exactly `ready` (no remainder) or busy past it, and each reservation of the run keeps it
    /// so (it starts where the lane is free and ends no earlier). From either state
    /// [`Lane::reserve`] at `ready` starts at the lane's busy-until time, remainder included,
    /// which is all [`Lane::reserve_queued`] does.
    #[inline(always)]
    pub fn start_run(&mut self, ready: Ps) {
        if ready >= self.free_at() {
            self.free_ps = ready;
            self.free_rem = 0;
        }
    }

    /// [`Lane::reserve`] of work `s` in a run started with [`Lane::start_run`] (every
    /// reservation of the run ready at the run's time): it queues behind the lane's busy-until
    /// time, keeping its fractional picoseconds (its `end` is when the lane is free again).
    /// The receive pass's chain of frames held by flow control books the same way: each frame
    /// is ready before the lane is free.
    #[inline(always)]
    pub fn reserve_queued(&mut self, s: Step) -> Reservation {
        self.book_from(self.free_ps, self.free_rem, s)
    }

    /// [`Lane::reserve`] of work `s` at each time of `times` in turn, replacing each with its
    /// reservation's `end`. In a run the lane's next free time is the last reservation's end,
    /// so it is not worked out from the remainder each time.
    #[inline(always)]
    pub fn reserve_each(&mut self, times: &mut [Ps], s: Step) {
        let (mut ps, mut rem, mut free_at) = (self.free_ps, self.free_rem, self.free_at());
        for t in times {
            if *t >= free_at {
                (ps, rem) = (*t, 0);
            }
            // rem < den and s.r < den: at most one carry.
            rem += s.r;
            ps += s.q;
            if rem >= self.den {
                rem -= self.den;
                ps += 1;
            }
            free_at = ps + u64::from(rem > 0);
            *t = free_at;
        }
        (self.free_ps, self.free_rem) = (ps, rem);
    }

    /// [`Lane::reserve_each`] of times each at least `gap` after the one before. When the work
    /// `s` takes no longer than `gap` (rounded up), a reservation that found the lane free ends
    /// before the next time, which then finds it free too: from the first such one on, each
    /// reservation starts at its time with no remainder and ends `s` (rounded up) after it, with
    /// no booking per time beyond that addition.
    #[inline(always)]
    pub fn reserve_each_spaced(&mut self, times: &mut [Ps], gap: Ps, s: Step) {
        let took = s.q + u64::from(s.r > 0);
        if took > gap {
            return self.reserve_each(times, s);
        }
        let mut i = 0;
        while i < times.len() {
            let t = times[i];
            let idle = t >= self.free_at();
            times[i] = self.reserve(t, s).end;
            i += 1;
            if idle {
                break;
            }
        }
        if let [.., last] = times[i..] {
            // Free at `last`: the lane starts there and books `s` (`s.r < den`, no carry).
            (self.free_ps, self.free_rem) = (last + s.q, s.r);
            for t in &mut times[i..] {
                *t += took;
            }
        }
    }

    /// True when the lane's busy-until time and work `s` are whole picoseconds (no remainder):
    /// then [`Lane::reserve_whole`] books `s` as [`Lane::reserve`] does, and the lane stays
    /// whole (every reservation of whole work on a whole lane ends on a whole picosecond).
    #[inline(always)]
    pub fn whole_with(&self, s: Step) -> bool {
        self.free_rem == 0 && s.r == 0
    }

    /// [`Lane::reserve`] of work `s` ready at `ready` when [`Lane::whole_with`] holds; returns
    /// the reservation's end. Without remainders the busy-until time is `free_ps` and the
    /// reservation runs from `max(ready, free_ps)` for `s`'s whole picoseconds.
    #[inline(always)]
    pub fn reserve_whole(&mut self, ready: Ps, s: Step) -> Ps {
        debug_assert!(self.whole_with(s), "a whole lane and whole work");
        self.free_ps = ready.max(self.free_ps) + s.q;
        self.free_ps
    }

    /// Counts `n` reservations of work `s` made with [`Lane::reserve`].
    #[inline(always)]
    pub fn add(&mut self, n: u64, s: Step) {
        self.units += n * s.units;
        self.reservations += n;
    }
}

/// The named resources of the virtual NIC model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// PCIe device → host.
    PcieUp,
    /// PCIe host → device.
    PcieDown,
    /// Ethernet receive.
    WireRx,
    /// Ethernet transmit.
    WireTx,
    /// The NIC's DMA engine (op-rate limit).
    DmaEngine,
    /// The nicmem SRAM port.
    Nicmem,
    /// Host DRAM.
    Hostmem,
}

impl ResourceKind {
    /// Every resource, in report order.
    pub const ALL: [ResourceKind; 7] = [
        ResourceKind::PcieUp,
        ResourceKind::PcieDown,
        ResourceKind::WireRx,
        ResourceKind::WireTx,
        ResourceKind::DmaEngine,
        ResourceKind::Nicmem,
        ResourceKind::Hostmem,
    ];

    /// Report name (`pcie_up`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::PcieUp => "pcie_up",
            ResourceKind::PcieDown => "pcie_down",
            ResourceKind::WireRx => "wire_rx",
            ResourceKind::WireTx => "wire_tx",
            ResourceKind::DmaEngine => "dma_engine",
            ResourceKind::Nicmem => "nicmem",
            ResourceKind::Hostmem => "hostmem",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The most reads [`OutstandingReads`] lists before it retires the completed ones.
const LAZY_MAX: usize = 1024;

/// Caps outstanding non-posted reads: the completion times of reads in flight.
///
/// A new read issued at `ready` waits until fewer than `cap` reads are outstanding, so read
/// throughput never exceeds `cap / RTT` (Little's law). A read counts as outstanding from its
/// record until the first later issue whose time reaches its completion (or until a full
/// tracker makes an issue wait for it).
///
/// Why two representations: the plain way is a min-heap, retiring completed reads at every
/// issue, which costs a sift of log2(cap) levels twice a read (about 100 instructions a read at
/// 256 tags). Far from the cap nothing needs retiring to answer "is there a free tag": the
/// reads recorded since the last clean-up are at least the outstanding ones, so while fewer
/// than `cap` are recorded, the answer is "now". So the tracker keeps an unsorted list and a
/// record of the issue times since the last clean-up (a stack of suffix maxima: the latest
/// issue time at or after each point); when the list reaches `cap` (at most `LAZY_MAX`) it
/// retires exactly the reads the heap would have retired by then (one merge walk) and carries
/// on. When the list stays more than half full after that, reads are short of tags and it works
/// as the heap until the load drops below a quarter. Either way every issue time and stall
/// count is the heap's (issue times need not come in time order: a NIC's streams interleave).
#[derive(Clone, Debug)]
pub struct OutstandingReads {
    cap: usize,
    /// Lazy: the list length that triggers a clean-up (`cap`, at most [`LAZY_MAX`] so a huge
    /// cap does not keep long-completed reads).
    lazy_limit: usize,
    stalls: u64,
    /// Issues so far.
    issues: u64,
    /// Whether the tracker works as the min-heap (`heap`) or lazily (`list`, `maxima`).
    loaded: bool,
    /// Loaded: exactly the reads in flight.
    heap: BinaryHeap<Reverse<Ps>>,
    /// Lazy: (completion, issues before its record) of every read recorded since the last
    /// clean-up that had not completed then, in record order.
    list: Vec<(Ps, u64)>,
    /// Lazy: (issue number, time) of the issues since the last clean-up whose time is larger
    /// than every later one's, in issue order (so times strictly decrease).
    maxima: Vec<(u64, Ps)>,
    /// Lazy: where a clean-up gathers the reads it keeps (then swapped with `list`), so the
    /// reads it drops cost a comparison each and no move.
    kept: Vec<(Ps, u64)>,
}

impl OutstandingReads {
    /// A tracker allowing `cap` (≥ 1) reads in flight.
    pub fn new(cap: u32) -> Self {
        let cap = cap.max(1) as usize;
        OutstandingReads {
            cap,
            lazy_limit: cap.min(LAZY_MAX),
            stalls: 0,
            issues: 0,
            loaded: false,
            heap: BinaryHeap::new(),
            list: Vec::new(),
            maxima: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// The earliest time ≥ `ready` at which a new read may issue (retires completed reads).
    #[inline]
    pub fn issue_time(&mut self, ready: Ps) -> Ps {
        if !self.loaded && self.list.len() < self.lazy_limit {
            // Lazy with room (what `issue_slow` does first, inlined): nothing to retire.
            self.issues += 1;
            self.push_maximum(ready);
            return ready;
        }
        self.issue_slow(ready)
    }

    /// [`OutstandingReads::issue_time`] in full.
    #[inline(never)]
    fn issue_slow(&mut self, ready: Ps) -> Ps {
        self.issues += 1;
        if !self.loaded {
            self.push_maximum(ready);
            if self.list.len() < self.lazy_limit {
                return ready;
            }
            self.clean_up();
            if self.list.len() <= self.lazy_limit / 2 {
                return ready;
            }
            self.loaded = true;
            self.heap.clear();
            self.heap
                .extend(self.list.drain(..).map(|(d, _)| Reverse(d)));
        }
        let t = self.heap_issue(ready);
        if self.heap.len() < self.lazy_limit / 4 {
            self.loaded = false;
            self.maxima.clear();
            let issues = self.issues;
            self.list
                .extend(self.heap.drain().map(|Reverse(d)| (d, issues)));
        }
        t
    }

    /// The heap's issue: retire reads complete at the issue time; while every tag is taken,
    /// wait for the earliest completion.
    fn heap_issue(&mut self, ready: Ps) -> Ps {
        let mut t = ready;
        loop {
            while let Some(&Reverse(done)) = self.heap.peek() {
                if done <= t {
                    self.heap.pop();
                } else {
                    break;
                }
            }
            if self.heap.len() < self.cap {
                return t;
            }
            let Reverse(first) = self.heap.pop().expect("cap >= 1 so heap is non-empty");
            self.stalls += 1;
            t = first;
        }
    }

    /// Lazy: drops the reads a later issue's time has reached (the ones the heap retired) and
    /// forgets the issue times, which every remaining read has now been checked against.
    ///
    /// The latest issue time after a read's record is the first maximum issued later, and the
    /// list is in record order, so each maximum applies to one stretch of the list (found by a
    /// binary search): the walk compares each read with one time and copies the few it keeps.
    fn clean_up(&mut self) {
        let issues = self.issues;
        let (list, kept) = (&self.list[..], &mut self.kept);
        kept.clear();
        let mut r = 0;
        for &(issue, t) in &self.maxima {
            let end = r + list[r..].partition_point(|&(_, before)| before < issue);
            kept.extend(
                list[r..end]
                    .iter()
                    .filter(|&&(done, _)| done > t)
                    .map(|&(done, _)| (done, issues)),
            );
            r = end;
        }
        // Recorded after the last issue: nothing has retired them.
        kept.extend(list[r..].iter().map(|&(done, _)| (done, issues)));
        std::mem::swap(&mut self.list, &mut self.kept);
        self.maxima.clear();
    }

    /// How many reads in a row [`OutstandingReads::issue_time`] would issue at their ready
    /// time without retiring any (lazy, with room in the list), whatever their completions.
    #[inline]
    pub fn lazy_room(&self) -> usize {
        if self.loaded {
            0
        } else {
            self.lazy_limit - self.list.len()
        }
    }

    /// Exactly what `issue_time(ready)` then `record(d)` for each `d` of `dones` in turn do,
    /// when `dones` has at most [`OutstandingReads::lazy_room`] reads (each then issues at
    /// `ready`): the bookkeeping of a run of reads issued at the same time, in one go.
    #[inline]
    pub fn issue_lazy_run(&mut self, ready: Ps, dones: &[Ps]) {
        debug_assert!(dones.len() <= self.lazy_room());
        if dones.is_empty() {
            return;
        }
        let i0 = self.issues;
        self.list
            .extend(dones.iter().zip(i0 + 1..).map(|(&d, i)| (d, i)));
        self.issues = i0 + dones.len() as u64;
        // Each issue pops the maxima its time reaches (the previous issue's among them) and
        // pushes itself: what is left is the last one.
        self.push_maximum(ready);
    }

    /// Lazy: the latest issue (number `issues`, time `ready`) joins the maxima, dropping those
    /// whose time it reaches (they are no longer larger than every later issue's).
    #[inline(always)]
    fn push_maximum(&mut self, ready: Ps) {
        while self.maxima.last().is_some_and(|&(_, t)| t <= ready) {
            self.maxima.pop();
        }
        self.maxima.push((self.issues, ready));
    }

    /// Records a read that completes at `done`.
    #[inline]
    pub fn record(&mut self, done: Ps) {
        if self.loaded {
            self.heap.push(Reverse(done));
        } else {
            self.list.push((done, self.issues));
        }
    }

    /// Reads currently in flight (recorded and not yet retired by a later issue).
    pub fn in_flight(&self) -> usize {
        if self.loaded {
            return self.heap.len();
        }
        let mut m = 0;
        self.list
            .iter()
            .filter(|&&(done, before)| {
                while m < self.maxima.len() && self.maxima[m].0 <= before {
                    m += 1;
                }
                self.maxima.get(m).is_none_or(|&(_, t)| done > t)
            })
            .count()
    }

    /// Times a read had to wait for a free tag.
    pub fn stalls(&self) -> u64 {
        self.stalls
    }
}

/// When a DMA read happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ReadTiming {
    /// When the MRd started on the up link (after waiting for a tag and the DMA engine).
    pub issued: Ps,
    /// When the last request TLP left the device.
    pub request_end: Ps,
    /// When the last completion byte arrived at the device.
    pub done: Ps,
}

/// A snapshot of every resource's accumulated busy time, for utilisation over an interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Snapshot {
    /// Virtual time of the snapshot.
    pub at: Ps,
    busy_ps: [f64; 7],
}

impl Snapshot {
    /// Utilisation of each resource between `earlier` and `self`: busy time booked in between
    /// divided by the interval. Work booked for the future counts when it is booked, so an
    /// overloaded resource shows > 1.0 (a growing backlog).
    pub fn utilization_since(&self, earlier: &Snapshot) -> Vec<(ResourceKind, f64)> {
        let dt = self.at.saturating_sub(earlier.at) as f64;
        ResourceKind::ALL
            .iter()
            .map(|&k| {
                let busy = self.busy_ps[k.index()] - earlier.busy_ps[k.index()];
                (k, if dt > 0.0 { busy / dt } else { 0.0 })
            })
            .collect()
    }
}

/// The bottleneck: the resource with the highest utilisation if it is at least `threshold`
/// (e.g. 0.95), else `None` ("none"). Ties go to the earlier entry, so the pick is
/// deterministic.
pub fn pick_bottleneck<K: Copy>(utilizations: &[(K, f64)], threshold: f64) -> Option<K> {
    let mut best: Option<(K, f64)> = None;
    for &(k, u) in utilizations {
        if best.is_none_or(|(_, b)| u > b) {
            best = Some((k, u));
        }
    }
    best.filter(|&(_, u)| u >= threshold).map(|(k, _)| k)
}

/// In-flight reads needed to sustain `ops_per_sec` at latency `latency_ns` (Little's law).
pub fn littles_law_inflight(ops_per_sec: f64, latency_ns: f64) -> f64 {
    ops_per_sec * latency_ns * 1e-9
}

/// The rate `inflight` outstanding operations sustain at latency `latency_ns` (Little's law).
pub fn littles_law_rate(inflight: f64, latency_ns: f64) -> f64 {
    inflight / (latency_ns * 1e-9)
}

/// The lanes ([`Lane`]) of the three resources every DMA uses, the DMA engine and the two PCIe
/// directions, for booking a run of reads and posted writes in a loop ([`Timelines::dma_lanes`],
/// [`Timelines::settle_dma`]); each transfer gets exactly the times of
/// [`Timelines::dma_read_booked`] and [`Timelines::posted_write`].
#[derive(Clone, Copy, Debug)]
pub struct DmaLanes {
    /// The DMA engine.
    pub eng: Lane,
    /// PCIe device → host.
    pub up: Lane,
    /// PCIe host → device.
    pub down: Lane,
}

impl DmaLanes {
    /// [`Timelines::dma_read_booked`] on the lanes, the read's bytes as the steps `up` and
    /// `down`, the DMA engine's read op as `eng` and the read's fixed latency (RTT0, adders)
    /// as `latency`; returns when the last completion byte arrived. The caller counts the
    /// three reservations ([`Lane::add`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn read_booked(
        &mut self,
        reads: &mut OutstandingReads,
        book_at: Ps,
        start: Ps,
        eng: Step,
        up: Step,
        down: Step,
        latency: Ps,
    ) -> Ps {
        let start = reads.issue_time(start.max(book_at));
        let done = self.read_untracked(book_at, start, eng, up, down, latency);
        reads.record(done);
        done
    }

    /// [`DmaLanes::read_booked`] of a read the caller knows issues at `start.max(book_at)`
    /// (fewer reads listed than [`OutstandingReads::lazy_room`] allows); the caller records it
    /// with [`OutstandingReads::issue_lazy_run`] and counts its reservations.
    #[inline(always)]
    pub fn read_untracked(
        &mut self,
        book_at: Ps,
        start: Ps,
        eng: Step,
        up: Step,
        down: Step,
        latency: Ps,
    ) -> Ps {
        let start = start.max(book_at);
        let e = self.eng.reserve(book_at, eng);
        let req = self.up.reserve(e.end, up);
        let cpl = self.down.reserve(book_at, down);
        start + (req.end - book_at) + latency + (cpl.end - book_at)
    }

    /// [`Timelines::posted_write`] on the lanes (`eng`: the DMA engine's write op, `up`: the
    /// write's bytes); the caller counts the two reservations ([`Lane::add`]).
    #[inline(always)]
    pub fn posted_write(&mut self, ready: Ps, eng: Step, up: Step) -> Reservation {
        let e = self.eng.reserve(ready, eng);
        self.up.reserve(e.end, up)
    }
}

/// All timelines of one NIC (and the host memory it touches), built from a profile.
#[derive(Clone, Debug)]
pub struct Timelines {
    resources: [Resource; 7],
    reads: OutstandingReads,
    rtt0_ps: Ps,
    read_adder_ps: Ps,
    dma_read_ps: Ps,
    dma_write_ps: Ps,
}

impl Timelines {
    /// Timelines for `profile`: PCIe up/down at the profile's capacity (posted latency
    /// RTT0/2), wire Rx/Tx at line rate, the DMA engine charging `1/max_*_mops` per op
    /// (free when unlimited), nicmem at its bandwidth and latency, host memory at DRAM
    /// bandwidth; reads capped at `max_outstanding_reads`.
    pub fn from_profile(profile: &HardwareProfile) -> Result<Self, String> {
        let link = PcieLink::from_profile(&profile.nic.pcie)?;
        let pcie = &profile.nic.pcie;
        let nic = &profile.nic;
        let posted = pcie.posted_latency_ns * PS_PER_NS;
        let pcie_cost = Cost::per_byte_at_bps(link.capacity_bps());
        let wire = Cost::per_byte_at_gbps(nic.line_rate_gbps);
        let op_ps = |mops: f64| Cost::per_op_at_rate(mops * 1e6).time_ps(1);
        let resources = [
            Resource::new(ResourceKind::PcieUp.as_str(), pcie_cost, posted),
            Resource::new(ResourceKind::PcieDown.as_str(), pcie_cost, posted),
            Resource::new(ResourceKind::WireRx.as_str(), wire, 0),
            Resource::new(ResourceKind::WireTx.as_str(), wire, 0),
            Resource::new(ResourceKind::DmaEngine.as_str(), Cost::ps_per_unit(1), 0),
            Resource::new(
                ResourceKind::Nicmem.as_str(),
                Cost::per_byte_at_gbps(nic.nicmem.bandwidth_gbps),
                nic.nicmem.latency_ns * PS_PER_NS,
            ),
            Resource::new(
                ResourceKind::Hostmem.as_str(),
                Cost::per_byte_at_gbps(profile.host.dram_bandwidth_gbyte_s * 8.0),
                0,
            ),
        ];
        let read_adder_ns = if pcie.numa_remote {
            pcie.remote_numa_adder_ns
        } else {
            0
        };
        Ok(Timelines {
            resources,
            reads: OutstandingReads::new(pcie.max_outstanding_reads),
            rtt0_ps: pcie.rtt0_ns * PS_PER_NS,
            read_adder_ps: read_adder_ns * PS_PER_NS,
            dma_read_ps: op_ps(pcie.max_read_mops),
            dma_write_ps: op_ps(pcie.max_write_mops),
        })
    }

    /// A resource's timeline.
    pub fn get(&self, kind: ResourceKind) -> &Resource {
        &self.resources[kind.index()]
    }

    /// A resource's timeline, mutably (to reserve on it directly).
    pub fn get_mut(&mut self, kind: ResourceKind) -> &mut Resource {
        &mut self.resources[kind.index()]
    }

    /// The outstanding-read tracker.
    pub fn reads(&self) -> &OutstandingReads {
        &self.reads
    }

    /// The outstanding-read tracker, mutably (for reads booked on lanes, see
    /// [`Timelines::dma_read_booked`]).
    pub fn reads_mut(&mut self) -> &mut OutstandingReads {
        &mut self.reads
    }

    /// Latency of a DMA read between its request and its completion beyond serialisation:
    /// RTT0 plus the NUMA adder, ps.
    pub fn read_latency_ps(&self) -> Ps {
        self.rtt0_ps + self.read_adder_ps
    }

    /// DMA-engine time of a read, ps.
    pub fn dma_read_ps(&self) -> Ps {
        self.dma_read_ps
    }

    /// DMA-engine time of a posted write, ps.
    pub fn dma_write_ps(&self) -> Ps {
        self.dma_write_ps
    }

    /// The DMA engine's and the PCIe link's lanes, for a run of transfers; write them back with
    /// [`Timelines::settle_dma`] before the timelines are used otherwise.
    #[inline]
    pub fn dma_lanes(&self) -> DmaLanes {
        DmaLanes {
            eng: self.resources[ResourceKind::DmaEngine.index()].lane(),
            up: self.resources[ResourceKind::PcieUp.index()].lane(),
            down: self.resources[ResourceKind::PcieDown.index()].lane(),
        }
    }

    /// Takes back the lanes of [`Timelines::dma_lanes`].
    #[inline]
    pub fn settle_dma(&mut self, l: DmaLanes) {
        self.resources[ResourceKind::DmaEngine.index()].settle(l.eng);
        self.resources[ResourceKind::PcieUp.index()].settle(l.up);
        self.resources[ResourceKind::PcieDown.index()].settle(l.down);
    }

    /// A posted DMA write (Rx data, CQE, MSI) ready at `ready`: one DMA-engine op, then the up
    /// link; `done` is when it is visible in host memory (end + posted latency). Posted writes
    /// stay in order because the up link is FIFO.
    #[inline]
    pub fn posted_write(&mut self, ready: Ps, t: Traffic) -> Reservation {
        let eng = self.resources[ResourceKind::DmaEngine.index()].reserve(ready, self.dma_write_ps);
        self.resources[ResourceKind::PcieUp.index()].reserve(eng.end, t.up_bytes)
    }

    /// A CPU MMIO write (doorbell, BlueFlame) ready at `ready`: the down link; `done` is when
    /// the device sees it.
    pub fn mmio_write(&mut self, ready: Ps, t: Traffic) -> Reservation {
        self.resources[ResourceKind::PcieDown.index()].reserve(ready, t.down_bytes)
    }

    /// A DMA read ready at `ready` costing `t` (from [`PcieLink::read`]): wait for a free tag,
    /// one DMA-engine op, MRd bytes on the up link, then RTT0 + NUMA adder + `extra_latency_ps`
    /// (e.g. an LLC miss), then CplD bytes on the down link. Unloaded, this is exactly
    /// `RTT0 + ser_up(Rq) + ser_down(Rc)` after `ready`.
    pub fn dma_read(&mut self, ready: Ps, t: Traffic, extra_latency_ps: Ps) -> ReadTiming {
        let tag_ready = self.reads.issue_time(ready);
        let eng =
            self.resources[ResourceKind::DmaEngine.index()].reserve(tag_ready, self.dma_read_ps);
        let req = self.resources[ResourceKind::PcieUp.index()].reserve(eng.end, t.up_bytes);
        let data_ready = req.end + self.rtt0_ps + self.read_adder_ps + extra_latency_ps;
        let cpl = self.resources[ResourceKind::PcieDown.index()].reserve(data_ready, t.down_bytes);
        self.reads.record(cpl.end);
        ReadTiming {
            issued: req.start,
            request_end: req.end,
            done: cpl.end,
        }
    }

    /// A DMA read that logically starts at `start` but whose link, engine and tag bookings are
    /// made at `book_at` (<= `start`), the time the NIC works on it.
    ///
    /// Busy-until timelines are FIFO in booking order, so booking a read's completion at a
    /// future time (as [`Timelines::dma_read`] does) would make every earlier-ready transfer
    /// booked after it queue behind an idle gap. Booking at `book_at` keeps the timelines in
    /// time order; the read's latency is then `start`, plus its wait and serialisation on the up
    /// link, RTT0 and adders, plus its wait and serialisation on the down link. Unloaded this is
    /// exactly `start + RTT0 + ser_up(Rq) + ser_down(Rc)`, like [`Timelines::dma_read`].
    #[inline]
    pub fn dma_read_booked(
        &mut self,
        book_at: Ps,
        start: Ps,
        t: Traffic,
        extra_latency_ps: Ps,
    ) -> ReadTiming {
        let start = self.reads.issue_time(start.max(book_at));
        let eng =
            self.resources[ResourceKind::DmaEngine.index()].reserve(book_at, self.dma_read_ps);
        let req = self.resources[ResourceKind::PcieUp.index()].reserve(eng.end, t.up_bytes);
        let cpl = self.resources[ResourceKind::PcieDown.index()].reserve(book_at, t.down_bytes);
        let request_end = start + (req.end - book_at);
        let done = request_end
            + self.rtt0_ps
            + self.read_adder_ps
            + extra_latency_ps
            + (cpl.end - book_at);
        self.reads.record(done);
        ReadTiming {
            issued: start,
            request_end,
            done,
        }
    }

    /// Snapshot of all busy times at virtual time `now`.
    pub fn snapshot(&self, now: Ps) -> Snapshot {
        let mut busy_ps = [0.0; 7];
        for (b, r) in busy_ps.iter_mut().zip(&self.resources) {
            *b = r.busy_ps();
        }
        Snapshot { at: now, busy_ps }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DatapathMode;
    use crate::pcie_model::costs::OpCosts;
    use crate::pcie_model::profile::Efficiency;

    /// The costs the randomised booking tests run over: two fractional wire rates, an integer
    /// cost and free work.
    fn booking_costs() -> [Cost; 4] {
        [
            Cost::per_byte_at_bps(100_000_000_000),
            Cost::per_byte_at_bps(113_700_000_000),
            Cost::ps_per_unit(3),
            Cost::FREE,
        ]
    }

    /// One step of the xorshift generator the randomised booking tests draw from.
    fn xorshift(x: &mut u64) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
    }

    #[test]
    fn resource_busy_until() {
        // 100 Gb/s wire: 80 ps per byte.
        let mut r = Resource::new("wire", Cost::per_byte_at_gbps(100.0), 5);
        let a = r.reserve(0, 84);
        assert_eq!(
            a,
            Reservation {
                start: 0,
                end: 6720,
                done: 6725
            }
        );
        // Ready before free: queues behind.
        let b = r.reserve(1000, 84);
        assert_eq!(
            b,
            Reservation {
                start: 6720,
                end: 13440,
                done: 13445
            }
        );
        // Ready after free: idle gap, starts at ready.
        let c = r.reserve(20_000, 1);
        assert_eq!(
            c,
            Reservation {
                start: 20_000,
                end: 20_080,
                done: 20_085
            }
        );
        assert_eq!(r.free_at(), 20_080);
        assert_eq!(r.units(), 169);
        assert_eq!(r.reservations(), 3);
        assert_eq!(r.busy_ps(), 13_520.0);
    }

    #[test]
    fn rational_costs_do_not_drift() {
        // 113.7 Gb/s: 70.36... ps per byte; a million 88 B writes take exactly
        // ceil(88e6 · 8e12 / 113.7e9) ps, not a million rounded increments.
        let mut r = Resource::new("up", Cost::per_byte_at_bps(113_700_000_000), 0);
        let mut last = Reservation {
            start: 0,
            end: 0,
            done: 0,
        };
        for _ in 0..1_000_000 {
            last = r.reserve(0, 88);
        }
        let exact = (88_000_000u128 * 8 * PS_PER_SEC).div_ceil(113_700_000_000);
        assert_eq!(u128::from(last.end), exact);
        assert_eq!(Cost::per_byte_at_gbps(113.7).time_ps(88), 6192); // 6191.73 rounded up
        assert_eq!(Cost::FREE.time_ps(1_000_000), 0);
        assert_eq!(Cost::per_op_at_rate(0.0), Cost::FREE);
        assert_eq!(Cost::per_op_at_rate(62.3e6).time_ps(1), 16_052);
    }

    #[test]
    fn lanes_book_exactly_as_the_resources() {
        // A pseudo-random mix of ready times (idle gaps and backlogs) and sizes, on a fractional
        // cost, an integer one and a free one: the lanes give the same reservations and leave
        // the same state, including the remainder, the units and the reservation count.
        for cost in booking_costs() {
            let mut a = Resource::new("a", cost, 7);
            let mut b = a.clone();
            let mut lane = b.lane();
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let mut ready = 0;
            for i in 0..20_000u64 {
                xorshift(&mut x);
                ready += x % 9_000;
                // 2^38 bytes overflow 64 bits in units × remainder (the 128-bit path).
                let units = [64, 88, 1_500, 1 << 38][(x >> 40) as usize % 4];
                let step = b.step(units);
                assert_eq!(a.reserve(ready, units), lane.reserve(ready, step), "{i}");
                lane.add(1, step);
                assert_eq!(a.free_at(), lane.free_at());
            }
            b.settle(lane);
            assert_eq!(
                (a.free_ps, a.free_rem, a.units),
                (b.free_ps, b.free_rem, b.units)
            );
            assert_eq!(a.reservations(), b.reservations());
        }
    }

    #[test]
    fn a_run_ready_at_one_time_books_as_reservations_one_by_one() {
        // Runs of reservations all ready at one time (idle gaps before some, backlogs before
        // others, sizes mixed within a run, free work among them): a lane started at the run's
        // time and booked with `reserve_queued` gives each one `reserve`'s end and leaves the
        // same state, remainder included, on a fractional, an integer and a free cost.
        for cost in booking_costs() {
            let mut a = Resource::new("a", cost, 7);
            let mut lane = a.lane();
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let mut ready = 0;
            for run in 0..3_000u64 {
                xorshift(&mut x);
                ready += x % 12_000;
                lane.start_run(ready);
                for i in 0..(x >> 50) % 40 {
                    let units = [0, 1, 64, 88, 1_500][((x >> (i % 40)) % 5) as usize];
                    let want = a.reserve(ready, units).end;
                    assert_eq!(
                        lane.reserve_queued(a.step(units)).end,
                        want,
                        "run {run}, {i}"
                    );
                    assert_eq!((lane.free_ps, lane.free_rem), (a.free_ps, a.free_rem));
                }
                // (A run of none leaves an idle lane started at its time, where the resource
                // keeps its old busy-until time: both are free for every later ready time.)
            }
            assert!(a.reservations() > 10_000);
        }
    }

    #[test]
    fn reserving_each_time_of_a_run_is_reserving_them_one_by_one() {
        // Runs of increasing ready times, some closer than the work (a backlog builds), some
        // farther apart (idle gaps): `reserve_each` gives `reserve`'s ends and leaves the state.
        for cost in booking_costs() {
            let mut a = Resource::new("a", cost, 0);
            let mut lane = a.lane();
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let mut ready = 0;
            for run in 0..2_000u64 {
                xorshift(&mut x);
                let units = [1, 84, 1_538][(x % 3) as usize];
                let mut times: Vec<Ps> = (0..(x >> 40) % 64)
                    .map(|i| {
                        ready += (x >> (i % 32)) % 14_000;
                        ready
                    })
                    .collect();
                let want: Vec<Ps> = times.iter().map(|&t| a.reserve(t, units).end).collect();
                lane.reserve_each(&mut times, a.step(units));
                assert_eq!(times, want, "run {run}");
                assert_eq!((lane.free_ps, lane.free_rem), (a.free_ps, a.free_rem));
            }
        }
    }

    #[test]
    fn reserving_each_of_spaced_times_is_reserving_them_one_by_one() {
        // Times at least `gap` apart, the gap now above the work (the lane goes idle from some
        // reservation on), now below it (the general booking), after a backlog or not.
        for cost in booking_costs() {
            let mut a = Resource::new("a", cost, 0);
            let mut lane = a.lane();
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let mut ready = 0;
            let mut idle_runs = 0;
            for run in 0..3_000u64 {
                xorshift(&mut x);
                let units = [1, 84, 85, 1_538][(x % 4) as usize];
                let gap = [6_720, 6_800, 7_000, 100][((x >> 8) % 4) as usize];
                // Sometimes the run starts behind a backlog.
                ready += (x >> 12) % 20_000;
                let mut times: Vec<Ps> = (0..(x >> 40) % 64)
                    .map(|i| {
                        ready += gap + (x >> (i % 32)) % [1, 3, 500][(x >> 20) as usize % 3];
                        ready
                    })
                    .collect();
                let want: Vec<Ps> = times.iter().map(|&t| a.reserve(t, units).end).collect();
                let step = a.step(units);
                idle_runs += u64::from(step.whole_ps() < gap && times.len() > 1);
                lane.reserve_each_spaced(&mut times, gap, step);
                assert_eq!(times, want, "run {run}");
                assert_eq!((lane.free_ps, lane.free_rem), (a.free_ps, a.free_rem));
            }
            assert!(idle_runs > 100, "{idle_runs}");
        }
    }

    #[test]
    fn outstanding_reads_cap() {
        let mut o = OutstandingReads::new(2);
        assert_eq!(o.issue_time(0), 0);
        o.record(100);
        assert_eq!(o.issue_time(0), 0);
        o.record(50);
        // Third read waits for the earliest completion (50).
        assert_eq!(o.issue_time(10), 50);
        o.record(300);
        assert_eq!(o.stalls(), 1);
        assert_eq!(o.in_flight(), 2);
        // At 400 everything has completed.
        assert_eq!(o.issue_time(400), 400);
        assert_eq!(o.in_flight(), 0);
    }

    #[test]
    fn outstanding_reads_match_a_min_heap() {
        // The tracker must give a min-heap's issue times, stalls and occupancy for any order of
        // completions and of issue times (a NIC's streams issue out of time order): a
        // pseudo-random walk whose load swings between idle and short of tags, so the tracker
        // goes between its lazy and its heap form many times, at several caps.
        for cap in [1usize, 2, 5, 64] {
            let mut o = OutstandingReads::new(cap as u32);
            let mut heap: BinaryHeap<Reverse<Ps>> = BinaryHeap::new();
            let (mut heap_stalls, mut x, mut base) = (0u64, 0x9e37_79b9_7f4a_7c15u64, 0);
            let (mut lazy, mut loaded) = (0, 0);
            for i in 0..40_000u64 {
                xorshift(&mut x);
                // Busy phases issue every ~2 ps, idle ones every ~400.
                base += if (i / 3000) % 2 == 0 { x % 4 } else { x % 800 };
                // Up to 50 ps earlier or 100 later than the running time: out of order.
                let ready = (base + (x >> 8) % 150).saturating_sub(50);
                let mut t = ready;
                let expect = loop {
                    while heap.peek().is_some_and(|&Reverse(d)| d <= t) {
                        heap.pop();
                    }
                    if heap.len() < cap {
                        break t;
                    }
                    t = heap.pop().unwrap().0;
                    heap_stalls += 1;
                };
                assert_eq!(o.issue_time(ready), expect, "cap {cap}, issue {i}");
                let done = expect + 100 + (x >> 20) % 300;
                o.record(done);
                heap.push(Reverse(done));
                if i % 97 == 0 {
                    assert_eq!(o.in_flight(), heap.len(), "cap {cap}, issue {i}");
                }
                if o.loaded {
                    loaded += 1;
                } else {
                    lazy += 1;
                }
            }
            assert_eq!(o.stalls(), heap_stalls, "cap {cap}");
            assert!(heap_stalls > 100, "cap {cap}: the cap binds: {heap_stalls}");
            // Below 4 tags the lazy form never comes back (a quarter of the cap is 0).
            assert!(
                cap < 4 || (lazy > 1000 && loaded > 1000),
                "cap {cap}: {lazy} {loaded}"
            );
        }
    }

    #[test]
    fn a_lazy_run_of_reads_is_the_reads_one_by_one() {
        // Runs of reads at one time, recorded in one go whenever the lazy list has room, and
        // otherwise one by one: the same issue times, stalls and reads in flight as recording
        // every read one by one, through clean-ups and heap phases (the cap binds).
        let mut bulk = OutstandingReads::new(64);
        let mut one = OutstandingReads::new(64);
        let (mut x, mut now) = (0x9e37_79b9_7f4a_7c15u64, 0);
        let (mut runs, mut lazy_runs) = (0, 0);
        for run in 0..3_000u64 {
            xorshift(&mut x);
            now += if (run / 300) % 2 == 0 {
                x % 50
            } else {
                x % 5_000
            };
            let n = (x >> 30) as usize % 40;
            let dones: Vec<Ps> = (0..n as u64)
                .map(|j| now + 400 + (x >> (j % 40)) % 900)
                .collect();
            runs += 1;
            if n <= bulk.lazy_room() {
                lazy_runs += 1;
                bulk.issue_lazy_run(now, &dones);
            } else {
                for &d in &dones {
                    let t = bulk.issue_time(now);
                    bulk.record(d + (t - now));
                }
            }
            for &d in &dones {
                let t = one.issue_time(now);
                one.record(d + (t - now));
            }
            assert_eq!(bulk.issue_time(now), one.issue_time(now), "run {run}");
            assert_eq!(bulk.in_flight(), one.in_flight(), "run {run}");
        }
        assert_eq!(bulk.stalls(), one.stalls());
        assert!(one.stalls() > 100, "the cap binds: {}", one.stalls());
        assert!(lazy_runs > 100 && lazy_runs < runs, "{lazy_runs} of {runs}");
    }

    fn spec_profile() -> HardwareProfile {
        let mut p = HardwareProfile::default();
        p.nic.pcie.efficiency = Efficiency::Spec;
        p
    }

    #[test]
    fn unloaded_read_is_rtt0_plus_serialisation() {
        let p = spec_profile();
        let link = PcieLink::from_profile(&p.nic.pcie).unwrap();
        let mut tl = Timelines::from_profile(&p).unwrap();
        let t = link.read(0, 1496);
        let r = tl.dma_read(1_000, t, 0);
        let c = Cost::per_byte_at_bps(link.capacity_bps());
        let want = 1_000 + c.time_ps(72) + 550_000 + c.time_ps(1616);
        assert_eq!(r.done, want);
        assert_eq!(r.issued, 1_000);
        // With an LLC-miss adder of 40 ns the read completes 40 ns later (on a fresh timeline).
        let mut tl = Timelines::from_profile(&p).unwrap();
        assert_eq!(tl.dma_read(1_000, t, 40_000).done, want + 40_000);
        // Remote NUMA adds 107 ns.
        let mut q = p.clone();
        q.nic.pcie.numa_remote = true;
        let mut tl = Timelines::from_profile(&q).unwrap();
        assert_eq!(tl.dma_read(1_000, t, 0).done, want + 107_000);
    }

    #[test]
    fn littles_law_caps_read_rate() {
        // NFP-like: 34 outstanding reads, RTT0 546 ns → ≈ 62 M reads/s of 64 B (measured 62.3).
        let mut p = spec_profile();
        p.nic.pcie.lanes = 8;
        p.nic.pcie.rtt0_ns = 546;
        p.nic.pcie.max_outstanding_reads = 34;
        let link = PcieLink::from_profile(&p.nic.pcie).unwrap();
        let mut tl = Timelines::from_profile(&p).unwrap();
        let t = link.read(0, 64);
        let n = 20_000u64;
        let mut last = 0;
        for _ in 0..n {
            last = tl.dma_read(0, t, 0).done;
        }
        let rate = n as f64 / (last as f64 * 1e-12);
        assert!((rate / 62.3e6 - 1.0).abs() < 0.05, "{rate}");
        assert!(tl.reads().stalls() > 0);
        // With 256 tags the link (86 M/s at 64 B on Gen3 x8) is the limit instead.
        p.nic.pcie.max_outstanding_reads = 256;
        let mut tl = Timelines::from_profile(&p).unwrap();
        for _ in 0..n {
            last = tl.dma_read(0, t, 0).done;
        }
        let rate = n as f64 / (last as f64 * 1e-12);
        assert!((rate / link.ops_per_sec(t) - 1.0).abs() < 0.01, "{rate}");
    }

    #[test]
    fn littles_law_examples_section_2_2() {
        // NFP: 62.3 M/s × 546 ns ≈ 34 outstanding.
        assert_eq!(format!("{:.0}", littles_law_inflight(62.3e6, 546.0)), "34");
        // KV-Direct: 64 tags at 1050 ns cap 64 B reads at ≈ 60 Mops (87 needs ≈ 92 in flight).
        assert_eq!(format!("{:.0}", littles_law_rate(64.0, 1050.0) / 1e6), "61");
        assert!(littles_law_inflight(87e6, 1050.0) > 91.0);
        // 64 B forwarding at 148.8 Mpps needs ≥ 82 Tx data reads in flight at 550 ns.
        assert!(littles_law_inflight(148.8e6, 550.0) > 81.0);
        // 1500 B at 8.224 Mpps: 3 MRd per packet (MRRS 512) at ≈ 650 ns ≈ 16 in flight.
        assert_eq!(
            format!("{:.0}", littles_law_inflight(3.0 * 8.224e6, 650.0)),
            "16"
        );
    }

    #[test]
    fn dma_engine_op_rate() {
        // 47.4 M writes/s: back-to-back posted writes are spaced by 1/47.4 µs, not by the link.
        let mut p = spec_profile();
        p.nic.pcie.max_write_mops = 47.4;
        let link = PcieLink::from_profile(&p.nic.pcie).unwrap();
        let mut tl = Timelines::from_profile(&p).unwrap();
        let w = link.write(0, 64);
        let mut last = tl.posted_write(0, w);
        let first_end = last.end;
        for _ in 1..1000 {
            last = tl.posted_write(0, w);
        }
        let spacing = (last.end - first_end) as f64 / 999.0;
        assert!((1e12 / spacing / 47.4e6 - 1.0).abs() < 0.001, "{spacing}");
        // done = end + posted latency (RTT0/2).
        assert_eq!(last.done, last.end + 275_000);
    }

    #[test]
    fn posted_writes_stay_ordered() {
        let p = HardwareProfile::default();
        let c = OpCosts::new(&p).unwrap();
        let mut tl = Timelines::from_profile(&p).unwrap();
        let data = tl.posted_write(0, c.rx_data_write(1496));
        let cqe = tl.posted_write(0, c.cqe_write(1));
        assert!(cqe.start >= data.end && cqe.done > data.done);
    }

    #[test]
    fn utilization_and_bottleneck() {
        let p = HardwareProfile::default();
        let mut tl = Timelines::from_profile(&p).unwrap();
        let s0 = tl.snapshot(0);
        // Wire Rx fully busy for 1 µs: 12 500 B at 100 Gb/s; wire Tx half busy.
        tl.get_mut(ResourceKind::WireRx).reserve(0, 12_500);
        tl.get_mut(ResourceKind::WireTx).reserve(0, 6_250);
        let s1 = tl.snapshot(1_000_000);
        let u = s1.utilization_since(&s0);
        assert_eq!(u[2], (ResourceKind::WireRx, 1.0));
        assert_eq!(u[3], (ResourceKind::WireTx, 0.5));
        assert_eq!(u[0], (ResourceKind::PcieUp, 0.0));
        assert_eq!(pick_bottleneck(&u, 0.95), Some(ResourceKind::WireRx));
        assert_eq!(pick_bottleneck(&u, 1.01), None);
        assert_eq!(pick_bottleneck::<ResourceKind>(&[], 0.0), None);
        // Ties go to the first entry.
        assert_eq!(
            pick_bottleneck(&[("a", 0.97), ("b", 0.97)], 0.95),
            Some("a")
        );
        assert_eq!(s1.utilization_since(&s1)[0].1, 0.0);
        assert_eq!(
            ResourceKind::ALL.map(ResourceKind::as_str).join(","),
            "pcie_up,pcie_down,wire_rx,wire_tx,dma_engine,nicmem,hostmem"
        );
    }

    #[test]
    fn forwarding_1500_at_line_rate_saturates_pcie_up_in_host_mode() {
        // Drive the per-operation charges through the timelines at 100 GbE line rate for 1 ms:
        // host mode books ≈ 99.8 % of calibrated PCIe up, nmNFV ≈ 10 % (reference §4).
        for (mode, want_up) in [
            (DatapathMode::Host, 0.998),
            (DatapathMode::NicInline, 0.103),
        ] {
            let p = HardwareProfile::default();
            let c = OpCosts::new(&p).unwrap();
            let d = &p.nic.descriptors;
            let mut tl = Timelines::from_profile(&p).unwrap();
            let s0 = tl.snapshot(0);
            let wqe = c.tx_wqe(mode, 1496, 64, 64).unwrap();
            let gap = Cost::per_byte_at_gbps(100.0).time_ps(1520);
            let pkts = 8192u64; // multiple of 16 and 32
            for i in 0..pkts {
                let t = i * gap;
                if i % u64::from(d.rx_wqe_fetch_batch) == 0 {
                    tl.dma_read(t, c.rx_wqe_fetch(16, c.rx_wqe_size(mode)), 0);
                }
                tl.posted_write(t, c.rx_data(mode, 1496, 64));
                tl.posted_write(t, c.cqe_write(1));
                if i % u64::from(d.tx_burst) == 0 {
                    tl.mmio_write(t, c.tx_doorbell());
                    tl.dma_read(t, c.tx_wqe_fetch(wqe.fetched_bytes * 32), 0);
                    tl.posted_write(t, c.tx_cqe_write());
                }
                let data = c.tx_data(&wqe);
                if data != Traffic::ZERO {
                    tl.dma_read(t, data, 0);
                }
            }
            let s = tl.snapshot(pkts * gap);
            let u = s.utilization_since(&s0);
            let up = u[0].1;
            assert!((up / want_up - 1.0).abs() < 0.01, "{mode}: {up}");
        }
    }

    #[test]
    fn dependent_tx_chain_section_2_4() {
        // doorbell (posted, visible after RTT0/2) → WQE read → data read, at 119.10 Gb/s.
        // Reference: ≈ 1.48 µs (host), ≈ 1.38 µs (nmNFV-), ≈ 0.83 µs (nmNFV). Our RTT model
        // also serialises the request and the completion TLP overheads, so each read is a few
        // ns longer; we hold the reference within 2 % and the ordering exactly.
        let p = HardwareProfile::default();
        let c = OpCosts::new(&p).unwrap();
        let chain = |mode: DatapathMode| {
            let mut tl = Timelines::from_profile(&p).unwrap();
            let wqe = c.tx_wqe(mode, 1496, 64, 64).unwrap();
            let db = tl.mmio_write(0, c.tx_doorbell());
            let w = tl.dma_read(db.done, c.tx_wqe_fetch(wqe.fetched_bytes), 0);
            let hdr = if wqe.host_header_read > 0 {
                wqe.host_header_read
            } else {
                wqe.host_payload_read
            };
            let mut done = w.done;
            if hdr > 0 {
                // host: one read of the whole frame; nmNFV-: the 64 B header read.
                done = tl.dma_read(w.done, c.tx_data_read(hdr), 0).done;
            }
            done as f64 / 1e6
        };
        let (host, nm_minus, nm) = (
            chain(DatapathMode::Host),
            chain(DatapathMode::NicPayload),
            chain(DatapathMode::NicInline),
        );
        assert!((host / 1.48 - 1.0).abs() < 0.02, "{host}");
        assert!((nm_minus / 1.38 - 1.0).abs() < 0.02, "{nm_minus}");
        assert!((nm / 0.83 - 1.0).abs() < 0.02, "{nm}");
        assert!(nm < nm_minus && nm_minus < host);
    }
}
