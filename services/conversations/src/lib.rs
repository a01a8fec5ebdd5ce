//! The conversation manager: owns the lifecycle of conversations. It turns a start command
//! into a running conversation through the phases of a start task (sandbox, repository, setup
//! script, git hooks, skills, agent), each published as a record so the user can follow it;
//! and it deletes conversations with everything they own.
//!
//! Start tasks are durable: the command is acknowledged only once the task has reached READY or
//! ERROR. If this service dies half-way, the command is redelivered and the task resumes;
//! every step is idempotent (ids derived from the task id, a clone that already happened is
//! not repeated).

pub mod ctx;
pub mod devcontainer;
pub mod egress;
pub mod environment;
pub mod plugins;
pub mod setup;
pub mod shape;
pub mod start;
pub mod task;

use crate::ctx::Ctx;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use halyard_platform::bus::{self, Delivery};
use halyard_platform::derived::{Namespace, derived_uuid};
use halyard_platform::{BusError, Config, Shutdown};
use halyard_protocol::command::{AgentCommand, ConversationCommand, SandboxCommand};
use halyard_protocol::system::SystemRecord;
use halyard_protocol::{Envelope, subjects};

/// Why the conversation manager failed.
#[derive(Debug, thiserror::Error)]
pub enum ConversationError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("http client: {0}")]
    Http(String),
}

impl ConversationError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Bus(e) => e.is_retryable(),
            Self::Http(_) => false,
        }
    }
}

/// Serves conversation commands until `shutdown`.
pub async fn run(config: Arc<Config>, nats: async_nats::Client, shutdown: Shutdown) -> Result<(), ConversationError> {
    let js = jetstream::new(nats.clone());
    let http = halyard_platform::executor_client::http_client().build().map_err(|e| ConversationError::Http(e.to_string()))?;
    let skills = Arc::new(start::global_skills(config.skills_dir.as_deref()));
    let user_kv = js.get_key_value(subjects::USER_BUCKET).await.map_err(|e| ConversationError::Http(format!("user bucket: {e}")))?;
    let vault = Arc::new(halyard_platform::vault::Vault::new(&config.secret).map_err(|e| ConversationError::Http(e.to_string()))?);
    let snapshots = js
        .get_key_value(halyard_protocol::environment::SNAPSHOT_BUCKET)
        .await
        .map_err(|e| ConversationError::Http(format!("snapshot bucket: {e}")))?;
    let ctx = Ctx { config, nats, js: js.clone(), http, skills, user_kv, vault, snapshots };
    bus::consume(js, subjects::COMMANDS_STREAM, subjects::CONVERSATION_CONSUMER, "conversations", shutdown, |delivery| {
        let ctx = ctx.clone();
        async move {
            let Some((env, delivery)) = delivery.decode::<ConversationCommand>().await else { return };
            // Each command runs on its own task: a slow clone must not hold up other starts.
            // Its span carries the trace id that came with the command across the bus.
            use tracing::Instrument;
            let trace_id = env.trace.as_ref().and_then(halyard_platform::telemetry::trace_id).unwrap_or_default().to_owned();
            let span = tracing::info_span!("conversation_command", kind = %env.kind, %trace_id);
            halyard_platform::telemetry::continue_trace(&span, env.trace.as_ref());
            tokio::spawn(handle(ctx, env, delivery).instrument(span));
        }
    })
    .await?;
    Ok(())
}

