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

/// Start of the detail of a sandbox's record while a wake of it waits in the queue (its status
/// stays what it was: hibernated, paused or stopped).
pub const WAKE_QUEUED_DETAIL: &str = "wake queued";

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
    /// A wake of a sandbox that exists (hibernated, paused or stopped) rather than a new one:
    /// the host that holds its workspace, the only one that can take it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_on: Option<String>,
    /// The environment snapshot the new sandbox starts from, where its host holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<crate::environment::SnapshotRef>,
}

impl QueuedStart {
    /// Whether the host `node` may take it: any host a new sandbox, the holder a wake.
    pub fn for_host(&self, node: &str) -> bool {
        self.wake_on.as_deref().is_none_or(|h| h == node)
    }

    /// Its arrival: when it was asked for, else when it was queued.
    pub fn arrival_us(&self) -> i64 {
        self.terms.asked_us.unwrap_or(self.enqueued_ms * 1000)
    }

    /// Whom it is fair against: its organization, or its owner alone.
    pub fn group(&self) -> String {
        match &self.terms.org {
            Some(org) => org_group(org),
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

/// An organization's share of the queue (`share.<hex of the group>`), set by an
/// administrator; a group without one has [`Share::default`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    /// How many turns it takes per round against a group of weight 1 (1..=[`MAX_WEIGHT`]).
    pub weight: u32,
    /// Groups of a higher priority are served first while any of their starts wait
    /// (-[`MAX_PRIORITY`]..=[`MAX_PRIORITY`]; 0 by default).
    pub priority: i32,
    /// How many sandboxes its starts may run at once, across hosts (seats of the scope
    /// `org:<name>`); no limit if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
}

impl Default for Share {
    fn default() -> Self {
        Self { weight: 1, priority: 0, max_running: None }
    }
}

pub const MAX_WEIGHT: u32 = 100;
pub const MAX_PRIORITY: i32 = 10;
/// The most an organization's `max_running` may be set to.
pub const MAX_RUNNING: u32 = 100_000;

/// The group key of an organization (what [`QueuedStart::group`] says for its starts).
pub fn org_group(org: &str) -> String {
    format!("org:{org}")
}

/// The organization of a group key, if it is one's (the other way of [`org_group`]).
pub fn org_of_group(group: &str) -> Option<&str> {
    group.strip_prefix("org:")
}

/// A place in line in words: `1st`, `2nd`, `3rd`, `11th`, `22nd`.
pub fn ordinal(place: u32) -> String {
    let suffix = match (place % 10, place % 100) {
        (1, p) if p != 11 => "st",
        (2, p) if p != 12 => "nd",
        (3, p) if p != 13 => "rd",
        _ => "th",
    };
    format!("{place}{suffix}")
}

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
    /// An organization's share (`share.<hex of its group>`).
    Share(String),
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
            "share" => Self::Share(unhex(rest)?),
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

/// The share of `group` (see [`org_group`]).
pub fn share_key(group: &str) -> String {
    format!("share.{}", hex(group))
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

/// One turn of a group or user of weight 1, in the tags of `served.<who>`.
pub const TURN: u64 = 1_000_000;

/// A start in its user's line: its class, its arrival (when asked for, then its revision).
type InLine<'a> = (StartClass, (i64, u64), &'a QueuedStart);

/// The turns taken so far: each group's and user's tag (`served.<who>`), which grows by
/// [`TURN`] / weight each time it is served. The least tag goes next; a group or user that
/// comes back after a while (or for the first time) joins at the least tag of those waiting,
/// so it is next in the round but has no turns saved up to pass everyone with, and one that
/// was served a lot before counts at most a turn ahead of it.
struct Turns<'a> {
    tags: HashMap<String, u64>,
    shares: &'a HashMap<String, Share>,
}

/// Where the tags of those waiting start: the least known tag among the waiting groups, and
/// among each waiting group's users.
struct Bases {
    group: u64,
    users: HashMap<String, u64>,
}

impl Turns<'_> {
    fn share(&self, group: &str) -> Share {
        self.shares.get(group).copied().unwrap_or_default()
    }

