//! The LLM client: OpenAI-compatible chat-completions endpoints (OpenAI, vLLM, llama.cpp
//! server, Ollama, LiteLLM...) and Anthropic's Messages API ([`anthropic`]), chosen by
//! `provider`, with native tool calling, streaming (server-sent events) and plain responses; and
//! OpenAI's Responses API ([`responses`]) for models that speak only it, and Google's Gemini API
//! ([`gemini`]).
//! Timeouts, 429 and 5xx are retried with exponential backoff (honouring `Retry-After`); a
//! bounded number of calls is in flight per process. A profile's fallbacks take the calls its
//! provider cannot answer ([`fallback`]); [`models`] lists what a provider offers.

pub mod anthropic;
pub mod fallback;
pub mod gemini;
pub mod models;
pub mod passthrough;
pub mod responses;

/// The wires a profile's `provider` may name: OpenAI-compatible chat completions, Anthropic's
/// Messages API, OpenAI's Responses API and Google's Gemini API.
pub const PROVIDERS: &[&str] = &["openai", "anthropic", responses::PROVIDER, gemini::PROVIDER];

fn check_provider(provider: &str) -> Result<(), LlmError> {
    if PROVIDERS.contains(&provider) {
        return Ok(());
    }
    Err(LlmError::Transport(format!("unknown LLM provider `{provider}`: use {}", PROVIDERS.join(", "))))
}

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::config::LlmConfig;
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

/// `m` as OpenAI's chat API takes it: a message with images has its content as parts.
fn openai_message(m: &ChatMessage) -> Value {
    let mut v = serde_json::to_value(m).unwrap_or_default();
    if !m.images.is_empty() {
        let mut parts = vec![serde_json::json!({"type": "text", "text": m.content.clone().unwrap_or_default()})];
        parts.extend(
            m.images.iter().map(
                |i| serde_json::json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", i.media_type, i.data)}}),
            ),
        );
        v["content"] = Value::Array(parts);
    }
    v
}

/// A chat completions request, written as it is sent: the history and the tools are not
/// copied into a JSON tree first (with a long conversation, that copy was most of the cost of
/// an LLM call's request).
#[derive(Serialize)]
struct OpenAiBody<'a> {
    model: &'a str,
    messages: Vec<OpenAiMessage<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "<[Value]>::is_empty")]
    tools: &'a [Value],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// A message as chat completions takes it ([`openai_message`]; one without images as it is).
struct OpenAiMessage<'a>(&'a ChatMessage);

impl Serialize for OpenAiMessage<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.images.is_empty() { self.0.serialize(serializer) } else { openai_message(self.0).serialize(serializer) }
    }
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

fn function_type() -> String {
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
    fn from_openai(v: &Value) -> Option<Self> {
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

/// Where a user's LLM profile points ([`LlmClient::for_profile`]).
pub struct ProfileTarget {
    pub provider: String,
    pub base_url: String,
    pub model: String,
    pub api_key: String,
    pub temperature: Option<f32>,
    pub max_output_tokens: Option<u64>,
    pub context_window: Option<u64>,
    pub reasoning_effort: Option<String>,
    pub thinking_budget_tokens: Option<u64>,
}

impl ProfileTarget {
    /// Where a stored profile points, with its API key opened.
    pub fn of(p: &halyard_protocol::user::LlmProfile, api_key: String) -> Self {
        Self {
            provider: p.provider.clone(),
            base_url: p.base_url.clone(),
            model: p.model.clone(),
            api_key,
            temperature: p.temperature,
            max_output_tokens: p.max_output_tokens,
            context_window: p.context_window,
            reasoning_effort: p.reasoning_effort.clone(),
            thinking_budget_tokens: p.thinking_budget_tokens,
        }
    }
}

/// The client. Cheap to clone.
#[derive(Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    config: Arc<LlmConfig>,
    permits: Arc<Semaphore>,
    /// A user's profile: errors say the status line only (the body could be an internal
    /// service's answer, see [`crate::outbound`]).
    users: bool,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The API key stays out of logs.
        f.debug_struct("LlmClient").field("base_url", &self.config.base_url).field("model", &self.config.model).finish()
    }
}

