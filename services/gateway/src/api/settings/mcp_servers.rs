//! `/api/v1/mcp-servers`: a user's own MCP servers, whose tools the agent is offered in each of
//! their conversations (next to the operator's). A `stdio` server is a command run in the
//! conversation's sandbox; an `http` server a streamable-HTTP endpoint the agent runner calls.
//! Credentials stay out of the stored configuration: a header or variable value names a
//! secret as `${NAME}`, and the agent runner fills it in.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::mcp_oauth::SignInOwner;
use halyard_protocol::subjects;
use halyard_protocol::user::{McpServer, McpServerConfig, UserMcpServers};

use crate::audit::{self, Client};
use crate::auth::{Recent, User};
use crate::domain::user_store::{self, check_name};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;

/// Servers one user may keep.
pub const MAX_SERVERS: usize = 20;
/// Headers or variables one server may have.
const MAX_ENTRIES: usize = 50;
/// Longest command, URL, header or variable value.
const MAX_VALUE: usize = 8192;
/// Headers the MCP client sets itself.
const RESERVED_HEADERS: &[&str] =
    &["accept", "content-type", "content-length", "host", "mcp-session-id", "mcp-protocol-version", "last-event-id"];

/// An MCP server, whole.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = McpServerUpdate)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    /// `stdio` or `http`.
    pub transport: String,
    /// For `stdio`: the command line run in the workspace.
    #[serde(default)]
    pub command: Option<String>,
    /// For `stdio`: the process's environment (`${NAME}` names a secret).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// For `http`: the streamable-HTTP endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// For `http`: headers sent with each request (`${NAME}` names a secret).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Whether the agent is offered its tools (default true); a disabled server of an
    /// operator's name hides the operator's.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// An MCP server as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = McpServer)]
pub struct ServerView {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// `stdio`: the command line run in the workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// `stdio`: the process's environment (`${NAME}` names a secret).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `http`: the streamable-HTTP endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `http`: headers sent with each request (`${NAME}` names a secret).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    pub enabled: bool,
    pub updated_at: String,
    /// `http`: the user's OAuth sign-in to it, if they signed in
    /// (`GET /mcp-servers/{name}/sign-in`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sign_in: Option<super::mcp_sign_in::McpSignInView>,
}

/// The user's MCP servers.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = McpServerList)]
pub struct ServerList {
    pub items: Vec<ServerView>,
}

/// What connecting to a server once gave.
#[derive(Debug, Serialize, ToSchema)]
pub struct McpServerTest {
    pub ok: bool,
    /// The names of the tools it offers.
    pub tools: Vec<String>,
    /// What went wrong, in words.
    pub error: Option<String>,
}

pub(crate) fn public(name: &str, s: &McpServer) -> ServerView {
    let (transport, command, env, url, headers) = match &s.config {
        McpServerConfig::Stdio { command, env } => ("stdio", Some(command.clone()), env.clone(), None, BTreeMap::new()),
        McpServerConfig::Http { url, headers } => ("http", None, BTreeMap::new(), Some(url.clone()), headers.clone()),
    };
    ServerView {
        name: name.to_owned(),
        transport: transport.to_owned(),
        command,
        env,
        url,
        headers,
        enabled: s.enabled,
        updated_at: rfc3339(s.updated_ms),
        sign_in: None,
    }
}

/// `views` with `owner`'s sign-ins to them, for the `http` servers they signed in to.
pub(crate) async fn with_sign_ins(state: &AppState, owner: &SignInOwner, views: Vec<ServerView>) -> Vec<ServerView> {
    futures::future::join_all(views.into_iter().map(|mut view| async move {
        if let Some(url) = &view.url {
            view.sign_in = super::mcp_sign_in::sign_in_of(state, owner, &view.name, url).await;
        }
        view
    }))
    .await
}

fn bad(message: String) -> ApiError {
    ApiError::bad_request("invalid_field", message)
}

fn one_line(field: &str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() || value.len() > MAX_VALUE || value.contains(['\n', '\r', '\0']) {
        return Err(bad(format!("`{field}` must be one line of 1 to {MAX_VALUE} characters")));
    }
    Ok(())
}

/// Every `${NAME}` in `value` names a possible secret.
fn check_references(field: &str, value: &str) -> Result<(), ApiError> {
    halyard_protocol::user::value_parts(value).map(|_| ()).map_err(|e| bad(format!("`{field}`: {e}")))
}

fn env_name(n: &str) -> bool {
    (1..=128).contains(&n.len())
        && n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn config(state: &AppState, body: PutBody) -> Result<McpServerConfig, ApiError> {
    match body.transport.as_str() {
        "stdio" => {
            if body.url.is_some() || !body.headers.is_empty() {
                return Err(bad("`url` and `headers` are for `http` servers; a `stdio` server has `command` and `env`".into()));
            }
            let command = body.command.ok_or_else(|| bad("`command` is required for a `stdio` server".into()))?;
            one_line("command", &command)?;
            if body.env.len() > MAX_ENTRIES {
                return Err(bad(format!("`env` has more than {MAX_ENTRIES} variables")));
            }
            for (name, value) in &body.env {
                if !env_name(name) {
                    return Err(bad(format!("`env`: {name:?} is no environment variable name")));
                }
                if value.len() > MAX_VALUE || value.contains('\0') {
                    return Err(bad(format!("`env.{name}` must be at most {MAX_VALUE} characters")));
                }
                check_references(&format!("env.{name}"), value)?;
            }
            Ok(McpServerConfig::Stdio { command, env: body.env })
        }
        "http" => {
            if body.command.is_some() || !body.env.is_empty() {
                return Err(bad("`command` and `env` are for `stdio` servers; an `http` server has `url` and `headers`".into()));
            }
            let url = body.url.ok_or_else(|| bad("`url` is required for an `http` server".into()))?;
            crate::http::error::check_destination("url", &url, &state.config.mcp.allow, "HALYARD_MCP_ALLOW")?;
            if body.headers.len() > MAX_ENTRIES {
                return Err(bad(format!("`headers` has more than {MAX_ENTRIES} headers")));
            }
            for (name, value) in &body.headers {
                if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(bad(format!("`headers`: {name:?} is no header name")));
                }
                if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                    return Err(bad(format!("`headers`: {name} is set by the MCP client itself")));
                }
                one_line(&format!("headers.{name}"), value)?;
                check_references(&format!("headers.{name}"), value)?;
            }
            Ok(McpServerConfig::Http { url, headers: body.headers })
        }
        other => Err(bad(format!("`transport` {other:?}: use `stdio` or `http`"))),
    }
}

