//! Writing a conversation's event log: [`EventAppender`] appends one event, or many at once in
//! atomic batches (a fork's copy of its source's events), each guarded by the log's expected
//! sequence so that two writers never both write the same `seq`.

use async_nats::HeaderMap;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, context::PublishErrorKind};
use serde::Deserialize;

use halyard_protocol::event::{ConversationEvent, EventBody, EventSource};
use halyard_protocol::{CommandId, ConversationId, Envelope, EventId, TraceContext, subjects};

use super::direct::{err, last_record};
use crate::error::{BusError, BusErrorKind};

/// The most events one atomic batch holds (the server refuses more: "atomic publish batch is too
/// large: 1000").
pub const BATCH_MAX: usize = 1000;

/// About the most bytes one batch holds, so that a batch of large observations keeps the
/// server's (and this process's) memory for it bounded; a single larger event goes alone.
const BATCH_BYTES: usize = 8 << 20;

/// One event to append (its `seq`, conversation and time are the log's to give).
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub id: EventId,
    pub source: EventSource,
    pub body: EventBody,
    pub trace: Option<TraceContext>,
}

/// Appends to one conversation's log. Each append names the stream sequence of the last event
/// it knows (`Nats-Expected-Last-Subject-Sequence`, checked against the whole log
/// `halyard.events.<id>.*` by `Nats-Expected-Last-Subject-Sequence-Subject`, since each event
/// goes to its kind's subject), so JetStream rejects it if anyone else has appended since: two
/// writers can never both write `seq` N. The same check makes a re-append
/// after a lost ack fail instead of storing the event twice; the caller then finds its event
/// (by id) in the log.
#[derive(Debug)]
pub struct EventAppender {
    js: jetstream::Context,
    conversation: ConversationId,
    /// The log's filter, `halyard.events.<id>.*`: what the sequence check applies to.
    log: String,
    last_stream_seq: u64,
    last_seq: u64,
    /// Whether the server stores atomic batches (nats-server 2.12 and newer, with the events
    /// stream's `allow_atomic` set by the topology): without them a batch goes one event at a
    /// time.
    atomic: bool,
}

impl EventAppender {
    /// Opens the log at its current end.
    pub async fn open(js: jetstream::Context, conversation: ConversationId) -> Result<Self, BusError> {
        let atomic = crate::nats::atomic_batches(&js.client().server_info().version);
        let log = subjects::conversation_events(conversation);
        let mut me = Self { js, conversation, log, last_stream_seq: 0, last_seq: 0, atomic };
        me.refresh().await?;
        Ok(me)
    }

    /// Re-reads the end of the log (after a conflict).
    pub async fn refresh(&mut self) -> Result<(), BusError> {
        match last_event(&self.js, self.conversation).await? {
            Some((stream_seq, env)) => {
                self.last_stream_seq = stream_seq;
                self.last_seq = env.payload.seq;
            }
            None => {
                self.last_stream_seq = 0;
                self.last_seq = 0;
            }
        }
        Ok(())
    }

