//! Third-party agents (Claude Code, Codex, Gemini CLI, OpenCode) as a conversation's agent. The
//! agent runs in the sandbox (the executor's `GET /acp/stdio`); this runner is its ACP client:
//! `initialize`, `session/new` (or `session/load` when its process was started anew),
//! `session/prompt` with the user's messages, `session/cancel` on an interrupt. Its updates
//! become events ([`updates`]), its permission requests the conversation's confirmations (the
//! policy applies; Confirm and Reject answer them), its file reads and writes go to the
//! executor, its terminals are the executor's shell sessions ([`terminal`]), and its LLM calls come back out through the relay ([`llm`]) to the profile's
//! server with the real key, as do its calls of the conversation's MCP tools ([`mcp`]), offered
//! in `session/new` to an agent that takes HTTP MCP servers.
//!
//! The process outlives runs: a run that ends waiting for a confirmation, or a runner that
//! dies mid-turn, leaves it where it is; the next run attaches to it and is handed the lines
//! nobody dealt with and the id of the prompt still running. Request ids say what they were
//! for (`halyard-prompt-<seq>`: the prompt with the user's messages up to `seq`).

pub mod llm;
pub mod mcp;
pub mod terminal;
pub mod updates;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{SinkExt, StreamExt};
use halyard_platform::executor_client::{ExecutorClient, ExecutorSocket};
use halyard_protocol::agents::{self, CustomAgents, Launch};
use halyard_protocol::event::{EventBody, EventSource, ExecutionStatus};
use halyard_protocol::executor::{AcpFrame, AcpSpawn};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::ctx::Ctx;
use crate::run_loop::{McpConfigs, Run, RunOutcome};
use updates::{Step, Updates};

/// The ACP version this client speaks.
const PROTOCOL_VERSION: u64 = 1;
const PROMPT: &str = "halyard-prompt-";

/// What came from the agent's socket.
enum Incoming {
    Line(u64, Value),
    Exited(String),
    Closed,
}

/// One run's connection to the agent.
struct Conn {
    socket: ExecutorSocket,
    session: String,
}

impl Conn {
    async fn send(&mut self, message: &Value) -> Result<(), String> {
        let frame = AcpFrame::Send { line: message.to_string() };
        self.frame(&frame).await
    }

    async fn ack(&mut self, seq: u64) -> Result<(), String> {
        self.frame(&AcpFrame::Ack { seq }).await
    }

    async fn frame(&mut self, frame: &AcpFrame) -> Result<(), String> {
        let text = serde_json::to_string(frame).map_err(|e| e.to_string())?;
        self.socket.send(Message::Text(text.into())).await.map_err(|e| format!("the agent's socket: {e}"))
    }

    async fn next(&mut self) -> Incoming {
        while let Some(message) = self.socket.next().await {
            let Ok(Message::Text(text)) = message else {
                match message {
                    Ok(Message::Close(frame)) => return Incoming::Exited(frame.map(|f| f.reason.to_string()).unwrap_or_default()),
                    Err(_) => return Incoming::Closed,
                    _ => continue,
                }
            };
            match serde_json::from_str::<AcpFrame>(&text) {
                Ok(AcpFrame::Line { seq, line }) => match serde_json::from_str(&line) {
                    Ok(v) => return Incoming::Line(seq, v),
                    // Not JSON-RPC: the agent's noise on standard output, dealt with.
                    Err(_) => {
                        let _ = self.ack(seq).await;
                    }
                },
                Ok(AcpFrame::Exited { message }) => return Incoming::Exited(message),
                _ => {}
            }
        }
        Incoming::Closed
    }

