//! Classic libpcap capture files as a link's wire side: [`PcapSource`] replays a capture into a
//! port, [`PcapSink`] records what a port transmits.
//!
//! Written here rather than taken from a crate because the format is small, we need exactly the
//! hot-path behaviour the run loop wants (no allocation, no lock, no syscall per frame: all I/O
//! goes through a `BufReader`/`BufWriter`), and bad input must become a counted statistic or a
//! typed error, never a panic.
//!
//! Format (the "classic" format, not pcapng): a 24-byte global header (magic, version 2.4,
//! thiszone, sigfigs, snaplen, link type) followed by records, each a 16-byte header (seconds,
//! sub-second fraction, captured length, original length) and the captured bytes. The magic
//! `0xa1b2c3d4` means microsecond timestamps, `0xa1b23c4d` nanoseconds; whichever byte order it is
//! read in gives the byte order of every other field. Only `LINKTYPE_ETHERNET` (1) is accepted:
//! the dataplane's frames are Ethernet frames without FCS. If the link-type field announces an
//! FCS (bit 28 set, FCS length in 16-bit words in bits 26..=27), it is stripped on read.
//!
//! Error policy: a bad or truncated global header, a wrong link type or an unreadable file is a
//! [`PcapError`] from [`PcapSource::open`], before any packet moves. Damage inside the file is
//! found only while replaying, and no record vanishes: each record that is not delivered is
//! counted by reason ([`PcapDrop`]: runt, oversize, truncated, damaged) and the first is kept
//! with its byte offset ([`PcapCounters::first_error`]). A record too short for an Ethernet
//! header or too long for a frame buffer is skipped when its boundaries check out (the next
//! record header starts where it ends); a header that describes no record fitting the file is
//! damage, and the reader resynchronises at the next offset where a plausible header starts
//! whose record is followed by another boundary, counting the skipped bytes as one damaged
//! record (or ends the pass when nothing lines up again); a record cut by the end of the file is
//! truncated.

use crate::link::{FrameSink, FrameSource};
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Microsecond-resolution magic number, as written in the file's own byte order.
pub const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// Nanosecond-resolution magic number.
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// The link type of Ethernet frames (`LINKTYPE_ETHERNET`, also `DLT_EN10MB`).
pub const LINKTYPE_ETHERNET: u16 = 1;
/// Snapshot length [`PcapSink`] announces: no frame we carry is longer.
pub const SINK_SNAPLEN: u32 = 65_535;
/// Size of the global file header.
pub const GLOBAL_HEADER_LEN: usize = 24;
/// Size of a record header.
pub const RECORD_HEADER_LEN: usize = 16;
/// Records shorter than an Ethernet header are not frames a port can receive; the source skips
/// them (counted as bad records).
pub const MIN_REPLAY_FRAME: usize = 14;
/// Largest captured length a record header is believed without checking where the record ends
/// (tcpdump's largest default snaplen is 262 144): longer claims count as damage unless the file
/// continues with a record boundary exactly where they end.
pub const MAX_PLAUSIBLE_RECORD: usize = 262_144;

/// Everything that can go wrong with a pcap file. Every variant names the file.
#[derive(Debug)]
pub enum PcapError {
    /// The file could not be opened, read, created or written.
    Io {
        /// The file.
        path: PathBuf,
        /// What the file was being used for ("open", "read", "create", "write", "flush").
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The file is shorter than the 24-byte global header.
    ShortHeader {
        /// The file.
        path: PathBuf,
        /// How many bytes it has.
        len: usize,
    },
    /// The first four bytes are not a classic pcap magic number (pcapng, or not a capture).
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The first four bytes, big-endian.
        magic: u32,
    },
    /// The version is not 2.x.
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },
    /// The capture is not of Ethernet frames.
    UnsupportedLinkType {
        /// The file.
        path: PathBuf,
        /// The link type found (low 16 bits of the field).
        linktype: u16,
    },
    /// A record header or its data ends before the end of the file says it should.
    TruncatedRecord {
        /// The file.
        path: PathBuf,
        /// Zero-based index of the record in the file.
        index: u64,
        /// Byte offset of the record header in the file.
        offset: u64,
    },
    /// A record is too short to hold an Ethernet header.
    RuntRecord {
        /// The file.
        path: PathBuf,
        /// Zero-based index of the record in the file.
        index: u64,
        /// Byte offset of the record header in the file.
        offset: u64,
        /// Its length after FCS stripping.
        len: usize,
    },
    /// A record header that describes no record fitting the file: the bytes from `offset` on
    /// are not records up to `resumed_at` (or the end of the file).
    DamagedRecord {
        /// The file.
        path: PathBuf,
        /// Zero-based index of the record in the file (a damaged stretch counts as one).
        index: u64,
        /// Byte offset of the damaged header in the file.
        offset: u64,
        /// The captured length the header claims.
        len: usize,
        /// Byte offset where records line up again; `None` when nothing does before the end.
        resumed_at: Option<u64>,
    },
    /// A record claims more bytes than the reader accepts.
    RecordTooLarge {
        /// The file.
        path: PathBuf,
        /// Zero-based index of the record in the file.
        index: u64,
        /// Byte offset of the record header in the file.
        offset: u64,
        /// The captured length the record header claims.
        len: usize,
        /// The largest length accepted.
        max: usize,
    },
}

