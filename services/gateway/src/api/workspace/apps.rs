//! Served apps: the agent's own servers (`WORKER_1`, `WORKER_2` in its sandbox) and the ports its
//! environment forwards (`PORT_<n>`, through the executor's `/ports/<n>/`) reached from the
//! browser through an authenticated reverse proxy, WebSocket upgrades included.
//!
//! Why a listener and an origin of their own: an app is the agent's code, and the agent is
//! assumed hostile. Served from the workspace's origin, its JavaScript could call the API with
//! the user's session cookie (and set the CSRF header). So each app lives at
//! `http://<sandbox>-<worker>.localhost:<apps port>` (or under `HALYARD_APPS_URL`): an origin per
//! app, which the workspace's cookie never reaches and which no other app shares.
//!
//! Access: the owner asks the API for a link (`POST /conversations/{id}/apps/{name}`); the link
//! carries a grant signed with the deployment secret, good for a minute and for one use, for
//! that app only. The proxy trades it for an HttpOnly cookie on the app's origin (12 hours at
//! most) and redirects to the app. Every request is checked again: grant, owner, sandbox
//! running, and the credential the link was asked with (signing out, or revoking the key, closes
//! the app at once).
//!
//! What the app receives is the browser's request less everything of Halyard's: no
//! `Authorization`, none of Halyard's cookies, and its own public host as `Host` (never its
//! upstream address, which would tell it where to send the browser to reach it directly).
//! A WebSocket whose `Origin` is another site's is refused: a page elsewhere must not drive an
//! app (or VS Code's terminals) with the user's cookie.
//!
//! VS Code is served the same way, as the app `VSCODE` (`<sandbox>-vscode.<apps host>`):
//! `GET /conversations/{id}/vscode` starts the sandbox's code-server and answers a link; the
//! proxy passes its requests to the executor's `/vscode/…` with the session key (see the
//! executor's `runtimes::vscode`). Its cookie is `Partitioned` (and so `Secure`, which Chromium
//! allows on `localhost` over HTTP): the workspace shows VS Code in an iframe, where a
//! third-party cookie is refused and a partitioned one is kept. Its answers may be framed by the
//! workspace's origin only (`frame-ancestors`), which the link names.

use crate::auth::Acting;
use crate::auth::app_grant::Grant;
use crate::domain::sandbox::running_sandbox;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::state::AppState;
use crate::state::registry::Principal;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use halyard_platform::{keys, now_ms};
use halyard_protocol::SandboxId;
use halyard_protocol::environment::PORT_APP_PREFIX;
use halyard_protocol::system::AGENT_SERVER;

pub use super::app_forward::COOKIE;
use super::app_forward::forward;

/// The path that trades a link's grant for the cookie.
const OPEN_PATH: &str = "/_halyard/open";
const LINK_MS: i64 = 60_000;
const COOKIE_MS: i64 = 12 * 3600 * 1000;
/// The app name VS Code is served under.
pub const VSCODE: &str = "VSCODE";

/// The DNS label of an app: `<sandbox id without dashes>-<worker name>`, e.g.
/// `0f5c…e1-worker-1`.
fn label(sandbox: SandboxId, name: &str) -> String {
    format!("{}-{}", sandbox.0.simple(), name.to_ascii_lowercase().replace('_', "-"))
}

/// The app a request's `Host` names.
fn app_of(headers: &HeaderMap) -> Option<(SandboxId, String)> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let first = host.split(['.', ':']).next()?;
    let (id, name) = first.split_once('-')?;
    let sandbox = SandboxId(uuid::Uuid::try_parse(id).ok()?);
    let name = name.to_ascii_uppercase().replace('-', "_");
    (name.starts_with("WORKER_") || name.starts_with(PORT_APP_PREFIX) || name == VSCODE).then_some((sandbox, name))
}

