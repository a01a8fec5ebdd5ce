//! What a conversation actor does with each agent command, by family: the start, the user's
//! messages, the controls that reach the helpers it waits for (pause, resume, interrupt), the
//! answers to what waits for the user (confirm, reject, hooks), settings (confirmation policy,
//! LLM profile), records (a terminal opened), a restore, and the delete.
//!
//! Every handler returns `Err` where trying the command again may help; [`ConvState::command`]
//! then hands it back to be delivered again, else acknowledges it. A command is applied once
//! however often it is handed out: what it appends has an id derived from the command's.

use std::sync::Arc;
use std::time::Duration;

use halyard_platform::route::Settle;
use halyard_protocol::command::AgentCommand;
use halyard_protocol::event::{ConfirmationPolicy, EventBody, EventSource, ExecutionStatus};
use halyard_protocol::{CommandId, Envelope, EventId, TraceContext};
use ractor::ActorRef;
use tokio::sync::Mutex;

use super::{ConvMsg, ConvState, derived};
use crate::log::Log;
use crate::tools::delegate;

/// How long a command that could not be applied waits before it is handed out again.
const RETRY: Duration = Duration::from_millis(500);

/// Why a command waits: its conversation's start is not applied yet, or not whole (commands of
/// one conversation can overtake each other across a redelivery).
const NOT_STARTED: &str = "conversation not started yet";

impl ConvState {
    /// Applies one agent command, then acknowledges it, or hands it back to be tried again.
    pub(super) async fn command(&mut self, myself: &ActorRef<ConvMsg>, env: Envelope<AgentCommand>, delivery: Settle) {
        let log = match self.log().await {
            Ok(l) => l,
            Err(e) => return delivery.retry(RETRY, &e.to_string()).await,
        };
        if let Err(e) = self.read_secrets(&log, &env.payload).await {
            return delivery.retry(RETRY, &e).await;
        }
        let (started, forking) = {
            let log = log.lock().await;
            (log.history.started.is_some(), log.history.fork_unfinished().is_some())
        };
        let (trace, cmd_id) = (env.trace.clone(), env.id);
        let applied = match env.payload {
            start @ AgentCommand::Start { .. } => self.start(myself, &log, cmd_id, trace, started, start).await,
            _ if !started || forking => Err(NOT_STARTED.to_owned()),
            AgentCommand::UserMessage { text, images, .. } => self.user_message(myself, EventId(cmd_id.0), text, images, trace).await,
            control @ (AgentCommand::Pause { .. } | AgentCommand::Resume { .. } | AgentCommand::Interrupt { .. }) => {
                self.control(myself, &log, cmd_id, trace, control).await;
                Ok(())
            }
            AgentCommand::Confirm { .. } => self.confirm(myself, trace).await,
            AgentCommand::Reject { reason, .. } => self.reject(myself, &reason, trace).await,
            AgentCommand::AnswerHooks { sha256, allow, .. } => self.answer_hooks(myself, cmd_id, sha256, allow, trace).await,
            AgentCommand::SetConfirmationPolicy { policy, .. } => set_policy(&log, cmd_id, policy, trace).await,
            AgentCommand::SetLlmProfile { profile, .. } => self.set_profile(&log, cmd_id, profile, trace).await,
            AgentCommand::RecordTerminalOpened { by, .. } => {
                append_once(&log, EventId(cmd_id.0), EventSource::User, EventBody::TerminalOpened { by }, trace).await
            }
            AgentCommand::RecordNetworkBlocked { host, port, rule, .. } => {
                let message = halyard_protocol::egress::blocked_message(&host, port, &rule);
                let body = EventBody::NetworkBlocked { host, port, rule, message };
                append_once(&log, EventId(cmd_id.0), EventSource::Environment, body, trace).await
            }
            AgentCommand::RecordNetworkUsed { conversation_id, destinations } => {
                let body = EventBody::NetworkUsed { destinations: destinations.clone() };
                match append_once(&log, EventId(cmd_id.0), EventSource::Environment, body, trace).await {
                    Ok(()) => self.audit_network(&log, cmd_id, conversation_id, destinations).await,
                    Err(e) => Err(e),
                }
            }
            AgentCommand::Restore { at_seq, .. } => self.restore_command(&log, EventId(cmd_id.0), at_seq, trace).await,
            AgentCommand::Delete { .. } => {
                self.delete(&log).await;
                delivery.ack().await;
                myself.stop(Some("deleted".into()));
                return;
            }
        };
        match applied {
            Ok(()) => delivery.ack().await,
            Err(e) => delivery.retry(RETRY, &e).await,
        }
    }