async fn handle(ctx: Ctx, env: Envelope<ConversationCommand>, delivery: Delivery) {
    let trace = env.trace.clone();
    match env.payload {
        ConversationCommand::Start { .. } => {
            // Keep the command ours while the task runs (clones and setup scripts can be slow).
            let work = start::run_task(&ctx, env);
            tokio::pin!(work);
            // Well within the consumer's ack wait, which the deployment may shorten.
            let every =
                Duration::from_millis(ctx.config.command_ack_wait_ms / 3).clamp(Duration::from_millis(300), Duration::from_secs(10));
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tokio::select! {
                    outcome = &mut work => {
                        match outcome {
                            Ok(()) => delivery.ack().await,
                            Err(e) => delivery.retry(Duration::from_secs(2), &e.to_string()).await,
                        }
                        return;
                    }
                    _ = tick.tick() => delivery.in_progress().await,
                }
            }
        }
        ConversationCommand::SetVisibility { conversation_id, visibility } => {
            let record = SystemRecord::ConversationVisibility { conversation_id, visibility };
            match bus::send(&ctx.js, subjects::conversation_visibility(conversation_id), record, trace).await {
                Ok(_) => delivery.ack().await,
                Err(e) => delivery.retry(Duration::from_secs(1), &e.to_string()).await,
            }
        }
        ConversationCommand::SetTags { conversation_id, tags } => {
            let result = set_tags(&ctx, conversation_id, tags, trace).await;
            match result {
                Ok(()) => delivery.ack().await,
                Err(e) => delivery.retry(Duration::from_secs(1), &e.to_string()).await,
            }
        }
        ConversationCommand::Delete { conversation_id, owner } => {
            let result = async {
                let record =
                    bus::last_record::<SystemRecord>(&ctx.js, subjects::SYSTEM_STREAM, &subjects::conversation_record(conversation_id))
                        .await?;
                let sandbox = match record {
                    // A helper's sandbox is its parent's, which goes with the parent.
                    Some((_, Envelope { payload: SystemRecord::ConversationCreated { request: Some(r), .. }, .. }))
                        if r.parent.is_some() =>
                    {
                        None
                    }
                    Some((_, Envelope { payload: SystemRecord::ConversationCreated { sandbox_id, .. }, .. })) => Some(sandbox_id),
                    _ => None,
                };
                // Its helpers go with it (each deletes its own in turn), before its log does; so
                // do the images its tools made (screenshots, plots), which the log names.
                let (helpers, screenshots) = owned_by_log(&ctx, conversation_id).await?;
                halyard_platform::images::delete(&ctx.js, conversation_id, &screenshots).await?;
                for helper in helpers {
                    let delete = ConversationCommand::Delete { conversation_id: helper, owner: owner.clone() };
                    let parts: [&[u8]; 3] = [b"halyard-delete-helper", env.id.0.as_bytes(), helper.as_bytes()];
                    let id = derived_uuid(Namespace::Hashed(&parts));
                    let mut env = Envelope::with_id(halyard_protocol::CommandId(id), delete, halyard_platform::now_ms());
                    env.trace = trace.clone();
                    bus::publish(&ctx.js, subjects::conversation_command(helper), &env).await?;
                }
                bus::send(&ctx.js, subjects::agent_command(conversation_id), AgentCommand::Delete { conversation_id }, trace.clone())
                    .await?;
                if let Some(sandbox_id) = sandbox {
                    bus::send(&ctx.js, subjects::sandbox_command(sandbox_id), SandboxCommand::Delete { sandbox_id }, trace.clone()).await?;
                }
                bus::send(
                    &ctx.js,
                    subjects::conversation_record(conversation_id),
                    SystemRecord::ConversationDeleted { conversation_id, owner },
                    trace.clone(),
                )
                .await?;
                // The log goes with the conversation.
                if let Ok(stream) = ctx.js.get_stream_no_info(subjects::EVENTS_STREAM).await {
                    let _ = stream.purge().filter(subjects::conversation_events(conversation_id)).await;
                }
                Ok::<_, BusError>(())
            }
            .await;
            match result {
                Ok(()) => delivery.ack().await,
                Err(e) => delivery.retry(Duration::from_secs(1), &e.to_string()).await,
            }
        }
    }
}

/// What a conversation's log names that goes with it: the helpers its agent started (its
/// `sub_conversations_started` events) and the images its tools made (its observations'
/// screenshots and plots).
async fn owned_by_log(
    ctx: &Ctx,
    conversation_id: halyard_protocol::ConversationId,
) -> Result<(Vec<halyard_protocol::ConversationId>, Vec<String>), BusError> {
    use halyard_protocol::event::EventBody;
    let (mut helpers, mut screenshots) = (Vec::new(), Vec::new());
    for e in bus::read_events(&ctx.js, conversation_id, 0).await? {
        match e.body {
            EventBody::SubConversationsStarted { children, .. } => helpers.extend(children.into_iter().map(|c| c.conversation_id)),
            EventBody::Observation { screenshot_id, image_ids, .. } => screenshots.extend(screenshot_id.into_iter().chain(image_ids)),
            _ => {}
        }
    }
    Ok((helpers, screenshots))
}

/// Applies a change of tags to what the conversation has (its last tags record, else its
/// start's) and records the result whole. A deleted conversation keeps no tags; one not created
/// yet is tried again.
async fn set_tags(
    ctx: &Ctx,
    conversation_id: halyard_protocol::ConversationId,
    patch: std::collections::BTreeMap<String, Option<String>>,
    trace: Option<halyard_protocol::TraceContext>,
) -> Result<(), BusError> {
    let created =
        bus::last_record::<SystemRecord>(&ctx.js, subjects::SYSTEM_STREAM, &subjects::conversation_record(conversation_id)).await?;
    let start = match created {
        Some((_, Envelope { payload: SystemRecord::ConversationCreated { request, .. }, .. })) => {
            request.map(|r| r.tags).unwrap_or_default()
        }
        Some((_, Envelope { payload: SystemRecord::ConversationDeleted { .. }, .. })) => return Ok(()),
        // Not created yet: its start is still on its way (the gateway saw the conversation).
        _ => return Err(BusError::new(halyard_platform::BusErrorKind::Read, "the conversation is not created yet")),
    };
    let last = bus::last_record::<SystemRecord>(&ctx.js, subjects::SYSTEM_STREAM, &subjects::conversation_tags(conversation_id)).await?;
    let mut tags = match last {
        Some((_, Envelope { payload: SystemRecord::ConversationTags { tags, .. }, .. })) => tags,
        _ => start,
    };
    for (k, v) in patch {
        match v {
            Some(v) => tags.insert(k, v),
            None => tags.remove(&k),
        };
    }
    bus::send(&ctx.js, subjects::conversation_tags(conversation_id), SystemRecord::ConversationTags { conversation_id, tags }, trace)
        .await
        .map(drop)
}
