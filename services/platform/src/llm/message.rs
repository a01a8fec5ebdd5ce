//! What every wire speaks in: chat messages, tool calls, completions and their usage, the
//! errors of a call, and where a streamed answer's text goes.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use halyard_protocol::event::ThinkingBlock;

/// Where the text of a streamed answer goes as it arrives: `Some(piece)`, or `None` when a call
/// starts again from nothing (a retry, a fallback) and what was sent before is void.
pub type Deltas = tokio::sync::mpsc::UnboundedSender<Option<String>>;

/// One chat message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Images beside the text of a user message; each provider's request puts them in its own
    /// shape (OpenAI's `image_url` parts, Anthropic's `image` blocks).
    #[serde(skip)]
    pub images: Vec<ImagePart>,
    /// The model's reasoning before an assistant message, given back with it where the wire
    /// wants it (Anthropic's thinking blocks, signatures and all).
    #[serde(skip)]
    pub thinking: Vec<ThinkingBlock>,
}

/// An image for the model: its media type and its bytes in base64.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImagePart {
    pub media_type: String,
    pub data: String,
}

/// How the user message that carries tool results' images begins (the rest names the calls).
pub const IMAGES_FROM: &str = "Images from tool call";

/// `messages` for a wire whose tool results hold only text (chat completions, the Responses
/// API): the images of a run of tool results (the browser's screenshots) come in a user message
/// right after it, which says which call took them.
pub(crate) fn images_after_tool_results(messages: &[ChatMessage]) -> std::borrow::Cow<'_, [ChatMessage]> {
    if !messages.iter().any(|m| m.role == "tool" && !m.images.is_empty()) {
        return std::borrow::Cow::Borrowed(messages);
    }
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut held: Vec<(String, ImagePart)> = Vec::new();
    let flush = |held: &mut Vec<(String, ImagePart)>, out: &mut Vec<ChatMessage>| {
        if held.is_empty() {
            return;
        }
        let calls: Vec<&str> = held.iter().map(|(c, _)| c.as_str()).collect();
        let text = format!("{IMAGES_FROM} {}:", calls.join(", "));
        out.push(ChatMessage { images: held.drain(..).map(|(_, i)| i).collect(), ..ChatMessage::text("user", text) });
    };
    for m in messages {
        if m.role == "tool" && !m.images.is_empty() {
            let call = m.tool_call_id.clone().unwrap_or_default();
            held.extend(m.images.iter().map(|i| (call.clone(), i.clone())));
            out.push(ChatMessage { images: Vec::new(), ..m.clone() });
            continue;
        }
        if m.role != "tool" {
            flush(&mut held, &mut out);
        }
        out.push(m.clone());
    }
    flush(&mut held, &mut out);
    std::borrow::Cow::Owned(out)
}

impl ChatMessage {
    pub fn text(role: &str, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: Some(content.into()), ..Default::default() }
    }
}

/// A tool call requested by the model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

pub(crate) fn function_type() -> String {
    "function".into()
}

/// Name and JSON-encoded arguments of a tool call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// What the model answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Completion {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    /// What the call used, as the provider reported it (some servers report nothing).
    pub usage: Option<Usage>,
    /// The model's reasoning, where the provider shows it.
    pub thinking: Vec<ThinkingBlock>,
}

/// Tokens one call used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Prompt tokens served from the provider's prompt cache.
    pub cached_tokens: u64,
}

impl Usage {
    /// Reads OpenAI's `usage` object (`prompt_tokens_details.cached_tokens` for the cache).
    pub(crate) fn from_openai(v: &Value) -> Option<Self> {
        let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
        Some(Self {
            prompt_tokens: v.get("prompt_tokens")?.as_u64()?,
            completion_tokens: n(v.get("completion_tokens")),
            cached_tokens: n(v.get("prompt_tokens_details").and_then(|d| d.get("cached_tokens"))),
        })
    }
}

/// Why a completion failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("LLM request timed out")]
    Timeout,
    #[error("LLM rate limit (HTTP 429)")]
    RateLimited { retry_after: Option<Duration> },
    #[error("LLM server error (HTTP {status}): {body}")]
    Server { status: u16, body: String },
    #[error("LLM rejected the request (HTTP {status}): {body}")]
    Rejected { status: u16, body: String },
    #[error("cannot reach the LLM: {0}")]
    Transport(String),
    #[error("LLM answer is malformed: {0}")]
    Malformed(String),
    /// The prompt does not fit the model's context window (the agent condenses and retries).
    #[error("the prompt is longer than the model's context window: {body}")]
    ContextWindow { body: String },
    /// A profile and every one of its fallbacks failed ([`fallback`]); `each` names them.
    #[error("every LLM profile tried failed: {each}")]
    Exhausted { each: String, last: Box<LlmError> },
}

/// Whether an error body says the prompt was too long, in the words OpenAI, Anthropic, vLLM,
/// llama.cpp and LiteLLM use.
pub fn is_context_error(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context window",
        "prompt is too long",
        "input is too long",
        "too many tokens",
        "exceeds the context",
        "exceed_context_size",
        "request_too_large",
        "input token count",
    ]
    .iter()
    .any(|p| b.contains(p))
}

impl LlmError {
    /// Timeouts, rate limits, 5xx and connection failures can heal.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Timeout | Self::RateLimited { .. } | Self::Server { .. } | Self::Transport(_))
    }

    /// A stable code for events.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Timeout => "llm_timeout",
            Self::RateLimited { .. } => "llm_rate_limited",
            Self::Server { .. } => "llm_server_error",
            Self::Rejected { .. } => "llm_rejected",
            Self::Transport(_) => "llm_unreachable",
            Self::Malformed(_) => "llm_malformed",
            Self::ContextWindow { .. } => "llm_context_window",
            Self::Exhausted { last, .. } => last.code(),
        }
    }
}

pub(crate) fn transport(e: reqwest::Error) -> LlmError {
    if e.is_timeout() { LlmError::Timeout } else { LlmError::Transport(crate::outbound::why(&e)) }
}
