//! The gateway: Halyard's HTTP and WebSocket API. It authenticates every request and scopes it
//! to its user, turns writes into durable commands on the bus, and serves reads from sled read
//! models that it derives from the bus ([`projection`]) and could rebuild by replay.
//!
//! Routes are in [`app`]; errors become responses in one place ([`error`]); the OpenAPI
//! document is generated from the handlers as [`app`] registers them ([`api_doc`]) and served at
//! `/api/v1/openapi.json`. The handlers
//! are grouped by what they serve: [`conversations`], [`workspace`] (a conversation's sandbox as
//! its owner reaches it), [`settings`] (what a user sets up), [`accounts`] (who is calling),
//! [`webhooks`], [`automations`] (and their public hooks), [`sandboxes`] and [`mcp`]; what several of them share is in [`common`], and the
//! event log's reader in [`events`]. No module imports another that imports it back.

pub mod accounts;
pub mod api_doc;
pub mod automations;
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
use automations::{hooks, routes as automation_routes, slack_links};
use conversations::{export, images, plan, routes, share, starts, ws};
use settings::{agent_logins, defaults, git_providers, llm_profiles, mcp_servers, repositories, secrets};
use workspace::{apps, files, terminal};

use std::sync::Arc;

use async_nats::jetstream;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::{Json, Router};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use halyard_platform::{BusError, Config, Shutdown};

use crate::accounts::auth::{AuthFailures, RateLimiter};
use crate::accounts::registry::Accounts;
use crate::error::ApiError;
use crate::projection::Live;
use crate::store::Store;

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
    /// Automations (`def.<id>`) and their schedules' claimed ticks.
    pub automation_kv: jetstream::kv::Store,
    /// Every automation, followed: hooks are verified without a round trip.
    pub automations: halyard_platform::kv_mirror::Mirror<halyard_protocol::automation::Automation>,
    /// Hook deliveries already taken.
    pub hook_deliveries: jetstream::kv::Store,
}

