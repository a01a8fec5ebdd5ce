//! Helpers the handlers of several modules share: ids from paths, the conversation (and its
//! running sandbox, woken from hibernation) a user may act on, the running limits, pages,
//! commands to a conversation's agent, the checks of a start's spec, budget and labels, a
//! delivery attempt as the API shows it, and the client's address and the pause before a
//! refusal past a limit. Kept apart from any one handler's file so that handler modules never
//! import each other.

use std::net::IpAddr;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};

use halyard_platform::{bus, netaddr, telemetry};
use halyard_protocol::command::AgentCommand;
use halyard_protocol::webhook::DeliveryAttempt;
use halyard_protocol::{ConversationId, Envelope, SandboxId, TaskId, UserId, subjects};

use crate::state::AppState;
use crate::error::ApiError;
use crate::store::{self, ConversationView};

/// Parses a path id, saying which parameter was wrong.
pub fn parse_id<T: std::str::FromStr>(raw: &str, what: &str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| ApiError::bad_request("invalid_id", format!("`{what}` must be a UUID, got {raw:?}")))
}

/// A conversation of this user, to act on, or 404. One its organization reads, and the user is
/// in, is 403 `read_only`: they see it, so they are told why they cannot act.
pub fn owned(state: &AppState, user: &halyard_protocol::UserId, raw: &str) -> Result<(ConversationId, ConversationView), ApiError> {
    let (id, c) = owned_even_if_left(state, user, raw)?;
    // A conversation in an organization runs on the organization's secrets, profiles, providers,
    // MCP servers and skills: acting on it (a message, a resume, a retry, a restore, a fork, its
    // sandbox) needs current membership, not only the membership it was started with.
    if let Some(org) = c.start_request.as_ref().and_then(|r| r.org.as_deref()) {
        if state.accounts.org(org).is_none_or(|(_, o)| o.role_of(user).is_none()) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "not_a_member",
                format!("this conversation is organization {org}'s, and you are no longer a member: read it, or delete it"),
            ));
        }
    }
    Ok((id, c))
}

/// Like [`owned`], whether or not the owner is still in the conversation's organization: for
/// what touches nothing of the organization's (deleting the conversation).
pub fn owned_even_if_left(
    state: &AppState,
    user: &halyard_protocol::UserId,
    raw: &str,
) -> Result<(ConversationId, ConversationView), ApiError> {
    let id: ConversationId = parse_id(raw, "id")?;
    match state.store.conversation(id)? {
        Some(c) if c.owner == user.0 => Ok((id, c)),
        Some(c) if org_reads(state, user, &c) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "read_only",
            format!("{}'s conversation is shared with your organization to read; only its owner acts on it", c.owner),
        )),
        _ => Err(ApiError::not_found("conversation")),
    }
}

/// A conversation this user may read: theirs, or one shared with an organization they are in
/// (`visibility: org`); 404 otherwise.
pub fn readable(state: &AppState, user: &halyard_protocol::UserId, raw: &str) -> Result<(ConversationId, ConversationView), ApiError> {
    let id: ConversationId = parse_id(raw, "id")?;
    match state.store.conversation(id)? {
        Some(c) if c.owner == user.0 || org_reads(state, user, &c) => Ok((id, c)),
        _ => Err(ApiError::not_found("conversation")),
    }
}

/// Whether `user` reads `c` as a member of the organization it is shared with (membership as of
/// now: a member who leaves stops reading it).
pub fn org_reads(state: &AppState, user: &halyard_protocol::UserId, c: &ConversationView) -> bool {
    c.visibility == halyard_protocol::org::Visibility::Org
        && c.start_request
            .as_ref()
            .and_then(|r| r.org.as_deref())
            .and_then(|org| state.accounts.org(org))
            .is_some_and(|(_, o)| o.role_of(user).is_some())
}

/// The sandbox of the user's conversation `id`, running, for what the caller means `to` do (in
/// words, for the error). A hibernated sandbox is woken first (within the running limits: 429
/// past one), so the request is answered as if it had never stopped; a paused one (a user's
/// choice) is not: 409 `sandbox_not_running`.
pub async fn running_sandbox(
    state: &AppState,
    user: &halyard_protocol::UserId,
    id: &str,
    to: &str,
) -> Result<(SandboxId, store::SandboxView), ApiError> {
    running_sandbox_waking(state, user, id, to, true).await
}

