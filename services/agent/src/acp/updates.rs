//! A third-party agent's `session/update` notifications, as events: `agent_message_chunk`s are
//! answer deltas (core NATS, as Halyard's own streamed answers) and one `agent_message` when the
//! text ends; `agent_thought_chunk`s a `thinking` event; `tool_call`/`tool_call_update` an
//! `action` (when the call runs, or asks permission) and an `observation` (when it completes or
//! fails: its output, its diffs); `plan` a `task_list`. `usage_update` is dropped (the relay
//! records every call with its tokens); any other kind is kept as an `agent_update`.

use std::collections::HashMap;

use halyard_protocol::event::{EventBody, SecurityRisk, TaskItem, TaskStatus, ThinkingBlock};
use serde_json::{Value, json};

/// What one update asks of the driver, in order.
// Steps are made and carried out at once, a few at a time: boxing the event would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub enum Step {
    /// A piece of the agent's answer, for the deltas.
    Delta(String),
    /// An event to append.
    Append(EventBody),
    /// The action of tool call `id` is recorded: the workspace may change from here (its
    /// observation then asks for a checkpoint).
    Observed { changes: bool },
}

/// A tool call as its updates have described it so far.
#[derive(Clone, Debug, Default)]
struct Call {
    title: String,
    kind: String,
    tool: String,
    raw_input: Value,
    locations: Value,
    /// Its action is in the log.
    recorded: bool,
    done: bool,
}

/// The fold of one run's updates.
#[derive(Default)]
pub struct Updates {
    message: String,
    thought: String,
    calls: HashMap<String, Call>,
}

impl Updates {
    /// Folds one update in; what to do follows from it. `pending` says whether a tool call's
    /// action is in the log already (recorded by an earlier run).
    pub fn apply(&mut self, update: &Value, pending: &dyn Fn(&str) -> bool) -> Vec<Step> {
        let kind = update.get("sessionUpdate").and_then(Value::as_str).unwrap_or_default();
        let mut steps = Vec::new();
        match kind {
            "agent_message_chunk" => {
                if let Some(text) = text_of(update.get("content")) {
                    self.message.push_str(&text);
                    if !text.is_empty() {
                        steps.push(Step::Delta(text));
                    }
                }
            }
            "agent_thought_chunk" => {
                if let Some(text) = text_of(update.get("content")) {
                    self.thought.push_str(&text);
                }
            }
            "tool_call" | "tool_call_update" => {
                steps.extend(self.flush());
                steps.extend(self.tool_call(update, pending));
            }
            "plan" => {
                let items = update.get("entries").and_then(Value::as_array).into_iter().flatten().map(task).collect();
                steps.push(Step::Append(EventBody::TaskList { items }));
            }
            "usage_update" | "user_message_chunk" => {}
            other => steps.push(Step::Append(EventBody::AgentUpdate { update_kind: other.to_owned(), update: update.clone() })),
        }
        steps
    }

    /// The thought and the message written so far, as events (at a tool call and at the end of
    /// a turn).
    pub fn flush(&mut self) -> Vec<Step> {
        let mut steps = Vec::new();
        let thought = std::mem::take(&mut self.thought);
        if !thought.trim().is_empty() {
            steps.push(Step::Append(EventBody::Thinking { blocks: vec![ThinkingBlock { text: thought, ..Default::default() }] }));
        }
        let message = std::mem::take(&mut self.message);
        if !message.trim().is_empty() {
            steps.push(Step::Append(EventBody::AgentMessage { text: message }));
        }
        steps
    }

    /// The action of tool call `id` (as a permission request describes it, or as its updates
    /// did), if it is not in the log yet; it is then marked recorded.
    pub fn action(&mut self, id: &str, described: Option<&Value>, pending: &dyn Fn(&str) -> bool) -> Option<EventBody> {
        let call = self.calls.entry(id.to_owned()).or_default();
        if let Some(d) = described {
            merge(call, d);
        }
        if call.recorded || pending(id) {
            call.recorded = true;
            return None;
        }
        call.recorded = true;
        Some(action_of(id, call))
    }

    /// The agent's name of tool call `id`'s tool, as its updates said it.
    pub fn tool(&self, id: &str) -> String {
        self.calls.get(id).map_or_else(|| "tool".to_owned(), |c| c.tool.clone())
    }

    /// The risk of tool call `id`, as Halyard's rules judge its kind and command.
    pub fn risk(&self, id: &str, workspace: &str) -> Option<SecurityRisk> {
        let call = self.calls.get(id)?;
        Some(match call.kind.as_str() {
            "execute" => {
                let command = call.raw_input.get("command").and_then(Value::as_str).unwrap_or(&call.title);
                crate::tools::risk::assess("terminal", &json!({"command": command}), workspace).unwrap_or(SecurityRisk::Medium)
            }
            "read" | "search" | "think" | "fetch" => SecurityRisk::Low,
            "delete" => SecurityRisk::High,
            _ => SecurityRisk::Medium,
        })
    }

