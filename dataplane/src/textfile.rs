//! Reading the small text files a run is configured from (run configs, hardware profiles) with a
//! size bound.
//!
//! `std::fs::read_to_string` reads until end of file: given `/dev/zero`, a FIFO that never closes
//! or a multi-gigabyte file by mistake, it reads until memory runs out. Configuration files are a
//! few kilobytes, so anything that is not a regular file, or is larger than [`MAX_TEXT_FILE`], is
//! refused with an error saying what it is, before or while reading, never after reading it all.

use std::io::Read;
use std::path::Path;

/// Largest configuration file accepted: 1 MiB, hundreds of times the largest shipped config.
pub const MAX_TEXT_FILE: u64 = 1 << 20;

/// Reads `path` as UTF-8 text if it is a regular file of at most `max` bytes. The error says
/// what is wrong (not found, not a regular file, too large, not UTF-8) without naming `path`;
/// callers add the file and what it was for.
pub fn read_bounded(path: &Path, max: u64) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a device, FIFO or socket)"
        };
        return Err(format!("cannot read: {what}; give a TOML file"));
    }
    if meta.len() > max {
        return Err(too_large(meta.len(), max));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    // The file may grow between the size check and the read: read one byte past the bound at
    // most, so that a growing file is refused instead of read without end.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(too_large(bytes.len() as u64, max));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 text (invalid byte at offset {}); give a TOML file",
            e.utf8_error().valid_up_to()
        )
    })
}

fn too_large(len: u64, max: u64) -> String {
    format!("{len} bytes is larger than the {max} bytes a configuration file may have")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_devices_directories_and_large_files() {
        if Path::new("/dev/zero").exists() {
            let e = read_bounded(Path::new("/dev/zero"), MAX_TEXT_FILE).unwrap_err();
            assert!(e.contains("not a regular file"), "{e}");
        }
        let e = read_bounded(&std::env::temp_dir(), MAX_TEXT_FILE).unwrap_err();
        assert!(e.contains("a directory"), "{e}");
        let p = std::env::temp_dir().join(format!("nmdp-textfile-{}.toml", std::process::id()));
        std::fs::write(&p, "a = 1\n# padding\n").unwrap();
        assert_eq!(read_bounded(&p, 64).unwrap(), "a = 1\n# padding\n");
        let e = read_bounded(&p, 8).unwrap_err();
        assert!(e.contains("16 bytes is larger than the 8 bytes"), "{e}");
        std::fs::write(&p, b"a = \"\xff\"").unwrap();
        let e = read_bounded(&p, 64).unwrap_err();
        assert!(e.contains("not UTF-8") && e.contains("offset 5"), "{e}");
        std::fs::remove_file(&p).unwrap();
        let e = read_bounded(&p, 64).unwrap_err();
        assert!(e.starts_with("cannot read: "), "{e}");
    }
}
