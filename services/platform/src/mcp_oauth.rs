//! OAuth sign-in to users' MCP servers, as the MCP authorization spec has a client do it, with
//! the MCP SDK's own implementation (`rmcp`'s `auth`): protected resource metadata, authorization
//! server discovery, dynamic client registration, PKCE, `resource` indicators and refreshes. The
//! gateway starts and finishes a sign-in; the agent runner uses it and refreshes its tokens. What
//! both need lives here, once:
//!
//! - [`Outbound`]: every HTTP exchange of the flow goes through the outbound client (addresses
//!   checked, no redirects), so a server's metadata cannot aim Halyard at the deployment's inside;
//! - [`SignInStore`]: the SDK's credential store over `mcpoauth.<user>.<server>` (a user's own
//!   server) or `orgmcpoauth.<org>.<server>` (an organization's) in the user bucket, sealed with
//!   the vault, for one URL only, one refresh at a time across processes ([`crate::kv_lease`]);
//! - [`FlowState`]: the SDK's state store for one flow, whose state the gateway carries between
//!   the start and the callback itself;
//! - [`manager`]: an authorization manager for a server, its metadata discovered, and
//!   [`signed_in`]: one ready to call it with a stored sign-in;
//! - [`revoke`]: a sign-in ended at its authorization server too (RFC 7009), at sign-out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_nats::jetstream::kv;
use halyard_protocol::user::McpSignIn;
use halyard_protocol::{UserId, subjects};

pub use rmcp::transport::auth::{AuthorizationManager, AuthorizationMetadata, OAuthClientConfig};
pub use rmcp::transport::{AuthClient, AuthError, StoredAuthorizationState, StoredCredentials};
use rmcp::transport::{CredentialRefreshGuard, CredentialStore, OAuthHttpClient, OAuthHttpClientFuture, OAuthHttpRequest, StateStore};

use crate::kv_lease::KvLease;
use crate::vault::{self, Vault};

/// Largest answer read from an authorization server or a resource's metadata.
const MAX_BODY: usize = 1 << 20;
/// How long one exchange with an authorization server may take.
const TIMEOUT: Duration = Duration::from_secs(15);
/// How long a refresh holds its sign-in's lease: a token exchange (at most [`TIMEOUT`]) and a
/// save. A process that died holding it is passed over after this.
const REFRESH_LEASE: Duration = Duration::from_secs(30);

/// The outbound client as the SDK's HTTP client for the OAuth flow. It follows no redirect (a
/// `3xx` is handed back as it is, and the flow fails on it).
pub struct Outbound(reqwest::Client);

impl Outbound {
    /// Connecting only to addresses `allow` permits (`HALYARD_MCP_ALLOW`).
    pub fn new(allow: &[String]) -> Result<Self, AuthError> {
        let client = crate::outbound::builder(allow).timeout(TIMEOUT).build().map_err(|e| AuthError::InternalError(e.to_string()))?;
        Ok(Self(client))
    }
}

impl OAuthHttpClient for Outbound {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let (parts, body) = request.request.into_parts();
            let mut response = self.0.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body).send().await?;
            let mut out = axum::http::Response::builder().status(response.status());
            for (name, value) in response.headers() {
                out = out.header(name, value);
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                body.extend_from_slice(&chunk);
                if body.len() > MAX_BODY {
                    return Err(format!("the answer is larger than {MAX_BODY} bytes").into());
                }
            }
            Ok(out.body(body)?)
        })
    }
}

/// An authorization manager for the MCP server at `url`, reached through [`Outbound`], with the
/// server's protected resource metadata and its authorization server's metadata read. A server
/// that publishes neither does not do OAuth: [`AuthError::NoAuthorizationSupport`].
pub async fn manager(url: &str, allow: &[String]) -> Result<AuthorizationManager, AuthError> {
    let (mut manager, metadata) = discovered(url, Outbound::new(allow)?).await?;
    manager.set_metadata(metadata);
    Ok(manager)
}

