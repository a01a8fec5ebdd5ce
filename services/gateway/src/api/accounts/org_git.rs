//! An organization's git providers (`/orgs/{org}/git-providers/{name}`, the same bodies as a
//! user's own): a team's bot account, set up by its owners and admins, the token sealed for the
//! organization and never shown. Its members' conversations in it clone and push through the git
//! proxy with it where they have no provider of their own for the host; the token never enters
//! a sandbox, and is masked in everything those conversations show.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;

use halyard_protocol::subjects;
use halyard_protocol::user::{UserGitProviders, org_slot_owner};

use crate::api::settings::git_providers::{ProviderList, ProviderView, PutBody, public, store_provider};
use crate::audit::{self, Client};
use crate::auth::access::{load, load_managed};
use crate::auth::{Recent, User};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

const MANAGERS: &str = "only the organization's owners and admins set its git providers";

/// The organization's git providers (any member; never their tokens).
#[utoipa::path(get, path = "/orgs/{org}/git-providers", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = ProviderList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<ProviderList>, ApiError> {
    let (_, org, _) = load(&state, &user, &name)?;
    let items = user_store::list_named(&state, &subjects::org_git_key(&org.name), |s: &UserGitProviders| &s.providers, public).await?;
    Ok(Json(ProviderList { items }))
}

/// Creates (201) or changes (200) a git provider of the organization (owners and admins).
#[utoipa::path(put, path = "/orgs/{org}/git-providers/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    request_body = PutBody, responses((status = 200, body = ProviderView), (status = 201, body = ProviderView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path((name, provider)): Path<(String, String)>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<impl IntoResponse, ApiError> {
    let user = principal.user;
    let (_, org) = load_managed(&state, &user, &name, MANAGERS)?;
    let key = subjects::org_git_key(&org.name);
    let (created, view) = store_provider(&state, &key, &org_slot_owner(&org.name), &provider, &body).await?;
    let detail = serde_json::json!({"created": created, "kind": view.kind, "host": view.host, "token_changed": body.token.is_some()});
    audit::Action::new(&user, "org.git_provider.put", &format!("{}/{provider}", org.name))
        .detail(detail)
        .org(&org.name)
        .send(&state, client)
        .await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// Deletes a git provider of the organization.
#[utoipa::path(delete, path = "/orgs/{org}/git-providers/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((name, provider)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, MANAGERS)?;
    let key = subjects::org_git_key(&org.name);
    user_store::remove_named(&state, &key, |s: &mut UserGitProviders| &mut s.providers, &provider, "git provider").await?;
    audit::Action::new(&user, "org.git_provider.delete", &format!("{}/{provider}", org.name)).org(&org.name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
