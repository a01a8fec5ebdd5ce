//! The title setter: names conversations. On a conversation's first user message it asks an
//! LLM (possibly a cheaper model than the agent's) for a short title, and falls back to the
//! trimmed first line of the message if the LLM fails or is not configured. A title the user
//! sets (at start or later) always wins: it is appended as a `title` event `set_by: user`, and
//! readers keep a user title over any generated one, whichever arrives first.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use halyard_platform::bus::{self, Delivery, EventAppender};
use halyard_platform::llm::{ChatMessage, LlmClient};
use halyard_platform::{BusError, BusErrorKind, Config, Shutdown};
use halyard_protocol::command::TitleCommand;
use halyard_protocol::event::{ConversationEvent, EventBody, EventSource, TitleSource};
use halyard_protocol::system::SystemRecord;
use halyard_protocol::{ConversationId, Envelope, EventId, subjects};

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 60;

/// Why the title setter failed.
#[derive(Debug, thiserror::Error)]
pub enum TitleError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot start the title setter: {0}")]
    Setup(String),
}

impl TitleError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Bus(e) => e.is_retryable(),
            Self::Setup(_) => false,
        }
    }
}

#[derive(Clone)]
struct Ctx {
    js: jetstream::Context,
    llm: Option<LlmClient>,
    done: jetstream::kv::Store,
}

/// Serves until `shutdown`: titles for first messages, and titles set by users.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), TitleError> {
    let js = jetstream::new(nats);
    let llm = if config.titles.use_llm {
        Some(LlmClient::new(config.titles.llm(&config.llm)).map_err(|e| TitleError::Setup(e.to_string()))?)
    } else {
        None
    };
    let done = js.get_key_value(subjects::TITLE_BUCKET).await.map_err(|e| TitleError::Setup(e.to_string()))?;
    let ctx = Ctx { js: js.clone(), llm, done };

    let commands = {
        let ctx = ctx.clone();
        let js = js.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            bus::consume(js, subjects::COMMANDS_STREAM, subjects::TITLE_COMMAND_CONSUMER, "titles", shutdown, |d| {
                let ctx = ctx.clone();
                async move {
                    let Some((env, d)) = d.decode::<TitleCommand>().await else { return };
                    let TitleCommand::SetByUser { conversation_id, title } = env.payload;
                    settle(d, append_title(&ctx.js, conversation_id, title, TitleSource::User).await).await;
                    let _ = ctx.done.put(conversation_id.to_string(), "user".into()).await;
                }
            })
            .await
        })
    };
    let events = bus::consume(js, subjects::EVENTS_STREAM, subjects::TITLE_EVENT_CONSUMER, "titles", shutdown, |d| {
        let ctx = ctx.clone();
        async move {
            let Some((env, d)) = d.decode::<ConversationEvent>().await else { return };
            let EventBody::UserMessage { text, .. } = &env.payload.body else {
                d.ack().await;
                return;
            };
            // Each conversation is named once; the LLM call runs off the consumer's loop.
            let conv = env.payload.conversation_id;
            let text = text.clone();
            tokio::spawn(async move {
                let result = name(&ctx, conv, &text).await;
                settle(d, result).await;
            });
        }
    })
    .await;
    commands.abort();
    events.map_err(TitleError::from)
}

async fn settle(d: Delivery, result: Result<(), BusError>) {
    match result {
        Ok(()) => d.ack().await,
        Err(e) => d.retry(Duration::from_secs(1), &e.to_string()).await,
    }
}

