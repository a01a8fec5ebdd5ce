//! A start's environment ([`halyard_protocol::environment`]): which one it gets and whether a
//! snapshot of its family can be started from ([`plan`]), what the workspace's setup depends on
//! now ([`depends_script`]), the variables and setup-only secrets setup runs with
//! ([`setup_vars`]), bringing a restored workspace up to date ([`update_script`]), and asking the
//! sandbox's supervisor to keep the sandbox after setup ([`save`]).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use halyard_platform::bus;
use halyard_platform::environments::{self, ResolveError, Resolved};
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::environment::{self as env, Snapshot, SnapshotPlan, SnapshotStatus};
use halyard_protocol::event::Checks;
use halyard_protocol::system::Repository;
use halyard_protocol::{SandboxId, TraceContext, UserId, subjects};

use crate::ctx::Ctx;

/// A start's environment, as found before its sandbox is asked for (and, for a repository's
/// dev container, once its file is read).
#[derive(Clone, Debug)]
pub struct Plan {
    pub resolved: Resolved,
    pub family: String,
    /// The family's snapshot, if one is ready to start from.
    pub snapshot: Option<Snapshot>,
    /// Files whose contents always key the snapshot (a dev container's own files).
    pub always: Vec<String>,
    /// The start named no environment: a repository's dev container may take its place.
    pub named: bool,
    /// The repository's dev container, once read.
    pub dev: Option<halyard_protocol::devcontainer::DevContainer>,
}

/// The family of a repository's dev container snapshots.
pub fn dev_family(owner: &UserId, org: Option<&str>, repository: &Repository) -> String {
    let name = halyard_protocol::devcontainer::NAME;
    env::family(owner, org, name, &env::Environment::default(), Some(&repository.url), repository.branch.as_deref())
}

/// The family's snapshot, if one is ready to start from.
async fn ready_snapshot(ctx: &Ctx, owner: &UserId, org: Option<&str>, family: &str) -> Option<Snapshot> {
    let key = env::snapshot_key(owner, org, family);
    let snapshot = match ctx.snapshots.get(&key).await {
        Ok(Some(bytes)) => serde_json::from_slice::<Snapshot>(&bytes).ok(),
        Ok(None) => None,
        // Without the bucket the start sets up as if there were no snapshot.
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the environment's snapshot; setting up");
            None
        }
    };
    let now = halyard_platform::now_ms();
    snapshot.filter(|s| s.status == SnapshotStatus::Ready && s.expires_ms > now)
}

/// The environment of `owner`'s start in `org` that names `name` (or the defaults), and the
/// snapshot it may start from. A start that names none, on a repository whose dev container
/// was kept as a snapshot, starts from that (its file is read again once the repository is
/// up to date).
pub async fn plan(
    ctx: &Ctx,
    owner: &UserId,
    org: Option<&str>,
    name: Option<&str>,
    repository: Option<&Repository>,
) -> Result<Option<Plan>, String> {
    if let (None, Some(repo)) = (name, repository) {
        let family = dev_family(owner, org, repo);
        if let Some(snapshot) = ready_snapshot(ctx, owner, org, &family).await {
            let resolved = Resolved { name: halyard_protocol::devcontainer::NAME.into(), environment: Default::default() };
            return Ok(Some(Plan { resolved, family, snapshot: Some(snapshot), always: Vec::new(), named: false, dev: None }));
        }
    }
    named_or_default(ctx, owner, org, name, repository).await
}

/// [`plan`] without a repository's dev container: the named environment, else the defaults.
pub async fn named_or_default(
    ctx: &Ctx,
    owner: &UserId,
    org: Option<&str>,
    name: Option<&str>,
    repository: Option<&Repository>,
) -> Result<Option<Plan>, String> {
    let resolved = match environments::resolve(&ctx.user_kv, owner, org, name).await {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(None),
        Err(ResolveError::Unknown(why)) => return Err(why),
        Err(e) => return Err(e.to_string()),
    };
    let (url, branch) = (repository.map(|r| r.url.as_str()), repository.and_then(|r| r.branch.as_deref()));
    let family = env::family(owner, org, &resolved.name, &resolved.environment, url, branch);
    let snapshot = ready_snapshot(ctx, owner, org, &family).await;
    // A Dockerfile of the repository keys its snapshot too.
    let always = resolved.environment.dockerfile.iter().cloned().collect();
    Ok(Some(Plan { resolved, family, snapshot, always, named: name.is_some(), dev: None }))
}

/// Prints what setup depends on in the workspace: the hashes of the plan's own files and of the
/// environment's cache-key files (a missing one says so), and the head commit unless cache-key
/// files are named.
pub fn depends_script(plan: &Plan) -> String {
    let e = &plan.resolved.environment;
    let mut parts: Vec<String> = plan
        .always
        .iter()
        .chain(&e.cache_key)
        .map(|f| {
            let q = quote(f);
            format!("if [ -f {q} ]; then sha256sum -- {q}; else echo \"missing {f}\"; fi")
        })
        .collect();
    if e.cache_key.is_empty() {
        parts.push("(git rev-parse HEAD 2>/dev/null || echo no-commit)".into());
    }
    parts.join("; ")
}

