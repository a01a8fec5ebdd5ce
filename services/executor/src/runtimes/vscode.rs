//! The sandbox's VS Code: code-server, started by the first request for it (so a conversation
//! that never opens it pays nothing) and stopped once nothing has used it for a while (no
//! request, no open connection). It runs as the executor does (the sandbox's user, inside its
//! isolation and network namespace), in the workspace, with its own authentication off: it
//! listens on a Unix socket in the sandbox's temporary directory, which only the sandbox's user
//! reaches, and the executor passes it the requests that reach `/vscode/…` with the session key
//! (the gateway's apps proxy, which checked the user's ticket and cookie; see the gateway's
//! `workspace::apps`). WebSocket upgrades (the workbench's own connection, its terminals) are
//! joined through.
//!
//! The workbench page gets one script of Halyard's before its own (`storage.js`, served at
//! `/_halyard/storage.js`): in an iframe of another site, a browser that blocks third-party
//! storage throws on `localStorage`, which the workbench does not survive; the script keeps it in
//! memory then.
//!
//! Why the executor's port and not one of code-server's own: the executor's is the one port both
//! sandbox kinds already carry to the gateway (Docker maps it; a process sandbox's tunnel serves
//! it), and what reaches it without the session key is refused before code-server sees anything.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Said, short_tmp};
use crate::error::ExecutorError;
use halyard_platform::http_relay::{Relayed, relay};
use halyard_protocol::executor::SESSION_KEY_HEADER;

/// Where code-server may be, in order: the directory `infra/install-code-server.sh` fills (on
/// the host for process sandboxes, in the base image for containers), then the usual places.
const CODE_SERVER: &[&str] = &["/opt/halyard-code-server/bin/code-server", "/usr/local/bin/code-server", "/usr/bin/code-server"];
/// The path prefix of the requests passed to code-server.
pub const PREFIX: &str = "/vscode";
/// The script the workbench page loads first (see the module's header), and where.
const STORAGE_JS: &str = include_str!("storage.js");
const STORAGE_PATH: &str = "/_halyard/storage.js";
/// The largest page that gets it (the workbench's is a few kilobytes).
const MAX_PAGE: usize = 1 << 20;
/// How long code-server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running code-server.
struct Live {
    /// Its process group (it leads it).
    group: Option<i32>,
    child: tokio::process::Child,
    socket: PathBuf,
    /// The short way to the temporary directory the socket is in, removed with it.
    link: Option<PathBuf>,
}