impl LlmClient {
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        check_provider(&config.provider)?;
        let http =
            reqwest::Client::builder().connect_timeout(Duration::from_secs(10)).build().map_err(|e| LlmError::Transport(e.to_string()))?;
        let permits = Arc::new(Semaphore::new(config.max_concurrent.max(1)));
        Ok(Self { http, config: Arc::new(config), permits, users: false })
    }

    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// A client of another server or model (a user's LLM profile) that shares this one's
    /// retry settings, prices and bound on calls in flight (a user's own profile does not widen
    /// what the process sends at once), through the outbound client that checks every address
    /// against `allow` ([`crate::outbound`]).
    pub fn for_profile(&self, profile: ProfileTarget, allow: &[String]) -> Result<Self, LlmError> {
        check_provider(&profile.provider)?;
        crate::net::check_url(&profile.base_url, allow).map_err(|e| LlmError::Transport(format!("{}: {e}", profile.base_url)))?;
        static USERS: std::sync::OnceLock<(Vec<String>, reqwest::Client)> = std::sync::OnceLock::new();
        let http = match USERS.get() {
            Some((a, c)) if a.as_slice() == allow => c.clone(),
            _ => {
                let c = crate::outbound::builder(allow)
                    .connect_timeout(Duration::from_secs(10))
                    .build()
                    .map_err(|e| LlmError::Transport(e.to_string()))?;
                USERS.get_or_init(|| (allow.to_vec(), c.clone()));
                c
            }
        };
        let mut config = (*self.config).clone();
        config.provider = profile.provider;
        config.base_url = profile.base_url;
        config.model = profile.model;
        config.api_key = profile.api_key;
        config.temperature = profile.temperature.or(config.temperature);
        config.max_output_tokens = profile.max_output_tokens.unwrap_or(config.max_output_tokens);
        config.context_window = profile.context_window.unwrap_or(0);
        config.context_reserve = 0;
        config.reasoning_effort = profile.reasoning_effort;
        config.thinking_budget_tokens = profile.thinking_budget_tokens.unwrap_or(0);
        Ok(Self { http, config: Arc::new(config), permits: self.permits.clone(), users: true })
    }

    /// The model's context window in tokens (configured, or known for its family).
    pub fn context_window(&self) -> u64 {
        match self.config.context_window {
            0 => crate::tokens::known_context_window(&self.config.model),
            n => n,
        }
    }

    /// Tokens a prompt may have: the context window less what is kept for the answer.
    pub fn prompt_budget(&self) -> u64 {
        let window = self.context_window();
        let reserve = match self.config.context_reserve {
            0 => self.config.max_output_tokens.min(window / 4),
            n => n,
        };
        window.saturating_sub(reserve).max(1)
    }

    /// How this model's tokens are counted.
    pub fn token_counter(&self) -> crate::tokens::TokenCounter {
        crate::tokens::TokenCounter::for_model(&self.config.model)
    }

    /// The price of this client's model: configured, else built in ([`crate::prices`]), if any.
    pub fn price(&self) -> Option<&crate::config::Price> {
        self.config.prices.get(&self.config.model).or_else(|| crate::prices::builtin(&self.config.model))
    }

    /// The same client with `prices` over its own (an organization's, for its conversations).
    pub fn with_prices(&self, prices: &std::collections::BTreeMap<String, crate::config::Price>) -> Self {
        if prices.is_empty() {
            return self.clone();
        }
        let mut config = (*self.config).clone();
        config.prices.extend(prices.iter().map(|(m, p)| (m.clone(), p.clone())));
        Self { http: self.http.clone(), config: Arc::new(config), permits: self.permits.clone(), users: self.users }
    }

    /// One completion, retried as configured.
    pub async fn complete(&self, messages: &[ChatMessage], tools: &[Value]) -> Result<Completion, LlmError> {
        self.complete_streaming(messages, tools, None).await
    }

    /// One completion, retried as configured, its text sent to `deltas` as the provider streams
    /// it (where the client streams).
    pub async fn complete_streaming(
        &self,
        messages: &[ChatMessage],
        tools: &[Value],
        deltas: Option<&Deltas>,
    ) -> Result<Completion, LlmError> {
        let _permit = self.permits.acquire().await.map_err(|e| LlmError::Transport(e.to_string()))?;
        let mut attempt = 0u32;
        loop {
            if attempt > 0 {
                if let Some(d) = deltas {
                    let _ = d.send(None);
                }
            }
            match self.attempt(messages, tools, deltas).await {
                Ok(c) => return Ok(c),
                Err(e) if e.is_retryable() && attempt < self.config.max_retries => {
                    let backoff = Duration::from_millis(self.config.retry_base_ms.saturating_mul(1 << attempt.min(10)));
                    let delay = match &e {
                        LlmError::RateLimited { retry_after: Some(d) } => (*d).max(backoff),
                        _ => backoff,
                    };
                    tracing::warn!(error = %e, attempt, ?delay, "LLM call failed, retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn attempt(&self, messages: &[ChatMessage], tools: &[Value], deltas: Option<&Deltas>) -> Result<Completion, LlmError> {
        let wire = self.config.provider.as_str();
        let base = self.config.base_url.trim_end_matches('/');
        let request = if wire == responses::PROVIDER {
            let body = responses::request(
                &self.config.model,
                self.config.max_output_tokens,
                messages,
                tools,
                self.config.stream,
                self.config.temperature,
                self.config.reasoning_effort.as_deref(),
            );
            self.authorized(self.http.post(format!("{base}/responses")).json(&body))
        } else if wire == "anthropic" {
            let body = anthropic::request(
                &self.config.model,
                self.config.max_output_tokens,
                messages,
                tools,
                self.config.stream,
                self.config.temperature,
                self.config.thinking_budget_tokens,
            );
            self.authorized(self.http.post(format!("{base}/messages")).json(&body))
        } else if wire == gemini::PROVIDER {
            let body = gemini::request(
                self.config.max_output_tokens,
                messages,
                tools,
                self.config.temperature,
                self.config.thinking_budget_tokens,
            );
            let method = if self.config.stream { "streamGenerateContent" } else { "generateContent" };
            self.authorized(self.http.post(format!("{base}/{}", gemini::path(&self.config.model, method))).json(&body))
        } else {
            self.openai_request(base, messages, tools)
        };
        let response = request.timeout(Duration::from_secs(self.config.timeout_secs)).send().await.map_err(transport)?;
        if !response.status().is_success() {
            return Err(self.refusal(response).await);
        }
        match (wire, self.config.stream) {
            ("anthropic", true) => read_stream(response, anthropic::StreamAccumulator::default(), deltas).await,
            ("anthropic", false) => anthropic::parse(&response.json::<Value>().await.map_err(transport)?),
            (responses::PROVIDER, true) => read_stream(response, responses::StreamAccumulator::default(), deltas).await,
            (responses::PROVIDER, false) => responses::parse(&response.json::<Value>().await.map_err(transport)?),
            (gemini::PROVIDER, true) => read_stream(response, gemini::StreamAccumulator::default(), deltas).await,
            (gemini::PROVIDER, false) => gemini::parse(&response.json::<Value>().await.map_err(transport)?),
            (_, true) => read_stream(response, StreamAccumulator::default(), deltas).await,
            (_, false) => parse_completion(&response.json::<Value>().await.map_err(transport)?),
        }
    }

    fn openai_request(&self, base: &str, messages: &[ChatMessage], tools: &[Value]) -> reqwest::RequestBuilder {
        let messages = images_after_tool_results(messages);
        let body = OpenAiBody {
            model: &self.config.model,
            messages: messages.iter().map(OpenAiMessage).collect(),
            stream: self.config.stream,
            // Streams report usage only when asked, in a last chunk.
            stream_options: self.config.stream.then_some(StreamOptions { include_usage: true }),
            tools,
            tool_choice: (!tools.is_empty()).then_some("auto"),
            temperature: self.config.temperature,
            reasoning_effort: self.config.reasoning_effort.as_deref(),
        };
        self.authorized(self.http.post(format!("{base}/chat/completions")).json(&body))
    }

    /// `request` with the key as this client's wire sends it: Anthropic's `x-api-key` (and its
    /// version), Gemini's `x-goog-api-key`, else a bearer token (none when there is no key).
    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if self.config.provider == "anthropic" {
            return request.header("x-api-key", &self.config.api_key).header("anthropic-version", anthropic::VERSION);
        }
        if self.config.provider == gemini::PROVIDER {
            return request.header("x-goog-api-key", &self.config.api_key);
        }
        if self.config.api_key.is_empty() { request } else { request.bearer_auth(&self.config.api_key) }
    }

    /// The error a response that is no success stands for. A user's profile's error says the
    /// status line only (the body could be an internal service's answer, see [`crate::outbound`]).
    async fn refusal(&self, response: reqwest::Response) -> LlmError {
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = response.text().await.unwrap_or_default();
        let body: String = if self.users { crate::outbound::status_line(status) } else { text.chars().take(500).collect() };
        match status.as_u16() {
            429 => LlmError::RateLimited { retry_after },
            s if s >= 500 => LlmError::Server { status: s, body },
            400 | 413 if is_context_error(&text) => LlmError::ContextWindow { body },
            s => LlmError::Rejected { status: s, body },
        }
    }
}

fn transport(e: reqwest::Error) -> LlmError {
    if e.is_timeout() { LlmError::Timeout } else { LlmError::Transport(crate::outbound::why(&e)) }
}

/// Parses a non-streaming chat-completions response.
pub fn parse_completion(v: &Value) -> Result<Completion, LlmError> {
    let choice = v.get("choices").and_then(|c| c.get(0)).ok_or_else(|| LlmError::Malformed("no choices".into()))?;
    let message = choice.get("message").ok_or_else(|| LlmError::Malformed("no message".into()))?;
    let tool_calls: Vec<ToolCall> = match message.get("tool_calls") {
        Some(Value::Array(calls)) => calls
            .iter()
            .map(|c| serde_json::from_value(c.clone()).map_err(|e| LlmError::Malformed(format!("tool call: {e}"))))
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    Ok(Completion {
        content: message.get("content").and_then(Value::as_str).map(str::to_owned),
        tool_calls,
        finish_reason: choice.get("finish_reason").and_then(Value::as_str).map(str::to_owned),
        usage: v.get("usage").and_then(Usage::from_openai),
        thinking: reasoning_text(message.get("reasoning_content").and_then(Value::as_str).unwrap_or_default()),
    })
}

/// The reasoning text OpenAI-compatible servers (vLLM, DeepSeek, LiteLLM...) send as
/// `reasoning_content`, as a block of its own (none when there is none).
fn reasoning_text(text: &str) -> Vec<ThinkingBlock> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    vec![ThinkingBlock { text: text.to_owned(), ..Default::default() }]
}

/// What every wire's stream reader keeps besides its own fold: whether any data came, and the
/// answer's text not yet taken as a delta.
#[derive(Default, Debug)]
pub(crate) struct StreamState {
    pub(crate) saw_data: bool,
    pub(crate) fresh: String,
}

/// Adds `items` to the last message of `out` when it is `role`'s (its `field` array), else as a
/// message of their own: for wires that want roles alternating (Anthropic's, Gemini's).
pub(crate) fn push_turn(out: &mut Vec<Value>, role: &str, field: &str, items: Vec<Value>) {
    match out.last_mut() {
        Some(last) if last["role"] == role => {
            if let Some(existing) = last[field].as_array_mut() {
                existing.extend(items);
            }
        }
        _ => out.push(serde_json::json!({"role": role, field: items})),
    }
}

impl StreamState {
    /// The JSON of a server-sent event's `data:` line, noting that data came (none: another
    /// field's line, or an empty one).
    pub(crate) fn data(&mut self, line: &str) -> Result<Option<Value>, LlmError> {
        let Some(data) = line.strip_prefix("data:").map(str::trim).filter(|d| !d.is_empty()) else { return Ok(None) };
        self.saw_data = true;
        serde_json::from_str(data).map(Some).map_err(|e| LlmError::Malformed(format!("stream event: {e}")))
    }
}

/// A wire's stream reader: fed one server-sent-event line at a time.
pub(crate) trait Accumulate {
    /// Feeds a line; true at the end of the answer.
    fn line(&mut self, line: &str) -> Result<bool, LlmError>;
    fn state(&mut self) -> &mut StreamState;
    fn finish(self) -> Result<Completion, LlmError>;
    /// [`Self::finish`] for a boxed reader ([`passthrough::UsageReader`]).
    fn finish_boxed(self: Box<Self>) -> Result<Completion, LlmError>;
}

/// Reads a server-sent-event stream into a completion, passing its text to `deltas` as each
/// chunk of the body brings some.
async fn read_stream(response: reqwest::Response, mut acc: impl Accumulate, deltas: Option<&Deltas>) -> Result<Completion, LlmError> {
    let mut buf = Vec::<u8>::new();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        buf.extend_from_slice(&chunk.map_err(transport)?);
        let mut ended = false;
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            if acc.line(line.trim_end())? {
                ended = true;
                break;
            }
        }
        // One piece per chunk of the body: what its lines added.
        if let Some(d) = deltas {
            let fresh = std::mem::take(&mut acc.state().fresh);
            if !fresh.is_empty() {
                let _ = d.send(Some(fresh));
            }
        }
        if ended {
            return acc.finish();
        }
    }
    if !buf.is_empty() {
        let line = String::from_utf8_lossy(&buf).to_string();
        acc.line(line.trim_end())?;
    }
    if !acc.state().saw_data {
        return Err(LlmError::Malformed("stream ended without data".into()));
    }
    acc.finish()
}

