//! What a start's environment sets of a running sandbox besides its image
//! ([`halyard_protocol::environment::Shape`]): its network class (setup's, then its own again),
//! limits below its spec's, and ports served as apps. Checked against the spec here ([`check`],
//! the container rules being [`halyard_platform::environments::check_shape`]),
//! applied to a running container without stopping it ([`Engine::move_network`],
//! [`Engine::limit`]), and to a container made again ([`shaped`]).

use bollard::models::{ContainerUpdateBody, NetworkConnectRequest, NetworkDisconnectRequest};
#[cfg(doc)]
use halyard_platform::config::SandboxConfig;
use halyard_platform::config::SandboxSpec;
use halyard_protocol::environment::Shape;

use crate::docker::{DockerError, Engine};
use crate::egress::Egress;

/// Why `shape` cannot be had on a sandbox of `spec`, in words; `docker`: whether it is a
/// container (a process sandbox's network class and limits are fixed when it starts, but for
/// an outbound policy, which needs a network of its own: `own_network`).
pub fn check(spec: &SandboxSpec, shape: &Shape, docker: bool, own_network: bool) -> Result<(), String> {
    if !docker && !own_network && shape.egress_rules.is_some() {
        return Err("outbound policies by domain (`egress`) need the sandbox in a network of its own; this deployment's \
                    process sandboxes share the host's (HALYARD_PROCESS_NETWORK=host, or no isolation): use Docker \
                    sandboxes, or an egress class (`none`)"
            .into());
    }
    if !docker && (shape.egress.is_some() || !shape.resources.is_empty()) {
        return Err("a process sandbox's network class and limits are fixed when it starts; `setup_egress` and `resources` \
                    apply to container sandboxes"
            .into());
    }
    if let Some(e) = &shape.egress {
        Egress::parse(e)?;
    }
    halyard_platform::environments::check_shape(spec, shape)
}

/// `spec` as a container of `shape` is made: its network class (`policy` for one held to
/// outbound rules, its start's or its spec's own, unless setup asks for none at all; `bounded`
/// by the deployment's policy: [`SandboxConfig::bounded_egress`]) and limits.
pub fn shaped(spec: &mut SandboxSpec, shape: &Shape, bounded: impl Fn(&str) -> String) {
    if let Some(e) = &shape.egress {
        spec.egress.class = bounded(e);
    }
    if shape.egress_rules.is_some() || (spec.egress.policy.is_some() && spec.egress.class != "none") {
        spec.egress.class = "policy".into();
    }
    let r = &shape.resources;
    spec.memory_mb = r.memory_mb.unwrap_or(spec.memory_mb).min(spec.memory_mb);
    spec.cpus = r.cpus.unwrap_or(spec.cpus).min(spec.cpus);
    spec.pids_limit = r.pids_limit.unwrap_or(spec.pids_limit).min(spec.pids_limit);
}

impl Engine {
    /// Moves a running container from the network of class `from` onto `to`'s; its published
    /// ports get new host ports (read them again).
    pub async fn move_network(&self, container: &str, from: Egress, to: Egress) -> Result<(), DockerError> {
        let target = self.ensure_network(to).await?;
        let leave = NetworkDisconnectRequest { container: container.to_owned(), force: Some(true) };
        self.docker.disconnect_network(&self.network_name(from), leave).await.map_err(|e| DockerError::from_engine("leave network", e))?;
        let join = NetworkConnectRequest { container: container.to_owned(), endpoint_config: None };
        self.docker.connect_network(&target, join).await.map_err(|e| DockerError::from_engine("join network", e))
    }

    /// Sets a running container's limits to `spec`'s.
    pub async fn limit(&self, container: &str, spec: &SandboxSpec) -> Result<(), DockerError> {
        let body = ContainerUpdateBody {
            memory: Some((spec.memory_mb as i64) << 20),
            nano_cpus: Some((spec.cpus * 1e9) as i64),
            pids_limit: Some(spec.pids_limit),
            ..Default::default()
        };
        self.docker.update_container(container, body).await.map_err(|e| DockerError::from_engine("update container", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halyard_protocol::environment::Resources;

    #[test]
    fn a_shape_stays_within_its_spec() {
        let spec = SandboxSpec::default();
        let ok = Shape {
            egress: Some("none".into()),
            resources: Resources { memory_mb: Some(512), cpus: Some(0.5), pids_limit: Some(128) },
            ports: vec![3000],
            egress_rules: None,
        };
        assert_eq!(check(&spec, &ok, true, false), Ok(()));
        assert!(check(&spec, &ok, false, true).unwrap_err().contains("process sandbox"));
        assert!(check(&spec, &Shape { ports: vec![3000], ..Default::default() }, false, true).is_ok());
        let big = Shape { resources: Resources { memory_mb: Some(1 << 20), ..Default::default() }, ..Default::default() };
        assert!(check(&spec, &big, true, false).unwrap_err().contains("more than spec `default` allows (2048)"));
        let bad = Shape { egress: Some("wide".into()), ..Default::default() };
        assert!(check(&spec, &bad, true, false).unwrap_err().contains("unknown egress"));
        let nothing = Shape { ports: vec![0], ..Default::default() };
        assert!(check(&spec, &nothing, true, false).is_err());
        let mut s = spec.clone();
        shaped(&mut s, &ok, str::to_owned);
        assert_eq!((s.egress.as_str(), s.memory_mb, s.cpus, s.pids_limit), ("none", 512, 0.5, 128));
        // Rules put a sandbox on the proxy's way out, whatever class setup named; a process
        // sandbox can be held to them only in a network of its own, and says so.
        let held = Shape { egress: Some("open".into()), egress_rules: Some(Default::default()), ..Default::default() };
        shaped(&mut s, &held, str::to_owned);
        assert_eq!(s.egress, "policy");
        let rules_only = Shape { egress_rules: Some(Default::default()), ..Default::default() };
        assert_eq!(check(&spec, &rules_only, false, true), Ok(()));
        assert!(check(&spec, &rules_only, false, false).unwrap_err().contains("network of its own"));
    }
}
