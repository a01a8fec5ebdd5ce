//! The repository's hooks in a run: whether they may run at all (the owner's consent to this
//! repository's hooks file, by its SHA-256: the commands run with the conversation's secrets, so
//! a repository — or an agent that wrote the file in an earlier run — cannot run them unseen),
//! running them at each moment, and putting user messages to `user_prompt_submit`.
//!
//! A file nobody consented to stops the run before anything of it runs: a
//! `hooks_consent_required` event shows it, the status says what to do, and the owner's answer
//! (`AgentCommand::AnswerHooks`) starts the run again. An allowed file is remembered for the
//! owner's conversations on the same repository (`hooks.<user>` in the user bucket, written by
//! the gateway); a declined one only for this conversation, which goes on without hooks.

use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::event::{EventBody, EventSource, ExecutionStatus};
use halyard_protocol::subjects;
use halyard_protocol::user::HookConsents;
use serde_json::{Value, json};

use super::{Run, RunOutcome, Setting};
use crate::tools::hooks::{FILE, Hooks, Moment};

/// What a hook runs for: the tool call, or the user message, it judges (neither for sessions).
#[derive(Clone, Copy, Default)]
pub(super) struct HookSubject<'a> {
    pub tool: Option<&'a str>,
    pub tool_call_id: Option<&'a str>,
    pub message_seq: Option<u64>,
}

impl Run {
    /// The hooks this run may use: `Ok(None)` for none (no file, or declined; a helper never
    /// asks), `Err` when the run ends here to wait for the owner's answer (or the log failed).
    pub(super) async fn admit_hooks(&self, hooks: Option<Hooks>, helper: bool) -> Result<Option<Hooks>, RunOutcome> {
        let Some(hooks) = hooks.filter(|h| !h.is_empty()) else { return Ok(None) };
        let (owner, repository, answer, asked) = {
            let log = self.log.lock().await;
            let h = &log.history;
            let Some(started) = &h.started else { return Ok(None) };
            let repository = started.repository.as_ref().map(|r| r.url.clone()).unwrap_or_default();
            (started.owner.clone(), repository, h.hooks_answers.get(&hooks.sha256).copied(), h.hooks_asked.clone())
        };
        match answer {
            Some(true) => return Ok(Some(hooks)),
            Some(false) => return Ok(None),
            None => {}
        }
        if self.consented(&owner, &repository, &hooks.sha256).await {
            return Ok(Some(hooks));
        }
        if helper {
            return Ok(None);
        }
        if asked.as_deref() != Some(hooks.sha256.as_str()) {
            let body = EventBody::HooksConsentRequired {
                file: FILE.into(),
                sha256: hooks.sha256.clone(),
                content: hooks.text.clone(),
                repository: (!repository.is_empty()).then_some(repository),
            };
            if !self.append(EventSource::System, body).await {
                return Err(RunOutcome::Failed);
            }
        }
        let why = format!(
            "{FILE} in the workspace runs commands with this conversation's secrets, and you have not allowed this \
             version of it: allow or decline it (POST /conversations/{{id}}/hooks-consent) and the agent goes on"
        );
        if !self.status(ExecutionStatus::Idle, Some(why)).await {
            return Err(RunOutcome::Failed);
        }
        Err(RunOutcome::AwaitingUser)
    }

    /// Whether `owner` allowed hooks file `sha256` on `repository` (an unreadable record is no
    /// consent: the owner is asked again).
    async fn consented(&self, owner: &halyard_protocol::UserId, repository: &str, sha256: &str) -> bool {
        let key = subjects::user_hooks_key(owner);
        match self.ctx.user_kv.get(&key).await {
            Ok(Some(bytes)) => match serde_json::from_slice::<HookConsents>(&bytes) {
                Ok(consents) => consents.allows(repository, sha256),
                Err(e) => {
                    tracing::warn!(key, error = %e, "unreadable hook consents");
                    false
                }
            },
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(key, error = %e, "cannot read hook consents");
                false
            }
        }
    }

    /// Runs the workspace's hooks of `moment` that match, in order, each recorded as a `hook`
    /// event; the first that blocks ends them. `Ok(Some(reason))`: one blocked; `Err`: the log
    /// failed.
    pub(super) async fn hooks_at(
        &self,
        exec: &ExecutorClient,
        setting: &Setting,
        moment: Moment,
        about: HookSubject<'_>,
        input: Value,
    ) -> Result<Option<String>, ()> {
        let Some(hooks) = &setting.hooks else { return Ok(None) };
        let to_run = hooks.at(moment, about.tool);
        if to_run.is_empty() {
            return Ok(None);
        }
        let conversation = self.log.lock().await.conversation().to_string();
        let scene = crate::tools::hooks::Scene { conversation: &conversation, workspace: &setting.workspace, secrets: &self.env };
        for hook in to_run {
            let ran = crate::tools::hooks::run(exec, &hook, moment, about.tool, input.clone(), &scene).await;
            let body = EventBody::Hook {
                event: moment.key().into(),
                command: ran.command,
                tool_call_id: about.tool_call_id.map(str::to_owned),
                tool: about.tool.map(str::to_owned),
                message_seq: about.message_seq,
                exit_code: ran.exit_code,
                stdout: ran.stdout,
                stderr: ran.stderr,
                blocked: ran.blocked,
            };
            if !self.append(EventSource::System, body).await {
                return Err(());
            }
            if ran.blocked {
                return Ok(Some(ran.reason));
            }
        }
        Ok(None)
    }

    /// Puts each user message the model has not seen to the `user_prompt_submit` hooks; a
    /// refused one never reaches the model. `Ok(Some)`: the run ends here (the latest message
    /// was refused, and the user is told why).
    pub(super) async fn judge_prompts(&self, exec: &ExecutorClient, setting: &Setting) -> Result<Option<RunOutcome>, ()> {
        if !setting.hooks.as_ref().is_some_and(|h| h.has(Moment::UserPromptSubmit)) {
            return Ok(None);
        }
        let waiting: Vec<(u64, String)> = {
            let log = self.log.lock().await;
            let h = &log.history;
            h.unjudged
                .iter()
                .filter_map(|seq| h.entries.iter().find(|e| e.seq == *seq && e.msg.role == "user"))
                .map(|e| (e.seq, e.msg.content.clone().unwrap_or_default()))
                .collect()
        };
        let mut refused_last = None;
        let last = waiting.last().map(|(seq, _)| *seq);
        for (seq, text) in waiting {
            let about = HookSubject { message_seq: Some(seq), ..Default::default() };
            if let Some(reason) = self.hooks_at(exec, setting, Moment::UserPromptSubmit, about, json!({"message": text})).await? {
                if Some(seq) == last {
                    refused_last = Some(reason);
                }
            }
        }
        let Some(reason) = refused_last else { return Ok(None) };
        let said = format!("a user_prompt_submit hook refused the message: {reason}");
        if !self.status(ExecutionStatus::Idle, Some(said)).await {
            return Err(());
        }
        Ok(Some(RunOutcome::AwaitingUser))
    }
}
