#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Webhooks and titles: signed deliveries that a Standard Webhooks library verifies, retries,
//! isolation between users and between subscriptions, a dispatcher killed mid-delivery, refused
//! destinations, and titles (generated, fallback, and the user's, which wins).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use halyard_tests::{Api, Halyard, HalyardOptions, NatsServer, Receiver, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

fn opts(llm: &ScriptedLlm) -> HalyardOptions {
    HalyardOptions::new(&llm.base_url).set("HALYARD_WEBHOOK_ALLOW", "loopback").set("HALYARD_WEBHOOK_RETRY_BASE_MS", "100")
}

async fn subscribe(api: &Api, url: &str, extra: Value) -> Value {
    let mut body = json!({"url": url});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (s, w) = api.post("/api/v1/webhooks", body).await;
    assert_eq!(s, 201, "{w}");
    assert!(w["secret"].as_str().unwrap().starts_with("whsec_"));
    w
}

/// A conversation whose agent runs one command and finishes; returns its id and events.
async fn run_conversation(api: &Api, llm: &ScriptedLlm, text: &str) -> (String, Vec<Value>) {
    llm.push([Reply::tool("terminal", json!({"command": "echo hook"})), Reply::finish("done")]);
    // Titled at start, so no generated title event arrives after the run is over.
    let (conv, _) = api.start_ready(json!({"message": text, "title": "webhook test"})).await;
    let events = api.wait_finished(&conv, 1).await;
    (conv, events)
}

async fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Distinct event ids delivered (2xx) for a conversation, in first-delivery order.
fn delivered_seqs(r: &Receiver, conv: &str) -> Vec<u64> {
    let mut seen = std::collections::HashSet::new();
    r.accepted()
        .iter()
        .map(|x| x.json())
        .filter(|e| e["conversation_id"] == conv)
        .filter(|e| seen.insert(e["id"].as_str().unwrap_or_default().to_owned()))
        .map(|e| e["seq"].as_u64().unwrap_or(0))
        .collect()
}

#[tokio::test]
async fn deliveries_are_signed_per_standard_webhooks() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(opts(&llm));
    let api = h.api(ALICE);
    let receiver = Receiver::start().await;
    let w = subscribe(&api, &receiver.url, json!({"description": "all events"})).await;
    let (conv, events) = run_conversation(&api, &llm, "sign everything").await;
    wait_for("every event", 20, || delivered_seqs(&receiver, &conv).len() >= events.len()).await;
    assert_eq!(delivered_seqs(&receiver, &conv), (1..=events.len() as u64).collect::<Vec<_>>());

    // The process's /metrics counts the deliveries the receiver accepted (once the last answer
    // reached the dispatcher).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let delivered = h.scrape().await.sum("halyard_webhook_deliveries_total", &[("outcome", "succeeded")]);
        let accepted = receiver.accepted().len() as f64;
        if delivered == accepted {
            break;
        }
        assert!(Instant::now() < deadline, "{delivered} deliveries counted, {accepted} accepted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The body is the HTTP API's event, as stored.
    let first = &receiver.accepted()[0];
    assert_eq!(first.json(), events[0]);
    assert_eq!(first.header("content-type"), Some("application/json"));

    // The reference library verifies every signature, and rejects altered bodies.
    let lines: String = receiver
        .accepted()
        .iter()
        .map(|r| {
            let headers: BTreeMap<&str, &str> = r.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            json!({"headers": headers, "body": r.body}).to_string() + "\n"
        })
        .collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../protocol/examples/verify_webhooks.py");
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .arg(w["secret"].as_str().unwrap())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use tokio::io::AsyncWriteExt;
    child.stdin.take().unwrap().write_all(lines.as_bytes()).await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "verifier failed (pip install standardwebhooks): {}", String::from_utf8_lossy(&out.stderr));
    let verdicts = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(verdicts.lines().count(), receiver.accepted().len());
    assert!(verdicts.lines().all(|l| l == "ok tamper-rejected"), "{verdicts}");

    // A rotated secret signs from then on; the old one no longer verifies new deliveries.
    let (s, rotated) = api.post(&format!("/api/v1/webhooks/{}/rotate-secret", w["id"].as_str().unwrap()), json!({})).await;
    assert_eq!(s, 200);
    assert_ne!(rotated["secret"], w["secret"]);
    let (s, listed) = api.get("/api/v1/webhooks").await;
    assert_eq!(s, 200);
    assert!(listed["items"][0].get("secret").is_none(), "secrets are shown only once");
}

