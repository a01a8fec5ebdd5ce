//! What the agent runner's actors and tasks share.

use async_nats::jetstream;
use halyard_platform::Config;
use halyard_platform::llm::LlmClient;
use std::sync::Arc;

/// What all conversation actors share.
pub struct Ctx {
    pub config: Arc<Config>,
    pub nats: async_nats::Client,
    pub js: jetstream::Context,
    pub http: reqwest::Client,
    pub llm: LlmClient,
    pub leases: crate::lease::Leases,
    /// Users' own configuration (secrets, LLM profiles, settings).
    pub user_kv: jetstream::kv::Store,
    /// Opens users' sealed secrets and API keys.
    pub vault: Arc<halyard_platform::vault::Vault>,
    /// The answers being written on this runner, for readers who come in the middle.
    pub answers: Answers,
}

impl Ctx {
    /// The deployment's default limits for a conversation that names none.
    pub fn default_budget(&self) -> Option<halyard_protocol::event::Budget> {
        let a = &self.config.agent;
        let budget = halyard_protocol::event::Budget {
            max_budget_usd: (a.max_budget_usd > 0.0).then_some(a.max_budget_usd),
            max_tokens: (a.max_tokens > 0).then_some(a.max_tokens),
        };
        (budget != Default::default()).then_some(budget)
    }
}

/// The answers being written on this runner: each one's text so far, as one whole piece.
#[derive(Default)]
pub struct Answers(std::sync::Mutex<std::collections::HashMap<halyard_protocol::ConversationId, halyard_protocol::event::AnswerDelta>>);

impl Answers {
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&mut std::collections::HashMap<halyard_protocol::ConversationId, halyard_protocol::event::AnswerDelta>) -> T,
    ) -> T {
        f(&mut self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}
