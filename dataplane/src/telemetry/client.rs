//! A client of the telemetry v2 protocol (what `dataplane ctl` speaks, on the virtual NIC's
//! socket and on EAL's): connect, read the greeting, send a command, read its JSON reply.

use std::io::{self, Read, Write};
use std::path::Path;
use std::time::Duration;

use crate::unix;

/// How long a reply may take before the client gives up (a command that changes a run waits
/// for every worker's answer, which comes between two bursts).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to a telemetry socket.
pub struct TelemetryClient {
    stream: std::os::unix::net::UnixStream,
    /// The server's greeting (`version`, `pid`, `max_output_len`).
    pub greeting: serde_json::Value,
    max_output_len: usize,
}

impl TelemetryClient {
    /// Connects to the socket at `path` and reads its greeting. Errors name the path.
    pub fn connect(path: &Path) -> io::Result<Self> {
        let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let stream = unix::seqpacket_connect(path).map_err(with_path)?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        let mut c = Self {
            stream,
            greeting: serde_json::Value::Null,
            max_output_len: 1024,
        };
        c.greeting = c.read_json().map_err(with_path)?;
        let n = c.greeting["max_output_len"].as_u64().ok_or_else(|| {
            with_path(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not a telemetry v2 greeting: {}", c.greeting),
            ))
        })?;
        c.max_output_len = (n as usize).clamp(1024, 1 << 20);
        Ok(c)
    }

    /// Sends `command` (`/ethdev/stats,0`) and returns the reply object
    /// (`{"/ethdev/stats": {...}}`).
    pub fn request(&mut self, command: &str) -> io::Result<serde_json::Value> {
        self.stream.write_all(command.as_bytes())?;
        self.read_json()
    }

    fn read_json(&mut self) -> io::Result<serde_json::Value> {
        let mut buf = vec![0u8; self.max_output_len.max(1024)];
        let n = self.stream.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        serde_json::from_slice(&buf[..n])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad reply: {e}")))
    }
}
