//! Conversations as a user finds and keeps them: listed (searched, filtered by tags and state,
//! paged), counted, read one by one with their start task, renamed and tagged, deleted; and the
//! skills a conversation may use.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use halyard_platform::bus;
use halyard_platform::telemetry;
use halyard_protocol::command::{ConversationCommand, TitleCommand};
use halyard_protocol::{Envelope, TaskId, subjects};

use super::checks::check_title;
use super::views::{Conversation, ConversationPage, STATES, StartTask, conversation_json, state_of};
use crate::auth::User;
use crate::auth::access::owned;
use crate::http::api_doc::{Accepted, BodyRefusals, Count, Refusals};
use crate::http::checks::parse_id;
use crate::http::error::{ApiError, ApiJson};
use crate::http::paging::{PageQuery, page_params};
use crate::read_model::store::{self, ConversationView};
use crate::state::AppState;

/// How a conversation's start goes.
#[utoipa::path(get, path = "/start-tasks/{id}", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = StartTask), Refusals))]
pub async fn get_task(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Json<StartTask>, ApiError> {
    let id: TaskId = parse_id(&id, "id")?;
    match state.store.task(id)? {
        Some(t) if t.owner == user.0 => Ok(Json(super::queue::task_with_place(&state, &t))),
        _ => Err(ApiError::not_found("start task")),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConversationQuery {
    // Not `#[serde(flatten)]` of a `PageQuery`: flattened query fields arrive as strings and
    // `limit` would no longer parse as a number.
    /// How many (1 to 100, 20 by default).
    #[serde(default)]
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<usize>,
    /// The `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Words the title or the first message contains (any case).
    #[serde(default)]
    pub q: Option<String>,
    /// A start status (`STARTING`, `READY`, `ERROR`) or an execution status (`running`, ...).
    #[serde(default)]
    pub status: Option<String>,
    /// One of the `state` values (`start_failed`, `running`, ...).
    #[serde(default)]
    pub state: Option<String>,
    /// `key:value` (the conversations tagged so) or `key` (those with that tag at all).
    #[serde(default)]
    pub tag: Option<String>,
}

impl ConversationQuery {
    /// What `q`, `status`, `state` and `tag` keep; an unknown status or state is refused in words.
    fn filter(&self) -> Result<impl Fn(&ConversationView) -> bool + use<>, ApiError> {
        let words: Vec<String> = self.q.as_deref().unwrap_or_default().split_whitespace().map(str::to_lowercase).collect();
        let status = self.status.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
        if let Some(s) = &status {
            const KNOWN: &[&str] =
                &["STARTING", "READY", "ERROR", "idle", "running", "paused", "finished", "error", "stuck", "waiting_for_confirmation"];
            if !KNOWN.contains(&s.as_str()) {
                return Err(ApiError::bad_request("invalid_query", format!("`status` must be one of {}", KNOWN.join(", "))));
            }
        }
        let wanted = self.state.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
        if let Some(s) = &wanted {
            if !STATES.contains(&s.as_str()) {
                return Err(ApiError::bad_request("invalid_query", format!("`state` must be one of {}", STATES.join(", "))));
            }
        }
        let tag = self.tag.as_deref().map(str::trim).filter(|t| !t.is_empty()).map(|t| match t.split_once(':') {
            Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
            None => (t.to_owned(), None),
        });
        if let Some((k, _)) = &tag {
            crate::http::checks::check_tag(k, None).map_err(|e| ApiError::bad_request("invalid_query", e.message))?;
        }
        Ok(move |c: &ConversationView| {
            let title = c.title.as_deref().unwrap_or_default().to_lowercase();
            let message = c.first_message.as_deref().unwrap_or_default().to_lowercase();
            words.iter().all(|w| title.contains(w.as_str()) || message.contains(w.as_str()))
                && status.as_deref().is_none_or(|s| c.status == s || c.execution_status.as_deref() == Some(s))
                && wanted.as_deref().is_none_or(|s| state_of(c).0 == s)
                && tag.as_ref().is_none_or(|(k, v)| c.tags.get(k).is_some_and(|have| v.as_ref().is_none_or(|v| v == have)))
        })
    }
}

/// The user's conversations, newest first; `q` searches titles and first messages, `state` (or
/// the technical `status`) filters; `count` is how many match in all.
#[utoipa::path(get, path = "/conversations", tag = "conversations", params(ConversationQuery),
    responses((status = 200, body = ConversationPage), Refusals))]
pub async fn list_conversations(
    State(state): State<AppState>,
    User(user): User,
    query: Result<Query<ConversationQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ConversationPage>, ApiError> {
    let Query(q) = query?;
    let (limit, cursor) = page_params(&PageQuery { limit: q.limit, cursor: q.cursor.clone() })?;
    let keep = q.filter()?;
    let store::Matching { items, next, count } = state.store.conversations_matching(&user.0, cursor.as_deref(), limit, keep)?;
    Ok(Json(ConversationPage {
        items: items.iter().map(conversation_json).collect(),
        next_cursor: next.map(|n| halyard_platform::keys::to_hex(&n)),
        count,
    }))
}

/// How many of the user's conversations the same filters keep.
#[utoipa::path(get, path = "/conversations/count", tag = "conversations", params(ConversationQuery),
    responses((status = 200, body = Count), Refusals))]
