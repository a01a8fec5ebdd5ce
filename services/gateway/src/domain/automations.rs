//! An automation's definition, apart from HTTP: read from the `halyard_automations` bucket as
//! its owner's (another user's is as absent as one that does not exist), stored at the revision
//! it was read at (a concurrent change is refused, not overwritten) and taken into this
//! gateway's mirror at once; its name, prompt and agent checked as a start would be.

use halyard_protocol::automation::{self as proto, Automation};
use halyard_protocol::{UserId, subjects};

use crate::http::checks::parse_id;
use crate::http::error::ApiError;
use crate::state::AppState;

/// Longest prompt template.
const MAX_PROMPT_CHARS: usize = 100_000;

pub fn kv_err(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "automation store");
    ApiError::unavailable("the automation store did not answer; try again")
}

pub fn check_name(name: &str) -> Result<(), ApiError> {
    let n = name.trim().chars().count();
    if n == 0 || n > 100 || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request("invalid_field", "`name`: 1 to 100 characters on one line"));
    }
    Ok(())
}

/// A prompt of the right size; a schedule needs one (or a template, whose message is one).
pub fn check_prompt(prompt: Option<&str>, template: bool, trigger: &proto::Trigger) -> Result<(), ApiError> {
    match prompt {
        Some(p) if p.chars().count() > MAX_PROMPT_CHARS || p.trim().is_empty() => {
            Err(ApiError::bad_request("invalid_field", format!("`prompt`: 1 to {MAX_PROMPT_CHARS} characters")))
        }
        None if !template && matches!(trigger, proto::Trigger::Schedule { .. }) => Err(ApiError::bad_request(
            "invalid_field",
            "`prompt`: a schedule has no event to make a message of; say what each run should do (or name a `template`)",
        )),
        _ => Ok(()),
    }
}

/// The automation `id` of `user` and its revision in the bucket.
pub async fn load(state: &AppState, user: &UserId, id: &str) -> Result<(Automation, u64), ApiError> {
    let _: uuid::Uuid = parse_id(id, "id")?;
    match state.automation_kv.entry(subjects::automation_key(id)).await.map_err(kv_err)? {
        Some(e) if e.operation == async_nats::jetstream::kv::Operation::Put => {
            let a: Automation = serde_json::from_slice(&e.value).map_err(ApiError::internal)?;
            if &a.owner != user {
                return Err(ApiError::not_found("automation"));
            }
            Ok((a, e.revision))
        }
        _ => Err(ApiError::not_found("automation")),
    }
}

/// Stores `a` (created when `revision` is `None`) and takes it in at once, so this gateway's
/// next answer has it before the watch brings it.
pub async fn save(state: &AppState, a: &Automation, revision: Option<u64>) -> Result<(), ApiError> {
    let key = subjects::automation_key(&a.id);
    let bytes = serde_json::to_vec(a).map_err(ApiError::internal)?;
    let revision = match revision {
        None => state.automation_kv.create(&key, bytes.clone().into()).await.map_err(kv_err)?,
        Some(r) => state.automation_kv.update(&key, bytes.clone().into(), r).await.map_err(|_| {
            ApiError::conflict("concurrent_update", "the automation changed while you were updating it; read it again and retry")
        })?,
    };
    state.automations.apply_value(&key, revision, false, &bytes);
    Ok(())
}

/// An automation's agent can run its owner's conversations: known, installed, and speaking the
/// wire of `profile` (the owner's default when absent), as a start would check it.
pub async fn check_agent(state: &AppState, user: &UserId, agent: &str, profile: Option<&str>) -> Result<(), ApiError> {
    let profile = match profile {
        Some(p) => Some(p.to_owned()),
        None => {
            crate::domain::user_store::load::<halyard_protocol::user::UserSettings>(state, &subjects::user_settings_key(user))
                .await?
                .0
                .llm_profile
        }
    };
    crate::domain::agents::check_runnable(state, user, agent, profile.as_deref(), None).await
}
