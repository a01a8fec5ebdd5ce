//! Browser sessions for the web workspace: `POST /session` exchanges an API key for an HttpOnly,
//! SameSite=Strict cookie (the key itself never needs to be kept in the browser); `DELETE
//! /session` ends it on the server. A session is a short-lived key record of its own in the
//! auth bucket (`session: true`), so every gateway accepts it at once and forgets it at once
//! when it is revoked, exactly like an API key.

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use halyard_platform::{keys, now_ms};
use halyard_protocol::accounts::ApiKeyRecord;
use serde::Deserialize;
use serde_json::json;

use crate::AppState;
use crate::error::{ApiError, ApiJson};
use crate::store::rfc3339;

/// The cookie's name.
pub const COOKIE: &str = "halyard_session";
/// The header a change made with the cookie must carry (any value).
pub const CSRF_HEADER: &str = "x-halyard-csrf";
/// How long a session lasts.
const SESSION_SECS: i64 = 12 * 3600;
/// Live sessions a user may hold at once; signing in past it ends the oldest.
pub const MAX_SESSIONS_PER_USER: usize = 20;

/// The session token in the request's cookies, if any.
pub fn cookie_token(headers: &HeaderMap) -> Option<String> {
    named_cookie(headers, COOKIE)
}

/// The value of the cookie `name` in the request's cookies, if any and not empty.
pub fn named_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
        .map(str::to_owned)
        .filter(|t| !t.is_empty())
}

/// Whether the request, if it names its `Origin`, comes from this gateway's own origin (the
/// host and port it was sent to).
pub fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest).trim_end_matches('/');
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}

/// The cookie, set (`max_age` seconds) or cleared (0); `Secure` when the client came over HTTPS
/// (as a proxy in front says).
fn cookie(headers: &HeaderMap, value: &str, max_age: i64) -> Result<HeaderValue, ApiError> {
    let https = headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()) == Some("https");
    let secure = if https { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}"))
        .map_err(ApiError::internal)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    pub api_key: String,
}

/// `POST /session`: checks the key and answers with the session cookie.
pub async fn sign_in(
    State(state): State<AppState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SignIn>,
) -> Result<Response, ApiError> {
    state.auth_failures.refuse_if_over(client.ip())?;
    let refuse = |message: &str| {
        state.auth_failures.record(client.ip());
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message.to_owned())
    };
    let now = now_ms();
    let principal = state.accounts.authenticate(body.api_key.trim(), now).map_err(|r| refuse(r.message()))?;
    // A session may not beget sessions: a stolen cookie must not outlive its twelve hours.
    let is_session = keys::parse_api_key(body.api_key.trim()).and_then(|(id, _)| state.accounts.key(id)).is_some_and(|k| k.session);
    if is_session {
        return Err(refuse("sign in with an API key, not a session"));
    }
    let (id, secret, token) = keys::new_api_key();
    let salt = keys::random_secret();
    let expires_ms = now + SESSION_SECS * 1000;
    let record = ApiKeyRecord {
        id,
        user: principal.user.clone(),
        name: "web session".into(),
        hash: keys::api_key_hash(&salt, &secret),
        salt,
        scope: principal.scope,
        created_ms: now,
        expires_ms: Some(expires_ms),
        revoked_ms: None,
        session: true,
    };
    state.accounts.put_key(record).await.map_err(|e| {
        tracing::error!(error = %e, "cannot store a session");
        ApiError::unavailable("cannot start a session now; try again")
    })?;
    // The new one counts: the oldest past the limit end now, and ended ones are forgotten.
    if let Err(e) = state.accounts.prune_sessions(&principal.user.0, now, MAX_SESSIONS_PER_USER).await {
        tracing::warn!(error = %e, "cannot prune sessions; the next sign-in tries again");
    }
    let body = json!({
        "user": principal.user.0, "admin": principal.admin, "scope": principal.scope.as_str(),
        "expires_at": rfc3339(expires_ms), "csrf_header": CSRF_HEADER,
    });
    Ok(([(header::SET_COOKIE, cookie(&headers, &token, SESSION_SECS)?)], Json(body)).into_response())
}

/// `DELETE /session`: ends the cookie's session on every gateway and clears the cookie.
pub async fn sign_out(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let unauthorized = || ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "no session to end: sign in first");
    let token = cookie_token(&headers).ok_or_else(unauthorized)?;
    if !headers.contains_key(CSRF_HEADER) {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "csrf_header_missing", format!("signing out needs the `{CSRF_HEADER}` header")));
    }
    // Only a valid session of this cookie can be ended by it.
    state.accounts.authenticate(&token, now_ms()).map_err(|_| unauthorized())?;
    let (id, _) = keys::parse_api_key(&token).ok_or_else(unauthorized)?;
    let mut record = state.accounts.key(id).filter(|k| k.session).ok_or_else(unauthorized)?;
    record.revoked_ms = Some(now_ms());
    state.accounts.put_key(record).await.map_err(|e| {
        tracing::error!(error = %e, "cannot end a session");
        ApiError::unavailable("cannot end the session now; try again")
    })?;
    Ok((StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie(&headers, "", 0)?)]).into_response())
}