#[tokio::test]
async fn a_failing_receiver_gets_retries_in_order_and_a_parked_delivery_can_be_retried() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(opts(&llm).set("HALYARD_WEBHOOK_MAX_ATTEMPTS", "4"));
    let api = h.api(ALICE);
    // Fails twice, then succeeds.
    let receiver = Receiver::with(|n| (if n < 2 { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::OK }, None)).await;
    let w = subscribe(&api, &receiver.url, json!({})).await;
    let id = w["id"].as_str().unwrap().to_owned();
    let (conv, events) = run_conversation(&api, &llm, "retry me").await;
    wait_for("every event", 30, || delivered_seqs(&receiver, &conv).len() >= events.len()).await;
    // In order, each once successfully.
    assert_eq!(delivered_seqs(&receiver, &conv), (1..=events.len() as u64).collect::<Vec<_>>());
    let got = receiver.received();
    assert_eq!(got[0].header("webhook-id"), got[2].header("webhook-id"), "retries keep the delivery id");
    assert_eq!(got[0].json()["seq"], 1);
    assert_eq!(got[2].json()["seq"], 1, "the second event waits for the first");

    let deadline = Instant::now() + Duration::from_secs(10);
    let attempts = loop {
        let (_, d) = api.get(&format!("/api/v1/webhooks/{id}/deliveries?limit=1000")).await;
        let items = d["items"].as_array().cloned().unwrap_or_default();
        if items.len() >= events.len() + 2 || Instant::now() > deadline {
            break items;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let first_id = got[0].header("webhook-id").unwrap();
    let mut first: Vec<&Value> = attempts.iter().filter(|a| a["delivery_id"] == first_id).collect();
    first.sort_by_key(|a| a["attempt"].as_u64());
    let outcomes: Vec<&str> = first.iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["retrying", "retrying", "succeeded"], "{first:?}");
    assert_eq!(first[0]["status_code"], 500);
    assert!(first[2]["duration_ms"].is_u64() && first[2]["time"].is_string());

    // Now it always fails: a delivery is parked after the last attempt, then retried by hand.
    receiver.set(|_| (StatusCode::SERVICE_UNAVAILABLE, None));
    let before = receiver.received().len();
    llm.push([Reply::Text("one more".into())]);
    api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "again"})).await;
    let failed = loop {
        let (_, d) = api.get(&format!("/api/v1/webhooks/{id}/deliveries?limit=1000")).await;
        if let Some(f) = d["items"].as_array().unwrap().iter().find(|a| a["outcome"] == "failed") {
            break f.clone();
        }
        assert!(receiver.received().len() < before + 100, "runaway retries");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(failed["attempt"], 4);
    receiver.set(|_| (StatusCode::OK, None));
    let delivery = failed["delivery_id"].as_str().unwrap();
    let (s, body) = api.post(&format!("/api/v1/webhooks/{id}/deliveries/{delivery}/retry"), json!({})).await;
    assert_eq!(s, 202, "{body}");
    wait_for("the retried delivery", 20, || receiver.accepted().iter().any(|r| r.header("webhook-id") == Some(delivery))).await;
    let (s, body) = api.post(&format!("/api/v1/webhooks/{id}/deliveries/{}/retry", got[0].header("webhook-id").unwrap()), json!({})).await;
    assert_eq!((s, body["error"]["code"].as_str()), (409, Some("delivery_not_failed")));
}

