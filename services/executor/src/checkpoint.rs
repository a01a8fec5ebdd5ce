//! Checkpoints of the workspace: after each action the agent runner asks for one (`POST
//! /checkpoint {"seq"}`), and a git object store beside the workspace's files keeps what changed
//! as a commit, with a ref per event seq (`refs/seq/<seq>`). Only changed files cost anything: a
//! step that changed one file adds its blob and the trees above it, and a step that changed
//! nothing adds nothing. `POST /restore {"seq"}` puts the workspace back as the newest checkpoint
//! at or before `seq` left it.
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

/// Where the store is, under the workspace.
pub const STORE: &str = ".halyard/checkpoints";

/// The checkpoint store of one workspace.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    workspace: PathBuf,
    dir: PathBuf,
}

impl Checkpoints {
    pub fn new(workspace: PathBuf) -> Self {
        let dir = workspace.join(STORE);
        Self { workspace, dir }
    }

    /// Runs git on the store with the workspace as its work tree; its standard output, trimmed.
    async fn git(&self, args: &[&str], input: Option<&str>) -> Result<String, ExecutorError> {
        use tokio::io::AsyncWriteExt;
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
            .stdin(if input.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
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
        self.git(&["add", "-A", "--ignore-errors", "."], None).await?;
        let tree = self.git(&["write-tree"], None).await?;
        // The last checkpoint and its tree, in one call (none before the first).
        let last = self.git(&["log", "-1", "--format=%H %T"], None).await.ok();
        let (head, head_tree) = match last.as_deref().and_then(|l| l.split_once(' ')) {
            Some((h, t)) => (Some(h.to_owned()), Some(t.to_owned())),
            None => (None, None),
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
        Ok(CheckpointResponse { seq, commit, changed, ms: started.elapsed().as_millis() as u64 })
    }

    /// The checkpoint the workspace had at `seq`: the newest taken at or before it.
    async fn at(&self, seq: u64) -> Result<Option<(u64, String)>, ExecutorError> {
        let listed = self.git(&["for-each-ref", "--format=%(refname) %(objectname)", "refs/seq/"], None).await?;
        Ok(listed
            .lines()
            .filter_map(|l| {
                let (name, commit) = l.split_once(' ')?;
                Some((name.strip_prefix("refs/seq/")?.parse::<u64>().ok()?, commit.to_owned()))
            })
            .filter(|(s, _)| *s <= seq)
            .max_by_key(|(s, _)| *s))
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
}
