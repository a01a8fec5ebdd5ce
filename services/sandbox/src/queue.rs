//! This host's side of the start queue ([`halyard_protocol::queue`]): a create that no host can
//! take now waits in the queue instead of being refused, and this host takes the next waiting
//! start whenever it has room (pull, not push), so no start is refused by a full host while
//! another has room.
//!
//! Limits on running sandboxes (per user, in total) are seats in the queue's bucket, taken with a
//! create or an update at a revision before a sandbox starts and given back when it stops: they
//! count across hosts. The host's own capacity (`HALYARD_SANDBOX_HOST_SLOTS`) is its own to
//! count. A claim names the host making the sandbox; a host that stops beating loses its
//! claims to whichever host sees that first, which makes the sandbox once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use halyard_platform::start_queue::{self, Mirror};
use halyard_platform::{Config, Shutdown, bus, now_ms};
use halyard_protocol::command::SandboxCommand;
use halyard_protocol::queue::{self as q, Claim, HostRoom, QueuedStart};
use halyard_protocol::system::{SandboxStatus, SandboxUpdate, SystemRecord};
use halyard_protocol::{SandboxId, UserId, subjects};
use tokio::sync::{Notify, mpsc};

use crate::error::SandboxError;

/// How long an emptied key's marker stays (the watchers have seen it by then).
const MARKER_TTL: Duration = Duration::from_secs(60);

/// What [`Queue::admit`] decided for a create.
pub enum Admit {
    /// Make it here, now (its seats are taken).
    Here,
    /// It waits in the queue.
    Queued,
}

/// A limit on running sandboxes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    User,
    /// An organization's, as an administrator set it in its share.
    Org,
    Total,
}

/// What the queue hands the supervisor.
// Each is moved once, into a channel; boxing the large variant would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Placed {
    /// A start (or a wake) this host took: make (or wake) its sandbox. `true`: taken over from
    /// a host that stopped beating, which may have made it already.
    Take(QueuedStart, bool),
    /// A wake of this host's sandbox waited past its deadline: the sandbox says so, and stays
    /// as it was.
    WakeExpired(SandboxId, String),
}

/// What [`Queue::cancel`] found.
pub enum Cancel {
    /// It was waiting and never starts now.
    Cancelled,
    /// A host took it first: the delete goes to the sandbox.
    Taken,
}

pub struct Queue {
    kv: kv::Store,
    js: jetstream::Context,
    config: Arc<Config>,
    mirror: Arc<Mutex<Mirror>>,
    /// This host's sandboxes that run or are starting, and the ones it took from the queue and
    /// has not heard start yet.
    busy: Mutex<HashSet<SandboxId>>,
    wake: Arc<Notify>,
    place: mpsc::UnboundedSender<Placed>,
}

impl Queue {
    /// Opens the queue; the starts this host takes from it arrive on `place`.
    pub async fn open(
        js: &jetstream::Context,
        config: Arc<Config>,
        place: mpsc::UnboundedSender<Placed>,
    ) -> Result<Arc<Self>, SandboxError> {
        let kv = js.get_key_value(q::START_QUEUE_BUCKET).await.map_err(|e| SandboxError::Spawn(format!("start queue: {e}")))?;
        Ok(Arc::new(Self {
            kv,
            js: js.clone(),
            config,
            mirror: Default::default(),
            busy: Default::default(),
            wake: Arc::new(Notify::new()),
            place,
        }))
    }

    fn node(&self) -> &str {
        &self.config.node_id
    }

    fn room(&self) -> bool {
        let slots = self.config.sandbox.host_slots;
        slots == 0 || self.busy.lock().map(|b| b.len() < slots).unwrap_or(false)
    }

    /// Takes room on this host for `id` if there is some (one check and one insert under one
    /// lock: the queue's loop and the supervisor's creates never both take the last slot).
    fn reserve(&self, id: SandboxId) -> bool {
        let slots = self.config.sandbox.host_slots;
        let Ok(mut busy) = self.busy.lock() else { return false };
        if slots == 0 || busy.len() < slots || busy.contains(&id) {
            busy.insert(id);
            return true;
        }
        false
    }

