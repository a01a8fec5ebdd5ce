//! The environment snapshot bucket as this supervisor uses it ([`Snapshots`]): its entries, and
//! the snapshots being made here (their files exist before their entry, so the sweep in
//! [`crate::snapshots`] leaves them alone), and a signal that a sandbox started from one is gone.
//! Apart from [`crate::snapshots`] so that the shared
//! context can hold it without importing what uses the context.

use std::collections::HashSet;
use std::sync::Mutex;

use async_nats::jetstream::kv;
use halyard_protocol::environment::Snapshot;

/// The snapshots of this host: the bucket, and those being made (whose files exist before
/// their entry does, so the sweep leaves them alone).
pub struct Snapshots {
    pub kv: kv::Store,
    making: Mutex<HashSet<String>>,
    /// A sandbox started from a snapshot was deleted: a deleted snapshot it held back may go now.
    pub freed: tokio::sync::Notify,
}

impl Snapshots {
    pub fn new(kv: kv::Store) -> Self {
        Self { kv, making: Mutex::new(HashSet::new()), freed: tokio::sync::Notify::new() }
    }

    pub(crate) fn begin(&self, id: &str) {
        self.making.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_owned());
    }

    pub(crate) fn end(&self, id: &str) {
        self.making.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }

    pub(crate) fn is_making(&self, id: &str) -> bool {
        self.making.lock().unwrap_or_else(|e| e.into_inner()).contains(id)
    }

    /// Every entry whose key matches `filter`.
    pub async fn entries(&self, filter: &str) -> Result<Vec<(String, Snapshot)>, String> {
        halyard_platform::snapshots::list(&self.kv, filter).await
    }
}
