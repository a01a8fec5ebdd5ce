//! The conversation event log: what a user sees of a conversation, in order.
//!
//! Every event carries `seq`, its position in its conversation's log: contiguous from 1, never
//! reused. Clients resume by `seq`. Events are appended to JetStream with an expected-last-
//! subject-sequence check, so two writers can never both append the same `seq`.

use serde::{Deserialize, Serialize};

use crate::UnixMillis;
use crate::envelope::Payload;
use crate::ids::{ConversationId, EventId, SandboxId, UserId};

/// Who caused an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EventSource {
    User,
    Agent,
    Environment,
    System,
}

/// The agent's execution status, as OpenHands names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ExecutionStatus {
    Idle,
    Running,
    Paused,
    Finished,
    Error,
    /// The run ended because the agent repeated itself (see the `agent_error` with code
    /// `stuck`); a message lets it try again.
    Stuck,
    /// Actions wait for the user's `confirm` or `reject` (the conversation's confirmation
    /// policy asked for it); nothing runs until then.
    WaitingForConfirmation,
}

impl ExecutionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Finished => "finished",
            Self::Error => "error",
            Self::Stuck => "stuck",
            Self::WaitingForConfirmation => "waiting_for_confirmation",
        }
    }
}

/// Who chose a title.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TitleSource {
    User,
    Generated,
}

/// How a skill reaches the agent (OpenHands' and AgentSkills' kinds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum SkillKind {
    /// Always in the system prompt (repository skills, `AGENTS.md`, global skills without
    /// triggers).
    #[default]
    Always,
    /// Enters the context when a user message contains one of its `triggers` (once per
    /// conversation; a `skill_activated` event says so).
    Knowledge,
    /// A folder skill (`SKILL.md`): offered by name and description; the agent loads its body
    /// with the `load_skill` tool when it needs it.
    AgentSkill,
}

impl SkillKind {
    fn is_always(&self) -> bool {
        *self == Self::Always
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Knowledge => "knowledge",
            Self::AgentSkill => "agent_skill",
        }
    }
}

/// One block of the model's reasoning: its text and the provider's signature over it
/// (Anthropic's extended thinking), or a block the provider redacted, kept only as the opaque
/// data it must be given back as.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ThinkingBlock {
    /// What the model reasoned (empty for a redacted block).
    #[serde(default)]
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// A redacted block's encrypted data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<String>,
}

/// One task of the agent's plan (OpenHands' `task_tracker` item).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskItem {
    pub title: String,
    #[serde(default)]
    pub notes: String,
    #[serde(default)]
    pub status: TaskStatus,
}

/// Where a task of the plan stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TaskStatus {
    #[default]
    Todo,
    InProgress,
    Done,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Todo => "todo",
            Self::InProgress => "in_progress",
            Self::Done => "done",
        }
    }
}

/// A skill the conversation has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ConversationSkill))]
pub struct Skill {
    pub name: String,
    /// The body (the Markdown after the frontmatter).
    pub content: String,
    #[serde(default, skip_serializing_if = "SkillKind::is_always")]
    pub kind: SkillKind,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Skill {
    /// A skill that is always in the prompt.
    pub fn always(name: impl Into<String>, content: impl Into<String>) -> Self {
        Self { name: name.into(), content: content.into(), kind: SkillKind::Always, triggers: Vec::new(), description: None }
    }
}

/// When actions wait for the user's consent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ConfirmationPolicy {
    /// Nothing waits.
    #[default]
    Never,
    /// Every action but `think` and `finish` waits.
    Always,
    /// Actions whose security risk is `high` wait.
    Risky,
}

impl ConfirmationPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::Always => "always",
            Self::Risky => "risky",
        }
    }
}

/// How risky an action is: stated by the model (`security_risk` argument) and raised by
/// Halyard's rule-based analyzer, never lowered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum SecurityRisk {
    Low,
    Medium,
    High,
}

