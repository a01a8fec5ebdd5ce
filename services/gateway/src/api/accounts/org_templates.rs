//! An organization's templates (`/orgs/{org}/templates/{name}`): stored starts with
//! `{{parameters}}`, as a user's ([`crate::api::settings::templates`]), set by its owners and
//! admins and started from by its members as `@<org>/<name>` (a start's or a batch's
//! `template`), while they are members.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;

use halyard_protocol::batch::{Templates, org_templates_key};

use crate::api::settings::templates::{TemplateBody, TemplateList, TemplateView, list_at, store};
use crate::audit::{self, Client};
use crate::auth::User;
use crate::auth::access::{load, load_managed};
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

const MANAGERS: &str = "only the organization's owners and admins set its templates";

/// The organization's templates (any member).
#[utoipa::path(get, path = "/orgs/{org}/templates", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = TemplateList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<TemplateList>, ApiError> {
    let (_, org, _) = load(&state, &user, &name)?;
    Ok(Json(list_at(&state, &org_templates_key(&org.name)).await?))
}

/// Creates (201) or replaces (200) a template of the organization (owners and admins).
#[utoipa::path(put, path = "/orgs/{org}/templates/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    request_body = TemplateBody,
    responses((status = 200, body = TemplateView), (status = 201, body = TemplateView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((name, template)): Path<(String, String)>,
    ApiJson(body): ApiJson<TemplateBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, MANAGERS)?;
    let (shown, created) = store(&state, &org_templates_key(&org.name), &template, body).await?;
    audit::Action::new(&user, "org.template.put", &format!("{}/{template}", org.name))
        .detail(serde_json::json!({"created": created}))
        .org(&org.name)
        .send(&state, client)
        .await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(shown)))
}

/// Deletes a template of the organization.
#[utoipa::path(delete, path = "/orgs/{org}/templates/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((name, template)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, MANAGERS)?;
    let key = org_templates_key(&org.name);
    user_store::remove_named(&state, &key, |s: &mut Templates| &mut s.templates, &template, "template").await?;
    audit::Action::new(&user, "org.template.delete", &format!("{}/{template}", org.name)).org(&org.name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
