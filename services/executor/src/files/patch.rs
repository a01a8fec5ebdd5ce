//! `apply_patch`: the V4A patch format OpenAI's models are trained to write (and OpenHands'
//! GPT-5 tool set uses). A patch is read whole and checked against the files before anything is
//! written: every section applies, or none does.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: notes/new.txt
//! +its first line
//! *** Update File: src/app.py
//! *** Move to: src/main.py
//! @@ def greet():
//! -    print("Hi")
//! +    print("Hello")
//! *** Delete File: old.txt
//! *** End Patch
//! ```
//!
//! In an update, each hunk's context (` `) and removed (`-`) lines are looked for in the file
//! from where the previous hunk ended (after the `@@` line's text, when it has one): exactly, else
//! ignoring trailing whitespace, else ignoring surrounding whitespace (the response's `fuzz`
//! says how loosely). `*** End of File` anchors a hunk at the file's end.

use std::path::{Component, Path, PathBuf};

use halyard_protocol::executor::PatchResponse;

use crate::error::ExecutorError;

fn bad(msg: impl Into<String>) -> ExecutorError {
    ExecutorError::Tool(msg.into())
}

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq)]
enum Line {
    Keep(String),
    Remove(String),
    Add(String),
}

#[derive(Debug, Default)]
struct Hunk {
    /// The `@@` line's text: a line to find first (a function's signature, say).
    anchor: String,
    lines: Vec<Line>,
    /// `*** End of File`: the hunk ends where the file does.
    at_end: bool,
}

#[derive(Debug)]
enum Op {
    Add { path: String, lines: Vec<String> },
    Delete { path: String },
    Update { path: String, move_to: Option<String>, hunks: Vec<Hunk> },
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";

fn is_header(line: &str) -> bool {
    line.starts_with(ADD) || line.starts_with(DELETE) || line.starts_with(UPDATE) || line == END
}

/// Reads a patch into its sections.
fn parse(text: &str) -> Result<Vec<Op>, ExecutorError> {
    let lines: Vec<&str> = text.trim().lines().map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    if lines.first().map(|l| l.trim()) != Some(BEGIN) || lines.last().map(|l| l.trim()) != Some(END) {
        return Err(bad(format!("The patch must start with `{BEGIN}` and end with `{END}`, each on a line of its own.")));
    }
    let body = &lines[1..lines.len() - 1];
    let mut ops = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i];
        i += 1;
        if let Some(path) = line.strip_prefix(ADD) {
            let mut added = Vec::new();
            while i < body.len() && !is_header(body[i]) {
                let Some(text) = body[i].strip_prefix('+') else {
                    return Err(bad(format!("In `{ADD}{path}` every line starts with `+`; this one does not: {:?}", body[i])));
                };
                added.push(text.to_owned());
                i += 1;
            }
            ops.push(Op::Add { path: path.trim().to_owned(), lines: added });
        } else if let Some(path) = line.strip_prefix(DELETE) {
            ops.push(Op::Delete { path: path.trim().to_owned() });
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            let move_to = match body.get(i).and_then(|l| l.strip_prefix(MOVE)) {
                Some(to) => {
                    i += 1;
                    Some(to.trim().to_owned())
                }
                None => None,
            };
            let mut hunks: Vec<Hunk> = Vec::new();
            while i < body.len() && !is_header(body[i]) {
                let line = body[i];
                i += 1;
                if let Some(anchor) = line.strip_prefix("@@") {
                    hunks.push(Hunk { anchor: anchor.trim().to_owned(), ..Default::default() });
                    continue;
                }
                if line == END_OF_FILE {
                    match hunks.last_mut() {
                        Some(h) => h.at_end = true,
                        None => return Err(bad(format!("`{END_OF_FILE}` in `{UPDATE}{path}` ends no hunk."))),
                    }
                    continue;
                }
                // Lines before any `@@` make a hunk of their own.
                if hunks.is_empty() {
                    hunks.push(Hunk::default());
                }
                let Some(hunk) = hunks.last_mut() else { continue };
                // An empty line is an empty context line (editors strip the space).
                let parsed = match line.chars().next() {
                    None => Line::Keep(String::new()),
                    Some(' ') => Line::Keep(line[1..].to_owned()),
                    Some('-') => Line::Remove(line[1..].to_owned()),
                    Some('+') => Line::Add(line[1..].to_owned()),
                    Some(_) => {
                        return Err(bad(format!(
                            "In `{UPDATE}{path}` a hunk line starts with ` ` (context), `-` (removed) or `+` (added); this one does \
                             not: {line:?}"
                        )));
                    }
                };
                hunk.lines.push(parsed);
            }
            if hunks.iter().all(|h| h.lines.is_empty()) && move_to.is_none() {
                return Err(bad(format!("`{UPDATE}{path}` changes nothing: give hunks of `-` and `+` lines.")));
            }
            ops.push(Op::Update { path: path.trim().to_owned(), move_to, hunks });
        } else if line.trim().is_empty() {
            continue;
        } else {
            return Err(bad(format!("Unknown line {line:?}: each section starts with `{ADD}`, `{UPDATE}` or `{DELETE}` and a path.")));
        }
    }
    if ops.is_empty() {
        return Err(bad("The patch has no section: nothing to do."));
    }
    Ok(ops)
}

