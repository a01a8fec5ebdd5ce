//! Starting a conversation, whatever asked for it (a new one, a retry, a fork): the user's limit
//! on starts under way, the `ConversationCommand::Start` sent to the conversations service, and
//! the rows the start shows at once (written by the projection, the only writer of views).

use axum::http::StatusCode;

use halyard_platform::{bus, telemetry};
use halyard_protocol::command::ConversationCommand;
use halyard_protocol::queue::QueueTerms;
use halyard_protocol::system::{Repository, StartRequest};
use halyard_protocol::{ConversationId, Envelope, TaskId, UserId, subjects};

use crate::http::error::ApiError;
use crate::projection::starts::Sent;
use crate::read_model::store::TaskView;
use crate::state::AppState;

/// A start to make: a new conversation, or a failed one again.
pub struct Start {
    pub conversation_id: ConversationId,
    pub title: Option<String>,
    pub repository: Option<Repository>,
    pub request: StartRequest,
    /// How its sandbox waits if no host has room.
    pub queue: QueueTerms,
}

/// Checks how many starts the user has under way, sends the start to the conversations service
/// and has the projection record what is known now, so that the next GET finds it (its
/// projection of the lifecycle records adds the rest: [`crate::projection::starts`]). `created_ms`: when the
/// conversation was made. Running-sandbox limits are not checked here: a start past one waits
/// in the start queue.
pub async fn begin(state: &AppState, user: &UserId, start: Start, created_ms: i64) -> Result<TaskView, ApiError> {
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
    let Start { conversation_id, title, repository, request, mut queue } = start;
    let now = halyard_platform::now_ms();
    queue.asked_us = Some(halyard_platform::now_us());
    let cmd = ConversationCommand::Start {
        task_id,
        conversation_id,
        owner: user.clone(),
        message: request.message.clone(),
        repository,
        title: title.clone(),
        created_ms,
        spec: request.spec,
        budget: request.budget,
        confirmation_policy: request.confirmation_policy,
        llm_profile: request.llm_profile,
        agent: request.agent,
        secrets: request.secrets,
        fork: request.fork,
        parent: request.parent,
        tags: request.tags.clone(),
        org: request.org.clone(),
        visibility: request.visibility,
        queue,
        environment: request.environment,
        checks: request.checks,
        plugins: request.plugins,
    };
    let mut env = Envelope::new(cmd, now).correlated(task_id.to_string());
    env.trace = Some(telemetry::new_trace());
    if let Err(e) = bus::publish(&state.js, subjects::conversation_command(conversation_id), &env).await {
        state.live.starting.lock().unwrap_or_else(|e| e.into_inner()).entry(user.0.clone()).or_default().remove(&task_id);
        return Err(e.into());
    }
    tracing::info!(%task_id, %conversation_id, user = %user, "conversation start accepted");
    let sent =
        Sent { task_id, conversation_id, owner: user, title, first_message: request.message, tags: request.tags, created_ms, now_ms: now };
    Ok(state.live.start_sent(&state.store, sent).await?)
}
