//! The errors of the DPDK driver, and the text of DPDK's error numbers.

use std::fmt;

/// Why EAL could not be initialised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EalError {
    /// The arguments that were passed.
    pub args: Vec<String>,
    /// What went wrong.
    pub msg: String,
}

impl fmt::Display for EalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rte_eal_init({}) failed: {}",
            self.args.join(" "),
            self.msg
        )
    }
}

impl std::error::Error for EalError {}

/// Errors of the DPDK driver. Every message says what failed and, where it helps, what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DpdkError {
    /// EAL initialisation failed or was not done.
    Eal(String),
    /// A port could not be found, probed or configured.
    Port(String),
    /// A mempool could not be created.
    Mempool(String),
    /// The requested datapath mode cannot run on this port; says what is missing and which
    /// modes still work.
    Unsupported(String),
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DpdkError::Eal(s) => write!(f, "DPDK EAL: {s}"),
            DpdkError::Port(s) => write!(f, "DPDK port: {s}"),
            DpdkError::Mempool(s) => write!(f, "DPDK mempool: {s}"),
            DpdkError::Unsupported(s) => write!(f, "DPDK: {s}"),
        }
    }
}

impl std::error::Error for DpdkError {}

impl From<EalError> for DpdkError {
    fn from(e: EalError) -> Self {
        DpdkError::Eal(e.to_string())
    }
}

/// `rte_strerror(errno)` as a Rust string.
pub(crate) fn strerror(errno: i32) -> String {
    // SAFETY: `rte_strerror` returns a pointer to a static or thread-local NUL-terminated string
    // for any errno value; we copy it out before any other DPDK call on this thread.
    unsafe {
        let p = dpdk_sys::rte_strerror(errno);
        if p.is_null() {
            return format!("errno {errno}");
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The calling thread's `rte_errno`.
pub(crate) fn rte_errno() -> i32 {
    // SAFETY: a plain read of a thread-local integer through the shim.
    unsafe { dpdk_sys::nmdp_rte_errno() }
}
