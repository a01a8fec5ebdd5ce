//! One actor per sandbox: it owns the sandbox's executor (a child process, or a container on a
//! workspace volume) and publishes every state change as a record.

mod devcontainer;
mod egress;
mod provision;
mod reconcile;
mod shape;
mod snapshot;

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use halyard_platform::bus;
use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::keys;
use halyard_platform::route::Settle;
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::environment::{PORT_APP_PREFIX, port_app};
use halyard_protocol::system::{AGENT_SERVER, ExposedUrl, SandboxStatus, SandboxUpdate, SystemRecord};
use halyard_protocol::{ConversationId, SandboxId, UserId, subjects};

use crate::ctx::Ctx;
use crate::docker::Found;
use crate::layout::Layout;
use crate::process;

/// How a sandbox actor comes to life.
pub enum Init {
    /// A new sandbox.
    Fresh {
        id: SandboxId,
        owner: UserId,
        conversation: ConversationId,
        spec: Option<String>,
        /// An environment snapshot to start from.
        snapshot: Option<halyard_protocol::environment::SnapshotRef>,
    },
    /// A sandbox known from its last record.
    Record(SandboxUpdate),
}

/// Messages of a sandbox actor.
// Each message is moved once, into the mailbox; boxing the large variant would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub enum SandboxMsg {
    Command(SandboxCommand, Settle),
    /// Check the recorded executor against reality (after a supervisor restart).
    Reconcile,
    /// The executor process of `generation` ended (process kind).
    Exited {
        generation: u64,
        detail: String,
    },
    /// The engine reported `action` (`die`, `destroy`, `oom`, `pause`, `unpause`) for a
    /// container (docker kind).
    Engine {
        container: String,
        action: String,
        exit_code: Option<i64>,
    },
    /// Time to check for idleness.
    Tick,
    /// Its wake waited in the start queue past its deadline (why, in words).
    WakeExpired(String),
}

pub struct SandboxActor;

pub struct SandboxState {
    ctx: Arc<Ctx>,
    id: SandboxId,
    owner: UserId,
    conversation: Option<ConversationId>,
    docker: bool,
    layout: Layout,
    status: SandboxStatus,
    urls: Vec<ExposedUrl>,
    /// Process kind: the executor's pid. Incremented `generation` per process, so the exit of
    /// an old one is not mistaken for the current one's.
    pid: Option<u32>,
    generation: u64,
    /// Docker kind: the container (absent once removed) and the workspace volume.
    container: Option<String>,
    volume: Option<String>,
    spec: String,
    from_pool: bool,
    oom: bool,
    /// When the idle check paused it (a sandbox paused by a user is never hibernated).
    idle_paused_at: Option<std::time::Instant>,
    /// While a wake of it waits in the start queue: until when it may.
    wake_until: Option<halyard_protocol::UnixMillis>,
    /// The environment snapshot to start from, until its first start.
    restore: Option<halyard_protocol::environment::SnapshotRef>,
    /// The environment snapshot it started from.
    snapshot: Option<String>,
    /// The last snapshot made of it (a command delivered again is not made twice).
    made_snapshot: Option<String>,
    /// Docker: the image, user and variables of its container when not the spec's.
    runtime: Option<halyard_protocol::environment::Runtime>,
    /// What its start's environment set of it (network class, limits, forwarded ports).
    shape: Option<halyard_protocol::environment::Shape>,
    /// Held to an outbound policy: the door, rules and conversation the egress proxy serves it
    /// by.
    egress_admitted: Option<(crate::egress_proxy::Door, halyard_protocol::egress::EgressRules, Option<ConversationId>)>,
}

