#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Each user's own: secrets that reach the agent's shell and nowhere else (not events, the
//! WebSocket, webhooks, the LLM, the logs, nor the disk unencrypted), LLM profiles that send
//! each user's conversations to their own server with their own key, switchable
//! mid-conversation, and git providers whose tokens clone, push (through the runner) and open
//! pull requests (through Halyard's own MCP tools) without ever staying in the sandbox.

use std::time::Duration;

use base64::Engine;
use halyard_tests::events::finished;
use halyard_tests::{Halyard, HalyardOptions, Receiver, Reply, ScriptedLlm, init};
use reqwest::Method;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";
/// A value with characters that base64 and URL-encoding both change.
const VALUE: &str = "s3cr3t/Value+9f8e?7d";

fn terminal(command: &str) -> Reply {
    Reply::tool("terminal", json!({"command": command}))
}

/// Every file under `dir`, as bytes, with its path.
fn files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push((p, bytes));
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn a_secret_reaches_the_shell_and_is_masked_everywhere_else() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_WEBHOOK_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    let bob = h.api(BOB);

    // Stored write-only; bad names and values are refused with what to do.
    let (s, created) =
        alice.call(Method::PUT, "/api/v1/secrets/API_TOKEN", Some(json!({"value": VALUE, "description": "the test API"}))).await;
    assert_eq!(s, 201, "{created}");
    assert_eq!(created["name"], "API_TOKEN");
    assert!(!created.to_string().contains(VALUE), "{created}");
    let (s, listed) = alice.get("/api/v1/secrets").await;
    assert_eq!((s, listed["items"][0]["description"].as_str()), (200, Some("the test API")), "{listed}");
    assert!(!listed.to_string().contains(VALUE));
    let (s, e) = alice.call(Method::PUT, "/api/v1/secrets/PATH", Some(json!({"value": "whatever"}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("reserved_name")), "{e}");
    let (s, e) = alice.call(Method::PUT, "/api/v1/secrets/SHORT", Some(json!({"value": "ab"}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, e) = alice.call(Method::PUT, "/api/v1/secrets/NEW_ONE", Some(json!({"description": "no value"}))).await;
    assert_eq!(s, 400, "{e}");
    // Another user sees nothing of it.
    assert_eq!(bob.get("/api/v1/secrets").await.1["items"], json!([]));
    assert_eq!(bob.get("/api/v1/secrets/API_TOKEN").await.0, 404);

    let receiver = Receiver::start().await;
    let (s, w) = alice.post("/api/v1/webhooks", json!({"url": receiver.url})).await;
    assert_eq!(s, 201, "{w}");

    llm.push([
        terminal("echo \"token is $API_TOKEN\""),
        // Split across two writes, with a pause between them.
        terminal("printf '%s' \"${API_TOKEN:0:7}\"; sleep 0.3; printf '%s\\n' \"${API_TOKEN:7}\""),
        terminal("printf '%s' \"$API_TOKEN\" | base64"),
        terminal("python3 -c 'import os, urllib.parse; print(urllib.parse.quote(os.environ[\"API_TOKEN\"], safe=\"\"))'"),
        // The shell has the exact value (checked without printing it).
        terminal(&format!(
            "python3 -c 'import os, sys; sys.exit(os.environ[\"API_TOKEN\"][::-1] != \"{}\")' && echo EXACT-MATCH",
            VALUE.chars().rev().collect::<String>()
        )),
        // Into a file of the workspace.
        terminal("printf 'key=%s\\n' \"$API_TOKEN\" > leaked.txt && echo wrote"),
        // A hostile model repeats what it somehow learned: masked too.
        // (Its words before the call are streamed to the watchers piece by piece: masked too.)
        Reply::Tools(
            Some(format!("Found it: {VALUE}, which I now repeat: {VALUE}.")),
            vec![("finish".into(), json!({"message": format!("I found {VALUE}")}))],
        ),
    ]);
    let (conv, _) = alice.start_ready(json!({"message": "use the token", "title": "secrets"})).await;
    let mut ws = alice.ws(&conv, 0).await;
    let mut frames = Vec::new();
    while let Some(ev) = ws.next_frame(Duration::from_secs(30)).await {
        let done = ev["kind"] == "execution_status" && ev["status"] == "finished";
        frames.push(ev.to_string());
        if done {
            break;
        }
    }
    assert!(frames.iter().any(|f| f.contains("finished")), "the run did not finish: {frames:?}");
    assert!(frames.iter().any(|f| f.contains("answer_delta") && f.contains("<secret:API_TOKEN>")), "no masked delta: {frames:?}");
    let events = alice.get(&format!("/api/v1/conversations/{conv}/events?limit=1000")).await.1.to_string();

    let b64 = base64::engine::general_purpose::STANDARD.encode(VALUE);
    let url_encoded = "s3cr3t%2FValue%2B9f8e%3F7d";
    let forms = [VALUE, b64.trim_end_matches('='), url_encoded, "s3cr3t/", "Value+9f8e?7d"];
    assert!(events.contains("EXACT-MATCH"), "the shell did not get the value: {events}");
    assert!(events.matches("<secret:API_TOKEN>").count() >= 5, "{events}");
    for form in forms {
        assert!(!events.contains(form), "{form} in events: {events}");
        assert!(!frames.iter().any(|f| f.contains(form)), "{form} in a WebSocket frame");
        assert!(!llm.requests().iter().any(|r| r.to_string().contains(form)), "{form} reached the LLM");
    }
    // The conversation's exports are the masked log.
    for format in ["jsonl", "md"] {
        let (s, export) = alice.get(&format!("/api/v1/conversations/{conv}/export?format={format}")).await;
        let export = export.as_str().map(str::to_owned).unwrap_or_else(|| export.to_string());
        assert_eq!(s, 200, "{export}");
        assert!(export.contains("<secret:API_TOKEN>") && export.contains("EXACT-MATCH"), "{format}: {export}");
        for form in forms {
            assert!(!export.contains(form), "{form} in the {format} export");
        }
    }
    // Webhook deliveries, once they arrive, are masked too.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !receiver.accepted().iter().any(|r| r.json()["status"] == "finished") {
        assert!(std::time::Instant::now() < deadline, "webhook deliveries did not arrive");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bodies: Vec<String> = receiver.received().iter().map(|r| r.json().to_string()).collect();
    assert!(bodies.iter().any(|b| b.contains("<secret:API_TOKEN>")));
    for form in forms {
        assert!(!bodies.iter().any(|b| b.contains(form)), "{form} in a webhook body");
    }
    // The workspace, as its owner browses it, is masked the same way: a file's content, what
    // changed.
    let (s, file) = alice.get(&format!("/api/v1/conversations/{conv}/files?path=leaked.txt")).await;
    assert_eq!(s, 200, "{file}");
    assert_eq!(file["content"], "key=<secret:API_TOKEN>\n", "{file}");
    let (s, changes) = alice.get(&format!("/api/v1/conversations/{conv}/changes")).await;
    assert_eq!(s, 200, "{changes}");
    for form in forms {
        assert!(!file.to_string().contains(form), "{form} in the file");
        assert!(!changes.to_string().contains(form), "{form} in the changes: {changes}");
    }
    // And confined to it: a path out of the workspace is refused, not read, also through a
    // link the agent left there.
    let (_, view) = alice.get(&format!("/api/v1/conversations/{conv}")).await;
    let workspace = h.workspace(view["sandbox_id"].as_str().unwrap());
    std::os::unix::fs::symlink("/etc/passwd", workspace.join("passwd-link")).unwrap();
    std::os::unix::fs::symlink("/etc", workspace.join("etc-link")).unwrap();
    for path in ["/etc/passwd", "../../../../etc/passwd", "passwd-link", "etc-link/passwd", "etc-link"] {
        let (s, e) = alice.get(&format!("/api/v1/conversations/{conv}/files?path={path}")).await;
        assert_eq!((s, e["error"]["code"].as_str()), (400, Some("path_outside_workspace")), "{path}: {e}");
    }
    let (s, e) = alice.get(&format!("/api/v1/conversations/{conv}/files?path=no-such-file")).await;
    assert_eq!((s, e["error"]["code"].as_str()), (404, Some("not_found")), "{e}");
    // The agent's own files are the agent's: the check of what Halyard wrote skips them.
    std::fs::remove_file(workspace.join("leaked.txt")).unwrap();

    // Nothing Halyard wrote to disk (bus store, read models, logs) holds the value in clear:
    // at rest it is sealed, and everything else had it masked.
    for (path, bytes) in files(h.data.path()) {
        assert!(!contains(&bytes, VALUE), "{} holds the secret", path.display());
    }

    // Deleted, it is gone from the shell from the next run on, though the shell is the same.
    let (s, _) = alice.call(Method::DELETE, "/api/v1/secrets/API_TOKEN", None).await;
    assert_eq!(s, 204);
    assert_eq!(alice.get("/api/v1/secrets/API_TOKEN").await.0, 404);
    llm.push([terminal("echo \"now [${API_TOKEN-unset}]\""), Reply::finish("done")]);
    let (s, _) = alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "again"})).await;
    assert_eq!(s, 202);
    let events = alice.wait_finished(&conv, 2).await;
    let seen: Vec<String> = events.iter().filter(|e| e["kind"] == "observation").map(|e| e["content"].to_string()).collect();
    assert!(seen.iter().any(|o| o.contains("now [unset]")), "{seen:?}");
}

