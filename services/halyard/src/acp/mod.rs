//! `halyard acp`: Halyard as an agent for editors that speak the Agent Client Protocol (Zed,
//! JetBrains, Neovim plugins), on standard input and output, one JSON-RPC message a line. A
//! session is a conversation: `session/new` starts one (repository, agent and LLM profile from
//! the flags), `session/prompt` sends a message and streams its events back as
//! `session/update`s (the answer as it is written, thinking, tool calls and their results, the
//! plan) until the run ends, `session/load` replays a conversation by id, `session/cancel`
//! interrupts it. An action that waits for confirmation becomes `session/request_permission`:
//! the editor's answer confirms or rejects it.
//!
//! The conversation works in its sandbox, as every conversation does; the files the editor
//! holds stay the editor's ([`editor`]): those a prompt names are read from it, those the
//! conversation changes are written back to it.

mod editor;
mod files;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

use crate::client::Client;

/// What new sessions are started with.
#[derive(Clone, Debug, Default)]
pub struct Defaults {
    pub repo: Option<String>,
    pub branch: Option<String>,
    pub agent: Option<String>,
    pub llm_profile: Option<String>,
    pub confirmation_policy: Option<String>,
}

/// The server: where answers go, and the editor's answers this side waits for.
struct Server {
    client: Client,
    defaults: Defaults,
    out: mpsc::UnboundedSender<Value>,
    waiting: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    next: std::sync::atomic::AtomicU64,
    editor: Mutex<editor::Editor>,
}

/// Serves the editor on standard input and output until it closes them.
pub async fn serve(client: Client, defaults: Defaults) -> Result<i32> {
    let (out, mut outgoing) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(message) = outgoing.recv().await {
            let mut line = message.to_string();
            line.push('\n');
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let server = Arc::new(Server { client, defaults, out, waiting: Mutex::default(), next: 1.into(), editor: Mutex::default() });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            server.send(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "not JSON"}}));
            continue;
        };
        let (id, method) = (message.get("id").cloned(), message.get("method").and_then(Value::as_str).map(str::to_owned));
        match (id, method) {
            // The editor's answer to a request of ours.
            (Some(id), None) => {
                let waiter = server.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id.to_string());
                if let Some(w) = waiter {
                    let _ = w.send(message);
                }
            }
            (id, Some(method)) => {
                let server = server.clone();
                let params = message.get("params").cloned().unwrap_or(Value::Null);
                tokio::spawn(async move {
                    let answer = server.handle(&method, params).await;
                    if let Some(id) = id {
                        let reply = match answer {
                            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                            Err((code, message)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
                        };
                        server.send(reply);
                    }
                });
            }
            _ => {}
        }
    }
    drop(server);
    let _ = writer.await;
    Ok(0)
}

type Answer = std::result::Result<Value, (i64, String)>;

fn failed(e: impl std::fmt::Display) -> (i64, String) {
    (-32603, e.to_string())
}

impl Server {
    fn send(&self, message: Value) {
        let _ = self.out.send(message);
    }

