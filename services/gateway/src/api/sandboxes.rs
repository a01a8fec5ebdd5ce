//! `/api/v1/sandboxes` and `/api/v1/sandbox-specs`, and the running-sandbox quotas the API
//! enforces before asking for a (re)start. The supervisor enforces the same limits as a
//! backstop; a refusal never pauses anyone else's sandbox.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use halyard_platform::{bus, telemetry};
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::system::SystemRecord;
use halyard_protocol::{Envelope, SandboxId, UserId, subjects};

use crate::auth::User;
use crate::http::api_doc::{Accepted, Refusals};
use crate::http::checks::parse_id;
use crate::http::error::ApiError;
use crate::http::paging::{PageQuery, page_params};
use crate::read_model::store::SandboxView;
use crate::state::AppState;

/// A sandbox as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Sandbox {
    pub id: String,
    pub conversation_id: Option<String>,
    /// `process` or `docker`.
    pub kind: String,
    pub spec: Option<String>,
    /// `STARTING`, `RUNNING`, `PAUSED`, `HIBERNATED`, `ERROR`, `MISSING`, `DELETED`
    pub status: String,
    pub detail: Option<String>,
    /// What the sandbox serves: `{"name", "url"}` each.
    pub exposed_urls: Vec<Value>,
    pub workspace: String,
    /// Taken ready-made from the warm pool.
    pub from_pool: bool,
    pub created_at: String,
    pub updated_at: String,
}

impl From<&SandboxView> for Sandbox {
    fn from(s: &SandboxView) -> Self {
        Self {
            id: s.id.clone(),
            conversation_id: s.conversation_id.clone(),
            kind: s.kind.clone(),
            spec: s.spec.clone(),
            status: s.status.clone(),
            detail: s.detail.clone(),
            exposed_urls: s.exposed_urls.clone(),
            workspace: s.workspace.clone(),
            from_pool: s.from_pool,
            created_at: s.created_at.clone(),
            updated_at: s.updated_at.clone(),
        }
    }
}

/// A page of sandboxes, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SandboxPage {
    pub items: Vec<Sandbox>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// What sandboxes are made from.
#[derive(Debug, Serialize, ToSchema)]
pub struct SandboxSpecs {
    /// `process` or `docker`.
    pub kind: String,
    /// Sandboxes kept started and waiting, per spec.
    pub pool_size: usize,
    /// Seconds without activity before a sandbox is paused (0: never).
    pub idle_pause_secs: u64,
    /// Seconds without activity before a sandbox hibernates: its processes end, its files stay,
    /// and the next message or look at it starts it again (0: never).
    pub idle_stop_secs: u64,
    pub items: Vec<SandboxSpec>,
}

