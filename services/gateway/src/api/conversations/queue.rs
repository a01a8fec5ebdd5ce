//! The start queue as users and administrators see it: a queued start's place in line and
//! estimate (`GET /start-tasks/{id}`, and frames on the conversation's socket), cancelling one
//! (`DELETE /start-tasks/{id}`), who waits for what (`GET /admin/queue`), and organizations'
//! shares of it (`PUT`/`DELETE /admin/queue/shares/{org}`). Positions come from the gateway's
//! copy of the queue's bucket ([`halyard_platform::start_queue`]), in the order the sandbox
//! hosts place by.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde::Serialize;

use halyard_platform::bus;
use halyard_platform::start_queue::per_place_ms;
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::queue::{self as q, HOST_STALE_MS, Share};
use halyard_protocol::{Envelope, SandboxId, TaskId, rfc3339, subjects};

use super::views::{StartTask, task_json};
use crate::audit::{self, Client};
use crate::auth::{Admin, User};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::checks::parse_id;
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::TaskView;
use crate::state::AppState;

/// A task as the API shows it, with its place in line while it is `QUEUED`.
pub(crate) fn task_with_place(state: &AppState, t: &TaskView) -> StartTask {
    let mut task = task_json(t);
    if t.status == "QUEUED" {
        if let Some(sandbox) = t.sandbox_id.as_deref().and_then(|s| s.parse::<SandboxId>().ok()) {
            let (position, estimate) = state.start_queue.place(sandbox);
            task.position = position;
            task.estimate_secs = estimate;
        }
    }
    task
}

/// What a conversation's socket says of its sandbox's place in the start queue (a start or a
/// wake waiting for room): a `{"kind": "queue_position", "position", "estimate_secs"}` frame
/// whenever its place changes, and one with `position: null` when it leaves the line.
#[derive(Default)]
pub(crate) struct PlaceWatch {
    sandbox: Option<SandboxId>,
    said: Option<u32>,
}

impl PlaceWatch {
    /// The frame to send now for conversation `id`, if its place changed.
    pub(crate) fn frame(&mut self, state: &AppState, id: halyard_protocol::ConversationId) -> Option<String> {
        if self.sandbox.is_none() {
            self.sandbox = sandbox_of(state, id);
        }
        let (position, estimate) = state.start_queue.place(self.sandbox?);
        if position == self.said {
            return None;
        }
        self.said = position;
        let frame = serde_json::json!({"kind": "queue_position", "position": position, "estimate_secs": estimate});
        Some(frame.to_string())
    }
}

/// The sandbox of conversation `id`: its view's, or while it starts, its start task's.
fn sandbox_of(state: &AppState, id: halyard_protocol::ConversationId) -> Option<SandboxId> {
    let view = state.store.conversation(id).ok().flatten()?;
    let sandbox = match view.sandbox_id {
        Some(s) => s,
        None => state.store.task(view.start_task_id.parse().ok()?).ok().flatten()?.sandbox_id?,
    };
    sandbox.parse().ok()
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
    /// A wake of a sandbox that exists, waiting for room on the host that holds it (`None`:
    /// a new sandbox, for any host).
    pub wake_on: Option<String>,
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
    /// Organizations whose share an administrator set (the others have weight 1, priority 0).
    pub shares: Vec<OrgShare>,
}

/// An organization's share of the queue.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OrgShare {
    pub org: String,
    /// Turns it takes per round against an organization (or a user starting on their own) of
    /// weight 1, while both wait (1 to 100).
    pub weight: u32,
    /// While starts of an organization of a higher priority wait, they go first (-10 to 10).
    pub priority: i32,
    /// How many sandboxes its conversations may run at once, on all hosts together (none: no
    /// limit of its own). A start past it waits in line.
    pub max_running: Option<u32>,
}

impl OrgShare {
    fn new(org: &str, share: &Share) -> Self {
        Self { org: org.to_owned(), weight: share.weight, priority: share.priority, max_running: share.max_running }
    }
}

