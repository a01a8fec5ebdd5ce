//! Users and API keys, as the gateways keep them in the `halyard_auth` key-value bucket
//! (`user.<name>`, `key.<key id>`, MessagePack in an [`crate::Envelope`]), and the audit
//! record every administrative action leaves on `halyard.sys.audit.<what>`.
//!
//! An API key reads `hal_<key id>_<secret>`. Only a salted hash of the secret is stored: the
//! key is shown once, when it is issued, and can never be read back.

use serde::{Deserialize, Serialize};

use crate::UnixMillis;
use crate::envelope::Payload;
use crate::ids::UserId;

/// A user managed through the admin API. Users named only in the operator's bootstrap keys
/// (`HALYARD_API_KEYS`) have no account until an admin changes them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserAccount {
    pub user: UserId,
    /// May use the admin API.
    pub admin: bool,
    /// A disabled user's keys (bootstrap keys included) are refused.
    pub disabled: bool,
    pub created_ms: UnixMillis,
    pub updated_ms: UnixMillis,
    /// Who the identity provider says this user is (`<issuer>#<sub>`), for a user made or
    /// claimed by single sign-on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sso_subject: Option<String>,
    /// The e-mail address the identity provider gave, verified there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

impl Payload for UserAccount {
    fn kind(&self) -> String {
        "auth.user".into()
    }
}

/// What a key may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyScope {
    /// Everything its user may do.
    Full,
    /// Reads only (GET, and the event WebSocket).
    ReadOnly,
}

impl KeyScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::ReadOnly => "read_only",
        }
    }
}

/// An issued API key: its secret's salted hash, never the secret.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// Public part of the key (`hal_<id>_...`), also its name in the bucket.
    pub id: String,
    pub user: UserId,
    /// A label for people ("laptop", "ci").
    pub name: String,
    /// Hex; per key.
    pub salt: String,
    /// Hex HMAC-SHA256 of the secret under the salt.
    pub hash: String,
    pub scope: KeyScope,
    pub created_ms: UnixMillis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<UnixMillis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_ms: Option<UnixMillis>,
    /// A browser session (`POST /session`) rather than a key someone holds: it lives in an
    /// HttpOnly cookie, expires within hours, and cannot open another session.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session: bool,
    /// A session's credential: the API key it was signed in with (`key:<id>`, or
    /// `bootstrap:<fingerprint>` for an operator's key). The session ends when that ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// A session's last proof of its key (sign-in, or a step-up since): what sensitive changes
    /// made with it are judged by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_ms: Option<UnixMillis>,
}

impl Payload for ApiKeyRecord {
    fn kind(&self) -> String {
        "auth.key".into()
    }
}

/// One security-relevant action, by whom, on what: sign-ins and their failures, keys issued
/// and revoked, changes to users, secrets, settings and automations (names, never values), share
/// links, terminals opened. Records are only ever appended; the API reads them, never changes
/// them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Who acted (`-` when nobody could be told, as for a refused sign-in).
    pub actor: UserId,
    /// `<what>.<verb>`: `user.create`, `key.revoke`, `session.create`, `secret.put`...
    pub action: String,
    /// What was acted on: a user name, a key id, a secret's name, a conversation id.
    pub target: String,
    /// More about it: an object of names and values that are never secrets (older records
    /// carry a string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
    /// The organization it happened in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// The client address the request came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    pub at_ms: UnixMillis,
}
