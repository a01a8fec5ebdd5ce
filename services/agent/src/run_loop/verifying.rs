//! Checking the agent's work when it finishes (a start's `result_schema` and `verify`): its
//! `result` must match the schema (else it is told why and tries again, as any wrong tool call
//! is), then each check runs: a command in the workspace (passes when it exits 0) or an LLM
//! judge that scores the work against a rubric (its verdict schema-checked). Each check is a
//! `verification` event; a failing attempt sends the agent back with what the checks said,
//! until `max_verify_attempts` (for each of the user's turns; the attempts are numbered through
//! the conversation), after which the last verdict stands and the run finishes.
//!
//! Commands run in a shell session of their own (`verify`), so the agent's shell keeps its
//! directory and variables; they get the owner's secrets as the agent's commands do, and what
//! they print is masked like any event. The judge sees the task, the agent's last message, its
//! result and the workspace's diff, masked; its call is an `llm_call` event and counts against
//! the conversation's budget.

use std::time::{Duration, Instant};

use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::llm::ChatMessage;
use halyard_protocol::event::{Check, Checks, EventBody, EventSource, Judge};
use halyard_protocol::executor::ExecRequest;
use serde_json::{Value, json};

use super::{Run, llm_call};

/// What a command check's output keeps (its end).
const OUTPUT_BYTES: usize = 4000;
/// What of the workspace's diff the judge is shown.
const DIFF_BYTES: usize = 24_000;
/// How long a command check runs unless it says.
const COMMAND_TIMEOUT_SECS: u64 = 600;
/// The shell session checks run in.
const SESSION: &str = "verify";

/// What the checks decided.
pub(super) enum Decision {
    /// The agent may finish (its result, if the conversation has a schema).
    Finish(Option<Value>),
    /// It goes back to work with this (the tool result of its `finish`).
    Again(String),
}

/// One check's outcome.
struct Outcome {
    check: &'static str,
    subject: String,
    passed: bool,
    score: f64,
    output: String,
}

impl Run {
    /// Checks the agent's finish (`message`, `result`) against `checks`. `Err` if the log failed.
    pub(super) async fn verify(
        &self,
        exec: &ExecutorClient,
        checks: &Checks,
        message: &str,
        result: Option<Value>,
    ) -> Result<Decision, ()> {
        if let Some(schema) = &checks.result_schema {
            let Some(result) = result.as_ref() else {
                return Ok(Decision::Again("You cannot finish yet: call `finish` with a `result` that matches its schema.".into()));
            };
            if let Err(errors) = halyard_platform::results::validate(schema, result) {
                return Ok(Decision::Again(format!(
                    "You cannot finish yet: your `result` does not match its schema:\n- {}\nCall `finish` again with a `result` that does.",
                    errors.join("\n- ")
                )));
            }
        }
        if checks.verify.is_empty() {
            return Ok(Decision::Finish(result));
        }
        let (attempt, this_turn) = {
            let log = self.log.lock().await;
            let h = &log.history;
            (h.verified_attempts + 1, h.verified_attempts + 1 - h.verified_before_turn)
        };
        let mut outcomes = Vec::new();
        for check in &checks.verify {
            outcomes.push(self.check(exec, check, message, result.as_ref()).await?);
        }
        let passed = outcomes.iter().all(|o| o.passed);
        let again = !passed && this_turn < checks.attempts();
        let last = outcomes.len() - 1;
        let mut feedback = Vec::new();
        for (i, o) in outcomes.into_iter().enumerate() {
            if !o.passed {
                feedback.push(format!("- {} `{}` did not pass (score {:.2}):\n{}", o.check, o.subject, o.score, o.output));
            }
            let body = EventBody::Verification {
                attempt,
                check: o.check.into(),
                subject: o.subject,
                passed: o.passed,
                score: o.score,
                output: o.output,
                sent_back: again && i == last,
            };
            if !self.append(EventSource::System, body).await {
                return Err(());
            }
        }
        if again {
            return Ok(Decision::Again(format!(
                "You cannot finish yet: the work was checked (attempt {this_turn} of {}) and did not pass:\n{}\nFix it, then call \
                 `finish` again.",
                checks.attempts(),
                feedback.join("\n")
            )));
        }
        Ok(Decision::Finish(result))
    }

    async fn check(&self, exec: &ExecutorClient, check: &Check, message: &str, result: Option<&Value>) -> Result<Outcome, ()> {
        match (&check.command, &check.judge) {
            (Some(command), _) => Ok(self.command(exec, command, check.timeout_secs.unwrap_or(COMMAND_TIMEOUT_SECS)).await),
            (None, Some(judge)) => self.judge(exec, judge, message, result).await,
            // (The gateway refuses a check that is neither.)
            (None, None) => Ok(Outcome { check: "command", subject: String::new(), passed: true, score: 1.0, output: String::new() }),
        }
    }

    /// A command check: run in the workspace, in a shell of its own.
    async fn command(&self, exec: &ExecutorClient, command: &str, timeout: u64) -> Outcome {
        let request = ExecRequest {
            command: command.to_owned(),
            is_input: false,
            timeout_secs: Some(timeout as f64),
            env: Some(self.env.clone()),
            scoped: true,
            session: Some(SESSION.into()),
        };
        let (passed, output) = match exec.exec(&request).await {
            Ok(r) if r.still_running => {
                let _ = exec.interrupt(Some(SESSION)).await;
                (false, format!("{}\n[did not end within {timeout} s]", tail(&r.output)))
            }
            Ok(r) => (r.exit_code == Some(0), format!("{}\n[exit code {}]", tail(&r.output), r.exit_code.unwrap_or(-1))),
            Err(e) => (false, format!("the sandbox could not run it: {e}")),
        };
        Outcome { check: "command", subject: command.to_owned(), passed, score: if passed { 1.0 } else { 0.0 }, output }
    }

