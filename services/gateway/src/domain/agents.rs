//! Which agent runs a conversation: a built-in kind or an ACP agent registered for the
//! deployment or the owner's organization, known, installed and able to use the chosen profile.

use halyard_protocol::agents::{self, AgentKind, CustomAgent, HALYARD};

use crate::http::error::ApiError;
use crate::state::AppState;

/// What a conversation's `agent` names.
pub enum Resolved {
    Halyard,
    Kind(&'static AgentKind),
    Custom(CustomAgent),
}

fn unknown(name: &str) -> ApiError {
    ApiError::bad_request(
        "unknown_agent",
        format!("`agent` {name:?} is none of {} nor a registered agent: see GET /api/v1/agents", agents::names().join(", ")),
    )
}

/// The agent `name` names for a conversation in organization `org` (none: outside one): one of
/// Halyard's, one the deployment registered, or (`@<org>/<name>`) one of that organization's.
pub async fn resolve(state: &AppState, name: &str, org: Option<&str>) -> Result<Resolved, ApiError> {
    if name == HALYARD {
        return Ok(Resolved::Halyard);
    }
    if let Some(kind) = agents::kind(name) {
        return Ok(Resolved::Kind(kind));
    }
    let (key, short) = agents::registration(name, org).map_err(|o| {
        ApiError::bad_request(
            "agent_not_in_org",
            format!("agent {name} is organization {o}'s: start the conversation in it (`\"org\": \"{o}\"`)"),
        )
    })?;
    let registered = crate::domain::user_config::registered(state, &key).await?;
    registered.agents.get(short).cloned().map(Resolved::Custom).ok_or_else(|| unknown(name))
}

/// A default agent a user may keep in their settings: one of Halyard's or the deployment's (an
/// organization's is named at the start of a conversation in it).
pub async fn check_default(state: &AppState, name: &str) -> Result<(), ApiError> {
    resolve(state, name, None).await.map(|_| ())
}

/// A start in organization `org` with agent `name` and LLM profile `profile` can run: the agent
/// is known (and installed, for Halyard's kinds), and the profile (one of the user's; the
/// deployment's default when absent) speaks a wire the agent speaks. An organization's profile
/// (`@org/name`) is checked by the run.
pub async fn check_runnable(
    state: &AppState,
    user: &halyard_protocol::UserId,
    name: &str,
    profile: Option<&str>,
    org: Option<&str>,
) -> Result<(), ApiError> {
    let (title, wires) = match resolve(state, name, org).await? {
        Resolved::Halyard => return Ok(()),
        Resolved::Kind(kind) => {
            let dir = state.config.agent.agents_dir.trim_end_matches('/');
            if !std::path::Path::new(&format!("{dir}/{}", kind.launcher)).exists() {
                let message = format!(
                    "{} is not installed on this deployment (infra/install-agents.sh installs it): see GET /api/v1/agents",
                    kind.title
                );
                return Err(ApiError::bad_request("agent_not_installed", message));
            }
            (kind.title.to_owned(), kind.wires.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>())
        }
        Resolved::Custom(agent) => (agent.title, vec![agent.wire]),
    };
    let wire = match profile {
        Some(p) if p.starts_with('@') => return Ok(()),
        Some(p) => crate::domain::user_config::profiles(state, user).await?.profiles.get(p).map(|p| p.provider.clone()),
        None => Some(state.config.llm.provider.clone()),
    };
    match wire {
        Some(w) if !wires.contains(&w) => {
            let which = profile.map_or("the deployment's default LLM".to_owned(), |p| format!("LLM profile `{p}`"));
            let speaks = wires.join(" or ");
            Err(ApiError::bad_request(
                "agent_profile_mismatch",
                format!("{title} speaks {speaks}; {which} speaks `{w}`: name a profile whose provider is {speaks} in `llm_profile`"),
            ))
        }
        _ => Ok(()),
    }
}
