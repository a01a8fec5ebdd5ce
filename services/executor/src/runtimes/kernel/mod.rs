//! The agent's Python: an IPython kernel (Debian's `ipykernel`) per shell session, started by the
//! first `execute_ipython_cell` and kept, so a cell sees what the cells before it defined. It runs
//! as the executor does (the sandbox's user, its isolation and network), in the shell's working
//! directory, and is driven over Jupyter's protocol ([`wire`]) on ZeroMQ's `ipc` transport: Unix
//! sockets in the sandbox's temporary directory, which nothing outside the sandbox reaches.
//!
//! A cell's output comes back as text (streams, results, the traceback of an error, ANSI colours
//! removed) and its `image/png` displays (matplotlib's plots) as images. A cell that outlives its
//! timeout is interrupted (SIGINT, as the kernel's `interrupt_mode` is `signal`); a kernel that
//! does not stop then, or dies, is replaced, and the answer says the kernel is new.

pub mod wire;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use halyard_protocol::executor::{CellRequest, CellResponse};
use serde_json::{Value, json};
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket};

use super::{Said, short_tmp};
use crate::error::ExecutorError;

/// How long a kernel may take to start and answer.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an interrupted cell may take to stop.
const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// A running kernel.
struct Kernel {
    child: tokio::process::Child,
    shell: DealerSocket,
    iopub: SubSocket,
    key: Vec<u8>,
    session: String,
    dir: PathBuf,
    link: Option<PathBuf>,
    said: Said,
}

impl Drop for Kernel {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(link) = &self.link {
            let _ = std::fs::remove_file(link);
        }
    }
}

/// One session's kernel, and its process id readable while a cell holds the kernel (for an
/// interrupt; 0: none).
#[derive(Default)]
struct Slot {
    kernel: tokio::sync::Mutex<Option<Kernel>>,
    pid: std::sync::atomic::AtomicU32,
}

/// The kernels of the sandbox's shell sessions.
#[derive(Default)]
pub struct Kernels {
    by_session: std::sync::Mutex<HashMap<String, Arc<Slot>>>,
}

/// What one cell did, before it is put in words.
#[derive(Default)]
struct Ran {
    text: String,
    images: Vec<String>,
    error: bool,
    /// The kernel went idle (the cell ended).
    ended: bool,
}

impl Kernels {
    /// Runs one cell in the kernel of `req.session`, in `cwd` (the shell's working directory).
    pub async fn run(
        &self,
        req: &CellRequest,
        workspace: &std::path::Path,
        cwd: Option<PathBuf>,
        cap: usize,
    ) -> Result<CellResponse, ExecutorError> {
        let slot = {
            let mut map = self.by_session.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(req.session.clone().unwrap_or_default()).or_default().clone()
        };
        let mut kernel = slot.kernel.lock().await;
        if kernel.as_mut().is_some_and(|k| !matches!(k.child.try_wait(), Ok(None))) {
            *kernel = None;
        }
        let new_kernel = kernel.is_none();
        if new_kernel {
            let started = Kernel::start(workspace).await?;
            slot.pid.store(started.child.id().unwrap_or(0), std::sync::atomic::Ordering::SeqCst);
            *kernel = Some(started);
        }
        let Some(k) = kernel.as_mut() else { return Err(ExecutorError::Internal("no kernel".into())) };
        if let Some(dir) = cwd {
            // Quietly, so the cell's own output is all the agent reads.
            let code = format!("import os as __halyard_os; __halyard_os.chdir({})", python_str(&dir.display().to_string()));
            if let Err(e) = k.execute(&code, true, Duration::from_secs(10)).await.map(|_| ()) {
                tracing::warn!(error = %e, "cannot move the kernel to the shell's directory");
            }
        }
        let timeout = Duration::from_secs_f64(req.timeout_secs.unwrap_or(120.0).clamp(1.0, 3600.0));
        let (request, mut ran) = match k.execute(&req.code, false, timeout).await {
            Ok(ran) => ran,
            Err(e) => {
                let said = k.said.tail();
                *kernel = None;
                return Err(ExecutorError::Internal(format!(
                    "the Python kernel failed ({e}); it said: {said}. The next cell starts a new one."
                )));
            }
        };
        let timed_out = !ran.ended;
        if timed_out {
            // Interrupted: what it printed, and its KeyboardInterrupt.
            if let Some(pid) = k.child.id() {
                sigint(pid);
            }
            let rest = k.follow(&request, &mut ran, INTERRUPT_GRACE).await;
            if ran.ended {
                let _ = tokio::time::timeout(Duration::from_secs(2), k.shell.recv()).await;
            }
            if rest.is_err() || !ran.ended {
                *kernel = None;
                ran.text.push_str("\n[The kernel did not stop when interrupted: it was replaced, and what earlier cells defined is gone.]");
            }
        }
        let mut output = strip_ansi(&ran.text);
        if output.len() > cap {
            let mut cut = cap;
            while !output.is_char_boundary(cut) {
                cut -= 1;
            }
            output.truncate(cut);
            output.push_str("\n[Output cut: it was longer than the cap.]");
        }
        Ok(CellResponse { output, images: ran.images, error: ran.error, timed_out, new_kernel })
    }
}

