//! A conversation's state as the agent needs it, derived from its events: the chat messages
//! for the LLM, the execution status, and what the conversation started with. The same
//! [`History::apply`] folds events during a replay and during a live run, so the two cannot
//! drift apart.
//!
//! What the LLM sees is the system prompt, the first user message, the latest condensation's
//! summary and the messages after it ([`History::for_llm`]); a `condensation` event drops what
//! it summarizes from here, never from the log. Each message remembers its size, counted once,
//! so deciding whether to condense costs the same at step 10 and step 1,000.

use std::collections::HashSet;

use halyard_platform::llm::{ChatMessage, FunctionCall, ImagePart, ToolCall};
use halyard_platform::tokens::TokenCounter;
use halyard_protocol::event::{Budget, ConfirmationPolicy, ConversationEvent, EventBody, ExecutionStatus, SecurityRisk, Skill, SkillKind};
use halyard_protocol::{EventId, SandboxId, UserId};

/// What `ConversationStarted` said.
#[derive(Clone, Debug)]
pub struct Started {
    pub owner: UserId,
    pub sandbox_id: SandboxId,
    pub workspace: String,
    /// What the workspace was cloned from, for the git proxy.
    pub repository: Option<halyard_protocol::system::Repository>,
    /// A fork: where its copied events come from.
    pub forked_from: Option<halyard_protocol::system::ForkSource>,
    /// A helper: the conversation that delegated it, whose sandbox it shares.
    pub parent: Option<halyard_protocol::system::ParentLink>,
    /// The organization it was started in: its prices and budgets apply.
    pub org: Option<String>,
    /// The third-party agent that works in it (none: Halyard's own).
    pub agent: Option<String>,
    /// What its work is checked against when the agent finishes.
    pub checks: Option<halyard_protocol::event::Checks>,
    /// Its plugins, at the commits it started with.
    pub plugins: Vec<halyard_protocol::plugin::PluginUse>,
}

/// One message the LLM sees, with the event it came from and its size.
#[derive(Clone, Debug)]
pub struct Entry {
    pub msg: ChatMessage,
    pub seq: u64,
    /// Bytes of text: an upper bound of its tokens in any byte-pair encoding.
    pub bytes: u64,
    /// Tokens, counted when first needed.
    tokens: Option<u64>,
}

impl Entry {
    fn new(msg: ChatMessage, seq: u64) -> Self {
        let bytes = msg.content.as_deref().map_or(0, str::len)
            + msg.tool_calls.iter().map(|c| c.function.name.len() + c.function.arguments.len()).sum::<usize>()
            + msg.images.len() * IMAGE_TOKENS as usize;
        Self { msg, seq, bytes: bytes as u64 + MESSAGE_OVERHEAD, tokens: None }
    }

    /// Tokens of this message as `counter` counts them (cached).
    pub fn tokens(&mut self, counter: &TokenCounter) -> u64 {
        *self.tokens.get_or_insert_with(|| message_tokens(&self.msg, counter))
    }
}

/// What every message costs beyond its text (role and separators, as OpenAI counts them).
pub const MESSAGE_OVERHEAD: u64 = 4;

/// What an image costs the prompt, about: a 1280x800 screenshot is four 512-pixel tiles at 170
/// tokens and a base of 85 for OpenAI, (1280 * 800) / 750 = 1,365 for Anthropic.
pub const IMAGE_TOKENS: u64 = 1_400;

/// Tokens of one message.
pub fn message_tokens(m: &ChatMessage, counter: &TokenCounter) -> u64 {
    m.content.as_deref().map_or(0, |c| counter.count(c))
        + m.tool_calls.iter().map(|c| counter.count(&c.function.name) + counter.count(&c.function.arguments)).sum::<u64>()
        + m.images.len() as u64 * IMAGE_TOKENS
        + MESSAGE_OVERHEAD
}

/// An action whose result has not been recorded yet.
#[derive(Clone, Debug)]
pub struct Pending {
    pub tool_call_id: String,
    pub tool: String,
    /// The arguments as the model wrote them.
    pub arguments: String,
    pub security_risk: Option<SecurityRisk>,
}

