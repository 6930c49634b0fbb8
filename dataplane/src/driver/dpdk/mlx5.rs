//! nicmem on mlx5 with stock DPDK 22.11: the arithmetic (always built, unit-tested) and the
//! device-memory setup (feature `mlx5`, needs libibverbs-dev and a ConnectX-5 or later).
//!
//! The 22.11 mlx5 PMD has no device-memory support, so nmdp (following the reference's approach
//! "B") prepares everything **before** `rte_eal_init`:
//! 1. opens the port's RDMA device, allocates a protection domain and the whole device memory
//!    (`ibv_alloc_dm(max_dm_size)`, MEMIC) through rdma-core;
//! 2. hands the PMD our context and PD with the devargs `cmd_fd=<dup(ctx->cmd_fd)>` and
//!    `pd_handle=<pd->handle>`, so both live in one protection domain;
//! 3. builds the payload mempool as a pinned-external-buffer pool over the *device-memory window*
//!    `W = [0x1000, max_dm_size)`: mbuf addresses in W are device-memory offsets, never host
//!    pointers (the CPU never dereferences them; the window is reserved `PROT_NONE` in real runs);
//! 4. interposes `ibv_reg_mr_iova2` (`dpdk_sys::interpose`): when the PMD registers a range inside
//!    W it gets a fresh zero-based `ibv_reg_dm_mr` of our DM, so the lkey the PMD puts into Rx and
//!    Tx descriptors addresses MEMIC at offset = address; other ranges pass through.
//!
//! Rx uses the hardware buffer split at `split_offset` >= 66 B (header to a host pool, payload to
//! the window); Tx inlines exactly the header: `txq_inline_min` is rounded by the PMD to `18+16k`
//! ([`inline_rounded`]), so the header segment must be at least that long or the NIC would copy
//! payload bytes out of nicmem into the WQE, and `txqs_min_inline` must exceed the number of Tx
//! queues so that whole short packets are not inlined ([`inline_send_len`]).
//!
//! What has run on real hardware: nothing (no ConnectX NIC on the development machines); see the
//! README section "DPDK".

use crate::mode::DatapathMode;

/// The smallest header segment for nicmem modes on mlx5: 64 B rounded up the PMD's way.
pub const MIN_HEADER_SEGMENT: usize = 66;

/// Start of the device-memory window the payload pool covers (addresses below it are never
/// mapped, and the artifact reserved the first page too).
pub const WINDOW_START: u64 = 0x1000;

/// Payload buffer size used in device memory (the paper's 2 KiB elements).
pub const DEVICE_PAYLOAD_BUF: usize = 2048;

/// How the mlx5 PMD rounds `txq_inline_min`: `N <= 18 ? 18 : 18 + align_up(N - 18, 16)`.
/// 64 becomes 66; 50, 66, 82 and 98 are exact.
pub fn inline_rounded(n: usize) -> usize {
    if n <= 18 {
        18
    } else {
        18 + (n - 18).div_ceil(16) * 16
    }
}

/// Bytes the PMD inlines when sending a packet: `inline_min` (rounded) when
/// `nb_txq < txqs_min_inline`, else `max(inline_max, inline_min)` (whole short packets inline).
pub fn inline_send_len(
    inline_min: usize,
    inline_max: usize,
    nb_txq: u16,
    txqs_min_inline: u16,
) -> usize {
    let m = inline_rounded(inline_min);
    if nb_txq < txqs_min_inline {
        m
    } else {
        inline_max.max(m)
    }
}

/// The header segment to use on mlx5 in nicmem modes: at least `requested` and at least
/// [`MIN_HEADER_SEGMENT`], rounded the way the PMD rounds inline sizes, so that the inlined
/// bytes are exactly the header segment.
pub fn header_segment(requested: usize) -> usize {
    inline_rounded(requested.max(MIN_HEADER_SEGMENT))
}

/// Rx descriptors to ask for with a two-segment buffer split: the PMD counts segments, so the
/// number of packets a ring holds halves unless the count doubles.
pub fn split_rx_descriptors(packets: u16) -> u16 {
    packets.saturating_mul(2)
}

/// Payload buffers of `elt` bytes that fit in a device-memory window of `window_len` bytes.
pub fn payload_buffers(window_len: usize, elt: usize) -> u32 {
    (window_len / elt.max(1)).min(u32::MAX as usize) as u32
}

