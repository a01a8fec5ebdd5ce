//! HTTP handlers of `/api/v1`. Reads come from the sled read models; writes become durable
//! commands on the bus (accepted once JetStream has stored them).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use halyard_platform::bus;
use halyard_platform::telemetry;
use halyard_protocol::command::{AgentCommand, AskAnswer, AskRequest, ConversationCommand, TitleCommand};
use halyard_protocol::event::ConfirmationPolicy;
use halyard_protocol::system::Repository;
use halyard_protocol::{ConversationId, Envelope, SandboxId, TaskId, subjects};

use crate::AppState;
use crate::auth::User;
use crate::error::{ApiError, ApiJson};
use crate::projection::new_view;
use crate::store::{self, ConversationView, TaskView, rfc3339};

const MAX_MESSAGE_CHARS: usize = 200_000;
const MAX_TITLE_CHARS: usize = 200;

/// Parses a path id, saying which parameter was wrong.
pub fn parse_id<T: std::str::FromStr>(raw: &str, what: &str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| ApiError::bad_request("invalid_id", format!("`{what}` must be a UUID, got {raw:?}")))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepositoryBody {
    pub url: String,
    #[serde(default)]
    pub branch: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub repository: Option<RepositoryBody>,
    #[serde(default)]
    pub title: Option<String>,
    /// A sandbox spec by name (`GET /sandbox-specs`); the default if absent.
    #[serde(default)]
    pub sandbox_spec: Option<String>,
    /// Limits on the conversation's LLM use (the deployment's defaults if absent).
    #[serde(default)]
    pub max_budget_usd: Option<f64>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// When actions wait for the user's consent: `never` (default), `always` or `risky`.
    #[serde(default)]
    pub confirmation_policy: Option<ConfirmationPolicy>,
    /// One of the user's LLM profiles (`GET /llm-profiles`); the settings' default, else the
    /// operator's, if absent.
    #[serde(default)]
    pub llm_profile: Option<String>,
    /// The user's secrets (`GET /secrets`) the conversation's shell gets, by name; all of them
    /// if absent, none if empty. Every one is masked in what the conversation shows either way.
    #[serde(default)]
    pub secrets: Option<Vec<String>>,
}

/// Checks a sandbox spec's name.
pub fn check_spec(state: &AppState, spec: &str) -> Result<(), ApiError> {
    if state.config.sandbox.spec(spec).is_none() {
        let known: Vec<String> = state.config.sandbox.specs().into_iter().map(|s| s.name).collect();
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("`sandbox_spec` {spec:?} is not one of {known:?} (see GET /api/v1/sandbox-specs)"),
        ));
    }
    Ok(())
}

/// Checks the limits of a conversation's LLM use.
pub fn check_budget(max_budget_usd: Option<f64>, max_tokens: Option<u64>) -> Result<(), ApiError> {
    if max_budget_usd.is_some_and(|b| !b.is_finite() || b <= 0.0) {
        return Err(ApiError::bad_request("invalid_field", "`max_budget_usd` must be a positive number of US dollars"));
    }
    if max_tokens == Some(0) {
        return Err(ApiError::bad_request("invalid_field", "`max_tokens` must be at least 1"));
    }
    Ok(())
}

fn check_text(field: &str, text: &str, max: usize) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("invalid_field", format!("`{field}` must not be empty")));
    }
    if text.chars().count() > max {
        return Err(ApiError::bad_request("invalid_field", format!("`{field}` is longer than {max} characters")));
    }
    Ok(())
}

