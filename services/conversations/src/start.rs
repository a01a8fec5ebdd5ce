//! The start task: from a start command to a conversation whose agent is ready.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use halyard_platform::BusError;
use halyard_platform::bus;
use halyard_platform::executor_client::{self, ExecutorClient, ExecutorError};
use halyard_platform::keys;
use halyard_platform::{git_proxy, skills};
use halyard_protocol::command::{AgentCommand, ConversationCommand, SandboxCommand};
use halyard_protocol::environment::SnapshotRef;
use halyard_protocol::event::Skill;
use halyard_protocol::system::{ForkSource, Repository, SandboxStatus, SandboxUpdate, StartRequest, StartTaskStatus, SystemRecord};
use halyard_protocol::{CommandId, Envelope, SandboxId, TaskId, subjects};

use crate::ctx::Ctx;
use crate::devcontainer;
use crate::environment::{self, quote};
use crate::setup;
use crate::task::{PhaseError, Task, derived, run, run_with};

/// Clones may take this long.
const CLONE_TIMEOUT_SECS: f64 = 900.0;

/// The sandbox of a start task.
pub fn sandbox_for(task: TaskId) -> SandboxId {
    SandboxId(derived(task, 0xA1))
}

/// Runs a start task to READY or ERROR. `Err` only for bus failures worth a redelivery.
pub async fn run_task(ctx: &Ctx, env: Envelope<ConversationCommand>) -> Result<(), BusError> {
    let ConversationCommand::Start {
        task_id,
        conversation_id,
        owner,
        message,
        repository,
        title,
        created_ms,
        spec,
        budget,
        confirmation_policy,
        llm_profile,
        agent,
        secrets,
        fork,
        parent,
        tags,
        org,
        visibility,
        queue,
        environment,
        checks,
        plugins,
    } = env.payload
    else {
        return Ok(());
    };
    let request = StartRequest {
        message: message.clone(),
        spec: spec.clone(),
        budget: budget.clone(),
        confirmation_policy,
        llm_profile: llm_profile.clone(),
        agent: agent.clone(),
        secrets: secrets.clone(),
        fork: fork.clone(),
        parent: parent.clone(),
        tags,
        org: org.clone(),
        visibility,
        environment: environment.clone(),
        checks: checks.clone(),
        plugins: plugins.clone(),
    };
    let task = Task {
        ctx,
        task_id,
        owner: owner.clone(),
        conversation_id,
        // A helper works in its parent's sandbox.
        sandbox_id: parent.as_ref().map_or_else(|| sandbox_for(task_id), |p| p.sandbox_id),
        created_ms,
        trace: env.trace.clone(),
        from_pool: Default::default(),
        spec,
        budget,
        confirmation_policy,
        llm_profile,
        agent,
        secrets,
        fork,
        parent,
        queue: halyard_protocol::queue::QueueTerms { org: org.clone(), ..queue },
        org,
        environment,
        checks,
        snapshot: Default::default(),
        plugins,
    };
    // A redelivered command whose task already finished has nothing left to do.
    if let Some((_, last)) = bus::last_record::<SystemRecord>(&ctx.js, subjects::SYSTEM_STREAM, &subjects::task_record(task_id)).await? {
        if let SystemRecord::StartTask(u) = last.payload {
            if u.status.is_final() {
                return Ok(());
            }
        }
    }
    task.status(StartTaskStatus::Working, None).await?;
    let created = SystemRecord::ConversationCreated {
        conversation_id,
        owner: owner.clone(),
        task_id,
        sandbox_id: task.sandbox_id,
        title,
        repository: repository.clone(),
        created_ms,
        request: Some(Box::new(request)),
    };
    let env_created = Envelope::with_id(CommandId(derived(task_id, 0xC0)), created, halyard_platform::now_ms());
    bus::publish(&ctx.js, subjects::conversation_record(conversation_id), &env_created).await?;

    let prepared = match &task.parent {
        Some(_) => prepare_helper(&task, message).await.map(|()| None),
        None => prepare(&task, repository.as_ref(), message).await,
    };
    match prepared {
        Ok(summary) => task.status(StartTaskStatus::Ready, summary).await,
        Err(PhaseError(detail)) if detail.contains(halyard_protocol::queue::CANCELLED_DETAIL) => {
            // Cancelled while it waited: it never had a sandbox.
            tracing::info!(task_id = %task_id, "start task cancelled while queued");
            task.status(StartTaskStatus::Cancelled, Some("cancelled while it waited in the start queue".into())).await
        }
        Err(PhaseError(detail)) => {
            tracing::warn!(task_id = %task_id, %detail, "start task failed");
            task.status(StartTaskStatus::Error, Some(detail)).await?;
            if task.parent.is_some() {
                // The sandbox is the parent's.
                return Ok(());
            }
            // Nothing runs in a failed start's sandbox, and it would count against the
            // user's sandbox quota until the conversation is deleted: it goes now (a retry
            // makes a new one).
            let delete = SandboxCommand::Delete { sandbox_id: task.sandbox_id };
            bus::send(&ctx.js, subjects::sandbox_command(task.sandbox_id), delete, task.trace.clone()).await.map(drop)
        }
    }
}

