//! The telemetry v2 socket of a run that has no EAL to serve it (the virtual NIC): the protocol
//! of the [parent module](super), DPDK's built-in commands (`/`, `/info`, `/help`), and the
//! run's own commands answered by a handler.
//!
//! Access (DESIGN "Access"): the socket is created `0600` in a `0700` directory owned by the
//! process's user (`0660`/`0750` with a group when one is configured), and every command that
//! changes the run's state is refused to a peer that is not the run's user or root, whatever
//! the file modes let through (the peer's user comes from `SO_PEERCRED`). A second process with
//! the same prefix takes the next instance (`dpdk_telemetry.v2:1`, ...), as DPDK does; a socket
//! left by a process that died is replaced.
//!
//! Threads: one accepts (at most [`MAX_CONNECTIONS`] clients at a time, as DPDK), one per
//! client reads its requests and writes the replies. Dropping the [`TelemetryServer`] stops
//! them and removes the socket.

use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{MAX_CMD_LEN, MAX_HELP_LEN, MAX_OUTPUT_LEN, TelArray, TelData, TelDict, instance_path};
use crate::unix;

/// Clients served at once; more are closed on connect (DPDK's `MAX_CONNECTIONS`).
pub const MAX_CONNECTIONS: usize = 10;
/// Instances of one prefix tried before giving up.
const MAX_INSTANCES: u32 = 32;
/// How often the threads look at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// One command a handler answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// Its name, starting with `/` (at most [`MAX_CMD_LEN`] bytes).
    pub name: String,
    /// One line of help (`/help,<name>`; at most [`MAX_HELP_LEN`] bytes).
    pub help: String,
    /// True when it changes the run's state: refused to peers other than the run's user and
    /// root.
    pub changes_state: bool,
}

impl Command {
    /// A command that only reads.
    pub fn query(name: &str, help: &str) -> Self {
        Self {
            name: name.into(),
            help: help.into(),
            changes_state: false,
        }
    }

    /// A command that changes the run's state.
    pub fn change(name: &str, help: &str) -> Self {
        Self {
            changes_state: true,
            ..Self::query(name, help)
        }
    }
}

/// Who sent a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The peer's user id (from `SO_PEERCRED`; `None` when it could not be read).
    pub uid: Option<u32>,
}

impl Peer {
    /// True when the peer may change the run: the run's own user, or root.
    pub fn may_change(&self) -> bool {
        self.uid
            .is_some_and(|u| u == 0 || u == unix::effective_uid())
    }
}

/// Answers one command: `(name, parameters after the first comma)`. Only called for the
/// handler's own commands, and for a command that changes state only when the peer may.
pub type Handler = dyn Fn(&str, Option<&str>) -> TelData + Send + Sync;

/// Where and how the socket is made.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The runtime directory of the run's file prefix ([`super::runtime_dir`]), where the
    /// socket is made.
    pub dir: PathBuf,
    /// A group that may read too: the socket becomes `0660` and its directory `0750`, both of
    /// that group (commands that change state stay refused to its members).
    pub group: Option<u32>,
    /// What the greeting and `/info` give as `version`.
    pub version: String,
}

/// A running telemetry socket (see the module docs).
pub struct TelemetryServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

struct Shared {
    commands: Vec<Command>,
    handler: Arc<Handler>,
    version: String,
    clients: AtomicUsize,
    stop: Arc<AtomicBool>,
}

