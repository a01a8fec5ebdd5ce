//! Environments ([`halyard_protocol::environment`]): a user's own (`/environments/{name}`), an
//! organization's (`/orgs/{org}/environments/{name}`, set by its owners and admins, named
//! `@<org>/<name>` in its conversations) and the deployment's (`/admin/environments/{name}`, set by
//! administrators, named `/<name>`). A start names one in `environment`, or gets its
//! organization's default, else the deployment's. Writing one never touches the snapshots made
//! from the old definition: its next start sets up again (a new family), and the old snapshots
//! expire.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::UserId;
use halyard_protocol::environment::{self, Environment, Environments};

use crate::audit::{self, Client};
use crate::auth::access::{forbidden, load, load_managed};
use crate::auth::{Recent, User};
use crate::domain::environments::{Parts, checked, resize_pools};
use crate::domain::user_store::{self, check_name};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

const MANAGERS: &str = "only the organization's owners and admins set its environments";
const MAX_ENVIRONMENTS: usize = 50;

/// An environment as written.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = EnvironmentUpdate)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentBody {
    /// Shell commands run once in the workspace after the clone (before the repository's own
    /// `.openhands/setup.sh`); what they leave is kept as a snapshot.
    #[serde(default)]
    pub setup: Vec<String>,
    /// Shell commands run on every start, after setup or a snapshot.
    #[serde(default)]
    pub post_start: Vec<String>,
    /// Variables setup and `post_start` run with.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of the starter's secrets setup runs with (as variables of the same name): gone
    /// before the agent's first step, and never in a snapshot.
    #[serde(default)]
    pub setup_secrets: Vec<String>,
    /// Files of the repository whose contents key the snapshot (lock files): setup runs again
    /// only when one changes. Empty: the branch's head commit keys it.
    #[serde(default)]
    pub cache_key: Vec<String>,
    /// How long a snapshot is started from (60 s to 90 days; the deployment's
    /// `HALYARD_SNAPSHOT_TTL_SECS` if absent).
    #[serde(default)]
    pub snapshot_ttl_secs: Option<u64>,
    /// An organization's or the deployment's: whether its conversations get it when they name
    /// none (one default per scope: setting it clears the others').
    #[serde(default)]
    pub default: bool,
    /// Container sandboxes kept started from each of its snapshots (0 to 10), so that the next
    /// starts take one ready; changed at once for its existing snapshots.
    #[serde(default)]
    pub pool_size: u32,
    /// Containers run on this image (one present on the engine: no registry is reachable)
    /// instead of their spec's, with Halyard's executor added.
    #[serde(default)]
    pub image: Option<String>,
    /// Or on one built from this Dockerfile of the repository (its directory is the context
    /// unless `build_context` says).
    #[serde(default)]
    pub dockerfile: Option<String>,
    #[serde(default)]
    pub build_context: Option<String>,
    /// The user its containers run as: a user of the image, or `uid[:gid]`.
    #[serde(default)]
    pub user: Option<String>,
    /// The sandbox spec its conversations are made from when the start names none (one of the
    /// deployment's: their limits and network class are the operator's).
    #[serde(default)]
    pub spec: Option<String>,
    /// The container runtime its sandboxes run under: `runc` or `gvisor` (a user-space kernel
    /// between the agent and the host's). The operator's first spec with it, unless `spec`
    /// names one (which must have it).
    #[serde(default)]
    pub runtime: Option<String>,
    /// Limits of its containers, each at most the spec's (`memory_mb`, `cpus`, `pids_limit`).
    #[serde(default)]
    pub resources: environment::Resources,
    /// The network class setup runs on (`open`, `internet` or `none`) when it should not be the
    /// sandbox's own, for example wider to install dependencies: the sandbox is moved back onto
    /// its own before `post_start` and the agent's first step. Container sandboxes.
    #[serde(default)]
    pub setup_egress: Option<String>,
    /// What its conversations' sandboxes may reach by name (`{"allow": [...], "deny": [...],
    /// "mode": "read_only"}`; `*.suffix` wildcards; deny wins), within the organization's and
    /// the deployment's policies: the sandbox then reaches out only through Halyard's proxy,
    /// and every refusal is a `network_blocked` event. Container sandboxes.
    #[serde(default)]
    pub egress: Option<halyard_protocol::egress::EgressPolicy>,
    /// What setup may reach instead of `egress` while it runs (wider, say, to install
    /// dependencies; the organization's policy still holds).
    #[serde(default)]
    pub setup_egress_policy: Option<halyard_protocol::egress::EgressPolicy>,
    /// Ports of the sandbox served as apps (`PORT_<n>` in the conversation's apps), as a dev
    /// container's `forwardPorts`.
    #[serde(default)]
    pub forward_ports: Vec<u16>,
    /// Checks its conversations' work must pass when the agent finishes (as a start's
    /// `verify`), unless the start names its own.
    #[serde(default)]
    pub verify: Vec<halyard_protocol::event::Check>,
}