impl Kernels {
    /// Interrupts the cell `session`'s kernel runs now, if any (the user's interrupt: the kernel
    /// ignores SIGINT between cells).
    pub fn interrupt(&self, session: Option<&str>) -> bool {
        let slot = self.by_session.lock().unwrap_or_else(|e| e.into_inner()).get(session.unwrap_or_default()).cloned();
        match slot.map(|s| s.pid.load(std::sync::atomic::Ordering::SeqCst)) {
            Some(pid) if pid > 0 => {
                sigint(pid);
                true
            }
            _ => false,
        }
    }
}

/// Sends SIGINT to process `pid` (a kernel this executor started).
#[allow(unsafe_code)]
fn sigint(pid: u32) {
    // SAFETY: kill(2) with a pid this executor started.
    unsafe {
        libc::kill(pid as i32, libc::SIGINT);
    }
}

/// `s` as a Python string literal.
fn python_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "''".into())
}

/// Text without ANSI colour and cursor codes (IPython colours its tracebacks).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                while let Some(&n) = chars.peek() {
                    chars.next();
                    if n.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

impl Kernel {
    /// Starts `python3 -m ipykernel_launcher` on `ipc` sockets and waits until it answers.
    async fn start(workspace: &std::path::Path) -> Result<Self, ExecutorError> {
        let python = ["/usr/bin/python3", "/usr/local/bin/python3"].into_iter().map(PathBuf::from).find(|p| p.exists());
        let python = python.ok_or_else(|| ExecutorError::Tool("This sandbox has no Python 3 for the IPython kernel.".into()))?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("halyard-kernel-{}", &id[..12]));
        std::fs::create_dir_all(&dir).map_err(|e| ExecutorError::Internal(format!("{}: {e}", dir.display())))?;
        // A socket's path has at most 107 bytes: through a short link when the directory is deep.
        let (short, link) = short_tmp(&id[12..28]);
        let base = short.join(format!("halyard-kernel-{}", &id[..12])).join("k");
        let key = uuid::Uuid::new_v4().simple().to_string();
        let connection = json!({
            "transport": "ipc", "ip": base.display().to_string(),
            "shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5,
            "key": key, "signature_scheme": "hmac-sha256", "kernel_name": "python3",
        });
        let file = dir.join("connection.json");
        std::fs::write(&file, connection.to_string()).map_err(|e| ExecutorError::Internal(format!("{}: {e}", file.display())))?;
        let mut child = tokio::process::Command::new(&python)
            .args(["-m", "ipykernel_launcher", "-f"])
            .arg(&file)
            .current_dir(workspace)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ExecutorError::Internal(format!("cannot start {}: {e}", python.display())))?;
        let said = Said::default();
        if let Some(out) = child.stdout.take() {
            tokio::spawn(said.clone().keep(out));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(said.clone().keep(err));
        }
        let endpoint = |port: u8| format!("ipc://{}-{port}", base.display());
        let began = Instant::now();
        let (mut shell, mut iopub) = (DealerSocket::new(), SubSocket::new());
        let gone = |child: &mut tokio::process::Child, said: &Said| {
            matches!(child.try_wait(), Ok(Some(_))).then(|| {
                let tail = said.tail();
                if tail.contains("No module named ipykernel") {
                    ExecutorError::Tool("This sandbox has no IPython kernel: its image needs Debian's `python3-ipykernel`.".into())
                } else {
                    ExecutorError::Internal(format!("the Python kernel stopped as it started; it said: {tail}"))
                }
            })
        };
        // The sockets exist once the kernel has bound them.
        loop {
            if let Some(e) = gone(&mut child, &said) {
                return Err(e);
            }
            if began.elapsed() > START_TIMEOUT {
                return Err(ExecutorError::Internal(format!("the Python kernel did not start within 60 s; it said: {}", said.tail())));
            }
            if std::path::Path::new(&format!("{}-2", base.display())).exists()
                && std::path::Path::new(&format!("{}-1", base.display())).exists()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let internal = |e: zeromq::ZmqError| ExecutorError::Internal(format!("cannot reach the Python kernel: {e}"));
        iopub.subscribe("").await.map_err(internal)?;
        iopub.connect(&endpoint(2)).await.map_err(internal)?;
        shell.connect(&endpoint(1)).await.map_err(internal)?;
        let mut kernel = Kernel { child, shell, iopub, key: key.into_bytes(), session: id, dir, link, said };
        // Ready when a request's status comes back on iopub: then its subscription is live too.
        loop {
            if let Some(e) = gone(&mut kernel.child, &kernel.said) {
                return Err(e);
            }
            if began.elapsed() > START_TIMEOUT {
                return Err(ExecutorError::Internal(format!(
                    "the Python kernel did not answer within 60 s; it said: {}",
                    kernel.said.tail()
                )));
            }
            let (id, msg) = wire::request(&kernel.key, &kernel.session, "kernel_info_request", &json!({}));
            kernel.shell.send(msg).await.map_err(internal)?;
            let until = Instant::now() + Duration::from_secs(1);
            let mut heard = false;
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                match tokio::time::timeout(left, kernel.iopub.recv()).await {
                    Ok(Ok(m)) => {
                        if wire::read(&kernel.key, m).is_some_and(|m| m.parent == id) {
                            heard = true;
                            break;
                        }
                    }
                    Ok(Err(e)) => return Err(internal(e)),
                    Err(_) => break,
                }
            }
            if heard {
                break;
            }
        }
        tracing::info!(took_ms = began.elapsed().as_millis() as u64, "python kernel started");
        Ok(kernel)
    }

    /// Runs `code`: its request's id, and what it said until the kernel went idle or `timeout`
    /// passed (`ended` false).
    async fn execute(&mut self, code: &str, silent: bool, timeout: Duration) -> Result<(String, Ran), String> {
        // Not `stop_on_error`: cells go one at a time, so there is never a queue to stop, and with it
        // ipykernel aborts (busy, idle, nothing run) a request that reaches it while it still
        // clears its queue after an error: on a loaded machine, the cell after a failed one.
        let content = json!({
            "code": code, "silent": silent, "store_history": !silent,
            "user_expressions": {}, "allow_stdin": false, "stop_on_error": false,
        });
        let (id, msg) = wire::request(&self.key, &self.session, "execute_request", &content);
        self.shell.send(msg).await.map_err(|e| e.to_string())?;
        let mut ran = Ran::default();
        self.follow(&id, &mut ran, timeout).await?;
        if ran.ended {
            // Its reply on the shell socket (read, so replies do not pile up).
            let _ = tokio::time::timeout(Duration::from_secs(2), self.shell.recv()).await;
        }
        Ok((id, ran))
    }

    /// Reads what request `id` says on iopub until the kernel is idle or `timeout` passes.
    async fn follow(&mut self, id: &str, ran: &mut Ran, timeout: Duration) -> Result<(), String> {
        let until = Instant::now() + timeout;
        loop {
            let Some(left) = until.checked_duration_since(Instant::now()) else { return Ok(()) };
            let m = match tokio::time::timeout(left, self.iopub.recv()).await {
                Err(_) => return Ok(()),
                Ok(Err(e)) => return Err(e.to_string()),
                Ok(Ok(m)) => m,
            };
            let Some(m) = wire::read(&self.key, m) else { continue };
            if m.parent != id {
                continue;
            }
            let c = &m.content;
            match m.msg_type.as_str() {
                "stream" => ran.text.push_str(c["text"].as_str().unwrap_or_default()),
                "execute_result" | "display_data" => {
                    let data = &c["data"];
                    if let Some(png) = data["image/png"].as_str() {
                        ran.images.push(png.chars().filter(|c| !c.is_whitespace()).collect());
                    } else if let Some(text) = data["text/plain"].as_str() {
                        ran.text.push_str(text);
                        ran.text.push('\n');
                    }
                }
                "error" => {
                    ran.error = true;
                    let lines: Vec<&str> =
                        c["traceback"].as_array().map(|t| t.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
                    ran.text.push_str(&lines.join("\n"));
                    ran.text.push('\n');
                }
                "status" if c["execution_state"] == "idle" => {
                    ran.ended = true;
                    return Ok(());
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_removed_from_tracebacks() {
        assert_eq!(strip_ansi("\u{1b}[0;31mZeroDivisionError\u{1b}[0m: division by zero"), "ZeroDivisionError: division by zero");
        assert_eq!(python_str("/a/it's \"here\""), "\"/a/it's \\\"here\\\"\"");
    }
}
