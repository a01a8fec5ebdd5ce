//! The start queue: starts waiting for a sandbox host with room, and the deployment's order
//! among them.
//!
//! The queue is a key-value bucket ([`START_QUEUE_BUCKET`]) that every sandbox supervisor and
//! the gateway watch. A start no host can take now is a [`QueuedStart`] under `q.<sandbox>`;
//! a host with room takes the next one in [`fair_order`] by creating its `claim.<sandbox>`
//! (only one create succeeds), so the order is the queue's, not any one process's memory, and
//! the gateway shows the same positions the hosts place by. This module is the types, the keys
//! and the order, with no I/O.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::UnixMillis;
use crate::ids::{ConversationId, SandboxId, UserId};

/// Key-value bucket of the start queue (see the module's comment).
pub const START_QUEUE_BUCKET: &str = "halyard_start_queue";

/// How long a start may wait in the queue unless its request or the deployment says otherwise.
pub const DEFAULT_DEADLINE_SECS: u64 = 1800;

/// Start of the detail of a sandbox's `DELETED` record when its start was cancelled while it
/// waited: the start task ends `CANCELLED`, not `ERROR`.
pub const CANCELLED_DETAIL: &str = "cancelled while queued";

/// Start of the detail of a sandbox's `ERROR` record when its start waited past its deadline.
pub const EXPIRED_DETAIL: &str = "queue deadline passed";

/// Who waits first among one user's starts: a person waiting at a page before an automation's
/// run, before a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartClass {
    #[default]
    Interactive,
    Automation,
    Batch,
}

impl StartClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interactive => "interactive",
            Self::Automation => "automation",
            Self::Batch => "batch",
        }
    }
}

/// How a start waits if it has to: carried from the start request to the sandbox's create.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueTerms {
    #[serde(default)]
    pub class: StartClass,
    /// Seconds it may wait (the deployment's setting if absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_secs: Option<u64>,
    /// The organization it is started in: fair shares are between organizations, then users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// When it was asked for (microseconds since the epoch): its arrival in the queue's order,
    /// whichever service's create reached the queue first (a user's starts are handled side
    /// by side, and their creates may reach the queue in another order than they were asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_us: Option<i64>,
}

impl QueueTerms {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// A start waiting for a sandbox (`q.<sandbox>`): the create it stands for, and how it waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedStart {
    pub sandbox_id: SandboxId,
    pub owner: UserId,
    pub conversation_id: ConversationId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    #[serde(default)]
    pub terms: QueueTerms,
    pub enqueued_ms: UnixMillis,
    pub deadline_ms: UnixMillis,
}

impl QueuedStart {
    /// Its arrival: when it was asked for, else when it was queued.
    pub fn arrival_us(&self) -> i64 {
        self.terms.asked_us.unwrap_or(self.enqueued_ms * 1000)
    }

    /// Whom it is fair against: its organization, or its owner alone.
    pub fn group(&self) -> String {
        match &self.terms.org {
            Some(org) => format!("org:{org}"),
            None => format!("user:{}", self.owner),
        }
    }
}

/// Who took a queued start (`claim.<sandbox>`): one create wins, so a start is made once, or
/// cancelled, or expired, never two of these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Claim {
    /// A host is making its sandbox. If that host stops beating ([`HostRoom`]), another takes
    /// the claim over (an update at the claim's revision) and makes it instead.
    Host {
        node: String,
        at_ms: UnixMillis,
    },
    Cancelled {
        at_ms: UnixMillis,
    },
    Expired {
        at_ms: UnixMillis,
    },
}

/// A host's room (`host.<node>`), written every second while its supervisor serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRoom {
    pub node: String,
    /// How many sandboxes it runs at most (0: no limit).
    pub slots: u32,
    /// How many it runs or is starting now.
    pub busy: u32,
    pub at_ms: UnixMillis,
}

