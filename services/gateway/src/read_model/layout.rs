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
//! | `A` | inverted time, inverted stream sequence | [`AuditRow`](super::rows::AuditRow) (JSON) |
//! | `V` | user, 0, day (days since the epoch, big-endian), model | [`UsageRow`](super::store::UsageRow) (JSON) |
//! | `W` | organization, 0, user, 0, day, model | [`UsageRow`](super::store::UsageRow) of the organization's conversations (JSON) |
//! | `w` | webhook, 0, inverted time, delivery id, attempt | [`AttemptRow`](super::rows::AttemptRow) (JSON) |
//! | `x` | webhook, 0, delivery id | the delivery's latest [`AttemptRow`](super::rows::AttemptRow) (JSON) |
//! | `r` | automation, 0, inverted time, run id | [`RunRow`](super::rows::RunRow) (JSON) |
//! | `q` | automation | its latest [`RunRow`](super::rows::RunRow) (JSON) |

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
    k.extend_from_slice(&(time_ms.div_euclid(DAY_MS).max(0) as u32).to_be_bytes());
    k.extend_from_slice(model.as_bytes());
    k
}

/// The usage rows of organization `org`'s conversations.
pub fn org_usage_prefix(org: &str) -> Vec<u8> {
    let mut k = vec![b'W'];
    k.extend_from_slice(org.as_bytes());
    k.push(0);
    k
}

/// The row of `user`'s conversations in `org` on the day of `time_ms` for `model`.
pub fn org_usage_key(org: &str, user: &str, time_ms: i64, model: &str) -> Vec<u8> {
    let mut k = org_usage_prefix(org);
    k.extend_from_slice(&usage_key(user, time_ms, model)[1..]);
    k
}

/// A usage key's user, day (the millisecond it begins) and model, whether a user's (`V`) or an
/// organization's (`W`).
pub fn any_usage_parts(key: &[u8]) -> Option<(String, i64, String)> {
    match key.first() {
        Some(b'V') => usage_parts(key),
        Some(b'W') => {
            let zero = key.iter().position(|b| *b == 0)?;
            let mut rest = vec![b'V'];
            rest.extend_from_slice(&key[zero + 1..]);
            usage_parts(&rest)
        }
        _ => None,
    }
}

/// A usage key's user, day (the millisecond it begins) and model.
pub fn usage_parts(key: &[u8]) -> Option<(String, i64, String)> {
    let rest = key.strip_prefix(b"V")?;
    let zero = rest.iter().position(|b| *b == 0)?;
    let user = String::from_utf8(rest[..zero].to_vec()).ok()?;
    let day = u32::from_be_bytes(rest.get(zero + 1..zero + 5)?.try_into().ok()?);
    let model = String::from_utf8(rest[zero + 5..].to_vec()).ok()?;
    Some((user, i64::from(day) * DAY_MS, model))
}

/// Audit records, newest first.
pub const AUDIT_PREFIX: &[u8] = b"A";

/// Just past the last audit record (the prefix's successor: times inverted begin with 0xff).
pub const AUDIT_END: &[u8] = b"B";

/// Where the audit records of `time_ms` and before begin.
pub fn audit_time_prefix(time_ms: i64) -> Vec<u8> {
    let mut k = AUDIT_PREFIX.to_vec();
    k.extend_from_slice(&(u64::MAX - time_ms.max(0) as u64).to_be_bytes());
    k
}

/// An audit record's key: newest first by time, then by the stream's order within a millisecond.
pub fn audit_key(time_ms: i64, seq: u64) -> Vec<u8> {
    let mut k = audit_time_prefix(time_ms);
    k.extend_from_slice(&(u64::MAX - seq).to_be_bytes());
    k
}

/// The time of an audit record's key.
pub fn audit_time(key: &[u8]) -> i64 {
    let mut inverted = [0u8; 8];
    if let Some(b) = key.get(AUDIT_PREFIX.len()..AUDIT_PREFIX.len() + 8) {
        inverted.copy_from_slice(b);
    }
    (u64::MAX - u64::from_be_bytes(inverted)) as i64
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
        assert_eq!(usage_parts(&k), Some(("alice".to_owned(), day, "gpt-4o".to_owned())));
        assert!(k.starts_with(&usage_prefix("alice")) && !k.starts_with(&usage_prefix("alic")));
        assert!(usage_key("alice", day, "") < usage_key("alice", day + DAY_MS, ""), "days sort in order");
        let o = org_usage_key("acme", "bob", day, "m");
        assert!(o.starts_with(&org_usage_prefix("acme")) && !o.starts_with(&org_usage_prefix("acm")));
        assert_eq!(any_usage_parts(&o), Some(("bob".to_owned(), day, "m".to_owned())));
    }
}
