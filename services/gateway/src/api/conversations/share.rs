//! Read-only share links: `POST /conversations/{id}/share` gives its owner a URL that shows the
//! conversation live (its timeline and its changes) to anyone holding it, with no account;
//! `DELETE` revokes it at once. The link's token is `<conversation id>.<secret>`; the gateway keeps
//! only a salted hash of the secret, in the user bucket under `share.<conversation id>` (one link
//! per conversation: sharing again replaces it), so every gateway replica checks it and none can
//! show it again.
//!
//! What a link reaches is `/api/v1/shared/{token}`: the conversation's summary, its events (a
//! page, or the WebSocket) and its changes. Nothing there writes, and nothing there names the
//! owner's other resources. Events are masked when appended, and changes are masked with the
//! owner's secrets, as for the owner. A link stops working when it is revoked, replaced or the
//! conversation is deleted; an open WebSocket closes within a second of it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::Json;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::keys;
use halyard_protocol::{ConversationId, subjects};

use crate::api::conversations::events::{EventPage, EventsQuery, list_events_of};
use crate::api::conversations::views::state_of;
use crate::api::conversations::ws::{WsQuery, stream};
use crate::audit::{self, Client};
use crate::auth::User;
use crate::auth::access::owned;
use crate::http::api_doc::{Conflict, Refusals};
use crate::http::checks::parse_id;
use crate::http::error::ApiError;
use crate::read_model::store::{ConversationView, rfc3339};
use crate::state::AppState;

/// How often an open shared WebSocket checks that its link still stands.
const RECHECK: Duration = Duration::from_secs(1);

/// What the user bucket keeps of a link: never the secret.
#[derive(Debug, Serialize, Deserialize)]
struct ShareRecord {
    owner: String,
    salt: String,
    hash: String,
    created_ms: i64,
}

/// A share link, as its owner gets it (once).
#[derive(Debug, Serialize, ToSchema)]
pub struct ShareLink {
    /// Opens the conversation, read-only and live, in any browser, with no account.
    pub url: String,
    /// The token in the URL, for `/api/v1/shared/{token}/...`.
    pub token: String,
    pub created_at: String,
}

/// Whether a conversation has a share link (not the link itself: it is shown once).
#[derive(Debug, Serialize, ToSchema)]
pub struct ShareState {
    pub shared: bool,
    pub created_at: Option<String>,
}

/// A shared conversation, as a link's holder sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SharedConversation {
    pub id: String,
    pub title: Option<String>,
    /// As `Conversation.state`: `running`, `finished`, ...
    pub state: String,
    pub created_at: String,
    pub last_event_seq: u64,
}

fn kv_error(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "share links: the user bucket did not answer");
    ApiError::unavailable("share links cannot be read now; try again")
}

/// Gives the conversation a share link, replacing any it had (the old one stops working).
#[utoipa::path(post, path = "/conversations/{id}/share", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 201, body = ShareLink), Refusals))]
pub async fn share(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<(StatusCode, Json<ShareLink>), ApiError> {
    let (id, _) = owned(&state, &user, &id)?;
    let secret = keys::random_secret();
    let salt = keys::random_secret();
    let record =
        ShareRecord { owner: user.0.clone(), hash: keys::api_key_hash(&salt, &secret), salt, created_ms: halyard_platform::now_ms() };
    let bytes = serde_json::to_vec(&record).map_err(ApiError::internal)?;
    state.user_kv.put(subjects::share_key(id), bytes.into()).await.map_err(kv_error)?;
    tracing::info!(user = %user, conversation_id = %id, "conversation shared");
    audit::Action::new(&user, "share.create", &id.to_string()).send(&state, client).await;
    let token = format!("{id}.{secret}");
    let url = format!("{}/shared/{token}", crate::auth::client::workspace_origin(&state, &headers));
    Ok((StatusCode::CREATED, Json(ShareLink { url, token, created_at: rfc3339(record.created_ms) })))
}

/// Whether the conversation has a share link.
#[utoipa::path(get, path = "/conversations/{id}/share", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = ShareState), Refusals))]
pub async fn share_state(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<ShareState>, ApiError> {
    let (id, _) = owned(&state, &user, &id)?;
    let record = load(&state, id).await?;
    Ok(Json(ShareState { shared: record.is_some(), created_at: record.map(|r| rfc3339(r.created_ms)) }))
}

/// Revokes the conversation's share link at once (open shared pages stop within a second).
#[utoipa::path(delete, path = "/conversations/{id}/share", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 204, description = "revoked"), Refusals))]
pub async fn unshare(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let (id, _) = owned(&state, &user, &id)?;
    if load(&state, id).await?.is_none() {
        return Err(ApiError::not_found("share link"));
    }
    state.user_kv.purge(subjects::share_key(id)).await.map_err(kv_error)?;
    tracing::info!(user = %user, conversation_id = %id, "share link revoked");
    audit::Action::new(&user, "share.revoke", &id.to_string()).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

async fn load(state: &AppState, id: ConversationId) -> Result<Option<ShareRecord>, ApiError> {
    match state.user_kv.get(subjects::share_key(id)).await.map_err(kv_error)? {
        Some(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        None => Ok(None),
    }
}

/// The conversation a share link opens: the route's `{token}`, resolved before anything else
/// about the request is looked at (an unknown token is 404 whatever else is wrong).
pub struct SharedLink {
    pub id: ConversationId,
    pub view: ConversationView,
    token: String,
    client: Option<IpAddr>,
}

impl FromRequestParts<AppState> for SharedLink {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Path(token) = Path::<String>::from_request_parts(parts, state).await.map_err(|_| ApiError::not_found("share link"))?;
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        let client = peer.map(|p| crate::auth::client::client_ip(state, p, &parts.headers));
        let (id, view) = resolve(state, &token, client).await?;
        Ok(Self { id, view, token, client })
    }
}

/// The conversation a token opens, or 404 (counted against the caller's address like a failed
/// sign-in, so that guessing is slow as well as hopeless).
async fn resolve(state: &AppState, token: &str, client: Option<IpAddr>) -> Result<(ConversationId, ConversationView), ApiError> {
    let found = async {
        let (id, secret) = token.split_once('.')?;
        let id: ConversationId = parse_id(id, "token").ok()?;
        let record = load(state, id).await.ok()??;
        let hash = keys::api_key_hash(&record.salt, secret);
        if !keys::constant_time_eq(hash.as_bytes(), record.hash.as_bytes()) {
            return None;
        }
        let view = state.store.conversation(id).ok()??;
        (view.owner == record.owner).then_some((id, view))
    };
    match found.await {
        Some(found) => Ok(found),
        None => {
            if let Some(client) = client {
                let refusal = state.auth_failures.failed(client, None, String::new());
                if refusal.status == StatusCode::TOO_MANY_REQUESTS {
                    return Err(crate::auth::client::slow_down(refusal).await);
                }
            }
            // The code every missing or not-yours resource has.
            Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "this link was revoked, or never existed; ask for a new one"))
        }
    }
}

/// The shared conversation's summary.
#[utoipa::path(get, path = "/shared/{token}", tag = "shared", security(()), params(("token" = String, Path)),
    responses((status = 200, body = SharedConversation), Refusals))]
