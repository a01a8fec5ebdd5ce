//! A conversation's log as one writer sees it: the appender and the history derived from it,
//! kept together under one lock so that every appended event is folded in exactly once. Events
//! go in one at a time, or many in atomic batches ([`Log::append_all`]).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use halyard_platform::bus::{self, EventAppender, NewEvent};
use halyard_platform::redact::Redactor;
use halyard_platform::{BusError, BusErrorKind};
use halyard_protocol::event::{ConversationEvent, EventBody, EventSource};
use halyard_protocol::{ConversationId, EventId, TraceContext};

use crate::history::History;

/// How long an append is tried again while the bus cannot take it.
pub const APPEND_PATIENCE: Duration = Duration::from_secs(60);

/// Appender plus derived history.
#[derive(Debug)]
pub struct Log {
    js: jetstream::Context,
    appender: EventAppender,
    pub history: History,
    /// Masks the owner's secret values in everything appended.
    redactor: Arc<Redactor>,
}

impl Log {
    /// Replays the conversation's events and opens its log for appending.
    pub async fn load(js: jetstream::Context, conversation: ConversationId) -> Result<Self, BusError> {
        let appender = EventAppender::open(js.clone(), conversation).await?;
        let events = bus::read_events(&js, conversation, 0).await?;
        let history = History::from_events(&events);
        let mut log = Self { js, appender, history, redactor: Arc::default() };
        // Events appended between the two reads are picked up here.
        log.catch_up().await?;
        Ok(log)
    }

    /// Masks these secrets from now on.
    pub fn set_redactor(&mut self, redactor: Arc<Redactor>) {
        self.redactor = redactor;
    }

    /// What masks the owner's secrets (for what leaves the runner beside the log).
    pub fn redactor(&self) -> Arc<Redactor> {
        self.redactor.clone()
    }

    /// `body` with the owner's secret values masked (observations also at their edges and
    /// around a cut in the middle: output may have been cut mid-value). Every field is masked,
    /// whatever the kind, through the body's JSON form. It fails closed: a body that cannot be
    /// masked is withheld, never appended as it was.
    fn masked(&self, body: EventBody) -> EventBody {
        if self.redactor.is_empty() {
            return body;
        }
        mask_body(&self.redactor, body)
    }

    pub fn conversation(&self) -> ConversationId {
        self.appender.conversation()
    }

    /// Folds in what other writers appended since this log last looked.
    pub async fn refresh(&mut self) -> Result<(), BusError> {
        self.catch_up().await.map(drop)
    }

    async fn catch_up(&mut self) -> Result<Vec<ConversationEvent>, BusError> {
        self.appender.refresh().await?;
        if self.appender.last_seq() <= self.history.last_seq {
            return Ok(Vec::new());
        }
        let events = bus::read_events(&self.js, self.conversation(), self.history.last_seq).await?;
        for e in &events {
            self.history.apply(e);
        }
        Ok(events)
    }

