//! `GET /conversations/{id}/export`: a conversation's whole log as a download, `jsonl` (every
//! event as the API serves it, one per line, in seq order) or `md` (a transcript a person
//! reads). Streamed page by page from the log, never built in memory; the events are the
//! log's, masked when they were appended like everything the API serves.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use halyard_protocol::event::{ConversationEvent, EventBody};
use serde::Deserialize;

use crate::auth::User;
use crate::auth::access::readable;
use crate::http::error::ApiError;
use crate::state::AppState;

/// Events read per page of the stream.
const PAGE: usize = 500;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// `jsonl` (default: every event, masked, one per line) or `md` (a transcript).
    #[serde(default)]
    #[param(pattern = "^(jsonl|md)$")]
    pub format: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Jsonl,
    Markdown,
}

/// The whole conversation as a download, streamed: `jsonl` (every event in seq order, masked)
/// or `md` (a transcript a person reads).
#[utoipa::path(get, path = "/conversations/{id}/export", tag = "conversations", params(("id" = String, Path, format = Uuid), ExportQuery),
    responses((status = 200, description = "the conversation", content(
        (String = "application/x-ndjson"),
        (String = "text/markdown"),
    )), crate::http::api_doc::Refusals))]
pub async fn export(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<ExportQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let format = match q.format.as_deref().unwrap_or("jsonl") {
        "jsonl" => Format::Jsonl,
        "md" => Format::Markdown,
        other => return Err(ApiError::bad_request("invalid_query", format!("`format` must be jsonl or md, not `{other}`"))),
    };
    let (id, view) = readable(&state, &user, &id)?;
    let title = view.title.clone().unwrap_or_else(|| "Untitled conversation".into());
    let head = match format {
        Format::Markdown => format!("# {}\n\nConversation `{id}`, started {}.\n", title, view.created_at),
        Format::Jsonl => String::new(),
    };
    // One page per poll: (where the next page starts, whether the log has ended).
    let pages = futures::stream::unfold((0u64, false, Some(head)), move |(after, ended, head)| {
        let state = state.clone();
        async move {
            if let Some(head) = head.filter(|h| !h.is_empty()) {
                return Some((Ok(axum::body::Bytes::from(head)), (after, ended, None)));
            }
            if ended {
                return None;
            }
            match crate::read_model::events::read_decoded(&state.js, &state.store, id, after, PAGE).await {
                Ok(page) => {
                    let last = page.last().map_or(after, |(ev, _)| ev.seq);
                    let ended = page.len() < PAGE;
                    let mut text = String::new();
                    for (ev, live) in &page {
                        match format {
                            Format::Jsonl => {
                                text.push_str(live.json.as_str());
                                text.push('\n');
                            }
                            Format::Markdown => text.push_str(&markdown(ev)),
                        }
                    }
                    Some((Ok(axum::body::Bytes::from(text)), (last, ended, None)))
                }
                // The response has begun: a failed page ends the download short, and the
                // client sees a truncated body rather than a silently partial one.
                Err(e) => Some((Err(std::io::Error::other(e.to_string())), (after, true, None))),
            }
        }
    });
    let (content_type, extension) = match format {
        Format::Jsonl => ("application/x-ndjson", "jsonl"),
        Format::Markdown => ("text/markdown; charset=utf-8", "md"),
    };
    let disposition = format!("attachment; filename=\"conversation-{id}.{extension}\"");
    Ok(([(header::CONTENT_TYPE, content_type.to_owned()), (header::CONTENT_DISPOSITION, disposition)], Body::from_stream(pages))
        .into_response())
}

