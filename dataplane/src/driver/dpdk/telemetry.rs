//! nmdp's telemetry commands served by EAL's own telemetry on DPDK ports (DESIGN "Operating
//! it": one socket per process, the one `dpdk-telemetry.py -f <file-prefix>` finds, next to
//! EAL's `/ethdev/*` commands).
//!
//! The commands are registered once per process with `rte_telemetry_register_cmd` (EAL keeps
//! them for its life and has no way to remove one), all with one callback that hands the
//! request to the handler of the run now active ([`EalTelemetry`]; a run installs its handler
//! and removes it when it ends, so a command between runs answers an error) and copies the
//! reply, in DPDK's data model already ([`crate::telemetry::TelData`]), into EAL's
//! `rte_tel_data`. EAL's socket carries no peer credentials to the callback: its runtime
//! directory (0700) is what keeps other users out.

use std::collections::BTreeSet;
use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::{Arc, Mutex};

use dpdk_sys as sys;

use crate::telemetry::server::{Command, Handler};
use crate::telemetry::{TelArray, TelData, TelValue};

/// The handler of the active run.
static HANDLER: Mutex<Option<Arc<Handler>>> = Mutex::new(None);
/// The commands registered with EAL so far (it keeps every one for the process's life).
static REGISTERED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// The run's handler, installed in EAL's telemetry while this lives.
pub struct EalTelemetry(());

impl EalTelemetry {
    /// Registers `commands` with EAL (those not registered before) and makes `handler` answer
    /// them until the returned value is dropped. EAL must be initialised.
    pub fn install(commands: &[Command], handler: Arc<Handler>) -> Result<Self, String> {
        let mut reg = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
        for c in commands {
            if reg.contains(&c.name) {
                continue;
            }
            let name = CString::new(c.name.as_str())
                .map_err(|_| format!("telemetry command `{}` holds a NUL", c.name))?;
            let help = CString::new(c.help.as_str())
                .map_err(|_| format!("telemetry help of `{}` holds a NUL", c.name))?;
            // SAFETY: both strings are NUL-terminated; EAL copies them; `callback` has the
            // `telemetry_cb` signature and lives for the process.
            let rc = unsafe {
                sys::rte_telemetry_register_cmd(name.as_ptr(), Some(callback), help.as_ptr())
            };
            if rc != 0 {
                return Err(format!(
                    "EAL refused telemetry command `{}` (error {rc}: a name starts with `/`, \
                     at most 55 bytes, help 63, 64 commands in all)",
                    c.name
                ));
            }
            reg.insert(c.name.clone());
        }
        *HANDLER.lock().unwrap_or_else(|e| e.into_inner()) = Some(handler);
        Ok(EalTelemetry(()))
    }
}

impl Drop for EalTelemetry {
    fn drop(&mut self) {
        *HANDLER.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// The file prefix EAL was given (`--file-prefix`; DPDK's default `rte`): where its telemetry
/// socket is.
pub fn file_prefix(eal_args: &[String]) -> String {
    let mut it = eal_args.iter();
    while let Some(a) = it.next() {
        if let Some(p) = a.strip_prefix("--file-prefix=") {
            return p.to_string();
        }
        if a == "--file-prefix"
            && let Some(p) = it.next()
        {
            return p.clone();
        }
    }
    "rte".into()
}

/// EAL's telemetry callback for every nmdp command.
unsafe extern "C" fn callback(
    cmd: *const c_char,
    params: *const c_char,
    d: *mut sys::rte_tel_data,
) -> c_int {
    // SAFETY: EAL passes the command as a NUL-terminated string and the parameters as one or
    // NULL.
    let (cmd, params) = unsafe {
        (
            CStr::from_ptr(cmd).to_string_lossy().into_owned(),
            (!params.is_null()).then(|| CStr::from_ptr(params).to_string_lossy().into_owned()),
        )
    };
    let handler = HANDLER.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match handler {
        Some(h) => h(&cmd, params.as_deref()),
        None => TelData::error("no nmdp run is active in this process"),
    }))
    .unwrap_or_else(|_| TelData::error("the command failed"));
    fill(d, &reply)
}

/// A C string of `s` (DPDK's model never holds a NUL; one would end the string there).
fn c(s: &str) -> CString {
    CString::new(s.split('\0').next().unwrap_or("")).unwrap_or_default()
}

/// Copies `reply` into EAL's `d`; -1 (EAL answers `null`) for [`TelData::Null`].
fn fill(d: *mut sys::rte_tel_data, reply: &TelData) -> c_int {
    // SAFETY (every call below): `d` is the data EAL passed to the callback, and the strings
    // are NUL-terminated and live across the call (EAL copies them).
    unsafe {
        match reply {
            TelData::Null => -1,
            TelData::Str(s) => {
                sys::rte_tel_data_string(d, c(s).as_ptr());
                0
            }
            TelData::Array(a) => {
                fill_array(d, a);
                0
            }
            TelData::Dict(dict) => {
                sys::rte_tel_data_start_dict(d);
                for (name, v) in dict.iter() {
                    let n = c(name);
                    match v {
                        TelValue::U64(x) => {
                            sys::rte_tel_data_add_dict_u64(d, n.as_ptr(), *x);
                        }
                        TelValue::Int(x) => {
                            sys::rte_tel_data_add_dict_int(d, n.as_ptr(), *x);
                        }
                        TelValue::Str(s) => {
                            sys::rte_tel_data_add_dict_string(d, n.as_ptr(), c(s).as_ptr());
                        }
                        TelValue::Array(a) => {
                            let inner = sys::rte_tel_data_alloc();
                            if inner.is_null() {
                                continue;
                            }
                            fill_array(inner, a);
                            // keep = 0: EAL frees the container once written.
                            if sys::rte_tel_data_add_dict_container(d, n.as_ptr(), inner, 0) != 0 {
                                sys::rte_tel_data_free(inner);
                            }
                        }
                    }
                }
                0
            }
        }
    }
}

/// Starts `d` as an array of `a`'s type and adds its elements.
///
/// # Safety
/// `d` must be a valid `rte_tel_data` (EAL's, or one from `rte_tel_data_alloc`).
unsafe fn fill_array(d: *mut sys::rte_tel_data, a: &TelArray) {
    // SAFETY: the caller's contract on `d`; strings are NUL-terminated and live across calls.
    unsafe {
        match a {
            TelArray::U64(v) => {
                sys::rte_tel_data_start_array(d, sys::rte_tel_value_type_RTE_TEL_U64_VAL);
                for x in v {
                    sys::rte_tel_data_add_array_u64(d, *x);
                }
            }
            TelArray::Int(v) => {
                sys::rte_tel_data_start_array(d, sys::rte_tel_value_type_RTE_TEL_INT_VAL);
                for x in v {
                    sys::rte_tel_data_add_array_int(d, *x);
                }
            }
            TelArray::Str(v) => {
                sys::rte_tel_data_start_array(d, sys::rte_tel_value_type_RTE_TEL_STRING_VAL);
                for s in v {
                    sys::rte_tel_data_add_array_string(d, c(s).as_ptr());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_prefix_is_read_from_eal_args() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            file_prefix(&a(&["-l", "0", "--file-prefix=nmdp-x"])),
            "nmdp-x"
        );
        assert_eq!(file_prefix(&a(&["--file-prefix", "y"])), "y");
        assert_eq!(file_prefix(&a(&["-l", "0"])), "rte");
    }
}