pub async fn count_conversations(
    State(state): State<AppState>,
    User(user): User,
    query: Result<Query<ConversationQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Count>, ApiError> {
    let Query(q) = query?;
    let keep = q.filter()?;
    let store::Matching { count, .. } = state.store.conversations_matching(&user.0, None, 1, keep)?;
    Ok(Json(Count { count }))
}

/// One conversation of the user's.
#[utoipa::path(get, path = "/conversations/{id}", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = Conversation), Refusals))]
pub async fn get_conversation(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
) -> Result<Json<Conversation>, ApiError> {
    let (_, c) = crate::auth::access::readable(&state, &user, &id)?;
    Ok(Json(conversation_json(&c)))
}

/// A skill of the deployment's.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Skill)]
pub struct SkillView {
    pub name: String,
    /// `always` (in every conversation's instructions) or `triggered` (by words in a message).
    pub kind: String,
    pub description: Option<String>,
    pub triggers: Vec<String>,
}

/// The deployment's skills.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkillList {
    pub items: Vec<SkillView>,
}

/// The deployment's global skills (a conversation's own, repository skills included, are in its
/// `conversation_started` event).
#[utoipa::path(get, path = "/skills", tag = "conversations", responses((status = 200, body = SkillList), Refusals))]
pub async fn list_skills(State(state): State<AppState>, User(_user): User) -> Json<SkillList> {
    let items = state
        .skills
        .iter()
        .map(|s| SkillView {
            name: s.name.clone(),
            kind: s.kind.as_str().to_owned(),
            description: s.description.clone(),
            triggers: s.triggers.clone(),
        })
        .collect();
    Json(SkillList { items })
}

/// Deletes a conversation: its events, its sandbox and its workspace go.
#[utoipa::path(delete, path = "/conversations/{id}", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 202, body = Accepted), Refusals))]
pub async fn delete(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let (id, _) = crate::auth::access::owned_even_if_left(&state, &user, &id)?;
    let mut env = Envelope::new(ConversationCommand::Delete { conversation_id: id, owner: user.clone() }, halyard_platform::now_ms());
    env.trace = Some(telemetry::new_trace());
    bus::publish(&state.js, subjects::conversation_command(id), &env).await?;
    // Its share link goes with it (a link to a deleted conversation opens nothing anyway).
    if let Err(e) = state.user_kv.purge(subjects::share_key(id)).await {
        tracing::warn!(conversation_id = %id, error = %e, "cannot remove a deleted conversation's share link");
    }
    Ok((StatusCode::ACCEPTED, Json(Accepted::yes())))
}

/// What changes in a conversation: its title, its tags, or both.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchConversation {
    /// 1 to 200 characters, one line.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
    pub title: Option<String>,
    /// Tags to set, each to its value, or to remove, where the value is `null` (a JSON merge
    /// patch: tags not named stay as they are).
    #[serde(default)]
    pub tags: Option<BTreeMap<String, Option<String>>>,
    /// `org`: the members of the organization it was started in read it too (live, read-only);
    /// `private`: yours alone again.
    #[serde(default)]
    pub visibility: Option<halyard_protocol::org::Visibility>,
}

/// The user names the conversation (this wins over a generated title even if that arrives
/// later), or changes its tags.
#[utoipa::path(patch, path = "/conversations/{id}", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    request_body = PatchConversation, responses((status = 202, body = Accepted), Refusals, BodyRefusals))]
pub async fn patch_conversation(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchConversation>,
) -> Result<impl IntoResponse, ApiError> {
    let (id, view) = owned(&state, &user, &id)?;
    if body.title.is_none() && body.tags.is_none() && body.visibility.is_none() {
        return Err(ApiError::bad_request("invalid_field", "say what changes: `title`, `tags` or `visibility`"));
    }
    let in_org = view.start_request.as_ref().is_some_and(|r| r.org.is_some());
    if body.visibility == Some(halyard_protocol::org::Visibility::Org) && !in_org {
        return Err(ApiError::bad_request(
            "invalid_field",
            "`visibility: org` is for a conversation started in an organization (`org` at its start); share this one with a link instead (POST /api/v1/conversations/{id}/share)",
        ));
    }
    if let Some(title) = &body.title {
        check_title(title)?;
    }
    if let Some(tags) = &body.tags {
        for (k, v) in tags {
            crate::http::checks::check_tag(k, v.as_deref())?;
        }
        let mut after = view.tags.clone();
        for (k, v) in tags {
            match v {
                Some(v) => after.insert(k.clone(), v.clone()),
                None => after.remove(k),
            };
        }
        crate::http::checks::check_tag_count(after.len())?;
    }
    if let Some(title) = body.title {
        let mut env =
            Envelope::new(TitleCommand::SetByUser { conversation_id: id, title: title.trim().to_owned() }, halyard_platform::now_ms());
        env.trace = Some(telemetry::new_trace());
        bus::publish(&state.js, subjects::title_command(id), &env).await?;
    }
    if let Some(tags) = body.tags {
        let mut env = Envelope::new(ConversationCommand::SetTags { conversation_id: id, tags }, halyard_platform::now_ms());
        env.trace = Some(telemetry::new_trace());
        bus::publish(&state.js, subjects::conversation_command(id), &env).await?;
    }
    if let Some(visibility) = body.visibility {
        let mut env = Envelope::new(ConversationCommand::SetVisibility { conversation_id: id, visibility }, halyard_platform::now_ms());
        env.trace = Some(telemetry::new_trace());
        bus::publish(&state.js, subjects::conversation_command(id), &env).await?;
    }
    Ok((StatusCode::ACCEPTED, Json(Accepted::yes())))
}
