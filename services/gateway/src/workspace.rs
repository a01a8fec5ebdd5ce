//! A conversation's workspace as its owner sees it: what changed (`GET
//! /conversations/{id}/changes`) and its files (`GET /conversations/{id}/files?path=`), read by
//! the sandbox's own executor with the sandbox's session key, so they see exactly what the agent
//! can, no more, and only inside the workspace (`path_outside_workspace` otherwise). The
//! sandbox must be running; a paused one is not woken for a look.
//!
//! What they show is masked like the log: a secret value the agent wrote into a file is
//! `<secret:NAME>` here too (and at the edge of a file cut at the size cap). If the owner's
//! secrets cannot be read, nothing is shown: masking fails closed.

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
        ExecutorError::Rejected { code, message, .. } if code == "path_outside_workspace" => {
            ApiError::bad_request("path_outside_workspace", message)
        }
        ExecutorError::Rejected { code, message, .. } if code == "not_found" => {
            ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", message)
        }
        ExecutorError::Rejected { status, message, .. } if status < 500 && status != 401 => ApiError::bad_request("invalid_path", message),
        other => {
            tracing::warn!(error = %other, "the sandbox's executor failed");
            ApiError::unavailable("the sandbox did not answer; try again shortly")
        }
    }
}

/// `value` with `user`'s secret values masked; an error (and nothing shown) if they cannot be
/// read.
async fn masked(state: &AppState, user: &halyard_protocol::UserId, mut value: Value) -> Result<Json<Value>, ApiError> {
    let opened = halyard_platform::user_secrets::open(&state.user_kv, &state.vault, user).await.map_err(|e| {
        tracing::error!(user = %user, error = %e, "cannot read a user's secrets to mask the workspace");
        ApiError::unavailable("cannot mask this view now; try again shortly")
    })?;
    let redactor = opened.redactor();
    // A file cut at the size cap may end with the start of a value.
    if value["truncated"] == true {
        if let Some(content) = value["content"].as_str() {
            value["content"] = redactor.redact_edges(content).into();
        }
    }
    redactor.redact_json(&mut value);
    Ok(Json(value))
}

/// `GET /conversations/{id}/changes`.
pub async fn changes(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let exec = executor(&state, &user, &id)?;
    let changes = exec.changes().await.map_err(executor_error)?;
    masked(&state, &user, serde_json::to_value(changes).map_err(ApiError::internal)?).await
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
    masked(&state, &user, serde_json::to_value(listing).map_err(ApiError::internal)?).await
}
