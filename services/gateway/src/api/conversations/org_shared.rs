//! `GET /orgs/{org}/conversations`: the conversations an organization's members share with it
//! (`visibility: org`), for any member to open and follow read-only. Read from the
//! organization's own index (kept by the projection while a conversation is shared with it), so
//! a page costs its rows, not every member's conversations.

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use halyard_protocol::org::Visibility;

use crate::api::conversations::views::{Conversation, conversation_json};
use crate::auth::User;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SharedQuery {
    /// At most this many, newest first (1 to 200; 50 if absent).
    #[serde(default)]
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OrgConversations {
    pub items: Vec<Conversation>,
}

/// The conversations shared with the organization, newest first (any member).
#[utoipa::path(get, path = "/orgs/{org}/conversations", tag = "orgs", params(("org" = String, Path), SharedQuery),
    responses((status = 200, body = OrgConversations), Refusals))]
pub async fn list(
    State(state): State<AppState>,
    User(user): User,
    Path(name): Path<String>,
    query: Result<Query<SharedQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<OrgConversations>, ApiError> {
    let Query(q) = query?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "`limit` must be between 1 and 200"));
    }
    let (_, org, _) = crate::auth::access::load(&state, &user, &name)?;
    // Shared by someone who is still a member: a former member's shares stop with them.
    let shared = |c: &crate::read_model::store::ConversationView| {
        c.visibility == Visibility::Org
            && c.start_request.as_ref().and_then(|r| r.org.as_deref()) == Some(org.name.as_str())
            && org.members.contains_key(&halyard_protocol::UserId(c.owner.clone()))
    };
    let found = state.store.shared_with(&org.name, limit, shared)?;
    Ok(Json(OrgConversations { items: found.iter().map(conversation_json).collect() }))
}
