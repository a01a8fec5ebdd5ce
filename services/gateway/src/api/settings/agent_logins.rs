//! `/api/v1/me/agent-logins`: subscription logins a user hands to one agent kind (a Claude
//! subscription's OAuth token, for Claude Code), in place of an LLM profile's key for that
//! kind's calls. Sealed here (the vault) before it is stored and never answered again; the agent
//! runner opens it when a run of that kind starts and its relay sends it upstream. It never
//! enters the sandbox: the agent there still holds only the run's relay token.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::vault;
use halyard_protocol::agents::{self, AgentLogin, AgentLogins};
use halyard_protocol::subjects;

use crate::audit::{self, Client};
use crate::auth::{Recent, User};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;

/// Longest credential.
const MAX_CREDENTIAL_BYTES: usize = 4096;

/// A login's credential (write-only).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentLoginBody {
    /// The agent's own credential: for `claude-code`, the OAuth token `claude setup-token`
    /// prints. Never answered again.
    pub credential: String,
}

/// A login as the API shows it: never its credential.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentLoginView {
    /// The agent kind it is handed to.
    pub agent: String,
    /// What the credential is.
    pub kind: String,
    /// Its last four characters.
    pub hint: String,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AgentLoginList {
    pub items: Vec<AgentLoginView>,
}

fn view(agent: &str, login: &AgentLogin) -> AgentLoginView {
    AgentLoginView {
        agent: agent.to_owned(),
        kind: agents::kind(agent).and_then(|k| k.login).unwrap_or_default().to_owned(),
        hint: login.hint.clone(),
        created_at: rfc3339(login.created_ms),
        updated_at: rfc3339(login.updated_ms),
    }
}

/// The kind `agent` names, if it takes a login.
fn takes_login(agent: &str) -> Result<&'static agents::AgentKind, ApiError> {
    let Some(kind) = agents::kind(agent) else {
        let names: Vec<&str> = agents::KINDS.iter().filter(|k| k.login.is_some()).map(|k| k.name).collect();
        return Err(ApiError::bad_request("unknown_agent", format!("no agent kind {agent:?} takes a login (those that do: {names:?})")));
    };
    if kind.login.is_none() {
        return Err(ApiError::bad_request(
            "login_not_supported",
            format!(
                "{} signs in to its vendor's own service, which Halyard does not relay; give it an LLM profile with an API key instead",
                kind.title
            ),
        ));
    }
    Ok(kind)
}

/// The user's subscription logins (never their credentials).
#[utoipa::path(get, path = "/me/agent-logins", tag = "settings", responses((status = 200, body = AgentLoginList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User) -> Result<Json<AgentLoginList>, ApiError> {
    let (stored, _) = user_store::load::<AgentLogins>(&state, &subjects::user_agent_logins_key(&user)).await?;
    Ok(Json(AgentLoginList { items: stored.logins.iter().map(|(agent, login)| view(agent, login)).collect() }))
}

/// Hands a login to agent kind `agent` (201 new, 200 replaced): its calls in the user's
/// conversations carry it upstream in place of the profile's key. 400 `login_not_supported` for
/// a kind that takes none. With a session: recently proved.
#[utoipa::path(put, path = "/me/agent-logins/{agent}", tag = "settings", params(("agent" = String, Path)), request_body = AgentLoginBody,
    responses((status = 200, body = AgentLoginView), (status = 201, body = AgentLoginView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    _: Recent,
    Path(agent): Path<String>,
    ApiJson(body): ApiJson<AgentLoginBody>,
) -> Result<impl IntoResponse, ApiError> {
    takes_login(&agent)?;
    let credential = body.credential.trim();
    let shaped = (16..=MAX_CREDENTIAL_BYTES).contains(&credential.len()) && !credential.chars().any(char::is_whitespace);
    if !shaped {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("`credential` must be one token of 16 to {MAX_CREDENTIAL_BYTES} characters, without spaces"),
        ));
    }
    let sealed = state.vault.seal(&vault::agent_login_slot(&user.0, &agent), credential).map_err(ApiError::internal)?;
    let hint: String = credential.chars().rev().take(4).collect::<Vec<_>>().into_iter().rev().collect();
    let now = halyard_platform::now_ms();
    let (created, shown) = user_store::modify(&state, &subjects::user_agent_logins_key(&user), |stored: &mut AgentLogins| {
        let created_ms = stored.logins.get(&agent).map_or(now, |l| l.created_ms);
        let login = AgentLogin { credential_sealed: sealed.clone(), hint: hint.clone(), created_ms, updated_ms: now };
        let shown = view(&agent, &login);
        Ok((stored.logins.insert(agent.clone(), login).is_none(), shown))
    })
    .await?;
    tracing::info!(user = %user, agent = %agent, created, "agent login stored");
    audit::Action::new(&user, "agent_login.put", &agent).send(&state, client).await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(shown)))
}

/// Takes a login back: that kind's calls use the profile's key from its next run.
#[utoipa::path(delete, path = "/me/agent-logins/{agent}", tag = "settings", params(("agent" = String, Path)),
    responses((status = 204, description = "removed"), Refusals, Conflict))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    _: Recent,
    Path(agent): Path<String>,
) -> Result<StatusCode, ApiError> {
    let removed = user_store::modify(&state, &subjects::user_agent_logins_key(&user), |stored: &mut AgentLogins| {
        Ok(stored.logins.remove(&agent).is_some())
    })
    .await?;
    if !removed {
        return Err(ApiError::not_found(&format!("a login of yours for {agent:?}")));
    }
    tracing::info!(user = %user, agent = %agent, "agent login removed");
    audit::Action::new(&user, "agent_login.delete", &agent).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
