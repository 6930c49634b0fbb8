//! Receive-side scaling: the Toeplitz hash NICs compute over the IPv4 5-tuple, and the
//! indirection table that maps a hash to a queue.
//!
//! The hash is table driven: for each of the 12 input bytes (src IP, dst IP, src port, dst port)
//! a 256-entry table holds that byte's contribution, so a hash is 12 lookups and XORs instead of
//! 96 shift-and-XOR steps. The default key is the 40-byte key most NICs ship (the one in
//! Microsoft's RSS verification suite), so hashes match hardware.

/// The de-facto standard 40-byte RSS key.
pub const DEFAULT_RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// Size of the indirection table (mlx5 and most NICs use 128..512 entries).
pub const RETA_SIZE: usize = 128;

/// A Toeplitz hasher with precomputed per-byte tables, plus the queue indirection table.
#[derive(Clone)]
pub struct Rss {
    tables: Box<[[u32; 256]; 12]>,
    reta: [u16; RETA_SIZE],
}

impl std::fmt::Debug for Rss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rss").finish_non_exhaustive()
    }
}

impl Rss {
    /// A hasher for `key` spreading over `queues` queues round-robin in the indirection table.
    pub fn new(key: &[u8; 40], queues: u16) -> Self {
        let mut tables = Box::new([[0u32; 256]; 12]);
        for (pos, table) in tables.iter_mut().enumerate() {
            for (v, slot) in table.iter_mut().enumerate() {
                let mut h = 0u32;
                for bit in 0..8 {
                    if v & (0x80 >> bit) != 0 {
                        h ^= key_window(key, pos * 8 + bit);
                    }
                }
                *slot = h;
            }
        }
        let q = queues.max(1);
        Self {
            tables,
            reta: std::array::from_fn(|i| (i % q as usize) as u16),
        }
    }

    /// Hash of `input` (up to 12 bytes: src IP, dst IP, src port, dst port, network order).
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        let mut h = 0;
        for (table, &b) in self.tables.iter().zip(input) {
            h ^= table[b as usize];
        }
        h
    }

    /// Hash of exactly 12 bytes (the IPv4 4-tuple), fully unrolled.
    #[inline]
    pub fn hash12(&self, input: &[u8; 12]) -> u32 {
        let t = &self.tables;
        t[0][input[0] as usize]
            ^ t[1][input[1] as usize]
            ^ t[2][input[2] as usize]
            ^ t[3][input[3] as usize]
            ^ t[4][input[4] as usize]
            ^ t[5][input[5] as usize]
            ^ t[6][input[6] as usize]
            ^ t[7][input[7] as usize]
            ^ t[8][input[8] as usize]
            ^ t[9][input[9] as usize]
            ^ t[10][input[10] as usize]
            ^ t[11][input[11] as usize]
    }

    /// The queue a hash maps to.
    #[inline]
    pub fn queue(&self, hash: u32) -> u16 {
        self.reta[hash as usize % RETA_SIZE]
    }

    /// Hashes an Ethernet frame: IPv4 TCP/UDP over the 4-tuple, other IPv4 over the addresses,
    /// anything else hashes to 0 (queue 0), as NICs do.
    #[inline]
    pub fn hash_frame(&self, frame: &[u8]) -> u32 {
        use wire::ethernet::{ETH_HLEN as L3, ETHERTYPE_IPV4};
        use wire::ipv4::{IPV4_HLEN, PROTO_TCP, PROTO_UDP, offset};
        // Source and destination address, side by side.
        const ADDRS: std::ops::Range<usize> = L3 + offset::SRC..L3 + offset::DST + 4;
        let [t0, t1] = ETHERTYPE_IPV4.to_be_bytes();
        if frame.len() < L3 + IPV4_HLEN || frame[12] != t0 || frame[13] != t1 {
            return 0;
        }
        let ihl = ((frame[L3 + offset::VER_IHL] & 0x0f) as usize) * 4;
        let proto = frame[L3 + offset::PROTOCOL];
        let ff = L3 + offset::FLAGS_FRAG;
        let frag = u16::from_be_bytes([frame[ff], frame[ff + 1]]) & 0x1fff;
        let l4 = L3 + ihl;
        if ihl >= IPV4_HLEN
            && (proto == PROTO_TCP || proto == PROTO_UDP)
            && frag == 0
            && frame.len() >= l4 + 4
        {
            let mut input = [0u8; 12];
            input[..8].copy_from_slice(&frame[ADDRS]);
            input[8..].copy_from_slice(&frame[l4..l4 + 4]);
            self.hash12(&input)
        } else {
            self.hash(&frame[ADDRS])
        }
    }
}

/// The 32-bit window of the key starting at bit `bit`.
fn key_window(key: &[u8; 40], bit: usize) -> u32 {
    let mut w = 0u32;
    for i in 0..32 {
        let b = bit + i;
        let set = key[b / 8] & (0x80 >> (b % 8)) != 0;
        w = (w << 1) | set as u32;
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors from Microsoft's RSS verification suite (IPv4 with TCP ports).
    #[test]
    fn matches_published_verification_vectors() {
        let rss = Rss::new(&DEFAULT_RSS_KEY, 1);
        type Vector = ([u8; 4], [u8; 4], u16, u16, u32);
        let cases: [Vector; 3] = [
            (
                [66, 9, 149, 187],
                [161, 142, 100, 80],
                2794,
                1766,
                0x51ccc178,
            ),
            (
                [199, 92, 111, 2],
                [65, 69, 140, 83],
                14230,
                4739,
                0xc626b0ea,
            ),
            (
                [24, 19, 198, 95],
                [12, 22, 207, 184],
                12898,
                38024,
                0x5c2b394a,
            ),
        ];
        for (src, dst, sp, dp, want) in cases {
            let mut input = [0u8; 12];
            input[..4].copy_from_slice(&src);
            input[4..8].copy_from_slice(&dst);
            input[8..10].copy_from_slice(&sp.to_be_bytes());
            input[10..].copy_from_slice(&dp.to_be_bytes());
            assert_eq!(rss.hash(&input), want);
            assert_eq!(rss.hash12(&input), want);
        }
    }

    #[test]
    fn spreads_over_queues() {
        let rss = Rss::new(&DEFAULT_RSS_KEY, 4);
        let mut seen = [0u32; 4];
        for i in 0..1000u32 {
            let mut input = [0u8; 12];
            input[..4].copy_from_slice(&i.to_be_bytes());
            seen[rss.queue(rss.hash(&input)) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 150), "{seen:?}");
    }
}
