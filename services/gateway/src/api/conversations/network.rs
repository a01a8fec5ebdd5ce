//! What a conversation's sandbox reached (`GET /conversations/{id}/network`): for a sandbox held
//! to an outbound policy, each destination its egress proxy let through with the connections and
//! bytes it carried, and each it refused with the rule, as the projection adds up the
//! conversation's `network_used` and `network_blocked` events. (An organization's owners also
//! find the traffic in its audit trail, `conversation.network_used`.)

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use utoipa::ToSchema;

use halyard_protocol::egress::NetworkUse;

use crate::auth::User;
use crate::auth::access::readable;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::state::AppState;

/// What the sandbox reached through its egress proxy, and what it was refused.
#[derive(Debug, Serialize, ToSchema)]
pub struct NetworkSummary {
    /// Each destination let through (name and port as the sandbox asked), with the connections
    /// opened and the bytes the sandbox sent and received, by name. Reported every few seconds
    /// while traffic flows, so the last seconds may be missing while it runs.
    pub reached: Vec<NetworkUse>,
    /// Each refused destination, by rule, with how many connections were refused.
    pub refused: Vec<Refused>,
    /// All bytes the sandbox sent through the proxy.
    pub bytes_sent: u64,
    /// All bytes it received through it.
    pub bytes_received: u64,
}

/// Connections refused to one destination by one rule.
#[derive(Debug, Serialize, ToSchema)]
pub struct Refused {
    pub host: String,
    pub port: u16,
    /// The rule, naming its layer: `not in the allow list (organization acme)`.
    pub rule: String,
    pub count: u64,
}

/// What the conversation's sandbox reached through its egress proxy and what it was refused
/// (both empty for a sandbox not held to an outbound policy).
#[utoipa::path(get, path = "/conversations/{id}/network", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = NetworkSummary), Refusals))]
pub async fn get_network(
    State(state): State<AppState>,
    User(user): User,
    Path(id): Path<String>,
) -> Result<Json<NetworkSummary>, ApiError> {
    let (id, _) = readable(&state, &user, &id)?;
    let row = state.store.network(id)?.unwrap_or_default();
    let refused = row.refused.into_iter().map(|r| Refused { host: r.host, port: r.port, rule: r.rule, count: r.count }).collect();
    Ok(Json(NetworkSummary {
        bytes_sent: row.reached.iter().map(|r| r.bytes_sent).sum(),
        bytes_received: row.reached.iter().map(|r| r.bytes_received).sum(),
        reached: row.reached,
        refused,
    }))
}
