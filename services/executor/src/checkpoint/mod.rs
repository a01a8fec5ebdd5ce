//! Checkpoints of the workspace: after each action the agent runner asks for one (`POST
//! /checkpoint {"seq"}`), and a git object store beside the workspace's files keeps what changed
//! as a commit, with a ref per event seq (`refs/seq/<seq>`). Only changed files cost anything: a
//! step that changed one file adds its blob and the trees above it, and a step that changed
//! nothing adds nothing, and runs no git either: a walk in this process finds it unchanged
//! ([`unchanged`]). `POST /restore {"seq"}` puts the workspace back as the newest checkpoint at or
//! before `seq` left it.
//!
//! A fork moves checkpoints from one sandbox to another: `GET /checkpoint/bundle?seq=` streams
//! a git bundle of those taken at or before `seq` (404 when there are none), and `POST
//! /checkpoint/unbundle?seq=` takes one into a new workspace's store and puts that workspace as
//! the checkpoint at `seq` left it. The fork keeps the earlier ones too, so it can be restored to
//! any event it shares with its source.
//!
//! The store sits where the agent's commands can write (see below), so its own refs are only
//! hints: the agent runner keeps the last checkpoint's commit outside the sandbox and sends it
//! with each request. A checkpoint follows that commit (`parent`), and a restore or a bundle
//! (`head`) first checks every object of the store against its hash (`git fsck`) and then takes
//! the checkpoints from the chain of commits ending at `head`, whose ids vouch for everything
//! under them: refs the agent repointed are put back, and objects it rewrote make the restore
//! fail with `checkpoints_tampered` instead of bringing back what the agent wrote.
//!
//! The store is `.halyard/checkpoints` in the workspace, so it lives (and goes) with the
//! workspace's own volume in either kind of sandbox. It is a repository of its own (its own
//! index, `GIT_DIR`), never the workspace's: the agent's `.git` is neither read nor changed, and
//! git skips every `.git` directory, so the agent's commits are not in checkpoints (its files
//! are). Files the workspace's `.gitignore` ignores (build output, `node_modules`) are neither
//! kept nor touched by a restore.

use std::path::{Path, PathBuf};
use std::time::Instant;

use halyard_protocol::executor::{CheckpointResponse, RestoreResponse};

use crate::ExecutorError;

mod unchanged;
use unchanged::Snapshot;

/// Where the store is, under the workspace.
pub const STORE: &str = ".halyard/checkpoints";

