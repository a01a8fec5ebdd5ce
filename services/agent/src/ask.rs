//! Answers questions about a conversation (`POST /conversations/{id}/ask`, OpenHands'
//! `ask_agent`): one LLM call over the conversation's history as a transcript, with no tools.
//! Nothing is appended to the log and a live run goes on undisturbed; the question comes as a
//! core NATS request on `halyard.ask.<id>`, answered by whichever agent runner of the queue
//! group takes it (it holds the LLM key; the gateway does not). The same way, a user's MCP server
//! is tested for the Settings page (`halyard.mcptest`): the runners hold the MCP client.

use std::sync::Arc;

use futures::StreamExt;
use halyard_platform::bus;
use halyard_platform::llm::ChatMessage;
use halyard_protocol::command::{AskAnswer, AskRequest, McpTestAnswer, McpTestRequest};
use halyard_protocol::event::{ConversationEvent, EventBody};
use halyard_protocol::{Envelope, subjects};

use crate::ctx::Ctx;

/// The transcript keeps at most this many characters, the most recent ones.
const MAX_TRANSCRIPT_CHARS: usize = 100_000;

/// Answers questions until the subscription ends.
pub async fn serve(ctx: Arc<Ctx>, shutdown: halyard_platform::Shutdown) {
    let undecodable =
        |e: String| AskAnswer { code: Some("bad_request".into()), message: Some(format!("undecodable question: {e}")), answer: None };
    answer_requests(ctx, shutdown, subjects::ALL_ASKS, subjects::ASK_QUEUE, "questions", undecodable, |ctx, q: AskRequest| async move {
        answer(&ctx, q).await
    })
    .await
}

/// Answers MCP server tests (`halyard.mcptest`) until the subscription ends.
pub async fn serve_mcp_tests(ctx: Arc<Ctx>, shutdown: halyard_platform::Shutdown) {
    let undecodable = |e: String| McpTestAnswer { ok: false, tools: Vec::new(), error: Some(format!("undecodable request: {e}")) };
    answer_requests(
        ctx,
        shutdown,
        subjects::MCP_TEST,
        subjects::MCP_TEST_QUEUE,
        "MCP server tests",
        undecodable,
        |ctx, r: McpTestRequest| async move { mcp_test(&ctx, &r.owner, &r.server).await },
    )
    .await
}

/// Serves core NATS requests on `subject` in the runners' `queue` group: each one decoded,
/// answered by `handle` on a task of its own (or by `undecodable`), the answer sent to the
/// asker's inbox.
async fn answer_requests<Q, A, F, Fut>(
    ctx: Arc<Ctx>,
    mut shutdown: halyard_platform::Shutdown,
    subject: &str,
    queue: &str,
    what: &'static str,
    undecodable: fn(String) -> A,
    handle: F,
) where
    Q: serde::de::DeserializeOwned + Send + 'static,
    A: halyard_protocol::envelope::Payload + Send + 'static,
    F: Fn(Arc<Ctx>, Q) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = A> + Send,
{
    let mut requests = match ctx.nats.queue_subscribe(subject.to_owned(), queue.to_owned()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, what, "cannot subscribe; these requests will time out");
            return;
        }
    };
    loop {
        let msg = tokio::select! {
            _ = shutdown.wait() => return,
            m = requests.next() => match m { Some(m) => m, None => return },
        };
        let Some(reply) = msg.reply.clone() else { continue };
        let (ctx, handle) = (ctx.clone(), handle.clone());
        tokio::spawn(async move {
            let answer = match halyard_protocol::decode::<Q>(&msg.payload) {
                Ok(env) => handle(ctx.clone(), env.payload).await,
                Err(e) => undecodable(e.to_string()),
            };
            match halyard_protocol::encode(&Envelope::new(answer, halyard_platform::now_ms())) {
                Ok(bytes) => {
                    if let Err(e) = ctx.nats.publish(reply, bytes.into()).await {
                        tracing::warn!(error = %e, what, "cannot send an answer");
                    }
                }
                Err(e) => tracing::error!(error = %e, what, "cannot encode an answer"),
            }
        });
    }
}

