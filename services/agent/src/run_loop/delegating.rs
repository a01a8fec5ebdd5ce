//! The run's side of `delegate` ([`crate::tools::delegate`]): the helpers are recorded, asked
//! for, and watched until each has ended; each end is an event of the parent's (what the helper
//! said and used, which the parent's budget covers), and the tool's result holds them all.

use std::time::{Duration, Instant};

use halyard_platform::derived::{Namespace, derived_uuid};
use halyard_protocol::command::AgentCommand;
use halyard_protocol::event::{EventBody, EventSource, SubConversation};
use halyard_protocol::system::ParentLink;
use halyard_protocol::{CommandId, ConversationId};
use serde_json::Value;

use super::{Run, RunOutcome};
use crate::tools::ToolOutcome;
use crate::tools::delegate::{self, Watched};

/// How long helpers are given to stop after an interrupt before the parent reports without
/// their last words.
const STOP_PATIENCE: Duration = Duration::from_secs(15);

fn refused(content: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Observation { content: content.into(), exit_code: None, is_error: true }
}

impl Run {
    /// Runs a `delegate` call to its end: `Ok` with its result, `Err` when the run ends here
    /// (paused: the helpers were paused with it, and resuming watches them again; or the log
    /// failed).
    pub(super) async fn delegate(&self, call_id: &str, args: &Value) -> Result<ToolOutcome, RunOutcome> {
        let agent = &self.ctx.config.agent;
        let tasks = match delegate::parse(args, agent.max_delegates, &self.helper_agents) {
            Ok(tasks) => tasks,
            Err(why) => return Ok(refused(why)),
        };
        let (me, start, recorded, used_before) = match self.helpers_start(call_id, tasks.len()).await {
            Ok(planned) => planned,
            Err(refusal) => return Ok(refusal),
        };
        let children: Vec<SubConversation> = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| SubConversation { conversation_id: delegate::helper_id(me, call_id, i), title: t.title.clone() })
            .collect();
        if recorded.is_none() {
            let body = EventBody::SubConversationsStarted { tool_call_id: call_id.to_owned(), children: children.clone() };
            if !self.append(EventSource::Agent, body).await {
                return Err(RunOutcome::Failed);
            }
            for (i, task) in tasks.iter().enumerate() {
                if let Err(e) = delegate::start(&self.ctx.js, &start, i, task).await {
                    tracing::warn!(helper = %children[i].conversation_id, error = %e, "cannot start a helper");
                    // Its watch finds no log and no start: reported as it is.
                }
            }
            tracing::info!(conversation_id = %me, helpers = children.len(), "helpers started");
        }
        let mut watched: Vec<Watched> =
            children.into_iter().enumerate().map(|(i, c)| Watched::new(c, delegate::task_of(me, call_id, i))).collect();
        let already_ended = self.log.lock().await.history.helpers_ended.clone();
        let budget = self.log.lock().await.history.budget.clone();
        let price = self.llm.primary().price().is_some();
        let mut stopping: Option<Instant> = None;
        let mut over_budget: Option<String> = None;
        let mut unstarted_since = Instant::now();
        loop {
            for w in watched.iter_mut().filter(|w| w.ended.is_none()) {
                if let Err(e) = w.look(&self.ctx.js).await {
                    tracing::warn!(helper = %w.child.conversation_id, error = %e, "cannot read a helper's log; trying again");
                    continue;
                }
                let new_end = w.ended.is_some() && !already_ended.contains_key(&w.child.conversation_id);
                if new_end && !self.append(EventSource::System, w.ended_event(call_id)).await {
                    return Err(RunOutcome::Failed);
                }
            }
            if watched.iter().all(|w| w.ended.is_some()) {
                break;
            }
            // A helper whose start never arrived (its command lost with a bus that failed) is
            // asked for again now and then; the command's id makes that harmless.
            if unstarted_since.elapsed() > Duration::from_secs(30) {
                unstarted_since = Instant::now();
                for (i, task) in tasks.iter().enumerate() {
                    if watched[i].ended.is_none() && !watched[i].has_events() {
                        let _ = delegate::start(&self.ctx.js, &start, i, task).await;
                    }
                }
            }
            let live: Vec<ConversationId> = watched.iter().filter(|w| w.ended.is_none()).map(|w| w.child.conversation_id).collect();
            // The parent's budget covers its helpers together: past it, they are stopped.
            if over_budget.is_none() {
                let tokens = used_before.0 + watched.iter().map(|w| w.used_tokens).sum::<u64>();
                let usd = used_before.1 + watched.iter().map(|w| w.used_usd).sum::<f64>();
                let passed = budget.max_tokens.is_some_and(|max| tokens > max)
                    || budget.max_budget_usd.filter(|_| price).is_some_and(|max| usd > max);
                if passed {
                    over_budget = Some(format!(
                        "[The helpers were stopped: with them this conversation used {tokens} tokens (${usd:.4}), past its budget.]"
                    ));
                    let parts: [&[u8]; 3] = [b"halyard-helpers-over-budget", me.as_bytes(), call_id.as_bytes()];
                    let cause = CommandId(derived_uuid(Namespace::Hashed(&parts)));
                    delegate::tell(&self.ctx.js, &live, cause, |c| AgentCommand::Interrupt { conversation_id: c }, self.trace.clone())
                        .await;
                    stopping.get_or_insert_with(Instant::now);
                }
            }
            // An interrupt of the parent reached its helpers (see the conversation's commands):
            // their last words are waited for, a while.
            if self.interrupt_requested() {
                stopping.get_or_insert_with(Instant::now);
            }
            if stopping.is_some_and(|at| at.elapsed() > STOP_PATIENCE) {
                break;
            }
            tokio::select! {
                _ = Self::until_set(self.cancel.clone()) => return Err(RunOutcome::Paused),
                _ = tokio::time::sleep(delegate::POLL) => {}
            }
        }
        // Helpers that did not stop in time are no longer waited for: what they used so far is
        // paid now (and they are no longer reached by what reaches the parent).
        for w in watched.iter_mut().filter(|w| w.ended.is_none()) {
            w.ended = Some("stopped".into());
            w.last_error.get_or_insert_with(|| "It did not stop in time; the parent stopped waiting for it.".into());
            if !self.append(EventSource::System, w.ended_event(call_id)).await {
                return Err(RunOutcome::Failed);
            }
        }
        let mut content = String::from("The helpers ended:\n\n");
        content.push_str(&watched.iter().enumerate().map(|(i, w)| w.report(i)).collect::<Vec<_>>().join("\n\n"));
        if let Some(note) = over_budget {
            content.push_str(&format!("\n\n{note}"));
        } else if self.interrupt_requested() {
            content.push_str("\n\n[Interrupted by the user: the helpers were interrupted too.]");
        }
        let failed = watched.iter().all(|w| w.ended.as_deref() != Some("finished") && w.ended.as_deref() != Some("idle"));
        Ok(ToolOutcome::Observation { content, exit_code: None, is_error: failed })
    }

    /// What starting `helpers` helpers for call `call_id` takes: this conversation's id, the
    /// start each helper gets (its share of the budget left, the owner's settings, its link to
    /// the parent), the helpers this call already started (a repeated call), and what the parent
    /// had used before them; or the refusal the model reads.
    async fn helpers_start(
        &self,
        call_id: &str,
        helpers: usize,
    ) -> Result<(ConversationId, delegate::Start, Option<Vec<SubConversation>>, (u64, f64)), ToolOutcome> {
        let agent = &self.ctx.config.agent;
        let log = self.log.lock().await;
        let h = &log.history;
        let Some(started) = &h.started else { return Err(refused("The conversation has not started.")) };
        let depth = h.depth() + 1;
        if depth > agent.max_delegation_depth {
            return Err(refused(format!(
                "Helpers cannot be started here: this deployment allows helpers {} level{} deep, and this conversation is \
                 at that depth. Do the work yourself.",
                agent.max_delegation_depth,
                if agent.max_delegation_depth == 1 { "" } else { "s" }
            )));
        }
        let me = log.conversation();
        let recorded = h.helpers.iter().find(|(c, _)| c == call_id).map(|(_, children)| children.clone());
        // What this call's helpers used is counted once they end; before that the parent's
        // own use is the base their sum is added to.
        let mine: Vec<ConversationId> = (0..helpers).map(|i| delegate::helper_id(me, call_id, i)).collect();
        let (t, u) = mine.iter().filter_map(|c| h.helpers_ended.get(c)).fold((0, 0.0), |(t, u), (ht, hu)| (t + ht, u + hu));
        let used_before = (h.used_tokens.saturating_sub(t), h.used_usd - u);
        // Each helper's share of what the parent had left when it called (the same for a
        // repeated call: the parent makes no LLM call while it waits).
        let budget = match delegate::shares(&h.budget, used_before.0, used_before.1, helpers) {
            Ok(b) => b,
            Err(why) if recorded.is_none() => return Err(refused(why)),
            Err(_) => None,
        };
        let start = delegate::Start {
            parent: me,
            owner: started.owner.clone(),
            link: ParentLink { conversation_id: me, sandbox_id: started.sandbox_id, tool_call_id: call_id.to_owned(), depth, agent: None },
            budget,
            llm_profile: h.llm_profile.clone(),
            secrets: h.secrets.clone(),
            confirmation_policy: h.policy,
            org: started.org.clone(),
            trace: self.trace.clone(),
            plugins: started.plugins.clone(),
            agents: self.helper_agents.clone(),
        };
        Ok((me, start, recorded, used_before))
    }
}
