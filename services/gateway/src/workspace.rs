//! A conversation's workspace as its owner sees it: what changed (`GET
//! /conversations/{id}/changes`) and its files (`GET /conversations/{id}/files?path=`), read by
//! the sandbox's own executor with the sandbox's session key, so they see exactly what the agent
//! can, no more. The sandbox must be running; a paused one is not woken for a look.

use axum::Json;
use axum::extract::{Path, Query, State};
use halyard_platform::executor_client::{ExecutorClient, ExecutorError};
use halyard_platform::keys;
use halyard_protocol::system::AGENT_SERVER;
use serde::Deserialize;
use serde_json::Value;

use crate::AppState;
use crate::auth::User;
use crate::error::ApiError;
use crate::routes::running_sandbox;

/// The executor of the conversation's sandbox, if it runs.
fn executor(state: &AppState, user: &halyard_protocol::UserId, id: &str) -> Result<ExecutorClient, ApiError> {
    let (sandbox_id, sandbox) = running_sandbox(state, user, id, "look into its workspace")?;
    let url = sandbox.url_of(AGENT_SERVER).ok_or_else(|| ApiError::unavailable("the sandbox exposes no executor; try again shortly"))?;
    Ok(ExecutorClient::new(state.http.clone(), url, keys::session_key(&state.config.secret, sandbox_id)))
}

/// The executor's refusals (a path that does not exist...) are the user's to fix; the rest is
/// the sandbox's trouble.
fn executor_error(e: ExecutorError) -> ApiError {
    match e {
        // The client already took the message out of the executor's error body.
        ExecutorError::Rejected { status, message, .. } if status < 500 && status != 401 => ApiError::bad_request("invalid_path", message),
        other => {
            tracing::warn!(error = %other, "the sandbox's executor failed");
            ApiError::unavailable("the sandbox did not answer; try again shortly")
        }
    }
}

/// `GET /conversations/{id}/changes`.
pub async fn changes(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let exec = executor(&state, &user, &id)?;
    let changes = exec.changes().await.map_err(executor_error)?;
    Ok(Json(serde_json::to_value(changes).map_err(ApiError::internal)?))
}

#[derive(Debug, Deserialize)]
pub struct FilesQuery {
    #[serde(default)]
    pub path: Option<String>,
}

/// `GET /conversations/{id}/files?path=`.
pub async fn files(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let path = q.path.unwrap_or_default();
    if path.len() > 4096 || path.contains('\0') {
        return Err(ApiError::bad_request("invalid_query", "`path` must be a path of at most 4096 bytes"));
    }
    let exec = executor(&state, &user, &id)?;
    let listing = exec.files(&path).await.map_err(executor_error)?;
    Ok(Json(serde_json::to_value(listing).map_err(ApiError::internal)?))
}
