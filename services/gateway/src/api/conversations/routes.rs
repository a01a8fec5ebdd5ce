//! HTTP handlers of `/api/v1`. Reads come from the sled read models; writes become durable
//! commands on the bus (accepted once JetStream has stored them).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use halyard_platform::bus;
use halyard_platform::telemetry;
use halyard_protocol::command::{AgentCommand, AskAnswer, AskRequest, ConversationCommand, TitleCommand};
use halyard_protocol::event::ConfirmationPolicy;
use halyard_protocol::{ConversationId, Envelope, TaskId, subjects};

use crate::auth::User;
use crate::auth::access::owned;
use crate::domain::commands::agent_command;
use crate::http::api_doc::{Accepted, BadGateway, BodyRefusals, Conflict, Count, Refusals};
use crate::http::checks::parse_id;
use crate::http::error::{ApiError, ApiJson};
use crate::http::paging::{PageQuery, page_params};
use crate::read_model::store::{self, ConversationView, TaskView};
use crate::state::AppState;

pub(crate) const MAX_MESSAGE_CHARS: usize = 200_000;
pub(crate) const MAX_TITLE_CHARS: usize = 200;

pub(crate) fn check_text(field: &str, text: &str, max: usize) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("invalid_field", format!("`{field}` must not be empty")));
    }
    if text.chars().count() > max {
        return Err(ApiError::bad_request("invalid_field", format!("`{field}` is longer than {max} characters")));
    }
    Ok(())
}

/// Refuses a title that is empty, too long, or holds control characters.
pub(crate) fn check_title(title: &str) -> Result<(), ApiError> {
    check_text("title", title, MAX_TITLE_CHARS)?;
    crate::http::checks::check_label("title", title)
}

/// A start task: how a conversation's start goes.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = StartTask)]
pub struct StartTask {
    pub id: String,
    pub conversation_id: String,
    /// `WORKING`, `WAITING_FOR_SANDBOX`, `PREPARING_REPOSITORY`, `STARTING_AGENT`, `READY` or `ERROR`.
    pub status: String,
    pub detail: Option<String>,
    pub sandbox_id: Option<String>,
    /// The sandbox came ready-made from the warm pool.
    pub from_pool: bool,
    pub created_at: String,
    pub updated_at: String,
}

pub(crate) fn task_json(t: &TaskView) -> StartTask {
    StartTask {
        id: t.id.clone(),
        conversation_id: t.conversation_id.clone(),
        status: t.status.clone(),
        detail: t.detail.clone(),
        sandbox_id: t.sandbox_id.clone(),
        from_pool: t.from_pool,
        created_at: t.created_at.clone(),
        updated_at: t.updated_at.clone(),
    }
}

/// The one status a person reads, and its detail: `starting`, `start_failed`, the agent's
/// execution status (`idle`, `running`, `paused`, `finished`, `error`, `stuck`,
/// `waiting_for_confirmation`), or `sandbox_deleted`. `status`, `start_task_status`,
/// `execution_status` and `sandbox_status` are what it is made of.
pub(crate) fn state_of(c: &ConversationView) -> (&str, Option<String>) {
    match (c.status.as_str(), c.execution_status.as_deref()) {
        ("ERROR", _) => ("start_failed", c.error_detail.clone()),
        ("READY", _) if c.sandbox_status.as_deref() == Some("DELETED") => {
            ("sandbox_deleted", Some("the conversation's sandbox was deleted; start a new conversation to go on".into()))
        }
        ("READY", Some(s @ ("error" | "stuck"))) => (s, c.agent_error.clone().or_else(|| c.execution_reason.clone())),
        ("READY", Some(s)) => (s, c.execution_reason.clone()),
        _ => ("starting", None),
    }
}

/// Every value of [`state_of`].
pub(crate) const STATES: &[&str] =
    &["starting", "start_failed", "idle", "running", "paused", "finished", "error", "stuck", "waiting_for_confirmation", "sandbox_deleted"];

