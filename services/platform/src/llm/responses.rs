//! OpenAI's Responses API (`POST {base}/responses`, provider `openai-responses`), for models that
//! speak only it: the request built from the agent's chat messages and tools, and the answer,
//! plain or streamed, folded back into a [`Completion`].
//!
//! What differs from chat completions: the system prompt is `instructions`; the history is a list
//! of input items, where a tool call is a `function_call` item and its result a
//! `function_call_output` item (paired by `call_id`), a user's text `input_text` and an image
//! `input_image`; tools are flat (`{"type": "function", "name", "parameters"}`); the answer is a
//! list of output items (`message`, `function_call`, `reasoning` with its summary). Nothing is
//! stored on OpenAI's side (`store: false`): each call sends the whole history, as the other
//! wires do. A stream's `response.output_text.delta` events carry the text as it is written; its
//! `response.completed` event carries the whole response, which is read as a plain one.

use serde_json::{Value, json};

use super::message::{ChatMessage, Completion, FunctionCall, LlmError, ThinkingBlock, ToolCall, Usage};
use super::stream::{Accumulate, StreamState};

/// The provider name of this wire.
pub const PROVIDER: &str = "openai-responses";

/// The request body.
pub fn request(
    model: &str,
    max_output_tokens: u64,
    messages: &[ChatMessage],
    tools: &[Value],
    stream: bool,
    temperature: Option<f32>,
    reasoning_effort: Option<&str>,
) -> Value {
    let mut instructions: Vec<String> = Vec::new();
    let mut input: Vec<Value> = Vec::new();
    for m in super::message::images_after_tool_results(messages).iter() {
        match m.role.as_str() {
            "system" => instructions.push(m.content.clone().unwrap_or_default()),
            "tool" => input.push(json!({
                "type": "function_call_output",
                "call_id": m.tool_call_id.clone().unwrap_or_default(),
                "output": m.content.clone().unwrap_or_default(),
            })),
            "assistant" => {
                if let Some(text) = m.content.as_deref().filter(|t| !t.trim().is_empty()) {
                    input.push(json!({"role": "assistant", "content": [{"type": "output_text", "text": text}]}));
                }
                for call in &m.tool_calls {
                    input.push(json!({"type": "function_call", "call_id": call.id, "name": call.function.name, "arguments": call.function.arguments}));
                }
            }
            _ => {
                let mut content = vec![json!({"type": "input_text", "text": m.content.clone().unwrap_or_default()})];
                content.extend(
                    m.images
                        .iter()
                        .map(|i| json!({"type": "input_image", "image_url": format!("data:{};base64,{}", i.media_type, i.data)})),
                );
                input.push(json!({"role": "user", "content": content}));
            }
        }
    }
    let mut body = json!({"model": model, "input": input, "stream": stream, "store": false, "max_output_tokens": max_output_tokens});
    if !instructions.is_empty() {
        body["instructions"] = instructions.join("\n\n").into();
    }
    if !tools.is_empty() {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                let f = &t["function"];
                json!({"type": "function", "name": f["name"], "description": f["description"], "parameters": f["parameters"]})
            })
            .collect();
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = "auto".into();
    }
    if let Some(t) = temperature {
        body["temperature"] = t.into();
    }
    if let Some(effort) = reasoning_effort {
        body["reasoning"] = json!({"effort": effort, "summary": "auto"});
    }
    body
}

/// Parses a whole response (a plain answer, or the one a stream's `response.completed` holds).
pub fn parse(v: &Value) -> Result<Completion, LlmError> {
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        return Err(error(e));
    }
    let output = v.get("output").and_then(Value::as_array).ok_or_else(|| LlmError::Malformed("no output".into()))?;
    let mut content: Option<String> = None;
    let mut tool_calls = Vec::new();
    let mut thinking = Vec::new();
    for item in output {
        let s = |k: &str| item[k].as_str().unwrap_or_default().to_owned();
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if part["type"] == "output_text" {
                        content.get_or_insert_default().push_str(part["text"].as_str().unwrap_or_default());
                    }
                }
            }
            Some("function_call") => tool_calls.push(ToolCall {
                id: s("call_id"),
                kind: "function".into(),
                function: FunctionCall { name: s("name"), arguments: s("arguments") },
            }),
            Some("reasoning") => {
                let text: Vec<&str> = item["summary"].as_array().into_iter().flatten().filter_map(|p| p["text"].as_str()).collect();
                if !text.is_empty() {
                    thinking.push(ThinkingBlock { text: text.join("\n\n"), ..Default::default() });
                }
            }
            _ => {}
        }
    }
    let incomplete = v["status"] == "incomplete";
    let finish_reason = Some(
        match () {
            _ if incomplete && v["incomplete_details"]["reason"] == "max_output_tokens" => "length",
            _ if !tool_calls.is_empty() => "tool_calls",
            _ => "stop",
        }
        .to_owned(),
    );
    let usage = v.get("usage").and_then(|u| {
        let n = |x: Option<&Value>| x.and_then(Value::as_u64).unwrap_or(0);
        Some(Usage {
            prompt_tokens: u.get("input_tokens")?.as_u64()?,
            completion_tokens: n(u.get("output_tokens")),
            cached_tokens: n(u.get("input_tokens_details").and_then(|d| d.get("cached_tokens"))),
        })
    });
    Ok(Completion { content, tool_calls, finish_reason, usage, thinking })
}