/// Brings a workspace restored from a snapshot up to date with its remote: fetches, and checks
/// out the branch's head (setup's untracked results stay; tracked files become the commit's).
/// `local`: the repository is a path on the host, which another uid owns (trusted as the
/// clone trusts it, upload-pack included).
pub fn update_script(branch: Option<&str>, local: bool) -> String {
    let fetch = if local { "-c safe.directory='*' fetch --upload-pack \"git -c safe.directory='*' upload-pack\"" } else { "fetch" };
    let branch = match branch {
        Some(b) => quote(b),
        None => "\"$(git symbolic-ref --quiet --short HEAD || echo HEAD)\"".into(),
    };
    format!(
        "b={branch}; git {fetch} --quiet --prune origin && \
         if git rev-parse --verify --quiet \"origin/$b\" >/dev/null; then git checkout --quiet --force -B \"$b\" \"origin/$b\"; \
         else git checkout --quiet --force \"$b\"; fi"
    )
}

/// The key of the plan's snapshot as the workspace is now ([`depends_script`]), read once per
/// start: the image step and setup both compare it with the snapshot the sandbox started from.
pub async fn key_of(exec: &halyard_platform::executor_client::ExecutorClient, plan: &Plan) -> Result<String, String> {
    let depends = crate::task::run(exec, &depends_script(plan), 60.0).await?;
    Ok(env::key(&plan.family, &depends))
}

/// The variables setup runs with: the environment's, and the setup-only secrets it names
/// (opened from the owner's and, while they are a member, the organization's), with the values
/// to mask in whatever setup prints.
pub async fn setup_vars(
    ctx: &Ctx,
    owner: &UserId,
    org: Option<&str>,
    e: &env::Environment,
) -> Result<(BTreeMap<String, String>, Vec<(String, String)>), String> {
    let mut vars = e.env.clone();
    if e.setup_secrets.is_empty() {
        return Ok((vars, Vec::new()));
    }
    let org = match org {
        Some(o) if halyard_platform::membership::is_member(&ctx.user_kv, o, owner).await? => Some(o),
        _ => None,
    };
    let opened = halyard_platform::user_secrets::open(&ctx.user_kv, &ctx.vault, owner, org).await?;
    let mut masked = Vec::new();
    for name in &e.setup_secrets {
        let value = opened.env.get(name).ok_or_else(|| {
            format!("the environment's setup_secrets names {name}, which is not one of your secrets (PUT /api/v1/secrets/{name} sets it)")
        })?;
        vars.insert(name.clone(), value.clone());
        masked.push((name.clone(), value.clone()));
    }
    Ok((vars, masked))
}

/// Asks the supervisor to keep `sandbox` as snapshot `plan`, and waits for what it recorded.
pub async fn save(ctx: &Ctx, sandbox: SandboxId, plan: SnapshotPlan, trace: Option<TraceContext>) -> Result<Snapshot, String> {
    let key = env::snapshot_key(&plan.owner, plan.org.as_deref(), &plan.family);
    // Watched before asking, so the outcome cannot be missed.
    let mut watch = ctx.snapshots.watch(&key).await.map_err(|e| format!("the snapshot bucket: {e}"))?;
    let id = plan.snapshot_id.clone();
    let cmd = SandboxCommand::Snapshot { sandbox_id: sandbox, plan };
    bus::send(&ctx.js, subjects::sandbox_command(sandbox), cmd, trace).await.map_err(|e| e.to_string())?;
    // Committing a large container can take minutes.
    let patience = Duration::from_secs(ctx.config.sandbox.start_timeout_secs.max(60) * 10);
    let outcome = tokio::time::timeout(patience, async {
        while let Some(entry) = watch.next().await {
            let Ok(entry) = entry else { continue };
            if let Ok(s) = serde_json::from_slice::<Snapshot>(&entry.value) {
                if s.snapshot_id == id {
                    return Some(s);
                }
            }
        }
        None
    })
    .await;
    match outcome {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err("the snapshot bucket's watch ended".into()),
        Err(_) => Err(format!("the sandbox's supervisor did not record the snapshot within {} s", patience.as_secs())),
    }
}

/// Where a repository names the checks of its conversations (the start's `verify` fields:
/// `{"verify": [...], "max_verify_attempts": n}`).
pub const REPO_CHECKS: &str = ".halyard/checks.json";

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RepoChecks {
    #[serde(default)]
    verify: Vec<halyard_protocol::event::Check>,
    #[serde(default)]
    max_verify_attempts: Option<u32>,
}

/// The checks a repository's [`REPO_CHECKS`] names; `Err` says in words what is wrong with it.
pub fn repo_checks(text: &str) -> Result<Checks, String> {
    let c: RepoChecks = serde_json::from_str(text).map_err(|e| format!("{REPO_CHECKS} was not used: {e}"))?;
    let checks = Checks { result_schema: None, verify: c.verify, max_verify_attempts: c.max_verify_attempts };
    halyard_platform::results::check_checks(&checks).map_err(|e| format!("{REPO_CHECKS} was not used: {e}"))?;
    Ok(checks)
}

