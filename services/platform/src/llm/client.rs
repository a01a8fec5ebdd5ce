//! The LLM client: one endpoint (the deployment's or a user's profile), the wire its provider
//! speaks, retries with backoff and a bound on calls in flight.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;

use super::config::{LlmConfig, PROVIDERS};
use super::message::*;
use super::openai::*;
use super::stream::*;
use super::{anthropic, gemini, responses};

pub(crate) fn check_provider(provider: &str) -> Result<(), LlmError> {
    if PROVIDERS.contains(&provider) {
        return Ok(());
    }
    Err(LlmError::Transport(format!("unknown LLM provider `{provider}`: use {}", PROVIDERS.join(", "))))
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
    pub(super) http: reqwest::Client,
    pub(super) config: Arc<LlmConfig>,
    pub(super) permits: Arc<Semaphore>,
    /// A user's profile: errors say the status line only (the body could be an internal
    /// service's answer, see [`crate::outbound`]).
    pub(super) users: bool,
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
    pub fn price(&self) -> Option<&super::config::Price> {
        self.config.prices.get(&self.config.model).or_else(|| super::prices::builtin(&self.config.model))
    }

    /// The same client with `prices` over its own (an organization's, for its conversations).
    pub fn with_prices(&self, prices: &std::collections::BTreeMap<String, super::config::Price>) -> Self {
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
    pub(super) fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
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
    pub(super) async fn refusal(&self, response: reqwest::Response) -> LlmError {
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