impl SecurityRisk {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

fn is_never(p: &ConfirmationPolicy) -> bool {
    *p == ConfirmationPolicy::Never
}

/// What a conversation's LLM calls may use in all; a run ends with `agent_error`
/// `budget_exceeded` before a call would pass either.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Budget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// A piece of an answer the model is still writing: published on core NATS
/// ([`crate::subjects::answer_deltas`]) as the provider streams it, never appended to the log,
/// which gets the finished answer as usual. Pieces are numbered per answer; a reader keeps the
/// text and the number of pieces it holds (`have`): a piece with `from == have` is appended
/// (then `have = to`), a whole text so far (`from == 0`, from
/// [`crate::subjects::answer_so_far`] or after a retried call) replaces what it holds when its
/// `to` is past `have`; anything else is stale. A reader drops the text when the answer's
/// `llm_call` event arrives (seq past `after_seq`; the finished message follows it), or the run
/// ends without one (an `agent_error`, an `execution_status` other than `running`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AnswerDelta {
    /// The log's last seq when the LLM call began: the answer's events come after it.
    pub after_seq: u64,
    /// Pieces of this answer before `text`.
    pub from: u64,
    /// Pieces of this answer up to the end of `text`.
    pub to: u64,
    pub text: String,
}

impl crate::envelope::Payload for AnswerDelta {
    fn kind(&self) -> String {
        "answer_delta".into()
    }
}

/// One entry in a conversation's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationEvent {
    /// Position in the conversation's log, contiguous from 1.
    pub seq: u64,
    pub id: EventId,
    pub conversation_id: ConversationId,
    pub source: EventSource,
    pub timestamp_ms: UnixMillis,
    pub body: EventBody,
}

/// What a conversation's work is checked against when its agent finishes: a typed result and
/// checks that send the agent back when they fail.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Checks {
    /// A JSON Schema the agent's `result` (an argument of its `finish` tool) must validate
    /// against; the agent is told why and tries again when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_schema: Option<serde_json::Value>,
    /// Checks run, in order, when the agent finishes; a failing one sends it back with what
    /// the check said.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<Check>,
    /// How many times the agent may finish and be checked (absent: [`DEFAULT_VERIFY_ATTEMPTS`]);
    /// the last attempt's verdict stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_verify_attempts: Option<u32>,
}

/// The attempts a conversation gets when its start says none.
pub const DEFAULT_VERIFY_ATTEMPTS: u32 = 3;

impl Checks {
    pub fn is_empty(&self) -> bool {
        self.result_schema.is_none() && self.verify.is_empty()
    }

    pub fn attempts(&self) -> u32 {
        self.max_verify_attempts.unwrap_or(DEFAULT_VERIFY_ATTEMPTS).max(1)
    }
}

/// One check: a command in the sandbox (passes when it exits 0) or an LLM judge.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Check {
    /// A shell command run in the workspace (a test suite).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// How long the command may run (absent: 600 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Or an LLM that scores the work against a rubric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<Judge>,
}

/// An LLM judge: a profile of the owner's (absent: the conversation's), what it judges by, and
/// the score the work must reach.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Judge {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_profile: Option<String>,
    pub rubric: String,
    /// The lowest passing score, 0 to 1 (absent: 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

/// An image attached to a user message: its media type (`image/png`, `image/jpeg`, `image/gif`
/// or `image/webp`) and its bytes in standard base64.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Image {
    pub media_type: String,
    pub data: String,
}

