//! Running batches ([`halyard_protocol::batch`]): while a batch runs, its next waiting items are
//! started as fewer than `concurrency` of them run; an item ends when its conversation's run
//! ends (`finished`, `error`, `stuck`, `idle`: what [`crate::summaries`] reads off the event log)
//! or its start fails ([`crate::start_failures`]). The batch's entry is the truth: every change is
//! a compare-and-set on it, and the batches are looked at again whenever one changes and every
//! few seconds, so a restart of this service (or another replica) carries on where it stood.
//!
//! An item's start is derived from the batch, the item and its round: sent again (the service
//! died between sending it and recording it), it is the same command, start task and
//! conversation, which the bus and the conversation manager take once.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt;
use halyard_platform::derived::{Namespace, derived_uuid};
use halyard_platform::{BusError, BusErrorKind, Shutdown, bus};
use halyard_protocol::batch::{BATCH_PREFIX, Batch, BatchStatus, batch_conversation_key, batch_key};
use halyard_protocol::command::ConversationCommand;
use halyard_protocol::queue::{QueueTerms, StartClass};
use halyard_protocol::user::UserSettings;
use halyard_protocol::{CommandId, ConversationId, Envelope, TaskId, subjects};
use serde::{Deserialize, Serialize};

use crate::ctx::Ctx;
use crate::decision::read;

/// How often every running batch is looked at, whatever changed.
const SWEEP: Duration = Duration::from_secs(5);

/// What a batch's conversation key holds: which run (an item's attempt) of which batch, in
/// which round, and whether its start was sent.
#[derive(Debug, Serialize, Deserialize)]
pub struct ItemOf {
    pub batch: String,
    /// The run's index in the batch's `runs`.
    pub index: usize,
    pub round: u32,
    /// The start was published. The key is written before (the run's end must find it, however
    /// soon it comes) and marked after, so a service that died in between sends it again.
    #[serde(default)]
    pub sent: bool,
}