/// A patch's path in the workspace: relative, and never climbing out.
fn place(workspace: &Path, path: &str) -> Result<PathBuf, ExecutorError> {
    let p = Path::new(path);
    if path.is_empty() || p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(bad(format!("Patch paths are relative to the workspace and stay in it; {path:?} does not.")));
    }
    Ok(workspace.join(p))
}

/// Where `want` (a hunk's old lines) starts in `lines` at or after `from`, and how loosely it
/// matched: exactly (0), ignoring trailing whitespace (1), ignoring surrounding whitespace (100).
fn find(lines: &[String], want: &[String], from: usize, at_end: bool) -> Option<(usize, u32)> {
    if want.is_empty() {
        return Some((if at_end { lines.len() } else { from }, 0));
    }
    type Normalize = fn(&str) -> &str;
    let comparisons: [(u32, Normalize); 3] = [(0, |s| s), (1, str::trim_end), (100, str::trim)];
    for (fuzz, norm) in comparisons {
        let same = |at: usize| lines[at..at + want.len()].iter().zip(want).all(|(a, b)| norm(a) == norm(b));
        if lines.len() < want.len() {
            return None;
        }
        let last = lines.len() - want.len();
        if at_end {
            if last >= from && same(last) {
                return Some((last, fuzz));
            }
            continue;
        }
        if let Some(at) = (from..=last).find(|at| same(*at)) {
            return Some((at, fuzz));
        }
    }
    None
}

/// The file's new content after `hunks`, and the fuzz it took.
fn update(path: &str, text: &str, hunks: &[Hunk]) -> Result<(String, u32), ExecutorError> {
    let ends_with_newline = text.ends_with('\n');
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut cursor = 0;
    let mut fuzz = 0;
    for hunk in hunks {
        if !hunk.anchor.is_empty() {
            let found = (cursor..lines.len())
                .find(|i| lines[*i] == hunk.anchor)
                .or_else(|| (cursor..lines.len()).find(|i| lines[*i].trim() == hunk.anchor.trim()));
            match found {
                Some(i) => cursor = i + 1,
                None => return Err(bad(format!("{path}: the line `@@ {}` was not found.", hunk.anchor))),
            }
        }
        let old: Vec<String> = hunk
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Keep(s) | Line::Remove(s) => Some(s.clone()),
                Line::Add(_) => None,
            })
            .collect();
        let Some((at, loose)) = find(&lines, &old, cursor, hunk.at_end) else {
            return Err(bad(format!(
                "{path}: these lines were not found{}:\n{}",
                if cursor > 0 { format!(" after line {cursor}") } else { String::new() },
                old.join("\n")
            )));
        };
        fuzz += loose;
        // Context lines stay as the file has them (a loose match must not rewrite them).
        let mut matched = lines[at..at + old.len()].iter();
        let mut new = Vec::new();
        for l in &hunk.lines {
            match l {
                Line::Keep(_) => new.extend(matched.next().cloned()),
                Line::Remove(_) => drop(matched.next()),
                Line::Add(s) => new.push(s.clone()),
            }
        }
        let added = new.len();
        lines.splice(at..at + old.len(), new);
        cursor = at + added;
    }
    let mut out = lines.join("\n");
    if ends_with_newline || (text.is_empty() && !out.is_empty()) {
        out.push('\n');
    }
    Ok((out, fuzz))
}

/// What a patch does to the disk, worked out before any of it is done.
enum Write {
    Put(PathBuf, String),
    Remove(PathBuf),
}

