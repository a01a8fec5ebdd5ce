//! The OAuth sign-ins to a run's `http` MCP servers as it finds them ([`SignIns`]: the owner's to
//! their own, the organization's to its), and how a server that wants one is told apart from one that is down
//! ([`Unreachable`]). The sign-ins are made by the gateway (`/mcp-servers/{name}/sign-in`) and
//! used by [`super::mcp`], which calls such a server with the MCP SDK's authorized client.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use halyard_platform::mcp_oauth::{AuthError, SignInOwner, SignInStore};
use halyard_protocol::UserId;
use halyard_protocol::user::{McpServerConfig, McpSignIn};

use crate::ctx::Ctx;

/// The OAuth sign-ins a run's `http` servers are called with, by server name: the owner's to
/// their own servers, the organization's to its servers (signed in to by one of its owners or
/// admins), each only while it is for the URL configured now.
#[derive(Clone, Default)]
pub struct SignIns {
    /// Where the sign-ins are kept (none: nowhere, as in tests).
    stores: Option<(async_nats::jetstream::kv::Store, Arc<halyard_platform::vault::Vault>)>,
    pub records: BTreeMap<String, (SignInOwner, McpSignIn)>,
}

impl SignIns {
    /// The sign-ins to the servers of `configs` that are `http` and not the operator's
    /// (`trusted`): the organization's (`org`: its name and the servers of its in `configs`) to
    /// its servers, `owner`'s to the rest. One read per such server.
    pub async fn read(
        ctx: &Ctx,
        owner: &UserId,
        org: Option<(&str, &BTreeSet<String>)>,
        configs: &BTreeMap<String, McpServerConfig>,
        trusted: &BTreeMap<String, McpServerConfig>,
    ) -> Self {
        let whose = |name: &String| match org {
            Some((org, names)) if names.contains(name) => SignInOwner::Org(org.to_owned()),
            _ => SignInOwner::User(owner.clone()),
        };
        let signable = configs.iter().filter_map(|(name, config)| match config {
            McpServerConfig::Http { url, .. } if trusted.get(name) != Some(config) => Some((name, url, whose(name))),
            _ => None,
        });
        let reads = signable.map(|(name, url, owner)| async move {
            let store = SignInStore::new(ctx.user_kv.clone(), ctx.vault.clone(), owner.clone(), name.clone(), url.clone());
            match store.record().await {
                Ok(record) => record.map(|r| (name.clone(), (owner, r))),
                Err(e) => {
                    tracing::warn!(%owner, server = %name, error = %e, "cannot read an MCP sign-in; the server is called without it");
                    None
                }
            }
        });
        let records = futures::future::join_all(reads).await.into_iter().flatten().collect();
        Self { stores: Some((ctx.user_kv.clone(), ctx.vault.clone())), records }
    }

    /// The credential store of the sign-in to `name` at `url`, if there is one.
    pub(crate) fn store(&self, name: &str, url: &str) -> Option<SignInStore> {
        let (owner, record) = self.records.get(name).filter(|(_, r)| r.url == url)?;
        let (kv, vault) = self.stores.clone()?;
        Some(SignInStore::new(kv, vault, owner.clone(), name.to_owned(), record.url.clone()))
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
