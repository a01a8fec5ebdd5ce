//! `GET /conversations/{id}/events/ws?after_seq=N`: replays every stored event after N, then
//! streams live ones; each frame is one JSON event. A client that reconnects with the last seq
//! it saw gets exactly the events it missed: no gap, no duplicate.
//!
//! Why that holds: the socket subscribes to the live channel *before* reading the log, and an
//! event is in the log *before* the projection publishes it to the channel. So every event is
//! in the log read or arrives live (or both, and `seq <= sent` drops the copy). Should the live
//! channel lag or skip, the gap is refilled from the log.
//!
//! Beside the events, the text of an answer the model is still writing arrives as it comes, in
//! frames of their own (`{"kind": "answer_delta", "after_seq", "from", "to", "text"}`, no
//! `seq`: they are not events and never in the log; see [`AnswerDelta`] for how a reader folds
//! them). A socket that opens mid-answer gets the text so far first, from the runner writing it.
//!
//! While the conversation's sandbox waits in the start queue (a start, or a wake for a message),
//! its place in line arrives in frames too (`{"kind": "queue_position", "position",
//! "estimate_secs"}`; `position: null` once it leaves the line).
//!
//! The socket is pinged every [`PING_EVERY`]; a client that has not answered for
//! [`PONG_DEADLINE`] is gone (a laptop closed, a network dropped) and its socket is closed
//! rather than held open forever.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use futures::SinkExt;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use halyard_protocol::event::AnswerDelta;
use halyard_protocol::{ConversationId, subjects};

use crate::auth::User;
use crate::auth::access::readable;
use crate::http::error::ApiError;
use crate::state::AppState;

/// How often the socket is pinged.
pub const PING_EVERY: std::time::Duration = std::time::Duration::from_secs(20);
/// How long since the client's last sign of life before its socket is closed.
pub const PONG_DEADLINE: std::time::Duration = std::time::Duration::from_secs(45);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WsQuery {
    /// Replay the events after this one (0: all).
    #[serde(default)]
    pub after_seq: Option<u64>,
    /// A ticket from `POST /api/v1/ws-tickets` (`wst_...`), good once, for 30 s; read by
    /// authentication. An API key is never accepted in the URL.
    #[serde(default)]
    pub access_token: Option<String>,
}

/// WebSocket: replay after `after_seq`, then live events. Each text frame is one Event (JSON),
/// or, while the model writes an answer, a piece of it: `{"kind": "answer_delta", "after_seq",
/// "from", "to", "text"}` (no `seq`; not an event, never in the log; the text so far comes first
/// on a socket that opens mid-answer), or, while the conversation's sandbox waits in the start
/// queue (its start, or a wake for a message), its place: `{"kind": "queue_position",
/// "position", "estimate_secs"}` (`position: null` once it leaves the line). Reconnect with
/// the last seq you saw to get exactly the missing events. Authenticate with
/// `Authorization: Bearer <key>`, the session cookie, or (where a client cannot set a header)
/// a single-use ticket as `access_token`. The server pings every 20 s and closes a socket whose
/// client has not answered for 45 s.
#[utoipa::path(get, path = "/conversations/{id}/events/ws", tag = "conversations", params(("id" = String, Path, format = Uuid), WsQuery),
    responses((status = 101, description = "switching protocols"), crate::http::api_doc::Refusals))]
pub async fn events_ws(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<WsQuery>, axum::extract::rejection::QueryRejection>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    // Its owner's, or one shared with an organization the user is in (read-only: the socket
    // only sends).
    let (id, view) = readable(&state, &user, &id)?;
    let reader = view.owner != user.0;
    let raw = id.to_string();
    // Errors are JSON here too, after the ownership check: another user's id is 404 however
    // it is asked for.
    let ws = ws.map_err(|r| ApiError::bad_request("websocket_required", format!("open this URL as a WebSocket ({})", r.body_text())))?;
    let after = q.after_seq.unwrap_or(0);
    // Clients send next to nothing: a small read buffer saves zeroing a large one per read.
    Ok(ws.read_buffer_size(4096).on_upgrade(move |socket| async move {
        metrics::gauge!("halyard_ws_clients").increment(1.0);
        // A member of its organization reads it while it is shared and they are in it: the
        // socket closes within a second of either ending, as a revoked share link's does.
        let standing = async {
            loop {
                tokio::time::sleep(RECHECK).await;
                if readable(&state, &user, &raw).is_err() {
                    return;
                }
            }
        };
        if reader {
            tokio::select! {
                _ = stream(state.clone(), id, after, socket) => {}
                _ = standing => tracing::debug!(conversation_id = %id, user = %user, "no longer shared with this reader; closing its WebSocket"),
            }
        } else {
            stream(state.clone(), id, after, socket).await;
        }
        metrics::gauge!("halyard_ws_clients").decrement(1.0);
    }))
}

/// How often an organization member's socket checks that they may still read.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends stored events with `seq > *sent`; returns false if the client is gone.
async fn refill(state: &AppState, id: ConversationId, sent: &mut u64, socket: &mut WebSocket) -> bool {
    loop {
        let batch = match crate::read_model::events::read(&state.js, &state.store, id, *sent, 500).await {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(conversation_id = %id, error = %e, "cannot read events");
                return false;
            }
        };
        if batch.is_empty() {
            return true;
        }
        for ev in batch {
            if socket.feed(Message::Text(ev.json)).await.is_err() {
                return false;
            }
            *sent = ev.seq;
        }
        if socket.flush().await.is_err() {
            return false;
        }
    }
}