impl Drop for Live {
    /// With the executor (its graceful end drops it), code-server's whole group goes: its
    /// leader alone (`kill_on_drop`) would leave the server process it forks.
    fn drop(&mut self) {
        if let Some(pid) = self.group {
            // SAFETY: signals the process group the child leads.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

/// The sandbox's VS Code, running or not.
pub struct VsCode {
    idle: Duration,
    workspace: PathBuf,
    live: tokio::sync::Mutex<Option<Live>>,
    last_use: std::sync::Mutex<Instant>,
    /// Requests being answered and upgraded connections open: while any is, it is in use.
    open: AtomicUsize,
    running: AtomicBool,
    this: Weak<VsCode>,
}

impl VsCode {
    /// A code-server for `workspace` that stops after `idle` unused.
    pub fn new(workspace: PathBuf, idle: Duration) -> Arc<Self> {
        Arc::new_cyclic(|this| Self {
            idle,
            workspace,
            live: tokio::sync::Mutex::new(None),
            last_use: std::sync::Mutex::new(Instant::now()),
            open: AtomicUsize::new(0),
            running: AtomicBool::new(false),
            this: this.clone(),
        })
    }

    /// code-server is running now.
    pub fn running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// A request is being answered or a connection (the workbench's, a terminal's) is open.
    pub fn in_use(&self) -> bool {
        self.open.load(Ordering::SeqCst) > 0
    }

    fn touch(&self) {
        *self.last_use.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// The socket of a running code-server, started (and waited for) if it is not running.
    pub async fn ensure(&self) -> Result<PathBuf, ExecutorError> {
        let mut guard = self.live.lock().await;
        self.touch();
        if let Some(live) = guard.as_mut() {
            if matches!(live.child.try_wait(), Ok(None)) {
                return Ok(live.socket.clone());
            }
            tracing::warn!("code-server had ended; starting it again");
            if let Some(dead) = guard.take() {
                self.stopped(dead).await;
            }
        }
        let live = self.start().await?;
        let socket = live.socket.clone();
        *guard = Some(live);
        Ok(socket)
    }

    async fn start(&self) -> Result<Live, ExecutorError> {
        let program = CODE_SERVER.iter().map(PathBuf::from).find(|p| p.exists()).ok_or_else(|| {
            ExecutorError::Unavailable(
                "This sandbox has no VS Code: its image needs code-server in /opt/halyard-code-server (infra/install-code-server.sh)."
                    .into(),
            )
        })?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (tmp, link) = short_tmp(&id[..16]);
        let socket = tmp.join(format!("vscode-{}.sock", &id[..8]));
        let data = user_data_dir();
        if let Err(e) = machine_settings(&data) {
            tracing::warn!(error = %e, "cannot write VS Code's machine settings");
        }
        let mut cmd = tokio::process::Command::new(&program);
        cmd.arg("--socket")
            .arg(&socket)
            // Only the sandbox's own user may connect; the executor is that user.
            .args(["--socket-mode", "600"])
            // Halyard's authentication is in front (the apps proxy's ticket and cookie, then the
            // session key); code-server's own would be a second password for the same person.
            .args(["--auth", "none"])
            .args(["--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override"])
            // Its port-forwarding proxy would be a way to the sandbox's ports past the apps proxy.
            .arg("--disable-proxy")
            .arg("--user-data-dir")
            .arg(&data)
            .arg(&self.workspace)
            .current_dir(&self.workspace)
            .env("TMPDIR", &tmp)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            // Its helpers (extension host, terminals) are its children: stopping it stops them.
            .process_group(0)
            .kill_on_drop(true);
        let started = Instant::now();
        let mut child =
            cmd.spawn().map_err(|e| ExecutorError::Internal(format!("cannot start code-server ({}): {e}", program.display())))?;
        let said = Said::default();
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(said.clone().keep(stderr));
        }
        let group = child.id().and_then(|p| i32::try_from(p).ok());
        let mut live = Live { group, child, socket, link };
        loop {
            if healthy(&live.socket).await {
                break;
            }
            let ended = live.child.try_wait().ok().flatten();
            if ended.is_some() || started.elapsed() > START_TIMEOUT {
                let why = match ended {
                    Some(status) => format!("it ended with {status}"),
                    None => format!("it did not answer within {} s", START_TIMEOUT.as_secs()),
                };
                self.stopped(live).await;
                return Err(ExecutorError::Internal(format!("code-server did not start ({why}); it said: {}", said.tail())));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::info!(took_ms = started.elapsed().as_millis() as u64, pid = live.child.id(), "code-server started");
        self.running.store(true, Ordering::SeqCst);
        super::watch_idle(self.this.clone(), self.idle);
        Ok(live)
    }

    /// Stops code-server and everything it started (its process group): asked first, then
    /// killed.
    async fn stopped(&self, mut live: Live) {
        self.running.store(false, Ordering::SeqCst);
        if let Some(pid) = live.group {
            // SAFETY: signals the process group the child leads (made with `process_group(0)`).
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(-pid, libc::SIGTERM);
            }
            if tokio::time::timeout(Duration::from_secs(3), live.child.wait()).await.is_err() {
                let _ = live.child.kill().await;
            }
            // Whatever of the group outlived its leader.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
            // Done: the drop must not signal a number another group may have by then.
            live.group = None;
        }
        let _ = tokio::fs::remove_file(&live.socket).await;
        if let Some(link) = &live.link {
            let _ = tokio::fs::remove_file(link).await;
        }
    }

    /// Passes a request under [`PREFIX`] to code-server (starting it if needed), and its answer
    /// back; a `101 Switching Protocols` joins the two upgraded connections.
    pub async fn forward(self: Arc<Self>, req: Request) -> Response {
        if req.uri().path().strip_prefix(PREFIX) == Some(STORAGE_PATH) {
            return ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], STORAGE_JS)
                .into_response();
        }
        self.open.fetch_add(1, Ordering::SeqCst);
        let res = match self.ensure().await {
            Ok(socket) => self.clone().pass(&socket, req).await,
            Err(e) => Err(e),
        };
        self.touch();
        self.open.fetch_sub(1, Ordering::SeqCst);
        res.unwrap_or_else(IntoResponse::into_response)
    }

    async fn pass(self: Arc<Self>, socket: &Path, req: Request) -> Result<Response, ExecutorError> {
        let bad = |e: String| ExecutorError::Internal(format!("code-server did not answer: {e}"));
        let path = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let path = match path.strip_prefix(PREFIX) {
            Some(rest) if rest.starts_with('/') => rest.to_owned(),
            Some(rest) => format!("/{rest}"),
            None => path.to_owned(),
        };
        // A page (not its scripts, which are large and should stay compressed) comes plain, so
        // that the storage script can go into it.
        let page = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.starts_with("text/html"));
        let stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| bad(e.to_string()))?;
        let res =
            match relay(stream, req, &path, |k| k == SESSION_KEY_HEADER || (page && k == header::ACCEPT_ENCODING)).await.map_err(bad)? {
                Relayed::Answer(res) => res,
                Relayed::Upgraded(res, joined) => {
                    // An open connection (the workbench's, a terminal's) is use: no idle stop while
                    // the VS Code tab is open.
                    self.open.fetch_add(1, Ordering::SeqCst);
                    let this = self.clone();
                    tokio::spawn(async move {
                        let _ = joined.await;
                        this.touch();
                        this.open.fetch_sub(1, Ordering::SeqCst);
                    });
                    return Ok(res);
                }
            };
        let (mut parts, body) = res.into_parts();
        let html = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("text/html"));
        if parts.status == StatusCode::OK && html && !parts.headers.contains_key(header::CONTENT_ENCODING) {
            let page = axum::body::to_bytes(Body::new(body), MAX_PAGE).await.map_err(|e| bad(e.to_string()))?;
            let page = with_storage_script(&page);
            parts.headers.remove(header::CONTENT_LENGTH);
            return Ok(Response::from_parts(parts, Body::from(page)));
        }
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}

