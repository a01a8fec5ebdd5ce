//! The start queue as users and administrators see it: a queued start's place in line and
//! estimate (`GET /start-tasks/{id}`), cancelling one (`DELETE /start-tasks/{id}`), and who waits
//! for what (`GET /admin/queue`). Positions come from the gateway's copy of the queue's bucket
//! ([`halyard_platform::start_queue`]), in the order the sandbox hosts place by.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Serialize;

use halyard_platform::bus;
use halyard_platform::start_queue::per_place_ms;
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::queue::HOST_STALE_MS;
use halyard_protocol::{Envelope, SandboxId, TaskId, rfc3339, subjects};

use super::views::{StartTask, task_json};
use crate::auth::{Admin, User};
use crate::http::api_doc::{Conflict, Refusals};
use crate::http::checks::parse_id;
use crate::http::error::ApiError;
use crate::read_model::store::TaskView;
use crate::state::AppState;

/// A task as the API shows it, with its place in line while it is `QUEUED`.
pub(crate) fn task_with_place(state: &AppState, t: &TaskView) -> StartTask {
    let mut task = task_json(t);
    if t.status == "QUEUED" {
        if let Some(sandbox) = t.sandbox_id.as_deref().and_then(|s| s.parse::<SandboxId>().ok()) {
            let (position, estimate) = place_in_line(state, sandbox);
            task.position = position;
            task.estimate_secs = estimate;
        }
    }
    task
}

/// The start's place among the waiting (1: next) and about how long until it is placed.
fn place_in_line(state: &AppState, sandbox: SandboxId) -> (Option<u32>, Option<u64>) {
    let Ok(m) = state.start_queue.lock() else { return (None, None) };
    let waiting = m.waiting();
    let Some(i) = waiting.iter().position(|id| *id == sandbox) else { return (None, None) };
    let position = i as u32 + 1;
    let estimate = per_place_ms(&m.recent).map(|ms| (ms.max(0) as u64 * u64::from(position)).div_ceil(1000));
    (Some(position), estimate)
}

/// Cancels a start waiting in the queue: it never starts, and its status becomes `CANCELLED`.
/// 409 `start_not_queued` for a start that is not waiting (one already placed is deleted with
/// its conversation instead).
#[utoipa::path(delete, path = "/start-tasks/{id}", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 202, body = StartTask), Refusals, Conflict))]
pub async fn cancel_task(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let id: TaskId = parse_id(&id, "id")?;
    let task = match state.store.task(id)? {
        Some(t) if t.owner == user.0 => t,
        _ => return Err(ApiError::not_found("start task")),
    };
    let sandbox = task.sandbox_id.as_deref().and_then(|s| s.parse::<SandboxId>().ok());
    let (true, Some(sandbox_id)) = (task.status == "QUEUED", sandbox) else {
        return Err(ApiError::conflict(
            "start_not_queued",
            format!("only a start waiting in the queue can be cancelled; this one is {}", task.status),
        ));
    };
    // The supervisors decide between the cancel and a host taking it (one claim wins); a start
    // taken a moment before is deleted instead.
    let cancel = Envelope::new(SandboxCommand::Delete { sandbox_id }, halyard_platform::now_ms());
    bus::publish(&state.js, subjects::sandbox_command(sandbox_id), &cancel).await?;
    tracing::info!(task_id = %id, %sandbox_id, user = %user, "queued start cancelled");
    Ok((StatusCode::ACCEPTED, Json(task_with_place(&state, &task))))
}

/// One start waiting in the queue.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueuedStartView {
    /// 1: the next to be placed.
    pub position: u32,
    pub sandbox_id: String,
    pub conversation_id: String,
    pub owner: String,
    pub org: Option<String>,
    /// `interactive`, `automation` or `batch`.
    pub class: String,
    pub queued_at: String,
    pub waited_secs: u64,
    pub deadline_at: String,
    /// The host making its sandbox now, if one took it.
    pub taken_by: Option<String>,
}

/// A sandbox host's room.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HostRoomView {
    pub node: String,
    /// Sandboxes it runs at most (0: no limit).
    pub slots: u32,
    pub busy: u32,
    /// Whether it beat within the last few seconds.
    pub alive: bool,
}

/// The start queue.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueView {
    pub waiting: Vec<QueuedStartView>,
    pub hosts: Vec<HostRoomView>,
    /// Mean time between the recent placements, in milliseconds.
    pub per_place_ms: Option<i64>,
}

/// Who waits for what, in the order they will be placed, and each sandbox host's room
/// (administrators only).
#[utoipa::path(get, path = "/admin/queue", tag = "admin", responses((status = 200, body = QueueView), Refusals))]
pub async fn admin_queue(State(state): State<AppState>, _: Admin) -> Result<Json<QueueView>, ApiError> {
    let now = halyard_platform::now_ms();
    let m = state.start_queue.lock().map_err(|_| ApiError::internal("the start queue's copy is unreadable"))?;
    let waiting = m
        .order()
        .into_iter()
        .filter_map(|id| m.queued.get(&id).map(|(_, e)| (id, e)))
        .enumerate()
        .map(|(i, (id, e))| QueuedStartView {
            position: i as u32 + 1,
            sandbox_id: id.to_string(),
            conversation_id: e.conversation_id.to_string(),
            owner: e.owner.0.clone(),
            org: e.terms.org.clone(),
            class: e.terms.class.as_str().to_owned(),
            queued_at: rfc3339(e.enqueued_ms),
            waited_secs: ((now - e.enqueued_ms).max(0) / 1000) as u64,
            deadline_at: rfc3339(e.deadline_ms),
            taken_by: match m.claims.get(&id) {
                Some((_, halyard_protocol::queue::Claim::Host { node, .. })) => Some(node.clone()),
                _ => None,
            },
        })
        .collect();
    let mut hosts: Vec<HostRoomView> = m
        .hosts
        .values()
        .map(|h| HostRoomView { node: h.node.clone(), slots: h.slots, busy: h.busy, alive: now - h.at_ms < HOST_STALE_MS })
        .collect();
    hosts.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(Json(QueueView { waiting, hosts, per_place_ms: per_place_ms(&m.recent) }))
}