/// What happened. Internally tagged by `kind` so that a reader sees one flat map.
// The start is the largest variant, one per conversation; events are read, applied and dropped
// (the log is what keeps them), so boxing its fields would cost every reader for no memory won.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EventBody {
    /// Always `seq` 1: the agent took charge of the conversation.
    ConversationStarted {
        owner: UserId,
        #[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
        sandbox_id: SandboxId,
        workspace: String,
        model: String,
        /// Skills loaded into the agent's system prompt (global and from the repository).
        #[serde(default)]
        skills: Vec<Skill>,
        /// Limits on what the conversation's LLM calls may use (none: unlimited).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<Budget>,
        /// When actions wait for the user's consent (absent: never).
        #[serde(default, skip_serializing_if = "is_never")]
        confirmation_policy: ConfirmationPolicy,
        /// The user's LLM profile the conversation uses (absent: the operator's default).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        llm_profile: Option<String>,
        /// The user's secrets the shell gets, by name (absent: all of them; every one is
        /// masked either way).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secrets: Option<Vec<String>>,
        /// The repository the workspace was cloned from (absent: none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repository: Option<crate::system::Repository>,
        /// A fork: the conversation and event it was forked from; the events after this one up
        /// to `at_seq` are copies of that conversation's (absent: not a fork).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        forked_from: Option<crate::system::ForkSource>,
        /// A helper: the conversation that delegated it, whose sandbox it works in (absent: a
        /// conversation of its own).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<crate::system::ParentLink>,
        /// The organization it was started in: its prices, budgets and secrets apply (absent:
        /// the owner's own).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        org: Option<String>,
        /// The agent that works in it: absent for Halyard's own, else a third-party agent's
        /// kind (`claude-code`, `codex`, `gemini`, `opencode` or a registered one), spoken to
        /// over the Agent Client Protocol.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// What its work is checked against when the agent finishes (absent: nothing).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checks: Option<Checks>,
        /// The plugins it has, at the commits it uses them at (its runs, forks and takeovers
        /// read these same files).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        plugins: Vec<crate::plugin::PluginUse>,
    },
    /// A message from the user, with the images they attached (pasted screenshots...), which a
    /// vision model receives beside the text.
    UserMessage {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Image>,
        /// A plugin's slash command as the user typed it (`/review src`); `text` is what it
        /// expanded to, which the agent reads.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
    },
    /// A message from the agent to the user (no tool call).
    AgentMessage { text: String },
    /// A tool call the agent made.
    Action {
        tool_call_id: String,
        tool: String,
        arguments: serde_json::Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thought: Option<String>,
        /// The action's risk (absent for `think` and `finish`, which change nothing).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        security_risk: Option<SecurityRisk>,
    },
    /// The user rejected an action that waited for confirmation; the model sees `reason` as
    /// its result.
    ActionRejected { tool_call_id: String, tool: String, reason: String },
    /// The conversation's confirmation policy changed.
    ConfirmationPolicy { policy: ConfirmationPolicy },
    /// The oldest part of the history was summarized: the LLM now sees the system prompt, the
    /// first user message, this summary and the events after `upto_seq`. The log keeps
    /// everything.
    Condensation {
        /// The range of seqs the summary replaces (inclusive).
        from_seq: u64,
        upto_seq: u64,
        summary: String,
        /// The prompt's tokens before and after.
        tokens_before: u64,
        tokens_after: u64,
    },
    /// A knowledge skill entered the context: a user message contained its trigger.
    SkillActivated { name: String, trigger: String },
    /// The conversation switched LLM: its next calls go to `profile` (absent: the operator's
    /// default), whose model is `model`.
    LlmProfile {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
        model: String,
    },
    /// The MCP servers a run connected to: the tools each offers the agent (named
    /// `<server>__<tool>`), or why it could not be reached. Appended when the set changes.
    McpServers { servers: Vec<McpServerStatus> },
    /// An `http` MCP server wants its owner to sign in with OAuth (never signed in, signed out,
    /// or the sign-in expired and could not be refreshed): it offers nothing to this run, which
    /// goes on without it. `sign_in_url` is the web app's page where it is signed in to.
    McpAuthRequired { server: String, sign_in_url: String },
    /// The result of an action.
    Observation {
        tool_call_id: String,
        tool: String,
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(default)]
        is_error: bool,
        /// A browser tool's page afterwards: its URL...
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// ...and a PNG of it, kept outside the log in the conversation's screenshots (served at
        /// `GET /conversations/{id}/screenshots/{screenshot_id}`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        screenshot_id: Option<String>,
        /// Images a Python cell displayed (`execute_ipython_cell`'s plots), kept like
        /// screenshots and served at `GET /conversations/{id}/images/{image_id}`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        image_ids: Vec<String>,
    },
    /// One LLM call: what it used and cost (cost only where the model has a price).
    LlmCall {
        /// The model that answered (a fallback's, when the profile's own server failed).
        model: String,
        /// The user's LLM profile that answered (absent: the operator's default model).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
        prompt_tokens: u64,
        completion_tokens: u64,
        /// Prompt tokens the provider served from its cache (part of `prompt_tokens`).
        #[serde(default)]
        cached_tokens: u64,
        latency_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A third-party agent's ACP session was opened (or loaded again after its process was
    /// started anew): later runs continue it.
    AgentSession {
        agent: String,
        session_id: String,
        /// What the agent said of itself in `initialize` (`agentInfo`), if anything.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_info: Option<serde_json::Value>,
    },
    /// An update from a third-party agent that no other event stands for (its `sessionUpdate`
    /// kind, and the update as it came, masked): kept, not dropped.
    AgentUpdate { update_kind: String, update: serde_json::Value },
    /// Something went wrong in the agent loop (LLM failure, iteration limit, interrupted run).
    AgentError { code: String, message: String },
    /// The agent's execution status changed.
    ExecutionStatus {
        status: ExecutionStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The conversation's title was set.
    Title { title: String, set_by: TitleSource },
    /// The owner opened their own terminal in the sandbox (what they typed is not recorded).
    TerminalOpened { by: UserId },
    /// The sandbox's proxy refused a connection to `host` (`port`) by `rule` of its outbound
    /// policy ([`crate::egress`]); `message` is what the model and the user read.
    NetworkBlocked { host: String, port: u16, rule: String, message: String },
    /// What the sandbox's connections through its egress proxy carried since the proxy's last
    /// report (sent every few seconds while there is traffic): a conversation's summary of the
    /// destinations it reached adds these up. Not shown to the model.
    NetworkUsed { destinations: Vec<crate::egress::NetworkUse> },
    /// The owner put the workspace back as it was at event `at_seq`: the newest checkpoint at or
    /// before it, taken after event `checkpoint_seq`. Files changed since are as they were then.
    WorkspaceRestored { at_seq: u64, checkpoint_seq: u64 },
    /// The agent's plan, whole, as its `task_tracker` tool set it last (it replaces the one
    /// before).
    TaskList { items: Vec<TaskItem> },
    /// The model's reasoning before the answer that follows it (the actions or the message
    /// after it): Anthropic's thinking blocks, or the reasoning text OpenAI-compatible servers
    /// send as `reasoning_content`. Given back to the model with that answer.
    Thinking { blocks: Vec<ThinkingBlock> },
    /// The agent opened a pull request with Halyard's own MCP tool (`create_pull_request`).
    PullRequestOpened {
        number: u64,
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    /// A repository hook ran (`.openhands/hooks.json`): on which `event` (`pre_tool_use`,
    /// `post_tool_use`, `user_prompt_submit`, `session_start`, `session_end`, `stop`), what it
    /// ran and said (each stream capped, masked like everything), and whether it blocked what
    /// it was asked about.
    Hook {
        event: String,
        command: String,
        /// The tool call it ran for (tool hooks).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_call_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        /// The user message it judged (`user_prompt_submit`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_seq: Option<u64>,
        /// Absent: stopped at its timeout, or it could not start.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        stdout: String,
        stderr: String,
        blocked: bool,
    },
    /// The workspace's `.openhands/hooks.json` asks to run commands (with the conversation's
    /// secrets in their environment) that its owner has not consented to for this repository
    /// and this content: nothing of it ran, and the run waits for the owner's answer
    /// (`POST /conversations/{id}/hooks-consent`).
    HooksConsentRequired {
        file: String,
        /// The SHA-256 of the file's bytes (hex): what a consent is given to.
        sha256: String,
        /// The file as it is (masked like everything).
        content: String,
        /// The repository the workspace came from (absent: none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repository: Option<String>,
    },
    /// The owner's answer about hooks file `sha256`: allowed (for every conversation of theirs on
    /// this repository while the file is unchanged) or declined (this conversation goes on
    /// without them).
    HooksConsent { sha256: String, allowed: bool },
    /// The agent's `delegate` call started helpers: child conversations of the same user, in
    /// this one's sandbox, one per task, running in parallel.
    SubConversationsStarted { tool_call_id: String, children: Vec<SubConversation> },
    /// A helper of a `delegate` call ended (finished, answered, failed or was stopped): what it
    /// said last, and what its LLM calls used, which this conversation's budget covers.
    SubConversationEnded {
        tool_call_id: String,
        #[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
        conversation_id: crate::ConversationId,
        /// Its execution status at the end (`finished`, `idle`, `error`, `stuck`); `failed` when
        /// it could not start, `deleted` when its owner deleted it, `stopped` when it did not stop
        /// in time after an interrupt and the parent went on without it.
        status: String,
        /// Its final message (its `finish` message or last answer), or why it ended.
        message: String,
        used_tokens: u64,
        used_usd: f64,
    },
    /// The organization's spending this month passed `percent` (80, 90 or 100) of a monthly
    /// budget: the organization's (`user` absent) or one member's (`user`). Appended by the
    /// conversation whose LLM call passed it; at 100 % the organization's conversations (or that
    /// member's) make no further LLM call this month.
    /// The agent's typed result (the start's `result_schema`), valid against the schema.
    Result { result: serde_json::Value },
    /// One check of the agent's work when it finished (`attempt`: which finish, from 1).
    Verification {
        attempt: u32,
        /// `command` or `judge`.
        check: String,
        /// The command, or the judge's rubric.
        subject: String,
        passed: bool,
        /// 0 to 1: the judge's, or 1 for a command that passed and 0 for one that failed.
        score: f64,
        /// What the command printed (its end), or the judge's reasons.
        output: String,
        /// The last check of an attempt: whether the agent was sent back (`false`: the verdict
        /// stands).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        sent_back: bool,
    },
    BudgetAlert {
        org: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<UserId>,
        percent: u8,
        spent_usd: f64,
        budget_usd: f64,
        /// The month the budget is for, `YYYY-MM` (UTC).
        month: String,
    },
}

/// A helper a `delegate` call started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubConversation {
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
    pub conversation_id: crate::ConversationId,
    pub title: String,
}

impl EventBody {
    /// A tool's plain result: no page, no pictures.
    pub fn observation(tool_call_id: String, tool: String, content: String, exit_code: Option<i32>, is_error: bool) -> Self {
        Self::Observation { tool_call_id, tool, content, exit_code, is_error, url: None, screenshot_id: None, image_ids: Vec::new() }
    }

    /// The `kind` tag as a string.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ConversationStarted { .. } => "conversation_started",
            Self::LlmCall { .. } => "llm_call",
            Self::UserMessage { .. } => "user_message",
            Self::AgentMessage { .. } => "agent_message",
            Self::Action { .. } => "action",
            Self::Observation { .. } => "observation",
            Self::AgentSession { .. } => "agent_session",
            Self::AgentUpdate { .. } => "agent_update",
            Self::AgentError { .. } => "agent_error",
            Self::ExecutionStatus { .. } => "execution_status",
            Self::Title { .. } => "title",
            Self::ActionRejected { .. } => "action_rejected",
            Self::ConfirmationPolicy { .. } => "confirmation_policy",
            Self::Condensation { .. } => "condensation",
            Self::SkillActivated { .. } => "skill_activated",
            Self::LlmProfile { .. } => "llm_profile",
            Self::McpServers { .. } => "mcp_servers",
            Self::McpAuthRequired { .. } => "mcp_auth_required",
            Self::TerminalOpened { .. } => "terminal_opened",
            Self::NetworkBlocked { .. } => "network_blocked",
            Self::NetworkUsed { .. } => "network_used",
            Self::WorkspaceRestored { .. } => "workspace_restored",
            Self::TaskList { .. } => "task_list",
            Self::Thinking { .. } => "thinking",
            Self::Hook { .. } => "hook",
            Self::HooksConsentRequired { .. } => "hooks_consent_required",
            Self::HooksConsent { .. } => "hooks_consent",
            Self::PullRequestOpened { .. } => "pull_request_opened",
            Self::SubConversationsStarted { .. } => "sub_conversations_started",
            Self::SubConversationEnded { .. } => "sub_conversation_ended",
            Self::BudgetAlert { .. } => "budget_alert",
            Self::Result { .. } => "result",
            Self::Verification { .. } => "verification",
        }
    }
}

