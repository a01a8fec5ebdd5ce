//! Telling, without git, that the workspace has not changed since the last checkpoint. Most
//! steps change no file (a command that reads, a test run, a message), yet a checkpoint's `git
//! add -A` and `write-tree` are two processes, about 3 ms of CPU on every step. Instead, a walk in
//! this process stamps each file git would keep (by the same rules: `.gitignore` files apply,
//! `.git` and the store's `/.halyard/` do not) with its lstat (mtimes, size, inode, mode), just
//! before the checkpoint's `git add`; the next checkpoint walks again and runs git only if a
//! stamp differs, or a file came or went.
//!
//! A snapshot is not trusted (git runs) when it could miss a change:
//! - a file was modified within [`RACY`] of the walk: the file clock is coarse, so a second
//!   write in the same tick with the same size would leave the same stamp (git's "racy git");
//! - the store's index holds a different number of files than the walk found: a file git
//!   tracks although it is ignored now, or one git could not add;
//! - a nested repository (a `.git` below the top): git keeps its commit, which moves without any
//!   file the walk sees changing;
//! - the walk failed anywhere, or found more than [`MOST_FILES`] files (not worth the memory).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How close to the walk a file's mtime makes its stamp untrustworthy.
const RACY: Duration = Duration::from_millis(100);

/// Above this many files, no snapshot is kept (git's own index does the job).
const MOST_FILES: usize = 50_000;

/// One file's lstat, as far as a change shows in it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    mtime: (i64, i64),
    ctime: (i64, i64),
    size: u64,
    ino: u64,
    mode: u32,
}

/// The files of a workspace as one walk found them.
#[derive(Debug, Default)]
pub struct Snapshot {
    files: HashMap<PathBuf, Stamp>,
    /// Whether a later walk equal to this one proves nothing changed (see the module's header).
    trusted: bool,
}

/// A walk of `root` (a directory of the workspace; `top`: the workspace itself) by a
/// checkpoint's rules, `.gitignore` files inside it applying. The workspace's own repository
/// and the store are never in a checkpoint. The watch walks by the same rules.
pub(super) fn walk(root: &Path, top: bool) -> ignore::Walk {
    let mut walk = ignore::WalkBuilder::new(root);
    walk.hidden(false)
        .parents(false)
        .ignore(false)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .git_ignore(true)
        .follow_links(false)
        .filter_entry(move |e| !(top && e.depth() == 1 && (e.file_name() == ".git" || e.file_name() == ".halyard")));
    walk.build()
}

impl Snapshot {
    /// Walks `workspace` (blocking: call it off the runtime).
    pub fn take(workspace: &Path) -> Self {
        let started = SystemTime::now();
        let racy_after = started.checked_sub(RACY).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut files = HashMap::new();
        let mut trusted = true;
        for entry in walk(workspace, true) {
            let Ok(entry) = entry else { return Self::untrusted() };
            if entry.file_name() == ".git" {
                return Self::untrusted();
            }
            if entry.file_type().is_some_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(meta) = entry.path().symlink_metadata() else { return Self::untrusted() };
            // The change time too: it moves on every write and cannot be set back.
            let changed =
                SystemTime::UNIX_EPOCH + Duration::new(meta.ctime().max(0) as u64, meta.ctime_nsec().clamp(0, 999_999_999) as u32);
            if meta.modified().map_or(true, |m| m >= racy_after) || changed >= racy_after {
                trusted = false;
            }
            let stamp = Stamp {
                mtime: (meta.mtime(), meta.mtime_nsec()),
                ctime: (meta.ctime(), meta.ctime_nsec()),
                size: meta.size(),
                ino: meta.ino(),
                mode: meta.mode(),
            };
            files.insert(entry.into_path(), stamp);
            if files.len() > MOST_FILES {
                return Self::untrusted();
            }
        }
        Self { files, trusted }
    }

    fn untrusted() -> Self {
        Self::default()
    }

