//! Stage one: every event that matches a subscription becomes a delivery job. While no
//! subscription is enabled (for `HALYARD_WEBHOOK_FANOUT_IDLE_SECS`, or since start-up) the
//! fan-out's consumer is filtered to no events at all ([`follow`]), so the server delivers it
//! nothing and an agent's step pays for no fan-out.

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

use crate::ctx::Ctx;

/// Most conversations remembered (owners, how far they are fanned out).
const CACHE: usize = 10_000;

/// How long an event's fan-out is tried again in place (the bus is electing a leader, say)
/// before it is put back for later.
const IN_PLACE_PATIENCE: Duration = Duration::from_secs(60);

/// How far back a gap is filled: within the deliveries stream's duplicate window (120 s), so a
/// job published again for an event that already has one is dropped by the server as a
/// duplicate, never sent twice.
const GAP_WINDOW_MS: i64 = 110_000;

/// What one dispatcher remembers of the conversations it fans out.
#[derive(Default)]
pub struct Memory {
    owners: HashMap<ConversationId, Option<UserId>>,
    /// Per conversation, the seq up to which every matching event's jobs are known to be stored:
    /// this process stored them itself, in order, or filled the gap before them.
    stored_up_to: HashMap<ConversationId, u64>,
    /// When each conversation last had an event here.
    used: HashMap<ConversationId, std::time::Instant>,
}

impl Memory {
    /// Forgets the conversations without an event for `idle` (`HALYARD_IDLE_EVICT_SECS`): an
    /// idle conversation holds nothing here. Safe at any age: its next event then fills the
    /// gap before it from the log's last [`GAP_WINDOW_MS`], and a job stored again within the
    /// deliveries stream's duplicate window is dropped by the server.
    pub fn forget_idle(&mut self, idle: Duration) {
        self.used.retain(|_, at| at.elapsed() < idle);
        let used = &self.used;
        self.owners.retain(|id, _| used.contains_key(id));
        self.stored_up_to.retain(|id, _| used.contains_key(id));
        metrics::gauge!("halyard_webhook_conversations_in_memory").set(self.used.len() as f64);
    }

    fn bounded(&mut self) {
        if self.owners.len() >= CACHE {
            self.owners.clear();
        }
        if self.stored_up_to.len() >= CACHE {
            self.stored_up_to.clear();
        }
        if self.used.len() >= CACHE {
            self.used.clear();
        }
    }
}

