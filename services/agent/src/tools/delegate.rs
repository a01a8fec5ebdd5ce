//! `delegate`: the agent hands tasks to helpers. Each task becomes a child conversation of the
//! same user, started through the conversations service in the parent's sandbox (one
//! workspace), so the helpers run in parallel, on whichever agent runners take them, each with
//! a log of its own. The parent's run waits, watching each helper's log, until every helper has
//! ended; its result holds what each said last.
//!
//! Everything here is a function of the parent and the tool call: the helpers' ids, their start
//! commands' ids, their start tasks. A parent run that is paused and resumed, or taken over by
//! another runner, calls `delegate` again with the same call and finds the same helpers (the
//! start commands are deduplicated, a started task is not started twice) and goes on watching.

use std::time::Duration;

use halyard_platform::derived::{Namespace, derived_uuid};
use halyard_platform::{BusError, bus};
use halyard_protocol::command::{AgentCommand, ConversationCommand};
use halyard_protocol::event::{Budget, ConversationEvent, EventBody, ExecutionStatus, SubConversation};
use halyard_protocol::system::{HelperAgent, ParentLink, StartTaskStatus, SystemRecord};
use halyard_protocol::{CommandId, ConversationId, Envelope, TaskId, TraceContext, UserId, subjects};
use serde_json::{Value, json};

/// Longest title and prompt of one task.
const MAX_TITLE: usize = 200;
const MAX_PROMPT: usize = 100_000;
/// How often the helpers' logs are read while the parent waits.
pub const POLL: Duration = Duration::from_millis(400);

/// The tool's definition; `max` tasks at most per call. `agents` are the named agents of the
/// conversation's plugins (name and description), which a task may be handed to.
pub fn spec(max: usize, agents: &[(String, String)]) -> Value {
    let mut task = json!({"type": "object", "properties": {
        "title": {"type": "string", "description": "What the task is, briefly (the helper's conversation title)."},
        "prompt": {"type": "string", "description": "The helper's instructions, whole."}
    }, "required": ["title", "prompt"]});
    if !agents.is_empty() {
        let listed: Vec<String> = agents.iter().map(|(n, d)| format!("`{n}`: {d}")).collect();
        task["properties"]["agent"] = json!({
            "type": "string",
            "enum": agents.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            "description": format!("A specialised agent to hand this task to, by name (absent: a helper like you). {}", listed.join("; "))
        });
    }
    json!({"type": "function", "function": {
        "name": "delegate",
        "description": format!("Hand independent tasks to helpers that work in parallel, each an agent of its own with the same tools, in this same workspace (they see the files as they are now, and you see what they change). Give each task a short title and a prompt that says everything the helper needs: it does not see this conversation. Up to {max} tasks a call. The call returns when every helper has finished, with each one's final message. Use it for work that splits into parts that do not touch the same files."),
        "parameters": {"type": "object", "properties": {
            "tasks": {"type": "array", "description": "The tasks, one helper each.", "items": task}
        }, "required": ["tasks"]}
    }})
}

/// One task to hand over.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct Task {
    pub title: String,
    pub prompt: String,
    /// The named agent (a plugin's) to hand it to.
    #[serde(default)]
    pub agent: Option<String>,
}

/// The tasks of a call, or what is wrong with them (in words for the model). A task's `agent`
/// must be one of `agents`.
pub fn parse(args: &Value, max: usize, agents: &[HelperAgent]) -> Result<Vec<Task>, String> {
    let list = match args.get("tasks") {
        Some(list @ Value::Array(_)) => list.clone(),
        // Some models send a list as a JSON string.
        Some(Value::String(text)) => serde_json::from_str(text).map_err(|_| "`tasks` must be a list of {\"title\", \"prompt\"}.")?,
        _ => return Err("`delegate` needs `tasks`: a list of {\"title\", \"prompt\"}, one helper each.".into()),
    };
    let tasks: Vec<Task> =
        serde_json::from_value(list).map_err(|e| format!("`tasks` is not a list of {{\"title\", \"prompt\"}} ({e})."))?;
    if tasks.is_empty() {
        return Err("`tasks` is empty: give at least one task.".into());
    }
    if tasks.len() > max {
        return Err(format!("At most {max} tasks a call ({} given): group them, or delegate the rest when these are done.", tasks.len()));
    }
    for t in &tasks {
        if t.title.trim().is_empty() || t.title.chars().count() > MAX_TITLE || t.title.contains('\n') {
            return Err(format!("Each task needs a title of one line, up to {MAX_TITLE} characters."));
        }
        if t.prompt.trim().is_empty() || t.prompt.len() > MAX_PROMPT {
            return Err(format!("Each task needs a prompt, up to {MAX_PROMPT} bytes."));
        }
        if let Some(a) = t.agent.as_deref().filter(|a| !agents.iter().any(|h| h.name == *a)) {
            let names: Vec<&str> = agents.iter().map(|h| h.name.as_str()).collect();
            return Err(if names.is_empty() {
                format!("There is no agent `{a}`: leave `agent` out.")
            } else {
                format!("There is no agent `{a}`; the agents are {}.", names.join(", "))
            });
        }
    }
    Ok(tasks)
}

