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
}

impl Checkpoints {
    pub fn new(workspace: PathBuf) -> Self {
        let dir = workspace.join(STORE);
        Self { workspace, dir, last: Default::default(), seen: Default::default() }
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

    /// Makes the store on first use, and keeps it out of what the workspace's own git sees.
    async fn ensure(&self) -> Result<(), ExecutorError> {
        if !self.dir.join("HEAD").exists() {
            tokio::fs::create_dir_all(&self.dir).await.map_err(|e| ExecutorError::Internal(format!("checkpoint store: {e}")))?;
            let made = tokio::process::Command::new("git")
                .args(["init", "-q", "--bare"])
                .arg(&self.dir)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .await
                .map_err(|e| ExecutorError::Internal(format!("cannot run git for a checkpoint: {e}")))?;
            if !made.status.success() {
                return Err(ExecutorError::Internal(format!("git init: {}", String::from_utf8_lossy(&made.stderr).trim())));
            }
            let exclude = self.dir.join("info");
            tokio::fs::create_dir_all(&exclude).await.map_err(|e| ExecutorError::Internal(format!("checkpoint store: {e}")))?;
            tokio::fs::write(exclude.join("exclude"), "/.halyard/\n")
                .await
                .map_err(|e| ExecutorError::Internal(format!("checkpoint store: {e}")))?;
        }
        hide_from_workspace_git(&self.workspace).await;
        Ok(())
    }

    /// Keeps the workspace as it is now as the checkpoint of `seq`; a new commit only if
    /// something changed since the last one.
    pub async fn take(&self, seq: u64) -> Result<CheckpointResponse, ExecutorError> {
        let started = Instant::now();
        self.ensure().await?;
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
            return Ok(CheckpointResponse { seq, commit, changed: false, ms: started.elapsed().as_millis() as u64 });
        }
        self.git(&["add", "-A", "--ignore-errors", "."], None).await?;
        let tree = self.git(&["write-tree"], None).await?;
        // The last checkpoint and its tree: remembered, or read in one call (none before the
        // first).
        let (head, head_tree) = match last {
            Some((h, t)) => (Some(h), Some(t)),
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
                if head.is_none() {
                    self.git(&["symbolic-ref", "HEAD", "refs/heads/main"], None).await?;
                }
                (commit, true)
            }
        };
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((commit.clone(), tree));
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(now.checked_against(&self.dir.join("index")));
        Ok(CheckpointResponse { seq, commit, changed, ms: started.elapsed().as_millis() as u64 })
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
    pub async fn bundle(&self, seq: u64) -> Result<tokio::process::ChildStdout, ExecutorError> {
        let refs = if self.dir.join("HEAD").exists() { self.upto(seq).await? } else { Vec::new() };
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
    pub async fn restore(&self, seq: u64) -> Result<RestoreResponse, ExecutorError> {
        self.ensure().await?;
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
}

/// `GET /checkpoint/bundle?seq=`: the checkpoints at or before `seq`, as a git bundle.
pub(crate) async fn bundle_route(
    axum::extract::State(state): axum::extract::State<crate::AppState>,
    axum::extract::Query(q): axum::extract::Query<SeqQuery>,
) -> Result<axum::response::Response, ExecutorError> {
    use axum::response::IntoResponse;
    // Listing the refs is what must not overlap a checkpoint being taken; reading the objects
    // may.
    let stdout = state.checkpoints.lock().await.bundle(q.seq).await?;
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
    async fn a_checkpoint_keeps_what_changed_and_a_restore_brings_it_back() {
        let ws = tempfile::tempdir().unwrap();
        let c = Checkpoints::new(ws.path().to_path_buf());
        std::fs::write(ws.path().join("a.txt"), "one\n").unwrap();
        let first = c.take(1).await.unwrap();
        assert!(first.changed);
        assert!(!c.take(2).await.unwrap().changed, "nothing changed, nothing new");
        // Once the files are older than the file clock's tick, without git (the same answer).
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        c.take(3).await.unwrap();
        assert!(!c.take(3).await.unwrap().changed);
        std::fs::write(ws.path().join("a.txt"), "two\n").unwrap();
        std::fs::create_dir(ws.path().join("src")).unwrap();
        std::fs::write(ws.path().join("src/b.txt"), "new\n").unwrap();
        assert!(c.take(5).await.unwrap().changed);

        let back = c.restore(4).await.unwrap();
        assert_eq!((back.checkpoint_seq, back.commit.as_str()), (1, first.commit.as_str()));
        assert_eq!(std::fs::read_to_string(ws.path().join("a.txt")).unwrap(), "one\n");
        assert!(!ws.path().join("src/b.txt").exists(), "a file made after the checkpoint is gone");
        // What was undone can be had back.
        c.take(6).await.unwrap();
        c.restore(5).await.unwrap();
        assert_eq!(std::fs::read_to_string(ws.path().join("src/b.txt")).unwrap(), "new\n");
        assert!(matches!(c.restore(0).await, Err(ExecutorError::NotFound(_))));
    }

    #[tokio::test]
    async fn a_file_kept_then_ignored_is_still_kept_when_it_changes() {
        let ws = tempfile::tempdir().unwrap();
        let c = Checkpoints::new(ws.path().to_path_buf());
        std::fs::write(ws.path().join("build.log"), "one\n").unwrap();
        c.take(1).await.unwrap();
        std::fs::write(ws.path().join(".gitignore"), "*.log\n").unwrap();
        assert!(c.take(2).await.unwrap().changed);
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        assert!(!c.take(3).await.unwrap().changed);
        // git still keeps build.log (it was kept before it was ignored): so must the walk.
        std::fs::write(ws.path().join("build.log"), "two\n").unwrap();
        assert!(c.take(4).await.unwrap().changed);
    }

    #[tokio::test]
    async fn a_bundle_makes_another_workspace_as_a_checkpoint_left_it() {
        use tokio::io::AsyncReadExt;
        let source = tempfile::tempdir().unwrap();
        let from = Checkpoints::new(source.path().to_path_buf());
        assert!(matches!(from.bundle(3).await, Err(ExecutorError::NotFound(_))), "nothing taken yet");
        std::fs::write(source.path().join("a.txt"), "one\n").unwrap();
        from.take(2).await.unwrap();
        std::fs::write(source.path().join("a.txt"), "two\n").unwrap();
        std::fs::write(source.path().join("b.txt"), "b\n").unwrap();
        from.take(4).await.unwrap();
        std::fs::write(source.path().join("a.txt"), "three\n").unwrap();
        from.take(6).await.unwrap();

        let mut bytes = Vec::new();
        from.bundle(5).await.unwrap().read_to_end(&mut bytes).await.unwrap();
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
        to.restore(3).await.unwrap();
        assert_eq!(std::fs::read_to_string(fork.path().join("a.txt")).unwrap(), "one\n");
        assert!(to.restore(9).await.unwrap().checkpoint_seq == 4);
        // And it goes on from there: nothing changed, nothing new.
        assert!(!to.take(7).await.unwrap().changed);
        // The source is as it was.
        assert_eq!(std::fs::read_to_string(source.path().join("a.txt")).unwrap(), "three\n");
    }
}