    /// What an organization's conversation reached through its egress proxy goes into the
    /// organization's audit trail too (the command's id makes a retry's copy a no-op).
    async fn audit_network(
        &self,
        log: &Arc<Mutex<Log>>,
        cmd_id: CommandId,
        conversation_id: halyard_protocol::ConversationId,
        destinations: Vec<halyard_protocol::egress::NetworkUse>,
    ) -> Result<(), String> {
        let Some((owner, Some(org))) = log.lock().await.history.started.as_ref().map(|s| (s.owner.clone(), s.org.clone())) else {
            return Ok(());
        };
        let record = halyard_protocol::accounts::AuditRecord {
            actor: owner,
            action: "conversation.network_used".into(),
            target: conversation_id.to_string(),
            detail: Some(serde_json::json!({ "destinations": destinations })),
            org: Some(org),
            client: None,
            at_ms: halyard_platform::now_ms(),
        };
        let mut env = Envelope::new(halyard_protocol::system::SystemRecord::Audit(record), halyard_platform::now_ms());
        env.id = cmd_id;
        halyard_platform::bus::publish(&self.ctx.js, halyard_protocol::subjects::audit_record("network"), &env)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Before anything of the owner's is appended, their secrets must be masked: read once per
    /// actor, from the start command or the started conversation.
    async fn read_secrets(&mut self, log: &Arc<Mutex<Log>>, cmd: &AgentCommand) -> Result<(), String> {
        if self.secrets_read {
            return Ok(());
        }
        let owner = match cmd {
            AgentCommand::Start { owner, org, .. } => Some((owner.clone(), org.clone())),
            _ => log.lock().await.history.started.as_ref().map(|s| (s.owner.clone(), s.org.clone())),
        };
        let Some((owner, org)) = owner else { return Ok(()) };
        let secrets =
            crate::user::secrets(&self.ctx, &owner, org.as_deref()).await.map_err(|e| format!("cannot read the owner's secrets: {e}"))?;
        log.lock().await.set_redactor(secrets.redactor);
        self.secrets_read = true;
        Ok(())
    }

    /// The start: `conversation_started` (once), a fork's copy of its source's events, then the
    /// first message, or an idle status when there is none.
    async fn start(
        &mut self,
        myself: &ActorRef<ConvMsg>,
        log: &Arc<Mutex<Log>>,
        cmd_id: CommandId,
        trace: Option<TraceContext>,
        started: bool,
        start: AgentCommand,
    ) -> Result<(), String> {
        let AgentCommand::Start {
            owner,
            sandbox_id,
            workspace,
            skills,
            message,
            budget,
            confirmation_policy,
            llm_profile,
            secrets,
            repository,
            fork,
            parent,
            org,
            agent,
            checks,
            plugins,
            ..
        } = start
        else {
            return Ok(());
        };
        if !started {
            // The conversation's own limits, else the deployment's defaults.
            let budget = budget.or_else(|| self.ctx.default_budget());
            // A profile that went away since the start was asked for is reported by the first
            // run, which cannot call it.
            let model = match crate::user::profile(&self.ctx, &owner, llm_profile.as_deref()).await {
                Ok(p) => p.llm.primary().model().to_owned(),
                Err(e) => {
                    tracing::warn!(conversation_id = %self.id, error = %e, "the conversation's LLM profile is not usable");
                    self.ctx.llm.model().to_owned()
                }
            };
            let confirmation_policy = confirmation_policy.unwrap_or_default();
            let body = EventBody::ConversationStarted {
                owner,
                sandbox_id,
                workspace,
                model,
                skills,
                budget,
                confirmation_policy,
                llm_profile,
                secrets,
                repository,
                forked_from: fork.clone(),
                parent,
                org,
                agent,
                checks,
                plugins,
            };
            log.lock().await.append(derived(cmd_id, 1), EventSource::System, body, trace.clone()).await.map_err(|e| e.to_string())?;
        }
        self.copy_fork(log, cmd_id, trace.clone()).await?;
        match message {
            Some(text) => self.user_message(myself, derived(cmd_id, 2), text, Vec::new(), trace).await,
            // Nothing to do until the user speaks: say so. (A fork's copy ends with its status.)
            None if !started && fork.is_none() => {
                let body = EventBody::ExecutionStatus { status: ExecutionStatus::Idle, reason: None };
                log.lock().await.append(derived(cmd_id, 3), EventSource::System, body, trace).await.map(|_| ()).map_err(|e| e.to_string())
            }
            None => Ok(()),
        }
    }

    /// Pausing, resuming or interrupting a conversation reaches the helpers it waits for (each
    /// told once per command, however often the command is handed out).
    async fn control(
        &mut self,
        myself: &ActorRef<ConvMsg>,
        log: &Arc<Mutex<Log>>,
        cmd_id: CommandId,
        trace: Option<TraceContext>,
        cmd: AgentCommand,
    ) {
        let helpers = log.lock().await.history.live_helpers();
        let js = self.ctx.js.clone();
        match cmd {
            AgentCommand::Pause { .. } => {
                self.pause(derived(cmd_id, 0x50), trace.clone()).await;
                delegate::tell(&js, &helpers, cmd_id, |c| AgentCommand::Pause { conversation_id: c }, trace).await;
            }
            AgentCommand::Resume { .. } => {
                delegate::tell(&js, &helpers, cmd_id, |c| AgentCommand::Resume { conversation_id: c }, trace.clone()).await;
                self.resume(myself, derived(cmd_id, 0x52), trace).await;
            }
            _ => {
                // Only a live run has something to stop; it records the interrupt itself.
                if let Some(run) = &self.run {
                    let _ = run.interrupt.send(true);
                }
                delegate::tell(&js, &helpers, cmd_id, |c| AgentCommand::Interrupt { conversation_id: c }, trace).await;
            }
        }
    }

    /// The actions waiting for confirmation run.
    async fn confirm(&mut self, myself: &ActorRef<ConvMsg>, trace: Option<TraceContext>) -> Result<(), String> {
        if self.run.is_none() && !self.paused && self.waiting().await {
            self.start_run_with(myself, trace, true).await?;
        }
        Ok(())
    }

    /// The actions waiting for confirmation do not run: the model reads why and chooses another way.
    async fn reject(&mut self, myself: &ActorRef<ConvMsg>, reason: &str, trace: Option<TraceContext>) -> Result<(), String> {
        if self.run.is_none() && !self.paused && self.waiting().await {
            self.reject_pending(reason, trace.clone()).await?;
            self.start_run(myself, trace).await?;
        }
        Ok(())
    }

    /// Another LLM profile from now on. The gateway checked the profile; one deleted since
    /// changes nothing.
    async fn set_profile(
        &self,
        log: &Arc<Mutex<Log>>,
        cmd_id: CommandId,
        profile: Option<String>,
        trace: Option<TraceContext>,
    ) -> Result<(), String> {
        let mut log = log.lock().await;
        let owner = log.history.started.as_ref().map(|s| s.owner.clone());
        let (Some(owner), true) = (owner, log.history.llm_profile != profile) else { return Ok(()) };
        match crate::user::profile(&self.ctx, &owner, profile.as_deref()).await {
            Ok(p) => {
                let body = EventBody::LlmProfile { profile, model: p.llm.primary().model().to_owned() };
                log.append(EventId(cmd_id.0), EventSource::User, body, trace).await.map(|_| ()).map_err(|e| e.to_string())
            }
            Err(e) => {
                tracing::warn!(conversation_id = %self.id, error = %e, "cannot switch LLM profile");
                Ok(())
            }
        }
    }

    /// Puts the workspace back as it was at `at_seq` (once), unless the agent is working in it;
    /// the event says which, and the restored workspace is its event's checkpoint too.
    async fn restore_command(&self, log: &Arc<Mutex<Log>>, id: EventId, at_seq: u64, trace: Option<TraceContext>) -> Result<(), String> {
        if log.lock().await.history.seen.contains(&id) {
            return Ok(());
        }
        let (body, exec) = if self.run.is_some() {
            let message = "The workspace was not restored: the agent was working in it. Interrupt or pause it, then restore.";
            (EventBody::AgentError { code: "restore_refused".into(), message: message.into() }, None)
        } else {
            match self.restore(log, at_seq).await {
                Ok((body, exec)) => (body, Some(exec)),
                Err(e) => {
                    (EventBody::AgentError { code: "restore_failed".into(), message: format!("The workspace was not restored: {e}") }, None)
                }
            }
        };
        let ev = log.lock().await.append(id, EventSource::User, body, trace).await.map_err(|e| e.to_string())?;
        if let Some(exec) = exec {
            crate::checkpoints::take(&self.ctx, self.id, &exec, ev.seq).await;
        }
        Ok(())
    }

    /// Stops the run, and what a helper still runs in its parent's sandbox (a helper's sandbox
    /// lives on with its parent); forgets the checkpoints and the lease.
    async fn delete(&mut self, log: &Arc<Mutex<Log>>) {
        if let Some(run) = self.run.take() {
            let _ = run.cancel.send(true);
            run.join.abort();
        }
        let helper_in = log.lock().await.history.started.as_ref().filter(|s| s.parent.is_some()).map(|s| s.sandbox_id);
        if let Some(sandbox_id) = helper_in {
            let session = self.id.to_string();
            let stop = async {
                let exec = crate::run_loop::executor_of(&self.ctx, sandbox_id).await?;
                exec.close_session(&session).await.map_err(|e| e.to_string())
            };
            match tokio::time::timeout(Duration::from_secs(10), stop).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(conversation_id = %self.id, error = %e, "cannot stop the deleted helper's commands"),
                Err(_) => tracing::warn!(conversation_id = %self.id, "the deleted helper's commands did not stop in time"),
            }
        }
        crate::checkpoints::forget(&self.ctx, self.id).await;
        self.release_lease().await;
    }
}

/// Another confirmation policy from now on (recorded only when it changes).
async fn set_policy(
    log: &Arc<Mutex<Log>>,
    cmd_id: CommandId,
    policy: ConfirmationPolicy,
    trace: Option<TraceContext>,
) -> Result<(), String> {
    let mut log = log.lock().await;
    if log.history.policy == policy {
        return Ok(());
    }
    let body = EventBody::ConfirmationPolicy { policy };
    log.append(EventId(cmd_id.0), EventSource::User, body, trace).await.map(|_| ()).map_err(|e| e.to_string())
}

/// Appends `body` as event `id` unless it is in the log already.
async fn append_once(
    log: &Arc<Mutex<Log>>,
    id: EventId,
    source: EventSource,
    body: EventBody,
    trace: Option<TraceContext>,
) -> Result<(), String> {
    let mut log = log.lock().await;
    if log.history.seen.contains(&id) {
        return Ok(());
    }
    log.append(id, source, body, trace).await.map(|_| ()).map_err(|e| e.to_string())
}