/// An id derived from the parent, the call, the task's place and what the id is for.
fn derived(parent: ConversationId, call: &str, index: usize, what: &[u8]) -> uuid::Uuid {
    derived_uuid(Namespace::Hashed(&[b"halyard-delegate", parent.as_bytes(), call.as_bytes(), &(index as u64).to_be_bytes(), what]))
}

/// The helper of task `index` of call `call`.
pub fn helper_id(parent: ConversationId, call: &str, index: usize) -> ConversationId {
    ConversationId(derived(parent, call, index, b"conversation"))
}

/// What each of `helpers` may spend: what the parent has left, in equal shares, so that together
/// they never pass the parent's budget. `Err` when there is not enough left to share.
pub fn shares(budget: &Budget, used_tokens: u64, used_usd: f64, helpers: usize) -> Result<Option<Budget>, String> {
    let n = helpers.max(1);
    let tokens = budget.max_tokens.map(|max| max.saturating_sub(used_tokens) / n as u64);
    let usd = budget.max_budget_usd.map(|max| (max - used_usd) / n as f64);
    if tokens == Some(0) || usd.is_some_and(|u| u <= 0.0) {
        return Err("This conversation's budget is spent: there is nothing left to give helpers. Do the work yourself, or \
                    start a new conversation with a larger budget."
            .into());
    }
    let share = Budget { max_tokens: tokens, max_budget_usd: usd };
    Ok((share != Budget::default()).then_some(share))
}

/// What the parent hands the conversations service for each helper.
pub struct Start {
    pub parent: ConversationId,
    pub owner: UserId,
    pub link: ParentLink,
    pub budget: Option<Budget>,
    pub llm_profile: Option<String>,
    pub secrets: Option<Vec<String>>,
    pub confirmation_policy: halyard_protocol::event::ConfirmationPolicy,
    /// The parent's organization, whose budgets also cover the helper.
    pub org: Option<String>,
    pub trace: Option<TraceContext>,
    /// The parent's plugins, which its helpers have too.
    pub plugins: Vec<halyard_protocol::plugin::PluginUse>,
    /// The named agents tasks may be handed to.
    pub agents: Vec<HelperAgent>,
}

/// Asks for helper `index` (once, however often it is asked: its command id and task are fixed).
pub async fn start(js: &async_nats::jetstream::Context, s: &Start, index: usize, task: &Task) -> Result<(), BusError> {
    let call = &s.link.tool_call_id;
    let conversation_id = helper_id(s.parent, call, index);
    let cmd = ConversationCommand::Start {
        agent: None,
        task_id: TaskId(derived(s.parent, call, index, b"task")),
        conversation_id,
        owner: s.owner.clone(),
        message: Some(task.prompt.clone()),
        plugins: Some(s.plugins.clone()),
        repository: None,
        title: Some(task.title.clone()),
        created_ms: halyard_platform::now_ms(),
        spec: None,
        budget: s.budget.clone(),
        confirmation_policy: Some(s.confirmation_policy),
        llm_profile: s.llm_profile.clone(),
        secrets: s.secrets.clone(),
        fork: None,
        parent: Some(ParentLink {
            agent: task.agent.as_ref().and_then(|a| s.agents.iter().find(|h| h.name == *a).cloned()),
            ..s.link.clone()
        }),
        tags: Default::default(),
        // A helper is in its parent's organization (and private: its parent's log shows what
        // it did).
        org: s.org.clone(),
        visibility: Default::default(),
        // A helper works in its parent's sandbox, set up already.
        environment: None,
        checks: None,
        // A helper works in its parent's sandbox: it never waits for one.
        queue: Default::default(),
    };
    let mut env = Envelope::with_id(CommandId(derived(s.parent, call, index, b"start")), cmd, halyard_platform::now_ms());
    env.trace = s.trace.clone();
    bus::publish(js, subjects::conversation_command(conversation_id), &env).await.map(drop)
}

