//! A burst: a fixed-capacity batch of packets with one verdict each.
//!
//! Storage is allocated once (capacity = burst size, default 32); pushing and clearing never
//! allocate. Network functions walk the burst in place and set verdicts; packets whose verdict is
//! already a drop should be skipped by later functions.
//!
//! The burst remembers whether every verdict is still the same (drivers fill a burst with one
//! default verdict, and many chains never change it), so the run loop's "does the whole burst go
//! to one port?" question is answered without a scan in that case.

use crate::packet::Packet;
use crate::verdict::{DropReason, Verdict};

/// Default burst size (DPDK's customary 32).
pub const DEFAULT_BURST: usize = 32;

/// A batch of packets with verdicts.
#[derive(Debug)]
pub struct Burst {
    pkts: Vec<Packet>,
    verdicts: Vec<Verdict>,
    cap: usize,
    /// True when every verdict equals the first (vacuously true when empty).
    uniform: bool,
}

impl Burst {
    /// An empty burst able to hold `cap` packets.
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            pkts: Vec::with_capacity(cap),
            verdicts: Vec::with_capacity(cap),
            cap,
            uniform: true,
        }
    }

    /// Maximum number of packets.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Packets in the burst.
    #[inline]
    pub fn len(&self) -> usize {
        self.pkts.len()
    }

    /// True when empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// Room left.
    #[inline]
    pub fn room(&self) -> usize {
        self.cap - self.pkts.len()
    }

    /// Appends a packet with an initial verdict. Returns the packet back if the burst is full.
    #[inline]
    pub fn push(&mut self, pkt: Packet, verdict: Verdict) -> Result<(), Packet> {
        let len = self.pkts.len();
        // Checking the vectors' capacities lets the compiler drop `Vec::push`'s growth path, so
        // the packet is written straight into the burst rather than through a stack temporary
        // whose wide re-load stalls on store forwarding (a measurable share of a DPDK io-fwd loop).
        if len >= self.cap
            || len >= self.pkts.capacity()
            || self.verdicts.len() >= self.verdicts.capacity()
        {
            return Err(pkt);
        }
        self.uniform &= self.verdicts.first().is_none_or(|&f| f == verdict);
        self.pkts.push(pkt);
        self.verdicts.push(verdict);
        Ok(())
    }

    /// Appends the packets of `pkts`, all with `verdict`, until the burst is full; returns how
    /// many were appended. Drivers fill a received burst this way: with an iterator of known
    /// length (a mapped slice) the packets are written straight into the burst's storage and its
    /// length is updated once, without the per-packet capacity checks of [`Burst::push`].
    #[inline]
    pub fn extend_from(
        &mut self,
        verdict: Verdict,
        pkts: impl IntoIterator<Item = Packet>,
    ) -> usize {
        let before = self.pkts.len();
        self.pkts.extend(pkts.into_iter().take(self.cap - before));
        let added = self.pkts.len() - before;
        if added > 0 {
            self.uniform &= self.verdicts.first().is_none_or(|&f| f == verdict);
            self.verdicts.resize(self.pkts.len(), verdict);
        }
        added
    }

    /// The port every packet goes to, if all verdicts are `Tx` of one port (the common case the
    /// run loop sends without sorting).
    #[inline]
    pub fn single_tx_port(&self) -> Option<u16> {
        let first = *self.verdicts.first()?;
        match first {
            Verdict::Tx(p) if self.uniform || self.verdicts.iter().all(|&v| v == first) => Some(p),
            _ => None,
        }
    }

    /// Moves every packet into `out` (which must be empty) without copying them: the two
    /// vectors swap storage, so `out` should have the burst's capacity. Verdicts are cleared.
    /// If `out` is not empty the packets are appended instead.
    #[inline]
    pub fn take_packets(&mut self, out: &mut Vec<Packet>) {
        if out.is_empty() && out.capacity() >= self.cap {
            std::mem::swap(&mut self.pkts, out);
        } else {
            out.append(&mut self.pkts);
        }
        self.verdicts.clear();
        self.uniform = true;
    }

    /// Packet `i`.
    #[inline]
    pub fn packet(&self, i: usize) -> &Packet {
        &self.pkts[i]
    }

    /// Packet `i`, writable.
    #[inline]
    pub fn packet_mut(&mut self, i: usize) -> &mut Packet {
        &mut self.pkts[i]
    }

    /// Verdict of packet `i`.
    #[inline]
    pub fn verdict(&self, i: usize) -> Verdict {
        self.verdicts[i]
    }

    /// Sets the verdict of packet `i`.
    #[inline]
    pub fn set_verdict(&mut self, i: usize, v: Verdict) {
        self.verdicts[i] = v;
        self.uniform &= self.verdicts[0] == v;
    }

    /// Marks packet `i` dropped for `reason`.
    #[inline]
    pub fn drop_packet(&mut self, i: usize, reason: DropReason) {
        self.verdicts[i] = Verdict::Drop(reason);
        self.uniform &= self.verdicts[0] == Verdict::Drop(reason);
    }

    /// All packets with their verdicts, for in-place processing.
    #[inline]
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&mut Packet, &mut Verdict)> {
        // Verdicts may change behind the returned references.
        self.uniform = false;
        self.pkts.iter_mut().zip(self.verdicts.iter_mut())
    }

    /// All packets with their verdicts.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = (&Packet, &Verdict)> {
        self.pkts.iter().zip(self.verdicts.iter())
    }

    /// Removes every packet, yielding each with its verdict.
    #[inline]
    pub fn drain(&mut self) -> impl Iterator<Item = (Packet, Verdict)> + '_ {
        self.uniform = true;
        self.pkts.drain(..).zip(self.verdicts.drain(..))
    }

    /// Drops every packet (returning buffers to their pools).
    pub fn clear(&mut self) {
        self.pkts.clear();
        self.verdicts.clear();
        self.uniform = true;
    }
}

