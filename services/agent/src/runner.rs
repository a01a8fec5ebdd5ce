//! The runner actor: supervises one [`ConversationActor`] per live conversation, routes
//! commands to them in order (or to the replica that runs the conversation), and takes over
//! runs whose runner died.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};

use halyard_platform::bus::{self, Delivery};
use halyard_platform::llm::LlmClient;
use halyard_platform::{Config, Shutdown};
use halyard_protocol::command::AgentCommand;
use halyard_protocol::{ConversationId, Envelope, subjects};

use crate::conversation::{ConvMsg, ConversationActor};
use crate::ctx::Ctx;
use crate::error::AgentError;
use crate::lease::{Leases, Watch};
use halyard_platform::route::{self, Settle};

/// Messages of the runner.
// Each message is moved once, into the mailbox; boxing the large variant would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub enum RunnerMsg {
    /// A command pulled from the stream: applied here, or passed to the runner of its run.
    Command(Envelope<AgentCommand>, Delivery),
    /// A command another runner passed on: applied here.
    Forwarded(Envelope<AgentCommand>, Settle),
    /// Look for runs whose lease died (or that this node held before it restarted).
    Sweep { first: bool },
}

pub struct Runner;

pub struct RunnerState {
    ctx: Arc<Ctx>,
    children: HashMap<ConversationId, ActorRef<ConvMsg>>,
    by_actor: HashMap<ActorId, ConversationId>,
    watch: Watch,
}

impl RunnerState {
    async fn child(&mut self, myself: &ActorRef<RunnerMsg>, id: ConversationId) -> Result<ActorRef<ConvMsg>, ActorProcessingErr> {
        if let Some(c) = self.children.get(&id) {
            return Ok(c.clone());
        }
        let (child, _) = Actor::spawn_linked(None, ConversationActor, (self.ctx.clone(), id), myself.get_cell()).await?;
        self.by_actor.insert(child.get_id(), id);
        self.children.insert(id, child.clone());
        metrics::gauge!("halyard_agent_conversations_in_memory").set(self.children.len() as f64);
        Ok(child)
    }

    fn forget(&mut self, actor: ActorId) {
        if let Some(id) = self.by_actor.remove(&actor) {
            self.children.remove(&id);
        }
        metrics::gauge!("halyard_agent_conversations_in_memory").set(self.children.len() as f64);
    }

    async fn send(&mut self, myself: &ActorRef<RunnerMsg>, id: ConversationId, msg: ConvMsg) -> Result<(), ActorProcessingErr> {
        let child = self.child(myself, id).await?;
        if let Err(ractor::MessagingErr::SendErr(msg)) = child.send_message(msg) {
            // The actor stopped (evicted) between lookup and send: start a fresh one.
            self.forget(child.get_id());
            let child = self.child(myself, id).await?;
            child.send_message(msg)?;
        }
        Ok(())
    }
}

impl Actor for Runner {
    type Msg = RunnerMsg;
    type State = RunnerState;
    type Arguments = Arc<Ctx>;

    async fn pre_start(&self, myself: ActorRef<Self::Msg>, ctx: Arc<Ctx>) -> Result<Self::State, ActorProcessingErr> {
        myself.send_message(RunnerMsg::Sweep { first: true })?;
        Ok(RunnerState { ctx, children: HashMap::new(), by_actor: HashMap::new(), watch: Watch::default() })
    }

