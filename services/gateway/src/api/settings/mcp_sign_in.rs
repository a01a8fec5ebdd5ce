//! OAuth sign-in to a user's own `http` MCP server, or to an organization's (by one of its owners
//! or admins, once for all its members' conversations in it), as the MCP authorization spec has a
//! client do it (the discovery, registration, PKCE and token exchange are the MCP SDK's, through
//! [`halyard_platform::mcp_oauth`]):
//!
//! - `GET /mcp-servers/{name}/sign-in` (signed in with a full key: it is a GET that changes
//!   what the user's conversations are signed in as, refused to a read-only one) reads the
//!   server's protected resource metadata and its authorization server's, registers Halyard as
//!   a client there (dynamic client registration), and sends the browser (303) to the
//!   authorization server with a PKCE challenge and the server as `resource`. What the callback
//!   needs travels in a short-lived cookie sealed with the vault (`halyard_mcp_oauth`,
//!   SameSite=Lax for the provider's redirect back): the session cookie is SameSite=Strict and
//!   does not come back on that redirect, and a callback in someone else's browser (a sign-in
//!   link sent to a victim) finds no flow.
//! - `GET /mcp-oauth/callback` exchanges the code, seals the tokens into `mcpoauth.<user>.<server>`
//!   (`orgmcpoauth.<org>.<server>` for an organization's; refreshed from then on by the agent
//!   runner), and sends the browser back to Settings (or the Organizations page) with
//!   `?mcp_signed_in=` or `?mcp_sign_in_error=`.
//! - `DELETE /mcp-servers/{name}/sign-in` signs out, and revokes the tokens at the authorization
//!   server where it offers revocation (RFC 7009).
//! - `/orgs/{org}/mcp-servers/{name}/sign-in`: the same for an organization's server. The
//!   callback checks again that whoever started it still manages the organization.
//!
//! The callback also checks again the credential the flow was started with (a key revoked, a
//! session ended or a user disabled meanwhile signs nobody in).
//!
//! The tokens are opened only by the agent runner, for its requests to that URL; no view shows them.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::mcp_oauth::{self, AuthError, FlowState, OAuthClientConfig, SignInOwner, SignInStore, StoredAuthorizationState};
use halyard_platform::{net::percent_encode, now_ms};
use halyard_protocol::UserId;
use halyard_protocol::accounts::KeyScope;
use halyard_protocol::subjects;
use halyard_protocol::user::{McpServerConfig, McpSignIn, UserMcpServers};

use crate::api::accounts::oidc::{self, CallbackQuery, found};
use crate::audit::{self, Client};
use crate::auth::access::load_managed;
use crate::auth::{Acting, User};
use crate::domain::user_store;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::read_model::store::rfc3339;
use crate::state::AppState;
use crate::state::registry::Principal;

const COOKIE: &str = "halyard_mcp_oauth";
const COOKIE_PATH: &str = "/api/v1/mcp-oauth";
/// The vault slot the flow's cookie is sealed in.
const FLOW_SLOT: &str = "mcp-oauth-flow";
/// How long a sign-in may take at the authorization server.
const FLOW_SECS: i64 = 600;
/// The name Halyard registers itself under at authorization servers.
const CLIENT_NAME: &str = "Halyard";

/// A sign-in as the API shows it (never its tokens).
#[derive(Debug, Serialize, ToSchema)]
pub struct McpSignInView {
    /// The authorization server that issued it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    pub scopes: Vec<String>,
    pub signed_in_at: String,
    /// When its tokens were last refreshed.
    pub refreshed_at: String,
    /// When the access token expires (the agent runner refreshes it before it is used after).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl From<&McpSignIn> for McpSignInView {
    fn from(s: &McpSignIn) -> Self {
        Self {
            issuer: s.issuer.clone(),
            scopes: s.scopes.clone(),
            signed_in_at: rfc3339(s.signed_in_ms),
            refreshed_at: rfc3339(s.refreshed_ms),
            expires_at: s.expires_ms.map(rfc3339),
        }
    }
}

/// What a sign-in keeps between its start and its callback (sealed in the flow's cookie).
#[derive(Serialize, Deserialize)]
struct Pending {
    /// Whose server it is.
    owner: SignInOwner,
    /// Who is signing in.
    actor: UserId,
    /// What they signed in to Halyard with (a key's id, a session's), checked again at the
    /// callback: a key revoked or a user disabled meanwhile signs nobody in.
    #[serde(default)]
    credential: String,
    server: String,
    url: String,
    client_id: String,
    client_secret: Option<String>,
    scopes: Vec<String>,
    csrf: String,
    flow: StoredAuthorizationState,
    at_ms: i64,
}

