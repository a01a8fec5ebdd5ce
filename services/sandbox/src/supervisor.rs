//! The supervisor actor: routes commands to one [`SandboxActor`] per sandbox, enforces quotas,
//! and reconciles the bus's records with reality at start-up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};

use halyard_platform::bus::{self, Delivery};
use halyard_platform::{Config, Shutdown};
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::system::{SandboxStatus, SandboxUpdate, SystemRecord};
use halyard_protocol::{subjects, Envelope, SandboxId, UserId};

use crate::sandbox::{Init, SandboxActor, SandboxMsg};
use crate::SandboxError;

/// What every sandbox actor shares.
pub struct Ctx {
    pub config: Arc<Config>,
    pub js: jetstream::Context,
    pub http: reqwest::Client,
    /// Current status of every sandbox this process knows, for quotas.
    pub registry: Mutex<HashMap<SandboxId, (UserId, SandboxStatus)>>,
}

impl Ctx {
    /// Sandboxes running now: (of this user, in total). Paused ones do not count.
    fn running(&self, owner: &UserId) -> (usize, usize) {
        let Ok(reg) = self.registry.lock() else { return (0, 0) };
        let running = reg.values().filter(|(_, s)| matches!(s, SandboxStatus::Running | SandboxStatus::Starting));
        let mut mine = 0;
        let mut total = 0;
        for (o, _) in running {
            total += 1;
            if o == owner {
                mine += 1;
            }
        }
        (mine, total)
    }
}

/// Messages of the supervisor.
// Each message is moved once, into the mailbox; boxing the large variant would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub enum SupervisorMsg {
    Command(Envelope<SandboxCommand>, Delivery),
    /// A sandbox record found at start-up.
    Adopt(SandboxUpdate),
}

pub struct Supervisor;

pub struct SupervisorState {
    ctx: Arc<Ctx>,
    children: HashMap<SandboxId, ActorRef<SandboxMsg>>,
    by_actor: HashMap<ActorId, SandboxId>,
}

impl SupervisorState {
    async fn child(&mut self, myself: &ActorRef<SupervisorMsg>, id: SandboxId, init: Init) -> Result<ActorRef<SandboxMsg>, ActorProcessingErr> {
        if let Some(c) = self.children.get(&id) {
            return Ok(c.clone());
        }
        let (child, _) = Actor::spawn_linked(None, SandboxActor, (self.ctx.clone(), init), myself.get_cell()).await?;
        self.by_actor.insert(child.get_id(), id);
        self.children.insert(id, child.clone());
        Ok(child)
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = Arc<Ctx>;

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, ctx: Arc<Ctx>) -> Result<Self::State, ActorProcessingErr> {
        Ok(SupervisorState { ctx, children: HashMap::new(), by_actor: HashMap::new() })
    }

