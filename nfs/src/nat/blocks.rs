//! Port blocks (bulk port allocation): a subscriber gets its outside ports in blocks of
//! `port_block` consecutive ports of its paired address, and the log holds one record per block
//! allocated or released instead of one per session (RFC 6888 REQ-14 on log volume; Juniper's
//! and VPP's CGN logging work the same way).
//!
//! Why it is built this way:
//!
//! - **Per worker, preallocated.** Each worker cuts its own port slice of every outside address
//!   into blocks (a remainder shorter than a block is not used); every block has an owner, a
//!   count of the mappings in it and a link to its owner's next block, in arrays sized when the
//!   NAT is built. Taking or returning a block is a pop or a push on the address's free stack:
//!   no allocation, bounded work.
//! - **A block is free only when empty.** Mappings on hold (`port_reuse_hold_s`) count as in
//!   the block, so a block goes back only after its last port's hold: another subscriber never
//!   gets a port the log still ties to the previous one.
//! - **A per-subscriber limit** (`port_block_limit` blocks per worker) bounds what one inside
//!   address can take; a new mapping beyond it is refused as `subscriber_limit`.

use crate::flow_table::{FlowKey, FlowTable, FullPolicy};

/// No block (end of an owner's list).
const NONE: u32 = u32::MAX;

/// Why no block could be had.
pub(super) enum NoBlock {
    /// The subscriber holds its limit of blocks.
    Limit,
    /// The address has no free block left.
    Exhausted,
}

/// One worker's port blocks (see the module docs).
pub(super) struct PortBlocks {
    size: u16,
    lo: u16,
    per_addr: u32,
    limit: u32,
    /// Per block: the inside address owning it (valid while `used > 0` or it is linked).
    owner: Vec<u32>,
    /// Per block: mappings (live or on hold) in it.
    used: Vec<u16>,
    /// Per block: the owner's next block, or [`NONE`].
    next: Vec<u32>,
    /// Per block: the next port offset to try.
    cursor: Vec<u16>,
    /// Per address: a stack of its free blocks (`per_addr` entries each) and its height.
    free: Vec<u32>,
    top: Vec<u32>,
    /// Inside address -> first block << 32 | blocks held.
    subs: FlowTable<u64>,
    /// Blocks allocated and released (for the counters).
    pub allocated: u64,
    pub released: u64,
}

impl PortBlocks {
    /// Blocks of `size` ports cut from `lo..=hi` on each of `addresses` outside addresses, at
    /// most `limit` per subscriber.
    pub fn new(
        addresses: u32,
        lo: u16,
        hi: u16,
        size: u16,
        limit: u32,
        seed: u64,
    ) -> Result<Self, String> {
        let per_addr = (u32::from(hi) - u32::from(lo) + 1) / u32::from(size.max(1));
        if size == 0 || per_addr == 0 {
            return Err(format!(
                "needs 1..={} (the ports of one worker's slice {lo}-{hi})",
                u32::from(hi) - u32::from(lo) + 1
            ));
        }
        let n = (addresses as usize) * (per_addr as usize);
        let subs = FlowTable::try_new(n, 0, FullPolicy::Drop, seed)
            .map_err(|e| format!("port block subscriber table: {e}"))?;
        let mut free = Vec::with_capacity(n);
        for _ in 0..addresses {
            free.extend((0..per_addr).rev());
        }
        Ok(Self {
            size,
            lo,
            per_addr,
            limit,
            owner: vec![0; n],
            used: vec![0; n],
            next: vec![NONE; n],
            cursor: vec![0; n],
            free,
            top: vec![per_addr; addresses as usize],
            subs,
            allocated: 0,
            released: 0,
        })
    }

    /// Bytes [`PortBlocks::new`] allocates for `blocks` blocks in all.
    pub fn memory_for(blocks: u64) -> u64 {
        blocks
            .saturating_mul(4 + 2 + 4 + 2 + 4)
            .saturating_add(FlowTable::<u64>::memory_for(blocks as usize))
    }

    fn key(sub: u32) -> FlowKey {
        FlowKey::new(sub, 0, 0, 0, 0)
    }

    /// `(first block, blocks held)` of subscriber `sub`.
    pub fn of(&self, sub: u32) -> (u32, u32) {
        self.subs
            .peek(&Self::key(sub))
            .map_or((NONE, 0), |v| ((v >> 32) as u32, v as u32))
    }

    /// The block after `b` in its owner's list ([`NONE`] at the end).
    pub fn next_of(&self, b: u32) -> u32 {
        self.next[b as usize]
    }

    /// `(first port, last port)` of block `b`.
    pub fn ports(&self, b: u32) -> (u16, u16) {
        let first = u32::from(self.lo) + (b % self.per_addr) * u32::from(self.size);
        (first as u16, (first + u32::from(self.size) - 1) as u16)
    }

    /// The next port of block `b` to try.
    pub fn candidate(&mut self, b: u32) -> u16 {
        let c = &mut self.cursor[b as usize];
        let off = *c;
        *c = if off + 1 >= self.size { 0 } else { off + 1 };
        self.ports(b).0 + off
    }

    /// Whether block `b` has no port left for a new mapping.
    pub fn full(&self, b: u32) -> bool {
        self.used[b as usize] >= self.size
    }

