//! The supervisor actor: routes commands and engine events to one [`SandboxActor`] per
//! sandbox, hands creates to the start queue ([`crate::queue`]), and reconciles the bus's
//! records with reality at start-up.
//!
//! Supervisors can run as replicas, each owning one Docker engine or process host (its node
//! id). They share the command consumer: a new sandbox is made by the supervisor that pulls its
//! `create` if it has room and nobody waits, else the create waits in the start queue, which
//! every supervisor takes from when it has room; a create from an environment snapshot is passed
//! to the host holding the snapshot while that host has room. Its records name the supervisor that made it
//! as its `host`. A command for a sandbox hosted elsewhere is passed to its host
//! (`halyard.sbx.<node>`, [`halyard_platform::route`]); while the host is down such commands
//! wait (retried), its sandboxes run on, and it adopts them again when it returns. A waiting
//! start is no host's: any supervisor answers its commands (a delete cancels it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};

use halyard_platform::bus::{self, Delivery};
use halyard_platform::route::{self, Settle};
use halyard_platform::{Config, Shutdown};
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::queue::QueuedStart;
use halyard_protocol::system::{SandboxStatus, SandboxUpdate, SystemRecord};
use halyard_protocol::{Envelope, SandboxId, subjects};

use crate::ctx::{Ctx, DockerCtx};
use crate::docker::Engine;
use crate::error::SandboxError;
use crate::isolation::Isolation;
use crate::pool::Pool;
use crate::queue::{Admit, Cancel, Placed, Queue};
use crate::sandbox::{Init, SandboxActor, SandboxMsg};

/// Messages of the supervisor.
// Each message is moved once, into the mailbox; boxing the large variant would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub enum SupervisorMsg {
    Command(Envelope<SandboxCommand>, Settle),
    /// A sandbox record found at start-up.
    Adopt(SandboxUpdate),
    /// The engine reported `action` for `container`.
    Engine {
        container: String,
        action: String,
        exit_code: Option<i64>,
    },
    /// Time for every running sandbox to check whether it is idle.
    Tick,
    /// The start queue gave this host a waiting start to make.
    Place(Placed),
}

pub struct Supervisor;

pub struct SupervisorState {
    ctx: Arc<Ctx>,
    children: HashMap<SandboxId, ActorRef<SandboxMsg>>,
    by_actor: HashMap<ActorId, SandboxId>,
    /// Commands on their way to the sandboxes other supervisors host, one queue per sandbox so
    /// they arrive in order (a pause and a resume waiting for a host that is down must not
    /// swap places when it returns).
    forwarding: HashMap<SandboxId, tokio::sync::mpsc::UnboundedSender<Delivery>>,
    /// The stream sequence of the newest command applied to each sandbox.
    applied: HashMap<SandboxId, u64>,
}

/// How long a command for a sandbox whose host is down is held before it goes back to the
/// stream (each return spends one of the consumer's redeliveries).
const HOST_PATIENCE: Duration = Duration::from_secs(600);

impl SupervisorState {
    /// Passes `delivery` to the supervisor `host`, after the commands for the same sandbox that
    /// are already on their way.
    fn forward(&mut self, id: SandboxId, host: String, delivery: Delivery) {
        let delivery = match self.forwarding.get(&id) {
            Some(queue) => match queue.send(delivery) {
                Ok(()) => return,
                Err(closed) => closed.0,
            },
            None => delivery,
        };
        self.forwarding.retain(|_, queue| !queue.is_closed());
        let (queue, mut pending) = tokio::sync::mpsc::unbounded_channel();
        let _ = queue.send(delivery);
        self.forwarding.insert(id, queue);
        let nats = self.ctx.js.client();
        tokio::spawn(async move {
            let owner = format!("sandbox supervisor {host}");
            // Ends once its queue is empty; the next command starts another.
            while let Ok(d) = pending.try_recv() {
                route::forward_patiently(nats.clone(), subjects::sandbox_host(&host), &owner, d, HOST_PATIENCE).await;
            }
        });
    }

