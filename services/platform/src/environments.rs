//! Which environment a start gets ([`halyard_protocol::environment`]): the one it names, else
//! its organization's default, else the deployment's. Read where the gateway checks a start and
//! where the conversation manager runs it (the definition as it is then is the one used). And
//! what limits and ports a container may be given ([`check_shape`]), checked by the gateway when
//! a definition is written and by the supervisor when a sandbox is given them.

use async_nats::jetstream::kv;
use halyard_protocol::UserId;
use halyard_protocol::environment::{self, Environment, Environments};

/// Why an environment cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The name is nobody's environment that this start may have (the message says which).
    #[error("{0}")]
    Unknown(String),
    #[error("environments cannot be read: {0}")]
    Store(String),
}

/// The environment a start gets, with its name as the start would write it (`name` for the
/// owner's own, `@<org>/<name>` for an organization's, `/<name>` for the deployment's).
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub name: String,
    pub environment: Environment,
}

async fn read(user_kv: &kv::Store, key: &str) -> Result<Environments, ResolveError> {
    match user_kv.get(key).await {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| ResolveError::Store(format!("{key}: {e}"))),
        Ok(None) => Ok(Environments::default()),
        Err(e) => Err(ResolveError::Store(format!("{key}: {e}"))),
    }
}

/// The environment of a start by `owner` in `org` that names `name` (or none).
pub async fn resolve(user_kv: &kv::Store, owner: &UserId, org: Option<&str>, name: Option<&str>) -> Result<Option<Resolved>, ResolveError> {
    let org = match org {
        Some(o) if crate::membership::is_member(user_kv, o, owner).await.map_err(ResolveError::Store)? => Some(o),
        // A former member's start gets nothing of the organization's.
        _ => None,
    };
    let found = |set: Environments, n: &str| set.environments.get(n).cloned();
    match name {
        Some(full) => {
            let unknown = |why: String| Err(ResolveError::Unknown(why));
            if let Some(rest) = full.strip_prefix('@') {
                let Some((o, n)) = rest.split_once('/') else {
                    return unknown(format!("environment {full:?}: an organization's is named `@<org>/<name>`"));
                };
                if org != Some(o) {
                    return unknown(format!(
                        "environment {full:?} is organization {o}'s: only a conversation started in {o} (`org`) has it"
                    ));
                }
                match found(read(user_kv, &environment::org_key(o)).await?, n) {
                    Some(e) => Ok(Some(Resolved { name: full.to_owned(), environment: e })),
                    None => unknown(format!("organization {o} has no environment {n:?} (GET /orgs/{o}/environments lists them)")),
                }
            } else if let Some(n) = full.strip_prefix('/') {
                match found(read(user_kv, environment::DEPLOYMENT_KEY).await?, n) {
                    Some(e) => Ok(Some(Resolved { name: full.to_owned(), environment: e })),
                    None => unknown(format!("the deployment has no environment {n:?} (GET /environments lists them)")),
                }
            } else {
                match found(read(user_kv, &environment::user_key(owner)).await?, full) {
                    Some(e) => Ok(Some(Resolved { name: full.to_owned(), environment: e })),
                    None => unknown(format!("you have no environment {full:?} (GET /environments lists them)")),
                }
            }
        }
        None => {
            if let Some(o) = org {
                if let Some((n, e)) = read(user_kv, &environment::org_key(o)).await?.default_one() {
                    return Ok(Some(Resolved { name: format!("@{o}/{n}"), environment: e.clone() }));
                }
            }
            let deployment = read(user_kv, environment::DEPLOYMENT_KEY).await?;
            Ok(deployment.default_one().map(|(n, e)| Resolved { name: format!("/{n}"), environment: e.clone() }))
        }
    }
}

/// Ports one sandbox may forward.
pub const MAX_PORTS: usize = 20;

/// Why a container of `spec` cannot have `shape`'s limits and ports, in words: each limit at
/// most the spec's (an environment never gets more than the operator's spec gives), ports 1 to
/// 65535, at most [`MAX_PORTS`]. The gateway checks a definition with it, the supervisor a
/// sandbox.
pub fn check_shape(spec: &crate::config::SandboxSpec, shape: &halyard_protocol::environment::Shape) -> Result<(), String> {
    let r = &shape.resources;
    let over = |what: &str, asked: String, most: String| {
        Err(format!("`resources.{what}`: {asked} is more than spec `{}` allows ({most}); name a larger `spec`", spec.name))
    };
    if let Some(m) = r.memory_mb {
        if m < 64 {
            return Err("`resources.memory_mb`: at least 64".into());
        }
        if m > spec.memory_mb {
            return over("memory_mb", m.to_string(), spec.memory_mb.to_string());
        }
    }
    if let Some(c) = r.cpus {
        if !c.is_finite() || c < 0.01 {
            return Err("`resources.cpus`: at least 0.01".into());
        }
        if c > spec.cpus {
            return over("cpus", c.to_string(), spec.cpus.to_string());
        }
    }
    if let Some(p) = r.pids_limit {
        if p < 16 {
            return Err("`resources.pids_limit`: at least 16".into());
        }
        if p > spec.pids_limit {
            return over("pids_limit", p.to_string(), spec.pids_limit.to_string());
        }
    }
    if shape.ports.contains(&0) {
        return Err("`forward_ports`: ports from 1 to 65535".into());
    }
    if shape.ports.len() > MAX_PORTS {
        return Err(format!("`forward_ports`: at most {MAX_PORTS}"));
    }
    Ok(())
}
