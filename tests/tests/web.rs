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
    assert!(resp.text().await.unwrap().contains("bash infra/build-web.sh"));
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
        // The page may load and call nothing but its own origin.
        let csp = resp.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'self'") && csp.contains("img-src 'self' data:"), "{csp}");
        // It may frame only the apps proxy's hosts (where VS Code is); nothing else is a wildcard.
        let apps_port = h.apps.rsplit(':').next().unwrap();
        let (framed, rest): (Vec<&str>, Vec<&str>) = csp.split(';').map(str::trim).partition(|d| d.starts_with("frame-src"));
        assert_eq!(framed, [format!("frame-src http://*.localhost:{apps_port}")], "{csp}");
        assert!(!rest.iter().any(|d| d.contains('*')), "{csp}");
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

/// The app the agent serves in the test below: plain HTTP answers with the cookies it was sent;
/// a WebSocket upgrade is accepted and each text frame comes back as `echo: <text>`.
const APP: &str = r#"import base64, hashlib, os, socket, threading
def serve(c):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(4096)
        if not chunk:
            return
        data += chunk
    head = data.split(b"\r\n\r\n")[0].decode()
    headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in head.split("\r\n")[1:] if ":" in l}
    if headers.get("upgrade", "").lower() == "websocket":
        accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % accept).encode())
        while True:
            h = c.recv(2)
            if len(h) < 2:
                return
            n = h[1] & 127
            mask = c.recv(4)
            payload = bytearray(c.recv(n))
            text = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            reply = b"echo: " + text
            c.sendall(bytes([0x81, len(reply)]) + reply)
    else:
        body = ("cookies=%s host=%s authorization=%s" % (headers.get("cookie", ""), headers.get("host", ""), headers.get("authorization", ""))).encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["WORKER_1_PORT"])))
s.listen(16)
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"#;

#[tokio::test]
async fn a_served_app_is_reached_on_its_own_origin_with_a_grant_and_speaks_websocket() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let bob = h.api("bob-secret-key");
    let command = format!(
        "cat > app.py <<'PY'\n{APP}PY\n(setsid nohup python3 app.py >/dev/null 2>&1 &) ; sleep 0.5; echo started on $WORKER_1_PORT"
    );
    llm.push([Reply::tool("terminal", json!({"command": command, "security_risk": "low"})), Reply::finish("serving")]);
    let (conv, _) = alice.start_ready(json!({"message": "serve an app"})).await;
    alice.wait_conversation(&conv, "the run to finish", |c| c["execution_status"] == "finished").await;

    // A link, for the owner only, for the apps the sandbox has (never its executor).
    let (status, link) = alice.post(&format!("/api/v1/conversations/{conv}/apps/WORKER_1"), json!({})).await;
    assert_eq!(status, 200, "{link}");
    let (status, _) = bob.post(&format!("/api/v1/conversations/{conv}/apps/WORKER_1"), json!({})).await;
    assert_eq!(status, 404);
    let (status, e) = alice.post(&format!("/api/v1/conversations/{conv}/apps/AGENT_SERVER"), json!({})).await;
    assert_eq!((status, e["error"]["code"].as_str()), (404, Some("not_found")));

    // The link names the app's own origin: `<sandbox>-worker-1.localhost` on the apps port.
    let url = reqwest::Url::parse(link["url"].as_str().unwrap()).unwrap();
    let host = url.host_str().unwrap().to_owned();
    assert!(host.ends_with("-worker-1.localhost"), "{url}");
    let apps = format!("http://{}", h.apps);
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let get = |path: &str, cookie: Option<&str>| {
        let mut req = no_redirects.get(format!("{apps}{path}")).header("host", &host);
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        req.send()
    };

    // Without the grant: closed. With it: a cookie for this origin only, then the app.
    assert_eq!(get("/", None).await.unwrap().status(), 401);
    let forged = url.query().unwrap().replace("grant=", "grant=x");
    assert_eq!(get(&format!("/_halyard/open?{forged}"), None).await.unwrap().status(), 403);
    let opened = get(&format!("{}?{}", url.path(), url.query().unwrap()), None).await.unwrap();
    assert_eq!(opened.status(), 303);
    // A link opens its app once: replayed (from a history, a log), it opens nothing.
    assert_eq!(get(&format!("{}?{}", url.path(), url.query().unwrap()), None).await.unwrap().status(), 403);
    let set_cookie = opened.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set_cookie.contains("HttpOnly") && !set_cookie.contains("Domain"), "{set_cookie}");
    let app_cookie = set_cookie.split(';').next().unwrap().to_owned();
    // The app gets its own cookies, never Halyard's (neither the proxy's nor a session, nor
    // the user's key); and its public host, never the address it listens on.
    let page = no_redirects
        .get(format!("{apps}/"))
        .header("host", &host)
        .header("cookie", format!("{app_cookie}; theme=dark; halyard_session=stolen; __Host-halyard_session=stolen"))
        .header("authorization", format!("Bearer {ALICE}"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let text = page.text().await.unwrap();
    assert_eq!(text, format!("cookies=theme=dark host={host} authorization="));
    // The cookie is for this app: on another app's host it opens nothing.
    let other = host.replace("-worker-1.", "-worker-2.");
    let resp = no_redirects.get(format!("{apps}/")).header("host", &other).header("cookie", &app_cookie).send().await.unwrap();
    assert_eq!(resp.status(), 401);

    // A WebSocket through the proxy, both ways.
    let mut req = format!("ws://{}/socket", h.apps).into_client_request().unwrap();
    req.headers_mut().insert("host", host.parse().unwrap());
    req.headers_mut().insert("cookie", app_cookie.parse().unwrap());
    let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.expect("upgrade through the proxy");
    assert_eq!(resp.status(), 101);
    use futures::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::text("ping")).await.unwrap();
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(answer.into_text().unwrap().as_str(), "echo: ping");

    // An app opened from a session closes when the session ends.
    let http = reqwest::Client::new();
    let resp = http.post(format!("{}/api/v1/session", h.http)).json(&json!({"api_key": ALICE})).send().await.unwrap();
    let session = resp.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let (s, link) =
        call(&h, reqwest::Method::POST, &format!("/api/v1/conversations/{conv}/apps/WORKER_1"), Some(&session), true, Some(json!({})))
            .await;
    assert_eq!(s, 200, "{link}");
    let url = reqwest::Url::parse(link["url"].as_str().unwrap()).unwrap();
    let opened = get(&format!("{}?{}", url.path(), url.query().unwrap()), None).await.unwrap();
    let session_app = opened.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    assert_eq!(get("/", Some(&session_app)).await.unwrap().status(), 200);
    let (s, _) = call(&h, reqwest::Method::DELETE, "/api/v1/session", Some(&session), true, None).await;
    assert_eq!(s, 204);
    assert_eq!(get("/", Some(&session_app)).await.unwrap().status(), 401, "the app outlived the session");

    // A paused sandbox closes its apps.
    let (status, _) = alice.post(&format!("/api/v1/conversations/{conv}/pause"), json!({})).await;
    assert_eq!(status, 202);
    alice.wait_conversation(&conv, "the sandbox to pause", |c| c["sandbox_status"] == "PAUSED").await;
    assert_eq!(get("/", Some(&app_cookie)).await.unwrap().status(), 409);
}

