//! Fuzzes the run-config checker: arbitrary TOML text and `--set` assignments give a config or
//! an error naming a key, never a panic. An accepted config also yields its hardware profile,
//! warnings and virtual NIC parameters (or an error) without a panic.
//!
//! Input layout: the text up to the first NUL byte is the config file; every further
//! NUL-separated piece is one `--set` assignment (invalid UTF-8 ends the input).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nmdp::config::RunConfig;
use nmdp::config::overrides::{apply_assignment, parse_value};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.split('\0');
    let file = parts.next().unwrap_or("");
    let path = Path::new("fuzz.toml");
    let Ok(mut table) = file.parse::<toml::Table>() else {
        return;
    };
    for set in parts.take(8) {
        let _ = parse_value(set);
        if apply_assignment(&mut table, set).is_err() {
            return;
        }
    }
    let Ok(cfg) = RunConfig::from_table(path, table) else {
        return;
    };
    let _ = cfg.warnings(path);
    let Ok(profile) = cfg.profile(path) else {
        return;
    };
    let _ = cfg.vnic_config(path, &profile, None, None);
    let _ = cfg.vnic_config(path, &profile, Some(10.0), Some(100));
    let _ = cfg.frame_hint();
    let _ = cfg.nf_dram_reads(&profile);
});
