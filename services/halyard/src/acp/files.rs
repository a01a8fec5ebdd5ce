//! The editor's files in a conversation: what a prompt links is put into the workspace as the
//! editor holds it, and what the conversation changed is written back to the editor.

use halyard_platform::net::percent_encode;
use serde_json::{Value, json};

use super::Server;

use super::editor::{Editor, hash};

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
