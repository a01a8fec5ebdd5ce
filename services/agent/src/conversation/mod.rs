//! One actor per live conversation. It applies agent commands in order, starts runs, pauses
//! and resumes them, and holds the run lease while a run is live; it takes a run over from a
//! runner that died, and continues it from the log. Its state is derived from the
//! conversation's events, so it can be evicted when idle and rebuilt on demand. What each
//! command does is [`commands`]; the lease and taking a run over are [`takeover`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use halyard_platform::bus::{self, NewEvent};
use halyard_platform::derived::{Namespace, derived_uuid};
use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::skills;
use halyard_protocol::command::{AgentCommand, SandboxCommand};
use halyard_protocol::event::{EventBody, EventSource, ExecutionStatus, Image, SkillKind};
use halyard_protocol::{CommandId, ConversationId, Envelope, EventId, TraceContext, subjects};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{Mutex, watch};

use crate::ctx::Ctx;
use crate::lease::{Acquire, Held};
use crate::log::Log;
use crate::run_loop::{Run, RunOutcome};

mod commands;
mod takeover;
use halyard_platform::route::Settle;

/// Messages of a conversation actor.
// Each message is moved once, into the mailbox; boxing the large variant would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub enum ConvMsg {
    Command(Envelope<AgentCommand>, Settle),
    /// A run ended (ignored unless `run` is the current one).
    RunEnded {
        run: u64,
        outcome: RunOutcome,
    },
    /// The lease of a live run was seen dead at this revision: take the run over.
    TakeOver {
        revision: u64,
    },
    /// Stop if nothing happened for the idle period.
    IdleCheck,
    /// Start the run that could not start because the lease bucket could not be reached
    /// (`confirmed` as for [`ConvState::start_run_with`]); tried again until it can.
    StartRun {
        confirmed: bool,
    },
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

impl LiveRun {
    fn new(
        id: u64,
        cancel: watch::Sender<bool>,
        interrupt: watch::Sender<bool>,
        join: tokio::task::JoinHandle<RunOutcome>,
        read_upto: Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        metrics::gauge!("halyard_agent_runs_live").increment(1.0);
        Self { id, cancel, interrupt, join, read_upto }
    }
}

/// A run is live from its start until this actor lets go of it, however that happens (ended,
/// paused, deleted, handed over).
impl Drop for LiveRun {
    fn drop(&mut self) {
        metrics::gauge!("halyard_agent_runs_live").decrement(1.0);
    }
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
    /// An [`ConvMsg::IdleCheck`] is on its way.
    check_pending: bool,
    /// The owner's secrets were read into the log's mask (once per actor; each run reads them
    /// again).
    secrets_read: bool,
    /// The conversation's MCP connections, kept between runs (each run checks them).
    mcp: Arc<Mutex<Option<Arc<crate::tools::mcp::McpHub>>>>,
    /// The run lease while this actor holds it (the live run's renewals move its revision).
    held: Arc<std::sync::Mutex<Option<Held>>>,
    /// The revision of the marker this actor's last release left, which the next run's lease
    /// is taken over in one write ([`crate::lease::Leases::acquire`]).
    released: Option<u64>,
}

/// Appends a user's message, and the knowledge skills it triggers (once per conversation). A
/// plugin's slash command is appended as what it expands to, with what was typed beside it.
async fn append_message(
    log: &mut Log,
    id: EventId,
    (typed, images): (String, Vec<Image>),
    expanded: Option<(String, String)>,
    trace: Option<TraceContext>,
) -> Result<(), String> {
    let (text, command) = match expanded {
        Some((command, text)) => (text, Some(command)),
        None => (typed, None),
    };
    log.append(id, EventSource::User, EventBody::UserMessage { text: text.clone(), images, command }, trace.clone())
        .await
        .map_err(|e| e.to_string())?;
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
    Ok(())
}

/// The id of a fork's copy of its source's event `seq`, derived from the fork's start command
/// (a redelivered start copies each event under the same id).
fn copied_id(id: CommandId, seq: u64) -> EventId {
    EventId(derived_uuid(Namespace::ForkCopy { command: id.0, seq }))
}

