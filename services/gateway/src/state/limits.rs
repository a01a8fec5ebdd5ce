//! In-memory counters one gateway keeps: requests per key, failed authentications per
//! address, WebSocket tickets and app links already used.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use axum::http::StatusCode;

use halyard_platform::netaddr;

use crate::http::error::ApiError;

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

/// Failed authentications, per client address group and per key id.
pub struct AuthFailures(RateLimiter);

impl AuthFailures {
    pub fn new(per_minute: u32) -> Self {
        Self(RateLimiter::new(per_minute))
    }

    /// Counts a failure of `client` (trying `key_id`, if the token named one) and says so: 401
    /// with `message`, or 429 once either has used up its budget.
    pub fn failed(&self, client: IpAddr, key_id: Option<&str>, message: String) -> ApiError {
        let by_client = self.0.take(&format!("ip:{}", netaddr::client_group(client)), true);
        let by_key = key_id.map_or(Ok(()), |id| self.0.take(&format!("key:{id}"), true));
        match (by_client, by_key) {
            (Err(wait), _) => limited(
                "too_many_failed_authentications",
                format!("too many failed authentications from your address; retry after {wait} s ({message})"),
                wait,
            ),
            (_, Err(wait)) => limited(
                "too_many_failed_authentications",
                format!("too many failed authentications for this key; retry after {wait} s ({message})"),
                wait,
            ),
            _ => ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message),
        }
    }
}

/// Tickets used here, until they expire.
#[derive(Default)]
pub struct UsedTickets(Mutex<HashMap<String, i64>>);

impl UsedTickets {
    /// Marks `nonce` used; false if it was already.
    pub fn take(&self, nonce: &str, expires_ms: i64, now: i64) -> bool {
        let mut used = self.0.lock().unwrap_or_else(|e| e.into_inner());
        used.retain(|_, exp| *exp > now);
        used.insert(nonce.to_owned(), expires_ms).is_none()
    }
}

pub(crate) fn limited(code: &'static str, message: String, wait: u64) -> ApiError {
    let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message);
    e.retry_after = Some(wait);
    e
}
