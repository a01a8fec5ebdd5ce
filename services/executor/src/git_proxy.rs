//! The inner half of the git proxy: a smart-HTTP listener on the sandbox's loopback that git
//! reaches for the conversation's repository, and the `GET /git/proxy` WebSocket its requests
//! travel over to whoever holds it (the agent runner while a run lasts, the conversations
//! service for the clone at start). The holder adds the user's token upstream
//! (`halyard_platform::git_proxy`); nothing of it passes through here.
//!
//! Git is pointed at the listener by `url.<proxy>.insteadOf` rules in a config file the shell's
//! git includes (`GIT_CONFIG_*` variables, see [`GitProxy::shell_env`]); the holder names the
//! remotes when it connects, and the file is rewritten then. The remote URL in `.git/config`
//! stays the repository's own. The listener's paths start with a random word, so another
//! process on a shared loopback (the host network mode of process sandboxes) cannot use it
//! without reading the sandbox's files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ws::{Message, WebSocket};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use halyard_protocol::executor::GitProxyFrame;
use tokio::sync::{mpsc, oneshot};

/// How long git waits for the head of an answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

/// The status and headers of an answer.
type Head = (u16, Vec<(String, String)>);

/// What git is waiting for on one request.
struct Waiter {
    head: Option<oneshot::Sender<Head>>,
    body: mpsc::Sender<Result<Bytes, std::io::Error>>,
}

/// One holder's socket: where requests go, and what they wait for.
struct Holder {
    generation: u64,
    out: mpsc::Sender<Message>,
    waiting: Arc<Mutex<HashMap<u64, Waiter>>>,
}

/// The executor's side of the proxy.
pub struct GitProxy {
    /// `http://127.0.0.1:<port>/<random word>`
    base: String,
    /// The git config file of `insteadOf` rules.
    include: PathBuf,
    /// Holders in the order they connected; the newest still open answers.
    holders: Mutex<Vec<Holder>>,
    generation: AtomicU64,
    next_id: AtomicU64,
}

impl std::fmt::Debug for GitProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitProxy").field("include", &self.include).finish_non_exhaustive()
    }
}

impl GitProxy {
    /// Listens on the loopback and keeps its rules file in `dir` (the sandbox's temporary
    /// directory, private to its user).
    pub fn start(dir: &Path) -> std::io::Result<Arc<Self>> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let word = uuid::Uuid::new_v4().simple().to_string();
        let include = dir.join(format!("halyard-git-{}.config", std::process::id()));
        crate::write_private(&include, "")?;
        let proxy = Arc::new(Self {
            base: format!("http://127.0.0.1:{port}/{word}"),
            include,
            holders: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
        });
        let app = axum::Router::new().fallback(forward).with_state(proxy.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(proxy)
    }

    /// The variables that make the shell's git read the rules file.
    pub fn shell_env(&self) -> Vec<(String, String)> {
        vec![
            ("GIT_CONFIG_COUNT".into(), "1".into()),
            ("GIT_CONFIG_KEY_0".into(), "include.path".into()),
            ("GIT_CONFIG_VALUE_0".into(), self.include.display().to_string()),
            // Never wait on a terminal nobody is at.
            ("GIT_TERMINAL_PROMPT".into(), "0".into()),
        ]
    }

    /// Points git at the proxy for each of `urls` (and the same URL with or without `.git`).
    fn set_remotes(&self, urls: &[String]) -> std::io::Result<()> {
        let mut text = String::from("# Written by Halyard: the conversation's repository goes through its git proxy.\n");
        for url in urls {
            let Some((_, rest)) = url.split_once("://") else { continue };
            let bare = rest.trim_end_matches('/');
            let bare = bare.strip_suffix(".git").unwrap_or(bare);
            let scheme = &url[..url.len() - rest.len()];
            // `insteadOf` matches a prefix: the `.git` form and the bare form both land on the
            // proxy with the path git asked for.
            text.push_str(&format!("[url \"{}/{bare}\"]\n\tinsteadOf = {scheme}{bare}\n", self.base));
        }
        crate::write_private(&self.include, &text)
    }

