#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The API's contract at its edges: authentication, users' isolation, bad input, limits,
//! deletion.

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::json;

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

fn code(v: &serde_json::Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<no code>")
}

#[tokio::test]
async fn a_user_cannot_see_or_touch_another_users_conversation() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("hi alice")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let bob = h.api(BOB);
    let (status, task) = alice.post("/api/v1/conversations", json!({"message": "secret plans"})).await;
    assert_eq!(status, 202);
    let task_id = task["id"].as_str().unwrap();
    let task = alice.wait_task(task_id, &["READY"]).await;
    let conv = task["conversation_id"].as_str().unwrap();
    alice.wait_finished(conv, 1).await;

    // Bob sees none of it, and cannot tell it exists.
    for path in
        [format!("/api/v1/conversations/{conv}"), format!("/api/v1/conversations/{conv}/events"), format!("/api/v1/start-tasks/{task_id}")]
    {
        let (status, body) = bob.get(&path).await;
        assert_eq!((status, code(&body)), (404, "not_found"), "{path}: {body}");
    }
    let (status, list) = bob.get("/api/v1/conversations").await;
    assert_eq!(status, 200);
    assert_eq!(list["items"], json!([]));
    for (path, body) in [
        (format!("/api/v1/conversations/{conv}/messages"), json!({"text": "hijack"})),
        (format!("/api/v1/conversations/{conv}/pause"), json!({})),
        (format!("/api/v1/conversations/{conv}/resume"), json!({})),
    ] {
        let (status, resp) = bob.post(&path, body).await;
        assert_eq!(status, 404, "{path}: {resp}");
    }
    let (status, _) = bob.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    assert_eq!(status, 404);
    // Bob's WebSocket is refused before the upgrade.
    let resp = reqwest::Client::new()
        .get(format!("{}/api/v1/conversations/{conv}/events/ws", h.http))
        .bearer_auth(BOB)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);

    // Alice still sees hers, and nothing Bob tried reached it.
    let (status, list) = alice.get("/api/v1/conversations").await;
    assert_eq!(status, 200);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let events = alice.events(conv).await;
    assert!(events.iter().all(|e| e["text"] != "hijack"));

    // No key, or a wrong one: 401.
    let anon = reqwest::Client::new().get(format!("{}/api/v1/conversations", h.http)).send().await.unwrap();
    assert_eq!(anon.status().as_u16(), 401);
    let body: serde_json::Value = anon.json().await.unwrap();
    assert_eq!(code(&body), "unauthorized");
    let (status, _) = h.api("not-a-real-key").get("/api/v1/conversations").await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn bad_input_gets_clear_errors_and_loses_nothing() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_MAX_BODY_BYTES", "4096"));
    let api = h.api(ALICE);
    let (conv, _) = api.start_ready(json!({"title": "target"})).await;

    let cases = [
        ("/api/v1/conversations", json!({"message": ""}), 400, "invalid_field", "message"),
        ("/api/v1/conversations", json!({"message": "x", "repository": {"url": ""}}), 400, "invalid_field", "repository.url"),
        ("/api/v1/conversations", json!({"mesage": "typo"}), 400, "invalid_body", "mesage"),
        ("/api/v1/conversations", json!({"message": 5}), 400, "invalid_body", "message"),
    ];
    for (path, body, status, want, mention) in cases {
        let (s, resp) = api.post(path, body.clone()).await;
        assert_eq!((s, code(&resp)), (status, want), "{body}: {resp}");
        assert!(resp["error"]["message"].as_str().unwrap().contains(mention), "{resp}");
    }
    let (s, resp) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({})).await;
    assert_eq!((s, code(&resp)), (400, "invalid_body"), "{resp}");
    assert!(resp["error"]["message"].as_str().unwrap().contains("text"), "{resp}");
    let (s, resp) = api.get("/api/v1/conversations/not-a-uuid").await;
    assert_eq!((s, code(&resp)), (400, "invalid_id"));
    let (s, resp) = api.get(&format!("/api/v1/conversations/{}", uuid_like())).await;
    assert_eq!((s, code(&resp)), (404, "not_found"));
    let (s, resp) = api.get("/api/v1/conversations?limit=0").await;
    assert_eq!((s, code(&resp)), (400, "invalid_query"));
    let (s, resp) = api.get("/api/v1/nothing-here").await;
    assert_eq!((s, code(&resp)), (404, "not_found"));
    // Oversized body: 413 with a JSON error. (A message has room for images beyond the limit:
    // its text alone past that is refused.)
    let (s, resp) = api.post("/api/v1/conversations", json!({"message": "x".repeat(10_000)})).await;
    assert_eq!((s, code(&resp)), (413, "payload_too_large"), "{resp}");
    let (s, resp) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "x".repeat(6_000_000)})).await;
    assert_eq!((s, code(&resp)), (413, "payload_too_large"), "{resp}");
    // Not JSON.
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/conversations/{conv}/messages", h.http))
        .bearer_auth(ALICE)
        .body("text=hi")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 415);

    // None of that left a trace: the conversation has only its start.
    let events = api.events(&conv).await;
    assert!(events.iter().all(|e| e["kind"] != "user_message"), "{events:?}");
    let (_, list) = api.get("/api/v1/conversations").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    // The OpenAPI document describes every route.
    let (s, doc) = api.get("/api/v1/openapi.json").await;
    assert_eq!(s, 200);
    for path in [
        "/api/v1/conversations",
        "/api/v1/conversations/{id}",
        "/api/v1/conversations/{id}/messages",
        "/api/v1/conversations/{id}/pause",
        "/api/v1/conversations/{id}/resume",
        "/api/v1/conversations/{id}/events",
        "/api/v1/conversations/{id}/events/ws",
        "/api/v1/start-tasks/{id}",
        "/healthz",
        "/readyz",
        "/api/v1/webhooks",
        "/api/v1/webhooks/{id}",
        "/api/v1/webhooks/{id}/rotate-secret",
        "/api/v1/webhooks/{id}/deliveries",
        "/api/v1/webhooks/{id}/deliveries/{delivery_id}/retry",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing from the OpenAPI document");
    }
    assert!(doc["paths"]["/api/v1/conversations/{id}"].get("patch").is_some());
    let (s, _) = api.get("/healthz").await;
    assert_eq!(s, 200);
    let (s, _) = api.get("/readyz").await;
    assert_eq!(s, 200);
}