impl super::Reap for VsCode {
    /// Stops the running code-server once nothing has used it for `idle`.
    async fn reap(&self) -> bool {
        // Starting, or a request or connection open: not idle.
        let Ok(mut live) = self.live.try_lock() else { return true };
        if live.is_none() {
            return false;
        }
        let unused = self.last_use.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
        if self.in_use() || unused < self.idle {
            return true;
        }
        if let Some(l) = live.take() {
            tracing::info!(unused_s = unused.as_secs(), "stopping the idle code-server");
            self.stopped(l).await;
        }
        false
    }
}

/// code-server answers its health route. Listening is not enough: it binds the socket before it
/// registers its routes, and a request in between gets a 404 (seen as a flaky restart in CI).
/// `/healthz` is registered just before the workbench's routes, in the same synchronous step.
async fn healthy(socket: &Path) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::UnixStream::connect(socket).await else { return false };
    let asked = stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await;
    let mut head = [0u8; 12];
    asked.is_ok()
        && tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut head)).await.is_ok_and(|r| r.is_ok())
        && head.starts_with(b"HTTP/1.1 200")
}

/// Where code-server keeps the user's settings and extensions: its usual place in the sandbox's
/// home (counted in the sandbox's disk, kept with it).
fn user_data_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    home.join(".local/share/code-server")
}

/// The machine's settings, written when there are none (the user's own settings override them):
/// no AI chat (its agent runtime would be a second agent in the sandbox, with nothing to talk
/// to), no telemetry or update checks, no welcome page.
fn machine_settings(data: &Path) -> std::io::Result<()> {
    let path = data.join("Machine/settings.json");
    if path.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(data.join("Machine"))?;
    let settings = serde_json::json!({
        "chat.disableAIFeatures": true,
        "telemetry.telemetryLevel": "off",
        "update.mode": "none",
        "extensions.autoCheckUpdates": false,
        "workbench.startupEditor": "none",
    });
    std::fs::write(path, serde_json::to_string_pretty(&settings).unwrap_or_default())
}

/// `page` with [`STORAGE_JS`] loaded first in its head (unchanged if it has no `<head>`).
fn with_storage_script(page: &[u8]) -> Vec<u8> {
    let tag = format!("<script src=\".{STORAGE_PATH}\"></script>");
    let Some(at) = page.windows(6).position(|w| w.eq_ignore_ascii_case(b"<head>")) else { return page.to_vec() };
    let mut out = Vec::with_capacity(page.len() + tag.len());
    out.extend_from_slice(&page[..at + 6]);
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(&page[at + 6..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_storage_script_goes_first_in_the_head() {
        let page = with_storage_script(b"<!DOCTYPE html><html><HEAD><script src=\"w.js\"></script></head></html>");
        assert_eq!(
            String::from_utf8(page).unwrap(),
            "<!DOCTYPE html><html><HEAD><script src=\"./_halyard/storage.js\"></script><script src=\"w.js\"></script></head></html>"
        );
        assert_eq!(with_storage_script(b"no head"), b"no head");
    }
}