/// A manager for the MCP server `store` holds a sign-in to, ready to call it: its client as it
/// was registered, with the secret of a confidential client (the SDK's store keeps only the
/// client's id, and an authorization server that registered Halyard with a secret refuses a
/// refresh without it). None when there is no sign-in to use.
pub async fn signed_in(store: SignInStore, allow: &[String]) -> Result<Option<AuthorizationManager>, AuthError> {
    let secret = store.registered_secret().await?;
    let mut manager = manager(&store.url, allow).await?;
    let redirect = store.url.clone();
    manager.set_credential_store(store);
    if !manager.initialize_from_store().await? {
        return Ok(None);
    }
    if let Some((client_id, secret)) = secret {
        manager.configure_client(OAuthClientConfig::new(client_id, redirect).with_client_secret(secret))?;
    }
    Ok(Some(manager))
}

/// The SDK's discovery for the MCP server at `url` through `outbound`: a manager, and the
/// authorization server's metadata (which the manager keeps no getter for).
async fn discovered(url: &str, outbound: Outbound) -> Result<(AuthorizationManager, AuthorizationMetadata), AuthError> {
    let manager = AuthorizationManager::new_with_oauth_http_client(url, Arc::new(outbound)).await?;
    let resolution = manager.resolve_metadata().await?;
    if !resolution.source.is_discovered() {
        return Err(AuthError::NoAuthorizationSupport);
    }
    Ok((manager, resolution.metadata))
}

/// Ends `store`'s sign-in at its authorization server too, when that server offers token
/// revocation (RFC 7009: `revocation_endpoint` in its metadata): the refresh token (which ends
/// the whole grant at most servers), else the access token, as the client Halyard registered as
/// (authenticated with its secret where it has one). Whether the server took it. The caller
/// forgets the sign-in whatever it says.
pub async fn revoke(store: &SignInStore, allow: &[String]) -> Result<bool, AuthError> {
    let Some(Sealed { credentials, client_secret }) = store.sealed().await? else { return Ok(false) };
    let tokens = serde_json::to_value(&credentials.token_response).map_err(|e| AuthError::InternalError(e.to_string()))?;
    let (token, hint) = match (tokens["refresh_token"].as_str(), tokens["access_token"].as_str()) {
        (Some(refresh), _) => (refresh, "refresh_token"),
        (None, Some(access)) => (access, "access_token"),
        (None, None) => return Ok(false),
    };
    let outbound = Outbound::new(allow)?;
    let client = outbound.0.clone();
    let (_, metadata) = discovered(&store.url, outbound).await?;
    if !issued_by(credentials.issuer.as_deref(), &metadata) {
        tracing::warn!(server = %store.server, "an MCP server now names another authorization server; its sign-in is not revoked there");
        return Ok(false);
    }
    let Some(endpoint) = metadata.additional_fields.get("revocation_endpoint").and_then(serde_json::Value::as_str) else {
        return Ok(false);
    };
    let encode = crate::net::percent_encode;
    let id = encode(&credentials.client_id);
    let mut body = format!("token={}&token_type_hint={hint}&client_id={id}", encode(token));
    let mut request = client.post(endpoint).header("content-type", "application/x-www-form-urlencoded");
    if let Some(secret) = client_secret {
        // As the SDK authenticates at the token endpoint: HTTP Basic (RFC 6749 2.3.1, both parts
        // form-encoded) unless the server takes only the secret in the body.
        let methods = metadata.additional_fields.get("token_endpoint_auth_methods_supported").and_then(serde_json::Value::as_array);
        let offers = |m: &str| methods.is_some_and(|all| all.iter().any(|x| x.as_str() == Some(m)));
        if offers("client_secret_post") && !offers("client_secret_basic") {
            body.push_str(&format!("&client_secret={}", encode(&secret)));
        } else {
            request = request.basic_auth(id, Some(encode(&secret)));
        }
    }
    let response = request.body(body).send().await.map_err(|e| AuthError::InternalError(crate::outbound::why(&e)))?;
    Ok(response.status().is_success())
}

