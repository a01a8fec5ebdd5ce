//! One actor per live conversation. It applies agent commands in order, starts runs, pauses
//! and resumes them, and holds the run lease while a run is live. Its state is derived from
//! the conversation's events, so it can be evicted when idle and rebuilt on demand.

use std::sync::Arc;
use std::time::{Duration, Instant};

use halyard_platform::bus::{self, Delivery};
use halyard_platform::skills;
use halyard_protocol::command::{AgentCommand, SandboxCommand};
use halyard_protocol::event::{EventBody, EventSource, ExecutionStatus, SkillKind};
use halyard_protocol::{CommandId, ConversationId, Envelope, EventId, TraceContext, subjects};
use lease::lease_value;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{Mutex, watch};
use uuid::Uuid;

use crate::Ctx;
use crate::log::Log;
use crate::run_loop::{Run, RunOutcome};

/// Messages of a conversation actor.
// Each message is moved once, into the mailbox; boxing the large variant would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub enum ConvMsg {
    Command(Envelope<AgentCommand>, Delivery),
    /// A run ended (ignored unless `run` is the current one).
    RunEnded {
        run: u64,
        outcome: RunOutcome,
    },
    /// The previous owner of a live run died: record that the run was cut off.
    Recover,
    /// Stop if nothing happened for the idle period.
    IdleCheck,
}

pub struct ConversationActor;

struct LiveRun {
    id: u64,
    cancel: watch::Sender<bool>,
    interrupt: watch::Sender<bool>,
    join: tokio::task::JoinHandle<RunOutcome>,
    /// What the run last read of the log (see [`Run::read_upto`]).
    read_upto: Arc<std::sync::atomic::AtomicU64>,
}

pub struct ConvState {
    ctx: Arc<Ctx>,
    id: ConversationId,
    log: Option<Arc<Mutex<Log>>>,
    run: Option<LiveRun>,
    runs: u64,
    paused: bool,
    /// A run is owed once resumed (paused mid-run, or messages arrived while paused).
    owed: bool,
    last_active: Instant,
    /// The owner's secrets were read into the log's mask (once per actor; each run reads them
    /// again).
    secrets_read: bool,
    /// The conversation's MCP connections, kept between runs (each run checks them).
    mcp: Arc<Mutex<Option<Arc<crate::mcp::McpHub>>>>,
}

/// An id derived from a command id (so a redelivered command maps to the same event).
fn derived(id: CommandId, tag: u8) -> EventId {
    let mut bytes = *id.0.as_bytes();
    bytes[15] ^= tag;
    bytes[13] ^= 0x3c;
    EventId(Uuid::from_bytes(bytes))
}

pub mod lease {
    /// The lease value: owner node and heartbeat time.
    pub fn lease_value(node: &str) -> bytes::Bytes {
        bytes::Bytes::from(format!("{node} {}", halyard_platform::now_ms()))
    }

    /// Parses a lease value into (node, heartbeat ms).
    pub fn parse(value: &[u8]) -> Option<(String, i64)> {
        let text = std::str::from_utf8(value).ok()?;
        let (node, at) = text.split_once(' ')?;
        Some((node.to_owned(), at.parse().ok()?))
    }
}