/// An environment.
#[derive(Debug, Serialize, ToSchema)]
pub struct EnvironmentView {
    /// What a start's `environment` names it by.
    pub name: String,
    /// `user`, `org` or `deployment`.
    pub scope: String,
    pub setup: Vec<String>,
    pub post_start: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub setup_secrets: Vec<String>,
    pub cache_key: Vec<String>,
    pub snapshot_ttl_secs: Option<u64>,
    pub default: bool,
    pub pool_size: u32,
    pub image: Option<String>,
    pub dockerfile: Option<String>,
    pub build_context: Option<String>,
    pub user: Option<String>,
    pub spec: Option<String>,
    pub runtime: Option<String>,
    pub resources: environment::Resources,
    pub setup_egress: Option<String>,
    pub egress: Option<halyard_protocol::egress::EgressPolicy>,
    pub setup_egress_policy: Option<halyard_protocol::egress::EgressPolicy>,
    pub forward_ports: Vec<u16>,
    pub verify: Vec<halyard_protocol::event::Check>,
    pub updated_by: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EnvironmentList {
    pub items: Vec<EnvironmentView>,
}

fn view(name: String, scope: &str, e: &Environment) -> EnvironmentView {
    EnvironmentView {
        name,
        scope: scope.to_owned(),
        setup: e.setup.clone(),
        post_start: e.post_start.clone(),
        env: e.env.clone(),
        setup_secrets: e.setup_secrets.clone(),
        cache_key: e.cache_key.clone(),
        snapshot_ttl_secs: e.snapshot_ttl_secs,
        default: e.default,
        pool_size: e.pool_size,
        image: e.image.clone(),
        dockerfile: e.dockerfile.clone(),
        build_context: e.build_context.clone(),
        user: e.user.clone(),
        spec: e.spec.clone(),
        runtime: e.runtime.clone(),
        resources: e.resources.clone(),
        setup_egress: e.setup_egress.clone(),
        egress: e.egress.clone(),
        setup_egress_policy: e.setup_egress_policy.clone(),
        forward_ports: e.forward_ports.clone(),
        verify: e.verify.clone(),
        updated_by: e.updated_by.clone(),
        updated_at: halyard_protocol::rfc3339(e.updated_ms),
    }
}

fn definition(state: &AppState, name: &str, body: EnvironmentBody, by: &UserId) -> Result<Environment, ApiError> {
    check_name("name", name)?;
    let EnvironmentBody {
        setup,
        post_start,
        env,
        setup_secrets,
        cache_key,
        snapshot_ttl_secs,
        default,
        pool_size,
        image,
        dockerfile,
        build_context,
        user,
        spec,
        runtime,
        resources,
        setup_egress,
        egress,
        setup_egress_policy,
        forward_ports,
        verify,
    } = body;
    let parts = Parts {
        setup,
        post_start,
        env,
        setup_secrets,
        cache_key,
        snapshot_ttl_secs,
        default,
        pool_size,
        image,
        dockerfile,
        build_context,
        user,
        spec,
        runtime,
        resources,
        setup_egress,
        egress,
        setup_egress_policy,
        forward_ports,
        verify,
    };
    checked(parts, by, &state.config.sandbox)
}

/// Stores `env` as `name` under `key` (a default clears the scope's other defaults): whether it
/// is new.
async fn store(state: &AppState, key: &str, name: &str, env: Environment) -> Result<bool, ApiError> {
    user_store::modify(state, key, |s: &mut Environments| {
        let created = !s.environments.contains_key(name);
        if created && s.environments.len() >= MAX_ENVIRONMENTS {
            return Err(ApiError::conflict(
                "too_many_environments",
                format!("{MAX_ENVIRONMENTS} environments are defined here already; delete one first"),
            ));
        }
        if env.default {
            s.environments.values_mut().for_each(|e| e.default = false);
        }
        s.environments.insert(name.to_owned(), env.clone());
        Ok(created)
    })
    .await
}

async fn remove(state: &AppState, key: &str, name: &str) -> Result<(), ApiError> {
    user_store::remove_named(state, key, |s: &mut Environments| &mut s.environments, name, "environment").await
}

fn answer(created: bool, shown: EnvironmentView) -> impl IntoResponse {
    (if created { StatusCode::CREATED } else { StatusCode::OK }, Json(shown))
}

/// Your environments and the deployment's (named `/<name>`).
#[utoipa::path(get, path = "/environments", tag = "environments", responses((status = 200, body = EnvironmentList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User) -> Result<Json<EnvironmentList>, ApiError> {
    let (mine, _) = user_store::load::<Environments>(&state, &environment::user_key(&user)).await?;
    let (deployment, _) = user_store::load::<Environments>(&state, environment::DEPLOYMENT_KEY).await?;
    let mut items: Vec<EnvironmentView> = mine.environments.iter().map(|(n, e)| view(n.clone(), "user", e)).collect();
    items.extend(deployment.environments.iter().map(|(n, e)| view(format!("/{n}"), "deployment", e)));
    Ok(Json(EnvironmentList { items }))
}

