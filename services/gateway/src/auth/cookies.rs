//! The web workspace's session cookie and its CSRF rule, and the recent proof some changes
//! ask for.

use axum::http::{HeaderMap, StatusCode, header};

use halyard_platform::now_ms;

use crate::http::error::ApiError;
use crate::state::AppState;
use crate::state::registry::Principal;

/// The cookie's name over plain HTTP.
pub const COOKIE: &str = "halyard_session";

/// Its name under HTTPS: the `__Host-` prefix makes browsers refuse it unless it is Secure,
/// host-only and for `/`, so a page on a sibling host cannot plant one.
pub const HOST_COOKIE: &str = "__Host-halyard_session";

/// The header a change made with the cookie must carry (any value).
pub const CSRF_HEADER: &str = "x-halyard-csrf";

/// Whether the client came over HTTPS (as a proxy in front says).
pub fn https(headers: &HeaderMap) -> bool {
    headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

/// The session cookie's name for this request.
pub fn cookie_name(headers: &HeaderMap) -> &'static str {
    if https(headers) { HOST_COOKIE } else { COOKIE }
}

/// The session token in the request's cookies: `Ok(None)` without one, an error with more than
/// one (another page of this host may have planted the second; which one is the user's cannot
/// be told, so neither is used).
pub fn session_cookie(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut found = all_cookies(headers, cookie_name(headers));
    if found.len() > 1 {
        return Err(ApiError::bad_request(
            "ambiguous_session",
            "this request carries more than one session cookie (another page on this host may have set one); \
             clear this site's cookies and sign in again",
        ));
    }
    Ok(found.pop().filter(|t| !t.is_empty()))
}

/// The value of the cookie `name` in the request's cookies, if it is there once and not empty.
pub fn named_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut found = all_cookies(headers, name);
    (found.len() == 1).then(|| found.pop()).flatten().filter(|t| !t.is_empty())
}

/// Whether the request, if it names its `Origin`, comes from this gateway's own origin (the
/// host and port it was sent to).
pub fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest).trim_end_matches('/');
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}

/// What a request made with the session cookie must show besides it. A page on another origin
/// of the same site (another port of this host, a served app) is sent the cookie too, and a
/// WebSocket is not held back by the same-origin policy: the request must come from this origin
/// when it says where from. A `change` must carry a header a page of another site cannot send
/// (cross-origin, a custom header needs a CORS preflight this API never grants), besides the
/// cookie's SameSite.
pub fn check_cookie_request(headers: &HeaderMap, change: bool) -> Result<(), ApiError> {
    if !same_origin(headers) {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "cross_origin", "the session cookie is only accepted from this origin"));
    }
    if change && !headers.contains_key(CSRF_HEADER) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf_header_missing",
            format!("a change made with the session cookie needs the `{CSRF_HEADER}` header"),
        ));
    }
    Ok(())
}

/// For changes that must not be made with a stolen or forgotten session (keys, roles,
/// secrets): a session must have shown its key in the last few minutes; an API key always has.
pub fn require_recent_proof(state: &AppState, principal: &Principal) -> Result<(), ApiError> {
    let Some(session) = &principal.session else { return Ok(()) };
    let window = (state.config.gateway.step_up_secs as i64) * 1000;
    if now_ms() - session.verified_ms <= window {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "step_up_required",
        format!(
            "this change needs a recent sign-in: send your API key to `POST /api/v1/session/step-up` ({{\"api_key\": ...}}) \
             or sign in again, then retry within {} minutes",
            (window / 60_000).max(1)
        ),
    ))
}

/// Every value of the cookie `name` in the request, in order.
fn all_cookies(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
        .map(str::to_owned)
        .collect()
}
