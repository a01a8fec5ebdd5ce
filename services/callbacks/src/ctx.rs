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
    use halyard_platform::derived::{Namespace, derived_uuid};
    halyard_protocol::CommandId(derived_uuid(Namespace::WebhookDelivery { webhook, event: event.0 }))
}