    /// Whether host `node` beats and has room, as its last beat said: a start from a snapshot
    /// it holds is passed to it rather than made here without the snapshot.
    pub fn has_room(&self, node: &str) -> bool {
        let now = now_ms();
        self.mirror.lock().map(|m| m.hosts.get(node).is_some_and(|h| h.alive(now) && (h.slots == 0 || h.busy < h.slots))).unwrap_or(false)
    }

    /// Gives back the room taken for `id` (a start taken that needs no making after all).
    pub fn unreserve(&self, id: SandboxId) {
        if let Ok(mut busy) = self.busy.lock() {
            busy.remove(&id);
        }
    }

    /// The limits a start for `owner` (in organization `org`, if any) takes a seat of: (which,
    /// scope, limit).
    fn limits(&self, owner: &UserId, org: Option<&str>) -> Vec<(Limit, String, usize)> {
        let s = &self.config.sandbox;
        let org_limit = org.map(|org| {
            let group = q::org_group(org);
            let max = self.mirror.lock().ok().and_then(|m| m.shares.get(&group).and_then(|s| s.max_running));
            (Limit::Org, group, max.map_or(0, |m| m as usize))
        });
        [(Limit::User, q::user_scope(owner), s.max_running_per_user)]
            .into_iter()
            .chain(org_limit)
            .chain([(Limit::Total, q::TOTAL_SCOPE.to_owned(), s.max_running_total)])
            .filter(|(_, _, limit)| *limit > 0)
            .collect()
    }

    /// Why this host may not start `id` again now (a resume, a wake), if it may not; else its
    /// seats are taken.
    pub async fn resume_refusal(&self, owner: &UserId, id: SandboxId) -> Option<String> {
        if !self.reserve(id) {
            return Some(format!("host_full: this host runs {} sandboxes (HALYARD_SANDBOX_HOST_SLOTS)", self.config.sandbox.host_slots));
        }
        let s = &self.config.sandbox;
        // (A sandbox's record does not say its organization: a wake takes no seat of its limit.)
        let seats = self.take_seats(owner, None, id).await;
        if !matches!(seats, Ok(None)) {
            self.unreserve(id);
        }
        match seats {
            Ok(None) => None,
            Ok(Some(Limit::User)) => Some(format!(
                "quota_exceeded_user: {owner} already runs {} sandboxes (limit {})",
                s.max_running_per_user, s.max_running_per_user
            )),
            Ok(Some(Limit::Org)) => Some("quota_exceeded_org: the organization runs as many sandboxes as it may".to_owned()),
            Ok(Some(Limit::Total)) => {
                Some(format!("quota_exceeded_total: {} sandboxes are running (limit {})", s.max_running_total, s.max_running_total))
            }
            Err(e) => Some(format!("the running limits cannot be read: {e}")),
        }
    }

    /// Decides a create that no sandbox exists for: here and now if this host has room, nobody
    /// waits and the limits have a seat; otherwise it joins the queue.
    pub async fn admit(&self, sandbox_id: SandboxId, owner: &UserId, create: &SandboxCommand) -> Result<Admit, SandboxError> {
        let nobody_waits = self.mirror.lock().map(|m| !m.waiting_for(self.node())).unwrap_or(false);
        let org = match create {
            SandboxCommand::Create { queue, .. } => queue.org.clone(),
            _ => None,
        };
        if nobody_waits && self.reserve(sandbox_id) {
            match self.take_seats(owner, org.as_deref(), sandbox_id).await {
                Ok(None) => return Ok(Admit::Here),
                Ok(Some(_)) => self.unreserve(sandbox_id),
                Err(e) => {
                    self.unreserve(sandbox_id);
                    return Err(e);
                }
            }
        }
        let SandboxCommand::Create { conversation_id, spec, queue: terms, snapshot, .. } = create else { return Ok(Admit::Here) };
        let now = now_ms();
        let deadline = terms.deadline_secs.unwrap_or(self.config.sandbox.queue_deadline_secs);
        let entry = QueuedStart {
            sandbox_id,
            owner: owner.clone(),
            conversation_id: *conversation_id,
            spec: spec.clone(),
            terms: terms.clone(),
            enqueued_ms: now,
            deadline_ms: now + deadline as i64 * 1000,
            wake_on: None,
            snapshot: snapshot.clone(),
        };
        self.enqueue(&entry).await?;
        tracing::info!(sandbox_id = %sandbox_id, owner = %owner, class = terms.class.as_str(), "no room now: the start waits in the queue");
        self.record(&entry, SandboxStatus::Queued, Some("waiting for a sandbox host with room".into())).await;
        Ok(Admit::Queued)
    }

