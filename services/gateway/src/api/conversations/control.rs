//! What a user does to a running conversation: messages (with images), pause, resume, interrupt,
//! confirm or reject a waiting action, the confirmation policy and LLM profile, restoring a
//! checkpoint, and asking the agent a question on the side. Each is a durable command to the
//! agent runner, accepted once the bus has stored it.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::command::{AgentCommand, AskAnswer, AskRequest};
use halyard_protocol::event::ConfirmationPolicy;
use halyard_protocol::{ConversationId, subjects};

use super::checks::{MAX_MESSAGE_CHARS, check_at_seq, check_text, require_own_workspace, require_ready, require_sandbox, require_started};
use crate::auth::User;
use crate::auth::access::owned;
use crate::domain::commands::agent_command;
use crate::http::api_doc::{Accepted, BadGateway, BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

/// A message to the agent.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageBody {
    /// 1 to 200,000 characters.
    #[schema(min_length = 1, max_length = 200_000)]
    pub text: String,
    /// Images attached to the message: `{media_type, data}` with the bytes in base64.
    #[serde(default)]
    pub images: Vec<halyard_protocol::event::Image>,
}

/// Images one message may carry, and their bytes (decoded) in all.
pub const MAX_IMAGES: usize = 4;

pub const MAX_IMAGE_BYTES: usize = 4 << 20;

/// What a message's body may hold beyond the deployment's body limit: its images, in base64
/// (which grows bytes by a third), and their JSON.
pub const IMAGE_ALLOWANCE: usize = MAX_IMAGE_BYTES / 3 * 4 + 64 * 1024;

/// Checks the images of a message: kinds a vision model reads, real base64, within the limits.
fn check_images(images: &[halyard_protocol::event::Image]) -> Result<(), ApiError> {
    use base64::Engine;
    const KINDS: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];
    if images.len() > MAX_IMAGES {
        return Err(ApiError::bad_request("invalid_field", format!("`images`: at most {MAX_IMAGES} images a message")));
    }
    let mut total = 0;
    for (i, image) in images.iter().enumerate() {
        if !KINDS.contains(&image.media_type.as_str()) {
            return Err(ApiError::bad_request(
                "invalid_field",
                format!("`images[{i}].media_type` {:?}: send one of {}", image.media_type, KINDS.join(", ")),
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(image.data.as_bytes())
            .map_err(|_| ApiError::bad_request("invalid_field", format!("`images[{i}].data` is not standard base64")))?;
        total += bytes.len();
    }
    if total > MAX_IMAGE_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "images_too_large",
            format!("the images come to {} KiB; a message may carry {} KiB of images", total >> 10, MAX_IMAGE_BYTES >> 10),
        ));
    }
    Ok(())
}

/// A message to the agent (with up to four images for a vision model); accepted while starting
/// too: it is queued. 409 once the conversation failed or its sandbox was deleted.
#[utoipa::path(post, path = "/conversations/{id}/messages", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    request_body = MessageBody, responses((status = 202, body = Accepted), Refusals, BodyRefusals, Conflict))]
pub async fn send_message(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<MessageBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (id, c) = owned(&state, &user, &id)?;
    check_text("text", &body.text, MAX_MESSAGE_CHARS)?;
    check_images(&body.images)?;
    require_started(&c)?;
    require_sandbox(&c)?;
    crate::api::batches::require_chosen(&state, &user, &c).await?;
    // A spent budget of its organization would stop the run before its first call.
    if let Some(org) = c.start_request.as_ref().and_then(|r| r.org.as_deref()) {
        if let Some((_, o)) = state.accounts.org(org) {
            crate::api::accounts::org_budgets::check_start(&state, &o, &user).await?;
        }
    }
    // The command carries the images: it must fit in one message of the bus.
    let fits =
        body.images.iter().map(|i| i.data.len()).sum::<usize>() + body.text.len() + 4096 <= state.js.client().server_info().max_payload;
    if !fits {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "images_too_large",
            format!(
                "this deployment's message bus takes messages of {} KiB at most (nats-server `max_payload`); send smaller images",
                state.js.client().server_info().max_payload >> 10
            ),
        ));
    }
    let command = AgentCommand::UserMessage { conversation_id: id, text: body.text, images: body.images };
    let event_id = agent_command(&state, id, command).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted { accepted: true, event_id: Some(event_id) })))
}

