//! Browser sessions for the web workspace: `POST /session` exchanges an API key for an HttpOnly,
//! SameSite=Strict cookie (the key itself never needs to be kept in the browser); `DELETE
//! /session` ends it on the server. A session is a short-lived key record of its own in the
//! auth bucket (`session: true`), so every gateway accepts it at once and forgets it at once
//! when it is revoked, exactly like an API key.
//!
//! A session is a cookie and nothing else ([`crate::auth`] refuses its token as a bearer token
//! or in a query), and it is bound to the key it was opened with (`parent`): it ends when that
//! key is revoked or expires or its user is disabled, and never outlives the key's expiry.
//! Under HTTPS the cookie is `__Host-halyard_session` (Secure, host-only, `Path=/`), which no
//! page of another host or port can set; a request carrying two session cookies (one tossed
//! in by another page of the same host) is refused rather than guessed at. Sensitive changes
//! made with a session (keys, roles, secrets) need a recent proof of the key: a fresh sign-in,
//! or `POST /session/step-up`.

use std::net::SocketAddr;

use crate::audit;
use crate::auth::cookies::{CSRF_HEADER, check_cookie_request, cookie_name, https, session_cookie};
use crate::http::api_doc::{BodyRefusals, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;
use crate::state::registry::Principal;
use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use halyard_platform::{keys, now_ms};
use halyard_protocol::UserId;
use halyard_protocol::accounts::ApiKeyRecord;
use serde::Deserialize;

/// How long a session lasts at most.
const SESSION_SECS: i64 = 12 * 3600;
/// Live sessions a user may hold at once; signing in past it ends the oldest.
pub const MAX_SESSIONS_PER_USER: usize = 20;

/// The cookie, set (`max_age` seconds) or cleared (0).
fn cookie(headers: &HeaderMap, value: &str, max_age: i64) -> Result<HeaderValue, ApiError> {
    let secure = if https(headers) { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}", cookie_name(headers)))
        .map_err(ApiError::internal)
}

/// An API key shown to sign in or to prove who one is again.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    pub api_key: String,
}

/// A session begun: its cookie is in `Set-Cookie`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct SessionStarted {
    pub user: String,
    pub admin: bool,
    /// `full` or `read_only`, as the key's.
    pub scope: String,
    pub expires_at: String,
    /// The header every change made with the session must carry (any value).
    pub csrf_header: String,
}

/// A session's proof renewed.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct SteppedUp {
    pub user: String,
    /// Sensitive changes are allowed until then.
    pub verified_until: String,
}

/// Checks an API key given in a body (sign-in, step-up): never a session's token, and its
/// failures count like any other.
fn check_key(state: &AppState, client: std::net::IpAddr, key: &str) -> Result<Principal, ApiError> {
    let key = key.trim();
    let key_id = keys::parse_api_key(key).map(|(id, _)| id.to_owned());
    let refuse = |message: &str| state.auth_failures.failed(client, key_id.as_deref(), message.to_owned());
    let principal = state.accounts.authenticate(key, now_ms()).map_err(|r| refuse(r.message()))?;
    // A session may not beget sessions: a stolen cookie must not outlive its twelve hours.
    if principal.session.is_some() {
        return Err(refuse("sign in with an API key, not a session"));
    }
    Ok(principal)
}

/// Records a refused key (not one past the limit, which only says so): the key's id when the
/// key names one, never any of what was typed. The refusal, held a moment if it is a limit's.
async fn refused(state: &AppState, client: std::net::IpAddr, typed: &str, action: &str, e: ApiError) -> ApiError {
    if e.status != StatusCode::TOO_MANY_REQUESTS {
        let id = keys::parse_api_key(typed).map(|(id, _)| id).filter(|id| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()));
        let nobody = UserId("-".into());
        let a = audit::Action::new(&nobody, action, id.unwrap_or("-")).detail(serde_json::json!({"reason": e.code}));
        audit::record(state, a, Some(client)).await;
    }
    crate::auth::client::slow_down(e).await
}

/// Signs in the web workspace: checks the key and answers with the session cookie
/// (`halyard_session`, HttpOnly, SameSite=Strict).
#[utoipa::path(post, path = "/session", tag = "accounts", security(()), request_body = SignIn,
    responses((status = 200, body = SessionStarted, headers(("set-cookie" = String, description = "the session cookie"))), Refusals, BodyRefusals))]
pub async fn sign_in(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SignIn>,
) -> Result<Response, ApiError> {
    let client = crate::auth::client::client_ip(&state, peer.ip(), &headers);
    let principal = match check_key(&state, client, &body.api_key).and_then(|p| require_no_sso(&state, p)) {
        Ok(p) => p,
        Err(e) => return Err(refused(&state, client, &body.api_key, "session.refused", e).await),
    };
    let detail = serde_json::json!({"credential": principal.credential});
    let (cookie, body) = open_session(&state, &principal, &headers, client, detail).await?;
    Ok(([(header::SET_COOKIE, cookie)], Json(body)).into_response())
}

/// The principal, unless an organization they are in signs its members in through the identity
/// provider only (403 `sso_required`; their keys keep working for programs).
fn require_no_sso(state: &AppState, principal: Principal) -> Result<Principal, ApiError> {
    match state.accounts.orgs_of(&principal.user).into_iter().find(|o| o.settings.require_sso) {
        Some(org) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "sso_required",
            format!(
                "organization {} signs its members in through single sign-on: use \"Sign in with single sign-on\" (API keys still work for programs)",
                org.name
            ),
        )),
        None => Ok(principal),
    }
}