    /// Puts a wake of this host's sandbox `id` in line (it may not start again now: `why`);
    /// returns until when it may wait. It is this host's to take: the workspace is here.
    pub async fn enqueue_wake(
        &self,
        id: SandboxId,
        owner: &UserId,
        conversation_id: halyard_protocol::ConversationId,
        spec: Option<String>,
        why: &str,
    ) -> Result<halyard_protocol::UnixMillis, SandboxError> {
        let now = now_ms();
        // (Asked again while it waits: it keeps its place and its deadline.)
        if let Some((_, e)) = self.mirror.lock().ok().and_then(|m| m.queued.get(&id).cloned()) {
            return Ok(e.deadline_ms);
        }
        let entry = QueuedStart {
            sandbox_id: id,
            owner: owner.clone(),
            conversation_id,
            spec,
            terms: q::QueueTerms { asked_us: Some(now * 1000), ..Default::default() },
            enqueued_ms: now,
            deadline_ms: now + self.config.sandbox.queue_deadline_secs as i64 * 1000,
            wake_on: Some(self.node().to_owned()),
            snapshot: None,
        };
        self.enqueue(&entry).await?;
        tracing::info!(sandbox_id = %id, owner = %owner, why, "no room to wake the sandbox now: the wake waits in the queue");
        Ok(entry.deadline_ms)
    }

    async fn enqueue(&self, entry: &QueuedStart) -> Result<(), SandboxError> {
        let value = serde_json::to_vec(entry).map_err(|e| SandboxError::Spawn(e.to_string()))?;
        match self.kv.create(q::queued_key(entry.sandbox_id), value.into()).await {
            Ok(_) => {}
            // Queued already (the create came again).
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
            Err(e) => return Err(SandboxError::Spawn(format!("start queue: {e}"))),
        }
        let kind = if entry.wake_on.is_some() { "wake" } else { entry.terms.class.as_str() };
        metrics::counter!("halyard_start_queue_entered_total", "class" => kind).increment(1);
        self.wake.notify_one();
        Ok(())
    }