impl Default for Burst {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_BURST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::DatapathMode;
    use crate::testkit::PacketFactory;

    fn packets(f: &PacketFactory, n: usize) -> Vec<Packet> {
        (0..n)
            .map(|_| f.packet(&[0u8; 60]).expect("pool has buffers"))
            .collect()
    }

    #[test]
    fn extend_from_stops_at_capacity_and_sets_every_verdict() {
        let f = PacketFactory::new(DatapathMode::Host, 64, 1514, 64);
        let mut b = Burst::with_capacity(4);
        assert_eq!(b.extend_from(Verdict::Tx(1), packets(&f, 3)), 3);
        // Only one more fits; the rest of the iterator is not taken.
        assert_eq!(b.extend_from(Verdict::Tx(1), packets(&f, 3)), 1);
        assert_eq!(b.len(), 4);
        assert!((0..4).all(|i| b.verdict(i) == Verdict::Tx(1)));
        assert_eq!(b.single_tx_port(), Some(1));
        assert_eq!(b.extend_from(Verdict::Tx(1), packets(&f, 1)), 0);
    }

    #[test]
    fn single_tx_port_follows_every_way_a_verdict_changes() {
        let f = PacketFactory::new(DatapathMode::Host, 64, 1514, 64);
        let mut b = Burst::with_capacity(8);
        b.extend_from(Verdict::Tx(0), packets(&f, 4));
        assert_eq!(b.single_tx_port(), Some(0));
        b.set_verdict(2, Verdict::Tx(0));
        assert_eq!(
            b.single_tx_port(),
            Some(0),
            "same verdict again keeps it uniform"
        );
        b.set_verdict(3, Verdict::Tx(1));
        assert_eq!(b.single_tx_port(), None);
        b.set_verdict(3, Verdict::Tx(0));
        assert_eq!(
            b.single_tx_port(),
            Some(0),
            "the scan still finds a uniform burst"
        );
        b.drop_packet(1, DropReason::Malformed);
        assert_eq!(b.single_tx_port(), None);
        b.clear();
        b.extend_from(Verdict::Tx(2), packets(&f, 2));
        assert_eq!(b.single_tx_port(), Some(2));
        // A different verdict appended to a uniform burst.
        b.extend_from(Verdict::Tx(3), packets(&f, 1));
        assert_eq!(b.single_tx_port(), None);
        b.clear();
        b.extend_from(Verdict::Tx(2), packets(&f, 2));
        for (_, v) in b.iter_mut() {
            *v = Verdict::Drop(DropReason::Policy);
        }
        assert_eq!(
            b.single_tx_port(),
            None,
            "verdicts changed through iter_mut"
        );
        let mut out = Vec::with_capacity(8);
        b.take_packets(&mut out);
        assert_eq!(out.len(), 2);
        assert!(
            b.push(packets(&f, 1).pop().unwrap(), Verdict::Tx(5))
                .is_ok()
        );
        assert_eq!(b.single_tx_port(), Some(5));
    }
}