/// A conversation as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Conversation {
    pub id: String,
    /// Who started it (yourself, unless an organization you are in reads it).
    pub owner: String,
    /// `private`: its owner's alone; `org`: the members of `org` read it too.
    pub visibility: halyard_protocol::org::Visibility,
    pub title: Option<String>,
    /// The message it was started with.
    pub message: Option<String>,
    /// The one status a person reads: `starting`, `start_failed`, `idle`, `running`, `paused`,
    /// `finished`, `error`, `stuck`, `waiting_for_confirmation` or `sandbox_deleted`.
    pub state: String,
    /// Why, in words, where there is something to say.
    pub state_detail: Option<String>,
    /// Technical: `STARTING`, `READY` or `ERROR` (the start task's outcome).
    pub status: String,
    pub start_task_id: String,
    /// Technical: the start task's step.
    pub start_task_status: String,
    pub error_detail: Option<String>,
    /// Technical: the agent's execution status.
    pub execution_status: Option<String>,
    pub sandbox_id: Option<String>,
    /// Technical: the sandbox's status.
    pub sandbox_status: Option<String>,
    /// `{"url", "branch"}` when it was started on a repository.
    pub repository: Option<Value>,
    pub created_at: String,
    pub updated_at: String,
    pub last_event_seq: u64,
    /// When actions wait for the user's consent: `never`, `always` or `risky`.
    pub confirmation_policy: String,
    /// The agent that works in it (`GET /agents`): `halyard`, or a third-party agent's name.
    pub agent: String,
    pub metrics: Metrics,
    /// A fork: the conversation and event it was forked from.
    pub forked_from: Option<ForkedFrom>,
    /// Labels the owner finds it by.
    pub tags: BTreeMap<String, String>,
    /// The organization it was started in (its settings applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// The pull requests the agent opened with Halyard's own tool, in order.
    pub pull_requests: Vec<store::PullRequest>,
    /// Where the agent's browser is and its latest screenshot (absent: it has not browsed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub browser: Option<store::BrowserView>,
    /// A helper: the conversation whose agent started it (with its `delegate` tool), whose
    /// sandbox and workspace it shares.
    #[schema(format = Uuid)]
    pub parent_conversation_id: Option<String>,
    /// The helpers its agent started, in order.
    pub sub_conversation_ids: Vec<String>,
}

/// Where a fork comes from.
#[derive(Debug, Serialize, ToSchema)]
pub struct ForkedFrom {
    pub conversation_id: String,
    /// The last of that conversation's events the fork kept.
    pub at_seq: u64,
}

/// What the conversation's LLM calls used in all.
#[derive(Debug, Serialize, ToSchema)]
pub struct Metrics {
    pub llm_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// The calls whose model has a price, in US dollars.
    pub cost_usd: f64,
    pub latency_ms: u64,
    /// The same per model that answered (a profile's fallbacks answer with their own).
    pub by_model: std::collections::BTreeMap<String, ModelMetrics>,
}

/// What one model's calls used.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelMetrics {
    pub llm_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    pub cost_usd: f64,
}

/// A page of conversations, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationPage {
    pub items: Vec<Conversation>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
    /// How many match in all.
    pub count: usize,
}

pub(crate) fn conversation_json(c: &ConversationView) -> Conversation {
    let (state, state_detail) = state_of(c);
    Conversation {
        id: c.id.clone(),
        owner: c.owner.clone(),
        visibility: c.visibility,
        title: c.title.clone(),
        message: c.first_message.clone(),
        state: state.to_owned(),
        state_detail,
        status: c.status.clone(),
        start_task_id: c.start_task_id.clone(),
        start_task_status: c.start_task_status.clone(),
        error_detail: c.error_detail.clone(),
        execution_status: c.execution_status.clone(),
        sandbox_id: c.sandbox_id.clone(),
        sandbox_status: c.sandbox_status.clone(),
        repository: c.repository.clone(),
        created_at: c.created_at.clone(),
        updated_at: c.updated_at.clone(),
        last_event_seq: c.last_event_seq,
        confirmation_policy: if c.confirmation_policy.is_empty() { "never".into() } else { c.confirmation_policy.clone() },
        agent: c.start_request.as_ref().and_then(|r| r.agent.clone()).unwrap_or_else(|| halyard_protocol::agents::HALYARD.into()),
        metrics: Metrics {
            llm_calls: c.metrics.llm_calls,
            prompt_tokens: c.metrics.prompt_tokens,
            completion_tokens: c.metrics.completion_tokens,
            cached_tokens: c.metrics.cached_tokens,
            cost_usd: (c.metrics.cost_usd * 1e6).round() / 1e6,
            latency_ms: c.metrics.latency_ms,
            by_model: c
                .metrics
                .by_model
                .iter()
                .map(|(model, m)| {
                    let per = ModelMetrics {
                        llm_calls: m.llm_calls,
                        prompt_tokens: m.prompt_tokens,
                        completion_tokens: m.completion_tokens,
                        cached_tokens: m.cached_tokens,
                        cost_usd: (m.cost_usd * 1e6).round() / 1e6,
                    };
                    (model.clone(), per)
                })
                .collect(),
        },
        forked_from: c
            .start_request
            .as_ref()
            .and_then(|r| r.fork.as_ref())
            .map(|f| ForkedFrom { conversation_id: f.conversation_id.to_string(), at_seq: f.at_seq }),
        tags: c.tags.clone(),
        org: c.start_request.as_ref().and_then(|r| r.org.clone()),
        pull_requests: c.pull_requests.clone(),
        browser: c.browser.clone(),
        parent_conversation_id: c.parent_conversation_id.clone(),
        sub_conversation_ids: c.sub_conversation_ids.clone(),
    }
}

