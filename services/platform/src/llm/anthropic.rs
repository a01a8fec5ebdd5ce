//! Anthropic's Messages API (`POST {base}/messages`): the request built from the agent's chat
//! messages and tools, and the answer, plain or streamed, folded back into a [`Completion`].
//!
//! The agent speaks in chat-completions terms everywhere else; this module is the only place
//! that knows the other wire. What differs: the system prompt is a field of its own; tool calls
//! are `tool_use` content blocks of the assistant, and their results `tool_result` blocks of
//! the *user*, so consecutive messages of one role are merged (the API wants them
//! alternating); `max_tokens` is required; and prompt caching is asked for with
//! `cache_control` marks at the end of the stable prefix (system prompt, tools) and at the end
//! of the history, so each step reads everything before its new events from the cache.
//! Extended thinking (a profile's `thinking_budget_tokens`) is asked for with `thinking`; the
//! answer's thinking blocks, signed or redacted, are given back unchanged at the start of the
//! assistant message they came with, as the API requires while tools are in use.

use serde_json::{Value, json};

use super::message::{ChatMessage, Completion, FunctionCall, LlmError, ThinkingBlock, ToolCall, Usage};
use super::stream::{Accumulate, StreamState};

/// The API version this client speaks.
pub const VERSION: &str = "2023-06-01";
/// The beta that admits a Claude subscription's OAuth token (sent as a bearer token) in place of
/// an API key.
pub const OAUTH_BETA: &str = "oauth-2025-04-20";

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The request body (`thinking_budget`: tokens of extended thinking, 0 for none).
pub fn request(
    model: &str,
    max_tokens: u64,
    messages: &[ChatMessage],
    tools: &[Value],
    stream: bool,
    temperature: Option<f32>,
    thinking_budget: u64,
) -> Value {
    let mut system: Vec<Value> = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role.as_str() {
            "system" => {
                system.push(json!({"type": "text", "text": m.content.clone().unwrap_or_default()}));
                continue;
            }
            "tool" => {
                let text = m.content.clone().filter(|c| !c.is_empty()).unwrap_or_else(|| "(no output)".into());
                // A screenshot the tool took goes in its result, as the API allows.
                let content =
                    match m.images.is_empty() {
                        true => json!(text),
                        false => {
                            let mut blocks = vec![json!({"type": "text", "text": text})];
                            blocks.extend(m.images.iter().map(
                                |i| json!({"type": "image", "source": {"type": "base64", "media_type": i.media_type, "data": i.data}}),
                            ));
                            Value::Array(blocks)
                        }
                    };
                (
                    "user",
                    vec![json!({"type": "tool_result", "tool_use_id": m.tool_call_id.clone().unwrap_or_default(), "content": content})],
                )
            }
            "assistant" => {
                // Thinking first, exactly as it came (the signature covers it).
                // (Reasoning without a signature came from another provider, a fallback's: this
                // API would refuse it.)
                let mut blocks: Vec<Value> = m
                    .thinking
                    .iter()
                    .filter_map(|t| match (&t.redacted, &t.signature) {
                        (Some(data), _) => Some(json!({"type": "redacted_thinking", "data": data})),
                        (None, Some(signature)) => Some(json!({"type": "thinking", "thinking": t.text, "signature": signature})),
                        (None, None) => None,
                    })
                    .collect();
                if let Some(text) = m.content.as_deref().filter(|t| !t.trim().is_empty()) {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for call in &m.tool_calls {
                    // The model's arguments as an object; what was not valid JSON was already
                    // answered with an error observation, and is sent as an empty input.
                    let input = serde_json::from_str::<Value>(&call.function.arguments).ok().filter(Value::is_object).unwrap_or(json!({}));
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input}));
                }
                if blocks.is_empty() {
                    blocks.push(json!({"type": "text", "text": "(no answer)"}));
                }
                ("assistant", blocks)
            }
            _ => {
                // Images first, then the text about them, as Anthropic advises.
                let mut blocks: Vec<Value> = m
                    .images
                    .iter()
                    .map(|i| json!({"type": "image", "source": {"type": "base64", "media_type": i.media_type, "data": i.data}}))
                    .collect();
                blocks.push(json!({"type": "text", "text": m.content.clone().filter(|c| !c.is_empty()).unwrap_or_else(|| " ".into())}));
                ("user", blocks)
            }
        };
        super::stream::push_turn(&mut out, role, "content", blocks);
    }
    // Tool results must come first in a user message that has them.
    for m in &mut out {
        if let Some(content) = m["content"].as_array_mut() {
            content.sort_by_key(|b| b["type"] != "tool_result");
        }
    }
    if let Some(last) = system.last_mut() {
        last["cache_control"] = ephemeral();
    }
    if let Some(block) = out.last_mut().and_then(|m| m["content"].as_array_mut()).and_then(|c| c.last_mut()) {
        block["cache_control"] = ephemeral();
    }
    let mut tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            let f = &t["function"];
            json!({"name": f["name"], "description": f["description"], "input_schema": f["parameters"]})
        })
        .collect();
    if let Some(last) = tools.last_mut() {
        last["cache_control"] = ephemeral();
    }
    // The answer's room is on top of the thinking's: `max_tokens` must pass the budget.
    let max_tokens = if thinking_budget > 0 && max_tokens <= thinking_budget { thinking_budget + max_tokens } else { max_tokens };
    let mut body = json!({"model": model, "max_tokens": max_tokens, "messages": out, "stream": stream});
    if !system.is_empty() {
        body["system"] = Value::Array(system);
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if thinking_budget > 0 {
        // (The API takes no temperature with thinking on.)
        body["thinking"] = json!({"type": "enabled", "budget_tokens": thinking_budget});
    } else if let Some(t) = temperature {
        body["temperature"] = t.into();
    }
    body
}

