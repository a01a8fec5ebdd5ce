//! The editor's files, for `halyard acp`. The conversation works in its sandbox, but what the
//! editor holds stays the editor's: a file a prompt names under the session's folder is read
//! from the editor (`fs/read_text_file`: its unsaved changes too) and put in the workspace
//! before the message goes, and the files the conversation changed are written back to the
//! editor (`fs/write_text_file`) after each edit and at the end of the turn, each only when its
//! content is new to the editor. Both only when the editor offers the method
//! (`clientCapabilities.fs`), and only for files under the folder the session was opened in.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use halyard_platform::net::percent_encode;
use serde_json::{Value, json};

use super::Server;

/// What the editor offers, and what it was sent.
#[derive(Default)]
pub(super) struct Editor {
    reads: bool,
    writes: bool,
    /// Each session's folder in the editor.
    roots: HashMap<String, PathBuf>,
    /// What each session's files hold in the editor, as far as this side knows (a hash).
    known: HashMap<(String, String), u64>,
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
fn percent_decode(s: &str) -> Option<String> {
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

fn hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

impl Server {
    pub(super) fn editor(&self) -> std::sync::MutexGuard<'_, Editor> {
        self.editor.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts the files `prompt` names in the session's folder into the workspace as the editor
    /// holds them: a link's content read from the editor, an embedded resource's as given.
    pub(super) async fn bring_files(&self, session: &str, prompt: Option<&Value>) -> Result<(), (i64, String)> {
        for block in prompt.and_then(Value::as_array).into_iter().flatten() {
            let (uri, given) = match block["type"].as_str() {
                Some("resource_link") => (block["uri"].as_str(), None),
                Some("resource") => {
                    (block.pointer("/resource/uri").and_then(Value::as_str), block.pointer("/resource/text").and_then(Value::as_str))
                }
                _ => continue,
            };
            let (reads, rel) = {
                let editor = self.editor();
                (editor.reads, uri.and_then(|u| editor.relative(session, u)))
            };
            let Some(rel) = rel else { continue };
            let text = match given {
                Some(text) => text.to_owned(),
                None if reads => {
                    let path = self.editor().roots.get(session).map(|r| r.join(&rel).display().to_string()).unwrap_or_default();
                    let answer = self.ask("fs/read_text_file", json!({"sessionId": session, "path": path})).await;
                    match answer.as_ref().and_then(|a| a.pointer("/result/content")).and_then(Value::as_str) {
                        Some(content) => content.to_owned(),
                        None => continue,
                    }
                }
                None => continue,
            };
            let path = format!("/conversations/{session}/files?path={}", percent_encode(&rel));
            self.client.upload(&path, text.clone().into_bytes()).await.map_err(super::failed)?;
            self.editor().known.insert((session.to_owned(), rel), hash(&text));
        }
        Ok(())
    }

    /// Writes the files the conversation changed back to the editor, those whose content is new
    /// to it (a file the workspace no longer has stays as it is in the editor).
    pub(super) async fn send_changes(&self, session: &str) {
        let root = {
            let editor = self.editor();
            if !editor.writes {
                return;
            }
            let Some(root) = editor.roots.get(session).cloned() else { return };
            root
        };
        let Ok(changes) = self.client.get(&format!("/conversations/{session}/changes")).await else { return };
        for file in changes["files"].as_array().into_iter().flatten() {
            let (Some(rel), Some(status)) = (file["path"].as_str(), file["status"].as_str()) else { continue };
            if status == "deleted" {
                continue;
            }
            let mut bytes = Vec::new();
            let raw = format!("/conversations/{session}/files/raw?path={}", percent_encode(rel));
            if self.client.download(&raw, &mut bytes).await.is_err() {
                continue;
            }
            // (The editor's methods carry text: a binary file stays in the workspace.)
            let Ok(text) = String::from_utf8(bytes) else { continue };
            let key = (session.to_owned(), rel.to_owned());
            if self.editor().known.get(&key) == Some(&hash(&text)) {
                continue;
            }
            let path = root.join(rel).display().to_string();
            let answer = self.ask("fs/write_text_file", json!({"sessionId": session, "path": path, "content": text})).await;
            if answer.is_some_and(|a| a.get("error").is_none()) {
                self.editor().known.insert(key, hash(&text));
            }
        }
    }
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
