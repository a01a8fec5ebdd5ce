#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Users and API keys, managed rather than configured: an admin creates users and issues keys
//! (shown once, stored as salted hashes, read-only or expiring), revokes them on every gateway
//! at once, disables users; every action leaves an audit record; the `halyard admin` CLI does
//! the same; failed authentications are limited per client address.

use std::time::{Duration, Instant};

use futures::StreamExt;
use halyard_tests::harness::halyard_bin;
use halyard_tests::{Halyard, HalyardOptions, ScriptedLlm, init};
use serde_json::{Value, json};

const ROOT: &str = "root-admin-key";
const ALICE: &str = "alice-secret-key";
const KEYS: &str = "root:root-admin-key,alice:alice-secret-key";

fn opts(llm: &ScriptedLlm) -> HalyardOptions {
    let mut o = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root");
    o.api_keys = KEYS.into();
    o
}

/// Runs `halyard admin <args>` against `h` with `key`: (exit code, stdout, stderr).
fn cli(url: &str, key: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(halyard_bin())
        .arg("admin")
        .args(args)
        .env_clear()
        .env("HALYARD_URL", url)
        .env("HALYARD_API_KEY", key)
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn admins_manage_users_and_keys_and_a_revoked_key_is_refused_by_every_gateway() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(opts(&llm));
    let root = h.api(ROOT);
    let alice = h.api(ALICE);

    // Only administrators.
    let (s, e) = alice.get("/api/v1/admin/users").await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("forbidden")), "{e}");
    let (s, me) = root.get("/api/v1/me").await;
    assert_eq!((s, me["user"].as_str(), me["admin"].as_bool()), (200, Some("root"), Some(true)), "{me}");

    // Users.
    let (s, carol) = root.post("/api/v1/admin/users", json!({"name": "carol"})).await;
    assert_eq!(s, 201, "{carol}");
    assert_eq!((carol["admin"].as_bool(), carol["disabled"].as_bool()), (Some(false), Some(false)));
    let (s, e) = root.post("/api/v1/admin/users", json!({"name": "carol"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (409, Some("user_exists")), "{e}");
    let (s, e) = root.post("/api/v1/admin/users", json!({"name": "carol the second"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (_, users) = root.get("/api/v1/admin/users").await;
    let names: Vec<&str> = users["items"].as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice", "carol", "root"]);

    // A key, shown once.
    let (s, issued) = root.post("/api/v1/admin/users/carol/keys", json!({"name": "laptop"})).await;
    assert_eq!(s, 201, "{issued}");
    let key = issued["key"].as_str().unwrap().to_owned();
    let id = issued["id"].as_str().unwrap().to_owned();
    assert!(key.starts_with(&format!("hal_{id}_")), "{key}");
    let (_, listed) = root.get("/api/v1/admin/users/carol/keys").await;
    let listed = &listed["items"][0];
    assert_eq!(listed["id"], id.as_str());
    assert!(listed.get("key").is_none() && listed.get("hash").is_none() && listed.get("salt").is_none(), "{listed}");
    // What is stored is a salted hash, not the key.
    let admin_bus = h.nats_client("admin").await;
    let kv = async_nats::jetstream::new(admin_bus.clone()).get_key_value("halyard_auth").await.unwrap();
    let stored = kv.get(format!("key.{id}")).await.unwrap().unwrap();
    let secret = key.rsplit('_').next().unwrap();
    assert!(!String::from_utf8_lossy(&stored).contains(secret), "the key's secret is stored");

    let carol = h.api(&key);
    let (s, me) = carol.get("/api/v1/me").await;
    assert_eq!((s, me["user"].as_str(), me["scope"].as_str()), (200, Some("carol"), Some("full")), "{me}");
    let (s, task) = carol.post("/api/v1/conversations", json!({})).await;
    assert_eq!(s, 202, "{task}");

    // A read-only key reads and may not write; an expiring key expires.
    let (_, ro) = root.post("/api/v1/admin/users/carol/keys", json!({"scope": "read_only"})).await;
    let ro = h.api(ro["key"].as_str().unwrap());
    assert_eq!(ro.get("/api/v1/conversations").await.0, 200);
    let (s, e) = ro.post("/api/v1/conversations", json!({})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("read_only_key")), "{e}");
    let (_, short) = root.post("/api/v1/admin/users/carol/keys", json!({"expires_in_secs": 1})).await;
    let short = h.api(short["key"].as_str().unwrap());
    assert_eq!(short.get("/api/v1/me").await.0, 200);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (s, e) = short.get("/api/v1/me").await;
    assert_eq!(s, 401, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("expired"), "{e}");
    let (s, e) = root.post("/api/v1/admin/users/carol/keys", json!({"scope": "everything"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");

    // A second gateway on the same bus, as its own process with the gateway role's credentials.
    let (user, password) = h.nats_credentials("gateway");
    let mut g2 = HalyardOptions::new(&llm.base_url)
        .serve(&h.nats, &["gateway"])
        .set("HALYARD_NATS_USER", &user)
        .set("HALYARD_NATS_PASSWORD", &password)
        .set("HALYARD_ADMINS", "root");
    g2.api_keys = KEYS.into();
    let g2 = Halyard::start(g2);
    let carol2 = g2.api(&key);
    carol2.wait_for("/api/v1/me", "the key on the second gateway", |me| me["user"] == "carol").await;

    // Revoked: refused at once by the gateway that revoked it, and by the other as soon as the
    // change reaches it.
    let (s, revoked) = root.call(reqwest::Method::DELETE, &format!("/api/v1/admin/keys/{id}"), None).await;
    assert_eq!(s, 200, "{revoked}");
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let (s, e) = carol.get("/api/v1/me").await;
    assert_eq!(s, 401, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("revoked"), "{e}");
    let t0 = Instant::now();
    loop {
        let (s, _) = carol2.get("/api/v1/me").await;
        if s == 401 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "the second gateway still accepts a revoked key");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!("the second gateway refused the revoked key after {:?}", t0.elapsed());

    // A disabled user's keys are refused, bootstrap keys too; enabled again, they work.
    let (s, u) = root.call(reqwest::Method::PATCH, "/api/v1/admin/users/alice", Some(json!({"disabled": true}))).await;
    assert_eq!((s, u["disabled"].as_bool()), (200, Some(true)), "{u}");
    let (s, e) = alice.get("/api/v1/conversations").await;
    assert_eq!(s, 401, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("disabled"), "{e}");
    root.call(reqwest::Method::PATCH, "/api/v1/admin/users/alice", Some(json!({"disabled": false}))).await;
    assert_eq!(alice.get("/api/v1/conversations").await.0, 200);
    let (s, e) = root.call(reqwest::Method::PATCH, "/api/v1/admin/users/root", Some(json!({"disabled": true}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (409, Some("self_disable")), "{e}");
    assert_eq!(root.get("/api/v1/admin/users/nobody").await.0, 404);

    // The CLI, as an operator uses it.
    let (code, out, err) = cli(&h.http, ROOT, &["users", "create", "dave"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("created dave"), "{out}");
    let (code, out, err) = cli(&h.http, ROOT, &["keys", "create", "dave", "--read-only", "--expires-in", "1h", "--name", "ci"]);
    assert_eq!(code, 0, "{err}");
    let dave_key = out.trim().to_owned();
    assert!(dave_key.starts_with("hal_") && err.contains("shown once"), "{out} {err}");
    let (s, me) = h.api(&dave_key).get("/api/v1/me").await;
    assert_eq!((s, me["user"].as_str(), me["scope"].as_str()), (200, Some("dave"), Some("read_only")), "{me}");
    let (_, out, _) = cli(&h.http, ROOT, &["keys", "ls", "dave"]);
    let dave_id = out.split_whitespace().next().unwrap().to_owned();
    assert!(out.contains("scope=read_only") && out.contains("name=ci") && !out.contains(&dave_key), "{out}");
    let (code, out, err) = cli(&h.http, ROOT, &["keys", "revoke", &dave_id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("revoked"), "{out}");
    assert_eq!(h.api(&dave_key).get("/api/v1/me").await.0, 401);
    let (code, out, _) = cli(&h.http, ROOT, &["users", "ls"]);
    assert_eq!(code, 0);
    assert!(out.contains("root") && out.contains("admin") && out.contains("dave"), "{out}");
    let (code, _, err) = cli(&h.http, ALICE, &["users", "ls"]);
    assert!(code != 0 && err.contains("forbidden"), "{err}");
    let (code, _, err) = cli(&h.http, "not-a-key-at-all", &["users", "ls"]);
    assert!(code != 0 && err.contains("unauthorized"), "{err}");
    let (code, _, err) = cli("http://127.0.0.1:9", ROOT, &["users", "ls"]);
    assert!(code != 0 && err.contains("cannot reach Halyard"), "{err}");

    // Every administrative action left an audit record on the bus.
    let js = async_nats::jetstream::new(admin_bus);
    let stream = js.get_stream("HALYARD_SYSTEM").await.unwrap();
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: "halyard.sys.audit.>".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut actions = Vec::new();
    while let Ok(Some(Ok(msg))) = tokio::time::timeout(Duration::from_secs(2), messages.next()).await {
        let env: Value = rmp_serde::from_slice(&msg.payload).unwrap();
        let record = &env["payload"];
        assert_eq!(record["kind"], "audit");
        actions.push(format!(
            "{} {} by {}",
            record["action"].as_str().unwrap(),
            record["target"].as_str().unwrap(),
            record["actor"].as_str().unwrap()
        ));
    }
    let expected_prefixes = [
        "user.create carol by root",
        "key.create",
        "key.create",
        "key.create",
        &format!("key.revoke {id} by root"),
        "user.update alice by root",
        "user.update alice by root",
        "user.create dave by root",
        "key.create",
        &format!("key.revoke {dave_id} by root"),
    ];
    assert_eq!(actions.len(), expected_prefixes.len(), "{actions:?}");
    for (a, p) in actions.iter().zip(expected_prefixes) {
        assert!(a.starts_with(p), "{a} is not {p}: {actions:?}");
    }
}

#[tokio::test]
async fn failed_authentications_slow_the_guesser_and_never_refuse_a_valid_key() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(opts(&llm).set("HALYARD_AUTH_FAILURES_PER_MINUTE", "5"));
    let http = reqwest::Client::new();
    // A hundred failed sign-ins from one address, at once: past the budget of five they are
    // answered 429 (after a pause), with how long to wait.
    let tries = (0..100).map(|i| {
        let http = http.clone();
        let url = format!("{}/api/v1/session", h.http);
        async move {
            let resp = http.post(url).json(&json!({"api_key": format!("guess-number-{i}")})).send().await.unwrap();
            (resp.status().as_u16(), resp.headers().contains_key("retry-after"))
        }
    });
    let answers = futures::future::join_all(tries).await;
    assert_eq!(answers.iter().filter(|(s, _)| *s == 401).count(), 5, "{answers:?}");
    assert!(answers.iter().filter(|(s, _)| *s == 429).all(|(_, retry)| *retry), "{answers:?}");
    assert_eq!(answers.iter().filter(|(s, _)| *s == 429).count(), 95, "{answers:?}");
    // The address is limited for guesses, never for a right key: Alice signs in and reads.
    let (s, _) = h.api(ALICE).get("/api/v1/me").await;
    assert_eq!(s, 200);
    let resp = http.post(format!("{}/api/v1/session", h.http)).json(&json!({"api_key": ALICE})).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let (s, e) = h.api("guess-once-more").get("/api/v1/me").await;
    assert_eq!((s, e["error"]["code"].as_str()), (429, Some("too_many_failed_authentications")), "{e}");

    // Guesses at one issued key count against that key too, from any address; its real
    // secret still works.
    let (s, key) = h.api(ROOT).post("/api/v1/admin/users/alice/keys", json!({"name": "laptop"})).await;
    assert_eq!(s, 201, "{key}");
    let real = key["key"].as_str().unwrap().to_owned();
    let id = key["id"].as_str().unwrap();
    let forged = format!("hal_{id}_{}", "0".repeat(real.len() - id.len() - 5));
    let mut last = 0;
    // Each from an address of its own: the key's count, not an address's, says 429.
    for i in 0..6 {
        let from: std::net::IpAddr = format!("127.0.0.{}", 10 + i).parse().unwrap();
        let client = reqwest::Client::builder().local_address(from).build().unwrap();
        last = client.get(format!("{}/api/v1/me", h.http)).bearer_auth(&forged).send().await.unwrap().status().as_u16();
    }
    assert_eq!(last, 429, "guesses at one key id are counted");
    let (s, me) = h.api(&real).get("/api/v1/me").await;
    assert_eq!((s, me["user"].as_str()), (200, Some("alice")), "{me}");
}

#[tokio::test]
async fn every_security_relevant_action_is_in_the_audit_trail_and_no_secret_is() {
    init();
    const SECRET: &str = "s3cr3t-audit-value-8842";
    const LLM_KEY: &str = "sk-audit-llm-key-1177";
    const GIT_TOKEN: &str = "ghp_audit_git_token_5521";
    let llm = ScriptedLlm::start().await;
    llm.fallback(|_| halyard_tests::Reply::finish("ready"));
    let h = Halyard::start(opts(&llm).set("HALYARD_LLM_PROFILE_ALLOW", "loopback"));
    let (root, alice) = (h.api(ROOT), h.api(ALICE));
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", h.http);

    // Sign-ins: a refused one (what was typed is not kept), one that works, and its end.
    let typed = "hal_0123456789abcdef_not-the-secret-typed-9931";
    let refused = http.post(url("/api/v1/session")).json(&json!({"api_key": typed})).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let signed = http.post(url("/api/v1/session")).json(&json!({"api_key": ALICE})).send().await.unwrap();
    assert_eq!(signed.status(), 200);
    let cookie = signed.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let out = http
        .delete(url("/api/v1/session"))
        .header("cookie", &cookie)
        .header("origin", &h.http)
        .header("x-halyard-csrf", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);

    // Keys, users, secrets, settings, providers, servers, a share link, a terminal, automations.
    let (s, key) = alice.post("/api/v1/me/keys", json!({"name": "laptop"})).await;
    assert_eq!(s, 201, "{key}");
    let issued = key["key"].as_str().unwrap().to_owned();
    assert_eq!(alice.call(reqwest::Method::DELETE, &format!("/api/v1/me/keys/{}", key["id"].as_str().unwrap()), None).await.0, 200);
    assert_eq!(root.post("/api/v1/admin/users", json!({"name": "erin"})).await.0, 201);
    assert_eq!(root.call(reqwest::Method::PATCH, "/api/v1/admin/users/erin", Some(json!({"disabled": true}))).await.0, 200);
    let put = |path: &'static str, body: Value| {
        let alice = h.api(ALICE);
        async move { alice.call(reqwest::Method::PUT, path, Some(body)).await }
    };
    assert_eq!(put("/api/v1/secrets/DB_PASSWORD", json!({"value": SECRET})).await.0, 201);
    let (s, p) = put("/api/v1/llm-profiles/mine", json!({"base_url": llm.base_url, "model": "m1", "api_key": LLM_KEY})).await;
    assert_eq!(s, 201, "{p}");
    let (s, p) = put("/api/v1/git-providers/work", json!({"kind": "generic", "host": "git.example.com", "token": GIT_TOKEN})).await;
    assert_eq!(s, 201, "{p}");
    assert_eq!(put("/api/v1/mcp-servers/tools", json!({"transport": "stdio", "command": "true"})).await.0, 201);
    assert_eq!(put("/api/v1/settings", json!({"llm_profile": "mine", "confirmation_policy": "never"})).await.0, 200);
    for path in ["/api/v1/secrets/DB_PASSWORD", "/api/v1/mcp-servers/tools", "/api/v1/git-providers/work"] {
        assert_eq!(alice.call(reqwest::Method::DELETE, path, None).await.0, 204, "{path}");
    }
    let (conv, _) = alice.start_ready(json!({"message": "hello"})).await;
    assert_eq!(alice.post(&format!("/api/v1/conversations/{conv}/share"), json!({})).await.0, 201);
    assert_eq!(alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}/share"), None).await.0, 204);
    let ws = format!("{}/api/v1/conversations/{conv}/terminal/ws", h.http.replacen("http", "ws", 1));
    let mut request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(ws.as_str()).unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {ALICE}").parse().unwrap());
    let (terminal, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    drop(terminal);
    let (s, a) = alice
        .post("/api/v1/automations", json!({"name": "Nightly", "trigger": {"kind": "schedule", "cron": "0 3 * * *"}, "prompt": "x"}))
        .await;
    assert_eq!(s, 201, "{a}");
    let automation = format!("/api/v1/automations/{}", a["id"].as_str().unwrap());
    assert_eq!(alice.call(reqwest::Method::PATCH, &automation, Some(json!({"enabled": false}))).await.0, 200);
    assert_eq!(alice.call(reqwest::Method::DELETE, &automation, None).await.0, 204);

    let expected = [
        "session.refused",
        "session.create",
        "session.end",
        "key.create",
        "key.revoke",
        "user.create",
        "user.update",
        "secret.put",
        "llm_profile.put",
        "git_provider.put",
        "mcp_server.put",
        "settings.update",
        "secret.delete",
        "mcp_server.delete",
        "git_provider.delete",
        "share.create",
        "share.revoke",
        "terminal.open",
        "automation.create",
        "automation.update",
        "automation.delete",
    ];
    // The trail, as an operator exports it (the projection may be a moment behind).
    let deadline = Instant::now() + Duration::from_secs(20);
    let export = loop {
        let text = http.get(url("/api/v1/admin/audit?format=jsonl")).bearer_auth(ROOT).send().await.unwrap().text().await.unwrap();
        if expected.iter().all(|a| text.contains(&format!("\"action\":\"{a}\""))) || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let records: Vec<Value> = export.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let actions: Vec<&str> = records.iter().map(|r| r["action"].as_str().unwrap()).collect();
    for a in expected {
        assert!(actions.contains(&a), "no {a} in {actions:?}");
    }
    for secret in [SECRET, LLM_KEY, GIT_TOKEN, ALICE, ROOT, issued.as_str(), "not-the-secret-typed", cookie.as_str()] {
        assert!(!export.contains(secret), "the audit trail holds a secret ({secret})");
    }
    let find = |action: &str| records.iter().find(|r| r["action"] == action).unwrap().clone();
    assert_eq!(
        (find("session.refused")["actor"].as_str(), find("session.refused")["target"].as_str()),
        (Some("-"), Some("0123456789abcdef"))
    );
    assert_eq!(find("secret.put")["target"], "DB_PASSWORD");
    assert_eq!(find("terminal.open")["target"], conv.as_str());
    assert_eq!(find("user.update")["detail"], json!({"disabled": true}));
    assert!(find("session.create")["client"].as_str().is_some_and(|c| c.starts_with("127.")), "{:?}", find("session.create"));
    // Newest first, and the time is RFC 3339.
    let times: Vec<&str> = records.iter().map(|r| r["time"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");

    // Pages by cursor cover the trail once; filters by actor and kind of action.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let (s, page) = root.get(&format!("/api/v1/admin/audit?limit=4{cursor}")).await;
        assert_eq!(s, 200, "{page}");
        seen.extend(page["items"].as_array().unwrap().iter().map(|r| r.to_string()));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), records.len());
    assert_eq!(seen.iter().collect::<std::collections::BTreeSet<_>>().len(), records.len(), "a record came twice");
    let (_, mine) = root.get("/api/v1/admin/audit?actor=alice&action=secret.").await;
    let got: Vec<&str> = mine["items"].as_array().unwrap().iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(got, vec!["secret.delete", "secret.put"], "{mine}");
    let (_, later) = root.get(&format!("/api/v1/admin/audit?from={}", times[0].replace('+', "%2B"))).await;
    assert!(!later["items"].as_array().unwrap().is_empty() && later["items"].as_array().unwrap().len() < records.len(), "{later}");
    let (s, e) = root.get("/api/v1/admin/audit?from=yesterday").await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_query")), "{e}");

    // Only operators read it; nobody changes or removes it.
    assert_eq!(alice.get("/api/v1/admin/audit").await.0, 403);
    for method in [reqwest::Method::DELETE, reqwest::Method::PUT, reqwest::Method::PATCH, reqwest::Method::POST] {
        let s = root.call(method.clone(), "/api/v1/admin/audit", Some(json!({}))).await.0;
        assert_eq!(s, 405, "{method} /admin/audit");
    }
}

#[tokio::test]
async fn organizations_have_members_with_roles_and_never_lose_their_last_owner() {
    init();
    let llm = ScriptedLlm::start().await;
    let mut o = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root");
    o.api_keys = "root:root-admin-key,alice:alice-secret-key,bob:bob-secret-key,carol:carol-secret-key,dave:dave-secret-key".into();
    let h = Halyard::start(o);
    let (alice, bob, carol, dave) = (h.api(ALICE), h.api("bob-secret-key"), h.api("carol-secret-key"), h.api("dave-secret-key"));
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or_default().to_owned();
    let patch = reqwest::Method::PATCH;
    let delete = reqwest::Method::DELETE;

    let (s, org) = alice.post("/api/v1/orgs", json!({"name": "acme"})).await;
    assert_eq!((s, org["role"].as_str(), org["members"].as_u64()), (201, Some("owner"), Some(1)), "{org}");
    let (s, e) = bob.post("/api/v1/orgs", json!({"name": "acme"})).await;
    assert_eq!((s, code(&e)), (409, "org_exists".into()), "{e}");
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "a b"})).await.0, 400);
    // To anyone outside, it does not exist.
    assert_eq!(bob.get("/api/v1/orgs/acme").await.0, 404);
    assert_eq!(bob.post("/api/v1/orgs/acme/members", json!({"user": "bob"})).await.0, 404);

    // Members: invited by owners and admins, members once they accept; roles given and changed
    // by owners only.
    let (s, invited) = alice.post("/api/v1/orgs/acme/members", json!({"user": "bob"})).await;
    assert_eq!((s, &invited["invited"]), (202, &json!([{"user": "bob", "role": "member"}])), "{invited}");
    assert_eq!(bob.get("/api/v1/orgs/acme").await.0, 404, "not a member before saying yes");
    let (_, waiting) = bob.get("/api/v1/me/invitations").await;
    assert_eq!(waiting["items"][0]["org"], "acme", "{waiting}");
    assert_eq!((waiting["items"][0]["role"].as_str(), waiting["items"][0]["invited_by"].as_str()), (Some("member"), Some("alice")));
    assert_eq!(carol.get("/api/v1/me/invitations").await.1["items"], json!([]), "only the invitee sees it");
    assert_eq!(carol.post("/api/v1/me/invitations/acme/accept", json!({})).await.0, 404, "nobody accepts another's invitation");
    let (s, joined) = bob.post("/api/v1/me/invitations/acme/accept", json!({})).await;
    assert_eq!((s, joined["role"].as_str()), (200, Some("member")), "{joined}");
    // A name nobody has is answered like any other: the answer tells no one who has an account.
    let (s, e) = alice.post("/api/v1/orgs/acme/members", json!({"user": "nobody"})).await;
    assert_eq!(s, 202, "{e}");
    let (s, e) = alice.post("/api/v1/orgs/acme/members", json!({"user": "bob"})).await;
    assert_eq!((s, code(&e)), (409, "already_member".into()), "{e}");
    let (_, mine) = bob.get("/api/v1/orgs").await;
    assert_eq!(mine["items"], json!([{"name": "acme", "role": "member", "members": 2, "created_at": org["created_at"]}]), "{mine}");
    assert_eq!(bob.post("/api/v1/orgs/acme/members", json!({"user": "carol"})).await.0, 403, "a member invites nobody");
    assert_eq!(alice.call(patch.clone(), "/api/v1/orgs/acme/members/bob", Some(json!({"role": "admin"}))).await.0, 200);
    bob.add_to_org("acme", &carol, None).await;
    assert_eq!(bob.post("/api/v1/orgs/acme/members", json!({"user": "dave", "role": "admin"})).await.0, 403, "only owners give roles");
    assert_eq!(bob.call(patch.clone(), "/api/v1/orgs/acme/members/carol", Some(json!({"role": "admin"}))).await.0, 403);
    assert_eq!(alice.call(patch.clone(), "/api/v1/orgs/acme/members/carol", Some(json!({"role": "chief"}))).await.0, 400);
    let (_, listed) = carol.get("/api/v1/orgs/acme/members").await;
    assert_eq!(
        listed["items"],
        json!([{"user": "alice", "role": "owner"}, {"user": "bob", "role": "admin"}, {"user": "carol", "role": "member"}]),
        "{listed}"
    );
    // An invitation declined is gone; one withdrawn too.
    assert_eq!(alice.post("/api/v1/orgs/acme/members", json!({"user": "dave"})).await.0, 202);
    assert_eq!(dave.post("/api/v1/me/invitations/acme/decline", json!({})).await.0, 204);
    assert_eq!(dave.post("/api/v1/me/invitations/acme/accept", json!({})).await.0, 404, "declined is declined");
    assert_eq!(dave.get("/api/v1/orgs/acme").await.0, 404);
    assert_eq!(alice.call(delete.clone(), "/api/v1/orgs/acme/members/nobody", None).await.0, 204, "withdrawn");
    assert_eq!(carol.get("/api/v1/orgs/acme/members").await.1["invited"], json!([]));
    // Admins remove members, not owners; anyone leaves.
    assert_eq!(bob.call(delete.clone(), "/api/v1/orgs/acme/members/alice", None).await.0, 403);
    assert_eq!(bob.call(delete.clone(), "/api/v1/orgs/acme/members/carol", None).await.0, 204);
    assert_eq!(carol.get("/api/v1/orgs/acme").await.0, 404, "a removed member no longer sees it");
    alice.add_to_org("acme", &dave, None).await;
    assert_eq!(dave.call(delete.clone(), "/api/v1/orgs/acme/members/dave", None).await.0, 204);

    // The last owner can neither leave nor step down; with another owner, they can.
    let (s, e) = alice.call(delete.clone(), "/api/v1/orgs/acme/members/alice", None).await;
    assert_eq!((s, code(&e)), (409, "last_owner".into()), "{e}");
    let (s, e) = alice.call(patch.clone(), "/api/v1/orgs/acme/members/alice", Some(json!({"role": "member"}))).await;
    assert_eq!((s, code(&e)), (409, "last_owner".into()), "{e}");
    assert_eq!(alice.call(patch.clone(), "/api/v1/orgs/acme/members/bob", Some(json!({"role": "owner"}))).await.0, 200);
    assert_eq!(alice.call(delete.clone(), "/api/v1/orgs/acme/members/alice", None).await.0, 204);
    // A user in several organizations.
    assert_eq!(bob.post("/api/v1/orgs", json!({"name": "beta"})).await.0, 201);
    let (_, mine) = bob.get("/api/v1/orgs").await;
    let names: Vec<(&str, &str)> =
        mine["items"].as_array().unwrap().iter().map(|o| (o["name"].as_str().unwrap(), o["role"].as_str().unwrap())).collect();
    assert_eq!(names, vec![("acme", "owner"), ("beta", "owner")]);

    // The organization's audit trail: its owners and admins read what happened in it, only that.
    bob.add_to_org("acme", &carol, None).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let trail = loop {
        let (s, page) = bob.get("/api/v1/orgs/acme/audit?limit=100").await;
        assert_eq!(s, 200, "{page}");
        let actions: Vec<String> = page["items"].as_array().unwrap().iter().map(|r| r["action"].as_str().unwrap().to_owned()).collect();
        if actions.len() >= 18 || Instant::now() > deadline {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let items = trail["items"].as_array().unwrap();
    assert!(items.iter().all(|r| r["org"] == "acme"), "{trail}");
    let said: Vec<String> = items
        .iter()
        .rev()
        .map(|r| format!("{} {} {}", r["actor"].as_str().unwrap(), r["action"].as_str().unwrap(), r["target"].as_str().unwrap()))
        .collect();
    assert_eq!(
        said,
        [
            "alice org.create acme",
            "alice org.member_invite bob",
            "bob org.member_add bob",
            "alice org.member_invite nobody",
            "alice org.member_role bob",
            "bob org.member_invite carol",
            "carol org.member_add carol",
            "alice org.member_invite dave",
            "dave org.invite_decline dave",
            "alice org.invite_withdraw nobody",
            "bob org.member_remove carol",
            "alice org.member_invite dave",
            "dave org.member_add dave",
            "dave org.member_leave dave",
            "alice org.member_role bob",
            "alice org.member_leave alice",
            "bob org.member_invite carol",
            "carol org.member_add carol",
        ],
        "{trail}"
    );
    assert_eq!(carol.get("/api/v1/orgs/acme/audit").await.0, 403, "a member does not read it");
    assert_eq!(dave.get("/api/v1/orgs/acme/audit").await.0, 404);

    // The CLI says the same.
    let org_cli = |key: &str, args: &[&str]| {
        let out = std::process::Command::new(halyard_bin())
            .arg("org")
            .args(args)
            .env_clear()
            .env("HALYARD_URL", &h.http)
            .env("HALYARD_API_KEY", key)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = org_cli("bob-secret-key", &["add", "acme", "dave", "--role", "admin"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "bob  owner\ncarol  member\ndave  admin (invited)\ninvited dave to acme: they join when they accept (halyard org accept acme)\n"
    );
    let (code, out, _) = org_cli("dave-secret-key", &["invitations"]);
    assert!(code == 0 && out.starts_with("acme  as admin  from bob  "), "{out}");
    let (code, out, err) = org_cli("dave-secret-key", &["accept", "acme"]);
    assert_eq!((code, out.as_str()), (0, "joined acme as admin\n"), "{err}");
    let (code, out, _) = org_cli("dave-secret-key", &["ls"]);
    assert_eq!((code, out.as_str()), (0, "acme  admin  3 members\n"));
    let (code, _, err) = org_cli("carol-secret-key", &["role", "acme", "carol", "owner"]);
    assert!(code != 0 && err.contains("only the organization's owners change roles"), "{err}");
}

#[tokio::test]
async fn usage_reports_add_up_to_the_conversations_own_metrics() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(|_| halyard_tests::Reply::finish("Done, with a few words of answer."));
    let mut o = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root").set("HALYARD_LLM_PRICE", "1.5,6,0.75");
    o.api_keys = "root:root-admin-key,alice:alice-secret-key,bob:bob-secret-key".into();
    let h = Halyard::start(o);
    let (root, alice, bob) = (h.api(ROOT), h.api(ALICE), h.api("bob-secret-key"));
    let mut convs = Vec::new();
    for (api, text) in [(&alice, "write the first thing"), (&alice, "and a second, longer thing to do"), (&bob, "bob's")] {
        let (conv, _) = api.start_ready(json!({"message": text})).await;
        api.wait_finished(&conv, 1).await;
        convs.push(conv);
    }
    // Alice's first sandbox runs a second or more, then pauses: its time counts.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (_, c) = alice.get(&format!("/api/v1/conversations/{}", convs[0])).await;
    let sandbox = c["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(alice.post(&format!("/api/v1/sandboxes/{sandbox}/pause"), json!({})).await.0, 202);

    // What the conversations say they used.
    let mut own = json!({"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "llm_calls": 0});
    for conv in &convs[..2] {
        let (_, c) = alice.get(&format!("/api/v1/conversations/{conv}")).await;
        let m = &c["metrics"];
        assert!(m["llm_calls"].as_u64().unwrap() >= 1 && m["cost_usd"].as_f64().unwrap() > 0.0, "{c}");
        own["tokens_in"] = (own["tokens_in"].as_u64().unwrap() + m["prompt_tokens"].as_u64().unwrap()).into();
        own["tokens_out"] = (own["tokens_out"].as_u64().unwrap() + m["completion_tokens"].as_u64().unwrap()).into();
        own["cost_usd"] = (own["cost_usd"].as_f64().unwrap() + m["cost_usd"].as_f64().unwrap()).into();
        own["llm_calls"] = (own["llm_calls"].as_u64().unwrap() + m["llm_calls"].as_u64().unwrap()).into();
    }
    // The report, once the projection has the pause.
    let deadline = Instant::now() + Duration::from_secs(20);
    let report = loop {
        let (s, r) = alice.get("/api/v1/me/usage").await;
        assert_eq!(s, 200, "{r}");
        if r["total"]["sandbox_seconds"].as_u64().unwrap_or(0) >= 1 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let total = &report["total"];
    assert_eq!(
        (&total["tokens_in"], &total["tokens_out"], &total["llm_calls"], &total["conversations"]),
        (&own["tokens_in"], &own["tokens_out"], &own["llm_calls"], &json!(2)),
        "{report}"
    );
    assert!((total["cost_usd"].as_f64().unwrap() - own["cost_usd"].as_f64().unwrap()).abs() < 1e-5, "{report} vs {own}");
    assert!(total["sandbox_seconds"].as_u64().unwrap() >= 1, "{report}");
    let today = &report["rows"][0];
    assert_eq!((report["rows"].as_array().unwrap().len(), today["day"].as_str().map(str::len)), (1, Some(10)), "{report}");
    // By model: the calls under the model, starts and sandbox time under no model.
    let (_, by_model) = alice.get("/api/v1/me/usage?group_by=model").await;
    let rows = by_model["rows"].as_array().unwrap();
    let none = rows.iter().find(|r| r["model"] == "").unwrap();
    let model = rows.iter().find(|r| r["model"] != "").unwrap();
    assert_eq!((&none["conversations"], &none["llm_calls"], &model["tokens_in"]), (&json!(2), &json!(0), &own["tokens_in"]), "{by_model}");
    // CSV, and a window that holds nothing.
    let csv = reqwest::Client::new()
        .get(format!("{}/api/v1/me/usage?format=csv", h.http))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("day,tokens_in,tokens_out,cached_tokens,cost_usd,conversations,llm_calls,sandbox_seconds"));
    assert!(lines.next().unwrap().contains(&format!(",{},{},", own["tokens_in"], own["tokens_out"])), "{csv}");
    let (_, old) = alice.get("/api/v1/me/usage?from=2020-01-01&to=2020-02-01").await;
    assert_eq!((old["rows"].as_array().unwrap().len(), &old["total"]["llm_calls"]), (0, &json!(0)), "{old}");

    // Bob sees his own; an operator sees everyone's by user.
    let (_, bobs) = bob.get("/api/v1/me/usage").await;
    assert_eq!(bobs["total"]["conversations"], 1, "{bobs}");
    let (_, everyone) = root.get("/api/v1/admin/usage?group_by=user").await;
    let users: Vec<(&str, u64)> =
        everyone["rows"].as_array().unwrap().iter().map(|r| (r["user"].as_str().unwrap(), r["conversations"].as_u64().unwrap())).collect();
    assert_eq!(users, vec![("alice", 2), ("bob", 1)], "{everyone}");
    assert_eq!(bob.get("/api/v1/admin/usage").await.0, 403);
    let (s, e) = bob.get("/api/v1/me/usage?group_by=user").await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_query")), "{e}");
    assert_eq!(bob.get("/api/v1/me/usage?from=last-week").await.0, 400);
}

#[tokio::test]
async fn an_organizations_enforced_profile_is_what_its_members_conversations_use() {
    init();
    const ORG_KEY: &str = "sk-org-team-key-7781";
    let llm = ScriptedLlm::start().await;
    llm.fallback(|_| halyard_tests::Reply::finish("from the operator's or bob's own model"));
    let team = ScriptedLlm::start().await;
    team.fallback(|_| halyard_tests::Reply::finish("from the team's model"));
    let mut o = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root").set("HALYARD_LLM_PROFILE_ALLOW", "loopback");
    o.api_keys = "root:root-admin-key,alice:alice-secret-key,bob:bob-secret-key,carol:carol-secret-key".into();
    let h = Halyard::start(o);
    let (alice, bob, carol) = (h.api(ALICE), h.api("bob-secret-key"), h.api("carol-secret-key"));
    let put = reqwest::Method::PUT;
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or_default().to_owned();
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    alice.add_to_org("acme", &bob, None).await;

    // The organization's profile: set up by its owner, its key never shown to anyone.
    let profile = json!({"base_url": team.base_url, "model": "team-model", "api_key": ORG_KEY});
    let (s, p) = alice.call(put.clone(), "/api/v1/orgs/acme/llm-profiles/team", Some(profile.clone())).await;
    assert_eq!((s, p["has_api_key"].as_bool()), (201, Some(true)), "{p}");
    assert_eq!(bob.call(put.clone(), "/api/v1/orgs/acme/llm-profiles/mine", Some(profile)).await.0, 403, "a member sets none up");
    let (s, listed) = bob.get("/api/v1/orgs/acme/llm-profiles").await;
    assert_eq!(
        (s, listed["items"][0]["name"].as_str(), listed["items"][0]["model"].as_str()),
        (200, Some("team"), Some("team-model")),
        "{listed}"
    );
    assert!(!listed.to_string().contains(ORG_KEY), "{listed}");
    assert_eq!(carol.get("/api/v1/orgs/acme/llm-profiles").await.0, 404);
    let (s, e) = alice.call(put.clone(), "/api/v1/orgs/acme/settings", Some(json!({"enforce_llm_profile": true}))).await;
    assert_eq!((s, code(&e)), (400, "invalid_field".into()), "{e}");
    let (s, e) = alice.call(put.clone(), "/api/v1/orgs/acme/settings", Some(json!({"default_llm_profile": "nope"}))).await;
    assert_eq!((s, code(&e)), (400, "unknown_llm_profile".into()), "{e}");
    let (s, st) = alice
        .call(put.clone(), "/api/v1/orgs/acme/settings", Some(json!({"default_llm_profile": "team", "enforce_llm_profile": true})))
        .await;
    assert_eq!(
        (s, &st["default_llm_profile"], &st["enforce_llm_profile"], &st["require_sso"]),
        (200, &json!("team"), &json!(true), &json!(false)),
        "{st}"
    );
    assert_eq!(bob.call(put.clone(), "/api/v1/orgs/acme/settings", Some(json!({}))).await.0, 403);

    // Bob's conversation in the organization runs on its profile, with its key.
    let bobs = json!({"base_url": llm.base_url, "model": "bob-model", "api_key": "sk-bob-own"});
    assert_eq!(bob.call(put.clone(), "/api/v1/llm-profiles/mine", Some(bobs)).await.0, 201);
    let (conv, _) = bob.start_ready(json!({"message": "hello team", "org": "acme"})).await;
    bob.wait_finished(&conv, 1).await;
    let (_, c) = bob.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(c["org"], "acme", "{c}");
    assert!(team.requests().iter().any(|r| r["model"] == "team-model"), "the team's server was not asked");
    assert!(team.auth_headers().iter().all(|a| a.as_deref() == Some(&format!("Bearer {ORG_KEY}"))), "{:?}", team.auth_headers());
    // Another profile is refused while the organization enforces its own, at the start and later.
    let (s, e) = bob.post("/api/v1/conversations", json!({"message": "x", "org": "acme", "llm_profile": "mine"})).await;
    assert_eq!((s, code(&e)), (403, "llm_profile_enforced".into()), "{e}");
    let (s, e) = bob.call(put.clone(), &format!("/api/v1/conversations/{conv}/llm-profile"), Some(json!({"profile": "mine"}))).await;
    assert_eq!((s, code(&e)), (403, "llm_profile_enforced".into()), "{e}");
    // Outside it, nothing; not in it, nothing at all.
    assert_eq!(carol.post("/api/v1/conversations", json!({"message": "x", "org": "acme"})).await.0, 404);
    let (own, _) = bob.start_ready(json!({"message": "my own", "llm_profile": "mine"})).await;
    bob.wait_finished(&own, 1).await;
    assert!(llm.requests().iter().any(|r| r["model"] == "bob-model"));
    // Not enforced: a member may use their own in the organization too.
    assert_eq!(alice.call(put, "/api/v1/orgs/acme/settings", Some(json!({"default_llm_profile": "team"}))).await.0, 200);
    assert_eq!(bob.post("/api/v1/conversations", json!({"message": "x", "org": "acme", "llm_profile": "mine"})).await.0, 202);
    let (_, trail) = alice.get("/api/v1/orgs/acme/audit").await;
    assert!(!trail.to_string().contains(ORG_KEY) && trail.to_string().contains("org.llm_profile.put"), "{trail}");

    // The organization's usage: its conversations only (not Bob's own), read by its owner.
    let (_, c) = bob.get(&format!("/api/v1/conversations/{conv}")).await;
    let metrics = c["metrics"].clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    let usage = loop {
        let (s, u) = alice.get("/api/v1/orgs/acme/usage?group_by=user").await;
        assert_eq!(s, 200, "{u}");
        if u["total"]["conversations"] == 2 || Instant::now() > deadline {
            break u;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let row = &usage["rows"][0];
    assert_eq!((usage["rows"].as_array().unwrap().len(), row["user"].as_str()), (1, Some("bob")), "{usage}");
    // Two conversations started in it; the one that finished made its calls there.
    assert_eq!(row["conversations"], 2, "{usage}");
    assert!(row["llm_calls"].as_u64().unwrap() >= metrics["llm_calls"].as_u64().unwrap(), "{usage} {metrics}");
    let (_, mine) = bob.get("/api/v1/me/usage").await;
    assert_eq!(mine["total"]["conversations"], 3, "Bob's own report counts all of his: {mine}");
    assert_eq!(bob.get("/api/v1/orgs/acme/usage").await.0, 403, "a member does not read it");
    assert_eq!(carol.get("/api/v1/orgs/acme/usage").await.0, 404);
}

/// The text of a chat request's latest user message, and whether a tool answered since.
fn latest(req: &Value) -> (String, bool) {
    let turn = halyard_tests::llm::latest_turn(req);
    (turn.first().map(|m| m["content"].to_string()).unwrap_or_default(), turn.iter().any(|m| m["role"] == "tool"))
}

#[tokio::test]
async fn an_organizations_budget_alerts_then_stops_its_runs_and_refuses_new_ones() {
    init();
    let llm = ScriptedLlm::start().await;
    // Output tokens are what cost here (a cent each, below); an answer's tokens are its length
    // over four, so each conversation's spending is known in advance.
    llm.fallback(|req| match latest(req) {
        (t, false) if t.contains("please hold") => halyard_tests::Reply::tool("terminal", json!({"command": "echo held"})),
        (t, true) if t.contains("please hold") => halyard_tests::Reply::finish("after the hold"),
        (t, _) if t.contains("something big") => halyard_tests::Reply::Text("x".repeat(680)),
        (t, _) if t.contains("one more") => halyard_tests::Reply::Text("y".repeat(120)),
        _ => halyard_tests::Reply::Text("ok".into()),
    });
    let receiver = halyard_tests::Receiver::start().await;
    let mut o = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root").set("HALYARD_WEBHOOK_ALLOW", "loopback");
    o.api_keys = "root:root-admin-key,alice:alice-secret-key,bob:bob-secret-key".into();
    let h = Halyard::start(o);
    let (alice, bob) = (h.api(ALICE), h.api("bob-secret-key"));
    let put = reqwest::Method::PUT;
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or_default().to_owned();
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    alice.add_to_org("acme", &bob, None).await;

    // The organization's price for the model, over a built-in table that knows the usual ones.
    let price = json!({"input_per_million": 0.0, "output_per_million": 10000.0, "cached_per_million": 0.0});
    assert_eq!(bob.call(put.clone(), "/api/v1/orgs/acme/prices/scripted-model", Some(price.clone())).await.0, 403);
    let (s, e) = alice
        .call(put.clone(), "/api/v1/orgs/acme/prices/scripted-model", Some(json!({"input_per_million": -1.0, "output_per_million": 1.0})))
        .await;
    assert_eq!((s, code(&e)), (400, "invalid_field".into()), "{e}");
    let (s, p) = alice.call(put.clone(), "/api/v1/orgs/acme/prices/scripted-model", Some(price)).await;
    assert_eq!((s, p["source"].as_str()), (201, Some("org")), "{p}");
    let (_, prices) = bob.get("/api/v1/orgs/acme/prices").await;
    let row = |m: &str| prices["items"].as_array().unwrap().iter().find(|r| r["model"] == m).cloned().unwrap_or_default();
    assert_eq!((row("scripted-model")["output_per_million"].as_f64(), row("gpt-4o")["source"].as_str()), (Some(10000.0), Some("builtin")));
    let (s, e) = alice.call(put.clone(), "/api/v1/orgs/acme/settings", Some(json!({"monthly_budget_usd": -5}))).await;
    assert_eq!((s, code(&e)), (400, "invalid_field".into()), "{e}");
    let (s, st) = alice.call(put.clone(), "/api/v1/orgs/acme/settings", Some(json!({"monthly_budget_usd": 2.0}))).await;
    assert_eq!((s, st["monthly_budget_usd"].as_f64()), (200, Some(2.0)), "{st}");
    let (s, w) = bob.post("/api/v1/webhooks", json!({"url": receiver.url, "event_kinds": ["budget_alert"]})).await;
    assert_eq!(s, 201, "{w}");

    // Bob's first conversation asks to run a command ($0.08) and waits for his consent.
    let start = json!({"message": "please hold", "title": "held", "org": "acme", "confirmation_policy": "always"});
    let (held, _) = bob.start_ready(start).await;
    bob.wait_events(&held, "the wait", |ev| ev.iter().any(|e| e["status"] == "waiting_for_confirmation")).await;
    // Alice's answer costs $1.70: past 80 % of $2.
    let (big, _) = alice.start_ready(json!({"message": "something big", "title": "big", "org": "acme"})).await;
    let ev = alice.wait_events(&big, "the alert", |ev| ev.iter().any(|e| e["kind"] == "budget_alert")).await;
    let alert = ev.iter().find(|e| e["kind"] == "budget_alert").unwrap();
    assert_eq!((&alert["org"], &alert["percent"], &alert["budget_usd"]), (&json!("acme"), &json!(80), &json!(2.0)), "{alert}");
    assert!((alert["spent_usd"].as_f64().unwrap() - 1.78).abs() < 1e-6, "{alert}");
    // Bob's second, $0.30 more: 90 and 100 % at once.
    let (more, _) = bob.start_ready(json!({"message": "one more", "title": "more", "org": "acme"})).await;
    let ev = bob.wait_events(&more, "the alerts", |ev| ev.iter().filter(|e| e["kind"] == "budget_alert").count() == 2).await;
    let percents: Vec<&Value> = ev.iter().filter(|e| e["kind"] == "budget_alert").map(|e| &e["percent"]).collect();
    assert_eq!(percents, [&json!(90), &json!(100)]);

    // Spent: no new run in the organization, for anyone; Bob's own still start.
    for api in [&alice, &bob] {
        let (s, e) = api.post("/api/v1/conversations", json!({"message": "x", "org": "acme"})).await;
        assert_eq!((s, code(&e)), (402, "budget_exhausted".into()), "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("organization acme's monthly budget of $2.00"), "{e}");
    }
    let (s, e) = bob.post(&format!("/api/v1/conversations/{more}/messages"), json!({"text": "and again"})).await;
    assert_eq!((s, code(&e)), (402, "budget_exhausted".into()), "{e}");
    assert_eq!(bob.post("/api/v1/conversations", json!({"message": "x", "title": "own"})).await.0, 202);
    // The held run goes on once Bob consents, and stops before its next call, saying why.
    assert_eq!(bob.post(&format!("/api/v1/conversations/{held}/confirm"), json!({})).await.0, 202);
    let ev = bob.wait_events(&held, "the stop", |ev| ev.iter().any(|e| e["kind"] == "agent_error")).await;
    let stop = ev.iter().find(|e| e["kind"] == "agent_error").unwrap();
    assert_eq!(stop["code"], "budget_exhausted", "{stop}");
    assert!(ev.iter().any(|e| e["kind"] == "observation" && e["content"].as_str().is_some_and(|c| c.contains("held"))), "the command ran");
    assert!(!llm.requests().iter().any(|r| latest(r).0.contains("please hold") && latest(r).1), "no call after the budget was spent");

    // Bob's webhook had his conversation's alerts, signed like every delivery.
    let deadline = Instant::now() + Duration::from_secs(20);
    while receiver.accepted().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let delivered: Vec<Value> = receiver.accepted().iter().map(|r| r.json()).collect();
    assert_eq!(delivered.iter().map(|d| d["percent"].clone()).collect::<Vec<_>>(), [json!(90), json!(100)], "{delivered:?}");
    assert!(receiver.accepted().iter().all(|r| r.header("webhook-signature").is_some_and(|s| s.starts_with("v1,"))));

    // The page's banner reads the state: all of it for owners, their own for members.
    let (_, st) = alice.get("/api/v1/orgs/acme/budget").await;
    assert_eq!(
        (&st["org_budget"]["exhausted"], &st["org_budget"]["spent_usd"], st["members"].as_array().map(Vec::len)),
        (&json!(true), &json!(2.08), Some(2)),
        "{st}"
    );
    let (_, st) = bob.get("/api/v1/orgs/acme/budget").await;
    assert_eq!((&st["you"]["spent_usd"], st["members"].as_array().map(Vec::len)), (&json!(0.38), Some(0)), "{st}");

    // The CLI says the same.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(halyard_bin())
            .args(args)
            .env_clear()
            .env("HALYARD_URL", &h.http)
            .env("HALYARD_API_KEY", ALICE)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = cli(&["org", "budget", "acme"]);
    assert!(out.contains("organization: $2.08 of $2.00 (104 %), spent") && out.contains("bob: $0.38"), "{out}");
    assert!(cli(&["org", "prices", "acme"]).contains("scripted-model  in 0  out 10000  cached 0  (org)"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cli(&["usage", "--org", "acme", "--group-by", "user"]).contains("2.0800") {
        assert!(Instant::now() < deadline, "{}", cli(&["usage", "--org", "acme", "--group-by", "user"]));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let csv = cli(&["usage", "--org", "acme", "--group-by", "user", "--csv"]);
    assert!(csv.starts_with("user,tokens_in,") && csv.contains("\nalice,") && csv.contains("\nbob,"), "{csv}");

    // A larger budget for the organization, and one per member that Alice passed already.
    let (s, _) =
        alice.call(put, "/api/v1/orgs/acme/settings", Some(json!({"monthly_budget_usd": 100.0, "member_monthly_budget_usd": 1.0}))).await;
    assert_eq!(s, 200);
    let (s, e) = alice.post("/api/v1/conversations", json!({"message": "x", "org": "acme"})).await;
    assert_eq!((s, code(&e)), (402, "budget_exhausted".into()), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("alice's monthly budget in organization acme"), "{e}");
    assert_eq!(bob.post("/api/v1/conversations", json!({"message": "x", "title": "t", "org": "acme"})).await.0, 202);

    // The usage report prices the calls as the conversations did.
    let mut own = 0.0;
    for (api, conv) in [(&bob, &held), (&alice, &big), (&bob, &more)] {
        own += api.get(&format!("/api/v1/conversations/{conv}")).await.1["metrics"]["cost_usd"].as_f64().unwrap();
    }
    assert!((own - 2.08).abs() < 1e-6, "{own}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, u) = alice.get("/api/v1/orgs/acme/usage").await;
        let cost = u["total"]["cost_usd"].as_f64().unwrap_or(0.0);
        if (cost - own).abs() < 1e-6 {
            break;
        }
        assert!(Instant::now() < deadline, "{u}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, trail) = alice.get("/api/v1/orgs/acme/audit?action=org.").await;
    assert!(trail.to_string().contains("org.price.put") && trail.to_string().contains("\"monthly_budget_usd\":100.0"), "{trail}");
}

#[tokio::test]
async fn what_an_organization_offers_reaches_its_members_runs_and_its_secrets_are_never_read_back() {
    init();
    const VALUE: &str = "team-token-value-9931";
    let llm = ScriptedLlm::start().await;
    llm.fallback(|req| match latest(req) {
        (t, false) if t.contains("show the token") => {
            halyard_tests::Reply::tool("terminal", json!({"command": "echo \"token=$TEAM_TOKEN\" && echo \"$TEAM_TOKEN\" > t.txt"}))
        }
        _ => halyard_tests::Reply::finish("shown"),
    });
    let mut o = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root");
    o.api_keys = "root:root-admin-key,alice:alice-secret-key,bob:bob-secret-key,carol:carol-secret-key".into();
    let h = Halyard::start(o);
    let (alice, bob, carol) = (h.api(ALICE), h.api("bob-secret-key"), h.api("carol-secret-key"));
    let put = reqwest::Method::PUT;
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    alice.add_to_org("acme", &bob, None).await;

    // Set by its owner; a member neither sets nor reads one; an outsider sees no organization.
    let (s, v) = alice.call(put.clone(), "/api/v1/orgs/acme/secrets/TEAM_TOKEN", Some(json!({"value": VALUE, "description": "CI"}))).await;
    assert_eq!((s, v["name"].as_str()), (201, Some("TEAM_TOKEN")), "{v}");
    assert_eq!(bob.call(put.clone(), "/api/v1/orgs/acme/secrets/MINE", Some(json!({"value": "bobs-value-12345"}))).await.0, 403);
    assert_eq!(bob.call(reqwest::Method::DELETE, "/api/v1/orgs/acme/secrets/TEAM_TOKEN", None).await.0, 403);
    let (s, listed) = bob.get("/api/v1/orgs/acme/secrets").await;
    assert_eq!((s, listed["items"][0]["name"].as_str(), listed["items"][0]["description"].as_str()), (200, Some("TEAM_TOKEN"), Some("CI")));
    assert!(!listed.to_string().contains(VALUE), "{listed}");
    assert_eq!(carol.get("/api/v1/orgs/acme/secrets").await.0, 404);
    let (s, e) = alice.call(put.clone(), "/api/v1/orgs/acme/secrets/PATH", Some(json!({"value": "xxxxxxxxxxxxxxxx"}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("reserved_name")), "{e}");
    // And an MCP server of the team's, whose credential is the organization's secret.
    let time = json!({"transport": "stdio", "command": "/opt/halyard-mcp/bin/mcp-server-time --local-timezone UTC",
        "env": {"TIME_TOKEN": "${TEAM_TOKEN}"}});
    assert_eq!(bob.call(put.clone(), "/api/v1/orgs/acme/mcp-servers/time", Some(time.clone())).await.0, 403);
    assert_eq!(alice.call(put, "/api/v1/orgs/acme/mcp-servers/time", Some(time)).await.0, 201);
    let (s, servers) = bob.get("/api/v1/orgs/acme/mcp-servers").await;
    assert_eq!((s, servers["items"][0]["name"].as_str()), (200, Some("time")), "{servers}");
    assert_eq!(carol.get("/api/v1/orgs/acme/mcp-servers").await.0, 404);
    // And its skills: one always in the prompt, one the word `deploy` brings in.
    let style = json!({"content": "Sign every answer ACME-HOUSE-STYLE."});
    assert_eq!(bob.call(reqwest::Method::PUT, "/api/v1/orgs/acme/skills/house-style", Some(style.clone())).await.0, 403);
    assert_eq!(alice.call(reqwest::Method::PUT, "/api/v1/orgs/acme/skills/house-style", Some(style)).await.0, 201);
    let deploy = json!({"content": "---\ntriggers: [deploy]\n---\nDeploy with ./ship.sh only."});
    let (s, k) = alice.call(reqwest::Method::PUT, "/api/v1/orgs/acme/skills/deploying", Some(deploy)).await;
    assert_eq!((s, k["kind"].as_str(), &k["triggers"]), (201, Some("knowledge"), &json!(["deploy"])), "{k}");
    let (_, skills) = bob.get("/api/v1/orgs/acme/skills").await;
    assert_eq!(skills["items"].as_array().map(Vec::len), Some(2), "{skills}");

    // Bob's conversation in the organization has it in its shell, and shows it masked.
    let (conv, _) = bob.start_ready(json!({"message": "show the token", "title": "t", "org": "acme"})).await;
    let events = bob.wait_finished(&conv, 1).await;
    let text = serde_json::to_string(&events).unwrap();
    assert!(text.contains("token=<secret:TEAM_TOKEN>") && !text.contains(VALUE), "{text}");
    let mcp = |events: &[Value]| events.iter().find(|e| e["kind"] == "mcp_servers").map(|e| e["servers"].to_string()).unwrap_or_default();
    assert!(mcp(&events).contains("time__get_current_time"), "the team's server is offered: {}", mcp(&events));
    let skill_names = |events: &[Value]| {
        events[0]["skills"].as_array().into_iter().flatten().map(|s| s["name"].as_str().unwrap_or_default().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(skill_names(&events), ["deploying", "house-style"], "{:?}", events[0]);
    assert!(llm.requests().iter().any(|r| r["messages"][0]["content"].as_str().is_some_and(|c| c.contains("ACME-HOUSE-STYLE"))));
    let (s, file) = bob.get(&format!("/api/v1/conversations/{conv}/files?path=t.txt")).await;
    assert_eq!((s, file["content"].as_str().map(str::trim)), (200, Some("<secret:TEAM_TOKEN>")), "{file}");
    // His own conversation, outside it, does not.
    let (own, _) = bob.start_ready(json!({"message": "show the token", "title": "own"})).await;
    let events = bob.wait_finished(&own, 1).await;
    assert!(!mcp(&events).contains("time__"), "not outside it: {}", mcp(&events));
    assert!(skill_names(&events).is_empty(), "{:?}", events[0]);
    assert!(
        events.iter().any(|e| e["kind"] == "observation" && e["content"].as_str().is_some_and(|c| c.starts_with("token=\n"))),
        "{events:?}"
    );

    // The organization keeps key issuance to its owners and admins: Bob asks, Alice issues.
    let settings = json!({"key_issuers": "admins"});
    assert_eq!(alice.call(reqwest::Method::PUT, "/api/v1/orgs/acme/settings", Some(settings)).await.0, 200);
    let (s, e) = bob.post("/api/v1/me/keys", json!({"name": "laptop"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("key_issuance_restricted")), "{e}");
    assert_eq!(carol.post("/api/v1/me/keys", json!({"name": "laptop"})).await.0, 201, "not hers to restrict");
    assert_eq!(alice.post("/api/v1/me/keys", json!({"name": "laptop"})).await.0, 201);

    // Recorded by name, never by value; nowhere in the log either.
    let (_, trail) = alice.get("/api/v1/orgs/acme/audit?action=org.").await;
    assert!(trail.to_string().contains("acme/TEAM_TOKEN") && !trail.to_string().contains(VALUE), "{trail}");
    assert!(!h.log().contains(VALUE));
}

#[tokio::test]
async fn an_org_visible_conversation_is_read_by_its_members_and_acted_on_by_its_owner_alone() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(|_| halyard_tests::Reply::finish("Done for the team."));
    let mut o = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root");
    o.api_keys = "root:root-admin-key,alice:alice-secret-key,bob:bob-secret-key,carol:carol-secret-key,dave:dave-secret-key".into();
    let h = Halyard::start(o);
    let (alice, bob, carol, dave) = (h.api(ALICE), h.api("bob-secret-key"), h.api("carol-secret-key"), h.api("dave-secret-key"));
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or_default().to_owned();
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    alice.add_to_org("acme", &bob, None).await;
    assert_eq!(dave.post("/api/v1/orgs", json!({"name": "globex"})).await.0, 201);

    let (s, e) = bob.post("/api/v1/conversations", json!({"message": "x", "visibility": "org"})).await;
    assert_eq!((s, code(&e)), (400, "invalid_field".into()), "{e}");
    let (shared, _) = bob.start_ready(json!({"message": "for the team", "title": "shared", "org": "acme", "visibility": "org"})).await;
    bob.wait_finished(&shared, 1).await;
    let (private, _) = bob.start_ready(json!({"message": "mine", "title": "private", "org": "acme"})).await;

    // Alice, in the organization, reads it, its events, and live.
    let (s, c) = alice.get(&format!("/api/v1/conversations/{shared}")).await;
    assert_eq!((s, &c["owner"], &c["visibility"], &c["org"]), (200, &json!("bob"), &json!("org"), &json!("acme")), "{c}");
    let (s, ev) = alice.get(&format!("/api/v1/conversations/{shared}/events")).await;
    assert!(s == 200 && ev.to_string().contains("Done for the team."), "{ev}");
    let (_, t) = alice.post("/api/v1/ws-tickets", json!({})).await;
    let ws = format!(
        "{}/api/v1/conversations/{shared}/events/ws?after_seq=0&access_token={}",
        h.http.replacen("http", "ws", 1),
        t["ticket"].as_str().unwrap()
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(ws).await.expect("Alice follows it live");
    let first = tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap().unwrap().unwrap();
    assert!(first.to_text().unwrap().contains("conversation_started"), "{first:?}");
    let (_, listed) = alice.get("/api/v1/orgs/acme/conversations").await;
    let ids: Vec<&str> = listed["items"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [shared.as_str()], "the private one is not shared: {listed}");

    // Nobody but Bob acts on it: Alice is told why; others see nothing at all.
    let (s, e) = alice.post(&format!("/api/v1/conversations/{shared}/messages"), json!({"text": "alice was here"})).await;
    assert_eq!((s, code(&e)), (403, "read_only".into()), "{e}");
    assert_eq!(
        alice.call(reqwest::Method::PATCH, &format!("/api/v1/conversations/{shared}"), Some(json!({"title": "mine now"}))).await.0,
        403
    );
    assert_eq!(alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{shared}"), None).await.0, 403);
    assert_eq!(alice.get(&format!("/api/v1/conversations/{private}")).await.0, 404);
    for outsider in [&carol, &dave] {
        assert_eq!(outsider.get(&format!("/api/v1/conversations/{shared}")).await.0, 404);
        assert_eq!(outsider.get(&format!("/api/v1/conversations/{shared}/events")).await.0, 404);
        assert_eq!(outsider.get("/api/v1/orgs/acme/conversations").await.0, 404);
    }
    let (_, c) = bob.get(&format!("/api/v1/conversations/{shared}")).await;
    assert_eq!(c["title"], "shared", "unchanged: {c}");

    // Bob makes it his alone again.
    let (s, _) = bob.call(reqwest::Method::PATCH, &format!("/api/v1/conversations/{shared}"), Some(json!({"visibility": "private"}))).await;
    assert_eq!(s, 202);
    let deadline = Instant::now() + Duration::from_secs(10);
    while alice.get(&format!("/api/v1/conversations/{shared}")).await.0 != 404 {
        assert!(Instant::now() < deadline, "still shared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Her open socket closes too.
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(m)) = socket.next().await {
            if m.is_close() {
                break;
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "Alice's WebSocket stayed open after Bob stopped sharing");
    let listed_ids =
        |v: &Value| -> Vec<String> { v["items"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_owned()).collect() };
    assert_eq!(listed_ids(&alice.get("/api/v1/orgs/acme/conversations").await.1), Vec::<String>::new(), "no longer listed");
    let (own, _) = bob.start_ready(json!({"message": "own", "title": "own"})).await;
    let (s, e) = bob.call(reqwest::Method::PATCH, &format!("/api/v1/conversations/{own}"), Some(json!({"visibility": "org"}))).await;
    assert_eq!((s, code(&e)), (400, "invalid_field".into()), "{e}");

    // Shared again, the private one too: listed newest first; once Bob leaves, neither is.
    for id in [&shared, &private] {
        let (s, _) = bob.call(reqwest::Method::PATCH, &format!("/api/v1/conversations/{id}"), Some(json!({"visibility": "org"}))).await;
        assert_eq!(s, 202);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ids = listed_ids(&alice.get("/api/v1/orgs/acme/conversations").await.1);
        if ids == [private.clone(), shared.clone()] {
            break;
        }
        assert!(Instant::now() < deadline, "not listed again, newest first: {ids:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(listed_ids(&alice.get("/api/v1/orgs/acme/conversations?limit=1").await.1), vec![private.clone()]);
    assert_eq!(bob.call(reqwest::Method::DELETE, "/api/v1/orgs/acme/members/bob", None).await.0, 204);
    assert_eq!(listed_ids(&alice.get("/api/v1/orgs/acme/conversations").await.1), Vec::<String>::new(), "a former member's shares");
}