/// Sends conversation `id`'s events after `after` to `socket`, then live ones, until the client
/// goes (or stops answering pings).
pub(crate) async fn stream(state: AppState, id: ConversationId, after: u64, mut socket: WebSocket) {
    let mut live = state.live.subscribe(id);
    // Pieces from now on, and the text so far.
    let mut deltas = match state.nats.subscribe(subjects::answer_deltas(id)).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(conversation_id = %id, error = %e, "cannot follow answers as they are written");
            None
        }
    };
    let so_far = {
        let nats = state.nats.clone();
        async move { tokio::time::timeout(SO_FAR_PATIENCE, nats.request(subjects::answer_so_far(id), Default::default())).await }
    };
    tokio::pin!(so_far);
    let mut asked_so_far = false;
    // While the agent runs, new pieces wait a moment for the text so far, which usually
    // answers within it (a reader that opens mid-answer then gets that first); longer, and they
    // go on without it. Nothing is being written when it does not run: no wait.
    let running = state.store.conversation(id).ok().flatten().is_some_and(|c| c.execution_status.as_deref() == Some("running"));
    let hold = tokio::time::sleep(if running { HOLD_PIECES } else { std::time::Duration::ZERO });
    tokio::pin!(hold);
    let mut held = running;
    let mut sent = after;
    if !refill(&state, id, &mut sent, &mut socket).await {
        return;
    }
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    let mut heard = tokio::time::Instant::now();
    // Its place in the start queue while its sandbox waits for room.
    let mut queue = state.start_queue.changed.clone();
    queue.mark_changed();
    let mut place = super::queue::PlaceWatch::default();
    loop {
        tokio::select! {
            Ok(()) = queue.changed() => {
                if let Some(frame) = place.frame(&state, id) {
                    if socket.send(Message::Text(frame.into())).await.is_err() {
                        return;
                    }
                }
            }
            _ = ping.tick() => {
                if heard.elapsed() > PONG_DEADLINE {
                    tracing::debug!(conversation_id = %id, "a WebSocket client stopped answering pings; closing");
                    let _ = socket.send(Message::Close(None)).await;
                    return;
                }
                if socket.send(Message::Ping(Default::default())).await.is_err() {
                    return;
                }
            }
            () = &mut hold, if held => held = false,
            Some(msg) = next_delta(&mut deltas), if !held => {
                if !send_delta(&mut socket, &msg.payload).await {
                    return;
                }
            }
            asked = &mut so_far, if !asked_so_far => {
                asked_so_far = true;
                held = false;
                if let Ok(Ok(msg)) = asked {
                    if !send_delta(&mut socket, &msg.payload).await {
                        return;
                    }
                }
            }
            incoming = socket.recv() => match incoming {
                // Clients only ever close, ping or pong; pings are answered by axum.
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => heard = tokio::time::Instant::now(),
            },
            ev = live.recv() => match ev {
                Ok(ev) if ev.seq <= sent => {}
                Ok(ev) if ev.seq == sent + 1 => {
                    // Queue this frame and whatever else is ready, then write them at once.
                    if socket.feed(Message::Text(ev.json)).await.is_err() {
                        return;
                    }
                    sent = ev.seq;
                    let mut gap = false;
                    while let Ok(more) = live.try_recv() {
                        if more.seq <= sent {
                            continue;
                        }
                        if more.seq != sent + 1 {
                            gap = true;
                            break;
                        }
                        if socket.feed(Message::Text(more.json)).await.is_err() {
                            return;
                        }
                        sent = more.seq;
                    }
                    if socket.flush().await.is_err() {
                        return;
                    }
                    if gap && !refill(&state, id, &mut sent, &mut socket).await {
                        return;
                    }
                }
                // A gap (this channel was created after the event, or we lagged): the log
                // has everything up to this event.
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    if !refill(&state, id, &mut sent, &mut socket).await {
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            },
        }
    }
}

/// How long a new socket's first pieces of an answer wait for the text so far to be sent
/// before them (see [`SO_FAR_PATIENCE`]).
const HOLD_PIECES: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a new socket waits for the text so far of an answer being written (no runner
/// answers when none is).
const SO_FAR_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// The next piece of an answer, if the socket follows them.
async fn next_delta(deltas: &mut Option<async_nats::Subscriber>) -> Option<async_nats::Message> {
    match deltas {
        Some(s) => futures::StreamExt::next(s).await,
        None => std::future::pending().await,
    }
}

/// One piece of an answer as its JSON frame; false if the client is gone. A piece that cannot
/// be read is dropped (the finished answer follows in the log all the same).
async fn send_delta(socket: &mut WebSocket, payload: &[u8]) -> bool {
    #[derive(serde::Serialize)]
    struct Frame<'a> {
        kind: &'static str,
        #[serde(flatten)]
        delta: &'a AnswerDelta,
    }
    let Ok(env) = halyard_protocol::decode::<AnswerDelta>(payload) else { return true };
    match serde_json::to_string(&Frame { kind: "answer_delta", delta: &env.payload }) {
        Ok(json) => socket.send(Message::Text(json.into())).await.is_ok(),
        Err(_) => true,
    }
}
