//! `/api/v1/webhooks`: users' webhook subscriptions. Subscriptions (with their signing
//! secrets) are kept in the NATS key-value bucket the dispatcher watches; a secret is shown
//! only when created or rotated. Delivery attempts come from the read models.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use halyard_platform::{bus, keys};
use halyard_protocol::webhook::{DeliveryJob, WebhookSubscription};
use halyard_protocol::{CommandId, ConversationId, Envelope, EventId, UserId, subjects};

use crate::AppState;
use crate::accounts::auth::User;
use crate::common::{owned, parse_id};
use crate::error::{ApiError, ApiJson};
use crate::store;

/// Event kinds a subscription may filter on.
pub const EVENT_KINDS: [&str; 15] = [
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
];

fn public(w: &WebhookSubscription) -> Value {
    json!({
        "id": w.id, "url": w.url, "event_kinds": w.event_kinds, "conversation_id": w.conversation_id.map(|c| c.to_string()),
        "description": w.description, "enabled": w.enabled, "disabled_reason": w.disabled_reason,
        "created_at": store::rfc3339(w.created_ms), "updated_at": store::rfc3339(w.updated_ms),
    })
}

fn with_secret(w: &WebhookSubscription) -> Value {
    let mut v = public(w);
    v["secret"] = w.secret.clone().into();
    v
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    pub url: String,
    #[serde(default)]
    pub event_kinds: Option<Vec<String>>,
    #[serde(default)]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchBody {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub event_kinds: Option<Vec<String>>,
    #[serde(default)]
    pub conversation_id: Option<Option<String>>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

fn check_url(state: &AppState, url: &str) -> Result<(), ApiError> {
    crate::error::check_destination("url", url, &state.config.webhooks.allow, "HALYARD_WEBHOOK_ALLOW")
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

/// `POST /webhooks`.
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

/// `GET /webhooks`.
pub async fn list(State(state): State<AppState>, User(user): User) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(json!({"items": items.iter().map(public).collect::<Vec<_>>()})))
}

/// `GET /webhooks/{id}`.
pub async fn get_one(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let (w, _) = load(&state, &user, &id).await?;
    Ok(Json(public(&w)))
}

/// `PATCH /webhooks/{id}`.
pub async fn patch(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchBody>,
) -> Result<Json<Value>, ApiError> {
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

/// `DELETE /webhooks/{id}`.
pub async fn delete(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    let (w, _) = load(&state, &user, &id).await?;
    state.webhooks.delete(&w.id).await.map_err(kv_err)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /webhooks/{id}/rotate-secret`: the new secret, shown once.
pub async fn rotate(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let (mut w, revision) = load(&state, &user, &id).await?;
    w.secret = keys::new_webhook_secret();
    w.updated_ms = halyard_platform::now_ms();
    save(&state, &w, revision).await?;
    Ok(Json(with_secret(&w)))
}

#[derive(Debug, Deserialize)]
pub struct DeliveriesQuery {
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `GET /webhooks/{id}/deliveries`: attempts, newest first.
pub async fn deliveries(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<DeliveriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let (w, _) = load(&state, &user, &id).await?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "`limit` must be between 1 and 1000"));
    }
    let mut items = Vec::new();
    for entry in state.store.tree().scan_prefix(store::attempt_prefix(&w.id)).take(limit) {
        let (_, v) = entry.map_err(ApiError::internal)?;
        if let Ok(item) = serde_json::from_slice::<Value>(&v) {
            items.push(item);
        }
    }
    Ok(Json(json!({"items": items})))
}

/// `POST /webhooks/{id}/deliveries/{delivery_id}/retry`: re-queues a failed delivery.
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
        .get(store::last_attempt_key(&w.id, delivery_id))
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
    let body = crate::events::read(&state.js, &state.store, conversation_id, seq.saturating_sub(1), 1)
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
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true}))))
}