    /// The bases of the waiting, given as (group, user) pairs.
    fn bases<'k>(&self, waiting: impl Iterator<Item = (&'k str, &'k str)>) -> Bases {
        let mut group: Option<u64> = None;
        let mut users: HashMap<String, u64> = HashMap::new();
        for (g, u) in waiting {
            if let Some(t) = self.tags.get(g) {
                group = Some(group.map_or(*t, |b| b.min(*t)));
            }
            let known = self.tags.get(u).copied().unwrap_or(u64::MAX);
            users.entry(g.to_owned()).and_modify(|b| *b = (*b).min(known)).or_insert(known);
        }
        users.values_mut().for_each(|b| *b = if *b == u64::MAX { 0 } else { *b });
        Bases { group: group.unwrap_or(0), users }
    }

    /// A tag as it counts now: not below `base` (no turns saved up while away) and at most one
    /// turn above it (a group that was served much earlier is not held back for it now: while
    /// groups wait together, their tags are never more than a turn apart anyway).
    fn tag(&self, key: &str, base: u64) -> u64 {
        self.tags.get(key).map_or(base, |t| (*t).clamp(base, base + TURN))
    }

    /// The rank of `group` among groups, and of `user` among its group's users: the least
    /// goes next.
    fn rank(&self, group: &str, user: &str, bases: &Bases) -> ((i32, u64), u64) {
        let user_base = bases.users.get(group).copied().unwrap_or(0);
        ((-self.share(group).priority, self.tag(group, bases.group)), self.tag(user, user_base))
    }

    /// Charges one turn to `group` and `user`, with `waiting` the (group, user) pairs still in
    /// line; returns the new tags. The waiting whose tags count other than they read (none
    /// yet, or more than a turn ahead) are given what they count as first: they were in line
    /// for this round as they stood, and stay so as the round moves on.
    fn charge<'k>(
        &mut self,
        group: &str,
        user: &str,
        bases: &Bases,
        waiting: impl Iterator<Item = (&'k str, &'k str)>,
    ) -> Vec<(String, u64)> {
        let weight = u64::from(self.share(group).weight.clamp(1, MAX_WEIGHT));
        let ((_, group_tag), user_tag) = self.rank(group, user, bases);
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for (g, u) in waiting {
            let user_base = bases.users.get(g).copied().unwrap_or(0);
            for (key, base) in [(u, user_base), (g, bases.group)] {
                let now = self.tag(key, base);
                if self.tags.get(key) != Some(&now) {
                    out.insert(key.to_owned(), now);
                }
            }
        }
        // (A user starting on their own is their own group: one tag, the group's.)
        if user != group {
            out.insert(user.to_owned(), user_tag + TURN);
        }
        out.insert(group.to_owned(), group_tag + TURN / weight);
        for (k, t) in &out {
            self.tags.insert(k.clone(), *t);
        }
        out.into_iter().collect()
    }
}

/// One user's line in one group, best last (popped from the end).
struct Line<'a> {
    group: String,
    user: String,
    starts: Vec<InLine<'a>>,
}

/// The lines with starts left: each one's index, and the arrival of its first.
fn waiting<'l, 'a>(lines: &'l [Line<'a>]) -> impl Iterator<Item = (usize, &'l Line<'a>, (i64, u64))> {
    lines.iter().enumerate().filter_map(|(i, l)| Some((i, l, l.starts.last()?.1)))
}

