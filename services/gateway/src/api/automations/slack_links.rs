//! `/api/v1/slack-links/{code}`: a Slack user no Halyard user is linked to gets a sign-in link
//! privately from the automations service (the code is stored in the automations bucket for an
//! hour); whoever signs in and follows it becomes the Halyard user that Slack user is, in that
//! automation's `users`. Their mentions then start conversations that run as them only if they
//! also say so (`run_as_me`): the automation's owner holds its signing secret, so a mention "by"
//! a Slack user is only the owner's word, and nothing may run as someone else, on their secrets
//! and LLM keys, without their say. A code works once (it is removed when used, and is good for
//! an hour): it is taken with the bucket's expected revision before the automation changes, so
//! two tabs racing link once.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_protocol::automation::{Automation, SlackLink, Trigger};
use halyard_protocol::subjects;

use crate::auth::User;
use crate::http::api_doc::{Conflict, Refusals};
use crate::http::error::ApiError;
use crate::state::AppState;

/// What a sign-in link links.
#[derive(Debug, Serialize, ToSchema)]
pub struct SlackLinkView {
    /// The automation's name, and whose it is.
    pub automation: String,
    pub owner: String,
    /// The Slack user the link was sent to, by id.
    pub slack_user: String,
    /// That Slack user in words, and their workspace, as the automation's Slack app named them
    /// (absent when it could not say).
    pub slack_name: Option<String>,
    pub workspace: Option<String>,
    /// When the link stops working (RFC 3339).
    pub expires_at: String,
    /// Who that Slack user now is, once linked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linked_to: Option<String>,
    /// Whether the linked user lets the automation run agents as them.
    pub runs_as_linked_user: bool,
    /// Whether this deployment proves Slack users with "Sign in with Slack": then anyone but the
    /// automation's owner links at `GET /auth/slack/start?link=<code>`; without it, only the
    /// owner may let the automation run as them.
    pub slack_sign_in: bool,
}

/// How to link.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkBody {
    /// Let the automation run agents as you (with your secrets, git providers and LLM profile)
    /// when this Slack user mentions it. Without it, the link is made and nothing runs as you.
    #[serde(default)]
    pub run_as_me: bool,
}

pub(crate) fn gone() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "not_found",
        "this sign-in link is unknown, used or expired; mention the bot in Slack again for a new one",
    )
}

/// The link's code, its record and the record's revision, if it still works.
pub(crate) async fn code_of(state: &AppState, code: &str) -> Result<(SlackLink, u64), ApiError> {
    if code.len() != 64 || !code.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(gone());
    }
    let entry = state.automation_kv.entry(subjects::automation_slack_link_key(code)).await.map_err(ApiError::internal)?;
    let Some(entry) = entry.filter(|e| e.operation == async_nats::jetstream::kv::Operation::Put) else { return Err(gone()) };
    let link: SlackLink = serde_json::from_slice(&entry.value).map_err(|_| gone())?;
    if link.expires_ms <= halyard_platform::now_ms() {
        return Err(gone());
    }
    Ok((link, entry.revision))
}

/// The automation a link belongs to, whoever owns it, with its revision.
pub(crate) async fn automation_of(state: &AppState, link: &SlackLink) -> Result<(Automation, u64), ApiError> {
    let entry = state.automation_kv.entry(subjects::automation_key(&link.automation_id)).await.map_err(ApiError::internal)?;
    match entry.filter(|e| e.operation == async_nats::jetstream::kv::Operation::Put) {
        Some(e) => Ok((serde_json::from_slice(&e.value).map_err(ApiError::internal)?, e.revision)),
        None => Err(gone()),
    }
}

pub(crate) fn view(state: &AppState, a: &Automation, link: &SlackLink, linked_to: Option<String>) -> SlackLinkView {
    let runs_as_linked_user = match (&a.trigger, &linked_to) {
        (Trigger::Slack { consented, .. }, Some(u)) => consented.contains(u),
        _ => false,
    };
    SlackLinkView {
        automation: a.name.clone(),
        owner: a.owner.0.clone(),
        slack_user: link.slack_user.clone(),
        slack_name: link.slack_name.clone(),
        workspace: link.workspace.clone(),
        expires_at: halyard_protocol::rfc3339(link.expires_ms),
        linked_to,
        runs_as_linked_user,
        slack_sign_in: configured(state),
    }
}

/// What the link would link (for the page that asks before linking).
#[utoipa::path(get, path = "/slack-links/{code}", tag = "automations", params(("code" = String, Path)),
    responses((status = 200, body = SlackLinkView), Refusals))]
pub async fn get_one(State(state): State<AppState>, User(_user): User, Path(code): Path<String>) -> Result<Json<SlackLinkView>, ApiError> {
    let (link, _) = code_of(&state, &code).await?;
    let (a, _) = automation_of(&state, &link).await?;
    Ok(Json(view(&state, &a, &link, None)))
}

