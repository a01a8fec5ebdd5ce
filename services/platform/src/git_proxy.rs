//! The outer half of the git proxy: git in the sandbox talks smart HTTP to the executor's
//! loopback listener, the executor passes every request over its `GET /git/proxy` WebSocket
//! ([`crate::relay`]), and whoever holds that socket (the agent runner while a run
//! lasts, the conversations service for the clone at start) makes the request upstream with the
//! user's token added. The token never enters the sandbox: no helper hands it out, no header or
//! file carries it there.
//!
//! Only the conversation's own repository goes through: `info/refs` and the two smart-HTTP
//! services (`git-upload-pack` for clone and fetch, `git-receive-pack` for push) under its path.
//! Anything else is refused with words git shows as `remote: ...`. Requests leave through the
//! outbound client ([`crate::outbound`]), so a provider host that resolves to the deployment's
//! own addresses is refused unless the operator allows it (`HALYARD_GIT_API_ALLOW`).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use halyard_protocol::user::UserGitProviders;
use halyard_protocol::{UserId, subjects};
use tokio::sync::mpsc;

use crate::executor_client::ExecutorClient;
use crate::net::url_host;
use crate::relay::{self, Answer, Refusal};
use crate::vault::{self, Vault};

/// Request headers git's requests keep upstream (never `Authorization`: that one is ours).
const REQUEST_HEADERS: [&str; 5] = ["content-type", "accept", "git-protocol", "content-encoding", "user-agent"];
/// Answer headers passed back to git.
const RESPONSE_HEADERS: [&str; 5] = ["content-type", "cache-control", "expires", "pragma", "content-encoding"];

/// A repository git reaches through the proxy, and how the upstream is told who is asking.
#[derive(Clone)]
pub struct Remote {
    /// The URL as the conversation names it (`https://host/owner/name.git`).
    pub url: String,
    /// `https` or `http`.
    scheme: String,
    /// `host` or `host:port`, lower-case.
    host: String,
    /// The repository's path without a leading `/` or a trailing `.git`.
    path: String,
    /// The git provider whose token is used, for words and logs.
    pub provider: String,
    /// The `Authorization` header sent upstream.
    authorization: String,
}

impl Remote {
    /// The `Authorization` header its provider's token makes (for a fetch the gateway makes
    /// itself: a plugin marketplace's).
    pub fn authorization(&self) -> &str {
        &self.authorization
    }
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("url", &self.url).field("provider", &self.provider).finish_non_exhaustive()
    }
}

impl Remote {
    /// A remote for `url` answered as `username` with `token` (`None`: no http(s) URL of a
    /// repository).
    pub fn new(url: &str, provider: &str, username: &str, token: &str) -> Option<Self> {
        let parsed = reqwest::Url::parse(url).ok()?;
        let host = url_host(url)?;
        let path = parsed.path().trim_matches('/');
        let path = path.strip_suffix(".git").unwrap_or(path).to_owned();
        if path.is_empty() {
            return None;
        }
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{token}"));
        Some(Self {
            url: url.to_owned(),
            scheme: parsed.scheme().to_owned(),
            host,
            path,
            provider: provider.to_owned(),
            authorization: format!("Basic {basic}"),
        })
    }
}

/// The remote for `url` when one of `owner`'s git providers serves its host, else one of the
/// organization `org`'s (a team's bot account) for a conversation in it; `None` when none does
/// (git then reaches it directly, as any public repository), `Err` when the providers or the
/// token cannot be read.
pub async fn remote_for(
    user_kv: &async_nats::jetstream::kv::Store,
    vault: &Vault,
    owner: &UserId,
    org: Option<&str>,
    url: &str,
) -> Result<Option<Remote>, String> {
    let Some(host) = url_host(url) else { return Ok(None) };
    let own = Providers {
        key: subjects::user_git_key(owner),
        slot_owner: owner.0.clone(),
        whose: "your".into(),
        api: "/api/v1/git-providers".into(),
    };
    if let Some(r) = own.remote(user_kv, vault, &host, url).await? {
        return Ok(Some(r));
    }
    let Some(org) = org else { return Ok(None) };
    let theirs = Providers {
        key: subjects::org_git_key(org),
        slot_owner: halyard_protocol::user::org_slot_owner(org),
        whose: format!("organization {org}'s"),
        api: format!("/api/v1/orgs/{org}/git-providers"),
    };
    theirs.remote(user_kv, vault, &host, url).await
}