/// Anthropic's `usage`: `input_tokens` excludes what was read from or written to the cache;
/// the prompt is all three.
fn usage(v: &Value) -> Option<Usage> {
    let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    v.get("input_tokens")?;
    let cached = n("cache_read_input_tokens");
    Some(Usage {
        prompt_tokens: n("input_tokens") + cached + n("cache_creation_input_tokens"),
        completion_tokens: n("output_tokens"),
        cached_tokens: cached,
    })
}

/// Reads a content block list into text, tool calls and thinking.
fn fold_blocks(blocks: &[Value]) -> (Option<String>, Vec<ToolCall>, Vec<ThinkingBlock>) {
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    let mut thinking = Vec::new();
    for b in blocks {
        let s = |k: &str| b[k].as_str().map(str::to_owned);
        match b["type"].as_str() {
            Some("thinking") => {
                thinking.push(ThinkingBlock { text: s("thinking").unwrap_or_default(), signature: s("signature"), redacted: None })
            }
            Some("redacted_thinking") => thinking.push(ThinkingBlock { redacted: s("data"), ..Default::default() }),
            Some("text") => text.get_or_insert_default().push_str(b["text"].as_str().unwrap_or_default()),
            Some("tool_use") => calls.push(ToolCall {
                id: b["id"].as_str().unwrap_or_default().to_owned(),
                kind: "function".into(),
                function: FunctionCall { name: b["name"].as_str().unwrap_or_default().to_owned(), arguments: b["input"].to_string() },
            }),
            _ => {}
        }
    }
    (text, calls, thinking)
}

/// `end_turn`/`tool_use`/`max_tokens` in the chat-completions words the agent reads.
fn finish_reason(stop: Option<&str>) -> Option<String> {
    stop.map(|s| match s {
        "tool_use" => "tool_calls".to_owned(),
        "max_tokens" => "length".to_owned(),
        "end_turn" | "stop_sequence" => "stop".to_owned(),
        other => other.to_owned(),
    })
}

/// Parses a non-streamed answer.
pub fn parse(v: &Value) -> Result<Completion, LlmError> {
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(stream_error(&v["error"]));
    }
    let blocks = v.get("content").and_then(Value::as_array).ok_or_else(|| LlmError::Malformed("no content".into()))?;
    let (content, tool_calls, thinking) = fold_blocks(blocks);
    Ok(Completion {
        content,
        tool_calls,
        finish_reason: finish_reason(v.get("stop_reason").and_then(Value::as_str)),
        usage: v.get("usage").and_then(usage),
        thinking,
    })
}

/// An `error` event in a stream (the HTTP status was 200 already).
fn stream_error(e: &Value) -> LlmError {
    let body = e.to_string();
    match e["type"].as_str() {
        Some("overloaded_error" | "api_error") => LlmError::Server { status: 529, body },
        Some("rate_limit_error") => LlmError::RateLimited { retry_after: None },
        Some("invalid_request_error") if super::message::is_context_error(&body) => LlmError::ContextWindow { body },
        _ => LlmError::Server { status: 200, body },
    }
}

/// Folds the server-sent events of a streamed answer.
#[derive(Default, Debug)]
pub struct StreamAccumulator {
    /// Blocks by index: text, or a tool use with its arguments as they arrive.
    blocks: Vec<Value>,
    partial_json: Vec<String>,
    stop_reason: Option<String>,
    usage: Option<Usage>,
    state: StreamState,
}

impl Accumulate for StreamAccumulator {
    fn finish_boxed(self: Box<Self>) -> Result<Completion, LlmError> {
        (*self).finish()
    }