async fn answer(ctx: &Ctx, q: AskRequest) -> AskAnswer {
    let events = match bus::read_events(&ctx.js, q.conversation_id, 0).await {
        Ok(e) => e,
        Err(e) => return AskAnswer { code: Some("unavailable".into()), message: Some(e.to_string()), answer: None },
    };
    let messages = vec![
        ChatMessage::text(
            "system",
            "You answer questions about a conversation between a user and Halyard's coding agent, from its transcript \
             below. Answer briefly and only from the transcript; say so if it does not tell. You cannot act.",
        ),
        ChatMessage::text("user", format!("<transcript>\n{}\n</transcript>\n\nQuestion: {}", transcript(&events), q.question)),
    ];
    match ctx.llm.complete(&messages, &[]).await {
        Ok(c) => AskAnswer { answer: Some(c.content.unwrap_or_default()), ..Default::default() },
        Err(e) => AskAnswer { code: Some(e.code().into()), message: Some(format!("The LLM call failed: {e}")), answer: None },
    }
}

/// The log as text, one line per message, action and (abridged) observation; the most recent
/// part if it is long.
fn transcript(events: &[ConversationEvent]) -> String {
    let mut out = String::new();
    for e in events {
        let line = match &e.body {
            EventBody::UserMessage { text, .. } => format!("USER: {text}"),
            EventBody::AgentMessage { text } => format!("AGENT: {text}"),
            EventBody::Action { tool, arguments, thought, .. } => {
                let thought = thought.as_deref().map(|t| format!(" ({t})")).unwrap_or_default();
                format!("AGENT ACTION{thought}: {tool} {arguments}")
            }
            EventBody::Observation { tool, content, exit_code, .. } => {
                let content: String = content.chars().take(2000).collect();
                format!("RESULT of {tool} (exit code {}): {content}", exit_code.map_or("-".into(), |c| c.to_string()))
            }
            EventBody::AgentError { code, message } => format!("ERROR {code}: {message}"),
            EventBody::NetworkBlocked { message, .. } => format!("NETWORK REFUSED: {message}"),
            EventBody::AgentSession { .. }
            | EventBody::AgentUpdate { .. }
            | EventBody::NetworkUsed { .. }
            | EventBody::HooksConsentRequired { .. }
            | EventBody::McpAuthRequired { .. }
            | EventBody::HooksConsent { .. } => continue,
            EventBody::ExecutionStatus { status, reason } => {
                format!("STATUS: {}{}", status.as_str(), reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())
            }
            EventBody::Title { title, .. } => format!("TITLE: {title}"),
            EventBody::ActionRejected { tool, reason, .. } => format!("USER REJECTED the {tool} action: {reason}"),
            EventBody::ConfirmationPolicy { policy } => format!("CONFIRMATION POLICY: {}", policy.as_str()),
            EventBody::Condensation { summary, .. } => format!("SUMMARY of the part above: {summary}"),
            EventBody::SkillActivated { name, .. } => format!("SKILL ACTIVATED: {name}"),
            EventBody::LlmProfile { model, .. } => format!("LLM SWITCHED to {model}"),
            EventBody::WorkspaceRestored { at_seq, .. } => format!("WORKSPACE RESTORED to how it was at event {at_seq}"),
            EventBody::Hook { event, command, exit_code, blocked, .. } => {
                let code = exit_code.map_or("-".into(), |c| c.to_string());
                format!("HOOK {event} `{command}` exit code {code}{}", if *blocked { ", blocked" } else { "" })
            }
            EventBody::PullRequestOpened { number, url, .. } => format!("PULL REQUEST OPENED: #{number} {url}"),
            EventBody::Result { result } => format!("RESULT: {result}"),
            EventBody::Verification { attempt, check, subject, passed, score, .. } => {
                format!("CHECK {attempt} {check} `{subject}`: {} (score {score:.2})", if *passed { "passed" } else { "did not pass" })
            }
            EventBody::SubConversationsStarted { children, .. } => {
                let titles: Vec<&str> = children.iter().map(|c| c.title.as_str()).collect();
                format!("HELPERS STARTED: {}", titles.join("; "))
            }
            EventBody::SubConversationEnded { status, message, .. } => format!("HELPER ENDED ({status}): {message}"),
            EventBody::TaskList { items } => {
                let tasks: Vec<String> = items.iter().map(|t| format!("[{}] {}", t.status.as_str(), t.title)).collect();
                format!("PLAN: {}", tasks.join("; "))
            }
            EventBody::McpServers { servers } => {
                let each: Vec<String> = servers
                    .iter()
                    .map(|s| match &s.error {
                        Some(e) => format!("{} unavailable ({e})", s.name),
                        None => format!("{} ({} tools)", s.name, s.tools.len()),
                    })
                    .collect();
                format!("MCP SERVERS: {}", each.join(", "))
            }
            EventBody::Thinking { blocks } => {
                format!("AGENT THOUGHT: {}", blocks.iter().map(|b| b.text.as_str()).collect::<Vec<_>>().join(" "))
            }
            EventBody::ConversationStarted { .. }
            | EventBody::LlmCall { .. }
            | EventBody::TerminalOpened { .. }
            | EventBody::BudgetAlert { .. } => {
                continue;
            }
        };
        out.push_str(&line);
        out.push('\n');
    }
    if out.len() > MAX_TRANSCRIPT_CHARS {
        let mut cut = out.len() - MAX_TRANSCRIPT_CHARS;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = format!("[...earlier part left out...]\n{}", &out[cut..]);
    }
    out
}