impl fmt::Display for PcapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, op, source } => {
                write!(f, "pcap file {}: cannot {op}: {source}", path.display())
            }
            Self::ShortHeader { path, len } => write!(
                f,
                "pcap file {}: {len} bytes is shorter than the {GLOBAL_HEADER_LEN}-byte pcap header",
                path.display()
            ),
            Self::BadMagic { path, magic } => write!(
                f,
                "pcap file {}: magic 0x{magic:08x} is not a classic pcap file (expected \
                 0xa1b2c3d4 or 0xa1b23c4d in either byte order; pcapng is not supported)",
                path.display()
            ),
            Self::UnsupportedVersion { path, major, minor } => write!(
                f,
                "pcap file {}: version {major}.{minor} is not supported (expected 2.x)",
                path.display()
            ),
            Self::UnsupportedLinkType { path, linktype } => write!(
                f,
                "pcap file {}: link type {linktype} is not supported (only \
                 LINKTYPE_ETHERNET = {LINKTYPE_ETHERNET})",
                path.display()
            ),
            Self::TruncatedRecord {
                path,
                index,
                offset,
            } => write!(
                f,
                "pcap file {}: record {index} at byte {offset} is truncated",
                path.display()
            ),
            Self::RuntRecord {
                path,
                index,
                offset,
                len,
            } => write!(
                f,
                "pcap file {}: record {index} at byte {offset} has {len} bytes, less than an \
                 Ethernet header",
                path.display()
            ),
            Self::DamagedRecord {
                path,
                index,
                offset,
                len,
                resumed_at,
            } => {
                write!(
                    f,
                    "pcap file {}: record {index} at byte {offset} is damaged (claims {len} \
                     bytes, which no record boundary follows); ",
                    path.display()
                )?;
                match resumed_at {
                    Some(at) => write!(f, "records resume at byte {at}"),
                    None => write!(f, "no record follows up to the end of the file"),
                }
            }
            Self::RecordTooLarge {
                path,
                index,
                offset,
                len,
                max,
            } => write!(
                f,
                "pcap file {}: record {index} at byte {offset} claims {len} bytes (at most {max} \
                 accepted)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for PcapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Reads as many bytes as are available up to `buf.len()`; returns how many (short only at EOF).
fn fill(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The parsed global header: what is needed to read the records.
#[derive(Clone, Copy, Debug)]
struct FileFormat {
    /// Fields are big-endian.
    big_endian: bool,
    /// Sub-second field is nanoseconds (else microseconds).
    nanos: bool,
    /// Bytes of FCS at the end of every record, to strip.
    fcs_len: usize,
}

impl FileFormat {
    fn u32(&self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.big_endian {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }

    fn u16(&self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        if self.big_endian {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        }
    }

    /// Validates a global header.
    fn parse(path: &Path, h: &[u8], len: usize) -> Result<Self, PcapError> {
        if len < GLOBAL_HEADER_LEN {
            return Err(PcapError::ShortHeader {
                path: path.to_owned(),
                len,
            });
        }
        let be = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (big_endian, nanos) = match (be, le) {
            (MAGIC_MICROS, _) => (true, false),
            (MAGIC_NANOS, _) => (true, true),
            (_, MAGIC_MICROS) => (false, false),
            (_, MAGIC_NANOS) => (false, true),
            _ => {
                return Err(PcapError::BadMagic {
                    path: path.to_owned(),
                    magic: be,
                });
            }
        };
        let mut fmt = Self {
            big_endian,
            nanos,
            fcs_len: 0,
        };
        let (major, minor) = (fmt.u16(&h[4..]), fmt.u16(&h[6..]));
        if major != 2 {
            return Err(PcapError::UnsupportedVersion {
                path: path.to_owned(),
                major,
                minor,
            });
        }
        let lt = fmt.u32(&h[20..]);
        let linktype = (lt & 0xffff) as u16;
        if linktype != LINKTYPE_ETHERNET {
            return Err(PcapError::UnsupportedLinkType {
                path: path.to_owned(),
                linktype,
            });
        }
        if lt & (1 << 28) != 0 {
            fmt.fcs_len = ((lt >> 26) & 0x3) as usize * 2;
        }
        Ok(fmt)
    }
}

/// What one record read produced.
#[derive(Clone, Copy, Debug)]
struct Record {
    /// Bytes of the frame written to the buffer (FCS stripped).
    len: usize,
    /// The record's original length was larger than what was captured.
    snapped: bool,
}

/// Why a record of a capture could not be delivered as a frame: the `pcap.*` counters of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcapDrop {
    /// Shorter than an Ethernet header ([`MIN_REPLAY_FRAME`]); skipped.
    Runt,
    /// Longer than a frame buffer (the record itself is intact); skipped.
    Oversize,
    /// The file ends inside the record (a capture cut short); the pass ends.
    Truncated,
    /// The record header does not describe a record that fits the file: bytes that are not
    /// records. The reader resynchronises at the next offset where records line up again (the
    /// damaged bytes count as one record), or the pass ends when none does.
    Damaged,
}

impl PcapDrop {
    /// Every reason, in counter order.
    pub const ALL: [PcapDrop; 4] = [Self::Runt, Self::Oversize, Self::Truncated, Self::Damaged];

    /// The counter name (`runt`, `oversize`, `truncated`, `damaged`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Runt => "runt",
            Self::Oversize => "oversize",
            Self::Truncated => "truncated",
            Self::Damaged => "damaged",
        }
    }
}

/// A record that could not be delivered: why, the error describing it, and whether the pass is
/// over (the record boundaries are lost).
struct RecordFault {
    reason: PcapDrop,
    error: PcapError,
    ends_pass: bool,
}

/// Largest original length a resynchronised record header may claim (jumbo frames and TSO
/// captures stay far below).
const MAX_PLAUSIBLE_ORIG: u32 = 1 << 20;
/// Bytes scanned per read while resynchronising.
const RESYNC_WINDOW: usize = 64 * 1024;

/// A sequential record reader over an open file.
struct Reader {
    path: PathBuf,
    r: BufReader<File>,
    fmt: FileFormat,
    /// Length of the file when it was opened (`u64::MAX` for a stream).
    file_len: u64,
    /// A regular file (records can be checked ahead and damage skipped); false for a stream.
    seekable: bool,
    /// Index of the next record.
    index: u64,
    /// File offset of the next record.
    offset: u64,
    /// Scratch for resynchronisation (allocated once, at open).
    scan: Vec<u8>,
    /// Seconds field of the last record read whole (what a resynchronised header is compared
    /// with).
    last_secs: Option<u32>,
}

impl Reader {
    fn open(path: &Path) -> Result<Self, PcapError> {
        let io = |op, source| PcapError::Io {
            path: path.to_owned(),
            op,
            source,
        };
        let file = File::open(path).map_err(|e| io("open", e))?;
        let meta = file.metadata().map_err(|e| io("read", e))?;
        // A pipe or FIFO has no length and cannot seek: records are read as they come.
        let seekable = meta.is_file();
        let file_len = if seekable { meta.len() } else { u64::MAX };
        let mut r = BufReader::with_capacity(256 * 1024, file);
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        let len = fill(&mut r, &mut h).map_err(|e| io("read", e))?;
        let fmt = FileFormat::parse(path, &h, len)?;
        Ok(Self {
            path: path.to_owned(),
            r,
            fmt,
            file_len,
            seekable,
            index: 0,
            offset: GLOBAL_HEADER_LEN as u64,
            scan: vec![0; RESYNC_WINDOW + RECORD_HEADER_LEN],
            last_secs: None,
        })
    }

    /// Goes back to the first record.
    fn rewind(&mut self) -> Result<(), PcapError> {
        self.seek(GLOBAL_HEADER_LEN as u64)
            .map_err(|source| PcapError::Io {
                path: self.path.clone(),
                op: "read",
                source,
            })?;
        self.index = 0;
        self.last_secs = None;
        Ok(())
    }

    fn seek(&mut self, offset: u64) -> io::Result<()> {
        self.r.seek(SeekFrom::Start(offset))?;
        self.offset = offset;
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at `offset` (the reader is left positioned after them).
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.r.seek(SeekFrom::Start(offset))?;
        fill(&mut self.r, buf)
    }

    fn io_err(&self, source: io::Error) -> RecordFault {
        RecordFault {
            reason: PcapDrop::Damaged,
            error: PcapError::Io {
                path: self.path.clone(),
                op: "read",
                source,
            },
            ends_pass: true,
        }
    }

    fn truncated(&self, offset: u64) -> RecordFault {
        RecordFault {
            reason: PcapDrop::Truncated,
            error: PcapError::TruncatedRecord {
                path: self.path.clone(),
                index: self.index,
                offset,
            },
            ends_pass: true,
        }
    }

    /// Captured and original length of a record header.
    fn lengths(&self, h: &[u8]) -> (u32, u32) {
        (self.fmt.u32(&h[8..]), self.fmt.u32(&h[12..]))
    }

    /// Whether 16 bytes look like a record header: a sub-second field below one second (in
    /// nanoseconds, so that microsecond files that misuse the field still pass), a non-zero
    /// captured length a capture tool writes, and an original length at least as large. (Zeroed
    /// bytes, a common kind of damage, are not a header.)
    fn plausible(&self, h: &[u8]) -> bool {
        let (incl, orig) = self.lengths(h);
        self.fmt.u32(&h[4..]) < 1_000_000_000
            && (1..=MAX_PLAUSIBLE_RECORD).contains(&(incl as usize))
            && (incl..=MAX_PLAUSIBLE_ORIG).contains(&orig)
    }

