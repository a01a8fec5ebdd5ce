//! One actor per sandbox: it owns the executor process and publishes every state change.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use halyard_platform::bus::{self, Delivery};
use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::keys;
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::system::{AGENT_SERVER, ExposedUrl, SandboxStatus, SandboxUpdate, SystemRecord};
use halyard_protocol::{subjects, ConversationId, SandboxId, UserId};

use crate::process::{self, Layout};
use crate::supervisor::Ctx;

/// How a sandbox actor comes to life.
pub enum Init {
    /// A new sandbox.
    Fresh { id: SandboxId, owner: UserId, conversation: ConversationId },
    /// A sandbox known from its last record.
    Record(SandboxUpdate),
}

/// Messages of a sandbox actor.
// Each message is moved once, into the mailbox; boxing the large variant would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub enum SandboxMsg {
    Command(SandboxCommand, Delivery),
    /// Check the recorded process against reality (after a supervisor restart).
    Reconcile,
    /// The executor process of `generation` ended.
    Exited { generation: u64, detail: String },
}

pub struct SandboxActor;

pub struct SandboxState {
    ctx: Arc<Ctx>,
    id: SandboxId,
    owner: UserId,
    conversation: Option<ConversationId>,
    layout: Layout,
    status: SandboxStatus,
    pid: Option<u32>,
    url: Option<String>,
    /// Incremented per executor process, so the exit of an old one is not mistaken for the
    /// current one's.
    generation: u64,
}

impl Actor for SandboxActor {
    type Msg = SandboxMsg;
    type State = SandboxState;
    type Arguments = (Arc<Ctx>, Init);

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, (ctx, init): Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        let (id, owner, conversation, status, pid, url) = match init {
            Init::Fresh { id, owner, conversation } => (id, owner, Some(conversation), SandboxStatus::Starting, None, None),
            Init::Record(r) => {
                let url = r.agent_server_url().map(str::to_owned);
                (r.sandbox_id, r.owner, r.conversation_id, r.status, r.pid, url)
            }
        };
        let layout = Layout::new(&ctx.config.data_dir, id);
        Ok(SandboxState { ctx, id, owner, conversation, layout, status, pid, url, generation: 0 })
    }

    async fn handle(&self, myself: ActorRef<Self::Msg>, msg: Self::Msg, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        match msg {
            SandboxMsg::Command(cmd, delivery) => {
                match cmd {
                    SandboxCommand::Create { .. } => {
                        // A redelivered create of a running sandbox just re-announces it.
                        if st.status == SandboxStatus::Running && st.pid.is_some_and(process::alive) {
                            st.publish(SandboxStatus::Running, None).await;
                        } else {
                            st.provision(&myself).await;
                        }
                    }
                    SandboxCommand::Pause { .. } => st.pause().await,
                    SandboxCommand::Resume { .. } => st.resume(&myself).await,
                    SandboxCommand::Delete { .. } => {
                        st.delete().await;
                        delivery.ack().await;
                        myself.stop(Some("deleted".into()));
                        return Ok(());
                    }
                }
                delivery.ack().await;
            }
            SandboxMsg::Reconcile => st.reconcile(&myself).await,
            SandboxMsg::Exited { generation, detail } => {
                if generation == st.generation && !matches!(st.status, SandboxStatus::Deleted) {
                    tracing::warn!(sandbox_id = %st.id, %detail, "executor process ended");
                    st.pid = None;
                    st.url = None;
                    st.publish(SandboxStatus::Error, Some(format!("executor process ended: {detail}"))).await;
                }
            }
        }
        Ok(())
    }

    async fn post_stop(&self, _myself: ActorRef<Self::Msg>, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // Halyard is stopping: take the executor down with it. Its record stays as it is, so
        // the next start re-provisions it on the same workspace.
        if let Some(pid) = st.pid.take() {
            st.generation += 1;
            process::kill_group(pid);
        }
        Ok(())
    }
}

impl SandboxState {
    fn key(&self) -> String {
        keys::session_key(&self.ctx.config.secret, self.id)
    }

