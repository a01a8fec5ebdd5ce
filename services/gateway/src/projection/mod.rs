//! Projects the bus into the read models: every conversation event and lifecycle record, in
//! stream order, from where the last run stopped. Each batch of messages is written to sled
//! with the stream cursors, all or nothing ([`store::batch`]), then its events are fanned out to live WebSocket
//! subscribers. An event is in its JetStream log before the projection sees it, so a
//! subscriber that reads the log after subscribing misses nothing.
//!
//! It is the only writer of conversation views and start tasks: the rows a start shows before
//! its records arrive are written here too ([`starts`]), under the lock a batch holds, so the
//! projection's cached copies never go stale.
//!
//! Events are folded here; system records (start tasks, lifecycle, sandboxes) in [`records`].

mod records;
pub mod starts;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_nats::jetstream::{self, consumer};
use futures::{FutureExt, StreamExt};
use tokio::sync::broadcast;

use halyard_platform::{BusError, BusErrorKind, Shutdown, bus};
use halyard_protocol::event::{ConversationEvent, EventBody};
use halyard_protocol::system::{StartTaskStatus, SystemRecord};
use halyard_protocol::{ConversationId, SandboxId, TaskId, subjects};

use crate::read_model::events::LiveEvent;
use crate::read_model::layout;
use crate::read_model::store::{self, ConversationView, SandboxView, Store, rfc3339};

/// Most messages folded into one batch of writes ([`store::batch`]).
const MAX_BATCH: usize = 1024;

/// How long the projection hears nothing before it checks that the streams have nothing new
/// for it. An ordered consumer can stall after a NATS node dies (the server answers its pulls
/// with timeouts while the stream grows); a stalled one is made again from the cursor.
const STALL_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Most conversation views kept in memory between batches. The projection is the only writer
/// of views, so its copies never go stale; it saves reading and parsing a view from sled for
/// every batch that touches its conversation. Past the limit the cache starts over.
const VIEW_CACHE: usize = 10_000;

/// The projection's copies of conversation views (`None`: no view, or deleted).
type Views = HashMap<ConversationId, Option<ConversationView>>;

/// Live state shared by the projection and the API: per-conversation broadcast channels, the
/// start tasks in flight per user (for the starting limit), and the cached views, locked by a
/// batch from its first message to its commit.
#[derive(Default)]
pub struct Live {
    channels: Mutex<HashMap<ConversationId, broadcast::Sender<LiveEvent>>>,
    pub starting: Mutex<HashMap<String, HashSet<TaskId>>>,
    views: tokio::sync::Mutex<Views>,
}

impl Live {
    pub fn subscribe(&self, id: ConversationId) -> broadcast::Receiver<LiveEvent> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels.entry(id).or_insert_with(|| broadcast::channel(1024).0).subscribe()
    }

    fn publish(&self, id: ConversationId, event: LiveEvent) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = channels.get(&id) {
            if tx.send(event).is_err() {
                // Nobody listens any more.
                channels.remove(&id);
            }
        }
    }

    /// Drops the channels nobody listens to any more (a client that left a quiet
    /// conversation leaves one behind, as nothing was published to notice).
    fn forget_unwatched(&self) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels.retain(|_, tx| tx.receiver_count() > 0);
        metrics::gauge!("halyard_gateway_live_channels").set(channels.len() as f64);
    }

    fn task_settled(&self, owner: &str, task: TaskId) {
        let mut starting = self.starting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = starting.get_mut(owner) {
            set.remove(&task);
        }
    }
}

