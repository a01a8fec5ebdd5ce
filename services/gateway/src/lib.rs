//! The gateway: Halyard's HTTP and WebSocket API. It authenticates every request and scopes it
//! to its user, turns writes into durable commands on the bus, and serves reads from sled read
//! models that it derives from the bus ([`projection`]) and could rebuild by replay.
//!
//! Routes are in [`app`]; errors become responses in one place ([`error`]); the OpenAPI
//! document is `openapi.json` beside this file, served at `/api/v1/openapi.json`. The handlers
//! are grouped by what they serve: [`conversations`], [`workspace`] (a conversation's sandbox as
//! its owner reaches it), [`settings`] (what a user sets up), [`accounts`] (who is calling),
//! [`webhooks`], [`sandboxes`] and [`mcp`]; what several of them share is in [`common`], and the
//! event log's reader in [`events`]. No module imports another that imports it back.

pub mod accounts;
pub mod common;
pub mod conversations;
pub mod error;
pub mod events;
pub mod http_metrics;
pub mod mcp;
pub mod projection;
pub mod sandboxes;
pub mod server;
pub mod settings;
pub mod store;
pub mod web;
pub mod webhooks;
pub mod workspace;

// The handlers' modules, by the short names the route table uses.
use accounts::{admin, session, tickets};
use conversations::{export, routes, starts, ws};
use settings::{defaults, git_providers, mcp_servers, repositories, secrets};
use workspace::{apps, files, terminal};

use std::sync::Arc;

use async_nats::jetstream;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use halyard_platform::{BusError, Config, Shutdown};

use crate::accounts::auth::{AuthFailures, RateLimiter};
use crate::accounts::registry::Accounts;
use crate::error::ApiError;
use crate::projection::Live;
use crate::store::Store;

/// The OpenAPI document of this API.
pub const OPENAPI: &str = include_str!("openapi.json");

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
    pub used_tickets: Arc<tickets::UsedTickets>,
    /// App links used on this gateway (each opens its app once).
    pub used_app_links: Arc<tickets::UsedTickets>,
}

/// The router.
pub fn app(state: AppState) -> Router {
    let max_body = state.config.gateway.max_body_bytes;
    let api = Router::new()
        .route("/conversations", post(starts::start_conversation).get(routes::list_conversations))
        .route("/conversations/count", get(routes::count_conversations))
        .route("/conversations/{id}/retry", post(starts::retry_start))
        .route("/conversations/{id}", get(routes::get_conversation).delete(routes::delete).patch(routes::patch_conversation))
        // A message may carry images: the body limit and room for them.
        .route(
            "/conversations/{id}/messages",
            post(routes::send_message).layer(DefaultBodyLimit::max(max_body.saturating_add(routes::IMAGE_ALLOWANCE))),
        )
        .route("/conversations/{id}/pause", post(routes::pause))
        .route("/conversations/{id}/resume", post(routes::resume))
        .route("/conversations/{id}/interrupt", post(routes::interrupt))
        .route("/conversations/{id}/ask", post(routes::ask))
        .route("/conversations/{id}/confirm", post(routes::confirm))
        .route("/conversations/{id}/reject", post(routes::reject))
        .route("/conversations/{id}/confirmation-policy", axum::routing::put(routes::set_confirmation_policy))
        .route("/conversations/{id}/llm-profile", axum::routing::put(routes::set_llm_profile))
        .route("/settings", get(defaults::get_settings).put(defaults::put_settings))
        .route("/llm-profiles", get(defaults::list_profiles))
        .route("/llm-profiles/{name}", get(defaults::get_profile).put(defaults::put_profile).delete(defaults::delete_profile))
        .route("/llm-profiles/{name}/test", post(defaults::test_profile))
        .route("/git-providers", get(git_providers::list))
        .route("/git-providers/{name}", get(git_providers::get_one).put(git_providers::put).delete(git_providers::delete))
        .route("/mcp-servers", get(mcp_servers::list))
        .route("/repositories", get(repositories::list))
        .route("/repositories/branches", get(repositories::branches))
        .route("/mcp-servers/{name}", get(mcp_servers::get_one).put(mcp_servers::put).delete(mcp_servers::delete))
        .route("/mcp-servers/{name}/test", post(mcp_servers::test))
        .route("/secrets", get(secrets::list))
        .route("/secrets/{name}", get(secrets::get_one).put(secrets::put).delete(secrets::delete))
        .route("/skills", get(routes::list_skills))
        .route("/conversations/{id}/changes", get(files::changes))
        .route("/conversations/{id}/files", get(files::files).put(files::upload))
        .route("/conversations/{id}/files/raw", get(files::download))
        .route("/conversations/{id}/archive", get(files::archive))
        .route("/conversations/{id}/terminal/ws", get(terminal::terminal_ws))
        .route("/conversations/{id}/apps/{name}", post(apps::open))
        .route("/conversations/{id}/events", get(routes::list_events))
        .route("/conversations/{id}/events/count", get(routes::count_events))
        .route("/conversations/{id}/export", get(export::export))
        .route("/conversations/{id}/events/{seq}", get(routes::get_event))
        .route("/conversations/{id}/events/ws", get(ws::events_ws))
        .route("/start-tasks/{id}", get(routes::get_task))
        .route("/sandboxes", get(sandboxes::list))
        .route("/sandboxes/{id}", get(sandboxes::get_one).delete(sandboxes::delete))
        .route("/sandboxes/{id}/pause", post(sandboxes::pause))
        .route("/sandboxes/{id}/resume", post(sandboxes::resume))
        .route("/sandbox-specs", get(sandboxes::specs))
        .route("/webhooks", post(webhooks::create).get(webhooks::list))
        .route("/webhooks/{id}", get(webhooks::get_one).patch(webhooks::patch).delete(webhooks::delete))
        .route("/webhooks/{id}/rotate-secret", post(webhooks::rotate))
        .route("/webhooks/{id}/deliveries", get(webhooks::deliveries))
        .route("/webhooks/{id}/deliveries/{delivery_id}/retry", post(webhooks::retry))
        .route("/me", get(admin::me))
        .route("/me/keys", get(admin::my_keys).post(admin::create_my_key))
        .route("/me/keys/{id}", axum::routing::delete(admin::revoke_my_key))
        .route("/session", post(session::sign_in).delete(session::sign_out))
        .route("/session/step-up", post(session::step_up))
        .route("/ws-tickets", post(tickets::create))
        .route("/admin/users", post(admin::create_user).get(admin::list_users))
        .route("/admin/users/{name}", get(admin::get_user).patch(admin::patch_user))
        .route("/admin/users/{name}/keys", post(admin::create_key).get(admin::list_keys))
        .route("/admin/keys/{id}", axum::routing::delete(admin::revoke_key))
        .route("/openapi.json", get(openapi))
        // What the API answers is data for one reader: never sniffed into something else, never
        // kept by a cache (keys and webhook secrets are shown once).
        .layer(axum::middleware::map_response(|mut res: axum::response::Response| async move {
            res.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
            res
        }));
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .nest("/api/v1", api)
        // Halyard's own MCP server, for agent runners (a conversation's key, not a user's).
        .route("/mcp", mcp::service(state.clone()))
        .route_layer(axum::middleware::from_fn(http_metrics::track))
        // The web workspace, and its routes (any other path) that the browser app handles.
        .fallback(web::serve)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::map_response(|mut res: axum::response::Response| async move {
            res.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
            res
        }))
        .with_state(state)
}

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

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

