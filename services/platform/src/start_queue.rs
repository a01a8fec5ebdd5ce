//! A copy of the start queue's bucket ([`halyard_protocol::queue`]), kept by a watch: the
//! sandbox supervisors place from it, the gateway shows positions from it. Decisions made on
//! this copy are committed by one conditional write each (a create, or an update at a
//! revision), so a copy a moment old costs a failed write, never a wrong placement.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv::{self, Entry, Operation};
use futures::StreamExt;
use halyard_protocol::queue::{Claim, HostRoom, QueueKey, QueuedStart, Share, fair_order};
use halyard_protocol::{SandboxId, UnixMillis};

#[derive(Default)]
pub struct Mirror {
    pub queued: HashMap<SandboxId, (u64, QueuedStart)>,
    pub claims: HashMap<SandboxId, (u64, Claim)>,
    /// (scope, n) -> (revision, holder).
    pub seats: HashMap<(String, usize), (u64, SandboxId)>,
    pub served: HashMap<String, u64>,
    pub hosts: HashMap<String, HostRoom>,
    /// Organizations' shares, by group (`org:<name>`).
    pub shares: HashMap<String, Share>,
    /// Placements so far (claims seen), with when each start was queued and claimed: the
    /// waits the estimates and metrics are made of, the last hundred.
    pub recent: std::collections::VecDeque<(UnixMillis, UnixMillis)>,
}

impl Mirror {
    /// Applies one change the watch delivered.
    pub fn apply(&mut self, entry: &Entry) {
        let Some(key) = QueueKey::parse(&entry.key) else { return };
        let gone = matches!(entry.operation, Operation::Delete | Operation::Purge);
        let rev = entry.revision;
        match key {
            QueueKey::Queued(id) => {
                match (gone, serde_json::from_slice::<QueuedStart>(&entry.value)) {
                    (false, Ok(q)) => self.queued.insert(id, (rev, q)),
                    _ => self.queued.remove(&id),
                };
            }
            QueueKey::Claim(id) => {
                match (gone, serde_json::from_slice::<Claim>(&entry.value)) {
                    (false, Ok(c)) => {
                        if let (Claim::Host { at_ms, .. }, Some((_, q))) = (&c, self.queued.get(&id)) {
                            if !self.claims.contains_key(&id) {
                                self.recent.push_back((q.enqueued_ms, *at_ms));
                                if self.recent.len() > 100 {
                                    self.recent.pop_front();
                                }
                            }
                        }
                        self.claims.insert(id, (rev, c))
                    }
                    _ => self.claims.remove(&id),
                };
            }
            QueueKey::Seat { scope, n } => {
                let holder = std::str::from_utf8(&entry.value).ok().and_then(|s| s.parse().ok());
                match (gone, holder) {
                    (false, Some(id)) => self.seats.insert((scope, n), (rev, id)),
                    _ => self.seats.remove(&(scope, n)),
                };
            }
            QueueKey::Served(who) => {
                if gone {
                    self.served.remove(&who);
                } else if let Some(v) = std::str::from_utf8(&entry.value).ok().and_then(|s| s.parse().ok()) {
                    self.served.insert(who, v);
                }
            }
            QueueKey::Share(group) => {
                match (gone, serde_json::from_slice::<Share>(&entry.value)) {
                    (false, Ok(share)) => self.shares.insert(group, share),
                    _ => self.shares.remove(&group),
                };
            }
            QueueKey::Host(node) => {
                match (gone, serde_json::from_slice::<HostRoom>(&entry.value)) {
                    (false, Ok(h)) => self.hosts.insert(node, h),
                    _ => self.hosts.remove(&node),
                };
            }
        }
    }

    /// Whether a queued start is free to take: nobody claimed it, or a host that stopped
    /// beating did (then the claim's revision, to take it over at).
    pub fn takeable(&self, id: SandboxId, now: UnixMillis) -> Option<Option<u64>> {
        match self.claims.get(&id) {
            None => Some(None),
            Some((rev, Claim::Host { node, .. })) => {
                let alive = self.hosts.get(node).is_some_and(|h| h.alive(now));
                (!alive).then_some(Some(*rev))
            }
            Some(_) => None,
        }
    }

