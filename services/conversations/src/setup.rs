//! The setup phase of a start (`RUNNING_SETUP_SCRIPT`, then `SAVING_SNAPSHOT`): without an
//! environment, the repository's `.openhands/setup.sh` as it always ran; with one, its setup
//! commands and the setup script with its variables and setup-only secrets, unless the sandbox
//! started from a snapshot whose key still matches what setup depends on, then the sandbox kept
//! as the family's new snapshot, then its `post_start` commands.
//!
//! Setup-only secrets reach each setup command through the executor's scoped environment (a
//! private file read and removed before the command runs, in a subshell), so nothing of them
//! stays in the shell the agent gets or in the snapshot; whatever setup prints is masked before
//! it is shown.

use std::time::Instant;

use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::redact::Redactor;
use halyard_protocol::environment::{self as env, Snapshot, SnapshotPlan, SnapshotStatus};
use halyard_protocol::system::{Repository, StartTaskStatus};

use crate::environment::{Plan, save, setup_vars};
use crate::task::{PhaseError, Task, derived, run, run_with};

/// Setup scripts may take this long.
pub(crate) const SETUP_TIMEOUT_SECS: f64 = 1800.0;

/// What the phase has to work with.
pub(crate) struct Setup<'a> {
    pub plan: Option<&'a Plan>,
    /// The plan's key as the workspace is now ([`crate::environment::key_of`]).
    pub key: Option<&'a str>,
    /// The snapshot the sandbox started from.
    pub restored: Option<&'a Snapshot>,
    /// The workspace has a `.openhands/setup.sh`.
    pub setup_sh: bool,
    pub repository: Option<&'a Repository>,
    /// The sandbox is a container (setup may run on a network class of its own).
    pub docker: bool,
    /// The outbound rules of the agent and of setup.
    pub egress: &'a crate::egress::Resolved,
}

/// What the phase did.
pub(crate) struct Done {
    /// Setup ran (it may have written skills or a hook's script).
    pub ran: bool,
    /// In words, for the start task's READY record (with an environment).
    pub summary: Option<String>,
}

fn failed(what: &str, e: &str, redactor: &Redactor) -> PhaseError {
    PhaseError(format!("RUNNING_SETUP_SCRIPT failed: {what}: {}", redactor.redact(e)))
}

/// Runs the setup phase in the sandbox `exec` reaches (a new client once the sandbox moved
/// networks for setup).
pub(crate) async fn run_phase(task: &Task<'_>, exec: &mut ExecutorClient, s: Setup<'_>) -> Result<Done, PhaseError> {
    let Some((plan, key)) = s.plan.zip(s.key) else {
        if s.setup_sh {
            run(exec, "bash .openhands/setup.sh", SETUP_TIMEOUT_SECS)
                .await
                .map_err(|e| PhaseError(format!("RUNNING_SETUP_SCRIPT failed: .openhands/setup.sh: {e}")))?;
        }
        return Ok(Done { ran: s.setup_sh, summary: None });
    };
    let e = &plan.resolved.environment;
    let name = &plan.resolved.name;
    let (vars, masked) = setup_vars(task.ctx, &task.owner, task.org.as_deref(), e)
        .await
        .map_err(|why| PhaseError(format!("RUNNING_SETUP_SCRIPT failed: environment {name}: {why}")))?;
    let redactor = Redactor::new(masked);
    // Nothing to set up (no commands, no setup script, no image to build): nothing to keep.
    let nothing = e.setup.is_empty() && !s.setup_sh && plan.dev.is_none() && e.image.is_none() && e.dockerfile.is_none();
    let (ran, summary) = match s.restored {
        _ if nothing => (false, format!("environment {name}: nothing to set up")),
        Some(snap) if snap.key == key => (false, format!("environment {name}: started from snapshot {} (setup skipped)", snap.snapshot_id)),
        _ => {
            let started = Instant::now();
            // Setup's own network class, if the environment names one: the sandbox is moved
            // back onto its own before anything else runs, or the start fails.
            let wide = crate::shape::for_setup(e, s.docker, s.egress);
            if let Some(shape) = wide.clone() {
                *exec = moved(task, shape, "onto setup's network class").await?;
            }
            let log = run_setup(exec, e, s.setup_sh, &vars, &redactor).await?;
            if wide.is_some() {
                let own = crate::shape::base(Some(e), s.docker, s.egress.agent.as_ref()).unwrap_or_default();
                *exec = moved(task, own, "back onto its own network class after setup").await?;
            }
            let secs = started.elapsed().as_secs_f64();
            let again = match s.restored {
                Some(snap) => format!(" (snapshot {}'s key changed: set up again over it)", snap.snapshot_id),
                None => String::new(),
            };
            let kept = keep(task, plan, key, (secs, tail(&log)), s.repository).await?;
            (true, format!("environment {name}: set up in {secs:.1} s{again}; {kept}"))
        }
    };
    for cmd in &e.post_start {
        run_with(exec, cmd, SETUP_TIMEOUT_SECS, e.env.clone())
            .await
            .map_err(|why| failed(&format!("post_start `{cmd}`"), &why, &redactor))?;
    }
    Ok(Done { ran, summary: Some(summary) })
}

