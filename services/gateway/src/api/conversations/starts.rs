//! Starting a conversation (`POST /conversations`), trying a failed start again (`POST
//! /conversations/{id}/retry`) and forking one at an event (`POST /conversations/{id}/fork`).
//! Each becomes a `ConversationCommand::Start` for the conversations service; a retry repeats
//! what the failed start asked for, which the conversation's creation record keeps
//! ([`StartRequest`]), a fork included.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use halyard_platform::bus;
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::event::ConfirmationPolicy;
use halyard_protocol::queue::QueueTerms;
use halyard_protocol::system::{ForkSource, Repository, StartRequest};
use halyard_protocol::{ConversationId, Envelope, SandboxId, subjects};

use crate::api::batches::BatchView;
use crate::api::conversations::checks::{
    MAX_MESSAGE_CHARS, MAX_TITLE_CHARS, check_at_seq, check_text, check_title, require_own_workspace, require_ready, require_sandbox,
};
use crate::api::conversations::views::{StartTask, task_json};
use crate::auth::User;
use crate::auth::access::owned;
use crate::domain::starts::{Start, begin};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

/// The repository cloned into the workspace.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepositoryBody {
    /// A git URL (of one of the user's git providers' hosts, for a private one).
    pub url: String,
    #[serde(default)]
    pub branch: Option<String>,
}

/// A new conversation.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = StartConversation)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// The first message to the agent (up to 200,000 characters).
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
    #[schema(exclusive_minimum = 0)]
    pub max_budget_usd: Option<f64>,
    #[serde(default)]
    #[schema(minimum = 1)]
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
    /// Labels to find the conversation by (`GET /conversations?tag=key:value`): up to 20, keys
    /// of letters, digits, `_`, `-`, `.` or `/`, values of one line.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// An organization you are in: its settings apply (its default LLM profile, or only it when
    /// enforced; `llm_profile` may name one of its profiles).
    #[serde(default)]
    pub org: Option<String>,
    /// `private` (default): yours only; `org`: the members of `org` read it too, live, and
    /// nobody but you acts on it.
    #[serde(default)]
    pub visibility: halyard_protocol::org::Visibility,
    /// The agent that works in it (`GET /agents`): `halyard` (Halyard's own), `claude-code`,
    /// `codex`, `gemini`, `opencode`, an agent the deployment registered, or (in an
    /// organization's conversation) `@<org>/<name>`; the settings' default, else `halyard`, if
    /// absent.
    #[serde(default)]
    pub agent: Option<String>,
    /// How long the start may wait in the start queue for a sandbox host with room (1 to
    /// 86,400 seconds); the deployment's `HALYARD_START_QUEUE_DEADLINE_SECS` (30 minutes unless
    /// set) if absent. Past it the start ends in `ERROR`, saying so.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 86400)]
    pub queue_deadline_secs: Option<u64>,
    /// The environment its sandbox is set up with (`GET /environments`): yours by `name`, the
    /// organization's (in its conversations) as `@<org>/<name>`, the deployment's as `/<name>`;
    /// absent: the organization's default, else the deployment's, else none.
    #[serde(default)]
    pub environment: Option<String>,
    /// A JSON Schema the agent's result must match: it finishes with a `result` (an argument
    /// of its `finish` tool) that is checked against it, and is told why and tries again when
    /// it does not; the result is the conversation's `result` and a `result` event.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub result_schema: Option<serde_json::Value>,
    /// Checks run when the agent finishes: `{"command": "..."}` (in the workspace; passes when
    /// it exits 0) or `{"judge": {"rubric": "...", "llm_profile"?, "threshold"?}}` (an LLM scores
    /// the work 0 to 1). A failing check sends the agent back with what it said, up to
    /// `max_verify_attempts` times; each check is a `verification` event.
    #[serde(default)]
    pub verify: Vec<halyard_protocol::event::Check>,
    /// How many times the agent may finish and be checked (1 to 10; absent: 3).
    #[serde(default)]
    pub max_verify_attempts: Option<u32>,
    /// Best of N (2 to 8; absent: 1): the start runs N times side by side, each its own
    /// conversation and sandbox, each checked; the best (passed first, then the highest score,
    /// then the fewest tokens) is the group's result and the others stay, read-only. The answer
    /// is then 201 with the group (a batch of one item: `GET /batches/{id}`) instead of a start
    /// task.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 8)]
    pub attempts: Option<u32>,
    /// One of your templates (`GET /templates`): what this body leaves out (`message`, `title`,
    /// `repository`, `environment`, `sandbox_spec`, `llm_profile`) is the template's, its
    /// `{{parameters}}` filled from `parameters`; its checks apply unless the body names its own.
    #[serde(default)]
    pub template: Option<String>,
    /// The template's parameters' values, by name.
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
}

