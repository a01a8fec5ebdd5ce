//! The conversation event log: what a user sees of a conversation, in order.
//!
//! Every event carries `seq`, its position in its conversation's log: contiguous from 1, never
//! reused. Clients resume by `seq`. Events are appended to JetStream with an expected-last-
//! subject-sequence check, so two writers can never both append the same `seq`.

use serde::{Deserialize, Serialize};

use crate::envelope::Payload;
use crate::ids::{ConversationId, EventId, SandboxId, UserId};
use crate::UnixMillis;

/// Who caused an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventSource {
    User,
    Agent,
    Environment,
    System,
}

/// The agent's execution status, as OpenHands names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    Idle,
    Running,
    Paused,
    Finished,
    Error,
}

impl ExecutionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Finished => "finished",
            Self::Error => "error",
        }
    }
}

/// Who chose a title.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TitleSource {
    User,
    Generated,
}

/// A skill loaded into the agent's system prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skill {
    pub name: String,
    pub content: String,
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

/// What happened. Internally tagged by `kind` so that a reader sees one flat map.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventBody {
    /// Always `seq` 1: the agent took charge of the conversation.
    ConversationStarted {
        owner: UserId,
        sandbox_id: SandboxId,
        workspace: String,
        model: String,
        /// Skills loaded into the agent's system prompt (global and from the repository).
        #[serde(default)]
        skills: Vec<Skill>,
    },
    /// A message from the user.
    UserMessage { text: String },
    /// A message from the agent to the user (no tool call).
    AgentMessage { text: String },
    /// A tool call the agent made.
    Action {
        tool_call_id: String,
        tool: String,
        arguments: serde_json::Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thought: Option<String>,
    },
    /// The result of an action.
    Observation {
        tool_call_id: String,
        tool: String,
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(default)]
        is_error: bool,
    },
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
}

impl EventBody {
    /// The `kind` tag as a string.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ConversationStarted { .. } => "conversation_started",
            Self::UserMessage { .. } => "user_message",
            Self::AgentMessage { .. } => "agent_message",
            Self::Action { .. } => "action",
            Self::Observation { .. } => "observation",
            Self::AgentError { .. } => "agent_error",
            Self::ExecutionStatus { .. } => "execution_status",
            Self::Title { .. } => "title",
        }
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
pub fn to_json(ev: &ConversationEvent) -> serde_json::Value {
    use serde_json::Value;
    let mut obj = serde_json::Map::new();
    obj.insert("seq".into(), ev.seq.into());
    obj.insert("id".into(), ev.id.to_string().into());
    obj.insert("conversation_id".into(), ev.conversation_id.to_string().into());
    obj.insert("source".into(), serde_json::to_value(ev.source).unwrap_or(Value::Null));
    obj.insert("timestamp".into(), crate::rfc3339(ev.timestamp_ms).into());
    if let Ok(Value::Object(body)) = serde_json::to_value(&ev.body) {
        obj.extend(body);
    }
    Value::Object(obj)
}
