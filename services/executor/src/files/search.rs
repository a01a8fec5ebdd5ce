//! `glob` and `grep`, as OpenHands' tools of those names answer: paths, the most recently
//! modified first, capped. The walk is ripgrep's own (`ignore`): `.gitignore` and friends are
//! honoured in a repository, hidden files and directories are skipped, and so is Halyard's
//! checkpoint store.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use globset::{GlobBuilder, GlobMatcher};
use halyard_protocol::executor::{GlobRequest, GrepRequest, SEARCH_RESULTS_CAP, SearchResponse};

use crate::error::ExecutorError;

/// A search stops after this long and answers what it found (`truncated`).
const PATIENCE: Duration = Duration::from_secs(20);
/// Files larger than this are not searched.
const MAX_FILE_BYTES: u64 = 8 << 20;

fn tool(msg: impl Into<String>) -> ExecutorError {
    ExecutorError::Tool(msg.into())
}

/// The directory to search: `path` (absolute, or relative to the workspace), else the workspace.
fn search_root(workspace: &Path, path: Option<&str>) -> Result<PathBuf, ExecutorError> {
    let dir = match path.map(str::trim).filter(|p| !p.is_empty()) {
        Some(p) if Path::new(p).is_absolute() => PathBuf::from(p),
        Some(p) => workspace.join(p),
        None => workspace.to_owned(),
    };
    let dir = std::fs::canonicalize(&dir).map_err(|_| tool(format!("Search path '{}' is not a valid directory", dir.display())))?;
    if !dir.is_dir() {
        return Err(tool(format!("Search path '{}' is not a valid directory", dir.display())));
    }
    Ok(dir)
}

/// A glob as ripgrep's `-g` takes it: one without `/` matches the file's name at any depth,
/// one with `/` the path below the searched directory.
struct Pattern {
    matcher: GlobMatcher,
    by_name: bool,
}

impl Pattern {
    fn new(glob: &str) -> Result<Self, ExecutorError> {
        let glob = glob.trim().trim_start_matches("./");
        let matcher = GlobBuilder::new(glob)
            .literal_separator(true)
            .build()
            .map_err(|e| tool(format!("Invalid glob pattern '{glob}': {e}")))?
            .compile_matcher();
        Ok(Self { matcher, by_name: !glob.contains('/') })
    }

    fn matches(&self, root: &Path, file: &Path) -> bool {
        if self.by_name {
            file.file_name().is_some_and(|n| self.matcher.is_match(n))
        } else {
            file.strip_prefix(root).is_ok_and(|rel| self.matcher.is_match(rel))
        }
    }
}