impl Actor for ConversationActor {
    type Msg = ConvMsg;
    type State = ConvState;
    type Arguments = (Arc<Ctx>, ConversationId);

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, (ctx, id): Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        Ok(ConvState {
            ctx,
            id,
            log: None,
            run: None,
            runs: 0,
            paused: false,
            owed: false,
            last_active: Instant::now(),
            secrets_read: false,
            mcp: Default::default(),
        })
    }

    async fn handle(&self, myself: ActorRef<Self::Msg>, msg: Self::Msg, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        st.last_active = Instant::now();
        match msg {
            ConvMsg::Command(env, delivery) => {
                use tracing::Instrument;
                let trace_id = env.trace.as_ref().and_then(halyard_platform::telemetry::trace_id).unwrap_or_default().to_owned();
                let span = tracing::info_span!("agent_command", conversation_id = %st.id, kind = %env.kind, %trace_id);
                st.command(&myself, env, delivery).instrument(span).await
            }
            ConvMsg::RunEnded { run, outcome } => {
                if let Some(ended) = st.run.take_if(|r| r.id == run) {
                    st.release_lease().await;
                    tracing::info!(conversation_id = %st.id, ?outcome, "run ended");
                    // A message appended while the run was live was left to the run, but a run
                    // that had already made its last LLM call never saw it: it is owed a run.
                    // (Messages and run ends reach this actor one at a time, so nothing can slip
                    // between this check and the next message's.)
                    let read = ended.read_upto.load(std::sync::atomic::Ordering::SeqCst);
                    let unseen = match &st.log {
                        Some(log) => log.lock().await.history.last_user_seq > read,
                        None => false,
                    };
                    if unseen && outcome != RunOutcome::Paused && !st.paused {
                        tracing::info!(conversation_id = %st.id, "a message arrived as the run ended; starting another");
                        let rejected = match outcome {
                            RunOutcome::AwaitingConfirmation => {
                                st.reject_pending("The user sent a new message instead of confirming this action.", None).await
                            }
                            _ => Ok(()),
                        };
                        match rejected {
                            Ok(()) => st.start_run(&myself, None).await,
                            Err(e) => tracing::error!(conversation_id = %st.id, error = %e, "cannot record the rejection"),
                        }
                    }
                }
            }
            ConvMsg::Recover => st.recover().await,
            ConvMsg::IdleCheck => {
                let idle = Duration::from_secs(st.ctx.config.agent.idle_evict_secs);
                if st.run.is_none() && st.last_active.elapsed() >= idle {
                    tracing::debug!(conversation_id = %st.id, "evicting idle conversation");
                    myself.stop(Some("idle".into()));
                    return Ok(());
                }
            }
        }
        let idle = Duration::from_secs(st.ctx.config.agent.idle_evict_secs.max(1));
        myself.send_after(idle, || ConvMsg::IdleCheck);
        Ok(())
    }

    async fn post_stop(&self, _myself: ActorRef<Self::Msg>, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // Shutting down mid-run: stop the run but keep the lease, so whoever starts next
        // records the run as cut off.
        if let Some(run) = st.run.take() {
            let _ = run.cancel.send(true);
            run.join.abort();
        }
        Ok(())
    }
}

impl ConvState {
    /// The log, loaded on first use.
    async fn log(&mut self) -> Result<Arc<Mutex<Log>>, halyard_platform::BusError> {
        if let Some(log) = &self.log {
            return Ok(log.clone());
        }
        let log = Log::load(self.ctx.js.clone(), self.id).await?;
        self.paused = log.history.status == Some(ExecutionStatus::Paused);
        let log = Arc::new(Mutex::new(log));
        self.log = Some(log.clone());
        Ok(log)
    }

