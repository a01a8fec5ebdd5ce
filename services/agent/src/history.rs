//! A conversation's state as the agent needs it, derived from its events: the chat messages
//! for the LLM, the execution status, and what the conversation started with. The same
//! [`History::apply`] folds events during a replay and during a live run, so the two cannot
//! drift apart.

use std::collections::HashSet;

use halyard_platform::llm::{ChatMessage, FunctionCall, ToolCall};
use halyard_protocol::event::{Budget, ConversationEvent, EventBody, ExecutionStatus, Skill};
use halyard_protocol::{EventId, SandboxId, UserId};

/// What `ConversationStarted` said.
#[derive(Clone, Debug)]
pub struct Started {
    pub owner: UserId,
    pub sandbox_id: SandboxId,
    pub workspace: String,
}

/// Derived conversation state.
#[derive(Debug, Default)]
pub struct History {
    pub messages: Vec<ChatMessage>,
    pub started: Option<Started>,
    pub status: Option<ExecutionStatus>,
    pub last_seq: u64,
    /// Ids of user messages and other events whose duplicates must be recognised.
    pub seen: HashSet<EventId>,
    pub skills: Vec<Skill>,
    /// `seq` of the latest user message.
    pub last_user_seq: u64,
    /// The conversation's limits, and what its LLM calls used so far.
    pub budget: Budget,
    pub used_tokens: u64,
    pub used_usd: f64,
}

impl History {
    pub fn from_events(events: &[ConversationEvent]) -> Self {
        let mut h = Self::default();
        for e in events {
            h.apply(e);
        }
        h
    }

    /// Folds one event in.
    pub fn apply(&mut self, ev: &ConversationEvent) {
        if ev.seq <= self.last_seq {
            return;
        }
        self.last_seq = ev.seq;
        self.seen.insert(ev.id);
        match &ev.body {
            EventBody::ConversationStarted { owner, sandbox_id, workspace, skills, budget, .. } => {
                self.started = Some(Started { owner: owner.clone(), sandbox_id: *sandbox_id, workspace: workspace.clone() });
                self.skills = skills.clone();
                self.budget = budget.clone().unwrap_or_default();
            }
            EventBody::LlmCall { prompt_tokens, completion_tokens, cost_usd, .. } => {
                self.used_tokens += prompt_tokens + completion_tokens;
                self.used_usd += cost_usd.unwrap_or(0.0);
            }
            EventBody::UserMessage { text } => {
                self.last_user_seq = ev.seq;
                self.messages.push(ChatMessage::text("user", text.clone()))
            }
            EventBody::AgentMessage { text } => self.messages.push(ChatMessage::text("assistant", text.clone())),
            EventBody::Action { tool_call_id, tool, arguments, thought } => {
                let call = ToolCall {
                    id: tool_call_id.clone(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: tool.clone(),
                        arguments: match arguments {
                            serde_json::Value::String(raw) => raw.clone(),
                            other => other.to_string(),
                        },
                    },
                };
                // Actions of one LLM answer are appended back to back, before any of their
                // observations: they belong to one assistant message.
                match self.messages.last_mut() {
                    Some(last) if last.role == "assistant" && !last.tool_calls.is_empty() => last.tool_calls.push(call),
                    _ => self.messages.push(ChatMessage {
                        role: "assistant".into(),
                        content: thought.clone(),
                        tool_calls: vec![call],
                        tool_call_id: None,
                    }),
                }
            }
            EventBody::Observation { tool_call_id, content, .. } => self.messages.push(ChatMessage {
                role: "tool".into(),
                content: Some(content.clone()),
                tool_calls: Vec::new(),
                tool_call_id: Some(tool_call_id.clone()),
            }),
            EventBody::ExecutionStatus { status, .. } => self.status = Some(*status),
            EventBody::AgentError { .. } | EventBody::Title { .. } => {}
        }
    }

    /// The messages to send: system prompt first, and a stand-in result for every tool call
    /// that never got one (a run cut off by a crash or a pause), since the API requires one.
    pub fn for_llm(&self, system: &str) -> Vec<ChatMessage> {
        let mut out = vec![ChatMessage::text("system", system)];
        let mut open: Vec<String> = Vec::new();
        let close = |open: &mut Vec<String>, out: &mut Vec<ChatMessage>| {
            for id in open.drain(..) {
                out.push(ChatMessage {
                    role: "tool".into(),
                    content: Some("[No result: the action was interrupted before it completed.]".into()),
                    tool_calls: Vec::new(),
                    tool_call_id: Some(id),
                });
            }
        };
        for m in &self.messages {
            if m.role == "tool" {
                if let Some(id) = &m.tool_call_id {
                    open.retain(|o| o != id);
                }
            } else {
                close(&mut open, &mut out);
            }
            if m.role == "assistant" {
                open.extend(m.tool_calls.iter().map(|c| c.id.clone()));
            }
            out.push(m.clone());
        }
        close(&mut open, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halyard_protocol::ConversationId;
    use halyard_protocol::event::EventSource;

    fn ev(seq: u64, body: EventBody) -> ConversationEvent {
        ConversationEvent {
            seq,
            id: EventId::new(),
            conversation_id: ConversationId::new(),
            source: EventSource::Agent,
            timestamp_ms: 0,
            body,
        }
    }

    #[test]
    fn groups_actions_and_closes_interrupted_calls() {
        let action = |id: &str| EventBody::Action {
            tool_call_id: id.into(),
            tool: "terminal".into(),
            arguments: serde_json::json!({"command":"ls"}),
            thought: None,
        };
        let h = History::from_events(&[
            ev(1, EventBody::UserMessage { text: "hi".into() }),
            ev(2, action("a")),
            ev(3, action("b")),
            ev(
                4,
                EventBody::Observation {
                    tool_call_id: "a".into(),
                    tool: "terminal".into(),
                    content: "x".into(),
                    exit_code: Some(0),
                    is_error: false,
                },
            ),
            ev(5, EventBody::ExecutionStatus { status: ExecutionStatus::Error, reason: None }),
            ev(6, EventBody::UserMessage { text: "go on".into() }),
        ]);
        let msgs = h.for_llm("sys");
        let roles: Vec<&str> = msgs.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool", "user"]);
        assert_eq!(msgs[2].tool_calls.len(), 2);
        assert_eq!(msgs[4].tool_call_id.as_deref(), Some("b"));
        assert!(msgs[4].content.as_deref().unwrap_or("").contains("interrupted"));
        assert_eq!(h.status, Some(ExecutionStatus::Error));
        assert_eq!(h.last_seq, 6);
    }
}
