//! The sandbox's disk limit (its spec's `disk_mb`): what the workspace, and the sandbox's own
//! home and temporary directory, may take together. No filesystem quota is assumed (the hosts
//! these run on have neither project quotas nor per-sandbox filesystems), so the executor
//! watches while a command runs: every [`POLL`] it reads how much space the filesystems under
//! those directories have left (one `statvfs` each, nearly free), and only when that fell by
//! more than the sandbox's headroom does it count what the directories hold (a walk, at most
//! one per [`MIN_WALK_GAP`] or ten times the last walk's time). Free space is shared with
//! whatever else frees space meanwhile, which can hide a command's writes from it: a command is
//! also walked at least every [`FORCED_WALK`] (still bounded by the walks' cost). A command
//! that takes the sandbox over its limit, or grows it while it is over, is stopped as an
//! interrupt would stop it, and its observation says so; removing files is always allowed.
//!
//! What this cannot catch: a process left running in the background after its command ended
//! writes unwatched until the next command starts; and space allocated faster than one poll
//! (`fallocate` of many files) overshoots until the poll after it. The largest-file limit
//! (`RLIMIT_FSIZE`) bounds each file in either case.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often free space is read while a command runs.
const POLL: Duration = Duration::from_millis(100);
/// The least time between two walks.
const MIN_WALK_GAP: Duration = Duration::from_millis(500);
/// The longest time between two walks while a command runs, whatever free space says.
const FORCED_WALK: Duration = Duration::from_secs(2);

/// One sandbox's disk limit and what it was last seen to use.
#[derive(Debug)]
pub struct Disk {
    limit: u64,
    roots: Vec<PathBuf>,
    used: Mutex<Option<u64>>,
}

impl Disk {
    /// Watches `roots` against `limit` bytes (`None` for no limit). Roots inside another root,
    /// and the shared `/` and `/tmp`, are left out.
    pub fn new(limit: u64, roots: Vec<PathBuf>) -> Option<Arc<Self>> {
        if limit == 0 {
            return None;
        }
        let mut kept: Vec<PathBuf> = Vec::new();
        for root in roots {
            let shared = root == Path::new("/") || root == Path::new("/tmp");
            if shared || !root.is_dir() || kept.iter().any(|k| root.starts_with(k)) {
                continue;
            }
            kept.retain(|k| !k.starts_with(&root));
            kept.push(root);
        }
        Some(Arc::new(Self { limit, roots: kept, used: Mutex::new(None) }))
    }

    /// Bytes the roots hold now (a walk, off the async threads).
    pub async fn measure(self: &Arc<Self>) -> u64 {
        let me = self.clone();
        let used = tokio::task::spawn_blocking(move || me.roots.iter().map(|r| walk(r)).sum()).await.unwrap_or(0);
        if let Ok(mut last) = self.used.lock() {
            *last = Some(used);
        }
        used
    }

    fn last_used(&self) -> Option<u64> {
        self.used.lock().ok().and_then(|u| *u)
    }

    /// Free bytes on the filesystems under the roots (each counted once).
    fn free(&self) -> u64 {
        let mut seen = HashSet::new();
        self.roots.iter().filter_map(|r| statvfs(r)).filter(|(fsid, _)| seen.insert(*fsid)).map(|(_, free)| free).sum()
    }

    /// Watches one command; `stop` is called once if the command must end.
    pub async fn watch(self: &Arc<Self>, stop: impl FnOnce() + Send + 'static) -> Watch {
        let used = match self.last_used() {
            Some(u) => u,
            None => self.measure().await,
        };
        let hit = Arc::new(AtomicBool::new(false));
        // Read before the command starts, not when the task first runs.
        let free = self.free();
        let task = tokio::spawn(poll(self.clone(), used, free, hit.clone(), stop));
        Watch { disk: self.clone(), task, hit, free_at_start: free, used_at_start: used }
    }

    fn words(&self, used: u64) -> String {
        format!("the sandbox's disk limit ({} MiB; it holds {} MiB now)", self.limit >> 20, used >> 20)
    }
}

