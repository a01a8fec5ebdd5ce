//! One run of the agent: from a user message (or the user's confirmation of waiting actions)
//! until the agent finishes, answers, fails, hits the iteration limit, is paused, or waits for
//! the user to confirm an action. Before each LLM call the history is condensed if the prompt
//! would pass the model's budget ([`crate::condense`]); a context-length error from the
//! provider condenses harder and tries again.

mod acting;
mod condensing;
mod delegating;
mod hooking;
mod setup;
pub mod streaming;
mod verifying;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::event::{EventBody, EventSource, ExecutionStatus};
use halyard_protocol::{EventId, TraceContext};
use tokio::sync::{Mutex, watch};

use crate::budget::{self, estimate_completion, estimate_tokens};
use crate::ctx::Ctx;
use crate::log::Log;
use crate::stuck;
use crate::tools::hooks::Moment;
use crate::tools::mcp::McpHub;
use crate::tools::{self, ToolOutcome, risk};
use halyard_platform::llm::fallback::{Link, LlmChain};
use halyard_platform::llm::{ChatMessage, Completion, LlmError, Usage};
use halyard_platform::tokens::TokenCounter;
use halyard_protocol::event::{Skill, SkillKind};
use serde_json::Value;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// `finish` was called.
    Finished,
    /// The agent answered without a tool call and waits for the user.
    AwaitingUser,
    /// An error ended the run (already recorded as an event).
    Failed,
    /// Pause was requested; the run stopped at a step boundary.
    Paused,
    /// Actions wait for the user's confirmation.
    AwaitingConfirmation,
    /// Another runner took the run over (this one stopped renewing its lease in time): it
    /// stopped without another word.
    LostLease,
}

impl RunOutcome {
    /// Its name as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Finished => "finished",
            Self::AwaitingUser => "awaiting_user",
            Self::Failed => "failed",
            Self::Paused => "paused",
            Self::AwaitingConfirmation => "awaiting_confirmation",
            Self::LostLease => "lost_lease",
        }
    }
}

/// The MCP servers a run may connect, by name.
pub(crate) type McpConfigs = (crate::user::McpConfigs, crate::tools::mcp::OrgServers);

/// What a run reads of its owner's configuration as it starts ([`Run::read_configuration`]).
struct Owned {
    profile: Result<crate::user::Profile, String>,
    secrets: Result<crate::user::Secrets, String>,
    settings: Result<halyard_protocol::user::UserSettings, String>,
    mcp: Result<McpConfigs, String>,
}

/// One tool call to run.
struct Call {
    id: String,
    name: String,
    /// The arguments as the model wrote them.
    raw: String,
    parsed: Result<Value, String>,
}

/// What a run reads once from the conversation.
struct Setting {
    conversation: halyard_protocol::ConversationId,
    workspace: String,
    skills: Vec<Skill>,
    counter: TokenCounter,
    tools: Vec<Value>,
    /// Tokens of the tools' definitions and the system prompt (both fixed for the run).
    fixed_tokens: u64,
    mcp: Arc<McpHub>,
    /// The workspace's repository hooks (none: no `.openhands/hooks.json`).
    hooks: Option<crate::tools::hooks::Hooks>,
    /// The sandbox's shell session the commands run in: a helper's own (its conversation id),
    /// else the main one.
    session: Option<String>,
    /// Whether the workspace is checkpointed after actions: a helper's workspace is its
    /// parent's, whose checkpoints (under the parent's event numbers) cover what it did.
    checkpoints: bool,
    /// What the agent's finish is checked against (none: it finishes when it says).
    checks: Option<halyard_protocol::event::Checks>,
}

