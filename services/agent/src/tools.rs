//! The agent's tools, named and shaped as OpenHands names them (`terminal`, `file_editor`,
//! `think`, `finish`), so models and prompts tuned for OpenHands carry over; and `load_skill`,
//! which reads a folder skill's instructions when the conversation has any.

use halyard_platform::executor_client::{ExecutorClient, ExecutorError};
use halyard_protocol::executor::{EditRequest, ExecRequest};
use serde_json::{Value, json};

/// The `security_risk` argument of the tools that act (OpenHands' wording).
fn security_risk() -> Value {
    json!({"type": "string", "enum": ["low", "medium", "high"], "description": "The risk of this action: `low` for \
        read-only or workspace-local changes, `medium` for changes beyond the workspace or network use, `high` for \
        destructive or irreversible actions or anything touching credentials."})
}

/// Tool definitions in the chat-completions `tools` format; `load_skill` only when the
/// conversation has folder skills to load.
pub fn specs(with_load_skill: bool) -> Vec<Value> {
    let mut specs = vec![
        json!({"type": "function", "function": {
            "name": "terminal",
            "description": "Execute a bash command in the persistent shell of the sandbox. The working directory and environment persist between calls. A command that runs longer than `timeout` seconds keeps running: send `is_input` true with an empty command to keep waiting, with text to give it input, or with `C-c` to interrupt it. Output longer than the cap is cut in the middle.",
            "parameters": {"type": "object", "properties": {
                "command": {"type": "string", "description": "The bash command to execute, or with is_input the input to send (`C-c` interrupts)."},
                "is_input": {"type": "boolean", "description": "Send `command` to the running process as input instead of running a new command."},
                "timeout": {"type": "number", "description": "Seconds to wait before returning while the command keeps running."},
                "security_risk": security_risk()
            }, "required": ["command", "security_risk"]}
        }}),
        json!({"type": "function", "function": {
            "name": "file_editor",
            "description": "View, create and edit files. `view` shows a file with line numbers (or a directory two levels deep); `create` writes a new file; `str_replace` replaces `old_str`, which must occur exactly once, with `new_str`; `insert` inserts `new_str` after line `insert_line` (0 for the top); `undo_edit` reverts the last edit of the file.",
            "parameters": {"type": "object", "properties": {
                "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
                "path": {"type": "string", "description": "Absolute path, or a path relative to the workspace."},
                "file_text": {"type": "string", "description": "Content of the file, for `create`."},
                "old_str": {"type": "string", "description": "Exact text to replace, for `str_replace`."},
                "new_str": {"type": "string", "description": "Replacement or text to insert."},
                "insert_line": {"type": "integer", "description": "Line after which to insert, for `insert`."},
                "view_range": {"type": "array", "items": {"type": "integer"}, "description": "[start, end] lines for `view`; end -1 means the last line."},
                "security_risk": security_risk()
            }, "required": ["command", "path", "security_risk"]}
        }}),
        json!({"type": "function", "function": {
            "name": "think",
            "description": "Think about something without acting. Use it to plan or reason about results; it changes nothing.",
            "parameters": {"type": "object", "properties": {"thought": {"type": "string"}}, "required": ["thought"]}
        }}),
        json!({"type": "function", "function": {
            "name": "finish",
            "description": "Finish the task when it is done, or when it cannot be done, with a message for the user.",
            "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
        }}),
    ];
    if with_load_skill {
        specs.push(json!({"type": "function", "function": {
            "name": "load_skill",
            "description": "Load the full instructions of one of the available skills, by name, before you use it.",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        }}));
    }
    specs
}

/// What a tool call produced.
#[derive(Debug, PartialEq)]
pub enum ToolOutcome {
    Observation { content: String, exit_code: Option<i32>, is_error: bool },
    Finish { message: String },
}

fn error(content: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Observation { content: content.into(), exit_code: None, is_error: true }
}

fn str_arg(args: &Value, name: &str) -> Option<String> {
    args.get(name).and_then(Value::as_str).map(str::to_owned)
}