    async fn child(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        id: SandboxId,
        init: Init,
    ) -> Result<ActorRef<SandboxMsg>, ActorProcessingErr> {
        if let Some(c) = self.children.get(&id) {
            return Ok(c.clone());
        }
        let (child, _) = Actor::spawn_linked(None, SandboxActor, (self.ctx.clone(), init), myself.get_cell()).await?;
        self.by_actor.insert(child.get_id(), id);
        self.children.insert(id, child.clone());
        metrics::gauge!("halyard_sandbox_actors_in_memory").set(self.children.len() as f64);
        Ok(child)
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = Arc<Ctx>;

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, ctx: Arc<Ctx>) -> Result<Self::State, ActorProcessingErr> {
        Ok(SupervisorState { ctx, children: HashMap::new(), by_actor: HashMap::new(), forwarding: HashMap::new(), applied: HashMap::new() })
    }

    async fn post_stop(&self, myself: ActorRef<Self::Msg>, _st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // Stopping cleanly: every sandbox actor stops too, and a process sandbox's executor
        // with it (ractor does not stop linked children by itself, and an executor outlives
        // its supervisor otherwise, which only a crash should leave behind).
        myself.stop_children_and_wait(Some("shutting down".into()), Some(Duration::from_secs(10))).await;
        Ok(())
    }