/// The base URL an app's label goes in front of.
fn app_origin(state: &AppState, label: &str) -> Result<String, ApiError> {
    let base = if state.config.apps_url.is_empty() {
        match state.apps_port {
            Some(port) => format!("http://localhost:{port}"),
            None => return Err(ApiError::conflict("apps_disabled", "this deployment serves no apps (HALYARD_APPS_ADDR is empty)")),
        }
    } else {
        state.config.apps_url.clone()
    };
    let (scheme, host) = base.split_once("://").unwrap_or(("http", base.as_str()));
    Ok(format!("{scheme}://{label}.{host}"))
}

/// A link that opens one of the sandbox's apps.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct AppLink {
    /// Opens the app in a browser, once, within a minute; its origin is the app's own.
    pub url: String,
}

/// A link that opens an app the agent serves (an exposed port of the sandbox), good once,
/// for a minute.
#[utoipa::path(post, path = "/conversations/{id}/apps/{name}", tag = "workspace",
    params(("id" = String, Path, format = Uuid), ("name" = String, Path, description = "the app's name in the sandbox's `exposed_urls`")),
    responses((status = 200, body = AppLink), Refusals, crate::http::api_doc::Conflict))]
pub async fn open(
    State(state): State<AppState>,
    principal: Principal,
    Path((id, name)): Path<(String, String)>,
) -> Result<Json<AppLink>, ApiError> {
    let user = principal.user;
    let (sandbox_id, sandbox) = running_sandbox(&state, &user, &id, "open its apps").await?;
    // The executor is Halyard's, not an app: its port is never proxied.
    if name == AGENT_SERVER || sandbox.url_of(&name).is_none() {
        return Err(ApiError::not_found("app"));
    }
    link(&state, sandbox_id, &name, &user, principal.credential, String::new())
}

/// A single-use link to app `name` of the sandbox, good for a minute, for `user` as
/// `credential` authenticated them; `frame` may show it in a frame.
fn link(
    state: &AppState,
    sandbox: SandboxId,
    name: &str,
    user: &halyard_protocol::UserId,
    credential: String,
    frame: String,
) -> Result<Json<AppLink>, ApiError> {
    let grant = Grant {
        sandbox,
        name: name.to_owned(),
        user: user.0.clone(),
        expires_ms: now_ms() + LINK_MS,
        credential,
        nonce: keys::random_secret(),
        frame,
    };
    let origin = app_origin(state, &label(sandbox, name))?;
    Ok(Json(AppLink { url: format!("{origin}{OPEN_PATH}?grant={}", grant.encode(&state.config.secret)) }))
}

/// A link that opens the conversation's VS Code in the sandbox (code-server, started now if it
/// is not running), good once, for a minute, on the apps proxy's origin: never the API's, since
/// what runs there is the agent's to change. The workspace's origin may show it in a frame.
#[utoipa::path(get, path = "/conversations/{id}/vscode", tag = "workspace",
    params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = AppLink), Refusals, crate::http::api_doc::Conflict,
        (status = 503, description = "the sandbox has no VS Code (its image lacks code-server) or did not start it", body = crate::http::api_doc::ErrorBody)))]
pub async fn vscode(
    State(state): State<AppState>,
    // VS Code writes files and opens terminals: no read-only key opens it.
    Acting(principal): Acting,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<AppLink>, ApiError> {
    let user = principal.user.clone();
    let (sandbox_id, sandbox) = running_sandbox(&state, &user, &id, "open VS Code").await?;
    crate::api::workspace::files::executor_of(&state, sandbox_id, &sandbox)?.start_vscode().await.map_err(|e| match e {
        halyard_platform::executor_client::ExecutorError::Rejected { status: 503, message, .. } => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "vscode_unavailable", message)
        }
        other => {
            tracing::warn!(%sandbox_id, error = %other, "VS Code did not start");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "vscode_unavailable", format!("VS Code did not start in the sandbox: {other}"))
        }
    })?;
    // The workspace's origin goes into a header: nothing but an origin's characters.
    let frame = Some(crate::auth::client::workspace_origin(&state, &headers))
        .filter(|o| o.chars().all(|c| c.is_ascii_alphanumeric() || ".:/-[]".contains(c)))
        .unwrap_or_default();
    link(&state, sandbox_id, VSCODE, &user, principal.credential, frame)
}

