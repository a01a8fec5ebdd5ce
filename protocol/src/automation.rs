//! Automations: work that starts without a user at the keyboard. An automation belongs to a
//! user and names a trigger (a request to its hook, a schedule); the gateway verifies what
//! reaches its hook and hands it on as an [`AutomationCommand`], the automation service decides
//! and starts conversations as any client would, and records each decision as an
//! [`AutomationRun`] (`halyard.sys.automation.<id>`).
//!
//! Definitions live in the `halyard_automations` bucket (`def.<id>`), which the gateways and the
//! automation service keep in memory and watch; a hook's secret is sealed there, never stored open.

use serde::{Deserialize, Serialize};

use crate::{ConversationId, UnixMillis, UserId};

/// One automation, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Automation {
    /// A UUID; also the last segment of its hook URL.
    pub id: String,
    pub owner: UserId,
    pub name: String,
    pub trigger: Trigger,
    /// Where its conversations work (cloned through the owner's git provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<AutomationRepository>,
    /// A template over the triggering event (`{{title}}`, `{{body}}`, `{{comment}}`, `{{url}}`,
    /// `{{payload}}`); the kind's default if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// One of the owner's LLM profiles; the owner's default if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_profile: Option<String>,
    /// The agent its conversations have (`halyard`, `claude-code`, a registered one...); the
    /// default of whoever a run runs as if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// One of the owner's templates (`templates.<owner>` in the user bucket): the runs that run
    /// as the owner take its checks (`result_schema`, `verify`), environment, sandbox spec and
    /// LLM profile (the automation's own comes first), and its message when `prompt` is absent
    /// (not a Slack automation's, whose runs may be another user's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    pub enabled: bool,
    /// The hook's verification secret, sealed with the deployment's vault (slot
    /// [`secret_slot`]); kinds without a secret have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_sealed: Option<String>,
    /// A token Halyard answers with (Slack's bot token), sealed (slot [`token_slot`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sealed: Option<String>,
    pub created_ms: UnixMillis,
    pub updated_ms: UnixMillis,
}

/// The vault slot of an automation's hook secret (binds the sealed value to its automation).
pub fn secret_slot(id: &str) -> String {
    format!("automation:{id}")
}

/// The vault slot of an automation's outbound token (Slack's bot token).
pub fn token_slot(id: &str) -> String {
    format!("automation:{id}:token")
}