async fn readyz(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    if state.nats.connection_state() != async_nats::connection::State::Connected {
        return Err(ApiError::unavailable("not connected to NATS"));
    }
    Ok(Json(json!({"status": "ready"})))
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
    let store = Store::open(&config.data_dir.join("gateway"))?;
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
        http: reqwest::Client::new(),
        apps_port: apps_listener.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.port()),
        user_kv,
        vault,
        trusted_proxies: Arc::new(config_proxies.iter().filter_map(|c| halyard_platform::netaddr::Cidr::parse(c)).collect()),
        used_tickets: Arc::default(),
        used_app_links: Arc::default(),
    };

    let limits = server::Limits::from_config(&state.config.gateway);
    let (caught_up, mut until_caught_up) = tokio::sync::watch::channel(false);
    let mut projection = tokio::spawn(projection::run(js, store.clone(), live, caught_up, shutdown.clone()));
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
    let apps = apps_listener.map(|l| {
        let router = Router::new().fallback(apps::proxy).with_state(state.clone());
        tokio::spawn(server::serve(l, router, limits, shutdown.clone()))
    });
    server::serve(listener, app(state.clone()), limits, shutdown.clone()).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_may_not_share_a_site_with_the_web_workspace() {
        let mut c = Config::default();
        assert!(check_sites(&c).is_ok(), "127.0.0.1 and *.localhost are two sites");
        c.http_addr = "localhost:3000".into();
        assert!(check_sites(&c).is_err(), "localhost and *.localhost are one site");
        c.gateway.public_url = "https://halyard.example.com".into();
        c.apps_url = "https://apps.example.com".into();
        let err = check_sites(&c).unwrap_err().to_string();
        assert!(err.contains("example.com") && err.contains("HALYARD_APPS_URL"), "{err}");
        c.apps_url = "https://example-apps.dev".into();
        assert!(check_sites(&c).is_ok());
        c.apps_addr = String::new();
        c.apps_url = "https://apps.example.com".into();
        assert!(check_sites(&c).is_ok(), "no apps served, nothing to share");
    }
}
