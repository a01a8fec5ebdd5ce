//! Durable commands. Each is published to the COMMANDS stream with its envelope id as the
//! JetStream message id, so a retried publish is stored once; handlers make applying one twice
//! harmless as well.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::envelope::Payload;
use crate::event::{ConfirmationPolicy, Skill};
use crate::ids::{ConversationId, SandboxId, TaskId, UserId};
use crate::system::{ForkSource, Repository};

/// Commands for the conversation manager.
// A command is decoded once and moved once; boxing the start would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum ConversationCommand {
    Start {
        task_id: TaskId,
        conversation_id: ConversationId,
        owner: UserId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repository: Option<Repository>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        created_ms: crate::UnixMillis,
        /// The sandbox spec to use (the deployment's default if absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spec: Option<String>,
        /// Limits on the conversation's LLM use.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<crate::event::Budget>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        confirmation_policy: Option<ConfirmationPolicy>,
        /// The owner's LLM profile to use (the operator's default if absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        llm_profile: Option<String>,
        /// The agent that works in the conversation: `halyard` (absent) or a third-party agent
        /// spoken to over ACP (`claude-code`, `codex`, `gemini`, `opencode`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// The owner's secrets the conversation's shell gets, by name (all of them if absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secrets: Option<Vec<String>>,
        /// A fork: its workspace is made from the source's checkpoint, its log from the
        /// source's events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fork: Option<ForkSource>,
        /// A helper: it works in its parent's sandbox, on the workspace as the parent left it
        /// (no sandbox, clone or setup script of its own).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<crate::system::ParentLink>,
        /// Labels the owner finds conversations by (`GET /conversations?tag=key:value`).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        tags: BTreeMap<String, String>,
        /// The organization it is started in (its LLM profile is then named `@org/name`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        org: Option<String>,
        /// Who reads it besides its owner.
        #[serde(default, skip_serializing_if = "crate::org::Visibility::is_private")]
        visibility: crate::org::Visibility,
        /// How its sandbox waits if no host has room now (its class, its deadline).
        #[serde(default, skip_serializing_if = "crate::queue::QueueTerms::is_default")]
        queue: crate::queue::QueueTerms,
        /// The environment it asked for by name ([`crate::environment`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
        /// What its work is checked against when the agent finishes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checks: Option<crate::event::Checks>,
        /// The plugins it gets, already resolved: a helper's are its parent's, a fork's its
        /// source's (absent: resolved from its owner's, organization's and the deployment's
        /// at its start).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plugins: Option<Vec<crate::plugin::PluginUse>>,
    },
    Delete {
        conversation_id: ConversationId,
        owner: UserId,
    },
    /// Change a conversation's tags: each key set to its value, or removed where the value is
    /// absent (JSON merge patch); recorded whole as a `ConversationTags` record.
    SetTags {
        conversation_id: ConversationId,
        tags: BTreeMap<String, Option<String>>,
    },
    /// Change who reads a conversation besides its owner; recorded as a
    /// `ConversationVisibility` record.
    SetVisibility {
        conversation_id: ConversationId,
        visibility: crate::org::Visibility,
    },
}

impl Payload for ConversationCommand {
    fn kind(&self) -> String {
        match self {
            Self::Start { .. } => "cmd.conversation.start",
            Self::Delete { .. } => "cmd.conversation.delete",
            Self::SetTags { .. } => "cmd.conversation.set_tags",
            Self::SetVisibility { .. } => "cmd.conversation.set_visibility",
        }
        .to_owned()
    }
}

/// Commands for the sandbox supervisor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum SandboxCommand {
    Create {
        sandbox_id: SandboxId,
        owner: UserId,
        conversation_id: ConversationId,
        /// The sandbox spec (docker kind; the default if absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spec: Option<String>,
        /// How it waits if no host has room now.
        #[serde(default, skip_serializing_if = "crate::queue::QueueTerms::is_default")]
        queue: crate::queue::QueueTerms,
        /// An environment snapshot to start from (used by a supervisor that holds it, of the
        /// same kind; any other starts an empty sandbox and says so by leaving the record's
        /// `snapshot` absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<crate::environment::SnapshotRef>,
    },
    /// Keep the sandbox as it is now (after setup) as an environment snapshot; the supervisor
    /// records the outcome in [`crate::environment::SNAPSHOT_BUCKET`].
    Snapshot {
        sandbox_id: SandboxId,
        plan: crate::environment::SnapshotPlan,
    },
    /// Move a container sandbox onto another image (a dev container's, built from its workspace
    /// if it says how), keeping its workspace; its record says when it runs on it, or why not.
    UseImage {
        sandbox_id: SandboxId,
        plan: crate::environment::ImagePlan,
    },
    /// Set what a start's environment changes of a running sandbox (its network class, limits
    /// and forwarded ports: [`crate::environment::Shape`]); its record says when it is so, or
    /// why not.
    Shape {
        sandbox_id: SandboxId,
        shape: crate::environment::Shape,
    },
    Pause {
        sandbox_id: SandboxId,
    },
    /// Unpause, or re-provision on the same workspace if the sandbox is gone.
    Resume {
        sandbox_id: SandboxId,
    },
    Delete {
        sandbox_id: SandboxId,
    },
}

