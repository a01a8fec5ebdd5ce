//! Google's Gemini API (provider `gemini`, base URL `https://generativelanguage.googleapis.com/v1beta`):
//! `POST {base}/models/{model}:generateContent`, streamed as `:streamGenerateContent?alt=sse`,
//! the key in `x-goog-api-key`. The request is built from the agent's chat messages and tools,
//! and the answer, plain or streamed, folded back into a [`Completion`].
//!
//! What differs from chat completions: the model is in the path, not the body; the system prompt
//! is `systemInstruction`; the history is `contents` of role `user` or `model`, each a list of
//! parts (`text`, `inlineData`, `functionCall {id, name, args}`, `functionResponse {id, name,
//! response}`), where a tool's result is a `user` part that names its function again; tools are
//! `functionDeclarations` (their JSON Schema as `parametersJsonSchema`, which takes all of it);
//! the answer is `candidates[0].content.parts` with `finishReason` (`STOP`, `MAX_TOKENS`...) and
//! `usageMetadata`. A stream is one whole `GenerateContentResponse` per event, its text parts the
//! new text only, ending when the body does (no `[DONE]`). A thinking model signs its turn
//! (`thoughtSignature` on a part): the signature is kept as a [`ThinkingBlock`] and given back on
//! the first part of that turn, as the API asks while tools are in use.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::message::{ChatMessage, Completion, FunctionCall, LlmError, ThinkingBlock, ToolCall, Usage};
use super::stream::{Accumulate, StreamState};

/// The provider name of this wire.
pub const PROVIDER: &str = "gemini";

/// The methods of a model the relay passes on for an agent: `(method, counted)`, where a
/// counted one is an LLM call (tokens, cost), and `countTokens` is not.
pub const METHODS: &[(&str, bool)] = &[("generateContent", true), ("streamGenerateContent", true), ("countTokens", false)];

/// The path (after the base URL) of a call of `method` on `model`, streamed as server-sent
/// events when it is `streamGenerateContent`.
pub fn path(model: &str, method: &str) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    match method {
        "streamGenerateContent" => format!("models/{model}:streamGenerateContent?alt=sse"),
        _ => format!("models/{model}:{method}"),
    }
}

/// The request body (`thinking_budget`: tokens of thinking, 0 for the model's default).
pub fn request(max_output_tokens: u64, messages: &[ChatMessage], tools: &[Value], temperature: Option<f32>, thinking_budget: u64) -> Value {
    let mut system: Vec<Value> = Vec::new();
    let mut contents: Vec<Value> = Vec::new();
    // Each call's function, by id, for its result to name (once: histories are long).
    let names: HashMap<&str, &str> =
        messages.iter().flat_map(|m| &m.tool_calls).map(|c| (c.id.as_str(), c.function.name.as_str())).collect();
    for m in messages {
        let (role, parts) = match m.role.as_str() {
            "system" => {
                system.push(json!({"text": m.content.clone().unwrap_or_default()}));
                continue;
            }
            "tool" => ("user", tool_result(m, &names)),
            "assistant" => ("model", model_parts(m)),
            _ => {
                let mut parts = vec![json!({"text": m.content.clone().filter(|c| !c.is_empty()).unwrap_or_else(|| " ".into())})];
                parts.extend(m.images.iter().map(inline));
                ("user", parts)
            }
        };
        // One content per turn: the results of parallel calls go together, as the API wants.
        super::stream::push_turn(&mut contents, role, "parts", parts);
    }
    let mut config = json!({"maxOutputTokens": max_output_tokens});
    if let Some(t) = temperature {
        config["temperature"] = t.into();
    }
    if thinking_budget > 0 {
        config["thinkingConfig"] = json!({"thinkingBudget": thinking_budget, "includeThoughts": true});
    }
    let mut body = json!({"contents": contents, "generationConfig": config});
    if !system.is_empty() {
        body["systemInstruction"] = json!({"parts": system});
    }
    if !tools.is_empty() {
        let declarations: Vec<Value> = tools
            .iter()
            .map(|t| {
                let f = &t["function"];
                json!({"name": f["name"], "description": f["description"], "parametersJsonSchema": f["parameters"]})
            })
            .collect();
        body["tools"] = json!([{"functionDeclarations": declarations}]);
    }
    body
}

