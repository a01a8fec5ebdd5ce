//! A conversation and its start task as the API shows them, made from the read model's rows
//! (`state` folds the start task's, the agent's and the sandbox's statuses into one).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::read_model::store::{self, ConversationView, TaskView};

/// A start task: how a conversation's start goes.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = StartTask)]
pub struct StartTask {
    pub id: String,
    pub conversation_id: String,
    /// `WORKING`, `QUEUED` (waiting its turn for a sandbox host with room), `WAITING_FOR_SANDBOX`
    /// (or `RESTORING_SNAPSHOT`, starting from its environment's snapshot), `PREPARING_REPOSITORY`,
    /// `RUNNING_SETUP_SCRIPT`, `SAVING_SNAPSHOT` (keeping the sandbox after its environment's
    /// setup), `SETTING_UP_GIT_HOOKS`, `SETTING_UP_SKILLS`, `STARTING_CONVERSATION`, `READY`,
    /// `ERROR` or `CANCELLED`.
    pub status: String,
    /// For `ERROR`: which phase failed and why. For `READY` with an environment: what became of
    /// it (started from a snapshot, or set up in how long and whether a snapshot was kept).
    pub detail: Option<String>,
    pub sandbox_id: Option<String>,
    /// The sandbox came ready-made from the warm pool.
    pub from_pool: bool,
    /// The environment snapshot the sandbox started from (setup was not run again).
    pub snapshot: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// While `QUEUED`: its place in line (1: next), in the deployment's order.
    pub position: Option<u32>,
    /// While `QUEUED`: about how many seconds until it is placed, from the recent pace (absent
    /// before there is one).
    pub estimate_secs: Option<u64>,
}

pub(crate) fn task_json(t: &TaskView) -> StartTask {
    StartTask {
        id: t.id.clone(),
        conversation_id: t.conversation_id.clone(),
        status: t.status.clone(),
        detail: t.detail.clone(),
        sandbox_id: t.sandbox_id.clone(),
        from_pool: t.from_pool,
        snapshot: t.snapshot.clone(),
        created_at: t.created_at.clone(),
        updated_at: t.updated_at.clone(),
        position: None,
        estimate_secs: None,
    }
}

/// The one status a person reads, and its detail: `starting`, `start_failed`, the agent's
/// execution status (`idle`, `running`, `paused`, `finished`, `error`, `stuck`,
/// `waiting_for_confirmation`), or `sandbox_deleted`. `status`, `start_task_status`,
/// `execution_status` and `sandbox_status` are what it is made of.
pub(crate) fn state_of(c: &ConversationView) -> (&str, Option<String>) {
    match (c.status.as_str(), c.execution_status.as_deref()) {
        ("ERROR", _) => ("start_failed", c.error_detail.clone()),
        ("READY", _) if c.sandbox_status.as_deref() == Some("DELETED") => {
            ("sandbox_deleted", Some("the conversation's sandbox was deleted; start a new conversation to go on".into()))
        }
        ("READY", Some(s @ ("error" | "stuck"))) => (s, c.agent_error.clone().or_else(|| c.execution_reason.clone())),
        ("READY", Some(s)) => (s, c.execution_reason.clone()),
        _ => ("starting", None),
    }
}

/// Every value of [`state_of`].
pub(crate) const STATES: &[&str] =
    &["starting", "start_failed", "idle", "running", "paused", "finished", "error", "stuck", "waiting_for_confirmation", "sandbox_deleted"];

/// A conversation as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Conversation {
    pub id: String,
    /// Who started it (yourself, unless an organization you are in reads it).
    pub owner: String,
    /// `private`: its owner's alone; `org`: the members of `org` read it too.
    pub visibility: halyard_protocol::org::Visibility,
    pub title: Option<String>,
    /// The message it was started with.
    pub message: Option<String>,
    /// The one status a person reads: `starting`, `start_failed`, `idle`, `running`, `paused`,
    /// `finished`, `error`, `stuck`, `waiting_for_confirmation` or `sandbox_deleted`.
    pub state: String,
    /// Why, in words, where there is something to say.
    pub state_detail: Option<String>,
    /// Technical: `STARTING`, `READY` or `ERROR` (the start task's outcome).
    pub status: String,
    pub start_task_id: String,
    /// Technical: the start task's step.
    pub start_task_status: String,
    pub error_detail: Option<String>,
    /// Technical: the agent's execution status.
    pub execution_status: Option<String>,
    pub sandbox_id: Option<String>,
    /// Technical: the sandbox's status.
    pub sandbox_status: Option<String>,
    /// `{"url", "branch"}` when it was started on a repository.
    pub repository: Option<Value>,
    pub created_at: String,
    pub updated_at: String,
    pub last_event_seq: u64,
    /// When actions wait for the user's consent: `never`, `always` or `risky`.
    pub confirmation_policy: String,
    /// The agent that works in it (`GET /agents`): `halyard`, or a third-party agent's name.
    pub agent: String,
    pub metrics: Metrics,
    /// A fork: the conversation and event it was forked from.
    pub forked_from: Option<ForkedFrom>,
    /// Labels the owner finds it by.
    pub tags: BTreeMap<String, String>,
    /// The organization it was started in (its settings applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// The pull requests the agent opened with Halyard's own tool, in order.
    pub pull_requests: Vec<store::PullRequest>,
    /// Where the agent's browser is and its latest screenshot (absent: it has not browsed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub browser: Option<store::BrowserView>,
    /// A helper: the conversation whose agent started it (with its `delegate` tool), whose
    /// sandbox and workspace it shares.
    #[schema(format = Uuid)]
    pub parent_conversation_id: Option<String>,
    /// The helpers its agent started, in order.
    pub sub_conversation_ids: Vec<String>,
    /// The agent's typed result (its start's `result_schema`), once it finished with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// What its checks (`verify`) said of the agent's last checked finish.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<store::Verdict>,
}

