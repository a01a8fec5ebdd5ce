//! How process sandboxes are kept apart from Halyard and from each other.
//!
//! A process sandbox is the executor run as a child process; the agent's commands run as its
//! children. Assume they are hostile: they must not read the deployment secret, the data
//! directory (bus store, read models, credentials), another sandbox's workspace, or Halyard's
//! environment. One of three modes is chosen once, at start-up:
//!
//! - `uid` (Halyard runs as root): every sandbox gets an unprivileged uid and gid of its own
//!   from a configured range, owns its workspace, home and temporary directory (mode 0700),
//!   and runs with no supplementary groups. The data directory and every sandbox's directory
//!   are traverse-only (0711) and everything else Halyard writes is private to root (umask
//!   077), so a sandbox reaches its own directories by path and nothing else of Halyard.
//! - `bwrap` (not root, bubblewrap installed): every sandbox runs in fresh user, pid, IPC and
//!   UTS namespaces where only the system's directories (read-only), a private `/tmp` and its
//!   own directory exist.
//! - `none`: nothing isolates one sandbox from another, so process sandboxes are refused for
//!   every user but the first, with an error that says what to do.
//!
//! `uid` and `bwrap` also give every sandbox a network namespace of its own ([`crate::netns`]):
//! nothing of the host's loopback is reachable from inside, and nothing inside listens on the
//! host. `none` gives no network isolation: the sandbox shares the host's loopback. What no
//! mode gives is a kernel of its own; Docker sandboxes (see [`crate::docker`]) isolate more.

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use halyard_platform::config::SandboxConfig;
use halyard_protocol::UserId;

use crate::layout::Layout;

/// The isolation of this supervisor's process sandboxes.
#[derive(Debug)]
pub enum Isolation {
    Uid(UidPool, Network),
    Bwrap {
        program: PathBuf,
        network: Network,
    },
    /// No isolation: only one user's sandboxes may run (see [`Isolation::refusal`]).
    None,
}

/// Whether process sandboxes get a network of their own (`sandbox.process_network`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    Own,
    Host,
}

/// How to start one sandbox's executor under the chosen isolation.
#[derive(Clone, Debug, Default)]
pub struct Confinement {
    /// Run as this uid and gid (with no supplementary groups).
    pub uid: Option<u32>,
    /// Run the executor through this wrapper (program and arguments, ending with `--`).
    pub wrapper: Vec<String>,
    /// In a network namespace of its own, reached through a tunnel ([`crate::netns`]).
    pub own_network: bool,
    /// In a mount namespace of its own, its workspace and home at the paths a container's have
    /// ([`crate::paths`]).
    pub same_paths: bool,
}

impl Isolation {
    /// Whether its sandboxes see their workspace and home at a container's paths
    /// ([`crate::paths`]).
    pub fn same_paths(&self) -> bool {
        matches!(self, Self::Uid(..) | Self::Bwrap { .. })
    }

    /// Whether its sandboxes get a network namespace of their own.
    pub fn own_network(&self) -> bool {
        matches!(self, Self::Uid(_, Network::Own) | Self::Bwrap { network: Network::Own, .. })
    }

