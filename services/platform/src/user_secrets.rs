//! A user's secrets, opened: what a conversation's shell gets as environment variables, and
//! what every place that shows a user's data masks (the agent runner's log, the gateway's views
//! of the workspace). Opened with the vault in the services that need them, never stored open.

use std::collections::BTreeMap;

use async_nats::jetstream::kv;
use halyard_protocol::UserId;
use halyard_protocol::subjects;
use halyard_protocol::user::{UserGitProviders, UserSecrets};
use serde::de::DeserializeOwned;

use crate::redact::Redactor;
use crate::vault::{self, Vault};

/// A user's secrets, opened.
#[derive(Debug, Default, Clone)]
pub struct Opened {
    /// Name to value: the shell's environment.
    pub env: BTreeMap<String, String>,
    /// Every value to mask, by name: the secrets, and the git providers' tokens (which the
    /// agent never gets, but could come across).
    pub masked: Vec<(String, String)>,
    /// The user has a git provider whose forge has an API.
    pub has_forge: bool,
}

impl Opened {
    pub fn redactor(&self) -> Redactor {
        Redactor::new(self.masked.clone())
    }

    /// These secrets over the organization's: the shell gets both (the owner's own where a
    /// name is in both), and both are masked.
    pub fn over(mut self, org: Opened) -> Opened {
        for (name, value) in org.env {
            self.env.entry(name).or_insert(value);
        }
        self.masked.extend(org.masked);
        self
    }
}

async fn read<T: DeserializeOwned + Default>(user_kv: &kv::Store, key: &str) -> Result<T, String> {
    match user_kv.get(key).await {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| format!("{key}: {e}")),
        Ok(None) => Ok(T::default()),
        Err(e) => Err(format!("{key}: {e}")),
    }
}

/// `owner`'s secrets and git tokens, over those of the organization `org` the conversation is
/// in. A value that does not open (the deployment secret changed) is left out, and said in the
/// log by name.
pub async fn open(user_kv: &kv::Store, vault: &Vault, owner: &UserId, org: Option<&str>) -> Result<Opened, String> {
    // The reads of the bucket, at once.
    let (secrets_key, git_key) = (subjects::user_secrets_key(owner), subjects::user_git_key(owner));
    let org_read = async {
        match org {
            Some(o) => {
                let (secrets_key, git_key) = (subjects::org_secrets_key(o), subjects::org_git_key(o));
                let (s, g) = tokio::join!(read::<UserSecrets>(user_kv, &secrets_key), read(user_kv, &git_key));
                Ok::<_, String>(Some((s?, g?)))
            }
            None => Ok(None),
        }
    };
    let (stored, git, org_stored) = tokio::join!(read(user_kv, &secrets_key), read(user_kv, &git_key), org_read);
    let own = open_stored(vault, owner, stored?, git?);
    Ok(match (org, org_stored?) {
        (Some(org), Some((s, g))) => own.over(open_org(vault, org, s, g)),
        _ => own,
    })
}

/// Organization `org`'s secrets and (for the mask only) its git tokens, opened: sealed for the
/// organization, not for a member.
pub fn open_org(vault: &Vault, org: &str, stored: UserSecrets, git: UserGitProviders) -> Opened {
    let mut opened = open_stored(vault, &UserId(halyard_protocol::user::org_slot_owner(org)), stored, git);
    // Halyard's own forge tools act with the member's providers, not the organization's.
    opened.has_forge = false;
    opened
}

/// [`open`] for what was read already.
pub fn open_stored(vault: &Vault, owner: &UserId, stored: UserSecrets, git: UserGitProviders) -> Opened {
    let mut env = BTreeMap::new();
    for (name, s) in stored.secrets {
        match vault.open(&vault::secret_slot(&owner.0, &name), &s.value_sealed) {
            Ok(value) => {
                env.insert(name, value);
            }
            Err(e) => tracing::warn!(user = %owner, secret = %name, error = %e, "cannot open a secret; it is left out"),
        }
    }
    let mut masked: Vec<(String, String)> = env.iter().map(|(n, v)| (n.clone(), v.clone())).collect();
    let has_forge = git.providers.values().any(|p| p.api_url.is_some() || matches!(p.kind.as_str(), "github" | "gitlab"));
    for (name, p) in git.providers {
        if let Ok(token) = vault.open(&vault::git_token_slot(&owner.0, &name), &p.token_sealed) {
            masked.push((format!("git/{name}"), token));
        }
    }
    Opened { env, masked, has_forge }
}