/// Everything one run needs.
pub struct Run {
    pub ctx: Arc<Ctx>,
    pub log: Arc<Mutex<Log>>,
    pub cancel: watch::Receiver<bool>,
    /// Set by an interrupt: stop the running command now and end the run after this step.
    pub interrupt: watch::Receiver<bool>,
    pub trace: Option<TraceContext>,
    /// The log's last `seq` when the run last built the LLM's input: a user message after it
    /// was never seen by this run.
    pub read_upto: Arc<std::sync::atomic::AtomicU64>,
    /// The user confirmed the waiting actions: run them first.
    pub confirmed: bool,
    /// The LLM of the conversation's profile and its fallbacks (set when the run starts).
    pub llm: LlmChain,
    /// The owner's secrets, exported into the sandbox's shell (set when the run starts).
    pub env: BTreeMap<String, String>,
    /// The owner has a forge Halyard's own MCP tools act on (set when the run starts).
    pub has_forge: bool,
    /// LLM calls this run may make: the deployment's limit, or the owner's if lower.
    pub max_iterations: u32,
    /// The conversation's MCP connections (checked, and made again if stale, at run start).
    pub mcp: Arc<Mutex<Option<Arc<McpHub>>>>,
    /// The built-in tools offered, as the conversation's LLM profile says (set when the run
    /// starts).
    pub tool_set: halyard_protocol::user::ToolSet,
    /// The model reads images: the browser's screenshots it asks for are sent to it (set when
    /// the run starts).
    pub vision: bool,
    /// The checkpoint being taken behind the run, if one is ([`Self::checkpoint_behind`]).
    pub checkpointing: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The named agents of the conversation's plugins, which `delegate` hands tasks to (set
    /// when the run starts).
    pub helper_agents: Vec<halyard_protocol::system::HelperAgent>,
}

impl Run {
    pub(crate) async fn append(&self, source: EventSource, body: EventBody) -> bool {
        self.append_seq(source, body).await.is_some()
    }

    /// Appends an event; its seq, or `None` if the log failed (the run then ends).
    pub(crate) async fn append_seq(&self, source: EventSource, body: EventBody) -> Option<u64> {
        let mut log = self.log.lock().await;
        match log.append(EventId::new(), source, body, self.trace.clone()).await {
            Ok(ev) => Some(ev.seq),
            Err(e) => {
                tracing::error!(conversation_id = %log.conversation(), error = %e, "cannot append event; ending run");
                None
            }
        }
    }

    /// Appends an `llm_call` and, in an organization, adds its cost to the month's spending
    /// ([`crate::llm_calls::record`]).
    async fn append_llm_call(&self, body: EventBody) -> bool {
        crate::llm_calls::record(&self.ctx, &self.log, self.trace.clone(), body).await
    }

    /// The conversation's organization and owner, if it is in one.
    async fn org_and_owner(&self) -> Option<(String, halyard_protocol::UserId)> {
        let log = self.log.lock().await;
        let started = log.history.started.as_ref()?;
        Some((started.org.clone()?, started.owner.clone()))
    }

    /// Why the organization's budgets allow no further LLM call (`None`: they allow it, or
    /// the conversation is in no organization). A budget that cannot be read does not stop
    /// the run.
    pub(crate) async fn org_budget_refusal(&self) -> Option<String> {
        let (org, owner) = self.org_and_owner().await?;
        match crate::org_budget::refused(&self.ctx, &org, &owner).await {
            Ok(why) => why,
            Err(e) => {
                tracing::warn!(org, error = %e, "the organization's budget could not be read; the run goes on");
                None
            }
        }
    }

    /// Why the conversation's owner may no longer use its organization's things (`None`: they
    /// may, or it is in no organization). Membership that cannot be read does not stop the run.
    pub(crate) async fn org_membership_refusal(&self) -> Option<String> {
        let (org, owner) = self.org_and_owner().await?;
        match crate::membership::refused(&self.ctx, &org, &owner).await {
            Ok(why) => why,
            Err(e) => {
                tracing::warn!(org, error = %e, "the organization's members could not be read; the run goes on");
                None
            }
        }
    }

    pub(crate) async fn status(&self, status: ExecutionStatus, reason: Option<String>) -> bool {
        // A status is where a client may look at (or fork from) the workspace's checkpoints:
        // the last one is taken by then.
        self.checkpoint_settled().await;
        self.append(EventSource::System, EventBody::ExecutionStatus { status, reason }).await
    }

    pub(crate) async fn fail(&self, code: &str, message: String) -> RunOutcome {
        self.append(EventSource::System, EventBody::AgentError { code: code.into(), message: message.clone() }).await;
        self.status(ExecutionStatus::Error, Some(message)).await;
        RunOutcome::Failed
    }

    /// Ends the run: the agent repeats itself (`pattern` says how).
    async fn stuck(&self, pattern: String) -> RunOutcome {
        let message = format!("The agent is stuck: {pattern}. Send a message to steer it.");
        self.append(EventSource::System, EventBody::AgentError { code: "stuck".into(), message }).await;
        self.status(ExecutionStatus::Stuck, Some(pattern)).await;
        RunOutcome::Failed
    }

