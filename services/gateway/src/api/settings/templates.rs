//! `/api/v1/templates`: a user's stored starts with `{{parameters}}` in their text
//! ([`halyard_protocol::batch::Template`]): the message, title, repository and environment are
//! filled from a row of values, so that a batch's `rows` make one item each
//! (`POST /batches` with `template`), a start's `parameters` make its own (`POST /conversations`
//! with `template`), and an automation's event its runs'. An organization's templates
//! (`/orgs/{org}/templates`: [`crate::api::accounts::org_templates`]) are named `@<org>/<name>`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::batch::{BatchItem, Template, Templates, org_templates_key, parameters, templates_key};
use halyard_protocol::event::{Check, Checks};

use crate::auth::User;
use crate::domain::user_store::{self, check_name};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

const MAX_TEMPLATES: usize = 100;

/// A template as written.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateBody {
    /// The start it makes (`message`, `title`, `repository`, `environment`, `sandbox_spec`,
    /// `llm_profile`), with `{{name}}` parameters in its text.
    pub start: BatchItem,
    /// As a start's: a schema for the agent's result.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub result_schema: Option<serde_json::Value>,
    /// As a start's: the checks its starts' work must pass.
    #[serde(default)]
    pub verify: Vec<Check>,
    #[serde(default)]
    pub max_verify_attempts: Option<u32>,
}

/// A template.
#[derive(Debug, Serialize, ToSchema)]
pub struct TemplateView {
    pub name: String,
    pub start: BatchItem,
    /// The parameters its text uses, in order.
    pub parameters: Vec<String>,
    #[schema(value_type = Option<Object>)]
    pub checks: Option<Checks>,
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TemplateList {
    pub items: Vec<TemplateView>,
}

/// The parameters `item`'s text uses, in order, once each.
pub fn parameters_of(item: &BatchItem) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = Vec::new();
    let texts = [Some(&item.message), item.title.as_ref(), item.environment.as_ref()]
        .into_iter()
        .flatten()
        .chain(item.repository.iter().flat_map(|r| std::iter::once(&r.url).chain(r.branch.as_ref())));
    for text in texts {
        for n in parameters(text)? {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    Ok(names)
}

fn view(name: &str, t: &Template) -> TemplateView {
    TemplateView {
        name: name.to_owned(),
        start: t.item.clone(),
        parameters: parameters_of(&t.item).unwrap_or_default(),
        checks: t.checks.clone(),
        updated_at: halyard_protocol::rfc3339(t.updated_ms),
    }
}

/// Your templates.
#[utoipa::path(get, path = "/templates", tag = "batches", responses((status = 200, body = TemplateList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User) -> Result<Json<TemplateList>, ApiError> {
    Ok(Json(list_at(&state, &templates_key(&user)).await?))
}

/// Creates (201) or replaces (200) one of your templates.
#[utoipa::path(put, path = "/templates/{name}", tag = "batches", params(("name" = String, Path)), request_body = TemplateBody,
    responses((status = 200, body = TemplateView), (status = 201, body = TemplateView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    User(user): User,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<TemplateBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (shown, created) = store(&state, &templates_key(&user), &name, body).await?;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(shown)))
}

/// Checks template `name` as written and stores it under `key` (a user's or an
/// organization's templates): it as shown, and whether it is new.
pub(crate) async fn store(state: &AppState, key: &str, name: &str, body: TemplateBody) -> Result<(TemplateView, bool), ApiError> {
    check_name("name", name)?;
    let bad = |m: String| ApiError::bad_request("invalid_field", m);
    if body.start.message.trim().is_empty() {
        return Err(bad("`start.message`: what the agent should do, with `{{parameters}}` if wanted".into()));
    }
    crate::api::conversations::checks::check_text("start.message", &body.start.message, 100_000)?;
    parameters_of(&body.start).map_err(|e| bad(format!("`start`: {e}")))?;
    let checks = Checks { result_schema: body.result_schema, verify: body.verify, max_verify_attempts: body.max_verify_attempts };
    halyard_platform::results::check_checks(&checks).map_err(bad)?;
    let template = Template { item: body.start, checks: (!checks.is_empty()).then_some(checks), updated_ms: halyard_platform::now_ms() };
    let shown = view(name, &template);
    let created = user_store::modify(state, key, |s: &mut Templates| {
        let created = !s.templates.contains_key(name);
        if created && s.templates.len() >= MAX_TEMPLATES {
            return Err(ApiError::conflict("too_many_templates", format!("{MAX_TEMPLATES} templates are kept already; delete one first")));
        }
        s.templates.insert(name.to_owned(), template.clone());
        Ok(created)
    })
    .await?;
    Ok((shown, created))
}

/// The templates stored under `key`, as shown.
pub(crate) async fn list_at(state: &AppState, key: &str) -> Result<TemplateList, ApiError> {
    let (stored, _) = user_store::load::<Templates>(state, key).await?;
    Ok(TemplateList { items: stored.templates.iter().map(|(n, t)| view(n, t)).collect() })
}

/// Deletes one of your templates.
#[utoipa::path(delete, path = "/templates/{name}", tag = "batches", params(("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    user_store::remove_named(&state, &templates_key(&user), |s: &mut Templates| &mut s.templates, &name, "template").await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `user`'s template `name`, or `@<org>/<name>` of an organization they are in now (400
/// `unknown_template` if there is none by that name; 404 for an organization they are not in).
pub async fn template_of(state: &AppState, user: &halyard_protocol::UserId, name: &str) -> Result<Template, ApiError> {
    let (key, short) = match name.strip_prefix('@').and_then(|n| n.split_once('/')) {
        Some((org, short)) => {
            let (_, org, _) = crate::auth::access::load(state, user, org)?;
            (org_templates_key(&org.name), short)
        }
        None => (templates_key(user), name),
    };
    let (mut stored, _) = user_store::load::<Templates>(state, &key).await?;
    stored.templates.remove(short).ok_or_else(|| {
        ApiError::bad_request(
            "unknown_template",
            format!("there is no template {name:?} (GET /templates and /orgs/{{org}}/templates list them)"),
        )
    })
}

/// The items `user`'s template `name` makes of `rows`, with its checks; a row without a value
/// the template needs is refused, naming both.
pub async fn items_of(
    state: &AppState,
    user: &halyard_protocol::UserId,
    name: &str,
    rows: &[BTreeMap<String, String>],
) -> Result<(Vec<BatchItem>, Option<Checks>), ApiError> {
    let t = template_of(state, user, name).await?;
    let items = rows
        .iter()
        .enumerate()
        .map(|(i, row)| t.item(row).map_err(|e| ApiError::bad_request("invalid_field", format!("`rows[{i}]`: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((items, t.checks))
}