#[tokio::test]
async fn each_user_reaches_their_own_llm_with_their_own_key_and_can_switch() {
    init();
    let operator = ScriptedLlm::start().await;
    let alices = ScriptedLlm::start().await;
    let bobs = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&operator.base_url).set("HALYARD_LLM_PROFILE_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    let bob = h.api(BOB);

    let profile = |llm: &ScriptedLlm, model: &str, key: &str| json!({"base_url": llm.base_url, "model": model, "api_key": key});
    let (s, p) = alice.call(Method::PUT, "/api/v1/llm-profiles/mine", Some(profile(&alices, "alice-model", "sk-alice-own-key"))).await;
    assert_eq!(s, 201, "{p}");
    assert_eq!((p["has_api_key"].as_bool(), p["model"].as_str()), (Some(true), Some("alice-model")));
    assert!(!p.to_string().contains("sk-alice-own-key"));
    let (s, p) = bob.call(Method::PUT, "/api/v1/llm-profiles/mine", Some(profile(&bobs, "bob-model", "sk-bob-own-key"))).await;
    assert_eq!(s, 201, "{p}");
    // Alice makes hers the default; Bob names his at start.
    let (s, st) = alice.call(Method::PUT, "/api/v1/settings", Some(json!({"llm_profile": "mine"}))).await;
    assert_eq!((s, st["llm_profile"].as_str()), (200, Some("mine")), "{st}");
    // Nobody can name a profile they do not have.
    let (s, e) = bob.post("/api/v1/conversations", json!({"message": "hi", "llm_profile": "alices"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("unknown_llm_profile")), "{e}");
    let (s, e) = alice.call(Method::PUT, "/api/v1/settings", Some(json!({"llm_profile": "nope"}))).await;
    assert_eq!(s, 400, "{e}");
    let (s, e) = alice.call(Method::DELETE, "/api/v1/llm-profiles/mine", None).await;
    assert_eq!((s, e["error"]["code"].as_str()), (409, Some("profile_in_use")), "{e}");

    alices.push([terminal("echo from alice"), Reply::finish("alice done")]);
    bobs.push([terminal("echo from bob"), Reply::finish("bob done")]);
    let ((a_conv, _), (b_conv, _)) = tokio::join!(
        alice.start_ready(json!({"message": "task for alice"})),
        bob.start_ready(json!({"message": "task for bob", "llm_profile": "mine"})),
    );
    let (a_events, b_events) =
        tokio::join!(alice.wait_events(&a_conv, "alice finished", finished), bob.wait_events(&b_conv, "bob finished", finished));
    assert_eq!(a_events[0]["model"], "alice-model", "{}", a_events[0]);
    assert_eq!(a_events[0]["llm_profile"], "mine");
    assert_eq!(b_events[0]["model"], "bob-model");
    let keys = |llm: &ScriptedLlm| llm.auth_headers().into_iter().map(Option::unwrap_or_default).collect::<Vec<_>>();
    let models = |llm: &ScriptedLlm| llm.requests().iter().map(|r| r["model"].as_str().unwrap_or_default().to_owned()).collect::<Vec<_>>();
    assert_eq!(keys(&alices), ["Bearer sk-alice-own-key"; 2]);
    assert_eq!(models(&alices), ["alice-model"; 2]);
    assert_eq!(keys(&bobs), ["Bearer sk-bob-own-key"; 2]);
    assert_eq!(models(&bobs), ["bob-model"; 2]);
    assert!(operator.requests().is_empty(), "the operator's LLM was called");
    // Neither key is in any event.
    for ev in a_events.iter().chain(&b_events) {
        assert!(!ev.to_string().contains("own-key"), "{ev}");
    }

    // Alice switches her conversation to the operator's LLM: an event records it, and the next
    // call goes there with the operator's key.
    let (s, r) = alice.call(Method::PUT, &format!("/api/v1/conversations/{a_conv}/llm-profile"), Some(json!({"profile": null}))).await;
    assert_eq!(s, 202, "{r}");
    alice.wait_events(&a_conv, "the switch", |ev| ev.iter().any(|e| e["kind"] == "llm_profile" && e["model"] == "scripted-model")).await;
    operator.push([Reply::finish("operator here")]);
    let (s, _) = alice.post(&format!("/api/v1/conversations/{a_conv}/messages"), json!({"text": "again"})).await;
    assert_eq!(s, 202);
    alice
        .wait_events(&a_conv, "the operator's answer", |ev| ev.iter().any(|e| e["kind"] == "agent_message" && e["text"] == "operator here"))
        .await;
    assert_eq!(operator.auth_headers(), [Some(format!("Bearer {}", halyard_tests::harness::LLM_KEY))]);
    assert_eq!(alices.requests().len(), 2);
    // Bob cannot switch Alice's conversation.
    let (s, _) = bob.call(Method::PUT, &format!("/api/v1/conversations/{a_conv}/llm-profile"), Some(json!({"profile": "mine"}))).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn a_profile_may_not_point_at_the_operators_network_unless_allowed() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    for url in ["http://127.0.0.1:4222/v1", "http://localhost:8000/v1", "http://10.0.0.5/v1"] {
        let (s, e) = alice.call(Method::PUT, "/api/v1/llm-profiles/internal", Some(json!({"base_url": url, "model": "m"}))).await;
        assert_eq!((s, e["error"]["code"].as_str()), (400, Some("destination_not_allowed")), "{url}: {e}");
    }
    let (s, e) = alice.call(Method::PUT, "/api/v1/llm-profiles/x", Some(json!({"base_url": "ftp://example.com", "model": "m"}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, p) =
        alice.call(Method::PUT, "/api/v1/llm-profiles/public", Some(json!({"base_url": "https://api.example.com/v1", "model": "m"}))).await;
    assert_eq!((s, p["has_api_key"].as_bool()), (201, Some(false)), "{p}");
    assert_eq!(alice.get("/api/v1/llm-profiles").await.1["items"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn a_private_repository_is_cloned_with_the_stored_token_which_stays_out_of_the_sandbox() {
    init();
    // A private repository behind git's own http-backend, with basic auth.
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "private.git", ("PRIVATE.md", "only for alice\n"));
    const TOKEN: &str = "ghp_private-token-4f7e2a9c";
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "x-access-token", TOKEN).await;
    let url = format!("{}/private.git", server.base);
    let llm = ScriptedLlm::start().await;
    // The repository is served on the host's loopback, which the sandbox's own network cannot
    // reach: git gets there through Halyard's git proxy, which the operator allows the loopback.
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));

    // Without a token the server refuses the clone, and the start says where it failed.
    let (s, task) = alice.post("/api/v1/conversations", json!({"message": "hi", "repository": {"url": url}})).await;
    assert_eq!(s, 202, "{task}");
    let failed = alice.wait_task(task["id"].as_str().unwrap(), &["ERROR"]).await;
    assert!(failed["detail"].as_str().unwrap_or_default().contains("PREPARING_REPOSITORY"), "{failed}");

    let host = server.base.trim_start_matches("http://");
    let (s, p) =
        alice.call(Method::PUT, "/api/v1/git-providers/local", Some(json!({"kind": "generic", "host": host, "token": TOKEN}))).await;
    assert_eq!((s, p["has_token"].as_bool(), p["username"].as_str()), (201, Some(true), Some("x-access-token")), "{p}");
    assert!(!p.to_string().contains(TOKEN));
    assert!(!alice.get("/api/v1/git-providers").await.1.to_string().contains(TOKEN));

    halyard_tests::bare_repository(repos.path(), "other.git", ("OTHER.md", "not this conversation's\n"));
    // What a hostile agent tries: the token from git's credential machinery, and the proxy
    // aimed at another repository of the same server.
    llm.push([
        terminal(&format!(
            "cat PRIVATE.md; git remote -v; git config --list --show-origin; env; git fetch -q origin && echo FETCHED; \
             printf 'protocol=http\\nhost={host}\\n\\n' | git credential fill 2>&1; echo FILL=$?; \
             k=$(git config --get-regexp insteadof | cut -d' ' -f1); k=${{k#url.}}; base=${{k%/private.insteadof}}; \
             git ls-remote \"$base/other.git\" 2>&1; echo LS=$?",
            host = server.base.trim_start_matches("http://")
        )),
        Reply::finish("done"),
    ]);
    let (conv, task) = alice.start_ready(json!({"message": "read it", "repository": {"url": url}})).await;
    let events = alice.wait_finished(&conv, 1).await;
    let seen = events.iter().find(|e| e["kind"] == "observation").map(|e| e["content"].to_string()).unwrap_or_default();
    assert!(seen.contains("only for alice"), "the clone did not happen: {seen}");
    assert!(server.authorizations().iter().flatten().any(|a| a.starts_with("Basic ")), "the clone sent no credentials");
    // The sandbox kept nothing of the token: no credential in the git config or the
    // environment, nothing to mask, nothing on disk. The agent's own fetch works all the same:
    // git goes through the runner's git proxy, which adds the token upstream.
    let lower = seen.to_lowercase();
    assert!(!lower.contains("extraheader") && !lower.contains("authorization") && !seen.contains("<secret:"), "{seen}");
    assert!(seen.contains("FETCHED"), "the agent's fetch did not go through the git proxy: {seen}");
    assert!(!seen.contains(TOKEN) && seen.contains("FILL=128"), "git's credential machinery handed something out: {seen}");
    assert!(
        seen.contains("serves this conversation's repository only") && seen.contains("LS=128"),
        "the proxy reached another repository: {seen}"
    );
    for (path, bytes) in files(h.data.path()).into_iter().chain(files(&h.workspace(task["sandbox_id"].as_str().unwrap()))) {
        assert!(!contains(&bytes, TOKEN), "{} holds the token", path.display());
    }
    // The token is Alice's: Bob's clone of the same repository is refused.
    let (_, task) = bob.post("/api/v1/conversations", json!({"message": "hi", "repository": {"url": url}})).await;
    let failed = bob.wait_task(task["id"].as_str().unwrap(), &["ERROR"]).await;
    assert!(failed["detail"].as_str().unwrap_or_default().contains("PREPARING_REPOSITORY"), "{failed}");
}

#[tokio::test]
async fn the_repository_picker_lists_what_each_users_token_reaches() {
    init();
    const GH_TOKEN: &str = "ghp_picker-token-51a9";
    let github = halyard_tests::GithubServer::start(GH_TOKEN, &["alice/halyard", "alice/dotfiles", "acme/halyard-infra"]).await;
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));

    // Nothing to list without a provider.
    let (s, none) = alice.get("/api/v1/repositories").await;
    assert_eq!((s, none["items"].clone(), none["errors"].clone()), (200, json!([]), json!([])), "{none}");

    // A GitHub Enterprise-like provider: its API where the server has it.
    let provider = json!({"kind": "github", "host": github.host, "api_url": github.api_url, "token": GH_TOKEN});
    let (s, p) = alice.call(Method::PUT, "/api/v1/git-providers/work", Some(provider)).await;
    assert_eq!((s, p["api_url"].as_str()), (201, Some(github.api_url.as_str())), "{p}");
    let (s, found) = alice.get("/api/v1/repositories?q=HALYARD").await;
    assert_eq!(s, 200, "{found}");
    let names: Vec<&str> = found["items"].as_array().unwrap().iter().filter_map(|r| r["full_name"].as_str()).collect();
    assert_eq!(names, ["alice/halyard", "acme/halyard-infra"], "{found}");
    let first = &found["items"][0];
    assert_eq!(
        (first["provider"].as_str(), first["private"].as_bool(), first["default_branch"].as_str()),
        (Some("work"), Some(true), Some("main"))
    );
    assert_eq!(first["clone_url"].as_str(), Some(format!("http://{}/alice/halyard.git", github.host).as_str()));
    assert_eq!(alice.get("/api/v1/repositories").await.1["items"].as_array().map(Vec::len), Some(3));
    // The forge got the token as GitHub wants it, and nothing of it is answered.
    assert!(github.seen().iter().all(|(_, auth)| auth.as_deref() == Some(&format!("Bearer {GH_TOKEN}"))), "{:?}", github.seen());
    assert!(!found.to_string().contains(GH_TOKEN));

    // One repository's branches, for the branch picker, and the default among them.
    let (s, b) = alice.get("/api/v1/repositories/branches?provider=work&repository=alice/halyard").await;
    assert_eq!((s, b["default_branch"].as_str()), (200, Some("main")), "{b}");
    assert!(b["branches"].as_array().unwrap().iter().any(|x| x["name"] == "main"), "{b}");
    let (s, e) = alice.get("/api/v1/repositories/branches?provider=nope&repository=alice/halyard").await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("unknown_git_provider")), "{e}");
    let (s, e) = alice.get("/api/v1/repositories/branches?provider=work&repository=..").await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");

    // A token the forge refuses is named in `errors`, with what to do; Bob sees none of Alice's.
    let bobs = json!({"kind": "github", "host": github.host, "api_url": github.api_url, "token": "ghp_wrong-one"});
    assert_eq!(bob.call(Method::PUT, "/api/v1/git-providers/work", Some(bobs)).await.0, 201);
    let (s, refused) = bob.get("/api/v1/repositories").await;
    assert_eq!((s, refused["items"].clone()), (200, json!([])), "{refused}");
    let message = refused["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        refused["errors"][0]["provider"] == "work" && message.contains("401") && message.contains("PUT /api/v1/git-providers"),
        "{refused}"
    );
    let (s, e) = bob.get("/api/v1/repositories?provider=nope").await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("unknown_git_provider")), "{e}");

    // Without the operator's permission an API on the operator's network is refused.
    let h2 = Halyard::start(HalyardOptions::new(&llm.base_url));
    let provider = json!({"kind": "github", "host": github.host, "api_url": github.api_url, "token": GH_TOKEN});
    let (s, e) = h2.api(ALICE).call(Method::PUT, "/api/v1/git-providers/work", Some(provider)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("destination_not_allowed")), "{e}");
}

