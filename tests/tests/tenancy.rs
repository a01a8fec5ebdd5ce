#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Tenancy: what a removed member, an organization's admin or a moved credential can still
//! reach, tried as each would. A member removed mid-run loses the organization's things within a
//! step and can no longer act on its conversations; an organization's MCP servers are filled
//! from the organization's secrets, never a member's own; a stored key or token does not follow
//! its profile or provider to another server; `require_sso` needs single sign-on configured.

use std::time::{Duration, Instant};

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use reqwest::Method;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

fn terminal(command: &str) -> Reply {
    Reply::tool("terminal", json!({"command": command, "security_risk": "low", "timeout": 30}))
}

#[tokio::test]
async fn a_member_removed_mid_run_loses_the_organizations_things_within_a_step() {
    init();
    const TEAM: &str = "team-token-value-5f1e22";
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    alice.add_to_org("acme", &bob, None).await;
    assert_eq!(alice.call(Method::PUT, "/api/v1/orgs/acme/secrets/TEAM_TOKEN", Some(json!({"value": TEAM}))).await.0, 201);

    // Bob's run in acme: a slow first step, then one that would use the organization's secret.
    llm.push([
        terminal("sleep 4; echo first-step-done"),
        terminal("printf %s \"$TEAM_TOKEN\" > leaked.txt; echo second-step-ran"),
        Reply::finish("done"),
    ]);
    let (conv, task) = bob.start_ready(json!({"message": "work for the team", "org": "acme"})).await;
    bob.wait_events(&conv, "the first step to start", |ev| ev.iter().any(|e| e["kind"] == "action" && e["tool"] == "terminal")).await;
    // Removed while the step runs.
    assert_eq!(alice.call(Method::DELETE, "/api/v1/orgs/acme/members/bob", None).await.0, 204);
    let removed = Instant::now();
    let events =
        bob.wait_events(&conv, "the run to stop", |ev| ev.iter().any(|e| e["kind"] == "agent_error" || e["status"] == "finished")).await;
    let stopped_after = removed.elapsed();
    let error =
        events.iter().find(|e| e["kind"] == "agent_error").unwrap_or_else(|| panic!("the run went on: {}", Value::Array(events.clone())));
    assert_eq!(error["code"], "not_a_member", "{error}");
    assert!(error["message"].as_str().unwrap().contains("no longer a member of organization acme"), "{error}");
    let text = Value::Array(events.clone()).to_string();
    assert!(text.contains("first-step-done") && !text.contains("second-step-ran"), "the next step ran: {text}");
    assert!(!h.workspace(task["sandbox_id"].as_str().unwrap()).join("leaked.txt").exists(), "the organization's secret was used");
    // Within seconds: the step that was running (4 s) and no more.
    assert!(stopped_after < Duration::from_secs(15), "stopped {stopped_after:?} after the removal");

    // Acting on it is refused in words; reading its history is not; deleting it is his.
    let (s, e) = bob.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "go on"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("not_a_member")), "{e}");
    for (path, body) in [("fork", json!({"at_seq": 1})), ("retry", json!({})), ("resume", json!({}))] {
        let path = format!("/api/v1/conversations/{conv}/{path}");
        let (s, e) = bob.post(&path, body).await;
        assert_eq!((s, e["error"]["code"].as_str()), (403, Some("not_a_member")), "{path}: {e}");
    }
    assert_eq!(bob.get(&format!("/api/v1/conversations/{conv}/files")).await.0, 403, "its sandbox is the organization's");
    assert_eq!(bob.get(&format!("/api/v1/conversations/{conv}")).await.0, 200);
    assert_eq!(bob.call(Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await.0, 202);
}

