//! The deployment's LLM endpoint as configured (`[llm]`), and what models cost.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
