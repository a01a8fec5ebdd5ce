//! Graceful shutdown, the mini-redis way: one trigger, many cheap listeners. Every service's
//! `run(config, shutdown)` returns once its [`Shutdown`] fires and its in-flight work is parked.

use tokio::sync::watch;

/// Fires shutdown for every [`Shutdown`] made from it.
#[derive(Debug, Clone)]
pub struct ShutdownTrigger {
    tx: watch::Sender<bool>,
}

/// A listener that resolves [`Shutdown::wait`] once shutdown is triggered.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// A connected trigger and listener.
pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger { tx }, Shutdown { rx })
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    pub fn subscribe(&self) -> Shutdown {
        Shutdown { rx: self.tx.subscribe() }
    }
}

impl Shutdown {
    pub fn is_triggered(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves when shutdown is triggered (or the trigger is dropped).
    pub async fn wait(&mut self) {
        // An Err means the trigger was dropped, which also means "stop".
        let _ = self.rx.wait_for(|v| *v).await;
    }
}
