//! Invitations to organizations, as the invitee sees them: `GET /me/invitations` lists those
//! waiting for an answer, `POST /me/invitations/{org}/accept` joins with the role offered, and
//! `.../decline` drops it. Nobody becomes a member of an organization without saying yes: a
//! membership hands the organization's admins a view of one's work there (its conversations,
//! their workspaces, its audit trail), and its settings (single sign-on, who issues keys) bind
//! its members.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use halyard_protocol::UserId;

use crate::api::accounts::orgs::{MAX_ORGS_PER_USER, record, saved};
use crate::audit::Client;
use crate::auth::User;
use crate::http::api_doc::{Conflict, Refusals};
use crate::http::error::ApiError;
use crate::read_model::store::rfc3339;
use crate::state::AppState;

/// An invitation waiting for the caller's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct InvitationView {
    pub org: String,
    /// The role on accepting: `owner`, `admin` or `member`.
    pub role: String,
    pub invited_by: String,
    pub invited_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InvitationList {
    pub items: Vec<InvitationView>,
}

/// The invitations waiting for your answer.
#[utoipa::path(get, path = "/me/invitations", tag = "orgs", responses((status = 200, body = InvitationList), Refusals))]
pub async fn mine(State(state): State<AppState>, User(user): User) -> Json<InvitationList> {
    let items = state
        .accounts
        .all_orgs()
        .into_iter()
        .filter_map(|(_, org)| {
            let i = org.invitations.get(&user)?;
            Some(InvitationView {
                org: org.name.clone(),
                role: i.role.as_str().to_owned(),
                invited_by: i.invited_by.0.clone(),
                invited_at: rfc3339(i.invited_ms),
            })
        })
        .collect();
    Json(InvitationList { items })
}

/// Joins the organization with the role it offered (404 without an invitation).
#[utoipa::path(post, path = "/me/invitations/{org}/accept", tag = "orgs", params(("org" = String, Path)),
    responses((status = 200, body = crate::api::accounts::orgs::OrgView), Refusals, Conflict))]
pub async fn accept(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(name): Path<String>,
) -> Result<Json<crate::api::accounts::orgs::OrgView>, ApiError> {
    let (revision, mut org) = invited(&state, &user, &name)?;
    if state.accounts.orgs_of(&user).len() >= MAX_ORGS_PER_USER {
        return Err(ApiError::conflict(
            "too_many_orgs",
            format!("you are in {MAX_ORGS_PER_USER} organizations (the limit); leave one first"),
        ));
    }
    let Some(invitation) = org.invitations.remove(&user) else { return Err(ApiError::not_found("invitation")) };
    org.members.insert(user.clone(), invitation.role);
    org.left.remove(&user);
    org.updated_ms = halyard_platform::now_ms();
    state.accounts.save_org(org.clone(), Some(revision)).await.map_err(saved)?;
    crate::api::accounts::org_budgets::mirror_members(&state, &org).await?;
    let detail = serde_json::json!({"role": invitation.role.as_str(), "invited_by": invitation.invited_by.0});
    record(&state, &user, client, &org.name, "org.member_add", &user.0, detail).await;
    Ok(Json(crate::api::accounts::orgs::view(&org, &user)))
}

/// Drops the invitation (404 without one).
#[utoipa::path(post, path = "/me/invitations/{org}/decline", tag = "orgs", params(("org" = String, Path)),
    responses((status = 204, description = "declined"), Refusals, Conflict))]
pub async fn decline(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let (revision, mut org) = invited(&state, &user, &name)?;
    org.invitations.remove(&user);
    org.updated_ms = halyard_platform::now_ms();
    state.accounts.save_org(org.clone(), Some(revision)).await.map_err(saved)?;
    record(&state, &user, client, &org.name, "org.invite_decline", &user.0, serde_json::Value::Null).await;
    Ok(StatusCode::NO_CONTENT)
}

/// The organization `name` with its revision, if it invited `user` (else 404, as if it did not
/// exist).
fn invited(state: &AppState, user: &UserId, name: &str) -> Result<(u64, halyard_protocol::org::Org), ApiError> {
    match state.accounts.org(name) {
        Some((revision, org)) if org.invitations.contains_key(user) => Ok((revision, org)),
        _ => Err(ApiError::not_found("invitation")),
    }
}
