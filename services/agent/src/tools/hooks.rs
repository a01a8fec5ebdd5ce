//! Repository hooks, as OpenHands reads them from `.openhands/hooks.json`: for each hook event
//! (`pre_tool_use`, `post_tool_use`, `user_prompt_submit`, `session_start`, `session_end`,
//! `stop`; PascalCase keys and a `{"hooks": {...}}` wrapper are read too) a list of `{"matcher",
//! "hooks": [{"type": "command", "command", "timeout"}]}`. The file is read from the workspace
//! at the start of each run; a hook runs in the sandbox as its user (the executor's
//! `/hooks/run`), its input as JSON on its standard input. Exit code 2, or `{"decision":
//! "deny"}` or `{"continue": false}` on its standard output, blocks what it was asked about;
//! another failure is reported and blocks nothing. Every execution is a `hook` event.
//!
//! When each runs here: `session_start` and `session_end` at a run's start and end (a run is
//! what one message, confirmation or resume sets going); `user_prompt_submit` for each user
//! message before the model first sees it; `pre_tool_use` before an action (not `finish`),
//! `post_tool_use` after its result; `stop` when the agent calls `finish`.

use std::collections::BTreeMap;

use halyard_platform::executor_client::{ExecutorClient, ExecutorError};
use halyard_protocol::executor::HookRunRequest;
use serde::Deserialize;
use serde_json::{Value, json};

/// Where the hooks are, in the workspace.
pub const FILE: &str = ".openhands/hooks.json";
/// A hook's timeout when it names none, in seconds (OpenHands' default).
const DEFAULT_TIMEOUT: f64 = 60.0;

/// The moments a hook runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    PreToolUse,
    PostToolUse,
    UserPromptSubmit,
    SessionStart,
    SessionEnd,
    Stop,
}

impl Moment {
    const ALL: [Moment; 6] =
        [Self::PreToolUse, Self::PostToolUse, Self::UserPromptSubmit, Self::SessionStart, Self::SessionEnd, Self::Stop];

    /// The key in the file (and the `event` of a `hook` event).
    pub fn key(self) -> &'static str {
        match self {
            Self::PreToolUse => "pre_tool_use",
            Self::PostToolUse => "post_tool_use",
            Self::UserPromptSubmit => "user_prompt_submit",
            Self::SessionStart => "session_start",
            Self::SessionEnd => "session_end",
            Self::Stop => "stop",
        }
    }

    /// The name hooks see in their input's `event_type` (OpenHands' PascalCase).
    fn pascal(self) -> &'static str {
        match self {
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::SessionStart => "SessionStart",
            Self::SessionEnd => "SessionEnd",
            Self::Stop => "Stop",
        }
    }

    fn of_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.key() == key || m.pascal() == key)
    }
}

/// One hook command.
#[derive(Clone, Debug, Deserialize)]
pub struct Hook {
    #[serde(default = "command_type", rename = "type")]
    pub kind: String,
    pub command: String,
    #[serde(default = "default_timeout")]
    pub timeout: f64,
    /// What it runs with besides the conversation's secrets: a plugin's hook gets
    /// `CLAUDE_PLUGIN_ROOT` (set by Halyard, never by the file).
    #[serde(skip)]
    pub env: BTreeMap<String, String>,
}

fn command_type() -> String {
    "command".into()
}

fn default_timeout() -> f64 {
    DEFAULT_TIMEOUT
}

/// A matcher as the file writes it.
#[derive(Deserialize)]
struct RawMatcher {
    #[serde(default = "any")]
    matcher: String,
    #[serde(default)]
    hooks: Vec<Hook>,
}

fn any() -> String {
    "*".into()
}

/// What a matcher matches, read once from the file (its regular expression compiled then).
#[derive(Clone, Debug)]
enum Pattern {
    Any,
    Name(String),
    Regex(regex::Regex),
    /// A `/.../` that is no regular expression: it matches nothing.
    Nothing,
}

impl Pattern {
    /// OpenHands' rules: `*` or empty matches everything; `/re/` is a regular expression, as is
    /// a matcher with regex characters in it (else the exact name).
    fn of(m: &str) -> Self {
        let whole = |re: &str| regex::Regex::new(&format!("^(?:{re})$")).ok();
        if m.is_empty() || m == "*" {
            Self::Any
        } else if m.len() > 2 && m.starts_with('/') && m.ends_with('/') {
            whole(&m[1..m.len() - 1]).map_or(Self::Nothing, Self::Regex)
        } else if m.chars().any(|c| "|.*+?[]()^$\\".contains(c)) {
            whole(m).map_or_else(|| Self::Name(m.to_owned()), Self::Regex)
        } else {
            Self::Name(m.to_owned())
        }
    }