/// Checks a nicmem payload pool plan against the device memory: `posted` Rx descriptors plus
/// `in_flight` Tx packets per queue times `queues` must fit the buffers the window holds,
/// otherwise Rx would starve (mlx5 refills a descriptor from the same pool). Returns the buffers
/// per queue.
pub fn plan_payload_pool(
    max_dm_size: usize,
    elt: usize,
    queues: u16,
    posted: u32,
    in_flight: u32,
) -> Result<u32, String> {
    let window = max_dm_size.saturating_sub(WINDOW_START as usize);
    let total = payload_buffers(window, elt);
    let per_q = total / queues.max(1) as u32;
    let need = posted + in_flight;
    if per_q == 0 {
        return Err(format!(
            "device memory of {max_dm_size} B holds no {elt} B payload buffer"
        ));
    }
    if per_q < need {
        return Err(format!(
            "device memory holds {total} payload buffers of {elt} B ({per_q} per queue) but each \
             queue needs {need} ({posted} posted Rx descriptors + {in_flight} in-flight Tx); \
             lower rx_desc/burst, use fewer queues, or a NIC with more device memory"
        ));
    }
    Ok(per_q)
}

/// The paper's mlx5 devargs for a datapath mode (FastClick runs: `rxq_cqe_comp_en=0,mprq_en=0`,
/// plus Tx inline of exactly the header in `nic-inline`), for `nb_txq` Tx queues.
pub fn mode_devargs(mode: DatapathMode, split_offset: usize, nb_txq: u16) -> String {
    let mut v = vec!["rxq_cqe_comp_en=0".to_string(), "mprq_en=0".to_string()];
    if mode.splits() {
        // Scalar Rx: vectorised Rx is ignored with buffer split anyway; make it explicit.
        v.push("rx_vec_en=0".into());
    }
    if mode == DatapathMode::NicInline {
        v.push(format!("txq_inline_min={}", header_segment(split_offset)));
        v.push(format!("txqs_min_inline={}", nb_txq as u32 + 1));
    }
    v.join(",")
}

/// The device-memory window a payload pool covers: `[start, start + len)` in device-memory
/// offsets (not host addresses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceWindow {
    /// First offset (normally [`WINDOW_START`]).
    pub start: u64,
    /// Length in bytes.
    pub len: usize,
    /// The PCI device the memory belongs to (Rx and Tx must use the same device).
    pub device: String,
}

impl DeviceWindow {
    /// The part of the window queue `q` of `queues` uses, as `(start, len)`, whole `elt`-byte
    /// buffers only.
    pub fn queue_slice(&self, q: u16, queues: u16, elt: usize) -> (u64, usize) {
        let per = payload_buffers(self.len, elt) as usize / queues.max(1) as usize;
        let bytes = per * elt;
        (self.start + (q as usize * bytes) as u64, bytes)
    }
}

#[cfg(feature = "mlx5")]
pub use device::{Mlx5Nicmem, open_device_memory};

#[cfg(feature = "mlx5")]
mod device {
    use super::*;
    use dpdk_sys::interpose;
    use dpdk_sys::verbs::DeviceMemory;
    use std::sync::{Arc, OnceLock};

    /// The process's mlx5 device memory (one device per process in this version).
    static DM: OnceLock<Arc<DeviceMemory>> = OnceLock::new();

    /// mlx5 nicmem prepared before EAL init: the devargs to append to the port's `-a` argument
    /// and the window for the payload pool.
    #[derive(Debug, Clone)]
    pub struct Mlx5Nicmem {
        /// `cmd_fd=..,pd_handle=..` plus the mode's devargs.
        pub devargs: String,
        /// The device-memory window.
        pub window: DeviceWindow,
        /// Device memory size reported by the device.
        pub max_dm_size: usize,
    }

