//! The gateway: Halyard's HTTP and WebSocket API. It authenticates every request and scopes it
//! to its user, turns writes into durable commands on the bus, and serves reads from sled read
//! models that it derives from the bus ([`projection`]) and could rebuild by replay.
//!
//! In layers, each importing only those below it (a test, `layers`, checks the imports):
//!
//! - [`router`]: the route table, the only importer of handlers; the OpenAPI document is
//!   generated from the same list and served at `/api/v1/openapi.json`;
//! - [`api`]: thin handlers and their request and response types;
//! - [`domain`]: what handlers of several kinds do with Halyard's state;
//! - [`audit`] (the trail of what everyone did) and [`auth`] (who is calling, what they may
//!   reach, the running limits);
//! - [`state`]: what a request may reach ([`state::AppState`]) and the counters one gateway keeps;
//! - [`projection`]: the fold of the bus into the read models, and its live fan-out;
//! - [`read_model`]: the stored rows and the event log's reader;
//! - [`http`]: errors as responses (in one place), OpenAPI parts, the server, pages, field checks.
//!
//! This file starts it all: [`serve`] and [`run`].

pub mod api;
pub mod audit;
pub mod auth;
pub mod domain;
pub mod http;
pub mod projection;
pub mod read_model;
pub mod router;
pub mod state;

use std::sync::Arc;

use async_nats::jetstream;
use axum::Router;

use halyard_platform::{Config, Shutdown};

use crate::api::workspace::apps;
use crate::projection::Live;
use crate::read_model::store::Store;
pub use crate::router::app;
pub use crate::router::openapi_document;
pub use crate::state::AppState;
pub use crate::state::GatewayError;
use crate::state::limits::{AuthFailures, RateLimiter};
use crate::state::registry::Accounts;

/// Refuses a configuration that would let an agent's app share a site with the web workspace:
/// apps served from a host of the same registrable domain can be sent the workspace's
/// SameSite cookies and set cookies for it.
pub fn check_sites(config: &Config) -> Result<(), GatewayError> {
    use halyard_platform::netaddr::{host_of, site};
    let ui = if config.gateway.public_url.is_empty() { config.http_addr.as_str() } else { config.gateway.public_url.as_str() };
    let ui_site = site(host_of(ui));
    let apps_site = if config.apps_url.is_empty() { "localhost".to_owned() } else { site(host_of(&config.apps_url)) };
    if !config.apps_addr.is_empty() && ui_site == apps_site {
        return Err(GatewayError::Config(format!(
            "the web workspace ({ui}) and the agents' apps ({}) share the site `{ui_site}`: an app could then set or be sent \
             the workspace's cookies. Serve apps from another registrable domain (HALYARD_APPS_URL, e.g. \
             https://halyard-apps.example) or set HALYARD_APPS_ADDR empty to serve none",
            if config.apps_url.is_empty() { "http://*.localhost" } else { config.apps_url.as_str() }
        )));
    }
    Ok(())
}

