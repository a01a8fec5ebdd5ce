//! What the executor starts on demand, in the sandbox as itself: for the agent's tools the
//! browser ([`browser`]) and the Python kernels ([`kernel`]), for the user VS Code ([`vscode`])
//! and the apps on the sandbox's forwarded ports ([`ports`]), both reached through the platform's
//! `http_relay`;
//! and what they need from a child program: the tail of what it said, a temporary directory
//! short enough for its sockets, and a watch that stops it once unused ([`watch_idle`]).

pub mod browser;
pub mod kernel;
pub mod ports;
pub mod vscode;

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// A program started on demand that stops once unused; [`watch_idle`] asks it.
pub(crate) trait Reap: Send + Sync + 'static {
    /// Stops the program if it has been unused long enough; whether there is still one to watch.
    fn reap(&self) -> impl std::future::Future<Output = bool> + Send;
}

/// Asks `this` (while it lives) every quarter of `idle` (between 100 ms and 5 s) to stop if
/// unused, until it says there is nothing left to watch.
pub(crate) fn watch_idle<T: Reap>(this: Weak<T>, idle: Duration) {
    let tick = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(tick).await;
            let Some(it) = this.upgrade() else { return };
            if !it.reap().await {
                return;
            }
        }
    });
}

/// The last lines a program wrote (Chromium's standard error, the kernel's output), for the
/// error of one that fails.
#[derive(Clone, Default)]
pub(crate) struct Said(Arc<std::sync::Mutex<std::collections::VecDeque<String>>>);

impl Said {
    pub(crate) async fn keep(self, stderr: impl tokio::io::AsyncRead + Unpin) {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if kept.len() == 8 {
                kept.pop_front();
            }
            kept.push_back(line.chars().take(300).collect());
        }
    }

    pub(crate) fn tail(&self) -> String {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_empty() { "nothing".into() } else { kept.iter().cloned().collect::<Vec<_>>().join(" | ") }
    }
}

/// The temporary directory to give a program that makes Unix sockets there (Chromium's
/// singleton, the Python kernel's `ipc` sockets): a
/// socket's path has at most 107 bytes, and a process sandbox's own temporary directory lies
/// deep in the supervisor's data directory. Then a link with a short name in `/tmp` leads to it
/// (the directory stays the sandbox's: counted in its disk, deleted with it); the link is
/// returned to be removed when the browser stops.
pub(crate) fn short_tmp(name: &str) -> (PathBuf, Option<PathBuf>) {
    let tmp = std::env::temp_dir();
    // `<tmp>/org.chromium.Chromium.XXXXXX/SingletonSocket`
    if tmp.as_os_str().len() + 48 <= 107 {
        return (tmp, None);
    }
    let link = PathBuf::from(format!("/tmp/halyard-{name}"));
    match std::os::unix::fs::symlink(&tmp, &link) {
        Ok(()) => (link.clone(), Some(link)),
        Err(e) => {
            tracing::warn!(error = %e, "no short path to the temporary directory; the browser may not start");
            (tmp, None)
        }
    }
}