impl HostRoom {
    /// Whether the host beat recently enough to be alive: a claim held by a host that did not
    /// is taken over.
    pub fn alive(&self, now_ms: UnixMillis) -> bool {
        now_ms - self.at_ms < HOST_STALE_MS
    }
}

/// A host whose last beat is older than this is taken for dead.
pub const HOST_STALE_MS: i64 = 5_000;

/// A key of the bucket, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueKey {
    Queued(SandboxId),
    Claim(SandboxId),
    /// Seat `n` of a limit on running sandboxes (`seat.<hex of the scope>.<n>`, the scope
    /// `user:<id>` or `total`): the sandbox that holds it. A sandbox takes a seat of each limit
    /// before it starts and gives it back when it stops, on whichever host: the limits count
    /// across hosts.
    Seat {
        scope: String,
        n: usize,
    },
    /// When a user or group was last served (`served.<hex of the user or group>`).
    Served(String),
    Host(String),
}

impl QueueKey {
    pub fn parse(key: &str) -> Option<Self> {
        let (kind, rest) = key.split_once('.')?;
        Some(match kind {
            "q" => Self::Queued(rest.parse().ok()?),
            "claim" => Self::Claim(rest.parse().ok()?),
            "seat" => {
                let (scope, n) = rest.split_once('.')?;
                Self::Seat { scope: unhex(scope)?, n: n.parse().ok()? }
            }
            "served" => Self::Served(unhex(rest)?),
            "host" => Self::Host(unhex(rest)?),
            _ => return None,
        })
    }
}

pub fn queued_key(id: SandboxId) -> String {
    format!("q.{id}")
}

pub fn claim_key(id: SandboxId) -> String {
    format!("claim.{id}")
}

/// The scope of a user's limit on running sandboxes.
pub fn user_scope(user: &UserId) -> String {
    format!("user:{user}")
}

/// The scope of the deployment's limit on running sandboxes.
pub const TOTAL_SCOPE: &str = "total";

/// Seat `n` of the limit of `scope` (user ids may hold characters a key may not: hex).
pub fn seat_key(scope: &str, n: usize) -> String {
    format!("seat.{}.{n}", hex(scope))
}

/// When `who` (a group or `user:<id>`) was last served.
pub fn served_key(who: &str) -> String {
    format!("served.{}", hex(who))
}

pub fn host_key(node: &str) -> String {
    format!("host.{}", hex(node))
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

/// A start in its user's line: its class, its arrival (when asked for, then its revision).
type InLine<'a> = (StartClass, (i64, u64), &'a QueuedStart);

