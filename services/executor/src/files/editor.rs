//! The `file_editor` tool, with OpenHands' commands and messages: `view`, `create`,
//! `str_replace`, `insert`, `undo_edit`. Relative paths are taken from the workspace.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use halyard_protocol::executor::EditRequest;

use crate::error::ExecutorError;

/// Edits kept per file for `undo_edit`.
const UNDO_DEPTH: usize = 10;
/// Lines of context shown around an edit.
const SNIPPET_LINES: usize = 4;
/// Largest file `view` shows whole.
const MAX_VIEW_BYTES: usize = 512 * 1024;

/// The editor; keeps undo history per file.
pub struct Editor {
    workspace: PathBuf,
    history: Mutex<HashMap<PathBuf, Vec<String>>>,
    /// Each edited file's content before its first edit (`None`: it did not exist), for the
    /// changes of a workspace that is no repository.
    originals: Mutex<std::collections::BTreeMap<PathBuf, Option<String>>>,
}

fn tool(msg: impl Into<String>) -> ExecutorError {
    ExecutorError::Tool(msg.into())
}

impl Editor {
    pub fn new(workspace: PathBuf) -> Self {
        Self { workspace, history: Mutex::new(HashMap::new()), originals: Mutex::new(Default::default()) }
    }

    /// Every file the editor wrote, with its content before the first write.
    pub fn edited(&self) -> Vec<(PathBuf, Option<String>)> {
        self.originals.lock().map(|o| o.iter().map(|(p, c)| (p.clone(), c.clone())).collect()).unwrap_or_default()
    }

    fn resolve(&self, path: &str) -> Result<PathBuf, ExecutorError> {
        if path.trim().is_empty() {
            return Err(tool("`path` is required."));
        }
        let p = Path::new(path);
        Ok(if p.is_absolute() { p.to_owned() } else { self.workspace.join(p) })
    }

    /// Runs one command; `Ok` is the observation text.
    pub fn run(&self, req: &EditRequest) -> Result<String, ExecutorError> {
        let path = self.resolve(&req.path)?;
        match req.command.as_str() {
            "view" => self.view(&path, req.view_range.as_deref()),
            "create" => self.create(&path, req.file_text.as_deref()),
            "str_replace" => self.str_replace(&path, req.old_str.as_deref(), req.new_str.as_deref().unwrap_or("")),
            "insert" => self.insert(&path, req.insert_line, req.new_str.as_deref()),
            "undo_edit" => self.undo(&path),
            other => Err(tool(format!(
                "Unrecognized command `{other}`. The allowed commands are: view, create, str_replace, insert, undo_edit."
            ))),
        }
    }

    fn read(&self, path: &Path) -> Result<String, ExecutorError> {
        if !path.exists() {
            return Err(tool(format!("The path {} does not exist. Please provide a valid path.", path.display())));
        }
        if path.is_dir() {
            return Err(tool(format!("The path {} is a directory; this command needs a file.", path.display())));
        }
        let bytes = std::fs::read(path).map_err(|e| tool(format!("Cannot read {}: {e}", path.display())))?;
        String::from_utf8(bytes).map_err(|_| tool(format!("{} is not a UTF-8 text file.", path.display())))
    }