/// Watching one command; see [`Watch::finish`].
#[derive(Debug)]
pub struct Watch {
    disk: Arc<Disk>,
    task: tokio::task::JoinHandle<()>,
    hit: Arc<AtomicBool>,
    free_at_start: u64,
    used_at_start: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watch {
    /// What to tell the agent about the disk once the command ended, if anything.
    pub async fn finish(self) -> Option<String> {
        self.task.abort();
        let disk = self.disk.clone();
        if self.hit.load(Ordering::SeqCst) {
            let used = disk.last_used().unwrap_or_default();
            return Some(format!(
                "\n[Halyard: this command hit a resource limit: it reached {} and was stopped; remove files you do not need \
                 (build outputs, caches, downloads) and try again]",
                disk.words(used)
            ));
        }
        // A quick command the poll never saw: count again only if space went fast enough.
        let headroom = disk.limit.saturating_sub(self.used_at_start);
        if self.free_at_start.saturating_sub(disk.free()) <= headroom {
            return None;
        }
        let used = disk.measure().await;
        (used > disk.limit && used > self.used_at_start).then(|| {
            format!(
                "\n[Halyard: this command hit a resource limit: the sandbox is over {}; remove files before writing more, \
                 or the next command that writes is stopped]",
                disk.words(used)
            )
        })
    }
}

async fn poll(disk: Arc<Disk>, mut used: u64, mut free_then: u64, hit: Arc<AtomicBool>, stop: impl FnOnce() + Send + 'static) {
    let start_used = used;
    let mut next_walk = Instant::now();
    let mut last_walk = Instant::now();
    loop {
        tokio::time::sleep(POLL).await;
        let free_now = disk.free();
        let headroom = disk.limit.saturating_sub(used);
        // Free space is shared: others freeing space at the same time hide what this command
        // writes from it. A walk every [`FORCED_WALK`] catches that all the same.
        let fell = free_then.saturating_sub(free_now) > headroom;
        if !(fell || last_walk.elapsed() >= FORCED_WALK) || Instant::now() < next_walk {
            continue;
        }
        last_walk = Instant::now();
        let began = Instant::now();
        used = disk.measure().await;
        next_walk = Instant::now() + MIN_WALK_GAP.max(began.elapsed() * 10);
        free_then = free_now;
        if used > disk.limit && used > start_used {
            hit.store(true, Ordering::SeqCst);
            stop();
            return;
        }
    }
}

/// Bytes allocated under `root`, on its filesystem only, hard links counted once.
fn walk(root: &Path) -> u64 {
    let Ok(top) = std::fs::symlink_metadata(root) else { return 0 };
    let dev = top.dev();
    let mut linked = HashSet::new();
    let mut total = top.blocks() * 512;
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.dev() != dev || (meta.nlink() > 1 && !meta.is_dir() && !linked.insert(meta.ino())) {
                continue;
            }
            total += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

/// The filesystem id and the bytes an unprivileged user may still write there.
#[allow(unsafe_code)]
fn statvfs(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut out: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `out` a writable statvfs, as statvfs(3) wants.
    if unsafe { libc::statvfs(c.as_ptr(), &mut out) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Some((out.f_fsid as u64, out.f_bavail as u64 * out.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_count_what_is_allocated_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 64 * 1024]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), vec![1u8; 64 * 1024]).unwrap();
        std::fs::hard_link(dir.path().join("a"), dir.path().join("sub/a-again")).unwrap();
        std::os::unix::fs::symlink("/usr", dir.path().join("out")).unwrap();
        let used = walk(dir.path());
        assert!((128 * 1024..200 * 1024).contains(&used), "{used}");
    }

    #[test]
    fn nested_and_shared_roots_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        let disk = Disk::new(1 << 20, vec![inner, dir.path().to_owned(), "/tmp".into()]).unwrap();
        assert_eq!(disk.roots, vec![dir.path().to_owned()]);
        assert!(Disk::new(0, vec![dir.path().to_owned()]).is_none());
    }

    #[tokio::test]
    async fn a_command_that_writes_past_the_limit_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::new(1 << 20, vec![dir.path().to_owned()]).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let watch = disk
            .watch(move || {
                let _ = tx.send(());
            })
            .await;
        // Written and synced, so that the space is taken on any filesystem.
        let file = std::fs::File::create(dir.path().join("big")).unwrap();
        use std::io::Write;
        (&file).write_all(&vec![7u8; 4 << 20]).unwrap();
        file.sync_all().unwrap();
        tokio::time::timeout(Duration::from_secs(10), rx).await.expect("stopped in time").unwrap();
        let note = watch.finish().await.unwrap_or_default();
        assert!(note.contains("disk limit (1 MiB; it holds 4 MiB now)") && note.contains("was stopped"), "{note}");
    }
}
