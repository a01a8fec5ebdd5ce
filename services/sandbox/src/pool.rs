//! The warm pool: docker sandboxes started ahead of demand, per spec, so a new conversation
//! gets a running executor without waiting for a container to start.
//!
//! A pool container belongs to no one: it has its own slot id (labels, name, volume) and a
//! session key derived from that slot. Taking one hands its executor the key of the sandbox it
//! becomes (authenticated with the slot key), and the refill task starts a replacement in the
//! background. The pool lives in memory only: at start-up the supervisor removes the pool
//! containers of a previous run as orphans and refills.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use halyard_protocol::SandboxId;
use halyard_protocol::system::ExposedUrl;

/// A pre-started sandbox.
#[derive(Clone, Debug)]
pub struct PoolEntry {
    pub slot: SandboxId,
    pub container: String,
    pub volume: String,
    pub urls: Vec<ExposedUrl>,
}

/// Ready entries per spec.
#[derive(Default)]
pub struct Pool {
    ready: Mutex<HashMap<String, VecDeque<PoolEntry>>>,
    pub(crate) wake: tokio::sync::Notify,
    /// Wakes the refill of environment snapshots' pools ([`crate::envpool`]).
    pub(crate) env_wake: tokio::sync::Notify,
}

impl Pool {
    /// Takes a ready sandbox of `spec`, if there is one, and wakes the refill (which also
    /// publishes the pool's new state).
    pub fn take(&self, spec: &str) -> Option<PoolEntry> {
        let entry = self.ready.lock().ok()?.get_mut(spec)?.pop_front();
        self.wake.notify_one();
        self.env_wake.notify_one();
        entry
    }

    /// Forgets a pool container that died or was removed; true if it was one.
    pub fn forget(&self, container: &str) -> bool {
        let Ok(mut ready) = self.ready.lock() else { return false };
        let mut found = false;
        for entries in ready.values_mut() {
            let before = entries.len();
            entries.retain(|e| e.container != container);
            found |= entries.len() != before;
        }
        if found {
            self.wake.notify_one();
        }
        found
    }

    pub fn len(&self, spec: &str) -> usize {
        self.ready.lock().map(|r| r.get(spec).map_or(0, VecDeque::len)).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.ready.lock().map(|r| r.values().all(VecDeque::is_empty)).unwrap_or(true)
    }

    pub(crate) fn push(&self, spec: &str, entry: PoolEntry) {
        if let Ok(mut ready) = self.ready.lock() {
            ready.entry(spec.to_owned()).or_default().push_back(entry);
        }
    }

    /// The pools' keys (specs, and snapshots' [`halyard_protocol::environment::pool_key`]s).
    pub(crate) fn keys(&self) -> Vec<String> {
        self.ready.lock().map(|r| r.keys().cloned().collect()).unwrap_or_default()
    }

    /// Takes out of pool `key` every entry past the first `keep`.
    pub(crate) fn trim(&self, key: &str, keep: usize) -> Vec<PoolEntry> {
        let Ok(mut ready) = self.ready.lock() else { return Vec::new() };
        let Some(entries) = ready.get_mut(key) else { return Vec::new() };
        let extra = entries.split_off(keep.min(entries.len()));
        if entries.is_empty() {
            ready.remove(key);
        }
        extra.into()
    }

    pub(crate) fn drain(&self) -> Vec<PoolEntry> {
        self.ready.lock().map(|mut r| r.values_mut().flat_map(|q| q.drain(..)).collect()).unwrap_or_default()
    }
}