    /// Ends the run because the user interrupted it.
    pub(crate) async fn interrupted(&self) -> RunOutcome {
        self.status(ExecutionStatus::Idle, Some("interrupted by the user".into())).await;
        RunOutcome::AwaitingUser
    }

    fn interrupt_requested(&self) -> bool {
        *self.interrupt.borrow()
    }

    fn cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Waits until `flag` (the cancel or the interrupt signal) is set.
    pub(crate) async fn until_set(mut flag: watch::Receiver<bool>) {
        let _ = flag.wait_for(|set| *set).await;
    }

    /// Keeps what the workspace holds now under `seq`, while the run goes on to its next LLM
    /// call (git's work overlaps the model's thinking instead of coming before it). Checkpoints
    /// are taken one at a time, in order, and nothing runs in the sandbox before the last one
    /// is taken ([`Self::checkpoint_settled`]): each still shows the workspace exactly as the
    /// action before it left it.
    pub(crate) async fn checkpoint_behind(&self, exec: &ExecutorClient, seq: u64) {
        self.checkpoint_settled().await;
        let (exec, ctx) = (exec.clone(), self.ctx.clone());
        let conversation = self.log.lock().await.conversation();
        let taking = tokio::spawn(async move { crate::checkpoints::take(&ctx, conversation, &exec, seq).await });
        *self.checkpointing.lock().unwrap_or_else(|p| p.into_inner()) = Some(taking);
    }

    /// Waits for the checkpoint being taken, if one is.
    pub(crate) async fn checkpoint_settled(&self) {
        let taking = self.checkpointing.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(taking) = taking {
            let _ = taking.await;
        }
    }

    /// The run's steps, once it is set up: LLM calls and the actions they ask for, until the
    /// agent finishes, waits, or the run ends otherwise.
    async fn work(&self, exec: &ExecutorClient, setting: &Setting, pending: Vec<crate::history::Pending>) -> RunOutcome {
        // Without a confirmation, what the log holds without a result was cut off by a pause:
        // its result is taken from the sandbox before the agent goes on.
        let (pending, cut_off) = if self.confirmed { (pending, Vec::new()) } else { (Vec::new(), pending) };
        if !cut_off.is_empty() {
            if let Err(outcome) = self.resume_cut_off(exec, setting, cut_off).await {
                return outcome;
            }
        }
        let max = self.max_iterations;
        let thresholds = stuck::Thresholds::from_config(&self.ctx.config.agent);
        let mut steps: Vec<stuck::Step> = Vec::new();
        if !pending.is_empty() {
            let calls = pending
                .into_iter()
                .map(|p| Call { parsed: tools::parse_arguments(&p.arguments), id: p.tool_call_id, name: p.tool, raw: p.arguments })
                .collect();
            let mut tools_time = Duration::ZERO;
            if let Some(outcome) = self.execute(exec, setting, calls, &mut steps, thresholds, &mut tools_time).await {
                return outcome;
            }
        }
        let mut context_retries = 0;
        for _ in 0..max {
            // The runner's own time in this step: all of it but the LLM calls and the tools.
            let step_started = std::time::Instant::now();
            let mut elsewhere = Duration::ZERO;
            if let Some(outcome) = self.before_step(exec, setting).await {
                return outcome;
            }
            if let Err(outcome) = self.condense(setting, false, &mut elsewhere).await {
                return outcome;
            }
            let (messages, estimate, over_budget, redactor) = {
                let log = self.log.lock().await;
                self.read_upto.store(log.history.last_seq, std::sync::atomic::Ordering::SeqCst);
                let messages = log.history.for_llm(&system_prompt(&log));
                let estimate = estimate_tokens(&messages);
                let over = budget::exceeded(&log.history, budget::next_prompt(&log.history, estimate), self.llm.primary().price());
                (messages, estimate, over, log.redactor())
            };
            if let Some(why) = over_budget {
                return self.fail("budget_exceeded", why).await;
            }
            self.log.lock().await.history.prompt_estimate_at_last_call = Some(estimate);
            let asked_at = std::time::Instant::now();
            // Its text goes to the people watching as it comes.
            let after_seq = self.read_upto.load(std::sync::atomic::Ordering::SeqCst);
            let (deltas, publishing) = streaming::publish(&self.ctx, setting.conversation, after_seq, redactor);
            let completion = tokio::select! {
                _ = Self::until_set(self.cancel.clone()) => return RunOutcome::Paused,
                _ = Self::until_set(self.interrupt.clone()) => return self.interrupted().await,
                c = self.llm.complete(&messages, &setting.tools, Some(&deltas)) => c,
            };
            drop(deltas);
            let _ = publishing.await;
            elsewhere += asked_at.elapsed();
            let (completion, by) = match completion {
                Ok(answer) => {
                    context_retries = 0;
                    (answer.completion, answer.by)
                }
                // The provider counts differently, or the window is smaller than configured:
                // condense harder and ask again.
                Err(LlmError::ContextWindow { body }) if context_retries < 2 => {
                    context_retries += 1;
                    tracing::warn!(body, "the prompt did not fit the model's context window; condensing");
                    if let Err(outcome) = self.condense(setting, true, &mut elsewhere).await {
                        return outcome;
                    }
                    continue;
                }
                Err(e) => return self.fail(e.code(), format!("The LLM call failed: {e}")).await,
            };
            if !self.append_llm_call(llm_call(by, &messages, &completion, asked_at.elapsed())).await {
                return RunOutcome::Failed;
            }
            // The model's reasoning comes before the answer it led to, which takes it back to
            // the model with it.
            if !completion.thinking.is_empty()
                && !self.append(EventSource::Agent, EventBody::Thinking { blocks: completion.thinking.clone() }).await
            {
                return RunOutcome::Failed;
            }
            if completion.tool_calls.is_empty() {
                let text = completion.content.unwrap_or_default();
                self.append(EventSource::Agent, EventBody::AgentMessage { text }).await;
                self.status(ExecutionStatus::Idle, None).await;
                return RunOutcome::AwaitingUser;
            }
            let calls = match self.record_actions(&completion, setting).await {
                Ok(calls) => calls,
                Err(outcome) => return outcome,
            };
            if let Some(outcome) = self.execute(exec, setting, calls, &mut steps, thresholds, &mut elsewhere).await {
                return outcome;
            }
            let own_us = step_started.elapsed().saturating_sub(elsewhere).as_micros() as u64;
            tracing::debug!(own_us, seq = self.read_upto.load(std::sync::atomic::Ordering::Relaxed), "agent step");
        }
        self.fail(
            "max_iterations",
            format!("The agent reached the limit of {max} iterations without finishing. Send a message to let it continue."),
        )
        .await
    }

