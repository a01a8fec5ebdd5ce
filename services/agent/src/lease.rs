//! Run leases: which agent runner runs a conversation. One key per live run in the
//! `halyard_agent_leases` bucket, written only with compare-and-set on its revision, so two
//! runners can never both believe they hold it: the one whose write lands first wins, the other
//! is told so and stands back.
//!
//! Liveness is judged by revisions, not clocks: the holder rewrites its lease every quarter of
//! the lease time, and another runner counts a lease dead once it has seen the same revision
//! for a whole lease time on its own monotonic clock (so skewed clocks across machines do not
//! matter). A runner that stops cleanly hands its leases over at once instead of letting them
//! age.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use halyard_protocol::ConversationId;

/// How long the marker of a released lease stays (then its key is gone from the bucket).
const MARKER_TTL: Duration = Duration::from_secs(60);

/// A lease's value: `<node> <ms>`; `<ms>` is 0 once the holder handed the run over.
fn value(node: &str, handed_over: bool) -> bytes::Bytes {
    let at = if handed_over { 0 } else { halyard_platform::now_ms() };
    bytes::Bytes::from(format!("{node} {at}"))
}

/// What a lease's value says: its holder, and whether it was handed over.
pub fn parse(value: &[u8]) -> Option<(String, bool)> {
    let text = std::str::from_utf8(value).ok()?;
    let (node, at) = text.split_once(' ')?;
    Some((node.to_owned(), at.parse::<i64>().ok()? == 0))
}

/// A lease as a sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub conv: ConversationId,
    pub node: String,
    pub handed_over: bool,
    pub revision: u64,
}

/// Holder and hand-over flag of an entry that holds a lease (not a deletion).
fn holding(entry: &kv::Entry) -> Option<(String, bool)> {
    (entry.operation == kv::Operation::Put).then(|| parse(&entry.value)).flatten()
}

/// A lease this runner holds, at the revision it last wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held(pub u64);

/// The answer to "may I run this conversation?".
#[derive(Debug)]
pub enum Acquire {
    /// Yours, at this revision.
    Held(Held),
    /// Another runner holds it and is alive (as far as anyone can tell yet).
    Busy { node: String },
}

/// The lease bucket as one runner uses it.
pub struct Leases {
    js: async_nats::jetstream::Context,
    kv: kv::Store,
    node: String,
    ttl: Duration,
}

