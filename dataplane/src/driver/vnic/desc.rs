//! Descriptor and completion formats of the virtual NIC, laid out like mlx5's (big-endian fields,
//! 16 B segments, 64 B WQE basic blocks and 64 B CQEs), so that descriptor handling, validation
//! and the later PCIe accounting are about real bytes.
//!
//! - **Rx WQE data segment** (16 B): byte count (u32), memory key (u32), address (u64).
//! - **Tx WQE**: a sequence of 16 B segments in 64 B WQEBBs: control segment (opcode, WQE index,
//!   DS count, completion-request flag), Ethernet segment (inline header size at byte 12, first
//!   2 inline bytes at 14..16), inline data continuing in 16 B units, then data segments.
//! - **CQE** (64 B): RSS hash, byte count, which Rx ring served the payload, error syndrome, WQE
//!   counter, opcode and ownership bit in the last byte.

/// Size of a descriptor segment.
pub const SEG: usize = 16;
/// Size of a Tx WQE basic block.
pub const WQEBB: usize = 64;
/// Size of a completion entry.
pub const CQE_SIZE: usize = 64;

/// A 16-byte Rx/Tx data segment: `(byte_count, key, addr)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSeg {
    /// Bytes (Rx: buffer size; Tx: bytes to read).
    pub byte_count: u32,
    /// Memory key.
    pub key: u32,
    /// Bus address.
    pub addr: u64,
}

impl DataSeg {
    /// The 16 encoded bytes.
    #[inline(always)]
    pub fn encode(&self) -> [u8; SEG] {
        let w = (u128::from(self.byte_count) << 96)
            | (u128::from(self.key) << 64)
            | u128::from(self.addr);
        w.to_be_bytes()
    }

    /// Encodes into 16 bytes.
    #[inline(always)]
    pub fn write(&self, out: &mut [u8; SEG]) {
        *out = self.encode();
    }

    /// Decodes 16 bytes.
    #[inline(always)]
    pub fn read(b: &[u8; SEG]) -> Self {
        let w = u128::from_be_bytes(*b);
        Self {
            byte_count: (w >> 96) as u32,
            key: (w >> 64) as u32,
            addr: w as u64,
        }
    }
}

/// Tx control-segment opcode for a send (mlx5 `MLX5_OPCODE_SEND`).
pub const OPCODE_SEND: u8 = 0x0a;
/// Control-segment flag: generate a completion for this WQE.
pub const FLAG_CQE_REQUEST: u8 = 0x08;

/// The Tx control segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtrlSeg {
    /// Opcode.
    pub opcode: u8,
    /// WQEBB index of this WQE (producer counter).
    pub wqe_index: u16,
    /// Number of 16 B segments in the WQE.
    pub ds: u8,
    /// Flags (`FLAG_CQE_REQUEST`).
    pub flags: u8,
}

impl CtrlSeg {
    /// The 16 encoded bytes (every byte not named is zero).
    #[inline(always)]
    pub fn encode(&self) -> [u8; SEG] {
        let w = (u128::from(self.wqe_index) << 104)
            | (u128::from(self.opcode) << 96)
            | (u128::from(self.ds) << 64)
            | (u128::from(self.flags) << 32);
        w.to_be_bytes()
    }

    /// Encodes into 16 bytes.
    #[inline(always)]
    pub fn write(&self, out: &mut [u8; SEG]) {
        *out = self.encode();
    }

    /// Decodes 16 bytes (the named fields' bytes of [`CtrlSeg::encode`]'s layout).
    #[inline(always)]
    pub fn read(b: &[u8; SEG]) -> Self {
        Self {
            opcode: b[3],
            wqe_index: u16::from_be_bytes([b[1], b[2]]),
            ds: b[7],
            flags: b[11],
        }
    }
}

/// Completion opcodes (upper nibble of the last CQE byte).
pub mod cqe_op {
    /// Tx completion.
    pub const REQ: u8 = 0x0;
    /// Rx completion.
    pub const RESP_SEND: u8 = 0x2;
    /// Tx completion with error.
    pub const REQ_ERR: u8 = 0xd;
    /// Rx completion with error.
    pub const RESP_ERR: u8 = 0xe;
}

/// Error syndromes carried in error completions (values as in mlx5's CQE error syndromes).
pub mod syndrome {
    /// Length error: the frame does not fit the posted buffer, or a length is zero/oversized.
    pub const LOCAL_LENGTH: u8 = 0x01;
    /// Protection error: unknown or foreign key, or an address outside the region/buffer.
    pub const LOCAL_PROTECTION: u8 = 0x04;
    /// Malformed WQE (bad opcode or segment count).
    pub const LOCAL_QP_OPERATION: u8 = 0x02;
    /// Local access error: a DMA read of the WQE or of the data it points at failed (a PCIe
    /// completion error or timeout; injected by `[vnic.faults]`).
    pub const LOCAL_ACCESS: u8 = 0x11;
}

/// Which ring served a received payload, as written in the CQE.
pub mod cqe_ring {
    /// No payload segment.
    pub const NONE: u8 = 0;
    /// Primary (nicmem) ring.
    pub const PRIMARY: u8 = 1;
    /// Secondary (host) ring.
    pub const SECONDARY: u8 = 2;
}