    fn write(&self, path: &Path, old: Option<String>, text: &str) -> Result<(), ExecutorError> {
        if let Ok(mut originals) = self.originals.lock() {
            originals.entry(path.to_owned()).or_insert_with(|| std::fs::read_to_string(path).ok());
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| tool(format!("Cannot create {}: {e}", parent.display())))?;
        }
        std::fs::write(path, text).map_err(|e| tool(format!("Cannot write {}: {e}", path.display())))?;
        if let Some(old) = old {
            if let Ok(mut h) = self.history.lock() {
                let stack = h.entry(path.to_owned()).or_default();
                stack.push(old);
                if stack.len() > UNDO_DEPTH {
                    stack.remove(0);
                }
            }
        }
        Ok(())
    }

    fn view(&self, path: &Path, range: Option<&[i64]>) -> Result<String, ExecutorError> {
        if path.is_dir() {
            if range.is_some() {
                return Err(tool("`view_range` is not allowed when `path` is a directory."));
            }
            let mut lines = Vec::new();
            list_dir(path, 0, &mut lines);
            return Ok(format!(
                "Here's the files and directories up to 2 levels deep in {}, excluding hidden items:\n{}\n{}",
                path.display(),
                path.display(),
                lines.join("\n")
            ));
        }
        let text = self.read(path)?;
        let lines: Vec<&str> = text.split('\n').collect();
        let n = lines.len() as i64;
        let (start, end) = match range {
            None => {
                if text.len() > MAX_VIEW_BYTES {
                    return Err(tool(format!(
                        "{} is {} bytes; view a part of it with `view_range` [start, end].",
                        path.display(),
                        text.len()
                    )));
                }
                (1, n)
            }
            Some([s, e]) => {
                let end = if *e == -1 { n } else { *e };
                if *s < 1 || *s > n || end < *s || end > n {
                    return Err(tool(format!(
                        "Invalid `view_range` [{s}, {e}]: the file has {n} lines; use 1 <= start <= end <= {n} (end -1 means the last line)."
                    )));
                }
                (*s, end)
            }
            Some(_) => return Err(tool("`view_range` must be two integers [start, end].")),
        };
        let body = number_lines(&lines[(start - 1) as usize..end as usize], start as usize);
        Ok(format!("Here's the result of running `cat -n` on {}:\n{body}", path.display()))
    }

    fn create(&self, path: &Path, text: Option<&str>) -> Result<String, ExecutorError> {
        let text = text.ok_or_else(|| tool("`file_text` is required for command `create`."))?;
        if path.exists() {
            return Err(tool(format!(
                "File already exists at: {}. Cannot overwrite files using command `create`; use `str_replace` to change it.",
                path.display()
            )));
        }
        self.write(path, None, text)?;
        Ok(format!("File created successfully at: {}", path.display()))
    }

    fn str_replace(&self, path: &Path, old: Option<&str>, new: &str) -> Result<String, ExecutorError> {
        let old = old.ok_or_else(|| tool("`old_str` is required for command `str_replace`."))?;
        if old.is_empty() {
            return Err(tool("`old_str` must not be empty; to add text use `insert`."));
        }
        let text = self.read(path)?;
        let hits: Vec<usize> = text.match_indices(old).map(|(i, _)| i).collect();
        match hits.len() {
            0 => Err(tool(format!("No replacement was performed, old_str `{old}` did not appear verbatim in {}.", path.display()))),
            1 => {
                let at = hits[0];
                let updated = format!("{}{new}{}", &text[..at], &text[at + old.len()..]);
                self.write(path, Some(text.clone()), &updated)?;
                let line = text[..at].matches('\n').count();
                let snippet = snippet(&updated, line, new.matches('\n').count());
                Ok(format!(
                    "The file {} has been edited. Here's the result of running `cat -n` on a snippet of {}:\n{snippet}\nReview the changes and make sure they are as expected. Edit the file again if necessary.",
                    path.display(),
                    path.display()
                ))
            }
            _ => {
                let lines: Vec<String> = hits.iter().map(|i| (text[..*i].matches('\n').count() + 1).to_string()).collect();
                Err(tool(format!(
                    "No replacement was performed. Multiple occurrences of old_str `{old}` in lines [{}]. Please ensure it is unique.",
                    lines.join(", ")
                )))
            }
        }
    }

    fn insert(&self, path: &Path, line: Option<i64>, new: Option<&str>) -> Result<String, ExecutorError> {
        let line = line.ok_or_else(|| tool("`insert_line` is required for command `insert`."))?;
        let new = new.ok_or_else(|| tool("`new_str` is required for command `insert`."))?;
        let text = self.read(path)?;
        let lines: Vec<&str> = text.split('\n').collect();
        let n = lines.len() as i64;
        if line < 0 || line > n {
            return Err(tool(format!("Invalid `insert_line` {line}: it should be within the range of lines of the file: [0, {n}].")));
        }
        let mut out: Vec<&str> = lines[..line as usize].to_vec();
        out.extend(new.split('\n'));
        out.extend(&lines[line as usize..]);
        let updated = out.join("\n");
        self.write(path, Some(text.clone()), &updated)?;
        let snippet = snippet(&updated, line as usize, new.matches('\n').count());
        Ok(format!(
            "The file {} has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n{snippet}\nReview the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.",
            path.display()
        ))
    }

    fn undo(&self, path: &Path) -> Result<String, ExecutorError> {
        let previous = self
            .history
            .lock()
            .map_err(|_| ExecutorError::Internal("editor history poisoned".into()))?
            .get_mut(path)
            .and_then(Vec::pop)
            .ok_or_else(|| tool(format!("No edit history found for {}.", path.display())))?;
        std::fs::write(path, &previous).map_err(|e| tool(format!("Cannot write {}: {e}", path.display())))?;
        let lines: Vec<&str> = previous.split('\n').collect();
        Ok(format!(
            "Last edit to {} undone successfully. Here's the result of running `cat -n` on {}:\n{}",
            path.display(),
            path.display(),
            number_lines(&lines, 1)
        ))
    }
}

