//! `/api/v1/webhooks`: users' webhook subscriptions. Subscriptions (with their signing
//! secrets) are kept in the NATS key-value bucket the dispatcher watches; a secret is shown
//! only when created or rotated. Delivery attempts come from the read models.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use halyard_platform::{bus, keys};
use halyard_protocol::webhook::{DeliveryJob, WebhookSubscription};
use halyard_protocol::{CommandId, ConversationId, Envelope, EventId, UserId, subjects};

use crate::auth::User;
use crate::auth::access::owned;
use crate::http::api_doc::{Accepted, BodyRefusals, Conflict, Refusals};
use crate::http::checks::parse_id;
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::rows::AttemptRow;
use crate::read_model::{layout, store};
use crate::state::AppState;

/// Event kinds a subscription may filter on.
pub const EVENT_KINDS: [&str; 18] = [
    "conversation_started",
    "user_message",
    "agent_message",
    "action",
    "observation",
    "agent_error",
    "execution_status",
    "title",
    "llm_call",
    "action_rejected",
    "confirmation_policy",
    "condensation",
    "skill_activated",
    "llm_profile",
    "mcp_servers",
    "terminal_opened",
    "workspace_restored",
    "budget_alert",
];

/// A webhook subscription as the API shows it; `secret` only when created or rotated.
#[derive(Debug, Serialize, ToSchema)]
pub struct Webhook {
    pub id: String,
    pub url: String,
    /// The event kinds delivered (all when empty).
    pub event_kinds: Vec<String>,
    /// The one conversation delivered (all of the user's when absent).
    pub conversation_id: Option<String>,
    pub description: Option<String>,
    pub enabled: bool,
    /// Why deliveries stopped, when they did.
    pub disabled_reason: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// The signing key of `X-Halyard-Signature`: shown once, when created or rotated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

fn public(w: &WebhookSubscription) -> Webhook {
    Webhook {
        id: w.id.clone(),
        url: w.url.clone(),
        event_kinds: w.event_kinds.clone(),
        conversation_id: w.conversation_id.map(|c| c.to_string()),
        description: w.description.clone(),
        enabled: w.enabled,
        disabled_reason: w.disabled_reason.clone(),
        created_at: store::rfc3339(w.created_ms),
        updated_at: store::rfc3339(w.updated_ms),
        secret: None,
    }
}

fn with_secret(w: &WebhookSubscription) -> Webhook {
    Webhook { secret: Some(w.secret.clone()), ..public(w) }
}

/// The user's webhooks, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookList {
    pub items: Vec<Webhook>,
}

/// A webhook's delivery attempts, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    pub items: Vec<AttemptView>,
}

/// A new subscription.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = WebhookCreate)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// Where events are POSTed (http or https).
    pub url: String,
    /// Event kinds to deliver (all when absent).
    #[serde(default)]
    pub event_kinds: Option<Vec<String>>,
    /// Deliver this conversation's events only.
    #[serde(default)]
    #[schema(format = Uuid)]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// What to change of a subscription; absent fields stay.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = WebhookUpdate)]
#[serde(deny_unknown_fields)]
pub struct PatchBody {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub event_kinds: Option<Vec<String>>,
    /// A conversation to narrow to, or `null` for all of them again.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub conversation_id: Option<Option<String>>,
    #[serde(default)]
    pub description: Option<String>,
    /// `true` resumes deliveries stopped for failing.
    #[serde(default)]
    pub enabled: Option<bool>,
}

fn check_url(state: &AppState, url: &str) -> Result<(), ApiError> {
    crate::http::error::check_destination("url", url, &state.config.webhooks.allow, "HALYARD_WEBHOOK_ALLOW")
}

fn check_kinds(kinds: &[String]) -> Result<(), ApiError> {
    match kinds.iter().find(|k| !EVENT_KINDS.contains(&k.as_str())) {
        Some(k) => {
            Err(ApiError::bad_request("invalid_field", format!("`event_kinds`: unknown kind {k:?}; known: {}", EVENT_KINDS.join(", "))))
        }
        None => Ok(()),
    }
}

fn check_conversation(state: &AppState, user: &UserId, id: &str) -> Result<ConversationId, ApiError> {
    owned(state, user, id).map(|(id, _)| id).map_err(|e| match e.status {
        StatusCode::NOT_FOUND => ApiError::bad_request("invalid_field", "`conversation_id`: no such conversation of yours"),
        _ => e,
    })
}

fn kv_err(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "webhook store");
    ApiError::unavailable("the webhook store did not answer; try again")
}

async fn load(state: &AppState, user: &UserId, id: &str) -> Result<(WebhookSubscription, u64), ApiError> {
    let _: uuid::Uuid = parse_id(id, "id")?;
    let entry = state.webhooks.entry(id).await.map_err(kv_err)?;
    match entry {
        Some(e) if e.operation == async_nats::jetstream::kv::Operation::Put => {
            let w: WebhookSubscription = serde_json::from_slice(&e.value).map_err(ApiError::internal)?;
            if &w.owner != user {
                return Err(ApiError::not_found("webhook"));
            }
            Ok((w, e.revision))
        }
        _ => Err(ApiError::not_found("webhook")),
    }
}

