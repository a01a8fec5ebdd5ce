//! `/api/v1/webhooks`: users' webhook subscriptions. Subscriptions (with their signing
//! secrets) are kept in the NATS key-value bucket the dispatcher watches; a secret is shown
//! only when created or rotated. Their delivery attempts are [`super::deliveries`].

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::keys;
use halyard_protocol::webhook::WebhookSubscription;
use halyard_protocol::{ConversationId, UserId};

use crate::auth::User;
use crate::auth::access::owned;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::checks::parse_id;
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store;
use crate::state::AppState;

/// Event kinds a subscription may filter on.
pub const EVENT_KINDS: [&str; 20] = [
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
    "result",
    "verification",
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

pub(super) async fn load(state: &AppState, user: &UserId, id: &str) -> Result<(WebhookSubscription, u64), ApiError> {
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