    /// Feeds one SSE line; returns true at `message_stop`.
    fn line(&mut self, line: &str) -> Result<bool, LlmError> {
        let Some(v) = self.state.data(line)? else { return Ok(false) };
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        match v["type"].as_str() {
            Some("message_start") => self.usage = usage(&v["message"]["usage"]),
            Some("content_block_start") => {
                while self.blocks.len() <= index {
                    self.blocks.push(Value::Null);
                    self.partial_json.push(String::new());
                }
                self.blocks[index] = v["content_block"].clone();
            }
            Some("content_block_delta") => {
                let Some(block) = self.blocks.get_mut(index) else {
                    return Err(LlmError::Malformed(format!("delta for block {index} before its start")));
                };
                let delta = &v["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        let piece = delta["text"].as_str().unwrap_or_default();
                        self.state.fresh.push_str(piece);
                        let text = format!("{}{}", block["text"].as_str().unwrap_or_default(), piece);
                        block["text"] = text.into();
                    }
                    Some("input_json_delta") => self.partial_json[index].push_str(delta["partial_json"].as_str().unwrap_or_default()),
                    Some(kind @ ("thinking_delta" | "signature_delta")) => {
                        let key = if kind == "thinking_delta" { "thinking" } else { "signature" };
                        let grown = format!("{}{}", block[key].as_str().unwrap_or_default(), delta[key].as_str().unwrap_or_default());
                        block[key] = grown.into();
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                if let Some(stop) = v["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(stop.to_owned());
                }
                if let Some(out) = v["usage"]["output_tokens"].as_u64() {
                    self.usage.get_or_insert_default().completion_tokens = out;
                }
            }
            Some("message_stop") => return Ok(true),
            Some("error") => return Err(stream_error(&v["error"])),
            _ => {}
        }
        Ok(false)
    }

    fn state(&mut self) -> &mut StreamState {
        &mut self.state
    }

    fn finish(mut self) -> Result<Completion, LlmError> {
        for (block, json) in self.blocks.iter_mut().zip(&self.partial_json) {
            if block["type"] == "tool_use" && !json.is_empty() {
                block["input"] = serde_json::from_str(json).map_err(|e| LlmError::Malformed(format!("tool input: {e}")))?;
            }
        }
        let (content, tool_calls, thinking) = fold_blocks(&self.blocks);
        Ok(Completion { content, tool_calls, finish_reason: finish_reason(self.stop_reason.as_deref()), usage: self.usage, thinking })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::message::ImagePart;

    #[test]
    fn the_request_alternates_roles_and_marks_the_cacheable_prefix() {
        let call = ToolCall {
            id: "toolu_1".into(),
            kind: "function".into(),
            function: FunctionCall { name: "terminal".into(), arguments: r#"{"command":"ls"}"#.into() },
        };
        let messages = [
            ChatMessage::text("system", "sys"),
            ChatMessage::text("user", "hi"),
            ChatMessage::text("user", "<skill>x</skill>"),
            ChatMessage { role: "assistant".into(), content: Some("Let me look.".into()), tool_calls: vec![call], ..Default::default() },
            ChatMessage { role: "tool".into(), content: Some("a.txt".into()), tool_call_id: Some("toolu_1".into()), ..Default::default() },
            ChatMessage::text("user", "and now?"),
        ];
        let tools = [json!({"type": "function", "function": {"name": "finish", "description": "d", "parameters": {"type": "object"}}})];
        let body = request("claude-x", 1000, &messages, &tools, true, None, 0);
        assert_eq!(body["system"][0]["text"], "sys");
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        let roles: Vec<&str> = body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(body["messages"][0]["content"].as_array().unwrap().len(), 2);
        assert_eq!(body["messages"][1]["content"][1]["input"]["command"], "ls");
        assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
        assert_eq!(body["messages"][2]["content"][1]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
        assert_eq!(body["tools"][0]["cache_control"]["type"], "ephemeral");
    }

    #[test]
    fn a_screenshot_goes_inside_its_tool_result() {
        let png = ImagePart { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() };
        let messages = [
            ChatMessage::text("user", "look"),
            ChatMessage {
                role: "tool".into(),
                content: Some("URL: http://localhost/".into()),
                tool_call_id: Some("toolu_1".into()),
                images: vec![png],
                ..Default::default()
            },
        ];
        let body = request("claude-x", 1000, &messages, &[], false, None, 0);
        let result = &body["messages"][0]["content"][0];
        assert_eq!(result["type"], "tool_result");
        assert_eq!(result["content"][0], json!({"type": "text", "text": "URL: http://localhost/"}));
        assert_eq!(result["content"][1]["type"], "image");
        assert_eq!(result["content"][1]["source"], json!({"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}));
    }

    #[test]
    fn a_stream_folds_into_text_and_tool_calls() {
        let mut acc = StreamAccumulator::default();
        for line in [
            r#"data: {"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":90,"output_tokens":1}}}"#,
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}"#,
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"check."}}"#,
            r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"terminal","input":{}}}"#,
            r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"comm"}}"#,
            r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"and\":\"ls\"}"}}"#,
            r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":25}}"#,
        ] {
            assert!(!acc.line(line).unwrap());
        }
        assert!(acc.line(r#"data: {"type":"message_stop"}"#).unwrap());
        let c = acc.finish().unwrap();
        assert_eq!(c.content.as_deref(), Some("Let me check."));
        assert_eq!(c.tool_calls[0].function.arguments, r#"{"command":"ls"}"#);
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(c.usage, Some(Usage { prompt_tokens: 100, completion_tokens: 25, cached_tokens: 90 }));
        let mut acc = StreamAccumulator::default();
        let err = acc.line(r#"data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#).unwrap_err();
        assert!(err.is_retryable());
    }
}
