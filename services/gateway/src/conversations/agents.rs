//! `GET /api/v1/agents`: the agents a conversation can have on this deployment (Halyard's own,
//! and the third-party agents of [`halyard_protocol::agents`]), and for each one that cannot
//! run for this user, why: not installed (`infra/install-agents.sh` was not run), or no LLM
//! profile of theirs speaks a wire it can.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use halyard_protocol::agents::{self, HALYARD};

use crate::AppState;
use crate::accounts::auth::User;
use crate::api_doc::Refusals;
use crate::error::ApiError;

/// One agent.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentView {
    /// What a start's `agent` names it by.
    pub name: String,
    pub title: String,
    /// The LLM profile providers it can be pointed at (empty: any; Halyard's own).
    pub wires: Vec<String>,
    /// Whether a conversation of yours can have it now.
    pub available: bool,
    /// Why not, when it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Your profiles it can use (the operator's default model as `default`).
    pub profiles: Vec<String>,
    /// New conversations of yours have it when their start names none.
    pub default: bool,
}

/// The agents.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentList {
    pub items: Vec<AgentView>,
}

/// `agent` names one this deployment knows.
pub fn check_agent(name: &str) -> Result<(), ApiError> {
    if name == HALYARD || agents::kind(name).is_some() {
        return Ok(());
    }
    Err(ApiError::bad_request(
        "unknown_agent",
        format!("`agent` {name:?} is none of {}: see GET /api/v1/agents", agents::names().join(", ")),
    ))
}

/// A start with third-party agent `name` and LLM profile `profile` can run: the agent is
/// installed, and the profile (one of the user's; the deployment's default when absent) speaks a
/// wire the agent speaks. An organization's profile (`@org/name`) is checked by the run.
pub async fn check_runnable(state: &AppState, user: &halyard_protocol::UserId, name: &str, profile: Option<&str>) -> Result<(), ApiError> {
    let Some(kind) = agents::kind(name) else { return check_agent(name) };
    let dir = state.config.agent.agents_dir.trim_end_matches('/');
    if !std::path::Path::new(&format!("{dir}/{}", kind.launcher)).exists() {
        let message =
            format!("{} is not installed on this deployment (infra/install-agents.sh installs it): see GET /api/v1/agents", kind.title);
        return Err(ApiError::bad_request("agent_not_installed", message));
    }
    let wire = match profile {
        Some(p) if p.starts_with('@') => return Ok(()),
        Some(p) => crate::settings::llm_profiles::profiles(state, user).await?.profiles.get(p).map(|p| p.provider.clone()),
        None => Some(state.config.llm.provider.clone()),
    };
    match wire {
        Some(w) if !kind.wires.contains(&w.as_str()) => {
            let which = profile.map_or("the deployment's default LLM".to_owned(), |p| format!("LLM profile `{p}`"));
            Err(ApiError::bad_request(
                "agent_profile_mismatch",
                format!(
                    "{} speaks {}; {which} speaks `{w}`: name a profile whose provider is {} in `llm_profile`",
                    kind.title,
                    kind.wires.join(" or "),
                    kind.wires.join(" or ")
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// What this deployment can run, and why an agent cannot.
#[utoipa::path(get, path = "/agents", tag = "conversations", responses((status = 200, body = AgentList), Refusals))]
pub async fn list_agents(State(state): State<AppState>, User(user): User) -> Result<Json<AgentList>, ApiError> {
    let settings = crate::settings::defaults::load(&state, &user).await?;
    let profiles = crate::settings::llm_profiles::profiles(&state, &user).await?;
    let mut wired: Vec<(String, String)> = vec![("default".into(), state.config.llm.provider.clone())];
    wired.extend(profiles.profiles.iter().map(|(name, p)| (name.clone(), p.provider.clone())));
    let default = settings.agent.unwrap_or_else(|| HALYARD.into());
    let mut items = vec![AgentView {
        name: HALYARD.into(),
        title: "Halyard".into(),
        wires: Vec::new(),
        available: true,
        why: None,
        profiles: wired.iter().map(|(n, _)| n.clone()).collect(),
        default: default == HALYARD,
    }];
    let dir = state.config.agent.agents_dir.trim_end_matches('/');
    for kind in agents::KINDS {
        let usable: Vec<String> = wired.iter().filter(|(_, w)| kind.wires.contains(&w.as_str())).map(|(n, _)| n.clone()).collect();
        let installed = std::path::Path::new(&format!("{dir}/{}", kind.launcher)).exists();
        let why = if !installed {
            Some(format!("not installed in {dir} (infra/install-agents.sh installs {})", kind.packages.join(" and ")))
        } else if usable.is_empty() {
            Some(format!("no LLM profile of yours speaks {}: add one (PUT /api/v1/llm-profiles/{{name}})", kind.wires.join(" or ")))
        } else {
            None
        };
        items.push(AgentView {
            name: kind.name.into(),
            title: kind.title.into(),
            wires: kind.wires.iter().map(|w| (*w).to_owned()).collect(),
            available: why.is_none(),
            why,
            profiles: usable,
            default: default == kind.name,
        });
    }
    Ok(Json(AgentList { items }))
}