/// Whether the authorization server `metadata` describes is the one that issued tokens whose
/// issuer was `stored`: a server whose metadata now names another one would have the tokens
/// (and the client's secret) sent there. (The SDK checks the same before it refreshes.)
fn issued_by(stored: Option<&str>, metadata: &AuthorizationMetadata) -> bool {
    stored.is_none_or(|issuer| metadata.issuer.as_deref() == Some(issuer))
}

/// Whose server a sign-in is to: a user's own, or an organization's (signed in to once, by one of
/// its owners or admins, for all its members' conversations in it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignInOwner {
    User(UserId),
    Org(String),
}

impl SignInOwner {
    /// Where its sign-in to `server` is kept in the user bucket.
    pub fn key(&self, server: &str) -> String {
        match self {
            Self::User(user) => subjects::mcp_sign_in_key(user, server),
            Self::Org(org) => subjects::org_mcp_sign_in_key(org, server),
        }
    }

    fn slot(&self, server: &str) -> String {
        match self {
            Self::User(user) => vault::mcp_sign_in_slot(&user.0, server),
            Self::Org(org) => vault::mcp_sign_in_slot(&halyard_protocol::user::org_slot_owner(org), server),
        }
    }
}

impl std::fmt::Display for SignInOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::User(user) => write!(f, "{user}"),
            Self::Org(org) => write!(f, "@{org}"),
        }
    }
}

/// `owner`'s sign-in to their server `server` at `url`, as the SDK's credential store. A record
/// for another URL is not theirs to use here: it reads as none, and is replaced on save.
#[derive(Clone)]
pub struct SignInStore {
    pub kv: kv::Store,
    pub vault: Arc<Vault>,
    pub owner: SignInOwner,
    pub server: String,
    pub url: String,
    /// The secret of the client the authorization server registered, for the sign-in's first
    /// save (the gateway's, after the code exchange); later saves keep the one stored.
    client_secret: Option<String>,
}

/// What a sign-in seals: the SDK's credentials, and the secret of the client they were issued
/// to, where the authorization server made it a confidential one.
#[derive(serde::Serialize, serde::Deserialize)]
struct Sealed {
    credentials: StoredCredentials,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_secret: Option<String>,
}

impl SignInStore {
    pub fn new(kv: kv::Store, vault: Arc<Vault>, owner: SignInOwner, server: String, url: String) -> Self {
        Self { kv, vault, owner, server, url, client_secret: None }
    }

    /// The store for a sign-in whose client was registered with `secret`.
    pub fn with_client_secret(mut self, secret: Option<String>) -> Self {
        self.client_secret = secret;
        self
    }

    fn key(&self) -> String {
        self.owner.key(&self.server)
    }

    fn slot(&self) -> String {
        self.owner.slot(&self.server)
    }

    /// The stored sign-in, if there is one for this URL.
    pub async fn record(&self) -> Result<Option<McpSignIn>, AuthError> {
        let failed = |e: String| AuthError::CredentialStoreError(format!("your sign-in to `{}`: {e}", self.server));
        match self.kv.get(self.key()).await.map_err(|e| failed(e.to_string()))? {
            None => Ok(None),
            Some(bytes) => {
                let record: McpSignIn = serde_json::from_slice(&bytes).map_err(|e| failed(e.to_string()))?;
                Ok((record.url == self.url).then_some(record))
            }
        }
    }

    /// Removes the sign-in.
    pub async fn forget(&self) -> Result<(), AuthError> {
        self.kv.purge(self.key()).await.map_err(|e| AuthError::CredentialStoreError(e.to_string()))
    }

    /// What the stored sign-in sealed, if there is one for this URL.
    async fn sealed(&self) -> Result<Option<Sealed>, AuthError> {
        self.record().await?.map(|record| self.open(&record)).transpose()
    }