/// Prepares a conversation's own sandbox and hands the conversation over: what became of its
/// environment, in words, if it has one.
async fn prepare(task: &Task<'_>, repository: Option<&Repository>, message: Option<String>) -> Result<Option<String>, PhaseError> {
    let ctx = task.ctx;
    let plan = environment::plan(ctx, &task.owner, task.org.as_deref(), task.environment.as_deref(), repository)
        .await
        .map_err(|e| PhaseError(format!("WAITING_FOR_SANDBOX failed: {e}")))?;
    let snapshot = plan.as_ref().and_then(|p| p.snapshot.as_ref());
    match snapshot {
        Some(s) => task.status(StartTaskStatus::RestoringSnapshot, Some(format!("snapshot {}", s.snapshot_id))).await?,
        None => task.status(StartTaskStatus::WaitingForSandbox, None).await?,
    }
    // The start's spec, else its environment's; an environment's runtime wins over a spec of
    // another (a default one the gateway filled in for an environment it did not name).
    let environment = plan.as_ref().map(|p| &p.resolved.environment);
    let spec = task.spec.clone().or_else(|| environment.and_then(|e| e.spec.clone()));
    let spec = environment::spec_for_runtime(&ctx.config.sandbox, spec, environment.and_then(|e| e.runtime.as_deref()));
    let sandbox = wait_for_sandbox(task, spec, snapshot.map(SnapshotRef::from))
        .await
        .map_err(|e| PhaseError(format!("WAITING_FOR_SANDBOX failed: {e}")))?;
    task.from_pool.store(sandbox.from_pool, std::sync::atomic::Ordering::Relaxed);
    // The snapshot is used only if the sandbox's host held it.
    let restored = snapshot.filter(|s| sandbox.snapshot.as_deref() == Some(s.snapshot_id.as_str())).cloned();
    if let Some(s) = &restored {
        *task.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = Some(s.snapshot_id.clone());
    }
    let url =
        sandbox.agent_server_url().ok_or_else(|| PhaseError("WAITING_FOR_SANDBOX failed: the sandbox exposes no executor URL".into()))?;
    let mut exec = ExecutorClient::new(ctx.http.clone(), url, keys::session_key(&ctx.config.secret, task.sandbox_id));
    let mut plan = plan;
    let mut notes = Vec::new();
    // Outbound rules hold from the first command on (the clone's included).
    let egress = crate::egress::resolve(task, plan.as_ref().map(|p| (p.resolved.name.as_str(), &p.resolved.environment)))
        .await
        .map_err(|e| PhaseError(format!("WAITING_FOR_SANDBOX failed: {e}")))?;
    // The shape the sandbox has so far, besides its spec's.
    let mut held = None;
    if let Some(rules) = &egress.agent {
        let shape = crate::shape::base(plan.as_ref().map(|p| &p.resolved.environment), sandbox.sandbox_kind == "docker", Some(rules));
        let failed = |e: String| PhaseError(format!("WAITING_FOR_SANDBOX failed: holding the sandbox to its outbound policy: {e}"));
        let shaped = crate::shape::set(task, shape.clone().unwrap_or_default()).await.map_err(failed)?;
        exec = crate::shape::client(task, &shaped).map_err(failed)?;
        held = shape;
    }

    task.status(StartTaskStatus::PreparingRepository, None).await?;
    if let Some(repo) = repository {
        prepare_repository(task, &exec, repo, restored.is_some(), &sandbox.sandbox_kind).await?;
        // With no environment named, the repository's dev container comes first.
        if plan.as_ref().is_none_or(|p| !p.named) {
            plan = devcontainer::adopt(task, repo, plan, &exec).await?;
        }
    }
    // What setup depends on, read once: the image step and setup both compare it.
    let key = match &plan {
        Some(p) => Some(
            environment::key_of(&exec, p)
                .await
                .map_err(|e| PhaseError(format!("PREPARING_REPOSITORY failed: reading what setup depends on: {e}")))?,
        ),
        None => None,
    };
    let docker = sandbox.sandbox_kind == "docker";
    if let (Some(p), Some(k)) = (&plan, &key) {
        let note;
        (exec, note) = devcontainer::move_onto_image(task, (p, k), restored.as_ref(), exec, docker).await?;
        notes.extend(note);
        exec = shape_sandbox(task, p, exec, (docker, egress.agent.as_ref(), held.as_ref()), &mut notes).await?;
    }
    if let Some(fork) = &task.fork {
        copy_checkpoint(ctx, &exec, fork).await.map_err(|e| {
            PhaseError(format!(
                "PREPARING_REPOSITORY failed: the workspace of conversation {} at event {}: {e}",
                fork.conversation_id, fork.at_seq
            ))
        })?;
    }

    task.status(StartTaskStatus::RunningSetupScript, None).await?;
    // One look at the workspace says what the next three phases have to do; most have nothing
    // to set up, and every command in the sandbox is on the way to READY.
    let survey = run(&exec, &survey_script(), 30.0).await.map_err(|e| PhaseError(format!("RUNNING_SETUP_SCRIPT failed: {e}")))?;
    // Marks only from before the first skill's text, which could hold a line like one.
    let marks = survey.split(SKILL_MARK).next().unwrap_or_default();
    let has = |mark: &str| marks.lines().any(|l| l == mark);
    // The snapshot counts for setup only if it is of the plan's family.
    let restored = restored.as_ref().filter(|s| plan.as_ref().is_some_and(|p| p.family == s.family));
    let phase =
        setup::Setup { plan: plan.as_ref(), key: key.as_deref(), restored, setup_sh: has(SETUP_MARK), repository, docker, egress: &egress };
    let done = setup::run_phase(task, &mut exec, phase).await?;
    let setup = done.ran;

    task.status(StartTaskStatus::SettingUpGitHooks, None).await?;
    // (A setup script may have written the hook's script.)
    if setup || has(HOOKS_MARK) {
        run(
            &exec,
            "if [ -f .openhands/pre-commit.sh ] && [ -d .git ]; then mkdir -p .git/hooks && \
             printf '#!/bin/sh\\nexec bash \"$(git rev-parse --show-toplevel)/.openhands/pre-commit.sh\" \"$@\"\\n' > .git/hooks/pre-commit && \
             chmod +x .git/hooks/pre-commit; fi",
            60.0,
        )
        .await
        .map_err(|e| PhaseError(format!("SETTING_UP_GIT_HOOKS failed: {e}")))?;
    }

    // The workspace as the conversation starts is its first checkpoint, which the agent's first
    // action waits for. Begun now, it is taken while the conversation is handed over; the run's
    // own request for it then finds it taken (the executor takes one at a time, and answers a
    // late request for an earlier seq with the last checkpoint). A fork's first checkpoints
    // are its source's.
    if task.fork.is_none() {
        let exec = exec.clone();
        tokio::spawn(async move {
            if let Err(e) = exec.checkpoint(1, None).await {
                tracing::debug!(error = %e, "the early first checkpoint was not taken; the run takes it");
            }
        });
    }

    // The skills as the survey found them, unless a setup script ran (it may have written some).
    let skills = (!setup).then(|| parse_skills(&survey));
    let repo_checks = between(marks, CHECKS_MARK, CHECKS_END).map(environment::repo_checks).transpose().unwrap_or_else(|e| {
        notes.push(e);
        None
    });
    let checks = environment::checks(task.checks.clone(), plan.as_ref(), repo_checks, task.agent.is_some());
    hand_over(task, &exec, (sandbox.workspace.clone(), message), repository.cloned(), skills, checks).await?;
    let summary: Vec<String> = done.summary.into_iter().chain(notes).collect();
    Ok((!summary.is_empty()).then(|| summary.join("; ")))
}