/// Derived conversation state.
#[derive(Debug, Default)]
pub struct History {
    /// The messages after the latest summary (and the first user message, never summarized).
    pub entries: Vec<Entry>,
    /// `seq` of the first user message.
    pub first_user_seq: Option<u64>,
    /// The latest condensation: its summary and the last `seq` it covers.
    pub summary: Option<(String, u64)>,
    pub started: Option<Started>,
    pub status: Option<ExecutionStatus>,
    /// The reason the latest status came with.
    pub status_reason: Option<String>,
    /// The seq of the latest execution status.
    pub status_seq: u64,
    pub last_seq: u64,
    /// Ids of user messages and other events whose duplicates must be recognised.
    pub seen: HashSet<EventId>,
    pub skills: Vec<Skill>,
    /// Knowledge skills already activated.
    pub activated: HashSet<String>,
    /// `seq` of the latest user message.
    pub last_user_seq: u64,
    /// Some action has a result: the agent may have changed the workspace.
    pub acted: bool,
    /// The conversation's limits, and what its LLM calls used so far.
    pub budget: Budget,
    pub used_tokens: u64,
    pub used_usd: f64,
    /// The longest answer so far, in tokens: what the next one is expected to add at most.
    pub longest_answer: u64,
    /// The prompt the provider counted for the last call, in tokens.
    pub last_prompt_tokens: u64,
    /// What [`crate::budget::estimate_tokens`] said of that call's messages (set by the run
    /// loop as it makes a call, not read from the log: unknown after a restart).
    pub prompt_estimate_at_last_call: Option<u64>,
    pub policy: ConfirmationPolicy,
    /// The owner's LLM profile in use (none: the operator's default).
    pub llm_profile: Option<String>,
    /// The owner's secrets the shell gets (none: all).
    pub secrets: Option<Vec<String>>,
    /// The MCP servers as the last `mcp_servers` event recorded them.
    pub mcp_servers: Option<Vec<halyard_protocol::event::McpServerStatus>>,
    /// Actions of the latest LLM answer still without a result.
    pub pending: Vec<Pending>,
    /// Notes for the model (a refused connection) that came while actions were without a
    /// result: shown after their results, since nothing may come between a tool call and its
    /// result.
    pub held_notes: Vec<(ChatMessage, u64)>,
    /// The agent's plan, as its last `task_list` event holds it.
    pub tasks: Vec<halyard_protocol::event::TaskItem>,
    /// The model's reasoning (a `thinking` event) waiting for the answer it came with.
    pub thinking: Vec<halyard_protocol::event::ThinkingBlock>,
    /// User messages the model has not seen yet (since its last call) that no
    /// `user_prompt_submit` hook has judged: their seqs.
    pub unjudged: Vec<u64>,
    /// The helpers each `delegate` call started, by its tool call id, and those that ended.
    pub helpers: Vec<(String, Vec<halyard_protocol::event::SubConversation>)>,
    /// What each ended helper used (tokens, US dollars), counted in `used_tokens`/`used_usd`.
    pub helpers_ended: std::collections::HashMap<halyard_protocol::ConversationId, (u64, f64)>,
    /// The tool calls whose actions the user rejected (a third-party agent's permission
    /// request is answered so).
    pub rejected: HashSet<String>,
    /// The agent's finishes checked so far (the last `verification` event's attempt), and how
    /// many of them were before the latest user message: each of the user's turns gets its
    /// `max_verify_attempts` afresh, while the attempts stay numbered through the conversation.
    pub verified_attempts: u32,
    pub verified_before_turn: u32,
    /// A third-party agent's ACP session, as its last `agent_session` event names it.
    pub agent_session: Option<String>,
    /// `seq` of the first `running` status of the turn under way (none between turns).
    pub turn_started_seq: Option<u64>,
    /// The user messages a third-party agent was given: those before the last ended turn began
    /// (one sent while a turn ran is after it, and goes with the next prompt).
    pub prompted_upto: u64,
    /// The owner's answers about hooks files in this conversation, by the file's SHA-256.
    pub hooks_answers: std::collections::HashMap<String, bool>,
    /// The hooks file a run waits for the owner's answer about (asked, not answered yet).
    pub hooks_asked: Option<String>,
}

impl History {
    /// The helpers still working for a `delegate` call that has no result yet: pausing,
    /// resuming or interrupting this conversation reaches them.
    pub fn live_helpers(&self) -> Vec<halyard_protocol::ConversationId> {
        self.helpers
            .iter()
            .filter(|(call, _)| self.pending.iter().any(|p| p.tool_call_id == *call))
            .flat_map(|(_, children)| children.iter().map(|c| c.conversation_id))
            .filter(|c| !self.helpers_ended.contains_key(c))
            .collect()
    }

