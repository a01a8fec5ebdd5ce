//! The record of an LLM call: the `llm_call` event (tokens, latency, cost where the model has a
//! price) and, in an organization, the month's spending and its budget alerts. Halyard's own
//! loop ([`crate::run_loop`]) and a third-party agent's relay ([`crate::acp::llm`]) both record
//! their calls so.

use std::time::Duration;

use halyard_platform::llm::Usage;
use halyard_platform::llm::fallback::Link;
use halyard_protocol::event::{EventBody, EventSource};
use halyard_protocol::{EventId, TraceContext};
use tokio::sync::Mutex;

use crate::ctx::Ctx;
use crate::log::Log;

/// Appends an `llm_call` and, in an organization, adds its cost to the month's spending, with an
/// alert for each share of a budget it passed. `false` if the log failed.
pub async fn record(ctx: &Ctx, log: &Mutex<Log>, trace: Option<TraceContext>, body: EventBody) -> bool {
    let cost = match &body {
        EventBody::LlmCall { cost_usd: Some(c), .. } if *c > 0.0 => *c,
        _ => 0.0,
    };
    let mut log = log.lock().await;
    if let Err(e) = log.append(EventId::new(), EventSource::System, body, trace.clone()).await {
        tracing::error!(conversation_id = %log.conversation(), error = %e, "cannot append event; ending run");
        return false;
    }
    let Some((org, owner)) = log.history.started.as_ref().and_then(|s| Some((s.org.clone()?, s.owner.clone()))) else { return true };
    if cost == 0.0 {
        return true;
    }
    match crate::org_budget::spend(ctx, &org, &owner, cost).await {
        Ok((month, due)) => {
            for c in due {
                let alert = EventBody::BudgetAlert {
                    org: org.clone(),
                    user: c.user,
                    percent: c.percent,
                    spent_usd: (c.spent_usd * 1e6).round() / 1e6,
                    budget_usd: c.budget_usd,
                    month: month.clone(),
                };
                if log.append(EventId::new(), EventSource::System, alert, trace.clone()).await.is_err() {
                    return false;
                }
            }
        }
        Err(e) => tracing::warn!(org, error = %e, "the organization's spending could not be recorded"),
    }
    true
}

/// The record of one LLM call that `by` answered with `usage` (counted in the metrics too).
pub fn of(by: &Link, usage: Usage, latency: Duration) -> EventBody {
    metrics::counter!("halyard_llm_calls_total").increment(1);
    metrics::counter!("halyard_llm_tokens_total", "kind" => "prompt").increment(usage.prompt_tokens);
    metrics::counter!("halyard_llm_tokens_total", "kind" => "completion").increment(usage.completion_tokens);
    metrics::histogram!("halyard_llm_call_seconds").record(latency.as_secs_f64());
    EventBody::LlmCall {
        model: by.client.model().to_owned(),
        profile: by.profile.clone(),
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        cached_tokens: usage.cached_tokens,
        latency_ms: latency.as_millis() as u64,
        cost_usd: by.client.price().map(|p| p.cost(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)),
    }
}