    async fn handle(&self, myself: ActorRef<Self::Msg>, msg: Self::Msg, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Adopt(record) => {
                let id = record.sandbox_id;
                let child = state.child(&myself, id, Init::Record(record)).await?;
                child.send_message(SandboxMsg::Reconcile)?;
            }
            SupervisorMsg::Engine { container, action, exit_code } => {
                let Some(d) = state.ctx.docker.as_ref() else { return Ok(()) };
                let owner = d.containers.lock().ok().and_then(|m| m.get(&container).copied());
                match owner.and_then(|id| state.children.get(&id)) {
                    Some(child) => child.send_message(SandboxMsg::Engine { container, action, exit_code })?,
                    None if matches!(action.as_str(), "die" | "destroy") && d.pool.forget(&container) => {
                        tracing::warn!(%container, %action, "warm-pool container lost; refilling");
                    }
                    None => {}
                }
            }
            SupervisorMsg::Place(Placed::Take(entry, _)) if entry.wake_on.is_some() => wake(&myself, state, entry).await?,
            SupervisorMsg::Place(Placed::Take(entry, taken_over)) => place(&myself, state, entry, taken_over).await?,
            SupervisorMsg::Place(Placed::WakeExpired(id, detail)) => {
                if let Some(child) = child_of(&myself, state, id).await? {
                    child.send_message(SandboxMsg::WakeExpired(detail))?;
                }
            }
            SupervisorMsg::Tick => {
                for child in state.children.values() {
                    let _ = child.send_message(SandboxMsg::Tick);
                }
            }
            SupervisorMsg::Command(env, delivery) => {
                let cmd = env.payload;
                let id = cmd.sandbox_id();
                // A command handed out again (its handler died before acknowledging it) after a
                // later one for the same sandbox was applied is out of date: a pause must not
                // freeze the sandbox the resume after it thawed.
                if let Some(seq) = delivery.stream_sequence() {
                    let newest = state.applied.entry(id).or_insert(0);
                    if seq < *newest {
                        tracing::info!(sandbox_id = %id, kind = %env.kind, seq, newest = *newest, "an older command came again after a newer one; dropping it");
                        delivery.ack().await;
                        return Ok(());
                    }
                    *newest = seq;
                }
                if let Some(child) = state.children.get(&id) {
                    child.send_message(SandboxMsg::Command(cmd, delivery))?;
                    return Ok(());
                }
                // The sandbox's last record says whether it exists, and where: a create that
                // comes again (its first supervisor died before acknowledging it) goes to the
                // sandbox that was made, like any other command.
                let last =
                    match bus::last_record::<SystemRecord>(&state.ctx.js, subjects::SYSTEM_STREAM, &subjects::sandbox_record(id)).await {
                        Ok(Some((_, Envelope { payload: SystemRecord::Sandbox(r), .. }))) if r.status != SandboxStatus::Deleted => Some(r),
                        Ok(_) => None,
                        Err(e) => {
                            delivery.retry(Duration::from_secs(1), &e.to_string()).await;
                            return Ok(());
                        }
                    };
                if let Some(r) = last.as_ref().filter(|r| r.status == SandboxStatus::Queued) {
                    return waiting(&state.ctx, r.clone(), cmd, delivery).await;
                }
                let me = &state.ctx.config.node_id;
                if let Some(host) = last.as_ref().and_then(|r| r.host.clone()).filter(|h| h != me) {
                    match delivery {
                        Settle::Stream(d) => state.forward(id, host, d),
                        // Passed here by a supervisor that read an older record: it asks again.
                        forwarded => forwarded.retry(Duration::from_millis(500), &format!("sandbox {id} is hosted by {host}")).await,
                    }
                    return Ok(());
                }
                let init = match (&cmd, last) {
                    (_, Some(r)) => Init::Record(r),
                    (SandboxCommand::Create { owner, conversation_id, spec, snapshot, .. }, None) => {
                        let Some(queue) = state.ctx.queue.get() else { return Ok(()) };
                        // A start from a snapshot goes to the host that holds it while that host
                        // has room (here it would set up again); passed once, never back.
                        if let (Some(s), Settle::Stream(_)) = (snapshot, &delivery) {
                            if s.node != *me && queue.has_room(&s.node) {
                                tracing::info!(sandbox_id = %id, host = %s.node, "passing a start to the host holding its snapshot");
                                if let Settle::Stream(d) = delivery {
                                    state.forward(id, s.node.clone(), d);
                                }
                                return Ok(());
                            }
                        }
                        match queue.admit(id, owner, &cmd).await {
                            Ok(Admit::Here) => {}
                            Ok(Admit::Queued) => {
                                delivery.ack().await;
                                return Ok(());
                            }
                            Err(e) => {
                                delivery.retry(Duration::from_secs(1), &e.to_string()).await;
                                return Ok(());
                            }
                        }
                        Init::Fresh {
                            id,
                            owner: owner.clone(),
                            conversation: *conversation_id,
                            spec: spec.clone(),
                            snapshot: snapshot.clone(),
                        }
                    }
                    (_, None) => {
                        tracing::warn!(sandbox_id = %id, "command for an unknown or deleted sandbox; dropping it");
                        delivery.ack().await;
                        return Ok(());
                    }
                };
                let child = state.child(&myself, id, init).await?;
                child.send_message(SandboxMsg::Command(cmd, delivery))?;
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
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
        metrics::gauge!("halyard_sandbox_actors_in_memory").set(state.children.len() as f64);
        Ok(())
    }
}

/// A command for a start still waiting in the queue: a delete cancels it; a create that came
/// again is already queued; a pause or resume has nothing to act on yet.
async fn waiting(ctx: &Ctx, record: SandboxUpdate, cmd: SandboxCommand, delivery: Settle) -> Result<(), ActorProcessingErr> {
    let id = record.sandbox_id;
    let Some(queue) = ctx.queue.get() else { return Ok(()) };
    match cmd {
        SandboxCommand::Delete { .. } => match queue.cancel(id).await {
            Ok(Cancel::Cancelled) => delivery.ack().await,
            // A host took it a moment ago: its record says which, soon.
            Ok(Cancel::Taken) => delivery.retry(Duration::from_millis(300), "the start was just taken by a host").await,
            Err(e) => delivery.retry(Duration::from_secs(1), &e.to_string()).await,
        },
        other => {
            tracing::info!(sandbox_id = %id, command = ?other, "the sandbox's start is still queued; nothing to do");
            delivery.ack().await;
        }
    }
    Ok(())
}

/// Makes a start this host took from the queue, unless it was made already (`taken_over` from
/// a host that died before taking it out of the queue: then it is only taken out). A start
/// nobody claimed before is made without asking: only a claim makes a queued start.
async fn place(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    entry: QueuedStart,
    taken_over: bool,
) -> Result<(), ActorProcessingErr> {
    let id = entry.sandbox_id;
    let made = taken_over && {
        let last = bus::last_record::<SystemRecord>(&state.ctx.js, subjects::SYSTEM_STREAM, &subjects::sandbox_record(id)).await;
        match &last {
            Ok(Some((_, Envelope { payload: SystemRecord::Sandbox(r), .. }))) => {
                matches!(r.status, SandboxStatus::Running | SandboxStatus::Paused | SandboxStatus::Hibernated | SandboxStatus::Deleted)
            }
            _ => false,
        }
    };
    if made {
        if let Some(queue) = state.ctx.queue.get() {
            // Its seats stay with it: it runs, on the host that made it.
            queue.forget(id).await;
            queue.unreserve(id);
        }
        return Ok(());
    }
    let create = SandboxCommand::Create {
        sandbox_id: id,
        owner: entry.owner.clone(),
        conversation_id: entry.conversation_id,
        spec: entry.spec.clone(),
        queue: entry.terms.clone(),
        snapshot: entry.snapshot.clone(),
    };
    let init = Init::Fresh { id, owner: entry.owner, conversation: entry.conversation_id, spec: entry.spec, snapshot: entry.snapshot };
    let child = state.child(myself, id, init).await?;
    child.send_message(SandboxMsg::Command(create, Settle::Local))?;
    Ok(())
}

/// Wakes a sandbox of this host whose wake waited in the queue and was taken: it resumes with
/// the room and seats the queue took for it (a sandbox deleted meanwhile only leaves the line).
async fn wake(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState, entry: QueuedStart) -> Result<(), ActorProcessingErr> {
    let id = entry.sandbox_id;
    match child_of(myself, state, id).await? {
        Some(child) => child.send_message(SandboxMsg::Command(SandboxCommand::Resume { sandbox_id: id }, Settle::Local))?,
        None => {
            if let Some(queue) = state.ctx.queue.get() {
                queue.forget(id).await;
                queue.unreserve(id);
            }
        }
    }
    Ok(())
}

/// The actor of this host's sandbox `id`, brought back from its record if it is not in memory
/// (`None`: it was deleted, or has no record).
async fn child_of(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    id: SandboxId,
) -> Result<Option<ActorRef<SandboxMsg>>, ActorProcessingErr> {
    if let Some(child) = state.children.get(&id) {
        return Ok(Some(child.clone()));
    }
    let last = bus::last_record::<SystemRecord>(&state.ctx.js, subjects::SYSTEM_STREAM, &subjects::sandbox_record(id)).await;
    match last {
        Ok(Some((_, Envelope { payload: SystemRecord::Sandbox(r), .. }))) if r.status != SandboxStatus::Deleted => {
            Ok(Some(state.child(myself, id, Init::Record(r)).await?))
        }
        _ => Ok(None),
    }
}

/// The latest record of every sandbox, from the SYSTEM stream.
async fn latest_sandbox_records(js: &jetstream::Context) -> Result<Vec<SandboxUpdate>, SandboxError> {
    let stream = js.get_stream(subjects::SYSTEM_STREAM).await.map_err(|e| SandboxError::Spawn(format!("system stream: {e}")))?;
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

/// Connects to the engine and prepares every spec's runtime image, publishing how each was
/// obtained (`halyard.sys.image.<spec>`).
async fn docker_ctx(config: &Config, js: &jetstream::Context) -> Result<DockerCtx, SandboxError> {
    let sandbox = &config.sandbox;
    let docker = crate::docker::connect(&sandbox.docker_host).await.map_err(|e| SandboxError::Spawn(e.to_string()))?;
    let binary = sandbox.executor_command.first().ok_or_else(|| SandboxError::Spawn("no executor binary configured".into()))?;
    let files = crate::image::ExecutorFiles::discover(std::path::Path::new(binary));
    let mut images = HashMap::new();
    for spec in sandbox.specs() {
        let image = crate::image::ensure(&docker, &sandbox.image_repository, &spec, files.clone())
            .await
            .map_err(|e| SandboxError::Spawn(e.to_string()))?;
        tracing::info!(spec = %spec.name, image = %image.image, outcome = ?image.outcome, build_ms = image.build_ms, "runtime image ready");
        images.insert(spec.name.clone(), image.image.clone());
        bus::send(js, subjects::image_record(&spec.name), SystemRecord::SandboxImage(image), None).await?;
    }
    let naming = crate::docker::Naming { deployment: config.node_id.clone() };
    let overlays = crate::snapshots::process_root(&config.data_dir).join("overlays");
    let engine = Engine { docker, naming, publish_host: sandbox.publish_host, overlays, gvisor_runtime: sandbox.gvisor_runtime.clone() };
    // Each spec's runtime and network, before any container needs them.
    for spec in sandbox.specs() {
        engine.check_runtime(&spec.runtime).await.map_err(|e| SandboxError::Spawn(format!("spec {}: {e}", spec.name)))?;
        engine.check_docker_inside(&spec).await.map_err(|e| SandboxError::Spawn(format!("spec {}: {e}", spec.name)))?;
        let egress = crate::egress::Egress::parse(&spec.egress).map_err(|e| SandboxError::Spawn(format!("spec {}: {e}", spec.name)))?;
        let network = engine.ensure_network(egress).await.map_err(|e| SandboxError::Spawn(format!("spec {}: {e}", spec.name)))?;
        tracing::info!(spec = %spec.name, %network, egress = egress.as_str(), "sandbox network ready");
    }
    Ok(DockerCtx { engine, images, pool: Pool::default(), containers: Mutex::new(HashMap::new()), executor: files })
}

/// The egress proxy: for containers, the `policy` network and the proxy listening on its
/// gateway; for process sandboxes, the proxy alone (each one's socket is made as it is held to a
/// policy). `None` (said in the log) when it cannot serve: sandboxes held to an outbound policy
/// are then refused in words.
async fn egress_proxy(
    docker: Option<&DockerCtx>,
    sandbox: &halyard_platform::config::SandboxConfig,
    js: &jetstream::Context,
) -> Option<Arc<crate::egress_proxy::EgressProxy>> {
    let made = async {
        let mut reach = crate::egress_proxy::Reach {
            resolve: sandbox.egress_resolve.clone(),
            private: sandbox.egress_addresses.iter().any(|c| c == "private"),
            sandbox_networks: Vec::new(),
        };
        let Some(d) = docker else {
            tracing::info!("egress proxy ready for process sandboxes");
            return Ok(crate::egress_proxy::EgressProxy::new(reach, js.clone()));
        };
        let class = crate::egress::Egress::Policy;
        d.engine.ensure_network(class).await.map_err(|e| e.to_string())?;
        let gateway = d.engine.network_gateway(class).await.map_err(|e| e.to_string())?;
        reach.sandbox_networks = d.engine.network_subnets().await.map_err(|e| e.to_string())?;
        let listen = std::net::SocketAddr::new(gateway, crate::egress_proxy::PROXY_PORT);
        let proxy = crate::egress_proxy::EgressProxy::new(reach, js.clone());
        proxy.listen_tcp(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        tracing::info!(%listen, "egress proxy ready");
        Ok::<_, String>(proxy)
    };
    made.await.inspect_err(|e| tracing::warn!(error = %e, "no egress proxy: sandboxes held to an outbound policy will be refused")).ok()
}

/// Removes this deployment's containers and volumes that no sandbox record refers to (left by
/// a crash half-way through a start or a delete, or a previous run's warm pool).
async fn remove_orphans(d: &DockerCtx, records: &[SandboxUpdate]) -> Result<(), SandboxError> {
    let known = |f: &dyn Fn(&SandboxUpdate) -> Option<&String>, name: &str| {
        records.iter().any(|r| r.status != SandboxStatus::Deleted && f(r).is_some_and(|v| v == name))
    };
    let err = |e: crate::docker::DockerError| SandboxError::Spawn(e.to_string());
    for (container, labels) in d.engine.containers().await.map_err(err)? {
        // The Runtime API's runtimes are their containers: no record refers to them.
        if labels.contains_key(crate::runtime_api::runtimes::LABEL_RUNTIME) {
            continue;
        }
        if !known(&|r| r.container.as_ref(), &container) {
            tracing::info!(%container, sandbox = ?labels.get(crate::docker::LABEL_SANDBOX), "removing orphaned container");
            d.engine.remove(&container).await.map_err(err)?;
        }
    }
    for volume in d.engine.volumes().await.map_err(err)? {
        if !known(&|r| r.volume.as_ref(), &volume) {
            tracing::info!(%volume, "removing orphaned volume");
            d.engine.remove_volume(&volume).await.map_err(err)?;
        }
    }
    Ok(())
}

/// Forwards the engine's container events to the supervisor, reconnecting if the stream ends.
async fn watch_engine(engine: Engine, supervisor: ActorRef<SupervisorMsg>, mut shutdown: Shutdown) {
    let mut backoff = Duration::from_millis(200);
    loop {
        let mut events = Box::pin(engine.events());
        loop {
            let next = tokio::select! {
                _ = shutdown.wait() => return,
                n = events.next() => n,
            };
            match next {
                Some(Ok((container, action, exit_code))) => {
                    backoff = Duration::from_millis(200);
                    let _ = supervisor.send_message(SupervisorMsg::Engine { container, action, exit_code });
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "engine event stream failed; reconnecting");
                    break;
                }
                None => break,
            }
        }
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Reconciles, then serves sandbox commands until `shutdown`.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), SandboxError> {
    if crate::netns::shares_ui_address(config.sandbox.publish_host, &config.http_addr) {
        return Err(SandboxError::Spawn(format!(
            "HALYARD_SANDBOX_PUBLISH_HOST {} is where the web workspace is served ({}): an agent's app there would be sent \
             the users' session cookies. Publish sandboxes on another address (the default 127.0.0.2, or the host's own \
             address for agent runners elsewhere)",
            config.sandbox.publish_host, config.http_addr
        )));
    }
    let js = jetstream::new(nats);
    let http = halyard_platform::executor_client::http_client().build().map_err(|e| SandboxError::Spawn(e.to_string()))?;
    let docker = match config.sandbox.kind.as_str() {
        "docker" => Some(Arc::new(docker_ctx(&config, &js).await?)),
        _ => None,
    };
    let isolation = match docker {
        Some(_) => None,
        None => {
            if let Some(spec) = config.sandbox.specs().into_iter().find(|s| s.docker) {
                return Err(SandboxError::Spawn(format!(
                    "spec {}: `docker = true` needs container sandboxes under gVisor; this deployment runs process sandboxes",
                    spec.name
                )));
            }
            let isolation = Isolation::choose(&config.sandbox, &config.data_dir).map_err(SandboxError::Spawn)?;
            tracing::info!(isolation = isolation.name(), "process sandboxes");
            Some(isolation)
        }
    };
    let cgroups = isolation.as_ref().map(|_| {
        let cgroups = crate::limits::Cgroups::detect(&config.node_id_or_random());
        tracing::info!(limits = cgroups.name(), "process sandboxes' resource limits");
        cgroups
    });
    let egress = egress_proxy(docker.as_deref(), &config.sandbox, &js).await;
    let ctx = Arc::new(Ctx {
        config: config.clone(),
        js: js.clone(),
        http,
        registry: Mutex::new(HashMap::new()),
        docker,
        egress,
        isolation,
        cgroups,
        queue: Default::default(),
        snapshots: Default::default(),
    });
    let (supervisor, handle) = Actor::spawn(None, Supervisor, ctx.clone()).await.map_err(|e| SandboxError::Spawn(e.to_string()))?;
    // The starts this host takes from the queue go to the supervisor like commands.
    let (place, mut placed) = tokio::sync::mpsc::unbounded_channel();
    let queue = Queue::open(&js, config.clone(), place).await?;
    let _ = ctx.queue.set(queue.clone());
    let snapshots = js
        .get_key_value(halyard_protocol::environment::SNAPSHOT_BUCKET)
        .await
        .map_err(|e| SandboxError::Spawn(format!("the snapshot bucket: {e}")))?;
    let _ = ctx.snapshots.set(crate::snapshots::Snapshots::new(snapshots));
    let placing = tokio::spawn({
        let supervisor = supervisor.clone();
        async move {
            while let Some(placed) = placed.recv().await {
                let _ = supervisor.send_message(SupervisorMsg::Place(placed));
            }
        }
    });

    // Orphans are judged against every record (containers are named per supervisor anyway);
    // only this supervisor's own sandboxes are adopted.
    let records: Vec<SandboxUpdate> = latest_sandbox_records(&js).await?;
    let mut tasks = Vec::new();
    if let Some(d) = &ctx.docker {
        // Subscribe before looking, so nothing that happens during reconciliation is missed.
        tasks.push(tokio::spawn(watch_engine(d.engine.clone(), supervisor.clone(), shutdown.clone())));
        remove_orphans(d, &records).await?;
        tasks.push(tokio::spawn(crate::warm::refill(ctx.clone(), shutdown.clone())));
        tasks.push(tokio::spawn(crate::envpool::keep(ctx.clone(), shutdown.clone())));
        if let Some(addr) = config.sandbox.runtime_api_addr {
            let api = crate::runtime_api::RuntimeApi::from_config(&config, d.engine.clone(), js.clone()).map_err(SandboxError::Spawn)?;
            tasks.extend(crate::runtime_api::launch(api, addr, shutdown.clone()).await.map_err(SandboxError::Spawn)?);
        }
    } else if config.sandbox.runtime_api_addr.is_some() {
        return Err(SandboxError::Spawn(
            "HALYARD_RUNTIME_API_ADDR serves OpenHands' Runtime API from container sandboxes; this deployment runs process sandboxes (set HALYARD_SANDBOX=docker)".into(),
        ));
    }
    let mine = |r: &SandboxUpdate| r.sandbox_kind == config.sandbox.kind && r.host.as_ref().is_none_or(|h| *h == config.node_id);
    for record in records.into_iter().filter(mine) {
        let live = matches!(record.status, SandboxStatus::Running | SandboxStatus::Starting | SandboxStatus::Paused);
        if live {
            if let Ok(mut reg) = ctx.registry.lock() {
                reg.insert(record.sandbox_id, (record.owner.clone(), record.status));
            }
            queue.status_changed(record.sandbox_id, record.status);
            let _ = supervisor.send_message(SupervisorMsg::Adopt(record));
        }
    }
    tasks.push(tokio::spawn(queue.run(shutdown.clone())));
    tasks.push(tokio::spawn(crate::snapshots::sweep(ctx.clone(), shutdown.clone())));
    // The idle check runs a few times within the shorter idle limit (hibernation, pause).
    let idle = [config.sandbox.idle_stop_secs, config.sandbox.idle_pause_secs].into_iter().filter(|s| *s > 0).min();
    if let Some(idle) = idle {
        let every = Duration::from_secs((idle / 4).clamp(1, 30));
        let (supervisor, mut shutdown) = (supervisor.clone(), shutdown.clone());
        tasks.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = shutdown.wait() => return,
                    _ = ticks.tick() => { let _ = supervisor.send_message(SupervisorMsg::Tick); }
                }
            }
        }));
    }

    // Commands other supervisors pass to the sandboxes hosted here (subscribed before the
    // consumer is served, so none passed meanwhile is missed).
    let nats = js.client();
    let forwarded =
        nats.subscribe(subjects::sandbox_host(&config.node_id)).await.map_err(|e| SandboxError::Spawn(format!("subscribe: {e}")))?;
    let passed_on = tokio::spawn({
        let supervisor = supervisor.clone();
        route::serve_forwarded::<SandboxCommand>(nats, forwarded, move |env, settle| {
            supervisor.send_message(SupervisorMsg::Command(env, settle)).is_ok()
        })
    });
    let result = bus::consume_into_actor::<SandboxCommand, _>(
        js,
        subjects::COMMANDS_STREAM,
        subjects::SANDBOX_CONSUMER,
        "sandbox",
        shutdown,
        supervisor.clone(),
        |env, d| SupervisorMsg::Command(env, Settle::Stream(d)),
    )
    .await;
    passed_on.abort();
    placing.abort();
    // The pool task removes its containers on the way out; give it a moment.
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    }
    supervisor.stop(None);
    let _ = handle.await;
    result.map_err(SandboxError::from)
}