    /// Why a step may not start: the run was paused or interrupted, a hook judged the prompt, or
    /// the organization's membership or budget (checked before any call of the step, condensing
    /// is one) refuses it.
    async fn before_step(&self, exec: &ExecutorClient, setting: &Setting) -> Option<RunOutcome> {
        if self.cancelled() {
            return Some(RunOutcome::Paused);
        }
        if self.interrupt_requested() {
            return Some(self.interrupted().await);
        }
        match self.judge_prompts(exec, setting).await {
            Ok(None) => {}
            Ok(Some(outcome)) => return Some(outcome),
            Err(()) => return Some(RunOutcome::Failed),
        }
        if let Some(why) = self.org_membership_refusal().await {
            return Some(self.fail("not_a_member", why).await);
        }
        if let Some(why) = self.org_budget_refusal().await {
            return Some(self.fail("budget_exhausted", why).await);
        }
        None
    }

    /// Records an answer's actions, all of them before any observation (so a replay rebuilds one
    /// assistant message with all its tool calls); the calls to make, or the run's end when one
    /// waits for the user's confirmation.
    async fn record_actions(&self, completion: &Completion, setting: &Setting) -> Result<Vec<Call>, RunOutcome> {
        let policy = self.log.lock().await.history.policy;
        let mut calls = Vec::new();
        let mut waiting = Vec::new();
        for (i, call) in completion.tool_calls.iter().enumerate() {
            let parsed = tools::parse_arguments(&call.function.arguments);
            let arguments = parsed.clone().unwrap_or_else(|_| Value::String(call.function.arguments.clone()));
            let name = call.function.name.clone();
            let security_risk = risk::assess(&name, parsed.as_ref().unwrap_or(&Value::Null), &setting.workspace);
            if risk::needs_confirmation(policy, &name, security_risk) {
                waiting.push(match security_risk {
                    Some(r) => format!("{name} ({} risk)", r.as_str()),
                    None => format!("{name} (risk not stated)"),
                });
            }
            let thought = if i == 0 { completion.content.clone().filter(|t| !t.trim().is_empty()) } else { None };
            let body = EventBody::Action { tool_call_id: call.id.clone(), tool: name.clone(), arguments, thought, security_risk };
            if !self.append(EventSource::Agent, body).await {
                return Err(RunOutcome::Failed);
            }
            calls.push(Call { id: call.id.clone(), name, raw: call.function.arguments.clone(), parsed });
        }
        if !waiting.is_empty() {
            let reason = format!("waiting for confirmation: {}", waiting.join(", "));
            self.status(ExecutionStatus::WaitingForConfirmation, Some(reason)).await;
            return Err(RunOutcome::AwaitingConfirmation);
        }
        Ok(calls)
    }