#[tokio::test]
async fn the_agent_pushes_a_branch_and_opens_a_pull_request_without_holding_the_token() {
    init();
    const TOKEN: &str = "ghp_pull-request-token-73b1e0";
    // `alice/app` behind git's own http-backend, and a GitHub REST API that knows its branches.
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "alice/app.git", ("README.md", "teh app\n"));
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "x-access-token", TOKEN).await;
    let github = halyard_tests::GithubServer::start_with_git(TOKEN, &["alice/app"], Some(repos.path().to_path_buf())).await;
    let llm = ScriptedLlm::start().await;
    // Git reaches the repository on the host's loopback through Halyard's git proxy.
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    let host = server.base.trim_start_matches("http://");
    let provider = json!({"kind": "github", "host": host, "api_url": github.api_url, "token": TOKEN});
    assert_eq!(alice.call(Method::PUT, "/api/v1/git-providers/work", Some(provider)).await.0, 201);
    // The name of Halyard's own server is not for users' servers.
    let mine = json!({"transport": "http", "url": "https://mcp.example.com/mcp"});
    let (s, e) = alice.call(Method::PUT, "/api/v1/mcp-servers/halyard", Some(mine)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");

    llm.push([
        terminal(
            "git checkout -q -b fix-typo && sed -i s/teh/the/ README.md && git -c user.name=a -c user.email=a@example.com commit -qam fix \
             && git push -q origin fix-typo && echo PUSHED; git config --list --show-origin | grep -ci -e token -e extraheader; \
             ls ~/.git-credentials 2>&1",
        ),
        Reply::tool("halyard__list_branches", json!({})),
        Reply::tool("halyard__create_pull_request", json!({"title": "Fix the typo", "head": "fix-typo", "body": "It said teh."})),
        Reply::tool("halyard__comment_on_pull_request", json!({"number": 1, "body": "Ready for review."})),
        Reply::tool("halyard__create_pull_request", json!({"title": "Nothing", "head": "never-pushed"})),
        Reply::finish("done"),
    ]);
    let url = format!("{}/alice/app.git", server.base);
    let (conv, task) = alice.start_ready(json!({"message": "fix the typo and open a PR", "repository": {"url": url}})).await;
    let events = alice.wait_events(&conv, "finish", halyard_tests::events::ended).await;
    let all = Value::Array(events.clone()).to_string();
    let observed = |tool: &str| -> Vec<(String, bool)> {
        events
            .iter()
            .filter(|e| e["kind"] == "observation" && e["tool"] == tool)
            .map(|e| (e["content"].as_str().unwrap_or_default().to_owned(), e["is_error"].as_bool().unwrap_or(false)))
            .collect()
    };

    // Halyard's own server was offered (Alice has a forge), its tools next to the built-ins.
    let servers = events.iter().find(|e| e["kind"] == "mcp_servers").map(|e| e["servers"].clone()).expect("an mcp_servers event");
    let own = servers.as_array().unwrap().iter().find(|s| s["name"] == "halyard").cloned().unwrap_or_default();
    assert_eq!(own["error"], Value::Null, "{servers}");
    assert_eq!(
        own["tools"],
        json!(["halyard__list_branches", "halyard__create_pull_request", "halyard__comment_on_pull_request"]),
        "{servers}"
    );

    // The push went through the runner's answer: the branch is on the server; the sandbox's git
    // config holds no token and no credential file was written.
    let shell = observed("terminal").first().cloned().unwrap_or_default().0;
    assert!(shell.contains("PUSHED"), "{shell}");
    assert!(shell.contains("PUSHED\n0\n"), "the sandbox's git config names a token: {shell}");
    assert!(shell.contains("No such file"), "a credential file was written: {shell}");
    let heads = std::process::Command::new("git")
        .args(["for-each-ref", "--format=%(refname:short)", "refs/heads"])
        .env("GIT_DIR", repos.path().join("alice/app.git"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&heads.stdout).lines().any(|b| b == "fix-typo"), "the branch was not pushed");

    // The tools acted on the conversation's repository with Alice's token.
    let branches = observed("halyard__list_branches").first().cloned().unwrap_or_default();
    let listed: Value = serde_json::from_str(&branches.0).unwrap_or_default();
    assert_eq!((listed["repository"].as_str(), listed["default_branch"].as_str()), (Some("alice/app"), Some("main")), "{branches:?}");
    let names: Vec<&str> = listed["branches"].as_array().into_iter().flatten().filter_map(|b| b["name"].as_str()).collect();
    assert!(names.contains(&"fix-typo") && names.contains(&"main"), "{branches:?}");
    let made = observed("halyard__create_pull_request");
    let first: Value = serde_json::from_str(&made[0].0).unwrap_or_default();
    assert_eq!((first["number"].as_u64(), first["base"].as_str(), made[0].1), (Some(1), Some("main"), false), "{made:?}");
    assert_eq!(first["url"].as_str(), Some(format!("http://{}/alice/app/pull/1", github.host).as_str()));
    assert_eq!(
        github.pulls(),
        vec![(
            "alice/app".to_owned(),
            json!({"title": "Fix the typo", "head": "fix-typo", "base": "main", "body": "It said teh.", "draft": false})
        )]
    );
    assert_eq!(github.comments(), vec![("alice/app".to_owned(), 1, json!({"body": "Ready for review."}))]);
    assert!(!observed("halyard__comment_on_pull_request")[0].1);
    // A request the forge refuses comes back to the model in words, as an error.
    assert!(made[1].1 && made[1].0.contains("422") && made[1].0.contains("never-pushed"), "{made:?}");
    // The conversation remembers the pull request it opened (not the refused one).
    let opened: Vec<&Value> = events.iter().filter(|e| e["kind"] == "pull_request_opened").collect();
    assert_eq!(opened.len(), 1, "{opened:?}");
    let pr_url = format!("http://{}/alice/app/pull/1", github.host);
    let (_, c) = alice.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(c["pull_requests"], json!([{"number": 1, "url": pr_url, "title": "Fix the typo"}]), "{c}");
    let (_, listed) = alice.get("/api/v1/conversations").await;
    assert_eq!(listed["items"][0]["pull_requests"][0]["number"], 1, "{listed}");
    assert!(github.seen().iter().all(|(_, auth)| auth.as_deref() == Some(&format!("Bearer {TOKEN}"))), "{:?}", github.seen());

    // The token reached no event, no LLM request and no file in the sandbox or the data dir.
    assert!(all.contains("\"finished\""), "{all}");
    assert!(!all.contains(TOKEN), "the token reached an event");
    assert!(!llm.requests().iter().any(|r| r.to_string().contains(TOKEN)), "the token reached the LLM");
    for (path, bytes) in files(h.data.path()).into_iter().chain(files(&h.workspace(task["sandbox_id"].as_str().unwrap()))) {
        assert!(!contains(&bytes, TOKEN), "{} holds the token", path.display());
    }

    // `/mcp` is for agent runners: a user's API key, or none, is refused.
    let http = reqwest::Client::new();
    let ask = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    for auth in [None, Some(format!("Bearer {ALICE}")), Some(format!("Bearer {conv}.0000"))] {
        let mut request = http.post(format!("{}/mcp", h.http)).json(&ask).header("accept", "application/json, text/event-stream");
        if let Some(auth) = &auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or_default();
        assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthorized")), "{auth:?}: {body}");
    }

    // Bob has no git provider: his model is not offered Halyard's forge tools.
    let before = llm.requests().len();
    llm.push([Reply::finish("hello bob")]);
    let (bconv, _) = bob.start_ready(json!({"message": "hi"})).await;
    bob.wait_finished(&bconv, 1).await;
    let offered = llm.requests()[before]["tools"].to_string();
    assert!(offered.contains("\"terminal\"") && !offered.contains("halyard__"), "{offered}");
}