/// An `error` object, in the API's words.
fn error(e: &Value) -> LlmError {
    let body = e.to_string();
    match e["code"].as_str().or(e["type"].as_str()) {
        Some("rate_limit_exceeded") => LlmError::RateLimited { retry_after: None },
        Some("context_length_exceeded") => LlmError::ContextWindow { body },
        _ if super::message::is_context_error(&body) => LlmError::ContextWindow { body },
        Some("server_error" | "server_is_overloaded") => LlmError::Server { status: 500, body },
        _ => LlmError::Server { status: 200, body },
    }
}

/// Folds the server-sent events of a streamed response.
#[derive(Default, Debug)]
pub struct StreamAccumulator {
    done: Option<Value>,
    state: StreamState,
}

impl Accumulate for StreamAccumulator {
    fn finish_boxed(self: Box<Self>) -> Result<Completion, LlmError> {
        (*self).finish()
    }

    /// Feeds one SSE line; returns true at `response.completed` (or `response.incomplete`).
    fn line(&mut self, line: &str) -> Result<bool, LlmError> {
        let Some(data) = line.strip_prefix("data:") else { return Ok(false) };
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(data == "[DONE]" && self.done.is_some());
        }
        self.state.saw_data = true;
        let v: Value = serde_json::from_str(data).map_err(|e| LlmError::Malformed(format!("stream event: {e}")))?;
        match v["type"].as_str() {
            Some("response.output_text.delta") => self.state.fresh.push_str(v["delta"].as_str().unwrap_or_default()),
            Some("response.completed" | "response.incomplete") => {
                self.done = Some(v["response"].clone());
                return Ok(true);
            }
            Some("response.failed") => return Err(error(&v["response"]["error"])),
            Some("error") => return Err(error(v.get("error").unwrap_or(&v))),
            _ => {}
        }
        Ok(false)
    }

    fn state(&mut self) -> &mut StreamState {
        &mut self.state
    }

    fn finish(self) -> Result<Completion, LlmError> {
        match self.done {
            Some(response) => parse(&response),
            None => Err(LlmError::Malformed("the stream ended before response.completed".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_becomes_input_items_and_an_answer_a_completion() {
        let call = ToolCall {
            id: "call_1".into(),
            kind: "function".into(),
            function: FunctionCall { name: "terminal".into(), arguments: r#"{"command":"ls"}"#.into() },
        };
        let messages = [
            ChatMessage::text("system", "You are an agent."),
            ChatMessage::text("user", "list"),
            ChatMessage { role: "assistant".into(), content: Some("Listing.".into()), tool_calls: vec![call], ..Default::default() },
            ChatMessage { role: "tool".into(), content: Some("a.txt".into()), tool_call_id: Some("call_1".into()), ..Default::default() },
        ];
        let tools = [json!({"type": "function", "function": {"name": "terminal", "description": "run", "parameters": {"type": "object"}}})];
        let body = request("gpt-5.1-codex", 1000, &messages, &tools, true, None, Some("high"));
        assert_eq!(body["instructions"], "You are an agent.");
        let types: Vec<&str> = body["input"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap_or("message")).collect();
        assert_eq!(types, ["message", "message", "function_call", "function_call_output"]);
        assert_eq!(body["input"][3]["call_id"], "call_1");
        assert_eq!(body["tools"][0]["name"], "terminal");
        assert_eq!(body["reasoning"]["effort"], "high");
        assert_eq!(body["store"], false);

        let answer = json!({"status": "completed", "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Look first."}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Here."}]},
            {"type": "function_call", "call_id": "call_2", "name": "terminal", "arguments": "{\"command\":\"pwd\"}"}],
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 20}});
        let c = parse(&answer).unwrap();
        assert_eq!(c.content.as_deref(), Some("Here."));
        assert_eq!(c.tool_calls[0].id, "call_2");
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(c.thinking[0].text, "Look first.");
        assert_eq!(c.usage.unwrap().cached_tokens, 40);
    }
}
