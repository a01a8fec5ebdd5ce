//! Provisioning a sandbox: a process sandbox's directories, confinement and executor, or a
//! container (from the warm pool when one is ready, else made and started), until its executor
//! answers.

use crate::container::start_container;
use crate::docker::{self, ContainerPlan, Found};
use crate::process;
use halyard_protocol::system::{AGENT_SERVER, ExposedUrl, SandboxStatus};
use ractor::ActorRef;
use std::time::Duration;

use super::{SandboxMsg, SandboxState};

impl SandboxState {
    /// Starts an executor on this sandbox's workspace (which may hold files already).
    pub(super) async fn provision(&mut self, myself: &ActorRef<SandboxMsg>, may_use_pool: bool) {
        if self.docker { self.provision_container(may_use_pool).await } else { self.provision_process(myself).await }
    }

    pub(super) async fn provision_process(&mut self, myself: &ActorRef<SandboxMsg>) {
        let recorded = self.pid.take();
        if let Some(pid) = recorded {
            process::kill_group(pid);
        }
        // One that no record names: a crash cut its start short after it was spawned.
        if let Some(pid) = process::end_leftover(&self.layout, recorded) {
            tracing::info!(sandbox_id = %self.id, pid, "ended the executor a start cut short by a crash left running");
        }
        if let Some(why) = self.ctx.isolation_refusal(&self.owner) {
            tracing::warn!(sandbox_id = %self.id, %why, "process sandbox refused");
            self.publish(SandboxStatus::Error, Some(format!("start failed: {why}"))).await;
            return;
        }
        self.publish(SandboxStatus::Starting, None).await;
        self.restore_process().await;
        let cfg = &self.ctx.config.sandbox;
        let confinement = match self.ctx.isolation.as_ref().map(|i| i.prepare(&self.layout, &cfg.executor_command)) {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                tracing::error!(sandbox_id = %self.id, error = %e, "cannot prepare the sandbox's directories");
                self.publish(SandboxStatus::Error, Some(format!("start failed: {e}"))).await;
                return;
            }
            None => Default::default(),
        };
        // The agent's apps: in a network of their own, the same ports as in a container;
        // else two free ports of the host.
        let own_network = confinement.own_network;
        let apps: Vec<(String, u16)> = if own_network {
            docker::WORKER_PORTS.iter().map(|(name, port)| ((*name).to_owned(), *port)).collect()
        } else {
            process::free_ports(cfg.publish_host, 2).into_iter().enumerate().map(|(i, p)| (format!("WORKER_{}", i + 1), p)).collect()
        };
        let mut env = cfg.env.clone();
        for (name, port) in &apps {
            env.insert(format!("{name}_PORT"), port.to_string());
        }
        let mut spec = cfg.spec(&self.spec).unwrap_or_default();
        // Its environment's outbound policy (set while it ran) holds when it starts again.
        if let Some(shape) = &self.shape {
            crate::shape::shaped(&mut spec, shape, |e| cfg.bounded_egress(e));
        }
        let egress = match crate::egress::Egress::parse(&spec.egress) {
            Ok(e) => e,
            Err(e) => {
                self.publish(SandboxStatus::Error, Some(format!("start failed: spec {}: {e}", spec.name))).await;
                return;
            }
        };
        let limits = crate::limits::Limits {
            memory_bytes: spec.memory_mb.max(16) << 20,
            pids: u64::try_from(spec.pids_limit).ok().filter(|p| *p > 0).unwrap_or(512),
            cpus: spec.cpus,
        };
        let group = match self.ctx.cgroups.as_ref().map(|c| c.create(self.id, limits)) {
            Some(Ok(g)) => g,
            Some(Err(e)) => {
                // Never run a sandbox without its limits.
                tracing::error!(sandbox_id = %self.id, error = %e, "cannot limit the sandbox's resources");
                self.publish(SandboxStatus::Error, Some(format!("start failed: cannot limit the sandbox's resources: {e}"))).await;
                return;
            }
            None => Default::default(),
        };
        let key = self.key();
        let started = process::start(
            process::Launch {
                command: &cfg.executor_command,
                host: cfg.publish_host,
                confinement: &confinement,
                env: &env,
                layout: &self.layout,
                key: &key,
                output_cap: cfg.output_cap_bytes,
                browser_idle_secs: cfg.browser_idle_secs,
                vscode_idle_secs: cfg.vscode_idle_secs,
                disk_mb: spec.disk_mb,
                apps: &apps,
                egress,
                group: &group,
                timeout: Duration::from_secs(cfg.start_timeout_secs),
            },
            &self.ctx.http,
        )
        .await;
        match started {
            Ok(started) => {
                self.generation += 1;
                let generation = self.generation;
                self.pid = Some(started.pid);
                self.urls = vec![ExposedUrl { name: AGENT_SERVER.into(), url: started.url }];
                self.urls.extend(started.apps.into_iter().map(|(name, url)| ExposedUrl { name, url }));
                let me = myself.clone();
                let mut child = started.child;
                tokio::spawn(async move {
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

    /// A warm-pool container if one is ready and this sandbox has no workspace yet, else a
    /// container of its own on its volume: the stopped one if it still exists, else a new one.
    pub(super) async fn provision_container(&mut self, may_use_pool: bool) {
        let Some(dctx) = self.ctx.docker.clone() else { return };
        if may_use_pool && self.container.is_none() && self.volume.is_none() {
            // A start from a snapshot takes one of the snapshot's pool, any other the spec's.
            let key = match &self.restore {
                Some(s) => halyard_protocol::environment::pool_key(&s.snapshot_id),
                None => self.spec.clone(),
            };
            if let Some(entry) = dctx.pool.take(&key) {
                match crate::warm::hand_over(&self.ctx, &entry, self.id).await {
                    Ok(()) => {
                        self.container = Some(entry.container.clone());
                        self.volume = Some(entry.volume.clone());
                        self.urls = entry.urls.clone();
                        self.from_pool = true;
                        if let Some(snap) = self.restore.take() {
                            self.started_from(snap);
                        }
                        self.track_container();
                        tracing::info!(sandbox_id = %self.id, container = %entry.container, "sandbox taken from the warm pool");
                        self.publish(SandboxStatus::Running, None).await;
                        // The name is for people (`docker ps`); the record holds the id.
                        let engine = dctx.engine.clone();
                        let name = engine.naming.name(&self.id.to_string());
                        tokio::spawn(async move {
                            let options = bollard::query_parameters::RenameContainerOptions { name };
                            let _ = engine.docker.rename_container(&entry.container, options).await;
                        });
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(sandbox_id = %self.id, error = %e, "warm-pool sandbox unusable; starting a new one");
                        let _ = dctx.engine.remove(&entry.container).await;
                        let _ = dctx.engine.remove_volume(&entry.volume).await;
                    }
                }
            }
        }
        self.publish(SandboxStatus::Starting, None).await;
        let Some(mut spec) = self.ctx.config.sandbox.spec(&self.spec) else {
            return self.publish(SandboxStatus::Error, Some(format!("start failed: no sandbox spec named `{}`", self.spec))).await;
        };
        let Some(runtime) = dctx.images.get(&self.spec) else {
            return self.publish(SandboxStatus::Error, Some(format!("start failed: spec `{}` has no runtime image", self.spec))).await;
        };
        // A new container of a sandbox that has no workspace yet may start from a snapshot.
        let fresh = self.container.is_none() && self.volume.is_none();
        // (A snapshot's workspace, which the new volume is an overlay on.)
        let lower = if fresh { self.restore_image().await } else { None };
        // A dev container's or a snapshot's image, with its user and variables.
        let image = match &self.runtime {
            Some(r) => {
                docker::run_as(&mut spec, r);
                r.image.clone()
            }
            None => runtime.clone(),
        };
        // Its environment's network class and limits.
        if let Some(shape) = &self.shape {
            crate::shape::shaped(&mut spec, shape, |e| self.ctx.config.sandbox.bounded_egress(e));
        }
        let naming = &dctx.engine.naming;
        let id = self.id.to_string();
        let volume = self.volume.clone().unwrap_or_else(|| naming.volume(&id));
        // Keep a stopped container (its writable layer may hold installed tools); a running or
        // paused one at this point is stale (unreachable executor): replace it.
        let existing = match &self.container {
            Some(c) => match dctx.engine.inspect(c).await {
                Ok((Found::Stopped { .. }, _)) => Some(c.clone()),
                Ok((Found::Gone, _)) => None,
                _ => {
                    let _ = dctx.engine.remove(c).await;
                    None
                }
            },
            None => None,
        };
        self.untrack_container();
        self.container = None;
        let mut labels =
            docker::labels(naming, &self.spec, &id, Some(&self.owner.0), self.conversation.map(|c| c.to_string()).as_deref(), false);
        if let (Some(_), Some(snapshot)) = (&lower, &self.snapshot) {
            // The snapshot's files stay while a volume is an overlay on them.
            labels.insert(crate::snapshots::image::LABEL_SNAPSHOT.to_owned(), snapshot.clone());
        }
        let plan = ContainerPlan {
            name: naming.name(&id),
            volume: volume.clone(),
            image: &image,
            spec: &spec,
            labels,
            output_cap: self.ctx.config.sandbox.output_cap_bytes,
            browser_idle_secs: self.ctx.config.sandbox.browser_idle_secs,
            vscode_idle_secs: self.ctx.config.sandbox.vscode_idle_secs,
            lower,
        };
        let timeout = Duration::from_secs(self.ctx.config.sandbox.start_timeout_secs);
        self.volume = Some(volume);
        match start_container(&self.ctx, &plan, existing, &self.key(), timeout).await {
            Ok((container, urls)) => {
                self.container = Some(container);
                self.urls = urls;
                self.oom = false;
                self.track_container();
                tracing::info!(sandbox_id = %self.id, container = ?self.container, "sandbox running");
                self.publish(SandboxStatus::Running, None).await;
            }
            Err((container, e)) => {
                tracing::error!(sandbox_id = %self.id, error = %e, "sandbox start failed");
                self.container = container;
                self.track_container();
                self.publish(SandboxStatus::Error, Some(format!("start failed: {e}"))).await;
            }
        }
    }
}
