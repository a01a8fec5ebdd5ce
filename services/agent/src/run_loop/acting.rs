//! The tool calls of one answer, run and recorded. Calls that only read (`glob`, `grep`,
//! `file_editor view`, `think`, `load_skill`, an MCP tool its server marks `readOnlyHint`) run
//! at once when they come together; any other call runs alone, after what came before it and
//! before what comes after. Observations are recorded in the calls' order whatever order the
//! calls end in, so the log reads as if they ran one by one.

use std::time::{Duration, Instant};

use base64::Engine;
use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::event::{EventBody, EventSource};
use serde_json::{Value, json};

use super::hooking::HookSubject;
use super::{Call, Run, RunOutcome, Setting, pull_request_opened, wants};
use crate::stuck;
use crate::tools::hooks::Moment;
use crate::tools::{self, ToolOutcome};

use super::verifying::Decision;

/// Whether `call` only reads: it may overlap other such calls.
fn reads_only(setting: &Setting, call: &Call) -> bool {
    let Ok(args) = &call.parsed else { return false };
    match call.name.as_str() {
        "glob" | "grep" | "think" | "load_skill" => true,
        "file_editor" => args.get("command").and_then(Value::as_str) == Some("view"),
        name => setting.mcp.reads_only(name),
    }
}

/// What happened to a call its hooks let through.
enum Ran {
    Done(ToolOutcome),
    /// The run ends here (paused, or the log failed).
    Ended(RunOutcome),
}

impl Run {
    /// What follows a recorded result: the `post_tool_use` hooks (`post`: what they read, when
    /// one runs), then whether the agent repeats itself. `Some` if the run ends here.
    async fn after_result(
        &self,
        exec: &ExecutorClient,
        setting: &Setting,
        call: &Call,
        post: Option<Value>,
        steps: &[stuck::Step],
        thresholds: stuck::Thresholds,
    ) -> Option<RunOutcome> {
        if let Some(input) = post {
            let about = HookSubject { tool: Some(&call.name), tool_call_id: Some(&call.id), message_seq: None };
            if self.hooks_at(exec, setting, Moment::PostToolUse, about, input).await.is_err() {
                return Some(RunOutcome::Failed);
            }
        }
        match stuck::detect(steps, thresholds) {
            Some(pattern) => Some(self.stuck(pattern).await),
            None => None,
        }
    }

