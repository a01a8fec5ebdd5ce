#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The executor's browser on a real Chromium, against pages this test serves: navigate, read the
//! indexed elements, type, click, read the next page as Markdown, go back, tabs; `file://`
//! refused; and the browser gone after its idle time.

mod common;

use std::time::Duration;

use axum::extract::Query;
use axum::response::Html;
use axum::routing::get;
use halyard_executor::ExecutorConfig;
use serde_json::{Value, json};

const KEY: &str = "browser-test-key-0123456789abcdef0123456789";

async fn site() -> String {
    let app = axum::Router::new()
        .route(
            "/",
            get(|| async {
                Html(
                    "<html><head><title>Sign up</title></head><body><h1>Sign up</h1>\
                     <form action=\"/next\" method=\"get\"><input name=\"who\" placeholder=\"Your name\">\
                     <button type=\"submit\">Send</button></form>\
                     <p>Read <a href=\"/other\" target=\"_blank\">the other page</a>.</p>\
                     <div style=\"display:none\"><button>Hidden</button></div></body></html>",
                )
            }),
        )
        .route(
            "/next",
            get(|Query(q): Query<std::collections::HashMap<String, String>>| async move {
                let who = q.get("who").cloned().unwrap_or_default();
                Html(format!(
                    "<html><head><title>Welcome</title></head><body><h2>Hello {who}</h2><ul><li>one</li><li>two</li></ul>\
                     <a href=\"/\">Start again</a></body></html>"
                ))
            }),
        )
        .route("/other", get(|| async { Html("<title>Other</title><p>The <b>other</b> page.</p>") }))
        .route("/long", get(|| async { Html(format!("<title>Long</title><p>{}</p>", "word ".repeat(10_000))) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn executor(workspace: &std::path::Path, idle: Duration) -> String {
    common::serve(ExecutorConfig { browser_idle: idle, ..common::config(workspace, KEY) }).await
}

struct Driver {
    http: reqwest::Client,
    base: String,
}

impl Driver {
    async fn act(&self, tool: &str, arguments: Value) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}/browser", self.base))
            .header(halyard_protocol::executor::SESSION_KEY_HEADER, KEY)
            .json(&json!({"tool": tool, "arguments": arguments}))
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
    }

    async fn ok(&self, tool: &str, arguments: Value) -> Value {
        let (status, body) = self.act(tool, arguments).await;
        assert_eq!(status, 200, "{tool}: {body}");
        body
    }

    async fn running(&self) -> bool {
        let h: Value = self.http.get(format!("{}/health", self.base)).send().await.unwrap().json().await.unwrap();
        h["browser"] == true
    }
}

/// The line of `state` that lists the element whose text is `text`, and its index.
fn index_of(state: &str, text: &str) -> i64 {
    let line = state.lines().find(|l| l.contains(text)).unwrap_or_else(|| panic!("no {text:?} in {state}"));
    line[1..line.find(']').unwrap()].parse().unwrap()
}

#[tokio::test]
async fn the_agent_browses_a_form_and_the_page_it_leads_to() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let site = site().await;
    let b = Driver { http: reqwest::Client::new(), base: executor(dir.path(), Duration::from_secs(600)).await };
    assert!(!b.running().await, "no browser before the first browser call");

    let went = b.ok("browser_navigate", json!({"url": format!("{site}/")})).await;
    assert!(went["output"].as_str().unwrap().starts_with(&format!("Navigated to {site}/ (Sign up)")), "{went}");
    assert_eq!(went["title"], "Sign up");
    let png = went["screenshot_png"].as_str().expect("a screenshot");
    assert!(png.starts_with("iVBORw0KGgo"), "a PNG in base64");
    assert!(b.running().await);

    let state = b.ok("browser_get_state", json!({"include_screenshot": false})).await;
    let state = state["output"].as_str().unwrap();
    assert!(state.contains(&format!("URL: {site}/\nTitle: Sign up\n")), "{state}");
    assert!(state.contains("<input name=\"who\" placeholder=\"Your name\"></input>"), "{state}");
    assert!(!state.contains("Hidden"), "what is not shown is not listed: {state}");
    let field = index_of(state, "Your name");
    let send = index_of(state, ">Send</button>");

    let typed = b.ok("browser_type", json!({"index": field, "text": "Ada Lovelace"})).await;
    assert!(typed["output"].as_str().unwrap().starts_with("Typed \"Ada Lovelace\" into element"), "{typed}");
    let (status, body) = b.act("browser_type", json!({"index": send, "text": "x"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("tool_error")), "a button is no text field: {body}");
    let clicked = b.ok("browser_click", json!({"index": send})).await;
    assert_eq!(clicked["url"], format!("{site}/next?who=Ada+Lovelace"), "{clicked}");
    assert_eq!(clicked["title"], "Welcome");

    let content = b.ok("browser_get_content", json!({"extract_links": true})).await;
    let md = content["output"].as_str().unwrap();
    assert!(md.contains("## Hello Ada Lovelace") && md.contains("- one\n- two"), "{md}");
    assert!(md.contains(&format!("[Start again]({site}/)")), "links kept: {md}");
    let plain = b.ok("browser_get_content", json!({"extract_links": false})).await;
    assert!(plain["output"].as_str().unwrap().contains("Start again") && !plain["output"].as_str().unwrap().contains("]("));

    let back = b.ok("browser_go_back", json!({})).await;
    assert_eq!(back["url"], format!("{site}/"), "{back}");

    // A target=_blank link opens a tab, where the agent goes on.
    let state = b.ok("browser_get_state", json!({})).await;
    let other = index_of(state["output"].as_str().unwrap(), "the other page");
    let opened = b.ok("browser_click", json!({"index": other})).await;
    assert_eq!(opened["url"], format!("{site}/other"), "{opened}");
    let tabs = b.ok("browser_list_tabs", json!({})).await;
    let tabs = tabs["output"].as_str().unwrap();
    assert!(tabs.starts_with("2 tabs open:") && tabs.contains("/other (Other) (current)"), "{tabs}");
    let first = tabs.lines().find(|l| !l.contains("(current)") && l.starts_with('[')).unwrap();
    let first_id = &first[1..5];
    let switched = b.ok("browser_switch_tab", json!({"tab_id": first_id})).await;
    assert_eq!(switched["url"], format!("{site}/"));
    let closed = b.ok("browser_close_tab", json!({})).await;
    assert_eq!(closed["url"], format!("{site}/other"), "the other tab is current after closing: {closed}");

    // Long pages come in chunks.
    b.ok("browser_navigate", json!({"url": format!("{site}/long"), "new_tab": true})).await;
    let first = b.ok("browser_get_content", json!({})).await;
    let first = first["output"].as_str().unwrap();
    assert!(first.contains("characters 0-30000 of 49999") && first.contains("start_from_char=30000"), "{}", &first[..200]);
    let rest = b.ok("browser_get_content", json!({"start_from_char": 30000})).await;
    assert!(rest["output"].as_str().unwrap().contains("characters 30000-49999 of 49999"));

    for refused in ["file:///etc/passwd", "chrome://version", "data:text/html,<p>hi"] {
        let (status, body) = b.act("browser_navigate", json!({"url": refused})).await;
        assert_eq!(status, 400, "{refused}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("Only http and https"), "{body}");
    }
    let (status, body) = b.act("browser_click", json!({"index": 99})).await;
    assert!(status == 400 && body["error"]["message"].as_str().unwrap().contains("browser_get_state"), "{body}");
    let (status, _) = b.act("browser_fly", json!({})).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn an_unused_browser_stops_and_the_next_call_starts_it_again() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let site = site().await;
    let b = Driver { http: reqwest::Client::new(), base: executor(dir.path(), Duration::from_secs(1)).await };
    b.ok("browser_navigate", json!({"url": format!("{site}/other")})).await;
    assert!(b.running().await);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while b.running().await {
        assert!(std::time::Instant::now() < deadline, "the browser still runs 15 s after its 1 s idle time");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let again = b.ok("browser_get_state", json!({})).await;
    assert!(again["output"].as_str().unwrap().starts_with("URL: about:blank"), "a new browser: {again}");
}