async fn save(state: &AppState, w: &WebhookSubscription, revision: u64) -> Result<(), ApiError> {
    let bytes = serde_json::to_vec(w).map_err(ApiError::internal)?;
    state
        .webhooks
        .update(&w.id, bytes.into(), revision)
        .await
        .map_err(|_| ApiError::conflict("concurrent_update", "the webhook changed while you were updating it; read it again and retry"))?;
    Ok(())
}

/// Subscribes a URL to the user's events: the answer holds the signing `secret`, shown once.
#[utoipa::path(post, path = "/webhooks", tag = "webhooks", request_body = CreateBody,
    responses((status = 201, body = Webhook), Refusals, BodyRefusals))]
pub async fn create(
    State(state): State<AppState>,
    User(user): User,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<impl IntoResponse, ApiError> {
    check_url(&state, &body.url)?;
    let kinds = body.event_kinds.unwrap_or_default();
    check_kinds(&kinds)?;
    let conversation_id = match &body.conversation_id {
        Some(c) => Some(check_conversation(&state, &user, c)?),
        None => None,
    };
    let now = halyard_platform::now_ms();
    let w = WebhookSubscription {
        id: uuid::Uuid::now_v7().to_string(),
        owner: user,
        url: body.url,
        event_kinds: kinds,
        conversation_id,
        description: body.description,
        enabled: true,
        disabled_reason: None,
        secret: keys::new_webhook_secret(),
        created_ms: now,
        updated_ms: now,
    };
    let bytes = serde_json::to_vec(&w).map_err(ApiError::internal)?;
    state.webhooks.create(&w.id, bytes.into()).await.map_err(kv_err)?;
    Ok((StatusCode::CREATED, Json(with_secret(&w))))
}

/// The user's webhooks (without secrets).
#[utoipa::path(get, path = "/webhooks", tag = "webhooks", responses((status = 200, body = WebhookList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User) -> Result<Json<WebhookList>, ApiError> {
    use futures::StreamExt;
    let mut items = Vec::new();
    let mut keys = state.webhooks.keys().await.map_err(kv_err)?;
    while let Some(key) = keys.next().await {
        let key = key.map_err(kv_err)?;
        if let Some(v) = state.webhooks.get(&key).await.map_err(kv_err)? {
            if let Ok(w) = serde_json::from_slice::<WebhookSubscription>(&v) {
                if w.owner == user {
                    items.push(w);
                }
            }
        }
    }
    items.sort_by_key(|w| std::cmp::Reverse(w.created_ms));
    Ok(Json(WebhookList { items: items.iter().map(public).collect() }))
}

/// One webhook (without its secret).
#[utoipa::path(get, path = "/webhooks/{id}", tag = "webhooks", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = Webhook), Refusals))]
pub async fn get_one(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<Webhook>, ApiError> {
    let (w, _) = load(&state, &user, &id).await?;
    Ok(Json(public(&w)))
}

/// Changes a webhook (409 `concurrent_update` if it changed meanwhile).
#[utoipa::path(patch, path = "/webhooks/{id}", tag = "webhooks", params(("id" = String, Path, format = Uuid)), request_body = PatchBody,
    responses((status = 200, body = Webhook), Refusals, BodyRefusals, Conflict))]
pub async fn patch(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchBody>,
) -> Result<Json<Webhook>, ApiError> {
    let (mut w, revision) = load(&state, &user, &id).await?;
    if let Some(url) = body.url {
        check_url(&state, &url)?;
        w.url = url;
    }
    if let Some(kinds) = body.event_kinds {
        check_kinds(&kinds)?;
        w.event_kinds = kinds;
    }
    if let Some(conv) = body.conversation_id {
        w.conversation_id = match conv {
            Some(c) => Some(check_conversation(&state, &user, &c)?),
            None => None,
        };
    }
    if let Some(d) = body.description {
        w.description = Some(d);
    }
    if let Some(enabled) = body.enabled {
        w.enabled = enabled;
        if enabled {
            w.disabled_reason = None;
        }
    }
    w.updated_ms = halyard_platform::now_ms();
    save(&state, &w, revision).await?;
    Ok(Json(public(&w)))
}

/// Deletes a webhook: nothing more is delivered to it.
#[utoipa::path(delete, path = "/webhooks/{id}", tag = "webhooks", params(("id" = String, Path, format = Uuid)),
    responses((status = 204, description = "deleted"), Refusals))]
pub async fn delete(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    let (w, _) = load(&state, &user, &id).await?;
    state.webhooks.delete(&w.id).await.map_err(kv_err)?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new signing secret, shown once; the old one signs nothing more.
#[utoipa::path(post, path = "/webhooks/{id}/rotate-secret", tag = "webhooks", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = Webhook), Refusals, Conflict))]
pub async fn rotate(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<Webhook>, ApiError> {
    let (mut w, revision) = load(&state, &user, &id).await?;
    w.secret = keys::new_webhook_secret();
    w.updated_ms = halyard_platform::now_ms();
    save(&state, &w, revision).await?;
    Ok(Json(with_secret(&w)))
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