    /// Chooses the mode `config.process_isolation` names (`auto`: `uid` as root, else `bwrap`
    /// if bubblewrap works here, else `none`), and prepares `data_dir` for it.
    pub fn choose(config: &SandboxConfig, data_dir: &Path) -> Result<Self, String> {
        let root = is_root();
        // Probed once (it starts a process), and only where the mode may need it.
        let bwrap = match config.process_isolation.as_str() {
            "bwrap" => bwrap_program(),
            "auto" if !root => bwrap_program(),
            _ => None,
        };
        let mode = match config.process_isolation.as_str() {
            "auto" if root => "uid",
            "auto" if bwrap.is_some() => "bwrap",
            "auto" => "none",
            other => other,
        };
        let network = if config.process_network == "host" { Network::Host } else { Network::Own };
        if network == Network::Host {
            tracing::warn!(
                "process sandboxes share the host's network (HALYARD_PROCESS_NETWORK=host): they reach the host's \
                 loopback, and an agent's app can listen where the web workspace is served"
            );
        }
        let sandboxes = data_dir.join("sandboxes");
        std::fs::create_dir_all(&sandboxes).map_err(|e| format!("cannot create {}: {e}", sandboxes.display()))?;
        match mode {
            "uid" => {
                if !root {
                    return Err(
                        "process_isolation `uid` needs Halyard to run as root; use `bwrap` (install bubblewrap) or Docker sandboxes".into(),
                    );
                }
                // Where their mount namespaces show their workspace and home.
                crate::paths::prepare_mountpoints()?;
                // Sandbox uids must reach their own directories by path, and nothing more.
                set_mode(data_dir, 0o711)?;
                set_mode(&sandboxes, 0o711)?;
                check_traversable(&sandboxes)?;
                // And the executor itself must be theirs to run.
                if let Some(exe) = config.executor_command.first().map(Path::new).filter(|p| p.is_absolute()) {
                    check_traversable(exe.parent().unwrap_or(exe))?;
                }
                let pool = UidPool::new(config.process_uid_base, config.process_uid_count);
                pool.adopt_existing(&sandboxes);
                Ok(Self::Uid(pool, network))
            }
            "bwrap" => {
                let program = bwrap.ok_or("process_isolation `bwrap` needs bubblewrap (`apt-get install bubblewrap`)")?;
                Ok(Self::Bwrap { program, network })
            }
            "none" => {
                tracing::warn!(
                    "process sandboxes are NOT isolated from each other here (not root, no bubblewrap): \
                     only one user's sandboxes will run"
                );
                Ok(Self::None)
            }
            other => Err(format!("unknown process_isolation `{other}`: use auto, uid, bwrap or none")),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Uid(..) => "uid",
            Self::Bwrap { .. } => "bwrap",
            Self::None => "none",
        }
    }

    /// With no isolation, the reason `owner` may not have a sandbox while `others` (owners of
    /// the sandboxes that exist) do.
    pub fn refusal<'a>(&self, owner: &UserId, mut others: impl Iterator<Item = &'a UserId>) -> Option<String> {
        if !matches!(self, Self::None) {
            return None;
        }
        others.find(|o| *o != owner).map(|other| {
            format!(
                "process sandboxes are not isolated on this machine (Halyard is not root and bubblewrap is missing), \
                 and user `{other}` has one already: run Halyard as root, install bubblewrap, or use Docker sandboxes \
                 (HALYARD_SANDBOX=docker)"
            )
        })
    }

    /// Creates the sandbox's directories, owned as its mode wants, and says how to start its
    /// executor. An existing sandbox keeps its uid (the owner of its workspace).
    pub fn prepare(&self, layout: &Layout, executor: &[String]) -> Result<Confinement, String> {
        let created = |dir: &Path| std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()));
        created(&layout.root)?;
        let private = [layout.workspace(), layout.home(), layout.tmp()];
        match self {
            Self::Uid(pool, network) => {
                set_mode(&layout.root, 0o711)?;
                let (uid, fresh) = match std::fs::metadata(layout.workspace()) {
                    Ok(m) if pool.contains(m.uid()) => (m.uid(), false),
                    _ => (pool.allocate()?, true),
                };
                for dir in &private {
                    created(dir)?;
                    // A workspace that had another owner (made before isolation, or under
                    // another uid range) becomes the new uid's, all of it.
                    if fresh {
                        chown_tree(dir, uid)?;
                    }
                    set_mode(dir, 0o700)?;
                }
                Ok(Confinement { uid: Some(uid), wrapper: Vec::new(), own_network: *network == Network::Own, same_paths: true })
            }
            Self::Bwrap { program, network } => {
                for dir in &private {
                    created(dir)?;
                    set_mode(dir, 0o700)?;
                }
                let own = *network == Network::Own;
                Ok(Confinement { uid: None, wrapper: bwrap_args(program, layout, executor, own), own_network: own, same_paths: true })
            }
            Self::None => {
                for dir in &private {
                    created(dir)?;
                }
                Ok(Confinement::default())
            }
        }
    }

    /// The sandbox's directories are about to be removed: its uid may be reused.
    pub fn release(&self, layout: &Layout) {
        if let (Self::Uid(pool, _), Ok(m)) = (self, std::fs::metadata(layout.workspace())) {
            pool.release(m.uid());
        }
    }
}

