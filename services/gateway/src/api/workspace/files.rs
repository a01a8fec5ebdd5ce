//! A conversation's workspace as its owner sees it: what changed (`GET
//! /conversations/{id}/changes`) and its files (`GET /conversations/{id}/files?path=`); one
//! file's bytes down (`GET .../files/raw?path=`) or up (`PUT .../files?path=`, the raw body) and
//! the whole workspace as a `tar.gz` (`GET .../archive`), streamed through; all read by
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
use halyard_protocol::executor::{ChangesResponse, FilesResponse, MAX_UPLOAD_BYTES};
use halyard_protocol::system::AGENT_SERVER;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::User;
use crate::domain::sandbox::running_sandbox;
use crate::http::api_doc::{Conflict, Refusals, SandboxFailure};
use crate::http::error::ApiError;
use crate::read_model::store::SandboxView;
use crate::state::AppState;
use halyard_protocol::SandboxId;

/// The executor of the conversation's sandbox, if it runs.
pub async fn executor(state: &AppState, user: &halyard_protocol::UserId, id: &str) -> Result<ExecutorClient, ApiError> {
    let (sandbox_id, sandbox) = running_sandbox(state, user, id, "look into its workspace").await?;
    executor_of(state, sandbox_id, &sandbox)
}

/// The executor of a running sandbox, with its session key.
pub fn executor_of(state: &AppState, sandbox_id: SandboxId, sandbox: &SandboxView) -> Result<ExecutorClient, ApiError> {
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
        ExecutorError::Rejected { code, message, .. } if code == "file_too_large" => too_large(message),
        ExecutorError::Rejected { status, message, .. } if status < 500 && status != 401 => ApiError::bad_request("invalid_path", message),
        // It answered and said what failed: that is for the user to read, and trying again will
        // not change it.
        ExecutorError::Rejected { status, code, message } if status >= 500 && code != "executor_error" => {
            tracing::warn!(status, code, error = %message, "the sandbox's executor failed");
            ApiError::new(axum::http::StatusCode::BAD_GATEWAY, "sandbox_error", format!("the sandbox could not do it: {message}"))
        }
        other => {
            tracing::warn!(error = %other, "the sandbox's executor failed");
            ApiError::unavailable("the sandbox did not answer; try again shortly")
        }
    }
}

/// `shown` with `user`'s secret values masked, and those of the organization conversation `id`
/// is in; an error (and nothing shown) if they cannot be read.
async fn masked<T: Serialize + DeserializeOwned>(
    state: &AppState,
    user: &halyard_protocol::UserId,
    id: &str,
    shown: T,
) -> Result<Json<T>, ApiError> {
    let mut value = serde_json::to_value(shown).map_err(ApiError::internal)?;
    let org = crate::auth::access::owned(state, user, id)?.1.start_request.and_then(|r| r.org);
    let opened = halyard_platform::user_secrets::open(&state.user_kv, &state.vault, user, org.as_deref()).await.map_err(|e| {
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
    Ok(Json(serde_json::from_value(value).map_err(ApiError::internal)?))
}

/// What changed in the workspace: `git status` and `git diff` where it is a repository, else
/// the files the agent's editor changed (masked; the sandbox must be running: 409 otherwise).
#[utoipa::path(get, path = "/conversations/{id}/changes", tag = "workspace", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = ChangesResponse), Refusals, Conflict, SandboxFailure))]
pub async fn changes(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<ChangesResponse>, ApiError> {
    // Its owner's, or one shared with an organization the user is in: masked as its owner's.
    let (_, c) = crate::auth::access::readable(&state, &user, &id)?;
    let theirs = c.owner == user.0;
    changes_of(&state, &halyard_protocol::UserId(c.owner), &id, theirs).await
}

/// What changed in `user`'s conversation `id`, masked with `user`'s secrets; a hibernated
/// sandbox is woken only when `wake` (its owner is the one asking).
pub(crate) async fn changes_of(
    state: &AppState,
    user: &halyard_protocol::UserId,
    id: &str,
    wake: bool,
) -> Result<Json<ChangesResponse>, ApiError> {
    let (sandbox_id, sandbox) = crate::domain::sandbox::running_sandbox_waking(state, user, id, "look into its workspace", wake).await?;
    let exec = executor_of(state, sandbox_id, &sandbox)?;
    let changes = exec.changes().await.map_err(executor_error)?;
    masked(state, user, id, changes).await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FilesQuery {
    /// Relative to the workspace (its root when absent), at most 4096 bytes.
    #[serde(default)]
    #[param(max_length = 4096)]
    pub path: Option<String>,
}

/// A file uploaded.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Uploaded {
    /// Where it is now, relative to the workspace.
    pub path: String,
    pub size: u64,
}

/// A directory's entries or a file's content (capped, masked), as the agent sees them.
#[utoipa::path(get, path = "/conversations/{id}/files", tag = "workspace", params(("id" = String, Path, format = Uuid), FilesQuery),
    responses((status = 200, body = FilesResponse), Refusals, Conflict, SandboxFailure))]
pub async fn files(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<FilesResponse>, ApiError> {
    let Query(q) = query?;
    let path = q.path.unwrap_or_default();
    check_path(&path)?;
    let exec = executor(&state, &user, &id).await?;
    let listing = exec.files(&path).await.map_err(executor_error)?;
    masked(&state, &user, &id, listing).await
}

/// A path the filesystem can take: at most 4096 bytes, no part over 255, no NUL (refused here in
/// words rather than failing in the sandbox).
fn check_path(path: &str) -> Result<(), ApiError> {
    if path.len() > 4096 || path.contains('\0') || path.split('/').any(|part| part.len() > 255) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "`path` must be a path of at most 4096 bytes, each of its parts at most 255, without NUL",
        ));
    }
    Ok(())
}