/// Like [`running_sandbox`]; with `wake` false, a hibernated sandbox stays asleep (409
/// `sandbox_hibernated`): what someone other than the owner reads (an organization's reader, a
/// share link) never starts the owner's sandbox on the owner's quota.
pub async fn running_sandbox_waking(
    state: &AppState,
    user: &halyard_protocol::UserId,
    id: &str,
    to: &str,
    wake_it: bool,
) -> Result<(SandboxId, store::SandboxView), ApiError> {
    let (_, c) = owned(state, user, id)?;
    let sandbox_id: SandboxId = match &c.sandbox_id {
        Some(s) => parse_id(s, "sandbox_id")?,
        None => return Err(ApiError::conflict("conversation_not_ready", "the conversation has no sandbox yet; wait until it is READY")),
    };
    let sandbox = state.store.sandbox(sandbox_id)?.ok_or_else(|| ApiError::not_found("sandbox"))?;
    match sandbox.status.as_str() {
        "RUNNING" => Ok((sandbox_id, sandbox)),
        "HIBERNATED" if !wake_it => Err(ApiError::conflict(
            "sandbox_hibernated",
            "the conversation's sandbox is hibernating to save resources; it wakes when its owner opens it",
        )),
        "HIBERNATED" => {
            check_quota(state, user)?;
            Ok((sandbox_id, wake(state, sandbox_id, sandbox).await?))
        }
        other => Err(ApiError::conflict(
            "sandbox_not_running",
            format!("the conversation's sandbox is {other}; resume the conversation to {to}"),
        )),
    }
}

/// Starts a hibernated sandbox again and waits until it runs; the view as it is then (its
/// executor's new address), ahead of the projection.
pub async fn wake(state: &AppState, id: SandboxId, mut view: store::SandboxView) -> Result<store::SandboxView, ApiError> {
    let mut resume = Envelope::new(halyard_protocol::command::SandboxCommand::Resume { sandbox_id: id }, halyard_platform::now_ms());
    resume.trace = Some(telemetry::new_trace());
    let patience = Duration::from_secs(state.config.sandbox.start_timeout_secs + 10);
    let woke = bus::await_sandbox(&state.nats, &state.js, id, Some(resume), patience).await.map_err(|why| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "sandbox_wake_failed",
            format!("the hibernated sandbox did not start again: {why}; retry"),
        )
    })?;
    view.status = woke.status.as_str().to_owned();
    view.detail = woke.detail;
    view.exposed_urls = woke.exposed_urls.iter().map(|u| serde_json::json!({"name": u.name, "url": u.url})).collect();
    Ok(view)
}

/// Where the web workspace is (a share link's origin, the one page that may frame VS Code): the
/// operator's public URL, else the host this request came to.
pub fn workspace_origin(state: &AppState, headers: &HeaderMap) -> String {
    if !state.config.gateway.public_url.is_empty() {
        return state.config.gateway.public_url.clone();
    }
    let host = headers.get(axum::http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    format!("http://{host}")
}

/// A page of a list: `limit` items after `cursor`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// How many items (1 to 100, 20 by default).
    #[serde(default)]
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<usize>,
    /// The `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
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

/// Sends a command to the agent runner of conversation `id`; its envelope id.
pub async fn agent_command(state: &AppState, id: ConversationId, cmd: AgentCommand) -> Result<String, ApiError> {
    let mut env = Envelope::new(cmd, halyard_platform::now_ms());
    env.trace = Some(telemetry::new_trace());
    bus::publish(&state.js, subjects::agent_command(id), &env).await?;
    Ok(env.id.to_string())
}

/// Asks whoever answers `subject` (agent runners, in a queue group) `question` and waits up to
/// `patience` for the answer; 503 when none answers (in time). What the question is about (`a
/// question`, `an MCP server test`) goes into the log line and the message.
pub async fn request<Q: halyard_protocol::envelope::Payload, A: serde::de::DeserializeOwned>(
    state: &AppState,
    subject: String,
    question: Q,
    patience: Duration,
    about: &str,
) -> Result<A, ApiError> {
    let bytes = halyard_protocol::encode(&Envelope::new(question, halyard_platform::now_ms())).map_err(ApiError::internal)?;
    let reply = tokio::time::timeout(patience, state.nats.request(subject, bytes.into()))
        .await
        .map_err(|_| ApiError::unavailable(format!("no agent runner answered {about} in time; try again")))?
        .map_err(|e| {
            tracing::warn!(error = %e, %about, "request to agent runners failed");
            ApiError::unavailable(format!("no agent runner is answering {about} now; try again"))
        })?;
    Ok(halyard_protocol::decode::<A>(&reply.payload).map_err(ApiError::internal)?.payload)
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

/// Checks a one-line text people read in lists (a title, a label): no control characters (NUL,
/// line breaks, escapes) and no bidirectional overrides or isolates, which make a text read
/// differently from what it is (U+202E before `txt.exe` shows it as `exe.txt`).
pub fn check_label(field: &str, text: &str) -> Result<(), ApiError> {
    let bidi = |c: char| matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}');
    match text.chars().find(|c| c.is_control() || bidi(*c)) {
        Some(c) => Err(ApiError::bad_request(
            "invalid_field",
            format!(
                "`{field}` holds the character U+{:04X}: control characters and bidirectional overrides are not allowed in it",
                c as u32
            ),
        )),
        None => Ok(()),
    }
}

/// Most tags a conversation has, and the longest key and value.
pub const MAX_TAGS: usize = 20;
const MAX_TAG_KEY: usize = 64;
const MAX_TAG_VALUE: usize = 256;

/// Refuses a tag key that is not 1 to 64 letters, digits, `_`, `-`, `.` or `/` (a key is
/// matched as `key:value` in `?tag=`, so it holds no colon), or a value that is not one line
/// of up to 256 characters.
pub fn check_tag(key: &str, value: Option<&str>) -> Result<(), ApiError> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    if key.is_empty() || key.len() > MAX_TAG_KEY || !key.chars().all(plain) {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("the tag key `{key}` must be 1 to {MAX_TAG_KEY} letters, digits, `_`, `-`, `.` or `/`"),
        ));
    }
    if let Some(v) = value {
        if v.chars().count() > MAX_TAG_VALUE {
            return Err(ApiError::bad_request("invalid_field", format!("the tag `{key}` has a value over {MAX_TAG_VALUE} characters")));
        }
        check_label(&format!("tags.{key}"), v)?;
    }
    Ok(())
}

