//! Users and API keys: who a request's key belongs to, and what it may do.
//!
//! Two sources. The operator's bootstrap keys (`HALYARD_API_KEYS`, with `HALYARD_ADMINS` naming
//! the admins among their users) start a deployment and serve tests. Everything else is managed
//! through the admin API and kept in the `halyard_auth` bucket: user accounts (admin, disabled),
//! issued keys as salted hashes, with a scope, an expiry and a revocation time, and
//! organizations with their members' roles.
//!
//! Every gateway keeps the bucket in memory and watches it, so a change made through one
//! gateway (a revoked key, a disabled user) is refused by every other as soon as the change
//! reaches it; the gateway that made it applies it before answering.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use async_nats::jetstream::{self, kv};
use futures::StreamExt;

use halyard_platform::config::ApiKey;
use halyard_platform::keys::{self, constant_time_eq};
use halyard_platform::{BusError, BusErrorKind, Config, Shutdown};
use halyard_protocol::accounts::{ApiKeyRecord, KeyScope, UserAccount};
use halyard_protocol::org::Org;
use halyard_protocol::{Envelope, UserId, subjects};

/// Who a request is, once its key checked out.
#[derive(Clone, Debug)]
pub struct Principal {
    pub user: UserId,
    pub admin: bool,
    pub scope: KeyScope,
    /// What it authenticated with, as a session's `parent` names it (`key:<id>` or
    /// `bootstrap:<fingerprint>`); for a session, the session's own key. Grants made for the
    /// request (app links, WebSocket tickets) end when this ends.
    pub credential: String,
    /// Set when it is a browser session.
    pub session: Option<SessionFacts>,
}

/// What a request made with a session cookie knows of its session.
#[derive(Clone, Debug)]
pub struct SessionFacts {
    pub id: String,
    /// The session's credential.
    pub parent: String,
    /// When its key was last shown (sign-in or step-up).
    pub verified_ms: i64,
}

/// The `credential` of an issued key.
pub fn key_credential(id: &str) -> String {
    format!("key:{id}")
}

/// Why a key was refused (each says what to do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Unknown,
    Revoked,
    Expired,
    UserDisabled,
    /// A session whose key was revoked or expired.
    SessionEnded,
    /// A WebSocket ticket used already, expired, or not a ticket.
    TicketSpent,
}

impl Refusal {
    pub fn message(self) -> &'static str {
        match self {
            Self::Unknown => "the API key is not valid",
            Self::Revoked => "the API key was revoked; ask an administrator for a new one",
            Self::Expired => "the API key has expired; ask an administrator for a new one",
            Self::UserDisabled => "this user is disabled; ask an administrator",
            Self::TicketSpent => "this WebSocket ticket is used up or expired; ask `POST /api/v1/ws-tickets` for a new one",
            Self::SessionEnded => "this session has ended with the key it was opened with; sign in again with a valid key",
        }
    }
}

/// The accounts as this gateway knows them.
pub struct Accounts {
    bootstrap: Vec<ApiKey>,
    bootstrap_admins: HashSet<String>,
    users: RwLock<HashMap<String, (u64, UserAccount)>>,
    keys: RwLock<HashMap<String, (u64, ApiKeyRecord)>>,
    orgs: RwLock<HashMap<String, (u64, Org)>>,
    pub kv: kv::Store,
}

const USER_PREFIX: &str = "user.";
const KEY_PREFIX: &str = "key.";
const ORG_PREFIX: &str = "org.";

/// Why an organization could not be stored.
#[derive(Debug)]
pub enum OrgWrite {
    /// Another change came first (or, creating, the name is taken).
    Conflict,
    Bus(BusError),
}