    /// Blocks one subscriber may hold.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Ports of a block.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// A new block of address `aidx` for subscriber `sub`.
    pub fn alloc(&mut self, sub: u32, aidx: u32) -> Result<u32, NoBlock> {
        let (first, held) = self.of(sub);
        if held >= self.limit {
            return Err(NoBlock::Limit);
        }
        let a = aidx as usize;
        if self.top[a] == 0 {
            return Err(NoBlock::Exhausted);
        }
        let k = Self::key(sub);
        let v = u64::from(held + 1);
        self.top[a] -= 1;
        let local = self.free[a * self.per_addr as usize + self.top[a] as usize];
        let b = aidx * self.per_addr + local;
        if self.subs.insert(k, u64::from(b) << 32 | v, 0).is_err() {
            // The table holds as many entries as there are blocks: cannot fail while a block is
            // free; refused like an exhausted address if it ever does.
            self.top[a] += 1;
            return Err(NoBlock::Exhausted);
        }
        self.owner[b as usize] = sub;
        self.next[b as usize] = first;
        self.cursor[b as usize] = 0;
        self.allocated += 1;
        Ok(b)
    }

    /// The block holding port `port` of address `aidx`, if the port is in a block.
    pub fn block_of(&self, aidx: u32, port: u16) -> Option<u32> {
        let off = u32::from(port.checked_sub(self.lo)?) / u32::from(self.size);
        (off < self.per_addr).then_some(aidx * self.per_addr + off)
    }

    /// A mapping took a port of block `b`.
    pub fn take(&mut self, b: u32) {
        self.used[b as usize] += 1;
    }

    /// Undoes a [`PortBlocks::take`] that found no port (the block stays with its owner).
    pub fn untake(&mut self, b: u32) {
        self.used[b as usize] = self.used[b as usize].saturating_sub(1);
    }

    /// A mapping gave back a port of block `b`; the last one releases the block: returns its
    /// owner then.
    pub fn give(&mut self, b: u32) -> Option<u32> {
        let i = b as usize;
        self.used[i] = self.used[i].saturating_sub(1);
        if self.used[i] > 0 {
            return None;
        }
        let sub = self.owner[i];
        let (first, held) = self.of(sub);
        // Unlink `b` from its owner's list (at most `limit` long).
        let new_first = if first == b {
            self.next[i]
        } else {
            let mut p = first;
            while p != NONE && self.next[p as usize] != b {
                p = self.next[p as usize];
            }
            if p == NONE {
                return None;
            }
            self.next[p as usize] = self.next[i];
            first
        };
        let k = Self::key(sub);
        if held <= 1 {
            self.subs.remove(&k);
        } else if self
            .subs
            .insert(k, u64::from(new_first) << 32 | u64::from(held - 1), 0)
            .is_err()
        {
            // Replacing an existing entry needs no room.
            return None;
        }
        self.next[i] = NONE;
        let a = (b / self.per_addr) as usize;
        self.free[a * self.per_addr as usize + self.top[a] as usize] = b % self.per_addr;
        self.top[a] += 1;
        self.released += 1;
        Some(sub)
    }

    /// Frees every block (see [`crate::nat::Nat::clear`]).
    pub fn clear(&mut self) {
        self.subs.clear();
        self.used.fill(0);
        self.next.fill(NONE);
        let per = self.per_addr as usize;
        for (a, t) in self.top.iter_mut().enumerate() {
            for (j, f) in self.free[a * per..(a + 1) * per].iter_mut().enumerate() {
                *f = (per - 1 - j) as u32;
            }
            *t = self.per_addr;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_owned_limited_and_come_back_when_empty() {
        let mut b = PortBlocks::new(2, 1024, 1024 + 4 * 256 - 1 + 100, 256, 2, 1).unwrap();
        let x = b.alloc(7, 1).ok().unwrap();
        assert_eq!(b.ports(x), (1024, 1279), "first block of the address");
        assert_eq!(b.block_of(1, 1100), Some(x));
        assert_eq!(b.block_of(1, 2048), None, "the short remainder");
        let y = b.alloc(7, 1).ok().unwrap();
        assert_ne!(x, y);
        assert!(matches!(b.alloc(7, 1), Err(NoBlock::Limit)));
        assert_eq!(b.of(7).1, 2);
        b.take(x);
        b.take(x);
        assert_eq!(b.give(x), None, "one mapping left");
        assert_eq!(b.give(x), Some(7), "empty: released");
        assert_eq!(b.of(7), (y, 1));
        for s in 100..103 {
            b.alloc(s, 1).ok().unwrap();
        }
        assert!(matches!(b.alloc(200, 1), Err(NoBlock::Exhausted)));
        assert!(b.alloc(200, 0).is_ok(), "another address");
        assert_eq!((b.allocated, b.released), (6, 1));
        b.clear();
        assert_eq!(b.of(7), (NONE, 0));
        assert!(b.alloc(200, 1).is_ok());
    }

    #[test]
    fn candidates_walk_the_block() {
        let mut b = PortBlocks::new(1, 2000, 2999, 4, 1, 1).unwrap();
        let x = b.alloc(1, 0).ok().unwrap();
        let (lo, _) = b.ports(x);
        let c: Vec<u16> = (0..5).map(|_| b.candidate(x)).collect();
        assert_eq!(c, vec![lo, lo + 1, lo + 2, lo + 3, lo]);
    }
}
