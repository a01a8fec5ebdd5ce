//! Finding and inspecting sandbox processes, for tests that poke at them from outside.

use std::path::Path;

/// Pid of the executor serving `workspace` (the directory on the host), found through `/proc`:
/// an `executor` working in that directory (by the directory itself, not its path: an isolated
/// process sandbox sees it at `/workspace`).
pub fn executor_pid(workspace: &Path) -> Option<i32> {
    executor_pids(workspace).into_iter().next()
}

/// Pids of every executor serving `workspace` (one, unless one was left behind), found as
/// [`executor_pid`] finds one.
pub fn executor_pids(workspace: &Path) -> Vec<i32> {
    let Some(wanted) = directory_id(workspace) else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.iter().any(|a| a == "executor") && directory_id(&entry.path().join("cwd")) == Some(wanted) {
            pids.push(pid);
        }
    }
    pids
}

/// A directory itself (device and inode), whatever path names it: `/proc/<pid>/cwd` of a
/// process in another mount namespace leads to it too.
pub fn directory_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The one-letter state of a process (`S`, `R`, `T` for stopped...).
pub fn state(pid: i32) -> Option<char> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("State:")).and_then(|s| s.trim().chars().next())
}

/// SIGKILL, from outside, as a crash or an operator would.
pub fn kill(pid: i32) {
    let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
}

/// The live processes of process group `pgid` (zombies left out).
pub fn group(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            // Fields after the command name (which may hold spaces): state, ppid, pgrp.
            let mut rest = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace()).into_iter().flatten();
            let state = rest.next();
            let pgrp = rest.nth(1).and_then(|g| g.parse::<i32>().ok());
            state != Some("Z") && pgrp == Some(pgid)
        })
        .collect()
}

/// The cgroup directories of supervisor `node`'s process sandboxes (`halyard-<node>` under the
/// cgroup this process runs in, in each hierarchy: v1's controllers and v2's unified tree).
pub fn sandbox_cgroups(node: &str) -> Vec<std::path::PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut dirs = Vec::new();
    for line in own.lines() {
        // `id:controllers:path`; v2's line has no controllers.
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let mounts: Vec<String> = if controllers.is_empty() {
            vec!["/sys/fs/cgroup/unified".into(), "/sys/fs/cgroup".into()]
        } else {
            let name = controllers.trim_start_matches("name=");
            vec![format!("/sys/fs/cgroup/{name}")]
        };
        for mount in mounts {
            let dir = Path::new(&mount).join(path.trim_start_matches('/')).join(format!("halyard-{node}"));
            if dir.is_dir() && !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

/// Ends every process of supervisor `node`'s process sandboxes (what a test's agent left
/// running: servers, apps, sleeps) and removes their cgroups: a stopped test deployment leaves
/// nothing behind. Returns how many processes it had to end.
pub fn end_sandboxes(node: &str) -> usize {
    let dirs = sandbox_cgroups(node);
    let mut ended = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut left = 0;
        for dir in &dirs {
            for procs in walk(dir).iter().map(|d| d.join("cgroup.procs")) {
                for pid in std::fs::read_to_string(&procs).unwrap_or_default().lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    left += 1;
                    ended.insert(pid);
                    kill(pid);
                }
            }
        }
        if left == 0 || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Deepest first: a group with groups in it cannot be removed.
    for dir in &dirs {
        for d in walk(dir).iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
    ended.len()
}

/// `dir` and every directory under it, parents before children.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![dir.to_owned()];
    let mut at = 0;
    while at < out.len() {
        if let Ok(entries) = std::fs::read_dir(&out[at]) {
            out.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
        at += 1;
    }
    out
}

/// The processes of sandbox uids (`base` and up, `count` of them) still running on this machine:
/// (pid, uid, command line).
pub fn sandbox_uid_processes(base: u32, count: u32) -> Vec<(i32, u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let uid: u32 = status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()?;
            if !(base..base.saturating_add(count)).contains(&uid) || state(pid) == Some('Z') {
                return None;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_owned();
            Some((pid, uid, cmd))
        })
        .collect()
}