/// Views touched by the batch being built (None: deleted).
struct Pending<'a> {
    store: &'a Store,
    batch: crate::read_model::batch::Batch,
    /// Conversation views as of this batch (the cache, carried from batch to batch).
    views: &'a mut Views,
    /// The views this batch changed (or may have: every mutable access counts).
    dirty: HashSet<ConversationId>,
    sandboxes: HashMap<SandboxId, Option<SandboxView>>,
    live: Vec<(ConversationId, LiveEvent)>,
    settled: Vec<(String, TaskId)>,
    tomb_checked: HashMap<ConversationId, bool>,
    /// Usage rows this batch changed, by key.
    usage: HashMap<Vec<u8>, store::UsageRow>,
    /// What conversations reached through their egress proxies, as this batch changed it.
    network: HashMap<ConversationId, crate::read_model::rows::NetworkRow>,
}

fn tomb_key(id: ConversationId) -> Vec<u8> {
    let mut k = vec![b'd'];
    k.extend_from_slice(id.as_bytes());
    k
}

impl Pending<'_> {
    /// `user`'s usage row for the day of `time_ms` and `model`, as of this batch.
    fn usage(&mut self, user: &str, time_ms: i64, model: &str) -> &mut store::UsageRow {
        self.usage_at(layout::usage_key(user, time_ms, model))
    }

    /// `f` applied to `user`'s row (and its copy for the deployment's reports), and to their
    /// row in `org` if the conversation is in one.
    fn use_up(&mut self, user: &str, org: Option<&str>, time_ms: i64, model: &str, f: impl Fn(&mut store::UsageRow)) {
        f(self.usage(user, time_ms, model));
        f(self.usage_at(layout::all_usage_key(user, time_ms, model)));
        if let Some(org) = org {
            f(self.usage_at(layout::org_usage_key(org, user, time_ms, model)));
        }
    }

    /// The usage row at `key`, as of this batch.
    fn usage_at(&mut self, key: Vec<u8>) -> &mut store::UsageRow {
        let store = self.store;
        self.usage
            .entry(key)
            .or_insert_with_key(|k| store.tree().get(k).ok().flatten().and_then(|v| serde_json::from_slice(&v).ok()).unwrap_or_default())
    }

    /// Conversation `id`'s network row, as of this batch.
    fn network_of(&mut self, id: ConversationId) -> &mut crate::read_model::rows::NetworkRow {
        let store = self.store;
        self.network.entry(id).or_insert_with(|| store.network(id).ok().flatten().unwrap_or_default())
    }

    fn view(&mut self, id: ConversationId) -> Option<&mut ConversationView> {
        if !self.views.contains_key(&id) {
            let v = self.store.conversation(id).ok().flatten();
            self.views.insert(id, v);
        }
        self.dirty.insert(id);
        self.views.get_mut(&id).and_then(Option::as_mut)
    }

    /// Whether the conversation has a view, or a tombstone.
    fn knows(&mut self, id: ConversationId) -> bool {
        self.deleted(id) || self.view(id).is_some()
    }

    /// Deleted conversations leave a tombstone, so late events and records stay out. Looked
    /// up once per conversation per batch.
    fn deleted(&mut self, id: ConversationId) -> bool {
        if let Some(known) = self.tomb_checked.get(&id) {
            return *known;
        }
        let dead = self.store.tree().contains_key(tomb_key(id)).unwrap_or(false);
        self.tomb_checked.insert(id, dead);
        dead
    }

    /// An event, stored at `stream_seq` of the events stream.
    fn event(&mut self, ev: ConversationEvent, stream_seq: u64) {
        let id = ev.conversation_id;
        if self.deleted(id) {
            return;
        }
        if ev.seq % layout::LOG_INDEX_STRIDE == 1 {
            self.batch.insert(layout::log_index_key(id, ev.seq), &stream_seq.to_be_bytes()[..]);
        }
        let live = LiveEvent::of(&ev);
        let now = rfc3339(ev.timestamp_ms);
        // What the event adds to its owner's usage, taken in once the view is done with.
        let mut usage_calls = Vec::new();
        if let Some(view) = self.view(id) {
            view.last_event_seq = view.last_event_seq.max(ev.seq);
            view.updated_at = now;
            match &ev.body {
                EventBody::ExecutionStatus { status, reason } => {
                    if *status == halyard_protocol::event::ExecutionStatus::Running {
                        view.agent_error = None;
                    }
                    view.execution_status = Some(status.as_str().to_owned());
                    view.execution_reason.clone_from(reason);
                }
                EventBody::AgentError { code, message } => view.agent_error = Some(format!("{message} ({code})")),
                EventBody::ConversationStarted { confirmation_policy: policy, forked_from, parent, .. } => {
                    view.confirmation_policy = policy.as_str().to_owned();
                    if let Some(p) = parent {
                        view.parent_conversation_id = Some(p.conversation_id.to_string());
                    }
                    // (Its creation record says so too; this one cannot arrive after the copies.)
                    if let Some(f) = forked_from {
                        view.start_request.get_or_insert_default().fork.get_or_insert_with(|| f.clone());
                    }
                }
                EventBody::ConfirmationPolicy { policy } => view.confirmation_policy = policy.as_str().to_owned(),
                EventBody::Result { result } => view.result = Some(result.clone()),
                EventBody::Verification { attempt, passed, score, .. } => store::Verdict::add(&mut view.verdict, *attempt, *passed, *score),
                EventBody::TaskList { items } => view.tasks.clone_from(items),
                EventBody::Observation { url: Some(url), screenshot_id, .. } => {
                    view.browser = Some(store::BrowserView { url: url.clone(), screenshot_id: screenshot_id.clone() });
                }
                EventBody::SubConversationsStarted { children, .. } => {
                    for c in children {
                        let id = c.conversation_id.to_string();
                        if !view.sub_conversation_ids.contains(&id) {
                            view.sub_conversation_ids.push(id);
                        }
                    }
                }
                // Once each, should a copy (a fork's) name it again.
                EventBody::PullRequestOpened { number, url, title } if !view.pull_requests.iter().any(|p| p.url == *url) => {
                    view.pull_requests.push(store::PullRequest { number: *number, url: url.clone(), title: title.clone() });
                }
                EventBody::LlmCall { model, prompt_tokens, completion_tokens, cached_tokens, latency_ms, cost_usd, .. } => {
                    // A fork's copies of its source's calls cost nothing again.
                    let copied = view.start_request.as_ref().and_then(|r| r.fork.as_ref()).is_some_and(|f| ev.seq <= f.at_seq);
                    if !copied {
                        let org = view.start_request.as_ref().and_then(|r| r.org.clone());
                        usage_calls.push((
                            view.owner.clone(),
                            org,
                            model.clone(),
                            (*prompt_tokens, *completion_tokens, *cached_tokens),
                            cost_usd.unwrap_or(0.0),
                        ));
                    }
                    let m = &mut view.metrics;
                    m.llm_calls += 1;
                    m.prompt_tokens += prompt_tokens;
                    m.completion_tokens += completion_tokens;
                    m.cached_tokens += cached_tokens;
                    m.latency_ms += latency_ms;
                    m.cost_usd += cost_usd.unwrap_or(0.0);
                    let per = m.by_model.entry(model.clone()).or_default();
                    per.llm_calls += 1;
                    per.prompt_tokens += prompt_tokens;
                    per.completion_tokens += completion_tokens;
                    per.cached_tokens += cached_tokens;
                    per.cost_usd += cost_usd.unwrap_or(0.0);
                }
                EventBody::Title { title, set_by } => {
                    // A user's title wins over a generated one, whichever came first; a fork's
                    // copies of its source's titles were the source's.
                    let user = *set_by == halyard_protocol::event::TitleSource::User;
                    let copied = view.start_request.as_ref().and_then(|r| r.fork.as_ref()).is_some_and(|f| ev.seq <= f.at_seq);
                    if !copied && (user || view.title_set_by.as_deref() != Some("user")) {
                        view.title = Some(title.clone());
                        view.title_set_by = Some(if user { "user" } else { "generated" }.into());
                    }
                }
                _ => {}
            }
        }
        match &ev.body {
            EventBody::NetworkUsed { destinations } => self.network_of(id).add(destinations),
            EventBody::NetworkBlocked { host, port, rule, .. } => self.network_of(id).refuse(host, *port, rule),
            _ => {}
        }
        for (owner, org, model, (tokens_in, tokens_out, cached), cost) in usage_calls {
            self.use_up(&owner, org.as_deref(), ev.timestamp_ms, &model, |row| {
                row.llm_calls += 1;
                row.tokens_in += tokens_in;
                row.tokens_out += tokens_out;
                row.cached_tokens += cached;
                row.cost_usd += cost;
            });
        }
        self.live.push((id, live));
    }

    fn ensure_view(&mut self, id: ConversationId, owner: &str, task: TaskId, created_ms: i64) -> &mut ConversationView {
        if self.view(id).is_none() {
            self.batch.insert(layout::owner_key(owner, created_ms, id), &id.as_bytes()[..]);
        }
        self.dirty.insert(id);
        self.views.entry(id).or_insert(None).get_or_insert_with(|| new_view(id, owner, task, created_ms))
    }

    fn commit(mut self, cursors: &[(&str, u64)], live: &Live) -> Result<(), BusError> {
        for id in self.dirty.drain() {
            let view = self.views.get(&id).and_then(Option::as_ref);
            put_or_remove(&mut self.batch, layout::conv_key(id), view);
        }
        for (id, view) in self.sandboxes.drain() {
            put_or_remove(&mut self.batch, layout::sandbox_key(id), view.as_ref());
        }
        for (key, row) in self.usage.drain() {
            put_or_remove(&mut self.batch, key, Some(&row));
        }
        for (id, row) in self.network.drain() {
            put_or_remove(&mut self.batch, layout::network_key(id), Some(&row));
        }
        for (name, seq) in cursors {
            self.batch.insert(layout::meta_key(name), &seq.to_be_bytes()[..]);
        }
        self.batch.apply(self.store.tree()).map_err(|e| BusError::new(BusErrorKind::Consume, format!("read model write: {e}")))?;
        for (owner, task) in self.settled {
            live.task_settled(&owner, task);
        }
        for (id, ev) in self.live {
            live.publish(id, ev);
        }
        Ok(())
    }
}