    async fn handle(&self, myself: ActorRef<Self::Msg>, msg: Self::Msg, st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        match msg {
            RunnerMsg::Command(env, delivery) => {
                // The sandbox supervisor may publish on these subjects, and only what its egress
                // proxy records (a refused connection, traffic): anything else there is forged.
                let network = delivery.subject().ends_with(&format!(".{}", subjects::NETWORK_SUFFIX));
                let from_proxy = matches!(env.payload, AgentCommand::RecordNetworkBlocked { .. } | AgentCommand::RecordNetworkUsed { .. });
                if network != from_proxy {
                    let why = format!("{} does not belong on {}", env.kind, delivery.subject());
                    delivery.park(&why).await;
                    return Ok(());
                }
                let id = env.payload.conversation_id();
                // A live run elsewhere gets the command; the request is answered off this
                // actor, so a slow holder never stalls the other conversations.
                if let Some(node) = st.ctx.leases.holder(id).await.filter(|n| n != st.ctx.leases.node()) {
                    metrics::counter!("halyard_agent_commands_forwarded_total").increment(1);
                    let (nats, owner) = (st.ctx.nats.clone(), format!("runner {node}"));
                    tokio::spawn(async move { route::forward(nats, subjects::agent_node(&node), &owner, delivery).await });
                    return Ok(());
                }
                st.send(&myself, id, ConvMsg::Command(env, Settle::Stream(delivery))).await?;
            }
            RunnerMsg::Forwarded(env, settle) => {
                let id = env.payload.conversation_id();
                st.send(&myself, id, ConvMsg::Command(env, settle)).await?;
            }
            RunnerMsg::Sweep { first } => {
                let leases = st.ctx.leases.all().await;
                let ttl = Duration::from_millis(st.ctx.config.agent.lease_ttl_ms);
                for (id, revision) in st.watch.dead(leases, st.ctx.leases.node(), first, ttl) {
                    st.send(&myself, id, ConvMsg::TakeOver { revision }).await?;
                }
                myself.send_after(st.ctx.leases.sweep_every(), || RunnerMsg::Sweep { first: false });
            }
        }
        Ok(())
    }

    async fn post_stop(&self, myself: ActorRef<Self::Msg>, _st: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // Stopping (SIGTERM): every conversation actor stops too, and hands its live run over
        // to another runner on the way (ractor does not stop linked children by itself).
        myself.stop_children_and_wait(Some("shutting down".into()), Some(Duration::from_secs(5))).await;
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Conversation actors stop when idle or deleted, and are rebuilt from the log on their
        // next command; a failed one is logged and rebuilt the same way.
        match evt {
            SupervisionEvent::ActorTerminated(cell, _, _) => st.forget(cell.get_id()),
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::error!(error = %err, "conversation actor failed");
                st.forget(cell.get_id());
            }
            _ => {}
        }
        Ok(())
    }
}

/// Serves agent commands until `shutdown`.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), AgentError> {
    let js = jetstream::new(nats.clone());
    let http = halyard_platform::executor_client::http_client().build().map_err(|e| AgentError::Setup(e.to_string()))?;
    let llm = LlmClient::new(config.llm.clone()).map_err(|e| AgentError::Setup(e.to_string()))?;
    let leases = js.get_key_value(subjects::AGENT_LEASE_BUCKET).await.map_err(|e| AgentError::Setup(format!("lease bucket: {e}")))?;
    let node_id = config.node_id_or_random();
    let leases = Leases::new(js.clone(), leases, node_id.clone(), Duration::from_millis(config.agent.lease_ttl_ms.max(100)));
    let user_kv = js.get_key_value(subjects::USER_BUCKET).await.map_err(|e| AgentError::Setup(format!("user bucket: {e}")))?;
    let vault = Arc::new(halyard_platform::vault::Vault::new(&config.secret).map_err(|e| AgentError::Setup(e.to_string()))?);
    let ctx = Arc::new(Ctx { config, nats: nats.clone(), js: js.clone(), http, llm, leases, user_kv, vault, answers: Default::default() });
    let asks = tokio::spawn(crate::ask::serve(ctx.clone(), shutdown.clone()));
    let so_far = tokio::spawn(crate::run_loop::streaming::serve_so_far(ctx.clone(), shutdown.clone()));
    let mcp_tests = tokio::spawn(crate::ask::serve_mcp_tests(ctx.clone(), shutdown.clone()));
    let (runner, handle) = Actor::spawn(None, Runner, ctx).await.map_err(|e| AgentError::Setup(e.to_string()))?;
    // Commands other replicas pass to the runs held here.
    let forwarded = nats.subscribe(subjects::agent_node(&node_id)).await.map_err(|e| AgentError::Setup(format!("subscribe: {e}")))?;
    let passed_on = tokio::spawn({
        let runner = runner.clone();
        route::serve_forwarded::<AgentCommand>(nats, forwarded, move |env, settle| {
            runner.send_message(RunnerMsg::Forwarded(env, settle)).is_ok()
        })
    });
    let result = bus::consume_into_actor::<AgentCommand, _>(
        js,
        subjects::COMMANDS_STREAM,
        subjects::AGENT_CONSUMER,
        "agent",
        shutdown,
        runner.clone(),
        RunnerMsg::Command,
    )
    .await;
    passed_on.abort();
    runner.stop(None);
    let _ = handle.await;
    asks.abort();
    mcp_tests.abort();
    so_far.abort();
    result.map_err(AgentError::from)
}