/// Gives the sandbox the limits and forwarded ports of its environment (`plan`), with the
/// outbound `rules`: the executor as it then runs. A process sandbox takes the ports only, and
/// `notes` says so. A shape the sandbox already has (`held`: given when the rules were) is not
/// asked for again.
async fn shape_sandbox(
    task: &Task<'_>,
    plan: &environment::Plan,
    exec: ExecutorClient,
    (docker, rules, held): (bool, Option<&halyard_protocol::egress::EgressRules>, Option<&halyard_protocol::environment::Shape>),
    notes: &mut Vec<String>,
) -> Result<ExecutorClient, PhaseError> {
    let e = &plan.resolved.environment;
    if !docker && (!e.resources.is_empty() || e.setup_egress.is_some()) {
        notes.push(format!(
            "a process sandbox keeps its own network class and limits ({}'s `resources`, `setup_egress` are for containers)",
            plan.resolved.name
        ));
    }
    let Some(shape) = crate::shape::base(Some(e), docker, rules).filter(|s| held != Some(s)) else { return Ok(exec) };
    let failed = |e: String| PhaseError(format!("PREPARING_REPOSITORY failed: environment {}: {e}", plan.resolved.name));
    let shaped = crate::shape::set(task, shape).await.map_err(failed)?;
    crate::shape::client(task, &shaped).map_err(failed)
}