/// `POST /conversations`: starts a conversation; answers with its start task.
pub async fn start_conversation(
    State(state): State<AppState>,
    User(user): User,
    ApiJson(body): ApiJson<StartBody>,
) -> Result<impl IntoResponse, ApiError> {
    if let Some(m) = &body.message {
        check_text("message", m, MAX_MESSAGE_CHARS)?;
    }
    if let Some(t) = &body.title {
        check_text("title", t, MAX_TITLE_CHARS)?;
        crate::user_store::check_label("title", t)?;
    }
    if let Some(r) = &body.repository {
        check_text("repository.url", &r.url, 4096)?;
        if r.url.trim_start().starts_with('-') {
            return Err(ApiError::bad_request("invalid_field", "`repository.url` must be a git URL or a path"));
        }
        if let Some(b) = &r.branch {
            check_text("repository.branch", b, 255)?;
        }
    }
    if let Some(spec) = &body.sandbox_spec {
        check_spec(&state, spec)?;
    }
    check_budget(body.max_budget_usd, body.max_tokens)?;
    if let Some(p) = &body.llm_profile {
        crate::settings::check_profile(&state, &user, "llm_profile", p).await?;
    }
    if let Some(names) = &body.secrets {
        crate::secrets::check_chosen(&state, &user, names).await?;
    }
    // What the start leaves out, the user's settings say (and the deployment past them).
    let settings = crate::settings::load(&state, &user).await?;
    let budget = (body.max_budget_usd.is_some() || body.max_tokens.is_some())
        .then_some(halyard_protocol::event::Budget { max_budget_usd: body.max_budget_usd, max_tokens: body.max_tokens })
        .or(settings.budget);
    let spec = body.sandbox_spec.clone().or(settings.sandbox_spec).filter(|s| state.config.sandbox.spec(s).is_some());
    crate::sandboxes::check_quota(&state, &user)?;
    let task_id = TaskId::new();
    {
        let mut starting = state.live.starting.lock().unwrap_or_else(|e| e.into_inner());
        let mine = starting.entry(user.0.clone()).or_default();
        let limit = state.config.gateway.max_starting_per_user;
        if limit > 0 && mine.len() >= limit {
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_starting",
                format!("you already have {} conversations starting (limit {limit}); wait for one to be READY", mine.len()),
            );
            e.retry_after = Some(2);
            return Err(e);
        }
        mine.insert(task_id);
    }
    let conversation_id = ConversationId::new();
    let now = halyard_platform::now_ms();
    let cmd = ConversationCommand::Start {
        task_id,
        conversation_id,
        owner: user.clone(),
        message: body.message,
        repository: body.repository.map(|r| Repository { url: r.url, branch: r.branch }),
        title: body.title.clone(),
        created_ms: now,
        spec,
        budget,
        confirmation_policy: body.confirmation_policy.or(settings.confirmation_policy),
        llm_profile: body.llm_profile.clone().or(settings.llm_profile),
        secrets: body.secrets.clone(),
    };
    let mut env = Envelope::new(cmd, now).correlated(task_id.to_string());
    env.trace = Some(telemetry::new_trace());
    if let Err(e) = bus::publish(&state.js, subjects::conversation_command(conversation_id), &env).await {
        state.live.starting.lock().unwrap_or_else(|e| e.into_inner()).entry(user.0.clone()).or_default().remove(&task_id);
        return Err(e.into());
    }
    tracing::info!(%task_id, %conversation_id, user = %user, "conversation start accepted");
    // The command is durable; record what we know now so the next GET finds it. The
    // projection of the lifecycle records overwrites this with the same facts and more.
    let task = TaskView {
        id: task_id.to_string(),
        owner: user.0.clone(),
        conversation_id: conversation_id.to_string(),
        status: "WORKING".into(),
        created_at: rfc3339(now),
        updated_at: rfc3339(now),
        ..Default::default()
    };
    if state.store.task(task_id)?.is_none() {
        state.store.put_json(&store::task_key(task_id), &task)?;
    }
    if state.store.conversation(conversation_id)?.is_none() {
        let mut view = new_view(conversation_id, &user.0, task_id, now);
        view.title_set_by = body.title.as_ref().map(|_| "user".to_owned());
        view.title = body.title;
        state.store.put_json(&store::conv_key(conversation_id), &view)?;
        state
            .store
            .tree()
            .insert(store::owner_key(&user.0, now, conversation_id), &conversation_id.as_bytes()[..])
            .map_err(store::StoreError::from)?;
    }
    Ok((StatusCode::ACCEPTED, Json(task_json(&task))))
}

fn task_json(t: &TaskView) -> Value {
    json!({
        "id": t.id, "conversation_id": t.conversation_id, "status": t.status, "detail": t.detail,
        "sandbox_id": t.sandbox_id, "from_pool": t.from_pool, "created_at": t.created_at, "updated_at": t.updated_at,
    })
}

