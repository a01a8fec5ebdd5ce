#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! MCP servers this project did not write, reached by the agent through a scripted LLM: PyPI's
//! `mcp-server-time` over stdio, run in the conversation's sandbox, and a streamable-HTTP server
//! built with the Python MCP SDK (`tests/servers/mcp_notes.py`) that wants a bearer token the
//! user keeps as a secret. A server that cannot start is reported in words and does not stop
//! the conversation; another user is offered none of it. An organization's server that wants
//! OAuth (the Python SDK's resource server, npm's `oidc-provider` as its authorization server) is
//! signed in to once by an admin for its members (a user's own such server is signed in to from
//! Chromium, in `browser.rs`); one whose authorization server makes Halyard a confidential client
//! is refreshed and signed out of with the client's secret.

use std::time::Duration;

use halyard_tests::llm::tool_names;
use halyard_tests::mcp_oauth::{token_number, whoami_answers};
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use reqwest::Method;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";
const TOKEN: &str = "notes-token-8c1d5e";
/// `mcp-server-time` where sandboxes can run it (`infra/install-deps.sh` puts it there).
const TIME_SERVER: &str = "/opt/halyard-mcp/bin/mcp-server-time";

/// The Python SDK's server on a free port, refusing requests without `Bearer TOKEN`.
async fn notes_server() -> halyard_tests::python::PythonServer {
    halyard_tests::python::PythonServer::start("mcp_notes.py", &[TOKEN]).await
}

