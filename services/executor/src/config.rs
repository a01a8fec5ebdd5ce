//! What an executor is started with: its workspace, session key and limits.

use std::path::PathBuf;

/// What an executor needs to run.
#[derive(Clone)]
pub struct ExecutorConfig {
    /// The directory actions run in (the sandbox workspace).
    pub workspace: PathBuf,
    /// The session key callers must present.
    pub session_key: String,
    /// Cap on one command's returned output, in bytes.
    pub output_cap: usize,
    /// What the workspace, home and temporary directory may hold together, in bytes (0: no
    /// limit); see [`disk`].
    pub disk_limit: u64,
    /// How long the browser may stay unused before it is stopped; see [`runtimes::browser`].
    pub browser_idle: std::time::Duration,
    /// How long VS Code may stay unused before it is stopped; see [`runtimes::vscode`].
    pub vscode_idle: std::time::Duration,
}

impl std::fmt::Debug for ExecutorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorConfig").field("workspace", &self.workspace).finish_non_exhaustive()
    }
}
