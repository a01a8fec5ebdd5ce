//! WebSocket tickets: short-lived, single-use stand-ins for a key in a WebSocket's URL.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use halyard_platform::{keys, now_ms};
use halyard_protocol::UserId;
use halyard_protocol::accounts::KeyScope;

use crate::state::AppState;
use crate::state::registry::{Principal, Refusal};

/// The prefix of every ticket.
pub const PREFIX: &str = "wst_";

pub(crate) const PURPOSE: &str = "ws-ticket";

pub(crate) const TICKET_MS: i64 = 30_000;

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