/// How a conversation's start goes.
#[utoipa::path(get, path = "/start-tasks/{id}", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = StartTask), Refusals))]
pub async fn get_task(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<StartTask>, ApiError> {
    let id: TaskId = parse_id(&id, "id")?;
    match state.store.task(id)? {
        Some(t) if t.owner == user.0 => Ok(Json(task_json(&t))),
        _ => Err(ApiError::not_found("start task")),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConversationQuery {
    // Not `#[serde(flatten)]` of a `PageQuery`: flattened query fields arrive as strings and
    // `limit` would no longer parse as a number.
    /// How many (1 to 100, 20 by default).
    #[serde(default)]
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<usize>,
    /// The `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Words the title or the first message contains (any case).
    #[serde(default)]
    pub q: Option<String>,
    /// A start status (`STARTING`, `READY`, `ERROR`) or an execution status (`running`, ...).
    #[serde(default)]
    pub status: Option<String>,
    /// One of the `state` values (`start_failed`, `running`, ...).
    #[serde(default)]
    pub state: Option<String>,
    /// `key:value` (the conversations tagged so) or `key` (those with that tag at all).
    #[serde(default)]
    pub tag: Option<String>,
}

impl ConversationQuery {
    /// What `q`, `status`, `state` and `tag` keep; an unknown status or state is refused in words.
    fn filter(&self) -> Result<impl Fn(&ConversationView) -> bool + use<>, ApiError> {
        let words: Vec<String> = self.q.as_deref().unwrap_or_default().split_whitespace().map(str::to_lowercase).collect();
        let status = self.status.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
        if let Some(s) = &status {
            const KNOWN: &[&str] =
                &["STARTING", "READY", "ERROR", "idle", "running", "paused", "finished", "error", "stuck", "waiting_for_confirmation"];
            if !KNOWN.contains(&s.as_str()) {
                return Err(ApiError::bad_request("invalid_query", format!("`status` must be one of {}", KNOWN.join(", "))));
            }
        }
        let wanted = self.state.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
        if let Some(s) = &wanted {
            if !STATES.contains(&s.as_str()) {
                return Err(ApiError::bad_request("invalid_query", format!("`state` must be one of {}", STATES.join(", "))));
            }
        }
        let tag = self.tag.as_deref().map(str::trim).filter(|t| !t.is_empty()).map(|t| match t.split_once(':') {
            Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
            None => (t.to_owned(), None),
        });
        if let Some((k, _)) = &tag {
            crate::http::checks::check_tag(k, None).map_err(|e| ApiError::bad_request("invalid_query", e.message))?;
        }
        Ok(move |c: &ConversationView| {
            let title = c.title.as_deref().unwrap_or_default().to_lowercase();
            let message = c.first_message.as_deref().unwrap_or_default().to_lowercase();
            words.iter().all(|w| title.contains(w.as_str()) || message.contains(w.as_str()))
                && status.as_deref().is_none_or(|s| c.status == s || c.execution_status.as_deref() == Some(s))
                && wanted.as_deref().is_none_or(|s| state_of(c).0 == s)
                && tag.as_ref().is_none_or(|(k, v)| c.tags.get(k).is_some_and(|have| v.as_ref().is_none_or(|v| v == have)))
        })
    }
}

/// The user's conversations, newest first; `q` searches titles and first messages, `state` (or
/// the technical `status`) filters; `count` is how many match in all.
#[utoipa::path(get, path = "/conversations", tag = "conversations", params(ConversationQuery),
    responses((status = 200, body = ConversationPage), Refusals))]
pub async fn list_conversations(
    State(state): State<AppState>,
    User(user): User,
    query: Result<Query<ConversationQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ConversationPage>, ApiError> {
    let Query(q) = query?;
    let (limit, cursor) = page_params(&PageQuery { limit: q.limit, cursor: q.cursor.clone() })?;
    let keep = q.filter()?;
    let store::Matching { items, next, count } = state.store.conversations_matching(&user.0, cursor.as_deref(), limit, keep)?;
    Ok(Json(ConversationPage {
        items: items.iter().map(conversation_json).collect(),
        next_cursor: next.map(|n| halyard_platform::keys::to_hex(&n)),
        count,
    }))
}

/// How many of the user's conversations the same filters keep.
#[utoipa::path(get, path = "/conversations/count", tag = "conversations", params(ConversationQuery),
    responses((status = 200, body = Count), Refusals))]