    fn open(&self, record: &McpSignIn) -> Result<Sealed, AuthError> {
        let open = self.vault.open(&self.slot(), &record.credentials_sealed).map_err(|e| AuthError::CredentialStoreError(e.to_string()))?;
        serde_json::from_str(&open).map_err(|e| AuthError::CredentialStoreError(e.to_string()))
    }

    /// The stored sign-in's client id and secret, when its client has a secret.
    async fn registered_secret(&self) -> Result<Option<(String, String)>, AuthError> {
        Ok(self.sealed().await?.and_then(|s| Some((s.credentials.client_id, s.client_secret?))))
    }
}

#[async_trait::async_trait]
impl CredentialStore for SignInStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self.sealed().await?.map(|s| s.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let failed = |e: String| AuthError::CredentialStoreError(e);
        let now = crate::now_ms();
        let received = credentials.token_received_at.map(|s| i64::try_from(s).unwrap_or(i64::MAX / 2).saturating_mul(1000)).unwrap_or(now);
        // (`expires_in` as the token response has it, in seconds.)
        let lifetime = credentials.token_response.as_ref().and_then(|t| serde_json::to_value(t).ok()?.get("expires_in")?.as_i64());
        let expires_ms = lifetime.map(|secs| received.saturating_add(secs.saturating_mul(1000)));
        // The first sign-in's time and its client's secret stay; a sign-in again over an old one
        // starts anew (the gateway purges the old one first).
        let previous = self.record().await?;
        let signed_in_ms = previous.as_ref().map_or(now, |r| r.signed_in_ms);
        let client_secret = match (&self.client_secret, previous) {
            (Some(secret), _) => Some(secret.clone()),
            // (Only for the client it was registered with.)
            (None, Some(previous)) => {
                let kept = self.open(&previous)?;
                kept.client_secret.filter(|_| kept.credentials.client_id == credentials.client_id)
            }
            (None, None) => None,
        };
        let issuer = credentials.issuer.clone();
        let scopes = credentials.granted_scopes.clone();
        let json = serde_json::to_string(&Sealed { credentials, client_secret }).map_err(|e| failed(e.to_string()))?;
        let sealed = self.vault.seal(&self.slot(), &json).map_err(|e| failed(e.to_string()))?;
        let record =
            McpSignIn { url: self.url.clone(), issuer, credentials_sealed: sealed, scopes, expires_ms, signed_in_ms, refreshed_ms: now };
        let bytes = serde_json::to_vec(&record).map_err(|e| failed(e.to_string()))?;
        self.kv.put(self.key(), bytes.into()).await.map(|_| ()).map_err(|e| failed(e.to_string()))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.forget().await
    }

    /// The refresh token was refused (revoked, expired, or used twice): the sign-in is over, and
    /// the user is asked to sign in again.
    async fn on_refresh_token_rejected(&self, _credentials: &StoredCredentials) -> Result<(), AuthError> {
        tracing::info!(owner = %self.owner, server = %self.server, "an MCP server's refresh token was refused; the sign-in is removed");
        self.forget().await
    }

    /// One refresh at a time per sign-in, across every process: a provider that rotates refresh
    /// tokens refuses one used twice, and may revoke the whole grant for it. The SDK loads the
    /// credentials after taking this, so the second of two refreshers uses the first's tokens.
    /// Waiters in this process queue on a mutex; processes, on a lease key beside the sign-in's.
    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        type Locks = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;
        static LOCKS: OnceLock<Locks> = OnceLock::new();
        let lock = {
            let mut locks =
                LOCKS.get_or_init(Locks::default).lock().map_err(|_| AuthError::CredentialStoreError("a lock was poisoned".into()))?;
            locks.entry(self.key()).or_default().clone()
        };
        let here = lock.lock_owned().await;
        let lease = KvLease::take(&self.kv, &subjects::mcp_sign_in_lease_key(&self.key()), REFRESH_LEASE, REFRESH_LEASE * 2)
            .await
            .map_err(|e| AuthError::CredentialStoreError(format!("your sign-in to `{}` is being refreshed elsewhere: {e}", self.server)))?;
        Ok(Some(CredentialRefreshGuard::new((here, lease))))
    }
}