/// One event as a transcript's paragraph (empty for bookkeeping a reader does not need).
fn markdown(ev: &ConversationEvent) -> String {
    let time = halyard_protocol::rfc3339(ev.timestamp_ms);
    let quote = |text: &str| text.lines().map(|l| format!("> {l}")).collect::<Vec<_>>().join("\n");
    let fence = |text: &str| {
        // A fence longer than any run of backticks inside, so the content cannot close it.
        let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
        let ticks = "`".repeat(longest.max(2) + 1);
        format!("{ticks}\n{}\n{ticks}", text.trim_end())
    };
    match &ev.body {
        // The finish's message is the agent's answer, which follows as its own event.
        EventBody::Action { tool, .. } | EventBody::Observation { tool, .. } if tool == "finish" => String::new(),
        EventBody::UserMessage { text, images, command } => {
            // What the user typed, when it was a plugin's command, then what it stood for.
            let text = match command {
                Some(typed) => format!("{typed}\n\n{}", quote(text)),
                None => text.clone(),
            };
            let attached = match images.len() {
                0 => String::new(),
                n => format!("\n*({n} image{} attached)*\n", if n == 1 { "" } else { "s" }),
            };
            format!("\n## User ({time})\n\n{text}\n{attached}")
        }
        EventBody::AgentMessage { text } => format!("\n## Agent ({time})\n\n{text}\n"),
        EventBody::Thinking { blocks } => {
            let text: Vec<&str> = blocks.iter().map(|b| b.text.as_str()).filter(|t| !t.trim().is_empty()).collect();
            let redacted = blocks.iter().filter(|b| b.redacted.is_some()).count();
            let hidden =
                if redacted > 0 { format!("\n*({redacted} reasoning block(s) redacted by the provider)*\n") } else { String::new() };
            format!("\n*Thinking ({time}):*\n\n{}\n{hidden}", quote(&text.join("\n\n")))
        }
        EventBody::Action { tool, arguments, thought, .. } => {
            let thought = thought.as_deref().map(|t| format!("{}\n\n", quote(t))).unwrap_or_default();
            let shown = match (tool.as_str(), arguments.get("command").and_then(|c| c.as_str())) {
                ("terminal", Some(command)) => fence(command),
                _ => fence(&serde_json::to_string_pretty(arguments).unwrap_or_default()),
            };
            format!("\n**Action** `{tool}` ({time})\n\n{thought}{shown}\n")
        }
        EventBody::Observation { tool, content, exit_code, is_error, .. } => {
            let how = match (exit_code, is_error) {
                (Some(code), _) => format!(", exit code {code}"),
                (None, true) => ", failed".to_owned(),
                _ => String::new(),
            };
            format!("\n**Result** of `{tool}`{how}\n\n{}\n", fence(content))
        }
        EventBody::ActionRejected { tool, reason, .. } => format!("\n**Rejected** `{tool}`: {reason}\n"),
        EventBody::AgentError { code, message } => format!("\n**Error** `{code}`: {message}\n"),
        EventBody::AgentSession { agent, session_id, .. } => format!("\n*{agent} session `{session_id}`*\n"),
        EventBody::AgentUpdate { .. } => String::new(),
        EventBody::McpAuthRequired { server, .. } => format!("\n*MCP server `{server}` waits for its owner to sign in*\n"),
        EventBody::HooksConsentRequired { file, sha256, .. } => format!("\n*`{file}` (sha256 `{sha256}`) waits for consent*\n"),
        EventBody::HooksConsent { allowed, .. } => format!("\n*Repository hooks {}*\n", if *allowed { "allowed" } else { "declined" }),
        EventBody::ExecutionStatus { status, reason } => {
            let status = serde_json::to_value(status).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            match reason {
                Some(r) => format!("\n*Status: {status} ({r})*\n"),
                None => format!("\n*Status: {status}*\n"),
            }
        }
        EventBody::Condensation { from_seq, upto_seq, summary, .. } => {
            format!("\n*Events {from_seq} to {upto_seq} were summarized for the model:*\n\n{}\n", quote(summary))
        }
        EventBody::Title { title, .. } => format!("\n*Title: {title}*\n"),
        EventBody::WorkspaceRestored { at_seq, .. } => format!("\n*The workspace was put back as it was at event {at_seq} ({time}).*\n"),
        EventBody::ConversationStarted { model, .. } => format!("\n*Started with model {model} ({time})*\n"),
        EventBody::LlmProfile { model, .. } => format!("\n*Switched to model {model}*\n"),
        EventBody::TerminalOpened { by } => format!("\n*{by} opened a terminal ({time})*\n"),
        EventBody::NetworkBlocked { message, .. } => format!("\n*{message} ({time})*\n"),
        EventBody::BudgetAlert { org, user, percent, spent_usd, budget_usd, .. } => {
            let whose = user.as_ref().map_or_else(|| format!("Organization {org}'s"), |u| format!("{u}'s {org}"));
            format!("\n*{whose} monthly budget is {percent} % spent (${spent_usd:.2} of ${budget_usd:.2}, {time})*\n")
        }
        EventBody::Hook { event, command, exit_code, blocked, stderr, .. } => {
            let code = exit_code.map_or("no exit code".into(), |c| format!("exit code {c}"));
            let verdict = if *blocked { ", blocked" } else { "" };
            let said = if stderr.trim().is_empty() { String::new() } else { format!("\n\n{}", fence(stderr)) };
            format!("\n*Hook {event} `{command}`: {code}{verdict}*{said}\n")
        }
        EventBody::SubConversationsStarted { children, .. } => {
            let each: Vec<String> = children.iter().map(|c| format!("- {} (conversation `{}`)", c.title, c.conversation_id)).collect();
            format!("\n*Helpers started ({time}):*\n\n{}\n", each.join("\n"))
        }
        EventBody::SubConversationEnded { conversation_id, status, message, .. } => {
            format!("\n*Helper `{conversation_id}` ended ({status}):*\n\n{}\n", quote(message))
        }
        EventBody::Result { result } => format!("\n**Result** ({time})\n\n{}\n", fence(&result.to_string())),
        EventBody::Verification { attempt, check, subject, passed, score, output, .. } => {
            let verdict = if *passed { "passed" } else { "did not pass" };
            let said = if output.trim().is_empty() { String::new() } else { format!("\n\n{}", fence(output)) };
            format!("\n*Check {attempt}: {check} `{subject}` {verdict} (score {score:.2})*{said}\n")
        }
        EventBody::PullRequestOpened { number, url, title } => {
            let title = title.as_deref().map(|t| format!(" “{t}”")).unwrap_or_default();
            format!("\n*Pull request [#{number}]({url}){title} opened ({time})*\n")
        }
        EventBody::TaskList { items } => {
            let tasks: Vec<String> = items
                .iter()
                .map(|t| {
                    use halyard_protocol::event::TaskStatus;
                    let mark = if t.status == TaskStatus::Done { "x" } else { " " };
                    let now = if t.status == TaskStatus::InProgress { " (in progress)" } else { "" };
                    let notes = if t.notes.is_empty() { String::new() } else { format!(" — {}", t.notes.replace('\n', " ")) };
                    format!("- [{mark}] {}{now}{notes}", t.title)
                })
                .collect();
            format!("\n**Plan** ({time})\n\n{}\n", tasks.join("\n"))
        }
        EventBody::ConfirmationPolicy { .. }
        | EventBody::SkillActivated { .. }
        | EventBody::McpServers { .. }
        | EventBody::NetworkUsed { .. }
        | EventBody::LlmCall { .. } => String::new(),
    }
}