/// Refuses more than [`MAX_TAGS`] tags.
pub fn check_tag_count(n: usize) -> Result<(), ApiError> {
    if n > MAX_TAGS {
        return Err(ApiError::bad_request("invalid_field", format!("a conversation has at most {MAX_TAGS} tags; this would have {n}")));
    }
    Ok(())
}

/// A delivery attempt as the API shows it (and the read model keeps it).
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
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

impl From<&DeliveryAttempt> for AttemptView {
    fn from(a: &DeliveryAttempt) -> Self {
        Self {
            delivery_id: a.delivery_id.to_string(),
            event_id: a.event_id.to_string(),
            conversation_id: a.conversation_id.to_string(),
            seq: a.seq,
            attempt: a.attempt,
            status_code: a.status_code,
            error: a.error.clone(),
            duration_ms: a.duration_ms,
            outcome: serde_json::to_value(a.outcome).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
            time: store::rfc3339(a.time_ms),
        }
    }
}

/// How long a failure past the budget is held before its 429.
const PENALTY: Duration = Duration::from_secs(1);

/// The client address of a request from `peer`: `X-Forwarded-For` counts only when `peer` is a
/// configured trusted proxy.
pub fn client_ip(state: &AppState, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
    let forwarded = headers.get_all("x-forwarded-for").iter().filter_map(|v| v.to_str().ok());
    netaddr::client_address(peer, forwarded, &state.trusted_proxies)
}

/// Holds a refusal a moment when it is a limit's (a guesser waits; a person never gets here).
pub async fn slow_down(e: ApiError) -> ApiError {
    if e.status == StatusCode::TOO_MANY_REQUESTS {
        tokio::time::sleep(PENALTY).await;
    }
    e
}

/// Refuses with 429 if one more running sandbox for `user` would exceed a limit. Sandboxes
/// still being started for a conversation count too, so a burst of starts cannot slip past.
pub fn check_quota(state: &AppState, user: &UserId) -> Result<(), ApiError> {
    let limits = &state.config.sandbox;
    if limits.max_running_per_user == 0 && limits.max_running_total == 0 {
        return Ok(());
    }
    let (mut mine, mut total) = state.store.running_sandboxes(&user.0)?;
    let starting: Vec<(String, TaskId)> = {
        let starting = state.live.starting.lock().unwrap_or_else(|e| e.into_inner());
        starting.iter().flat_map(|(owner, tasks)| tasks.iter().map(move |t| (owner.clone(), *t))).collect()
    };
    for (owner, task) in starting {
        // A task whose sandbox already runs is counted above.
        let counted = state
            .store
            .task(task)?
            .and_then(|t| t.sandbox_id)
            .and_then(|s| s.parse().ok())
            .and_then(|s| state.store.sandbox(s).ok().flatten())
            .is_some_and(|s| s.is_running());
        if !counted {
            total += 1;
            if owner == user.0 {
                mine += 1;
            }
        }
    }
    let refuse = |code: &'static str, message: String| {
        let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message);
        e.retry_after = Some(10);
        Err(e)
    };
    if limits.max_running_per_user > 0 && mine >= limits.max_running_per_user {
        return refuse(
            "sandbox_quota_user",
            format!("you have {mine} running sandboxes (limit {}); pause or delete one, then retry", limits.max_running_per_user),
        );
    }
    if limits.max_running_total > 0 && total >= limits.max_running_total {
        return refuse(
            "sandbox_quota_total",
            format!("this deployment runs {total} sandboxes (limit {}); retry later", limits.max_running_total),
        );
    }
    Ok(())
}