#[tokio::test]
async fn a_conversation_gets_only_the_secrets_it_names_and_all_are_masked() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    for (name, value) in [("GH_TOKEN", "ghp-chosen-0123456789"), ("DB_PASSWORD", "db-not-chosen-987654")] {
        let (s, e) = alice.call(Method::PUT, &format!("/api/v1/secrets/{name}"), Some(json!({"value": value}))).await;
        assert_eq!(s, 201, "{e}");
    }
    // A secret the user does not have is refused at once, naming those they have.
    let (s, e) = alice.post("/api/v1/conversations", json!({"message": "hi", "secrets": ["NOPE"]})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("GH_TOKEN"), "{e}");

    llm.push([
        terminal("echo \"gh=[${GH_TOKEN-unset}] db=[${DB_PASSWORD-unset}]\""),
        // What the shell was not given is still masked wherever it turns up.
        Reply::finish("the database password is db-not-chosen-987654"),
    ]);
    let (conv, _) = alice.start_ready(json!({"message": "use the token", "secrets": ["GH_TOKEN"]})).await;
    let events = alice.wait_finished(&conv, 1).await;
    let text = Value::Array(events).to_string();
    assert!(text.contains("gh=[<secret:GH_TOKEN>] db=[unset]"), "{text}");
    assert!(text.contains("the database password is <secret:DB_PASSWORD>"), "{text}");
    assert!(!text.contains("ghp-chosen") && !text.contains("db-not-chosen"), "{text}");

    // Without the field, all of them, as before.
    llm.push([terminal("echo \"db=[${DB_PASSWORD-unset}]\""), Reply::finish("done")]);
    let (conv, _) = alice.start_ready(json!({"message": "again"})).await;
    let events = alice.wait_finished(&conv, 1).await;
    assert!(Value::Array(events).to_string().contains("db=[<secret:DB_PASSWORD>]"));
}

