#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Plugins in Claude Code's format from a marketplace served by git's own `git http-backend`
//! (private: fetched with the user's git provider): one plugin with a skill, a slash command, a
//! named agent, a hook and a stdio MCP server (the Python MCP SDK's `MCPServer`, run from the
//! plugin's own files), each shown working in a conversation of Halyard's agent; an
//! organization's required plugin that a member cannot turn off; an update offered on refresh
//! and applied only on upgrade, with the conversations before and after on their own versions;
//! and the audit trail of it all.

use halyard_tests::llm::tool_names;
use halyard_tests::marketplace::Marketplace;
use halyard_tests::{GitServer, Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use reqwest::Method;
use serde_json::{Value, json};

const TOKEN: &str = "git-token-plugins-3e9a71";
const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

fn started(events: &[Value]) -> Value {
    events.iter().find(|e| e["kind"] == "conversation_started").cloned().expect("conversation_started")
}

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_marketplace_plugin_brings_its_skill_command_agent_hook_and_mcp_server_and_organizations_require_plugins() {
    init();
    let repos = tempfile::tempdir().unwrap();
    let market = Marketplace::create(repos.path());
    let server = GitServer::start(repos.path().to_path_buf(), "oauth2", TOKEN).await;
    let url = format!("{}/acme-plugins.git", server.base);

    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback").set("HALYARD_ADMINS", "alice"));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    let provider = json!({"kind": "generic", "host": server.base.trim_start_matches("http://"), "username": "oauth2", "token": TOKEN});
    assert_eq!(alice.call(Method::PUT, "/api/v1/git-providers/work", Some(provider)).await.0, 201);

    // Without a provider for its host the private marketplace is refused in git's words.
    let (s, e) = bob.post("/api/v1/plugins/me/marketplaces", json!({"url": url})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("fetch_failed")), "{e}");
    // Alice adds it: what each plugin would add is shown before anything is installed.
    let (s, m) = alice.post("/api/v1/plugins/me/marketplaces", json!({"url": url})).await;
    assert_eq!((s, m["name"].as_str()), (201, Some("acme-tools")), "{m}");
    let kit = m["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "kit").unwrap().clone();
    assert_eq!(
        kit["adds"],
        json!({"skills": ["kit:release-notes"], "commands": ["review"], "agents": ["reviewer"], "hooks": ["PreToolUse"], "mcp_servers": ["weather"]}),
        "{kit}"
    );
    assert_eq!(kit["version"], "1.0.0");
    let first_commit = kit["commit"].as_str().unwrap().to_owned();
    assert!(!server.authorizations().is_empty() && !m.to_string().contains(TOKEN));
    // Another user sees none of it, and a member is no administrator.
    assert_eq!(bob.get("/api/v1/plugins/me").await.1["marketplaces"], json!([]));
    let (s, _) = bob.post("/api/v1/plugins/deployment/marketplaces", json!({"url": url})).await;
    assert_eq!(s, 403);
    let (s, e) = alice.post("/api/v1/plugins/me/installed", json!({"plugin": "nothing@acme-tools"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (404, Some("not_found")), "{e}");
    let (s, p) = alice.post("/api/v1/plugins/me/installed", json!({"plugin": "kit@acme-tools"})).await;
    assert_eq!((s, p["version"].as_str(), p["enabled"].as_bool()), (201, Some("1.0.0"), Some(true)), "{p}");

    // A conversation: the command expands, the hook blocks `rm -rf`, the MCP tool answers, and
    // the named agent is delegated to.
    llm.push([
        Reply::tool("terminal", json!({"command": "rm -rf build"})),
        Reply::tool("weather__forecast", json!({"city": "Oslo"})),
        Reply::tool("delegate", json!({"tasks": [{"title": "Review", "prompt": "Review src/lib.rs", "agent": "reviewer"}]})),
        Reply::finish("reviewed: fine"),
        Reply::finish("done"),
    ]);
    let (conv, _) = alice.start_ready(json!({"message": "/review src/lib.rs"})).await;
    let events = alice.wait_finished(&conv, 1).await;
    let all = Value::Array(events.clone()).to_string();
    let plugins = started(&events)["plugins"].clone();
    assert_eq!((plugins[0]["name"].as_str(), plugins[0]["commit"].as_str()), (Some("kit"), Some(first_commit.as_str())), "{plugins}");
    let said = events.iter().find(|e| e["kind"] == "user_message").unwrap();
    assert_eq!(said["command"], "/review src/lib.rs");
    assert_eq!(said["text"], "Review src/lib.rs with care. Focus: src/lib.rs");
    let requests = llm.requests();
    let first = &requests[0];
    assert!(first.to_string().contains("Review src/lib.rs with care"), "the model read the expansion");
    assert!(system_prompt(first).contains("<skill name=\"kit:release-notes\">Write release notes.</skill>"), "{}", system_prompt(first));
    let offered = tool_names(first);
    let said_of_servers: Vec<&Value> = events.iter().filter(|e| e["kind"] == "mcp_servers" || e["kind"] == "agent_error").collect();
    assert!(offered.iter().any(|t| t == "weather__forecast") && offered.iter().any(|t| t == "delegate"), "{offered:?} {said_of_servers:?}");
    let delegate = first["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "delegate").unwrap();
    assert_eq!(delegate["function"]["parameters"]["properties"]["tasks"]["items"]["properties"]["agent"]["enum"], json!(["reviewer"]));
    // The hook, from the plugin's own folder in the sandbox.
    let hook = events.iter().find(|e| e["kind"] == "hook").expect("a hook event");
    assert_eq!((hook["event"].as_str(), hook["blocked"].as_bool()), (Some("pre_tool_use"), Some(true)), "{hook}");
    assert!(hook["stderr"].as_str().unwrap().contains("rm -rf is not allowed by kit (/"), "{hook}");
    let rejected = events.iter().find(|e| e["kind"] == "action_rejected").expect("the rm was refused");
    assert!(rejected["reason"].as_str().unwrap().contains("rm -rf is not allowed by kit"), "{rejected}");
    let weather = events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "weather__forecast").expect("the MCP tool answered");
    assert_eq!(weather["content"], "sunny in Oslo (kit weather)", "{all}");
    // The named agent: a helper with the agent's prompt and only its tools.
    let child = events.iter().find(|e| e["kind"] == "sub_conversations_started").unwrap()["children"][0]["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let child_events = alice.events(&child).await;
    assert_eq!(started(&child_events)["parent"]["agent"]["name"], "reviewer");
    let child_request =
        requests.iter().find(|r| system_prompt(r).contains("REVIEWER-PROMPT-19d")).expect("the helper worked as the reviewer");
    let mut child_tools = tool_names(child_request);
    child_tools.retain(|t| !t.contains("__"));
    child_tools.sort();
    assert_eq!(child_tools, ["file_editor", "finish", "grep", "load_skill"], "Read and Grep, and what every helper has");
    assert!(all.contains("reviewed: fine"), "the helper's answer reached the parent");

    // The plugin's files are the marketplace's again at each run's start: a hook script the
    // agent rewrote in one run (which, in its own sandbox, it can) is back in the next.
    let tamper =
        "for f in \"$HOME\"/.halyard/plugins/kit-*/scripts/no-rm.sh; do printf '#!/bin/sh\\nexit 0\\n' > \"$f\"; done; echo tampered";
    llm.push([
        Reply::tool("terminal", json!({"command": tamper})),
        Reply::tool("terminal", json!({"command": "rm -rf build2"})),
        Reply::finish("tampered"),
        Reply::tool("terminal", json!({"command": "rm -rf build3"})),
        Reply::finish("refused again"),
    ]);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "tamper"})).await;
    alice.wait_finished(&conv, 2).await;
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "once more"})).await;
    let again = alice.wait_finished(&conv, 3).await;
    let blocked = |cmd: &str| {
        let call = again.iter().find(|e| e["kind"] == "action" && e["arguments"]["command"] == cmd).expect("the call");
        again.iter().any(|e| e["kind"] == "action_rejected" && e["tool_call_id"] == call["tool_call_id"])
    };
    assert!(!blocked("rm -rf build2"), "within the run that rewrote it, the script is the agent's");
    assert!(blocked("rm -rf build3"), "the next run has the plugin's own script again");

    // An organization's required plugin stays on for a member who turned it off.
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    alice.add_to_org("acme", &bob, None).await;
    let (s, e) = bob.post("/api/v1/plugins/@acme/marketplaces", json!({"url": url})).await;
    assert_eq!(s, 403, "a member does not change the organization's plugins: {e}");
    assert_eq!(alice.post("/api/v1/plugins/@acme/marketplaces", json!({"url": url})).await.0, 201);
    assert_eq!(alice.post("/api/v1/plugins/@acme/installed", json!({"plugin": "guard@acme-tools"})).await.0, 201);
    let (s, off) = bob.call(Method::PATCH, "/api/v1/plugins/me/installed/guard@acme-tools", Some(json!({"enabled": false}))).await;
    assert_eq!((s, off["enabled"].as_bool()), (200, Some(false)), "an optional plugin can be turned off: {off}");
    let (_, view) = bob.get("/api/v1/plugins/me?org=acme").await;
    assert_eq!(view["effective"], json!([]), "{view}");
    let (s, _) = alice.call(Method::PATCH, "/api/v1/plugins/@acme/installed/guard@acme-tools", Some(json!({"policy": "required"}))).await;
    assert_eq!(s, 200);
    let (s, e) = bob.call(Method::PATCH, "/api/v1/plugins/me/installed/guard@acme-tools", Some(json!({"enabled": false}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (409, Some("plugin_required")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("acme"), "{e}");
    let (_, view) = bob.get("/api/v1/plugins/me?org=acme").await;
    assert_eq!((view["effective"][0]["name"].as_str(), view["effective"][0]["required"].as_bool()), (Some("guard"), Some(true)), "{view}");
    llm.push([Reply::finish("ok")]);
    let (bconv, _) = bob.start_ready(json!({"message": "hello", "org": "acme"})).await;
    let bevents = bob.wait_finished(&bconv, 1).await;
    let bstarted = started(&bevents);
    assert_eq!(
        bstarted["plugins"].as_array().unwrap().iter().map(|p| p["name"].clone()).collect::<Vec<_>>(),
        [json!("guard")],
        "{bstarted}"
    );
    assert!(bstarted["skills"].to_string().contains("HOUSE-RULES-2b8"), "{bstarted}");
    // Outside the organization Bob's own choice holds.
    let (_, view) = bob.get("/api/v1/plugins/me").await;
    assert_eq!(view["effective"], json!([]), "{view}");

    // An update: offered after a refresh, applied only on upgrade.
    market.publish("1.1.0", "Review $1 again, in depth.");
    let (_, before) = alice.get("/api/v1/plugins/me").await;
    assert_eq!(before["installed"][0]["update"], Value::Null, "nothing is offered before a refresh: {before}");
    let (s, m) = alice.post("/api/v1/plugins/me/marketplaces/acme-tools/refresh", json!({})).await;
    assert_eq!(s, 200, "{m}");
    let (_, after) = alice.get("/api/v1/plugins/me").await;
    let kit = &after["installed"][0];
    assert_eq!((kit["version"].as_str(), kit["update"]["version"].as_str()), (Some("1.0.0"), Some("1.1.0")), "{after}");
    let new_commit = kit["update"]["commit"].as_str().unwrap().to_owned();
    assert_ne!(new_commit, first_commit);
    llm.push([Reply::finish("still old")]);
    let (old, _) = alice.start_ready(json!({"message": "/review a.rs"})).await;
    let old_events = alice.wait_finished(&old, 1).await;
    assert_eq!(started(&old_events)["plugins"][0]["commit"].as_str(), Some(first_commit.as_str()), "not applied without a click");
    assert!(old_events.iter().any(|e| e["kind"] == "user_message" && e["text"] == "Review a.rs with care. Focus: a.rs"));
    let (s, up) = alice.post("/api/v1/plugins/me/installed/kit@acme-tools/upgrade", json!({})).await;
    assert_eq!((s, up["version"].as_str(), up["update"].clone()), (200, Some("1.1.0"), Value::Null), "{up}");
    llm.push([Reply::finish("new")]);
    let (new, _) = alice.start_ready(json!({"message": "/review a.rs"})).await;
    let new_events = alice.wait_finished(&new, 1).await;
    assert_eq!(started(&new_events)["plugins"][0]["commit"].as_str(), Some(new_commit.as_str()));
    assert!(new_events.iter().any(|e| e["kind"] == "user_message" && e["text"] == "Review a.rs again, in depth."));

    // A fork of the first conversation reads the files that conversation had, whatever was
    // upgraded since.
    let (s, task) = alice.post(&format!("/api/v1/conversations/{conv}/fork"), json!({"at_seq": 2})).await;
    assert_eq!(s, 202, "{task}");
    let fork = task["conversation_id"].as_str().unwrap().to_owned();
    let forked = alice.wait_events(&fork, "the fork to start", |ev| ev.iter().any(|e| e["kind"] == "conversation_started")).await;
    assert_eq!(started(&forked)["plugins"][0]["commit"].as_str(), Some(first_commit.as_str()), "{:?}", started(&forked));

    // An organization forbids a plugin: its conversations never get it, even a member's own.
    let (s, e) = alice.call(Method::PATCH, "/api/v1/plugins/@acme/installed/kit@acme-tools", Some(json!({"forbidden": true}))).await;
    assert_eq!((s, e["forbidden"].as_bool()), (200, Some(true)), "{e}");
    let (s, mine) = bob.post("/api/v1/plugins/me/installed", json!({"plugin": "kit@acme-tools"})).await;
    assert_eq!(s, 201, "a member installs from the organization's marketplace: {mine}");
    let (_, view) = bob.get("/api/v1/plugins/me?org=acme").await;
    let names: Vec<&str> = view["effective"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["guard"], "{view}");
    let (_, view) = bob.get("/api/v1/plugins/me").await;
    let names: Vec<&str> = view["effective"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["kit"], "outside the organization it is his: {view}");
    let (s, e) = alice.post("/api/v1/plugins/@acme/installed", json!({"plugin": "kit@acme-tools"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (409, Some("plugin_forbidden")), "{e}");

    // The audit trail: installs, the requirement, the upgrade; no token anywhere.
    let (s, trail) = alice.get("/api/v1/admin/audit?action=plugin.").await;
    assert_eq!(s, 200, "{trail}");
    let actions: Vec<(String, String)> = trail["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["action"].as_str().unwrap().to_owned(), r["target"].as_str().unwrap().to_owned()))
        .collect();
    for (action, target) in [
        ("plugin.install", "alice/kit@acme-tools"),
        ("plugin.install", "@acme/guard@acme-tools"),
        ("plugin.change", "@acme/guard@acme-tools"),
        ("plugin.upgrade", "alice/kit@acme-tools"),
        ("plugin.marketplace.refresh", "alice/acme-tools"),
    ] {
        assert!(actions.iter().any(|(a, t)| a == action && t == target), "{action} {target} not in {actions:?}");
    }
    assert!(!trail.to_string().contains(TOKEN));
    assert!(!llm.requests().iter().any(|r| r.to_string().contains(TOKEN)), "the git token reached the LLM");
}
