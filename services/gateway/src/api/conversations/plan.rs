//! The agent's plan (`GET /conversations/{id}/tasks`): the task list its `task_tracker` tool
//! set last, as the projection keeps it from the conversation's `task_list` events.

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use utoipa::ToSchema;

use halyard_protocol::event::TaskItem;

use crate::auth::User;
use crate::auth::access::readable;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::state::AppState;

/// The agent's plan, in order.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskList {
    /// Each task: `title`, `notes`, `status` (`todo`, `in_progress` or `done`).
    pub items: Vec<TaskItem>,
}

/// The agent's plan: the tasks its `task_tracker` tool set last, in order (none before it made
/// one).
#[utoipa::path(get, path = "/conversations/{id}/tasks", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = TaskList), Refusals))]
pub async fn get_tasks(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<TaskList>, ApiError> {
    let (_, view) = readable(&state, &user, &id)?;
    Ok(Json(TaskList { items: view.tasks }))
}