fn number_lines(lines: &[&str], first: usize) -> String {
    lines.iter().enumerate().map(|(i, l)| format!("{:>6}\t{l}", i + first)).collect::<Vec<_>>().join("\n")
}

/// Numbered lines around an edit at 0-based `line` spanning `extra` more lines.
fn snippet(text: &str, line: usize, extra: usize) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let start = line.saturating_sub(SNIPPET_LINES);
    let end = (line + extra + SNIPPET_LINES + 1).min(lines.len());
    number_lines(&lines[start..end], start + 1)
}

fn list_dir(dir: &Path, depth: usize, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') {
            continue;
        }
        let path = e.path();
        let is_dir = path.is_dir();
        out.push(format!("{}{}", path.display(), if is_dir { "/" } else { "" }));
        if is_dir && depth < 1 {
            list_dir(&path, depth + 1, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(command: &str, path: &str) -> EditRequest {
        EditRequest { command: command.into(), path: path.into(), ..Default::default() }
    }

    #[test]
    fn create_replace_insert_undo() {
        let dir = std::env::temp_dir().join(format!("halyard-editor-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let ed = Editor::new(dir.clone());
        let out = ed.run(&EditRequest { file_text: Some("a\nb\nb\nc".into()), ..req("create", "x/f.txt") }).unwrap();
        assert!(out.contains("File created successfully"));
        assert!(ed.run(&EditRequest { file_text: Some("z".into()), ..req("create", "x/f.txt") }).is_err());

        let err = ed.run(&EditRequest { old_str: Some("b".into()), new_str: Some("B".into()), ..req("str_replace", "x/f.txt") });
        let Err(ExecutorError::Tool(msg)) = err else { panic!("expected a tool error") };
        assert!(msg.contains("Multiple occurrences") && msg.contains("[2, 3]"), "{msg}");
        let err = ed.run(&EditRequest { old_str: Some("q".into()), ..req("str_replace", "x/f.txt") });
        let Err(ExecutorError::Tool(msg)) = err else { panic!("expected a tool error") };
        assert!(msg.contains("did not appear verbatim"), "{msg}");

        ed.run(&EditRequest { old_str: Some("a\n".into()), new_str: Some("A\n".into()), ..req("str_replace", "x/f.txt") }).unwrap();
        ed.run(&EditRequest { insert_line: Some(1), new_str: Some("ins".into()), ..req("insert", "x/f.txt") }).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("x/f.txt")).unwrap(), "A\nins\nb\nb\nc");
        ed.run(&req("undo_edit", "x/f.txt")).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("x/f.txt")).unwrap(), "A\nb\nb\nc");
        ed.run(&req("undo_edit", "x/f.txt")).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("x/f.txt")).unwrap(), "a\nb\nb\nc");
        assert!(ed.run(&req("undo_edit", "x/f.txt")).is_err());

        let view = ed.run(&EditRequest { view_range: Some(vec![2, -1]), ..req("view", "x/f.txt") }).unwrap();
        assert!(view.contains("     2\tb") && view.contains("     4\tc") && !view.contains("\ta\n"));
        let listing = ed.run(&req("view", "")).err();
        assert!(listing.is_some());
        let listing = ed.run(&req("view", dir.to_str().unwrap())).unwrap();
        assert!(listing.contains("x/f.txt"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
