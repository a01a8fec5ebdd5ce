//! Bus helpers every service uses the same way: publishing with de-duplication ids, reading the
//! latest record of an entity ([`direct`] gets), replaying a conversation's event log (appending
//! to it is [`log`]'s), and a consumer loop that parks poison messages instead of retrying them
//! forever.

use std::time::Duration;

use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, AckKind, consumer};
use futures::StreamExt;
use serde::de::DeserializeOwned;

use halyard_protocol::envelope::Payload;
use halyard_protocol::event::ConversationEvent;
use halyard_protocol::{ConversationId, Envelope, TraceContext, subjects};

use crate::error::{BusError, BusErrorKind};

mod direct;
mod log;
use direct::err;
pub use direct::{direct_batch, direct_batch_since, direct_last_of, last_message, last_record};
pub use log::{BATCH_MAX, EventAppender, NewEvent, last_event};

/// Publishes an envelope and waits for JetStream to store it. The envelope id is the
/// `Nats-Msg-Id`, so publishing the same envelope twice stores it once.
///
/// A stream that cannot take it right now (its leader is being elected after a NATS node died,
/// the connection is moving to another node) is tried again for a few seconds: the message id
/// makes a retry of a publish that was stored after all a no-op.
pub async fn publish<P: Payload>(js: &jetstream::Context, subject: String, env: &Envelope<P>) -> Result<u64, BusError> {
    use async_nats::jetstream::context::PublishErrorKind as Kind;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut delay = Duration::from_millis(50);
    loop {
        let attempt = match publish_pending(js, subject.clone(), env).await {
            Ok(pending) => pending.await,
            Err(e) => return Err(e),
        };
        match attempt {
            Ok(ack) => return Ok(ack.sequence),
            Err(e)
                if matches!(e.kind(), Kind::StreamNotFound | Kind::TimedOut | Kind::BrokenPipe | Kind::Other)
                    && tokio::time::Instant::now() + delay < deadline =>
            {
                tracing::debug!(%subject, error = %e, "publish not stored yet; trying again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(err(BusErrorKind::Publish)(&e)),
        }
    }
}

/// Sends an envelope (de-duplicated by its id, like [`publish`]) without waiting for the
/// acknowledgement; the caller awaits the returned future, so many can be in flight at once.
pub async fn publish_pending<P: Payload>(
    js: &jetstream::Context,
    subject: String,
    env: &Envelope<P>,
) -> Result<jetstream::context::PublishAckFuture, BusError> {
    let bytes = halyard_protocol::encode(env)?;
    js.send_publish(subject, PublishMessage::build().payload(bytes.into()).message_id(env.id.to_string()))
        .await
        .map_err(|e| err(BusErrorKind::Publish)(&e))
}

/// Publishes a payload in a fresh envelope carrying `trace`.
pub async fn send<P: Payload>(js: &jetstream::Context, subject: String, payload: P, trace: Option<TraceContext>) -> Result<u64, BusError> {
    let mut env = Envelope::new(payload, crate::now_ms());
    env.trace = trace;
    publish(js, subject, &env).await
}

/// Every event of a conversation with `seq > after`, in order, to the end of the log: batched
/// direct gets, so no consumer is created for a replay.
pub async fn read_events(js: &jetstream::Context, conversation: ConversationId, after: u64) -> Result<Vec<ConversationEvent>, BusError> {
    const BATCH: usize = 1024;
    let filter = subjects::conversation_events(conversation);
    let mut out = Vec::new();
    let mut from = 1;
    loop {
        let batch = direct_batch(js, subjects::EVENTS_STREAM, &filter, from, BATCH).await?;
        let got = batch.len();
        for (stream_seq, payload) in batch {
            from = stream_seq + 1;
            let env: Envelope<ConversationEvent> = halyard_protocol::decode(&payload)?;
            if env.payload.seq > after {
                out.push(env.payload);
            }
        }
        if got < BATCH {
            return Ok(out);
        }
    }
}

/// One message from a durable consumer, with the ways to settle it.
#[derive(Debug)]
pub struct Delivery {
    msg: jetstream::Message,
    js: jetstream::Context,
    service: &'static str,
    max_deliver: i64,
    /// The envelope's kind, for fault injection (empty if it does not decode).
    kind: String,
}

impl Delivery {
    pub fn payload(&self) -> &[u8] {
        &self.msg.payload
    }

    pub fn subject(&self) -> &str {
        self.msg.subject.as_str()
    }

    /// Where the message sits in its stream.
    pub fn stream_sequence(&self) -> Option<u64> {
        self.msg.info().ok().map(|i| i.stream_sequence)
    }

    /// How many times this message has been delivered (1 the first time).
    pub fn delivered(&self) -> i64 {
        self.msg.info().map(|i| i.delivered).unwrap_or(1)
    }

    /// Decodes the payload; a message that does not decode is parked and `None` returned.
    pub async fn decode<P: DeserializeOwned>(self) -> Option<(Envelope<P>, Delivery)> {
        match halyard_protocol::decode::<P>(self.payload()) {
            Ok(env) => Some((env, self)),
            Err(e) => {
                self.park(&format!("undecodable: {e}")).await;
                None
            }
        }
    }

    /// Done: remove it.
    pub async fn ack(self) {
        crate::fault::hit(self.service, &self.kind, crate::fault::Point::BeforeAck);
        if let Err(e) = self.msg.ack().await {
            tracing::warn!(service = self.service, error = %e, "ack failed; the message will be redelivered");
        }
        crate::fault::hit(self.service, &self.kind, crate::fault::Point::AfterAck);
    }

    /// Still working: postpone redelivery by one ack-wait period.
    pub async fn in_progress(&self) {
        let _ = self.msg.ack_with(AckKind::Progress).await;
    }

    /// Try again after `delay`, unless it has been tried too often: then park it.
    pub async fn retry(self, delay: Duration, reason: &str) {
        let delivered = self.delivered();
        if self.max_deliver > 0 && delivered >= self.max_deliver {
            self.park(&format!("gave up after {delivered} deliveries: {reason}")).await;
        } else if let Err(e) = self.msg.ack_with(AckKind::Nak(Some(delay))).await {
            tracing::warn!(service = self.service, error = %e, "nak failed");
        }
    }

    /// Move it to the dead-letter stream (with the reason and original subject in headers) and
    /// remove it from the consumer. Parked messages are kept for inspection, never retried.
    pub async fn park(self, reason: &str) {
        tracing::error!(service = self.service, subject = %self.msg.subject, %reason, "parking poison message");
        metrics::counter!("halyard_messages_parked_total", "service" => self.service).increment(1);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Halyard-Reason", sanitize_header(reason).as_str());
        headers.insert("Halyard-Subject", self.msg.subject.as_str());
        headers.insert("Halyard-Service", self.service);
        let publish = PublishMessage::build().payload(self.msg.payload.clone()).headers(headers);
        match self.js.send_publish(subjects::dead_letter(self.service), publish).await {
            Ok(ack) => {
                if let Err(e) = ack.await {
                    tracing::error!(error = %e, "dead-letter publish not acknowledged; leaving message for redelivery");
                    return;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "dead-letter publish failed; leaving message for redelivery");
                return;
            }
        }
        let _ = self.msg.ack_with(AckKind::Term).await;
    }
}

fn sanitize_header(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(500).collect()
}

/// Pulls from a durable consumer declared under `nats/` until shutdown, handing each message to
/// `handler` in order. The handler settles the [`Delivery`] itself (possibly later, from a task
/// it spawns), which lets a service keep per-entity order while working on many entities.
pub async fn consume<F, Fut>(
    js: jetstream::Context,
    stream: &str,
    consumer_name: &str,
    service: &'static str,
    mut shutdown: crate::Shutdown,
    mut handler: F,
) -> Result<(), BusError>
where
    F: FnMut(Delivery) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let stream_name = stream.to_owned();
    let stream = js.get_stream_no_info(stream).await.map_err(|e| err(BusErrorKind::Consume)(&e))?;
    let mut consumer: consumer::PullConsumer = stream.get_consumer(consumer_name).await.map_err(|e| err(BusErrorKind::Consume)(&e))?;
    let info = consumer.info().await.map(|i| i.config.clone()).ok();
    let max_deliver = info.as_ref().map_or(5, |c| c.max_deliver);
    // A consumer that pins one client at a time (to keep its messages' order across
    // replicas) is pulled in its priority group; this client stands by until it is pinned.
    let group =
        info.filter(|c| c.priority_policy == consumer::PriorityPolicy::PinnedClient).and_then(|c| c.priority_groups.first().cloned());
    let mut messages = pull_messages_in(&consumer, group.clone()).await.map_err(|e| err(BusErrorKind::Consume)(&e))?;
    // Errors in a row (missed heartbeats: the node this pull waited on died, or the stream
    // changed leader): past a few, the pull is made again rather than logged forever.
    let mut failing = 0u32;
    loop {
        let next = tokio::select! {
            _ = shutdown.wait() => return Ok(()),
            next = messages.next() => next,
        };
        if matches!(next, Some(Err(_))) {
            failing += 1;
        } else {
            failing = 0;
        }
        if failing >= REMAKE_AFTER {
            match remake(&js, &stream_name, consumer_name, group.clone()).await {
                Ok(m) => {
                    tracing::info!(service, consumer = consumer_name, "consumer made again after repeated errors");
                    metrics::counter!("halyard_consumer_remakes_total", "service" => service).increment(1);
                    messages = m;
                    failing = 0;
                }
                Err(e) => {
                    tracing::warn!(service, consumer = consumer_name, error = %e, "cannot make the consumer again yet");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            continue;
        }
        match next {
            Some(Ok(msg)) => {
                // Only tests with fault injection pay for reading the kind here.
                let kind = if crate::fault::active() {
                    halyard_protocol::decode::<serde::de::IgnoredAny>(&msg.payload).map(|env| env.kind).unwrap_or_default()
                } else {
                    String::new()
                };
                crate::fault::hit(service, &kind, crate::fault::Point::Received);
                if msg.info().is_ok_and(|i| i.delivered > 1) {
                    metrics::counter!("halyard_messages_redelivered_total", "service" => service).increment(1);
                }
                handler(Delivery { msg, js: js.clone(), service, max_deliver, kind }).await
            }
            Some(Err(e)) => {
                // Heartbeat misses and similar are transient; the stream recovers by itself.
                tracing::warn!(service, error = %e, "consumer error");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            None => return Err(BusError::new(BusErrorKind::Consume, format!("consumer {consumer_name} ended"))),
        }
    }
}

/// Consecutive consumer errors after which a pull is made again.
const REMAKE_AFTER: u32 = 3;

/// A new pull on the durable consumer `name` of `stream`, looked up again.
async fn remake(js: &jetstream::Context, stream: &str, name: &str, group: Option<String>) -> Result<consumer::pull::Stream, BusError> {
    let stream = js.get_stream_no_info(stream).await.map_err(|e| err(BusErrorKind::Consume)(&e))?;
    let consumer: consumer::PullConsumer = stream.get_consumer(name).await.map_err(|e| err(BusErrorKind::Consume)(&e))?;
    pull_messages_in(&consumer, group).await.map_err(|e| err(BusErrorKind::Consume)(&e))
}

/// A durable consumer's messages, with short pull requests and heartbeats: when the NATS node
/// a pull waits on dies, the client notices within seconds (a missed heartbeat) and pulls again
/// from another node, rather than after the library's default half-minute.
pub async fn pull_messages(consumer: &consumer::PullConsumer) -> Result<consumer::pull::Stream, consumer::StreamError> {
    pull_messages_in(consumer, None).await
}

/// Like [`pull_messages`], pulling in a priority `group` when one is given (a consumer that
/// pins one client at a time).
pub async fn pull_messages_in(
    consumer: &consumer::PullConsumer,
    group: Option<String>,
) -> Result<consumer::pull::Stream, consumer::StreamError> {
    let pulls = consumer.stream().expires(Duration::from_secs(5)).heartbeat(Duration::from_secs(1));
    match group {
        Some(group) => pulls.group(group).messages().await,
        None => pulls.messages().await,
    }
}

/// Consumes a durable consumer until `shutdown`, decoding each message as `P` and handing it to
/// `actor` (wrapped by `wrap`), which settles it; undecodable ones are parked. The pattern of
/// every service whose live state is held by a supervising actor.
pub async fn consume_into_actor<P, M>(
    js: jetstream::Context,
    stream: &str,
    consumer_name: &str,
    service: &'static str,
    shutdown: crate::Shutdown,
    actor: ractor::ActorRef<M>,
    wrap: fn(Envelope<P>, Delivery) -> M,
) -> Result<(), BusError>
where
    P: DeserializeOwned,
    M: ractor::Message,
{
    consume(js, stream, consumer_name, service, shutdown, |delivery| {
        let actor = actor.clone();
        async move {
            if let Some((env, delivery)) = delivery.decode::<P>().await {
                if actor.send_message(wrap(env, delivery)).is_err() {
                    tracing::error!(service, "the actor that handles this consumer is gone");
                }
            }
        }
    })
    .await
}

/// Sends `command` (if any) to a sandbox and waits until the sandbox runs, failing if it ends
/// up in ERROR, MISSING or DELETED or `patience` runs out. Subscribes before sending, then
/// looks at the stored record, so an answer can never slip past. A wake that has to wait in
/// the start queue fails at once, in words (`wake queued: ...`; it still happens later): a
/// request is not held for the queue's deadline.
pub async fn await_sandbox(
    nats: &async_nats::Client,
    js: &jetstream::Context,
    sandbox: halyard_protocol::SandboxId,
    command: Option<Envelope<halyard_protocol::command::SandboxCommand>>,
    patience: Duration,
) -> Result<halyard_protocol::system::SandboxUpdate, String> {
    await_sandbox_telling(nats, js, sandbox, command, Wait { patience, in_line: false }, None).await
}

/// How long [`await_sandbox_telling`] waits.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    pub patience: Duration,
    /// Whether a wake that waits in the start queue is waited for, until its deadline (then
    /// `patience` more, for the start itself).
    pub in_line: bool,
}

/// [`await_sandbox`], waiting as `wait` says and passing on every record that is not the end
/// of the wait (`QUEUED`, `STARTING`, a wake in line) to `progress`.
pub async fn await_sandbox_telling(
    nats: &async_nats::Client,
    js: &jetstream::Context,
    sandbox: halyard_protocol::SandboxId,
    command: Option<Envelope<halyard_protocol::command::SandboxCommand>>,
    wait: Wait,
    progress: Option<tokio::sync::mpsc::UnboundedSender<halyard_protocol::system::SandboxUpdate>>,
) -> Result<halyard_protocol::system::SandboxUpdate, String> {
    use halyard_protocol::system::{SandboxStatus, SystemRecord};
    let patience = wait.patience;
    let subject = subjects::sandbox_record(sandbox);
    let mut updates = nats.subscribe(subject.clone()).await.map_err(|e| e.to_string())?;
    // (`Ok(Some(until))` of a wake in line: waited for until then.)
    let in_line = |u: &halyard_protocol::system::SandboxUpdate| -> Result<Option<i64>, String> {
        match (u.wake_queued_until, wait.in_line) {
            (None, _) => Ok(None),
            (Some(until), true) => {
                if let Some(p) = &progress {
                    let _ = p.send(u.clone());
                }
                Ok(Some(until))
            }
            (Some(_), false) => Err(u.detail.clone().unwrap_or_else(|| halyard_protocol::queue::WAKE_QUEUED_DETAIL.to_owned())),
        }
    };
    let settle = |u: halyard_protocol::system::SandboxUpdate, fresh: bool| match u.status {
        SandboxStatus::Queued | SandboxStatus::Starting if fresh || u.status == SandboxStatus::Queued => {
            if let Some(p) = &progress {
                let _ = p.send(u);
            }
            Ok(None)
        }
        SandboxStatus::Running => Ok(Some(u)),
        // A stored failure is only final if we did not just ask for a (re)start.
        SandboxStatus::Error | SandboxStatus::Missing | SandboxStatus::Deleted if fresh => {
            Err(u.detail.unwrap_or_else(|| format!("sandbox is {}", u.status.as_str())))
        }
        _ if fresh && u.detail.as_deref().is_some_and(|d| d.starts_with(halyard_protocol::system::REFUSED_PREFIX)) => {
            Err(u.detail.unwrap_or_default())
        }
        _ => Ok(None),
    };
    let asked = command.is_some();
    if let Some(env) = command {
        publish(js, subjects::sandbox_command(sandbox), &env).await.map_err(|e| e.to_string())?;
    }
    let mut deadline = tokio::time::Instant::now() + patience;
    // A wake in line is waited for until its own deadline, then the start's patience.
    let extended = |deadline: tokio::time::Instant, until: i64| {
        let left = Duration::from_millis(u64::try_from(until - crate::now_ms()).unwrap_or(0));
        deadline.max(tokio::time::Instant::now() + left + patience)
    };
    // The stored record, read again while the bus heals (a NATS node lost, a stream electing a
    // leader): a read that timed out is no reason to fail a start.
    let stored = loop {
        match last_record::<SystemRecord>(js, subjects::SYSTEM_STREAM, &subject).await {
            Ok(found) => break found,
            Err(e) if e.is_retryable() && tokio::time::Instant::now() + Duration::from_secs(1) < deadline => {
                tracing::warn!(%sandbox, error = %e, "cannot read the sandbox's record yet; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    if let Some((_, env)) = stored {
        if let SystemRecord::Sandbox(u) = env.payload {
            if !asked {
                if let Some(until) = in_line(&u)? {
                    deadline = extended(deadline, until);
                }
            }
            if let Some(done) = settle(u, !asked)? {
                return Ok(done);
            }
        }
    }
    loop {
        let msg = tokio::time::timeout_at(deadline, updates.next())
            .await
            .map_err(|_| format!("the sandbox did not start within {patience:?}"))?
            .ok_or("subscription closed")?;
        if let Ok(Envelope { payload: SystemRecord::Sandbox(u), .. }) = halyard_protocol::decode::<SystemRecord>(&msg.payload) {
            if let Some(until) = in_line(&u)? {
                deadline = extended(deadline, until);
            }
            if let Some(done) = settle(u, true)? {
                return Ok(done);
            }
        }
    }
}
