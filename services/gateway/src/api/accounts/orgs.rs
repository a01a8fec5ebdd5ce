//! `/api/v1/orgs`: organizations and their members. Anyone may create one (and is its first
//! owner); owners and admins invite members (who join only by accepting, see
//! [`crate::api::accounts::invitations`]) and remove them; only owners change roles; an organization
//! never loses its last owner; whoever leaves or is removed is not added back by e-mail domain
//! or group. To anyone not in it, an organization does not exist (404).
//! Every change is an audit record carrying the organization's name, and its owners and admins
//! read those at `GET /orgs/{org}/audit`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::UserId;
use halyard_protocol::org::{Invitation, Org, Role};

use crate::audit::{self, AuditQuery, Client};
use crate::auth::access::{forbidden, load, load_managed};
use crate::auth::{Recent, User};
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;
use crate::state::registry::{OrgWrite, Principal};

/// Organizations a user may be in at once.
pub(crate) const MAX_ORGS_PER_USER: usize = 50;
/// Members an organization may have.
const MAX_MEMBERS: usize = 1000;

/// An organization as one of its members sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrgView {
    pub name: String,
    /// The caller's role in it: `owner`, `admin` or `member`.
    pub role: String,
    pub members: usize,
    pub created_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OrgList {
    pub items: Vec<OrgView>,
}

/// One member and their role.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemberView {
    pub user: String,
    pub role: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MemberList {
    pub items: Vec<MemberView>,
    /// Invited, not yet answered: the role each gets on accepting.
    pub invited: Vec<MemberView>,
}

/// A new organization.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrg {
    /// 1 to 64 letters, digits, `-` or `_`.
    pub name: String,
}

/// A member to add, and their role (default `member`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMember {
    pub user: String,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub role: Option<Role>,
}

/// A member's new role.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetRole {
    #[schema(value_type = String)]
    pub role: Role,
}

pub(crate) fn view(org: &Org, user: &UserId) -> OrgView {
    OrgView {
        name: org.name.clone(),
        role: org.role_of(user).map_or("", Role::as_str).to_owned(),
        members: org.members.len(),
        created_at: rfc3339(org.created_ms),
    }
}

fn members(org: &Org) -> MemberList {
    let view = |u: &UserId, r: Role| MemberView { user: u.0.clone(), role: r.as_str().to_owned() };
    MemberList {
        items: org.members.iter().map(|(u, r)| view(u, *r)).collect(),
        invited: org.invitations.iter().map(|(u, i)| view(u, i.role)).collect(),
    }
}

fn last_owner() -> ApiError {
    ApiError::conflict("last_owner", "an organization keeps at least one owner: make another member an owner first")
}

pub(crate) fn saved(e: OrgWrite) -> ApiError {
    match e {
        OrgWrite::Conflict => ApiError::conflict("concurrent_update", "the organization changed meanwhile; read it again and retry"),
        OrgWrite::Bus(e) => {
            tracing::error!(error = %e, "organizations store");
            ApiError::unavailable("the accounts store did not answer; try again")
        }
    }
}

fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok { Ok(()) } else { Err(ApiError::bad_request("invalid_field", "`name`: 1 to 64 letters, digits, `-` or `_`")) }
}

/// Records `action` on `target` in `org`.
pub(crate) async fn record(
    state: &AppState,
    actor: &UserId,
    client: Client,
    org: &str,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) {
    audit::Action::new(actor, action, target).detail(detail).org(org).send(state, client).await;
}

/// Creates an organization, with the caller as its owner (409 `org_exists` if the name is
/// taken).
#[utoipa::path(post, path = "/orgs", tag = "orgs", request_body = CreateOrg,
    responses((status = 201, body = OrgView), Refusals, BodyRefusals, Conflict))]