/// The start task of helper `index`, to tell a start that failed.
pub fn task_of(parent: ConversationId, call: &str, index: usize) -> TaskId {
    TaskId(derived(parent, call, index, b"task"))
}

/// Sends `command` (pause, resume, interrupt) to each helper; each goes once per `cause` (the
/// parent's command id), so a redelivery repeats nothing.
pub async fn tell(
    js: &async_nats::jetstream::Context,
    helpers: &[ConversationId],
    cause: CommandId,
    command: fn(ConversationId) -> AgentCommand,
    trace: Option<TraceContext>,
) {
    for helper in helpers {
        let id = derived_uuid(Namespace::Hashed(&[b"halyard-helper-command", cause.0.as_bytes(), helper.as_bytes()]));
        let mut env = Envelope::with_id(CommandId(id), command(*helper), halyard_platform::now_ms());
        env.trace = trace.clone();
        if let Err(e) = bus::publish(js, subjects::agent_command(*helper), &env).await {
            tracing::warn!(helper = %helper, error = %e, "cannot pass the command on to a helper");
        }
    }
}

/// One helper as its parent watches it.
#[derive(Debug)]
pub struct Watched {
    pub child: SubConversation,
    pub task: TaskId,
    /// The stream sequence to read its log from next.
    from: u64,
    pub used_tokens: u64,
    pub used_usd: f64,
    /// What it said last: its `finish` message or last answer.
    pub last_message: Option<String>,
    pub last_error: Option<String>,
    /// How it ended (`finished`, `idle`, `error`, `stuck`, `failed` to start, or `deleted`);
    /// `None` while it works.
    pub ended: Option<String>,
    /// Looks in a row that found nothing new (now and then one checks it was not deleted).
    quiet: u32,
}

/// Every this many quiet looks, whether a helper was deleted is checked.
const DELETED_CHECK: u32 = 10;

impl Watched {
    pub fn new(child: SubConversation, task: TaskId) -> Self {
        Self { child, task, from: 1, used_tokens: 0, used_usd: 0.0, last_message: None, last_error: None, ended: None, quiet: 0 }
    }

    /// Whether anything of its log was read (its start reached its agent).
    pub fn has_events(&self) -> bool {
        self.from > 1
    }

    /// Folds one of the helper's events in.
    fn apply(&mut self, ev: &ConversationEvent) {
        match &ev.body {
            EventBody::LlmCall { prompt_tokens, completion_tokens, cost_usd, .. } => {
                self.used_tokens += prompt_tokens + completion_tokens;
                self.used_usd += cost_usd.unwrap_or(0.0);
            }
            EventBody::AgentMessage { text } => self.last_message = Some(text.clone()),
            EventBody::AgentError { message, .. } => self.last_error = Some(message.clone()),
            EventBody::ExecutionStatus { status, reason } => match status {
                // A run of its own (a new one, or one resumed): it works.
                ExecutionStatus::Running => self.ended = None,
                ExecutionStatus::Finished | ExecutionStatus::Error | ExecutionStatus::Stuck => {
                    self.ended = Some(status.as_str().to_owned())
                }
                // Answered, stopped by an interrupt, or its message refused: it waits for a user
                // who is not there. (A resume that owes no run says "resumed": it had ended.)
                ExecutionStatus::Idle if reason.as_deref() != Some("resumed") => self.ended = Some(status.as_str().to_owned()),
                // Paused, or waiting for the user's confirmation: as it was.
                _ => {}
            },
            _ => {}
        }
    }

    /// Reads what the helper appended since the last look; a helper whose start failed ends
    /// with the reason, and one its owner deleted ends so.
    pub async fn look(&mut self, js: &async_nats::jetstream::Context) -> Result<(), BusError> {
        let filter = subjects::conversation_events(self.child.conversation_id);
        let before = self.from;
        loop {
            let batch = bus::direct_batch(js, subjects::EVENTS_STREAM, &filter, self.from, 256).await?;
            let got = batch.len();
            for (stream_seq, payload) in batch {
                self.from = stream_seq + 1;
                match halyard_protocol::decode::<ConversationEvent>(&payload) {
                    Ok(env) => self.apply(&env.payload),
                    Err(e) => tracing::warn!(helper = %self.child.conversation_id, error = %e, "a helper's event does not decode"),
                }
            }
            if got < 256 {
                break;
            }
        }
        self.quiet = if self.from == before { self.quiet + 1 } else { 0 };
        if self.ended.is_none() && self.quiet % DELETED_CHECK == DELETED_CHECK - 1 {
            let record = subjects::conversation_record(self.child.conversation_id);
            if let Some((_, env)) = bus::last_record::<SystemRecord>(js, subjects::SYSTEM_STREAM, &record).await? {
                if matches!(env.payload, SystemRecord::ConversationDeleted { .. }) {
                    self.last_error = Some("It was deleted.".into());
                    self.ended = Some("deleted".into());
                    return Ok(());
                }
            }
        }
        if self.ended.is_none() && self.from == 1 {
            // No event yet: is it still starting, or did its start fail?
            if let Some((_, env)) = bus::last_record::<SystemRecord>(js, subjects::SYSTEM_STREAM, &subjects::task_record(self.task)).await?
            {
                if let SystemRecord::StartTask(u) = env.payload {
                    if u.status == StartTaskStatus::Error {
                        self.last_error = u.detail;
                        self.ended = Some("failed".into());
                    }
                }
            }
        }
        Ok(())
    }

