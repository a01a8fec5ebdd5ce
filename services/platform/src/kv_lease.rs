//! A short lease on a key of a key-value bucket, for work that must not run twice at once across
//! processes (a refresh of an MCP sign-in's tokens: a provider that rotates refresh tokens
//! refuses one used twice, and may revoke the grant for it).
//!
//! The lease is the key itself, made with `create` (which succeeds for one taker only). Its value
//! is the time it lapses, so a holder that died is passed over once that time is gone, by a
//! compare-and-set on the revision it was seen at (only one waiter wins that too). Dropping the
//! lease deletes the key, at the revision it was taken at: a lease another process took over
//! meanwhile is left alone.

use std::time::Duration;

use async_nats::jetstream::kv;

use crate::{BusError, BusErrorKind};

/// How often a waiter looks again whether the lease is free.
const POLL: Duration = Duration::from_millis(100);

/// A lease held on `key` until dropped (or until it lapses).
pub struct KvLease {
    kv: kv::Store,
    key: String,
    revision: u64,
}

impl KvLease {
    /// Waits until the lease on `key` is free (or its holder's has lapsed) and takes it for
    /// `hold`. Gives up after `patience`, with a [`BusErrorKind::Conflict`].
    pub async fn take(kv: &kv::Store, key: &str, hold: Duration, patience: Duration) -> Result<Self, BusError> {
        let deadline = tokio::time::Instant::now() + patience;
        let hold_ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX / 4);
        loop {
            let until = (crate::now_ms() + hold_ms).to_string();
            match kv.create(key, until.clone().into()).await {
                Ok(revision) => return Ok(Self { kv: kv.clone(), key: key.to_owned(), revision }),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(e) => return Err(BusError::new(BusErrorKind::Publish, e)),
            }
            // Held: by a live holder (wait), or by one that died holding it (take it over).
            let entry = kv.entry(key).await.map_err(|e| BusError::new(BusErrorKind::Read, e))?;
            if let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) {
                let lapsed = std::str::from_utf8(&entry.value).ok().and_then(|v| v.parse::<i64>().ok()).is_none_or(|t| t < crate::now_ms());
                if lapsed && let Ok(revision) = kv.update(key, until.into(), entry.revision).await {
                    return Ok(Self { kv: kv.clone(), key: key.to_owned(), revision });
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(BusError::new(BusErrorKind::Conflict, format!("the lease {key} stayed taken")));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for KvLease {
    /// Lets go of the lease in the background: a drop cannot wait, and a lease left behind
    /// lapses anyway.
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (kv, key, revision) = (self.kv.clone(), std::mem::take(&mut self.key), self.revision);
        runtime.spawn(async move {
            let _ = kv.delete_expect_revision(&key, Some(revision)).await;
        });
    }
}
