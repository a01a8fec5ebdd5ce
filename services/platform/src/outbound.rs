//! The one HTTP client for what Halyard calls on a user's behalf: users' LLM profiles, their
//! MCP servers over HTTP, their webhooks, their forges' APIs. A user names the destination, so a
//! user (or an agent that can change what its user saved) could aim Halyard at the inside of the
//! deployment: its NATS monitoring, a cloud metadata service, another service on loopback.
//!
//! So every name is resolved once, by this client's resolver, and every address it resolves to is
//! checked against the allowed classes ([`crate::net`]) before anything connects; the connection
//! is made to the address that was checked, never to a second lookup (which a DNS-rebinding name
//! could answer differently). A name with any forbidden address is refused whole. Redirects are
//! not followed (each hop would need the same check, and none of these APIs needs one). Literal
//! addresses in URLs never reach a resolver: callers check URLs with [`crate::net::check_url`]
//! first, as they do when a destination is saved.
//!
//! What comes back in an error is the status line only, never the body: an internal service's
//! answer must not be echoed into a conversation.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::net::check_ip;

/// Resolves names and refuses those with an address outside the allowed classes.
#[derive(Debug, Clone)]
struct CheckedResolver {
    allow: Arc<Vec<String>>,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = self.allow.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.is_empty() {
                return Err(format!("{host} resolves to no address").into());
            }
            for a in &addrs {
                check_ip(a.ip(), &allow).map_err(|e| format!("{host}: {e}"))?;
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// A client builder for requests to destinations users chose, allowed the address classes in
/// `allow` (`loopback`, `private`, `link-local`) besides public ones.
pub fn builder(allow: &[String]) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(CheckedResolver { allow: Arc::new(allow.to_vec()) }))
        .redirect(reqwest::redirect::Policy::none())
}

/// An error with its causes (reqwest's own words stop at "error sending request", which leaves
/// out why: a refused address, a refused connection).
pub fn why(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// What a failed answer may say: its status line.
pub fn status_line(status: reqwest::StatusCode) -> String {
    format!("HTTP {} {}", status.as_u16(), status.canonical_reason().unwrap_or_default()).trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_name_of_a_forbidden_address_is_refused_before_connecting() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // A server on loopback, reached by a name that resolves there.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut seen = Vec::new();
                let mut buf = [0u8; 1024];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s.write_all(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/\r\ncontent-length: 0\r\n\r\n").await;
            }
        });
        let refused = builder(&[]).build().unwrap().get(format!("http://localhost:{port}/")).send().await.unwrap_err();
        let chain = why(&refused);
        assert!(chain.contains("loopback"), "{chain}");
        // Allowed, it connects; the redirect to loopback is not followed.
        let allowed = builder(&["loopback".into()]).build().unwrap().get(format!("http://localhost:{port}/")).send().await.unwrap();
        assert_eq!(allowed.status(), 302);
        assert_eq!(status_line(allowed.status()), "HTTP 302 Found");
    }
}
