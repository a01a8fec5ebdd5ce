#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The browser side of security, as an attacker tries it: a session token stolen and replayed
//! as a bearer token, a second session cookie tossed in by another page of the host, a session
//! that should have ended with its key, keys in URLs, sensitive changes from a forgotten
//! session, slow and idle connections, and the headers every answer carries. (The served-app
//! side is in `web.rs` and, in Chromium, `browser.rs`.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use futures::StreamExt;
use halyard_tests::{Halyard, HalyardOptions, ScriptedLlm, init};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const ROOT: &str = "root-admin-key";
const ALICE: &str = "alice-secret-key";

fn start(llm: &ScriptedLlm, extra: &[(&str, &str)]) -> Halyard {
    let mut o = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root");
    o.api_keys = format!("root:{ROOT},alice:{ALICE}");
    for (k, v) in extra {
        o = o.set(k, v);
    }
    Halyard::start(o)
}

/// Signs in with `key` (optionally as if through an HTTPS proxy): the `name=value` of the
/// cookie it sets, and the whole `Set-Cookie`.
async fn sign_in(h: &Halyard, key: &str, https: bool) -> (String, String) {
    let mut req = reqwest::Client::new().post(format!("{}/api/v1/session", h.http)).json(&json!({"api_key": key}));
    if https {
        req = req.header("x-forwarded-proto", "https");
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    (set.split(';').next().unwrap().to_owned(), set)
}

/// A request with `cookie` (and the CSRF header for writes).
async fn with_cookie(h: &Halyard, method: reqwest::Method, path: &str, cookie: &str, body: Option<Value>) -> (u16, Value) {
    let write = method != reqwest::Method::GET;
    let mut req = reqwest::Client::new().request(method, format!("{}{path}", h.http)).header("cookie", cookie);
    if write {
        req = req.header("x-halyard-csrf", "1");
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_session_is_a_cookie_bound_to_the_key_it_was_opened_with() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = start(&llm, &[]);
    let root = h.api(ROOT);

    // A stolen session token is worth nothing outside its cookie: not as a bearer token, not
    // in a URL.
    let (cookie, _) = sign_in(&h, ALICE, false).await;
    let token = cookie.split_once('=').unwrap().1.to_owned();
    assert_eq!(with_cookie(&h, reqwest::Method::GET, "/api/v1/me", &cookie, None).await.0, 200);
    let (s, e) = h.api(&token).get("/api/v1/me").await;
    assert_eq!((s, e["error"]["code"].as_str()), (401, Some("unauthorized")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("cookie"), "{e}");
    let (s, _) = h.api("nobody").get(&format!("/api/v1/me?access_token={token}")).await;
    assert_eq!(s, 401, "access_token is for WebSockets only");

    // A second session cookie (planted by another page of this host) is refused, not guessed.
    let (other, _) = sign_in(&h, ROOT, false).await;
    let (s, e) = with_cookie(&h, reqwest::Method::GET, "/api/v1/me", &format!("{other}; {cookie}"), None).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("ambiguous_session")), "{e}");
    let (s, _) = with_cookie(
        &h,
        reqwest::Method::PUT,
        "/api/v1/secrets/GH_TOKEN",
        &format!("{other}; {cookie}"),
        Some(json!({"value": "ghp_1234567890"})),
    )
    .await;
    assert_eq!(s, 400, "a write with two sessions landed in one of them");

    // Under HTTPS the cookie is __Host- (Secure, host-only); a plain one beside it is ignored.
    let (secure, set) = sign_in(&h, ALICE, true).await;
    assert!(
        secure.starts_with("__Host-halyard_session=") && set.contains("Secure") && set.contains("Path=/") && !set.contains("Domain"),
        "{set}"
    );
    let resp = reqwest::Client::new()
        .get(format!("{}/api/v1/me", h.http))
        .header("x-forwarded-proto", "https")
        .header("cookie", format!("{other}; {secure}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap()["user"], "alice", "the tossed plain cookie won");

    // A session opened with an issued key ends the moment the key is revoked, and never
    // outlives the key's expiry.
    let (s, key) = root.post("/api/v1/admin/users/alice/keys", json!({"name": "laptop", "expires_in_secs": 600})).await;
    assert_eq!(s, 201, "{key}");
    let (laptop, set) = sign_in(&h, key["key"].as_str().unwrap(), false).await;
    let max_age: i64 = set.split("Max-Age=").nth(1).unwrap().split(';').next().unwrap().parse().unwrap();
    assert!(max_age <= 600, "the session outlives its key: {set}");
    assert_eq!(with_cookie(&h, reqwest::Method::GET, "/api/v1/me", &laptop, None).await.0, 200);
    let (s, _) = root.call(reqwest::Method::DELETE, &format!("/api/v1/admin/keys/{}", key["id"].as_str().unwrap()), None).await;
    assert_eq!(s, 200);
    let (s, e) = with_cookie(&h, reqwest::Method::GET, "/api/v1/me", &laptop, None).await;
    assert_eq!(s, 401, "the revoked key's session still works: {e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("sign in again"), "{e}");
    // A disabled user's sessions end too.
    let (s, _) = root.call(reqwest::Method::PATCH, "/api/v1/admin/users/alice", Some(json!({"disabled": true}))).await;
    assert_eq!(s, 200);
    assert_eq!(with_cookie(&h, reqwest::Method::GET, "/api/v1/me", &cookie, None).await.0, 401);
}

#[tokio::test]
async fn sensitive_changes_from_an_old_session_need_the_key_again() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = start(&llm, &[("HALYARD_STEP_UP_SECS", "1")]);
    let (cookie, _) = sign_in(&h, ROOT, false).await;
    // Fresh: allowed.
    let (s, e) =
        with_cookie(&h, reqwest::Method::PUT, "/api/v1/secrets/API_TOKEN", &cookie, Some(json!({"value": "tok-1234567890"}))).await;
    assert_eq!(s, 201, "{e}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Older than the window: secrets, keys and roles wait for the key; reads and other writes
    // do not.
    let secret = Some(json!({"value": "tok-0987654321"}));
    let (s, e) = with_cookie(&h, reqwest::Method::PUT, "/api/v1/secrets/API_TOKEN", &cookie, secret.clone()).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("step_up_required")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("/api/v1/session/step-up"), "{e}");
    let (s, e) = with_cookie(&h, reqwest::Method::POST, "/api/v1/admin/users/alice/keys", &cookie, Some(json!({}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("step_up_required")), "{e}");
    let (s, e) = with_cookie(&h, reqwest::Method::PATCH, "/api/v1/admin/users/alice", &cookie, Some(json!({"admin": true}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("step_up_required")), "{e}");
    assert_eq!(with_cookie(&h, reqwest::Method::GET, "/api/v1/secrets", &cookie, None).await.0, 200);
    // Another user's key does not vouch for this session; the session's own user's does.
    let (s, _) = with_cookie(&h, reqwest::Method::POST, "/api/v1/session/step-up", &cookie, Some(json!({"api_key": ALICE}))).await;
    assert_eq!(s, 403);
    let (s, e) = with_cookie(&h, reqwest::Method::POST, "/api/v1/session/step-up", &cookie, Some(json!({"api_key": ROOT}))).await;
    assert_eq!(s, 200, "{e}");
    let (s, e) = with_cookie(&h, reqwest::Method::PUT, "/api/v1/secrets/API_TOKEN", &cookie, secret).await;
    assert_eq!(s, 200, "{e}");
    // An API key itself always may.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (s, _) = h.api(ROOT).call(reqwest::Method::PUT, "/api/v1/secrets/API_TOKEN", Some(json!({"value": "tok-1111111111"}))).await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn websockets_take_a_single_use_ticket_never_a_key_in_the_url() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = start(&llm, &[]);
    let alice = h.api(ALICE);
    llm.push([halyard_tests::Reply::finish("hello")]);
    let (conv, _) = alice.start_ready(json!({"message": "hi"})).await;
    let ws = |token: &str| {
        format!("{}/api/v1/conversations/{conv}/events/ws?after_seq=0&access_token={token}", h.http.replacen("http", "ws", 1))
    };
    let refused = |r: Result<_, tokio_tungstenite::tungstenite::Error>| match r {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Ok(_) => 101,
        Err(e) => panic!("{e}"),
    };
    // The key itself, in the URL: refused.
    assert_eq!(refused(tokio_tungstenite::connect_async(ws(ALICE)).await.map(|_| ())), 401);
    // A ticket: once.
    let (s, t) = alice.post("/api/v1/ws-tickets", json!({})).await;
    assert_eq!(s, 201, "{t}");
    let ticket = t["ticket"].as_str().unwrap().to_owned();
    assert!(!ticket.contains(ALICE));
    let (mut socket, _) = tokio_tungstenite::connect_async(ws(&ticket)).await.expect("a ticket opens the stream");
    let first: Value = serde_json::from_str(&socket.next().await.unwrap().unwrap().into_text().unwrap()).unwrap();
    assert_eq!(first["seq"], 1);
    assert_eq!(refused(tokio_tungstenite::connect_async(ws(&ticket)).await.map(|_| ())), 401, "a ticket opened a second stream");
    // And only on WebSocket routes.
    let (s, t) = alice.post("/api/v1/ws-tickets", json!({})).await;
    assert_eq!(s, 201);
    let (s, _) = h.api("nobody").get(&format!("/api/v1/conversations?access_token={}", t["ticket"].as_str().unwrap())).await;
    assert_eq!(s, 401);
    // The header still works for programs that can send one.
    let mut req =
        format!("{}/api/v1/conversations/{conv}/events/ws?after_seq=0", h.http.replacen("http", "ws", 1)).into_client_request().unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {ALICE}").parse().unwrap());
    assert!(tokio_tungstenite::connect_async(req).await.is_ok());
}

/// A connection from `from` that sends the start of a request and then nothing.
async fn half_request(gateway: SocketAddr, from: &str) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    let stream = socket.connect(gateway).await?.into_std()?;
    stream.set_nonblocking(false)?;
    let mut stream = stream;
    stream.write_all(b"GET /api/v1/me HTTP/1.1\r\nHost: x\r\nX-Slow: ")?;
    Ok(stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed_and_cannot_crowd_out_others() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = start(&llm, &[("HALYARD_HTTP_HEADER_TIMEOUT_SECS", "2"), ("HALYARD_HTTP_MAX_CONNECTIONS_PER_CLIENT", "50")]);
    let gateway: SocketAddr = h.http.trim_start_matches("http://").parse().unwrap();

    // Partial headers: closed once the header time is up.
    let mut slow = half_request(gateway, "127.0.0.1").await.unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let began = Instant::now();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    let held = began.elapsed();
    assert!(held < Duration::from_secs(10), "a connection with partial headers was held {held:?}");
    assert!(held >= Duration::from_secs(1), "closed before the header time: {held:?}");

    // A kept-alive connection that goes quiet is closed too.
    let mut idle = TcpStream::connect(gateway).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let began = Instant::now();
    let mut answer = Vec::new();
    let _ = idle.read_to_end(&mut answer);
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    assert!(began.elapsed() < Duration::from_secs(10), "an idle kept-alive connection was held");

    // Three hundred slow connections from one address (each sending a header byte now and
    // then): past its fifty they are closed at once, and everyone else is answered meanwhile.
    let mut crowd = Vec::new();
    for _ in 0..300 {
        if let Ok(s) = half_request(gateway, "127.0.0.5").await {
            crowd.push(s);
        }
    }
    for s in crowd.iter_mut() {
        let _ = s.write_all(b"a");
    }
    let (s, me) = h.api(ALICE).get("/api/v1/me").await;
    assert_eq!((s, me["user"].as_str()), (200, Some("alice")), "{me}");
    let open = crowd
        .iter_mut()
        .map(|s| {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let mut b = [0u8; 1];
            // Still open: nothing to read yet. Closed: end of file, or reset.
            matches!(s.read(&mut b), Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
        })
        .filter(|open| *open)
        .count();
    assert!(open <= 50, "{open} connections from one address are open");
}

#[tokio::test]
async fn every_answer_says_nosniff_and_the_api_is_never_cached() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = start(&llm, &[]);
    let http = reqwest::Client::new();
    let check = |resp: &reqwest::Response, api: bool| {
        let headers = resp.headers();
        assert_eq!(headers.get("x-content-type-options").map(|v| v.to_str().unwrap()), Some("nosniff"), "{}", resp.url());
        if api {
            assert_eq!(headers.get("cache-control").map(|v| v.to_str().unwrap()), Some("no-store"), "{}", resp.url());
        }
    };
    // A key shown once, an error, a page.
    let resp = http.post(format!("{}/api/v1/admin/users/alice/keys", h.http)).bearer_auth(ROOT).json(&json!({})).send().await.unwrap();
    assert_eq!(resp.status(), 201);
    check(&resp, true);
    check(&http.get(format!("{}/api/v1/me", h.http)).send().await.unwrap(), true);
    check(&http.get(format!("{}/api/v1/openapi.json", h.http)).send().await.unwrap(), true);
    check(&http.get(format!("{}/", h.http)).send().await.unwrap(), false);

    // Titles and labels: no control characters, no bidirectional overrides.
    let alice = h.api(ALICE);
    for bad in ["a\u{0}b", "invoice\u{202E}fdp.exe", "two\nlines"] {
        let (s, e) = alice.post("/api/v1/conversations", json!({"message": "hi", "title": bad})).await;
        assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{bad:?}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("title"), "{e}");
    }
    let (s, e) = h.api(ROOT).post("/api/v1/admin/users/alice/keys", json!({"name": "lap\u{2066}top"})).await;
    assert_eq!(s, 400, "{e}");
}
