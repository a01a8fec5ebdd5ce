//! `/api/v1/automations`: create, list, read, change and delete a user's automations, and read
//! their runs. A hook's secret is made here, shown once, and sealed before it is stored.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::keys;
use halyard_platform::schedule::Schedule;
use halyard_protocol::automation::{self as proto, Automation, AutomationRepository};
use halyard_protocol::user::UserGitProviders;
use halyard_protocol::{UserId, subjects};

use crate::audit::{self, Client};
use crate::auth::User;
use crate::domain::user_store;
use crate::http::api_doc::{BodyRefusals, Conflict, Refusals};
use crate::http::checks::parse_id;
use crate::http::error::{ApiError, ApiJson};
use crate::read_model::layout;
use crate::read_model::rows::RunRow;
use crate::read_model::store::rfc3339;
use crate::state::AppState;

/// Automations one user may keep.
pub const MAX_AUTOMATIONS: usize = 50;
/// Longest prompt template.
const MAX_PROMPT_CHARS: usize = 100_000;

/// What starts an automation's runs, by `kind`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = AutomationTrigger)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TriggerBody {
    /// Any program posting JSON to the hook URL, signed as Standard Webhooks with the
    /// automation's `secret` (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
    Webhook {},
    /// Each tick of a five-field cron expression (`minute hour day month weekday`) in an IANA
    /// time zone (`UTC` if absent), exactly once however many Halyard processes run.
    Schedule {
        cron: String,
        #[serde(default)]
        timezone: Option<String>,
    },
    /// GitHub's webhooks, signed with the automation's `secret` (paste it, and the hook URL, in
    /// the repository's Settings → Webhooks, content type `application/json`, events: issues,
    /// issue comments, pull requests, pull request reviews and review comments). An issue or
    /// pull request labelled `label` (default `halyard`), or a comment or review mentioning
    /// `mention` (default `@halyard`) by someone with write access, starts a conversation on the
    /// repository; later mentions in the same thread continue it. `provider`: one of your git
    /// providers of kind `github`, whose token Halyard answers on GitHub with.
    Github {
        provider: String,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        mention: Option<String>,
    },
    /// GitLab's webhooks, with the automation's `secret` as the token (the project's Settings →
    /// Webhooks: paste the URL and the secret token, pick Issues events, Merge request events and
    /// Comments). An issue or merge request given `label` (default `halyard`), or a comment
    /// mentioning `mention` (default `@halyard`) by a member with Developer access or more,
    /// starts a conversation; replies go in the same discussion. `provider`: one of your git
    /// providers of kind `gitlab`.
    Gitlab {
        provider: String,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        mention: Option<String>,
    },
    /// Bitbucket Cloud's webhooks (the repository's Repository settings → Webhooks → Add webhook:
    /// the URL, the secret; trigger Pull request: Comment created). A pull request comment
    /// mentioning `mention` (default `@halyard`) by someone with write access starts a
    /// conversation on the pull request's branch; replies go under the comment. `provider`: one of
    /// your git providers of kind `bitbucket`.
    Bitbucket {
        provider: String,
        #[serde(default)]
        mention: Option<String>,
    },
    /// Azure DevOps service hooks (Project settings → Service hooks → Web Hooks, events "Pull
    /// request commented on" and "Work item commented on": the URL, basic authentication with the
    /// user name `halyard` and the `secret` as the password, resource details to send: All). A
    /// comment mentioning `mention` (default `@halyard`) starts a conversation; replies go in the
    /// pull request's thread or on the work item. `provider`: one of your `azure_devops` git
    /// providers.
    AzureDevops {
        provider: String,
        #[serde(default)]
        mention: Option<String>,
    },
    /// Forgejo's or Gitea's webhooks (the repository's Settings → Webhooks → Add webhook →
    /// Forgejo/Gitea: the URL, `application/json`, the secret; events: Issues, Issue comments, Pull
    /// requests and their comments). Acted on as the `github` kind; `provider`: one of your git
    /// providers of kind `forgejo`.
    Forgejo {
        provider: String,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        mention: Option<String>,
    },
    /// Jira's webhooks (Settings → System → WebHooks → Create: the URL, the secret; events:
    /// Issue updated, Comment created). A comment mentioning `mention` (default `@halyard`), or
    /// `label` (default `halyard`) added to an issue, in one of `projects` (project key to
    /// `owner/name` on `provider`, or `null` for none) starts a conversation; Halyard comments
    /// back as `email` with `api_token` (write-only, required when created) at `api_url`
    /// (`https://<site>.atlassian.net`).
    Jira {
        api_url: String,
        email: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_token: Option<String>,
        #[schema(value_type = Object)]
        projects: BTreeMap<String, Option<String>>,
        #[serde(default)]
        provider: Option<String>,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        mention: Option<String>,
    },
    /// Linear's webhooks (Settings → API → Webhooks → New webhook: the URL; data change events
    /// Issues and Comments; copy its signing secret here). A comment mentioning `mention`
    /// (default `@halyard`), or `label` (default `halyard`) added to an issue, of one of `teams`
    /// (team key to `owner/name` on `provider`, or `null`) starts a conversation; Halyard comments
    /// back with `api_key` (a Linear API key; write-only, required when created).
    Linear {
        /// The webhook's signing secret; write-only, required when created.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signing_secret: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key: Option<String>,
        #[schema(value_type = Object)]
        teams: BTreeMap<String, Option<String>>,
        #[serde(default)]
        provider: Option<String>,
        #[serde(default)]
        api_url: Option<String>,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        mention: Option<String>,
    },
    /// Slack's Events API. In the Slack app's settings: Event Subscriptions → Request URL: the
    /// hook URL (Halyard answers Slack's challenge); subscribe to the bot event `app_mention`;
    /// OAuth scopes `app_mentions:read`, `chat:write`, `reactions:write`. An `app_mention` in one
    /// of `channels` (channel id to `owner/name` on `provider`, or `null` for no repository; a
    /// repository named in the message as `owner/name` wins) by a Slack user linked in `users`
    /// starts a conversation, answered in the thread; a later mention in the thread continues it.
    Slack {
        /// The app's signing secret (Basic Information → App Credentials); write-only, required
        /// when created.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signing_secret: Option<String>,
        /// The bot's token (`xoxb-...`); write-only, required when created.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bot_token: Option<String>,
        #[serde(default)]
        #[schema(value_type = Object)]
        channels: BTreeMap<String, Option<String>>,
        /// Slack user id to Halyard user: you, or someone who linked themselves through the
        /// sign-in link an unlinked Slack user is sent privately (their mentions start
        /// conversations that run as them; an unlinked user's mention starts nothing).
        #[serde(default)]
        users: BTreeMap<String, String>,
        /// The git provider the channels' repositories are on.
        #[serde(default)]
        provider: Option<String>,
        /// Slack's Web API (`https://slack.com/api` if absent).
        #[serde(default)]
        api_url: Option<String>,
    },
}

