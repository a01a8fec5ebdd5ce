//! Keeping the egress proxy in step with a container held to an outbound policy
//! ([`SandboxState::sync_egress`]): while it runs on the `policy` network, the proxy serves its
//! address by its rules (the deployment's layer, then its shape's), and its executor exports the
//! proxy's variables; anything else, and the proxy forgets it.

use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::egress::EgressRules;
use halyard_protocol::system::SandboxStatus;

use super::SandboxState;
use crate::egress::Egress;
use crate::egress_proxy::Tenant;

impl SandboxState {
    /// Admits the sandbox to the proxy (or forgets it) for `status`, and tells its executor
    /// when what it should export changed.
    pub(super) async fn sync_egress(&mut self, status: SandboxStatus) {
        let Some(proxy) = self.ctx.docker.as_ref().and_then(|d| d.egress.clone()) else { return };
        // The conversation is part of it: a warm-pool sandbox gets one when it is handed out.
        let wanted = (status == SandboxStatus::Running && self.egress_class() == Some(Egress::Policy))
            .then(|| self.container_address())
            .flatten()
            .map(|ip| (ip, self.egress_rules(), self.conversation));
        if wanted == self.egress_admitted {
            return;
        }
        let vars = match &wanted {
            Some((ip, rules, conversation)) => {
                let tenant = Tenant { sandbox: self.id, conversation: *conversation, rules: rules.clone() };
                proxy.admit(*ip, tenant);
                proxy.variables()
            }
            None => {
                proxy.forget(self.id);
                Default::default()
            }
        };
        let was_admitted = self.egress_admitted.is_some();
        self.egress_admitted = wanted;
        // A sandbox that never was on the policy network has no variables to take back.
        if status != SandboxStatus::Running || (vars.is_empty() && !was_admitted) {
            return;
        }
        if let Some(url) = self.agent_url() {
            let exec = ExecutorClient::new(self.ctx.http.clone(), url.to_owned(), self.key());
            if let Err(e) = exec.set_network(vars).await {
                tracing::warn!(sandbox_id = %self.id, error = %e, "cannot give the sandbox its proxy variables");
            }
        }
    }

    /// The network class its container is on: its spec's as its shape changes it.
    fn egress_class(&self) -> Option<Egress> {
        let mut spec = self.ctx.config.sandbox.spec(&self.spec)?;
        if let Some(shape) = &self.shape {
            crate::shape::shaped(&mut spec, shape, |e| self.ctx.config.sandbox.bounded_egress(e));
        }
        Egress::parse(&spec.egress).ok()
    }

    /// The deployment's layer, then what its start resolved (organization, environment).
    fn egress_rules(&self) -> EgressRules {
        let mut rules = EgressRules::default().with("deployment", Some(&self.ctx.config.sandbox.egress));
        if let Some(given) = self.shape.as_ref().and_then(|s| s.egress_rules.as_ref()) {
            rules.layers.extend(given.layers.iter().cloned());
        }
        rules
    }

    /// The container's address on its internal network (its executor's URL's host there).
    fn container_address(&self) -> Option<std::net::IpAddr> {
        let url = self.agent_url()?;
        let authority = url.strip_prefix("http://")?.split('/').next()?;
        authority.parse::<std::net::SocketAddr>().ok().map(|a| a.ip())
    }
}
