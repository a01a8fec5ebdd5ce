//! An automation's trigger as a request writes it ([`TriggerBody`]), checked and turned into
//! what is stored: each kind's settings, its write-only credentials sealed, its provider and
//! channels known to exist ([`super::trigger_checks`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::schedule::Schedule;
use halyard_protocol::UserId;
use halyard_protocol::automation::{self as proto};

use super::trigger_checks::{check_forge, check_jira, check_repository_provider, check_slack};
use crate::http::error::ApiError;
use crate::state::AppState;

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
    pub(super) fn take_credentials(&mut self) -> (Option<String>, Option<String>) {
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
    pub(super) async fn into_trigger(
        self,
        state: &AppState,
        user: &UserId,
        previous: Option<&proto::Trigger>,
    ) -> Result<proto::Trigger, ApiError> {
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

    pub(super) fn of(t: &proto::Trigger) -> Self {
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
