//! The agent's tools, named and shaped as OpenHands names them (`terminal`, `file_editor`,
//! `apply_patch`, `glob`, `grep`, `think`, `finish`, `task_tracker`), so models and prompts tuned
//! for OpenHands carry over; which of them a conversation offers is its LLM profile's tool set; and
//! `load_skill`, which reads a folder skill's instructions when the conversation has any.
//! Beside them: the sandbox's browser ([`browser`]) and Python kernel ([`kernel`]), helpers working in parallel ([`delegate`]), the tools of MCP servers ([`mcp`]),
//! the risk of each action ([`risk`]), and the repository's hooks around them ([`hooks`]).

pub mod browser;
pub mod delegate;
pub mod hooks;
pub mod kernel;
pub mod mcp;
pub mod mcp_sign_in;
mod outcome;
pub mod risk;

pub use outcome::{Rich, ToolOutcome};
use outcome::{bool_arg, error, security_risk, str_arg};

use halyard_platform::executor_client::{ExecutorClient, ExecutorError};
use halyard_protocol::event::TaskItem;
use halyard_protocol::executor::{EditRequest, ExecRequest, GlobRequest, GrepRequest, PatchRequest};
use serde_json::{Value, json};

/// Tool definitions in the chat-completions `tools` format: the built-in tools `offered` (a
/// [`halyard_protocol::user::ToolSet`]'s names; `delegate` is added by the run, which knows how
/// deep it is), `finish` always, and `load_skill` when the conversation has folder skills.
pub fn specs(offered: &[&str], with_load_skill: bool) -> Vec<Value> {
    let all = [
        ("terminal", None),
        ("file_editor", None),
        ("apply_patch", Some(apply_patch_spec())),
        ("glob", Some(glob_spec())),
        ("grep", Some(grep_spec())),
        (kernel::TOOL, Some(kernel::spec())),
    ];
    let mut specs: Vec<Value> = classic()
        .into_iter()
        .filter(|s| {
            let name = s["function"]["name"].as_str().unwrap_or_default();
            name == "finish" || offered.contains(&name)
        })
        .collect();
    // The file tools go after the editor's place, before `think`.
    let at = specs.iter().position(|s| s["function"]["name"] == "think").unwrap_or(specs.len());
    let mut extra: Vec<Value> = all.into_iter().filter(|(n, _)| offered.contains(n)).filter_map(|(_, s)| s).collect();
    if offered.contains(&"browser") {
        extra.extend(browser::specs());
    }
    specs.splice(at..at, extra);
    if with_load_skill {
        specs.push(json!({"type": "function", "function": {
            "name": "load_skill",
            "description": "Load the full instructions of one of the available skills, by name, before you use it.",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        }}));
    }
    specs
}

fn glob_spec() -> Value {
    json!({"type": "function", "function": {
        "name": "glob",
        "description": "Fast file pattern matching tool.\n* Supports glob patterns like \"**/*.js\" or \"src/**/*.ts\"\n* Use this tool when you need to find files by name patterns\n* Returns matching file paths sorted by modification time\n* Only the first 100 results are returned. Consider narrowing your search with stricter glob patterns or provide path parameter if you need more results.",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string", "description": "The glob pattern to match files (e.g., \"**/*.js\", \"src/**/*.ts\")"},
            "path": {"type": "string", "description": "The directory (absolute path) to search in. Defaults to the current working directory."}
        }, "required": ["pattern"]}
    }})
}

fn grep_spec() -> Value {
    json!({"type": "function", "function": {
        "name": "grep",
        "description": "Fast content search tool.\n* Searches file contents using regular expressions\n* Supports full regex syntax (eg. \"log.*Error\", \"function\\s+\\w+\", etc.)\n* Filter files by pattern with the include parameter (eg. \"*.js\", \"*.{ts,tsx}\")\n* Returns matching file paths sorted by modification time.\n* Only the first 100 results are returned. Consider narrowing your search with stricter regex patterns or provide path parameter if you need more results.",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string", "description": "The regex pattern to search for in file contents"},
            "path": {"type": "string", "description": "The directory (absolute path) to search in. Defaults to the current working directory."},
            "include": {"type": "string", "description": "Optional file pattern to filter which files to search (e.g., \"*.js\", \"*.{ts,tsx}\")"}
        }, "required": ["pattern"]}
    }})
}

