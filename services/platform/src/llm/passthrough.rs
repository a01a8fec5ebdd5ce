//! LLM calls made for a third-party agent (Claude Code, Codex, OpenCode...), which writes its own
//! requests in its provider's wire: they are passed through to the profile's server as they
//! are, with the model the profile names and the profile's key (which the agent never holds),
//! and the answer comes back as the server wrote it. [`UsageReader`] reads what the call used out
//! of the answer as it passes (streamed or whole), with the same stream readers Halyard's own
//! calls use.

use serde_json::Value;

use super::client::LlmClient;
use super::message::{LlmError, Usage};
use super::stream::Accumulate;
use super::{anthropic, gemini, responses};

/// The endpoint (after the base URL's `/v1`) each wire but Gemini's serves.
fn endpoint(wire: &str) -> &'static str {
    match wire {
        "anthropic" => "messages",
        responses::PROVIDER => "responses",
        _ => "chat/completions",
    }
}

/// Where one call of an agent goes, after the profile's base URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The wire's endpoint, or the Gemini method (whose path names the model).
    endpoint: &'static str,
    gemini: bool,
    /// Whether the answer streams, when the path says so (Gemini's); else the body's `stream`.
    pub stream: Option<bool>,
    /// Whether it is an LLM call, counted in usage and budgets (Gemini's `countTokens` is not).
    pub counted: bool,
}

impl Route {
    /// The path after the base URL, for a client of `model`.
    pub fn path(&self, model: &str) -> String {
        if self.gemini { gemini::path(model, self.endpoint) } else { self.endpoint.to_owned() }
    }
}

/// The route of an agent's call `method target` (as it reached the relay, `/v1/...` or
/// Gemini's `/v1beta/...`) on `wire`; `Err` says what may be called.
pub fn route(wire: &str, method: &str, target: &str) -> Result<Route, String> {
    let refused = || {
        let allowed = match wire {
            gemini::PROVIDER => "POST /v1beta/models/{model}:generateContent, :streamGenerateContent or :countTokens".to_owned(),
            _ => format!("POST /v1/{}", endpoint(wire)),
        };
        Err(format!("the conversation's LLM profile speaks `{wire}`: its agent may call {allowed} only, not {method} {target}"))
    };
    let path = target.trim_start_matches('/');
    if method != "POST" {
        return refused();
    }
    if wire != gemini::PROVIDER {
        return match path.strip_prefix("v1/").unwrap_or(path) == endpoint(wire) {
            true => Ok(Route { endpoint: endpoint(wire), gemini: false, stream: None, counted: true }),
            false => refused(),
        };
    }
    let path = path.split('?').next().unwrap_or_default();
    let path = path.strip_prefix("v1beta/").or_else(|| path.strip_prefix("v1/")).unwrap_or(path);
    let Some((_, call)) = path.strip_prefix("models/").and_then(|p| p.rsplit_once(':')) else { return refused() };
    match gemini::METHODS.iter().find(|(m, _)| *m == call) {
        Some((m, counted)) => Ok(Route { endpoint: m, gemini: true, stream: Some(*m == "streamGenerateContent"), counted: *counted }),
        None => refused(),
    }
}

impl LlmClient {
    /// The wire this client speaks (`openai`, `anthropic`, `openai-responses`, `gemini`).
    pub fn wire(&self) -> &str {
        &self.config.provider
    }