/// How long a sign-out waits for the authorization server to revoke the tokens.
const REVOKE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

const MANAGERS: &str = "only the organization's owners and admins sign in to its MCP servers";

/// The store of `owner`'s sign-in to `server` at `url`.
fn store(state: &AppState, owner: &SignInOwner, server: &str, url: &str) -> SignInStore {
    SignInStore::new(state.user_kv.clone(), state.vault.clone(), owner.clone(), server.into(), url.into())
}

/// `owner`'s sign-in to their server `name` at `url`, if any (for the server's view).
pub(crate) async fn sign_in_of(state: &AppState, owner: &SignInOwner, name: &str, url: &str) -> Option<McpSignInView> {
    store(state, owner, name, url).record().await.ok().flatten().as_ref().map(McpSignInView::from)
}

/// Removes `owner`'s sign-in to `name` (signing out, or the server deleted).
pub(crate) async fn forget(state: &AppState, owner: &SignInOwner, name: &str) -> Result<(), ApiError> {
    state.user_kv.purge(owner.key(name)).await.map_err(ApiError::internal)
}

/// The URL of `owner`'s `http` server `name`: 404 as for any server they do not have, 400 for a
/// `stdio` one.
async fn server_url(state: &AppState, owner: &SignInOwner, name: &str) -> Result<String, ApiError> {
    let key = match owner {
        SignInOwner::User(user) => subjects::user_mcp_key(user),
        SignInOwner::Org(org) => subjects::org_mcp_key(org),
    };
    let server = user_store::get_named(state, &key, |s: &UserMcpServers| &s.servers, name, "MCP server", |_, s| s.clone()).await?;
    match server.config {
        McpServerConfig::Http { url, .. } => Ok(url),
        McpServerConfig::Stdio { .. } => Err(ApiError::bad_request(
            "not_an_http_server",
            format!("`{name}` is a stdio server, which runs in the sandbox: only an http server is signed in to"),
        )),
    }
}

fn redirect_uri(state: &AppState) -> String {
    state.config.web_link("/api/v1/mcp-oauth/callback")
}

/// Why a flow failed, in words for the Settings page: the first 300 characters (an authorization
/// server's refusal may carry its whole answer).
fn said(e: &AuthError) -> String {
    let words = match e {
        AuthError::NoAuthorizationSupport => "the server publishes no OAuth metadata (it does not do OAuth sign-in)".into(),
        // (Halyard's own refusals travel as these: their words are the reason, as they are.)
        AuthError::InternalError(words) => words.clone(),
        other => halyard_platform::outbound::why(other),
    };
    words.chars().take(300).collect()
}

/// The page of `owner`'s servers (Settings, or Organizations), saying how a sign-in to `server`
/// went.
fn settings(owner: &SignInOwner, server: &str, error: Option<&str>) -> String {
    let page = match owner {
        SignInOwner::User(_) => "/settings?".to_owned(),
        SignInOwner::Org(org) => format!("/orgs?org={}&", percent_encode(org)),
    };
    match error {
        None => format!("{page}mcp_signed_in={}#mcp-servers", percent_encode(server)),
        Some(e) => format!("{page}mcp_server={}&mcp_sign_in_error={}#mcp-servers", percent_encode(server), percent_encode(e)),
    }
}

/// Sends the browser (303) to the server's authorization server to sign in, and back to
/// `/mcp-oauth/callback`. If the server does not do OAuth, or its authorization server cannot be
/// used, back to Settings (303) saying why.
#[utoipa::path(get, path = "/mcp-servers/{name}/sign-in", tag = "settings", params(("name" = String, Path)),
    responses((status = 303, description = "to the authorization server, or to Settings saying why not"), Refusals))]
pub async fn start(
    State(state): State<AppState>,
    Acting(principal): Acting,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let owner = SignInOwner::User(principal.user.clone());
    start_for(&state, &headers, owner, principal, name).await
}

