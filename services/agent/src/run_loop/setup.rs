//! What a run sets up before its first step: the owner's configuration read (profile, secrets,
//! MCP servers, skills), the git proxy that adds the owner's forge tokens outside the sandbox,
//! and the conversation's MCP connections.

use crate::tools::mcp::McpHub;
use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::event::{EventBody, EventSource};
use std::sync::Arc;

use super::{McpConfigs, Owned, Run};

impl Run {
    /// Serves the sandbox's git proxy for the conversation's repository when one of the owner's
    /// git providers serves it, or one of its organization's (`None`: nothing to serve, or it
    /// could not be; git then fails upstream with the provider's refusal, which the agent sees).
    pub(crate) async fn git_proxy(&self, exec: &ExecutorClient) -> Option<halyard_platform::git_proxy::Serving> {
        let (owner, org, url, conversation) = {
            let log = self.log.lock().await;
            let started = log.history.started.as_ref()?;
            (started.owner.clone(), started.org.clone(), started.repository.as_ref()?.url.clone(), log.conversation())
        };
        let ctx = &self.ctx;
        let remote = match halyard_platform::git_proxy::remote_for(&ctx.user_kv, &ctx.vault, &owner, org.as_deref(), &url).await {
            Ok(remote) => remote?,
            Err(e) => {
                tracing::warn!(%conversation, error = %e, "no git proxy for the run");
                return None;
            }
        };
        let provider = remote.provider.clone();
        match halyard_platform::git_proxy::serve(exec, vec![remote], &ctx.config.gateway.git_api_allow).await {
            Ok(serving) => {
                tracing::info!(%conversation, user = %owner, %provider, "git proxy serving the conversation's repository");
                Some(serving)
            }
            Err(e) => {
                tracing::warn!(%conversation, error = %e, "no git proxy for the run");
                None
            }
        }
    }

    /// The conversation's MCP servers, connected: the hub of an earlier run while it still
    /// serves the owner's configuration and secrets, else a new one, recorded in an
    /// `mcp_servers` event when what it offers changed. `None` if the log failed.
    pub(crate) async fn mcp(&self, exec: &ExecutorClient, configs: Option<Result<McpConfigs, String>>) -> Option<Arc<McpHub>> {
        let Some(configs) = configs else { return Some(Arc::default()) };
        let (mut configs, org) = match configs {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the owner's MCP servers; the operator's are offered");
                (self.ctx.config.mcp.servers.clone(), Default::default())
            }
        };
        let mut trusted = self.ctx.config.mcp.servers.clone();
        let conversation = self.log.lock().await.conversation();
        // Halyard's own tools act on the owner's forges: offered to those who have one.
        if let Some((name, own)) = crate::tools::mcp::halyard_server(&self.ctx.config, conversation).filter(|_| self.has_forge) {
            configs.insert(name.clone(), own.clone());
            trusted.insert(name, own);
        }
        let mut slot = self.mcp.lock().await;
        if let Some(hub) = slot.as_ref().filter(|h| h.serves(&configs, &self.env, &org)) {
            return Some(hub.clone());
        }
        let policy = (&trusted, self.ctx.config.mcp.allow.as_slice());
        let hub = Arc::new(McpHub::connect(configs, &self.env, &org, exec, policy).await);
        *slot = Some(hub.clone());
        drop(slot);
        let recorded = self.log.lock().await.history.mcp_servers.clone();
        let changed = recorded.as_ref() != Some(&hub.status) && !(recorded.is_none() && hub.status.is_empty());
        if changed && !self.append(EventSource::System, EventBody::McpServers { servers: hub.status.clone() }).await {
            return None;
        }
        Some(hub)
    }

    /// Reads what the run takes from the owner's configuration: the profile's LLM, the
    /// secrets, the settings and the MCP servers, in one request to the owner's bucket. `None`
    /// for a conversation without an owner.
    pub(super) async fn read_configuration(&self) -> Option<Owned> {
        let (owner, org, profile) = {
            let log = self.log.lock().await;
            let started = log.history.started.as_ref()?;
            (started.owner.clone(), started.org.clone(), log.history.llm_profile.clone())
        };
        let snapshot = crate::user::Snapshot::read(&self.ctx, &owner, profile.as_deref(), org.as_deref()).await;
        let read = |e: &String| format!("your configuration could not be read: {e}");
        Some(match snapshot {
            Ok(s) => Owned {
                profile: s.profile(&self.ctx, profile.as_deref()),
                secrets: s.secrets(&self.ctx),
                settings: s.settings(),
                mcp: s.mcp(&self.ctx),
            },
            // (The deployment's model needs nothing of the owner's.)
            Err(e) => Owned {
                profile: if profile.is_some() { Err(read(&e)) } else { Ok(crate::user::default_profile(&self.ctx)) },
                secrets: Err(read(&e)),
                settings: Err(read(&e)),
                mcp: Err(read(&e)),
            },
        })
    }

    /// Takes in what [`Self::read_configuration`] read: the profile's LLM, the secrets (into the
    /// shell's environment and the log's mask) and the settings; the MCP servers are handed
    /// back, to be connected once the sandbox is reached. `Err` is the message of a run that
    /// cannot call its LLM.
    pub(super) async fn configure(&mut self, owned: Owned) -> Result<Result<McpConfigs, String>, String> {
        let Owned { profile, secrets, settings, mcp } = owned;
        let profile = profile?;
        (self.llm, self.tool_set, self.vision) = (profile.llm, profile.tools, profile.vision);
        // Unreadable secrets keep the mask the log has: the shell may still hold values it
        // was given before.
        match secrets {
            Ok(mut secrets) => {
                // Every secret is masked; the shell gets those the conversation was given.
                let mut log = self.log.lock().await;
                log.set_redactor(secrets.redactor);
                if let Some(chosen) = &log.history.secrets {
                    secrets.env.retain(|name, _| chosen.contains(name));
                }
                drop(log);
                self.env = secrets.env;
                self.has_forge = secrets.has_forge;
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the owner's secrets; the shell gets none this run"),
        }
        match settings {
            Ok(settings) => {
                if let Some(n) = settings.max_iterations.filter(|n| *n > 0) {
                    self.max_iterations = self.max_iterations.min(n);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the owner's settings; the deployment's apply"),
        }
        Ok(mcp)
    }
}