#[tokio::test]
async fn an_organizations_mcp_servers_see_its_secrets_and_never_a_members_own() {
    init();
    const TOKEN: &str = "notes-token-6a7b";
    let notes = halyard_tests::python::PythonServer::start("mcp_notes.py", &[TOKEN]).await;
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_MCP_ALLOW", "loopback"));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    alice.add_to_org("acme", &bob, None).await;
    // Bob's own secret has the name the organization's server asks for; the organization has
    // none of that name yet.
    assert_eq!(bob.call(Method::PUT, "/api/v1/secrets/NOTES_TOKEN", Some(json!({"value": TOKEN}))).await.0, 201);
    let server = json!({"transport": "http", "url": notes.mcp_url(), "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}});
    assert_eq!(alice.call(Method::PUT, "/api/v1/orgs/acme/mcp-servers/notes", Some(server)).await.0, 201);
    // And a stdio one that writes down the environment it was given.
    let stdio = json!({"transport": "stdio", "command": "env > org-mcp-env.txt; exit 3"});
    assert_eq!(alice.call(Method::PUT, "/api/v1/orgs/acme/mcp-servers/envdump", Some(stdio)).await.0, 201);

    let servers_of = |events: &[Value]| events.iter().find(|e| e["kind"] == "mcp_servers").map(|e| e["servers"].clone()).unwrap();
    llm.push([Reply::finish("done")]);
    let (conv, task) = bob.start_ready(json!({"message": "hello", "org": "acme"})).await;
    let events = bob.wait_events(&conv, "the run", |ev| ev.iter().any(|e| e["kind"] == "mcp_servers")).await;
    let servers = servers_of(&events);
    let notes_status = servers.as_array().unwrap().iter().find(|s| s["name"] == "notes").cloned().unwrap();
    assert!(notes_status["error"].as_str().unwrap_or_default().contains("NOTES_TOKEN"), "{servers}");
    let dumped = std::fs::read_to_string(h.workspace(task["sandbox_id"].as_str().unwrap()).join("org-mcp-env.txt")).unwrap_or_default();
    assert!(!dumped.contains(TOKEN), "a member's own secret reached the organization's stdio server");

    // With the organization's own secret, its server connects.
    assert_eq!(alice.call(Method::PUT, "/api/v1/orgs/acme/secrets/NOTES_TOKEN", Some(json!({"value": TOKEN}))).await.0, 201);
    llm.push([Reply::finish("done")]);
    let (conv, _) = bob.start_ready(json!({"message": "hello again", "org": "acme"})).await;
    let events = bob.wait_events(&conv, "the run", |ev| ev.iter().any(|e| e["kind"] == "mcp_servers")).await;
    let servers = servers_of(&events);
    let notes_status = servers.as_array().unwrap().iter().find(|s| s["name"] == "notes").cloned().unwrap();
    assert_eq!(notes_status["tools"], json!(["notes__add_note"]), "{servers}");
}

#[tokio::test]
async fn a_stored_key_or_token_does_not_follow_its_profile_or_provider_elsewhere() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PROFILE_ALLOW", "loopback").set("HALYARD_ADMINS", "alice"));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    let profile = |base: &str, key: Option<&str>| {
        let mut body = json!({"base_url": base, "model": "m"});
        if let Some(k) = key {
            body["api_key"] = k.into();
        }
        body
    };
    let (s, p) = alice.call(Method::PUT, "/api/v1/llm-profiles/main", Some(profile(&llm.base_url, Some("sk-owners-key")))).await;
    assert_eq!((s, p["has_api_key"].as_bool()), (201, Some(true)), "{p}");
    // Changing the model keeps the key; moving the profile to another server drops it.
    let (_, p) = alice.call(Method::PUT, "/api/v1/llm-profiles/main", Some(profile(&llm.base_url, None))).await;
    assert_eq!(p["has_api_key"], true, "{p}");
    let (_, p) = alice.call(Method::PUT, "/api/v1/llm-profiles/main", Some(profile("http://127.0.0.1:9/v1", None))).await;
    assert_eq!(p["has_api_key"], false, "the key followed the profile to another server: {p}");

    // A git provider moved to another host needs its token again.
    let git = json!({"kind": "generic", "host": "git.example.com", "token": "ghp-provider-token-1"});
    assert_eq!(alice.call(Method::PUT, "/api/v1/git-providers/work", Some(git)).await.0, 201);
    let moved = json!({"kind": "generic", "host": "git.attacker.test"});
    let (s, e) = alice.call(Method::PUT, "/api/v1/git-providers/work", Some(moved)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("token_required")), "{e}");
    let same = json!({"kind": "generic", "host": "git.example.com", "username": "ci"});
    assert_eq!(alice.call(Method::PUT, "/api/v1/git-providers/work", Some(same)).await.0, 200, "a change in place keeps it");

    // Joining rules reach beyond an organization: an owner who is no administrator sets none;
    // `require_sso` with no single sign-on configured would lock members out of the page.
    let sso = json!({"require_sso": true, "sso_groups": ["team"]});
    assert_eq!(bob.post("/api/v1/orgs", json!({"name": "bobs"})).await.0, 201);
    let (s, e) = bob.call(Method::PUT, "/api/v1/orgs/bobs/settings", Some(sso.clone())).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("admin_only")), "{e}");
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    let (s, e) = alice.call(Method::PUT, "/api/v1/orgs/acme/settings", Some(sso)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("sso_not_configured")), "{e}");
}

