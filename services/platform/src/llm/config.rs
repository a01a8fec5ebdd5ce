//! The deployment's LLM endpoint as configured (`[llm]`), and what models cost.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{gemini, responses};
use crate::settings::set;
use crate::settings::{Setting, boolean, network_classes, number};

/// The LLM endpoint of the agent runner.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// The wire: `openai` (chat completions, spoken by most servers) or `anthropic` (the
    /// Messages API).
    pub provider: String,
    /// Base URL, up to and including `/v1` (`https://api.anthropic.com/v1` for Anthropic).
    pub base_url: String,
    pub model: String,
    /// Never leaves the agent runner.
    pub api_key: String,
    /// Use server-sent-event streaming.
    pub stream: bool,
    pub timeout_secs: u64,
    /// Retries after the first attempt for timeouts, 429 and 5xx.
    pub max_retries: u32,
    /// First backoff; doubles each retry.
    pub retry_base_ms: u64,
    /// LLM calls in flight at once, across all conversations of this process.
    pub max_concurrent: usize,
    pub temperature: Option<f32>,
    /// How hard a reasoning model thinks (`low`, `medium`, `high`): OpenAI-compatible servers'
    /// `reasoning_effort`.
    pub reasoning_effort: Option<String>,
    /// Tokens Anthropic's extended thinking may use per answer (0: off; at least 1,024).
    pub thinking_budget_tokens: u64,
    /// USD per million tokens, by model name (`[llm.prices."gpt-4o-mini"]`): what an LLM call
    /// costs. A model without a price has token counts and no cost.
    pub prices: BTreeMap<String, Price>,
    /// The model's context window in tokens (0: known for well-known model families, else
    /// 128,000).
    pub context_window: u64,
    /// Tokens kept free for the answer below the context window (0: the smaller of
    /// `max_output_tokens` and a quarter of the window). Past `window - reserve`, the agent
    /// condenses the oldest part of the history into a summary.
    pub context_reserve: u64,
    /// Longest answer asked for (Anthropic requires one; OpenAI-compatible servers are not
    /// told).
    pub max_output_tokens: u64,
    /// Destination classes users' LLM profiles may point at, otherwise refused: any of
    /// `loopback`, `private`, `link-local` (a self-hosted model on the operator's network).
    pub profile_allow: Vec<String>,
}

/// What a model's tokens cost, in USD per million.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub prompt: f64,
    pub completion: f64,
    /// Prompt tokens served from the provider's cache (the prompt price if absent).
    #[serde(default)]
    pub cached: Option<f64>,
}

impl Price {
    /// The cost of one call's tokens.
    pub fn cost(&self, prompt: u64, completion: u64, cached: u64) -> f64 {
        let cached = cached.min(prompt);
        let per = |tokens: u64, usd: f64| tokens as f64 * usd / 1e6;
        per(prompt - cached, self.prompt) + per(cached, self.cached.unwrap_or(self.prompt)) + per(completion, self.completion)
    }
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            base_url: "http://127.0.0.1:8000/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key: String::new(),
            stream: true,
            timeout_secs: 120,
            max_retries: 3,
            retry_base_ms: 1000,
            max_concurrent: 64,
            temperature: None,
            reasoning_effort: None,
            thinking_budget_tokens: 0,
            prices: BTreeMap::new(),
            provider: "openai".into(),
            context_window: 0,
            context_reserve: 0,
            max_output_tokens: 8192,
            profile_allow: Vec::new(),
        }
    }
}

/// The wires a profile's `provider` may name: OpenAI-compatible chat completions, Anthropic's
/// Messages API, OpenAI's Responses API and Google's Gemini API.
pub const PROVIDERS: &[&str] = &["openai", "anthropic", responses::PROVIDER, gemini::PROVIDER];

/// `HALYARD_*` settings of the deployment's LLM endpoint.
pub(crate) const SETTINGS: &[Setting<LlmConfig>] = &[
    set!(
        "LLM_BASE_URL",
        "`http://127.0.0.1:8000/v1`",
        "the endpoint, up to `/v1` (`https://api.anthropic.com/v1` for Anthropic)",
        |c, v| c.base_url = v.to_owned()
    ),
    set!("LLM_MODEL", "`gpt-4o-mini`", "model name", |c, v| c.model = v.to_owned()),
    set!("LLM_API_KEY", "(none)", "stays in the agent runner; never reaches a sandbox or an event", |c, v| c.api_key = v.to_owned()),
    set!("LLM_STREAM", "`true`", "server-sent-event streaming", |c, v| c.stream = boolean(v)?),
    set!("LLM_TIMEOUT_SECS", "`120`", "how long one LLM request may take", |c, v| c.timeout_secs = number(v, "seconds")?),
    set!("LLM_MAX_RETRIES", "`3`", "retries of timeouts, 429, 5xx", |c, v| c.max_retries = number(v, "a count")?),
    set!("LLM_RETRY_BASE_MS", "`1000`", "retries of timeouts, 429, 5xx", |c, v| c.retry_base_ms = number(v, "milliseconds")?),
    set!("LLM_MAX_CONCURRENT", "`64`", "LLM calls in flight per agent runner", |c, v| c.max_concurrent = number(v, "a count")?),
    set!(
        "LLM_PROFILE_ALLOW",
        "(none)",
        "destination classes users' LLM profiles may point at: `loopback`, `private`, `link-local`",
        |c, v| c.profile_allow = network_classes(v)?
    ),
    set!(
        "LLM_PROVIDER",
        "`openai`",
        "the wire: `openai` (chat completions: OpenAI, vLLM, llama.cpp, Ollama, LiteLLM...), `anthropic` (Messages API, with prompt caching), `openai-responses` (OpenAI's Responses API) or `gemini` (Google's Gemini API, base URL `https://generativelanguage.googleapis.com/v1beta`)",
        |c, v| {
            if !PROVIDERS.contains(&v) {
                return Err("expected `openai`, `anthropic`, `openai-responses` or `gemini`".into());
            }
            c.provider = v.to_owned()
        }
    ),
    set!("LLM_CONTEXT_WINDOW", "known per model family, else `128000`", "the model's context window in tokens", |c, v| c.context_window =
        number(v, "tokens")?),
    set!(
        "LLM_CONTEXT_RESERVE",
        "min(`MAX_OUTPUT_TOKENS`, window / 4)",
        "tokens kept free for the answer; past window minus reserve the history is condensed",
        |c, v| c.context_reserve = number(v, "tokens")?
    ),
    set!("LLM_MAX_OUTPUT_TOKENS", "`8192`", "longest answer asked for (sent to Anthropic, which requires it)", |c, v| c
        .max_output_tokens =
        number(v, "tokens")?),
    // `prompt,completion[,cached]` for the configured model.
    set!(
        "LLM_PRICE",
        "(none)",
        "`prompt,completion[,cached]` USD per million tokens of `HALYARD_LLM_MODEL` (more models: `[llm.prices.\"name\"]` in the TOML file)",
        |c, v| {
            const EXPECTED: &str = "expected `prompt,completion[,cached]` in USD per million tokens, like 0.15,0.6,0.075";
            let parts: Vec<f64> = v.split(',').map(|p| p.trim().parse::<f64>()).collect::<Result<_, _>>().map_err(|_| EXPECTED)?;
            let price = match parts[..] {
                [prompt, completion] => Price { prompt, completion, cached: None },
                [prompt, completion, cached] => Price { prompt, completion, cached: Some(cached) },
                _ => return Err(EXPECTED.into()),
            };
            c.prices.insert(c.model.clone(), price);
        }
    ),
];
