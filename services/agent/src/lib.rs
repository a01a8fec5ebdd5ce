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
pub mod ctx;
pub mod drive;
pub mod error;
pub mod history;
pub mod lease;
pub mod llm_calls;
pub mod log;
pub mod membership;
pub mod org_budget;
pub mod plugins;
pub mod run_loop;
pub mod runner;
pub mod stuck;
pub mod tools;
pub mod user;

pub use crate::ctx::Ctx;
pub use crate::error::AgentError;
use std::sync::Arc;

use halyard_platform::{Config, Shutdown};

/// Serves agent commands until `shutdown`.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), AgentError> {
    runner::run(config, nats, shutdown).await
}
