//! Memory for the nicmem dataplane: registered regions with keys, the on-NIC memory allocator, and
//! fixed-size buffer pools with per-core caches.
//!
//! - [`Region`] / [`RegionTable`]: registered memory ranges (host or nicmem) and the validation a
//!   NIC applies to every descriptor's `(key, address, length)`.
//! - [`NicMem`]: the allocator of on-NIC memory (`alloc_nicmem` / `dealloc_nicmem` in the paper),
//!   with counted CPU reads and writes.
//! - [`BufPool`] / [`PoolCache`] / [`Buf`]: buffer pools; `Buf<Host>` exposes bytes, `Buf<Nic>`
//!   does not.
//! - [`HugeArray`]: large zeroed arrays on 2 MiB pages (flow tables), created without a pass over
//!   their memory.

mod allocator;
mod copy;
mod hugemem;
mod memory;
mod pool;
mod region;
mod sram;

pub use allocator::{NICMEM_ALIGN, NicMem, NicMemError, NicMemStats, parse_size};
pub use copy::copy_prefix;
pub use hugemem::{Align32, HUGE_PAGE, HugeArray, HugeMemError, PageKind, Zeroable};
pub use memory::{HostAllocError, MEM_ALIGN, RawMem};
pub use pool::{
    Buf, BufPool, Host, MAX_CACHES, MemClass, Nic, PoolCache, PoolError, PoolLayout, PoolStats,
};
pub use region::{
    AccessError, MemKey, ProtectionDomain, Region, RegionKind, RegionTable, Resolved,
};
