//! Single sign-on to the web workspace: OpenID Connect's authorization code flow with PKCE
//! against the operator's identity provider (`HALYARD_OIDC_ISSUER`, client id and secret), as
//! [`super::oidc`] runs it.
//!
//! `GET /auth/sso/start` sends the browser to the provider with a fresh state, nonce and PKCE
//! challenge, kept until it comes back in a short-lived cookie signed with the deployment's
//! secret (`halyard_sso`, HttpOnly, SameSite=Lax: the provider's redirect back is a cross-site
//! navigation). `GET /auth/sso/callback` checks all of it, then finds the user the provider
//! names (`<issuer>#<sub>`) or makes one from the e-mail address, places them in the
//! organizations whose `sso_domains` hold their verified address's domain or whose `sso_groups`
//! meet their `groups` claim, opens a session as a key's sign-in does, and sends the browser
//! home. A refused sign-in goes home with `?sso_error=` saying why, and is an audit record.

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use halyard_platform::now_ms;
use halyard_protocol::UserId;
use halyard_protocol::accounts::KeyScope;

pub use super::oidc::CallbackQuery;
pub use super::oidc::OidcError as SsoError;
use super::oidc::{self, Kept, Provider, found};
use crate::api::accounts::session::open_session;
use crate::api::accounts::sso_users::Identity;
use crate::audit;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::state::AppState;

/// The cookie that carries a sign-in from its start to its callback.
const STATE_COOKIE: &str = "halyard_sso";
/// How long a sign-in may take at the provider.
const STATE_SECS: i64 = 600;

/// Whether the web workspace offers single sign-on.
#[derive(Debug, Serialize, ToSchema)]
pub struct SsoStatus {
    pub enabled: bool,
}

/// Whether single sign-on is configured (the sign-in page asks, before anyone is signed in).
#[utoipa::path(get, path = "/auth/sso", tag = "accounts", security(()), responses((status = 200, body = SsoStatus)))]
pub async fn status(State(state): State<AppState>) -> Json<SsoStatus> {
    Json(SsoStatus { enabled: configured(&state) })
}

fn configured(state: &AppState) -> bool {
    let g = &state.config.gateway;
    !g.oidc_issuer.is_empty() && !g.oidc_client_id.is_empty()
}

/// The operator's identity provider, as this relying party uses it.
fn provider(state: &AppState) -> Provider<'_> {
    let g = &state.config.gateway;
    Provider { issuer: &g.oidc_issuer, client_id: &g.oidc_client_id, client_secret: &g.oidc_client_secret, callback: "/auth/sso/callback" }
}

/// What a sign-in keeps between its start and its callback.
#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    state: String,
    nonce: String,
    verifier: String,
    return_to: String,
    at_ms: i64,
}

impl Kept for Pending {
    fn state(&self) -> &str {
        &self.state
    }
    fn at_ms(&self) -> i64 {
        self.at_ms
    }
}

fn seal(state: &AppState, p: &Pending) -> String {
    oidc::seal(state, "sso-state", p)
}

fn state_cookie(headers: &HeaderMap, value: &str, max_age: i64) -> Result<HeaderValue, ApiError> {
    oidc::state_cookie(headers, STATE_COOKIE, "/api/v1/auth/sso", value, max_age)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StartQuery {
    /// The page to come back to (a path of this site; `/` if absent).
    #[serde(default)]
    pub return_to: Option<String>,
}

/// A path of this site to come back to: never another site's.
/// Only visible ASCII without a backslash counts: a browser drops tabs and line breaks from a URL
/// and reads a backslash as `/`, so `/%09/evil.example` would lead to another site.
fn local_path(p: Option<&str>) -> String {
    match p {
        Some(p)
            if p.starts_with('/') && !p.starts_with("//") && p.len() <= 2048 && p.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') =>
        {
            p.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// Sends the browser to the identity provider (303), to sign in and come back to
/// `/auth/sso/callback`; 404 `sso_not_configured` without one.
#[utoipa::path(get, path = "/auth/sso/start", tag = "accounts", security(()), params(StartQuery),
    responses((status = 303, description = "to the identity provider"), Refusals))]
pub async fn start(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<StartQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    if !configured(&state) {
        return Err(not_configured());
    }
    let started = oidc::start(&state, &provider(&state), &["email", "profile", "groups"]).await.map_err(|e| ApiError::unavailable(e.0))?;
    let pending = Pending {
        state: started.state,
        nonce: started.nonce,
        verifier: started.verifier,
        return_to: local_path(q.return_to.as_deref()),
        at_ms: now_ms(),
    };
    Ok(found(&started.url, vec![state_cookie(&headers, &seal(&state, &pending), STATE_SECS)?]))
}

fn not_configured() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "sso_not_configured",
        "this deployment has no identity provider (HALYARD_OIDC_ISSUER, HALYARD_OIDC_CLIENT_ID, HALYARD_OIDC_CLIENT_SECRET); sign in with an API key",
    )
}