    /// A hook without a tool (prompts, sessions) only matches `*`. A tool matches by its own
    /// name or by Claude Code's name for it (`Bash` is `terminal`), so plugins written for
    /// Claude Code match the same tools here.
    fn matches(&self, tool: Option<&str>) -> bool {
        match tool {
            Some(t) => self.matches_name(Some(t)) || claude_names(t).iter().any(|c| self.matches_name(Some(c))),
            None => self.matches_name(None),
        }
    }

    fn matches_name(&self, tool: Option<&str>) -> bool {
        match (self, tool) {
            (Self::Any, _) => true,
            (Self::Name(name), Some(tool)) => name == tool,
            (Self::Regex(re), Some(tool)) => re.is_match(tool),
            _ => false,
        }
    }
}

/// Claude Code's names for one of Halyard's tools.
fn claude_names(tool: &str) -> &'static [&'static str] {
    match tool {
        "terminal" => &["Bash"],
        "file_editor" => &["Read", "Write", "Edit", "MultiEdit"],
        "apply_patch" => &["Edit", "MultiEdit", "Write"],
        "glob" => &["Glob"],
        "grep" => &["Grep"],
        "task_tracker" => &["TodoWrite"],
        "delegate" => &["Task"],
        "execute_ipython_cell" => &["NotebookEdit"],
        t if t.starts_with("browser") => &["WebFetch"],
        _ => &[],
    }
}

/// Whether `listed` (a named agent's `tools`, in Claude Code's names or Halyard's) holds the
/// built-in tool `tool`.
pub fn tool_named(listed: &[String], tool: &str) -> bool {
    listed.iter().any(|l| l == tool || claude_names(tool).contains(&l.as_str()))
}

#[derive(Clone, Debug)]
struct Matcher {
    pattern: Pattern,
    hooks: Vec<Hook>,
}

/// The hooks of a workspace.
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    by_moment: BTreeMap<&'static str, Vec<Matcher>>,
    /// The file as read, and its SHA-256 (hex): what the owner consents to.
    pub text: String,
    pub sha256: String,
}