pub async fn count_conversations(
    State(state): State<AppState>,
    User(user): User,
    query: Result<Query<ConversationQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Count>, ApiError> {
    let Query(q) = query?;
    let keep = q.filter()?;
    let store::Matching { count, .. } = state.store.conversations_matching(&user.0, None, 1, keep)?;
    Ok(Json(Count { count }))
}

/// One conversation of the user's.
#[utoipa::path(get, path = "/conversations/{id}", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = Conversation), Refusals))]
pub async fn get_conversation(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
) -> Result<Json<Conversation>, ApiError> {
    let (_, c) = crate::auth::access::readable(&state, &user, &id)?;
    Ok(Json(conversation_json(&c)))
}

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

fn require_started(c: &ConversationView) -> Result<(), ApiError> {
    match c.status.as_str() {
        "ERROR" => Err(ApiError::conflict(
            "conversation_failed",
            format!("the conversation failed to start ({}); start a new one", c.error_detail.as_deref().unwrap_or("no detail")),
        )),
        _ => Ok(()),
    }
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

/// A conversation whose sandbox was not deleted: the agent could not go on without its
/// workspace, and the command would wait for a sandbox that will never answer.
pub(crate) fn require_sandbox(c: &ConversationView) -> Result<(), ApiError> {
    if c.sandbox_status.as_deref() == Some("DELETED") {
        let sandbox = c.sandbox_id.as_deref().unwrap_or_default();
        return Err(ApiError::conflict(
            "sandbox_deleted",
            format!(
                "this conversation's sandbox {sandbox} was deleted, and its workspace with it, so the conversation cannot go on; \
                 start a new conversation (POST /api/v1/conversations); this one's events stay readable (GET \
                 /api/v1/conversations/{{id}}/events)"
            ),
        ));
    }
    Ok(())
}

/// A conversation that has finished starting.
/// Restoring and forking go by a conversation's checkpoints, which a helper has none of: its
/// workspace is its parent's, whose checkpoints hold what the helper did.
pub(crate) fn require_own_workspace(c: &ConversationView) -> Result<(), ApiError> {
    if let Some(parent) = &c.parent_conversation_id {
        return Err(ApiError::conflict(
            "helper_conversation",
            format!(
                "this conversation is a helper working in the workspace of conversation {parent}, which keeps the checkpoints: \
                 restore or fork that one"
            ),
        ));
    }
    Ok(())
}

pub(crate) fn require_ready(c: &ConversationView) -> Result<(), ApiError> {
    require_started(c)?;
    if c.status != "READY" {
        return Err(ApiError::conflict(
            "conversation_not_ready",
            "the conversation is still starting; pause, resume, interrupt, confirm or reject once it is READY",
        ));
    }
    Ok(())
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

/// Refuses an `at_seq` that is no event of the conversation.
pub(crate) fn check_at_seq(c: &ConversationView, at_seq: u64) -> Result<(), ApiError> {
    if at_seq == 0 || at_seq > c.last_event_seq {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("`at_seq` must be an event of this conversation, 1 to {}", c.last_event_seq),
        ));
    }
    Ok(())
}

/// A skill of the deployment's.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Skill)]
pub struct SkillView {
    pub name: String,
    /// `always` (in every conversation's instructions) or `triggered` (by words in a message).
    pub kind: String,
    pub description: Option<String>,
    pub triggers: Vec<String>,
}

/// The deployment's skills.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkillList {
    pub items: Vec<SkillView>,
}

