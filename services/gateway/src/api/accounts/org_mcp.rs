//! An organization's MCP servers (`/orgs/{org}/mcp-servers/{name}`, the same bodies as a user's
//! own): set by its owners and admins, offered to its members' conversations in it (a member's
//! own server of the same name stands over it). A server's `${NAME}` references are filled from
//! the conversation's secrets, the organization's among them, so a team's server needs no
//! credential of a member's. Members see what is offered; the entries hold no credential. An
//! owner or admin signs in to an `http` one that wants OAuth for everyone
//! ([`crate::api::settings::mcp_sign_in`]); the list shows that sign-in.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;

use halyard_protocol::subjects;
use halyard_protocol::user::UserMcpServers;

use halyard_platform::mcp_oauth::SignInOwner;

use crate::api::settings::mcp_servers::{PutBody, ServerList, ServerView, public, store_server, with_sign_ins};
use crate::audit::{self, Client};
use crate::auth::access::{load, load_managed};
use crate::auth::{Recent, User};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

const MANAGERS: &str = "only the organization's owners and admins set its MCP servers";

/// The organization's MCP servers (any member).
#[utoipa::path(get, path = "/orgs/{org}/mcp-servers", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = ServerList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<ServerList>, ApiError> {
    let (_, org, _) = load(&state, &user, &name)?;
    let items = user_store::list_named(&state, &subjects::org_mcp_key(&org.name), |s: &UserMcpServers| &s.servers, public).await?;
    let items = with_sign_ins(&state, &SignInOwner::Org(org.name.clone()), items).await;
    Ok(Json(ServerList { items }))
}

/// Creates (201) or replaces (200) an MCP server of the organization (owners and admins).
#[utoipa::path(put, path = "/orgs/{org}/mcp-servers/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    request_body = PutBody, responses((status = 200, body = ServerView), (status = 201, body = ServerView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path((name, server)): Path<(String, String)>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<impl IntoResponse, ApiError> {
    let user = principal.user;
    let (_, org) = load_managed(&state, &user, &name, MANAGERS)?;
    let (created, view) = store_server(&state, &subjects::org_mcp_key(&org.name), &server, body).await?;
    audit::Action::new(&user, "org.mcp_server.put", &format!("{}/{server}", org.name))
        .detail(serde_json::json!({"created": created}))
        .org(&org.name)
        .send(&state, client)
        .await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// Deletes an MCP server of the organization: its conversations stop connecting it from their
/// next run.
#[utoipa::path(delete, path = "/orgs/{org}/mcp-servers/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((name, server)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, MANAGERS)?;
    let key = subjects::org_mcp_key(&org.name);
    user_store::remove_named(&state, &key, |s: &mut UserMcpServers| &mut s.servers, &server, "MCP server").await?;
    crate::api::settings::mcp_sign_in::forget(&state, &SignInOwner::Org(org.name.clone()), &server).await?;
    audit::Action::new(&user, "org.mcp_server.delete", &format!("{}/{server}", org.name)).org(&org.name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