/// The provider's answer (303): a session and home, or home with `?sso_error=` saying why not.
#[utoipa::path(get, path = "/auth/sso/callback", tag = "accounts", security(()), params(CallbackQuery),
    responses((status = 303, description = "home, signed in or saying why not"), Refusals))]
pub async fn callback(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    query: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    if !configured(&state) {
        return Err(not_configured());
    }
    let ip = crate::auth::client::client_ip(&state, peer.ip(), &headers);
    let clear = state_cookie(&headers, "", 0)?;
    let Some(pending) = oidc::returning::<Pending>(&state, &headers, STATE_COOKIE, "sso-state", STATE_SECS, &q) else {
        tracing::info!("a single sign-on callback without this browser's sign-in state");
        let to =
            format!("/?sso_error={}", halyard_platform::net::percent_encode("this sign-in expired or was not started here; start again"));
        return Ok(found(&to, vec![clear]));
    };
    let identity = match verify(&state, &q, &pending).await {
        Ok(i) => i,
        Err(why) => return Ok(refused(&state, ip, why, clear).await),
    };
    let user = match crate::api::accounts::sso_users::provision(&state, &identity, ip).await? {
        Ok(user) => user,
        Err(why) => return Ok(refused(&state, ip, why, clear).await),
    };
    let principal = state
        .accounts
        .principal(&user, KeyScope::Full, &format!("sso:{}", identity.subject), now_ms())
        .map_err(|r| ApiError::new(StatusCode::FORBIDDEN, "user_disabled", format!("you cannot sign in: {}", r.message())))?;
    let detail = serde_json::json!({"via": "sso", "issuer": state.config.gateway.oidc_issuer});
    let (session, _) = open_session(&state, &principal, &headers, ip, detail).await?;
    Ok(found(&local_path(Some(&pending.return_to)), vec![clear, session]))
}

/// A sign-in of this browser's refused: recorded, and home saying why.
async fn refused(state: &AppState, ip: std::net::IpAddr, why: SsoError, clear: HeaderValue) -> Response {
    tracing::warn!(reason = %why, "a single sign-on was refused");
    let nobody = UserId("-".into());
    let a = audit::Action::new(&nobody, "session.refused", "sso").detail(serde_json::json!({"via": "sso", "reason": why.0}));
    audit::record(state, a, Some(ip)).await;
    let to = format!("/?sso_error={}", halyard_platform::net::percent_encode(&why.0));
    found(&to, vec![clear])
}

/// Everything the callback checks, in order; the identity, or why not.
async fn verify(state: &AppState, q: &CallbackQuery, pending: &Pending) -> Result<Identity, SsoError> {
    if let Some(e) = &q.error {
        return Err(oidc::refusal(e, q.error_description.as_deref()));
    }
    let code = q.code.clone().ok_or_else(|| SsoError("the identity provider sent no code".into()))?;
    let (claims, all) = oidc::finish(state, &provider(state), code, &pending.verifier, &pending.nonce).await?;
    // `groups` is no standard claim.
    let groups = all["groups"].as_array().into_iter().flatten().filter_map(|g| g.as_str().map(str::to_owned)).collect();
    Ok(Identity {
        subject: format!("{}#{}", claims.issuer().as_str(), claims.subject().as_str()),
        email: claims.email().map(|e| e.as_str().to_lowercase()),
        email_verified: claims.email_verified().unwrap_or(false),
        name: claims.name().and_then(|n| n.get(None)).map(|n| n.as_str().to_owned()),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::local_path;

    #[test]
    fn only_this_sites_paths_come_back() {
        for ok in ["/", "/c/123?tab=files", "/settings#profiles"] {
            assert_eq!(local_path(Some(ok)), ok);
        }
        for bad in ["//evil.example", "/\t/evil.example", "/\\evil.example", "/\n/evil", "https://evil.example", "/ x", "evil"] {
            assert_eq!(local_path(Some(bad)), "/", "{bad:?}");
        }
    }
}
