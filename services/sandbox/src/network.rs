//! The networks docker sandboxes live on. No sandbox may reach another's ports, so containers
//! never join Docker's default bridge (where every container talks to every other): they join
//! a bridge network of this deployment with inter-container traffic off
//! (`com.docker.network.bridge.enable_icc=false`), one per egress class a spec can ask for, and
//! Halyard's own iptables rules ([`firewall`]) drop what one sandbox's bridge forwards to any
//! Halyard bridge, whatever Docker's rules say:
//!
//! - `open` (default): anything outside the host, like the default bridge, minus the other
//!   sandboxes.
//! - `internet`: the same, except private, shared, loopback, link-local and multicast ranges and
//!   the Docker host itself, dropped by iptables rules on the network's bridge (so Halyard must
//!   run on the engine's host, as root).
//! - `none`: an internal network, and the host's own address on it closed too: nothing outside
//!   the container at all. Its ports cannot be published, so the host reaches the executor at
//!   the container's own address.
//! - `policy`: the same, but for one port of the host's address on it, where the egress proxy
//!   listens ([`crate::egress_proxy`]): what the sandbox reaches, it reaches through the proxy.

use std::collections::HashMap;

use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::{InspectNetworkOptions, ListNetworksOptions};

use crate::docker::{DockerError, Engine, LABEL_DEPLOYMENT};
use crate::egress::{BLOCKED_FOR_INTERNET, Egress};

impl Engine {
    /// The network of this deployment for `egress`.
    pub fn network_name(&self, egress: Egress) -> String {
        format!("{}-{}", self.naming.name("net"), egress.as_str())
    }

    /// The bridge interface's name (at most 15 characters), which the iptables rules name.
    fn bridge_name(&self, egress: Egress) -> String {
        let short: String = self.naming.deployment.chars().filter(char::is_ascii_alphanumeric).take(8).collect();
        format!("hy{short}-{}", &egress.as_str()[..2])
    }

    /// Creates the network for `egress` if it is missing, and (for `internet`) puts its
    /// iptables rules in place. Idempotent; run at every start-up.
    pub async fn ensure_network(&self, egress: Egress) -> Result<String, DockerError> {
        let name = self.network_name(egress);
        let exists = self.docker.inspect_network(&name, None::<InspectNetworkOptions>).await.is_ok();
        if !exists {
            let options = HashMap::from([
                ("com.docker.network.bridge.enable_icc".to_owned(), "false".to_owned()),
                ("com.docker.network.bridge.name".to_owned(), self.bridge_name(egress)),
            ]);
            let labels = HashMap::from([(LABEL_DEPLOYMENT.to_owned(), self.naming.deployment.clone())]);
            let request = NetworkCreateRequest {
                name: name.clone(),
                driver: Some("bridge".into()),
                internal: Some(egress.internal()),
                options: Some(options),
                labels: Some(labels),
                ..Default::default()
            };
            match self.docker.create_network(request).await {
                Ok(_) => {}
                // Created meanwhile by a concurrent start: fine.
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => {}
                Err(e) => return Err(DockerError::Engine { op: "create network", detail: e.to_string() }),
            }
        }
        match firewall(&self.bridge_name(egress), egress).await {
            Ok(()) => {}
            // `open` asks no rule of Halyard's to hold (Docker's keep sandboxes apart), so an
            // engine on another host, or Halyard without root, still gets it.
            Err(e) if egress == Egress::Open => {
                tracing::warn!(network = %name, error = %e, "cannot add Halyard's own rules between sandboxes; Docker's alone keep them apart")
            }
            Err(e) => return Err(e),
        }
        Ok(name)
    }

    /// The host's address on the network of `egress` (its gateway), where the egress proxy
    /// listens for the `policy` class.
    pub async fn network_gateway(&self, egress: Egress) -> Result<std::net::IpAddr, DockerError> {
        let info = self
            .docker
            .inspect_network(&self.network_name(egress), None::<InspectNetworkOptions>)
            .await
            .map_err(|e| DockerError::Engine { op: "inspect network", detail: e.to_string() })?;
        let configs = info.ipam.and_then(|i| i.config).unwrap_or_default();
        configs.iter().find_map(|c| c.gateway.as_deref().and_then(|g| g.parse().ok())).ok_or_else(|| DockerError::Engine {
            op: "inspect network",
            detail: format!("network {} has no gateway", info.name.unwrap_or_default()),
        })
    }