    async fn publish(&mut self, status: SandboxStatus, detail: Option<String>) {
        self.status = status;
        let exposed_urls = match (&self.url, status) {
            (Some(url), SandboxStatus::Running | SandboxStatus::Paused) => {
                vec![ExposedUrl { name: AGENT_SERVER.into(), url: url.clone() }]
            }
            _ => Vec::new(),
        };
        let record = SystemRecord::Sandbox(SandboxUpdate {
            sandbox_id: self.id,
            owner: self.owner.clone(),
            conversation_id: self.conversation,
            sandbox_kind: "process".into(),
            status,
            exposed_urls,
            workspace: self.layout.workspace().display().to_string(),
            detail,
            pid: self.pid,
        });
        if let Ok(mut reg) = self.ctx.registry.lock() {
            reg.insert(self.id, (self.owner.clone(), status));
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

    /// Starts a fresh executor on this sandbox's workspace (which may hold files already).
    async fn provision(&mut self, myself: &ActorRef<SandboxMsg>) {
        if let Some(pid) = self.pid.take() {
            process::kill_group(pid);
        }
        self.url = None;
        self.publish(SandboxStatus::Starting, None).await;
        let cfg = &self.ctx.config.sandbox;
        let started = process::start(
            &cfg.executor_command,
            &cfg.env,
            &self.layout,
            &self.key(),
            cfg.output_cap_bytes,
            &self.ctx.http,
            Duration::from_secs(cfg.start_timeout_secs),
        )
        .await;
        match started {
            Ok(started) => {
                self.generation += 1;
                let generation = self.generation;
                self.pid = Some(started.pid);
                self.url = Some(started.url);
                let me = myself.clone();
                let mut child = started.child;
                let lifeline = started.lifeline;
                tokio::spawn(async move {
                    let _lifeline = lifeline;
                    let detail = match child.wait().await {
                        Ok(status) => status.to_string(),
                        Err(e) => e.to_string(),
                    };
                    let _ = me.send_message(SandboxMsg::Exited { generation, detail });
                });
                tracing::info!(sandbox_id = %self.id, pid = self.pid, "sandbox running");
                self.publish(SandboxStatus::Running, None).await;
            }
            Err(e) => {
                tracing::error!(sandbox_id = %self.id, error = %e, "sandbox start failed");
                self.publish(SandboxStatus::Error, Some(format!("start failed: {e}"))).await;
            }
        }
    }

    async fn pause(&mut self) {
        match (self.status, self.pid) {
            (SandboxStatus::Paused, _) => self.publish(SandboxStatus::Paused, None).await,
            (SandboxStatus::Running, Some(pid)) if process::stop_group(pid) => {
                self.publish(SandboxStatus::Paused, None).await
            }
            _ => {
                // Nothing runs, so nothing can be frozen; the sandbox stays as it is, visibly.
                let status = self.status;
                self.publish(status, Some("pause ignored: the sandbox is not running".into())).await
            }
        }
    }

    async fn resume(&mut self, myself: &ActorRef<SandboxMsg>) {
        match self.pid {
            Some(pid) if process::alive(pid) => {
                process::continue_group(pid);
                self.publish(SandboxStatus::Running, None).await;
            }
            // Gone (crashed, killed, or lost with a host restart): a new executor on the
            // same workspace, so the user's files are all still there.
            _ => self.provision(myself).await,
        }
    }

    async fn delete(&mut self) {
        if let Some(pid) = self.pid.take() {
            self.generation += 1;
            process::kill_group(pid);
        }
        let root = self.layout.root.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(root)).await;
        self.url = None;
        self.publish(SandboxStatus::Deleted, None).await;
    }

    /// After a supervisor restart: adopt the recorded executor if it is really ours and alive,
    /// otherwise bring the sandbox back to its recorded state.
    async fn reconcile(&mut self, myself: &ActorRef<SandboxMsg>) {
        if !self.layout.workspace().exists() {
            self.pid = None;
            self.url = None;
            self.publish(SandboxStatus::Missing, Some("workspace directory is gone".into())).await;
            return;
        }
        let ours = match (self.pid, &self.url) {
            (Some(pid), Some(url)) if process::alive(pid) => {
                if self.status == SandboxStatus::Paused {
                    // A frozen executor cannot answer; the pid and the workspace match.
                    true
                } else {
                    let client = ExecutorClient::new(self.ctx.http.clone(), url.clone(), self.key());
                    matches!(client.health().await, Ok(h) if h.ok && h.workspace == self.layout.workspace().display().to_string())
                }
            }
            _ => false,
        };
        if ours {
            if let Some(pid) = self.pid {
                self.generation += 1;
                watch_adopted(myself.clone(), pid, self.generation);
                tracing::info!(sandbox_id = %self.id, pid, "adopted running executor");
                let status = self.status;
                self.publish(status, None).await;
            }
            return;
        }
        match self.status {
            SandboxStatus::Paused => {
                self.pid = None;
                self.url = None;
                self.publish(SandboxStatus::Paused, Some("executor is gone; resume starts a new one on the same workspace".into())).await;
            }
            _ => self.provision(myself).await,
        }
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