/// Clones the repository into the workspace, or (`restored` from a snapshot) brings the clone
/// there up to date; `kind`: the sandbox's (`process` or `docker`).
async fn prepare_repository(
    task: &Task<'_>,
    exec: &ExecutorClient,
    repo: &Repository,
    restored: bool,
    kind: &str,
) -> Result<(), PhaseError> {
    let ctx = task.ctx;
    let branch = repo.branch.as_deref().map(|b| format!("--branch {} ", quote(b))).unwrap_or_default();
    // A local repository on the host belongs to another uid than an isolated sandbox's,
    // and git's ownership check would refuse to serve it. Whatever its hooks or config run,
    // run as the sandbox's own user, inside the sandbox, so nothing is gained by refusing.
    // (Both the clone, which reads a local source directly, and the upload-pack it starts,
    // which `-c` does not reach, need the setting.)
    let local = repo.url.starts_with('/') || repo.url.starts_with("file://");
    if local && kind == "docker" {
        // A container sees none of the host's paths, and mounting one the user names would
        // show it the host's files: refused, with the ways that work.
        return Err(PhaseError(format!(
            "PREPARING_REPOSITORY failed: {} is a path on the host, which a Docker sandbox cannot see; give the repository's \
             git URL (https://... or ssh://...), or run Halyard with HALYARD_SANDBOX=process to clone paths of this machine",
            repo.url
        )));
    }
    let trust = if local { "-c safe.directory='*' clone --upload-pack \"git -c safe.directory='*' upload-pack\"" } else { "clone" };
    let script = match restored {
        // A snapshot's workspace is the repository as setup left it: brought up to date.
        true => environment::update_script(repo.branch.as_deref(), local),
        false => format!(
            "if [ -d .git ]; then echo 'repository already cloned'; else git {trust} --quiet {branch}-- {} . ; fi",
            quote(&repo.url)
        ),
    };
    // A repository of one of the owner's git providers is cloned through the sandbox's git
    // proxy, served from here for the clone, which adds the token upstream.
    let remote = git_proxy::remote_for(&ctx.user_kv, &ctx.vault, &task.owner, task.org.as_deref(), &repo.url)
        .await
        .map_err(|e| PhaseError(format!("PREPARING_REPOSITORY failed: {e}")))?;
    let _proxy = match remote {
        Some(remote) => {
            tracing::info!(user = %task.owner, provider = %remote.provider, "cloning through the git proxy");
            let serving = git_proxy::serve(exec, vec![remote], &ctx.config.gateway.git_api_allow)
                .await
                .map_err(|e| PhaseError(format!("PREPARING_REPOSITORY failed: {e}")))?;
            Some(serving)
        }
        None => None,
    };
    let env = BTreeMap::from([("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned())]);
    run_with(exec, &script, CLONE_TIMEOUT_SECS, env)
        .await
        .map_err(|e| PhaseError(format!("PREPARING_REPOSITORY failed: git clone of {}: {e}", repo.url)))?;
    Ok(())
}

const SETUP_MARK: &str = "__HALYARD_HAS_SETUP__";
const HOOKS_MARK: &str = "__HALYARD_HAS_HOOKS__";
const CHECKS_MARK: &str = "__HALYARD_CHECKS__";
const CHECKS_END: &str = "__HALYARD_CHECKS_END__";

/// Says whether the workspace has a setup script and a pre-commit hook to install, prints the
/// checks its repository names ([`environment::REPO_CHECKS`]), then its skills as
/// [`repo_skills`] does.
fn survey_script() -> String {
    let checks = environment::REPO_CHECKS;
    format!(
        "if [ -f .openhands/setup.sh ]; then echo {SETUP_MARK}; fi; \
         if [ -f .openhands/pre-commit.sh ] && [ -d .git ]; then echo {HOOKS_MARK}; fi; \
         if [ -f {checks} ]; then echo {CHECKS_MARK}; head -c 65536 {checks}; printf '\\n%s\\n' {CHECKS_END}; fi; {}",
        skills_script()
    )
}

/// What `out` holds between a line `start` and a line `end`.
fn between<'a>(out: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = out.find(&format!("{start}\n"))? + start.len() + 1;
    let to = out[from..].find(&format!("\n{end}"))? + from;
    Some(&out[from..to])
}

/// Reads the workspace's skills and hands the conversation to the agent runners.
async fn hand_over(
    task: &Task<'_>,
    exec: &ExecutorClient,
    (workspace, message): (String, Option<String>),
    repository: Option<Repository>,
    // The repository's skills when already read, else read here.
    read: Option<Vec<Skill>>,
    checks: Option<halyard_protocol::event::Checks>,
) -> Result<(), PhaseError> {
    task.status(StartTaskStatus::SettingUpSkills, None).await?;
    let mut skills: Vec<Skill> = task.ctx.skills.as_ref().clone();
    if let Some(org) = &task.org {
        skills.extend(org_skills(task.ctx, org).await.map_err(|e| PhaseError(format!("SETTING_UP_SKILLS failed: {e}")))?);
    }
    let read = match read {
        Some(read) => read,
        None => repo_skills(exec).await.map_err(|e| PhaseError(format!("SETTING_UP_SKILLS failed: {e}")))?,
    };
    skills.extend(read);
    // The plugins, resolved now unless given; their skills after the repository's.
    let plugins = match &task.plugins {
        Some(given) => given.clone(),
        None => crate::plugins::resolved(task.ctx, &task.owner, task.org.as_deref())
            .await
            .map_err(|e| PhaseError(format!("SETTING_UP_SKILLS failed: {e}")))?,
    };
    skills.extend(crate::plugins::skills(task.ctx, &plugins).await.map_err(|e| PhaseError(format!("SETTING_UP_SKILLS failed: {e}")))?);
    let start = AgentCommand::Start {
        plugins,
        conversation_id: task.conversation_id,
        owner: task.owner.clone(),
        sandbox_id: task.sandbox_id,
        workspace,
        skills,
        message,
        budget: task.budget.clone(),
        confirmation_policy: task.confirmation_policy,
        llm_profile: task.llm_profile.clone(),
        agent: task.agent.clone(),
        secrets: task.secrets.clone(),
        repository,
        fork: task.fork.clone(),
        parent: task.parent.clone(),
        org: task.org.clone(),
        checks,
    };
    start_agent(task, start).await
}

/// Hands the conversation to the agent runners.
async fn start_agent(task: &Task<'_>, start: AgentCommand) -> Result<(), PhaseError> {
    task.status(StartTaskStatus::StartingConversation, None).await?;
    let mut env =
        Envelope::with_id(CommandId(derived(task.task_id, 0xA6)), start, halyard_platform::now_ms()).correlated(task.task_id.to_string());
    env.trace = task.trace.clone();
    bus::publish(&task.ctx.js, subjects::agent_command(task.conversation_id), &env)
        .await
        .map_err(|e| PhaseError(format!("STARTING_CONVERSATION failed: {e}")))?;
    Ok(())
}

/// A helper's start: no sandbox, clone or setup of its own. It works in its parent's sandbox on
/// the workspace as the parent left it (the parent's setup script ran there already), with the
/// skills that workspace has now.
async fn prepare_helper(task: &Task<'_>, message: Option<String>) -> Result<(), PhaseError> {
    let ctx = task.ctx;
    let Some(parent) = &task.parent else { return Err(PhaseError("not a helper".into())) };
    task.status(StartTaskStatus::WaitingForSandbox, None).await?;
    let patience = Duration::from_secs(ctx.config.sandbox.start_timeout_secs + 10);
    let exec = executor_client::reach(&ctx.nats, &ctx.js, &ctx.http, &ctx.config.secret, parent.sandbox_id, patience)
        .await
        .map_err(|e| PhaseError(format!("WAITING_FOR_SANDBOX failed: the sandbox of conversation {}: {e}", parent.conversation_id)))?;
    let workspace = exec.health().await.map_err(|e| PhaseError(format!("WAITING_FOR_SANDBOX failed: {e}")))?.workspace;
    hand_over(task, &exec, (workspace, message), None, None, task.checks.clone()).await
}

/// Makes a fork's workspace as its source's was at the fork's event: the source's checkpoints up
/// to it travel as a git bundle from its executor (woken if it idles) to the fork's, streamed
/// through here. A source that had no checkpoint by then had not changed its workspace: the
/// fork's (a fresh clone of the same repository, or empty) is already as it was.
async fn copy_checkpoint(ctx: &Ctx, exec: &ExecutorClient, fork: &ForkSource) -> Result<(), String> {
    let patience = Duration::from_secs(ctx.config.sandbox.start_timeout_secs + 10);
    let source = executor_client::reach(&ctx.nats, &ctx.js, &ctx.http, &ctx.config.secret, fork.sandbox_id, patience).await?;
    // From the source's last checkpoint as its runner kept it: what the source's agent changed
    // in its store does not travel.
    let head = match ctx.user_kv.get(&subjects::checkpoint_head_key(fork.conversation_id)).await {
        Ok(v) => v.and_then(|b| String::from_utf8(b.to_vec()).ok()),
        Err(e) => return Err(format!("cannot read the source's last checkpoint: {e}")),
    };
    let bundle = match source.checkpoint_bundle(fork.at_seq, head.as_deref()).await {
        Ok(bundle) => bundle,
        Err(ExecutorError::Rejected { status: 404, .. }) => {
            tracing::info!(source = %fork.conversation_id, at_seq = fork.at_seq, "no checkpoint to fork from: the workspace as it started");
            return Ok(());
        }
        Err(e) => return Err(e.to_string()),
    };
    let made = exec.unbundle(fork.at_seq, reqwest::Body::wrap_stream(bundle.bytes_stream())).await.map_err(|e| e.to_string())?;
    tracing::info!(source = %fork.conversation_id, at_seq = fork.at_seq, checkpoint_seq = made.checkpoint_seq, "fork's workspace made");
    Ok(())
}

/// Asks for the sandbox and waits for it to run (or fail).
/// Asks for the task's sandbox and waits for it to run, saying `QUEUED` while it waits its turn
/// for a host with room (the queue's deadline is the supervisors' to keep; the patience here
/// only outlasts it).
async fn wait_for_sandbox(task: &Task<'_>, spec: Option<String>, snapshot: Option<SnapshotRef>) -> Result<SandboxUpdate, String> {
    let ctx = task.ctx;
    let create = SandboxCommand::Create {
        sandbox_id: task.sandbox_id,
        owner: task.owner.clone(),
        conversation_id: task.conversation_id,
        spec,
        queue: task.queue.clone(),
        snapshot,
    };
    let mut env = Envelope::with_id(CommandId(derived(task.task_id, 0xA2)), create, halyard_platform::now_ms());
    env.trace = task.trace.clone();
    let queue_deadline = task.queue.deadline_secs.unwrap_or(ctx.config.sandbox.queue_deadline_secs);
    let patience = Duration::from_secs(ctx.config.sandbox.start_timeout_secs + 30 + queue_deadline + 30);
    let (progress, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let wait =
        bus::await_sandbox_telling(&ctx.nats, &ctx.js, task.sandbox_id, Some(env), bus::Wait { patience, in_line: false }, Some(progress));
    tokio::pin!(wait);
    let mut queued = false;
    loop {
        tokio::select! {
            done = &mut wait => return done,
            Some(update) = updates.recv() => {
                let status = match update.status {
                    SandboxStatus::Queued if !queued => StartTaskStatus::Queued,
                    SandboxStatus::Starting if queued => StartTaskStatus::WaitingForSandbox,
                    _ => continue,
                };
                queued = status == StartTaskStatus::Queued;
                let detail = queued.then(|| "no sandbox host has room now; the start waits its turn".to_owned());
                // The phase change is for the user to see; the wait goes on whatever it meets.
                if let Err(e) = task.status_round(status, detail, 1).await {
                    tracing::warn!(task_id = %task.task_id, error = %e, "cannot record the start's place in the queue");
                }
            }
        }
    }
}

const SKILL_MARK: &str = "__HALYARD_SKILL__ ";

/// The skills organization `org` gives its conversations.
async fn org_skills(ctx: &Ctx, org: &str) -> Result<Vec<Skill>, String> {
    let key = halyard_protocol::subjects::org_skills_key(org);
    match ctx.user_kv.get(&key).await {
        Ok(Some(bytes)) => {
            let stored: halyard_protocol::org::OrgSkills = serde_json::from_slice(&bytes).map_err(|e| format!("{key}: {e}"))?;
            Ok(stored.skills.into_values().collect())
        }
        Ok(None) => Ok(Vec::new()),
        Err(e) => Err(format!("organization {org}'s skills cannot be read: {e}")),
    }
}

/// Skills the repository brings: `.openhands/microagents/*.md`, `.openhands/skills/*.md`,
/// `.openhands/skills/<name>/SKILL.md`, `AGENTS.md`.
async fn repo_skills(exec: &ExecutorClient) -> Result<Vec<Skill>, String> {
    let out = run(exec, &skills_script(), 30.0).await?;
    Ok(parse_skills(&out))
}

/// Prints each skill file of the workspace after a [`SKILL_MARK`] line with its path.
fn skills_script() -> String {
    format!(
        "for f in .openhands/microagents/*.md .openhands/skills/*.md .openhands/skills/*/SKILL.md AGENTS.md; do \
         if [ -f \"$f\" ]; then printf '\\n{SKILL_MARK}%s\\n' \"$f\"; head -c 20000 \"$f\"; fi; done; true"
    )
}

/// Reads the marked files the skill script printed. A file is named by its path (a `SKILL.md`
/// by its folder) unless its frontmatter names it; a file whose frontmatter cannot be read is
/// kept whole as an always-on skill, so nothing the repository says is lost.
fn parse_skills(out: &str) -> Vec<Skill> {
    let mut skills = Vec::new();
    for chunk in out.split(&format!("\n{SKILL_MARK}")).skip(1) {
        let (path, content) = chunk.split_once('\n').unwrap_or((chunk, ""));
        let path = path.trim();
        let folder = path.strip_suffix("/SKILL.md");
        let name = folder.map(|f| f.rsplit('/').next().unwrap_or(f)).unwrap_or(path);
        match skills::parse(name, content, folder.is_some()) {
            Ok(skill) => skills.push(skill),
            Err(e) => {
                tracing::warn!(path, error = %e, "repository skill kept as plain text");
                skills.push(Skill::always(name, content.trim()));
            }
        }
    }
    skills
}

/// Skills from the global skills directory, read once at start-up.
pub fn global_skills(dir: Option<&Path>) -> Vec<Skill> {
    dir.map(skills::load_dir).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repositorys_checks_are_read_off_the_survey() {
        let out = format!("{SETUP_MARK}\n{CHECKS_MARK}\n{{\"verify\": []}}\n{CHECKS_END}\n");
        assert_eq!(between(&out, CHECKS_MARK, CHECKS_END), Some("{\"verify\": []}"));
        assert!(between("nothing", CHECKS_MARK, CHECKS_END).is_none());
    }

    #[test]
    fn quoting_and_skills() {
        assert_eq!(quote("a'b"), r"'a'\''b'");
        let skills = parse_skills("\n__HALYARD_SKILL__ AGENTS.md\nUse tabs.\n\n__HALYARD_SKILL__ .openhands/skills/x.md\nX\n");
        assert_eq!(skills.len(), 2);
        assert_eq!(skills[0].name, "AGENTS.md");
        assert_eq!(skills[0].content, "Use tabs.");
        let skills = parse_skills(
            "\n__HALYARD_SKILL__ .openhands/skills/pdf/SKILL.md\n---\ndescription: PDFs\n---\nUse pdftotext.\n\
             \n__HALYARD_SKILL__ .openhands/microagents/broken.md\n---\ntriggers: [x\n---\nKept whole.\n",
        );
        assert_eq!((skills[0].name.as_str(), skills[0].kind), ("pdf", halyard_protocol::event::SkillKind::AgentSkill));
        assert_eq!(skills[0].content, "Use pdftotext.");
        assert!(skills[1].content.contains("Kept whole."), "a broken frontmatter loses nothing");
    }

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        let t = TaskId::new();
        assert_eq!(sandbox_for(t), sandbox_for(t));
        assert_ne!(derived(t, 1), derived(t, 2));
        assert_ne!(derived(t, 1), t.0);
    }
}