fn inline(i: &super::message::ImagePart) -> Value {
    json!({"inlineData": {"mimeType": i.media_type, "data": i.data}})
}

/// An assistant message as the model's parts: its text, its calls, its signature on the first.
fn model_parts(m: &ChatMessage) -> Vec<Value> {
    let mut parts = Vec::new();
    if let Some(text) = m.content.as_deref().filter(|t| !t.trim().is_empty()) {
        parts.push(json!({"text": text}));
    }
    for call in &m.tool_calls {
        // What was not valid JSON was answered with an error already; it goes as no arguments.
        let args = serde_json::from_str::<Value>(&call.function.arguments).ok().filter(Value::is_object).unwrap_or(json!({}));
        parts.push(json!({"functionCall": {"id": call.id, "name": call.function.name, "args": args}}));
    }
    if parts.is_empty() {
        parts.push(json!({"text": "(no answer)"}));
    }
    // The signature goes back on the turn's first call (its first part when it called nothing).
    if let Some(signature) = m.thinking.iter().find_map(|t| t.signature.as_deref().filter(|_| t.redacted.is_none())) {
        let at = parts.iter().position(|p| p.get("functionCall").is_some()).unwrap_or(0);
        parts[at]["thoughtSignature"] = signature.into();
    }
    parts
}

/// A tool's result: a `functionResponse` naming the call's function (`names`: by call id, from
/// the history), then the images it took.
fn tool_result(m: &ChatMessage, names: &HashMap<&str, &str>) -> Vec<Value> {
    let id = m.tool_call_id.clone().unwrap_or_default();
    let name = names.get(id.as_str()).copied().unwrap_or("tool");
    let output = m.content.clone().filter(|c| !c.is_empty()).unwrap_or_else(|| "(no output)".into());
    let mut parts = vec![json!({"functionResponse": {"id": id, "name": name, "response": {"output": output}}})];
    parts.extend(m.images.iter().map(inline));
    parts
}

/// `usageMetadata`: the answer's tokens are the candidates' and the thoughts'.
fn usage(v: &Value) -> Option<Usage> {
    let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    v.get("promptTokenCount")?;
    Some(Usage {
        prompt_tokens: n("promptTokenCount"),
        completion_tokens: n("candidatesTokenCount") + n("thoughtsTokenCount"),
        cached_tokens: n("cachedContentTokenCount"),
    })
}

/// `STOP`/`MAX_TOKENS`/... in the chat-completions words the agent reads.
fn finish_reason(reason: Option<&str>, called: bool) -> Option<String> {
    reason.map(|r| match r {
        _ if called => "tool_calls".to_owned(),
        "STOP" => "stop".to_owned(),
        "MAX_TOKENS" => "length".to_owned(),
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" => "content_filter".to_owned(),
        other => other.to_ascii_lowercase(),
    })
}

/// An error object (`{"code", "message", "status"}`), in the API's words.
fn error(e: &Value) -> LlmError {
    let body = e.to_string();
    match e["status"].as_str() {
        Some("RESOURCE_EXHAUSTED") => LlmError::RateLimited { retry_after: None },
        _ if super::message::is_context_error(&body) => LlmError::ContextWindow { body },
        Some("INTERNAL" | "UNAVAILABLE" | "DEADLINE_EXCEEDED") => LlmError::Server { status: 500, body },
        _ => LlmError::Server { status: 200, body },
    }
}

/// What one response (or one streamed piece of it) adds: text, calls, thoughts.
#[derive(Default, Debug)]
struct Fold {
    text: Option<String>,
    calls: Vec<ToolCall>,
    thinking: Vec<ThinkingBlock>,
    reason: Option<String>,
    usage: Option<Usage>,
    blocked: Option<String>,
}

