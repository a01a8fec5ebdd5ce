//! Runtimes' URLs. In path mode `/<runtime id>/…` goes to the runtime's agent server (port
//! 60000), `/<runtime id>/vscode/…` to 60001, `/<runtime id>/work-1/…` and `/work-2/…` to the two
//! worker ports, each without its prefix; in subdomain mode the `Host` says it (`<id>.<host>`,
//! `vscode-<id>.<host>`, ...) and the path is passed whole; as OpenHands' client derives them
//! (`_build_service_url`). Over a connection of its own to the runtime's published port, through
//! the platform's `http_relay`: streamed both ways, WebSocket upgrades joined (the agent server's
//! event socket, VS Code's).
//!
//! No key is asked here: what answers checks its own (the agent server its session API key,
//! VS Code its token), as behind OpenHands' own runtime ingress. A paused or stopped runtime,
//! or one that does not exist, is a 404 or 503 in JSON.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use halyard_platform::http_relay::{Relayed, relay};

use super::idle::Idle;
use super::refusal::Refusal;
use super::runtimes::{self, Assignments, SERVICES, State as RunState};
use crate::docker::Engine;

/// The runtime, the container port and the path left, of a runtime URL's path.
fn route(path: &str) -> Option<(&str, u16, String)> {
    let rest = path.strip_prefix('/')?;
    let (id, rest) = rest.split_once('/').unwrap_or((rest, ""));
    if id.is_empty() {
        return None;
    }
    let (first, after) = rest.split_once('/').unwrap_or((rest, ""));
    let (port, left) = match SERVICES.iter().find(|(name, _)| !name.is_empty() && *name == first) {
        Some((_, port)) => (*port, after),
        None => (SERVICES[0].1, rest),
    };
    Some((id, port, format!("/{left}")))
}

fn without_port(host: &str) -> &str {
    host.rsplit_once(':').filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit())).map_or(host, |(h, _)| h)
}

/// The runtime and the container port a subdomain names (`<id>` or `<service>-<id>`), if `host`
/// is one of `base`'s.
fn route_host<'a>(host: &'a str, base: &str) -> Option<(&'a str, u16)> {
    let label = without_port(host).strip_suffix(without_port(base))?.strip_suffix('.')?;
    if label.is_empty() || label.contains('.') {
        return None;
    }
    for (name, port) in SERVICES.iter().filter(|(name, _)| !name.is_empty()) {
        if let Some(id) = label.strip_prefix(name).and_then(|rest| rest.strip_prefix('-')) {
            return Some((id, *port));
        }
    }
    Some((label, SERVICES[0].1))
}

/// Passes a request under a runtime's URL (`url` the Runtime API's public one) to it.
pub async fn forward(engine: &Engine, store: &Assignments, idle: &Arc<Idle>, url: &str, subdomains: bool, req: Request) -> Response {
    match pass(engine, store, idle, url, subdomains, req).await {
        Ok(res) => res,
        Err(refusal) => refusal.into_response(),
    }
}

async fn pass(
    engine: &Engine,
    store: &Assignments,
    idle: &Arc<Idle>,
    url: &str,
    subdomains: bool,
    req: Request,
) -> Result<Response, Refusal> {
    let not_found = || Refusal::new(StatusCode::NOT_FOUND, "not_found", "No such route or runtime.");
    let base = url.split_once("://").map_or(url, |(_, h)| h).to_owned();
    let host = req.headers().get(axum::http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default().to_owned();
    let (id, port, path) = match route_host(&host, &base).filter(|_| subdomains) {
        Some((id, port)) => (id, port, req.uri().path().to_owned()),
        None => route(req.uri().path()).ok_or_else(not_found)?,
    };
    let runtime = runtimes::find(engine, store, id).await?.ok_or_else(not_found)?;
    if runtime.state != RunState::Running {
        return Err(Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "runtime_not_running",
            "The runtime is paused or stopped: resume it first.",
        ));
    }
    let host_port = runtime.ports.get(&port).ok_or_else(not_found)?;
    let query = req.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
    let unreachable = |e: String| {
        Refusal::new(StatusCode::BAD_GATEWAY, "runtime_unreachable", format!("The runtime did not answer ({e}); it may still be starting."))
    };
    let stream = tokio::net::TcpStream::connect((engine.publish_host, *host_port)).await.map_err(|e| unreachable(e.to_string()))?;
    let _ = stream.set_nodelay(true);
    // Use, for hibernation: from the request's start to its answer, or for as long as an
    // upgraded connection stays open.
    idle.used(&runtime.runtime_id, true);
    let relayed = relay(stream, req, &format!("{path}{query}"), |_| false).await;
    match relayed {
        Ok(Relayed::Upgraded(res, joined)) => {
            let id = runtime.runtime_id.clone();
            let idle = idle.clone();
            tokio::spawn(async move {
                let _ = joined.await;
                idle.used(&id, false);
            });
            Ok(res)
        }
        other => {
            idle.used(&runtime.runtime_id, false);
            match other.map_err(unreachable)? {
                Relayed::Answer(res) => {
                    let (parts, body) = res.into_parts();
                    Ok(Response::from_parts(parts, Body::new(body)))
                }
                Relayed::Upgraded(res, _) => Ok(res),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn a_runtime_url_names_its_service_by_its_first_segment() {
        assert_eq!(route("/abc/alive"), Some(("abc", 60000, "/alive".into())));
        assert_eq!(route("/abc"), Some(("abc", 60000, "/".into())));
        assert_eq!(route("/abc/vscode/x?y"), Some(("abc", 60001, "/x?y".into())));
        assert_eq!(route("/abc/work-2"), Some(("abc", 12001, "/".into())));
        assert_eq!(route("/abc/api/vscode"), Some(("abc", 60000, "/api/vscode".into())));
        assert_eq!(route("/"), None);
    }

    #[test]
    fn a_subdomain_names_its_runtime_and_service() {
        use super::route_host;
        let base = "runtimes.localhost:3005";
        assert_eq!(route_host("abc.runtimes.localhost:3005", base), Some(("abc", 60000)));
        assert_eq!(route_host("vscode-abc.runtimes.localhost", base), Some(("abc", 60001)));
        assert_eq!(route_host("work-2-abc.runtimes.localhost:3005", base), Some(("abc", 12001)));
        assert_eq!(route_host("runtimes.localhost:3005", base), None);
        assert_eq!(route_host("a.b.runtimes.localhost", base), None);
        assert_eq!(route_host("abc.elsewhere.test", base), None);
    }
}
