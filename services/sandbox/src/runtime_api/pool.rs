//! Warm runtimes per image (`HALYARD_RUNTIME_API_POOL`, `image=count`): started before anyone
//! asks, so that a `/start` that matches one is answered with a runtime already running.
//!
//! A warm runtime must be what the start asks for (its command, environment, user, directory
//! and limits are fixed when its container is made), so the pool keeps runtimes of the *shape*
//! of the image's last start, which is learned then and kept in the Runtime API's directory
//! (`shapes.json`) across restarts. OpenHands sends the same shape for every start of a sandbox
//! spec, so after an image's first (cold) start its next ones are warm. A start of another shape
//! is made cold, and the pool turns to the new shape (its warm runtimes of the old are removed).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use halyard_platform::Shutdown;

use halyard_platform::config::SandboxSpec;

use super::runtimes::{self, Assignment, Assignments, Runtime, Shape, State};
use crate::docker::Engine;

/// How often the pool is checked without being woken.
const CHECK_EVERY: Duration = Duration::from_secs(5);

pub struct Pool {
    /// Warm runtimes to keep, by image.
    sizes: BTreeMap<String, usize>,
    /// The last start's shape, by image (pooled images only).
    shapes: Mutex<HashMap<String, Shape>>,
    file: PathBuf,
    /// One take at a time: two starts are never given the same runtime.
    taking: tokio::sync::Mutex<()>,
    wake: tokio::sync::Notify,
}

impl Pool {
    /// The pool of `sizes`, with the shapes kept in `dir`.
    pub fn new(sizes: BTreeMap<String, usize>, dir: &std::path::Path) -> Self {
        let file = dir.join("shapes.json");
        let shapes = std::fs::read(&file).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        Self { sizes, shapes: Mutex::new(shapes), file, taking: Default::default(), wake: Default::default() }
    }

    /// Remembers `shape` as what its image's starts ask for, if the image is pooled.
    pub fn learn(&self, shape: &Shape) {
        if !self.sizes.contains_key(&shape.image) {
            return;
        }
        let mut shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        if shapes.get(&shape.image) == Some(shape) {
            return;
        }
        shapes.insert(shape.image.clone(), shape.clone());
        if let Err(e) = std::fs::write(&self.file, serde_json::to_vec(&*shapes).unwrap_or_default()) {
            tracing::warn!(error = %e, "cannot keep the Runtime API pool's shapes");
        }
        drop(shapes);
        self.wake.notify_one();
    }

    /// A warm runtime of `shape`, running and listening, given to `client` for `session_id`.
    pub async fn take(&self, engine: &Engine, store: &Assignments, shape: &Shape, client: &str, session_id: &str) -> Option<Runtime> {
        if !self.sizes.contains_key(&shape.image) {
            return None;
        }
        let _one = self.taking.lock().await;
        let hash = shape.hash();
        let warm = runtimes::all(engine, store).await.ok()?;
        for mut r in warm.into_iter().filter(|r| r.assignment.client.is_none() && r.shape == hash && r.state == State::Running) {
            if !runtimes::answers(engine, &r).await {
                continue;
            }
            let assignment =
                Assignment { client: Some(client.to_owned()), session_id: Some(session_id.to_owned()), ..r.assignment.clone() };
            if store.put(&r.runtime_id, &assignment).is_err() {
                continue;
            }
            r.assignment = assignment;
            self.wake.notify_one();
            return Some(r);
        }
        None
    }

    /// Keeps each pooled image's warm runtimes of its shape at its size, and removes warm ones
    /// of a shape no longer asked for, until `shutdown` (when the warm ones go too).
    pub async fn keep(&self, engine: &Engine, store: &Assignments, spec: &SandboxSpec, mut shutdown: Shutdown) {
        let pool = self;
        if pool.sizes.is_empty() {
            return;
        }
        loop {
            if let Err(e) = pool.refill(engine, store, spec).await {
                tracing::warn!(error = %e, "cannot fill the Runtime API's pool");
            }
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = pool.wake.notified() => {}
                _ = tokio::time::sleep(CHECK_EVERY) => {}
            }
        }
        for r in runtimes::all(engine, store).await.unwrap_or_default().into_iter().filter(|r| r.assignment.client.is_none()) {
            let _ = runtimes::remove(engine, &r.container).await;
            store.remove(&r.runtime_id);
        }
    }

    async fn refill(&self, engine: &Engine, store: &Assignments, spec: &SandboxSpec) -> Result<(), crate::docker::DockerError> {
        let shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let warm: Vec<Runtime> = runtimes::all(engine, store).await?.into_iter().filter(|r| r.assignment.client.is_none()).collect();
        // Warm ones nobody will be given: of an image no longer pooled, or of an older shape.
        for r in &warm {
            let wanted = shapes.get(&r.assignment.image).filter(|_| self.sizes.contains_key(&r.assignment.image));
            if wanted.is_none_or(|s| s.hash() != r.shape) || r.state == State::Stopped {
                runtimes::remove(engine, &r.container).await?;
                store.remove(&r.runtime_id);
            }
        }
        for (image, size) in &self.sizes {
            let Some(shape) = shapes.get(image) else { continue };
            let hash = shape.hash();
            let have = warm.iter().filter(|r| r.shape == hash && r.state != State::Stopped).count();
            for _ in have..*size {
                let assignment = Assignment { client: None, session_id: None, image: image.clone(), session_key: runtimes::session_key() };
                let id = runtimes::create(engine, store, spec, shape, &assignment).await?;
                tracing::info!(%image, runtime_id = %id, "warm runtime started");
            }
        }
        Ok(())
    }
}