/// [`start`] for an organization's server (its owners and admins).
#[utoipa::path(get, path = "/orgs/{org}/mcp-servers/{name}/sign-in", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 303, description = "to the authorization server, or to the organization's page saying why not"), Refusals))]
pub async fn org_start(
    State(state): State<AppState>,
    Acting(principal): Acting,
    headers: HeaderMap,
    Path((org, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (_, org) = load_managed(&state, &principal.user, &org, MANAGERS)?;
    start_for(&state, &headers, SignInOwner::Org(org.name.clone()), principal, name).await
}

async fn start_for(
    state: &AppState,
    headers: &HeaderMap,
    owner: SignInOwner,
    actor: Principal,
    name: String,
) -> Result<Response, ApiError> {
    let url = server_url(state, &owner, &name).await?;
    let (authorize, config, csrf, flow) = match begin(state, &url, &redirect_uri(state)).await {
        Ok(b) => b,
        Err(e) => {
            tracing::info!(owner = %owner, server = %name, error = %e, "an MCP sign-in could not start");
            return Ok(found(&settings(&owner, &name, Some(&said(&e))), vec![]));
        }
    };
    let pending = Pending {
        owner,
        actor: actor.user,
        credential: actor.credential,
        server: name,
        url,
        client_id: config.client_id,
        client_secret: config.client_secret,
        scopes: config.scopes,
        csrf,
        flow,
        at_ms: now_ms(),
    };
    let json = serde_json::to_string(&pending).map_err(ApiError::internal)?;
    let sealed = state.vault.seal(FLOW_SLOT, &json).map_err(ApiError::internal)?;
    let cookie = oidc::state_cookie(headers, COOKIE, COOKIE_PATH, &sealed, FLOW_SECS)?;
    Ok(found(&authorize, vec![cookie]))
}

/// Discovery, registration and the authorization URL: the URL, the client, and the flow's state.
async fn begin(
    state: &AppState,
    url: &str,
    redirect: &str,
) -> Result<(String, OAuthClientConfig, String, StoredAuthorizationState), AuthError> {
    let mut manager = mcp_oauth::manager(url, &state.config.mcp.allow).await?;
    let scopes = manager.select_initial_scopes(&[]).await;
    let asked: Vec<&str> = scopes.iter().map(String::as_str).collect();
    let config = manager.register_client(CLIENT_NAME, redirect, &asked).await?;
    let flow = FlowState::default();
    manager.set_state_store(flow.clone());
    let authorize = manager.get_authorization_url(&asked).await?;
    let (csrf, kept) = flow.take().ok_or_else(|| AuthError::InternalError("the flow kept no state".into()))?;
    Ok((authorize, config, csrf, kept))
}

/// The flow this browser started, if the callback's `state` is its.
fn returning(state: &AppState, headers: &HeaderMap, q: &CallbackQuery) -> Option<Pending> {
    let sealed = crate::auth::cookies::named_cookie(headers, COOKIE)?;
    let pending: Pending = serde_json::from_str(&state.vault.open(FLOW_SLOT, &sealed).ok()?).ok()?;
    let mine = halyard_platform::keys::constant_time_eq(q.state.as_deref().unwrap_or_default().as_bytes(), pending.csrf.as_bytes());
    (mine && now_ms() - pending.at_ms <= FLOW_SECS * 1000).then_some(pending)
}

/// The authorization server's answer (303): back to Settings (or the organization's page),
/// signed in or saying why not.
#[utoipa::path(get, path = "/mcp-oauth/callback", tag = "settings", security(()), params(CallbackQuery),
    responses((status = 303, description = "to Settings, signed in or saying why not"), Refusals))]
pub async fn callback(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    query: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let clear: HeaderValue = oidc::state_cookie(&headers, COOKIE, COOKIE_PATH, "", 0)?;
    // Nothing of the query is shown or recorded before its state is this browser's own.
    let Some(p) = returning(&state, &headers, &q) else {
        tracing::info!("an MCP sign-in callback without this browser's flow");
        let why = percent_encode("this sign-in expired or was not started here; sign in again");
        return Ok(found(&format!("/settings?mcp_sign_in_error={why}#mcp-servers"), vec![clear]));
    };
    let client = Client(Some(crate::auth::client::client_ip(&state, peer.ip(), &headers)));
    let outcome = match (&q.error, &q.code) {
        (Some(e), _) => Err(oidc::refusal(e, q.error_description.as_deref()).0),
        (None, None) => Err("the authorization server sent no code".to_owned()),
        (None, Some(code)) => finish(&state, &p, code, q.iss.as_deref()).await.map_err(|e| said(&e)),
    };
    let (action, detail) = match &outcome {
        Ok(()) => ("sign_in", serde_json::Value::Null),
        Err(why) => ("sign_in_failed", serde_json::json!({"reason": why})),
    };
    tracing::info!(owner = %p.owner, actor = %p.actor, server = %p.server, action, "an MCP sign-in ended");
    audit(&state, client, (&p.owner, &p.actor), action, &p.server, detail).await;
    Ok(found(&settings(&p.owner, &p.server, outcome.err().as_deref()), vec![clear]))
}