/// Writes a view as JSON, or removes it (`None`: deleted).
fn put_or_remove<T: serde::Serialize>(batch: &mut crate::read_model::batch::Batch, key: Vec<u8>, view: Option<&T>) {
    match view.map(serde_json::to_vec) {
        Some(Ok(bytes)) => batch.insert(key, bytes),
        Some(Err(e)) => tracing::error!(error = %e, "cannot encode a view"),
        None => batch.remove(key),
    }
}

/// A fresh view for a conversation first seen now.
pub fn new_view(id: ConversationId, owner: &str, task: TaskId, created_ms: i64) -> ConversationView {
    ConversationView {
        id: id.to_string(),
        owner: owner.to_owned(),
        status: "STARTING".into(),
        start_task_id: task.to_string(),
        start_task_status: StartTaskStatus::Working.as_str().into(),
        created_at: rfc3339(created_ms),
        updated_at: rfc3339(created_ms),
        created_ms,
        confirmation_policy: "never".into(),
        ..Default::default()
    }
}

/// An ordered consumer of `stream` from after `after`, and how many messages it has to deliver
/// to reach the stream's end as it is now.
async fn ordered(js: &jetstream::Context, stream: &str, filter: &str, after: u64) -> Result<(consumer::pull::Ordered, u64), BusError> {
    let s = js.get_stream_no_info(stream).await.map_err(|e| BusError::new(BusErrorKind::Consume, e))?;
    let deliver_policy =
        if after == 0 { consumer::DeliverPolicy::All } else { consumer::DeliverPolicy::ByStartSequence { start_sequence: after + 1 } };
    let c = s
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: filter.to_owned(),
            deliver_policy,
            // Short pulls (and heartbeats at half of them): a consumer whose NATS node died is
            // recreated on another within seconds, not after the library's default 30 s.
            max_expires: std::time::Duration::from_secs(4),
            ..Default::default()
        })
        .await
        .map_err(|e| BusError::new(BusErrorKind::Consume, e))?;
    let pending = c.cached_info().num_pending;
    Ok((c.messages().await.map_err(|e| BusError::new(BusErrorKind::Consume, e))?, pending))
}

