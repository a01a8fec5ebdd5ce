//! The run lease of a conversation actor: taken for a run, released after it, and a run taken
//! over from a runner that died holding it (continued from the log, after the command that
//! stopped it, if one did).

use crate::lease::Acquire;
use halyard_platform::bus;
use halyard_protocol::command::AgentCommand;
use halyard_protocol::event::{EventBody, EventSource, ExecutionStatus};
use halyard_protocol::{CommandId, EventId, subjects};
use ractor::ActorRef;

use super::{ConvMsg, ConvState, derived};

impl ConvState {
    /// Takes the run lease (unless this actor holds it already); false if another live runner
    /// runs the conversation, which then answers what was appended. `Err` when the bucket
    /// cannot be reached: a run without the lease is one no other runner could take over if
    /// this one died (a chaos run wedged so), so none starts until the bucket answers.
    pub(super) async fn take_lease(&mut self) -> Result<bool, String> {
        if self.held.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return Ok(true);
        }
        match self.ctx.leases.acquire(self.id, self.released.take()).await {
            Ok(Acquire::Held(h)) => {
                *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
                Ok(true)
            }
            Ok(Acquire::Busy { node }) => {
                tracing::info!(conversation_id = %self.id, %node, "another runner runs this conversation; it answers");
                Ok(false)
            }
            Err(e) => {
                tracing::warn!(conversation_id = %self.id, error = %e, "cannot take the run lease");
                Err(format!("cannot take the run lease: {e}"))
            }
        }
    }

    pub(super) async fn release_lease(&mut self) {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(held) = held {
            self.released = self.ctx.leases.release(self.id, held).await;
        }
    }

    /// Takes over a run whose runner died (its lease seen dead at `revision`): records the
    /// step that was cut off, then continues the run from the log. Several runners may try at
    /// once; the lease's compare-and-set lets exactly one through.
    pub(super) async fn take_over(&mut self, myself: &ActorRef<ConvMsg>, revision: u64) {
        if self.run.is_some() {
            return;
        }
        let held = match self.ctx.leases.take(self.id, revision).await {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(conversation_id = %self.id, error = %e, "another runner took this run first");
                return;
            }
        };
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some(held);
        metrics::counter!("halyard_agent_takeovers_total").increment(1);
        // What this actor knew of the log may be old: the dead runner appended since. (The
        // run reads the owner's secrets into the new log's mask before it appends.)
        self.log = None;
        self.secrets_read = false;
        let Ok(log) = self.log().await else {
            self.release_lease().await;
            return;
        };
        let continues = {
            let mut log = log.lock().await;
            let running = log.history.status == Some(ExecutionStatus::Running);
            if running {
                tracing::warn!(conversation_id = %self.id, "taking over a run whose agent runner stopped");
                let message = "The agent run was interrupted (its agent runner stopped); it continues from the log.".to_owned();
                let _ = log
                    .append(EventId::new(), EventSource::System, EventBody::AgentError { code: "run_interrupted".into(), message }, None)
                    .await;
                // The tool calls that were cut off get a result that says so: the model
                // decides whether to run them again (their effects may or may not have
                // happened).
                // (A `delegate` call's helpers work on: the continued run watches them again.)
                for p in log.history.pending.clone().into_iter().filter(|p| p.tool != "delegate") {
                    let body = EventBody::observation(
                        p.tool_call_id,
                        p.tool,
                        "[Interrupted: the agent runner executing this action stopped before it reported a \
                                  result. The action may or may not have taken effect; check before repeating it.]"
                            .into(),
                        None,
                        true,
                    );
                    let _ = log.append(EventId::new(), EventSource::System, body, None).await;
                }
            }
            running
        };
        if !continues || self.paused {
            self.release_lease().await;
            return;
        }
        // Commands the dead runner took and never applied are still in the stream (a work
        // queue keeps what is unacknowledged); one that stops the run is honoured before the
        // run goes on, or the run would outrun it until its redelivery.
        match self.stopping_command().await {
            Some((cmd_id, AgentCommand::Interrupt { .. })) => {
                let body = EventBody::ExecutionStatus { status: ExecutionStatus::Idle, reason: Some("interrupted by the user".into()) };
                let _ = log.lock().await.append(derived(cmd_id, 0x49), EventSource::System, body, None).await;
                self.release_lease().await;
            }
            Some(_) => {
                // A pause (applied at its redelivery) or a deletion: the run waits.
                self.owed = true;
                self.release_lease().await;
            }
            None => self.start_run_or_later(myself, None, false).await,
        }
    }

    /// The newest unacknowledged command of this conversation that stops its run (interrupt,
    /// pause, delete), if any.
    pub(super) async fn stopping_command(&self) -> Option<(CommandId, AgentCommand)> {
        // A work queue keeps only what is unacknowledged: every message left on the subject.
        let pending = match bus::direct_batch(&self.ctx.js, subjects::COMMANDS_STREAM, &subjects::agent_command(self.id), 1, 100).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(conversation_id = %self.id, error = %e, "cannot read the conversation's waiting commands");
                return None;
            }
        };
        pending
            .iter()
            .rev()
            .filter_map(|(_, bytes)| halyard_protocol::decode::<AgentCommand>(bytes).ok())
            .find(|env| matches!(env.payload, AgentCommand::Interrupt { .. } | AgentCommand::Pause { .. } | AgentCommand::Delete { .. }))
            .map(|env| (env.id, env.payload))
    }
}
