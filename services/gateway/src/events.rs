//! A conversation's events, read from its log in JetStream (the truth), not from a copy: one
//! batched direct get from the nearest indexed event (see [`crate::store::Store::log_start`]),
//! each event rendered as the API serves it. Used by `GET .../events`, the WebSocket's replay
//! and gap refill, and a webhook delivery's retry.

use halyard_platform::{bus, BusError, BusErrorKind};
use halyard_protocol::event::ConversationEvent;
use halyard_protocol::{subjects, ConversationId};

use crate::projection::LiveEvent;
use crate::store::{self, Store};

/// Up to `limit` events of conversation `id` with `seq > after`, in order, as the log is now.
pub async fn read(
    js: &async_nats::jetstream::Context,
    store: &Store,
    id: ConversationId,
    after: u64,
    limit: usize,
) -> Result<Vec<LiveEvent>, BusError> {
    let filter = subjects::conversation_events(id);
    let mut from = store.log_start(id, after).map_err(|e| BusError::new(BusErrorKind::Read, e))?;
    let mut out = Vec::with_capacity(limit.min(1024));
    loop {
        // Room for the events before `after` that are read and skipped (at most a stride).
        let want = limit.saturating_sub(out.len()) + store::LOG_INDEX_STRIDE as usize;
        let batch = bus::direct_batch(js, subjects::EVENTS_STREAM, &filter, from, want).await?;
        let got = batch.len();
        for (stream_seq, payload) in batch {
            from = stream_seq + 1;
            match halyard_protocol::decode::<ConversationEvent>(&payload) {
                Ok(env) if env.payload.seq > after => {
                    out.push(LiveEvent::of(&env.payload));
                    if out.len() >= limit {
                        return Ok(out);
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(conversation_id = %id, stream_seq, error = %e, "skipping an undecodable event"),
            }
        }
        if got < want {
            return Ok(out);
        }
    }
}
