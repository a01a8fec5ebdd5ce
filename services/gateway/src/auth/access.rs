//! Who may act on or read what: a user's own conversations, those their organization shares
//! with them (membership as of now), and an organization a user is in or manages.

use axum::http::StatusCode;

use halyard_protocol::org::{Org, Role};
use halyard_protocol::{ConversationId, UserId};

use crate::http::checks::parse_id;
use crate::http::error::ApiError;
use crate::read_model::store::ConversationView;
use crate::state::AppState;

/// A conversation of this user, to act on, or 404. One its organization reads, and the user is
/// in, is 403 `read_only`: they see it, so they are told why they cannot act.
pub fn owned(state: &AppState, user: &halyard_protocol::UserId, raw: &str) -> Result<(ConversationId, ConversationView), ApiError> {
    let (id, c) = owned_even_if_left(state, user, raw)?;
    // A conversation in an organization runs on the organization's secrets, profiles, providers,
    // MCP servers and skills: acting on it (a message, a resume, a retry, a restore, a fork, its
    // sandbox) needs current membership, not only the membership it was started with.
    if let Some(org) = c.start_request.as_ref().and_then(|r| r.org.as_deref()) {
        if state.accounts.org(org).is_none_or(|(_, o)| o.role_of(user).is_none()) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "not_a_member",
                format!("this conversation is organization {org}'s, and you are no longer a member: read it, or delete it"),
            ));
        }
    }
    Ok((id, c))
}

/// Like [`owned`], whether or not the owner is still in the conversation's organization: for
/// what touches nothing of the organization's (deleting the conversation).
pub fn owned_even_if_left(
    state: &AppState,
    user: &halyard_protocol::UserId,
    raw: &str,
) -> Result<(ConversationId, ConversationView), ApiError> {
    let id: ConversationId = parse_id(raw, "id")?;
    match state.store.conversation(id)? {
        Some(c) if c.owner == user.0 => Ok((id, c)),
        Some(c) if org_reads(state, user, &c) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "read_only",
            format!("{}'s conversation is shared with your organization to read; only its owner acts on it", c.owner),
        )),
        _ => Err(ApiError::not_found("conversation")),
    }
}

/// A conversation this user may read: theirs, or one shared with an organization they are in
/// (`visibility: org`); 404 otherwise.
pub fn readable(state: &AppState, user: &halyard_protocol::UserId, raw: &str) -> Result<(ConversationId, ConversationView), ApiError> {
    let id: ConversationId = parse_id(raw, "id")?;
    match state.store.conversation(id)? {
        Some(c) if c.owner == user.0 || org_reads(state, user, &c) => Ok((id, c)),
        _ => Err(ApiError::not_found("conversation")),
    }
}

/// Whether `user` reads `c` as a member of the organization it is shared with (membership as of
/// now: a member who leaves stops reading it).
pub fn org_reads(state: &AppState, user: &halyard_protocol::UserId, c: &ConversationView) -> bool {
    c.visibility == halyard_protocol::org::Visibility::Org
        && c.start_request
            .as_ref()
            .and_then(|r| r.org.as_deref())
            .and_then(|org| state.accounts.org(org))
            .is_some_and(|(_, o)| o.role_of(user).is_some())
}

/// `org` with its revision and `user`'s role, if `user` is in it (else 404, as if it did not
/// exist). Shared by every handler under `/orgs/{org}`.
pub(crate) fn load(state: &AppState, user: &UserId, name: &str) -> Result<(u64, Org, Role), ApiError> {
    let (revision, org) = state.accounts.org(name).ok_or_else(|| ApiError::not_found("organization"))?;
    let role = org.role_of(user).ok_or_else(|| ApiError::not_found("organization"))?;
    Ok((revision, org, role))
}

/// Like [`load`], for the organization's owners and admins only (403 saying `why` otherwise).
pub(crate) fn load_managed(state: &AppState, user: &UserId, name: &str, why: &str) -> Result<(u64, Org), ApiError> {
    let (revision, org, role) = load(state, user, name)?;
    if !role.manages() {
        return Err(forbidden(why));
    }
    Ok((revision, org))
}

pub(crate) fn forbidden(what: &str) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", what.to_owned())
}
