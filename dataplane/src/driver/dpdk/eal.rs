//! The DPDK Environment Abstraction Layer: initialised once per process, from a list of args.
//!
//! `rte_eal_init` may run only once per process (a second call fails with `EALREADY`) and no DPDK
//! call is allowed after `rte_eal_cleanup`, so [`Eal::init`] keeps the first successful
//! initialisation in a process-wide cell and returns it to every later caller; later callers'
//! arguments are ignored (ports are added at run time with `rte_dev_probe`, so the vdev set need not
//! be known up front). EAL is never cleaned up: the process exit releases it.
//!
//! Worker threads are not EAL lcores; [`register_worker_thread`] registers the calling thread
//! (`rte_thread_register`) so that mempool per-lcore caches work for it, optionally pinning it to
//! a core first, and unregisters it when the thread exits.

use std::cell::Cell;
use std::ffi::CString;
use std::marker::PhantomData;
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::error::{EalError, rte_errno, strerror};

/// The process's initialised EAL.
#[derive(Debug)]
pub struct Eal {
    args: Vec<String>,
}

static EAL: OnceLock<Result<Eal, EalError>> = OnceLock::new();
/// Serialises control-plane calls (probe, configure, start, stop, close, mempool create/free):
/// DPDK's control path is not thread-safe, and tests create ports from several threads. Taken
/// only through [`control_lock`].
static CONTROL: Mutex<()> = Mutex::new(());

thread_local! {
    /// How many [`ControlGuard`]s the calling thread holds (0: it does not hold [`CONTROL`]).
    static CONTROL_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Holds the control-plane lock; released when the thread's outermost guard is dropped.
///
/// The lock is re-entrant on the thread that holds it. Setup runs under the lock and its error
/// paths drop what they built so far, e.g. a mempool, whose `Drop` frees it under the lock
/// again; with a plain mutex a port that failed to configure deadlocked its own thread.
pub(crate) struct ControlGuard {
    /// The mutex guard, held by the outermost guard only.
    _outer: Option<MutexGuard<'static, ()>>,
    /// The depth count is per thread, so a guard must be dropped on the thread that took it.
    _not_send: PhantomData<*const ()>,
}

impl Drop for ControlGuard {
    fn drop(&mut self) {
        CONTROL_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Takes the control-plane lock, or nests inside the one the calling thread already holds.
pub(crate) fn control_lock() -> ControlGuard {
    let depth = CONTROL_DEPTH.with(|d| d.get());
    let outer = (depth == 0).then(|| CONTROL.lock().unwrap_or_else(|e| e.into_inner()));
    CONTROL_DEPTH.with(|d| d.set(depth + 1));
    ControlGuard {
        _outer: outer,
        _not_send: PhantomData,
    }
}

impl Eal {
    /// Initialises EAL with `args` (without the program name), or returns the EAL a previous
    /// call initialised. A failed initialisation is remembered too: EAL cannot be retried.
    pub fn init(args: &[String]) -> Result<&'static Eal, EalError> {
        EAL.get_or_init(|| {
            let _g = control_lock();
            Self::do_init(args)
        })
        .as_ref()
        .map_err(Clone::clone)
    }

    /// The EAL if some caller initialised it.
    pub fn get() -> Option<&'static Eal> {
        EAL.get().and_then(|r| r.as_ref().ok())
    }

    /// The arguments EAL was initialised with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    fn do_init(args: &[String]) -> Result<Eal, EalError> {
        let err = |msg: String| EalError {
            args: args.to_vec(),
            msg,
        };
        let mut all = vec!["nmdp".to_string()];
        all.extend(args.iter().cloned());
        let cstrs: Vec<CString> = all
            .iter()
            .map(|a| CString::new(a.as_str()))
            .collect::<Result<_, _>>()
            .map_err(|_| err("an argument contains a NUL byte".into()))?;
        // EAL may keep pointers into argv (it reorders it and keeps some strings), so argv and
        // the strings live for the rest of the process.
        let argv: &'static mut [*mut std::os::raw::c_char] = Box::leak(
            cstrs
                .into_iter()
                .map(|c| c.into_raw())
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        // SAFETY: argc/argv describe `argv.len()` valid NUL-terminated strings that outlive the
        // process; this runs once per process (inside the `OnceLock`) under the control lock.
        let rc = unsafe { dpdk_sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
        if rc < 0 {
            let e = rte_errno();
            return Err(err(format!(
                "{} (errno {e}); without hugepages use: --no-huge -m 256 --no-pci --no-shconf \
                 --file-prefix <unique>",
                strerror(e)
            )));
        }
        Ok(Eal {
            args: args.to_vec(),
        })
    }
}

thread_local! {
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
    static GUARD: ThreadGuard = const { ThreadGuard };
}

/// Unregisters a registered worker thread from EAL when the thread exits.
struct ThreadGuard;

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        if REGISTERED.try_with(|r| r.get()).unwrap_or(false) {
            // SAFETY: this thread registered itself with `rte_thread_register` and is exiting;
            // unregistering releases its lcore id for other threads.
            unsafe { dpdk_sys::rte_thread_unregister() };
        }
    }
}

/// Makes the calling thread an EAL thread (an lcore id, so mempool per-lcore caches work),
/// pinned to `core` when given. Idempotent; EAL's own lcore threads are left as they are.
/// Returns the lcore id, or an error string if EAL is not initialised or no lcore id is free.
pub fn register_worker_thread(core: Option<usize>) -> Result<u32, String> {
    if Eal::get().is_none() {
        return Err("EAL is not initialised".into());
    }
    // SAFETY: reads the calling thread's per-lcore id.
    let id = unsafe { dpdk_sys::rte_lcore_id() };
    if id != dpdk_sys::NMDP_LCORE_ID_ANY {
        return Ok(id);
    }
    if let Some(c) = core {
        if c >= 1024 {
            return Err(format!("core {c} out of range"));
        }
        let mut set = dpdk_sys::rte_cpuset_t::default();
        set.__bits[c / 64] |= 1u64 << (c % 64);
        // SAFETY: `set` is a valid cpu_set_t naming one CPU; the call sets this thread's affinity.
        let rc = unsafe { dpdk_sys::rte_thread_set_affinity(&mut set) };
        if rc != 0 {
            return Err(format!("cannot pin the worker thread to core {c}"));
        }
    }
    // SAFETY: registers the calling (non-EAL) thread; EAL is initialised (checked above).
    let rc = unsafe { dpdk_sys::rte_thread_register() };
    if rc != 0 {
        let e = rte_errno();
        return Err(format!(
            "rte_thread_register failed: {} (no free lcore id?)",
            strerror(e)
        ));
    }
    REGISTERED.with(|r| r.set(true));
    GUARD.with(|_| {});
    // SAFETY: as above.
    Ok(unsafe { dpdk_sys::rte_lcore_id() })
}

/// EAL for the unit tests of this module (once per test process; later calls reuse it): no
/// hugepages, no PCI, lcore 0.
#[cfg(test)]
pub(crate) fn test_eal() {
    let args: Vec<String> = [
        "nmdp-dpdk-unit",
        "-l",
        "0",
        "--no-huge",
        "-m",
        "128",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        "--file-prefix=nmdp-dpdk-unit",
        "--log-level=*:warning",
    ]
    .map(String::from)
    .to_vec();
    Eal::init(&args).expect("EAL without hugepages");
}
