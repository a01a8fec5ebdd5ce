//! Moving a container sandbox onto a dev container's image ([`SandboxState::use_image`]): the
//! image is prepared ([`crate::devimage`]), then the container is replaced by one of the new
//! image on the same workspace volume, so the clone (and anything else in the workspace) stays.

use halyard_protocol::environment::ImagePlan;
use halyard_protocol::system::{REFUSED_PREFIX, SandboxStatus};

use super::SandboxState;

impl SandboxState {
    /// Moves this sandbox onto `plan`'s image; its record says when it runs there, or (with its
    /// status as it was) why it could not.
    pub(super) async fn use_image(&mut self, plan: &ImagePlan) {
        let status = self.status;
        let refuse = |why: String| Some(format!("{REFUSED_PREFIX}{why}"));
        let (Some(spec), Some(container)) = (self.ctx.config.sandbox.spec(&self.spec), self.container.clone()) else {
            return self.publish(status, refuse("only a running container sandbox can take a dev container's image".into())).await;
        };
        if status != SandboxStatus::Running {
            return self.publish(status, refuse(format!("the sandbox is {}, not running", status.as_str()))).await;
        }
        let before = self.runtime.as_ref().and_then(|r| r.user.clone()).unwrap_or_else(|| spec.user.clone());
        let prepared = match crate::devimage::prepare(&self.ctx, &spec, &container, plan).await {
            // The workspace becomes the new user's (the clone was made as the spec's).
            Ok(runtime) => match (&runtime.user, &self.volume) {
                (Some(user), Some(volume)) if *user != before => {
                    let script = format!("chown -R {user} '{}'", spec.working_dir);
                    let target = vec![crate::helper::mount(volume, &spec.working_dir, false, false)];
                    match crate::helper::run(&self.ctx, &runtime.image, "chown", script, target, Default::default()).await {
                        Ok(helper) => {
                            if let Some(dctx) = &self.ctx.docker {
                                let _ = dctx.engine.remove(&helper.id).await;
                            }
                            Ok(runtime)
                        }
                        Err(e) => Err(format!("giving the workspace to {user}: {e}")),
                    }
                }
                _ => Ok(runtime),
            },
            Err(e) => Err(e),
        };
        match prepared {
            Ok(runtime) => {
                tracing::info!(sandbox_id = %self.id, image = %runtime.image, "moving the sandbox onto its dev container's image");
                self.runtime = Some(runtime);
                if let Some(dctx) = self.ctx.docker.clone() {
                    self.untrack_container();
                    if let Err(e) = dctx.engine.remove(&container).await {
                        return self.publish(status, refuse(format!("cannot replace the container: {e}"))).await;
                    }
                }
                self.container = None;
                // The volume stays: the new container starts on the same workspace.
                self.provision_container(false).await;
            }
            Err(why) => {
                tracing::info!(sandbox_id = %self.id, %why, "no dev container image");
                self.publish(status, refuse(why)).await;
            }
        }
    }
}
