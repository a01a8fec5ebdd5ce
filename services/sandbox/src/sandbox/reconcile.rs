//! A sandbox found at start-up, made real again: a live executor is adopted, a dead one
//! re-provisioned on the same workspace, so a crash of the supervisor loses no files; one whose
//! making a crash cut short is made again, so its start still gets it.

use crate::docker::Found;
use crate::process;
use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::system::SandboxStatus;
use ractor::ActorRef;

use super::{SandboxMsg, SandboxState, watch_adopted};

impl SandboxState {
    /// After a supervisor restart (docker): adopt the container if it is there, otherwise say
    /// what happened to it.
    pub(super) async fn reconcile_container(&mut self) {
        let Some(d) = self.ctx.docker.clone() else { return };
        let Some(container) = self.container.clone() else {
            if self.status == SandboxStatus::Starting {
                // Its supervisor died while making it: nothing of it was there to lose, and its
                // start still waits for it (a redelivered create finds it running).
                tracing::info!(sandbox_id = %self.id, "a start cut short by a supervisor restart is made again");
                return self.provision_container(false).await;
            }
            return self.publish(SandboxStatus::Missing, Some("no container recorded; resume provisions one".into())).await;
        };
        match d.engine.inspect(&container).await {
            Ok((Found::Running, urls)) => {
                self.urls = urls;
                if self.executor_alive().await {
                    tracing::info!(sandbox_id = %self.id, %container, "adopted running container");
                    let detail = (self.status == SandboxStatus::Paused).then(|| "unpaused outside Halyard".to_owned());
                    self.publish(SandboxStatus::Running, detail).await;
                } else {
                    self.publish(SandboxStatus::Error, Some("container runs but its executor does not answer; resume restarts it".into()))
                        .await;
                }
            }
            Ok((Found::Paused, urls)) => {
                self.urls = urls;
                let detail = (self.status != SandboxStatus::Paused).then(|| "paused outside Halyard".to_owned());
                self.publish(SandboxStatus::Paused, detail).await;
            }
            Ok((Found::Stopped { exit_code, .. }, _)) => {
                self.publish(
                    SandboxStatus::Error,
                    Some(format!("container exited (code {exit_code}) while the supervisor was away; resume restarts it")),
                )
                .await;
            }
            Ok((Found::Gone, _)) => {
                self.untrack_container();
                self.container = None;
                self.publish(
                    SandboxStatus::Missing,
                    Some("container is gone; resume re-provisions it on the same workspace volume".into()),
                )
                .await;
            }
            Err(e) => tracing::error!(sandbox_id = %self.id, error = %e, "cannot inspect container during reconciliation"),
        }
    }

    /// After a supervisor restart (process): adopt the recorded executor if it is really ours
    /// and alive, otherwise bring the sandbox back to its recorded state.
    pub(super) async fn reconcile_process(&mut self, myself: &ActorRef<SandboxMsg>) {
        if !self.layout.workspace().exists() {
            self.pid = None;
            if self.status == SandboxStatus::Starting {
                // Its supervisor died while making it, before its workspace was there: nothing
                // was lost, and its start still waits for it (a redelivered create finds it
                // running). A workspace gone from a sandbox that ran is a loss, said below.
                tracing::info!(sandbox_id = %self.id, "a start cut short by a supervisor restart is made again");
                return self.provision_process(myself).await;
            }
            return self.publish(SandboxStatus::Missing, Some("workspace directory is gone".into())).await;
        }
        let ours = match (self.pid, self.agent_url()) {
            (Some(pid), Some(url)) if process::alive(pid) => {
                if self.status == SandboxStatus::Paused {
                    // A frozen executor cannot answer; the pid and the workspace match.
                    true
                } else {
                    let client = ExecutorClient::new(self.ctx.http.clone(), url.to_owned(), self.key());
                    // (Its key is this sandbox's: an answer is from its executor.)
                    self.answers_as_ours(&client, pid).await
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
                self.urls.clear();
                self.publish(SandboxStatus::Paused, Some("executor is gone; resume starts a new one on the same workspace".into())).await;
            }
            _ => self.provision_process(myself).await,
        }
    }

    /// Whether the live executor `pid` answers as this sandbox's. It is given a few seconds: a
    /// host busy with a restart (every sandbox reconciled at once) can leave one check
    /// unanswered, and an executor taken for dead is replaced, ending what the agent ran in it.
    async fn answers_as_ours(&self, client: &ExecutorClient, pid: u32) -> bool {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(6);
        loop {
            match client.health().await {
                Ok(h) => return h.ok && h.workspace == self.workspace(),
                Err(e) if tokio::time::Instant::now() >= deadline || !process::alive(pid) => {
                    tracing::info!(sandbox_id = %self.id, pid, error = %e, "the executor left running does not answer");
                    return false;
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
            }
        }
    }
}