/// The checkpoint store of one workspace.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    workspace: PathBuf,
    dir: PathBuf,
    /// The last checkpoint's commit and tree, as this executor last wrote or read them (none
    /// until then): spares a `git log` per checkpoint, a process less on every step.
    last: std::sync::Arc<std::sync::Mutex<Option<(String, String)>>>,
    /// The workspace's files as the last checkpoint found them: when a walk finds them the
    /// same, the checkpoint needs no git at all ([`unchanged`]).
    seen: std::sync::Arc<std::sync::Mutex<Option<Snapshot>>>,
    /// The highest seq a checkpoint was taken for here (0: none yet).
    highest: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Checkpoints {
    pub fn new(workspace: PathBuf) -> Self {
        let dir = workspace.join(STORE);
        Self { workspace, dir, last: Default::default(), seen: Default::default(), highest: Default::default() }
    }

    /// git on the store with the workspace as its work tree (its standard streams are the
    /// caller's to set).
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("git");
        // The untracked cache spares re-reading directories whose mtime did not change.
        cmd.args(["-c", "core.quotepath=off", "-c", "core.autocrlf=false", "-c", "gc.auto=0", "-c", "core.untrackedCache=true"])
            .args(args)
            .current_dir(&self.workspace)
            .env("GIT_DIR", &self.dir)
            .env("GIT_WORK_TREE", &self.workspace)
            .env("GIT_INDEX_FILE", self.dir.join("index"))
            // Nothing of the agent's git setup applies to the store.
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "Halyard")
            .env("GIT_AUTHOR_EMAIL", "checkpoints@halyard.invalid")
            .env("GIT_COMMITTER_NAME", "Halyard")
            .env("GIT_COMMITTER_EMAIL", "checkpoints@halyard.invalid")
            .kill_on_drop(true);
        cmd
    }

    /// Runs git on the store; its standard output, trimmed.
    async fn git(&self, args: &[&str], input: Option<&str>) -> Result<String, ExecutorError> {
        use tokio::io::AsyncWriteExt;
        let mut cmd = self.command(args);
        cmd.stdin(if input.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| ExecutorError::Internal(format!("cannot run git for a checkpoint: {e}")))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes()).await.map_err(|e| ExecutorError::Internal(format!("git: {e}")))?;
        }
        let out = child.wait_with_output().await.map_err(|e| ExecutorError::Internal(format!("git: {e}")))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(ExecutorError::Internal(format!("git {}: {}", args.first().unwrap_or(&""), err.trim())));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Makes the store on first use (true then), and keeps it out of what the workspace's own
    /// git sees.
    ///
    /// The store is written by hand rather than by `git init`: the files a bare repository needs
    /// (what `git init --bare` writes, less its samples), with `HEAD` on `main` from the start.
    /// The first checkpoint of a new conversation is on the way to its first answer, and each
    /// git process there costs a few milliseconds.
    async fn ensure(&self) -> Result<bool, ExecutorError> {
        let made = !self.dir.join("HEAD").exists();
        if made {
            let fail = |e: std::io::Error| ExecutorError::Internal(format!("checkpoint store: {e}"));
            for sub in ["objects/info", "objects/pack", "refs/heads", "refs/tags", "info"] {
                tokio::fs::create_dir_all(self.dir.join(sub)).await.map_err(fail)?;
            }
            let config = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n";
            tokio::fs::write(self.dir.join("config"), config).await.map_err(fail)?;
            tokio::fs::write(self.dir.join("info/exclude"), "/.halyard/\n").await.map_err(fail)?;
            // Last: its presence is what says the store exists.
            tokio::fs::write(self.dir.join("HEAD"), "ref: refs/heads/main\n").await.map_err(fail)?;
        }
        hide_from_workspace_git(&self.workspace).await;
        Ok(made)
    }

    /// Keeps the workspace as it is now as the checkpoint of `seq`; a new commit only if
    /// something changed since the last one, which is `parent` when the caller kept it.
    pub async fn take(&self, seq: u64, parent: Option<&str>) -> Result<CheckpointResponse, ExecutorError> {
        let started = Instant::now();
        // Event seqs only grow, so a request for one this executor has passed is late (the
        // start task's early first checkpoint, coming after the run's own): it is answered
        // with the last checkpoint, never with what the workspace holds now under that seq.
        let highest = self.highest.load(std::sync::atomic::Ordering::SeqCst);
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let (None, Some((commit, _))) = (parent, &last)
            && seq <= highest
        {
            return Ok(CheckpointResponse { seq, commit: commit.clone(), changed: false, ms: started.elapsed().as_millis() as u64 });
        }
        let new_store = self.ensure().await?;
        // Whether the kept parent is in the store (`None`: none was kept).
        let follows = match parent {
            Some(parent) => Some(self.follow(parent).await),
            None => None,
        };
        // Walked before `git add`, so that a file changing meanwhile shows at the next walk.
        let workspace = self.workspace.clone();
        let now = tokio::task::spawn_blocking(move || Snapshot::take(&workspace)).await.unwrap_or_default();
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let (Some((commit, _)), Some(seen)) = (&last, seen)
            && seen.unchanged(&now)
        {
            let commit = commit.clone();
            *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(seen);
            self.highest.fetch_max(seq, std::sync::atomic::Ordering::SeqCst);
            return Ok(CheckpointResponse { seq, commit, changed: false, ms: started.elapsed().as_millis() as u64 });
        }
        self.git(&["add", "-A", "--ignore-errors", "."], None).await?;
        let tree = self.git(&["write-tree"], None).await?;
        // The last checkpoint and its tree: remembered, or read in one call (none before the
        // first).
        let (head, head_tree) = match last {
            Some((h, t)) => (Some(h), Some(t)),
            // The kept parent is gone: a chain of its own, nothing of what the store's refs say
            // (the agent's to write) under it.
            None if follows == Some(false) => (None, None),
            // A store made just now has no history to read.
            None if new_store => (None, None),
            None => {
                let last = self.git(&["log", "-1", "--format=%H %T"], None).await.ok();
                match last.as_deref().and_then(|l| l.split_once(' ')) {
                    Some((h, t)) => (Some(h.to_owned()), Some(t.to_owned())),
                    None => (None, None),
                }
            }
        };
        let (commit, changed) = match (&head, head_tree) {
            (Some(h), Some(t)) if t == tree => (h.clone(), false),
            _ => {
                let message = format!("seq {seq}");
                let mut args = vec!["commit-tree", tree.as_str(), "-m", message.as_str()];
                if let Some(h) = &head {
                    args.extend(["-p", h.as_str()]);
                }
                let commit = self.git(&args, None).await?;
                let refs = format!("update refs/heads/main {commit}\nupdate {} {commit}\n", seq_ref(seq));
                self.git(&["update-ref", "--stdin"], Some(&refs)).await?;
                if head.is_none() && !new_store {
                    // A store made by an older executor may still point `HEAD` elsewhere.
                    self.git(&["symbolic-ref", "HEAD", "refs/heads/main"], None).await?;
                }
                (commit, true)
            }
        };
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((commit.clone(), tree));
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(now.checked_against(&self.dir.join("index")));
        self.highest.fetch_max(seq, std::sync::atomic::Ordering::SeqCst);
        Ok(CheckpointResponse { seq, commit, changed, ms: started.elapsed().as_millis() as u64 })
    }

    /// Makes `parent` the last checkpoint, if this executor remembers another (it restarted, or
    /// the store's refs were changed): the next one follows it. `false`: the store no longer has
    /// it (the agent removed it), so the next checkpoint starts a chain of its own (restores
    /// before it are refused), never one under whatever the store's refs name.
    async fn follow(&self, parent: &str) -> bool {
        let known = self.last.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|(c, _)| c == parent);
        if known {
            return true;
        }
        let tree = if is_commit_id(parent) {
            self.git(&["rev-parse", "--verify", "--quiet", &format!("{parent}^{{tree}}")], None).await.ok()
        } else {
            None
        };
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let found = tree.is_some();
        if !found {
            tracing::warn!(parent, "the last checkpoint is gone from the store; a new chain starts");
        }
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = tree.map(|t| (parent.to_owned(), t));
        found
    }

    /// Puts the store's refs back as the chain of checkpoints ending at `head` has them, once
    /// every object in the store has been checked against its hash; `Tampered` if one does not
    /// match or the chain is incomplete.
    async fn trust(&self, head: &str) -> Result<(), ExecutorError> {
        if !is_commit_id(head) {
            return Err(ExecutorError::Tool(format!("`head` must be a commit id, not {head:?}")));
        }
        let tampered = |e: ExecutorError| {
            ExecutorError::Tampered(format!(
                "the workspace's checkpoint store was changed from inside the sandbox, so its checkpoints are not \
                 restored ({e}); the workspace is as it was"
            ))
        };
        self.git(&["fsck", "--no-dangling", "--no-progress", "--no-reflogs", head], None).await.map_err(tampered)?;
        let chain = self.git(&["log", "--first-parent", "--format=%H %T %s", head], None).await.map_err(tampered)?;
        let mut wanted = std::collections::BTreeMap::new();
        for line in chain.lines() {
            let mut parts = line.splitn(3, ' ');
            let (Some(commit), Some(_tree), Some(subject)) = (parts.next(), parts.next(), parts.next()) else { continue };
            if let Some(seq) = subject.strip_prefix("seq ").and_then(|n| n.parse::<u64>().ok()) {
                wanted.entry(seq_ref(seq)).or_insert_with(|| commit.to_owned());
            }
        }
        let listed = self.git(&["for-each-ref", "--format=%(refname) %(objectname)", "refs/seq/"], None).await?;
        let mut edits = format!("update refs/heads/main {head}\n");
        for (name, commit) in listed.lines().filter_map(|l| l.split_once(' ')) {
            match wanted.get(name) {
                Some(c) if c == commit => {
                    wanted.remove(name);
                }
                Some(_) => {}
                None => edits.push_str(&format!("delete {name}\n")),
            }
        }
        for (name, commit) in &wanted {
            edits.push_str(&format!("update {name} {commit}\n"));
        }
        self.git(&["update-ref", "--stdin"], Some(&edits)).await?;
        let tree = self.git(&["rev-parse", &format!("{head}^{{tree}}")], None).await?;
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((head.to_owned(), tree));
        Ok(())
    }

    /// The checkpoints taken at or before `seq`, as (seq, commit), oldest first.
    async fn upto(&self, seq: u64) -> Result<Vec<(u64, String)>, ExecutorError> {
        let listed = self.git(&["for-each-ref", "--format=%(refname) %(objectname)", "refs/seq/"], None).await?;
        let mut taken: Vec<(u64, String)> = listed
            .lines()
            .filter_map(|l| {
                let (name, commit) = l.split_once(' ')?;
                Some((name.strip_prefix("refs/seq/")?.parse::<u64>().ok()?, commit.to_owned()))
            })
            .filter(|(s, _)| *s <= seq)
            .collect();
        taken.sort_unstable_by_key(|(s, _)| *s);
        Ok(taken)
    }

    /// The checkpoint the workspace had at `seq`: the newest taken at or before it.
    async fn at(&self, seq: u64) -> Result<Option<(u64, String)>, ExecutorError> {
        Ok(self.upto(seq).await?.pop())
    }

    /// Starts writing a git bundle of the checkpoints taken at or before `seq` (they are one
    /// line of history, so the bundle holds each object once); its output is the bundle.
    pub async fn bundle(&self, seq: u64, head: Option<&str>) -> Result<tokio::process::ChildStdout, ExecutorError> {
        let exists = self.dir.join("HEAD").exists();
        if let (true, Some(head)) = (exists, head) {
            self.trust(head).await?;
        }
        let refs = if exists { self.upto(seq).await? } else { Vec::new() };
        if refs.is_empty() {
            return Err(ExecutorError::NotFound(format!("there is no checkpoint at or before event {seq}")));
        }
        use tokio::io::AsyncWriteExt;
        let mut child = self
            .command(&["bundle", "create", "-q", "-", "--stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| ExecutorError::Internal(format!("cannot run git for a bundle: {e}")))?;
        let names: String = refs.iter().map(|(s, _)| format!("{}\n", seq_ref(*s))).collect();
        let mut stdin = child.stdin.take().ok_or_else(|| ExecutorError::Internal("git has no input".into()))?;
        stdin.write_all(names.as_bytes()).await.map_err(|e| ExecutorError::Internal(format!("git bundle: {e}")))?;
        drop(stdin);
        let stdout = child.stdout.take().ok_or_else(|| ExecutorError::Internal("git has no output".into()))?;
        // The child is reaped when the bundle has been read (or the reader went away).
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(stdout)
    }

    /// Takes the checkpoints of the bundle at `file` into this store (a new workspace's) and
    /// puts the workspace as the one at `seq` left it: what the workspace holds now (a fresh
    /// clone of the same repository, or nothing) is overwritten where the checkpoint differs and
    /// removed where it has nothing. Later checkpoints here follow on from it.
    pub async fn unbundle(&self, seq: u64, file: &Path) -> Result<RestoreResponse, ExecutorError> {
        self.ensure().await?;
        let bundle = file.to_string_lossy();
        self.git(&["fetch", "-q", "--no-tags", "--no-write-fetch-head", &bundle, "+refs/seq/*:refs/seq/*"], None).await?;
        let Some((at, commit)) = self.at(seq).await? else {
            return Err(ExecutorError::NotFound(format!("the bundle has no checkpoint at or before event {seq}")));
        };
        // The index as the workspace is now, so that the read-tree below removes what the
        // checkpoint lacks.
        self.git(&["add", "-A", "--ignore-errors", "."], None).await?;
        self.git(&["read-tree", "--reset", "-u", &commit], None).await?;
        self.git(&["update-ref", "refs/heads/main", &commit], None).await?;
        self.git(&["symbolic-ref", "HEAD", "refs/heads/main"], None).await?;
        // The last checkpoint is the bundle's now: read again at the next one.
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(RestoreResponse { seq, checkpoint_seq: at, commit })
    }

    /// Puts the workspace back as the checkpoint at `seq` left it: files it had are written
    /// back, files made since are removed (ignored ones stay). The caller takes a checkpoint
    /// first, so that what is undone can be had back too.
    pub async fn restore(&self, seq: u64, head: Option<&str>) -> Result<RestoreResponse, ExecutorError> {
        self.ensure().await?;
        if let Some(head) = head {
            self.trust(head).await?;
        }
        let Some((at, commit)) = self.at(seq).await? else {
            return Err(ExecutorError::NotFound(format!("there is no checkpoint at or before event {seq}")));
        };
        // The index holds the workspace as it was last checkpointed: `-u` makes the work tree go
        // from that to the target, removing what the target lacks.
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.git(&["read-tree", "--reset", "-u", &commit], None).await?;
        Ok(RestoreResponse { seq, checkpoint_seq: at, commit })
    }

    /// The store's size on disk, in bytes.
    pub fn disk_bytes(&self) -> u64 {
        fn walk(p: &Path) -> u64 {
            let Ok(entries) = std::fs::read_dir(p) else { return 0 };
            entries
                .flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => walk(&e.path()),
                    Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
                    Err(_) => 0,
                })
                .sum()
        }
        walk(&self.dir)
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct SeqQuery {
    seq: u64,
    /// (Bundles) the last checkpoint as the agent runner kept it (see [`Checkpoints::trust`]).
    #[serde(default)]
    head: Option<String>,
}

/// `GET /checkpoint/bundle?seq=`: the checkpoints at or before `seq`, as a git bundle.
pub(crate) async fn bundle_route(
    axum::extract::State(state): axum::extract::State<crate::AppState>,
    axum::extract::Query(q): axum::extract::Query<SeqQuery>,
) -> Result<axum::response::Response, ExecutorError> {
    use axum::response::IntoResponse;
    // Listing the refs is what must not overlap a checkpoint being taken; reading the objects
    // may.
    let stdout = state.checkpoints.lock().await.bundle(q.seq, q.head.as_deref()).await?;
    Ok(crate::files::transfer::body_of(stdout).into_response())
}

/// `POST /checkpoint/unbundle?seq=` (the body: a bundle from [`bundle_route`]).
pub(crate) async fn unbundle_route(
    axum::extract::State(state): axum::extract::State<crate::AppState>,
    axum::extract::Query(q): axum::extract::Query<SeqQuery>,
    body: axum::body::Body,
) -> Result<axum::Json<RestoreResponse>, ExecutorError> {
    let store = state.checkpoints.lock().await;
    tokio::fs::create_dir_all(&store.dir).await.map_err(|e| ExecutorError::Internal(format!("checkpoint store: {e}")))?;
    let file = store.dir.join(format!("incoming-{}.bundle", uuid::Uuid::new_v4()));
    let limit = halyard_protocol::executor::MAX_CHECKPOINT_BUNDLE_BYTES;
    let made = match crate::files::transfer::write_limited(&file, body, limit).await {
        Ok(_) => store.unbundle(q.seq, &file).await,
        Err(e) => Err(e),
    };
    let _ = tokio::fs::remove_file(&file).await;
    Ok(axum::Json(made?))
}

/// A full commit id (SHA-1, hex): nothing else is passed to git as one.
fn is_commit_id(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn seq_ref(seq: u64) -> String {
    format!("refs/seq/{seq:020}")
}

/// Adds `/.halyard/` to the workspace repository's own excludes (once), so `git status` there
/// (and the Changes view) never lists the store.
async fn hide_from_workspace_git(workspace: &Path) {
    let info = workspace.join(".git/info");
    if !workspace.join(".git").is_dir() {
        return;
    }
    let exclude = info.join("exclude");
    let current = tokio::fs::read_to_string(&exclude).await.unwrap_or_default();
    if current.lines().any(|l| l.trim() == "/.halyard/") {
        return;
    }
    let _ = tokio::fs::create_dir_all(&info).await;
    let text =
        if current.is_empty() || current.ends_with('\n') { format!("{current}/.halyard/\n") } else { format!("{current}\n/.halyard/\n") };
    if let Err(e) = tokio::fs::write(&exclude, text).await {
        tracing::debug!(error = %e, "cannot keep the checkpoint store out of the workspace's git");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_late_request_for_an_earlier_seq_names_the_last_checkpoint_not_the_workspace_now() {
        let ws = tempfile::tempdir().unwrap();
        let c = Checkpoints::new(ws.path().to_path_buf());
        let first = c.take(1, None).await.unwrap();
        std::fs::write(ws.path().join("made.txt"), "by the first action\n").unwrap();
        let after = c.take(8, Some(&first.commit)).await.unwrap();
        assert!(after.changed);
        // The start task's early request for seq 1, arriving after the run's own.
        let late = c.take(1, None).await.unwrap();
        assert_eq!((late.commit.as_str(), late.changed), (after.commit.as_str(), false));
        // Seq 1 still brings back the workspace as it started.
        let back = c.restore(1, None).await.unwrap();
        assert_eq!((back.checkpoint_seq, back.commit.as_str()), (1, first.commit.as_str()));
        assert!(!ws.path().join("made.txt").exists());
    }

    #[tokio::test]
    async fn a_checkpoint_keeps_what_changed_and_a_restore_brings_it_back() {
        let ws = tempfile::tempdir().unwrap();
        let c = Checkpoints::new(ws.path().to_path_buf());
        std::fs::write(ws.path().join("a.txt"), "one\n").unwrap();
        let first = c.take(1, None).await.unwrap();
        assert!(first.changed);
        assert!(!c.take(2, None).await.unwrap().changed, "nothing changed, nothing new");
        // Once the files are older than the file clock's tick, without git (the same answer).
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        c.take(3, None).await.unwrap();
        assert!(!c.take(4, None).await.unwrap().changed);
        std::fs::write(ws.path().join("a.txt"), "two\n").unwrap();
        std::fs::create_dir(ws.path().join("src")).unwrap();
        std::fs::write(ws.path().join("src/b.txt"), "new\n").unwrap();
        assert!(c.take(5, None).await.unwrap().changed);

        let back = c.restore(4, None).await.unwrap();
        assert_eq!((back.checkpoint_seq, back.commit.as_str()), (1, first.commit.as_str()));
        assert_eq!(std::fs::read_to_string(ws.path().join("a.txt")).unwrap(), "one\n");
        assert!(!ws.path().join("src/b.txt").exists(), "a file made after the checkpoint is gone");
        // What was undone can be had back.
        c.take(6, None).await.unwrap();
        c.restore(5, None).await.unwrap();
        assert_eq!(std::fs::read_to_string(ws.path().join("src/b.txt")).unwrap(), "new\n");
        assert!(matches!(c.restore(0, None).await, Err(ExecutorError::NotFound(_))));
    }

    #[tokio::test]
    async fn a_store_changed_from_inside_the_sandbox_is_put_back_or_refused() {
        let ws = tempfile::tempdir().unwrap();
        let a = ws.path().join("a.txt");
        let c = Checkpoints::new(ws.path().to_path_buf());
        std::fs::write(&a, "one\n").unwrap();
        let first = c.take(1, None).await.unwrap();
        std::fs::write(&a, "two\n").unwrap();
        let head = c.take(2, Some(&first.commit)).await.unwrap().commit;

        // The agent makes a checkpoint of its own and points seq 1 (and main) at it.
        std::fs::write(&a, "evil\n").unwrap();
        c.git(&["add", "-A", "."], None).await.unwrap();
        let tree = c.git(&["write-tree"], None).await.unwrap();
        let evil = c.git(&["commit-tree", &tree, "-m", "seq 1", "-p", &first.commit], None).await.unwrap();
        let refs = format!("update {} {evil}\nupdate refs/heads/main {evil}\n", seq_ref(1));
        c.git(&["update-ref", "--stdin"], Some(&refs)).await.unwrap();
        c.restore(1, None).await.unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "evil\n", "the store's own refs are the agent's to change");
        // From the kept head, seq 1 is what it was.
        let back = c.restore(1, Some(&head)).await.unwrap();
        assert_eq!((back.checkpoint_seq, back.commit.as_str()), (1, first.commit.as_str()));
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "one\n");

        // An executor started again follows the kept parent, not the store's main.
        c.git(&["update-ref", "refs/heads/main", &evil], None).await.unwrap();
        let again = Checkpoints::new(ws.path().to_path_buf());
        std::fs::write(&a, "three\n").unwrap();
        let third = again.take(3, Some(&head)).await.unwrap();
        assert_eq!(again.git(&["rev-parse", &format!("{}^", third.commit)], None).await.unwrap(), head);

        // The kept parent removed from the store, the agent's own chain under main: the next
        // checkpoint starts a chain of its own, so nothing of the agent's is ever under the head.
        let gone = tempfile::tempdir().unwrap();
        let g = Checkpoints::new(gone.path().to_path_buf());
        std::fs::write(gone.path().join("a.txt"), "one\n").unwrap();
        let kept = g.take(1, None).await.unwrap().commit;
        let object = g.dir.join("objects").join(&kept[..2]).join(&kept[2..]);
        std::fs::remove_file(&object).unwrap();
        std::fs::write(gone.path().join("a.txt"), "evil\n").unwrap();
        g.git(&["add", "-A", "."], None).await.unwrap();
        let tree = g.git(&["write-tree"], None).await.unwrap();
        let forged = g.git(&["commit-tree", &tree, "-m", "seq 1"], None).await.unwrap();
        g.git(&["update-ref", "refs/heads/main", &forged], None).await.unwrap();
        let fresh = Checkpoints::new(gone.path().to_path_buf());
        std::fs::write(gone.path().join("a.txt"), "two\n").unwrap();
        let next = fresh.take(2, Some(&kept)).await.unwrap();
        let parents = fresh.git(&["log", "--format=%P", "-1", &next.commit], None).await.unwrap();
        assert_eq!(parents, "", "an orphan, not a child of the agent's commit");
        let refused = fresh.restore(1, Some(&next.commit)).await.unwrap_err();
        assert!(matches!(refused, ExecutorError::NotFound(_)), "seq 1 is not in the kept chain: {refused:?}");

        // Objects rewritten in place: refused, and the workspace is left as it is.
        let blob = again.git(&["rev-parse", &format!("{}:a.txt", first.commit)], None).await.unwrap();
        let object = again.dir.join("objects").join(&blob[..2]).join(&blob[2..]);
        let mut perms = std::fs::metadata(&object).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
        std::fs::set_permissions(&object, perms).unwrap();
        let evil_blob = again.git(&["hash-object", "-w", "--stdin"], Some("evil\n")).await.unwrap();
        let evil_object = again.dir.join("objects").join(&evil_blob[..2]).join(&evil_blob[2..]);
        std::fs::copy(&evil_object, &object).unwrap();
        let refused = again.restore(1, Some(&third.commit)).await.unwrap_err();
        assert!(matches!(&refused, ExecutorError::Tampered(m) if m.contains("changed from inside the sandbox")), "{refused:?}");
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "three\n");
    }

    #[tokio::test]
    async fn a_file_kept_then_ignored_is_still_kept_when_it_changes() {
        let ws = tempfile::tempdir().unwrap();
        let c = Checkpoints::new(ws.path().to_path_buf());
        std::fs::write(ws.path().join("build.log"), "one\n").unwrap();
        c.take(1, None).await.unwrap();
        std::fs::write(ws.path().join(".gitignore"), "*.log\n").unwrap();
        assert!(c.take(2, None).await.unwrap().changed);
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        assert!(!c.take(3, None).await.unwrap().changed);
        // git still keeps build.log (it was kept before it was ignored): so must the walk.
        std::fs::write(ws.path().join("build.log"), "two\n").unwrap();
        assert!(c.take(4, None).await.unwrap().changed);
    }

    #[tokio::test]
    async fn a_bundle_makes_another_workspace_as_a_checkpoint_left_it() {
        use tokio::io::AsyncReadExt;
        let source = tempfile::tempdir().unwrap();
        let from = Checkpoints::new(source.path().to_path_buf());
        assert!(matches!(from.bundle(3, None).await, Err(ExecutorError::NotFound(_))), "nothing taken yet");
        std::fs::write(source.path().join("a.txt"), "one\n").unwrap();
        from.take(2, None).await.unwrap();
        std::fs::write(source.path().join("a.txt"), "two\n").unwrap();
        std::fs::write(source.path().join("b.txt"), "b\n").unwrap();
        from.take(4, None).await.unwrap();
        std::fs::write(source.path().join("a.txt"), "three\n").unwrap();
        from.take(6, None).await.unwrap();

        let mut bytes = Vec::new();
        from.bundle(5, None).await.unwrap().read_to_end(&mut bytes).await.unwrap();
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &bytes).unwrap();

        // The new workspace holds something already (a fresh clone): kept where the
        // checkpoint has it, gone where it has not.
        let fork = tempfile::tempdir().unwrap();
        std::fs::write(fork.path().join("a.txt"), "cloned\n").unwrap();
        std::fs::write(fork.path().join("stale.txt"), "x\n").unwrap();
        let to = Checkpoints::new(fork.path().to_path_buf());
        let made = to.unbundle(5, file.path()).await.unwrap();
        assert_eq!(made.checkpoint_seq, 4);
        assert_eq!(std::fs::read_to_string(fork.path().join("a.txt")).unwrap(), "two\n");
        assert_eq!(std::fs::read_to_string(fork.path().join("b.txt")).unwrap(), "b\n");
        assert!(!fork.path().join("stale.txt").exists());
        // The checkpoint after 5 is not the fork's; the earlier ones are.
        to.restore(3, None).await.unwrap();
        assert_eq!(std::fs::read_to_string(fork.path().join("a.txt")).unwrap(), "one\n");
        assert!(to.restore(9, None).await.unwrap().checkpoint_seq == 4);
        // And it goes on from there: nothing changed, nothing new.
        assert!(!to.take(7, None).await.unwrap().changed);
        // The source is as it was.
        assert_eq!(std::fs::read_to_string(source.path().join("a.txt")).unwrap(), "three\n");
    }
}