/// A new ordered consumer from after `at` if `stream` holds a message on `filter` past it, for
/// a consumer that went quiet (a read or a creation that fails gives it until the next check).
async fn unstall(js: &jetstream::Context, stream: &str, filter: &str, at: u64) -> Option<(consumer::pull::Ordered, u64)> {
    let last = bus::last_message(js, stream, filter).await;
    tracing::debug!(stream, at, last = ?last.as_ref().map(|l| l.as_ref().map(|(seq, _)| *seq)), "projection stall check");
    match last {
        Ok(Some((seq, _))) if seq > at => {}
        _ => return None,
    }
    tracing::warn!(stream, after = at, "projection consumer stalled; making it again");
    match ordered(js, stream, filter, at).await {
        Ok(again) => Some(again),
        Err(e) => {
            tracing::warn!(stream, error = %e, "cannot make the projection consumer again; trying later");
            None
        }
    }
}

const EVENTS_CURSOR: &str = "cursor/events";
const SYSTEM_CURSOR: &str = "cursor/system";

/// Folds an event; one that came before the record that makes its conversation's view (after a
/// restart both streams replay at once) has that record read and folded first, or the view would
/// never count the event.
async fn fold_event(js: &jetstream::Context, pending: &mut Pending<'_>, env: halyard_protocol::Envelope<ConversationEvent>, seq: u64) {
    let id = env.payload.conversation_id;
    if !pending.knows(id) {
        let created = bus::last_record::<SystemRecord>(js, subjects::SYSTEM_STREAM, &subjects::conversation_record(id)).await;
        if let Ok(Some((created_seq, record))) = created {
            if matches!(record.payload, SystemRecord::ConversationCreated { .. }) {
                pending.record(record, created_seq);
            }
        }
    }
    pending.event(env.payload, seq)
}

