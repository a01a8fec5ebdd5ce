//! What the dispatcher's fan-out and delivery workers share, and the id of a delivery.

use async_nats::jetstream;
use halyard_platform::Config;
use halyard_protocol::webhook::WebhookSubscription;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Shared by the fan-out and the workers.
pub struct Ctx {
    pub config: Arc<Config>,
    pub js: jetstream::Context,
    pub http: reqwest::Client,
    pub webhooks: jetstream::kv::Store,
    /// Current subscriptions, by id.
    pub subs: RwLock<HashMap<String, WebhookSubscription>>,
}

/// The delivery id of an event for a subscription: stable, so re-fanning an event out after a
/// restart is de-duplicated, and receivers see the same `webhook-id` on every attempt.
pub fn delivery_id(webhook: &str, event: halyard_protocol::EventId) -> halyard_protocol::CommandId {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(webhook.as_bytes());
    h.update(event.as_bytes());
    let d = h.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&d[..16]);
    // Shape it as a v8 (custom) UUID.
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    halyard_protocol::CommandId(uuid::Uuid::from_bytes(bytes))
}