pub async fn create(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    ApiJson(body): ApiJson<CreateOrg>,
) -> Result<impl IntoResponse, ApiError> {
    check_name(&body.name)?;
    if state.accounts.orgs_of(&user).len() >= MAX_ORGS_PER_USER {
        return Err(ApiError::conflict("too_many_orgs", format!("you are in {MAX_ORGS_PER_USER} organizations (the limit)")));
    }
    let now = halyard_platform::now_ms();
    let org = Org {
        name: body.name.clone(),
        members: [(user.clone(), Role::Owner)].into(),
        created_by: user.clone(),
        created_ms: now,
        updated_ms: now,
        settings: Default::default(),
        left: Default::default(),
        invitations: Default::default(),
    };
    state.accounts.save_org(org.clone(), None).await.map_err(|e| match e {
        OrgWrite::Conflict => {
            ApiError::conflict("org_exists", format!("an organization `{}` exists already; choose another name", body.name))
        }
        e => saved(e),
    })?;
    crate::api::accounts::org_budgets::mirror_members(&state, &org).await?;
    record(&state, &user, client, &org.name, "org.create", &org.name, serde_json::Value::Null).await;
    Ok((StatusCode::CREATED, Json(view(&org, &user))))
}

/// The organizations the caller is in, with their role in each.
#[utoipa::path(get, path = "/orgs", tag = "orgs", responses((status = 200, body = OrgList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User) -> Json<OrgList> {
    Json(OrgList { items: state.accounts.orgs_of(&user).iter().map(|o| view(o, &user)).collect() })
}

/// One organization the caller is in.
#[utoipa::path(get, path = "/orgs/{org}", tag = "orgs", params(("org" = String, Path)), responses((status = 200, body = OrgView), Refusals))]
pub async fn get_one(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<OrgView>, ApiError> {
    let (_, org, _) = load(&state, &user, &name)?;
    Ok(Json(view(&org, &user)))
}

/// The organization's members and their roles.
#[utoipa::path(get, path = "/orgs/{org}/members", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = MemberList), Refusals))]
pub async fn list_members(State(state): State<AppState>, User(user): User, Path(name): Path<String>) -> Result<Json<MemberList>, ApiError> {
    let (_, org, _) = load(&state, &user, &name)?;
    Ok(Json(members(&org)))
}

/// Invites a user (owners and admins; only owners invite owners or admins): 202 with the
/// invitation pending. They become a member when they accept it (`POST
/// /me/invitations/{org}/accept`). The answer is the same whether or not such a user exists, so
/// it tells nobody who has an account here.
#[utoipa::path(post, path = "/orgs/{org}/members", tag = "orgs", params(("org" = String, Path)), request_body = AddMember,
    responses((status = 202, body = MemberList, description = "invited; a member once they accept"), Refusals, BodyRefusals, Conflict))]
pub async fn add_member(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<AddMember>,
) -> Result<impl IntoResponse, ApiError> {
    let user = principal.user;
    let (revision, mut org, mine) = load(&state, &user, &name)?;
    let role = body.role.unwrap_or(Role::Member);
    if !mine.manages() {
        return Err(forbidden("only the organization's owners and admins invite members"));
    }
    if role > Role::Member && mine != Role::Owner {
        return Err(forbidden("only owners give the owner or admin role"));
    }
    let invited = UserId(body.user.clone());
    if check_name(&body.user).is_err() {
        return Err(ApiError::bad_request("invalid_field", "`user`: a user name, 1 to 64 letters, digits, `-` or `_`"));
    }
    if org.members.contains_key(&invited) {
        return Err(ApiError::conflict(
            "already_member",
            format!("`{}` is a member already; PATCH the member to change the role", body.user),
        ));
    }
    if org.members.len() + org.invitations.len() >= MAX_MEMBERS {
        return Err(ApiError::conflict(
            "too_many_members",
            format!("the organization has {MAX_MEMBERS} members and invitations (the limit)"),
        ));
    }
    let invitation = Invitation { role, invited_by: user.clone(), invited_ms: halyard_platform::now_ms() };
    org.invitations.insert(invited.clone(), invitation);
    org.updated_ms = halyard_platform::now_ms();
    state.accounts.save_org(org.clone(), Some(revision)).await.map_err(saved)?;
    record(&state, &user, client, &org.name, "org.member_invite", &invited.0, serde_json::json!({"role": role.as_str()})).await;
    Ok((StatusCode::ACCEPTED, Json(members(&org))))
}

/// Changes a member's role (owners only; never the last owner's).
#[utoipa::path(patch, path = "/orgs/{org}/members/{user}", tag = "orgs", params(("org" = String, Path), ("user" = String, Path)),
    request_body = SetRole, responses((status = 200, body = MemberList), Refusals, BodyRefusals, Conflict))]
