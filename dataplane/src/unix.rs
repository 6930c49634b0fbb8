//! The few Unix calls the run's operation surface needs and `std` does not offer: handlers for
//! SIGINT and SIGTERM, `SOCK_SEQPACKET` sockets (DPDK's telemetry protocol is spoken over them,
//! and its client refuses a stream socket), the credentials of a socket's peer (to refuse
//! commands that change state to other users), and the real-time scheduling policy a
//! wall-clock measurement may ask for on a shared machine.
//!
//! This is FFI to libc: each call is one small safe function with its `unsafe` block and
//! `// SAFETY:` comment here, and nowhere else.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// Stop signals received so far (SIGINT and SIGTERM together).
static STOP_SIGNALS: AtomicU32 = AtomicU32::new(0);
/// The last stop signal received (0: none).
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The process exit status of a second stop signal (128 + SIGINT, as shells report an
/// interrupted command).
pub const EXIT_AT_ONCE: i32 = 130;

extern "C" fn on_stop_signal(sig: libc::c_int) {
    LAST_SIGNAL.store(sig, Ordering::Relaxed);
    if STOP_SIGNALS.fetch_add(1, Ordering::AcqRel) >= 1 {
        let msg = b"second stop signal: exiting at once, without a summary\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe; `msg` is a valid buffer of the
        // length given.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(EXIT_AT_ONCE);
        }
    }
}

/// Installs the handler of SIGINT and SIGTERM: the first one only counts (the run polls
/// [`stop_signals`] and stops cleanly), a second one ends the process at once with status
/// [`EXIT_AT_ONCE`].
pub fn install_stop_handlers() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler is an
        // `extern "C" fn(c_int)` that only touches atomics and async-signal-safe calls.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Stop signals (SIGINT, SIGTERM) received since the handlers were installed.
pub fn stop_signals() -> u32 {
    STOP_SIGNALS.load(Ordering::Acquire)
}

/// The name of the last stop signal received, if any.
pub fn last_stop_signal() -> Option<&'static str> {
    match LAST_SIGNAL.load(Ordering::Relaxed) {
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        _ => None,
    }
}

/// CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`): what a rate per
/// core is divided by on a machine whose cores the thread shares (zero if the clock fails).
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, a valid exclusive borrow; the
    // result is checked.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Puts the calling thread under `SCHED_FIFO` at `priority` (1..=99); threads it starts
/// afterwards inherit the policy. For wall-clock measurements on a shared machine: a real-time
/// thread is not preempted by ordinary ones, so a busy neighbour no longer takes the worker's
/// core away for tens of milliseconds. A spinning real-time thread holds its core until the
/// kernel's real-time throttling (`/proc/sys/kernel/sched_rt_runtime_us`, by default 0.95 s of
/// every 1 s) lets other threads run, so callers keep such runs short. Needs root or
/// `CAP_SYS_NICE` (or an `RLIMIT_RTPRIO` of at least `priority`): the error says so.
pub fn set_realtime_fifo(priority: i32) -> io::Result<()> {
    if !(1..=99).contains(&priority) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("real-time priority {priority}; allowed 1..=99"),
        ));
    }
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler reads one sched_param from `param`, a valid borrow for the
    // call; pid 0 is the calling thread; the result is checked.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        let hint = if e.raw_os_error() == Some(libc::EPERM) {
            " (needs root or CAP_SYS_NICE, or `ulimit -r` of at least the priority)"
        } else {
            ""
        };
        return Err(io::Error::new(
            e.kind(),
            format!("sched_setscheduler(SCHED_FIFO, priority {priority}): {e}{hint}"),
        ));
    }
    Ok(())
}

/// The process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail and takes no arguments.
    unsafe { libc::geteuid() }
}

/// A `sockaddr_un` for `path`, or an error when the path does not fit one.
fn unix_addr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: all-zero bytes are a valid sockaddr_un.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} is longer than {} bytes (or holds a NUL)",
                path.display(),
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// A new `AF_UNIX`, `SOCK_SEQPACKET`, close-on-exec socket.
fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before it is owned.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A `SOCK_SEQPACKET` socket listening at `path` (which must not exist), as a [`UnixListener`]:
/// its `accept` works on any socket type, and each accepted [`UnixStream`] reads and writes
/// whole messages.
pub fn seqpacket_listen(path: &Path, backlog: i32) -> io::Result<UnixListener> {
    let (addr, len) = unix_addr(path)?;
    let fd = seqpacket_socket()?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes; `fd` is an open socket.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a bound socket.
    if unsafe { libc::listen(fd.as_raw_fd(), backlog) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UnixListener::from(fd))
}

/// A `SOCK_SEQPACKET` connection to the socket at `path`, as a [`UnixStream`].
pub fn seqpacket_connect(path: &Path) -> io::Result<UnixStream> {
    let (addr, len) = unix_addr(path)?;
    let fd = seqpacket_socket()?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes; `fd` is an open socket.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UnixStream::from(fd))
}

/// The user id of the process at the other end of a Unix socket (`SO_PEERCRED`).
pub fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    // SAFETY: all-zero bytes are a valid ucred.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid out-pointers of the size passed; `s` is an open socket.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Priorities outside SCHED_FIFO's range are refused before the kernel is asked, with the
    /// range named; the calling thread's policy is unchanged.
    #[test]
    fn realtime_priority_out_of_range_is_refused() {
        for p in [0, 100, -1] {
            let e = set_realtime_fifo(p).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            assert!(e.to_string().contains("allowed 1..=99"), "{e}");
        }
        // SAFETY: sched_getscheduler takes a pid (0: the calling thread) and reads nothing.
        assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
    }

    /// Messages keep their boundaries, and the peer is this process's user.
    #[test]
    fn seqpacket_messages_and_peer_credentials() {
        let dir = std::env::temp_dir().join(format!("nmdp-unix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let _ = std::fs::remove_file(&path);
        let l = seqpacket_listen(&path, 4).unwrap();
        let mut c = seqpacket_connect(&path).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(b"/one").unwrap();
        c.write_all(b"/two,2").unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"/one");
        let n = s.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"/two,2");
        assert_eq!(peer_uid(&s).unwrap(), effective_uid());
        assert!(seqpacket_listen(&path, 4).is_err(), "the path is taken");
        let long = dir.join("x".repeat(200));
        let e = seqpacket_listen(&long, 4).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