/// What starts an automation's runs. Internally tagged by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Trigger {
    /// Any program posting JSON to the hook, signed as Standard Webhooks with the automation's
    /// secret (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
    Webhook {},
    /// Every tick of a five-field cron expression, in an IANA time zone.
    Schedule { cron: String, timezone: String },
    /// GitHub's webhooks (`X-Hub-Signature-256` with the automation's secret): an issue or pull
    /// request labelled `label`, or a comment or review that mentions `mention`, by someone with
    /// write access. `provider` is one of the owner's git providers: Halyard answers on the
    /// forge with its token.
    Github { provider: String, label: String, mention: String },
    /// GitLab's webhooks (`X-Gitlab-Token`: the automation's secret): issue and merge request
    /// hooks that add `label`, note hooks that mention `mention`, by a member with Developer
    /// access or more; replies go in the same discussion.
    Gitlab { provider: String, label: String, mention: String },
    /// Bitbucket Cloud's webhooks (`X-Hub-Signature: sha256=` HMAC of the body with the
    /// automation's secret): a pull request comment mentioning `mention` by someone with write
    /// access starts a conversation on the pull request's branch; replies go under the comment.
    Bitbucket { provider: String, mention: String },
    /// Azure DevOps service hooks (basic auth with the credentials Halyard made: `halyard` and
    /// the automation's secret): a pull request comment or a work item comment mentioning
    /// `mention` starts a conversation (a pull request's on its source branch, a work item's on the
    /// automation's repository); replies go in the pull request's thread or on the work item.
    AzureDevops { provider: String, mention: String },
    /// Forgejo's and Gitea's webhooks (`X-Forgejo-Signature` or `X-Gitea-Signature`: hex HMAC of
    /// the body with the automation's secret), acted on as GitHub's; `provider` of kind `forgejo`.
    Forgejo { provider: String, label: String, mention: String },
    /// Jira's webhooks (`X-Hub-Signature: sha256=` HMAC of the body with the automation's
    /// secret): a comment mentioning `mention`, or `label` added to an issue, in one of
    /// `projects` (project key to `owner/name` on `provider`, or none) starts a conversation;
    /// Halyard comments back through Jira's REST API at `api_url` as `email` with an API token
    /// (sealed in `token_sealed`).
    Jira {
        api_url: String,
        email: String,
        projects: std::collections::BTreeMap<String, Option<String>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        label: String,
        mention: String,
    },
    /// Linear's webhooks (`Linear-Signature`: hex HMAC of the body with the webhook's signing
    /// secret, sealed in `secret_sealed`; `webhookTimestamp` at most a minute old): a comment
    /// mentioning `mention`, or `label` added to an issue, of one of `teams` (team key to
    /// `owner/name` on `provider`, or none) starts a conversation; Halyard comments back through
    /// Linear's GraphQL API with an API key (sealed in `token_sealed`).
    Linear {
        teams: std::collections::BTreeMap<String, Option<String>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        /// Linear's GraphQL endpoint (`https://api.linear.app/graphql` if absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_url: Option<String>,
        label: String,
        mention: String,
    },
    /// Slack's Events API (`X-Slack-Signature` with the app's signing secret, sealed in
    /// `secret_sealed`; the bot token sealed in `token_sealed`): an `app_mention` in one of
    /// `channels` (channel id to `owner/name` on `provider`, or none) by a Slack user linked in
    /// `users` (Slack user id to Halyard user) starts a conversation, answered in the thread.
    Slack {
        channels: std::collections::BTreeMap<String, Option<String>>,
        users: std::collections::BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        /// Slack's Web API (`https://slack.com/api` if absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_url: Option<String>,
        /// The linked Halyard users (other than the owner) who let this automation run agents as
        /// them: set only by each of them (the sign-in link's `run_as_me`), never by the owner,
        /// and dropped with the links when the owner changes the signing secret, `api_url` or
        /// prompt. A mention by a linked user who is not here starts nothing as them: whoever
        /// holds the signing secret can claim any Slack user mentioned the bot.
        #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
        consented: std::collections::BTreeSet<String>,
    },
}

impl Trigger {
    /// The kind's name, as in the JSON (`webhook`, `schedule`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Webhook {} => "webhook",
            Self::Schedule { .. } => "schedule",
            Self::Github { .. } => "github",
            Self::Gitlab { .. } => "gitlab",
            Self::Forgejo { .. } => "forgejo",
            Self::Bitbucket { .. } => "bitbucket",
            Self::AzureDevops { .. } => "azure_devops",
            Self::Jira { .. } => "jira",
            Self::Linear { .. } => "linear",
            Self::Slack { .. } => "slack",
        }
    }

    /// Whether the kind receives requests at a hook URL.
    pub fn has_hook(&self) -> bool {
        !matches!(self, Self::Schedule { .. })
    }
}

/// The repository an automation's conversations clone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutomationRepository {
    /// One of the owner's git providers, by name.
    pub provider: String,
    /// `owner/name`.
    pub full_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// Work for the automation service (`halyard.cmd.automation.<id>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AutomationCommand {
    /// A request to the hook whose signature checked out, as it came (the body is the raw text
    /// that was verified; it is parsed only now).
    Hook {
        automation_id: String,
        /// The request's own id (`webhook-id`, `X-GitHub-Delivery`, ...), already deduplicated.
        delivery_id: String,
        received_ms: UnixMillis,
        /// What the sender says the request is about, where its scheme says (`X-GitHub-Event`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event: Option<String>,
        body: String,
    },
    /// A schedule's tick, claimed by one automation service (see `AutomationRun`).
    Tick {
        automation_id: String,
        /// The instant of the tick.
        tick_ms: UnixMillis,
    },
}