/// Creates (201) or replaces (200) one of your environments.
#[utoipa::path(put, path = "/environments/{name}", tag = "environments", params(("name" = String, Path)),
    request_body = EnvironmentBody, responses((status = 200, body = EnvironmentView), (status = 201, body = EnvironmentView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    User(user): User,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<EnvironmentBody>,
) -> Result<impl IntoResponse, ApiError> {
    if body.default {
        return Err(ApiError::bad_request(
            "invalid_field",
            "`default`: only an organization's or the deployment's environment is a default; name yours in a start's `environment`",
        ));
    }
    let env = definition(&state, &name, body, &user)?;
    let shown = view(name.clone(), "user", &env);
    let created = store(&state, &environment::user_key(&user), &name, env).await?;
    resize_pools(&state, &environment::owner_filter(&user), &name, shown.pool_size).await?;
    Ok(answer(created, shown))
}

/// Deletes one of your environments (its snapshots expire, or go with `DELETE
/// /environments/snapshots/{id}`).
#[utoipa::path(delete, path = "/environments/{name}", tag = "environments", params(("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    remove(&state, &environment::user_key(&user), &name).await?;
    resize_pools(&state, &environment::owner_filter(&user), &name, 0).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Creates (201) or replaces (200) an environment of the deployment (administrators), named
/// `/<name>` in starts.
#[utoipa::path(put, path = "/admin/environments/{name}", tag = "admin", params(("name" = String, Path)),
    request_body = EnvironmentBody, responses((status = 200, body = EnvironmentView), (status = 201, body = EnvironmentView), Refusals, BodyRefusals, Conflict))]
pub async fn put_deployment(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<EnvironmentBody>,
) -> Result<impl IntoResponse, ApiError> {
    if !principal.admin {
        return Err(forbidden("only the deployment's administrators set its environments"));
    }
    let env = definition(&state, &name, body, &principal.user)?;
    let shown = view(format!("/{name}"), "deployment", &env);
    let created = store(&state, environment::DEPLOYMENT_KEY, &name, env).await?;
    resize_pools(&state, ">", &shown.name, shown.pool_size).await?;
    let detail = serde_json::json!({"created": created, "default": shown.default});
    audit::Action::new(&principal.user, "environment.put", &name).detail(detail).send(&state, client).await;
    Ok(answer(created, shown))
}

/// Deletes an environment of the deployment (administrators).
#[utoipa::path(delete, path = "/admin/environments/{name}", tag = "admin", params(("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete_deployment(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if !principal.admin {
        return Err(forbidden("only the deployment's administrators set its environments"));
    }
    remove(&state, environment::DEPLOYMENT_KEY, &name).await?;
    resize_pools(&state, ">", &format!("/{name}"), 0).await?;
    audit::Action::new(&principal.user, "environment.delete", &name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

/// The organization's environments (any member), named `@<org>/<name>`.
#[utoipa::path(get, path = "/orgs/{org}/environments", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = EnvironmentList), Refusals))]
pub async fn list_org(State(state): State<AppState>, User(user): User, Path(org): Path<String>) -> Result<Json<EnvironmentList>, ApiError> {
    let (_, org, _) = load(&state, &user, &org)?;
    let (stored, _) = user_store::load::<Environments>(&state, &environment::org_key(&org.name)).await?;
    let items = stored.environments.iter().map(|(n, e)| view(format!("@{}/{n}", org.name), "org", e)).collect();
    Ok(Json(EnvironmentList { items }))
}

/// Creates (201) or replaces (200) an environment of the organization (owners and admins).
#[utoipa::path(put, path = "/orgs/{org}/environments/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    request_body = EnvironmentBody, responses((status = 200, body = EnvironmentView), (status = 201, body = EnvironmentView), Refusals, BodyRefusals, Conflict))]
pub async fn put_org(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((org, name)): Path<(String, String)>,
    ApiJson(body): ApiJson<EnvironmentBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, org) = load_managed(&state, &user, &org, MANAGERS)?;
    let env = definition(&state, &name, body, &user)?;
    let shown = view(format!("@{}/{name}", org.name), "org", &env);
    let created = store(&state, &environment::org_key(&org.name), &name, env).await?;
    resize_pools(&state, &environment::org_filter(&org.name), &shown.name, shown.pool_size).await?;
    let detail = serde_json::json!({"created": created, "default": shown.default});
    audit::Action::new(&user, "org.environment.put", &format!("{}/{name}", org.name))
        .detail(detail)
        .org(&org.name)
        .send(&state, client)
        .await;
    Ok(answer(created, shown))
}

/// Deletes an environment of the organization (owners and admins).
#[utoipa::path(delete, path = "/orgs/{org}/environments/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete_org(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((org, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, org) = load_managed(&state, &user, &org, MANAGERS)?;
    remove(&state, &environment::org_key(&org.name), &name).await?;
    resize_pools(&state, &environment::org_filter(&org.name), &format!("@{}/{name}", org.name), 0).await?;
    audit::Action::new(&user, "org.environment.delete", &format!("{}/{name}", org.name)).org(&org.name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