/// One spec: its base image, limits and the runtime image prepared from it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SandboxSpec {
    pub name: String,
    /// The one a start without `sandbox_spec` gets.
    pub default: bool,
    pub base_image: String,
    pub working_dir: String,
    /// `uid:gid` the sandbox's commands run as.
    pub user: String,
    pub env: std::collections::BTreeMap<String, String>,
    pub limits: SpecLimits,
    /// The container runtime: `runc` or `gvisor`.
    pub runtime: String,
    /// The image last prepared for Docker sandboxes, if any.
    pub runtime_image: Option<RuntimeImage>,
    pub pool: PoolState,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SpecLimits {
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RuntimeImage {
    pub image: String,
    pub lock_tag: String,
    pub versioned_tag: String,
    /// `built`, `reused`, ...
    pub outcome: String,
    pub build_ms: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PoolState {
    pub ready: u32,
    pub target: u32,
}

fn owned(state: &AppState, user: &UserId, raw: &str) -> Result<(SandboxId, SandboxView), ApiError> {
    let id: SandboxId = parse_id(raw, "id")?;
    match state.store.sandbox(id)? {
        Some(s) if s.owner == user.0 => Ok((id, s)),
        _ => Err(ApiError::not_found("sandbox")),
    }
}

/// The caller's sandboxes, newest first.
#[utoipa::path(get, path = "/sandboxes", tag = "sandboxes", params(PageQuery), responses((status = 200, body = SandboxPage), Refusals))]
pub async fn list(
    State(state): State<AppState>,
    User(user): User,
    query: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SandboxPage>, ApiError> {
    let Query(q) = query?;
    let (limit, cursor) = page_params(&q)?;
    let (items, next) = state.store.sandboxes_of(&user.0, cursor.as_deref(), limit)?;
    Ok(Json(SandboxPage {
        items: items.iter().map(Sandbox::from).collect(),
        next_cursor: next.map(|n| halyard_platform::keys::to_hex(&n)),
    }))
}

/// One sandbox of the caller's.
#[utoipa::path(get, path = "/sandboxes/{id}", tag = "sandboxes", params(("id" = String, Path, format = Uuid)), responses((status = 200, body = Sandbox), Refusals))]
pub async fn get_one(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<Sandbox>, ApiError> {
    let (_, s) = owned(&state, &user, &id)?;
    Ok(Json(Sandbox::from(&s)))
}

async fn command(state: &AppState, cmd: SandboxCommand) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let id = cmd.sandbox_id();
    let mut env = Envelope::new(cmd, halyard_platform::now_ms());
    env.trace = Some(telemetry::new_trace());
    bus::publish(&state.js, subjects::sandbox_command(id), &env).await?;
    Ok((StatusCode::ACCEPTED, Json(Accepted::yes())))
}

/// Pauses a sandbox: its processes stop, its workspace stays.
#[utoipa::path(post, path = "/sandboxes/{id}/pause", tag = "sandboxes", params(("id" = String, Path, format = Uuid)), responses((status = 202, body = Accepted), Refusals))]
pub async fn pause(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (id, _) = owned(&state, &user, &id)?;
    command(&state, SandboxCommand::Pause { sandbox_id: id }).await
}

/// Resumes a paused sandbox, within the running limits (429 `sandbox_quota_user` or
/// `sandbox_quota_total` past one).
#[utoipa::path(post, path = "/sandboxes/{id}/resume", tag = "sandboxes", params(("id" = String, Path, format = Uuid)), responses((status = 202, body = Accepted), Refusals))]
pub async fn resume(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (id, s) = owned(&state, &user, &id)?;
    if !s.is_running() {
        crate::auth::quota::check_quota(&state, &user)?;
    }
    command(&state, SandboxCommand::Resume { sandbox_id: id }).await
}

/// Deletes a sandbox: the container and the workspace volume go; the conversation stays, and
/// its agent can no longer act.
#[utoipa::path(delete, path = "/sandboxes/{id}", tag = "sandboxes", params(("id" = String, Path, format = Uuid)), responses((status = 202, body = Accepted), Refusals))]
pub async fn delete(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (id, _) = owned(&state, &user, &id)?;
    command(&state, SandboxCommand::Delete { sandbox_id: id }).await
}

/// What sandboxes are made from, with each runtime image as last prepared.
#[utoipa::path(get, path = "/sandbox-specs", tag = "sandboxes", responses((status = 200, body = SandboxSpecs), Refusals))]
pub async fn specs(State(state): State<AppState>, User(_): User) -> Result<Json<SandboxSpecs>, ApiError> {
    let cfg = &state.config.sandbox;
    let mut items = Vec::new();
    for spec in cfg.specs() {
        let runtime_image =
            match bus::last_record::<SystemRecord>(&state.js, subjects::SYSTEM_STREAM, &subjects::image_record(&spec.name)).await? {
                Some((_, Envelope { payload: SystemRecord::SandboxImage(i), .. })) => Some(RuntimeImage {
                    image: i.image,
                    lock_tag: i.lock_tag,
                    versioned_tag: i.versioned_tag,
                    outcome: serde_json::to_value(i.outcome).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                    build_ms: i.build_ms,
                }),
                _ => None,
            };
        let pool = match bus::last_record::<SystemRecord>(&state.js, subjects::SYSTEM_STREAM, &subjects::pool_record(&spec.name)).await? {
            Some((_, Envelope { payload: SystemRecord::SandboxPool { ready, target, .. }, .. })) => PoolState { ready, target },
            _ => PoolState { ready: 0, target: u32::try_from(cfg.pool_size).unwrap_or(u32::MAX) },
        };
        items.push(SandboxSpec {
            default: spec.name == cfg.default_spec,
            limits: SpecLimits { memory_mb: spec.memory_mb, cpus: spec.cpus, pids: spec.pids_limit },
            runtime: spec.runtime,
            name: spec.name,
            base_image: spec.base_image,
            working_dir: spec.working_dir,
            user: spec.user,
            env: spec.env,
            runtime_image,
            pool,
        });
    }
    Ok(Json(SandboxSpecs {
        kind: cfg.kind.clone(),
        pool_size: cfg.pool_size,
        idle_pause_secs: cfg.idle_pause_secs,
        idle_stop_secs: cfg.idle_stop_secs,
        items,
    }))
}