impl TriggerBody {
    /// The write-only credentials a Slack trigger carries, taken out of it.
    fn take_credentials(&mut self) -> (Option<String>, Option<String>) {
        match self {
            Self::Slack { signing_secret, bot_token, .. } => (signing_secret.take(), bot_token.take()),
            Self::Jira { api_token, .. } => (None, api_token.take()),
            Self::Linear { signing_secret, api_key, .. } => (signing_secret.take(), api_key.take()),
            _ => (None, None),
        }
    }
}

impl TriggerBody {
    /// The trigger this body describes, checked; `previous` is the automation's trigger before
    /// (a change keeps what only others may add: Slack users who linked themselves).
    async fn into_trigger(self, state: &AppState, user: &UserId, previous: Option<&proto::Trigger>) -> Result<proto::Trigger, ApiError> {
        Ok(match self {
            Self::Github { provider, label, mention } => {
                let (provider, label, mention) = check_forge(state, user, "github", provider, label, mention).await?;
                proto::Trigger::Github { provider, label, mention }
            }
            Self::Gitlab { provider, label, mention } => {
                let (provider, label, mention) = check_forge(state, user, "gitlab", provider, label, mention).await?;
                proto::Trigger::Gitlab { provider, label, mention }
            }
            Self::AzureDevops { provider, mention } => {
                let (provider, _, mention) = check_forge(state, user, "azure_devops", provider, None, mention).await?;
                proto::Trigger::AzureDevops { provider, mention }
            }
            Self::Bitbucket { provider, mention } => {
                let (provider, _, mention) = check_forge(state, user, "bitbucket", provider, None, mention).await?;
                proto::Trigger::Bitbucket { provider, mention }
            }
            Self::Forgejo { provider, label, mention } => {
                let (provider, label, mention) = check_forge(state, user, "forgejo", provider, label, mention).await?;
                proto::Trigger::Forgejo { provider, label, mention }
            }
            Self::Jira { api_url, email, projects, provider, label, mention, .. } => {
                let label = label.unwrap_or_else(|| "halyard".into());
                let mention = mention.unwrap_or_else(|| "@halyard".into());
                check_jira(state, user, &api_url, &email, &projects, provider.as_deref(), &label, &mention).await?;
                proto::Trigger::Jira { api_url: api_url.trim_end_matches('/').to_owned(), email, projects, provider, label, mention }
            }
            Self::Linear { teams, provider, api_url, label, mention, .. } => {
                let label = label.unwrap_or_else(|| "halyard".into());
                let mention = mention.unwrap_or_else(|| "@halyard".into());
                let key_ok = |k: &str| (1..=10).contains(&k.len()) && k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
                if teams.is_empty() || teams.keys().any(|k| !key_ok(k)) || teams.values().flatten().any(|r| !r.contains('/')) {
                    return Err(ApiError::bad_request("invalid_field", "`trigger.teams`: team keys (`ENG`) to `owner/name` or null"));
                }
                check_repository_provider(state, user, provider.as_deref(), teams.values().any(Option::is_some)).await?;
                if let Some(url) = &api_url {
                    halyard_platform::net::check_url(url, &state.config.gateway.git_api_allow).map_err(|e| {
                        ApiError::bad_request(
                            "destination_not_allowed",
                            format!("`trigger.api_url`: {e} (the operator allows HALYARD_GIT_API_ALLOW)"),
                        )
                    })?;
                }
                proto::Trigger::Linear { teams, provider, api_url, label, mention }
            }
            Self::Slack { channels, users, provider, api_url, .. } => {
                let (linked, consented) = match previous {
                    Some(proto::Trigger::Slack { users, consented, .. }) => (users.clone(), consented.clone()),
                    _ => Default::default(),
                };
                check_slack(state, user, &channels, &users, &linked, provider.as_deref(), api_url.as_deref()).await?;
                // Consent is each linked user's own: kept for those still linked, never given here.
                let consented = consented.into_iter().filter(|u| users.values().any(|v| v == u)).collect();
                proto::Trigger::Slack { channels, users, provider, api_url, consented }
            }
            Self::Webhook {} => proto::Trigger::Webhook {},
            Self::Schedule { cron, timezone } => {
                let timezone = timezone.unwrap_or_else(|| "UTC".into());
                Schedule::parse(&cron, &timezone).map_err(|e| ApiError::bad_request("invalid_schedule", format!("`trigger`: {e}")))?;
                proto::Trigger::Schedule { cron: cron.split_whitespace().collect::<Vec<_>>().join(" "), timezone }
            }
        })
    }