impl Hooks {
    /// Reads the file's text; `Err` says in words what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("{FILE} is not JSON: {e}"))?;
        let mut map = match value {
            Value::Object(m) => m,
            _ => return Err(format!("{FILE} must hold an object of hook events")),
        };
        if let Some(Value::Object(inner)) = map.remove("hooks") {
            map = inner;
        }
        let mut by_moment = BTreeMap::new();
        for (key, list) in map {
            let moment = Moment::of_key(&key).ok_or_else(|| {
                format!("{FILE} names an unknown hook event `{key}`; the events are {}", Moment::ALL.map(Moment::key).join(", "))
            })?;
            let matchers: Vec<RawMatcher> =
                serde_json::from_value(list).map_err(|e| format!("{FILE}: `{key}` must be a list of {{matcher, hooks}}: {e}"))?;
            let matchers = matchers.into_iter().map(|m| Matcher { pattern: Pattern::of(&m.matcher), hooks: m.hooks });
            by_moment.entry(moment.key()).or_insert_with(Vec::new).extend(matchers);
        }
        Ok(Self { by_moment, text: text.to_owned(), sha256: sha256_hex(text.as_bytes()) })
    }

    /// A plugin's hooks (its `hooks.json`'s events, `${CLAUDE_PLUGIN_ROOT}` resolved already),
    /// each run with `CLAUDE_PLUGIN_ROOT` set. Claude Code's events Halyard has no moment for
    /// (`Notification`, `SubagentStop`, `PreCompact`) are left out; other unknown ones refused.
    pub fn of_plugin(events: &Value, root: &str) -> Result<Self, String> {
        let Value::Object(map) = events else { return Err("its hooks file must hold an object of hook events".into()) };
        let known: serde_json::Map<String, Value> = map
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "Notification" | "SubagentStop" | "PreCompact"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut hooks = Self::parse(&Value::Object(known).to_string())?;
        for hook in hooks.by_moment.values_mut().flatten().flat_map(|m| m.hooks.iter_mut()) {
            hook.env.insert("CLAUDE_PLUGIN_ROOT".into(), root.to_owned());
        }
        Ok(hooks)
    }

    /// These hooks, then `other`'s.
    pub fn merged(mut self, other: Self) -> Self {
        for (moment, matchers) in other.by_moment {
            self.by_moment.entry(moment).or_default().extend(matchers);
        }
        self
    }

    /// Whether the file names any command at all (one that names none needs no consent).
    pub fn is_empty(&self) -> bool {
        self.by_moment.values().flatten().all(|m| m.hooks.is_empty())
    }

    /// The hooks to run at `moment` for `tool`, in the file's order.
    pub fn at(&self, moment: Moment, tool: Option<&str>) -> Vec<Hook> {
        self.matching(moment, tool).flat_map(|m| m.hooks.iter().cloned()).collect()
    }

    /// Whether any hook runs at `moment` for `tool` (so that its input is made only then).
    pub fn wants(&self, moment: Moment, tool: Option<&str>) -> bool {
        self.matching(moment, tool).any(|m| !m.hooks.is_empty())
    }

    fn matching(&self, moment: Moment, tool: Option<&str>) -> impl Iterator<Item = &Matcher> {
        self.by_moment.get(moment.key()).into_iter().flatten().filter(move |m| m.pattern.matches(tool))
    }

    pub fn has(&self, moment: Moment) -> bool {
        self.by_moment.get(moment.key()).is_some_and(|m| !m.is_empty())
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The workspace's hooks, from the executor's answer to a read of [`FILE`]: `Ok(None)` when
/// there is no file. (The read is the run's first request to its executor, see
/// `executor_of`.)
pub fn from_answer(answer: Result<halyard_protocol::executor::FilesResponse, ExecutorError>) -> Result<Option<Hooks>, String> {
    match answer {
        Ok(f) if f.kind == "file" => match f.content {
            Some(text) if !f.truncated => Hooks::parse(&text).map(Some),
            _ => Err(format!("{FILE} is too large or not text")),
        },
        Ok(_) => Err(format!("{FILE} is not a file")),
        Err(ExecutorError::Rejected { status: 404, .. }) => Ok(None),
        Err(e) => Err(format!("cannot read {FILE}: {e}")),
    }
}

/// What one hook did, as its event records it.
#[derive(Debug)]
pub struct Ran {
    pub command: String,
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub blocked: bool,
    /// Why it blocked, for whoever is refused: its `reason`, its standard error, or its words.
    pub reason: String,
}

/// Where hooks run: the conversation, its workspace, and the secrets its shell has (a hook runs
/// with what the agent's commands run with).
pub struct Scene<'a> {
    pub conversation: &'a str,
    pub workspace: &'a str,
    pub secrets: &'a BTreeMap<String, String>,
}

