//! Calling LLMs, whichever wire a provider speaks. The client ([`client`]: one endpoint, the
//! deployment's or a user's profile, with retries and exponential backoff honouring
//! `Retry-After`, and a bound on calls in flight per process) speaks OpenAI-compatible chat
//! completions ([`openai`]: OpenAI, vLLM, llama.cpp server, Ollama, LiteLLM...), Anthropic's
//! Messages API ([`anthropic`]), OpenAI's Responses API ([`responses`]) and Google's Gemini API
//! ([`gemini`]), chosen by `provider`, with native tool calling, streaming ([`stream`]) and plain
//! answers, all in one vocabulary ([`message`]).
//!
//! Around the client: a profile's fallbacks take the calls its provider cannot answer
//! ([`fallback`]), [`models`] lists what a provider offers, [`passthrough`] relays a third-party
//! agent's own requests, and the deployment's endpoint and prices are [`config`] and [`prices`].
//! The files import one another, never this one: what is public is re-exported here.

pub mod anthropic;
pub mod client;
pub mod config;
pub mod fallback;
pub mod gemini;
pub mod message;
pub mod models;
pub mod openai;
pub mod passthrough;
pub mod prices;
pub mod responses;
pub mod stream;

pub use client::{LlmClient, ProfileTarget};
pub use config::{LlmConfig, PROVIDERS, Price};
pub use message::{
    ChatMessage, Completion, Deltas, FunctionCall, IMAGES_FROM, ImagePart, LlmError, ThinkingBlock, ToolCall, Usage, is_context_error,
};
pub use openai::{StreamAccumulator, parse_completion};

#[cfg(test)]
mod tests {
    use super::message::images_after_tool_results;
    use super::openai::openai_message;
    use super::stream::Accumulate;
    use super::*;

    #[test]
    fn screenshots_follow_the_tool_results_that_took_them() {
        let png = |d: &str| ImagePart { media_type: "image/png".into(), data: d.into() };
        let tool = |id: &str, images| ChatMessage {
            role: "tool".into(),
            content: Some(format!("result {id}")),
            tool_call_id: Some(id.into()),
            images,
            ..Default::default()
        };
        let plain = [ChatMessage::text("user", "hi"), tool("a", vec![])];
        assert!(matches!(images_after_tool_results(&plain), std::borrow::Cow::Borrowed(_)), "nothing to move, nothing copied");
        let messages =
            [ChatMessage::text("user", "look"), tool("a", vec![png("AAA")]), tool("b", vec![]), ChatMessage::text("user", "go on")];
        let out = images_after_tool_results(&messages);
        let roles: Vec<&str> = out.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "tool", "tool", "user", "user"], "after the run of results, before the next message");
        assert!(out[1].images.is_empty() && out[1].content.as_deref() == Some("result a"));
        assert_eq!(out[3].images, vec![png("AAA")]);
        assert!(out[3].content.as_deref().unwrap_or_default().contains("tool call a"));
        let wire = openai_message(&out[3]);
        assert_eq!(wire["content"][1]["image_url"]["url"], "data:image/png;base64,AAA");
        // At the end of the history too.
        let last = images_after_tool_results(&messages[..2]);
        assert_eq!(last.len(), 3);
        assert_eq!(last[2].images.len(), 1);
        let body = responses::request("gpt-x", 100, &messages, &[], false, None, None);
        assert_eq!(body["input"][1]["type"], "function_call_output");
        assert_eq!(body["input"][3]["content"][1]["type"], "input_image");
    }

    #[test]
    fn accumulates_streamed_tool_calls() {
        let mut acc = StreamAccumulator::default();
        for line in [
            r#"data: {"choices":[{"delta":{"role":"assistant","content":"Let me "}}]}"#,
            r#"data: {"choices":[{"delta":{"content":"check."}}]}"#,
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"terminal","arguments":"{\"comm"}}]}}]}"#,
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"and\":\"ls\"}"}}]}}]}"#,
            r#"data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ] {
            assert!(!acc.line(line).unwrap());
        }
        assert!(acc.line("data: [DONE]").unwrap());
        let c = acc.finish().unwrap();
        assert_eq!(c.content.as_deref(), Some("Let me check."));
        assert_eq!(c.tool_calls.len(), 1);
        assert_eq!(c.tool_calls[0].id, "call_1");
        assert_eq!(c.tool_calls[0].function.arguments, r#"{"command":"ls"}"#);
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn parses_plain_completion() {
        let v = serde_json::json!({"choices":[{"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"c1","type":"function","function":{"name":"finish","arguments":"{}"}}]},
            "finish_reason":"tool_calls"}]});
        let c = parse_completion(&v).unwrap();
        assert_eq!(c.content, None);
        assert_eq!(c.tool_calls[0].function.name, "finish");
        assert!(parse_completion(&serde_json::json!({})).is_err());
    }
}