impl StartBody {
    /// The body with what it leaves out taken from `user`'s template, if it names one.
    async fn with_template(mut self, state: &AppState, user: &halyard_protocol::UserId) -> Result<Self, ApiError> {
        let Some(name) = self.template.take() else {
            if !self.parameters.is_empty() {
                return Err(ApiError::bad_request("invalid_field", "`parameters` go with `template`"));
            }
            return Ok(self);
        };
        let template = crate::api::settings::templates::template_of(state, user, &name).await?;
        let item = template.item(&self.parameters).map_err(|e| ApiError::bad_request("invalid_field", format!("`parameters`: {e}")))?;
        let checks = template.checks;
        self.message = self.message.or(Some(item.message));
        self.title = self.title.or(item.title);
        self.repository = self.repository.or(item.repository.map(|r| RepositoryBody { url: r.url, branch: r.branch }));
        self.environment = self.environment.or(item.environment);
        self.sandbox_spec = self.sandbox_spec.or(item.sandbox_spec);
        self.llm_profile = self.llm_profile.or(item.llm_profile);
        if let Some(c) = checks.filter(|_| self.verify.is_empty() && self.result_schema.is_none()) {
            self.result_schema = c.result_schema;
            self.verify = c.verify;
            self.max_verify_attempts = self.max_verify_attempts.or(c.max_verify_attempts);
        }
        Ok(self)
    }
}

/// Starts a conversation: answers 202 with its start task (follow it with `GET
/// /api/v1/start-tasks/{id}`). When no sandbox host has room, or the user or the deployment
/// runs as many sandboxes as they may, the start waits its turn (`QUEUED`, with its `position`)
/// and goes on by itself; 429 `too_many_starting` when the user already has as many starts
/// under way as they may. With `attempts` above 1: 201 with the group of attempts.
#[utoipa::path(post, path = "/conversations", tag = "conversations", request_body = StartBody,
    responses((status = 202, body = StartTask), (status = 201, body = BatchView, description = "With `attempts`: the group"),
        Refusals, BodyRefusals))]