/// A name that resolves to the host itself passes a check of the text (`localhost.`, the
/// machine's own name), and an internal service answers it; the call is refused where it is
/// connected, and nothing the internal service says reaches the conversation.
#[tokio::test]
async fn a_profile_named_to_resolve_to_the_host_reaches_nothing_and_echoes_nothing() {
    init();
    let operator = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&operator.base_url));
    let alice = h.api(ALICE);
    // "Internal" service: any request it gets is a failure of the test; it answers with a secret.
    let internal = ScriptedLlm::start().await;
    internal.push([Reply::finish("INTERNAL-SECRET-ANSWER")]);
    let port = internal.base_url.trim_start_matches("http://").split([':', '/']).nth(1).unwrap().to_owned();
    // Names that resolve to loopback here, whatever their text says.
    let own_name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_owned();
    let loopback = |name: &str| {
        std::net::ToSocketAddrs::to_socket_addrs(&(name, 80))
            .map(|a| a.collect::<Vec<_>>())
            .is_ok_and(|a| !a.is_empty() && a.iter().all(|a| a.ip().is_loopback()))
    };
    let names: Vec<String> = [own_name, "localhost.".to_owned()].into_iter().filter(|n| loopback(n)).collect();
    assert!(!names.is_empty(), "no name resolves to loopback here: the test would prove nothing");
    for name in names {
        let url = format!("http://{name}:{port}/v1");
        let (s, e) = alice.call(Method::PUT, "/api/v1/llm-profiles/sneaky", Some(json!({"base_url": url, "model": "m"}))).await;
        if s == 400 {
            // Refused when saved: as good.
            assert_eq!(e["error"]["code"], "destination_not_allowed", "{e}");
            continue;
        }
        assert_eq!(s, 201, "{e}");
        let (conv, _) = alice.start_ready(json!({"message": "hi", "llm_profile": "sneaky"})).await;
        let events = alice
            .wait_events(&conv, "the run to fail", |ev| ev.iter().any(|e| e["kind"] == "agent_error" || e["status"] == "finished"))
            .await;
        let text = Value::Array(events).to_string();
        assert!(text.contains("loopback"), "{name}: the refusal does not say why: {text}");
        assert!(!text.contains("INTERNAL-SECRET-ANSWER"), "{name}: {text}");
    }
    assert!(internal.requests().is_empty(), "the internal service was called: {:?}", internal.requests());
}