/// Applies a patch to the workspace: all of it or, when any part does not apply, none of it.
pub fn apply(workspace: &Path, patch: &str) -> Result<PatchResponse, ExecutorError> {
    let ops = parse(patch)?;
    let mut writes = Vec::new();
    let mut summary = Vec::new();
    let mut fuzz = 0;
    let mut touched = std::collections::HashSet::new();
    let read = |path: &str, at: &Path| {
        std::fs::read_to_string(at).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => bad(format!("{path}: no such file in the workspace.")),
            _ => bad(format!("{path}: cannot read it as text: {e}")),
        })
    };
    for op in &ops {
        let path = match op {
            Op::Add { path, .. } | Op::Delete { path } | Op::Update { path, .. } => path,
        };
        if !touched.insert(path.clone()) {
            return Err(bad(format!("{path} appears in two sections of the patch: make them one.")));
        }
        let at = place(workspace, path)?;
        match op {
            Op::Add { lines, .. } => {
                if at.exists() {
                    return Err(bad(format!("{path} exists already: change it with `{UPDATE}{path}`.")));
                }
                let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
                writes.push(Write::Put(at, text));
                summary.push(format!("A {path}"));
            }
            Op::Delete { .. } => {
                if !at.is_file() {
                    return Err(bad(format!("{path}: no such file in the workspace to delete.")));
                }
                writes.push(Write::Remove(at));
                summary.push(format!("D {path}"));
            }
            Op::Update { move_to, hunks, .. } => {
                let (text, loose) = update(path, &read(path, &at)?, hunks)?;
                fuzz += loose;
                match move_to {
                    Some(to) => {
                        let dest = place(workspace, to)?;
                        if dest.exists() && dest != at {
                            return Err(bad(format!("{to} exists already: the move would overwrite it.")));
                        }
                        writes.push(Write::Remove(at));
                        writes.push(Write::Put(dest, text));
                        summary.push(format!("M {path} -> {to}"));
                    }
                    None => {
                        writes.push(Write::Put(at, text));
                        summary.push(format!("M {path}"));
                    }
                }
            }
        }
    }
    for w in writes {
        let done = match &w {
            Write::Put(at, text) => {
                at.parent().map(std::fs::create_dir_all).transpose().and_then(|_| std::fs::write(at, text)).map_err(|e| (at.clone(), e))
            }
            Write::Remove(at) => std::fs::remove_file(at).map_err(|e| (at.clone(), e)),
        };
        if let Err((at, e)) = done {
            return Err(bad(format!("{}: {e} (the sections before it were applied)", at.display())));
        }
    }
    Ok(PatchResponse {
        message: format!("Done! Changed {} file{}:\n{}", summary.len(), if summary.len() == 1 { "" } else { "s" }, summary.join("\n")),
        fuzz,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_changes_moves_and_deletes_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("app.py"), "def greet():\n    print(\"Hi\")\n\ndef other():\n    print(\"Hi\")\n").unwrap();
        std::fs::write(root.join("old.txt"), "bye\n").unwrap();
        let patch = "*** Begin Patch\n\
                     *** Add File: notes/new.txt\n+first\n+second\n\
                     *** Update File: app.py\n*** Move to: main.py\n@@ def other():\n-    print(\"Hi\")\n+    print(\"Hello\")\n\
                     *** Delete File: old.txt\n\
                     *** End Patch\n";
        let done = apply(root, patch).unwrap();
        assert_eq!(done.fuzz, 0);
        assert!(done.message.contains("A notes/new.txt") && done.message.contains("M app.py -> main.py"), "{}", done.message);
        assert_eq!(std::fs::read_to_string(root.join("notes/new.txt")).unwrap(), "first\nsecond\n");
        // The anchor picked the second function: the first is untouched.
        assert_eq!(
            std::fs::read_to_string(root.join("main.py")).unwrap(),
            "def greet():\n    print(\"Hi\")\n\ndef other():\n    print(\"Hello\")\n"
        );
        assert!(!root.join("app.py").exists() && !root.join("old.txt").exists());

        // A hunk that does not apply leaves everything as it was, the add before it included.
        let broken = "*** Begin Patch\n*** Add File: more.txt\n+x\n*** Update File: main.py\n-nothing like this\n+y\n*** End Patch";
        let e = apply(root, broken).unwrap_err().to_string();
        assert!(e.contains("were not found") && e.contains("nothing like this"), "{e}");
        assert!(!root.join("more.txt").exists());

        // Context found loosely (trailing spaces), and a hunk anchored at the end.
        let loose = "*** Begin Patch\n*** Update File: main.py\n def greet():   \n-    print(\"Hi\")\n+    print(\"Hey\")\n\
                     @@\n     print(\"Hello\")\n+# end\n*** End of File\n*** End Patch";
        let done = apply(root, loose).unwrap();
        assert_eq!(done.fuzz, 1);
        assert_eq!(
            std::fs::read_to_string(root.join("main.py")).unwrap(),
            "def greet():\n    print(\"Hey\")\n\ndef other():\n    print(\"Hello\")\n# end\n"
        );
    }

    #[test]
    fn bad_patches_are_refused_in_words() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let refuse = |p: &str| apply(root, p).unwrap_err().to_string();
        assert!(refuse("*** Add File: x\n+y").contains("must start with"));
        assert!(refuse("*** Begin Patch\n*** Add File: ../x\n+y\n*** End Patch").contains("stay in it"));
        assert!(refuse("*** Begin Patch\n*** Add File: /etc/x\n+y\n*** End Patch").contains("stay in it"));
        assert!(refuse("*** Begin Patch\n*** Add File: x\ny\n*** End Patch").contains("starts with `+`"));
        assert!(refuse("*** Begin Patch\n*** Delete File: missing\n*** End Patch").contains("no such file"));
        assert!(refuse("*** Begin Patch\n*** Frobnicate: x\n*** End Patch").contains("Unknown line"));
        std::fs::write(root.join("x"), "a\n").unwrap();
        assert!(refuse("*** Begin Patch\n*** Add File: x\n+y\n*** End Patch").contains("exists already"));
    }
}