/// Pause, resume, interrupt, confirm: each needs a conversation that has finished starting.
async fn control(
    state: &AppState,
    user: &halyard_protocol::UserId,
    id: &str,
    make: fn(ConversationId) -> AgentCommand,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let (id, c) = owned(state, user, id)?;
    require_ready(&c)?;
    require_sandbox(&c)?;
    agent_command(state, id, make(id)).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted::yes())))
}

/// Pauses the agent after its current step (409 until the conversation is READY).
#[utoipa::path(post, path = "/conversations/{id}/pause", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 202, body = Accepted), Refusals, Conflict))]
pub async fn pause(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    control(&state, &user, &id, |conversation_id| AgentCommand::Pause { conversation_id }).await
}

/// Stops the running command now.
#[utoipa::path(post, path = "/conversations/{id}/interrupt", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 202, body = Accepted), Refusals, Conflict))]
pub async fn interrupt(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    control(&state, &user, &id, |conversation_id| AgentCommand::Interrupt { conversation_id }).await
}

/// The actions waiting for confirmation run.
#[utoipa::path(post, path = "/conversations/{id}/confirm", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 202, body = Accepted), Refusals, Conflict))]
pub async fn confirm(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    control(&state, &user, &id, |conversation_id| AgentCommand::Confirm { conversation_id }).await
}

/// Why the actions may not run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectBody {
    /// Why; the model reads it as the actions' result.
    pub reason: String,
}

/// The actions waiting for confirmation do not run; the agent is told why and goes on.
#[utoipa::path(post, path = "/conversations/{id}/reject", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    request_body = RejectBody, responses((status = 202, body = Accepted), Refusals, BodyRefusals, Conflict))]
pub async fn reject(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(RejectBody { reason }): ApiJson<RejectBody>,
) -> Result<impl IntoResponse, ApiError> {
    check_text("reason", &reason, MAX_MESSAGE_CHARS)?;
    let (cid, c) = owned(&state, &user, &id)?;
    require_ready(&c)?;
    agent_command(&state, cid, AgentCommand::Reject { conversation_id: cid, reason }).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted::yes())))
}

/// When actions wait for consent from now on.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyBody {
    pub policy: ConfirmationPolicy,
}

/// A new confirmation policy accepted.
#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyAccepted {
    pub accepted: bool,
    pub policy: ConfirmationPolicy,
}

/// A switch of LLM profile accepted.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProfileAccepted {
    pub accepted: bool,
    /// `null`: the operator's model.
    pub profile: Option<String>,
}

/// Changes when actions wait for consent (a `confirmation_policy` event records it).
#[utoipa::path(put, path = "/conversations/{id}/confirmation-policy", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    request_body = PolicyBody, responses((status = 202, body = PolicyAccepted), Refusals, BodyRefusals, Conflict))]
pub async fn set_confirmation_policy(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PolicyBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (cid, c) = owned(&state, &user, &id)?;
    require_ready(&c)?;
    agent_command(&state, cid, AgentCommand::SetConfirmationPolicy { conversation_id: cid, policy: body.policy }).await?;
    Ok((StatusCode::ACCEPTED, Json(PolicyAccepted { accepted: true, policy: body.policy })))
}

/// The LLM profile the conversation uses from its next call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LlmProfileBody {
    /// One of the user's profiles; `null`: the operator's default.
    pub profile: Option<String>,
}