fn apply_patch_spec() -> Value {
    json!({"type": "function", "function": {
        "name": "apply_patch",
        "description": "Apply a patch to files in the workspace, in the V4A format: it starts with `*** Begin Patch` and ends with `*** End Patch`; between them, sections `*** Add File: <path>` (every line after it starts with `+`), `*** Delete File: <path>`, and `*** Update File: <path>` (optionally followed by `*** Move to: <new path>`) with hunks: `@@` and optionally a line to find first, then lines starting with ` ` (context, about three around each change), `-` (removed) or `+` (added). Paths are relative to the workspace. The patch applies whole or not at all.",
        "parameters": {"type": "object", "properties": {
            "patch": {"type": "string", "description": "Patch content following the '*** Begin Patch' ... '*** End Patch' format."},
            "security_risk": security_risk()
        }, "required": ["patch", "security_risk"]}
    }})
}

/// OpenHands' classic tools, in the order they are offered.
fn classic() -> Vec<Value> {
    vec![
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
            "name": "task_tracker",
            "description": "Keep the plan of the task as a list the user watches. `view` shows it; `plan` replaces it with `task_list`, whole: every task in order, each with its status. Plan work of several steps before you start it, keep one task `in_progress` at a time, and mark each `done` as soon as it is.",
            "parameters": {"type": "object", "properties": {
                "command": {"type": "string", "enum": ["view", "plan"]},
                "task_list": {"type": "array", "description": "The whole plan, for `plan`.", "items": {"type": "object", "properties": {
                    "title": {"type": "string", "description": "What the task is, briefly."},
                    "notes": {"type": "string", "description": "Details, or what was found."},
                    "status": {"type": "string", "enum": ["todo", "in_progress", "done"]}
                }, "required": ["title"]}}
            }, "required": ["command"]}
        }}),
        json!({"type": "function", "function": {
            "name": "finish",
            "description": "Finish the task when it is done, or when it cannot be done, with a message for the user.",
            "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
        }}),
    ]
}

/// `finish` as a conversation with a result schema offers it: with a `result`, required, whose
/// schema is the conversation's.
pub fn with_result(specs: &mut [Value], schema: &Value) {
    let Some(finish) = specs.iter_mut().find(|s| s["function"]["name"] == "finish") else { return };
    finish["function"]["description"] = json!(
        "Finish the task when it is done, or when it cannot be done, with a message for the user and the task's `result`, \
         which must match its schema."
    );
    finish["function"]["parameters"]["properties"]["result"] = schema.clone();
    finish["function"]["parameters"]["required"] = json!(["message", "result"]);
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

/// Most tasks a plan may hold, and the longest title and notes of one.
const MAX_TASKS: usize = 100;
const MAX_TASK_TITLE: usize = 500;
const MAX_TASK_NOTES: usize = 4000;

/// The plan as the model reads it: one task a line, its notes indented under it.
fn render_plan(items: &[TaskItem]) -> String {
    let mut out = String::new();
    for (i, t) in items.iter().enumerate() {
        out.push_str(&format!("{}. [{}] {}\n", i + 1, t.status.as_str(), t.title));
        for line in t.notes.lines() {
            out.push_str(&format!("   {line}\n"));
        }
    }
    out
}

/// `task_tracker`: the plan shown (`view`) or replaced (`plan`, which also answers the plan to
/// record).
pub fn task_tracker(current: &[TaskItem], args: &Value) -> (ToolOutcome, Option<Vec<TaskItem>>) {
    let observe = |content: String| ToolOutcome::Observation { content, exit_code: None, is_error: false };
    match str_arg(args, "command").as_deref() {
        Some("view") if current.is_empty() => (observe("There is no plan yet. Make one with `plan` and a `task_list`.".into()), None),
        Some("view") => (observe(format!("The plan:\n{}", render_plan(current))), None),
        Some("plan") => {
            let list = match args.get("task_list") {
                Some(list @ Value::Array(_)) => list.clone(),
                // Some models send the list as a JSON string.
                Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                    Ok(list @ Value::Array(_)) => list,
                    _ => return (error("`task_list` must be a list of tasks, each {\"title\", \"notes\", \"status\"}."), None),
                },
                _ => return (error("`plan` needs `task_list`: the whole plan, a list of {\"title\", \"notes\", \"status\"}."), None),
            };
            let items: Vec<TaskItem> = match serde_json::from_value(list) {
                Ok(items) => items,
                Err(e) => {
                    return (
                        error(format!(
                            "`task_list` is not a list of tasks ({e}): each is {{\"title\", \"notes\", \"status\"}}, the status `todo`, `in_progress` or `done`."
                        )),
                        None,
                    );
                }
            };
            if items.len() > MAX_TASKS {
                return (error(format!("A plan holds at most {MAX_TASKS} tasks; group them.")), None);
            }
            if let Some(t) =
                items.iter().find(|t| t.title.trim().is_empty() || t.title.len() > MAX_TASK_TITLE || t.notes.len() > MAX_TASK_NOTES)
            {
                let what = if t.title.trim().is_empty() { "has no title".to_owned() } else { "is too long".to_owned() };
                return (
                    error(format!(
                        "A task {what}: each needs a title of up to {MAX_TASK_TITLE} bytes, and notes of up to {MAX_TASK_NOTES}."
                    )),
                    None,
                );
            }
            let content = if items.is_empty() {
                "The plan is empty now.".to_owned()
            } else {
                format!("The plan has {} task{} now:\n{}", items.len(), if items.len() == 1 { "" } else { "s" }, render_plan(&items))
            };
            (observe(content), Some(items))
        }
        _ => (error("`command` must be `view` or `plan`."), None),
    }
}