    async fn command(&mut self, myself: &ActorRef<ConvMsg>, env: Envelope<AgentCommand>, delivery: Delivery) {
        let log = match self.log().await {
            Ok(l) => l,
            Err(e) => {
                delivery.retry(Duration::from_millis(500), &e.to_string()).await;
                return;
            }
        };
        let started = log.lock().await.history.started.is_some();
        // Before anything of the owner's is appended, their secrets must be masked.
        if !self.secrets_read {
            let owner = match &env.payload {
                AgentCommand::Start { owner, .. } => Some(owner.clone()),
                _ => log.lock().await.history.started.as_ref().map(|s| s.owner.clone()),
            };
            if let Some(owner) = owner {
                match crate::user::secrets(&self.ctx, &owner).await {
                    Ok(secrets) => {
                        log.lock().await.set_redactor(secrets.redactor);
                        self.secrets_read = true;
                    }
                    Err(e) => {
                        delivery.retry(Duration::from_millis(500), &format!("cannot read the owner's secrets: {e}")).await;
                        return;
                    }
                }
            }
        }
        let trace = env.trace.clone();
        let cmd_id = env.id;
        match env.payload {
            AgentCommand::Start { owner, sandbox_id, workspace, skills, message, budget, confirmation_policy, llm_profile, .. } => {
                if !started {
                    // The conversation's own limits, else the deployment's defaults.
                    let budget = budget.or_else(|| self.ctx.default_budget());
                    // A profile that went away since the start was asked for is reported by
                    // the first run, which cannot call it.
                    let model = match crate::user::llm(&self.ctx, &owner, llm_profile.as_deref()).await {
                        Ok(llm) => llm.model().to_owned(),
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
                    };
                    if let Err(e) = log.lock().await.append(derived(cmd_id, 1), EventSource::System, body, trace.clone()).await {
                        delivery.retry(Duration::from_millis(500), &e.to_string()).await;
                        return;
                    }
                }
                match message {
                    Some(text) => {
                        if let Err(e) = self.user_message(myself, derived(cmd_id, 2), text, trace).await {
                            delivery.retry(Duration::from_millis(500), &e).await;
                            return;
                        }
                    }
                    None if !started => {
                        // Nothing to do until the user speaks: say so.
                        let body = EventBody::ExecutionStatus { status: ExecutionStatus::Idle, reason: None };
                        if let Err(e) = log.lock().await.append(derived(cmd_id, 3), EventSource::System, body, trace).await {
                            delivery.retry(Duration::from_millis(500), &e.to_string()).await;
                            return;
                        }
                    }
                    None => {}
                }
                delivery.ack().await;
            }
            _ if !started => {
                // The start command has not been applied yet (commands of one conversation can
                // overtake each other across a redelivery): try again shortly.
                delivery.retry(Duration::from_millis(500), "conversation not started yet").await;
            }
            AgentCommand::UserMessage { text, .. } => match self.user_message(myself, EventId(cmd_id.0), text, trace).await {
                Ok(()) => delivery.ack().await,
                Err(e) => delivery.retry(Duration::from_millis(500), &e).await,
            },
            AgentCommand::Pause { .. } => {
                self.pause(trace).await;
                delivery.ack().await;
            }
            AgentCommand::Resume { .. } => {
                self.resume(myself, trace).await;
                delivery.ack().await;
            }
            AgentCommand::Interrupt { .. } => {
                // Only a live run has something to stop; it records the interrupt itself.
                if let Some(run) = &self.run {
                    let _ = run.interrupt.send(true);
                }
                delivery.ack().await;
            }
            AgentCommand::Confirm { .. } => {
                if self.run.is_none() && !self.paused && self.waiting().await {
                    self.start_run_with(myself, trace, true).await;
                }
                delivery.ack().await;
            }
            AgentCommand::Reject { reason, .. } => {
                if self.run.is_none() && !self.paused && self.waiting().await {
                    if let Err(e) = self.reject_pending(&reason, trace.clone()).await {
                        delivery.retry(Duration::from_millis(500), &e).await;
                        return;
                    }
                    // The model reads the reason and chooses another way.
                    self.start_run(myself, trace).await;
                }
                delivery.ack().await;
            }
            AgentCommand::SetConfirmationPolicy { policy, .. } => {
                let mut log = log.lock().await;
                if log.history.policy != policy {
                    let body = EventBody::ConfirmationPolicy { policy };
                    if let Err(e) = log.append(EventId(cmd_id.0), EventSource::User, body, trace).await {
                        drop(log);
                        delivery.retry(Duration::from_millis(500), &e.to_string()).await;
                        return;
                    }
                }
                drop(log);
                delivery.ack().await;
            }
            AgentCommand::SetLlmProfile { profile, .. } => {
                let mut log = log.lock().await;
                let owner = log.history.started.as_ref().map(|s| s.owner.clone());
                if let (Some(owner), true) = (owner, log.history.llm_profile != profile) {
                    match crate::user::llm(&self.ctx, &owner, profile.as_deref()).await {
                        Ok(llm) => {
                            let body = EventBody::LlmProfile { profile, model: llm.model().to_owned() };
                            if let Err(e) = log.append(EventId(cmd_id.0), EventSource::User, body, trace).await {
                                drop(log);
                                delivery.retry(Duration::from_millis(500), &e.to_string()).await;
                                return;
                            }
                        }
                        // The gateway checked the profile; it was deleted since. Nothing changes.
                        Err(e) => tracing::warn!(conversation_id = %self.id, error = %e, "cannot switch LLM profile"),
                    }
                }
                drop(log);
                delivery.ack().await;
            }
            AgentCommand::Delete { .. } => {
                if let Some(run) = self.run.take() {
                    let _ = run.cancel.send(true);
                    run.join.abort();
                }
                self.release_lease().await;
                delivery.ack().await;
                myself.stop(Some("deleted".into()));
            }
        }
    }