/// What a run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// A conversation was started.
    Started,
    /// The request went to the conversation already working on its thread, as a message.
    Continued,
    /// Nothing was started; `reason` says why.
    Ignored,
    /// A conversation should have started and did not; `reason` says why.
    Failed,
}

impl RunOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Continued => "continued",
            Self::Ignored => "ignored",
            Self::Failed => "failed",
        }
    }
}

/// One decision of an automation (`halyard.sys.automation.<id>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutomationRun {
    /// A UUID derived from what triggered it, so a redelivered command records the same run.
    pub run_id: String,
    pub automation_id: String,
    pub owner: UserId,
    pub time_ms: UnixMillis,
    /// The trigger's kind (`webhook`, `schedule`, `github`).
    pub source: String,
    /// What triggered it, for people: `delivery <id>`, `tick 2026-11-26T23:00:00Z`.
    pub trigger: String,
    pub outcome: RunOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<ConversationId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl crate::envelope::Payload for AutomationCommand {
    fn kind(&self) -> String {
        match self {
            Self::Hook { .. } => "cmd.automation.hook",
            Self::Tick { .. } => "cmd.automation.tick",
        }
        .to_owned()
    }
}

/// Where a run's conversation answers on a forge (`thread.<automation id>.<digest>` and
/// `conv.<conversation id>` in the automations bucket): later mentions in the same issue or pull
/// request go to the same conversation, and its summary goes back there when a run ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    pub automation_id: String,
    pub conversation_id: ConversationId,
    /// `owner/name`.
    pub repository: String,
    /// The issue or pull request.
    pub number: u64,
    /// A pull (merge) request rather than an issue, where the forge's API tells them apart.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_pull: bool,
    /// The discussion replies go to, where the forge has them (GitLab).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discussion: Option<String>,
    /// A chat thread instead (Slack): the channel and the thread's first message's `ts`
    /// (`repository` and `number` are then empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_ts: Option<String>,
    /// An issue tracker's issue instead (Jira: `PROJ-12`; Linear: the issue's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue_key: Option<String>,
    /// The user the conversation runs as, where not the automation's owner (a Slack user linked
    /// to another Halyard user): only they continue it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_as: Option<crate::UserId>,
    /// The key the thread is remembered under for later mentions (`thread.<automation>.<digest>`):
    /// forgotten when the conversation's start fails, so that the next mention starts afresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_key: Option<String>,
}

/// A sign-in link Halyard sent privately to a Slack user no Halyard user is linked to (stored
/// at `slacklink.<code>` in the automations bucket until it is used or expires): whoever signs
/// in and follows it before `expires_ms` becomes the Halyard user that Slack user is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlackLink {
    pub automation_id: String,
    pub slack_user: String,
    pub expires_ms: i64,
    /// The Slack user in words, as the app's `users.info` named them (`Ada Lovelace (@ada)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack_name: Option<String>,
    /// Their Slack workspace, as the app's `team.info` named it (`Acme (acme.slack.com)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The workspace's id, as the mention's request named it: Sign in with Slack must name the
    /// same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
}

impl Thread {
    /// A thread of `automation_id` answered by `conversation_id`, where yet to be said.
    pub fn new(automation_id: &str, conversation_id: ConversationId) -> Self {
        Self {
            automation_id: automation_id.to_owned(),
            conversation_id,
            repository: String::new(),
            number: 0,
            is_pull: false,
            discussion: None,
            channel: None,
            thread_ts: None,
            issue_key: None,
            runs_as: None,
            thread_key: None,
        }
    }
}