/// Walks the files below `root` that `keep` accepts, until the cap or the patience runs out:
/// the newest first, and whether more were left.
fn walk(root: &Path, keep: impl Fn(&Path) -> bool) -> (Vec<String>, bool) {
    let started = Instant::now();
    let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
    let mut out_of_time = false;
    let walker = ignore::WalkBuilder::new(root).filter_entry(|e| e.file_name() != ".halyard" && e.file_name() != ".git").build();
    for entry in walker.flatten() {
        if started.elapsed() > PATIENCE {
            out_of_time = true;
            break;
        }
        if !entry.file_type().is_some_and(|t| t.is_file()) || !keep(entry.path()) {
            continue;
        }
        let modified = entry.metadata().ok().and_then(|m| m.modified().ok()).unwrap_or(SystemTime::UNIX_EPOCH);
        found.push((modified, entry.into_path()));
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let truncated = out_of_time || found.len() > SEARCH_RESULTS_CAP;
    (found.into_iter().take(SEARCH_RESULTS_CAP).map(|(_, p)| p.display().to_string()).collect(), truncated)
}

/// `glob`: files whose path matches.
pub fn glob(workspace: &Path, req: &GlobRequest) -> Result<SearchResponse, ExecutorError> {
    if req.pattern.trim().is_empty() {
        return Err(tool("`pattern` is required, like \"**/*.py\"."));
    }
    let root = search_root(workspace, req.path.as_deref())?;
    let pattern = Pattern::new(&req.pattern)?;
    let (files, truncated) = walk(&root, |f| pattern.matches(&root, f));
    Ok(SearchResponse { files, search_path: root.display().to_string(), truncated })
}

/// Whether a file's start says it is binary (a NUL byte, as ripgrep decides).
fn binary(head: &[u8]) -> bool {
    head.iter().take(8192).any(|b| *b == 0)
}

/// `grep`: files whose content matches.
pub fn grep(workspace: &Path, req: &GrepRequest) -> Result<SearchResponse, ExecutorError> {
    if req.pattern.is_empty() {
        return Err(tool("`pattern` is required: a regular expression."));
    }
    let regex = regex::bytes::RegexBuilder::new(&req.pattern)
        .case_insensitive(true)
        .multi_line(true)
        .build()
        .map_err(|e| tool(format!("Invalid regex pattern: {e}")))?;
    let root = search_root(workspace, req.path.as_deref())?;
    let include = req.include.as_deref().map(str::trim).filter(|i| !i.is_empty()).map(Pattern::new).transpose()?;
    let (files, truncated) = walk(&root, |f| {
        if include.as_ref().is_some_and(|p| !p.matches(&root, f)) {
            return false;
        }
        if std::fs::metadata(f).map_or(true, |m| m.len() > MAX_FILE_BYTES) {
            return false;
        }
        match std::fs::read(f) {
            Ok(bytes) => !binary(&bytes) && regex.is_match(&bytes),
            Err(_) => false,
        }
    });
    Ok(SearchResponse { files, search_path: root.display().to_string(), truncated })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let w = |p: &str, text: &str| {
            let path = dir.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        w("src/main.rs", "fn main() {\n    println!(\"Hello\");\n}\n");
        w("src/lib/util.rs", "pub fn helper() {}\n// TODO: more\n");
        w("web/app.ts", "export const hello = 1;\n");
        w("web/view.tsx", "// todo later\n");
        w(".hidden/secret.rs", "fn hidden() {}\n");
        w("data.bin", "hello\0binary");
        dir
    }

    fn names(r: &SearchResponse, root: &Path) -> Vec<String> {
        let mut n: Vec<String> = r
            .files
            .iter()
            .map(|f| Path::new(f).strip_prefix(std::fs::canonicalize(root).unwrap()).unwrap().display().to_string())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn glob_matches_names_anywhere_and_paths_from_the_root() {
        let dir = tree();
        let any = glob(dir.path(), &GlobRequest { pattern: "*.rs".into(), path: None }).unwrap();
        assert_eq!(names(&any, dir.path()), ["src/lib/util.rs", "src/main.rs"], "hidden directories are skipped");
        let deep = glob(dir.path(), &GlobRequest { pattern: "src/**/*.rs".into(), path: None }).unwrap();
        assert_eq!(names(&deep, dir.path()), ["src/lib/util.rs", "src/main.rs"]);
        let top = glob(dir.path(), &GlobRequest { pattern: "src/*.rs".into(), path: None }).unwrap();
        assert_eq!(names(&top, dir.path()), ["src/main.rs"], "`*` does not cross a `/`");
        let braces = glob(dir.path(), &GlobRequest { pattern: "**/*.{ts,tsx}".into(), path: Some("web".into()) }).unwrap();
        assert_eq!(braces.files.len(), 2);
        assert!(braces.search_path.ends_with("/web"));
        assert!(glob(dir.path(), &GlobRequest { pattern: "*.rs".into(), path: Some("nowhere".into()) }).is_err());
    }

    #[test]
    fn grep_lists_files_whose_content_matches() {
        let dir = tree();
        let todo = grep(dir.path(), &GrepRequest { pattern: "todo".into(), path: None, include: None }).unwrap();
        assert_eq!(names(&todo, dir.path()), ["src/lib/util.rs", "web/view.tsx"], "case-insensitive");
        let only_ts =
            grep(dir.path(), &GrepRequest { pattern: "todo|hello".into(), path: None, include: Some("*.{ts,tsx}".into()) }).unwrap();
        assert_eq!(names(&only_ts, dir.path()), ["web/app.ts", "web/view.tsx"]);
        let anchored = grep(dir.path(), &GrepRequest { pattern: r"^pub fn \w+".into(), path: None, include: None }).unwrap();
        assert_eq!(names(&anchored, dir.path()), ["src/lib/util.rs"], "`^` is a line's start");
        let binary = grep(dir.path(), &GrepRequest { pattern: "binary".into(), path: None, include: None }).unwrap();
        assert!(binary.files.is_empty(), "binary files are skipped");
        let bad = grep(dir.path(), &GrepRequest { pattern: "(".into(), path: None, include: None }).unwrap_err();
        assert!(bad.to_string().contains("Invalid regex pattern"), "{bad}");
    }
}