/// The line before a command's output when its shell is new since the last command (the
/// sandbox hibernated while idle, or its processes were restarted): the model must not count on
/// what only the old shell had.
pub const NEW_SHELL: &str = "[This is a new shell: the sandbox's processes were stopped since your last command (it \
     hibernated while idle, or was restarted). It started in the directory your last command ended in (the workspace if \
     that is gone), and your secrets are set again; files are as you left them, but variables you exported and processes \
     you left running (servers, background jobs) are gone: start them again if you need them.]";

/// Executes one tool call in the sandbox.
/// `env`: exported into the shell before a command (the owner's secrets); `default_timeout`: a
/// command's when it names none, or a Python cell's; `session`: the shell session commands run
/// in (none: the sandbox's main shell).
pub async fn execute(
    exec: &ExecutorClient,
    tool: &str,
    args: &Value,
    env: &std::collections::BTreeMap<String, String>,
    default_timeout: f64,
    session: Option<&str>,
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
                session: session.map(str::to_owned),
            };
            match exec.exec(&req).await {
                Ok(r) => {
                    let mut content = if r.restarted { format!("{NEW_SHELL}\n{}", r.output) } else { r.output };
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
        "glob" | "grep" => {
            let Some(pattern) = str_arg(args, "pattern") else {
                return error("Missing required argument `pattern`.");
            };
            let path = str_arg(args, "path");
            let found = if tool == "glob" {
                exec.glob(&GlobRequest { pattern: pattern.clone(), path }).await
            } else {
                exec.grep(&GrepRequest { pattern: pattern.clone(), path, include: str_arg(args, "include") }).await
            };
            match found {
                Ok(r) => ToolOutcome::Observation {
                    content: search_result(tool, &pattern, str_arg(args, "include"), &r),
                    exit_code: None,
                    is_error: false,
                },
                Err(ExecutorError::Rejected { message, .. }) => error(format!("Error: {message}")),
                Err(e) => error(format!("The sandbox could not search: {e}")),
            }
        }
        "apply_patch" => {
            let Some(patch) = str_arg(args, "patch") else {
                return error("Missing required argument `patch`.");
            };
            match exec.patch(&PatchRequest { patch }).await {
                Ok(r) => ToolOutcome::Observation { content: r.message, exit_code: None, is_error: false },
                Err(ExecutorError::Rejected { message, .. }) => error(message),
                Err(e) => error(format!("The sandbox could not apply the patch: {e}")),
            }
        }
        name if browser::is_browser(name) => browser::execute(exec, name, args).await,
        kernel::TOOL => kernel::execute(exec, args, session, default_timeout).await,
        "think" => ToolOutcome::Observation { content: "Your thought has been logged.".into(), exit_code: None, is_error: false },
        "finish" => ToolOutcome::Finish { message: str_arg(args, "message").unwrap_or_default(), result: args.get("result").cloned() },
        other => error(format!("Unknown tool `{other}`. Use one of the tools you are offered.")),
    }
}