    /// `seq` of the last event in the log.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn conversation(&self) -> ConversationId {
        self.conversation
    }

    /// The envelope of the event after `after` (`seq` is one more than `after`'s).
    fn envelope(&self, seq: u64, event: NewEvent) -> Envelope<ConversationEvent> {
        let now = crate::now_ms();
        let NewEvent { id, source, body, trace } = event;
        let event = ConversationEvent { seq, id, conversation_id: self.conversation, source, timestamp_ms: now, body };
        let mut env = Envelope::with_id(CommandId(id.0), event, now);
        env.trace = trace;
        env
    }

    /// Appends one event. A [`BusErrorKind::Conflict`] means someone else appended first:
    /// [`refresh`](Self::refresh) and decide again.
    pub async fn append(
        &mut self,
        id: EventId,
        source: EventSource,
        body: EventBody,
        trace: Option<TraceContext>,
    ) -> Result<ConversationEvent, BusError> {
        let env = self.envelope(self.last_seq + 1, NewEvent { id, source, body, trace });
        let bytes = halyard_protocol::encode(&env)?;
        // No `Nats-Msg-Id`: the expected-sequence check already makes a retried append fail
        // (the first copy is stored), and the caller then finds its event by id in the log.
        // Sparing the server's de-duplication table is measurably faster.
        let publish = PublishMessage::build()
            .payload(bytes.into())
            .expected_last_subject_sequence(self.last_stream_seq)
            .header(EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT, self.log.as_str());
        let subject = subjects::event_subject(self.conversation, env.payload.body.kind());
        let pending = self.js.send_publish(subject, publish).await.map_err(|e| err(BusErrorKind::Publish)(&e))?;
        match pending.await {
            Ok(ack) if ack.duplicate => {
                // Stored before (our ack was lost): the log already holds it, possibly at
                // another position. Re-read the end so the next append is right.
                self.refresh().await?;
                Err(BusError::new(BusErrorKind::Conflict, format!("event {id} was already appended")))
            }
            Ok(ack) => {
                self.last_stream_seq = ack.sequence;
                self.last_seq = env.payload.seq;
                metrics::counter!("halyard_events_appended_total", "kind" => env.payload.body.kind()).increment(1);
                Ok(env.payload)
            }
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                Err(BusError::new(BusErrorKind::Conflict, format!("conversation {} was appended to by another writer", self.conversation)))
            }
            Err(e) => Err(err(BusErrorKind::Publish)(&e)),
        }
    }

    /// Appends the first events of `events` that fit in one batch ([`BATCH_MAX`], about
    /// [`BATCH_BYTES`]; at least one), all or none: JetStream's atomic batch publish, whose
    /// first message carries the log's expected sequence, so a batch meets another writer as one
    /// append does (a [`BusErrorKind::Conflict`], nothing stored). The caller sends the rest
    /// after these. A server without atomic batches gets the first event alone, as [`append`]
    /// would send it.
    ///
    /// Over a loopback, 1,000 events take a few milliseconds this way, against a round trip to
    /// the server per event one by one.
    ///
    /// [`append`]: Self::append
    pub async fn append_batch(&mut self, events: &[NewEvent]) -> Result<Vec<ConversationEvent>, BusError> {
        let Some(first) = events.first() else { return Ok(Vec::new()) };
        if !self.atomic {
            let e = first.clone();
            return self.append(e.id, e.source, e.body, e.trace).await.map(|e| vec![e]);
        }
        let mut batch = Vec::new();
        let mut bytes = 0;
        for (i, event) in events.iter().take(BATCH_MAX).enumerate() {
            let env = self.envelope(self.last_seq + 1 + i as u64, event.clone());
            let encoded = halyard_protocol::encode(&env)?;
            bytes += encoded.len();
            if i > 0 && bytes > BATCH_BYTES {
                break;
            }
            batch.push((env, encoded));
        }
        match self.publish_atomic(&batch).await {
            Err(e) if e.kind == BusErrorKind::Server => {
                // The stream does not take batches (made before this server could): one by one.
                tracing::warn!(conversation_id = %self.conversation, error = %e, "atomic batches refused; appending one event at a time");
                self.atomic = false;
                let e = first.clone();
                self.append(e.id, e.source, e.body, e.trace).await.map(|e| vec![e])
            }
            Err(e) => Err(e),
            Ok(ack_seq) => {
                self.last_stream_seq = ack_seq;
                self.last_seq += batch.len() as u64;
                for (env, _) in &batch {
                    metrics::counter!("halyard_events_appended_total", "kind" => env.payload.body.kind()).increment(1);
                }
                Ok(batch.into_iter().map(|(env, _)| env.payload).collect())
            }
        }
    }

    /// Sends one atomic batch; the stream sequence of its last message once committed. A batch
    /// is started by a request (the server answers it with an empty reply, or an error at once),
    /// its middle is published without replies (the server finds any gap at the commit), and
    /// the commit's reply is the batch's publish acknowledgement. A batch that never commits is
    /// dropped by the server after 10 s of silence, stored nowhere.
    async fn publish_atomic(&self, batch: &[(Envelope<ConversationEvent>, Vec<u8>)]) -> Result<u64, BusError> {
        let client = self.js.client();
        let publish = err(BusErrorKind::Publish);
        let id = uuid::Uuid::new_v4().simple().to_string();
        let last = batch.len();
        for (i, (env, bytes)) in batch.iter().enumerate() {
            let n = i + 1;
            let mut headers = HeaderMap::new();
            headers.insert(async_nats::header::NATS_BATCH_ID, id.as_str());
            headers.insert(async_nats::header::NATS_BATCH_SEQUENCE, n.to_string().as_str());
            if n == 1 {
                headers.insert(async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, self.last_stream_seq.to_string().as_str());
                headers.insert(EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT, self.log.as_str());
            }
            if n == last {
                headers.insert(async_nats::header::NATS_BATCH_COMMIT, "1");
            }
            let subject = subjects::event_subject(self.conversation, env.payload.body.kind());
            let payload = bytes::Bytes::copy_from_slice(bytes);
            if n == 1 || n == last {
                let reply = client.request_with_headers(subject, headers, payload).await.map_err(|e| publish(&e))?;
                if let Some(seq) = batch_answer(&reply.payload, n == last, self.conversation)? {
                    return Ok(seq);
                }
            } else {
                client.publish_with_headers(subject, headers, payload).await.map_err(|e| publish(&e))?;
            }
        }
        Err(BusError::new(BusErrorKind::Publish, "an atomic batch ended without its acknowledgement"))
    }
}