    /// Records the results of actions a pause cut off (see [`crate::conversation`]'s pause): a
    /// command the sandbox was running is waited for again (the pause froze it, the resume let it
    /// go on, and the executor keeps its output for whoever asks), and its output is its result;
    /// a command the sandbox no longer has, or another tool, gets a result that says what is
    /// known. A `delegate` call goes on watching its helpers (they were paused with it, or work
    /// on after the runner that watched them died). `Err` if the run ends here.
    async fn resume_cut_off(
        &self,
        exec: &ExecutorClient,
        setting: &Setting,
        cut_off: Vec<crate::history::Pending>,
    ) -> Result<(), RunOutcome> {
        for p in cut_off {
            if p.tool == "delegate" {
                let args = tools::parse_arguments(&p.arguments).unwrap_or_default();
                if let ToolOutcome::Observation { content, exit_code, is_error } = self.delegate(&p.tool_call_id, &args).await? {
                    let body = EventBody::observation(p.tool_call_id, p.tool, content, exit_code, is_error);
                    if !self.append(EventSource::Environment, body).await {
                        return Err(RunOutcome::Failed);
                    }
                }
                continue;
            }
            let waited = if p.tool == "terminal" {
                let args = tools::parse_arguments(&p.arguments).unwrap_or_default();
                let timeout = args.get("timeout").and_then(Value::as_f64).unwrap_or(self.ctx.config.agent.command_timeout_secs);
                let again = serde_json::json!({"command": "", "is_input": true, "timeout": timeout});
                let session = setting.session.as_deref();
                let waiting = tools::execute(exec, "terminal", &again, &self.env, timeout, session);
                tokio::pin!(waiting);
                let outcome = tokio::select! {
                    o = &mut waiting => o,
                    _ = Self::until_set(self.cancel.clone()) => return Err(RunOutcome::Paused),
                    // The command stops, and what it printed is its result; the run then ends
                    // as interrupted.
                    _ = Self::until_set(self.interrupt.clone()) => {
                        if let Err(e) = exec.interrupt(session).await {
                            tracing::warn!(error = %e, "cannot interrupt the sandbox's command");
                        }
                        waiting.await
                    }
                };
                match outcome {
                    ToolOutcome::Observation { is_error: true, .. } => None,
                    ToolOutcome::Observation { content, exit_code, is_error } => Some((content, exit_code, is_error)),
                    ToolOutcome::Rich(rich) => Some((rich.content, None, rich.is_error)),
                    ToolOutcome::Finish { .. } => None,
                }
            } else {
                None
            };
            let (content, exit_code, is_error) = waited.unwrap_or_else(|| {
                let what = if p.tool == "terminal" {
                    "the sandbox no longer has this command (it was restarted)"
                } else {
                    "this action was cut off"
                };
                (format!("[Paused while it ran, and {what}: it may or may not have taken effect; check before repeating it.]"), None, true)
            });
            let body = EventBody::observation(p.tool_call_id, p.tool, content, exit_code, is_error);
            if !self.append(EventSource::Environment, body).await {
                return Err(RunOutcome::Failed);
            }
        }
        Ok(())
    }

    /// `task_tracker`: a new plan is recorded (a `task_list` event, before the tool's result)
    /// as the conversation's state.
    async fn track(&self, args: &serde_json::Value) -> ToolOutcome {
        let current = self.log.lock().await.history.tasks.clone();
        let (outcome, plan) = tools::task_tracker(&current, args);
        if let Some(items) = plan {
            // A log that cannot take it fails the run at the observation's append.
            self.append(EventSource::Agent, EventBody::TaskList { items }).await;
        }
        outcome
    }
}