impl SandboxCommand {
    pub fn sandbox_id(&self) -> SandboxId {
        match self {
            Self::Create { sandbox_id, .. }
            | Self::Snapshot { sandbox_id, .. }
            | Self::UseImage { sandbox_id, .. }
            | Self::Shape { sandbox_id, .. }
            | Self::Pause { sandbox_id }
            | Self::Resume { sandbox_id }
            | Self::Delete { sandbox_id } => *sandbox_id,
        }
    }
}

impl Payload for SandboxCommand {
    fn kind(&self) -> String {
        match self {
            Self::Create { .. } => "cmd.sandbox.create",
            Self::Snapshot { .. } => "cmd.sandbox.snapshot",
            Self::UseImage { .. } => "cmd.sandbox.use_image",
            Self::Shape { .. } => "cmd.sandbox.shape",
            Self::Pause { .. } => "cmd.sandbox.pause",
            Self::Resume { .. } => "cmd.sandbox.resume",
            Self::Delete { .. } => "cmd.sandbox.delete",
        }
        .to_owned()
    }
}

/// Commands for the agent runner.
// A command lives for one delivery and is matched once: its size does not matter enough to
// box the start's fields.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum AgentCommand {
    /// Take charge of a freshly provisioned conversation.
    Start {
        conversation_id: ConversationId,
        owner: UserId,
        sandbox_id: SandboxId,
        workspace: String,
        #[serde(default)]
        skills: Vec<Skill>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<crate::event::Budget>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        confirmation_policy: Option<ConfirmationPolicy>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        llm_profile: Option<String>,
        /// The agent that works in it (absent: Halyard's own).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// The owner's secrets the conversation's shell gets, by name (all of them if absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secrets: Option<Vec<String>>,
        /// The repository the workspace was cloned from; git reaches it through the git proxy
        /// when one of the owner's git providers serves its host.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repository: Option<Repository>,
        /// A fork: the source's events 2 to `at_seq` are copied after `conversation_started`
        /// (its workspace is ready already).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fork: Option<ForkSource>,
        /// A helper: the conversation that delegated it (it shares that one's sandbox).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<crate::system::ParentLink>,
        /// The organization it was started in.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        org: Option<String>,
        /// What its work is checked against when the agent finishes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checks: Option<crate::event::Checks>,
        /// Its plugins, resolved at its start.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        plugins: Vec<crate::plugin::PluginUse>,
    },
    /// A user message; the envelope id doubles as the event id, so it is appended once.
    UserMessage {
        conversation_id: ConversationId,
        text: String,
        /// Images attached to the message (see [`crate::event::Image`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<crate::event::Image>,
    },
    Pause {
        conversation_id: ConversationId,
    },
    Resume {
        conversation_id: ConversationId,
    },
    /// Stop the running command now (its process group in the sandbox is signalled) and end
    /// the run after that step, waiting for the user; unlike pause, it does not freeze the
    /// sandbox.
    Interrupt {
        conversation_id: ConversationId,
    },
    /// Run the actions that wait for confirmation, and go on.
    Confirm {
        conversation_id: ConversationId,
    },
    /// Refuse the actions that wait for confirmation; `reason` is what the model sees.
    Reject {
        conversation_id: ConversationId,
        reason: String,
    },
    /// Change when actions wait for confirmation.
    SetConfirmationPolicy {
        conversation_id: ConversationId,
        policy: ConfirmationPolicy,
    },
    /// Use another of the owner's LLM profiles from the next call on (none: the operator's
    /// default).
    SetLlmProfile {
        conversation_id: ConversationId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    },
    Delete {
        conversation_id: ConversationId,
    },
    /// The owner opened their own terminal in the conversation's sandbox: recorded in the log
    /// (who and when; what they type is not). The envelope id doubles as the event id.
    RecordTerminalOpened {
        conversation_id: ConversationId,
        by: crate::UserId,
    },
    /// The sandbox's proxy refused one of its connections (see [`crate::egress`]): recorded as
    /// a `network_blocked` event whose id is the envelope's, which the model reads.
    RecordNetworkBlocked {
        conversation_id: ConversationId,
        host: String,
        port: u16,
        rule: String,
    },
    /// What the sandbox's allowed connections carried since the proxy's last report: recorded
    /// as a `network_used` event whose id is the envelope's.
    RecordNetworkUsed {
        conversation_id: ConversationId,
        destinations: Vec<crate::egress::NetworkUse>,
    },
    /// The owner's answer about the workspace's hooks file `sha256` (a `hooks_consent` event
    /// records it; the run that waited for it starts).
    AnswerHooks {
        conversation_id: ConversationId,
        sha256: String,
        allow: bool,
    },
    /// Put the workspace back as it was at event `at_seq` (its checkpoint then); recorded as a
    /// `workspace_restored` event whose id is the envelope's. The log is never rewritten.
    Restore {
        conversation_id: ConversationId,
        at_seq: u64,
    },
}