/// The body of `PUT /admin/queue/shares/{org}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareBody {
    /// 1 to 100 (default 1).
    #[serde(default)]
    pub weight: Option<u32>,
    /// -10 to 10 (default 0).
    #[serde(default)]
    pub priority: Option<i32>,
    /// 1 to 100000 (default: no limit of its own).
    #[serde(default)]
    pub max_running: Option<u32>,
}

/// Who waits for what, in the order they will be placed, and each sandbox host's room
/// (administrators only).
#[utoipa::path(get, path = "/admin/queue", tag = "admin", responses((status = 200, body = QueueView), Refusals))]
pub async fn admin_queue(State(state): State<AppState>, _: Admin) -> Result<Json<QueueView>, ApiError> {
    let now = halyard_platform::now_ms();
    let m = state.start_queue.copy.lock().map_err(|_| ApiError::internal("the start queue's copy is unreadable"))?;
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
            wake_on: e.wake_on.clone(),
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
    let mut shares: Vec<OrgShare> =
        m.shares.iter().filter_map(|(group, share)| Some(OrgShare::new(q::org_of_group(group)?, share))).collect();
    shares.sort_by(|a, b| a.org.cmp(&b.org));
    Ok(Json(QueueView { waiting, hosts, per_place_ms: per_place_ms(&m.recent), shares }))
}

/// Sets an organization's share of the start queue: its weight against the others while they
/// wait, its priority, and how many sandboxes it may run at once across hosts (administrators
/// only; audited; the whole share: a field left out goes back to its default). Takes effect at
/// the next placement.
#[utoipa::path(put, path = "/admin/queue/shares/{org}", tag = "admin", params(("org" = String, Path)), request_body = ShareBody,
    responses((status = 200, body = OrgShare), Refusals, BodyRefusals))]
pub async fn put_share(
    State(state): State<AppState>,
    Admin(actor): Admin,
    client: Client,
    Path(org): Path<String>,
    ApiJson(body): ApiJson<ShareBody>,
) -> Result<Json<OrgShare>, ApiError> {
    if state.accounts.org(&org).is_none() {
        return Err(ApiError::not_found("organization"));
    }
    let share = Share { weight: body.weight.unwrap_or(1), priority: body.priority.unwrap_or(0), max_running: body.max_running };
    if share.max_running.is_some_and(|m| !(1..=q::MAX_RUNNING).contains(&m)) {
        let max = q::MAX_RUNNING;
        return Err(ApiError::bad_request("invalid_field", format!("`max_running` must be 1 to {max}, or absent for no limit of its own")));
    }
    if !(1..=q::MAX_WEIGHT).contains(&share.weight) {
        return Err(ApiError::bad_request("invalid_field", format!("`weight` must be 1 to {}; it was {}", q::MAX_WEIGHT, share.weight)));
    }
    if !(-q::MAX_PRIORITY..=q::MAX_PRIORITY).contains(&share.priority) {
        let max = q::MAX_PRIORITY;
        return Err(ApiError::bad_request("invalid_field", format!("`priority` must be -{max} to {max}; it was {}", share.priority)));
    }
    let value = serde_json::to_vec(&share).map_err(ApiError::internal)?;
    state.start_queue.kv.put(q::share_key(&q::org_group(&org)), value.into()).await.map_err(ApiError::internal)?;
    let detail = serde_json::json!({"weight": share.weight, "priority": share.priority, "max_running": share.max_running});
    audit::Action::new(&actor, "queue.share", &org).org(&org).detail(detail).send(&state, client).await;
    Ok(Json(OrgShare::new(&org, &share)))
}

/// Gives an organization the default share back (weight 1, priority 0).
#[utoipa::path(delete, path = "/admin/queue/shares/{org}", tag = "admin", params(("org" = String, Path)),
    responses((status = 204), Refusals))]
pub async fn delete_share(
    State(state): State<AppState>,
    Admin(actor): Admin,
    client: Client,
    Path(org): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.start_queue.kv.purge(q::share_key(&q::org_group(&org))).await.map_err(ApiError::internal)?;
    audit::Action::new(&actor, "queue.share_reset", &org).org(&org).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
