//! `/api/v1/sandboxes` and `/api/v1/sandbox-specs`, and the running-sandbox quotas the API
//! enforces before asking for a (re)start. The supervisor enforces the same limits as a
//! backstop; a refusal never pauses anyone else's sandbox.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use halyard_platform::{bus, telemetry};
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::system::SystemRecord;
use halyard_protocol::{Envelope, SandboxId, TaskId, UserId, subjects};

use crate::AppState;
use crate::accounts::auth::User;
use crate::common::{PageQuery, page_params, parse_id};
use crate::error::ApiError;
use crate::store::SandboxView;

fn sandbox_json(s: &SandboxView) -> Value {
    json!({
        "id": s.id, "conversation_id": s.conversation_id, "kind": s.kind, "spec": s.spec,
        "status": s.status, "detail": s.detail, "exposed_urls": s.exposed_urls, "workspace": s.workspace,
        "from_pool": s.from_pool, "created_at": s.created_at, "updated_at": s.updated_at,
    })
}

fn owned(state: &AppState, user: &UserId, raw: &str) -> Result<(SandboxId, SandboxView), ApiError> {
    let id: SandboxId = parse_id(raw, "id")?;
    match state.store.sandbox(id)? {
        Some(s) if s.owner == user.0 => Ok((id, s)),
        _ => Err(ApiError::not_found("sandbox")),
    }
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

/// `GET /sandboxes`: the caller's sandboxes, newest first.
pub async fn list(
    State(state): State<AppState>,
    User(user): User,
    query: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query?;
    let (limit, cursor) = page_params(&q)?;
    let (items, next) = state.store.sandboxes_of(&user.0, cursor.as_deref(), limit)?;
    Ok(Json(json!({
        "items": items.iter().map(sandbox_json).collect::<Vec<_>>(),
        "next_cursor": next.map(|n| halyard_platform::keys::to_hex(&n)),
    })))
}

/// `GET /sandboxes/{id}`.
pub async fn get_one(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let (_, s) = owned(&state, &user, &id)?;
    Ok(Json(sandbox_json(&s)))
}

async fn command(state: &AppState, cmd: SandboxCommand) -> Result<(StatusCode, Json<Value>), ApiError> {
    let id = cmd.sandbox_id();
    let mut env = Envelope::new(cmd, halyard_platform::now_ms());
    env.trace = Some(telemetry::new_trace());
    bus::publish(&state.js, subjects::sandbox_command(id), &env).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"accepted": true}))))
}

/// `POST /sandboxes/{id}/pause`.
pub async fn pause(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (id, _) = owned(&state, &user, &id)?;
    command(&state, SandboxCommand::Pause { sandbox_id: id }).await
}

/// `POST /sandboxes/{id}/resume`: within the running limits.
pub async fn resume(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (id, s) = owned(&state, &user, &id)?;
    if !s.is_running() {
        check_quota(&state, &user)?;
    }
    command(&state, SandboxCommand::Resume { sandbox_id: id }).await
}

/// `DELETE /sandboxes/{id}`: the container and the workspace volume go; the conversation
/// stays, and its agent can no longer act.
pub async fn delete(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (id, _) = owned(&state, &user, &id)?;
    command(&state, SandboxCommand::Delete { sandbox_id: id }).await
}

/// `GET /sandbox-specs`: what sandboxes are made from, with each runtime image as last prepared.
pub async fn specs(State(state): State<AppState>, User(_): User) -> Result<Json<Value>, ApiError> {
    let cfg = &state.config.sandbox;
    let mut items = Vec::new();
    for spec in cfg.specs() {
        let image = match bus::last_record::<SystemRecord>(&state.js, subjects::SYSTEM_STREAM, &subjects::image_record(&spec.name)).await? {
            Some((_, Envelope { payload: SystemRecord::SandboxImage(i), .. })) => json!({
                "image": i.image, "lock_tag": i.lock_tag, "versioned_tag": i.versioned_tag, "outcome": i.outcome, "build_ms": i.build_ms,
            }),
            _ => Value::Null,
        };
        let pool = match bus::last_record::<SystemRecord>(&state.js, subjects::SYSTEM_STREAM, &subjects::pool_record(&spec.name)).await? {
            Some((_, Envelope { payload: SystemRecord::SandboxPool { ready, target, .. }, .. })) => {
                json!({"ready": ready, "target": target})
            }
            _ => json!({"ready": 0, "target": cfg.pool_size}),
        };
        items.push(json!({
            "name": spec.name, "default": spec.name == cfg.default_spec, "base_image": spec.base_image,
            "working_dir": spec.working_dir, "user": spec.user, "env": spec.env,
            "limits": {"memory_mb": spec.memory_mb, "cpus": spec.cpus, "pids": spec.pids_limit},
            "runtime_image": image, "pool": pool,
        }));
    }
    Ok(Json(json!({"kind": cfg.kind, "pool_size": cfg.pool_size, "idle_pause_secs": cfg.idle_pause_secs, "items": items})))
}