/// What the agent's finish is checked against: the start's checks, with its environment's
/// `verify` when the start names none, else its repository's ([`REPO_CHECKS`]); not for a
/// third-party `agent`, which finishes its turns itself.
pub fn checks(start: Option<Checks>, plan: Option<&Plan>, repo: Option<Checks>, agent: bool) -> Option<Checks> {
    let from_env = plan.map(|p| &p.resolved.environment.verify).filter(|v| !v.is_empty() && !agent);
    let from_repo = repo.filter(|r| !r.verify.is_empty() && !agent);
    match (start, from_env, from_repo) {
        (Some(c), ..) if !c.verify.is_empty() => Some(c),
        (start, Some(verify), _) => Some(Checks { verify: verify.clone(), ..start.unwrap_or_default() }),
        (start, None, Some(repo)) => {
            let start = start.unwrap_or_default();
            let max_verify_attempts = start.max_verify_attempts.or(repo.max_verify_attempts);
            Some(Checks { verify: repo.verify, max_verify_attempts, ..start })
        }
        (start, None, None) => start,
    }
}

/// `spec` (a spec's name; the default if absent), unless it does not run under `runtime`: then
/// the first spec that does (or `spec` as it is, if none does: the sandbox says so).
pub fn spec_for_runtime(
    sandboxes: &halyard_platform::config::SandboxConfig,
    spec: Option<String>,
    runtime: Option<&str>,
) -> Option<String> {
    let Some(runtime) = runtime else { return spec };
    let current = sandboxes.spec(spec.as_deref().unwrap_or(&sandboxes.default_spec));
    match current {
        Some(s) if s.runtime == runtime => spec,
        _ => sandboxes.spec_with_runtime(runtime).map(|s| s.name).or(spec),
    }
}

/// Single-quotes a string for bash.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environments_runtime_picks_a_spec_that_has_it() {
        let spec = |name: &str, runtime: &str| halyard_platform::config::SandboxSpec {
            name: name.into(),
            runtime: runtime.into(),
            ..Default::default()
        };
        let cfg =
            halyard_platform::config::SandboxConfig { specs: vec![spec("default", "runc"), spec("safe", "gvisor")], ..Default::default() };
        assert_eq!(spec_for_runtime(&cfg, None, None), None);
        assert_eq!(spec_for_runtime(&cfg, None, Some("gvisor")).as_deref(), Some("safe"));
        assert_eq!(spec_for_runtime(&cfg, Some("default".into()), Some("gvisor")).as_deref(), Some("safe"));
        assert_eq!(spec_for_runtime(&cfg, Some("safe".into()), Some("gvisor")).as_deref(), Some("safe"));
        assert_eq!(spec_for_runtime(&cfg, None, Some("runc")), None, "the default spec has it");
    }

    #[test]
    fn a_repositorys_checks_come_after_the_starts_and_the_environments() {
        let checks = repo_checks(r#"{"verify": [{"command": "make test"}], "max_verify_attempts": 4}"#).unwrap();
        assert_eq!(checks.verify[0].command.as_deref(), Some("make test"));
        let start = Some(Checks { max_verify_attempts: Some(2), ..Default::default() });
        let merged = super::checks(start, None, Some(checks.clone()), false).unwrap();
        assert_eq!((merged.verify.len(), merged.max_verify_attempts), (1, Some(2)));
        assert_eq!(super::checks(None, None, Some(checks.clone()), false).unwrap().max_verify_attempts, Some(4));
        // A third-party agent finishes its turns itself.
        assert!(super::checks(None, None, Some(checks), true).is_none());
        assert!(repo_checks(r#"{"verify": 3}"#).unwrap_err().contains(REPO_CHECKS));
        assert!(repo_checks(r#"{"verify": [{"command": ""}]}"#).is_err());
    }

    #[test]
    fn scripts_quote_what_users_wrote() {
        let e = env::Environment { cache_key: vec!["a'b.lock".into(), "package-lock.json".into()], ..Default::default() };
        let plan = |environment: env::Environment, always: Vec<String>| Plan {
            resolved: Resolved { name: "x".into(), environment },
            family: "f".into(),
            snapshot: None,
            always,
            named: true,
            dev: None,
        };
        let s = depends_script(&plan(e, Vec::new()));
        assert!(s.contains(r"'a'\''b.lock'") && s.contains("sha256sum -- 'package-lock.json'") && !s.contains("HEAD"), "{s}");
        let s = depends_script(&plan(env::Environment::default(), vec![".devcontainer/Dockerfile".into()]));
        assert!(s.contains("'.devcontainer/Dockerfile'") && s.ends_with("(git rev-parse HEAD 2>/dev/null || echo no-commit)"), "{s}");
        assert!(update_script(Some("dev"), false).starts_with("b='dev'; git fetch"));
    }
}
