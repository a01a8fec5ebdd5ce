//! The editor's files, for `halyard acp`. The conversation works in its sandbox, but what the
//! editor holds stays the editor's: a file a prompt names under the session's folder is read
//! from the editor (`fs/read_text_file`: its unsaved changes too) and put in the workspace
//! before the message goes, and the files the conversation changed are written back to the
//! editor (`fs/write_text_file`) after each edit and at the end of the turn, each only when its
//! content is new to the editor. Both only when the editor offers the method
//! (`clientCapabilities.fs`), and only for files under the folder the session was opened in.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

/// What the editor offers, and what it was sent.
#[derive(Default)]
pub(super) struct Editor {
    pub(super) reads: bool,
    pub(super) writes: bool,
    /// Each session's folder in the editor.
    pub(super) roots: HashMap<String, PathBuf>,
    /// What each session's files hold in the editor, as far as this side knows (a hash).
    pub(super) known: HashMap<(String, String), u64>,
}

impl Editor {
    /// Takes what the editor's `initialize` offers.
    pub(super) fn offered(&mut self, capabilities: &Value) {
        self.reads = capabilities.pointer("/fs/readTextFile").and_then(Value::as_bool).unwrap_or(false);
        self.writes = capabilities.pointer("/fs/writeTextFile").and_then(Value::as_bool).unwrap_or(false);
    }

    pub(super) fn opened(&mut self, session: &str, cwd: Option<&str>) {
        if let Some(cwd) = cwd.filter(|c| Path::new(c).is_absolute()) {
            self.roots.insert(session.to_owned(), PathBuf::from(cwd));
        }
    }

    /// Where `uri` (a `file://` URI or an absolute path) is in session's folder, if it is in it.
    pub(super) fn relative(&self, session: &str, uri: &str) -> Option<String> {
        let root = self.roots.get(session)?;
        let path = match uri.strip_prefix("file://") {
            Some(p) => percent_decode(p)?,
            None => uri.to_owned(),
        };
        let rel = Path::new(&path).strip_prefix(root).ok()?;
        let parts: Option<Vec<&str>> = rel.components().map(|c| if let Component::Normal(p) = c { p.to_str() } else { None }).collect();
        parts.filter(|p| !p.is_empty()).map(|p| p.join("/"))
    }
}

/// A URI's path with its `%XX` escapes undone (`None` when they do not make UTF-8).
pub(super) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%').then(|| s.get(i + 1..i + 3)).flatten().and_then(|h| u8::from_str_radix(h, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

pub(super) fn hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_under_the_sessions_folder_are_the_editors_to_share() {
        let mut e = Editor::default();
        e.opened("s", Some("/home/me/project"));
        assert_eq!(e.relative("s", "file:///home/me/project/src/main.rs").as_deref(), Some("src/main.rs"));
        assert_eq!(e.relative("s", "/home/me/project/README.md").as_deref(), Some("README.md"));
        assert_eq!(e.relative("s", "file:///home/me/project/my%20notes.md").as_deref(), Some("my notes.md"));
        assert_eq!(e.relative("s", "file:///home/me/project/../secrets.txt"), None);
        assert_eq!(e.relative("s", "file:///etc/passwd"), None);
        assert_eq!(e.relative("s", "file:///home/me/project"), None);
        assert_eq!(e.relative("other", "file:///home/me/project/a"), None);
    }
}