    /// Trusted only if the store's index (`index_file`, just written by `git add`) holds as many
    /// files as this walk found.
    pub fn checked_against(mut self, index_file: &Path) -> Self {
        self.trusted = self.trusted && index_entries(index_file) == Some(self.files.len());
        self
    }

    /// Whether `now` proves that nothing changed since this snapshot was taken.
    pub fn unchanged(&self, now: &Snapshot) -> bool {
        self.trusted && self.files == now.files
    }
}

/// The number of entries a git index file holds: its header is `DIRC`, a version, a count.
fn index_entries(index_file: &Path) -> Option<usize> {
    use std::io::Read;
    let mut header = [0u8; 12];
    std::fs::File::open(index_file).ok()?.read_exact(&mut header).ok()?;
    (&header[..4] == b"DIRC").then(|| u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot once its files are older than [`RACY`].
    fn settled(ws: &Path) -> Snapshot {
        std::thread::sleep(RACY + Duration::from_millis(20));
        let s = Snapshot::take(ws);
        assert!(s.trusted);
        s
    }

    #[test]
    fn a_walk_sees_what_git_would_keep_change() {
        let ws = tempfile::tempdir().unwrap();
        let p = ws.path();
        std::fs::write(p.join(".gitignore"), "target/\n").unwrap();
        std::fs::write(p.join("a.txt"), "one\n").unwrap();
        std::fs::create_dir_all(p.join("target")).unwrap();
        std::fs::create_dir_all(p.join(".halyard/checkpoints")).unwrap();
        std::fs::create_dir_all(p.join(".git")).unwrap();
        let before = settled(p);
        assert_eq!(before.files.len(), 2, "{:?}", before.files.keys());
        assert!(before.unchanged(&Snapshot::take(p)));

        // Ignored, the store and the workspace's own repository: no change.
        std::fs::write(p.join("target/out.bin"), "x").unwrap();
        std::fs::write(p.join(".halyard/checkpoints/index"), "x").unwrap();
        std::fs::write(p.join(".git/HEAD"), "x").unwrap();
        assert!(before.unchanged(&Snapshot::take(p)));

        // A file written (the same size), one added, one gone, a mode changed: each a change.
        std::fs::write(p.join("a.txt"), "two\n").unwrap();
        assert!(!before.unchanged(&Snapshot::take(p)));
        let before = settled(p);
        std::fs::write(p.join("b.txt"), "b").unwrap();
        assert!(!before.unchanged(&Snapshot::take(p)));
        let before = settled(p);
        std::fs::remove_file(p.join("b.txt")).unwrap();
        assert!(!before.unchanged(&Snapshot::take(p)));
        let before = settled(p);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p.join("a.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!before.unchanged(&Snapshot::take(p)));
    }

    #[test]
    fn a_snapshot_is_not_trusted_when_it_could_miss_a_change() {
        let ws = tempfile::tempdir().unwrap();
        let p = ws.path();
        std::fs::write(p.join("a.txt"), "one\n").unwrap();
        // Just written: the same tick could hold another write of the same size.
        let racy = Snapshot::take(p);
        assert!(!racy.unchanged(&Snapshot::take(p)));

        // An index that counts another number of files than the walk, then the same number.
        let index = p.join(".halyard/index");
        std::fs::create_dir_all(p.join(".halyard")).unwrap();
        let header = |n: u32| [b"DIRC\0\0\0\x02".as_slice(), &n.to_be_bytes()].concat();
        std::fs::write(&index, header(7)).unwrap();
        assert!(!settled(p).checked_against(&index).unchanged(&Snapshot::take(p)));
        std::fs::write(&index, header(1)).unwrap();
        assert!(settled(p).checked_against(&index).unchanged(&Snapshot::take(p)));

        // A nested repository.
        std::fs::create_dir_all(p.join("vendor/lib/.git")).unwrap();
        std::thread::sleep(RACY);
        assert!(!Snapshot::take(p).trusted);
    }
}
