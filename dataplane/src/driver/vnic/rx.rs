//! The Rx side of a virtual NIC queue: descriptor rings, the NIC's receive engine (validate the
//! descriptor, DMA the frame, write a completion) and the driver's completion polling.
//!
//! Rings (each a ring of 16 B data-segment WQEs plus the driver's shadow array of posted buffers,
//! like the mlx5 PMD's `elts`):
//! - the **header ring** (host): whole frames in `host` mode, the first `split_offset` bytes in the
//!   split modes;
//! - the **primary payload ring** (nicmem, `nic-payload`/`nic-inline`);
//! - the **secondary payload ring** (host; the only payload ring in `split`).
//!
//! The NIC takes a payload buffer from the primary ring while it has one posted and spills to the
//! secondary ring when it is empty; the completion says which ring served the payload, and the
//! driver returns each buffer to its own pool (and so, on refill, to its own ring).
//!
//! Every descriptor is validated: the key must be registered to the queue's protection domain, the
//! range must lie inside the region, and (stricter than hardware, so that a corrupt descriptor can
//! never make the model touch memory it does not own) inside the buffer posted in that slot. A
//! failure produces an error completion with an mlx5 syndrome and a counter; the frame is dropped.

use nicmem::{AccessError, Buf, MemClass, MemKey, PoolCache, ProtectionDomain, RegionTable};

use super::desc::{Cqe, DataSeg, SEG, cqe_op, cqe_ring, syndrome};

/// A ring of Rx WQEs with the driver's shadow array of posted buffers.
pub(crate) struct RxRing<K: MemClass> {
    wqes: Box<[[u8; SEG]]>,
    bufs: Box<[Option<Buf<K>>]>,
    mask: u32,
    /// Driver producer count (WQEs posted).
    pi: u32,
    /// NIC consumer count.
    nic_ci: u32,
    /// Driver consumer count (buffers harvested from completions).
    sw_ci: u32,
    pub(crate) cache: PoolCache<K>,
}

impl<K: MemClass> RxRing<K> {
    pub(crate) fn new(size: usize, cache: PoolCache<K>) -> Self {
        let size = size.next_power_of_two();
        Self {
            wqes: vec![[0u8; SEG]; size].into_boxed_slice(),
            bufs: (0..size).map(|_| None).collect(),
            mask: size as u32 - 1,
            pi: 0,
            nic_ci: 0,
            sw_ci: 0,
            cache,
        }
    }

    /// WQEs posted and not yet consumed by the NIC.
    #[inline]
    pub(crate) fn posted(&self) -> u32 {
        self.pi.wrapping_sub(self.nic_ci)
    }

    /// The driver's producer count (WQEs ever posted).
    #[inline]
    pub(crate) fn producer(&self) -> u32 {
        self.pi
    }

    /// The NIC's consumer count (WQEs ever consumed).
    #[inline]
    pub(crate) fn consumer(&self) -> u32 {
        self.nic_ci
    }

    /// Posts buffers until the ring is full or the pool is empty; returns the number of failed
    /// allocations (0 or 1: the driver stops at the first failure, like DPDK's `rx_nombuf`).
    pub(crate) fn refill(&mut self, limit: u32) -> u64 {
        let size = self.mask + 1;
        let target = size.min(limit);
        while self.pi.wrapping_sub(self.sw_ci) < target {
            let Some(buf) = self.cache.alloc() else {
                return 1;
            };
            let slot = (self.pi & self.mask) as usize;
            DataSeg {
                byte_count: buf.capacity() as u32,
                key: buf.key().0,
                addr: buf.iova(),
            }
            .write(&mut self.wqes[slot]);
            self.bufs[slot] = Some(buf);
            self.pi = self.pi.wrapping_add(1);
        }
        0
    }

    /// NIC side: consumes the next posted WQE, validates it for a write of `len` bytes and, if
    /// `write` and valid, DMAs `src[..len]` into its buffer (`src` may be longer: the copy may
    /// round up to 16 bytes); returns the WQE counter and the validation result. One decode of
    /// the WQE serves both. On a validation failure the WQE is still consumed (its buffer goes
    /// back to the driver through the error completion).
    #[inline]
    pub(crate) fn nic_place(
        &mut self,
        table: &RegionTable,
        pd: ProtectionDomain,
        src: &[u8],
        len: usize,
        write: bool,
    ) -> (u16, Result<(), u8>) {
        let slot = (self.nic_ci & self.mask) as usize;
        let counter = self.nic_ci as u16;
        self.nic_ci = self.nic_ci.wrapping_add(1);
        let seg = DataSeg::read(&self.wqes[slot]);
        if seg.byte_count == 0 || len > seg.byte_count as usize {
            return (counter, Err(syndrome::LOCAL_LENGTH));
        }
        let Some(b) = &mut self.bufs[slot] else {
            return (counter, Err(syndrome::LOCAL_PROTECTION));
        };
        // The driver reads received bytes from the start of the buffer, so the NIC must be told
        // to write there: any other address is not the posted buffer. A descriptor naming its
        // own buffer's key and start lies inside a region registered to this queue's domain by
        // construction; anything else goes through the full region check, as hardware does.
        if seg.key != b.key().0 || seg.addr != b.iova() {
            let check = table
                .resolve(pd, MemKey(seg.key), seg.addr, len as u32)
                .map_err(|_| syndrome::LOCAL_PROTECTION)
                .and_then(|_| match b.locate(MemKey(seg.key), seg.addr, len as u32) {
                    Ok(_) | Err(AccessError::NotPosted { .. }) => Err(syndrome::LOCAL_PROTECTION),
                    Err(_) => Err(syndrome::LOCAL_LENGTH),
                });
            return (counter, check);
        }
        if len > b.capacity() {
            return (counter, Err(syndrome::LOCAL_LENGTH));
        }
        if write {
            // Cannot fail: the range was checked against the buffer above.
            let _ = b.device_write_prefix(0, src, len);
        }
        (counter, Ok(()))
    }

