//! Agents a deployment's administrators (`/agents/{name}`) or an organization's owners and admins
//! (`/orgs/{org}/agents/{name}`) register beside the kinds Halyard installs: any program that
//! speaks the Agent Client Protocol on stdio, as a command line run in the sandbox, an
//! environment, and the LLM wire it speaks. Conversations name them in `agent` (an
//! organization's as `@<org>/<name>`, in that organization's conversations only); the agent
//! runner reads the registration when it starts the agent's process. Environment values are
//! shown to nobody (only their names): they reach the sandbox, not the page.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

use halyard_protocol::agents::{self, CustomAgent, CustomAgents};
use halyard_protocol::subjects;

use crate::audit::{self, Client};
use crate::auth::access::{load, load_managed};
use crate::auth::{Recent, User};
use crate::domain::user_config::registered;
use crate::domain::user_store::{self, check_name};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

const MANAGERS: &str = "only the organization's owners and admins register its agents";
const MAX_AGENTS: usize = 50;

/// An agent to register.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = CustomAgentUpdate)]
#[serde(deny_unknown_fields)]
pub struct AgentBody {
    /// Its name in words.
    pub title: String,
    /// A shell command line, run in the workspace as the sandbox's user, that speaks ACP on its
    /// standard input and output.
    pub command: String,
    /// Its environment; in values, `${HALYARD_LLM_BASE}`, `${HALYARD_LLM_TOKEN}` and
    /// `${HALYARD_LLM_MODEL}` are the run's LLM relay, its token and the profile's model.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The LLM wire it speaks: `openai`, `anthropic`, `openai-responses` or `gemini`.
    pub wire: String,
}

/// A registered agent.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = CustomAgent)]
pub struct AgentView {
    /// What a start's `agent` names it by.
    pub name: String,
    pub title: String,
    pub command: String,
    /// The names of its environment's variables (their values are not shown).
    pub env: Vec<String>,
    pub wire: String,
    pub updated_by: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = CustomAgentList)]
pub struct AgentViewList {
    pub items: Vec<AgentView>,
}

pub fn view(name: &str, a: &CustomAgent) -> AgentView {
    AgentView {
        name: name.to_owned(),
        title: a.title.clone(),
        command: a.command.clone(),
        env: a.env.keys().cloned().collect(),
        wire: a.wire.clone(),
        updated_by: a.updated_by.clone(),
        updated_at: halyard_protocol::rfc3339(a.updated_ms),
    }
}

fn checked(name: &str, body: AgentBody, by: &str) -> Result<CustomAgent, ApiError> {
    check_name("name", name)?;
    if name == agents::HALYARD || agents::kind(name).is_some() {
        return Err(ApiError::bad_request("invalid_field", format!("`name` {name:?} is one of Halyard's own agents; choose another")));
    }
    let bad = |m: String| Err(ApiError::bad_request("invalid_field", m));
    if body.title.trim().is_empty() || body.title.len() > 80 {
        return bad("`title`: 1 to 80 characters".into());
    }
    if body.command.trim().is_empty() || body.command.len() > 4096 || body.command.contains('\0') {
        return bad("`command`: a shell command line, 1 to 4096 bytes".into());
    }
    if !halyard_platform::llm::PROVIDERS.contains(&body.wire.as_str()) {
        return bad(format!("`wire` {:?}: one of `{}`", body.wire, halyard_platform::llm::PROVIDERS.join("`, `")));
    }
    let env_name = |k: &str| {
        (1..=64).contains(&k.len())
            && k.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
            && k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    if body.env.len() > 50 || body.env.iter().any(|(k, v)| !env_name(k) || v.len() > 4096 || v.contains('\0')) {
        return bad("`env`: at most 50 variables, named in upper case (A-Z, 0-9, _), values up to 4096 bytes".into());
    }
    let AgentBody { title, command, env, wire } = body;
    Ok(CustomAgent { title, command, env, wire, updated_by: by.to_owned(), updated_ms: halyard_platform::now_ms() })
}

/// Stores `agent` as `name` under `key`: whether it is new.
async fn store(state: &AppState, key: &str, name: &str, agent: CustomAgent) -> Result<bool, ApiError> {
    user_store::modify(state, key, |s: &mut CustomAgents| {
        let created = !s.agents.contains_key(name);
        if created && s.agents.len() >= MAX_AGENTS {
            return Err(ApiError::conflict("too_many_agents", format!("{MAX_AGENTS} agents are registered already; delete one first")));
        }
        s.agents.insert(name.to_owned(), agent.clone());
        Ok(created)
    })
    .await
}

fn admin_only() -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "admin_only", "only the deployment's administrators register its agents")
}

