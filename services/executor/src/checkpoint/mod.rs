//! Checkpoints of the workspace: after each action the agent runner asks for one (`POST
//! /checkpoint {"seq"}`), and a git object store beside the workspace's files keeps what changed
//! as a commit, with a ref per event seq (`refs/seq/<seq>`). Only changed files cost anything: a
//! step that changed one file adds its blob and the trees above it, and git is handed that path
//! alone, as the workspace's watch saw it change ([`watch`]); a step that changed nothing adds
//! nothing and runs no git. Without a watch to trust, a checkpoint looks at everything: a walk in
//! this process finds an unchanged workspace ([`unchanged`]), else `git add -A`. `POST /restore
//! {"seq"}` puts the workspace back as the newest checkpoint at or before `seq` left it.
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

use crate::error::ExecutorError;

mod unchanged;
mod watch;
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
    /// What changed since the last checkpoint, as the kernel tells it ([`watch`]).
    watch: std::sync::Arc<std::sync::Mutex<Watching>>,
    /// How many checkpoints looked at the whole workspace (for the tests and the benchmark).
    full_looks: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Whether the watch is on (then git keeps a split index).
    watched: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The workspace's watch: not made yet, made, or not to be had here (a nested repository, no
/// inotify): then every checkpoint looks at the whole workspace.
#[derive(Debug, Default)]
enum Watching {
    #[default]
    NotYet,
    On(watch::Watch),
    Off,
}