impl TelemetryServer {
    /// Creates the socket in `cfg.dir` (the first free instance) and starts serving `commands`
    /// with `handler`. Errors name the path and what is wrong.
    pub fn start(
        cfg: &ServerConfig,
        commands: Vec<Command>,
        handler: Arc<Handler>,
    ) -> Result<Self, String> {
        for c in &commands {
            if !c.name.starts_with('/') || c.name.len() > MAX_CMD_LEN || c.help.len() > MAX_HELP_LEN
            {
                return Err(format!(
                    "telemetry command `{}`: a name must start with `/` and hold at most \
                     {MAX_CMD_LEN} bytes, its help at most {MAX_HELP_LEN}",
                    c.name
                ));
            }
        }
        prepare_dir(&cfg.dir, cfg.group)?;
        let (path, listener) = bind_instance(&cfg.dir)?;
        let mode = if cfg.group.is_some() { 0o660 } else { 0o600 };
        let finish = || -> io::Result<()> {
            if let Some(g) = cfg.group {
                std::os::unix::fs::chown(&path, None, Some(g))?;
            }
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            listener.set_nonblocking(true)
        };
        if let Err(e) = finish() {
            let _ = std::fs::remove_file(&path);
            return Err(format!("telemetry socket {}: {e}", path.display()));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            commands,
            handler,
            version: cfg.version.clone(),
            clients: AtomicUsize::new(0),
            stop: stop.clone(),
        });
        let accept = std::thread::Builder::new()
            .name("telemetry".into())
            .spawn(move || {
                while !shared.stop.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            if shared.clients.load(Ordering::Acquire) >= MAX_CONNECTIONS {
                                continue;
                            }
                            shared.clients.fetch_add(1, Ordering::AcqRel);
                            let sh = shared.clone();
                            let spawned = std::thread::Builder::new()
                                .name("telemetry-client".into())
                                .spawn(move || {
                                    let _ = serve_client(s, &sh);
                                    sh.clients.fetch_sub(1, Ordering::AcqRel);
                                });
                            if spawned.is_err() {
                                shared.clients.fetch_sub(1, Ordering::AcqRel);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
                        Err(_) => std::thread::sleep(POLL),
                    }
                }
            })
            .map_err(|e| format!("telemetry: cannot start its thread: {e}"))?;
        Ok(Self {
            path,
            stop,
            accept: Some(accept),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TelemetryServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Creates the socket's directory (`0700`, or `0750` of `group`), or checks the one there:
/// owned by this user and writable by nobody else, so no other user can replace the socket.
fn prepare_dir(dir: &Path, group: Option<u32>) -> Result<(), String> {
    let mode = if group.is_some() { 0o750 } else { 0o700 };
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("telemetry: cannot create {}: {e}", parent.display()))?;
    }
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("telemetry: cannot create {}: {e}", dir.display())),
    }
    let m =
        std::fs::symlink_metadata(dir).map_err(|e| format!("telemetry: {}: {e}", dir.display()))?;
    let me = unix::effective_uid();
    if !m.is_dir() || m.uid() != me || m.mode() & 0o022 != 0 {
        return Err(format!(
            "telemetry: {} must be a directory owned by user {me} and writable by nobody else \
             (it is {} of user {}, mode {:o}); remove it or choose another run.telemetry_prefix",
            dir.display(),
            if m.is_dir() {
                "a directory"
            } else {
                "not a directory"
            },
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    if let Some(g) = group {
        std::os::unix::fs::chown(dir, None, Some(g))
            .map_err(|e| format!("telemetry: cannot give {} to group {g}: {e}", dir.display()))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("telemetry: {}: {e}", dir.display()))
}

/// Binds the first free instance in `dir`: a socket no process answers on is replaced.
fn bind_instance(dir: &Path) -> Result<(PathBuf, std::os::unix::net::UnixListener), String> {
    for i in 0..MAX_INSTANCES {
        let path = instance_path(dir, i);
        if std::fs::symlink_metadata(&path).is_ok() {
            if unix::seqpacket_connect(&path).is_ok() {
                continue;
            }
            let _ = std::fs::remove_file(&path);
        }
        match unix::seqpacket_listen(&path, 8) {
            Ok(l) => return Ok((path, l)),
            // Another process took it between our look and our bind: try the next.
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(format!("telemetry socket {}: {e}", path.display())),
        }
    }
    Err(format!(
        "telemetry: {MAX_INSTANCES} processes already serve {}; choose another \
         run.telemetry_prefix",
        dir.display()
    ))
}

/// The greeting (also `/info`).
fn info(version: &str) -> TelDict {
    let mut d = TelDict::new();
    d.str("version", version)
        .int("pid", std::process::id() as i32)
        .int("max_output_len", MAX_OUTPUT_LEN as i32);
    d
}

fn serve_client(mut s: UnixStream, sh: &Shared) -> io::Result<()> {
    s.set_read_timeout(Some(POLL))?;
    s.write_all(TelData::Dict(info(&sh.version)).to_json().as_bytes())?;
    let peer = Peer {
        uid: unix::peer_uid(&s).ok(),
    };
    let mut buf = [0u8; 1024];
    loop {
        if sh.stop.load(Ordering::Acquire) {
            return Ok(());
        }
        let n = match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        let (cmd, params) = match text.split_once(',') {
            Some((c, p)) => (c, Some(p).filter(|p| !p.is_empty())),
            None => (&*text, None),
        };
        let reply = answer(sh, cmd, params, &peer);
        s.write_all(reply.to_reply(cmd).as_bytes())?;
    }
}

/// The reply to one request.
fn answer(sh: &Shared, cmd: &str, params: Option<&str>, peer: &Peer) -> TelData {
    match cmd {
        "/" => {
            let mut names: Vec<String> = ["/", "/help", "/info"]
                .into_iter()
                .map(String::from)
                .chain(sh.commands.iter().map(|c| c.name.clone()))
                .collect();
            names.sort();
            TelData::Array(TelArray::Str(names))
        }
        "/info" => TelData::Dict(info(&sh.version)),
        "/help" => {
            let Some(p) = params else {
                return TelData::Null;
            };
            let help = match p {
                "/" => Some("Lists every command. Takes no parameters"),
                "/info" => Some("The greeting: version, pid, max_output_len. No parameters"),
                "/help" => Some("A command's help. Parameters: string command"),
                _ => sh
                    .commands
                    .iter()
                    .find(|c| c.name == p)
                    .map(|c| c.help.as_str()),
            };
            match help {
                Some(h) => {
                    let mut d = TelDict::new();
                    d.str(p, h);
                    TelData::Dict(d)
                }
                None => TelData::Null,
            }
        }
        _ => match sh.commands.iter().find(|c| c.name == cmd) {
            None => TelData::Null,
            Some(c) if c.changes_state && !peer.may_change() => TelData::error(format!(
                "refused: {cmd} changes the run and is allowed to user {} (the run's) and root \
                 only",
                unix::effective_uid()
            )),
            Some(_) => (sh.handler)(cmd, params),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::client::TelemetryClient;

    #[test]
    fn a_client_gets_the_greeting_builtins_and_commands_and_instances_stack() {
        let rt = std::env::temp_dir().join(format!("nmdp-tel-{}", std::process::id()));
        let cfg = ServerConfig {
            dir: rt.join("dpdk/unit"),
            group: None,
            version: "nmdp test".into(),
        };
        let handler: Arc<Handler> = Arc::new(|cmd: &str, p: Option<&str>| {
            let mut d = TelDict::new();
            d.str("cmd", cmd).str("param", p.unwrap_or("-"));
            TelData::Dict(d)
        });
        let cmds = vec![
            Command::query("/nmdp/echo", "Echoes. Parameters: any"),
            Command::change("/nmdp/poke", "Changes something"),
        ];
        let a = TelemetryServer::start(&cfg, cmds.clone(), handler.clone()).unwrap();
        assert_eq!(a.path(), rt.join("dpdk/unit/dpdk_telemetry.v2"));
        let mode = std::fs::metadata(a.path()).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(rt.join("dpdk/unit")).unwrap().mode() & 0o777;
        assert_eq!(dmode, 0o700);
        let b = TelemetryServer::start(&cfg, cmds, handler).unwrap();
        assert_eq!(b.path(), rt.join("dpdk/unit/dpdk_telemetry.v2:1"));

        let mut c = TelemetryClient::connect(a.path()).unwrap();
        assert_eq!(c.greeting["max_output_len"], 16384);
        assert_eq!(c.greeting["pid"], std::process::id());
        assert_eq!(c.greeting["version"], "nmdp test");
        let list = c.request("/").unwrap();
        assert_eq!(
            list["/"],
            serde_json::json!(["/", "/help", "/info", "/nmdp/echo", "/nmdp/poke"])
        );
        let r = c.request("/nmdp/echo,1,2").unwrap();
        assert_eq!(r["/nmdp/echo"]["param"], "1,2");
        let r = c.request("/nmdp/echo").unwrap();
        assert_eq!(r["/nmdp/echo"]["param"], "-");
        assert_eq!(
            c.request("/nope").unwrap()["/nope"],
            serde_json::Value::Null
        );
        let r = c.request("/help,/nmdp/echo").unwrap();
        assert_eq!(r["/help"]["/nmdp/echo"], "Echoes. Parameters: any");
        // The run's own user may change it.
        assert_eq!(
            c.request("/nmdp/poke").unwrap()["/nmdp/poke"]["cmd"],
            "/nmdp/poke"
        );
        assert!(Peer { uid: Some(12345) }.may_change() == (unix::effective_uid() == 12345));
        assert!(!Peer { uid: None }.may_change());

        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists(), "the socket is removed");
        // A stale socket file (its process gone) is replaced.
        let stale = crate::unix::seqpacket_listen(&path, 1).unwrap();
        drop(stale);
        let c2 = TelemetryServer::start(
            &cfg,
            vec![],
            Arc::new(|_: &str, _: Option<&str>| TelData::Null),
        )
        .unwrap();
        assert_eq!(c2.path(), path);
        drop((b, c2));
        std::fs::remove_dir_all(&rt).unwrap();
    }
}