impl Fold {
    /// Takes in one `GenerateContentResponse`; returns the new answer text it brought.
    fn add(&mut self, v: &Value) -> Result<String, LlmError> {
        if let Some(e) = v.get("error") {
            return Err(error(e));
        }
        if let Some(u) = v.get("usageMetadata").and_then(usage) {
            self.usage = Some(u);
        }
        if let Some(reason) = v["promptFeedback"]["blockReason"].as_str() {
            self.blocked = Some(reason.to_owned());
        }
        let Some(candidate) = v.get("candidates").and_then(|c| c.get(0)) else { return Ok(String::new()) };
        if let Some(reason) = candidate["finishReason"].as_str() {
            self.reason = Some(reason.to_owned());
        }
        let mut fresh = String::new();
        for part in candidate["content"]["parts"].as_array().into_iter().flatten() {
            let signature = part["thoughtSignature"].as_str().map(str::to_owned);
            if part["thought"] == true {
                self.thinking.push(ThinkingBlock { text: part["text"].as_str().unwrap_or_default().to_owned(), signature, redacted: None });
                continue;
            }
            if let Some(signature) = signature {
                self.thinking.push(ThinkingBlock { signature: Some(signature), ..Default::default() });
            }
            if let Some(text) = part["text"].as_str() {
                self.text.get_or_insert_default().push_str(text);
                fresh.push_str(text);
            } else if let Some(call) = part.get("functionCall") {
                // The API names calls only sometimes; the agent pairs results by id.
                let id = call["id"]
                    .as_str()
                    .filter(|i| !i.is_empty())
                    .map_or_else(|| format!("call_{}", uuid::Uuid::new_v4().simple()), str::to_owned);
                let arguments = call.get("args").filter(|a| a.is_object()).map_or_else(|| "{}".to_owned(), Value::to_string);
                let name = call["name"].as_str().unwrap_or_default().to_owned();
                self.calls.push(ToolCall { id, kind: "function".into(), function: FunctionCall { name, arguments } });
            }
        }
        Ok(fresh)
    }

    fn finish(self) -> Result<Completion, LlmError> {
        if let (Some(reason), None, true) = (&self.blocked, &self.text, self.calls.is_empty()) {
            return Err(LlmError::Rejected { status: 200, body: format!("the prompt was blocked: {reason}") });
        }
        let called = !self.calls.is_empty();
        Ok(Completion {
            content: self.text,
            tool_calls: self.calls,
            finish_reason: finish_reason(self.reason.as_deref(), called),
            usage: self.usage,
            thinking: self.thinking,
        })
    }
}

/// Parses a whole response.
pub fn parse(v: &Value) -> Result<Completion, LlmError> {
    if v.get("candidates").is_none() && v.get("error").is_none() && v.get("promptFeedback").is_none() {
        return Err(LlmError::Malformed("no candidates".into()));
    }
    let mut fold = Fold::default();
    fold.add(v)?;
    fold.finish()
}

/// Folds the server-sent events of a streamed response.
#[derive(Default, Debug)]
pub struct StreamAccumulator {
    fold: Fold,
    state: StreamState,
}

impl Accumulate for StreamAccumulator {
    fn finish_boxed(self: Box<Self>) -> Result<Completion, LlmError> {
        (*self).finish()
    }

    /// Feeds one SSE line; the stream ends with the body, so this never says it is over.
    fn line(&mut self, line: &str) -> Result<bool, LlmError> {
        let Some(v) = self.state.data(line)? else { return Ok(false) };
        let fresh = self.fold.add(&v)?;
        self.state.fresh.push_str(&fresh);
        Ok(false)
    }

    fn state(&mut self) -> &mut StreamState {
        &mut self.state
    }