/// The uids given to sandboxes: `base..base + count`, each to one sandbox at a time.
#[derive(Debug)]
pub struct UidPool {
    base: u32,
    count: u32,
    in_use: Mutex<HashSet<u32>>,
}

impl UidPool {
    fn new(base: u32, count: u32) -> Self {
        Self { base, count, in_use: Mutex::new(HashSet::new()) }
    }

    fn contains(&self, uid: u32) -> bool {
        uid >= self.base && uid - self.base < self.count
    }

    /// Marks the uids of the sandbox directories already on disk as taken.
    fn adopt_existing(&self, sandboxes: &Path) {
        let Ok(entries) = std::fs::read_dir(sandboxes) else { return };
        let mut in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        for entry in entries.flatten() {
            if let Ok(m) = std::fs::metadata(entry.path().join("workspace")) {
                if self.contains(m.uid()) {
                    in_use.insert(m.uid());
                }
            }
        }
    }

    fn allocate(&self) -> Result<u32, String> {
        let mut in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        let uid = (self.base..self.base.saturating_add(self.count))
            .find(|u| !in_use.contains(u))
            .ok_or_else(|| format!("all {} sandbox uids from {} are in use; raise sandbox.process_uid_count", self.count, self.base))?;
        in_use.insert(uid);
        Ok(uid)
    }

    fn release(&self, uid: u32) {
        self.in_use.lock().unwrap_or_else(|e| e.into_inner()).remove(&uid);
    }
}