pub async fn shared(SharedLink { view: c, .. }: SharedLink) -> Json<SharedConversation> {
    Json(SharedConversation {
        state: state_of(&c).0.to_owned(),
        id: c.id,
        title: c.title,
        created_at: c.created_at,
        last_event_seq: c.last_event_seq,
    })
}

/// The shared conversation's events in order (as `GET /conversations/{id}/events`).
#[utoipa::path(get, path = "/shared/{token}/events", tag = "shared", security(()), params(("token" = String, Path), EventsQuery),
    responses((status = 200, body = EventPage), Refusals))]
pub async fn shared_events(
    State(state): State<AppState>,
    link: SharedLink,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    list_events_of(&state, link.id, q).await
}

/// WebSocket: the shared conversation's events, replayed after `after_seq` and then live (as
/// `GET /conversations/{id}/events/ws`); closed within a second of the link's revocation.
#[utoipa::path(get, path = "/shared/{token}/events/ws", tag = "shared", security(()), params(("token" = String, Path), WsQuery),
    responses((status = 101, description = "switching protocols"), Refusals))]
pub async fn shared_events_ws(
    State(state): State<AppState>,
    link: SharedLink,
    query: Result<Query<WsQuery>, axum::extract::rejection::QueryRejection>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let ws = ws.map_err(|r| ApiError::bad_request("websocket_required", format!("open this URL as a WebSocket ({})", r.body_text())))?;
    let after = q.after_seq.unwrap_or(0);
    Ok(ws.read_buffer_size(4096).on_upgrade(move |socket| async move {
        metrics::gauge!("halyard_ws_clients").increment(1.0);
        let standing = async {
            loop {
                tokio::time::sleep(RECHECK).await;
                if resolve(&state, &link.token, link.client).await.is_err() {
                    return;
                }
            }
        };
        // Dropping the stream drops the socket: the connection ends.
        tokio::select! {
            _ = stream(state.clone(), link.id, after, socket) => {}
            _ = standing => tracing::debug!(conversation_id = %link.id, "share link revoked; closing its WebSocket"),
        }
        metrics::gauge!("halyard_ws_clients").decrement(1.0);
    }))
}

/// What changed in the shared conversation's workspace, masked with its owner's secrets (409
/// while its sandbox is not running).
#[utoipa::path(get, path = "/shared/{token}/changes", tag = "shared", security(()), params(("token" = String, Path)),
    responses((status = 200, body = halyard_protocol::executor::ChangesResponse), Refusals, Conflict))]
pub async fn shared_changes(
    State(state): State<AppState>,
    link: SharedLink,
) -> Result<Json<halyard_protocol::executor::ChangesResponse>, ApiError> {
    let owner = halyard_protocol::UserId(link.view.owner.clone());
    crate::api::workspace::files::changes_of(&state, &owner, &link.id.to_string(), false).await
}