impl Leases {
    pub fn new(js: async_nats::jetstream::Context, kv: kv::Store, node: String, ttl: Duration) -> Self {
        Self { js, kv, node, ttl }
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// How often a holder rewrites its lease.
    pub fn renew_every(&self) -> Duration {
        (self.ttl / 4).max(Duration::from_millis(100))
    }

    /// How often runners look for dead holders.
    pub fn sweep_every(&self) -> Duration {
        (self.ttl / 2).max(Duration::from_millis(100))
    }

    /// Takes the lease unless a live runner holds it. A lease of this node's (left by its
    /// previous life, or by a run of this actor) is taken back. `released`: the revision of the
    /// marker this node's last [`release`](Self::release) left, if it knows one: while nobody
    /// wrote the key since, the lease is taken in one write (a create over a marker is a failed
    /// create, a read and an update: three round trips a message otherwise).
    pub async fn acquire(&self, conv: ConversationId, released: Option<u64>) -> Result<Acquire, kv::UpdateError> {
        let key = conv.to_string();
        if let Some(marker) = released {
            if let Ok(held) = self.take(conv, marker).await {
                return Ok(Acquire::Held(held));
            }
        }
        for _ in 0..4 {
            match self.kv.create(&key, value(&self.node, false)).await {
                Ok(rev) => return Ok(Acquire::Held(Held(rev))),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(e) => return Err(kv::UpdateError::with_source(kv::UpdateErrorKind::Other, e)),
            }
            let entry = self.kv.entry(&key).await.map_err(|e| kv::UpdateError::with_source(kv::UpdateErrorKind::Other, e))?;
            let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else { continue };
            match parse(&entry.value) {
                Some((node, handed_over)) if node != self.node && !handed_over => return Ok(Acquire::Busy { node }),
                _ => match self.take(conv, entry.revision).await {
                    Ok(held) => return Ok(Acquire::Held(held)),
                    // Someone wrote in between: look again.
                    Err(_) => continue,
                },
            }
        }
        Err(kv::UpdateError::new(kv::UpdateErrorKind::WrongLastRevision))
    }

    /// Takes over a lease last seen at `revision`; fails if anyone wrote it since.
    pub async fn take(&self, conv: ConversationId, revision: u64) -> Result<Held, kv::UpdateError> {
        self.kv.update(conv.to_string(), value(&self.node, false), revision).await.map(Held)
    }

    /// Renews a held lease; fails once it is no longer ours (another runner took it over).
    pub async fn renew(&self, conv: ConversationId, held: Held) -> Result<Held, kv::UpdateError> {
        self.take(conv, held.0).await
    }

    /// Lets go of a held lease: the run ended. The key is purged with a marker that expires
    /// ([`MARKER_TTL`]), so the bucket keeps no trace of runs long over. The marker's revision,
    /// for the next [`acquire`](Self::acquire); `None` if the lease was gone or taken over.
    /// (The purge is the client's `purge_expect_revision_with_ttl`, written out for the
    /// revision it does not return.)
    pub async fn release(&self, conv: ConversationId, held: Held) -> Option<u64> {
        use async_nats::HeaderValue;
        use async_nats::header::{NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, NATS_MESSAGE_TTL, NATS_ROLLUP};
        if self.kv.use_jetstream_prefix {
            // (A bucket reached through another domain: the client's own purge, no revision.)
            if let Err(e) = self.kv.purge_expect_revision_with_ttl(conv.to_string(), held.0, MARKER_TTL).await {
                tracing::debug!(conversation_id = %conv, error = %e, "lease already gone or taken over");
            }
            return None;
        }
        let subject = format!("{}{conv}", self.kv.put_prefix.as_ref().unwrap_or(&self.kv.prefix));
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("KV-Operation", "PURGE");
        headers.insert(NATS_ROLLUP, "sub");
        headers.insert(NATS_MESSAGE_TTL, HeaderValue::from(MARKER_TTL.as_secs()));
        headers.insert(NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, HeaderValue::from(held.0));
        let purged = match self.js.publish_with_headers(subject, headers, bytes::Bytes::new()).await {
            Ok(ack) => ack.await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match purged {
            Ok(ack) => Some(ack.sequence),
            Err(e) => {
                tracing::debug!(conversation_id = %conv, error = %e, "lease already gone or taken over");
                None
            }
        }
    }

    /// Gives a live run to whichever runner sweeps next (this one is stopping).
    pub async fn hand_over(&self, conv: ConversationId, held: Held) {
        if let Err(e) = self.kv.update(conv.to_string(), value(&self.node, true), held.0).await {
            tracing::debug!(conversation_id = %conv, error = %e, "lease already taken over");
        }
    }

    /// The runner holding a live lease on `conv`, if any (a handed-over lease has none).
    pub async fn holder(&self, conv: ConversationId) -> Option<String> {
        let entry = self.kv.entry(conv.to_string()).await.ok()??;
        holding(&entry).filter(|(_, handed_over)| !handed_over).map(|(node, _)| node)
    }

    /// Every lease with its holder and revision. The keys come from the stream's subjects (one
    /// request), not from a consumer: a sweep every few seconds would otherwise leave a trail
    /// of ephemeral consumers in the server.
    pub async fn all(&self) -> Vec<Seen> {
        use futures::TryStreamExt;
        let mut out = Vec::new();
        let Ok(subjects) = self.kv.stream.info_with_subjects(format!("{}>", self.kv.prefix)).await else { return out };
        let Ok(subjects) = subjects.try_collect::<Vec<(String, usize)>>().await else { return out };
        let keys = subjects.into_iter().filter_map(|(subject, _)| subject.strip_prefix(&self.kv.prefix).map(str::to_owned));
        for key in keys {
            let Ok(id) = key.parse::<ConversationId>() else { continue };
            let Ok(Some(entry)) = self.kv.entry(&key).await else { continue };
            if let Some((node, handed_over)) = holding(&entry) {
                out.push(Seen { conv: id, node, handed_over, revision: entry.revision });
            }
        }
        out
    }
}

/// A sweeper's memory of the leases it saw: a lease is dead once its revision stayed the same
/// for a whole lease time, measured here.
#[derive(Default)]
pub struct Watch {
    seen: HashMap<ConversationId, (u64, Instant)>,
}

impl Watch {
    /// The leases to take over now, with the revision to take them at: handed over, dead, or
    /// (on the first sweep after a start) left by this node's previous life.
    pub fn dead(&mut self, leases: Vec<Seen>, me: &str, first: bool, ttl: Duration) -> Vec<(ConversationId, u64)> {
        let now = Instant::now();
        let mut dead = Vec::new();
        let mut seen = HashMap::new();
        for Seen { conv: id, node, handed_over, revision: rev } in leases {
            let since = match self.seen.get(&id) {
                Some((r, since)) if *r == rev => *since,
                _ => now,
            };
            seen.insert(id, (rev, since));
            let mine_before = first && node == me;
            if handed_over || mine_before || (node != me && now.duration_since(since) >= ttl) {
                dead.push((id, rev));
            }
        }
        self.seen = seen;
        dead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_dead_after_a_lease_time_without_a_new_revision() {
        let a = ConversationId::new();
        let b = ConversationId::new();
        let mut w = Watch::default();
        let ttl = Duration::from_millis(50);
        let seen = |conv, node: &str, handed_over, revision| Seen { conv, node: node.to_owned(), handed_over, revision };
        let leases = |rev_b| vec![seen(a, "other", false, 1), seen(b, "other", false, rev_b)];
        assert!(w.dead(leases(1), "me", false, ttl).is_empty(), "nothing is dead at first sight");
        std::thread::sleep(Duration::from_millis(60));
        // b renewed in between, a did not.
        assert_eq!(w.dead(leases(2), "me", false, ttl), vec![(a, 1)]);
        let handed = vec![seen(a, "other", true, 3)];
        assert_eq!(w.dead(handed, "me", false, ttl), vec![(a, 3)], "a handed-over lease is taken at once");
        let mine = vec![seen(b, "me", false, 4)];
        assert_eq!(w.dead(mine.clone(), "me", true, ttl), vec![(b, 4)], "a previous life's lease is taken back at start");
        assert!(w.dead(mine, "me", false, ttl).is_empty(), "one's own live lease is never dead");
    }

    #[test]
    fn values_round_trip() {
        assert_eq!(parse(&value("n1", false)), Some(("n1".into(), false)));
        assert_eq!(parse(&value("n1", true)), Some(("n1".into(), true)));
        assert_eq!(parse(b"garbage"), None);
    }
}
