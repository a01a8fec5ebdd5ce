//! One persistent bash session ([`sessions`] keeps the sandbox's several; [`pty`] is the user's
//! own terminal, apart from them). Commands run in the same shell, so `cd` and `export` persist.
//!
//! How a command runs: its text is written to a script file, and the shell is sent one line,
//! `. script; printf MARKER`. bash reads that whole line before running it, so a command that
//! reads standard input gets whatever is sent next (the `is_input` requests), not our marker.
//! The marker carries a per-session nonce, the exit code and the working directory.
//!
//! bash runs in its own process group with a SIGINT trap that returns from the sourced script,
//! so `C-c` (SIGINT to the group) abandons the running command while the shell itself survives
//! and prints the marker with code 130.
//! Output is kept in memory as a head and a rolling tail ([`output`]), so a command printing
//! gigabytes costs a bounded amount of memory; what was dropped is reported with a clear marker.

mod output;
pub(crate) mod pty;
pub mod sessions;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use halyard_protocol::executor::{ExecRequest, ExecResponse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Mutex as AsyncMutex, watch};

use self::output::OutputBuf;
use crate::error::ExecutorError;

const DEFAULT_TIMEOUT_SECS: f64 = 30.0;
const INPUT_TIMEOUT_SECS: f64 = 5.0;
const MAX_TIMEOUT_SECS: f64 = 3600.0;

/// `unset` for names exported before and no longer wanted, then `export NAME='value'` lines
/// for `env` (`None` if there is nothing to do). Names that are not shell identifiers are
/// skipped (the agent runner only sends valid ones).
fn env_script(env: &BTreeMap<String, String>, unset: &BTreeSet<String>) -> Option<String> {
    let mut text = String::new();
    for name in unset.iter().filter(|n| valid_name(n)) {
        text.push_str(&format!("unset {name}\n"));
    }
    for (name, value) in env.iter().filter(|(n, _)| valid_name(n)) {
        text.push_str(&format!("export {name}='{}'\n", value.replace('\'', "'\\''")));
    }
    (!text.is_empty()).then_some(text)
}

/// The sandbox's network variables, when they changed since this shell last exported them (or,
/// for a command in a subshell, whenever there are any): they name no secret, so they are on
/// the command line.
fn network_prefix(exported: &mut (u64, BTreeSet<String>), scoped: bool) -> String {
    let (generation, vars) = crate::network::current();
    if !scoped && exported.0 == generation {
        return String::new();
    }
    let gone: BTreeSet<String> = exported.1.iter().filter(|n| !vars.contains_key(*n)).cloned().collect();
    let text = env_script(&vars, &if scoped { BTreeSet::new() } else { gone }).unwrap_or_default().replace('\n', "; ");
    if !scoped {
        *exported = (generation, vars.keys().cloned().collect());
    }
    text
}