    fn of(t: &proto::Trigger) -> Self {
        match t {
            proto::Trigger::Webhook {} => Self::Webhook {},
            proto::Trigger::Schedule { cron, timezone } => Self::Schedule { cron: cron.clone(), timezone: Some(timezone.clone()) },
            proto::Trigger::Github { provider, label, mention } => {
                Self::Github { provider: provider.clone(), label: Some(label.clone()), mention: Some(mention.clone()) }
            }
            proto::Trigger::Gitlab { provider, label, mention } => {
                Self::Gitlab { provider: provider.clone(), label: Some(label.clone()), mention: Some(mention.clone()) }
            }
            proto::Trigger::AzureDevops { provider, mention } => {
                Self::AzureDevops { provider: provider.clone(), mention: Some(mention.clone()) }
            }
            proto::Trigger::Bitbucket { provider, mention } => {
                Self::Bitbucket { provider: provider.clone(), mention: Some(mention.clone()) }
            }
            proto::Trigger::Forgejo { provider, label, mention } => {
                Self::Forgejo { provider: provider.clone(), label: Some(label.clone()), mention: Some(mention.clone()) }
            }
            proto::Trigger::Jira { api_url, email, projects, provider, label, mention } => Self::Jira {
                api_url: api_url.clone(),
                email: email.clone(),
                api_token: None,
                projects: projects.clone(),
                provider: provider.clone(),
                label: Some(label.clone()),
                mention: Some(mention.clone()),
            },
            proto::Trigger::Linear { teams, provider, api_url, label, mention } => Self::Linear {
                signing_secret: None,
                api_key: None,
                teams: teams.clone(),
                provider: provider.clone(),
                api_url: api_url.clone(),
                label: Some(label.clone()),
                mention: Some(mention.clone()),
            },
            proto::Trigger::Slack { channels, users, provider, api_url, .. } => Self::Slack {
                signing_secret: None,
                bot_token: None,
                channels: channels.clone(),
                users: users.clone(),
                provider: provider.clone(),
                api_url: api_url.clone(),
            },
        }
    }
}

