//! Fallback chains: an LLM profile may name others (`fallbacks`) that take a call its own
//! provider could not answer. A call goes to the primary first, every time (it may have
//! recovered); when it fails after its own retries with an outage (5xx, 429, a timeout, a refused
//! connection) the next fallback takes the same call, and a prompt too long for the model goes to
//! the first fallback whose context window is larger. A request the provider refuses for what it
//! is (400, 401) fails as it is: another provider would refuse it too, or hide a mistake.

use serde_json::Value;

use super::client::LlmClient;
use super::message::{ChatMessage, Completion, Deltas, LlmError};

/// One client of a chain and the profile it was made from (none: the operator's default).
#[derive(Clone, Debug)]
pub struct Link {
    pub profile: Option<String>,
    pub client: LlmClient,
}

impl Link {
    /// How errors and logs name it: the profile and its model.
    fn label(&self) -> String {
        match &self.profile {
            Some(p) => format!("profile `{p}` ({})", self.client.model()),
            None => format!("the default model ({})", self.client.model()),
        }
    }
}

/// A primary client and its fallbacks, in order. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LlmChain {
    /// Never empty: the primary first.
    links: Vec<Link>,
}

/// A completion and the link that gave it.
pub struct Answer<'a> {
    pub completion: Completion,
    pub by: &'a Link,
}

impl LlmChain {
    pub fn new(primary: Link, fallbacks: Vec<Link>) -> Self {
        Self { links: std::iter::once(primary).chain(fallbacks).collect() }
    }

    /// A chain of one: the operator's default model, with no fallback.
    pub fn single(client: LlmClient) -> Self {
        Self::new(Link { profile: None, client }, Vec::new())
    }

    /// The same chain with `prices` over its clients' own ([`LlmClient::with_prices`]).
    pub fn with_prices(&self, prices: &std::collections::BTreeMap<String, super::config::Price>) -> Self {
        let links = self.links.iter().map(|l| Link { profile: l.profile.clone(), client: l.client.with_prices(prices) }).collect();
        Self { links }
    }

    /// The primary: its model's window, tokens and price are what the run plans with.
    pub fn primary(&self) -> &LlmClient {
        &self.links[0].client
    }

    /// Every link, the primary first.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The fallbacks' profiles, in order.
    pub fn fallbacks(&self) -> impl Iterator<Item = &str> {
        self.links[1..].iter().filter_map(|l| l.profile.as_deref())
    }

    /// One completion: the primary's, or the first fallback's that answers; its text goes to
    /// `deltas` as it is streamed (a fallback starts it again from nothing).
    pub async fn complete(&self, messages: &[ChatMessage], tools: &[Value], deltas: Option<&Deltas>) -> Result<Answer<'_>, LlmError> {
        let mut failed: Vec<(usize, LlmError)> = Vec::new();
        let mut at = 0;
        loop {
            let link = &self.links[at];
            if let (Some(d), false) = (deltas, failed.is_empty()) {
                let _ = d.send(None);
            }
            match link.client.complete_streaming(messages, tools, deltas).await {
                Ok(completion) => {
                    if !failed.is_empty() {
                        metrics::counter!("halyard_llm_fallbacks_total").increment(1);
                        tracing::warn!(answered_by = %link.label(), failed = failed.len(), "an LLM fallback answered");
                    }
                    return Ok(Answer { completion, by: link });
                }
                Err(e) => {
                    let tried = |i: usize| i == at || failed.iter().any(|(j, _)| *j == i);
                    let next = match &e {
                        LlmError::ContextWindow { .. } => {
                            let window = link.client.context_window();
                            (1..self.links.len()).find(|i| !tried(*i) && self.links[*i].client.context_window() > window)
                        }
                        e if e.is_retryable() => (at + 1..self.links.len()).find(|i| !tried(*i)),
                        _ => None,
                    };
                    if let Some(next) = next {
                        tracing::warn!(failed = %link.label(), next = %self.links[next].label(), error = %e, "LLM call failed; trying a fallback");
                    }
                    failed.push((at, e));
                    match next {
                        Some(next) => at = next,
                        None => return Err(self.all_failed(failed)),
                    }
                }
            }
        }
    }

    /// The error of a call no link answered: the one link's as it is, else one naming each.
    fn all_failed(&self, mut failed: Vec<(usize, LlmError)>) -> LlmError {
        if failed.len() == 1 {
            return failed.remove(0).1;
        }
        let each = failed.iter().map(|(i, e)| format!("{}: {e}", self.links[*i].label())).collect::<Vec<_>>().join("; ");
        match failed.pop() {
            // Still too long for every window tried: the run condenses and asks again.
            Some((_, LlmError::ContextWindow { .. })) => LlmError::ContextWindow { body: each },
            Some((_, last)) => LlmError::Exhausted { each, last: Box::new(last) },
            None => LlmError::Malformed("no LLM was asked".into()),
        }
    }
}