/// The bubblewrap command line that runs `executor` with only the system's directories
/// (read-only), a private `/tmp`, `/proc` and `/dev` of its own, and the sandbox's directory.
fn bwrap_args(program: &Path, layout: &Layout, executor: &[String], own_network: bool) -> Vec<String> {
    let mut args = vec![program.display().to_string()];
    // No `--new-session`: the executor must stay in the process group that pause and delete
    // signal.
    let flags = ["--die-with-parent", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"];
    args.extend(flags.map(str::to_owned));
    if own_network {
        args.push("--unshare-net".into());
    }
    for dir in ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/opt"] {
        if Path::new(dir).exists() {
            args.extend(["--ro-bind".into(), dir.into(), dir.into()]);
        }
    }
    args.extend(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"].map(str::to_owned));
    // Then what lies below those (mounts are made in order: a later tmpfs would hide them): the
    // executor binary, wherever it is built, and the sandbox's own directory.
    if let Some(exe) = executor.first().filter(|e| Path::new(e).is_absolute()) {
        args.extend(["--ro-bind".into(), exe.clone(), exe.clone()]);
    }
    let root = absolute(&layout.root).display().to_string();
    args.extend(["--bind".into(), root.clone(), root]);
    // And its workspace and home where a container has them (`crate::paths`).
    for (dir, at) in [(layout.workspace(), crate::paths::WORKSPACE), (layout.home(), crate::paths::HOME)] {
        args.extend(["--bind".into(), absolute(&dir).display().to_string(), at.to_owned()]);
    }
    args.extend(["--chdir".into(), crate::paths::WORKSPACE.to_owned()]);
    args.push("--".into());
    args
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// bubblewrap, if it is installed and can create namespaces here.
fn bwrap_program() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let program = std::env::split_paths(&path).map(|d| d.join("bwrap")).find(|p| p.is_file())?;
    let works = std::process::Command::new(&program)
        .args(["--unshare-user", "--ro-bind", "/", "/", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    works.then_some(program)
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Gives `dir` and everything below it to `uid` (links themselves, never what they point to).
fn chown_tree(dir: &Path, uid: u32) -> Result<(), String> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(uid)).map_err(|e| format!("cannot chown {}: {e}", dir.display()))?;
    let is_dir = std::fs::symlink_metadata(dir).map(|m| m.is_dir()).unwrap_or(false);
    if is_dir {
        for entry in std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?.flatten() {
            chown_tree(&entry.path(), uid)?;
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| format!("cannot chmod {}: {e}", path.display()))
}

/// Every directory above `dir` must let other users pass (o+x), or sandbox uids cannot reach
/// their workspaces.
fn check_traversable(dir: &Path) -> Result<(), String> {
    let dir = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for ancestor in dir.ancestors() {
        let m = std::fs::metadata(ancestor).map_err(|e| format!("{}: {e}", ancestor.display()))?;
        if m.mode() & 0o001 == 0 {
            return Err(format!(
                "sandbox uids cannot reach {} because {} is not traversable by other users: `chmod o+x {}`, or move the \
                 data dir (HALYARD_DATA_DIR) or the halyard binary elsewhere",
                dir.display(),
                ancestor.display(),
                ancestor.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_handed_out_once_and_reused_after_release() {
        let pool = UidPool::new(300_000, 2);
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_ne!(a, b);
        assert!(pool.allocate().is_err(), "the range has two uids");
        pool.release(a);
        assert_eq!(pool.allocate().unwrap(), a);
        assert!(!pool.contains(299_999) && !pool.contains(300_002));
    }

    #[test]
    fn a_tree_changes_owner_but_not_what_its_links_point_to() {
        // Needs root, as `uid` isolation does (the test suite runs as root).
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("ws/sub");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(inner.join("file"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", inner.join("link")).unwrap();
        chown_tree(&dir.path().join("ws"), 300_123).unwrap();
        let owner = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
        assert_eq!(owner(&inner.join("file")), 300_123);
        assert_eq!(owner(&inner.join("link")), 300_123);
        assert_eq!(owner(&inner), 300_123);
        assert_eq!(std::fs::metadata("/etc/passwd").unwrap().uid(), 0, "followed a link");
    }

    #[test]
    fn bubblewrap_mounts_the_sandbox_and_the_executor_after_the_private_tmp() {
        let layout = Layout { root: "/tmp/data/sandboxes/x".into() };
        let args = bwrap_args(Path::new("/usr/bin/bwrap"), &layout, &["/tmp/build/halyard".into(), "executor".into()], true);
        let at = |s: &str| args.iter().position(|a| a == s).unwrap();
        assert!(at("--tmpfs") < at("/tmp/build/halyard") && at("--tmpfs") < at("/tmp/data/sandboxes/x"), "{args:?}");
        assert_eq!(args.last().map(String::as_str), Some("--"));
        assert!(!args.iter().any(|a| a == "/tmp/data"), "the data dir is not mounted: {args:?}");
    }

    #[test]
    fn without_isolation_only_one_user_gets_sandboxes() {
        let alice = UserId("alice".into());
        let bob = UserId("bob".into());
        assert!(Isolation::None.refusal(&alice, [&alice].into_iter()).is_none());
        let why = Isolation::None.refusal(&bob, [&alice].into_iter()).unwrap();
        assert!(why.contains("bubblewrap") && why.contains("alice"), "{why}");
        let bwrap = Isolation::Bwrap { program: "/usr/bin/bwrap".into(), network: Network::Own };
        assert!(bwrap.refusal(&bob, [&alice].into_iter()).is_none());
    }
}
