//! LLM calls made for a third-party agent (Claude Code, Codex, OpenCode...), which writes its own
//! requests in its provider's wire: they are passed through to the profile's server as they
//! are, with the model the profile names and the profile's key (which the agent never holds),
//! and the answer comes back as the server wrote it. [`UsageReader`] reads what the call used out
//! of the answer as it passes (streamed or whole), with the same stream readers Halyard's own
//! calls use.

use serde_json::Value;

use super::{Accumulate, LlmClient, LlmError, Usage, anthropic, responses};

/// The endpoint (after the base URL's `/v1`) each wire serves.
pub fn endpoint(wire: &str) -> &'static str {
    match wire {
        "anthropic" => "messages",
        responses::PROVIDER => "responses",
        _ => "chat/completions",
    }
}

impl LlmClient {
    /// The wire this client speaks (`openai`, `anthropic`, `openai-responses`).
    pub fn wire(&self) -> &str {
        &self.config.provider
    }

    /// Sends an agent's request `body` to this client's server at its wire's endpoint, with this
    /// client's model and key; a stream of chat completions is asked for its usage too. The
    /// response is the server's, whatever its status (the agent reads its errors itself), but
    /// for a failure to reach the server at all.
    pub async fn pass_through(&self, mut body: Value, headers: &[(String, String)]) -> Result<reqwest::Response, LlmError> {
        let _permit = self.permits.acquire().await.map_err(|e| LlmError::Transport(e.to_string()))?;
        let wire = self.wire();
        if let Some(o) = body.as_object_mut() {
            o.insert("model".into(), Value::String(self.config.model.clone()));
            if wire == "openai" && o.get("stream").and_then(Value::as_bool) == Some(true) {
                let options = o.entry("stream_options").or_insert_with(|| Value::Object(Default::default()));
                if let Some(options) = options.as_object_mut() {
                    options.insert("include_usage".into(), Value::Bool(true));
                }
            }
        }
        let base = self.config.base_url.trim_end_matches('/');
        let mut request = self.http.post(format!("{base}/{}", endpoint(wire))).json(&body);
        // What the agent says of its request that servers read (never its credentials: the key
        // is the profile's).
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            if name == "anthropic-beta" || (name == "anthropic-version" && wire == "anthropic") || name == "accept" {
                request = request.header(name, value);
            }
        }
        if wire == "anthropic" && !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("anthropic-version")) {
            request = request.header("anthropic-version", anthropic::VERSION);
        }
        let request = if wire == "anthropic" {
            request.header("x-api-key", &self.config.api_key)
        } else if self.config.api_key.is_empty() {
            request
        } else {
            request.bearer_auth(&self.config.api_key)
        };
        request.timeout(std::time::Duration::from_secs(self.config.timeout_secs)).send().await.map_err(super::transport)
    }
}

/// Reads what one passed-through call used from its answer's bytes.
pub struct UsageReader {
    wire: String,
    stream: bool,
    buf: Vec<u8>,
    acc: Box<dyn Accumulate + Send>,
    whole: Vec<u8>,
}

impl UsageReader {
    /// For an answer on `wire`, streamed (server-sent events) or not.
    pub fn new(wire: &str, stream: bool) -> Self {
        let acc: Box<dyn Accumulate + Send> = match wire {
            "anthropic" => Box::new(anthropic::StreamAccumulator::default()),
            responses::PROVIDER => Box::new(responses::StreamAccumulator::default()),
            _ => Box::new(super::StreamAccumulator::default()),
        };
        Self { wire: wire.to_owned(), stream, buf: Vec::new(), acc, whole: Vec::new() }
    }

    /// Takes in the next bytes of the answer.
    pub fn feed(&mut self, bytes: &[u8]) {
        if !self.stream {
            self.whole.extend_from_slice(bytes);
            return;
        }
        self.buf.extend_from_slice(bytes);
        while let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            // A line the reader cannot make sense of says nothing of usage; the agent judges it.
            let _ = self.acc.line(String::from_utf8_lossy(&line).trim_end());
        }
    }

    /// What the call used, as the server reported it (`None`: it reported nothing readable).
    pub fn finish(mut self) -> Option<Usage> {
        if !self.stream {
            let v: Value = serde_json::from_slice(&self.whole).ok()?;
            let completion = match self.wire.as_str() {
                "anthropic" => anthropic::parse(&v),
                responses::PROVIDER => responses::parse(&v),
                _ => super::parse_completion(&v),
            };
            return completion.ok()?.usage;
        }
        if !self.buf.is_empty() {
            let line = String::from_utf8_lossy(&self.buf).to_string();
            let _ = self.acc.line(line.trim_end());
        }
        self.acc.finish_boxed().ok()?.usage
    }
}

impl std::fmt::Debug for UsageReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageReader").field("wire", &self.wire).finish_non_exhaustive()
    }
}

/// An error answer in `wire`'s own shape, for an agent that reads its provider's errors.
pub fn error_body(wire: &str, kind: &str, message: &str) -> Value {
    match wire {
        "anthropic" => serde_json::json!({"type": "error", "error": {"type": kind, "message": message}}),
        _ => serde_json::json!({"error": {"type": kind, "code": kind, "message": message}}),
    }
}
