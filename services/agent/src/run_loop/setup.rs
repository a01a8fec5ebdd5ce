//! What a run sets up before its first step: the sandbox reached and `running` said
//! ([`Run::prepare`], whichever agent works), the owner's configuration read (profile, secrets,
//! MCP servers, skills), the git proxy that adds the owner's forge tokens outside the sandbox,
//! and the conversation's MCP connections.

use std::sync::Arc;

use halyard_platform::executor_client::ExecutorClient;
use halyard_protocol::event::{EventBody, EventSource, ExecutionStatus, SkillKind};
use serde_json::{Value, json};

use super::hooking::HookSubject;
use super::{McpConfigs, Owned, Run, RunOutcome, Setting, reach_patience, system_prompt};
use crate::history::MESSAGE_OVERHEAD;
use crate::tools::mcp::{McpHub, SignIns};
use crate::tools::{self, hooks::Moment};

/// A run set up, before an agent works: what [`Run::prepare`] gives whichever agent drives it.
pub(crate) struct Ready {
    pub(crate) exec: ExecutorClient,
    /// The repository's hooks file, read (`Err`: why it cannot be used).
    pub(super) hooks: Result<Option<crate::tools::hooks::Hooks>, String>,
    /// The owner's MCP servers (`None`: the owner's configuration could not be read).
    pub(crate) mcp_configs: Option<Result<McpConfigs, String>>,
    /// The run is a helper's (a conversation with a parent).
    pub(super) helper: bool,
    /// The conversation's agent (`None`: Halyard's own).
    pub(crate) agent: Option<String>,
}

