//! Lifecycle records: start tasks, sandboxes and conversation existence. Each entity has its
//! own subject and exactly one writing service, so the last record on a subject is the entity's
//! current state (readable with a JetStream direct get, no replay needed).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::UnixMillis;
use crate::envelope::Payload;
use crate::ids::{ConversationId, SandboxId, TaskId, UserId};

/// Phases of a start task, in the order they happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StartTaskStatus {
    Working,
    /// No sandbox host has room: the start waits its turn in the queue
    /// ([`crate::queue`]) and goes on by itself when room appears.
    Queued,
    WaitingForSandbox,
    PreparingRepository,
    RunningSetupScript,
    SettingUpGitHooks,
    SettingUpSkills,
    StartingConversation,
    Ready,
    Error,
    /// Cancelled while it waited in the queue; it never started.
    Cancelled,
    /// Starting from a snapshot of the environment's setup (placed after the final phases so
    /// older phases keep their numbers, which name their records).
    RestoringSnapshot,
    /// Keeping the sandbox after setup as a snapshot, before the agent's first step.
    SavingSnapshot,
    /// Building (or finding) the image of the repository's dev container, and moving the
    /// sandbox onto it.
    BuildingImage,
}

impl StartTaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "WORKING",
            Self::Queued => "QUEUED",
            Self::WaitingForSandbox => "WAITING_FOR_SANDBOX",
            Self::PreparingRepository => "PREPARING_REPOSITORY",
            Self::RunningSetupScript => "RUNNING_SETUP_SCRIPT",
            Self::SettingUpGitHooks => "SETTING_UP_GIT_HOOKS",
            Self::SettingUpSkills => "SETTING_UP_SKILLS",
            Self::StartingConversation => "STARTING_CONVERSATION",
            Self::Ready => "READY",
            Self::Error => "ERROR",
            Self::Cancelled => "CANCELLED",
            Self::RestoringSnapshot => "RESTORING_SNAPSHOT",
            Self::SavingSnapshot => "SAVING_SNAPSHOT",
            Self::BuildingImage => "BUILDING_IMAGE",
        }
    }

    /// READY, ERROR and CANCELLED are final.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Ready | Self::Error | Self::Cancelled)
    }
}

/// Status of a sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SandboxStatus {
    /// Waiting in the start queue for a host with room (no host holds it yet).
    Queued,
    Starting,
    Running,
    Paused,
    /// Stopped while idle (its processes ended, its workspace kept); the next message, file,
    /// terminal or app request starts it again on the same workspace.
    Hibernated,
    Error,
    Missing,
    Deleted,
}

impl SandboxStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "QUEUED",
            Self::Starting => "STARTING",
            Self::Running => "RUNNING",
            Self::Paused => "PAUSED",
            Self::Hibernated => "HIBERNATED",
            Self::Error => "ERROR",
            Self::Missing => "MISSING",
            Self::Deleted => "DELETED",
        }
    }
}

/// A URL a sandbox exposes, by name (`AGENT_SERVER` is the executor).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExposedUrl {
    pub name: String,
    pub url: String,
}

/// Start of a sandbox record's `detail` when the supervisor refused a (re)start, e.g. over a
/// quota; the status is left as it was.
pub const REFUSED_PREFIX: &str = "refused: ";

/// Name of the executor's exposed URL.
pub const AGENT_SERVER: &str = "AGENT_SERVER";

/// A git repository to clone into the workspace: a URL or a local path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ClonedRepository))]
pub struct Repository {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// Where a forked conversation comes from: its log is the source's up to `at_seq` and its
/// workspace the source's checkpoint at that event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForkSource {
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
    pub conversation_id: ConversationId,
    /// The source's sandbox, whose checkpoints the fork's workspace is made from.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
    pub sandbox_id: SandboxId,
    /// The last event of the source the fork keeps.
    pub at_seq: u64,
}

/// A helper's parent: the conversation whose agent delegated the helper's task (with its
/// `delegate` tool call), and whose sandbox, one workspace for both, the helper works in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ParentLink {
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
    pub conversation_id: ConversationId,
    /// The parent's sandbox, which the helper shares (and never deletes).
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = Uuid))]
    pub sandbox_id: SandboxId,
    /// The `delegate` call that made the helper.
    pub tool_call_id: String,
    /// How deep the helper is: 1 for a top-level conversation's helper.
    pub depth: u32,
    /// The named agent (a plugin's) the task was handed to: its prompt, tools and model
    /// (absent: a helper like its parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<HelperAgent>,
}

/// A named agent a helper works as: a plugin's `agents/<name>.md`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HelperAgent {
    /// `plugin:name`.
    pub name: String,
    /// Its instructions, beside the helper's own.
    pub prompt: String,
    /// The built-in tools it may use (absent: all of its parent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
}

/// What a conversation's start asked for besides its title and repository.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StartRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::event::Budget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation_policy: Option<crate::event::ConfirmationPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_profile: Option<String>,
    /// The agent that works in it (absent: Halyard's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<String>>,
    /// A fork: what it comes from (a retry forks again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkSource>,
    /// A helper: the conversation that delegated it (absent: a conversation of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// The conversation's tags as it was started (`PATCH` changes them later, see
    /// [`SystemRecord::ConversationTags`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The organization it was started in, whose settings applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// Who reads it besides its owner as it was started (`PATCH` changes it later, see
    /// [`SystemRecord::ConversationVisibility`]).
    #[serde(default, skip_serializing_if = "crate::org::Visibility::is_private")]
    pub visibility: crate::org::Visibility,
    /// The environment it asked for by name (absent: its organization's or the deployment's
    /// default, if any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// What its work is checked against when the agent finishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<crate::event::Checks>,
    /// The plugins it gets, already resolved (a fork's: its source's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Vec<crate::plugin::PluginUse>>,
}

