//! Hibernation of unused runtimes: one that nothing has reached through its URLs for
//! `HALYARD_SANDBOX_IDLE_STOP_SECS` (as Halyard's own sandboxes) is stopped: its processes end,
//! its files stay (the container is kept). It then reads as `paused`, and OpenHands' `/resume`
//! starts it again. An open connection (the app server's event socket) is use for as long as it
//! is open; a request is use when it starts and when it ends.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use halyard_platform::Shutdown;

use super::runtimes::{self, Assignments, State};
use crate::docker::Engine;

pub struct Idle {
    /// How long unused before it stops (none: never).
    after: Option<Duration>,
    /// By runtime: when it was last used, and the connections open to it now.
    used: Mutex<HashMap<String, (Instant, usize)>>,
}

impl Idle {
    pub fn new(after: Option<Duration>) -> Self {
        Self { after, used: Mutex::new(HashMap::new()) }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, (Instant, usize)>) -> T) -> T {
        f(&mut self.used.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A request or connection to `runtime_id` begins (`open`) or ends.
    pub fn used(&self, runtime_id: &str, open: bool) {
        self.with(|m| {
            let e = m.entry(runtime_id.to_owned()).or_insert((Instant::now(), 0));
            e.0 = Instant::now();
            e.1 = if open { e.1 + 1 } else { e.1.saturating_sub(1) };
        });
    }

    /// `runtime_id` was (re)started just now: its idle time counts from here.
    pub fn touch(&self, runtime_id: &str) {
        self.with(|m| m.entry(runtime_id.to_owned()).or_insert((Instant::now(), 0)).0 = Instant::now());
    }

    /// Runs until `shutdown`: stops the runtimes unused for longer than their idle time.
    pub async fn hibernate(&self, engine: &Engine, store: &Assignments, mut shutdown: Shutdown) {
        let Some(after) = self.after else { return };
        let every = (after / 4).clamp(Duration::from_millis(500), Duration::from_secs(30));
        loop {
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let Ok(all) = runtimes::all(engine, store).await else { continue };
            for r in all.iter().filter(|r| r.assignment.client.is_some() && r.state == State::Running) {
                // A runtime first seen now (made, or running before a restart) starts its clock.
                let idle = self.with(|m| {
                    let (last, open) = *m.entry(r.runtime_id.clone()).or_insert((Instant::now(), 0));
                    open == 0 && last.elapsed() >= after
                });
                if idle {
                    tracing::info!(runtime_id = %r.runtime_id, idle_s = after.as_secs(), "hibernating an unused runtime");
                    if let Err(e) = engine.stop(&r.container).await {
                        tracing::warn!(runtime_id = %r.runtime_id, error = %e, "cannot hibernate the runtime");
                    }
                }
            }
            let live: std::collections::HashSet<&str> = all.iter().map(|r| r.runtime_id.as_str()).collect();
            self.with(|m| m.retain(|id, _| live.contains(id.as_str())));
        }
    }
}