    /// How deep this conversation is among helpers: 0 for one of its own.
    /// The text of the first user message (the task), if it is still in the history.
    pub fn first_user_text(&self) -> String {
        let first = self.first_user_seq;
        self.entries.iter().find(|e| Some(e.seq) == first).and_then(|e| e.msg.content.clone()).unwrap_or_default()
    }

    pub fn depth(&self) -> u32 {
        self.started.as_ref().and_then(|s| s.parent.as_ref()).map_or(0, |p| p.depth)
    }

    /// A fork whose copy of its source's events is not complete yet (the copy ends with a status
    /// after the source's event `at_seq`, see the conversation's start).
    pub fn fork_unfinished(&self) -> Option<&halyard_protocol::system::ForkSource> {
        self.started.as_ref()?.forked_from.as_ref().filter(|f| self.last_seq <= f.at_seq)
    }

    pub fn from_events(events: &[ConversationEvent]) -> Self {
        let mut h = Self::default();
        for e in events {
            h.apply(e);
        }
        h
    }

    fn push(&mut self, msg: ChatMessage, seq: u64) {
        self.entries.push(Entry::new(msg, seq));
    }

    /// Shows the model `images` with the tool result of event `seq` (a screenshot it asked for,
    /// a cell's plots). Only the newest result's images stay: the ones before leave the prompt,
    /// their results saying so. A replay (a run taken over) shows none of them.
    pub fn show_images(&mut self, seq: u64, images: Vec<ImagePart>) {
        for e in self.entries.iter_mut().filter(|e| e.msg.role == "tool" && !e.msg.images.is_empty()) {
            e.msg.images.clear();
            if let Some(c) = e.msg.content.as_mut() {
                c.push_str("\n[Its images are no longer shown.]");
            }
            *e = Entry::new(e.msg.clone(), e.seq);
        }
        if let Some(e) = self.entries.iter_mut().rev().find(|e| e.seq == seq && e.msg.role == "tool") {
            e.msg.images = images;
            *e = Entry::new(e.msg.clone(), e.seq);
        }
    }

    fn close_pending(&mut self, tool_call_id: &str) {
        self.pending.retain(|p| p.tool_call_id != tool_call_id);
    }

    /// Shows the model the notes held while actions were without a result, once none is.
    fn release_notes(&mut self) {
        if self.pending.is_empty() {
            for (note, seq) in std::mem::take(&mut self.held_notes) {
                self.push(note, seq);
            }
        }
    }