/// Projects until `shutdown`. A view untouched by any batch for `view_idle`
/// (`HALYARD_IDLE_EVICT_SECS`) leaves the cache: an idle conversation holds nothing here (its
/// view is read from sled again when it next changes). `caught_up` turns true once the read models have caught up with
/// the streams as they were at start (a restart after a crash replays what sled had not yet
/// flushed; the API waits for that, so that nothing it shows goes backwards).
pub async fn run(
    js: jetstream::Context,
    store: Store,
    live: Arc<Live>,
    view_idle: std::time::Duration,
    caught_up: tokio::sync::watch::Sender<bool>,
    mut shutdown: Shutdown,
) -> Result<(), BusError> {
    let corrupt = |e: store::StoreError| BusError::new(BusErrorKind::Consume, e);
    let mut events_at = store.cursor(EVENTS_CURSOR).map_err(corrupt)?;
    let mut system_at = store.cursor(SYSTEM_CURSOR).map_err(corrupt)?;
    let (mut events, mut events_left) = ordered(&js, subjects::EVENTS_STREAM, subjects::ALL_EVENTS, events_at).await?;
    let (mut system, mut system_left) = ordered(&js, subjects::SYSTEM_STREAM, subjects::ALL_SYSTEM, system_at).await?;
    // When each cached view was last part of a batch.
    let mut touched: HashMap<ConversationId, tokio::time::Instant> = HashMap::new();
    let mut stall_check = tokio::time::interval(STALL_CHECK);
    // When each consumer last delivered (or was made).
    let (mut events_heard, mut system_heard) = (tokio::time::Instant::now(), tokio::time::Instant::now());
    loop {
        if events_left == 0 && system_left == 0 && !*caught_up.borrow() {
            caught_up.send_replace(true);
        }
        // Wait for at least one message, then take whatever else is ready, up to a batch.
        let first = tokio::select! {
            _ = shutdown.wait() => return Ok(()),
            m = system.next() => (false, m),
            m = events.next() => (true, m),
            _ = stall_check.tick() => {
                // What idle conversations held here leaves memory (the lock is not held over
                // the checks below, which wait on the server).
                {
                    let mut views = live.views.lock().await;
                    views.retain(|id, _| touched.get(id).is_some_and(|t| t.elapsed() < view_idle));
                    metrics::gauge!("halyard_gateway_views_in_memory").set(views.len() as f64);
                }
                touched.retain(|_, t| t.elapsed() < view_idle);
                live.forget_unwatched();
                if events_heard.elapsed() >= STALL_CHECK {
                    if let Some(again) = unstall(&js, subjects::EVENTS_STREAM, subjects::ALL_EVENTS, events_at).await {
                        (events, events_left) = again;
                        events_heard = tokio::time::Instant::now();
                    }
                }
                if system_heard.elapsed() >= STALL_CHECK {
                    if let Some(again) = unstall(&js, subjects::SYSTEM_STREAM, subjects::ALL_SYSTEM, system_at).await {
                        (system, system_left) = again;
                        system_heard = tokio::time::Instant::now();
                    }
                }
                continue;
            }
        };
        let mut views = live.views.lock().await;
        if views.len() > VIEW_CACHE {
            views.clear();
            touched.clear();
        }
        let mut pending = Pending {
            store: &store,
            batch: crate::read_model::batch::Batch::default(),
            views: &mut views,
            dirty: HashSet::new(),
            sandboxes: HashMap::new(),
            live: Vec::new(),
            settled: Vec::new(),
            tomb_checked: HashMap::new(),
            usage: HashMap::new(),
            network: HashMap::new(),
        };
        let mut next = Some(first);
        let mut count = 0;
        while let Some((is_event, msg)) = next.take() {
            match msg {
                Some(Ok(msg)) => {
                    let (seq, left) = msg.info().map(|i| (i.stream_sequence, i.pending)).unwrap_or((0, 0));
                    if is_event {
                        events_heard = tokio::time::Instant::now();
                        events_at = events_at.max(seq);
                        events_left = left;
                        match halyard_protocol::decode::<ConversationEvent>(&msg.payload) {
                            Ok(env) => fold_event(&js, &mut pending, env, seq).await,
                            Err(e) => tracing::error!(subject = %msg.subject, error = %e, "skipping undecodable event"),
                        }
                    } else {
                        system_heard = tokio::time::Instant::now();
                        system_at = system_at.max(seq);
                        system_left = left;
                        match halyard_protocol::decode::<SystemRecord>(&msg.payload) {
                            Ok(env) => pending.record(env, seq),
                            Err(e) => tracing::error!(subject = %msg.subject, error = %e, "skipping undecodable record"),
                        }
                    }
                }
                Some(Err(e)) => tracing::warn!(error = %e, "projection consumer hiccup"),
                None => return Err(BusError::new(BusErrorKind::Consume, "projection stream ended")),
            }
            count += 1;
            if count >= MAX_BATCH {
                break;
            }
            // System records first: an event's conversation view is then already there.
            next = system.next().now_or_never().map(|m| (false, m)).or_else(|| events.next().now_or_never().map(|m| (true, m)));
        }
        let now = tokio::time::Instant::now();
        touched.extend(pending.dirty.iter().map(|id| (*id, now)));
        pending.commit(&[(EVENTS_CURSOR, events_at), (SYSTEM_CURSOR, system_at)], &live)?;
        metrics::gauge!("halyard_gateway_views_in_memory").set(views.len() as f64);
    }
}
