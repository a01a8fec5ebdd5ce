//! Where each row of the read models is kept: one sled tree, one prefix byte per kind of row,
//! and keys that sort the way lists are read (newest first where a list is newest first).
//!
//! | prefix | key | value |
//! |---|---|---|
//! | `c` | conversation id | [`ConversationView`](super::store::ConversationView) (JSON) |
//! | `o` | owner, 0, inverted creation time, conversation id | conversation id |
//! | `t` | task id | [`TaskView`](super::store::TaskView) (JSON) |
//! | `l` | conversation id, seq (big-endian), for seq = 1, 1 + stride, ... | stream sequence (big-endian u64) |
//! | `m` | name | cursor (big-endian u64) |
//! | `s` | sandbox id | [`SandboxView`](super::store::SandboxView) (JSON) |
//! | `u` | owner, 0, inverted creation time, sandbox id | sandbox id |
//! | `g` | organization, 0, inverted creation time, conversation id | conversation id, shared with the organization |
//! | `A` | inverted time, inverted stream sequence | [`AuditRow`](super::rows::AuditRow) (JSON) |
//! | `a` | organization, 0, inverted time, inverted stream sequence | a copy of the organization's `A` rows |
//! | `V` | user, 0, day (days since the epoch, big-endian), model | [`UsageRow`](super::store::UsageRow) (JSON) |
//! | `X` | organization, 0, day, user, 0, model | [`UsageRow`](super::store::UsageRow) of the organization's conversations (JSON) |
//! | `Y` | day, user, 0, model | a copy of the `V` row, for the deployment's reports |
//! | `d` | conversation id | a deleted conversation's tombstone |
//! | `w` | webhook, 0, inverted time, delivery id, attempt | [`AttemptRow`](super::rows::AttemptRow) (JSON) |
//! | `x` | webhook, 0, delivery id | the delivery's latest [`AttemptRow`](super::rows::AttemptRow) (JSON) |
//! | `r` | automation, 0, inverted time, run id | [`RunRow`](super::rows::RunRow) (JSON) |
//! | `q` | automation | its latest [`RunRow`](super::rows::RunRow) (JSON) |
//! | `n` | conversation id | [`NetworkRow`](super::rows::NetworkRow): what it reached through its egress proxy (JSON) |
//!
//! The indexes (`o`, `u`, `g`, `a`, `X`, `Y`) exist so that every list and report reads its own
//! rows only: its cost follows what it answers, not the deployment's size. Stores written
//! before `g`, `a`, `X` and `Y` existed get them when opened ([`super::store::Store::open`]).

use halyard_protocol::{ConversationId, SandboxId, TaskId};

/// `prefix` then a 16-byte id.
pub fn id_key(prefix: u8, id: &[u8; 16]) -> Vec<u8> {
    let mut k = vec![prefix];
    k.extend_from_slice(id);
    k
}

/// An owner's index: `prefix`, owner, 0.
pub fn index_prefix(prefix: u8, owner: &str) -> Vec<u8> {
    let mut k = vec![prefix];
    k.extend_from_slice(owner.as_bytes());
    k.push(0);
    k
}

/// An owner's index entry, newest first: inverted time, so a forward scan starts at the newest.
pub fn index_key(prefix: u8, owner: &str, created_ms: i64, id: &[u8; 16]) -> Vec<u8> {
    let mut k = index_prefix(prefix, owner);
    k.extend_from_slice(&(u64::MAX - created_ms.max(0) as u64).to_be_bytes());
    k.extend_from_slice(id);
    k
}

pub fn conv_key(id: ConversationId) -> Vec<u8> {
    id_key(b'c', id.as_bytes())
}

pub fn task_key(id: TaskId) -> Vec<u8> {
    id_key(b't', id.as_bytes())
}

pub fn owner_prefix(owner: &str) -> Vec<u8> {
    index_prefix(b'o', owner)
}

pub fn owner_key(owner: &str, created_ms: i64, id: ConversationId) -> Vec<u8> {
    index_key(b'o', owner, created_ms, id.as_bytes())
}