/// The routes of `/api/v1`, each registered from its handler's `#[utoipa::path]`: the router and
/// the OpenAPI document come from the same list, so neither can name a route the other lacks.
fn api_routes(max_body: usize) -> OpenApiRouter<AppState> {
    // A message may carry images: the body limit and room for them.
    let (schemas, paths, send_message) = routes!(routes::send_message);
    let message_limit = DefaultBodyLimit::max(max_body.saturating_add(routes::IMAGE_ALLOWANCE));
    OpenApiRouter::new()
        .routes(routes!(starts::start_conversation, routes::list_conversations))
        .routes(routes!(routes::count_conversations))
        .routes(routes!(crate::conversations::agents::list_agents))
        .routes(routes!(crate::settings::custom_agents::put, crate::settings::custom_agents::delete))
        .routes(routes!(crate::settings::custom_agents::list_org))
        .routes(routes!(crate::settings::custom_agents::put_org, crate::settings::custom_agents::delete_org))
        .routes(routes!(starts::retry_start))
        .routes(routes!(starts::fork_conversation))
        .routes(routes!(routes::get_conversation, routes::delete, routes::patch_conversation))
        .routes((schemas, paths, send_message.layer(message_limit)))
        .routes(routes!(routes::pause))
        .routes(routes!(routes::resume))
        .routes(routes!(routes::interrupt))
        .routes(routes!(routes::ask))
        .routes(routes!(routes::confirm))
        .routes(routes!(routes::reject))
        .routes(routes!(routes::set_confirmation_policy))
        .routes(routes!(routes::set_llm_profile))
        .routes(routes!(routes::restore))
        .routes(routes!(crate::conversations::hooks::hooks_consent))
        .routes(routes!(crate::conversations::hooks::list_hook_consents))
        .routes(routes!(crate::conversations::hooks::delete_hook_consent))
        .routes(routes!(plan::get_tasks))
        .routes(routes!(images::screenshot))
        .routes(routes!(images::latest))
        .routes(routes!(images::image))
        .routes(routes!(defaults::get_settings, defaults::put_settings))
        .routes(routes!(llm_profiles::list_profiles))
        .routes(routes!(llm_profiles::get_profile, llm_profiles::put_profile, llm_profiles::delete_profile))
        .routes(routes!(llm_profiles::test_profile, llm_profiles::list_models))
        .routes(routes!(git_providers::list))
        .routes(routes!(git_providers::get_one, git_providers::put, git_providers::delete))
        .routes(routes!(repositories::list))
        .routes(routes!(repositories::branches))
        .routes(routes!(mcp_servers::list))
        .routes(routes!(mcp_servers::get_one, mcp_servers::put, mcp_servers::delete))
        .routes(routes!(mcp_servers::test))
        .routes(routes!(secrets::list))
        .routes(routes!(secrets::get_one, secrets::put, secrets::delete))
        .routes(routes!(agent_logins::list))
        .routes(routes!(agent_logins::put, agent_logins::delete))
        .routes(routes!(routes::list_skills))
        .routes(routes!(files::changes))
        .routes(routes!(files::files, files::upload))
        .routes(routes!(files::download))
        .routes(routes!(files::archive))
        .routes(routes!(terminal::terminal_ws))
        .routes(routes!(apps::open))
        .routes(routes!(apps::vscode))
        .routes(routes!(routes::list_events))
        .routes(routes!(routes::count_events))
        .routes(routes!(export::export))
        .routes(routes!(routes::get_event))
        .routes(routes!(ws::events_ws))
        .routes(routes!(share::share, share::share_state, share::unshare))
        .routes(routes!(share::shared))
        .routes(routes!(share::shared_events))
        .routes(routes!(share::shared_events_ws))
        .routes(routes!(share::shared_changes))
        .routes(routes!(routes::get_task))
        .routes(routes!(sandboxes::list))
        .routes(routes!(sandboxes::get_one, sandboxes::delete))
        .routes(routes!(sandboxes::pause))
        .routes(routes!(sandboxes::resume))
        .routes(routes!(sandboxes::specs))
        .routes(routes!(webhooks::create, webhooks::list))
        .routes(routes!(webhooks::get_one, webhooks::patch, webhooks::delete))
        .routes(routes!(webhooks::rotate))
        .routes(routes!(webhooks::deliveries))
        .routes(routes!(webhooks::retry))
        .routes(routes!(automation_routes::create, automation_routes::list))
        .routes(routes!(automation_routes::get_one, automation_routes::patch, automation_routes::delete))
        .routes(routes!(automation_routes::runs))
        .routes(routes!(hooks::receive))
        .routes(routes!(slack_links::get_one, slack_links::link))
        .routes(routes!(crate::automations::slack_sign_in::start))
        .routes(routes!(crate::automations::slack_sign_in::callback))
        .routes(routes!(admin::me))
        .routes(routes!(admin::my_keys, admin::create_my_key))
        .routes(routes!(admin::revoke_my_key))
        .routes(routes!(session::sign_in, session::sign_out))
        .routes(routes!(session::step_up))
        .routes(routes!(tickets::create))
        .routes(routes!(admin::create_user, admin::list_users))
        .routes(routes!(admin::get_user, admin::patch_user))
        .routes(routes!(admin::create_key, admin::list_keys))
        .routes(routes!(admin::revoke_key))
        .routes(routes!(accounts::audit::list))
        .routes(routes!(accounts::usage::mine))
        .routes(routes!(accounts::usage::all))
        .routes(routes!(accounts::usage::org))
        .routes(routes!(accounts::orgs::create, accounts::orgs::list))
        .routes(routes!(accounts::orgs::get_one))
        .routes(routes!(accounts::orgs::list_members, accounts::orgs::add_member))
        .routes(routes!(accounts::orgs::set_role, accounts::orgs::remove_member))
        .routes(routes!(accounts::orgs::audit_trail))
        .routes(routes!(accounts::invitations::mine))
        .routes(routes!(accounts::invitations::accept))
        .routes(routes!(accounts::invitations::decline))
        .routes(routes!(accounts::org_profiles::get_settings, accounts::org_profiles::put_settings))
        .routes(routes!(accounts::org_profiles::list_profiles))
        .routes(routes!(accounts::org_budgets::list_prices))
        .routes(routes!(accounts::org_budgets::put_price, accounts::org_budgets::delete_price))
        .routes(routes!(accounts::org_budgets::status))
        .routes(routes!(accounts::sso::status))
        .routes(routes!(accounts::sso::start))
        .routes(routes!(accounts::sso::callback))
        .routes(routes!(accounts::org_secrets::list))
        .routes(routes!(accounts::org_mcp::list))
        .routes(routes!(accounts::org_git::list))
        .routes(routes!(accounts::org_skills::list))
        .routes(routes!(accounts::org_skills::put, accounts::org_skills::delete))
        .routes(routes!(accounts::org_git::put, accounts::org_git::delete))
        .routes(routes!(accounts::org_mcp::put, accounts::org_mcp::delete))
        .routes(routes!(conversations::org_shared::list))
        .routes(routes!(accounts::org_secrets::put, accounts::org_secrets::delete))
        .routes(routes!(accounts::org_profiles::put_profile, accounts::org_profiles::delete_profile))
        .routes(routes!(openapi))
}

/// The whole document: `/api/v1`'s routes, the health checks and Halyard's own MCP server.
fn document(api: OpenApiRouter<AppState>) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (api, mut doc) = OpenApiRouter::with_openapi(api_doc::ApiDoc::openapi())
        .nest("/api/v1", api)
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .split_for_parts();
    doc.merge(mcp::McpDoc::openapi());
    (api, doc)
}

/// The OpenAPI document of this API, as served at `/api/v1/openapi.json`.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    document(api_routes(0)).1
}