/// A Jira trigger's site, account, projects, provider, label and mention.
#[allow(clippy::too_many_arguments)] // the trigger's fields, each checked
async fn check_jira(
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
async fn check_repository_provider(state: &AppState, user: &UserId, provider: Option<&str>, needed: bool) -> Result<(), ApiError> {
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
async fn check_slack(
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
async fn check_forge(
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

/// The repository an automation's conversations clone.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = AutomationRepository)]
#[serde(deny_unknown_fields)]
pub struct RepositoryBody {
    /// One of the user's git providers (`GET /git-providers`), by name.
    pub provider: String,
    /// `owner/name` (a GitLab group path may have more segments).
    pub full_name: String,
    #[serde(default)]
    pub branch: Option<String>,
}

/// A new automation.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = AutomationCreate)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// Up to 100 characters, one line.
    pub name: String,
    pub trigger: TriggerBody,
    #[serde(default)]
    pub repository: Option<RepositoryBody>,
    /// The first message of each run's conversation: a template over the triggering event
    /// (`{{title}}`, `{{body}}`, `{{comment}}`, `{{url}}`, `{{payload}}`); the kind's default
    /// if absent (a schedule needs one).
    #[serde(default)]
    pub prompt: Option<String>,
    /// One of the user's LLM profiles; the user's default if absent.
    #[serde(default)]
    pub llm_profile: Option<String>,
    /// The agent of its conversations (one of `GET /agents`); the default of whoever a run runs
    /// as if absent. Its LLM profile must speak a wire the agent speaks.
    #[serde(default)]
    pub agent: Option<String>,
    /// `true` if absent.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// What to change of an automation; absent fields stay, `null` clears the optional ones.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = AutomationUpdate)]
#[serde(deny_unknown_fields)]
pub struct PatchBody {
    #[serde(default)]
    pub name: Option<String>,
    /// Of the same kind (another kind is another automation).
    #[serde(default)]
    pub trigger: Option<TriggerBody>,
    #[serde(default)]
    #[schema(value_type = Option<RepositoryBody>)]
    pub repository: Option<Option<RepositoryBody>>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub prompt: Option<Option<String>>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub llm_profile: Option<Option<String>>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub agent: Option<Option<String>>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// One run of an automation: when, what triggered it, and what it started or why nothing.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = AutomationRun)]
pub struct RunView {
    pub id: String,
    pub time: String,
    /// The trigger's kind.
    pub source: String,
    /// What triggered it (`delivery <id>`, `tick <time>`).
    pub trigger: String,
    /// `started`, `ignored` or `failed`.
    pub outcome: String,
    /// The conversation it started.
    pub conversation_id: Option<String>,
    /// Why it started nothing.
    pub reason: Option<String>,
}

impl From<RunRow> for RunView {
    fn from(r: RunRow) -> Self {
        let RunRow { id, time, source, trigger, outcome, conversation_id, reason } = r;
        Self { id, time, source, trigger, outcome, conversation_id, reason }
    }
}

/// An automation as the API shows it; `secret` only when created.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Automation)]
pub struct AutomationView {
    pub id: String,
    pub name: String,
    pub trigger: TriggerBody,
    pub repository: Option<RepositoryBody>,
    pub prompt: Option<String>,
    pub llm_profile: Option<String>,
    pub agent: Option<String>,
    pub enabled: bool,
    /// Where the sender posts (kinds that receive requests): the one route that takes no key.
    pub hook_url: Option<String>,
    /// The hook's signing secret: shown once, when the automation is created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// A schedule's next tick.
    pub next_run_at: Option<String>,
    pub last_run: Option<RunView>,
    pub created_at: String,
    pub updated_at: String,
}

/// The user's automations, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = AutomationList)]
pub struct AutomationList {
    pub items: Vec<AutomationView>,
}

/// An automation's runs, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = AutomationRunList)]
pub struct RunList {
    pub items: Vec<RunView>,
}

/// How many runs.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunsQuery {
    /// 1 to 1000 (100 by default).
    #[serde(default)]
    pub limit: Option<usize>,
}

fn view(state: &AppState, headers: &HeaderMap, a: &Automation, secret: Option<String>) -> AutomationView {
    let hook_url = a
        .trigger
        .has_hook()
        .then(|| format!("{}/api/v1/hooks/{}", crate::auth::client::workspace_origin(state, headers).trim_end_matches('/'), a.id));
    let next_run_at = match &a.trigger {
        proto::Trigger::Schedule { cron, timezone } if a.enabled => {
            Schedule::parse(cron, timezone).ok().and_then(|s| s.next_after(halyard_platform::now_ms())).map(rfc3339)
        }
        _ => None,
    };
    let last_run = state
        .store
        .tree()
        .get(layout::last_run_key(&a.id))
        .ok()
        .flatten()
        .and_then(|v| serde_json::from_slice::<RunRow>(&v).ok())
        .map(RunView::from);
    AutomationView {
        id: a.id.clone(),
        name: a.name.clone(),
        trigger: TriggerBody::of(&a.trigger),
        repository: a.repository.as_ref().map(|r| RepositoryBody {
            provider: r.provider.clone(),
            full_name: r.full_name.clone(),
            branch: r.branch.clone(),
        }),
        prompt: a.prompt.clone(),
        llm_profile: a.llm_profile.clone(),
        agent: a.agent.clone(),
        enabled: a.enabled,
        hook_url,
        secret,
        next_run_at,
        last_run,
        created_at: rfc3339(a.created_ms),
        updated_at: rfc3339(a.updated_ms),
    }
}

fn kv_err(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "automation store");
    ApiError::unavailable("the automation store did not answer; try again")
}

fn check_name(name: &str) -> Result<(), ApiError> {
    let n = name.trim().chars().count();
    if n == 0 || n > 100 || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request("invalid_field", "`name`: 1 to 100 characters on one line"));
    }
    Ok(())
}

fn check_prompt(prompt: Option<&str>, trigger: &proto::Trigger) -> Result<(), ApiError> {
    match prompt {
        Some(p) if p.chars().count() > MAX_PROMPT_CHARS || p.trim().is_empty() => {
            Err(ApiError::bad_request("invalid_field", format!("`prompt`: 1 to {MAX_PROMPT_CHARS} characters")))
        }
        None if matches!(trigger, proto::Trigger::Schedule { .. }) => Err(ApiError::bad_request(
            "invalid_field",
            "`prompt`: a schedule has no event to make a message of; say what each run should do",
        )),
        _ => Ok(()),
    }
}

async fn check_repository(state: &AppState, user: &UserId, r: &RepositoryBody) -> Result<AutomationRepository, ApiError> {
    let (git, _) = user_store::load::<UserGitProviders>(state, &subjects::user_git_key(user)).await?;
    if !git.providers.contains_key(&r.provider) {
        return Err(ApiError::bad_request(
            "unknown_git_provider",
            format!("`repository.provider`: you have no git provider {:?} (see GET /api/v1/git-providers)", r.provider),
        ));
    }
    let segment_ok = |s: &str| {
        !s.is_empty() && s != "." && s != ".." && s.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) && !s.starts_with('-')
    };
    let parts: Vec<&str> = r.full_name.split('/').collect();
    if parts.len() < 2 || parts.len() > 10 || !parts.iter().all(|p| segment_ok(p)) {
        return Err(ApiError::bad_request("invalid_field", "`repository.full_name`: `owner/name`, as the forge spells it"));
    }
    if let Some(b) = &r.branch {
        if b.is_empty() || b.len() > 255 || b.starts_with('-') || b.chars().any(|c| c.is_control() || c == ' ') {
            return Err(ApiError::bad_request("invalid_field", "`repository.branch`: a branch name"));
        }
    }
    Ok(AutomationRepository { provider: r.provider.clone(), full_name: r.full_name.clone(), branch: r.branch.clone() })
}

