//! A start task as its phases share it ([`Task`]): who and what it is for, the record of each
//! phase it reaches, and the commands it runs in the sandbox.

use halyard_platform::derived::{Namespace, derived_uuid};
use halyard_platform::executor_client::{ExecutorClient, ExecutorError};
use halyard_platform::{BusError, bus};
use halyard_protocol::executor::ExecRequest;
use halyard_protocol::system::{ForkSource, ParentLink, StartTaskStatus, StartTaskUpdate, SystemRecord};
use halyard_protocol::{CommandId, ConversationId, Envelope, SandboxId, TaskId, TraceContext, UserId, subjects};
use uuid::Uuid;

use crate::ctx::Ctx;

/// An id derived from the task id, so a redelivered start re-uses it (and JetStream drops the
/// duplicate publication).
pub(crate) fn derived(task: TaskId, tag: u8) -> Uuid {
    derived_uuid(Namespace::StartTask { task: task.0, tag })
}

pub(crate) struct Task<'a> {
    pub(crate) ctx: &'a Ctx,
    pub(crate) task_id: TaskId,
    pub(crate) owner: UserId,
    pub(crate) conversation_id: ConversationId,
    pub(crate) sandbox_id: SandboxId,
    pub(crate) created_ms: i64,
    pub(crate) trace: Option<TraceContext>,
    /// Whether the sandbox came from the warm pool (known once it runs).
    pub(crate) from_pool: std::sync::atomic::AtomicBool,
    pub(crate) spec: Option<String>,
    /// Limits on the conversation's LLM use, handed to the agent runner.
    pub(crate) budget: Option<halyard_protocol::event::Budget>,
    pub(crate) confirmation_policy: Option<halyard_protocol::event::ConfirmationPolicy>,
    pub(crate) llm_profile: Option<String>,
    pub(crate) agent: Option<String>,
    pub(crate) secrets: Option<Vec<String>>,
    /// A fork: the source whose checkpoint the workspace is made from.
    pub(crate) fork: Option<ForkSource>,
    /// A helper: the conversation whose sandbox it works in.
    pub(crate) parent: Option<ParentLink>,
    /// The organization it is started in.
    pub(crate) org: Option<String>,
    /// How its sandbox waits if no host has room.
    pub(crate) queue: halyard_protocol::queue::QueueTerms,
    /// The environment it asked for by name.
    pub(crate) environment: Option<String>,
    /// What the conversation's work is checked against when its agent finishes.
    pub(crate) checks: Option<halyard_protocol::event::Checks>,
    /// The environment snapshot its sandbox started from (known once it runs).
    pub(crate) snapshot: std::sync::Mutex<Option<String>>,
    /// The plugins it was given (a helper's parent's, a fork's source's); absent: resolved
    /// when its agent is handed the conversation.
    pub(crate) plugins: Option<Vec<halyard_protocol::plugin::PluginUse>>,
}

/// A phase failed; the text says why, for the user.
pub(crate) struct PhaseError(pub(crate) String);

impl From<BusError> for PhaseError {
    fn from(e: BusError) -> Self {
        PhaseError(e.to_string())
    }
}

impl Task<'_> {
    pub(crate) async fn status(&self, status: StartTaskStatus, detail: Option<String>) -> Result<(), BusError> {
        self.status_round(status, detail, 0).await
    }

    /// [`status`](Self::status) for the `round`-th time the task reaches `status` (a start back
    /// from the queue is waiting for its sandbox again): each time is a message of its own.
    pub(crate) async fn status_round(&self, status: StartTaskStatus, detail: Option<String>, round: u8) -> Result<(), BusError> {
        let record = SystemRecord::StartTask(StartTaskUpdate {
            task_id: self.task_id,
            owner: self.owner.clone(),
            conversation_id: self.conversation_id,
            status,
            detail,
            sandbox_id: Some(self.sandbox_id),
            from_pool: self.from_pool.load(std::sync::atomic::Ordering::Relaxed),
            created_ms: self.created_ms,
            snapshot: self.snapshot.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        });
        let mut env =
            Envelope::with_id(CommandId(derived(self.task_id, (status as u8 + 1) | (round << 5))), record, halyard_platform::now_ms())
                .correlated(self.task_id.to_string());
        env.trace = self.trace.clone();
        bus::publish(&self.ctx.js, subjects::task_record(self.task_id), &env).await?;
        tracing::info!(task_id = %self.task_id, conversation_id = %self.conversation_id, status = status.as_str(), "start task");
        Ok(())
    }
}

/// Runs a script in the sandbox; a non-zero exit is an error with the tail of the output.
pub(crate) async fn run(exec: &ExecutorClient, script: &str, timeout: f64) -> Result<String, String> {
    run_with(exec, script, timeout, Default::default()).await
}

/// [`run`] with `env` given to that one command (in a subshell) and to nothing after it.
pub(crate) async fn run_with(
    exec: &ExecutorClient,
    script: &str,
    timeout: f64,
    env: std::collections::BTreeMap<String, String>,
) -> Result<String, String> {
    let scoped = !env.is_empty();
    let env = scoped.then_some(env);
    let req = ExecRequest { command: script.to_owned(), timeout_secs: Some(timeout), env, scoped, ..Default::default() };
    let resp = exec.exec(&req).await.map_err(|e: ExecutorError| e.to_string())?;
    if resp.still_running {
        let _ = exec.exec(&ExecRequest { command: "C-c".into(), is_input: true, timeout_secs: Some(5.0), ..Default::default() }).await;
        return Err(format!("did not finish within {timeout} s"));
    }
    match resp.exit_code {
        Some(0) => Ok(resp.output),
        code => {
            let tail: String = resp.output.chars().rev().take(800).collect::<Vec<_>>().into_iter().rev().collect();
            Err(format!("exit code {}: {}", code.unwrap_or(-1), tail.trim()))
        }
    }
}