    /// Cancels a waiting start: the claim's create decides between this and a host taking it.
    pub async fn cancel(&self, sandbox_id: SandboxId) -> Result<Cancel, SandboxError> {
        let claim = serde_json::to_vec(&Claim::Cancelled { at_ms: now_ms() }).map_err(|e| SandboxError::Spawn(e.to_string()))?;
        match self.kv.create(q::claim_key(sandbox_id), claim.into()).await {
            Ok(_) => {}
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                let held = self.kv.get(q::claim_key(sandbox_id)).await.ok().flatten();
                // (Cancelled or expired already: it is said so again below.)
                if let Some(Claim::Host { .. }) = held.and_then(|b| serde_json::from_slice::<Claim>(&b).ok()) {
                    return Ok(Cancel::Taken);
                }
            }
            Err(e) => return Err(SandboxError::Spawn(format!("start queue: {e}"))),
        }
        let entry =
            self.kv.get(q::queued_key(sandbox_id)).await.ok().flatten().and_then(|b| serde_json::from_slice::<QueuedStart>(&b).ok());
        self.forget(sandbox_id).await;
        if let Some(entry) = entry {
            metrics::counter!("halyard_start_queue_left_total", "outcome" => "cancelled").increment(1);
            self.record(&entry, SandboxStatus::Deleted, Some(q::CANCELLED_DETAIL.into())).await;
        }
        Ok(Cancel::Cancelled)
    }

    /// A sandbox of this host changed status: a stopped one gives back its seats and room.
    pub fn status_changed(self: &Arc<Self>, id: SandboxId, status: SandboxStatus) {
        let live = matches!(status, SandboxStatus::Running | SandboxStatus::Starting);
        if let Ok(mut busy) = self.busy.lock() {
            if live {
                busy.insert(id);
            } else {
                busy.remove(&id);
            }
        }
        let done_waiting = matches!(status, SandboxStatus::Running | SandboxStatus::Error | SandboxStatus::Deleted);
        // A slot freed here is taken at once (the next start waits on nothing else), and again
        // once the seats are given back (a start waiting for a seat waits on those).
        if !live {
            self.wake.notify_one();
        }
        let me = self.clone();
        tokio::spawn(async move {
            if done_waiting {
                me.forget(id).await;
            }
            if !live {
                me.give_back_seats(id).await;
            }
            me.wake.notify_one();
        });
    }

    /// Takes a seat of each limit for `id`; the limit that is full if one is (then it holds
    /// none).
    async fn take_seats(&self, owner: &UserId, org: Option<&str>, id: SandboxId) -> Result<Option<Limit>, SandboxError> {
        let mut taken = Vec::new();
        for (which, scope, limit) in self.limits(owner, org) {
            match self.take_seat(&scope, limit, id).await? {
                Some(seat) => taken.push(seat),
                None => {
                    for (key, rev) in taken {
                        let _ = self.kv.purge_expect_revision_with_ttl(key, rev, MARKER_TTL).await;
                    }
                    return Ok(Some(which));
                }
            }
        }
        Ok(None)
    }

    async fn take_seat(&self, scope: &str, limit: usize, id: SandboxId) -> Result<Option<(String, u64)>, SandboxError> {
        let held: Vec<Option<(u64, SandboxId)>> = {
            let m = self.mirror.lock().map_err(|_| SandboxError::Spawn("start queue poisoned".into()))?;
            if let Some((n, rev)) = m.seat_of(scope, id) {
                return Ok(Some((q::seat_key(scope, n), rev)));
            }
            (0..limit).map(|n| m.seats.get(&(scope.to_owned(), n)).copied()).collect()
        };
        let value = bytes::Bytes::from(id.to_string());
        // Free seats first; then seats whose holder stopped without giving theirs back (its
        // host died): the holder's record says.
        for (n, seat) in held.iter().enumerate() {
            if seat.is_none() {
                if let Ok(rev) = self.kv.create(q::seat_key(scope, n), value.clone()).await {
                    return Ok(Some((q::seat_key(scope, n), rev)));
                }
            }
        }
        for (n, seat) in held.iter().enumerate() {
            let Some((rev, holder)) = seat else { continue };
            if self.busy.lock().map(|b| b.contains(holder)).unwrap_or(true) || self.still_live(*holder).await {
                continue;
            }
            if let Ok(rev) = self.kv.update(q::seat_key(scope, n), value.clone(), *rev).await {
                return Ok(Some((q::seat_key(scope, n), rev)));
            }
        }
        Ok(None)
    }

    async fn still_live(&self, id: SandboxId) -> bool {
        match bus::last_record::<SystemRecord>(&self.js, subjects::SYSTEM_STREAM, &subjects::sandbox_record(id)).await {
            Ok(Some((_, env))) => match env.payload {
                SystemRecord::Sandbox(r) => matches!(r.status, SandboxStatus::Running | SandboxStatus::Starting),
                _ => false,
            },
            Ok(None) => false,
            Err(_) => true,
        }
    }

    async fn give_back_seats(&self, id: SandboxId) {
        let seats = self.mirror.lock().map(|m| m.seats_of(id)).unwrap_or_default();
        for (scope, n, rev) in seats {
            if let Err(e) = self.kv.purge_expect_revision_with_ttl(q::seat_key(&scope, n), rev, MARKER_TTL).await {
                tracing::debug!(sandbox_id = %id, error = %e, "seat already given back");
            }
        }
    }

    /// Takes `id` out of the queue (its start is made, failed, cancelled or expired).
    pub async fn forget(&self, id: SandboxId) {
        let (queued, claimed) =
            self.mirror.lock().map(|m| (m.queued.contains_key(&id), m.claims.contains_key(&id))).unwrap_or((true, true));
        if queued {
            let _ = self.kv.purge_with_ttl(q::queued_key(id), MARKER_TTL).await;
        }
        if claimed {
            let _ = self.kv.purge_with_ttl(q::claim_key(id), MARKER_TTL).await;
        }
    }

    async fn record(&self, entry: &QueuedStart, status: SandboxStatus, detail: Option<String>) {
        let record = SystemRecord::Sandbox(SandboxUpdate {
            sandbox_id: entry.sandbox_id,
            owner: entry.owner.clone(),
            conversation_id: Some(entry.conversation_id),
            sandbox_kind: self.config.sandbox.kind.clone(),
            status,
            exposed_urls: Vec::new(),
            workspace: String::new(),
            detail,
            pid: None,
            container: None,
            volume: None,
            spec: entry.spec.clone(),
            from_pool: false,
            // Waiting, it is no host's: any supervisor answers a command for it.
            host: None,
            wake_queued_until: None,
            snapshot: None,
            runtime: None,
            shape: None,
        });
        if let Err(e) = bus::send(&self.js, subjects::sandbox_record(entry.sandbox_id), record, None).await {
            tracing::error!(sandbox_id = %entry.sandbox_id, error = %e, "cannot publish the queued start's record");
        }
    }

    /// Follows the queue and takes starts while this host has room, until `shutdown`.
    pub async fn run(self: Arc<Self>, mut shutdown: Shutdown) {
        let wake = self.wake.clone();
        let watcher = tokio::spawn(start_queue::watch(self.kv.clone(), self.mirror.clone(), move || wake.notify_one()));
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        // How busy the last beat said this host was: a change is said at once, not at the next
        // second (administrators read the room, and a slow say-so costs nothing but a write).
        let mut said = usize::MAX;
        let mut ticks: u64 = 0;
        loop {
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = tick.tick() => {
                    said = self.beat().await;
                    self.expire().await;
                    ticks += 1;
                    if ticks % 10 == 3 {
                        self.sweep_mine().await;
                    }
                    self.take_while_room(true).await;
                }
                _ = self.wake.notified() => self.take_while_room(false).await,
            }
            if self.busy.lock().map(|b| b.len()).unwrap_or(said) != said {
                said = self.beat().await;
            }
        }
        watcher.abort();
        // Gone: the others take over what it claimed and never made.
        let _ = self.kv.purge_with_ttl(q::host_key(self.node()), MARKER_TTL).await;
    }

    /// Says this host is alive and how much room it has; returns how busy it said it was.
    async fn beat(&self) -> usize {
        let busy = self.busy.lock().map(|b| b.len()).unwrap_or(0);
        let slots = self.config.sandbox.host_slots;
        metrics::gauge!("halyard_sandbox_host_room").set(if slots == 0 { -1.0 } else { slots.saturating_sub(busy) as f64 });
        let room = HostRoom { node: self.node().to_owned(), slots: slots as u32, busy: busy as u32, at_ms: now_ms() };
        if let Ok(value) = serde_json::to_vec(&room) {
            if let Err(e) = self.kv.put(q::host_key(self.node()), value.into()).await {
                tracing::warn!(error = %e, "cannot say this host's room to the start queue");
            }
        }
        let (waiting, oldest) = self
            .mirror
            .lock()
            .map(|m| {
                let w = m.waiting();
                let oldest = w.iter().filter_map(|id| m.queued.get(id)).map(|(_, e)| e.enqueued_ms).min();
                (w.len(), oldest)
            })
            .unwrap_or((0, None));
        metrics::gauge!("halyard_start_queue_length").set(waiting as f64);
        metrics::gauge!("halyard_start_queue_oldest_seconds").set(oldest.map_or(0.0, |t| (now_ms() - t) as f64 / 1000.0));
        busy
    }

    /// Tidies the starts this host claimed and is not making (it restarted since): one made
    /// already is taken out of the queue; one never made is given back to it.
    async fn sweep_mine(&self) {
        let mine: Vec<SandboxId> = self
            .mirror
            .lock()
            .map(|m| {
                m.claims
                    .iter()
                    .filter(|(id, (_, c))| matches!(c, Claim::Host { node, .. } if node == self.node()) && m.queued.contains_key(id))
                    .map(|(id, _)| *id)
                    .collect()
            })
            .unwrap_or_default();
        for id in mine {
            let making = self.busy.lock().map(|b| b.contains(&id)).unwrap_or(true);
            let wake = self.mirror.lock().map(|m| m.queued.get(&id).is_some_and(|(_, e)| e.wake_on.is_some())).unwrap_or(false);
            if wake {
                // A wake taken and not under way goes back in line; one under way leaves it
                // when its sandbox runs.
                if !making {
                    let _ = self.kv.purge_with_ttl(q::claim_key(id), MARKER_TTL).await;
                }
                continue;
            }
            let last = bus::last_record::<SystemRecord>(&self.js, subjects::SYSTEM_STREAM, &subjects::sandbox_record(id)).await;
            let status = match last {
                Ok(Some((_, env))) => match env.payload {
                    SystemRecord::Sandbox(r) => Some(r.status),
                    _ => None,
                },
                _ => continue,
            };
            match status {
                Some(SandboxStatus::Queued | SandboxStatus::Starting) if making => {}
                Some(SandboxStatus::Queued | SandboxStatus::Starting) | None => {
                    tracing::info!(sandbox_id = %id, "a start this host took and is not making goes back to the queue");
                    let _ = self.kv.purge_with_ttl(q::claim_key(id), MARKER_TTL).await;
                }
                Some(_) => self.forget(id).await,
            }
        }
    }

    /// Ends the starts that waited past their deadline (any host may: the claim decides).
    async fn expire(&self) {
        let now = now_ms();
        let late: Vec<QueuedStart> = self
            .mirror
            .lock()
            .map(|m| {
                m.queued
                    .values()
                    .filter(|(_, e)| e.deadline_ms <= now && !m.claims.contains_key(&e.sandbox_id))
                    .map(|(_, e)| e.clone())
                    .collect()
            })
            .unwrap_or_default();
        for entry in late {
            // A wake is its host's to end (the sandbox says so); one whose host is gone is
            // only taken out of line.
            let wake_elsewhere = entry.wake_on.as_deref().filter(|h| *h != self.node());
            if let Some(host) = wake_elsewhere {
                let alive = self.mirror.lock().map(|m| m.hosts.get(host).is_some_and(|h| h.alive(now))).unwrap_or(true);
                if !alive {
                    self.forget(entry.sandbox_id).await;
                }
                continue;
            }
            let Ok(claim) = serde_json::to_vec(&Claim::Expired { at_ms: now }) else { continue };
            if self.kv.create(q::claim_key(entry.sandbox_id), claim.into()).await.is_err() {
                continue;
            }
            let waited = (now - entry.enqueued_ms) / 1000;
            let detail = format!(
                "{}: the start waited {} min {} s in the queue and no sandbox host had room before its deadline; start again later, \
                 give it longer (queue_deadline_secs), or ask an administrator for more sandbox hosts",
                q::EXPIRED_DETAIL,
                waited / 60,
                waited % 60
            );
            metrics::counter!("halyard_start_queue_left_total", "outcome" => "expired").increment(1);
            self.forget(entry.sandbox_id).await;
            if entry.wake_on.is_some() {
                let _ = self.place.send(Placed::WakeExpired(entry.sandbox_id, detail));
            } else {
                self.record(&entry, SandboxStatus::Error, Some(detail)).await;
            }
        }
    }

    /// Whether `owner` could have a seat of every limit now, by the copy (no write): a free one,
    /// or, when `thorough`, one whose holder stopped without giving it back (its record says).
    /// A user at a limit is passed over without claiming anything, so that a start which must
    /// wait is not claimed and given back on every wake (which a cancel would keep meeting).
    async fn seats_possible(&self, owner: &UserId, org: Option<&str>, thorough: bool) -> bool {
        for (_, scope, limit) in self.limits(owner, org) {
            let holders: Vec<SandboxId> = self
                .mirror
                .lock()
                .map(|m| (0..limit).filter_map(|n| m.seats.get(&(scope.clone(), n)).map(|(_, id)| *id)).collect())
                .unwrap_or_default();
            if holders.len() < limit {
                continue;
            }
            if !thorough {
                return false;
            }
            let mut stale = false;
            for holder in holders {
                let here = self.busy.lock().map(|b| b.contains(&holder)).unwrap_or(true);
                if !here && !self.still_live(holder).await {
                    stale = true;
                    break;
                }
            }
            if !stale {
                return false;
            }
        }
        true
    }

    /// Takes the next waiting starts, in the deployment's order, while this host has room
    /// (`thorough`: once a second, looking past the copy for seats held by stopped sandboxes).
    async fn take_while_room(&self, thorough: bool) {
        // Users found at a limit, and starts another host took first, are passed over until the
        // next wake (the watch brings the other host's claim meanwhile).
        // (By owner and organization: an organization at its limit holds up only its own.)
        let mut full: HashSet<(UserId, Option<String>)> = HashSet::new();
        let mut passed: HashSet<SandboxId> = HashSet::new();
        while self.room() {
            let now = now_ms();
            let next = self.mirror.lock().ok().and_then(|m| {
                m.order().into_iter().find_map(|id| {
                    let (_, e) = m.queued.get(&id)?;
                    let over = m.takeable(id, now)?;
                    let mine = e.for_host(self.node());
                    (mine && !full.contains(&(e.owner.clone(), e.terms.org.clone())) && !passed.contains(&id) && e.deadline_ms > now)
                        .then(|| (e.clone(), over))
                })
            });
            let Some((entry, over)) = next else { return };
            let id = entry.sandbox_id;
            if !self.seats_possible(&entry.owner, entry.terms.org.as_deref(), thorough).await {
                full.insert((entry.owner.clone(), entry.terms.org.clone()));
                continue;
            }
            if !self.reserve(id) {
                return;
            }
            let claim = Claim::Host { node: self.node().to_owned(), at_ms: now };
            let Ok(value) = serde_json::to_vec(&claim) else { return };
            let claimed = match over {
                None => self.kv.create(q::claim_key(id), value.into()).await.map(drop).map_err(|e| e.to_string()),
                Some(rev) => self.kv.update(q::claim_key(id), value.into(), rev).await.map(drop).map_err(|e| e.to_string()),
            };
            if let Err(e) = claimed {
                // Another host was quicker; the watch brings its claim.
                tracing::debug!(sandbox_id = %id, error = %e, "start taken by another host");
                self.unreserve(id);
                passed.insert(id);
                continue;
            }
            match self.take_seats(&entry.owner, entry.terms.org.as_deref(), id).await {
                Ok(None) => {}
                Ok(Some(_)) | Err(_) => {
                    // A limit is full: the start waits on, unclaimed.
                    let _ = self.kv.purge_with_ttl(q::claim_key(id), MARKER_TTL).await;
                    self.unreserve(id);
                    full.insert((entry.owner.clone(), entry.terms.org.clone()));
                    continue;
                }
            }
            passed.insert(id);
            // Its group and user take their turn (and whoever waited with no turn yet gets
            // one where the round stands).
            let turns = self.mirror.lock().map(|m| m.charge(id)).unwrap_or_default();
            futures::future::join_all(
                turns.into_iter().map(|(who, tag)| self.kv.put(q::served_key(&who), bytes::Bytes::from(tag.to_string()))),
            )
            .await;
            metrics::histogram!("halyard_start_queue_wait_seconds", "class" => entry.terms.class.as_str())
                .record((now - entry.enqueued_ms).max(0) as f64 / 1000.0);
            metrics::counter!("halyard_start_queue_left_total", "outcome" => "placed").increment(1);
            tracing::info!(sandbox_id = %id, owner = %entry.owner, waited_ms = now - entry.enqueued_ms, taken_over = over.is_some(), "took a start from the queue");
            if self.place.send(Placed::Take(entry, over.is_some())).is_err() {
                return;
            }
        }
    }
}
