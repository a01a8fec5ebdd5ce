//! The apps proxy's forwarding: a browser's request to an app (or VS Code) sent to the sandbox
//! over a connection of its own, less everything of Halyard's (its cookies, `Authorization`, the
//! session key, forwarded-for headers), with the app's public host; a `101 Switching Protocols`
//! joins the two upgraded connections. The access checks before it are [`super::apps`].

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use halyard_protocol::executor::SESSION_KEY_HEADER;
use hyper_util::rt::TokioIo;

/// The proxy's cookie, on each app's own origin.
pub const COOKIE: &str = "halyard_app";

/// Hop-by-hop headers, which belong to one connection and are not forwarded (RFC 9110 7.6.1).
const HOP: [&str; 8] =
    ["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"];

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

/// Sends `req` to the app at `authority` over a connection of its own, and relays the answer;
/// a `101 Switching Protocols` joins the two upgraded connections. `via_executor` (VS Code's, a
/// forwarded port's): the sandbox's session key, and the executor's path prefix the path goes
/// under (`/vscode`, `/ports/<n>`).
pub(super) async fn forward(
    authority: &str,
    mut req: Request,
    scheme: &str,
    via_executor: Option<(&str, &str)>,
) -> Result<Response, String> {
    let upgrade = req.headers().get(header::UPGRADE).cloned();
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();

    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let path = match via_executor {
        Some((_, prefix)) => format!("{prefix}{path}"),
        None => path.to_owned(),
    };
    let mut out = hyper::Request::builder().method(parts.method).uri(path).version(hyper::Version::HTTP_11);
    let headers = out.headers_mut().ok_or("bad request")?;
    for (k, v) in &parts.headers {
        // The user's credentials are Halyard's, never the app's; nor is the session key a
        // browser's to send.
        if HOP.contains(&k.as_str())
            || k == header::COOKIE
            || k == header::HOST
            || k == header::AUTHORIZATION
            || k.as_str().starts_with("x-forwarded-")
            || k.as_str() == SESSION_KEY_HEADER
        {
            continue;
        }
        headers.append(k, v.clone());
    }
    if let Some((key, _)) = via_executor {
        headers.insert(SESSION_KEY_HEADER, HeaderValue::from_str(key).map_err(|e| e.to_string())?);
    }
    if let Some(c) = app_cookies(&parts.headers).and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(header::COOKIE, c);
    }
    // The app's public host (its origin through this proxy), never the upstream address: an
    // app told where it listens could send the browser there, past the proxy.
    let public = parts.headers.get(header::HOST).cloned().ok_or("no Host")?;
    headers.insert("x-forwarded-host", public.clone());
    headers.insert("x-forwarded-proto", HeaderValue::from_str(scheme).map_err(|e| e.to_string())?);
    headers.insert(header::HOST, public);
    if let Some(u) = &upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, u.clone());
    }
    let out = out.body(body).map_err(|e| e.to_string())?;

    let stream = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(authority))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut res = sender.send_request(out).await.map_err(|e| e.to_string())?;

    if res.status() == StatusCode::SWITCHING_PROTOCOLS {
        let server_upgrade = hyper::upgrade::on(&mut res);
        if let Some(client_upgrade) = client_upgrade {
            tokio::spawn(async move {
                if let (Ok(client), Ok(server)) = (client_upgrade.await, server_upgrade.await) {
                    let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(client), &mut TokioIo::new(server)).await;
                }
            });
        }
        let (parts, _) = res.into_parts();
        return Ok(Response::from_parts(parts, Body::empty()));
    }

    let (mut parts, body) = res.into_parts();
    for h in HOP {
        parts.headers.remove(h);
    }
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