impl Checkpoints {
    /// Where the store keeps its repository and incoming bundles.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub fn new(workspace: PathBuf) -> Self {
        let dir = workspace.join(STORE);
        Self {
            workspace,
            dir,
            last: Default::default(),
            seen: Default::default(),
            highest: Default::default(),
            watch: Default::default(),
            full_looks: Default::default(),
            watched: Default::default(),
        }
    }

    /// A store whose checkpoints always look at the whole workspace, as before the watch (the
    /// benchmark's baseline).
    pub fn unwatched(workspace: PathBuf) -> Self {
        let me = Self::new(workspace);
        *me.watch.lock().unwrap_or_else(|p| p.into_inner()) = Watching::Off;
        me
    }

    /// git on the store with the workspace as its work tree (its standard streams are the
    /// caller's to set).
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("git");
        // The untracked cache spares re-reading directories whose mtime did not change. While
        // the watch hands git single paths, a split index spares rewriting every file's entry
        // when one changed (the shared part that no longer serves goes at once), and no
        // threads stat every file ahead of a `git add` that names one; without the watch, the
        // whole index is what a look at everything compares its walk with ([`unchanged`]).
        let watched = self.watched.load(std::sync::atomic::Ordering::Relaxed);
        cmd.args(["-c", "core.quotepath=off", "-c", "core.autocrlf=false", "-c", "gc.auto=0", "-c", "core.untrackedCache=true"])
            .args(["-c", &format!("core.splitIndex={watched}"), "-c", &format!("core.preloadIndex={}", !watched)])
            .args(["-c", "splitIndex.sharedIndexExpire=now"])
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
        let out = self.git_output(args, input).await?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(ExecutorError::Internal(format!("git {}: {}", args.first().unwrap_or(&""), err.trim())));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Runs git on the store, whatever its exit status.
    async fn git_output(&self, args: &[&str], input: Option<&str>) -> Result<std::process::Output, ExecutorError> {
        use tokio::io::AsyncWriteExt;
        let mut cmd = self.command(args);
        cmd.stdin(if input.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| ExecutorError::Internal(format!("cannot run git for a checkpoint: {e}")))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes()).await.map_err(|e| ExecutorError::Internal(format!("git: {e}")))?;
        }
        child.wait_with_output().await.map_err(|e| ExecutorError::Internal(format!("git: {e}")))
    }

    /// Brings the index up to date at `paths` only (relative to the workspace; gone ones leave
    /// it). Git names a path `.gitignore` leaves out and goes on with the others, which is what
    /// a full `git add -A` does with it too; any other refusal is an error (the caller then
    /// looks at everything).
    async fn add_paths(&self, paths: &[PathBuf]) -> Result<(), ExecutorError> {
        let mut spec = String::new();
        for p in paths {
            let p = p.to_str().ok_or_else(|| ExecutorError::Internal(format!("{} is not UTF-8", p.display())))?;
            spec.push_str(":(literal)");
            spec.push_str(p);
            spec.push('\0');
        }
        let args = ["add", "-A", "--ignore-errors", "--pathspec-from-file=-", "--pathspec-file-nul"];
        let out = self.git_output(&args, Some(&spec)).await?;
        let err = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => Ok(()),
            Some(1) if err.contains("ignored by one of your .gitignore files") && !err.contains("error:") => Ok(()),
            _ => Err(ExecutorError::Internal(format!("git add: {}", err.trim()))),
        }
    }

    /// The paths changed since the last checkpoint, when the workspace's watch can say.
    async fn watched(&self) -> Option<Vec<PathBuf>> {
        let state = self.watch.clone();
        let taken = tokio::task::spawn_blocking(move || {
            let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
            let Watching::On(w) = &mut *state else { return None };
            let paths = w.take();
            if paths.is_none() {
                // Made again by the full look that follows.
                *state = Watching::NotYet;
            }
            paths
        });
        taken.await.ok().flatten()
    }

    /// Watches the workspace from now on, unless it cannot be; called before a full look, so
    /// that what changes during it shows at the next checkpoint.
    async fn arm_watch(&self) {
        let (state, workspace) = (self.watch.clone(), self.workspace.clone());
        let watched = self.watched.clone();
        let armed = tokio::task::spawn_blocking(move || {
            let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
            // What it saw so far is in the full look.
            if let Watching::On(w) = &mut *state
                && w.take().is_none()
            {
                *state = Watching::NotYet;
            }
            if matches!(*state, Watching::NotYet) {
                *state = match watch::Watch::arm(&workspace) {
                    Ok(w) => Watching::On(w),
                    Err(e) => {
                        tracing::info!(error = %e, "the workspace is not watched: each checkpoint looks at all of it");
                        Watching::Off
                    }
                };
            }
            watched.store(matches!(*state, Watching::On(_)), std::sync::atomic::Ordering::Relaxed);
        });
        let _ = armed.await;
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
    ///
    /// What changed comes from the workspace's watch ([`watch`]) when it can be trusted: git is
    /// given those paths only, and nothing at all when there are none. Otherwise (the first
    /// checkpoint here, a lost watch, a store changed under this executor) everything is looked
    /// at: a walk in this process tells an unchanged workspace ([`unchanged`]), else `git add -A`.
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
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some((commit, _)) = &last
            && let Some(paths) = self.watched().await
        {
            if paths.is_empty() {
                self.highest.fetch_max(seq, std::sync::atomic::Ordering::SeqCst);
                return Ok(CheckpointResponse { seq, commit: commit.clone(), changed: false, ms: started.elapsed().as_millis() as u64 });
            }
            match self.add_paths(&paths).await {
                Ok(()) => {
                    *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    let (commit, changed) = self.record(seq, last, follows, new_store).await?;
                    return Ok(CheckpointResponse { seq, commit, changed, ms: started.elapsed().as_millis() as u64 });
                }
                // A path git would not take alone (an ignored file that went away): all of it.
                Err(e) => tracing::debug!(error = %e, "changed paths refused; the whole workspace is looked at"),
            }
        }
        self.full_looks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.arm_watch().await;
        // Walked before `git add`, so that a file changing meanwhile shows at the next walk.
        let workspace = self.workspace.clone();
        let now = tokio::task::spawn_blocking(move || Snapshot::take(&workspace)).await.unwrap_or_default();
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
        let (commit, changed) = self.record(seq, last, follows, new_store).await?;
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(now.checked_against(&self.dir.join("index")));
        Ok(CheckpointResponse { seq, commit, changed, ms: started.elapsed().as_millis() as u64 })
    }

    /// Points `refs/heads/main` and the seq's ref at `commit`: loose ref files written as git
    /// writes them (a new file renamed over the ref, never written through a link the agent
    /// left there), a process less than `update-ref` on every checkpoint.
    async fn write_refs(&self, seq: u64, commit: &str) -> Result<(), ExecutorError> {
        let fail = |e: std::io::Error| ExecutorError::Internal(format!("checkpoint refs: {e}"));
        for name in ["refs/heads/main".to_owned(), seq_ref(seq)] {
            let path = self.dir.join(&name);
            if let Some(dir) = path.parent() {
                tokio::fs::create_dir_all(dir).await.map_err(fail)?;
            }
            let lock = path.with_extension("lock");
            tokio::fs::write(&lock, format!("{commit}\n")).await.map_err(fail)?;
            tokio::fs::rename(&lock, &path).await.map_err(fail)?;
        }
        Ok(())
    }

    /// How many checkpoints here looked at the whole workspace rather than at what its watch
    /// saw change.
    pub fn full_looks(&self) -> u64 {
        self.full_looks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Makes the index (just brought up to date) the checkpoint of `seq`: its commit, and
    /// whether it is a new one (the tree differs from the last checkpoint's).
    async fn record(
        &self,
        seq: u64,
        last: Option<(String, String)>,
        follows: Option<bool>,
        new_store: bool,
    ) -> Result<(String, bool), ExecutorError> {
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
                self.write_refs(seq, &commit).await?;
                if head.is_none() && !new_store {
                    // A store made by an older executor may still point `HEAD` elsewhere.
                    self.git(&["symbolic-ref", "HEAD", "refs/heads/main"], None).await?;
                }
                (commit, true)
            }
        };
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((commit.clone(), tree));
        self.highest.fetch_max(seq, std::sync::atomic::Ordering::SeqCst);
        Ok((commit, changed))
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
        // The index as the workspace is now (everything looked at: a change no watch saw, such
        // as a write through a memory map, is undone too), so that `-u` makes the work tree go
        // from that to the target, removing what the target lacks.
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.git(&["add", "-A", "--ignore-errors", "."], None).await?;
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
mod tests;
