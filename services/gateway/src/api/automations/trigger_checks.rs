//! The checks a trigger's settings pass before they are stored: a forge's provider (one of the
//! owner's git providers, of the right kind), its label and mention; a Jira site and account; a
//! Slack trigger's channels, users and API; and the provider a chat's or tracker's repositories
//! are on. Each refusal says what to fix.

use std::collections::BTreeMap;

use halyard_protocol::automation::{self as proto};
use halyard_protocol::user::UserGitProviders;
use halyard_protocol::{UserId, subjects};

use crate::domain::user_store;
use crate::http::error::ApiError;
use crate::state::AppState;

/// A Jira trigger's site, account, projects, provider, label and mention.
#[allow(clippy::too_many_arguments)] // the trigger's fields, each checked
pub(super) async fn check_jira(
    state: &AppState,
    user: &UserId,
    api_url: &str,
    email: &str,
    projects: &BTreeMap<String, Option<String>>,
    provider: Option<&str>,
    label: &str,
    mention: &str,
) -> Result<(), ApiError> {
    halyard_platform::net::check_url(api_url, &state.config.gateway.git_api_allow).map_err(|e| {
        ApiError::bad_request("destination_not_allowed", format!("`trigger.api_url`: {e} (the operator allows HALYARD_GIT_API_ALLOW)"))
    })?;
    if !email.contains('@') || email.len() > 254 {
        return Err(ApiError::bad_request("invalid_field", "`trigger.email`: the Jira account's e-mail address the API token belongs to"));
    }
    let key_ok = |k: &str| (1..=32).contains(&k.len()) && k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if projects.is_empty() || projects.keys().any(|k| !key_ok(k)) {
        return Err(ApiError::bad_request("invalid_field", "`trigger.projects`: project keys (`PROJ`) to `owner/name` or null"));
    }
    if projects.values().flatten().any(|r| !r.contains('/')) {
        return Err(ApiError::bad_request("invalid_field", "`trigger.projects`: each repository is `owner/name` (or null for none)"));
    }
    if label.trim().is_empty() || mention.trim().is_empty() {
        return Err(ApiError::bad_request("invalid_field", "`trigger.label` and `trigger.mention` may not be empty"));
    }
    check_repository_provider(state, user, provider, projects.values().any(Option::is_some)).await
}

/// The provider a chat's or tracker's repositories are on: required once a repository is named.
pub(super) async fn check_repository_provider(
    state: &AppState,
    user: &UserId,
    provider: Option<&str>,
    needed: bool,
) -> Result<(), ApiError> {
    match provider {
        Some(p) => {
            let (git, _) = user_store::load::<UserGitProviders>(state, &subjects::user_git_key(user)).await?;
            if !git.providers.contains_key(p) {
                return Err(ApiError::bad_request(
                    "unknown_git_provider",
                    format!("`trigger.provider`: you have no git provider {p:?} (see GET /api/v1/git-providers)"),
                ));
            }
            Ok(())
        }
        None if needed => Err(ApiError::bad_request("invalid_field", "`trigger.provider`: the git provider the repositories are on")),
        None => Ok(()),
    }
}

/// A Slack trigger's channels, users, provider and API. Its owner links Slack users to
/// themselves; a link to anyone else is one that person made (`linked`, the links before).
#[allow(clippy::too_many_arguments)] // the trigger's fields, each checked, and the links before
pub(super) async fn check_slack(
    state: &AppState,
    user: &UserId,
    channels: &BTreeMap<String, Option<String>>,
    users: &BTreeMap<String, String>,
    linked: &BTreeMap<String, String>,
    provider: Option<&str>,
    api_url: Option<&str>,
) -> Result<(), ApiError> {
    let slack_id = |s: &str| (2..=32).contains(&s.len()) && s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if channels.is_empty() || channels.len() > 100 {
        return Err(ApiError::bad_request("invalid_field", "`trigger.channels`: 1 to 100 channel ids (`C0123ABC`) the bot answers in"));
    }
    if let Some(bad) = channels.keys().chain(users.keys()).find(|k| !slack_id(k)) {
        return Err(ApiError::bad_request("invalid_field", format!("`trigger`: {bad:?} is not a Slack id (`C0123ABC`, `U0456DEF`)")));
    }
    if let Some((slack, halyard)) = users.iter().find(|(k, u)| *u != &user.0 && linked.get(*k) != Some(u)) {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!(
                "`trigger.users`: {slack} is linked to {halyard:?}; you may link Slack users to yourself ({user}), and others link \
                 themselves with the sign-in link Halyard sends them privately in Slack"
            ),
        ));
    }
    if channels.values().flatten().any(|r| !r.contains('/')) {
        return Err(ApiError::bad_request("invalid_field", "`trigger.channels`: each repository is `owner/name` (or null for none)"));
    }
    check_repository_provider(state, user, provider, channels.values().any(Option::is_some)).await?;
    if let Some(url) = api_url {
        halyard_platform::net::check_url(url, &state.config.gateway.git_api_allow).map_err(|e| {
            ApiError::bad_request("destination_not_allowed", format!("`trigger.api_url`: {e} (the operator allows HALYARD_GIT_API_ALLOW)"))
        })?;
    }
    Ok(())
}

/// A forge trigger's provider (of your git providers, of the kind's kind), label and mention,
/// with their defaults.
pub(super) async fn check_forge(
    state: &AppState,
    user: &UserId,
    kind: &str,
    provider: String,
    label: Option<String>,
    mention: Option<String>,
) -> Result<(String, String, String), ApiError> {
    let (git, _) = user_store::load::<UserGitProviders>(state, &subjects::user_git_key(user)).await?;
    match git.providers.get(&provider) {
        Some(p) if p.kind == kind => {}
        Some(p) => {
            return Err(ApiError::bad_request(
                "invalid_field",
                format!("`trigger.provider`: {provider:?} is a {} provider; a {kind} trigger answers with a {kind} one", p.kind),
            ));
        }
        None => {
            return Err(ApiError::bad_request(
                "unknown_git_provider",
                format!("`trigger.provider`: you have no git provider {provider:?} (see GET /api/v1/git-providers)"),
            ));
        }
    }
    let label = label.unwrap_or_else(|| "halyard".into());
    let mention = mention.unwrap_or_else(|| "@halyard".into());
    if label.trim().is_empty() || label.len() > 50 {
        return Err(ApiError::bad_request("invalid_field", "`trigger.label`: 1 to 50 characters"));
    }
    let name = mention.strip_prefix('@').unwrap_or_default();
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.[]".contains(c)) {
        return Err(ApiError::bad_request("invalid_field", "`trigger.mention`: `@` and an account's name (`@halyard`)"));
    }
    Ok((provider, label, mention))
}

/// A Slack trigger's Web API (`None` for other kinds, or Slack's own).
pub(super) fn slack_api_url(t: &proto::Trigger) -> Option<String> {
    match t {
        proto::Trigger::Slack { api_url, .. } => api_url.clone(),
        _ => None,
    }
}
