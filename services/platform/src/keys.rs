//! Sandbox session keys. A sandbox's key is derived from the deployment secret and the sandbox
//! id, so the supervisor (which gives it to the executor) and the services that call the
//! executor agree on it without the key ever travelling over the bus or into an event.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use halyard_protocol::SandboxId;

/// The session key of a sandbox: hex HMAC-SHA256 of its id under the deployment secret.
pub fn session_key(secret: &str, sandbox: SandboxId) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        // HMAC accepts keys of any length; this arm cannot be reached.
        Err(_) => return String::new(),
    };
    mac.update(b"halyard-sandbox-session:");
    mac.update(sandbox.to_string().as_bytes());
    to_hex(&mac.finalize().into_bytes())
}

/// Hex HMAC-SHA256 of `msg` under the deployment secret, for `purpose` (each purpose its own
/// key space, so a value signed for one use is never valid for another).
pub fn sign(secret: &str, purpose: &str, msg: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(b"halyard:");
    mac.update(purpose.as_bytes());
    mac.update(b":");
    mac.update(msg);
    to_hex(&mac.finalize().into_bytes())
}

/// What `sign` is given for a conversation's key to Halyard's own MCP server.
const MCP_PURPOSE: &str = "mcp-conversation";

/// The key the agent runner presents to Halyard's own MCP server (`/mcp`) for a conversation:
/// `<conversation id>.<hex HMAC>` under the deployment secret. Only services holding the
/// secret can make one; the sandbox never sees it.
pub fn mcp_key(secret: &str, conversation: halyard_protocol::ConversationId) -> String {
    let id = conversation.to_string();
    format!("{id}.{}", sign(secret, MCP_PURPOSE, id.as_bytes()))
}

/// The conversation an [`mcp_key`] was made for, if it is one.
pub fn mcp_key_conversation(secret: &str, key: &str) -> Option<halyard_protocol::ConversationId> {
    let (id, mac) = key.split_once('.')?;
    let conversation: halyard_protocol::ConversationId = id.parse().ok()?;
    constant_time_eq(sign(secret, MCP_PURPOSE, id.as_bytes()).as_bytes(), mac.as_bytes()).then_some(conversation)
}

/// Lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

/// The bytes of lowercase or uppercase hex `s`, if it is hex.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// A random secret (32 bytes as hex), from two v4 UUIDs' worth of OS randomness.
pub fn random_secret() -> String {
    let a = uuid::Uuid::new_v4();
    let b = uuid::Uuid::new_v4();
    format!("{}{}", to_hex(a.as_bytes()), to_hex(b.as_bytes()))
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_per_sandbox_and_secret() {
        let a = SandboxId::new();
        let b = SandboxId::new();
        assert_ne!(session_key("s", a), session_key("s", b));
        assert_ne!(session_key("s1", a), session_key("s2", a));
        assert_eq!(session_key("s", a), session_key("s", a));
        assert_eq!(session_key("s", a).len(), 64);
    }

    #[test]
    fn mcp_keys_name_their_conversation_and_cannot_be_forged() {
        let (a, b) = (halyard_protocol::ConversationId::new(), halyard_protocol::ConversationId::new());
        let key = mcp_key("s", a);
        assert_eq!(mcp_key_conversation("s", &key), Some(a));
        assert_eq!(mcp_key_conversation("other secret", &key), None);
        let forged = format!("{b}.{}", key.split_once('.').unwrap_or_default().1);
        assert_eq!(mcp_key_conversation("s", &forged), None);
        assert_eq!(mcp_key_conversation("s", "garbage"), None);
    }

    #[test]
    fn constant_time_eq_works() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}

/// A new webhook signing secret: `whsec_` + base64 of 24 random bytes (Standard Webhooks).
pub fn new_webhook_secret() -> String {
    use base64::Engine;
    let a = uuid::Uuid::new_v4();
    let b = uuid::Uuid::new_v4();
    let mut bytes = Vec::with_capacity(24);
    bytes.extend_from_slice(a.as_bytes());
    bytes.extend_from_slice(&b.as_bytes()[..8]);
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The Standard Webhooks signature header value, `v1,<base64 HMAC-SHA256>`, of
/// `{msg_id}.{timestamp}.{body}` under `secret` (`whsec_` + base64 key). `None` for a malformed
/// secret.
pub fn webhook_signature(secret: &str, msg_id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    let key = engine.decode(secret.strip_prefix("whsec_").unwrap_or(secret)).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(format!("v1,{}", engine.encode(mac.finalize().into_bytes())))
}

#[cfg(test)]
mod webhook_tests {
    use super::*;

    #[test]
    fn matches_the_standard_webhooks_reference_vector() {
        // From the Standard Webhooks specification's test vectors.
        let sig = webhook_signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig.as_deref(), Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
        let s = new_webhook_secret();
        assert!(s.starts_with("whsec_") && s.len() == 38, "{s}");
    }
}

/// Prefix of the API keys Halyard issues: `hal_<id>_<secret>`.
pub const API_KEY_PREFIX: &str = "hal_";

/// A new API key: its public id, its secret, and the whole key as the user gets it.
pub fn new_api_key() -> (String, String, String) {
    let id: String = to_hex(uuid::Uuid::new_v4().as_bytes()).chars().take(16).collect();
    let secret = random_secret();
    let key = format!("{API_KEY_PREFIX}{id}_{secret}");
    (id, secret, key)
}

/// Splits an issued key into (id, secret); `None` for anything else (a bootstrap key).
pub fn parse_api_key(key: &str) -> Option<(&str, &str)> {
    let (id, secret) = key.strip_prefix(API_KEY_PREFIX)?.split_once('_')?;
    (!id.is_empty() && !secret.is_empty()).then_some((id, secret))
}

/// What is stored of a key's secret: hex HMAC-SHA256 of it under the key's own salt. The
/// secret is 256 random bits, so a fast hash is enough; the salt keeps equal hashes apart.
pub fn api_key_hash(salt: &str, secret: &str) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(salt.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(secret.as_bytes());
    to_hex(&mac.finalize().into_bytes())
}

#[cfg(test)]
mod api_key_tests {
    use super::*;

    #[test]
    fn issued_keys_parse_and_hash_per_salt() {
        let (id, secret, key) = new_api_key();
        assert_eq!(parse_api_key(&key), Some((id.as_str(), secret.as_str())));
        assert_eq!(parse_api_key("alice-secret-key"), None);
        assert_eq!(parse_api_key("hal__x"), None);
        assert_ne!(api_key_hash("salt-a", &secret), api_key_hash("salt-b", &secret));
        assert_eq!(api_key_hash("salt-a", &secret), api_key_hash("salt-a", &secret));
        assert!(!key.contains(&api_key_hash("salt-a", &secret)));
    }
}
