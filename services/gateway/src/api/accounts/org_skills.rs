//! An organization's skills (`/orgs/{org}/skills/{name}`): Markdown, with the same frontmatter
//! as a repository's `.openhands/skills` (`triggers` for knowledge, `description` for an agent
//! skill, neither for one always in the prompt), set by its owners and admins and loaded into its
//! members' conversations in it, after the deployment's skills and before the repository's.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::event::Skill;
use halyard_protocol::org::OrgSkills;
use halyard_protocol::subjects;

use crate::audit::{self, Client};
use crate::auth::User;
use crate::auth::access::{load, load_managed};
use crate::domain::user_store::{self, check_name};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::state::AppState;

const MANAGERS: &str = "only the organization's owners and admins set its skills";
/// Skills one organization may keep, and the longest.
const MAX_SKILLS: usize = 100;
const MAX_SKILL_BYTES: usize = 64 * 1024;

/// A skill as written: Markdown, with optional YAML frontmatter.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = OrgSkillUpdate)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    pub content: String,
}

/// A skill as its conversations get it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkillView {
    pub name: String,
    /// `always`, `knowledge` (when a trigger word comes up) or `agent_skill` (the agent loads it).
    pub kind: String,
    pub triggers: Vec<String>,
    pub description: Option<String>,
    pub content: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SkillList {
    pub items: Vec<SkillView>,
}

fn view(name: &str, s: &Skill) -> SkillView {
    let kind = serde_json::to_value(s.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| "always".into());
    SkillView { name: name.to_owned(), kind, triggers: s.triggers.clone(), description: s.description.clone(), content: s.content.clone() }
}

/// The organization's skills (any member).
#[utoipa::path(get, path = "/orgs/{org}/skills", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = SkillList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<SkillList>, ApiError> {
    let (_, org, _) = load(&state, &user, &name)?;
    let items = user_store::list_named(&state, &subjects::org_skills_key(&org.name), |s: &OrgSkills| &s.skills, view).await?;
    Ok(Json(SkillList { items }))
}

/// Creates (201) or replaces (200) a skill of the organization (owners and admins); its
/// conversations get it from their start on.
#[utoipa::path(put, path = "/orgs/{org}/skills/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    request_body = PutBody, responses((status = 200, body = SkillView), (status = 201, body = SkillView), Refusals, BodyRefusals, Conflict))]
pub async fn put(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((name, skill)): Path<(String, String)>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, MANAGERS)?;
    check_name("name", &skill)?;
    if body.content.trim().is_empty() || body.content.len() > MAX_SKILL_BYTES {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("`content`: the skill's Markdown, 1 byte to {} KiB", MAX_SKILL_BYTES >> 10),
        ));
    }
    let mut parsed = halyard_platform::skills::parse(&skill, &body.content, false)
        .map_err(|e| ApiError::bad_request("invalid_field", format!("`content`: {e}")))?;
    // The route names it.
    parsed.name.clone_from(&skill);
    let shown = view(&skill, &parsed);
    let created = user_store::modify(&state, &subjects::org_skills_key(&org.name), |s: &mut OrgSkills| {
        let created = !s.skills.contains_key(&skill);
        if created && s.skills.len() >= MAX_SKILLS {
            return Err(ApiError::conflict(
                "too_many_skills",
                format!("the organization has {MAX_SKILLS} skills already; delete one first"),
            ));
        }
        s.skills.insert(skill.clone(), parsed.clone());
        Ok(created)
    })
    .await?;
    audit::Action::new(&user, "org.skill.put", &format!("{}/{skill}", org.name))
        .detail(serde_json::json!({"created": created, "kind": shown.kind}))
        .org(&org.name)
        .send(&state, client)
        .await;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(shown)))
}

/// Deletes a skill of the organization.
#[utoipa::path(delete, path = "/orgs/{org}/skills/{name}", tag = "orgs", params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "deleted"), Refusals, Conflict))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path((name, skill)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, MANAGERS)?;
    user_store::remove_named(&state, &subjects::org_skills_key(&org.name), |s: &mut OrgSkills| &mut s.skills, &skill, "skill").await?;
    audit::Action::new(&user, "org.skill.delete", &format!("{}/{skill}", org.name)).org(&org.name).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
