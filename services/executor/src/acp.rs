//! Third-party agents (Claude Code, Codex, Gemini CLI, OpenCode, or any agent speaking the Agent
//! Client Protocol on stdio) run here, as the sandbox's user in the workspace; the agent runner
//! outside is their ACP client. `GET /acp/stdio` upgrades to a WebSocket whose first message
//! names the process ([`AcpSpawn`]); then each line the agent writes goes out as a numbered
//! [`AcpFrame::Line`] and each [`AcpFrame::Send`] is written to its standard input.
//!
//! The process belongs to the sandbox, not to the socket: it lives until it ends, is stopped
//! ([`AcpFrame::Stop`]) or the sandbox goes. Every line is kept until the holder acknowledges it,
//! and the holder's requests the agent has not answered yet are remembered, so a runner that
//! takes a run over (the last one died mid-turn) attaches to the same process and is handed
//! what the last one left: the running prompt's id, a permission request nobody answered, the
//! updates nobody recorded.
//!
//! The agent calls its LLM through the LLM relay ([`crate::relay`]) whose base URL its
//! environment names (`${HALYARD_LLM_BASE}` in a value is replaced by it): the agent runner
//! answers those calls with the real key, which never enters the sandbox.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::extract::ws::{Message, WebSocket};
use halyard_protocol::executor::{AcpFrame, AcpSpawn};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::mpsc;

use crate::mcp::{close, stderr_tail};
use crate::relay::Relay;

/// Longest line accepted from an agent (a tool's whole output can be in one update).
const MAX_LINE: usize = 16 << 20;
/// Lines kept for a holder at most; past it the oldest go (a holder that never acknowledges).
const MAX_KEPT: usize = 50_000;
/// What the placeholder in an environment value is replaced by: the LLM relay's base URL.
const LLM_BASE: &str = "${HALYARD_LLM_BASE}";

/// The sandbox's agent processes, by name.
pub struct AcpHost {
    workspace: PathBuf,
    procs: Mutex<HashMap<String, Arc<Proc>>>,
    /// Where the agents' LLM calls go (`None`: no relay could be made; agents then get no
    /// base URL and their calls fail, in their words).
    llm: Option<Arc<Relay>>,
}

impl std::fmt::Debug for AcpHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpHost").field("workspace", &self.workspace).finish_non_exhaustive()
    }
}

/// One agent process.
struct Proc {
    stdin: tokio::sync::Mutex<ChildStdin>,
    state: Mutex<State>,
    pgid: Option<i32>,
}

#[derive(Default)]
struct State {
    /// Lines not acknowledged, by number.
    kept: BTreeMap<u64, String>,
    next: u64,
    /// The holder's requests without an answer yet, by id (as JSON text).
    unanswered: BTreeSet<String>,
    /// The socket attached now: its number and where its frames go.
    holder: Option<(u64, mpsc::UnboundedSender<AcpFrame>)>,
    holders: u64,
    /// Set when the process ended: its last words.
    exited: Option<String>,
}

