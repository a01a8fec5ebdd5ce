//! The outbound policy a start's sandbox is held to ([`halyard_protocol::egress`]): its
//! organization's (enforced: read where the gateway copies it, `orgegress.<org>`), then its
//! environment's; setup may have its own instead of the environment's (wider: installing
//! dependencies), never instead of the organization's. The supervisor adds the deployment's.

use halyard_protocol::egress::{EgressPolicy, EgressRules};
use halyard_protocol::environment::Environment;
use halyard_protocol::subjects;

use crate::task::Task;

/// The rules for the agent and for setup, if any layer sets one.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Resolved {
    pub agent: Option<EgressRules>,
    pub setup: Option<EgressRules>,
}

/// The start's rules: its organization's, then `env`'s (named `env_name`).
pub(crate) async fn resolve(task: &Task<'_>, env: Option<(&str, &Environment)>) -> Result<Resolved, String> {
    let org = match task.org.as_deref() {
        Some(org) => org_policy(task, org).await?.map(|p| (format!("organization {org}"), p)),
        None => None,
    };
    let base = || match &org {
        Some((scope, p)) => EgressRules::default().with(scope.clone(), Some(p)),
        None => EgressRules::default(),
    };
    let scope = |name: &str| format!("environment {name}");
    let agent = match env {
        Some((name, e)) => base().with(scope(name), e.egress.as_ref()),
        None => base(),
    };
    let setup = match env {
        Some((name, e)) => base().with(format!("{} setup", scope(name)), e.setup_egress_policy.as_ref().or(e.egress.as_ref())),
        None => base(),
    };
    let some = |r: EgressRules| (!r.layers.is_empty()).then_some(r);
    Ok(Resolved { agent: some(agent), setup: some(setup) })
}

/// What organization `org`'s settings hold its sandboxes to.
async fn org_policy(task: &Task<'_>, org: &str) -> Result<Option<EgressPolicy>, String> {
    let key = subjects::org_egress_key(org);
    match task.ctx.user_kv.get(&key).await {
        Ok(Some(bytes)) => {
            let p: EgressPolicy = serde_json::from_slice(&bytes).map_err(|e| format!("{key}: {e}"))?;
            Ok((!p.is_empty()).then_some(p))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(format!("cannot read organization {org}'s outbound policy: {e}")),
    }
}