    /// Sends request `id` and waits for its result; notifications meanwhile are dealt with
    /// (a session being loaded replays its history as updates: the log has it already).
    async fn request(&mut self, id: &str, method: &str, params: Value) -> Result<Value, String> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        loop {
            match self.next().await {
                Incoming::Line(seq, v) => {
                    let _ = self.ack(seq).await;
                    if v.get("id").and_then(Value::as_str) == Some(id) && v.get("method").is_none() {
                        if let Some(e) = v.get("error") {
                            // (Its details, where the agent gives them: "Internal error" alone says little.)
                            let message = e.get("message").and_then(Value::as_str).unwrap_or("an error");
                            return Err(match e.pointer("/data/details").and_then(Value::as_str) {
                                Some(details) => format!("{message}: {details}"),
                                None => message.to_owned(),
                            });
                        }
                        return Ok(v.get("result").cloned().unwrap_or(Value::Null));
                    }
                    if let (Some(rid), Some(_)) = (v.get("id"), v.get("method")) {
                        let answer = json!({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not now"}});
                        self.send(&answer).await?;
                    }
                }
                Incoming::Exited(why) => return Err(format!("the agent ended: {why}")),
                Incoming::Closed => return Err("the agent's socket closed".into()),
            }
        }
    }
}

/// Whether a conversation's agent is a third-party one (Halyard's own when absent).
pub fn is_third_party(agent: Option<&str>) -> bool {
    agent.is_some_and(|a| a != halyard_protocol::agents::HALYARD)
}

/// How to start agent `name` with the run's relay `token` and the profile's `model`: a kind the
/// deployment installs, or one its administrators or the conversation's organization registered
/// (read as the run starts: a change applies to the next process).
async fn launch(ctx: &Ctx, name: &str, org: Option<&str>, token: &str, model: &str) -> Result<Launch, String> {
    if let Some(kind) = agents::kind(name) {
        return Ok(kind.launch(&ctx.config.agent.agents_dir, token, model));
    }
    let (key, short) =
        agents::registration(name, org).map_err(|o| format!("agent {name} is organization {o}'s, for its conversations only"))?;
    let registered: CustomAgents = match ctx.user_kv.get(&key).await {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| format!("{key}: {e}"))?,
        Ok(None) => CustomAgents::default(),
        Err(e) => return Err(format!("cannot read the registered agents: {e}")),
    };
    let agent = registered.agents.get(short).ok_or_else(|| format!("agent {name} is no longer registered"))?;
    Ok(agent.launch(name, token, model))
}