/// Where a fork comes from.
#[derive(Debug, Serialize, ToSchema)]
pub struct ForkedFrom {
    pub conversation_id: String,
    /// The last of that conversation's events the fork kept.
    pub at_seq: u64,
}

/// What the conversation's LLM calls used in all.
#[derive(Debug, Serialize, ToSchema)]
pub struct Metrics {
    pub llm_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// The calls whose model has a price, in US dollars.
    pub cost_usd: f64,
    pub latency_ms: u64,
    /// The same per model that answered (a profile's fallbacks answer with their own).
    pub by_model: std::collections::BTreeMap<String, ModelMetrics>,
}

/// What one model's calls used.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelMetrics {
    pub llm_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    pub cost_usd: f64,
}

/// A page of conversations, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationPage {
    pub items: Vec<Conversation>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
    /// How many match in all.
    pub count: usize,
}

pub(crate) fn conversation_json(c: &ConversationView) -> Conversation {
    let (state, state_detail) = state_of(c);
    Conversation {
        id: c.id.clone(),
        owner: c.owner.clone(),
        visibility: c.visibility,
        title: c.title.clone(),
        message: c.first_message.clone(),
        state: state.to_owned(),
        state_detail,
        status: c.status.clone(),
        start_task_id: c.start_task_id.clone(),
        start_task_status: c.start_task_status.clone(),
        error_detail: c.error_detail.clone(),
        execution_status: c.execution_status.clone(),
        sandbox_id: c.sandbox_id.clone(),
        sandbox_status: c.sandbox_status.clone(),
        repository: c.repository.clone(),
        created_at: c.created_at.clone(),
        updated_at: c.updated_at.clone(),
        last_event_seq: c.last_event_seq,
        confirmation_policy: if c.confirmation_policy.is_empty() { "never".into() } else { c.confirmation_policy.clone() },
        agent: c.start_request.as_ref().and_then(|r| r.agent.clone()).unwrap_or_else(|| halyard_protocol::agents::HALYARD.into()),
        metrics: Metrics {
            llm_calls: c.metrics.llm_calls,
            prompt_tokens: c.metrics.prompt_tokens,
            completion_tokens: c.metrics.completion_tokens,
            cached_tokens: c.metrics.cached_tokens,
            cost_usd: (c.metrics.cost_usd * 1e6).round() / 1e6,
            latency_ms: c.metrics.latency_ms,
            by_model: c
                .metrics
                .by_model
                .iter()
                .map(|(model, m)| {
                    let per = ModelMetrics {
                        llm_calls: m.llm_calls,
                        prompt_tokens: m.prompt_tokens,
                        completion_tokens: m.completion_tokens,
                        cached_tokens: m.cached_tokens,
                        cost_usd: (m.cost_usd * 1e6).round() / 1e6,
                    };
                    (model.clone(), per)
                })
                .collect(),
        },
        forked_from: c
            .start_request
            .as_ref()
            .and_then(|r| r.fork.as_ref())
            .map(|f| ForkedFrom { conversation_id: f.conversation_id.to_string(), at_seq: f.at_seq }),
        tags: c.tags.clone(),
        org: c.start_request.as_ref().and_then(|r| r.org.clone()),
        pull_requests: c.pull_requests.clone(),
        browser: c.browser.clone(),
        result: c.result.clone(),
        verdict: c.verdict.clone(),
        parent_conversation_id: c.parent_conversation_id.clone(),
        sub_conversation_ids: c.sub_conversation_ids.clone(),
    }
}