/// Folds streamed deltas (content fragments, tool-call fragments by index) into a completion.
#[derive(Default, Debug)]
pub struct StreamAccumulator {
    content: String,
    has_content: bool,
    calls: Vec<ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    reasoning: String,
    state: StreamState,
}

impl Accumulate for StreamAccumulator {
    fn finish_boxed(self: Box<Self>) -> Result<Completion, LlmError> {
        (*self).finish()
    }

    /// Feeds one SSE line; returns true at `data: [DONE]`.
    fn line(&mut self, line: &str) -> Result<bool, LlmError> {
        let Some(data) = line.strip_prefix("data:") else { return Ok(false) };
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        self.state.saw_data = true;
        let v: Value = serde_json::from_str(data).map_err(|e| LlmError::Malformed(format!("stream chunk: {e}")))?;
        if let Some(err) = v.get("error") {
            return Err(LlmError::Server { status: 200, body: err.to_string() });
        }
        if let Some(usage) = v.get("usage").and_then(Usage::from_openai) {
            self.usage = Some(usage);
        }
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else { return Ok(false) };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else { return Ok(false) };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.content.push_str(text);
            self.state.fresh.push_str(text);
            self.has_content = true;
        }
        if let Some(text) = delta.get("reasoning_content").and_then(Value::as_str) {
            self.reasoning.push_str(text);
        }
        if let Some(Value::Array(calls)) = delta.get("tool_calls") {
            for call in calls {
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(self.calls.len() as u64) as usize;
                while self.calls.len() <= index {
                    self.calls.push(ToolCall { kind: "function".into(), ..Default::default() });
                }
                let slot = &mut self.calls[index];
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    slot.id = id.to_owned();
                }
                if let Some(f) = call.get("function") {
                    if let Some(name) = f.get("name").and_then(Value::as_str) {
                        slot.function.name.push_str(name);
                    }
                    if let Some(args) = f.get("arguments").and_then(Value::as_str) {
                        slot.function.arguments.push_str(args);
                    }
                }
            }
        }
        Ok(false)
    }

    fn state(&mut self) -> &mut StreamState {
        &mut self.state
    }

    fn finish(self) -> Result<Completion, LlmError> {
        Ok(Completion {
            content: self.has_content.then_some(self.content),
            tool_calls: self.calls.into_iter().filter(|c| !c.function.name.is_empty()).collect(),
            finish_reason: self.finish_reason,
            usage: self.usage,
            thinking: reasoning_text(&self.reasoning),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn screenshots_follow_the_tool_results_that_took_them() {
        let png = |d: &str| ImagePart { media_type: "image/png".into(), data: d.into() };
        let tool = |id: &str, images| ChatMessage {
            role: "tool".into(),
            content: Some(format!("result {id}")),
            tool_call_id: Some(id.into()),
            images,
            ..Default::default()
        };
        let plain = [ChatMessage::text("user", "hi"), tool("a", vec![])];
        assert!(matches!(images_after_tool_results(&plain), std::borrow::Cow::Borrowed(_)), "nothing to move, nothing copied");
        let messages =
            [ChatMessage::text("user", "look"), tool("a", vec![png("AAA")]), tool("b", vec![]), ChatMessage::text("user", "go on")];
        let out = images_after_tool_results(&messages);
        let roles: Vec<&str> = out.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "tool", "tool", "user", "user"], "after the run of results, before the next message");
        assert!(out[1].images.is_empty() && out[1].content.as_deref() == Some("result a"));
        assert_eq!(out[3].images, vec![png("AAA")]);
        assert!(out[3].content.as_deref().unwrap_or_default().contains("tool call a"));
        let wire = openai_message(&out[3]);
        assert_eq!(wire["content"][1]["image_url"]["url"], "data:image/png;base64,AAA");
        // At the end of the history too.
        let last = images_after_tool_results(&messages[..2]);
        assert_eq!(last.len(), 3);
        assert_eq!(last[2].images.len(), 1);
        let body = responses::request("gpt-x", 100, &messages, &[], false, None, None);
        assert_eq!(body["input"][1]["type"], "function_call_output");
        assert_eq!(body["input"][3]["content"][1]["type"], "input_image");
    }

    #[test]
    fn accumulates_streamed_tool_calls() {
        let mut acc = StreamAccumulator::default();
        for line in [
            r#"data: {"choices":[{"delta":{"role":"assistant","content":"Let me "}}]}"#,
            r#"data: {"choices":[{"delta":{"content":"check."}}]}"#,
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"terminal","arguments":"{\"comm"}}]}}]}"#,
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"and\":\"ls\"}"}}]}}]}"#,
            r#"data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ] {
            assert!(!acc.line(line).unwrap());
        }
        assert!(acc.line("data: [DONE]").unwrap());
        let c = acc.finish().unwrap();
        assert_eq!(c.content.as_deref(), Some("Let me check."));
        assert_eq!(c.tool_calls.len(), 1);
        assert_eq!(c.tool_calls[0].id, "call_1");
        assert_eq!(c.tool_calls[0].function.arguments, r#"{"command":"ls"}"#);
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn parses_plain_completion() {
        let v = serde_json::json!({"choices":[{"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"c1","type":"function","function":{"name":"finish","arguments":"{}"}}]},
            "finish_reason":"tool_calls"}]});
        let c = parse_completion(&v).unwrap();
        assert_eq!(c.content, None);
        assert_eq!(c.tool_calls[0].function.name, "finish");
        assert!(parse_completion(&serde_json::json!({})).is_err());
    }
}
