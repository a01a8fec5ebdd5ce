//! The agent runner: runs the agent loop of every live conversation. It consumes agent
//! commands (start, user message, pause, resume, delete), calls the LLM, executes tool calls
//! in the conversation's sandbox through its executor, and appends every step to the
//! conversation's event log. It is the only service that holds LLM keys; they never reach a
//! sandbox or an event.
//!
//! One [`conversation::ConversationActor`] per live conversation holds its state, derived from
//! its events ([`history`]); a [`runner::Runner`] actor supervises them, evicts idle ones, and
//! takes over runs whose owner died ([`lease`]: compare-and-set leases in a NATS key-value
//! bucket). Replicas share the command consumer; a command for a run another replica holds is
//! passed to it (`halyard_platform::route`). Appends carry an expected-last-sequence check, so
//! two writers never interleave blindly: a conflicting append first folds in what the other
//! wrote.

pub mod acp;
pub mod ask;
pub mod budget;
pub mod checkpoints;
pub mod condense;
pub mod conversation;
pub mod history;
pub mod lease;
pub mod llm_calls;
pub mod log;
pub mod membership;
pub mod org_budget;
pub mod run_loop;
pub mod runner;
pub mod stuck;
pub mod tools;
pub mod user;

use std::sync::Arc;

use async_nats::jetstream;
use halyard_platform::llm::LlmClient;
use halyard_platform::{BusError, Config, Shutdown};

/// Why the agent runner failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot start the agent runner: {0}")]
    Setup(String),
}

impl AgentError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Bus(e) => e.is_retryable(),
            Self::Setup(_) => false,
        }
    }
}

/// What all conversation actors share.
pub struct Ctx {
    pub config: Arc<Config>,
    pub nats: async_nats::Client,
    pub js: jetstream::Context,
    pub http: reqwest::Client,
    pub llm: LlmClient,
    pub leases: lease::Leases,
    /// Users' own configuration (secrets, LLM profiles, settings).
    pub user_kv: jetstream::kv::Store,
    /// Opens users' sealed secrets and API keys.
    pub vault: halyard_platform::vault::Vault,
    /// The answers being written on this runner, for readers who come in the middle.
    pub answers: run_loop::streaming::Answers,
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

/// Serves agent commands until `shutdown`.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), AgentError> {
    runner::run(config, nats, shutdown).await
}