    fn update(&self, session: &str, update: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}}));
    }

    /// Asks the editor and waits for its answer.
    async fn ask(&self, method: &str, params: Value) -> Option<Value> {
        let id = format!("halyard-{}", self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).insert(Value::String(id.clone()).to_string(), tx);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        rx.await.ok()
    }

    async fn handle(&self, method: &str, params: Value) -> Answer {
        match method {
            "initialize" => {
                let offered = params.get("clientCapabilities").cloned().unwrap_or_default();
                self.editor().offered(&offered);
                Ok(json!({
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": true, "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true}},
                "agentInfo": {"name": "halyard", "title": "Halyard", "version": env!("CARGO_PKG_VERSION")},
                "authMethods": [],
                }))
            }
            "session/new" => {
                let answer = self.new_session().await?;
                let session = answer["sessionId"].as_str().unwrap_or_default();
                self.editor().opened(session, params.get("cwd").and_then(Value::as_str));
                Ok(answer)
            }
            "session/load" => self.load_session(&params).await,
            "session/prompt" => self.prompt(&params).await,
            "session/cancel" => {
                let session = params.get("sessionId").and_then(Value::as_str).unwrap_or_default();
                self.client.post(&format!("/conversations/{session}/interrupt"), json!({})).await.map_err(failed)?;
                Ok(Value::Null)
            }
            other => Err((-32601, format!("Halyard does not offer `{other}`"))),
        }
    }

    /// A conversation, started and ready (its sandbox up, its workspace prepared).
    async fn new_session(&self) -> Answer {
        let d = &self.defaults;
        let mut body = json!({"title": "From an editor"});
        if let Some(url) = &d.repo {
            body["repository"] = json!({"url": url, "branch": d.branch});
        }
        for (field, value) in [("agent", &d.agent), ("llm_profile", &d.llm_profile), ("confirmation_policy", &d.confirmation_policy)] {
            if let Some(v) = value {
                body[field] = json!(v);
            }
        }
        let task = self.client.post("/conversations", body).await.map_err(failed)?;
        let task_id = task["id"].as_str().unwrap_or_default().to_owned();
        loop {
            let task = self.client.get(&format!("/start-tasks/{task_id}")).await.map_err(failed)?;
            match task["status"].as_str() {
                Some("READY") => return Ok(json!({"sessionId": task["conversation_id"]})),
                Some("ERROR") => return Err(failed(format!("the conversation could not start: {}", task["detail"]))),
                _ => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            }
        }
    }

    /// Replays a conversation's events as updates, then answers.
    async fn load_session(&self, params: &Value) -> Answer {
        let session = params.get("sessionId").and_then(Value::as_str).ok_or((-32602, "`sessionId` is required".to_owned()))?;
        self.editor().opened(session, params.get("cwd").and_then(Value::as_str));
        let mut after = 0;
        loop {
            let page = self.client.get(&format!("/conversations/{session}/events?after_seq={after}&limit=1000")).await.map_err(failed)?;
            let items = page["items"].as_array().cloned().unwrap_or_default();
            for event in &items {
                for update in updates_of(event, false) {
                    self.update(session, update);
                }
            }
            match items.last().and_then(|e| e["seq"].as_u64()) {
                Some(seq) if page["has_more"].as_bool() == Some(true) => after = seq,
                _ => return Ok(Value::Null),
            }
        }
    }

    /// Sends the prompt as a message and streams the run it starts until it ends.
    async fn prompt(&self, params: &Value) -> Answer {
        let session = params.get("sessionId").and_then(Value::as_str).ok_or((-32602, "`sessionId` is required".to_owned()))?.to_owned();
        let text = prompt_text(params.get("prompt"), &|uri| self.editor().relative(&session, uri));
        if text.trim().is_empty() {
            return Err((-32602, "the prompt has no text".into()));
        }
        self.bring_files(&session, params.get("prompt")).await?;
        let conversation = self.client.get(&format!("/conversations/{session}")).await.map_err(failed)?;
        let after = conversation["last_event_seq"].as_u64().unwrap_or(0);
        // Following starts before the message goes, so nothing of the run is missed.
        let mut socket = self.client.websocket(&format!("/conversations/{session}/events/ws?after_seq={after}")).await.map_err(failed)?;
        self.client.post(&format!("/conversations/{session}/messages"), json!({"text": text})).await.map_err(failed)?;
        let mut streamed = String::new();
        let mut sent_user = false;
        // Actions without a result yet: what a confirmation is about.
        let mut open: Vec<Value> = Vec::new();
        while let Some(frame) = socket.next().await {
            let Ok(Message::Text(frame)) = frame else { continue };
            let Ok(event) = serde_json::from_str::<Value>(&frame) else { continue };
            if event["kind"] == "answer_delta" {
                // The whole text so far, or a piece after what was shown.
                let piece = event["text"].as_str().unwrap_or_default();
                let fresh = if event["from"].as_u64() == Some(0) { piece.strip_prefix(streamed.as_str()).unwrap_or(piece) } else { piece };
                if !fresh.is_empty() {
                    streamed.push_str(fresh);
                    self.update(&session, json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": fresh}}));
                }
                continue;
            }
            if event["kind"] == "user_message" && !sent_user {
                sent_user = true;
                continue;
            }
            if event["kind"] == "agent_message" && !streamed.is_empty() {
                streamed.clear();
                continue;
            }
            match event["kind"].as_str() {
                Some("action") => open.push(event.clone()),
                Some("observation") => {
                    let edited = open.iter().any(|a| a["tool_call_id"] == event["tool_call_id"] && edits(a));
                    open.retain(|a| a["tool_call_id"] != event["tool_call_id"]);
                    if edited {
                        self.send_changes(&session).await;
                    }
                }
                Some("action_rejected") => open.retain(|a| a["tool_call_id"] != event["tool_call_id"]),
                _ => {}
            }
            for update in updates_of(&event, true) {
                self.update(&session, update);
            }
            if event["kind"] != "execution_status" {
                continue;
            }
            let status = event["status"].as_str().unwrap_or_default();
            if matches!(status, "finished" | "idle" | "paused" | "error" | "stuck") {
                // What commands changed too.
                self.send_changes(&session).await;
            }
            match status {
                "finished" => return Ok(json!({"stopReason": "end_turn"})),
                "idle" if event["reason"] == "interrupted by the user" => return Ok(json!({"stopReason": "cancelled"})),
                "idle" => return Ok(json!({"stopReason": "end_turn"})),
                "paused" => return Ok(json!({"stopReason": "cancelled"})),
                "error" | "stuck" => return Err(failed(event["reason"].as_str().unwrap_or("the run failed"))),
                "waiting_for_confirmation" => self.permission(&session, open.last()).await?,
                _ => {}
            }
        }
        Err(failed("the event stream closed"))
    }

    /// Asks the editor about the actions that wait, and confirms or rejects them as it says.
    async fn permission(&self, session: &str, waiting: Option<&Value>) -> std::result::Result<(), (i64, String)> {
        let call = tool_call(waiting.unwrap_or(&Value::Null));
        let options = json!([
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
        ]);
        let answer = self.ask("session/request_permission", json!({"sessionId": session, "toolCall": call, "options": options})).await;
        let chosen = answer.as_ref().and_then(|a| a.pointer("/result/outcome/optionId")).and_then(Value::as_str);
        if chosen == Some("allow") {
            self.client.post(&format!("/conversations/{session}/confirm"), json!({})).await.map_err(failed)?;
        } else {
            let body = json!({"reason": "The user refused it in their editor."});
            self.client.post(&format!("/conversations/{session}/reject"), body).await.map_err(failed)?;
        }
        Ok(())
    }
}