/// The deployment's order of the waiting starts, first first.
///
/// Round robin between groups (organizations, and users starting on their own), then between
/// the users of a group; within one user, by class (interactive first), then by arrival (when
/// it was asked for, then the revision it was queued at). `entries` carry that revision; `served` says when each
/// group and user (`user:<id>`) was last given a sandbox (any increasing number: the least
/// recently served goes first, the never served before all). Ties go to the earlier arrival,
/// so the order is the same wherever it is computed from the same bucket.
pub fn fair_order(entries: &[(u64, &QueuedStart)], served: &HashMap<String, u64>) -> Vec<SandboxId> {
    // Each user's line, best first.
    let mut lines: BTreeMap<&UserId, Vec<InLine<'_>>> = BTreeMap::new();
    for (rev, e) in entries {
        lines.entry(&e.owner).or_default().push((e.terms.class, (e.arrival_us(), *rev), e));
    }
    for line in lines.values_mut() {
        line.sort_by_key(|(class, arrival, _)| (*class, *arrival));
        line.reverse(); // popped from the end
    }
    let mut last: HashMap<String, u64> = served.clone();
    let mut clock = served.values().copied().max().unwrap_or(0) + 1;
    let mut order = Vec::with_capacity(entries.len());
    loop {
        // The group least recently served, then its user least recently served, then the
        // earliest arrival: the smallest of these triples goes next.
        let next = lines
            .iter()
            .filter_map(|(user, line)| {
                let (_, rev, e) = line.last()?;
                let turn = |k: &str| last.get(k).copied().unwrap_or(0);
                Some(((turn(&e.group()), turn(&format!("user:{user}")), *rev), *user))
            })
            .min_by_key(|(rank, _)| *rank);
        let Some((_, user)) = next else { break };
        let Some((_, _, e)) = lines.get_mut(user).and_then(Vec::pop) else { break };
        order.push(e.sandbox_id);
        last.insert(e.group(), clock);
        last.insert(format!("user:{user}"), clock);
        clock += 1;
    }
    order
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn start(owner: &str, org: Option<&str>, class: StartClass) -> QueuedStart {
        QueuedStart {
            sandbox_id: SandboxId::new(),
            owner: UserId(owner.into()),
            conversation_id: ConversationId::new(),
            spec: None,
            terms: QueueTerms { class, deadline_secs: None, org: org.map(str::to_owned), asked_us: None },
            enqueued_ms: 0,
            deadline_ms: 0,
        }
    }

    fn owners(order: &[SandboxId], all: &[QueuedStart]) -> String {
        order.iter().map(|id| all.iter().find(|s| s.sandbox_id == *id).unwrap().owner.0.clone()).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn users_take_turns_whoever_queued_first() {
        let all: Vec<QueuedStart> =
            ["a", "a", "a", "a", "b", "b", "b", "c", "c", "c"].iter().map(|o| start(o, None, StartClass::Interactive)).collect();
        let entries: Vec<(u64, &QueuedStart)> = all.iter().enumerate().map(|(i, s)| (i as u64 + 1, s)).collect();
        let order = fair_order(&entries, &HashMap::new());
        assert_eq!(owners(&order, &all), "a b c a b c a b c a");
        // Once a was served, a goes last in the round.
        let served = HashMap::from([("user:a".to_owned(), 7), ("user:b".to_owned(), 3)]);
        let order = fair_order(&entries, &served);
        assert_eq!(owners(&order, &all), "c b a c b a c b a a");
    }

    #[test]
    fn a_users_interactive_starts_go_before_their_automations_and_orgs_share_first() {
        let all = vec![
            start("a", None, StartClass::Automation),
            start("a", None, StartClass::Batch),
            start("a", None, StartClass::Interactive),
            start("m1", Some("acme"), StartClass::Interactive),
            start("m2", Some("acme"), StartClass::Interactive),
            start("m1", Some("acme"), StartClass::Interactive),
            start("z", None, StartClass::Interactive),
        ];
        let entries: Vec<(u64, &QueuedStart)> = all.iter().enumerate().map(|(i, s)| (i as u64 + 1, s)).collect();
        let order = fair_order(&entries, &HashMap::new());
        // Groups a, acme, z in turn; within acme, m1 and m2 in turn.
        assert_eq!(owners(&order, &all), "a m1 z a m2 a m1");
        let classes: Vec<StartClass> =
            order.iter().filter_map(|id| all.iter().find(|s| s.sandbox_id == *id && s.owner.0 == "a")).map(|s| s.terms.class).collect();
        assert_eq!(classes, [StartClass::Interactive, StartClass::Automation, StartClass::Batch]);
    }

    #[test]
    fn keys_round_trip() {
        let id = SandboxId::new();
        assert_eq!(QueueKey::parse(&queued_key(id)), Some(QueueKey::Queued(id)));
        assert_eq!(QueueKey::parse(&claim_key(id)), Some(QueueKey::Claim(id)));
        assert_eq!(QueueKey::parse(&served_key("user:é b")), Some(QueueKey::Served("user:é b".into())));
        let seat = seat_key(&user_scope(&UserId("a b".into())), 3);
        assert!(seat.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'), "{seat}");
        assert_eq!(QueueKey::parse(&seat), Some(QueueKey::Seat { scope: "user:a b".into(), n: 3 }));
    }
}
