//! A repository's own dev container as a start's environment
//! ([`halyard_protocol::devcontainer`]), and the image a start's environment runs on: when the
//! start names no environment, the repository's `devcontainer.json` comes before the
//! organization's and the deployment's defaults. Its file is read once the repository is in the
//! workspace ([`read`], [`adopt`]); its commands are the environment's ([`plan_for`]). A
//! container sandbox is then moved onto the image its environment names or builds (a dev
//! container's, or a named environment's `image` or `dockerfile`: [`move_onto_image`]), which a
//! process sandbox cannot do (it runs the commands without the image, and says so).

use std::time::{Duration, Instant};

use halyard_platform::environments::Resolved;
use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::devcontainer::{self, DevContainer};
use halyard_protocol::environment::{Environment, ImagePlan, Snapshot};
use halyard_protocol::system::{Repository, SandboxStatus, SandboxUpdate, StartTaskStatus};

use crate::environment::{Plan, dev_family, named_or_default, quote};
use crate::task::{PhaseError, Task, run};

const PATH_MARK: &str = "__HALYARD_DEVCONTAINER__ ";

/// The repository's dev container, if the workspace has one of the spec's files.
pub(crate) async fn read(exec: &ExecutorClient) -> Result<Option<DevContainer>, String> {
    let paths: Vec<String> = devcontainer::PATHS.iter().map(|p| quote(p)).collect();
    let script = format!(
        "for f in {}; do if [ -f \"$f\" ]; then printf '{PATH_MARK}%s\\n' \"$f\"; head -c 262144 \"$f\"; break; fi; done; true",
        paths.join(" ")
    );
    let out = run(exec, &script, 30.0).await?;
    let Some(rest) = out.split_once(PATH_MARK).map(|(_, r)| r) else { return Ok(None) };
    let (path, text) = rest.split_once('\n').unwrap_or((rest, ""));
    devcontainer::parse(path.trim(), text).map(Some)
}

/// The plan of a start on `repository` whose environment is its dev container `dev`; `found`
/// (the plan made before the repository was read) keeps its snapshot only if that was the dev
/// container's.
pub(crate) fn plan_for(task: &Task<'_>, repository: &Repository, dev: DevContainer, found: Option<Plan>) -> Plan {
    let family = dev_family(&task.owner, task.org.as_deref(), repository);
    let snapshot = found.and_then(|p| p.snapshot).filter(|s| s.family == family);
    let mut always = vec![dev.path.clone()];
    if let Some(b) = &dev.build {
        always.push(if b.context == "." { b.dockerfile.clone() } else { format!("{}/{}", b.context, b.dockerfile) });
    }
    let environment = Environment {
        setup: dev.setup.clone(),
        post_start: dev.post_start.clone(),
        env: dev.container_env.clone(),
        cache_key: dev.cache_key.clone(),
        forward_ports: dev.forward_ports.clone(),
        ..Default::default()
    };
    let resolved = Resolved { name: dev.path.clone(), environment };
    Plan { resolved, family, snapshot, always, named: false, dev: Some(dev) }
}

/// Whether the dev container has an image of its own to move a container sandbox onto.
pub(crate) fn has_image(dev: &DevContainer) -> bool {
    dev.image.is_some() || dev.build.is_some()
}

/// Moves the task's sandbox onto the image `plan` says (built from the workspace if it says
/// how); the sandbox as it then runs (new URLs), or why it could not.
async fn use_image(task: &Task<'_>, plan: ImagePlan) -> Result<SandboxUpdate, String> {
    let cmd = SandboxCommand::UseImage { sandbox_id: task.sandbox_id, plan };
    // A build of a real project's image can take a while.
    let patience = Duration::from_secs(1800);
    crate::shape::change_sandbox(task, cmd, patience, |u, restarted| restarted && u.status == SandboxStatus::Running).await.map_err(|e| {
        if e.starts_with("the sandbox did not answer") {
            format!("the dev container's image was not ready within {} s", patience.as_secs())
        } else {
            e
        }
    })
}