/// One endpoint that receives every conversation is not held to one request at a time: the
/// conversations' deliveries go side by side (in lanes), each conversation's in order.
#[tokio::test]
async fn one_subscription_delivers_conversations_side_by_side_each_in_order() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(opts(&llm));
    let api = h.api(ALICE);
    let receiver = Receiver::with(|_| (StatusCode::OK, Some(Duration::from_millis(400)))).await;
    subscribe(&api, &receiver.url, json!({})).await;
    // Conversations in four different lanes (a conversation's lane is fixed by its id).
    let mut convs: Vec<String> = Vec::new();
    let mut lanes = std::collections::HashSet::new();
    while convs.len() < 4 {
        let (conv, _) = api.start_ready(json!({"title": "side by side"})).await;
        let id: halyard_protocol::ConversationId = serde_json::from_value(json!(conv)).unwrap();
        if lanes.insert(halyard_protocol::subjects::delivery_lane(id)) {
            convs.push(conv);
        }
    }
    llm.push((0..4).map(|_| Reply::finish("done")));
    for conv in &convs {
        let (s, b) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "go"})).await;
        assert_eq!(s, 202, "{b}");
    }
    let mut logs = Vec::new();
    for conv in &convs {
        logs.push(api.wait_finished(conv, 1).await);
    }
    for (conv, events) in convs.iter().zip(&logs) {
        wait_for("every event", 60, || delivered_seqs(&receiver, conv).len() >= events.len()).await;
        assert_eq!(delivered_seqs(&receiver, conv), (1..=events.len() as u64).collect::<Vec<_>>(), "{conv} out of order");
    }
    assert!(receiver.max_in_flight() >= 2, "deliveries went one at a time ({} at most)", receiver.max_in_flight());
}

#[tokio::test]
async fn a_hanging_receiver_does_not_delay_others() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(opts(&llm).set("HALYARD_WEBHOOK_TIMEOUT_SECS", "30"));
    let api = h.api(ALICE);
    let stuck = Receiver::with(|_| (StatusCode::OK, Some(Duration::from_secs(25)))).await;
    let fast = Receiver::start().await;
    subscribe(&api, &stuck.url, json!({})).await;
    subscribe(&api, &fast.url, json!({})).await;
    let (conv, events) = run_conversation(&api, &llm, "two receivers").await;
    let t0 = Instant::now();
    wait_for("the fast receiver", 10, || delivered_seqs(&fast, &conv).len() >= events.len()).await;
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(stuck.received().is_empty(), "the stuck receiver has not answered anything yet");
}

#[tokio::test]
async fn users_only_get_their_own_events_and_private_destinations_are_refused() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(opts(&llm));
    let alice = h.api(ALICE);
    let bob = h.api(BOB);
    let bob_receiver = Receiver::start().await;
    let alice_receiver = Receiver::start().await;
    subscribe(&bob, &bob_receiver.url, json!({})).await;
    let (conv, events) = run_conversation(&alice, &llm, "alice only").await;
    let w =
        subscribe(&alice, &alice_receiver.url, json!({"conversation_id": conv, "event_kinds": ["user_message", "agent_message"]})).await;
    // Bob cannot subscribe to Alice's conversation, nor see her webhook.
    let (s, body) = bob.post("/api/v1/webhooks", json!({"url": bob_receiver.url, "conversation_id": conv})).await;
    assert_eq!((s, body["error"]["code"].as_str()), (400, Some("invalid_field")), "{body}");
    let (s, _) = bob.get(&format!("/api/v1/webhooks/{}", w["id"].as_str().unwrap())).await;
    assert_eq!(s, 404);
    // New events of Alice's conversation reach Alice's filtered subscription only.
    llm.push([Reply::Text("filtered".into())]);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "more"})).await;
    wait_for("alice's filtered events", 20, || alice_receiver.accepted().len() >= 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kinds: Vec<String> = alice_receiver.accepted().iter().map(|r| r.json()["kind"].as_str().unwrap().to_owned()).collect();
    assert_eq!(kinds, ["user_message", "agent_message"]);
    assert!(bob_receiver.received().is_empty(), "bob got {} of alice's events", bob_receiver.received().len());
    assert!(events.len() > 2);

    // Unknown kinds and bad URLs are refused with a clear error.
    let (s, body) = alice.post("/api/v1/webhooks", json!({"url": "https://example.com/h", "event_kinds": ["nope"]})).await;
    assert_eq!((s, body["error"]["code"].as_str()), (400, Some("invalid_field")));
    for url in ["http://10.0.0.1/h", "http://169.254.169.254/latest/meta-data", "http://[::ffff:192.168.0.1]/h"] {
        let (s, body) = alice.post("/api/v1/webhooks", json!({"url": url})).await;
        assert_eq!((s, body["error"]["code"].as_str()), (400, Some("destination_not_allowed")), "{url}: {body}");
    }
}