/// The SDK's state store for one flow: the state it saves when it makes the authorization URL is
/// taken out ([`FlowState::take`]) for the gateway to carry to the callback, and put back
/// ([`FlowState::with`]) for the code exchange there.
#[derive(Clone, Default)]
pub struct FlowState(Arc<Mutex<Option<(String, StoredAuthorizationState)>>>);

impl FlowState {
    pub fn with(csrf: String, state: StoredAuthorizationState) -> Self {
        Self(Arc::new(Mutex::new(Some((csrf, state)))))
    }

    /// The state saved (its CSRF token and what it keeps), if any.
    pub fn take(&self) -> Option<(String, StoredAuthorizationState)> {
        self.0.lock().ok()?.take()
    }
}

#[async_trait::async_trait]
impl StateStore for FlowState {
    async fn save(&self, csrf_token: &str, state: StoredAuthorizationState) -> Result<(), AuthError> {
        let mut kept = self.0.lock().map_err(|_| AuthError::InternalError("a lock was poisoned".into()))?;
        *kept = Some((csrf_token.to_owned(), state));
        Ok(())
    }

    async fn load(&self, csrf_token: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        let kept = self.0.lock().map_err(|_| AuthError::InternalError("a lock was poisoned".into()))?;
        Ok(kept.as_ref().filter(|(csrf, _)| crate::keys::constant_time_eq(csrf.as_bytes(), csrf_token.as_bytes())).map(|(_, s)| s.clone()))
    }

    async fn delete(&self, _csrf_token: &str) -> Result<(), AuthError> {
        if let Ok(mut kept) = self.0.lock() {
            kept.take();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_and_an_organizations_sign_ins_are_kept_and_sealed_apart() {
        let (user, org) = (SignInOwner::User(UserId("acme".into())), SignInOwner::Org("acme".into()));
        assert_eq!(user.key("notes"), "mcpoauth.acme.notes");
        assert_eq!(org.key("notes"), "orgmcpoauth.acme.notes");
        assert_ne!(user.slot("notes"), org.slot("notes"));
        // A ciphertext sealed for the user's sign-in does not open as the organization's.
        let vault = Vault::new("a deployment secret").unwrap();
        let sealed = vault.seal(&user.slot("notes"), "{}").unwrap();
        assert!(vault.open(&org.slot("notes"), &sealed).is_err());
        assert!(vault.open(&user.slot("other"), &sealed).is_err());
    }

    #[test]
    fn tokens_are_revoked_only_at_the_authorization_server_that_issued_them() {
        let metadata = |issuer: Option<&str>| -> AuthorizationMetadata {
            let mut m = serde_json::json!({"authorization_endpoint": "https://as/a", "token_endpoint": "https://as/t"});
            if let Some(issuer) = issuer {
                m["issuer"] = issuer.into();
            }
            serde_json::from_value(m).unwrap()
        };
        assert!(issued_by(Some("https://as"), &metadata(Some("https://as"))));
        assert!(!issued_by(Some("https://as"), &metadata(Some("https://elsewhere"))));
        assert!(!issued_by(Some("https://as"), &metadata(None)));
        assert!(issued_by(None, &metadata(Some("https://as"))));
    }

    #[tokio::test]
    async fn a_flows_state_is_given_back_only_for_its_own_csrf_token() {
        let state: StoredAuthorizationState = serde_json::from_value(serde_json::json!({
            "pkce_verifier": "v", "csrf_token": "right", "created_at": 0
        }))
        .unwrap();
        let flow = FlowState::with("right".into(), state);
        assert!(flow.load("wrong").await.unwrap().is_none());
        assert_eq!(flow.load("right").await.unwrap().map(|s| s.pkce_verifier), Some("v".to_owned()));
        flow.delete("right").await.unwrap();
        assert!(flow.load("right").await.unwrap().is_none());
    }
}