    /// Appends a user message (once per id) and starts a run unless one is live or the
    /// conversation is paused. A redelivered message (same id) is not appended again.
    async fn user_message(
        &mut self,
        myself: &ActorRef<ConvMsg>,
        id: EventId,
        text: String,
        trace: Option<TraceContext>,
    ) -> Result<(), String> {
        let Some(log) = self.log.clone() else { return Err("log not loaded".into()) };
        {
            let mut log = log.lock().await;
            if log.history.seen.contains(&id) {
                return Ok(());
            }
            log.append(id, EventSource::User, EventBody::UserMessage { text: text.clone() }, trace.clone())
                .await
                .map_err(|e| e.to_string())?;
            // Knowledge skills the message triggers enter the context, once per conversation.
            let triggered: Vec<(String, String)> = log
                .history
                .skills
                .iter()
                .filter(|s| s.kind == SkillKind::Knowledge && !log.history.activated.contains(&s.name))
                .filter_map(|s| skills::trigger_in(s, &text).map(|t| (s.name.clone(), t.to_owned())))
                .collect();
            for (name, trigger) in triggered {
                let body = EventBody::SkillActivated { name, trigger };
                log.append(EventId::new(), EventSource::System, body, trace.clone()).await.map_err(|e| e.to_string())?;
            }
        }
        // A message instead of a confirmation refuses the waiting actions.
        if self.run.is_none() && self.waiting().await {
            self.reject_pending("The user sent a new message instead of confirming this action.", trace.clone()).await?;
        }
        if self.paused {
            self.owed = true;
        } else if self.run.is_none() {
            self.start_run(myself, trace).await;
        }
        // A run in progress picks the message up at its next step.
        Ok(())
    }

    /// Whether actions wait for the user's confirmation.
    async fn waiting(&self) -> bool {
        match &self.log {
            Some(log) => log.lock().await.history.status == Some(ExecutionStatus::WaitingForConfirmation),
            None => false,
        }
    }