#[tokio::test]
async fn the_agent_calls_tools_of_stdio_and_http_servers_and_a_broken_one_is_reported() {
    init();
    let notes = notes_server().await;
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_MCP_ALLOW", "loopback"));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));

    let (s, _) = alice.call(Method::PUT, "/api/v1/secrets/NOTES_TOKEN", Some(json!({"value": TOKEN}))).await;
    assert_eq!(s, 201);
    assert!(std::path::Path::new(TIME_SERVER).exists(), "{TIME_SERVER} is missing: run infra/install-deps.sh as root");
    let time = json!({"transport": "stdio", "command": format!("{TIME_SERVER} --local-timezone UTC")});
    let (s, v) = alice.call(Method::PUT, "/api/v1/mcp-servers/time", Some(time)).await;
    assert_eq!((s, v["transport"].as_str(), v["enabled"].as_bool()), (201, Some("stdio"), Some(true)), "{v}");
    let http = json!({"transport": "http", "url": notes.mcp_url(), "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}});
    let (s, v) = alice.call(Method::PUT, "/api/v1/mcp-servers/notes", Some(http)).await;
    assert_eq!(s, 201, "{v}");
    let broken = json!({"transport": "stdio", "command": "echo 'mcp-broken: no such thing' >&2; exit 3"});
    assert_eq!(alice.call(Method::PUT, "/api/v1/mcp-servers/broken", Some(broken)).await.0, 201);
    // Bad configurations are refused with what to do.
    let (s, e) = alice.call(Method::PUT, "/api/v1/mcp-servers/x", Some(json!({"transport": "stdio"}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, e) = alice.call(Method::PUT, "/api/v1/mcp-servers/x", Some(json!({"transport": "http", "url": "ftp://x"}))).await;
    assert_eq!(s, 400, "{e}");
    let bad_ref = json!({"transport": "http", "url": notes.mcp_url(), "headers": {"Authorization": "Bearer ${NOTES_TOKEN"}});
    let (s, e) = alice.call(Method::PUT, "/api/v1/mcp-servers/x", Some(bad_ref)).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap_or_default().contains("${NAME}"), "{e}");
    let (_, listed) = alice.get("/api/v1/mcp-servers").await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(3), "{listed}");
    // The Settings page's Test: an http server is reached with the secret filled in and says
    // its tools; a stdio one is checked when a conversation starts, and says so.
    let (s, t) = alice.post("/api/v1/mcp-servers/notes/test", json!({})).await;
    assert_eq!((s, t["ok"].as_bool()), (200, Some(true)), "{t}");
    assert!(t["tools"].as_array().unwrap().iter().any(|x| x == "add_note"), "{t}");
    let (s, t) = alice.post("/api/v1/mcp-servers/time/test", json!({})).await;
    assert_eq!((s, t["ok"].as_bool()), (200, Some(false)), "{t}");
    assert!(t["error"].as_str().unwrap().contains("conversation's sandbox"), "{t}");
    // Signing in is for servers that do OAuth: this one takes a static token, and says so; a
    // stdio server is no place to sign in to.
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let sign_in = |name: &str| http.get(format!("{}/api/v1/mcp-servers/{name}/sign-in", h.http)).bearer_auth(ALICE).send();
    let r = sign_in("notes").await.unwrap();
    let to = r.headers().get("location").map(|l| l.to_str().unwrap().to_owned()).unwrap_or_default();
    assert!(r.status() == 303 && to.starts_with("/settings?mcp_server=notes&mcp_sign_in_error="), "{} {to}", r.status());
    let r = sign_in("time").await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "not_an_http_server");
    // Starting a sign-in changes what conversations are signed in as: a read-only key may not.
    let (s, key) = alice.post("/api/v1/me/keys", json!({"name": "reader", "scope": "read_only"})).await;
    assert_eq!(s, 201, "{key}");
    let r =
        http.get(format!("{}/api/v1/mcp-servers/notes/sign-in", h.http)).bearer_auth(key["key"].as_str().unwrap()).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "read_only_key");
    let (s, t) = bob.post("/api/v1/mcp-servers/notes/test", json!({})).await;
    assert_eq!((s, t["error"]["code"].as_str()), (404, Some("not_found")), "{t}");
    assert_eq!(bob.get("/api/v1/mcp-servers").await.1["items"], json!([]));
    assert_eq!(bob.get("/api/v1/mcp-servers/time").await.0, 404);

    llm.push([
        Reply::tool("time__get_current_time", json!({"timezone": "Asia/Tokyo"})),
        Reply::tool("notes__add_note", json!({"text": "remember the milk"})),
        Reply::finish("done"),
    ]);
    let (conv, _) = alice.start_ready(json!({"message": "what time is it in Tokyo?"})).await;
    let events = alice.wait_events(&conv, "finish", halyard_tests::events::ended).await;
    let all = Value::Array(events.clone()).to_string();

    // The servers as the run found them: two with their tools, the broken one in its words.
    let servers = events.iter().find(|e| e["kind"] == "mcp_servers").map(|e| e["servers"].clone()).expect("an mcp_servers event");
    let by_name = |n: &str| servers.as_array().unwrap().iter().find(|s| s["name"] == n).cloned().unwrap_or_default();
    assert!(by_name("time")["tools"].as_array().unwrap().iter().any(|t| t == "time__convert_time"), "{servers}");
    assert_eq!(by_name("notes")["tools"], json!(["notes__add_note"]), "{servers}");
    let why = by_name("broken")["error"].as_str().unwrap_or_default().to_owned();
    assert!(why.contains("exited with code 3") && why.contains("mcp-broken: no such thing"), "{servers}");

    // The model was offered the tools under their namespaced names, next to the built-ins.
    let offered = tool_names(&llm.requests()[0]);
    for name in ["terminal", "time__get_current_time", "time__convert_time", "notes__add_note"] {
        assert!(offered.iter().any(|n| n == name), "{name} not offered: {offered:?}");
    }
    // Calls and results are actions and observations like any other tool's.
    let observed = |tool: &str| {
        events
            .iter()
            .find(|e| e["kind"] == "observation" && e["tool"] == tool)
            .map(|e| e["content"].as_str().unwrap_or_default().to_owned())
    };
    let tokyo = observed("time__get_current_time").expect("the time tool's result");
    assert!(tokyo.contains("Asia/Tokyo") && tokyo.contains("datetime"), "{tokyo}");
    assert_eq!(observed("notes__add_note").as_deref(), Some("noted: remember the milk (1 kept)"));
    assert!(events.iter().any(|e| e["kind"] == "action" && e["tool"] == "notes__add_note"), "{all}");
    assert!(all.contains("\"finished\""), "the conversation did not finish: {all}");
    assert!(!all.contains(TOKEN), "the token reached an event");
    assert!(!llm.requests().iter().any(|r| r.to_string().contains(TOKEN)), "the token reached the LLM");

    // A second run reuses the connections (no new mcp_servers event: nothing changed).
    llm.push([Reply::tool("notes__add_note", json!({"text": "and eggs"})), Reply::finish("done again")]);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "one more"})).await;
    let events = alice.wait_finished(&conv, 2).await;
    assert!(events.iter().any(|e| e["kind"] == "observation" && e["content"] == "noted: and eggs (2 kept)"), "{events:?}");
    assert_eq!(events.iter().filter(|e| e["kind"] == "mcp_servers").count(), 1);

    // Bob has no servers: his model is offered the built-in tools only.
    let before = llm.requests().len();
    llm.push([Reply::finish("hello bob")]);
    let (bconv, _) = bob.start_ready(json!({"message": "hi"})).await;
    bob.wait_finished(&bconv, 1).await;
    let bobs = tool_names(&llm.requests()[before]);
    assert!(bobs.iter().any(|n| n == "terminal") && !bobs.iter().any(|n| n.contains("__")), "{bobs:?}");
    assert!(!bob.events(&bconv).await.iter().any(|e| e["kind"] == "mcp_servers"));
}