/// Opens a session for `principal` (as a key's, or a sign-in through the identity provider's):
/// its cookie and what the sign-in answers. Recorded as `session.create` with `detail`.
pub(crate) async fn open_session(
    state: &AppState,
    principal: &Principal,
    headers: &HeaderMap,
    client: std::net::IpAddr,
    detail: serde_json::Value,
) -> Result<(HeaderValue, SessionStarted), ApiError> {
    let now = now_ms();
    let (id, secret, token) = keys::new_api_key();
    let salt = keys::random_secret();
    // Never past the key's own expiry.
    let expires_ms = (now + SESSION_SECS * 1000).min(state.accounts.credential_expiry(&principal.credential).unwrap_or(i64::MAX));
    let record = ApiKeyRecord {
        id: id.clone(),
        user: principal.user.clone(),
        name: "web session".into(),
        hash: keys::api_key_hash(&salt, &secret),
        salt,
        scope: principal.scope,
        created_ms: now,
        expires_ms: Some(expires_ms),
        revoked_ms: None,
        session: true,
        parent: Some(principal.credential.clone()),
        verified_ms: Some(now),
    };
    state.accounts.put_key(record).await.map_err(|e| {
        tracing::error!(error = %e, "cannot store a session");
        ApiError::unavailable("cannot start a session now; try again")
    })?;
    // The new one counts: the oldest past the limit end now, and ended ones are forgotten.
    if let Err(e) = state.accounts.prune_sessions(&principal.user.0, now, MAX_SESSIONS_PER_USER).await {
        tracing::warn!(error = %e, "cannot prune sessions; the next sign-in tries again");
    }
    let a = audit::Action::new(&principal.user, "session.create", &id).detail(detail);
    audit::record(state, a, Some(client)).await;
    let max_age = ((expires_ms - now) / 1000).max(1);
    let body = SessionStarted {
        user: principal.user.0.clone(),
        admin: principal.admin,
        scope: principal.scope.as_str().to_owned(),
        expires_at: rfc3339(expires_ms),
        csrf_header: CSRF_HEADER.to_owned(),
    };
    Ok((cookie(headers, &token, max_age)?, body))
}

/// The cookie's live session record, or 401.
fn cookie_session(state: &AppState, headers: &HeaderMap) -> Result<ApiKeyRecord, ApiError> {
    let unauthorized = || ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "no session: sign in first");
    let token = session_cookie(headers)?.ok_or_else(unauthorized)?;
    check_cookie_request(headers, true)?;
    // Only a valid session of this cookie can be changed by it.
    let principal = state.accounts.authenticate(&token, now_ms()).map_err(|_| unauthorized())?;
    let facts = principal.session.ok_or_else(unauthorized)?;
    state.accounts.key(&facts.id).ok_or_else(unauthorized)
}

/// Signs out: ends the cookie's session on every gateway and clears the cookie (and with it
/// every app cookie the session opened).
#[utoipa::path(delete, path = "/session", tag = "accounts", security(("session" = [])),
    responses((status = 204, description = "signed out"), Refusals))]
pub async fn sign_out(State(state): State<AppState>, client: audit::Client, headers: HeaderMap) -> Result<Response, ApiError> {
    let mut record = cookie_session(&state, &headers)?;
    record.revoked_ms = Some(now_ms());
    let (user, id) = (record.user.clone(), record.id.clone());
    state.accounts.put_key(record).await.map_err(|e| {
        tracing::error!(error = %e, "cannot end a session");
        ApiError::unavailable("cannot end the session now; try again")
    })?;
    audit::Action::new(&user, "session.end", &id).send(&state, client).await;
    Ok((StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie(&headers, "", 0)?)]).into_response())
}

/// Shows the key again, so the session may make sensitive changes for the next few minutes.
/// The key must be one of the session's user (403 `wrong_user` otherwise).
#[utoipa::path(post, path = "/session/step-up", tag = "accounts", security(("session" = [])), request_body = SignIn,
    responses((status = 200, body = SteppedUp), Refusals, BodyRefusals))]
pub async fn step_up(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SignIn>,
) -> Result<Json<SteppedUp>, ApiError> {
    let mut record = cookie_session(&state, &headers)?;
    let client = crate::auth::client::client_ip(&state, peer.ip(), &headers);
    let principal = match check_key(&state, client, &body.api_key) {
        Ok(p) => p,
        Err(e) => return Err(refused(&state, client, &body.api_key, "session.step_up_refused", e).await),
    };
    if principal.user != record.user {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "wrong_user", "that key belongs to another user; sign in as that user instead"));
    }
    let now = now_ms();
    record.verified_ms = Some(now);
    state.accounts.put_key(record).await.map_err(|e| {
        tracing::error!(error = %e, "cannot store a step-up");
        ApiError::unavailable("cannot confirm the key now; try again")
    })?;
    let until = now + (state.config.gateway.step_up_secs as i64) * 1000;
    Ok(Json(SteppedUp { user: principal.user.0, verified_until: rfc3339(until) }))
}