/// The deployment's global skills (a conversation's own, repository skills included, are in its
/// `conversation_started` event).
#[utoipa::path(get, path = "/skills", tag = "conversations", responses((status = 200, body = SkillList), Refusals))]
pub async fn list_skills(State(state): State<AppState>, User(_user): User) -> Json<SkillList> {
    let items = state
        .skills
        .iter()
        .map(|s| SkillView {
            name: s.name.clone(),
            kind: s.kind.as_str().to_owned(),
            description: s.description.clone(),
            triggers: s.triggers.clone(),
        })
        .collect();
    Json(SkillList { items })
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

/// Deletes a conversation: its events, its sandbox and its workspace go.
#[utoipa::path(delete, path = "/conversations/{id}", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 202, body = Accepted), Refusals))]
pub async fn delete(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (id, _) = crate::auth::access::owned_even_if_left(&state, &user, &id)?;
    let mut env = Envelope::new(ConversationCommand::Delete { conversation_id: id, owner: user.clone() }, halyard_platform::now_ms());
    env.trace = Some(telemetry::new_trace());
    bus::publish(&state.js, subjects::conversation_command(id), &env).await?;
    // Its share link goes with it (a link to a deleted conversation opens nothing anyway).
    if let Err(e) = state.user_kv.purge(subjects::share_key(id)).await {
        tracing::warn!(conversation_id = %id, error = %e, "cannot remove a deleted conversation's share link");
    }
    Ok((StatusCode::ACCEPTED, Json(Accepted::yes())))
}

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

/// What changes in a conversation: its title, its tags, or both.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchConversation {
    /// 1 to 200 characters, one line.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
    pub title: Option<String>,
    /// Tags to set, each to its value, or to remove, where the value is `null` (a JSON merge
    /// patch: tags not named stay as they are).
    #[serde(default)]
    pub tags: Option<BTreeMap<String, Option<String>>>,
    /// `org`: the members of the organization it was started in read it too (live, read-only);
    /// `private`: yours alone again.
    #[serde(default)]
    pub visibility: Option<halyard_protocol::org::Visibility>,
}

/// The user names the conversation (this wins over a generated title even if that arrives
/// later), or changes its tags.
#[utoipa::path(patch, path = "/conversations/{id}", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    request_body = PatchConversation, responses((status = 202, body = Accepted), Refusals, BodyRefusals))]
pub async fn patch_conversation(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchConversation>,
) -> Result<impl IntoResponse, ApiError> {
    let (id, view) = owned(&state, &user, &id)?;
    if body.title.is_none() && body.tags.is_none() && body.visibility.is_none() {
        return Err(ApiError::bad_request("invalid_field", "say what changes: `title`, `tags` or `visibility`"));
    }
    let in_org = view.start_request.as_ref().is_some_and(|r| r.org.is_some());
    if body.visibility == Some(halyard_protocol::org::Visibility::Org) && !in_org {
        return Err(ApiError::bad_request(
            "invalid_field",
            "`visibility: org` is for a conversation started in an organization (`org` at its start); share this one with a link instead (POST /api/v1/conversations/{id}/share)",
        ));
    }
    if let Some(title) = &body.title {
        check_title(title)?;
    }
    if let Some(tags) = &body.tags {
        for (k, v) in tags {
            crate::http::checks::check_tag(k, v.as_deref())?;
        }
        let mut after = view.tags.clone();
        for (k, v) in tags {
            match v {
                Some(v) => after.insert(k.clone(), v.clone()),
                None => after.remove(k),
            };
        }
        crate::http::checks::check_tag_count(after.len())?;
    }
    if let Some(title) = body.title {
        let mut env =
            Envelope::new(TitleCommand::SetByUser { conversation_id: id, title: title.trim().to_owned() }, halyard_platform::now_ms());
        env.trace = Some(telemetry::new_trace());
        bus::publish(&state.js, subjects::title_command(id), &env).await?;
    }
    if let Some(tags) = body.tags {
        let mut env = Envelope::new(ConversationCommand::SetTags { conversation_id: id, tags }, halyard_platform::now_ms());
        env.trace = Some(telemetry::new_trace());
        bus::publish(&state.js, subjects::conversation_command(id), &env).await?;
    }
    if let Some(visibility) = body.visibility {
        let mut env = Envelope::new(ConversationCommand::SetVisibility { conversation_id: id, visibility }, halyard_platform::now_ms());
        env.trace = Some(telemetry::new_trace());
        bus::publish(&state.js, subjects::conversation_command(id), &env).await?;
    }
    Ok((StatusCode::ACCEPTED, Json(Accepted::yes())))
}