impl Run {
    /// What every run does before an agent works, whichever agent it is: the sandbox reached
    /// (woken, if it hibernated), `running` appended, the owner's configuration read, and the
    /// workspace as the run finds it kept. `Err`: the run ended there.
    pub(crate) async fn prepare(&mut self) -> Result<Ready, RunOutcome> {
        // Three things at once, none waiting for another: the sandbox is reached (woken, if
        // it hibernated) and its hooks file read; the owner's configuration is read; `running`
        // is appended.
        let reaching = {
            let sandbox_id = self.log.lock().await.history.started.as_ref().map(|s| s.sandbox_id);
            let ctx = self.ctx.clone();
            tokio::spawn(async move {
                let Some(id) = sandbox_id else { return Err("the conversation has no sandbox".to_owned()) };
                // The hooks file's read is the executor's health check.
                let read_hooks = |exec: ExecutorClient| async move { exec.files(crate::tools::hooks::FILE).await };
                let (c, patience) = (&ctx, reach_patience(&ctx));
                let (exec, hooks) =
                    halyard_platform::executor_client::reach_probing(&c.nats, &c.js, &c.http, &c.config.secret, id, patience, read_hooks)
                        .await?;
                Ok((exec, crate::tools::hooks::from_answer(hooks)))
            })
        };
        let (running, owned) = tokio::join!(self.status(ExecutionStatus::Running, None), self.read_configuration());
        if !running {
            reaching.abort();
            return Err(RunOutcome::Failed);
        }
        // Nothing of the organization's (its secrets in a hook, its MCP servers) for an owner
        // who left it.
        if let Some(why) = self.org_membership_refusal().await {
            reaching.abort();
            return Err(self.fail("not_a_member", why).await);
        }
        let mcp_configs = match owned {
            Some(owned) => match self.configure(owned).await {
                Ok(mcp) => Some(mcp),
                Err(e) => {
                    reaching.abort();
                    return Err(self.fail("llm_profile_unavailable", format!("The conversation's LLM cannot be used: {e}")).await);
                }
            },
            None => None,
        };
        let (exec, hooks) = match reaching.await {
            Ok(Ok(reached)) => reached,
            Ok(Err(e)) => return Err(self.fail("sandbox_unavailable", format!("The sandbox is not available: {e}")).await),
            Err(e) => return Err(self.fail("sandbox_unavailable", format!("The sandbox is not available: {e}")).await),
        };
        // The workspace as the run finds it is a checkpoint too: before any action, it is how
        // the conversation started (seq 1); later, what the user changed between runs.
        let (at, helper, agent) = {
            let log = self.log.lock().await;
            let started = log.history.started.as_ref();
            let helper = started.is_some_and(|s| s.parent.is_some());
            (if log.history.acted { log.history.last_seq } else { 1 }, helper, started.and_then(|s| s.agent.clone()))
        };
        if !helper {
            self.checkpoint_behind(&exec, at).await;
        }
        Ok(Ready { exec, hooks, mcp_configs, helper, agent })
    }

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
    pub(crate) async fn mcp(
        &self,
        exec: &ExecutorClient,
        configs: Option<Result<McpConfigs, String>>,
        plugins: &crate::plugins::Installed,
    ) -> Option<Arc<McpHub>> {
        let Some(configs) = configs else { return Some(Arc::default()) };
        let (mut configs, org) = match configs {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the owner's MCP servers; the operator's are offered");
                (self.ctx.config.mcp.servers.clone(), Default::default())
            }
        };
        // The plugins' servers, like the owner's own (never trusted past the allowed classes).
        let theirs = plugins.mcp_servers(&configs);
        configs.extend(theirs);
        let mut trusted = self.ctx.config.mcp.servers.clone();
        let conversation = self.log.lock().await.conversation();
        // Halyard's own tools act on the owner's forges: offered to those who have one.
        if let Some((name, own)) = crate::tools::mcp::halyard_server(&self.ctx.config, conversation).filter(|_| self.has_forge) {
            configs.insert(name.clone(), own.clone());
            trusted.insert(name, own);
        }
        let started = self.log.lock().await.history.started.as_ref().map(|s| (s.owner.clone(), s.org.clone()));
        let sign_ins = match &started {
            Some((owner, in_org)) => {
                let org_servers = in_org.as_deref().map(|o| (o, &org.names));
                SignIns::read(&self.ctx, owner, org_servers, &configs, &trusted).await
            }
            None => SignIns::default(),
        };
        let mut slot = self.mcp.lock().await;
        if let Some(hub) = slot.as_ref().filter(|h| h.serves(&configs, &self.env, &org, &sign_ins)) {
            return Some(hub.clone());
        }
        let policy = (&trusted, self.ctx.config.mcp.allow.as_slice());
        let hub = Arc::new(McpHub::connect(configs, (&self.env, &org, &sign_ins), exec, policy).await);
        *slot = Some(hub.clone());
        drop(slot);
        let recorded = self.log.lock().await.history.mcp_servers.clone();
        let changed = recorded.as_ref() != Some(&hub.status) && !(recorded.is_none() && hub.status.is_empty());
        if changed && !self.append(EventSource::System, EventBody::McpServers { servers: hub.status.clone() }).await {
            return None;
        }
        // Each server that wants a sign-in says where, once per connection (the run goes on).
        for server in &hub.wants_sign_in {
            // An organization's server is signed in to on the Organizations page, by its admins.
            let in_org = started.as_ref().and_then(|(_, o)| o.as_deref()).filter(|_| org.names.contains(server));
            let sign_in_url = sign_in_page(&self.ctx.config, server, in_org);
            if !self.append(EventSource::System, EventBody::McpAuthRequired { server: server.clone(), sign_in_url }).await {
                return None;
            }
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

    /// The conversation's plugins, written into the sandbox and read; what cannot be used is
    /// said in an `agent_error` and the run goes on without it. `None`: the log failed.
    pub(crate) async fn plugins(&mut self, exec: &ExecutorClient, helper: bool) -> Option<crate::plugins::Installed> {
        let uses = self.log.lock().await.history.started.as_ref().map(|s| s.plugins.clone()).unwrap_or_default();
        if uses.is_empty() {
            return Some(Default::default());
        }
        let installed = crate::plugins::install(&self.ctx, exec, &uses, helper).await;
        for problem in &installed.problems {
            let body =
                EventBody::AgentError { code: "plugin_unavailable".into(), message: format!("{problem}; the run goes on without it.") };
            if !self.append(EventSource::System, body).await {
                return None;
            }
        }
        self.helper_agents = installed.agents();
        Some(installed)
    }

    /// Halyard's own agent, once the run is [`Ready`]: the plugins, the git proxy and MCP
    /// servers, the repository's hooks, then the steps.
    pub(crate) async fn builtin(&mut self, ready: Ready) -> RunOutcome {
        let Ready { exec, hooks, mcp_configs, helper, .. } = ready;
        // The plugins' files go into the sandbox first: their MCP servers run from there.
        let Some(plugins) = self.plugins(&exec, helper).await else { return RunOutcome::Failed };
        // Git in the sandbox reaches the conversation's repository through this runner while
        // the run lasts, which adds the owner's token upstream. The proxy and the MCP servers
        // are set up at once.
        let (_git_proxy, mcp) = tokio::join!(self.git_proxy(&exec), self.mcp(&exec, mcp_configs, &plugins));
        let Some(mcp) = mcp else { return RunOutcome::Failed };
        let (setting, pending) = {
            let log = self.log.lock().await;
            let h = &log.history;
            let skills = h.skills.clone();
            // (A set stored before a tool was renamed falls back to the default one.)
            let mut offered =
                self.tool_set.names().unwrap_or_else(|_| halyard_protocol::user::ToolSet::default().names().unwrap_or_default());
            // A named agent's helper has the tools its definition lists (of its parent's).
            if let Some(listed) = h.started.as_ref().and_then(|s| s.parent.as_ref()?.agent.as_ref()?.tools.as_ref()) {
                offered.retain(|t| crate::tools::hooks::tool_named(listed, t));
            }
            let mut tools = tools::specs(&offered, skills.iter().any(|s| s.kind == SkillKind::AgentSkill));
            // Helpers are offered while the deployment allows another level of them.
            let agent = &self.ctx.config.agent;
            if offered.contains(&"delegate") && h.depth() < agent.max_delegation_depth && agent.max_delegates > 0 {
                tools.push(tools::delegate::spec(agent.max_delegates, &plugins.agent_descriptions()));
            }
            tools.extend(mcp.specs());
            let checks = h.started.as_ref().and_then(|s| s.checks.clone()).filter(|c| !c.is_empty());
            if let Some(schema) = checks.as_ref().and_then(|c| c.result_schema.as_ref()) {
                tools::with_result(&mut tools, schema);
            }
            let counter = self.llm.primary().token_counter();
            let fixed_tokens =
                counter.count(&Value::Array(tools.clone()).to_string()) + counter.count(&system_prompt(&log)) + MESSAGE_OVERHEAD;
            let workspace = h.started.as_ref().map(|s| s.workspace.clone()).unwrap_or_default();
            let pending = h.pending.clone();
            let session = helper.then(|| log.conversation().to_string());
            let conversation = log.conversation();
            (
                Setting {
                    conversation,
                    workspace,
                    skills,
                    counter,
                    tools,
                    fixed_tokens,
                    mcp,
                    hooks: None,
                    session,
                    checkpoints: !helper,
                    checks,
                },
                pending,
            )
        };
        let mut setting = setting;
        let hooks = match hooks {
            Ok(hooks) => hooks,
            Err(why) => {
                let message = format!("The repository's hooks are not used this run: {why}.");
                if !self.append(EventSource::System, EventBody::AgentError { code: "hooks_invalid".into(), message }).await {
                    return RunOutcome::Failed;
                }
                None
            }
        };
        // Nothing of the file runs (its commands get the secrets) before the owner allowed it.
        setting.hooks = match self.admit_hooks(hooks, helper).await {
            Ok(hooks) => hooks,
            Err(outcome) => return outcome,
        };
        // The plugins' hooks need no consent but the install's, and run after the repository's.
        for (u, c, root) in &plugins.plugins {
            let Some(theirs) = &c.hooks else { continue };
            match crate::tools::hooks::Hooks::of_plugin(theirs, root) {
                Ok(theirs) => setting.hooks = Some(setting.hooks.take().unwrap_or_default().merged(theirs)),
                Err(why) => {
                    let message = format!("Plugin {}'s hooks are not used this run: {why}.", u.id());
                    if !self.append(EventSource::System, EventBody::AgentError { code: "hooks_invalid".into(), message }).await {
                        return RunOutcome::Failed;
                    }
                }
            }
        }
        if self.hooks_at(&exec, &setting, Moment::SessionStart, HookSubject::default(), json!({})).await.is_err() {
            return RunOutcome::Failed;
        }
        let outcome = self.work(&exec, &setting, pending).await;
        // A paused run's sandbox is frozen, and a run another runner took over is not over.
        if !matches!(outcome, RunOutcome::Paused | RunOutcome::LostLease) {
            let _ = self.hooks_at(&exec, &setting, Moment::SessionEnd, HookSubject::default(), json!({"outcome": outcome.as_str()})).await;
        }
        outcome
    }
}

/// The web app's page where MCP server `server` is signed in to: Settings for the owner's own,
/// the Organizations page for organization `org`'s.
fn sign_in_page(config: &halyard_platform::Config, server: &str, org: Option<&str>) -> String {
    use halyard_platform::net::percent_encode;
    let page = match org {
        Some(org) => format!("/orgs?org={}&", percent_encode(org)),
        None => "/settings?".to_owned(),
    };
    config.web_link(&format!("{page}mcp_sign_in={}#mcp-servers", percent_encode(server)))
}
