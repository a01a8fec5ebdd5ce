//! Keeping a long run within the model's context window: the oldest part of the history
//! summarized by the LLM into a `condensation` event when the prompt would pass the window less
//! a reserve for the answer.

use crate::condense;
use crate::history::{message_tokens, summary_message};
use halyard_protocol::event::{EventBody, EventSource};
use std::time::Duration;

use super::{Run, RunOutcome, Setting, llm_call};

impl Run {
    /// Condenses the history if the next prompt would pass the model's budget (`force`: the
    /// provider said it did, whatever our count says). `Err` if the run ends here. The
    /// summarizer's time is added to `elsewhere`.
    pub(super) async fn condense(&self, setting: &Setting, force: bool, elsewhere: &mut Duration) -> Result<(), RunOutcome> {
        let budget = self.llm.primary().prompt_budget();
        let counter = &setting.counter;
        let planned = {
            let mut log = self.log.lock().await;
            let fixed = setting.fixed_tokens;
            let tokens = condense::prompt_tokens(&mut log.history, counter, fixed, budget);
            if !force && tokens <= budget {
                return Ok(());
            }
            // Keep about half of what the history may hold; after a context-length error, a
            // quarter of what it holds now.
            let room = budget.saturating_sub(fixed);
            let keep = if force { (room / 2).min(tokens.saturating_sub(fixed) / 4) } else { room / 2 };
            condense::plan(&mut log.history, counter, fixed, keep).map(|plan| (plan, log.history.summary.as_ref().map(|s| s.0.clone())))
        };
        let Some((plan, previous)) = planned else {
            if force {
                let message = "The prompt does not fit the model's context window, and there is nothing left to condense: the \
                               first message or the latest results are too long. Start a new conversation, or use a model with a \
                               larger context window."
                    .to_owned();
                return Err(self.fail("llm_context_window", message).await);
            }
            return Ok(());
        };
        let request = condense::request(previous.as_deref(), &plan, budget / 2);
        let asked_at = std::time::Instant::now();
        let completion = tokio::select! {
            _ = Self::until_set(self.cancel.clone()) => return Err(RunOutcome::Paused),
            _ = Self::until_set(self.interrupt.clone()) => return Err(self.interrupted().await),
            c = self.llm.complete(&request, &[], None) => c,
        };
        *elsewhere += asked_at.elapsed();
        let (completion, by) = match completion {
            Ok(answer) => (answer.completion, answer.by),
            Err(e) => return Err(self.fail(e.code(), format!("Condensing the history failed: the LLM call failed: {e}")).await),
        };
        if !self.append_llm_call(llm_call(by, &request, &completion, asked_at.elapsed())).await {
            return Err(RunOutcome::Failed);
        }
        let summary = completion.content.unwrap_or_default().trim().to_owned();
        if summary.is_empty() {
            return Err(self.fail("llm_malformed", "Condensing the history failed: the LLM wrote an empty summary.".into()).await);
        }
        let tokens_after = plan.tokens_kept + message_tokens(&summary_message(&summary), counter);
        tracing::info!(from_seq = plan.from_seq, upto_seq = plan.upto_seq, tokens_before = plan.tokens_before, tokens_after, "condensed");
        let body = EventBody::Condensation {
            from_seq: plan.from_seq,
            upto_seq: plan.upto_seq,
            summary,
            tokens_before: plan.tokens_before,
            tokens_after,
        };
        if !self.append(EventSource::System, body).await {
            return Err(RunOutcome::Failed);
        }
        Ok(())
    }
}
