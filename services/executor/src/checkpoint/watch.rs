//! What changed in the workspace since the last checkpoint, as the kernel saw it: an inotify
//! watch on every directory a checkpoint keeps (by the walk's rules in [`unchanged`]:
//! `.gitignore` applies, the workspace's `.git` and the store's `/.halyard/` are left out). A
//! checkpoint then hands git only the paths that changed (`git add -A -- <paths>`) instead of a
//! `git add -A .` that stats every file, so its cost follows the change, not the workspace.
//!
//! The events wait in the kernel's queue between checkpoints and are read when one is taken:
//! the kernel queues an event inside the write that causes it, so a change made by a command
//! that ended before the checkpoint was asked for is never missed.
//!
//! The changes are not trusted (the checkpoint scans everything, and the watch is made again)
//! when the kernel's queue overflowed (an `npm install` between two checkpoints), a directory
//! could not be watched (the watch limit), a `.gitignore` changed (what is kept changed
//! everywhere), or [`TRUSTED_FOR`] has passed (a write through a memory map raises no event; a
//! restore looks at everything for the same reason). A workspace with a nested repository is never watched: git keeps its commit,
//! which moves without any file the watch sees.
//!
//! [`unchanged`]: super::unchanged

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use super::unchanged::walk;

/// What a watched directory reports: whatever changes what git would keep.
fn mask() -> WatchMask {
    WatchMask::MODIFY
        | WatchMask::ATTRIB
        | WatchMask::CLOSE_WRITE
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DONT_FOLLOW
        | WatchMask::EXCL_UNLINK
        | WatchMask::ONLYDIR
}

/// Why a watch cannot be had (the checkpoint scans).
#[derive(Debug, thiserror::Error)]
pub enum Unwatchable {
    #[error("a nested repository at {0}")]
    NestedRepository(PathBuf),
    #[error("inotify: {0}")]
    Inotify(#[from] std::io::Error),
    #[error("the workspace could not be walked: {0}")]
    Walk(String),
}

/// The changes of one workspace since the last [`Watch::take`].
#[derive(Debug)]
pub struct Watch {
    inotify: Inotify,
    workspace: PathBuf,
    /// Each watched directory, relative to the workspace.
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// Each changed path, relative, and whether its first event since the last take made it
    /// (then it was not there at the last checkpoint).
    changed: HashMap<PathBuf, bool>,
    /// Some change may have been missed.
    lost: bool,
    /// When the full look it went with was made.
    armed: std::time::Instant,
}

/// How long a watch's account is trusted before a checkpoint looks at everything again: a write
/// through a memory map raises no event, so what it changed shows at most this late.
const TRUSTED_FOR: std::time::Duration = std::time::Duration::from_secs(120);

impl Watch {
    /// Watches every directory of `workspace` a checkpoint keeps (blocking: call it off the
    /// runtime). Made before the full scan it goes with, so that nothing changed in between is
    /// missed.
    pub fn arm(workspace: &Path) -> Result<Self, Unwatchable> {
        let inotify = Inotify::init()?;
        let (dirs, changed, armed) = (HashMap::new(), HashMap::new(), std::time::Instant::now());
        let mut me = Self { inotify, workspace: workspace.to_owned(), dirs, changed, lost: false, armed };
        me.watch_tree(Path::new(""), false)?;
        Ok(me)
    }

    /// Watches the directory `rel` and every one below it; with `made`, every path found is a
    /// change (a directory that came: what was written in it before its watch was added).
    fn watch_tree(&mut self, rel: &Path, made: bool) -> Result<(), Unwatchable> {
        let root = self.workspace.join(rel);
        for entry in walk(&root, rel.as_os_str().is_empty()) {
            let entry = entry.map_err(|e| Unwatchable::Walk(e.to_string()))?;
            let below = entry.path().strip_prefix(&self.workspace).unwrap_or(entry.path()).to_owned();
            if entry.file_name() == ".git" {
                return Err(Unwatchable::NestedRepository(below));
            }
            if made && !below.as_os_str().is_empty() {
                self.changed.entry(below.clone()).or_insert(true);
            }
            if entry.file_type().is_some_and(|t| t.is_dir()) {
                let wd = self.inotify.watches().add(entry.path(), mask())?;
                self.dirs.insert(wd, below);
            }
        }
        Ok(())
    }

    /// The paths changed since the last call (relative to the workspace, in no order), or
    /// `None` when they cannot be trusted: the caller then scans everything and arms a new
    /// watch.
    pub fn take(&mut self) -> Option<Vec<PathBuf>> {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let events: Vec<(WatchDescriptor, EventMask, Option<PathBuf>)> = match self.inotify.read_events(&mut buffer) {
                Ok(events) => events.map(|e| (e.wd, e.mask, e.name.map(|n: &OsStr| PathBuf::from(n)))).collect(),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return None,
            };
            if events.is_empty() {
                break;
            }
            for (wd, mask, name) in events {
                self.apply(wd, mask, name);
            }
        }
        if self.lost || self.armed.elapsed() > TRUSTED_FOR {
            return None;
        }
        let changed = std::mem::take(&mut self.changed);
        // A path made since the last checkpoint and gone again was never in one: git would
        // refuse it as matching nothing.
        Some(changed.into_iter().filter(|(p, made)| !made || self.workspace.join(p).symlink_metadata().is_ok()).map(|(p, _)| p).collect())
    }

    fn apply(&mut self, wd: WatchDescriptor, mask: EventMask, name: Option<PathBuf>) {
        if mask.contains(EventMask::Q_OVERFLOW) {
            self.lost = true;
            return;
        }
        if mask.contains(EventMask::IGNORED) {
            self.dirs.remove(&wd);
            return;
        }
        let (Some(dir), Some(name)) = (self.dirs.get(&wd), name) else { return };
        if dir.as_os_str().is_empty() && (name == Path::new(".git") || name == Path::new(".halyard")) {
            return;
        }
        if name == Path::new(".gitignore") || name == Path::new(".git") {
            self.lost = true;
            return;
        }
        let rel = dir.join(&name);
        let made = mask.intersects(EventMask::CREATE | EventMask::MOVED_TO);
        self.changed.entry(rel.clone()).or_insert(made);
        if made && mask.contains(EventMask::ISDIR) && !self.ignored(&rel) && self.watch_tree(&rel, true).is_err() {
            self.lost = true;
        }
    }

    /// Whether a directory that came is one `.gitignore` leaves out (a build's output): it is
    /// neither watched nor walked. Each `.gitignore` above it is read; the deepest that has a
    /// say decides.
    fn ignored(&self, rel: &Path) -> bool {
        let mut ancestors: Vec<&Path> = rel.ancestors().skip(1).collect();
        ancestors.reverse();
        let mut verdict = false;
        for dir in ancestors {
            let file = self.workspace.join(dir).join(".gitignore");
            if !file.exists() {
                continue;
            }
            let (matcher, _) = ignore::gitignore::Gitignore::new(&file);
            let below = self.workspace.join(rel);
            match matcher.matched_path_or_any_parents(&below, true) {
                ignore::Match::Ignore(_) => verdict = true,
                ignore::Match::Whitelist(_) => verdict = false,
                ignore::Match::None => {}
            }
        }
        verdict
    }
}
