//! Following a run over the event WebSocket, as `run`, `send` and `chat` do: each event as
//! [`render::event`] shows it, and the agent's answer as the model writes it (the socket's
//! `answer_delta` frames), so a long answer reads as it comes rather than all at once when done.
//! The finished message is then not printed again, only its line closed.

use anyhow::Result;
use futures::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use crate::client::Client;
use crate::render::{self, Style};

/// The answer being printed as it is written.
#[derive(Default)]
struct Writing {
    /// The log's seq when it began.
    after: u64,
    /// Its pieces held, and its text printed so far.
    have: u64,
    text: String,
}

/// Follows `conv` after `after` until `done` says a status ends the run: `Ok(Some((status,
/// last seq)))` (`closed` if the socket closed first), or `Ok(None)` when no socket could be
/// opened (the caller polls instead).
pub async fn run(c: &Client, conv: &str, after: u64, style: &Style, mut done: impl FnMut(&str) -> bool) -> Result<Option<(String, u64)>> {
    let Ok(mut socket) = c.websocket(&format!("/conversations/{conv}/events/ws?after_seq={after}")).await else { return Ok(None) };
    let mut last = after;
    let mut writing: Option<Writing> = None;
    while let Some(frame) = socket.next().await {
        let text = match frame? {
            Message::Text(t) => t,
            Message::Close(_) => break,
            _ => continue,
        };
        let Ok(frame) = serde_json::from_str::<Value>(&text) else { continue };
        if frame["kind"] == "answer_delta" {
            if !style.json {
                piece(&mut writing, &frame, style);
            }
            continue;
        }
        let Some(seq) = frame["seq"].as_u64().filter(|s| *s > last) else { continue };
        last = seq;
        // (An event that prints nothing, like the answer's `llm_call`, leaves its line open.)
        if let Some(line) = render::event(style, &frame) {
            match writing.take() {
                // The answer was printed as it came: its line is closed, the rest of the event
                // shown.
                Some(w) => {
                    style.out("\n");
                    let mut ev = frame.clone();
                    if ev["kind"] == "action" && ev["thought"].as_str() == Some(w.text.as_str()) {
                        ev["thought"] = Value::Null;
                        style.out(&format!("{}\n", render::event(style, &ev).unwrap_or_default()));
                    } else if !(ev["kind"] == "agent_message" && ev["text"].as_str() == Some(w.text.as_str())) {
                        style.out(&format!("{line}\n"));
                    }
                }
                None => style.out(&format!("{line}\n")),
            }
        }
        if frame["kind"] == "execution_status" {
            let status = frame["status"].as_str().unwrap_or_default();
            if done(status) {
                return Ok(Some((status.to_owned(), last)));
            }
        }
    }
    Ok(Some(("closed".into(), last)))
}

/// Prints a piece of the answer being written: appended to what is shown, or the whole text so
/// far when it continues what is shown (a retried call starts a new line).
fn piece(writing: &mut Option<Writing>, d: &Value, style: &Style) {
    let (after, from, to) = (d["after_seq"].as_u64().unwrap_or(0), d["from"].as_u64().unwrap_or(0), d["to"].as_u64().unwrap_or(0));
    let text = d["text"].as_str().unwrap_or_default();
    let w = match writing {
        Some(w) if w.after == after => w,
        _ => {
            style.out(&format!("{} ", style.paint("1;35", "agent ›")));
            writing.insert(Writing { after, ..Default::default() })
        }
    };
    if from == w.have {
        style.out(text);
        w.text.push_str(text);
    } else if from == 0 && to > w.have {
        match text.strip_prefix(w.text.as_str()) {
            Some(rest) => style.out(rest),
            None => style.out(&format!("\n{} {text}", style.paint("1;35", "agent ›"))),
        }
        w.text = text.to_owned();
    } else {
        return;
    }
    w.have = to;
}