impl State {
    fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl AcpHost {
    pub fn new(workspace: PathBuf) -> Arc<Self> {
        let unheld = "Halyard's LLM relay answers only while the agent runner drives this agent";
        let llm = match Relay::start(unheld, &["cookie"]) {
            Ok(relay) => Some(relay),
            Err(e) => {
                tracing::warn!(error = %e, "no LLM relay: third-party agents cannot reach their LLM");
                None
            }
        };
        Arc::new(Self { workspace, procs: Mutex::new(HashMap::new()), llm })
    }

    /// The LLM relay, for its holder's socket (`GET /llm/relay`).
    pub fn llm_relay(&self) -> Option<Arc<Relay>> {
        self.llm.clone()
    }

    /// Serves one holder's socket until it closes (the process lives on).
    pub async fn attach(self: Arc<Self>, mut socket: WebSocket) {
        let spawn = match socket.recv().await {
            Some(Ok(Message::Text(text))) => serde_json::from_str::<AcpSpawn>(&text).map_err(|e| e.to_string()),
            _ => Err("the first message must name the agent".into()),
        };
        let spawn = match spawn.and_then(|s| {
            if s.command.trim().is_empty() || s.name.is_empty() { Err("`name` and `command` are required".into()) } else { Ok(s) }
        }) {
            Ok(s) => s,
            Err(e) => return close(socket, 1008, &e).await,
        };
        let (proc_, fresh) = match self.find_or_start(&spawn) {
            Ok(found) => found,
            Err(e) => return close(socket, 1011, &format!("cannot start the agent: {e}")).await,
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let generation = {
            let mut st = State::lock(&proc_.state);
            st.holders += 1;
            let generation = st.holders;
            let unanswered = st.unanswered.iter().filter_map(|id| serde_json::from_str(id).ok()).collect();
            let relay = self.llm.as_ref().map(|r| r.base().to_owned());
            let _ = tx.send(AcpFrame::Attached { fresh, unanswered, relay });
            for (seq, line) in &st.kept {
                let _ = tx.send(AcpFrame::Line { seq: *seq, line: line.clone() });
            }
            if let Some(message) = &st.exited {
                let _ = tx.send(AcpFrame::Exited { message: message.clone() });
            }
            // The holder before, if any, is let go: its channel closes.
            st.holder = Some((generation, tx));
            generation
        };
        loop {
            tokio::select! {
                out = rx.recv() => match out {
                    Some(frame) => {
                        let text = serde_json::to_string(&frame).unwrap_or_default();
                        if socket.send(Message::Text(text.into())).await.is_err() {
                            break;
                        }
                    }
                    // Another holder attached.
                    None => return close(socket, 1000, "another holder attached").await,
                },
                incoming = socket.recv() => match incoming {
                    Some(Ok(Message::Text(text))) => match serde_json::from_str::<AcpFrame>(&text) {
                        Ok(AcpFrame::Send { line }) => {
                            if let Err(e) = proc_.write(&line).await {
                                tracing::debug!(error = %e, "cannot write to the agent");
                            }
                        }
                        Ok(AcpFrame::Ack { seq }) => {
                            State::lock(&proc_.state).kept.remove(&seq);
                        }
                        Ok(AcpFrame::Stop) => {
                            // Forgotten at once: the next holder starts the agent anew even if
                            // this one has not quite ended yet.
                            State::lock(&proc_.state).exited.get_or_insert_with(|| "stopped by its driver".into());
                            self.forget(&spawn.name, &proc_);
                            proc_.kill();
                        }
                        _ => {}
                    },
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break,
                },
            }
        }
        let mut st = State::lock(&proc_.state);
        if st.holder.as_ref().is_some_and(|(g, _)| *g == generation) {
            st.holder = None;
        }
    }

    /// Lets go of `name`'s process if it is still `proc_`.
    fn forget(&self, name: &str, proc_: &Arc<Proc>) {
        let mut procs = self.procs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if procs.get(name).is_some_and(|p| Arc::ptr_eq(p, proc_)) {
            procs.remove(name);
        }
    }

    /// The live process of `spawn.name`, or a new one (`true`: started now).
    fn find_or_start(self: &Arc<Self>, spawn: &AcpSpawn) -> std::io::Result<(Arc<Proc>, bool)> {
        let mut procs = self.procs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(p) = procs.get(&spawn.name) {
            if State::lock(&p.state).exited.is_none() {
                return Ok((p.clone(), false));
            }
        }
        let base = self.llm.as_ref().map(|r| r.base().to_owned()).unwrap_or_default();
        // (And as a variable of its own, for launchers that pass it on the command line.)
        let env =
            spawn.env.iter().map(|(k, v)| (k.clone(), v.replace(LLM_BASE, &base))).chain([("HALYARD_LLM_BASE".to_owned(), base.clone())]);
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(&spawn.command)
            .current_dir(&self.workspace)
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let pgid = child.id().map(|p| p as i32);
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take()) else {
            return Err(std::io::Error::other("no pipes"));
        };
        let proc_ = Arc::new(Proc { stdin: tokio::sync::Mutex::new(stdin), state: Mutex::default(), pgid });
        procs.insert(spawn.name.clone(), proc_.clone());
        tracing::info!(agent = %spawn.name, "third-party agent started");
        let (host, name, reading) = (self.clone(), spawn.name.clone(), proc_.clone());
        tokio::spawn(async move {
            let tail = tokio::spawn(stderr_tail(stderr));
            reading.read(stdout).await;
            reading.kill();
            let status = child.wait().await.ok();
            let tail = tail.await.unwrap_or_default();
            let code = status.and_then(|s| s.code()).map_or("was killed".to_owned(), |c| format!("exited with code {c}"));
            let last = tail.trim().lines().last().unwrap_or_default().to_owned();
            let message = if last.is_empty() { format!("the agent {code}") } else { format!("the agent {code}: {last}") };
            let mut st = State::lock(&reading.state);
            if let Some((_, tx)) = &st.holder {
                let _ = tx.send(AcpFrame::Exited { message: message.clone() });
            }
            st.exited.get_or_insert(message);
            drop(st);
            host.forget(&name, &reading);
        });
        Ok((proc_, true))
    }
}

impl Proc {
    /// Keeps and passes on each line the agent writes, until its output ends.
    async fn read(&self, stdout: tokio::process::ChildStdout) {
        let mut lines = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match lines.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) if line.len() > MAX_LINE => {
                    tracing::warn!(bytes = line.len(), "an agent's line is over the limit; dropped");
                    continue;
                }
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&line).trim_end().to_owned();
            if text.is_empty() {
                continue;
            }
            let answered = answer_id(&text);
            let mut st = State::lock(&self.state);
            if let Some(id) = answered {
                st.unanswered.remove(&id);
            }
            st.next += 1;
            let seq = st.next;
            st.kept.insert(seq, text.clone());
            while st.kept.len() > MAX_KEPT {
                st.kept.pop_first();
            }
            if let Some((_, tx)) = &st.holder {
                let _ = tx.send(AcpFrame::Line { seq, line: text });
            }
        }
    }

    /// Writes one message to the agent; a request's id is remembered until it is answered.
    async fn write(&self, line: &str) -> std::io::Result<()> {
        if let Ok(v) = serde_json::from_str::<Value>(line) {
            if let (Some(id), Some(_)) = (v.get("id"), v.get("method")) {
                State::lock(&self.state).unanswered.insert(id.to_string());
            }
        }
        let mut bytes = line.as_bytes().to_vec();
        bytes.retain(|b| *b != b'\n');
        bytes.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        stdin.write_all(&bytes).await?;
        stdin.flush().await
    }

    /// Ends the process and whatever it started, also what left its process group (an agent's
    /// shell runs commands in groups of their own).
    fn kill(&self) {
        let Some(pgid) = self.pgid else { return };
        for pid in descendants(pgid) {
            crate::shell::crate_signal(pid, libc::SIGKILL);
        }
        crate::shell::crate_signal(-pgid, libc::SIGKILL);
    }
}

/// Every process descended from `root`, from `/proc` (children before it is gone).
fn descendants(root: i32) -> Vec<i32> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid ...`: the name may hold spaces and parentheses.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)).and_then(|p| p.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(pid, _)| *pid));
        i += 1;
    }
    found.remove(0);
    found
}

/// The id of a response (a message with an id and no method), as JSON text.
fn answer_id(text: &str) -> Option<String> {
    let v: Value = serde_json::from_str(text).ok()?;
    if v.get("method").is_some() {
        return None;
    }
    v.get("id").map(Value::to_string)
}
