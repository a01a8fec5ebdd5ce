//! What the conversation manager's tasks share.

use async_nats::jetstream;
use halyard_platform::Config;
use std::sync::Arc;

/// What start tasks share.
#[derive(Clone)]
pub struct Ctx {
    pub config: Arc<Config>,
    pub nats: async_nats::Client,
    pub js: jetstream::Context,
    pub http: reqwest::Client,
    /// Global skills, read once at start-up.
    pub skills: Arc<Vec<halyard_protocol::event::Skill>>,
    /// Users' own configuration (their git providers' tokens, for clones).
    pub user_kv: jetstream::kv::Store,
    /// Opens the tokens.
    pub vault: Arc<halyard_platform::vault::Vault>,
    /// Environment snapshots: which one a start can start from, and what became of the one it
    /// asked for.
    pub snapshots: jetstream::kv::Store,
}