impl Accounts {
    /// Loads the bucket and keeps following it until `shutdown`.
    pub async fn open(js: &jetstream::Context, config: &Config, shutdown: Shutdown) -> Result<Arc<Self>, BusError> {
        let bus = |e: &dyn std::fmt::Display| BusError::new(BusErrorKind::Read, format!("{}: {e}", subjects::AUTH_BUCKET));
        let kv = js.get_key_value(subjects::AUTH_BUCKET).await.map_err(|e| bus(&e))?;
        let me = Arc::new(Self {
            bootstrap: config.api_keys.clone(),
            bootstrap_admins: config.gateway.admins.iter().cloned().collect(),
            users: RwLock::new(HashMap::new()),
            keys: RwLock::new(HashMap::new()),
            orgs: RwLock::new(HashMap::new()),
            kv: kv.clone(),
        });
        let watch = me.follow().await.map_err(|e| bus(&e))?;
        let follower = me.clone();
        tokio::spawn(async move {
            let mut shutdown = shutdown;
            let mut watch = watch;
            loop {
                tokio::select! {
                    _ = shutdown.wait() => return,
                    next = watch.next() => match next {
                        Some(Ok(entry)) => follower.apply(&entry),
                        Some(Err(e)) => tracing::warn!(error = %e, "accounts watch error"),
                        None => {
                            // A gateway that stopped following would keep accepting keys revoked
                            // elsewhere: follow again, from a fresh load, until it works.
                            tracing::warn!("the accounts watch ended; following again");
                            loop {
                                tokio::select! {
                                    _ = shutdown.wait() => return,
                                    _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
                                }
                                match follower.follow().await {
                                    Ok(w) => {
                                        watch = w;
                                        break;
                                    }
                                    Err(e) => tracing::error!(error = %e, "cannot follow the accounts bucket; revocations from other gateways wait"),
                                }
                            }
                        }
                    },
                }
            }
        });
        Ok(me)
    }

    /// Starts watching the bucket, then loads all of it. Watch first: nothing written in between
    /// is missed, and revisions keep an older value from replacing a newer one.
    async fn follow(&self) -> Result<kv::Watch, String> {
        let watch = self.kv.watch_all().await.map_err(|e| e.to_string())?;
        let mut names = self.kv.keys().await.map_err(|e| e.to_string())?;
        while let Some(name) = names.next().await {
            let name = name.map_err(|e| e.to_string())?;
            if let Some(entry) = self.kv.entry(&name).await.map_err(|e| e.to_string())? {
                self.apply(&entry);
            }
        }
        Ok(watch)
    }

    /// Takes in one entry of the bucket (from the watch or the initial load).
    fn apply(&self, entry: &kv::Entry) {
        self.apply_value(&entry.key, entry.revision, entry.operation != kv::Operation::Put, &entry.value);
    }

    /// Takes in the value of `key` at `revision` (or its deletion), unless a newer one is known.
    fn apply_value(&self, key: &str, revision: u64, deleted: bool, value: &[u8]) {
        if let Some(name) = key.strip_prefix(USER_PREFIX) {
            apply_to(&self.users, name, revision, deleted, value);
        } else if let Some(id) = key.strip_prefix(KEY_PREFIX) {
            apply_to(&self.keys, id, revision, deleted, value);
        } else if let Some(name) = key.strip_prefix(ORG_PREFIX) {
            apply_to(&self.orgs, name, revision, deleted, value);
        }
    }

    /// Who `token` is, or why not.
    pub fn authenticate(&self, token: &str, now_ms: i64) -> Result<Principal, Refusal> {
        match keys::parse_api_key(token) {
            Some((id, secret)) => {
                let record = self.key(id).ok_or(Refusal::Unknown)?;
                let hash = keys::api_key_hash(&record.salt, secret);
                if !constant_time_eq(hash.as_bytes(), record.hash.as_bytes()) {
                    return Err(Refusal::Unknown);
                }
                self.principal(&record.user, record.scope, &key_credential(id), now_ms)
            }
            None => {
                // Compare against every bootstrap key, each in constant time.
                let mut found = None;
                for k in &self.bootstrap {
                    if constant_time_eq(k.key.as_bytes(), token.as_bytes()) {
                        found = Some(k.user.clone());
                    }
                }
                let user = UserId(found.ok_or(Refusal::Unknown)?);
                self.principal(&user, KeyScope::Full, &bootstrap_credential(token), now_ms)
            }
        }
    }

    /// `user` with `scope`, authenticated by `credential`, if that credential (and, for a
    /// session, the key it was opened with) is still good and the user is not disabled.
    pub fn principal(&self, user: &UserId, scope: KeyScope, credential: &str, now_ms: i64) -> Result<Principal, Refusal> {
        let session = self.check_credential(credential, now_ms)?;
        let account = self.account(&user.0);
        if account.as_ref().is_some_and(|a| a.disabled) {
            return Err(Refusal::UserDisabled);
        }
        let admin = account.map(|a| a.admin).unwrap_or(false) || self.bootstrap_admins.contains(&user.0);
        Ok(Principal { user: user.clone(), admin, scope, credential: credential.to_owned(), session })
    }

