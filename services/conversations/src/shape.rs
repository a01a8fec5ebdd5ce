//! What a start's environment sets of its sandbox besides the image
//! ([`halyard_protocol::environment::Shape`]): limits below its spec's and forwarded ports for the
//! whole conversation ([`base`]), and a network class of setup's own while setup runs
//! ([`for_setup`]). Each change is a sandbox command whose record says when it holds
//! ([`change_sandbox`], which moving onto a dev container's image waits with too); a container
//! gets new URLs when its network changes, so the caller takes a new executor client
//! ([`client`]).

use std::time::Duration;

use futures::StreamExt;
use halyard_platform::bus;
use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::keys;
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::egress::EgressRules;
use halyard_protocol::environment::{Environment, Shape};
use halyard_protocol::system::{REFUSED_PREFIX, SandboxStatus, SandboxUpdate, SystemRecord};
use halyard_protocol::{Envelope, subjects};

use crate::egress::Resolved;
use crate::task::Task;

/// The shape `env` gives a sandbox for the whole conversation (limits only for a container:
/// `docker`) with the outbound `rules` resolved for the agent, if it sets anything.
pub(crate) fn base(env: Option<&Environment>, docker: bool, rules: Option<&EgressRules>) -> Option<Shape> {
    let shape = Shape {
        egress: None,
        resources: env.filter(|_| docker).map(|e| e.resources.clone()).unwrap_or_default(),
        ports: env.map(|e| e.forward_ports.clone()).unwrap_or_default(),
        egress_rules: rules.cloned(),
    };
    (shape != Shape::default()).then_some(shape)
}

/// The shape setup runs with when `env` names a network class for it (a container's) or setup
/// is held to other outbound rules than the agent.
pub(crate) fn for_setup(env: &Environment, docker: bool, egress: &Resolved) -> Option<Shape> {
    let class = env.setup_egress.clone().filter(|_| docker);
    if class.is_none() && egress.setup == egress.agent {
        return None;
    }
    // A network class of setup's own is not a way around the rules (the supervisor keeps a
    // sandbox with rules on the proxy's network).
    Some(Shape { egress: class, egress_rules: egress.setup.clone(), ..base(Some(env), docker, None).unwrap_or_default() })
}

/// Sends `cmd` for the task's sandbox and waits (at most `patience`) for the record that says
/// it is done: `done` sees each record and whether one said the sandbox was starting again.
/// A refusal or a failed sandbox is an error in words.
pub(crate) async fn change_sandbox(
    task: &Task<'_>,
    cmd: SandboxCommand,
    patience: Duration,
    done: impl Fn(&SandboxUpdate, bool) -> bool,
) -> Result<SandboxUpdate, String> {
    let ctx = task.ctx;
    // Subscribed before asking, so no record of the change is missed.
    let mut updates = ctx.nats.subscribe(subjects::sandbox_record(task.sandbox_id)).await.map_err(|e| e.to_string())?;
    bus::send(&ctx.js, subjects::sandbox_command(task.sandbox_id), cmd, task.trace.clone()).await.map_err(|e| e.to_string())?;
    let deadline = tokio::time::Instant::now() + patience;
    let mut restarted = false;
    loop {
        let msg = tokio::time::timeout_at(deadline, updates.next())
            .await
            .map_err(|_| format!("the sandbox did not answer within {} s", patience.as_secs()))?
            .ok_or("subscription closed")?;
        let Ok(Envelope { payload: SystemRecord::Sandbox(u), .. }) = halyard_protocol::decode::<SystemRecord>(&msg.payload) else {
            continue;
        };
        match u.status {
            _ if u.detail.as_deref().is_some_and(|d| d.starts_with(REFUSED_PREFIX)) => {
                return Err(u.detail.unwrap_or_default().trim_start_matches(REFUSED_PREFIX).to_owned());
            }
            SandboxStatus::Starting => restarted = true,
            SandboxStatus::Error | SandboxStatus::Missing | SandboxStatus::Deleted => {
                return Err(u.detail.unwrap_or_else(|| format!("the sandbox is {}", u.status.as_str())));
            }
            _ if done(&u, restarted) => return Ok(u),
            _ => {}
        }
    }
}

/// Gives the task's running sandbox `shape`: the sandbox as it then runs.
pub(crate) async fn set(task: &Task<'_>, shape: Shape) -> Result<SandboxUpdate, String> {
    let wanted = (shape != Shape::default()).then(|| shape.clone());
    let cmd = SandboxCommand::Shape { sandbox_id: task.sandbox_id, shape };
    change_sandbox(task, cmd, Duration::from_secs(60), |u, _| u.status == SandboxStatus::Running && u.shape.as_deref() == wanted.as_ref())
        .await
}

/// A client of the executor of `sandbox` as it now runs.
pub(crate) fn client(task: &Task<'_>, sandbox: &SandboxUpdate) -> Result<ExecutorClient, String> {
    let url = sandbox.agent_server_url().ok_or("the sandbox exposes no executor URL")?;
    Ok(ExecutorClient::new(task.ctx.http.clone(), url, keys::session_key(&task.ctx.config.secret, task.sandbox_id)))
}
