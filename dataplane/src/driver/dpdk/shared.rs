//! What a port and its queues share ([`PortShared`]): the port's identity, its pools and its
//! (emulated or device) nicmem. The last of them to go stops and closes the port, then the pools
//! are freed, then the nicmem.

use std::ffi::{CStr, CString};

use dpdk_sys as sys;
use nicmem::{NicMem, Region};

use super::eal::control_lock;
use super::error::{DpdkError, strerror};
use super::events::PortEvents;
use super::mempool::QueuePools;
use super::mlx5;

/// State shared by a port and its queues; the port is stopped and closed when the last of them
/// is gone, then its pools are freed, then its (emulated) nicmem.
pub(crate) struct PortShared {
    /// The ethdev port id.
    pub(crate) port_id: u16,
    /// The device name (the first field of the devargs).
    pub(crate) name: String,
    /// The PMD's name.
    pub(crate) driver: String,
    /// The device name when we probed it (it is removed again when the port closes).
    pub(crate) probed: Option<CString>,
    /// The pools of each queue.
    pub(crate) pools: Vec<QueuePools>,
    /// Emulated nicmem (PMDs without device memory).
    pub(crate) nicmem: Option<NicMem>,
    /// The emulated nicmem regions the payload pools use, kept alive until the pools are freed.
    pub(crate) _regions: Vec<Region>,
    /// mlx5 device memory the payload pools use.
    pub(crate) window: Option<mlx5::DeviceWindow>,
    /// Link-state and reset events, and how to set the port up again after a reset.
    pub(crate) events: PortEvents,
}

impl Drop for PortShared {
    fn drop(&mut self) {
        let _g = control_lock();
        self.events.unregister();
        // SAFETY: the port was started by us; every queue handle is gone (this is the last
        // reference), so no thread polls it. Close returns mbufs held in its rings to the pools.
        unsafe {
            sys::rte_eth_dev_stop(self.port_id);
            sys::rte_eth_dev_close(self.port_id);
            if let Some(name) = &self.probed {
                rte_dev_remove_by_name(name);
            }
        }
    }
}

/// Detaches a device we probed (`rte_eal_hotplug_remove`), so that its name can be probed
/// again (tests open the same vdev names many times in one process).
///
/// # Safety
/// EAL must be initialised, the device closed, and no handle to it left.
pub(crate) unsafe fn rte_dev_remove_by_name(name: &CStr) {
    let bus = if name.to_bytes().starts_with(b"net_") || name.to_bytes().starts_with(b"eth_") {
        c"vdev"
    } else {
        c"pci"
    };
    // SAFETY: per the caller's contract; both strings are NUL-terminated.
    unsafe {
        sys::rte_eal_hotplug_remove(bus.as_ptr(), name.as_ptr());
    }
}

/// The port's basic counters (`rte_eth_stats_get`); `name` is for the error.
pub(crate) fn eth_stats(port_id: u16, name: &str) -> Result<sys::rte_eth_stats, DpdkError> {
    let mut e = sys::rte_eth_stats::default();
    // SAFETY: valid port id and out-pointer; reading counters is safe from any thread.
    let rc = unsafe { sys::rte_eth_stats_get(port_id, &mut e) };
    if rc != 0 {
        return Err(DpdkError::Port(format!(
            "rte_eth_stats_get({name}): {}",
            strerror(-rc)
        )));
    }
    Ok(e)
}
