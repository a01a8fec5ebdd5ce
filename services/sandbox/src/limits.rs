//! Resource limits of process sandboxes: memory, processes and CPU from the sandbox's spec
//! (`memory_mb`, `pids_limit`, `cpus`, the same fields Docker sandboxes get), so one agent
//! cannot take the host from everyone else.
//!
//! Control groups, in a subtree the supervisor owns under its own cgroup:
//! - **v2** where the host has it (`cgroup.controllers` lists `memory` and `pids`): one group per
//!   sandbox with `memory.max`, `pids.max` and `cpu.max`.
//! - **v1** otherwise (these machines mount v1's `memory`, `pids` and `cpu` hierarchies and no v2
//!   controllers): one group per sandbox in each, with `memory.limit_in_bytes`, `pids.max` and
//!   `cpu.cfs_quota_us`.
//! - **rlimits** where neither can be used (Halyard not root): per process only, the address
//!   space (`RLIMIT_AS`) and CPU time are not set, since they break ordinary programs; what is set
//!   is the largest file (`RLIMIT_FSIZE`) and core dumps. `services/sandbox/README.md` says what each mode gives.
//!
//! Every mode also caps the largest file a sandbox may write. The executor joins the groups
//! before it runs (between fork and exec), so everything it starts is inside them. Hitting a
//! limit ends or refuses the command that hit it, not the sandbox: the memory limit's OOM killer
//! takes the largest process of the group (the hog, not the small executor), the process limit
//! makes `fork` fail; the executor reads the groups' counters around each command and says in the
//! observation which limit was hit.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

use halyard_protocol::SandboxId;

/// The largest file a sandbox may write (`RLIMIT_FSIZE`).
pub const MAX_FILE_BYTES: u64 = 4 << 30;

/// What one sandbox may use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub memory_bytes: u64,
    pub pids: u64,
    pub cpus: f64,
}

/// How this host limits sandboxes.
#[derive(Debug)]
pub enum Cgroups {
    V2 {
        base: PathBuf,
    },
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: Option<PathBuf>,
    },
    /// Neither can be used here: rlimits only.
    Rlimits,
}