/// The automation `id` of `user` and its revision in the bucket.
async fn load(state: &AppState, user: &UserId, id: &str) -> Result<(Automation, u64), ApiError> {
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
async fn save(state: &AppState, a: &Automation, revision: Option<u64>) -> Result<(), ApiError> {
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

/// Creates an automation: 201 with its `id`, its `hook_url` for kinds that receive requests,
/// and the hook's `secret` (shown once) for kinds whose requests Halyard verifies with one.
#[utoipa::path(post, path = "/automations", tag = "automations", request_body = CreateBody,
    responses((status = 201, body = AutomationView), Refusals, BodyRefusals, Conflict))]
pub async fn create(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<impl IntoResponse, ApiError> {
    check_name(&body.name)?;
    let mut body = body;
    let (signing_secret, bot_token) = body.trigger.take_credentials();
    let trigger = body.trigger.into_trigger(&state, &user, None).await?;
    if matches!(trigger, proto::Trigger::Slack { .. })
        && (signing_secret.as_deref().is_none_or(str::is_empty) || bot_token.as_deref().is_none_or(str::is_empty))
    {
        return Err(ApiError::bad_request("invalid_field", "`trigger`: a slack trigger needs the app's `signing_secret` and `bot_token`"));
    }
    check_prompt(body.prompt.as_deref(), &trigger)?;
    let repository = match &body.repository {
        Some(r) => Some(check_repository(&state, &user, r).await?),
        None => None,
    };
    if let Some(p) = &body.llm_profile {
        crate::domain::user_config::check_profile(&state, &user, "llm_profile", p).await?;
    }
    if let Some(agent) = &body.agent {
        check_agent(&state, &user, agent, body.llm_profile.as_deref()).await?;
    }
    let mine = state.automations.values().iter().filter(|a| a.owner == user).count();
    if mine >= MAX_AUTOMATIONS {
        return Err(ApiError::conflict("too_many_automations", format!("you have {mine} automations (the limit); delete one first")));
    }
    let id = uuid::Uuid::now_v7().to_string();
    // Halyard makes the hook's secret, except where the sender's platform made its own (Slack).
    let secret = (trigger.has_hook() && signing_secret.is_none()).then(keys::new_webhook_secret);
    let secret_sealed = match secret.as_ref().or(signing_secret.as_ref()) {
        Some(s) => Some(state.vault.seal(&proto::secret_slot(&id), s).map_err(ApiError::internal)?),
        None => None,
    };
    let token_sealed = match &bot_token {
        Some(t) => Some(state.vault.seal(&proto::token_slot(&id), t).map_err(ApiError::internal)?),
        None => None,
    };
    let now = halyard_platform::now_ms();
    let a = Automation {
        id,
        owner: user,
        name: body.name.trim().to_owned(),
        trigger,
        repository,
        prompt: body.prompt,
        llm_profile: body.llm_profile,
        agent: body.agent,
        enabled: body.enabled.unwrap_or(true),
        secret_sealed,
        token_sealed,
        created_ms: now,
        updated_ms: now,
    };
    save(&state, &a, None).await?;
    tracing::info!(automation_id = %a.id, user = %a.owner, kind = a.trigger.kind(), "automation created");
    let detail = serde_json::json!({"name": a.name, "kind": a.trigger.kind(), "enabled": a.enabled});
    audit::Action::new(&a.owner, "automation.create", &a.id).detail(detail).send(&state, client).await;
    Ok((StatusCode::CREATED, Json(view(&state, &headers, &a, secret))))
}

/// The user's automations, newest first, each with its last run.
#[utoipa::path(get, path = "/automations", tag = "automations", responses((status = 200, body = AutomationList), Refusals))]
pub async fn list(State(state): State<AppState>, User(user): User, headers: HeaderMap) -> Json<AutomationList> {
    let mut mine: Vec<_> = state.automations.values().into_iter().filter(|a| a.owner == user).collect();
    mine.sort_by_key(|a| std::cmp::Reverse(a.created_ms));
    Json(AutomationList { items: mine.iter().map(|a| view(&state, &headers, a, None)).collect() })
}

/// One automation (never its secret).
#[utoipa::path(get, path = "/automations/{id}", tag = "automations", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = AutomationView), Refusals))]
pub async fn get_one(
    State(state): State<AppState>,
    User(user): User,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<AutomationView>, ApiError> {
    let (a, _) = load(&state, &user, &id).await?;
    Ok(Json(view(&state, &headers, &a, None)))
}

/// Changes an automation (409 `concurrent_update` if it changed meanwhile).
#[utoipa::path(patch, path = "/automations/{id}", tag = "automations", params(("id" = String, Path, format = Uuid)),
    request_body = PatchBody, responses((status = 200, body = AutomationView), Refusals, BodyRefusals, Conflict))]
