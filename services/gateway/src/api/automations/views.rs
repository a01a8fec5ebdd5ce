//! What the automation routes take and answer: the bodies of a create and a patch, an
//! automation and its runs as the API shows them.

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use halyard_platform::schedule::Schedule;
use halyard_protocol::automation::{self as proto, Automation};

use crate::read_model::layout;
use crate::read_model::rows::RunRow;
use crate::read_model::store::rfc3339;
use crate::state::AppState;

use super::triggers::TriggerBody;

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
    /// One of your templates (`GET /templates`): its checks (`result_schema`, `verify`),
    /// environment, sandbox spec and LLM profile apply to the runs that run as you, and its
    /// message (over the event's `{{title}}`, `{{body}}`...) when `prompt` is absent.
    #[serde(default)]
    pub template: Option<String>,
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
    #[schema(value_type = Option<String>)]
    pub template: Option<Option<String>>,
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
    pub template: Option<String>,
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

pub(super) fn view(state: &AppState, headers: &HeaderMap, a: &Automation, secret: Option<String>) -> AutomationView {
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
        template: a.template.clone(),
        enabled: a.enabled,
        hook_url,
        secret,
        next_run_at,
        last_run,
        created_at: rfc3339(a.created_ms),
        updated_at: rfc3339(a.updated_ms),
    }
}