/// A decoded completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// RSS hash (Rx).
    pub rss_hash: u32,
    /// Frame length (Rx) or 0.
    pub byte_cnt: u32,
    /// Rx: bytes placed in the header buffer. Tx: unused.
    pub hdr_len: u16,
    /// Rx: which ring served the payload (`cqe_ring`).
    pub ring: u8,
    /// Error syndrome (0 when the opcode is not an error).
    pub syndrome: u8,
    /// Rx: header-ring WQE index. Tx: WQEBB index of the completed WQE.
    pub wqe_counter: u16,
    /// Rx: payload-ring WQE index (when `ring != NONE`).
    pub payload_counter: u16,
    /// Opcode (`cqe_op`).
    pub opcode: u8,
}

impl Cqe {
    /// Encodes into a 64 B slot, with the ownership bit `owner` in the last byte (written last, as
    /// hardware makes the CQE visible with that byte).
    #[inline(always)]
    pub fn write(&self, out: &mut [u8; CQE_SIZE], owner: bool) {
        let head = (u128::from(self.rss_hash) << 96)
            | (u128::from(self.byte_cnt) << 64)
            | (u128::from(self.hdr_len) << 48)
            | (u128::from(self.ring) << 40)
            | (u128::from(self.syndrome) << 32)
            | (u128::from(self.payload_counter) << 16);
        out[0..16].copy_from_slice(&head.to_be_bytes());
        let tail =
            (u32::from(self.wqe_counter) << 16) | u32::from((self.opcode << 4) | owner as u8);
        out[60..64].copy_from_slice(&tail.to_be_bytes());
    }

    /// Decodes a slot if its ownership bit equals `owner` (i.e. the NIC has written it in the
    /// current pass over the ring).
    #[inline(always)]
    pub fn read(b: &[u8; CQE_SIZE], owner: bool) -> Option<Self> {
        if (b[63] & 1 == 1) != owner {
            return None;
        }
        // Field by field (the bytes of `write`'s layout), so a reader pays only for the fields
        // it uses.
        Some(Self {
            rss_hash: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            byte_cnt: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            hdr_len: u16::from_be_bytes([b[8], b[9]]),
            ring: b[10],
            syndrome: b[11],
            payload_counter: u16::from_be_bytes([b[12], b[13]]),
            wqe_counter: u16::from_be_bytes([b[60], b[61]]),
            opcode: b[63] >> 4,
        })
    }

    /// True for an error completion.
    #[inline]
    pub fn is_error(&self) -> bool {
        self.opcode == cqe_op::REQ_ERR || self.opcode == cqe_op::RESP_ERR
    }
}

/// Number of inline bytes a Tx WQE carries for `want` requested bytes under mlx5's rule: the
/// Ethernet segment holds 2 bytes, the rest continues in 16 B units, minimum 18 when inlining at
/// all (`txq_inline_min` rounds to 18 + 16k).
pub fn inline_rounded(want: usize) -> usize {
    if want == 0 {
        0
    } else if want <= 18 {
        18
    } else {
        18 + (want - 18).div_ceil(16) * 16
    }
}

/// 16 B segments a Tx WQE needs: control + Ethernet + inline continuation + data pointers.
pub fn tx_wqe_ds(inline_bytes: usize, data_segs: usize) -> usize {
    2 + inline_bytes.saturating_sub(2).div_ceil(SEG) + data_segs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_round_trip() {
        let d = DataSeg {
            byte_count: 1500,
            key: 0x1234,
            addr: 0xdead_beef_0000,
        };
        let mut b = [0u8; SEG];
        d.write(&mut b);
        assert_eq!(DataSeg::read(&b), d);
        let c = CtrlSeg {
            opcode: OPCODE_SEND,
            wqe_index: 513,
            ds: 7,
            flags: FLAG_CQE_REQUEST,
        };
        let mut b = [0u8; SEG];
        c.write(&mut b);
        assert_eq!(CtrlSeg::read(&b), c);
        let q = Cqe {
            rss_hash: 7,
            byte_cnt: 1514,
            hdr_len: 64,
            ring: cqe_ring::SECONDARY,
            syndrome: 0,
            wqe_counter: 9,
            payload_counter: 3,
            opcode: cqe_op::RESP_SEND,
        };
        let mut s = [0u8; CQE_SIZE];
        q.write(&mut s, true);
        assert_eq!(Cqe::read(&s, true), Some(q));
        assert_eq!(Cqe::read(&s, false), None);
    }

    #[test]
    fn inline_rounding_is_18_plus_16k() {
        assert_eq!(inline_rounded(0), 0);
        assert_eq!(inline_rounded(1), 18);
        assert_eq!(inline_rounded(18), 18);
        assert_eq!(inline_rounded(19), 34);
        assert_eq!(inline_rounded(64), 66);
        // The reference's layouts: host = ctrl + eth + 1 pointer; nmNFV at I = 64 = 4 inline DS
        // after the Ethernet segment + 1 pointer = 7 DS = 2 WQEBBs.
        assert_eq!(tx_wqe_ds(0, 1), 3);
        assert_eq!(tx_wqe_ds(0, 2), 4);
        assert_eq!(tx_wqe_ds(64, 1), 7);
        assert_eq!(tx_wqe_ds(60, 0), 6);
    }
}
