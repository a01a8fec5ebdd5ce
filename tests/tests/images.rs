#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! An image attached to a message reaches a vision model in its provider's own shape: OpenAI's
//! `image_url` parts (a data URL) and Anthropic's `image` blocks (base64 source), on every
//! later call too (the history keeps it); the event log keeps it beside the text; and what is
//! not an image a model reads, or too much of one, is refused in words.

use base64::Engine;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use reqwest::Method;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

/// A 1x1 PNG.
const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// The user messages of a request as the provider got them.
fn user_messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "user").cloned().collect()
}

#[tokio::test]
async fn an_image_reaches_openai_and_anthropic_models_as_their_apis_want_it() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PROFILE_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    llm.push([Reply::Text("ready".into())]);
    let (conv, _) = alice.start_ready(json!({"message": "hello"})).await;
    alice.wait_events(&conv, "the first answer", |ev| ev.iter().any(|e| e["status"] == "idle")).await;
    let path = format!("/api/v1/conversations/{conv}/messages");

    // OpenAI's wire: the content becomes parts, text then the image as a data URL.
    llm.push([Reply::Text("A single pixel.".into())]);
    let asked = llm.requests().len();
    let (s, sent) =
        alice.post(&path, json!({"text": "What is in this picture?", "images": [{"media_type": "image/png", "data": PIXEL}]})).await;
    assert_eq!(s, 202, "{sent}");
    llm.wait_requests(asked + 1).await;
    let request = llm.requests()[asked].clone();
    let last = user_messages(&request).last().cloned().unwrap();
    assert_eq!(last["content"][0], json!({"type": "text", "text": "What is in this picture?"}), "{last}");
    assert_eq!(last["content"][1], json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PIXEL}")}}), "{last}");
    // The log keeps it beside the text.
    let events = alice.wait_events(&conv, "the answer", |ev| ev.iter().filter(|e| e["status"] == "idle").count() >= 2).await;
    let message = events.iter().find(|e| e["kind"] == "user_message" && e["text"] == "What is in this picture?").unwrap();
    assert_eq!(message["images"], json!([{"media_type": "image/png", "data": PIXEL}]));

    // Anthropic's wire, through a profile of that provider: image blocks before the text, and
    // the earlier image still in the history.
    let profile = json!({"provider": "anthropic", "base_url": llm.base_url, "model": "claude-scripted", "api_key": "sk-ant-test"});
    assert_eq!(alice.call(Method::PUT, "/api/v1/llm-profiles/claude", Some(profile)).await.0, 201);
    assert_eq!(
        alice.call(Method::PUT, &format!("/api/v1/conversations/{conv}/llm-profile"), Some(json!({"profile": "claude"}))).await.0,
        202
    );
    alice.wait_events(&conv, "the switch", |ev| ev.iter().any(|e| e["kind"] == "llm_profile")).await;
    llm.push([Reply::Text("Two pixels now.".into())]);
    let asked = llm.requests().len();
    let jpeg = base64::engine::general_purpose::STANDARD.encode(b"\xff\xd8\xff\xe0 not really a jpeg but bytes");
    let (s, _) = alice.post(&path, json!({"text": "And this one?", "images": [{"media_type": "image/jpeg", "data": jpeg}]})).await;
    assert_eq!(s, 202);
    llm.wait_requests(asked + 1).await;
    let request = llm.requests()[asked].clone();
    assert_eq!(request["model"], "claude-scripted", "{request}");
    let images: Vec<Value> = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "image")
        .collect();
    assert_eq!(
        images,
        vec![
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}}),
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": jpeg}}),
        ],
        "{request}"
    );
    let last = user_messages(&request).last().cloned().unwrap();
    let blocks: Vec<&str> = last["content"].as_array().unwrap().iter().filter_map(|b| b["type"].as_str()).collect();
    assert!(blocks.ends_with(&["image", "text"]), "{last}");

    // Refused in words, and nothing sent.
    let asked = llm.requests().len();
    for (images, status, code) in [
        (json!([{"media_type": "image/svg+xml", "data": PIXEL}]), 400, "invalid_field"),
        (json!([{"media_type": "image/png", "data": "not base64!"}]), 400, "invalid_field"),
        (json!(vec![json!({"media_type": "image/png", "data": PIXEL}); 5]), 400, "invalid_field"),
        (
            json!([{"media_type": "image/png", "data": base64::engine::general_purpose::STANDARD.encode(vec![0u8; 4_500_000])}]),
            413,
            "images_too_large",
        ),
    ] {
        let (s, e) = alice.post(&path, json!({"text": "look", "images": images})).await;
        assert_eq!((s, e["error"]["code"].as_str()), (status, Some(code)), "{e}");
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(llm.requests().len(), asked, "a refused message reached the model");
}