/// The user's MCP servers.
#[utoipa::path(get, path = "/mcp-servers", tag = "settings", responses((status = 200, body = ServerList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User) -> Result<Json<ServerList>, ApiError> {
    let items = user_store::list_named(&state, &subjects::user_mcp_key(&user), |s: &UserMcpServers| &s.servers, public).await?;
    let items = with_sign_ins(&state, &SignInOwner::User(user), items).await;
    Ok(Json(ServerList { items }))
}

/// One MCP server of the user's.
#[utoipa::path(get, path = "/mcp-servers/{name}", tag = "settings", params(("name" = String, Path)),
    responses((status = 200, body = ServerView), Refusals))]
pub async fn get_one(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<ServerView>, ApiError> {
    let key = subjects::user_mcp_key(&user);
    let view = user_store::get_named(&state, &key, |s: &UserMcpServers| &s.servers, &name, "MCP server", public).await?;
    Ok(Json(with_sign_ins(&state, &SignInOwner::User(user), vec![view]).await.remove(0)))
}

/// Creates (201) or replaces (200) an MCP server.
#[utoipa::path(put, path = "/mcp-servers/{name}", tag = "settings", params(("name" = String, Path)), request_body = PutBody,
    responses((status = 200, body = ServerView), (status = 201, body = ServerView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<impl IntoResponse, ApiError> {
    let user = principal.user;
    let (created, view) = store_server(&state, &subjects::user_mcp_key(&user), &name, body).await?;
    tracing::info!(user = %user, server = %name, created, "MCP server stored");
    audit::Action::new(&user, "mcp_server.put", &name).detail(serde_json::json!({"created": created})).send(&state, client).await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// Stores MCP server `name` in the bucket entry `key`: whether it is new, and how the API shows
/// it. Shared by users' and organizations' servers.
pub(crate) async fn store_server(state: &AppState, key: &str, name: &str, body: PutBody) -> Result<(bool, ServerView), ApiError> {
    check_name("name", name)?;
    if name.eq_ignore_ascii_case(halyard_protocol::user::HALYARD_MCP_SERVER) {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("`{name}` is the name of Halyard's own MCP server, offered in every conversation; choose another"),
        ));
    }
    let enabled = body.enabled.unwrap_or(true);
    let config = config(state, body)?;
    let server = McpServer { config, enabled, updated_ms: halyard_platform::now_ms() };
    user_store::modify(state, key, |stored: &mut UserMcpServers| {
        let created = !stored.servers.contains_key(name);
        if created && stored.servers.len() >= MAX_SERVERS {
            return Err(ApiError::conflict(
                "too_many_mcp_servers",
                format!("there are {MAX_SERVERS} MCP servers already; delete one first"),
            ));
        }
        let view = public(name, &server);
        stored.servers.insert(name.to_owned(), server.clone());
        Ok((created, view))
    })
    .await
}

/// Deletes an MCP server.
#[utoipa::path(delete, path = "/mcp-servers/{name}", tag = "settings", params(("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let key = subjects::user_mcp_key(&user);
    user_store::remove_named(&state, &key, |s: &mut UserMcpServers| &mut s.servers, &name, "MCP server").await?;
    // Its sign-in goes with it (a server of the same name later is signed in to anew).
    super::mcp_sign_in::forget(&state, &SignInOwner::User(user.clone()), &name).await?;
    audit::Action::new(&user, "mcp_server.delete", &name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

/// An agent runner connects to the server once and lists its tools (an `http` server; a
/// `stdio` one is checked when a conversation starts). 200 either way: the result is what was
/// asked for.
#[utoipa::path(post, path = "/mcp-servers/{name}/test", tag = "settings", params(("name" = String, Path)),
    responses((status = 200, body = McpServerTest), Refusals))]
pub async fn test(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<McpServerTest>, ApiError> {
    use halyard_protocol::command::{McpTestAnswer, McpTestRequest};
    // One of the user's own servers, or 404 as for every other route that names one.
    let key = subjects::user_mcp_key(&user);
    user_store::get_named(&state, &key, |s: &UserMcpServers| &s.servers, &name, "MCP server", public).await?;
    let question = McpTestRequest { owner: user, server: name };
    let patience = std::time::Duration::from_secs(30);
    let answer: McpTestAnswer =
        crate::domain::commands::request(&state, subjects::MCP_TEST.into(), question, patience, "MCP server tests").await?;
    Ok(Json(McpServerTest { ok: answer.ok, tools: answer.tools, error: answer.error }))
}

#[cfg(test)]
mod tests {
    use super::check_references;

    #[test]
    fn secret_references_are_checked() {
        assert!(check_references("h", "Bearer ${TOKEN}").is_ok());
        assert!(check_references("h", "plain").is_ok());
        assert!(check_references("h", "Bearer ${TOKEN").is_err());
        assert!(check_references("h", "${not a name}").is_err());
    }
}