    /// Driver side: takes the buffer of the slot a completion names (they complete in order).
    #[inline]
    pub(crate) fn harvest(&mut self, counter: u16) -> Option<Buf<K>> {
        let slot = (counter as u32 & self.mask) as usize;
        self.sw_ci = self.sw_ci.wrapping_add(1);
        self.bufs[slot].take()
    }

    /// Overwrites the next WQE the NIC will consume (tests and fuzzing of descriptor handling).
    pub(crate) fn corrupt_next(&mut self, f: impl FnOnce(&mut [u8; SEG])) -> bool {
        if self.posted() == 0 {
            return false;
        }
        let slot = (self.nic_ci & self.mask) as usize;
        f(&mut self.wqes[slot]);
        true
    }

    /// Returns every posted buffer to the pool (queue teardown).
    pub(crate) fn drain(&mut self) {
        for b in self.bufs.iter_mut() {
            if let Some(b) = b.take() {
                self.cache.free(b);
            }
        }
        self.pi = 0;
        self.nic_ci = 0;
        self.sw_ci = 0;
    }
}

/// A completion queue of 64 B CQEs with an ownership bit that flips on every pass.
pub(crate) struct CompletionQueue {
    slots: Box<[[u8; 64]]>,
    mask: u32,
    /// NIC producer count.
    pi: u32,
    /// Driver consumer count.
    ci: u32,
}

impl CompletionQueue {
    pub(crate) fn new(size: usize) -> Self {
        let size = size.next_power_of_two();
        Self {
            // Pre-set every slot's ownership bit to "previous pass" so nothing reads as valid.
            slots: vec![
                {
                    let mut s = [0u8; 64];
                    s[63] = 1;
                    s
                };
                size
            ]
            .into_boxed_slice(),
            mask: size as u32 - 1,
            pi: 0,
            ci: 0,
        }
    }

    #[inline]
    fn owner(counter: u32, mask: u32) -> bool {
        (counter / (mask + 1)) & 1 == 1
    }

    /// Room for the NIC to write more completions.
    #[inline]
    pub(crate) fn room(&self) -> u32 {
        (self.mask + 1) - self.pi.wrapping_sub(self.ci)
    }

    /// NIC side: writes a completion.
    #[inline]
    pub(crate) fn push(&mut self, cqe: &Cqe) {
        let slot = (self.pi & self.mask) as usize;
        cqe.write(&mut self.slots[slot], Self::owner(self.pi, self.mask));
        self.pi = self.pi.wrapping_add(1);
    }

    /// Driver side: the next completion, if the NIC has written it.
    #[inline]
    pub(crate) fn poll(&mut self) -> Option<Cqe> {
        let slot = (self.ci & self.mask) as usize;
        let cqe = Cqe::read(&self.slots[slot], Self::owner(self.ci, self.mask))?;
        self.ci = self.ci.wrapping_add(1);
        Some(cqe)
    }

    /// Completions written and not yet polled.
    #[inline]
    pub(crate) fn pending(&self) -> u32 {
        self.pi.wrapping_sub(self.ci)
    }

    /// The NIC's producer count (the slot the next completion goes to).
    #[inline]
    pub(crate) fn producer(&self) -> u32 {
        self.pi
    }

    /// The driver's consumer count (the slot the next poll reads).
    #[inline]
    pub(crate) fn consumer(&self) -> u32 {
        self.ci
    }
}

/// Builds an Rx completion.
#[inline]
pub(crate) fn rx_cqe(
    rss_hash: u32,
    len: usize,
    hdr_len: usize,
    hdr_counter: u16,
    ring: u8,
    payload_counter: u16,
    err: Option<u8>,
) -> Cqe {
    Cqe {
        rss_hash,
        byte_cnt: len as u32,
        hdr_len: hdr_len as u16,
        ring,
        syndrome: err.unwrap_or(0),
        wqe_counter: hdr_counter,
        payload_counter,
        opcode: if err.is_some() {
            cqe_op::RESP_ERR
        } else {
            cqe_op::RESP_SEND
        },
    }
}

/// Which payload ring a completion names.
pub(crate) fn ring_of(cqe: &Cqe) -> u8 {
    if cqe.ring > cqe_ring::SECONDARY {
        cqe_ring::NONE
    } else {
        cqe.ring
    }
}
