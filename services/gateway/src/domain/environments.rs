//! Environments as the gateway checks them: a start's `environment` must be one its user may
//! have ([`halyard_platform::environments::resolve`], the rule the conversation manager applies
//! when it runs the start), and a definition written through the API must be one setup can run.

use std::collections::BTreeMap;

use halyard_platform::config::SandboxConfig;
use halyard_platform::environments::{self, ResolveError};
use halyard_protocol::UserId;
use halyard_protocol::environment::{Environment, Resources, Shape};

use crate::http::error::ApiError;
use crate::state::AppState;

/// 400 `unknown_environment` unless `name` (if given) is an environment this start may have;
/// the spec it names, if any, else the first with the runtime it asks for.
pub async fn check_start(state: &AppState, user: &UserId, org: Option<&str>, name: Option<&str>) -> Result<Option<String>, ApiError> {
    let Some(name) = name else { return Ok(None) };
    match environments::resolve(&state.user_kv, user, org, Some(name)).await {
        Ok(found) => Ok(found.and_then(|r| {
            let e = r.environment;
            e.spec.or_else(|| e.runtime.and_then(|rt| state.config.sandbox.spec_with_runtime(&rt)).map(|s| s.name))
        })),
        Err(ResolveError::Unknown(why)) => Err(ApiError::bad_request("unknown_environment", why)),
        Err(ResolveError::Store(e)) => {
            tracing::error!(error = %e, "environments");
            Err(ApiError::unavailable("the settings store did not answer; try again"))
        }
    }
}

/// Sets the pool size of the existing snapshots (those matching `filter`) of the environment a
/// start names `name`: the hosts that hold them resize their pools at once.
pub async fn resize_pools(state: &AppState, filter: &str, name: &str, pool_size: u32) -> Result<(), ApiError> {
    let unavailable = |e: String| {
        tracing::error!(error = %e, "environment snapshots");
        ApiError::unavailable("the snapshot store did not answer; try again")
    };
    let found = halyard_platform::snapshots::list(&state.snapshots, filter).await.map_err(unavailable)?;
    for (key, _) in found.into_iter().filter(|(_, s)| s.environment == name && s.pool_size != pool_size) {
        // Read again with its revision: a new snapshot of the family may have just replaced it.
        let Some(entry) = state.snapshots.entry(&key).await.map_err(|e| unavailable(e.to_string()))? else { continue };
        let Ok(mut snapshot) = serde_json::from_slice::<halyard_protocol::environment::Snapshot>(&entry.value) else { continue };
        snapshot.pool_size = pool_size;
        let bytes = serde_json::to_vec(&snapshot).map_err(|e| unavailable(e.to_string()))?;
        if let Err(e) = state.snapshots.update(&key, bytes.into(), entry.revision).await {
            // Changed meanwhile: the newer entry was made from the definition as it is now.
            tracing::info!(key, error = %e, "snapshot changed while its pool was resized");
        }
    }
    Ok(())
}

/// An image reference, a user and a build as a container's definition takes them.
fn check_image(parts: &Parts) -> Result<(), ApiError> {
    let reference = |s: &str| {
        (1..=255).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c)) && !s.starts_with(['-', '/'])
    };
    if parts.image.as_deref().is_some_and(|i| !reference(i)) {
        return Err(bad("`image`: an image reference present on the engine (`python:3.12`, `registry.local/team/dev@sha256:...`)".into()));
    }
    if parts.image.is_some() && parts.dockerfile.is_some() {
        return Err(bad("`image` and `dockerfile`: give one (an image on the engine, or a Dockerfile of the repository to build)".into()));
    }
    if parts.build_context.is_some() && parts.dockerfile.is_none() {
        return Err(bad("`build_context` goes with `dockerfile`".into()));
    }
    let user_ok = |u: &str| {
        let numeric = u.split(':').count() <= 2 && u.split(':').all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
        let name = (1..=32).contains(&u.len())
            && u.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && u.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-".contains(c));
        numeric || name
    };
    if parts.user.as_deref().is_some_and(|u| !user_ok(u)) {
        return Err(bad("`user`: a user of the image (`node`) or `uid[:gid]`".into()));
    }
    Ok(())
}