/// Runs the environment's setup commands and the repository's setup script: their log, masked.
async fn run_setup(
    exec: &ExecutorClient,
    e: &halyard_protocol::environment::Environment,
    setup_sh: bool,
    vars: &std::collections::BTreeMap<String, String>,
    redactor: &Redactor,
) -> Result<String, PhaseError> {
    let mut log = String::new();
    for cmd in &e.setup {
        let out =
            run_with(exec, cmd, SETUP_TIMEOUT_SECS, vars.clone()).await.map_err(|why| failed(&format!("setup `{cmd}`"), &why, redactor))?;
        log.push_str(&format!("$ {cmd}\n{}\n", redactor.redact(&out)));
    }
    if setup_sh {
        let out = run_with(exec, "bash .openhands/setup.sh", SETUP_TIMEOUT_SECS, vars.clone())
            .await
            .map_err(|why| failed(".openhands/setup.sh", &why, redactor))?;
        log.push_str(&format!("$ bash .openhands/setup.sh\n{}\n", redactor.redact(&out)));
    }
    Ok(log)
}

/// Gives the sandbox `shape` (`what`: the move, in words): a client of its executor as it then
/// runs.
async fn moved(task: &Task<'_>, shape: halyard_protocol::environment::Shape, what: &str) -> Result<ExecutorClient, PhaseError> {
    let failed = |e: String| PhaseError(format!("RUNNING_SETUP_SCRIPT failed: moving the sandbox {what}: {e}"));
    let sandbox = crate::shape::set(task, shape).await.map_err(failed)?;
    crate::shape::client(task, &sandbox).map_err(failed)
}

/// Keeps the sandbox as the family's snapshot under `key`: what became of it, in words (a
/// snapshot that could not be kept leaves the start as it is).
async fn keep(
    task: &Task<'_>,
    plan: &Plan,
    key: &str,
    (setup_secs, setup_log): (f64, String),
    repository: Option<&Repository>,
) -> Result<String, PhaseError> {
    task.status(StartTaskStatus::SavingSnapshot, None).await?;
    let e = &plan.resolved.environment;
    let snapshot = SnapshotPlan {
        snapshot_id: derived(task.task_id, 0xE5).to_string(),
        owner: task.owner.clone(),
        org: task.org.clone(),
        environment: plan.resolved.name.clone(),
        repository: repository.map(|r| r.url.clone()),
        branch: repository.and_then(|r| r.branch.clone()),
        family: plan.family.clone(),
        key: key.to_owned(),
        setup_secs,
        ttl_secs: e.snapshot_ttl_secs.unwrap_or(task.ctx.config.sandbox.snapshot_ttl_secs),
        pool_size: e.pool_size,
        setup_log,
    };
    let started = Instant::now();
    Ok(match save(task.ctx, task.sandbox_id, snapshot, task.trace.clone()).await {
        Ok(s) if s.status == SnapshotStatus::Ready => {
            format!("snapshot {} kept ({} MiB, {:.1} s)", s.snapshot_id, s.size_bytes.div_ceil(1 << 20), started.elapsed().as_secs_f64())
        }
        Ok(s) => format!("no snapshot: {}", s.detail.unwrap_or_default()),
        Err(why) => {
            tracing::warn!(task_id = %task.task_id, %why, "no environment snapshot");
            format!("no snapshot: {why}")
        }
    })
}

/// The end of `log`, at most [`env::SETUP_LOG_BYTES`], cut at a character boundary.
fn tail(log: &str) -> String {
    let mut start = log.len().saturating_sub(env::SETUP_LOG_BYTES);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    log[start..].to_owned()
}