/// Consumes every event until `shutdown`.
pub async fn run(ctx: Arc<Ctx>, shutdown: Shutdown) -> Result<(), BusError> {
    let memory: Arc<Mutex<Memory>> = Arc::default();
    let sweeper = tokio::spawn({
        let memory = memory.clone();
        let idle = Duration::from_secs(ctx.config.agent.idle_evict_secs.max(1));
        async move {
            let mut every = tokio::time::interval((idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(30)));
            loop {
                every.tick().await;
                memory.lock().await.forget_idle(idle);
            }
        }
    });
    let js = ctx.js.clone();
    let result = bus::consume(js, subjects::EVENTS_STREAM, subjects::CALLBACK_FANOUT_CONSUMER, "callbacks", shutdown, |d| {
        let ctx = ctx.clone();
        let memory = memory.clone();
        async move {
            // Most events match nothing when no webhook is enabled: skip decoding them.
            if !any_enabled(&ctx) {
                d.ack().await;
                return;
            }
            let Some((env, d)) = d.decode::<ConversationEvent>().await else { return };
            // Tried again in place, not put back, so this dispatcher keeps stream order. Order
            // across dispatchers is [`fan_out`]'s: the consumer pins one client at a time, but
            // after a NATS node's loss or a dispatcher's death the pin moves while the old
            // holder may still be working through events it was handed.
            let started = tokio::time::Instant::now();
            let mut delay = Duration::from_millis(100);
            loop {
                match fan_out(&ctx, &memory, env.payload.clone()).await {
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
    .await;
    sweeper.abort();
    result
}

/// Sets the fan-out consumer's filter to every event (`all`) or to none
/// ([`subjects::NO_EVENTS`]), if it is not so already; whether the filter is now as asked.
/// Events appended while it took none are never fanned out: they came before every
/// subscription now enabled, as a subscription gets the events from when the dispatcher learns
/// of it. Called by the [`crate::Dispatcher`] only, one look at a time, when its wish changes
/// and every [`FOLLOW_EVERY`] (which also undoes a process's start-up that declared the
/// consumer again as `nats/` has it).
pub async fn follow(ctx: &Ctx, all: bool) -> bool {
    let want = if all { subjects::ALL_EVENTS } else { subjects::NO_EVENTS };
    match set_filter(ctx, want).await {
        Ok(changed) => {
            if changed {
                tracing::info!(filter = want, "the fan-out's consumer follows the subscriptions");
            }
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot set the fan-out's filter; it stays as it was");
            false
        }
    }
}

/// Sets the fan-out consumer's filter to `want` unless it is so; whether it changed it.
async fn set_filter(ctx: &Ctx, want: &str) -> Result<bool, String> {
    use async_nats::jetstream::consumer::Config;
    let stream = ctx.js.get_stream_no_info(subjects::EVENTS_STREAM).await.map_err(|e| e.to_string())?;
    let mut consumer = stream.get_consumer::<Config>(subjects::CALLBACK_FANOUT_CONSUMER).await.map_err(|e| e.to_string())?;
    let mut config = consumer.info().await.map_err(|e| e.to_string())?.config.clone();
    if config.filter_subject == want && config.filter_subjects.is_empty() {
        return Ok(false);
    }
    config.filter_subject = want.to_owned();
    config.filter_subjects.clear();
    stream.update_consumer(config).await.map_err(|e| e.to_string())?;
    Ok(true)
}

/// How often [`follow`] looks whether the consumer's filter is still what it should be.
pub const FOLLOW_EVERY: Duration = Duration::from_secs(30);

pub fn any_enabled(ctx: &Ctx) -> bool {
    ctx.subs.read().map(|subs| subs.values().any(|s| s.enabled)).unwrap_or(true)
}

async fn retry(d: Delivery, e: BusError) {
    d.retry(Duration::from_millis(500), &e.to_string()).await
}

async fn owner_of(ctx: &Ctx, memory: &Mutex<Memory>, conv: ConversationId) -> Result<Option<UserId>, BusError> {
    if let Some(o) = memory.lock().await.owners.get(&conv) {
        return Ok(o.clone());
    }
    let record = bus::last_record::<SystemRecord>(&ctx.js, subjects::SYSTEM_STREAM, &subjects::conversation_record(conv)).await?;
    let owner = match record {
        Some((_, Envelope { payload: SystemRecord::ConversationCreated { owner, .. }, .. })) => Some(owner),
        _ => None,
    };
    let mut memory = memory.lock().await;
    memory.bounded();
    memory.owners.insert(conv, owner.clone());
    Ok(owner)
}

/// The subscriptions `ev` goes to.
fn matching(ctx: &Ctx, owner: &UserId, ev: &ConversationEvent) -> Vec<String> {
    match ctx.subs.read() {
        Ok(subs) => subs.values().filter(|s| s.matches(owner, ev.conversation_id, ev.body.kind())).map(|s| s.id.clone()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Stores the delivery jobs of `ev`, after those of every earlier event of its conversation.
///
/// Why the gap check: each subscription's jobs of a conversation must sit in the deliveries
/// stream in seq order, since a lane delivers them in stream order. One dispatcher handles its
/// events in order, but when the consumer's pin moves (the holder's NATS node died, or it
/// stopped pulling for a while), the new holder may get event 15 while the old one is still
/// working on 13 and 14. So an event whose predecessor this process has not stored itself
/// first stores the jobs of the conversation's recent events before it; whichever dispatcher
/// publishes a job second is dropped as a duplicate (a job's id is derived from webhook and
/// event), and every job follows its predecessors.
pub async fn fan_out(ctx: &Ctx, memory: &Mutex<Memory>, ev: ConversationEvent) -> Result<(), BusError> {
    let conv = ev.conversation_id;
    {
        let mut memory = memory.lock().await;
        memory.used.insert(conv, std::time::Instant::now());
        metrics::gauge!("halyard_webhook_conversations_in_memory").set(memory.used.len() as f64);
    }
    let Some(owner) = owner_of(ctx, memory, conv).await? else { return Ok(()) };
    let to = matching(ctx, &owner, &ev);
    let known = memory.lock().await.stored_up_to.get(&conv).copied();
    let follows = ev.seq <= 1 || known == Some(ev.seq - 1);
    if to.is_empty() {
        // Nothing to store; what is known only moves on if nothing is missing before.
        if follows {
            memory.lock().await.stored_up_to.insert(conv, ev.seq);
        }
        return Ok(());
    }
    if !follows {
        fill_gap(ctx, &owner, conv, known.unwrap_or(0), ev.seq).await?;
    }
    store_jobs(ctx, &owner, &ev, to).await?;
    let mut memory = memory.lock().await;
    memory.bounded();
    memory.stored_up_to.insert(conv, ev.seq);
    Ok(())
}

/// Stores the jobs of the conversation's events with `after < seq < before` that were appended
/// in the last [`GAP_WINDOW_MS`], in seq order (older ones were fanned out long ago).
async fn fill_gap(ctx: &Ctx, owner: &UserId, conv: ConversationId, after: u64, before: u64) -> Result<(), BusError> {
    const BATCH: usize = 256;
    let filter = subjects::conversation_events(conv);
    let mut batch =
        bus::direct_batch_since(&ctx.js, subjects::EVENTS_STREAM, &filter, halyard_platform::now_ms() - GAP_WINDOW_MS, BATCH).await?;
    let mut filled = 0usize;
    loop {
        let got = batch.len();
        let mut next = None;
        for (stream_seq, payload) in batch {
            next = Some(stream_seq + 1);
            let ev = halyard_protocol::decode::<ConversationEvent>(&payload)?.payload;
            if ev.seq >= before {
                tracing::debug!(conversation = %conv, after, before, filled, "gap before an event filled");
                return Ok(());
            }
            if ev.seq > after {
                let to = matching(ctx, owner, &ev);
                if !to.is_empty() {
                    store_jobs(ctx, owner, &ev, to).await?;
                    filled += 1;
                }
            }
        }
        match next {
            Some(from) if got >= BATCH => batch = bus::direct_batch(&ctx.js, subjects::EVENTS_STREAM, &filter, from, BATCH).await?,
            _ => return Ok(()),
        }
    }
}

/// Publishes one job per subscription in `to`, then waits for every acknowledgement.
async fn store_jobs(ctx: &Ctx, owner: &UserId, ev: &ConversationEvent, to: Vec<String>) -> Result<(), BusError> {
    let body = halyard_protocol::event::to_json_string(ev);
    let mut acks = Vec::with_capacity(to.len());
    for webhook_id in to {
        let delivery_id = crate::ctx::delivery_id(&webhook_id, ev.id);
        let job = DeliveryJob {
            delivery_id,
            webhook_id: webhook_id.clone(),
            owner: owner.clone(),
            conversation_id: ev.conversation_id,
            event_id: ev.id,
            seq: ev.seq,
            kind: ev.body.kind().to_owned(),
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