/// The spec, limits, setup's network class and forwarded ports as the deployment's specs allow
/// them (the spec a start names is checked against its own limits when it runs).
fn check_shape(parts: &Parts, sandboxes: &SandboxConfig) -> Result<(), ApiError> {
    let spec = match &parts.spec {
        Some(name) => sandboxes.spec(name).ok_or_else(|| {
            let known: Vec<String> = sandboxes.specs().into_iter().map(|s| s.name).collect();
            bad(format!("`spec`: no sandbox spec is named `{name}`; this deployment has {}", known.join(", ")))
        })?,
        None => sandboxes.spec(&sandboxes.default_spec).unwrap_or_default(),
    };
    if let Some(e) = &parts.setup_egress {
        if !["open", "internet", "none"].contains(&e.as_str()) {
            return Err(bad(format!("`setup_egress`: `{e}` is not a network class; use open, internet or none")));
        }
    }
    for (field, policy) in [("egress", &parts.egress), ("setup_egress_policy", &parts.setup_egress_policy)] {
        if let Some(p) = policy {
            p.check(field).map_err(bad)?;
        }
    }
    if (parts.egress.is_some() || parts.setup_egress_policy.is_some()) && sandboxes.kind == "process" && sandboxes.process_network == "host"
    {
        return Err(bad("`egress`: this deployment's process sandboxes share the host's network (HALYARD_PROCESS_NETWORK=host), \
                        so nothing can hold them to an outbound policy; give them networks of their own or use Docker sandboxes"
            .into()));
    }
    let shape = Shape { egress: None, resources: parts.resources.clone(), ports: parts.forward_ports.clone(), egress_rules: None };
    // The limits and ports as the supervisor will check them (a container's).
    halyard_platform::environments::check_shape(&spec, &shape).map_err(bad)
}

/// What a definition may hold.
const MAX_COMMANDS: usize = 50;
const MAX_COMMAND_BYTES: usize = 8192;
const MAX_VARS: usize = 50;
const MAX_CACHE_FILES: usize = 20;
const MAX_TTL_SECS: u64 = 90 * 86_400;
const MAX_POOL: u32 = 10;

fn bad(message: String) -> ApiError {
    ApiError::bad_request("invalid_field", message)
}