/// Registers (201) or replaces (200) an agent of the deployment (administrators).
#[utoipa::path(put, path = "/agents/{name}", tag = "conversations", params(("name" = String, Path)),
    request_body = AgentBody, responses((status = 200, body = AgentView), (status = 201, body = AgentView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<AgentBody>,
) -> Result<impl IntoResponse, ApiError> {
    if !principal.admin {
        return Err(admin_only());
    }
    let agent = checked(&name, body, &principal.user.0)?;
    let shown = view(&name, &agent);
    let created = store(&state, subjects::CUSTOM_AGENTS_KEY, &name, agent).await?;
    let detail = serde_json::json!({"created": created, "wire": shown.wire, "command": shown.command});
    audit::Action::new(&principal.user, "agent.put", &name).detail(detail).send(&state, client).await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(shown)))
}

/// Removes an agent of the deployment: conversations that have it cannot start it again.
#[utoipa::path(delete, path = "/agents/{name}", tag = "conversations", params(("name" = String, Path)),
    responses((status = 204, description = "removed"), Refusals, Conflict))]
pub async fn delete(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if !principal.admin {
        return Err(admin_only());
    }
    user_store::remove_named(&state, subjects::CUSTOM_AGENTS_KEY, |s: &mut CustomAgents| &mut s.agents, &name, "agent").await?;
    audit::Action::new(&principal.user, "agent.delete", &name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

/// The organization's agents (any member).
#[utoipa::path(get, path = "/orgs/{org}/agents", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = AgentViewList), Refusals))]
pub async fn list_org(State(state): State<AppState>, User(user): User, Path(org): Path<String>) -> Result<Json<AgentViewList>, ApiError> {
    let (_, org, _) = load(&state, &user, &org)?;
    let stored = registered(&state, &subjects::org_agents_key(&org.name)).await?;
    let items = stored.agents.iter().map(|(n, a)| view(&format!("@{}/{n}", org.name), a)).collect();
    Ok(Json(AgentViewList { items }))
}

/// Registers (201) or replaces (200) an agent of the organization (owners and admins), which its
/// conversations name `@<org>/<name>`.
#[utoipa::path(put, path = "/orgs/{org}/agents/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    request_body = AgentBody, responses((status = 200, body = AgentView), (status = 201, body = AgentView), Refusals, BodyRefusals, Conflict))]
pub async fn put_org(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path((org, name)): Path<(String, String)>,
    ApiJson(body): ApiJson<AgentBody>,
) -> Result<impl IntoResponse, ApiError> {
    let user = principal.user;
    let (_, org) = load_managed(&state, &user, &org, MANAGERS)?;
    let agent = checked(&name, body, &user.0)?;
    let shown = view(&format!("@{}/{name}", org.name), &agent);
    let created = store(&state, &subjects::org_agents_key(&org.name), &name, agent).await?;
    let detail = serde_json::json!({"created": created, "wire": shown.wire, "command": shown.command});
    audit::Action::new(&user, "org.agent.put", &format!("{}/{name}", org.name)).detail(detail).org(&org.name).send(&state, client).await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(shown)))
}

/// Removes an agent of the organization.
#[utoipa::path(delete, path = "/orgs/{org}/agents/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "removed"), Refusals, Conflict))]
pub async fn delete_org(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path((org, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let user = principal.user;
    let (_, org) = load_managed(&state, &user, &org, MANAGERS)?;
    user_store::remove_named(&state, &subjects::org_agents_key(&org.name), |s: &mut CustomAgents| &mut s.agents, &name, "agent").await?;
    audit::Action::new(&user, "org.agent.delete", &format!("{}/{name}", org.name)).org(&org.name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