/// What the checks said of the agent's last checked finish, folded from its `verification`
/// events (the read model's `verdict`, an automation's summary).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Verdict {
    /// Every check of that finish passed.
    pub passed: bool,
    /// The checks' mean score, 0 to 1.
    pub score: f64,
    /// Which finish it was, from 1.
    pub attempt: u32,
    /// How many checks ran on it.
    pub checks: u32,
}

impl Verdict {
    /// Takes in one `verification` event.
    pub fn add(verdict: &mut Option<Self>, attempt: u32, passed: bool, score: f64) {
        let v = match verdict {
            Some(v) if v.attempt == attempt => v,
            Some(v) if v.attempt > attempt => return,
            _ => verdict.insert(Self { passed: true, score: 0.0, attempt, checks: 0 }),
        };
        v.score = (v.score * f64::from(v.checks) + score) / f64::from(v.checks + 1);
        v.checks += 1;
        v.passed &= passed;
    }
}

impl Payload for ConversationEvent {
    fn kind(&self) -> String {
        format!("event.{}", self.body.kind())
    }
}

/// An event as the HTTP API, the WebSocket and webhooks serve it: the envelope fields (`seq`,
/// `id`, `conversation_id`, `source`, `timestamp` in RFC 3339) and the body's fields (with
/// `kind`), flattened into one JSON object.
#[derive(Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Event))]
pub struct ApiEvent<'a> {
    /// Contiguous per conversation from 1.
    seq: u64,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
    id: EventId,
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
    conversation_id: ConversationId,
    source: EventSource,
    timestamp: String,
    #[serde(flatten)]
    body: &'a EventBody,
}