impl Actor for SandboxActor {
    type Msg = SandboxMsg;
    type State = SandboxState;
    type Arguments = (Arc<Ctx>, Init);

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, (ctx, init): Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        let docker = ctx.docker.is_some();
        let default_spec = ctx.config.sandbox.default_spec.clone();
        let mut st = SandboxState {
            layout: Layout::new(&ctx.config.data_dir, SandboxId::new()),
            ctx,
            id: SandboxId::new(),
            owner: UserId(String::new()),
            conversation: None,
            docker,
            status: SandboxStatus::Starting,
            urls: Vec::new(),
            pid: None,
            generation: 0,
            container: None,
            volume: None,
            spec: default_spec,
            from_pool: false,
            oom: false,
            idle_paused_at: None,
            wake_until: None,
            restore: None,
            snapshot: None,
            made_snapshot: None,
            runtime: None,
            shape: None,
            egress_admitted: None,
        };
        match init {
            Init::Fresh { id, owner, conversation, spec, snapshot } => {
                st.id = id;
                st.restore = snapshot;
                st.owner = owner;
                st.conversation = Some(conversation);
                if let Some(spec) = spec {
                    st.spec = spec;
                }
            }
            Init::Record(r) => {
                st.id = r.sandbox_id;
                st.owner = r.owner;
                st.conversation = r.conversation_id;
                st.status = r.status;
                // (Forwarded ports are added to each record from the shape.)
                st.urls = r.exposed_urls.into_iter().filter(|u| !u.name.starts_with(PORT_APP_PREFIX)).collect();
                st.pid = r.pid;
                st.container = r.container;
                st.volume = r.volume;
                st.from_pool = r.from_pool;
                st.wake_until = r.wake_queued_until;
                st.snapshot = r.snapshot;
                st.runtime = r.runtime.map(|r| *r);
                st.shape = r.shape.map(|s| *s);
                if let Some(spec) = r.spec {
                    st.spec = spec;
                }
            }
        }
        st.layout = Layout::new(&st.ctx.config.data_dir, st.id);
        st.track_container();
        Ok(st)
    }

    async fn handle(&self, myself: ActorRef<Self::Msg>, msg: Self::Msg, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        match msg {
            SandboxMsg::Command(cmd, delivery) => {
                match cmd {
                    SandboxCommand::Create { .. } => {
                        // A redelivered create of a running sandbox just re-announces it.
                        if st.status == SandboxStatus::Running && st.executor_alive().await {
                            st.publish(SandboxStatus::Running, None).await;
                        } else {
                            let asked = std::time::Instant::now();
                            st.provision(&myself, true).await;
                            st.record_start(asked);
                        }
                    }
                    SandboxCommand::Snapshot { plan, .. } => st.take_snapshot(&plan).await,
                    SandboxCommand::UseImage { plan, .. } => st.use_image(&plan).await,
                    SandboxCommand::Shape { shape, .. } => st.set_shape(shape).await,
                    SandboxCommand::Pause { .. } => st.pause(None).await,
                    SandboxCommand::Resume { .. } => {
                        let asked = std::time::Instant::now();
                        st.resume(&myself).await;
                        st.record_start(asked);
                    }
                    SandboxCommand::Delete { .. } => {
                        st.delete().await;
                        delivery.ack().await;
                        myself.stop(Some("deleted".into()));
                        return Ok(());
                    }
                }
                delivery.ack().await;
            }
            SandboxMsg::Reconcile => {
                if st.docker {
                    st.reconcile_container().await;
                } else {
                    st.reconcile_process(&myself).await;
                }
            }
            SandboxMsg::Exited { generation, detail } => {
                if generation == st.generation && !matches!(st.status, SandboxStatus::Deleted) {
                    tracing::warn!(sandbox_id = %st.id, %detail, "executor process ended");
                    // What it left in its group (the forwarder, slirp4netns, the agent's
                    // background processes) ends with it.
                    if let Some(pid) = st.pid.take() {
                        process::kill_group(pid);
                    }
                    st.publish(SandboxStatus::Error, Some(format!("executor process ended: {detail}"))).await;
                }
            }
            SandboxMsg::Engine { container, action, exit_code } => st.engine_event(&container, &action, exit_code).await,
            SandboxMsg::WakeExpired(detail) => {
                if st.wake_until.take().is_some() {
                    let status = st.status;
                    st.publish(status, Some(format!("{}{detail}", halyard_protocol::system::REFUSED_PREFIX))).await;
                }
            }
            SandboxMsg::Tick => {
                // Nothing of a hibernated sandbox stays in memory (one brought back by a
                // command that did not wake it included): its next command brings the actor
                // back from its record.
                // (One whose wake waits stays: the wake comes to it, or its expiry, which is
                // not waited for past a minute more.)
                if st.wake_until.is_some_and(|until| until + 60_000 < halyard_platform::now_ms()) {
                    st.wake_until = None;
                }
                if st.wake_until.is_none() && (st.check_idle().await || st.status == SandboxStatus::Hibernated) {
                    myself.stop(Some("hibernated".into()));
                }
            }
        }
        Ok(())
    }

    async fn post_stop(&self, _myself: ActorRef<Self::Msg>, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // Halyard is stopping. A process executor goes down with it (its record stays as it
        // is, so the next start re-provisions it on the same workspace); a container keeps
        // running and is adopted by the next supervisor.
        if let Some(pid) = st.pid.take() {
            st.generation += 1;
            process::end_group(pid).await;
        }
        st.untrack_container();
        Ok(())
    }
}