#[tokio::test]
async fn an_organizations_bot_account_clones_for_its_members_in_it_and_for_nothing_else() {
    init();
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "team.git", ("TEAM.md", "the team's code\n"));
    const TOKEN: &str = "ghp_team-bot-token-77c1d0";
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "team-bot", TOKEN).await;
    let url = format!("{}/team.git", server.base);
    let host = server.base.trim_start_matches("http://").to_owned();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    alice.add_to_org("acme", &bob, None).await;

    // The team's bot account: set up by its owner, its token never shown, not Bob's to change.
    let bot = json!({"kind": "generic", "host": host, "username": "team-bot", "token": TOKEN});
    assert_eq!(bob.call(Method::PUT, "/api/v1/orgs/acme/git-providers/bot", Some(bot.clone())).await.0, 403);
    let (s, p) = alice.call(Method::PUT, "/api/v1/orgs/acme/git-providers/bot", Some(bot)).await;
    assert_eq!((s, p["has_token"].as_bool()), (201, Some(true)), "{p}");
    let (s, listed) = bob.get("/api/v1/orgs/acme/git-providers").await;
    assert_eq!((s, listed["items"][0]["name"].as_str()), (200, Some("bot")), "{listed}");
    assert!(!listed.to_string().contains(TOKEN));

    // Outside the organization Bob has no way in.
    let (_, task) = bob.post("/api/v1/conversations", json!({"message": "hi", "repository": {"url": url}})).await;
    let failed = bob.wait_task(task["id"].as_str().unwrap(), &["ERROR"]).await;
    assert!(failed["detail"].as_str().unwrap_or_default().contains("PREPARING_REPOSITORY"), "{failed}");
    // In it, the clone and the agent's own fetch go through the git proxy with the bot's token.
    llm.push([terminal("cat TEAM.md; git fetch -q origin && echo FETCHED; env | grep -c team-bot-token"), Reply::finish("done")]);
    let (conv, task) = bob.start_ready(json!({"message": "read it", "org": "acme", "repository": {"url": url}})).await;
    let events = bob.wait_finished(&conv, 1).await;
    let seen = events.iter().find(|e| e["kind"] == "observation").map(|e| e["content"].to_string()).unwrap_or_default();
    assert!(seen.contains("the team's code") && seen.contains("FETCHED"), "{seen}");
    assert!(server.authorizations().iter().flatten().any(|a| a.starts_with("Basic ")), "the clone sent no credentials");
    assert!(!serde_json::to_string(&events).unwrap().contains(TOKEN));
    for (path, bytes) in files(h.data.path()).into_iter().chain(files(&h.workspace(task["sandbox_id"].as_str().unwrap()))) {
        assert!(!contains(&bytes, TOKEN), "{} holds the token", path.display());
    }
    let (_, trail) = alice.get("/api/v1/orgs/acme/audit?action=org.").await;
    assert!(trail.to_string().contains("org.git_provider.put") && !trail.to_string().contains(TOKEN), "{trail}");
}