/// A `glob` or `grep` result as OpenHands' tools word it.
fn search_result(tool: &str, pattern: &str, include: Option<String>, r: &halyard_protocol::executor::SearchResponse) -> String {
    let filtered = include.map(|i| format!(" (filtered by '{i}')")).unwrap_or_default();
    let what = if tool == "glob" { "matching pattern" } else { "containing pattern" };
    if r.files.is_empty() {
        return format!("No files found {what} '{pattern}' in directory '{}'{filtered}", r.search_path);
    }
    let mut out = format!("Found {} file(s) {what} '{pattern}' in '{}'{filtered}:\n{}", r.files.len(), r.search_path, r.files.join("\n"));
    if r.truncated {
        out.push_str("\n\n[Results truncated to first 100 files. Consider using a more specific pattern.]");
    }
    out
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
        let names = |set: &str| -> Vec<String> {
            let set = halyard_protocol::user::ToolSet::Preset(set.into());
            specs(&set.names().unwrap(), false).iter().map(|s| s["function"]["name"].as_str().unwrap_or_default().to_owned()).collect()
        };
        let browsing = halyard_protocol::executor::BROWSER_TOOLS;
        let with = |tools: &[&str]| -> Vec<String> {
            let (before, after) = tools.split_at(5);
            before.iter().chain(browsing).chain(after).map(|s| s.to_string()).collect()
        };
        assert_eq!(
            names("default"),
            with(&["terminal", "file_editor", "glob", "grep", "execute_ipython_cell", "think", "task_tracker", "finish"])
        );
        assert_eq!(
            names("gpt5"),
            with(&["terminal", "apply_patch", "glob", "grep", "execute_ipython_cell", "think", "task_tracker", "finish"])
        );
        let only = specs(&["terminal"], true);
        assert_eq!(only.iter().map(|s| s["function"]["name"].as_str().unwrap()).collect::<Vec<_>>(), ["terminal", "finish", "load_skill"]);
    }

    #[test]
    fn the_task_tracker_shows_and_replaces_the_plan() {
        let (seen, none) = task_tracker(&[], &json!({"command": "view"}));
        assert!(
            none.is_none() && matches!(seen, ToolOutcome::Observation { ref content, is_error: false, .. } if content.contains("no plan"))
        );
        let args = json!({"command": "plan", "task_list": [
            {"title": "Read the code", "status": "done"},
            {"title": "Fix it", "notes": "in parse.rs", "status": "in_progress"},
            {"title": "Test it"}
        ]});
        let (said, plan) = task_tracker(&[], &args);
        let plan = plan.unwrap();
        assert_eq!(plan[2].status, halyard_protocol::event::TaskStatus::Todo, "a task without a status is to do");
        match said {
            ToolOutcome::Observation { content, is_error: false, .. } => {
                assert!(content.contains("3 tasks") && content.contains("2. [in_progress] Fix it\n   in parse.rs"), "{content}")
            }
            other => panic!("{other:?}"),
        }
        // The list as a JSON string is taken too; a wrong status is refused in words.
        let text = json!({"command": "plan", "task_list": "[{\"title\": \"One\"}]"});
        assert_eq!(task_tracker(&plan, &text).1.unwrap().len(), 1);
        let (bad, none) = task_tracker(&plan, &json!({"command": "plan", "task_list": [{"title": "x", "status": "later"}]}));
        assert!(
            none.is_none()
                && matches!(bad, ToolOutcome::Observation { ref content, is_error: true, .. } if content.contains("in_progress"))
        );
        let (bad, none) = task_tracker(&plan, &json!({"command": "plan", "task_list": [{"title": " "}]}));
        assert!(
            none.is_none() && matches!(bad, ToolOutcome::Observation { ref content, is_error: true, .. } if content.contains("no title"))
        );
        let (bad, _) = task_tracker(&plan, &json!({"command": "erase"}));
        assert!(matches!(bad, ToolOutcome::Observation { is_error: true, .. }));
    }
}