impl SandboxState {
    fn key(&self) -> String {
        keys::session_key(&self.ctx.config.secret, self.id)
    }

    fn agent_url(&self) -> Option<&str> {
        self.urls.iter().find(|u| u.name == AGENT_SERVER).map(|u| u.url.as_str())
    }

    /// Its URLs, with each forwarded port as an app reached through the executor (its
    /// `/ports/<n>/`, which passes requests to the sandbox's own loopback).
    fn exposed_urls(&self) -> Vec<ExposedUrl> {
        let mut urls = self.urls.clone();
        if let (Some(shape), Some(agent)) = (&self.shape, self.agent_url()) {
            let agent = agent.trim_end_matches('/');
            urls.extend(shape.ports.iter().map(|p| ExposedUrl { name: port_app(*p), url: format!("{agent}/ports/{p}") }));
        }
        urls
    }

    /// Its workspace as its agent and user see it.
    fn workspace(&self) -> String {
        match self.ctx.config.sandbox.spec(&self.spec) {
            Some(spec) if self.docker => spec.working_dir,
            _ if self.ctx.isolation.as_ref().is_some_and(|i| i.same_paths()) => crate::paths::WORKSPACE.to_owned(),
            _ => self.layout.workspace().display().to_string(),
        }
    }

    /// Lets engine events about our container reach this actor.
    fn track_container(&self) {
        if let (Some(d), Some(c)) = (&self.ctx.docker, &self.container) {
            if let Ok(mut map) = d.containers.lock() {
                map.insert(c.clone(), self.id);
            }
        }
    }

    fn untrack_container(&self) {
        if let (Some(d), Some(c)) = (&self.ctx.docker, &self.container) {
            if let Ok(mut map) = d.containers.lock() {
                map.remove(c);
            }
        }
    }

    /// Counts a start (or resume) asked at `asked` by kind and outcome, with its latency.
    fn record_start(&self, asked: std::time::Instant) {
        let kind = if self.docker { "docker" } else { "process" };
        let outcome = if self.status == SandboxStatus::Running { "running" } else { "failed" };
        metrics::counter!("halyard_sandbox_starts_total", "kind" => kind, "outcome" => outcome).increment(1);
        metrics::histogram!("halyard_sandbox_start_seconds", "kind" => kind, "outcome" => outcome).record(asked.elapsed().as_secs_f64());
    }