/// A variable's name as a shell takes it.
pub fn env_name(k: &str) -> bool {
    (1..=64).contains(&k.len())
        && k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The parts of a definition written through the API.
pub struct Parts {
    pub setup: Vec<String>,
    pub post_start: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub setup_secrets: Vec<String>,
    pub cache_key: Vec<String>,
    pub snapshot_ttl_secs: Option<u64>,
    pub default: bool,
    pub pool_size: u32,
    pub image: Option<String>,
    pub dockerfile: Option<String>,
    pub build_context: Option<String>,
    pub user: Option<String>,
    pub spec: Option<String>,
    pub runtime: Option<String>,
    pub resources: Resources,
    pub setup_egress: Option<String>,
    pub egress: Option<halyard_protocol::egress::EgressPolicy>,
    pub setup_egress_policy: Option<halyard_protocol::egress::EgressPolicy>,
    pub forward_ports: Vec<u16>,
    pub verify: Vec<halyard_protocol::event::Check>,
}

/// A definition from `parts`, checked, as `by` writes it now.
pub fn checked(parts: Parts, by: &UserId, sandboxes: &SandboxConfig) -> Result<Environment, ApiError> {
    let commands = |field: &str, list: &[String]| {
        if list.len() > MAX_COMMANDS || list.iter().any(|c| c.trim().is_empty() || c.len() > MAX_COMMAND_BYTES || c.contains('\0')) {
            return Err(bad(format!("`{field}`: at most {MAX_COMMANDS} shell commands, each 1 to {MAX_COMMAND_BYTES} bytes without NUL")));
        }
        Ok(())
    };
    commands("setup", &parts.setup)?;
    commands("post_start", &parts.post_start)?;
    if parts.env.len() > MAX_VARS || parts.env.iter().any(|(k, v)| !env_name(k) || v.len() > 4096 || v.contains('\0')) {
        return Err(bad(format!(
            "`env`: at most {MAX_VARS} variables, named with letters, digits and `_` (not a digit first), values up to 4096 bytes"
        )));
    }
    if parts.setup_secrets.len() > MAX_VARS || parts.setup_secrets.iter().any(|k| !env_name(k)) {
        return Err(bad(format!("`setup_secrets`: at most {MAX_VARS} names of your secrets (letters, digits and `_`)")));
    }
    let path_ok = |p: &str| {
        !p.is_empty() && p.len() <= 255 && !p.starts_with('/') && !p.split('/').any(|s| s == ".." || s.is_empty()) && !p.contains('\0')
    };
    if [&parts.dockerfile, &parts.build_context].into_iter().flatten().any(|p| !path_ok(p) && p != ".") {
        return Err(bad("`dockerfile`, `build_context`: paths in the repository, relative (`docker/dev.Dockerfile`)".into()));
    }
    if parts.cache_key.len() > MAX_CACHE_FILES || !parts.cache_key.iter().all(|p| path_ok(p)) {
        return Err(bad(format!(
            "`cache_key`: at most {MAX_CACHE_FILES} paths of files in the repository, relative (`package-lock.json`, `api/poetry.lock`)"
        )));
    }
    check_image(&parts)?;
    check_shape(&parts, sandboxes)?;
    check_runtime(&parts, sandboxes)?;
    let checks = halyard_protocol::event::Checks { verify: parts.verify.clone(), ..Default::default() };
    halyard_platform::results::check_checks(&checks).map_err(bad)?;
    if parts.pool_size > MAX_POOL {
        return Err(bad(format!("`pool_size`: 0 to {MAX_POOL} sandboxes kept started from each of its snapshots")));
    }
    if parts.snapshot_ttl_secs.is_some_and(|t| !(60..=MAX_TTL_SECS).contains(&t)) {
        return Err(bad(format!("`snapshot_ttl_secs`: 60 to {MAX_TTL_SECS} seconds")));
    }
    Ok(Environment {
        setup: parts.setup,
        post_start: parts.post_start,
        env: parts.env,
        setup_secrets: parts.setup_secrets,
        cache_key: parts.cache_key,
        snapshot_ttl_secs: parts.snapshot_ttl_secs,
        default: parts.default,
        pool_size: parts.pool_size,
        image: parts.image,
        dockerfile: parts.dockerfile,
        build_context: parts.build_context,
        user: parts.user,
        spec: parts.spec,
        runtime: parts.runtime,
        resources: parts.resources,
        setup_egress: parts.setup_egress,
        egress: parts.egress,
        setup_egress_policy: parts.setup_egress_policy,
        forward_ports: parts.forward_ports,
        verify: parts.verify,
        updated_by: by.0.clone(),
        updated_ms: halyard_platform::now_ms(),
    })
}

/// A `runtime` the operator's specs offer, and that the spec it names (if any) has.
fn check_runtime(parts: &Parts, sandboxes: &SandboxConfig) -> Result<(), ApiError> {
    let Some(runtime) = &parts.runtime else { return Ok(()) };
    if !halyard_platform::config::RUNTIMES.contains(&runtime.as_str()) {
        return Err(bad(format!("`runtime`: runc or gvisor, not {runtime:?}")));
    }
    if sandboxes.kind == "process" && runtime == "gvisor" {
        return Err(bad("`runtime`: gVisor runs container sandboxes, and this deployment runs process sandboxes".into()));
    }
    match parts.spec.as_deref().and_then(|s| sandboxes.spec(s)) {
        Some(spec) if spec.runtime != *runtime => {
            Err(bad(format!("`runtime` {runtime} and `spec` {}: that spec runs under {}; name one or the other", spec.name, spec.runtime)))
        }
        Some(_) => Ok(()),
        None if sandboxes.spec_with_runtime(runtime).is_none() => {
            Err(bad(format!("`runtime`: no sandbox spec of this deployment runs under {runtime} (GET /sandbox-specs)")))
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> Parts {
        Parts {
            setup: vec!["npm ci".into()],
            post_start: vec![],
            env: BTreeMap::new(),
            setup_secrets: vec!["NPM_TOKEN".into()],
            cache_key: vec!["package-lock.json".into()],
            snapshot_ttl_secs: None,
            default: false,
            pool_size: 0,
            image: None,
            dockerfile: None,
            build_context: None,
            user: None,
            spec: None,
            runtime: None,
            resources: Resources::default(),
            setup_egress: None,
            egress: None,
            setup_egress_policy: None,
            forward_ports: vec![],
            verify: vec![],
        }
    }

    #[test]
    fn definitions_are_checked() {
        let by = UserId("ann".into());
        let sandboxes = SandboxConfig::default();
        assert!(checked(parts(), &by, &sandboxes).is_ok());
        assert!(checked(Parts { cache_key: vec!["../etc/passwd".into()], ..parts() }, &by, &sandboxes).is_err());
        assert!(checked(Parts { cache_key: vec!["/etc/passwd".into()], ..parts() }, &by, &sandboxes).is_err());
        assert!(checked(Parts { setup_secrets: vec!["A-B".into()], ..parts() }, &by, &sandboxes).is_err());
        // A runtime the specs offer only; the built-in spec runs under runc.
        assert!(checked(Parts { runtime: Some("runc".into()), ..parts() }, &by, &sandboxes).is_ok());
        let gvisor = checked(Parts { runtime: Some("gvisor".into()), ..parts() }, &by, &sandboxes);
        assert!(gvisor.is_err_and(|e| e.to_string().contains("no sandbox spec")));
        assert!(checked(Parts { runtime: Some("kvm".into()), ..parts() }, &by, &sandboxes).is_err());
        assert!(checked(Parts { setup: vec![" ".into()], ..parts() }, &by, &sandboxes).is_err());
        assert!(checked(Parts { snapshot_ttl_secs: Some(5), ..parts() }, &by, &sandboxes).is_err());
        assert!(checked(Parts { pool_size: 11, ..parts() }, &by, &sandboxes).is_err());
        assert!(checked(Parts { image: Some("python:3.12".into()), user: Some("1000:1000".into()), ..parts() }, &by, &sandboxes).is_ok());
        assert!(checked(Parts { image: Some("x".into()), dockerfile: Some("Dockerfile".into()), ..parts() }, &by, &sandboxes).is_err());
        assert!(checked(Parts { dockerfile: Some("../Dockerfile".into()), ..parts() }, &by, &sandboxes).is_err());
        assert!(checked(Parts { image: Some("-rm".into()), ..parts() }, &by, &sandboxes).is_err());
        assert!(checked(Parts { user: Some("root; rm".into()), ..parts() }, &by, &sandboxes).is_err());
    }
}
