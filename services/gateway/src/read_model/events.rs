//! A conversation's events, read from its log in JetStream (the truth), not from a copy: one
//! batched direct get from the nearest indexed event (see [`crate::read_model::store::Store::log_start`]),
//! each event rendered as the API serves it. Used by `GET .../events`, the WebSocket's replay
//! and gap refill, and a webhook delivery's retry; [`Filter`] and [`search`] find events by
//! kind, source and text (`GET .../events?kind=&source=&q=`, `.../events/count`).

use halyard_platform::{BusError, BusErrorKind, bus};
use halyard_protocol::event::{ConversationEvent, EventSource};
use halyard_protocol::{ConversationId, subjects};

use crate::read_model::store::{self, Store};

/// One event as sent to clients: its seq and its JSON text (shared, never copied per client).
#[derive(Clone, Debug)]
pub struct LiveEvent {
    pub seq: u64,
    pub json: axum::extract::ws::Utf8Bytes,
}

impl LiveEvent {
    /// An event as the API serves it (see [`halyard_protocol::event::to_json`]).
    pub fn of(ev: &ConversationEvent) -> Self {
        Self { seq: ev.seq, json: axum::extract::ws::Utf8Bytes::from(halyard_protocol::event::to_json_string(ev)) }
    }
}

/// Up to `limit` events of conversation `id` with `seq > after`, in order, up to the last one
/// the read models have projected (its view's `last_event_seq`): what this returns agrees with
/// the conversation's view, and anything later reaches a WebSocket live, since the projection
/// publishes an event only after committing the view that counts it.
///
/// Knowing where to stop keeps the read exact: the server is asked for precisely the messages
/// wanted, so it never scans the rest of the stream looking for more, and a client that is up
/// to date costs no read at all.
pub async fn read(
    js: &async_nats::jetstream::Context,
    store: &Store,
    id: ConversationId,
    after: u64,
    limit: usize,
) -> Result<Vec<LiveEvent>, BusError> {
    Ok(read_decoded(js, store, id, after, limit).await?.into_iter().map(|(_, live)| live).collect())
}

/// [`read`], each event also decoded (for a search to look at its kind and source).
pub async fn read_decoded(
    js: &async_nats::jetstream::Context,
    store: &Store,
    id: ConversationId,
    after: u64,
    limit: usize,
) -> Result<Vec<(ConversationEvent, LiveEvent)>, BusError> {
    let corrupt = |e: store::StoreError| BusError::new(BusErrorKind::Read, e);
    let last = store.conversation(id).map_err(corrupt)?.map_or(0, |v| v.last_event_seq);
    let until = last.min(after.saturating_add(limit as u64));
    if until <= after {
        return Ok(Vec::new());
    }
    let filter = subjects::conversation_events(id);
    let (mut next_seq, mut from) = store.log_start(id, after).map_err(corrupt)?;
    let mut out = Vec::with_capacity((until - after) as usize);
    while next_seq <= until {
        let want = (until - next_seq + 1) as usize;
        let batch = bus::direct_batch(js, subjects::EVENTS_STREAM, &filter, from, want).await?;
        let got = batch.len();
        for (stream_seq, payload) in batch {
            from = stream_seq + 1;
            match halyard_protocol::decode::<ConversationEvent>(&payload) {
                Ok(env) => {
                    next_seq = env.payload.seq + 1;
                    if env.payload.seq > after && env.payload.seq <= until {
                        let live = LiveEvent::of(&env.payload);
                        out.push((env.payload, live));
                    }
                }
                Err(e) => tracing::warn!(conversation_id = %id, stream_seq, error = %e, "skipping an undecodable event"),
            }
        }
        if got < want {
            // The log ends early (purged while we read): what there is, is all there is.
            break;
        }
    }
    Ok(out)
}

/// Which events a search keeps: every one of its parts must hold (an empty part holds for all).
#[derive(Debug, Default)]
pub struct Filter {
    /// Any of these kinds (`action`, `observation`, ...).
    pub kinds: Vec<String>,
    /// Any of these sources.
    pub sources: Vec<EventSource>,
    /// Every word, case-insensitively, somewhere in the event as served.
    pub words: Vec<String>,
}

impl Filter {
    /// From the query's comma-separated `kind` and `source` and its `q`; an unknown source is
    /// refused in words.
    pub fn parse(kind: Option<&str>, source: Option<&str>, q: Option<&str>) -> Result<Self, String> {
        let list = |s: Option<&str>| -> Vec<String> {
            s.unwrap_or_default().split(',').map(str::trim).filter(|x| !x.is_empty()).map(str::to_owned).collect()
        };
        let sources = list(source)
            .iter()
            .map(|s| {
                serde_json::from_value::<EventSource>(serde_json::Value::String(s.clone()))
                    .map_err(|_| format!("`source` must be among user, agent, environment, system; got `{s}`"))
            })
            .collect::<Result<_, _>>()?;
        let words = q.unwrap_or_default().split_whitespace().map(str::to_lowercase).collect();
        Ok(Self { kinds: list(kind), sources, words })
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty() && self.sources.is_empty() && self.words.is_empty()
    }

    fn keeps(&self, ev: &ConversationEvent, json: &str) -> bool {
        (self.kinds.is_empty() || self.kinds.iter().any(|k| k == ev.body.kind()))
            && (self.sources.is_empty() || self.sources.contains(&ev.source))
            && (self.words.is_empty() || {
                let text = json.to_lowercase();
                self.words.iter().all(|w| text.contains(w.as_str()))
            })
    }
}

/// What a search found: up to `limit` matching events after `after` (all of them, if no
/// limit), and whether more match after those.
pub struct Found {
    pub events: Vec<LiveEvent>,
    pub has_more: bool,
}

/// The events of `id` after `after` that `filter` keeps, up to `limit` (None: all), scanning
/// the log in pages of the plain read (the log is the truth; there is no index of words).
pub async fn search(
    js: &async_nats::jetstream::Context,
    store: &Store,
    id: ConversationId,
    after: u64,
    limit: Option<usize>,
    filter: &Filter,
) -> Result<Found, BusError> {
    const PAGE: usize = 1000;
    let mut out = Vec::new();
    let mut cursor = after;
    loop {
        let page = read_decoded(js, store, id, cursor, PAGE).await?;
        let got = page.len();
        for (ev, live) in page {
            cursor = ev.seq;
            if filter.keeps(&ev, live.json.as_str()) {
                if limit.is_some_and(|l| out.len() >= l) {
                    return Ok(Found { events: out, has_more: true });
                }
                out.push(live);
            }
        }
        if got < PAGE {
            return Ok(Found { events: out, has_more: false });
        }
    }
}
