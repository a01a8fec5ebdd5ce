//! An organization's secrets (`/orgs/{org}/secrets/{name}`, the same bodies as a user's own):
//! set by its owners and admins, sealed for the organization, and given to its members'
//! conversations in it as environment variables (a member's own secret of the same name stands
//! over it), masked in everything those conversations show. Nobody reads a value back: members
//! see the names and descriptions, which is what they need to use them.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;

use halyard_protocol::subjects;
use halyard_protocol::user::{UserSecrets, org_slot_owner};

use crate::api::settings::secrets::{PutBody, SecretList, SecretView, public, store_secret};
use crate::audit::{self, Client};
use crate::auth::access::{load, load_managed};
use crate::auth::{Recent, User};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

const MANAGERS: &str = "only the organization's owners and admins set its secrets";

/// The organization's secrets (any member): names and descriptions, never values.
#[utoipa::path(get, path = "/orgs/{org}/secrets", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = SecretList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<SecretList>, ApiError> {
    let (_, org, _) = load(&state, &user, &name)?;
    let items = user_store::list_named(&state, &subjects::org_secrets_key(&org.name), |s: &UserSecrets| &s.secrets, public).await?;
    Ok(Json(SecretList { items }))
}

/// Creates (201) or changes (200) a secret of the organization (owners and admins; with a
/// session, recently proved).
#[utoipa::path(put, path = "/orgs/{org}/secrets/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    request_body = PutBody, responses((status = 200, body = SecretView), (status = 201, body = SecretView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    _: Recent,
    Path((name, secret)): Path<(String, String)>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, MANAGERS)?;
    let (created, view) = store_secret(&state, &subjects::org_secrets_key(&org.name), &org_slot_owner(&org.name), &secret, &body).await?;
    tracing::info!(user = %user, org = %org.name, secret = %secret, created, "organization secret stored");
    let detail = serde_json::json!({"created": created, "value_changed": body.value.is_some()});
    audit::Action::new(&user, "org.secret.put", &format!("{}/{secret}", org.name)).detail(detail).org(&org.name).send(&state, client).await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(view)))
}

/// Deletes a secret of the organization: its conversations stop getting it from their next run.
#[utoipa::path(delete, path = "/orgs/{org}/secrets/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    _: Recent,
    Path((name, secret)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, MANAGERS)?;
    let key = subjects::org_secrets_key(&org.name);
    user_store::remove_named(&state, &key, |s: &mut UserSecrets| &mut s.secrets, &secret, "secret").await?;
    audit::Action::new(&user, "org.secret.delete", &format!("{}/{secret}", org.name)).org(&org.name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
