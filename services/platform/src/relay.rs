//! The outer half of an executor's relay (the executor's `relay` module): a program in the
//! sandbox makes an HTTP request to a listener on the sandbox's loopback, the executor passes it
//! over a WebSocket (frames: [`GitProxyFrame`]), and the holder of that socket answers it from
//! outside, with whatever credential the request needs added there. Two relays hold one: the
//! git proxy ([`crate::git_proxy`], a user's git token) and the LLM relay of third-party agents
//! (the agent runner, a profile's LLM key).
//!
//! [`hold`] carries requests until the socket closes; a [`Handler`] answers each one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{SinkExt, StreamExt};
use halyard_protocol::executor::GitProxyFrame;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::executor_client::ExecutorClient;

/// How long the executor may take to say the relay is in use.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

pub type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One request as the program in the sandbox made it.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path after the relay's random word (for git: `<host>/<path>`).
    pub target: String,
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    /// The body, as it comes (empty at once for a request without one).
    pub body: mpsc::Receiver<bytes::Bytes>,
}

/// An answer: its status and headers, and its body as it comes (an error mid-body ends it short).
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: BoxStream<'static, Result<bytes::Bytes, String>>,
}

/// Why a request gets no upstream answer: a status and words for the caller (`text/plain`, which
/// git shows as `remote: ...`), or a whole answer of the handler's own making.
pub enum Refusal {
    Words(u16, String),
    Answer(Answer),
}

/// What answers the requests of one relay.
pub type Handler = Arc<dyn Fn(Request) -> BoxFuture<'static, Result<Answer, Refusal>> + Send + Sync>;

/// Serving one relay; it stops when this is dropped.
#[derive(Debug)]
pub struct Serving(tokio::task::JoinHandle<()>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Opens the executor's relay socket at `path`, hands it `urls` (the git proxy's remotes;
/// nothing for others) and returns once the executor says the relay is in use; `handler`
/// answers its requests until the handle is dropped.
pub async fn serve(exec: &ExecutorClient, path: &str, urls: Vec<String>, handler: Handler) -> Result<Serving, String> {
    let mut socket = exec.socket(path).await.map_err(|e| format!("the sandbox's relay cannot be reached: {e}"))?;
    let hello = GitProxyFrame::Remotes { urls };
    socket.send(Message::Text(serde_json::to_string(&hello).map_err(|e| e.to_string())?.into())).await.map_err(|e| e.to_string())?;
    let ready = tokio::time::timeout(READY_TIMEOUT, async {
        while let Some(frame) = socket.next().await {
            match frame {
                Ok(Message::Text(text)) if serde_json::from_str::<GitProxyFrame>(&text).is_ok_and(|f| f == hello) => return Ok(()),
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        Err("the sandbox closed its relay".to_owned())
    });
    ready.await.map_err(|_| "the sandbox did not take the relay in time".to_owned())??;
    Ok(Serving(tokio::spawn(async move {
        if let Err(e) = hold(socket, handler).await {
            tracing::debug!(error = %e, "relay socket closed");
        }
    })))
}

/// Carries requests until the socket closes: heads and bodies in, answers out.
async fn hold(socket: Socket, handler: Handler) -> Result<(), String> {
    let (mut sink, mut stream) = socket.split();
    let (out, mut outgoing) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(message) = outgoing.recv().await {
            if sink.send(message).await.is_err() {
                break;
            }
        }
    });
    // The request bodies still coming in, by request id.
    let mut bodies: HashMap<u64, mpsc::Sender<bytes::Bytes>> = HashMap::new();
    while let Some(frame) = stream.next().await {
        match frame.map_err(|e| e.to_string())? {
            Message::Text(text) => match serde_json::from_str::<GitProxyFrame>(&text) {
                Ok(GitProxyFrame::Request { id, method, target, query, headers }) => {
                    let (tx, body) = mpsc::channel(16);
                    bodies.insert(id, tx);
                    let answering = handler(Request { method, target, query, headers, body });
                    tokio::spawn(answer(id, answering, out.clone()));
                }
                Ok(GitProxyFrame::End { id }) => {
                    bodies.remove(&id);
                }
                _ => {}
            },
            Message::Binary(data) => {
                if let Some((id, bytes)) = GitProxyFrame::split_chunk(&data) {
                    if let Some(body) = bodies.get(&id) {
                        if body.send(bytes::Bytes::copy_from_slice(bytes)).await.is_err() {
                            bodies.remove(&id);
                        }
                    }
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    writer.abort();
    Ok(())
}

/// Sends the answer of request `id` back as it comes.
async fn answer(id: u64, answering: BoxFuture<'static, Result<Answer, Refusal>>, out: mpsc::Sender<Message>) {
    let answer = match answering.await {
        Ok(a) | Err(Refusal::Answer(a)) => a,
        Err(Refusal::Words(status, why)) => {
            for message in refusal(id, status, &why) {
                let _ = out.send(message).await;
            }
            return;
        }
    };
    let head = GitProxyFrame::Response { id, status: answer.status, headers: answer.headers };
    if out.send(frame_text(&head)).await.is_err() {
        return;
    }
    let mut body = answer.body;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(bytes) => {
                if out.send(Message::Binary(GitProxyFrame::body_chunk(id, &bytes).into())).await.is_err() {
                    return;
                }
            }
            Err(why) => {
                // Mid-body: the caller sees a short answer and says so; the head is already sent.
                let _ = out.send(frame_text(&GitProxyFrame::Error { id, message: why })).await;
                return;
            }
        }
    }
    let _ = out.send(frame_text(&GitProxyFrame::End { id })).await;
}

fn frame_text(frame: &GitProxyFrame) -> Message {
    Message::Text(serde_json::to_string(frame).unwrap_or_default().into())
}

/// A whole answer in words: `text/plain`, which git prints as `remote: ...`.
fn refusal(id: u64, status: u16, why: &str) -> [Message; 3] {
    let head = GitProxyFrame::Response { id, status, headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())] };
    [
        frame_text(&head),
        Message::Binary(GitProxyFrame::body_chunk(id, format!("{why}\n").as_bytes()).into()),
        frame_text(&GitProxyFrame::End { id }),
    ]
}

/// A receiver as a stream (tokio-stream's wrapper, without the crate).
pub fn stream_of(mut rx: mpsc::Receiver<bytes::Bytes>) -> impl futures::Stream<Item = bytes::Bytes> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
