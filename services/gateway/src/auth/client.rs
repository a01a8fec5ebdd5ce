//! Who is at the other end of a request: its client address (trusting `X-Forwarded-For` only
//! from configured proxies), the pause before a refusal past a limit, and the web workspace's
//! origin.

use std::net::IpAddr;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};

use halyard_platform::netaddr;

use crate::http::error::ApiError;
use crate::state::AppState;

/// Where the web workspace is (a share link's origin, the one page that may frame VS Code): the
/// operator's public URL, else the host this request came to.
pub fn workspace_origin(state: &AppState, headers: &HeaderMap) -> String {
    if !state.config.gateway.public_url.is_empty() {
        return state.config.gateway.public_url.clone();
    }
    let host = headers.get(axum::http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    format!("http://{host}")
}

/// How long a failure past the budget is held before its 429.
const PENALTY: Duration = Duration::from_secs(1);

/// The client address of a request from `peer`: `X-Forwarded-For` counts only when `peer` is a
/// configured trusted proxy.
pub fn client_ip(state: &AppState, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
    let forwarded = headers.get_all("x-forwarded-for").iter().filter_map(|v| v.to_str().ok());
    netaddr::client_address(peer, forwarded, &state.trusted_proxies)
}

/// Holds a refusal a moment when it is a limit's (a guesser waits; a person never gets here).
pub async fn slow_down(e: ApiError) -> ApiError {
    if e.status == StatusCode::TOO_MANY_REQUESTS {
        tokio::time::sleep(PENALTY).await;
    }
    e
}