pub async fn patch(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchBody>,
) -> Result<Json<AutomationView>, ApiError> {
    let (mut a, revision) = load(&state, &user, &id).await?;
    // The names of the fields the change sets (values may be credentials: never recorded).
    let changed: Vec<&str> = [
        ("name", body.name.is_some()),
        ("trigger", body.trigger.is_some()),
        ("repository", body.repository.is_some()),
        ("prompt", body.prompt.is_some()),
        ("llm_profile", body.llm_profile.is_some()),
        ("agent", body.agent.is_some()),
        ("enabled", body.enabled.is_some()),
    ]
    .into_iter()
    .filter_map(|(n, on)| on.then_some(n))
    .collect();
    if let Some(name) = body.name {
        check_name(&name)?;
        a.name = name.trim().to_owned();
    }
    let (slack_api_before, prompt_before) = (slack_api_url(&a.trigger), a.prompt.clone());
    let mut new_secret = false;
    if let Some(mut t) = body.trigger {
        let (signing_secret, bot_token) = t.take_credentials();
        new_secret = signing_secret.as_ref().is_some_and(|s| !s.is_empty());
        let t = t.into_trigger(&state, &user, Some(&a.trigger)).await?;
        if t.kind() != a.trigger.kind() {
            return Err(ApiError::bad_request(
                "invalid_field",
                format!("`trigger`: this automation is a {} one; create another automation for a {} trigger", a.trigger.kind(), t.kind()),
            ));
        }
        a.trigger = t;
        // New credentials replace the stored ones; absent, those stay.
        if let Some(s) = signing_secret.filter(|s| !s.is_empty()) {
            a.secret_sealed = Some(state.vault.seal(&proto::secret_slot(&a.id), &s).map_err(ApiError::internal)?);
        }
        if let Some(t) = bot_token.filter(|t| !t.is_empty()) {
            a.token_sealed = Some(state.vault.seal(&proto::token_slot(&a.id), &t).map_err(ApiError::internal)?);
        }
    }
    if let Some(r) = body.repository {
        a.repository = match r {
            Some(r) => Some(check_repository(&state, &user, &r).await?),
            None => None,
        };
    }
    if let Some(p) = body.prompt {
        a.prompt = p;
    }
    check_prompt(a.prompt.as_deref(), &a.trigger)?;
    if let Some(p) = body.llm_profile {
        if let Some(p) = &p {
            crate::domain::user_config::check_profile(&state, &user, "llm_profile", p).await?;
        }
        a.llm_profile = p;
    }
    if let Some(agent) = body.agent {
        a.agent = agent;
    }
    // (Checked whenever either changed: the two must fit each other.)
    if let Some(agent) = a.agent.as_deref().filter(|_| changed.contains(&"agent") || changed.contains(&"llm_profile")) {
        check_agent(&state, &user, agent, a.llm_profile.as_deref()).await?;
    }
    if let Some(e) = body.enabled {
        a.enabled = e;
    }
    // Who a Slack user is, and whether they let it run as them, was said of this secret, this
    // Slack and this prompt: a change to any of them drops the links to other users.
    if new_secret || slack_api_url(&a.trigger) != slack_api_before || a.prompt != prompt_before {
        if let proto::Trigger::Slack { users, consented, .. } = &mut a.trigger {
            users.retain(|_, u| *u == user.0);
            consented.clear();
        }
    }
    a.updated_ms = halyard_platform::now_ms();
    save(&state, &a, Some(revision)).await?;
    let detail = serde_json::json!({"name": a.name, "kind": a.trigger.kind(), "enabled": a.enabled, "changed": changed});
    audit::Action::new(&user, "automation.update", &a.id).detail(detail).send(&state, client).await;
    Ok(Json(view(&state, &headers, &a, None)))
}