/// An organization's MCP server that wants OAuth: one of its admins signs in once (through the
/// authorization server's login and consent forms, as a browser does), and every member's
/// conversation in the organization is then answered as that sign-in; a member can neither sign
/// in nor out for it, and a conversation outside the organization does not get it.
#[tokio::test]
async fn an_organizations_mcp_server_is_signed_in_to_once_by_an_admin_for_its_members_conversations() {
    init();
    let mcp = halyard_tests::mcp_oauth::OAuthMcpServer::start(600).await;
    let llm = ScriptedLlm::start().await;
    llm.fallback(|req| {
        let turn = halyard_tests::llm::latest_turn(req);
        let offered = tool_names(req).iter().any(|n| n == "notes__whoami");
        match (turn.iter().any(|m| m["role"] == "tool"), offered) {
            (false, true) => Reply::tool("notes__whoami", json!({})),
            (false, false) => Reply::finish("no notes here"),
            (true, _) => Reply::finish("asked notes"),
        }
    });
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_MCP_ALLOW", "loopback"));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    alice.add_to_org("acme", &bob, None).await;
    let server = json!({"transport": "http", "url": mcp.url()});
    assert_eq!(alice.call(Method::PUT, "/api/v1/orgs/acme/mcp-servers/notes", Some(server)).await.0, 201);

    // A member may not sign in for everyone, nor sign out.
    let start = format!("{}/api/v1/orgs/acme/mcp-servers/notes/sign-in", h.http);
    assert_eq!(bob.get("/api/v1/orgs/acme/mcp-servers/notes/sign-in").await.0, 403);
    // A sign-in started with a key that is revoked before the provider sends the browser back
    // signs nobody in: the callback checks the key again.
    let (s, key) = alice.post("/api/v1/me/keys", json!({"name": "laptop"})).await;
    assert_eq!(s, 201, "{key}");
    let (callback, cookies) = halyard_tests::oidc::up_to_callback(&start, key["key"].as_str().unwrap(), "team-bot@acme.test").await;
    assert!(callback.contains("/api/v1/mcp-oauth/callback?"), "{callback}");
    assert_eq!(alice.call(Method::DELETE, &format!("/api/v1/me/keys/{}", key["id"].as_str().unwrap()), None).await.0, 200);
    let to = halyard_tests::oidc::call_back(&callback, &cookies).await;
    assert!(to.starts_with("/orgs?org=acme&") && to.contains("mcp_sign_in_error=you can no longer sign in here"), "{to}");
    let (_, listed) = alice.get("/api/v1/orgs/acme/mcp-servers").await;
    assert!(listed["items"][0]["sign_in"].is_null(), "signed in with a revoked key: {listed}");
    // The admin signs in, as the team's account at the server.
    let page = halyard_tests::oidc::sign_in_through(&start, ALICE, "team-bot@acme.test").await;
    assert!(page.contains("/orgs?org=acme&mcp_signed_in=notes"), "{page}");
    let (_, listed) = bob.get("/api/v1/orgs/acme/mcp-servers").await;
    assert_eq!(listed["items"][0]["sign_in"]["issuer"].as_str(), Some(mcp.issuer.as_str()), "{listed}");
    assert_eq!(bob.call(Method::DELETE, "/api/v1/orgs/acme/mcp-servers/notes/sign-in", None).await.0, 403);

    // Bob's conversation in the organization is answered as the team's account.
    let (conv, _) = bob.start_ready(json!({"message": "who are we at notes?", "org": "acme"})).await;
    let events = bob.wait_finished(&conv, 1).await;
    let answer = events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "notes__whoami").map(|e| e["content"].clone());
    assert!(answer.as_ref().and_then(Value::as_str).is_some_and(|a| a.starts_with("signed in as team-bot@acme.test")), "{events:?}");
    assert!(!events.iter().any(|e| e["kind"] == "mcp_auth_required"), "{events:?}");
    // His own conversation, outside the organization, has no such server.
    let (own, _) = bob.start_ready(json!({"message": "who am I at notes?"})).await;
    let events = bob.wait_finished(&own, 1).await;
    assert!(!events.iter().any(|e| e["kind"] == "observation" && e["tool"] == "notes__whoami"), "{events:?}");
    // The token went nowhere it should not.
    let all = format!("{}{}", Value::Array(bob.events(&conv).await), Value::Array(llm.requests()));
    for token in mcp.tokens() {
        assert!(!all.contains(&token) && !h.log().contains(&token), "a token leaked");
    }

    // Signed out by the admin, the next run asks to sign in again; and the grant is revoked at
    // the authorization server, so a token copied before is refused there too.
    let copied = mcp.tokens().last().cloned().expect("a token the server took");
    let with_copied = || ping_status(mcp.url(), &copied);
    assert_ne!(with_copied().await, 401, "the token was refused while signed in");
    assert_eq!(alice.call(Method::DELETE, "/api/v1/orgs/acme/mcp-servers/notes/sign-in", None).await.0, 204);
    assert_eq!(with_copied().await, 401, "a token of a signed-out grant still works at the server");
    bob.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "and now?"})).await;
    let events = bob.wait_finished(&conv, 2).await;
    let asked = events.iter().find(|e| e["kind"] == "mcp_auth_required").expect("mcp_auth_required after signing out");
    assert_eq!(asked["server"], "notes", "{asked}");
    // Where its admins sign in to it, not the member's own Settings.
    let link = format!("{}/orgs?org=acme&mcp_sign_in=notes#mcp-servers", h.http);
    assert_eq!(asked["sign_in_url"].as_str(), Some(link.as_str()), "{asked}");
}

