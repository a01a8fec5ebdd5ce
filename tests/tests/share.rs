#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Read-only share links, as their holder and their owner see them: a link opens the
//! conversation with no account (summary, events, the live WebSocket), writes nothing, reaches
//! nothing else, is the owner's alone to make and revoke, and stops at once when revoked or
//! replaced (an open WebSocket closes too).

use std::time::Duration;

use futures::StreamExt;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

/// A GET with no credentials at all.
async fn anonymous(base: &str, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new().get(format!("{base}{path}")).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next event the socket brings within `wait`: `Ok(None)` if it closed, `Err` on a timeout.
async fn next_event(socket: &mut Socket, wait: Duration) -> Result<Option<Value>, ()> {
    loop {
        match tokio::time::timeout(wait, socket.next()).await {
            Err(_) => return Err(()),
            Ok(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => return Ok(None),
            Ok(Some(Ok(Message::Text(t)))) => return Ok(Some(serde_json::from_str(&t).unwrap())),
            Ok(Some(Ok(_))) => {}
        }
    }
}

#[tokio::test]
async fn a_share_link_shows_the_conversation_live_to_anyone_and_nothing_more() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("the first answer")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let bob = h.api(BOB);
    let (conv, _) = alice.start_ready(json!({"message": "say something", "title": "shared work"})).await;
    alice.wait_conversation(&conv, "finish", |c| c["execution_status"] == "finished").await;

    // Not shared yet; only its owner may share it.
    let (s, state) = alice.get(&format!("/api/v1/conversations/{conv}/share")).await;
    assert_eq!((s, &state["shared"]), (200, &json!(false)), "{state}");
    let (s, _) = bob.post(&format!("/api/v1/conversations/{conv}/share"), json!({})).await;
    assert_eq!(s, 404, "another user's conversation is not found, so not shared");
    let (s, link) = alice.post(&format!("/api/v1/conversations/{conv}/share"), json!({})).await;
    assert_eq!(s, 201, "{link}");
    let token = link["token"].as_str().unwrap().to_owned();
    assert!(link["url"].as_str().unwrap().ends_with(&format!("/shared/{token}")), "{link}");
    assert!(token.starts_with(&format!("{conv}.")), "{token}");
    let (_, state) = alice.get(&format!("/api/v1/conversations/{conv}/share")).await;
    assert_eq!(state["shared"], true);
    assert!(!state.to_string().contains(token.split('.').nth(1).unwrap()), "the secret is shown once: {state}");

    // With no account: the summary and the events, as the owner sees them.
    let (s, shared) = anonymous(&h.http, &format!("/api/v1/shared/{token}")).await;
    assert_eq!(s, 200, "{shared}");
    assert_eq!(
        (shared["id"].as_str(), shared["title"].as_str(), shared["state"].as_str()),
        (Some(conv.as_str()), Some("shared work"), Some("finished"))
    );
    let (s, page) = anonymous(&h.http, &format!("/api/v1/shared/{token}/events")).await;
    assert_eq!(s, 200, "{page}");
    let (_, own) = alice.get(&format!("/api/v1/conversations/{conv}/events")).await;
    assert_eq!(page["items"], own["items"], "the link shows the log as it is");
    assert!(page.to_string().contains("the first answer"));
    let (s, found) = anonymous(&h.http, &format!("/api/v1/shared/{token}/events?kind=agent_message")).await;
    assert_eq!(s, 200);
    assert!(found["items"].as_array().unwrap().iter().all(|e| e["kind"] == "agent_message"), "{found}");

    // Live: what happens next reaches an open socket.
    let last = page["items"].as_array().unwrap().last().unwrap()["seq"].as_u64().unwrap();
    let ws = format!("{}/api/v1/shared/{token}/events/ws?after_seq={last}", h.http.replacen("http", "ws", 1));
    let (mut socket, _) = tokio_tungstenite::connect_async(ws.as_str()).await.expect("a shared socket opens with no account");
    llm.push([Reply::finish("the second answer")]);
    let (s, _) = alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "and more"})).await;
    assert_eq!(s, 202);
    let mut seen = Vec::new();
    while !seen.iter().any(|e: &Value| e["kind"] == "agent_message") {
        let e = next_event(&mut socket, Duration::from_secs(30)).await.expect("live events").expect("the socket stays open");
        assert_eq!(e["seq"].as_u64(), Some(last + seen.len() as u64 + 1), "in order, none missing");
        seen.push(e);
    }
    assert!(seen.iter().any(|e| e["kind"] == "user_message" && e["text"] == "and more"), "{seen:?}");

    // Nothing writes through it, and it opens nothing else.
    let http = reqwest::Client::new();
    for (method, path) in [
        (reqwest::Method::POST, format!("/api/v1/shared/{token}/events")),
        (reqwest::Method::DELETE, format!("/api/v1/shared/{token}")),
        (reqwest::Method::PUT, format!("/api/v1/shared/{token}")),
    ] {
        let s = http.request(method.clone(), format!("{}{path}", h.http)).send().await.unwrap().status().as_u16();
        assert_eq!(s, 405, "{method} {path}");
    }
    for path in [format!("/api/v1/conversations/{conv}"), format!("/api/v1/conversations/{conv}/files"), "/api/v1/me".to_owned()] {
        let s = http.get(format!("{}{path}", h.http)).bearer_auth(&token).send().await.unwrap().status().as_u16();
        assert_eq!(s, 401, "the token is no key: {path}");
    }
    let (s, _) = anonymous(&h.http, &format!("/api/v1/conversations/{conv}/events")).await;
    assert_eq!(s, 401);

    // A wrong secret, or the right one with another conversation's id, opens nothing.
    let (id, secret) = token.split_once('.').unwrap();
    let wrong = format!("{id}.{}", "0".repeat(secret.len()));
    let (s, err) = anonymous(&h.http, &format!("/api/v1/shared/{wrong}")).await;
    assert_eq!((s, err["error"]["code"].as_str()), (404, Some("not_found")), "{err}");
    assert!(err["error"]["message"].as_str().unwrap().contains("revoked"), "{err}");
    let (other, _) = alice.start_ready(json!({"message": "say something else"})).await;
    let (s, _) = anonymous(&h.http, &format!("/api/v1/shared/{other}.{secret}/events")).await;
    assert_eq!(s, 404);

    // Revoked: at once for every request, and the open socket closes.
    let (s, _) = bob.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}/share"), None).await;
    assert_eq!(s, 404, "only the owner revokes");
    let (s, _) = alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}/share"), None).await;
    assert_eq!(s, 204);
    let (s, _) = anonymous(&h.http, &format!("/api/v1/shared/{token}/events")).await;
    assert_eq!(s, 404, "revoked at once");
    let closed = async {
        loop {
            match next_event(&mut socket, Duration::from_secs(5)).await {
                Ok(None) => return true,
                Ok(Some(_)) => continue,
                Err(()) => return false,
            }
        }
    };
    assert!(closed.await, "the open socket closes when its link is revoked");
    let (s, _) = alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}/share"), None).await;
    assert_eq!(s, 404, "nothing left to revoke");

    // Sharing again makes a new link and ends the one before it.
    let (_, first) = alice.post(&format!("/api/v1/conversations/{conv}/share"), json!({})).await;
    let (_, second) = alice.post(&format!("/api/v1/conversations/{conv}/share"), json!({})).await;
    let (s, _) = anonymous(&h.http, &format!("/api/v1/shared/{}", first["token"].as_str().unwrap())).await;
    assert_eq!(s, 404, "replaced");
    let (s, _) = anonymous(&h.http, &format!("/api/v1/shared/{}", second["token"].as_str().unwrap())).await;
    assert_eq!(s, 200);

    // A deleted conversation takes its link with it.
    let (s, _) = alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    assert_eq!(s, 202);
    let gone = format!("/api/v1/shared/{}", second["token"].as_str().unwrap());
    let mut status = 200;
    for _ in 0..100 {
        status = anonymous(&h.http, &gone).await.0;
        if status == 404 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 404, "the link of a deleted conversation opens nothing");
}
