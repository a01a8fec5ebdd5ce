//! The owner's OAuth sign-ins to their own `http` MCP servers as a run finds them
//! ([`SignIns`]), and how a server that wants one is told apart from one that is down
//! ([`Unreachable`]). The sign-ins are made by the gateway (`/mcp-servers/{name}/sign-in`) and
//! used by [`super::mcp`], which calls such a server with the MCP SDK's authorized client.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use halyard_platform::mcp_oauth::{AuthError, SignInStore};
use halyard_protocol::UserId;
use halyard_protocol::user::{McpServerConfig, McpSignIn};

use crate::ctx::Ctx;

/// The owner's OAuth sign-ins to their `http` servers, by server name: those still for the URL
/// configured now.
#[derive(Clone, Default)]
pub struct SignIns {
    /// Where the sign-ins are kept, and whose they are (none: nobody's, as in tests).
    stores: Option<(async_nats::jetstream::kv::Store, Arc<halyard_platform::vault::Vault>, UserId)>,
    pub records: BTreeMap<String, McpSignIn>,
}

impl SignIns {
    /// `owner`'s sign-ins to the servers of `configs` that are theirs: `http`, neither the
    /// operator's (`trusted`) nor the organization's (named in `org`). One read per such server.
    pub async fn read(
        ctx: &Ctx,
        owner: &UserId,
        configs: &BTreeMap<String, McpServerConfig>,
        trusted: &BTreeMap<String, McpServerConfig>,
        org: &BTreeSet<String>,
    ) -> Self {
        let theirs = configs.iter().filter_map(|(name, config)| match config {
            McpServerConfig::Http { url, .. } if trusted.get(name) != Some(config) && !org.contains(name) => Some((name, url)),
            _ => None,
        });
        let reads = theirs.map(|(name, url)| async move {
            let store = SignInStore { kv: ctx.user_kv.clone(), vault: ctx.vault.clone(), user: owner.clone(), server: name.clone(), url: url.clone() };
            match store.record().await {
                Ok(record) => record.map(|r| (name.clone(), r)),
                Err(e) => {
                    tracing::warn!(user = %owner, server = %name, error = %e, "cannot read an MCP sign-in; the server is called without it");
                    None
                }
            }
        });
        let records = futures::future::join_all(reads).await.into_iter().flatten().collect();
        Self { stores: Some((ctx.user_kv.clone(), ctx.vault.clone(), owner.clone())), records }
    }

    /// The credential store of the sign-in to `name` at `url`, if there is one.
    pub(crate) fn store(&self, name: &str, url: &str) -> Option<SignInStore> {
        let record = self.records.get(name).filter(|r| r.url == url)?;
        let (kv, vault, user) = self.stores.clone()?;
        Some(SignInStore { kv, vault, user, server: name.to_owned(), url: record.url.clone() })
    }
}

/// Why a server offers nothing: in words, and whether signing in to it would help.
#[derive(Debug)]
pub(crate) struct Unreachable {
    pub why: String,
    pub wants_sign_in: bool,
}

impl From<String> for Unreachable {
    fn from(why: String) -> Self {
        Self { why, wants_sign_in: false }
    }
}

/// Whether `e` (or what caused it) is a server's 401, or a sign-in that cannot be used.
pub(crate) fn wants_sign_in(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(current) = next {
        if current.is::<rmcp::transport::streamable_http_client::AuthRequiredError>()
            || matches!(current.downcast_ref::<AuthError>(), Some(AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_)))
        {
            return true;
        }
        next = current.source();
    }
    false
}
