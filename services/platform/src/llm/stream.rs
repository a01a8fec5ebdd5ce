//! Reading a streamed answer (server-sent events), whichever wire: each wire accumulates its
//! own events ([`Accumulate`]) over the shared line state ([`StreamState`]).

use futures::StreamExt;
use serde_json::Value;

use super::message::{Completion, Deltas, LlmError, transport};

/// What every wire's stream reader keeps besides its own fold: whether any data came, and the
/// answer's text not yet taken as a delta.
#[derive(Default, Debug)]
pub(crate) struct StreamState {
    pub(crate) saw_data: bool,
    pub(crate) fresh: String,
}

/// Adds `items` to the last message of `out` when it is `role`'s (its `field` array), else as a
/// message of their own: for wires that want roles alternating (Anthropic's, Gemini's).
pub(crate) fn push_turn(out: &mut Vec<Value>, role: &str, field: &str, items: Vec<Value>) {
    match out.last_mut() {
        Some(last) if last["role"] == role => {
            if let Some(existing) = last[field].as_array_mut() {
                existing.extend(items);
            }
        }
        _ => out.push(serde_json::json!({"role": role, field: items})),
    }
}

impl StreamState {
    /// The JSON of a server-sent event's `data:` line, noting that data came (none: another
    /// field's line, or an empty one).
    pub(crate) fn data(&mut self, line: &str) -> Result<Option<Value>, LlmError> {
        let Some(data) = line.strip_prefix("data:").map(str::trim).filter(|d| !d.is_empty()) else { return Ok(None) };
        self.saw_data = true;
        serde_json::from_str(data).map(Some).map_err(|e| LlmError::Malformed(format!("stream event: {e}")))
    }
}

/// A wire's stream reader: fed one server-sent-event line at a time.
pub(crate) trait Accumulate {
    /// Feeds a line; true at the end of the answer.
    fn line(&mut self, line: &str) -> Result<bool, LlmError>;
    fn state(&mut self) -> &mut StreamState;
    fn finish(self) -> Result<Completion, LlmError>;
    /// [`Self::finish`] for a boxed reader ([`passthrough::UsageReader`]).
    fn finish_boxed(self: Box<Self>) -> Result<Completion, LlmError>;
}

/// Reads a server-sent-event stream into a completion, passing its text to `deltas` as each
/// chunk of the body brings some.
pub(crate) async fn read_stream(
    response: reqwest::Response,
    mut acc: impl Accumulate,
    deltas: Option<&Deltas>,
) -> Result<Completion, LlmError> {
    let mut buf = Vec::<u8>::new();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        buf.extend_from_slice(&chunk.map_err(transport)?);
        let mut ended = false;
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            if acc.line(line.trim_end())? {
                ended = true;
                break;
            }
        }
        // One piece per chunk of the body: what its lines added.
        if let Some(d) = deltas {
            let fresh = std::mem::take(&mut acc.state().fresh);
            if !fresh.is_empty() {
                let _ = d.send(Some(fresh));
            }
        }
        if ended {
            return acc.finish();
        }
    }
    if !buf.is_empty() {
        let line = String::from_utf8_lossy(&buf).to_string();
        acc.line(line.trim_end())?;
    }
    if !acc.state().saw_data {
        return Err(LlmError::Malformed("stream ended without data".into()));
    }
    acc.finish()
}