    async fn handle(&self, myself: ActorRef<Self::Msg>, msg: Self::Msg, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Adopt(record) => {
                let id = record.sandbox_id;
                let child = state.child(&myself, id, Init::Record(record)).await?;
                child.send_message(SandboxMsg::Reconcile)?;
            }
            SupervisorMsg::Command(env, delivery) => {
                let cmd = env.payload;
                let id = cmd.sandbox_id();
                if let Some(child) = state.children.get(&id) {
                    child.send_message(SandboxMsg::Command(cmd, delivery))?;
                    return Ok(());
                }
                let init = match &cmd {
                    SandboxCommand::Create { owner, conversation_id, .. } => {
                        if let Some(reason) = quota_refusal(&state.ctx, owner) {
                            refuse(&state.ctx, id, owner, *conversation_id, &reason).await;
                            delivery.ack().await;
                            return Ok(());
                        }
                        Init::Fresh { id, owner: owner.clone(), conversation: *conversation_id }
                    }
                    _ => match bus::last_record::<SystemRecord>(&state.ctx.js, subjects::SYSTEM_STREAM, &subjects::sandbox_record(id)).await {
                        Ok(Some((_, Envelope { payload: SystemRecord::Sandbox(r), .. }))) if r.status != SandboxStatus::Deleted => Init::Record(r),
                        Ok(_) => {
                            tracing::warn!(sandbox_id = %id, "command for an unknown or deleted sandbox; dropping it");
                            delivery.ack().await;
                            return Ok(());
                        }
                        Err(e) => {
                            delivery.retry(Duration::from_secs(1), &e.to_string()).await;
                            return Ok(());
                        }
                    },
                };
                let child = state.child(&myself, id, init).await?;
                child.send_message(SandboxMsg::Command(cmd, delivery))?;
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(&self, _myself: ActorRef<Self::Msg>, evt: SupervisionEvent, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // A sandbox actor that stops (deleted) or fails is forgotten; the supervisor itself
        // carries on. A failed one is re-created from its last record on its next command.
        match evt {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                if let Some(id) = state.by_actor.remove(&cell.get_id()) {
                    state.children.remove(&id);
                }
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some(id) = state.by_actor.remove(&cell.get_id()) {
                    tracing::error!(sandbox_id = %id, error = %err, "sandbox actor failed");
                    state.children.remove(&id);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn quota_refusal(ctx: &Ctx, owner: &UserId) -> Option<String> {
    let (mine, total) = ctx.running(owner);
    let limits = &ctx.config.sandbox;
    if limits.max_running_per_user > 0 && mine >= limits.max_running_per_user {
        return Some(format!("quota_exceeded_user: {owner} already has {mine} running sandboxes (limit {})", limits.max_running_per_user));
    }
    if limits.max_running_total > 0 && total >= limits.max_running_total {
        return Some(format!("quota_exceeded_total: {total} sandboxes are running (limit {})", limits.max_running_total));
    }
    None
}

async fn refuse(ctx: &Ctx, id: SandboxId, owner: &UserId, conversation: halyard_protocol::ConversationId, reason: &str) {
    let record = SystemRecord::Sandbox(SandboxUpdate {
        sandbox_id: id,
        owner: owner.clone(),
        conversation_id: Some(conversation),
        sandbox_kind: ctx.config.sandbox.kind.clone(),
        status: SandboxStatus::Error,
        exposed_urls: Vec::new(),
        workspace: String::new(),
        detail: Some(reason.to_owned()),
        pid: None,
    });
    if let Err(e) = bus::send(&ctx.js, subjects::sandbox_record(id), record, None).await {
        tracing::error!(sandbox_id = %id, error = %e, "cannot publish quota refusal");
    }
}

/// The latest record of every sandbox, from the SYSTEM stream.
async fn latest_sandbox_records(js: &jetstream::Context) -> Result<Vec<SandboxUpdate>, SandboxError> {
    let stream = js
        .get_stream(subjects::SYSTEM_STREAM)
        .await
        .map_err(|e| SandboxError::Spawn(format!("system stream: {e}")))?;
    let mut consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subjects::ALL_SANDBOX_RECORDS.to_owned(),
            deliver_policy: consumer::DeliverPolicy::LastPerSubject,
            ..Default::default()
        })
        .await
        .map_err(|e| SandboxError::Spawn(format!("replay: {e}")))?;
    let pending = consumer.info().await.map(|i| i.num_pending).unwrap_or(0);
    let mut out = Vec::new();
    if pending == 0 {
        return Ok(out);
    }
    let mut messages = consumer.messages().await.map_err(|e| SandboxError::Spawn(format!("replay: {e}")))?;
    while let Ok(Some(Ok(msg))) = tokio::time::timeout(Duration::from_secs(5), messages.next()).await {
        if let Ok(env) = halyard_protocol::decode::<SystemRecord>(&msg.payload) {
            if let SystemRecord::Sandbox(r) = env.payload {
                out.push(r);
            }
        }
        if msg.info().map(|i| i.pending == 0).unwrap_or(true) {
            break;
        }
    }
    Ok(out)
}

/// Reconciles, then serves sandbox commands until `shutdown`.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), SandboxError> {
    let js = jetstream::new(nats);
    let http = reqwest::Client::builder().build().map_err(|e| SandboxError::Spawn(e.to_string()))?;
    let ctx = Arc::new(Ctx { config: config.clone(), js: js.clone(), http, registry: Mutex::new(HashMap::new()) });
    let (supervisor, handle) = Actor::spawn(None, Supervisor, ctx.clone())
        .await
        .map_err(|e| SandboxError::Spawn(e.to_string()))?;

    for record in latest_sandbox_records(&js).await? {
        let live = matches!(record.status, SandboxStatus::Running | SandboxStatus::Starting | SandboxStatus::Paused);
        if live && record.sandbox_kind == config.sandbox.kind {
            if let Ok(mut reg) = ctx.registry.lock() {
                reg.insert(record.sandbox_id, (record.owner.clone(), record.status));
            }
            let _ = supervisor.send_message(SupervisorMsg::Adopt(record));
        }
    }

    let result = bus::consume_into_actor::<SandboxCommand, _>(
        js,
        subjects::COMMANDS_STREAM,
        subjects::SANDBOX_CONSUMER,
        "sandbox",
        shutdown,
        supervisor.clone(),
        SupervisorMsg::Command,
    )
    .await;
    supervisor.stop(None);
    let _ = handle.await;
    result.map_err(SandboxError::from)
}