    /// Whether `credential` is still good now; for a session, what it knows of it.
    fn check_credential(&self, credential: &str, now_ms: i64) -> Result<Option<SessionFacts>, Refusal> {
        if let Some(fingerprint) = credential.strip_prefix("bootstrap:") {
            // An operator's key is good while the configuration still holds it.
            return if self
                .bootstrap
                .iter()
                .any(|k| constant_time_eq(bootstrap_credential(&k.key).as_bytes(), format!("bootstrap:{fingerprint}").as_bytes()))
            {
                Ok(None)
            } else {
                Err(Refusal::Revoked)
            };
        }
        // A sign-in through the identity provider: good while the user is (the provider said
        // who they were when the session began; the session's own expiry bounds it).
        if credential.starts_with("sso:") {
            return Ok(None);
        }
        let id = credential.strip_prefix("key:").ok_or(Refusal::Unknown)?;
        let record = self.key(id).ok_or(Refusal::Unknown)?;
        if record.revoked_ms.is_some() {
            return Err(if record.session { Refusal::SessionEnded } else { Refusal::Revoked });
        }
        if record.expires_ms.is_some_and(|t| t <= now_ms) {
            return Err(if record.session { Refusal::SessionEnded } else { Refusal::Expired });
        }
        if !record.session {
            return Ok(None);
        }
        // A session is only as good as the key it was opened with: revoked, expired or gone,
        // the session ends with it, on every gateway as soon as the change reaches it.
        let parent = record.parent.clone().ok_or(Refusal::SessionEnded)?;
        if parent.starts_with("key:") && self.key(parent.trim_start_matches("key:")).is_some_and(|k| k.session) {
            return Err(Refusal::SessionEnded);
        }
        self.check_credential(&parent, now_ms).map_err(|_| Refusal::SessionEnded)?;
        Ok(Some(SessionFacts { id: record.id.clone(), parent, verified_ms: record.verified_ms.unwrap_or(record.created_ms) }))
    }

    /// When `credential` stops being good by itself (a key's expiry), if it does.
    pub fn credential_expiry(&self, credential: &str) -> Option<i64> {
        self.key(credential.strip_prefix("key:")?)?.expires_ms
    }

    /// A user's account, if an admin made or changed one.
    pub fn account(&self, name: &str) -> Option<UserAccount> {
        self.users.read().unwrap_or_else(|e| e.into_inner()).get(name).map(|(_, a)| a.clone())
    }

    /// Whether `name` is a user: an account, or named by a bootstrap key.
    pub fn exists(&self, name: &str) -> bool {
        self.account(name).is_some() || self.bootstrap.iter().any(|k| k.user == name)
    }

    /// Whether `name` is an admin only by the operator's configuration.
    pub fn is_bootstrap_admin(&self, name: &str) -> bool {
        self.bootstrap_admins.contains(name)
    }

    /// Every user: accounts and bootstrap users, by name.
    pub fn users(&self) -> Vec<(String, Option<UserAccount>)> {
        let mut names: Vec<String> = self.users.read().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
        names.extend(self.bootstrap.iter().map(|k| k.user.clone()));
        names.sort();
        names.dedup();
        names.into_iter().map(|n| (n.clone(), self.account(&n))).collect()
    }