/// Runs one hook with `input` (the moment's fields) on its standard input.
pub async fn run(exec: &ExecutorClient, hook: &Hook, moment: Moment, tool: Option<&str>, mut input: Value, scene: &Scene<'_>) -> Ran {
    let Scene { conversation, workspace, secrets } = *scene;
    if hook.kind != "command" {
        return Ran {
            command: hook.command.clone(),
            exit_code: None,
            stdout: String::new(),
            stderr: format!("hooks of type `{}` are not run; only `command`", hook.kind),
            blocked: false,
            reason: String::new(),
        };
    }
    if let Value::Object(fields) = &mut input {
        fields.insert("event_type".into(), json!(moment.pascal()));
        fields.insert("session_id".into(), json!(conversation));
        fields.insert("working_dir".into(), json!(workspace));
        // What Claude Code's hooks read.
        fields.insert("hook_event_name".into(), json!(moment.pascal()));
        fields.insert("cwd".into(), json!(workspace));
    }
    let mut env = secrets.clone();
    env.extend(hook.env.clone());
    env.insert("CLAUDE_PROJECT_DIR".into(), workspace.into());
    env.insert("OPENHANDS_PROJECT_DIR".into(), workspace.into());
    env.insert("OPENHANDS_SESSION_ID".into(), conversation.into());
    env.insert("OPENHANDS_EVENT_TYPE".into(), moment.pascal().into());
    if let Some(tool) = tool {
        env.insert("OPENHANDS_TOOL_NAME".into(), tool.into());
    }
    let req = HookRunRequest { command: hook.command.clone(), stdin: input.to_string(), timeout_secs: hook.timeout, env };
    match exec.run_hook(&req).await {
        Ok(out) => {
            let said: Option<Value> = serde_json::from_str(out.stdout.trim()).ok();
            // OpenHands' `deny`, Claude Code's `block` and its PreToolUse `permissionDecision`.
            let deny = said.as_ref().is_some_and(|v| {
                v["decision"].as_str().is_some_and(|d| d.eq_ignore_ascii_case("deny") || d.eq_ignore_ascii_case("block"))
                    || v["continue"] == json!(false)
                    || v["hookSpecificOutput"]["permissionDecision"] == json!("deny")
            });
            let blocked = out.exit_code == Some(2) || deny;
            let reason = said
                .as_ref()
                .and_then(|v| {
                    v["reason"]
                        .as_str()
                        .or(v["hookSpecificOutput"]["permissionDecisionReason"].as_str())
                        .or(v["stopReason"].as_str())
                        .map(str::to_owned)
                })
                .or_else(|| Some(out.stderr.trim().to_owned()).filter(|s| !s.is_empty()))
                .unwrap_or_else(|| format!("the {} hook `{}` said no", moment.key(), hook.command));
            Ran { command: hook.command.clone(), exit_code: out.exit_code, stdout: out.stdout, stderr: out.stderr, blocked, reason }
        }
        Err(e) => Ran {
            command: hook.command.clone(),
            exit_code: None,
            stdout: String::new(),
            stderr: format!("the sandbox could not run the hook: {e}"),
            blocked: false,
            reason: String::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_read_as_openhands_reads_it() {
        let hooks = Hooks::parse(
            r#"{"hooks": {
                "PreToolUse": [{"matcher": "terminal", "hooks": [{"type": "command", "command": "guard.sh", "timeout": 5}]}],
                "post_tool_use": [{"matcher": "/file_.*/", "hooks": [{"command": "log.sh"}]}],
                "stop": [{"hooks": [{"command": "check.sh"}]}]
            }}"#,
        )
        .unwrap();
        assert_eq!(hooks.at(Moment::PreToolUse, Some("terminal"))[0].timeout, 5.0);
        assert!(hooks.at(Moment::PreToolUse, Some("file_editor")).is_empty());
        assert_eq!(hooks.at(Moment::PostToolUse, Some("file_editor"))[0].command, "log.sh");
        assert!(hooks.at(Moment::PostToolUse, Some("terminal")).is_empty());
        assert_eq!(hooks.at(Moment::Stop, None)[0].timeout, DEFAULT_TIMEOUT, "no matcher matches everything");
        assert!(hooks.has(Moment::Stop) && !hooks.has(Moment::SessionStart));
        let m = |matcher: &str, tool: Option<&str>| Pattern::of(matcher).matches(tool);
        assert!(m("terminal|file_editor", Some("file_editor")) && !m("terminal|file_editor", Some("think")));
        assert!(!m("term", Some("terminal")), "a plain matcher is the exact name");
        assert!(!m("terminal", None) && m("*", None));
        assert!(!m("/[/", Some("[")), "a /.../ that is no regular expression matches nothing");
        assert!(m("Bash", Some("terminal")) && m("Edit|Write", Some("file_editor")) && !m("Bash", Some("file_editor")));
        assert!(tool_named(&["Read".into(), "Bash".into()], "terminal") && !tool_named(&["Read".into()], "terminal"));
        let plugin = Hooks::of_plugin(
            &serde_json::json!({"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "/p/guard.sh"}]}], "Notification": []}),
            "/p",
        )
        .unwrap();
        let both = hooks.clone().merged(plugin);
        let pre = both.at(Moment::PreToolUse, Some("terminal"));
        assert_eq!((pre.len(), pre[1].env["CLAUDE_PLUGIN_ROOT"].as_str()), (2, "/p"));
        assert!(m("a[", Some("a[")), "regex characters that make none are the exact name");
        let err = Hooks::parse(r#"{"before_everything": []}"#).unwrap_err();
        assert!(err.contains("unknown hook event `before_everything`") && err.contains("pre_tool_use"), "{err}");
        assert!(Hooks::parse("not json").unwrap_err().contains("not JSON"));
        assert!(Hooks::parse(r#"{"stop": [{"hooks": [{"timeout": 1}]}]}"#).unwrap_err().contains("command"));
    }
}
