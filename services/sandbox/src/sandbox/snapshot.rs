//! A sandbox and environment snapshots: keeping it after setup ([`SandboxState::take_snapshot`])
//! and starting from one (the restore step of provisioning, [`SandboxState::restore_process`]).

use halyard_protocol::environment::{SnapshotPlan, SnapshotStatus};

use crate::snapshots::{self, Source};

use super::SandboxState;

impl SandboxState {
    /// Keeps this sandbox as it is now as snapshot `plan`; the outcome is in the bucket.
    pub(super) async fn take_snapshot(&mut self, plan: &SnapshotPlan) {
        if self.made_snapshot.as_deref() == Some(plan.snapshot_id.as_str()) {
            return;
        }
        self.made_snapshot = Some(plan.snapshot_id.clone());
        let made = if self.docker {
            let (Some(container), Some(volume)) = (self.container.clone(), self.volume.clone()) else {
                tracing::warn!(sandbox_id = %self.id, "no container to snapshot");
                return;
            };
            let runtime = self.runtime.clone();
            let source = Source::Container { container: &container, volume: &volume, spec: &self.spec, runtime: runtime.as_ref() };
            snapshots::make(&self.ctx, source, plan).await
        } else {
            snapshots::make(&self.ctx, Source::Process(&self.layout), plan).await
        };
        if made.status != SnapshotStatus::Ready {
            tracing::info!(sandbox_id = %self.id, detail = ?made.detail, "environment snapshot not kept");
        }
    }

    /// A new process sandbox's directories from the snapshot it is to start from, if this host
    /// holds it; else it starts empty (and its record says no snapshot).
    pub(super) async fn restore_process(&mut self) {
        let Some(snap) = self.restore.take() else { return };
        if self.layout.workspace().exists() {
            return;
        }
        match snapshots::restore_process(&self.ctx, &snap, &self.layout).await {
            Ok(()) => {
                tracing::info!(sandbox_id = %self.id, snapshot = %snap.snapshot_id, "workspace restored from a snapshot");
                self.snapshot = Some(snap.snapshot_id);
            }
            Err(e) => {
                tracing::info!(sandbox_id = %self.id, snapshot = %snap.snapshot_id, error = %e, "starting without the snapshot");
                let _ = std::fs::remove_dir_all(self.layout.workspace());
                let _ = std::fs::remove_dir_all(self.layout.home());
            }
        }
    }

    /// A new container starts from the snapshot's image (with its user and variables) and an
    /// overlay on its workspace, if this host holds it: the workspace's directory.
    pub(super) async fn restore_image(&mut self) -> Option<std::path::PathBuf> {
        let snap = self.restore.take()?;
        let dctx = self.ctx.docker.as_ref()?;
        if snap.kind != "docker" || snap.node != self.ctx.config.node_id {
            tracing::info!(sandbox_id = %self.id, snapshot = %snap.snapshot_id, "the snapshot is another host's: starting without it");
            return None;
        }
        let workspace = snapshots::workspace_dir(&self.ctx.config.data_dir, &snap.snapshot_id);
        if !workspace.is_dir() || !crate::docker::image_exists(&dctx.engine.docker, &snap.location).await {
            tracing::info!(sandbox_id = %self.id, snapshot = %snap.snapshot_id, "the snapshot is gone: starting without it");
            return None;
        }
        self.started_from(snap);
        Some(workspace)
    }

    /// This container sandbox runs from snapshot `snap` (its image, user and variables).
    pub(super) fn started_from(&mut self, snap: halyard_protocol::environment::SnapshotRef) {
        let kept = snap.runtime.unwrap_or_default();
        self.runtime = Some(halyard_protocol::environment::Runtime { image: snap.location, ..kept });
        self.snapshot = Some(snap.snapshot_id);
    }
}
