//! Looking at the workspace without the shell (which may be busy with the agent's command):
//! browsing files and directories, and what changed — `git status` and `git diff` where the
//! workspace is a repository, else the files the editor changed against their content before
//! its first edit. Everything runs as the sandbox's own user, so it reads only what the agent
//! could.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use halyard_protocol::executor::{
    ChangedFile, ChangesResponse, DIFF_CAP, DIRECTORY_ENTRIES_CAP, FILE_CONTENT_CAP, FileEntry, FilesResponse,
};

use crate::error::ExecutorError;

fn tool(msg: impl Into<String>) -> ExecutorError {
    ExecutorError::Tool(msg.into())
}

/// `path` (relative to the workspace, or absolute) as a real path inside the workspace: links
/// followed, `..` resolved. A path that leads out is refused the same way whether or not
/// anything is there, so the refusal tells nothing about the rest of the machine.
pub fn confine(workspace: &Path, path: &str) -> Result<PathBuf, ExecutorError> {
    let (root, joined, _) = by_words(workspace, path)?;
    let outside = || ExecutorError::Outside(format!("{path} is outside the workspace; give a path inside {}", root.display()));
    // Then by what is there: a link inside that points out leads out.
    match std::fs::canonicalize(&joined) {
        Ok(real) if real.starts_with(&root) => Ok(real),
        Ok(_) => Err(outside()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(ExecutorError::NotFound(format!("{path}: no such file or directory in the workspace")))
        }
        Err(e) => Err(tool(format!("Cannot read {path}: {e}"))),
    }
}

/// `path` judged by its words alone (`..` that climbs out, or an absolute path elsewhere is
/// refused): the workspace's real root, the path joined to it, and the path relative to the root
/// with `.` and `..` resolved.
pub fn by_words(workspace: &Path, path: &str) -> Result<(PathBuf, PathBuf, PathBuf), ExecutorError> {
    let root = std::fs::canonicalize(workspace).map_err(|e| ExecutorError::Internal(format!("the workspace: {e}")))?;
    let outside = || ExecutorError::Outside(format!("{path} is outside the workspace; give a path inside {}", root.display()));
    let asked = Path::new(path.trim());
    let joined = if asked.is_absolute() { asked.to_owned() } else { root.join(asked) };
    let mut lexical = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir if !lexical.pop() => return Err(outside()),
            std::path::Component::ParentDir | std::path::Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    let relative = lexical.strip_prefix(&root).or_else(|_| lexical.strip_prefix(workspace)).map_err(|_| outside())?.to_owned();
    Ok((root, joined, relative))
}

/// A directory's entries or a file's content, inside the workspace.
pub fn files(workspace: &Path, path: &str) -> Result<FilesResponse, ExecutorError> {
    let path = confine(workspace, path)?;
    let meta = std::fs::metadata(&path).map_err(|e| tool(format!("Cannot read {}: {e}", path.display())))?;
    let shown = path.display().to_string();
    if meta.is_dir() {
        // The checkpoint store is Halyard's, not the user's work: not listed at the root.
        let at_root = std::fs::canonicalize(workspace).is_ok_and(|root| root == path);
        let ours = |e: &std::fs::DirEntry| at_root && e.file_name() == ".halyard";
        let mut listing = std::fs::read_dir(&path).map_err(|e| tool(format!("Cannot list {shown}: {e}")))?.flatten().filter(|e| !ours(e));
        let mut entries: Vec<FileEntry> = listing
            .by_ref()
            .take(DIRECTORY_ENTRIES_CAP)
            .map(|e| {
                let ft = e.file_type().ok();
                let kind = match ft {
                    Some(t) if t.is_symlink() => "symlink",
                    Some(t) if t.is_dir() => "directory",
                    _ => "file",
                };
                FileEntry {
                    name: e.file_name().to_string_lossy().into_owned(),
                    kind: kind.into(),
                    size: e.metadata().map(|m| m.len()).unwrap_or(0),
                }
            })
            .collect();
        let truncated = listing.next().is_some();
        entries.sort_by(|a, b| (a.kind != "directory", &a.name).cmp(&(b.kind != "directory", &b.name)));
        return Ok(FilesResponse { path: shown, kind: "directory".into(), entries, truncated, ..Default::default() });
    }
    if !meta.is_file() {
        // A FIFO or a device would block the read or never end.
        return Err(tool(format!("{shown} is neither a directory nor a regular file")));
    }
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(FILE_CONTENT_CAP as u64 + 1).read_to_end(&mut bytes))
        .map_err(|e| tool(format!("Cannot read {shown}: {e}")))?;
    let truncated = bytes.len() > FILE_CONTENT_CAP;
    bytes.truncate(FILE_CONTENT_CAP);
    // Text is UTF-8 without NULs; a cut in the middle of a character is still text.
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => Some(t.to_owned()),
        Err(e) if truncated && e.valid_up_to() + 4 > bytes.len() => Some(String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned()),
        Err(_) => None,
    }
    .filter(|t| !t.contains('\0'));
    Ok(FilesResponse {
        path: shown,
        kind: "file".into(),
        size: Some(meta.len()),
        binary: text.is_none(),
        content: text,
        truncated,
        ..Default::default()
    })
}