#[tokio::test]
async fn loopback_is_refused_unless_allowed() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let receiver = Receiver::start().await;
    let (s, body) = api.post("/api/v1/webhooks", json!({"url": receiver.url})).await;
    assert_eq!((s, body["error"]["code"].as_str()), (400, Some("destination_not_allowed")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("loopback"));
    let (s, _) = api.post("/api/v1/webhooks", json!({"url": "http://localhost:1/x"})).await;
    assert_eq!(s, 400);
}

#[tokio::test]
async fn a_killed_dispatcher_loses_no_event() {
    init();
    let llm = ScriptedLlm::start().await;
    let nats = NatsServer::start();
    let shared = |services: &[&str]| opts(&llm).serve(&nats.url, services).set("HALYARD_SECRET", "a-shared-deployment-secret");
    let _core = Halyard::start(shared(&["sandbox", "agent", "conversations", "titles"]));
    let mut callbacks = Halyard::start(shared(&["callbacks"]));
    let gateway = Halyard::start(shared(&["gateway"]));
    let api = gateway.api(ALICE);
    // A slow receiver, so deliveries are in flight when the dispatcher dies.
    let receiver = Receiver::with(|_| (StatusCode::OK, Some(Duration::from_millis(150)))).await;
    subscribe(&api, &receiver.url, json!({})).await;
    llm.push((0..6).map(|i| Reply::tool("think", json!({"thought": format!("t{i}")}))));
    llm.push([Reply::finish("done")]);
    let (conv, _) = api.start_ready(json!({"message": "many events", "title": "many events"})).await;
    wait_for("the first deliveries", 20, || receiver.received().len() >= 3).await;
    callbacks.kill9();
    let events = api.wait_finished(&conv, 1).await;
    callbacks.restart();
    wait_for("every event after the restart", 30, || delivered_seqs(&receiver, &conv).len() >= events.len()).await;
    assert_eq!(delivered_seqs(&receiver, &conv), (1..=events.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn titles_are_generated_fall_back_and_yield_to_the_user() {
    init();
    let llm = ScriptedLlm::start().await;
    let titler = ScriptedLlm::start().await;
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_TITLE_USE_LLM", "true")
            .set("HALYARD_TITLE_BASE_URL", &titler.base_url)
            .set("HALYARD_TITLE_MODEL", "cheap-model"),
    );
    let api = h.api(ALICE);

    // Generated by the (cheaper) title model.
    titler.push([Reply::Text("\"Greeting script in Python\"".into())]);
    llm.push([Reply::Text("hi".into())]);
    let (conv, _) = api.start_ready(json!({"message": "Please write a Python script that greets the user"})).await;
    let c = api.wait_conversation(&conv, "a generated title", |c| c["title"].is_string()).await;
    assert_eq!(c["title"], "Greeting script in Python");
    assert_eq!(titler.requests()[0]["model"], "cheap-model");
    let events = api.wait_events(&conv, "the title event", |ev| ev.iter().any(|e| e["kind"] == "title")).await;
    let t = events.iter().find(|e| e["kind"] == "title").unwrap();
    assert_eq!(t["set_by"], "generated");

    // The title LLM fails: the first line of the message, trimmed.
    titler.push([Reply::Status(500), Reply::Status(500)]);
    llm.push([Reply::Text("hi".into())]);
    let long_first_line = "Refactor the payment module so that every currency conversion goes through one audited function";
    let (conv2, _) = api.start_ready(json!({"message": format!("{long_first_line}\nMore details here.")})).await;
    let c = api.wait_conversation(&conv2, "a fallback title", |c| c["title"].is_string()).await;
    let title = c["title"].as_str().unwrap();
    assert!(title.chars().count() <= 60, "{title}");
    assert!(title.starts_with("Refactor the payment module"), "{title}");

    // The user's title wins, even though the generated one arrives after it.
    titler.push([Reply::Delay(Duration::from_millis(1500), Box::new(Reply::Text("Generated late".into())))]);
    llm.push([Reply::Text("hi".into())]);
    let asked = titler.requests().len();
    let (conv3, _) = api.start_ready(json!({"message": "something"})).await;
    // The title setter is generating (had the user named it first, it would rightly not).
    wait_for("the title request", 20, || titler.requests().len() > asked).await;
    let (s, _) = api.call(reqwest::Method::PATCH, &format!("/api/v1/conversations/{conv3}"), Some(json!({"title": "Mine"}))).await;
    assert_eq!(s, 202);
    let events = api.wait_events(&conv3, "both titles", |ev| ev.iter().filter(|e| e["kind"] == "title").count() == 2).await;
    let titles: Vec<(&str, &str)> =
        events.iter().filter(|e| e["kind"] == "title").map(|e| (e["title"].as_str().unwrap(), e["set_by"].as_str().unwrap())).collect();
    assert_eq!(titles, [("Mine", "user"), ("Generated late", "generated")]);
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv3}")).await;
    assert_eq!(c["title"], "Mine");
    // A title given at start is the user's too: nothing is generated.
    let before = titler.requests().len();
    llm.push([Reply::Text("hi".into())]);
    let (conv4, _) = api.start_ready(json!({"message": "named", "title": "Given"})).await;
    api.wait_events(&conv4, "the answer", |ev| ev.iter().any(|e| e["kind"] == "agent_message")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(titler.requests().len(), before);
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv4}")).await;
    assert_eq!(c["title"], "Given");
    let (s, body) = api.call(reqwest::Method::PATCH, &format!("/api/v1/conversations/{conv4}"), Some(json!({"title": ""}))).await;
    assert_eq!((s, body["error"]["code"].as_str()), (400, Some("invalid_field")));
}

#[tokio::test]
async fn a_subscription_failing_for_too_long_is_disabled_and_can_be_enabled_again() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(opts(&llm).set("HALYARD_WEBHOOK_DISABLE_AFTER_SECS", "1").set("HALYARD_WEBHOOK_MAX_ATTEMPTS", "100"));
    let api = h.api(ALICE);
    let receiver = Receiver::with(|_| (StatusCode::BAD_GATEWAY, None)).await;
    let w = subscribe(&api, &receiver.url, json!({})).await;
    let id = w["id"].as_str().unwrap();
    let (conv, events) = run_conversation(&api, &llm, "nobody listens").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let disabled = loop {
        let (_, w) = api.get(&format!("/api/v1/webhooks/{id}")).await;
        if w["enabled"] == false {
            break w;
        }
        assert!(Instant::now() < deadline, "never disabled: {w}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(disabled["disabled_reason"].as_str().unwrap().contains("failed"), "{disabled}");
    // Disabled means no more attempts.
    let calls = receiver.received().len();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(receiver.received().len(), calls);
    // Fixed and re-enabled: what was pending is delivered, in order, nothing lost.
    receiver.set(|_| (StatusCode::OK, None));
    let (s, w) = api.call(reqwest::Method::PATCH, &format!("/api/v1/webhooks/{id}"), Some(json!({"enabled": true}))).await;
    assert_eq!((s, &w["enabled"]), (200, &json!(true)), "{w}");
    wait_for("the backlog", 30, || delivered_seqs(&receiver, &conv).len() >= events.len()).await;
    assert_eq!(delivered_seqs(&receiver, &conv), (1..=events.len() as u64).collect::<Vec<_>>());
    let (s, _) = api.call(reqwest::Method::DELETE, &format!("/api/v1/webhooks/{id}"), None).await;
    assert_eq!(s, 204);
    let (s, _) = api.get(&format!("/api/v1/webhooks/{id}")).await;
    assert_eq!(s, 404);
}

/// The fan-out's consumer as the server has it: its filter and how many events it was handed.
async fn fanout_consumer(js: &async_nats::jetstream::Context) -> (String, u64) {
    let stream = js.get_stream("HALYARD_EVENTS").await.unwrap();
    let mut consumer = stream.get_consumer::<async_nats::jetstream::consumer::pull::Config>("callback-fanout").await.unwrap();
    let info = consumer.info().await.unwrap();
    (info.config.filter_subject.clone(), info.delivered.consumer_sequence)
}

/// Waits (10 s at most) until the fan-out's filter is `want`.
async fn until_fanout_filter(js: &async_nats::jetstream::Context, want: &str, why: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while fanout_consumer(js).await.0 != want {
        assert!(Instant::now() < deadline, "{why}: {:?}", fanout_consumer(js).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn without_an_enabled_subscription_the_fan_out_is_handed_no_event() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(opts(&llm).set("HALYARD_WEBHOOK_FANOUT_IDLE_SECS", "2"));
    let api = h.api(ALICE);
    let js = async_nats::jetstream::new(h.nats_client("admin").await);
    let (none, all) = ("halyard.events.none.none", "halyard.events.>");
    // No subscription: the server hands the fan-out nothing while a conversation runs.
    until_fanout_filter(&js, none, "the fan-out still takes every event").await;
    let before = fanout_consumer(&js).await.1;
    run_conversation(&api, &llm, "nobody listens").await;
    assert_eq!(fanout_consumer(&js).await.1, before, "events were handed to the fan-out with no subscription");

    // A subscription: every event again, delivered.
    let receiver = Receiver::start().await;
    let w = subscribe(&api, &receiver.url, json!({})).await;
    until_fanout_filter(&js, all, "the fan-out was not given the events back").await;
    let (conv, events) = run_conversation(&api, &llm, "now someone does").await;
    wait_for("every event", 20, || delivered_seqs(&receiver, &conv).len() >= events.len()).await;

    // Disabled: still every event for a while (HALYARD_WEBHOOK_FANOUT_IDLE_SECS), then none;
    // enabled again: every event at once, and the new conversation's events arrive.
    let id = w["id"].as_str().unwrap();
    let path = format!("/api/v1/webhooks/{id}");
    let patch = |enabled: bool| api.call(reqwest::Method::PATCH, &path, Some(json!({"enabled": enabled})));
    assert_eq!(patch(false).await.0, 200);
    let disabled = Instant::now();
    until_fanout_filter(&js, none, "disabled, the fan-out kept taking every event").await;
    assert!(disabled.elapsed() >= Duration::from_millis(1500), "the fan-out stopped before the idle time");
    assert_eq!(patch(true).await.0, 200);
    until_fanout_filter(&js, all, "enabled again, the fan-out took no events").await;
    let (conv, events) = run_conversation(&api, &llm, "and again").await;
    wait_for("every event after enabling again", 20, || delivered_seqs(&receiver, &conv).len() >= events.len()).await;
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}
