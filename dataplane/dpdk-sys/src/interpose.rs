//! The `ibv_reg_mr_iova2` interposer (feature `mlx5`): how the stock DPDK 22.11 mlx5 PMD gets a
//! memory key for on-NIC memory.
//!
//! The PMD registers every mempool's memory with `ibv_reg_mr_iova2`, which cannot register device
//! memory. This crate defines a function of that name; an executable that exports it (link with
//! `-Wl,--export-dynamic-symbol=ibv_reg_mr_iova2`, as nmdp's `mlx5` build does) is searched
//! before libibverbs, so the PMD's versioned reference binds to it. When the range lies inside
//! the installed device-memory [`Window`], it returns a fresh zero-based registration of the
//! device memory (so WQE address `a` means device-memory offset `a`), with `addr`/`length` set to
//! the asked range so the PMD's MR cache matches; anything else goes to the real function
//! (`dlvsym(RTLD_NEXT, "ibv_reg_mr_iova2", "IBVERBS_1.8")`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

use crate::verbs::{ibv_mr, ibv_pd};

/// A device-memory window in the address space the PMD sees: `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
}

impl Window {
    /// True when `[addr, addr + len)` is non-empty and inside the window.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        len > 0 && addr >= self.start && addr.checked_add(len).is_some_and(|e| e <= self.end)
    }

    /// The device-memory offset of `addr` (zero-based registration: the address itself).
    pub fn offset_of(&self, addr: u64) -> Option<u64> {
        self.contains(addr, 1).then_some(addr)
    }
}

/// What the interposer does with a registration request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Register the device memory (the range is inside the window).
    Device,
    /// Forward to libibverbs.
    PassThrough,
}

/// Decides the route of a request for `[addr, addr + len)` (pure; unit-tested).
pub fn route(window: Option<&Window>, addr: u64, len: u64) -> Route {
    match window {
        Some(w) if w.contains(addr, len) => Route::Device,
        _ => Route::PassThrough,
    }
}

/// Registers device memory for a request inside the window: `(pd, addr, len) -> mr`.
pub type RegisterFn = Box<dyn Fn(*mut ibv_pd, u64, usize) -> *mut ibv_mr + Send + Sync>;
/// The real `ibv_reg_mr_iova2` signature.
pub type NextFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, u64, u32) -> *mut ibv_mr;

static STATE: RwLock<Option<(Window, RegisterFn)>> = RwLock::new(None);
static NEXT_OVERRIDE: OnceLock<NextFn> = OnceLock::new();
static NEXT: OnceLock<Option<NextFn>> = OnceLock::new();
static INTERCEPTED: AtomicU64 = AtomicU64::new(0);
static PASSED: AtomicU64 = AtomicU64::new(0);

/// Installs (or replaces) the window and its registration function.
pub fn install(window: Window, register: RegisterFn) {
    *STATE.write().unwrap_or_else(|e| e.into_inner()) = Some((window, register));
}

/// Replaces the pass-through target (tests use a fake instead of libibverbs).
pub fn set_next_for_tests(f: NextFn) {
    let _ = NEXT_OVERRIDE.set(f);
}

/// `(intercepted, passed through)` call counts.
pub fn counts() -> (u64, u64) {
    (
        INTERCEPTED.load(Ordering::Relaxed),
        PASSED.load(Ordering::Relaxed),
    )
}

unsafe extern "C" {
    fn dlvsym(handle: *mut c_void, symbol: *const i8, version: *const i8) -> *mut c_void;
}

fn next() -> Option<NextFn> {
    if let Some(f) = NEXT_OVERRIDE.get() {
        return Some(*f);
    }
    *NEXT.get_or_init(|| {
        let rtld_next = -1isize as *mut c_void;
        // SAFETY: looks up the next definition of a versioned symbol; both strings are
        // NUL-terminated literals.
        let p = unsafe {
            dlvsym(
                rtld_next,
                c"ibv_reg_mr_iova2".as_ptr().cast(),
                c"IBVERBS_1.8".as_ptr().cast(),
            )
        };
        if p.is_null() {
            None
        } else {
            // SAFETY: libibverbs' `ibv_reg_mr_iova2@IBVERBS_1.8` has exactly this signature.
            Some(unsafe { std::mem::transmute::<*mut c_void, NextFn>(p) })
        }
    })
}

/// The interposed `ibv_reg_mr_iova2` (see the module docs).
///
/// # Safety
/// Called by C code with the arguments of libibverbs' function of the same name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    {
        let st = STATE.read().unwrap_or_else(|e| e.into_inner());
        if let Some((w, reg)) = st.as_ref()
            && route(Some(w), addr as u64, length as u64) == Route::Device
        {
            let mr = reg(pd, addr as u64, length);
            if !mr.is_null() {
                // SAFETY: `mr` is a valid MR just returned by the registration function; the PMD
                // looks ranges up by these two fields.
                unsafe {
                    (*mr).addr = addr;
                    (*mr).length = length;
                }
            }
            INTERCEPTED.fetch_add(1, Ordering::Relaxed);
            return mr;
        }
    }
    PASSED.fetch_add(1, Ordering::Relaxed);
    match next() {
        // SAFETY: forwarding the caller's arguments unchanged to the real function.
        Some(f) => unsafe { f(pd, addr, length, iova, access) },
        None => std::ptr::null_mut(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_only_ranges_inside_the_window() {
        let w = Window {
            start: 0x1000,
            end: 0x40000,
        };
        assert_eq!(route(Some(&w), 0x1000, 2048), Route::Device);
        assert_eq!(route(Some(&w), 0x3f800, 2048), Route::Device);
        assert_eq!(route(Some(&w), 0x3f800, 2049), Route::PassThrough);
        assert_eq!(route(Some(&w), 0xfff, 2), Route::PassThrough);
        assert_eq!(route(Some(&w), 0x2000, 0), Route::PassThrough);
        assert_eq!(route(Some(&w), u64::MAX - 1, 4), Route::PassThrough);
        assert_eq!(route(None, 0x2000, 64), Route::PassThrough);
        assert_eq!(w.offset_of(0x1800), Some(0x1800));
        assert_eq!(w.offset_of(0x40000), None);
    }
}