    /// The helper's part of the parent's result.
    pub fn report(&self, index: usize) -> String {
        let said = match (&self.ended, &self.last_message, &self.last_error) {
            (Some(s), _, Some(e)) if ["error", "failed", "stuck", "deleted"].contains(&s.as_str()) => e.clone(),
            (_, Some(m), _) => m.clone(),
            (_, None, Some(e)) => e.clone(),
            (_, None, None) => "(it said nothing)".into(),
        };
        format!(
            "## {}. {} (conversation {}): {}\n{}",
            index + 1,
            self.child.title,
            self.child.conversation_id,
            self.ended.as_deref().unwrap_or("still working"),
            said.trim()
        )
    }

    /// The event that records its end in the parent's log.
    pub fn ended_event(&self, call: &str) -> EventBody {
        EventBody::SubConversationEnded {
            tool_call_id: call.to_owned(),
            conversation_id: self.child.conversation_id,
            status: self.ended.clone().unwrap_or_else(|| "stopped".into()),
            message: self.last_message.clone().or_else(|| self.last_error.clone()).unwrap_or_default(),
            used_tokens: self.used_tokens,
            used_usd: self.used_usd,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_checked_and_ids_are_stable() {
        let ok = json!({"tasks": [{"title": "Tests", "prompt": "Write tests"}, {"title": "Docs", "prompt": "Write docs"}]});
        assert_eq!(parse(&ok, 4, &[]).unwrap().len(), 2);
        assert!(parse(&ok, 1, &[]).unwrap_err().contains("At most 1"));
        assert!(parse(&json!({"tasks": []}), 4, &[]).unwrap_err().contains("empty"));
        assert!(parse(&json!({"tasks": [{"title": "", "prompt": "x"}]}), 4, &[]).unwrap_err().contains("title"));
        assert!(parse(&json!({"tasks": [{"title": "x"}]}), 4, &[]).is_err());
        assert!(parse(&json!({"tasks": "[{\"title\": \"a\", \"prompt\": \"b\"}]"}), 4, &[]).is_ok(), "a list sent as a string");
        let reviewer = HelperAgent { name: "reviewer".into(), prompt: "Review.".into(), tools: None };
        let named = json!({"tasks": [{"title": "a", "prompt": "b", "agent": "reviewer"}]});
        assert_eq!(parse(&named, 4, std::slice::from_ref(&reviewer)).unwrap()[0].agent.as_deref(), Some("reviewer"));
        assert!(parse(&named, 4, &[]).unwrap_err().contains("no agent `reviewer`"));
        let parent = ConversationId::new();
        assert_eq!(helper_id(parent, "call_1", 0), helper_id(parent, "call_1", 0));
        assert_ne!(helper_id(parent, "call_1", 0), helper_id(parent, "call_1", 1));
        assert_ne!(helper_id(parent, "call_1", 0), helper_id(parent, "call_2", 0));
        assert_ne!(task_of(parent, "call_1", 0).0, helper_id(parent, "call_1", 0).0);
    }

    #[test]
    fn helpers_share_what_is_left_of_the_budget() {
        let budget = Budget { max_tokens: Some(1000), max_budget_usd: Some(1.0) };
        assert_eq!(shares(&budget, 400, 0.25, 1).unwrap(), Some(Budget { max_tokens: Some(600), max_budget_usd: Some(0.75) }));
        assert_eq!(shares(&budget, 400, 0.25, 3).unwrap(), Some(Budget { max_tokens: Some(200), max_budget_usd: Some(0.25) }));
        assert!(shares(&budget, 1000, 0.0, 1).is_err());
        assert!(shares(&budget, 0, 1.0, 2).is_err());
        assert_eq!(shares(&Budget::default(), 5, 5.0, 2).unwrap(), None, "no limit: none for the helpers");
    }
}
