//! An HTTP listener on the sandbox's loopback whose requests travel, over a WebSocket, to
//! whoever holds it outside the sandbox, and whose answers come back the same way (frames:
//! [`GitProxyFrame`]). Two use it: the git proxy ([`crate::git_proxy`]: git's requests for the
//! conversation's repository, answered with the user's token added) and the LLM relay (a
//! third-party agent's LLM calls, answered by the agent runner with the real key:
//! [`crate::acp`]). Whatever the holder adds upstream never passes through here.
//!
//! The listener's paths start with a random word, so another process on a shared loopback (the
//! host network mode of process sandboxes) cannot use it without reading the sandbox's files.

use std::collections::HashMap;
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

/// How long a caller waits for the head of an answer (an LLM may think for minutes).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

/// The status and headers of an answer.
type Head = (u16, Vec<(String, String)>);

/// What a caller is waiting for on one request.
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

/// The executor's side of one relay.
pub struct Relay {
    /// `http://127.0.0.1:<port>/<random word>`
    base: String,
    /// What a request hears while nobody holds the relay.
    unheld: &'static str,
    /// Request headers not passed on.
    withheld: &'static [&'static str],
    /// Holders in the order they connected; the newest still open answers.
    holders: Mutex<Vec<Holder>>,
    generation: AtomicU64,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").finish_non_exhaustive()
    }
}

impl Relay {
    /// Listens on the loopback. `unheld` is what a request hears while nobody holds the relay;
    /// `withheld` names the request headers that are not passed on.
    pub fn start(unheld: &'static str, withheld: &'static [&'static str]) -> std::io::Result<Arc<Self>> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let word = uuid::Uuid::new_v4().simple().to_string();
        let relay = Arc::new(Self {
            base: format!("http://127.0.0.1:{port}/{word}"),
            unheld,
            withheld,
            holders: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
        });
        let app = axum::Router::new().fallback(forward).with_state(relay.clone());
        // (Each piece of a streamed answer goes out as it comes: no Nagle.)
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(relay)
    }

    /// `http://127.0.0.1:<port>/<random word>`: where requests for the holder go.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Serves one holder's WebSocket until it closes.
    /// `on_hello` takes the holder's [`GitProxyFrame::Remotes`] (the git proxy's rules), which
    /// is echoed once taken.
    pub async fn serve_holder(self: Arc<Self>, socket: WebSocket, on_hello: impl Fn(&[String]) -> std::io::Result<()>) {
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
                        if let Err(e) = on_hello(&urls) {
                            tracing::warn!(error = %e, "the relay's holder could not be set up");
                            continue;
                        }
                        // The echo says the relay is used from now on.
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

/// Words the caller shows (git prints `text/plain` answers as `remote: ...`).
fn refuse(status: StatusCode, why: &str) -> Response {
    (status, [("content-type", "text/plain; charset=utf-8")], format!("{why}\n")).into_response()
}

/// Passes one request to the newest holder and streams its answer back.
async fn forward(State(proxy): State<Arc<Relay>>, request: Request) -> Response {
    let prefix = proxy.base.rsplit_once('/').map(|(_, word)| format!("/{word}/")).unwrap_or_default();
    let Some(target) = request.uri().path().strip_prefix(prefix.as_str()).map(str::to_owned) else {
        return refuse(StatusCode::NOT_FOUND, "not a path of Halyard's relay");
    };
    let holder = proxy.holders.lock().ok().and_then(|h| h.last().map(|h| (h.out.clone(), h.waiting.clone())));
    let Some((out, waiting)) = holder else {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, proxy.unheld);
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
        .filter(|(name, _)| !proxy.withheld.contains(&name.as_str()))
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
    // The body goes up while the answer is awaited: the caller sends the whole request first.
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
            return refuse(StatusCode::GATEWAY_TIMEOUT, "the server did not answer in time");
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
    response.body(Body::from_stream(stream)).unwrap_or_else(|_| refuse(StatusCode::BAD_GATEWAY, "the server's answer was malformed"))
}