fn valid_name(n: &str) -> bool {
    n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Writes a file only its owner can read, whole before it returns: a `tokio::fs::File`
/// hands writes to a background thread, and the shell sourcing a half-written file would
/// miss values (the reason this is plain `std::fs` on the blocking pool).
async fn write_private(path: &std::path::Path, text: &str) -> Result<(), ExecutorError> {
    let (path, text) = (path.to_owned(), text.to_owned());
    tokio::task::spawn_blocking(move || crate::private::write_private(&path, &text))
        .await
        .map_err(|e| ExecutorError::Internal(format!("write env: {e}")))?
        .map_err(|e| ExecutorError::Internal(format!("write env: {e}")))
}

/// What a new command gets while the previous one runs.
const BUSY: &str = "The previous command is still running. Send is_input=true with `C-c` to interrupt it, \
                    with text to give it input, or with an empty command to keep waiting.";

struct Session {
    child: Child,
    stdin: ChildStdin,
    pgid: i32,
    output: Arc<Mutex<OutputBuf>>,
    bytes: watch::Receiver<u64>,
    /// Marker of the command still running, if any.
    running: Option<String>,
    /// Whether the caller was told the running command still runs (a timeout). If not, its
    /// caller went away mid-wait (a paused or interrupted run drops its request).
    reported: bool,
    counter: u64,
    /// Names the last unscoped `ExecRequest::env` exported, to unset those a later one leaves out.
    exported: BTreeSet<String>,
    /// The generation of [`crate::network`]'s variables this shell exported, and their names.
    network: (u64, BTreeSet<String>),
}

/// The persistent shell.
pub struct Shell {
    workspace: PathBuf,
    cap: usize,
    nonce: String,
    scripts: PathBuf,
    session: AsyncMutex<Option<Session>>,
    alive: std::sync::atomic::AtomicBool,
    /// The shell's process group (0: none yet), readable without the session lock, which a
    /// running command holds: an interrupt must not wait for the command it interrupts.
    pgid: std::sync::atomic::AtomicI32,
    /// Set in every shell started (see [`Shell::with_env`]).
    env: Vec<(String, String)>,
    /// Where this session's working directory is kept between executors (see
    /// [`Shell::remembered`]), and what was written there last.
    memo: Option<PathBuf>,
    saved: Mutex<String>,
    /// Where the first shell starts: the directory a shell of the same session was in when the
    /// sandbox's processes last ended (a hibernation, a crash), else the workspace.
    start: Mutex<Option<PathBuf>>,
    /// The next answer says the shell is new to its caller (set when `start` was remembered).
    restarted: std::sync::atomic::AtomicBool,
}

impl Shell {
    pub fn new(workspace: PathBuf, cap: usize) -> Result<Self, ExecutorError> {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let scripts = std::env::temp_dir().join(format!("halyard-exec-{}", &nonce[..12]));
        std::fs::create_dir_all(&scripts).map_err(|e| ExecutorError::Internal(format!("{}: {e}", scripts.display())))?;
        Ok(Self {
            workspace,
            cap: cap.max(1024),
            nonce,
            scripts,
            session: AsyncMutex::new(None),
            alive: std::sync::atomic::AtomicBool::new(true),
            pgid: std::sync::atomic::AtomicI32::new(0),
            env: Vec::new(),
            memo: None,
            saved: Mutex::new(String::new()),
            start: Mutex::new(None),
            restarted: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Keeps the session's working directory in `memo` after each command, and, if an earlier
    /// executor left one there, starts the shell in it (if it still exists) and says in its
    /// first answer that the shell is new ([`ExecResponse::restarted`]). This is what lets a sandbox
    /// that hibernated carry on where the agent was.
    pub fn remembered(mut self, memo: PathBuf) -> Self {
        let previous = std::fs::read_to_string(&memo).ok().map(|s| s.trim_end_matches('\n').to_owned());
        if let Some(dir) = previous.filter(|d| !d.is_empty()) {
            // A directory removed since: the workspace (the shell is new all the same).
            if Path::new(&dir).is_dir() {
                *self.start.get_mut().unwrap_or_else(|p| p.into_inner()) = Some(PathBuf::from(&dir));
            }
            *self.saved.get_mut().unwrap_or_else(|p| p.into_inner()) = dir;
            *self.restarted.get_mut() = true;
        }
        self.memo = Some(memo);
        self
    }

    /// Writes `cwd` to the memo if it changed (a small write, once per `cd`, not per command).
    fn remember(&self, cwd: &str) {
        let Some(memo) = &self.memo else { return };
        let mut saved = self.saved.lock().unwrap_or_else(|p| p.into_inner());
        if cwd.is_empty() || *saved == cwd {
            return;
        }
        let written = memo.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(memo, cwd));
        match written {
            Ok(()) => *saved = cwd.to_owned(),
            Err(e) => tracing::warn!(memo = %memo.display(), error = %e, "cannot keep the shell's working directory"),
        }
    }

    /// Variables every shell this session starts has (git's credential helper).
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }

    /// The shell's working directory now (its process's, as the kernel reads it).
    pub fn cwd(&self) -> Option<PathBuf> {
        let pid = self.pgid.load(std::sync::atomic::Ordering::SeqCst);
        (pid > 0).then(|| std::fs::read_link(format!("/proc/{pid}/cwd")).ok()).flatten()
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn spawn(&self) -> Result<Session, ExecutorError> {
        let internal = |e: std::io::Error| ExecutorError::Internal(format!("cannot start bash: {e}"));
        // Only the first shell starts where an earlier executor's was; one after `exit` starts
        // in the workspace, as its notice says.
        let dir = self.start.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_else(|| self.workspace.clone());
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(&dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(internal)?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        self.pgid.store(pgid, std::sync::atomic::Ordering::SeqCst);
        let stdin = child.stdin.take().ok_or_else(|| ExecutorError::Internal("no stdin".into()))?;
        let output = Arc::new(Mutex::new(OutputBuf::new(self.cap)));
        let (tx, rx) = watch::channel(0u64);
        let tx = Arc::new(tx);
        for pipe in [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
            child.stderr.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let output = output.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut pipe = pipe;
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    match pipe.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if let Ok(mut out) = output.lock() {
                                out.push(&buf[..n]);
                            }
                            tx.send_modify(|c| *c += n as u64);
                        }
                    }
                }
                // EOF: wake waiters so they notice the shell is gone.
                tx.send_modify(|c| *c += 1);
            });
        }
        Ok(Session {
            child,
            stdin,
            pgid,
            output,
            bytes: rx,
            running: None,
            reported: false,
            counter: 0,
            exported: BTreeSet::new(),
            network: (0, BTreeSet::new()),
        })
    }

    /// Interrupts whatever the shell runs now: SIGINT to its process group (the shell's trap
    /// ends the command line, as Ctrl-C in a terminal would), and if the command is still
    /// running `grace` later, SIGKILL to the group (the next command gets a fresh shell).
    /// Returns whether there was a shell to signal.
    pub async fn interrupt(&self, grace: Duration) -> bool {
        let pgid = self.pgid.load(std::sync::atomic::Ordering::SeqCst);
        if pgid <= 0 || !crate_signal(-pgid, libc::SIGINT) {
            return false;
        }
        // The running command's `exec` holds the session until it returns: once the lock is
        // free, the command has ended.
        if tokio::time::timeout(grace, self.session.lock()).await.is_err() {
            crate_signal(-pgid, libc::SIGKILL);
        }
        true
    }

    /// Kills the shell's process group (the shell, what it runs, what that started in the
    /// background): the session is over. Whether there was a shell.
    pub fn kill(&self) -> bool {
        let pgid = self.pgid.load(std::sync::atomic::Ordering::SeqCst);
        pgid > 0 && crate_signal(-pgid, libc::SIGKILL)
    }

    /// Runs a command or sends input, per [`ExecRequest`].
    pub async fn exec(&self, req: ExecRequest) -> Result<ExecResponse, ExecutorError> {
        loop {
            if let Some(mut done) = self.exec_once(&req).await? {
                if done.exit_code.is_some() {
                    self.remember(&done.cwd);
                }
                done.restarted = self.restarted.swap(false, std::sync::atomic::Ordering::SeqCst);
                return Ok(done);
            }
        }
    }

    /// One try of [`Shell::exec`]; `None` when a command nobody waited for had to end first.
    async fn exec_once(&self, req: &ExecRequest) -> Result<Option<ExecResponse>, ExecutorError> {
        let mut guard = self.session.lock().await;
        let session = match guard.as_mut() {
            Some(s) => s,
            None => {
                let s = self.spawn()?;
                let mut s = s;
                // stderr joins stdout so output keeps its order and never trails the marker.
                // The SIGINT trap returns from the sourced command script, so C-c abandons the
                // whole command line (as in a terminal) while the shell itself survives.
                write_line(&mut s.stdin, "exec 2>&1; trap 'return 130 2>/dev/null || :' INT; export PAGER=cat GIT_PAGER=cat TERM=dumb")
                    .await?;
                guard.insert(s)
            }
        };
        let timeout =
            req.timeout_secs.unwrap_or(if req.is_input { INPUT_TIMEOUT_SECS } else { DEFAULT_TIMEOUT_SECS }).clamp(0.0, MAX_TIMEOUT_SECS);

        if req.is_input {
            let Some(marker) = session.running.clone() else {
                return Err(ExecutorError::Tool(
                    "No command is running, so there is nothing to send input to. Run a command with is_input=false.".into(),
                ));
            };
            match req.command.trim() {
                "C-c" => {
                    crate_signal(-session.pgid, libc::SIGINT);
                }
                "" => {}
                text => write_line(&mut session.stdin, text).await?,
            }
            return self.wait(guard, marker, timeout).await.map(Some);
        }

        // A command whose caller went away (the run was paused or interrupted mid-wait) is
        // waited for first, as its caller would have; then this one runs. Its output was
        // nobody's, and is dropped.
        if let Some(marker) = session.running.clone().filter(|_| !session.reported) {
            let earlier = self.wait(guard, marker, timeout).await?;
            if !earlier.still_running {
                return Ok(None);
            }
            return Err(ExecutorError::Busy(BUSY.into()));
        }
        if session.running.is_some() {
            return Err(ExecutorError::Busy(BUSY.into()));
        }
        if req.command.trim().is_empty() {
            return Err(ExecutorError::Tool("`command` is empty; give a shell command to run.".into()));
        }
        session.counter += 1;
        let script = self.scripts.join(format!("cmd-{}.sh", session.counter));
        tokio::fs::write(&script, req.command.as_bytes()).await.map_err(|e| ExecutorError::Internal(format!("write script: {e}")))?;
        let marker = format!("__HALYARD_DONE_{}_", self.nonce);
        if let Ok(mut out) = session.output.lock() {
            out.take();
        }
        // Exported values go through a private file the shell reads and removes before the
        // command runs: they are never part of a command line or of the command's script.
        let (env, unset) = match &req.env {
            None => (BTreeMap::new(), BTreeSet::new()),
            Some(env) if req.scoped => (env.clone(), BTreeSet::new()),
            Some(env) => {
                let now: BTreeSet<String> = env.keys().cloned().collect();
                let gone = session.exported.difference(&now).cloned().collect();
                session.exported = now;
                (env.clone(), gone)
            }
        };
        let env_prefix = match env_script(&env, &unset) {
            Some(text) => {
                let path = self.scripts.join(format!("env-{}.sh", session.counter));
                write_private(&path, &text).await?;
                format!(". '{}'; rm -f '{}'; ", path.display(), path.display())
            }
            None => String::new(),
        };
        let run = format!("{}{env_prefix}. '{}'", network_prefix(&mut session.network, req.scoped), script.display());
        // A scoped command runs in a subshell: what it is given or exports ends with it.
        let run = if req.scoped { format!("( {run} )") } else { run };
        let line = format!("{run}; __halyard_rc=$?; printf '{marker}%s_%s__\\n' \"$__halyard_rc\" \"$PWD\"");
        write_line(&mut session.stdin, &line).await?;
        session.running = Some(marker.clone());
        session.reported = false;
        self.wait(guard, marker, timeout).await.map(Some)
    }

    async fn wait(
        &self,
        mut guard: tokio::sync::MutexGuard<'_, Option<Session>>,
        marker: String,
        timeout: f64,
    ) -> Result<ExecResponse, ExecutorError> {
        let Some(session) = guard.as_mut() else {
            return Err(ExecutorError::Internal("shell vanished".into()));
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(timeout);
        let mut bytes = session.bytes.clone();
        loop {
            let found = session.output.lock().ok().and_then(|mut o| o.take_marker(marker.as_bytes()));
            if let Some((code, cwd)) = found {
                session.running = None;
                let (output, truncated) = take_output(session);
                return Ok(ExecResponse { output, exit_code: Some(code), still_running: false, truncated, cwd, restarted: false });
            }
            if let Ok(Some(status)) = session.child.try_wait() {
                // The command ended the shell (`exit`, or it was killed). Report what it
                // printed; the next command gets a fresh shell in the workspace. Its last
                // output can still be in the pipe when the exit is seen: the readers let go of
                // the channel at EOF, so wait for that, briefly (a background job the command
                // left running holds the pipe open).
                let drain = tokio::time::Instant::now() + Duration::from_millis(500);
                while matches!(tokio::time::timeout_at(drain, bytes.changed()).await, Ok(Ok(()))) {}
                let (mut output, truncated) = take_output(session);
                output.push_str("\n[The shell exited; a new shell will be started in the workspace for the next command.]");
                let code = status.code().unwrap_or(-1);
                *guard = None;
                return Ok(ExecResponse {
                    output,
                    exit_code: Some(code),
                    still_running: false,
                    truncated,
                    cwd: self.workspace.display().to_string(),
                    restarted: false,
                });
            }
            tokio::select! {
                changed = bytes.changed() => {
                    if changed.is_err() {
                        // Readers are gone: poll the child for its exit status.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    session.reported = true;
                    let (mut output, truncated) = take_output(session);
                    output.push_str(&format!(
                        "\n[The command is still running after {timeout} s. Send is_input=true with `C-c` to interrupt it, \
                         with text to give it input, or with an empty command to keep waiting.]"
                    ));
                    return Ok(ExecResponse {
                        output,
                        exit_code: None,
                        still_running: true,
                        truncated,
                        cwd: String::new(),
                        restarted: false,
                    });
                }
            }
        }
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        // The shell and whatever it started go with the executor.
        if let Ok(guard) = self.session.try_lock() {
            if let Some(s) = guard.as_ref() {
                crate_signal(-s.pgid, libc::SIGKILL);
            }
        }
        let _ = std::fs::remove_dir_all(&self.scripts);
    }
}

fn take_output(session: &mut Session) -> (String, bool) {
    session.output.lock().map(|mut o| o.take()).unwrap_or_default()
}

async fn write_line(stdin: &mut ChildStdin, line: &str) -> Result<(), ExecutorError> {
    let mut bytes = line.as_bytes().to_vec();
    bytes.push(b'\n');
    stdin.write_all(&bytes).await.map_err(|e| ExecutorError::Internal(format!("shell input: {e}")))?;
    stdin.flush().await.map_err(|e| ExecutorError::Internal(format!("shell input: {e}")))
}

#[allow(unsafe_code)]
pub(crate) fn crate_signal(pid: i32, sig: i32) -> bool {
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    unsafe { libc::kill(pid, sig) == 0 }
}

#[cfg(test)]
mod tests;