pub async fn start_conversation(
    State(state): State<AppState>,
    User(user): User,
    ApiJson(body): ApiJson<StartBody>,
) -> Result<Response, ApiError> {
    let body = body.with_template(&state, &user).await?;
    if body.attempts.is_some_and(|n| n != 1) {
        return start_attempts(&state, &user, body).await;
    }
    if let Some(m) = &body.message {
        check_text("message", m, MAX_MESSAGE_CHARS)?;
    }
    if let Some(t) = &body.title {
        check_title(t)?;
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
        crate::domain::sandbox::check_spec(&state, spec)?;
    }
    crate::http::checks::check_budget(body.max_budget_usd, body.max_tokens)?;
    if body.queue_deadline_secs.is_some_and(|s| !(1..=86_400).contains(&s)) {
        return Err(ApiError::bad_request("invalid_field", "`queue_deadline_secs` must be 1 to 86400 (seconds)"));
    }
    crate::http::checks::check_tag_count(body.tags.len())?;
    for (k, v) in &body.tags {
        crate::http::checks::check_tag(k, Some(v))?;
    }
    if body.visibility == halyard_protocol::org::Visibility::Org && body.org.is_none() {
        return Err(ApiError::bad_request("invalid_field", "`visibility: org` needs `org`: the organization whose members read it"));
    }
    let llm_profile = match &body.org {
        Some(org) => crate::api::accounts::org_profiles::profile_for_start(&state, &user, org, body.llm_profile.as_deref()).await?,
        None => {
            if let Some(p) = &body.llm_profile {
                crate::domain::user_config::check_profile(&state, &user, "llm_profile", p).await?;
            }
            body.llm_profile.clone()
        }
    };
    if let Some(names) = &body.secrets {
        crate::api::settings::secrets::check_chosen(&state, &user, body.org.as_deref(), names).await?;
    }
    // What the start leaves out, the user's settings say (and the deployment past them).
    let settings = crate::domain::user_config::load(&state, &user).await?;
    let budget = (body.max_budget_usd.is_some() || body.max_tokens.is_some())
        .then_some(halyard_protocol::event::Budget { max_budget_usd: body.max_budget_usd, max_tokens: body.max_tokens })
        .or(settings.budget);

    let (llm_profile, agent) = (llm_profile.or(settings.llm_profile), body.agent.or(settings.agent));
    let agent = agent.filter(|a| a != halyard_protocol::agents::HALYARD);
    if let Some(agent) = &agent {
        crate::domain::agents::check_runnable(&state, &user, agent, llm_profile.as_deref(), body.org.as_deref()).await?;
    }
    if let Some(name) = &body.environment {
        check_text("environment", name, 200)?;
    }
    let named = crate::domain::environments::check_start(&state, &user, body.org.as_deref(), body.environment.as_deref()).await?;
    // The start's spec, else its named environment's, else the user's default (an environment
    // it gets by default applies its spec when neither names one).
    let chosen = body.sandbox_spec.is_some() || named.is_some();
    let spec = body.sandbox_spec.clone().or(named).or(settings.sandbox_spec).filter(|s| state.config.sandbox.spec(s).is_some());
    let spec = match &body.org {
        Some(org) => crate::domain::sandbox::spec_in_org(&state, org, spec, chosen)?,
        None => spec,
    };
    let checks = halyard_protocol::event::Checks {
        result_schema: body.result_schema,
        verify: body.verify,
        max_verify_attempts: body.max_verify_attempts,
    };
    halyard_platform::results::check_checks(&checks).map_err(|e| ApiError::bad_request("invalid_field", e))?;
    for judge in checks.verify.iter().filter_map(|c| c.judge.as_ref()) {
        if let Some(p) = &judge.llm_profile {
            crate::domain::user_config::check_profile(&state, &user, "verify[].judge.llm_profile", p).await?;
        }
    }
    if !checks.is_empty() && agent.is_some() {
        return Err(ApiError::bad_request(
            "invalid_field",
            "`result_schema` and `verify` are for Halyard's own agent; a third-party agent (`agent`) finishes its turns itself",
        ));
    }
    let request = StartRequest {
        checks: (!checks.is_empty()).then_some(checks),
        environment: body.environment,
        message: body.message,
        spec,
        budget,
        confirmation_policy: body.confirmation_policy.or(settings.confirmation_policy),
        llm_profile,
        agent,
        secrets: body.secrets,
        fork: None,
        parent: None,
        tags: body.tags,
        org: body.org,
        visibility: body.visibility,
        plugins: None,
    };
    let repository = body.repository.map(|r| Repository { url: r.url, branch: r.branch });
    let queue = QueueTerms { deadline_secs: body.queue_deadline_secs, ..Default::default() };
    let start = Start { conversation_id: ConversationId::new(), title: body.title, repository, request, queue };
    let task = begin(&state, &user, start, halyard_platform::now_ms()).await?;
    Ok((StatusCode::ACCEPTED, Json(task_json(&task))).into_response())
}

