//! A key-value bucket's entries under one prefix, kept in memory and followed: every process
//! that needs all of them (the gateways answering hooks, the automation services running
//! schedules) reads its own copy instead of asking the server per request, and sees a change
//! made through another process as soon as it reaches it.
//!
//! Watch first, then load: nothing written in between is missed, and revisions keep an older
//! value from replacing a newer one. A watch that ends is followed again from a fresh load.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::{BusError, BusErrorKind, Shutdown};

/// A key's last known revision, and its value (none once deleted).
type Known<T> = (u64, Option<Arc<T>>);

struct Inner<T> {
    store: kv::Store,
    prefix: String,
    /// Key (without the prefix) to revision and value; a deletion keeps its revision, valueless.
    entries: RwLock<HashMap<String, Known<T>>>,
    /// Bumped on every change, for whoever waits on one.
    changes: watch::Sender<u64>,
}

/// The entries of `store` whose keys start with `prefix`, decoded as `T` (JSON).
pub struct Mirror<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for Mirror<T> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<T: DeserializeOwned + Send + Sync + 'static> Mirror<T> {
    /// Loads the entries and follows the bucket until `shutdown`.
    pub async fn follow(store: kv::Store, prefix: &str, shutdown: Shutdown) -> Result<Self, BusError> {
        let (changes, _) = watch::channel(0);
        let me = Self { inner: Arc::new(Inner { store, prefix: prefix.to_owned(), entries: RwLock::new(HashMap::new()), changes }) };
        let watch = me.load().await.map_err(|e| BusError::new(BusErrorKind::Read, e))?;
        let follower = me.clone();
        tokio::spawn(async move { follower.keep_following(watch, shutdown).await });
        Ok(me)
    }

    async fn load(&self) -> Result<kv::Watch, String> {
        let filter = format!("{}>", self.inner.prefix);
        let watch = self.inner.store.watch(&filter).await.map_err(|e| e.to_string())?;
        let mut keys = self.inner.store.keys().await.map_err(|e| e.to_string())?;
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| e.to_string())?;
            if !key.starts_with(&self.inner.prefix) {
                continue;
            }
            if let Some(entry) = self.inner.store.entry(&key).await.map_err(|e| e.to_string())? {
                self.apply(&entry);
            }
        }
        Ok(watch)
    }

    async fn keep_following(self, mut watch: kv::Watch, mut shutdown: Shutdown) {
        loop {
            tokio::select! {
                _ = shutdown.wait() => return,
                next = watch.next() => match next {
                    Some(Ok(entry)) => self.apply(&entry),
                    Some(Err(e)) => tracing::warn!(bucket = %self.inner.store.name, error = %e, "bucket watch error"),
                    None => loop {
                        tracing::warn!(bucket = %self.inner.store.name, "the bucket watch ended; following again");
                        tokio::select! {
                            _ = shutdown.wait() => return,
                            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        }
                        match self.load().await {
                            Ok(w) => {
                                watch = w;
                                break;
                            }
                            Err(e) => tracing::error!(bucket = %self.inner.store.name, error = %e, "cannot follow the bucket"),
                        }
                    },
                },
            }
        }
    }

    fn apply(&self, entry: &kv::Entry) {
        let deleted = entry.operation != kv::Operation::Put;
        self.apply_value(&entry.key, entry.revision, deleted, &entry.value);
    }

    /// Takes in `key`'s value at `revision` (or its deletion) unless a newer one is known: what
    /// the process itself just wrote, so that it answers with it before the watch brings it.
    pub fn apply_value(&self, key: &str, revision: u64, deleted: bool, value: &[u8]) {
        let Some(name) = key.strip_prefix(&self.inner.prefix) else { return };
        let decoded = if deleted {
            None
        } else {
            match serde_json::from_slice::<T>(value) {
                Ok(v) => Some(Arc::new(v)),
                Err(e) => {
                    tracing::warn!(bucket = %self.inner.store.name, %key, error = %e, "an entry that does not decode is left out");
                    None
                }
            }
        };
        {
            let mut entries = self.inner.entries.write().unwrap_or_else(|e| e.into_inner());
            if entries.get(name).is_some_and(|(known, _)| *known >= revision) {
                return;
            }
            entries.insert(name.to_owned(), (revision, decoded));
        }
        self.inner.changes.send_modify(|n| *n += 1);
    }

    /// The value at `name` (the key without the prefix).
    pub fn get(&self, name: &str) -> Option<Arc<T>> {
        self.inner.entries.read().unwrap_or_else(|e| e.into_inner()).get(name).and_then(|(_, v)| v.clone())
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> Vec<Arc<T>> {
        self.inner.entries.read().unwrap_or_else(|e| e.into_inner()).values().filter_map(|(_, v)| v.clone()).collect()
    }

    /// A receiver that is told of every change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }
}