/// One set of git providers (a user's or an organization's), and how to speak of it.
struct Providers {
    key: String,
    slot_owner: String,
    whose: String,
    api: String,
}

impl Providers {
    async fn remote(
        &self,
        user_kv: &async_nats::jetstream::kv::Store,
        vault: &Vault,
        host: &str,
        url: &str,
    ) -> Result<Option<Remote>, String> {
        let whose = &self.whose;
        let stored: UserGitProviders = match user_kv.get(&self.key).await {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| format!("{whose} git providers cannot be read: {e}"))?,
            Ok(None) => return Ok(None),
            Err(e) => return Err(format!("{whose} git providers cannot be read: {e}")),
        };
        let Some((name, provider)) = stored.providers.iter().find(|(_, p)| p.host.eq_ignore_ascii_case(host)) else { return Ok(None) };
        let token = vault.open(&vault::git_token_slot(&self.slot_owner, name), &provider.token_sealed).map_err(|_| {
            format!("the token of {whose} git provider `{name}` cannot be read; store it again with PUT {}/{name}", self.api)
        })?;
        Ok(Remote::new(url, name, &provider.username, &token))
    }
}

/// The upstream URL of a request git made for `target` (`<host>/<path>`), or why it is refused.
fn route<'a>(remotes: &'a [Remote], method: &str, target: &str, query: Option<&str>) -> Result<(&'a Remote, String), String> {
    let (host, rest) = target.split_once('/').unwrap_or((target, ""));
    let host = host.to_ascii_lowercase();
    let remote = remotes
        .iter()
        .find(|r| r.host == host && rest.strip_prefix(r.path.as_str()).is_some_and(|s| s.starts_with('/') || s.starts_with(".git/")))
        .ok_or_else(|| {
            let names: Vec<&str> = remotes.iter().map(|r| r.url.as_str()).collect();
            format!("Halyard's git proxy serves this conversation's repository only ({}), not {host}/{rest}", names.join(", "))
        })?;
    let tail = &rest[remote.path.len()..];
    let service = tail.strip_prefix(".git").unwrap_or(tail);
    let wanted = |s: &str| query.unwrap_or_default().split('&').any(|p| p == format!("service={s}"));
    let allowed = match (method, service) {
        ("GET", "/info/refs") => wanted("git-upload-pack") || wanted("git-receive-pack"),
        ("POST", "/git-upload-pack" | "/git-receive-pack") => true,
        _ => false,
    };
    if !allowed {
        return Err(format!("Halyard's git proxy speaks git's smart HTTP only; {method} {service} is not part of it"));
    }
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    Ok((remote, format!("{}://{}/{rest}{query}", remote.scheme, remote.host)))
}

pub use crate::relay::Serving;

/// Opens the executor's proxy socket, hands it `remotes` and returns once git in the sandbox
/// uses the proxy for them; serving goes on until the handle is dropped. Requests leave through
/// an outbound client allowed the address classes in `allow`.
pub async fn serve(exec: &ExecutorClient, remotes: Vec<Remote>, allow: &[String]) -> Result<Serving, String> {
    let client = crate::outbound::builder(allow)
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("the git proxy's HTTP client: {e}"))?;
    let urls = remotes.iter().map(|r| r.url.clone()).collect();
    let remotes = Arc::new(remotes);
    let handler: relay::Handler = Arc::new(move |request: relay::Request| {
        let (remotes, client) = (remotes.clone(), client.clone());
        Box::pin(async move {
            let (remote, upstream) = route(&remotes, &request.method, &request.target, request.query.as_deref()).map_err(|why| {
                tracing::info!(target = %request.target, %why, "git proxy request refused");
                Refusal::Words(403, why)
            })?;
            let call = Call { method: request.method, upstream, headers: request.headers, remote: remote.clone() };
            call.answer(&client, request.body).await.map_err(|why| {
                tracing::info!(provider = %call.remote.provider, upstream = %call.upstream, %why, "git proxy request failed");
                Refusal::Words(502, why)
            })
        }) as futures::future::BoxFuture<'static, Result<Answer, Refusal>>
    });
    relay::serve(exec, "/git/proxy", urls, handler).await
}