    fn finish(self) -> Result<Completion, LlmError> {
        self.fold.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_becomes_contents_and_an_answer_a_completion() {
        let call = ToolCall {
            id: "call_1".into(),
            kind: "function".into(),
            function: FunctionCall { name: "terminal".into(), arguments: r#"{"command":"ls"}"#.into() },
        };
        let signed = ThinkingBlock { signature: Some("sig-1".into()), ..Default::default() };
        let messages = [
            ChatMessage::text("system", "You are an agent."),
            ChatMessage::text("user", "list"),
            ChatMessage {
                role: "assistant".into(),
                content: Some("Listing.".into()),
                tool_calls: vec![call],
                thinking: vec![signed],
                ..Default::default()
            },
            ChatMessage { role: "tool".into(), content: Some("a.txt".into()), tool_call_id: Some("call_1".into()), ..Default::default() },
            ChatMessage::text("user", "thanks"),
        ];
        let tools = [json!({"type": "function", "function": {"name": "terminal", "description": "run", "parameters": {"type": "object"}}})];
        let body = request(1000, &messages, &tools, Some(0.2), 512);
        assert_eq!(body["systemInstruction"]["parts"][0]["text"], "You are an agent.");
        let roles: Vec<&str> = body["contents"].as_array().unwrap().iter().map(|c| c["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "model", "user"], "the tool's result and the next message are one user turn");
        let model = &body["contents"][1]["parts"];
        assert_eq!(model[1]["functionCall"]["args"]["command"], "ls");
        assert_eq!(model[1]["thoughtSignature"], "sig-1", "the signature rides on the first call");
        let result = &body["contents"][2]["parts"][0]["functionResponse"];
        assert_eq!((result["name"].as_str(), result["response"]["output"].as_str()), (Some("terminal"), Some("a.txt")));
        assert_eq!(body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["type"], "object");
        assert_eq!(body["generationConfig"]["thinkingConfig"]["thinkingBudget"], 512);

        let answer = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "Look first.", "thought": true},
            {"text": "Here."},
            {"functionCall": {"name": "terminal", "args": {"command": "pwd"}}, "thoughtSignature": "sig-2"}]},
            "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "thoughtsTokenCount": 5, "cachedContentTokenCount": 40}});
        let c = parse(&answer).unwrap();
        assert_eq!(c.content.as_deref(), Some("Here."));
        assert_eq!(c.tool_calls[0].function.arguments, r#"{"command":"pwd"}"#);
        assert!(c.tool_calls[0].id.starts_with("call_"), "an id is made when the API gives none");
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(c.thinking[0].text, "Look first.");
        assert_eq!(c.thinking[1].signature.as_deref(), Some("sig-2"));
        assert_eq!(c.usage, Some(Usage { prompt_tokens: 100, completion_tokens: 25, cached_tokens: 40 }));
    }

    #[test]
    fn a_stream_folds_its_pieces() {
        let mut acc = StreamAccumulator::default();
        for line in [
            r#"data: {"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me "}]}}]}"#,
            "",
            r#"data: {"candidates": [{"content": {"role": "model", "parts": [{"text": "check."}]}}]}"#,
            r#"data: {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"id": "fc-9", "name": "terminal", "args": {"command": "ls"}}}]}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3}}"#,
        ] {
            assert!(!acc.line(line).unwrap());
        }
        assert_eq!(std::mem::take(&mut acc.state().fresh), "Let me check.");
        let c = acc.finish().unwrap();
        assert_eq!(c.content.as_deref(), Some("Let me check."));
        assert_eq!(c.tool_calls[0].id, "fc-9");
        assert_eq!(c.usage.unwrap().completion_tokens, 3);
        let mut failed = StreamAccumulator::default();
        let e = failed.line(r#"data: {"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}}"#);
        assert!(matches!(e, Err(LlmError::RateLimited { .. })));
        assert_eq!(path("models/gemini-2.5-pro", "streamGenerateContent"), "models/gemini-2.5-pro:streamGenerateContent?alt=sse");
    }
}