/// Drives one run of a third-party agent: sets up its LLM relay and git proxy, attaches to its
/// process (starting it, and its session, if there is none), sends the user's new messages, and
/// records what it does until the turn ends, a permission waits, or the run is stopped.
pub(crate) async fn drive(run: &Run, exec: &ExecutorClient, name: &str, mcp_configs: Option<Result<McpConfigs, String>>) -> RunOutcome {
    let (conversation, workspace, org, owner) = {
        let log = run.log.lock().await;
        let started = log.history.started.as_ref();
        let owner = started.map(|s| s.owner.clone());
        (log.conversation(), started.map(|s| s.workspace.clone()).unwrap_or_default(), started.and_then(|s| s.org.clone()), owner)
    };
    // One token for the process's life (a process outlives runs, its environment with it).
    let token = halyard_platform::keys::sign(&run.ctx.config.secret, "acp-llm-relay", conversation.to_string().as_bytes());
    let kind = match launch(&run.ctx, name, org.as_deref(), &token, run.llm.primary().model()).await {
        Ok(kind) => kind,
        Err(e) => return run.fail("agent_unavailable", format!("The conversation's agent cannot be started: {e}.")).await,
    };
    let wire = run.llm.primary().wire().to_owned();
    if !kind.wires.contains(&wire) {
        let message = format!(
            "{} speaks {}; the conversation's LLM profile speaks `{wire}`: choose a profile whose provider is {}",
            kind.title,
            kind.wires.join(" or "),
            kind.wires.join(" or ")
        );
        return run.fail("agent_profile_mismatch", message).await;
    }
    // The conversation's MCP servers, connected here (at once with the git proxy's setting up)
    // and offered to the agent through the relay.
    // (A third-party agent brings its own plugins; the conversation's are Halyard's agent's.)
    let none = crate::plugins::Installed::default();
    let (hub, _git) = tokio::join!(run.mcp(exec, mcp_configs, &none), run.git_proxy(exec));
    let Some(hub) = hub else { return RunOutcome::Failed };
    let timeout = std::time::Duration::from_secs_f64(run.ctx.config.agent.command_timeout_secs.max(1.0));
    let mcp = hub.offers_any().then(|| mcp::Server::new(hub, timeout));
    // The owner's subscription login for this kind, where they handed it one.
    let login = match (agents::kind(name).and_then(|k| k.login), &owner) {
        (Some(_), Some(owner)) => match crate::user::agent_login(&run.ctx, owner, name).await {
            Ok(login) => login,
            Err(e) => return run.fail("agent_unavailable", format!("{} cannot be started: {e}", kind.title)).await,
        },
        _ => None,
    };
    let spent = Arc::new(AtomicBool::new(false));
    let relay = llm::Relay {
        ctx: run.ctx.clone(),
        log: run.log.clone(),
        trace: run.trace.clone(),
        chain: run.llm.clone(),
        token: token.clone(),
        spent: spent.clone(),
        mcp: mcp.clone(),
        login,
    };
    let _relay = match halyard_platform::relay::serve(exec, "/llm/relay", Vec::new(), relay.handler()).await {
        Ok(serving) => serving,
        Err(e) => return run.fail("sandbox_unavailable", format!("The agent's LLM relay could not be set up: {e}")).await,
    };
    let mut env = run.env.clone();
    env.extend(kind.env.clone());
    let spawn = AcpSpawn { name: conversation.to_string(), command: kind.command.clone(), env };
    let (mut conn, fresh, unanswered, relay_base) = match attach(exec, &spawn).await {
        Ok(c) => c,
        Err(e) => return run.fail("agent_unavailable", format!("{} could not be started: {e}", kind.title)).await,
    };
    let known = run.log.lock().await.history.agent_session.clone();
    if let Some(id) = known.clone().filter(|_| !fresh) {
        conn.session = id;
    } else {
        // Halyard's MCP server, for an agent that takes HTTP ones.
        let offered = mcp.and(relay_base).map(|base| mcp::Server::descriptor(&base, &token));
        match open_session(&mut conn, &workspace, known, &kind, offered).await {
            Ok(Some(record)) => {
                if !run.append(EventSource::System, record).await {
                    return RunOutcome::Failed;
                }
            }
            Ok(None) => {}
            Err(e) => return run.fail("agent_unavailable", format!("{} could not open its session: {e}", kind.title)).await,
        }
    }
    let running = unanswered.iter().filter_map(Value::as_str).find(|id| id.starts_with(PROMPT)).map(str::to_owned);
    let prompt_id = match running {
        Some(id) => id,
        None => match send_prompt(run, &mut conn).await {
            Ok(Some(id)) => id,
            Ok(None) => {
                run.status(ExecutionStatus::Idle, None).await;
                return RunOutcome::AwaitingUser;
            }
            Err(e) => return run.fail("agent_unavailable", e).await,
        },
    };
    let (updates, deltas, interrupted) = (Updates::default(), None, false);
    let terminals = terminal::Terminals::default();
    let mut turn = Turn { run, exec, conn, updates, prompt_id, workspace, deltas, interrupted, spent, terminals };
    turn.follow().await
}

/// Attaches to the conversation's agent process: the connection, whether the process was
/// started for it, its requests not answered yet, and the relay's base URL in the sandbox.
async fn attach(exec: &ExecutorClient, spawn: &AcpSpawn) -> Result<(Conn, bool, Vec<Value>, Option<String>), String> {
    let mut socket = exec.socket("/acp/stdio").await.map_err(|e| e.to_string())?;
    let first = serde_json::to_string(spawn).map_err(|e| e.to_string())?;
    socket.send(Message::Text(first.into())).await.map_err(|e| e.to_string())?;
    let mut conn = Conn { socket, session: String::new() };
    loop {
        let Some(message) = conn.socket.next().await else { return Err("the sandbox closed the socket".into()) };
        match message.map_err(|e| e.to_string())? {
            Message::Text(text) => {
                if let Ok(AcpFrame::Attached { fresh, unanswered, relay }) = serde_json::from_str(&text) {
                    return Ok((conn, fresh, unanswered, relay));
                }
            }
            Message::Close(frame) => return Err(frame.map(|f| f.reason.to_string()).unwrap_or_else(|| "refused".into())),
            _ => {}
        }
    }
}