    /// Keeps an image a tool made (a PNG in base64) in the conversation's images; its id, or
    /// `None` if it could not be kept (the observation then names none).
    async fn keep_image(&self, png_base64: &str) -> Option<String> {
        let conversation = self.log.lock().await.conversation();
        let png = base64::engine::general_purpose::STANDARD.decode(png_base64).ok()?;
        match halyard_platform::images::put(&self.ctx.js, conversation, &png).await {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::warn!(%conversation, error = %e, "cannot keep a tool's image");
                None
            }
        }
    }

    /// Runs the tool calls of one answer and records their observations; `Some` if the run
    /// ends here (finished, paused, stuck, or the log failed). The tools' time is added to
    /// `elsewhere`.
    pub(super) async fn execute(
        &self,
        exec: &ExecutorClient,
        setting: &Setting,
        calls: Vec<Call>,
        steps: &mut Vec<stuck::Step>,
        thresholds: stuck::Thresholds,
        elsewhere: &mut Duration,
    ) -> Option<RunOutcome> {
        let mut at = 0;
        while at < calls.len() {
            if self.cancelled() {
                return Some(RunOutcome::Paused);
            }
            // Nothing runs in the sandbox (hooks included) while a checkpoint is being taken.
            self.checkpoint_settled().await;
            let together = match reads_only(setting, &calls[at]) {
                true => calls[at..].iter().take_while(|c| reads_only(setting, c)).count(),
                false => 1,
            };
            let batch = &calls[at..at + together];
            at += together;
            // The repository's pre_tool_use hooks judge each call, in order, before any runs.
            let mut admitted = Vec::with_capacity(batch.len());
            for call in batch {
                match self.admit(exec, setting, call).await {
                    Ok(true) => admitted.push(call),
                    Ok(false) => {}
                    Err(()) => return Some(RunOutcome::Failed),
                }
            }
            let ran = futures::future::join_all(admitted.iter().map(|call| self.run_call(exec, setting, call))).await;
            // They overlapped: the longest is the time they took.
            *elsewhere += ran.iter().map(|(_, took)| *took).max().unwrap_or_default();
            for (call, (ran, _)) in admitted.into_iter().zip(ran) {
                let outcome = match ran {
                    Ran::Done(outcome) => outcome,
                    Ran::Ended(end) => return Some(end),
                };
                if let Some(end) = self.record(exec, setting, call, outcome, steps, thresholds).await {
                    return Some(end);
                }
            }
        }
        if self.interrupt_requested() {
            return Some(self.interrupted().await);
        }
        None
    }

    /// Puts `call` to the repository's `pre_tool_use` hooks: `Ok(false)` if one refused it (the
    /// refusal is recorded, and the model reads why), `Err` if the log failed.
    async fn admit(&self, exec: &ExecutorClient, setting: &Setting, call: &Call) -> Result<bool, ()> {
        let name = call.name.as_str();
        let pre = name != "finish" && !self.interrupt_requested() && wants(setting, Moment::PreToolUse, name);
        let (Ok(args), true) = (&call.parsed, pre) else { return Ok(true) };
        let about = HookSubject { tool: Some(name), tool_call_id: Some(&call.id), message_seq: None };
        let input = json!({"tool_name": name, "tool_input": args});
        match self.hooks_at(exec, setting, Moment::PreToolUse, about, input).await? {
            None => Ok(true),
            Some(reason) => {
                let reason = format!("a hook refused it: {reason}");
                let body = EventBody::ActionRejected { tool_call_id: call.id.clone(), tool: name.to_owned(), reason };
                if self.append(EventSource::Environment, body).await { Ok(false) } else { Err(()) }
            }
        }
    }

    /// Runs one call: its outcome, and how long the sandbox or an MCP server took with it.
    async fn run_call(&self, exec: &ExecutorClient, setting: &Setting, call: &Call) -> (Ran, Duration) {
        let name = call.name.as_str();
        let outcome = match &call.parsed {
            // An interrupt stops what is left of this answer too: each call still gets its
            // observation, so the model sees a complete step next time.
            _ if self.interrupt_requested() => {
                ToolOutcome::Observation { content: "Not run: the user interrupted the agent.".into(), exit_code: None, is_error: true }
            }
            Err(msg) => ToolOutcome::Observation { content: msg.clone(), exit_code: None, is_error: true },
            Ok(args) if name == "load_skill" => tools::load_skill(&setting.skills, args),
            Ok(args) if name == "task_tracker" => self.track(args).await,
            Ok(args) if name == "delegate" => match self.delegate(&call.id, args).await {
                Ok(outcome) => outcome,
                Err(end) => return (Ran::Ended(end), Duration::ZERO),
            },
            Ok(args) => {
                let started = Instant::now();
                let ran = self.in_sandbox(exec, setting, name, args).await;
                return (ran, started.elapsed());
            }
        };
        (Ran::Done(outcome), Duration::ZERO)
    }

    /// Runs a call of the sandbox's tools or an MCP server's, until it ends, the run is paused,
    /// or the user interrupts it (the sandbox's command is stopped, and what it printed is its
    /// result).
    async fn in_sandbox(&self, exec: &ExecutorClient, setting: &Setting, name: &str, args: &Value) -> Ran {
        let agent = &self.ctx.config.agent;
        let timeout = if name == tools::kernel::TOOL { agent.cell_timeout_secs } else { agent.command_timeout_secs };
        let mut running: std::pin::Pin<Box<dyn std::future::Future<Output = ToolOutcome> + Send + '_>> = if setting.mcp.offers(name) {
            Box::pin(setting.mcp.call(name, args, Duration::from_secs_f64(timeout.max(1.0))))
        } else {
            Box::pin(tools::execute(exec, name, args, &self.env, timeout, setting.session.as_deref()))
        };
        tokio::select! {
            _ = Self::until_set(self.cancel.clone()) => Ran::Ended(RunOutcome::Paused),
            o = &mut running => Ran::Done(o),
            _ = Self::until_set(self.interrupt.clone()) => {
                if let Err(e) = exec.interrupt(setting.session.as_deref()).await {
                    tracing::warn!(error = %e, "cannot interrupt the sandbox's command");
                }
                Ran::Done(match tokio::time::timeout(Duration::from_secs(10), &mut running).await {
                    Ok(ToolOutcome::Observation { content, exit_code, is_error }) => ToolOutcome::Observation {
                        content: format!("{content}\n[Interrupted by the user.]"),
                        exit_code,
                        is_error,
                    },
                    Ok(other) => other,
                    Err(_) => ToolOutcome::Observation {
                        content: "[Interrupted by the user; the command did not stop within 10 s.]".into(),
                        exit_code: None,
                        is_error: true,
                    },
                })
            }
        }
    }

    /// Records a call's outcome: its observation (with the workspace's checkpoint after it, a
    /// pull request it opened, and the `post_tool_use` hooks), or the end of the task. `Some` if
    /// the run ends here.
    async fn record(
        &self,
        exec: &ExecutorClient,
        setting: &Setting,
        call: &Call,
        outcome: ToolOutcome,
        steps: &mut Vec<stuck::Step>,
        thresholds: stuck::Thresholds,
    ) -> Option<RunOutcome> {
        let name = call.name.clone();
        match outcome {
            ToolOutcome::Observation { content, exit_code, is_error } => {
                steps.push(stuck::Step {
                    action: format!("{name} {}", call.raw),
                    tool: name.clone(),
                    observation: content.clone(),
                    is_error: is_error || exit_code.is_some_and(|c| c != 0),
                });
                let changes_nothing = reads_only(setting, call) || name == "task_tracker";
                let args = call.parsed.as_ref().unwrap_or(&Value::Null);
                let opened = if is_error { None } else { pull_request_opened(&name, args, &content) };
                // What the post_tool_use hooks read, made only when one runs.
                let post = wants(setting, Moment::PostToolUse, &name).then(|| {
                    let response = json!({"content": content, "exit_code": exit_code, "is_error": is_error});
                    json!({"tool_name": name, "tool_input": args, "tool_response": response})
                });
                let body = EventBody::observation(call.id.clone(), name.clone(), content, exit_code, is_error);
                let seq = self.append_seq(EventSource::Environment, body).await?;
                // What the action left in the workspace, kept under its observation's seq.
                if !changes_nothing && setting.checkpoints {
                    self.checkpoint_behind(exec, seq).await;
                }
                // A pull request opened with Halyard's own tool is the conversation's to remember.
                if let Some(opened) = opened {
                    if !self.append(EventSource::System, opened).await {
                        return Some(RunOutcome::Failed);
                    }
                }
                self.after_result(exec, setting, call, post, steps, thresholds).await
            }
            ToolOutcome::Rich(rich) => {
                steps.push(stuck::Step {
                    action: format!("{name} {}", call.raw),
                    tool: name.clone(),
                    observation: rich.content.clone(),
                    is_error: rich.is_error,
                });
                let url = rich.url.clone();
                let (content, screenshot, images, shown) =
                    self.keep_images(rich.content, rich.url.is_some(), rich.show, rich.screenshot_png, rich.images).await;
                let args = call.parsed.as_ref().unwrap_or(&Value::Null);
                let post = wants(setting, Moment::PostToolUse, &name).then(|| {
                    let response = json!({"content": content, "url": url, "is_error": rich.is_error});
                    json!({"tool_name": name, "tool_input": args, "tool_response": response})
                });
                let body = EventBody::Observation {
                    tool_call_id: call.id.clone(),
                    tool: name.clone(),
                    content,
                    exit_code: None,
                    is_error: rich.is_error,
                    url,
                    screenshot_id: screenshot.map(|(id, _)| id),
                    image_ids: images.into_iter().map(|(id, _)| id).collect(),
                };
                let seq = self.append_seq(EventSource::Environment, body).await?;
                // The model sees what it was to see with this result (the newest only: older
                // images leave its prompt).
                if !shown.is_empty() {
                    let parts = shown.into_iter().map(|data| halyard_platform::llm::ImagePart { media_type: "image/png".into(), data });
                    self.log.lock().await.history.show_images(seq, parts.collect());
                }
                // A cell may have changed the workspace.
                if name == crate::tools::kernel::TOOL && setting.checkpoints {
                    self.checkpoint_behind(exec, seq).await;
                }
                self.after_result(exec, setting, call, post, steps, thresholds).await
            }
            ToolOutcome::Finish { message, result } => {
                // The repository's stop hooks may send the agent back to work, then the
                // conversation's checks.
                let about = HookSubject { tool: Some("finish"), tool_call_id: Some(&call.id), message_seq: None };
                let (content, is_error, finished) =
                    match self.hooks_at(exec, setting, Moment::Stop, about, json!({"message": message})).await {
                        Ok(None) => (message.clone(), false, true),
                        Ok(Some(reason)) => (format!("You cannot finish yet: a repository hook said: {reason}"), true, false),
                        Err(()) => return Some(RunOutcome::Failed),
                    };
                let (content, is_error, result) = match (&setting.checks, finished) {
                    (Some(checks), true) => match self.verify(exec, checks, &message, result).await {
                        Ok(Decision::Finish(result)) => (content, is_error, result),
                        Ok(Decision::Again(why)) => (why, true, None),
                        Err(()) => return Some(RunOutcome::Failed),
                    },
                    _ => (content, is_error, None),
                };
                let body = EventBody::observation(call.id.clone(), name, content, None, is_error);
                if !self.append(EventSource::Environment, body).await {
                    return Some(RunOutcome::Failed);
                }
                if !finished || is_error {
                    return None;
                }
                if let Some(result) = result {
                    if !self.append(EventSource::Agent, EventBody::Result { result }).await {
                        return Some(RunOutcome::Failed);
                    }
                }
                self.append(EventSource::Agent, EventBody::AgentMessage { text: message }).await;
                self.status(halyard_protocol::event::ExecutionStatus::Finished, None).await;
                Some(RunOutcome::Finished)
            }
        }
    }

    /// A rich result's images kept outside the log (a browser step's screenshot, a cell's
    /// images) by id, and what of them the model is shown with the result (none when it does
    /// not read images; the content then says so, as it says when no screenshot was taken).
    async fn keep_images(
        &self,
        mut content: String,
        has_url: bool,
        show: bool,
        screenshot_png: Option<String>,
        pngs: Vec<String>,
    ) -> (String, Option<(String, String)>, Vec<(String, String)>, Vec<String>) {
        let screenshot = match screenshot_png {
            Some(png) => self.keep_image(&png).await.map(|id| (id, png)),
            None => None,
        };
        let mut images = Vec::new();
        for png in pngs {
            if let Some(id) = self.keep_image(&png).await {
                images.push((id, png));
            }
        }
        let mut shown: Vec<String> = match (show, &screenshot) {
            (true, Some((_, png))) => vec![png.clone()],
            (true, None) if has_url => {
                content.push_str("\n[No screenshot could be taken.]");
                Vec::new()
            }
            _ => Vec::new(),
        };
        if show {
            shown.extend(images.iter().map(|(_, png)| png.clone()));
        }
        if !shown.is_empty() && !self.vision {
            content.push_str("\n[An image was made, but this model does not read images.]");
            shown.clear();
        }
        (content, screenshot, images, shown)
    }
}
