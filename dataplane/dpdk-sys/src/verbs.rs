//! rdma-core bindings for mlx5 device memory (feature `mlx5`), and [`DeviceMemory`]: a small safe
//! owner of one device's context, protection domain and whole device memory (MEMIC).

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code
)]

mod raw {
    #![allow(
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        dead_code,
        unnecessary_transmutes,
        clippy::all
    )]
    include!(concat!(env!("OUT_DIR"), "/verbs_bindings.rs"));
}
pub use raw::*;

use std::ffi::CStr;

/// One RDMA device's context, a protection domain and all of its device memory.
pub struct DeviceMemory {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    len: usize,
    cmd_fd: i32,
}

// SAFETY: verbs objects may be used from any thread (rdma-core serialises internally); the owner
// frees them once.
unsafe impl Send for DeviceMemory {}
// SAFETY: shared use only issues thread-safe verbs calls (DM copies, MR registration).
unsafe impl Sync for DeviceMemory {}

impl DeviceMemory {
    /// Opens the RDMA device of PCI function `bdf` (found under
    /// `/sys/bus/pci/devices/<bdf>/infiniband/`), allocates a PD and all device memory.
    pub fn open_pci(bdf: &str) -> Result<Self, String> {
        let dir = format!("/sys/bus/pci/devices/{bdf}/infiniband");
        let name = std::fs::read_dir(&dir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .ok_or_else(|| {
                format!("no RDMA device for {bdf} ({dir} missing): nicmem needs an mlx5 NIC with the mlx5_ib driver loaded")
            })?;
        Self::open(&name)
    }

    /// Opens the RDMA device `name` (e.g. `mlx5_0`), allocates a PD and all device memory.
    pub fn open(name: &str) -> Result<Self, String> {
        let mut n = 0;
        // SAFETY: returns a NULL-terminated array of `n` devices, or NULL.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() || n == 0 {
            if !list.is_null() {
                // SAFETY: a list from ibv_get_device_list.
                unsafe { ibv_free_device_list(list) };
            }
            return Err("no RDMA devices (ibv_get_device_list found none)".into());
        }
        let mut ctx = std::ptr::null_mut();
        for i in 0..n as usize {
            // SAFETY: `i < n` entries are valid device pointers.
            let dev = unsafe { *list.add(i) };
            // SAFETY: a valid device; the name is a NUL-terminated string it owns.
            let dn = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) };
            if dn.to_bytes() == name.as_bytes() {
                // SAFETY: a valid device from the list.
                ctx = unsafe { ibv_open_device(dev) };
                break;
            }
        }
        // SAFETY: the list is freed once; opened contexts stay valid.
        unsafe { ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(format!("cannot open RDMA device {name}"));
        }
        let mut me = Self {
            ctx,
            pd: std::ptr::null_mut(),
            dm: std::ptr::null_mut(),
            len: 0,
            cmd_fd: -1,
        };
        let mut attr = ibv_device_attr_ex::default();
        // SAFETY: valid context and out-pointer; NULL input means defaults.
        if unsafe { ibv_query_device_ex(ctx, std::ptr::null(), &mut attr) } != 0 {
            return Err(format!("ibv_query_device_ex({name}) failed"));
        }
        let max = attr.max_dm_size as usize;
        if max == 0 {
            return Err(format!(
                "{name} has no device memory (max_dm_size = 0): ConnectX-5 or later with MEMIC is needed"
            ));
        }
        // SAFETY: valid context.
        me.pd = unsafe { ibv_alloc_pd(ctx) };
        if me.pd.is_null() {
            return Err(format!("ibv_alloc_pd({name}) failed"));
        }
        let mut a = ibv_alloc_dm_attr {
            length: max,
            log_align_req: 0,
            comp_mask: 0,
        };
        // SAFETY: valid context and attribute.
        me.dm = unsafe { ibv_alloc_dm(ctx, &mut a) };
        if me.dm.is_null() {
            return Err(format!(
                "ibv_alloc_dm({name}, {max} B) failed: device memory in use or limited by firmware (MEMIC_SIZE_LIMIT)"
            ));
        }
        me.len = max;
        // SAFETY: reading the context's command fd; dup gives the PMD its own descriptor.
        me.cmd_fd = unsafe { libc_dup((*ctx).cmd_fd) };
        Ok(me)
    }

    /// Bytes of device memory.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no device memory was allocated.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A duplicate of the context's command fd, for the PMD's `cmd_fd=` devarg.
    pub fn cmd_fd(&self) -> i32 {
        self.cmd_fd
    }

    /// The PD handle, for the PMD's `pd_handle=` devarg.
    pub fn pd_handle(&self) -> u32 {
        // SAFETY: `pd` is a valid PD owned by `self`.
        unsafe { (*self.pd).handle }
    }

    /// A fresh zero-based registration of the whole device memory (what the interposer returns
    /// to the PMD; the PMD deregisters it with `ibv_dereg_mr`).
    pub fn register_zero_based(&self) -> *mut ibv_mr {
        // SAFETY: valid PD and DM owned by `self`; zero-based access as mlx5 requires for DM.
        unsafe {
            ibv_reg_dm_mr(
                self.pd,
                self.dm,
                0,
                self.len,
                NMDP_IBV_ACCESS_LOCAL_WRITE | NMDP_IBV_ACCESS_ZERO_BASED,
            )
        }
    }

    /// CPU write into device memory (offset and length multiples of 4).
    pub fn write(&self, off: u64, src: &[u8]) -> Result<(), String> {
        // SAFETY: valid DM; rdma-core checks the range and alignment.
        let rc = unsafe { ibv_memcpy_to_dm(self.dm, off, src.as_ptr().cast(), src.len()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!("ibv_memcpy_to_dm: error {rc}"))
        }
    }

    /// CPU read from device memory (slow: ~0.05 B/cycle).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), String> {
        // SAFETY: valid DM; rdma-core checks the range and alignment.
        let rc = unsafe { ibv_memcpy_from_dm(dst.as_mut_ptr().cast(), self.dm, off, dst.len()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!("ibv_memcpy_from_dm: error {rc}"))
        }
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: each object was created by `open` and is released once, in reverse order.
        unsafe {
            if !self.dm.is_null() {
                ibv_free_dm(self.dm);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            ibv_close_device(self.ctx);
        }
    }
}

unsafe extern "C" {
    #[link_name = "dup"]
    fn libc_dup(fd: i32) -> i32;
}
