//! A conversation's events, read from its log in JetStream (the truth), not from a copy: one
//! batched direct get from the nearest indexed event (see [`crate::store::Store::log_start`]),
//! each event rendered as the API serves it. Used by `GET .../events`, the WebSocket's replay
//! and gap refill, and a webhook delivery's retry.

use halyard_platform::{BusError, BusErrorKind, bus};
use halyard_protocol::event::ConversationEvent;
use halyard_protocol::{ConversationId, subjects};

use crate::projection::LiveEvent;
use crate::store::{self, Store};

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
                        out.push(LiveEvent::of(&env.payload));
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