/// With no environment named, the repository's dev container (if the workspace has one)
/// becomes the start's environment. `found`: the plan made before the repository was read.
pub(crate) async fn adopt(
    task: &Task<'_>,
    repository: &Repository,
    found: Option<Plan>,
    exec: &ExecutorClient,
) -> Result<Option<Plan>, PhaseError> {
    let failed = |e: String| PhaseError(format!("PREPARING_REPOSITORY failed: {e}"));
    let Some(dev) = read(exec).await.map_err(failed)? else {
        // No dev container (any more): a plan made for one gives way to the defaults.
        return match found {
            Some(p) if !p.named && p.resolved.name == devcontainer::NAME => {
                named_or_default(task.ctx, &task.owner, task.org.as_deref(), None, Some(repository)).await.map_err(failed)
            }
            other => Ok(other),
        };
    };
    Ok(Some(plan_for(task, repository, dev, found)))
}

/// The image the plan's sandbox runs on when not its spec's: its dev container's, or the one
/// its environment names or builds.
pub(crate) fn image_plan(plan: &Plan) -> Option<ImagePlan> {
    if let Some(dev) = plan.dev.as_ref().filter(|d| has_image(d)) {
        return Some(ImagePlan {
            image: dev.image.clone(),
            context: dev.build.as_ref().map(|b| b.context.clone()),
            dockerfile: dev.build.as_ref().map(|b| b.dockerfile.clone()),
            args: dev.build.as_ref().map(|b| b.args.clone()).unwrap_or_default(),
            user: dev.remote_user.clone(),
            env: dev.container_env.clone(),
        });
    }
    let e = &plan.resolved.environment;
    if e.image.is_none() && e.dockerfile.is_none() {
        return None;
    }
    let (context, dockerfile) = match &e.dockerfile {
        Some(path) => {
            let context = e.build_context.clone().unwrap_or_else(|| path.rsplit_once('/').map_or(".".into(), |(d, _)| d.to_owned()));
            let inside = if context == "." { Some(path.clone()) } else { path.strip_prefix(&format!("{context}/")).map(str::to_owned) };
            (Some(context), inside.or_else(|| Some(path.clone())))
        }
        None => (None, None),
    };
    Some(ImagePlan { image: e.image.clone(), context, dockerfile, args: Default::default(), user: e.user.clone(), env: Default::default() })
}

/// Moves a container sandbox onto the plan's image (unless a snapshot of the plan's `key` is
/// what it started from: that is its image already, set up): the executor of the sandbox as it
/// then runs, and a note for the start's summary. A process sandbox cannot, and says so.
pub(crate) async fn move_onto_image(
    task: &Task<'_>,
    (plan, key): (&Plan, &str),
    restored: Option<&Snapshot>,
    exec: ExecutorClient,
    docker: bool,
) -> Result<(ExecutorClient, Option<String>), PhaseError> {
    let Some(image) = image_plan(plan) else { return Ok((exec, None)) };
    let what = &plan.resolved.name;
    if !docker {
        return Ok((exec, Some(format!("a process sandbox runs {what}'s commands without its image"))));
    }
    if restored.is_some_and(|s| s.family == plan.family && s.key == key) {
        return Ok((exec, None));
    }
    task.status(StartTaskStatus::BuildingImage, Some(what.clone())).await?;
    let started = Instant::now();
    let moved = use_image(task, image).await.map_err(|e| PhaseError(format!("BUILDING_IMAGE failed: {e}")))?;
    let exec = crate::shape::client(task, &moved).map_err(|e| PhaseError(format!("BUILDING_IMAGE failed: {e}")))?;
    Ok((exec, Some(format!("{what}'s image ready in {:.1} s", started.elapsed().as_secs_f64()))))
}