    /// Records the user's refusal of every waiting action; `reason` is the result the model
    /// sees.
    async fn reject_pending(&mut self, reason: &str, trace: Option<TraceContext>) -> Result<(), String> {
        let Some(log) = self.log.clone() else { return Err("log not loaded".into()) };
        let mut log = log.lock().await;
        for p in log.history.pending.clone() {
            let body = EventBody::ActionRejected { tool_call_id: p.tool_call_id, tool: p.tool, reason: reason.to_owned() };
            log.append(EventId::new(), EventSource::User, body, trace.clone()).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn start_run(&mut self, myself: &ActorRef<ConvMsg>, trace: Option<TraceContext>) {
        self.start_run_with(myself, trace, false).await
    }

    /// Starts a run; `confirmed`: the user confirmed the waiting actions, which run first.
    async fn start_run_with(&mut self, myself: &ActorRef<ConvMsg>, trace: Option<TraceContext>, confirmed: bool) {
        let Some(log) = self.log.clone() else { return };
        self.runs += 1;
        let id = self.runs;
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (interrupt_tx, interrupt_rx) = watch::channel(false);
        self.take_lease().await;
        // Everything up to now is this run's to answer, even if it fails before it reads.
        let read_upto = Arc::new(std::sync::atomic::AtomicU64::new(log.lock().await.history.last_seq));
        let run = Run {
            ctx: self.ctx.clone(),
            log,
            cancel: cancel_rx,
            interrupt: interrupt_rx,
            trace: trace.clone(),
            read_upto: read_upto.clone(),
            confirmed,
            llm: self.ctx.llm.clone(),
            env: Default::default(),
            has_forge: false,
            max_iterations: self.ctx.config.agent.max_iterations,
            mcp: self.mcp.clone(),
        };
        let me = myself.clone();
        let ctx = self.ctx.clone();
        let conv = self.id;
        let trace_id = trace.as_ref().and_then(halyard_platform::telemetry::trace_id).unwrap_or_default().to_owned();
        let span = tracing::info_span!("agent_run", conversation_id = %self.id, run = id, %trace_id);
        let join = tokio::spawn(tracing::Instrument::instrument(
            async move {
                // Renew the lease while the run lives.
                let renew = async {
                    let every = Duration::from_secs((ctx.config.agent.lease_ttl_secs / 3).max(1));
                    loop {
                        tokio::time::sleep(every).await;
                        let _ = ctx.leases.put(conv.to_string(), lease_value(&ctx.node_id)).await;
                    }
                };
                let outcome = tokio::select! {
                    o = run.run() => o,
                    _ = renew => RunOutcome::Failed,
                };
                let _ = me.send_message(ConvMsg::RunEnded { run: id, outcome });
                outcome
            },
            span,
        ));
        self.run = Some(LiveRun { id, cancel: cancel_tx, interrupt: interrupt_tx, join, read_upto });
    }

    async fn take_lease(&self) {
        if let Err(e) = self.ctx.leases.put(self.id.to_string(), lease_value(&self.ctx.node_id)).await {
            tracing::warn!(conversation_id = %self.id, error = %e, "cannot record run lease");
        }
    }

    async fn release_lease(&self) {
        let _ = self.ctx.leases.delete(self.id.to_string()).await;
    }

    async fn pause(&mut self, trace: Option<TraceContext>) {
        if self.paused {
            return;
        }
        let mut was_running = false;
        if let Some(run) = self.run.take() {
            let _ = run.cancel.send(true);
            was_running = matches!(run.join.await, Ok(RunOutcome::Paused));
            self.release_lease().await;
        }
        self.paused = true;
        self.owed = self.owed || was_running;
        let Some(log) = self.log.clone() else { return };
        let reason = was_running.then(|| "paused during a run; resume continues it".to_owned());
        let _ = log
            .lock()
            .await
            .append(
                EventId::new(),
                EventSource::User,
                EventBody::ExecutionStatus { status: ExecutionStatus::Paused, reason },
                trace.clone(),
            )
            .await;
        if let Some(sandbox_id) = self.sandbox_id().await {
            if let Err(e) =
                bus::send(&self.ctx.js, subjects::sandbox_command(sandbox_id), SandboxCommand::Pause { sandbox_id }, trace).await
            {
                tracing::warn!(conversation_id = %self.id, error = %e, "cannot pause sandbox");
            }
        }
    }

    async fn resume(&mut self, myself: &ActorRef<ConvMsg>, trace: Option<TraceContext>) {
        if !self.paused {
            return;
        }
        self.paused = false;
        if let Some(sandbox_id) = self.sandbox_id().await {
            if let Err(e) =
                bus::send(&self.ctx.js, subjects::sandbox_command(sandbox_id), SandboxCommand::Resume { sandbox_id }, trace.clone()).await
            {
                tracing::warn!(conversation_id = %self.id, error = %e, "cannot resume sandbox");
            }
        }
        if std::mem::take(&mut self.owed) {
            self.start_run(myself, trace).await;
        } else if let Some(log) = self.log.clone() {
            let _ = log
                .lock()
                .await
                .append(
                    EventId::new(),
                    EventSource::User,
                    EventBody::ExecutionStatus { status: ExecutionStatus::Idle, reason: Some("resumed".into()) },
                    trace,
                )
                .await;
        }
    }

    async fn sandbox_id(&self) -> Option<halyard_protocol::SandboxId> {
        let log = self.log.as_ref()?;
        log.lock().await.history.started.as_ref().map(|s| s.sandbox_id)
    }

    /// Records that a run was cut off by the death of its owner.
    async fn recover(&mut self) {
        if self.run.is_some() {
            return;
        }
        let Ok(log) = self.log().await else { return };
        {
            let mut log = log.lock().await;
            if log.history.status == Some(ExecutionStatus::Running) {
                tracing::warn!(conversation_id = %self.id, "recovering a run cut off by a restart");
                let message = "The agent run was interrupted (the agent runner stopped). Send a message to continue.".to_owned();
                let _ = log
                    .append(
                        EventId::new(),
                        EventSource::System,
                        EventBody::AgentError { code: "run_interrupted".into(), message: message.clone() },
                        None,
                    )
                    .await;
                let _ = log
                    .append(
                        EventId::new(),
                        EventSource::System,
                        EventBody::ExecutionStatus { status: ExecutionStatus::Error, reason: Some(message) },
                        None,
                    )
                    .await;
            }
        }
        self.release_lease().await;
    }
}