    /// Serves one holder's WebSocket until it closes.
    pub async fn serve_holder(self: Arc<Self>, socket: WebSocket) {
        let (mut sink, mut stream) = socket.split();
        let (out, mut outgoing) = mpsc::channel::<Message>(64);
        let writer = tokio::spawn(async move {
            while let Some(message) = outgoing.recv().await {
                if sink.send(message).await.is_err() {
                    break;
                }
            }
        });
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let waiting: Arc<Mutex<HashMap<u64, Waiter>>> = Arc::default();
        if let Ok(mut holders) = self.holders.lock() {
            holders.push(Holder { generation, out: out.clone(), waiting: waiting.clone() });
        }
        while let Some(Ok(message)) = stream.next().await {
            match message {
                Message::Text(text) => match serde_json::from_str::<GitProxyFrame>(&text) {
                    Ok(GitProxyFrame::Remotes { urls }) => {
                        if let Err(e) = self.set_remotes(&urls) {
                            tracing::warn!(error = %e, "cannot write git's proxy rules");
                            continue;
                        }
                        // The echo says git uses the proxy from now on.
                        let _ = out.send(Message::Text(text)).await;
                    }
                    Ok(GitProxyFrame::Response { id, status, headers }) => {
                        let head = waiting.lock().ok().and_then(|mut w| w.get_mut(&id).and_then(|w| w.head.take()));
                        if let Some(head) = head {
                            let _ = head.send((status, headers));
                        }
                    }
                    Ok(GitProxyFrame::End { id }) => {
                        if let Ok(mut w) = waiting.lock() {
                            w.remove(&id);
                        }
                    }
                    Ok(GitProxyFrame::Error { id, message }) => {
                        let waiter = waiting.lock().ok().and_then(|mut w| w.remove(&id));
                        if let Some(waiter) = waiter {
                            let _ = waiter.body.send(Err(std::io::Error::other(message))).await;
                        }
                    }
                    _ => {}
                },
                Message::Binary(data) => {
                    let Some((id, bytes)) = GitProxyFrame::split_chunk(&data) else { continue };
                    let body = waiting.lock().ok().and_then(|w| w.get(&id).map(|w| w.body.clone()));
                    if let Some(body) = body {
                        let _ = body.send(Ok(Bytes::copy_from_slice(bytes))).await;
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        writer.abort();
        if let Ok(mut holders) = self.holders.lock() {
            holders.retain(|h| h.generation != generation);
        }
        // Dropping the waiters tells git the answers will not come.
        if let Ok(mut w) = waiting.lock() {
            w.clear();
        }
    }
}

/// Words git shows (`text/plain` answers are printed as `remote: ...`).
fn refuse(status: StatusCode, why: &str) -> Response {
    (status, [("content-type", "text/plain; charset=utf-8")], format!("{why}\n")).into_response()
}

/// Passes one of git's requests to the newest holder and streams its answer back.
async fn forward(State(proxy): State<Arc<GitProxy>>, request: Request) -> Response {
    let prefix = proxy.base.rsplit_once('/').map(|(_, word)| format!("/{word}/")).unwrap_or_default();
    let Some(target) = request.uri().path().strip_prefix(prefix.as_str()).map(str::to_owned) else {
        return refuse(StatusCode::NOT_FOUND, "not Halyard's git proxy path");
    };
    let holder = proxy.holders.lock().ok().and_then(|h| h.last().map(|h| (h.out.clone(), h.waiting.clone())));
    let Some((out, waiting)) = holder else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "Halyard's git proxy reaches this repository only while the agent works (or while the workspace is prepared)",
        );
    };
    let id = proxy.next_id.fetch_add(1, Ordering::SeqCst) + 1;
    let (head_tx, head_rx) = oneshot::channel();
    let (body_tx, body_rx) = mpsc::channel(16);
    if let Ok(mut w) = waiting.lock() {
        w.insert(id, Waiter { head: Some(head_tx), body: body_tx });
    }
    let headers = request
        .headers()
        .iter()
        .filter(|(name, _)| *name != "authorization" && *name != "cookie")
        .filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned())))
        .collect();
    let head = GitProxyFrame::Request {
        id,
        method: request.method().as_str().to_owned(),
        target,
        query: request.uri().query().map(str::to_owned),
        headers,
    };
    let text = serde_json::to_string(&head).unwrap_or_default();
    if out.send(Message::Text(text.into())).await.is_err() {
        return refuse(StatusCode::BAD_GATEWAY, "the agent runner went away");
    }
    // The body goes up while the answer is awaited: git sends the whole request first.
    let mut body = request.into_body().into_data_stream();
    tokio::spawn(async move {
        while let Some(Ok(chunk)) = body.next().await {
            if out.send(Message::Binary(GitProxyFrame::body_chunk(id, &chunk).into())).await.is_err() {
                return;
            }
        }
        let _ = out.send(Message::Text(serde_json::to_string(&GitProxyFrame::End { id }).unwrap_or_default().into())).await;
    });
    let (status, headers) = match tokio::time::timeout(ANSWER_TIMEOUT, head_rx).await {
        Ok(Ok(head)) => head,
        Ok(Err(_)) => return refuse(StatusCode::BAD_GATEWAY, "the agent runner went away before answering"),
        Err(_) => {
            if let Ok(mut w) = waiting.lock() {
                w.remove(&id);
            }
            return refuse(StatusCode::GATEWAY_TIMEOUT, "the git server did not answer in time");
        }
    };
    let mut response = Response::builder().status(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY));
    for (name, value) in headers {
        response = response.header(name, value);
    }
    let stream = futures::stream::poll_fn({
        let mut rx = body_rx;
        move |cx| rx.poll_recv(cx)
    });
    response.body(Body::from_stream(stream)).unwrap_or_else(|_| refuse(StatusCode::BAD_GATEWAY, "the git server's answer was malformed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rules_send_both_spellings_of_the_remote_to_the_proxy() {
        let dir = tempfile::tempdir().unwrap();
        let proxy = GitProxy::start(dir.path()).unwrap();
        proxy.set_remotes(&["https://github.com/acme/app.git".into()]).unwrap();
        let text = std::fs::read_to_string(&proxy.include).unwrap();
        assert!(
            text.contains(&format!("[url \"{}/github.com/acme/app\"]\n\tinsteadOf = https://github.com/acme/app\n", proxy.base)),
            "{text}"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&proxy.include).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
