//! The title setter's settings: whether an LLM names conversations, and which.

use serde::{Deserialize, Serialize};

use crate::llm::LlmConfig;
use crate::settings::set;
use crate::settings::{Setting, boolean};

/// The title setter's LLM (defaults to the agent's endpoint and model).
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TitleConfig {
    /// Ask an LLM for titles; with false, titles are the trimmed first line of the message.
    pub use_llm: bool,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<String>,
}

impl Default for TitleConfig {
    fn default() -> Self {
        Self { use_llm: true, base_url: None, model: None, api_key: None }
    }
}

impl TitleConfig {
    /// The LLM settings for titles: these overrides on top of the agent's.
    pub fn llm(&self, agent: &LlmConfig) -> LlmConfig {
        LlmConfig {
            base_url: self.base_url.clone().unwrap_or_else(|| agent.base_url.clone()),
            model: self.model.clone().unwrap_or_else(|| agent.model.clone()),
            api_key: self.api_key.clone().unwrap_or_else(|| agent.api_key.clone()),
            stream: false,
            timeout_secs: 20,
            max_retries: 1,
            retry_base_ms: agent.retry_base_ms,
            max_concurrent: 8,
            temperature: None,
            // A title needs no deliberation.
            reasoning_effort: None,
            thinking_budget_tokens: 0,
            prices: agent.prices.clone(),
            provider: agent.provider.clone(),
            context_window: agent.context_window,
            context_reserve: agent.context_reserve,
            max_output_tokens: 200,
            profile_allow: Vec::new(),
        }
    }
}

/// `HALYARD_*` settings of the title setter.
pub(crate) const SETTINGS: &[Setting<TitleConfig>] = &[
    set!("TITLE_USE_LLM", "`true`", "titles from an LLM (else the first line)", |c, v| c.use_llm = boolean(v)?),
    set!("TITLE_MODEL", "agent's", "titles from an LLM (else the first line)", |c, v| c.model = Some(v.to_owned())),
    set!("TITLE_BASE_URL", "agent's", "titles from an LLM (else the first line)", |c, v| c.base_url = Some(v.to_owned())),
];
