//! `/api/v1/webhooks/{id}/deliveries`: a subscription's delivery attempts, from the read models
//! (newest first), and a failed delivery sent again (`POST .../deliveries/{delivery}/retry`).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use halyard_platform::bus;
use halyard_protocol::webhook::DeliveryJob;
use halyard_protocol::{CommandId, ConversationId, Envelope, EventId, subjects};

use super::webhooks::load;
use crate::auth::User;
use crate::http::api_doc::{Accepted, Conflict, Refusals};
use crate::http::checks::parse_id;
use crate::http::error::ApiError;
use crate::read_model::layout;
use crate::read_model::rows::AttemptRow;
use crate::state::AppState;

/// A webhook's delivery attempts, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    pub items: Vec<AttemptView>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    /// How many attempts (1 to 1000, 100 by default).
    #[serde(default)]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// A webhook's delivery attempts, newest first.
#[utoipa::path(get, path = "/webhooks/{id}/deliveries", tag = "webhooks", params(("id" = String, Path, format = Uuid), DeliveriesQuery),
    responses((status = 200, body = DeliveryList), Refusals))]
pub async fn deliveries(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<DeliveriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DeliveryList>, ApiError> {
    let Query(q) = query?;
    let (w, _) = load(&state, &user, &id).await?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "`limit` must be between 1 and 1000"));
    }
    let mut items = Vec::new();
    for entry in state.store.tree().scan_prefix(layout::attempt_prefix(&w.id)).take(limit) {
        let (_, v) = entry.map_err(ApiError::internal)?;
        if let Ok(item) = serde_json::from_slice::<AttemptRow>(&v).map(AttemptView::from) {
            items.push(item);
        }
    }
    Ok(Json(DeliveryList { items }))
}

/// Delivers again an event whose delivery failed for good (409 `delivery_not_failed` otherwise).
#[utoipa::path(post, path = "/webhooks/{id}/deliveries/{delivery_id}/retry", tag = "webhooks",
    params(("id" = String, Path, format = Uuid), ("delivery_id" = String, Path, format = Uuid)),
    responses((status = 202, body = Accepted), Refusals, Conflict))]
pub async fn retry(
    State(state): State<AppState>,
    User(user): User,
    Path((id, delivery)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let (w, _) = load(&state, &user, &id).await?;
    let delivery_id: CommandId = parse_id(&delivery, "delivery_id")?;
    let last = state
        .store
        .tree()
        .get(layout::last_attempt_key(&w.id, delivery_id))
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::not_found("delivery"))?;
    let last: Value = serde_json::from_slice(&last).map_err(ApiError::internal)?;
    if last["outcome"] != "failed" {
        return Err(ApiError::conflict(
            "delivery_not_failed",
            "only a delivery that failed for good can be retried; this one succeeded or is still being retried",
        ));
    }
    let conversation_id: ConversationId = parse_id(last["conversation_id"].as_str().unwrap_or_default(), "conversation_id")?;
    let seq = last["seq"].as_u64().unwrap_or(0);
    let body = crate::read_model::events::read(&state.js, &state.store, conversation_id, seq.saturating_sub(1), 1)
        .await?
        .into_iter()
        .find(|e| e.seq == seq)
        .map(|e| e.json.as_str().to_owned())
        .ok_or_else(|| ApiError::conflict("event_gone", "the event of this delivery no longer exists (its conversation was deleted)"))?;
    let event: Value = serde_json::from_str(&body).map_err(ApiError::internal)?;
    let job = DeliveryJob {
        delivery_id,
        webhook_id: w.id.clone(),
        owner: user,
        conversation_id,
        event_id: parse_id::<EventId>(event["id"].as_str().unwrap_or_default(), "event_id")?,
        seq,
        kind: event["kind"].as_str().unwrap_or_default().to_owned(),
        body,
        prior_attempts: last["attempt"].as_u64().unwrap_or(0) as u32,
        event_ms: halyard_platform::now_ms(),
    };
    // A fresh message id: the original job's id is still in the de-duplication window.
    bus::publish(&state.js, subjects::delivery_job(&w.id, conversation_id), &Envelope::new(job, halyard_platform::now_ms())).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted::yes())))
}

/// A delivery attempt as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = DeliveryAttempt)]
pub struct AttemptView {
    pub delivery_id: String,
    pub event_id: String,
    pub conversation_id: String,
    pub seq: u64,
    /// 1 for the first try.
    pub attempt: u32,
    /// The receiver's HTTP status, if it answered.
    pub status_code: Option<u16>,
    /// Why the attempt failed, if it did.
    pub error: Option<String>,
    pub duration_ms: u64,
    /// `succeeded`, `retrying` or `failed` (for good; `POST .../retry` tries again).
    pub outcome: String,
    pub time: String,
}

impl From<AttemptRow> for AttemptView {
    fn from(r: AttemptRow) -> Self {
        let AttemptRow { delivery_id, event_id, conversation_id, seq, attempt, status_code, error, duration_ms, outcome, time } = r;
        Self { delivery_id, event_id, conversation_id, seq, attempt, status_code, error, duration_ms, outcome, time }
    }
}