    /// The waiting starts in the deployment's order (claimed ones included: a claim is a start
    /// on its way out of the queue).
    pub fn order(&self) -> Vec<SandboxId> {
        let entries: Vec<(u64, &QueuedStart)> = self.queued.values().map(|(rev, q)| (*rev, q)).collect();
        fair_order(&entries, &self.served, &self.shares)
    }

    /// The turns to write when `id` leaves the line for a host (see
    /// [`halyard_protocol::queue::charge`]).
    pub fn charge(&self, id: SandboxId) -> Vec<(String, u64)> {
        let Some((_, placed)) = self.queued.get(&id) else { return Vec::new() };
        let entries: Vec<&QueuedStart> = self.queued.values().map(|(_, q)| q).collect();
        halyard_protocol::queue::charge(placed, &entries, &self.served, &self.shares)
    }

    /// The waiting starts nobody has claimed, in order: each one's place in line.
    pub fn waiting(&self) -> Vec<SandboxId> {
        self.order().into_iter().filter(|id| !matches!(self.claims.get(id), Some((_, Claim::Host { .. })))).collect()
    }

    /// The place in line of `sandbox` (1: next) and about how many seconds until it is placed,
    /// at the recent pace; `(None, None)` if it does not wait.
    pub fn place(&self, sandbox: SandboxId) -> (Option<u32>, Option<u64>) {
        // (Most asked are not in line: no order is computed for them.)
        if !self.queued.contains_key(&sandbox) {
            return (None, None);
        }
        let Some(i) = self.waiting().iter().position(|id| *id == sandbox) else { return (None, None) };
        let position = i as u32 + 1;
        let estimate = per_place_ms(&self.recent).map(|ms| (ms.max(0) as u64 * u64::from(position)).div_ceil(1000));
        (Some(position), estimate)
    }

    /// Whether a start that host `node` could take waits (a wake of another host's sandbox
    /// does not stand in this one's way).
    pub fn waiting_for(&self, node: &str) -> bool {
        self.queued.iter().any(|(id, (_, e))| e.for_host(node) && !matches!(self.claims.get(id), Some((_, Claim::Host { .. }))))
    }

    /// The seat of `scope` that `id` holds, if any.
    pub fn seat_of(&self, scope: &str, id: SandboxId) -> Option<(usize, u64)> {
        self.seats.iter().find(|((s, _), (_, holder))| s == scope && *holder == id).map(|((_, n), (rev, _))| (*n, *rev))
    }

    /// Every seat `id` holds.
    pub fn seats_of(&self, id: SandboxId) -> Vec<(String, usize, u64)> {
        self.seats.iter().filter(|(_, (_, holder))| *holder == id).map(|((s, n), (rev, _))| (s.clone(), *n, *rev)).collect()
    }
}

/// How long one place in line takes, from the recent placements: the mean gap between them
/// (`None` before two).
pub fn per_place_ms(recent: &std::collections::VecDeque<(UnixMillis, UnixMillis)>) -> Option<i64> {
    let first = recent.front()?.1;
    let last = recent.back()?.1;
    (recent.len() > 1).then(|| (last - first).max(0) / (recent.len() as i64 - 1))
}

/// Keeps `mirror` up to date with the bucket until the task is dropped, calling `changed` after
/// each change; starts again from the bucket's current state if the watch ends (a server lost).
pub async fn watch(kv: kv::Store, mirror: Arc<Mutex<Mirror>>, changed: impl Fn() + Send + 'static) {
    loop {
        match kv.watch_with_history(">").await {
            Ok(mut changes) => {
                if let Ok(mut m) = mirror.lock() {
                    let recent = std::mem::take(&mut m.recent);
                    *m = Mirror { recent, ..Mirror::default() };
                }
                while let Some(next) = changes.next().await {
                    match next {
                        Ok(entry) => {
                            if let Ok(mut m) = mirror.lock() {
                                m.apply(&entry);
                            }
                            changed();
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "start queue watch failed; watching again");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot watch the start queue; trying again"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