/// A plain page for a person who reached the proxy without the right to.
fn page(status: StatusCode, text: &str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], format!("{text}\n"))
        .into_response()
}

/// Every request on the apps listener.
pub async fn proxy(State(state): State<AppState>, req: Request) -> Response {
    let Some((sandbox_id, name)) = app_of(req.headers()) else {
        return page(StatusCode::NOT_FOUND, "No app here. Open apps from the conversation's Apps tab in Halyard.");
    };
    let now = now_ms();
    let secret = &state.config.secret;

    if req.uri().path() == OPEN_PATH {
        let grant = req
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("grant=")))
            .and_then(|t| Grant::decode(secret, t, now))
            .filter(|g| g.sandbox == sandbox_id && g.name == name);
        let Some(grant) = grant.filter(|g| state.used_app_links.take(&g.nonce, g.expires_ms, now)) else {
            return page(
                StatusCode::FORBIDDEN,
                "This link is not valid (each opens its app once, within a minute). Open the app again from Halyard.",
            );
        };
        // Never past the credential's own expiry.
        let until = (now + COOKIE_MS).min(state.accounts.credential_expiry(&grant.credential).unwrap_or(i64::MAX));
        let max_age = ((until - now) / 1000).max(1);
        let cookie = Grant { expires_ms: until, ..grant }.encode(secret);
        let mut res = Response::new(Body::empty());
        *res.status_mut() = StatusCode::SEE_OTHER;
        res.headers_mut().insert(header::LOCATION, HeaderValue::from_static("/"));
        res.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        // Host-only (no Domain): this app's origin and no other. Lax, so the redirect that
        // follows from Halyard's page carries it; VS Code's is partitioned, for its iframe.
        let kind =
            if name == VSCODE && secure_origin(&state, req.headers()) { "SameSite=None; Secure; Partitioned" } else { "SameSite=Lax" };
        if let Ok(v) = HeaderValue::from_str(&format!("{COOKIE}={cookie}; Path=/; HttpOnly; {kind}; Max-Age={max_age}")) {
            res.headers_mut().insert(header::SET_COOKIE, v);
        }
        return res;
    }

    let grant = crate::auth::cookies::named_cookie(req.headers(), COOKIE)
        .and_then(|t| Grant::decode(secret, &t, now))
        .filter(|g| g.sandbox == sandbox_id && g.name == name);
    let Some(grant) = grant else {
        return page(StatusCode::UNAUTHORIZED, "Open this app from the conversation's Apps tab in Halyard.");
    };
    // Checked on every request, not only at the link: a deleted sandbox, a new owner, a
    // disabled user, a signed-out session or a revoked key closes the app at once.
    let user = halyard_protocol::UserId(grant.user.clone());
    if let Err(refusal) = state.accounts.principal(&user, halyard_protocol::accounts::KeyScope::ReadOnly, &grant.credential, now) {
        return page(StatusCode::UNAUTHORIZED, &format!("{} Open the app again from Halyard.", refusal.message()));
    }
    let mut sandbox = match state.store.sandbox(sandbox_id) {
        Ok(Some(s)) if s.owner == grant.user => s,
        Ok(_) => return page(StatusCode::NOT_FOUND, "This app's sandbox is gone."),
        Err(e) => {
            tracing::error!(error = %e, "cannot read the sandbox");
            return page(StatusCode::SERVICE_UNAVAILABLE, "Try again shortly.");
        }
    };
    if sandbox.status == "HIBERNATED" {
        let woke = match crate::auth::quota::check_quota(&state, &user) {
            Ok(()) => crate::domain::sandbox::wake(&state, sandbox_id, sandbox).await,
            Err(e) => Err(e),
        };
        sandbox = match woke {
            Ok(s) => s,
            Err(e) => return page(e.status, &format!("{} Reload to try again.", e.message)),
        };
    }
    if sandbox.status != "RUNNING" {
        return page(StatusCode::CONFLICT, &format!("The sandbox is {}; resume the conversation in Halyard.", sandbox.status));
    }
    let scheme = public_scheme(&state);
    if req.headers().contains_key(header::UPGRADE) && !same_origin(req.headers(), scheme) {
        return page(StatusCode::FORBIDDEN, "A WebSocket from another site is refused here.");
    }
    // VS Code and forwarded ports are reached through the executor (its `/vscode/…` and
    // `/ports/<n>/…`, with the session key); the record's URL of a port is the executor's.
    let (upstream, via) = match name.as_str() {
        VSCODE => (sandbox.url_of(AGENT_SERVER), true),
        _ => (sandbox.url_of(&name), name.starts_with(PORT_APP_PREFIX)),
    };
    let Some(upstream) = upstream else {
        return page(StatusCode::NOT_FOUND, "This sandbox serves no such app.");
    };
    let Some(address) = upstream.strip_prefix("http://").map(|a| a.trim_end_matches('/')) else {
        return page(StatusCode::BAD_GATEWAY, "The app's address is not plain HTTP.");
    };
    let (authority, prefix) = match address.split_once('/') {
        Some((authority, path)) => (authority, format!("/{path}")),
        None if name == VSCODE => (address, "/vscode".to_owned()),
        None => (address, String::new()),
    };
    let key = keys::session_key(secret, sandbox_id);
    let frame = grant.frame.clone();
    match forward(authority, req, scheme, via.then_some((key.as_str(), prefix.as_str()))).await {
        Ok(mut res) if name == VSCODE => {
            // Only the workspace may frame it (clickjacking by any other page is not possible).
            let ancestors = if frame.is_empty() { "'none'".to_owned() } else { frame };
            if let Ok(v) = HeaderValue::from_str(&format!("frame-ancestors {ancestors}")) {
                res.headers_mut().append(header::CONTENT_SECURITY_POLICY, v);
            }
            res.headers_mut().remove(header::X_FRAME_OPTIONS);
            res
        }
        Ok(res) => res,
        Err(e) => {
            tracing::debug!(sandbox_id = %sandbox_id, app = %name, error = %e, "app unreachable");
            page(StatusCode::BAD_GATEWAY, &format!("Nothing answers on {name} in the sandbox yet ({e}). Start the app, then reload."))
        }
    }
}

