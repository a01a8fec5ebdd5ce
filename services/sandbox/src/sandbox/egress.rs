//! Keeping the egress proxy in step with a sandbox held to an outbound policy
//! ([`SandboxState::sync_egress`]): while it runs with the `policy` class (a container on that
//! network; a process sandbox in its own network with no other way out), the proxy serves it by
//! its rules (the deployment's layer, then its shape's), and its executor exports the proxy's
//! variables; anything else, and the proxy forgets it. And moving a running process sandbox
//! between its spec's class and `policy` ([`SandboxState::move_process_network`]).

use std::os::unix::fs::MetadataExt;

use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::egress::EgressRules;
use halyard_protocol::system::SandboxStatus;

use super::SandboxState;
use crate::egress::Egress;
use crate::egress_proxy::{Door, Tenant};

impl SandboxState {
    /// Admits the sandbox to the proxy (or forgets it) for `status`, and tells its executor
    /// when what it should export changed.
    pub(super) async fn sync_egress(&mut self, status: SandboxStatus) {
        let Some(proxy) = self.ctx.egress.clone() else { return };
        // The conversation is part of it: a warm-pool sandbox gets one when it is handed out.
        let wanted = (status == SandboxStatus::Running && self.egress_class() == Some(Egress::Policy))
            .then(|| self.egress_door())
            .flatten()
            .map(|door| (door, self.egress_rules(), self.conversation));
        if wanted == self.egress_admitted {
            return;
        }
        let vars = match &wanted {
            Some((door, rules, conversation)) => {
                let tenant = Tenant { sandbox: self.id, conversation: *conversation, rules: rules.clone() };
                match door {
                    Door::Address(ip) => proxy.admit(*ip, tenant),
                    Door::Socket(_) => {
                        let path = std::path::absolute(self.layout.egress_socket()).unwrap_or_else(|_| self.layout.egress_socket());
                        if let Err(e) = proxy.admit_socket(&path, self.process_uid(), tenant) {
                            // It then has no way out at all: the relay answers 502.
                            tracing::error!(sandbox_id = %self.id, error = %e, "cannot make the sandbox's egress socket");
                        }
                    }
                }
                proxy.variables(*door)
            }
            None => {
                proxy.forget(self.id);
                Default::default()
            }
        };
        let was_admitted = self.egress_admitted.is_some();
        self.egress_admitted = wanted;
        // A sandbox that never was held to a policy has no variables to take back.
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

    /// The network class it runs with: its spec's as its shape changes it.
    pub(super) fn egress_class(&self) -> Option<Egress> {
        self.class_with(self.shape.as_ref())
    }

    /// The class it would run with under `shape`.
    pub(super) fn class_with(&self, shape: Option<&halyard_protocol::environment::Shape>) -> Option<Egress> {
        let mut spec = self.ctx.config.sandbox.spec(&self.spec)?;
        if let Some(shape) = shape {
            crate::shape::shaped(&mut spec, shape, |e| self.ctx.config.sandbox.bounded_egress(e));
        }
        Egress::parse(&spec.egress).ok()
    }

    /// Moves a running process sandbox from class `from` to `to` in its own network: onto
    /// `policy` (or `none`) by ending its user-mode NAT, so the proxy's socket is its one way
    /// out; back by starting it again (an `internet` sandbox's filter stays in its namespace).
    pub(super) async fn move_process_network(&self, from: Egress, to: Egress) -> Result<(), String> {
        let Some(pid) = self.pid else { return Err("the sandbox has no executor".into()) };
        match (from.internal(), to.internal()) {
            (false, true) => crate::netns::stop_slirp(pid).await,
            (true, false) => {
                let bwrap = self.ctx.isolation.as_ref().is_some_and(|i| matches!(i, crate::isolation::Isolation::Bwrap { .. }));
                crate::process::connect_out(pid, bwrap, self.layout.open_log()?).await
            }
            _ => Ok(()),
        }
    }

    /// How the proxy knows it: a container by its address, a process sandbox by its socket.
    fn egress_door(&self) -> Option<Door> {
        if self.docker { self.container_address().map(Door::Address) } else { Some(Door::Socket(self.id)) }
    }

    /// A process sandbox's own uid (isolation `uid`), which alone may use its socket.
    fn process_uid(&self) -> Option<u32> {
        match self.ctx.isolation {
            Some(crate::isolation::Isolation::Uid(..)) => std::fs::metadata(self.layout.workspace()).ok().map(|m| m.uid()),
            _ => None,
        }
    }

    /// The deployment's layer, its spec's, then what its start resolved (organization,
    /// environment).
    fn egress_rules(&self) -> EgressRules {
        let spec = self.ctx.config.sandbox.spec(&self.spec).and_then(|s| s.egress.policy);
        let mut rules = EgressRules::default()
            .with("deployment", Some(&self.ctx.config.sandbox.egress))
            .with(format!("spec {}", self.spec), spec.as_ref());
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