fn conversation_json(c: &ConversationView) -> Value {
    json!({
        "id": c.id, "title": c.title, "status": c.status, "start_task_id": c.start_task_id,
        "start_task_status": c.start_task_status, "error_detail": c.error_detail,
        "execution_status": c.execution_status, "sandbox_id": c.sandbox_id, "sandbox_status": c.sandbox_status,
        "repository": c.repository, "created_at": c.created_at, "updated_at": c.updated_at,
        "last_event_seq": c.last_event_seq,
        "confirmation_policy": if c.confirmation_policy.is_empty() { "never" } else { c.confirmation_policy.as_str() },
        "metrics": {
            "llm_calls": c.metrics.llm_calls, "prompt_tokens": c.metrics.prompt_tokens,
            "completion_tokens": c.metrics.completion_tokens, "cached_tokens": c.metrics.cached_tokens,
            "cost_usd": (c.metrics.cost_usd * 1e6).round() / 1e6, "latency_ms": c.metrics.latency_ms,
        },
    })
}

/// `GET /start-tasks/{id}`.
pub async fn get_task(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let id: TaskId = parse_id(&id, "id")?;
    match state.store.task(id)? {
        Some(t) if t.owner == user.0 => Ok(Json(task_json(&t))),
        _ => Err(ApiError::not_found("start task")),
    }
}

/// A conversation of this user, or 404.
pub fn owned(state: &AppState, user: &halyard_protocol::UserId, raw: &str) -> Result<(ConversationId, ConversationView), ApiError> {
    let id: ConversationId = parse_id(raw, "id")?;
    match state.store.conversation(id)? {
        Some(c) if c.owner == user.0 => Ok((id, c)),
        _ => Err(ApiError::not_found("conversation")),
    }
}

/// The sandbox of the user's conversation `id`, which must be running for what the caller
/// means `to` do (in words, for the error).
pub fn running_sandbox(
    state: &AppState,
    user: &halyard_protocol::UserId,
    id: &str,
    to: &str,
) -> Result<(SandboxId, store::SandboxView), ApiError> {
    let (_, c) = owned(state, user, id)?;
    let sandbox_id: SandboxId = match &c.sandbox_id {
        Some(s) => parse_id(s, "sandbox_id")?,
        None => return Err(ApiError::conflict("conversation_not_ready", "the conversation has no sandbox yet; wait until it is READY")),
    };
    let sandbox = state.store.sandbox(sandbox_id)?.ok_or_else(|| ApiError::not_found("sandbox"))?;
    if sandbox.status != "RUNNING" {
        return Err(ApiError::conflict(
            "sandbox_not_running",
            format!("the conversation's sandbox is {}; resume the conversation to {to}", sandbox.status),
        ));
    }
    Ok((sandbox_id, sandbox))
}

