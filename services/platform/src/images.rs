//! The browser's screenshots: PNGs kept outside the event log, in JetStream's object store
//! ([`subjects::IMAGE_BUCKET`]), each named under its conversation
//! ([`subjects::image_object`]). The agent runner puts them, an observation carries only
//! the id, the gateway serves them to the conversation's owner, and the conversation manager
//! deletes them with the conversation (it reads their ids from the log it is about to purge).

use async_nats::jetstream::{self, object_store};
use halyard_protocol::{ConversationId, subjects};

use crate::error::{BusError, BusErrorKind};

/// What the bucket may hold in all; past it, new screenshots are refused (the observation then
/// has none) rather than old ones dropped from under the events that name them.
///
/// Checked by [`put`], not set as the stream's `max_bytes`: JetStream reserves a stream's
/// `max_bytes` out of its store at creation, so 4 GiB of screenshots no one has taken yet would
/// refuse to start on a disk with less than about 5.3 GiB free (its store is 75% of what is free).
pub const MAX_BYTES: u64 = 4 << 30;

/// The largest screenshot kept.
pub const MAX_SCREENSHOT: usize = 8 << 20;

/// The bucket's stream.
fn stream_name() -> String {
    format!("OBJ_{}", subjects::IMAGE_BUCKET)
}

/// Declares the bucket (idempotent; at start-up, with the rest of the topology). One that
/// exists keeps its stream, its replicas brought to these and no reserved size (the object
/// store has no create-or-update, and a create whose defaults differ from the stored stream's
/// is refused).
pub async fn declare(js: &jetstream::Context, replicas: usize) -> Result<(), BusError> {
    let topo = |e: String| BusError::new(BusErrorKind::Topology, format!("object store {}: {e}", subjects::IMAGE_BUCKET));
    if let Ok(stream) = js.get_stream(stream_name()).await {
        let mut config = stream.cached_info().config.clone();
        if config.num_replicas != replicas || config.max_bytes != -1 {
            (config.num_replicas, config.max_bytes) = (replicas, -1);
            js.update_stream(config).await.map_err(|e| topo(e.to_string()))?;
        }
        return Ok(());
    }
    js.create_object_store(object_store::Config {
        bucket: subjects::IMAGE_BUCKET.to_owned(),
        description: Some("The browser's screenshots (PNG): <conversation>/<screenshot id>".into()),
        num_replicas: replicas,
        ..Default::default()
    })
    .await
    .map(|_| ())
    .map_err(|e| topo(e.to_string()))
}

async fn bucket(js: &jetstream::Context) -> Result<object_store::ObjectStore, BusError> {
    js.get_object_store(subjects::IMAGE_BUCKET).await.map_err(|e| BusError::new(BusErrorKind::Read, format!("screenshots: {e}")))
}

/// Stores a PNG of `conversation`'s browser; its new id.
pub async fn put(js: &jetstream::Context, conversation: ConversationId, png: &[u8]) -> Result<String, BusError> {
    if png.len() > MAX_SCREENSHOT {
        return Err(BusError::new(BusErrorKind::Publish, format!("a screenshot of {} bytes is over the limit", png.len())));
    }
    // Two puts at once may both pass this and go over by a screenshot each: the limit keeps the
    // store from growing without end, it is not an exact quota.
    let held = js
        .get_stream(stream_name())
        .await
        .map_err(|e| BusError::new(BusErrorKind::Read, format!("screenshots: {e}")))?
        .cached_info()
        .state
        .bytes;
    if held + png.len() as u64 > MAX_BYTES {
        return Err(BusError::new(BusErrorKind::Publish, format!("the screenshots' store is full ({held} bytes held)")));
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    let store = bucket(js).await?;
    let mut data = png;
    store
        .put(subjects::image_object(conversation, &id).as_str(), &mut data)
        .await
        .map_err(|e| BusError::new(BusErrorKind::Publish, format!("screenshot: {e}")))?;
    Ok(id)
}

/// Whether `id` may name a screenshot (what [`put`] makes: 32 hex digits).
pub fn valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A screenshot's bytes (`None`: there is no such screenshot).
pub async fn get(js: &jetstream::Context, conversation: ConversationId, id: &str) -> Result<Option<Vec<u8>>, BusError> {
    use tokio::io::AsyncReadExt;
    if !valid_id(id) {
        return Ok(None);
    }
    let store = bucket(js).await?;
    let mut object = match store.get(subjects::image_object(conversation, id)).await {
        Ok(o) => o,
        Err(e) if e.kind() == object_store::GetErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BusError::new(BusErrorKind::Read, format!("screenshot {id}: {e}"))),
    };
    let mut bytes = Vec::new();
    object.read_to_end(&mut bytes).await.map_err(|e| BusError::new(BusErrorKind::Read, format!("screenshot {id}: {e}")))?;
    Ok(Some(bytes))
}

/// Deletes `conversation`'s screenshots `ids` (those already gone are passed over).
pub async fn delete(js: &jetstream::Context, conversation: ConversationId, ids: &[String]) -> Result<(), BusError> {
    if ids.is_empty() {
        return Ok(());
    }
    let store = bucket(js).await?;
    for id in ids.iter().filter(|id| valid_id(id)) {
        match store.delete(subjects::image_object(conversation, id)).await {
            Ok(()) => {}
            Err(e) if e.kind() == object_store::DeleteErrorKind::NotFound => {}
            Err(e) => return Err(BusError::new(BusErrorKind::Publish, format!("screenshot {id}: {e}"))),
        }
    }
    Ok(())
}
