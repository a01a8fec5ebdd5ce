//! Webhook subscriptions and deliveries.
//!
//! Subscriptions (with their signing secrets) live in the key-value bucket
//! [`crate::subjects::WEBHOOK_BUCKET`], never in an event stream. Each event that matches a
//! subscription becomes a [`DeliveryJob`] on `halyard.dlv.<webhook id>.<lane>.<conversation id>`; each
//! attempt to deliver it becomes a [`crate::system::SystemRecord::DeliveryAttempt`].

use serde::{Deserialize, Serialize};

use crate::UnixMillis;
use crate::envelope::Payload;
use crate::ids::{CommandId, ConversationId, EventId, UserId};

/// A user's webhook subscription.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookSubscription {
    /// A UUID string.
    pub id: String,
    pub owner: UserId,
    pub url: String,
    /// Event kinds to deliver; empty means all.
    #[serde(default)]
    pub event_kinds: Vec<String>,
    /// Only this conversation's events, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<ConversationId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub enabled: bool,
    /// Why it was disabled, if the dispatcher disabled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// `whsec_` + base64, as the Standard Webhooks specification defines.
    pub secret: String,
    pub created_ms: UnixMillis,
    pub updated_ms: UnixMillis,
}

impl WebhookSubscription {
    /// Whether an event of `kind` in `conversation` of `owner` goes to this subscription.
    pub fn matches(&self, owner: &UserId, conversation: ConversationId, kind: &str) -> bool {
        self.enabled
            && &self.owner == owner
            && self.conversation_id.is_none_or(|c| c == conversation)
            && (self.event_kinds.is_empty() || self.event_kinds.iter().any(|k| k == kind))
    }
}

/// One event to deliver to one subscription.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryJob {
    /// Stable per (subscription, event): the `webhook-id` header, so receivers can de-duplicate.
    pub delivery_id: CommandId,
    pub webhook_id: String,
    pub owner: UserId,
    pub conversation_id: ConversationId,
    pub event_id: EventId,
    pub seq: u64,
    pub kind: String,
    /// The JSON body to POST.
    pub body: String,
    /// Attempts already made before this job was (re)queued.
    #[serde(default)]
    pub prior_attempts: u32,
    /// When the event was appended (for latency figures).
    pub event_ms: UnixMillis,
}

impl Payload for DeliveryJob {
    fn kind(&self) -> String {
        "dlv.job".into()
    }
}

/// How one attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// 2xx.
    Succeeded,
    /// Failed; another attempt is scheduled.
    Retrying,
    /// Failed for the last time; parked until retried through the API.
    Failed,
}

/// A record of one delivery attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryAttempt {
    pub delivery_id: CommandId,
    pub webhook_id: String,
    pub owner: UserId,
    pub conversation_id: ConversationId,
    pub event_id: EventId,
    pub seq: u64,
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
    pub outcome: AttemptOutcome,
    pub time_ms: UnixMillis,
}