/// A start with `attempts`: a batch of one item run `attempts` times at once (the automation
/// service runs it, through the start queue like any batch). What a batch's items cannot carry
/// is refused in words rather than dropped.
async fn start_attempts(state: &AppState, user: &halyard_protocol::UserId, body: StartBody) -> Result<Response, ApiError> {
    let bad = |field: &str, why: &str| {
        ApiError::bad_request("invalid_field", format!("`{field}` does not go with `attempts`: {why}; start without `attempts` for it"))
    };
    let not_with = [
        (body.org.is_some(), "org", "the attempts run as yours"),
        (body.secrets.is_some(), "secrets", "the attempts get your secrets as a batch's items do"),
        (
            body.agent.as_deref().is_some_and(|a| a != halyard_protocol::agents::HALYARD),
            "agent",
            "attempts run Halyard's own agent, which checks its work",
        ),
        (body.confirmation_policy.is_some_and(|p| p != ConfirmationPolicy::Never), "confirmation_policy", "attempts run unattended"),
        (body.queue_deadline_secs.is_some(), "queue_deadline_secs", "attempts wait in the batch class of the start queue"),
        (!body.tags.is_empty(), "tags", "the attempts are tagged with their group"),
        (body.visibility != halyard_protocol::org::Visibility::Private, "visibility", "the attempts are yours only"),
    ];
    if let Some((_, field, why)) = not_with.iter().find(|(set, ..)| *set) {
        return Err(bad(field, why));
    }
    let Some(message) = body.message.filter(|m| !m.trim().is_empty()) else {
        return Err(ApiError::bad_request("invalid_field", "`attempts` needs a `message`: what each attempt should do"));
    };
    let name = body.title.clone().unwrap_or_else(|| message.chars().take(60).collect());
    let n = body.attempts.unwrap_or(1);
    let group = crate::api::batches::BatchBody {
        name: Some(name),
        items: vec![halyard_protocol::batch::BatchItem {
            message,
            title: body.title,
            repository: body.repository.map(|r| Repository { url: r.url, branch: r.branch }),
            environment: body.environment,
            sandbox_spec: body.sandbox_spec,
            llm_profile: body.llm_profile,
        }],
        template: None,
        rows: Vec::new(),
        // Side by side: every attempt at once.
        concurrency: Some(n.clamp(1, halyard_protocol::batch::MAX_ATTEMPTS)),
        attempts: Some(n),
        llm_profile: None,
        result_schema: body.result_schema,
        verify: body.verify,
        max_verify_attempts: body.max_verify_attempts,
        max_budget_usd: body.max_budget_usd,
        max_tokens: body.max_tokens,
    };
    let view = crate::api::batches::start(state, user, group).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// Starts a conversation whose start failed again, as it was asked, in a new sandbox (the failed
/// start's is deleted); 409 `start_not_failed` otherwise. Answers with the new start task.
#[utoipa::path(post, path = "/conversations/{id}/retry", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 202, body = StartTask), Refusals, Conflict))]
pub async fn retry_start(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (conversation_id, view) = owned(&state, &user, &id)?;
    if view.status != "ERROR" {
        return Err(ApiError::conflict(
            "start_not_failed",
            format!("only a conversation whose start failed can be retried; this one is {}", view.status),
        ));
    }
    let Some(request) = view.start_request.clone() else {
        return Err(ApiError::conflict(
            "cannot_retry",
            "this conversation was started before starts could be retried; start a new one with POST /api/v1/conversations",
        ));
    };
    let repository = view.repository.clone().and_then(|r| serde_json::from_value::<Repository>(r).ok());
    let title = view.title.clone().filter(|_| view.title_set_by.as_deref() == Some("user"));
    let start = Start { conversation_id, title, repository, request, queue: QueueTerms::default() };
    let task = begin(&state, &user, start, view.created_ms).await?;
    if let Some(old) = view.sandbox_id.as_deref().and_then(|s| s.parse::<SandboxId>().ok()) {
        // The failed start's sandbox holds nothing the new one needs.
        let delete = Envelope::new(SandboxCommand::Delete { sandbox_id: old }, halyard_platform::now_ms());
        if let Err(e) = bus::publish(&state.js, subjects::sandbox_command(old), &delete).await {
            tracing::warn!(sandbox_id = %old, error = %e, "the failed start's sandbox was not deleted");
        }
    }
    Ok((StatusCode::ACCEPTED, Json(task_json(&task))))
}

/// The plugins `conversation_started` of `source` recorded.
async fn source_plugins(state: &AppState, source: ConversationId) -> Result<Vec<halyard_protocol::plugin::PluginUse>, ApiError> {
    let first = crate::read_model::events::read_decoded(&state.js, &state.store, source, 0, 1).await?;
    Ok(match first.into_iter().next().map(|(e, _)| e.body) {
        Some(halyard_protocol::event::EventBody::ConversationStarted { plugins, .. }) => plugins,
        _ => Vec::new(),
    })
}

/// A fork of a conversation.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = ForkConversation)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// The last event the fork keeps (1 to the conversation's `last_event_seq`).
    #[schema(minimum = 1)]
    pub at_seq: u64,
    /// A message to the fork's agent (it waits for one if absent).
    #[serde(default)]
    pub message: Option<String>,
    /// The fork's title (the conversation's, marked as a fork, if absent).
    #[serde(default)]
    pub title: Option<String>,
}

