//! ACP's `terminal/*` methods, answered in the executor's shell sessions: each terminal is a
//! named shell of its own (`acp-term-…`), its command run there with the run's environment and
//! the agent's, as Halyard's own `terminal` tool runs in the main one. Output is kept here as it
//! is polled (capped at the agent's `outputByteLimit`, cut from the front as ACP asks), and
//! stays after `terminal/release`, so a tool call that embeds the terminal still shows it.
//!
//! Requests are answered one at a time, so `terminal/wait_for_exit` polls in short slices and
//! hands control back to its caller between them: an interrupt or a stopped run is seen while
//! a long command runs.

use std::collections::{BTreeMap, HashMap};

use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::executor::ExecRequest;
use serde_json::{Value, json};

/// The session names of terminals: the runner that takes a run over knows them by it.
const PREFIX: &str = "acp-term-";
/// How long one poll of a running command waits (seconds).
const SLICE: f64 = 1.0;
/// The executor's note after the output of a command that still runs: not the command's.
const STILL_RUNNING: &str = "\n[The command is still running after";

/// A JSON-RPC error: code and message.
pub type Failure = (i64, String);

#[derive(Debug, Default)]
struct Terminal {
    output: String,
    truncated: bool,
    limit: Option<usize>,
    /// The command ended (with `code`, where the shell said it).
    ended: bool,
    code: Option<i32>,
    released: bool,
}

impl Terminal {
    fn push(&mut self, mut text: String) {
        if let Some(i) = text.find(STILL_RUNNING) {
            text.truncate(i);
        }
        self.output.push_str(&text);
        if let Some(limit) = self.limit.filter(|l| self.output.len() > *l) {
            // Cut from the front, at a character's boundary.
            let mut cut = self.output.len() - limit;
            while !self.output.is_char_boundary(cut) {
                cut += 1;
            }
            self.output.drain(..cut);
            self.truncated = true;
        }
    }

    fn ended(&mut self, code: Option<i32>) {
        self.ended = true;
        self.code = code;
    }

    fn status(&self) -> Value {
        if self.ended { json!({"exitCode": self.code, "signal": Value::Null}) } else { Value::Null }
    }

    /// Still running: neither ended nor released.
    fn running(&self) -> bool {
        !self.ended && !self.released
    }
}

/// One run's terminals.
#[derive(Default)]
pub struct Terminals {
    open: HashMap<String, Terminal>,
}

/// How a wait ended.
pub enum Waited {
    Exited(Value),
    /// The run is stopping: the request is left for the next one.
    Stopped,
}

fn id_of(params: &Value) -> Result<String, Failure> {
    let id = params.get("terminalId").and_then(Value::as_str).ok_or((-32602, "`terminalId` is required".to_owned()))?;
    if !id.starts_with(PREFIX) {
        return Err((-32602, format!("no terminal {id}")));
    }
    Ok(id.to_owned())
}

/// A word for `sh`, quoted when it needs to be.
fn quote(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c)) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

impl Terminals {
    /// `terminal/create`: starts the command in a shell of its own and answers at once.
    pub async fn create(&mut self, exec: &ExecutorClient, params: &Value, env: &BTreeMap<String, String>) -> Result<Value, Failure> {
        let command = params.get("command").and_then(Value::as_str).ok_or((-32602, "`command` is required".to_owned()))?;
        let mut line = quote(command);
        for arg in params.get("args").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            line.push(' ');
            line.push_str(&quote(arg));
        }
        if let Some(cwd) = params.get("cwd").and_then(Value::as_str) {
            line = format!("cd {} && {line}", quote(cwd));
        }
        let mut env = env.clone();
        for var in params.get("env").and_then(Value::as_array).into_iter().flatten() {
            if let (Some(name), Some(value)) = (var["name"].as_str(), var["value"].as_str()) {
                env.insert(name.to_owned(), value.to_owned());
            }
        }
        let id = format!("{PREFIX}{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
        let limit = params.get("outputByteLimit").and_then(Value::as_u64).map(|n| n as usize);
        let req = ExecRequest {
            command: line,
            timeout_secs: Some(0.2),
            env: Some(env),
            scoped: true,
            session: Some(id.clone()),
            ..Default::default()
        };
        let ran = exec.exec(&req).await.map_err(|e| (-32603, format!("the sandbox could not start the command: {e}")))?;
        let mut terminal = Terminal { limit, ..Default::default() };
        terminal.push(ran.output);
        if !ran.still_running {
            terminal.ended(ran.exit_code);
        }
        self.open.insert(id.clone(), terminal);
        Ok(json!({"terminalId": id}))
    }

