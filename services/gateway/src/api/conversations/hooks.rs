//! The owner's consent to a workspace's repository hooks (`.openhands/hooks.json`): their
//! commands run in the sandbox with the conversation's secrets, so none runs before the owner
//! allowed that file (by its SHA-256) for that repository. `POST /conversations/{id}/hooks-consent`
//! answers a `hooks_consent_required` event (an allowance is remembered for the owner's other
//! conversations on the repository, a refusal only in this one); `GET /hook-consents` lists
//! what the owner allowed, `DELETE /hook-consents/{sha256}` takes an allowance back.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::command::AgentCommand;
use halyard_protocol::subjects;
use halyard_protocol::user::{HookConsent, HookConsents};

use crate::api::conversations::checks::require_ready;
use crate::audit::{self, Client};
use crate::auth::User;
use crate::auth::access::owned;
use crate::domain::commands::agent_command;
use crate::domain::user_store;
use crate::http::api_doc::{Accepted, BodyRefusals, Conflict, Refusals};
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::store::rfc3339;
use crate::state::AppState;

/// The owner's answer about a hooks file.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HooksConsentBody {
    /// The file's SHA-256, as the `hooks_consent_required` event names it (64 hex digits).
    pub sha256: String,
    /// `true`: its commands run, in this conversation and in your others on the same repository
    /// while the file is unchanged; `false`: this conversation goes on without them.
    pub allow: bool,
}

fn check_sha256(sha256: &str) -> Result<(), ApiError> {
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(ApiError::bad_request(
            "invalid_field",
            "`sha256` must be the 64 lower-case hex digits the hooks_consent_required event names",
        ));
    }
    Ok(())
}

/// Allows or declines the workspace's hooks file (a `hooks_consent` event records the answer;
/// the run that waited for it goes on).
#[utoipa::path(post, path = "/conversations/{id}/hooks-consent", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    request_body = HooksConsentBody, responses((status = 202, body = Accepted), Refusals, BodyRefusals, Conflict))]
pub async fn hooks_consent(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<HooksConsentBody>,
) -> Result<impl IntoResponse, ApiError> {
    check_sha256(&body.sha256)?;
    let (cid, c) = owned(&state, &user, &id)?;
    require_ready(&c)?;
    // (The repository the runner read the file in: the conversation's, from its start.)
    let repository = c.repository.as_ref().and_then(|r| r["url"].as_str()).unwrap_or_default().to_owned();
    if body.allow {
        // Remembered before the run is told, so that the run finds it.
        let (repo, sha) = (repository.clone(), body.sha256.clone());
        user_store::modify(&state, &subjects::user_hooks_key(&user), move |h: &mut HookConsents| {
            h.allow(&repo, &sha, halyard_platform::now_ms());
            Ok(())
        })
        .await?;
    }
    let cmd = AgentCommand::AnswerHooks { conversation_id: cid, sha256: body.sha256.clone(), allow: body.allow };
    let event_id = agent_command(&state, cid, cmd).await?;
    let action = if body.allow { "hooks.allow" } else { "hooks.decline" };
    let detail = serde_json::json!({"conversation_id": cid.to_string(), "repository": repository, "sha256": body.sha256});
    audit::Action::new(&user, action, &user.0).detail(detail).send(&state, client).await;
    Ok((StatusCode::ACCEPTED, Json(Accepted { accepted: true, event_id: Some(event_id) })))
}

/// A hooks file the user allowed.
#[derive(Debug, Serialize, ToSchema)]
pub struct HookConsentView {
    /// The repository's URL (empty: workspaces without one).
    pub repository: String,
    pub sha256: String,
    pub allowed_at: String,
}

/// The hooks files the user allowed, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct HookConsentList {
    pub items: Vec<HookConsentView>,
}

fn view(c: &HookConsent) -> HookConsentView {
    HookConsentView { repository: c.repository.clone(), sha256: c.sha256.clone(), allowed_at: rfc3339(c.at_ms) }
}

/// The repository hooks files you allowed to run in your conversations.
#[utoipa::path(get, path = "/hook-consents", tag = "settings", responses((status = 200, body = HookConsentList), Refusals))]
pub async fn list_hook_consents(State(state): State<AppState>, User(user): User) -> Result<Json<HookConsentList>, ApiError> {
    let (stored, _) = user_store::load::<HookConsents>(&state, &subjects::user_hooks_key(&user)).await?;
    Ok(Json(HookConsentList { items: stored.consents.iter().rev().map(view).collect() }))
}

/// Takes back the allowance of hooks file `sha256` (on every repository): conversations ask
/// again before running it (one that was answered already keeps its answer).
#[utoipa::path(delete, path = "/hook-consents/{sha256}", tag = "settings", params(("sha256" = String, Path)),
    responses((status = 204), Refusals))]
pub async fn delete_hook_consent(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(sha256): Path<String>,
) -> Result<StatusCode, ApiError> {
    check_sha256(&sha256)?;
    let sha = sha256.clone();
    let removed = user_store::modify(&state, &subjects::user_hooks_key(&user), move |h: &mut HookConsents| {
        let before = h.consents.len();
        h.consents.retain(|c| c.sha256 != sha);
        Ok(before != h.consents.len())
    })
    .await?;
    if !removed {
        return Err(ApiError::not_found("hook consent"));
    }
    audit::Action::new(&user, "hooks.revoke", &user.0).detail(serde_json::json!({"sha256": sha256})).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}