/// `text` cut to the diff cap (on a character boundary).
fn cap(mut text: String) -> (String, bool) {
    if text.len() <= DIFF_CAP {
        return (text, false);
    }
    let mut at = DIFF_CAP;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text.truncate(at);
    (text, true)
}

/// Runs git in the workspace; its standard output, or `None` if it failed.
async fn git(workspace: &Path, args: &[&str]) -> Option<(i32, String)> {
    let out = tokio::process::Command::new("git")
        .arg("-c")
        .arg("safe.directory=*")
        .arg("-c")
        .arg("core.quotepath=off")
        .args(args)
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .await
        .ok()?;
    Some((out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// What changed in a repository: each file of `git status` with its diff against `HEAD` (or
/// against nothing, for a file git does not track yet).
async fn repository_changes(workspace: &Path) -> Option<ChangesResponse> {
    let (code, _) = git(workspace, &["rev-parse", "--is-inside-work-tree"]).await?;
    if code != 0 {
        return None;
    }
    let has_head = git(workspace, &["rev-parse", "--verify", "-q", "HEAD"]).await.is_some_and(|(c, _)| c == 0);
    let (_, status) = git(workspace, &["status", "--porcelain=v1", "-z", "--untracked-files=all"]).await?;
    let mut files = Vec::new();
    let mut fields = status.split('\0').filter(|f| !f.is_empty());
    while let Some(entry) = fields.next() {
        let (xy, path) = entry.split_at(entry.len().min(3));
        let xy = xy.trim();
        let (status, path) = match xy {
            "??" => ("untracked", path.to_owned()),
            x if x.starts_with('R') || x.ends_with('R') => {
                let _from = fields.next();
                ("renamed", path.to_owned())
            }
            x if x.contains('D') => ("deleted", path.to_owned()),
            x if x.contains('A') => ("added", path.to_owned()),
            _ => ("modified", path.to_owned()),
        };
        let diff = if status == "untracked" || !has_head {
            git(workspace, &["diff", "--no-index", "--", "/dev/null", &path]).await.map(|(_, d)| d).unwrap_or_default()
        } else {
            git(workspace, &["diff", "HEAD", "--", &path]).await.map(|(_, d)| d).unwrap_or_default()
        };
        let (diff, truncated) = cap(diff);
        files.push(ChangedFile { path, status: status.into(), diff, truncated });
    }
    Some(ChangesResponse { repository: true, files })
}

/// What changed: the repository's changes, else the editor's.
pub async fn changes(workspace: &Path, edited: Vec<(PathBuf, Option<String>)>) -> ChangesResponse {
    if let Some(r) = repository_changes(workspace).await {
        return r;
    }
    let mut files = Vec::new();
    for (path, before) in edited {
        let after = std::fs::read_to_string(&path).ok();
        if before == after {
            continue;
        }
        let shown = path.strip_prefix(workspace).unwrap_or(&path).display().to_string();
        let status = match (&before, &after) {
            (None, _) => "added",
            (_, None) => "deleted",
            _ => "modified",
        };
        let (old, new) = (before.unwrap_or_default(), after.unwrap_or_default());
        let diff = similar::TextDiff::from_lines(&old, &new)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{shown}"), &format!("b/{shown}"))
            .to_string();
        let (diff, truncated) = cap(diff);
        files.push(ChangedFile { path: shown, status: status.into(), diff, truncated });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    ChangesResponse { repository: false, files }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_and_changes_without_and_with_git() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let ws = dir.path();
        std::fs::create_dir(ws.join("src")).unwrap_or_default();
        std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap_or_default();
        std::fs::write(ws.join("bin.dat"), [0u8, 1, 2]).unwrap_or_default();
        let listing = files(ws, "").unwrap_or_default();
        let names: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["src", "a.txt", "bin.dat"], "directories first");
        assert_eq!(files(ws, "a.txt").unwrap_or_default().content.as_deref(), Some("one\ntwo\n"));
        assert!(files(ws, "bin.dat").unwrap_or_default().binary);
        assert!(files(ws, "nope").is_err());
        std::fs::create_dir(ws.join("many")).unwrap_or_default();
        for i in 0..=DIRECTORY_ENTRIES_CAP {
            std::fs::write(ws.join(format!("many/{i}")), "").unwrap_or_default();
        }
        let many = files(ws, "many").unwrap_or_default();
        assert_eq!((many.entries.len(), many.truncated), (DIRECTORY_ENTRIES_CAP, true), "a listing is capped and says so");
        std::fs::remove_dir_all(ws.join("many")).unwrap_or_default();

        // Only inside: absolute paths elsewhere, `..` and links out are refused alike, whether
        // or not anything is there; a missing file inside is not found.
        let outside = std::fs::canonicalize(ws).unwrap_or_default().join("src/../a.txt");
        assert_eq!(files(ws, &outside.display().to_string()).unwrap_or_default().content.as_deref(), Some("one\ntwo\n"));
        std::os::unix::fs::symlink("/etc", ws.join("etc-link")).unwrap_or_default();
        for path in ["/etc/passwd", "/no/such/file", "../../etc/passwd", "src/../../x", "etc-link/passwd", "etc-link"] {
            assert!(matches!(files(ws, path), Err(ExecutorError::Outside(_))), "{path} was not refused");
        }
        assert!(matches!(files(ws, "nope"), Err(ExecutorError::NotFound(_))));
        std::fs::remove_file(ws.join("etc-link")).unwrap_or_default();

        // Not a repository: the editor's record.
        std::fs::write(ws.join("a.txt"), "one\nTWO\n").unwrap_or_default();
        let c = changes(ws, vec![(ws.join("a.txt"), Some("one\ntwo\n".into())), (ws.join("new.txt"), None)]).await;
        assert!(!c.repository);
        assert_eq!(c.files.len(), 1, "a file created and gone again is no change");
        assert!(c.files[0].diff.contains("-two\n+TWO\n"), "{}", c.files[0].diff);

        // A repository: git's view.
        let run = |args: &[&str]| {
            std::process::Command::new("git").args(args).current_dir(ws).output().map(|o| o.status.success()).unwrap_or(false)
        };
        assert!(run(&["init", "-q"]) && run(&["add", "."]));
        assert!(run(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]));
        std::fs::write(ws.join("a.txt"), "one\nthree\n").unwrap_or_default();
        std::fs::write(ws.join("src/new.rs"), "fn main() {}\n").unwrap_or_default();
        let c = changes(ws, Vec::new()).await;
        assert!(c.repository);
        let got: Vec<(&str, &str)> = c.files.iter().map(|f| (f.path.as_str(), f.status.as_str())).collect();
        assert_eq!(got, [("a.txt", "modified"), ("src/new.rs", "untracked")]);
        assert!(c.files[0].diff.contains("+three") && c.files[1].diff.contains("+fn main() {}"));
    }
}