    /// Sends an agent's request `body` to this client's server on `route`, with this client's
    /// model (in the body, or in Gemini's path) and key; a stream of chat completions is asked
    /// for its usage too. The response is the server's, whatever its status (the agent reads its
    /// errors itself), but for a failure to reach the server at all.
    ///
    /// `login`: a subscription login the user handed to the agent, sent in place of the
    /// profile's key (Anthropic's OAuth token: a bearer token, with the beta that admits it).
    pub async fn pass_through(
        &self,
        mut body: Value,
        headers: &[(String, String)],
        route: &Route,
        login: Option<&str>,
    ) -> Result<reqwest::Response, LlmError> {
        let _permit = self.permits.acquire().await.map_err(|e| LlmError::Transport(e.to_string()))?;
        let wire = self.wire();
        // (Gemini names the model in the path.)
        if let Some(o) = body.as_object_mut().filter(|_| wire != gemini::PROVIDER) {
            o.insert("model".into(), Value::String(self.config.model.clone()));
            if wire == "openai" && o.get("stream").and_then(Value::as_bool) == Some(true) {
                let options = o.entry("stream_options").or_insert_with(|| Value::Object(Default::default()));
                if let Some(options) = options.as_object_mut() {
                    options.insert("include_usage".into(), Value::Bool(true));
                }
            }
        }
        let base = self.config.base_url.trim_end_matches('/');
        let mut request = self.http.post(format!("{base}/{}", route.path(&self.config.model))).json(&body);
        // What the agent says of its request that servers read (never its credentials: the key
        // is the profile's).
        let login = login.filter(|_| wire == "anthropic");
        let mut betas: Vec<&str> = Vec::new();
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            if name == "anthropic-beta" {
                betas.extend(value.split(',').map(str::trim).filter(|b| !b.is_empty()));
            } else if (name == "anthropic-version" && wire == "anthropic") || name == "accept" {
                request = request.header(name, value);
            }
        }
        if login.is_some() && !betas.contains(&anthropic::OAUTH_BETA) {
            betas.push(anthropic::OAUTH_BETA);
        }
        if !betas.is_empty() {
            request = request.header("anthropic-beta", betas.join(","));
        }
        if wire == "anthropic" && !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("anthropic-version")) {
            request = request.header("anthropic-version", anthropic::VERSION);
        }
        let request = if let Some(token) = login {
            request.bearer_auth(token)
        } else if wire == "anthropic" {
            request.header("x-api-key", &self.config.api_key)
        } else if wire == gemini::PROVIDER {
            request.header("x-goog-api-key", &self.config.api_key)
        } else if self.config.api_key.is_empty() {
            request
        } else {
            request.bearer_auth(&self.config.api_key)
        };
        request.timeout(std::time::Duration::from_secs(self.config.timeout_secs)).send().await.map_err(super::message::transport)
    }
}

/// Reads what one passed-through call used from its answer's bytes.
pub struct UsageReader {
    wire: String,
    stream: bool,
    buf: Vec<u8>,
    acc: Box<dyn Accumulate + Send>,
    whole: Vec<u8>,
    ending: bool,
}

/// Whether an event-stream line is its stream's closing event (after it, only the end of the
/// body): Anthropic's `message_stop`, the chat wire's `[DONE]`, the Responses API's
/// `response.completed` (or `.incomplete`, `.failed`), Gemini's chunk with a `finishReason`.
fn closing(line: &str) -> bool {
    let Some(data) = line.strip_prefix("data:").map(str::trim_start) else {
        return matches!(
            line.strip_prefix("event:").map(str::trim),
            Some("message_stop" | "response.completed" | "response.incomplete" | "response.failed")
        );
    };
    data == "[DONE]"
        || data.contains("\"finishReason\"")
        || ["\"message_stop\"", "\"response.completed\"", "\"response.incomplete\"", "\"response.failed\""]
            .iter()
            .any(|t| data.contains(&format!("\"type\":{t}")))
}

impl UsageReader {
    /// For an answer on `wire`, streamed (server-sent events) or not.
    pub fn new(wire: &str, stream: bool) -> Self {
        let acc: Box<dyn Accumulate + Send> = match wire {
            "anthropic" => Box::new(anthropic::StreamAccumulator::default()),
            responses::PROVIDER => Box::new(responses::StreamAccumulator::default()),
            gemini::PROVIDER => Box::new(gemini::StreamAccumulator::default()),
            _ => Box::new(super::openai::StreamAccumulator::default()),
        };
        Self { wire: wire.to_owned(), stream, buf: Vec::new(), acc, whole: Vec::new(), ending: false }
    }