    /// Opens the RDMA device of PCI function `bdf`, allocates all its device memory and installs
    /// the `ibv_reg_mr_iova2` interposer. Must run before `rte_eal_init`. Errors say what is
    /// missing and which modes still work.
    pub fn open_device_memory(
        bdf: &str,
        mode: DatapathMode,
        split_offset: usize,
        nb_txq: u16,
    ) -> Result<Mlx5Nicmem, String> {
        let still = "modes host and split still work on this port";
        let dm = DeviceMemory::open_pci(bdf).map_err(|e| format!("{e}; {still}"))?;
        let max = dm.len();
        if max <= WINDOW_START as usize + DEVICE_PAYLOAD_BUF {
            return Err(format!(
                "{bdf}: device memory is {max} B, too small for a payload pool (check the \
                 firmware's MEMIC_SIZE_LIMIT with mlxconfig); {still}"
            ));
        }
        let window = DeviceWindow {
            start: WINDOW_START,
            len: max - WINDOW_START as usize,
            device: bdf.to_string(),
        };
        let devargs = format!(
            "cmd_fd={},pd_handle={},{}",
            dm.cmd_fd(),
            dm.pd_handle(),
            mode_devargs(mode, split_offset, nb_txq)
        );
        let dm = Arc::new(dm);
        let reg = dm.clone();
        interpose::install(
            interpose::Window {
                start: window.start,
                end: window.start + window.len as u64,
            },
            Box::new(move |_pd, _addr, _len| reg.register_zero_based()),
        );
        let rd = dm.clone();
        let _ = DM.set(rd);
        let _ = super::super::mbuf::DEVICE_READER.set(|off, dst| {
            DM.get()
                .ok_or_else(|| "no device memory".to_string())?
                .read(off, dst)
        });
        let _ = super::super::mbuf::DEVICE_WRITER.set(|off, src| {
            DM.get()
                .ok_or_else(|| "no device memory".to_string())?
                .write(off, src)
        });
        eprintln!(
            "mlx5 nicmem: {bdf}: {max} B of device memory, window [{:#x}, {:#x}), {} payload \
             buffers of {DEVICE_PAYLOAD_BUF} B",
            window.start,
            window.start + window.len as u64,
            payload_buffers(window.len, DEVICE_PAYLOAD_BUF)
        );
        Ok(Mlx5Nicmem {
            devargs,
            window,
            max_dm_size: max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_rounding_is_18_plus_16k() {
        assert_eq!(inline_rounded(0), 18);
        assert_eq!(inline_rounded(18), 18);
        assert_eq!(inline_rounded(19), 34);
        assert_eq!(inline_rounded(64), 66);
        for exact in [50, 66, 82, 98] {
            assert_eq!(inline_rounded(exact), exact);
        }
        for n in 0..1000 {
            let r = inline_rounded(n);
            assert!(
                r >= n && r >= 18 && (r - 18).is_multiple_of(16) && r - n.max(18) < 16,
                "{n} -> {r}"
            );
        }
        assert_eq!(header_segment(64), 66);
        assert_eq!(header_segment(14), 66);
        assert_eq!(header_segment(160), 162);
    }

    #[test]
    fn inline_send_depends_on_txqs_min_inline() {
        // Fewer Tx queues than txqs_min_inline: only the rounded minimum is inlined.
        assert_eq!(inline_send_len(64, 290, 4, 5), 66);
        // Otherwise whole packets up to txq_inline_max are inlined (reads payload from nicmem).
        assert_eq!(inline_send_len(64, 290, 8, 8), 290);
        assert_eq!(inline_send_len(300, 290, 8, 8), 306);
    }

    #[test]
    fn descriptors_double_with_split_and_saturate() {
        assert_eq!(split_rx_descriptors(1024), 2048);
        assert_eq!(split_rx_descriptors(40000), u16::MAX);
    }

    #[test]
    fn pool_sizing_against_device_memory() {
        // ConnectX-5, 256 KiB MEMIC: 62 buffers of 2 KiB behind the first page... minus the
        // window start: (262144 - 4096) / 2048 = 126.
        assert_eq!(payload_buffers(256 * 1024 - 4096, 2048), 126);
        assert_eq!(plan_payload_pool(256 * 1024, 2048, 1, 64, 32), Ok(126));
        assert_eq!(plan_payload_pool(256 * 1024, 2048, 2, 32, 31), Ok(63));
        let e = plan_payload_pool(256 * 1024, 2048, 1, 1024, 32).unwrap_err();
        assert!(
            e.contains("126 payload buffers") && e.contains("1056"),
            "{e}"
        );
        assert!(plan_payload_pool(4096, 2048, 1, 1, 1).is_err());
        let w = DeviceWindow {
            start: WINDOW_START,
            len: 256 * 1024 - 4096,
            device: "0000:08:00.0".into(),
        };
        let (a, la) = w.queue_slice(0, 2, 2048);
        let (b, lb) = w.queue_slice(1, 2, 2048);
        assert_eq!((a, la), (0x1000, 63 * 2048));
        assert_eq!(b, a + la as u64);
        assert!(b + lb as u64 <= w.start + w.len as u64);
    }

    #[test]
    fn devargs_per_mode_follow_the_paper() {
        assert_eq!(
            mode_devargs(DatapathMode::Host, 64, 1),
            "rxq_cqe_comp_en=0,mprq_en=0"
        );
        assert_eq!(
            mode_devargs(DatapathMode::NicPayload, 64, 1),
            "rxq_cqe_comp_en=0,mprq_en=0,rx_vec_en=0"
        );
        assert_eq!(
            mode_devargs(DatapathMode::NicInline, 64, 4),
            "rxq_cqe_comp_en=0,mprq_en=0,rx_vec_en=0,txq_inline_min=66,txqs_min_inline=5"
        );
    }
}