/// Names a conversation from its first message, unless it is named already.
async fn name(ctx: &Ctx, conv: ConversationId, text: &str) -> Result<(), BusError> {
    let key = conv.to_string();
    if ctx.done.get(&key).await.map_err(|e| BusError::new(BusErrorKind::Read, e))?.is_some() {
        return Ok(());
    }
    // A title given when the conversation was started is the user's.
    let record = bus::last_record::<SystemRecord>(&ctx.js, subjects::SYSTEM_STREAM, &subjects::conversation_record(conv)).await?;
    let named = matches!(record, Some((_, Envelope { payload: SystemRecord::ConversationCreated { title: Some(_), .. }, .. })));
    if !named {
        let title = match &ctx.llm {
            Some(llm) => match generate(llm, text).await {
                Some(t) => t,
                None => fallback(text),
            },
            None => fallback(text),
        };
        append_title(&ctx.js, conv, title, TitleSource::Generated).await?;
    }
    ctx.done.put(key, "named".into()).await.map_err(|e| BusError::new(BusErrorKind::Publish, e))?;
    Ok(())
}

async fn generate(llm: &LlmClient, text: &str) -> Option<String> {
    let excerpt: String = text.chars().take(2000).collect();
    let messages = [
        ChatMessage::text(
            "system",
            format!(
                "You name conversations. Answer with a title of at most {MAX_TITLE_CHARS} characters for the conversation that starts with the user's message. Answer with the title only, no quotes."
            ),
        ),
        ChatMessage::text("user", excerpt),
    ];
    match llm.complete(&messages, &[]).await {
        Ok(c) => c.content.as_deref().map(clean).filter(|t| !t.is_empty()),
        Err(e) => {
            tracing::warn!(error = %e, "title LLM failed; using the first line");
            None
        }
    }
}

/// First line, without surrounding quotes or a `Title:` prefix, at most [`MAX_TITLE_CHARS`].
pub fn clean(raw: &str) -> String {
    let line = raw.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let line = line.strip_prefix("Title:").or_else(|| line.strip_prefix("title:")).unwrap_or(line).trim();
    let line = line.trim_matches(|c| c == '"' || c == '\'' || c == '`' || c == '*').trim();
    truncate(line)
}

/// The fallback title: the message's first non-empty line, trimmed.
pub fn fallback(text: &str) -> String {
    let t = clean(text);
    if t.is_empty() { "Untitled conversation".into() } else { t }
}

fn truncate(s: &str) -> String {
    if s.chars().count() <= MAX_TITLE_CHARS {
        return s.to_owned();
    }
    let cut: String = s.chars().take(MAX_TITLE_CHARS - 1).collect();
    // Prefer a word boundary when one is near.
    let cut = match cut.rfind(' ') {
        Some(i) if i > MAX_TITLE_CHARS / 2 => cut[..i].to_owned(),
        _ => cut,
    };
    format!("{}…", cut.trim_end())
}

/// Appends a title event, retrying when another writer (the agent) appended first.
async fn append_title(js: &jetstream::Context, conv: ConversationId, title: String, set_by: TitleSource) -> Result<(), BusError> {
    let mut appender = EventAppender::open(js.clone(), conv).await?;
    if appender.last_seq() == 0 {
        // The conversation has not started (or was deleted): nothing to name yet.
        return Err(BusError::new(BusErrorKind::Conflict, format!("conversation {conv} has no log yet")));
    }
    let source = match set_by {
        TitleSource::User => EventSource::User,
        TitleSource::Generated => EventSource::System,
    };
    let id = EventId::new();
    let mut last = None;
    for _ in 0..10 {
        match appender.append(id, source, EventBody::Title { title: title.clone(), set_by }, None).await {
            Ok(_) => return Ok(()),
            Err(e) if e.kind == BusErrorKind::Conflict => {
                appender.refresh().await?;
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| BusError::new(BusErrorKind::Conflict, "title append kept conflicting")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_cleaned_and_capped() {
        assert_eq!(clean("\"Fix the login bug\"\nextra"), "Fix the login bug");
        assert_eq!(clean("Title: Parse CSV files"), "Parse CSV files");
        let long = fallback(&"word ".repeat(40));
        assert!(long.chars().count() <= MAX_TITLE_CHARS, "{long}");
        assert!(long.ends_with('…'));
        assert_eq!(fallback("\n\n  Write hello.py  \nand run it"), "Write hello.py");
        assert_eq!(fallback("   "), "Untitled conversation");
    }
}
