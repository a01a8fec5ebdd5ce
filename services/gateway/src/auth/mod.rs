//! Authentication of every request, and who may try how often.
//!
//! Credentials, each accepted in one place only:
//! - an API key as `Authorization: Bearer <key>` (never a session's token);
//! - the web workspace's session cookie ([`crate::api::accounts::session`]): from this origin only, changes
//!   with the CSRF header, and nothing but a session's token;
//! - on WebSocket routes only, where a browser cannot set a header, a single-use ticket in
//!   `access_token` ([`crate::api::accounts::tickets`]); never a key.
//!
//! A read-only key may only read; writes are rate limited per user. Failed authentications
//! are counted per client address (IPv6 by /64; behind a configured trusted proxy, the address
//! it forwards) and per key id; past the budget a failure is answered 429 after a pause, so a
//! guesser slows down, while a valid credential is never refused: nobody can lock a user out
//! by failing on purpose from the user's address.

pub mod access;
pub mod app_grant;
pub mod client;
pub mod cookies;
pub mod quota;
pub mod tickets;

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, header};

use halyard_platform::keys;
use halyard_protocol::UserId;
use halyard_protocol::accounts::KeyScope;

use crate::http::error::ApiError;
use crate::state::AppState;
use crate::state::registry::Principal;

/// The authenticated user of a request.
#[derive(Clone, Debug)]
pub struct User(pub UserId);

/// The authenticated user of a request that needs an administrator.
#[derive(Clone, Debug)]
pub struct Admin(pub UserId);

/// The authenticated user of a request that acts whatever its method (a WebSocket that types
/// into a shell, a GET that starts a program): refused to a read-only key, and to a session or
/// WebSocket ticket opened with one (403 `read_only_key`), which other GETs let through.
#[derive(Clone, Debug)]
pub struct Acting(pub Principal);

impl FromRequestParts<AppState> for Acting {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let principal = Principal::from_request_parts(parts, state).await?;
        if principal.scope != KeyScope::Full {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "read_only_key",
                "this acts in the sandbox, which a read-only key cannot do; use a full key or sign in with one",
            ));
        }
        Ok(Acting(principal))
    }
}

/// A request allowed to make a sensitive change (issue keys, change roles or secrets): with an
/// API key, or a session that has shown its key in the last few minutes
/// ([`crate::auth::cookies::require_recent_proof`]).
#[derive(Clone, Debug)]
pub struct Recent(pub Principal);

impl FromRequestParts<AppState> for Recent {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let principal = Principal::from_request_parts(parts, state).await?;
        crate::auth::cookies::require_recent_proof(state, &principal)?;
        Ok(Recent(principal))
    }
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        // Several extractors of one handler authenticate once (and count one write).
        if let Some(p) = parts.extensions.get::<Principal>() {
            return Ok(p.clone());
        }
        let principal = match authenticate(parts, state) {
            Ok(p) => p,
            Err(e) => return Err(crate::auth::client::slow_down(e).await),
        };
        let reads = parts.method == Method::GET || parts.method == Method::HEAD;
        if !reads && principal.scope == KeyScope::ReadOnly {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "read_only_key",
                "this API key may only read; use a full key to make changes",
            ));
        }
        if !reads {
            state.limiter.check(&principal.user.0)?;
        }
        parts.extensions.insert(principal.clone());
        Ok(principal)
    }
}

/// Where a request's credential came from.
enum Source {
    Bearer,
    Ticket,
    Cookie,
}

fn authenticate(parts: &Parts, state: &AppState) -> Result<Principal, ApiError> {
    let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let client = peer.map(|p| crate::auth::client::client_ip(state, p, &parts.headers));
    let bearer = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
        .map(str::to_owned);
    let access_token = parts.uri.query().and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("access_token=").map(str::to_owned)));
    if access_token.is_some() && !parts.uri.path().ends_with("/ws") {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "`access_token` is only for WebSocket routes; send your API key as `Authorization: Bearer <key>`",
        ));
    }
    let (token, source) = if let Some(t) = bearer {
        (t, Source::Bearer)
    } else if let Some(t) = access_token {
        (t, Source::Ticket)
    } else if let Some(t) = crate::auth::cookies::session_cookie(&parts.headers)? {
        (t, Source::Cookie)
    } else {
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "send your API key as `Authorization: Bearer <key>`"));
    };
    if matches!(source, Source::Cookie) {
        let reads = parts.method == Method::GET || parts.method == Method::HEAD;
        crate::auth::cookies::check_cookie_request(&parts.headers, !reads)?;
    }
    let key_id = keys::parse_api_key(&token).map(|(id, _)| id.to_owned());
    let fail = |message: &str| match client {
        Some(ip) => state.auth_failures.failed(ip, key_id.as_deref(), message.to_owned()),
        None => ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message.to_owned()),
    };
    let now = halyard_platform::now_ms();
    let principal = match source {
        Source::Ticket if token.starts_with(crate::auth::tickets::PREFIX) => crate::auth::tickets::redeem(state, &token),
        Source::Ticket => {
            return Err(fail("an API key is never accepted in a URL: ask `POST /api/v1/ws-tickets` for a ticket and send that"));
        }
        Source::Bearer | Source::Cookie => state.accounts.authenticate(&token, now),
    }
    .map_err(|refusal| fail(refusal.message()))?;
    match (source, principal.session.is_some()) {
        // A session's token is only good as the cookie it was set in: stolen from a cookie jar,
        // it is worth nothing as a bearer token elsewhere.
        (Source::Bearer, true) => Err(fail("a session is only accepted as its cookie; send an API key")),
        (Source::Cookie, false) => Err(fail("the session cookie holds no session; sign in again")),
        _ => Ok(principal),
    }
}

impl FromRequestParts<AppState> for User {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        Ok(User(Principal::from_request_parts(parts, state).await?.user))
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let principal = Principal::from_request_parts(parts, state).await?;
        if !principal.admin {
            return Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden", "this needs an administrator's API key"));
        }
        Ok(Admin(principal.user))
    }
}