    fn tool_call(&mut self, update: &Value, pending: &dyn Fn(&str) -> bool) -> Vec<Step> {
        let Some(id) = update.get("toolCallId").and_then(Value::as_str) else { return Vec::new() };
        let call = self.calls.entry(id.to_owned()).or_default();
        merge(call, update);
        let status = update.get("status").and_then(Value::as_str).unwrap_or_default();
        let mut steps = Vec::new();
        if matches!(status, "in_progress" | "completed" | "failed") {
            if let Some(action) = self.action(id, None, pending) {
                steps.push(Step::Append(action));
            }
        }
        let call = self.calls.entry(id.to_owned()).or_default();
        if matches!(status, "completed" | "failed") && !call.done {
            call.done = true;
            let content = output_of(update);
            let is_error = status == "failed";
            steps.push(Step::Append(EventBody::observation(id.to_owned(), call.tool.clone(), content, None, is_error)));
            steps.push(Step::Observed { changes: matches!(call.kind.as_str(), "edit" | "delete" | "move" | "execute" | "other" | "") });
        }
        steps
    }
}

/// Takes what `update` says of a call into it (later updates replace earlier fields).
fn merge(call: &mut Call, update: &Value) {
    if let Some(t) = update.get("title").and_then(Value::as_str) {
        call.title = t.to_owned();
    }
    if let Some(k) = update.get("kind").and_then(Value::as_str) {
        call.kind = k.to_owned();
    }
    if let Some(input) = update.get("rawInput").filter(|v| v.as_object().is_none_or(|o| !o.is_empty())) {
        call.raw_input = input.clone();
    }
    if let Some(l) = update.get("locations").filter(|l| !l.is_null()) {
        call.locations = l.clone();
    }
    // The agent's own name for the tool, where it says it (Claude Code does, in `_meta`).
    let named = update.pointer("/_meta/claudeCode/toolName").and_then(Value::as_str);
    if let Some(name) = named {
        call.tool = name.to_owned();
    } else if call.tool.is_empty() {
        call.tool = if call.kind.is_empty() { "tool".into() } else { call.kind.clone() };
    }
}

fn action_of(id: &str, call: &Call) -> EventBody {
    let mut arguments = json!({"title": call.title, "kind": call.kind, "input": call.raw_input});
    if !call.locations.is_null() {
        arguments["locations"] = call.locations.clone();
    }
    EventBody::Action { tool_call_id: id.to_owned(), tool: call.tool.clone(), arguments, thought: None, security_risk: None }
}

/// A tool call's result as text: its raw output where it is text, else its content (text
/// blocks, and diffs as the new text of each file).
fn output_of(update: &Value) -> String {
    if let Some(text) = update.get("rawOutput").and_then(Value::as_str) {
        return text.to_owned();
    }
    let mut out = Vec::new();
    for c in update.get("content").and_then(Value::as_array).into_iter().flatten() {
        match c.get("type").and_then(Value::as_str) {
            Some("content") => out.extend(text_of(c.get("content"))),
            Some("diff") => {
                let path = c.get("path").and_then(Value::as_str).unwrap_or("?");
                let new = c.get("newText").and_then(Value::as_str).unwrap_or_default();
                out.push(format!("{path}:\n{new}"));
            }
            _ => {}
        }
    }
    if out.is_empty() {
        if let Some(raw) = update.get("rawOutput").filter(|v| !v.is_null()) {
            return raw.to_string();
        }
    }
    out.join("\n")
}

/// The text of a content block (`{"type": "text", "text": ...}`).
fn text_of(content: Option<&Value>) -> Option<String> {
    let c = content?;
    (c.get("type").and_then(Value::as_str) == Some("text")).then(|| c.get("text").and_then(Value::as_str).unwrap_or_default().to_owned())
}

fn task(entry: &Value) -> TaskItem {
    let status = match entry.get("status").and_then(Value::as_str) {
        Some("in_progress") => TaskStatus::InProgress,
        Some("completed") => TaskStatus::Done,
        _ => TaskStatus::Todo,
    };
    let title = entry.get("content").and_then(Value::as_str).unwrap_or_default().to_owned();
    let notes = entry.get("priority").and_then(Value::as_str).map(|p| format!("priority: {p}")).unwrap_or_default();
    TaskItem { title, notes, status }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claude_code_bash_call_is_one_action_and_one_observation() {
        let mut u = Updates::default();
        let none = |_: &str| false;
        let start = json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "status": "pending", "title": "Terminal", "kind": "execute",
            "rawInput": {}, "_meta": {"claudeCode": {"toolName": "Bash"}}});
        assert!(u.apply(&start, &none).is_empty());
        let input = json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "rawInput": {"command": "echo hi"}, "title": "echo hi", "kind": "execute"});
        assert!(u.apply(&input, &none).is_empty());
        let done = json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed", "rawOutput": "hi"});
        let steps = u.apply(&done, &none);
        match &steps[..] {
            [
                Step::Append(EventBody::Action { tool, arguments, .. }),
                Step::Append(EventBody::Observation { content, .. }),
                Step::Observed { changes: true },
            ] => {
                assert_eq!((tool.as_str(), arguments["input"]["command"].as_str(), content.as_str()), ("Bash", Some("echo hi"), "hi"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn message_chunks_are_deltas_then_one_message_and_unknown_kinds_are_kept() {
        let mut u = Updates::default();
        let none = |_: &str| false;
        for piece in ["All ", "done."] {
            let steps = u.apply(&json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": piece}}), &none);
            assert_eq!(steps, vec![Step::Delta(piece.into())]);
        }
        assert_eq!(u.flush(), vec![Step::Append(EventBody::AgentMessage { text: "All done.".into() })]);
        let odd = json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"});
        assert_eq!(
            u.apply(&odd, &none),
            vec![Step::Append(EventBody::AgentUpdate { update_kind: "current_mode_update".into(), update: odd.clone() })]
        );
    }
}