/// `initialize`, then the session: the log's own loaded again where the agent can, else a new
/// one, whose `agent_session` event is handed back to be appended. `mcp`: Halyard's MCP server,
/// named to an agent that takes HTTP servers.
async fn open_session(
    conn: &mut Conn,
    workspace: &str,
    known: Option<String>,
    kind: &Launch,
    mcp: Option<Value>,
) -> Result<Option<EventBody>, String> {
    let capabilities = json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true});
    let init = conn
        .request(
            "halyard-init",
            "initialize",
            json!({"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": capabilities,
            "clientInfo": {"name": "halyard", "version": env!("CARGO_PKG_VERSION")}}),
        )
        .await?;
    // An agent that wants its way of reading the key chosen (Gemini CLI's `gemini-api-key`).
    if let Some(method) = kind.auth.as_deref() {
        let offered = init["authMethods"].as_array().into_iter().flatten().any(|m| m["id"] == method);
        if offered {
            conn.request("halyard-auth", "authenticate", json!({"methodId": method})).await?;
        }
    }
    let loads = init.pointer("/agentCapabilities/loadSession").and_then(Value::as_bool).unwrap_or(false);
    let takes_http = init.pointer("/agentCapabilities/mcpCapabilities/http").and_then(Value::as_bool).unwrap_or(false);
    if mcp.is_some() && !takes_http {
        tracing::warn!(agent = %kind.name, "the agent takes no HTTP MCP server: the conversation's MCP tools are not offered to it");
    }
    let servers: Vec<Value> = mcp.filter(|_| takes_http).into_iter().collect();
    if let Some(id) = known.filter(|_| loads) {
        let params = json!({"sessionId": id, "cwd": workspace, "mcpServers": servers});
        match conn.request("halyard-load", "session/load", params).await {
            Ok(_) => {
                conn.session = id;
                return Ok(None);
            }
            // A new session, then: the agent says why in the log.
            Err(e) => tracing::warn!(agent = %kind.name, session = %id, error = %e, "the agent could not load its session"),
        }
    }
    let created = conn.request("halyard-new", "session/new", json!({"cwd": workspace, "mcpServers": servers})).await?;
    let id = created.get("sessionId").and_then(Value::as_str).ok_or("session/new answered no sessionId")?.to_owned();
    conn.session = id.clone();
    Ok(Some(EventBody::AgentSession { agent: kind.name.clone(), session_id: id, agent_info: init.get("agentInfo").cloned() }))
}

/// Sends the user's messages since the last turn as one prompt; its id (`None`: nothing new).
async fn send_prompt(run: &Run, conn: &mut Conn) -> Result<Option<String>, String> {
    let (texts, upto) = {
        let log = run.log.lock().await;
        let h = &log.history;
        let texts: Vec<(u64, String)> = h
            .entries
            .iter()
            .filter(|e| e.seq > h.prompted_upto && e.msg.role == "user")
            .filter_map(|e| Some((e.seq, e.msg.content.clone()?)))
            .collect();
        (texts, h.last_seq)
    };
    let Some(last) = texts.last().map(|(seq, _)| *seq) else { return Ok(None) };
    let prompt: Vec<Value> = texts.iter().map(|(_, t)| json!({"type": "text", "text": t})).collect();
    let id = format!("{PROMPT}{last}");
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt", "params": {"sessionId": conn.session, "prompt": prompt}});
    conn.send(&message).await?;
    run.read_upto.store(upto, Ordering::SeqCst);
    Ok(Some(id))
}

/// One turn being followed.
struct Turn<'a> {
    run: &'a Run,
    exec: &'a ExecutorClient,
    conn: Conn,
    updates: Updates,
    prompt_id: String,
    workspace: String,
    /// The answer's deltas while the agent writes one.
    deltas: Option<(halyard_platform::llm::Deltas, tokio::task::JoinHandle<()>)>,
    interrupted: bool,
    /// A budget refused a call: the turn is cancelled.
    spent: Arc<AtomicBool>,
    /// The terminals the agent made (ACP's `terminal/*`).
    terminals: terminal::Terminals,
}

mod turn;