fn uuid_like() -> String {
    "01890a5d-ac96-774b-bcce-b302099a8057".into()
}

#[tokio::test]
async fn limits_answer_429_with_a_code() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_RATE_LIMIT_PER_MINUTE", "5"));
    let api = h.api(ALICE);
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let (s, resp) = api.post("/api/v1/conversations", json!({})).await;
        statuses.push((s, code(&resp).to_owned()));
    }
    assert_eq!(statuses.iter().filter(|(s, _)| *s == 202).count(), 5, "{statuses:?}");
    assert!(statuses[5..].iter().all(|(s, c)| *s == 429 && c == "rate_limited"), "{statuses:?}");
    // Bob has his own budget.
    let (s, _) = h.api(BOB).post("/api/v1/conversations", json!({})).await;
    assert_eq!(s, 202);
    // Reads are not limited.
    let (s, _) = api.get("/api/v1/conversations").await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn deleting_a_conversation_removes_it_and_its_sandbox() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "hello"})).await;
    api.wait_events(&conv, "an answer", |ev| ev.iter().any(|e| e["kind"] == "agent_message")).await;
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    assert!(workspace.exists());
    let (s, _) = api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    assert_eq!(s, 202);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (s, _) = api.get(&format!("/api/v1/conversations/{conv}")).await;
        if s == 404 && !workspace.exists() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "conversation or workspace still there");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (_, list) = api.get("/api/v1/conversations").await;
    assert_eq!(list["items"], json!([]));
    let (s, _) = api.get(&format!("/api/v1/conversations/{conv}/events")).await;
    assert_eq!(s, 404);
}