    /// Folds one event in.
    pub fn apply(&mut self, ev: &ConversationEvent) {
        if ev.seq <= self.last_seq {
            return;
        }
        self.last_seq = ev.seq;
        self.seen.insert(ev.id);
        match &ev.body {
            EventBody::ConversationStarted {
                owner,
                sandbox_id,
                workspace,
                skills,
                budget,
                confirmation_policy,
                llm_profile,
                secrets,
                repository,
                forked_from,
                parent,
                org,
                agent,
                checks,
                plugins,
                ..
            } => {
                self.started = Some(Started {
                    plugins: plugins.clone(),
                    owner: owner.clone(),
                    sandbox_id: *sandbox_id,
                    workspace: workspace.clone(),
                    repository: repository.clone(),
                    forked_from: forked_from.clone(),
                    parent: parent.clone(),
                    org: org.clone(),
                    agent: agent.clone(),
                    checks: checks.clone(),
                });
                self.llm_profile = llm_profile.clone();
                self.secrets = secrets.clone();
                self.skills = skills.clone();
                self.budget = budget.clone().unwrap_or_default();
                self.policy = *confirmation_policy;
            }
            EventBody::LlmCall { prompt_tokens, completion_tokens, cost_usd, .. } => {
                // The model saw every message there was: judging them now would be too late.
                self.unjudged.clear();
                self.used_tokens += prompt_tokens + completion_tokens;
                self.used_usd += cost_usd.unwrap_or(0.0);
                self.longest_answer = self.longest_answer.max(*completion_tokens);
                self.last_prompt_tokens = *prompt_tokens;
                // A new answer follows: what the previous one left without a result never gets one,
                // and reasoning left without its answer belongs to none. (Not so for a third-party
                // agent, whose calls the relay records whenever the agent makes them, a background
                // one while a permission waits included.)
                if self.started.as_ref().is_none_or(|s| s.agent.is_none()) {
                    self.pending.clear();
                    self.thinking.clear();
                    self.release_notes();
                }
            }
            EventBody::UserMessage { text, images, .. } => {
                self.last_user_seq = ev.seq;
                self.verified_before_turn = self.verified_attempts;
                self.first_user_seq.get_or_insert(ev.seq);
                self.unjudged.push(ev.seq);
                let images = images.iter().map(|i| ImagePart { media_type: i.media_type.clone(), data: i.data.clone() }).collect();
                self.push(ChatMessage { images, ..ChatMessage::text("user", text.clone()) }, ev.seq)
            }
            EventBody::Thinking { blocks } => self.thinking = blocks.clone(),
            EventBody::Verification { attempt, .. } => self.verified_attempts = self.verified_attempts.max(*attempt),
            EventBody::AgentMessage { text } => {
                let thinking = std::mem::take(&mut self.thinking);
                self.push(ChatMessage { thinking, ..ChatMessage::text("assistant", text.clone()) }, ev.seq)
            }
            EventBody::Action { tool_call_id, tool, arguments, thought, security_risk } => {
                let arguments = match arguments {
                    serde_json::Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                self.pending.push(Pending {
                    tool_call_id: tool_call_id.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                    security_risk: *security_risk,
                });
                let call = ToolCall {
                    id: tool_call_id.clone(),
                    kind: "function".into(),
                    function: FunctionCall { name: tool.clone(), arguments },
                };
                // Actions of one LLM answer are appended back to back, before any of their
                // observations: they belong to one assistant message.
                match self.entries.last_mut() {
                    Some(last) if last.msg.role == "assistant" && !last.msg.tool_calls.is_empty() && last.seq + 1 == ev.seq => {
                        let grown = Entry::new(
                            ChatMessage { tool_calls: [last.msg.tool_calls.clone(), vec![call]].concat(), ..last.msg.clone() },
                            ev.seq,
                        );
                        *last = grown;
                    }
                    _ => {
                        let thinking = std::mem::take(&mut self.thinking);
                        let msg = ChatMessage {
                            role: "assistant".into(),
                            content: thought.clone(),
                            tool_calls: vec![call],
                            thinking,
                            ..Default::default()
                        };
                        self.push(msg, ev.seq)
                    }
                }
            }
            EventBody::Observation { tool_call_id, content, .. } => {
                self.acted = true;
                self.close_pending(tool_call_id);
                self.push(tool_result(tool_call_id, content.clone()), ev.seq);
                self.release_notes();
            }
            EventBody::ActionRejected { tool_call_id, reason, .. } => {
                self.close_pending(tool_call_id);
                self.rejected.insert(tool_call_id.clone());
                self.push(tool_result(tool_call_id, format!("The user rejected this action. Their reason: {reason}")), ev.seq);
                self.release_notes();
            }
            EventBody::NetworkBlocked { message, .. } => {
                let note = ChatMessage::text("user", format!("[Halyard: a connection was refused] {message}"));
                self.held_notes.push((note, ev.seq));
                self.release_notes();
            }
            EventBody::ConfirmationPolicy { policy } => self.policy = *policy,
            EventBody::LlmProfile { profile, .. } => self.llm_profile = profile.clone(),
            EventBody::McpServers { servers } => self.mcp_servers = Some(servers.clone()),
            EventBody::Condensation { upto_seq, summary, .. } => {
                let first = self.first_user_seq;
                self.entries.retain(|e| e.seq > *upto_seq || Some(e.seq) == first);
                self.summary = Some((summary.clone(), *upto_seq));
            }
            EventBody::SkillActivated { name, .. } => {
                self.activated.insert(name.clone());
                if let Some(skill) = self.skills.iter().find(|s| s.kind == SkillKind::Knowledge && &s.name == name) {
                    let text = format!("<skill name=\"{}\">\n{}\n</skill>", skill.name, skill.content);
                    self.push(ChatMessage::text("user", text), ev.seq);
                }
            }
            EventBody::ExecutionStatus { status, reason } => {
                if matches!(status, ExecutionStatus::Idle | ExecutionStatus::Finished | ExecutionStatus::Error | ExecutionStatus::Stuck) {
                    self.prompted_upto = self.turn_started_seq.take().unwrap_or(ev.seq);
                } else if *status == ExecutionStatus::Running {
                    self.turn_started_seq.get_or_insert(ev.seq);
                }
                self.status = Some(*status);
                self.status_reason.clone_from(reason);
                self.status_seq = ev.seq;
            }
            EventBody::WorkspaceRestored { at_seq, .. } => {
                let text = format!(
                    "[The user put the workspace's files back as they were at event {at_seq}: what was changed since is undone. \
                     Look at the files again before relying on what you remember of them.]"
                );
                self.push(ChatMessage::text("user", text), ev.seq)
            }
            // The model saw the plan in its tool's result already.
            EventBody::TaskList { items } => self.tasks.clone_from(items),
            EventBody::Hook { event, message_seq: Some(seq), blocked, .. } if event == "user_prompt_submit" => {
                self.unjudged.retain(|s| s > seq);
                // A refused message never reaches the model.
                if *blocked {
                    self.entries.retain(|e| e.seq != *seq);
                    if self.first_user_seq == Some(*seq) {
                        self.first_user_seq = None;
                    }
                }
            }
            EventBody::SubConversationsStarted { tool_call_id, children } => {
                self.helpers.retain(|(call, _)| call != tool_call_id);
                self.helpers.push((tool_call_id.clone(), children.clone()));
            }
            // What a helper used is this conversation's to pay.
            EventBody::SubConversationEnded { conversation_id, used_tokens, used_usd, .. } => {
                if self.helpers_ended.insert(*conversation_id, (*used_tokens, *used_usd)).is_none() {
                    self.used_tokens += used_tokens;
                    self.used_usd += used_usd;
                }
            }
            EventBody::Hook { .. }
            | EventBody::PullRequestOpened { .. }
            | EventBody::BudgetAlert { .. }
            | EventBody::Result { .. }
            | EventBody::McpAuthRequired { .. } => {}
            EventBody::AgentSession { session_id, .. } => self.agent_session = Some(session_id.clone()),
            EventBody::HooksConsentRequired { sha256, .. } => self.hooks_asked = Some(sha256.clone()),
            EventBody::HooksConsent { sha256, allowed } => {
                self.hooks_answers.insert(sha256.clone(), *allowed);
                self.hooks_asked = None;
            }
            EventBody::AgentError { .. }
            | EventBody::Title { .. }
            | EventBody::TerminalOpened { .. }
            | EventBody::AgentUpdate { .. }
            | EventBody::NetworkUsed { .. } => {}
        }
    }

    /// The summary as the LLM reads it.
    pub fn summary_message(&self) -> Option<ChatMessage> {
        self.summary.as_ref().map(|(text, _)| summary_message(text))
    }

    /// The messages to send: system prompt, the first user message, the latest summary, what
    /// follows; and a stand-in result for every tool call that never got one (a run cut off by
    /// a crash or a pause), since the API requires one.
    pub fn for_llm(&self, system: &str) -> Vec<ChatMessage> {
        let mut out = vec![ChatMessage::text("system", system)];
        let mut open: Vec<String> = Vec::new();
        let close = |open: &mut Vec<String>, out: &mut Vec<ChatMessage>| {
            for id in open.drain(..) {
                out.push(tool_result(&id, "[No result: the action was interrupted before it completed.]".into()));
            }
        };
        let mut summary = self.summary_message();
        for e in &self.entries {
            let m = &e.msg;
            if m.role == "tool" {
                if let Some(id) = &m.tool_call_id {
                    open.retain(|o| o != id);
                }
            } else {
                close(&mut open, &mut out);
            }
            if Some(e.seq) != self.first_user_seq {
                if let Some(s) = summary.take() {
                    out.push(s);
                }
            }
            if m.role == "assistant" {
                open.extend(m.tool_calls.iter().map(|c| c.id.clone()));
            }
            out.push(m.clone());
        }
        close(&mut open, &mut out);
        out.extend(summary);
        out
    }
}

/// A condensation's summary as the LLM reads it.
pub fn summary_message(text: &str) -> ChatMessage {
    ChatMessage::text("user", format!("<summary of the earlier part of this conversation>\n{text}\n</summary>"))
}

fn tool_result(id: &str, content: String) -> ChatMessage {
    ChatMessage { role: "tool".into(), content: Some(content), tool_call_id: Some(id.to_owned()), ..Default::default() }
}

/// An event at `seq`, for tests of what is derived from events.
#[cfg(test)]
pub(crate) fn test_event(seq: u64, body: EventBody) -> ConversationEvent {
    ConversationEvent {
        seq,
        id: EventId::new(),
        conversation_id: halyard_protocol::ConversationId::new(),
        source: halyard_protocol::event::EventSource::Agent,
        timestamp_ms: 0,
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use test_event as ev;

    #[test]
    fn a_message_sent_while_a_turn_runs_is_for_the_next_prompt() {
        let status = |status| EventBody::ExecutionStatus { status, reason: None };
        let said = |text: &str| EventBody::UserMessage { text: text.into(), images: vec![], command: None };
        let mut h = History::default();
        h.apply(&ev(1, said("first")));
        h.apply(&ev(2, status(ExecutionStatus::Running)));
        h.apply(&ev(3, said("while it works")));
        // A confirmation's run is the same turn.
        h.apply(&ev(4, status(ExecutionStatus::WaitingForConfirmation)));
        h.apply(&ev(5, status(ExecutionStatus::Running)));
        h.apply(&ev(6, status(ExecutionStatus::Finished)));
        assert_eq!(h.prompted_upto, 2, "only what came before the turn began was given");
        let next: Vec<u64> = h.entries.iter().filter(|e| e.seq > h.prompted_upto && e.msg.role == "user").map(|e| e.seq).collect();
        assert_eq!(next, [3]);
    }

    #[test]
    fn only_the_newest_screenshot_stays_in_the_prompt() {
        let obs = |id: &str| EventBody::Observation {
            tool_call_id: id.into(),
            tool: "browser_get_state".into(),
            content: format!("state {id}"),
            exit_code: None,
            is_error: false,
            url: Some("http://localhost/".into()),
            screenshot_id: Some(format!("shot-{id}")),
            image_ids: Vec::new(),
        };
        let mut h = History::default();
        h.apply(&ev(1, EventBody::UserMessage { text: "look".into(), images: vec![], command: None }));
        h.apply(&ev(2, obs("a")));
        let png = ImagePart { media_type: "image/png".into(), data: "AAA".into() };
        let before = h.entries[1].bytes;
        h.show_images(2, vec![png.clone()]);
        assert_eq!(h.entries[1].msg.images, vec![png.clone()]);
        assert!(h.entries[1].bytes > before + 1000, "an image costs the prompt");
        h.apply(&ev(3, obs("b")));
        h.show_images(3, vec![png.clone()]);
        assert!(h.entries[1].msg.images.is_empty(), "the older screenshot left the prompt");
        assert!(h.entries[1].msg.content.as_deref().unwrap_or_default().ends_with("[Its images are no longer shown.]"));
        assert_eq!(h.entries[2].msg.images.len(), 1);
    }

    #[test]
    fn groups_actions_and_closes_interrupted_calls() {
        let action = |id: &str| EventBody::Action {
            tool_call_id: id.into(),
            tool: "terminal".into(),
            arguments: serde_json::json!({"command":"ls"}),
            thought: None,
            security_risk: None,
        };
        let h = History::from_events(&[
            ev(1, EventBody::UserMessage { text: "hi".into(), images: vec![], command: None }),
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
                    url: None,
                    screenshot_id: None,
                    image_ids: Vec::new(),
                },
            ),
            ev(5, EventBody::ExecutionStatus { status: ExecutionStatus::Error, reason: None }),
            ev(6, EventBody::UserMessage { text: "go on".into(), images: vec![], command: None }),
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

    #[test]
    fn helpers_are_live_until_they_end_and_what_they_used_is_the_parents() {
        use halyard_protocol::event::SubConversation;
        let (a, b) = (halyard_protocol::ConversationId::new(), halyard_protocol::ConversationId::new());
        let delegate = EventBody::Action {
            tool_call_id: "d".into(),
            tool: "delegate".into(),
            arguments: serde_json::json!({}),
            thought: None,
            security_risk: None,
        };
        let children =
            vec![SubConversation { conversation_id: a, title: "A".into() }, SubConversation { conversation_id: b, title: "B".into() }];
        let ended = |c, tokens| EventBody::SubConversationEnded {
            tool_call_id: "d".into(),
            conversation_id: c,
            status: "finished".into(),
            message: String::new(),
            used_tokens: tokens,
            used_usd: 0.5,
        };
        let mut h = History::from_events(&[
            ev(1, EventBody::UserMessage { text: "split".into(), images: vec![], command: None }),
            ev(2, delegate),
            ev(3, EventBody::SubConversationsStarted { tool_call_id: "d".into(), children }),
            ev(4, ended(a, 700)),
        ]);
        assert_eq!(h.live_helpers(), [b], "A ended; B works on");
        assert_eq!((h.used_tokens, h.used_usd), (700, 0.5));
        // The same end recorded twice (a repeated watch) is paid once.
        h.apply(&ev(5, ended(a, 700)));
        h.apply(&ev(6, ended(b, 300)));
        assert_eq!((h.used_tokens, h.used_usd), (1000, 1.0));
        assert!(h.live_helpers().is_empty());
    }
}