    /// Whether two record times (seconds) are within a day of each other.
    fn close_in_time(a: u32, b: u32) -> bool {
        a.wrapping_sub(b).min(b.wrapping_sub(a)) <= 86_400
    }

    /// Whether a header is also close to the records read so far: a sub-second field
    /// valid for the file's resolution and a time within a day of the last record read whole.
    fn in_sequence(&self, h: &[u8]) -> bool {
        let subsec_max = if self.fmt.nanos {
            1_000_000_000
        } else {
            1_000_000
        };
        let secs = self.fmt.u32(h);
        self.fmt.u32(&h[4..]) < subsec_max
            && self
                .last_secs
                .is_some_and(|last| Self::close_in_time(secs, last))
    }

    /// Whether a record stamped `secs` that ends at `end` is followed by the end of the file or
    /// by a plausible record header stamped within a day of it.
    fn boundary_ok(&mut self, end: u64, secs: u32) -> io::Result<bool> {
        if end == self.file_len {
            return Ok(true);
        }
        if end + RECORD_HEADER_LEN as u64 > self.file_len {
            return Ok(false);
        }
        let mut h = [0u8; RECORD_HEADER_LEN];
        let got = self.read_at(end, &mut h)?;
        Ok(got == RECORD_HEADER_LEN
            && self.plausible(&h)
            && Self::close_in_time(self.fmt.u32(&h), secs))
    }

    /// The first offset at or after `from` where a plausible record header starts whose record
    /// fits the file and which either continues the sequence of records read so far
    /// ([`Reader::in_sequence`]) or is followed by a record boundary ([`Reader::boundary_ok`]).
    fn resync(&mut self, from: u64) -> io::Result<Option<u64>> {
        let last = self.file_len.saturating_sub(RECORD_HEADER_LEN as u64);
        let mut base = from;
        let mut scan = std::mem::take(&mut self.scan);
        let found = 'outer: loop {
            if base > last {
                break None;
            }
            let got = match self.read_at(base, &mut scan) {
                Ok(n) => n,
                Err(e) => {
                    self.scan = scan;
                    return Err(e);
                }
            };
            if got < RECORD_HEADER_LEN {
                break None;
            }
            for i in 0..=got - RECORD_HEADER_LEN {
                let h = &scan[i..i + RECORD_HEADER_LEN];
                if !self.plausible(h) {
                    continue;
                }
                let at = base + i as u64;
                let end = at + (RECORD_HEADER_LEN as u64) + u64::from(self.lengths(h).0);
                if end <= self.file_len && self.in_sequence(h) {
                    break 'outer Some(at);
                }
                if end <= self.file_len {
                    let secs = self.fmt.u32(h);
                    match self.boundary_ok(end, secs) {
                        Ok(true) => break 'outer Some(at),
                        Ok(false) => {}
                        Err(e) => {
                            self.scan = scan;
                            return Err(e);
                        }
                    }
                }
            }
            base += (got - RECORD_HEADER_LEN + 1) as u64;
        };
        self.scan = scan;
        Ok(found)
    }

    /// Reads the next record into `buf`. `Ok(None)` at a clean end of file.
    fn next(&mut self, buf: &mut [u8]) -> Result<Option<Record>, RecordFault> {
        let start = self.offset;
        let mut h = [0u8; RECORD_HEADER_LEN];
        let got = fill(&mut self.r, &mut h).map_err(|e| self.io_err(e))?;
        if got == 0 {
            return Ok(None);
        }
        if got < RECORD_HEADER_LEN {
            return Err(self.truncated(start));
        }
        let (incl32, orig) = self.lengths(&h);
        let incl = incl32 as usize;
        let end = start + (RECORD_HEADER_LEN + incl) as u64;
        if incl <= buf.len() && end <= self.file_len {
            let got = fill(&mut self.r, &mut buf[..incl]).map_err(|e| self.io_err(e))?;
            if got < incl {
                // The file shrank while it was being read.
                return Err(self.truncated(start));
            }
            self.advance(end);
            self.last_secs = Some(self.fmt.u32(&h));
            // The FCS (if the file has one) is present only when the capture was not cut short.
            let len = if self.fmt.fcs_len > 0 && incl32 == orig {
                incl.saturating_sub(self.fmt.fcs_len)
            } else {
                incl
            };
            return Ok(Some(Record {
                len,
                snapped: orig > incl32,
            }));
        }
        if !self.seekable {
            return Err(self.skip_unseekable(start, incl, buf.len()));
        }
        // The record does not fit the buffer or the file. Intact but too large for a frame buffer
        // if it fits the file and the next record starts where it ends; otherwise its header is
        // damaged (or the file was cut inside it).
        let secs = self.fmt.u32(&h);
        if end <= self.file_len && self.boundary_ok(end, secs).map_err(|e| self.io_err(e))? {
            self.seek(end).map_err(|e| self.io_err(e))?;
            let fault = RecordFault {
                reason: PcapDrop::Oversize,
                error: PcapError::RecordTooLarge {
                    path: self.path.clone(),
                    index: self.index,
                    offset: start,
                    len: incl,
                    max: buf.len(),
                },
                ends_pass: false,
            };
            self.advance(end);
            return Err(fault);
        }
        match self.resync(start + 1).map_err(|e| self.io_err(e))? {
            Some(at) => {
                self.seek(at).map_err(|e| self.io_err(e))?;
                let fault = RecordFault {
                    reason: PcapDrop::Damaged,
                    error: PcapError::DamagedRecord {
                        path: self.path.clone(),
                        index: self.index,
                        offset: start,
                        len: incl,
                        resumed_at: Some(at),
                    },
                    ends_pass: false,
                };
                self.advance(at);
                Err(fault)
            }
            // Nothing lines up after it: a plausible record cut by the end of the file is a
            // truncated capture; anything else is damage up to the end of the file.
            None if end > self.file_len && incl <= MAX_PLAUSIBLE_RECORD => {
                Err(self.truncated(start))
            }
            None => Err(RecordFault {
                reason: PcapDrop::Damaged,
                error: PcapError::DamagedRecord {
                    path: self.path.clone(),
                    index: self.index,
                    offset: start,
                    len: incl,
                    resumed_at: None,
                },
                ends_pass: true,
            }),
        }
    }

    /// A record too large for a frame buffer in a stream that cannot seek (a pipe): skipped by
    /// reading it when its length is plausible (oversize, or truncated if the stream ends inside
    /// it); otherwise the stream is out of sync and the pass ends (damaged).
    fn skip_unseekable(&mut self, start: u64, incl: usize, max: usize) -> RecordFault {
        if incl > MAX_PLAUSIBLE_RECORD {
            return RecordFault {
                reason: PcapDrop::Damaged,
                error: PcapError::DamagedRecord {
                    path: self.path.clone(),
                    index: self.index,
                    offset: start,
                    len: incl,
                    resumed_at: None,
                },
                ends_pass: true,
            };
        }
        match io::copy(&mut (&mut self.r).take(incl as u64), &mut io::sink()) {
            Ok(n) if n == incl as u64 => {
                let fault = RecordFault {
                    reason: PcapDrop::Oversize,
                    error: PcapError::RecordTooLarge {
                        path: self.path.clone(),
                        index: self.index,
                        offset: start,
                        len: incl,
                        max,
                    },
                    ends_pass: false,
                };
                self.advance(start + (RECORD_HEADER_LEN + incl) as u64);
                fault
            }
            Ok(_) => self.truncated(start),
            Err(e) => self.io_err(e),
        }
    }

    /// Moves past a record (or damaged bytes) ending at `end`.
    fn advance(&mut self, end: u64) {
        self.index += 1;
        self.offset = end;
    }
}