/// The deployment's order of the waiting starts, first first.
///
/// Groups (organizations, and users starting on their own) of a higher priority first; among
/// groups of one priority, weighted round robin by their tags ([`Turns`]): a group of weight 3
/// takes three turns to another's one. Then the users of a group in turn, and within one user,
/// by class (interactive first), then by arrival (when it was asked for, then the revision it
/// was queued at). `entries` carry that revision; `served` is each group's and user's tag;
/// `shares` the groups' shares. Ties go to the earlier arrival, so the order is the same
/// wherever it is computed from the same bucket.
pub fn fair_order(entries: &[(u64, &QueuedStart)], served: &HashMap<String, u64>, shares: &HashMap<String, Share>) -> Vec<SandboxId> {
    let mut by_line: BTreeMap<(String, String), Vec<InLine<'_>>> = BTreeMap::new();
    for (rev, e) in entries {
        by_line.entry((e.group(), user_scope(&e.owner))).or_default().push((e.terms.class, (e.arrival_us(), *rev), e));
    }
    let mut lines: Vec<Line<'_>> = by_line
        .into_iter()
        .map(|((group, user), mut starts)| {
            starts.sort_by_key(|(class, arrival, _)| (*class, *arrival));
            starts.reverse();
            Line { group, user, starts }
        })
        .collect();
    let mut turns = Turns { tags: served.clone(), shares };
    let mut order = Vec::with_capacity(entries.len());
    loop {
        let bases = turns.bases(waiting(&lines).map(|(_, l, _)| (l.group.as_str(), l.user.as_str())));
        // The group to serve: the least (-priority, tag), then the earliest arrival at the
        // head of one of its lines; then, in it, the user of the least tag, then arrival.
        let Some((_, group)) = waiting(&lines).map(|(_, l, head)| ((turns.rank(&l.group, &l.user, &bases).0, head), &l.group)).min() else {
            break;
        };
        let group = group.clone();
        let next =
            waiting(&lines).filter(|(_, l, _)| l.group == group).map(|(i, l, head)| ((turns.rank(&group, &l.user, &bases).1, head), i));
        let Some((_, i)) = next.min() else { break };
        let Some((_, _, e)) = lines[i].starts.pop() else { break };
        order.push(e.sandbox_id);
        let user = lines[i].user.clone();
        turns.charge(&group, &user, &bases, waiting(&lines).map(|(_, l, _)| (l.group.as_str(), l.user.as_str())));
    }
    order
}