/// Forks a conversation at one of its events: a new conversation of the same user whose log is
/// this one's up to `at_seq` (after its own `conversation_started`, which names its source) and
/// whose workspace is this one's checkpoint at that event, in a sandbox of its own, started as
/// this one was (repository, limits, profile, secrets). It runs like any other; this one is not
/// touched. Answers 202 with the fork's start task.
#[utoipa::path(post, path = "/conversations/{id}/fork", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    request_body = ForkBody, responses((status = 202, body = StartTask), Refusals, BodyRefusals, Conflict))]
pub async fn fork_conversation(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ForkBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (source, view) = owned(&state, &user, &id)?;
    require_ready(&view)?;
    require_sandbox(&view)?;
    require_own_workspace(&view)?;
    check_at_seq(&view, body.at_seq)?;
    if let Some(m) = &body.message {
        check_text("message", m, MAX_MESSAGE_CHARS)?;
    }
    if let Some(t) = &body.title {
        check_title(t)?;
    }
    let Some(sandbox_id) = view.sandbox_id.as_deref().and_then(|s| s.parse::<SandboxId>().ok()) else {
        return Err(ApiError::conflict("conversation_not_ready", "the conversation has no sandbox yet; fork it once it is READY"));
    };
    let mut request = view.start_request.clone().unwrap_or_default();
    request.message = body.message;
    request.fork = Some(ForkSource { conversation_id: source, sandbox_id, at_seq: body.at_seq });
    // The source's plugins at the commits it used: the fork reads the same files.
    request.plugins = Some(source_plugins(&state, source).await?);
    // The source's tags as they are now.
    request.tags = view.tags.clone();
    let title = body.title.unwrap_or_else(|| {
        let base = view.title.clone().unwrap_or_else(|| "Conversation".into());
        let base: String = base.chars().take(MAX_TITLE_CHARS.saturating_sub(7)).collect();
        format!("{base} (fork)")
    });
    let repository = view.repository.clone().and_then(|r| serde_json::from_value::<Repository>(r).ok());
    let start = Start { conversation_id: ConversationId::new(), title: Some(title), repository, request, queue: QueueTerms::default() };
    let task = begin(&state, &user, start, halyard_platform::now_ms()).await?;
    tracing::info!(%source, fork = %task.conversation_id, at_seq = body.at_seq, "conversation forked");
    Ok((StatusCode::ACCEPTED, Json(task_json(&task))))
}