/// Counters of a [`PcapSource`] or [`PcapSink`], shared so a stats thread can read them while the
/// port runs. Updated with relaxed stores in bulk (every [`PUBLISH_EVERY`] frames) and at the end,
/// so they are exact once the source is exhausted or the sink finished.
#[derive(Debug, Default)]
pub struct PcapCounters {
    /// Frames read from / written to the file.
    pub frames: AtomicU64,
    /// Bytes of those frames.
    pub bytes: AtomicU64,
    /// Records that could not be replayed, all reasons (the sum of `runt`, `oversize`,
    /// `truncated` and `damaged`); source only.
    pub bad_records: AtomicU64,
    /// Records shorter than an Ethernet header ([`PcapDrop::Runt`]); source only.
    pub runt: AtomicU64,
    /// Records longer than a frame buffer ([`PcapDrop::Oversize`]); source only.
    pub oversize: AtomicU64,
    /// Records cut by the end of the file ([`PcapDrop::Truncated`]); source only.
    pub truncated: AtomicU64,
    /// Damaged stretches of the file ([`PcapDrop::Damaged`]); source only.
    pub damaged: AtomicU64,
    /// Records whose captured length was shorter than the original frame (replayed as
    /// captured); source only.
    pub snapped_records: AtomicU64,
    /// Completed passes over the file; source only.
    pub passes: AtomicU64,
    /// Failed writes (the sink keeps the first error); sink only.
    pub write_errors: AtomicU64,
    /// The first damaged record (source) or failed write (sink), with the file, the record and
    /// its byte offset or the OS error; set once.
    first_error: OnceLock<String>,
}

/// How often (in frames) the local counters are published to [`PcapCounters`].
pub const PUBLISH_EVERY: u64 = 64;

/// Plain copy of [`PcapCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcapStats {
    /// Frames read or written.
    pub frames: u64,
    /// Bytes of those frames.
    pub bytes: u64,
    /// Records that could not be replayed (all reasons).
    pub bad_records: u64,
    /// Records shorter than an Ethernet header.
    pub runt: u64,
    /// Records longer than a frame buffer.
    pub oversize: u64,
    /// Records cut by the end of the file.
    pub truncated: u64,
    /// Damaged stretches of the file.
    pub damaged: u64,
    /// Records replayed shorter than their original length.
    pub snapped_records: u64,
    /// Completed passes over the file.
    pub passes: u64,
    /// Failed writes.
    pub write_errors: u64,
}

impl PcapStats {
    /// Records not delivered for `reason`.
    pub fn dropped(&self, reason: PcapDrop) -> u64 {
        match reason {
            PcapDrop::Runt => self.runt,
            PcapDrop::Oversize => self.oversize,
            PcapDrop::Truncated => self.truncated,
            PcapDrop::Damaged => self.damaged,
        }
    }

    fn count(&mut self, reason: PcapDrop) {
        self.bad_records += 1;
        match reason {
            PcapDrop::Runt => self.runt += 1,
            PcapDrop::Oversize => self.oversize += 1,
            PcapDrop::Truncated => self.truncated += 1,
            PcapDrop::Damaged => self.damaged += 1,
        }
    }
}

impl PcapCounters {
    /// A snapshot of the counters.
    pub fn snapshot(&self) -> PcapStats {
        PcapStats {
            frames: self.frames.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            bad_records: self.bad_records.load(Ordering::Relaxed),
            runt: self.runt.load(Ordering::Relaxed),
            oversize: self.oversize.load(Ordering::Relaxed),
            truncated: self.truncated.load(Ordering::Relaxed),
            damaged: self.damaged.load(Ordering::Relaxed),
            snapped_records: self.snapped_records.load(Ordering::Relaxed),
            passes: self.passes.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
        }
    }

    /// The first damaged record or failed write, if any (the rest are only counted).
    pub fn first_error(&self) -> Option<&str> {
        self.first_error.get().map(String::as_str)
    }

    fn publish(&self, s: &PcapStats) {
        self.frames.store(s.frames, Ordering::Relaxed);
        self.bytes.store(s.bytes, Ordering::Relaxed);
        self.bad_records.store(s.bad_records, Ordering::Relaxed);
        self.runt.store(s.runt, Ordering::Relaxed);
        self.oversize.store(s.oversize, Ordering::Relaxed);
        self.truncated.store(s.truncated, Ordering::Relaxed);
        self.damaged.store(s.damaged, Ordering::Relaxed);
        self.snapped_records
            .store(s.snapped_records, Ordering::Relaxed);
        self.passes.store(s.passes, Ordering::Relaxed);
        self.write_errors.store(s.write_errors, Ordering::Relaxed);
    }
}

/// Replays a pcap file as the frames arriving at a port.
///
/// Every record that is not delivered is counted by reason ([`PcapDrop`]): runts and records
/// longer than the caller's buffer are skipped, damaged bytes are skipped up to the next offset
/// where records line up again, and a record cut by the end of the file ends the pass. So per
/// pass, frames delivered plus the four counters equal the records in the file (a damaged
/// stretch counting as one). The file is replayed `loops` times (see
/// [`PcapSource::with_loops`]); a pass that yields no frame at all ends the replay, so a file of
/// only bad records cannot spin forever.
pub struct PcapSource {
    reader: Reader,
    /// Passes to play in total; 0 = until stopped.
    loops: u32,
    /// Frames produced in the current pass.
    pass_frames: u64,
    done: bool,
    local: PcapStats,
    counters: Arc<PcapCounters>,
    first_error: Option<PcapError>,
}

impl PcapSource {
    /// Opens `path` for a single pass, validating the global header (byte order, micro- or
    /// nanosecond magic, version 2.x, Ethernet link type) before any frame is read.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        Ok(Self {
            reader: Reader::open(path.as_ref())?,
            loops: 1,
            pass_frames: 0,
            done: false,
            local: PcapStats::default(),
            counters: Arc::new(PcapCounters::default()),
            first_error: None,
        })
    }

    /// Replays the file `loops` times in total; `0` replays it until the run stops.
    pub fn with_loops(mut self, loops: u32) -> Self {
        self.loops = loops;
        self
    }

    /// The file being replayed.
    pub fn path(&self) -> &Path {
        &self.reader.path
    }

    /// True if the file stores nanosecond timestamps.
    pub fn nanosecond_timestamps(&self) -> bool {
        self.reader.fmt.nanos
    }

    /// True if the file's fields are big-endian.
    pub fn big_endian(&self) -> bool {
        self.reader.fmt.big_endian
    }

    /// The shared counters (frames, bytes, records not delivered by reason, passes), for live
    /// stats and the summary.
    pub fn counters(&self) -> Arc<PcapCounters> {
        self.counters.clone()
    }

    /// The first damaged record met, if any (the rest are only counted).
    pub fn first_error(&self) -> Option<&PcapError> {
        self.first_error.as_ref()
    }

    fn record_fault(&mut self, reason: PcapDrop, e: PcapError) {
        self.local.count(reason);
        if self.first_error.is_none() {
            let _ = self.counters.first_error.set(e.to_string());
            self.first_error = Some(e);
        }
    }

    /// Ends the current pass: rewinds for the next one or marks the source done.
    fn end_pass(&mut self) {
        self.local.passes += 1;
        let more = self.loops == 0 || self.local.passes < u64::from(self.loops);
        if !more || self.pass_frames == 0 {
            self.done = true;
        } else if let Err(e) = self.reader.rewind() {
            self.record_fault(PcapDrop::Damaged, e);
            self.done = true;
        }
        self.pass_frames = 0;
        self.counters.publish(&self.local);
    }
}