/// An authorization server that registers Halyard as a confidential client, whatever it asked
/// (a secret it then requires at its token and revocation endpoints): the sign-in is refreshed
/// after expiry by the agent runner, which authenticates with that secret, and signing out ends
/// the grant with it.
#[tokio::test]
async fn a_sign_in_whose_client_got_a_secret_is_refreshed_and_revoked_with_it() {
    init();
    const TTL: u64 = 4;
    let mcp = halyard_tests::mcp_oauth::OAuthMcpServer::confidential(TTL).await;
    let llm = ScriptedLlm::start().await;
    llm.fallback(|req| {
        let turn = halyard_tests::llm::latest_turn(req);
        match turn.iter().any(|m| m["role"] == "tool") {
            false => Reply::tool("notes__whoami", json!({})),
            true => Reply::finish("asked notes"),
        }
    });
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_MCP_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    let server = json!({"transport": "http", "url": mcp.url()});
    assert_eq!(alice.call(Method::PUT, "/api/v1/mcp-servers/notes", Some(server)).await.0, 201);
    let start = format!("{}/api/v1/mcp-servers/notes/sign-in", h.http);
    let page = halyard_tests::oidc::sign_in_through(&start, ALICE, "alice@notes.test").await;
    assert!(page.contains("mcp_signed_in=notes"), "{page}");

    let (conv, _) = alice.start_ready(json!({"message": "who am I at notes?"})).await;
    let events = alice.wait_finished(&conv, 1).await;
    let first = whoami_answers(&events);
    assert!(first.len() == 1 && first[0].starts_with("signed in as alice@notes.test with token #"), "{events:?}");
    let (_, view) = alice.get("/api/v1/mcp-servers/notes").await;
    let refreshed_at = view["sign_in"]["refreshed_at"].clone();

    // Expired, the token is refreshed with the client's secret, without the user.
    tokio::time::sleep(Duration::from_secs(TTL + 1)).await;
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "and now?"})).await;
    let events = alice.wait_finished(&conv, 2).await;
    let answers = whoami_answers(&events);
    assert!(!events.iter().any(|e| e["kind"] == "mcp_auth_required"), "the refresh was refused: {events:?}");
    assert!(answers.len() == 2 && answers[1].starts_with("signed in as alice@notes.test"), "{answers:?}");
    assert!(token_number(&answers[1]) > token_number(&answers[0]), "the expired token was used again: {answers:?}");
    let (_, view) = alice.get("/api/v1/mcp-servers/notes").await;
    assert_ne!(view["sign_in"]["refreshed_at"], refreshed_at, "{view}");
    let all = format!("{}{}{}", Value::Array(events), Value::Array(llm.requests()), h.log());
    for token in mcp.tokens() {
        assert!(!all.contains(&token), "a token leaked");
    }

    // Signing out revokes the grant as that client: a token copied before is refused after.
    let copied = mcp.tokens().last().cloned().expect("a token the server took");
    let with_copied = || ping_status(mcp.url(), &copied);
    assert_ne!(with_copied().await, 401, "the token was refused while signed in");
    assert_eq!(alice.call(Method::DELETE, "/api/v1/mcp-servers/notes/sign-in", None).await.0, 204);
    assert_eq!(with_copied().await, 401, "the grant outlived the sign-out");
}

/// The status the MCP server at `url` answers a `ping` sent with `token`: 401 when it does not
/// take the token.
async fn ping_status(url: String, token: &str) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let request = reqwest::Client::new().post(url).bearer_auth(token).header("accept", "application/json, text/event-stream");
    request.json(&body).send().await.unwrap().status().as_u16()
}
