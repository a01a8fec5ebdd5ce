//! Conversation events as a person reads them in a terminal: messages, each command and its
//! output, edits as diffs, status changes and errors in words; coloured when the output is a
//! terminal (and `NO_COLOR` is unset). `--json` prints the API's own JSON instead, one event a
//! line.

use serde_json::Value;

/// How events are printed.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub color: bool,
    pub json: bool,
    /// The transcript goes to standard error (standard output holds a result for scripts).
    pub stderr: bool,
}

impl Style {
    /// Colours when stdout is a terminal and `NO_COLOR` is not set.
    pub fn detect(json: bool) -> Self {
        use std::io::IsTerminal;
        Self { color: !json && std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(), json, stderr: false }
    }

    /// Writes `text` where the transcript goes, and flushes it.
    pub fn out(&self, text: &str) {
        use std::io::Write;
        if self.stderr {
            let mut e = std::io::stderr();
            let _ = e.write_all(text.as_bytes()).and_then(|()| e.flush());
        } else {
            let mut o = std::io::stdout();
            let _ = o.write_all(text.as_bytes()).and_then(|()| o.flush());
        }
    }

    pub fn paint(&self, code: &str, text: &str) -> String {
        if self.color { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }
}

/// Most lines of one output shown; the rest is counted.
const MAX_OUTPUT_LINES: usize = 40;

fn abridge(text: &str, max_lines: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= max_lines {
        return text.trim_end().to_owned();
    }
    let head = &lines[..max_lines / 2];
    let tail = &lines[lines.len() - max_lines / 2..];
    format!("{}\n... {} more lines ...\n{}", head.join("\n"), lines.len() - max_lines, tail.join("\n"))
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
}

/// A file edit as a diff: removed lines, added lines.
fn edit_diff(style: &Style, args: &Value) -> String {
    let path = args["path"].as_str().unwrap_or("?");
    let mut out = vec![style.paint("1", &format!("✎ {} {path}", args["command"].as_str().unwrap_or("edit")))];
    let lines = |field: &str, sign: &str, code: &str, out: &mut Vec<String>| {
        if let Some(text) = args[field].as_str() {
            for l in abridge(text, MAX_OUTPUT_LINES).lines() {
                out.push(style.paint(code, &format!("{sign} {l}")));
            }
        }
    };
    lines("old_str", "-", "31", &mut out);
    lines("new_str", "+", "32", &mut out);
    lines("file_text", "+", "32", &mut out);
    out.join("\n")
}

/// The text of one event, or `None` for events not worth a line (LLM call records, titles).
pub fn event(style: &Style, ev: &Value) -> Option<String> {
    if style.json {
        return Some(ev.to_string());
    }
    let s = |k: &str| ev[k].as_str().unwrap_or_default();
    Some(match s("kind") {
        "user_message" => format!("{} {}", style.paint("1;34", "you ›"), s("text")),
        "agent_message" => format!("{} {}", style.paint("1;35", "agent ›"), s("text")),
        "action" => {
            let args = &ev["arguments"];
            let risk = match ev["security_risk"].as_str() {
                Some("high") => style.paint("1;31", " [high risk]"),
                _ => String::new(),
            };
            let line = match s("tool") {
                "terminal" => style.paint("36", &format!("$ {}", args["command"].as_str().unwrap_or_default())),
                "file_editor" if args["command"] == "view" => style.paint("36", &format!("view {}", args["path"].as_str().unwrap_or("?"))),
                "file_editor" => edit_diff(style, args),
                "think" => style.paint("2", &format!("(thinking) {}", args["thought"].as_str().unwrap_or_default())),
                // The plan it sets is shown from its `task_list` event.
                "finish" | "task_tracker" => return None,
                other => style.paint("36", &format!("{other} {args}")),
            };
            match ev["thought"].as_str() {
                Some(t) => format!("{}\n{line}{risk}", style.paint("2", t)),
                None => format!("{line}{risk}"),
            }
        }
        "observation" => match s("tool") {
            // (A finish that was sent back shows why.)
            "think" => return None,
            "finish" if ev["is_error"] != true => return None,
            "task_tracker" if ev["is_error"] != true => return None,
            "file_editor" if ev["is_error"] != true => style.paint("2", &indent(&abridge(s("content"), 8))),
            _ => {
                let text = indent(&abridge(s("content"), MAX_OUTPUT_LINES));
                if ev["is_error"] == true { style.paint("31", &text) } else { style.paint("2", &text) }
            }
        },
        "action_rejected" => style.paint("33", &format!("✗ {} rejected: {}", s("tool"), s("reason"))),
        "agent_error" => style.paint("1;31", &format!("error ({}): {}", s("code"), s("message"))),
        "execution_status" => {
            let reason = ev["reason"].as_str().map(|r| format!(" ({r})")).unwrap_or_default();
            style.paint("2;3", &format!("[{}{reason}]", s("status")))
        }
        "condensation" => style.paint("2", &format!("[history condensed: {} → {} tokens]", ev["tokens_before"], ev["tokens_after"])),
        "skill_activated" => style.paint("2", &format!("[skill {} activated by “{}”]", s("name"), s("trigger"))),
        "confirmation_policy" => style.paint("2", &format!("[confirmation policy: {}]", s("policy"))),
        "conversation_started" => style.paint("2", &format!("[started in {} with {}]", s("workspace"), s("model"))),
        "task_list" => plan(style, &ev["items"]),
        "pull_request_opened" => style.paint("1;32", &format!("[pull request #{} opened: {}]", ev["number"], s("url"))),
        "sub_conversations_started" => {
            let children = ev["children"].as_array().map(Vec::as_slice).unwrap_or_default();
            let mut out = style.paint("1", &format!("[{} helper{} started]", children.len(), if children.len() == 1 { "" } else { "s" }));
            for c in children {
                out.push_str(&format!(
                    "\n  {} ({})",
                    c["title"].as_str().unwrap_or_default(),
                    c["conversation_id"].as_str().unwrap_or_default()
                ));
            }
            out
        }
        "sub_conversation_ended" => {
            style.paint("2", &format!("[helper {} ended, {}: {}]", s("conversation_id"), s("status"), s("message")))
        }
        "verification" => {
            let verdict = if ev["passed"] == true { "passed" } else { "failed" };
            let line = format!("[check {} (attempt {}) `{}`: {verdict}, score {}]", s("check"), ev["attempt"], s("subject"), ev["score"]);
            if ev["passed"] == true { style.paint("32", &line) } else { style.paint("33", &line) }
        }
        "result" => style.paint("1", &format!("result: {}", ev["result"])),
        "hook" => {
            let code = ev["exit_code"].as_i64().map_or("no exit code".into(), |c| format!("exit {c}"));
            let verdict = if ev["blocked"] == true { ", blocked" } else { "" };
            let stderr = s("stderr").trim();
            let said = if stderr.is_empty() { String::new() } else { format!(": {stderr}") };
            let line = format!("[hook {} `{}`: {code}{verdict}{said}]", s("event"), s("command"));
            if ev["blocked"] == true { style.paint("33", &line) } else { style.paint("2", &line) }
        }
        _ => return None,
    })
}

/// The agent's plan (a `task_list`'s `items`), a task a line: `[x]` done, `[~]` in progress.
pub fn plan(style: &Style, items: &Value) -> String {
    let items = items.as_array().map(Vec::as_slice).unwrap_or_default();
    let done = items.iter().filter(|t| t["status"] == "done").count();
    let mut out = style.paint("1", &format!("plan ({done} of {} done)", items.len()));
    for t in items {
        let mark = match t["status"].as_str() {
            Some("done") => "[x]",
            Some("in_progress") => "[~]",
            _ => "[ ]",
        };
        out.push_str(&format!("\n  {mark} {}", t["title"].as_str().unwrap_or_default()));
        if let Some(notes) = t["notes"].as_str().filter(|n| !n.is_empty()) {
            out.push_str(&style.paint("2", &format!("\n      {}", notes.replace('\n', "\n      "))));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_read_as_a_transcript() {
        let plain = Style { color: false, json: false, stderr: false };
        let cmd = json!({"kind": "action", "tool": "terminal", "arguments": {"command": "ls"}, "security_risk": "high"});
        assert_eq!(event(&plain, &cmd).unwrap(), "$ ls [high risk]");
        let edit = json!({"kind": "action", "tool": "file_editor", "arguments": {"command": "str_replace", "path": "a.py", "old_str": "x = 1", "new_str": "x = 2"}});
        assert_eq!(event(&plain, &edit).unwrap(), "✎ str_replace a.py\n- x = 1\n+ x = 2");
        let long: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let out = event(&plain, &json!({"kind": "observation", "tool": "terminal", "content": long})).unwrap();
        assert!(out.contains("... 60 more lines ...") && out.contains("  line 99"), "{out}");
        assert!(event(&plain, &json!({"kind": "llm_call"})).is_none());
        let plan = json!({"kind": "task_list", "items": [{"title": "Read", "notes": "", "status": "done"}, {"title": "Fix", "notes": "a.rs", "status": "in_progress"}]});
        assert_eq!(event(&plain, &plan).unwrap(), "plan (1 of 2 done)\n  [x] Read\n  [~] Fix\n      a.rs");
        let helpers = json!({"kind": "sub_conversations_started", "children": [{"title": "Tests", "conversation_id": "c1"}]});
        assert_eq!(event(&plain, &helpers).unwrap(), "[1 helper started]\n  Tests (c1)");
        let json_style = Style { color: false, json: true, stderr: false };
        assert_eq!(event(&json_style, &json!({"kind": "llm_call", "seq": 3})).unwrap(), r#"{"kind":"llm_call","seq":3}"#);
        let red = Style { color: true, json: false, stderr: false };
        assert!(event(&red, &json!({"kind": "agent_error", "code": "x", "message": "y"})).unwrap().starts_with("\x1b[1;31m"));
    }
}