/// The scheme the apps are served with to browsers.
fn public_scheme(state: &AppState) -> &'static str {
    if state.config.apps_url.starts_with("https://") { "https" } else { "http" }
}

/// Whether a browser keeps a `Secure` cookie from this origin: HTTPS, or `localhost` and its
/// subdomains (which Chromium treats as secure over plain HTTP).
fn secure_origin(state: &AppState, headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let name = host.rsplit_once(':').map_or(host, |(n, _)| n);
    public_scheme(state) == "https" || name == "localhost" || name.ends_with(".localhost")
}

/// Whether the request's `Origin`, if it has one, is its own host's: a browser always sends one
/// with a WebSocket, and another site's page must not open one with the user's cookie.
fn same_origin(headers: &HeaderMap, scheme: &str) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else { return true };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    origin.to_str().is_ok_and(|o| o.eq_ignore_ascii_case(&format!("{scheme}://{host}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_app_is_named_by_the_first_label_of_its_host() {
        let id = SandboxId(uuid::Uuid::new_v4());
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(&format!("{}.localhost:3001", label(id, "WORKER_2"))).unwrap());
        assert_eq!(app_of(&h), Some((id, "WORKER_2".to_owned())));
        h.insert(header::HOST, HeaderValue::from_str(&format!("{}.apps.example.com", label(id, VSCODE))).unwrap());
        assert_eq!(app_of(&h), Some((id, VSCODE.to_owned())));
        h.insert(header::HOST, HeaderValue::from_str(&format!("{}-agent-server.localhost", id.0.simple())).unwrap());
        assert_eq!(app_of(&h), None, "the executor is no app");
        h.insert(header::HOST, HeaderValue::from_static("localhost:3001"));
        assert_eq!(app_of(&h), None);
    }
}