/// Whether an action changes files (a file editor's write, a patch).
fn edits(action: &Value) -> bool {
    match action["tool"].as_str() {
        Some("file_editor") => !matches!(action["arguments"]["command"].as_str(), Some("view")),
        Some("apply_patch") => true,
        _ => false,
    }
}

/// The text of a prompt's content blocks (text, and embedded resources' text); `relative` names
/// a file of the editor's folder by its path in the workspace.
fn prompt_text(prompt: Option<&Value>, relative: &dyn Fn(&str) -> Option<String>) -> String {
    let mut parts = Vec::new();
    for block in prompt.and_then(Value::as_array).into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => parts.push(block["text"].as_str().unwrap_or_default().to_owned()),
            Some("resource") => {
                let r = &block["resource"];
                parts.push(format!(
                    "<file uri=\"{}\">\n{}\n</file>",
                    r["uri"].as_str().unwrap_or_default(),
                    r["text"].as_str().unwrap_or_default()
                ));
            }
            Some("resource_link") => {
                let uri = block["uri"].as_str().unwrap_or_default();
                parts.push(match relative(uri) {
                    Some(rel) => format!("(see {rel}, in the workspace as the editor holds it)"),
                    None => format!("(see {uri})"),
                });
            }
            _ => {}
        }
    }
    parts.join("\n\n")
}

/// An action as an ACP tool call.
fn tool_call(action: &Value) -> Value {
    let tool = action["tool"].as_str().unwrap_or_default();
    let args = &action["arguments"];
    let (kind, title) = match tool {
        "terminal" => ("execute", args["command"].as_str().unwrap_or("a command").to_owned()),
        "file_editor" => {
            let kind = if args["command"] == "view" { "read" } else { "edit" };
            (kind, format!("{} {}", args["command"].as_str().unwrap_or_default(), args["path"].as_str().unwrap_or_default()))
        }
        "apply_patch" => ("edit", "apply a patch".into()),
        "glob" | "grep" => ("search", format!("{tool} {}", args["pattern"].as_str().unwrap_or_default())),
        "think" => ("think", "think".into()),
        "finish" => ("other", "finish".into()),
        t if t.starts_with("browser") => ("fetch", t.to_owned()),
        t => ("other", t.to_owned()),
    };
    json!({"toolCallId": action["tool_call_id"], "title": title, "kind": kind, "status": "pending", "rawInput": args})
}

/// The updates an event stands for (`live`: as it happens; else a replay, user messages too).
fn updates_of(event: &Value, live: bool) -> Vec<Value> {
    let text = |t: &Value| json!({"type": "text", "text": t.as_str().unwrap_or_default()});
    match event["kind"].as_str().unwrap_or_default() {
        "user_message" if !live => vec![json!({"sessionUpdate": "user_message_chunk", "content": text(&event["text"])})],
        "agent_message" => vec![json!({"sessionUpdate": "agent_message_chunk", "content": text(&event["text"])})],
        "thinking" => {
            let thought: Vec<&str> = event["blocks"].as_array().into_iter().flatten().filter_map(|b| b["text"].as_str()).collect();
            vec![json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": thought.join("\n\n")}})]
        }
        "action" if event["tool"] != "finish" => {
            let mut call = tool_call(event);
            call["sessionUpdate"] = "tool_call".into();
            call["status"] = "in_progress".into();
            vec![call]
        }
        "observation" if event["tool"] != "finish" => {
            let status = if event["is_error"] == true { "failed" } else { "completed" };
            vec![json!({"sessionUpdate": "tool_call_update", "toolCallId": event["tool_call_id"], "status": status,
                "content": [{"type": "content", "content": text(&event["content"])}], "rawOutput": event["content"]})]
        }
        "action_rejected" => vec![json!({"sessionUpdate": "tool_call_update", "toolCallId": event["tool_call_id"], "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": format!("Rejected: {}", event["reason"].as_str().unwrap_or_default())}}]})],
        "task_list" => {
            let entries: Vec<Value> = event["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    let status = match t["status"].as_str() {
                        Some("done") => "completed",
                        Some("in_progress") => "in_progress",
                        _ => "pending",
                    };
                    json!({"content": t["title"], "priority": "medium", "status": status})
                })
                .collect();
            vec![json!({"sessionUpdate": "plan", "entries": entries})]
        }
        "agent_error" => vec![json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text",
            "text": format!("\n[{}] {}", event["code"].as_str().unwrap_or_default(), event["message"].as_str().unwrap_or_default())}})],
        _ => Vec::new(),
    }
}