/// The record of one LLM call that `by` answered: the provider's token counts (estimated from
/// the text where it reports none), latency, and cost where its model has a price.
fn llm_call(by: &Link, messages: &[ChatMessage], completion: &Completion, latency: Duration) -> EventBody {
    let usage = completion.usage.unwrap_or_else(|| Usage {
        prompt_tokens: estimate_tokens(messages),
        completion_tokens: estimate_completion(completion),
        cached_tokens: 0,
    });
    crate::llm_calls::of(by, usage, latency)
}

fn system_prompt(log: &Log) -> String {
    let workspace = log.history.started.as_ref().map(|s| s.workspace.as_str()).unwrap_or("the workspace");
    let mut prompt = format!(
        "You are Halyard's coding agent. You work in a sandbox whose workspace is {workspace}; \
         your shell starts there. Use the `terminal` tool to run commands and the `file_editor` \
         tool to read and change files. Work step by step, check your results, and call \
         `finish` with a short summary for the user when the task is done. If you need \
         something from the user, answer without a tool call."
    );
    // The agent knows what its finish is checked against (a judge's rubric is the judge's).
    if let Some(checks) = log.history.started.as_ref().and_then(|s| s.checks.as_ref()) {
        let commands: Vec<String> = checks.verify.iter().filter_map(|c| c.command.as_ref()).map(|c| format!("`{c}`")).collect();
        if !commands.is_empty() {
            prompt.push_str(&format!(
                "\n\nWhen you call `finish`, your work is checked: {} must pass (exit 0) in the workspace. If a check fails, \
                 you are told what it said and go on working.",
                commands.join(", ")
            ));
        }
        if checks.verify.iter().any(|c| c.judge.is_some()) {
            prompt.push_str("\n\nWhen you call `finish`, a reviewer also judges your work and may send you back.");
        }
    }
    // A helper handed its task as a plugin's named agent works by that agent's instructions.
    if let Some(agent) = log.history.started.as_ref().and_then(|s| s.parent.as_ref()?.agent.as_ref()) {
        prompt
            .push_str(&format!("\n\nYou work as the agent `{}`:\n<agent name=\"{}\">\n{}\n</agent>", agent.name, agent.name, agent.prompt));
    }
    let skills = &log.history.skills;
    for skill in skills.iter().filter(|s| s.kind == SkillKind::Always) {
        prompt.push_str(&format!("\n\n<skill name=\"{}\">\n{}\n</skill>", skill.name, skill.content));
    }
    let offered: Vec<&Skill> = skills.iter().filter(|s| s.kind == SkillKind::AgentSkill).collect();
    if !offered.is_empty() {
        prompt.push_str("\n\n<available_skills>");
        for skill in offered {
            prompt.push_str(&format!("\n<skill name=\"{}\">{}</skill>", skill.name, skill.description.as_deref().unwrap_or_default()));
        }
        prompt.push_str("\n</available_skills>\nBefore you use one of these skills, load its instructions with `load_skill`.");
    }
    prompt
}

/// The executor of `sandbox_id`, answering (see [`halyard_platform::executor_client::reach`]).
pub(crate) async fn executor_of(ctx: &Ctx, sandbox_id: halyard_protocol::SandboxId) -> Result<ExecutorClient, String> {
    halyard_platform::executor_client::reach(&ctx.nats, &ctx.js, &ctx.http, &ctx.config.secret, sandbox_id, reach_patience(ctx)).await
}

/// How long a run waits for its sandbox to answer (it may be starting, or waking).
pub(super) fn reach_patience(ctx: &Ctx) -> Duration {
    Duration::from_secs(ctx.config.sandbox.start_timeout_secs + 10)
}

/// Whether a hook of the workspace runs at `moment` for `tool`.
fn wants(setting: &Setting, moment: Moment, tool: &str) -> bool {
    setting.hooks.as_ref().is_some_and(|h| h.wants(moment, Some(tool)))
}

/// The `pull_request_opened` event of a successful call of Halyard's own `create_pull_request`
/// (its result, `content`, is `{number, url, head, base}`), if this was one.
fn pull_request_opened(tool: &str, args: &Value, content: &str) -> Option<EventBody> {
    if tool.strip_suffix("__create_pull_request") != Some(halyard_protocol::user::HALYARD_MCP_SERVER) {
        return None;
    }
    let made: Value = serde_json::from_str(content).ok()?;
    Some(EventBody::PullRequestOpened {
        number: made["number"].as_u64()?,
        url: made["url"].as_str()?.to_owned(),
        title: args["title"].as_str().map(str::to_owned),
    })
}
