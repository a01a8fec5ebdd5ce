//! Passing one HTTP request to a server over a connection of its own, and its answer back:
//! hop-by-hop headers stay behind (and whatever else the caller names: the executor's session
//! key); a `101 Switching Protocols` joins the two upgraded connections, so WebSockets pass too.
//! Used by the executor (VS Code on its Unix socket, an app on a forwarded port) and by the
//! sandbox supervisor's Runtime API (a runtime's published ports).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// Hop-by-hop headers, which belong to one connection and are not passed on (RFC 9110 7.6.1).
pub const HOP: [&str; 8] =
    ["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"];

/// An answer of the program, and (for an upgrade) the joined connection's end.
pub enum Relayed {
    /// An ordinary answer, hop-by-hop headers removed.
    Answer(hyper::Response<hyper::body::Incoming>),
    /// The connections were upgraded and are being joined: the `101` to send back.
    Upgraded(Response, tokio::task::JoinHandle<()>),
}

/// Sends `req` to the server at the other end of `stream`, as `path`, less the headers `drop`
/// names besides the hop-by-hop ones.
pub async fn relay<S>(stream: S, mut req: Request, path: &str, drop: impl Fn(&HeaderName) -> bool) -> Result<Relayed, String>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let upgrade = req.headers().get(header::UPGRADE).cloned();
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let mut out = hyper::Request::builder().method(parts.method).uri(path).version(hyper::Version::HTTP_11);
    let headers = out.headers_mut().ok_or("bad request")?;
    for (k, v) in &parts.headers {
        if HOP.contains(&k.as_str()) || drop(k) {
            continue;
        }
        headers.append(k, v.clone());
    }
    if let Some(u) = &upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, u.clone());
    }
    let out = out.body(body).map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut res = sender.send_request(out).await.map_err(|e| e.to_string())?;
    if res.status() == StatusCode::SWITCHING_PROTOCOLS {
        let server_upgrade = hyper::upgrade::on(&mut res);
        let joined = tokio::spawn(async move {
            if let (Some(client), Ok(server)) = (client_upgrade, server_upgrade.await) {
                if let Ok(client) = client.await {
                    let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(client), &mut TokioIo::new(server)).await;
                }
            }
        });
        let (parts, _) = res.into_parts();
        return Ok(Relayed::Upgraded(Response::from_parts(parts, Body::empty()), joined));
    }
    for h in HOP {
        res.headers_mut().remove(h);
    }
    Ok(Relayed::Answer(res))
}
