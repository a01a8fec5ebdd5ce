//! Setting what a start's environment changes of a running sandbox ([`SandboxState::set_shape`]):
//! a container moves onto another network class and takes lower limits without a restart (a
//! process sandbox moves between its spec's class and an outbound policy's); the ports it
//! forwards become apps of its record. The checks and engine calls are
//! [`crate::shape`].

use halyard_protocol::environment::Shape;
use halyard_protocol::system::{REFUSED_PREFIX, SandboxStatus};

use super::SandboxState;

impl SandboxState {
    /// Gives this running sandbox `shape`; its record says when it has it, or (its status as it
    /// was) why not.
    pub(super) async fn set_shape(&mut self, shape: Shape) {
        let status = self.status;
        let refuse = |why: String| Some(format!("{REFUSED_PREFIX}{why}"));
        let Some(spec) = self.ctx.config.sandbox.spec(&self.spec) else {
            return self.publish(status, refuse(format!("no sandbox spec named `{}`", self.spec))).await;
        };
        if status != SandboxStatus::Running {
            return self.publish(status, refuse(format!("the sandbox is {}, not running", status.as_str()))).await;
        }
        let own_network = self.ctx.isolation.as_ref().is_some_and(|i| i.own_network());
        if let Err(why) = crate::shape::check(&spec, &shape, self.docker, own_network) {
            return self.publish(status, refuse(why)).await;
        }
        if shape.egress_rules.is_some() && self.ctx.egress.is_none() {
            let why = "outbound policies by domain need the egress proxy, which did not start on this host (see its log)";
            return self.publish(status, refuse(why.into())).await;
        }
        if !self.docker && !shape.ports.is_empty() && self.ctx.config.sandbox.process_network == "host" {
            let why =
                "a process sandbox on the host's network (HALYARD_PROCESS_NETWORK=host) forwards no ports: its loopback is the host's";
            return self.publish(status, refuse(why.into())).await;
        }
        let (Some(from), Some(to)) = (self.class_with(self.shape.as_ref()), self.class_with(Some(&shape))) else {
            return self.publish(status, refuse(format!("spec `{}` has an unknown egress", spec.name))).await;
        };
        let engine = self.ctx.docker.clone().zip(self.container.clone());
        if from != to {
            tracing::info!(sandbox_id = %self.id, from = from.as_str(), to = to.as_str(), "moving the sandbox to another network class");
            let moved = match &engine {
                Some((dctx, container)) => dctx.engine.move_network(container, from, to).await.map_err(|e| e.to_string()),
                None if !self.docker => self.move_process_network(from, to).await,
                None => Ok(()),
            };
            if let Err(e) = moved {
                return self.publish(status, refuse(format!("cannot move the sandbox onto network class `{}`: {e}", to.as_str()))).await;
            }
        }
        if let Some((dctx, container)) = engine {
            let was = self.shape.clone().unwrap_or_default();
            if was.resources != shape.resources {
                let mut limited = spec.clone();
                crate::shape::shaped(&mut limited, &shape, |e| self.ctx.config.sandbox.bounded_egress(e));
                if let Err(e) = dctx.engine.limit(&container, &limited).await {
                    return self.publish(status, refuse(format!("cannot set the sandbox's limits: {e}"))).await;
                }
            }
            // Its published ports change with its network.
            match dctx.engine.inspect(&container).await {
                Ok((_, urls)) if !urls.is_empty() => self.urls = urls,
                Ok(_) => return self.publish(status, refuse("the sandbox exposes no URL on its new network".into())).await,
                Err(e) => return self.publish(status, refuse(format!("cannot read the sandbox's URLs: {e}"))).await,
            }
        }
        self.shape = (shape != Shape::default()).then_some(shape);
        self.publish(status, None).await;
    }
}