/// What the server answers a batch's message: nothing yet (`None`: the batch goes on), the
/// stream sequence of its last message (at the commit), or why it was refused.
fn batch_answer(reply: &[u8], commit: bool, conversation: ConversationId) -> Result<Option<u64>, BusError> {
    #[derive(Deserialize)]
    struct ApiError {
        #[serde(default)]
        err_code: u64,
        #[serde(default)]
        description: String,
    }
    #[derive(Deserialize)]
    struct Ack {
        #[serde(default)]
        seq: u64,
        #[serde(default)]
        count: u64,
        error: Option<ApiError>,
    }
    if reply.is_empty() && !commit {
        return Ok(None);
    }
    let ack: Ack = serde_json::from_slice(reply)
        .map_err(|e| BusError::new(BusErrorKind::Publish, format!("unreadable answer to an atomic batch: {e}")))?;
    match ack.error {
        // Wrong last sequence: someone else appended first.
        Some(ApiError { err_code: 10071, .. }) => {
            Err(BusError::new(BusErrorKind::Conflict, format!("conversation {conversation} was appended to by another writer")))
        }
        // Atomic publish disabled on the stream, or batches unknown to it.
        Some(ApiError { err_code: 10174, description, .. }) => Err(BusError::new(BusErrorKind::Server, description)),
        Some(ApiError { description, .. }) => Err(BusError::new(BusErrorKind::Publish, format!("atomic batch refused: {description}"))),
        None if ack.count == 0 || ack.seq == 0 => {
            Err(BusError::new(BusErrorKind::Publish, "an atomic batch's commit was acknowledged without its messages"))
        }
        None => Ok(Some(ack.seq)),
    }
}

/// The header that points `Nats-Expected-Last-Subject-Sequence` at a subject filter (the whole
/// log) rather than the published subject (nats-server 2.11 and newer).
const EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: &str = "Nats-Expected-Last-Subject-Sequence-Subject";

/// The last event of a conversation's log (`halyard.events.<id>.*`), with its stream sequence.
pub async fn last_event(
    js: &jetstream::Context,
    conversation: ConversationId,
) -> Result<Option<(u64, Envelope<ConversationEvent>)>, BusError> {
    last_record(js, subjects::EVENTS_STREAM, &subjects::conversation_events(conversation)).await
}