    /// Appends one event (idempotent by `id`). On a conflict (another writer, such as the title
    /// setter, appended first) it catches up with the log and tries again. A bus that cannot
    /// take it now (a JetStream leader being elected after a node died, which takes seconds on
    /// a busy cluster) is tried again for up to [`APPEND_PATIENCE`].
    pub async fn append(
        &mut self,
        id: EventId,
        source: EventSource,
        body: EventBody,
        trace: Option<TraceContext>,
    ) -> Result<ConversationEvent, BusError> {
        let body = self.masked(body);
        let mut delay = Duration::from_millis(20);
        let mut last_err = None;
        let deadline = tokio::time::Instant::now() + APPEND_PATIENCE;
        let mut conflicts = 0;
        while conflicts < 8 && tokio::time::Instant::now() < deadline {
            match self.appender.append(id, source, body.clone(), trace.clone()).await {
                Ok(ev) => {
                    self.history.apply(&ev);
                    return Ok(ev);
                }
                Err(e) if e.kind == BusErrorKind::Conflict => {
                    conflicts += 1;
                    match self.catch_up().await {
                        Ok(seen) => {
                            if let Some(ev) = seen.into_iter().find(|e| e.id == id) {
                                return Ok(ev);
                            }
                        }
                        Err(e) if e.is_retryable() => tokio::time::sleep(delay).await,
                        Err(e) => return Err(e),
                    }
                    last_err = Some(e);
                }
                Err(e) if e.is_retryable() => {
                    tracing::warn!(conversation_id = %self.conversation(), error = %e, "append failed, retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                    // The publish may have been stored even though the ack was lost.
                    let seen = self.catch_up().await.unwrap_or_default();
                    if let Some(ev) = seen.into_iter().find(|e| e.id == id) {
                        return Ok(ev);
                    }
                    last_err = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| BusError::new(BusErrorKind::Publish, "append gave up")))
    }

    /// Appends many events in order, in atomic batches (a fork's copy of its source's events:
    /// 10,000 of them in a fraction of a second, where one by one took tens of seconds). Each is
    /// masked as [`append`](Self::append) masks it. Idempotent by id, as `append` is: a batch
    /// that meets another writer, or whose acknowledgement was lost, is followed by a catch-up
    /// with the log, and what the log holds by then is not sent again.
    pub async fn append_all(&mut self, events: Vec<NewEvent>) -> Result<(), BusError> {
        let mut rest: std::collections::VecDeque<NewEvent> =
            events.into_iter().map(|e| NewEvent { body: self.masked(e.body), ..e }).collect();
        let mut delay = Duration::from_millis(20);
        let deadline = tokio::time::Instant::now() + APPEND_PATIENCE;
        let mut conflicts = 0;
        loop {
            rest.retain(|e| !self.history.seen.contains(&e.id));
            if rest.is_empty() {
                return Ok(());
            }
            let batch = rest.make_contiguous();
            let failed = match self.appender.append_batch(batch).await {
                Ok(stored) => {
                    for e in &stored {
                        self.history.apply(e);
                    }
                    continue;
                }
                Err(e) if e.kind == BusErrorKind::Conflict => {
                    conflicts += 1;
                    e
                }
                Err(e) if e.is_retryable() => {
                    tracing::warn!(conversation_id = %self.conversation(), error = %e, "batch append failed, retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                    e
                }
                Err(e) => return Err(e),
            };
            if conflicts >= 8 || tokio::time::Instant::now() >= deadline {
                return Err(failed);
            }
            // Another writer's events, or this batch after all (its ack lost): both are folded
            // in here, and the second is then left out of what is sent again.
            if let Err(e) = self.catch_up().await {
                if !e.is_retryable() {
                    return Err(e);
                }
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// What [`Log`] appends for `body` under `redactor` (see [`Log::masked`]).
fn mask_body(redactor: &Redactor, mut body: EventBody) -> EventBody {
    if let EventBody::Observation { content, .. } = &mut body {
        *content = redactor.redact_cuts(content, halyard_protocol::executor::TRUNCATION_MARKER);
    }
    let masked = serde_json::to_value(&body).ok().and_then(|mut value| {
        redactor.redact_json(&mut value);
        serde_json::from_value::<EventBody>(value).ok()
    });
    match (masked, body) {
        (Some(m), _) => m,
        // Withheld, keeping what pairs an action with its result.
        (None, EventBody::Observation { tool_call_id, tool, exit_code, is_error, .. }) => {
            EventBody::observation(tool_call_id, tool, WITHHELD.into(), exit_code, is_error)
        }
        (None, EventBody::Action { tool_call_id, tool, security_risk, .. }) => {
            EventBody::Action { tool_call_id, tool, arguments: serde_json::json!({"withheld": WITHHELD}), thought: None, security_risk }
        }
        (None, _) => EventBody::AgentError { code: "withheld".into(), message: WITHHELD.into() },
    }
}

/// What stands where a body that could not be masked would have been.
const WITHHELD: &str = "[withheld by Halyard: this held a secret value that could not be masked]";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_that_cannot_be_masked_is_withheld_not_appended_as_it_was() {
        // A secret that is also the name of an execution status: masking it would make the
        // body unreadable as an event.
        let r = Redactor::new(vec![("WORD".into(), "finished".into())]);
        let body = EventBody::ExecutionStatus { status: halyard_protocol::event::ExecutionStatus::Finished, reason: None };
        match mask_body(&r, body) {
            EventBody::AgentError { code, message } => assert!(code == "withheld" && !message.contains("finished"), "{message}"),
            other => panic!("appended as it was: {other:?}"),
        }
        let obs = EventBody::observation("c1".into(), "terminal".into(), "finished".into(), Some(0), false);
        match mask_body(&r, obs) {
            EventBody::Observation { tool_call_id, content, .. } => {
                assert_eq!((tool_call_id.as_str(), content.as_str()), ("c1", "<secret:WORD>"))
            }
            other => panic!("{other:?}"),
        }
    }
}