/// One request made upstream for git.
struct Call {
    method: String,
    upstream: String,
    headers: Vec<(String, String)>,
    remote: Remote,
}

impl Call {
    /// The head for git and the upstream's body, or why there is none.
    async fn answer(&self, client: &reqwest::Client, body: mpsc::Receiver<bytes::Bytes>) -> Result<Answer, String> {
        let method = reqwest::Method::from_bytes(self.method.as_bytes()).map_err(|_| format!("no HTTP method: {}", self.method))?;
        let mut request = client.request(method, &self.upstream).header("authorization", &self.remote.authorization);
        for (name, value) in &self.headers {
            if REQUEST_HEADERS.iter().any(|h| name.eq_ignore_ascii_case(h)) {
                request = request.header(name.as_str(), value.as_str());
            }
        }
        if self.method == "POST" {
            let chunks = relay::stream_of(body).map(Ok::<_, std::io::Error>);
            request = request.body(reqwest::Body::wrap_stream(chunks));
        }
        let response = request.send().await.map_err(|e| format!("{} cannot be reached: {}", self.remote.host, crate::outbound::why(&e)))?;
        let status = response.status();
        if matches!(status.as_u16(), 401 | 403) {
            let provider = &self.remote.provider;
            return Err(format!(
                "{} refused the token of git provider `{provider}` ({}): the user can store a new one with PUT /api/v1/git-providers/{provider}",
                self.remote.host,
                crate::outbound::status_line(status)
            ));
        }
        let headers = RESPONSE_HEADERS
            .iter()
            .filter_map(|name| Some(((*name).to_owned(), response.headers().get(*name)?.to_str().ok()?.to_owned())))
            .collect();
        let body = response.bytes_stream().map(|chunk| chunk.map_err(|e| crate::outbound::why(&e))).boxed();
        Ok(Answer { status: status.as_u16(), headers, body })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remotes() -> Vec<Remote> {
        vec![Remote::new("https://GitHub.com/acme/app.git", "work", "x-access-token", "t0ken").unwrap()]
    }

    #[test]
    fn only_the_repositorys_smart_http_goes_upstream() {
        let r = remotes();
        let ok = |m: &str, t: &str, q: Option<&str>| route(&r, m, t, q).map(|(_, u)| u);
        assert_eq!(
            ok("GET", "github.com/acme/app.git/info/refs", Some("service=git-upload-pack")).as_deref(),
            Ok("https://github.com/acme/app.git/info/refs?service=git-upload-pack")
        );
        assert_eq!(ok("POST", "github.com/acme/app/git-receive-pack", None).as_deref(), Ok("https://github.com/acme/app/git-receive-pack"));
        // Another repository of the same owner, a prefix of the name, a dumb-HTTP file, a
        // traversal, another host: refused.
        for (m, t, q) in [
            ("GET", "github.com/acme/other.git/info/refs", Some("service=git-upload-pack")),
            ("GET", "github.com/acme/app-fork/info/refs", Some("service=git-upload-pack")),
            ("GET", "github.com/acme/app.git/HEAD", None),
            ("GET", "github.com/acme/app.git/info/refs", None),
            ("POST", "github.com/acme/app.git/../other.git/git-upload-pack", None),
            ("POST", "evil.example/acme/app.git/git-upload-pack", None),
        ] {
            assert!(ok(m, t, q).is_err(), "{m} {t}");
        }
    }

    #[test]
    fn the_token_is_never_shown() {
        let shown = format!("{:?}", remotes());
        assert!(!shown.contains("t0ken") && !shown.contains("Basic"), "{shown}");
        assert!(Remote::new("https://github.com/", "p", "u", "t").is_none());
        assert!(Remote::new("/srv/repo.git", "p", "u", "t").is_none());
    }
}
