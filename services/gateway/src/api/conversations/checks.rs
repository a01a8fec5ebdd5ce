//! The checks conversation handlers share: a message's and a title's text, and the state a
//! conversation must be in for a change (started, ready, its sandbox not deleted, a workspace of
//! its own, an event it has), each refused with a stable code and what to do instead.

use crate::http::error::ApiError;
use crate::read_model::store::ConversationView;

pub(crate) const MAX_MESSAGE_CHARS: usize = 200_000;

pub(crate) const MAX_TITLE_CHARS: usize = 200;

pub(crate) fn check_text(field: &str, text: &str, max: usize) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("invalid_field", format!("`{field}` must not be empty")));
    }
    if text.chars().count() > max {
        return Err(ApiError::bad_request("invalid_field", format!("`{field}` is longer than {max} characters")));
    }
    Ok(())
}

/// Refuses a title that is empty, too long, or holds control characters.
pub(crate) fn check_title(title: &str) -> Result<(), ApiError> {
    check_text("title", title, MAX_TITLE_CHARS)?;
    crate::http::checks::check_label("title", title)
}

pub(crate) fn require_started(c: &ConversationView) -> Result<(), ApiError> {
    match c.status.as_str() {
        "ERROR" => Err(ApiError::conflict(
            "conversation_failed",
            format!("the conversation failed to start ({}); start a new one", c.error_detail.as_deref().unwrap_or("no detail")),
        )),
        _ => Ok(()),
    }
}

/// A conversation whose sandbox was not deleted: the agent could not go on without its
/// workspace, and the command would wait for a sandbox that will never answer.
pub(crate) fn require_sandbox(c: &ConversationView) -> Result<(), ApiError> {
    if c.sandbox_status.as_deref() == Some("DELETED") {
        let sandbox = c.sandbox_id.as_deref().unwrap_or_default();
        return Err(ApiError::conflict(
            "sandbox_deleted",
            format!(
                "this conversation's sandbox {sandbox} was deleted, and its workspace with it, so the conversation cannot go on; \
                 start a new conversation (POST /api/v1/conversations); this one's events stay readable (GET \
                 /api/v1/conversations/{{id}}/events)"
            ),
        ));
    }
    Ok(())
}

/// Restoring and forking go by a conversation's checkpoints, which a helper has none of: its
/// workspace is its parent's, whose checkpoints hold what the helper did.
pub(crate) fn require_own_workspace(c: &ConversationView) -> Result<(), ApiError> {
    if let Some(parent) = &c.parent_conversation_id {
        return Err(ApiError::conflict(
            "helper_conversation",
            format!(
                "this conversation is a helper working in the workspace of conversation {parent}, which keeps the checkpoints: \
                 restore or fork that one"
            ),
        ));
    }
    Ok(())
}

/// A conversation that has finished starting.
pub(crate) fn require_ready(c: &ConversationView) -> Result<(), ApiError> {
    require_started(c)?;
    if c.status != "READY" {
        return Err(ApiError::conflict(
            "conversation_not_ready",
            "the conversation is still starting; pause, resume, interrupt, confirm or reject once it is READY",
        ));
    }
    Ok(())
}

/// Refuses an `at_seq` that is no event of the conversation.
pub(crate) fn check_at_seq(c: &ConversationView, at_seq: u64) -> Result<(), ApiError> {
    if at_seq == 0 || at_seq > c.last_event_seq {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("`at_seq` must be an event of this conversation, 1 to {}", c.last_event_seq),
        ));
    }
    Ok(())
}