impl<'a> ApiEvent<'a> {
    fn of(ev: &'a ConversationEvent) -> Self {
        Self {
            seq: ev.seq,
            id: ev.id,
            conversation_id: ev.conversation_id,
            source: ev.source,
            timestamp: crate::rfc3339(ev.timestamp_ms),
            body: &ev.body,
        }
    }
}

/// The API's JSON object of an event (see [`ApiEvent`]).
pub fn to_json(ev: &ConversationEvent) -> serde_json::Value {
    serde_json::to_value(ApiEvent::of(ev)).unwrap_or(serde_json::Value::Null)
}

/// The same as [`to_json`], as text, written straight from the event: this runs once per event
/// on the way to every WebSocket client and webhook, where building a `Value` map first costs
/// more than the rest of the rendering.
pub fn to_json_string(ev: &ConversationEvent) -> String {
    serde_json::to_string(&ApiEvent::of(ev)).unwrap_or_else(|_| "null".into())
}

/// One MCP server as a run found it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServerStatus {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// The names the agent calls its tools by.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Why it offers nothing (absent: it answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn api_json_flattens_the_body_and_both_forms_agree() {
        let conv: ConversationId = "01900000-0000-7000-8000-000000000001".parse().unwrap();
        let id: EventId = "01900000-0000-7000-8000-000000000002".parse().unwrap();
        let ev = ConversationEvent {
            seq: 7,
            id,
            conversation_id: conv,
            source: EventSource::Agent,
            timestamp_ms: 1_700_000_000_123,
            body: EventBody::Action {
                tool_call_id: "call_1".into(),
                tool: "terminal".into(),
                arguments: serde_json::json!({"command": "ls \"x\""}),
                thought: None,
                security_risk: None,
            },
        };
        let want = serde_json::json!({
            "seq": 7,
            "id": "01900000-0000-7000-8000-000000000002",
            "conversation_id": "01900000-0000-7000-8000-000000000001",
            "source": "agent",
            "timestamp": crate::rfc3339(1_700_000_000_123),
            "kind": "action",
            "tool_call_id": "call_1",
            "tool": "terminal",
            "arguments": {"command": "ls \"x\""},
        });
        assert_eq!(to_json(&ev), want);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&to_json_string(&ev)).unwrap(), want);
    }
}