/// A start task's state after a transition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StartTaskUpdate {
    pub task_id: TaskId,
    pub owner: UserId,
    pub conversation_id: ConversationId,
    pub status: StartTaskStatus,
    /// For ERROR: which phase failed and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<SandboxId>,
    /// Whether the sandbox came from the warm pool.
    #[serde(default)]
    pub from_pool: bool,
    pub created_ms: UnixMillis,
    /// The environment snapshot the sandbox started from (setup was not run again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

/// A sandbox's state after a transition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxUpdate {
    pub sandbox_id: SandboxId,
    pub owner: UserId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<ConversationId>,
    /// `process` or `docker`.
    pub sandbox_kind: String,
    pub status: SandboxStatus,
    #[serde(default)]
    pub exposed_urls: Vec<ExposedUrl>,
    /// Workspace path as seen inside the sandbox.
    pub workspace: String,
    /// Why the sandbox is in this state (for ERROR and MISSING).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Host process id of a process sandbox, so a restarted supervisor can adopt it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Docker container id of a docker sandbox (a warm-pool container keeps its own name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Docker volume holding a docker sandbox's workspace; it outlives the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// The sandbox spec it was made from (docker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// Whether the sandbox was taken from the warm pool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_pool: bool,
    /// The sandbox supervisor (its node id) that owns the sandbox: its Docker engine or process
    /// host runs it, and commands for it are passed there. Absent in records written before
    /// supervisors had replicas (the one supervisor owned them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// While a wake of the sandbox waits in the start queue (its status stays what it was):
    /// until when it may wait. Whoever waits for the sandbox to run waits that long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_queued_until: Option<crate::UnixMillis>,
    /// The environment snapshot its workspace (and, for Docker, its image) was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// A container's image, user and variables when they are not its spec's (a dev container's,
    /// a snapshot's): what it is made from again after a loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Box<crate::environment::Runtime>>,
    /// What its start's environment set of it (network class, limits, forwarded ports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Box<crate::environment::Shape>>,
}

impl SandboxUpdate {
    /// The executor URL, if the sandbox exposes one.
    pub fn agent_server_url(&self) -> Option<&str> {
        self.exposed_urls.iter().find(|u| u.name == AGENT_SERVER).map(|u| u.url.as_str())
    }
}

/// A lifecycle record. Internally tagged by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SystemRecord {
    StartTask(StartTaskUpdate),
    Sandbox(SandboxUpdate),
    ConversationCreated {
        conversation_id: ConversationId,
        owner: UserId,
        task_id: TaskId,
        sandbox_id: SandboxId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repository: Option<Repository>,
        created_ms: UnixMillis,
        /// The rest of what the start asked for, so that a failed start can be tried again as
        /// it was asked (absent in records older than retries).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<Box<StartRequest>>,
    },
    ConversationDeleted {
        conversation_id: ConversationId,
        owner: UserId,
    },
    /// A conversation's tags, whole, after their owner changed them
    /// (`halyard.sys.conversation.<id>.tags`; the start's are in its creation record).
    ConversationTags {
        conversation_id: ConversationId,
        tags: BTreeMap<String, String>,
    },
    /// Who reads a conversation besides its owner, after its owner changed it
    /// (`halyard.sys.conversation.<id>.visibility`).
    ConversationVisibility {
        conversation_id: ConversationId,
        visibility: crate::org::Visibility,
    },
    /// One attempt to deliver an event to a webhook.
    DeliveryAttempt(crate::webhook::DeliveryAttempt),
    /// The dispatcher disabled a subscription that kept failing.
    WebhookDisabled {
        webhook_id: String,
        owner: UserId,
        reason: String,
    },
    /// The runtime image of a sandbox spec, as the supervisor last prepared it.
    SandboxImage(SandboxImage),
    /// The warm pool of a spec changed (`halyard.sys.pool.<spec>`).
    SandboxPool {
        spec: String,
        ready: u32,
        target: u32,
    },
    /// An administrative action (`halyard.sys.audit.<user|key>`).
    Audit(crate::accounts::AuditRecord),
    /// What an automation did with a request to its hook or a tick of its schedule
    /// (`halyard.sys.automation.<id>`).
    AutomationRun(crate::automation::AutomationRun),
}

/// How a spec's runtime image was obtained at supervisor start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageOutcome {
    /// The source tag existed: nothing was built.
    Reused,
    /// The lock tag existed: only the executor layer was added.
    ExecutorLayer,
    /// Built from the base image.
    Built,
}

/// A spec's runtime image (`halyard.sys.image.<spec>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxImage {
    pub spec: String,
    pub base_image: String,
    /// Tag the sandboxes are created from (the source tag).
    pub image: String,
    pub lock_tag: String,
    pub versioned_tag: String,
    pub outcome: ImageOutcome,
    pub build_ms: u64,
}

impl Payload for SystemRecord {
    fn kind(&self) -> String {
        match self {
            Self::StartTask(_) => "sys.start_task",
            Self::Sandbox(_) => "sys.sandbox",
            Self::ConversationCreated { .. } => "sys.conversation_created",
            Self::ConversationDeleted { .. } => "sys.conversation_deleted",
            Self::ConversationTags { .. } => "sys.conversation_tags",
            Self::ConversationVisibility { .. } => "sys.conversation_visibility",
            Self::DeliveryAttempt(_) => "sys.delivery_attempt",
            Self::WebhookDisabled { .. } => "sys.webhook_disabled",
            Self::SandboxImage(_) => "sys.sandbox_image",
            Self::SandboxPool { .. } => "sys.sandbox_pool",
            Self::Audit(_) => "sys.audit",
            Self::AutomationRun(_) => "sys.automation_run",
        }
        .to_owned()
    }
}