/// Records `actor`'s `action` (`sign_in`, …) on `owner`'s server `server`.
async fn audit(
    state: &AppState,
    client: Client,
    (owner, actor): (&SignInOwner, &UserId),
    action: &str,
    server: &str,
    detail: serde_json::Value,
) {
    let (name, target) = match owner {
        SignInOwner::User(_) => (format!("mcp_server.{action}"), server.to_owned()),
        SignInOwner::Org(org) => (format!("org.mcp_server.{action}"), format!("{org}/{server}")),
    };
    let mut record = audit::Action::new(actor, &name, &target).detail(detail);
    if let SignInOwner::Org(org) = owner {
        record = record.org(org);
    }
    record.send(state, client).await;
}

/// The code exchanged (with the PKCE verifier and the server as `resource`) and the tokens
/// sealed; only while the server is still its owner's, at the URL the flow began with, and (for
/// an organization's) while whoever signs in still manages the organization.
async fn finish(state: &AppState, p: &Pending, code: &str, iss: Option<&str>) -> Result<(), AuthError> {
    // Rights as they are now, not as they were ten minutes ago.
    if let Err(refused) = state.accounts.principal(&p.actor, KeyScope::Full, &p.credential, now_ms()) {
        return Err(AuthError::InternalError(format!("you can no longer sign in here: {}", refused.message())));
    }
    if let SignInOwner::Org(org) = &p.owner {
        load_managed(state, &p.actor, org, MANAGERS).map_err(|e| AuthError::InternalError(e.message))?;
    }
    let now = server_url(state, &p.owner, &p.server).await.map_err(|e| AuthError::InternalError(e.message))?;
    if now != p.url {
        return Err(AuthError::InternalError("the server's URL changed during the sign-in; sign in again".into()));
    }
    let mut manager = mcp_oauth::manager(&p.url, &state.config.mcp.allow).await?;
    let mut config = OAuthClientConfig::new(p.client_id.clone(), redirect_uri(state)).with_scopes(p.scopes.clone());
    if let Some(secret) = &p.client_secret {
        config = config.with_client_secret(secret.clone());
    }
    manager.configure_client(config)?;
    manager.set_state_store(FlowState::with(p.csrf.clone(), p.flow.clone()));
    let store = store(state, &p.owner, &p.server, &p.url).with_client_secret(p.client_secret.clone());
    // A sign-in again starts anew.
    store.forget().await?;
    manager.set_credential_store(store);
    manager.exchange_code_for_token_with_issuer(code, &p.csrf, iss).await?;
    Ok(())
}

/// Signs out of the server (204): its tokens are revoked at its authorization server (where it
/// offers that) and removed, and its next run asks to sign in again.
#[utoipa::path(delete, path = "/mcp-servers/{name}/sign-in", tag = "settings", params(("name" = String, Path)),
    responses((status = 204, description = "signed out"), Refusals))]
pub async fn sign_out(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    sign_out_of(&state, SignInOwner::User(user.clone()), &user, &name, client).await
}

/// [`sign_out`] of an organization's server (its owners and admins).
#[utoipa::path(delete, path = "/orgs/{org}/mcp-servers/{name}/sign-in", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "signed out"), Refusals))]
pub async fn org_sign_out(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((org, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, org) = load_managed(&state, &user, &org, MANAGERS)?;
    sign_out_of(&state, SignInOwner::Org(org.name.clone()), &user, &name, client).await
}

async fn sign_out_of(state: &AppState, owner: SignInOwner, actor: &UserId, name: &str, client: Client) -> Result<StatusCode, ApiError> {
    let url = server_url(state, &owner, name).await?;
    // Ended at the authorization server too, where it offers that: a token copied before the
    // sign-out is then of no use either. Its answer, or its silence, does not keep the sign-in.
    let signed_in = store(state, &owner, name, &url);
    let revoking = mcp_oauth::revoke(&signed_in, &state.config.mcp.allow);
    let revoked = match tokio::time::timeout(REVOKE_PATIENCE, revoking).await {
        Ok(Ok(revoked)) => revoked,
        Ok(Err(e)) => {
            tracing::info!(owner = %owner, server = %name, error = %e, "an MCP sign-in could not be revoked at its server");
            false
        }
        Err(_) => false,
    };
    forget(state, &owner, name).await?;
    audit(state, client, (&owner, actor), "sign_out", name, serde_json::json!({"revoked": revoked})).await;
    Ok(StatusCode::NO_CONTENT)
}