/// The conversation's next LLM calls go to another profile (an `llm_profile` event records the
/// switch).
#[utoipa::path(put, path = "/conversations/{id}/llm-profile", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    request_body = LlmProfileBody, responses((status = 202, body = ProfileAccepted), Refusals, BodyRefusals, Conflict))]
pub async fn set_llm_profile(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<LlmProfileBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (cid, c) = owned(&state, &user, &id)?;
    require_ready(&c)?;
    // In an organization, its rules as at a start (its profiles by name, an enforced one only).
    let profile = match c.start_request.as_ref().and_then(|r| r.org.as_deref()) {
        Some(org) => crate::api::accounts::org_profiles::profile_for_start(&state, &user, org, body.profile.as_deref()).await?,
        None => {
            if let Some(p) = &body.profile {
                crate::domain::user_config::check_profile(&state, &user, "profile", p).await?;
            }
            body.profile.clone()
        }
    };
    agent_command(&state, cid, AgentCommand::SetLlmProfile { conversation_id: cid, profile: profile.clone() }).await?;
    Ok((StatusCode::ACCEPTED, Json(ProfileAccepted { accepted: true, profile })))
}

/// The event whose workspace to go back to.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreBody {
    /// An event of the conversation (the workspace as its newest checkpoint at or before it).
    #[schema(minimum = 1)]
    pub at_seq: u64,
}

/// Puts the conversation's workspace back as it was at event `at_seq` (the newest checkpoint
/// at or before it; one is kept after every action), recorded as a `workspace_restored` event
/// (the log is never rewritten; the workspace as it was just before is kept too, so a restore
/// can be undone by another). 409 `conversation_running` while the agent works in it.
#[utoipa::path(post, path = "/conversations/{id}/restore", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    request_body = RestoreBody, responses((status = 202, body = Accepted), Refusals, BodyRefusals, Conflict))]
pub async fn restore(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<RestoreBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (cid, c) = owned(&state, &user, &id)?;
    require_ready(&c)?;
    require_sandbox(&c)?;
    require_own_workspace(&c)?;
    check_at_seq(&c, body.at_seq)?;
    if matches!(c.execution_status.as_deref(), Some("running" | "waiting_for_confirmation")) {
        return Err(ApiError::conflict(
            "conversation_running",
            "the agent is working in the workspace; interrupt or pause it (or let it finish), then restore",
        ));
    }
    let event_id = agent_command(&state, cid, AgentCommand::Restore { conversation_id: cid, at_seq: body.at_seq }).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted { accepted: true, event_id: Some(event_id) })))
}

/// A question about a conversation.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AskBody {
    /// 1 to 10,000 characters.
    #[schema(min_length = 1, max_length = 10_000)]
    pub question: String,
}

/// The answer to a question.
#[derive(Debug, Serialize, ToSchema)]
pub struct Answer {
    pub answer: String,
}

/// A question about the conversation, answered from its history by one LLM call in an agent
/// runner; nothing is appended and a live run goes on (502 `ask_failed` if the model fails).
#[utoipa::path(post, path = "/conversations/{id}/ask", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    request_body = AskBody, responses((status = 200, body = Answer), Refusals, BodyRefusals, Conflict, BadGateway))]
pub async fn ask(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AskBody>,
) -> Result<Json<Answer>, ApiError> {
    check_text("question", &body.question, 10_000)?;
    let (id, c) = owned(&state, &user, &id)?;
    require_started(&c)?;
    let question = AskRequest { conversation_id: id, question: body.question };
    let patience = std::time::Duration::from_secs(state.config.llm.timeout_secs.saturating_mul(2).max(10));
    let answer: AskAnswer = crate::domain::commands::request(&state, subjects::ask(id), question, patience, "questions").await?;
    match (answer.answer, answer.code) {
        (Some(text), _) => Ok(Json(Answer { answer: text })),
        (None, code) => {
            let message = answer.message.unwrap_or_else(|| "the question could not be answered".into());
            tracing::warn!(code = ?code, %message, "ask failed");
            Err(ApiError::new(StatusCode::BAD_GATEWAY, "ask_failed", format!("{message}; try again")))
        }
    }
}

/// Resumes a paused conversation.
#[utoipa::path(post, path = "/conversations/{id}/resume", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 202, body = Accepted), Refusals, Conflict))]
pub async fn resume(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    control(&state, &user, &id, |conversation_id| AgentCommand::Resume { conversation_id }).await
}