impl FrameSource for PcapSource {
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        while !self.done {
            let at = self.reader.offset;
            match self.reader.next(buf) {
                Ok(Some(rec)) if rec.len < MIN_REPLAY_FRAME => {
                    let e = PcapError::RuntRecord {
                        path: self.reader.path.clone(),
                        index: self.reader.index - 1,
                        offset: at,
                        len: rec.len,
                    };
                    self.record_fault(PcapDrop::Runt, e);
                }
                Ok(Some(rec)) => {
                    self.pass_frames += 1;
                    self.local.frames += 1;
                    self.local.bytes += rec.len as u64;
                    self.local.snapped_records += u64::from(rec.snapped);
                    if self.local.frames.is_multiple_of(PUBLISH_EVERY) {
                        self.counters.publish(&self.local);
                    }
                    return Some(rec.len);
                }
                Ok(None) => self.end_pass(),
                Err(f) => {
                    self.record_fault(f.reason, f.error);
                    if f.ends_pass {
                        self.end_pass();
                    }
                }
            }
        }
        None
    }

    fn exhausted(&self) -> bool {
        self.done
    }
}

/// Where [`PcapSink`] takes each record's timestamp from.
pub enum Timestamps {
    /// Frame `n` (from 0) is stamped `start_ns + n * step_ns`: deterministic files.
    Counter {
        /// Timestamp of the first frame, ns since the Unix epoch.
        start_ns: u64,
        /// Increment per frame, ns.
        step_ns: u64,
    },
    /// Called once per frame; returns ns since the Unix epoch (e.g. the run's virtual clock).
    Clock(Box<dyn FnMut() -> u64 + Send>),
}

impl Default for Timestamps {
    /// One microsecond per frame from the epoch.
    fn default() -> Self {
        Self::Counter {
            start_ns: 0,
            step_ns: 1_000,
        }
    }
}

impl fmt::Debug for Timestamps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Counter { start_ns, step_ns } => f
                .debug_struct("Counter")
                .field("start_ns", start_ns)
                .field("step_ns", step_ns)
                .finish(),
            Self::Clock(_) => f.write_str("Clock(..)"),
        }
    }
}

/// Writes the frames a port transmits to a pcap file (little-endian, microsecond timestamps,
/// `LINKTYPE_ETHERNET`, snaplen 65535) that Wireshark and tcpdump read.
///
/// Write errors cannot be returned from [`FrameSink::deliver`]; they are counted in
/// [`PcapCounters::write_errors`], the first is kept ([`PcapSink::error`], and as text in
/// [`PcapCounters::first_error`], published at once so that a run can stop on it) and later
/// frames are dropped. [`PcapSink::close`] returns it.
pub struct PcapSink {
    path: PathBuf,
    w: BufWriter<File>,
    ts: Timestamps,
    local: PcapStats,
    counters: Arc<PcapCounters>,
    error: Option<PcapError>,
}

impl fmt::Debug for PcapSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PcapSink")
            .field("path", &self.path)
            .field("ts", &self.ts)
            .field("stats", &self.local)
            .finish_non_exhaustive()
    }
}

impl PcapSink {
    /// Creates (or truncates) `path` and writes the global header; frames are stamped one
    /// microsecond apart from the epoch.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        Self::with_timestamps(path, Timestamps::default())
    }

    /// Like [`PcapSink::create`], with the timestamps taken from `ts`.
    pub fn with_timestamps(path: impl AsRef<Path>, ts: Timestamps) -> Result<Self, PcapError> {
        let path = path.as_ref().to_owned();
        let file = File::create(&path).map_err(|source| PcapError::Io {
            path: path.clone(),
            op: "create",
            source,
        })?;
        let mut w = BufWriter::with_capacity(256 * 1024, file);
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC_MICROS.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0.
        h[16..20].copy_from_slice(&SINK_SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&u32::from(LINKTYPE_ETHERNET).to_le_bytes());
        w.write_all(&h).map_err(|source| PcapError::Io {
            path: path.clone(),
            op: "write",
            source,
        })?;
        Ok(Self {
            path,
            w,
            ts,
            local: PcapStats::default(),
            counters: Arc::new(PcapCounters::default()),
            error: None,
        })
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The shared counters (frames, bytes, write errors).
    pub fn counters(&self) -> Arc<PcapCounters> {
        self.counters.clone()
    }

    /// The first write error, if any.
    pub fn error(&self) -> Option<&PcapError> {
        self.error.as_ref()
    }

    /// Flushes the file and returns the final counters, or the first write error.
    pub fn close(mut self) -> Result<PcapStats, PcapError> {
        self.flush();
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(self.local),
        }
    }

    fn fail(&mut self, op: &'static str, source: io::Error) {
        self.local.write_errors += 1;
        if self.error.is_none() {
            let e = PcapError::Io {
                path: self.path.clone(),
                op,
                source,
            };
            let _ = self.counters.first_error.set(e.to_string());
            self.error = Some(e);
            // Published now, so that whoever watches the counters can stop the run.
            self.counters.publish(&self.local);
        }
    }

    fn flush(&mut self) {
        if self.error.is_none()
            && let Err(e) = self.w.flush()
        {
            self.fail("flush", e);
        }
        self.counters.publish(&self.local);
    }

    fn next_timestamp(&mut self) -> u64 {
        match &mut self.ts {
            Timestamps::Counter { start_ns, step_ns } => {
                start_ns.wrapping_add(self.local.frames.wrapping_mul(*step_ns))
            }
            Timestamps::Clock(clock) => clock(),
        }
    }
}

