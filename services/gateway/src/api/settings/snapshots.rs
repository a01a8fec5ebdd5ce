//! Environment snapshots as their owners and organizations see them: listed with their sizes
//! against the quotas, and deleted (the next start of their family sets up again: a rebuild).
//! The supervisor that holds a deleted snapshot's files or image removes them once its entry is
//! gone ([`halyard_protocol::environment::SNAPSHOT_BUCKET`]).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use halyard_platform::bus;
use halyard_protocol::environment::{self, Snapshot, SnapshotStatus};
use halyard_protocol::system::SystemRecord;
use halyard_protocol::{Envelope, subjects};

use crate::audit::{self, Client};
use crate::auth::User;
use crate::auth::access::load_managed;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::state::AppState;

/// A snapshot of an environment after setup.
#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotView {
    pub id: String,
    /// `ready`, or `refused` (not kept: `detail` says why; the next start sets up again).
    pub status: String,
    pub detail: Option<String>,
    pub owner: String,
    pub org: Option<String>,
    pub environment: String,
    pub repository: Option<String>,
    pub branch: Option<String>,
    /// `process` or `docker`.
    pub kind: String,
    /// The sandbox host that holds it.
    pub node: String,
    pub size_bytes: u64,
    /// How long setup took when it was made.
    pub setup_secs: f64,
    pub created_at: String,
    pub expires_at: Option<String>,
    /// Container sandboxes its host keeps started from it (its environment's `pool_size`).
    pub pool_size: u32,
    /// How many of those are ready now.
    pub pool_ready: u32,
    /// The end of what setup printed when it was made (secrets masked).
    pub setup_log: String,
}

/// Snapshots with what they take against the quota.
#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotList {
    pub items: Vec<SnapshotView>,
    /// Bytes the ready ones take together.
    pub used_bytes: u64,
    /// The quota they count against, in bytes (absent: none).
    pub quota_bytes: Option<u64>,
}

fn view(s: &Snapshot) -> SnapshotView {
    let ready = s.status == SnapshotStatus::Ready;
    SnapshotView {
        id: s.snapshot_id.clone(),
        status: if ready { "ready" } else { "refused" }.into(),
        detail: s.detail.clone(),
        owner: s.owner.0.clone(),
        org: s.org.clone(),
        environment: s.environment.clone(),
        repository: s.repository.clone(),
        branch: s.branch.clone(),
        kind: s.kind.clone(),
        node: s.node.clone(),
        size_bytes: s.size_bytes,
        setup_secs: s.setup_secs,
        created_at: halyard_protocol::rfc3339(s.created_ms),
        expires_at: ready.then(|| halyard_protocol::rfc3339(s.expires_ms)),
        pool_size: s.pool_size,
        pool_ready: 0,
        setup_log: s.setup_log.clone(),
    }
}

/// The pool of each listed snapshot as its host last said.
async fn with_pools(state: &AppState, mut list: SnapshotList) -> Result<SnapshotList, ApiError> {
    for item in list.items.iter_mut().filter(|i| i.pool_size > 0) {
        let subject = subjects::pool_record(&environment::pool_key(&item.id));
        if let Some((_, Envelope { payload: SystemRecord::SandboxPool { ready, .. }, .. })) =
            bus::last_record::<SystemRecord>(&state.js, subjects::SYSTEM_STREAM, &subject).await?
        {
            item.pool_ready = ready;
        }
    }
    Ok(list)
}

async fn listed(state: &AppState, filter: &str) -> Result<Vec<(String, Snapshot)>, ApiError> {
    halyard_platform::snapshots::list(&state.snapshots, filter).await.map_err(|e| {
        tracing::error!(error = %e, "environment snapshots");
        ApiError::unavailable("the snapshot store did not answer; try again")
    })
}

fn list_of(found: Vec<(String, Snapshot)>, quota_mb: u64) -> SnapshotList {
    let mut found: Vec<Snapshot> = found.into_iter().map(|(_, s)| s).collect();
    found.sort_by_key(|s| std::cmp::Reverse(s.created_ms));
    let used_bytes = found.iter().filter(|s| s.status == SnapshotStatus::Ready).map(|s| s.size_bytes).sum();
    SnapshotList { items: found.iter().map(view).collect(), used_bytes, quota_bytes: (quota_mb > 0).then_some(quota_mb << 20) }
}

/// Your environment snapshots, newest first, with what they take against your quota.
#[utoipa::path(get, path = "/environments/snapshots", tag = "environments", responses((status = 200, body = SnapshotList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User) -> Result<Json<SnapshotList>, ApiError> {
    let found = listed(&state, &environment::owner_filter(&user)).await?;
    Ok(Json(with_pools(&state, list_of(found, state.config.sandbox.snapshot_quota_user_mb)).await?))
}

/// Deletes one of your snapshots: the next start of its environment on its repository sets up
/// again and makes a new one.
#[utoipa::path(delete, path = "/environments/snapshots/{id}", tag = "environments", params(("id" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let found = listed(&state, &environment::owner_filter(&user)).await?;
    let (key, snap) = found.into_iter().find(|(_, s)| s.snapshot_id == id).ok_or_else(|| ApiError::not_found("snapshot"))?;
    state.snapshots.delete(&key).await.map_err(|e| {
        tracing::error!(error = %e, "environment snapshots");
        ApiError::unavailable("the snapshot store did not answer; try again")
    })?;
    let mut action = audit::Action::new(&user, "environment.snapshot.delete", &id)
        .detail(serde_json::json!({"environment": snap.environment, "size_bytes": snap.size_bytes}));
    if let Some(org) = &snap.org {
        action = action.org(org);
    }
    action.send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

/// The snapshots made in the organization (owners and admins), against its quota.
#[utoipa::path(get, path = "/orgs/{org}/environments/snapshots", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = SnapshotList), Refusals))]
pub async fn list_org(State(state): State<AppState>, User(user): User, Path(org): Path<String>) -> Result<Json<SnapshotList>, ApiError> {
    let (_, org) = load_managed(&state, &user, &org, "only the organization's owners and admins see its snapshots")?;
    let found = listed(&state, &environment::org_filter(&org.name)).await?;
    Ok(Json(with_pools(&state, list_of(found, state.config.sandbox.snapshot_quota_org_mb)).await?))
}
