//! Authentication (API keys as bearer tokens) and per-user rate limiting.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, header};

use halyard_platform::keys::constant_time_eq;
use halyard_protocol::UserId;

use crate::AppState;
use crate::error::ApiError;

/// The authenticated user of a request.
#[derive(Clone, Debug)]
pub struct User(pub UserId);

impl FromRequestParts<AppState> for User {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
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
        let Some(token) = token else {
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "send your API key as `Authorization: Bearer <key>`"));
        };
        // Compare against every key, each in constant time.
        let mut found = None;
        for k in &state.config.api_keys {
            if constant_time_eq(k.key.as_bytes(), token.as_bytes()) {
                found = Some(k.user.clone());
            }
        }
        let user = found.ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "the API key is not valid"))?;
        if parts.method != Method::GET {
            state.limiter.check(&user)?;
        }
        Ok(User(UserId(user)))
    }
}

/// A token bucket per user for write requests.
pub struct RateLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    pub fn new(per_minute: u32) -> Self {
        Self { per_minute, buckets: Mutex::new(HashMap::new()) }
    }

    pub fn check(&self, user: &str) -> Result<(), ApiError> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let cap = f64::from(self.per_minute);
        let rate = cap / 60.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let (tokens, at) = buckets.entry(user.to_owned()).or_insert((cap, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(cap);
        *at = now;
        if *tokens < 1.0 {
            let wait = ((1.0 - *tokens) / rate).ceil() as u64;
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("more than {} write requests a minute; retry after {wait} s", self.per_minute),
            );
            e.retry_after = Some(wait.max(1));
            return Err(e);
        }
        *tokens -= 1.0;
        Ok(())
    }
}
