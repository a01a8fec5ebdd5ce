//! The sandbox's forwarded ports (an environment's `forward_ports`, a dev container's
//! `forwardPorts`): `/ports/<n>/…` with the session key is passed to `127.0.0.1:<n>` in the
//! sandbox, where the app listens, as the path after the prefix. The gateway's apps proxy sends
//! only the ports the sandbox's record lists, each on an origin of its own, after checking the
//! user; here the session key is the check. Loopback is the sandbox's own: a container's, or a
//! process sandbox's network namespace (a process sandbox on the host's network forwards none,
//! which its supervisor refuses before any port is listed).

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};

use crate::error::ExecutorError;
use halyard_platform::http_relay::{Relayed, relay};
use halyard_protocol::executor::SESSION_KEY_HEADER;

/// `/ports/<n>/…`: a request for the app on port `n`.
pub async fn forward(req: Request) -> Response {
    let full = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let rest = full.strip_prefix("/ports/").unwrap_or_default();
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let Ok(port) = rest[..digits].parse::<u16>() else {
        return ExecutorError::NotFound("`/ports/<n>/`: n is a port of the sandbox".into()).into_response();
    };
    let path = match &rest[digits..] {
        "" => "/".to_owned(),
        p if p.starts_with('/') => p.to_owned(),
        p => format!("/{p}"),
    };
    let unreachable =
        |e: String| ExecutorError::Unavailable(format!("nothing answers on port {port} in the sandbox ({e}); start the app there first"));
    let stream = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(s) => s,
        Err(e) => return unreachable(e.to_string()).into_response(),
    };
    match relay(stream, req, &path, |k| k == SESSION_KEY_HEADER).await {
        Ok(Relayed::Answer(res)) => {
            let (parts, body) = res.into_parts();
            Response::from_parts(parts, Body::new(body))
        }
        Ok(Relayed::Upgraded(res, _)) => res,
        Err(e) => unreachable(e).into_response(),
    }
}