/// Links the Slack user the link was sent to to the signed-in user, in the automation's `users`
/// (409 `already_linked` if someone linked them meanwhile), and with `run_as_me` lets the
/// automation run as them; the code stops working. Anyone but the automation's owner gets 403
/// `slack_sign_in_required` where the deployment has Sign in with Slack (they link through it),
/// and `slack_sign_in_not_configured` for `run_as_me` where it has not.
#[utoipa::path(post, path = "/slack-links/{code}", tag = "automations", params(("code" = String, Path)),
    request_body = LinkBody, responses((status = 200, body = SlackLinkView), Refusals, crate::http::api_doc::BodyRefusals, Conflict))]
pub async fn link(
    State(state): State<AppState>,
    User(user): User,
    client: crate::audit::Client,
    Path(code): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<SlackLinkView>, ApiError> {
    // The link first: an unknown code is 404 whatever the body.
    let (link, code_revision) = code_of(&state, &code).await?;
    // No body is `{}`.
    let body: LinkBody = if body.iter().all(u8::is_ascii_whitespace) {
        LinkBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request("invalid_body", format!("the body is not a link request: {e}")))?
    };
    // Slack's word, not the owner's, for anyone but the owner.
    let (a, _) = automation_of(&state, &link).await?;
    if a.owner != user {
        if configured(&state) {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "slack_sign_in_required",
                format!(
                    "confirm with Slack that you are {}: open /api/v1/auth/slack/start?link={code} in your browser and sign in to \
                     Slack as that user",
                    link.slack_user
                ),
            ));
        }
        if body.run_as_me {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "slack_sign_in_not_configured",
                "nothing can prove here that you are that Slack user (this deployment has no Sign in with Slack: \
                 HALYARD_SLACK_OIDC_CLIENT_ID), so the automation may not run as you; link without it, or ask the operator",
            ));
        }
    }
    take(&state, &code, code_revision).await?;
    Ok(Json(bind(&state, &user, &link, body.run_as_me, client).await?))
}

/// Uses up code `code` (at `revision`: of two racing requests one gets on).
pub(crate) async fn take(state: &AppState, code: &str, revision: u64) -> Result<(), ApiError> {
    let key = subjects::automation_slack_link_key(code);
    state.automation_kv.update(&key, "used".into(), revision).await.map_err(|_| gone())?;
    if let Err(e) = state.automation_kv.delete(&key).await {
        tracing::warn!(error = %e, "a used sign-in link's record stays");
    }
    Ok(())
}

/// Links the link's Slack user to `user` in its automation's `users` (409 `already_linked` if
/// someone linked them meanwhile), and with `run_as_me` lets the automation run as them.
pub(crate) async fn bind(
    state: &AppState,
    user: &halyard_protocol::UserId,
    link: &SlackLink,
    run_as_me: bool,
    client: crate::audit::Client,
) -> Result<SlackLinkView, ApiError> {
    // The automation may change meanwhile (its owner editing it): read again and retry.
    for _ in 0..5 {
        let (mut a, revision) = automation_of(state, link).await?;
        let Trigger::Slack { users, consented, .. } = &mut a.trigger else { return Err(gone()) };
        let allowed = consented.contains(&user.0);
        match users.get(&link.slack_user) {
            Some(who) if *who == user.0 && (allowed || !run_as_me) => return Ok(view(state, &a, link, Some(user.0.clone()))),
            Some(who) if *who == user.0 => {}
            Some(_) => {
                return Err(ApiError::conflict(
                    "already_linked",
                    "that Slack user is linked to another Halyard user; ask the automation's owner",
                ));
            }
            None => {}
        }
        users.insert(link.slack_user.clone(), user.0.clone());
        if run_as_me && *user != a.owner {
            consented.insert(user.0.clone());
        }
        a.updated_ms = halyard_platform::now_ms();
        let bytes = serde_json::to_vec(&a).map_err(ApiError::internal)?;
        let akey = subjects::automation_key(&a.id);
        if let Ok(r) = state.automation_kv.update(&akey, bytes.clone().into(), revision).await {
            state.automations.apply_value(&akey, r, false, &bytes);
            tracing::info!(automation_id = %a.id, user = %user, slack_user = %link.slack_user, "slack user linked");
            let detail = serde_json::json!({"slack_user": link.slack_user, "owner": a.owner.0, "run_as_me": run_as_me});
            crate::audit::Action::new(user, "automation.slack_link", &a.id).detail(detail).send(state, client).await;
            return Ok(view(state, &a, link, Some(user.0.clone())));
        }
    }
    Err(ApiError::conflict("concurrent_update", "the automation kept changing; follow the link again"))
}

/// Whether the deployment has Sign in with Slack.
pub fn configured(state: &AppState) -> bool {
    let g = &state.config.gateway;
    !g.slack_oidc_client_id.is_empty() && !g.slack_oidc_issuer.is_empty()
}
