//! Stored rows the read model keeps that are not conversations, tasks or sandboxes.

use serde::{Deserialize, Serialize};

use halyard_protocol::webhook::DeliveryAttempt;

/// A delivery attempt as the API shows it (and the read model keeps it).
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = DeliveryAttempt)]
pub struct AttemptView {
    pub delivery_id: String,
    pub event_id: String,
    pub conversation_id: String,
    pub seq: u64,
    /// 1 for the first try.
    pub attempt: u32,
    /// The receiver's HTTP status, if it answered.
    pub status_code: Option<u16>,
    /// Why the attempt failed, if it did.
    pub error: Option<String>,
    pub duration_ms: u64,
    /// `succeeded`, `retrying` or `failed` (for good; `POST .../retry` tries again).
    pub outcome: String,
    pub time: String,
}

impl From<&DeliveryAttempt> for AttemptView {
    fn from(a: &DeliveryAttempt) -> Self {
        Self {
            delivery_id: a.delivery_id.to_string(),
            event_id: a.event_id.to_string(),
            conversation_id: a.conversation_id.to_string(),
            seq: a.seq,
            attempt: a.attempt,
            status_code: a.status_code,
            error: a.error.clone(),
            duration_ms: a.duration_ms,
            outcome: serde_json::to_value(a.outcome).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
            time: super::store::rfc3339(a.time_ms),
        }
    }
}