    /// The stream's closing event has been fed: what is left is the end of the body.
    pub fn ending(&self) -> bool {
        self.ending
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
            let line = String::from_utf8_lossy(&line);
            self.ending |= closing(line.trim_end());
            // A line the reader cannot make sense of says nothing of usage; the agent judges it.
            let _ = self.acc.line(line.trim_end());
        }
    }

    /// What the call used, as the server reported it (`None`: it reported nothing readable).
    pub fn finish(mut self) -> Option<Usage> {
        if !self.stream {
            let v: Value = serde_json::from_slice(&self.whole).ok()?;
            let completion = match self.wire.as_str() {
                "anthropic" => anthropic::parse(&v),
                responses::PROVIDER => responses::parse(&v),
                gemini::PROVIDER => gemini::parse(&v),
                _ => super::openai::parse_completion(&v),
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

/// An error answer of HTTP `status` in `wire`'s own shape, for an agent that reads its
/// provider's errors.
pub fn error_body(wire: &str, status: u16, kind: &str, message: &str) -> Value {
    match wire {
        "anthropic" => serde_json::json!({"type": "error", "error": {"type": kind, "message": message}}),
        // Google's status names for the relay's refusals.
        gemini::PROVIDER => {
            let name = match status {
                401 => "UNAUTHENTICATED",
                402 | 429 => "RESOURCE_EXHAUSTED",
                404 => "NOT_FOUND",
                400 | 413 => "INVALID_ARGUMENT",
                _ => "INTERNAL",
            };
            serde_json::json!({"error": {"code": status, "message": message, "status": name}})
        }
        _ => serde_json::json!({"error": {"type": kind, "code": kind, "message": message}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_call_is_routed_by_its_wire() {
        let r = route("anthropic", "POST", "/v1/messages").unwrap();
        assert_eq!((r.path("claude-x").as_str(), r.stream, r.counted), ("messages", None, true));
        assert!(route("anthropic", "POST", "/v1/chat/completions").unwrap_err().contains("POST /v1/messages only"));
        assert!(route("openai", "GET", "/v1/chat/completions").is_err());
        let r = route("gemini", "POST", "/v1beta/models/gemini-asked:streamGenerateContent?alt=sse").unwrap();
        assert_eq!(r.path("gemini-profile"), "models/gemini-profile:streamGenerateContent?alt=sse");
        assert_eq!((r.stream, r.counted), (Some(true), true));
        let r = route("gemini", "POST", "/v1beta/models/x:countTokens").unwrap();
        assert_eq!((r.path("g").as_str(), r.stream, r.counted), ("models/g:countTokens", Some(false), false));
        assert!(route("gemini", "POST", "/v1beta/models/x:embedContent").unwrap_err().contains(":generateContent"));
        assert!(route("gemini", "POST", "/v1beta/files").is_err());
    }

    #[test]
    fn each_wires_closing_event_is_known_and_nothing_before_it() {
        for line in [
            "event: message_stop",
            r#"data: {"type":"message_stop"}"#,
            "data: [DONE]",
            r#"data: {"type":"response.completed","response":{}}"#,
            r#"data: {"candidates":[{"content":{},"finishReason":"STOP"}],"usageMetadata":{}}"#,
        ] {
            assert!(closing(line), "{line}");
        }
        for line in [
            "event: content_block_delta",
            r#"data: {"type":"content_block_delta","delta":{"text":"message_stop"}}"#,
            r#"data: {"choices":[{"delta":{"content":"[DONE]"}}]}"#,
            r#"data: {"type":"response.output_text.delta","delta":"x"}"#,
            "",
        ] {
            assert!(!closing(line), "{line}");
        }
    }
}