/// Longest wait for the read models to catch up before serving.
const CATCH_UP_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves on `listener` until `shutdown`, projecting the bus into the read models meanwhile.
pub async fn serve(
    config: Arc<Config>,
    nats: async_nats::Client,
    listener: tokio::net::TcpListener,
    apps_listener: Option<tokio::net::TcpListener>,
    shutdown: Shutdown,
) -> Result<(), GatewayError> {
    check_sites(&config)?;
    let config_proxies = config.gateway.trusted_proxies.clone();
    let js = jetstream::new(nats.clone());
    let store = Store::open(&config.data_dir.join("gateway"), config.gateway.read_model_cache_mb << 20)?;
    let live = Arc::new(Live::default());
    let limiter = Arc::new(RateLimiter::new(config.gateway.rate_limit_per_minute));
    let auth_failures = Arc::new(AuthFailures::new(config.gateway.auth_failures_per_minute));
    let accounts = Accounts::open(&js, &config, shutdown.clone()).await?;
    let webhooks = js
        .get_key_value(halyard_protocol::subjects::WEBHOOK_BUCKET)
        .await
        .map_err(|e| GatewayError::Http(format!("webhook bucket: {e}")))?;
    let user_kv =
        js.get_key_value(halyard_protocol::subjects::USER_BUCKET).await.map_err(|e| GatewayError::Http(format!("user bucket: {e}")))?;
    let bucket = |name: &'static str| {
        let js = js.clone();
        async move { js.get_key_value(name).await.map_err(|e| GatewayError::Http(format!("{name} bucket: {e}"))) }
    };
    let automation_kv = bucket(halyard_protocol::subjects::AUTOMATION_BUCKET).await?;
    let hook_deliveries = bucket(halyard_protocol::subjects::HOOK_DELIVERY_BUCKET).await?;
    let snapshots = bucket(halyard_protocol::environment::SNAPSHOT_BUCKET).await?;
    let automations = halyard_platform::kv_mirror::Mirror::follow(automation_kv.clone(), "def.", shutdown.clone()).await?;
    let start_queue = {
        let copy = Arc::new(std::sync::Mutex::new(halyard_platform::start_queue::Mirror::default()));
        let kv = bucket(halyard_protocol::queue::START_QUEUE_BUCKET).await?;
        let (tell, changed) = tokio::sync::watch::channel(0u64);
        let watch = halyard_platform::start_queue::watch(kv.clone(), copy.clone(), move || tell.send_modify(|n| *n += 1));
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = watch => {}
                _ = shutdown.wait() => {}
            }
        });
        crate::state::StartQueue { copy, kv, changed }
    };
    let vault = Arc::new(halyard_platform::vault::Vault::new(&config.secret).map_err(|e| GatewayError::Http(e.to_string()))?);
    let skills = Arc::new(config.skills_dir.as_deref().map(halyard_platform::skills::load_dir).unwrap_or_default());
    let state = AppState {
        config,
        nats,
        js: js.clone(),
        store: store.clone(),
        live: live.clone(),
        limiter,
        auth_failures,
        accounts,
        webhooks,
        skills,
        http: halyard_platform::executor_client::http_client().build().map_err(|e| GatewayError::Http(format!("http client: {e}")))?,
        apps_port: apps_listener.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.port()),
        user_kv,
        vault,
        trusted_proxies: Arc::new(config_proxies.iter().filter_map(|c| halyard_platform::netaddr::Cidr::parse(c)).collect()),
        used_tickets: Arc::default(),
        used_app_links: Arc::default(),
        automation_kv,
        automations,
        hook_deliveries,
        snapshots,
        start_queue,
    };

    let limits = crate::http::server::Limits::from_config(&state.config.gateway);
    let (caught_up, mut until_caught_up) = tokio::sync::watch::channel(false);
    let view_idle = std::time::Duration::from_secs(state.config.agent.idle_evict_secs.max(1));
    let mut projection = tokio::spawn(projection::run(js, store.clone(), live, view_idle, caught_up, shutdown.clone()));
    // Serve once the read models have caught up with the bus (after a crash, sled may be a
    // moment behind), so a restart never shows older state than before it. Connections wait
    // in the listener's backlog meanwhile. A long backlog is served from anyway after a while.
    tokio::select! {
        _ = until_caught_up.wait_for(|done| *done) => {}
        _ = tokio::time::sleep(CATCH_UP_PATIENCE) => {
            tracing::warn!("the read models are still catching up with the bus; serving anyway");
        }
        ended = &mut projection => return projection_outcome(ended),
    }
    tokio::spawn(crate::audit::keep(store.clone(), state.config.gateway.audit_retention_days, shutdown.clone()));
    // Organizations made before their members were copied for the agent runner get theirs now.
    let mirrored = state.clone();
    tokio::spawn(async move {
        for (_, org) in mirrored.accounts.all_orgs() {
            if let Err(e) = crate::api::accounts::org_budgets::mirror_members(&mirrored, &org).await {
                tracing::warn!(org = %org.name, error = ?e, "the organization's members could not be copied for the agent runner");
            }
        }
    });
    let apps = apps_listener.map(|l| {
        let router = Router::new().fallback(apps::proxy).with_state(state.clone());
        tokio::spawn(crate::http::server::serve(l, router, limits, shutdown.clone()))
    });
    crate::http::server::serve(listener, app(state.clone()), limits, shutdown.clone()).await;
    if let Some(apps) = apps {
        let _ = apps.await;
    }
    let projected = projection_outcome(projection.await);
    store.flush().await;
    projected
}

/// How the projection task ended.
fn projection_outcome(ended: Result<Result<(), halyard_platform::BusError>, tokio::task::JoinError>) -> Result<(), GatewayError> {
    match ended {
        Ok(r) => r.map_err(GatewayError::from),
        Err(e) => Err(GatewayError::Http(format!("projection task: {e}"))),
    }
}

/// Binds `config.http_addr` (and `config.apps_addr`, unless empty) and serves.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), GatewayError> {
    let listener = bind(&config.http_addr).await?;
    let apps = if config.apps_addr.is_empty() { None } else { Some(bind(&config.apps_addr).await?) };
    serve(config, nats, listener, apps, shutdown).await
}

/// A listener on `addr`, or why not.
pub async fn bind(addr: &str) -> Result<tokio::net::TcpListener, GatewayError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| GatewayError::Http(format!("cannot listen on {addr}: {e}")))
}