/// Every [`LOG_INDEX_STRIDE`]th event (seq 1, 1 + stride, ...) has its stream sequence indexed.
pub const LOG_INDEX_STRIDE: u64 = 128;

/// Events copied here by earlier versions (prefix `e`), removed when the store is opened.
pub const LEGACY_EVENT_PREFIX: u8 = b'e';

pub fn log_index_prefix(id: ConversationId) -> Vec<u8> {
    id_key(b'l', id.as_bytes())
}

pub fn log_index_key(id: ConversationId, seq: u64) -> Vec<u8> {
    let mut k = log_index_prefix(id);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Delivery attempts of a webhook, newest first.
pub fn attempt_prefix(webhook: &str) -> Vec<u8> {
    let mut k = vec![b'w'];
    k.extend_from_slice(webhook.as_bytes());
    k.push(0);
    k
}

pub fn attempt_key(webhook: &str, time_ms: i64, delivery: halyard_protocol::CommandId, attempt: u32) -> Vec<u8> {
    let mut k = attempt_prefix(webhook);
    k.extend_from_slice(&(u64::MAX - time_ms.max(0) as u64).to_be_bytes());
    k.extend_from_slice(delivery.as_bytes());
    k.extend_from_slice(&attempt.to_be_bytes());
    k
}

/// Runs of an automation, newest first.
pub fn run_prefix(automation: &str) -> Vec<u8> {
    let mut k = vec![b'r'];
    k.extend_from_slice(automation.as_bytes());
    k.push(0);
    k
}

pub fn run_key(automation: &str, time_ms: i64, run: &str) -> Vec<u8> {
    let mut k = run_prefix(automation);
    k.extend_from_slice(&(u64::MAX - time_ms.max(0) as u64).to_be_bytes());
    k.extend_from_slice(run.as_bytes());
    k
}

pub const DAY_MS: i64 = 86_400_000;

/// The usage rows of `user`.
pub fn usage_prefix(user: &str) -> Vec<u8> {
    let mut k = vec![b'V'];
    k.extend_from_slice(user.as_bytes());
    k.push(0);
    k
}

/// The usage row of `user` on the day of `time_ms` for `model`.
pub fn usage_key(user: &str, time_ms: i64, model: &str) -> Vec<u8> {
    let mut k = usage_prefix(user);
    k.extend_from_slice(&day_of(time_ms).to_be_bytes());
    k.extend_from_slice(model.as_bytes());
    k
}

/// The rows of `user`'s conversations in `org` on the day of `time_ms` for `model`, where the
/// organization's reports read them (`X`, org, 0, day, user, 0, model).
pub fn org_usage_key(org: &str, user: &str, time_ms: i64, model: &str) -> Vec<u8> {
    let mut k = index_prefix(b'X', org);
    push_day_user_model(&mut k, user, time_ms, model);
    k
}

/// `user`'s row on the day of `time_ms` for `model`, where the deployment's reports read it
/// (`Y`, day, user, 0, model): a copy of the `V` row ordered by day first.
pub fn all_usage_key(user: &str, time_ms: i64, model: &str) -> Vec<u8> {
    let mut k = vec![b'Y'];
    push_day_user_model(&mut k, user, time_ms, model);
    k
}

fn push_day_user_model(k: &mut Vec<u8>, user: &str, time_ms: i64, model: &str) {
    k.extend_from_slice(&day_of(time_ms).to_be_bytes());
    k.extend_from_slice(user.as_bytes());
    k.push(0);
    k.extend_from_slice(model.as_bytes());
}

/// Days since the epoch.
pub fn day_of(time_ms: i64) -> u32 {
    time_ms.div_euclid(DAY_MS).max(0) as u32
}

/// Where a usage report reads: one user's rows (`V`), one organization's (`X`) or the
/// deployment's (`Y`). Each is ordered by day right after its owner, so a report over some
/// days reads those days' rows and nothing else, however long the history or how many users.
pub enum UsageScope<'a> {
    User(&'a str),
    Org(&'a str),
    All,
}

impl UsageScope<'_> {
    fn prefix(&self) -> Vec<u8> {
        match self {
            Self::User(user) => usage_prefix(user),
            Self::Org(org) => index_prefix(b'X', org),
            Self::All => vec![b'Y'],
        }
    }

    /// The keys of the days from `first` up to `end` (days since the epoch, `end` excluded).
    pub fn days(&self, first: u32, end: u32) -> std::ops::Range<Vec<u8>> {
        let prefix = self.prefix();
        let at = |day: u32| {
            let mut k = prefix.clone();
            k.extend_from_slice(&day.to_be_bytes());
            k
        };
        at(first)..at(end.max(first))
    }

    /// A key's user, day (the millisecond it begins) and model.
    pub fn parts(&self, key: &[u8]) -> Option<(String, i64, String)> {
        let rest = key.strip_prefix(self.prefix().as_slice())?;
        let day = i64::from(u32::from_be_bytes(rest.get(..4)?.try_into().ok()?)) * DAY_MS;
        let rest = &rest[4..];
        let (user, model) = match self {
            Self::User(user) => ((*user).to_owned(), rest),
            Self::Org(_) | Self::All => {
                let zero = rest.iter().position(|b| *b == 0)?;
                (String::from_utf8(rest[..zero].to_vec()).ok()?, &rest[zero + 1..])
            }
        };
        Some((user, day, String::from_utf8(model.to_vec()).ok()?))
    }
}

/// Where the shared-with-organization index lists `org`'s conversations (`g`, org, 0).
pub fn org_shared_prefix(org: &str) -> Vec<u8> {
    index_prefix(b'g', org)
}

/// A conversation shared with `org`, newest first.
pub fn org_shared_key(org: &str, created_ms: i64, id: ConversationId) -> Vec<u8> {
    index_key(b'g', org, created_ms, id.as_bytes())
}

/// Audit records, newest first.
pub const AUDIT_PREFIX: &[u8] = b"A";

/// Where a read of the audit trail looks: every record (`A`), or one organization's copies of
/// its own (`a`, organization, 0), so that its owners' reads and exports never walk the
/// deployment's. Both are keyed alike after the prefix: newest first by time, then by the
/// stream's order within a millisecond.
pub struct AuditScope {
    prefix: Vec<u8>,
}

impl AuditScope {
    /// The deployment's whole trail.
    pub fn all() -> Self {
        Self { prefix: AUDIT_PREFIX.to_vec() }
    }

    /// Organization `org`'s records.
    pub fn org(org: &str) -> Self {
        Self { prefix: index_prefix(b'a', org) }
    }

    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// Just past the scope's last key (its prefix's last byte plus one: for `a`, org, 0 that
    /// is org, 1, which no other organization's name begins with as no name holds a 0).
    pub fn end(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        if let Some(last) = k.last_mut() {
            *last += 1;
        }
        k
    }

    /// Where the records of `time_ms` and before begin.
    pub fn at(&self, time_ms: i64) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(&(u64::MAX - time_ms.max(0) as u64).to_be_bytes());
        k
    }

    /// The key of the record at `time_ms`, the `seq`-th of its stream.
    pub fn key(&self, time_ms: i64, seq: u64) -> Vec<u8> {
        let mut k = self.at(time_ms);
        k.extend_from_slice(&(u64::MAX - seq).to_be_bytes());
        k
    }

    /// This scope's key of the record that `all_key` (a key of [`Self::all`]) names.
    pub fn same_record(&self, all_key: &[u8]) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(all_key.get(AUDIT_PREFIX.len()..).unwrap_or_default());
        k
    }

    /// The time of one of the scope's keys.
    pub fn time(&self, key: &[u8]) -> i64 {
        let n = self.prefix.len();
        let inverted = key.get(n..n + 8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map_or(0, u64::from_be_bytes);
        (u64::MAX - inverted) as i64
    }
}

