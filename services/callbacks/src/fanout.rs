//! Stage one: every event that matches a subscription becomes a delivery job.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use halyard_platform::bus::{self, Delivery};
use halyard_platform::{BusError, Shutdown};
use halyard_protocol::event::ConversationEvent;
use halyard_protocol::system::SystemRecord;
use halyard_protocol::webhook::DeliveryJob;
use halyard_protocol::{ConversationId, Envelope, UserId, subjects};
use tokio::sync::Mutex;

use crate::Ctx;

/// Most conversation owners remembered.
const OWNER_CACHE: usize = 10_000;

/// How long an event's fan-out is tried again in place (the bus is electing a leader, say)
/// before it is put back for later.
const IN_PLACE_PATIENCE: Duration = Duration::from_secs(60);

/// Consumes every event until `shutdown`.
pub async fn run(ctx: Arc<Ctx>, shutdown: Shutdown) -> Result<(), BusError> {
    let owners: Arc<Mutex<HashMap<ConversationId, Option<UserId>>>> = Arc::new(Mutex::new(HashMap::new()));
    let js = ctx.js.clone();
    bus::consume(js, subjects::EVENTS_STREAM, subjects::CALLBACK_FANOUT_CONSUMER, "callbacks", shutdown, |d| {
        let ctx = ctx.clone();
        let owners = owners.clone();
        async move {
            // Most events match nothing when no webhook is enabled: skip decoding them.
            if !any_enabled(&ctx) {
                d.ack().await;
                return;
            }
            let Some((env, d)) = d.decode::<ConversationEvent>().await else { return };
            // Tried again in place, not put back: a later event fanned out first would reach
            // receivers before this one. Events come in stream order, to one dispatcher at a
            // time (the consumer pins one client).
            let started = tokio::time::Instant::now();
            let mut delay = Duration::from_millis(100);
            loop {
                match fan_out(&ctx, &owners, env.payload.clone()).await {
                    Ok(()) => return d.ack().await,
                    Err(e) if e.is_retryable() && started.elapsed() < IN_PLACE_PATIENCE => {
                        tracing::warn!(error = %e, "fan-out failed; trying again");
                        d.in_progress().await;
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(2));
                    }
                    Err(e) => return retry(d, e).await,
                }
            }
        }
    })
    .await
}

fn any_enabled(ctx: &Ctx) -> bool {
    ctx.subs.read().map(|subs| subs.values().any(|s| s.enabled)).unwrap_or(true)
}

async fn retry(d: Delivery, e: BusError) {
    d.retry(Duration::from_millis(500), &e.to_string()).await
}

async fn owner_of(
    ctx: &Ctx,
    owners: &Mutex<HashMap<ConversationId, Option<UserId>>>,
    conv: ConversationId,
) -> Result<Option<UserId>, BusError> {
    if let Some(o) = owners.lock().await.get(&conv) {
        return Ok(o.clone());
    }
    let record = bus::last_record::<SystemRecord>(&ctx.js, subjects::SYSTEM_STREAM, &subjects::conversation_record(conv)).await?;
    let owner = match record {
        Some((_, Envelope { payload: SystemRecord::ConversationCreated { owner, .. }, .. })) => Some(owner),
        _ => None,
    };
    let mut cache = owners.lock().await;
    if cache.len() >= OWNER_CACHE {
        cache.clear();
    }
    cache.insert(conv, owner.clone());
    Ok(owner)
}

/// Called only while some webhook is enabled (see [`run`]).
async fn fan_out(ctx: &Ctx, owners: &Mutex<HashMap<ConversationId, Option<UserId>>>, ev: ConversationEvent) -> Result<(), BusError> {
    let kind = ev.body.kind();
    let Some(owner) = owner_of(ctx, owners, ev.conversation_id).await? else { return Ok(()) };
    let matching: Vec<String> = match ctx.subs.read() {
        Ok(subs) => subs.values().filter(|s| s.matches(&owner, ev.conversation_id, kind)).map(|s| s.id.clone()).collect(),
        Err(_) => Vec::new(),
    };
    if matching.is_empty() {
        return Ok(());
    }
    let body = halyard_protocol::event::to_json_string(&ev);
    // Send every job, then wait for all the acknowledgements together.
    let mut acks = Vec::with_capacity(matching.len());
    for webhook_id in matching {
        let delivery_id = crate::delivery_id(&webhook_id, ev.id);
        let job = DeliveryJob {
            delivery_id,
            webhook_id: webhook_id.clone(),
            owner: owner.clone(),
            conversation_id: ev.conversation_id,
            event_id: ev.id,
            seq: ev.seq,
            kind: kind.to_owned(),
            body: body.clone(),
            prior_attempts: 0,
            event_ms: ev.timestamp_ms,
        };
        let env = Envelope::with_id(delivery_id, job, halyard_platform::now_ms());
        acks.push(bus::publish_pending(&ctx.js, subjects::delivery_job(&webhook_id, ev.conversation_id), &env).await?);
    }
    for ack in acks {
        ack.await.map_err(|e| BusError::new(halyard_platform::BusErrorKind::Publish, e))?;
    }
    Ok(())
}
