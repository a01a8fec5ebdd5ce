//! The grant an app link and an app's cookie carry: one app of one sandbox, for its owner, until
//! it expires, signed with the deployment secret (its own key space, `app-grant`). The apps proxy
//! ([`crate::api::workspace::apps`]) issues and checks it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use halyard_platform::keys;
use halyard_protocol::SandboxId;

const PURPOSE: &str = "app-grant";

/// What a link or a cookie lets its holder do: reach one app of one sandbox, as its owner, until
/// `expires_ms`.
#[derive(Debug, PartialEq)]
pub struct Grant {
    pub sandbox: SandboxId,
    pub name: String,
    pub user: String,
    pub expires_ms: i64,
    /// What the link was asked with (see [`crate::state::registry::Principal::credential`]).
    pub credential: String,
    /// Makes a link usable once.
    pub nonce: String,
    /// The origin that may show it in a frame (VS Code's: the workspace's); empty for apps.
    pub frame: String,
}

impl Grant {
    pub fn encode(&self, secret: &str) -> String {
        let payload = format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.sandbox, self.name, self.user, self.expires_ms, self.credential, self.nonce, self.frame
        );
        let sig = keys::sign(secret, PURPOSE, payload.as_bytes());
        format!("{}.{sig}", URL_SAFE_NO_PAD.encode(payload))
    }

    /// The grant in `token`, if the signature holds and it has not expired.
    pub fn decode(secret: &str, token: &str, now: i64) -> Option<Self> {
        let (payload, sig) = token.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(payload).ok()?;
        let expected = keys::sign(secret, PURPOSE, &payload);
        if !keys::constant_time_eq(expected.as_bytes(), sig.as_bytes()) {
            return None;
        }
        let text = String::from_utf8(payload).ok()?;
        let mut parts = text.split('\n');
        let grant = Grant {
            sandbox: parts.next()?.parse().ok()?,
            name: parts.next()?.to_owned(),
            user: parts.next()?.to_owned(),
            expires_ms: parts.next()?.parse().ok()?,
            credential: parts.next()?.to_owned(),
            nonce: parts.next()?.to_owned(),
            frame: parts.next()?.to_owned(),
        };
        (parts.next().is_none() && grant.expires_ms > now).then_some(grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_holds_only_as_signed_and_until_it_expires() {
        let g = Grant {
            sandbox: SandboxId(uuid::Uuid::new_v4()),
            name: "WORKER_1".into(),
            user: "alice".into(),
            expires_ms: 2_000,
            credential: "key:abc".into(),
            nonce: "n1".into(),
            frame: "http://localhost:3000".into(),
        };
        let t = g.encode("secret");
        assert_eq!(Grant::decode("secret", &t, 1_000), Some(g));
        assert_eq!(Grant::decode("secret", &t, 2_000), None, "expired");
        assert_eq!(Grant::decode("other secret", &t, 1_000), None);
        let (payload, sig) = t.split_once('.').unwrap();
        let forged = URL_SAFE_NO_PAD.encode(String::from_utf8(URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap().replace("alice", "bob"));
        assert_eq!(Grant::decode("secret", &format!("{forged}.{sig}"), 1_000), None);
    }
}
