//! WebSocket tickets: `POST /ws-tickets` gives a client that cannot set a header on a
//! WebSocket (a browser page of another origin, a script) a short-lived, single-use ticket to
//! put in the WebSocket URL's `access_token`, so no API key ever travels in a URL (where
//! proxies and browser histories keep it).
//!
//! A ticket is signed with the deployment secret and names its user, scope and credential, so
//! any gateway can check it; it ends with the credential that asked for it. Single use is kept
//! by the gateway that sees it used (a ticket's 30 seconds bound what another gateway could
//! accept twice).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::api_doc::Refusals;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use halyard_platform::{keys, now_ms};
use halyard_protocol::UserId;
use halyard_protocol::accounts::KeyScope;

use crate::state::AppState;
use crate::accounts::registry::{Principal, Refusal};
use crate::error::ApiError;
use crate::store::rfc3339;

/// The prefix of every ticket.
pub const PREFIX: &str = "wst_";
const PURPOSE: &str = "ws-ticket";
const TICKET_MS: i64 = 30_000;

/// Tickets used here, until they expire.
#[derive(Default)]
pub struct UsedTickets(Mutex<HashMap<String, i64>>);

impl UsedTickets {
    /// Marks `nonce` used; false if it was already.
    pub fn take(&self, nonce: &str, expires_ms: i64, now: i64) -> bool {
        let mut used = self.0.lock().unwrap_or_else(|e| e.into_inner());
        used.retain(|_, exp| *exp > now);
        used.insert(nonce.to_owned(), expires_ms).is_none()
    }
}

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

/// Who `ticket` is for, using it up; why not otherwise.
pub fn redeem(state: &AppState, ticket: &str) -> Result<Principal, Refusal> {
    let now = now_ms();
    let (payload, sig) = ticket.strip_prefix(PREFIX).and_then(|t| t.split_once('.')).ok_or(Refusal::TicketSpent)?;
    let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| Refusal::TicketSpent)?;
    let expected = keys::sign(&state.config.secret, PURPOSE, &payload);
    if !keys::constant_time_eq(expected.as_bytes(), sig.as_bytes()) {
        return Err(Refusal::TicketSpent);
    }
    let text = String::from_utf8(payload).map_err(|_| Refusal::Unknown)?;
    let fields: Vec<&str> = text.split('\n').collect();
    let [user, scope, credential, expires, nonce] = fields[..] else { return Err(Refusal::Unknown) };
    let expires_ms: i64 = expires.parse().map_err(|_| Refusal::Unknown)?;
    if expires_ms <= now {
        return Err(Refusal::TicketSpent);
    }
    let scope = if scope == KeyScope::ReadOnly.as_str() { KeyScope::ReadOnly } else { KeyScope::Full };
    let principal = state.accounts.principal(&UserId(user.to_owned()), scope, credential, now)?;
    if !state.used_tickets.take(nonce, expires_ms, now) {
        return Err(Refusal::TicketSpent);
    }
    Ok(principal)
}