/// Serves until `shutdown`: advances the batches whenever one changes, and every [`SWEEP`].
pub async fn run(ctx: Ctx, mut shutdown: Shutdown) {
    let mut watch = match ctx.bucket.watch(format!("{BATCH_PREFIX}>")).await {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "cannot follow the batches; looking at them every few seconds only");
            None
        }
    };
    loop {
        let changed = async {
            match watch.as_mut() {
                Some(w) => match w.next().await {
                    Some(Ok(entry)) if entry.operation == kv::Operation::Put => Some(entry.key),
                    Some(_) => None,
                    None => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.wait() => return,
            key = changed => {
                if let Some(id) = key.and_then(|k: String| k.strip_prefix(BATCH_PREFIX).map(str::to_owned)) {
                    log(&id, advance(&ctx, &id).await);
                }
            }
            _ = tokio::time::sleep(SWEEP) => sweep(&ctx).await,
        }
    }
}

fn log(id: &str, result: Result<(), BusError>) {
    if let Err(e) = result {
        tracing::warn!(batch = id, error = %e, "cannot advance the batch; it is looked at again shortly");
    }
}

/// Advances every running batch.
async fn sweep(ctx: &Ctx) {
    let keys = match ctx.bucket.keys().await {
        Ok(keys) => keys,
        Err(e) => return tracing::warn!(error = %e, "cannot list the batches"),
    };
    let ids: Vec<String> =
        keys.filter_map(|k| async move { k.ok()?.strip_prefix(BATCH_PREFIX).map(str::to_owned) }).collect::<Vec<_>>().await;
    for id in ids {
        log(&id, advance(ctx, &id).await);
    }
}

/// Changes batch `id` with `f` (which says whether it changed anything), compare-and-set,
/// trying again over a newer entry: the batch as it then is.
async fn modify(ctx: &Ctx, id: &str, mut f: impl FnMut(&mut Batch) -> bool) -> Result<Option<Batch>, BusError> {
    let key = batch_key(id);
    for _ in 0..20 {
        let Some(entry) = ctx.bucket.entry(&key).await.map_err(|e| BusError::new(BusErrorKind::Read, e))? else { return Ok(None) };
        if entry.operation != kv::Operation::Put {
            return Ok(None);
        }
        let Ok(mut batch) = serde_json::from_slice::<Batch>(&entry.value) else {
            tracing::warn!(batch = id, "a batch entry that is not a batch; left alone");
            return Ok(None);
        };
        if !f(&mut batch) {
            return Ok(Some(batch));
        }
        let bytes = serde_json::to_vec(&batch).map_err(|e| BusError::new(BusErrorKind::Codec, e))?;
        match ctx.bucket.update(&key, bytes.into(), entry.revision).await {
            Ok(_) => return Ok(Some(batch)),
            // Someone changed it meanwhile: again, over theirs.
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => continue,
            Err(e) => return Err(BusError::new(BusErrorKind::Publish, e)),
        }
    }
    Err(BusError::new(BusErrorKind::Conflict, format!("batch {id} kept changing")))
}

/// Starts batch `id`'s next waiting items while fewer than its `concurrency` run, and marks it
/// done once every item ended.
pub async fn advance(ctx: &Ctx, id: &str) -> Result<(), BusError> {
    // Which items to start is decided, and recorded, before they are sent: a second replica
    // deciding at once loses the compare-and-set and decides again over this one's.
    let mut chosen = Vec::new();
    let batch = modify(ctx, id, |b| {
        chosen.clear();
        if b.status == BatchStatus::Running && b.all_ended() && !b.runs.is_empty() {
            b.status = BatchStatus::Done;
            return true;
        }
        if b.status != BatchStatus::Running {
            return false;
        }
        let room = (b.concurrency as usize).saturating_sub(b.running());
        for (i, r) in b.runs.iter_mut().enumerate().filter(|(_, r)| r.waiting()).take(room) {
            r.conversation_id = Some(item_ids(&b.id, i, r.round).2);
            r.started_ms = Some(halyard_platform::now_ms());
            chosen.push(i);
        }
        !chosen.is_empty()
    });
    // (`chosen` is what the successful compare-and-set recorded.)
    let Some(batch) = batch.await? else { return Ok(()) };
    // Sent for every item that runs and has not ended, not only the chosen: one recorded by a
    // replica that died before sending it is sent now (the same command: taken once).
    for (i, r) in batch.runs.iter().enumerate().filter(|(_, r)| r.running()) {
        if chosen.contains(&i) || !started(ctx, &batch, i, r.round).await? {
            start(ctx, &batch, i, r.round).await?;
        }
    }
    Ok(())
}

/// The ids of item `index`'s run `round`: its command's, its start task's and its
/// conversation's, the same however often it is sent.
pub fn item_ids(batch: &str, index: usize, round: u32) -> (uuid::Uuid, TaskId, ConversationId) {
    let (index, round) = (index.to_string(), round.to_string());
    let id = |what: &str| {
        derived_uuid(Namespace::Hashed(&[b"halyard-batch", what.as_bytes(), batch.as_bytes(), index.as_bytes(), round.as_bytes()]))
    };
    (id("command"), TaskId(id("task")), ConversationId(id("conversation")))
}

/// Whether item `index`'s run `round` was sent (its conversation's key says so once it is).
async fn started(ctx: &Ctx, batch: &Batch, index: usize, round: u32) -> Result<bool, BusError> {
    let conv = item_ids(&batch.id, index, round).2;
    Ok(read::<ItemOf>(&ctx.bucket, &batch_conversation_key(conv)).await?.is_some_and(|of| of.sent))
}

/// Sends the start of run `index` (an item's attempt) in round `round`, with its owner's
/// defaults as a start from the API would have them, and remembers which run its conversation
/// is.
async fn start(ctx: &Ctx, batch: &Batch, index: usize, round: u32) -> Result<(), BusError> {
    let (command, task_id, conversation_id) = item_ids(&batch.id, index, round);
    let remember = |sent: bool| async move {
        let of = ItemOf { batch: batch.id.clone(), index, round, sent };
        let bytes = serde_json::to_vec(&of).map_err(|e| BusError::new(BusErrorKind::Codec, e))?;
        ctx.bucket.put(batch_conversation_key(conversation_id), bytes.into()).await.map_err(|e| BusError::new(BusErrorKind::Publish, e))
    };
    remember(false).await?;
    let (at, attempt) = batch.item_of(index);
    let item = &batch.items[at];
    let settings: UserSettings = read(&ctx.user_kv, &subjects::user_settings_key(&batch.owner)).await?.unwrap_or_default();
    let mut tags = BTreeMap::from([("batch".to_owned(), batch.id.clone()), ("batch_item".to_owned(), at.to_string())]);
    if batch.attempts > 1 {
        tags.insert("batch_attempt".to_owned(), attempt.to_string());
    }
    let now = halyard_platform::now_ms();
    let cmd = ConversationCommand::Start {
        task_id,
        conversation_id,
        owner: batch.owner.clone(),
        message: Some(item.message.clone()),
        repository: item.repository.clone(),
        title: Some(title(batch, at, attempt)),
        created_ms: now,
        spec: item.sandbox_spec.clone().or(settings.sandbox_spec).filter(|s| ctx.config.sandbox.spec(s).is_some()),
        budget: batch.budget.clone().or(settings.budget),
        confirmation_policy: None,
        llm_profile: item.llm_profile.clone().or_else(|| batch.llm_profile.clone()).or(settings.llm_profile),
        agent: None,
        secrets: None,
        fork: None,
        parent: None,
        tags,
        org: None,
        visibility: Default::default(),
        // Behind the owner's interactive starts and automations when sandboxes are short.
        queue: QueueTerms { class: StartClass::Batch, asked_us: Some(halyard_platform::now_us()), ..Default::default() },
        environment: item.environment.clone(),
        checks: batch.checks.clone(),
        // Resolved at its start, like any conversation's.
        plugins: None,
    };
    let env = Envelope::with_id(CommandId(command), cmd, now).correlated(task_id.to_string());
    bus::publish(&ctx.js, subjects::conversation_command(conversation_id), &env).await?;
    remember(true).await?;
    tracing::info!(batch = %batch.id, item = index, round, %conversation_id, "batch item started");
    Ok(())
}

/// An item's conversation's title: the item's, else the batch's name and the item's number;
/// with the attempt when it has several.
fn title(batch: &Batch, at: usize, attempt: u32) -> String {
    let item = &batch.items[at];
    let base = item.title.clone().unwrap_or_else(|| format!("{} #{at}", batch.name.as_deref().unwrap_or("batch")));
    if batch.attempts > 1 { format!("{base} (attempt {})", attempt + 1) } else { base }
}

/// The run of conversation `conv` ended (`how`: its status, or `start_failed`): if it is an
/// item of a batch, the item is ended (unless it was sent to run again since) and the batch
/// advances.
pub async fn ended(ctx: &Ctx, conv: ConversationId, how: &str) -> Result<(), BusError> {
    let Some(of) = read::<ItemOf>(&ctx.bucket, &batch_conversation_key(conv)).await? else { return Ok(()) };
    let changed = modify(ctx, &of.batch, |b| match b.runs.get_mut(of.index) {
        Some(r) if r.round == of.round && r.conversation_id == Some(conv) && r.ended.as_deref() != Some(how) => {
            r.ended = Some(how.to_owned());
            r.ended_ms = Some(halyard_platform::now_ms());
            true
        }
        _ => false,
    })
    .await?;
    if changed.is_some() {
        advance(ctx, &of.batch).await?;
    }
    Ok(())
}