/// What a walk can see of what a request did: the conversation's events and the deployment's
/// audit trail, counted.
async fn traces(alice: &halyard_tests::Api, conv: &str) -> (usize, usize) {
    let (_, events) = alice.get(&format!("/api/v1/conversations/{conv}/events?limit=1000")).await;
    let (_, audit) = alice.get("/api/v1/admin/audit?limit=1000").await;
    (events["items"].as_array().map_or(0, Vec::len), audit["items"].as_array().map_or(0, Vec::len))
}

#[tokio::test]
async fn a_read_only_key_and_a_read_only_session_act_on_nothing_walked_from_the_openapi_document() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("ready")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "alice"));
    let alice = h.api(ALICE);
    let (conv, task) = alice.start_ready(json!({"message": "hello"})).await;
    alice.wait_finished(&conv, 1).await;
    let sandbox = task["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    let (_, ro) = alice.post("/api/v1/me/keys", json!({"scope": "read_only", "name": "dashboard"})).await;
    let ro_key = ro["key"].as_str().unwrap().to_owned();
    // A session opened with the read-only key, as the page opens one.
    let http = reqwest::Client::new();
    let resp = http.post(format!("{}/api/v1/session", h.http)).json(&json!({"api_key": ro_key})).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    // What these left (the key's issue, the sign-in) is recorded before the walk counts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while traces(&alice, &conv).await.1 < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (_, doc) = alice.get("/api/v1/openapi.json").await;
    let fill = |path: &str| {
        path.replace("{id}", if path.starts_with("/api/v1/sandboxes/") { &sandbox } else { &conv })
            .replace("{org}", "acme")
            .replace(['{', '}'], "")
    };
    let mut walked = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            // Public routes take no key at all (hooks, single sign-on, share links, sign-in).
            if op.get("security").and_then(Value::as_array).is_some_and(|s| s.iter().all(|x| x.as_object().is_some_and(|o| o.is_empty())))
                || !path.starts_with("/api/v1/")
            {
                continue;
            }
            // Signing out ends only the caller's own session, which any credential may do (and
            // would end the session this walk uses).
            if path == "/api/v1/session" && method == "delete" {
                continue;
            }
            let url = format!("{}{}", h.http, fill(path));
            for (who, auth) in
                [("a read-only key", ("authorization", format!("Bearer {ro_key}"))), ("a read-only session", ("cookie", cookie.clone()))]
            {
                let before = traces(&alice, &conv).await;
                let status = if path.ends_with("/ws") {
                    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
                    let mut request = url.replacen("http", "ws", 1).into_client_request().unwrap();
                    request.headers_mut().insert(auth.0, auth.1.parse().unwrap());
                    match tokio_tungstenite::connect_async(request).await {
                        Ok((mut socket, _)) => {
                            // Whatever the socket takes, it must not act: type into it.
                            use futures::SinkExt;
                            let _ = socket.send(tokio_tungstenite::tungstenite::Message::Binary(b"touch pwned\r".to_vec().into())).await;
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            101
                        }
                        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
                        Err(e) => panic!("{method} {path} as {who}: {e}"),
                    }
                } else {
                    let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
                    let mut req = http.request(m.clone(), &url).header(auth.0, &auth.1).header("x-halyard-csrf", "1");
                    if m != Method::GET && m != Method::DELETE {
                        req = req.json(&json!({}));
                    }
                    req.send().await.unwrap().status().as_u16()
                };
                if method != "get" {
                    // Refused: as read-only (403), as no credential of theirs (401: routes that
                    // take only a conversation's own key), or for the body (400): never done.
                    assert!((400..500).contains(&status), "{method} {path} as {who} answered {status}");
                }
                assert_eq!(traces(&alice, &conv).await, before, "{method} {path} as {who} (answered {status}) left a trace: it acted");
                walked += 1;
            }
        }
    }
    assert!(walked > 150, "walked only {walked} operations");
    let workspace = h.workspace(&sandbox);
    assert!(!workspace.join("pwned").exists(), "a read-only credential typed into a shell");
}
