#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! What the gateway does for the web workspace: sign-in (an API key exchanged for an HttpOnly,
//! SameSite=Strict session cookie that the API and the WebSocket accept, whose changes need a
//! header another site cannot send, and that signing out ends on the server), and serving the
//! built app with its cache rules and browser-side routes.

use futures::StreamExt;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const ALICE: &str = "alice-secret-key";

async fn call(h: &Halyard, method: reqwest::Method, path: &str, cookie: Option<&str>, csrf: bool, body: Option<Value>) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, format!("{}{path}", h.http));
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    if csrf {
        req = req.header("x-halyard-csrf", "1");
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_session_cookie_works_like_the_key_and_ends_on_sign_out() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("done")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let http = reqwest::Client::new();

    let resp = http.post(format!("{}/api/v1/session", h.http)).json(&json!({"api_key": "wrong"})).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = http.post(format!("{}/api/v1/session", h.http)).json(&json!({"api_key": ALICE})).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let set = resp.headers().get("set-cookie").unwrap().to_str().unwrap().to_owned();
    let body: Value = resp.json().await.unwrap();
    assert_eq!((body["user"].as_str(), body["csrf_header"].as_str()), (Some("alice"), Some("x-halyard-csrf")));
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/"), "{set}");
    assert!(!set.contains(ALICE), "the key itself is not the cookie");
    let cookie = set.split(';').next().unwrap().to_owned();

    // The browser names this origin; that is accepted.
    let resp = http.get(format!("{}/api/v1/me", h.http)).header("cookie", &cookie).header("origin", &h.http).send().await.unwrap();
    assert_eq!(resp.status(), 200);

    // Reads with the cookie; writes need the header too.
    let (s, me) = call(&h, reqwest::Method::GET, "/api/v1/me", Some(&cookie), false, None).await;
    assert_eq!((s, me["user"].as_str()), (200, Some("alice")), "{me}");
    let start = json!({"message": "hi", "title": "from the browser"});
    let (s, err) = call(&h, reqwest::Method::POST, "/api/v1/conversations", Some(&cookie), false, Some(start.clone())).await;
    assert_eq!((s, err["error"]["code"].as_str()), (403, Some("csrf_header_missing")), "{err}");
    let (s, task) = call(&h, reqwest::Method::POST, "/api/v1/conversations", Some(&cookie), true, Some(start)).await;
    assert_eq!(s, 202, "{task}");
    let conv = task["conversation_id"].as_str().unwrap().to_owned();
    h.api(ALICE).wait_conversation(&conv, "finish", |c| c["execution_status"] == "finished").await;

    // The WebSocket takes the cookie as a browser sends it.
    let ws = format!("{}/api/v1/conversations/{conv}/events/ws?after_seq=0", h.http.replacen("http", "ws", 1));
    let mut req = ws.clone().into_client_request().unwrap();
    req.headers_mut().insert("cookie", cookie.parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(req).await.expect("WebSocket with the cookie");
    let first = socket.next().await.unwrap().unwrap();
    assert!(first.to_text().unwrap().contains("conversation_started"), "{first:?}");
    // ...but not from a page of another origin, even of the same host (a served app's port).
    let mut req = ws.clone().into_client_request().unwrap();
    req.headers_mut().insert("cookie", cookie.parse().unwrap());
    req.headers_mut().insert("origin", "http://127.0.0.1:1".parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 403),
        other => panic!("a page of another origin opened the event stream: {:?}", other.map(|_| ())),
    }

    // A session cannot open another; signing out ends it everywhere at once.
    let token = cookie.split_once('=').unwrap().1;
    let resp = http.post(format!("{}/api/v1/session", h.http)).json(&json!({"api_key": token})).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let (s, _) = call(&h, reqwest::Method::DELETE, "/api/v1/session", Some(&cookie), false, None).await;
    assert_eq!(s, 403, "signing out needs the header too");
    let resp =
        http.delete(format!("{}/api/v1/session", h.http)).header("cookie", &cookie).header("x-halyard-csrf", "1").send().await.unwrap();
    assert_eq!(resp.status(), 204);
    assert!(resp.headers().get("set-cookie").unwrap().to_str().unwrap().contains("Max-Age=0"));
    let (s, me) = call(&h, reqwest::Method::GET, "/api/v1/me", Some(&cookie), false, None).await;
    assert_eq!((s, me["error"]["code"].as_str()), (401, Some("unauthorized")), "{me}");
}

#[tokio::test]
async fn the_built_app_is_served_with_its_routes_and_cache_rules() {
    init();
    let llm = ScriptedLlm::start().await;
    let http = reqwest::Client::new();
    let get = |h: &Halyard, path: &str| http.get(format!("{}{path}", h.http)).send();

    // No build: `/` says how to make one; the API is unaffected.
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let resp = get(&h, "/").await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("npm --prefix web ci"));
    drop(h);

    let dist = tempfile::tempdir().unwrap();
    std::fs::create_dir(dist.path().join("assets")).unwrap();
    std::fs::write(dist.path().join("index.html"), "<!doctype html><div id=app></div>").unwrap();
    std::fs::write(dist.path().join("assets/app-3f2a.js"), "console.log(1)").unwrap();
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_WEB_DIR", dist.path().to_str().unwrap()));
    for path in ["/", "/conversations/0190-anything"] {
        let resp = get(&h, path).await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.headers()["cache-control"], "no-cache");
        assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
        assert!(resp.text().await.unwrap().contains("id=app"), "{path} is the app");
    }
    let resp = get(&h, "/assets/app-3f2a.js").await.unwrap();
    assert_eq!(resp.headers()["cache-control"], "public, max-age=31536000, immutable");
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
    let resp = get(&h, "/assets/../../etc/passwd").await.unwrap();
    assert!(!resp.text().await.unwrap().contains("root:"), "no way out of the build");
    let resp = get(&h, "/api/v1/no-such-route").await.unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.json::<Value>().await.unwrap()["error"]["code"], "not_found");
    assert_eq!(get(&h, "/api/v1/conversations").await.unwrap().status(), 401);
}
