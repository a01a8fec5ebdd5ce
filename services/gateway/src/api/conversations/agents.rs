//! `GET /api/v1/agents`: the agents a conversation can have on this deployment (Halyard's own,
//! the third-party agents of [`halyard_protocol::agents`], and those its administrators and
//! the user's organizations registered, [`crate::api::settings::custom_agents`]), and for each one
//! that cannot run for this user, why: not installed (`infra/install-agents.sh` was not run), or
//! no LLM profile of theirs speaks a wire it can. And the checks a start makes of its `agent`.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use halyard_protocol::agents::{self, HALYARD};
use halyard_protocol::subjects;

use crate::auth::User;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::state::AppState;

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
    /// Registered by the deployment's administrators or an organization (`@<org>/<name>`, for
    /// that organization's conversations only), not installed by Halyard.
    pub custom: bool,
    /// The subscription login you may hand to it (what the credential is), where it takes one
    /// (`PUT /api/v1/me/agent-logins/{agent}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// You handed it one: its calls carry your login instead of the profile's key.
    pub logged_in: bool,
}

/// The agents.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentList {
    pub items: Vec<AgentView>,
}

/// What this deployment can run, and why an agent cannot.
#[utoipa::path(get, path = "/agents", tag = "conversations", responses((status = 200, body = AgentList), Refusals))]
pub async fn list_agents(State(state): State<AppState>, User(user): User) -> Result<Json<AgentList>, ApiError> {
    let settings = crate::domain::user_config::load(&state, &user).await?;
    let profiles = crate::domain::user_config::profiles(&state, &user).await?;
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
        custom: false,
        login: None,
        logged_in: false,
    }];
    let (logins, _) = crate::domain::user_store::load::<agents::AgentLogins>(&state, &subjects::user_agent_logins_key(&user)).await?;
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
            custom: false,
            login: kind.login.map(str::to_owned),
            logged_in: logins.logins.contains_key(kind.name),
        });
    }
    // The deployment's registered agents, then those of each organization of the user's.
    let mut registered = vec![(String::new(), crate::domain::user_config::registered(&state, subjects::CUSTOM_AGENTS_KEY).await?)];
    for org in state.accounts.orgs_of(&user) {
        let agents = crate::domain::user_config::registered(&state, &subjects::org_agents_key(&org.name)).await?;
        registered.push((format!("@{}/", org.name), agents));
    }
    for (prefix, agents) in registered {
        for (short, agent) in agents.agents {
            let name = format!("{prefix}{short}");
            let usable: Vec<String> = wired.iter().filter(|(_, w)| *w == agent.wire).map(|(n, _)| n.clone()).collect();
            let why = usable
                .is_empty()
                .then(|| format!("no LLM profile of yours speaks {}: add one (PUT /api/v1/llm-profiles/{{name}})", agent.wire));
            let default = default == name;
            items.push(AgentView {
                name,
                title: agent.title,
                wires: vec![agent.wire],
                available: why.is_none(),
                why,
                profiles: usable,
                default,
                custom: true,
                login: None,
                logged_in: false,
            });
        }
    }
    Ok(Json(AgentList { items }))
}