/// The latest run of an automation.
pub fn last_run_key(automation: &str) -> Vec<u8> {
    let mut k = vec![b'q'];
    k.extend_from_slice(automation.as_bytes());
    k
}

/// The latest attempt of one delivery.
pub fn last_attempt_key(webhook: &str, delivery: halyard_protocol::CommandId) -> Vec<u8> {
    let mut k = vec![b'x'];
    k.extend_from_slice(webhook.as_bytes());
    k.push(0);
    k.extend_from_slice(delivery.as_bytes());
    k
}

/// What a conversation reached through its egress proxy.
pub fn network_key(id: ConversationId) -> Vec<u8> {
    id_key(b'n', id.as_bytes())
}

pub fn sandbox_key(id: SandboxId) -> Vec<u8> {
    id_key(b's', id.as_bytes())
}

pub fn sandbox_owner_prefix(owner: &str) -> Vec<u8> {
    index_prefix(b'u', owner)
}

pub fn sandbox_owner_key(owner: &str, created_ms: i64, id: SandboxId) -> Vec<u8> {
    index_key(b'u', owner, created_ms, id.as_bytes())
}

pub fn meta_key(name: &str) -> Vec<u8> {
    let mut k = vec![b'm'];
    k.extend_from_slice(name.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_keys_name_their_user_day_and_model() {
        let day = 20_419 * DAY_MS;
        let k = usage_key("alice", day + 5_000, "gpt-4o");
        assert_eq!(UsageScope::User("alice").parts(&k), Some(("alice".to_owned(), day, "gpt-4o".to_owned())));
        assert!(k.starts_with(&usage_prefix("alice")) && !k.starts_with(&usage_prefix("alic")));
        assert!(usage_key("alice", day, "") < usage_key("alice", day + DAY_MS, ""), "days sort in order");
        let o = org_usage_key("acme", "bob", day, "m");
        assert_eq!(UsageScope::Org("acme").parts(&o), Some(("bob".to_owned(), day, "m".to_owned())));
        assert_eq!(UsageScope::Org("acm").parts(&o), None, "another organization's prefix");
        let y = all_usage_key("bob", day, "m");
        assert_eq!(UsageScope::All.parts(&y), Some(("bob".to_owned(), day, "m".to_owned())));
    }

    #[test]
    fn a_report_over_some_days_reads_only_their_keys() {
        let d: u32 = 20_419;
        let ms = |day: u32| i64::from(day) * DAY_MS;
        let range = UsageScope::Org("acme").days(d, d + 2);
        let inside = [org_usage_key("acme", "zed", ms(d), "zz"), org_usage_key("acme", "", ms(d + 1) + 1, "")];
        let outside =
            [org_usage_key("acme", "a", ms(d - 1), "m"), org_usage_key("acme", "", ms(d + 2), ""), org_usage_key("acmf", "a", ms(d), "")];
        assert!(inside.iter().all(|k| range.contains(k)));
        assert!(outside.iter().all(|k| !range.contains(k)));
        let mine = UsageScope::User("al").days(d, d + 1);
        assert!(mine.contains(&usage_key("al", ms(d), "m")) && !mine.contains(&usage_key("al", ms(d + 1), "")));
    }

    #[test]
    fn an_organizations_audit_keys_stay_in_its_scope() {
        let acme = AuditScope::org("acme");
        let k = acme.key(1_700_000_000_000, 9);
        assert_eq!(acme.time(&k), 1_700_000_000_000);
        assert!(acme.at(1_800_000_000_000) < k && k < acme.at(1_600_000_000_000), "newest first");
        assert!(k.as_slice() < acme.end().as_slice());
        let longer = AuditScope::org("acme2").key(1_700_000_000_000, 9);
        assert!(!(acme.prefix()..acme.end().as_slice()).contains(&longer.as_slice()), "acme2 is not acme's");
        assert!(AuditScope::all().key(5, 1) < AuditScope::all().end());
    }
}
