//! `GET /conversations/{id}/terminal/ws`: the owner's own terminal in the conversation's
//! sandbox, a WebSocket passed through to the sandbox executor's `/terminal/ws` (a login shell
//! in a pseudo-terminal, apart from the agent's shell). Bytes go through as they are, binary
//! frames both ways, and the client's resize messages (`{"type": "resize", "cols", "rows"}`,
//! text) with them. Opening it is recorded in the conversation's log (`terminal_opened`: who,
//! when); what is typed is not. Typing in a shell acts: read-only credentials cannot open it.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use halyard_platform::executor_client::{ExecutorSocket, SocketMessage};
use halyard_protocol::command::AgentCommand;

use crate::audit::{self, Client};
use crate::auth::Acting;
use crate::auth::access::owned;
use crate::domain::commands::agent_command;
use crate::http::api_doc::{Conflict, Refusals};
use crate::http::error::ApiError;
use crate::state::AppState;

/// The owner's own terminal in the sandbox, as a WebSocket: binary frames both ways, and
/// `{"type": "resize", "cols", "rows"}` text frames from the client. Opening it is recorded as
/// a `terminal_opened` event; what is typed is not. The sandbox must be running (409); a
/// read-only key, or a session or ticket opened with one, is refused (403 `read_only_key`).
#[utoipa::path(get, path = "/conversations/{id}/terminal/ws", tag = "workspace", params(("id" = String, Path, format = Uuid)),
    responses((status = 101, description = "switching protocols"), Refusals, Conflict))]
pub async fn terminal_ws(
    State(state): State<AppState>,
    Acting(principal): Acting,
    client: Client,
    Path(id): Path<String>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let user = principal.user;
    let (conversation_id, _) = owned(&state, &user, &id)?;
    let ws = ws.map_err(|r| ApiError::bad_request("websocket_required", format!("open this URL as a WebSocket ({})", r.body_text())))?;
    let executor = crate::api::workspace::files::executor(&state, &user, &id).await?;
    let upstream = executor.socket("/terminal/ws").await.map_err(|e| {
        tracing::warn!(%conversation_id, error = %e, "the sandbox's terminal cannot be reached");
        ApiError::unavailable("the sandbox's terminal did not answer; try again shortly")
    })?;
    agent_command(&state, conversation_id, AgentCommand::RecordTerminalOpened { conversation_id, by: user.clone() }).await?;
    audit::Action::new(&user, "terminal.open", &conversation_id.to_string()).send(&state, client).await;
    Ok(ws.on_upgrade(move |socket| pass_through(socket, upstream)))
}

/// Carries frames both ways until either side closes.
async fn pass_through(client: WebSocket, upstream: ExecutorSocket) {
    let (mut to_client, mut from_client) = client.split();
    let (mut to_sandbox, mut from_sandbox) = upstream.split();
    let up = async {
        while let Some(Ok(msg)) = from_client.next().await {
            let msg = match msg {
                Message::Binary(b) => SocketMessage::Binary(b),
                Message::Text(t) => SocketMessage::Text(t.as_str().into()),
                Message::Close(_) => break,
                _ => continue,
            };
            if to_sandbox.send(msg).await.is_err() {
                break;
            }
        }
        let _ = to_sandbox.close().await;
    };
    let down = async {
        while let Some(Ok(msg)) = from_sandbox.next().await {
            let msg = match msg {
                SocketMessage::Binary(b) => Message::Binary(b),
                SocketMessage::Text(t) => Message::Text(t.as_str().into()),
                SocketMessage::Close(_) => break,
                _ => continue,
            };
            if to_client.send(msg).await.is_err() {
                break;
            }
        }
        let _ = to_client.close().await;
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}