    /// The address ranges of this deployment's networks (where its sandboxes are).
    pub async fn network_subnets(&self) -> Result<Vec<halyard_platform::netaddr::Cidr>, DockerError> {
        let mut ranges = Vec::new();
        for name in self.networks().await? {
            let info = self
                .docker
                .inspect_network(&name, None::<InspectNetworkOptions>)
                .await
                .map_err(|e| DockerError::Engine { op: "inspect network", detail: e.to_string() })?;
            let configs = info.ipam.and_then(|i| i.config).unwrap_or_default();
            ranges.extend(configs.iter().filter_map(|c| c.subnet.as_deref().and_then(halyard_platform::netaddr::Cidr::parse)));
        }
        Ok(ranges)
    }

    /// This deployment's networks, by name.
    pub async fn networks(&self) -> Result<Vec<String>, DockerError> {
        let filters = HashMap::from([("label".to_owned(), vec![format!("{LABEL_DEPLOYMENT}={}", self.naming.deployment)])]);
        let list = self
            .docker
            .list_networks(Some(ListNetworksOptions { filters: Some(filters) }))
            .await
            .map_err(|e| DockerError::Engine { op: "list networks", detail: e.to_string() })?;
        Ok(list.into_iter().filter_map(|n| n.name).collect())
    }
}

/// Halyard's own rules for the network of `egress` on `bridge`, ahead of Docker's:
///
/// - forwarded traffic (`DOCKER-USER`): never to a Halyard bridge (`hy+`: another sandbox, of
///   this deployment or another; Docker's inter-container and isolation rules say the same, but
///   a full CI run once saw an `offline` sandbox reach another's port, so the rule that matters
///   is not left to them alone); for `internet`, not to the blocked ranges; for the internal
///   classes (`none`, `policy`), nothing at all (their one way out is the host's address);
/// - to the host itself (`INPUT`), for all but `open`: nothing but answers to connections the
///   host opened (the executor's port) and, for `policy`, the egress proxy's port. Internal
///   networks forward nothing, but the host's own address on the bridge is still a local
///   destination.
///
/// Rules are replaced, not added twice, so restarts do not pile them up.
async fn firewall(bridge: &str, egress: Egress) -> Result<(), DockerError> {
    let rule = |parts: &[&str]| parts.iter().map(|p| (*p).to_owned()).collect::<Vec<String>>();
    let mut forward = vec![rule(&["-i", bridge, "-o", "hy+", "-j", "DROP"])];
    match egress {
        Egress::Open => {}
        Egress::Internet => forward.extend(BLOCKED_FOR_INTERNET.iter().map(|cidr| rule(&["-i", bridge, "-d", cidr, "-j", "DROP"]))),
        Egress::None | Egress::Policy => forward.push(rule(&["-i", bridge, "-j", "DROP"])),
    }
    let answers = rule(&["-i", bridge, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"]);
    let mut input = match egress {
        Egress::Open => Vec::new(),
        _ => vec![rule(&["-i", bridge, "-j", "DROP"]), answers],
    };
    if egress == Egress::Policy {
        input.push(rule(&["-i", bridge, "-p", "tcp", "--dport", &crate::egress_proxy::PROXY_PORT.to_string(), "-j", "ACCEPT"]));
    }
    // Each inserted at the top, so the last ends up first: `answers` and the open port above
    // `to_host`.
    for (chain, rules) in [("DOCKER-USER", forward), ("INPUT", input)] {
        for rule in &rules {
            while iptables(&[&["-D", chain], &rule_refs(rule)[..]].concat()).await.is_ok() {}
        }
        for rule in &rules {
            iptables(&[&["-I", chain, "1"], &rule_refs(rule)[..]].concat()).await?;
        }
    }
    Ok(())
}

fn rule_refs(rule: &[String]) -> Vec<&str> {
    rule.iter().map(String::as_str).collect()
}

async fn iptables(args: &[&str]) -> Result<(), DockerError> {
    let out = tokio::process::Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .await
        .map_err(|e| DockerError::Engine { op: "iptables", detail: format!("{e} (the `internet` egress needs iptables, as root)") })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(DockerError::Engine { op: "iptables", detail: String::from_utf8_lossy(&out.stderr).trim().to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_names_round_trip_and_unknown_ones_are_refused() {
        for e in [Egress::Open, Egress::Internet, Egress::None] {
            assert_eq!(Egress::parse(e.as_str()), Ok(e));
        }
        assert_eq!(Egress::parse(""), Ok(Egress::Open));
        assert!(Egress::parse("vpn").unwrap_err().contains("open, internet or none"));
    }
}
