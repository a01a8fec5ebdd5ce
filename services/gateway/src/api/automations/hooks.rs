//! `POST /api/v1/hooks/{id}`: the one route that takes no key. A request is authenticated by its
//! automation's own scheme ([`super::verify`]) on the raw body, before anything is parsed;
//! a delivery already taken is answered 200 and starts nothing (what it is known by, always
//! something the signature covers, is kept in the bus for as long as forges retry); anything else is handed to the automation service as a durable
//! command and answered 202 at once. Deciding what it starts is not done here: a slow forge,
//! a slow start or a restart can then lose nothing and hold nobody.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Serialize;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use halyard_platform::{bus, keys};
use halyard_protocol::automation::{self as proto, AutomationCommand};
use halyard_protocol::{CommandId, Envelope, subjects};

use crate::api::automations::verify::{self, Refusal};
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::state::AppState;

/// What a hook answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct HookAnswer {
    /// `accepted` (handed on: the automation's runs say what it started) or `duplicate` (this
    /// delivery was taken before; nothing more happens).
    pub status: &'static str,
    pub delivery_id: String,
    /// Slack's `url_verification` challenge, answered back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge: Option<String>,
}

fn refused(kind: &'static str, why: Refusal) -> ApiError {
    metrics::counter!("halyard_hook_refused_total", "kind" => kind, "reason" => why.as_str()).increment(1);
    tracing::info!(kind, reason = why.as_str(), "hook request refused");
    // No detail: a sender guessing at signatures learns nothing from the answer.
    ApiError::new(StatusCode::UNAUTHORIZED, "invalid_signature", "the request is not signed with this hook's secret")
}

/// The key of a taken delivery: the automation, then a digest of the sender's id (any bytes
/// the sender chose become a valid, fixed-length key).
fn delivery_key(automation: &str, delivery: &str) -> String {
    format!("{automation}.{}", &keys::to_hex(&Sha256::digest(delivery.as_bytes()))[..40])
}

/// Takes a request for an automation: verified on its raw bytes, answered 202 once it is on
/// the bus (200 for a delivery taken before, 401 with no detail when it does not verify).
#[utoipa::path(post, path = "/hooks/{id}", tag = "automations", security(()), params(("id" = String, Path, format = Uuid)),
    request_body(content = Object, description = "what the sender sends, signed with the automation's scheme"),
    responses(
        (status = 202, body = HookAnswer, description = "handed on to the automation"),
        (status = 200, body = HookAnswer, description = "a delivery taken before: nothing more happens"),
        Refusals))]
