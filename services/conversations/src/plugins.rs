//! Which plugins a conversation gets, decided once at its start: the deployment's, its
//! organization's and its owner's sets ([`halyard_protocol::plugin::resolve`]), or the ones it
//! was given (a helper's parent's, a fork's source's). They are recorded with their commits in
//! `conversation_started`; their skills join the conversation's here, as
//! `<plugin>:<skill>` agent skills.

use halyard_platform::plugins::{Components, ROOT_VAR};
use halyard_protocol::event::Skill;
use halyard_protocol::plugin::{PluginSet, PluginUse, Scope, resolve};
use halyard_protocol::{UserId, subjects};

use crate::ctx::Ctx;

async fn set(ctx: &Ctx, scope: &Scope) -> Result<PluginSet, String> {
    let key = subjects::plugins_key(scope);
    match ctx.user_kv.get(&key).await {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| format!("{key}: {e}")),
        Ok(None) => Ok(PluginSet::default()),
        Err(e) => Err(format!("the plugins of {} cannot be read: {e}", scope.label())),
    }
}

/// The plugins of a conversation of `owner` started in `org`.
pub async fn resolved(ctx: &Ctx, owner: &UserId, org: Option<&str>) -> Result<Vec<PluginUse>, String> {
    let deployment = set(ctx, &Scope::Deployment).await?;
    let org_set = match org {
        Some(o) => Some(set(ctx, &Scope::Org(o.to_owned())).await?),
        None => None,
    };
    let own = set(ctx, &Scope::User(owner.clone())).await?;
    Ok(resolve(&deployment, org_set.as_ref(), &own))
}

/// The skills of `plugins`, in their order.
pub async fn skills(ctx: &Ctx, plugins: &[PluginUse]) -> Result<Vec<Skill>, String> {
    let bundles = halyard_platform::plugins::read_bundles(&ctx.user_kv, plugins).await?;
    let mut out = Vec::new();
    for (u, bundle) in plugins.iter().zip(&bundles) {
        out.extend(Components::read(bundle, ROOT_VAR).map_err(|e| format!("plugin {}: {e}", u.id()))?.skills);
    }
    Ok(out)
}