    /// A judge check: the LLM of its profile scores the work against its rubric.
    async fn judge(&self, exec: &ExecutorClient, judge: &Judge, message: &str, result: Option<&Value>) -> Result<Outcome, ()> {
        let threshold = judge.threshold.unwrap_or(0.5);
        let failed = |why: String| Outcome { check: "judge", subject: judge.rubric.clone(), passed: false, score: 0.0, output: why };
        let (owner, org, profile, task, redactor) = {
            let log = self.log.lock().await;
            let h = &log.history;
            let owner = h.started.as_ref().map(|s| s.owner.clone()).unwrap_or_else(|| halyard_protocol::UserId(String::new()));
            let org = h.started.as_ref().and_then(|s| s.org.clone());
            (owner, org, judge.llm_profile.clone().or_else(|| h.llm_profile.clone()), h.first_user_text(), log.redactor())
        };
        // An organization's profile (`@org/name`, its key sealed for the organization) judges only
        // that organization's conversations: a check named in a user's own environment must not
        // spend another organization's key.
        if let Some((named, _)) = profile.as_deref().and_then(halyard_protocol::user::parse_org_profile) {
            if org.as_deref() != Some(named) {
                return Ok(failed(format!("the judge's LLM profile is organization {named}'s, and this conversation is not in it")));
            }
        }
        let llm = match crate::user::profile(&self.ctx, &owner, profile.as_deref()).await {
            Ok(p) => p.llm,
            Err(e) => return Ok(failed(format!("the judge's LLM profile cannot be used: {e}"))),
        };
        let diff = diff(exec).await;
        let prompt = format!(
            "Judge an AI coding agent's work against this rubric.\n\n# Rubric\n{}\n\n# The task\n{}\n\n# The agent's final message\n{}\n\n\
             # Its result\n{}\n\n# What it changed in the workspace\n{}\n\nAnswer with one JSON object and nothing else: \
             {{\"score\": <a number from 0 to 1>, \"reasons\": \"<why, briefly>\"}}.",
            judge.rubric,
            task,
            message,
            result.map_or_else(|| "(none)".to_owned(), Value::to_string),
            diff,
        );
        let messages = vec![
            ChatMessage::text("system", "You are a strict reviewer of code changes. You answer in JSON only."),
            ChatMessage::text("user", redactor.redact(&prompt)),
        ];
        let asked = Instant::now();
        let answer = match llm.complete(&messages, &[], None).await {
            Ok(a) => a,
            Err(e) => return Ok(failed(format!("the judge's LLM call failed: {e}"))),
        };
        if !self.append_llm_call(llm_call(answer.by, &messages, &answer.completion, asked.elapsed())).await {
            return Err(());
        }
        let text = answer.completion.content.unwrap_or_default();
        Ok(match verdict(&text) {
            Ok((score, reasons)) => {
                Outcome { check: "judge", subject: judge.rubric.clone(), passed: score >= threshold, score, output: reasons }
            }
            Err(why) => failed(format!("the judge's answer was not a verdict ({why}): {}", tail(&text))),
        })
    }
}

/// The judge's verdict in `text`: its score and reasons, checked against the verdict's schema.
fn verdict(text: &str) -> Result<(f64, String), String> {
    let start = text.find('{').ok_or("no JSON object")?;
    let end = text.rfind('}').ok_or("no JSON object")?;
    let value: Value = serde_json::from_str(text.get(start..=end).unwrap_or_default()).map_err(|e| e.to_string())?;
    let schema = json!({
        "type": "object",
        "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}, "reasons": {"type": "string"}},
        "required": ["score", "reasons"]
    });
    halyard_platform::results::validate(&schema, &value).map_err(|e| e.join("; "))?;
    Ok((value["score"].as_f64().unwrap_or(0.0), value["reasons"].as_str().unwrap_or_default().to_owned()))
}

/// What the agent changed in the workspace (the executor's `/changes`: a git repository's diff,
/// or the editor's record), or, in a workspace that is not a repository, its files; at most
/// [`DIFF_BYTES`].
async fn diff(exec: &ExecutorClient) -> String {
    let mut text = match tokio::time::timeout(Duration::from_secs(60), exec.changes()).await {
        Ok(Ok(c)) => c.files.iter().map(|f| format!("{} {}\n{}", f.status, f.path, f.diff)).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    };
    if text.trim().is_empty() {
        let request = ExecRequest {
            command: "find . -type f -not -path './.git/*' | sort | head -200".into(),
            is_input: false,
            timeout_secs: Some(30.0),
            env: None,
            scoped: true,
            session: Some(SESSION.into()),
        };
        text = match exec.exec(&request).await {
            Ok(r) if !r.output.trim().is_empty() => format!("(no diff to show; the workspace's files:)\n{}", r.output),
            _ => "(nothing to show)".into(),
        };
    }
    if text.len() > DIFF_BYTES {
        let mut cut = DIFF_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n[cut]");
    }
    text
}

/// The end of `s`, at most [`OUTPUT_BYTES`].
fn tail(s: &str) -> String {
    let mut start = s.len().saturating_sub(OUTPUT_BYTES);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_is_read_and_schema_checked() {
        assert_eq!(verdict("Sure: {\"score\": 0.8, \"reasons\": \"tests added\"}"), Ok((0.8, "tests added".into())));
        assert!(verdict("{\"score\": 3, \"reasons\": \"x\"}").is_err());
        assert!(verdict("{\"score\": 0.5}").is_err());
        assert!(verdict("no").is_err());
    }
}