    async fn publish(&mut self, status: SandboxStatus, detail: Option<String>) {
        self.status = status;
        // A wake that waits is said with the sandbox's status as it stays meanwhile; any
        // other change ends the wait.
        if !detail.as_deref().is_some_and(|d| d.starts_with(halyard_protocol::queue::WAKE_QUEUED_DETAIL)) {
            self.wake_until = None;
        }
        if !matches!(status, SandboxStatus::Running | SandboxStatus::Paused) {
            self.urls.clear();
        }
        // Before the record says it runs: whoever acts on the record finds its way out ready.
        self.sync_egress(status).await;
        let record = SystemRecord::Sandbox(SandboxUpdate {
            sandbox_id: self.id,
            owner: self.owner.clone(),
            conversation_id: self.conversation,
            sandbox_kind: if self.docker { "docker" } else { "process" }.into(),
            status,
            exposed_urls: self.exposed_urls(),
            workspace: self.workspace(),
            detail,
            pid: self.pid,
            container: self.container.clone(),
            volume: self.volume.clone(),
            spec: self.docker.then(|| self.spec.clone()),
            from_pool: self.from_pool,
            host: Some(self.ctx.config.node_id.clone()),
            wake_queued_until: self.wake_until,
            snapshot: self.snapshot.clone(),
            runtime: self.runtime.clone().map(Box::new),
            shape: self.shape.clone().map(Box::new),
        });
        if let Ok(mut reg) = self.ctx.registry.lock() {
            if matches!(status, SandboxStatus::Hibernated | SandboxStatus::Deleted) {
                reg.remove(&self.id);
            } else {
                reg.insert(self.id, (self.owner.clone(), status));
            }
        }
        if let Some(queue) = self.ctx.queue.get() {
            queue.status_changed(self.id, status);
        }
        // Records are the truth other services act on: retry until stored.
        let mut delay = Duration::from_millis(50);
        for _ in 0..8 {
            match bus::send(&self.ctx.js, subjects::sandbox_record(self.id), record.clone(), None).await {
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!(sandbox_id = %self.id, error = %e, "cannot publish sandbox record, retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
            }
        }
        tracing::error!(sandbox_id = %self.id, status = status.as_str(), "sandbox record lost");
    }

    async fn executor_alive(&self) -> bool {
        if self.docker {
            let Some(url) = self.agent_url() else { return false };
            let client = ExecutorClient::new(self.ctx.http.clone(), url.to_owned(), self.key());
            matches!(client.health().await, Ok(h) if h.ok)
        } else {
            self.pid.is_some_and(process::alive)
        }
    }

    /// Freezes the sandbox; `why` says who asked, if not a user or the agent.
    async fn pause(&mut self, why: Option<String>) {
        let frozen = match (self.status, &self.ctx.docker, &self.container, self.pid) {
            (SandboxStatus::Paused, ..) => return self.publish(SandboxStatus::Paused, None).await,
            (SandboxStatus::Running, Some(d), Some(c), _) => d.engine.pause(c).await.map_err(|e| e.to_string()),
            (SandboxStatus::Running, None, _, Some(pid)) if process::stop_group(pid) => Ok(()),
            _ => Err("the sandbox is not running".to_owned()),
        };
        match frozen {
            Ok(()) => {
                self.idle_paused_at = why.is_some().then(std::time::Instant::now);
                self.publish(SandboxStatus::Paused, why).await
            }
            Err(e) => {
                // Nothing could be frozen; the sandbox stays as it is, visibly.
                let status = self.status;
                self.publish(status, Some(format!("pause ignored: {e}"))).await
            }
        }
    }

    async fn resume(&mut self, myself: &ActorRef<SandboxMsg>) {
        if self.status == SandboxStatus::Running && self.executor_alive().await {
            return self.publish(SandboxStatus::Running, None).await;
        }
        // Starting a sandbox again takes a seat of the running limits and room on this host
        // (unless it already holds them); a refusal leaves it as it is (never pausing anyone
        // else's) and says why.
        let counted = matches!(self.status, SandboxStatus::Running | SandboxStatus::Starting);
        if let (false, Some(queue)) = (counted, self.ctx.queue.get()) {
            if let Some(reason) = queue.resume_refusal(&self.owner, self.id).await {
                let status = self.status;
                // Waiting fixes that: the wake waits its turn in the start queue (a message to
                // the conversation is answered once it is placed), unless it cannot be queued.
                if let Some(conversation) = self.conversation {
                    let spec = self.docker.then(|| self.spec.clone());
                    match queue.enqueue_wake(self.id, &self.owner, conversation, spec, &reason).await {
                        Ok(until) => {
                            self.wake_until = Some(until);
                            let detail =
                                format!("{}: {reason}; it starts again when there is room", halyard_protocol::queue::WAKE_QUEUED_DETAIL);
                            return self.publish(status, Some(detail)).await;
                        }
                        Err(e) => tracing::warn!(sandbox_id = %self.id, error = %e, "cannot queue the wake; refusing it"),
                    }
                }
                return self.publish(status, Some(format!("{}{reason}", halyard_protocol::system::REFUSED_PREFIX))).await;
            }
        }
        if self.docker {
            if let (Some(d), Some(c)) = (self.ctx.docker.clone(), self.container.clone()) {
                if let Ok((Found::Paused, _)) = d.engine.inspect(&c).await {
                    match d.engine.unpause(&c).await {
                        Ok(()) => return self.publish(SandboxStatus::Running, None).await,
                        Err(e) => tracing::warn!(sandbox_id = %self.id, error = %e, "cannot unpause; re-provisioning"),
                    }
                }
            }
        } else if let Some(pid) = self.pid.filter(|p| process::alive(*p)) {
            process::continue_group(pid);
            return self.publish(SandboxStatus::Running, None).await;
        }
        // Gone (crashed, killed, removed, or lost with a host restart): a new executor on the
        // same workspace, so the user's files are all still there.
        self.provision(myself, false).await
    }

    async fn delete(&mut self) {
        let recorded = self.pid.take();
        if let Some(pid) = recorded {
            self.generation += 1;
            process::kill_group(pid);
        }
        self.status = SandboxStatus::Deleted;
        if let Some(d) = self.ctx.docker.clone() {
            self.untrack_container();
            if let Some(c) = self.container.take() {
                if let Err(e) = d.engine.remove(&c).await {
                    tracing::warn!(sandbox_id = %self.id, error = %e, "cannot remove container; the next start-up removes it as an orphan");
                }
            }
            let volume = self.volume.clone().unwrap_or_else(|| d.engine.naming.volume(&self.id.to_string()));
            if let Err(e) = d.engine.remove_volume(&volume).await {
                tracing::warn!(sandbox_id = %self.id, error = %e, "cannot remove volume; the next start-up removes it as an orphan");
            }
        } else {
            // An executor no record named (a crash cut its start short) goes too.
            process::end_leftover(&self.layout, recorded);
            // The uid is read off the workspace, so free it first.
            if let Some(isolation) = &self.ctx.isolation {
                isolation.release(&self.layout);
            }
            // Its groups go once its processes have (they get two seconds to end; what is left
            // in them then, having left the executor's process groups, is killed).
            let (ctx, id) = (self.ctx.clone(), self.id);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                if let Some(cgroups) = &ctx.cgroups {
                    cgroups.kill_all(id);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    cgroups.remove(id);
                }
            });
            let root = self.layout.root.clone();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(root)).await;
        }
        // A deleted snapshot that this sandbox held back (its image, the lower layer of its
        // volume) goes now rather than at the next minute's sweep.
        if let (Some(_), Some(snaps)) = (&self.snapshot, self.ctx.snapshots.get()) {
            snaps.freed.notify_one();
        }
        self.publish(SandboxStatus::Deleted, None).await;
    }

    /// An engine event about a container; only the current one matters.
    async fn engine_event(&mut self, container: &str, action: &str, exit_code: Option<i64>) {
        if self.container.as_deref() != Some(container) || self.status == SandboxStatus::Deleted {
            return;
        }
        match action {
            "oom" => self.oom = true,
            "die" if matches!(self.status, SandboxStatus::Running | SandboxStatus::Starting | SandboxStatus::Paused) => {
                let code = exit_code.map_or_else(|| "unknown".to_owned(), |c| c.to_string());
                let oom = if self.oom { ", out of memory" } else { "" };
                tracing::warn!(sandbox_id = %self.id, container, code, "container exited");
                self.publish(
                    SandboxStatus::Error,
                    Some(format!("container exited (code {code}{oom}); resume restarts it on the same workspace")),
                )
                .await;
            }
            "destroy" => {
                self.untrack_container();
                self.container = None;
                tracing::warn!(sandbox_id = %self.id, container, "container removed outside Halyard");
                self.publish(
                    SandboxStatus::Missing,
                    Some("container was removed; resume re-provisions it on the same workspace volume".into()),
                )
                .await;
            }
            "pause" if self.status == SandboxStatus::Running => {
                self.publish(SandboxStatus::Paused, Some("paused outside Halyard".into())).await;
            }
            "unpause" if self.status == SandboxStatus::Paused => {
                self.publish(SandboxStatus::Running, Some("unpaused outside Halyard".into())).await;
            }
            _ => {}
        }
    }

    /// Hibernates (or, if only that is configured, pauses) a sandbox idle too long; whether it
    /// hibernated. Idle means the executor saw no request and holds no open terminal or VS
    /// Code connection (its `idle_ms`); a sandbox the idle check paused counts its paused time.
    async fn check_idle(&mut self) -> bool {
        let cfg = &self.ctx.config.sandbox;
        let (stop, pause) = (cfg.idle_stop_secs, cfg.idle_pause_secs);
        let idle_ms = match self.status {
            SandboxStatus::Running => {
                let Some(url) = self.agent_url() else { return false };
                let client = ExecutorClient::new(self.ctx.http.clone(), url.to_owned(), self.key());
                match client.health().await {
                    Ok(h) => h.idle_ms,
                    Err(_) => return false,
                }
            }
            SandboxStatus::Paused => match self.idle_paused_at {
                Some(at) => pause * 1000 + at.elapsed().as_millis() as u64,
                None => return false,
            },
            _ => return false,
        };
        if stop > 0 && idle_ms >= stop * 1000 {
            tracing::info!(sandbox_id = %self.id, idle_ms, "hibernating idle sandbox");
            return self.hibernate(format!("hibernated after {} s without activity", idle_ms / 1000)).await;
        }
        if pause > 0 && idle_ms >= pause * 1000 && self.status == SandboxStatus::Running {
            tracing::info!(sandbox_id = %self.id, idle_ms, "pausing idle sandbox");
            self.pause(Some(format!("paused after {} s without activity", idle_ms / 1000))).await;
        }
        false
    }

    /// Ends the sandbox's processes and keeps its workspace (a container is stopped, not
    /// removed: its writable layer keeps what was installed); `why` goes in the record.
    /// Whether it hibernated.
    async fn hibernate(&mut self, why: String) -> bool {
        if let Some(d) = self.ctx.docker.clone() {
            let Some(container) = self.container.clone() else { return false };
            // Its own `die` is no crash to report.
            self.untrack_container();
            if let Err(e) = d.engine.stop(&container).await {
                tracing::warn!(sandbox_id = %self.id, error = %e, "cannot stop the idle sandbox's container; it keeps running");
                self.track_container();
                return false;
            }
        } else {
            let Some(pid) = self.pid.take() else { return false };
            // Its exit is expected: the watcher's report of it is ignored.
            self.generation += 1;
            process::end_tree(pid);
            // What left its process groups (a server started with `setsid`) too.
            if let Some(cgroups) = &self.ctx.cgroups {
                cgroups.kill_all(self.id);
            }
        }
        self.idle_paused_at = None;
        self.publish(SandboxStatus::Hibernated, Some(why)).await;
        true
    }
}

/// Watches a process that is not our child: polls for its existence.
fn watch_adopted(me: ActorRef<SandboxMsg>, pid: u32, generation: u64) {
    tokio::spawn(async move {
        while process::alive(pid) {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let _ = me.send_message(SandboxMsg::Exited { generation, detail: "process disappeared".into() });
    });
}
