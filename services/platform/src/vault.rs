//! Encryption at rest of users' secret values and LLM API keys: ChaCha20-Poly1305 (ring's
//! AEAD) under a key derived with HKDF-SHA256 from the deployment secret, so every service
//! that holds the deployment secret (the gateway that stores, the agent runner that uses) can
//! open what another sealed, and the bus and its disk only ever hold ciphertext.
//!
//! A sealed value reads `v1.<base64url(nonce ‖ ciphertext ‖ tag)>`. The nonce is 96 random
//! bits per seal. The associated data names the owner and the slot (`alice/secret/GH_TOKEN`),
//! so a ciphertext copied into another user's record, or under another name, does not open.

use base64::Engine;
use ring::aead::{self, Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};

const VERSION: &str = "v1.";
const ENGINE: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Why a value could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("no randomness available for a nonce")]
    Random,
    #[error("cannot derive the vault key")]
    Key,
    /// Wrong key (the deployment secret changed), wrong slot, or a damaged record.
    #[error("the sealed value does not open with this deployment's secret (changed secret, or a damaged record)")]
    Open,
}

/// Seals and opens values under the deployment's key.
pub struct Vault {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vault(***)")
    }
}

/// HKDF output length for a ChaCha20 key.
struct KeyLen;

impl hkdf::KeyType for KeyLen {
    fn len(&self) -> usize {
        CHACHA20_POLY1305.key_len()
    }
}

impl Vault {
    /// The vault of a deployment secret.
    pub fn new(deployment_secret: &str) -> Result<Self, VaultError> {
        let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, b"halyard-vault-v1");
        let prk = salt.extract(deployment_secret.as_bytes());
        let mut bytes = [0u8; 32];
        prk.expand(&[b"user-secrets"], KeyLen).and_then(|okm| okm.fill(&mut bytes)).map_err(|_| VaultError::Key)?;
        let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes).map_err(|_| VaultError::Key)?;
        Ok(Self { key: LessSafeKey::new(key), rng: SystemRandom::new() })
    }

    /// Seals `plaintext` for `slot` (who owns it and what it is).
    pub fn seal(&self, slot: &str, plaintext: &str) -> Result<String, VaultError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| VaultError::Random)?;
        let mut buf = plaintext.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(slot.as_bytes()), &mut buf)
            .map_err(|_| VaultError::Random)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        Ok(format!("{VERSION}{}", ENGINE.encode(out)))
    }

    /// Opens a value sealed for `slot`.
    pub fn open(&self, slot: &str, sealed: &str) -> Result<String, VaultError> {
        let raw = ENGINE.decode(sealed.strip_prefix(VERSION).ok_or(VaultError::Open)?).map_err(|_| VaultError::Open)?;
        if raw.len() < NONCE_LEN + aead::MAX_TAG_LEN {
            return Err(VaultError::Open);
        }
        let (nonce, rest) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| VaultError::Open)?;
        let mut buf = rest.to_vec();
        let plain = self.key.open_in_place(nonce, Aad::from(slot.as_bytes()), &mut buf).map_err(|_| VaultError::Open)?;
        String::from_utf8(plain.to_vec()).map_err(|_| VaultError::Open)
    }
}

/// The slot of a user's secret.
pub fn secret_slot(user: &str, name: &str) -> String {
    format!("{user}/secret/{name}")
}

/// The slot of the subscription login `user` handed to agent kind `agent`.
pub fn agent_login_slot(user: &str, agent: &str) -> String {
    format!("{user}/agent-login/{agent}")
}

/// The slot of the API key of a user's LLM profile.
pub fn llm_key_slot(user: &str, profile: &str) -> String {
    format!("{user}/llm/{profile}")
}

/// The slot of a user's OAuth sign-in to their MCP server `server`.
pub fn mcp_sign_in_slot(user: &str, server: &str) -> String {
    format!("{user}/mcp-oauth/{server}")
}

/// The slot of the token of a user's git provider.
pub fn git_token_slot(user: &str, provider: &str) -> String {
    format!("{user}/git/{provider}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_and_opens_only_in_its_slot_and_deployment() {
        let (Ok(vault), Ok(other)) = (Vault::new("deployment-secret"), Vault::new("other-secret")) else {
            panic!("no vault");
        };
        let sealed = vault.seal("alice/secret/TOKEN", "ghp_value_123").unwrap_or_default();
        assert!(sealed.starts_with("v1.") && !sealed.contains("ghp_value_123"), "{sealed}");
        assert_eq!(vault.open("alice/secret/TOKEN", &sealed).ok().as_deref(), Some("ghp_value_123"));
        // Another slot, another deployment secret, or a flipped byte: refused.
        assert!(vault.open("bob/secret/TOKEN", &sealed).is_err());
        assert!(other.open("alice/secret/TOKEN", &sealed).is_err());
        let mut damaged = sealed.clone().into_bytes();
        let last = damaged.len() - 2;
        damaged[last] = if damaged[last] == b'A' { b'B' } else { b'A' };
        assert!(vault.open("alice/secret/TOKEN", &String::from_utf8_lossy(&damaged)).is_err());
        // Two seals of one value differ (fresh nonce each time).
        assert_ne!(vault.seal("s", "v").unwrap_or_default(), vault.seal("s", "v").unwrap_or_default());
    }
}
