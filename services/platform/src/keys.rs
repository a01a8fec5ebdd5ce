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
    fn constant_time_eq_works() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