/// The tags to write when `placed` leaves the line (`entries`: every waiting start): what
/// [`fair_order`] charges it, so the next order goes on with the round.
pub fn charge(
    placed: &QueuedStart,
    entries: &[&QueuedStart],
    served: &HashMap<String, u64>,
    shares: &HashMap<String, Share>,
) -> Vec<(String, u64)> {
    let keys: Vec<(String, String)> = entries.iter().chain(std::iter::once(&placed)).map(|e| (e.group(), user_scope(&e.owner))).collect();
    let mut turns = Turns { tags: served.clone(), shares };
    let bases = turns.bases(keys.iter().map(|(g, u)| (g.as_str(), u.as_str())));
    turns.charge(&placed.group(), &user_scope(&placed.owner), &bases, keys.iter().map(|(g, u)| (g.as_str(), u.as_str())))
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
            wake_on: None,
            snapshot: None,
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
        let none = HashMap::new();
        let order = fair_order(&entries, &HashMap::new(), &none);
        assert_eq!(owners(&order, &all), "a b c a b c a b c a");
        // Once a was served more than b, a goes last in the round (a turn behind, however many
        // more it had); c, never served, joins at b's turn (no turns saved up), after b who was
        // there first.
        let served = HashMap::from([("user:a".to_owned(), 7 * TURN), ("user:b".to_owned(), 3 * TURN)]);
        let order = fair_order(&entries, &served, &none);
        assert_eq!(owners(&order, &all), "b c a b c a b c a a");
        // The host that places the first charges it the turn the order did: placing the
        // starts one by one, charging each, gives the same order.
        let mut tags = served.clone();
        let mut left: Vec<&QueuedStart> = all.iter().collect();
        let mut placed = Vec::new();
        while !left.is_empty() {
            let entries: Vec<(u64, &QueuedStart)> =
                left.iter().map(|s| (all.iter().position(|a| a.sandbox_id == s.sandbox_id).unwrap() as u64 + 1, *s)).collect();
            let first = fair_order(&entries, &tags, &none)[0];
            let e = *left.iter().find(|s| s.sandbox_id == first).unwrap();
            tags.extend(charge(e, &left, &tags, &none));
            left.retain(|s| s.sandbox_id != first);
            placed.push(first);
        }
        assert_eq!(placed, order);
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
        let order = fair_order(&entries, &HashMap::new(), &HashMap::new());
        // Groups a, acme, z in turn; within acme, m1 and m2 in turn.
        assert_eq!(owners(&order, &all), "a m1 z a m2 a m1");
        let classes: Vec<StartClass> =
            order.iter().filter_map(|id| all.iter().find(|s| s.sandbox_id == *id && s.owner.0 == "a")).map(|s| s.terms.class).collect();
        assert_eq!(classes, [StartClass::Interactive, StartClass::Automation, StartClass::Batch]);
    }

    #[test]
    fn an_organizations_share_weighs_its_turns_and_its_priority_goes_first() {
        let mut all = Vec::new();
        for _ in 0..6 {
            all.push(start("m", Some("big"), StartClass::Interactive));
            all.push(start("s", Some("small"), StartClass::Interactive));
        }
        let entries: Vec<(u64, &QueuedStart)> = all.iter().enumerate().map(|(i, s)| (i as u64 + 1, s)).collect();
        let orgs = |o: &str| owners(&fair_order(&entries, &HashMap::new(), &HashMap::from([(org_group("big"), share(o))])), &all);
        fn share(o: &str) -> Share {
            match o {
                "weight 3" => Share { weight: 3, ..Share::default() },
                _ => Share { priority: 1, ..Share::default() },
            }
        }
        // Weight 3: three turns to the other's one, while both wait.
        assert_eq!(orgs("weight 3"), "m s m m m s m m s s s s");
        // A higher priority: all of its starts first.
        assert_eq!(orgs("priority 1"), "m m m m m m s s s s s s");
    }

    #[test]
    fn a_group_served_a_lot_earlier_is_not_held_back_for_it_later() {
        let all: Vec<QueuedStart> = ["a", "a", "a", "b", "b", "b"].iter().map(|o| start(o, None, StartClass::Interactive)).collect();
        let entries: Vec<(u64, &QueuedStart)> = all.iter().enumerate().map(|(i, s)| (i as u64 + 1, s)).collect();
        // a had a thousand turns last week, b ten: now they take turns (a one behind at most).
        let served = HashMap::from([("user:a".to_owned(), 1000 * TURN), ("user:b".to_owned(), 10 * TURN)]);
        assert_eq!(owners(&fair_order(&entries, &served, &HashMap::new()), &all), "b a b a b a");
        // Tags from before turns were counted (milliseconds since the epoch) count the same way.
        let served = HashMap::from([("user:a".to_owned(), 1_780_000_000_000), ("user:b".to_owned(), 3)]);
        assert_eq!(owners(&fair_order(&entries, &served, &HashMap::new()), &all), "b a b a b a");
    }

    #[test]
    fn keys_round_trip() {
        let id = SandboxId::new();
        assert_eq!(QueueKey::parse(&queued_key(id)), Some(QueueKey::Queued(id)));
        assert_eq!(QueueKey::parse(&claim_key(id)), Some(QueueKey::Claim(id)));
        assert_eq!(QueueKey::parse(&served_key("user:é b")), Some(QueueKey::Served("user:é b".into())));
        assert_eq!(QueueKey::parse(&share_key(&org_group("acme"))), Some(QueueKey::Share("org:acme".into())));
        let seat = seat_key(&user_scope(&UserId("a b".into())), 3);
        assert!(seat.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'), "{seat}");
        assert_eq!(QueueKey::parse(&seat), Some(QueueKey::Seat { scope: "user:a b".into(), n: 3 }));
    }
}