/// Connects once to `owner`'s server `name` and lists its tools, for the Settings page's Test
/// (`halyard.mcptest`). Only an `http` server can be reached from here: a `stdio` one runs in a
/// conversation's sandbox and is checked when a conversation starts.
async fn mcp_test(ctx: &Ctx, owner: &halyard_protocol::UserId, name: &str) -> McpTestAnswer {
    let fail = |e: String| McpTestAnswer { ok: false, tools: Vec::new(), error: Some(e) };
    let configs = match crate::tools::mcp::configs(ctx, owner).await {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let Some(config) = configs.get(name) else {
        return fail(format!("you have no enabled MCP server `{name}`"));
    };
    let halyard_protocol::user::McpServerConfig::Http { url, .. } = config else {
        return fail(
            "a stdio server runs in a conversation's sandbox: it is checked when a conversation starts, and the \
             conversation's mcp_servers event says what it offers"
                .into(),
        );
    };
    let trusted = ctx.config.mcp.servers.get(name) == Some(config);
    let allow = ctx.config.mcp.allow.as_slice();
    if !trusted {
        if let Err(e) = halyard_platform::net::check_destination(url, allow).await {
            return fail(format!("{url}: {e}"));
        }
    }
    let secrets = match crate::user::secrets(ctx, owner, None).await {
        Ok(s) => s.env,
        Err(e) => return fail(e),
    };
    // An http server needs no sandbox: the executor client is never used.
    let no_sandbox = halyard_platform::executor_client::ExecutorClient::new(ctx.http.clone(), "http://127.0.0.1:9", String::new());
    // With the owner's sign-in to it, if they signed in.
    let one = std::collections::BTreeMap::from([(name.to_owned(), config.clone())]);
    let sign_ins = crate::tools::mcp::SignIns::read(ctx, owner, None, &one, &ctx.config.mcp.servers).await;
    let signed_in = sign_ins.store(name, url);
    match tokio::time::timeout(
        crate::tools::mcp::CONNECT_TIMEOUT,
        crate::tools::mcp::connect_one(config, &secrets, &no_sandbox, (!trusted).then_some(allow), signed_in),
    )
    .await
    {
        Ok(Ok((client, tools))) => {
            let tools = tools.iter().map(|t| t.name.to_string()).collect();
            let _ = client.cancel().await;
            McpTestAnswer { ok: true, tools, error: None }
        }
        Ok(Err(e)) => fail(e.why),
        Err(_) => fail(format!("it did not answer within {} s", crate::tools::mcp::CONNECT_TIMEOUT.as_secs())),
    }
}
