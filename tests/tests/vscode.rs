#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The user's VS Code, as a user (and an attacker) checks it: the link is the owner's alone (not
//! another user's, not a read-only key's), lives on the apps proxy's origin (never the API's),
//! opens once; the proxy trades it for a partitioned, HttpOnly cookie of that origin, serves
//! code-server's workbench on the workspace, lets only the workspace's origin frame it, refuses
//! a WebSocket from another site, and passes one from its own. In a process sandbox and in a
//! container. (The workbench driven in Chromium, a file saved there showing in the Changes tab:
//! web/tests/workspace.spec.ts, test 19.)

use futures::StreamExt;
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm, finished, init};
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

/// What a user (and an attacker) checks of the conversation's VS Code.
async fn check_vscode(h: &Halyard, alice: &Api, conv: &str) {
    let path = format!("/api/v1/conversations/{conv}/vscode");
    let (status, link) = alice.get(&path).await;
    assert_eq!(status, 200, "{link}");
    let (status, _) = h.api(BOB).get(&path).await;
    assert_eq!(status, 404, "another user's conversation is not there");
    let (_, ro) = alice.post("/api/v1/me/keys", json!({"scope": "read_only", "name": "reader"})).await;
    let (status, e) = h.api(ro["key"].as_str().unwrap()).get(&path).await;
    assert_eq!((status, e["error"]["code"].as_str()), (403, Some("read_only_key")), "{e}");

    // On the apps proxy, an origin of its own: never the API's.
    let url = reqwest::Url::parse(link["url"].as_str().unwrap()).unwrap();
    let host = url.host_str().unwrap().to_owned();
    assert!(host.ends_with("-vscode.localhost"), "{url}");
    let apps_port: u16 = h.apps.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(url.port(), Some(apps_port), "{url}");
    let public = format!("{host}:{apps_port}");
    let apps = format!("http://{}", h.apps);
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let get = |path: &str, cookie: Option<&str>| {
        let mut req = no_redirects.get(format!("{apps}{path}")).header("host", &public);
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        req.timeout(std::time::Duration::from_secs(60)).send()
    };
    assert_eq!(get("/", None).await.unwrap().status(), 401, "closed without the ticket");

    let open = format!("{}?{}", url.path(), url.query().unwrap());
    let opened = get(&open, None).await.unwrap();
    assert_eq!(opened.status(), 303);
    assert_eq!(get(&open, None).await.unwrap().status(), 403, "a ticket opens once");
    let set_cookie = opened.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attr in ["HttpOnly", "Secure", "SameSite=None", "Partitioned"] {
        assert!(set_cookie.contains(attr), "{attr} in {set_cookie}");
    }
    assert!(!set_cookie.contains("Domain"), "host-only: {set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_owned();

    // The workbench, on the workspace's folder; only the workspace may frame it.
    let mut page = get("/", Some(&cookie)).await.unwrap();
    if page.status().is_redirection() {
        let to = page.headers()["location"].to_str().unwrap().trim_start_matches('.').to_owned();
        assert!(to.contains("folder="), "code-server opens the workspace: {to}");
        page = get(&to, Some(&cookie)).await.unwrap();
    }
    assert_eq!(page.status(), 200);
    // code-server's own policy stays; the proxy's is one more, which browsers enforce too.
    let csp: Vec<&str> = page.headers().get_all("content-security-policy").iter().map(|v| v.to_str().unwrap()).collect();
    assert!(csp.contains(&format!("frame-ancestors {}", h.http).as_str()), "{csp:?}");
    let html = page.text().await.unwrap();
    assert!(html.contains("workbench"), "{}", &html[..html.len().min(400)]);

    // A WebSocket from another site is refused; from its own origin it reaches code-server.
    let socket = |origin: String| {
        let mut req =
            format!("ws://{}/?reconnectionToken=t1&reconnection=false&skipWebSocketFrames=false", h.apps).into_client_request().unwrap();
        req.headers_mut().insert("host", public.parse().unwrap());
        req.headers_mut().insert("cookie", cookie.parse().unwrap());
        req.headers_mut().insert("origin", origin.parse().unwrap());
        tokio_tungstenite::connect_async(req)
    };
    match socket("http://evil.example".into()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => assert_eq!(res.status(), 403),
        other => panic!("a foreign origin's WebSocket was not refused: {:?}", other.map(|(_, r)| r.status())),
    }
    let (mut ws, res) = socket(format!("http://{public}")).await.expect("code-server takes its own origin's WebSocket");
    assert_eq!(res.status(), 101);
    // code-server speaks first on its management connection (its handshake message).
    let first = tokio::time::timeout(std::time::Duration::from_secs(20), ws.next()).await;
    assert!(matches!(first, Ok(Some(Ok(_)))), "code-server answered on the socket: {first:?}");
}

#[tokio::test]
async fn vscode_opens_for_its_owner_on_its_own_origin_in_a_process_sandbox() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool("terminal", json!({"command": "printf 'print(1)\\n' > hello.py", "security_risk": "low"})),
        Reply::finish("wrote hello.py"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "write hello.py"})).await;
    alice.wait_events(&conv, "the run", finished).await;
    check_vscode(&h, &alice, &conv).await;
}

#[tokio::test]
async fn vscode_opens_in_a_container() {
    init();
    halyard_tests::docker::require_engine();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("ready")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_SANDBOX", "docker").set("HALYARD_SANDBOX_POOL_SIZE", "0"));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "get ready"})).await;
    alice.wait_events(&conv, "the run", finished).await;
    check_vscode(&h, &alice, &conv).await;
}