/// A Slack trigger's Web API (`None` for other kinds, or Slack's own).
fn slack_api_url(t: &proto::Trigger) -> Option<String> {
    match t {
        proto::Trigger::Slack { api_url, .. } => api_url.clone(),
        _ => None,
    }
}

/// Deletes an automation: its hook refuses requests and its schedule stops.
#[utoipa::path(delete, path = "/automations/{id}", tag = "automations", params(("id" = String, Path, format = Uuid)),
    responses((status = 204, description = "deleted"), Refusals))]
pub async fn delete(
    State(state): State<AppState>,
    User(user): User,
    client: Client,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let (a, _) = load(&state, &user, &id).await?;
    let key = subjects::automation_key(&a.id);
    state.automation_kv.delete(&key).await.map_err(kv_err)?;
    // Ids are never used again: the deletion outranks any value of the key still on its way.
    state.automations.apply_value(&key, u64::MAX, true, &[]);
    if let Err(e) = state.automation_kv.delete(subjects::automation_tick_key(&a.id)).await {
        tracing::warn!(automation_id = %a.id, error = %e, "the deleted automation's tick record stays");
    }
    tracing::info!(automation_id = %a.id, user = %a.owner, "automation deleted");
    audit::Action::new(&user, "automation.delete", &a.id).detail(serde_json::json!({"name": a.name})).send(&state, client).await;
    Ok(StatusCode::NO_CONTENT)
}

/// An automation's runs, newest first: what each request or tick started, or why nothing.
#[utoipa::path(get, path = "/automations/{id}/runs", tag = "automations", params(("id" = String, Path, format = Uuid), RunsQuery),
    responses((status = 200, body = RunList), Refusals))]
pub async fn runs(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
    query: Result<Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<RunList>, ApiError> {
    let Query(q) = query?;
    let (a, _) = load(&state, &user, &id).await?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "`limit` must be between 1 and 1000"));
    }
    let mut items = Vec::new();
    for entry in state.store.tree().scan_prefix(layout::run_prefix(&a.id)).take(limit) {
        let (_, v) = entry.map_err(ApiError::internal)?;
        if let Ok(item) = serde_json::from_slice::<RunRow>(&v).map(RunView::from) {
            items.push(item);
        }
    }
    Ok(Json(RunList { items }))
}

/// An automation's agent can run its owner's conversations: known, installed, and speaking the
/// wire of `profile` (the owner's default when absent), as a start would check it.
async fn check_agent(state: &AppState, user: &UserId, agent: &str, profile: Option<&str>) -> Result<(), ApiError> {
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