/// The router.
pub fn app(state: AppState) -> Router {
    let max_body = state.config.gateway.max_body_bytes;
    let (api, doc) = document(api_routes(max_body));
    let doc: Arc<str> = doc.to_pretty_json().unwrap_or_default().into();
    let api = api
        .layer(axum::Extension(OpenApiJson(doc)))
        // What the API answers is data for one reader: never sniffed into something else, never
        // kept by a cache (keys and webhook secrets are shown once).
        .layer(axum::middleware::map_response(|mut res: axum::response::Response| async move {
            res.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
            res
        }));
    api
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

/// The document, made once when the router is.
#[derive(Clone)]
struct OpenApiJson(Arc<str>);

/// `GET /api/v1/openapi.json`: this document, generated from the handlers.
#[utoipa::path(get, path = "/openapi.json", tag = "meta", security(()), responses((status = 200, description = "the OpenAPI document", content_type = "application/json", body = Object)))]
async fn openapi(axum::Extension(OpenApiJson(doc)): axum::Extension<OpenApiJson>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], doc.to_string())
}

/// What `/healthz` and `/readyz` answer.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct Health {
    /// `ok` (the process serves) or `ready` (and reaches the bus).
    status: &'static str,
}

/// `GET /healthz`: the process serves.
#[utoipa::path(get, path = "/healthz", tag = "meta", security(()), responses((status = 200, body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// `GET /readyz`: the process serves and reaches NATS.
#[utoipa::path(get, path = "/readyz", tag = "meta", security(()), responses((status = 200, body = Health), (status = 503, description = "not connected to the bus", body = api_doc::ErrorBody)))]
async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if state.nats.connection_state() != async_nats::connection::State::Connected {
        return Err(ApiError::unavailable("not connected to NATS"));
    }
    Ok(Json(Health { status: "ready" }))
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
    let bucket = |name: &'static str| {
        let js = js.clone();
        async move { js.get_key_value(name).await.map_err(|e| GatewayError::Http(format!("{name} bucket: {e}"))) }
    };
    let automation_kv = bucket(halyard_protocol::subjects::AUTOMATION_BUCKET).await?;
    let hook_deliveries = bucket(halyard_protocol::subjects::HOOK_DELIVERY_BUCKET).await?;
    let automations = halyard_platform::kv_mirror::Mirror::follow(automation_kv.clone(), "def.", shutdown.clone()).await?;
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
    };

    let limits = server::Limits::from_config(&state.config.gateway);
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
    tokio::spawn(accounts::audit::keep(store.clone(), state.config.gateway.audit_retention_days, shutdown.clone()));
    // Organizations made before their members were copied for the agent runner get theirs now.
    let mirrored = state.clone();
    tokio::spawn(async move {
        for (_, org) in mirrored.accounts.all_orgs() {
            if let Err(e) = accounts::org_budgets::mirror_members(&mirrored, &org).await {
                tracing::warn!(org = %org.name, error = ?e, "the organization's members could not be copied for the agent runner");
            }
        }
    });
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
    fn every_operation_says_what_it_answers_and_refuses() {
        let doc = serde_json::to_value(openapi_document()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        assert!(paths.len() > 60, "the document lists the routes ({})", paths.len());
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut operations = 0;
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                operations += 1;
                let responses = op["responses"].as_object().unwrap();
                // (A redirect is the answer of the sign-in's steps through the identity provider.)
                assert!(responses.keys().any(|s| s.starts_with(['1', '2', '3'])), "{method} {path}: no success answer");
                let public = ["/healthz", "/readyz", "/api/v1/openapi.json", "/api/v1/session"].contains(&path.as_str())
                    || path.starts_with("/api/v1/auth/sso")
                    || path == "/api/v1/auth/slack/callback";
                assert!(public || responses.contains_key("401"), "{method} {path}: 401 not documented");
                assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()), "{method} {path}: no summary");
            }
        }
        assert!(operations > 80, "{operations} operations");
        // Every schema referred to is defined (names of types from two crates must not collide).
        let text = doc.to_string();
        for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = part.split('"').next().unwrap();
            assert!(schemas.contains_key(name), "{name} is referred to but not defined");
        }
    }

    /// The web app's types are generated from its copy of this document: a handler's type that
    /// changed without the copy (and so the web app's types) following fails here.
    #[test]
    fn the_web_apps_copy_of_the_document_is_this_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../web/openapi.json");
        let copy = std::fs::read_to_string(path).unwrap_or_default();
        let doc = openapi_document().to_pretty_json().unwrap();
        assert!(
            copy.trim_end() == doc,
            "web/openapi.json is not the gateway's OpenAPI document: run `cargo run -q -p halyard -- openapi > web/openapi.json` \
             and `bash infra/build-web.sh` (which regenerates web/src/api-schema.ts), then commit both"
        );
    }

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
