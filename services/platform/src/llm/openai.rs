//! OpenAI's chat-completions wire (and every server that speaks it: vLLM, llama.cpp, Ollama,
//! LiteLLM...): the request body, a plain answer, and a streamed one.

use serde::Serialize;
use serde_json::Value;

use super::message::*;
use super::stream::{Accumulate, StreamState};

/// `m` as OpenAI's chat API takes it: a message with images has its content as parts.
pub(crate) fn openai_message(m: &ChatMessage) -> Value {
    let mut v = serde_json::to_value(m).unwrap_or_default();
    if !m.images.is_empty() {
        let mut parts = vec![serde_json::json!({"type": "text", "text": m.content.clone().unwrap_or_default()})];
        parts.extend(
            m.images.iter().map(
                |i| serde_json::json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", i.media_type, i.data)}}),
            ),
        );
        v["content"] = Value::Array(parts);
    }
    v
}

/// A chat completions request, written as it is sent: the history and the tools are not
/// copied into a JSON tree first (with a long conversation, that copy was most of the cost of
/// an LLM call's request).
#[derive(Serialize)]
pub(crate) struct OpenAiBody<'a> {
    pub(crate) model: &'a str,
    pub(crate) messages: Vec<OpenAiMessage<'a>>,
    pub(crate) stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "<[Value]>::is_empty")]
    pub(crate) tools: &'a [Value],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reasoning_effort: Option<&'a str>,
}

#[derive(Serialize)]
pub(crate) struct StreamOptions {
    pub(crate) include_usage: bool,
}

/// A message as chat completions takes it ([`openai_message`]; one without images as it is).
pub(crate) struct OpenAiMessage<'a>(pub(crate) &'a ChatMessage);

impl Serialize for OpenAiMessage<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.images.is_empty() { self.0.serialize(serializer) } else { openai_message(self.0).serialize(serializer) }
    }
}

/// Parses a non-streaming chat-completions response.
pub fn parse_completion(v: &Value) -> Result<Completion, LlmError> {
    let choice = v.get("choices").and_then(|c| c.get(0)).ok_or_else(|| LlmError::Malformed("no choices".into()))?;
    let message = choice.get("message").ok_or_else(|| LlmError::Malformed("no message".into()))?;
    let tool_calls: Vec<ToolCall> = match message.get("tool_calls") {
        Some(Value::Array(calls)) => calls
            .iter()
            .map(|c| serde_json::from_value(c.clone()).map_err(|e| LlmError::Malformed(format!("tool call: {e}"))))
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    Ok(Completion {
        content: message.get("content").and_then(Value::as_str).map(str::to_owned),
        tool_calls,
        finish_reason: choice.get("finish_reason").and_then(Value::as_str).map(str::to_owned),
        usage: v.get("usage").and_then(Usage::from_openai),
        thinking: reasoning_text(message.get("reasoning_content").and_then(Value::as_str).unwrap_or_default()),
    })
}

/// The reasoning text OpenAI-compatible servers (vLLM, DeepSeek, LiteLLM...) send as
/// `reasoning_content`, as a block of its own (none when there is none).
pub(crate) fn reasoning_text(text: &str) -> Vec<ThinkingBlock> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    vec![ThinkingBlock { text: text.to_owned(), ..Default::default() }]
}

/// Folds streamed deltas (content fragments, tool-call fragments by index) into a completion.
#[derive(Default, Debug)]
pub struct StreamAccumulator {
    content: String,
    has_content: bool,
    calls: Vec<ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    reasoning: String,
    state: StreamState,
}

impl Accumulate for StreamAccumulator {
    fn finish_boxed(self: Box<Self>) -> Result<Completion, LlmError> {
        (*self).finish()
    }

    /// Feeds one SSE line; returns true at `data: [DONE]`.
    fn line(&mut self, line: &str) -> Result<bool, LlmError> {
        let Some(data) = line.strip_prefix("data:") else { return Ok(false) };
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        self.state.saw_data = true;
        let v: Value = serde_json::from_str(data).map_err(|e| LlmError::Malformed(format!("stream chunk: {e}")))?;
        if let Some(err) = v.get("error") {
            return Err(LlmError::Server { status: 200, body: err.to_string() });
        }
        if let Some(usage) = v.get("usage").and_then(Usage::from_openai) {
            self.usage = Some(usage);
        }
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else { return Ok(false) };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else { return Ok(false) };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.content.push_str(text);
            self.state.fresh.push_str(text);
            self.has_content = true;
        }
        if let Some(text) = delta.get("reasoning_content").and_then(Value::as_str) {
            self.reasoning.push_str(text);
        }
        if let Some(Value::Array(calls)) = delta.get("tool_calls") {
            for call in calls {
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(self.calls.len() as u64) as usize;
                while self.calls.len() <= index {
                    self.calls.push(ToolCall { kind: "function".into(), ..Default::default() });
                }
                let slot = &mut self.calls[index];
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    slot.id = id.to_owned();
                }
                if let Some(f) = call.get("function") {
                    if let Some(name) = f.get("name").and_then(Value::as_str) {
                        slot.function.name.push_str(name);
                    }
                    if let Some(args) = f.get("arguments").and_then(Value::as_str) {
                        slot.function.arguments.push_str(args);
                    }
                }
            }
        }
        Ok(false)
    }

    fn state(&mut self) -> &mut StreamState {
        &mut self.state
    }

    fn finish(self) -> Result<Completion, LlmError> {
        Ok(Completion {
            content: self.has_content.then_some(self.content),
            tool_calls: self.calls.into_iter().filter(|c| !c.function.name.is_empty()).collect(),
            finish_reason: self.finish_reason,
            usage: self.usage,
            thinking: reasoning_text(&self.reasoning),
        })
    }
}