#[tokio::test]
async fn sessions_do_not_pile_up_past_the_limit_and_ended_ones_are_forgotten() {
    init();
    let llm = ScriptedLlm::start().await;
    let mut opts = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root");
    opts.api_keys = format!("alice:{ALICE},root:root-secret-key");
    let h = Halyard::start(opts);
    let http = reqwest::Client::new();
    let root = h.api("root-secret-key");
    let sign_in = || async {
        let resp = http.post(format!("{}/api/v1/session", h.http)).json(&json!({"api_key": ALICE})).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        resp.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned()
    };
    let sessions = || async {
        let (s, keys) = root.get("/api/v1/admin/users/alice/keys").await;
        assert_eq!(s, 200, "{keys}");
        keys["items"].as_array().unwrap().iter().filter(|k| k["session"] == true).count()
    };

    // Twenty-two sign-ins: the two oldest sessions end, twenty remain.
    let mut cookies = Vec::new();
    for _ in 0..22 {
        cookies.push(sign_in().await);
        // Age is by creation time in milliseconds; two sign-ins in one millisecond are equally old.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert_eq!(sessions().await, 20);
    for (i, cookie) in cookies.iter().enumerate() {
        let (s, _) = call(&h, reqwest::Method::GET, "/api/v1/me", Some(cookie), false, None).await;
        assert_eq!(s, if i < 2 { 401 } else { 200 }, "session {i}");
    }

    // A signed-out session is forgotten at the next sign-in, not kept as a revoked record.
    let last = cookies.last().unwrap();
    let (s, _) = call(&h, reqwest::Method::DELETE, "/api/v1/session", Some(last), true, None).await;
    assert_eq!(s, 204);
    assert_eq!(sessions().await, 20, "the ended one is still listed until the next sign-in");
    let newest = sign_in().await;
    assert_eq!(sessions().await, 20);
    let (s, _) = call(&h, reqwest::Method::GET, "/api/v1/me", Some(&newest), false, None).await;
    assert_eq!(s, 200);
    let (s, _) = call(&h, reqwest::Method::GET, "/api/v1/me", Some(last), false, None).await;
    assert_eq!(s, 401);
}