#[derive(Debug, Deserialize)]
pub struct PageQuery {
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ConversationQuery {
    // Not `#[serde(flatten)]` of a `PageQuery`: flattened query fields arrive as strings and
    // `limit` would no longer parse as a number.
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub cursor: Option<String>,
    /// Words the title contains (any case).
    #[serde(default)]
    pub q: Option<String>,
    /// A start status (`STARTING`, `READY`, `ERROR`) or an execution status (`running`, ...).
    #[serde(default)]
    pub status: Option<String>,
}

/// `GET /conversations`: newest first; `q` searches titles, `status` filters; `count` is how
/// many match in all.
pub async fn list_conversations(
    State(state): State<AppState>,
    User(user): User,
    query: Result<Query<ConversationQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let (limit, cursor) = page_params(&PageQuery { limit: q.limit, cursor: q.cursor.clone() })?;
    let words: Vec<String> = q.q.as_deref().unwrap_or_default().split_whitespace().map(str::to_lowercase).collect();
    let status = q.status.as_deref().map(str::trim).filter(|s| !s.is_empty());
    if let Some(s) = status {
        const KNOWN: &[&str] =
            &["STARTING", "READY", "ERROR", "idle", "running", "paused", "finished", "error", "stuck", "waiting_for_confirmation"];
        if !KNOWN.contains(&s) {
            return Err(ApiError::bad_request("invalid_query", format!("`status` must be one of {}", KNOWN.join(", "))));
        }
    }
    let keep = |c: &ConversationView| {
        let title = c.title.as_deref().unwrap_or_default().to_lowercase();
        words.iter().all(|w| title.contains(w.as_str())) && status.is_none_or(|s| c.status == s || c.execution_status.as_deref() == Some(s))
    };
    let store::Matching { items, next, count } = state.store.conversations_matching(&user.0, cursor.as_deref(), limit, keep)?;
    Ok(Json(json!({
        "items": items.iter().map(conversation_json).collect::<Vec<_>>(),
        "next_cursor": next.map(|n| halyard_platform::keys::to_hex(&n)),
        "count": count,
    })))
}

/// `limit` (1..=100, default 20) and the decoded `cursor` of a page request.
pub fn page_params(q: &PageQuery) -> Result<(usize, Option<Vec<u8>>), ApiError> {
    let limit = q.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "`limit` must be between 1 and 100"));
    }
    let cursor = match &q.cursor {
        Some(c) => Some(from_hex(c).ok_or_else(|| ApiError::bad_request("invalid_query", "`cursor` is not one this API gave out"))?),
        None => None,
    };
    Ok((limit, cursor))
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// `GET /conversations/{id}`.
pub async fn get_conversation(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let (_, c) = owned(&state, &user, &id)?;
    Ok(Json(conversation_json(&c)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageBody {
    pub text: String,
}

async fn agent_command(state: &AppState, id: ConversationId, cmd: AgentCommand) -> Result<String, ApiError> {
    let mut env = Envelope::new(cmd, halyard_platform::now_ms());
    env.trace = Some(telemetry::new_trace());
    bus::publish(&state.js, subjects::agent_command(id), &env).await?;
    Ok(env.id.to_string())
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

/// `POST /conversations/{id}/messages`. Accepted while starting too: it is queued.
pub async fn send_message(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<MessageBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (id, c) = owned(&state, &user, &id)?;
    check_text("text", &body.text, MAX_MESSAGE_CHARS)?;
    require_started(&c)?;
    require_sandbox(&c)?;
    let event_id = agent_command(&state, id, AgentCommand::UserMessage { conversation_id: id, text: body.text }).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true, "event_id": event_id}))))
}

/// A conversation whose sandbox was not deleted: the agent could not go on without its
/// workspace, and the command would wait for a sandbox that will never answer.
fn require_sandbox(c: &ConversationView) -> Result<(), ApiError> {
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
fn require_ready(c: &ConversationView) -> Result<(), ApiError> {
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
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (id, c) = owned(state, user, id)?;
    require_ready(&c)?;
    require_sandbox(&c)?;
    agent_command(state, id, make(id)).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true}))))
}

/// `POST /conversations/{id}/pause`.
pub async fn pause(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    control(&state, &user, &id, |conversation_id| AgentCommand::Pause { conversation_id }).await
}

/// `POST /conversations/{id}/interrupt`: stops the running command now.
pub async fn interrupt(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    control(&state, &user, &id, |conversation_id| AgentCommand::Interrupt { conversation_id }).await
}

/// `POST /conversations/{id}/confirm`: the actions waiting for confirmation run.
pub async fn confirm(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    control(&state, &user, &id, |conversation_id| AgentCommand::Confirm { conversation_id }).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RejectBody {
    /// Why; the model reads it as the actions' result.
    pub reason: String,
}

/// `POST /conversations/{id}/reject`: the actions waiting for confirmation do not run; the
/// agent is told why and goes on.
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
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true}))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyBody {
    pub policy: ConfirmationPolicy,
}

/// `PUT /conversations/{id}/confirmation-policy`: changes when actions wait for consent.
pub async fn set_confirmation_policy(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PolicyBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (cid, c) = owned(&state, &user, &id)?;
    require_ready(&c)?;
    agent_command(&state, cid, AgentCommand::SetConfirmationPolicy { conversation_id: cid, policy: body.policy }).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true, "policy": body.policy.as_str()}))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmProfileBody {
    /// One of the user's profiles; `null`: the operator's default.
    pub profile: Option<String>,
}