/// Booleans arrive as `true` or, from OpenHands-tuned prompts, as `"true"`.
fn bool_arg(args: &Value, name: &str) -> bool {
    match args.get(name) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

/// Parses the raw `arguments` string of a tool call.
pub fn parse_arguments(raw: &str) -> Result<Value, String> {
    if raw.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str::<Value>(raw)
        .map_err(|e| format!("The arguments are not valid JSON ({e}). Call the tool again with a JSON object."))
        .and_then(|v| if v.is_object() { Ok(v) } else { Err("The arguments must be a JSON object.".into()) })
}

/// `load_skill`: the body of the folder skill named `name` among `skills`.
pub fn load_skill(skills: &[halyard_protocol::event::Skill], args: &Value) -> ToolOutcome {
    use halyard_protocol::event::SkillKind;
    let name = str_arg(args, "name").unwrap_or_default();
    let offered = || skills.iter().filter(|s| s.kind == SkillKind::AgentSkill);
    match offered().find(|s| s.name == name) {
        Some(skill) => ToolOutcome::Observation {
            content: format!("<skill name=\"{}\">\n{}\n</skill>", skill.name, skill.content),
            exit_code: None,
            is_error: false,
        },
        None => error(format!(
            "There is no skill named `{name}`. The skills are: {}.",
            offered().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// Executes one tool call in the sandbox.
/// `env`: exported into the shell before a command (the owner's secrets).
pub async fn execute(
    exec: &ExecutorClient,
    tool: &str,
    args: &Value,
    env: &std::collections::BTreeMap<String, String>,
    default_timeout: f64,
) -> ToolOutcome {
    match tool {
        "terminal" => {
            let Some(command) = str_arg(args, "command") else {
                return error("Missing required argument `command`.");
            };
            let is_input = bool_arg(args, "is_input");
            let timeout = args.get("timeout").and_then(|t| t.as_f64().or_else(|| t.as_str().and_then(|s| s.parse().ok())));
            let req = ExecRequest {
                command,
                is_input,
                timeout_secs: Some(timeout.unwrap_or(if is_input { 5.0 } else { default_timeout })),
                env: (!is_input).then(|| env.clone()),
                scoped: false,
            };
            match exec.exec(&req).await {
                Ok(r) => {
                    let mut content = r.output;
                    if let Some(code) = r.exit_code {
                        content.push_str(&format!("\n[The command completed with exit code {code}.]"));
                        if !r.cwd.is_empty() {
                            content.push_str(&format!("\n[Current working directory: {}]", r.cwd));
                        }
                    }
                    ToolOutcome::Observation { content, exit_code: r.exit_code, is_error: false }
                }
                Err(ExecutorError::Rejected { message, .. }) => error(message),
                Err(e) => error(format!("The sandbox could not run the command: {e}")),
            }
        }
        "file_editor" => {
            let Some(command) = str_arg(args, "command") else {
                return error("Missing required argument `command`.");
            };
            let view_range = match args.get("view_range") {
                Some(Value::Array(a)) => Some(a.iter().filter_map(Value::as_i64).collect()),
                _ => None,
            };
            let req = EditRequest {
                command,
                path: str_arg(args, "path").unwrap_or_default(),
                file_text: str_arg(args, "file_text"),
                old_str: str_arg(args, "old_str"),
                new_str: str_arg(args, "new_str"),
                insert_line: args.get("insert_line").and_then(|v| v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok()))),
                view_range,
            };
            match exec.edit(&req).await {
                Ok(r) => ToolOutcome::Observation { content: r.output, exit_code: None, is_error: false },
                Err(ExecutorError::Rejected { message, .. }) => error(format!("ERROR:\n{message}")),
                Err(e) => error(format!("The sandbox could not edit the file: {e}")),
            }
        }
        "think" => ToolOutcome::Observation { content: "Your thought has been logged.".into(), exit_code: None, is_error: false },
        "finish" => ToolOutcome::Finish { message: str_arg(args, "message").unwrap_or_default() },
        other => error(format!(
            "Unknown tool `{other}`. The tools are: terminal, file_editor, think, finish, and load_skill when skills are offered."
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_validated() {
        assert!(parse_arguments("{\"command\":\"ls\"}").is_ok());
        assert!(parse_arguments("").unwrap().is_object());
        assert!(parse_arguments("{not json").unwrap_err().contains("not valid JSON"));
        assert!(parse_arguments("[1]").is_err());
        assert!(bool_arg(&json!({"is_input": "true"}), "is_input"));
        assert!(!bool_arg(&json!({"is_input": "false"}), "is_input"));
        let names: Vec<String> = specs(false).iter().map(|s| s["function"]["name"].as_str().unwrap_or_default().to_owned()).collect();
        assert_eq!(names, ["terminal", "file_editor", "think", "finish"]);
    }
}
