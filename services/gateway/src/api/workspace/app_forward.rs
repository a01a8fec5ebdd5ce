//! The apps proxy's forwarding: a browser's request to an app (or VS Code) sent to the sandbox
//! over a connection of its own, less everything of Halyard's (its cookies, `Authorization`, the
//! session key, forwarded-for headers), with the app's public host, over the platform's
//! `http_relay` (which the executor and the Runtime API use too). The access checks before it
//! are [`super::apps`].

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::Response;
use halyard_platform::http_relay::{Relayed, relay};
use halyard_protocol::executor::SESSION_KEY_HEADER;

/// The proxy's cookie, on each app's own origin.
pub const COOKIE: &str = "halyard_app";

/// The request's cookies less Halyard's own.
fn app_cookies(headers: &HeaderMap) -> Option<String> {
    let kept: Vec<&str> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|c| {
            let name = c.split('=').next().unwrap_or_default();
            !c.is_empty() && ![COOKIE, crate::auth::cookies::COOKIE, crate::auth::cookies::HOST_COOKIE].contains(&name)
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join("; "))
}

/// Sends `req` to the app at `authority` over a connection of its own, and relays the answer
/// (the platform's `http_relay`: hop-by-hop headers stay behind; a `101 Switching Protocols`
/// joins the two upgraded connections). `via_executor` (VS Code's, a forwarded port's): the
/// sandbox's session key, and the executor's path prefix the path goes under (`/vscode`,
/// `/ports/<n>`).
pub(super) async fn forward(
    authority: &str,
    mut req: Request,
    scheme: &str,
    via_executor: Option<(&str, &str)>,
) -> Result<Response, String> {
    let path = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let path = match via_executor {
        Some((_, prefix)) => format!("{prefix}{path}"),
        None => path.to_owned(),
    };
    // The app's public host (its origin through this proxy), never the upstream address: an
    // app told where it listens could send the browser there, past the proxy.
    let public = req.headers().get(header::HOST).cloned().ok_or("no Host")?;
    let cookies = app_cookies(req.headers());
    let headers = req.headers_mut();
    // The user's credentials are Halyard's, never the app's; nor is the session key a
    // browser's to send.
    let halyards: Vec<HeaderName> = headers
        .keys()
        .filter(|k| {
            **k == header::COOKIE
                || **k == header::AUTHORIZATION
                || k.as_str().starts_with("x-forwarded-")
                || k.as_str() == SESSION_KEY_HEADER
        })
        .cloned()
        .collect();
    for k in halyards {
        headers.remove(k);
    }
    if let Some((key, _)) = via_executor {
        headers.insert(SESSION_KEY_HEADER, HeaderValue::from_str(key).map_err(|e| e.to_string())?);
    }
    if let Some(c) = cookies.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(header::COOKIE, c);
    }
    headers.insert("x-forwarded-host", public.clone());
    headers.insert("x-forwarded-proto", HeaderValue::from_str(scheme).map_err(|e| e.to_string())?);
    headers.insert(header::HOST, public);

    let stream = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(authority))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let res = match relay(stream, req, &path, |_| false).await? {
        Relayed::Upgraded(res, _) => return Ok(res),
        Relayed::Answer(res) => res,
    };
    let (mut parts, body) = res.into_parts();
    // The app cannot overwrite Halyard's cookie on its origin (it could only lock itself out,
    // but a clean answer is simpler to reason about).
    let cookies: Vec<HeaderValue> = parts.headers.get_all(header::SET_COOKIE).iter().cloned().collect();
    parts.headers.remove(header::SET_COOKIE);
    for c in cookies {
        if !c.to_str().is_ok_and(|s| s.trim_start().starts_with(&format!("{COOKIE}="))) {
            parts.headers.append(header::SET_COOKIE, c);
        }
    }
    Ok(Response::from_parts(parts, Body::new(body)))
}