impl AgentCommand {
    pub fn conversation_id(&self) -> ConversationId {
        match self {
            Self::Start { conversation_id, .. }
            | Self::UserMessage { conversation_id, .. }
            | Self::Pause { conversation_id }
            | Self::Resume { conversation_id }
            | Self::Interrupt { conversation_id }
            | Self::Confirm { conversation_id }
            | Self::Reject { conversation_id, .. }
            | Self::SetConfirmationPolicy { conversation_id, .. }
            | Self::SetLlmProfile { conversation_id, .. }
            | Self::RecordTerminalOpened { conversation_id, .. }
            | Self::RecordNetworkBlocked { conversation_id, .. }
            | Self::RecordNetworkUsed { conversation_id, .. }
            | Self::Restore { conversation_id, .. }
            | Self::AnswerHooks { conversation_id, .. }
            | Self::Delete { conversation_id } => *conversation_id,
        }
    }
}

impl Payload for AgentCommand {
    fn kind(&self) -> String {
        match self {
            Self::Start { .. } => "cmd.agent.start",
            Self::UserMessage { .. } => "cmd.agent.user_message",
            Self::Pause { .. } => "cmd.agent.pause",
            Self::Resume { .. } => "cmd.agent.resume",
            Self::Interrupt { .. } => "cmd.agent.interrupt",
            Self::Confirm { .. } => "cmd.agent.confirm",
            Self::Reject { .. } => "cmd.agent.reject",
            Self::SetConfirmationPolicy { .. } => "cmd.agent.set_confirmation_policy",
            Self::SetLlmProfile { .. } => "cmd.agent.set_llm_profile",
            Self::Delete { .. } => "cmd.agent.delete",
            Self::RecordTerminalOpened { .. } => "cmd.agent.record_terminal_opened",
            Self::RecordNetworkBlocked { .. } => "cmd.agent.record_network_blocked",
            Self::RecordNetworkUsed { .. } => "cmd.agent.record_network_used",
            Self::Restore { .. } => "cmd.agent.restore",
            Self::AnswerHooks { .. } => "cmd.agent.answer_hooks",
        }
        .to_owned()
    }
}

/// A question about a conversation, answered from its history by one LLM call without adding to
/// its log or disturbing a run (`halyard.ask.<conversation id>`, request/reply).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AskRequest {
    pub conversation_id: ConversationId,
    pub question: String,
}

impl Payload for AskRequest {
    fn kind(&self) -> String {
        "ask.request".into()
    }
}

/// The answer to an [`AskRequest`]: `answer`, or an error `code` (as in `agent_error`) and
/// `message`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AskAnswer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Payload for AskAnswer {
    fn kind(&self) -> String {
        "ask.answer".into()
    }
}

/// Commands for the title setter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum TitleCommand {
    /// The user named the conversation; this title wins over any generated one.
    SetByUser { conversation_id: ConversationId, title: String },
}

impl Payload for TitleCommand {
    fn kind(&self) -> String {
        "cmd.title.set_by_user".into()
    }
}

/// Whether one of a user's MCP servers answers, for the Settings page's Test: asked of the
/// agent runners (`halyard.mcptest`, request/reply), which hold the MCP client. An `http`
/// server is connected to and its tools listed; a `stdio` one runs in a conversation's sandbox,
/// so it is checked when a conversation starts (its `mcp_servers` event).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpTestRequest {
    pub owner: crate::UserId,
    pub server: String,
}

impl Payload for McpTestRequest {
    fn kind(&self) -> String {
        "mcp_test.request".into()
    }
}

/// The answer to an [`McpTestRequest`]: the tools the server offers, or why it offers none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McpTestAnswer {
    pub ok: bool,
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Payload for McpTestAnswer {
    fn kind(&self) -> String {
        "mcp_test.answer".into()
    }
}
