//! Outbound access by domain: a policy ([`EgressPolicy`]: allowed and denied names, an optional
//! read-only mode) as a scope sets it (the deployment, an organization, an environment), the
//! layers a sandbox is held to ([`EgressRules`]), and the one decision every connection gets
//! ([`EgressRules::decide`]), in words that name the rule. Enforced by the sandbox supervisor's
//! proxy; refusals become `network_blocked` events.
//!
//! Layering: deny wins (a name any layer denies is refused), and every layer with an allow list
//! bounds the others (a name must be in each of them): an organization's list holds over a
//! member's wider one, and the deployment's over everyone's.

use serde::{Deserialize, Serialize};

/// What one scope allows its sandboxes to reach by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EgressPolicy {
    /// Names that may be reached: `registry.npmjs.org`, or `*.example.com` for every name below
    /// `example.com` (not `example.com` itself). Empty: this scope restricts nothing by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Names that may never be reached, in the same forms; deny wins over any allow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// `read_only`: plain HTTP requests may only `GET` or `HEAD` (a TLS tunnel's requests are
    /// not decrypted, so they cannot be told apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<EgressMode>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EgressMode {
    ReadOnly,
}

/// Longest list a policy may hold, per side.
pub const MAX_PATTERNS: usize = 256;

impl EgressPolicy {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Why the policy cannot be used, in words naming the pattern (`field`: where it was given).
    pub fn check(&self, field: &str) -> Result<(), String> {
        for (side, list) in [("allow", &self.allow), ("deny", &self.deny)] {
            if list.len() > MAX_PATTERNS {
                return Err(format!("`{field}.{side}` holds {} names; at most {MAX_PATTERNS}", list.len()));
            }
            for p in list {
                check_pattern(p).map_err(|why| format!("`{field}.{side}`: {why}"))?;
            }
        }
        Ok(())
    }
}

/// A name (`a.example.com`) or a wildcard over the names below one (`*.example.com`): letters,
/// digits, `-` and dots, no scheme, port, path or address.
fn check_pattern(p: &str) -> Result<(), String> {
    let name = p.strip_prefix("*.").unwrap_or(p);
    let label_ok =
        |l: &str| !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') && !l.starts_with('-');
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!("`{p}` is not a host name or `*.` followed by one (no scheme, port or path)"));
    }
    if name.parse::<std::net::IpAddr>().is_ok() || name.split('.').all(|l| l.chars().all(|c| c.is_ascii_digit())) {
        return Err(format!("`{p}` is an address; name hosts (the proxy resolves names itself)"));
    }
    Ok(())
}

/// Whether `pattern` covers `host` (lower case, without a trailing dot).
pub fn covers(pattern: &str, host: &str) -> bool {
    let pattern = pattern.to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&suffix) && host[..host.len() - suffix.len()].ends_with('.'),
        None => pattern == host,
    }
}

/// One scope's policy and who set it (`deployment`, `organization acme`, `environment web`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EgressLayer {
    pub scope: String,
    pub policy: EgressPolicy,
}

/// The layers a sandbox is held to; every one must let a connection through.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EgressRules {
    pub layers: Vec<EgressLayer>,
}

/// Why a connection was refused: the rule, in words the agent and the user read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub rule: String,
}

impl EgressRules {
    /// Adds `policy` as `scope`'s layer (nothing if it is empty).
    pub fn with(mut self, scope: impl Into<String>, policy: Option<&EgressPolicy>) -> Self {
        if let Some(p) = policy.filter(|p| !p.is_empty()) {
            self.layers.push(EgressLayer { scope: scope.into(), policy: p.clone() });
        }
        self
    }

    /// Whether `host` may be reached; `method` is a plain HTTP request's (none for a tunnel).
    pub fn decide(&self, host: &str, method: Option<&str>) -> Result<(), Refusal> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        for layer in &self.layers {
            if let Some(p) = layer.policy.deny.iter().find(|p| covers(p, &host)) {
                return Err(Refusal { rule: format!("denied by `{p}` ({})", layer.scope) });
            }
        }
        for layer in &self.layers {
            let allow = &layer.policy.allow;
            if !allow.is_empty() && !allow.iter().any(|p| covers(p, &host)) {
                return Err(Refusal { rule: format!("not in the allow list ({})", layer.scope) });
            }
        }
        if let Some(m) = method.filter(|m| !matches!(*m, "GET" | "HEAD")) {
            if let Some(layer) = self.layers.iter().find(|l| l.policy.mode == Some(EgressMode::ReadOnly)) {
                return Err(Refusal { rule: format!("read-only: {m} is not allowed ({})", layer.scope) });
            }
        }
        Ok(())
    }
}

/// Traffic through the egress proxy to one destination (the name the sandbox asked for, and
/// its port): connections opened, bytes the sandbox sent and received. In a `network_used`
/// event, what passed since the proxy's last report; in a conversation's summary, the totals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NetworkUse {
    pub host: String,
    pub port: u16,
    #[serde(default)]
    pub connections: u64,
    #[serde(default)]
    pub bytes_sent: u64,
    #[serde(default)]
    pub bytes_received: u64,
}

/// What the agent and the user are told of a refused connection.
pub fn blocked_message(host: &str, port: u16, rule: &str) -> String {
    format!("The sandbox may not reach {host}:{port}: {rule}.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> EgressPolicy {
        EgressPolicy { allow: allow.iter().map(|s| (*s).into()).collect(), deny: deny.iter().map(|s| (*s).into()).collect(), mode: None }
    }

    #[test]
    fn patterns_are_names_or_wildcards_below_one() {
        assert!(covers("registry.test", "registry.test"));
        assert!(covers("*.example.com", "a.b.example.com"));
        assert!(!covers("*.example.com", "example.com"));
        assert!(!covers("*.example.com", "badexample.com"));
        assert!(policy(&["registry.test", "*.npmjs.org"], &[]).check("egress").is_ok());
        for bad in ["https://x.test", "x.test:443", "10.0.0.1", "*", "a..b", "x.test/path", ""] {
            assert!(policy(&[bad], &[]).check("egress").is_err(), "{bad}");
        }
    }

    #[test]
    fn deny_wins_and_every_allow_list_bounds_the_others() {
        let rules = EgressRules::default()
            .with("organization acme", Some(&policy(&["*.test"], &[])))
            .with("environment web", Some(&policy(&["registry.test", "other.example"], &["*.bad.test"])));
        assert_eq!(rules.decide("Registry.TEST.", None), Ok(()));
        assert_eq!(rules.decide("other.example", None).unwrap_err().rule, "not in the allow list (organization acme)");
        assert_eq!(rules.decide("x.test", None).unwrap_err().rule, "not in the allow list (environment web)");
        let wide = EgressRules::default().with("environment web", Some(&policy(&["*.test"], &["*.bad.test"])));
        assert_eq!(wide.decide("a.bad.test", None).unwrap_err().rule, "denied by `*.bad.test` (environment web)");
        let ro = EgressRules::default().with("deployment", Some(&EgressPolicy { mode: Some(EgressMode::ReadOnly), ..Default::default() }));
        assert!(ro.decide("x.test", Some("GET")).is_ok());
        assert!(ro.decide("x.test", None).is_ok());
        assert_eq!(ro.decide("x.test", Some("POST")).unwrap_err().rule, "read-only: POST is not allowed (deployment)");
        assert_eq!(EgressRules::default().with("x", Some(&EgressPolicy::default())).layers.len(), 0);
    }
}