/// An id derived from a command id (so a redelivered command maps to the same event).
fn derived(id: CommandId, tag: u8) -> EventId {
    EventId(derived_uuid(Namespace::CommandEvent { command: id.0, tag }))
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
            check_pending: false,
            secrets_read: false,
            mcp: Default::default(),
            held: Default::default(),
            released: None,
        })
    }

    async fn handle(&self, myself: ActorRef<Self::Msg>, msg: Self::Msg, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // One idle check is pending at a time; the check itself is no activity (counting it as
        // one kept every conversation in memory for good).
        let idle = Duration::from_secs(st.ctx.config.agent.idle_evict_secs.max(1));
        if matches!(msg, ConvMsg::IdleCheck) {
            st.check_pending = false;
        } else {
            st.last_active = Instant::now();
        }
        if !st.check_pending {
            st.check_pending = true;
            myself.send_after(idle, || ConvMsg::IdleCheck);
        }
        match msg {
            ConvMsg::Command(env, delivery) => {
                use tracing::Instrument;
                let trace_id = env.trace.as_ref().and_then(halyard_platform::telemetry::trace_id).unwrap_or_default().to_owned();
                let span = tracing::info_span!("agent_command", conversation_id = %st.id, kind = %env.kind, %trace_id);
                halyard_platform::telemetry::continue_trace(&span, env.trace.as_ref());
                st.command(&myself, env, delivery).instrument(span).await
            }
            ConvMsg::RunEnded { run, outcome } => {
                if let Some(ended) = st.run.take_if(|r| r.id == run) {
                    tracing::info!(conversation_id = %st.id, ?outcome, "run ended");
                    metrics::counter!("halyard_agent_runs_ended_total", "outcome" => outcome.as_str()).increment(1);
                    if outcome == RunOutcome::LostLease {
                        // The runner that took it over continues it; nothing is ours to do.
                        st.held.lock().unwrap_or_else(|p| p.into_inner()).take();
                        st.log = None;
                        st.secrets_read = false;
                        return Ok(());
                    }
                    st.release_lease().await;
                    // A message appended while the run was live was left to the run, but a run
                    // that had already made its last LLM call never saw it: it is owed a run.
                    // Messages reach this actor one at a time, and one that another runner
                    // appended (it saw this lease and left the message to this run) is folded in
                    // here: the lease is let go before the log is read again, so either this read
                    // sees the message or that runner saw no lease and starts a run itself.
                    let read = ended.read_upto.load(std::sync::atomic::Ordering::SeqCst);
                    let unseen = match &st.log {
                        Some(log) => {
                            let mut log = log.lock().await;
                            let _ = log.refresh().await;
                            log.history.last_user_seq > read
                        }
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
                            Ok(()) => st.start_run_or_later(&myself, None, false).await,
                            Err(e) => tracing::error!(conversation_id = %st.id, error = %e, "cannot record the rejection"),
                        }
                    }
                }
            }
            ConvMsg::TakeOver { revision } => st.take_over(&myself, revision).await,
            ConvMsg::StartRun { confirmed } => {
                if st.run.is_none() && !st.paused {
                    st.start_run_or_later(&myself, None, confirmed).await;
                }
            }
            ConvMsg::IdleCheck => {
                if st.run.is_none() && st.last_active.elapsed() >= idle {
                    tracing::debug!(conversation_id = %st.id, "evicting idle conversation");
                    myself.stop(Some("idle".into()));
                }
            }
        }
        Ok(())
    }

    async fn post_stop(&self, _myself: ActorRef<Self::Msg>, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // Shutting down mid-run: stop the run and hand its lease over at once, so another
        // runner continues it (recording the step that was cut off) without waiting for the
        // lease to age.
        if let Some(run) = st.run.take() {
            let _ = run.cancel.send(true);
            run.join.abort();
            let held = st.held.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(held) = held {
                tracing::info!(conversation_id = %st.id, "handing the live run over to another runner");
                st.ctx.leases.hand_over(st.id, held).await;
            }
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
        // A pause during a run says so in its reason (see `pause`): after a restart, resuming
        // still owes the run its continuation.
        self.owed = self.owed || (self.paused && log.history.status_reason.is_some());
        let log = Arc::new(Mutex::new(log));
        self.log = Some(log.clone());
        Ok(log)
    }

    /// Puts the workspace back as it was at event `at_seq`, after keeping it as it is now (so
    /// the restore can be undone by another): the event that records it, and the sandbox's
    /// executor (for the checkpoint of that event), or why not.
    async fn restore(&self, log: &Arc<Mutex<Log>>, at_seq: u64) -> Result<(EventBody, ExecutorClient), String> {
        let (sandbox_id, last) = {
            let log = log.lock().await;
            (log.history.started.as_ref().map(|s| s.sandbox_id).ok_or("the conversation has no sandbox")?, log.history.last_seq)
        };
        let exec = crate::run_loop::executor_of(&self.ctx, sandbox_id).await?;
        crate::checkpoints::take(&self.ctx, self.id, &exec, last).await;
        let head = crate::checkpoints::head(&self.ctx, self.id).await;
        let done = exec.restore(at_seq, head.as_deref()).await.map_err(|e| e.to_string())?;
        tracing::info!(conversation_id = %self.id, at_seq, checkpoint_seq = done.checkpoint_seq, "workspace restored");
        Ok((EventBody::WorkspaceRestored { at_seq, checkpoint_seq: done.checkpoint_seq }, exec))
    }

    /// Appends a user message (once per id) and starts a run unless one is live or the
    /// conversation is paused. A redelivered message (same id) is not appended again.
    async fn user_message(
        &mut self,
        myself: &ActorRef<ConvMsg>,
        id: EventId,
        text: String,
        images: Vec<Image>,
        trace: Option<TraceContext>,
    ) -> Result<(), String> {
        let Some(log) = self.log.clone() else { return Err("log not loaded".into()) };
        // `/name arguments` of one of the conversation's plugins' commands.
        let plugins = log.lock().await.history.started.as_ref().map(|s| s.plugins.clone()).unwrap_or_default();
        let expanded = crate::plugins::expand(&self.ctx, &plugins, &text).await;
        let mut log = log.lock().await;
        if log.history.seen.contains(&id) {
            // Appended before, by a handler that died before its run began (or before it
            // acknowledged): the message is answered if nothing has answered it yet.
            let unanswered = log.history.last_user_seq > log.history.status_seq;
            drop(log);
            if unanswered && self.run.is_none() && !self.paused {
                tracing::info!(conversation_id = %self.id, "a redelivered message was never answered; running now");
                self.start_run(myself, trace).await?;
            }
            return Ok(());
        }
        // The run this message starts needs the lease: it is taken while the message is
        // appended, two writes at once. Holding it early is safe; what must not happen early is
        // giving up: a runner that finds the lease held leaves its message to the holder's run,
        // so it may only look once its message is in the log (see `ConvMsg::RunEnded`). A
        // `Busy` here is therefore looked at again after the append, by `start_run`.
        let ahead = self.run.is_none() && !self.paused && self.held.lock().unwrap_or_else(|p| p.into_inner()).is_none();
        let released = if ahead { self.released.take() } else { None };
        let (appended, leased) = tokio::join!(append_message(&mut log, id, (text, images), expanded, trace.clone()), async {
            if ahead { Some(self.ctx.leases.acquire(self.id, released).await) } else { None }
        });
        drop(log);
        if let Some(Ok(Acquire::Held(h))) = leased {
            *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
        }
        let answered = match appended {
            Ok(()) => self.answer_message(myself, trace).await,
            Err(e) => Err(e),
        };
        // A lease taken for a run that did not start is let go at once.
        if answered.is_err() && self.run.is_none() {
            self.release_lease().await;
        }
        answered
    }

    /// Starts the run that answers an appended message, unless one is live or the
    /// conversation is paused.
    async fn answer_message(&mut self, myself: &ActorRef<ConvMsg>, trace: Option<TraceContext>) -> Result<(), String> {
        // A message instead of a confirmation refuses the waiting actions.
        if self.run.is_none() && self.waiting().await {
            self.reject_pending("The user sent a new message instead of confirming this action.", trace.clone()).await?;
        }
        if self.paused {
            self.owed = true;
        } else if self.run.is_none() {
            // Not without the lease: the command is tried again (the message is in the log
            // once, and its redelivery starts the run), so a runner that dies meanwhile leaves
            // it to another rather than running a run no other runner knows of.
            self.start_run(myself, trace).await?;
        }
        // A run in progress picks the message up at its next step.
        Ok(())
    }

    /// Records the owner's answer about a hooks file (once, however often the command is handed
    /// out) and starts the run that waited for it.
    async fn answer_hooks(
        &mut self,
        myself: &ActorRef<ConvMsg>,
        cmd_id: CommandId,
        sha256: String,
        allowed: bool,
        trace: Option<TraceContext>,
    ) -> Result<(), String> {
        let Some(log) = self.log.clone() else { return Err("log not loaded".into()) };
        let id = EventId(cmd_id.0);
        let waited = {
            let mut log = log.lock().await;
            // (A redelivery after the answer was recorded starts the run its first delivery
            // may not have started.)
            let recorded = log.history.seen.contains(&id);
            let waited = recorded || log.history.hooks_asked.as_deref() == Some(sha256.as_str());
            if !recorded {
                let body = EventBody::HooksConsent { sha256, allowed };
                log.append(id, EventSource::User, body, trace.clone()).await.map_err(|e| e.to_string())?;
            }
            waited
        };
        if waited && self.run.is_none() && !self.paused {
            self.start_run(myself, trace).await?;
        }
        Ok(())
    }

    /// Whether actions wait for the user's confirmation.
    async fn waiting(&self) -> bool {
        match &self.log {
            Some(log) => log.lock().await.history.status == Some(ExecutionStatus::WaitingForConfirmation),
            None => false,
        }
    }

    /// A fork's log after its own start: the source's events 2 to `at_seq`, copied as they were
    /// (masked like everything appended), then a status saying it waits for the user, which
    /// also marks the copy complete. A redelivered start goes on after the last event copied:
    /// the fork's events keep their source's seqs (nothing else writes to a fork being copied:
    /// its title is given at its creation, and its other commands wait for the copy).
    async fn copy_fork(&mut self, log: &Arc<Mutex<Log>>, cmd_id: CommandId, trace: Option<TraceContext>) -> Result<(), String> {
        let mut log = log.lock().await;
        let Some(fork) = log.history.fork_unfinished().cloned() else { return Ok(()) };
        let copied = log.history.last_seq;
        let began = std::time::Instant::now();
        let source = bus::read_events(&self.ctx.js, fork.conversation_id, copied).await.map_err(|e| e.to_string())?;
        // In atomic batches: 10,000 events take about a second, where one by one took ten.
        let copies: Vec<NewEvent> = source
            .into_iter()
            .filter(|e| e.seq <= fork.at_seq)
            .map(|e| NewEvent { id: copied_id(cmd_id, e.seq), source: e.source, body: e.body, trace: trace.clone() })
            .collect();
        let events = copies.len();
        log.append_all(copies).await.map_err(|e| e.to_string())?;
        // A fork of a conversation that was working at that event is not working: it waits for
        // the user, as does one that was paused (its sandbox is not).
        let status = match log.history.status {
            Some(
                s @ (ExecutionStatus::Finished | ExecutionStatus::Error | ExecutionStatus::Stuck | ExecutionStatus::WaitingForConfirmation),
            ) => s,
            _ => ExecutionStatus::Idle,
        };
        let reason = Some(format!("forked from conversation {} at event {}", fork.conversation_id, fork.at_seq));
        let body = EventBody::ExecutionStatus { status, reason };
        log.append(derived(cmd_id, 4), EventSource::System, body, trace).await.map_err(|e| e.to_string())?;
        let ms = began.elapsed().as_millis() as u64;
        tracing::info!(conversation_id = %self.id, source = %fork.conversation_id, at_seq = fork.at_seq, events, ms, "fork's log copied");
        Ok(())
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

    async fn start_run(&mut self, myself: &ActorRef<ConvMsg>, trace: Option<TraceContext>) -> Result<(), String> {
        self.start_run_with(myself, trace, false).await
    }

    /// Starts a run, or has it started when the lease bucket answers again (for starts no
    /// command waits on).
    async fn start_run_or_later(&mut self, myself: &ActorRef<ConvMsg>, trace: Option<TraceContext>, confirmed: bool) {
        if let Err(e) = self.start_run_with(myself, trace, confirmed).await {
            tracing::warn!(conversation_id = %self.id, error = %e, "the run waits for the lease bucket");
            myself.send_after(Duration::from_secs(1), move || ConvMsg::StartRun { confirmed });
        }
    }

    /// Starts a run; `confirmed`: the user confirmed the waiting actions, which run first. No
    /// run starts without the run lease: `Err` when the lease bucket cannot be reached (the
    /// caller tries again), `Ok` without a run when another live runner runs the conversation.
    async fn start_run_with(&mut self, myself: &ActorRef<ConvMsg>, trace: Option<TraceContext>, confirmed: bool) -> Result<(), String> {
        let Some(log) = self.log.clone() else { return Ok(()) };
        if !self.take_lease().await? {
            return Ok(());
        }
        self.runs += 1;
        let id = self.runs;
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (interrupt_tx, interrupt_rx) = watch::channel(false);
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
            llm: halyard_platform::llm::fallback::LlmChain::single(self.ctx.llm.clone()),
            env: Default::default(),
            has_forge: false,
            max_iterations: self.ctx.config.agent.max_iterations,
            mcp: self.mcp.clone(),
            tool_set: Default::default(),
            vision: true,
            checkpointing: Default::default(),
            helper_agents: Vec::new(),
        };
        let me = myself.clone();
        let ctx = self.ctx.clone();
        let held = self.held.clone();
        let conv = self.id;
        let trace_id = trace.as_ref().and_then(halyard_platform::telemetry::trace_id).unwrap_or_default().to_owned();
        let span = tracing::info_span!("agent_run", conversation_id = %self.id, run = id, %trace_id);
        halyard_platform::telemetry::continue_trace(&span, trace.as_ref());
        let join = tokio::spawn(tracing::Instrument::instrument(
            async move {
                // Renew the lease while the run lives. A renewal that does not get through (a
                // NATS node is down) is tried again; one refused because another runner took
                // the lease over ends this run at once, without another append. (A run starts
                // holding the lease; one that somehow has none takes it as soon as it can.)
                let renew = async {
                    loop {
                        tokio::time::sleep(ctx.leases.renew_every()).await;
                        let current = *held.lock().unwrap_or_else(|p| p.into_inner());
                        let Some(current) = current else {
                            match ctx.leases.acquire(conv, None).await {
                                Ok(Acquire::Held(h)) => *held.lock().unwrap_or_else(|p| p.into_inner()) = Some(h),
                                Ok(Acquire::Busy { node }) => {
                                    tracing::warn!(conversation_id = %conv, %node, "another runner runs this conversation");
                                    return;
                                }
                                Err(e) => tracing::warn!(conversation_id = %conv, error = %e, "cannot take the run lease yet"),
                            }
                            continue;
                        };
                        match ctx.leases.renew(conv, current).await {
                            Ok(next) => *held.lock().unwrap_or_else(|p| p.into_inner()) = Some(next),
                            Err(e) if e.kind() == async_nats::jetstream::kv::UpdateErrorKind::WrongLastRevision => {
                                tracing::warn!(conversation_id = %conv, "another runner took this run over");
                                return;
                            }
                            Err(e) => tracing::warn!(conversation_id = %conv, error = %e, "cannot renew the run lease"),
                        }
                    }
                };
                let outcome = tokio::select! {
                    o = crate::drive::run(run) => o,
                    _ = renew => RunOutcome::LostLease,
                };
                let _ = me.send_message(ConvMsg::RunEnded { run: id, outcome });
                outcome
            },
            span,
        ));
        self.run = Some(LiveRun::new(id, cancel_tx, interrupt_tx, join, read_upto));
        Ok(())
    }

    /// Pauses; `id` is the event's, derived from the command's, so a redelivered pause that
    /// was applied before its handler died is not applied again.
    async fn pause(&mut self, id: EventId, trace: Option<TraceContext>) {
        if self.paused || self.applied(id).await {
            return;
        }
        let mut was_running = false;
        if let Some(mut run) = self.run.take() {
            let _ = run.cancel.send(true);
            was_running = matches!((&mut run.join).await, Ok(RunOutcome::Paused));
            self.release_lease().await;
        }
        self.paused = true;
        self.owed = self.owed || was_running;
        let Some(log) = self.log.clone() else { return };
        let reason = was_running.then(|| "paused during a run; resume continues it".to_owned());
        let helper = {
            let mut log = log.lock().await;
            let status = EventBody::ExecutionStatus { status: ExecutionStatus::Paused, reason };
            let _ = log.append(id, EventSource::User, status, trace.clone()).await;
            log.history.started.as_ref().is_some_and(|s| s.parent.is_some())
        };
        // A helper's sandbox is its parent's, which works on (or is paused with the parent).
        if helper {
            return;
        }
        if let Some(sandbox_id) = self.sandbox_id().await {
            if let Err(e) =
                bus::send(&self.ctx.js, subjects::sandbox_command(sandbox_id), SandboxCommand::Pause { sandbox_id }, trace).await
            {
                tracing::warn!(conversation_id = %self.id, error = %e, "cannot pause sandbox");
            }
        }
    }

    /// Resumes; `id` as for [`Self::pause`].
    async fn resume(&mut self, myself: &ActorRef<ConvMsg>, id: EventId, trace: Option<TraceContext>) {
        if !self.paused || self.applied(id).await {
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
            self.start_run_or_later(myself, trace, false).await;
        } else if let Some(log) = self.log.clone() {
            let _ = log
                .lock()
                .await
                .append(
                    id,
                    EventSource::User,
                    EventBody::ExecutionStatus { status: ExecutionStatus::Idle, reason: Some("resumed".into()) },
                    trace,
                )
                .await;
        }
    }

    /// Whether the log already holds event `id` (its command was applied before).
    async fn applied(&self, id: EventId) -> bool {
        match &self.log {
            Some(log) => log.lock().await.history.seen.contains(&id),
            None => false,
        }
    }

    async fn sandbox_id(&self) -> Option<halyard_protocol::SandboxId> {
        let log = self.log.as_ref()?;
        log.lock().await.history.started.as_ref().map(|s| s.sandbox_id)
    }
}