fn too_large(why: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::PAYLOAD_TOO_LARGE,
        "file_too_large",
        format!(
            "{why}; files up to {} MiB can be uploaded (put larger ones in the repository, or fetch them from the sandbox)",
            MAX_UPLOAD_BYTES >> 20
        ),
    )
}

/// A name for `Content-Disposition`: the path's last part, without what would break the header.
fn attachment(path: &str) -> String {
    let name = path.rsplit('/').find(|p| !p.is_empty()).unwrap_or("file");
    let safe: String = name.chars().filter(|c| !c.is_control() && *c != '"' && *c != '\\').collect();
    format!("attachment; filename=\"{safe}\"")
}

/// What the executor sends, streamed on with `headers`.
fn streamed(resp: reqwest::Response, headers: Vec<(axum::http::HeaderName, String)>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let length = resp.content_length();
    let mut response = axum::body::Body::from_stream(resp.bytes_stream()).into_response();
    for (name, value) in headers.into_iter().chain(length.map(|l| (axum::http::header::CONTENT_LENGTH, l.to_string()))) {
        if let Ok(v) = axum::http::HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, v);
        }
    }
    response
}

/// One file, as it is, streamed.
#[utoipa::path(get, path = "/conversations/{id}/files/raw", tag = "workspace", params(("id" = String, Path, format = Uuid), FilesQuery),
    responses((status = 200, description = "the file's bytes", content_type = "application/octet-stream", body = Vec<u8>), Refusals, Conflict, SandboxFailure))]
pub async fn download(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    crate::auth::access::owned(&state, &user, &id)?;
    let Query(q) = query?;
    let path = q.path.unwrap_or_default();
    check_path(&path)?;
    let resp = executor(&state, &user, &id).await?.download(&path).await.map_err(executor_error)?;
    let headers = vec![
        (axum::http::header::CONTENT_TYPE, "application/octet-stream".to_owned()),
        (axum::http::header::CONTENT_DISPOSITION, attachment(&path)),
    ];
    Ok(streamed(resp, headers))
}

/// The whole workspace as a gzipped tar, made as it is sent (never whole in memory).
#[utoipa::path(get, path = "/conversations/{id}/archive", tag = "workspace", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, description = "the workspace as a tar.gz", content_type = "application/gzip", body = Vec<u8>), Refusals, Conflict, SandboxFailure))]
pub async fn archive(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
) -> Result<axum::response::Response, ApiError> {
    let (conversation, _) = crate::auth::access::owned(&state, &user, &id)?;
    let resp = executor(&state, &user, &id).await?.archive().await.map_err(executor_error)?;
    let headers = vec![
        (axum::http::header::CONTENT_TYPE, "application/gzip".to_owned()),
        (axum::http::header::CONTENT_DISPOSITION, format!("attachment; filename=\"workspace-{conversation}.tar.gz\"")),
    ];
    Ok(streamed(resp, headers))
}

/// The raw body becomes the file at `path` (missing folders are made, inside the workspace
/// only), streamed to the sandbox; over 100 MiB, 413 `file_too_large` and nothing changes.
#[utoipa::path(put, path = "/conversations/{id}/files", tag = "workspace", params(("id" = String, Path, format = Uuid), FilesQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "the file's bytes"),
    responses((status = 201, body = Uploaded), (status = 413, description = "larger than 100 MiB", body = crate::http::api_doc::ErrorBody), Refusals, Conflict, SandboxFailure))]
pub async fn upload(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<(axum::http::StatusCode, Json<Uploaded>), ApiError> {
    use futures::StreamExt;
    // Another user's conversation is 404 before anything about the request is judged.
    crate::auth::access::owned(&state, &user, &id)?;
    let Query(q) = query?;
    let path = q.path.filter(|p| !p.trim().is_empty()).ok_or_else(|| ApiError::bad_request("invalid_query", "give the file's `path`"))?;
    check_path(&path)?;
    let declared = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_UPLOAD_BYTES) {
        return Err(too_large("this file is too large"));
    }
    let client = executor(&state, &user, &id).await?;
    // Counted as it passes: a body longer than it said (or that said nothing) is cut off at the
    // limit, and the sandbox discards what it got.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = seen.clone();
    let limited = body.into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        let total = counter.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::SeqCst) + chunk.len() as u64;
        if total > MAX_UPLOAD_BYTES {
            return Err(std::io::Error::other("over the upload limit"));
        }
        Ok(chunk)
    });
    match client.upload(&path, reqwest::Body::wrap_stream(limited)).await {
        Ok(v) => Ok((axum::http::StatusCode::CREATED, Json(serde_json::from_value(v).map_err(ApiError::internal)?))),
        Err(_) if seen.load(std::sync::atomic::Ordering::SeqCst) > MAX_UPLOAD_BYTES => Err(too_large("this file is too large")),
        Err(e) => Err(executor_error(e)),
    }
}
