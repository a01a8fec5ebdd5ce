//! WebSocket tickets: `POST /ws-tickets` gives a client that cannot set a header on a
//! WebSocket (a browser page of another origin, a script) a short-lived, single-use ticket to
//! put in the WebSocket URL's `access_token`, so no API key ever travels in a URL (where
//! proxies and browser histories keep it).
//!
//! A ticket is signed with the deployment secret and names its user, scope and credential, so
//! any gateway can check it; it ends with the credential that asked for it. Single use is kept
//! by the gateway that sees it used (a ticket's 30 seconds bound what another gateway could
//! accept twice).

use crate::auth::tickets::{PREFIX, PURPOSE, TICKET_MS};
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::read_model::store::rfc3339;
use crate::state::AppState;
use crate::state::registry::Principal;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use halyard_platform::{keys, now_ms};

/// A ticket for one WebSocket connection.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Ticket {
    /// `wst_...`: pass as `access_token` in the WebSocket's URL, once.
    pub ticket: String,
    pub expires_at: String,
}

/// A ticket for one WebSocket connection (for clients that cannot set a header on one), good
/// once, for 30 seconds.
#[utoipa::path(post, path = "/ws-tickets", tag = "accounts", responses((status = 201, body = Ticket), Refusals))]
pub async fn create(State(state): State<AppState>, principal: Principal) -> Result<(StatusCode, Json<Ticket>), ApiError> {
    let expires_ms = now_ms() + TICKET_MS;
    let nonce = keys::random_secret();
    let payload = format!("{}\n{}\n{}\n{expires_ms}\n{nonce}", principal.user.0, principal.scope.as_str(), principal.credential);
    let sig = keys::sign(&state.config.secret, PURPOSE, payload.as_bytes());
    let ticket = format!("{PREFIX}{}.{sig}", URL_SAFE_NO_PAD.encode(payload));
    Ok((StatusCode::CREATED, Json(Ticket { ticket, expires_at: rfc3339(expires_ms) })))
}
