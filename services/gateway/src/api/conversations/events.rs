//! A conversation's events over HTTP: pages of the log (searched, by kind), counted, one by one.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::IntoResponse;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use halyard_protocol::ConversationId;

use crate::auth::User;
use crate::http::api_doc::{Count, Refusals};
use crate::http::error::ApiError;
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Events after this seq (0: from the start).
    #[serde(default)]
    pub after_seq: Option<u64>,
    /// How many (1 to 1000, 100 by default).
    #[serde(default)]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// Comma-separated event kinds to keep (action, observation, user_message, ...).
    #[serde(default)]
    pub kind: Option<String>,
    /// Comma-separated sources to keep (`user`, `agent`, `environment`, `system`).
    #[serde(default)]
    pub source: Option<String>,
    /// Words that must all appear in the event (any case).
    #[serde(default)]
    pub q: Option<String>,
}

impl EventsQuery {
    fn filter(&self) -> Result<crate::read_model::events::Filter, ApiError> {
        crate::read_model::events::Filter::parse(self.kind.as_deref(), self.source.as_deref(), self.q.as_deref())
            .map_err(|m| ApiError::bad_request("invalid_query", m))
    }
}

/// A page of events, written around their JSON as rendered once (the same text the WebSocket
/// sends), not parsed back and re-serialized.
fn events_page(events: &[crate::read_model::events::LiveEvent], has_more: bool) -> axum::response::Response {
    let next = match events.last() {
        Some(e) if has_more => e.seq.to_string(),
        _ => "null".to_owned(),
    };
    let mut body = String::with_capacity(events.iter().map(|e| e.json.len() + 1).sum::<usize>() + 64);
    body.push_str("{\"items\":[");
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(e.json.as_str());
    }
    body.push_str(&format!("],\"has_more\":{has_more},\"next_after_seq\":{next}}}"));
    ([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A page of events.
#[derive(ToSchema)]
#[allow(dead_code)] // Written by `events_page` around each event's JSON as rendered once.
pub struct EventPage<'a> {
    pub items: Vec<halyard_protocol::event::ApiEvent<'a>>,
    /// More events follow this page.
    pub has_more: bool,
    /// The `after_seq` of the next page, when there is one.
    pub next_after_seq: Option<u64>,
}

/// Events in order after `after_seq`: all of them, or those `kind`, `source` and `q` keep.
#[utoipa::path(get, path = "/conversations/{id}/events", tag = "conversations", params(("id" = String, Path, format = Uuid), EventsQuery),
    responses((status = 200, body = EventPage), Refusals))]
pub async fn list_events(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    let Query(q) = query?;
    let (id, _) = crate::auth::access::readable(&state, &user, &id)?;
    list_events_of(&state, id, q).await
}

/// The page of conversation `id`'s events `q` asks for (its owner's or a share link's).
pub(crate) async fn list_events_of(state: &AppState, id: ConversationId, q: EventsQuery) -> Result<axum::response::Response, ApiError> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "`limit` must be between 1 and 1000"));
    }
    let after = q.after_seq.unwrap_or(0);
    let filter = q.filter()?;
    if filter.is_empty() {
        let events = crate::read_model::events::read(&state.js, &state.store, id, after, limit).await?;
        let has_more = events.len() == limit;
        return Ok(events_page(&events, has_more));
    }
    let found = crate::read_model::events::search(&state.js, &state.store, id, after, Some(limit), &filter).await?;
    Ok(events_page(&found.events, found.has_more))
}

/// How many events the same filters keep.
#[utoipa::path(get, path = "/conversations/{id}/events/count", tag = "conversations", params(("id" = String, Path, format = Uuid), EventsQuery),
    responses((status = 200, body = Count), Refusals))]
pub async fn count_events(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Count>, ApiError> {
    let Query(q) = query?;
    let (id, _) = crate::auth::access::readable(&state, &user, &id)?;
    let filter = q.filter()?;
    let found = crate::read_model::events::search(&state.js, &state.store, id, q.after_seq.unwrap_or(0), None, &filter).await?;
    Ok(Json(Count { count: found.events.len() }))
}

/// One event, by its seq.
#[utoipa::path(get, path = "/conversations/{id}/events/{seq}", tag = "conversations",
    params(("id" = String, Path, format = Uuid), ("seq" = u64, Path, minimum = 1)),
    responses((status = 200, body = halyard_protocol::event::ApiEvent), Refusals))]
pub async fn get_event(
    State(state): State<AppState>,
    User(user): User,
    Path((id, seq)): Path<(String, String)>,
) -> Result<axum::response::Response, ApiError> {
    let (id, _) = crate::auth::access::readable(&state, &user, &id)?;
    let seq: u64 = seq
        .parse()
        .ok()
        .filter(|s| *s >= 1)
        .ok_or_else(|| ApiError::bad_request("invalid_path", "an event's seq is a whole number from 1"))?;
    let events = crate::read_model::events::read(&state.js, &state.store, id, seq - 1, 1).await?;
    match events.into_iter().next() {
        Some(e) if e.seq == seq => {
            Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], e.json.as_str().to_owned()).into_response())
        }
        _ => Err(ApiError::not_found(&format!("event {seq} of this conversation"))),
    }
}