    /// Reads what the command wrote since the last look (waiting up to `wait` seconds for it
    /// to end).
    async fn poll(&mut self, exec: &ExecutorClient, id: &str, wait: f64) -> Result<(), Failure> {
        // A terminal an earlier runner made: its shell is there, its output so far is not.
        let terminal = self.open.entry(id.to_owned()).or_default();
        if !terminal.running() {
            return Ok(());
        }
        let req = ExecRequest { is_input: true, timeout_secs: Some(wait), session: Some(id.to_owned()), ..Default::default() };
        match exec.exec(&req).await {
            Ok(r) => {
                terminal.push(r.output);
                if !r.still_running {
                    terminal.ended(r.exit_code);
                }
            }
            // Nothing runs there: it ended, and its end was read by a runner before this one.
            Err(halyard_platform::executor_client::ExecutorError::Rejected { .. }) => terminal.ended(None),
            Err(e) => return Err((-32603, format!("the sandbox could not read the terminal: {e}"))),
        }
        Ok(())
    }

    /// `terminal/output`.
    pub async fn output(&mut self, exec: &ExecutorClient, params: &Value) -> Result<Value, Failure> {
        let id = id_of(params)?;
        self.poll(exec, &id, 0.0).await?;
        let t = &self.open[&id];
        Ok(json!({"output": t.output, "truncated": t.truncated, "exitStatus": t.status()}))
    }

    /// `terminal/wait_for_exit`, one slice: `None` while the command runs on.
    pub async fn wait_slice(&mut self, exec: &ExecutorClient, params: &Value) -> Result<Option<Value>, Failure> {
        let id = id_of(params)?;
        self.poll(exec, &id, SLICE).await?;
        let t = &self.open[&id];
        if t.ended {
            return Ok(Some(t.status()));
        }
        Ok(t.released.then(|| json!({"exitCode": Value::Null, "signal": "SIGKILL"})))
    }

    /// `terminal/kill`: the command is stopped (as Ctrl-C stops it); the terminal stays.
    pub async fn kill(&mut self, exec: &ExecutorClient, params: &Value) -> Result<Value, Failure> {
        let id = id_of(params)?;
        self.interrupt(exec, &id).await;
        Ok(json!({}))
    }

    /// Stops terminal `id`'s command and takes what it wrote last.
    pub async fn interrupt(&mut self, exec: &ExecutorClient, id: &str) {
        if self.open.get(id).is_some_and(|t| !t.running()) {
            return;
        }
        let _ = exec.interrupt(Some(id)).await;
        let _ = self.poll(exec, id, 5.0).await;
    }

    /// Stops every running terminal's command (the user interrupted the turn).
    pub async fn interrupt_all(&mut self, exec: &ExecutorClient) {
        let running: Vec<String> = self.open.iter().filter(|(_, t)| t.running()).map(|(id, _)| id.clone()).collect();
        for id in running {
            self.interrupt(exec, &id).await;
        }
    }

    /// `terminal/release`: its shell and whatever still runs there end; its output is kept.
    pub async fn release(&mut self, exec: &ExecutorClient, params: &Value) -> Result<Value, Failure> {
        let id = id_of(params)?;
        let _ = self.poll(exec, &id, 0.0).await;
        let _ = exec.close_session(&id).await;
        if let Some(t) = self.open.get_mut(&id) {
            t.released = true;
        }
        Ok(json!({}))
    }

    /// Replaces the terminals a tool call's update embeds with their output, as text.
    pub fn inline(&self, update: &mut Value) {
        for block in update.get_mut("content").and_then(Value::as_array_mut).into_iter().flatten() {
            if block.get("type").and_then(Value::as_str) != Some("terminal") {
                continue;
            }
            let id = block.get("terminalId").and_then(Value::as_str).unwrap_or_default();
            if let Some(t) = self.open.get(id) {
                let mut text = t.output.clone();
                if let Some(code) = t.code {
                    text.push_str(&format!("\n[The command completed with exit code {code}.]"));
                }
                *block = json!({"type": "content", "content": {"type": "text", "text": text}});
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_the_shell_only_when_they_need_it() {
        assert_eq!(quote("bash"), "bash");
        assert_eq!(quote("echo it's"), r"'echo it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn output_past_the_limit_is_cut_from_the_front_and_the_executors_note_is_not_output() {
        let mut t = Terminal { limit: Some(5), ..Default::default() };
        t.push("abc".into());
        assert!(!t.truncated);
        t.push("défg\n[The command is still running after 1 s. Send …]".into());
        assert_eq!((t.output.as_str(), t.truncated), ("défg", true));
    }
}
