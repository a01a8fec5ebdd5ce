//! Authentication of every request: the API key (a bearer token, `access_token` in the query
//! for browsers' WebSockets, or the web workspace's session cookie, [`crate::session`]) is checked against the accounts ([`crate::accounts`]); a read-only
//! key may only read; writes are rate limited per user; and failed authentications are rate
//! limited per client address, so keys cannot be guessed at speed.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, header};

use halyard_protocol::UserId;
use halyard_protocol::accounts::KeyScope;

use crate::AppState;
use crate::accounts::Principal;
use crate::error::ApiError;

/// The authenticated user of a request.
#[derive(Clone, Debug)]
pub struct User(pub UserId);

/// The authenticated user of a request that needs an administrator.
#[derive(Clone, Debug)]
pub struct Admin(pub UserId);

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let client = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        if let Some(ip) = client {
            state.auth_failures.refuse_if_over(ip)?;
        }
        let bearer = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .map(str::to_owned);
        // Browsers cannot set headers on a WebSocket: accept `access_token` in the query too.
        let token = bearer
            .or_else(|| parts.uri.query().and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("access_token=").map(str::to_owned))));
        // Else the web workspace's session cookie; its writes must say so in a header a page
        // of another site cannot send (cross-origin, a custom header needs a CORS preflight
        // this API never grants), besides the cookie's SameSite=Strict.
        let from_cookie = token.is_none();
        let Some(token) = token.or_else(|| crate::session::cookie_token(&parts.headers)) else {
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "send your API key as `Authorization: Bearer <key>`"));
        };
        let reads = parts.method == Method::GET || parts.method == Method::HEAD;
        // A page on another origin of the same site (another port of this host, a served
        // app) is sent the cookie too, and a WebSocket is not held back by the same-origin
        // policy: a request with the cookie must come from this origin when it says where from.
        if from_cookie && !crate::session::same_origin(&parts.headers) {
            return Err(ApiError::new(StatusCode::FORBIDDEN, "cross_origin", "the session cookie is only accepted from this origin"));
        }
        if from_cookie && !reads && !parts.headers.contains_key(crate::session::CSRF_HEADER) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "csrf_header_missing",
                format!("a change made with the session cookie needs the `{}` header", crate::session::CSRF_HEADER),
            ));
        }
        let principal = state.accounts.authenticate(&token, halyard_platform::now_ms()).map_err(|refusal| {
            if let Some(ip) = client {
                state.auth_failures.record(ip);
            }
            ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", refusal.message())
        })?;
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
        Ok(principal)
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

/// A token bucket per key (user, client address), refilled at `per_minute / 60` a second.
pub struct RateLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    pub fn new(per_minute: u32) -> Self {
        Self { per_minute, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes a token for `key`, or says how long to wait for one.
    pub fn check(&self, key: &str) -> Result<(), ApiError> {
        match self.take(key, true) {
            Ok(()) => Ok(()),
            Err(wait) => {
                Err(limited("rate_limited", format!("more than {} write requests a minute; retry after {wait} s", self.per_minute), wait))
            }
        }
    }

    /// Refills `key`'s bucket and takes a token if `take` (else only looks). `Err(seconds)`
    /// until one is there.
    fn take(&self, key: &str, take: bool) -> Result<(), u64> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let cap = f64::from(self.per_minute);
        let rate = cap / 60.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > 100_000 {
            // Bounded: full buckets carry no information, drop them.
            buckets.retain(|_, (tokens, _)| *tokens < cap);
        }
        let now = Instant::now();
        let (tokens, at) = buckets.entry(key.to_owned()).or_insert((cap, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(cap);
        *at = now;
        if *tokens < 1.0 {
            return Err(((1.0 - *tokens) / rate).ceil().max(1.0) as u64);
        }
        if take {
            *tokens -= 1.0;
        }
        Ok(())
    }
}

/// Failed authentications per client address.
pub struct AuthFailures(RateLimiter);

impl AuthFailures {
    pub fn new(per_minute: u32) -> Self {
        Self(RateLimiter::new(per_minute))
    }

    /// 429 while `ip` has used up its failures.
    pub(crate) fn refuse_if_over(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.0.take(&ip.to_string(), false).map_err(|wait| {
            limited(
                "too_many_failed_authentications",
                format!("too many failed authentications from your address; retry after {wait} s"),
                wait,
            )
        })
    }

    pub(crate) fn record(&self, ip: IpAddr) {
        let _ = self.0.take(&ip.to_string(), true);
    }
}

fn limited(code: &'static str, message: String, wait: u64) -> ApiError {
    let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message);
    e.retry_after = Some(wait);
    e
}