impl Cgroups {
    /// Finds the cgroup hierarchies, and makes this supervisor's subtree (`halyard-<node>`)
    /// under the cgroup it runs in.
    pub fn detect(node: &str) -> Self {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let subtree = format!("halyard-{node}");
        // v2: the unified hierarchy, when it has the controllers.
        if let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) {
            for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
                let controllers = std::fs::read_to_string(Path::new(root).join("cgroup.controllers")).unwrap_or_default();
                if controllers.split_whitespace().any(|c| c == "memory") && controllers.split_whitespace().any(|c| c == "pids") {
                    let base = Path::new(root).join(path.trim_start_matches('/')).join(&subtree);
                    if make_v2(&base).is_ok() {
                        return Self::V2 { base };
                    }
                }
            }
        }
        // v1: one hierarchy per controller.
        let v1 = |controller: &str| -> Option<PathBuf> {
            let path = own.lines().find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
                controllers.split(',').any(|c| c == controller).then(|| path.to_owned())
            })?;
            let mount = ["/sys/fs/cgroup/".to_owned() + controller, "/sys/fs/cgroup/cpu,cpuacct".into()]
                .into_iter()
                .map(PathBuf::from)
                .find(|m| m.join("cgroup.procs").exists())?;
            let base = mount.join(path.trim_start_matches('/')).join(&subtree);
            std::fs::create_dir_all(&base).ok()?;
            Some(base)
        };
        match (v1("memory"), v1("pids")) {
            (Some(memory), Some(pids)) => Self::V1 { memory, pids, cpu: v1("cpu") },
            _ => Self::Rlimits,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::V2 { .. } => "cgroup v2",
            Self::V1 { .. } => "cgroup v1",
            Self::Rlimits => "rlimits",
        }
    }

    /// Makes `sandbox`'s groups with `limits` (an existing one is reused with the new limits),
    /// and says which files the executor writes its pid to.
    pub fn create(&self, sandbox: SandboxId, limits: Limits) -> io::Result<Group> {
        let name = sandbox.to_string();
        let write = |dir: &Path, file: &str, value: String| std::fs::write(dir.join(file), value);
        // Halyard's umask keeps what it makes to itself; the sandbox must read its own
        // counters (for the executor's notes), and pass through the subtree to them.
        let open_up = |dir: &Path| -> io::Result<()> {
            use std::os::unix::fs::PermissionsExt;
            if let Some(parent) = dir.parent() {
                std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o711))?;
            }
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        };
        let period: u64 = 100_000;
        let quota = (limits.cpus.max(0.01) * period as f64) as u64;
        let procs = match self {
            Self::V2 { base } => {
                let dir = base.join(&name);
                std::fs::create_dir_all(&dir)?;
                open_up(&dir)?;
                write(&dir, "memory.max", limits.memory_bytes.to_string())?;
                // No swap to grow into: the limit is the limit.
                let _ = write(&dir, "memory.swap.max", "0".into());
                write(&dir, "pids.max", limits.pids.to_string())?;
                let _ = write(&dir, "cpu.max", format!("{quota} {period}"));
                vec![dir.join("cgroup.procs")]
            }
            Self::V1 { memory, pids, cpu } => {
                let mut procs = Vec::new();
                let dir = memory.join(&name);
                std::fs::create_dir_all(&dir)?;
                open_up(&dir)?;
                write(&dir, "memory.limit_in_bytes", limits.memory_bytes.to_string())?;
                let _ = write(&dir, "memory.memsw.limit_in_bytes", limits.memory_bytes.to_string());
                procs.push(dir.join("cgroup.procs"));
                let dir = pids.join(&name);
                std::fs::create_dir_all(&dir)?;
                open_up(&dir)?;
                write(&dir, "pids.max", limits.pids.to_string())?;
                procs.push(dir.join("cgroup.procs"));
                if let Some(cpu) = cpu {
                    let dir = cpu.join(&name);
                    std::fs::create_dir_all(&dir)?;
                    write(&dir, "cpu.cfs_period_us", period.to_string())?;
                    write(&dir, "cpu.cfs_quota_us", quota.to_string())?;
                    procs.push(dir.join("cgroup.procs"));
                }
                procs
            }
            Self::Rlimits => Vec::new(),
        };
        let procs = procs
            .into_iter()
            .map(|p| CString::new(p.into_os_string().into_encoded_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e)))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Group { procs })
    }

    /// Kills every process still in `sandbox`'s groups: what left the executor's process
    /// groups (a server the agent started with `setsid`, code-server's terminals) and would
    /// otherwise outlive its deleted sandbox.
    pub fn kill_all(&self, sandbox: SandboxId) {
        let name = sandbox.to_string();
        let dir = match self {
            // cgroup.kill (Linux 5.14) takes the whole group at once, forks in flight included.
            Self::V2 { base } => {
                let dir = base.join(&name);
                if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
                    return;
                }
                dir
            }
            Self::V1 { memory, .. } => memory.join(&name),
            Self::Rlimits => return,
        };
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()).filter(|p| *p > 1) {
            halyard_platform::signal(pid, libc::SIGKILL);
        }
    }

    /// Removes `sandbox`'s groups (once its processes are gone; a group still in use stays and
    /// is reused by the next start).
    pub fn remove(&self, sandbox: SandboxId) {
        let name = sandbox.to_string();
        let dirs: Vec<PathBuf> = match self {
            Self::V2 { base } => vec![base.join(&name)],
            Self::V1 { memory, pids, cpu } => {
                let mut d = vec![memory.join(&name), pids.join(&name)];
                d.extend(cpu.iter().map(|c| c.join(&name)));
                d
            }
            Self::Rlimits => Vec::new(),
        };
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn make_v2(base: &Path) -> io::Result<()> {
    std::fs::create_dir_all(base)?;
    // The subtree's children may use the controllers.
    std::fs::write(base.join("cgroup.subtree_control"), "+memory +pids +cpu")
        .or_else(|_| std::fs::write(base.join("cgroup.subtree_control"), "+memory +pids"))
}

/// One sandbox's groups: the `cgroup.procs` files its executor writes its pid to.
#[derive(Clone, Debug, Default)]
pub struct Group {
    procs: Vec<CString>,
}

impl Group {
    /// In the child, before `exec` (async-signal-safe calls only): joins the groups and sets
    /// the rlimits. Needs the privileges the groups were made with, so it runs before the
    /// child drops them.
    #[allow(unsafe_code)]
    pub fn enter(&self) -> io::Result<()> {
        // SAFETY: system calls on buffers owned here; no allocation after fork.
        unsafe {
            let mut digits = [0u8; 20];
            let mut n = libc::getpid() as u64;
            let mut at = digits.len();
            loop {
                at -= 1;
                digits[at] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            for path in &self.procs {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let written = libc::write(fd, digits[at..].as_ptr().cast(), digits.len() - at);
                libc::close(fd);
                if written < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            let fsize = libc::rlimit { rlim_cur: MAX_FILE_BYTES, rlim_max: MAX_FILE_BYTES };
            let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &fsize) != 0 || libc::setrlimit(libc::RLIMIT_CORE, &none) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_gets_its_own_groups_with_its_limits_and_loses_them_after() {
        // The test suite runs as root, where the groups can be made.
        let cg = Cgroups::detect("unit-test");
        let id = SandboxId::new();
        let group = cg.create(id, Limits { memory_bytes: 64 << 20, pids: 32, cpus: 0.5 }).unwrap();
        match &cg {
            Cgroups::V1 { memory, pids, .. } => {
                assert_eq!(std::fs::read_to_string(memory.join(id.to_string()).join("memory.limit_in_bytes")).unwrap().trim(), "67108864");
                assert_eq!(std::fs::read_to_string(pids.join(id.to_string()).join("pids.max")).unwrap().trim(), "32");
            }
            Cgroups::V2 { base } => {
                assert_eq!(std::fs::read_to_string(base.join(id.to_string()).join("pids.max")).unwrap().trim(), "32");
            }
            Cgroups::Rlimits => {}
        }
        assert_eq!(group.procs.len() >= 2, !matches!(cg, Cgroups::Rlimits));
        cg.remove(id);
        if let Cgroups::V1 { memory, .. } = &cg {
            assert!(!memory.join(id.to_string()).exists());
        }
    }
}