    /// The keys issued to `user`, oldest first.
    pub fn keys_of(&self, user: &str) -> Vec<ApiKeyRecord> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<ApiKeyRecord> = keys.values().filter(|(_, k)| k.user.0 == user).map(|(_, k)| k.clone()).collect();
        out.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then_with(|| a.id.cmp(&b.id)));
        out
    }

    pub fn key(&self, id: &str) -> Option<ApiKeyRecord> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).get(id).map(|(_, k)| k.clone())
    }

    /// Stores a user account and applies it here before returning.
    pub async fn put_user(&self, account: UserAccount) -> Result<(), BusError> {
        let name = format!("{USER_PREFIX}{}", account.user.0);
        self.put(name, Envelope::new(account, halyard_platform::now_ms())).await
    }

    /// Stores a key record and applies it here before returning.
    pub async fn put_key(&self, record: ApiKeyRecord) -> Result<(), BusError> {
        let name = format!("{KEY_PREFIX}{}", record.id);
        self.put(name, Envelope::new(record, halyard_platform::now_ms())).await
    }

    /// Organization `name` and its revision.
    pub fn org(&self, name: &str) -> Option<(u64, Org)> {
        self.orgs.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// Every organization, by name.
    pub fn all_orgs(&self) -> Vec<(u64, Org)> {
        self.orgs.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// The user single sign-on made or claimed for `subject` (`<issuer>#<sub>`), if any.
    /// The account an administrator made for `email` that no identity is bound to yet.
    pub fn by_email_unbound(&self, email: &str) -> Option<UserAccount> {
        self.users
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .find(|(_, a)| a.sso_subject.is_none() && a.email.as_deref().is_some_and(|e| e.eq_ignore_ascii_case(email)))
            .map(|(_, a)| a.clone())
    }

    pub fn by_sso_subject(&self, subject: &str) -> Option<UserAccount> {
        self.users
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .find(|(_, a)| a.sso_subject.as_deref() == Some(subject))
            .map(|(_, a)| a.clone())
    }

    /// The organizations `user` is a member of, by name.
    pub fn orgs_of(&self, user: &UserId) -> Vec<Org> {
        let orgs = self.orgs.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<Org> = orgs.values().filter(|(_, o)| o.members.contains_key(user)).map(|(_, o)| o.clone()).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Stores `org`: created when `revision` is `None` (its name must be free), else only over
    /// that revision; applied here before returning.
    pub async fn save_org(&self, org: Org, revision: Option<u64>) -> Result<(), OrgWrite> {
        let name = format!("{ORG_PREFIX}{}", org.name);
        let bytes = halyard_protocol::encode(&Envelope::new(org, halyard_platform::now_ms())).map_err(|e| OrgWrite::Bus(e.into()))?;
        let bus =
            |e: &dyn std::fmt::Display| OrgWrite::Bus(BusError::new(BusErrorKind::Publish, format!("{}: {e}", subjects::AUTH_BUCKET)));
        let written = match revision {
            None => self.kv.create(&name, bytes.clone().into()).await.map_err(|e| match e.kind() {
                kv::CreateErrorKind::AlreadyExists => OrgWrite::Conflict,
                _ => bus(&e),
            })?,
            Some(r) => self.kv.update(&name, bytes.clone().into(), r).await.map_err(|e| match e.kind() {
                kv::UpdateErrorKind::WrongLastRevision => OrgWrite::Conflict,
                _ => bus(&e),
            })?,
        };
        self.apply_value(&name, written, false, &bytes);
        Ok(())
    }

    /// Forgets `user`'s sessions that have ended (expired or signed out), and ends the oldest
    /// live ones past `keep`. A session is one request away for anyone with a key, so they
    /// must not pile up in the bucket that every gateway holds in memory.
    pub async fn prune_sessions(&self, user: &str, now_ms: i64, keep: usize) -> Result<(), BusError> {
        let (ended, live): (Vec<ApiKeyRecord>, Vec<ApiKeyRecord>) = self
            .keys_of(user)
            .into_iter()
            .filter(|k| k.session)
            .partition(|k| k.revoked_ms.is_some() || k.expires_ms.is_some_and(|e| e <= now_ms));
        // `keys_of` is oldest first.
        let excess = live.len().saturating_sub(keep);
        for k in ended.iter().chain(live.iter().take(excess)) {
            let name = format!("{KEY_PREFIX}{}", k.id);
            self.kv.purge(&name).await.map_err(|e| BusError::new(BusErrorKind::Publish, format!("{}: {e}", subjects::AUTH_BUCKET)))?;
            // Gone here at once; the watch removes it on every other gateway.
            self.keys.write().unwrap_or_else(|e| e.into_inner()).remove(&k.id);
        }
        Ok(())
    }

    async fn put<P: halyard_protocol::envelope::Payload>(&self, name: String, env: Envelope<P>) -> Result<(), BusError> {
        let bytes = halyard_protocol::encode(&env)?;
        let revision = self
            .kv
            .put(&name, bytes.clone().into())
            .await
            .map_err(|e| BusError::new(BusErrorKind::Publish, format!("{}: {e}", subjects::AUTH_BUCKET)))?;
        self.apply_value(&name, revision, false, &bytes);
        Ok(())
    }
}

/// The `credential` of an operator's bootstrap key: a fingerprint that names it without
/// holding it.
pub fn bootstrap_credential(key: &str) -> String {
    format!("bootstrap:{}", &keys::api_key_hash("halyard-bootstrap-key", key)[..24])
}

/// Puts the value of `name` at `revision` into `map` (or removes it), unless `map` holds a newer
/// one. An undecodable value is skipped with a warning.
fn apply_to<T: serde::de::DeserializeOwned>(
    map: &RwLock<HashMap<String, (u64, T)>>,
    name: &str,
    revision: u64,
    deleted: bool,
    value: &[u8],
) {
    let mut map = map.write().unwrap_or_else(|e| e.into_inner());
    if map.get(name).is_some_and(|(rev, _)| *rev >= revision) {
        return;
    }
    if deleted {
        map.remove(name);
        return;
    }
    match halyard_protocol::decode::<T>(value) {
        Ok(env) => {
            map.insert(name.to_owned(), (revision, env.payload));
        }
        Err(e) => tracing::warn!(%name, error = %e, "undecodable account entry skipped"),
    }
}