pub async fn set_role(
    State(state): State<AppState>,
    Recent(principal): Recent,
    client: Client,
    Path((name, member)): Path<(String, String)>,
    ApiJson(body): ApiJson<SetRole>,
) -> Result<Json<MemberList>, ApiError> {
    let user = principal.user;
    let (revision, mut org, mine) = load(&state, &user, &name)?;
    if mine != Role::Owner {
        return Err(forbidden("only the organization's owners change roles"));
    }
    let target = UserId(member.clone());
    let before = org.role_of(&target).ok_or_else(|| ApiError::not_found("member"))?;
    if before == Role::Owner && body.role != Role::Owner && org.owners() == 1 {
        return Err(last_owner());
    }
    org.members.insert(target.clone(), body.role);
    org.updated_ms = halyard_platform::now_ms();
    state.accounts.save_org(org.clone(), Some(revision)).await.map_err(saved)?;
    let detail = serde_json::json!({"from": before.as_str(), "to": body.role.as_str()});
    record(&state, &user, client, &org.name, "org.member_role", &target.0, detail).await;
    Ok(Json(members(&org)))
}

/// Removes a member (or withdraws an invitation): owners remove anyone, admins remove members,
/// anyone leaves; never the last owner. Removing someone else from a session needs a recent
/// sign-in (403 `step_up_required`).
#[utoipa::path(delete, path = "/orgs/{org}/members/{user}", tag = "orgs", params(("org" = String, Path), ("user" = String, Path)),
    responses((status = 204, description = "removed"), Refusals, Conflict))]
pub async fn remove_member(
    State(state): State<AppState>,
    principal: Principal,
    client: Client,
    Path((name, member)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let user = principal.user.clone();
    let (revision, mut org, mine) = load(&state, &user, &name)?;
    let target = UserId(member.clone());
    if target != user {
        // Removing someone else is a change of rights: a session shows its key again.
        crate::auth::cookies::require_recent_proof(&state, &principal)?;
    }
    if !org.members.contains_key(&target) && mine.manages() && org.invitations.remove(&target).is_some() {
        // An invitation withdrawn.
        org.updated_ms = halyard_platform::now_ms();
        state.accounts.save_org(org.clone(), Some(revision)).await.map_err(saved)?;
        record(&state, &user, client, &org.name, "org.invite_withdraw", &target.0, serde_json::Value::Null).await;
        return Ok(StatusCode::NO_CONTENT);
    }
    let theirs = org.role_of(&target).ok_or_else(|| ApiError::not_found("member"))?;
    let allowed = target == user || mine == Role::Owner || (mine == Role::Admin && theirs == Role::Member);
    if !allowed {
        return Err(forbidden("owners remove anyone, admins remove members, and anyone may leave"));
    }
    if theirs == Role::Owner && org.owners() == 1 {
        return Err(last_owner());
    }
    org.members.remove(&target);
    // Gone for good: signing in again does not put them back by domain or group.
    org.left.insert(target.clone());
    org.updated_ms = halyard_platform::now_ms();
    state.accounts.save_org(org.clone(), Some(revision)).await.map_err(saved)?;
    // Running work in the organization stops getting its things within a step.
    crate::api::accounts::org_budgets::mirror_members(&state, &org).await?;
    let action = if target == user { "org.member_leave" } else { "org.member_remove" };
    record(&state, &user, client, &org.name, action, &target.0, serde_json::json!({"role": theirs.as_str()})).await;
    Ok(StatusCode::NO_CONTENT)
}

/// The organization's audit trail (owners and admins): what happened in it, as
/// `GET /admin/audit` pages and filters it.
#[utoipa::path(get, path = "/orgs/{org}/audit", tag = "orgs", params(("org" = String, Path), AuditQuery),
    responses((status = 200, body = audit::AuditPage), Refusals))]
pub async fn audit_trail(
    State(state): State<AppState>,
    User(user): User,
    Path(name): Path<String>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let (_, org) = load_managed(&state, &user, &name, "the organization's owners and admins read its audit trail")?;
    let Query(q) = query?;
    audit::read(&state, q, Some(&org.name))
}
