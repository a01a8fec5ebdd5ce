//! Where a process sandbox's files are: its root, workspace, home, temporary directory, log and
//! the note of its executor's pid.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Directory layout of one process sandbox.
#[derive(Clone, Debug)]
pub struct Layout {
    pub root: PathBuf,
}

impl Layout {
    /// Absolute, so the same path names it inside a bubblewrap namespace.
    pub fn new(data_dir: &Path, id: halyard_protocol::SandboxId) -> Self {
        let root = data_dir.join("sandboxes").join(id.to_string());
        Self { root: std::path::absolute(&root).unwrap_or(root) }
    }
    pub fn workspace(&self) -> PathBuf {
        self.root.join("workspace")
    }
    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }
    /// The sandbox's own temporary directory (`TMPDIR`).
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }
    /// Written by the supervisor, outside the directories the sandbox owns.
    pub fn log(&self) -> PathBuf {
        self.root.join("executor.log")
    }
    /// The log, opened to append (by the executor and the helpers of its sandbox). Never
    /// following a link planted where it goes (it is opened with Halyard's privileges), nor
    /// waiting on a pipe planted there (a bubblewrap sandbox can write its directory).
    pub fn open_log(&self) -> Result<std::fs::File, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.log())
            .map_err(|e| format!("cannot open {}: {e}", self.log().display()))?;
        match file.metadata() {
            Ok(m) if m.is_file() => Ok(file),
            _ => Err(format!("{} is not a regular file; remove it", self.log().display())),
        }
    }
    /// The pid of the last executor started for the sandbox, noted the moment it is spawned:
    /// a supervisor killed before its record names that executor leaves it running, and the
    /// next start ends it from here (see `process::end_leftover`).
    pub fn executor_pid(&self) -> PathBuf {
        self.root.join("executor.pid")
    }
    /// The tunnel into the sandbox's network (the supervisor's; the sandbox cannot open it).
    pub fn tunnel(&self) -> PathBuf {
        self.root.join("tunnel.sock")
    }
    /// The way out to the egress proxy while the sandbox is held to an outbound policy (the
    /// proxy's; only the sandbox may connect, see `EgressProxy::admit_socket`).
    pub fn egress_socket(&self) -> PathBuf {
        self.root.join("egress.sock")
    }
}