/// `PUT /conversations/{id}/llm-profile`: the conversation's next LLM calls go to another
/// profile (an `llm_profile` event records the switch).
pub async fn set_llm_profile(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<LlmProfileBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (cid, c) = owned(&state, &user, &id)?;
    require_ready(&c)?;
    if let Some(p) = &body.profile {
        crate::settings::check_profile(&state, &user, "profile", p).await?;
    }
    agent_command(&state, cid, AgentCommand::SetLlmProfile { conversation_id: cid, profile: body.profile.clone() }).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true, "profile": body.profile}))))
}

/// `GET /skills`: the deployment's global skills (a conversation's own, repository skills
/// included, are in its `conversation_started` event).
pub async fn list_skills(State(state): State<AppState>, User(_user): User) -> Json<Value> {
    let items: Vec<Value> = state
        .skills
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "kind": s.kind.as_str(),
                "description": s.description,
                "triggers": s.triggers,
            })
        })
        .collect();
    Json(json!({ "items": items }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskBody {
    pub question: String,
}

/// `POST /conversations/{id}/ask`: a question about the conversation, answered from its history
/// by one LLM call in an agent runner; nothing is appended and a live run goes on.
pub async fn ask(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AskBody>,
) -> Result<Json<Value>, ApiError> {
    check_text("question", &body.question, 10_000)?;
    let (id, c) = owned(&state, &user, &id)?;
    require_started(&c)?;
    let question = Envelope::new(AskRequest { conversation_id: id, question: body.question }, halyard_platform::now_ms());
    let bytes = halyard_protocol::encode(&question).map_err(ApiError::internal)?;
    let patience = std::time::Duration::from_secs(state.config.llm.timeout_secs.saturating_mul(2).max(10));
    let reply = tokio::time::timeout(patience, state.nats.request(subjects::ask(id), bytes.into()))
        .await
        .map_err(|_| ApiError::unavailable("no agent runner answered in time; try again"))?
        .map_err(|e| {
            tracing::warn!(error = %e, "ask request failed");
            ApiError::unavailable("no agent runner is answering questions now; try again")
        })?;
    let answer = halyard_protocol::decode::<AskAnswer>(&reply.payload).map_err(ApiError::internal)?.payload;
    match (answer.answer, answer.code) {
        (Some(text), _) => Ok(Json(json!({ "answer": text }))),
        (None, code) => {
            let message = answer.message.unwrap_or_else(|| "the question could not be answered".into());
            tracing::warn!(code = ?code, %message, "ask failed");
            Err(ApiError::new(StatusCode::BAD_GATEWAY, "ask_failed", format!("{message}; try again")))
        }
    }
}

/// `POST /conversations/{id}/resume`.
pub async fn resume(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    control(&state, &user, &id, |conversation_id| AgentCommand::Resume { conversation_id }).await
}

/// `DELETE /conversations/{id}`.
pub async fn delete(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (id, _) = owned(&state, &user, &id)?;
    let mut env = Envelope::new(ConversationCommand::Delete { conversation_id: id, owner: user.clone() }, halyard_platform::now_ms());
    env.trace = Some(telemetry::new_trace());
    bus::publish(&state.js, subjects::conversation_command(id), &env).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true}))))
}

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    #[serde(default)]
    pub after_seq: Option<u64>,
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `GET /conversations/{id}/events`. The page is written around the events' JSON as rendered
/// once (the same text the WebSocket sends), not parsed back and re-serialized.
pub async fn list_events(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    let Query(q) = query?;
    let (id, _) = owned(&state, &user, &id)?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "`limit` must be between 1 and 1000"));
    }
    let after = q.after_seq.unwrap_or(0);
    let events = crate::events::read(&state.js, &state.store, id, after, limit).await?;
    let has_more = events.len() == limit;
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
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchConversation {
    pub title: String,
}

/// `PATCH /conversations/{id}`: the user names the conversation; this wins over a generated
/// title even if that arrives later.
pub async fn patch_conversation(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchConversation>,
) -> Result<impl IntoResponse, ApiError> {
    let (id, _) = owned(&state, &user, &id)?;
    check_text("title", &body.title, MAX_TITLE_CHARS)?;
    crate::user_store::check_label("title", &body.title)?;
    let mut env =
        Envelope::new(TitleCommand::SetByUser { conversation_id: id, title: body.title.trim().to_owned() }, halyard_platform::now_ms());
    env.trace = Some(telemetry::new_trace());
    bus::publish(&state.js, subjects::title_command(id), &env).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true}))))
}