pub async fn receive(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<HookAnswer>), ApiError> {
    let Some(a) = state.automations.get(&id).filter(|a| a.trigger.has_hook()) else {
        return Err(ApiError::not_found("hook"));
    };
    let kind = a.trigger.kind();
    let now = halyard_platform::now_ms();
    let sealed = a.secret_sealed.as_deref().ok_or_else(|| ApiError::internal("an automation with a hook but no secret"))?;
    let secret = state.vault.open(&proto::secret_slot(&a.id), sealed).map_err(ApiError::internal)?;
    let (delivery_id, event) = match &a.trigger {
        proto::Trigger::Webhook {} => {
            (verify::standard_webhooks(&secret, &headers, &body, now / 1000).map_err(|why| refused(kind, why))?, None)
        }
        proto::Trigger::Github { .. } => {
            let (delivery, event) = verify::github(&secret, &headers, &body).map_err(|why| refused(kind, why))?;
            (delivery, Some(event))
        }
        proto::Trigger::Gitlab { .. } => {
            let (delivery, event) = verify::gitlab(&secret, &headers).map_err(|why| refused(kind, why))?;
            (delivery, Some(event))
        }
        proto::Trigger::Forgejo { .. } => {
            let (delivery, event) = verify::forgejo(&secret, &headers, &body).map_err(|why| refused(kind, why))?;
            (delivery, Some(event))
        }
        proto::Trigger::Linear { .. } => (verify::linear(&secret, &headers, &body, now).map_err(|why| refused(kind, why))?, None),
        proto::Trigger::Jira { .. } => {
            let delivery =
                verify::hub_signature(&secret, &headers, &body, "x-atlassian-webhook-identifier").map_err(|why| refused(kind, why))?;
            (delivery, None)
        }
        proto::Trigger::AzureDevops { .. } => {
            let (delivery, event) = verify::azure_devops(&secret, &headers, &body).map_err(|why| refused(kind, why))?;
            (delivery, Some(event))
        }
        proto::Trigger::Bitbucket { .. } => {
            // Bitbucket Cloud names a delivery `X-Request-UUID`; Data Center `X-Request-Id`.
            let id_header = if headers.contains_key("x-request-uuid") { "x-request-uuid" } else { "x-request-id" };
            let delivery = verify::hub_signature(&secret, &headers, &body, id_header).map_err(|why| refused(kind, why))?;
            let event = headers.get("x-event-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
            (delivery, event)
        }
        proto::Trigger::Slack { .. } => {
            verify::slack(&secret, &headers, &body, now / 1000).map_err(|why| refused(kind, why))?;
            let payload: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            // Slack's handshake when the Request URL is set: the challenge back, nothing started.
            if payload["type"] == "url_verification" {
                let challenge = payload["challenge"].as_str().unwrap_or_default().to_owned();
                return Ok((
                    StatusCode::OK,
                    Json(HookAnswer { status: "challenge", delivery_id: String::new(), challenge: Some(challenge) }),
                ));
            }
            let delivery = payload["event_id"].as_str().map(str::to_owned);
            (
                delivery.unwrap_or_else(|| keys::to_hex(&Sha256::digest(&body))),
                Some(payload["type"].as_str().unwrap_or_default().to_owned()),
            )
        }
        proto::Trigger::Schedule { .. } => return Err(ApiError::not_found("hook")),
    };
    let Ok(text) = String::from_utf8(body.to_vec()) else {
        return Err(ApiError::bad_request("invalid_body", "the request's body is not UTF-8 text"));
    };
    // What a replay is known by must be covered by the signature. Standard Webhooks sign their
    // id, Slack and Linear their timestamp (and are refused past a few minutes); the forges and
    // Jira sign only the body, so a captured delivery sent again under a fresh id header would
    // pass as new: for them the signed body itself is the delivery.
    let signed_id = matches!(a.trigger, proto::Trigger::Webhook {} | proto::Trigger::Slack { .. } | proto::Trigger::Linear { .. });
    let replay_id = if signed_id { delivery_id.clone() } else { format!("body:{}", keys::to_hex(&Sha256::digest(&body))) };
    let key = delivery_key(&a.id, &replay_id);
    match state.hook_deliveries.create(&key, now.to_string().into_bytes().into()).await {
        Ok(_) => {}
        Err(e) if e.kind() == async_nats::jetstream::kv::CreateErrorKind::AlreadyExists => {
            metrics::counter!("halyard_hook_duplicates_total", "kind" => kind).increment(1);
            return Ok((StatusCode::OK, Json(HookAnswer { status: "duplicate", delivery_id, challenge: None })));
        }
        Err(e) => {
            tracing::error!(error = %e, "hook delivery store");
            return Err(ApiError::unavailable("the hook could not record the request; send it again"));
        }
    }
    let cmd =
        AutomationCommand::Hook { automation_id: a.id.clone(), delivery_id: delivery_id.clone(), received_ms: now, event, body: text };
    let command_id = CommandId(uuid::Uuid::from_slice(&Sha256::digest(key.as_bytes())[..16]).map_err(ApiError::internal)?);
    if let Err(e) = bus::publish(&state.js, subjects::automation_command(&a.id), &Envelope::with_id(command_id, cmd, now)).await {
        // Not taken after all: the sender's retry must get through.
        let _ = state.hook_deliveries.delete(&key).await;
        tracing::error!(error = %e, "hook command");
        return Err(ApiError::unavailable("the hook could not hand the request on; send it again"));
    }
    metrics::counter!("halyard_hook_accepted_total", "kind" => kind).increment(1);
    Ok((StatusCode::ACCEPTED, Json(HookAnswer { status: "accepted", delivery_id, challenge: None })))
}
