//! What every handler stands on: [`AppState`] (what a request may reach: the bus, the read
//! models, the accounts ([`registry`]), the user store, the vault, the counters one gateway keeps
//! ([`limits`])) and [`GatewayError`] (why the gateway as a whole failed). It imports only the
//! layers below it (the read models and their live fan-out, and `http`).

pub mod limits;
pub mod registry;

use std::sync::Arc;

use async_nats::jetstream;
use halyard_platform::{BusError, Config};

use crate::projection::Live;
use crate::read_model::store::{self, Store};
use crate::state::limits::{AuthFailures, RateLimiter};
use crate::state::registry::Accounts;

/// Why the gateway failed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("http server: {0}")]
    Http(String),
    #[error("configuration: {0}")]
    Config(String),
}

impl GatewayError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Bus(e) => e.is_retryable(),
            Self::Store(_) | Self::Http(_) | Self::Config(_) => false,
        }
    }
}

/// Shared by all handlers.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub nats: async_nats::Client,
    pub js: jetstream::Context,
    pub store: Store,
    pub live: Arc<Live>,
    pub limiter: Arc<RateLimiter>,
    /// Failed authentications per client address.
    pub auth_failures: Arc<AuthFailures>,
    /// Users and API keys.
    pub accounts: Arc<Accounts>,
    /// Webhook subscriptions (the dispatcher watches the same bucket).
    pub webhooks: jetstream::kv::Store,
    /// The global skills, read once at start-up.
    pub skills: Arc<Vec<halyard_protocol::event::Skill>>,
    /// For sandbox executors (a conversation's changes and files).
    pub http: reqwest::Client,
    /// The port the served-app proxy listens on, if it does (for app links).
    pub apps_port: Option<u16>,
    /// Users' own settings, LLM profiles and sealed secrets.
    pub user_kv: jetstream::kv::Store,
    /// Seals secret values and API keys before they are stored.
    pub vault: Arc<halyard_platform::vault::Vault>,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Arc<Vec<halyard_platform::netaddr::Cidr>>,
    /// WebSocket tickets used on this gateway.
    pub used_tickets: Arc<limits::UsedTickets>,
    /// App links used on this gateway (each opens its app once).
    pub used_app_links: Arc<limits::UsedTickets>,
    /// Automations (`def.<id>`) and their schedules' claimed ticks.
    pub automation_kv: jetstream::kv::Store,
    /// Every automation, followed: hooks are verified without a round trip.
    pub automations: halyard_platform::kv_mirror::Mirror<halyard_protocol::automation::Automation>,
    /// Hook deliveries already taken.
    pub hook_deliveries: jetstream::kv::Store,
    /// Environment snapshots (the supervisors write them; a delete here removes one).
    pub snapshots: jetstream::kv::Store,
    /// The start queue, followed: queued starts' places in line.
    pub start_queue: StartQueue,
}

/// The start queue as the gateway follows it.
#[derive(Clone)]
pub struct StartQueue {
    /// A copy of its bucket, kept by a watch.
    pub copy: Arc<std::sync::Mutex<halyard_platform::start_queue::Mirror>>,
    /// The bucket (administrators set organizations' shares in it).
    pub kv: jetstream::kv::Store,
    /// Changes with every change of the copy: a socket showing a place in line waits on it.
    pub changed: tokio::sync::watch::Receiver<u64>,
}

impl StartQueue {
    /// The place in line of `sandbox` (1: next) and about how many seconds until it is placed;
    /// `(None, None)` if it does not wait.
    pub fn place(&self, sandbox: halyard_protocol::SandboxId) -> (Option<u32>, Option<u64>) {
        self.copy.lock().map(|m| m.place(sandbox)).unwrap_or((None, None))
    }
}