impl FrameSink for PcapSink {
    fn deliver(&mut self, frame: &[u8]) {
        if self.error.is_some() {
            self.local.write_errors += 1;
            return;
        }
        let ns = self.next_timestamp();
        let incl = frame.len().min(SINK_SNAPLEN as usize);
        let mut h = [0u8; RECORD_HEADER_LEN];
        // Seconds wrap in 2106, as in every classic pcap file.
        h[0..4].copy_from_slice(&((ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((ns % 1_000_000_000 / 1_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(incl as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        let res = self
            .w
            .write_all(&h)
            .and_then(|()| self.w.write_all(&frame[..incl]));
        match res {
            Ok(()) => {
                self.local.frames += 1;
                self.local.bytes += incl as u64;
                if self.local.frames.is_multiple_of(PUBLISH_EVERY) {
                    self.counters.publish(&self.local);
                }
            }
            Err(e) => self.fail("write", e),
        }
    }

    fn finish(&mut self) {
        self.flush();
    }
}

impl Drop for PcapSink {
    fn drop(&mut self) {
        // BufWriter flushes on drop too, but silently; this keeps the counters right.
        self.flush();
    }
}

/// Reads every frame of a pcap file, failing on any damage (strict; for tests and tools). Unlike
/// [`PcapSource`] it returns runt records as they are.
pub fn read_all(path: impl AsRef<Path>) -> Result<Vec<Vec<u8>>, PcapError> {
    let mut reader = Reader::open(path.as_ref())?;
    let mut buf = vec![0u8; MAX_PLAUSIBLE_RECORD];
    let mut frames = Vec::new();
    loop {
        match reader.next(&mut buf) {
            Ok(Some(rec)) => frames.push(buf[..rec.len].to_vec()),
            Ok(None) => return Ok(frames),
            Err(f) => return Err(f.error),
        }
    }
}

/// Writes `frames` to a new pcap file (timestamps one microsecond apart; for tests and tools).
pub fn write_all<F: AsRef<[u8]>>(
    path: impl AsRef<Path>,
    frames: impl IntoIterator<Item = F>,
) -> Result<PcapStats, PcapError> {
    let mut sink = PcapSink::create(path)?;
    for f in frames {
        sink.deliver(f.as_ref());
    }
    sink.close()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::MAX_WIRE_FRAME;
    use std::sync::atomic::AtomicUsize;

    /// A unique temporary file removed on drop.
    struct TempPath(PathBuf);

    impl TempPath {
        fn new(tag: &str) -> Self {
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            Self(std::env::temp_dir().join(format!(
                "nmdp-pcap-test-{}-{tag}-{n}.pcap",
                std::process::id()
            )))
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn frame(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
    }

    /// Builds a pcap file by hand in either byte order.
    fn raw_pcap(big_endian: bool, magic: u32, linktype: u32, frames: &[Vec<u8>]) -> Vec<u8> {
        let u32b = |v: u32| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let u16b = |v: u16| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut out = Vec::new();
        out.extend_from_slice(&u32b(magic));
        out.extend_from_slice(&u16b(2));
        out.extend_from_slice(&u16b(4));
        out.extend_from_slice(&u32b(0));
        out.extend_from_slice(&u32b(0));
        out.extend_from_slice(&u32b(65535));
        out.extend_from_slice(&u32b(linktype));
        for (i, f) in frames.iter().enumerate() {
            out.extend_from_slice(&u32b(1_700_000_000 + i as u32));
            out.extend_from_slice(&u32b(123_456_789));
            out.extend_from_slice(&u32b(f.len() as u32));
            out.extend_from_slice(&u32b(f.len() as u32));
            out.extend_from_slice(f);
        }
        out
    }

    fn replay(src: &mut PcapSource) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        let mut out = Vec::new();
        while let Some(n) = src.next_frame(&mut buf) {
            out.push(buf[..n].to_vec());
        }
        assert!(src.exhausted());
        out
    }

    #[test]
    fn round_trip_through_sink_and_source() {
        let p = TempPath::new("rt");
        let frames: Vec<Vec<u8>> = (0..200).map(|i| frame(i, 60 + i * 7)).collect();
        let stats = write_all(&p.0, &frames).unwrap();
        assert_eq!(stats.frames, 200);
        assert_eq!(
            stats.bytes,
            frames.iter().map(|f| f.len() as u64).sum::<u64>()
        );
        assert_eq!(read_all(&p.0).unwrap(), frames);

        let mut src = PcapSource::open(&p.0).unwrap();
        assert!(!src.big_endian() && !src.nanosecond_timestamps());
        assert_eq!(replay(&mut src), frames);
        let c = src.counters().snapshot();
        assert_eq!((c.frames, c.bad_records, c.passes), (200, 0, 1));
    }

    #[test]
    fn sink_writes_the_documented_header_and_timestamps() {
        let p = TempPath::new("hdr");
        let mut t = 5_000_000_000u64;
        let ts = Timestamps::Clock(Box::new(move || {
            t += 1_500;
            t
        }));
        let mut sink = PcapSink::with_timestamps(&p.0, ts).unwrap();
        sink.deliver(&frame(0, 64));
        sink.deliver(&frame(1, 70));
        sink.finish();
        assert_eq!(sink.counters().snapshot().frames, 2);
        drop(sink);
        let b = std::fs::read(&p.0).unwrap();
        let u32le = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        assert_eq!(u32le(0), MAGIC_MICROS);
        assert_eq!(u32le(16), 65535);
        assert_eq!(u32le(20), 1);
        // First record: 5.000001500 s -> 5 s, 1 µs.
        assert_eq!((u32le(24), u32le(28), u32le(32), u32le(36)), (5, 1, 64, 64));
        let second = 24 + 16 + 64;
        assert_eq!((u32le(second), u32le(second + 4)), (5, 3));
        assert_eq!(b.len(), 24 + 16 + 64 + 16 + 70);
    }

    #[test]
    fn counter_timestamps_step_per_frame() {
        let p = TempPath::new("ctr");
        let ts = Timestamps::Counter {
            start_ns: 2_999_999_000,
            step_ns: 1_000,
        };
        let mut sink = PcapSink::with_timestamps(&p.0, ts).unwrap();
        sink.deliver(&frame(0, 60));
        sink.deliver(&frame(1, 60));
        sink.close().unwrap();
        let b = std::fs::read(&p.0).unwrap();
        let u32le = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        assert_eq!((u32le(24), u32le(28)), (2, 999_999));
        assert_eq!((u32le(24 + 76), u32le(28 + 76)), (3, 0));
    }

    #[test]
    fn reads_both_byte_orders_and_nanosecond_magic() {
        let frames: Vec<Vec<u8>> = (0..5).map(|i| frame(i, 60 + i)).collect();
        for big_endian in [false, true] {
            for magic in [MAGIC_MICROS, MAGIC_NANOS] {
                let p = TempPath::new("order");
                std::fs::write(&p.0, raw_pcap(big_endian, magic, 1, &frames)).unwrap();
                let mut src = PcapSource::open(&p.0).unwrap();
                assert_eq!(src.big_endian(), big_endian);
                assert_eq!(src.nanosecond_timestamps(), magic == MAGIC_NANOS);
                assert_eq!(replay(&mut src), frames, "be={big_endian} magic={magic:x}");
                assert_eq!(read_all(&p.0).unwrap(), frames);
            }
        }
    }

    #[test]
    fn strips_an_announced_fcs() {
        let p = TempPath::new("fcs");
        let with_fcs: Vec<Vec<u8>> = (0..3).map(|i| frame(i, 64)).collect();
        // F bit (28) set, FCS length 2 words (4 bytes) in bits 26..=27.
        let lt = 1 | (1 << 28) | (2 << 26);
        std::fs::write(&p.0, raw_pcap(false, MAGIC_MICROS, lt, &with_fcs)).unwrap();
        let got = read_all(&p.0).unwrap();
        assert_eq!(got.len(), 3);
        for (g, f) in got.iter().zip(&with_fcs) {
            assert_eq!(g[..], f[..60]);
        }
    }

    #[test]
    fn loops_replay_the_file_and_zero_frames_do_not_spin() {
        let p = TempPath::new("loop");
        let frames: Vec<Vec<u8>> = (0..3).map(|i| frame(i, 60)).collect();
        write_all(&p.0, &frames).unwrap();
        let mut src = PcapSource::open(&p.0).unwrap().with_loops(4);
        let got = replay(&mut src);
        assert_eq!(got.len(), 12);
        assert_eq!(got[9..], frames[..]);
        assert_eq!(src.counters().snapshot().passes, 4);

        // Endless replay stops on the caller's side.
        let mut src = PcapSource::open(&p.0).unwrap().with_loops(0);
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        for i in 0..1000 {
            let n = src.next_frame(&mut buf).unwrap();
            assert_eq!(buf[..n], frames[i % 3][..]);
        }
        assert!(!src.exhausted());

        let empty = TempPath::new("empty");
        write_all(&empty.0, Vec::<Vec<u8>>::new()).unwrap();
        let mut src = PcapSource::open(&empty.0).unwrap().with_loops(0);
        assert!(replay(&mut src).is_empty());
    }

    #[test]
    fn truncated_file_is_counted_not_fatal() {
        let p = TempPath::new("trunc");
        let frames: Vec<Vec<u8>> = (0..4).map(|i| frame(i, 100)).collect();
        let mut bytes = raw_pcap(false, MAGIC_MICROS, 1, &frames);
        // Cut the last record in the middle of its data.
        bytes.truncate(bytes.len() - 30);
        std::fs::write(&p.0, &bytes).unwrap();
        let mut src = PcapSource::open(&p.0).unwrap().with_loops(2);
        let got = replay(&mut src);
        assert_eq!(got.len(), 6, "three good frames per pass");
        assert_eq!(got[..3], frames[..3]);
        let c = src.counters().snapshot();
        assert_eq!((c.frames, c.bad_records, c.passes), (6, 2, 2));
        let err = src.first_error().unwrap().to_string();
        assert!(
            err.contains("record 3") && err.contains("truncated"),
            "{err}"
        );
        assert!(err.contains(&*p.0.to_string_lossy()), "{err}");
        assert!(matches!(
            read_all(&p.0),
            Err(PcapError::TruncatedRecord { index: 3, .. })
        ));

        // A record header cut short.
        bytes.truncate(24 + 3 * 116 + 10);
        std::fs::write(&p.0, &bytes).unwrap();
        let mut src = PcapSource::open(&p.0).unwrap();
        assert_eq!(replay(&mut src).len(), 3);
        assert_eq!(src.counters().snapshot().bad_records, 1);
    }

    #[test]
    fn oversized_records_are_skipped_and_implausible_ones_end_the_pass() {
        let p = TempPath::new("big");
        let frames = vec![frame(0, 60), frame(1, MAX_WIRE_FRAME + 1), frame(2, 61)];
        std::fs::write(&p.0, raw_pcap(true, MAGIC_MICROS, 1, &frames)).unwrap();
        let mut src = PcapSource::open(&p.0).unwrap();
        assert_eq!(replay(&mut src), vec![frames[0].clone(), frames[2].clone()]);
        assert_eq!(src.counters().snapshot().bad_records, 1);
        assert!(matches!(
            src.first_error(),
            Some(PcapError::RecordTooLarge { index: 1, .. })
        ));
        // read_all accepts anything up to MAX_PLAUSIBLE_RECORD.
        assert_eq!(read_all(&p.0).unwrap(), frames);

        // A record claiming 1 GB: out of sync, the pass ends.
        let mut bytes = raw_pcap(false, MAGIC_MICROS, 1, &[frame(0, 60), frame(1, 60)]);
        let second = 24 + 16 + 60;
        bytes[second + 8..second + 12].copy_from_slice(&1_000_000_000u32.to_le_bytes());
        std::fs::write(&p.0, &bytes).unwrap();
        let mut src = PcapSource::open(&p.0).unwrap().with_loops(3);
        assert_eq!(replay(&mut src).len(), 3);
        assert_eq!(src.counters().snapshot().bad_records, 3);
    }

    #[test]
    fn runt_records_are_skipped_by_the_source() {
        let p = TempPath::new("runt");
        let frames = vec![frame(0, 60), Vec::new(), frame(2, 13), frame(3, 14)];
        std::fs::write(&p.0, raw_pcap(false, MAGIC_NANOS, 1, &frames)).unwrap();
        let mut src = PcapSource::open(&p.0).unwrap();
        assert_eq!(replay(&mut src), vec![frames[0].clone(), frames[3].clone()]);
        assert_eq!(src.counters().snapshot().bad_records, 2);
        assert!(matches!(
            src.first_error(),
            Some(PcapError::RuntRecord {
                index: 1,
                len: 0,
                ..
            })
        ));
        assert_eq!(read_all(&p.0).unwrap(), frames);
    }

    #[test]
    fn non_ethernet_linktype_is_rejected_at_open() {
        let p = TempPath::new("lt");
        // LINKTYPE_RAW (101).
        std::fs::write(&p.0, raw_pcap(false, MAGIC_MICROS, 101, &[frame(0, 60)])).unwrap();
        let err = PcapSource::open(&p.0).err().unwrap();
        assert!(matches!(
            err,
            PcapError::UnsupportedLinkType { linktype: 101, .. }
        ));
        let msg = err.to_string();
        assert!(msg.contains("link type 101") && msg.contains("LINKTYPE_ETHERNET"));
        assert!(msg.contains(&*p.0.to_string_lossy()), "{msg}");
        assert!(read_all(&p.0).is_err());
    }

    #[test]
    fn garbage_and_short_files_are_rejected_at_open() {
        let p = TempPath::new("garbage");
        std::fs::write(&p.0, b"this is certainly not a capture file at all").unwrap();
        let err = PcapSource::open(&p.0).err().unwrap();
        assert!(
            matches!(
                err,
                PcapError::BadMagic {
                    magic: 0x74686973,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("not a classic pcap file"));

        std::fs::write(&p.0, MAGIC_MICROS.to_le_bytes()).unwrap();
        let err = PcapSource::open(&p.0).err().unwrap();
        assert!(
            matches!(err, PcapError::ShortHeader { len: 4, .. }),
            "{err}"
        );

        std::fs::write(&p.0, b"").unwrap();
        assert!(matches!(
            PcapSource::open(&p.0),
            Err(PcapError::ShortHeader { len: 0, .. })
        ));

        let mut bytes = raw_pcap(false, MAGIC_MICROS, 1, &[]);
        bytes[4] = 3; // version 3.4
        std::fs::write(&p.0, &bytes).unwrap();
        assert!(matches!(
            PcapSource::open(&p.0),
            Err(PcapError::UnsupportedVersion { major: 3, .. })
        ));

        let missing = TempPath::new("missing");
        let err = PcapSource::open(&missing.0).err().unwrap();
        assert!(matches!(err, PcapError::Io { op: "open", .. }));
        assert!(err.to_string().contains(&*missing.0.to_string_lossy()));
    }

    #[test]
    fn sink_reports_create_errors_with_the_path() {
        let err = PcapSink::create("/nonexistent-dir-nmdp/x.pcap")
            .err()
            .unwrap();
        assert!(err.to_string().contains("/nonexistent-dir-nmdp/x.pcap"));
        assert!(err.to_string().contains("cannot create"));
    }

    #[test]
    fn random_damage_never_panics() {
        // Flip and cut bytes of a valid file in many ways; opening and replaying must not panic
        // and every frame produced must fit the buffer.
        let p = TempPath::new("fuzz");
        let frames: Vec<Vec<u8>> = (0..6).map(|i| frame(i, 60 + 13 * i)).collect();
        let good = raw_pcap(false, MAGIC_MICROS, 1, &frames);
        let mut seed = 0x1234_5678_9abc_def0u64;
        for _ in 0..200 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut bytes = good.clone();
            let pos = 24 + (seed as usize % (bytes.len() - 24));
            bytes[pos] ^= (seed >> 32) as u8 | 1;
            bytes.truncate(bytes.len() - (seed >> 40) as usize % 50);
            std::fs::write(&p.0, &bytes).unwrap();
            let mut src = PcapSource::open(&p.0).unwrap().with_loops(2);
            let mut buf = vec![0u8; MAX_WIRE_FRAME];
            let mut n = 0;
            while let Some(len) = src.next_frame(&mut buf) {
                assert!(len <= buf.len());
                n += 1;
                assert!(n < 100);
            }
            let _ = read_all(&p.0);
        }
    }

    /// One record with explicit header lengths (little-endian, microseconds).
    fn record(out: &mut Vec<u8>, i: u32, incl: u32, orig: u32, data: &[u8]) -> u64 {
        let at = out.len() as u64;
        out.extend_from_slice(&1_700_000_000u32.wrapping_add(i).to_le_bytes());
        out.extend_from_slice(&(1_000 * i).to_le_bytes());
        out.extend_from_slice(&incl.to_le_bytes());
        out.extend_from_slice(&orig.to_le_bytes());
        out.extend_from_slice(data);
        at
    }

    /// A hostile capture: good frames mixed with runts, intact records too large for a frame
    /// buffer (one beyond `MAX_PLAUSIBLE_RECORD`), a header claiming 2 GB, random bytes where a
    /// record should be, and a truncated last record. Every record is accounted for (frames plus
    /// the four counters equal the 15 records), good frames after the damage still arrive, and
    /// the errors name byte offsets.
    #[test]
    fn every_damaged_record_is_counted_by_reason_and_good_ones_still_arrive() {
        let p = TempPath::new("hostile");
        let mut b = raw_pcap(false, MAGIC_MICROS, 1, &[]);
        let mut good = Vec::new();
        let mut add_good = |b: &mut Vec<u8>, i: u32, len: usize| {
            let f = frame(i as usize, len);
            record(b, i, len as u32, len as u32, &f);
            good.push(f);
        };
        add_good(&mut b, 0, 60);
        let runt_at = record(&mut b, 1, 0, 0, &[]);
        add_good(&mut b, 2, 100);
        record(&mut b, 3, 1, 1, &frame(3, 1));
        record(&mut b, 4, 13, 13, &frame(4, 13));
        add_good(&mut b, 5, 14);
        record(&mut b, 6, 70_000, 70_000, &frame(6, 70_000));
        add_good(&mut b, 7, 61);
        let big_at = record(&mut b, 8, 300_000, 300_000, &frame(8, 300_000));
        add_good(&mut b, 9, 62);
        let claim_at = record(&mut b, 10, 2_000_000_000, 2_000_000_000, &frame(10, 60));
        let after_claim = b.len() as u64;
        add_good(&mut b, 11, 63);
        let garbage_at = b.len() as u64;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut garbage: Vec<u8> = (0..1000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        garbage[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&garbage);
        let after_garbage = b.len() as u64;
        add_good(&mut b, 13, 64);
        let cut_at = record(&mut b, 14, 100, 100, &frame(14, 30));
        std::fs::write(&p.0, &b).unwrap();

        let mut src = PcapSource::open(&p.0).unwrap();
        assert_eq!(replay(&mut src), good);
        let c = src.counters().snapshot();
        let by_reason: Vec<u64> = PcapDrop::ALL.iter().map(|&r| c.dropped(r)).collect();
        assert_eq!(
            by_reason,
            [3, 2, 1, 2],
            "runt, oversize, truncated, damaged"
        );
        assert_eq!(c.frames + c.bad_records, 15, "every record accounted for");
        assert_eq!(c.bad_records, by_reason.iter().sum::<u64>());
        let first = src.counters().first_error().unwrap().to_string();
        assert!(
            first.contains("record 1 ") && first.contains(&format!("at byte {runt_at}")),
            "{first}"
        );
        assert!(big_at > 0);

        // The damage is reported where it is and where records resume.
        let mut r = Reader::open(&p.0).unwrap();
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        let mut damaged = Vec::new();
        loop {
            match r.next(&mut buf) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(f) => {
                    if let PcapError::DamagedRecord {
                        offset, resumed_at, ..
                    } = f.error
                    {
                        damaged.push((offset, resumed_at));
                    }
                    if f.ends_pass {
                        assert!(matches!(
                            f.error,
                            PcapError::TruncatedRecord { offset, .. } if offset == cut_at
                        ));
                        break;
                    }
                }
            }
        }
        assert_eq!(
            damaged,
            [
                (claim_at, Some(after_claim)),
                (garbage_at, Some(after_garbage))
            ]
        );

        // Every pass counts again.
        let mut src = PcapSource::open(&p.0).unwrap().with_loops(2);
        assert_eq!(replay(&mut src).len(), 2 * good.len());
        let c = src.counters().snapshot();
        assert_eq!((c.frames + c.bad_records, c.passes), (30, 2));
    }

    /// Random bytes right after a valid global header: one damaged stretch, no frame, no spin.
    #[test]
    fn a_file_of_random_bytes_is_one_damaged_stretch() {
        let p = TempPath::new("random");
        let mut b = raw_pcap(false, MAGIC_NANOS, 1, &[]);
        let mut x = 0x1234_5678_9abc_def1u64;
        b.extend((0..100_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        }));
        std::fs::write(&p.0, &b).unwrap();
        let mut src = PcapSource::open(&p.0).unwrap().with_loops(0);
        let got = replay(&mut src);
        let c = src.counters().snapshot();
        assert_eq!(c.frames + c.bad_records, (got.len() + 1) as u64, "{c:?}");
        assert!(c.damaged + c.truncated >= 1, "{c:?}");
        assert!(
            src.counters().first_error().unwrap().contains("at byte 24"),
            "{:?}",
            src.counters().first_error()
        );
    }

    /// Zeroed bytes where records should be (a capture whose tail was preallocated, a hole) are
    /// zero-length records as the format reads them: each 16 bytes one runt, counted, and the
    /// frames after the hole still arrive.
    #[test]
    fn zeroed_bytes_are_counted_as_zero_length_runts() {
        let p = TempPath::new("zeros");
        let frames: Vec<Vec<u8>> = (0..4).map(|i| frame(i, 60 + i)).collect();
        let mut b = raw_pcap(false, MAGIC_MICROS, 1, &frames[..2]);
        let hole = b.len() as u64;
        b.extend(std::iter::repeat_n(0u8, 4096));
        b.extend_from_slice(&raw_pcap(false, MAGIC_MICROS, 1, &frames[2..])[24..]);
        std::fs::write(&p.0, &b).unwrap();
        let mut src = PcapSource::open(&p.0).unwrap();
        assert_eq!(replay(&mut src), frames);
        let c = src.counters().snapshot();
        assert_eq!((c.runt, c.bad_records), (256, 256), "{c:?}");
        let e = src.counters().first_error().unwrap().to_string();
        assert!(e.contains(&format!("at byte {hole} has 0 bytes")), "{e}");
    }

    /// A capture read from a pipe (no length, no seeking) replays as before: good frames arrive,
    /// an oversize record is skipped by reading it, and a truncated end is counted.
    #[cfg(unix)]
    #[test]
    fn a_capture_from_a_pipe_replays_and_counts() {
        let p = TempPath::new("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&p.0)
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            return;
        }
        let frames = vec![frame(0, 60), frame(1, 70_000), frame(2, 61)];
        let mut bytes = raw_pcap(false, MAGIC_MICROS, 1, &frames);
        bytes.truncate(bytes.len() - 10);
        let path = p.0.clone();
        let writer = std::thread::spawn(move || std::fs::write(path, bytes).unwrap());
        let mut src = PcapSource::open(&p.0).unwrap();
        assert_eq!(replay(&mut src), vec![frames[0].clone()]);
        writer.join().unwrap();
        let c = src.counters().snapshot();
        assert_eq!((c.oversize, c.truncated, c.bad_records), (1, 1, 2), "{c:?}");
    }
}
